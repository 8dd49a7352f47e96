//! Decayed fair share: Slurm's classic fair-share factor, the usual answer before Fair Tree.
//!
//! Place in the flow: one of the [`super::Baseline`]s the replay runs. Each allocation carries a
//! decayed usage U: GPU-ms, each older millisecond worth less with a half-life of 7 days
//! ([`HALF_LIFE_MS`]), integrated exactly over the running GPUs, which are constant between two
//! happenings ([`decay`]). A pass ranks allocations by the factor F = 2^(-U_norm / S)
//! ([`factor`]), with U_norm the allocation's share of all decayed usage and S its fraction of
//! the cluster, and walks the waiting jobs by (F desc, priority desc, submit time, workload
//! index), starting every one that fits.
//!
//! How it differs from fairshare: usage fades instead of leaving a fixed window, the order is
//! flat (no tree walk: siblings' usage does not shield a subtree), nothing is ever preempted, so
//! a team that filled the cluster while others were away keeps it until its jobs end. Minimum
//! runtimes play no part: a job with minimum runtime 0 charges its allocation like any other.
//! An allocation with no share (S = 0) gets F = 0 and starts only what nobody else wants.

use std::cmp::Reverse;
use std::f64::consts::LN_2;

use fairshare_model::budget::Fraction;

use super::by_allocation::ByAllocation;
use super::pass::{Start, Unlimited, walk};
use super::place::Nodes;
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

/// The fair-share factor of an allocation with `usage_share` of all decayed usage and `share`
/// of the cluster: 1 for no usage, 0.5 for usage exactly at its share, towards 0 beyond; 0 for
/// an allocation with no share.
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

    fn pass(&mut self, jobs: &[Job], nodes: &mut Nodes, started: &mut Vec<Start>) {
        let total: f64 = self.usage.iter().sum();
        // Non-negative floats order like their bits, which gives the rank a total order.
        let rank: Vec<Reverse<u64>> = (0..self.by_allocation.queues.len())
            .map(|slot| {
                if self.by_allocation.queues[slot].is_empty() {
                    return Reverse(0);
                }
                let usage_share = if total > 0.0 {
                    self.usage[slot] / total
                } else {
                    0.0
                };
                let share = self.shares.get(slot).copied().unwrap_or(0.0);
                Reverse(factor(usage_share, share).to_bits())
            })
            .collect();
        let first = started.len();
        walk(
            &mut self.by_allocation.queues,
            &rank,
            jobs,
            nodes,
            &mut Unlimited,
            started,
        );
        for start in &started[first..] {
            let job = &jobs[start.ticket];
            self.by_allocation.running[job.allocation] += job.gpus();
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
