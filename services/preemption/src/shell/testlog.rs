//! A generated log of cluster `c`, written the way the services write it, for the shell's
//! tests (the checkpoint's fold and the order audit).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use fairshare_decision::domain::decide;
use fairshare_decision::domain::state::JobStatus;
use fairshare_events::headers::TraceParent;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_runtime::log::LogEntry;

use super::ShellFold;
use crate::domain::{Config, decide_preemptions, into_events, stamp_cycle};
use fairshare_testkit::Rng;

/// The subject a writer appends `event` of cluster `c` on.
fn subject_of(event: &pb::Event) -> String {
    match &event.body {
        Some(Body::BudgetTreeSet(_)) => subjects::policy("c"),
        Some(Body::UsageSnapshot(_)) => subjects::usage("c"),
        Some(Body::MaintenanceScheduled(_)) => subjects::maintenance("c"),
        Some(
            Body::NodeRegistered(pb::NodeRegistered { node, .. })
            | Body::NodeCordoned(pb::NodeCordoned { node, .. })
            | Body::NodeUncordoned(pb::NodeUncordoned { node, .. })
            | Body::NodeDrained(pb::NodeDrained { node, .. }),
        ) => subjects::node("c", node),
        Some(
            Body::JobSubmitted(pb::JobSubmitted { job_id, .. })
            | Body::JobPlaced(pb::JobPlaced { job_id, .. })
            | Body::JobStarted(pb::JobStarted { job_id })
            | Body::JobFinished(pb::JobFinished { job_id, .. })
            | Body::PreemptionOrdered(pb::PreemptionOrdered { job_id, .. })
            | Body::JobPreempted(pb::JobPreempted { job_id, .. })
            | Body::JobRequeued(pb::JobRequeued { job_id }),
        ) => subjects::job_event("c", job_id, codec::event_kind(event)),
        other => panic!("no subject for {other:?}"),
    }
}

