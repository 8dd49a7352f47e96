//! The preemption service's audit: every `PreemptionOrdered` in a cluster's log re-derived from
//! the log prefix its basis names.
//!
//! Place in the flow: after the fact, beside the decision service's placement audit
//! (`fairshare_decision::shell::audit`). [`decide_preemptions`] is pure, and each order records
//! the pass that made it (`DecisionBasis`: the last sequence folded, the time, the pass's
//! cycle, the usage window the fold took snapshots of). So folding the log through that
//! sequence with the service's own fold ([`ShellFold`]) under that window and deciding again
//! at that time must give the logged order back, byte for
//! byte: the same victim, waiter, cause, reason and grace deadline. [`audit`] checks this for
//! every order, once per pass; `fairshare audit` and `fairshare-preemption --audit` run it over
//! JetStream and the simulator's `--audit` over its own log. Like the placement audit it reads
//! the log twice and holds none of it: the first read ([`OrderPlan`]) counts the orders of each
//! pass, the second ([`OrderCheck`]) folds, decides each pass again where its basis ends and
//! compares the orders as they stream past.
//!
//! The kills, requeues and drain reports a pass also appends carry no basis; they follow from
//! the orders and the grace deadlines, which are what is checked here. A pass may decide more
//! than landed (an order refused by optimistic concurrency because the launcher's stop landed
//! first, or one not sent because the pass stopped at an unacknowledged effect): those are not
//! divergences, and are counted when another order of the same pass landed.
//!
//! One policy for the whole log: orders a service wrote under other flags (another grace), or
//! a build with other rules wrote, do not re-derive and are reported.
//!
//! Re-deriving cannot see an order that is right for its basis but landed in a log that had
//! moved on ([`late_orders`]): one beside another pass's order for the same waiter that landed
//! after its basis (two passes made room for one waiter: two instances deciding at once, or a
//! send held in a client across a reconnect) is a finding, as an over-committed placement is;
//! one whose waiter no longer waited when it landed (its victim stops for nothing: the service
//! looks before it publishes, so only a race of moments lands one) is a notice, and so is one
//! stored past its own grace deadline (a send held across an outage, or a clock behind).

use std::collections::HashMap;
use std::fmt;

use async_nats::jetstream;
use fairshare_decision::shell::AuditError;
use fairshare_decision::shell::read::read_twice;
use fairshare_decision::shell::rederive::{Compared, Logged, Rederivation, Tally};
use fairshare_events::pb::{self, event::Body};
use fairshare_model::timestamp::utc;
use fairshare_runtime::findings;
use fairshare_runtime::log::LogEntry;
use fairshare_runtime::two_reads::{Check, Plan, over_entries};

use super::ShellFold;
use crate::domain::{Config, decide_preemptions, into_events, stamp_cycle};

/// The pass an order names: its basis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PassKey {
    /// The last stream sequence folded before the pass.
    pub through_sequence: u64,
    /// The time the pass decided at.
    pub computed_at_ms: i64,
    /// The pass's cycle number.
    pub cycle: u64,
    /// The usage window the deciding state took snapshots of (0: any).
    pub usage_window_ms: i64,
}

impl fmt::Display for PassKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pass {} at {} ms through sequence {}",
            self.cycle, self.computed_at_ms, self.through_sequence
        )
    }
}

/// An order that does not re-derive.
#[derive(Debug, Clone, PartialEq)]
pub enum OrderDivergence {
    /// The order names no basis, so nothing can re-derive it.
    NoBasis {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
    },
    /// The basis names its own sequence or a later one: no pass could have seen that.
    FromTheFuture {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
        /// The sequence its basis names.
        through_sequence: u64,
    },
    /// Deciding again from the basis orders nobody off for this job.
    NotRederived {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
        /// The pass it names.
        pass: PassKey,
    },
    /// Deciding again orders the job off, but not with these bytes (another waiter, cause,
    /// reason or deadline).
    Differs {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
        /// The pass it names.
        pass: PassKey,
        /// The order as logged.
        logged: Box<pb::Event>,
        /// The order as re-derived.
        rederived: Box<pb::Event>,
    },
    /// Re-derived, but decided at a time earlier than the log it names had reached
    /// ([`Compared::BeforeItsLog`]): no pass's clock is held that far back.
    BeforeItsLog {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
        /// The pass it names.
        pass: PassKey,
        /// The log's time then ([`Compared::BeforeItsLog`]).
        log_ms: i64,
    },
}

