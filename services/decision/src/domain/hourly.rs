//! The hourly share floor: each allocation's floor, for the rest of the clock hour, moved by
//! what it is behind or ahead of its owed time in that hour.
//!
//! Place in the flow: [`DecisionState::apply`] keeps one [`HourMeter`] per allocation, fed by
//! every job event of that allocation: the GPU-ms its allocated work ran (placed until it
//! leaves its GPUs) and was queued or running (its demand) since the start of the open clock
//! hour. At the start of each decision cycle and preemption pass, [`crate::domain::rank`]
//! asks [`DecisionState::hourly_floor_shifts`] how far to move each allocation's share floor
//! and ranks with the moved floors; the preemption service's victim rules read the same
//! floors, so both services agree.
//!
//! Why: SPEC section 6 measures owed time hour by hour: an allocation is owed
//! `min(fraction x capacity, demand)` in each hour, and what it runs beyond that in the hour
//! counts for nothing. The plain floor ("hold your fraction of the GPUs now") cannot make up for
//! a stretch below it, say while the allocation's next job needed two whole nodes, and cannot
//! tell that an allocation running one large job has had its hour's due already. On Helios at
//! 320 GPUs, 71% of the owed time the plain floor missed fell in such hours (see README,
//! "Hourly share floor").
//!
//! The rule, for an allocation of floor `F` GPUs at `now`, `e` ms into the hour and `r` ms
//! before its end:
//! - owed so far `O = min(F x e, demand so far)`, run so far `R`; behind by `B = O - R` GPU-ms
//!   (negative: ahead). `e` is weighted by the GPUs registered over the hour, against those
//!   registered now (registered GPU-ms so far over today's GPUs): a cluster whose nodes arrived
//!   mid-hour owes nothing for the minutes before, as the accounting ledger counts capacity.
//!   A budget tree applied mid-hour owes each allocation its old fraction of the registered
//!   GPU-ms before the change and its new one after ([`OwedBefore`]), as the ledger splits
//!   the hour, so a manager's change neither back-dates nor forgets the owed time;
//! - its floor moves by `B / max(r, 20 min)` GPUs, what it must run above (or may run below)
//!   `F` for the rest of the hour to end it even, at most `+F` and at least `-F` (so between 0
//!   and twice its share): not spread over less than 20 minutes, so the last minutes of an
//!   hour do not swing floors wildly;
//! - cuts are balanced: if the floors cut add up to more GPUs than the floors raised, every cut
//!   is scaled down to match (and rounded towards zero, so the cuts never exceed the raises). An
//!   allocation ahead this hour loses protection only while another one is behind. Raises are
//!   not scaled: like the plain floor of an allocation below it, they may add up to more than
//!   the cluster has free, and the rules between waiters and victims settle who gets what.
//!   (Unbalanced, the cuts rotated work on msft-itp, where nobody was behind: lost work 0.82%
//!   to 1.45%.)
//!
//! All in integers: meters in GPU-ms, shifts in thousandths of a GPU.

use std::collections::BTreeMap;
use std::sync::Arc;

use fairshare_model::budget::BudgetTree;
use fairshare_model::exact::mul_div_floor;
use fairshare_model::hour::{HOUR_MS, hour_of, hour_start};
use serde::{Deserialize, Serialize};

use super::flight::AllocationFlight;
use super::join::take_matching;
use super::state::DecisionState;

/// The shortest time a floor's shift is spread over: what an allocation is behind with
/// `r` ms left in the hour moves its floor by `behind / max(r, this)`.
pub const MIN_SPREAD_MS: i64 = 20 * 60_000;

/// Thousandths of a GPU: the unit of floor shifts.
pub const MILLI: i128 = 1000;

/// One allocation's run and demand in the open clock hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HourMeter {
    /// The open hour (Unix epoch hours).
    hour: i64,
    /// Time up to which `run` and `demand` are integrated.
    mark: i64,
    /// GPUs its allocated work holds now.
    run_rate: u64,
    /// GPUs its allocated work holds or waits for now.
    demand_rate: u64,
    /// GPU-ms run from the hour's start to `mark`.
    run: u128,
    /// GPU-ms held or waited for from the hour's start to `mark`.
    demand: u128,
}

fn area(rate: u64, from: i64, to: i64) -> u128 {
    let ms = u64::try_from(to.saturating_sub(from)).unwrap_or(0);
    u128::from(rate) * u128::from(ms)
}

