//! Event builders and a small harness that numbers sequences for the decision tests.

use fairshare_events::pb::{self, event::Body};

use crate::domain::{Decision, DecisionState, Ignored, decide};

pub const CLUSTER: &str = "c";
pub const MIN: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;

pub fn acc(name: &str, share: u64, children: Vec<pb::Account>) -> pb::Account {
    pb::Account {
        name: name.into(),
        share,
        children,
    }
}

pub fn leaf(name: &str, share: u64) -> pb::Account {
    acc(name, share, vec![])
}

/// A state for cluster `c` fed with consecutive sequence numbers.
pub struct H {
    pub state: DecisionState,
    pub seq: u64,
    /// Every event offered, with its sequence.
    pub log: Vec<(u64, pb::Event)>,
}

impl H {
    pub fn new() -> H {
        H {
            state: DecisionState::new(CLUSTER),
            seq: 0,
            log: Vec::new(),
        }
    }

    pub fn apply(&mut self, at: i64, body: Body) -> Result<(), Ignored> {
        self.seq += 1;
        let event = pb::Event {
            at_ms: at,
            body: Some(body),
        };
        self.log.push((self.seq, event.clone()));
        let result = self.state.apply(self.seq, &event);
        // The derived parts of the state (node index, holders), kept in step event by event,
        // must equal what loading a checkpoint builds from scratch.
        let bytes = bincode::serialize(&self.state).unwrap();
        let mut restored: DecisionState = bincode::deserialize(&bytes).unwrap();
        // Settings, not checkpointed: the service sets them again on loading.
        restored.set_share_floor(self.state.share_floor());
        restored.set_hourly_floor(self.state.hourly_floor());
        restored.set_debug_allowance_gpus(self.state.debug_allowance_gpus());
        restored.set_usage_window_ms(self.state.usage_window_ms());
        assert_eq!(
            restored, self.state,
            "derived state drifted at {}",
            self.seq
        );
        result
    }

    pub fn ok(&mut self, at: i64, body: Body) {
        self.apply(at, body).unwrap();
    }

    pub fn tree(&mut self, accounts: Vec<pb::Account>) {
        self.ok(
            0,
            Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: CLUSTER.into(),
                accounts,
            }),
        );
    }

    pub fn node(&mut self, name: &str, gpus: u32) {
        self.ok(
            0,
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: CLUSTER.into(),
                node: name.into(),
                gpus,
            }),
        );
    }

    pub fn cordon(&mut self, name: &str) {
        self.ok(
            0,
            Body::NodeCordoned(pb::NodeCordoned {
                cluster: CLUSTER.into(),
                node: name.into(),
                reason: "test".into(),
            }),
        );
    }

    pub fn maintenance(&mut self, at: i64, nodes: &[&str], start_ms: i64, end_ms: i64) {
        self.ok(
            at,
            Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                cluster: CLUSTER.into(),
                nodes: nodes.iter().map(|n| n.to_string()).collect(),
                start_ms,
                end_ms,
                reason: "test".into(),
            }),
        );
    }

    /// Submits `nodes x gpn` GPUs for `allocation` with `min_runtime_s` and `priority`.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_full(
        &mut self,
        at: i64,
        id: &str,
        allocation: &str,
        nodes: u32,
        gpn: u32,
        min_runtime_s: i64,
        priority: i32,
        resumable: bool,
    ) {
        self.ok(
            at,
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: id.into(),
                idempotency_key: format!("k-{id}"),
                spec: Some(pb::JobSpec {
                    cluster: CLUSTER.into(),
                    allocation: allocation.into(),
                    user: "u".into(),
                    gpus: i64::from(nodes * gpn),
                    nodes: i64::from(nodes),
                    min_runtime_s,
                    resumable,
                    priority,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes,
                    gpus_per_node: gpn,
                }),
            }),
        );
    }

    /// A single-node job of `gpus` GPUs, priority 0, resumable.
    pub fn submit(&mut self, at: i64, id: &str, allocation: &str, gpus: u32, min_runtime_s: i64) {
        self.submit_full(at, id, allocation, 1, gpus, min_runtime_s, 0, true);
    }

    pub fn place(&mut self, at: i64, id: &str, nodes: &[(&str, u32)]) {
        self.ok(
            at,
            Body::JobPlaced(pb::JobPlaced {
                job_id: id.into(),
                nodes: nodes
                    .iter()
                    .map(|(n, g)| pb::NodeGpus {
                        node: n.to_string(),
                        gpus: *g,
                    })
                    .collect(),
                basis: None,
            }),
        );
    }

    pub fn start(&mut self, at: i64, id: &str) {
        self.ok(at, Body::JobStarted(pb::JobStarted { job_id: id.into() }));
    }

    /// Submits, places and starts a running job at `at`.
    pub fn running(
        &mut self,
        at: i64,
        id: &str,
        allocation: &str,
        min_runtime_s: i64,
        nodes: &[(&str, u32)],
    ) {
        let gpus: u32 = nodes.iter().map(|n| n.1).sum();
        self.submit(at, id, allocation, gpus, min_runtime_s);
        self.place(at, id, nodes);
        self.start(at, id);
    }

    /// Job `id` ordered off at `at` with grace deadline `deadline_ms` (for no waiter).
    pub fn order_off(&mut self, at: i64, id: &str, deadline_ms: i64) {
        self.ok(
            at,
            Body::PreemptionOrdered(pb::PreemptionOrdered {
                job_id: id.into(),
                grace_deadline_ms: deadline_ms,
                ..Default::default()
            }),
        );
    }

    /// A usage snapshot: `(allocation, charged, allocated)` in GPU-ms.
    pub fn snapshot(&mut self, window_end_ms: i64, rows: &[(&str, u64, u64)]) {
        self.ok(
            window_end_ms,
            Body::UsageSnapshot(pb::UsageSnapshot {
                cluster: CLUSTER.into(),
                window_end_ms,
                window_ms: 7 * 24 * HOUR,
                through_sequence: self.seq,
                allocations: rows
                    .iter()
                    .map(|(a, c, al)| pb::AllocationUsage {
                        allocation: a.to_string(),
                        charged_gpu_ms: *c,
                        allocated_gpu_ms: *al,
                    })
                    .collect(),
                unallocated_gpu_ms: 0,
            }),
        );
    }

    pub fn decide(&self, now: i64) -> Decision<'_> {
        decide(&self.state, now)
    }
}

/// `(job, [(node, gpus)])` of every placement, in order.
pub fn placed(d: &Decision) -> Vec<(String, Vec<(String, u32)>)> {
    d.placements
        .iter()
        .map(|p| {
            (
                p.job_id.to_string(),
                p.nodes
                    .iter()
                    .map(|n| (n.node.to_string(), n.gpus))
                    .collect(),
            )
        })
        .collect()
}

/// Placed job ids, in order.
pub fn placed_ids(d: &Decision) -> Vec<String> {
    d.placements.iter().map(|p| p.job_id.to_string()).collect()
}

/// The reason of waiting job `id` in words (empty if it is not waiting).
pub fn reason_text(d: &Decision, id: &str) -> String {
    d.waiting
        .iter()
        .find(|w| w.job_id == id)
        .map(|w| w.reason.to_string())
        .unwrap_or_default()
}

/// The reason code of waiting job `id`.
pub fn reason(d: &Decision, id: &str) -> &'static str {
    d.waiting
        .iter()
        .find(|w| w.job_id == id)
        .map(|w| w.reason.code())
        .unwrap_or_else(|| panic!("job {id} is not waiting"))
}
