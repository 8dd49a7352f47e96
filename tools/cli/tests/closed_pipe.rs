//! A reader that goes away (`fairshare tail | head -1`) ends the command quietly with status
//! 141, as a closed pipe ends other Unix tools, not with a panic and a backtrace.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use fairshare_sim::engine::{self, EngineConfig};
use fairshare_sim::scenarios;
use fairshare_testkit::NatsServer;

#[test]
fn tail_into_a_reader_that_leaves_early_exits_quietly() {
    let s = scenarios::by_name("share-change").unwrap().unwrap();
    let log = engine::run(&s.setup, &s.workload, &EngineConfig::default(), |_| {}).log;
    let server = NatsServer::start().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        fairshare_sim::load::load_log(&js, &s.setup.cluster, &log)
            .await
            .unwrap();
    });
    // Far more than a pipe buffers (64 KiB), so the command is still writing when the
    // reader leaves, however fast it ran.
    assert!(log.len() > 2_000, "{} events", log.len());
    let mut child = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--no-follow", "--nats-url", &server.url()])
        .args(["--cluster", &s.setup.cluster])
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
