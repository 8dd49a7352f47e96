//! What the per-allocation baselines (static quotas, decayed fair share) both keep for every
//! allocation slot: its waiting jobs and the GPUs it holds.

use super::policy::Job;
use super::queue::Queue;

/// Waiting jobs and running GPUs, by allocation slot.
#[derive(Debug, Clone, Default)]
pub(crate) struct ByAllocation {
    /// Waiting jobs by allocation slot.
    pub queues: Vec<Queue>,
    /// GPUs each allocation's allocated work holds (unallocated work charges nobody).
    pub running: Vec<u64>,
}

impl ByAllocation {
    /// Makes room for at least `slots` allocations (slots are never removed: a path that left
    /// the tree keeps its queue).
    pub fn grow(&mut self, slots: usize) -> usize {
        let slots = slots.max(self.queues.len());
        self.queues.resize_with(slots, Queue::default);
        self.running.resize(slots, 0);
        slots
    }

    /// A job a pass started: its allocation holds its GPUs, unless it is unallocated work.
    pub fn started(&mut self, job: &Job) {
        if job.unallocated {
            return;
        }
        if let Some(running) = self.running.get_mut(job.allocation) {
            *running += job.gpus();
        }
    }

    /// Queues `job` under `ticket` in its allocation's queue.
    pub fn enqueue(&mut self, ticket: usize, job: &Job) {
        if let Some(queue) = self.queues.get_mut(job.allocation) {
            queue.push(job.shape, job.unallocated, job.priority, ticket);
        }
    }

    /// `job` stopped holding its GPUs.
    pub fn finished(&mut self, job: &Job) {
        if job.unallocated {
            return;
        }
        if let Some(running) = self.running.get_mut(job.allocation) {
            *running = running.saturating_sub(job.gpus());
        }
    }
}
