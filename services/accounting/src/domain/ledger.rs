//! The hourly owed/delivered ledger (SPEC section 6).
//!
//! Place in the flow: every job transition of an allocated job changes two rates of its
//! allocation's [`HourMeter`]: *demand* (GPUs queued or running) and *run* (GPUs running). The
//! meter integrates both inside the cluster's open hour. When a cluster's clock enters a later
//! hour, [`Ledger::close_through`] closes the open hour (and any silent hours skipped since) for
//! every allocation that had demand, adding to its running [`LedgerTotals`]:
//!
//! - `demand(h)` = GPU-ms queued or running during `h`;
//! - `owed(h)` = `min(allocated(h), demand(h))`, where `allocated(h)` is the allocation's fraction
//!   times capacity integrated over the hour (see [`super::budget`] for the rounding);
//! - `delivered(h)` = GPU-ms it ran during `h`; it counts towards the target up to `owed(h)`.
//!
//! Hours are aligned to Unix epoch hours. Only totals are kept per allocation (the ledger's
//! memory is a few integers per allocation, whatever the history length); a report for any
//! `now` adds the hours that ended since the last event without changing the state.

use serde::{Deserialize, Serialize};

use super::budget::{BudgetHistory, Piece};
use super::curve::Curve;
use super::paths::PathId;

/// The ledger's hours: Unix epoch hours, shared with the decision service's hourly floor.
pub use fairshare_model::hour::{HOUR_MS, hour_of};

/// Owed and delivered sums over closed hours, in GPU-ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerTotals {
    /// Sum of demand(h): GPU-ms queued or running.
    pub demand_gpu_ms: u128,
    /// Sum of owed(h) = min(allocated(h), demand(h)).
    pub owed_gpu_ms: u128,
    /// Sum of delivered(h): GPU-ms run.
    pub delivered_gpu_ms: u128,
    /// Sum of min(delivered(h), owed(h)): the part of owed that was delivered.
    pub delivered_owed_gpu_ms: u128,
}

impl LedgerTotals {
    /// Adds `hours` identical hours with the given demand, run and allocated time.
    fn add_hours(&mut self, hours: u128, demand: u128, run: u128, allocated: u128) {
        let owed = allocated.min(demand);
        let met = run.min(owed);
        let times = |v: u128| v.saturating_mul(hours);
        self.demand_gpu_ms = self.demand_gpu_ms.saturating_add(times(demand));
        self.owed_gpu_ms = self.owed_gpu_ms.saturating_add(times(owed));
        self.delivered_gpu_ms = self.delivered_gpu_ms.saturating_add(times(run));
        self.delivered_owed_gpu_ms = self.delivered_owed_gpu_ms.saturating_add(times(met));
    }

    /// Adds another set of totals.
    pub fn merge(&mut self, other: &LedgerTotals) {
        self.demand_gpu_ms = self.demand_gpu_ms.saturating_add(other.demand_gpu_ms);
        self.owed_gpu_ms = self.owed_gpu_ms.saturating_add(other.owed_gpu_ms);
        self.delivered_gpu_ms = self.delivered_gpu_ms.saturating_add(other.delivered_gpu_ms);
        self.delivered_owed_gpu_ms = self
            .delivered_owed_gpu_ms
            .saturating_add(other.delivered_owed_gpu_ms);
    }

    /// Whether nothing was ever recorded.
    pub fn is_zero(&self) -> bool {
        *self == LedgerTotals::default()
    }
}

/// Demand and run integrated inside the open hour for one allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HourMeter {
    /// GPUs queued or running now.
    demand_rate: u64,
    /// GPUs running now.
    run_rate: u64,
    /// Time up to which `demand` and `run` are integrated.
    mark: i64,
    /// GPU-ms of demand from the open hour's start to `mark`.
    demand: u128,
    /// GPU-ms run from the open hour's start to `mark`.
    run: u128,
    /// Whether the meter is in its ledger's active list.
    active: bool,
}

fn area(rate: u64, from: i64, to: i64) -> u128 {
    u128::from(rate).saturating_mul(u128::from(to.saturating_sub(from).max(0).unsigned_abs()))
}

