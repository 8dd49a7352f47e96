//! Fair-share decision service: ranks allocations by window usage over allocated time (Fair
//! Tree) and places queued jobs onto nodes, yielding deterministic, replayable placement
//! decisions.
//!
//! [`domain`] is the pure core (SPEC section 3, "functional core"): a fold of
//! `(stream sequence, event)` pairs into a [`domain::DecisionState`] and
//! [`domain::decide()`]`(state, now)`. The shell (JetStream consumer, debounced cycles,
//! de-duplicated publishing, sled checkpoint) is built on top of it.
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
