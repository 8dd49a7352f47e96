//! Appending the policy and inventory events managers and operators produce (budget tree,
//! node registrations, cordons and maintenance windows), shared by the CLI, the demo stack and
//! the tests.
//!
//! Each change is checked against the newest event on its subject first: if that already says
//! the same (the same file applied twice, or a retry after a lost acknowledgement), nothing is
//! written. Otherwise the event is appended only if that subject has not moved since
//! (`Nats-Expected-Last-Subject-Sequence`), with a message id made of the content and that
//! sequence. So going back to an earlier budget (A, then B, then A again) writes A again, where
//! an id from the content alone would have been dropped as a duplicate of the first A for the
//! stream's whole duplicate window, and acknowledged as if it had been written.

use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::{codec, headers, subjects};

use crate::envelope::Envelope;
use crate::missing;

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot append to {subject}: {detail}")]
pub struct AppendError {
    /// The subject written to.
    pub subject: String,
    /// What JetStream said.
    pub detail: String,
    /// The subject moved since the caller read it (someone else appended there first): read
    /// it again, check the change still makes sense, and retry.
    pub stale: bool,
    /// The stream's acknowledgement never came: the event may have been stored or not (a lost
    /// acknowledgement, or a publish the server dropped for permissions). A change appended
    /// with an expected sequence ([`append_change`]) can be sent again safely: if it landed,
    /// the newest event there is that change.
    pub outcome_unknown: bool,
}

/// A request the server drops for permissions gets no reply: the only sign is the timeout, so
/// the error says what that can mean.
const PERMISSION_HINT: &str = "the server is unreachable, or this NATS identity may not \
                               publish there: budgets, inventory and nodes need the \
                               operator's, see `fairshare auth init`";

/// Appends one event and waits for the stream's acknowledgement; returns its sequence.
pub async fn append(
    js: &jetstream::Context,
    subject: String,
    event: &pb::Event,
    envelope: &Envelope,
) -> Result<u64, AppendError> {
    let explain = |e: &jetstream::context::PublishError| match e.kind() {
        PublishErrorKind::TimedOut => format!("{e} ({PERMISSION_HINT})"),
        PublishErrorKind::StreamNotFound => missing::describe(e),
        PublishErrorKind::WrongLastSequence => format!(
            "{e}: the subject changed while this was being applied (another operator?); \
             look at what is in force now and apply again"
        ),
        _ => e.to_string(),
    };
    let err = |e: jetstream::context::PublishError| AppendError {
        subject: subject.clone(),
        stale: e.kind() == PublishErrorKind::WrongLastSequence,
        outcome_unknown: e.kind() == PublishErrorKind::TimedOut,
        detail: explain(&e),
    };
    let (headers, payload) = (envelope.to_headers(), codec::encode(event));
    let ack = js
        .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
        .await
        .map_err(err)?
        .await
        .map_err(err)?;
    let ack = crate::log::resend_if_squatted(js, &subject, &headers, payload, ack)
        .await
        .map_err(err)?;
    Ok(ack.sequence)
}

/// The newest event on `subject`: its sequence (0 if there is none) and its body, if it
/// decodes.
async fn newest_on(
    js: &jetstream::Context,
    subject: &str,
) -> Result<(u64, Option<Body>), AppendError> {
    let err = |detail: String| AppendError {
        subject: subject.to_owned(),
        detail,
        stale: false,
        outcome_unknown: false,
    };
    let stream = js
        .get_stream_no_info(EVENTS_STREAM)
        .await
        .map_err(|e| err(missing::describe(&e)))?;
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => {
            let body = codec::decode_log_entry(&m.subject, &m.payload)
                .ok()
                .and_then(|e| e.body);
            Ok((m.sequence, body))
        }
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok((0, None)),
        // JetStream off or the stream not made: the usual set-up slip, not the identity.
        Err(e) => Err(err(match missing::missing(&e) {
            Some(m) => format!("cannot read the newest event there: {e} ({})", m.hint()),
            None => format!("cannot read the newest event there: {e} ({PERMISSION_HINT})"),
        })),
    }
}

/// What [`set_budget_expecting`] (and the registrations) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The sequence of the event in force now.
    pub sequence: u64,
    /// Whether this call wrote it (false: the newest event there said the same already).
    pub written: bool,
    /// The sequence of the newest event there before (0: none).
    pub replaced: u64,
}

