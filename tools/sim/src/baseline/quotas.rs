//! Static quotas: every allocation owns a fixed number of GPUs and never more.
//!
//! Place in the flow: one of the [`super::Baseline`]s the replay runs. Each allocation's quota
//! is its fraction of the uncordoned GPUs, rounded by largest remainder so the quotas add up to
//! the cluster ([`quotas`]); it is recomputed when the budget tree or the uncordoned capacity
//! changes. An allocation starts a job only while its running GPUs plus the job's stay within
//! its quota. Jobs go by priority, then submit time, then workload index, across allocations;
//! a job its quota refuses is passed over, and the first one its quota admits but the nodes
//! do not hold gets the pass's reservation ([`super::pass`]).
//!
//! Idle quota is never lent: while one team waits for its own GPUs, another team's idle quota
//! stays idle. That is the waste fair share exists to remove, and what this baseline measures.
//! A job larger than its allocation's quota never starts. Minimum runtimes play no part, but a
//! job with minimum runtime 0 runs as scavenger work: outside every quota, on GPUs no
//! allocated job took in the pass (and, once started, runs to its end like any job).

use fairshare_model::budget::Fraction;

use super::by_allocation::ByAllocation;
use super::cluster::Cluster;
use super::pass::{Limit, Start, walk};
use super::policy::{Job, Policy};

/// Static per-allocation GPU quotas.
#[derive(Debug, Clone, Default)]
pub(crate) struct StaticQuotas {
    /// Waiting jobs and running GPUs by allocation slot.
    by_allocation: ByAllocation,
    fractions: Vec<Fraction>,
    /// GPUs each allocation may hold.
    quotas: Vec<u64>,
    /// The uncordoned GPUs `quotas` were computed for; `None` after a budget change.
    quotas_for: Option<u64>,
}

/// What each allocation may still start in a pass, by slot; unallocated work is outside every
/// quota.
struct Headroom {
    gpus: Vec<u64>,
}

impl Limit for Headroom {
    fn admits(&self, job: &Job) -> bool {
        job.unallocated
            || self
                .gpus
                .get(job.allocation)
                .is_some_and(|g| job.gpus() <= *g)
    }
    /// A job of the reserved job's allocation that runs past the reservation may take only
    /// what the reserved job leaves of their quota.
    fn admits_beside(&self, job: &Job, reserved: &Job) -> bool {
        if job.unallocated || job.allocation != reserved.allocation {
            return self.admits(job);
        }
        self.gpus
            .get(job.allocation)
            .is_some_and(|g| job.gpus().saturating_add(reserved.gpus()) <= *g)
    }
    fn took(&mut self, job: &Job) {
        if !job.unallocated
            && let Some(g) = self.gpus.get_mut(job.allocation)
        {
            *g -= job.gpus();
        }
    }
}

impl Policy for StaticQuotas {
    fn set_shares(&mut self, fractions: &[Fraction]) {
        self.by_allocation.grow(fractions.len());
        self.fractions = fractions.to_vec();
        self.quotas_for = None;
    }

    fn enqueue(&mut self, ticket: usize, job: &Job) {
        self.by_allocation.enqueue(ticket, job);
    }

    fn finished(&mut self, job: &Job) {
        self.by_allocation.finished(job);
    }

    fn pass(&mut self, jobs: &[Job], cluster: &mut Cluster, started: &mut Vec<Start>) {
        let capacity = cluster.nodes.uncordoned_gpus();
        if self.quotas_for != Some(capacity) {
            self.quotas = quotas(&self.fractions, capacity);
            self.quotas_for = Some(capacity);
        }
        let mut headroom = Headroom {
            gpus: (0..self.by_allocation.queues.len())
                .map(|slot| {
                    let quota = self.quotas.get(slot).copied().unwrap_or(0);
                    quota.saturating_sub(self.by_allocation.running[slot])
                })
                .collect(),
        };
        let lanes = self.by_allocation.queues.len();
        let first = started.len();
        walk(
            &mut self.by_allocation.queues,
            &vec![(); lanes],
            jobs,
            cluster,
            &mut headroom,
            started,
        );
        for start in &started[first..] {
            self.by_allocation.started(&jobs[start.ticket]);
        }
    }
}

