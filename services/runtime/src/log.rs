//! Following the event log in stream order.
//!
//! Every service's state is a fold of `FAIRSHARE_EVENTS`. A [`Follower`] delivers entries from a
//! given sequence on, filtered by subject, through an ordered consumer. When that consumer is
//! lost (a member died, the client reconnected, the client re-created it by itself) the
//! follower makes a new one from the entry after the last it delivered, first checking that the
//! stream is still the one it started on (see [`Follower::next`]). Entries that do not decode
//! are delivered as errors with their sequence: the service reports and skips them, it never
//! stops on them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, consumer};
use fairshare_events::headers::TraceParent;
use fairshare_events::{DecodeError, codec, pb, streams::EVENTS_STREAM};
use futures::StreamExt;
use tokio::time::Instant;

/// One entry of the log.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// Stream sequence (the fold's position).
    pub sequence: u64,
    /// Subject it was published on.
    pub subject: String,
    /// The decoded event, or what was wrong with its bytes.
    pub event: Result<pb::Event, DecodeError>,
    /// Matching entries still to come after this one when it was delivered; 0 means caught up.
    pub pending: u64,
    /// The trace context it was published with (`traceparent`), if any.
    pub trace: Option<TraceParent>,
    /// When the stream stored it (Unix ms), as the log records it; `None` for entries that did
    /// not come from a stream (tests, the simulator). Unlike the event's own time, which its
    /// writer's clock gives, no writer can set it.
    pub stored_ms: Option<i64>,
}

impl LogEntry {
    /// Logs the entry if it does not decode. A malformed entry cannot be un-written: services
    /// report it and fold past it as an event without a body, so one bad publisher cannot stop
    /// them.
    pub fn report_if_undecodable(&self) {
        if let Err(e) = &self.event {
            tracing::error!(sequence = self.sequence, subject = %self.subject, "log entry unusable (undecodable or misfiled), folded as empty: {e}");
        }
    }
}

/// Why following the log failed.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The events stream does not exist or cannot be read.
    #[error("cannot open stream {EVENTS_STREAM}: {0}")]
    Stream(String),
    /// The consumer could not be created.
    #[error("cannot create log consumer: {0}")]
    Consumer(String),
    /// The consumer failed while delivering.
    #[error("log delivery failed: {0}")]
    Delivery(String),
    /// The events stream was deleted and made again while the follower read it: its
    /// sequences started over, so what was folded from the old one does not describe the new
    /// one, and following on from the last sequence delivered would skip the new log's first
    /// entries. Nothing more is delivered; the service must start again (its checkpoint,
    /// tagged with the old stream's creation time, is refused and the new log folded from the
    /// beginning).
    #[error(
        "the events stream {EVENTS_STREAM} was deleted and made again under this follower \
         (the one it read was created at {}, the one there now at {}): restart to fold the \
         new log",
        utc_of_ns(*was_ns),
        utc_of_ns(*now_ns)
    )]
    StreamReplaced {
        /// Creation time of the stream the follower started on (Unix ns).
        was_ns: i128,
        /// Creation time of the stream there now (Unix ns).
        now_ns: i128,
    },
    /// The stream no longer holds, at the sequence of the last entry the follower delivered,
    /// that entry: it is the same stream (same creation time) rolled back, restored from a
    /// backup or a server that lost its newest entries (JetStream writes to disk every few
    /// minutes by default) and took new ones under their sequences. Following on would skip
    /// those; nothing more is delivered, and the service must start again (its checkpoint is
    /// checked the same way, and refused).
    #[error(
        "the events stream {EVENTS_STREAM} no longer holds the entry this follower delivered at \
         sequence {sequence} (restored from a backup, or the server lost its newest entries and \
         took new ones under their sequences): restart to fold the log anew"
    )]
    LogRewritten {
        /// The sequence of the last entry delivered.
        sequence: u64,
    },
}

impl FollowError {
    /// Whether the follower delivers nothing more (the log is another one now): the service
    /// stops, and its next start folds the log it finds.
    pub fn ends_following(&self) -> bool {
        matches!(
            self,
            FollowError::StreamReplaced { .. } | FollowError::LogRewritten { .. }
        )
    }
}

/// A stream's creation time (Unix ns, as JetStream reports it) in RFC 3339 UTC, for operators.
fn utc_of_ns(ns: i128) -> String {
    match i64::try_from(ns.div_euclid(1_000_000)) {
        Ok(ms) => fairshare_model::timestamp::utc(ms),
        Err(_) => format!("{ns} ns"),
    }
}