/// Appends `body` on `subject` unless the newest event there already has the same body (then
/// nothing is written, whatever `expected` says), and, with `expected`, only if that newest
/// event is at sequence `expected` (0: none; otherwise a stale [`AppendError`], nothing
/// written). `kind` names the change in the message id.
async fn apply(
    js: &jetstream::Context,
    subject: String,
    kind: &str,
    cluster: &str,
    at_ms: i64,
    body: Body,
    expected: Option<u64>,
) -> Result<Applied, AppendError> {
    let (last, newest) = newest_on(js, &subject).await?;
    // Checked before the expectation: the same command retried after its acknowledgement was
    // lost finds its own change in force, which is what it asked for, not a change made
    // since it looked.
    if newest.as_ref() == Some(&body) {
        return Ok(Applied {
            sequence: last,
            written: false,
            replaced: last,
        });
    }
    if let Some(expected) = expected
        && expected != last
    {
        return Err(AppendError {
            detail: format!("its newest event is at sequence {last}, not {expected}"),
            subject,
            stale: true,
            outcome_unknown: false,
        });
    }
    let sequence = append_change(js, subject, kind, cluster, at_ms, body, last).await?;
    Ok(Applied {
        sequence,
        written: true,
        replaced: last,
    })
}

/// Appends `body` on `subject` only if the newest event there is still the one at sequence
/// `last` (0: none), which the caller checked the change against; returns its sequence. The
/// message id is made of `kind`, the content and `last`, so the same change retried is written
/// once, and a change made meanwhile by someone else fails it rather than interleaving.
pub async fn append_change(
    js: &jetstream::Context,
    subject: String,
    kind: &str,
    cluster: &str,
    at_ms: i64,
    body: Body,
    last: u64,
) -> Result<u64, AppendError> {
    let event = pb::Event {
        at_ms,
        body: Some(body),
    };
    // The time is left out of the id: the same change retried is the same message.
    let content = codec::encode(&pb::Event {
        at_ms: 0,
        body: event.body.clone(),
    });
    let envelope = Envelope {
        message_id: headers::policy_id(cluster, kind, headers::content_hash(&content), last),
        expected_last_subject_sequence: Some((last, None)),
        ..Default::default()
    };
    append(js, subject, &event, &envelope).await
}

/// Appends a budget tree (already validated by `fairshare_model::files::parse_budget`);
/// returns the sequence of the tree in force.
pub async fn set_budget(
    js: &jetstream::Context,
    at_ms: i64,
    set: pb::BudgetTreeSet,
) -> Result<u64, AppendError> {
    Ok(set_budget_expecting(js, at_ms, set, None).await?.sequence)
}

/// [`set_budget`], and with `expected` only if the tree in force is still the one written at
/// that sequence (0: none), as a manager saw it before deciding (`fairshare budget diff`).
pub async fn set_budget_expecting(
    js: &jetstream::Context,
    at_ms: i64,
    set: pb::BudgetTreeSet,
    expected: Option<u64>,
) -> Result<Applied, AppendError> {
    let subject = subjects::policy(&set.cluster);
    let cluster = set.cluster.clone();
    let body = Body::BudgetTreeSet(set);
    apply(js, subject, "budget", &cluster, at_ms, body, expected).await
}

/// Registers every node of an inventory; returns the last sequence written. Each node's
/// registration is written unless its newest event is that very registration: for a fresh
/// cluster (the demo stack, tests, benches). On a live one it would register again a node
/// cordoned since, or removed; `fairshare inventory apply` writes only what changed.
pub async fn register_nodes(
    js: &jetstream::Context,
    at_ms: i64,
    nodes: Vec<pb::NodeRegistered>,
) -> Result<u64, AppendError> {
    let mut last = 0;
    for node in nodes {
        let subject = subjects::node(&node.cluster, &node.node);
        let (cluster, kind) = (node.cluster.clone(), format!("node-{}", node.node));
        last = apply(
            js,
            subject,
            &kind,
            &cluster,
            at_ms,
            Body::NodeRegistered(node),
            None,
        )
        .await?
        .sequence;
    }
    Ok(last)
}
