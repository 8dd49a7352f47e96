//! Maintenance without negotiation (SPEC section 2, "Maintenance"): cordoned nodes drain as
//! their jobs reach their minimum runtime, and nodes clear before a maintenance window.
//!
//! Place in the flow: operators append `NodeCordoned`, `NodeUncordoned`, `MaintenanceScheduled`
//! and `MaintenanceCancelled`. The decision service stops placing work on a cordoned node at once,
//! and on a node with a window at `T` places only work whose protection ends by `T - 30 s`. This
//! module, called from [`crate::domain::decide_preemptions`], orders off what is already there:
//!
//! - Cordoned node: each job on it is ordered off as soon as nothing protects it: unallocated
//!   jobs at once, allocated jobs when `now >= start + min(min_runtime, cap)`. A job inside its
//!   minimum runtime is left alone (the shell wakes at its end, see
//!   [`crate::domain::next_due`]). When the node holds nothing any more, `NodeDrained` is
//!   emitted, once per cordon (again if a placement decided before the cordon lands after the
//!   report, once that job is gone too). A job spanning several nodes is ordered off whole.
//! - Uncordoned node: draining stops; no new orders. Orders already issued stand (there is no
//!   event to take one back, and the job has been told to stop).
//! - Maintenance window `[T, E)`: from `T - grace` until `E`, every job still on the node is
//!   ordered off with the usual grace, so it is gone by `T`; one already ordered off (for fair
//!   share) by a deadline after `T` is ordered again, by `T`. Work placed after the window was
//!   known is protected no later than `T - 30 s` (the decision service's lead,
//!   `MAINTENANCE_LEAD_MS`, the default grace), so this takes only unallocated work, work past
//!   its minimum runtime, or work that was already running when the window was scheduled
//!   inside its protection, or work that cannot resume and started too late (below); the
//!   last cases are named in the order's reason, because there it is the window, not the
//!   contract, that cuts the run short. A job whose protection
//!   ends before `T` is never cut: with a grace longer than the lead, it is ordered off when
//!   its protection ends, with its grace cut to end at `T` (the SPEC's "a window at `T`
//!   accepts work whose protection ends before `T`" taken at its word, and the node still
//!   clear by `T`).
//! - A resumable job placed on such a node but not yet started when starting it would leave
//!   it protected at `T` (its launcher took longer than the decision service's lead) is
//!   ordered off then, before it starts: it is requeued and loses no work, where starting it
//!   would have had the window cut its minimum runtime short. (A job that cannot resume is
//!   left to start: ordered off, it would end without having run.)

use fairshare_model::timestamp::utc;
use std::collections::BTreeMap;

use fairshare_decision::domain::state::Window;
use fairshare_events::pb::{self, event::Body};

use super::config::Config;
use super::contract;
use super::state::PreemptionState;

/// Why a job is ordered off a node that is leaving service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainReason {
    /// A maintenance window starts within the grace period (or is in progress).
    Maintenance {
        /// The node.
        node: String,
        /// The window's start.
        start_ms: i64,
        /// Whether the job was still inside its minimum runtime (the window was scheduled
        /// after its placement, or it started later than the decision service's lead allows).
        cuts_protection: bool,
    },
    /// Placed on a node with a window ahead and still not started when its protection,
    /// counted from now, would run past the window's start.
    NotStartedInTime {
        /// The node.
        node: String,
        /// The window's start.
        start_ms: i64,
    },
    /// The node is cordoned and nothing protects the job any more.
    Cordon {
        /// The node.
        node: String,
    },
}

impl std::fmt::Display for DrainReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainReason::Maintenance {
                node,
                start_ms,
                cuts_protection,
            } => {
                write!(
                    f,
                    "maintenance: node {node} goes down at {}",
                    utc(*start_ms)
                )?;
                if *cuts_protection {
                    // The fold keeps no time of the window's scheduling, only that the
                    // protection runs past it: scheduled after the placement, or a job that
                    // cannot resume started later than the decision service's lead allows.
                    f.write_str(
                        " (inside the job's minimum runtime: the window was scheduled after \
                         the job was placed, or the job started too late to end its \
                         protection before it)",
                    )?;
                }
                Ok(())
            }
            DrainReason::NotStartedInTime { node, start_ms } => write!(
                f,
                "maintenance: node {node} goes down at {}, and the job has not started: \
                 started now, its minimum runtime would run past that",
                utc(*start_ms)
            ),
            DrainReason::Cordon { node } => {
                write!(
                    f,
                    "drain: node {node} is cordoned and the job's minimum runtime is over"
                )
            }
        }
    }
}

