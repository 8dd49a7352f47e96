//! What a baseline's scheduling pass sees of the cluster: the nodes' free GPUs, the running
//! jobs with the time each ends, and the clock; and the reservation EASY backfill makes from
//! them.
//!
//! Place in the flow: the replay ([`super::replay`]) owns one [`Cluster`] for the whole run.
//! A pass ([`super::pass::walk`]) places jobs on its nodes and records them as running here;
//! the replay ends them here when they finish. When the first allocated job of a pass's order
//! does not fit, the pass asks [`Cluster::reservation`] when and where it will: the running
//! jobs' ends are walked in time order until enough GPUs are free for it, placed as
//! [`Nodes::place`] would place it then.
//!
//! The ends are the jobs' real run times, which a baseline knows exactly here. Slurm's backfill
//! plans with the time limits users ask for, usually far longer than the run, so it reserves
//! later and backfills less than this: the baselines get the best case.

use std::collections::BTreeSet;

use fairshare_model::shape::Shape;

use super::place::{Held, Nodes};

/// Nodes, running jobs and the clock of one replay.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// Free GPUs per node, and where jobs go.
    pub nodes: Nodes,
    /// What runs, and until when.
    pub running: Running,
    /// The virtual time of the pass, in ms since the Unix epoch.
    pub now_ms: i64,
}

/// Running jobs by the time they end.
#[derive(Debug, Clone, Default)]
pub(crate) struct Running {
    /// `(end, ticket)` of every running job, so ends are walked in time order.
    ends: BTreeSet<(i64, usize)>,
    /// By ticket: its end and the GPUs it holds (empty once it finished, or before it ran).
    jobs: Vec<(i64, Vec<Held>)>,
}

impl Running {
    /// The job with `ticket` started, holding `held` until `ends_ms`.
    pub fn start(&mut self, ticket: usize, ends_ms: i64, held: Vec<Held>) {
        if self.jobs.len() <= ticket {
            self.jobs.resize_with(ticket + 1, Default::default);
        }
        self.ends.insert((ends_ms, ticket));
        self.jobs[ticket] = (ends_ms, held);
    }

    /// The job with `ticket` ended: what it held (nothing if it was not running).
    pub fn finish(&mut self, ticket: usize) -> Vec<Held> {
        let Some((ends_ms, held)) = self.jobs.get_mut(ticket).map(std::mem::take) else {
            return Vec::new();
        };
        self.ends.remove(&(ends_ms, ticket));
        held
    }
}

/// Where and when the first job of a pass's order that does not fit will start: GPUs on those
/// nodes no job may take before then unless it ends by then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// When enough GPUs are free for it, in ms since the Unix epoch.
    pub at_ms: i64,
    /// The nodes it will take then, by index.
    pub nodes: Vec<usize>,
    /// Per reserved node, the GPUs free then beyond what it takes: a job that runs past the
    /// reservation may have those (none on a multi-node job's whole nodes).
    pub spare: Vec<u32>,
}

impl Reservation {
    /// Whether a job started at `now_ms` that runs `duration_ms` ends by the reservation, and
    /// so may take reserved GPUs meanwhile.
    pub fn ends_before(&self, now_ms: i64, duration_ms: i64) -> bool {
        now_ms.saturating_add(duration_ms) <= self.at_ms
    }

    /// The reserved nodes a job running past the reservation may not use for `gpus` GPUs per
    /// node: those with fewer spare GPUs.
    pub fn short_of(&self, gpus: u32) -> Vec<usize> {
        self.nodes
            .iter()
            .zip(&self.spare)
            .filter(|&(_, &spare)| spare < gpus)
            .map(|(&i, _)| i)
            .collect()
    }

    /// A job running past the reservation took `held`: what it took of the spare GPUs is no
    /// longer spare.
    pub fn took(&mut self, held: &[Held]) {
        for &(node, gpus) in held {
            if let Some(k) = self.nodes.iter().position(|&i| i == node) {
                self.spare[k] = self.spare[k].saturating_sub(gpus);
            }
        }
    }
}

