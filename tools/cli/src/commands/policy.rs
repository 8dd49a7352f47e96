//! `fairshare budget …` and `fairshare inventory …`: validate a file, show what it means (for a
//! budget, also against the tree in force), and append it to the log. A file that does not
//! validate is refused whole; nothing is written.

use std::future::Future;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use fairshare_decision::domain::state::DecisionState;
use fairshare_events::pb::event::Body;
use fairshare_events::subjects;
use fairshare_model::budget::BudgetTree;
use fairshare_model::files;
use fairshare_model::words::{Gpus, count};
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, SystemClock};

use super::nodes::strand;
use super::not_changed::NodesNotChanged;
use super::{Connection, budget_in_force};

/// One allocation's share of the cluster before and after a budget change (`None`: not an
/// allocation of that tree).
#[derive(Debug, Clone, PartialEq)]
pub struct ShareChange {
    /// Allocation path.
    pub path: String,
    /// Its fraction in the tree in force, in per cent.
    pub before: Option<f64>,
    /// Its fraction in the new tree, in per cent.
    pub after: Option<f64>,
}

fn percent(tree: &BudgetTree, path: &str) -> Option<f64> {
    let f = tree.fraction(tree.allocation(path)?);
    // Display only: the services compare the exact fraction.
    Some(f.num as f64 * 100.0 / f.den as f64)
}

/// Every allocation of either tree, in path order, with its share in each.
pub fn share_changes(before: Option<&BudgetTree>, after: &BudgetTree) -> Vec<ShareChange> {
    let mut paths: Vec<&str> = after.allocation_paths().collect();
    if let Some(b) = before {
        paths.extend(b.allocation_paths());
    }
    paths.sort_unstable();
    paths.dedup();
    paths
        .into_iter()
        .map(|path| ShareChange {
            path: path.to_owned(),
            before: before.and_then(|b| percent(b, path)),
            after: percent(after, path),
        })
        .collect()
}

/// What becomes of the live work of the allocations tree `after` removes from `before`, one
/// line each, from the accounting service's figures now (a line saying it could not ask, if
/// it cannot); nothing if it removes none.
async fn removed_work(
    conn: &Connection,
    cluster: &str,
    before: Option<&BudgetTree>,
    after: &BudgetTree,
) -> Vec<String> {
    let changes = share_changes(before, after);
    let removed: Vec<&str> = changes
        .iter()
        .filter(|c| c.before.is_some() && c.after.is_none())
        .map(|c| c.path.as_str())
        .collect();
    if removed.is_empty() {
        return Vec::new();
    }
    let removed = removed.as_slice();
    let query = fairshare_events::pb::UsageQuery {
        cluster: cluster.to_owned(),
        path: String::new(),
        publish_snapshot: false,
    };
    let who = format!("the accounting service of cluster {cluster}");
    let report = match conn
        .ask(
            subjects::usage_api(cluster),
            fairshare_events::codec::encode(&query),
            &who,
        )
        .await
        .and_then(|reply| Ok(fairshare_events::codec::decode_usage_reply(&reply.payload)?))
    {
        Ok(fairshare_events::pb::UsageReply {
            result: Some(fairshare_events::pb::usage_reply::Result::Report(r)),
        }) => r,
        Ok(_) => return vec!["(the accounting service did not report live work)".to_owned()],
        Err(e) => {
            return vec![format!(
                "(could not ask about live work of the removed allocations: {e:#})"
            )];
        }
    };
    let mut lines = live_work_lines(&report, removed);
    // The accounting figures count allocated work only: unallocated jobs waiting under a
    // removed path are found in the decision service's fold of the log.
    match super::nodes::fold_log(conn, cluster).await {
        Ok(fold) => {
            lines.extend(unallocated_waiting_lines(fold.state(), removed));
        }
        Err(e) => lines.push(format!(
            "(could not read the log for unallocated work of the removed allocations: {e:#})"
        )),
    }
    lines
}

