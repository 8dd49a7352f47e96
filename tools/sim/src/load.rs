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
    /// Something else was appended to the stream while the log was loading (a service
    /// running against it): this event was refused at its place. Events already sent behind
    /// it (up to a few hundred) may have landed one place late, so the stream is no use for an
    /// audit any more.
    #[error(
        "event {index}: the stream moved while the log was loading (is a service running \
         against this server? they append as they read); load into a fresh server with none \
         running"
    )]
    Interleaved {
        /// 0-based index of the first event refused.
        index: usize,
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
    /// The log names no cluster (no budget tree, node or submission event).
    #[error("the log names no cluster: pass --cluster")]
    NoCluster,
    /// An event would be stored where the services fold it as empty (its body names another
    /// cluster than the one it is loaded for). Nothing was written.
    #[error("event {index}: {detail}; nothing loaded (the log's events name cluster {named:?})")]
    Misfiled {
        /// 0-based index.
        index: usize,
        /// What does not match.
        detail: String,
        /// The cluster the log's events name.
        named: String,
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

/// The cluster a simulated log is for: the one its first budget tree, node or submission
/// event names.
pub fn cluster_of(events: &[pb::Event]) -> Option<String> {
    use pb::event::Body;
    events.iter().find_map(|e| match e.body.as_ref()? {
        Body::BudgetTreeSet(b) => Some(b.cluster.clone()),
        Body::NodeRegistered(n) => Some(n.cluster.clone()),
        Body::JobSubmitted(s) => s.spec.as_ref().map(|spec| spec.cluster.clone()),
        _ => None,
    })
}

/// The subject of every event of `events` loaded for `cluster`, each checked to be where the
/// services will fold it ([`subjects::check_filed`]), before anything is written.
fn subjects_for(cluster: &str, events: &[pb::Event]) -> Result<Vec<String>, LoadError> {
    events
        .iter()
        .enumerate()
        .map(|(index, event)| {
            let subject =
                subjects::for_event(cluster, event).ok_or(LoadError::NoSubject { index })?;
            subjects::check_filed(&subject, event).map_err(|e| LoadError::Misfiled {
                index,
                detail: e.to_string(),
                named: cluster_of(events).unwrap_or_default(),
            })?;
            Ok(subject)
        })
        .collect()
}

/// Publishes `events` (one cluster's simulated log) to the events stream in order, on the
/// subjects the services would have used; returns how many were loaded. Every event is
/// checked first: a log that names another cluster writes nothing.
pub async fn load_log(
    js: &jetstream::Context,
    cluster: &str,
    events: &[pb::Event],
) -> Result<u64, LoadError> {
    let subjects = subjects_for(cluster, events)?;
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
    publish_in_place(js, events, subjects).await?;
    Ok(events.len() as u64)
}

/// Publishes `events` on `subjects`, event `i` only as stream sequence `i + 1`.
async fn publish_in_place(
    js: &jetstream::Context,
    events: &[pb::Event],
    subjects: Vec<String>,
) -> Result<(), LoadError> {
    let mut pending = VecDeque::new();
    for (index, (event, subject)) in events.iter().zip(subjects).enumerate() {
        // Each lands only right after the one before it: nothing can interleave unnoticed.
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            fairshare_events::headers::EXPECTED_LAST_SEQUENCE,
            index.to_string().as_str(),
        );
        let ack = js
            .publish_with_headers(subject, headers, codec::encode(event))
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
    Ok(())
}

async fn confirm(
    next: Option<(usize, jetstream::context::PublishAckFuture)>,
) -> Result<(), LoadError> {
    let Some((index, ack)) = next else {
        return Ok(());
    };
    let ack = ack.await.map_err(|e| match e.kind() {
        jetstream::context::PublishErrorKind::WrongLastSequence => LoadError::Interleaved { index },
        _ => LoadError::Publish {
            index,
            detail: e.to_string(),
        },
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn registered(cluster: &str, node: &str) -> pb::Event {
        pb::Event {
            at_ms: 1,
            body: Some(pb::event::Body::NodeRegistered(pb::NodeRegistered {
                cluster: cluster.into(),
                node: node.into(),
                gpus: 8,
            })),
        }
    }

    /// An event appended by someone else just as the load starts (past its freshness check)
    /// is caught at the first event, which is refused rather than stored at sequence 2.
    #[test]
    fn an_append_interleaved_before_an_event_refuses_it() {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = async_nats::connect(server.url()).await.unwrap();
            let js = jetstream::new(client);
            fairshare_runtime::nats::ensure_streams(&js, 1)
                .await
                .unwrap();
            let log = vec![registered("c", "n1"), registered("c", "n2")];
            let subjects = subjects_for("c", &log).unwrap();
            let foreign = registered("c", "n0");
            js.publish(
                subjects::for_event("c", &foreign).unwrap(),
                codec::encode(&foreign),
            )
            .await
            .unwrap()
            .await
            .unwrap();
            let err = publish_in_place(&js, &log, subjects).await.unwrap_err();
            assert!(matches!(err, LoadError::Interleaved { index: 0 }), "{err}");
            let info = js
                .get_stream(streams::EVENTS_STREAM)
                .await
                .unwrap()
                .info()
                .await
                .unwrap()
                .state
                .clone();
            // The foreign event stays where it was; the first of the log never landed.
            assert_eq!(info.first_sequence, 1);
            let first = js
                .get_stream(streams::EVENTS_STREAM)
                .await
                .unwrap()
                .get_raw_message(1)
                .await
                .unwrap();
            assert_eq!(codec::decode_event(&first.payload).unwrap(), foreign);
        });
    }
}
