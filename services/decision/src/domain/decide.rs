//! One decision cycle: `decide(state, now) -> Decision`, and the `JobPlaced` events it yields.
//!
//! Place in the flow: the shell folds the log into a [`DecisionState`], calls [`decide`] with
//! the time it runs at (a value: the simulator drives it virtually), publishes
//! [`Decision::events`] with the cycle number, and shows [`Decision::waiting`] to operators.
//! `decide` reads the state only, so re-running it on the log prefix named by a decision's
//! basis and with its `computed_at_ms` re-derives the same decision, byte for byte.
//!
//! A [`Decision`] borrows its job, allocation and node names from the state it was computed
//! from: a cycle with 100,000 waiting jobs then copies no string and touches no reference
//! count (cloning one `Arc` per waiting job was most of the cost at that size). The events it
//! yields are owned; fold them into the state after the decision is dropped.
//!
//! A cycle:
//! 1. Rank allocations by Fair Tree ([`crate::domain::rank`]) from the usage snapshot plus work
//!    placed since.
//! 2. Debug pass: debug jobs under their allocation's allowance ([`crate::domain::debug`])
//!    are placed first where they fit, charging like any placement; those that do not fit
//!    are met again in step 3.
//! 3. Allocated pass: take waiting allocated jobs in rank order (best allocation with waiting
//!    work, those below their share floor first ([`crate::domain::rank`]), then within it by
//!    priority, submit time, id) and place each where it fits
//!    ([`crate::domain::place`]). Each placement charges `gpus x min_runtime` to its allocation
//!    before the next pick, so the ranking moves as the cycle goes. The first job that does not
//!    fit gets the cycle's reservation ([`crate::domain::reserve`]); later work respects it.
//! 4. Unallocated pass: jobs with minimum runtime 0 fill what is left, allocations in their
//!    rank order after step 3, each allocation's jobs in queue order. They charge nothing, so
//!    the order does not move during this pass.
//! 5. Every job not placed gets a [`WaitReason`].
//!
//! Determinism: every collection iterated is ordered (`BTreeMap`, sorted `Vec`), ties always
//! break on names or ids, and no clock is read.

use std::collections::BTreeMap;
use std::fmt;

use fairshare_events::pb;
use fairshare_model::timestamp::utc;
use fairshare_model::words::Gpus;

use super::debug;
use super::place::{Access, Found, Pool};
use super::rank;
use super::reserve::{self, Guard, Reservation};
use super::state::{DecisionState, QueueKey, RECLAIMABLE_AT_ONCE, Request};

/// GPUs on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeGpus<'s> {
    /// Node name.
    pub node: &'s str,
    /// GPUs on it.
    pub gpus: u32,
}

/// A job to start now, on these GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement<'s> {
    /// The job.
    pub job_id: &'s str,
    /// Its allocation.
    pub allocation: &'s str,
    /// Whether it is unallocated work (minimum runtime 0).
    pub unallocated: bool,
    /// Where it runs, by node name.
    pub nodes: Vec<NodeGpus<'s>>,
}

