//! Reservations for high-ranked jobs that cannot fit yet, and the backfill rule that keeps them
//! safe (SPEC section 2, "Placement and preemption").
//!
//! Place in the flow: during the allocated pass of [`crate::domain::decide()`], the first
//! allocated job (in rank order) that does not fit the free GPUs, and that the uncordoned nodes
//! could ever hold, gets a reservation from `plan`. Every later placement of the cycle goes
//! through the returned `Guard`, which lets work onto the reserved GPUs only if it cannot
//! delay the reservation.
//!
//! GPUs promised to another job ([`crate::domain::promise`]) are not planned on at all: the
//! promise ends within minutes, and the next cycle plans again.
//!
//! Start time: from when running work can be reclaimed, without any run-time estimate. A job's
//! GPUs count free at the end of its minimum runtime (`start + min_runtime`, earlier if a
//! preemption deadline is set); unallocated work counts free at once (always preemptible). Not
//! exactly: a job placed and not yet started that cannot resume is no victim until it starts
//! (the preemption service's `never_to_run`), so a plan on its GPUs may start a little late;
//! its launcher starts it within moments as a rule, and the next cycle plans again.
//! Work placed earlier in the same cycle counts too (`now + min_runtime`). A node with
//! maintenance ahead is usable from the earliest time at which the job's protection would end
//! by the next window's start; cordoned nodes are never used. For a single-node job the start
//! is the earliest time any node has enough GPUs (ties: lowest node name); for a multi-node job
//! it is the earliest time at which k wholly reclaimable nodes of the right size all take it
//! together (a node free early but closing for maintenance before the job's protection would
//! end, counted from that shared start, is left out).
//!
//! Backfill rule (`Guard::allows`): later work may use a reserved node's GPUs if its own
//! protection ends no later than the reservation's start (`now + min_runtime <= start`; this
//! includes all unallocated work), because by then it can be preempted; longer work, and any
//! work of the reserved job's own allocation (which the preemption service never orders off
//! for that job), may use only the GPUs of that node that will be free at the start *beyond*
//! what is reserved.
//!
//! One reservation per cycle, like Slurm backfill's top job: a second one would need a
//! time-indexed profile of every node's free GPUs to avoid double-booking, and each cycle
//! recomputes the reservation anyway, so the top blocked job keeps its place from cycle to
//! cycle. Cost of `plan`: one pass over the holdings of the candidate nodes, O(R log R), with
//! one reused buffer.

use fairshare_model::shape::Shape;

use super::place::{Access, Pool, PoolNode};
use super::state::{RECLAIMABLE_AT_ONCE, Window};

/// GPUs held for a job that cannot fit yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation<'s> {
    /// The job the GPUs are held for.
    pub job_id: &'s str,
    /// Its allocation.
    pub allocation: &'s str,
    /// When the GPUs are expected to be reclaimable.
    pub start_ms: i64,
    /// The reserved GPUs, by node.
    pub nodes: Vec<super::decide::NodeGpus<'s>>,
}

/// The backfill rule of one reservation during the rest of the cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Guard {
    start_ms: i64,
    /// `(node index, GPUs long work may still take)`, sorted by node index.
    spare: Vec<(u32, u32)>,
    /// The reserved job's allocation (empty until [`Guard::for_allocation`]).
    allocation: String,
}

impl Guard {
    /// The guard of a reservation for a job of `allocation`.
    pub fn for_allocation(mut self, allocation: &str) -> Guard {
        allocation.clone_into(&mut self.allocation);
        self
    }

    /// Whether work protected until `protected_until`, allocated work of `allocation` or
    /// unallocated work (`None`), would hold reserved GPUs past the reservation's start.
    /// Allocated work of the reserved job's own allocation always counts as long: the
    /// preemption service never orders an allocation's work off for its own waiter (only a
    /// debug job's allowance does), so once on the reserved GPUs it would stay until it ended,
    /// however early its protection ran out. Unallocated work may always be ordered off.
    fn holds_past_start(&self, protected_until: i64, allocation: Option<&str>) -> bool {
        protected_until > self.start_ms || allocation == Some(self.allocation.as_str())
    }

    /// Whether `gpus` on node `idx` may go to work protected until `protected_until`, of
    /// `allocation` (`None`: unallocated work).
    pub fn allows(
        &self,
        idx: u32,
        gpus: u32,
        protected_until: i64,
        allocation: Option<&str>,
    ) -> bool {
        if !self.holds_past_start(protected_until, allocation) {
            return true;
        }
        match self.spare.binary_search_by_key(&idx, |&(i, _)| i) {
            Ok(i) => self.spare[i].1 >= gpus,
            Err(_) => true,
        }
    }

    /// Records that `gpus` on node `idx` went to work protected until `protected_until`, of
    /// `allocation` (`None`: unallocated work).
    pub fn commit(&mut self, idx: u32, gpus: u32, protected_until: i64, allocation: Option<&str>) {
        if !self.holds_past_start(protected_until, allocation) {
            return;
        }
        if let Ok(i) = self.spare.binary_search_by_key(&idx, |&(i, _)| i) {
            self.spare[i].1 = self.spare[i].1.saturating_sub(gpus);
        }
    }
}

