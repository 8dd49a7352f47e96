//! Decayed fair share: Slurm's classic fair-share factor, the usual answer before Fair Tree.
//!
//! Place in the flow: one of the [`super::Baseline`]s the replay runs. Each allocation carries a
//! decayed usage: GPU-ms, each older millisecond worth less with a half-life of 7 days
//! ([`HALF_LIFE_MS`]), integrated exactly over the running GPUs, which are constant between two
//! happenings ([`decay`]). A pass ranks allocations by the factor F = 2^(-U_E / S)
//! ([`factor`]), with S the allocation's fraction of the cluster and U_E its *effective usage*,
//! as Slurm's classic algorithm has it (Slurm documentation, "Classic Fairshare Algorithm";
//! `priority_multifactor`'s effective usage): with U_A an account's normalized usage (its
//! subtree's decayed usage over all decayed usage), a top-level account's U_E is its U_A, and
//! below it `U_E = U_A + (U_E(parent) - U_A) x share / sum of its siblings' shares` (see
//! [`effective_usage`]). So an account inherits part of its parent's over- or under-use: a team
//! with no usage of its own in a group that used much ranks below an idle team elsewhere. The
//! pass walks the waiting jobs by (F desc, priority desc, submit time, workload index), starting
//! every one that fits.
//!
//! How it differs from fairshare: usage fades instead of leaving a fixed window, nothing is
//! ever preempted, so a team that filled the cluster while others were away keeps it until its
//! jobs end. Minimum runtimes play no part, but a job with minimum runtime 0 runs as scavenger
//! work: after every allocated job of a pass, charging nobody's usage. An allocation with no share (S = 0) gets F = 0 and starts only what nobody
//! else wants.

use std::cmp::Reverse;
use std::f64::consts::LN_2;

use fairshare_model::budget::{BudgetTree, Fraction};

use super::allocations::Allocations;
use super::by_allocation::ByAllocation;
use super::cluster::Cluster;
use super::pass::{Start, Unlimited, walk};
use super::policy::{Job, Policy};

/// Half-life of recorded usage: 7 days, in ms (Slurm's default `PriorityDecayHalfLife`).
pub const HALF_LIFE_MS: f64 = 7.0 * 24.0 * 3_600_000.0;

/// Decayed fair share.
#[derive(Debug, Clone, Default)]
pub(crate) struct DecayedFairShare {
    /// Waiting jobs and running GPUs by allocation slot.
    by_allocation: ByAllocation,
    /// Each allocation's fraction of the cluster.
    shares: Vec<f64>,
    /// Each allocation's decayed usage, in GPU-ms, as of `clock_ms`.
    usage: Vec<f64>,
    /// The time `usage` is up to.
    clock_ms: Option<i64>,
    /// The tree in force, as effective usage walks it.
    levels: Vec<Level>,
}

/// One account of the tree in force, for [`effective_usage`]; parents come before children.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Level {
    /// Its parent's index in the same list; `None` at the top.
    pub parent: Option<usize>,
    /// Its share over the sum of its siblings' shares (0 when they are all 0).
    pub sibling_ratio: f64,
    /// The allocation slot it is, for a leaf.
    pub slot: Option<usize>,
}

/// The accounts of `tree`, in its id order (parents first), with their allocation slots.
pub(crate) fn levels(tree: &BudgetTree, allocations: &Allocations) -> Vec<Level> {
    tree.accounts
        .iter()
        .enumerate()
        .map(|(id, a)| {
            let level: u64 = tree
                .siblings(id)
                .iter()
                .map(|&s| tree.accounts[s].share)
                .sum();
            Level {
                parent: a.parent,
                sibling_ratio: if level == 0 {
                    0.0
                } else {
                    a.share as f64 / level as f64
                },
                slot: a
                    .is_allocation()
                    .then(|| allocations.slot(&a.path))
                    .flatten(),
            }
        })
        .collect()
}

