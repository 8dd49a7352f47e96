//! Property: no preemption cycle between two allocations, over random simulated workloads.
//!
//! The simulation drives the real services' cores in a loop: at each instant an accounting
//! snapshot (exact, computed here from the simulated runs, window end = now), then
//! `decide_preemptions` and the decision service's `decide` until neither has anything more to
//! say, with a launcher that confirms most orders at once and ignores the rest (they are
//! killed at their grace deadline). Time advances by 5 minutes, or sooner to the next time
//! [`next_due`] names.
//!
//! What "cycle" means, precisely. Let P1 be a fair-share order at `t1` taking a job of
//! allocation `Y` for a waiter of allocation `X` (charged `c1` = its GPUs x minimum runtime),
//! and P2 a later order at `t2 >= t1` taking a job of `X` for a waiter of `Y`. Rotation between
//! two allocations is the point of the contract, so P2 is legitimate when `X` has since run
//! more than it was charged for at P1: its ranking usage (the decision service's
//! `leaf_usage`: window usage plus what is left of running jobs' minimum runtimes) at `t2`
//! exceeds its usage at `t1` plus `c1`. A *cycle* is a P2 without that: a reversal explained by
//! nothing but the first preemption itself (the waiter's own projected usage, or the victim's
//! allocation losing the job). Charging the waiter before comparing makes that impossible:
//! P1 needs `X + c1` ranked before `Y`; P2 needs `Y + c2` ranked before `X`; with
//! `usage_X(t2) <= usage_X(t1) + c1` that would make `Y`'s usage shrink, which window usage
//! never does here (the window outlasts the run, and jobs run at least their minimum
//! runtime). Ranking without the charge fails this test (checked when it was written).
//!
//! Debug jobs under their allocation's allowance (the decision's default allowance is on
//! here) take part too: their orders obey the same no-cycle property when they take another
//! allocation's work, and are the only orders allowed to take the waiter's own allocation's.
//!
//! Along the way it also checks, for every order: never a job inside its minimum runtime,
//! never a job of the waiter's own allocation (but for a debug waiter, or a packing move,
//! which moves a resumable single-node job into free GPUs elsewhere and involves no rank), and
//! every kill comes after a grace deadline.

use std::collections::BTreeMap;

use fairshare_decision::domain::debug;
use fairshare_decision::domain::decide;
use fairshare_decision::domain::rank::{leaf_usage, ranking};
use fairshare_events::pb::{self, event::Body};
use proptest::prelude::*;

use super::support::{H, HOUR, MIN, SEC, leaf};
use crate::domain::{Config, PreemptionState, decide_preemptions, next_due};
use fairshare_testkit::Rng;

const WINDOW: i64 = 7 * 24 * HOUR;
const STEP: i64 = 5 * MIN;
const END: i64 = 20 * HOUR;
const ALLOCATIONS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
struct SimJob {
    allocation: &'static str,
    nodes: u32,
    gpn: u32,
    min_runtime_s: i64,
    resumable: bool,
    /// Run still needed to finish.
    remaining: i64,
}

/// A fair-share order, with the ranking usage of the waiter's allocation when it was made.
#[derive(Debug, Clone)]
struct Preemption {
    at: i64,
    waiter: String,
    waiter_allocation: String,
    victim: String,
    victim_allocation: String,
    /// `usage(waiter_allocation) + charge` at `at`.
    charged_usage: u128,
    /// Whether the waiter's allocation was below its share floor: a floor order, which the
    /// window need not justify.
    below_floor: bool,
    /// Whether the waiter was a debug job under its allowance: with the floor on, it takes
    /// what leaves the victim's allocation at its floor, whatever the window says.
    debug: bool,
}

