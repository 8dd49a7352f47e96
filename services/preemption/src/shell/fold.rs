//! Folding one cluster's log entries into the preemption state, plus what the shell needs to
//! publish safely: the stream sequence of each live job's newest event (the expected last
//! sequence over the job's subjects), each node's newest event and the sequence of its last
//! cordon (the message id of its `NodeDrained`), and the highest cycle named by any
//! `PreemptionOrdered` folded (so cycle numbers keep growing across restarts), and each live
//! job's newest W3C trace context (the parent of an order's span, kept across restarts from a
//! checkpoint).
//!
//! Entries whose bytes do not decode are folded as an event without a body: they change nothing
//! but advance the last applied sequence, exactly as on every replay.

use std::collections::HashMap;

use fairshare_events::headers::TraceParent;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::log::LogEntry;
use serde::{Deserialize, Serialize};

use fairshare_decision::domain::Ignored;

use crate::domain::PreemptionState;

/// An event without a body, folded in place of entries that do not decode.
const UNDECODABLE: pb::Event = pb::Event {
    at_ms: 0,
    body: None,
};

/// One cluster's preemption state plus the per-job and per-node sequences.
///
/// Serializable for the shell's sled checkpoint: a fold restored from its bytes and then fed
/// the rest of the log equals the fold that was fed the whole log (see the tests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellFold {
    state: PreemptionState,
    /// `fairshare.events.<cluster>.job.`
    job_prefix: String,
    /// `fairshare.events.<cluster>.node.`
    node_prefix: String,
    job_sequences: HashMap<String, u64>,
    node_sequences: HashMap<String, u64>,
    cordon_sequences: HashMap<String, u64>,
    last_cycle: u64,
    /// Each live job's trace context: that of the newest event the state took for it.
    traces: HashMap<String, TraceParent>,
}

impl ShellFold {
    /// An empty fold for `cluster`.
    pub fn new(cluster: &str) -> Self {
        Self {
            state: PreemptionState::new(cluster),
            job_prefix: format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX),
            node_prefix: format!("{}.{cluster}.node.", subjects::EVENTS_PREFIX),
            job_sequences: HashMap::new(),
            node_sequences: HashMap::new(),
            cordon_sequences: HashMap::new(),
            last_cycle: 0,
            traces: HashMap::new(),
        }
    }

    /// The cluster this fold follows.
    pub fn cluster(&self) -> &str {
        self.state.cluster()
    }

    /// Whether this fold is one [`ShellFold::new`]`(cluster)` would start: same cluster, same
    /// job and node subject prefixes. A checkpoint that is not is not used.
    pub fn is_for(&self, cluster: &str) -> bool {
        self.state.cluster() == cluster
            && self.job_prefix == format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX)
            && self.node_prefix == format!("{}.{cluster}.node.", subjects::EVENTS_PREFIX)
    }

    /// The trace context of live job `job_id`'s newest traced entry.
    pub fn job_trace(&self, job_id: &str) -> Option<TraceParent> {
        self.traces.get(job_id).copied()
    }

    /// The domain state.
    pub fn state(&self) -> &PreemptionState {
        &self.state
    }

    /// The last stream sequence applied.
    pub fn last_applied(&self) -> u64 {
        self.state.last_applied()
    }

    /// Highest `basis.cycle` of any `PreemptionOrdered` folded.
    pub fn last_cycle(&self) -> u64 {
        self.last_cycle
    }

    /// Sequence of the newest event of live job `job_id`.
    pub fn job_sequence(&self, job_id: &str) -> Option<u64> {
        self.job_sequences.get(job_id).copied()
    }

    /// Sequence of the newest event on node `node`'s subject (0: none).
    pub fn node_sequence(&self, node: &str) -> u64 {
        self.node_sequences.get(node).copied().unwrap_or(0)
    }

    /// Sequence of node `node`'s last `NodeCordoned` (0: none folded).
    pub fn cordon_sequence(&self, node: &str) -> u64 {
        self.cordon_sequences.get(node).copied().unwrap_or(0)
    }

    /// Folds one entry; `true` if the domain state accepted it (a refused event only moves the
    /// last applied sequence, and a duplicate changes nothing at all).
    pub fn apply(&mut self, entry: &LogEntry) -> bool {
        let event = entry.event.as_ref().unwrap_or(&UNDECODABLE);
        let result = self.state.apply(entry.sequence, event);
        if let Err(Ignored::Duplicate { .. }) = result {
            return false;
        }
        if let Some(job) = entry
            .subject
            .strip_prefix(self.job_prefix.as_str())
            .and_then(|rest| rest.rsplit_once('.'))
            .map(|(job, _kind)| job)
        {
            if self.state.decision().job(job).is_some() {
                self.job_sequences.insert(job.to_owned(), entry.sequence);
                // The newest event the state took is the job's context; a refused one is not.
                if let (Ok(()), Some(trace)) = (&result, entry.trace) {
                    self.traces.insert(job.to_owned(), trace);
                }
            } else {
                self.job_sequences.remove(job);
                self.traces.remove(job);
            }
        } else if let Some(node) = entry.subject.strip_prefix(self.node_prefix.as_str()) {
            self.node_sequences.insert(node.to_owned(), entry.sequence);
            if let Some(Body::NodeCordoned(_)) = &event.body {
                self.cordon_sequences
                    .insert(node.to_owned(), entry.sequence);
            }
        }
        if let Some(Body::PreemptionOrdered(p)) = &event.body
            && let Some(b) = &p.basis
        {
            self.last_cycle = self.last_cycle.max(b.cycle);
        }
        if let Err(why) = &result {
            tracing::debug!(sequence = entry.sequence, subject = %entry.subject, "not folded: {why}");
        }
        result.is_ok()
    }
}