/// Effective usage per allocation slot (0 for slots not in the tree): each account's
/// normalized usage `U_A` is its subtree's share of `usage`'s total; a top-level account's
/// `U_E` is its `U_A`, and below it `U_E = U_A + (U_E(parent) - U_A) x sibling_ratio`.
pub(crate) fn effective_usage(levels: &[Level], usage: &[f64]) -> Vec<f64> {
    let total: f64 = usage.iter().sum();
    // Subtree usage, children folded into parents from the back (children come later).
    let mut subtree: Vec<f64> = levels
        .iter()
        .map(|l| l.slot.and_then(|s| usage.get(s)).copied().unwrap_or(0.0))
        .collect();
    for i in (0..levels.len()).rev() {
        if let Some(p) = levels[i].parent {
            subtree[p] += subtree[i];
        }
    }
    let mut effective = vec![0.0; levels.len()];
    let mut by_slot = vec![0.0; usage.len()];
    for (i, level) in levels.iter().enumerate() {
        let normalized = if total > 0.0 { subtree[i] / total } else { 0.0 };
        effective[i] = match level.parent {
            None => normalized,
            Some(p) => normalized + (effective[p] - normalized) * level.sibling_ratio,
        };
        if let Some(slot) = level.slot
            && let Some(u) = by_slot.get_mut(slot)
        {
            *u = effective[i];
        }
    }
    by_slot
}

/// Usage `usage` after `elapsed_ms` more with `gpus` running: the old usage halves every
/// half-life, and the new GPU-ms are integrated with the same decay,
/// `U * 2^(-t/h) + g * (1 - 2^(-t/h)) * h / ln 2`.
pub(crate) fn decay(usage: f64, gpus: u64, elapsed_ms: f64) -> f64 {
    let exponent = -(elapsed_ms / HALF_LIFE_MS) * LN_2;
    // exp_m1 keeps 1 - 2^(-t/h) precise for the millisecond steps a busy trace has.
    let kept = exponent.exp();
    let gained = -exponent.exp_m1() * HALF_LIFE_MS / LN_2;
    usage * kept + gpus as f64 * gained
}

/// The fair-share factor of an allocation with effective usage `usage_share` (a share of all
/// decayed usage) and `share` of the cluster: 1 for no usage, 0.5 for usage exactly at its
/// share, towards 0 beyond; 0 for an allocation with no share.
pub(crate) fn factor(usage_share: f64, share: f64) -> f64 {
    if share <= 0.0 {
        0.0
    } else {
        (-usage_share / share).exp2()
    }
}

impl Policy for DecayedFairShare {
    fn set_shares(&mut self, fractions: &[Fraction]) {
        let slots = self.by_allocation.grow(fractions.len());
        self.usage.resize(slots, 0.0);
        self.shares = fractions
            .iter()
            .map(|f| f.num as f64 / f.den as f64)
            .collect();
    }

    fn set_tree(&mut self, tree: &BudgetTree, allocations: &Allocations) {
        self.levels = levels(tree, allocations);
    }

    fn advance(&mut self, now_ms: i64) {
        let last = *self.clock_ms.get_or_insert(now_ms);
        if now_ms <= last {
            return;
        }
        let elapsed = (now_ms - last) as f64;
        for (usage, &gpus) in self.usage.iter_mut().zip(&self.by_allocation.running) {
            *usage = decay(*usage, gpus, elapsed);
        }
        self.clock_ms = Some(now_ms);
    }

    fn enqueue(&mut self, ticket: usize, job: &Job) {
        self.by_allocation.enqueue(ticket, job);
    }

    fn finished(&mut self, job: &Job) {
        self.by_allocation.finished(job);
    }