impl fmt::Display for OrderDivergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderDivergence::NoBasis { sequence, job_id } => {
                write!(
                    f,
                    "sequence {sequence}: order of job {job_id} names no basis"
                )
            }
            OrderDivergence::FromTheFuture {
                sequence,
                job_id,
                through_sequence,
            } => write!(
                f,
                "sequence {sequence}: order of job {job_id} names a basis through sequence \
                 {through_sequence}, not before it"
            ),
            OrderDivergence::NotRederived {
                sequence,
                job_id,
                pass,
            } => write!(
                f,
                "sequence {sequence}: job {job_id} is not ordered off when {pass} is decided again"
            ),
            OrderDivergence::Differs {
                sequence,
                job_id,
                pass,
                logged,
                rederived,
            } => write!(
                f,
                "sequence {sequence}: the order of job {job_id} differs when {pass} is decided \
                 again: {}",
                differences(logged, rederived)
            ),
            OrderDivergence::BeforeItsLog {
                sequence,
                job_id,
                pass,
                log_ms,
            } => write!(
                f,
                "sequence {sequence}: the order of job {job_id} re-derives from {pass}, but at a \
                 time {} before the log's time then ({}): a pass clock set back, or a forged \
                 basis",
                fairshare_model::duration::exact_words(log_ms.saturating_sub(pass.computed_at_ms)),
                fairshare_model::timestamp::utc(*log_ms)
            ),
        }
    }
}

/// What differs between a logged order and the one decided again, field by field, in words:
/// a grace deadline or a lost-work figure that moved says which flag the audit was not given.
fn differences(logged: &pb::Event, rederived: &pb::Event) -> String {
    let (Some(Body::PreemptionOrdered(l)), Some(Body::PreemptionOrdered(r))) =
        (&logged.body, &rederived.body)
    else {
        return format!("logged {logged:?}, re-derived {rederived:?}");
    };
    let mut out = Vec::new();
    let mut field = |name: &str, l: String, r: String| {
        if l != r {
            out.push(format!("{name} logged {l}, re-derived {r}"));
        }
    };
    field("time", utc(logged.at_ms), utc(rederived.at_ms));
    field(
        "grace deadline",
        utc(l.grace_deadline_ms),
        utc(r.grace_deadline_ms),
    );
    field(
        "for job",
        format!("{:?}", l.for_job_id),
        format!("{:?}", r.for_job_id),
    );
    field(
        "cause",
        format!("{:?}", l.cause()),
        format!("{:?}", r.cause()),
    );
    field(
        "reason",
        format!("{:?}", l.reason),
        format!("{:?}", r.reason),
    );
    field("basis", format!("{:?}", l.basis), format!("{:?}", r.basis));
    if out.is_empty() {
        // Fields this build does not know, or the job id.
        format!("logged {logged:?}, re-derived {rederived:?}")
    } else {
        out.join("; ")
    }
}

/// The outcome of an order audit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderAudit {
    /// Entries of the cluster's log read.
    pub entries: usize,
    /// Last sequence of the cluster's log read.
    pub last_sequence: u64,
    /// Passes (groups of orders by basis) decided again.
    pub passes: usize,
    /// Orders in the log checked.
    pub orders: usize,
    /// Orders decided again but not in the log (refused by optimistic concurrency, or not
    /// sent because the pass stopped early), in passes with at least one order in the log: a
    /// pass none of whose orders landed names no basis anywhere and is not decided again.
    pub unpublished: usize,
    /// Every order that did not re-derive identically.
    pub divergences: Vec<OrderDivergence>,
    /// Orders that landed in a log that had moved on since their pass ([`late_orders`]).
    pub late: Vec<LateOrder>,
    /// Divergences dropped by [`OrderAudit::keep_from`], counted.
    pub set_aside: usize,
}

impl OrderAudit {
    /// Whether every order re-derived identically and none landed beside another pass's
    /// order for its waiter (the notices, of a waiter that no longer waited or an order stored
    /// past its grace deadline, are no findings).
    pub fn is_clean(&self) -> bool {
        self.divergences.is_empty() && !self.late.iter().any(LateOrder::is_finding)
    }

    /// Drops the divergences of orders before sequence `from` and returns how many: a log
    /// written partly under other flags or by a build with other rules is then held to these
    /// from `from` on. (Each pass is re-derived from the log as written, so earlier findings do
    /// not change later ones.)
    pub fn keep_from(&mut self, from: u64) -> usize {
        let dropped = findings::drop_before(&mut self.divergences, from, OrderDivergence::sequence)
            + findings::drop_before(&mut self.late, from, LateOrder::sequence);
        self.set_aside += dropped;
        dropped
    }

    /// The report for people: a line per divergence (`DIVERGENCE ...`), then what was checked
    /// in cluster `cluster`'s log.
    pub fn render(&self, cluster: &str) -> String {
        let of = |kind: fn(&LateOrder) -> bool| -> Vec<&LateOrder> {
            self.late.iter().filter(|l| kind(l)).collect()
        };
        let twice = of(|l| matches!(l, LateOrder::BesideAnother { .. }));
        let graceless = of(|l| matches!(l, LateOrder::PastDeadline { .. }));
        let moved = of(|l| matches!(l, LateOrder::WaiterMoved { .. }));
        let summary = format!(
            "preemption orders of cluster {cluster}: {} entries through sequence {}, {} passes, \
         {} orders re-derived, {} divergences, {} decided but not in the log, {} beside another \
         pass's order for the same waiter, {} landed past their grace deadline, {} landed once \
         the waiter no longer waited",
            self.entries,
            self.last_sequence,
            self.passes,
            self.orders,
            self.divergences.len(),
            self.unpublished,
            twice.len(),
            graceless.len(),
            moved.len()
        );
        findings::Report::default()
            .findings("DIVERGENCE", &self.divergences)
            .findings("TWICE", &twice)
            .findings("NOGRACE", &graceless)
            .findings("NOTICE", &moved)
            .summary(&summary, self.set_aside, "findings")
    }
}