impl fairshare_runtime::checkpoint::Resumable for ShellFold {
    fn last_applied(&self) -> u64 {
        ShellFold::last_applied(self)
    }

    fn is_for(&self, cluster: &str) -> bool {
        ShellFold::is_for(self, cluster)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fairshare_decision::domain::decide;
    use fairshare_decision::domain::state::JobStatus;
    use fairshare_events::codec;

    use super::*;
    use crate::domain::{Config, decide_preemptions, into_events, stamp_cycle};

    /// xorshift64*: a deterministic workload without dependencies.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

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
    fn generated_log() -> Vec<LogEntry> {
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

    fn fold(entries: &[LogEntry], into: &mut ShellFold) {
        for e in entries {
            into.apply(e);
        }
    }

    #[test]
    fn a_fold_restored_from_its_bytes_and_fed_the_rest_equals_the_full_fold() {
        let log = generated_log();
        let count = |f: fn(&Body) -> bool| {
            log.iter()
                .filter(|e| {
                    e.event
                        .as_ref()
                        .ok()
                        .and_then(|e| e.body.as_ref())
                        .is_some_and(f)
                })
                .count()
        };
        // The log exercises what the checkpoint must carry.
        assert!(count(|b| matches!(b, Body::PreemptionOrdered(_))) > 0);
        assert!(count(|b| matches!(b, Body::JobPreempted(p) if p.killed)) > 0);
        assert!(count(|b| matches!(b, Body::JobRequeued(_))) > 0);
        assert!(count(|b| matches!(b, Body::NodeDrained(_))) > 0);
        let mut whole = ShellFold::new("c");
        fold(&log, &mut whole);
        assert_eq!(whole.last_applied(), log.len() as u64);
        let config = Config::default();
        let end_ms = 80 * 20_000;
        for split in [1, log.len() / 3, log.len() / 2, log.len() - 1] {
            let mut before = ShellFold::new("c");
            fold(&log[..split], &mut before);
            assert!(
                split == 1 || !before.traces.is_empty(),
                "live jobs' contexts"
            );
            let bytes = bincode::serialize(&before).unwrap();
            let mut restored: ShellFold = bincode::deserialize(&bytes).unwrap();
            assert_eq!(restored, before, "split at {split}");
            assert!(restored.is_for("c") && !restored.is_for("d"));
            fold(&log[split..], &mut before);
            fold(&log[split..], &mut restored);
            assert_eq!(restored, before, "split at {split}");
            assert_eq!(restored, whole, "split at {split}");
            for now in [end_ms, end_ms + 30_000, end_ms + 3_600_000] {
                assert_eq!(
                    decide_preemptions(restored.state(), now, &config),
                    decide_preemptions(whole.state(), now, &config),
                    "split at {split}, now {now}"
                );
            }
        }
    }
}