struct Sim {
    h: H,
    rng: Rng,
    jobs: BTreeMap<String, SimJob>,
    /// Running jobs: id -> start.
    running: BTreeMap<String, i64>,
    /// Charged GPU-ms of finished runs, by allocation.
    charged_closed: BTreeMap<&'static str, u64>,
    allocated: BTreeMap<&'static str, u64>,
    preemptions: Vec<Preemption>,
    legit_reversals: usize,
    /// Reversals the window need not explain: one of the two orders was a floor order (its
    /// waiter's allocation below its floor) or a debug job's under the floor.
    floor_reversals: usize,
}

impl Sim {
    fn new(seed: u64, hysteresis_permille: u32, share_floor: bool) -> Sim {
        let mut rng = Rng(seed | 1);
        let mut h = H::new();
        h.state.set_share_floor(share_floor);
        h.cfg = Config {
            hysteresis_permille,
            ..Config::default()
        };
        let shares: Vec<u64> = ALLOCATIONS.iter().map(|_| 1 + rng.below(4)).collect();
        h.tree(
            ALLOCATIONS
                .iter()
                .zip(&shares)
                .map(|(a, s)| leaf(a, *s))
                .collect(),
        );
        let nodes = 3 + rng.below(4);
        for i in 0..nodes {
            h.node(&format!("n{i}"), 8);
        }
        let capacity = nodes * 8;
        let total: u64 = shares.iter().sum();
        let allocated = ALLOCATIONS
            .iter()
            .zip(&shares)
            .map(|(a, s)| (*a, s * capacity * WINDOW as u64 / total))
            .collect();
        Sim {
            h,
            rng,
            jobs: BTreeMap::new(),
            running: BTreeMap::new(),
            charged_closed: BTreeMap::new(),
            allocated,
            preemptions: Vec::new(),
            legit_reversals: 0,
            floor_reversals: 0,
        }
    }

    fn submit(&mut self, t: i64, n: usize) {
        let mrs = [0, 15 * 60, 3600, 2 * 3600];
        let id = format!("j{n:04}");
        let allocation = ALLOCATIONS[self.rng.below(3) as usize];
        let (nodes, gpn) = match self.rng.below(10) {
            0 => (2, 8),
            1 | 2 => (1, 8),
            3 | 4 => (1, 4),
            5 | 6 => (1, 2),
            _ => (1, 1),
        };
        let min_runtime_s = mrs[self.rng.below(4) as usize];
        // Jobs run at least their minimum runtime (see the module doc).
        let remaining = min_runtime_s * 1000 + (10 + self.rng.below(240) as i64) * MIN;
        let job = SimJob {
            allocation,
            nodes,
            gpn,
            min_runtime_s,
            resumable: self.rng.below(4) != 0,
            remaining,
        };
        self.h.submit_full(
            t,
            &id,
            allocation,
            nodes,
            gpn,
            min_runtime_s,
            self.rng.below(2) as i32,
            job.resumable,
        );
        self.jobs.insert(id, job);
    }

    /// Applies `body` at `t` to the state and to the simulated runs.
    fn apply(&mut self, t: i64, body: Body) {
        match &body {
            Body::JobStarted(s) => {
                self.running.insert(s.job_id.clone(), t);
            }
            Body::JobFinished(pb::JobFinished { job_id, .. })
            | Body::JobPreempted(pb::JobPreempted { job_id, .. }) => {
                let preempted = matches!(body, Body::JobPreempted(_));
                self.stop(t, job_id, preempted);
            }
            _ => {}
        }
        self.h.ok(t, body);
    }

    fn stop(&mut self, t: i64, job_id: &str, preempted: bool) {
        let Some(start) = self.running.remove(job_id) else {
            return;
        };
        let job = self.jobs.get_mut(job_id).unwrap();
        let ran = t - start;
        if job.min_runtime_s > 0 {
            *self.charged_closed.entry(job.allocation).or_default() +=
                (ran as u64) * u64::from(job.nodes * job.gpn);
        }
        if preempted {
            job.remaining = (job.remaining - ran).max(job.min_runtime_s * 1000);
        }
    }

