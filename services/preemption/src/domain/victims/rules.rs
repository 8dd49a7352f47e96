//! Who may be a victim for one waiter: the rank rule (Fair Tree order after charging the
//! waiter, with hysteresis where the paths part), the share floor's slack per allocation, and
//! the [`Judge`] that applies them, with the checkpoint limits, to each running job.
//!
//! Place in the flow: [`super::search`] asks the judge about each holding of each node it
//! searches, and checks the plan it settles on against the [`FloorBudget`]. The rules
//! themselves are stated in the parent module's doc.

use std::sync::Arc;

use fairshare_decision::domain::debug;
use fairshare_decision::domain::rank::FloorStanding;
use fairshare_decision::domain::state::{Holder, Holding};
use fairshare_decision::domain::{FairTree, cmp_ratio};
use fairshare_model::budget::{AccountId, BudgetTree};
use fairshare_model::shape::Shape;

use super::super::config::Config;
use super::super::contract;
use super::super::view::{NodeView, View};
use super::{
    BEHIND_FRESH_DIVISOR, DEBUG_OWN_FRESH_DIVISOR, DEEP_BELOW_FLOOR, DEEP_FLOOR_FRESH_DIVISOR,
    FLOOR_FRESH_DIVISOR, STRAND_LIMIT_GPUS, Victim, WINDOW_FRESH_DIVISOR, Waiter, charge_of,
    fresh_limit_gpu_ms,
};

/// Lexicographic cost of a victim set: lost GPU-ms, allocated victims, victims.
pub(super) type Cost = (u128, u32, u32);

pub(super) fn add(a: Cost, b: Cost) -> Cost {
    (a.0.saturating_add(b.0), a.1 + b.1, a.2 + b.2)
}

/// Where the paths of accounts `a` and `v` part in the tree: the ancestor-or-self of each
/// that are siblings. `None` if one path contains the other (the same account, or an
/// ancestor). Walks up by depth, so judging a victim allocates nothing.
fn parting(
    tree: &BudgetTree,
    mut a: AccountId,
    mut v: AccountId,
) -> Option<(AccountId, AccountId)> {
    let account = |x: AccountId| &tree.accounts[x];
    while account(a).depth > account(v).depth {
        a = account(a).parent?;
    }
    while account(v).depth > account(a).depth {
        v = account(v).parent?;
    }
    if a == v {
        return None;
    }
    loop {
        let (up_a, up_v) = (account(a).parent, account(v).parent);
        if up_a == up_v {
            return Some((a, v));
        }
        (a, v) = (up_a?, up_v?);
    }
}

/// The rank rule for one waiter: Fair Tree order after charging its allocation.
///
/// The charged order is read off the pass's ranking (`base`) with the waiter's charge added
/// on its allocation's path, not from a charged copy: only the groups on that path change,
/// and the rule compares a sibling on the path with one off it.
pub(super) struct RankRule<'t> {
    pub(super) tree: &'t BudgetTree,
    /// What runs now, uncharged.
    pub(super) base: &'t FairTree<'t>,
    /// The waiter's charge ([`super::charge_of`]).
    pub(super) charge: u128,
    /// The waiter's allocation and its ancestors: the accounts the charge lands on.
    pub(super) path: Vec<AccountId>,
    /// The waiter's allocation.
    pub(super) leaf: AccountId,
    pub(super) margin_permille: u32,
    /// Whether the waiter's allocation is below its share floor: then it may take any other
    /// allocation's work past its minimum runtime, whatever the window says.
    pub(super) below_floor: bool,
    /// Whether the waiter's allocation holds at most `1 / DEEP_BELOW_FLOOR` of its floor:
    /// its floor orders are held to the looser limit ([`Self::floor_fresh_divisor`]).
    pub(super) deep_below_floor: bool,
    /// Whether the waiter is behind a blocked one ([`super::Rule::RankBehind`]): its floor
    /// orders are held to the tighter limit of [`BEHIND_FRESH_DIVISOR`] (its unallocated
    /// victims too, by [`Judge::behind_fresh`]).
    pub(super) behind_blocked: bool,
    /// With the share floor on, per allocation: the most GPUs victims may take from it
    /// ([`floor_slack`]).
    pub(super) slack: Option<Vec<u64>>,
    /// Per allocation (by account id), the window's verdict once asked ([`Self::window`]):
    /// working out the slack and judging victims ask the same question.
    pub(super) window: Vec<Option<bool>>,
    /// Per allocation, whether its slack is a debug waiter's whole-job exception rather than
    /// [`floor_slack`] (empty when the floor is off).
    pub(super) debug_by_window: Vec<bool>,
}

