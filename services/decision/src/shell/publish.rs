//! Publishing a cycle's placements: one `JobPlaced` per job on the job's own subject, with a
//! deterministic message id and optimistic concurrency over every kind of the job's events.
//!
//! - Message id `placed:<job_id>:<expected>`: a retry of the same placement decision (same job,
//!   same log position) is dropped by JetStream inside the duplicate window, whichever instance
//!   or restart sends it. (Once the first landed, the expected-sequence check below already
//!   refuses the retry; nats-server 2.15 answers that check first. The id is the second lock.)
//! - `Nats-Expected-Last-Subject-Sequence: <expected>` with
//!   `Nats-Expected-Last-Subject-Sequence-Subject: fairshare.events.<cluster>.job.<job_id>.*`:
//!   `expected` is the newest event of the job the deciding state had folded, so the placement
//!   is refused if anything happened to the job since (a cancel, another placement). A refusal
//!   is not an error: the log moved, the fold will see why, and the next cycle decides again.
//! - `traceparent`: the placement's span, so the launcher's start joins the job's trace.
//!
//! A cycle's messages are sent a chunk at a time (`PUBLISH_CHUNK`), each chunk's
//! acknowledgements awaited together, so a cycle of hundreds of placements costs about one
//! round trip, and they land in decision order (one connection preserves publish order). A
//! chunk with a placement of unknown outcome, or a lease that no longer holds, ends the
//! cycle's publishing: the rest are decided again by the next cycle, never sent late.
//!
//! A placement whose acknowledgement never came (a timeout, a reconnect) may still be stored
//! later: it may sit in the client's reconnect buffer or in the stream's replication. Looking
//! the job up can answer before it lands, and a cycle run on that answer would give its GPUs
//! away again. So its outcome is settled by sending the identical message again (`settle`):
//! the server answers it after the first, with the first's sequence (a repeat), a refusal (the
//! first, or something else, moved the job: its newest event is then looked up), or by storing
//! it. A refusal in the cycle itself is looked up the same way, for the same reason. Not sent
//! again: a placement decided before a node or maintenance event that has landed since (stored
//! now, it could name GPUs that are gone). It is looked up once a message the server must
//! refuse, sent on the same connection after it, is answered, so a first send still in the
//! client's buffer has landed by then. It may land after the node event: a cordon or a
//! maintenance window then drains it as it drains the jobs that were there already (see the
//! preemption service's `drain`); a node removed or shrunk meanwhile is not covered. Nor sent
//! again, looked up the same way: one decided more than `RESEND_WITHIN_MS` before (landing
//! now, it could run into a maintenance window or a reservation its cycle kept it clear of).
//! Only looked up: one the server refused for good (a stream that is not there, a message over
//! its size limit).

use async_nats::jetstream::{self, context::PublishErrorKind, publish::PublishAck};
use fairshare_events::headers::TraceParent;
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::{codec, pb, subjects};
use fairshare_runtime::envelope::Envelope;
use fairshare_runtime::retry::{ResendAnswer, resend_answer};

/// The message id of job `job_id`'s placement decided when its newest event was `expected`.
pub fn placement_id(job_id: &str, expected: u64) -> String {
    format!("placed:{job_id}:{expected}")
}

/// One placement to append.
#[derive(Debug, Clone)]
pub(crate) struct ToPublish {
    /// The job.
    pub job_id: String,
    /// Sequence of the job's newest folded event.
    pub expected: u64,
    /// The last sequence the deciding state had folded: a node or maintenance event after it
    /// means the placement may name GPUs that are no longer there, so it is not sent again.
    pub decided_through: u64,
    /// The trace context the placement carries (its span's).
    pub trace: TraceParent,
    /// The `JobPlaced` event.
    pub event: pb::Event,
}