    fn snapshot(&mut self, t: i64) {
        let mut charged = self.charged_closed.clone();
        for (id, start) in &self.running {
            let job = &self.jobs[id];
            if job.min_runtime_s > 0 {
                *charged.entry(job.allocation).or_default() +=
                    ((t - start) as u64) * u64::from(job.nodes * job.gpn);
            }
        }
        let rows: Vec<(&str, u64, u64)> = ALLOCATIONS
            .iter()
            .map(|a| (*a, charged.get(a).copied().unwrap_or(0), self.allocated[a]))
            .collect();
        self.h.snapshot(t, &rows);
    }

    /// Records and checks every fair-share order of one batch decided at `t`.
    fn check_orders(&mut self, t: i64, out: &[Body]) -> Result<(), TestCaseError> {
        let d = self.h.state.decision();
        let tree = d.budget_tree().unwrap();
        let usage = leaf_usage(d, tree, t);
        let capacity = u128::from(d.inventory().total_gpus());
        // Each allocation's floor as `(num, den)` GPUs: its fraction of the cluster, moved by
        // the hourly floor when that is on (the floors the rules were given).
        let ranked = ranking(d, tree, t);
        let floor = |id: usize| match ranked.floor_standing(id) {
            Some(s) => (s.floor_num, s.floor_den),
            None => {
                let f = tree.fraction(id);
                (f.num * capacity, f.den)
            }
        };
        let below_floor = |id: usize, held: u64| {
            let (num, den) = floor(id);
            u128::from(held) * den < num
        };
        // An allocation's floor minus what it holds, over its floor's denominator.
        let deficit = |id: usize, held: u64| {
            let (num, den) = floor(id);
            (
                i128::try_from(num).unwrap() - i128::from(held) * den as i128,
                den,
            )
        };
        // GPUs each allocation keeps once this batch's orders are carried out.
        let mut held: Vec<u64> = usage.iter().map(|u| u.held_gpus).collect();
        for b in out {
            let Body::PreemptionOrdered(p) = b else {
                continue;
            };
            let (victim, placed) = self.h.state.placed(&p.job_id).unwrap();
            let mr = victim.request.min_runtime_ms;
            prop_assert!(
                mr == 0 || t >= placed.start_ms + mr,
                "{} ordered off at {} inside its minimum runtime (start {}, {} ms)",
                p.job_id,
                t,
                placed.start_ms,
                mr
            );
            prop_assert_eq!(p.grace_deadline_ms, t + 30 * SEC);
            if p.for_job_id.is_empty() || mr == 0 {
                // Drains, and unallocated victims (no rank involved).
                continue;
            }
            if p.reason.starts_with("packing:") {
                // A packing move: the job keeps running on free GPUs elsewhere, so no rank is
                // involved; it must be able to resume there, on one node.
                prop_assert!(
                    victim.resumable && placed.nodes.len() == 1,
                    "{} moved but cannot resume on one node",
                    p.job_id
                );
                continue;
            }
            let waiter = d.job(&p.for_job_id).unwrap();
            if waiter.allocation == victim.allocation {
                // Only a debug job under its allowance takes its own allocation's work: no
                // rank involved, and no cycle between two allocations.
                prop_assert!(
                    debug::is_debug(
                        waiter.request.shape.total_gpus(),
                        waiter.request.min_runtime_ms,
                        d.debug_allowance_gpus()
                    ),
                    "{} ordered off for {} of its own allocation",
                    p.job_id,
                    p.for_job_id
                );
                continue;
            }
            let x = tree.allocation(&waiter.allocation).unwrap();
            let y = tree.allocation(&victim.allocation).unwrap();
            let debug_waiter = debug::is_debug(
                waiter.request.shape.total_gpus(),
                waiter.request.min_runtime_ms,
                d.debug_allowance_gpus(),
            );
            // A debug job may take whole jobs of an allocation at or above its floor (before
            // the batch: one waiter's victims).
            let at_floor_before = !below_floor(y, usage[y].held_gpus);
            held[y] = held[y].saturating_sub(victim.request.shape.total_gpus());
            // Else the victim's allocation ends no further below its floor than the
            // waiter's was.
            let (after_y, den_y) = deficit(y, held[y]);
            let (before_x, den_x) = deficit(x, usage[x].held_gpus);
            prop_assert!(
                !d.share_floor()
                    || (debug_waiter && at_floor_before)
                    || after_y * den_x as i128 <= before_x.max(0) * den_y as i128,
                "{} ordered off for {}{} takes {} further below its share floor than {} is",
                p.job_id,
                p.for_job_id,
                if debug_waiter { " (debug)" } else { "" },
                victim.allocation,
                waiter.allocation
            );
            // An order filed under the share floor says the victim's allocation ends no further
            // below its floor than the waiter's was: it must be true.
            prop_assert!(
                p.cause() != pb::PreemptionCause::ShareFloor
                    || after_y * den_x as i128 <= before_x.max(0) * den_y as i128,
                "{} ordered off for {} under the share floor takes {} further below its floor \
                 than {} is: {}",
                p.job_id,
                p.for_job_id,
                victim.allocation,
                waiter.allocation,
                p.reason
            );
            let charge = u128::from(waiter.request.shape.total_gpus())
                * u128::try_from(waiter.request.min_runtime_ms).unwrap();
            let now = Preemption {
                at: t,
                waiter: p.for_job_id.clone(),
                waiter_allocation: waiter.allocation.to_string(),
                victim: p.job_id.clone(),
                victim_allocation: victim.allocation.to_string(),
                charged_usage: usage[x].charged_gpu_ms + charge,
                below_floor: d.share_floor() && below_floor(x, usage[x].held_gpus),
                debug: d.share_floor() && debug_waiter,
            };
            // Every earlier order the other way round.
            for p1 in &self.preemptions {
                if p1.waiter_allocation == now.victim_allocation
                    && p1.victim_allocation == now.waiter_allocation
                {
                    if now.below_floor || p1.below_floor || now.debug || p1.debug {
                        self.floor_reversals += 1;
                        continue;
                    }
                    prop_assert!(
                        usage[y].charged_gpu_ms > p1.charged_usage,
                        "cycle: at {} {} ({}) was ordered off for {} ({}); at {} {} ({}) is ordered off for {} ({}) though {} has used {} <= {} since",
                        p1.at,
                        p1.victim,
                        p1.victim_allocation,
                        p1.waiter,
                        p1.waiter_allocation,
                        now.at,
                        now.victim,
                        now.victim_allocation,
                        now.waiter,
                        now.waiter_allocation,
                        now.victim_allocation,
                        usage[y].charged_gpu_ms,
                        p1.charged_usage
                    );
                    self.legit_reversals += 1;
                }
            }
            self.preemptions.push(now);
        }
        Ok(())
    }