/// Each allocation's whole-GPU quota of `gpus`: its exact share, rounded down, plus one GPU for
/// the allocations with the largest remainders (ties by slot, that is path order) until the
/// quotas add up to the GPUs the fractions cover (all of them when the fractions sum to 1).
pub(crate) fn quotas(fractions: &[Fraction], gpus: u64) -> Vec<u64> {
    let parts: Vec<(u64, f64)> = fractions.iter().map(|f| scaled(*f, gpus)).collect();
    let mut quotas: Vec<u64> = parts.iter().map(|(whole, _)| *whole).collect();
    let given: u64 = quotas.iter().sum();
    let remainders: f64 = parts.iter().map(|(_, rest)| rest).sum();
    // The remainders of fractions summing to 1 add up to a whole number; rounding absorbs the
    // float error. Fractions summing to less (a zero-share subtree) leave GPUs unowned.
    let extra = (remainders.round() as u64).min(gpus.saturating_sub(given));
    let mut by_remainder: Vec<usize> = (0..parts.len()).filter(|&i| parts[i].1 > 0.0).collect();
    by_remainder.sort_by(|&a, &b| parts[b].1.total_cmp(&parts[a].1).then(a.cmp(&b)));
    for slot in by_remainder
        .into_iter()
        .take(usize::try_from(extra).unwrap_or(usize::MAX))
    {
        quotas[slot] += 1;
    }
    quotas
}

