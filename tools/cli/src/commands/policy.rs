//! `fairshare budget …` and `fairshare inventory …`: validate a file, show what it means, and
//! append it to the log. A file that does not validate is refused whole; nothing is written.

use std::future::Future;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use fairshare_model::budget::BudgetTree;
use fairshare_model::files;
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, SystemClock};

use super::Connection;

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
    /// Validate an inventory file and register every node in it.
    Apply {
        /// The TOML inventory file.
        file: PathBuf,
    },
}

fn read(file: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))
}

fn print_budget(set: &fairshare_events::pb::BudgetTreeSet) -> anyhow::Result<()> {
    let tree = BudgetTree::from_accounts(&set.accounts)?;
    println!(
        "cluster {}: {} allocations",
        set.cluster,
        tree.allocation_paths().count()
    );
    for path in tree.allocation_paths() {
        let id = tree.allocation(path).context("allocation vanished")?;
        let f = tree.fraction(id);
        // Display only: the services compare the exact fraction.
        let percent = f.num as f64 * 100.0 / f.den as f64;
        println!("  {path:<40} {percent:>7.3}%");
    }
    Ok(())
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
        BudgetCommand::Apply { file } => {
            let set = files::parse_budget(&read(&file)?)
                .with_context(|| format!("{} refused", file.display()))?;
            print_budget(&set)?;
            let conn = connect().await?;
            let seq = admin::set_budget(&conn.js, SystemClock.now_ms(), set).await?;
            println!("budget in force at sequence {seq}");
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
    let (file, apply) = match cmd {
        InventoryCommand::Check { file } => (file, false),
        InventoryCommand::Apply { file } => (file, true),
    };
    let inventory = files::parse_inventory(&read(&file)?)
        .with_context(|| format!("{} refused", file.display()))?;
    let gpus: u64 = inventory.nodes.iter().map(|(_, g)| u64::from(*g)).sum();
    println!(
        "cluster {}: {} nodes, {gpus} GPUs",
        inventory.cluster,
        inventory.nodes.len()
    );
    if apply {
        let conn = connect().await?;
        let seq = admin::register_nodes(&conn.js, SystemClock.now_ms(), inventory.registrations())
            .await?;
        println!("registered; the last node's registration is at sequence {seq}");
    }
    Ok(())
}