/// The most GPUs victims may take from allocation `v` for a waiter of allocation `a`.
///
/// Let `deficit(x)` be `x`'s floor minus the GPUs it holds, at least 0. Victims may leave `v`
/// - if the window also ranks `v` below `a`: no further below its floor than `deficit(a)`;
/// - else: strictly less far below it than `deficit(a) - m x floor(a)`, `m` being the
///   hysteresis (10%): only a clear gap is worth a restart.
///
/// So a waiter at or above its floor never takes an allocation below its floor, and one below
/// it takes only while that leaves the victim's allocation better off than the waiter's is.
/// Every order that the window does not also allow lowers the largest deficit of the two
/// allocations, so such orders cannot undo each other for ever; ties are left to the window,
/// whose charge-first rule rules out reversals.
fn floor_slack(
    v: FloorStanding,
    a: FloorStanding,
    window_allows: bool,
    margin_permille: u32,
) -> u64 {
    let i = |x: u128| i128::try_from(x).unwrap_or(i128::MAX);
    // Everything over den_v x den_a x 1000 (per mille of the margin).
    let den = i(v.floor_den.saturating_mul(a.floor_den).saturating_mul(1000));
    let mut deficit_a = (-a.excess()).max(0).saturating_mul(1000);
    if !window_allows {
        deficit_a =
            deficit_a.saturating_sub(i(a.floor_num).saturating_mul(i128::from(margin_permille)));
    }
    let s = v
        .excess()
        .saturating_mul(i(a.floor_den).saturating_mul(1000))
        .saturating_add(deficit_a.saturating_mul(i(v.floor_den)));
    if s < 0 || den <= 0 {
        return 0;
    }
    // Division in 64 bits when both fit, as they do for any real cluster: 128-bit division
    // is a library call, and this runs per allocation for every victim search.
    let (whole, rem) = match (i64::try_from(s), i64::try_from(den)) {
        (Ok(s), Ok(den)) => (i128::from(s / den), i128::from(s % den)),
        _ => (s / den, s % den),
    };
    let most = if window_allows || rem != 0 {
        whole
    } else {
        // Strictly less than S, which is a whole number of GPUs.
        whole - 1
    };
    u64::try_from(most.max(0)).unwrap_or(u64::MAX)
}

impl<'t> RankRule<'t> {
    /// The checkpoint limit of a floor order for this waiter: `interval / FLOOR_FRESH_DIVISOR`
    /// per GPU, or `interval / DEEP_FLOOR_FRESH_DIVISOR` while its allocation is deep below
    /// its floor, or `interval / BEHIND_FRESH_DIVISOR` behind a blocked waiter (see
    /// those constants).
    pub(super) fn floor_fresh_divisor(&self) -> i64 {
        if self.behind_blocked {
            BEHIND_FRESH_DIVISOR
        } else if self.deep_below_floor {
            DEEP_FLOOR_FRESH_DIVISOR
        } else {
            FLOOR_FRESH_DIVISOR
        }
    }

