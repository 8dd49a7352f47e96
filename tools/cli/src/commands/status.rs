//! `fairshare status`: per allocation, its share of the cluster, window usage against allocated
//! time, the owed/delivered ledger, the GPUs it runs now against its share floor (its share of
//! the cluster's GPUs) and the GPUs its jobs wait for, as the accounting service folded them.

use anyhow::bail;
use clap::Args;
use fairshare_events::pb::{self, usage_reply};
use fairshare_events::{codec, subjects};

use super::{Connection, budget_tree, format_ms};

/// Which cluster.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The cluster.
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    /// Only this allocation, or this inner account and every account below it ("research" or
    /// "research/", as the table writes it).
    #[arg(long, default_value = "")]
    path: String,
}

fn hours(gpu_ms: u64) -> f64 {
    gpu_ms as f64 / 3.6e6
}

/// Prints the status table.
pub async fn status(args: StatusArgs, conn: &Connection) -> anyhow::Result<()> {
    let query = pb::UsageQuery {
        cluster: args.cluster.clone(),
        path: args.path.clone(),
        publish_snapshot: false,
    };
    let who = format!("the accounting service of cluster {}", args.cluster);
    let reply = conn
        .ask(
            subjects::usage_api(&args.cluster),
            codec::encode(&query),
            &who,
        )
        .await?;
    let report = match codec::decode_usage_reply(&reply.payload)?.result {
        Some(usage_reply::Result::Report(r)) => r,
        Some(usage_reply::Result::Rejected(r)) => bail!("refused: {}", r.message),
        None => bail!("empty reply from the accounting service"),
    };
    let tree = budget_tree(conn, &args.cluster).await?;
    for line in header(&report) {
        fairshare_runtime::outln!("{line}");
    }
    fairshare_runtime::outln!(
        "{:<40} {:>8} {:>12} {:>12} {:>7} {:>12} {:>8} {:>8} {:>10}",
        "account",
        "share",
        "used GPU-h",
        "alloc GPU-h",
        "ratio",
        "owed deliv.",
        "running",
        "queued",
        "base floor"
    );
    for a in &report.accounts {
        let fraction = tree.as_ref().and_then(|t| {
            t.accounts
                .iter()
                .position(|n| n.path == a.path)
                .map(|id| t.fraction(id))
        });
        // Display only: the base floor is the fraction of the cluster's GPUs (SPEC departure,
        // see README "Share floor"; the hourly floor moves it within each hour, which
        // `fairshare explain` shows); the services compare exact integers.
        let share = fraction.map_or_else(
            || "-".to_owned(),
            |f| format!("{:.2}%", f.num as f64 * 100.0 / f.den as f64),
        );
        let floor = match fraction {
            Some(f) if report.cluster_gpus > 0 => {
                format!(
                    "{:.1}",
                    f.num as f64 * report.cluster_gpus as f64 / f.den as f64
                )
            }
            _ => "-".to_owned(),
        };
        // Display only; ranking compares the exact integers.
        let ratio = if a.allocated_gpu_ms == 0 {
            "-".to_owned()
        } else {
            format!("{:.3}", a.charged_gpu_ms as f64 / a.allocated_gpu_ms as f64)
        };
        let owed = report
            .ledger
            .iter()
            .find(|l| l.allocation == a.path && l.owed_gpu_ms > 0)
            .map_or_else(
                || "-".to_owned(),
                |l| {
                    format!(
                        "{:.1}%",
                        l.delivered_owed_gpu_ms as f64 * 100.0 / l.owed_gpu_ms as f64
                    )
                },
            );
        let name = if a.allocation {
            a.path.clone()
        } else {
            format!("{}/", a.path)
        };
        fairshare_runtime::outln!(
            "{name:<40} {share:>8} {:>12.1} {:>12.1} {ratio:>7} {owed:>12} {:>8} {:>8} {floor:>10}",
            hours(a.charged_gpu_ms),
            hours(a.allocated_gpu_ms),
            a.running_gpus,
            a.queued_gpus
        );
    }
    fairshare_runtime::outln!("{STATUS_LEGEND}");
    Ok(())
}

/// The report's first lines: the window, capacity and unallocated time, and owed time delivered
/// over every allocation.
fn header(report: &pb::UsageReport) -> Vec<String> {
    let mut lines = vec![format!(
        "cluster {}: window {:.1} days to {}, through sequence {}; capacity {:.1} GPU-h, \
         unallocated {:.1} GPU-h",
        report.cluster,
        report.window_ms as f64 / 86_400_000.0,
        format_ms(report.window_end_ms),
        report.through_sequence,
        hours(report.capacity_gpu_ms),
        hours(report.unallocated_gpu_ms)
    )];
    if let Some(all) = report.ledger_overall.as_ref().filter(|l| l.owed_gpu_ms > 0) {
        lines.push(format!(
            "owed GPU time delivered, every allocation, every hour closed: {:.2}% ({:.1} of \
             {:.1} GPU-h owed)",
            all.delivered_owed_gpu_ms as f64 * 100.0 / all.owed_gpu_ms as f64,
            hours(all.delivered_owed_gpu_ms),
            hours(all.owed_gpu_ms)
        ));
    }
    lines
}

/// What the columns hold, where a manager could read them otherwise.
const STATUS_LEGEND: &str = "\
used: GPU time charged in the window; ratio: used / alloc (the ranking also counts, ahead, the
  rest of running jobs' minimum runtimes: `fairshare explain` says where a job's allocation
  ranks); owed deliv.: owed GPU time delivered over every hour closed since the log began, not
  only the window, as a share of what it was owed; running / queued: GPUs its allocated jobs run
  on / wait for now (placed jobs not yet started count as queued, and jobs ordered off count
  as running until they stop or their grace ends: the share floor counts the opposite way, so
  for a grace period `fairshare explain` may say an allocation holds less than this; unallocated
  work, minimum runtime 0, is no allocation's and is not counted here); base floor: its fraction of the
  cluster's GPUs, before the hourly floor moves it. A group's row (ending in /) sums every path
  under it with usage in the window, allocations since removed or renamed too; its ranking
  sums only the allocations in the tree now.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_keeps_a_tenth_of_a_gpu_hour_and_gives_owed_delivery_overall() {
        let report = pb::UsageReport {
            cluster: "demo".into(),
            window_end_ms: 1_767_225_600_000,
            window_ms: 7 * 86_400_000,
            through_sequence: 42,
            capacity_gpu_ms: 36_000_000,
            unallocated_gpu_ms: 936_000,
            ledger_overall: Some(pb::LedgerEntry {
                owed_gpu_ms: 7_200_000,
                delivered_owed_gpu_ms: 7_128_000,
                ..Default::default()
            }),
            ..Default::default()
        };
        let lines = header(&report);
        assert!(
            lines[0].ends_with("capacity 10.0 GPU-h, unallocated 0.3 GPU-h"),
            "{lines:?}"
        );
        assert_eq!(
            lines[1],
            "owed GPU time delivered, every allocation, every hour closed: 99.00% (2.0 of 2.0 \
             GPU-h owed)"
        );
        // Nothing owed yet: no line to divide by zero on.
        let fresh = pb::UsageReport {
            ledger_overall: None,
            ..report
        };
        assert_eq!(header(&fresh).len(), 1);
    }
}
