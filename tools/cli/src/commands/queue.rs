//! `fairshare queue`: a cluster's live jobs, waiting ones in the order the next decision cycle
//! would meet them, each with its status and why it waits (asked of the cluster's decision
//! service, which decides afresh on demand). How a researcher finds the job to `explain`, and
//! an operator sees what waits behind what.

use anyhow::bail;
use clap::Args;
use fairshare_decision::domain::listing::MAX_LISTED;
use fairshare_events::pb::{self, queue_reply};
use fairshare_events::{codec, subjects};
use fairshare_model::words::count;

use super::{Connection, format_ms};

/// Which jobs.
#[derive(Debug, Args)]
pub struct QueueArgs {
    /// The cluster.
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    /// Only jobs of this allocation, or of every allocation under this account ("research" or
    /// "research/"); default: every job, unallocated work included.
    #[arg(long, default_value = "")]
    allocation: String,
    /// Only jobs submitted for this user (as `submit --user` gave it, by default the
    /// submitter's $USER); default: everyone's.
    #[arg(long, default_value = "")]
    user: String,
    /// At most this many jobs (the service lists at most 2,000).
    #[arg(
        long,
        default_value_t = 100,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(1..=MAX_LISTED as i64)
    )]
    limit: u32,
    /// Under each job, its reason in words (as `fairshare explain` gives it).
    #[arg(long)]
    why: bool,
    /// The listing as one JSON object (`QueueListing` of the schema: basis, jobs, matched)
    /// instead of a table, for programs.
    #[arg(long, conflicts_with = "why")]
    json: bool,
}

/// Prints the listing.
pub async fn queue(args: QueueArgs, conn: &Connection) -> anyhow::Result<()> {
    let request = pb::QueueRequest {
        allocation: args.allocation.clone(),
        limit: args.limit,
        user: args.user.clone(),
    };
    let who = format!("the decision service of cluster {}", args.cluster);
    let reply = conn
        .ask(
            subjects::queue_api(&args.cluster),
            codec::encode(&request),
            &who,
        )
        .await?;
    let listing = match codec::decode_queue_reply(&reply.payload)?.result {
        Some(queue_reply::Result::Listing(l)) => l,
        Some(queue_reply::Result::Rejected(r)) => bail!("refused: {}", r.message),
        None => bail!("empty reply from the decision service"),
    };
    if args.json {
        fairshare_runtime::outln!("{}", serde_json::to_string(&listing)?);
    } else {
        fairshare_runtime::out!("{}", render(&args.cluster, &listing, args.why));
    }
    Ok(())
}

/// A span of time in its two largest units ("3d 4h", "2h 5m", "12m 3s", "45s"): enough to
/// compare waits at a glance.
fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {sec}s")
    } else {
        format!("{sec}s")
    }
}

/// The listing as a table: one line per job, and with `why` its reason beneath.
fn render(cluster: &str, listing: &pb::QueueListing, why: bool) -> String {
    let basis = listing.basis.unwrap_or_default();
    let now = basis.computed_at_ms;
    let shown = listing.jobs.len();
    let mut out = format!(
        "cluster {cluster}: {} (decided at {} through sequence {})\n",
        if shown as u64 == u64::from(listing.matched) {
            count(shown as u64, "live job")
        } else {
            format!("{shown} of {} live jobs shown", listing.matched)
        },
        format_ms(now),
        basis.through_sequence,
    );
    if listing.jobs.is_empty() {
        return out;
    }
    // As wide as the longest value listed: budget trees nest up to six levels.
    let widest = |field: fn(&pb::QueueEntry) -> &str, header: &str| {
        (listing.jobs.iter())
            .map(|j| super::printable(field(j)).chars().count())
            .max()
            .unwrap_or(0)
            .max(header.len())
    };
    let width = widest(|j| &j.allocation, "allocation");
    let user_width = widest(|j| &j.user, "user");
    out.push_str(&format!(
        "{:<36}  {:<user_width$} {:<width$} {:<9} {:>5} {:>9}  {:>4}  {}\n",
        "job", "user", "allocation", "status", "GPUs", "for", "rank", "reason"
    ));
    for j in &listing.jobs {
        // How long it has waited, or held its GPUs.
        let since = if matches!(j.status.as_str(), "placed" | "running") {
            j.since_ms
        } else {
            j.submitted_at_ms
        };
        let rank = if j.unallocated {
            "-".to_owned()
        } else if j.allocation_rank == 0 {
            "?".to_owned()
        } else {
            j.allocation_rank.to_string()
        };
        // Why it waits, or (running undisturbed) where it runs; unallocated work says so.
        let mut reason = if j.reason_code.is_empty() {
            (j.nodes.iter())
                .map(|n| format!("{}:{}", n.node, n.gpus))
                .collect::<Vec<_>>()
                .join(",")
        } else {
            j.reason_code.clone()
        };
        if j.unallocated {
            reason = if reason.is_empty() {
                "unallocated".to_owned()
            } else {
                format!("{reason} (unallocated)")
            };
        }
        out.push_str(&format!(
            "{:<36}  {:<user_width$} {:<width$} {:<9} {:>5} {:>9}  {:>4}  {}\n",
            j.job_id,
            super::printable(&j.user),
            super::printable(&j.allocation),
            j.status,
            j.gpus,
            span(now.saturating_sub(since)),
            rank,
            super::printable(&reason),
        ));
        if why && !j.reason.is_empty() {
            out.push_str(&format!("    {}\n", super::printable(&j.reason)));
        }
    }
    out.push_str(QUEUE_LEGEND);
    out
}