    /// The rule for a waiter of allocation `leaf`: window ranks and slack from `base` (what
    /// runs now), whether it is below its floor from `walk` (with the GPUs the walk has given
    /// waiters before it, so an allocation the walk already brought to its floor is not).
    /// Without `allocated_victims` (a search for unallocated work only) the floor slack, read
    /// only when allocated work is judged, is not worked out and stays `None`.
    pub(super) fn new(
        base: &'t FairTree<'t>,
        walk: &FairTree<'t>,
        tree: &'t BudgetTree,
        leaf: AccountId,
        waiter: &Waiter<'_>,
        cfg: &Config,
        allocated_victims: bool,
    ) -> Self {
        let path = std::iter::successors(Some(leaf), |&id| tree.accounts[id].parent).collect();
        let mut rule = RankRule {
            tree,
            base,
            charge: charge_of(waiter),
            path,
            leaf,
            margin_permille: cfg.hysteresis_permille,
            below_floor: walk.below_floor(leaf),
            deep_below_floor: walk.floor_standing(leaf).is_some_and(|a| {
                u128::from(a.held)
                    .saturating_mul(a.floor_den)
                    .saturating_mul(DEEP_BELOW_FLOOR)
                    <= a.floor_num
            }),
            behind_blocked: false,
            slack: None,
            window: vec![None; tree.accounts.len()],
            debug_by_window: Vec::new(),
        };
        if let Some(standing_a) = walk.floor_standing(leaf).filter(|_| allocated_victims) {
            rule.debug_by_window = vec![false; tree.accounts.len()];
            let slack = (0..tree.accounts.len())
                .map(|v| match base.floor_standing(v) {
                    // Below its floor, with the waiter at or above its own: nothing to take,
                    // whatever the window says (a common case, so it is not asked).
                    Some(standing) if standing.excess() < 0 && standing_a.excess() >= 0 => 0,
                    Some(standing) if tree.accounts[v].is_allocation() => {
                        let window = rule.window(v);
                        if window && waiter.debug && standing.excess() >= 0 {
                            // A debug job the window ranks first may take a whole job of an
                            // allocation at or above its floor, even one that leaves it below
                            // for a while: a few GPUs for minutes, where waiting for an
                            // allocation's own small work could take hours.
                            rule.debug_by_window[v] = true;
                            u64::MAX
                        } else {
                            floor_slack(standing, standing_a, window, cfg.hysteresis_permille)
                        }
                    }
                    _ => 0,
                })
                .collect();
            rule.slack = Some(slack);
        }
        rule
    }

    /// Whether the rule lets some other allocation of the tree lose work to this waiter: the
    /// window ranks it below, or the waiter is below its floor, and its floor slack is not
    /// nil. (A holding has at least one GPU, so a slack of 0 keeps every job.)
    pub(super) fn takes_any_allocation(&mut self) -> bool {
        (0..self.tree.accounts.len()).any(|v| {
            v != self.leaf
                && self.tree.accounts[v].is_allocation()
                && (self.below_floor || self.window(v))
                && self.slack.as_ref().is_none_or(|s| s[v] > 0)
        })
    }

    /// Whether taking `gpus` GPUs of allocation `v`'s work is within its [`floor_slack`]
    /// (always, with the floor off).
    fn keeps_floor(&self, v: AccountId, gpus: u64) -> bool {
        self.slack.as_ref().is_none_or(|s| gpus <= s[v])
    }

    /// Whether the window lets allocated work of allocation `v` make room for the waiter,
    /// worked out once per allocation.
    fn window(&mut self, v: AccountId) -> bool {
        if let Some(w) = self.window[v] {
            return w;
        }
        let w = self.window_allows(v);
        self.window[v] = Some(w);
        w
    }

    fn window_allows(&self, v: AccountId) -> bool {
        let a = self.leaf;
        if v == a {
            return false;
        }
        // `v` ranks after `a` once charged exactly when, where their paths part, `a`'s side
        // sorts first (one path containing the other is impossible for two distinct leaves).
        parting(self.tree, a, v).is_some_and(|(a, v)| {
            self.base.cmp_siblings_charged(a, v, self.charge).is_lt() && self.beyond_margin(a, v)
        })
    }

