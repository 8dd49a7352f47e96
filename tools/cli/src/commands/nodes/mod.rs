//! `fairshare node …`: list a cluster's nodes, cordon and uncordon them, remove drained ones,
//! and schedule maintenance windows.
//!
//! Place in the flow: operators' events (`NodeCordoned`, `NodeUncordoned`, `NodeRemoved` on
//! the node's subject, `MaintenanceScheduled` and `MaintenanceCancelled` on the cluster's
//! maintenance subject). The
//! decision service stops placing on a cordoned node at once; the preemption service orders its
//! jobs off as each one's protection ends and appends `NodeDrained` when it is empty. Every
//! command first folds the cluster's node and maintenance events ([`book`]) and checks the
//! change against them: an unknown node, or a removal of a node not cordoned or still holding
//! work (by the decision service's own fold of the log), is refused and nothing is written; a
//! node already where it was asked to go is left alone. Each change is appended only if its
//! subject has not moved since that read ([`fairshare_runtime::admin::append_change`]); if it
//! has (the preemption service reporting the node drained meanwhile, say), the events are read
//! and the change checked again, a few times.

pub mod book;
mod list;
pub(crate) mod strand;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use fairshare_decision::domain::state::DecisionState;
use fairshare_decision::shell::LogFold;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_model::duration::parse_duration;
use fairshare_model::timestamp::parse_instant;
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_runtime::log::Follower;

use super::not_changed::NodesNotChanged;
use super::{Connection, format_ms};
use book::{NodeBook, Standing};

/// How far in the past a maintenance window's start may be given (the clock of the person
/// typing "now" and the command's own differ a little); anything earlier is refused.
const PAST_START_SLACK_MS: i64 = 60_000;

/// The cluster a node command is about.
#[derive(Debug, Args)]
pub struct ClusterArg {
    /// The cluster.
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
}

/// Node commands.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Every node: GPUs, in service / cordoned, draining / cordoned, drained / removed, and
    /// the maintenance windows still ahead of it.
    List(ClusterArg),
    /// Stop placing work on nodes. Their jobs are ordered off as each one's minimum runtime
    /// ends (unallocated ones at once), and `list` shows each node drained once it is empty.
    Cordon {
        #[command(flatten)]
        cluster: ClusterArg,
        /// The nodes.
        #[arg(required = true)]
        nodes: Vec<String>,
        /// Why (shown by `list`).
        #[arg(long, default_value = "", value_parser = super::reason_text)]
        reason: String,
    },
    /// Put cordoned nodes back in service. Orders already given to their jobs stand.
    Uncordon {
        #[command(flatten)]
        cluster: ClusterArg,
        /// The nodes.
        #[arg(required = true)]
        nodes: Vec<String>,
    },
    /// Take cordoned, empty nodes out of the inventory (a node not cordoned, or still holding
    /// work, is refused: cordon it and wait until `list` says drained).
    Remove {
        #[command(flatten)]
        cluster: ClusterArg,
        /// The nodes.
        #[arg(required = true)]
        nodes: Vec<String>,
        /// Remove nodes even if they are not cordoned or still hold work; their jobs are left
        /// to the launcher.
        #[arg(long)]
        force: bool,
    },
    /// Schedule a maintenance window: from --start, the nodes are empty until --end. Work whose
    /// protection would run past the start is not placed on them, and what is still there is
    /// ordered off a grace period before it. With --cancel, take a window back.
    Maintenance {
        #[command(flatten)]
        cluster: ClusterArg,
        /// The nodes.
        #[arg(required = true)]
        nodes: Vec<String>,
        /// When it starts: RFC 3339 (2026-12-02T06:00:00Z), `now`, or `+2h` from now (up to the
        /// year 9999).
        #[arg(long, allow_hyphen_values = true)]
        start: String,
        /// When it ends, in the same forms (`+DURATION` counts from now, not from --start). With
        /// --cancel, give --start and --end exactly as `fairshare node list` prints the window
        /// (a time it prints as `<n>ms`, outside the calendar, is given as that too).
        #[arg(long, allow_hyphen_values = true)]
        end: String,
        /// Why.
        #[arg(long, default_value = "", value_parser = super::reason_text)]
        reason: String,
        /// Take back the window of exactly these --start and --end (as `list` prints them) on
        /// these nodes; orders already given for it stand.
        #[arg(long)]
        cancel: bool,
        /// Schedule it even if it starts while jobs on these nodes are inside their minimum
        /// runtime: they are ordered off by the start, their protection cut short. Without it
        /// such a window is refused, naming the jobs and the earliest start that cuts none.
        #[arg(long)]
        force: bool,
        /// The preemption service's minimum-runtime cap: no job is protected longer.
        #[arg(long, env = "FAIRSHARE_MAX_MIN_RUNTIME", default_value = "8h", value_parser = parse_duration)]
        max_min_runtime: std::time::Duration,
    },
}