/// Why a job was left waiting: a stable code ([`WaitReason::code`]) for programs, a sentence
/// (`Display`) for people. The sentence is built only when asked for, so a cycle with 100,000
/// waiting jobs formats nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitReason<'s> {
    /// GPUs it could use were free at the start of the cycle, but not once the jobs met
    /// before it in the cycle were placed: allocations ranked ahead (below their share floor
    /// first, then by the window), debug jobs under their allowance, its own allocation's jobs
    /// of higher priority or submitted earlier, and for unallocated work all allocated work.
    BelowOthersInRank {
        /// Jobs placed before it in the cycle, of its own allocation and allocated (0 for
        /// unallocated work).
        own_allocation: u32,
        /// The other jobs placed before it in the cycle.
        others: u32,
        /// Whether it is unallocated work.
        unallocated: bool,
    },
    /// Not enough free GPUs of its shape on the nodes that take work.
    TooLargeForFreeNodes {
        /// Nodes it needs.
        nodes: u32,
        /// GPUs per node it needs.
        gpus_per_node: u32,
        /// The most free GPUs on one open node at the start of the cycle.
        largest_free: u32,
    },
    /// It holds the cycle's reservation and starts when the reserved GPUs free up.
    ReservationPending {
        /// When the reserved GPUs are expected to be reclaimable.
        start_ms: i64,
        /// Whether that is the cycle's own time: the work there is past its minimum runtimes
        /// already, and only the preemption rules, or its end, decide when it goes.
        reclaimable_now: bool,
        /// A maintenance window on the reserved nodes sets the start, not the work on them:
        /// the job's minimum runtime would not end before the window begins.
        after_window: bool,
        /// Some reserved GPUs can only come from work of the job's own allocation, which the
        /// preemption service never orders off for it: the start is when that work ends, not
        /// `start_ms` (the end of its minimum runtimes). Worked out only with reasons.
        own_allocation_work: bool,
    },
    /// It would fit now, but only on GPUs reserved for a higher-ranked job, and its minimum
    /// runtime ends after that reservation's start, or it is of the reserved job's own
    /// allocation (whose work there would stay until it ended: the preemption service never
    /// orders an allocation's work off for its own waiter).
    BlockedByReservation {
        /// The job holding the reservation.
        reserved_for: &'s str,
        /// The reservation's start.
        start_ms: i64,
        /// The waiting job is of the reserved job's allocation: kept off whatever its minimum
        /// runtime.
        same_allocation: bool,
    },
    /// It would fit only on GPUs a preemption freed for another waiting job, which are held
    /// for that job ([`crate::domain::promise`]).
    PromisedToAnother {
        /// The waiting job they are held for (the one whose hold ends first, when several
        /// are).
        holder: &'s str,
        /// Until when they are held for it at the latest (it may start sooner).
        until_ms: i64,
        /// How many other waiting jobs hold GPUs the same way.
        others: u32,
    },
    /// Preemption is making room for it: work was ordered off for it, and what that work
    /// frees is held for it alone ([`crate::domain::promise`]) until `until_ms`.
    RoomBeingMade {
        /// Until when the freed GPUs are held for it (a minute past its victims' latest grace
        /// deadline).
        until_ms: i64,
    },
    /// It would fit on free GPUs of cordoned nodes only.
    NodesCordoned,
    /// It would fit only on nodes whose maintenance starts before its minimum runtime ends (or
    /// is in progress).
    MaintenanceWindow,
    /// No registered node, cordoned or not, could ever hold it: nodes it was submitted against
    /// were removed or registered again with fewer GPUs since. It waits until nodes that hold
    /// it are registered, or it is cancelled.
    NeverFits {
        /// Nodes it needs.
        nodes: u32,
        /// GPUs per node it needs.
        gpus_per_node: u32,
        /// The largest node's GPUs (single-node jobs), or how many nodes of exactly
        /// `gpus_per_node` GPUs the cluster has (multi-node jobs).
        have: u32,
    },
    /// Its allocation is not a leaf of the budget tree in force.
    UnknownAllocation,
    /// No budget tree has been set for the cluster.
    NoBudgetTree,
}

impl WaitReason<'_> {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            WaitReason::BelowOthersInRank { .. } => "below_others_in_rank",
            WaitReason::TooLargeForFreeNodes { .. } => "too_large_for_free_nodes",
            WaitReason::NeverFits { .. } => "never_fits_cluster",
            WaitReason::ReservationPending { .. } => "reservation_pending",
            WaitReason::BlockedByReservation { .. } => "blocked_by_reservation",
            WaitReason::PromisedToAnother { .. } => "promised_to_another_job",
            WaitReason::RoomBeingMade { .. } => "room_being_made",
            WaitReason::NodesCordoned => "nodes_cordoned",
            WaitReason::MaintenanceWindow => "maintenance_window",
            WaitReason::UnknownAllocation => "unknown_allocation",
            WaitReason::NoBudgetTree => "no_budget_tree",
        }
    }
}