    /// Usage of account `id`'s subtree with the waiter charged.
    fn used(&self, id: AccountId) -> u128 {
        let used = self.base.used(id);
        if self.path.contains(&id) {
            used.saturating_add(self.charge)
        } else {
            used
        }
    }

    /// Hysteresis between siblings `a` (waiter's side) and `v` (victim's side).
    fn beyond_margin(&self, a: AccountId, v: AccountId) -> bool {
        let accounts = &self.tree.accounts;
        let (share_a, share_v) = (accounts[a].share, accounts[v].share);
        if share_v == 0 && share_a > 0 {
            return true;
        }
        let (used_a, used_v) = (self.used(a), self.used(v));
        let scale = 1000u128;
        let widened = scale + u128::from(self.margin_permille);
        let (den_a, den_v) = if share_a == 0 {
            // Both without a claim: compared by usage alone, as ranking does.
            (1, 1)
        } else if self.by_time(a) {
            (self.base.allocated(a), self.base.allocated(v))
        } else {
            (u128::from(share_a), u128::from(share_v))
        };
        cmp_ratio(
            used_v.saturating_mul(scale),
            den_v,
            used_a.saturating_mul(widened),
            den_a,
        )
        .is_ge()
    }

    /// Whether `id`'s sibling group is compared by allocated time (as [`FairTree`] does): every
    /// sibling with a share has some allocated time, and one has a share.
    fn by_time(&self, id: AccountId) -> bool {
        let mut any = false;
        for &s in self.tree.siblings(id) {
            if self.tree.accounts[s].share > 0 {
                if self.base.allocated(s) == 0 {
                    return false;
                }
                any = true;
            }
        }
        any
    }
}

/// A running job's standing as a possible victim for the current waiter.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate<'s> {
    pub(super) victim: Victim<'s>,
    pub(super) cost: Cost,
    /// When the victim next checkpoints ([`contract::next_checkpoint_ms`]): a plan held back
    /// for its lost work may go then.
    pub(super) next_checkpoint_ms: Option<i64>,
    /// The victim's allocation, when the share floor limits what may be taken from it.
    pub(super) floor_account: Option<AccountId>,
}

/// What victims may still take from each allocation under the share floor. The search asks
/// it about the cheapest set on each node (single-node waiters) or each node's whole set
/// (multi-node); a node whose cheapest set is refused is passed over, even if a dearer set
/// there would do.
pub(super) struct FloorBudget<'r> {
    /// Per allocation, the most GPUs victims may take from it ([`floor_slack`]; `None`: the
    /// floor is off, no limit).
    pub(super) slack: Option<&'r [u64]>,
    /// Per allocation, GPUs the plan takes from it so far (allocated lazily).
    pub(super) taken: Vec<u64>,
}

impl<'r> FloorBudget<'r> {
    pub(super) fn new(slack: Option<&'r [u64]>) -> Self {
        FloorBudget {
            slack,
            taken: Vec::new(),
        }
    }

    /// Whether the plan may take `cands` too. Quadratic in `cands`, which are one node's
    /// holdings: cheaper than a table per call.
    pub(super) fn allows<'a, 's: 'a>(
        &self,
        cands: impl Iterator<Item = &'a Candidate<'s>> + Clone,
    ) -> bool {
        let Some(slack) = self.slack else {
            return true;
        };
        cands.clone().all(|c| {
            let Some(v) = c.floor_account else {
                return true;
            };
            let more: u64 = cands
                .clone()
                .filter(|o| o.floor_account == Some(v))
                .map(|o| o.victim.gpus)
                .sum();
            let before = self.taken.get(v).copied().unwrap_or(0);
            before.saturating_add(more) <= slack.get(v).copied().unwrap_or(0)
        })
    }

    /// Adds `cands` to the plan.
    pub(super) fn take<'a, 's: 'a>(&mut self, cands: impl Iterator<Item = &'a Candidate<'s>>) {
        let Some(slack) = self.slack else {
            return;
        };
        for c in cands {
            if let Some(v) = c.floor_account {
                self.taken.resize(slack.len(), 0);
                self.taken[v] = self.taken[v].saturating_add(c.victim.gpus);
            }
        }
    }
}