impl HourMeter {
    /// Integrates the current rates up to `t` (inside the open hour).
    fn advance(&mut self, t: i64) {
        if t > self.mark {
            self.demand = self
                .demand
                .saturating_add(area(self.demand_rate, self.mark, t));
            self.run = self.run.saturating_add(area(self.run_rate, self.mark, t));
            self.mark = t;
        }
    }

    /// Demand and run of the open hour ending at `end`, if the rates stay as they are.
    fn finished_at(&self, end: i64) -> (u128, u128) {
        (
            self.demand
                .saturating_add(area(self.demand_rate, self.mark, end)),
            self.run.saturating_add(area(self.run_rate, self.mark, end)),
        )
    }

    /// GPUs waiting now: queued or running, less running.
    fn waiting(&self) -> u64 {
        self.demand_rate.saturating_sub(self.run_rate)
    }

    fn idle(&self) -> bool {
        self.demand_rate == 0 && self.run_rate == 0 && self.demand == 0 && self.run == 0
    }
}

/// A change to an allocation's demand and run rates (GPUs), from one job transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateChange {
    /// GPUs that started waiting or running (+) or stopped doing either (-): `demand` delta.
    pub demand: i128,
    /// GPUs that started (+) or stopped (-) running.
    pub run: i128,
}

fn apply_delta(rate: u64, delta: i128) -> u64 {
    let next = i128::from(rate).saturating_add(delta);
    u64::try_from(next.max(0)).unwrap_or(u64::MAX)
}

/// One cluster's hourly ledger: open-hour meters and closed-hour totals per allocation, and
/// the unallocated GPU-ms run (to report the unallocated share of delivered time).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// The open hour (index), once the cluster has seen an event.
    open_hour: Option<i64>,
    /// Meter and closed-hour totals by allocation id, side by side: closing an hour visits
    /// both, so they share cache lines.
    rows: Vec<Row>,
    /// Allocations whose meter is not idle: the only ones closing an hour must visit.
    active: Vec<PathId>,
    /// Unallocated GPUs running, integrated in the open hour (only `run` is used).
    unallocated: HourMeter,
    /// Unallocated GPU-ms run in closed hours.
    unallocated_total: u128,
}

/// One allocation's open-hour meter and closed-hour totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Row {
    meter: HourMeter,
    totals: LedgerTotals,
}

/// What the open and skipped hours add when closed through a later hour.
struct Closing {
    /// Capacity pieces of the open hour.
    open: Vec<Piece>,
    /// Capacity pieces of one skipped hour (all skipped hours are identical: no event fell
    /// into them).
    gap: Vec<Piece>,
    /// Number of skipped hours.
    gap_hours: u128,
    /// End of the open hour.
    open_end: i64,
}

impl Ledger {
    /// The open hour, if the cluster has seen an event.
    pub fn open_hour(&self) -> Option<i64> {
        self.open_hour
    }

    fn closing(
        &self,
        budget: &BudgetHistory,
        capacity: &Curve,
        through_hour: i64,
    ) -> Option<Closing> {
        let open = self.open_hour?;
        if through_hour <= open {
            return None;
        }
        let open_start = open.saturating_mul(HOUR_MS);
        let open_end = open_start.saturating_add(HOUR_MS);
        let gap_hours = u128::try_from(through_hour - open - 1).unwrap_or(0);
        let gap = if gap_hours > 0 {
            budget.pieces(capacity, open_end, open_end.saturating_add(HOUR_MS))
        } else {
            Vec::new()
        };
        Some(Closing {
            open: budget.pieces(capacity, open_start, open_end),
            gap,
            gap_hours,
            open_end,
        })
    }

    /// What closing every hour before `through_hour` adds to allocation `id`'s totals.
    fn contribution(&self, id: PathId, budget: &BudgetHistory, c: &Closing) -> LedgerTotals {
        let mut out = LedgerTotals::default();
        let Some(meter) = self.rows.get(id as usize).map(|r| &r.meter) else {
            return out;
        };
        let (demand, run) = meter.finished_at(c.open_end);
        out.add_hours(1, demand, run, budget.allocated(id, &c.open));
        if c.gap_hours > 0 {
            out.add_hours(
                c.gap_hours,
                area(meter.demand_rate, 0, HOUR_MS),
                area(meter.run_rate, 0, HOUR_MS),
                budget.allocated(id, &c.gap),
            );
        }
        out
    }

