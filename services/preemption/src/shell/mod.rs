//! The NATS side of the preemption service: one instance per GPU cluster.
//!
//! Start-up ([`Service::start`]): put the streams in place; load the sled checkpoint
//! ([`Config::checkpoint_dir`]: the [`ShellFold`] and the last stream sequence it applied,
//! written together) if there is a usable one, otherwise start empty; then fold the cluster's
//! log (`fairshare.events.<cluster>.>`) from the next sequence to its current end with a
//! [`Follower`] (an ordered consumer, subscribed before `start` returns, so nothing published
//! afterwards is missed). The checkpoint is a cache (SPEC section 3, principle 1), exactly as in
//! the decision service: its tag names the cluster ([`checkpoint_kind`]), and one that is
//! unreadable, of another format version, of another cluster, whose fold disagrees with the
//! sequence it was saved at, or that is ahead of the log's end is reported and ignored. So
//! deleting the directory is always safe: the next start folds from sequence 1 and holds the
//! identical fold ([`Service::resumed_from`] says which happened). Without a checkpoint
//! directory every start replays the whole log.
//!
//! Checkpoints are written after catch-up, every `checkpoint_every_events` entries or
//! `checkpoint_every`, whichever comes first, and at shutdown. A failed write is logged and
//! the service keeps preempting (the next write carries the then current fold). Writing is
//! synchronous on the serving task (bincode of the whole fold, then a sled flush), so a pass
//! can wait for it.
//!
//! Serving ([`Service::serve`]): one task owns the fold and the passes, so a pass always decides
//! from a prefix of the log and names it exactly (`DecisionBasis.through_sequence`).
//!
//! - Passes run only while this instance holds the cluster's preemption lease
//!   ([`fairshare_runtime::lease`], kept by its own task from start-up on), as in the decision
//!   service: a second instance folds as a standby, a taking waits for the fold to hold the log
//!   as it stood then, and a lost lease stops the service ([`ServiceError::LeaseLost`]).
//! - It keeps folding new entries; each accepted entry makes the state dirty.
//! - A pass runs `debounce` after the first change since the last pass, at the time
//!   [`next_due`] names (a grace deadline, the end of a minimum runtime while allocated work
//!   waits, a drain or maintenance window becoming due), at the next checkpoint of the victims
//!   the last pass held back for their lost work ([`decide_preemptions_and_retry`]: after it
//!   they throw away less, so the order goes then rather than at the next timer), and every
//!   `pass_every` regardless.
//! - A pass runs [`decide_preemptions_and_retry`] at the clock's "now", held to no later than
//!   the log's time and no more than a minute before it ([`HeldClock::never_ahead`]: a host
//!   clock stepped ahead would otherwise end protections and graces early, one set back hold
//!   kills late), stamps its cycle
//!   number (cycle numbers continue from the highest any `PreemptionOrdered` in the log names)
//!   and appends the bodies (see `publish` for subjects, message ids and optimistic concurrency).
//! - **Barrier**: the next pass waits until the fold has applied every event the previous pass
//!   got acknowledged. Otherwise it would not see its own orders and would order the same
//!   victims (or more victims for the same waiter) again. After an effect whose outcome is
//!   unknown (timeout) the pass stops; the effect is sent again, identical, and the barrier
//!   raised to what the server answers (see `publish`), and no pass runs until it answers
//!   (retried with a growing pause). Its deterministic message id and expected sequence make
//!   a repeat land at most once.
//!
//! How decision and preemption coordinate, only through `FAIRSHARE_EVENTS` (time runs down):
//!
//! ```text
//!  submission        decision              preemption (this)          launcher
//!      │                 │                        │                       │
//!      │─JobSubmitted───▶│ (waiter W of under-    │                       │
//!      │  (W, debug)     │  served B: no free     │                       │
//!      │                 │  GPU, stays queued)    │                       │
//!      │                 │                        │ folds the same log:   │
//!      │                 │                        │ W waits; victim V of  │
//!      │                 │                        │ over-served A is past │
//!      │                 │                        │ its min runtime and W │
//!      │                 │                        │ fits once V is gone   │
//!      │                 │◀──PreemptionOrdered────┤──────────────────────▶│
//!      │                 │  {V, for W,            │                       │ stops V
//!      │                 │   deadline=now+grace}  │                       │
//!      │                 │ (counts V's GPUs as    │                       │
//!      │                 │  free from deadline)   │                       │
//!      │                 │                        │                       │
//!      │                 │◀──────────JobPreempted{V, killed:false}────────┤ (confirms)
//!      │                 │   ...or, if no confirmation by the deadline:   │
//!      │                 │◀──JobPreempted{V, killed:true}─┤               │
//!      │                 │                        │                       │
//!      │                 │ V's GPUs free: cycle   │ V resumable:          │
//!      │                 │◀──JobRequeued{V}───────┤ (keeps its place)     │
//!      │                 ├──JobPlaced{W}─────────────────────────────────▶│
//!      │                 │                        │                       │ starts W
//!      │                 │◀──────────────────JobStarted{W}────────────────┤
//!      │                 │ V queued again in A's  │                       │
//!      │                 │ queue at its old place │                       │
//! ```
//!
//! Every writer of a job's events appends with the job's newest sequence as the expected one
//! (`Nats-Expected-Last-Subject-Sequence` over `…job.<id>.*`), so the launcher's confirmation
//! and this service's kill cannot both land, and no pass orders a job off that an order it has
//! folded already stops (a maintenance window may order it again, only to bring its deadline
//! forward).