/// Decides whether a running job may be a victim for the waiter.
///
/// It reads the job from the copy its holding carries
/// ([`Holder`](fairshare_decision::domain::state::Holder)), never from the job
/// table, and it is pure per job: a multi-node job met on several nodes is judged the same on
/// each, so nothing is remembered per job.
pub(super) struct Judge<'a> {
    pub(super) rule: RankRule<'a>,
    /// For a debug job under its allocation's allowance, the allowance (GPUs): it may also
    /// take its own allocation's work past its minimum runtime, and never takes a debug job.
    pub(super) debug_allowance: Option<u32>,
    /// The waiter's allocation.
    pub(super) leaf: AccountId,
    /// The waiter's GPUs per node.
    pub(super) waiter_gpus: u32,
    pub(super) now: i64,
    pub(super) cfg: &'a Config,
    /// Only unallocated work may be a victim (behind a blocked waiter).
    pub(super) unallocated_only: bool,
    /// Whether unallocated victims must have checkpointed within [`BEHIND_FRESH_DIVISOR`]
    /// (each one, when the waiter fits one node; a multi-node waiter's are not limited): the
    /// waiter is behind a blocked one and no debug job, so it can wait for a checkpoint.
    pub(super) behind_fresh: bool,
    /// Whether the waiter fits on one node.
    pub(super) single_node: bool,
    /// Whether allocated victims must have checkpointed within `WINDOW_FRESH_DIVISOR` (each
    /// one for a single-node waiter, on average over the plan for one that spans nodes): the
    /// waiter is no debug job, and its allocation holds at least its share floor, so waiting
    /// for a victim's checkpoint costs it no owed time.
    pub(super) window_fresh: bool,
    /// Whether allocated work of an allocation in the budget tree may be a victim at all: a
    /// debug job's own allocation, or one the rank rule lets go. When not (in a full cluster,
    /// most searches: nobody ranks below the waiter), a node's unallocated work bounds what it
    /// can give ([`Self::cannot_free`]).
    pub(super) ranked_victims: bool,
    /// Per node of the view, whether the waiter may not be made room there (a blocked
    /// waiter's reservation); empty when every node may be used.
    pub(super) off_limits: &'a [bool],
    /// The call's view, which keeps the earliest next checkpoint of a victim or plan held
    /// back for its lost work ([`Self::note_retry`]).
    pub(super) view: &'a View<'a>,
}

/// Per node of `view`, whether it is one of `names` (empty if `names` is). Both are in name
/// order after a sort of `names`, so one merge walk answers, not a search per node.
pub(crate) fn node_mask(view: &View<'_>, names: &[&str]) -> Vec<bool> {
    if names.is_empty() {
        return Vec::new();
    }
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    let mut next = sorted.iter().peekable();
    view.nodes
        .iter()
        .map(|n| {
            while next.next_if(|name| **name < n.name).is_some() {}
            next.peek().is_some_and(|name| **name == n.name)
        })
        .collect()
}

/// Whether ordering the job off now would end it before it ever ran: placed, not yet started
/// by its launcher, and not resumable (so not requeued). It would cost no lost work, which
/// would make it every search's first pick; it is no victim until it starts (a resumable one
/// is requeued, and may go).
fn never_to_run(job: &Holder) -> bool {
    !job.started && !job.resumable
}

