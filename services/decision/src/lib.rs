//! Fair-share decision service: ranks allocations by window usage over allocated time (Fair
//! Tree) and places queued jobs onto nodes, yielding deterministic, replayable placement
//! decisions.
//!
//! - [`domain`] is the pure core (SPEC section 3, "functional core"): a fold of
//!   `(stream sequence, event)` pairs into a [`domain::DecisionState`] and
//!   [`domain::decide()`]`(state, now)`.
//! - [`shell`] is the NATS side: one instance per GPU cluster folds that cluster's log
//!   (`fairshare.events.<cluster>.>`), runs debounced and timed cycles, publishes each
//!   placement as a de-duplicated `JobPlaced` with optimistic concurrency on the job, keeps the
//!   latest waiting reasons ([`shell::Explainer`]) and re-derives any cycle from the log for
//!   audit ([`mod@shell::audit`]). Its fold ([`shell::LogFold`]) is checkpointed in sled with
//!   the last sequence applied, so a restart folds only what came after; the checkpoint is a
//!   cache, and without it the service rebuilds the identical fold from the log. The binary
//!   `fairshare-decision` runs it (or, with `--audit`, audits a cluster's log and exits).
//!
//! # How decision fits with the other services
//!
//! Nothing is called directly; everything goes through the `FAIRSHARE_EVENTS` stream:
//!
//! 1. The submission service appends `JobSubmitted` on `fairshare.events.<c>.job.<id>.job_submitted`.
//! 2. This service folds it, and within the debounce runs a cycle: Fair Tree ranking over the
//!    budget tree (from `BudgetTreeSet` events) with the accounting service's latest
//!    `UsageSnapshot` plus projected usage of work placed since, placement on the registered
//!    nodes (`NodeRegistered`, cordons, maintenance windows), one reservation for the top
//!    blocked job. It appends one `JobPlaced` per placement, stamped with its
//!    `DecisionBasis` (sequence folded through, time, cycle).
//! 3. The launcher of the cluster follows the job events, starts the job and appends
//!    `JobStarted`; later `JobFinished`/`JobFailed`. Accounting charges from `JobStarted` to
//!    the end and publishes snapshots; each end and each snapshot triggers another cycle here.
//! 4. The preemption service orders victims off (`PreemptionOrdered`, `JobPreempted`,
//!    `JobRequeued`); a requeued job is queued again here with its original submit time.
//!
//! Every writer of a job's events appends with the sequence of the newest event of that job it
//! has seen as the expected last sequence over all the job's subjects, so e.g. a placement
//! decided before a cancel is refused by the log rather than started. Deleting nothing and
//! deciding purely from a named log prefix is what makes [`mod@shell::audit`] possible: any
//! placement can be re-derived byte for byte from the log alone.
//!
//! ```
//! use fairshare_decision::domain::{DecisionState, decide};
//! use fairshare_events::pb::{self, event::Body};
//!
//! let mut state = DecisionState::new("alpha");
//! let events = [
//!     Body::BudgetTreeSet(pb::BudgetTreeSet {
//!         cluster: "alpha".into(),
//!         accounts: vec![pb::Account { name: "team".into(), share: 1, children: vec![] }],
//!     }),
//!     Body::NodeRegistered(pb::NodeRegistered {
//!         cluster: "alpha".into(),
//!         node: "n1".into(),
//!         gpus: 8,
//!     }),
//!     Body::JobSubmitted(pb::JobSubmitted {
//!         job_id: "j1".into(),
//!         spec: Some(pb::JobSpec {
//!             cluster: "alpha".into(),
//!             allocation: "team".into(),
//!             gpus: 2,
//!             min_runtime_s: 900,
//!             ..Default::default()
//!         }),
//!         shape: Some(pb::Shape { nodes: 1, gpus_per_node: 2 }),
//!         ..Default::default()
//!     }),
//! ];
//! for (seq, body) in events.into_iter().enumerate() {
//!     state.apply(seq as u64 + 1, &pb::Event { at_ms: 0, body: Some(body) }).unwrap();
//! }
//! let decision = decide(&state, 1_000);
//! let placed = decision.job_placed(7);
//! assert_eq!(placed[0].job_id, "j1");
//! assert_eq!(placed[0].nodes[0].gpus, 2);
//! assert_eq!(placed[0].basis.as_ref().unwrap().through_sequence, 3);
//! ```

pub mod domain;
pub mod shell;
