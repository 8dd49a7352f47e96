//! Appending the policy and inventory events managers and operators produce (budget tree,
//! node registrations), shared by the CLI, the demo stack and the tests.
//!
//! Message ids are derived from the content, so applying the same file twice within the
//! duplicate window writes nothing the second time.

use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, headers, subjects};

use crate::envelope::Envelope;

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot append to {subject}: {detail}")]
pub struct AppendError {
    /// The subject written to.
    pub subject: String,
    /// What JetStream said.
    pub detail: String,
}

/// Appends one event and waits for the stream's acknowledgement; returns its sequence.
pub async fn append(
    js: &jetstream::Context,
    subject: String,
    event: &pb::Event,
    envelope: &Envelope,
) -> Result<u64, AppendError> {
    let err = |detail: String| AppendError {
        subject: subject.clone(),
        detail,
    };
    // A publish the server refuses for permissions is dropped without a reply: the only sign
    // is the missing acknowledgement, so the error says what that can mean.
    let explain = |e: jetstream::context::PublishError| match e.kind() {
        PublishErrorKind::TimedOut => format!(
            "{e} (the server is unreachable, or this NATS identity may not publish there: \
             budgets and inventory need the operator's, see `fairshare auth init`)"
        ),
        _ => e.to_string(),
    };
    let ack = js
        .publish_with_headers(subject.clone(), envelope.to_headers(), codec::encode(event))
        .await
        .map_err(|e| err(explain(e)))?
        .await
        .map_err(|e| err(explain(e)))?;
    Ok(ack.sequence)
}

/// Appends a budget tree (already validated by `fairshare_model::files::parse_budget`).
pub async fn set_budget(
    js: &jetstream::Context,
    at_ms: i64,
    set: pb::BudgetTreeSet,
) -> Result<u64, AppendError> {
    let subject = subjects::policy(&set.cluster);
    let id = headers::policy_id(
        &set.cluster,
        "budget",
        headers::content_hash(&codec::encode(&set)),
    );
    let event = pb::Event {
        at_ms,
        body: Some(Body::BudgetTreeSet(set)),
    };
    append(
        js,
        subject,
        &event,
        &Envelope {
            message_id: id,
            ..Default::default()
        },
    )
    .await
}

/// Registers every node of an inventory; returns the last sequence written.
pub async fn register_nodes(
    js: &jetstream::Context,
    at_ms: i64,
    nodes: Vec<pb::NodeRegistered>,
) -> Result<u64, AppendError> {
    let mut last = 0;
    for node in nodes {
        let subject = subjects::node(&node.cluster, &node.node);
        let id = headers::policy_id(
            &node.cluster,
            &format!("node-{}", node.node),
            u64::from(node.gpus),
        );
        let event = pb::Event {
            at_ms,
            body: Some(Body::NodeRegistered(node)),
        };
        last = append(
            js,
            subject,
            &event,
            &Envelope {
                message_id: id,
                ..Default::default()
            },
        )
        .await?;
    }
    Ok(last)
}