    fn pass(&mut self, jobs: &[Job], cluster: &mut Cluster, started: &mut Vec<Start>) {
        let effective = effective_usage(&self.levels, &self.usage);
        // Non-negative floats order like their bits, which gives the rank a total order.
        let rank: Vec<Reverse<u64>> = (0..self.by_allocation.queues.len())
            .map(|slot| {
                if self.by_allocation.queues[slot].is_empty() {
                    return Reverse(0);
                }
                let usage = effective.get(slot).copied().unwrap_or(0.0);
                let share = self.shares.get(slot).copied().unwrap_or(0.0);
                Reverse(factor(usage, share).to_bits())
            })
            .collect();
        let first = started.len();
        walk(
            &mut self.by_allocation.queues,
            &rank,
            jobs,
            cluster,
            &mut Unlimited,
            started,
        );
        for start in &started[first..] {
            self.by_allocation.started(&jobs[start.ticket]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::Baseline;
    use crate::baseline::tests::{H, job, run_checked, setup, setup_with_nodes, starts};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn usage_halves_every_half_life_and_integrates_running_gpus() {
        // 8 GPUs for one half-life: 8 x (1 - 1/2) x h / ln 2.
        let busy = decay(0.0, 8, HALF_LIFE_MS);
        assert!(close(busy, 4.0 * HALF_LIFE_MS / LN_2));
        // For a short time decay hardly matters: close to 8 GPUs x 1 s.
        assert!(close(decay(0.0, 8, 1_000.0).round(), 8_000.0));
        // Idle for another half-life: half of it is left.
        assert!(close(decay(busy, 0, HALF_LIFE_MS), busy / 2.0));
        // Two steps integrate like one.
        let steps = decay(decay(0.0, 3, 1_234.0), 3, 98_765.0);
        assert!(close(steps, decay(0.0, 3, 99_999.0)));
    }

    #[test]
    fn factors_by_hand() {
        assert_eq!(factor(0.0, 0.5), 1.0);
        assert_eq!(factor(1.0, 0.5), 0.25);
        assert_eq!(factor(0.5, 0.5), 0.5);
        assert!(close(factor(0.6, 0.75), 0.574_349_177_498_517_6)); // 2^-0.8
        assert!(close(factor(0.4, 0.25), 0.329_876_977_693_223_6)); // 2^-1.6
        assert_eq!(factor(0.0, 0.0), 0.0);
    }

    #[test]
    fn a_team_with_no_usage_goes_before_one_that_used_the_cluster_for_a_day() {
        let s = setup(1, 8, &[("a", 1), ("b", 1)]);
        let jobs = vec![
            job("a-day", 0, 24 * H, "a", 8, 0),
            job("a-next", H, H, "a", 8, 9),
            job("b-first", 2 * H, H, "b", 8, 0),
        ];
        // At 24 h: a has all the usage (U_norm 1, S 0.5, F = 2^-2 = 0.25), b none (F = 1).
        let at = starts(&run_checked(
            Baseline::DecayedFairShare,
            &s,
            jobs.clone(),
            vec![],
        ));
        assert_eq!((at["b-first"].0, at["a-next"].0), (24 * H, 25 * H));
        // FIFO with priorities goes the other way: a's priority 9 wins.
        let at = starts(&run_checked(Baseline::Fifo, &s, jobs, vec![]));
        assert_eq!((at["a-next"].0, at["b-first"].0), (24 * H, 25 * H));
    }

    /// Groups A (a1, a2) and B (b1), equal shares at every level; a1 used everything.
    /// By hand: U_E(A) = 1, U_E(B) = 0 (top level: their normalized usage);
    /// U_E(a1) = 1 + (1 - 1) x 1/2 = 1; U_E(a2) = 0 + (1 - 0) x 1/2 = 0.5;
    /// U_E(b1) = 0 + (0 - 0) x 1 = 0. With
    /// S = 1/4, 1/4, 1/2: F(a1) = 2^-4, F(a2) = 2^-2, F(b1) = 1. A flat factor would give a2,
    /// which used nothing, the same 1 as b1.
    #[test]
    fn effective_usage_carries_a_groups_use_down_to_its_idle_team() {
        use fairshare_events::pb;
        let leaf = |name: &str| pb::Account {
            name: name.into(),
            share: 1,
            children: vec![],
        };
        let group = |name: &str, children| pb::Account {
            name: name.into(),
            share: 1,
            children,
        };
        let tree = BudgetTree::from_accounts(&[
            group("A", vec![leaf("a1"), leaf("a2")]),
            group("B", vec![leaf("b1")]),
        ])
        .unwrap();
        let slots = Allocations::new([&tree]);
        let (a1, a2, b1) = (
            slots.slot("A/a1").unwrap(),
            slots.slot("A/a2").unwrap(),
            slots.slot("B/b1").unwrap(),
        );
        let mut usage = vec![0.0; 3];
        usage[a1] = 1_000.0;
        let effective = effective_usage(&levels(&tree, &slots), &usage);
        assert!(close(effective[a1], 1.0), "{effective:?}");
        assert!(close(effective[a2], 0.5), "{effective:?}");
        assert!(close(effective[b1], 0.0), "{effective:?}");
        assert!(close(factor(effective[a1], 0.25), 0.0625));
        assert!(close(factor(effective[a2], 0.25), 0.25));
        assert_eq!(factor(effective[b1], 0.5), 1.0);
    }

    /// The same tree on one 8-GPU node: after a1's day, b1's job goes before a2's, which was
    /// submitted first (a flat factor ties them at 1 and takes a2's by submit time).
    #[test]
    fn an_idle_team_of_a_busy_group_waits_behind_an_idle_team_elsewhere() {
        use crate::setup::{EPOCH_MS, Setup};
        use fairshare_events::pb;
        let leaf = |name: &str| pb::Account {
            name: name.into(),
            share: 1,
            children: vec![],
        };
        let budget = pb::BudgetTreeSet {
            cluster: "c1".into(),
            accounts: vec![
                pb::Account {
                    name: "A".into(),
                    share: 1,
                    children: vec![leaf("a1"), leaf("a2")],
                },
                pb::Account {
                    name: "B".into(),
                    share: 1,
                    children: vec![leaf("b1")],
                },
            ],
        };
        let s = Setup::new(
            budget,
            Setup::uniform_nodes("n", 1, 8),
            EPOCH_MS + 30 * 24 * H,
        )
        .unwrap();
        let jobs = vec![
            job("a1-day", 0, 24 * H, "A/a1", 8, 0),
            job("a2-next", H, H, "A/a2", 8, 0),
            job("b1-next", 2 * H, H, "B/b1", 8, 0),
        ];
        let at = starts(&run_checked(Baseline::DecayedFairShare, &s, jobs, vec![]));
        assert_eq!((at["b1-next"].0, at["a2-next"].0), (24 * H, 25 * H));
    }

    #[test]
    fn usage_is_weighed_against_the_share() {
        // a holds 3/4 and b 1/4 of a 6 + 4 GPU cluster; for a day a runs 6 GPUs and b runs 4.
        let s = setup_with_nodes(&[("big", 6), ("small", 4)], &[("a", 3), ("b", 1)]);
        let jobs = vec![
            job("a-used", 0, 24 * H, "a", 6, 0),
            job("b-used", 0, 24 * H, "b", 4, 0),
            job("b-next", H, H, "b", 6, 0),
            job("a-next", 2 * H, H, "a", 6, 0),
        ];
        // At 24 h: U_norm is 0.6 for a and 0.4 for b. F_a = 2^(-0.6/0.75) = 0.57 beats
        // F_b = 2^(-0.4/0.25) = 0.33, although a used more and submitted later; only the
        // 6-GPU node holds either job.
        let at = starts(&run_checked(Baseline::DecayedFairShare, &s, jobs, vec![]));
        assert_eq!(
            (at["a-used"].1.clone(), at["b-used"].1.clone()),
            (vec![("big".to_owned(), 6)], vec![("small".to_owned(), 4)])
        );
        assert_eq!((at["a-next"].0, at["b-next"].0), (24 * H, 25 * H));
    }
}
