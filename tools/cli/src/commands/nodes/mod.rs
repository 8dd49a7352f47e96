//! `fairshare node …`: list a cluster's nodes, cordon and uncordon them, remove drained ones,
//! and schedule maintenance windows.
//!
//! Place in the flow: operators' events (`NodeCordoned`, `NodeUncordoned`, `NodeRemoved` on
//! the node's subject, `MaintenanceScheduled` on the cluster's maintenance subject). The
//! decision service stops placing on a cordoned node at once; the preemption service orders its
//! jobs off as each one's protection ends and appends `NodeDrained` when it is empty. Every
//! command first folds the cluster's node and maintenance events ([`book`]) and checks the
//! change against them: an unknown node, or a removal of a node still running work, is refused
//! and nothing is written; a node already where it was asked to go is left alone. Each change is
//! appended only if its subject has not moved since that read
//! ([`fairshare_runtime::admin::append_change`]).

pub mod book;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_model::timestamp::parse_instant;
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_runtime::log::Follower;

use super::{Connection, format_ms};
use book::{NodeBook, Standing};

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
        /// Why (shown in `list` and in the orders' reasons).
        #[arg(long, default_value = "")]
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
    /// Take drained nodes out of the inventory (a node still running work is refused: cordon
    /// it and wait until `list` says drained).
    Remove {
        #[command(flatten)]
        cluster: ClusterArg,
        /// The nodes.
        #[arg(required = true)]
        nodes: Vec<String>,
        /// Remove even nodes that are not drained; their jobs are left to the launcher.
        #[arg(long)]
        force: bool,
    },
    /// Schedule a maintenance window: from --start, the nodes are empty until --end. Work whose
    /// protection would run past the start is not placed on them, and what is still there is
    /// ordered off a grace period before it.
    Maintenance {
        #[command(flatten)]
        cluster: ClusterArg,
        /// The nodes.
        #[arg(required = true)]
        nodes: Vec<String>,
        /// When it starts: RFC 3339 (2026-12-02T06:00:00Z), `now`, or `+2h` from now.
        #[arg(long)]
        start: String,
        /// When it ends, in the same forms (`+DURATION` counts from now, not from --start).
        #[arg(long)]
        end: String,
        /// Why.
        #[arg(long, default_value = "")]
        reason: String,
    },
}

/// Folds cluster `cluster`'s node and maintenance events from the log.
async fn read_book(conn: &Connection, cluster: &str) -> anyhow::Result<NodeBook> {
    let filters = vec![subjects::node(cluster, "*"), subjects::maintenance(cluster)];
    let mut follower = Follower::start(&conn.js, 1, filters)
        .await
        .with_context(|| format!("cannot read the node events of cluster {cluster}"))?;
    let mut book = NodeBook::default();
    follower
        .catch_up(|entry| {
            if let Ok(event) = &entry.event {
                book.apply(entry.sequence, event);
            }
        })
        .await
        .with_context(|| format!("cannot read the node events of cluster {cluster}"))?;
    Ok(book)
}

/// Refuses the whole command if any node is not in the cluster's inventory.
fn all_live(book: &NodeBook, cluster: &str, nodes: &[String]) -> anyhow::Result<()> {
    let unknown: Vec<&str> = nodes
        .iter()
        .filter(|n| book.live(n).is_none())
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        bail!(
            "no node {} in cluster {cluster} (`fairshare node list --cluster {cluster}`); \
             nothing written",
            unknown.join(", ")
        );
    }
    Ok(())
}

