//! Why jobs wait: the latest cycle's outcome, kept for in-process readers.
//!
//! After every cycle the service records on a shared [`Board`] a summary of the cycle (basis,
//! ranking, placements, reservation) and, for every queued job the cycle did not place, its
//! allocation and reason (code and sentence). [`Explainer`]s read the board from any task.
//! With debug logging on, every change of a job's reason code between cycles is logged.
//!
//! The board is a library API (tests, tools linking this crate) and a debug log. Operators ask
//! over NATS instead (`fairshare.api.explain.<cluster>`, `ExplainRequest` / `ExplainReply`):
//! the service answers that by deciding afresh on its current state
//! ([`crate::domain::explain()`]), so an answer there can differ from the board's, which is
//! the last cycle's.
//!
//! Cost: the waiting jobs are stored in decision order in flat arrays (job ids in one buffer,
//! a row per job with an allocation index and a reason index); allocations and reasons are
//! interned per cycle and a sentence is formatted once per distinct reason. Recording is
//! bounded by copying each waiting job's id, which lives in its own heap allocation: measured
//! (release, this 2-core machine) about 0.7 ms for 10,000 waiting jobs and 10-12 ms for
//! 100,000, i.e. as much as the cycle itself at that size. So the rows are kept only while an
//! [`Explainer`] exists, and the map of previous codes behind the debug log of changes only
//! while debug logging is on; otherwise a cycle records the summary alone. Looking one job up
//! scans the rows (~0.15 ms at 100,000), fine for occasional questions.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use tokio::sync::watch;

use crate::domain::{Decision, WaitReason};

/// One waiting job and why it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingJob {
    /// Its allocation.
    pub allocation: Arc<str>,
    /// Stable machine-readable code ([`WaitReason::code`]).
    pub code: &'static str,
    /// The reason in words.
    pub reason: Arc<str>,
}

/// The reservation a cycle made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationReport {
    /// The job it is held for.
    pub job_id: String,
    /// Its allocation.
    pub allocation: String,
    /// When the reserved GPUs are expected to be reclaimable (Unix ms).
    pub start_ms: i64,
    /// The reserved GPUs by node.
    pub nodes: Vec<(String, u32)>,
}

/// What one cycle decided, apart from the per-job reasons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleSummary {
    /// Cycle number (0: no cycle has run yet).
    pub cycle: u64,
    /// The last stream sequence the cycle's state had folded.
    pub through_sequence: u64,
    /// The time the cycle used as "now".
    pub computed_at_ms: i64,
    /// Allocations in Fair Tree order at the start of the cycle, best first.
    pub ranking: Vec<String>,
    /// Jobs the cycle placed (published; some may have been refused by the log).
    pub placed: Vec<String>,
    /// The cycle's reservation.
    pub reservation: Option<ReservationReport>,
    /// Jobs left waiting.
    pub waiting: usize,
}

/// One waiting job: where its id ends in the id buffer, its allocation and reason indexes.
#[derive(Debug, Clone, Copy)]
struct Row {
    end: usize,
    allocation: u32,
    reason: u32,
}

/// The latest cycle's outcome, shared between the service and its [`Explainer`]s.
#[derive(Debug, Default)]
pub struct Board {
    summary: CycleSummary,
    /// Waiting job ids, concatenated in decision order.
    ids: String,
    rows: Vec<Row>,
    allocations: Vec<Arc<str>>,
    reasons: Vec<(&'static str, Arc<str>)>,
    /// Codes of the previous cycle, kept only while debug logging is on.
    codes: Option<HashMap<String, &'static str>>,
}

impl Board {
    /// Records `decision` as cycle `cycle`; with `per_job` false only the summary is kept.
    pub fn update(&mut self, decision: &Decision<'_>, cycle: u64, per_job: bool) {
        self.summary = CycleSummary {
            cycle,
            through_sequence: decision.through_sequence,
            computed_at_ms: decision.computed_at_ms,
            ranking: decision.ranking.iter().map(|a| (*a).to_owned()).collect(),
            placed: decision
                .placements
                .iter()
                .map(|p| p.job_id.to_owned())
                .collect(),
            reservation: decision.reservation.as_ref().map(|r| ReservationReport {
                job_id: r.job_id.to_owned(),
                allocation: r.allocation.to_owned(),
                start_ms: r.start_ms,
                nodes: r
                    .nodes
                    .iter()
                    .map(|n| (n.node.to_owned(), n.gpus))
                    .collect(),
            }),
            waiting: decision.waiting.len(),
        };
        self.ids.clear();
        self.rows.clear();
        self.allocations.clear();
        self.reasons.clear();
        if per_job {
            self.record(decision);
        } else {
            self.ids.shrink_to(0);
            self.rows.shrink_to(0);
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            self.log_changes(decision);
        } else {
            self.codes = None;
        }
    }

