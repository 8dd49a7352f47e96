//! The virtual clock: what happens next, in time order.
//!
//! Happenings at the same time come out in a fixed order (by [`Happening`] kind, then in the
//! order they were scheduled), so a run is a pure function of its inputs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Something the world does at a virtual time (the services' reactions are not scheduled: they
/// run after every batch of happenings, see [`super::run`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Happening {
    /// A job's run ends by itself (stale if the job's run number moved on).
    Finish {
        /// The job.
        job_id: Arc<str>,
        /// Which run of the job this is.
        run: u32,
    },
    /// The launcher has stopped a job it was ordered to stop.
    StopConfirmed {
        /// The job.
        job_id: Arc<str>,
        /// Which run of the job was ordered off.
        run: u32,
    },
    /// An operator or manager action (index into the workload's actions).
    Action(usize),
    /// A job is submitted (index into the workload's jobs).
    Submit(usize),
    /// The preemption service's timer: a grace deadline, a drain or a minimum runtime ending,
    /// or its periodic pass.
    Wake,
}

/// A time-ordered queue of happenings.
#[derive(Debug, Default)]
pub struct Agenda {
    heap: BinaryHeap<Reverse<(i64, u8, u64, Happening)>>,
    scheduled: u64,
}

fn rank(h: &Happening) -> u8 {
    match h {
        Happening::Finish { .. } => 0,
        Happening::StopConfirmed { .. } => 1,
        Happening::Action(_) => 2,
        Happening::Submit(_) => 3,
        Happening::Wake => 4,
    }
}

impl Agenda {
    /// Schedules `what` at `at_ms`.
    pub fn schedule(&mut self, at_ms: i64, what: Happening) {
        self.scheduled += 1;
        self.heap
            .push(Reverse((at_ms, rank(&what), self.scheduled, what)));
    }

    /// The time of the next happening.
    pub fn next_time(&self) -> Option<i64> {
        self.heap.peek().map(|Reverse((t, ..))| *t)
    }

    /// Removes and returns the next happening if it is due at `at_ms`.
    pub fn pop_at(&mut self, at_ms: i64) -> Option<Happening> {
        if self.next_time() == Some(at_ms) {
            self.heap.pop().map(|Reverse((.., h))| h)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_then_kind_then_insertion_order() {
        let mut a = Agenda::default();
        a.schedule(10, Happening::Submit(1));
        a.schedule(5, Happening::Wake);
        a.schedule(10, Happening::Submit(0));
        a.schedule(
            10,
            Happening::Finish {
                job_id: "j".into(),
                run: 0,
            },
        );
        assert_eq!(a.next_time(), Some(5));
        assert_eq!(a.pop_at(10), None);
        assert_eq!(a.pop_at(5), Some(Happening::Wake));
        assert!(matches!(a.pop_at(10), Some(Happening::Finish { .. })));
        assert_eq!(a.pop_at(10), Some(Happening::Submit(1)));
        assert_eq!(a.pop_at(10), Some(Happening::Submit(0)));
        assert_eq!(a.next_time(), None);
    }
}
