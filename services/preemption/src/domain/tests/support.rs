//! Event builders and a harness that numbers sequences for the preemption tests.

use fairshare_events::pb::{self, event::Body};

use crate::domain::{Config, PreemptionState, decide_preemptions};
use fairshare_decision::domain::Ignored;

pub const CLUSTER: &str = "c";
pub const SEC: i64 = 1_000;
pub const MIN: i64 = 60 * SEC;
pub const HOUR: i64 = 60 * MIN;

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

/// A preemption state for cluster `c` fed with consecutive sequence numbers.
pub struct H {
    pub state: PreemptionState,
    pub cfg: Config,
    seq: u64,
}

impl H {
    pub fn new() -> H {
        H {
            state: PreemptionState::new(CLUSTER),
            cfg: Config::default(),
            seq: 0,
        }
    }

    pub fn apply(&mut self, at: i64, body: Body) -> Result<(), Ignored> {
        self.seq += 1;
        self.state.apply(
            self.seq,
            &pb::Event {
                at_ms: at,
                body: Some(body),
            },
        )
    }

    pub fn ok(&mut self, at: i64, body: Body) {
        self.apply(at, body).unwrap();
    }

    pub fn seq(&self) -> u64 {
        self.seq
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

    /// Two allocations `a` and `b` with equal shares.
    pub fn two_teams(&mut self) {
        self.tree(vec![leaf("a", 1), leaf("b", 1)]);
    }

    /// [`H::two_teams`] on `nodes` of 8 GPUs each.
    pub fn two_teams_on(nodes: &[&str]) -> H {
        let mut h = H::new();
        h.two_teams();
        for n in nodes {
            h.node(n, 8);
        }
        h
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

    pub fn cordon(&mut self, at: i64, name: &str) {
        self.ok(
            at,
            Body::NodeCordoned(pb::NodeCordoned {
                cluster: CLUSTER.into(),
                node: name.into(),
                reason: "test".into(),
            }),
        );
    }

    pub fn uncordon(&mut self, at: i64, name: &str) {
        self.ok(
            at,
            Body::NodeUncordoned(pb::NodeUncordoned {
                cluster: CLUSTER.into(),
                node: name.into(),
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

    /// Submits `nodes x gpn` GPUs for `allocation`.
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

    /// A single-node resumable job of `gpus` GPUs, priority 0.
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

    /// Submits, places and starts a resumable job at `at`.
    pub fn running(
        &mut self,
        at: i64,
        id: &str,
        allocation: &str,
        min_runtime_s: i64,
        nodes: &[(&str, u32)],
    ) {
        self.running_full(at, id, allocation, min_runtime_s, nodes, true);
    }

    pub fn running_full(
        &mut self,
        at: i64,
        id: &str,
        allocation: &str,
        min_runtime_s: i64,
        nodes: &[(&str, u32)],
        resumable: bool,
    ) {
        let gpus: u32 = nodes.iter().map(|n| n.1).sum();
        let count = nodes.len() as u32;
        self.submit_full(
            at,
            id,
            allocation,
            count,
            gpus / count,
            min_runtime_s,
            0,
            resumable,
        );
        self.place(at, id, nodes);
        self.start(at, id);
    }

    /// A usage snapshot ending at `window_end_ms`: `(allocation, charged, allocated)` GPU-ms.
    pub fn snapshot(&mut self, window_end_ms: i64, rows: &[(&str, u64, u64)]) {
        let through = self.seq;
        self.ok(
            window_end_ms,
            Body::UsageSnapshot(pb::UsageSnapshot {
                cluster: CLUSTER.into(),
                window_end_ms,
                window_ms: 7 * 24 * HOUR,
                through_sequence: through,
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

    pub fn confirm(&mut self, at: i64, id: &str) {
        self.ok(
            at,
            Body::JobPreempted(pb::JobPreempted {
                job_id: id.into(),
                killed: false,
            }),
        );
    }

    /// What a decision cycle at `now` would place: `(job, its nodes joined by ",")`, sorted.
    pub fn placements(&self, now: i64) -> Vec<(String, String)> {
        let decision = fairshare_decision::domain::decide(self.state.decision(), now);
        let mut placed: Vec<(String, String)> = decision
            .placements
            .iter()
            .map(|p| {
                let nodes: Vec<&str> = p.nodes.iter().map(|n| n.node).collect();
                (p.job_id.to_owned(), nodes.join(","))
            })
            .collect();
        placed.sort();
        placed
    }

    /// The nodes a decision cycle at `now` would reserve, in its order.
    pub fn reserved(&self, now: i64) -> Vec<String> {
        let decision = fairshare_decision::domain::decide(self.state.decision(), now);
        decision
            .reservation
            .iter()
            .flat_map(|r| r.nodes.iter().map(|n| n.node.to_owned()))
            .collect()
    }

    pub fn decide(&self, now: i64) -> Vec<Body> {
        decide_preemptions(&self.state, now, &self.cfg)
    }

    /// Decides at `now` and folds what was decided; returns it.
    pub fn step(&mut self, now: i64) -> Vec<Body> {
        let out = self.decide(now);
        for b in &out {
            self.ok(now, b.clone());
        }
        out
    }
}

/// `(victim, for job)` of every order, in order.
pub fn orders(out: &[Body]) -> Vec<(String, String)> {
    out.iter()
        .filter_map(|b| match b {
            Body::PreemptionOrdered(p) => Some((p.job_id.clone(), p.for_job_id.clone())),
            _ => None,
        })
        .collect()
}

/// `(victim, cause)` of every order, in order.
pub fn causes(out: &[Body]) -> Vec<(String, pb::PreemptionCause)> {
    out.iter()
        .filter_map(|b| match b {
            Body::PreemptionOrdered(p) => Some((p.job_id.clone(), p.cause())),
            _ => None,
        })
        .collect()
}

/// Victims ordered off, in order.
pub fn victims(out: &[Body]) -> Vec<String> {
    orders(out).into_iter().map(|o| o.0).collect()
}

/// A compact rendering of every body, for exact comparisons.
pub fn render(out: &[Body]) -> Vec<String> {
    out.iter()
        .map(|b| match b {
            Body::PreemptionOrdered(p) => format!(
                "order {} for {:?} by {}",
                p.job_id, p.for_job_id, p.grace_deadline_ms
            ),
            Body::JobPreempted(p) => format!("preempted {} killed={}", p.job_id, p.killed),
            Body::JobRequeued(r) => format!("requeued {}", r.job_id),
            Body::NodeDrained(n) => format!("drained {}", n.node),
            other => format!("{other:?}"),
        })
        .collect()
}