    fn record(&mut self, decision: &Decision<'_>) {
        // Allocation names borrow from the state, one allocation per path: interning by the
        // slice's address is exact and never reads the bytes.
        let mut allocation_ix: HashMap<(usize, usize), u32> = HashMap::new();
        let mut reason_ix: Vec<WaitReason<'_>> = Vec::new();
        // Reasons carry counts and times, so a big cycle has thousands of distinct ones:
        // looked up by hash, not by a walk over those seen.
        let mut reason_at: HashMap<WaitReason<'_>, usize> = HashMap::new();
        let mut last_allocation: Option<((usize, usize), u32)> = None;
        let mut last_reason: Option<usize> = None;
        self.rows.reserve(decision.waiting.len());
        for w in &decision.waiting {
            let key = (w.allocation.as_ptr() as usize, w.allocation.len());
            let allocation = match last_allocation {
                Some((k, ix)) if k == key => ix,
                _ => {
                    let ix = *allocation_ix.entry(key).or_insert_with(|| {
                        self.allocations.push(Arc::from(w.allocation));
                        u32::try_from(self.allocations.len() - 1).unwrap_or(u32::MAX)
                    });
                    last_allocation = Some((key, ix));
                    ix
                }
            };
            let reason = match last_reason {
                Some(i) if reason_ix[i] == w.reason => i,
                _ => *reason_at.entry(w.reason).or_insert_with(|| {
                    reason_ix.push(w.reason);
                    self.reasons
                        .push((w.reason.code(), Arc::from(w.reason.to_string())));
                    reason_ix.len() - 1
                }),
            };
            last_reason = Some(reason);
            self.ids.push_str(w.job_id);
            self.rows.push(Row {
                end: self.ids.len(),
                allocation,
                reason: u32::try_from(reason).unwrap_or(u32::MAX),
            });
        }
    }

    fn log_changes(&mut self, decision: &Decision<'_>) {
        let previous = self.codes.take().unwrap_or_default();
        let mut codes = HashMap::with_capacity(decision.waiting.len());
        for w in &decision.waiting {
            let code = w.reason.code();
            if previous.get(w.job_id) != Some(&code) {
                tracing::debug!(
                    job_id = w.job_id,
                    from = previous.get(w.job_id).copied().unwrap_or("-"),
                    to = code,
                    "{}",
                    w.reason
                );
            }
            codes.insert(w.job_id.to_owned(), code);
        }
        self.codes = Some(codes);
    }

    /// The latest cycle's summary.
    pub fn summary(&self) -> &CycleSummary {
        &self.summary
    }

    /// Every recorded waiting job, in decision order.
    fn entries(&self) -> impl Iterator<Item = (&str, &Row)> {
        let mut start = 0;
        self.rows.iter().map(move |row| {
            let id = self.ids.get(start..row.end).unwrap_or_default();
            start = row.end;
            (id, row)
        })
    }

    fn job(&self, row: &Row) -> Option<WaitingJob> {
        let (code, reason) = self.reasons.get(row.reason as usize)?;
        Some(WaitingJob {
            allocation: Arc::clone(self.allocations.get(row.allocation as usize)?),
            code,
            reason: Arc::clone(reason),
        })
    }

