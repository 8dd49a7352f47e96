//! Audit: re-deriving decisions from the log (SPEC section 3, principle 3).
//!
//! Every `JobPlaced` names its [`pb::DecisionBasis`]: the last stream sequence folded into the
//! state it was decided from, the time used as "now", the cycle number, and the usage window
//! the state took snapshots of (the service's `--window`; 0: any). Because the fold
//! ([`LogFold`]) and [`decide()`] are pure, folding a fresh state over the cluster's log
//! prefix through that sequence and deciding at that time gives the same decision, byte for
//! byte. [`audit`] checks this for every placement in the log:
//!
//! 1. first read ([`PlacementPlan`]): count the cluster's `JobPlaced` events per basis (one
//!    group per cycle that placed anything; two instances running at once would simply make
//!    two groups), keeping no entry;
//! 2. second read ([`PlacementCheck`]): fold the log once per usage window the groups name
//!    (usually one), side by side, entry by entry, and where the log passes a group's
//!    `through_sequence` re-run [`decide()`] on the fold of its window (one decision per
//!    cycle, not one fold per cycle);
//! 3. compare each logged placement's encoded event with the re-derived one for the same job as
//!    it streams past, and let the cycle's re-derived placements go with its last one.
//!
//! So an audit of a long-lived cluster holds its folds and the cycles in flight, not the log
//! ([`audit_log`] reads JetStream twice; [`audit`] runs both reads over a log in memory).
//!
//! Re-derived placements missing from the log are counted, not reported: the log refuses a
//! placement whose job moved on (optimistic concurrency), which is the system working.
//! Divergences are returned as data, never a panic, so an operator sees all of them.
//!
//! The comparison re-encodes the decoded logged event; prost's encoding is canonical, so this
//! equals the stored bytes for anything this version wrote.

use std::collections::BTreeMap;

use async_nats::jetstream;
use fairshare_events::codec;
use fairshare_events::pb::{self, event::Body};
use fairshare_runtime::findings;
use fairshare_runtime::log::LogEntry;
use fairshare_runtime::two_reads::{Check, Plan, over_entries};

use super::fold::LogFold;
use super::read::{AuditError, read_twice};
use super::rederive::{Compared, Logged, Rederivation, Tally};
use super::window::Replay;
use crate::domain::{DecisionState, decide};

/// Folds a fresh state for `cluster` over the entries through `through_sequence` (entries must
/// be the cluster's log in order, as [`read_log`](super::read_log) returns them) and returns the `JobPlaced`
/// events of the decision at `computed_at_ms` numbered `cycle`, taking usage snapshots of a
/// `usage_window_ms` window only, as the service was set to (`None`: any window).
pub fn rederive(
    cluster: &str,
    entries: &[LogEntry],
    usage_window_ms: Option<i64>,
    through_sequence: u64,
    computed_at_ms: i64,
    cycle: u64,
) -> Vec<pb::Event> {
    let mut fold = LogFold::with_usage_window(cluster, usage_window_ms);
    for entry in entries
        .iter()
        .take_while(|e| e.sequence <= through_sequence)
    {
        fold.apply(entry);
    }
    decide(fold.state(), computed_at_ms).events(cycle)
}

/// What a group of placements says it was decided from. Sorted by log position first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CycleKey {
    /// Last sequence folded into the deciding state.
    pub through_sequence: u64,
    /// The time used as "now".
    pub computed_at_ms: i64,
    /// The cycle number.
    pub cycle: u64,
    /// The usage window the deciding state took snapshots of (0: any).
    pub usage_window_ms: i64,
}

impl std::fmt::Display for CycleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cycle {} through sequence {} at {}",
            self.cycle,
            self.through_sequence,
            fairshare_model::timestamp::utc(self.computed_at_ms)
        )
    }
}

/// Where and when a placement puts its job, for an audit finding ("on n1:8, n2:8 at ...").
fn placement_words(event: &pb::Event) -> String {
    match &event.body {
        Some(Body::JobPlaced(p)) => {
            let nodes: Vec<String> = p
                .nodes
                .iter()
                .map(|n| format!("{}:{}", n.node, n.gpus))
                .collect();
            format!(
                "on {} at {}",
                nodes.join(", "),
                fairshare_model::timestamp::utc(event.at_ms)
            )
        }
        _ => format!("as a {} event", codec::event_kind(event)),
    }
}

/// A `JobPlaced` as the log holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedPlacement {
    /// Its stream sequence.
    pub sequence: u64,
    /// The job placed.
    pub job_id: String,
    /// The whole event.
    pub event: pb::Event,
}

