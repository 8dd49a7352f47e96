//! The figures SPEC section 6 judges a policy by, computed from a policy's event log.
//!
//! Place in the flow: every policy of a run (fairshare and each baseline) produces a log of the
//! contract's events; [`measure`] folds that log, and only that log, into a
//! [`RunMetrics`]. Measuring every policy from its log with one fold is what makes their figures
//! comparable, and it would measure a production log the same way.
//!
//! Owed and delivered come from the accounting service's own hourly ledger
//! (`fairshare_accounting::domain::ledger`): per allocation and hour, owed = min(fraction x
//! capacity, demand) and delivered counts up to owed.

use fairshare_events::pb::PreemptionCause;

mod fold;
mod idle;
mod missed;
mod series;

pub use fold::{MeasureConfig, measure};
pub use series::{Percentiles, percentile};

/// Owed and delivered GPU time of one allocation over the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationMetrics {
    /// Allocation path.
    pub path: String,
    /// The allocation's fraction of the cluster in parts per million (at the end of the run).
    pub fraction_ppm: u64,
    /// Sum over hours of demand: GPU-ms its allocated jobs were queued or running.
    pub demand_gpu_ms: u128,
    /// Sum over hours of owed = min(fraction x capacity, demand).
    pub owed_gpu_ms: u128,
    /// Sum over hours of the GPU-ms its allocated jobs ran.
    pub delivered_gpu_ms: u128,
    /// Sum over hours of min(delivered, owed).
    pub delivered_owed_gpu_ms: u128,
    /// Owed GPU-ms in hours that began with the allocation's window usage at or above its
    /// allocated time (window ratio >= 1): see [`RunMetrics::missed_over_served_gpu_ms`].
    pub owed_over_served_gpu_ms: u128,
    /// The part of those owed GPU-ms not delivered.
    pub missed_over_served_gpu_ms: u128,
}

/// One hour of the cluster, for the occupancy chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourPoint {
    /// Hours since the start of the run.
    pub hour: u64,
    /// GPU-ms used by any job.
    pub used_gpu_ms: u128,
    /// GPU-ms available (registered, uncordoned).
    pub capacity_gpu_ms: u128,
}

/// Queue waits of one class of jobs, in ms, sorted ascending. A job still waiting at the end
/// of the run counts with the wait it had so far (so starvation shows).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waits {
    /// Waits from submission to first start.
    pub sorted_ms: Vec<i64>,
    /// How many of them had not started by the end.
    pub unstarted: u64,
}

/// Everything measured for one policy over one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMetrics {
    /// Policy name ("fairshare", "fifo", ...).
    pub policy: String,
    /// Per allocation, in path order.
    pub allocations: Vec<AllocationMetrics>,
    /// Sum of owed over allocations and hours.
    pub owed_gpu_ms: u128,
    /// Sum of min(delivered, owed) over allocations and hours.
    pub delivered_owed_gpu_ms: u128,
    /// The part of the owed time that fell in hours which began with the allocation at a window
    /// ratio of 1 or more.
    pub owed_over_served_gpu_ms: u128,
    /// The part of the owed time missed (`owed - delivered_owed`) that fell in hours which began
    /// with the allocation at a window ratio of 1 or more: it had already used its allocation
    /// over the window, so a window-ranked policy gives way to the others. Hourly owed time
    /// missed this way is the window paying back earlier use, not GPUs lost.
    pub missed_over_served_gpu_ms: u128,
    /// GPU-ms any job ran.
    pub used_gpu_ms: u128,
    /// GPU-ms available over the run.
    pub available_gpu_ms: u128,
    /// GPU-ms any job ran while queued work exceeded idle GPUs.
    pub contention_used_gpu_ms: u128,
    /// GPU-ms available while queued work exceeded idle GPUs.
    pub contention_available_gpu_ms: u128,
    /// GPU-ms unallocated jobs ran.
    pub unallocated_gpu_ms: u128,
    /// GPU-ms idle while some job waited: the integral of min(idle GPUs, GPUs waited for).
    pub idle_while_waiting_gpu_ms: u128,
    /// The idle GPU-ms of open nodes while queued work exceeded idle GPUs (the occupancy
    /// shortfall), split by what kept them idle.
    pub idle_under_contention: IdleUnderContention,
    /// Waits of debug jobs.
    pub debug_waits: Waits,
    /// Waits of other allocated jobs.
    pub allocated_waits: Waits,
    /// Waits of unallocated jobs.
    pub unallocated_waits: Waits,
    /// Preemptions ordered.
    pub preemptions: u64,
    /// Jobs stopped by a preemption (confirmed or killed).
    pub preempted: u64,
    /// GPU-ms of work thrown away by preemptions (run since the last checkpoint; the whole run
    /// of jobs that cannot resume).
    pub lost_gpu_ms: u128,
    /// Preemptions and the work they threw away, by the orders' cause, in the contract's order
    /// of causes; causes that ordered nothing are left out.
    pub by_cause: Vec<CausePreemptions>,
    /// Preemptions ordered while the victim was inside its minimum runtime, but for a
    /// maintenance window's order when a window on its nodes was scheduled after it started
    /// (the one case the contract lets an operator cut a protection short).
    pub violations: u64,
    /// Jobs submitted.
    pub jobs_submitted: u64,
    /// Jobs that ran to completion.
    pub jobs_finished: u64,
    /// Events in the log.
    pub events: u64,
    /// Occupancy per hour.
    pub hourly: Vec<HourPoint>,
}

