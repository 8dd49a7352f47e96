//! One event in an operator's words, for `fairshare tail`'s human lines.
//!
//! Place in the flow: a reader at the end of the log; it formats what the services wrote and
//! changes nothing. Every body says who it is about first (job, node, cluster), then the facts
//! an operator acts on; `--json` keeps every field.

use std::borrow::Cow;

use fairshare_events::pb::{self, event::Body};

use fairshare_model::budget::BudgetTree;
use fairshare_model::words::{Gpus, count};

use super::{format_ms, printable};

/// `body` in words: the subject of the event, then its facts.
pub(super) fn summary(body: &Body) -> String {
    match body {
        Body::JobSubmitted(s) => submitted(s),
        Body::JobRejected(r) => {
            let (code, message) = r.rejection.as_ref().map_or(("?", ""), |r| {
                (
                    pb::RejectionCode::try_from(r.code).map_or("unknown code", |c| {
                        c.as_str_name().trim_start_matches("REJECTION_CODE_")
                    }),
                    r.message.as_str(),
                )
            });
            format!(
                "key {:?} (intake #{}): {code}: {message}",
                r.idempotency_key, r.intake_sequence
            )
        }
        Body::JobCancelled(c) => {
            let by = if c.requested_by.is_empty() {
                String::new()
            } else {
                format!(" by {}", c.requested_by)
            };
            format!("job {}{by}: {}", c.job_id, or_none(&c.reason))
        }
        Body::JobPlaced(p) => {
            let nodes: Vec<String> = p
                .nodes
                .iter()
                .map(|n| format!("{}:{}", n.node, n.gpus))
                .collect();
            format!("job {} on {}{}", p.job_id, nodes.join(","), basis(&p.basis))
        }
        Body::JobStarted(s) => format!("job {}", s.job_id),
        Body::JobFinished(f) => format!("job {}: exit code {}", f.job_id, f.exit_code),
        Body::JobFailed(f) => format!("job {}: {}", f.job_id, or_none(&f.reason)),
        Body::PreemptionOrdered(o) => {
            let cause = match pb::PreemptionCause::try_from(o.cause) {
                Ok(c) => c.label().to_owned(),
                Err(_) => format!("cause {}", o.cause),
            };
            format!(
                "job {} off by {} ({cause}){}: {}",
                o.job_id,
                format_ms(o.grace_deadline_ms),
                basis(&o.basis),
                printable(&o.reason)
            )
        }
        Body::JobPreempted(p) => {
            let how = if p.killed {
                "killed at its grace deadline"
            } else {
                "stopped by its launcher"
            };
            format!("job {}: {how}", p.job_id)
        }
        Body::JobRequeued(r) => format!("job {}", r.job_id),
        Body::BudgetTreeSet(t) => match BudgetTree::from_accounts(&t.accounts) {
            Ok(tree) => {
                // Each allocation's fraction of the cluster, as people read a budget (a share
                // is relative to its siblings only). Display only: the services keep it exact.
                let leaves: Vec<String> = tree
                    .allocation_paths()
                    .filter_map(|path| {
                        let f = tree.fraction(tree.allocation(path)?);
                        Some(format!(
                            "{path} {:.1}%",
                            f.num as f64 * 100.0 / f.den as f64
                        ))
                    })
                    .collect();
                format!(
                    "cluster {}: {} allocations ({})",
                    t.cluster,
                    leaves.len(),
                    leaves.join(", ")
                )
            }
            Err(e) => format!("cluster {}: a tree the services refuse: {e}", t.cluster),
        },
        Body::NodeRegistered(n) => format!(
            "node {} of {}: {}",
            n.node,
            n.cluster,
            Gpus(u64::from(n.gpus))
        ),
        Body::NodeCordoned(n) => {
            format!("node {} of {}: {}", n.node, n.cluster, or_none(&n.reason))
        }
        Body::NodeUncordoned(n) => format!("node {} of {}", n.node, n.cluster),
        Body::NodeDrained(n) => format!("node {} of {}", n.node, n.cluster),
        Body::NodeRemoved(n) => format!("node {} of {}", n.node, n.cluster),
        Body::MaintenanceScheduled(m) => format!(
            "{}: {}",
            window(&m.nodes, &m.cluster, m.start_ms, m.end_ms),
            or_none(&m.reason)
        ),
        Body::MaintenanceCancelled(m) => window(&m.nodes, &m.cluster, m.start_ms, m.end_ms),
        Body::UsageSnapshot(u) => format!(
            "cluster {}: {} over the window to {}, through #{}",
            u.cluster,
            count(u.allocations.len() as u64, "allocation"),
            format_ms(u.window_end_ms),
            u.through_sequence
        ),
    }
}

fn submitted(s: &pb::JobSubmitted) -> String {
    let Some(spec) = &s.spec else {
        return format!("job {} (no spec), key {:?}", s.job_id, s.idempotency_key);
    };
    // A rejected request may have asked for a negative count: shown as asked.
    let gpus = u64::try_from(spec.gpus)
        .map_or_else(|_| format!("{} GPUs", spec.gpus), |n| Gpus(n).to_string());
    let shape = match &s.shape {
        Some(sh) if sh.nodes > 1 => format!("{gpus} ({} nodes x {})", sh.nodes, sh.gpus_per_node),
        _ => gpus,
    };
    let runtime = if spec.min_runtime_s == 0 {
        "unallocated (minimum runtime 0)".to_owned()
    } else {
        format!("minimum runtime {} s", spec.min_runtime_s)
    };
    let resumable = if spec.resumable { ", resumable" } else { "" };
    let name = if spec.name.is_empty() {
        String::new()
    } else {
        format!(" {:?}", spec.name)
    };
    format!(
        "job {}{name} of {}: {shape}, {runtime}{resumable}, user {:?}, key {:?}",
        s.job_id, spec.allocation, spec.user, s.idempotency_key
    )
}