/// [`removed_work`]'s lines for `report`.
fn live_work_lines(report: &fairshare_events::pb::UsageReport, removed: &[&str]) -> Vec<String> {
    report
        .accounts
        .iter()
        .filter(|a| a.allocation && removed.contains(&a.path.as_str()))
        .filter(|a| a.running_gpus > 0 || a.queued_gpus > 0)
        .map(|a| {
            format!(
                "  {}: its allocated jobs run on {} and wait for {} now; under this tree \
                 its waiting jobs (unallocated ones too) start nowhere, their allocation being \
                 no leaf of it, and its running ones may be ordered off for anyone once past \
                 their minimum runtime",
                a.path,
                Gpus(a.running_gpus),
                Gpus(a.queued_gpus)
            )
        })
        .collect()
}

/// One line per removed allocation with unallocated jobs waiting in `state`: under the new
/// tree they start nowhere either, though they charge nobody.
fn unallocated_waiting_lines(state: &DecisionState, removed: &[&str]) -> Vec<String> {
    removed
        .iter()
        .filter_map(|path| {
            let q = state.queues().get(*path)?;
            let jobs = q.unallocated.len();
            if jobs == 0 {
                return None;
            }
            let gpus: u64 = q
                .unallocated
                .iter()
                .map(|(_, r)| r.shape.total_gpus())
                .sum();
            Some(format!(
                "  {path}: {} waiting for {} now; under this tree {} start nowhere, their \
                 allocation being no leaf of it: cancel them and submit them again under a leaf \
                 of the tree",
                count(jobs as u64, "unallocated job"),
                Gpus(gpus),
                if jobs == 1 { "it would" } else { "they would" },
            ))
        })
        .collect()
}

/// Every account's path and share, sorted: two trees with equal lists are the same tree.
fn shares_by_path(tree: &BudgetTree) -> Vec<(&str, u64)> {
    let mut shares: Vec<(&str, u64)> = tree
        .accounts
        .iter()
        .map(|a| (a.path.as_str(), a.share))
        .collect();
    shares.sort_unstable();
    shares
}

/// Whether `after` changes some account's share (or the accounts) of `before`, even where no
/// allocation's fraction of the cluster moves (siblings' shares scaled alike).
fn shares_differ(before: Option<&BudgetTree>, after: &BudgetTree) -> bool {
    before.is_none_or(|b| shares_by_path(b) != shares_by_path(after))
}

/// What changed for one account, after its two percentages of the cluster: empty when nothing
/// did. A change too small for three decimals is given with six (a manager who moved a share by
/// a hair sees that it moved); differences within rounding noise of the products along the
/// path are none.
fn change_note(before: Option<f64>, after: Option<f64>) -> String {
    match (before, after) {
        (None, Some(_)) => "  (new)".to_owned(),
        (Some(_), None) => "  (removed: no claim on the cluster any more)".to_owned(),
        (Some(b), Some(a)) if (a - b).abs() >= 0.0005 => format!("  ({:+.3} points)", a - b),
        (Some(b), Some(a)) if (a - b).abs() > 1e-9 * a.abs().max(b.abs()).max(1.0) => {
            format!("  ({:+.6} points)", a - b)
        }
        _ => String::new(),
    }
}

fn print_changes(cluster: &str, changes: &[ShareChange], shares_differ: bool) {
    fairshare_runtime::outln!("cluster {cluster}: share of the cluster, in force -> in the file");
    let mut moved = 0;
    for c in changes {
        let show = |p: Option<f64>| p.map_or_else(|| "-".to_owned(), |p| format!("{p:.3}%"));
        let note = change_note(c.before, c.after);
        if !note.is_empty() {
            moved += 1;
        }
        fairshare_runtime::outln!(
            "  {:<40} {:>9} -> {:>9}{note}",
            c.path,
            show(c.before),
            show(c.after)
        );
    }
    if moved == 0 && shares_differ {
        fairshare_runtime::outln!(
            "no allocation's share of the cluster changes, but account shares do (scaled alike \
             among siblings): `budget apply` writes the new tree"
        );
    } else if moved == 0 {
        fairshare_runtime::outln!("no account's share changes");
    }
}