    /// Why job `job_id` waited in the latest cycle (a scan of the waiting jobs).
    pub fn waiting(&self, job_id: &str) -> Option<WaitingJob> {
        let (_, row) = self.entries().find(|(id, _)| *id == job_id)?;
        self.job(row)
    }

    /// Every recorded waiting job with its reason, in decision order (allocated work in rank
    /// order, then unallocated work).
    pub fn all_waiting(&self) -> Vec<(String, WaitingJob)> {
        self.entries()
            .filter_map(|(id, row)| Some((id.to_owned(), self.job(row)?)))
            .collect()
    }
}

/// The service's side: the board and the cycle notifications.
#[derive(Debug)]
pub(crate) struct Publisher {
    board: Arc<RwLock<Board>>,
    cycles: watch::Sender<u64>,
}

impl Publisher {
    pub fn new() -> Self {
        Self {
            board: Arc::new(RwLock::new(Board::default())),
            cycles: watch::Sender::new(0),
        }
    }

    /// A reader.
    pub fn explainer(&self) -> Explainer {
        Explainer {
            board: Arc::clone(&self.board),
            cycles: self.cycles.subscribe(),
        }
    }

    /// Records the cycle and wakes readers waiting for it.
    pub fn publish(&self, decision: &Decision<'_>, cycle: u64) {
        // Per-job reasons only while someone can read them.
        let per_job = Arc::strong_count(&self.board) > 1;
        self.board
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .update(decision, cycle, per_job);
        self.cycles.send_replace(cycle);
    }
}

/// Reads the latest cycle's outcome; cheap to clone, usable from any task. While one exists,
/// the service keeps every waiting job's reason.
#[derive(Debug, Clone)]
pub struct Explainer {
    board: Arc<RwLock<Board>>,
    cycles: watch::Receiver<u64>,
}

impl Explainer {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Board> {
        self.board.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The latest cycle's summary (cycle 0 before the first cycle).
    pub fn latest(&self) -> CycleSummary {
        self.read().summary.clone()
    }

    /// Why job `job_id` waited in the latest cycle; `None` if it was not waiting then (placed,
    /// running, ended, unknown, or submitted after that cycle).
    pub fn explain(&self, job_id: &str) -> Option<WaitingJob> {
        self.read().waiting(job_id)
    }

    /// Every job waiting in the latest cycle with its reason, in decision order.
    pub fn waiting(&self) -> Vec<(String, WaitingJob)> {
        self.read().all_waiting()
    }

    /// The latest cycle's summary and waiting jobs, read together (one cycle's view).
    pub fn snapshot(&self) -> (CycleSummary, Vec<(String, WaitingJob)>) {
        let board = self.read();
        (board.summary.clone(), board.all_waiting())
    }