impl OrderDivergence {
    /// The sequence of the order it is about.
    pub fn sequence(&self) -> u64 {
        match self {
            OrderDivergence::NoBasis { sequence, .. }
            | OrderDivergence::FromTheFuture { sequence, .. }
            | OrderDivergence::NotRederived { sequence, .. }
            | OrderDivergence::Differs { sequence, .. }
            | OrderDivergence::BeforeItsLog { sequence, .. } => *sequence,
        }
    }
}

/// An order that re-derives from its basis but landed in a log that had moved on since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LateOrder {
    /// Its waiter no longer waited when it landed (placed, stopped, or ended): the victim
    /// stops for nothing. A notice.
    WaiterMoved {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
        /// The job it was for.
        waiter: String,
        /// What the waiter was then, in words.
        waiter_was: &'static str,
    },
    /// Another pass's order for the same waiter landed after this one's basis and before it:
    /// two passes made room for one waiter. A finding.
    BesideAnother {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
        /// The job it was for.
        waiter: String,
        /// The other order's sequence.
        other: u64,
    },
    /// It was stored past its grace deadline by more than [`GRACE_SKEW_MS`] beyond the log's
    /// own lag ([`LAG_WINDOW`]): the launcher and the decision service took its grace as
    /// over the moment it landed (a send held across an outage, or a preemption service
    /// whose clock ran behind the server's). A notice: the re-derived decision was right, and
    /// a broker outage in a test or in production can hold a send this long.
    PastDeadline {
        /// Its sequence.
        sequence: u64,
        /// The job ordered off.
        job_id: String,
        /// Its grace deadline (Unix ms).
        deadline_ms: i64,
        /// When the stream stored it (Unix ms).
        stored_ms: i64,
    },
}

/// How far past its grace deadline an order may be stored before the audit reports it: the
/// preemption service stamps deadlines by its clock held to the server's, which the stream's
/// stored time is, so only a send held back (or a clock gone wrong) comes near this.
pub const GRACE_SKEW_MS: i64 = 5_000;

/// How many of the cluster's entries before an order tell how long after their own time the
/// stream stored the log: the least lag among those stamped no later than the order is the
/// log's own, which an order's lateness is measured beyond. A live log's is
/// about 0, so a burst of sends held across an outage is measured against the entries stored
/// before it; a log loaded into a stream after the fact (`fairshare-sim load`) lags as a
/// whole, by months, and no order of it is late.
pub const LAG_WINDOW: usize = 32;

impl LateOrder {
    /// The sequence of the order it is about.
    pub fn sequence(&self) -> u64 {
        match self {
            LateOrder::WaiterMoved { sequence, .. }
            | LateOrder::BesideAnother { sequence, .. }
            | LateOrder::PastDeadline { sequence, .. } => *sequence,
        }
    }

    /// Whether it makes the audit fail (not a notice).
    pub fn is_finding(&self) -> bool {
        matches!(self, LateOrder::BesideAnother { .. })
    }
}

impl fmt::Display for LateOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LateOrder::WaiterMoved {
                sequence,
                job_id,
                waiter,
                waiter_was,
            } => write!(
                f,
                "sequence {sequence}: job {job_id} was ordered off for job {waiter}, which was \
                 {waiter_was} by then (the victim stopped for nothing)"
            ),
            LateOrder::BesideAnother {
                sequence,
                job_id,
                waiter,
                other,
            } => write!(
                f,
                "sequence {sequence}: job {job_id} was ordered off for job {waiter} by a pass \
                 that had not seen the order at sequence {other} for the same waiter (two \
                 passes made room for it: two instances deciding, or a late send)"
            ),
            LateOrder::PastDeadline {
                sequence,
                job_id,
                deadline_ms,
                stored_ms,
            } => write!(
                f,
                "sequence {sequence}: the order of job {job_id} landed at {}, {} s past its \
                 grace deadline {}: the launcher and the decision service saw its grace over \
                 as it landed (a send held across an outage, or the preemption service's clock \
                 behind the server's)",
                utc(*stored_ms),
                stored_ms.saturating_sub(*deadline_ms) / 1000,
                utc(*deadline_ms)
            ),
        }
    }
}

