//! Re-deriving every usage snapshot in a cluster's log: the log folded through the sequence a
//! snapshot names, as the service folds it ([`super::apply_entry`]), must give the same
//! snapshot at its window end.
//!
//! Place in the flow: a reader of the log, like the decision and preemption services' audits
//! (`fairshare audit` runs all three). Snapshots are what the decision and preemption services
//! rank with, so this closes the chain: every placement and order re-derives from its prefix,
//! and every snapshot in that prefix re-derives from the events before it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use fairshare_events::pb::{self, event::Body};
use fairshare_runtime::findings;
use fairshare_runtime::log::LogEntry;
use fairshare_runtime::two_reads::{Check, Plan, over_entries};

use crate::domain::{FoldConfig, UsageFold};

/// A snapshot that did not re-derive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotDivergence {
    /// The snapshot's sequence in the log.
    pub sequence: u64,
    /// What differs.
    pub detail: String,
}

impl fmt::Display for SnapshotDivergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "usage snapshot at sequence {}: {}",
            self.sequence, self.detail
        )
    }
}

/// What [`audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotAudit {
    /// Entries read.
    pub entries: usize,
    /// Snapshots re-derived.
    pub snapshots: usize,
    /// Those that came out different.
    pub divergences: Vec<SnapshotDivergence>,
    /// Divergences before the sequence [`SnapshotAudit::keep_from`] was given (counted, not
    /// failed).
    pub set_aside: usize,
}

impl SnapshotAudit {
    /// Whether every snapshot re-derived.
    pub fn is_clean(&self) -> bool {
        self.divergences.is_empty()
    }

    /// Sets aside the divergences of snapshots before sequence `from`; how many.
    pub fn keep_from(&mut self, from: u64) -> usize {
        let dropped = findings::drop_before(&mut self.divergences, from, |d| d.sequence);
        self.set_aside += dropped;
        dropped
    }

    /// The report for people: a line per divergence (`DIVERGENCE ...`), then what was checked
    /// in cluster `cluster`'s log.
    pub fn render(&self, cluster: &str) -> String {
        let summary = format!(
            "usage snapshots of cluster {cluster}: {} entries, {} snapshots re-derived, {} \
             divergences",
            self.entries,
            self.snapshots,
            self.divergences.len()
        );
        findings::Report::default()
            .findings("DIVERGENCE", &self.divergences)
            .summary(&summary, self.set_aside, "divergences")
    }
}

/// Re-derives every usage snapshot of `cluster` in `entries` (its log, in order): the two
/// reads of an audit ([`SnapshotPlan`], [`SnapshotCheck`]) over a log in memory.
pub fn audit(cluster: &str, entries: &[LogEntry]) -> SnapshotAudit {
    over_entries(SnapshotPlan::new(cluster), entries)
}

/// A snapshot to re-derive: where its prefix ends and what it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Planned {
    /// The last sequence it covers (sorted by it first: a killed instance's last snapshot may
    /// land after its successor's).
    through: u64,
    /// Its own sequence.
    sequence: u64,
    /// Its window's length (one a fold takes).
    window_ms: u64,
    /// Its window's end.
    window_end_ms: i64,
}

/// The first read of a snapshot audit: where each snapshot's prefix ends and which window it
/// names; a snapshot that cannot be re-derived at all is a divergence at once.
pub struct SnapshotPlan {
    /// The cluster.
    cluster: String,
    /// Counts so far, and the snapshots found wrong without a fold.
    report: SnapshotAudit,
    /// The snapshots to re-derive.
    planned: Vec<Planned>,
}

impl SnapshotPlan {
    /// Nothing read yet, of `cluster`.
    pub fn new(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            report: SnapshotAudit::default(),
            planned: Vec::new(),
        }
    }
}

impl Plan for SnapshotPlan {
    type Check = SnapshotCheck;

    fn note(&mut self, entry: &LogEntry) {
        self.report.entries += 1;
        let Ok(pb::Event {
            at_ms,
            body: Some(Body::UsageSnapshot(s)),
        }) = &entry.event
        else {
            return;
        };
        if s.cluster != self.cluster {
            return;
        }
        let sequence = entry.sequence;
        let window = u64::try_from(s.window_ms)
            .ok()
            .and_then(|w| FoldConfig::new(w).ok());
        let Some(window) = window else {
            self.report.divergences.push(SnapshotDivergence {
                sequence,
                detail: format!(
                    "names a window of {} ms, which no service folds",
                    s.window_ms
                ),
            });
            return;
        };
        self.report.snapshots += 1;
        let detail = if s.window_end_ms != *at_ms {
            format!(
                "its window ends at {} but it was logged at {at_ms}",
                s.window_end_ms
            )
        } else if s.through_sequence >= sequence {
            // Sequences are the whole stream's: one service folds every cluster, and the entry
            // it names may be another cluster's (this log's last entry before it is then
            // older). Only a prefix reaching the snapshot itself is impossible.
            format!(
                "names sequence {}, not before its own: it cannot cover itself or what came \
                 after it",
                s.through_sequence
            )
        } else {
            self.planned.push(Planned {
                through: s.through_sequence,
                sequence,
                window_ms: window.window_ms(),
                window_end_ms: s.window_end_ms,
            });
            return;
        };
        self.report
            .divergences
            .push(SnapshotDivergence { sequence, detail });
    }