/// A reservation's start, nodes and guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub start_ms: i64,
    /// A maintenance window on the reserved nodes put the start later than their GPUs are
    /// reclaimable: the job's minimum runtime would not end before the window starts.
    pub after_window: bool,
    /// `(node index, GPUs)`.
    pub nodes: Vec<(u32, u32)>,
    pub guard: Guard,
}

/// The earliest time at or after `t` at which work protected for `min_runtime_ms` can start on a
/// node with these windows (sorted by start): its protection must end by the time the next
/// window closes the node ([`Window::closes_at`]) and it cannot start while a window has the
/// node closed.
fn after_maintenance(mut t: i64, min_runtime_ms: i64, windows: &[Window]) -> i64 {
    for w in windows {
        let closes = w.closes_at();
        if closes >= t.saturating_add(min_runtime_ms) && closes > t {
            // Sorted by start: no later window can conflict either.
            break;
        }
        if w.end_ms > t {
            t = w.end_ms;
        }
    }
    t
}

/// `(reclaim time, GPUs)` held on one node, sorted by time.
type Releases = Vec<(i64, u32)>;

/// Fills `out` with everything held on node `idx`, including this cycle's placements
/// (`placed`, sorted by node index), reclaim times clamped to `now`, sorted by time. One
/// buffer is reused for every node, so planning allocates nothing per node.
fn holdings(
    out: &mut Releases,
    placed: &[(u32, u32, i64)],
    idx: u32,
    node: &PoolNode<'_>,
    now: i64,
) {
    out.clear();
    if let Some(l) = node.load {
        out.extend(l.holdings.iter().map(|(_, h)| (h.reclaim_ms, h.gpus)));
    }

    let from = placed.partition_point(|p| p.0 < idx);
    out.extend(
        placed[from..]
            .iter()
            .take_while(|p| p.0 == idx)
            .map(|&(_, g, r)| (r, g)),
    );
    for h in out.iter_mut() {
        if h.0 == RECLAIMABLE_AT_ONCE || h.0 < now {
            h.0 = now;
        }
    }
    out.sort_unstable();
}

/// GPUs of `node` free at time `t` given its holdings.
fn free_at(node: &PoolNode<'_>, held: &[(i64, u32)], t: i64) -> u32 {
    let still: u64 = held
        .iter()
        .filter(|h| h.0 > t)
        .map(|h| u64::from(h.1))
        .sum();
    u32::try_from(u64::from(node.usable()).saturating_sub(still)).unwrap_or(0)
}

/// Plans a reservation for a job of `shape` with `min_runtime_ms`, or `None` if no uncordoned
/// nodes could ever hold it.
pub(crate) fn plan(pool: &Pool<'_>, shape: Shape, min_runtime_ms: i64, now: i64) -> Option<Plan> {
    let gpn = shape.gpus_per_node;
    let k = shape.nodes.max(1) as usize;
    let mut placed = pool.placed.clone();
    placed.sort_unstable();
    let mut held = Releases::new();
    // (start, node index) per candidate node, and when its GPUs are reclaimable (before any
    // maintenance window moves its start).
    let mut candidates: Vec<(i64, u32)> = Vec::new();
    let mut ready_at: Vec<i64> = Vec::new();
    // Candidates that can start now. No start is earlier than now and nodes come in index
    // order, so once k nodes can start now they are the k earliest: the rest cannot change
    // the plan and need not be read.
    let mut ready_now = 0;
    for (i, node) in pool.nodes.iter().enumerate() {
        if ready_now == k {
            break;
        }
        let idx = u32::try_from(i).unwrap_or(u32::MAX);
        if node.access == Access::Cordoned {
            continue;
        }
        let fits = if shape.nodes <= 1 {
            node.usable() >= gpn
        } else {
            node.capacity == gpn && node.withheld == 0
        };
        if !fits {
            continue;
        }
        holdings(&mut held, &placed, idx, node, now);
        // The node's free GPUs grow as holdings are reclaimed in time order; a multi-node job
        // needs the node wholly free (gpn == capacity).
        let capacity = u64::from(node.usable());
        let need = u64::from(gpn);
        let mut still: u64 = held.iter().map(|h| u64::from(h.1)).sum();
        let mut ready = (capacity.saturating_sub(still) >= need).then_some(now);
        if ready.is_none() {
            for &(t, g) in &held {
                still = still.saturating_sub(u64::from(g));
                if capacity.saturating_sub(still) >= need {
                    ready = Some(t);
                    break;
                }
            }
        }
        let Some(ready) = ready else {
            continue;
        };
        let start = after_maintenance(ready.max(now), min_runtime_ms, node.windows);
        if start == now {
            ready_now += 1;
        }
        candidates.push((start, idx));
        ready_at.push(ready.max(now));
    }
    if candidates.len() < k {
        return None;
    }
    let ready_at_of: Vec<(u32, i64)> = candidates
        .iter()
        .zip(&ready_at)
        .map(|(&(_, idx), &ready)| (idx, ready))
        .collect();
    let (start_ms, mut candidates) = if k == 1 {
        // A node's own start takes its windows into account already.
        let first = candidates.iter().copied().min()?;
        (first.0, vec![first])
    } else {
        shared_start(pool, &candidates, &ready_at, k, min_runtime_ms)?
    };
    // When the chosen nodes' GPUs are reclaimable, windows aside (`ready_at` is parallel to
    // the candidates as first listed, and each node is listed once).
    let reclaimable_ms = candidates
        .iter()
        .filter_map(|&(_, idx)| {
            ready_at_of
                .iter()
                .find(|&&(i, _)| i == idx)
                .map(|&(_, ready)| ready)
        })
        .max()
        .unwrap_or(start_ms);
    candidates.sort_unstable();
    let mut nodes: Vec<(u32, u32)> = candidates.iter().map(|c| (c.1, gpn)).collect();
    nodes.sort_unstable();
    let spare = nodes
        .iter()
        .map(|&(idx, _)| {
            let node = &pool.nodes[idx as usize];
            holdings(&mut held, &placed, idx, node, now);
            (idx, free_at(node, &held, start_ms).saturating_sub(gpn))
        })
        .collect();
    Some(Plan {
        start_ms,
        after_window: start_ms > reclaimable_ms,
        nodes,
        guard: Guard {
            start_ms,
            spare,
            allocation: String::new(),
        },
    })
}

