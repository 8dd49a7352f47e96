//! Victim selection for fair share (SPEC section 2, "Placement and preemption").
//!
//! Place in the flow: [`crate::domain::decide_preemptions`] calls [`fair_share`] once per call.
//! It walks the waiting allocated jobs in the decision service's order (Fair Tree over the same
//! folded state, charging each job as it is given GPUs, exactly like the decision cycle) and
//! stops at the first one that the free and soon-free GPUs cannot hold: the *waiter*. For it,
//! it looks for running jobs to order off ([`select_victims`] does the same for a named job);
//! if none may go, it walks on behind it (below).
//! Victims are ordered for at most one waiter per call; once their orders are folded, their
//! GPUs count as soon free, the waiter fits, and the next call moves on to the next waiter. A
//! waiter that no usable node could ever hold (cordons, maintenance) is skipped.
//!
//! A waiter that cannot be helped (the *blocked* one) holds the line, as the decision service's
//! reservation does: nothing is taken for the jobs behind it from the nodes that reservation
//! will hold ([`fairshare_decision::domain::reserve::reserved_nodes`]), and nothing allocated
//! at all. But the jobs behind it may still have *unallocated* work ordered off elsewhere, the
//! next [`BEHIND_BLOCKED`] of them in rank order: SPEC section 2 lets any waiting allocated
//! job take unallocated work, and stopping at the blocked job left allocated work waiting
//! beside it. On 30 days of msft-itp at 384, 448 and 512 GPUs (medians of 5 runs with nudged
//! arrivals) this delivered 0.3-0.6 points more owed time than stopping at the blocked job.
//!
//! Who may be a victim for a waiter of allocation `A` (nothing else ever is):
//! - an unallocated job (minimum runtime 0): always;
//! - an allocated job of allocation `V != A` that is past its minimum runtime (`now >= start +
//!   min(min_runtime, cap)`), if `V` ranks below `A` in the Fair Tree order computed *after*
//!   charging `A` the waiter's `GPUs x minimum runtime` (its projected usage once placed), and
//!   the hysteresis rule holds (the *window rule*); or, with the share floor on, if `A` holds
//!   fewer GPUs than its floor (the *floor rule*, whatever the window says). Either way, with
//!   the floor on, the victims of each allocation together stay within its `floor_slack`: a
//!   waiter at or above its floor never takes an allocation below its own, and one below it
//!   leaves the victim's allocation better off than its own by the hysteresis margin. A
//!   victim allowed by the floor rule alone must also have checkpointed lately when the
//!   waiter fits one node (`FLOOR_FRESH_DIVISOR`); one allowed by the window, for a waiter
//!   whose allocation holds its floor already, less lately (`WINDOW_FRESH_DIVISOR`);
//! - a job of an allocation no longer in the budget tree, past its minimum runtime (it has no
//!   claim, so it ranks below every allocation);
//! - never a job inside its minimum runtime, never a job already ordered off (its GPUs already
//!   count as free).
//!
//! Debug jobs first: the walk opens with the debug jobs under their allocation's allowance
//! ([`fairshare_decision::domain::debug`]), in the order the decision cycle places them. For
//! one that does not fit, the victims are those the rules below allow, plus its *own*
//! allocation's work past its minimum runtime; but never a debug job (two allowances would
//! take GPUs back and forth) and never a job of more than [`STRAND_LIMIT_GPUS`] GPUs (ordering
//! a whole node off for one GPU leaves the rest idle: the constructed scenario
//! `debug-while-over-served` lost 9 points of owed delivery that way). So a team over its
//! share debugs on GPUs its own small jobs give up, not on anyone else's. If nothing can make
//! room, the job is met again in rank order, and goes first again when GPUs free up.
//!
//! With the share floor on, the walk takes allocations below their floor first, as the
//! decision cycle does ([`fairshare_decision::domain::rank`]). A debug job under its allowance
//! then takes work of any allocation that leaves it at its floor (its own allocation's too),
//! whatever the window says: a few GPUs of over-served work, which costs nobody owed time;
//! failing that, the rank rule is tried for it at once rather than in rank order, where an
//! allocation below its floor with a big job nobody can make room for would hold it up. A
//! debug job the window ranks first may take a whole job of an allocation at or above its
//! floor even if that leaves it below for a while.
//!
//! Why charging first rules out ping-pong: if `A`'s job preempts `V`'s job, `A` ranks before
//! `V` even with the waiter's whole protected run counted. For `V` to take GPUs back from `A`,
//! `V` (plus its own waiter's charge) must rank before `A`, which needs `A`'s usage to grow
//! beyond what it was charged (real running time, or more work placed) or `V`'s to shrink.
//! Ranking usage only shrinks when old usage slides out of the window or a job ends before its
//! minimum runtime, neither of which the preemption itself causes (victims are past their
//! minimum runtime). The floor rule cannot undo itself either: each order it alone allows
//! lowers the larger deficit (floor minus held) of the two allocations, and nothing but jobs
//! ending raises it again. The property test in `tests/cycles.rs` checks both on random
//! workloads.
//!
//! Hysteresis ([`crate::domain::Config::hysteresis_permille`], `m`): let `a` and `v` be the
//! siblings where the paths of `A` and `V` part in the budget tree. The victim qualifies only if
//! `ratio(v) >= ratio(a) x (1 + m/1000)`, with `a` already charged, ratios being usage over
//! allocated time (or over share when the group is compared by share, as in ranking); a `v`
//! with share 0 (no claim) always qualifies. So work is rotated only when the gap is worth a
//! restart, not at every small change of rank.
//!
//! Which victims, among those allowed: only on nodes the waiter may use, and only sets after
//! which it fits, checked by an independent recount before anything is returned.
//! - Single-node waiter: on each usable node, the cheapest set of victims whose GPUs there
//!   cover the shortfall (an exact 0/1 covering knapsack over the node's few holdings); then the
//!   cheapest node, ties by node name.
//! - Multi-node waiter: nodes of exactly its GPUs per node, every holding of which may be a
//!   victim; greedily the node that adds the least cost (a multi-node victim freeing several
//!   nodes is paid for once). Exact when victims are single-node; a heuristic otherwise.
//! - Cost, compared in this order: GPU-ms of lost work ([`crate::domain::contract`]), then the
//!   number of allocated victims (unallocated work goes first on ties), then the number of
//!   victims.

