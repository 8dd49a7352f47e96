//! Fair Tree ranking of allocations (SPEC section 2, "Ranking"), exact and incremental.
//!
//! Place in the flow: at the start of a cycle [`crate::domain::decide()`] turns the folded usage
//! snapshot (plus work placed since it, see [`leaf_usage`]) into one [`LeafUsage`] per
//! allocation and builds a [`FairTree`]. The cycle then repeatedly asks for the best-ranked
//! allocation that still has waiting work ([`FairTree::next_pending_leaf`]), and after each
//! placement charges the job's projected usage ([`FairTree::charge`]), which moves only the
//! accounts on that allocation's path.
//!
//! Rules:
//! - Siblings are ordered by `subtree usage / subtree allocated time`, lowest first, where both
//!   are the sums of their leaves' values. Ratios are compared by cross-multiplication in 256
//!   bits ([`cmp_ratio`]): no floats, no overflow, no rounding.
//! - A share-0 account ranks after every sibling with a share, whatever its usage; share-0
//!   siblings among themselves go by usage, lowest first.
//! - If some sibling with a share has no allocated time (an allocation new since the snapshot,
//!   or a subtree whose ancestor has share 0 so its fraction is 0), the whole sibling group is
//!   compared by `usage / share` instead. Allocated time is proportional to the share whenever
//!   the tree did not change inside the window, so this is the same order in that case; it is
//!   chosen per group so the comparison stays a total order.
//! - Equal ratios break by account name (sibling ids are assigned in name order by
//!   [`BudgetTree`], so the id is the name order).
//! - Depth first: every leaf under a better-ranked account outranks every leaf under a worse
//!   one.
//!
//! The share floor (on unless [`DecisionState::set_share_floor`] turns it off): an
//! allocation whose allocated work holds fewer GPUs than its *floor*, its fraction of the
//! cluster's GPUs, is served before every allocation at or above its own, whatever the window
//! says; within each group the order above holds ([`FairTree::next_pending_leaf`]). GPUs
//! placed in the cycle count at once ([`FairTree::hold`]), so an allocation drops back into
//! Fair Tree order as soon as it reaches its floor. Jobs ordered off no longer count.
//! - Why: SPEC section 6 measures owed time hour by hour (`min(fraction x capacity,
//!   demand)`), while the 7-day window alone makes a team that used idle GPUs last week wait
//!   behind everyone this week, even while it holds less than its share. On msft-itp at 512
//!   GPUs, 95% of the owed time the window alone missed fell in such hours. With the floor
//!   (and its preemption rule, `fairshare_preemption::domain::victims`) owed delivery there
//!   rose from 92.3% to 99.5%; the window still decides who gets the GPUs beyond the floors
//!   (the idle capacity of others), which is what it is for.
//! - The floor moves within each clock hour by what the allocation is behind or ahead of its
//!   owed time in that hour ([`super::hourly`], [`FairTree::shift_floors`]), so a stretch
//!   below it is made up before the hour ends and an allocation that had its hour's due gives
//!   way to one that did not.
//! - The floor orders allocations; it charges nothing and leaves [`FairTree::leaf_order`],
//!   the window's ranking, as it is. Lineage: the minimum share of the Hadoop/YARN fair
//!   scheduler, and Kueue's nominal quota, served before borrowing.
//!
//! For trees where every account has its own share this is Slurm Fair Tree's order: Slurm's
//! level fairshare `S/U` (share and usage normalised over the siblings) sorts siblings by
//! `usage_i / share_i` descending-in-LF, i.e. ascending in our ratio; zero usage is Slurm's
//! infinite level fairshare (first); share 0 is Slurm's level fairshare 0 (last). Slurm merges
//! the children of exactly tied siblings; the SPEC breaks ties by name instead.
//!
//! Cost: building is O(accounts log accounts). A charge walks the leaf's path and moves each
//! account on it rightwards within its sibling group (usage only grows), O(depth x siblings)
//! at worst; finding the next leaf walks down the tree skipping exhausted subtrees (the floor
//! keeps a second count of pending leaves, those below their floor, and walks it first).
//! Nothing is re-sorted per placement.

use std::cmp::Ordering;

