//! The CLI at its edges. `fairshare tail`: a reader that goes away (`fairshare tail | head -1`)
//! ends the command quietly with status 141, as a closed pipe ends other Unix tools, not with a
//! panic and a backtrace; a kind it could never show is refused. A question to a service that
//! nothing serves names the missing service.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common::{server_with, simulated_log};

#[test]
fn tail_into_a_reader_that_leaves_early_exits_quietly() {
    let (cluster, log) = simulated_log("share-change");
    let server = server_with(&cluster, &log);
    // Far more than a pipe buffers (64 KiB), so the command is still writing when the
    // reader leaves, however fast it ran.
    assert!(log.len() > 2_000, "{} events", log.len());
    let mut child = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--no-follow", "--nats-url", &server.url()])
        .args(["--cluster", &cluster])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("#1 "), "{first}");
    // The reader is gone (dropped above); the rest of the log cannot be written.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

/// A kind `tail` could never show (a typo) is refused with the kinds there are, rather than
/// matching nothing and ending quietly.
#[test]
fn tail_refuses_an_unknown_kind() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--no-follow", "--kind", "job_place"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("job_placed"), "{stderr}");
}

/// `explain` and `status` for a cluster nothing serves (a typo, or its service is down) say
/// which service did not answer, not NATS's bare "no responders".
#[test]
fn a_question_nobody_answers_names_the_missing_service() {
    let server = fairshare_testkit::NatsServer::start().unwrap();
    for (args, who) in [
        (
            vec!["explain", "--cluster", "nowhere", "some-job"],
            "the decision service of cluster nowhere",
        ),
        (
            vec!["status", "--cluster", "nowhere"],
            "the accounting service of cluster nowhere",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
            .args(&args)
            .args(["--nats-url", &server.url()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.contains(&format!("nothing answers for {who}")),
            "{args:?}: {stderr}"
        );
    }
}