impl HourMeter {
    /// Integrates the current rates up to `t`, starting a new hour if `t` is in a later one.
    /// A time before the mark (an event stamped earlier than one already folded) integrates
    /// nothing: the meter never runs backwards.
    fn advance(&mut self, t: i64) {
        let hour = hour_of(t);
        if hour > self.hour {
            self.hour = hour;
            self.mark = hour_start(t);
            self.run = 0;
            self.demand = 0;
        }
        if t > self.mark {
            self.run = self.run.saturating_add(area(self.run_rate, self.mark, t));
            self.demand = self
                .demand
                .saturating_add(area(self.demand_rate, self.mark, t));
            self.mark = t;
        }
    }

    /// Integrates up to `t`, then takes the new rates.
    pub(crate) fn set(&mut self, t: i64, run_rate: u64, demand_rate: u64) {
        self.advance(t);
        self.run_rate = run_rate;
        self.demand_rate = demand_rate;
    }

    /// Takes back what `gpus` GPUs added to run and demand from `from` (or the hour's start)
    /// to the mark: a run ordered off and released after its grace deadline counted until
    /// its stop was folded, where accounting stops charging it at the deadline.
    pub(crate) fn uncount_since(&mut self, gpus: u64, from: i64) {
        let over = area(gpus, from.max(hour_start(self.mark)), self.mark);
        self.run = self.run.saturating_sub(over);
        self.demand = self.demand.saturating_sub(over);
    }

    /// `(run, demand)` GPU-ms of the hour containing `now`, through `now`, if the rates have
    /// not changed since the last event. For an hour after the meter's, the current rates
    /// integrated from its start; for one before it (an event stamped ahead of `now`'s
    /// clock), zero.
    pub fn at(&self, now: i64) -> (u128, u128) {
        let mut m = *self;
        m.advance(now);
        if hour_of(now) < m.hour {
            return (0, 0);
        }
        (m.run, m.demand)
    }
}

/// Owed time of the open clock hour under budget trees replaced within it: what each
/// allocation was owed before the newest tree of the hour took over. Without it, a tree applied
/// mid-hour would owe every allocation its new fraction for the whole hour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedBefore {
    /// The clock hour (Unix epoch hours) the figures are of; other hours owe nothing before.
    hour: i64,
    /// The cluster's registered GPU-ms of that hour up to its last budget change: the newest
    /// tree owes its fractions of what the capacity meter adds after this.
    capacity_from: u128,
    /// Per allocation path, thousandths of a GPU-ms owed in that hour before its last
    /// budget change (its fraction of the registered GPU-ms under each earlier tree).
    milli: BTreeMap<Arc<str>, u128>,
}

impl OwedBefore {
    /// Closes the stretch of the hour owed under `tree` (the tree in force until now), at the
    /// cluster's registered GPU-ms `capacity_area` of `now`'s hour, before a new tree applies.
    /// With no tree before, nothing was owed: the first tree owes from its application.
    pub(crate) fn close(&mut self, tree: Option<&BudgetTree>, capacity_area: u128, now: i64) {
        let hour = hour_of(now);
        // A tree stamped in an earlier hour than the open one (a writer whose clock runs
        // behind) takes over from the last change: it cannot undo the open hour's owed time,
        // and the registered GPU-ms it comes with are another hour's. A later hour starts
        // afresh.
        if hour < self.hour {
            return;
        }
        if hour > self.hour {
            *self = OwedBefore {
                hour,
                ..OwedBefore::default()
            };
        }
        let stretch = capacity_area.saturating_sub(self.capacity_from);
        self.capacity_from = self.capacity_from.max(capacity_area);
        let Some(tree) = tree else {
            return;
        };
        if stretch == 0 {
            return;
        }
        for (account, f) in tree.accounts.iter().zip(tree.fractions()) {
            if !account.is_allocation() || f.num == 0 {
                continue;
            }
            // Exactly, as the accounting ledger multiplies: deep trees have huge fractions.
            let owed = mul_div_floor(stretch.saturating_mul(MILLI as u128), f.num, f.den);
            let entry = self
                .milli
                .entry(Arc::from(account.path.as_str()))
                .or_insert(0);
            *entry = entry.saturating_add(owed);
        }
    }

    /// The registered GPU-ms of `now`'s hour that the tree in force owes its fractions of
    /// from: those before its application, if that was this hour.
    fn capacity_from(&self, now: i64) -> u128 {
        if hour_of(now) == self.hour {
            self.capacity_from
        } else {
            0
        }
    }