/// The maintenance window start that makes a node with these windows clear now: a window
/// with `start - grace <= now < end`, the earliest such.
fn imminent_window(windows: &[Window], now: i64, cfg: &Config) -> Option<i64> {
    windows
        .iter()
        .filter(|w| w.end_ms > now && w.start_ms.saturating_sub(cfg.grace_ms) <= now)
        .map(|w| w.start_ms)
        .min()
}

/// The start of the earliest window on the node that is still ahead of `now`.
fn next_window_start(windows: &[Window], now: i64) -> Option<i64> {
    windows
        .iter()
        .filter(|w| w.start_ms > now)
        .map(|w| w.start_ms)
        .min()
}

/// Whether `job`, placed and not started or ordered off, would still be protected at the start
/// of a window starting at `start_ms` if it started at `now` (a window accepts only work
/// whose protection ends before it starts). Allocated work only: unallocated work is never
/// protected. Resumable work only: ordered off, it is requeued and loses nothing, while a job
/// that cannot resume would end without having run (started late, it may still finish before
/// the window, or is ordered off by its start).
fn too_late_to_start(
    job: &fairshare_decision::domain::state::Holder,
    start_ms: i64,
    now: i64,
    cfg: &Config,
) -> bool {
    !job.started
        && job.resumable
        && job.preempt_deadline_ms.is_none()
        && !contract::is_unallocated(job.min_runtime_ms)
        && contract::protected_until_ms(now, job.min_runtime_ms, cfg) >= start_ms
}

/// The deadline of an order given at `now` for a window starting at `start_ms`: the usual
/// grace, cut to end at the start while it is ahead ([`crate::domain::decide_preemptions`]
/// gives it).
fn maintenance_deadline(now: i64, start_ms: i64, cfg: &Config) -> i64 {
    let deadline = now.saturating_add(cfg.grace_ms.max(0));
    if now < start_ms {
        deadline.min(start_ms)
    } else {
        deadline
    }
}

/// Whether any node is cordoned or has a maintenance window: without one, nothing drains,
/// and the passes below (run at every step of a busy cluster) can stop at once.
fn anything_to_drain(state: &PreemptionState) -> bool {
    let d = state.decision();
    d.has_maintenance() || d.any_cordoned()
}

/// Jobs to order off nodes that are leaving service, by job id, with the first reason found
/// (nodes in name order, maintenance before cordon).
pub fn drain_victims(
    state: &PreemptionState,
    now: i64,
    cfg: &Config,
) -> BTreeMap<String, DrainReason> {
    let mut out: BTreeMap<String, DrainReason> = BTreeMap::new();
    if !anything_to_drain(state) {
        return out;
    }
    for row in state.decision().nodes_with_loads() {
        let Some(load) = row.load else {
            continue;
        };
        let window = imminent_window(row.windows, now, cfg);
        let ahead = next_window_start(row.windows, now);
        if window.is_none() && ahead.is_none() && !row.node.cordoned {
            continue;
        }
        for (id, h) in &load.holdings {
            let job = &h.holder;
            if out.contains_key(&**id) {
                continue;
            }
            if let Some(start_ms) = ahead
                && too_late_to_start(job, start_ms, now, cfg)
            {
                out.insert(
                    id.to_string(),
                    DrainReason::NotStartedInTime {
                        node: row.name.to_owned(),
                        start_ms,
                    },
                );
                continue;
            }
            if window.is_none() && !row.node.cordoned {
                continue;
            }
            if let Some(deadline) = job.preempt_deadline_ms {
                // Already leaving, by a deadline set before the window was known: ordered
                // again if that deadline falls after the window starts, with one cut to the
                // start (the fold keeps the earlier of the two).
                if let Some(start_ms) = window
                    && deadline > maintenance_deadline(now, start_ms, cfg)
                {
                    out.insert(
                        id.to_string(),
                        DrainReason::Maintenance {
                            node: row.name.to_owned(),
                            start_ms,
                            cuts_protection: false,
                        },
                    );
                }
                continue;
            }
            let protected = contract::is_protected(job.start_ms, job.min_runtime_ms, now, cfg);
            let protected_until =
                contract::protected_until_ms(job.start_ms, job.min_runtime_ms, cfg);
            let reason = if let Some(start_ms) = window {
                if protected && protected_until < start_ms {
                    // Its protection ends before the window (the window was scheduled while
                    // it ran, or the grace is longer than the decision service's lead):
                    // ordered off when the protection ends, never inside it.
                    continue;
                }
                DrainReason::Maintenance {
                    node: row.name.to_owned(),
                    start_ms,
                    cuts_protection: protected,
                }
            } else if !protected {
                DrainReason::Cordon {
                    node: row.name.to_owned(),
                }
            } else {
                continue;
            };
            out.insert(id.to_string(), reason);
        }
    }
    out
}

