//! What queries answer: window usage per account, the owed/delivered ledger.
//!
//! Place in the flow: the shell asks the fold for a [`WindowReport`] on a steady cadence and on
//! request, turns it into a `UsageSnapshot` event for the decision service
//! ([`WindowReport::to_snapshot`]), and answers per-account queries and ledger reports over
//! request/reply. Every figure is an integer in GPU-ms; ratios are given as numerator and
//! denominator so consumers compare them exactly (cross-multiplication), never as floats.

use fairshare_events::pb;
use serde::{Deserialize, Serialize};

use super::ledger::LedgerTotals;

/// Narrows an exact GPU-ms figure to the wire's `u64`, saturating. A cluster of 100,000 GPUs
/// accrues about 6 x 10^13 GPU-ms in 7 days, five orders of magnitude below the limit.
pub fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Usage of one account inside the window `[now - W, now]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountUsage {
    /// Account path.
    pub path: String,
    /// GPU-ms charged inside the window: for an allocation, by its own jobs; for a subtree, by
    /// the jobs of every allocation at or below the path.
    pub charged_gpu_ms: u64,
    /// Allocated GPU-ms inside the window: the account's fraction times available capacity,
    /// integrated (floored once per budget tree in force, see `domain::budget`).
    pub allocated_gpu_ms: u64,
    /// GPUs its allocated jobs run at the window's end (for a subtree, every allocation at or
    /// below the path): what it holds against its share floor, as accounting sees it.
    #[serde(default)]
    pub running_gpus: u64,
    /// GPUs its allocated jobs wait for at the window's end (queued, or placed and not yet
    /// started; for a subtree, every allocation at or below the path).
    #[serde(default)]
    pub queued_gpus: u64,
}

/// Window usage of one cluster at `window_end_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowReport {
    /// Cluster name.
    pub cluster: String,
    /// Window start, `now - W`.
    pub window_start_ms: i64,
    /// Window end, `now`.
    pub window_end_ms: i64,
    /// Available GPU-ms inside the window (capacity integrated).
    pub capacity_gpu_ms: u64,
    /// Allocations (leaves of a budget tree in force inside the window, and every path jobs
    /// charged inside it), sorted by path.
    pub allocations: Vec<AccountUsage>,
    /// Inner accounts (of a tree in force inside the window, and every ancestor path of a
    /// charged allocation), sorted by path.
    pub subtrees: Vec<AccountUsage>,
    /// GPU-ms run by unallocated jobs inside the window (charged to no one).
    pub unallocated_gpu_ms: u64,
    /// GPUs of every registered node at the window's end, cordoned ones too.
    #[serde(default)]
    pub cluster_gpus: u64,
}

impl WindowReport {
    /// The `UsageSnapshot` event body for this report, recording the last stream sequence the
    /// fold had applied.
    pub fn to_snapshot(&self, through_sequence: u64, window_ms: u64) -> pb::UsageSnapshot {
        pb::UsageSnapshot {
            cluster: self.cluster.clone(),
            window_end_ms: self.window_end_ms,
            window_ms: i64::try_from(window_ms).unwrap_or(i64::MAX),
            through_sequence,
            allocations: self
                .allocations
                .iter()
                .map(|a| pb::AllocationUsage {
                    allocation: a.path.clone(),
                    charged_gpu_ms: a.charged_gpu_ms,
                    allocated_gpu_ms: a.allocated_gpu_ms,
                })
                .collect(),
            unallocated_gpu_ms: self.unallocated_gpu_ms,
        }
    }

    /// The row of allocation `path`, if listed.
    pub fn allocation(&self, path: &str) -> Option<&AccountUsage> {
        self.allocations.iter().find(|a| a.path == path)
    }

    /// The row of inner account `path`, if listed.
    pub fn subtree(&self, path: &str) -> Option<&AccountUsage> {
        self.subtrees.iter().find(|a| a.path == path)
    }
}

/// An exact ratio `num / den`; `den == 0` means "nothing owed" (no ratio).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ratio {
    /// Numerator.
    pub num: u128,
    /// Denominator.
    pub den: u128,
}

impl LedgerTotals {
    /// `sum(min(delivered, owed)) / sum(owed)`: the share of owed GPU time delivered.
    pub fn delivered_ratio(&self) -> Ratio {
        Ratio {
            num: self.delivered_owed_gpu_ms,
            den: self.owed_gpu_ms,
        }
    }
}

/// The ledger totals of one allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRow {
    /// Allocation path.
    pub allocation: String,
    /// Sums over every hour counted.
    pub totals: LedgerTotals,
}

/// The owed/delivered ledger of one cluster over every hour ended by `through_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerReport {
    /// Cluster name.
    pub cluster: String,
    /// End of the last hour counted (hours are Unix epoch hours; the hour containing `now` is
    /// still open and not counted).
    pub through_ms: i64,
    /// Allocations with any demand, sorted by path.
    pub allocations: Vec<LedgerRow>,
    /// Sums over all allocations.
    pub overall: LedgerTotals,
    /// GPU-ms run by unallocated jobs in the hours counted.
    pub unallocated_delivered_gpu_ms: u128,
}

impl LedgerReport {
    /// The row of allocation `path`, if it had any demand.
    pub fn allocation(&self, path: &str) -> Option<&LedgerRow> {
        self.allocations.iter().find(|a| a.allocation == path)
    }
}