/// What the columns mean, printed under the table.
const QUEUE_LEGEND: &str = "\
for: for a placed or running job, how long it has held its GPUs; for a queued or preempted
  one, how long since it was submitted (earlier runs of a requeued job included); rank: its
  allocation's place in the ranking the cycle starts from (each job it places charges that
  job's allocation, so the list can meet an allocation's later jobs after a lower-ranked
  one's; -: unallocated work, which takes what allocated work leaves; ?: an allocation not in
  the budget tree); reason: why it waits (in words: --why, or `fairshare explain JOB`), or
  where it runs
";

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, status: &str) -> pb::QueueEntry {
        pb::QueueEntry {
            job_id: id.into(),
            allocation: "research/vision".into(),
            user: "ada".into(),
            status: status.into(),
            gpus: 8,
            submitted_at_ms: 1_000,
            allocation_rank: 2,
            ..Default::default()
        }
    }

    #[test]
    fn spans_keep_their_two_largest_units() {
        assert_eq!(span(45_000), "45s");
        assert_eq!(span(723_000), "12m 3s");
        assert_eq!(span(7_500_000), "2h 5m");
        assert_eq!(span(273_600_000), "3d 4h");
        // A clock behind a submission shows no wait rather than a negative one.
        assert_eq!(span(-5_000), "0s");
    }

    #[test]
    fn a_listing_shows_waits_ranks_reasons_and_where_jobs_run() {
        let now = 1_000 + 90_000;
        let mut waiting = entry("a", "queued");
        waiting.reason_code = "below_others_in_rank".into();
        waiting.reason = "it waits its turn".into();
        let mut running = entry("b", "running");
        running.since_ms = now - 60_000;
        running.nodes = vec![pb::NodeGpus {
            node: "gpu001".into(),
            gpus: 8,
        }];
        let mut scavenger = entry("c", "queued");
        scavenger.allocation = "research/language/pretraining/core".into();
        scavenger.unallocated = true;
        scavenger.allocation_rank = 0;
        scavenger.reason_code = "too_large_for_free_nodes".into();
        let mut free_running = entry("d", "running");
        free_running.unallocated = true;
        free_running.since_ms = now;
        free_running.nodes = vec![pb::NodeGpus {
            node: "gpu002".into(),
            gpus: 1,
        }];
        let listing = pb::QueueListing {
            basis: Some(pb::DecisionBasis {
                through_sequence: 42,
                computed_at_ms: now,
                cycle: 0,
                ..Default::default()
            }),
            jobs: vec![waiting, running, scavenger, free_running],
            matched: 5,
        };
        let text = render("demo", &listing, true);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("4 of 5 live jobs shown"), "{text}");
        assert!(lines[0].contains("through sequence 42"), "{text}");
        assert!(
            lines[2].starts_with('a') && lines[2].contains("1m 30s"),
            "{text}"
        );
        assert!(lines[2].ends_with("2  below_others_in_rank"), "{text}");
        assert!(
            lines[1].contains("  user ") && lines[2].contains("  ada "),
            "{text}"
        );
        assert_eq!(lines[3], "    it waits its turn");
        assert!(
            lines[4].contains(" 1m 0s ") && lines[4].ends_with("gpu001:8"),
            "{text}"
        );
        assert!(
            lines[5].ends_with("-  too_large_for_free_nodes (unallocated)"),
            "{text}"
        );
        // Unallocated work running shows where, and that it is unallocated.
        assert!(lines[6].ends_with("gpu002:1 (unallocated)"), "{text}");
        // The columns line up, however long the paths: each status starts where the header's
        // does.
        let column = lines[1].find("status").unwrap();
        for row in [2, 4, 5] {
            assert!(lines[row][column..].starts_with(['q', 'r']), "{text}");
        }
        // Without --why, no sentence lines.
        assert_eq!(
            render("demo", &listing, false).lines().count(),
            lines.len() - 1
        );
    }

    #[test]
    fn an_empty_queue_says_so_in_one_line() {
        let listing = pb::QueueListing::default();
        assert_eq!(
            render("demo", &listing, false).lines().count(),
            1,
            "no header without jobs"
        );
        assert!(render("demo", &listing, false).contains("0 live jobs"));
    }
}