/// How often a change is checked again and retried when its subject moved meanwhile.
const ATTEMPTS: usize = 4;

/// Folds cluster `cluster`'s node and maintenance events from the log.
pub(crate) async fn read_book(conn: &Connection, cluster: &str) -> anyhow::Result<NodeBook> {
    let filters = vec![subjects::node(cluster, "*"), subjects::maintenance(cluster)];
    let mut follower = Follower::start(&conn.js, 1, filters)
        .await
        .with_context(|| format!("cannot read the node events of cluster {cluster}"))?;
    let mut book = NodeBook::default();
    follower
        .catch_up(|entry| book.apply(entry.sequence, &entry.subject, entry.event.as_ref().ok()))
        .await
        .with_context(|| format!("cannot read the node events of cluster {cluster}"))?;
    Ok(book)
}

/// The nodes named, each once, in the order given; the whole command is refused if any was
/// never registered in the cluster.
fn known(book: &NodeBook, cluster: &str, nodes: &[String]) -> anyhow::Result<Vec<String>> {
    let mut once: Vec<String> = Vec::with_capacity(nodes.len());
    for n in nodes {
        if !once.contains(n) {
            once.push(n.clone());
        }
    }
    let unknown: Vec<&str> = once
        .iter()
        .filter(|n| !book.nodes.contains_key(*n))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        bail!(
            "no node {} in cluster {cluster} (`fairshare node list --cluster {cluster}`); \
             nothing written",
            unknown.join(", ")
        );
    }
    Ok(once)
}

/// What to do for one node, given the events as they stand.
enum Step {
    /// Append this.
    Write(Box<Body>),
    /// Nothing to do; say this.
    Skip(String),
}

/// Where a change goes: its subject, the kind its message id names, and how to call it when
/// there is nothing to do.
struct Target {
    subject: String,
    kind: String,
    label: String,
}

impl Target {
    fn node(cluster: &str, name: &str, kind: &str) -> Target {
        Target {
            subject: subjects::node(cluster, name),
            kind: format!("{kind}-{name}"),
            label: name.to_owned(),
        }
    }
}

