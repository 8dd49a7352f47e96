//! Promises: GPUs a preemption order freed, held for the waiting job the order was made for.
//!
//! Place in the flow: the preemption service orders victims off for one waiting job (the
//! order's `for_job_id`). Victims leave one by one, each by its own grace deadline, and a
//! multi-node waiter fits only once the last of them is gone. Without a promise, the GPUs of
//! the first victims to leave are free to anyone in the meantime: better-ranked small jobs
//! or unallocated fill take them, the waiter still does not fit, and the next preemption pass
//! orders the fill off again, for the same waiter, without end (a demo run once spent 1,043
//! of its 1,302 orders on one 32-GPU job that never started).
//!
//! So [`DecisionState::apply`] records, when an ordered-off job leaves its nodes while the job
//! its order named is still queued, the GPUs it freed as promised to that job. (Promising the
//! GPUs free beside a victim on its nodes as well, from the order on, was tried: in the
//! simulator it cost the worst allocation 0.4-1.0 points on Helios, medians of 5 runs, and
//! gained no owed time.) The decision
//! cycle ([`crate::domain::place`]) offers promised GPUs to that job alone, and the preemption
//! service's view of free GPUs counts them, and GPUs of victims still leaving, for that job
//! alone too, so the two services agree on who gets them.
//!
//! A promise ends when its job is placed (anywhere) or leaves the queue, or at `until_ms`:
//! the latest grace deadline of the orders made for the job plus [`PROMISE_HOLD_MS`], after
//! which its GPUs are free to anyone again (the job was not placed when its victims were all
//! gone, so something else keeps it waiting, and the GPUs must not idle for it). Expiry is a
//! matter of the time a reader asks at, so the folded state itself stays a pure function of
//! the events.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::state::{DecisionState, JobStatus, Placed};

/// How long after the latest grace deadline of its orders a promise still holds GPUs for its
/// job. A victim past its deadline is killed by the preemption service's next pass, and the
/// decision service places the job in the cycle after that, both a few seconds in a healthy
/// cluster: a minute covers that with room, and caps what a job that still cannot start
/// keeps idle.
pub const PROMISE_HOLD_MS: i64 = 60_000;

/// GPUs freed for one waiting job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promise {
    /// Until when (Unix ms, exclusive) the GPUs are held for the job.
    pub until_ms: i64,
    /// `(node, GPUs)` freed for it so far, sorted by node, one entry per node.
    pub nodes: Vec<(Arc<str>, u32)>,
}

impl Promise {
    /// Whether the promise still holds its GPUs at `now`.
    pub fn holds_at(&self, now: i64) -> bool {
        now < self.until_ms
    }
}

/// A promise as a reader at one time sees it: the job and what it is promised.
pub type Promised<'s> = (&'s str, &'s Promise);