/// Every order in `entries` (one cluster's log, in order) that landed in a log that had moved
/// on since its pass ([`LateOrders`]).
pub fn late_orders(cluster: &str, entries: &[LogEntry]) -> Vec<LateOrder> {
    let mut check = LateOrders::new(cluster);
    for entry in entries {
        check.feed(entry);
    }
    check.found
}

/// The orders that landed in a log that had moved on since their pass, found as the log
/// streams past: the waiter no longer waiting, another pass's order for the same waiter
/// landed after the basis, or the order stored past its own grace deadline. Orders of one pass
/// share a basis and are never each other's "another".
pub struct LateOrders {
    /// The log folded up to the entry being looked at.
    fold: fairshare_decision::shell::LogFold,
    /// Per waiter, the orders for it that landed: (sequence, basis).
    landed: HashMap<String, Vec<(u64, Option<pb::DecisionBasis>)>>,
    /// The last [`LAG_WINDOW`] entries with a stored time: (stored, event time) in ms.
    recent: std::collections::VecDeque<(i64, i64)>,
    /// What was found, in log order.
    found: Vec<LateOrder>,
}

impl LateOrders {
    /// The log's own lag before `entry` ([`LAG_WINDOW`]): the least time by which the recent
    /// entries stamped no later than `entry` were stored after their own time, never below 0
    /// (0 when there are none). Entries stamped later are left out, not taken at `entry`'s
    /// time: a writer's clock ahead excuses nothing, and an order stamped by a clock behind
    /// the server's would otherwise find its own skew in every entry stored beside it and
    /// excuse itself; entries that landed ahead of an order held across an outage were
    /// written after it, so they excuse nothing either.
    fn log_lag(&self, entry: &LogEntry) -> i64 {
        let at_ms = entry.event.as_ref().map_or(i64::MAX, |e| e.at_ms);
        self.recent
            .iter()
            .filter(|&&(_, at)| at <= at_ms)
            .map(|&(stored, at)| stored.saturating_sub(at))
            .min()
            .unwrap_or(0)
            .max(0)
    }

    /// Nothing folded yet, of `cluster`.
    pub fn new(cluster: &str) -> Self {
        Self {
            fold: fairshare_decision::shell::LogFold::new(cluster),
            landed: HashMap::new(),
            recent: std::collections::VecDeque::with_capacity(LAG_WINDOW),
            found: Vec::new(),
        }
    }

    /// Looks at the next entry of the log (in order), then folds it.
    pub fn feed(&mut self, entry: &LogEntry) {
        use fairshare_decision::domain::state::JobStatus;
        if let Ok(pb::Event {
            body: Some(Body::PreemptionOrdered(order)),
            ..
        }) = &entry.event
            && let Some(stored_ms) = entry.stored_ms
            && stored_ms.saturating_sub(self.log_lag(entry))
                > order.grace_deadline_ms.saturating_add(GRACE_SKEW_MS)
        {
            self.found.push(LateOrder::PastDeadline {
                sequence: entry.sequence,
                job_id: order.job_id.clone(),
                deadline_ms: order.grace_deadline_ms,
                stored_ms,
            });
        }
        if let Ok(pb::Event {
            body: Some(Body::PreemptionOrdered(order)),
            ..
        }) = &entry.event
            && !order.for_job_id.is_empty()
        {
            let waiter_was = match self.fold.state().job(&order.for_job_id).map(|j| &j.status) {
                Some(JobStatus::Queued) => None,
                Some(JobStatus::Placed(_)) => Some("placed"),
                Some(JobStatus::Preempted) => Some("stopped, waiting for its requeue"),
                None => Some("ended, or unknown"),
            };
            if let Some(waiter_was) = waiter_was {
                self.found.push(LateOrder::WaiterMoved {
                    sequence: entry.sequence,
                    job_id: order.job_id.clone(),
                    waiter: order.for_job_id.clone(),
                    waiter_was,
                });
            }
            let before = self.landed.entry(order.for_job_id.clone()).or_default();
            let through = order.basis.as_ref().map_or(0, |b| b.through_sequence);
            if let Some(&(other, _)) = before
                .iter()
                .find(|(s, basis)| *s > through && *basis != order.basis)
            {
                self.found.push(LateOrder::BesideAnother {
                    sequence: entry.sequence,
                    job_id: order.job_id.clone(),
                    waiter: order.for_job_id.clone(),
                    other,
                });
            }
            before.push((entry.sequence, order.basis));
        }
        if let (Ok(event), Some(stored_ms)) = (&entry.event, entry.stored_ms) {
            if self.recent.len() == LAG_WINDOW {
                self.recent.pop_front();
            }
            self.recent.push_back((stored_ms, event.at_ms));
        }
        self.fold.apply(entry);
    }
}

