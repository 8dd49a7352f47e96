//! The preemption service binary killed with SIGKILL at random moments (SPEC section 6: kill
//! any service at any moment), while waiters arrive that it must make room for: nothing it
//! was doing finishes, a sled checkpoint write included (it checkpoints every few entries
//! here). It is restarted on the same checkpoint directory after each kill.
//!
//! Allocation b runs a whole-node job on every node, past its minimum runtime and just past a
//! checkpoint; allocation a, below its share floor, submits whole-node jobs one after another.
//! Nothing places them (no decision service), so each one waits on the GPUs ordered off for
//! it, and the service orders victims for the next. Checked from the log at the end: every
//! order re-derives from the log prefix its basis names (the preemption audit), no job was
//! ordered off twice, every order's victim was killed at its grace deadline (no launcher
//! confirms), and later starts resumed from the checkpoint.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_testkit::events::append;
use fairshare_testkit::process::{
    assert_restarts_resumed, checkpointed, eventually, kill_and_read_stderr, spawn_service,
};
use fairshare_testkit::{NatsServer, Rng};

const CLUSTER: &str = "k";
const NODES: usize = 6;
/// Whole-node waiters of a: three, so b is left at its floor (half the cluster) and no
/// rule takes more of its work.
const WAITERS: usize = 3;

fn submitted(job_id: &str, allocation: &str) -> Body {
    Body::JobSubmitted(pb::JobSubmitted {
        job_id: job_id.into(),
        idempotency_key: format!("k-{job_id}"),
        spec: Some(pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: allocation.into(),
            user: "u".into(),
            gpus: 8,
            min_runtime_s: 60,
            resumable: true,
            ..Default::default()
        }),
        shape: Some(pb::Shape {
            nodes: 1,
            gpus_per_node: 8,
        }),
    })
}

/// The preemption binary for [`CLUSTER`] on `url`, checkpointing into `dir` every 2 entries,
/// with a 1 s grace.
fn spawn(url: &str, dir: &std::path::Path) -> Child {
    let args = checkpointed(url, dir, 2, &["--cluster", CLUSTER, "--grace", "1s"]);
    spawn_service(env!("CARGO_BIN_EXE_fairshare-preemption"), args)
}

#[tokio::test]
async fn killed_with_sigkill_at_random_moments_it_orders_each_victim_once() {
    let (server, js) = NatsServer::with_streams().await;
    let now = SystemClock.now_ms();
    let tree = Body::BudgetTreeSet(pb::BudgetTreeSet {
        cluster: CLUSTER.into(),
        accounts: ["a", "b"]
            .map(|name| pb::Account {
                name: name.into(),
                share: 1,
                children: vec![],
            })
            .to_vec(),
    });
    append(&js, subjects::policy(CLUSTER), now, tree).await;
    // b's work fills every node, started 31 min ago: past its minimum runtime, a minute past
    // its first checkpoint (what a floor order may take).
    let started = now - 31 * 60_000;
    for n in 0..NODES {
        let node = format!("n{n}");
        let registered = Body::NodeRegistered(pb::NodeRegistered {
            cluster: CLUSTER.into(),
            node: node.clone(),
            gpus: 8,
        });
        append(&js, subjects::node(CLUSTER, &node), started, registered).await;
        let job = format!("0190b000-0000-7000-8000-{n:012}");
        let subject = |kind| subjects::job_event(CLUSTER, &job, kind);
        append(&js, subject("job_submitted"), started, submitted(&job, "b")).await;
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: job.clone(),
            nodes: vec![pb::NodeGpus {
                node: node.clone(),
                gpus: 8,
            }],
            basis: None,
        });
        append(&js, subject("job_placed"), started, placed).await;
        let running = Body::JobStarted(pb::JobStarted {
            job_id: job.clone(),
        });
        append(&js, subject("job_started"), started, running).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn(&server.url(), dir.path());
    let mut logs = Vec::new();
    let mut rng = Rng(0x0bad_c0de_5eed_0001);
    let mut kills = 0;
    for i in 0..WAITERS {
        let job = format!("0190c000-0000-7000-8000-{i:012}");
        let subject = subjects::job_event(CLUSTER, &job, "job_submitted");
        append(&js, subject, SystemClock.now_ms(), submitted(&job, "a")).await;
        // Kill twice per waiter, after random moments, and start again.
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(100 + rng.below(700))).await;
            logs.push(kill_and_read_stderr(child));
            kills += 1;
            child = spawn(&server.url(), dir.path());
        }
    }

    // Every waiter gets its victim, killed at its deadline (no launcher confirms).
    eventually(Duration::from_secs(30), || async {
        let entries = fairshare_decision::shell::read_log(&js, CLUSTER, None)
            .await
            .unwrap();
        let killed = entries
            .iter()
            .filter(|e| {
                matches!(&e.event, Ok(e) if matches!(
                    e.body,
                    Some(Body::JobPreempted(pb::JobPreempted { killed: true, .. }))
                ))
            })
            .count();
        if killed >= WAITERS {
            Ok(())
        } else {
            Err(format!("{killed} of {WAITERS} victims killed"))
        }
    })
    .await;
    // Time for a restarted incarnation to order a victim twice, if it were to.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    logs.push(kill_and_read_stderr(child));
    let entries = fairshare_decision::shell::read_log(&js, CLUSTER, None)
        .await
        .unwrap();

    let mut ordered: BTreeMap<String, usize> = BTreeMap::new();
    let mut for_jobs: BTreeMap<String, usize> = BTreeMap::new();
    for e in &entries {
        if let Ok(pb::Event {
            body: Some(Body::PreemptionOrdered(o)),
            ..
        }) = &e.event
        {
            *ordered.entry(o.job_id.clone()).or_default() += 1;
            *for_jobs.entry(o.for_job_id.clone()).or_default() += 1;
        }
    }
    assert_eq!(
        for_jobs.len(),
        WAITERS,
        "one victim per waiter: {for_jobs:?}"
    );
    assert!(
        ordered.values().all(|n| *n == 1) && for_jobs.values().all(|n| *n == 1),
        "ordered twice: {ordered:?} {for_jobs:?}"
    );
    let policy = fairshare_preemption::domain::Config {
        grace_ms: 1_000,
        ..Default::default()
    };
    let audit = fairshare_preemption::shell::audit(CLUSTER, &entries, &policy);
    assert!(audit.is_clean(), "{}", audit.render(CLUSTER));
    assert_eq!(audit.orders, WAITERS);
    let resumed = assert_restarts_resumed(&logs);
    eprintln!(
        "sigkill: {kills} kills, {resumed} starts resumed from a checkpoint, {} entries, {} orders in {} passes",
        entries.len(),
        audit.orders,
        audit.passes
    );
}