pub mod audit;
mod fold;
mod over_cap;
mod publish;
#[cfg(test)]
mod testlog;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_decision::shell::window::{RefusedWindows, log_refusal};
use fairshare_events::{pb, subjects};
use fairshare_runtime::checkpoint::{CheckpointError, CheckpointStore};
use fairshare_runtime::clock::Clock;
use fairshare_runtime::held_clock::HeldClock;
use fairshare_runtime::lease::{BucketError, Keeper, Lease, RenewError};
use fairshare_runtime::log::{FollowError, Follower, log_position};
use fairshare_runtime::nats::{StreamSetupError, ensure_streams};
use fairshare_runtime::retry::failure_backoff;
use fairshare_runtime::telemetry::{self, Relation};
use tokio::time::Instant;

use crate::domain::{self, decide_preemptions_and_retry, into_events, next_due, stamp_cycle};
pub use audit::{
    LateOrders, OrderAudit, OrderCheck, OrderDivergence, OrderPlan, PassKey, audit, audit_log,
};
use fairshare_decision::shell::usage_age::UsageAge;
pub use fold::ShellFold;

/// The least wait before deciding again after an effect of unknown outcome (longer after
/// several in a row: [`failure_backoff`]).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Format version of this service's checkpoints; bump it when the fold's serde form changes,
/// or what it folds (older checkpoints are then refused and rebuilt from the log). 9: events
/// on a subject they do not belong to are folded as empty. 10: a drained report of a node that
/// holds work where the log has it does not count. 11: a start stamped before its placement
/// counts from the placement. 12: registered GPUs metered over the hour. 13: owed time under
/// budget trees replaced mid-hour kept. 14: each job's user kept (the decision fold inside).
/// 15: event times held to a minute after the stream stored them (the decision fold inside).
/// 16: runs ended since the usage snapshot's window end kept (the decision fold inside). 17:
/// each run in flight keeps the grace deadline of its order (the decision fold inside). 18: an
/// hour meter counts a run ordered off until its grace deadline only (the decision fold
/// inside).
const CHECKPOINT_VERSION: u32 = 18;

/// The role part of this service's lease key (`preemption.<cluster>`).
pub const LEASE_ROLE: &str = "preemption";

/// How long a clean stop waits for its lease to be let go (a successor otherwise waits the
/// lease's ttl out).
const LEASE_RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Tag of this service's checkpoints: names the state, the cluster and the usage window the
/// fold takes snapshots of, so one cluster's checkpoint is never loaded for another (the
/// fold's own cluster is checked as well), nor one folded under another `--window`. (A
/// checkpoint written before the window was named is of another kind: the first start of a
/// build that names it folds the log afresh, once.)
pub fn checkpoint_kind(cluster: &str, usage_window_ms: Option<i64>) -> String {
    match usage_window_ms {
        None => format!("fairshare-preemption/ShellFold/{cluster}"),
        Some(ms) => format!("fairshare-preemption/ShellFold/{cluster}/window-{ms}ms"),
    }
}

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The GPU cluster this instance preempts for.
    pub cluster: String,
    /// The contract and grace policy.
    pub policy: domain::Config,
    /// A change-driven pass runs this long after the first change since the last pass.
    pub debounce: Duration,
    /// A pass runs at least this often, changes or not.
    pub pass_every: Duration,
    /// Replicas for streams this service creates (1 on a single server, 3 on a cluster).
    pub stream_replicas: usize,
    /// Where the sled checkpoint lives; `None` keeps none and folds the log from sequence 1
    /// on every start.
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after this many applied entries...
    pub checkpoint_every_events: u64,
    /// ...or this long after the last checkpoint, whichever comes first.
    pub checkpoint_every: Duration,
    /// The accounting service's window: usage snapshots of another are refused (`None`: any
    /// window).
    pub usage_window_ms: Option<i64>,
}

impl Config {
    /// Defaults (default policy, 20 ms debounce, a pass at least every 5 s, no checkpoint;
    /// with one, every 10,000 entries or 5 s) for `cluster`.
    pub fn new(cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            policy: domain::Config::default(),
            debounce: Duration::from_millis(20),
            pass_every: Duration::from_secs(5),
            stream_replicas: 1,
            checkpoint_dir: None,
            checkpoint_every_events: 10_000,
            checkpoint_every: Duration::from_secs(5),
            usage_window_ms: None,
        }
    }
}