/// Budget tree commands.
#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// Validate a budget file and print each allocation's fraction; writes nothing.
    Check {
        /// The TOML budget file.
        file: PathBuf,
    },
    /// Validate a budget file and append it; it takes effect from now.
    Apply {
        /// The TOML budget file.
        file: PathBuf,
        /// Append only if the cluster's policy subject still ends at this sequence: the
        /// number `budget diff` gives for `--expect-sequence` (the subject's newest entry,
        /// which is not the tree in force's own sequence when an entry after it was refused).
        /// A change another manager made since your diff is not silently replaced.
        #[arg(long)]
        expect_sequence: Option<u64>,
        /// The file's cluster is new: without it, a cluster the log has neither a budget tree
        /// nor nodes for is refused (a typo in the file's `cluster` would otherwise start a
        /// cluster nobody runs, for good: the log is append-only).
        #[arg(long)]
        new_cluster: bool,
    },
    /// Validate a budget file and show how each allocation's share of the cluster would change
    /// from the tree in force; writes nothing.
    Diff {
        /// The TOML budget file.
        file: PathBuf,
    },
}

/// Inventory commands.
#[derive(Debug, Subcommand)]
pub enum InventoryCommand {
    /// Validate an inventory file and print its nodes; writes nothing.
    Check {
        /// The TOML inventory file.
        file: PathBuf,
    },
    /// Validate an inventory file and register its nodes: new ones, and ones registered with
    /// other GPUs (a node registered as the file says is left as it stands, cordon and all).
    Apply {
        /// The TOML inventory file.
        file: PathBuf,
        /// Also register again nodes that were removed (`fairshare node remove`); without it,
        /// a file that still lists one is refused, so hardware pulled for repair does not come
        /// back into service by an unrelated change.
        #[arg(long)]
        readd: bool,
        /// The file's cluster is new: without it, a cluster the log has neither nodes nor a
        /// budget tree for is refused (a typo would register nodes under a cluster nobody
        /// runs, for good: the log is append-only).
        #[arg(long)]
        new_cluster: bool,
        /// Register nodes again with fewer GPUs than their jobs hold now; without it, such a
        /// file is refused, naming the nodes and jobs, so a typo (4 for 8) does not shrink a
        /// busy node under its work. The jobs run on until they end.
        #[arg(long)]
        force: bool,
    },
}

/// The refusal of a write for a cluster the log knows nothing of (no budget tree, no node
/// ever) without `--new-cluster`.
fn unknown_cluster(cluster: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "cluster {cluster:?} has no budget tree and no nodes in the log: if it is a new \
         cluster, pass --new-cluster; otherwise check the file's `cluster`; nothing written"
    )
}

fn read(file: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))
}