use fairshare_model::budget::{AccountId, BudgetTree};
use fairshare_model::exact::mul_wide;

use super::join::take_matching;
use super::state::{DecisionState, InFlight};

/// One allocation's inputs to ranking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeafUsage {
    /// GPU-ms charged in the window (plus projections).
    pub charged_gpu_ms: u128,
    /// GPU-ms of allocated time in the window.
    pub allocated_gpu_ms: u128,
    /// GPUs its allocated work holds now (placed or running, not ordered off).
    pub held_gpus: u64,
}

/// Compares `a_num / a_den` with `b_num / b_den` exactly by cross-multiplication.
///
/// Callers guarantee the denominators are non-zero (or both zero, which compares numerators
/// against zero and so ties).
pub fn cmp_ratio(a_num: u128, a_den: u128, b_num: u128, b_den: u128) -> Ordering {
    mul_wide(a_num, b_den).cmp(&mul_wide(b_num, a_den))
}

/// Ranking state for one cycle over one budget tree.
///
/// Sibling groups live in one flat array (`order`, group `g` at `start[g]..start[g + 1]`;
/// group `p` holds account `p`'s children and the last group the roots), so building or
/// cloning a tree allocates a handful of arrays, not one per account: a preemption pass
/// builds and clones several per call.
#[derive(Debug, Clone)]
pub struct FairTree<'t> {
    tree: &'t BudgetTree,
    used: Vec<u128>,
    allocated: Vec<u128>,
    /// Per group: whether its members compare by allocated time (else by share).
    by_time: Vec<bool>,
    /// Every sibling group in rank order, one after the other.
    order: Vec<AccountId>,
    /// Per group: where it starts in `order` (one more entry marks the end).
    start: Vec<usize>,
    /// Per account: its index in its sibling group's order.
    pos: Vec<usize>,
    /// Per account: leaves below (or itself) that still have waiting work.
    pending: Vec<u32>,
    leaf_pending: Vec<bool>,
    /// The share floor, when on.
    floor: Option<Floor>,
}

/// An allocation's GPUs held against its share floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorStanding {
    /// GPUs its allocated work holds (with what the cycle placed so far).
    pub held: u64,
    /// Its floor, `floor_num / floor_den` GPUs: its fraction of the cluster's GPUs, moved
    /// for the rest of the clock hour by the hourly floor ([`super::hourly`]).
    pub floor_num: u128,
    /// See `floor_num` (never 0).
    pub floor_den: u128,
}

impl FloorStanding {
    /// `held - floor`, as a fraction over `floor_den`.
    pub fn excess(&self) -> i128 {
        let held = i128::try_from(u128::from(self.held).saturating_mul(self.floor_den))
            .unwrap_or(i128::MAX);
        held.saturating_sub(i128::try_from(self.floor_num).unwrap_or(i128::MAX))
    }
}

/// The share floor: an allocation holding fewer GPUs than its fraction of the cluster goes
/// before every allocation that holds its fraction or more.
#[derive(Debug, Clone)]
struct Floor {
    /// Per allocation: GPUs held now, plus what the cycle placed.
    held: Vec<u64>,
    /// Per allocation: its fraction of the cluster's GPUs, as `(num, den)`, moved by
    /// [`FairTree::shift_floors`].
    share: Vec<(u128, u128)>,
    /// Per account: leaves below (or itself) under their floor that still have waiting work.
    pending: Vec<u32>,
}

impl Floor {
    fn below(&self, leaf: AccountId) -> bool {
        let (num, den) = self.share[leaf];
        u128::from(self.held[leaf]).saturating_mul(den) < num
    }
}

/// Whether a sibling group can be compared by allocated time: every member with a share has
/// some (and at least one member has a share).
fn group_by_time(group: &[AccountId], tree: &BudgetTree, allocated: &[u128]) -> bool {
    let mut any = false;
    for &id in group {
        if tree.accounts[id].share > 0 {
            if allocated[id] == 0 {
                return false;
            }
            any = true;
        }
    }
    any
}