/// Which log a service folds, and how far it reaches, read when the service starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPosition {
    /// Sequence of the events stream's last entry (0 when empty).
    pub end: u64,
    /// When the events stream was created (Unix ns): a stream deleted and made again (a
    /// server whose store was wiped) is another log, whose sequences start over.
    pub created_ns: i128,
}

impl LogPosition {
    /// A checkpoint tag of `kind` for this log: a checkpoint written while folding another
    /// incarnation of the stream carries another tag, so it is refused and the state rebuilt,
    /// however long the new log has grown (comparing sequences alone only catches a new log
    /// shorter than the checkpoint).
    pub fn checkpoint_kind(&self, kind: &str) -> String {
        format!("{kind}@log-{}", self.created_ns)
    }
}

/// The events stream's [`LogPosition`].
pub async fn log_position(js: &jetstream::Context) -> Result<LogPosition, FollowError> {
    let info = js
        .get_stream(EVENTS_STREAM)
        .await
        .map_err(|e| FollowError::Stream(crate::missing::describe(&e)))?
        .get_info()
        .await
        .map_err(|e| FollowError::Stream(crate::missing::describe(&e)))?;
    Ok(LogPosition {
        end: info.state.last_sequence,
        created_ns: info.created.unix_timestamp_nanos(),
    })
}

/// Returns once the server has processed everything `client` sent before the call, its
/// subscriptions above all, so that a request another connection to the same server sends
/// afterwards finds them (servers of a cluster learn of them a moment later; callers retry).
/// `Client::flush` only writes the bytes out; the server may not have read a `SUB` yet, and a
/// request racing it gets "no responders". This makes one request on the same connection (the
/// events stream's info, which every service may read), and the server answers a connection's
/// messages in the order they came.
pub async fn settle_subscriptions(client: &async_nats::Client) -> Result<(), FollowError> {
    log_position(&jetstream::new(client.clone()))
        .await
        .map(|_| ())
}

