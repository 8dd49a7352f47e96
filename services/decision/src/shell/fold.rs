//! Folding one cluster's log entries into the decision state: the one fold the live service,
//! the audit and the tests share, so they cannot disagree on what a prefix of the log means.
//!
//! Besides [`DecisionState`] the fold keeps what the shell needs to publish safely:
//!
//! - per live job, the stream sequence of its newest event (from the entry's subject,
//!   `fairshare.events.<cluster>.job.<job_id>.<kind>`): the expected last sequence over the
//!   job's scope ([`subjects::job`]) a placement is published with, so a placement never lands
//!   after anything else happened to the job (a cancel, another placement);
//! - the highest cycle number named by any `JobPlaced` in the log, so cycle numbers keep
//!   growing across restarts;
//! - each live job's newest W3C trace context, the parent of its placement's
//!   span, so a job submitted before a restart from a checkpoint stays in its launcher's trace.
//!
//! Entries whose bytes do not decode are folded as an event without a body: they change
//! nothing but advance the last applied sequence, exactly as on every replay.

use std::collections::HashMap;

use fairshare_events::headers::TraceParent;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::log::LogEntry;
use serde::{Deserialize, Serialize};

use crate::domain::{DecisionState, Ignored};

/// What applying one entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The state changed in a way that can change the next decision.
    Changed,
    /// A placement was folded: GPUs are now held, nothing was freed, so no new cycle is needed
    /// for it. (A placement of a job GPUs were promised to is [`Applied::Changed`]: the GPUs it
    /// did not take are anyone's now.)
    Placed,
    /// The state refused the event (see [`Ignored`]); only the last applied sequence moved.
    Ignored(Ignored),
}

/// One cluster's decision state plus the per-job sequences placements are published against.
///
/// Serializable for the shell's sled checkpoint: a fold restored from its bytes and then fed
/// the rest of the log equals the fold that was fed the whole log (see the tests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogFold {
    state: DecisionState,
    /// `fairshare.events.<cluster>.job.`
    job_prefix: String,
    /// Newest event sequence of each job the state holds.
    job_sequences: HashMap<String, u64>,
    /// Highest `basis.cycle` of any placement folded.
    last_cycle: u64,
    /// Each live job's trace context: that of the newest event the state took for it.
    traces: HashMap<String, TraceParent>,
}

/// An event without a body, folded in place of entries that do not decode.
const UNDECODABLE: pb::Event = pb::Event {
    at_ms: 0,
    body: None,
};

impl LogFold {
    /// An empty fold for cluster `cluster` that takes usage snapshots of any window.
    pub fn new(cluster: &str) -> Self {
        Self::with_usage_window(cluster, None)
    }