impl Cluster {
    /// The reservation for a job of `shape` that does not fit now; `None` if the running jobs'
    /// ends never free enough GPUs for it on nodes that take work (cordons).
    pub fn reservation(&self, shape: Shape) -> Option<Reservation> {
        let nodes = &self.nodes;
        let mut free: Vec<u32> = (0..nodes.len()).map(|i| nodes.free_of(i)).collect();
        let multi = shape.nodes > 1;
        let whole = |i: usize, free: &[u32]| {
            nodes.takes_work(i)
                && nodes.capacity_of(i) == shape.gpus_per_node
                && free[i] == nodes.capacity_of(i)
        };
        let mut whole_count = if multi {
            (0..free.len()).filter(|&i| whole(i, &free)).count()
        } else {
            0
        };
        let mut touched: Vec<usize> = Vec::new();
        let mut ends = self.running.ends.iter().peekable();
        while let Some(&&(at_ms, _)) = ends.peek() {
            // Everything that ends at `at_ms` frees its GPUs together.
            touched.clear();
            while let Some((_, ticket)) = ends.next_if(|(t, _)| *t == at_ms) {
                let held = self.running.jobs.get(*ticket).map_or(&[][..], |j| &j.1);
                for &(i, gpus) in held {
                    let was_whole = whole(i, &free);
                    free[i] = free[i].saturating_add(gpus).min(nodes.capacity_of(i));
                    if multi && !was_whole && whole(i, &free) {
                        whole_count += 1;
                    }
                    touched.push(i);
                }
            }
            if multi {
                if whole_count >= shape.nodes as usize {
                    let chosen: Vec<usize> = (0..free.len())
                        .filter(|&i| whole(i, &free))
                        .take(shape.nodes as usize)
                        .collect();
                    return Some(Reservation {
                        at_ms,
                        spare: vec![0; chosen.len()],
                        nodes: chosen,
                    });
                }
            } else if let Some(best) = touched
                .iter()
                .copied()
                .filter(|&i| nodes.takes_work(i) && free[i] >= shape.gpus_per_node.max(1))
                .min_by_key(|&i| (free[i], i))
            {
                // Untouched nodes had too few GPUs before and still do: the best fit is here.
                return Some(Reservation {
                    at_ms,
                    nodes: vec![best],
                    spare: vec![free[best] - shape.gpus_per_node.max(1)],
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use fairshare_model::inventory::Inventory;

    use super::*;

    fn cluster(sizes: &[u32]) -> Cluster {
        let mut inventory = Inventory::default();
        for (i, gpus) in sizes.iter().enumerate() {
            inventory.register(&format!("n{i}"), *gpus);
        }
        Cluster {
            nodes: Nodes::new(&inventory),
            running: Running::default(),
            now_ms: 0,
        }
    }

    fn shape(nodes: u32, gpus_per_node: u32) -> Shape {
        Shape {
            nodes,
            gpus_per_node,
        }
    }

    /// Places a job of `shape` now, running until `ends_ms`.
    fn run(c: &mut Cluster, ticket: usize, s: Shape, ends_ms: i64) {
        let held = c.nodes.place(s).unwrap();
        c.running.start(ticket, ends_ms, held);
    }

    #[test]
    fn a_single_node_job_is_reserved_the_first_node_that_frees_enough() {
        let mut c = cluster(&[8, 8]);
        run(&mut c, 0, shape(1, 6), 100); // n0: 2 free
        run(&mut c, 1, shape(1, 4), 50); // n1: 4 free
        run(&mut c, 2, shape(1, 3), 30); // n1: 1 free
        // Six GPUs: n1 has 4 free after 30 (not enough), 8 after 50.
        assert_eq!(
            c.reservation(shape(1, 6)),
            Some(Reservation {
                at_ms: 50,
                nodes: vec![1],
                spare: vec![2],
            })
        );
        // Three GPUs: n1 frees three at 30, so 4 free there then.
        assert_eq!(
            c.reservation(shape(1, 3)),
            Some(Reservation {
                at_ms: 30,
                nodes: vec![1],
                spare: vec![1],
            })
        );
        // A finished job is no longer counted on: nothing frees n1 at 50 now.
        let held = c.running.finish(1);
        assert_eq!(held, vec![(1, 4)]);
        assert_eq!(c.running.finish(1), Vec::new());
        assert_eq!(
            c.reservation(shape(1, 7)),
            Some(Reservation {
                at_ms: 100,
                nodes: vec![0],
                spare: vec![1],
            })
        );
    }

    #[test]
    fn a_multi_node_job_waits_for_enough_whole_nodes() {
        let mut c = cluster(&[8, 8, 8]);
        run(&mut c, 0, shape(1, 8), 40); // n0
        run(&mut c, 1, shape(1, 2), 10); // n1
        run(&mut c, 2, shape(1, 2), 60); // n1
        run(&mut c, 3, shape(1, 8), 20); // n2
        // Two whole nodes: n2 at 20, n0 at 40 (n1 only at 60).
        assert_eq!(
            c.reservation(shape(2, 8)),
            Some(Reservation {
                at_ms: 40,
                nodes: vec![0, 2],
                spare: vec![0, 0],
            })
        );
        assert_eq!(
            c.reservation(shape(3, 8)),
            Some(Reservation {
                at_ms: 60,
                nodes: vec![0, 1, 2],
                spare: vec![0, 0, 0],
            })
        );
        assert_eq!(c.reservation(shape(4, 8)), None);
    }

    #[test]
    fn cordoned_nodes_are_never_reserved() {
        let mut c = cluster(&[8, 8]);
        run(&mut c, 0, shape(1, 8), 10); // n0
        run(&mut c, 1, shape(1, 8), 20); // n1
        c.nodes.cordon("n0");
        assert_eq!(
            c.reservation(shape(1, 8)),
            Some(Reservation {
                at_ms: 20,
                nodes: vec![1],
                spare: vec![0],
            })
        );
        c.nodes.cordon("n1");
        assert_eq!(c.reservation(shape(1, 1)), None);
    }
}