impl<'t> FairTree<'t> {
    /// Ranks `tree` with `leaves[id]` for each allocation `id` (entries for inner accounts and
    /// missing entries count as zero).
    pub fn new(tree: &'t BudgetTree, leaves: &[LeafUsage]) -> FairTree<'t> {
        let n = tree.accounts.len();
        let mut used = vec![0u128; n];
        let mut allocated = vec![0u128; n];
        for (id, account) in tree.accounts.iter().enumerate() {
            if account.is_allocation()
                && let Some(l) = leaves.get(id)
            {
                used[id] = l.charged_gpu_ms;
                allocated[id] = l.allocated_gpu_ms;
            }
        }
        // Children have larger ids than their parent, so one reverse pass sums every subtree.
        for id in (0..n).rev() {
            if let Some(p) = tree.accounts[id].parent {
                used[p] = used[p].saturating_add(used[id]);
                allocated[p] = allocated[p].saturating_add(allocated[id]);
            }
        }
        let groups = || {
            tree.accounts
                .iter()
                .map(|a| a.children.as_slice())
                .chain(std::iter::once(tree.roots.as_slice()))
        };
        let mut order = Vec::with_capacity(n);
        let mut start = Vec::with_capacity(n + 2);
        let mut by_time = Vec::with_capacity(n + 1);
        for group in groups() {
            start.push(order.len());
            order.extend_from_slice(group);
            by_time.push(group_by_time(group, tree, &allocated));
        }
        start.push(order.len());
        let mut rank = FairTree {
            tree,
            used,
            allocated,
            by_time,
            order,
            start,
            pos: vec![0; n],
            pending: vec![0; n],
            leaf_pending: vec![false; n],
            floor: None,
        };
        for g in 0..=n {
            rank.sort_group(g);
        }
        rank
    }

    /// Turns the share floor on for a cluster of `capacity_gpus` GPUs, with `leaves[id]`'s
    /// held GPUs. Call before marking any allocation pending.
    pub fn with_floor(mut self, leaves: &[LeafUsage], capacity_gpus: u64) -> Self {
        let n = self.tree.accounts.len();
        let mut held = vec![0u64; n];
        let mut share = vec![(0u128, 1u128); n];
        let fractions = self.tree.fractions();
        for (id, account) in self.tree.accounts.iter().enumerate() {
            if account.is_allocation() {
                held[id] = leaves.get(id).map_or(0, |l| l.held_gpus);
                let f = fractions[id];
                share[id] = (f.num.saturating_mul(u128::from(capacity_gpus)), f.den);
            }
        }
        self.floor = Some(Floor {
            held,
            share,
            pending: vec![0; n],
        });
        self
    }

    /// Moves each allocation's floor by what it is behind or ahead of its owed time in the
    /// open clock hour ([`super::hourly`]; nothing with the hourly floor off). Call before
    /// marking any allocation pending.
    pub fn shift_floors(&mut self, state: &DecisionState, now_ms: i64) {
        let tree = self.tree;
        let Some(f) = self.floor.as_mut() else {
            return;
        };
        let share = &f.share;
        let mut listed = Vec::new();
        let allocations = ids_in_path_order(state, tree, &mut listed)
            .iter()
            .filter(|&&id| share[id].0 > 0)
            .map(|&id| {
                let (num, den) = share[id];
                let milli = num.saturating_mul(1000) / den.max(1);
                (
                    id,
                    tree.accounts[id].path.as_str(),
                    i128::try_from(milli).unwrap_or(i128::MAX),
                )
            });
        for (id, shift) in state.hourly_floor_shifts(allocations, now_ms) {
            // floor + shift / 1000 = (num x 1000 + shift x den) / (den x 1000), exactly.
            let (num, den) = f.share[id];
            let scaled = num.saturating_mul(1000);
            let moved = shift.unsigned_abs().saturating_mul(den);
            let num = if shift >= 0 {
                scaled.saturating_add(moved)
            } else {
                scaled.saturating_sub(moved)
            };
            f.share[id] = (num, den.saturating_mul(1000));
        }
    }

    /// Whether allocation `leaf` holds fewer GPUs than its share of the cluster (always false
    /// with the floor off).
    pub fn below_floor(&self, leaf: AccountId) -> bool {
        self.floor.as_ref().is_some_and(|f| f.below(leaf))
    }

    /// Allocation `leaf`'s standing against its share floor; `None` with the floor off.
    pub fn floor_standing(&self, leaf: AccountId) -> Option<FloorStanding> {
        let f = self.floor.as_ref()?;
        let (num, den) = f.share[leaf];
        Some(FloorStanding {
            held: f.held[leaf],
            floor_num: num,
            floor_den: den,
        })
    }

    /// Counts `gpus` more held by allocation `leaf`.
    pub fn hold(&mut self, leaf: AccountId, gpus: u64) {
        let pending = self.leaf_pending[leaf];
        let tree = self.tree;
        let Some(f) = self.floor.as_mut() else {
            return;
        };
        let was = f.below(leaf);
        f.held[leaf] = f.held[leaf].saturating_add(gpus);
        if pending && was && !f.below(leaf) {
            let mut cur = Some(leaf);
            while let Some(id) = cur {
                f.pending[id] = f.pending[id].saturating_sub(1);
                cur = tree.accounts[id].parent;
            }
        }
    }

    /// The group of the roots.
    fn roots(&self) -> usize {
        self.tree.accounts.len()
    }

    /// The group `id` belongs to: its parent's children, or the roots.
    fn group_of(&self, id: AccountId) -> usize {
        self.tree.accounts[id].parent.unwrap_or(self.roots())
    }

    /// Group `g` in rank order.
    fn group(&self, g: usize) -> &[AccountId] {
        &self.order[self.start[g]..self.start[g + 1]]
    }

    fn sort_group(&mut self, g: usize) {
        let (from, to) = (self.start[g], self.start[g + 1]);
        let by_time = self.by_time[g];
        // Taken out (no allocation) so the comparison can read the rest of `self`.
        let mut order = std::mem::take(&mut self.order);
        let group = &mut order[from..to];
        group.sort_by(|&a, &b| self.cmp_siblings(a, b, by_time));
        for (i, &id) in group.iter().enumerate() {
            self.pos[id] = i;
        }
        self.order = order;
    }

    /// Sibling order: accounts with a share first, then lower ratio, then name.
    fn cmp_siblings(&self, a: AccountId, b: AccountId, by_time: bool) -> Ordering {
        self.cmp_sibling_values(a, self.used[a], b, self.used[b], by_time)
    }

    /// [`Self::cmp_siblings`] with the usages given.
    fn cmp_sibling_values(
        &self,
        a: AccountId,
        used_a: u128,
        b: AccountId,
        used_b: u128,
        by_time: bool,
    ) -> Ordering {
        let (sa, sb) = (self.tree.accounts[a].share, self.tree.accounts[b].share);
        (sa == 0)
            .cmp(&(sb == 0))
            .then_with(|| {
                if sa == 0 {
                    used_a.cmp(&used_b)
                } else if by_time {
                    cmp_ratio(used_a, self.allocated[a], used_b, self.allocated[b])
                } else {
                    cmp_ratio(used_a, u128::from(sa), used_b, u128::from(sb))
                }
            })
            // Sibling ids follow name order (see the module doc).
            .then_with(|| a.cmp(&b))
    }

    /// How siblings `a` and `b` would compare (less: `a` ranks first) if `a`'s subtree were
    /// charged `charge_a` more: the order [`Self::charge`] would leave them in, without
    /// copying the tree to charge it. Both must be siblings, `b` off `a`'s path.
    pub fn cmp_siblings_charged(&self, a: AccountId, b: AccountId, charge_a: u128) -> Ordering {
        let used_a = self.used[a].saturating_add(charge_a);
        let by_time = self.by_time[self.group_of(a)];
        self.cmp_sibling_values(a, used_a, b, self.used[b], by_time)
    }

    /// Usage (with projections so far) of account `id`'s subtree.
    pub fn used(&self, id: AccountId) -> u128 {
        self.used[id]
    }

    /// Allocated time of account `id`'s subtree.
    pub fn allocated(&self, id: AccountId) -> u128 {
        self.allocated[id]
    }

    /// Every allocation, best ranked first.
    pub fn leaf_order(&self) -> Vec<AccountId> {
        let mut out = Vec::new();
        let mut stack: Vec<AccountId> = self.group(self.roots()).iter().rev().copied().collect();
        while let Some(id) = stack.pop() {
            let children = self.group(id);
            if children.is_empty() {
                out.push(id);
            } else {
                stack.extend(children.iter().rev());
            }
        }
        out
    }

    /// Marks allocation `leaf` as having waiting work.
    pub fn set_pending(&mut self, leaf: AccountId) {
        if self.leaf_pending[leaf] {
            return;
        }
        self.leaf_pending[leaf] = true;
        let below = self.below_floor(leaf);
        let mut cur = Some(leaf);
        while let Some(id) = cur {
            self.pending[id] += 1;
            if below && let Some(f) = self.floor.as_mut() {
                f.pending[id] += 1;
            }
            cur = self.tree.accounts[id].parent;
        }
    }

    /// Marks allocation `leaf` as having no more waiting work this cycle.
    pub fn exhaust(&mut self, leaf: AccountId) {
        if !self.leaf_pending[leaf] {
            return;
        }
        self.leaf_pending[leaf] = false;
        let below = self.below_floor(leaf);
        let mut cur = Some(leaf);
        while let Some(id) = cur {
            self.pending[id] = self.pending[id].saturating_sub(1);
            if below && let Some(f) = self.floor.as_mut() {
                f.pending[id] = f.pending[id].saturating_sub(1);
            }
            cur = self.tree.accounts[id].parent;
        }
    }

    /// The best-ranked allocation that still has waiting work.
    pub fn next_pending_leaf(&self) -> Option<AccountId> {
        if let Some(f) = &self.floor
            && let Some(leaf) = self.best_pending(&f.pending)
        {
            return Some(leaf);
        }
        self.best_pending(&self.pending)
    }

    fn best_pending(&self, pending: &[u32]) -> Option<AccountId> {
        let mut group = self.group(self.roots());
        loop {
            let id = *group.iter().find(|&&c| pending[c] > 0)?;
            let children = self.group(id);
            if children.is_empty() {
                return Some(id);
            }
            group = children;
        }
    }

    /// Charges `gpu_ms` of projected usage to allocation `leaf` and its ancestors, and moves
    /// each of them to its new place among its siblings.
    pub fn charge(&mut self, leaf: AccountId, gpu_ms: u128) {
        if gpu_ms == 0 {
            return;
        }
        let mut cur = Some(leaf);
        while let Some(id) = cur {
            self.used[id] = self.used[id].saturating_add(gpu_ms);
            cur = self.tree.accounts[id].parent;
        }
        // Each account on the path sits in a different sibling group, and the order inside a
        // group depends only on its members' values, so one pass per group suffices.
        let mut cur = Some(leaf);
        while let Some(id) = cur {
            self.move_right(id);
            cur = self.tree.accounts[id].parent;
        }
    }

    /// Usage of `id` only grew: slide it right past every sibling now ranked before it.
    fn move_right(&mut self, id: AccountId) {
        let g = self.group_of(id);
        let (from, to) = (self.start[g], self.start[g + 1]);
        let by_time = self.by_time[g];
        // Taken out (no allocation) so the comparison can read the rest of `self`.
        let mut order = std::mem::take(&mut self.order);
        let group = &mut order[from..to];
        let mut i = self.pos[id];
        while i + 1 < group.len() && self.cmp_siblings(id, group[i + 1], by_time).is_gt() {
            group[i] = group[i + 1];
            self.pos[group[i]] = i;
            i += 1;
        }
        group[i] = id;
        self.pos[id] = i;
        self.order = order;
    }
}

/// The cycle's ranking for `state` at `now_ms`: Fair Tree over [`leaf_usage`], with the share
/// floor when the state has it on, over the GPUs of every registered node.
pub fn ranking<'t>(state: &DecisionState, tree: &'t BudgetTree, now_ms: i64) -> FairTree<'t> {
    let usage = leaf_usage(state, tree, now_ms);
    let fair = FairTree::new(tree, &usage);
    if state.share_floor() {
        let mut fair = fair.with_floor(&usage, state.total_gpus());
        fair.shift_floors(state, now_ms);
        fair
    } else {
        fair
    }
}