/// `fraction x gpus` as whole GPUs and the remainder in [0, 1): exact where the product fits
/// 128 bits (any realistic tree), in floats otherwise.
fn scaled(fraction: Fraction, gpus: u64) -> (u64, f64) {
    let common = gcd(fraction.num, fraction.den).max(1);
    let (num, den) = (fraction.num / common, fraction.den / common);
    match num.checked_mul(u128::from(gpus)) {
        Some(product) => (
            u64::try_from(product / den).unwrap_or(gpus),
            (product % den) as f64 / den as f64,
        ),
        None => {
            let exact = num as f64 / den as f64 * gpus as f64;
            (exact.floor() as u64, exact - exact.floor())
        }
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::Baseline;
    use crate::baseline::tests::{H, M, budget_action, job, nodes_of, run_checked, setup, starts};
    use crate::setup::EPOCH_MS;
    use crate::workload::{Action, TimedAction};

    fn f(num: u128, den: u128) -> Fraction {
        Fraction { num, den }
    }

    #[test]
    fn quotas_add_up_to_the_cluster_by_largest_remainder() {
        assert_eq!(quotas(&[f(1, 2), f(1, 2)], 16), vec![8, 8]);
        // 16/3 = 5.33 each: one extra GPU, to the first path.
        assert_eq!(quotas(&[f(1, 3), f(1, 3), f(1, 3)], 16), vec![6, 5, 5]);
        // 35% and 65% of 10: 3.5 and 6.5, the tie goes to path order.
        assert_eq!(quotas(&[f(35, 100), f(65, 100)], 10), vec![4, 6]);
        // 10%, 20%, 70% of 8: 0.8, 1.6, 5.6: two GPUs left over; 0.8 gets the first, the 0.6
        // tie gives the second to path order.
        assert_eq!(quotas(&[f(1, 10), f(2, 10), f(7, 10)], 8), vec![1, 2, 5]);
        assert_eq!(quotas(&[f(0, 1), f(1, 1)], 8), vec![0, 8]);
        // A quarter of the tree has no claim: its GPUs are nobody's.
        assert_eq!(quotas(&[f(0, 1), f(3, 4)], 10), vec![0, 8]);
    }

    #[test]
    fn a_team_runs_one_job_at_a_time_on_its_half_while_the_other_half_idles() {
        let s = setup(2, 8, &[("a", 1), ("b", 1)]);
        let jobs = (0..3)
            .map(|i| job(&format!("a{i}"), i * M, H, "a", 8, 0))
            .collect();
        let log = run_checked(Baseline::StaticQuotas, &s, jobs, vec![]);
        let at = starts(&log);
        assert_eq!(
            (at["a0"].0, at["a1"].0, at["a2"].0),
            (0, H, 2 * H),
            "quota 8 of 16: b's idle half is not lent"
        );
    }

    /// An unallocated job of `gpus` GPUs submitted `at` ms after the epoch, running `duration`.
    fn scavenger(name: &str, at: i64, duration: i64, gpus: u32) -> crate::workload::SimJob {
        crate::workload::SimJob {
            min_runtime_ms: 0,
            ..job(name, at, duration, "b", gpus, 0)
        }
    }

    #[test]
    fn a_job_its_quota_refuses_holds_no_nodes_back() {
        let s = setup(2, 8, &[("a", 1), ("b", 1)]);
        let jobs = vec![
            job("a-running", 0, H, "a", 4, 0),     // n000 until 60 min
            job("b-running", 0, 2 * H, "b", 8, 0), // n001 until 2 h
            // Fits no node, and is over what "a" may still start (4 of its 8): passed over,
            // not reserved for (a reservation would hold n000 from 60 min).
            job("a-big", M, H, "a", 8, 9),
            scavenger("scavenger", 2 * M, 2 * H, 4),
        ];
        let log = run_checked(Baseline::StaticQuotas, &s, jobs, vec![]);
        let at = starts(&log);
        let on = |name: &str| nodes_of(&at, name);
        assert_eq!((at["scavenger"].0, on("scavenger")), (2 * M, vec!["n000"]));
        assert_eq!(at["a-big"].0, 2 * H);
    }

    #[test]
    fn a_reservation_holds_its_allocations_quota_against_its_own_long_jobs() {
        let s = setup(2, 8, &[("a", 1), ("b", 1)]);
        let jobs = vec![
            scavenger("scavenger", 0, 3 * H, 6), // n000 until 3 h
            job("b-running", 0, H, "b", 8, 0),   // n001 until 60 min
            // Reserved n001 from 60 min, and "a"'s whole quota with it.
            job("reserved", M, H, "a", 8, 9),
            job("a-long", 2 * M, 3 * H, "a", 2, 0),
            job("a-short", 3 * M, 30 * M, "a", 2, 0),
        ];
        let log = run_checked(Baseline::StaticQuotas, &s, jobs, vec![]);
        let at = starts(&log);
        assert_eq!(at["reserved"].0, H);
        // Started at 2 min, "a-long" would have left "a" 6 GPUs of quota at 60 min and kept
        // the reserved job waiting for hours; it waits for the reserved job instead.
        assert_eq!(at["a-long"].0, 2 * H);
        // What ends by the reservation may use the quota meanwhile.
        assert_eq!(at["a-short"].0, 3 * M);
    }

    #[test]
    fn quotas_follow_cordons_and_budget_changes() {
        let s = setup(2, 8, &[("a", 1), ("b", 1)]);
        let jobs = vec![
            job("a-wide", 0, H, "a", 8, 0),
            job("a-narrow", M, H, "a", 4, 0),
        ];
        let actions = vec![
            TimedAction {
                at_ms: EPOCH_MS,
                action: Action::Cordon {
                    node: "n001".into(),
                },
            },
            budget_action(2 * H, &[("a", 3), ("b", 1)]),
        ];
        let log = run_checked(Baseline::StaticQuotas, &s, jobs, actions);
        let at = starts(&log);
        // 8 uncordoned GPUs, half each: a's quota is 4, so the 8-GPU job waits and the 4-GPU
        // one behind it runs.
        assert_eq!(at["a-narrow"].0, M);
        // At 2 h the budget gives a 3/4 of 8 = 6, still under 8.
        assert!(!at.contains_key("a-wide"));
    }

    #[test]
    fn a_budget_change_raises_a_quota_from_its_time_on() {
        let s = setup(2, 8, &[("a", 1), ("b", 1)]);
        let jobs = vec![job("a0", 0, 10 * H, "a", 8, 0), job("a1", M, H, "a", 8, 0)];
        let actions = vec![budget_action(3 * H, &[("a", 1), ("b", 0)])];
        let log = run_checked(Baseline::StaticQuotas, &s, jobs, actions);
        let at = starts(&log);
        assert_eq!(at["a1"].0, 3 * H);
    }
}