impl fairshare_decision::shell::window::Basis for PassKey {
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

/// What one log entry is to an order audit.
type Entry<'e> = Logged<'e, PassKey, OrderDivergence, pb::PreemptionOrdered>;

fn classify(entry: &LogEntry) -> Entry<'_> {
    let Ok(event) = &entry.event else {
        return Logged::Other;
    };
    let Some(Body::PreemptionOrdered(order)) = &event.body else {
        return Logged::Other;
    };
    let sequence = entry.sequence;
    let Some(basis) = &order.basis else {
        return Logged::Unkeyed(OrderDivergence::NoBasis {
            sequence,
            job_id: order.job_id.clone(),
        });
    };
    if basis.through_sequence >= sequence {
        return Logged::Unkeyed(OrderDivergence::FromTheFuture {
            sequence,
            job_id: order.job_id.clone(),
            through_sequence: basis.through_sequence,
        });
    }
    let pass = PassKey {
        through_sequence: basis.through_sequence,
        computed_at_ms: basis.computed_at_ms,
        cycle: basis.cycle,
        usage_window_ms: basis.usage_window_ms,
    };
    Logged::Keyed(pass, order, event)
}

/// The first read of an order audit: what each order names, and no more (the passes and how
/// many orders each landed), so the second read ([`OrderCheck`]) knows where to stop and
/// decide again.
pub struct OrderPlan {
    /// The cluster.
    cluster: String,
    /// The preemption service's settings the passes are decided again under.
    policy: Config,
    /// What the first read counted.
    tally: Tally<PassKey, OrderDivergence>,
}

impl OrderPlan {
    /// Nothing read yet, of `cluster`, to be decided again under `policy`.
    pub fn new(cluster: &str, policy: &Config) -> Self {
        Self {
            cluster: cluster.to_owned(),
            policy: *policy,
            tally: Tally::default(),
        }
    }
}

impl Plan for OrderPlan {
    type Check = OrderCheck;

    fn note(&mut self, entry: &LogEntry) {
        self.tally.note(entry.sequence, classify(entry));
    }

    fn check(self) -> OrderCheck {
        let t = self.tally;
        OrderCheck {
            passes: Rederivation::new(&self.cluster, t.per_basis),
            late: LateOrders::new(&self.cluster),
            policy: self.policy,
            report: OrderAudit {
                entries: t.entries,
                last_sequence: t.last_sequence,
                orders: t.decisions,
                divergences: t.unkeyed,
                ..OrderAudit::default()
            },
        }
    }
}

/// The second read of an order audit: folds the log entry by entry with the service's own
/// fold (one per usage window the passes name), decides each pass again when the log reaches
/// the end of its basis, and compares each logged order with its pass's as it streams past
/// ([`Rederivation`]); and looks for orders that landed late ([`LateOrders`]). What is held is
/// the folds and the passes in flight, never the log.
pub struct OrderCheck {
    /// The passes, decided again as the log reaches each.
    passes: Rederivation<ShellFold, PassKey>,
    /// Orders that landed in a log that had moved on.
    late: LateOrders,
    /// The preemption service's settings.
    policy: Config,
    /// The report so far.
    report: OrderAudit,
}

impl OrderCheck {
    /// How many passes' re-derived orders are held, their logged ones still to come.
    pub fn passes_held(&self) -> usize {
        self.passes.bases_held()
    }
}

impl Check for OrderCheck {
    type Report = OrderAudit;

    fn feed(&mut self, entry: &LogEntry) {
        let policy = &self.policy;
        self.passes.feed(entry, |pass, fold| {
            let mut bodies = decide_preemptions(fold.state(), pass.computed_at_ms, policy);
            stamp_cycle(&mut bodies, pass.cycle);
            into_events(bodies, pass.computed_at_ms)
                .into_iter()
                .filter_map(|e| match &e.body {
                    Some(Body::PreemptionOrdered(o)) => Some((o.job_id.clone(), e)),
                    _ => None,
                })
                .collect()
        });
        self.late.feed(entry);
        let Logged::Keyed(pass, order, logged) = classify(entry) else {
            return;
        };
        let (sequence, job_id) = (entry.sequence, order.job_id.clone());
        let divergence = match self
            .passes
            .compare(&pass, &order.job_id, logged, entry.stored_ms)
        {
            Compared::Same => return,
            Compared::NotRederived => OrderDivergence::NotRederived {
                sequence,
                job_id,
                pass,
            },
            Compared::Differs(rederived) => OrderDivergence::Differs {
                sequence,
                job_id,
                pass,
                logged: Box::new(logged.clone()),
                rederived,
            },
            Compared::BeforeItsLog(log_ms) => OrderDivergence::BeforeItsLog {
                sequence,
                job_id,
                pass,
                log_ms,
            },
        };
        self.report.divergences.push(divergence);
    }

    /// The report, divergences in log order.
    fn finish(self) -> OrderAudit {
        let mut report = self.report;
        report.passes = self.passes.bases();
        report.unpublished = self.passes.unpublished();
        report.divergences.sort_by_key(OrderDivergence::sequence);
        report.late = self.late.found;
        report
    }
}