use std::collections::BTreeMap;
use std::sync::Arc;

use fairshare_decision::domain::rank::{FloorStanding, ranking};
use fairshare_decision::domain::state::{Holding, JobStatus, Request};
use fairshare_decision::domain::{FairTree, cmp_ratio};
use fairshare_decision::domain::{debug, reserve};
use fairshare_model::budget::{AccountId, BudgetTree};
use fairshare_model::shape::Shape;

use super::config::Config;
use super::contract;
use super::state::PreemptionState;
use super::view::{View, is_ordered_off};

/// Largest job a debug job may displace (twice the largest debug job): a larger one would
/// leave most of its GPUs stranded, unusable by the whole-node work queued behind.
const STRAND_LIMIT_GPUS: u32 = 2 * debug::DEBUG_MAX_GPUS;

/// How many waiters behind a blocked one may have unallocated work ordered off for them, per
/// call: each costs a search over every node, and a pass runs after every batch of events.
const BEHIND_BLOCKED: usize = 8;

/// A floor order picks its moment. A victim that only the share floor allows (not the
/// window) is taken for a single-node waiter only within `checkpoint interval /
/// FLOOR_FRESH_DIVISOR` of its last checkpoint (10 min at the default 30); the allocated
/// victims of a multi-node waiter below its floor may lose no more than that per GPU on
/// average. Single runs: on Helios at 256 GPUs the first cut lost work from 2.0% to 1.4% of
/// delivered time and the second to 1.2%; on Helios at 384 GPUs the second from 2.0% to 1.3%,
/// owed delivery staying within the spread of 5 runs.
const FLOOR_FRESH_DIVISOR: i64 = 3;

/// With the share floor on, a single-node waiter (not a debug job) whose allocation holds at
/// least its floor takes allocated work the window allows (or work of an allocation no longer
/// in the tree) only within `checkpoint interval / WINDOW_FRESH_DIVISOR` of the victim's last
/// checkpoint (15 min at the default 30). Such a waiter gets its hourly owed time already, so
/// the wait costs it none. Medians of 5 runs of 30 days of msft-itp (minimum runtimes capped
/// at 30 min): lost work went from 0.87% / 1.00% / 1.06% of delivered time to 0.71% / 0.80% /
/// 0.79% at 512 / 448 / 384 GPUs, owed delivery from 99.96% / 99.93% / 99.92% to 99.96% /
/// 99.93% / 99.91%. The same limit for every window order, whatever the waiter's floor, cost
/// msft-itp at 384 GPUs a quarter point of owed delivery (99.67%).
const WINDOW_FRESH_DIVISOR: i64 = 2;

/// The most work victims holding `gpus` GPUs may throw away for an order limited to
/// `checkpoint interval / divisor` per GPU.
fn fresh_limit_gpu_ms(cfg: &Config, divisor: i64, gpus: u64) -> u128 {
    u128::try_from(cfg.checkpoint_interval_ms / divisor.max(1))
        .unwrap_or(0)
        .saturating_mul(u128::from(gpus))
}

/// The waiting job victims are chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter<'s> {
    /// The job.
    pub job_id: &'s str,
    /// Its allocation.
    pub allocation: &'s str,
    /// Nodes and GPUs per node.
    pub shape: Shape,
    /// Its minimum runtime, capped.
    pub min_runtime_ms: i64,
    /// Whether it is a debug job ([`contract::is_debug`]).
    pub debug: bool,
}

/// A running job to order off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim<'s> {
    /// The job.
    pub job_id: &'s str,
    /// Its allocation.
    pub allocation: &'s str,
    /// Whether it is unallocated work.
    pub unallocated: bool,
    /// GPUs it holds in all.
    pub gpus: u64,
    /// Work a preemption now throws away, GPU-ms.
    pub lost_gpu_ms: u128,
}

/// Victims for one waiter, and where it will fit once they are gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VictimPlan<'s> {
    /// The waiting job.
    pub waiter: Waiter<'s>,
    /// The nodes it fits on afterwards.
    pub nodes: Vec<&'s str>,
    /// The victims, by job id.
    pub victims: Vec<Victim<'s>>,
    /// Their lost work in all, GPU-ms.
    pub lost_gpu_ms: u128,
    /// What lets allocated work of other allocations go.
    pub grounds: Grounds,
}