/// A placement in the log that re-derivation does not reproduce.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Divergence {
    /// The placement names no decision basis, so it cannot be re-derived.
    #[error("sequence {sequence}: placement of job {job_id} has no decision basis")]
    NoBasis {
        /// The placement's sequence.
        sequence: u64,
        /// The job.
        job_id: String,
    },
    /// The basis names a log position at or after the placement itself.
    #[error(
        "sequence {sequence}: placement of job {job_id} claims a basis through sequence {through_sequence}"
    )]
    FromTheFuture {
        /// The placement's sequence.
        sequence: u64,
        /// The job.
        job_id: String,
        /// The basis it names.
        through_sequence: u64,
    },
    /// Re-deriving the cycle does not place this job.
    #[error("sequence {sequence}: job {job_id} is not placed when {key} is re-derived")]
    NotRederived {
        /// The placement's sequence.
        sequence: u64,
        /// The job.
        job_id: String,
        /// The cycle it names.
        key: CycleKey,
    },
    /// Re-deriving the cycle places the job differently.
    #[error(
        "sequence {sequence}: job {job_id} placed {}, re-derived {} ({key})",
        placement_words(logged),
        placement_words(rederived)
    )]
    Differs {
        /// The placement's sequence.
        sequence: u64,
        /// The job.
        job_id: String,
        /// The cycle it names.
        key: CycleKey,
        /// The event in the log.
        logged: Box<pb::Event>,
        /// The event re-derived.
        rederived: Box<pb::Event>,
    },
    /// Re-derived, but decided at a time earlier than the log it names had reached
    /// ([`Compared::BeforeItsLog`]): no deciding instance's clock is held that far back.
    #[error(
        "sequence {sequence}: job {job_id} placed as {key} re-derives, but at a time {} \
         before the log's time then ({}): a deciding clock set back, or a forged basis",
        fairshare_model::duration::exact_words(log_ms.saturating_sub(key.computed_at_ms)),
        fairshare_model::timestamp::utc(*log_ms)
    )]
    BeforeItsLog {
        /// The placement's sequence.
        sequence: u64,
        /// The job.
        job_id: String,
        /// The cycle it names.
        key: CycleKey,
        /// The log's time then ([`Compared::BeforeItsLog`]).
        log_ms: i64,
    },
}

/// A placement that takes GPUs its node did not have free when it landed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "sequence {sequence}: placement of job {job_id} takes {} on {node}, which held \
     {held} of its {capacity} already ({})",
    fairshare_model::words::Gpus(u64::from(*.gpus)),
    overcommit_cause(*.held, *.capacity)
)]
pub struct Overcommit {
    /// The placement's sequence.
    pub sequence: u64,
    /// The job.
    pub job_id: String,
    /// The node.
    pub node: String,
    /// GPUs the placement takes there.
    pub gpus: u32,
    /// GPUs already held there just before it (by the fold of the log up to it).
    pub held: u32,
    /// The node's GPUs (0: not a registered node).
    pub capacity: u32,
}

/// What an over-commit most likely came from, in words, by what the node held.
fn overcommit_cause(held: u32, capacity: u32) -> &'static str {
    if capacity == 0 {
        "not a registered node when it landed: removed, or never registered"
    } else if held > capacity {
        "the node held more than its GPUs already: registered again with fewer"
    } else {
        "two decisions gave away the same GPUs, or the node was registered again with fewer \
         after the decision"
    }
}

/// Every placement in `entries` (one cluster's log, in order) that takes GPUs its node did
/// not have free once everything before it in the log is folded ([`Overcommits`]).
pub fn overcommits(cluster: &str, entries: &[LogEntry]) -> Vec<Overcommit> {
    let mut check = Overcommits::new(cluster);
    for entry in entries {
        check.feed(entry);
    }
    check.found
}

/// The placements that take GPUs their node did not have free once everything before them in
/// the log is folded, found as the log streams past. A decision re-derived identically from a
/// stale basis (one that misses a placement landed before it, e.g. two instances at once)
/// still over-commits: re-derivation alone cannot see it.
pub struct Overcommits {
    /// The log folded up to the entry being looked at.
    fold: LogFold,
    /// What was found, in log order.
    found: Vec<Overcommit>,
}

impl Overcommits {
    /// Nothing folded yet, of `cluster`.
    pub fn new(cluster: &str) -> Self {
        Self {
            fold: LogFold::new(cluster),
            found: Vec::new(),
        }
    }

    /// Looks at the next entry of the log (in order), then folds it.
    pub fn feed(&mut self, entry: &LogEntry) {
        if let Ok(pb::Event {
            body: Some(Body::JobPlaced(p)),
            ..
        }) = &entry.event
        {
            let state = self.fold.state();
            // A placement the fold will not apply (its job is not waiting) takes nothing.
            let applies = state
                .job(&p.job_id)
                .is_some_and(|j| j.status == crate::domain::state::JobStatus::Queued);
            if applies {
                // Per node, as the fold merges a node named twice into one holding.
                let mut asked: BTreeMap<&str, u32> = BTreeMap::new();
                for n in &p.nodes {
                    let gpus = asked.entry(n.node.as_str()).or_default();
                    *gpus = gpus.saturating_add(n.gpus);
                }
                for (node, gpus) in asked {
                    let capacity = state.inventory().nodes().get(node).map_or(0, |x| x.gpus);
                    let held = state.load(node).map_or(0, |l| l.used);
                    if held.saturating_add(gpus) > capacity {
                        self.found.push(Overcommit {
                            sequence: entry.sequence,
                            job_id: p.job_id.clone(),
                            node: node.to_owned(),
                            gpus,
                            held,
                            capacity,
                        });
                    }
                }
            }
        }
        self.fold.apply(entry);
    }
}

/// The outcome of an audit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditReport {
    /// Entries of the cluster's log read.
    pub entries: usize,
    /// Last sequence of the cluster's log read.
    pub last_sequence: u64,
    /// Cycles (groups of placements by basis) re-derived.
    pub cycles: usize,
    /// Placements in the log checked.
    pub placements: usize,
    /// Placements re-derived but not in the log (refused by optimistic concurrency, or never
    /// sent because the service stopped mid-cycle).
    pub unpublished: usize,
    /// Every placement that did not re-derive identically.
    pub divergences: Vec<Divergence>,
    /// Every placement that took GPUs its node did not have free ([`overcommits`]).
    pub overcommits: Vec<Overcommit>,
    /// Findings dropped by [`AuditReport::keep_from`], counted.
    pub set_aside: usize,
}

