//! `fairshare tail`: the event log, decoded, for operators (human lines or JSON lines).

use anyhow::bail;
use clap::Args;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_runtime::log::{Follower, LogEntry};

use super::{Connection, format_ms};

/// What to print.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Only this cluster's events (default: FAIRSHARE_CLUSTER if set, else every cluster's).
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: Option<String>,
    /// Only events of these kinds (e.g. job_submitted,job_placed). `unknown` takes events of
    /// a kind newer than this build (or with no body); `unusable`, entries that do not decode
    /// or sit on a subject their event does not belong to (the services fold both as empty).
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(fairshare_events::codec::EVENT_KINDS.iter().chain(&[UNKNOWN, UNUSABLE])))]
    kind: Vec<String>,
    /// Only this job's events (its id as `submit` or `fairshare queue` printed it): how a
    /// researcher follows one job from submission to its end. It stops after the event that
    /// ends the job (finished, failed, cancelled, or preempted when the submission it read said
    /// the job cannot resume); otherwise it follows until Ctrl-C.
    #[arg(long, value_parser = job_token)]
    job: Option<String>,
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

/// A `--job` value: a job id as the services write it ([`super::job_id`]), which must be one
/// subject token (no '.', wildcard or space), or the filter would take other subjects.
fn job_token(id: &str) -> Result<String, String> {
    super::job_id(id)
}

/// The kind of an entry whose event is of a kind newer than this build, or has no body.
const UNKNOWN: &str = "unknown";
/// The kind of an entry that does not decode, or is filed on a subject it does not belong to.
const UNUSABLE: &str = "unusable";

/// Width of the time column: an RFC 3339 instant with milliseconds.
const TIME_WIDTH: usize = "2026-01-01T00:00:00.000Z".len();

/// Prints events until interrupted (or, with --no-follow, until caught up).
pub async fn tail(args: TailArgs, conn: &Connection) -> anyhow::Result<()> {
    let filter = match (&args.cluster, &args.job) {
        (Some(c), Some(job)) => subjects::job(c, job),
        (None, Some(job)) => subjects::job_in_any_cluster(job),
        (Some(c), None) => subjects::cluster_events(c),
        (None, None) => format!("{}.>", subjects::EVENTS_PREFIX),
    };
    let mut follower = Follower::start(&conn.js, args.from, vec![filter]).await?;
    if follower.pending_at_start == 0 {
        // Said on stderr, so a pipe reading the events still gets none. Following, it says
        // so too: a mistyped id, or a cluster taken from `FAIRSHARE_CLUSTER` that is not the
        // job's, would otherwise wait for ever without a word.
        let nothing = nothing_in_log(&args);
        if args.no_follow {
            eprintln!("{nothing}");
            return Ok(());
        }
        // Following on from a later sequence (after a log read before) waits for new events
        // as a rule; a job, or a whole log, with nothing in it is what a typo looks like.
        if args.job.is_some() || args.from <= 1 {
            eprintln!("{nothing}; waiting for them (Ctrl-C stops)");
        }
    }
    let mut life = JobLife::default();
    while let Some(entry) = follower.next().await {
        // A delivery that failed once (a server restarting, a stream leader moving) is retried
        // by the follower, which is called again, as the services do; only a stream made
        // anew ends the tail (its sequences started over).
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) if e.ends_following() => return Err(e.into()),
            Err(e) => {
                eprintln!("warning: {e}; reading on");
                continue;
            }
        };
        let mut done = args.no_follow && entry.pending == 0;
        let kind = match &entry.event {
            Ok(event) => codec::event_kind(event),
            Err(codec::DecodeError::UnknownBody) => UNKNOWN,
            Err(_) => UNUSABLE,
        };
        if args.kind.is_empty() || args.kind.iter().any(|k| k == kind) {
            print(&entry, kind, args.json);
        }
        if args.job.is_some()
            && let Ok(event) = &entry.event
        {
            done |= life.ends_with(event);
        }
        if done {
            return Ok(());
        }
    }
    // The follower ends only when the connection does: whatever was printed, the tail did not
    // reach the end it was asked for.
    bail!("the connection to the server closed before the tail ended")
}

/// What to say when the log holds none of the events `args` asks for (from its `--from`).
fn nothing_in_log(args: &TailArgs) -> String {
    match &args.cluster {
        _ if args.job.is_some() => format!(
            "no events of job {:?}{} in the log from sequence {} (is the id right?)",
            args.job.as_deref().unwrap_or_default(),
            args.cluster
                .as_ref()
                .map(|c| format!(" in cluster {c:?}"))
                .unwrap_or_default(),
            args.from
        ),
        Some(c) if args.from <= 1 => {
            format!("no events of cluster {c:?} in the log (is the name right?)")
        }
        Some(c) => format!(
            "no events of cluster {c:?} in the log from sequence {} (the log may end before it)",
            args.from
        ),
        None => format!("no events in the log from sequence {}", args.from),
    }
}

/// What a `--job` tail has read of its job's life, to stop where the job ends.
#[derive(Debug, Default)]
struct JobLife {
    /// Whether the job resumes after a preemption, once its submission was read.
    resumable: Option<bool>,
}

impl JobLife {
    /// Whether `event` ends the job: nothing follows it in the job's life. A preempted job
    /// whose submission was not read may be requeued, so the tail goes on.
    fn ends_with(&mut self, event: &pb::Event) -> bool {
        match &event.body {
            Some(Body::JobSubmitted(s)) => {
                self.resumable = s.spec.as_ref().map(|spec| spec.resumable);
                false
            }
            Some(Body::JobFinished(_) | Body::JobFailed(_) | Body::JobCancelled(_)) => true,
            Some(Body::JobPreempted(_)) => self.resumable == Some(false),
            _ => false,
        }
    }
}

/// One entry, as a JSON line or a human line. Entries the services fold as empty are printed
/// too, with why, so a reader sees every sequence.
fn print(entry: &LogEntry, kind: &str, json: bool) {
    match (&entry.event, json) {
        (Ok(event), true) => {
            let line = serde_json::json!({
                "sequence": entry.sequence,
                "subject": entry.subject,
                "kind": kind,
                "event": event,
            });
            fairshare_runtime::outln!("{line}");
        }
        (Err(e), true) => {
            let line = serde_json::json!({
                "sequence": entry.sequence,
                "subject": entry.subject,
                "kind": kind,
                "error": format!("folded as empty by the services: {e}"),
            });
            fairshare_runtime::outln!("{line}");
        }
        (Ok(event), false) => {
            let body = event
                .body
                .as_ref()
                .map(super::tail_line::summary)
                .unwrap_or_default();
            // Subjects, ids and reasons are whatever a publisher wrote: shown escaped.
            let line = format!(
                "#{:<8} {:<TIME_WIDTH$} {:<22} {}  {body}",
                entry.sequence,
                format_ms(event.at_ms),
                kind,
                entry.subject
            );
            fairshare_runtime::outln!("{}", super::printable(&line));
        }
        (Err(e), false) => {
            // No event time to show: the time the stream stored it.
            let stored = entry.stored_ms.map(format_ms).unwrap_or_default();
            let line = format!(
                "#{:<8} {:<TIME_WIDTH$} {:<22} {}  folded as empty by the services: {e}",
                entry.sequence, stored, kind, entry.subject
            );
            fairshare_runtime::outln!("{}", super::printable(&line));
        }
    }
}