/// The decision an event was computed from, if it names one.
fn basis(basis: &Option<pb::DecisionBasis>) -> String {
    basis.as_ref().map_or_else(String::new, |b| {
        format!(" (cycle {}, through #{})", b.cycle, b.through_sequence)
    })
}

/// A maintenance window's nodes and times: `node n1 of c: <start> to <end>`.
fn window(nodes: &[String], cluster: &str, start_ms: i64, end_ms: i64) -> String {
    let kind = if nodes.len() == 1 { "node" } else { "nodes" };
    format!(
        "{kind} {} of {cluster}: {} to {}",
        nodes.join(","),
        format_ms(start_ms),
        format_ms(end_ms)
    )
}

/// A reason as a terminal should show it: anyone may have written it into the log.
fn or_none(text: &str) -> Cow<'_, str> {
    if text.is_empty() {
        "(no reason given)".into()
    } else {
        printable(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z.
    const T: i64 = 1_767_225_600_000;

    #[test]
    fn one_node_and_one_allocation_read_in_the_singular() {
        let window = |nodes: &[&str]| {
            Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                cluster: "c".into(),
                nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
                start_ms: T,
                end_ms: T + 3_600_000,
                reason: "bios".into(),
            })
        };
        assert_eq!(
            summary(&window(&["n1"])),
            "node n1 of c: 2026-01-01T00:00:00Z to 2026-01-01T01:00:00Z: bios"
        );
        assert!(summary(&window(&["n1", "n2"])).starts_with("nodes n1,n2 of c: "));
        let cancelled = Body::JobCancelled(pb::JobCancelled {
            job_id: "j".into(),
            reason: "gone\u{1b}[2J\nfake line".into(),
            ..Default::default()
        });
        assert_eq!(
            summary(&cancelled),
            "job j: gone\\u{1b}[2J\\nfake line",
            "a reason from the log is shown escaped"
        );
        let snapshot = Body::UsageSnapshot(pb::UsageSnapshot {
            cluster: "c".into(),
            allocations: vec![pb::AllocationUsage::default()],
            window_end_ms: T,
            through_sequence: 9,
            ..Default::default()
        });
        assert!(
            summary(&snapshot).starts_with("cluster c: 1 allocation over the window"),
            "{}",
            summary(&snapshot)
        );
    }

    #[test]
    fn events_read_as_facts_not_as_struct_dumps() {
        let submitted = Body::JobSubmitted(pb::JobSubmitted {
            job_id: "j1".into(),
            idempotency_key: "k1".into(),
            spec: Some(pb::JobSpec {
                cluster: "c".into(),
                allocation: "research/nlp".into(),
                user: "ada".into(),
                gpus: 16,
                nodes: 2,
                min_runtime_s: 900,
                resumable: true,
                ..Default::default()
            }),
            shape: Some(pb::Shape {
                nodes: 2,
                gpus_per_node: 8,
            }),
        });
        assert_eq!(
            summary(&submitted),
            "job j1 of research/nlp: 16 GPUs (2 nodes x 8), minimum runtime 900 s, resumable, \
             user \"ada\", key \"k1\""
        );
        let rejected = Body::JobRejected(pb::JobRejected {
            idempotency_key: "k2".into(),
            cluster: "c".into(),
            rejection: Some(pb::Rejection {
                code: pb::RejectionCode::TooManyGpus as i32,
                message: "asked for 500 GPUs".into(),
            }),
            intake_sequence: 7,
        });
        assert_eq!(
            summary(&rejected),
            "key \"k2\" (intake #7): TOO_MANY_GPUS: asked for 500 GPUs"
        );
        let ordered = Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "v".into(),
            grace_deadline_ms: T + 30_000,
            reason: "fair share: makes room".into(),
            for_job_id: "j1".into(),
            basis: Some(pb::DecisionBasis {
                through_sequence: 41,
                computed_at_ms: T,
                cycle: 3,
                ..Default::default()
            }),
            cause: pb::PreemptionCause::ShareFloor.into(),
        });
        assert_eq!(
            summary(&ordered),
            "job v off by 2026-01-01T00:00:30Z (share floor) (cycle 3, through #41): fair \
             share: makes room"
        );
        let tree = Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: "c".into(),
            accounts: vec![
                pb::Account {
                    name: "research".into(),
                    share: 3,
                    children: vec![pb::Account {
                        name: "nlp".into(),
                        share: 1,
                        children: vec![],
                    }],
                },
                pb::Account {
                    name: "infra".into(),
                    share: 1,
                    children: vec![],
                },
            ],
        });
        assert_eq!(
            summary(&tree),
            "cluster c: 2 allocations (infra 25.0%, research/nlp 75.0%)"
        );
        let one = Body::JobSubmitted(pb::JobSubmitted {
            job_id: "j2".into(),
            idempotency_key: "k2".into(),
            spec: Some(pb::JobSpec {
                allocation: "infra".into(),
                gpus: 1,
                ..Default::default()
            }),
            shape: None,
        });
        assert!(
            summary(&one).starts_with("job j2 of infra: 1 GPU, unallocated"),
            "{}",
            summary(&one)
        );
        let killed = Body::JobPreempted(pb::JobPreempted {
            job_id: "v".into(),
            killed: true,
        });
        assert_eq!(summary(&killed), "job v: killed at its grace deadline");
    }
}