/// What lets a waiter take allocated work of another allocation (past its minimum runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grounds {
    /// The window ranks the victim's allocation below the waiter's, once charged, by the
    /// hysteresis margin (and the share floor, when on, leaves it at its floor).
    Window,
    /// The waiter's allocation holds less than its share floor; the victim's is left better
    /// off than the waiter's was.
    BelowFloor,
    /// A debug job under its allowance, with the share floor on: the victim's allocation is
    /// left no further below its floor than the waiter's, or was at or above its floor and the
    /// window ranks it below the waiter's.
    DebugAllowance,
}

/// What the fair-share walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FairShare<'s> {
    /// Every waiting allocated job fits the free and soon-free GPUs (or could never fit).
    NothingToDo,
    /// The first job that does not fit, and the victims that make it fit; or, when that one
    /// cannot be helped, a job behind it and the unallocated victims that make it fit.
    Preempt(VictimPlan<'s>),
    /// The first job that does not fit cannot be helped without breaking a rule, and no
    /// unallocated work off its reserved nodes makes room for a job behind it.
    Blocked(Line<'s>),
}

/// Where a fair-share walk stopped: the blocked waiter, and the waiters behind it that did
/// not fit either (for [`crate::domain::pack`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'s> {
    /// The first job that does not fit and cannot be helped.
    pub first: Waiter<'s>,
    /// Its request, as the decision service reserves nodes for it.
    pub request: Request,
    /// The waiters behind it that the walk met and could not fit, in rank order (at most
    /// `BEHIND_BLOCKED`).
    pub behind: Vec<Waiter<'s>>,
}

/// Why no victims were chosen for a named job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoVictims {
    /// No such job is live in this cluster.
    #[error("no live job {0:?}")]
    UnknownJob(String),
    /// The job is not queued.
    #[error("job {0:?} is not waiting")]
    NotWaiting(String),
    /// Unallocated work never preempts.
    #[error("job {0:?} is unallocated; unallocated work never preempts")]
    Unallocated(String),
    /// No budget tree is in force, so nothing can be ranked.
    #[error("no budget tree is set for the cluster")]
    NoBudgetTree,
    /// The job's allocation is not in the budget tree.
    #[error("allocation {0:?} is not in the budget tree")]
    UnknownAllocation(String),
    /// No set of allowed victims lets the job fit.
    #[error("no set of preemptible jobs would let job {0:?} fit")]
    WouldNotFit(String),
    /// The job fits the free (or soon free) GPUs already; nobody needs to be ordered off.
    #[error("job {0:?} fits without preempting anyone")]
    AlreadyFits(String),
}

/// Lexicographic cost of a victim set: lost GPU-ms, allocated victims, victims.
type Cost = (u128, u32, u32);

fn add(a: Cost, b: Cost) -> Cost {
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
struct RankRule<'t> {
    tree: &'t BudgetTree,
    /// What runs now, uncharged.
    base: &'t FairTree<'t>,
    /// The waiter's charge ([`charge_of`]).
    charge: u128,
    /// The waiter's allocation and its ancestors: the accounts the charge lands on.
    path: Vec<AccountId>,
    /// The waiter's allocation.
    leaf: AccountId,
    margin_permille: u32,
    /// Whether the waiter's allocation is below its share floor: then it may take any other
    /// allocation's work past its minimum runtime, whatever the window says.
    below_floor: bool,
    /// With the share floor on, per allocation: the most GPUs victims may take from it
    /// ([`floor_slack`]).
    slack: Option<Vec<u64>>,
    /// Per allocation (by account id), the window's verdict once asked ([`Self::window`]):
    /// working out the slack and judging victims ask the same question.
    window: Vec<Option<bool>>,
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
    let whole = s / den;
    let most = if window_allows || s % den != 0 {
        whole
    } else {
        // Strictly less than S, which is a whole number of GPUs.
        whole - 1
    };
    u64::try_from(most.max(0)).unwrap_or(u64::MAX)
}

impl<'t> RankRule<'t> {
    /// The rule for a waiter of allocation `leaf`: window ranks and slack from `base` (what
    /// runs now), whether it is below its floor from `walk` (with the GPUs the walk has given
    /// waiters before it, so an allocation the walk already brought to its floor is not).
    fn new(
        base: &'t FairTree<'t>,
        walk: &FairTree<'t>,
        tree: &'t BudgetTree,
        leaf: AccountId,
        waiter: &Waiter<'_>,
        cfg: &Config,
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
            slack: None,
            window: vec![None; tree.accounts.len()],
        };
        if let Some(standing_a) = walk.floor_standing(leaf) {
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
struct Candidate<'s> {
    victim: Victim<'s>,
    cost: Cost,
    /// The victim's allocation, when the share floor limits what may be taken from it.
    floor_account: Option<AccountId>,
}

/// What victims may still take from each allocation under the share floor. The search asks
/// it about the cheapest set on each node (single-node waiters) or each node's whole set
/// (multi-node); a node whose cheapest set is refused is passed over, even if a dearer set
/// there would do.
struct FloorBudget<'r> {
    /// Per allocation, the most GPUs victims may take from it ([`floor_slack`]; `None`: the
    /// floor is off, no limit).
    slack: Option<&'r [u64]>,
    /// Per allocation, GPUs the plan takes from it so far (allocated lazily).
    taken: Vec<u64>,
}

