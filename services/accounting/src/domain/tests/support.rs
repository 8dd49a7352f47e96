//! Event builders for the fold's tests.

use fairshare_events::pb::{self, event::Body};

pub fn ev(at_ms: i64, body: Body) -> pb::Event {
    pb::Event {
        at_ms,
        body: Some(body),
    }
}

/// A submission on `cluster` for `allocation` of `nodes x gpus_per_node` GPUs; a minimum runtime
/// of 0 makes it unallocated.
pub fn submit(
    at: i64,
    job: &str,
    cluster: &str,
    allocation: &str,
    nodes: u32,
    gpus_per_node: u32,
    min_runtime_s: i64,
) -> pb::Event {
    ev(
        at,
        Body::JobSubmitted(pb::JobSubmitted {
            job_id: job.into(),
            idempotency_key: format!("key-{job}"),
            spec: Some(pb::JobSpec {
                cluster: cluster.into(),
                allocation: allocation.into(),
                user: "u".into(),
                gpus: i64::from(nodes * gpus_per_node),
                nodes: i64::from(nodes),
                min_runtime_s,
                ..Default::default()
            }),
            shape: Some(pb::Shape {
                nodes,
                gpus_per_node,
            }),
        }),
    )
}

/// `submitted` (a [`submit`]) made resumable: a preemption requeues it rather than ending it.
pub fn resumable(mut submitted: pb::Event) -> pb::Event {
    if let Some(Body::JobSubmitted(s)) = &mut submitted.body
        && let Some(spec) = &mut s.spec
    {
        spec.resumable = true;
    }
    submitted
}

pub fn started(at: i64, job: &str) -> pb::Event {
    ev(at, Body::JobStarted(pb::JobStarted { job_id: job.into() }))
}

pub fn finished(at: i64, job: &str) -> pb::Event {
    ev(
        at,
        Body::JobFinished(pb::JobFinished {
            job_id: job.into(),
            exit_code: 0,
        }),
    )
}

pub fn failed(at: i64, job: &str) -> pb::Event {
    ev(
        at,
        Body::JobFailed(pb::JobFailed {
            job_id: job.into(),
            reason: "oom".into(),
        }),
    )
}

pub fn cancelled(at: i64, job: &str) -> pb::Event {
    ev(
        at,
        Body::JobCancelled(pb::JobCancelled {
            job_id: job.into(),
            ..Default::default()
        }),
    )
}

pub fn preempted(at: i64, job: &str) -> pb::Event {
    ev(
        at,
        Body::JobPreempted(pb::JobPreempted {
            job_id: job.into(),
            killed: false,
        }),
    )
}

pub fn killed(at: i64, job: &str) -> pb::Event {
    ev(
        at,
        Body::JobPreempted(pb::JobPreempted {
            job_id: job.into(),
            killed: true,
        }),
    )
}

pub fn ordered(at: i64, job: &str, deadline: i64) -> pb::Event {
    ev(
        at,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: job.into(),
            grace_deadline_ms: deadline,
            ..Default::default()
        }),
    )
}

pub fn requeued(at: i64, job: &str) -> pb::Event {
    ev(
        at,
        Body::JobRequeued(pb::JobRequeued { job_id: job.into() }),
    )
}

pub fn placed(at: i64, job: &str) -> pb::Event {
    ev(
        at,
        Body::JobPlaced(pb::JobPlaced {
            job_id: job.into(),
            ..Default::default()
        }),
    )
}

pub fn node(at: i64, cluster: &str, name: &str, gpus: u32) -> pb::Event {
    ev(
        at,
        Body::NodeRegistered(pb::NodeRegistered {
            cluster: cluster.into(),
            node: name.into(),
            gpus,
        }),
    )
}

pub fn node_removed(at: i64, cluster: &str, name: &str) -> pb::Event {
    ev(
        at,
        Body::NodeRemoved(pb::NodeRemoved {
            cluster: cluster.into(),
            node: name.into(),
        }),
    )
}

pub fn acc(name: &str, share: u64, children: Vec<pb::Account>) -> pb::Account {
    pb::Account {
        name: name.into(),
        share,
        children,
    }
}

pub fn tree(at: i64, cluster: &str, accounts: Vec<pb::Account>) -> pb::Event {
    ev(
        at,
        Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: cluster.into(),
            accounts,
        }),
    )
}