impl AuditReport {
    /// Whether every placement re-derived identically and none over-committed a node.
    pub fn is_clean(&self) -> bool {
        self.divergences.is_empty() && self.overcommits.is_empty()
    }

    /// Drops the findings about placements before sequence `from` and returns how many: a log
    /// written partly by a build with other rules is then held to this build's from `from` on.
    /// (Each cycle is re-derived from the log as written, so earlier findings do not change
    /// later ones.)
    pub fn keep_from(&mut self, from: u64) -> usize {
        let dropped = findings::drop_before(&mut self.divergences, from, Divergence::sequence)
            + findings::drop_before(&mut self.overcommits, from, |o| o.sequence);
        self.set_aside += dropped;
        dropped
    }

    /// The report for people: a line per finding (`DIVERGENCE ...`, `OVERCOMMIT ...`), then
    /// what was checked in cluster `cluster`'s log.
    pub fn render(&self, cluster: &str) -> String {
        let summary = format!(
            "placements of cluster {cluster}: {} entries through sequence {}, {} cycles, {} \
         placements re-derived, {} divergences, {} over-committed placements, {} decided but \
         not in the log",
            self.entries,
            self.last_sequence,
            self.cycles,
            self.placements,
            self.divergences.len(),
            self.overcommits.len(),
            self.unpublished
        );
        findings::Report::default()
            .findings("DIVERGENCE", &self.divergences)
            .findings("OVERCOMMIT", &self.overcommits)
            .summary(&summary, self.set_aside, "findings")
    }
}

impl Divergence {
    /// The sequence of the placement it is about.
    pub fn sequence(&self) -> u64 {
        match self {
            Divergence::NoBasis { sequence, .. }
            | Divergence::FromTheFuture { sequence, .. }
            | Divergence::NotRederived { sequence, .. }
            | Divergence::Differs { sequence, .. }
            | Divergence::BeforeItsLog { sequence, .. } => *sequence,
        }
    }
}

impl super::window::Basis for CycleKey {
    fn through_sequence(&self) -> u64 {
        self.through_sequence
    }

    fn usage_window_ms(&self) -> i64 {
        self.usage_window_ms
    }

    fn computed_at_ms(&self) -> i64 {
        self.computed_at_ms
    }
}

/// What one log entry is to a placement audit.
type Entry<'e> = Logged<'e, CycleKey, Divergence, pb::JobPlaced>;

fn classify(entry: &LogEntry) -> Entry<'_> {
    let Ok(event) = &entry.event else {
        return Logged::Other;
    };
    let Some(Body::JobPlaced(p)) = &event.body else {
        return Logged::Other;
    };
    let Some(basis) = &p.basis else {
        return Logged::Unkeyed(Divergence::NoBasis {
            sequence: entry.sequence,
            job_id: p.job_id.clone(),
        });
    };
    if basis.through_sequence >= entry.sequence {
        return Logged::Unkeyed(Divergence::FromTheFuture {
            sequence: entry.sequence,
            job_id: p.job_id.clone(),
            through_sequence: basis.through_sequence,
        });
    }
    let key = CycleKey {
        through_sequence: basis.through_sequence,
        computed_at_ms: basis.computed_at_ms,
        cycle: basis.cycle,
        usage_window_ms: basis.usage_window_ms,
    };
    Logged::Keyed(key, p, event)
}

/// Folds `entries` (one cluster's log, in order) once per usage window the placements' bases
/// name, and at each cycle that placed anything calls `visit` with the cycle's key, the state
/// exactly as folded through its `through_sequence` under its window (the state it was decided
/// from), and its placements as logged. Placements that cannot name a cycle are returned as
/// divergences. It holds the log's placements: for tests and small logs ([`audit_log`] streams).
pub fn replay_cycles(
    cluster: &str,
    entries: &[LogEntry],
    mut visit: impl FnMut(&CycleKey, &DecisionState, &[LoggedPlacement]),
) -> Vec<Divergence> {
    let mut bad = Vec::new();
    let mut groups: BTreeMap<CycleKey, Vec<LoggedPlacement>> = BTreeMap::new();
    for entry in entries {
        match classify(entry) {
            Logged::Other => {}
            Logged::Unkeyed(d) => bad.push(d),
            Logged::Keyed(key, p, event) => {
                groups.entry(key).or_default().push(LoggedPlacement {
                    sequence: entry.sequence,
                    job_id: p.job_id.clone(),
                    event: event.clone(),
                });
            }
        }
    }
    let mut replay = Replay::<LogFold, CycleKey>::new(cluster, groups.keys().copied());
    let mut visit = |key: &CycleKey, fold: &LogFold| {
        if let Some(logged) = groups.get(key) {
            visit(key, fold.state(), logged);
        }
    };
    for entry in entries {
        replay.feed(entry, &mut visit);
    }
    replay.finish(&mut visit);
    bad
}

/// The first read of a placement audit: what each placement names, and no more (the cycles
/// and how many placements each landed), so the second read ([`PlacementCheck`]) knows where to
/// stop and re-derive.
pub struct PlacementPlan {
    /// The cluster.
    cluster: String,
    /// What the first read counted.
    tally: Tally<CycleKey, Divergence>,
}