    /// An empty fold for cluster `cluster` that takes usage snapshots of a `usage_window_ms`
    /// window only ([`DecisionState::set_usage_window_ms`]; `None`: any).
    pub fn with_usage_window(cluster: &str, usage_window_ms: Option<i64>) -> Self {
        let mut state = DecisionState::new(cluster);
        state.set_usage_window_ms(usage_window_ms);
        Self {
            state,
            job_prefix: format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX),
            job_sequences: HashMap::new(),
            last_cycle: 0,
            traces: HashMap::new(),
        }
    }

    /// The cluster this fold follows.
    pub fn cluster(&self) -> &str {
        self.state.cluster()
    }

    /// Whether this fold is one [`LogFold::new`]`(cluster)` would start: same cluster, same
    /// job subject prefix. A checkpoint that is not is not used.
    pub fn is_for(&self, cluster: &str) -> bool {
        self.state.cluster() == cluster
            && self.job_prefix == format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX)
    }

    /// Sets the usage window of a fold loaded from a checkpoint (the setting is not
    /// checkpointed; the checkpoint's kind names it, see [`super::checkpoint_kind`]).
    pub fn set_usage_window_ms(&mut self, usage_window_ms: Option<i64>) {
        self.state.set_usage_window_ms(usage_window_ms);
    }

    /// The decision state.
    pub fn state(&self) -> &DecisionState {
        &self.state
    }

    /// The last stream sequence folded (0 before any).
    pub fn last_applied(&self) -> u64 {
        self.state.last_applied()
    }

    /// The highest cycle number any folded placement names (0 if none).
    pub fn last_cycle(&self) -> u64 {
        self.last_cycle
    }

    /// The sequence of the newest event folded for live job `job_id`.
    pub fn job_sequence(&self, job_id: &str) -> Option<u64> {
        self.job_sequences.get(job_id).copied()
    }

    /// The trace context of live job `job_id`'s newest traced entry.
    pub fn job_trace(&self, job_id: &str) -> Option<TraceParent> {
        self.traces.get(job_id).copied()
    }

    /// The job id of a job event subject of this cluster.
    fn job_of<'a>(&self, subject: &'a str) -> Option<&'a str> {
        subject
            .strip_prefix(self.job_prefix.as_str())?
            .rsplit_once('.')
            .map(|(job, _kind)| job)
    }

    /// Folds one entry. Entries at or below the last applied sequence are refused as
    /// duplicates and change nothing at all.
    pub fn apply(&mut self, entry: &LogEntry) -> Applied {
        let event = entry.event.as_ref().unwrap_or(&UNDECODABLE);
        // A placement of a job GPUs were promised to frees what it did not take of them (it
        // may be best-fit elsewhere): that can change the next decision.
        let frees_a_promise = match &event.body {
            Some(Body::JobPlaced(p)) => self
                .state
                .promise_for(&p.job_id, event.at_ms)
                .is_some_and(|promise| !promise.nodes.is_empty()),
            _ => false,
        };
        let result = self
            .state
            .apply_stored(entry.sequence, event, entry.stored_ms);
        if let Err(why @ Ignored::Duplicate { .. }) = result {
            return Applied::Ignored(why);
        }
        if let Some(job) = self.job_of(&entry.subject) {
            if self.state.job(job).is_some() {
                match self.job_sequences.get_mut(job) {
                    Some(s) => *s = entry.sequence,
                    None => {
                        self.job_sequences.insert(job.to_owned(), entry.sequence);
                    }
                }
                // The newest event the state took is the job's context; a refused one
                // (a late report, a stale order) is not.
                if let (Ok(()), Some(trace)) = (&result, entry.trace) {
                    self.traces.insert(job.to_owned(), trace);
                }
            } else {
                self.job_sequences.remove(job);
                self.traces.remove(job);
            }
        }
        let placed = match &event.body {
            Some(Body::JobPlaced(p)) => {
                if let Some(b) = &p.basis {
                    self.last_cycle = self.last_cycle.max(b.cycle);
                }
                true
            }
            _ => false,
        };
        match result {
            Err(why) => Applied::Ignored(why),
            Ok(()) if placed && !frees_a_promise => Applied::Placed,
            Ok(()) => Applied::Changed,
        }
    }
}

impl super::window::WindowFold for LogFold {
    fn for_window(cluster: &str, usage_window_ms: Option<i64>) -> Self {
        LogFold::with_usage_window(cluster, usage_window_ms)
    }

    fn fold(&mut self, entry: &LogEntry) {
        self.apply(entry);
    }
}

impl fairshare_runtime::checkpoint::Resumable for LogFold {
    fn last_applied(&self) -> u64 {
        LogFold::last_applied(self)
    }