impl fmt::Display for WaitReason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::BelowOthersInRank {
                own_allocation,
                others,
                unallocated,
            } => {
                let placed = own_allocation.saturating_add(*others);
                if placed == 0 {
                    // Not seen: only placements take free GPUs within a cycle.
                    return f.write_str(
                        "GPUs that fit it were free at the start of the cycle, but not when it \
                         was met",
                    );
                }
                f.write_str(
                    "GPUs that fit it were free at the start of the cycle, but not once the ",
                )?;
                if *unallocated {
                    write!(
                        f,
                        "{} placed before it in the cycle had theirs (allocated work goes first, \
                         unallocated work fills what is left)",
                        jobs(placed)
                    )
                } else if *others == 0 {
                    write!(
                        f,
                        "{} of its own allocation placed before it in the cycle had theirs \
                         (higher priority, then earlier submission)",
                        jobs(*own_allocation)
                    )
                } else if *own_allocation == 0 {
                    write!(
                        f,
                        "{} placed before it in the cycle had theirs: allocations ranked ahead \
                         of its own (below their share floor first, then by window usage) and \
                         debug jobs under their allowance",
                        jobs(*others)
                    )
                } else {
                    write!(
                        f,
                        "{} placed before it in the cycle had theirs: {} of its own allocation \
                         (higher priority, then earlier submission), the rest of allocations \
                         ranked ahead of its own (below their share floor first, then by \
                         window usage) or debug jobs under their allowance",
                        jobs(placed),
                        *own_allocation
                    )
                }
            }
            WaitReason::TooLargeForFreeNodes {
                nodes,
                gpus_per_node,
                largest_free,
            } => {
                if *nodes <= 1 {
                    let s = if *gpus_per_node == 1 { "" } else { "s" };
                    write!(
                        f,
                        "needs {gpus_per_node} GPU{s} on one node; the most free on any node is {largest_free}"
                    )
                } else {
                    write!(
                        f,
                        "needs {nodes} wholly free nodes of {gpus_per_node} GPUs; not enough are free"
                    )
                }
            }
            WaitReason::NeverFits {
                nodes,
                gpus_per_node,
                have,
            } => {
                let need = if *nodes <= 1 {
                    format!(
                        "{} on one node, and the largest node has {have}",
                        Gpus(u64::from(*gpus_per_node))
                    )
                } else {
                    format!(
                        "{nodes} whole nodes of {gpus_per_node} GPUs, and the cluster has {have}"
                    )
                };
                write!(
                    f,
                    "can never start on the cluster as it is now: needs {need} (nodes were removed \
                     or registered with fewer GPUs since it was submitted); cancel it, or register \
                     nodes that hold it"
                )
            }
            WaitReason::ReservationPending {
                after_window: false,
                own_allocation_work: true,
                ..
            } => f.write_str(
                "holds a reservation; some of the work on its GPUs is its own allocation's, \
                 which is never ordered off for a job of the same allocation: it starts as that \
                 work ends",
            ),
            WaitReason::ReservationPending {
                reclaimable_now: true,
                after_window: false,
                ..
            } => f.write_str(
                "holds a reservation; the work on its GPUs is past its minimum runtimes \
                 already: it goes for this job when the preemption rules let it, and otherwise \
                 as it ends",
            ),
            WaitReason::ReservationPending {
                start_ms,
                after_window: true,
                ..
            } => write!(
                f,
                "holds a reservation from {}: a maintenance window on the reserved nodes sets \
                 that time (its minimum runtime would not end before the window starts), not \
                 the work on them",
                utc(*start_ms)
            ),
            WaitReason::ReservationPending { start_ms, .. } => write!(
                f,
                "holds a reservation; the work on its GPUs can be reclaimed from {} at the \
                 earliest (once its minimum runtimes end), if the preemption rules let it go \
                 for this job, and otherwise as it ends",
                utc(*start_ms)
            ),
            WaitReason::BlockedByReservation {
                reserved_for,
                start_ms,
                same_allocation: false,
            } => write!(
                f,
                "would fit only on GPUs reserved for job {reserved_for} from {}, and its minimum runtime ends later",
                utc(*start_ms)
            ),
            WaitReason::BlockedByReservation {
                reserved_for,
                start_ms,
                same_allocation: true,
            } => write!(
                f,
                "would fit only on GPUs reserved for job {reserved_for} of its own allocation from \
                 {}: work of that allocation would keep them until it ended (nothing is ordered \
                 off for a waiter of its own allocation), whatever its minimum runtime",
                utc(*start_ms)
            ),
            // Not met: the start summaries say a promise withholds what it would need.
            WaitReason::PromisedToAnother { holder: "", .. } => f.write_str(
                "would fit only on GPUs a preemption freed for another waiting job; they are held \
                 for that job until it starts, at most a minute past its victims' grace deadlines",
            ),
            WaitReason::PromisedToAnother {
                holder,
                until_ms,
                others,
            } => {
                write!(
                    f,
                    "would fit only on GPUs a preemption freed for waiting job {holder}; they are \
                     held for it until it starts, {} at the latest",
                    utc(*until_ms)
                )?;
                if *others > 0 {
                    let s = if *others == 1 { "" } else { "s" };
                    write!(f, " ({others} other waiting job{s} hold GPUs the same way)")?;
                }
                Ok(())
            }
            WaitReason::RoomBeingMade { until_ms } => write!(
                f,
                "preemption is making room for it: work was ordered off for it, and the GPUs that \
                 work frees are held for it alone until {}; it starts once they are enough",
                utc(*until_ms)
            ),
            WaitReason::NodesCordoned => f.write_str("would fit only on cordoned nodes"),
            WaitReason::MaintenanceWindow => f.write_str(
                "would fit only on nodes whose maintenance starts before its minimum runtime ends",
            ),
            WaitReason::UnknownAllocation => f.write_str(
                "its allocation is not a leaf of the budget tree in force: it starts nowhere, \
                 unallocated or not, until a tree makes it one again; cancel it (`fairshare \
                 cancel`) and submit it again under an allocation of the tree in force \
                 (`fairshare status` lists them)",
            ),
            WaitReason::NoBudgetTree => f.write_str(
                "no budget tree is set for the cluster: nothing starts until a manager applies \
                 one (`fairshare budget apply`)",
            ),
        }
    }
}