/// The Fair Tree order of every allocation of `tree` for the given usage, best first.
pub fn fair_tree_order(tree: &BudgetTree, leaves: &[LeafUsage]) -> Vec<AccountId> {
    FairTree::new(tree, leaves).leaf_order()
}

/// The allocations of `tree` in path order.
pub(crate) fn allocations_by_path(tree: &BudgetTree) -> Vec<AccountId> {
    tree.allocation_paths()
        .filter_map(|p| tree.allocation(p))
        .collect()
}

/// Ranking inputs for every account id of `tree` from the state's usage snapshot, plus the
/// projected usage of work placed and not yet fully counted by that snapshot.
///
/// The snapshot counts charged time up to its window end `W`. Each placed allocated job adds
/// `gpus x (max(start + min_runtime, now) - max(start, W))`: what it ran since `W` plus what
/// is left of its protected minimum runtime. Jobs placed in this very cycle are charged the
/// same way (`gpus x min_runtime`) by [`FairTree::charge`], so a job placed one cycle ago and
/// one placed now weigh alike and consecutive cycles between snapshots do not all favour the
/// same allocation. Without a snapshot, `W` is minus infinity (everything counts from start).
pub fn leaf_usage(state: &DecisionState, tree: &BudgetTree, now_ms: i64) -> Vec<LeafUsage> {
    match state.usage.as_ref().map(|u| u.window_end_ms) {
        Some(window_end)
            if window_end <= now_ms
                && state.flight.shortest_min_runtime().is_none_or(|m| m >= 0) =>
        {
            leaf_usage_recent(state, tree, now_ms, window_end)
        }
        // Before the first snapshot, or with a window end ahead of `now` (another clock), or a
        // negative minimum runtime (never accepted): every run is charged one by one.
        _ => leaf_usage_by_run(state, tree, now_ms),
    }
}