    /// Runs the services at `t` until neither has anything to add.
    fn settle(&mut self, t: i64) -> Result<(), TestCaseError> {
        for _ in 0..100 {
            let out = decide_preemptions(&self.h.state, t, &self.h.cfg);
            self.check_orders(t, &out)?;
            for b in &out {
                if let Body::JobPreempted(p) = b {
                    let deadline = self
                        .h
                        .state
                        .placed(&p.job_id)
                        .unwrap()
                        .1
                        .preempt_deadline_ms;
                    prop_assert!(
                        deadline.is_some_and(|d| d <= t),
                        "killed before its deadline"
                    );
                }
            }
            let mut confirm = Vec::new();
            for b in &out {
                if let Body::PreemptionOrdered(p) = b
                    && self.rng.below(3) != 0
                {
                    confirm.push(p.job_id.clone());
                }
            }
            let mut any = !out.is_empty();
            for b in out {
                self.apply(t, b);
            }
            for id in confirm {
                self.apply(
                    t,
                    Body::JobPreempted(pb::JobPreempted {
                        job_id: id,
                        killed: false,
                    }),
                );
            }
            let placed: Vec<String> = decide(self.h.state.decision(), t)
                .placements
                .iter()
                .map(|p| p.job_id.to_string())
                .collect();
            let events = decide(self.h.state.decision(), t).events(0);
            any |= !events.is_empty();
            for e in events {
                self.apply(t, e.body.unwrap());
            }
            for id in placed {
                self.apply(t, Body::JobStarted(pb::JobStarted { job_id: id }));
            }
            if !any {
                // The derived parts of the state, kept in step event by event, must equal
                // what loading a checkpoint builds from scratch.
                let bytes = bincode::serialize(&self.h.state).unwrap();
                let mut restored: PreemptionState = bincode::deserialize(&bytes).unwrap();
                // A setting, not checkpointed: the service sets it again on loading.
                restored.set_share_floor(self.h.state.decision().share_floor());
                prop_assert!(restored == self.h.state, "derived state drifted at {}", t);
                return Ok(());
            }
        }
        Err(TestCaseError::fail(format!("no quiet state at {t}")))
    }