/// Appends the change `decide` asks for on `target`'s subject, checked against the events read
/// just before; read and checked again, up to `attempts` times in all, if someone appended there
/// meanwhile. Returns the sequence written, or `None` if `decide` found nothing to do (after
/// printing why).
async fn change(
    conn: &Connection,
    cluster: &str,
    target: &Target,
    now: i64,
    attempts: usize,
    decide: impl Fn(&NodeBook) -> anyhow::Result<Step>,
) -> anyhow::Result<Option<u64>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let book = read_book(conn, cluster).await?;
        let body = match decide(&book)? {
            Step::Write(body) => *body,
            Step::Skip(why) => {
                fairshare_runtime::outln!("{}: {why}", target.label);
                return Ok(None);
            }
        };
        let last = book.sequence_on(&target.subject);
        let subject = target.subject.clone();
        match admin::append_change(&conn.js, subject, &target.kind, cluster, now, body, last).await
        {
            Ok(seq) => return Ok(Some(seq)),
            Err(e) if e.stale && attempt < attempts => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The standing of `name` in `book` (it was checked to be known).
fn standing(book: &NodeBook, name: &str) -> Standing {
    book.nodes
        .get(name)
        .map_or(Standing::Removed, |e| e.standing)
}

/// The decision service's fold of cluster `cluster`'s whole log: who holds what, where.
/// Folded as the entries arrive, so a log of months takes the fold's memory, not the log's.
pub(crate) async fn fold_log(conn: &Connection, cluster: &str) -> anyhow::Result<LogFold> {
    let mut fold = LogFold::new(cluster);
    let mut follower = Follower::start(&conn.js, 1, vec![subjects::cluster_events(cluster)])
        .await
        .with_context(|| format!("cannot read the log of cluster {cluster}"))?;
    follower
        .catch_up(|entry| {
            // What the fold refuses, the service's fold refuses too: nothing to report here.
            let _ = fold.apply(&entry);
        })
        .await
        .with_context(|| format!("cannot read the log of cluster {cluster}"))?;
    Ok(fold)
}

/// Whether node `name` holds work by the decision service's fold.
fn holds_work(state: &DecisionState, name: &str) -> bool {
    state.load(name).is_some_and(|l| !l.holdings.is_empty())
}

/// The nodes of `names` that hold work by the decision service's fold of the whole log, with
/// the jobs they hold.
fn holding_work(state: &DecisionState, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter_map(|n| {
            let load = state.load(n)?;
            let jobs: Vec<&str> = load.holdings.iter().map(|(id, _)| &**id).collect();
            (!jobs.is_empty()).then(|| format!("{n} (holds {})", jobs.join(", ")))
        })
        .collect()
}

/// A job a window would cut short: its id, its node, the end of its protection, and whether it
/// has started (if not, its protection ends that late at the earliest: it runs from its start).
type Cut = (String, String, i64, bool);

/// Jobs on `names` whose minimum runtime, capped at `cap_ms` as the preemption service caps
/// it, would still protect them at `start_ms`: what a window starting then would cut short
/// (the preemption service orders off by the start whatever is still there). See
/// [`protections_in`].
async fn protections_cut(
    conn: &Connection,
    cluster: &str,
    names: &[String],
    start_ms: i64,
    cap_ms: i64,
    now_ms: i64,
) -> anyhow::Result<Vec<Cut>> {
    let fold = fold_log(conn, cluster).await?;
    Ok(protections_in(
        fold.state(),
        names,
        start_ms,
        cap_ms,
        now_ms,
    ))
}

/// [`protections_cut`] in a folded state at `now_ms`. A job placed and not yet started that
/// can resume is left out: one that could not start in time is ordered off before it starts,
/// and requeued. One that cannot resume is not (the order would end it), so it counts as
/// protected from the moment it may start, now at the earliest.
fn protections_in(
    state: &DecisionState,
    names: &[String],
    start_ms: i64,
    cap_ms: i64,
    now_ms: i64,
) -> Vec<Cut> {
    let mut cut = Vec::new();
    for name in names {
        let Some(load) = state.load(name) else {
            continue;
        };
        for (id, h) in &load.holdings {
            let job = &h.holder;
            if job.preempt_deadline_ms.is_some() || job.min_runtime_ms <= 0 {
                continue;
            }
            let from = match (job.started, job.resumable) {
                (true, _) => job.start_ms,
                (false, true) => continue,
                (false, false) => job.start_ms.max(now_ms),
            };
            let until = from.saturating_add(job.min_runtime_ms.min(cap_ms));
            if until >= start_ms {
                cut.push((id.to_string(), name.clone(), until, job.started));
            }
        }
    }
    cut
}

/// Runs a node command.
pub async fn node(cmd: NodeCommand, conn: &Connection) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    match cmd {
        NodeCommand::List(ClusterArg { cluster }) => {
            let mut book = read_book(conn, &cluster).await?;
            if book.any_drained() {
                // A drained report can be wrong by the time it lands (see `busy_again`): the
                // services' own fold says whether the node holds work. Without it the listing
                // still says what the node events say, and that it could not check them.
                match fold_log(conn, &cluster).await {
                    Ok(fold) => book.busy_again(|n| holds_work(fold.state(), n)),
                    Err(e) => eprintln!(
                        "warning: drained reports not checked against the jobs on their nodes: \
                         {e:#}"
                    ),
                }
            }
            list::print(&book, &cluster, now);
            Ok(())
        }
        NodeCommand::Cordon {
            cluster: ClusterArg { cluster },
            nodes,
            reason,
        } => {
            let nodes = live_nodes(conn, &cluster, &nodes).await?;
            // Every node is tried whatever becomes of standard output meanwhile, and whatever
            // becomes of the nodes before it.
            let _held = fairshare_runtime::output::hold();
            let mut not_changed = NodesNotChanged::new(nodes.len());
            for name in &nodes {
                let decide = |book: &NodeBook| {
                    let s = standing(book, name);
                    Ok(match s {
                        Standing::InService => {
                            Step::Write(Box::new(Body::NodeCordoned(pb::NodeCordoned {
                                cluster: cluster.clone(),
                                node: name.clone(),
                                reason: reason.clone(),
                            })))
                        }
                        Standing::Removed => bail!("removed meanwhile"),
                        _ => Step::Skip(format!("already {}", s.words())),
                    })
                };
                let target = Target::node(&cluster, name, "cordon");
                match change(conn, &cluster, &target, now, ATTEMPTS, decide).await {
                    Ok(Some(seq)) => fairshare_runtime::outln!(
                        "{name}: cordoned at sequence {seq}; its jobs go as their minimum \
                         runtimes end"
                    ),
                    Ok(None) => {}
                    Err(e) => not_changed.note(name, e),
                }
            }
            not_changed.finish()
        }
        NodeCommand::Uncordon {
            cluster: ClusterArg { cluster },
            nodes,
        } => {
            let nodes = live_nodes(conn, &cluster, &nodes).await?;
            let _held = fairshare_runtime::output::hold();
            let mut not_changed = NodesNotChanged::new(nodes.len());
            for name in &nodes {
                let decide = |book: &NodeBook| {
                    Ok(match standing(book, name) {
                        Standing::Draining | Standing::Drained => {
                            Step::Write(Box::new(Body::NodeUncordoned(pb::NodeUncordoned {
                                cluster: cluster.clone(),
                                node: name.clone(),
                            })))
                        }
                        Standing::Removed => bail!("removed meanwhile"),
                        Standing::InService => Step::Skip("not cordoned".to_owned()),
                    })
                };
                let target = Target::node(&cluster, name, "uncordon");
                match change(conn, &cluster, &target, now, ATTEMPTS, decide).await {
                    Ok(Some(seq)) => {
                        fairshare_runtime::outln!("{name}: back in service at sequence {seq}");
                    }
                    Ok(None) => {}
                    Err(e) => not_changed.note(name, e),
                }
            }
            not_changed.finish()
        }
        NodeCommand::Remove {
            cluster: ClusterArg { cluster },
            nodes,
            force,
        } => {
            let book = read_book(conn, &cluster).await?;
            let nodes = known(&book, &cluster, &nodes)?;
            let fold = fold_log(conn, &cluster).await?;
            if !force {
                let in_service: Vec<&str> = nodes
                    .iter()
                    .filter(|n| standing(&book, n) == Standing::InService)
                    .map(String::as_str)
                    .collect();
                if !in_service.is_empty() {
                    let them = if in_service.len() == 1 { "it" } else { "them" };
                    bail!(
                        "in service: {}; cordon {them} and wait until `fairshare node list` says \
                         drained, or give --force; nothing written",
                        in_service.join(", ")
                    );
                }
                let busy = holding_work(fold.state(), &nodes);
                if !busy.is_empty() {
                    bail!(
                        "still holding work: {}; wait until `fairshare node list` says \
                         drained, or give --force; nothing written",
                        busy.join("; ")
                    );
                }
            }
            let _held = fairshare_runtime::output::hold();
            let mut not_changed = NodesNotChanged::new(nodes.len());
            for name in &nodes {
                let target = Target::node(&cluster, name, "remove");
                let body = Body::NodeRemoved(pb::NodeRemoved {
                    cluster: cluster.clone(),
                    node: name.clone(),
                });
                let seq = if force {
                    let decide = |book: &NodeBook| {
                        Ok(match standing(book, name) {
                            Standing::Removed => Step::Skip("already removed".to_owned()),
                            _ => Step::Write(Box::new(body.clone())),
                        })
                    };
                    change(conn, &cluster, &target, now, ATTEMPTS, decide).await
                } else if standing(&book, name) == Standing::Removed {
                    fairshare_runtime::outln!("{name}: already removed");
                    Ok(None)
                } else {
                    // Appended only if the node's events are still those its check for work
                    // was made against: one uncordoned, given work and cordoned again since
                    // then is not removed on a second look.
                    let last = book.sequence_on(&target.subject);
                    let subject = target.subject.clone();
                    match admin::append_change(
                        &conn.js,
                        subject,
                        &target.kind,
                        &cluster,
                        now,
                        body,
                        last,
                    )
                    .await
                    {
                        Ok(seq) => Ok(Some(seq)),
                        Err(e) if e.stale => Err(anyhow::anyhow!(
                            "it changed since it was checked for work; nothing written for it: \
                             run the command again"
                        )),
                        Err(e) => Err(e.into()),
                    }
                };
                match seq {
                    Ok(Some(seq)) => fairshare_runtime::outln!("{name}: removed at sequence {seq}"),
                    Ok(None) => {}
                    Err(e) => not_changed.note(name, e),
                }
            }
            let mut after = fold.state().inventory().clone();
            for name in nodes.iter().filter(|n| !not_changed.surely_unchanged(n)) {
                after.remove(name);
            }
            if let Some(warning) = strand::stranded_warning(&strand::stranded(fold.state(), &after))
            {
                eprintln!("warning: {warning}");
            }
            not_changed.finish()
        }
        NodeCommand::Maintenance {
            cluster: ClusterArg { cluster },
            nodes,
            start,
            end,
            reason,
            cancel,
            force,
            max_min_runtime,
        } => {
            let start_ms = parse_instant(&start, now).context("--start")?;
            let end_ms = parse_instant(&end, now).context("--end")?;
            // `<n>ms` outside the calendar names a window written before such ones were
            // refused, to cancel it; a new one there would close its nodes for good.
            for (flag, ms) in [("--start", start_ms), ("--end", end_ms)] {
                if !cancel && !fairshare_model::timestamp::in_calendar(ms) {
                    bail!(
                        "{flag} {}: a window outside the years 1 to 9999 can only be cancelled \
                         (--cancel); nothing written",
                        format_ms(ms)
                    );
                }
            }
            // The services refuse a cap of 0 at start: no protection is checked against it.
            if !cancel && !force && max_min_runtime.is_zero() {
                bail!(
                    "--max-min-runtime 0: the preemption service refuses a cap of 0, so no job's \
                     protection can be checked against it; give the cap the services run with \
                     (FAIRSHARE_MAX_MIN_RUNTIME), or --force; nothing written"
                );
            }
            if end_ms == start_ms {
                bail!(
                    "the window starts and ends at {}: it must end after it starts; nothing \
                     written",
                    format_ms(start_ms)
                );
            }
            if end_ms < start_ms {
                bail!(
                    "the window ends ({}) before it starts ({}); nothing written",
                    format_ms(end_ms),
                    format_ms(start_ms)
                );
            }
            if end_ms <= now {
                bail!(
                    "the window is over already ({}); nothing written",
                    format_ms(end_ms)
                );
            }
            // A window is scheduled ahead, or from now; cancelling names the one scheduled,
            // which may have started.
            if !cancel && start_ms < now.saturating_sub(PAST_START_SLACK_MS) {
                bail!(
                    "the window would have started at {}, in the past; start it \"now\" or \
                     later; nothing written",
                    format_ms(start_ms)
                );
            }
            let nodes = if cancel {
                // A removed node took its windows with it: nothing is left to take back there.
                let book = read_book(conn, &cluster).await?;
                let (live, removed): (Vec<String>, Vec<String>) = known(&book, &cluster, &nodes)?
                    .into_iter()
                    .partition(|n| book.live(n).is_some());
                for name in &removed {
                    fairshare_runtime::outln!(
                        "{name}: removed from the inventory, which took its maintenance windows \
                         with it"
                    );
                }
                if live.is_empty() {
                    return Ok(());
                }
                live
            } else {
                live_nodes(conn, &cluster, &nodes).await?
            };
            if !cancel && !force {
                let cap_ms = i64::try_from(max_min_runtime.as_millis()).unwrap_or(i64::MAX);
                let cut = protections_cut(conn, &cluster, &nodes, start_ms, cap_ms, now).await?;
                if let Some(latest) = cut.iter().map(|c| c.2).max() {
                    let jobs: Vec<String> = cut
                        .iter()
                        .map(|(job, node, until, started)| {
                            let when = if *started {
                                "protected until"
                            } else {
                                "not started yet, protected at least until"
                            };
                            format!("{job} on {node} ({when} {})", format_ms(*until))
                        })
                        .collect();
                    let after = if cut.iter().all(|c| c.3) {
                        "to cut none"
                    } else {
                        "to cut none of those running (one not yet started is protected from \
                         its start)"
                    };
                    bail!(
                        "a window from {} would cut the minimum runtime of {}; start it after \
                         {} {after}, or pass --force to cut them; nothing written",
                        format_ms(start_ms),
                        jobs.join(", "),
                        format_ms(latest)
                    );
                }
            }
            // The nodes the event written names (a cancel retried names only those where the
            // window was still in place).
            let written_nodes = std::cell::RefCell::new(nodes.clone());
            let decide = |book: &NodeBook| {
                refuse_removed(book, &nodes)?;
                let without: Vec<&str> = nodes
                    .iter()
                    .filter(|n| !book.has_window(n, start_ms, end_ms))
                    .map(String::as_str)
                    .collect();
                let (window, nodes) = (
                    format!("{} to {}", format_ms(start_ms), format_ms(end_ms)),
                    nodes.clone(),
                );
                Ok(if cancel {
                    let never: Vec<&str> = without
                        .iter()
                        .filter(|n| !book.was_cancelled(n, start_ms, end_ms))
                        .copied()
                        .collect();
                    if !never.is_empty() {
                        bail!(
                            "no maintenance window from {window} on {} (`fairshare node list` \
                             prints them); nothing written",
                            never.join(", ")
                        );
                    }
                    // Taken back already on some (a retry): the cancel is for the rest.
                    let nodes: Vec<String> = nodes
                        .into_iter()
                        .filter(|n| !without.contains(&n.as_str()))
                        .collect();
                    if nodes.is_empty() {
                        return Ok(Step::Skip(format!(
                            "already cancelled from {window} on every node named"
                        )));
                    }
                    written_nodes.replace(nodes.clone());
                    Step::Write(Box::new(Body::MaintenanceCancelled(
                        pb::MaintenanceCancelled {
                            cluster: cluster.clone(),
                            nodes,
                            start_ms,
                            end_ms,
                            reason: reason.clone(),
                        },
                    )))
                } else if without.is_empty() {
                    Step::Skip(format!(
                        "already scheduled from {window} on every node named"
                    ))
                } else {
                    Step::Write(Box::new(Body::MaintenanceScheduled(
                        pb::MaintenanceScheduled {
                            cluster: cluster.clone(),
                            nodes,
                            start_ms,
                            end_ms,
                            reason: reason.clone(),
                        },
                    )))
                })
            };
            let target = Target {
                subject: subjects::maintenance(&cluster),
                kind: if cancel {
                    "maintenance-cancel"
                } else {
                    "maintenance"
                }
                .to_owned(),
                label: "maintenance".to_owned(),
            };
            // Relative times ("+2h", "now") are read anew on every run: a retry after a write
            // that failed, or whose outcome is unknown, must give the exact times, or it
            // schedules a second window. (A refusal wrote nothing and says so.)
            let written = match change(conn, &cluster, &target, now, ATTEMPTS, decide).await {
                // A stale subject after every attempt is a refusal too: nothing was written.
                Err(e)
                    if e.downcast_ref::<admin::AppendError>()
                        .is_some_and(|a| !a.stale) =>
                {
                    return Err(e.context(format!(
                        "maintenance {} of {} from {} to {} (to retry, give --start {} --end {}: \
                         relative times are read anew)",
                        if cancel { "cancel" } else { "window" },
                        nodes.join(", "),
                        format_ms(start_ms),
                        format_ms(end_ms),
                        format_ms(start_ms),
                        format_ms(end_ms)
                    )));
                }
                other => other?,
            };
            let Some(seq) = written else {
                return Ok(());
            };
            fairshare_runtime::outln!(
                "maintenance of {} from {} to {} {} at sequence {seq}",
                written_nodes.borrow().join(", "),
                format_ms(start_ms),
                format_ms(end_ms),
                if cancel { "cancelled" } else { "scheduled" }
            );
            Ok(())
        }
    }
}