/// The sequence of the newest entry of the events stream (`events`) on `filter`: one subject,
/// or a wildcard over one job's subjects. After a publish of unknown outcome a service waits
/// until its fold has reached it before deciding again.
pub async fn newest_sequence<I>(
    events: &jetstream::stream::Stream<I>,
    filter: &str,
) -> Result<u64, String> {
    match events.get_last_raw_message_by_subject(filter).await {
        Ok(m) => Ok(m.sequence),
        // Nothing on it (never written, or purged): a writer expecting sequence 0 is right.
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether the events stream's entry at `sequence`, which a duplicate acknowledgement named,
/// was written on `subject`: an earlier send of the same effect, or the same decision by
/// another instance (its bytes may differ; the first stands). Message ids are predictable from
/// the log, and a launcher may publish its jobs' reports with any headers: its message under
/// the id is on another subject (the decision, preemption and operator subjects are closed to
/// launchers), and the effect then did not land: its writer sends it again under
/// [`id_beside`].
pub async fn duplicate_is_own(
    js: &jetstream::Context,
    sequence: u64,
    subject: &str,
) -> Result<bool, String> {
    let events = js
        .get_stream_no_info(EVENTS_STREAM)
        .await
        .map_err(|e| e.to_string())?;
    match events.get_raw_message(sequence).await {
        Ok(m) => Ok(m.subject.as_str() == subject),
        Err(e) => Err(e.to_string()),
    }
}

/// `ack` answered a publish of `payload` on `subject` with `headers`. If it names a duplicate
/// another publisher's entry holds ([`duplicate_is_own`]), the same message is sent again
/// under [`id_beside`] (the same fence, the same bytes) and that answer is returned; otherwise
/// `ack` stands, also when the entry cannot be read. What every writer of a decision's effect
/// or an operator's change does with a duplicate: a squatted id would otherwise pass for the
/// effect having landed.
pub async fn resend_if_squatted(
    js: &jetstream::Context,
    subject: &str,
    headers: &async_nats::HeaderMap,
    payload: bytes::Bytes,
    ack: jetstream::publish::PublishAck,
) -> Result<jetstream::publish::PublishAck, jetstream::context::PublishError> {
    if !ack.duplicate {
        return Ok(ack);
    }
    let id = headers
        .get(fairshare_events::headers::MESSAGE_ID)
        .map(|v| v.as_str().to_owned());
    match (duplicate_is_own(js, ack.sequence, subject).await, id) {
        (Ok(false), Some(id)) => {
            tracing::warn!(
                subject,
                message_id = id,
                held_by = ack.sequence,
                "another publisher's entry holds this message id: sent again under an id of \
                 its own"
            );
            let mut beside = headers.clone();
            beside.insert(
                fairshare_events::headers::MESSAGE_ID,
                id_beside(&id, ack.sequence).as_str(),
            );
            js.publish_with_headers(subject.to_owned(), beside, payload)
                .await?
                .await
        }
        (Err(e), _) => {
            tracing::debug!(subject, "cannot read a duplicate's entry: {e}");
            Ok(ack)
        }
        _ => Ok(ack),
    }
}

/// The message id an effect is sent under when `id` is held by another publisher's entry at
/// `sequence` ([`duplicate_is_own`]): unique to that entry, and the same on every resend.
pub fn id_beside(id: &str, sequence: u64) -> String {
    format!("{id}:{sequence}")
}

/// When the events stream stored its entry at `sequence` (Unix ms, as [`LogEntry::stored_ms`]
/// gives it); `None` if it holds no entry there (never written, deleted, or past its end).
pub async fn stored_ms_at(js: &jetstream::Context, sequence: u64) -> Result<Option<i64>, String> {
    let events = js
        .get_stream_no_info(EVENTS_STREAM)
        .await
        .map_err(|e| e.to_string())?;
    match events.get_raw_message(sequence).await {
        Ok(m) => Ok(i64::try_from(m.time.unix_timestamp_nanos() / 1_000_000).ok()),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The first and last sequence of the events stream.
pub async fn events_range(js: &jetstream::Context) -> Result<(u64, u64), String> {
    let mut events = js
        .get_stream(EVENTS_STREAM)
        .await
        .map_err(|e| crate::missing::describe(&e))?;
    let info = events.info().await.map_err(|e| e.to_string())?;
    Ok((info.state.first_sequence, info.state.last_sequence))
}

/// Whether a stream holding, at `sequence`, an entry stored at `found_ms` (`None`: none), with
/// entries from `first` to `last`, is still the log a follower read when it delivered the
/// entry at `sequence`, stored at `delivered_ms`. Another stored time means another entry
/// there (the log rolled back and written anew); none, with the log ending before it, the same;
/// none inside the log's range, an entry deleted. None before the log's first entry is the
/// front of the log cut away (a purge, size limits an operator set): what follows is still
/// the log the follower follows.
pub fn still_the_same_log(
    sequence: u64,
    delivered_ms: i64,
    found_ms: Option<i64>,
    first: u64,
    last: u64,
) -> bool {
    match found_ms {
        Some(found) => found == delivered_ms,
        None => sequence < first && sequence <= last,
    }
}

/// Whether the events stream still holds, at `sequence`, the entry stored at `stored_ms` that
/// a follower delivered or a checkpoint was folded through ([`still_the_same_log`]); an error
/// when the stream cannot be asked (the caller cannot tell, and reads on).
pub async fn still_holds(
    js: &jetstream::Context,
    sequence: u64,
    stored_ms: i64,
) -> Result<bool, String> {
    let (first, last) = match stored_ms_at(js, sequence).await? {
        Some(found) => return Ok(found == stored_ms),
        None => events_range(js).await?,
    };
    Ok(still_the_same_log(sequence, stored_ms, None, first, last))
}

/// The sequence of the newest entry of `cluster` in the events stream (0: none): where a
/// service that just took its cluster's lease must have folded to before it decides, or it
/// could miss the previous holder's last decisions.
pub async fn cluster_log_end(js: &jetstream::Context, cluster: &str) -> Result<u64, String> {
    let events = js
        .get_stream(EVENTS_STREAM)
        .await
        .map_err(|e| crate::missing::describe(&e))?;
    newest_sequence(
        &events,
        &fairshare_events::subjects::cluster_events(cluster),
    )
    .await
}

/// Delivers log entries in order.
pub struct Follower {
    messages: consumer::pull::Ordered,
    /// Matching entries in the stream when the follower started.
    pub pending_at_start: u64,
    /// To re-create the consumer when it has gone quiet (see [`Follower::next`]).
    js: jetstream::Context,
    /// The subject filters it was started with.
    filters: Vec<String>,
    /// Stream sequence of the last entry delivered (or the one before the first wanted).
    last_delivered: u64,
    /// When it last delivered an entry or checked for missed ones. The idle check counts
    /// from here, not from the call to [`Follower::next`]: every service calls `next` inside
    /// a `select!` that drops it whenever another branch fires (a pass or cycle timer every
    /// 5 s), so a timeout per call never expired and a follower whose consumer was lost stayed
    /// stalled for good.
    checked_at: Instant,
    /// How many idle checks it made (see [`Follower::idle_checks`]).
    idle_checks: u64,
    /// Entries skipped as repeats of ones delivered already (see [`Follower::next`]).
    repeats_skipped: u64,
    /// When it last tried to follow anew after a repeat, a re-read or a reconnect (see
    /// [`Follower::next`]): at most once per `RENEW_RETRY`.
    renew_tried_at: Option<Instant>,
    /// The entries after `last_delivered` must be read anew before anything else is
    /// delivered, for the reason given: an entry came without its stream metadata, or from a
    /// consumer the client made again on its own. A field, not a local, so a call dropped
    /// mid-way (inside a `select!`) does not forget it.
    reread: Option<&'static str>,
    /// The name of the consumer the follower made last. Entries delivered under another name
    /// come from a consumer async-nats made again by itself, perhaps on a stream made again
    /// (see [`Follower::next`]).
    consumer_name: String,
    /// How many times the client had connected when the current consumer was made. A higher
    /// count means the client reconnected since, perhaps to another member than the one
    /// holding the consumer (see [`Follower::next`]).
    connects: u64,
    /// When the stream it started on was created (Unix ns): another time at a later look
    /// means the stream was made again ([`FollowError::StreamReplaced`]).
    created_ns: i128,
    /// Set once the stream was found made again: every later call returns the error.
    replaced: Option<i128>,
    /// When the stream stored the last entry delivered (Unix ms), if known: checked whenever
    /// the follower follows anew, to catch a log rolled back under it.
    last_delivered_stored_ms: Option<i64>,
    /// Set once the stream was found rolled back under the follower
    /// ([`FollowError::LogRewritten`]): every later call returns the error.
    rewritten: bool,
    /// Attempts to follow anew that failed since the last one that worked: the first of a
    /// run is a warning, the rest (once a second while a stream elects its leader, say) debug
    /// lines, and the one that works says how many there were.
    failed_renewals: u32,
}

/// A new ordered consumer, and what the follower notes about it.
struct Consumed {
    /// Its entries, in order.
    messages: consumer::pull::Ordered,
    /// Matching entries in the stream when it was made.
    pending: u64,
    /// The client's connect count before it was made.
    connects: u64,
    /// When the stream was created (Unix ns).
    created_ns: i128,
    /// The consumer's name, which each entry it delivers carries.
    name: String,
}

/// Whether an entry at `sequence` was delivered already, the last delivered being
/// `last_delivered` (0: none yet; a follower started at `from` counts `from - 1` as delivered).
fn is_repeat(sequence: u64, last_delivered: u64) -> bool {
    sequence <= last_delivered
}

/// How long one pull of a [`Follower`] waits for entries (see [`Follower::start`]).
pub const FOLLOW_PULL_EXPIRES: Duration = Duration::from_secs(5);

/// The least time between two attempts of a [`Follower`] to follow anew after a repeat, a
/// re-read or a reconnect (see [`Follower::next`]).
const RENEW_RETRY: Duration = Duration::from_secs(1);

/// How long a [`Follower`] may deliver nothing before it asks the stream whether it missed
/// anything (see [`Follower::next`]).
pub const FOLLOW_IDLE_CHECK: Duration = Duration::from_secs(10);

/// How often a waiting [`Follower`] looks whether its client reconnected (a counter read, no
/// request).
const RECONNECT_POLL: Duration = Duration::from_millis(250);

impl Follower {
    /// Follows the entries whose subject matches one of `filters`, from sequence `from` on
    /// (the first sequence is 1; `from <= 1` starts at the beginning).
    pub async fn start(
        js: &jetstream::Context,
        from: u64,
        filters: Vec<String>,
    ) -> Result<Self, FollowError> {
        let consumed = Self::consume(js, from, filters.clone()).await?;
        Ok(Self {
            messages: consumed.messages,
            pending_at_start: consumed.pending,
            js: js.clone(),
            filters,
            last_delivered: from.saturating_sub(1),
            checked_at: Instant::now(),
            idle_checks: 0,
            repeats_skipped: 0,
            renew_tried_at: None,
            reread: None,
            consumer_name: consumed.name,
            connects: consumed.connects,
            created_ns: consumed.created_ns,
            replaced: None,
            last_delivered_stored_ms: None,
            rewritten: false,
            failed_renewals: 0,
        })
    }

    /// Notes that the entry before the first it delivers (a checkpoint's last, at `from - 1`)
    /// was stored at `stored_ms` (`None`: unknown): a log rolled back and written anew under a
    /// service resumed from a checkpoint at its end is then told apart as soon as the follower
    /// follows anew, not only after a first new entry ([`FollowError::LogRewritten`]).
    pub fn resuming_after(&mut self, stored_ms: Option<i64>) {
        if self.last_delivered > 0 {
            self.last_delivered_stored_ms = stored_ms;
        }
    }

    /// Checks that the follower reads the log `log` was read from (the position a service
    /// resumed its checkpoint against): a stream made again between the two reads would mix
    /// the old log's checkpoint with the new log's entries.
    pub fn expect_log(&mut self, log: &LogPosition) -> Result<(), FollowError> {
        if log.created_ns == self.created_ns {
            return Ok(());
        }
        let now_ns = self.created_ns;
        self.created_ns = log.created_ns;
        self.replaced = Some(now_ns);
        Err(FollowError::StreamReplaced {
            was_ns: log.created_ns,
            now_ns,
        })
    }

    /// When the stream it follows was created (Unix ns): a stream made again later is another
    /// log, whose sequences start over.
    pub fn stream_created_ns(&self) -> i128 {
        self.created_ns
    }

    /// How many times `js`'s client has connected (1 until its first reconnect).
    fn connects_of(js: &jetstream::Context) -> u64 {
        js.client().statistics().connects.load(Ordering::Relaxed)
    }

    /// An ordered consumer from sequence `from` on.
    async fn consume(
        js: &jetstream::Context,
        from: u64,
        filters: Vec<String>,
    ) -> Result<Consumed, FollowError> {
        // Read first: a reconnect while the consumer is being made counts as after it.
        let connects = Self::connects_of(js);
        let mut stream = js
            .get_stream(EVENTS_STREAM)
            .await
            .map_err(|e| FollowError::Stream(crate::missing::describe(&e)))?;
        let deliver_policy = if from <= 1 {
            consumer::DeliverPolicy::All
        } else {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: from,
            }
        };
        let mut config = consumer::pull::OrderedConfig {
            deliver_policy,
            // Each pull waits at most this long, and the server's idle heartbeat follows it
            // (half of it). Two missed heartbeats make the client re-create the consumer, which
            // the follower notices by its new name and replaces with one of its own (see
            // `next`): with the defaults (30 s, 15 s) a follower whose cluster member died
            // stalled for about a minute; with 5 s it is back within seconds.
            max_expires: FOLLOW_PULL_EXPIRES,
            ..Default::default()
        };
        match filters.len() {
            0 => {}
            1 => config.filter_subject = filters[0].clone(),
            _ => config.filter_subjects = filters,
        }
        let mut consumer = stream
            .create_consumer(config)
            .await
            .map_err(|e| FollowError::Consumer(e.to_string()))?;
        let info = consumer
            .info()
            .await
            .map_err(|e| FollowError::Consumer(e.to_string()))?;
        let (pending_at_start, name) = (info.num_pending, info.name.clone());
        // Read once the consumer exists: a stream made again before this read has the consumer
        // on it or deleted with the old one, so the time read is the consumer's stream's.
        let created_ns = stream
            .info()
            .await
            .map_err(|e| FollowError::Stream(crate::missing::describe(&e)))?
            .created
            .unix_timestamp_nanos();
        let messages = consumer
            .messages()
            .await
            .map_err(|e| FollowError::Consumer(e.to_string()))?;
        Ok(Consumed {
            messages,
            pending: pending_at_start,
            connects,
            created_ns,
            name,
        })
    }

    /// Delivers every entry that existed when the follower started to `apply`, in order, and
    /// returns how many there were. This is how each service folds the log to its end before it
    /// serves.
    pub async fn catch_up(&mut self, mut apply: impl FnMut(LogEntry)) -> Result<u64, FollowError> {
        if self.pending_at_start == 0 {
            return Ok(0);
        }
        let mut applied = 0;
        while let Some(entry) = self.next().await {
            let entry = entry?;
            let done = entry.pending == 0;
            apply(entry);
            applied += 1;
            if done {
                return Ok(applied);
            }
        }
        Err(FollowError::Delivery(
            "connection closed during catch-up".into(),
        ))
    }

    /// The next entry; waits for one to be published. `None` when the connection is closed.
    ///
    /// After [`FOLLOW_IDLE_CHECK`] with nothing delivered it asks the stream for its last
    /// sequence. If the stream has moved past the last entry delivered, the consumer may be
    /// gone without the client noticing (its cluster member died and the re-created pull
    /// never came back): a new one is made from the entry after the last delivered, which
    /// skips and repeats nothing. (Entries other than the filtered ones also move the stream,
    /// so a follower of a quiet part of a busy log is re-created every 10 s: one request or
    /// two, no entries lost.)
    ///
    /// An entry from a consumer the follower did not make (async-nats re-creates a lost
    /// ordered consumer by itself, under a new name) is not delivered: the follower follows
    /// anew from the entry after the last delivered, which checks that the stream is still the
    /// one it started on (a stream deleted and made again is another log, whose first entries
    /// the client's consumer would skip) and reads that entry again. Such a consumer also
    /// starts from the stream's first entry when it had delivered nothing yet.
    ///
    /// An entry at or before the last one delivered is skipped all the same, and makes the
    /// follower follow anew from the entry after the last delivered (a guard: a follower
    /// resumed at the log's end must not hand the whole log over again, nor move backwards).
    ///
    /// An entry whose stream metadata does not parse (so its sequence is unknown) is read
    /// again, by following anew from the entry after the last delivered, rather than passed
    /// over: the consumer has moved past it, and the next entry would otherwise take its place.
    ///
    /// Once its client has reconnected (the member it was connected to died or restarted), it
    /// follows anew from the entry after the last delivered without waiting for the idle
    /// check: the consumer may have died with that member, and async-nats's own re-creation
    /// of it was seen to take the full idle check after every member loss. Tried at most once
    /// per `RENEW_RETRY` until it succeeds (the stream may still be electing its leader).
    pub async fn next(&mut self) -> Option<Result<LogEntry, FollowError>> {
        let (message, sequence, pending, stored_ms) = loop {
            if let Some(now_ns) = self.replaced {
                return Some(Err(FollowError::StreamReplaced {
                    was_ns: self.created_ns,
                    now_ns,
                }));
            }
            if self.rewritten {
                return Some(Err(FollowError::LogRewritten {
                    sequence: self.last_delivered,
                }));
            }
            if let Some(why) = self.reread {
                // At most one attempt per `RENEW_RETRY`: an entry that keeps coming without its
                // metadata stalls the follower (with a warning each time), never skips.
                if let Some(tried) = self.renew_tried_at {
                    tokio::time::sleep(RENEW_RETRY.saturating_sub(tried.elapsed())).await;
                }
                self.renew_tried_at = Some(Instant::now());
                if !self.follow_anew(why).await && self.replaced.is_none() && !self.rewritten {
                    // Said, not swallowed: a catch-up fails (the service restarts), a serving
                    // loop logs it and calls again, which retries.
                    return Some(Err(FollowError::Consumer(format!(
                        "cannot read the log again after sequence {}",
                        self.last_delivered
                    ))));
                }
                self.reread = None;
                continue;
            }
            if Self::connects_of(&self.js) > self.connects
                && self
                    .renew_tried_at
                    .is_none_or(|t| t.elapsed() >= RENEW_RETRY)
            {
                self.renew_tried_at = Some(Instant::now());
                self.follow_anew("reconnected").await;
                // Stamped again once done: an attempt that waited out request timeouts (a
                // stream electing its leader) leaves the current consumer a second to deliver
                // before the next.
                self.renew_tried_at = Some(Instant::now());
                continue;
            }
            let idle_until = self.checked_at + FOLLOW_IDLE_CHECK;
            let wake = idle_until.min(Instant::now() + RECONNECT_POLL);
            let message = match tokio::time::timeout_at(wake, self.messages.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => return Some(Err(FollowError::Delivery(e.to_string()))),
                Ok(None) => return None,
                // Only a look at the reconnect count is due.
                Err(_) if Instant::now() < idle_until => continue,
                Err(_) => {
                    self.renew_if_behind().await;
                    // Only once the check is done: a call dropped during it checks again.
                    self.checked_at = Instant::now();
                    self.idle_checks += 1;
                    continue;
                }
            };
            let (sequence, pending, stored_ms) = match message.info() {
                Ok(info) if info.consumer != self.consumer_name => {
                    // async-nats made the consumer again by itself (its heartbeats stopped),
                    // from where it was: on a stream deleted and made again, that skips the
                    // new log's first entries without a word. Following anew checks which
                    // stream it is, and reads this entry again.
                    self.reread = Some("consumer made again by the client");
                    continue;
                }
                Ok(info) => (
                    info.stream_sequence,
                    info.pending,
                    i64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).ok(),
                ),
                Err(e) => {
                    // Without its sequence the entry cannot be delivered, and the consumer has
                    // moved past it: the next one would be delivered in its place and the fold
                    // would skip it for good. Read anew from the entry after the last one
                    // delivered (below), which reads this one again.
                    tracing::warn!(
                        last_delivered = self.last_delivered,
                        "log follower got an entry without its stream metadata ({e}); reading \
                         it again"
                    );
                    self.reread = Some("entry without metadata");
                    continue;
                }
            };
            if is_repeat(sequence, self.last_delivered) {
                // A repeat is no delivery: it does not put the idle check off.
                self.repeats_skipped += 1;
                if self
                    .renew_tried_at
                    .is_none_or(|t| t.elapsed() >= RENEW_RETRY)
                {
                    // Started over from the log's first entry: skipping its way back could
                    // mean reading the whole log again. Follow anew from where it left off.
                    // Tried at most once per `RENEW_RETRY`, noted before the attempt: if it
                    // fails, or the call is dropped mid-way (services call `next` inside a
                    // `select!`), the next repeat after the pause tries again.
                    tracing::warn!(
                        sequence,
                        last_delivered = self.last_delivered,
                        "log follower's consumer started over from an earlier entry; following \
                         the log anew after the last entry delivered"
                    );
                    self.renew_tried_at = Some(Instant::now());
                    self.follow_anew("started over").await;
                }
                continue;
            }
            self.checked_at = Instant::now();
            break (message, sequence, pending, stored_ms);
        };
        self.last_delivered = sequence;
        self.last_delivered_stored_ms = stored_ms;
        Some(Ok(LogEntry {
            sequence,
            subject: message.subject.to_string(),
            event: codec::decode_log_entry(&message.subject, &message.payload),
            pending,
            trace: crate::envelope::incoming_trace(message.headers.as_ref()),
            stored_ms,
        }))
    }

    /// How many times it went [`FOLLOW_IDLE_CHECK`] without delivering and asked the stream
    /// whether it missed anything (for tests and diagnostics).
    pub fn idle_checks(&self) -> u64 {
        self.idle_checks
    }

    /// How many entries it skipped as repeats of ones delivered already (for tests and
    /// diagnostics).
    pub fn repeats_skipped(&self) -> u64 {
        self.repeats_skipped
    }

    /// Re-creates the consumer from the entry after the last delivered if the stream holds
    /// later entries (see [`Follower::next`]); on any error keeps the current one.
    async fn renew_if_behind(&mut self) {
        let last = match self.js.get_stream(EVENTS_STREAM).await {
            Ok(mut stream) => match stream.info().await {
                Ok(info) if self.is_replaced(info.created.unix_timestamp_nanos()) => return,
                Ok(info) => info.state.last_sequence,
                Err(e) => {
                    tracing::debug!("log follower idle; cannot read the stream's end: {e}");
                    return;
                }
            },
            Err(e) => {
                tracing::debug!("log follower idle; cannot open the stream: {e}");
                return;
            }
        };
        if last < self.last_delivered && self.last_delivered_stored_ms.is_some() {
            // The stream ends before an entry it delivered: rolled back under it.
            self.note_rewritten();
            return;
        }
        if last <= self.last_delivered {
            return;
        }
        self.follow_anew("idle").await;
    }

    /// Whether the stream still holds the last entry delivered as it was delivered (same
    /// stored time); true when nothing was delivered yet, its time is unknown, or the stream
    /// cannot be asked. If not, notes it ([`FollowError::LogRewritten`] from then on).
    async fn still_holds_last_delivered(&mut self) -> bool {
        let Some(stored_ms) = self.last_delivered_stored_ms else {
            return true;
        };
        match still_holds(&self.js, self.last_delivered, stored_ms).await {
            Ok(true) => true,
            Ok(false) => {
                self.note_rewritten();
                false
            }
            Err(e) => {
                tracing::debug!(
                    sequence = self.last_delivered,
                    "cannot read back the last entry delivered ({e}); following on"
                );
                true
            }
        }
    }

    fn note_rewritten(&mut self) {
        tracing::error!(
            last_delivered = self.last_delivered,
            "the events stream no longer holds the last entry delivered (restored from a backup, \
             or the server lost its newest entries and took new ones under their sequences): the \
             log follower delivers nothing more"
        );
        self.rewritten = true;
    }

    /// Whether the stream now there, created at `created_ns`, is another than the one the
    /// follower started on; if so, notes it ([`FollowError::StreamReplaced`] from then on).
    fn is_replaced(&mut self, created_ns: i128) -> bool {
        if created_ns == self.created_ns {
            return false;
        }
        tracing::error!(
            was_created = %utc_of_ns(self.created_ns),
            now_created = %utc_of_ns(created_ns),
            last_delivered = self.last_delivered,
            "the events stream was deleted and made again under the log follower: it delivers \
             nothing more"
        );
        self.replaced = Some(created_ns);
        true
    }

    /// Replaces the consumer with one from the entry after the last delivered; false (keeping
    /// the current one) if it cannot, or if the stream is another one now
    /// ([`Follower::is_replaced`]). `why` names the cause in the log lines.
    async fn follow_anew(&mut self, why: &'static str) -> bool {
        let from = self.last_delivered + 1;
        match Self::consume(&self.js, from, self.filters.clone()).await {
            Ok(consumed) if self.is_replaced(consumed.created_ns) => false,
            // A server that came back without its newest entries comes back this way too (a
            // reconnect, or a consumer the client made again): check before reading on.
            Ok(_) if !self.still_holds_last_delivered().await => false,
            Ok(Consumed {
                messages,
                pending: missed,
                connects,
                name,
                ..
            }) => {
                // Usually an idle follower's log moved on only outside its filters: nothing
                // was missed, and that is not worth more than a debug line every 10 s.
                let failed = std::mem::take(&mut self.failed_renewals);
                if failed > 0 {
                    tracing::info!(
                        from,
                        missed,
                        why,
                        failed,
                        "log follower following the log anew after failed attempts"
                    );
                } else if missed > 0 {
                    tracing::info!(from, missed, why, "log follower following the log anew");
                } else {
                    tracing::debug!(from, why, "log follower following anew; nothing missed");
                }
                self.messages = messages;
                self.connects = connects;
                self.consumer_name = name;
                // The new consumer gets a full idle period before it is checked in turn.
                self.checked_at = Instant::now();
                true
            }
            Err(e) => {
                if self.failed_renewals == 0 {
                    tracing::warn!(
                        why,
                        "log follower cannot follow the log anew (it keeps trying; further \
                         failures are debug lines): {e}"
                    );
                } else {
                    tracing::debug!(
                        why,
                        failed = self.failed_renewals,
                        "log follower still cannot follow the log anew: {e}"
                    );
                }
                self.failed_renewals = self.failed_renewals.saturating_add(1);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FollowError, still_the_same_log};

    #[test]
    fn a_log_is_the_same_while_it_holds_the_entry_as_delivered_or_only_lost_its_front() {
        // Entry 10, delivered as stored at 1,000.
        assert!(still_the_same_log(10, 1_000, Some(1_000), 1, 20));
        // Another entry there: rolled back and written anew.
        assert!(!still_the_same_log(10, 1_000, Some(1_001), 1, 20));
        // None there, the log ending before it: rolled back.
        assert!(!still_the_same_log(10, 1_000, None, 1, 8));
        // None there inside the log: deleted.
        assert!(!still_the_same_log(10, 1_000, None, 5, 20));
        // The front cut away past it (a purge keeps the sequence going): the same log.
        assert!(still_the_same_log(10, 1_000, None, 21, 20));
        assert!(still_the_same_log(10, 1_000, None, 15, 30));
    }

    #[test]
    fn a_replaced_stream_is_reported_with_both_creation_times_in_utc() {
        let e = FollowError::StreamReplaced {
            was_ns: 1_796_180_709_502_000_123,
            now_ns: 1_796_180_712_000_000_000,
        };
        let text = e.to_string();
        assert!(
            text.contains("created at 2026-12-02T03:05:09.502Z"),
            "{text}"
        );
        assert!(text.contains("there now at 2026-12-02T03:05:12Z"), "{text}");
        assert!(!text.contains(" ns"), "{text}");
    }
}