impl PlacementPlan {
    /// Nothing read yet, of `cluster`.
    pub fn new(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            tally: Tally::default(),
        }
    }
}

impl Plan for PlacementPlan {
    type Check = PlacementCheck;

    fn note(&mut self, entry: &LogEntry) {
        self.tally.note(entry.sequence, classify(entry));
    }

    fn check(self) -> PlacementCheck {
        let t = self.tally;
        PlacementCheck {
            cycles: Rederivation::new(&self.cluster, t.per_basis),
            overcommits: Overcommits::new(&self.cluster),
            report: AuditReport {
                entries: t.entries,
                last_sequence: t.last_sequence,
                placements: t.decisions,
                divergences: t.unkeyed,
                ..AuditReport::default()
            },
            found: Vec::new(),
        }
    }
}

/// The second read of a placement audit: folds the log entry by entry (one fold per usage
/// window the cycles name), re-derives each cycle when the log reaches the end of its basis,
/// and compares each logged placement with its cycle's as it streams past
/// ([`Rederivation`]). What is held is the folds and the cycles in flight, never the log.
pub struct PlacementCheck {
    /// The cycles, decided again as the log reaches each.
    cycles: Rederivation<LogFold, CycleKey>,
    /// Placements over what their nodes had free.
    overcommits: Overcommits,
    /// The report so far (the first read's counts and findings).
    report: AuditReport,
    /// Divergences found, with the cycle each names (sorted by it at the end).
    found: Vec<(CycleKey, Divergence)>,
}

impl PlacementCheck {
    /// How many cycles' re-derived placements are held, waiting for their logged ones.
    pub fn cycles_held(&self) -> usize {
        self.cycles.bases_held()
    }
}

impl Check for PlacementCheck {
    type Report = AuditReport;

    fn feed(&mut self, entry: &LogEntry) {
        self.cycles.feed(entry, |key, fold| {
            decide(fold.state(), key.computed_at_ms)
                .events(key.cycle)
                .into_iter()
                .filter_map(|e| match &e.body {
                    Some(Body::JobPlaced(p)) => Some((p.job_id.clone(), e)),
                    _ => None,
                })
                .collect()
        });
        self.overcommits.feed(entry);
        let Logged::Keyed(key, p, logged) = classify(entry) else {
            return;
        };
        let (sequence, job_id) = (entry.sequence, p.job_id.clone());
        let divergence = match self
            .cycles
            .compare(&key, &p.job_id, logged, entry.stored_ms)
        {
            Compared::Same => return,
            Compared::NotRederived => Divergence::NotRederived {
                sequence,
                job_id,
                key,
            },
            Compared::Differs(rederived) => Divergence::Differs {
                sequence,
                job_id,
                key,
                logged: Box::new(logged.clone()),
                rederived,
            },
            Compared::BeforeItsLog(log_ms) => Divergence::BeforeItsLog {
                sequence,
                job_id,
                key,
                log_ms,
            },
        };
        self.found.push((key, divergence));
    }

    /// The report: the first read's findings in log order, then the cycles' in cycle order.
    fn finish(mut self) -> AuditReport {
        self.found.sort_by_key(|(key, d)| (*key, d.sequence()));
        let mut report = self.report;
        report.cycles = self.cycles.bases();
        report.unpublished = self.cycles.unpublished();
        report
            .divergences
            .extend(self.found.into_iter().map(|(_, d)| d));
        report.overcommits = self.overcommits.found;
        report
    }
}

/// Re-derives every cycle of `cluster` that placed anything in `entries` (its log, in order)
/// and reports every placement that does not come out byte-identical, each from a fold taking
/// the usage snapshots of the window its basis names; and every placement that over-commits a
/// node ([`overcommits`]). The two reads of [`audit_log`], over a log in memory.
pub fn audit(cluster: &str, entries: &[LogEntry]) -> AuditReport {
    over_entries(PlacementPlan::new(cluster), entries)
}