/// Why the service stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The cluster name cannot be a subject token.
    #[error("invalid cluster name {0:?}: use letters, digits, '-' and '_'")]
    InvalidCluster(String),
    /// The policy is unusable.
    #[error(transparent)]
    Config(#[from] domain::ConfigError),
    /// The streams could not be created or updated.
    #[error(transparent)]
    Streams(#[from] StreamSetupError),
    /// The log could not be followed.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// The log follower stopped (connection closed).
    #[error("the log follower stopped: {0}")]
    FollowerStopped(String),
    /// The checkpoint store could not be opened (e.g. another instance holds it).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The lease bucket could not be opened or made.
    #[error(transparent)]
    LeaseBucket(#[from] BucketError),
    /// Another instance took this cluster's lease: this one stopped ordering.
    #[error("stopped: {0}")]
    LeaseLost(RenewError),
    /// Cut off from NATS with orders of unknown outcome (or a pass under way) once the lease
    /// stopped holding: they may wait in the client's buffer, to land after a successor took
    /// the lease and ordered without them
    /// ([`fairshare_runtime::disconnect::cut_off_unheld`]).
    #[error(
        "stopped: cut off from NATS with preemption orders of unknown outcome after the lease \
         stopped holding; stopping drops them from the client's buffer before another \
         instance may take the lease (restarted, this instance stands by and waits the lease \
         out)"
    )]
    CutOff,
}

/// Whether `unresolved` holds an order made for a waiter: sent again, or landing late from the
/// client's buffer, after a successor took the lease, it could stand beside that one's order for
/// the same waiter (two victims for one job). Kills, requeues and drain orders are fenced on
/// their own job's subject and land once, whoever sends them.
fn orders_unsettled(unresolved: &[publish::Unanswered]) -> bool {
    unresolved.iter().any(|u| !u.for_job_id.is_empty())
}

/// A started service: its fold is at the log's end as of start-up.
pub struct Service {
    config: Config,
    js: jetstream::Context,
    follower: Follower,
    fold: ShellFold,
    /// "Now", the host's clock held to the log's time (a protection ended early, or an
    /// order's grace cut, is a broken promise; one held late keeps GPUs from waiting work).
    now: HeldClock,
    next_cycle: u64,
    /// Whether the usage snapshots the ranking starts from still arrive (warned once per
    /// spell without).
    usage_age: UsageAge,
    /// The sled checkpoint, if configured.
    store: Option<CheckpointStore>,
    /// This cluster's preemption lease: passes run only while this instance holds it, so a
    /// second instance for the cluster folds the log as a standby instead of ordering victims
    /// beside the first ([`fairshare_runtime::lease`]). Kept by its own task.
    lease: Keeper,
    /// The sequence the newest checkpoint holds (0: none).
    checkpointed: u64,
    /// When the stream stored the last entry the fold applied (what a checkpoint of it names,
    /// so that a resume can tell the log it was folded from from one rolled back and written
    /// anew; `None` if unknown).
    last_stored_ms: Option<i64>,
    /// Entries applied since the last checkpoint attempt.
    since_checkpoint: u64,
    /// The checkpoint sequence this start resumed from (0: folded from the beginning).
    resumed_from: u64,
    /// Effects of unknown outcome not settled yet: no pass runs until each is (see
    /// [`Service::resolve`]).
    unresolved: Vec<publish::Unanswered>,
    /// Passes in a row with an effect of unknown outcome, for the back-off.
    failed_passes: u32,
    /// Jobs folded that declare more minimum runtime than this service honours (warned of
    /// once per start).
    over_cap: over_cap::OverCap,
}