/// The allocations of `tree` in path order: the state's own list when `tree` is its tree.
fn ids_in_path_order<'a>(
    state: &'a DecisionState,
    tree: &BudgetTree,
    listed: &'a mut Vec<AccountId>,
) -> &'a [AccountId] {
    if state.tree.as_ref().is_some_and(|t| std::ptr::eq(t, tree)) {
        &state.allocations_by_path
    } else {
        *listed = allocations_by_path(tree);
        listed
    }
}

/// What one run charges beyond the snapshot's window end `window_end` at `now_ms`: what it
/// ran since then plus what is left of its minimum runtime (see [`leaf_usage`]).
fn run_charge(run: &InFlight, window_end: i64, now_ms: i64) -> u128 {
    let from = run.start_ms.max(window_end);
    let to = run.start_ms.saturating_add(run.min_runtime_ms).max(now_ms);
    // Ordered off: charged to its grace deadline at most.
    let to = run.deadline_ms.map_or(to, |deadline| to.min(deadline));
    // Under 2^63 ms times under 2^64 GPUs: the product fits in a u128 (one widening multiply,
    // no overflow check needed).
    let ms = u64::try_from(to.saturating_sub(from)).unwrap_or(0);
    u128::from(ms) * u128::from(run.gpus)
}

/// [`leaf_usage`] with a snapshot whose window end `window_end` is not after `now_ms` and no
/// negative minimum runtime in flight. A run that started at or before `settled`, the earlier
/// of the window end and `now` minus the longest minimum runtime in flight, charges exactly
/// `gpus x (now - window end)`: it started before the window end and its minimum runtime is
/// over. So each allocation is charged its GPU total times that, plus the runs started since
/// `settled` one by one ([`FlightIndex`](super::flight::FlightIndex)). The same sums as
/// [`leaf_usage_by_run`], in integers.
fn leaf_usage_recent(
    state: &DecisionState,
    tree: &BudgetTree,
    now_ms: i64,
    window_end: i64,
) -> Vec<LeafUsage> {
    let since_window_end = u128::try_from(i128::from(now_ms) - i128::from(window_end)).unwrap_or(0);
    let longest = state.flight.longest_min_runtime().unwrap_or(0);
    let settled = window_end.min(now_ms.saturating_sub(longest));
    let mut flights = state.flight.by_allocation.iter().peekable();
    from_snapshot(state, tree, |path, leaf| {
        let Some(flight) = take_matching(&mut flights, path) else {
            return;
        };
        let mut recent_gpus = 0u128;
        let mut recent_charge = 0u128;
        for run in flight.started_after(settled) {
            recent_gpus += u128::from(run.gpus);
            recent_charge = recent_charge.saturating_add(run_charge(run, window_end, now_ms));
        }
        // A settled run ordered off whose deadline passed is charged to its deadline only.
        let past_deadlines: u128 = flight
            .stopping
            .values()
            .filter(|run| run.start_ms <= settled)
            .filter_map(|run| {
                let deadline = run.deadline_ms.filter(|d| *d < now_ms)?;
                let ms = now_ms.saturating_sub(deadline.max(window_end));
                Some(u128::from(u64::try_from(ms).unwrap_or(0)) * u128::from(run.gpus))
            })
            .fold(0, u128::saturating_add);
        let settled_charge = flight
            .gpus
            .saturating_sub(recent_gpus)
            .saturating_mul(since_window_end)
            .saturating_sub(past_deadlines);
        leaf.charged_gpu_ms = leaf
            .charged_gpu_ms
            .saturating_add(settled_charge)
            .saturating_add(recent_charge);
        leaf.held_gpus = flight.held;
    })
}

