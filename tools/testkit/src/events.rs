//! Contract events that tests across the workspace build alike: a cluster with one allocation,
//! a node, and one-GPU submissions to it. Each test states the names it uses, so what it
//! checks reads from the call.

use fairshare_events::pb::{self, event::Body};
use fairshare_runtime::log::LogEntry;

/// `body` at `at_ms` as the log entry at `sequence` on `subject`, as a follower delivers it
/// (caught up, no trace, not from a stream).
pub fn logged(sequence: u64, subject: String, at_ms: i64, body: Body) -> LogEntry {
    LogEntry {
        sequence,
        subject,
        event: Ok(pb::Event {
            at_ms,
            body: Some(body),
        }),
        pending: 0,
        trace: None,
        stored_ms: None,
    }
}

/// A budget tree of `cluster` with the single top-level allocation `allocation` (share 1).
pub fn one_allocation_tree(cluster: &str, allocation: &str) -> Body {
    Body::BudgetTreeSet(pb::BudgetTreeSet {
        cluster: cluster.into(),
        accounts: vec![pb::Account {
            name: allocation.into(),
            share: 1,
            children: vec![],
        }],
    })
}

/// Node `node` of `cluster` registered with `gpus` GPUs.
pub fn node_registered(cluster: &str, node: &str, gpus: u32) -> Body {
    Body::NodeRegistered(pb::NodeRegistered {
        cluster: cluster.into(),
        node: node.into(),
        gpus,
    })
}

/// Job `job_id` (key `key`) accepted for one GPU of `allocation` on `cluster`, with a
/// one-minute minimum runtime.
pub fn one_gpu_submitted(cluster: &str, allocation: &str, job_id: &str, key: &str) -> Body {
    Body::JobSubmitted(pb::JobSubmitted {
        job_id: job_id.into(),
        idempotency_key: key.into(),
        spec: Some(pb::JobSpec {
            cluster: cluster.into(),
            allocation: allocation.into(),
            gpus: 1,
            nodes: 1,
            min_runtime_s: 60,
            ..Default::default()
        }),
        shape: Some(pb::Shape {
            nodes: 1,
            gpus_per_node: 1,
        }),
    })
}

/// Job `job_id` accepted on `cluster` for `nodes` x `gpus_per_node` GPUs of `allocation`
/// (nodes 0 for one node), with minimum runtime `min_runtime_s` (0: unallocated work).
pub fn shaped_submitted(
    cluster: &str,
    allocation: &str,
    job_id: &str,
    nodes: u32,
    gpus_per_node: u32,
    min_runtime_s: i64,
) -> Body {
    Body::JobSubmitted(pb::JobSubmitted {
        job_id: job_id.into(),
        spec: Some(pb::JobSpec {
            cluster: cluster.into(),
            allocation: allocation.into(),
            gpus: i64::from(nodes.max(1) * gpus_per_node),
            min_runtime_s,
            ..Default::default()
        }),
        shape: Some(pb::Shape {
            nodes: nodes.max(1),
            gpus_per_node,
        }),
        ..Default::default()
    })
}

/// Job `job_id` placed with all its `gpus` on `node` (no basis: a test's hand-written
/// placement, not a decision service's).
pub fn placed_on(job_id: &str, node: &str, gpus: u32) -> Body {
    Body::JobPlaced(pb::JobPlaced {
        job_id: job_id.into(),
        nodes: vec![pb::NodeGpus {
            node: node.into(),
            gpus,
        }],
        basis: None,
    })
}

/// Appends `body`, taking effect at `at_ms`, to the log on `subject`, as a service would
/// (without fences), and waits for the stream to store it.
///
/// # Panics
/// If the stream refuses it: a test's setup that did not land is a failed test.
pub async fn append(js: &async_nats::jetstream::Context, subject: String, at_ms: i64, body: Body) {
    let event = pb::Event {
        at_ms,
        body: Some(body),
    };
    let stored = match js
        .publish(subject.clone(), fairshare_events::codec::encode(&event))
        .await
    {
        Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = stored {
        panic!("cannot append to {subject}: {e}");
    }
}

/// Publishes what a launcher may: a `JobStarted` report of job `other` of `cluster`, under
/// the message id `id` (which it copied from a service's pattern), and returns its sequence:
/// the id is taken for the stream's duplicate window.
///
/// # Panics
/// If the stream refuses it.
pub async fn squat_message_id(js: &async_nats::jetstream::Context, cluster: &str, id: &str) -> u64 {
    let started = pb::Event {
        at_ms: 1,
        body: Some(Body::JobStarted(pb::JobStarted {
            job_id: "other".into(),
        })),
    };
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", id);
    let subject = fairshare_events::subjects::job_event(cluster, "other", "job_started");
    let stored = match js
        .publish_with_headers(subject, headers, fairshare_events::codec::encode(&started))
        .await
    {
        Ok(ack) => ack.await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match stored {
        Ok(ack) => ack.sequence,
        Err(e) => panic!("cannot squat {id}: {e}"),
    }
}

/// One entry as the events stream stores it.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its stream sequence.
    pub sequence: u64,
    /// The subject it was published on.
    pub subject: String,
    /// Its `Nats-Msg-Id` (empty if none).
    pub message_id: String,
    /// The event.
    pub event: pb::Event,
}

/// Every entry of the events stream, in order, read one by one (not through a consumer: what a
/// test checks the services' folds against).
///
/// # Panics
/// If the stream cannot be read or an entry does not decode: the log a test wrote is broken.
pub async fn stored(js: &async_nats::jetstream::Context) -> Vec<Stored> {
    use fairshare_events::streams::EVENTS_STREAM;
    let mut stream = match js.get_stream(EVENTS_STREAM).await {
        Ok(stream) => stream,
        Err(e) => panic!("cannot open {EVENTS_STREAM}: {e}"),
    };
    let last = match stream.info().await {
        Ok(info) => info.state.last_sequence,
        Err(e) => panic!("cannot read {EVENTS_STREAM}'s end: {e}"),
    };
    let mut out = Vec::new();
    for sequence in 1..=last {
        let message = match stream.get_raw_message(sequence).await {
            Ok(message) => message,
            Err(e) => panic!("cannot read sequence {sequence} of {EVENTS_STREAM}: {e}"),
        };
        let event = match fairshare_events::codec::decode_event(&message.payload) {
            Ok(event) => event,
            Err(e) => panic!("sequence {sequence} does not decode: {e}"),
        };
        out.push(Stored {
            sequence,
            subject: message.subject.to_string(),
            message_id: message
                .headers
                .get(fairshare_events::headers::MESSAGE_ID)
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default(),
            event,
        });
    }
    out
}

/// When the events stream stored the entry at `sequence` (Unix ms), as a checkpoint names it.
///
/// # Panics
/// If the entry cannot be read.
pub async fn stored_time_ms(js: &async_nats::jetstream::Context, sequence: u64) -> i64 {
    use fairshare_events::streams::EVENTS_STREAM;
    let stream = match js.get_stream(EVENTS_STREAM).await {
        Ok(stream) => stream,
        Err(e) => panic!("cannot open {EVENTS_STREAM}: {e}"),
    };
    let message = match stream.get_raw_message(sequence).await {
        Ok(message) => message,
        Err(e) => panic!("cannot read sequence {sequence} of {EVENTS_STREAM}: {e}"),
    };
    match i64::try_from(message.time.unix_timestamp_nanos() / 1_000_000) {
        Ok(ms) => ms,
        Err(_) => panic!("sequence {sequence} has a stored time beyond i64 ms"),
    }
}
