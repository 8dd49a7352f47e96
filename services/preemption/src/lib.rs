//! Preemption service: enforces the minimum-runtime contract, orders victims off for
//! under-served work with a grace period, requeues resumable jobs and drains cordoned nodes and
//! nodes going into maintenance.
//!
//! - [`domain`] is the pure core (SPEC section 3, "functional core"): a fold of
//!   `(stream sequence, event)` pairs into a [`domain::PreemptionState`] (built on the decision
//!   service's own fold, so both rank and place alike) and
//!   [`domain::decide_preemptions()`]`(state, now, config)`, which returns the
//!   `PreemptionOrdered`, `JobPreempted`, `JobRequeued` and `NodeDrained` bodies to append.
//!
//! - [`shell`] is the NATS side: [`shell::Service`] folds `fairshare.events.<cluster>.>` with
//!   an ordered consumer, runs a pass on every change (debounced), at the next grace deadline
//!   or end of a minimum runtime ([`domain::next_due()`]) and on a timer, and appends the
//!   bodies with deterministic message ids and optimistic concurrency on the job's subjects.
//!   Its module doc has the sequence diagram of how decision and preemption coordinate.
//!   It keeps a sled checkpoint of its fold (like the decision service's, only a cache: one
//!   that is unusable is ignored and the log folded from sequence 1).
//!   [`shell::audit()`] re-derives every `PreemptionOrdered` in a log from the prefix its basis
//!   names (`fairshare-preemption --audit`).
//! - [`cli`] holds the policy flags every binary that decides as the service does parses
//!   (the service, its audit, and `fairshare audit`).
//! - The `fairshare-preemption` binary (`src/main.rs`) is a thin wrapper over [`shell::run`].
//!
//! ```
//! use fairshare_events::pb::{self, event::Body};
//! use fairshare_preemption::domain::{Config, PreemptionState, decide_preemptions};
//!
//! let mut state = PreemptionState::new("alpha");
//! let job = |id: &str, allocation: &str, min_runtime_s: i64| {
//!     Body::JobSubmitted(pb::JobSubmitted {
//!         job_id: id.into(),
//!         spec: Some(pb::JobSpec {
//!             cluster: "alpha".into(),
//!             allocation: allocation.into(),
//!             gpus: 8,
//!             min_runtime_s,
//!             resumable: true,
//!             ..Default::default()
//!         }),
//!         shape: Some(pb::Shape { nodes: 1, gpus_per_node: 8 }),
//!         ..Default::default()
//!     })
//! };
//! let events = [
//!     Body::BudgetTreeSet(pb::BudgetTreeSet {
//!         cluster: "alpha".into(),
//!         accounts: vec![pb::Account { name: "team".into(), share: 1, children: vec![] }],
//!     }),
//!     Body::NodeRegistered(pb::NodeRegistered { cluster: "alpha".into(), node: "n1".into(), gpus: 8 }),
//!     // Unallocated work fills the node...
//!     job("free", "team", 0),
//!     Body::JobPlaced(pb::JobPlaced {
//!         job_id: "free".into(),
//!         nodes: vec![pb::NodeGpus { node: "n1".into(), gpus: 8 }],
//!         basis: None,
//!     }),
//!     Body::JobStarted(pb::JobStarted { job_id: "free".into() }),
//!     // ...until an allocated job waits for it.
//!     job("real", "team", 3600),
//! ];
//! for (seq, body) in events.into_iter().enumerate() {
//!     state.apply(seq as u64 + 1, &pb::Event { at_ms: 0, body: Some(body) }).unwrap();
//! }
//! let out = decide_preemptions(&state, 60_000, &Config::default());
//! let Body::PreemptionOrdered(order) = &out[0] else { panic!("{out:?}") };
//! assert_eq!((order.job_id.as_str(), order.for_job_id.as_str()), ("free", "real"));
//! assert_eq!(order.grace_deadline_ms, 60_000 + 30_000);
//! assert_eq!(order.basis.as_ref().unwrap().through_sequence, 6);
//! ```

pub mod cli;
pub mod domain;
pub mod shell;
