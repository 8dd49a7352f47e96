//! `fairshare tail` shows every entry of the log, the ones the services fold as empty too:
//! an event of a kind this build does not know (or with no body) is of kind `unknown`, bytes
//! that do not decode or an event filed on a subject it does not belong to are `unusable`;
//! `--kind` filters them like any other kind, and `--json` prints them as JSON lines with the
//! reason, so a JSON reader sees no gap in the sequences.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;

use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_testkit::NatsServer;

const CLUSTER: &str = "c1";

/// A server whose log holds, in order: a node registration (usable), bytes that are no
/// protobuf, an event with no body, and a node registration filed under a job's subject.
fn server() -> NatsServer {
    crate::common::server_then(|js| async move {
        let registered = pb::Event {
            at_ms: 1_000,
            body: Some(Body::NodeRegistered(pb::NodeRegistered {
                cluster: CLUSTER.into(),
                node: "n1".into(),
                gpus: 8,
            })),
        };
        let job = subjects::job_event(CLUSTER, "j1", "job_started");
        let entries = [
            (subjects::node(CLUSTER, "n1"), codec::encode(&registered)),
            (job.clone(), bytes::Bytes::from_static(b"\xff\xff\xff")),
            (
                job.clone(),
                codec::encode(&pb::Event {
                    at_ms: 2_000,
                    body: None,
                }),
            ),
            (job, codec::encode(&registered)),
        ];
        for (subject, payload) in entries {
            js.publish(subject, payload).await.unwrap().await.unwrap();
        }
    })
}

fn tail(server: &NatsServer, extra: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--no-follow", "--nats-url", &server.url()])
        .args(extra)
        .env_remove("FAIRSHARE_CLUSTER")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_entry_is_shown_and_filtered_by_kind_the_unusable_ones_too() {
    let server = server();
    let lines = tail(&server, &["--json"]);
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(u64, &str)> = parsed
        .iter()
        .map(|v| (v["sequence"].as_u64().unwrap(), v["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            (1, "node_registered"),
            (2, "unusable"),
            (3, "unknown"),
            (4, "unusable")
        ]
    );
    assert!(parsed[0]["event"].is_object());
    for v in &parsed[1..] {
        let error = v["error"].as_str().unwrap();
        assert!(error.starts_with("folded as empty"), "{error}");
    }
    assert!(parsed[3]["error"].as_str().unwrap().contains("misfiled"));

    let unusable = tail(&server, &["--kind", "unusable"]);
    assert_eq!(unusable.len(), 2, "{unusable:?}");
    assert!(unusable[0].starts_with("#2 ") && unusable[1].starts_with("#4 "));
    assert_eq!(tail(&server, &["--kind", "unknown"]).len(), 1);
    let registered = tail(&server, &["--kind", "node_registered"]);
    assert_eq!(registered.len(), 1, "{registered:?}");
    // Human lines keep their columns whether or not a time has milliseconds.
    let human = tail(&server, &[]);
    let column = |l: &str| l.find(" node_registered").or_else(|| l.find(" unusable"));
    assert_eq!(column(&human[0]), column(&human[1]), "{human:?}");
    // In words, not a struct dump.
    assert!(human[0].ends_with("node n1 of c1: 8 GPUs"), "{human:?}");
}

#[test]
fn a_cluster_with_no_events_is_said_to_have_none() {
    let server = server();
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--no-follow", "--nats-url", &server.url()])
        .args(["--cluster", "nosuch"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("no events of cluster \"nosuch\" in the log (is the name right?)"),
        "{said}"
    );
}

/// `--job` takes that job's events only, in any cluster or in the one named; an id with no
/// events is said to have none, and something that is no subject token is refused before
/// anything is read (it would filter other subjects).
#[test]
fn a_job_is_followed_by_its_id_alone() {
    let server = server();
    let job = tail(&server, &["--job", "j1"]);
    assert_eq!(job.len(), 3, "{job:?}");
    assert!(job.iter().all(|l| l.contains(".job.j1.")), "{job:?}");
    let in_cluster = tail(&server, &["--job", "j1", "--cluster", CLUSTER]);
    assert_eq!(in_cluster, job);
    assert!(tail(&server, &["--job", "j1", "--cluster", "c2"]).is_empty());

    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--no-follow", "--nats-url", &server.url()])
        .args(["--job", "j2"])
        .env_remove("FAIRSHARE_CLUSTER")
        .output()
        .unwrap();
    assert!(out.status.success() && out.stdout.is_empty());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no events of job \"j2\""), "{said}");

    for bad in ["j1.*", ">", "a b"] {
        let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
            .args(["tail", "--no-follow", "--nats-url", &server.url()])
            .args(["--job", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("is not a job id"), "{bad}: {said}");
    }
}

/// A server whose log holds three jobs' lives, on `c1`: `done` submitted and cancelled;
/// `once` (not resumable) submitted, placed and preempted; `again` (resumable) submitted and
/// preempted (its requeue not written yet).
fn lives() -> NatsServer {
    crate::common::server_then(|js| async move {
        let submitted = |id: &str, resumable: bool| {
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: id.into(),
                idempotency_key: format!("k-{id}"),
                spec: Some(pb::JobSpec {
                    cluster: CLUSTER.into(),
                    allocation: "a".into(),
                    gpus: 1,
                    min_runtime_s: 60,
                    resumable,
                    ..Default::default()
                }),
                shape: None,
            })
        };
        let preempted = |id: &str| {
            Body::JobPreempted(pb::JobPreempted {
                job_id: id.into(),
                killed: false,
            })
        };
        let entries = [
            ("done", "job_submitted", submitted("done", true)),
            (
                "done",
                "job_cancelled",
                Body::JobCancelled(pb::JobCancelled {
                    job_id: "done".into(),
                    reason: "by hand".into(),
                    ..Default::default()
                }),
            ),
            ("once", "job_submitted", submitted("once", false)),
            ("once", "job_preempted", preempted("once")),
            ("again", "job_submitted", submitted("again", true)),
            ("again", "job_preempted", preempted("again")),
        ];
        for (job, kind, body) in entries {
            let event = pb::Event {
                at_ms: 1_000,
                body: Some(body),
            };
            let subject = subjects::job_event(CLUSTER, job, kind);
            js.publish(subject, codec::encode(&event))
                .await
                .unwrap()
                .await
                .unwrap();
        }
    })
}

