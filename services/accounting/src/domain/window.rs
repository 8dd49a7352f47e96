//! Window queries on one cluster: usage per allocation and subtree inside `[now - W, now]`.
//!
//! Place in the flow: read-only, at the end of the flow. Every figure is a difference of two
//! points on a cumulative curve (one binary search each), so answering for every allocation at
//! a new `now` costs O(accounts x log(changes in the window)) and never rescans history.
//! Callers (the fold) guarantee `now` is at or after the cluster's clock.

use super::cluster::ClusterState;
use super::curve::Curve;
use super::ledger::{HOUR_MS, LedgerTotals, hour_of};
use super::report::{AccountUsage, LedgerReport, LedgerRow, WindowReport, saturate};

/// Row markers for [`ClusterState::window_report`].
const ALLOCATION: u8 = 1;
const SUBTREE: u8 = 2;

impl ClusterState {
    /// Usage of every allocation and inner account inside `[now - window, now]`.
    pub fn window_report(&self, now: i64, window: i64) -> WindowReport {
        let from = now.saturating_sub(window);
        let pieces = self.budget.pieces(&self.capacity.curve, from, now);
        let n = self.paths.len();
        let mut own = vec![0u128; n];
        let mut subtree = vec![0u128; n];
        let mut listed = vec![0u8; n];
        // GPUs running now, own and per subtree (a job started at `now` runs but has charged
        // nothing yet, so this is summed apart from the window's usage).
        let mut running = vec![0u64; n];
        let mut subtree_running = vec![0u64; n];
        // GPUs waiting now, the same way.
        let mut queued = vec![0u64; n];
        let mut subtree_queued = vec![0u64; n];
        for (slot, q) in queued.iter_mut().enumerate() {
            let Ok(id) = u32::try_from(slot) else { break };
            let waiting = self.ledger.queued_gpus(id);
            if waiting == 0 {
                continue;
            }
            *q = waiting;
            let mut cursor = Some(id);
            while let Some(up) = cursor {
                let r = &mut subtree_queued[up as usize];
                *r = r.saturating_add(waiting);
                cursor = self.paths.parent(up);
            }
        }
        for epoch in self.budget.overlapping(from, now) {
            for &id in &epoch.leaves {
                if let Some(l) = listed.get_mut(id as usize) {
                    *l |= ALLOCATION;
                }
            }
            for &id in &epoch.inner {
                if let Some(l) = listed.get_mut(id as usize) {
                    *l |= SUBTREE;
                }
            }
        }
        for (slot, curve) in self.usage.iter().enumerate().take(n) {
            if curve.is_empty() {
                continue;
            }
            let rate = curve.rate();
            if rate > 0 {
                running[slot] = rate;
                let mut cursor = u32::try_from(slot).ok();
                while let Some(id) = cursor {
                    let r = &mut subtree_running[id as usize];
                    *r = r.saturating_add(rate);
                    cursor = self.paths.parent(id);
                }
            }
            let charged = curve.between(from, now);
            if charged == 0 {
                continue;
            }
            own[slot] = charged;
            listed[slot] |= ALLOCATION;
            // A subtree's usage is its own plus every path below it; walking up the interned
            // parent links visits each ancestor once per charged allocation.
            subtree[slot] = subtree[slot].saturating_add(charged);
            let mut cursor = u32::try_from(slot)
                .ok()
                .and_then(|id| self.paths.parent(id));
            while let Some(parent) = cursor {
                let p = parent as usize;
                subtree[p] = subtree[p].saturating_add(charged);
                listed[p] |= SUBTREE;
                cursor = self.paths.parent(parent);
            }
        }
        let mut allocations = Vec::new();
        let mut subtrees = Vec::new();
        for (path, id) in self.paths.iter() {
            let slot = id as usize;
            let mark = listed.get(slot).copied().unwrap_or(0);
            if mark == 0 {
                continue;
            }
            let allocated = saturate(self.budget.allocated(id, &pieces));
            if mark & ALLOCATION != 0 {
                allocations.push(AccountUsage {
                    path: path.to_owned(),
                    charged_gpu_ms: saturate(own[slot]),
                    allocated_gpu_ms: allocated,
                    running_gpus: running[slot],
                    queued_gpus: queued[slot],
                });
            }
            if mark & SUBTREE != 0 {
                subtrees.push(AccountUsage {
                    path: path.to_owned(),
                    charged_gpu_ms: saturate(subtree[slot]),
                    allocated_gpu_ms: allocated,
                    running_gpus: subtree_running[slot],
                    queued_gpus: subtree_queued[slot],
                });
            }
        }
        WindowReport {
            cluster: self.name.clone(),
            window_start_ms: from,
            window_end_ms: now,
            capacity_gpu_ms: saturate(self.capacity.curve.between(from, now)),
            allocations,
            subtrees,
            unallocated_gpu_ms: saturate(self.unallocated.between(from, now)),
            cluster_gpus: self.capacity.gpus(),
        }
    }

    /// Usage of the account at `path` (an allocation, or an inner account with everything
    /// below it) inside `[now - window, now]`. Unknown paths have zero usage.
    pub fn account_usage(&self, path: &str, now: i64, window: i64) -> AccountUsage {
        let from = now.saturating_sub(window);
        let curves = || {
            self.paths
                .subtree(path)
                .filter_map(|id| self.usage.get(id as usize))
        };
        let charged = curves()
            .map(|curve| curve.between(from, now))
            .fold(0u128, u128::saturating_add);
        let running = curves().map(Curve::rate).fold(0u64, u64::saturating_add);
        let queued = self
            .paths
            .subtree(path)
            .map(|id| self.ledger.queued_gpus(id))
            .fold(0u64, u64::saturating_add);
        let allocated = match self.paths.get(path) {
            Some(id) => {
                let pieces = self.budget.pieces(&self.capacity.curve, from, now);
                self.budget.allocated(id, &pieces)
            }
            None => 0,
        };
        AccountUsage {
            path: path.to_owned(),
            charged_gpu_ms: saturate(charged),
            allocated_gpu_ms: saturate(allocated),
            running_gpus: running,
            queued_gpus: queued,
        }
    }

    /// GPU-ms run by unallocated jobs inside `[now - window, now]`.
    pub fn unallocated_usage(&self, now: i64, window: i64) -> u128 {
        self.unallocated.between(now.saturating_sub(window), now)
    }

    /// The owed/delivered ledger over every hour ended by `now`.
    pub fn ledger_report(&self, now: i64) -> LedgerReport {
        let (rows, unallocated) = self
            .ledger
            .report_at(now, &self.budget, &self.capacity.curve);
        let mut overall = LedgerTotals::default();
        let mut allocations: Vec<LedgerRow> = rows
            .into_iter()
            .map(|(id, totals)| {
                overall.merge(&totals);
                LedgerRow {
                    allocation: self.paths.name(id).to_owned(),
                    totals,
                }
            })
            .collect();
        allocations.sort_by(|a, b| a.allocation.cmp(&b.allocation));
        LedgerReport {
            cluster: self.name.clone(),
            through_ms: hour_of(now).saturating_mul(HOUR_MS),
            allocations,
            overall,
            unallocated_delivered_gpu_ms: unallocated,
        }
    }
}