/// A log of cluster `c` as the services would write it: budget tree, nodes, a usage
/// snapshot that makes `a` over-served, a cordon and its uncordon, a maintenance window,
/// submissions of both allocations, placements decided by the decision domain, starts,
/// ends, and every preemption output (orders, confirmations by the launcher, kills at the
/// deadline, requeues, drains) decided by [`decide_preemptions`] on the fold so far; plus
/// another cluster's event and an undecodable entry.
pub(crate) fn generated_log() -> Vec<LogEntry> {
    let mut rng = Rng(0x0bad_cafe_f00d_0007);
    let config = Config::default();
    let mut driver = ShellFold::new("c");
    let mut log = Vec::new();
    fn push(
        log: &mut Vec<LogEntry>,
        driver: &mut ShellFold,
        subject: String,
        event: Result<pb::Event, fairshare_events::DecodeError>,
    ) {
        let sequence = log.len() as u64 + 1;
        // Every other entry traced, so the checkpoint must carry the jobs' contexts.
        let trace = sequence.is_multiple_of(2).then_some(TraceParent {
            trace_id: u128::from(sequence),
            parent_id: sequence,
            flags: 1,
        });
        let e = LogEntry {
            sequence,
            subject,
            event,
            pending: 0,
            trace,
            stored_ms: None,
        };
        driver.apply(&e);
        log.push(e);
    }
    fn emit(log: &mut Vec<LogEntry>, driver: &mut ShellFold, at_ms: i64, body: Body) {
        let event = pb::Event {
            at_ms,
            body: Some(body),
        };
        push(log, driver, subject_of(&event), Ok(event));
    }
    let leaf = |name: &str| pb::Account {
        name: name.into(),
        share: 1,
        children: vec![],
    };
    emit(
        &mut log,
        &mut driver,
        0,
        Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: "c".into(),
            accounts: vec![leaf("a"), leaf("b")],
        }),
    );
    for n in 0..6 {
        let body = Body::NodeRegistered(pb::NodeRegistered {
            cluster: "c".into(),
            node: format!("n{n}"),
            gpus: 8,
        });
        emit(&mut log, &mut driver, 0, body);
    }
    let day = 24 * 3_600_000u64;
    let usage = Body::UsageSnapshot(pb::UsageSnapshot {
        cluster: "c".into(),
        window_end_ms: 0,
        window_ms: 7 * day as i64,
        through_sequence: 0,
        allocations: vec![
            pb::AllocationUsage {
                allocation: "a".into(),
                charged_gpu_ms: 48 * day * 3,
                allocated_gpu_ms: 48 * day * 7,
            },
            pb::AllocationUsage {
                allocation: "b".into(),
                charged_gpu_ms: 0,
                allocated_gpu_ms: 48 * day * 7,
            },
        ],
        unallocated_gpu_ms: 0,
    });
    emit(&mut log, &mut driver, 0, usage);
    let mut jobs: Vec<String> = Vec::new();
    let mut cycle = 0u64;
    for round in 0..80i64 {
        let now = round * 20_000;
        // `a` fills the cluster early; `b` arrives later and is under-served.
        let submissions = if round < 10 { 6 } else { 2 };
        for _ in 0..submissions {
            let job = format!("j{:04}", jobs.len());
            let allocation = if round < 10 || rng.below(3) == 0 {
                "a"
            } else {
                "b"
            };
            let gpus = [1u32, 2, 4, 8][rng.below(4) as usize];
            let body = Body::JobSubmitted(pb::JobSubmitted {
                job_id: job.clone(),
                spec: Some(pb::JobSpec {
                    cluster: "c".into(),
                    allocation: allocation.into(),
                    gpus: i64::from(gpus),
                    min_runtime_s: [0, 30, 600][rng.below(3) as usize],
                    resumable: rng.below(3) != 0,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: 1,
                    gpus_per_node: gpus,
                }),
                ..Default::default()
            });
            emit(&mut log, &mut driver, now, body);
            jobs.push(job);
        }
        match round {
            15 => emit(
                &mut log,
                &mut driver,
                now,
                Body::NodeCordoned(pb::NodeCordoned {
                    cluster: "c".into(),
                    node: "n2".into(),
                    reason: "disk".into(),
                }),
            ),
            40 => emit(
                &mut log,
                &mut driver,
                now,
                Body::NodeUncordoned(pb::NodeUncordoned {
                    cluster: "c".into(),
                    node: "n2".into(),
                }),
            ),
            20 => emit(
                &mut log,
                &mut driver,
                now,
                Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                    cluster: "c".into(),
                    nodes: vec!["n4".into()],
                    start_ms: now + 120_000,
                    end_ms: now + 600_000,
                    reason: "firmware".into(),
                }),
            ),
            30 => {
                // Noise the fold must skip the same way on every replay.
                let event = pb::Event {
                    at_ms: now,
                    body: Some(Body::NodeRegistered(pb::NodeRegistered {
                        cluster: "other".into(),
                        node: "x".into(),
                        gpus: 8,
                    })),
                };
                push(
                    &mut log,
                    &mut driver,
                    subjects::node("other", "x"),
                    Ok(event),
                );
                let garbage = codec::decode_event(b"\xff\xff\xff").map(|_| unreachable!());
                push(&mut log, &mut driver, subjects::node("c", "n0"), garbage);
            }
            _ => {}
        }
        // The launcher: starts placements, confirms some orders, ends some jobs.
        for job in &jobs {
            let Some(j) = driver.state().decision().job(job) else {
                continue;
            };
            let JobStatus::Placed(p) = &j.status else {
                continue;
            };
            let roll = rng.below(100);
            let body = if !p.started {
                Body::JobStarted(pb::JobStarted {
                    job_id: job.clone(),
                })
            } else if p.preempt_deadline_ms.is_some() && roll < 50 {
                Body::JobPreempted(pb::JobPreempted {
                    job_id: job.clone(),
                    killed: false,
                })
            } else if roll < 4 {
                Body::JobFinished(pb::JobFinished {
                    job_id: job.clone(),
                    exit_code: 0,
                })
            } else {
                continue;
            };
            emit(&mut log, &mut driver, now + 1, body);
        }
        // The decision service.
        cycle += 1;
        for event in decide(driver.state().decision(), now + 2).events(cycle) {
            if let Some(body) = event.body {
                emit(&mut log, &mut driver, now + 2, body);
            }
        }
        // The preemption service.
        let mut bodies = decide_preemptions(driver.state(), now + 3, &config);
        stamp_cycle(&mut bodies, driver.last_cycle().saturating_add(1));
        for event in into_events(bodies, now + 3) {
            if let Some(body) = event.body {
                emit(&mut log, &mut driver, now + 3, body);
            }
        }
    }
    log
}
