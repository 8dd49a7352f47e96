//! The accounting service binary killed with SIGKILL at random moments (SPEC section 6: kill
//! any service at any moment; rebuilt state equal to a from-scratch fold) while jobs start and
//! finish: nothing it was doing finishes, a checkpoint write included (it checkpoints every
//! few entries here). It is restarted on the same checkpoint directory after each kill.
//!
//! Checked from the log at the end: every usage snapshot, written by whichever incarnation,
//! re-derives from the log prefix it names with a fold from scratch (the accounting audit
//! `fairshare audit` runs), including one past the last job event; the last start resumed from
//! the checkpoint.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Child;
use std::time::Duration;

use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_runtime::log::{Follower, LogEntry};
use fairshare_testkit::events::{append, node_registered, one_allocation_tree, one_gpu_submitted};
use fairshare_testkit::process::{
    assert_restarts_resumed, checkpointed, eventually, kill_and_read_stderr, spawn_service,
};
use fairshare_testkit::{NatsServer, Rng};

const CLUSTER: &str = "k";
const JOBS: usize = 30;

/// The accounting binary for [`CLUSTER`] on `url`, checkpointing into `dir` every 2 entries
/// and snapshotting usage every 200 ms.
fn spawn(url: &str, dir: &std::path::Path) -> Child {
    let args = checkpointed(
        url,
        dir,
        2,
        &["--cluster", CLUSTER, "--snapshot-every", "200ms"],
    );
    spawn_service(env!("CARGO_BIN_EXE_fairshare-accounting"), args)
}

/// The cluster's log, in order.
async fn read_log(js: &async_nats::jetstream::Context) -> Vec<LogEntry> {
    let mut follower = Follower::start(js, 1, vec![subjects::cluster_events(CLUSTER)])
        .await
        .unwrap();
    let mut entries = Vec::new();
    follower.catch_up(|e| entries.push(e)).await.unwrap();
    entries
}

#[tokio::test]
async fn killed_with_sigkill_at_random_moments_every_snapshot_re_derives() {
    let (server, js) = NatsServer::with_streams().await;
    let now = || SystemClock.now_ms();
    let tree = one_allocation_tree(CLUSTER, "a");
    append(&js, subjects::policy(CLUSTER), now(), tree).await;
    let node = node_registered(CLUSTER, "n0", 8);
    append(&js, subjects::node(CLUSTER, "n0"), now(), node).await;

    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn(&server.url(), dir.path());
    let mut logs = Vec::new();
    let mut rng = Rng(0x0acc_0c0a_5eed_0001);
    // Jobs start one after another and each finishes four jobs later: at most 4 of the 8
    // GPUs busy, so every job starts at once.
    for i in 0..JOBS {
        let job = format!("0190d000-0000-7000-8000-{i:012}");
        let subject = |kind| subjects::job_event(CLUSTER, &job, kind);
        let key = format!("k-{i}");
        let submitted = one_gpu_submitted(CLUSTER, "a", &job, &key);
        append(&js, subject("job_submitted"), now(), submitted).await;
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: job.clone(),
            nodes: vec![pb::NodeGpus {
                node: "n0".into(),
                gpus: 1,
            }],
            basis: None,
        });
        append(&js, subject("job_placed"), now(), placed).await;
        let started = Body::JobStarted(pb::JobStarted {
            job_id: job.clone(),
        });
        append(&js, subject("job_started"), now(), started).await;
        if i >= 4 {
            let done = format!("0190d000-0000-7000-8000-{:012}", i - 4);
            let finished = Body::JobFinished(pb::JobFinished {
                job_id: done.clone(),
                exit_code: 0,
            });
            let subject = subjects::job_event(CLUSTER, &done, "job_finished");
            append(&js, subject, now(), finished).await;
        }
        tokio::time::sleep(Duration::from_millis(50 + rng.below(100))).await;
        if rng.below(5) == 0 {
            logs.push(kill_and_read_stderr(child));
            child = spawn(&server.url(), dir.path());
        }
    }
    let kills = logs.len();
    assert!(kills >= 3, "only {kills} kills");

    // The last incarnation snapshots past the last job event. A snapshot may already be the
    // log's last entry: the fold does not follow snapshots, so none is ever through it.
    let last_job_event = read_log(&js)
        .await
        .iter()
        .rev()
        .find(|e| {
            !matches!(
                &e.event,
                Ok(pb::Event {
                    body: Some(Body::UsageSnapshot(_)),
                    ..
                })
            )
        })
        .unwrap()
        .sequence;
    eventually(Duration::from_secs(30), || async {
        let past = read_log(&js).await.iter().any(|e| {
            matches!(&e.event, Ok(pb::Event { body: Some(Body::UsageSnapshot(s)), .. })
                if s.through_sequence >= last_job_event)
        });
        if past {
            Ok(())
        } else {
            Err(format!(
                "no usage snapshot through sequence {last_job_event}"
            ))
        }
    })
    .await;
    logs.push(kill_and_read_stderr(child));

    let entries = read_log(&js).await;
    let audit = fairshare_accounting::shell::audit::audit(CLUSTER, &entries);
    assert!(audit.is_clean(), "{:#?}", audit.divergences);
    assert!(audit.snapshots >= 5, "{} snapshots", audit.snapshots);
    let resumed = assert_restarts_resumed(&logs);
    eprintln!(
        "sigkill: {kills} kills, {resumed} starts resumed from a checkpoint, {} entries, {} snapshots re-derived",
        entries.len(),
        audit.snapshots
    );
}