    fn check(mut self) -> SnapshotCheck {
        self.planned.sort_unstable();
        let mut folds = BTreeMap::new();
        for p in &self.planned {
            if let Ok(config) = FoldConfig::new(p.window_ms) {
                folds
                    .entry(p.window_ms)
                    .or_insert_with(|| UsageFold::new(config));
            }
        }
        SnapshotCheck {
            cluster: self.cluster,
            folds,
            planned: self.planned,
            visited: 0,
            held: HashMap::new(),
            report: self.report,
        }
    }
}

/// The second read of a snapshot audit: folds the log entry by entry as the service does, one
/// fold per window the snapshots name; re-derives each snapshot when the log reaches the end
/// of its prefix, and compares it with the logged one as that streams past. What is held is
/// the folds and the snapshots re-derived whose logged ones are still to come, never the log.
pub struct SnapshotCheck {
    /// The cluster.
    cluster: String,
    /// Per window length, its fold.
    folds: BTreeMap<u64, UsageFold>,
    /// The snapshots to re-derive, sorted by the prefix they name.
    planned: Vec<Planned>,
    /// How many of `planned` were re-derived.
    visited: usize,
    /// Re-derived snapshots (or why none could be) by the sequence of the logged one.
    held: HashMap<u64, Result<pb::UsageSnapshot, String>>,
    /// The report so far.
    report: SnapshotAudit,
}

impl SnapshotCheck {
    /// How many re-derived snapshots are held, their logged ones still to come.
    pub fn snapshots_held(&self) -> usize {
        self.held.len()
    }
}

impl Check for SnapshotCheck {
    type Report = SnapshotAudit;

    fn feed(&mut self, entry: &LogEntry) {
        while let Some(p) = self.planned.get(self.visited)
            && p.through < entry.sequence
        {
            self.visited += 1;
            if let Some(fold) = self.folds.get(&p.window_ms) {
                let rederived = match fold.window(&self.cluster, p.window_end_ms) {
                    Ok(report) => Ok(report.to_snapshot(p.through, p.window_ms)),
                    Err(e) => Err(format!(
                        "the log through {} gives no report: {e}",
                        p.through
                    )),
                };
                self.held.insert(p.sequence, rederived);
            }
        }
        for fold in self.folds.values_mut() {
            super::apply_entry(fold, entry);
        }
        if let Ok(pb::Event {
            body: Some(Body::UsageSnapshot(logged)),
            ..
        }) = &entry.event
            && let Some(rederived) = self.held.remove(&entry.sequence)
            && let Some(detail) = differs(logged, rederived)
        {
            self.report.divergences.push(SnapshotDivergence {
                sequence: entry.sequence,
                detail,
            });
        }
    }

    /// The report, divergences in log order.
    fn finish(self) -> SnapshotAudit {
        let mut report = self.report;
        report.divergences.sort_by_key(|d| d.sequence);
        report
    }
}