    /// Waits until a cycle numbered at least `cycle` has been recorded and returns the latest
    /// summary; `None` if the service stopped first.
    pub async fn wait_for_cycle(&mut self, cycle: u64) -> Option<CycleSummary> {
        self.cycles.wait_for(|c| *c >= cycle).await.ok()?;
        Some(self.latest())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::domain::{DecisionState, decide};
    use fairshare_events::pb::{self, event::Body};

    fn state(jobs: &[(&str, u32)]) -> DecisionState {
        let mut s = DecisionState::new("c");
        let mut events = vec![
            Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: "c".into(),
                accounts: vec![pb::Account {
                    name: "team".into(),
                    share: 1,
                    children: vec![],
                }],
            }),
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: "n1".into(),
                gpus: 8,
            }),
        ];
        for (id, gpus) in jobs {
            events.push(Body::JobSubmitted(pb::JobSubmitted {
                job_id: (*id).into(),
                spec: Some(pb::JobSpec {
                    cluster: "c".into(),
                    allocation: "team".into(),
                    gpus: i64::from(*gpus),
                    min_runtime_s: 600,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: 1,
                    gpus_per_node: *gpus,
                }),
                ..Default::default()
            }));
        }
        for (i, body) in events.into_iter().enumerate() {
            s.apply(
                i as u64 + 1,
                &pb::Event {
                    at_ms: i as i64,
                    body: Some(body),
                },
            )
            .unwrap();
        }
        s
    }

    #[test]
    fn board_records_each_waiting_jobs_reason() {
        // a takes 6 of 8 GPUs; b is the first that does not fit and gets the reservation; c
        // and d would have fit the GPUs free at the start of the cycle.
        let s = state(&[("a", 6), ("b", 4), ("c", 4), ("d", 4)]);
        let d = decide(&s, 100);
        let mut board = Board::default();
        board.update(&d, 3, true);
        let sum = board.summary().clone();
        assert_eq!(sum.cycle, 3);
        assert_eq!(sum.through_sequence, 6);
        assert_eq!(sum.placed, ["a"]);
        assert_eq!(sum.ranking, ["team"]);
        assert_eq!(sum.waiting, 3);
        assert_eq!(sum.reservation.as_ref().unwrap().job_id, "b");
        assert_eq!(board.waiting("b").unwrap().code, "reservation_pending");
        assert_eq!(board.waiting("a"), None);
        assert_eq!(board.waiting(""), None);
        assert_eq!(
            board.waiting("bc"),
            None,
            "ids are not confused across rows"
        );
        let c = board.waiting("c").unwrap();
        let d4 = board.waiting("d").unwrap();
        assert_eq!(c.code, "below_others_in_rank");
        assert_eq!(&*c.allocation, "team");
        assert!(
            Arc::ptr_eq(&c.reason, &d4.reason),
            "one sentence per reason"
        );
        assert!(
            Arc::ptr_eq(&c.allocation, &d4.allocation),
            "one name per allocation"
        );
        assert!(
            c.reason
                .contains("not once the 1 job of its own allocation placed before it"),
            "{}",
            c.reason
        );
        let all: Vec<_> = board
            .all_waiting()
            .into_iter()
            .map(|(id, w)| (id, w.code))
            .collect();
        assert_eq!(
            all,
            [
                ("b".to_owned(), "reservation_pending"),
                ("c".to_owned(), "below_others_in_rank"),
                ("d".to_owned(), "below_others_in_rank"),
            ]
        );

        // a ends: b and c now fit and are placed; d gets the reservation; jobs no longer
        // waiting are gone from the board.
        let mut s2 = s.clone();
        s2.apply(
            7,
            &pb::Event {
                at_ms: 50,
                body: Some(Body::JobCancelled(pb::JobCancelled {
                    job_id: "a".into(),
                    ..Default::default()
                })),
            },
        )
        .unwrap();
        let d2 = decide(&s2, 100);
        board.update(&d2, 5, true);
        assert_eq!(board.summary().placed, ["b", "c"]);
        assert_eq!(board.waiting("b"), None);
        assert_eq!(board.waiting("c"), None);
        assert_eq!(board.waiting("d").unwrap().code, "reservation_pending");

        // Nobody reading: only the summary is kept.
        board.update(&d2, 6, false);
        assert_eq!(board.summary().cycle, 6);
        assert_eq!(board.summary().waiting, 1);
        assert_eq!(board.waiting("d"), None);
    }

    #[tokio::test]
    async fn explainer_follows_the_latest_cycle() {
        let publisher = Publisher::new();
        let mut explainer = publisher.explainer();
        assert_eq!(explainer.latest().cycle, 0);
        assert_eq!(explainer.explain("b"), None);
        let s = state(&[("a", 6), ("b", 4)]);
        publisher.publish(&decide(&s, 100), 1);
        let seen = explainer.wait_for_cycle(1).await.unwrap();
        assert_eq!(seen.cycle, 1);
        assert_eq!(explainer.explain("b").unwrap().code, "reservation_pending");
        assert_eq!(explainer.explain("a"), None, "placed, not waiting");
        assert_eq!(explainer.waiting().len(), 1);
        let (summary, waiting) = explainer.snapshot();
        assert_eq!((summary.cycle, summary.waiting, waiting.len()), (1, 1, 1));
        drop(publisher);
        assert!(explainer.wait_for_cycle(2).await.is_none());
    }
}