impl DecisionState {
    /// The promises in force at `now`, by job id.
    pub fn promises_at(&self, now: i64) -> impl Iterator<Item = Promised<'_>> {
        self.promises
            .iter()
            .filter(move |(_, p)| p.holds_at(now))
            .map(|(job, p)| (&**job, p))
    }

    /// The promise for `job_id`, if one holds at `now`.
    pub fn promise_for(&self, job_id: &str, now: i64) -> Option<&Promise> {
        self.promises.get(job_id).filter(|p| p.holds_at(now))
    }

    /// The earliest time after `now` at which a promise holding GPUs lapses: from then on
    /// those GPUs are anyone's, so a cycle then may place other work on them with no new
    /// event (the services' periodic cycle finds it anyway; the simulator wakes for it).
    pub fn next_promise_lapse(&self, now: i64) -> Option<i64> {
        self.promises
            .values()
            .filter(|p| p.holds_at(now) && !p.nodes.is_empty())
            .map(|p| p.until_ms)
            .min()
    }

    /// Promised GPUs per node in force at `now`, summed over jobs, sorted by node name.
    pub fn withheld_by_node(&self, now: i64) -> Vec<(&str, u32)> {
        let mut by_node: BTreeMap<&str, u32> = BTreeMap::new();
        for (_, p) in self.promises_at(now) {
            for (node, gpus) in &p.nodes {
                let e = by_node.entry(&**node).or_insert(0);
                *e = e.saturating_add(*gpus);
            }
        }
        by_node.into_iter().collect()
    }

    /// The promises in force at `now` as shares of nodes: per job (by job id), the
    /// `(position, GPUs)` it may count on, where `position` finds a node among the caller's
    /// and `room[position]` is the GPUs nobody holds there. Each node's room is shared out in
    /// job-id order and used up as it goes, so the shares never add up to more than is
    /// unheld. The decision cycle and the preemption pass both take their shares from here,
    /// which is what makes them agree on who gets a promised GPU.
    pub fn promise_shares(
        &self,
        now: i64,
        room: &mut [u32],
        position: impl Fn(&str) -> Option<usize>,
    ) -> Vec<(&str, Vec<(usize, u32)>)> {
        let mut out = Vec::new();
        for (job, promise) in self.promises_at(now) {
            let mut parts = Vec::new();
            for (node, gpus) in &promise.nodes {
                let Some(i) = position(node).filter(|&i| i < room.len()) else {
                    continue;
                };
                let part = (*gpus).min(room[i]);
                if part > 0 {
                    room[i] -= part;
                    parts.push((i, part));
                }
            }
            if !parts.is_empty() {
                out.push((job, parts));
            }
        }
        out
    }

    /// A job that was placed as `placed` and had a preemption order left its nodes at `at`:
    /// its GPUs are promised to the job the order was for, if that job still waits.
    pub(crate) fn promise_freed(&mut self, at: i64, job_id: &str, placed: &Placed) {
        if placed.preempt_deadline_ms.is_none() {
            return;
        }
        let Some(note) = self.jobs.get(job_id).and_then(|j| j.last_order.clone()) else {
            return;
        };
        if note.for_job_id.as_ref() == job_id {
            return;
        }
        // The order made the promise; one that lapsed, or that an older state never made, is
        // made (again) from this victim's deadline.
        let Some(promise) = self.promise_order(at, &note.for_job_id, note.grace_deadline_ms) else {
            return;
        };
        add_nodes(promise, &placed.nodes);
    }

    /// An order for `waiter` with grace deadline `deadline_ms` took effect at `at`: whatever
    /// its victims free, and whatever earlier orders' victims freed, is held for the waiter
    /// until this order's victims are gone too. Returns the promise if the waiter still
    /// waits and the promise holds at `at`.
    pub(crate) fn promise_order(
        &mut self,
        at: i64,
        waiter: &str,
        deadline_ms: i64,
    ) -> Option<&mut Promise> {
        if waiter.is_empty() {
            return None;
        }
        let (waiter, job) = self.jobs.get_key_value(waiter)?;
        if job.status != JobStatus::Queued {
            return None;
        }
        let until = deadline_ms.saturating_add(PROMISE_HOLD_MS);
        let p = self
            .promises
            .entry(Arc::clone(waiter))
            .or_insert_with(|| Promise {
                until_ms: until,
                nodes: Vec::new(),
            });
        if !p.holds_at(at) {
            // Lapsed: what it held then may be anyone's by now.
            p.nodes.clear();
            p.until_ms = until;
        }
        p.until_ms = p.until_ms.max(until);
        p.holds_at(at).then_some(p)
    }

    /// `job_id` was placed or left the queue: nothing is held for it any longer.
    pub(crate) fn drop_promise(&mut self, job_id: &str) {
        self.promises.remove(job_id);
    }
}

/// Adds `(node, GPUs)` to what `promise` holds, one entry per node.
fn add_nodes(promise: &mut Promise, nodes: &[(Arc<str>, u32)]) {
    for (node, gpus) in nodes {
        match promise.nodes.binary_search_by(|(n, _)| n.cmp(node)) {
            Ok(i) => promise.nodes[i].1 = promise.nodes[i].1.saturating_add(*gpus),
            Err(i) => promise.nodes.insert(i, (Arc::clone(node), *gpus)),
        }
    }
}