/// What became of a cycle's placements.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// Appended.
    pub landed: usize,
    /// Dropped as a repeat of an earlier identical message id (the earlier one stands).
    pub duplicates: usize,
    /// Unknown outcome (timeout, connection trouble): to settle before the next cycle.
    pub failed: Vec<ToPublish>,
    /// The jobs whose placement was refused because their events moved since the state the
    /// cycle decided from: the fold must reach each one's newest event before the next cycle
    /// (it may be this very placement, sent earlier and stored late).
    pub moved: Vec<String>,
    /// Highest stream sequence acknowledged (0 if none): the fold must reach it before the
    /// next cycle, or that cycle would see these GPUs as free.
    pub max_sequence: u64,
    /// A node or maintenance event newer than the cycle's state had landed (`max_sequence` is
    /// that event), before the first chunk (nothing was published) or between chunks (the rest
    /// are [`Outcome::withheld`]): the cycle must be decided again once the fold reaches it,
    /// whether or not folding it changes anything.
    pub fenced: bool,
    /// The newest node or maintenance event could not be read, before the first chunk (nothing
    /// was published) or between chunks (the rest are withheld), so placements could not be
    /// fenced: decide again after a pause.
    pub fence_unread: bool,
    /// Placements not sent at all: a chunk before them had placements of unknown outcome, the
    /// lease stopped holding, or the nodes changed (or could not be looked up) between chunks.
    /// The next cycle decides them again.
    pub withheld: usize,
}

/// How many placements are in flight at once. A JetStream context holds a permit for each
/// acknowledgement not yet awaited (5,000 by default) and makes the next publish wait for one:
/// sending a whole cycle's placements before awaiting any would hang for good on a cycle of more
/// than that (a backlog on a large cluster).
const PUBLISH_CHUNK: usize = 1_000;

/// Appends `batch` in order and waits for every acknowledgement, while `leading` says this
/// instance still holds the cluster's lease.
pub(crate) async fn publish(
    js: &jetstream::Context,
    cluster: &str,
    batch: Vec<ToPublish>,
    leading: impl Fn() -> bool,
) -> Outcome {
    publish_in_chunks(js, cluster, batch, PUBLISH_CHUNK, leading).await
}

/// [`publish`], `chunk` placements at a time: each chunk's acknowledgements are awaited before
/// the next is sent.
///
/// A chunk with placements of unknown outcome (acknowledgements timed out: a leader being
/// elected, a connection going) ends the cycle's publishing, and so does a lease that no
/// longer holds: each chunk can take a request timeout, so a big cycle sent on regardless
/// could still be landing placements after its lease ran out and a successor, reading the log
/// without them, gave the same GPUs to other jobs. The rest are not sent
/// ([`Outcome::withheld`]); the next cycle decides them again. So, too, when a node or
/// maintenance event newer than the cycle's state landed while earlier chunks were awaited
/// (the cycle looked before the first): the rest could land on GPUs a node no longer has.
async fn publish_in_chunks(
    js: &jetstream::Context,
    cluster: &str,
    batch: Vec<ToPublish>,
    chunk: usize,
    leading: impl Fn() -> bool,
) -> Outcome {
    let mut outcome = Outcome::default();
    let total = batch.len();
    let mut sent = 0;
    let mut batch = batch.into_iter().peekable();
    while batch.peek().is_some() {
        // The first chunk too: deciding and the node fence's look may have taken a request
        // timeout since the loop saw the lease hold.
        if !leading() || (sent > 0 && !outcome.failed.is_empty()) {
            outcome.withheld = total - sent;
            tracing::warn!(
                withheld = outcome.withheld,
                unanswered = outcome.failed.len(),
                "placements of this cycle not sent: an earlier chunk went unanswered or the \
                 lease no longer holds; decided again"
            );
            break;
        }
        if sent > 0
            && let Some(through) = batch.peek().map(|p| p.decided_through)
        {
            let moved = match js.get_stream_no_info(EVENTS_STREAM).await {
                Ok(events) => newest_inventory_change(&events, cluster).await,
                Err(e) => Err(e.to_string()),
            };
            match moved {
                Ok(newest) if newest > through => {
                    outcome.withheld = total - sent;
                    outcome.max_sequence = outcome.max_sequence.max(newest);
                    outcome.fenced = true;
                    tracing::debug!(
                        withheld = outcome.withheld,
                        newest,
                        "nodes changed while this cycle's placements were being sent; the rest \
                         decided again"
                    );
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    outcome.withheld = total - sent;
                    outcome.fence_unread = true;
                    tracing::warn!(
                        withheld = outcome.withheld,
                        "cannot read the newest node event between chunks; the rest decided \
                         again: {e}"
                    );
                    break;
                }
            }
        }
        let part: Vec<ToPublish> = batch.by_ref().take(chunk.max(1)).collect();
        sent += part.len();
        publish_part(js, cluster, part, &mut outcome).await;
    }
    outcome
}

