//! The budget trees in force over time, and allocated time integrated from them.
//!
//! Place in the flow: each valid `BudgetTreeSet` starts a new *epoch* at its event time, holding
//! the exact fraction of every account (leaf or inner) in that tree. Allocated time over any
//! span is then `sum over epochs of floor(fraction x integrated capacity during the epoch)`:
//! the fraction is constant inside an epoch, so each epoch's share is exact and floored once.
//!
//! **Rounding choice.** Allocated time is reported in whole GPU-ms: per budget epoch overlapping
//! the span, the exact rational `fraction x capacity integral` is floored, and the floors are
//! summed. The error is below 1 GPU-ms per epoch in the span, it is always downward, and it is a
//! pure function of the log, so every replay (and the brute-force model in the tests) gets the
//! same integers.

use std::collections::VecDeque;

use fairshare_model::budget::BudgetTree;
use serde::{Deserialize, Serialize};

use super::curve::Curve;
use super::exact::Frac;
use super::paths::{PathId, Paths};

/// One budget tree in force from `start` until the next epoch's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epoch {
    /// Event time the tree took effect.
    pub start: i64,
    /// Fraction of every account, indexed by [`PathId`]; ids past the end hold no claim.
    fractions: Vec<Frac>,
    /// Leaf accounts (allocations) of this tree.
    pub leaves: Vec<PathId>,
    /// Inner accounts of this tree.
    pub inner: Vec<PathId>,
}

impl Epoch {
    /// Builds an epoch from a validated tree, interning every account path.
    pub fn from_tree(start: i64, tree: &BudgetTree, paths: &mut Paths) -> Epoch {
        let mut fractions = Vec::new();
        let mut leaves = Vec::new();
        let mut inner = Vec::new();
        for (index, account) in tree.accounts.iter().enumerate() {
            let id = paths.intern(&account.path);
            let slot = id as usize;
            if fractions.len() <= slot {
                fractions.resize(slot + 1, Frac::ZERO);
            }
            fractions[slot] = Frac::from(tree.fraction(index));
            if account.is_allocation() {
                leaves.push(id);
            } else {
                inner.push(id);
            }
        }
        Epoch {
            start,
            fractions,
            leaves,
            inner,
        }
    }

    /// The fraction account `id` holds in this tree (zero when it is not in it).
    pub fn fraction(&self, id: PathId) -> Frac {
        self.fractions
            .get(id as usize)
            .copied()
            .unwrap_or(Frac::ZERO)
    }
}

/// The capacity integral of one epoch's overlap with a span, computed once per query and
/// reused for every account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index of the epoch in the history at query time.
    pub epoch: usize,
    /// Available GPU-ms during the overlap.
    pub capacity_gpu_ms: u128,
}

/// Budget epochs in time order, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetHistory {
    epochs: VecDeque<Epoch>,
}

impl BudgetHistory {
    /// Starts `epoch`; one starting at the same time as the last replaces it (the later event
    /// in stream order wins).
    pub fn push(&mut self, epoch: Epoch) {
        match self.epochs.back_mut() {
            Some(last) if epoch.start <= last.start => *last = epoch,
            _ => self.epochs.push_back(epoch),
        }
    }

    /// The tree in force after the last event, if any.
    pub fn current(&self) -> Option<&Epoch> {
        self.epochs.back()
    }

    /// Whether account `id` (leaf or inner) is in the tree in force after the last event.
    pub fn has_current(&self, id: PathId) -> bool {
        self.current()
            .is_some_and(|e| e.leaves.contains(&id) || e.inner.contains(&id))
    }

    /// Each epoch's overlap with `[from, to)` and the capacity integrated over it. Time before
    /// the first tree has no budget and yields no piece.
    pub fn pieces(&self, capacity: &Curve, from: i64, to: i64) -> Vec<Piece> {
        let mut out = Vec::new();
        if to <= from {
            return out;
        }
        // First epoch that is still in force at `from` (or the first one, if it starts later).
        let first = self
            .epochs
            .partition_point(|e| e.start <= from)
            .saturating_sub(1);
        for (index, epoch) in self.epochs.iter().enumerate().skip(first) {
            if epoch.start >= to {
                break;
            }
            let end = self
                .epochs
                .get(index + 1)
                .map_or(to, |next| next.start.min(to));
            let start = epoch.start.max(from);
            if start < end {
                out.push(Piece {
                    epoch: index,
                    capacity_gpu_ms: capacity.between(start, end),
                });
            }
        }
        out
    }

    /// Allocated GPU-ms of account `id` over the pieces of one span (see the module's
    /// rounding choice).
    pub fn allocated(&self, id: PathId, pieces: &[Piece]) -> u128 {
        pieces
            .iter()
            .filter_map(|p| {
                let frac = self.epochs.get(p.epoch)?.fraction(id);
                Some(frac.of(p.capacity_gpu_ms))
            })
            .fold(0u128, u128::saturating_add)
    }

    /// Epochs overlapping `[from, to)` (for listing the accounts a report covers).
    pub fn overlapping(&self, from: i64, to: i64) -> impl Iterator<Item = &Epoch> {
        let first = self
            .epochs
            .partition_point(|e| e.start <= from)
            .saturating_sub(1);
        self.epochs
            .iter()
            .skip(first)
            .take_while(move |e| e.start <= to)
    }

    /// Drops epochs that ended at or before `bound`, keeping the one in force at `bound`.
    pub fn evict_through(&mut self, bound: i64) {
        while self.epochs.get(1).is_some_and(|e| e.start <= bound) {
            self.epochs.pop_front();
        }
    }

    /// Epochs retained.
    pub fn len(&self) -> usize {
        self.epochs.len()
    }

    /// Whether no tree was ever set (or retained).
    pub fn is_empty(&self) -> bool {
        self.epochs.is_empty()
    }
}