    /// Thousandths of a GPU-ms `allocation` was owed in `now`'s hour under the trees the one
    /// in force replaced. (The floors' shifts walk the map beside the allocations instead.)
    #[cfg(test)]
    pub(crate) fn milli(&self, allocation: &str, now: i64) -> u128 {
        if hour_of(now) == self.hour {
            self.milli.get(allocation).copied().unwrap_or(0)
        } else {
            0
        }
    }
}

/// How far to move a floor of `floor_milli` thousandths of a GPU, in thousandths of a GPU,
/// for an allocation that ran `run` and held or waited for `demand` GPU-ms of the hour so far,
/// at `now` (see the module doc). Unbalanced: [`DecisionState::hourly_floor_shifts`] scales
/// the cuts.
pub fn shift_milli(floor_milli: i128, run: u128, demand: u128, now: i64) -> i128 {
    let elapsed = now.saturating_sub(hour_start(now));
    shift_milli_owing(floor_milli, run, demand, elapsed, 0, now)
}

/// [`shift_milli`] for an allocation owed its floor for `owed_ms` of the hour so far: the
/// elapsed time weighted by the GPUs registered then, over those registered now (less than
/// the time elapsed if the cluster had fewer GPUs, or none, earlier in the hour), on top of
/// `owed_before_milli` thousandths of a GPU-ms owed under budget trees replaced this hour
/// (`owed_ms` then counts from the last change).
pub fn shift_milli_owing(
    floor_milli: i128,
    run: u128,
    demand: u128,
    owed_ms: i64,
    owed_before_milli: u128,
    now: i64,
) -> i128 {
    let start = hour_start(now);
    let elapsed = i128::from(owed_ms.max(0));
    let spread = i128::from(
        start
            .saturating_add(HOUR_MS)
            .saturating_sub(now)
            .max(MIN_SPREAD_MS),
    );
    let i = |x: u128| i128::try_from(x).unwrap_or(i128::MAX);
    // Everything in thousandths of a GPU-ms.
    let owed = floor_milli
        .saturating_mul(elapsed)
        .saturating_add(i(owed_before_milli))
        .min(i(demand).saturating_mul(MILLI));
    let behind = owed.saturating_sub(i(run).saturating_mul(MILLI));
    whole_gpus(quotient(behind, spread).clamp(-floor_milli, floor_milli))
}

/// `milli` rounded towards zero to whole GPUs.
fn whole_gpus(milli: i128) -> i128 {
    quotient(milli, MILLI) * MILLI
}

/// `a / b`, rounded towards zero as `/` rounds. The figures here fit 64 bits all but always,
/// and a 128-bit division is a library call several times slower: every ranking divides
/// twice per allocation with the hourly floor (whose shifts took a twentieth of the
/// simulator's instructions).
fn quotient(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b != 0 && !(a == i64::MIN && b == -1) => i128::from(a / b),
        _ => a / b,
    }
}

/// What `flight`'s runs ordered off and past their grace deadline at `now` add to the hour's
/// run and demand after their deadline: accounting counts them neither delivered nor demand
/// from the deadline on, while the meter counts their GPUs until their stop is folded (for as
/// long as the preemption service is down).
fn past_deadlines(flight: &AllocationFlight, now: i64) -> u128 {
    let hour = hour_start(now);
    flight
        .stopping
        .values()
        .filter_map(|run| {
            let deadline = run.deadline_ms.filter(|d| *d < now)?;
            Some(area(run.gpus, deadline.max(hour), now))
        })
        .fold(0, u128::saturating_add)
}

impl DecisionState {
    /// `(run, demand)` GPU-ms of `allocation` in `now`'s hour through `now`, as accounting's
    /// ledger counts them: its meter, less what its runs ordered off added after their
    /// grace deadline ([`past_deadlines`]).
    pub fn hour_metered(&self, allocation: &str, now: i64) -> Option<(u128, u128)> {
        let (run, demand) = self.meters.get(allocation)?.at(now);
        let over = self
            .flight
            .by_allocation
            .get(allocation)
            .map_or(0, |f| past_deadlines(f, now));
        Some((run.saturating_sub(over), demand.saturating_sub(over)))
    }