/// `tail --job` without --no-follow: its exit status and lines if it ended by itself within
/// `wait`, or None if it was still following then.
fn follow(
    server: &NatsServer,
    job: &str,
    wait: std::time::Duration,
) -> Option<(bool, Vec<String>)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--job", job, "--nats-url", &server.url()])
        .env_remove("FAIRSHARE_CLUSTER")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let lines = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned)
                .collect();
            return Some((out.status.success(), lines));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    let _ = child.wait();
    None
}

#[test]
fn a_followed_job_stops_where_its_life_ends() {
    let server = lives();
    let long = std::time::Duration::from_secs(20);
    // Cancelled: the tail prints the job's two events and ends, status 0.
    let (ok, lines) = follow(&server, "done", long).expect("the tail of a cancelled job ends");
    assert!(ok, "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].contains("job_cancelled"), "{lines:?}");
    // Preempted, and its submission said it cannot resume: nothing follows.
    let (ok, lines) = follow(&server, "once", long).expect("a preempted one-shot job has ended");
    assert!(ok && lines.len() == 2, "{lines:?}");
    // Preempted but resumable: its requeue is still to come, so the tail keeps following.
    assert_eq!(
        follow(&server, "again", std::time::Duration::from_millis(1_500)),
        None,
        "a resumable job lives on after a preemption"
    );
}

/// A following `tail` reads on across a restart of the server and shows what is written after
/// it. (Here the client reconnects without the log reader reporting an error; one it does
/// report, other than the stream being made anew, is now printed and read past, as the
/// services do, where it used to end the command: that path has no test of its own.)
#[test]
fn a_tail_reads_on_across_a_server_restart() {
    let mut server = server();
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("tail.out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--cluster", CLUSTER, "--nats-url", &server.url()])
        .env_remove("FAIRSHARE_CLUSTER")
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let shown = |what: &str| {
        std::fs::read_to_string(&out_path)
            .unwrap_or_default()
            .contains(what)
    };
    let wait_for = |what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !shown(what) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        shown(what)
    };
    assert!(wait_for("node n1"), "the log so far");
    server.restart().unwrap();
    let registered = pb::Event {
        at_ms: 3_000,
        body: Some(Body::NodeRegistered(pb::NodeRegistered {
            cluster: CLUSTER.into(),
            node: "n2".into(),
            gpus: 4,
        })),
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        js.publish(subjects::node(CLUSTER, "n2"), codec::encode(&registered))
            .await
            .unwrap()
            .await
            .unwrap();
    });
    let read_on = wait_for("node n2");
    let still_following = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(
        read_on,
        "written after the restart: {}",
        std::fs::read_to_string(&out_path).unwrap_or_default()
    );
    assert!(still_following, "the tail is still following");
}

/// Following a job the log holds nothing of says so at once, then waits: a mistyped id (or a
/// `FAIRSHARE_CLUSTER` that is not the job's) waited for ever without a word.
#[test]
fn following_a_job_with_no_events_says_so_while_it_waits() {
    use std::io::BufRead;
    let server = server();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["tail", "--job", "j9", "--nats-url", &server.url()])
        .env_remove("FAIRSHARE_CLUSTER")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let said = rx.recv_timeout(std::time::Duration::from_secs(10));
    let still_following = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    let _ = child.wait();
    let said = said.expect("a note on stderr");
    assert!(
        said.contains("no events of job \"j9\"") && said.contains("waiting"),
        "{said}"
    );
    assert!(still_following, "it follows on");
}