/// A job left waiting and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<'s> {
    /// The job.
    pub job_id: &'s str,
    /// Its allocation.
    pub allocation: &'s str,
    /// Why it waits.
    pub reason: WaitReason<'s>,
}

/// The outcome of one cycle, borrowing names from the state it was computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'s> {
    /// The last stream sequence folded into the state decided from.
    pub through_sequence: u64,
    /// The time used as "now".
    pub computed_at_ms: i64,
    /// The usage window the state took snapshots of
    /// ([`DecisionState::set_usage_window_ms`]; 0: any), for the basis.
    pub usage_window_ms: i64,
    /// Allocation paths in Fair Tree order at the start of the cycle, best first.
    pub ranking: Vec<&'s str>,
    /// Jobs to start, in the order they were decided.
    pub placements: Vec<Placement<'s>>,
    /// The cycle's reservation, if a job got one.
    pub reservation: Option<Reservation<'s>>,
    /// Every queued job not placed, in the order it was considered (allocated work in rank
    /// order, then unallocated work, then jobs of unknown allocations by path).
    pub waiting: Vec<Waiting<'s>>,
}

impl Decision<'_> {
    /// What this decision was computed from, for cycle number `cycle`.
    pub fn basis(&self, cycle: u64) -> pb::DecisionBasis {
        pb::DecisionBasis {
            through_sequence: self.through_sequence,
            computed_at_ms: self.computed_at_ms,
            cycle,
            usage_window_ms: self.usage_window_ms,
        }
    }

    /// The `JobPlaced` bodies of this decision, in placement order.
    pub fn job_placed(&self, cycle: u64) -> Vec<pb::JobPlaced> {
        self.placements
            .iter()
            .map(|p| pb::JobPlaced {
                job_id: p.job_id.to_owned(),
                nodes: p
                    .nodes
                    .iter()
                    .map(|n| pb::NodeGpus {
                        node: n.node.to_owned(),
                        gpus: n.gpus,
                    })
                    .collect(),
                basis: Some(self.basis(cycle)),
            })
            .collect()
    }

    /// The placements as log events stamped with the decision time.
    pub fn events(&self, cycle: u64) -> Vec<pb::Event> {
        self.job_placed(cycle)
            .into_iter()
            .map(|p| pb::Event {
                at_ms: self.computed_at_ms,
                body: Some(pb::event::Body::JobPlaced(p)),
            })
            .collect()
    }
}

/// "1 job", "3 jobs".
fn jobs(n: u32) -> String {
    if n == 1 {
        "1 job".to_owned()
    } else {
        format!("{n} jobs")
    }
}