fn print_budget(set: &fairshare_events::pb::BudgetTreeSet) -> anyhow::Result<()> {
    let tree = BudgetTree::from_accounts(&set.accounts)?;
    fairshare_runtime::outln!(
        "cluster {}: {}",
        set.cluster,
        count(tree.allocation_paths().count() as u64, "allocation")
    );
    for path in tree.allocation_paths() {
        let id = tree.allocation(path).context("allocation vanished")?;
        let f = tree.fraction(id);
        // Display only: the services compare the exact fraction.
        let percent = f.num as f64 * 100.0 / f.den as f64;
        fairshare_runtime::outln!("  {path:<40} {percent:>7.3}%");
    }
    if let Some(warning) = claimless(&tree) {
        eprintln!("warning: {warning}");
    }
    if let Some(warning) = oversized(set) {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// What a NATS server takes in one message unless configured otherwise (`max_payload`).
const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// A warning for a tree whose event is larger than a NATS server takes by default: `budget
/// check` passes it, and `apply` would be refused (nothing written) unless the server allows
/// more.
fn oversized(set: &fairshare_events::pb::BudgetTreeSet) -> Option<String> {
    let event = fairshare_events::pb::Event {
        at_ms: 0,
        body: Some(Body::BudgetTreeSet(set.clone())),
    };
    let bytes = fairshare_events::codec::encode(&event).len();
    (bytes > DEFAULT_MAX_PAYLOAD).then(|| {
        format!(
            "the tree's event is {bytes} bytes, over the {DEFAULT_MAX_PAYLOAD} a NATS server \
             takes by default (max_payload): `budget apply` is refused, nothing written, unless \
             the server allows more"
        )
    })
}

/// A warning for a tree in which no allocation has a claim on the cluster (every share on
/// some path is 0): legal, but then nothing is owed to anyone and ranking goes by usage alone.
fn claimless(tree: &BudgetTree) -> Option<String> {
    let claimed = tree
        .allocation_paths()
        .filter_map(|p| tree.allocation(p))
        .any(|id| tree.fraction(id).num > 0);
    (!claimed).then(|| {
        "no allocation has a share of the cluster (every path has a share of 0): nothing is \
         owed to anyone, and allocations rank by usage alone"
            .to_owned()
    })
}

/// Runs a budget command.
pub async fn budget<F, Fut>(cmd: BudgetCommand, connect: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<Connection>>,
{
    match cmd {
        BudgetCommand::Check { file } => {
            let set = files::parse_budget(&read(&file)?)
                .with_context(|| format!("{} refused", file.display()))?;
            print_budget(&set)
        }
        BudgetCommand::Diff { file } => {
            let set = files::parse_budget(&read(&file)?)
                .with_context(|| format!("{} refused", file.display()))?;
            let after = BudgetTree::from_accounts(&set.accounts)?;
            let conn = connect().await?;
            let read = budget_in_force(&conn, &set.cluster).await?;
            let newest = read.newest;
            let before = match &read.in_force {
                Some((seq, held)) => {
                    fairshare_runtime::outln!(
                        "cluster {}: against the tree in force since sequence {seq} (`budget \
                         apply --expect-sequence {newest}` refuses if it changes before you \
                         apply)",
                        set.cluster
                    );
                    Some(BudgetTree::from_accounts(&held.accounts)?)
                }
                None => {
                    fairshare_runtime::outln!(
                        "cluster {}: no budget tree in force yet (`budget apply \
                         --expect-sequence {newest}` refuses if one is set before you apply; add \
                         --new-cluster if the log has no nodes for it either)",
                        set.cluster
                    );
                    None
                }
            };
            let differ = shares_differ(before.as_ref(), &after);
            print_changes(
                &set.cluster,
                &share_changes(before.as_ref(), &after),
                differ,
            );
            if let Some(warning) = claimless(&after) {
                eprintln!("warning: {warning}");
            }
            for line in removed_work(&conn, &set.cluster, before.as_ref(), &after).await {
                fairshare_runtime::outln!("{line}");
            }
            Ok(())
        }
        BudgetCommand::Apply {
            file,
            expect_sequence,
            new_cluster,
        } => {
            let set = files::parse_budget(&read(&file)?)
                .with_context(|| format!("{} refused", file.display()))?;
            // Shown once written: a refusal after a table of shares reads like an apply.
            let applying = set.clone();
            let after = BudgetTree::from_accounts(&set.accounts)?;
            let conn = connect().await?;
            // A new cluster has no tree to read (and one unreadable is no reason not to start
            // it): only the warning below would use it.
            let read = if new_cluster {
                budget_in_force(&conn, &set.cluster).await.ok()
            } else {
                Some(budget_in_force(&conn, &set.cluster).await?)
            };
            // The subject's newest entry is what the write replaces; the tree in force is the
            // newest usable one (the two differ after an entry the services refused).
            let read_newest = read.as_ref().map(|r| r.newest);
            let in_force = read.and_then(|r| r.in_force);
            if !new_cluster
                && in_force.is_none()
                && super::nodes::read_book(&conn, &set.cluster)
                    .await?
                    .nodes
                    .is_empty()
            {
                return Err(unknown_cluster(&set.cluster));
            }
            let applied =
                admin::set_budget_expecting(&conn.js, SystemClock.now_ms(), set, expect_sequence)
                    .await
                    .map_err(|e| {
                        if let (true, Some(expected)) = (e.stale, expect_sequence) {
                            anyhow::anyhow!(
                                "the cluster's policy subject moved past sequence {expected}: \
                                 the tree changed since you looked, or the number is not the \
                                 one `budget diff` printed for --expect-sequence ({}); nothing \
                                 written (`budget diff` again)",
                                e.detail
                            )
                        } else {
                            e.into()
                        }
                    })?;
            let (seq, replaced) = (applied.sequence, applied.replaced);
            print_budget(&applying)?;
            if !applied.written {
                fairshare_runtime::outln!("budget already in force since sequence {seq}");
            } else if replaced > 0 {
                fairshare_runtime::outln!(
                    "budget in force at sequence {seq} (replaces the tree of sequence {replaced})"
                );
            } else {
                fairshare_runtime::outln!("budget in force at sequence {seq}");
            }
            // What `budget diff` would have said of allocations the tree removes: their
            // waiting jobs start nowhere now. (Said after the write: it is done either way.)
            // Only about the tree read before, when that is the one replaced (another manager's
            // change in between would make it describe the wrong tree); and a tree read that no
            // longer validates fails nothing now that the new one is written.
            if applied.written
                && let Some((_, held)) = &in_force
                && read_newest == Some(replaced)
                && let Ok(before) = BudgetTree::from_accounts(&held.accounts)
            {
                for line in removed_work(&conn, &applying.cluster, Some(&before), &after).await {
                    eprintln!("warning:{line}");
                }
            }
            Ok(())
        }
    }
}

/// Runs an inventory command.
pub async fn inventory<F, Fut>(cmd: InventoryCommand, connect: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<Connection>>,
{
    let (file, apply, readd, new_cluster, force) = match cmd {
        InventoryCommand::Check { file } => (file, false, false, false, false),
        InventoryCommand::Apply {
            file,
            readd,
            new_cluster,
            force,
        } => (file, true, readd, new_cluster, force),
    };
    // An apply writes every node it has to whatever becomes of standard output meanwhile (a
    // reader gone after the first line must not leave the inventory half-applied).
    let _held = apply.then(fairshare_runtime::output::hold);
    let inventory = files::parse_inventory(&read(&file)?)
        .with_context(|| format!("{} refused", file.display()))?;
    let gpus = Gpus(inventory.nodes.iter().map(|(_, g)| u64::from(*g)).sum());
    fairshare_runtime::outln!(
        "cluster {}: {}, {gpus}",
        inventory.cluster,
        count(inventory.nodes.len() as u64, "node")
    );
    if !apply {
        for (name, gpus) in &inventory.nodes {
            fairshare_runtime::outln!("  {name:<20} {}", Gpus(u64::from(*gpus)));
        }
        return Ok(());
    }
    let conn = connect().await?;
    let book = super::nodes::read_book(&conn, &inventory.cluster).await?;
    if !new_cluster
        && book.nodes.is_empty()
        && budget_in_force(&conn, &inventory.cluster)
            .await?
            .in_force
            .is_none()
    {
        return Err(unknown_cluster(&inventory.cluster));
    }
    let changes = book.inventory_changes(inventory.registrations(), readd);
    if !changes.case_clashes.is_empty() {
        let clashes: Vec<String> = changes
            .case_clashes
            .iter()
            .map(|(file, registered)| format!("{file} (registered as {registered})"))
            .collect();
        bail!(
            "differ only by case from nodes in service: {}; nothing written: host names are \
             case-insensitive, so these would count the same GPUs twice. Spell them as \
             registered, or `fairshare node remove` the registered ones first",
            clashes.join(", ")
        );
    }
    if !changes.removed.is_empty() {
        bail!(
            "removed from the inventory: {} (`fairshare node remove`); nothing written: take \
             them out of the file, or pass --readd to put them back in service",
            changes.removed.join(", ")
        );
    }
    // A node given another GPU count: its running work (if it shrinks) and the queue are
    // checked against the change (a log read, so only then). Growing strands work too: a
    // multi-node job needs whole nodes of exactly its GPUs per node.
    let resizes = changes
        .write
        .iter()
        .any(|(r, _)| book.live(&r.node).is_some_and(|e| e.gpus != r.gpus));
    let fold = if resizes {
        Some(super::nodes::fold_log(&conn, &inventory.cluster).await?)
    } else {
        None
    };
    if let Some(fold) = &fold
        && !force
    {
        let registrations: Vec<_> = changes.write.iter().map(|(r, _)| r.clone()).collect();
        let overfull = strand::overfull(fold.state(), &registrations);
        if !overfull.is_empty() {
            bail!(
                "fewer GPUs than their jobs hold: {}; nothing written: drain {} first (`fairshare \
                 node cordon`, then wait until `fairshare node list` says drained), or pass \
                 --force to register {} under {} work",
                overfull.join("; "),
                if overfull.len() == 1 { "it" } else { "them" },
                if overfull.len() == 1 { "it" } else { "them" },
                if overfull.len() == 1 { "its" } else { "their" },
            );
        }
    }
    let now = SystemClock.now_ms();
    let mut written = 0;
    let mut not_changed = NodesNotChanged::new(changes.write.len());
    for (registration, last) in changes.write {
        let (name, gpus) = (registration.node.clone(), registration.gpus);
        let subject = subjects::node(&inventory.cluster, &name);
        let kind = format!("node-{name}");
        let body = Body::NodeRegistered(registration);
        match admin::append_change(
            &conn.js,
            subject,
            &kind,
            &inventory.cluster,
            now,
            body,
            last,
        )
        .await
        {
            Ok(seq) => {
                written += 1;
                fairshare_runtime::outln!(
                    "{name}: registered with {} at sequence {seq}",
                    Gpus(u64::from(gpus))
                );
            }
            // The other nodes are still written; apply again for this one (what is in place
            // is left alone).
            Err(e) => not_changed.note(&name, e.into()),
        }
    }
    fairshare_runtime::outln!(
        "{written} registered, {} already as the file says",
        changes.unchanged
    );
    if let Some(fold) = &fold {
        let mut after = fold.state().inventory().clone();
        for (name, gpus) in &inventory.nodes {
            if !not_changed.surely_unchanged(name) {
                after.register(name, *gpus);
            }
        }
        if let Some(warning) = strand::stranded_warning(&strand::stranded(fold.state(), &after)) {
            eprintln!("warning: {warning}");
        }
    }
    not_changed.finish()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tree(text: &str) -> BudgetTree {
        let set = files::parse_budget(text).unwrap();
        BudgetTree::from_accounts(&set.accounts).unwrap()
    }

    #[test]
    fn live_work_of_a_removed_allocation_is_named() {
        let account = |path: &str, running_gpus, queued_gpus| fairshare_events::pb::AccountUsage {
            path: path.into(),
            allocation: true,
            running_gpus,
            queued_gpus,
            ..Default::default()
        };
        let report = fairshare_events::pb::UsageReport {
            accounts: vec![account("a", 8, 1), account("b", 0, 0), account("c", 4, 0)],
            ..Default::default()
        };
        let lines = live_work_lines(&report, &["a", "b"]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("  a: its allocated jobs run on 8 GPUs and wait for 1 GPU now;"),
            "{lines:?}"
        );
    }

    /// Unallocated jobs waiting under a removed allocation are named too: the accounting
    /// figures leave them out, and they would start nowhere.
    #[test]
    fn unallocated_work_waiting_under_a_removed_allocation_is_named() {
        use fairshare_events::pb;
        let mut state = DecisionState::new("c");
        let submitted = |id: &str, allocation: &str, gpus: u32, min_runtime_s: i64| {
            fairshare_testkit::events::shaped_submitted("c", allocation, id, 1, gpus, min_runtime_s)
        };
        let bodies = [
            submitted("u1", "c", 4, 0),
            submitted("u2", "c", 2, 0),
            submitted("x", "c", 1, 60),
            submitted("v", "b", 1, 0),
        ];
        for (i, body) in bodies.into_iter().enumerate() {
            let event = pb::Event {
                at_ms: 1,
                body: Some(body),
            };
            state.apply(i as u64 + 1, &event).unwrap();
        }
        let lines = unallocated_waiting_lines(&state, &["c", "a"]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("  c: 2 unallocated jobs waiting for 6 GPUs now;"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_tree_without_any_claim_is_warned_about() {
        let none = tree("cluster = \"c\"\n[accounts.a]\nshare = 0\n[accounts.b]\nshare = 0\n");
        assert!(claimless(&none).is_some_and(|w| w.contains("nothing is owed")));
        let some = tree("cluster = \"c\"\n[accounts.a]\nshare = 0\n[accounts.b]\nshare = 1\n");
        assert_eq!(claimless(&some), None);
    }

    /// A tree too large for a server's default message size is warned about by `check`.
    #[test]
    fn a_tree_over_the_default_max_payload_is_warned_about() {
        let small = files::parse_budget("cluster = \"c\"\n[accounts.a]\nshare = 1\n").unwrap();
        assert_eq!(oversized(&small), None);
        // Built directly: the event's size is what counts, not how the file reads.
        let large = fairshare_events::pb::BudgetTreeSet {
            cluster: "c".into(),
            accounts: (0..30_000)
                .map(|i| fairshare_events::pb::Account {
                    name: format!("team-with-a-rather-long-name-kept-for-this-test-{i:05}"),
                    share: 1,
                    children: Vec::new(),
                })
                .collect(),
        };
        let warning = oversized(&large).unwrap();
        assert!(warning.contains("over the 1048576"), "{warning}");
    }

    #[test]
    fn every_allocation_of_either_tree_is_listed_with_its_share_in_each() {
        let before = tree("cluster = \"c\"\n[accounts.a]\nshare = 3\n[accounts.b]\nshare = 1\n");
        let after = tree("cluster = \"c\"\n[accounts.a]\nshare = 1\n[accounts.c]\nshare = 1\n");
        let changes = share_changes(Some(&before), &after);
        let rows: Vec<(&str, Option<f64>, Option<f64>)> = changes
            .iter()
            .map(|c| (c.path.as_str(), c.before, c.after))
            .collect();
        assert_eq!(
            rows,
            [
                ("a", Some(75.0), Some(50.0)),
                ("b", Some(25.0), None),
                ("c", None, Some(50.0))
            ]
        );
        // Against nothing in force, every allocation is new.
        assert!(
            share_changes(None, &after)
                .iter()
                .all(|c| c.before.is_none())
        );
    }

    #[test]
    fn a_share_moved_by_a_hair_is_shown_and_rounding_noise_is_not() {
        assert_eq!(change_note(Some(18.75), Some(12.5)), "  (-6.250 points)");
        // A change under the three decimals the percentages show.
        assert_eq!(
            change_note(Some(25.0), Some(25.0001)),
            "  (+0.000100 points)"
        );
        // 100 shares in 100,001 against 100 in 100,000: a millionth of a point.
        let before = 100.0 / 100_001.0 * 100.0;
        let after = 100.0 / 100_000.0 * 100.0;
        assert_eq!(
            change_note(Some(before), Some(after)),
            "  (+0.000001 points)"
        );
        // The same fraction reached by another product along the path: no change.
        let third = 100.0 / 3.0;
        let also_third = (2.0 / 3.0) * (1.0 / 2.0) * 100.0;
        assert_eq!(change_note(Some(third), Some(also_third)), "");
        assert_eq!(change_note(Some(third), Some(third)), "");
        assert_eq!(change_note(None, Some(third)), "  (new)");
        assert!(change_note(Some(third), None).starts_with("  (removed"));
    }
}