impl Service {
    /// Sets up streams and folds the cluster's log to its current end.
    pub async fn start(
        client: async_nats::Client,
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ServiceError> {
        if !subjects::is_valid_token(&config.cluster) {
            return Err(ServiceError::InvalidCluster(config.cluster));
        }
        config.policy.validate()?;
        let js = jetstream::new(client);
        ensure_streams(&js, config.stream_replicas).await?;
        let log = log_position(&js).await?;
        let store = match &config.checkpoint_dir {
            Some(dir) => Some(CheckpointStore::open(
                dir,
                &log.checkpoint_kind(&checkpoint_kind(&config.cluster, config.usage_window_ms)),
                CHECKPOINT_VERSION,
            )?),
            None => None,
        };
        let lease = Lease::for_service(
            &js,
            LEASE_ROLE,
            &config.cluster,
            store.as_ref(),
            config.checkpoint_dir.as_deref(),
            config.stream_replicas,
        )
        .await?;
        let resumed = match &store {
            Some(s) => {
                s.resume_on_log::<ShellFold>(&config.cluster, log.end, &js)
                    .await
            }
            None => None,
        };
        let (mut fold, mut last_stored_ms) = match resumed {
            Some((mut resumed, stored_ms)) => {
                resumed.set_usage_window_ms(config.usage_window_ms);
                (resumed, stored_ms)
            }
            None => (
                ShellFold::with_usage_window(&config.cluster, config.usage_window_ms),
                None,
            ),
        };
        let mut now = HeldClock::new(
            clock,
            "no minimum runtime or grace is cut short or held past its end",
        )
        .never_ahead();
        let resumed_from = fold.last_applied();
        let mut follower = Follower::start(
            &js,
            resumed_from + 1,
            vec![subjects::cluster_events(&config.cluster)],
        )
        .await?;
        follower.resuming_after(last_stored_ms);
        follower.expect_log(&log)?;
        let mut refused = RefusedWindows::default();
        let mut over_cap = over_cap::OverCap::new(config.policy.min_runtime_cap_ms);
        over_cap.note_resumed(
            fold.state()
                .decision()
                .jobs()
                .map(|(id, job)| (id, job.request.min_runtime_ms)),
        );
        if follower.pending_at_start > 0 {
            loop {
                let Some(entry) = follower.next().await else {
                    return Err(ServiceError::FollowerStopped(
                        "connection closed during catch-up".into(),
                    ));
                };
                let entry = entry?;
                let _span = telemetry::entry_span("preemption", &entry, Relation::Linked);
                entry.report_if_undecodable();
                now.observe(&entry);
                if let Err(why) = fold.apply_checked(&entry) {
                    refused.note(entry.sequence, &why);
                }
                over_cap.note(&entry);
                if fold.last_applied() == entry.sequence {
                    last_stored_ms = entry.stored_ms;
                }
                if entry.pending == 0 {
                    break;
                }
            }
        }
        refused.report("preemption");
        tracing::info!(
            cluster = config.cluster,
            resumed_from,
            last_sequence = fold.last_applied(),
            outstanding_orders = fold.state().orders().len(),
            last_cycle = fold.last_cycle(),
            jobs_over_cap = over_cap.count(),
            "log folded; preempting"
        );
        let next_cycle = fold.last_cycle().saturating_add(1);
        let mut service = Self {
            config,
            js,
            follower,
            fold,
            now,
            next_cycle,
            usage_age: UsageAge::default(),
            store,
            lease: Keeper::spawn(lease),
            checkpointed: resumed_from,
            last_stored_ms,
            since_checkpoint: 0,
            resumed_from,
            unresolved: Vec::new(),
            failed_passes: 0,
            over_cap,
        };
        service.now.caught_up_with(&service.js, true).await;
        // A long catch-up is not repeated after a crash before the first timed checkpoint.
        service.checkpoint();
        Ok(service)
    }

    /// The checkpoint sequence this start resumed from; 0 when it folded from the beginning
    /// (no checkpoint configured, none written yet, or one that could not be used).
    pub fn resumed_from(&self) -> u64 {
        self.resumed_from
    }

    /// Writes the fold to the checkpoint store if it moved since the last one. A failed write
    /// is reported and otherwise ignored: the checkpoint is only a cache, and the next attempt
    /// writes the then current fold.
    fn checkpoint(&mut self) {
        self.since_checkpoint = 0;
        let Some(store) = &self.store else {
            return;
        };
        let sequence = self.fold.last_applied();
        if sequence <= self.checkpointed {
            return;
        }
        let started = std::time::Instant::now();
        match store.save_at(sequence, self.last_stored_ms, &self.fold) {
            Ok(()) => {
                self.checkpointed = sequence;
                tracing::debug!(
                    sequence,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "checkpoint written"
                );
            }
            Err(e) => tracing::warn!(sequence, "checkpoint not written: {e}"),
        }
    }

    /// The fold (as of start-up until [`Service::serve`] takes over).
    pub fn fold(&self) -> &ShellFold {
        &self.fold
    }

    /// "Now" for the domain: the clock's, held to at most a minute past the log's time and
    /// never before its newest entry ([`HeldClock`]).
    fn now_ms(&mut self) -> i64 {
        self.now.now_ms()
    }

    /// The instant at which the domain's next due time (Unix ms) falls, seen from `now_ms`.
    fn instant_of(due_ms: i64, now_ms: i64) -> Instant {
        let wait = due_ms.saturating_sub(now_ms).max(0);
        Instant::now() + Duration::from_millis(u64::try_from(wait).unwrap_or(0))
    }

    /// Folds and preempts until `shutdown` completes, then writes a last checkpoint and returns
    /// the fold.
    pub async fn serve(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<ShellFold, ServiceError> {
        // The fold must reach this sequence before the next pass.
        let mut barrier = 0u64;
        // When a pass is due because of a change (catch-up counts as one).
        let mut change_due: Option<Instant> = Some(Instant::now());
        let mut timer_due = Instant::now() + self.config.pass_every;
        // When the last pass, which ordered nothing, held an order back until: its victims'
        // next checkpoint, after which they throw away less. Any change passes sooner anyway
        // (and names its own retry), so one time is kept, the last pass's.
        let mut retry_due: Option<Instant> = None;
        // `interval` refuses a zero period.
        let mut checkpoint_timer =
            tokio::time::interval(self.config.checkpoint_every.max(Duration::from_millis(1)));
        checkpoint_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Times the lease was taken, as last seen.
        let mut lease_taken = 0;
        // While effects of unknown outcome wait: is the client cut off past the lease?
        let mut cut_off_check = tokio::time::interval(Duration::from_millis(250));
        cut_off_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let result = loop {
            let caught_up = self.fold.last_applied() >= barrier;
            let now_ms = self.now_ms();
            let domain_due = next_due(self.fold.state(), now_ms, &self.config.policy)
                .map(|ms| Self::instant_of(ms, now_ms));
            let due = if !self.unresolved.is_empty() {
                // Only the next settling round: nothing is decided until it succeeds.
                change_due
            } else if self.failed_passes > 0 {
                // After a pass with an effect of unknown outcome, only the back-off's retry:
                // the timer and due times would ask a server that refuses every write again
                // every few seconds.
                change_due.filter(|_| caught_up)
            } else {
                [change_due, domain_due, retry_due, Some(timer_due)]
                    .into_iter()
                    .flatten()
                    .min()
                    .filter(|_| caught_up)
            };
            let wake = async move {
                match due {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break Ok(()),
                // Before the log: a follower retrying while cut off must not starve it.
                _ = cut_off_check.tick(), if orders_unsettled(&self.unresolved) => {
                    let hold = self.lease.hold_watch();
                    if fairshare_runtime::disconnect::is_cut_off_unheld(&self.js.client(), &hold) {
                        break Err(ServiceError::CutOff);
                    }
                }
                view = self.lease.changed() => {
                    if let Some(e) = view.lost {
                        break Err(ServiceError::LeaseLost(e));
                    }
                    if view.taken > lease_taken {
                        // The first pass waits until the fold holds the cluster's log as of the
                        // taking: the previous holder's last orders among it.
                        lease_taken = view.taken;
                        barrier = barrier.max(view.log_end);
                        change_due = Some(Instant::now());
                    }
                }
                // Only the lease's holder passes (or settles what it ordered); a lapsed lease
                // waits for the next renewal.
                () = wake, if self.lease.holds(Instant::now()) => {
                    // The server's time read again when due: a server clock stepped ahead and
                    // set right must not keep ending protections early. Before the lease is
                    // looked at again: the request may take a while.
                    self.now.refresh_anchor(&self.js).await;
                    // Looked at again: the wake may have come a while after the loop armed it.
                    if !self.lease.holds(Instant::now()) {
                        continue;
                    }
                    // What a pass or settling round sends while cut off waits in the client's
                    // buffer: once the lease stops holding, the service stops rather than let
                    // an order land after a successor ordered without it (kills and requeues
                    // are fenced on their job's subject, and land once whoever sends them).
                    let cut_off = fairshare_runtime::disconnect::cut_off_unheld(
                        self.js.client(),
                        self.lease.hold_watch(),
                    );
                    if !self.unresolved.is_empty() {
                        let orders = orders_unsettled(&self.unresolved);
                        let resolved = tokio::select! {
                            biased;
                            resolved = self.resolve() => Some(resolved),
                            () = cut_off, if orders => None,
                        };
                        let Some(resolved) = resolved else {
                            break Err(ServiceError::CutOff);
                        };
                        barrier = barrier.max(resolved);
                        if !self.unresolved.is_empty() {
                            // Still no answer: each failed round waits longer.
                            self.failed_passes = self.failed_passes.saturating_add(1);
                        }
                        change_due = Some(Instant::now() + self.retry_wait());
                        continue;
                    }
                    let pass = self.decide_pass();
                    let orders = pass.orders_for_a_waiter();
                    let passed = tokio::select! {
                        biased;
                        passed = self.publish_pass(pass) => Some(passed),
                        () = cut_off, if orders => None,
                    };
                    let Some((outcome, retry_ms, passed_at)) = passed else {
                        break Err(ServiceError::CutOff);
                    };
                    retry_due = retry_ms.map(|ms| Self::instant_of(ms, passed_at));
                    barrier = barrier.max(outcome.max_sequence);
                    let now = Instant::now();
                    timer_due = now + self.config.pass_every;
                    change_due = if outcome.failed > 0 {
                        self.unresolved = outcome.unresolved;
                        let wait = self.retry_wait();
                        self.failed_passes = self.failed_passes.saturating_add(1);
                        Some(now + wait)
                    } else {
                        self.failed_passes = 0;
                        None
                    };
                }
                entry = self.follower.next() => match entry {
                    Some(Ok(entry)) => {
                        let _span = telemetry::entry_span("preemption", &entry, Relation::Child);
                        entry.report_if_undecodable();
                        self.now.observe(&entry);
                        self.over_cap.note(&entry);
                        match self.fold.apply_checked(&entry) {
                            Ok(()) if change_due.is_none() => {
                                change_due = Some(Instant::now() + self.config.debounce);
                            }
                            Ok(()) => {}
                            Err(why) => log_refusal(entry.sequence, &entry.subject, &why),
                        }
                        if self.fold.last_applied() == entry.sequence {
                            self.last_stored_ms = entry.stored_ms;
                        }
                        self.since_checkpoint += 1;
                        if self.since_checkpoint >= self.config.checkpoint_every_events {
                            self.checkpoint();
                        }
                    }
                    // Another log now: the fold describes none of it.
                    Some(Err(e)) if e.ends_following() => break Err(e.into()),
                    Some(Err(e)) => tracing::warn!("log follower: {e}"),
                    None => break Err(ServiceError::FollowerStopped("connection closed".into())),
                },
                _ = checkpoint_timer.tick(), if self.store.is_some() => self.checkpoint(),
            }
        };
        // Whatever stopped the loop, the fold is a prefix of the log and safe to keep.
        self.checkpoint();
        let cut_off = matches!(result, Err(ServiceError::CutOff));
        if self.unresolved.is_empty() && !cut_off {
            // A successor need not wait the lease out.
            self.lease.release(LEASE_RELEASE_WAIT).await;
        } else {
            // Effects of unknown outcome may still land (a client buffer, the stream's
            // replication): a successor taking the lease now would read a log without them
            // and could order another victim off for the same waiter (a kill or a requeue
            // sent again is the same message, but another victim is not). The lease runs out
            // instead, as after a crash, and this directory's next start is another instance,
            // which waits for that too (a restart under the same name would take the lease
            // back at once).
            tracing::warn!(
                unresolved = self.unresolved.len(),
                "stopping with effects of unknown outcome: the lease is left to run out"
            );
            if let Some(store) = &self.store
                && let Err(e) = store.forget_instance_token()
            {
                tracing::warn!("cannot make the next start wait for the lease: {e}");
            }
        }
        tracing::info!(
            cluster = self.config.cluster,
            last_cycle = self.next_cycle.saturating_sub(1),
            last_sequence = self.fold.last_applied(),
            checkpointed = self.checkpointed,
            "preemption service stopped"
        );
        result.map(|()| self.fold)
    }

    /// The wait before the next settling round or pass after effects of unknown outcome.
    fn retry_wait(&self) -> Duration {
        failure_backoff(self.failed_passes).max(RETRY_AFTER)
    }

    /// Settles each effect of unknown outcome ([`publish::settle`]); returns the highest
    /// sequence found (the fold must reach it before the next pass) and keeps the effects
    /// still unanswered.
    async fn resolve(&mut self) -> u64 {
        let mut newest = 0;
        let mut still = Vec::new();
        let now_ms = self.now_ms();
        for unanswered in std::mem::take(&mut self.unresolved) {
            match publish::settle(&self.js, &self.config.cluster, &unanswered, now_ms).await {
                Ok(sequence) => newest = newest.max(sequence),
                Err(e) => {
                    tracing::warn!(
                        subject = unanswered.subject,
                        "cannot settle the outcome of an effect: {e}"
                    );
                    still.push(unanswered);
                }
            }
        }
        self.unresolved = still;
        newest
    }

    /// One pass: decide at "now" ([`Service::now_ms`]) and append the effects. Returns what
    /// publishing them came to; when the pass ordered nothing because victims checkpointed too
    /// long ago, their next checkpoint (Unix ms), when it is worth passing again; and the "now"
    /// it decided at.
    /// Decides a pass at "now" (nothing is sent yet).
    fn decide_pass(&mut self) -> DecidedPass {
        let now_ms = self.now_ms();
        self.usage_age
            .check(self.fold.state().decision(), now_ms, "preemption");
        let (mut bodies, retry_ms) =
            decide_preemptions_and_retry(self.fold.state(), now_ms, &self.config.policy);
        let mut cycle = 0;
        if !bodies.is_empty() {
            cycle = self
                .next_cycle
                .max(self.fold.last_cycle().saturating_add(1));
            self.next_cycle = cycle.saturating_add(1);
            stamp_cycle(&mut bodies, cycle);
        }
        DecidedPass {
            now_ms,
            retry_ms,
            cycle,
            events: into_events(bodies, now_ms),
        }
    }

    /// Sends a pass's effects: what landed, its retry time and "now".
    async fn publish_pass(&mut self, pass: DecidedPass) -> (publish::Outcome, Option<i64>, i64) {
        let DecidedPass {
            now_ms,
            retry_ms,
            cycle,
            events,
        } = pass;
        if events.is_empty() {
            return (publish::Outcome::default(), retry_ms, now_ms);
        }
        let count = events.len();
        let outcome = publish::publish(&self.js, &self.config.cluster, &self.fold, events).await;
        tracing::info!(
            cycle,
            through_sequence = self.fold.last_applied(),
            effects = count,
            landed = outcome.landed,
            duplicates = outcome.duplicates,
            refused = outcome.refused,
            failed = outcome.failed,
            "preemption pass"
        );
        (outcome, retry_ms, now_ms)
    }
}

/// A pass decided, not sent yet.
struct DecidedPass {
    /// The "now" it was decided at.
    now_ms: i64,
    /// When to pass again with no new event ([`decide_preemptions_and_retry`]).
    retry_ms: Option<i64>,
    /// Its cycle number (0 if it has no effect).
    cycle: u64,
    /// Its effects, in order.
    events: Vec<pb::Event>,
}

impl DecidedPass {
    /// Whether it orders anyone off for a waiter (see [`orders_unsettled`]).
    fn orders_for_a_waiter(&self) -> bool {
        self.events.iter().any(|e| {
            matches!(&e.body, Some(pb::event::Body::PreemptionOrdered(o)) if !o.for_job_id.is_empty())
        })
    }
}

/// Starts the service on `client` and serves until `shutdown` completes.
pub async fn run(
    client: async_nats::Client,
    config: Config,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    Service::start(client, config, clock)
        .await?
        .serve(shutdown)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fairshare_events::pb::{self, event::Body};
    use fairshare_runtime::log::LogEntry;

    use super::*;

    /// Waits until `service` holds its lease (10 s at most).
    async fn until_leading(service: &Service) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !service.lease.holds(Instant::now()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the lease is taken");
    }

    fn fold_of(cluster: &str) -> ShellFold {
        let mut fold = ShellFold::new(cluster);
        fold.apply(&LogEntry {
            sequence: 4,
            subject: subjects::node(cluster, "n1"),
            event: Ok(pb::Event {
                at_ms: 1,
                body: Some(Body::NodeRegistered(pb::NodeRegistered {
                    cluster: cluster.into(),
                    node: "n1".into(),
                    gpus: 8,
                })),
            }),
            pending: 0,
            trace: None,
            stored_ms: None,
        });
        fold
    }

    /// Tripwire for the checkpoint format (see `fairshare_testkit::sample_log`): if this
    /// fails, what the fold keeps for the sample log changed. Bump `CHECKPOINT_VERSION` (an
    /// older checkpoint would otherwise be resumed as though this code had folded it, and
    /// differ from a rebuild from the log), then put the new pair here.
    #[test]
    fn the_checkpoint_format_version_moves_with_what_the_fold_keeps() {
        use fairshare_testkit::sample_log::{SAMPLE_CLUSTER, sample_log, state_fingerprint};
        let mut fold = ShellFold::new(SAMPLE_CLUSTER);
        for entry in sample_log() {
            fold.apply(&entry);
        }
        assert_eq!(
            (CHECKPOINT_VERSION, state_fingerprint(&fold)),
            (18, 3_146_338_784_828_975_610),
            "the fold's checkpointed form changed: bump CHECKPOINT_VERSION"
        );
    }

    fn store(dir: &std::path::Path, cluster: &str) -> CheckpointStore {
        CheckpointStore::open(dir, &checkpoint_kind(cluster, None), CHECKPOINT_VERSION).unwrap()
    }

    #[test]
    fn only_a_checkpoint_of_this_cluster_at_its_own_sequence_is_restored() {
        let dir = tempfile::tempdir().unwrap();
        let fold = fold_of("a");
        {
            let s = store(dir.path(), "a");
            assert_eq!(s.resume::<ShellFold>("a", 4), None, "nothing saved yet");
            s.save(4, &fold).unwrap();
            assert_eq!(s.resume::<ShellFold>("a", 4), Some(fold.clone()));
            // A log that ends before the checkpoint is another incarnation of the stream: the
            // checkpoint is refused and removed.
            assert_eq!(s.resume::<ShellFold>("a", 3), None);
            assert!(s.load::<ShellFold>().unwrap().is_none(), "removed");
            s.save(4, &fold).unwrap();
        }
        // Another cluster's store refuses the tag...
        assert_eq!(store(dir.path(), "b").resume::<ShellFold>("b", 4), None);
        // ...and a fold of another cluster under this cluster's tag is refused too.
        let s = store(dir.path(), "b");
        s.save(4, &fold).unwrap();
        assert_eq!(s.resume::<ShellFold>("b", 4), None);
        // A sequence that disagrees with the fold's own.
        s.save(5, &fold_of("b")).unwrap();
        assert_eq!(s.resume::<ShellFold>("b", u64::MAX), None);
        s.save(4, &fold_of("b")).unwrap();
        assert_eq!(s.resume::<ShellFold>("b", 4), Some(fold_of("b")));
        s.write_raw(b"FSC3 not a checkpoint").unwrap();
        assert_eq!(s.resume::<ShellFold>("b", 4), None);
    }

    /// An order of unknown outcome: job v ordered off for w.
    fn unanswered_order() -> publish::Unanswered {
        let order = pb::Event {
            at_ms: 1,
            body: Some(Body::PreemptionOrdered(pb::PreemptionOrdered {
                job_id: "v".into(),
                for_job_id: "w".into(),
                ..Default::default()
            })),
        };
        publish::Unanswered {
            subject: subjects::job_event("c", "v", "preemption_ordered"),
            headers: async_nats::HeaderMap::new(),
            payload: fairshare_events::codec::encode(&order),
            scope: subjects::job("c", "v"),
            for_job_id: "w".into(),
            waiter_seen: 1,
            resend_until_ms: 10_001,
        }
    }

    /// Cut off from NATS with an order of unknown outcome, the service stops once its lease
    /// stops holding: the order may wait in the client's buffer, to land after a successor
    /// took the lease and ordered without it. Cut off with nothing unsettled, it waits for the
    /// server as long as it takes.
    #[tokio::test]
    async fn cut_off_with_an_order_unsettled_it_stops_once_the_lease_stops_holding() {
        use fairshare_runtime::clock::SystemClock;
        const TTL: Duration = Duration::from_secs(15);
        let cut_off = |unresolved: Vec<publish::Unanswered>| async move {
            let mut server = fairshare_testkit::NatsServer::start().unwrap();
            let client = async_nats::connect(server.url()).await.unwrap();
            let mut service = Service::start(client, Config::new("c"), Arc::new(SystemClock))
                .await
                .unwrap();
            until_leading(&service).await;
            service.unresolved = unresolved;
            server.kill();
            let killed = Instant::now();
            let served = service.serve(std::future::pending());
            let stopped = tokio::time::timeout(TTL, served).await.ok();
            (stopped, killed.elapsed())
        };
        let (unsettled, settled) =
            tokio::join!(cut_off(vec![unanswered_order()]), cut_off(Vec::new()));
        let (stopped, after) = unsettled;
        assert!(
            matches!(stopped, Some(Err(ServiceError::CutOff))),
            "{stopped:?}"
        );
        // Not before the lease stopped holding: two thirds of its ttl after the last renewal,
        // which came at most a fifth of the ttl before the server went.
        assert!(after >= TTL * 2 / 3 - TTL / 5, "{after:?}");
        assert!(settled.0.is_none(), "{:?}", settled.0);
    }

    /// A clean stop lets the lease go at once, unless effects of unknown outcome are still to
    /// settle: an order may yet land, and a successor taking over at once would read a log
    /// without it and could order another victim off for the same waiter. It then runs out,
    /// as after a crash, and a restart on the same directory stands by too.
    #[tokio::test]
    async fn a_stop_with_effects_of_unknown_outcome_leaves_the_lease_to_run_out() {
        use fairshare_runtime::clock::SystemClock;
        use fairshare_runtime::lease::Attempt;

        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let start = || {
            let url = server.url();
            let mut config = Config::new("c");
            config.checkpoint_dir = Some(dir.path().join("store"));
            async move {
                let client = async_nats::connect(url).await.unwrap();
                Service::start(client, config, Arc::new(SystemClock))
                    .await
                    .unwrap()
            }
        };
        let stop_holding = |unresolved: Vec<publish::Unanswered>| {
            let started = start();
            async move {
                let mut service = started.await;
                until_leading(&service).await;
                service.unresolved = unresolved;
                service.serve(std::future::ready(())).await.unwrap();
            }
        };
        let successor = || {
            Lease::open_with_ttl(
                &js,
                LEASE_ROLE,
                "c",
                "next".to_owned(),
                1,
                Duration::from_secs(15),
            )
        };

        // Nothing unsettled: let go, and taken at once.
        stop_holding(Vec::new()).await;
        let mut next = successor().await.unwrap();
        assert_eq!(next.try_take().await, Attempt::Taken);
        next.release().await;

        // An order whose outcome is unknown: the lease is still held when the service stopped.
        stop_holding(vec![unanswered_order()]).await;
        let mut next = successor().await.unwrap();
        assert!(
            matches!(next.try_take().await, Attempt::HeldBy(_)),
            "the lease was let go with an order unsettled"
        );
        // Started again on the same checkpoint directory, it is another instance now: it
        // stands by too, where a restart after a clean stop or a crash takes its lease back.
        let restarted = start().await;
        tokio::time::timeout(Duration::from_secs(10), async {
            while !restarted.lease.standing_by(Instant::now()) {
                assert!(
                    !restarted.lease.holds(Instant::now()),
                    "a restart took back the lease of a stop with an order unsettled"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the restart stands by");
    }
}