/// The mutable part of a cycle.
struct Cycle<'s> {
    now: i64,
    pool: Pool<'s>,
    /// The folded state, for the reasons only: the registered nodes (a job that can never fit
    /// is told apart from one that waits for room) and the promises.
    state: &'s DecisionState,
    guard: Option<Guard>,
    reservation: Option<Reservation<'s>>,
    placements: Vec<Placement<'s>>,
    /// Allocated placements so far per allocation, counted for the reasons only (a job that
    /// lost free GPUs to its own allocation's work is told so).
    placed_per_allocation: BTreeMap<&'s str, u32>,
    waiting: Vec<Waiting<'s>>,
    /// Whether to work out and record why each unplaced job waits. Reasons never change what
    /// is placed (the reservation is still taken), so a caller that only acts on placements
    /// skips them.
    reasons: bool,
}

impl<'s> Cycle<'s> {
    /// Places the job if it fits; otherwise records why it waits (and gives it the cycle's
    /// reservation if it is the first allocated job that cannot fit). True if placed.
    fn consider(&mut self, key: &'s QueueKey, req: Request, allocation: &'s str) -> bool {
        let promised = self.pool.release_promise(&key.job_id);
        let placed = self.consider_free(key, req, allocation);
        if promised && !placed {
            self.pool.restore_promise(&key.job_id);
        }
        placed
    }

    /// [`Self::consider`] on the free GPUs as they stand.
    fn consider_free(&mut self, key: &'s QueueKey, req: Request, allocation: &'s str) -> bool {
        let protected_until = self.now.saturating_add(req.min_runtime_ms);
        let reason = match self.pool.find(
            req.shape,
            protected_until,
            self.guard.as_ref(),
            allocated_by(req, allocation),
        ) {
            Found::Nodes(nodes) => {
                self.place(key, req, allocation, nodes, protected_until);
                return true;
            }
            Found::Blocked if !self.reasons => return false,
            Found::Blocked => match &self.reservation {
                Some(r) => WaitReason::BlockedByReservation {
                    reserved_for: r.job_id,
                    start_ms: r.start_ms,
                    same_allocation: !req.is_unallocated() && r.allocation == allocation,
                },
                None => self.classify(&key.job_id, req, allocation, protected_until),
            },
            Found::Nowhere => {
                let reserved = self.reserve(key, req, allocation);
                if !self.reasons {
                    return false;
                }
                reserved
                    .unwrap_or_else(|| self.classify(&key.job_id, req, allocation, protected_until))
            }
        };
        // Victims already ordered off for it: that says more than the room it lacks now.
        // (A job no node could hold any more is told that first.)
        let reason = match self.state.promise_for(&key.job_id, self.now) {
            Some(p) if !matches!(reason, WaitReason::NeverFits { .. }) => {
                WaitReason::RoomBeingMade {
                    until_ms: p.until_ms,
                }
            }
            _ => reason,
        };
        self.waiting.push(Waiting {
            job_id: &key.job_id,
            allocation,
            reason,
        });
        false
    }

    /// Whether the rest of the cycle can change nothing a caller without reasons sees: nothing
    /// can be placed any more ([`Pool::exhausted`]) and the reservation is taken (no later job
    /// takes it). Then the walk stops: in a full cluster a cycle that places one job would
    /// otherwise meet every other queued job to learn nothing.
    fn nothing_left(&self) -> bool {
        !self.reasons && self.reservation.is_some() && self.pool.exhausted()
    }

    /// Places a debug job under its allocation's allowance if it fits now. Nothing else:
    /// one that does not fit is met again in rank order, where it may wait, reserve, or
    /// record why.
    fn place_if_fits(&mut self, key: &'s QueueKey, req: Request, allocation: &'s str) -> bool {
        let protected_until = self.now.saturating_add(req.min_runtime_ms);
        let promised = self.pool.release_promise(&key.job_id);
        match self.pool.find(
            req.shape,
            protected_until,
            self.guard.as_ref(),
            allocated_by(req, allocation),
        ) {
            Found::Nodes(nodes) => {
                self.place(key, req, allocation, nodes, protected_until);
                true
            }
            Found::Blocked | Found::Nowhere => {
                if promised {
                    self.pool.restore_promise(&key.job_id);
                }
                false
            }
        }
    }

