//! Accounting service: folds job lifecycle, budget tree and inventory events into exact
//! sliding-window usage per allocation and subtree, and an hourly owed/delivered ledger, for
//! the decision service and for reports.
//!
//! [`domain`] is the pure core (SPEC section 3, "functional core"): a fold of
//! `(stream sequence, event)` pairs whose queries take `now` as an argument. [`shell`] is the
//! NATS side: a JetStream consumer applying the log in order, the sled checkpoint, snapshot
//! publishing and the usage query API.
//!
//! ```
//! use fairshare_accounting::domain::{FoldConfig, UsageFold};
//! use fairshare_events::pb::{self, event::Body};
//!
//! let mut fold = UsageFold::new(FoldConfig::default());
//! let node = Body::NodeRegistered(pb::NodeRegistered {
//!     cluster: "alpha".into(),
//!     node: "n1".into(),
//!     gpus: 8,
//! });
//! fold.apply(1, &pb::Event { at_ms: 0, body: Some(node) });
//! let report = fold.window("alpha", 1_000).unwrap();
//! assert_eq!(report.capacity_gpu_ms, 8_000);
//! ```

pub mod domain;
pub mod shell;
