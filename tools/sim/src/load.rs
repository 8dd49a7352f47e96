//! Loading a simulated log into JetStream, so the services' audit can check it.
//!
//! Place in the flow: after a simulation, against a fresh nats-server. The audit matches each
//! placement's basis (a stream sequence) against the stream, so the log must land at
//! sequences 1..=N: loading refuses a `FAIRSHARE_EVENTS` stream that has ever held a message.

use std::collections::VecDeque;

use async_nats::jetstream;
use fairshare_events::{codec, pb, streams, subjects};

/// Why a log could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The events stream is not fresh.
    #[error(
        "stream {stream} has already used sequences up to {last}; load a simulated log into a fresh server so its sequences match the log's"
    )]
    NotFresh {
        /// The stream.
        stream: &'static str,
        /// Its last sequence.
        last: u64,
    },
    /// An event has no body, so no subject.
    #[error("event {index} has no body")]
    NoSubject {
        /// 0-based index.
        index: usize,
    },
    /// JetStream refused or lost a publish.
    #[error("publishing event {index}: {detail}")]
    Publish {
        /// 0-based index.
        index: usize,
        /// What went wrong.
        detail: String,
    },
    /// A publish landed at another sequence than its position in the log.
    #[error("event {index} landed at sequence {sequence}, expected {expected}")]
    OutOfPlace {
        /// 0-based index.
        index: usize,
        /// Where it landed.
        sequence: u64,
        /// Where it should have.
        expected: u64,
    },
    /// The stream could not be inspected.
    #[error("stream {stream}: {detail}")]
    Stream {
        /// The stream.
        stream: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// How many publishes may await their acknowledgement at once.
const IN_FLIGHT: usize = 256;

/// Publishes `events` (one cluster's simulated log) to the events stream in order, on the
/// subjects the services would have used; returns how many were loaded.
pub async fn load_log(
    js: &jetstream::Context,
    cluster: &str,
    events: &[pb::Event],
) -> Result<u64, LoadError> {
    let name = streams::EVENTS_STREAM;
    let mut stream = js.get_stream(name).await.map_err(|e| LoadError::Stream {
        stream: name,
        detail: e.to_string(),
    })?;
    let info = stream.info().await.map_err(|e| LoadError::Stream {
        stream: name,
        detail: e.to_string(),
    })?;
    if info.state.last_sequence > 0 {
        return Err(LoadError::NotFresh {
            stream: name,
            last: info.state.last_sequence,
        });
    }
    let mut pending = VecDeque::new();
    for (index, event) in events.iter().enumerate() {
        let subject = subjects::for_event(cluster, event).ok_or(LoadError::NoSubject { index })?;
        let ack = js
            .publish(subject, codec::encode(event))
            .await
            .map_err(|e| LoadError::Publish {
                index,
                detail: e.to_string(),
            })?;
        pending.push_back((index, ack));
        if pending.len() >= IN_FLIGHT {
            confirm(pending.pop_front()).await?;
        }
    }
    while let Some(next) = pending.pop_front() {
        confirm(Some(next)).await?;
    }
    Ok(events.len() as u64)
}

async fn confirm(
    next: Option<(usize, jetstream::context::PublishAckFuture)>,
) -> Result<(), LoadError> {
    let Some((index, ack)) = next else {
        return Ok(());
    };
    let ack = ack.await.map_err(|e| LoadError::Publish {
        index,
        detail: e.to_string(),
    })?;
    let expected = index as u64 + 1;
    if ack.sequence != expected {
        return Err(LoadError::OutOfPlace {
            index,
            sequence: ack.sequence,
            expected,
        });
    }
    Ok(())
}