/// Runs a node command.
pub async fn node(cmd: NodeCommand, conn: &Connection) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    match cmd {
        NodeCommand::List(ClusterArg { cluster }) => {
            let book = read_book(conn, &cluster).await?;
            list(&book, &cluster, now);
            Ok(())
        }
        NodeCommand::Cordon {
            cluster: ClusterArg { cluster },
            nodes,
            reason,
        } => {
            let book = read_book(conn, &cluster).await?;
            all_live(&book, &cluster, &nodes)?;
            for name in &nodes {
                let Some(entry) = book.live(name) else {
                    continue;
                };
                if entry.standing.cordoned() {
                    println!("{name}: already {}", entry.standing.words());
                    continue;
                }
                let body = Body::NodeCordoned(pb::NodeCordoned {
                    cluster: cluster.clone(),
                    node: name.clone(),
                    reason: reason.clone(),
                });
                let seq = change(conn, &cluster, name, "cordon", now, body, entry).await?;
                println!(
                    "{name}: cordoned at sequence {seq}; its jobs go as their minimum runtimes \
                     end"
                );
            }
            Ok(())
        }
        NodeCommand::Uncordon {
            cluster: ClusterArg { cluster },
            nodes,
        } => {
            let book = read_book(conn, &cluster).await?;
            all_live(&book, &cluster, &nodes)?;
            for name in &nodes {
                let Some(entry) = book.live(name) else {
                    continue;
                };
                if !entry.standing.cordoned() {
                    println!("{name}: not cordoned");
                    continue;
                }
                let body = Body::NodeUncordoned(pb::NodeUncordoned {
                    cluster: cluster.clone(),
                    node: name.clone(),
                });
                let seq = change(conn, &cluster, name, "uncordon", now, body, entry).await?;
                println!("{name}: back in service at sequence {seq}");
            }
            Ok(())
        }
        NodeCommand::Remove {
            cluster: ClusterArg { cluster },
            nodes,
            force,
        } => {
            let book = read_book(conn, &cluster).await?;
            all_live(&book, &cluster, &nodes)?;
            let busy: Vec<String> = nodes
                .iter()
                .filter_map(|n| book.live(n).map(|e| (n, e.standing)))
                .filter(|(_, s)| *s != Standing::Drained)
                .map(|(n, s)| format!("{n} ({})", s.words()))
                .collect();
            if !busy.is_empty() && !force {
                bail!(
                    "not drained: {}; cordon them and wait until `fairshare node list` says \
                     drained, or give --force; nothing written",
                    busy.join(", ")
                );
            }
            for name in &nodes {
                let Some(entry) = book.live(name) else {
                    continue;
                };
                let body = Body::NodeRemoved(pb::NodeRemoved {
                    cluster: cluster.clone(),
                    node: name.clone(),
                });
                let seq = change(conn, &cluster, name, "remove", now, body, entry).await?;
                println!("{name}: removed at sequence {seq}");
            }
            Ok(())
        }
        NodeCommand::Maintenance {
            cluster: ClusterArg { cluster },
            nodes,
            start,
            end,
            reason,
        } => {
            let start_ms = parse_instant(&start, now).context("--start")?;
            let end_ms = parse_instant(&end, now).context("--end")?;
            if end_ms <= start_ms {
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
            let book = read_book(conn, &cluster).await?;
            all_live(&book, &cluster, &nodes)?;
            let body = Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                cluster: cluster.clone(),
                nodes: nodes.clone(),
                start_ms,
                end_ms,
                reason,
            });
            let seq = admin::append_change(
                &conn.js,
                subjects::maintenance(&cluster),
                "maintenance",
                &cluster,
                now,
                body,
                book.maintenance_sequence,
            )
            .await?;
            println!(
                "maintenance of {} from {} to {} scheduled at sequence {seq}",
                nodes.join(", "),
                format_ms(start_ms),
                format_ms(end_ms)
            );
            Ok(())
        }
    }
}

/// Appends `body` on node `name`'s subject, if it has not moved since `entry` was read.
async fn change(
    conn: &Connection,
    cluster: &str,
    name: &str,
    kind: &str,
    now: i64,
    body: Body,
    entry: &book::NodeEntry,
) -> anyhow::Result<u64> {
    let seq = admin::append_change(
        &conn.js,
        subjects::node(cluster, name),
        &format!("{kind}-{name}"),
        cluster,
        now,
        body,
        entry.last_sequence,
    )
    .await?;
    Ok(seq)
}

fn list(book: &NodeBook, cluster: &str, now: i64) {
    let gpus: u64 = book
        .nodes
        .values()
        .filter(|e| e.standing != Standing::Removed)
        .map(|e| u64::from(e.gpus))
        .sum();
    let live = book
        .nodes
        .values()
        .filter(|e| e.standing != Standing::Removed);
    println!("cluster {cluster}: {} nodes, {gpus} GPUs", live.count());
    for (name, e) in &book.nodes {
        let reason = if e.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", e.reason)
        };
        println!(
            "  {name:<20} {:>3} GPUs  {}{reason}",
            e.gpus,
            e.standing.words()
        );
        if e.standing == Standing::Removed {
            continue;
        }
        for w in book.windows_ahead(name, now) {
            let why = if w.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", w.reason)
            };
            println!(
                "  {:<20}            maintenance {} to {}{why}",
                "",
                format_ms(w.start_ms),
                format_ms(w.end_ms)
            );
        }
    }
}