/// The nodes named, each once, after checking that every one is in the inventory now.
async fn live_nodes(
    conn: &Connection,
    cluster: &str,
    nodes: &[String],
) -> anyhow::Result<Vec<String>> {
    let book = read_book(conn, cluster).await?;
    let nodes = known(&book, cluster, nodes)?;
    refuse_removed(&book, &nodes)?;
    Ok(nodes)
}

/// Refuses the whole command if any of `nodes` was removed.
fn refuse_removed(book: &NodeBook, nodes: &[String]) -> anyhow::Result<()> {
    let removed: Vec<&str> = nodes
        .iter()
        .filter(|n| book.live(n).is_none())
        .map(String::as_str)
        .collect();
    if !removed.is_empty() {
        bail!(
            "removed from the inventory: {} (put {} back in service with `fairshare inventory \
             apply --readd FILE`, FILE listing {}); nothing written",
            removed.join(", "),
            if removed.len() == 1 { "it" } else { "them" },
            if removed.len() == 1 { "it" } else { "them" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use fairshare_decision::domain::state::DecisionState;
    use fairshare_events::pb::{self, event::Body};

    use super::protections_in;

    const MIN: i64 = 60_000;

    /// A state of cluster "c" with node n1 and a 30-minute job `id` placed on it at 0,
    /// started at `started` if given.
    fn placed(id: &str, resumable: bool, started: Option<i64>) -> DecisionState {
        let mut state = DecisionState::new("c");
        let mut events = vec![
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: "n1".into(),
                gpus: 8,
            }),
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: id.into(),
                idempotency_key: "k".into(),
                spec: Some(pb::JobSpec {
                    cluster: "c".into(),
                    allocation: "a".into(),
                    gpus: 1,
                    min_runtime_s: 30 * 60,
                    resumable,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: 1,
                    gpus_per_node: 1,
                }),
            }),
            Body::JobPlaced(pb::JobPlaced {
                job_id: id.into(),
                nodes: vec![pb::NodeGpus {
                    node: "n1".into(),
                    gpus: 1,
                }],
                basis: None,
            }),
        ];
        if started.is_some() {
            events.push(Body::JobStarted(pb::JobStarted { job_id: id.into() }));
        }
        for (i, body) in events.into_iter().enumerate() {
            let at = if matches!(body, Body::JobStarted(_)) {
                started.unwrap_or(0)
            } else {
                0
            };
            let event = pb::Event {
                at_ms: at,
                body: Some(body),
            };
            state.apply(i as u64 + 1, &event).expect("folds");
        }
        state
    }

    #[test]
    fn a_window_cuts_a_started_job_and_one_placed_that_cannot_resume() {
        let nodes = ["n1".to_owned()];
        let now = 10 * MIN;
        let cap = 8 * 60 * MIN;
        // Started at 5 min: protected until 35 min.
        let state = placed("run", true, Some(5 * MIN));
        let cut = protections_in(&state, &nodes, 20 * MIN, cap, now);
        assert_eq!(cut, vec![("run".into(), "n1".into(), 35 * MIN, true)]);
        assert!(protections_in(&state, &nodes, 36 * MIN, cap, now).is_empty());
        // Placed, not started, resumable: ordered off before it starts if it would not end in
        // time, so nothing is cut.
        let state = placed("waits", true, None);
        assert!(protections_in(&state, &nodes, 20 * MIN, cap, now).is_empty());
        // Not resumable: it may start now and then holds its protection until 40 min.
        let state = placed("once", false, None);
        let cut = protections_in(&state, &nodes, 20 * MIN, cap, now);
        assert_eq!(cut, vec![("once".into(), "n1".into(), 40 * MIN, false)]);
        // The cap bounds it as it bounds a running job's.
        assert!(protections_in(&state, &nodes, 20 * MIN, 5 * MIN, now).is_empty());
    }
}
