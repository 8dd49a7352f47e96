//! A service's log written to a file or a pipe is plain text: no terminal colour codes, so
//! operators' `grep ' WARN '` over `.run/logs/*.log` finds what it should.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn a_log_written_to_a_pipe_carries_no_colour_codes() {
    // Port 1 answers nobody: the service logs its start, then keeps trying to connect.
    let mut child = Command::new(env!("CARGO_BIN_EXE_fairshare-decision"))
        .args(["--nats-url", "nats://127.0.0.1:1", "--cluster", "plain"])
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the decision service");
    let stderr = child.stderr.take().expect("its stderr");
    let mut first = String::new();
    let read = BufReader::new(stderr).read_line(&mut first);
    let _ = child.kill();
    let _ = child.wait();
    read.expect("read its first log line");
    assert!(
        first.contains("INFO") && first.contains("starting"),
        "{first:?}"
    );
    assert!(!first.contains('\u{1b}'), "colour codes in {first:?}");
    assert!(first.contains(" INFO "), "{first:?}");
}
