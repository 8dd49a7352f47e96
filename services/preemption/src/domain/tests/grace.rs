//! Grace deadlines as the folds keep them: counted from when the log got the order.
use fairshare_events::pb::{self, event::Body};

use super::support::*;
use crate::domain::grace;

/// An order written a minute after it was decided (re-sent once NATS came back, or sent late
/// from a client's buffer) gives its victim the whole grace from when the stream stored it,
/// in both folds: its kill is not due at once, and its GPUs are not counted free before then.
#[test]
fn an_order_stored_late_gives_its_victim_the_whole_grace_from_then() {
    let mut h = H::two_teams_on(&["n1"]);
    h.running(0, "x", "b", 600, &[("n1", 8)]);
    let decided = HOUR;
    let order = pb::Event {
        at_ms: decided,
        body: Some(Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "x".into(),
            grace_deadline_ms: decided + 30_000,
            reason: "test".into(),
            for_job_id: String::new(),
            basis: None,
            cause: 0,
        })),
    };
    let stored = decided + 60_000;
    h.state
        .apply_stored(h.seq() + 1, &order, Some(stored))
        .unwrap();
    let in_force = stored + 30_000;
    assert_eq!(h.state.orders()["x"].grace_deadline_ms, in_force);
    let (_, placed) = h.state.placed("x").unwrap();
    assert_eq!(placed.preempt_deadline_ms, Some(in_force));
    assert!(grace::expired(&h.state, stored).is_empty(), "not at once");
    assert!(grace::expired(&h.state, in_force - 1).is_empty());
    assert!(!grace::expired(&h.state, in_force).is_empty());
}