impl Judge<'_> {
    /// Notes that a victim or plan was held back for its lost work until `at` (its next
    /// checkpoint): the pass is worth running again then, events or not.
    pub(super) fn note_retry(&self, at: Option<i64>) {
        self.view.note_retry(at);
    }

    /// What ordering `job` off costs beyond its lost work when that would take its allocation
    /// below its share floor (by what runs now): a checkpoint interval of work per GPU. Such
    /// an allocation's own waiters may then order work off in turn, and each hop of that chain
    /// throws work away; so, among the sets that make room, one that leaves every victim's
    /// allocation at its floor is preferred unless it loses more than that. Nothing with the
    /// floor off, and nothing for unallocated work.
    ///
    /// Medians of 5 runs, owed delivered / worst allocation / lost work, against the same code
    /// without it: Helios at 368 GPUs 99.62% / 98.95% / 1.18% (from 99.60% / 98.74% / 1.32%),
    /// 320 GPUs 99.14% / 97.56% / 1.30% (99.00% / 97.21% / 1.33%), 288 GPUs 97.77% / 93.57% /
    /// 1.59% (97.45% / 92.17% / 1.55%), 256 GPUs 95.59% / 90.20% / 2.09% (95.31% / 90.27% /
    /// 2.05%); msft-itp at 512 / 448 / 384 GPUs 99.97% / 99.94% / 99.93% owed (99.97% /
    /// 99.94% / 99.90%), 0.69% / 0.72% / 0.72% lost (0.67% / 0.77% / 0.75%). A third of the
    /// interval (10 min) or four intervals did less on Helios at 320 and 256 GPUs.
    fn floor_breach_penalty(&self, job: &Holder) -> u128 {
        if contract::is_unallocated(job.min_runtime_ms) {
            return 0;
        }
        let breaches = job.account.is_some_and(|v| {
            self.rule.base.floor_standing(v).is_some_and(|standing| {
                let den = i128::try_from(standing.floor_den).unwrap_or(i128::MAX);
                let taken = i128::from(job.gpus).saturating_mul(den);
                standing.excess().saturating_sub(taken) < 0
            })
        });
        if breaches {
            u128::try_from(self.cfg.checkpoint_interval_ms.max(0))
                .unwrap_or(0)
                .saturating_mul(u128::from(job.gpus))
        } else {
            0
        }
    }

    /// Whether the waiter may not be made room on node `i` of the view.
    pub(super) fn off_limits(&self, i: usize) -> bool {
        self.off_limits.get(i).copied().unwrap_or(false)
    }

    /// Whether `node` surely cannot free `need` GPUs for the waiter: a bound on what
    /// [`Self::judge`] could accept there falls short, so its jobs need not be judged one by
    /// one (in a full cluster, most nodes).
    ///
    /// Two bounds, the cheaper first. When no allocated work of the tree may go (a debug job
    /// takes its own allocation's; the rank rule, in a full cluster most often, lets nobody
    /// go), the node's unallocated work, which the state keeps per node; unless work of an
    /// allocation no longer in the tree runs there, which the rank rule may take. Otherwise
    /// [`Self::could_free`]. Skipping a node on the first bound skips only judgments that would
    /// have failed or accepted unallocated work; a retry they might note (unallocated work
    /// held back behind a blocked waiter) could not make room on a node whose unallocated work
    /// falls short anyway. Debug builds judge such a node anyway and check it.
    pub(super) fn cannot_free(&mut self, node: &NodeView<'_>, need: u32) -> bool {
        let need = u64::from(need);
        if !self.ranked_victims
            && (self.unallocated_only || !node.outside_tree)
            && u64::from(node.unallocated) < need
        {
            #[cfg(debug_assertions)]
            self.check_bound(node.holdings, need);
            return true;
        }
        self.could_free(node.holdings) < need
    }

    /// Judges every job of a node [`Self::cannot_free`] passed over on its first bound, and
    /// checks that they indeed free less than `need` and that only unallocated work held back
    /// notes a retry (then put back: a release build notes none).
    #[cfg(debug_assertions)]
    fn check_bound(&mut self, holdings: &[(Arc<str>, Holding)], need: u64) {
        let retry_before = self.view.retry_at();
        let mut accepted = 0u64;
        for (id, h) in holdings {
            let before = self.view.retry_at();
            if self.judge(id, h).is_some() {
                accepted += u64::from(h.gpus);
            }
            assert!(
                self.view.retry_at() == before || contract::is_unallocated(h.holder.min_runtime_ms),
                "a retry was noted for allocated work {id}"
            );
        }
        assert!(
            accepted < need,
            "{accepted} GPUs accepted, bound below {need}"
        );
        // Judging may note a retry for unallocated work held back for its lost work behind a
        // blocked waiter; the node cannot free `need` even once it checkpoints, and a release
        // build, which skips the node, notes none: so neither does this check.
        self.view.restore_retry(retry_before);
    }

    /// The most GPUs of `holdings` that [`Self::judge`] could accept: work not yet ordered
    /// off that is unallocated, or allocated and past its minimum runtime where allocated
    /// work may be taken at all. A node whose bound is short of what the waiter needs is
    /// passed over without judging its jobs one by one (in a full cluster, most nodes).
    fn could_free(&self, holdings: &[(Arc<str>, Holding)]) -> u64 {
        holdings
            .iter()
            .filter(|(_, h)| {
                let job = &h.holder;
                job.preempt_deadline_ms.is_none()
                    && !never_to_run(job)
                    && (contract::is_unallocated(job.min_runtime_ms)
                        || (!self.unallocated_only
                            && !contract::is_protected(
                                job.start_ms,
                                job.min_runtime_ms,
                                self.now,
                                self.cfg,
                            )))
            })
            .map(|(_, h)| u64::from(h.gpus))
            .sum()
    }

    /// Whether the GPUs a debug job would leave over of `holding`'s job, once it is gone,
    /// would be taken up: the job holds no other node, and queued single-node jobs fill what
    /// is left exactly, largest first (an estimate: the next cycles may rank or reserve
    /// otherwise; GPUs already free on the node are not counted, as they sit idle either
    /// way). Otherwise ordering a whole job off for a debug job of a GPU or two would leave
    /// the rest idle (the constructed scenario `debug-while-over-served`, where only
    /// whole-node work queues).
    fn rest_taken_up(&self, holding: &Holding) -> bool {
        let job = &holding.holder;
        if u64::from(holding.gpus) != job.gpus {
            return false;
        }
        let left = holding.gpus.saturating_sub(self.waiter_gpus);
        let besides = Shape {
            nodes: 1,
            gpus_per_node: self.waiter_gpus,
        };
        self.view.decision.queued_single_node_fill(left, besides) == left
    }

    /// The job holding `holding` as a candidate, if it may be one.
    pub(super) fn judge<'s>(
        &mut self,
        job_id: &'s str,
        holding: &'s Holding,
    ) -> Option<Candidate<'s>> {
        let job = &holding.holder;
        if job.preempt_deadline_ms.is_some() || never_to_run(job) {
            return None;
        }
        let mr = job.min_runtime_ms;
        let unallocated = contract::is_unallocated(mr);
        // Allowed by the share floor alone, not by the window.
        let mut floor_only = false;
        // A debug job's own allocation's job bigger than the strand limit.
        let mut own_big = false;
        if !unallocated && self.unallocated_only {
            return None;
        }
        if !unallocated {
            // The holder's account is resolved in the tree in force, the one ranked here, and
            // allocation paths and accounts correspond one to one: the same account is the
            // same allocation, and no account is one outside the tree.
            if contract::is_protected(job.start_ms, mr, self.now, self.cfg) {
                return None;
            }
            let own = job.account == Some(self.leaf);
            let allowed = match self.debug_allowance {
                // A debug job never displaces another (two allowances would take GPUs back
                // and forth), nor a job much larger than itself (the GPUs left over would
                // strand), but for one of its own allocation on one node whose GPUs left
                // over queued jobs would fill, and that checkpointed lately (below); its
                // own allocation's other work makes room first of all.
                Some(allowance) if debug::is_debug(job.gpus, mr, allowance) => false,
                Some(_) if job.gpus > u64::from(STRAND_LIMIT_GPUS) => {
                    own_big = own && self.rest_taken_up(holding);
                    own_big
                }
                Some(_) if own => true,
                _ if own => false,
                _ => match job.account {
                    // No longer in the tree: no claim at all.
                    None => true,
                    // With the share floor, a debug job takes from any allocation what leaves
                    // it at its floor, whatever the window says: a few GPUs of over-served
                    // work, which costs nobody owed time.
                    Some(v) if self.debug_allowance.is_some() && self.rule.slack.is_some() => {
                        self.rule.keeps_floor(v, job.gpus)
                    }
                    Some(v) => {
                        let window = self.rule.window(v);
                        floor_only = !window;
                        (window || self.rule.below_floor) && self.rule.keeps_floor(v, job.gpus)
                    }
                },
            };
            if !allowed {
                return None;
            }
        }
        let gpus = job.gpus;
        let lost = contract::lost_work_gpu_ms(
            gpus,
            job.start_ms,
            job.started,
            job.resumable,
            self.now,
            self.cfg,
        );
        // An order for allocated work picks its moment: a job that did not checkpoint lately
        // would throw away too much. For the floor rule, which overrides the window; and for
        // the window when the waiter's allocation holds its floor already, so the wait costs
        // it no owed time. (A node's victims, or a multi-node waiter's nodes, are seldom all
        // fresh at once: the plan of a waiter below its floor, and of a multi-node waiter at
        // it, is limited on average instead or too, in `choose`. A debug job takes what it
        // needs at once, but its own allocation's jobs larger than the strand limit, each
        // held to `DEBUG_OWN_FRESH_DIVISOR`.) Behind a blocked waiter, an order for
        // unallocated work picks its moment too: the blocked job holds the line anyway, so
        // the waiter can wait.
        let fresh_divisor = if own_big {
            Some(DEBUG_OWN_FRESH_DIVISOR)
        } else if floor_only {
            Some(self.rule.floor_fresh_divisor())
        } else if !unallocated && self.window_fresh {
            Some(WINDOW_FRESH_DIVISOR)
        } else if unallocated && self.behind_fresh {
            Some(BEHIND_FRESH_DIVISOR)
        } else {
            None
        };
        let next_checkpoint_ms = contract::next_checkpoint_ms(
            job.start_ms,
            job.started,
            job.resumable,
            self.now,
            self.cfg,
        );
        if let Some(divisor) = fresh_divisor
            && (self.single_node || own_big)
            && lost > fresh_limit_gpu_ms(self.cfg, divisor, gpus)
        {
            self.note_retry(next_checkpoint_ms);
            return None;
        }
        let debug_by_window = !unallocated
            && job.account != Some(self.leaf)
            && job
                .account
                .is_some_and(|v| self.rule.debug_by_window.get(v).copied().unwrap_or(false));
        Some(Candidate {
            victim: Victim {
                job_id,
                allocation: &job.allocation,
                unallocated,
                gpus,
                lost_gpu_ms: lost,
                debug_by_window,
            },
            cost: (
                lost.saturating_add(self.floor_breach_penalty(job)),
                u32::from(!unallocated),
                1,
            ),
            next_checkpoint_ms,
            // Work a debug job takes from its own allocation stays in that allocation.
            floor_account: if unallocated
                || self.rule.slack.is_none()
                || job.account == Some(self.leaf)
            {
                None
            } else {
                job.account
            },
        })
    }
}
