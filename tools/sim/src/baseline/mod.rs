//! The baseline policies fairshare is compared against (SPEC section 6): FIFO with priorities,
//! static quotas, and decayed fair share.
//!
//! Place in the flow: the simulator replays one workload under fairshare and under each
//! [`Baseline`] through [`run`], which returns the log of contract events a real system with
//! that policy would have written (budget tree and nodes first, then submissions, placements,
//! starts, finishes and operator actions, in time order). The metrics fold measures every log
//! the same way, so the figures are comparable.
//!
//! What the baselines share, and what they deliberately lack:
//! - one virtual clock and log writer (`replay`), one placement (best fit for single-node
//!   jobs, whole free nodes for multi-node jobs: `place`) and one pass (EASY backfill: the
//!   first job that does not fit holds the nodes it will get when running jobs end, and the
//!   others start around it: `pass`, `cluster`); they differ only in the order they offer
//!   jobs and, for quotas, in a per-allocation cap;
//! - no preemption, and no notion of minimum runtimes, except that a job with minimum runtime 0
//!   ("unallocated" to fairshare) runs as a site would run it in a scavenger class: offered
//!   after every allocated job of a pass, outside quotas, charging no usage (once started it
//!   runs to its end like any job);
//! - cordoned nodes take no new work but their jobs run on; maintenance windows are logged and
//!   otherwise ignored (nothing drains for a baseline).

mod allocations;
mod by_allocation;
mod cluster;
mod decayed;
mod fifo;
mod pass;
mod place;
mod policy;
mod queue;
mod quotas;
mod replay;

#[cfg(test)]
mod tests;

use fairshare_events::pb;

use crate::setup::Setup;
use crate::workload::Workload;

pub use decayed::HALF_LIFE_MS;

/// A baseline scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Baseline {
    /// One queue by declared priority, then submit time; budgets play no part.
    Fifo,
    /// Each allocation owns its fraction of the GPUs and never more; idle quota is not lent.
    StaticQuotas,
    /// Slurm's classic fair-share factor (effective usage down the tree) over usage decayed
    /// with a 7-day half-life.
    DecayedFairShare,
}

impl Baseline {
    /// Every baseline, in report order.
    pub const ALL: [Baseline; 3] = [
        Baseline::Fifo,
        Baseline::StaticQuotas,
        Baseline::DecayedFairShare,
    ];

    /// The policy's name in reports: "fifo", "static-quotas" or "decayed-fair-share".
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Fifo => "fifo",
            Baseline::StaticQuotas => "static-quotas",
            Baseline::DecayedFairShare => "decayed-fair-share",
        }
    }
}

/// The event log of `workload` run on `setup` under `policy`, from `setup.initial_events` at
/// the epoch to the setup's end; event times never decrease.
pub fn run(policy: Baseline, setup: &Setup, workload: &Workload) -> Vec<pb::Event> {
    match policy {
        Baseline::Fifo => replay::replay(&mut fifo::Fifo::default(), setup, workload),
        Baseline::StaticQuotas => {
            replay::replay(&mut quotas::StaticQuotas::default(), setup, workload)
        }
        Baseline::DecayedFairShare => {
            replay::replay(&mut decayed::DecayedFairShare::default(), setup, workload)
        }
    }
}