    fn is_for(&self, cluster: &str) -> bool {
        LogFold::is_for(self, cluster)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fairshare_events::DecodeError;
    use fairshare_testkit::Rng;

    fn entry(sequence: u64, subject: &str, body: Option<Body>) -> LogEntry {
        LogEntry {
            sequence,
            subject: subject.to_owned(),
            event: Ok(pb::Event { at_ms: 5, body }),
            pending: 0,
            trace: None,
            stored_ms: None,
        }
    }

    fn traced(sequence: u64, subject: &str, body: Option<Body>, span: u64) -> LogEntry {
        LogEntry {
            trace: Some(TraceParent {
                trace_id: 7,
                parent_id: span,
                flags: 1,
            }),
            ..entry(sequence, subject, body)
        }
    }

    fn submitted(job: &str) -> Body {
        Body::JobSubmitted(pb::JobSubmitted {
            job_id: job.into(),
            spec: Some(pb::JobSpec {
                cluster: "c".into(),
                allocation: "a".into(),
                gpus: 1,
                min_runtime_s: 60,
                ..Default::default()
            }),
            shape: Some(pb::Shape {
                nodes: 1,
                gpus_per_node: 1,
            }),
            ..Default::default()
        })
    }

    /// A placement frees nothing, so it needs no cycle of its own, unless GPUs were promised
    /// to its job: what it did not take of them is anyone's now.
    #[test]
    fn a_placement_of_a_job_with_a_promise_is_a_change() {
        let mut f = LogFold::new("c");
        let s = |j: &str, k: &str| subjects::job_event("c", j, k);
        let job = |id: &str, gpus: u32| {
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: id.into(),
                spec: Some(pb::JobSpec {
                    cluster: "c".into(),
                    allocation: "a".into(),
                    gpus: i64::from(gpus),
                    min_runtime_s: 60,
                    resumable: true,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: 1,
                    gpus_per_node: gpus,
                }),
                ..Default::default()
            })
        };
        let on = |id: &str, node: &str, gpus| {
            Body::JobPlaced(pb::JobPlaced {
                job_id: id.into(),
                nodes: vec![pb::NodeGpus {
                    node: node.into(),
                    gpus,
                }],
                basis: None,
            })
        };
        let log = [
            entry(
                1,
                &subjects::policy("c"),
                Some(Body::BudgetTreeSet(pb::BudgetTreeSet {
                    cluster: "c".into(),
                    accounts: vec![pb::Account {
                        name: "a".into(),
                        share: 1,
                        ..Default::default()
                    }],
                })),
            ),
            entry(
                2,
                &subjects::node("c", "n1"),
                Some(Body::NodeRegistered(pb::NodeRegistered {
                    cluster: "c".into(),
                    node: "n1".into(),
                    gpus: 8,
                })),
            ),
            entry(3, &s("v", "job_submitted"), Some(job("v", 8))),
            entry(4, &s("v", "job_placed"), Some(on("v", "n1", 8))),
            entry(
                5,
                &s("v", "job_started"),
                Some(Body::JobStarted(pb::JobStarted { job_id: "v".into() })),
            ),
            entry(6, &s("w", "job_submitted"), Some(job("w", 4))),
            entry(7, &s("k", "job_submitted"), Some(job("k", 4))),
            entry(
                8,
                &s("v", "preemption_ordered"),
                Some(Body::PreemptionOrdered(pb::PreemptionOrdered {
                    job_id: "v".into(),
                    for_job_id: "w".into(),
                    grace_deadline_ms: 60_000,
                    ..Default::default()
                })),
            ),
            entry(
                9,
                &s("v", "job_preempted"),
                Some(Body::JobPreempted(pb::JobPreempted {
                    job_id: "v".into(),
                    killed: false,
                })),
            ),
        ];
        for e in &log {
            f.apply(e);
        }
        assert!(
            f.state().promise_for("w", 5).is_some(),
            "n1's 8 GPUs held for w"
        );
        assert_eq!(
            f.apply(&entry(10, &s("w", "job_placed"), Some(on("w", "n1", 4)))),
            Applied::Changed,
            "the 4 GPUs w left are free for k"
        );
        assert_eq!(
            f.apply(&entry(11, &s("k", "job_placed"), Some(on("k", "n1", 4)))),
            Applied::Placed
        );
    }

    #[test]
    fn tracks_each_live_jobs_newest_sequence_and_forgets_ended_jobs() {
        let mut f = LogFold::new("c");
        let s = |j: &str, k: &str| subjects::job_event("c", j, k);
        assert_eq!(
            f.apply(&traced(
                3,
                &s("j1", "job_submitted"),
                Some(submitted("j1")),
                1
            )),
            Applied::Changed
        );
        assert_eq!(f.job_sequence("j1"), Some(3));
        assert_eq!(f.job_trace("j1").map(|t| t.parent_id), Some(1));
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: "j1".into(),
            nodes: vec![pb::NodeGpus {
                node: "n".into(),
                gpus: 1,
            }],
            basis: Some(pb::DecisionBasis {
                through_sequence: 3,
                computed_at_ms: 5,
                cycle: 41,
                ..Default::default()
            }),
        });
        assert_eq!(
            f.apply(&traced(7, &s("j1", "job_placed"), Some(placed.clone()), 2)),
            Applied::Placed
        );
        assert_eq!(f.job_sequence("j1"), Some(7));
        // The newest traced entry is the job's context; an untraced one keeps it, and a
        // redelivery changes nothing.
        assert_eq!(f.job_trace("j1").map(|t| t.parent_id), Some(2));
        assert!(matches!(
            f.apply(&traced(7, &s("j1", "job_placed"), Some(placed), 3)),
            Applied::Ignored(Ignored::Duplicate { .. })
        ));
        assert_eq!(f.job_trace("j1").map(|t| t.parent_id), Some(2));
        assert_eq!(f.last_cycle(), 41);
        // A refused event on the job's subject still moves the job's scope.
        let again = Body::JobRequeued(pb::JobRequeued {
            job_id: "j1".into(),
        });
        assert!(matches!(
            f.apply(&traced(8, &s("j1", "job_requeued"), Some(again), 4)),
            Applied::Ignored(Ignored::WrongStatus { .. })
        ));
        assert_eq!(f.job_sequence("j1"), Some(8));
        // ...but is not the job's context.
        assert_eq!(f.job_trace("j1").map(|t| t.parent_id), Some(2));
        let done = Body::JobFinished(pb::JobFinished {
            job_id: "j1".into(),
            exit_code: 0,
        });
        assert_eq!(
            f.apply(&entry(9, &s("j1", "job_finished"), Some(done))),
            Applied::Changed
        );
        assert_eq!(f.job_sequence("j1"), None);
        assert_eq!(
            f.job_trace("j1"),
            None,
            "an ended job's context is forgotten"
        );
        // Redeliveries change nothing.
        assert!(matches!(
            f.apply(&entry(9, &s("j2", "job_submitted"), Some(submitted("j2")))),
            Applied::Ignored(Ignored::Duplicate { .. })
        ));
        assert_eq!(f.job_sequence("j2"), None);
        assert_eq!(f.last_applied(), 9);
        // A late report for the ended job leaves no context behind.
        let late = Body::JobStarted(pb::JobStarted {
            job_id: "j1".into(),
        });
        assert!(matches!(
            f.apply(&traced(10, &s("j1", "job_started"), Some(late), 5)),
            Applied::Ignored(_)
        ));
        assert_eq!(f.job_trace("j1"), None);
        assert!(f.traces.is_empty());
    }

    /// A log of cluster `c` that exercises every part of the state: a budget tree (replaced
    /// once), nodes (one cordoned, one removed, one with maintenance), usage snapshots,
    /// allocated, unallocated and multi-node submissions (1,200 of them, so the queues span
    /// several chunks), placements decided by [`decide`] as the service would, starts, ends,
    /// cancels, preemption orders, preemptions and requeues, another cluster's events and an
    /// undecodable entry.
    fn rich_log() -> Vec<LogEntry> {
        use crate::domain::decide;

        let mut rng = Rng(0x00c0_ffee_d00d_0042);
        let mut driver = LogFold::new("c");
        let mut log = Vec::new();
        let mut seq = 0u64;
        let mut push = |driver: &mut LogFold, subject: String, at_ms: i64, body: Option<Body>| {
            seq += 1;
            // Every other entry traced, so the checkpoint must carry the jobs' contexts.
            let trace = seq.is_multiple_of(2).then_some(TraceParent {
                trace_id: u128::from(seq),
                parent_id: seq,
                flags: 1,
            });
            let e = LogEntry {
                sequence: seq,
                subject,
                event: Ok(pb::Event { at_ms, body }),
                pending: 0,
                trace,
                stored_ms: None,
            };
            driver.apply(&e);
            log.push(e);
        };
        let policy = subjects::policy("c");
        let account = |name: &str, share: u64, children: Vec<pb::Account>| pb::Account {
            name: name.into(),
            share,
            children,
        };
        let tree = |vision: u64| {
            Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: "c".into(),
                accounts: vec![
                    account(
                        "research",
                        3,
                        vec![account("nlp", 1, vec![]), account("vision", vision, vec![])],
                    ),
                    account("infra", 1, vec![]),
                    account("idle", 0, vec![]),
                ],
            })
        };
        push(&mut driver, policy.clone(), 0, Some(tree(2)));
        for n in 0..12 {
            let node = format!("n{n:02}");
            let body = Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: node.clone(),
                gpus: 8,
            });
            push(&mut driver, subjects::node("c", &node), 0, Some(body));
        }
        let body = Body::NodeCordoned(pb::NodeCordoned {
            cluster: "c".into(),
            node: "n03".into(),
            reason: "disk".into(),
        });
        push(&mut driver, subjects::node("c", "n03"), 0, Some(body));
        let body = Body::MaintenanceScheduled(pb::MaintenanceScheduled {
            cluster: "c".into(),
            nodes: vec!["n04".into(), "n05".into()],
            start_ms: 50 * 60_000,
            end_ms: 80 * 60_000,
            reason: "firmware".into(),
        });
        push(&mut driver, subjects::maintenance("c"), 0, Some(body));
        let allocations = ["research/nlp", "research/vision", "infra"];
        let mut next_job = 0u32;
        let mut cycle = 0u64;
        for round in 0..60i64 {
            let now = round * 60_000;
            for _ in 0..20 {
                let job = format!("j{next_job:04}");
                next_job += 1;
                let (nodes, per_node) = match rng.below(10) {
                    0 => (2, 8),
                    1..4 => (1, 8),
                    _ => (1, 1 + rng.below(4) as u32),
                };
                let body = Body::JobSubmitted(pb::JobSubmitted {
                    job_id: job.clone(),
                    spec: Some(pb::JobSpec {
                        cluster: "c".into(),
                        // Skewed, so one allocation's queue spans several chunks.
                        allocation: allocations[[0, 0, 0, 1, 2][rng.below(5) as usize]].into(),
                        gpus: i64::from(nodes * per_node),
                        min_runtime_s: [0, 900, 3_600][rng.below(3) as usize],
                        resumable: rng.below(2) == 0,
                        priority: rng.below(3) as i32,
                        ..Default::default()
                    }),
                    shape: Some(pb::Shape {
                        nodes,
                        gpus_per_node: per_node,
                    }),
                    ..Default::default()
                });
                push(
                    &mut driver,
                    subjects::job_event("c", &job, "job_submitted"),
                    now,
                    Some(body),
                );
            }
            // Move some live jobs along.
            let live: Vec<(String, JobStatusKind)> = driver
                .state()
                .jobs
                .iter()
                .map(|(id, j)| (id.to_string(), kind(&j.status)))
                .collect();
            for (job, status) in live {
                let roll = rng.below(100);
                let (name, body) = match (status, roll) {
                    (JobStatusKind::Placed { started: false }, 0..60) => (
                        "job_started",
                        Body::JobStarted(pb::JobStarted {
                            job_id: job.clone(),
                        }),
                    ),
                    (JobStatusKind::Placed { .. }, 60..75) => (
                        "job_finished",
                        Body::JobFinished(pb::JobFinished {
                            job_id: job.clone(),
                            exit_code: 0,
                        }),
                    ),
                    (JobStatusKind::Placed { started: true }, 75..80) => (
                        "preemption_ordered",
                        Body::PreemptionOrdered(pb::PreemptionOrdered {
                            job_id: job.clone(),
                            grace_deadline_ms: now + 30_000,
                            ..Default::default()
                        }),
                    ),
                    (JobStatusKind::Placed { started: true }, 80..92) => (
                        "job_preempted",
                        Body::JobPreempted(pb::JobPreempted {
                            job_id: job.clone(),
                            ..Default::default()
                        }),
                    ),
                    (JobStatusKind::Preempted, 0..20) => (
                        "job_requeued",
                        Body::JobRequeued(pb::JobRequeued {
                            job_id: job.clone(),
                        }),
                    ),
                    (JobStatusKind::Queued, 0) if round % 5 == 0 => (
                        "job_cancelled",
                        Body::JobCancelled(pb::JobCancelled {
                            job_id: job.clone(),
                            ..Default::default()
                        }),
                    ),
                    _ => continue,
                };
                let subject = subjects::job_event("c", &job, name);
                push(&mut driver, subject, now + 1, Some(body));
            }
            if round % 3 == 0 || round == 59 {
                cycle += 1;
                let events = decide(driver.state(), now).events(cycle);
                for event in events {
                    let Some(Body::JobPlaced(p)) = &event.body else {
                        continue;
                    };
                    let subject = subjects::job_event("c", &p.job_id, "job_placed");
                    push(&mut driver, subject, now, event.body.clone());
                }
            }
            if round % 7 == 3 {
                let allocations = allocations
                    .iter()
                    .map(|a| pb::AllocationUsage {
                        allocation: (*a).into(),
                        charged_gpu_ms: rng.below(1_000_000_000),
                        allocated_gpu_ms: 1_000_000_000,
                    })
                    .collect();
                let body = Body::UsageSnapshot(pb::UsageSnapshot {
                    cluster: "c".into(),
                    window_end_ms: now,
                    window_ms: 7 * 24 * 3_600_000,
                    through_sequence: driver.last_applied(),
                    allocations,
                    unallocated_gpu_ms: 0,
                });
                let subject = subjects::usage("c");
                push(&mut driver, subject, now, Some(body));
            }
            match round {
                20 => push(&mut driver, policy.clone(), now, Some(tree(5))),
                25 => {
                    let body = Body::NodeRemoved(pb::NodeRemoved {
                        cluster: "c".into(),
                        node: "n11".into(),
                    });
                    push(&mut driver, subjects::node("c", "n11"), now, Some(body));
                }
                30 => {
                    let body = Body::NodeUncordoned(pb::NodeUncordoned {
                        cluster: "c".into(),
                        node: "n03".into(),
                    });
                    push(&mut driver, subjects::node("c", "n03"), now, Some(body));
                }
                35 => {
                    let body = Body::JobSubmitted(pb::JobSubmitted {
                        job_id: "elsewhere".into(),
                        spec: Some(pb::JobSpec {
                            cluster: "other".into(),
                            allocation: "infra".into(),
                            gpus: 1,
                            ..Default::default()
                        }),
                        ..Default::default()
                    });
                    let subject = subjects::job_event("other", "elsewhere", "job_submitted");
                    push(&mut driver, subject, now, Some(body));
                    push(&mut driver, policy.clone(), now, None);
                }
                _ => {}
            }
        }
        log
    }

    #[derive(Clone, Copy)]
    enum JobStatusKind {
        Queued,
        Placed { started: bool },
        Preempted,
    }

    fn kind(status: &crate::domain::state::JobStatus) -> JobStatusKind {
        use crate::domain::state::JobStatus;
        match status {
            JobStatus::Queued => JobStatusKind::Queued,
            JobStatus::Placed(p) => JobStatusKind::Placed { started: p.started },
            JobStatus::Preempted => JobStatusKind::Preempted,
        }
    }

    fn fold_all<'a>(fold: &mut LogFold, entries: impl IntoIterator<Item = &'a LogEntry>) {
        for e in entries {
            fold.apply(e);
        }
    }

    /// The checkpoint promise: a fold saved after any prefix, restored from its bytes and fed
    /// the rest of the log, is exactly the fold that was fed the whole log, and decides the
    /// same.
    #[test]
    fn a_restored_fold_equals_the_uninterrupted_fold() {
        use crate::domain::decide;

        let log = rich_log();
        let mut whole = LogFold::new("c");
        fold_all(&mut whole, &log);
        // The workload reaches every status and spills queues over several chunks.
        let state = whole.state();
        assert!(
            state.queued_len() > crate::domain::queue::CHUNK_MAX,
            "{}",
            state.queued_len()
        );
        assert!(state.queues.values().any(|q| q.allocated.chunk_count() > 1));
        assert!(state.usage().is_some());
        assert!(whole.last_cycle() > 10);
        assert!(!whole.traces.is_empty(), "live jobs' trace contexts");
        let statuses: Vec<JobStatusKind> = state.jobs.values().map(|j| kind(&j.status)).collect();
        assert!(
            statuses
                .iter()
                .any(|s| matches!(s, JobStatusKind::Placed { started: true }))
        );
        assert!(
            statuses
                .iter()
                .any(|s| matches!(s, JobStatusKind::Placed { started: false }))
        );
        assert!(
            statuses
                .iter()
                .any(|s| matches!(s, JobStatusKind::Preempted))
        );

        let end = log.len();
        for split in [0, 1, 15, end / 3, end / 2, end - 1, end] {
            let mut before = LogFold::new("c");
            fold_all(&mut before, &log[..split]);
            let bytes = bincode::serialize(&before).unwrap();
            let mut restored: LogFold = bincode::deserialize(&bytes).unwrap();
            assert_eq!(restored, before, "restored at {split}");
            fold_all(&mut before, &log[split..]);
            fold_all(&mut restored, &log[split..]);
            assert_eq!(
                restored, whole,
                "restored at {split}, then folded to the end"
            );
            assert_eq!(before, whole);
            for now in [0, 59 * 60_000, 24 * 3_600_000] {
                let (a, b) = (decide(whole.state(), now), decide(restored.state(), now));
                assert_eq!(a, b, "decision at {now} after a restore at {split}");
                assert_eq!(a.events(7), b.events(7));
            }
        }
    }

    #[test]
    fn corrupt_checkpoint_bytes_are_refused() {
        let log = rich_log();
        let mut fold = LogFold::new("c");
        fold_all(&mut fold, &log[..log.len() / 2]);
        let bytes = bincode::serialize(&fold).unwrap();
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                bincode::deserialize::<LogFold>(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // A queue whose chunks are out of order is refused, not trusted.
        let mut chunks = crate::domain::queue::SortedChunks::new();
        for k in 0..600u32 {
            chunks.insert(k, ());
        }
        let mut raw: Vec<Vec<(u32, ())>> =
            bincode::deserialize(&bincode::serialize(&chunks).unwrap()).unwrap();
        raw.swap(0, 1);
        let swapped = bincode::serialize(&raw).unwrap();
        assert!(
            bincode::deserialize::<crate::domain::queue::SortedChunks<u32, ()>>(&swapped).is_err()
        );
        raw.swap(0, 1);
        raw.push(Vec::new());
        let empty_chunk = bincode::serialize(&raw).unwrap();
        assert!(
            bincode::deserialize::<crate::domain::queue::SortedChunks<u32, ()>>(&empty_chunk)
                .is_err()
        );
    }

    #[test]
    fn undecodable_entries_advance_the_sequence_only() {
        let mut f = LogFold::new("c");
        let bad = LogEntry {
            sequence: 4,
            subject: "fairshare.events.c.policy".into(),
            event: Err(DecodeError::Empty {
                expected: "fairshare.v1.Event",
            }),
            pending: 0,
            trace: None,
            stored_ms: None,
        };
        assert_eq!(f.apply(&bad), Applied::Ignored(Ignored::NoBody));
        assert_eq!(f.last_applied(), 4);
    }
}