    /// Re-reads allocation `allocation`'s run and demand rates after an event at `at`.
    pub(crate) fn meter_allocation(&mut self, allocation: &Arc<str>, at: i64) {
        if !self.hourly_floor {
            return;
        }
        let run = self
            .flight
            .by_allocation
            .get(allocation)
            .map_or(0, |f| u64::try_from(f.gpus).unwrap_or(u64::MAX));
        let queued = self.queues.get(allocation).map_or(0, |q| q.queued_gpus);
        match self.meters.get_mut(allocation) {
            Some(m) => m.set(at, run, run.saturating_add(queued)),
            None => {
                let mut m = HourMeter::default();
                m.set(at, run, run.saturating_add(queued));
                self.meters.insert(Arc::clone(allocation), m);
            }
        }
    }

    /// The hour meter of `allocation`, if it has had allocated work since the state began.
    pub fn hour_meter(&self, allocation: &str) -> Option<&HourMeter> {
        self.meters.get(allocation)
    }

    /// Floor shifts at `now`, in thousandths of a GPU, for allocations given as
    /// `(index, path, floor in thousandths of a GPU)` in path order: `(index, shift)` for each
    /// one whose floor moves, cuts balanced against raises (see the module doc). Empty with
    /// the hourly floor off.
    pub fn hourly_floor_shifts<'p>(
        &self,
        allocations: impl Iterator<Item = (usize, &'p str, i128)>,
        now: i64,
    ) -> Vec<(usize, i128)> {
        if !self.hourly_floor {
            return Vec::new();
        }
        // The hour so far, weighted by the GPUs registered over it: floors are fractions of the
        // GPUs registered now, and the hour's owed time is of the GPUs registered then.
        // Under the tree in force, from its application if that was this hour; under the trees
        // it replaced, what `owed_before` kept.
        let (capacity_area, _) = self.capacity_meter.at(now);
        let owed_ms = capacity_area
            .saturating_sub(self.owed_before.capacity_from(now))
            .checked_div(u128::from(self.total_gpus()))
            .map_or(0, |ms| i64::try_from(ms).unwrap_or(i64::MAX));
        // Meters and what was owed before are walked beside the allocations, all in path
        // order, rather than searched by path for each.
        let mut meters = self.meters.iter().peekable();
        // Runs ordered off sit in few allocations, a handful at a time.
        let mut stopping = self
            .flight
            .by_allocation
            .iter()
            .filter(|(_, f)| !f.stopping.is_empty())
            .peekable();
        let same_hour = hour_of(now) == self.owed_before.hour;
        let mut owed_before = self.owed_before.milli.iter().peekable();
        let mut shifts: Vec<(usize, i128)> = allocations
            .filter_map(|(index, path, floor_milli)| {
                let before = if same_hour {
                    take_matching(&mut owed_before, path).copied().unwrap_or(0)
                } else {
                    0
                };
                let (run, demand) = take_matching(&mut meters, path)?.at(now);
                let over = take_matching(&mut stopping, path).map_or(0, |f| past_deadlines(f, now));
                let (run, demand) = (run.saturating_sub(over), demand.saturating_sub(over));
                let shift = shift_milli_owing(floor_milli, run, demand, owed_ms, before, now);
                (shift != 0).then_some((index, shift))
            })
            .collect();
        balance(&mut shifts);
        shifts
    }
}

/// Scales the cuts (negative shifts, thousandths of a GPU) down to the raises when they add up
/// to more, rounding each towards zero to whole GPUs, and drops the shifts that end at 0.
pub fn balance(shifts: &mut Vec<(usize, i128)>) {
    let raised: i128 = shifts.iter().map(|s| s.1.max(0)).sum();
    let cut: i128 = shifts.iter().map(|s| (-s.1).max(0)).sum();
    if cut > raised {
        for s in shifts.iter_mut() {
            if s.1 < 0 {
                s.1 = whole_gpus(quotient(s.1.saturating_mul(raised), cut));
            }
        }
        shifts.retain(|s| s.1 != 0);
    }
}

#[cfg(test)]
mod tests {
    use super::quotient;

    #[test]
    fn the_quotient_rounds_as_division_does() {
        let big = i128::from(i64::MAX) * 4;
        let (min, max) = (i128::from(i64::MIN), i128::from(i64::MAX));
        for a in [
            0, 1, -1, 7, -7, 999, -999, 1_001, -1_001, min, max, big, -big,
        ] {
            for b in [1, -1, 3, -3, 1_000, -1_000, max, min, big] {
                assert_eq!(quotient(a, b), a / b, "{a} / {b}");
            }
        }
        // The one 64-bit quotient that does not fit 64 bits.
        assert_eq!(quotient(min, -1), -min);
    }
}