/// [`audit`] over the cluster's log as it stands in JetStream, read twice and never held
/// ([`read_twice`]).
pub async fn audit_log(js: &jetstream::Context, cluster: &str) -> Result<AuditReport, AuditError> {
    read_twice(js, cluster, PlacementPlan::new(cluster)).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const C: &str = "c";
    use crate::shell::read::{read_again, read_each};
    use fairshare_events::subjects;

    use fairshare_testkit::events::logged as entry;

    fn submitted(sequence: u64, job: &str, gpus: u32) -> LogEntry {
        entry(
            sequence,
            subjects::job_event(C, job, "job_submitted"),
            1_000 + sequence as i64,
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: job.into(),
                spec: Some(pb::JobSpec {
                    cluster: C.into(),
                    allocation: "team".into(),
                    gpus: i64::from(gpus),
                    min_runtime_s: 600,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: 1,
                    gpus_per_node: gpus,
                }),
                ..Default::default()
            }),
        )
    }

    /// Budget, two 8-GPU nodes, three jobs of 4, 4 and 8 GPUs (the 8 cannot fit after the 4s).
    fn prefix() -> Vec<LogEntry> {
        let mut log = vec![
            entry(
                1,
                subjects::policy(C),
                0,
                Body::BudgetTreeSet(pb::BudgetTreeSet {
                    cluster: C.into(),
                    accounts: vec![pb::Account {
                        name: "team".into(),
                        share: 1,
                        children: vec![],
                    }],
                }),
            ),
            // Another cluster's entry would never be in this log; a gap in sequences is normal.
        ];
        for (seq, node) in [(3, "n1"), (4, "n2")] {
            log.push(entry(
                seq,
                subjects::node(C, node),
                0,
                Body::NodeRegistered(pb::NodeRegistered {
                    cluster: C.into(),
                    node: node.into(),
                    gpus: 8,
                }),
            ));
        }
        log.push(submitted(5, "j1", 4));
        log.push(submitted(6, "j2", 8));
        log.push(submitted(7, "j3", 4));
        log
    }

    /// The prefix, plus the placements the decision at (7, 2_000, cycle 9) makes, appended from
    /// sequence 8.
    fn decided_log() -> Vec<LogEntry> {
        with_decision(prefix())
    }

    /// `log` (the prefix, perhaps altered), plus the placements the decision at (7, 2_000,
    /// cycle 9) makes from it, appended from sequence 8.
    fn with_decision(mut log: Vec<LogEntry>) -> Vec<LogEntry> {
        let events = rederive(C, &log, None, 7, 2_000, 9);
        assert!(!events.is_empty());
        for (i, event) in events.into_iter().enumerate() {
            let Some(Body::JobPlaced(p)) = &event.body else {
                panic!("not a placement")
            };
            log.push(LogEntry {
                sequence: 8 + i as u64,
                subject: subjects::job_event(C, &p.job_id, "job_placed"),
                event: Ok(event.clone()),
                pending: 0,
                trace: None,
                stored_ms: None,
            });
        }
        log
    }

    /// A placement re-derives byte for byte from a basis whose "now" is before the basis's
    /// entries took effect, but no deciding instance's clock is held that far back (to the
    /// newest stored entry, which takes effect at most a minute after it was stored): a
    /// finding. Submissions stamped up to that minute after the decision are not.
    #[test]
    fn a_placement_decided_before_its_basis_took_effect_is_a_divergence() {
        let audited = |submitted_at: i64, stored: bool| {
            let mut log = prefix();
            for e in &mut log {
                let Ok(event) = e.event.as_mut() else {
                    continue;
                };
                if matches!(event.body, Some(Body::JobSubmitted(_))) {
                    event.at_ms = submitted_at;
                    e.stored_ms = stored.then_some(2_000);
                }
            }
            audit(C, &with_decision(log))
        };
        let clean = audited(62_000, false);
        assert!(clean.is_clean(), "{}", clean.render(C));
        assert_eq!(clean.placements, 3);
        let late = audited(62_001, false);
        let kinds: Vec<_> = late
            .divergences
            .iter()
            .map(|d| match d {
                Divergence::BeforeItsLog { job_id, log_ms, .. } => format!("{job_id}@{log_ms}"),
                other => format!("{other}"),
            })
            .collect();
        assert_eq!(kinds, ["j1@62001", "j2@62001", "j3@62001"]);
        let text = late.render(C);
        assert!(
            text.contains("job j1 placed as cycle 9 through sequence 7 at")
                && text.contains("re-derives, but at a time 60001 ms before the log's time then"),
            "{text}"
        );
        // An entry takes effect at most a minute after it was stored: stamped 120 s by a
        // writer's clock running ahead but stored at 2 s, it counts from 62 s.
        assert!(audited(120_000, true).is_clean());
        assert!(!audited(120_000, false).is_clean());
    }

    fn placement_mut<'a>(log: &'a mut [LogEntry], job: &str) -> &'a mut pb::JobPlaced {
        log.iter_mut()
            .find_map(|e| match e.event.as_mut().ok()?.body.as_mut()? {
                Body::JobPlaced(p) if p.job_id == job => Some(p),
                _ => None,
            })
            .unwrap()
    }

    /// A cluster whose operator changed the accounting service's window: one 8-GPU node, a
    /// job of each of two allocations, a 7-day snapshot that ranks `b` first and a newer
    /// 14-day one that ranks `a` first. The service running with 7 days placed `jb` (it took
    /// the first snapshot only); restarted with 14 days after `jb` ended, it placed `ja`.
    /// Each placement's basis names its window, and the audit re-derives each from a fold of
    /// its own window: clean. With one fold for both (any window) the first would diverge.
    #[test]
    fn an_audit_replays_each_decision_under_the_window_its_basis_names() {
        const DAY: i64 = 24 * 3_600_000;
        let (week, fortnight) = (7 * DAY, 14 * DAY);
        let job = |sequence, id: &str, allocation: &str| {
            entry(
                sequence,
                subjects::job_event(C, id, "job_submitted"),
                1_000,
                fairshare_testkit::events::shaped_submitted(C, allocation, id, 1, 8, 600),
            )
        };
        let snapshot = |sequence, window_ms, a: u64, b: u64| {
            let usage = |allocation: &str, charged_gpu_ms| pb::AllocationUsage {
                allocation: allocation.into(),
                charged_gpu_ms,
                allocated_gpu_ms: 1_000_000,
            };
            entry(
                sequence,
                subjects::usage(C),
                1_500,
                Body::UsageSnapshot(pb::UsageSnapshot {
                    cluster: C.into(),
                    window_end_ms: 1_500 + window_ms / DAY,
                    window_ms,
                    through_sequence: sequence - 1,
                    allocations: vec![usage("a", a), usage("b", b)],
                    unallocated_gpu_ms: 0,
                }),
            )
        };
        let share = |name: &str| pb::Account {
            name: name.into(),
            share: 1,
            children: vec![],
        };
        let mut log = vec![
            entry(
                1,
                subjects::policy(C),
                0,
                Body::BudgetTreeSet(pb::BudgetTreeSet {
                    cluster: C.into(),
                    accounts: vec![share("a"), share("b")],
                }),
            ),
            entry(
                2,
                subjects::node(C, "n1"),
                0,
                Body::NodeRegistered(pb::NodeRegistered {
                    cluster: C.into(),
                    node: "n1".into(),
                    gpus: 8,
                }),
            ),
            job(3, "ja", "a"),
            job(4, "jb", "b"),
            snapshot(5, week, 900_000, 100_000),
            snapshot(6, fortnight, 100_000, 900_000),
        ];
        let place = |log: &mut Vec<LogEntry>, window_ms, cycle| {
            let through = log.last().map_or(0, |e| e.sequence);
            let placed = rederive(C, log, Some(window_ms), through, 2_000, cycle);
            assert_eq!(placed.len(), 1);
            let Some(Body::JobPlaced(p)) = &placed[0].body else {
                panic!("not a placement")
            };
            assert_eq!(p.basis.as_ref().map(|b| b.usage_window_ms), Some(window_ms));
            let id = p.job_id.clone();
            log.push(LogEntry {
                sequence: through + 1,
                subject: subjects::job_event(C, &id, "job_placed"),
                event: Ok(placed[0].clone()),
                pending: 0,
                trace: None,
                stored_ms: None,
            });
            id
        };
        assert_eq!(place(&mut log, week, 1), "jb");
        log.push(entry(
            8,
            subjects::job_event(C, "jb", "job_finished"),
            3_000,
            Body::JobFinished(pb::JobFinished {
                job_id: "jb".into(),
                exit_code: 0,
            }),
        ));
        assert_eq!(place(&mut log, fortnight, 2), "ja");
        let report = audit(C, &log);
        assert!(report.is_clean(), "{:?}", report.divergences);
        assert_eq!((report.cycles, report.placements), (2, 2));
        // Replayed under any window, the first cycle ranks by the newer 14-day snapshot and
        // would place `ja` instead.
        let any = rederive(C, &log, None, 6, 2_000, 1);
        assert!(
            matches!(&any[0].body, Some(Body::JobPlaced(p)) if p.job_id == "ja"),
            "{any:?}"
        );
    }

    #[test]
    fn rederive_folds_exactly_the_named_prefix() {
        let log = prefix();
        let all = rederive(C, &log, None, 7, 2_000, 9);
        let ids: Vec<_> = all
            .iter()
            .map(|e| match &e.body {
                Some(Body::JobPlaced(p)) => p.job_id.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(
            ids,
            ["j1", "j2", "j3"],
            "all three fit on two nodes, in queue order"
        );
        assert!(all.iter().all(|e| e.at_ms == 2_000));
        // Through sequence 6 the third job is not known yet.
        let fewer = rederive(C, &log, None, 6, 2_000, 9);
        assert_eq!(fewer.len(), 2);
        let Some(Body::JobPlaced(p)) = &fewer[0].body else {
            panic!()
        };
        assert_eq!(
            p.basis,
            Some(pb::DecisionBasis {
                through_sequence: 6,
                computed_at_ms: 2_000,
                cycle: 9,
                usage_window_ms: 0,
            })
        );
    }

    #[test]
    fn an_untouched_log_audits_clean() {
        let log = decided_log();
        let report = audit(C, &log);
        assert!(report.is_clean(), "{:?}", report.divergences);
        assert_eq!(report.cycles, 1);
        assert_eq!(report.placements, 3);
        assert_eq!(report.unpublished, 0);
        assert_eq!(report.last_sequence, 10);
    }

    #[test]
    fn a_placement_onto_gpus_already_held_is_an_overcommit() {
        assert!(audit(C, &decided_log()).overcommits.is_empty());
        // j2 holds all 8 GPUs of its node; j3 (4 GPUs) is moved there.
        let mut log = decided_log();
        let j2_node = placement_mut(&mut log, "j2").nodes[0].node.clone();
        placement_mut(&mut log, "j3").nodes[0].node = j2_node.clone();
        let report = audit(C, &log);
        assert!(!report.is_clean());
        // Held to this build only from after it, the log passes; from it on, it does not.
        let mut after = report.clone();
        assert_eq!(after.keep_from(11), 2, "j3's divergence and its overcommit");
        assert!(after.is_clean());
        let shown = report.render(C);
        assert_eq!(
            shown
                .lines()
                .filter(|l| l.starts_with("DIVERGENCE "))
                .count(),
            1
        );
        assert_eq!(
            shown
                .lines()
                .filter(|l| l.starts_with("OVERCOMMIT "))
                .count(),
            1
        );
        assert!(shown.contains("1 divergences, 1 over-committed"), "{shown}");
        assert!(!shown.contains("set aside"), "{shown}");
        let shown = after.render(C);
        assert_eq!(shown.lines().count(), 1, "{shown}");
        assert!(shown.ends_with("2 earlier findings set aside\n"), "{shown}");
        let mut from = report.clone();
        assert_eq!(from.keep_from(10), 0);
        assert!(!from.is_clean());
        assert_eq!(
            report.overcommits,
            [Overcommit {
                sequence: 10,
                job_id: "j3".into(),
                node: j2_node,
                gpus: 4,
                held: 8,
                capacity: 8,
            }]
        );
        // One node named twice, each part within its 8 GPUs, both together not: the fold holds
        // them as one holding of 10, and so does the audit.
        let mut log = decided_log();
        let p = placement_mut(&mut log, "j1");
        let node = p.nodes[0].node.clone();
        p.nodes = vec![
            pb::NodeGpus {
                node: node.clone(),
                gpus: 5,
            },
            pb::NodeGpus {
                node: node.clone(),
                gpus: 5,
            },
        ];
        let report = audit(C, &log);
        assert!(
            report
                .overcommits
                .iter()
                .any(|o| o.job_id == "j1" && o.node == node && o.gpus == 10),
            "{:?}",
            report.overcommits
        );
        // A node nobody registered has no GPUs to give.
        let mut log = decided_log();
        placement_mut(&mut log, "j1").nodes[0].node = "n9".into();
        let report = audit(C, &log);
        assert!(matches!(
            report.overcommits.as_slice(),
            [Overcommit { job_id, capacity: 0, .. }] if job_id == "j1"
        ));
    }

    #[test]
    fn a_changed_node_is_a_divergence() {
        let mut log = decided_log();
        placement_mut(&mut log, "j1").nodes[0].node = "n9".into();
        let report = audit(C, &log);
        assert_eq!(report.divergences.len(), 1);
        match &report.divergences[0] {
            Divergence::Differs { job_id, key, .. } => {
                assert_eq!(job_id, "j1");
                assert_eq!(key.cycle, 9);
            }
            other => panic!("expected Differs, got {other:?}"),
        }
        // Said in words: the nodes each side names and the cycle, not two debug dumps.
        let said = report.divergences[0].to_string();
        assert!(said.contains("placed on n9:"), "{said}");
        assert!(said.contains("re-derived on n"), "{said}");
        assert!(said.contains("(cycle 9 through sequence "), "{said}");
        assert!(!said.contains("Event {"), "{said}");
    }

    #[test]
    fn a_basis_claim_that_does_not_hold_is_a_divergence() {
        // j3 claims to be decided from the state through sequence 6, where it was not yet
        // submitted.
        let mut log = decided_log();
        placement_mut(&mut log, "j3")
            .basis
            .as_mut()
            .unwrap()
            .through_sequence = 6;
        let report = audit(C, &log);
        assert_eq!(report.cycles, 2);
        assert!(matches!(
            report.divergences.as_slice(),
            [Divergence::NotRederived { job_id, key, .. }] if job_id == "j3" && key.through_sequence == 6
        ));
        // Through 6 the decision places j1 and j2, which the log has under the other basis;
        // through 7 it also places j3, which the log has under the false claim.
        assert_eq!(report.unpublished, 3);
    }

    #[test]
    fn missing_and_impossible_bases_are_divergences() {
        let mut log = decided_log();
        placement_mut(&mut log, "j1").basis = None;
        placement_mut(&mut log, "j2")
            .basis
            .as_mut()
            .unwrap()
            .through_sequence = 99;
        let report = audit(C, &log);
        let mut kinds: Vec<_> = report
            .divergences
            .iter()
            .map(|d| match d {
                Divergence::NoBasis { job_id, .. } => format!("none:{job_id}"),
                Divergence::FromTheFuture { job_id, .. } => format!("future:{job_id}"),
                other => format!("{other:?}"),
            })
            .collect();
        kinds.sort();
        assert_eq!(kinds, ["future:j2", "none:j1"]);
        assert_eq!(report.placements, 3);
        // j3's group still re-derives; the other two were decided but are not in the log.
        assert_eq!(report.unpublished, 2);
    }

    #[test]
    fn replay_hands_each_cycle_the_state_it_was_decided_from() {
        let mut log = decided_log();
        // A later cycle, decided after the first placements were folded: nothing more fits.
        let first = log.clone();
        log.push(entry(
            11,
            subjects::job_event(C, "j1", "job_finished"),
            3_000,
            Body::JobFinished(pb::JobFinished {
                job_id: "j1".into(),
                exit_code: 0,
            }),
        ));
        log.push(submitted(12, "j4", 2));
        for event in rederive(C, &log, None, 12, 4_000, 10) {
            let Some(Body::JobPlaced(p)) = &event.body else {
                panic!()
            };
            log.push(LogEntry {
                sequence: 13,
                subject: subjects::job_event(C, &p.job_id, "job_placed"),
                event: Ok(event.clone()),
                pending: 0,
                trace: None,
                stored_ms: None,
            });
        }
        let mut seen = Vec::new();
        let bad = replay_cycles(C, &log, |key, state, logged| {
            seen.push((
                key.cycle,
                state.last_applied(),
                logged.len(),
                state.queued_len(),
            ));
        });
        assert!(bad.is_empty());
        assert_eq!(seen, [(9, 7, 3, 3), (10, 12, 1, 1)]);
        assert!(audit(C, &log).is_clean());
        assert!(audit(C, &first).is_clean());
    }

    /// An over-commit says what it most likely came from: a node gone, a node shrunk, or two
    /// decisions at once; and an audit of a cluster with no events refuses to pass.
    #[tokio::test]
    async fn an_overcommit_names_its_likely_cause_and_an_empty_cluster_is_not_audited() {
        let words = |held, capacity| {
            Overcommit {
                sequence: 9,
                job_id: "j".into(),
                node: "n1".into(),
                gpus: 4,
                held,
                capacity,
            }
            .to_string()
        };
        assert!(
            words(0, 0).contains("not a registered node"),
            "{}",
            words(0, 0)
        );
        assert!(words(6, 4).contains("registered again with fewer"));
        assert!(words(6, 8).contains("two decisions gave away the same GPUs"));
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server
            .jetstream(std::time::Duration::from_secs(5))
            .await
            .unwrap();
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        assert!(matches!(
            audit_log(&js, "nobody").await,
            Err(AuditError::NoEvents(c)) if c == "nobody"
        ));
    }

    /// The audit holds a cycle's re-derived placements only until the last of its logged
    /// ones has streamed past: what it keeps does not grow with the log.
    #[test]
    fn a_cycle_is_held_only_while_its_placements_are_still_to_come() {
        let log = decided_log();
        let mut plan = PlacementPlan::new(C);
        for entry in &log {
            plan.note(entry);
        }
        let mut check = plan.check();
        let mut held = Vec::new();
        for entry in &log {
            check.feed(entry);
            held.push((entry.sequence, check.cycles_held()));
        }
        // The basis ends at 7; its cycle is re-derived as entry 8 (its first placement) comes
        // and dropped with its last (10).
        assert_eq!(
            held,
            [
                (1, 0),
                (3, 0),
                (4, 0),
                (5, 0),
                (6, 0),
                (7, 0),
                (8, 1),
                (9, 1),
                (10, 0)
            ]
        );
        let report = check.finish();
        assert!(report.is_clean(), "{report:?}");
        assert_eq!((report.cycles, report.placements), (1, 3));
    }

    /// The audit reads the log twice and holds none of it: a second read that finds other
    /// entries than the first (a purge between them) refuses, rather than re-deriving from a
    /// log the first read did not plan for; entries that landed since are left alone.
    #[tokio::test]
    async fn the_second_read_refuses_a_log_that_lost_entries_since_the_first() {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server
            .jetstream(std::time::Duration::from_secs(5))
            .await
            .unwrap();
        /// A fresh events stream holding `decided_log()` at its own sequences (its gap, 2, is
        /// another cluster's entry).
        async fn publish_log(js: &jetstream::Context) {
            fairshare_runtime::nats::ensure_streams(js, 1)
                .await
                .unwrap();
            let mut next = 1;
            for entry in decided_log() {
                let event = entry.event.unwrap();
                while next < entry.sequence {
                    js.publish(subjects::policy("other"), codec::encode(&event))
                        .await
                        .unwrap()
                        .await
                        .unwrap();
                    next += 1;
                }
                let subject = subjects::for_event(C, &event).unwrap();
                let ack = js
                    .publish(subject, codec::encode(&event))
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                assert_eq!(ack.sequence, entry.sequence);
                next += 1;
            }
        }
        publish_log(&js).await;
        let mut first = 0;
        let extent = read_each(&js, C, |_| first += 1).await.unwrap();
        assert_eq!(first, 9);
        assert_eq!((extent.entries, extent.last_sequence), (9, 10));

        // What lands after the first read is not read again.
        js.publish(
            subjects::job_event(C, "j1", "job_started"),
            codec::encode(&pb::Event {
                at_ms: 3_000,
                body: Some(Body::JobStarted(pb::JobStarted {
                    job_id: "j1".into(),
                })),
            }),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        let mut again = Vec::new();
        read_again(&js, C, extent, |e| again.push(e.sequence))
            .await
            .unwrap();
        assert_eq!(again, [1, 3, 4, 5, 6, 7, 8, 9, 10]);
        let report = audit_log(&js, C).await.unwrap();
        assert!(report.is_clean(), "{report:?}");
        assert_eq!((report.entries, report.placements), (10, 3));

        // An entry removed between the reads: refused, naming both counts.
        let stream = js
            .get_stream(fairshare_events::streams::EVENTS_STREAM)
            .await
            .unwrap();
        // The events stream denies deleting one message; an operator's purge of a subject
        // (here node n1's registration, sequence 3) is allowed.
        stream
            .purge()
            .filter(subjects::node(C, "n1"))
            .await
            .unwrap();
        let refused = read_again(&js, C, extent, |_| {}).await;
        assert!(
            matches!(
                &refused,
                Err(AuditError::LogChanged { first, second, .. })
                    if first.entries == 9 && second.entries == 8
            ),
            "{refused:?}"
        );
        let words = refused.unwrap_err().to_string();
        assert!(
            words.contains("changed between the audit's two reads"),
            "{words}"
        );

        // The stream made anew with the same entries at the same sequences: another log all
        // the same (the first read's plan is not of it).
        js.delete_stream(fairshare_events::streams::EVENTS_STREAM)
            .await
            .unwrap();
        publish_log(&js).await;
        let mut again = 0;
        let refused = read_again(&js, C, extent, |_| again += 1).await;
        assert_eq!(again, 9, "as many entries through the same sequence");
        assert!(
            matches!(
                &refused,
                Err(AuditError::LogChanged { first, second, .. })
                    if first.entries == second.entries
                        && first.stream_created_ns != second.stream_created_ns
            ),
            "{refused:?}"
        );
        assert!(refused.unwrap_err().to_string().contains("made anew"));
    }
}