/// The preemptions of one cause (`PreemptionOrdered.cause`): which rules cost the lost work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CausePreemptions {
    /// The rule behind the orders.
    pub cause: PreemptionCause,
    /// Orders given (a job ordered off twice counts twice, as in [`RunMetrics::preemptions`]).
    pub orders: u64,
    /// Jobs stopped whose latest order had this cause.
    pub stopped: u64,
    /// GPU-ms of work those stops threw away.
    pub lost_gpu_ms: u128,
}

/// Idle GPU-ms of open nodes while queued work exceeded idle GPUs, filed node by node under
/// the first cause that holds (see the `idle` module). The parts add up to the occupancy
/// shortfall (`contention_available - contention_used`) whenever no job runs on a cordoned
/// node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleUnderContention {
    /// Placed, and the launcher had not confirmed the start yet.
    pub awaiting_start_gpu_ms: u128,
    /// A waiting job fitted the node's free GPUs as they were (a reservation kept them, or the
    /// next decision cycle had not run).
    pub waiting_job_fits_gpu_ms: u128,
    /// The smallest waiting allocated job fitted once jobs already ordered off the node stopped
    /// (grace period and the launcher's stop).
    pub victims_stopping_gpu_ms: u128,
    /// It would have fitted had the node's unallocated work (always preemptible) left too.
    pub fits_without_unallocated_gpu_ms: u128,
    /// It would have fitted only had allocated work past its minimum runtime left too (which
    /// the rank rule allows only for a better-ranked waiter).
    pub fits_without_past_minimum_gpu_ms: u128,
    /// No waiting allocated job would have fitted even with every preemptible job gone.
    pub nothing_fits_gpu_ms: u128,
}

impl IdleUnderContention {
    /// All the idle GPU-ms filed.
    pub fn total(&self) -> u128 {
        self.awaiting_start_gpu_ms
            + self.waiting_job_fits_gpu_ms
            + self.victims_stopping_gpu_ms
            + self.fits_without_unallocated_gpu_ms
            + self.fits_without_past_minimum_gpu_ms
            + self.nothing_fits_gpu_ms
    }
}

/// A share `num / den` as a percentage, 0 when `den` is 0.
pub fn percent(num: u128, den: u128) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 * 100.0 / den as f64
    }
}

/// GPU-ms as GPU-hours.
pub fn gpu_hours(gpu_ms: u128) -> f64 {
    gpu_ms as f64 / 3_600_000.0
}

impl RunMetrics {
    /// Owed GPU time delivered, overall, in per cent.
    pub fn owed_delivered_pct(&self) -> f64 {
        percent(self.delivered_owed_gpu_ms, self.owed_gpu_ms)
    }

    /// The allocation with the lowest delivered share of owed among those owed at least
    /// `min_owed_gpu_ms` (SPEC: one GPU-day), with that share in per cent.
    pub fn worst_allocation(&self, min_owed_gpu_ms: u128) -> Option<(&AllocationMetrics, f64)> {
        self.allocations
            .iter()
            .filter(|a| a.owed_gpu_ms >= min_owed_gpu_ms && a.owed_gpu_ms > 0)
            .map(|a| (a, percent(a.delivered_owed_gpu_ms, a.owed_gpu_ms)))
            .min_by(|x, y| x.1.total_cmp(&y.1).then_with(|| x.0.path.cmp(&y.0.path)))
    }

    /// Occupancy under contention, in per cent.
    pub fn occupancy_pct(&self) -> f64 {
        percent(
            self.contention_used_gpu_ms,
            self.contention_available_gpu_ms,
        )
    }

    /// Unallocated share of delivered GPU time, in per cent.
    pub fn unallocated_pct(&self) -> f64 {
        percent(self.unallocated_gpu_ms, self.used_gpu_ms)
    }

    /// Owed GPU-ms not delivered, over all allocations and hours.
    pub fn missed_gpu_ms(&self) -> u128 {
        self.owed_gpu_ms.saturating_sub(self.delivered_owed_gpu_ms)
    }

    /// Lost work as a share of delivered GPU time, in per cent.
    pub fn lost_pct(&self) -> f64 {
        percent(self.lost_gpu_ms, self.used_gpu_ms)
    }
}
