//! What an inventory change would do to the work already on the cluster: nodes registered with
//! fewer GPUs than their jobs hold, and queued jobs no node could hold any more.
//!
//! Place in the flow: `fairshare inventory apply` and `fairshare node remove` read the decision
//! service's fold of the log ([`super::fold_log`]) before they write, and use these to refuse a
//! shrink under running work (unless `--force`) and to warn about queued jobs the change
//! strands: such a job waits until nodes that hold it are registered, or it is cancelled
//! (`fairshare explain` says so, code `never_fits_cluster`).

use fairshare_decision::domain::state::DecisionState;
use fairshare_events::pb;
use fairshare_model::inventory::Inventory;
use fairshare_model::words::Gpus;

/// Longest list of job ids a message names before it says "and N more".
const NAMED: usize = 10;

/// `ids`, at most [`NAMED`] of them, then how many more.
fn name_some(ids: &[&str]) -> String {
    let mut text = ids
        .iter()
        .take(NAMED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > NAMED {
        text.push_str(&format!(" and {} more", ids.len() - NAMED));
    }
    text
}

/// Each node `registrations` would give fewer GPUs than its jobs hold now, in words:
/// `gpu000: 4 GPUs, but its jobs hold 5 (j1, j2, ...)`.
pub(crate) fn overfull(state: &DecisionState, registrations: &[pb::NodeRegistered]) -> Vec<String> {
    registrations
        .iter()
        .filter_map(|r| {
            let load = state.load(&r.node)?;
            if load.used <= r.gpus {
                return None;
            }
            let jobs: Vec<&str> = load.holdings.iter().map(|(id, _)| &**id).collect();
            Some(format!(
                "{}: {}, but its jobs hold {} ({})",
                r.node,
                Gpus(u64::from(r.gpus)),
                load.used,
                name_some(&jobs)
            ))
        })
        .collect()
}

/// The queued jobs the cluster's nodes hold now that `after` (the inventory once the change is
/// made) could not hold, even empty.
pub(crate) fn stranded<'s>(state: &'s DecisionState, after: &Inventory) -> Vec<&'s str> {
    let now = state.inventory();
    state
        .queued_shapes()
        .filter(|(_, shape)| now.could_hold(*shape) && !after.could_hold(*shape))
        .map(|(id, _)| id)
        .collect()
}

/// The warning for `jobs` stranded by a change, if any.
pub(crate) fn stranded_warning(jobs: &[&str]) -> Option<String> {
    (!jobs.is_empty()).then(|| {
        format!(
            "no node could hold {} queued job{} any more: {}; {} wait{} until nodes that hold \
             {} are registered, or cancel {} (`fairshare cancel`)",
            jobs.len(),
            if jobs.len() == 1 { "" } else { "s" },
            name_some(jobs),
            if jobs.len() == 1 { "it" } else { "they" },
            if jobs.len() == 1 { "s" } else { "" },
            if jobs.len() == 1 { "it" } else { "them" },
            if jobs.len() == 1 { "it" } else { "them" },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairshare_events::pb::event::Body;

    fn event(at_ms: i64, body: Body) -> pb::Event {
        pb::Event {
            at_ms,
            body: Some(body),
        }
    }

    fn registered(node: &str, gpus: u32) -> pb::NodeRegistered {
        pb::NodeRegistered {
            cluster: "c".into(),
            node: node.into(),
            gpus,
        }
    }

    fn submitted(id: &str, nodes: u32, gpus_per_node: u32) -> Body {
        fairshare_testkit::events::shaped_submitted("c", "a", id, nodes, gpus_per_node, 60)
    }

    /// Two nodes of 8; j1 holds 5 GPUs of n0; "wide" (2 x 8) and "big" (8) wait, "small" too.
    fn state() -> DecisionState {
        let mut s = DecisionState::new("c");
        let bodies = vec![
            Body::NodeRegistered(registered("n0", 8)),
            Body::NodeRegistered(registered("n1", 8)),
            submitted("j1", 1, 5),
            Body::JobPlaced(pb::JobPlaced {
                job_id: "j1".into(),
                nodes: vec![pb::NodeGpus {
                    node: "n0".into(),
                    gpus: 5,
                }],
                basis: None,
            }),
            submitted("wide", 2, 8),
            submitted("big", 1, 8),
            submitted("small", 1, 2),
        ];
        for (i, body) in bodies.into_iter().enumerate() {
            s.apply(i as u64 + 1, &event(1_000, body)).unwrap();
        }
        s
    }

    #[test]
    fn a_shrink_under_running_work_names_the_node_and_its_jobs() {
        let s = state();
        assert_eq!(
            overfull(&s, &[registered("n0", 4), registered("n1", 4)]),
            ["n0: 4 GPUs, but its jobs hold 5 (j1)"]
        );
        assert!(overfull(&s, &[registered("n0", 5)]).is_empty());
        assert!(overfull(&s, &[registered("n9", 1)]).is_empty());
    }

    #[test]
    fn queued_jobs_no_node_could_hold_after_a_change_are_named() {
        let s = state();
        let mut after = s.inventory().clone();
        after.remove("n1");
        assert_eq!(stranded(&s, &after), ["wide"]);
        after.register("n0", 4);
        let mut jobs = stranded(&s, &after);
        jobs.sort_unstable();
        assert_eq!(jobs, ["big", "wide"]);
        let warning = stranded_warning(&jobs).unwrap();
        assert!(warning.starts_with("no node could hold 2 queued jobs any more: big, wide;"));
        assert!(stranded(&s, s.inventory()).is_empty());
        assert_eq!(stranded_warning(&[]), None);
    }

    #[test]
    fn long_lists_are_cut_after_ten() {
        let ids: Vec<String> = (0..12).map(|i| format!("j{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert!(name_some(&ids).ends_with("j9 and 2 more"));
    }
}