/// Re-derives every pass of `cluster` that ordered anything in `entries` (its log, in order)
/// under `policy` (the service's settings), each from a fold taking the usage snapshots of the
/// window its basis names, and reports every order that does not come out byte-identical, and
/// every order that landed late ([`late_orders`]). The two reads of [`audit_log`], over a log
/// in memory.
pub fn audit(cluster: &str, entries: &[LogEntry], policy: &Config) -> OrderAudit {
    over_entries(OrderPlan::new(cluster, policy), entries)
}

/// [`audit`] over the cluster's log as it stands in JetStream, read twice and never held.
pub async fn audit_log(
    js: &jetstream::Context,
    cluster: &str,
    policy: &Config,
) -> Result<OrderAudit, AuditError> {
    read_twice(js, cluster, OrderPlan::new(cluster, policy)).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::shell::testlog::generated_log;

    /// The logged orders of `log`, as mutable bodies.
    fn orders(log: &mut [LogEntry]) -> Vec<(u64, &mut pb::PreemptionOrdered)> {
        log.iter_mut()
            .filter_map(|e| match e.event.as_mut().ok()?.body.as_mut()? {
                Body::PreemptionOrdered(o) => Some((e.sequence, o)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_order_of_a_log_written_as_the_service_writes_re_derives() {
        let log = generated_log();
        let report = audit("c", &log, &Config::default());
        assert!(report.is_clean(), "{:#?}", report.divergences);
        assert!(report.orders >= 5, "{} orders", report.orders);
        assert!(report.passes >= 3, "{} passes", report.passes);
        assert_eq!(report.unpublished, 0, "every decided order was written");
        assert_eq!(report.entries, log.len());
        assert_eq!(report.last_sequence, log.len() as u64);
    }

    /// The second read holds a pass's re-derived orders only until its last logged order has
    /// streamed past: never more than the passes in flight, none at the end.
    #[test]
    fn a_pass_is_held_only_while_its_orders_are_still_to_come() {
        let log = generated_log();
        let mut plan = OrderPlan::new("c", &Config::default());
        for entry in &log {
            plan.note(entry);
        }
        let mut check = plan.check();
        let mut most = 0;
        for entry in &log {
            check.feed(entry);
            most = most.max(check.passes_held());
        }
        assert_eq!(
            most, 1,
            "a pass's orders land together, before the next pass"
        );
        assert_eq!(check.passes_held(), 0);
        let bases: std::collections::BTreeSet<_> = log
            .iter()
            .filter_map(|e| match &e.event.as_ref().ok()?.body {
                Some(Body::PreemptionOrdered(o)) => o.basis.map(|b| (b.through_sequence, b.cycle)),
                _ => None,
            })
            .collect();
        let report = check.finish();
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.passes, bases.len());
        assert_eq!(report.unpublished, 0);
    }

    #[test]
    fn an_order_changed_after_the_fact_is_reported() {
        let clean = generated_log();
        let total = audit("c", &clean, &Config::default()).orders;

        // Another waiter: the same victim, but the bytes differ. (Later passes, which fold
        // the changed order, may differ too; the divergences come in log order.)
        let mut log = clean.clone();
        let (seq, order) = orders(&mut log).swap_remove(0);
        order.for_job_id = "someone-else".into();
        let report = audit("c", &log, &Config::default());
        assert_eq!(report.orders, total);
        assert!(
            matches!(
                report.divergences.first(),
                Some(OrderDivergence::Differs { sequence, .. }) if *sequence == seq
            ),
            "{:#?}",
            report.divergences
        );

        // A victim no pass would pick (an order the fold then folds like any other, so later
        // passes may differ too, but this one is named first).
        let mut log = clean.clone();
        let (seq, order) = orders(&mut log).swap_remove(0);
        order.job_id = "j9999".into();
        let report = audit("c", &log, &Config::default());
        assert!(
            matches!(
                report.divergences.first(),
                Some(OrderDivergence::NotRederived { sequence, job_id, .. })
                    if *sequence == seq && job_id == "j9999"
            ),
            "{:#?}",
            report.divergences
        );
        // The original victim is now decided but not in the log.
        assert!(report.unpublished >= 1);

        // No basis, or one that names the order's own sequence.
        let mut log = clean.clone();
        let mut all = orders(&mut log);
        let (first, order) = all.swap_remove(0);
        order.basis = None;
        let (last, order) = all.pop().unwrap();
        order.basis.as_mut().unwrap().through_sequence = last;
        let report = audit("c", &log, &Config::default());
        assert!(report.divergences.contains(&OrderDivergence::NoBasis {
            sequence: first,
            job_id: report_job(&log, first),
        }));
        assert!(report.divergences.iter().any(|d| matches!(
            d,
            OrderDivergence::FromTheFuture { sequence, through_sequence, .. }
                if *sequence == last && *through_sequence == last
        )));
    }

    #[test]
    fn another_policy_does_not_re_derive_the_orders() {
        let log = generated_log();
        let longer_grace = Config {
            grace_ms: Config::default().grace_ms + 1_000,
            ..Config::default()
        };
        let report = audit("c", &log, &longer_grace);
        // Every order's deadline moves with the grace period, except where a maintenance
        // window's start cuts it.
        let mut log = log;
        let moved = orders(&mut log)
            .iter()
            .filter(|(_, o)| {
                o.basis.as_ref().unwrap().computed_at_ms + Config::default().grace_ms
                    == o.grace_deadline_ms
            })
            .count();
        assert!(moved >= 5, "{moved} orders");
        assert_eq!(report.divergences.len(), moved);
        assert!(
            report
                .divergences
                .iter()
                .all(|d| matches!(d, OrderDivergence::Differs { .. })),
            "{:#?}",
            report.divergences.first()
        );
        let shown = report.divergences[0].to_string();
        assert!(shown.contains("differs when pass"), "{shown}");
        // Only what differs, in words: the grace deadline, 30 s apart (and no debug dump).
        assert!(
            shown.contains("grace deadline logged 1970-01-01T00:01:30"),
            "{shown}"
        );
        assert!(!shown.contains("reason logged"), "{shown}");
        assert!(!shown.contains("PreemptionOrdered {"), "{shown}");

        // Held to the other grace only from a sequence on: what came before is set aside.
        let last = report.divergences.last().unwrap().sequence();
        let mut from_last = report.clone();
        assert_eq!(from_last.keep_from(last), moved - 1);
        assert_eq!(from_last.divergences.len(), 1);
        let shown = report.render("c");
        let lines = shown
            .lines()
            .filter(|l| l.starts_with("DIVERGENCE "))
            .count();
        assert_eq!(lines, moved, "{shown}");
        let mut after_all = report;
        assert_eq!(after_all.keep_from(last + 1), moved);
        assert!(after_all.is_clean());
        let shown = after_all.render("c");
        assert_eq!(shown.lines().count(), 1, "{shown}");
        assert!(shown.contains(" 0 divergences"), "{shown}");
        assert!(
            shown.ends_with(&format!("{moved} earlier findings set aside\n")),
            "{shown}"
        );
    }

    fn report_job(log: &[LogEntry], sequence: u64) -> String {
        log.iter()
            .find(|e| e.sequence == sequence)
            .and_then(|e| match e.event.as_ref().ok()?.body.as_ref()? {
                Body::PreemptionOrdered(o) => Some(o.job_id.clone()),
                _ => None,
            })
            .unwrap()
    }

    /// Orders that re-derive but landed in a log that had moved on: one of a pass that had not
    /// seen another pass's order for the same waiter is a finding; one whose waiter was placed
    /// by then, a notice; orders of one pass are never each other's "another".
    /// An order the stream stored past its grace deadline by more than the allowance, beyond
    /// the log's own lag, is a notice (the decision was right; a broker outage can hold a send
    /// this long): the first and the second order of a pass held across an outage behind a
    /// held launcher report too. One stored in time, or within the allowance, or without a
    /// stored time, is not, and neither is one in a log loaded into a stream after the fact
    /// (every entry stored long after its time, as `fairshare-sim load` stores a simulated
    /// log).
    #[test]
    fn an_order_stored_past_its_grace_deadline_is_a_notice() {
        use fairshare_events::subjects;
        let c = "c";
        let stored = |mut entry: LogEntry, stored_ms: Option<i64>| {
            entry.stored_ms = stored_ms;
            entry
        };
        let started = |seq: u64, at_ms: i64, stored_ms: i64| {
            let body = Body::JobStarted(pb::JobStarted { job_id: "x".into() });
            let subject = subjects::job_event(c, "x", "job_started");
            let entry = fairshare_testkit::events::logged(seq, subject, at_ms, body);
            stored(entry, Some(stored_ms))
        };
        // Decided at `at_ms` with a 10 s grace.
        let order = |seq: u64, victim: &str, at_ms: i64, stored_ms: Option<i64>| {
            let entry = fairshare_testkit::events::logged(
                seq,
                subjects::job_event(c, victim, "preemption_ordered"),
                at_ms,
                Body::PreemptionOrdered(pb::PreemptionOrdered {
                    job_id: victim.into(),
                    for_job_id: "w".into(),
                    grace_deadline_ms: at_ms + 10_000,
                    ..Default::default()
                }),
            );
            stored(entry, stored_ms)
        };
        let log = vec![
            started(1, 1_000, 1_000),
            order(2, "v1", 1_000, Some(1_000)),
            started(3, 2_000, 2_000),
            order(4, "v2", 2_000, Some(12_000 + GRACE_SKEW_MS)),
            // An outage: a launcher's report and a pass's two orders held in their clients.
            started(5, 3_000, 30_000),
            order(6, "v3", 3_000, Some(30_001)),
            order(7, "v4", 3_000, None),
            order(8, "v5", 3_000, Some(30_002)),
        ];
        let late: Vec<LateOrder> = late_orders(c, &log)
            .into_iter()
            .filter(|l| matches!(l, LateOrder::PastDeadline { .. }))
            .collect();
        let past = |sequence, job_id: &str, stored_ms| LateOrder::PastDeadline {
            sequence,
            job_id: job_id.into(),
            deadline_ms: 13_000,
            stored_ms,
        };
        assert_eq!(late, [past(6, "v3", 30_001), past(8, "v5", 30_002)]);
        let report = OrderAudit {
            late,
            ..OrderAudit::default()
        };
        assert!(report.is_clean(), "a notice does not fail the audit");
        let text = report.render(c);
        assert!(
            text.contains("NOGRACE sequence 6: the order of job v3 landed")
                && text.contains("2 landed past their grace deadline"),
            "{text}"
        );

        // The same entries loaded into a stream months later, a millisecond apart: each is
        // stored long after its time, as the ones before it were, so none is late.
        const DAY: i64 = 86_400_000;
        let loaded: Vec<LogEntry> = log
            .into_iter()
            .map(|mut e| {
                e.stored_ms = e.stored_ms.map(|_| 100 * DAY + e.sequence as i64);
                e
            })
            .collect();
        let late = late_orders(c, &loaded);
        assert!(
            !late
                .iter()
                .any(|l| matches!(l, LateOrder::PastDeadline { .. })),
            "{late:?}"
        );

        // A preemption service whose clock is 60 s behind the server's: its order, stamped
        // 940 s, lands at 1,000 s, 45 s past its deadline and the allowance, among launcher
        // reports stored at their own (the server's) time. Taken at the order's time, each of
        // those reports seemed 50 s late, and the order excused itself by its own skew.
        let mut behind: Vec<LogEntry> = (0..32)
            .map(|i| started(i + 1, 990_000 + 300 * i as i64, 990_000 + 300 * i as i64))
            .collect();
        behind.push(order(33, "v6", 940_000, Some(1_000_000)));
        let late: Vec<LateOrder> = late_orders(c, &behind)
            .into_iter()
            .filter(|l| matches!(l, LateOrder::PastDeadline { .. }))
            .collect();
        assert_eq!(
            late,
            [LateOrder::PastDeadline {
                sequence: 33,
                job_id: "v6".into(),
                deadline_ms: 950_000,
                stored_ms: 1_000_000,
            }]
        );
    }

    /// Orders landing beside another pass's for the same waiter fail the audit (`TWICE`); one
    /// landing once its waiter moved on is a notice.
    #[test]
    fn orders_landing_beside_another_pass_or_after_their_waiter_moved_are_reported() {
        use fairshare_events::subjects;
        use fairshare_testkit::events::{logged, placed_on, shaped_submitted};
        let c = "c";
        let submitted = |seq, job: &str| {
            let subject = subjects::job_event(c, job, "job_submitted");
            logged(seq, subject, 1_000, shaped_submitted(c, "a", job, 1, 4, 0))
        };
        let placed = |seq, job: &str| {
            let subject = subjects::job_event(c, job, "job_placed");
            logged(seq, subject, 1_000, placed_on(job, "n1", 4))
        };
        let order = |seq, victim: &str, through, cycle| {
            logged(
                seq,
                subjects::job_event(c, victim, "preemption_ordered"),
                2_000,
                Body::PreemptionOrdered(pb::PreemptionOrdered {
                    job_id: victim.into(),
                    for_job_id: "w".into(),
                    basis: Some(pb::DecisionBasis {
                        through_sequence: through,
                        computed_at_ms: 2_000,
                        cycle,
                        usage_window_ms: 0,
                    }),
                    ..Default::default()
                }),
            )
        };
        let log = vec![
            submitted(1, "w"),
            // One pass's two victims: no finding.
            order(2, "v1", 1, 1),
            order(3, "v2", 1, 1),
            // Another pass through sequence 1 had not seen them.
            order(4, "v3", 1, 2),
            placed(5, "w"),
            // A pass that saw them all, landing once the waiter was placed.
            order(6, "v4", 4, 3),
        ];
        let late = late_orders(c, &log);
        assert_eq!(
            late,
            vec![
                LateOrder::BesideAnother {
                    sequence: 4,
                    job_id: "v3".into(),
                    waiter: "w".into(),
                    other: 2,
                },
                LateOrder::WaiterMoved {
                    sequence: 6,
                    job_id: "v4".into(),
                    waiter: "w".into(),
                    waiter_was: "placed",
                },
            ]
        );
        let mut report = OrderAudit {
            late,
            ..OrderAudit::default()
        };
        assert!(
            !report.is_clean(),
            "two passes for one waiter fail the audit"
        );
        let text = report.render(c);
        assert!(
            text.contains("TWICE sequence 4") && text.contains("NOTICE sequence 6"),
            "{text}"
        );
        report.keep_from(5);
        assert!(
            report.is_clean(),
            "a notice alone does not: {:?}",
            report.late
        );
    }
}