/// What differs between `logged` and the snapshot the log before it gives (or why it gives
/// none), if anything.
fn differs(
    logged: &pb::UsageSnapshot,
    rederived: Result<pb::UsageSnapshot, String>,
) -> Option<String> {
    let rederived = match rederived {
        Ok(r) => r,
        Err(why) => return Some(why),
    };
    if &rederived == logged {
        return None;
    }
    let first = logged
        .allocations
        .iter()
        .zip(&rederived.allocations)
        .find(|(a, b)| a != b)
        .map(|(a, b)| {
            format!(
                "{}: logged {} / {} GPU-ms charged / allocated, re-derived {} / {}",
                a.allocation,
                a.charged_gpu_ms,
                a.allocated_gpu_ms,
                b.charged_gpu_ms,
                b.allocated_gpu_ms
            )
        });
    Some(first.unwrap_or_else(|| {
        format!(
            "logged {} allocations and {} unallocated GPU-ms, re-derived {} and {}",
            logged.allocations.len(),
            logged.unallocated_gpu_ms,
            rederived.allocations.len(),
            rederived.unallocated_gpu_ms
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairshare_events::subjects;

    use fairshare_testkit::events::logged as entry;

    /// A tree and a node, a job running from 1,000, and two snapshots at 3,600,000: the first
    /// as the fold gives it, the second with its charge changed.
    fn log() -> Vec<LogEntry> {
        use fairshare_testkit::events::{node_registered, one_allocation_tree, one_gpu_submitted};
        let mut log = vec![
            entry(1, subjects::policy("c"), 0, one_allocation_tree("c", "a")),
            entry(
                2,
                subjects::node("c", "n1"),
                0,
                node_registered("c", "n1", 8),
            ),
            entry(
                3,
                subjects::job_event("c", "j", "job_submitted"),
                1_000,
                one_gpu_submitted("c", "a", "j", "k-j"),
            ),
            entry(
                4,
                subjects::job_event("c", "j", "job_placed"),
                1_000,
                Body::JobPlaced(pb::JobPlaced {
                    job_id: "j".into(),
                    nodes: vec![pb::NodeGpus {
                        node: "n1".into(),
                        gpus: 1,
                    }],
                    basis: None,
                }),
            ),
            entry(
                5,
                subjects::job_event("c", "j", "job_started"),
                1_000,
                Body::JobStarted(pb::JobStarted { job_id: "j".into() }),
            ),
        ];
        let config = FoldConfig::default();
        let mut fold = UsageFold::new(config);
        for e in &log {
            crate::shell::apply_entry(&mut fold, e);
        }
        let snapshot = fold
            .window("c", 3_600_000)
            .unwrap()
            .to_snapshot(5, config.window_ms());
        let mut tampered = snapshot.clone();
        tampered.allocations[0].charged_gpu_ms += 1;
        for (sequence, s) in [(6, snapshot), (7, tampered)] {
            log.push(entry(
                sequence,
                subjects::usage("c"),
                3_600_000,
                Body::UsageSnapshot(s),
            ));
        }
        log
    }

    #[test]
    fn a_snapshot_that_does_not_re_derive_is_named() {
        let report = audit("c", &log());
        assert_eq!(report.snapshots, 2);
        assert_eq!(report.divergences.len(), 1, "{report:?}");
        assert_eq!(report.divergences[0].sequence, 7);
        assert!(
            report.divergences[0].detail.contains("logged"),
            "{report:?}"
        );
        let mut set_aside = report.clone();
        assert_eq!(set_aside.keep_from(8), 1);
        assert!(set_aside.is_clean());
        assert!(
            set_aside
                .render("c")
                .contains(", 1 earlier divergences set aside")
        );
        // Another cluster's log holds none of these.
        assert_eq!(audit("d", &log()).snapshots, 0);
    }

    /// The second read re-derives a snapshot when the log passes the end of its prefix and
    /// holds it only until the logged one streams past.
    #[test]
    fn a_snapshot_is_held_only_until_the_logged_one_passes() {
        let log = log();
        let mut plan = SnapshotPlan::new("c");
        for entry in &log {
            plan.note(entry);
        }
        let mut check = plan.check();
        let mut held = Vec::new();
        for entry in &log {
            check.feed(entry);
            held.push(check.snapshots_held());
        }
        // Both snapshots name sequence 5: re-derived as 6 comes, each let go as it passes.
        assert_eq!(held, [0, 0, 0, 0, 0, 1, 0]);
        let report = check.finish();
        assert_eq!(report.snapshots, 2);
        let diverged: Vec<u64> = report.divergences.iter().map(|d| d.sequence).collect();
        assert_eq!(diverged, [7]);
    }

    /// The accounting service folds every cluster, so a snapshot may name the sequence of
    /// another cluster's newest entry, past this cluster's last one: it re-derives from what
    /// this cluster's log holds before it. A snapshot naming its own sequence or a later one is
    /// a divergence.
    #[test]
    fn a_snapshot_naming_another_clusters_sequence_re_derives() {
        let mut log = log();
        log.truncate(6);
        let Ok(pb::Event {
            body: Some(Body::UsageSnapshot(snapshot)),
            ..
        }) = log[5].event.clone()
        else {
            panic!("the sixth entry is the snapshot");
        };
        // Sequences 6 to 9 were another cluster's; the snapshot names 9 and lands at 10. Then
        // one names its own sequence, 11.
        for (through, sequence) in [(9, 10), (11, 11)] {
            let mut named = snapshot.clone();
            named.through_sequence = through;
            log.push(entry(
                sequence,
                subjects::usage("c"),
                3_600_000,
                Body::UsageSnapshot(named),
            ));
        }
        let report = audit("c", &log);
        assert_eq!(report.snapshots, 3);
        assert_eq!(
            report
                .divergences
                .iter()
                .map(|d| d.sequence)
                .collect::<Vec<_>>(),
            [11],
            "{report:?}"
        );
        assert!(report.divergences[0].detail.contains("not before its own"));
    }
}