    fn place(
        &mut self,
        key: &'s QueueKey,
        req: Request,
        allocation: &'s str,
        nodes: Vec<(u32, u32)>,
        protected_until: i64,
    ) {
        let reclaim = if req.is_unallocated() {
            RECLAIMABLE_AT_ONCE
        } else {
            protected_until
        };
        let mut placed = Vec::with_capacity(nodes.len());
        for (idx, gpus) in nodes {
            self.pool.take(idx, gpus, reclaim);
            if let Some(guard) = &mut self.guard {
                let own = self.pool.released_on(idx);
                guard.commit(
                    idx,
                    gpus.saturating_sub(own),
                    protected_until,
                    allocated_by(req, allocation),
                );
            }
            placed.push(NodeGpus {
                node: self.pool.nodes[idx as usize].name,
                gpus,
            });
        }
        self.pool.spend_promise();
        if self.reasons && !req.is_unallocated() {
            *self.placed_per_allocation.entry(allocation).or_default() += 1;
        }
        self.placements.push(Placement {
            job_id: &key.job_id,
            allocation,
            unallocated: req.is_unallocated(),
            nodes: placed,
        });
    }

    /// Gives the job the cycle's reservation if it is allocated, none is held yet and the
    /// uncordoned nodes could ever hold it.
    fn reserve(
        &mut self,
        key: &'s QueueKey,
        req: Request,
        allocation: &'s str,
    ) -> Option<WaitReason<'s>> {
        if req.is_unallocated()
            || self.reservation.is_some()
            || !self.pool.capacity_uncordoned.fits(req.shape)
        {
            return None;
        }
        let plan = reserve::plan(&self.pool, req.shape, req.min_runtime_ms, self.now)?;
        self.reservation = Some(Reservation {
            job_id: &key.job_id,
            allocation,
            start_ms: plan.start_ms,
            nodes: plan
                .nodes
                .iter()
                .map(|&(idx, gpus)| NodeGpus {
                    node: self.pool.nodes[idx as usize].name,
                    gpus,
                })
                .collect(),
        });
        self.guard = Some(plan.guard.for_allocation(allocation));
        let own_allocation_work = self.reasons && self.waits_on_own_work(&plan.nodes, allocation);
        Some(WaitReason::ReservationPending {
            start_ms: plan.start_ms,
            reclaimable_now: plan.start_ms <= self.now,
            after_window: plan.after_window,
            own_allocation_work,
        })
    }

    /// Whether, on some reserved node (`(node index, GPUs)`), the GPUs reserved there exceed
    /// what everything but `allocation`'s allocated work could give: free GPUs, unallocated
    /// work, work of other allocations and work already ordered off. That allocation's work,
    /// on the node before the cycle or placed on it earlier in this one, goes only as it ends.
    fn waits_on_own_work(&self, reserved: &[(u32, u32)], allocation: &str) -> bool {
        reserved.iter().any(|&(idx, gpus)| {
            let Some(node) = self.pool.nodes.get(idx as usize) else {
                return false;
            };
            let held_before: u32 = node
                .load
                .map(|l| {
                    l.holdings
                        .iter()
                        .map(|(_, h)| h)
                        .filter(|h| {
                            &*h.holder.allocation == allocation
                                && h.holder.min_runtime_ms > 0
                                && h.holder.preempt_deadline_ms.is_none()
                        })
                        .map(|h| h.gpus)
                        .sum()
                })
                .unwrap_or(0);
            let placed_now: u32 = self
                .placements
                .iter()
                .filter(|p| !p.unallocated && p.allocation == allocation)
                .flat_map(|p| &p.nodes)
                .filter(|n| n.node == node.name)
                .map(|n| n.gpus)
                .sum();
            node.usable().saturating_sub(held_before + placed_now) < gpus
        })
    }

    /// Why a job that found no room waits, most specific cause first.
    fn classify(
        &self,
        job_id: &str,
        req: Request,
        allocation: &str,
        protected_until: i64,
    ) -> WaitReason<'s> {
        let inventory = self.state.inventory();
        if inventory.could_hold(req.shape) && !self.pool.capacity_uncordoned.fits(req.shape) {
            // Only with cordoned nodes back could it ever start: no reservation or preemption
            // helps it until then, whatever is free now.
            return WaitReason::NodesCordoned;
        }
        if !inventory.could_hold(req.shape) {
            let have = if req.shape.nodes <= 1 {
                inventory.largest_node()
            } else {
                let n = inventory.nodes_with(req.shape.gpus_per_node);
                u32::try_from(n).unwrap_or(u32::MAX)
            };
            WaitReason::NeverFits {
                nodes: req.shape.nodes,
                gpus_per_node: req.shape.gpus_per_node,
                have,
            }
        } else if self.pool.fits_at_start(req.shape, protected_until) {
            let own_allocation = if req.is_unallocated() {
                0
            } else {
                self.placed_per_allocation
                    .get(allocation)
                    .copied()
                    .unwrap_or(0)
            };
            let placed = u32::try_from(self.placements.len()).unwrap_or(u32::MAX);
            WaitReason::BelowOthersInRank {
                own_allocation,
                others: placed.saturating_sub(own_allocation),
                unallocated: req.is_unallocated(),
            }
        } else if self.pool.start_unpromised.fits(req.shape) && !self.pool.has_promise(job_id) {
            // Name the hold that ends first: the earliest these GPUs could be anyone's. For a
            // single-node job, among the holds whose release alone would give it a node, if
            // any does (another job's hold elsewhere is not what it waits for).
            let holds = || {
                self.state
                    .promises_at(self.now)
                    .filter(|(holder, p)| *holder != job_id && !p.nodes.is_empty())
            };
            let frees_a_node = |p: &super::promise::Promise| {
                req.shape.nodes <= 1
                    && p.nodes.iter().any(|(node, gpus)| {
                        self.pool.nodes.iter().any(|n| {
                            n.name == &**node
                                && matches!(n.access, Access::Open | Access::Until(_))
                                && n.free.saturating_add(*gpus) >= req.shape.gpus_per_node
                        })
                    })
            };
            let relevant = holds().any(|(_, p)| frees_a_node(p));
            let mut holds = holds().filter(|(_, p)| !relevant || frees_a_node(p));
            match holds.next() {
                Some(first) => {
                    let (mut holder, mut until_ms, mut others) = (first.0, first.1.until_ms, 0u32);
                    for (h, p) in holds {
                        others += 1;
                        if (p.until_ms, h) < (until_ms, holder) {
                            (holder, until_ms) = (h, p.until_ms);
                        }
                    }
                    WaitReason::PromisedToAnother {
                        holder,
                        until_ms,
                        others,
                    }
                }
                // The start summaries say a promise withholds what it needs: one is found
                // (this says so in general words if not).
                None => WaitReason::PromisedToAnother {
                    holder: "",
                    until_ms: self.now,
                    others: 0,
                },
            }
        } else if self.pool.start_uncordoned.fits(req.shape) {
            WaitReason::MaintenanceWindow
        } else if self.pool.start_all.fits(req.shape) {
            WaitReason::NodesCordoned
        } else {
            WaitReason::TooLargeForFreeNodes {
                nodes: req.shape.nodes,
                gpus_per_node: req.shape.gpus_per_node,
                largest_free: self.pool.largest_free_taking_work(),
            }
        }
    }

    fn wait_all(
        &mut self,
        allocation: &'s str,
        jobs: impl Iterator<Item = &'s QueueKey>,
        reason: WaitReason<'s>,
    ) {
        if !self.reasons {
            return;
        }
        for key in jobs {
            self.waiting.push(Waiting {
                job_id: &key.job_id,
                allocation,
                reason,
            });
        }
    }
}

