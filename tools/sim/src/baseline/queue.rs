//! A queue of waiting jobs, kept as one ordered line per job shape.
//!
//! Place in the flow: each baseline keeps its waiting jobs in [`Queue`]s (FIFO one for the
//! cluster, the others one per allocation); the scheduling pass ([`super::pass::walk`]) reads
//! their heads. Within a queue the order is the one every baseline uses inside a team: declared
//! priority (higher first), then acceptance order (submit time, then workload index).
//!
//! Why per shape: during a pass free GPUs only shrink, so once the first waiting job of a shape
//! does not fit, no later job of that shape fits either. Splitting by shape lets a pass stop
//! looking at a shape after one failure instead of walking tens of thousands of jobs that cannot
//! fit. A job is taken from the head of its line, or, while a reservation holds nodes back,
//! from further down when it ends before the reservation ([`super::pass`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use fairshare_model::shape::Shape;

/// A job's place in its queue: priority (higher first), then its ticket (acceptance order).
pub(crate) type JobKey = (Reverse<i32>, usize);

/// A line of jobs as an ordered key: (unallocated, nodes, GPUs per node). Unallocated work
/// (minimum runtime 0) waits in lines of its own, so a pass can offer it after all allocated
/// work ([`super::pass::walk`]).
pub(crate) type ShapeKey = (bool, u32, u32);

/// The ordered key of the line of jobs of `shape`, unallocated or not.
pub(crate) fn shape_key(shape: Shape, unallocated: bool) -> ShapeKey {
    (unallocated, shape.nodes, shape.gpus_per_node)
}

/// Waiting jobs, one ordered line per shape.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queue {
    lines: BTreeMap<ShapeKey, BTreeSet<JobKey>>,
}

impl Queue {
    /// Adds the job with `ticket`, of `shape` and `priority`, unallocated or not.
    pub fn push(&mut self, shape: Shape, unallocated: bool, priority: i32, ticket: usize) {
        self.lines
            .entry(shape_key(shape, unallocated))
            .or_default()
            .insert((Reverse(priority), ticket));
    }

    /// Whether no job waits.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The first job of every shape.
    pub fn heads(&self) -> impl Iterator<Item = (ShapeKey, JobKey)> + '_ {
        self.lines
            .iter()
            .filter_map(|(shape, line)| line.first().map(|key| (*shape, *key)))
    }

    /// The jobs of `shape` after `key`, in order.
    pub fn after(&self, shape: ShapeKey, key: JobKey) -> impl Iterator<Item = JobKey> + '_ {
        self.lines
            .get(&shape)
            .into_iter()
            .flat_map(move |line| line.range((Bound::Excluded(key), Bound::Unbounded)))
            .copied()
    }

    /// Removes the job `key` of `shape` (it was placed).
    pub fn remove(&mut self, shape: ShapeKey, key: JobKey) {
        if let Some(line) = self.lines.get_mut(&shape) {
            line.remove(&key);
            if line.is_empty() {
                self.lines.remove(&shape);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(gpus: u32) -> Shape {
        Shape {
            nodes: 1,
            gpus_per_node: gpus,
        }
    }

    #[test]
    fn heads_are_the_highest_priority_then_earliest_of_each_shape() {
        let mut q = Queue::default();
        q.push(one(8), false, 0, 0);
        q.push(one(8), false, 5, 3);
        q.push(one(8), false, 5, 1);
        q.push(one(1), false, -1, 2);
        q.push(one(1), true, 9, 4);
        let heads: Vec<_> = q.heads().collect();
        assert_eq!(
            heads,
            vec![
                ((false, 1, 1), (Reverse(-1), 2)),
                ((false, 1, 8), (Reverse(5), 1)),
                ((true, 1, 1), (Reverse(9), 4))
            ]
        );
        assert_eq!(
            q.after((false, 1, 8), (Reverse(5), 1)).collect::<Vec<_>>(),
            vec![(Reverse(5), 3), (Reverse(0), 0)]
        );
        // A job from the middle of its line leaves the head where it is.
        q.remove((false, 1, 8), (Reverse(5), 3));
        assert_eq!(q.heads().nth(1), Some(((false, 1, 8), (Reverse(5), 1))));
        q.remove((false, 1, 8), (Reverse(5), 1));
        assert_eq!(q.heads().nth(1), Some(((false, 1, 8), (Reverse(0), 0))));
        q.remove((false, 1, 8), (Reverse(0), 0));
        q.remove((false, 1, 1), (Reverse(-1), 2));
        q.remove((true, 1, 1), (Reverse(9), 4));
        assert!(q.is_empty());
        assert_eq!(q.after((false, 1, 8), (Reverse(5), 1)).count(), 0);
    }
}
