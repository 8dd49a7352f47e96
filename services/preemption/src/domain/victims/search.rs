//! Which victims, among those the rules allow: on each usable node the cheapest set that
//! frees what a single-node waiter lacks (an exact covering knapsack, [`Cover`]), or the
//! cheapest nodes for a multi-node waiter; then an independent recount that the waiter fits
//! once they are gone, before anything is returned.
//!
//! Place in the flow: [`super::fair_share`] and [`super::select_victims`] call [`choose`] for
//! one waiter at a time; [`super::rules`] says who may be a victim at all.

use std::collections::BTreeMap;

use fairshare_decision::domain::FairTree;
use fairshare_model::budget::{AccountId, BudgetTree};
use fairshare_model::shape::Shape;

use super::super::config::Config;
use super::super::view::{View, is_ordered_off};
use super::rules::{Candidate, Cost, FloorBudget, Judge, RankRule, add};
use super::{
    Grounds, NoVictims, Rule, VictimPlan, WINDOW_FRESH_DIVISOR, Waiter, fresh_limit_gpu_ms,
};

/// The largest shortfall on one node that [`Cover`] searches. Its table is a row per GPU of
/// the shortfall, and a node short by more GPUs than any node has comes only from a log
/// holding a placement of absurd size (the decision fold takes a placement as the log gives
/// it): searched, it would allocate gigabytes and abort the service at every restart, which
/// folds the same entry again. Such a node is left out of the search.
const MAX_COVER_GPUS: u32 = 4096;

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

/// Whether `plan` breaks the average checkpoint limit of a waiter below its floor, or of one
/// at its floor that spans nodes: an order for one picks its moment as a whole, its allocated
/// victims throwing away no more than `interval / FLOOR_FRESH_DIVISOR` (below the floor,
/// whichever rule allows each; `DEEP_FLOOR_FRESH_DIVISOR` for an allocation deep below it,
/// `BEHIND_FRESH_DIVISOR` for a waiter behind a blocked one) or
/// `interval / WINDOW_FRESH_DIVISOR` (at it) per GPU on average (see those constants). A debug
/// job under its allowance takes what it needs at once (its own allocation's jobs larger than
/// the strand limit are held to their limit one by one, in [`Judge::judge`]).
///
/// A plan over the limit is noted for a retry at its allocated victims' earliest next
/// checkpoint ([`Judge::note_retry`]).
fn over_average_limit<'a, 's: 'a>(
    judge: &Judge<'_>,
    plan: impl Iterator<Item = &'a Candidate<'s>>,
) -> bool {
    let divisor = if judge.rule.below_floor && judge.debug_allowance.is_none() {
        judge.rule.floor_fresh_divisor()
    } else if judge.window_fresh && !judge.single_node {
        WINDOW_FRESH_DIVISOR
    } else {
        return false;
    };
    let (gpus, allocated_lost, next_checkpoint) = plan.filter(|c| !c.victim.unallocated).fold(
        (0u64, 0u128, None::<i64>),
        |(g, l, next), c| {
            let next = next.into_iter().chain(c.next_checkpoint_ms).min();
            (
                g + c.victim.gpus,
                l.saturating_add(c.victim.lost_gpu_ms),
                next,
            )
        },
    );
    let over = allocated_lost > fresh_limit_gpu_ms(judge.cfg, divisor, gpus);
    if over {
        judge.note_retry(next_checkpoint);
    }
    over
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
        let shortfall = node.shortfall(need);
        if shortfall == 0 {
            return Some((vec![i], Vec::new()));
        }
        if shortfall > MAX_COVER_GPUS || judge.cannot_free(node, shortfall) {
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
        // The cheapest set on a node that breaks the average limit rules that node out, not
        // the waiter: a dearer node whose victims checkpointed lately may still do.
        if best.as_ref().is_none_or(|b| cost < b.0)
            && floor.allows(chosen.iter().map(|&k| &items[k].1))
            && !over_average_limit(judge, chosen.iter().map(|&k| &items[k].1))
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
            .saturating_add(node.overcommit)
            .saturating_sub(node.free)
            .saturating_sub(node.pending);
        if judge.cannot_free(node, staying) {
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

/// Chooses victims for `waiter` of allocation `leaf` against `view`, ranking with `base`, on
/// nodes other than those `off_limits` marks (per node of `view`, from [`node_mask`]; empty
/// when every node may be used).
#[allow(clippy::too_many_arguments)]
pub(super) fn choose<'s, 't>(
    view: &View<'s>,
    base: &FairTree<'t>,
    walk: &FairTree<'t>,
    rule: Rule,
    tree: &'t BudgetTree,
    leaf: AccountId,
    waiter: Waiter<'s>,
    now: i64,
    cfg: &Config,
    off_limits: &[bool],
) -> Result<VictimPlan<'s>, NoVictims> {
    let allocated_victims = !matches!(rule, Rule::UnallocatedOnly);
    let mut rank_rule = RankRule::new(base, walk, tree, leaf, &waiter, cfg, allocated_victims);
    rank_rule.behind_blocked = matches!(rule, Rule::RankBehind);
    let window_fresh = matches!(rule, Rule::Rank | Rule::RankBehind)
        && !waiter.debug
        && rank_rule.slack.is_some()
        && !rank_rule.below_floor;
    let ranked_victims = match rule {
        Rule::Debug(_) => true,
        Rule::UnallocatedOnly => false,
        Rule::Rank | Rule::RankBehind => rank_rule.takes_any_allocation(),
    };
    let mut judge = Judge {
        rule: rank_rule,
        debug_allowance: match rule {
            Rule::Rank | Rule::RankBehind | Rule::UnallocatedOnly => None,
            Rule::Debug(allowance) => Some(allowance),
        },
        unallocated_only: matches!(rule, Rule::UnallocatedOnly),
        behind_fresh: matches!(rule, Rule::UnallocatedOnly | Rule::RankBehind) && !waiter.debug,
        single_node: waiter.shape.nodes <= 1,
        window_fresh,
        ranked_victims,
        off_limits,
        leaf,
        waiter_gpus: waiter.shape.gpus_per_node,
        now,
        cfg,
        view,
    };
    let would_not_fit = || NoVictims::WouldNotFit(waiter.job_id.to_owned());
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
    let cost = victims.iter().fold((0, 0, 0), |acc, c| add(acc, c.cost));
    // Checked on each node's set already for a single-node waiter; a multi-node plan is
    // checked as a whole here.
    if over_average_limit(&judge, victims.iter()) {
        return Err(would_not_fit());
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
        cost,
    })
}