/// Placement `p` as a message: its subject, headers and bytes, the same every time it is sent.
fn message(cluster: &str, p: &ToPublish) -> (String, async_nats::HeaderMap, bytes::Bytes) {
    let envelope = Envelope {
        message_id: placement_id(&p.job_id, p.expected),
        trace: Some(p.trace),
        expected_last_subject_sequence: Some((p.expected, Some(subjects::job(cluster, &p.job_id)))),
        ..Default::default()
    };
    let subject = subjects::job_event(cluster, &p.job_id, "job_placed");
    (subject, envelope.to_headers(), codec::encode(&p.event))
}

/// Sends placement `p` ([`message`]).
async fn send(
    js: &jetstream::Context,
    cluster: &str,
    p: &ToPublish,
) -> Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError> {
    let (subject, headers, payload) = message(cluster, p);
    js.publish_with_headers(subject, headers, payload).await
}

/// Sends `part`, then awaits its acknowledgements, adding what became of each to `outcome`.
async fn publish_part(
    js: &jetstream::Context,
    cluster: &str,
    part: Vec<ToPublish>,
    outcome: &mut Outcome,
) {
    let mut acks = Vec::with_capacity(part.len());
    for p in part {
        match send(js, cluster, &p).await {
            Ok(ack) => acks.push((p, ack)),
            Err(e) => {
                tracing::warn!(job_id = p.job_id, "placement not sent: {e}");
                outcome.failed.push(p);
            }
        }
    }
    let results = futures::future::join_all(
        acks.into_iter()
            .map(|(p, ack)| async move { (p, ack.await) }),
    )
    .await;
    for (p, result) in results {
        let result = match result {
            Ok(ack) if ack.duplicate => resend_if_squatted(js, cluster, &p, ack).await,
            other => other,
        };
        match result {
            Ok(ack) => {
                outcome.max_sequence = outcome.max_sequence.max(ack.sequence);
                if ack.duplicate {
                    outcome.duplicates += 1;
                } else {
                    outcome.landed += 1;
                }
            }
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                tracing::debug!(
                    job_id = p.job_id,
                    "placement refused: the job's events moved on"
                );
                outcome.moved.push(p.job_id);
            }
            Err(e) => {
                tracing::warn!(job_id = p.job_id, "placement acknowledgement failed: {e}");
                outcome.failed.push(p);
            }
        }
    }
}

/// A placement acknowledged as a duplicate that another publisher's entry holds (not a
/// placement of this job, sent before or by another instance) is sent again under an id of its
/// own ([`fairshare_runtime::log::resend_if_squatted`]). Without this, a message squatting the
/// id would have every cycle decide the job again and take the duplicate for its placement,
/// its GPUs idle for the stream's duplicate window.
async fn resend_if_squatted(
    js: &jetstream::Context,
    cluster: &str,
    p: &ToPublish,
    ack: PublishAck,
) -> Result<PublishAck, jetstream::context::PublishError> {
    let (subject, headers, payload) = message(cluster, p);
    fairshare_runtime::log::resend_if_squatted(js, &subject, &headers, payload, ack).await
}

/// A placement whose outcome the next cycle must know first.
#[derive(Debug, Clone)]
pub(crate) enum Unresolved {
    /// Sent without an answer: settled by sending it again ([`settle`]).
    Unanswered(Box<ToPublish>),
    /// Refused, the job having moved: settled by looking up its newest event.
    Moved(String),
}

impl Unresolved {
    /// The job placed.
    pub fn job_id(&self) -> &str {
        match self {
            Unresolved::Unanswered(p) => &p.job_id,
            Unresolved::Moved(job_id) => job_id,
        }
    }
}

/// What settling a placement found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The fold must reach this sequence before the next cycle: the placement's own (stored
    /// by this send or an earlier one), or the newest event of a job that moved.
    At(u64),
    /// Still unknown (the stream did not answer): try again later.
    Unknown(String),
}