impl<'r> FloorBudget<'r> {
    fn new(slack: Option<&'r [u64]>) -> Self {
        FloorBudget {
            slack,
            taken: Vec::new(),
        }
    }

    /// Whether the plan may take `cands` too. Quadratic in `cands`, which are one node's
    /// holdings: cheaper than a table per call.
    fn allows<'a, 's: 'a>(&self, cands: impl Iterator<Item = &'a Candidate<'s>> + Clone) -> bool {
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
    fn take<'a, 's: 'a>(&mut self, cands: impl Iterator<Item = &'a Candidate<'s>>) {
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
struct Judge<'a> {
    rule: RankRule<'a>,
    /// For a debug job under its allocation's allowance, the allowance (GPUs): it may also
    /// take its own allocation's work past its minimum runtime, and never takes a debug job.
    debug_allowance: Option<u32>,
    /// The waiter's allocation.
    leaf: AccountId,
    now: i64,
    cfg: &'a Config,
    /// Only unallocated work may be a victim (behind a blocked waiter).
    unallocated_only: bool,
    /// Whether the waiter fits on one node.
    single_node: bool,
    /// Whether allocated victims must have checkpointed within `WINDOW_FRESH_DIVISOR`: the
    /// waiter is no debug job, and its allocation holds at least its share floor, so waiting
    /// for a victim's checkpoint costs it no owed time.
    window_fresh: bool,
    /// Per node of the view, whether the waiter may not be made room there (a blocked
    /// waiter's reservation); empty when every node may be used.
    off_limits: Vec<bool>,
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

impl Judge<'_> {
    /// Whether the waiter may not be made room on node `i` of the view.
    fn off_limits(&self, i: usize) -> bool {
        self.off_limits.get(i).copied().unwrap_or(false)
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

    /// The job holding `holding` as a candidate, if it may be one.
    fn judge<'s>(&mut self, job_id: &'s str, holding: &'s Holding) -> Option<Candidate<'s>> {
        let job = &holding.holder;
        if job.preempt_deadline_ms.is_some() {
            return None;
        }
        let mr = job.min_runtime_ms;
        let unallocated = contract::is_unallocated(mr);
        // Allowed by the share floor alone, not by the window.
        let mut floor_only = false;
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
                // strand); its own allocation's other work makes room first of all.
                Some(allowance)
                    if debug::is_debug(job.gpus, mr, allowance)
                        || job.gpus > u64::from(STRAND_LIMIT_GPUS) =>
                {
                    false
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
        // it no owed time. (A multi-node waiter needs whole nodes at once, and waiting for all
        // of them to be fresh would keep it waiting for good: a floor plan is limited on
        // average instead, in `choose`. A debug job takes what it needs at once.)
        let fresh_divisor = if floor_only {
            Some(FLOOR_FRESH_DIVISOR)
        } else if !unallocated && self.window_fresh {
            Some(WINDOW_FRESH_DIVISOR)
        } else {
            None
        };
        if let Some(divisor) = fresh_divisor
            && self.single_node
            && lost > fresh_limit_gpu_ms(self.cfg, divisor, gpus)
        {
            return None;
        }
        Some(Candidate {
            victim: Victim {
                job_id,
                allocation: &job.allocation,
                unallocated,
                gpus,
                lost_gpu_ms: lost,
            },
            cost: (lost, u32::from(!unallocated), 1),
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

/// The cheapest victims on one node that free `shortfall` GPUs there: an exact covering
/// knapsack over the node's holdings (a handful: at most one per GPU). Its tables are kept
/// from node to node, so a pass over every node allocates nothing per node.
#[derive(Debug, Default)]
struct Cover {
    /// `best[c]`: cheapest cost to free at least `c` GPUs with the items seen so far.
    best: Vec<Option<Cost>>,
    /// `took[k * (shortfall + 1) + c]`: item `k` improved `best[c]`.
    took: Vec<bool>,
}

impl Cover {
    /// The cheapest cost of freeing `shortfall` GPUs with `items` (`(GPUs, candidate)`), and
    /// in `chosen` the items it takes, last item first; `None` if they cannot.
    fn solve(
        &mut self,
        items: &[(u32, Candidate<'_>)],
        shortfall: u32,
        chosen: &mut Vec<usize>,
    ) -> Option<Cost> {
        let d = shortfall as usize;
        let width = d + 1;
        self.best.clear();
        self.best.resize(width, None);
        self.best[0] = Some((0, 0, 0));
        self.took.clear();
        self.took.resize(items.len() * width, false);
        for (k, (gpus, cand)) in items.iter().enumerate() {
            for c in (1..=d).rev() {
                let from = c.saturating_sub(*gpus as usize);
                if let Some(prev) = self.best[from] {
                    let with = add(prev, cand.cost);
                    if self.best[c].is_none_or(|b| with < b) {
                        self.best[c] = Some(with);
                        self.took[k * width + c] = true;
                    }
                }
            }
        }
        let cost = self.best[d]?;
        // Walk the choices back from the full shortfall.
        chosen.clear();
        let mut c = d;
        for k in (0..items.len()).rev() {
            if c > 0 && self.took[k * width + c] {
                chosen.push(k);
                c = c.saturating_sub(items[k].0 as usize);
            }
        }
        Some(cost)
    }
}

fn single_node<'s>(
    view: &View<'s>,
    judge: &mut Judge<'_>,
    waiter: &Waiter<'s>,
    protected_until: i64,
) -> Option<(Vec<usize>, Vec<Candidate<'s>>)> {
    let need = waiter.shape.gpus_per_node;
    let mut best: Option<(Cost, usize, Vec<Candidate<'s>>)> = None;
    let mut cover = Cover::default();
    let mut items: Vec<(u32, Candidate<'s>)> = Vec::new();
    let mut chosen = Vec::new();
    // One node's victims are the whole plan: nothing is taken before them. (A copy: the
    // judge is borrowed mutably below.)
    let slack = judge.rule.slack.clone();
    let floor = FloorBudget::new(slack.as_deref());
    for (i, node) in view.nodes.iter().enumerate() {
        if node.capacity < need || !node.accepts(judge.now, protected_until) || judge.off_limits(i)
        {
            continue;
        }
        let shortfall = need.saturating_sub(node.available());
        if shortfall == 0 {
            return Some((vec![i], Vec::new()));
        }
        if judge.could_free(node.holdings) < u64::from(shortfall) {
            continue;
        }
        items.clear();
        items.extend(
            node.holdings
                .iter()
                .filter_map(|(id, h)| judge.judge(id, h).map(|c| (h.gpus, c))),
        );
        // Victims that cannot free enough GPUs between them cannot cover the shortfall.
        let freeable: u64 = items.iter().map(|(g, _)| u64::from(*g)).sum();
        if freeable < u64::from(shortfall) {
            continue;
        }
        let Some(cost) = cover.solve(&items, shortfall, &mut chosen) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| cost < b.0)
            && floor.allows(chosen.iter().map(|&k| &items[k].1))
        {
            best = Some((cost, i, chosen.iter().map(|&k| items[k].1).collect()));
        }
    }
    best.map(|(_, i, victims)| (vec![i], victims))
}

/// A node a multi-node waiter could have once `victims[from..to]` are gone.
struct NodeOption {
    node: usize,
    from: usize,
    to: usize,
    /// The cost of all those victims.
    cost: Cost,
    /// Whether one of them also holds GPUs on other nodes (and so may already be chosen
    /// with another node).
    shared: bool,
}

fn multi_node<'s>(
    view: &View<'s>,
    judge: &mut Judge<'_>,
    waiter: &Waiter<'s>,
    protected_until: i64,
) -> Option<(Vec<usize>, Vec<Candidate<'s>>)> {
    let gpn = waiter.shape.gpus_per_node;
    // Usable nodes that can be made wholly free, with the victims that takes (all options'
    // victims in one array, so building an option allocates nothing).
    let mut victims: Vec<Candidate<'s>> = Vec::new();
    let mut options: Vec<NodeOption> = Vec::new();
    for (i, node) in view.nodes.iter().enumerate() {
        if node.capacity != gpn
            || node.taken > 0
            || !node.accepts(judge.now, protected_until)
            || judge.off_limits(i)
        {
            continue;
        }
        // Every job still on the node must go: one the cheap bound already refuses rules the
        // node out.
        let staying = node
            .capacity
            .saturating_sub(node.free)
            .saturating_sub(node.pending);
        if judge.could_free(node.holdings) < u64::from(staying) {
            continue;
        }
        let from = victims.len();
        let (mut cost, mut shared, mut ok) = ((0, 0, 0), false, true);
        for (id, h) in node.holdings {
            if is_ordered_off(h) {
                continue;
            }
            match judge.judge(id, h) {
                Some(c) => {
                    cost = add(cost, c.cost);
                    shared |= c.victim.gpus != u64::from(h.gpus);
                    victims.push(c);
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            options.push(NodeOption {
                node: i,
                from,
                to: victims.len(),
                cost,
                shared,
            });
        } else {
            victims.truncate(from);
        }
    }
    let k = waiter.shape.nodes as usize;
    if options.len() < k {
        return None;
    }
    let mut chosen_nodes = Vec::with_capacity(k);
    let mut chosen: BTreeMap<&'s str, Candidate<'s>> = BTreeMap::new();
    let mut used = vec![false; options.len()];
    let slack = judge.rule.slack.clone();
    let mut floor = FloorBudget::new(slack.as_deref());
    for _ in 0..k {
        let mut pick: Option<(Cost, usize)> = None;
        for (o, option) in options.iter().enumerate() {
            if used[o] {
                continue;
            }
            // A victim held on this node only can be chosen only with this node, which is not
            // chosen yet: then the marginal cost is the whole cost.
            let marginal = if option.shared {
                victims[option.from..option.to]
                    .iter()
                    .filter(|c| !chosen.contains_key(c.victim.job_id))
                    .fold((0, 0, 0), |acc, c| add(acc, c.cost))
            } else {
                option.cost
            };
            // Only a victim also held elsewhere can have been chosen already (with another
            // node): the lookups are skipped for a node whose victims are all its own.
            let fresh = victims[option.from..option.to]
                .iter()
                .filter(|c| !option.shared || !chosen.contains_key(c.victim.job_id));
            if pick.is_none_or(|p| marginal < p.0) && floor.allows(fresh) {
                pick = Some((marginal, o));
            }
        }
        let (_, o) = pick?;
        used[o] = true;
        let option = &options[o];
        chosen_nodes.push(option.node);
        floor.take(
            victims[option.from..option.to]
                .iter()
                .filter(|c| !option.shared || !chosen.contains_key(c.victim.job_id)),
        );
        for c in &victims[option.from..option.to] {
            chosen.insert(c.victim.job_id, *c);
        }
    }
    chosen_nodes.sort_unstable();
    Some((chosen_nodes, chosen.into_values().collect()))
}

/// Independent recount: with `victims` gone (and jobs already ordered off gone), does the
/// waiter fit `nodes`? Nothing is ordered unless this holds.
fn fits_after(view: &View<'_>, nodes: &[usize], victims: &[Candidate<'_>], shape: Shape) -> bool {
    if nodes.len() != shape.nodes.max(1) as usize {
        return false;
    }
    nodes.iter().all(|&i| {
        let Some(node) = view.nodes.get(i) else {
            return false;
        };
        let staying: u64 = node
            .holdings
            .iter()
            .filter(|(id, h)| {
                !is_ordered_off(h) && !victims.iter().any(|v| *v.victim.job_id == **id)
            })
            .map(|(_, h)| u64::from(h.gpus))
            .sum();
        let left = u64::from(node.capacity)
            .saturating_sub(staying)
            .saturating_sub(u64::from(node.taken));
        if shape.nodes <= 1 {
            left >= u64::from(shape.gpus_per_node)
        } else {
            node.capacity == shape.gpus_per_node && left == u64::from(node.capacity)
        }
    })
}

/// Which waiter victims are judged for: one in rank order, or a debug job under its
/// allocation's allowance of this many GPUs (see [`Judge::debug_allowance`]).
#[derive(Clone, Copy)]
enum Rule {
    Rank,
    Debug(u32),
    /// Behind a blocked waiter: unallocated work only.
    UnallocatedOnly,
}

/// What placing `waiter` charges its allocation: its protected run.
fn charge_of(waiter: &Waiter<'_>) -> u128 {
    u128::from(waiter.shape.total_gpus()) * u128::try_from(waiter.min_runtime_ms).unwrap_or(0)
}

/// Chooses victims for `waiter` of allocation `leaf` against `view`, ranking with `base`, on
/// nodes other than `off_limits`.
#[allow(clippy::too_many_arguments)]
fn choose<'s, 't>(
    view: &View<'s>,
    base: &FairTree<'t>,
    walk: &FairTree<'t>,
    rule: Rule,
    tree: &'t BudgetTree,
    leaf: AccountId,
    waiter: Waiter<'s>,
    now: i64,
    cfg: &Config,
    off_limits: &[&str],
) -> Result<VictimPlan<'s>, NoVictims> {
    let would_not_fit = || NoVictims::WouldNotFit(waiter.job_id.to_owned());
    let rank_rule = RankRule::new(base, walk, tree, leaf, &waiter, cfg);
    let window_fresh = matches!(rule, Rule::Rank)
        && !waiter.debug
        && rank_rule.slack.is_some()
        && !rank_rule.below_floor;
    let mut judge = Judge {
        rule: rank_rule,
        debug_allowance: match rule {
            Rule::Rank | Rule::UnallocatedOnly => None,
            Rule::Debug(allowance) => Some(allowance),
        },
        unallocated_only: matches!(rule, Rule::UnallocatedOnly),
        single_node: waiter.shape.nodes <= 1,
        window_fresh,
        off_limits: node_mask(view, off_limits),
        leaf,
        now,
        cfg,
    };
    let protected_until = now.saturating_add(waiter.min_runtime_ms);
    let (nodes, mut victims) = if waiter.shape.nodes <= 1 {
        single_node(view, &mut judge, &waiter, protected_until)
    } else {
        multi_node(view, &mut judge, &waiter, protected_until)
    }
    .ok_or_else(would_not_fit)?;
    if victims.is_empty() {
        return Err(NoVictims::AlreadyFits(waiter.job_id.to_owned()));
    }
    if !fits_after(view, &nodes, &victims, waiter.shape) {
        return Err(would_not_fit());
    }
    victims.sort_by(|a, b| a.victim.job_id.cmp(b.victim.job_id));
    victims.dedup_by(|a, b| a.victim.job_id == b.victim.job_id);
    // Independent recount of the floor too: the victims of each allocation together leave it
    // at or above its floor.
    if !FloorBudget::new(judge.rule.slack.as_deref()).allows(victims.iter()) {
        return Err(would_not_fit());
    }
    let lost = victims
        .iter()
        .fold(0u128, |acc, c| acc.saturating_add(c.victim.lost_gpu_ms));
    if waiter.shape.nodes > 1 && judge.rule.below_floor && judge.debug_allowance.is_none() {
        // A multi-node floor order picks its moment as a whole: its allocated victims may
        // throw away no more than `interval / FLOOR_FRESH_DIVISOR` per GPU on average.
        let (gpus, allocated_lost) = victims
            .iter()
            .filter(|c| !c.victim.unallocated)
            .fold((0u64, 0u128), |(g, l), c| {
                (g + c.victim.gpus, l.saturating_add(c.victim.lost_gpu_ms))
            });
        if allocated_lost > fresh_limit_gpu_ms(cfg, FLOOR_FRESH_DIVISOR, gpus) {
            return Err(would_not_fit());
        }
    }
    let grounds = if judge.debug_allowance.is_some() && judge.rule.slack.is_some() {
        Grounds::DebugAllowance
    } else if judge.rule.below_floor {
        Grounds::BelowFloor
    } else {
        Grounds::Window
    };
    Ok(VictimPlan {
        waiter,
        grounds,
        nodes: nodes
            .iter()
            .filter_map(|&i| view.nodes.get(i).map(|n| n.name))
            .collect(),
        victims: victims.into_iter().map(|c| c.victim).collect(),
        lost_gpu_ms: lost,
    })
}

fn waiter<'s>(job_id: &'s str, allocation: &'s str, request: Request, cfg: &Config) -> Waiter<'s> {
    let mr = contract::effective_min_runtime_ms(request.min_runtime_ms, cfg);
    Waiter {
        job_id,
        allocation,
        shape: request.shape,
        min_runtime_ms: mr,
        debug: contract::is_debug(request.shape.total_gpus(), mr),
    }
}

/// Walks waiting allocated jobs in rank order and returns victims for the first one that does
/// not fit (see the module doc).
pub fn fair_share<'s>(state: &'s PreemptionState, now: i64, cfg: &Config) -> FairShare<'s> {
    let d = state.decision();
    let Some(tree) = d.budget_tree() else {
        return FairShare::NothingToDo;
    };
    // Per allocation, its path and its queued allocated jobs in queue order. The queue holds
    // each job's request, so the walk never looks a job up by id.
    let mut cursors: Vec<Option<_>> = vec![None; tree.accounts.len()];
    let mut any_waiting = false;
    for (allocation, q) in d.queues() {
        if let Some(id) = tree.allocation(allocation)
            && !q.allocated.is_empty()
        {
            cursors[id] = Some((&**allocation, q.allocated.iter()));
            any_waiting = true;
        }
    }
    if !any_waiting {
        // Nobody to make room for: no ranking or view needed.
        return FairShare::NothingToDo;
    }
    let base = ranking(d, tree, now);
    let mut walk = base.clone();
    for (id, cursor) in cursors.iter().enumerate() {
        if cursor.is_some() {
            walk.set_pending(id);
        }
    }
    let mut view = View::new(state);
    // Every choice in this pass ranks against `base`, in `tree`, at `now`: only the view and
    // the walk (which change as waiters are given GPUs) and the waiter are its own.
    let choose_here = |view: &View<'s>, walk: &FairTree<'_>, rule, leaf, w, off_limits: &[&str]| {
        choose(view, &base, walk, rule, tree, leaf, w, now, cfg, off_limits)
    };
    // Debug jobs under their allowance first, as the decision cycle takes them. One that does
    // not fit may displace work past its minimum runtime; if nothing can make room, it is met
    // again in rank order below.
    let allowance = d.debug_allowance_gpus();
    let mut debug_taken: Vec<&str> = Vec::new();
    let debug_waiters = if debug::any_queued(d) {
        debug::waiters(d, tree, &base.leaf_order())
    } else {
        Vec::new()
    };
    for dw in debug_waiters {
        let w = waiter(&dw.key.job_id, dw.allocation, dw.request, cfg);
        let protected_until = now.saturating_add(w.min_runtime_ms);
        if let Some(nodes) = view.find(w.shape, now, protected_until) {
            view.take(&nodes, w.shape.gpus_per_node);
            walk.charge(dw.leaf, charge_of(&w));
            walk.hold(dw.leaf, w.shape.total_gpus());
            debug_taken.push(w.job_id);
            continue;
        }
        if !view.could_ever_fit(w.shape, now, protected_until) {
            continue;
        }
        // With the share floor, the rank rule too, here and not in rank order: allocations
        // below their floor go first in that order, and one whose big job cannot be helped
        // would otherwise hold up a debug job that a whole node's victim can start at once.
        let floor = walk.floor_standing(dw.leaf).is_some();
        let rules: &[Rule] = if floor {
            &[Rule::Debug(allowance), Rule::Rank]
        } else {
            &[Rule::Debug(allowance)]
        };
        for &rule in rules {
            if let Ok(plan) = choose_here(&view, &walk, rule, dw.leaf, w, &[]) {
                return FairShare::Preempt(plan);
            }
        }
    }
    debug_taken.sort_unstable();
    // Set once a waiter cannot be helped: the walk goes on behind it.
    let mut behind: Option<Behind<'s>> = None;
    while let Some(leaf) = walk.next_pending_leaf() {
        let Some((allocation, (key, request))) = cursors[leaf]
            .as_mut()
            .and_then(|(a, jobs)| Some((*a, jobs.next()?)))
        else {
            walk.exhaust(leaf);
            continue;
        };
        if debug::is_candidate(request) && debug_taken.binary_search(&&*key.job_id).is_ok() {
            continue;
        }
        let w = waiter(&key.job_id, allocation, *request, cfg);
        if let Some(b) = &mut behind
            && w.shape.gpus_per_node > b.best_room
        {
            // Fits no node, even with all unallocated work gone: nothing to do for it. (The
            // bound only shrinks as the walk gives GPUs away, so it stays a bound.)
            if b.pass_over(w) {
                return FairShare::Blocked(b.take_line());
            }
            continue;
        }
        let protected_until = now.saturating_add(w.min_runtime_ms);
        if let Some(nodes) = view.find(w.shape, now, protected_until) {
            view.take(&nodes, w.shape.gpus_per_node);
            walk.charge(leaf, charge_of(&w));
            walk.hold(leaf, w.shape.total_gpus());
            continue;
        }
        if !view.could_ever_fit(w.shape, now, protected_until) {
            // Cordons or maintenance keep it off every node big enough: victims cannot help,
            // and it must not hold up the jobs behind it.
            continue;
        }
        let Some(b) = &mut behind else {
            match choose_here(&view, &walk, Rule::Rank, leaf, w, &[]) {
                Ok(plan) => return FairShare::Preempt(plan),
                Err(_) => {
                    let mut blocked = Behind::new(&view, w, *request);
                    if blocked.best_room == 0 {
                        // No unallocated work and no free GPU anywhere: nobody behind can
                        // be helped.
                        return FairShare::Blocked(blocked.take_line());
                    }
                    behind = Some(blocked);
                    continue;
                }
            }
        };
        if view.fits_without_unallocated(&b.unallocated, w.shape, now, protected_until) {
            let (shape, min_runtime_ms) = (b.request.shape, b.request.min_runtime_ms);
            let reserved = b
                .reserved
                .get_or_insert_with(|| reserve::reserved_nodes(d, shape, min_runtime_ms, now));
            let rule = Rule::UnallocatedOnly;
            if let Ok(plan) = choose_here(&view, &walk, rule, leaf, w, reserved) {
                return FairShare::Preempt(plan);
            }
        }
        if b.pass_over(w) {
            return FairShare::Blocked(b.take_line());
        }
    }
    match behind {
        Some(mut b) => FairShare::Blocked(b.take_line()),
        None => FairShare::NothingToDo,
    }
}

/// The walk past a waiter that victims cannot help (see the module doc).
struct Behind<'s> {
    /// The blocked waiter.
    first: Waiter<'s>,
    /// Its request, as the decision service reserves for it.
    request: Request,
    /// Per node, GPUs of unallocated work not yet ordered off (fixed for the call).
    unallocated: Vec<u32>,
    /// The most GPUs any node could offer with its unallocated work gone: an upper bound for
    /// the rest of the call, since the walk only gives GPUs away.
    best_room: u32,
    /// The nodes the blocked waiter's reservation will hold, once needed.
    reserved: Option<Vec<&'s str>>,
    /// Waiters behind it that did not fit so far, in rank order.
    waiters: Vec<Waiter<'s>>,
}

impl<'s> Behind<'s> {
    fn new(view: &View<'s>, first: Waiter<'s>, request: Request) -> Behind<'s> {
        let unallocated = view.unallocated_gpus();
        let best_room = view
            .nodes
            .iter()
            .zip(&unallocated)
            .map(|(n, &u)| n.available().saturating_add(u))
            .max()
            .unwrap_or(0);
        Behind {
            first,
            request,
            unallocated,
            best_room,
            reserved: None,
            waiters: Vec::new(),
        }
    }

    /// Notes a waiter behind that could not be helped; true once [`BEHIND_BLOCKED`] were.
    fn pass_over(&mut self, w: Waiter<'s>) -> bool {
        self.waiters.push(w);
        self.waiters.len() >= BEHIND_BLOCKED
    }

    /// Where the walk stopped (leaves the waiters list empty).
    fn take_line(&mut self) -> Line<'s> {
        Line {
            first: self.first,
            request: self.request,
            behind: std::mem::take(&mut self.waiters),
        }
    }
}

/// Victims for the named waiting job alone, as if it were the first in line (no GPUs given to
/// other waiters first). For operators ("what would it take to start this job?") and benches.
pub fn select_victims<'s>(
    state: &'s PreemptionState,
    job_id: &str,
    now: i64,
    cfg: &Config,
) -> Result<VictimPlan<'s>, NoVictims> {
    let d = state.decision();
    let Some((id, job)) = d.job(job_id).map(|j| (job_id, j)) else {
        return Err(NoVictims::UnknownJob(job_id.to_owned()));
    };
    if job.status != JobStatus::Queued {
        return Err(NoVictims::NotWaiting(id.to_owned()));
    }
    if contract::is_unallocated(job.request.min_runtime_ms) {
        return Err(NoVictims::Unallocated(id.to_owned()));
    }
    let tree = d.budget_tree().ok_or(NoVictims::NoBudgetTree)?;
    let leaf = tree
        .allocation(&job.allocation)
        .ok_or_else(|| NoVictims::UnknownAllocation(job.allocation.to_string()))?;
    // Borrow the id from the state so the plan lives as long as the state.
    let key = d
        .queues()
        .get(&job.allocation)
        .and_then(|q| q.allocated.keys().find(|k| *k.job_id == *id))
        .ok_or_else(|| NoVictims::NotWaiting(id.to_owned()))?;
    let base = ranking(d, tree, now);
    let view = View::new(state);
    let w = waiter(&key.job_id, &job.allocation, job.request, cfg);
    choose(
        &view,
        &base,
        &base,
        Rule::Rank,
        tree,
        leaf,
        w,
        now,
        cfg,
        &[],
    )
}