    fn unallocated_contribution(&self, c: &Closing) -> u128 {
        let (_, run) = self.unallocated.finished_at(c.open_end);
        run.saturating_add(area(self.unallocated.run_rate, 0, HOUR_MS).saturating_mul(c.gap_hours))
    }

    /// Closes every hour before `hour` (the hour the cluster's clock just entered), using the
    /// capacity and budget in force before the event that moved the clock is applied.
    pub fn close_through(&mut self, hour: i64, budget: &BudgetHistory, capacity: &Curve) {
        let Some(closing) = self.closing(budget, capacity, hour) else {
            if self.open_hour.is_none() {
                self.open_hour = Some(hour);
            }
            return;
        };
        let start = hour.saturating_mul(HOUR_MS);
        let active = std::mem::take(&mut self.active);
        let mut still = Vec::with_capacity(active.len());
        for id in active {
            let add = self.contribution(id, budget, &closing);
            if let Some(row) = self.rows.get_mut(id as usize) {
                row.totals.merge(&add);
                let m = &mut row.meter;
                m.demand = 0;
                m.run = 0;
                m.mark = start;
                m.active = !m.idle();
                if m.active {
                    still.push(id);
                }
            }
        }
        self.active = still;
        self.unallocated_total = self
            .unallocated_total
            .saturating_add(self.unallocated_contribution(&closing));
        self.unallocated.run = 0;
        self.unallocated.mark = start;
        self.open_hour = Some(hour);
    }

    /// Applies one job transition of an allocated job at `t` (inside the open hour).
    pub fn change(&mut self, id: PathId, t: i64, change: RateChange) {
        let slot = id as usize;
        if self.rows.len() <= slot {
            self.rows.resize(slot + 1, Row::default());
        }
        let meter = &mut self.rows[slot].meter;
        if !meter.active && meter.idle() {
            // An idle meter holds nothing to integrate: start it at `t`.
            meter.mark = t;
        }
        meter.advance(t);
        meter.demand_rate = apply_delta(meter.demand_rate, change.demand);
        meter.run_rate = apply_delta(meter.run_rate, change.run);
        if !meter.active {
            meter.active = true;
            self.active.push(id);
        }
    }

    /// Changes the GPUs of unallocated jobs running, at `t` (inside the open hour).
    pub fn change_unallocated(&mut self, t: i64, run: i128) {
        let meter = &mut self.unallocated;
        if meter.idle() {
            meter.mark = t;
        }
        meter.advance(t);
        meter.run_rate = apply_delta(meter.run_rate, run);
    }

    fn totals_with(
        &self,
        id: PathId,
        budget: &BudgetHistory,
        closing: Option<&Closing>,
    ) -> LedgerTotals {
        let row = self.rows.get(id as usize).copied().unwrap_or_default();
        let mut out = row.totals;
        let is_active = row.meter.active;
        if let (Some(c), true) = (closing, is_active) {
            out.merge(&self.contribution(id, budget, c));
        }
        out
    }

    /// Every allocation with totals through `now`, in id order, plus the unallocated GPU-ms
    /// run in hours ended by `now`.
    pub fn report_at(
        &self,
        now: i64,
        budget: &BudgetHistory,
        capacity: &Curve,
    ) -> (Vec<(PathId, LedgerTotals)>, u128) {
        let closing = self.closing(budget, capacity, hour_of(now));
        let rows = (0..self.rows.len())
            .filter_map(|slot| {
                let id = PathId::try_from(slot).ok()?;
                let t = self.totals_with(id, budget, closing.as_ref());
                (!t.is_zero()).then_some((id, t))
            })
            .collect();
        let unallocated = match &closing {
            Some(c) => self
                .unallocated_total
                .saturating_add(self.unallocated_contribution(c)),
            None => self.unallocated_total,
        };
        (rows, unallocated)
    }

    /// GPUs allocation `id`'s jobs wait for now (queued, or placed and not yet started).
    pub fn queued_gpus(&self, id: PathId) -> u64 {
        self.rows.get(id as usize).map_or(0, |r| r.meter.waiting())
    }

    /// Meters currently active (for memory reporting).
    pub fn active_len(&self) -> usize {
        self.active.len()
    }
}