/// How long after its cycle decided it a placement of unknown outcome may still be sent
/// again. The cycle admitted it on its time: work protected until just before a maintenance
/// window closes the node
/// ([`crate::domain::state::MAINTENANCE_LEAD_MS`] before it), or backfill ending before a
/// reservation starts. Landing much later (sent again after an outage) it would run into
/// them, so past this it is only looked up, and decided again if it never landed.
pub(crate) const RESEND_WITHIN_MS: i64 = 10_000;

/// Settles `unresolved` (see the module doc) at `now_ms`. `nodes_newest` is the cluster's
/// newest node or maintenance event ([`newest_inventory_change`], read once per round), or
/// why it could not be read.
pub(crate) async fn settle(
    js: &jetstream::Context,
    events: &jetstream::stream::Stream,
    cluster: &str,
    nodes_newest: &Result<u64, String>,
    unresolved: &Unresolved,
    now_ms: i64,
) -> Settled {
    let job_id = match unresolved {
        Unresolved::Moved(job_id) => job_id,
        Unresolved::Unanswered(p) => {
            if now_ms.saturating_sub(p.event.at_ms) > RESEND_WITHIN_MS {
                return look_up_behind_a_barrier(js, events, cluster, p).await;
            }
            match nodes_newest {
                Ok(newest) if *newest <= p.decided_through => {}
                // The nodes moved: the fence the cycle passed no longer holds.
                Ok(_) => return look_up_behind_a_barrier(js, events, cluster, p).await,
                Err(e) => {
                    return Settled::Unknown(format!("cannot read the newest node event: {e}"));
                }
            }
            let answer = match send(js, cluster, p).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            let answer = match answer {
                Ok(ack) if ack.duplicate => resend_if_squatted(js, cluster, p, ack).await,
                other => other,
            };
            match resend_answer(answer) {
                ResendAnswer::Stored(sequence) => return Settled::At(sequence),
                ResendAnswer::Unknown(why) => return Settled::Unknown(why),
                ResendAnswer::Refused => &p.job_id,
            }
        }
    };
    look_up(events, cluster, job_id).await
}

/// Settles placement `p` without sending it again: first a message the server is sure to
/// refuse (on the job's subject, expecting the job to have no event yet, when it has its
/// submission), which this connection's earlier sends, `p`'s first among them, reach the
/// stream before; once it is answered, the job's newest event is looked up. A lookup alone
/// can answer while that first send still waits in the client's buffer across a reconnect.
async fn look_up_behind_a_barrier(
    js: &jetstream::Context,
    events: &jetstream::stream::Stream,
    cluster: &str,
    p: &ToPublish,
) -> Settled {
    let barrier = fairshare_runtime::retry::barrier(
        js,
        subjects::job_event(cluster, &p.job_id, "job_placed"),
        subjects::job(cluster, &p.job_id),
        format!("barrier:{}:{}", p.job_id, p.expected),
    );
    match barrier.await {
        Err(why) => Settled::Unknown(why),
        Ok(()) => look_up(events, cluster, &p.job_id).await,
    }
}

/// [`Settled::At`] job `job_id`'s newest event.
async fn look_up(events: &jetstream::stream::Stream, cluster: &str, job_id: &str) -> Settled {
    match newest_of_job(events, cluster, job_id).await {
        Ok(sequence) => Settled::At(sequence),
        Err(e) => Settled::Unknown(format!("cannot look up the job's newest event: {e}")),
    }
}

/// The sequence of job `job_id`'s newest event in the stream, whatever its kind: after a
/// placement of unknown outcome, the fold must reach it before the next cycle.
pub(crate) async fn newest_of_job(
    events: &jetstream::stream::Stream,
    cluster: &str,
    job_id: &str,
) -> Result<u64, String> {
    fairshare_runtime::log::newest_sequence(events, &subjects::job(cluster, job_id)).await
}