/// The earliest time at which `k` of the candidate nodes (`(start, node index)`, their GPUs
/// reclaimable at `ready_at`) all take a job protected for `min_runtime_ms`, and the `k` of
/// them with the earliest own starts (ties: lowest index). Each node's own start keeps clear of
/// its own windows, but a multi-node job starts on all of its nodes at the latest of their
/// starts, when an earlier node may be too close to its window: such a node is left out then,
/// and the time moves on until `k` nodes take the job together.
fn shared_start(
    pool: &Pool<'_>,
    candidates: &[(i64, u32)],
    ready_at: &[i64],
    k: usize,
    min_runtime_ms: i64,
) -> Option<(i64, Vec<(i64, u32)>)> {
    let takes_at = |i: usize, t: i64| {
        let windows = pool.nodes[candidates[i].1 as usize].windows;
        ready_at[i] <= t && after_maintenance(t, min_runtime_ms, windows) == t
    };
    let mut starts: Vec<i64> = candidates.iter().map(|c| c.0).collect();
    starts.sort_unstable();
    let mut t = starts[k - 1];
    // Each round moves `t` strictly later, to some node's next start: its first, or the end
    // of one of its windows. So the rounds are bounded by the nodes plus their windows, and
    // once every window is behind, every candidate takes the job.
    let windows: usize = candidates
        .iter()
        .map(|c| pool.nodes[c.1 as usize].windows.len())
        .sum();
    let rounds = candidates
        .len()
        .saturating_add(windows)
        .saturating_mul(2)
        .saturating_add(2);
    for _ in 0..rounds {
        let mut taking: Vec<(i64, u32)> = (0..candidates.len())
            .filter(|&i| takes_at(i, t))
            .map(|i| candidates[i])
            .collect();
        if taking.len() >= k {
            taking.sort_unstable();
            taking.truncate(k);
            return Some((t, taking));
        }
        t = (0..candidates.len())
            .filter(|&i| !takes_at(i, t))
            .map(|i| {
                let windows = pool.nodes[candidates[i].1 as usize].windows;
                after_maintenance(
                    ready_at[i].max(t.saturating_add(1)),
                    min_runtime_ms,
                    windows,
                )
            })
            .min()?;
    }
    None
}

/// The nodes a decision cycle would reserve for job `job_id` of `shape` and `min_runtime_ms` if
/// it were the cycle's first allocated job that does not fit, planned on `state` as folded
/// (before any placement of the cycle, with the GPUs promised to that job offered to it as the
/// cycle offers them); empty if no uncordoned nodes could ever hold it.
///
/// For the preemption pass: when it cannot help the first waiter that does not fit, it may
/// still order work off for the waiters behind it (unallocated work, or what the rules allow
/// while a waiter's allocation is below its share floor), but never on these nodes. The cycle
/// that follows keeps them for the blocked job, so GPUs freed there would go to the next
/// unallocated job instead of the waiter they were freed for.
pub fn reserved_nodes<'s>(
    state: &'s super::state::DecisionState,
    job_id: &str,
    shape: Shape,
    min_runtime_ms: i64,
    now: i64,
) -> Vec<&'s str> {
    let mut pool = Pool::new(state, now);
    pool.release_promise(job_id);
    plan(&pool, shape, min_runtime_ms, now)
        .map(|p| {
            p.nodes
                .iter()
                .map(|&(idx, _)| pool.nodes[idx as usize].name)
                .collect()
        })
        .unwrap_or_default()
}