/// [`leaf_usage`] charging every run in flight one by one.
pub(crate) fn leaf_usage_by_run(
    state: &DecisionState,
    tree: &BudgetTree,
    now_ms: i64,
) -> Vec<LeafUsage> {
    let window_end = state.usage.as_ref().map_or(i64::MIN, |u| u.window_end_ms);
    let mut in_flight = state.in_flight.iter().peekable();
    from_snapshot(state, tree, |path, leaf| {
        let Some(runs) = take_matching(&mut in_flight, path) else {
            return;
        };
        for (_, run) in runs.iter() {
            leaf.charged_gpu_ms = leaf
                .charged_gpu_ms
                .saturating_add(run_charge(run, window_end, now_ms));
            if !run.stopping() {
                leaf.held_gpus = leaf.held_gpus.saturating_add(run.gpus);
            }
        }
    })
}

/// One [`LeafUsage`] per account id of `tree`: each allocation's row of the state's usage
/// snapshot and what its runs that ended since the snapshot's window end ran beyond it, plus
/// what `add` charges for its work in flight. `add` is called once per
/// allocation in path order (paths, the snapshot's rows and the running work are all sorted by
/// path: they are walked in lockstep rather than searched by path).
fn from_snapshot(
    state: &DecisionState,
    tree: &BudgetTree,
    mut add: impl FnMut(&str, &mut LeafUsage),
) -> Vec<LeafUsage> {
    let mut out = vec![LeafUsage::default(); tree.accounts.len()];
    let mut snapshot = state
        .usage
        .as_ref()
        .map(|u| u.by_allocation.iter().peekable());
    let window_end = state.usage.as_ref().map(|u| u.window_end_ms);
    let mut ended = state.ended.iter().peekable();
    let mut listed = Vec::new();
    for &id in ids_in_path_order(state, tree, &mut listed) {
        let path = tree.accounts[id].path.as_str();
        let mut leaf = LeafUsage::default();
        if let Some(u) = snapshot.as_mut().and_then(|s| take_matching(s, path)) {
            leaf.charged_gpu_ms = u128::from(u.charged_gpu_ms);
            leaf.allocated_gpu_ms = u128::from(u.allocated_gpu_ms);
        }
        if let Some(runs) = take_matching(&mut ended, path) {
            debug_assert_eq!(
                Some(runs.charge()),
                window_end.map(|w| runs
                    .runs()
                    .iter()
                    .map(|r| r.charge_beyond(w))
                    .fold(0, u128::saturating_add)),
                "the ended runs' sum is kept for the held window end"
            );
            leaf.charged_gpu_ms = leaf.charged_gpu_ms.saturating_add(runs.charge());
        }
        add(path, &mut leaf);
        out[id] = leaf;
    }
    out
}
