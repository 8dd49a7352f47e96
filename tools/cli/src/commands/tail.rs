//! `fairshare tail`: the event log, decoded, for operators (human lines or JSON lines).

use clap::Args;
use fairshare_events::{codec, subjects};
use fairshare_runtime::log::Follower;

use super::{Connection, format_ms};

/// What to print.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Only this cluster's events.
    #[arg(long, value_parser = super::cluster_name)]
    cluster: Option<String>,
    /// Only events of these kinds (e.g. job_submitted,job_placed).
    /// `unknown` takes events of a kind newer than this build.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(fairshare_events::codec::EVENT_KINDS.iter().chain(&["unknown"])))]
    kind: Vec<String>,
    /// Start at this stream sequence (default: the beginning).
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Print what is there and stop instead of waiting for new events.
    #[arg(long)]
    no_follow: bool,
    /// One JSON object per line instead of human lines.
    #[arg(long)]
    json: bool,
}

/// Prints events until interrupted (or, with --no-follow, until caught up).
pub async fn tail(args: TailArgs, conn: &Connection) -> anyhow::Result<()> {
    let filter = match &args.cluster {
        Some(c) => subjects::cluster_events(c),
        None => format!("{}.>", subjects::EVENTS_PREFIX),
    };
    let mut follower = Follower::start(&conn.js, args.from, vec![filter]).await?;
    if args.no_follow && follower.pending_at_start == 0 {
        return Ok(());
    }
    while let Some(entry) = follower.next().await {
        let entry = entry?;
        let done = args.no_follow && entry.pending == 0;
        match &entry.event {
            Ok(event) => {
                let kind = codec::event_kind(event);
                if args.kind.is_empty() || args.kind.iter().any(|k| k == kind) {
                    if args.json {
                        let line = serde_json::json!({
                            "sequence": entry.sequence,
                            "subject": entry.subject,
                            "kind": kind,
                            "event": event,
                        });
                        fairshare_runtime::outln!("{line}");
                    } else {
                        let body = event
                            .body
                            .as_ref()
                            .map(|b| format!("{b:?}"))
                            .unwrap_or_default();
                        fairshare_runtime::outln!(
                            "#{:<8} {} {:<22} {}  {body}",
                            entry.sequence,
                            format_ms(event.at_ms),
                            kind,
                            entry.subject
                        );
                    }
                }
            }
            Err(e) => eprintln!(
                "#{} {}: unusable, folded as empty by the services: {e}",
                entry.sequence, entry.subject
            ),
        }
        if done {
            break;
        }
    }
    Ok(())
}