/// The sequence of the newest node or maintenance event of `cluster`: a cycle decided from an
/// older state may name a node cordoned, removed, shrunk or closed for maintenance since, so
/// its placements are not published (the job fence above does not cover the GPUs).
pub(crate) async fn newest_inventory_change<I>(
    events: &jetstream::stream::Stream<I>,
    cluster: &str,
) -> Result<u64, String> {
    let (nodes, maintenance) = futures::future::join(
        fairshare_runtime::log::newest_sequence(events, &subjects::node(cluster, "*")),
        fairshare_runtime::log::newest_sequence(events, &subjects::maintenance(cluster)),
    )
    .await;
    Ok(nodes?.max(maintenance?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fairshare_events::pb::event::Body;
    use fairshare_events::streams::EVENTS_STREAM;
    use fairshare_runtime::admin;

    const C: &str = "c";

    async fn append(js: &jetstream::Context, job: &str, body: Body) -> u64 {
        let event = pb::Event {
            at_ms: 1,
            body: Some(body),
        };
        let subject = subjects::job_event(C, job, codec::event_kind(&event));
        let envelope = Envelope {
            message_id: format!("{subject}:{}", codec::event_kind(&event)),
            ..Default::default()
        };
        admin::append(js, subject, &event, &envelope).await.unwrap()
    }

    fn submitted(job: &str) -> Body {
        Body::JobSubmitted(pb::JobSubmitted {
            job_id: job.into(),
            ..Default::default()
        })
    }

    /// Node n1 registered (again) with 4 GPUs: a node event after any placement decided before.
    fn n1_resized() -> (pb::Event, Envelope) {
        let node = pb::Event {
            at_ms: 3,
            body: Some(Body::NodeRegistered(pb::NodeRegistered {
                cluster: C.into(),
                node: "n1".into(),
                gpus: 4,
            })),
        };
        let envelope = Envelope {
            message_id: "node-n1".into(),
            ..Default::default()
        };
        (node, envelope)
    }

    fn placement(job: &str, expected: u64, node: &str) -> ToPublish {
        ToPublish {
            job_id: job.into(),
            expected,
            decided_through: expected,
            trace: TraceParent::new_root((1, 1)),
            event: pb::Event {
                at_ms: 2,
                body: Some(Body::JobPlaced(pb::JobPlaced {
                    job_id: job.into(),
                    nodes: vec![pb::NodeGpus {
                        node: node.into(),
                        gpus: 1,
                    }],
                    basis: None,
                })),
            },
        }
    }

    /// More placements than the context lets await acknowledgement at once all land, chunk
    /// by chunk (sending them all before awaiting any would wait for a permit for ever).
    #[tokio::test]
    async fn a_cycle_of_more_placements_than_acks_in_flight_lands_them_all() {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = jetstream::ContextBuilder::new()
            .max_ack_inflight(4)
            .build(client);
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        let mut batch = Vec::new();
        for i in 0..10 {
            let job = format!("j{i}");
            let s = append(&js, &job, submitted(&job)).await;
            batch.push(placement(&job, s, "n1"));
        }
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            publish_in_chunks(&js, C, batch, 4, || true),
        )
        .await
        .expect("no wait for an acknowledgement permit");
        assert_eq!((out.landed, out.moved.len(), out.failed.len()), (10, 0, 0));
        assert_eq!(out.max_sequence, 20);
    }

    /// Ten jobs submitted, and a placement of each decided from their submissions.
    async fn ten_submitted(js: &jetstream::Context) -> Vec<ToPublish> {
        let mut batch = Vec::new();
        for i in 0..10 {
            let job = format!("j{i}");
            let s = append(js, &job, submitted(&job)).await;
            batch.push(placement(&job, s, "n1"));
        }
        batch
    }

    /// A node event newer than the cycle's state, landed while its first chunk was out (here:
    /// before it, which the cycle's own look would have caught; the chunks do not look before
    /// the first), withholds every chunk after it: they could land on GPUs the node no longer
    /// has.
    #[tokio::test]
    async fn a_node_change_during_a_cycles_publishing_withholds_its_later_chunks() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let mut batch = ten_submitted(&js).await;
        let through = batch.last().unwrap().expected;
        for p in &mut batch {
            p.decided_through = through;
        }
        let cordon = pb::Event {
            at_ms: 1,
            body: Some(Body::NodeCordoned(pb::NodeCordoned {
                cluster: C.into(),
                node: "n1".into(),
                ..Default::default()
            })),
        };
        let envelope = Envelope {
            message_id: "cordon-n1".into(),
            ..Default::default()
        };
        let cordoned = admin::append(&js, subjects::node(C, "n1"), &cordon, &envelope)
            .await
            .unwrap();
        let out = publish_in_chunks(&js, C, batch, 4, || true).await;
        assert_eq!((out.landed, out.withheld), (4, 6));
        assert!(out.fenced && out.max_sequence >= cordoned, "{out:?}");
    }

    /// Once the lease stops holding, no further chunk of the cycle is sent: a successor
    /// reading the log could give the same GPUs to other jobs.
    #[tokio::test]
    async fn a_cycle_stops_sending_once_its_lease_no_longer_holds() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        let batch = ten_submitted(&js).await;
        let expected: Vec<u64> = batch.iter().map(|p| p.expected).collect();
        let asked = std::cell::Cell::new(0);
        let leading = || {
            asked.set(asked.get() + 1);
            asked.get() < 3
        };
        let out = publish_in_chunks(&js, C, batch.clone(), 4, leading).await;
        // Two chunks went out while the lease held; not the third.
        assert_eq!((out.landed, out.withheld, out.failed.len()), (8, 2, 0));
        // A lease lost before the first chunk: nothing is sent.
        let none = publish_in_chunks(&js, C, batch[8..].to_vec(), 4, || false).await;
        assert_eq!((none.landed, none.withheld), (0, 2));
        for (i, submitted_at) in expected.iter().enumerate() {
            let newest = newest_of_job(&events, C, &format!("j{i}")).await.unwrap();
            assert_eq!(newest > *submitted_at, i < 8, "j{i}");
        }
    }

    /// A chunk with a placement of unknown outcome ends the cycle's publishing: the next
    /// chunks would only pile up behind the same trouble, landing late.
    #[tokio::test]
    async fn a_chunk_with_an_unanswered_placement_ends_the_cycles_publishing() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        let mut batch = ten_submitted(&js).await;
        let expected: Vec<u64> = batch.iter().map(|p| p.expected).collect();
        // Over the server's message size limit: never stored, no answer to trust.
        if let Some(Body::JobPlaced(p)) = batch[1].event.body.as_mut() {
            p.nodes[0].node = "n".repeat(2 << 20);
        }
        let out = publish_in_chunks(&js, C, batch, 4, || true).await;
        assert_eq!((out.landed, out.withheld), (3, 6));
        assert_eq!(
            out.failed
                .iter()
                .map(|p| p.job_id.as_str())
                .collect::<Vec<_>>(),
            ["j1"]
        );
        for (i, submitted_at) in expected.iter().enumerate() {
            let newest = newest_of_job(&events, C, &format!("j{i}")).await.unwrap();
            assert_eq!(newest > *submitted_at, i < 4 && i != 1, "j{i}");
        }
    }

    /// A launcher's message squatting a placement's message id (its own job's report, with
    /// the id copied from the log's pattern) is no placement: the placement is sent again
    /// under an id of its own and lands, instead of being taken for a duplicate every cycle.
    #[tokio::test]
    async fn a_placement_whose_id_another_publisher_took_lands_under_its_own() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        let s1 = append(&js, "j", submitted("j")).await;
        let squatter =
            fairshare_testkit::events::squat_message_id(&js, C, &placement_id("j", s1)).await;
        let out = publish(&js, C, vec![placement("j", s1, "n1")], || true).await;
        assert_eq!((out.landed, out.duplicates), (1, 0));
        let placed = newest_of_job(&events, C, "j").await.unwrap();
        assert!(placed > squatter, "the placement landed after the squatter");
        let stored = events.get_raw_message(placed).await.unwrap();
        assert_eq!(
            stored.subject.as_str(),
            subjects::job_event(C, "j", "job_placed")
        );
    }

    #[tokio::test]
    async fn placements_land_once_and_never_after_the_job_moved() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();

        // Decided from the state after j's submission, but j was cancelled meanwhile.
        let s1 = append(&js, "j", submitted("j")).await;
        let cancelled = append(
            &js,
            "j",
            Body::JobCancelled(pb::JobCancelled {
                job_id: "j".into(),
                ..Default::default()
            }),
        )
        .await;
        let out = publish(&js, C, vec![placement("j", s1, "n1")], || true).await;
        assert_eq!((out.landed, out.moved.len(), out.max_sequence), (0, 1, 0));
        assert_eq!(
            out.moved,
            vec!["j".to_owned()],
            "looked up before the next cycle"
        );
        assert_eq!(newest_of_job(&events, C, "j").await.unwrap(), cancelled);

        // A fresh job lands once; the same decision again (a retry, another instance) is
        // dropped by its message id even if its content differs, and leaves the first standing.
        let s3 = append(&js, "k", submitted("k")).await;
        let out = publish(&js, C, vec![placement("k", s3, "n1")], || true).await;
        assert_eq!((out.landed, out.moved.len(), out.duplicates), (1, 0, 0));
        let placed = out.max_sequence;
        assert!(placed > s3);
        let again = publish(&js, C, vec![placement("k", s3, "n2")], || true).await;
        assert_eq!(again.landed, 0);
        // nats-server 2.15 answers the expected-sequence check before de-duplication, so this
        // comes back refused; either answer leaves the first placement standing.
        assert_eq!(again.duplicates + again.moved.len(), 1);
        assert_eq!(newest_of_job(&events, C, "k").await.unwrap(), placed);
        let stored = events.get_raw_message(placed).await.unwrap();
        let event = codec::decode_event(&stored.payload).unwrap();
        let Some(Body::JobPlaced(p)) = event.body else {
            panic!("expected a placement")
        };
        assert_eq!(p.nodes[0].node, "n1");

        // Several placements of one cycle land in order, each acknowledged.
        let a = append(&js, "a", submitted("a")).await;
        let b = append(&js, "b", submitted("b")).await;
        let out = publish(
            &js,
            C,
            vec![placement("a", a, "n1"), placement("b", b, "n1")],
            || true,
        )
        .await;
        assert_eq!(out.landed, 2);
        assert_eq!(
            newest_of_job(&events, C, "b").await.unwrap(),
            out.max_sequence
        );
        assert!(newest_of_job(&events, C, "a").await.unwrap() < out.max_sequence);
        assert_eq!(placement_id("a", a), format!("placed:a:{a}"));
    }

    /// A placement of unknown outcome is settled by the server's answer to the same message
    /// sent again, never by a lookup alone (which may answer before a late first send lands):
    /// not stored yet, it is stored now; stored already, its sequence comes back and nothing is
    /// stored twice; the job moved, the job's newest event comes back and nothing is stored.
    #[tokio::test]
    async fn an_unanswered_placement_is_settled_by_sending_it_again() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        let placements_of = |job: &'static str| {
            let js = js.clone();
            async move {
                let placed = subjects::job_event(C, job, "job_placed");
                let stored = fairshare_testkit::events::stored(&js).await;
                stored.iter().filter(|s| s.subject == placed).count()
            }
        };

        // Never stored (the first send was lost): stored by the second.
        let a = append(&js, "a", submitted("a")).await;
        let lost = Unresolved::Unanswered(Box::new(placement("a", a, "n1")));
        let Settled::At(at) = settle(
            &js,
            &events,
            C,
            &newest_inventory_change(&events, C).await,
            &lost,
            2,
        )
        .await
        else {
            panic!("settled")
        };
        assert!(at > a);
        assert_eq!(newest_of_job(&events, C, "a").await.unwrap(), at);
        assert_eq!(placements_of("a").await, 1);

        // Stored by the first send, whose answer never came: its sequence, nothing stored again.
        let b = append(&js, "b", submitted("b")).await;
        let first = publish(&js, C, vec![placement("b", b, "n1")], || true).await;
        assert_eq!(first.landed, 1);
        let late = Unresolved::Unanswered(Box::new(placement("b", b, "n1")));
        assert_eq!(
            settle(
                &js,
                &events,
                C,
                &newest_inventory_change(&events, C).await,
                &late,
                2
            )
            .await,
            Settled::At(first.max_sequence)
        );
        assert_eq!(placements_of("b").await, 1);

        // The job moved before the placement landed: its newest event, nothing stored.
        let c = append(&js, "c", submitted("c")).await;
        let cancelled = append(
            &js,
            "c",
            Body::JobCancelled(pb::JobCancelled {
                job_id: "c".into(),
                ..Default::default()
            }),
        )
        .await;
        let stale = Unresolved::Unanswered(Box::new(placement("c", c, "n1")));
        assert_eq!(
            settle(
                &js,
                &events,
                C,
                &newest_inventory_change(&events, C).await,
                &stale,
                2
            )
            .await,
            Settled::At(cancelled)
        );
        assert_eq!(
            settle(
                &js,
                &events,
                C,
                &newest_inventory_change(&events, C).await,
                &Unresolved::Moved("c".into()),
                2
            )
            .await,
            Settled::At(cancelled)
        );
        assert_eq!(placements_of("c").await, 0);

        // A node changed after the decision: not sent again (it may name GPUs that are gone),
        // only looked up.
        let d = append(&js, "d", submitted("d")).await;
        let (node, envelope) = n1_resized();
        admin::append(&js, subjects::node(C, "n1"), &node, &envelope)
            .await
            .unwrap();
        let fenced = Unresolved::Unanswered(Box::new(placement("d", d, "n1")));
        assert_eq!(
            settle(
                &js,
                &events,
                C,
                &newest_inventory_change(&events, C).await,
                &fenced,
                2
            )
            .await,
            Settled::At(d)
        );
        assert_eq!(placements_of("d").await, 0);
    }

    /// A placement of unknown outcome decided longer ago than [`RESEND_WITHIN_MS`] (an outage
    /// in between) is not sent again: landing now, it could run into a maintenance window or a
    /// reservation its cycle kept it clear of. It is looked up, and the next cycle decides
    /// the job again from what the log holds.
    #[tokio::test]
    async fn a_placement_decided_too_long_ago_is_not_sent_again() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        let a = append(&js, "a", submitted("a")).await;
        let p = placement("a", a, "n1");
        let decided = p.event.at_ms;
        let stale = Unresolved::Unanswered(Box::new(p));
        let nodes = newest_inventory_change(&events, C).await;
        let later = decided + RESEND_WITHIN_MS + 1;
        assert_eq!(
            settle(&js, &events, C, &nodes, &stale, later).await,
            Settled::At(a),
            "the job's newest event: its submission"
        );
        let placed = subjects::job_event(C, "a", "job_placed");
        let stored = fairshare_testkit::events::stored(&js).await;
        assert!(
            !stored.iter().any(|s| s.subject == placed),
            "nothing placed"
        );
    }

    /// A placement decided before a node event that landed since is not sent again, but its
    /// first send may still sit in the client's buffer across a reconnect and land after the
    /// node event. Its settling must not answer before that send lands (a lookup alone, on a
    /// connection that is back first, would), or the next cycle gives its GPUs away again.
    #[tokio::test]
    async fn a_fenced_placement_buffered_across_a_reconnect_is_settled_once_it_lands() {
        use std::time::Duration;
        let mut server = fairshare_testkit::NatsServer::start().unwrap();
        // The deciding client comes back 2 s after the server does; the other at once.
        let slow = async_nats::ConnectOptions::new()
            .reconnect_delay_callback(|_| Duration::from_secs(2))
            .connect(server.url())
            .await
            .unwrap();
        let js = jetstream::new(slow.clone());
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        let other = jetstream::new(async_nats::connect(server.url()).await.unwrap());
        let j = append(&other, "j", submitted("j")).await;

        server.kill();
        // Once the client knows the connection is gone, a send waits in its buffer (before,
        // it could be written to the dead socket and lost, which is not this case).
        tokio::time::timeout(Duration::from_secs(10), async {
            while slow.connection_state() == async_nats::connection::State::Connected {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the client sees the server gone");
        let p = placement("j", j, "n1");
        // Sent while the server is down: it waits in the client's buffer, its answer lost.
        drop(send(&js, C, &p).await.unwrap());
        server.restart().unwrap();

        // A node event lands while the deciding client is still away.
        let (node, envelope) = n1_resized();
        let fence = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match admin::append(&other, subjects::node(C, "n1"), &node, &envelope).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await
        .expect("the other client is back");
        let events = other.get_stream(EVENTS_STREAM).await.unwrap();
        let newest = newest_inventory_change(&events, C).await;
        assert_eq!(newest, Ok(fence));

        let settled = settle(
            &js,
            &events,
            C,
            &newest,
            &Unresolved::Unanswered(Box::new(p)),
            2,
        )
        .await;
        // The buffered send has landed by now (the slow client is back): after the fence.
        let placed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let newest = newest_of_job(&events, C, "j").await.unwrap();
                if newest > j {
                    break newest;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the buffered placement lands");
        assert!(placed > fence, "stored after the node event");
        assert_eq!(settled, Settled::At(placed), "the fold must reach it first");
    }
}
