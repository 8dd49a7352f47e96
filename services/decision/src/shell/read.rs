//! Reading one cluster's log from JetStream for an audit or a re-derivation.
//!
//! Place in the flow: a reader after the fact, beside the services (they follow the log with
//! [`Follower`] and checkpoints instead). The audits read the log twice and hold none of it:
//! the first read ([`read_each`]) notes what each decision names, the second
//! ([`read_again`]) folds and re-derives, so a long-lived cluster's log of any length is
//! audited in the memory of its folds. [`read_log`] keeps every entry, for tests and tools on
//! small logs.

use async_nats::jetstream;
use fairshare_events::subjects;
use fairshare_runtime::log::{FollowError, Follower, LogEntry};
use fairshare_runtime::two_reads::{Check, Plan};

/// Why the log could not be read for an audit.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The log could not be followed.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// The log holds no event of the cluster: a clean audit of nothing would keep a
    /// scheduled audit of a mistyped cluster green.
    #[error(
        "the log holds no events of cluster {0} (a typo? `fairshare tail --no-follow` shows \
         every cluster's events); nothing audited"
    )]
    NoEvents(String),
    /// The second read of an audit did not find the entries the first one read.
    #[error(
        "the log of cluster {cluster} changed between the audit's two reads ({} entries \
         through sequence {}, then {} through {}{}): entries were removed (a stream limit, a \
         purge) or the stream was made anew; nothing audited, run the audit again",
        first.entries,
        first.last_sequence,
        second.entries,
        second.last_sequence,
        made_anew(first, second)
    )]
    LogChanged {
        /// The cluster.
        cluster: String,
        /// What the first read found.
        first: LogExtent,
        /// What the second read found up to the first one's last sequence.
        second: LogExtent,
    },
}

/// Words for two reads of streams created at different times.
fn made_anew(first: &LogExtent, second: &LogExtent) -> &'static str {
    if first.stream_created_ns == second.stream_created_ns {
        ""
    } else {
        ", of a stream made anew"
    }
}

/// How far one read of a cluster's log went: what a second read must find again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogExtent {
    /// Entries of the cluster read.
    pub entries: usize,
    /// The last one's sequence (0: none).
    pub last_sequence: u64,
    /// When the stream read was created (Unix ns): a stream made again between two reads is
    /// another log, even with as many entries through the same sequence.
    pub stream_created_ns: i128,
}

/// Reads cluster `cluster`'s entries (`fairshare.events.<cluster>.>`) in order from the start,
/// up to and including `through` (or to the log's current end with `None`), handing each to
/// `each` as it comes.
async fn read_through(
    js: &jetstream::Context,
    cluster: &str,
    through: Option<u64>,
    mut each: impl FnMut(LogEntry),
) -> Result<LogExtent, AuditError> {
    let mut follower = Follower::start(js, 1, vec![subjects::cluster_events(cluster)]).await?;
    let mut extent = LogExtent {
        stream_created_ns: follower.stream_created_ns(),
        ..LogExtent::default()
    };
    if follower.pending_at_start == 0 {
        return Ok(extent);
    }
    while let Some(entry) = follower.next().await {
        let entry = entry?;
        let reached = through.is_some_and(|t| entry.sequence >= t);
        let done = entry.pending == 0 || reached;
        if through.is_none_or(|t| entry.sequence <= t) {
            extent.entries += 1;
            extent.last_sequence = entry.sequence;
            each(entry);
        }
        if done {
            return Ok(extent);
        }
    }
    Err(FollowError::Delivery("connection closed while reading the log".into()).into())
}

/// Reads cluster `cluster`'s entries (`fairshare.events.<cluster>.>`) in order from the start,
/// up to and including `through` (or to the log's current end with `None`), keeping them all.
pub async fn read_log(
    js: &jetstream::Context,
    cluster: &str,
    through: Option<u64>,
) -> Result<Vec<LogEntry>, AuditError> {
    let mut out = Vec::new();
    read_through(js, cluster, through, |entry| out.push(entry)).await?;
    Ok(out)
}

/// An audit's first read: every entry of cluster `cluster` to the log's current end, handed
/// to `each` and not kept. Refuses a cluster with no events at all ([`AuditError::NoEvents`]).
pub async fn read_each(
    js: &jetstream::Context,
    cluster: &str,
    mut each: impl FnMut(&LogEntry),
) -> Result<LogExtent, AuditError> {
    let extent = read_through(js, cluster, None, |entry| each(&entry)).await?;
    if extent.entries == 0 {
        return Err(AuditError::NoEvents(cluster.to_owned()));
    }
    Ok(extent)
}

/// An audit's second read: the entries [`read_each`] read (`first`), again, to its last
/// sequence (what landed since is left for the next audit). Refuses a log that no longer holds
/// them all ([`AuditError::LogChanged`]): the two reads would not be of one log.
pub async fn read_again(
    js: &jetstream::Context,
    cluster: &str,
    first: LogExtent,
    mut each: impl FnMut(&LogEntry),
) -> Result<(), AuditError> {
    let second = read_through(js, cluster, Some(first.last_sequence), |entry| each(&entry)).await?;
    if second != first {
        return Err(AuditError::LogChanged {
            cluster: cluster.to_owned(),
            first,
            second,
        });
    }
    Ok(())
}

/// Runs `plan`'s two reads over cluster `cluster`'s log in JetStream ([`read_each`], then
/// [`read_again`]): an audit of a log of any length that holds none of it.
pub async fn read_twice<P: Plan>(
    js: &jetstream::Context,
    cluster: &str,
    mut plan: P,
) -> Result<<P::Check as Check>::Report, AuditError> {
    let extent = read_each(js, cluster, |entry| plan.note(entry)).await?;
    let mut check = plan.check();
    read_again(js, cluster, extent, |entry| check.feed(entry)).await?;
    Ok(check.finish())
}