/// Computes one decision cycle for `state` at `now_ms` (Unix ms). Pure: same state and time,
/// same decision.
pub fn decide(state: &DecisionState, now_ms: i64) -> Decision<'_> {
    run_cycle(state, now_ms, true)
}

/// The same cycle as [`decide`] with the same placements and reservation, but without a
/// reason for each waiting job ([`Decision::waiting`] is empty): for callers that only act on
/// placements (the simulator), where reasons cost about as much as the placing itself.
pub fn decide_placements(state: &DecisionState, now_ms: i64) -> Decision<'_> {
    run_cycle(state, now_ms, false)
}

/// The allocation whose allocated work a job is, `None` for unallocated work (which the
/// preemption service may order off for anyone, its own allocation's waiters included).
fn allocated_by(req: Request, allocation: &str) -> Option<&str> {
    (!req.is_unallocated()).then_some(allocation)
}

/// What placing a job charges its allocation for the rest of the cycle: its protected run.
fn charge_of(req: &Request) -> u128 {
    u128::from(req.shape.total_gpus()) * u128::try_from(req.min_runtime_ms).unwrap_or(0)
}

fn run_cycle(state: &DecisionState, now_ms: i64, reasons: bool) -> Decision<'_> {
    let mut cycle = Cycle {
        now: now_ms,
        pool: Pool::new(state, now_ms),
        state,
        guard: None,
        reservation: None,
        placements: Vec::new(),
        placed_per_allocation: BTreeMap::new(),
        waiting: Vec::with_capacity(if reasons { state.queued_len() } else { 0 }),
        reasons,
    };
    let mut ranking = Vec::new();
    match &state.tree {
        None => {
            for (allocation, q) in &state.queues {
                let jobs = q.allocated.keys().chain(q.unallocated.keys());
                cycle.wait_all(allocation, jobs, WaitReason::NoBudgetTree);
            }
        }
        Some(tree) => {
            let mut fair = rank::ranking(state, tree, now_ms);
            let opening_order = fair.leaf_order();
            ranking = opening_order
                .iter()
                .map(|&id| tree.accounts[id].path.as_str())
                .collect();

            let mut queues = vec![None; tree.accounts.len()];
            let mut unknown = Vec::new();
            for (allocation, q) in &state.queues {
                match tree.allocation(allocation) {
                    Some(id) => queues[id] = Some((allocation, q)),
                    None => unknown.push((allocation, q)),
                }
            }

            // Debug pass: debug jobs under their allocation's allowance go first, in the
            // opening rank order, and charge like any placement.
            let mut debug_placed: Vec<&str> = Vec::new();
            for w in debug::waiters(state, tree, &opening_order) {
                if cycle.place_if_fits(w.key, w.request, w.allocation) {
                    fair.charge(w.leaf, charge_of(&w.request));
                    fair.hold(w.leaf, w.request.shape.total_gpus());
                    debug_placed.push(&w.key.job_id);
                }
            }
            debug_placed.sort_unstable();

            // Allocated pass. Each allocation's queue is walked once with a cursor; the tree
            // is consulted again only after a placement (which moves the ranking) or when an
            // allocation runs out of waiting work.
            let mut cursors: Vec<_> = queues
                .iter()
                .map(|q| q.map(|(_, q)| q.allocated.iter()))
                .collect();
            for (id, q) in queues.iter().enumerate() {
                if q.is_some_and(|(_, q)| !q.allocated.is_empty()) {
                    fair.set_pending(id);
                }
            }
            'allocated: while let Some(leaf) = fair.next_pending_leaf() {
                let (Some((allocation, _)), Some(cursor)) = (queues[leaf], cursors[leaf].as_mut())
                else {
                    fair.exhaust(leaf);
                    continue;
                };
                loop {
                    let Some((key, req)) = cursor.next() else {
                        fair.exhaust(leaf);
                        break;
                    };
                    if debug::is_candidate(req) && debug_placed.binary_search(&&*key.job_id).is_ok()
                    {
                        continue;
                    }
                    if cycle.consider(key, *req, allocation) {
                        fair.charge(leaf, charge_of(req));
                        fair.hold(leaf, req.shape.total_gpus());
                        break;
                    }
                    if cycle.nothing_left() {
                        break 'allocated;
                    }
                }
            }

            // Unallocated pass: fill what is left, in the ranking the allocated pass ended with.
            'unallocated: for leaf in fair.leaf_order() {
                if let Some((allocation, q)) = queues[leaf] {
                    for (key, req) in q.unallocated.iter() {
                        if cycle.nothing_left() {
                            break 'unallocated;
                        }
                        cycle.consider(key, *req, allocation);
                    }
                }
            }

            for (allocation, q) in unknown {
                let jobs = q.allocated.keys().chain(q.unallocated.keys());
                cycle.wait_all(allocation, jobs, WaitReason::UnknownAllocation);
            }
        }
    }
    Decision {
        through_sequence: state.last_applied,
        computed_at_ms: now_ms,
        usage_window_ms: state.usage_window_ms.unwrap_or(0),
        ranking,
        placements: cycle.placements,
        reservation: cycle.reservation,
        waiting: cycle.waiting,
    }
}
