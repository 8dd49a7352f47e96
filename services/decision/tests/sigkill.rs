//! The decision service binary killed with SIGKILL at random moments (SPEC section 6: kill
//! any service at any moment), a process kill this time: nothing it was doing finishes, a
//! sled checkpoint write included (it checkpoints every few entries here, so kills land
//! between, and sometimes inside, writes). Submissions keep arriving in the log meanwhile;
//! it is restarted on the same checkpoint directory after each kill.
//!
//! Checked from the log at the end: every job was placed exactly once, every placement
//! re-derives from the log prefix its basis names and no node is over-committed (the
//! decision audit), and later starts resumed from the checkpoint rather than folding the
//! log from the beginning.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_testkit::events::append;
use fairshare_testkit::process::{
    assert_restarts_resumed, checkpointed, eventually, kill_and_read_stderr, spawn_service,
};
use fairshare_testkit::{NatsServer, Rng};

const CLUSTER: &str = "k";
const JOBS: usize = 40;

fn now() -> i64 {
    fairshare_runtime::clock::Clock::now_ms(&fairshare_runtime::clock::SystemClock)
}

/// The decision binary for [`CLUSTER`] on `url`, checkpointing into `dir` every 3 entries.
fn spawn(url: &str, dir: &std::path::Path) -> Child {
    let args = checkpointed(url, dir, 3, &["--cluster", CLUSTER]);
    spawn_service(env!("CARGO_BIN_EXE_fairshare-decision"), args)
}

#[tokio::test]
async fn killed_with_sigkill_at_random_moments_it_places_every_job_once() {
    let (server, js) = NatsServer::with_streams().await;
    let tree = Body::BudgetTreeSet(pb::BudgetTreeSet {
        cluster: CLUSTER.into(),
        accounts: vec![
            pb::Account {
                name: "a".into(),
                share: 1,
                children: vec![],
            },
            pb::Account {
                name: "b".into(),
                share: 1,
                children: vec![],
            },
        ],
    });
    append(&js, subjects::policy(CLUSTER), now(), tree).await;
    for n in 0..6 {
        let node = format!("n{n}");
        let registered = Body::NodeRegistered(pb::NodeRegistered {
            cluster: CLUSTER.into(),
            node: node.clone(),
            gpus: 8,
        });
        append(&js, subjects::node(CLUSTER, &node), now(), registered).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn(&server.url(), dir.path());
    let mut logs = Vec::new();
    let mut rng = Rng(0x5161_c111_0de5_eed5);
    let mut kills = 0;
    // 40 one-GPU jobs of 30 min protection on 48 GPUs: each is placed, at once, exactly once.
    for i in 0..JOBS {
        let job_id = format!("0190a000-0000-7000-8000-{i:012}");
        let submitted = Body::JobSubmitted(pb::JobSubmitted {
            job_id: job_id.clone(),
            idempotency_key: format!("k-{i}"),
            spec: Some(pb::JobSpec {
                cluster: CLUSTER.into(),
                allocation: if i % 2 == 0 { "a" } else { "b" }.into(),
                user: "u".into(),
                gpus: 1,
                min_runtime_s: 1800,
                resumable: true,
                ..Default::default()
            }),
            shape: Some(pb::Shape {
                nodes: 1,
                gpus_per_node: 1,
            }),
        });
        let subject = subjects::job_event(CLUSTER, &job_id, "job_submitted");
        append(&js, subject, now(), submitted).await;
        tokio::time::sleep(Duration::from_millis(20 + rng.below(60))).await;
        // About every eighth submission, a SIGKILL after a random moment, and a restart.
        if rng.below(8) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
            logs.push(kill_and_read_stderr(child));
            kills += 1;
            child = spawn(&server.url(), dir.path());
        }
    }
    assert!(kills >= 3, "only {kills} kills");

    // Every job placed, once; the placements re-derive from the log.
    eventually(Duration::from_secs(30), || async {
        let entries = fairshare_decision::shell::read_log(&js, CLUSTER, None)
            .await
            .unwrap();
        let placed = entries
            .iter()
            .filter(|e| matches!(&e.event, Ok(e) if matches!(e.body, Some(Body::JobPlaced(_)))))
            .count();
        if placed >= JOBS {
            Ok(())
        } else {
            Err(format!("{placed} of {JOBS} placed"))
        }
    })
    .await;
    // Give a restarted incarnation time to place a job twice, if it were to.
    tokio::time::sleep(Duration::from_millis(500)).await;
    logs.push(kill_and_read_stderr(child));
    let entries = fairshare_decision::shell::read_log(&js, CLUSTER, None)
        .await
        .unwrap();
    let mut placements: BTreeMap<String, usize> = BTreeMap::new();
    for e in &entries {
        if let Ok(pb::Event {
            body: Some(Body::JobPlaced(p)),
            ..
        }) = &e.event
        {
            *placements.entry(p.job_id.clone()).or_default() += 1;
        }
    }
    assert_eq!(placements.len(), JOBS, "every job placed");
    assert!(
        placements.values().all(|n| *n == 1),
        "placed twice: {:?}",
        placements
            .iter()
            .filter(|(_, n)| **n > 1)
            .collect::<Vec<_>>()
    );
    let audit = fairshare_decision::shell::audit(CLUSTER, &entries);
    assert!(
        audit.is_clean(),
        "{:#?} {:#?}",
        audit.divergences,
        audit.overcommits
    );
    assert_eq!(audit.placements, JOBS);
    let resumed = assert_restarts_resumed(&logs);
    eprintln!(
        "sigkill: {kills} kills, {resumed} starts resumed from a checkpoint, {} entries, {} placements in {} cycles",
        entries.len(),
        audit.placements,
        audit.cycles
    );
}