    fn run(&mut self) -> Result<(), TestCaseError> {
        let mut t = 0;
        let mut n = 0;
        while t <= END {
            // Finish what has run its course.
            let done: Vec<String> = self
                .running
                .iter()
                .filter(|(id, start)| **start + self.jobs[*id].remaining <= t)
                .map(|(id, _)| id.clone())
                .collect();
            for id in done {
                self.apply(
                    t,
                    Body::JobFinished(pb::JobFinished {
                        job_id: id,
                        exit_code: 0,
                    }),
                );
            }
            if t % STEP == 0 && t < END - 4 * HOUR {
                for _ in 0..self.rng.below(4) {
                    n += 1;
                    self.submit(t, n);
                }
            }
            self.snapshot(t);
            self.settle(t)?;
            let next = (t / STEP + 1) * STEP;
            t = next_due(&self.h.state, t, &self.h.cfg).map_or(next, |d| d.min(next));
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn no_preemption_cycle_between_two_allocations(seed in any::<u64>(), hysteresis in prop_oneof![Just(0u32), Just(100u32)], share_floor in any::<bool>()) {
        let mut sim = Sim::new(seed, hysteresis, share_floor);
        sim.run()?;
    }
}

/// The simulation exercises what the property is about: over a batch of seeds it orders
/// allocated victims for fair share, and allocations do take turns (legitimate reversals), so
/// the property above is not vacuous.
#[test]
fn the_simulation_preempts_and_rotates() {
    for share_floor in [false, true] {
        let (mut orders, mut reversals, mut floor_orders, mut floor_reversals) = (0, 0, 0, 0);
        for seed in 1..=24u64 {
            let mut sim = Sim::new(seed * 0x9e37_79b9, 0, share_floor);
            sim.run().unwrap();
            orders += sim.preemptions.len();
            floor_orders += sim.preemptions.iter().filter(|p| p.below_floor).count();
            reversals += sim.legit_reversals;
            floor_reversals += sim.floor_reversals;
        }
        println!(
            "floor {share_floor}: {orders} allocated victims ordered ({floor_orders} for \
             allocations below their floor), {reversals} legitimate reversals, \
             {floor_reversals} after floor or debug orders"
        );
        assert!(orders > 20, "only {orders} allocated victims ordered");
        if share_floor {
            // Allocations take turns too, but the floor or a debug allowance explains each.
            assert!(
                floor_reversals > 0,
                "no rotation between allocations at all"
            );
        } else {
            assert!(reversals > 0, "no rotation between allocations at all");
        }
        assert_eq!(
            floor_orders > 0,
            share_floor,
            "floor orders with the floor {share_floor}"
        );
    }
}