/// `NodeDrained` for every cordoned node that holds nothing and was not reported since its
/// cordon, in node name order.
pub fn drained(state: &PreemptionState) -> Vec<Body> {
    let d = state.decision();
    if !d.any_cordoned() {
        return Vec::new();
    }
    d.nodes_with_loads()
        .filter(|row| {
            row.node.cordoned
                && !state.drain_reported(row.name)
                && row.load.is_none_or(|l| l.holdings.is_empty())
        })
        .map(|row| {
            Body::NodeDrained(pb::NodeDrained {
                cluster: d.cluster().to_owned(),
                node: row.name.to_owned(),
            })
        })
        .collect()
}

/// The next time after `now` at which a drain or a window will order something: the end of the
/// protection of a job on a cordoned node, `start - grace` of a window on a busy node, or the
/// moment a job placed there and not yet started could no longer start in time for it.
pub fn next_drain_due(state: &PreemptionState, now: i64, cfg: &Config) -> Option<i64> {
    let mut next: Option<i64> = None;
    if !anything_to_drain(state) {
        return next;
    }
    let mut consider = |t: i64| {
        if t > now {
            next = Some(next.map_or(t, |n: i64| n.min(t)));
        }
    };
    for row in state.decision().nodes_with_loads() {
        let holdings = row.holdings();
        if holdings.is_empty() {
            continue;
        }
        for w in row.windows {
            if w.end_ms > now {
                let clearing = w.start_ms.saturating_sub(cfg.grace_ms);
                consider(clearing);
                // Protections that end while the node is cleared, before the window: those
                // jobs are ordered off as each ends.
                for (_, h) in holdings {
                    let until = contract::protected_until_ms(
                        h.holder.start_ms,
                        h.holder.min_runtime_ms,
                        cfg,
                    );
                    if until > clearing && until < w.start_ms {
                        consider(until);
                    }
                    // A placed job still not started when starting it would be too late.
                    if !h.holder.started
                        && h.holder.resumable
                        && !contract::is_unallocated(h.holder.min_runtime_ms)
                    {
                        let m = contract::effective_min_runtime_ms(h.holder.min_runtime_ms, cfg);
                        consider(w.start_ms.saturating_sub(m));
                    }
                }
            }
        }
        if row.node.cordoned {
            for (_, h) in holdings {
                consider(contract::protected_until_ms(
                    h.holder.start_ms,
                    h.holder.min_runtime_ms,
                    cfg,
                ));
            }
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::DrainReason;

    #[test]
    fn a_maintenance_reason_gives_the_window_start_in_utc() {
        let reason = DrainReason::Maintenance {
            node: "n1".into(),
            start_ms: 1_767_225_600_000,
            cuts_protection: false,
        };
        assert_eq!(
            reason.to_string(),
            "maintenance: node n1 goes down at 2026-01-01T00:00:00Z"
        );
        // Protection cut short: the reason says both ways it can come about, since the fold
        // cannot tell a window scheduled after the placement from a job that started late.
        let cut = DrainReason::Maintenance {
            node: "n1".into(),
            start_ms: 1_767_225_600_000,
            cuts_protection: true,
        }
        .to_string();
        assert!(cut.contains("scheduled after the job was placed"), "{cut}");
        assert!(cut.contains("started too late"), "{cut}");
        let late = DrainReason::NotStartedInTime {
            node: "n1".into(),
            start_ms: 1_767_225_600_000,
        };
        assert!(
            late.to_string()
                .starts_with("maintenance: node n1 goes down at 2026-01-01T00:00:00Z, and")
        );
    }
}
