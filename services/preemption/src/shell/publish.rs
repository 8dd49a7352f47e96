//! Publishing one pass's effects: each on the job's or node's own subject, with a deterministic
//! message id and optimistic concurrency over the subject's events.
//!
//! | effect | subject | message id | expected last sequence |
//! |---|---|---|---|
//! | `PreemptionOrdered` | `…job.<job>.preemption_ordered` | `preempt:<job>:<expected>` | job's newest event |
//! | `JobPreempted{killed}` | `…job.<job>.job_preempted` | `killed:<job>:<expected>` | job's newest event |
//! | `JobRequeued` | `…job.<job>.job_requeued` | `requeue:<job>:<expected>` | job's newest event |
//! | `NodeDrained` | `…node.<node>` | `drained:<node>:<expected>` | node's newest event |
//!
//! `expected` is the newest event of the job (or node) the deciding state had folded, so an
//! effect never lands after anything else happened to it (the launcher's confirmation racing a
//! kill, a second order for the same job, an uncordon racing a drained report). A refusal is not
//! an error: the log moved and the next pass decides from it. The same effect decided twice
//! (a retry, a restart) has the same message id and expected sequence, so it lands at most once.
//!
//! When one pass emits two events for the same job (a kill, then its requeue), the second is
//! sent after the first is acknowledged, expecting the first's sequence; if the first did not
//! land, the second is not sent (the next pass decides it again from the log).
//!
//! A job's effect carries, as `traceparent`, its own span: a child of the job's newest traced
//! entry, so an order joins the trace of the job it stops.
//!
//! An effect whose acknowledgement never came may still be stored later (from the client's
//! reconnect buffer, or the stream's replication), and a lookup of its subject can answer
//! before it lands: the next pass, not seeing an order, could pick another victim for the same
//! waiter. So its outcome is settled by sending the identical message again ([`settle`]): the
//! server answers after the first send, with its sequence (a repeat), a refusal (then the
//! subject's newest event is looked up), or by storing it. An order whose waiter has moved
//! since is not sent again (it would stop its victim for nothing now): its subject is looked
//! up, as before, and a first send still in flight can land after that look (the waiter is
//! placed or gone by then, so no second victim is ordered for it). Nor is an order decided more
//! than half its grace (at most `ORDER_RESEND_WITHIN_MS`) before: landing now, with the
//! deadline it was decided with, it would give its victim less grace than promised. It is
//! looked up behind a message the server must refuse, so a first send still in the client's
//! buffer has landed by then, and the next pass decides again. A `NodeDrained` report is not
//! settled at all ([`Outcome::unreported`]).

use std::collections::HashMap;

use async_nats::jetstream::{self, context::PublishErrorKind};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::{codec, subjects};
use fairshare_runtime::envelope::Envelope;
use fairshare_runtime::log::newest_sequence;
use fairshare_runtime::retry::{ResendAnswer, resend_answer};
use fairshare_runtime::telemetry::{Handling, Relation, Role};

use super::fold::ShellFold;

/// What became of one pass's effects.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// Appended.
    pub landed: usize,
    /// Dropped as a repeat of an earlier identical message id.
    pub duplicates: usize,
    /// Refused: the subject moved since the state the pass decided from (or, for an order,
    /// another victim's order for the same waiter was refused, or the waiter's own events
    /// moved).
    pub refused: usize,
    /// Not sent or unacknowledged (connection trouble), drained reports aside: decide again
    /// later. The pass stops at the first such effect: the ones after it would most likely wait out the same
    /// trouble one acknowledgement timeout each, and are decided again anyway.
    pub failed: usize,
    /// `NodeDrained` reports not sent or unacknowledged: not settled, and no reason to wait
    /// (the next pass reports the node again if it is still empty and unreported).
    pub unreported: usize,
    /// Failed effects that could not be settled either ([`settle`]): each may have landed
    /// unseen, so no pass may decide until it is settled.
    pub unresolved: Vec<Unanswered>,
    /// Highest stream sequence acknowledged, or found behind a refusal or a waiter that moved
    /// (0 if none): the fold must reach it before the next pass, or that pass would order the
    /// same things again, or another victim for the same waiter.
    pub max_sequence: u64,
}

/// An effect sent without an answer: what it takes to send it again, identical.
#[derive(Debug, Clone)]
pub(crate) struct Unanswered {
    /// Its subject.
    pub subject: String,
    /// Its headers (message id, expected sequence, trace).
    pub headers: async_nats::HeaderMap,
    /// Its bytes.
    pub payload: bytes::Bytes,
    /// The filter its expected sequence is checked over (the job's or node's subjects).
    pub scope: String,
    /// The waiter an order was for (empty for other effects).
    pub for_job_id: String,
    /// The waiter's newest event the deciding state had folded.
    pub waiter_seen: u64,
    /// Until when it may be sent again (Unix ms, the service's "now"): an order carries the
    /// grace deadline it was decided with, so one sent again after an outage would give its
    /// victim less grace than promised, or none (killed by the next pass, its GPUs counted
    /// free while it runs). Past this it is only looked up, and decided again if it never
    /// landed (a first send held in the client's buffer can still land late: its times are
    /// taken as written). Kills and requeues may be sent again at any time.
    pub resend_until_ms: i64,
}

/// How long after it was decided an order may still be sent again: at most this, and at most
/// half its grace, so an order we send again leaves its victim most of its grace.
pub(crate) const ORDER_RESEND_WITHIN_MS: i64 = 10_000;

/// Until when the effect `body`, decided at `at_ms`, may be sent again
/// ([`Unanswered::resend_until_ms`]).
fn resend_until(at_ms: i64, body: &Body) -> i64 {
    match body {
        Body::PreemptionOrdered(p) => {
            let half_grace = p.grace_deadline_ms.saturating_sub(at_ms) / 2;
            at_ms.saturating_add(half_grace.clamp(0, ORDER_RESEND_WITHIN_MS))
        }
        _ => i64::MAX,
    }
}

/// Settles `unanswered` (see the module doc): the sequence the fold must reach before the next
/// pass, or why the stream did not answer.
pub(crate) async fn settle(
    js: &jetstream::Context,
    cluster: &str,
    unanswered: &Unanswered,
    now_ms: i64,
) -> Result<u64, String> {
    if now_ms > unanswered.resend_until_ms {
        return look_up_behind_a_barrier(js, unanswered).await;
    }
    let waiter_moved = !unanswered.for_job_id.is_empty()
        && waiter_moved(js, cluster, &unanswered.for_job_id, unanswered.waiter_seen)
            .await?
            .is_some();
    if !waiter_moved {
        // As when it was first sent: a duplicate another publisher's entry holds is sent
        // again under an id of its own.
        let answer = async {
            let ack = js
                .publish_with_headers(
                    unanswered.subject.clone(),
                    unanswered.headers.clone(),
                    unanswered.payload.clone(),
                )
                .await?
                .await?;
            fairshare_runtime::log::resend_if_squatted(
                js,
                &unanswered.subject,
                &unanswered.headers,
                unanswered.payload.clone(),
                ack,
            )
            .await
        }
        .await;
        match resend_answer(answer) {
            ResendAnswer::Stored(sequence) => return Ok(sequence),
            ResendAnswer::Unknown(why) => return Err(why),
            ResendAnswer::Refused => {}
        }
    }
    newest_on(js, &unanswered.scope).await
}

/// The newest sequence of `unanswered`'s subject, looked up behind a message the server is
/// sure to refuse (on its subject, expecting no event there at all), which this connection's
/// earlier sends, the unanswered one's first among them, reach the stream before: a lookup
/// alone could answer while that first send still waits in the client's buffer across a
/// reconnect, and the next pass would choose another victim for the same waiter.
async fn look_up_behind_a_barrier(
    js: &jetstream::Context,
    unanswered: &Unanswered,
) -> Result<u64, String> {
    fairshare_runtime::retry::barrier(
        js,
        unanswered.subject.clone(),
        unanswered.scope.clone(),
        format!("barrier:{}", unanswered.subject),
    )
    .await?;
    newest_on(js, &unanswered.scope).await
}

/// Where and how one body is appended; `None` for bodies this service never publishes or for
/// a job the fold holds no subject sequence for.
fn target(
    fold: &ShellFold,
    cluster: &str,
    body: &Body,
    chained: &HashMap<String, u64>,
) -> Option<(String, String, u64, String)> {
    let job = |job_id: &str, prefix: &str| {
        let expected = chained
            .get(job_id)
            .copied()
            .or_else(|| fold.job_sequence(job_id))?;
        let event = pb::Event {
            at_ms: 0,
            body: Some(body.clone()),
        };
        Some((
            subjects::job_event(cluster, job_id, codec::event_kind(&event)),
            format!("{prefix}:{job_id}:{expected}"),
            expected,
            subjects::job(cluster, job_id),
        ))
    };
    match body {
        Body::PreemptionOrdered(p) => job(&p.job_id, "preempt"),
        Body::JobPreempted(p) => job(&p.job_id, "killed"),
        Body::JobRequeued(r) => job(&r.job_id, "requeue"),
        Body::NodeDrained(n) => {
            let subject = subjects::node(cluster, &n.node);
            Some((
                subject.clone(),
                // The node's newest event, like a job's: a report after the cordon, and a
                // second one once a late placement has come and gone (the first report is then
                // the newest), each get their own id.
                format!("drained:{}:{}", n.node, fold.node_sequence(&n.node)),
                fold.node_sequence(&n.node),
                subject,
            ))
        }
        _ => None,
    }
}

fn key_of(body: &Body) -> Option<&str> {
    match body {
        Body::PreemptionOrdered(p) => Some(&p.job_id),
        Body::JobPreempted(p) => Some(&p.job_id),
        Body::JobRequeued(r) => Some(&r.job_id),
        Body::NodeDrained(n) => Some(&n.node),
        _ => None,
    }
}

/// The sequence of the newest event on `filter`, or why the stream did not answer.
pub(crate) async fn newest_on(js: &jetstream::Context, filter: &str) -> Result<u64, String> {
    let events = js
        .get_stream_no_info(EVENTS_STREAM)
        .await
        .map_err(|e| e.to_string())?;
    newest_sequence(&events, filter)
        .await
        .inspect_err(|e| tracing::warn!(filter, "cannot look up the newest event: {e}"))
}

/// The newest event of job `waiter` if it is past `seen`, the newest the deciding state had
/// folded (placed, cancelled, ended since): victims ordered off for it could be ordered for
/// nothing. `None` if it has not moved.
async fn waiter_moved(
    js: &jetstream::Context,
    cluster: &str,
    waiter: &str,
    seen: u64,
) -> Result<Option<u64>, String> {
    let newest = newest_on(js, &subjects::job(cluster, waiter)).await?;
    Ok((newest > seen).then_some(newest))
}

/// Appends `events` in order, each acknowledged before the next (a pass emits a handful),
/// except that `NodeDrained` reports go last.
///
/// Why last: a drained report is the one effect nothing else in the pass depends on (no order,
/// kill or requeue names a node's report, and the audit re-derives orders, not reports), and
/// one the server never answers costs an acknowledgement timeout; sent last, it holds up none of
/// the others. (A report that is not acknowledged does not stop the pass, nor is it settled:
/// [`Outcome::unreported`].)
pub(crate) async fn publish(
    js: &jetstream::Context,
    cluster: &str,
    fold: &ShellFold,
    mut events: Vec<pb::Event>,
) -> Outcome {
    // A stable sort: everything else keeps its order (a kill before its requeue).
    events.sort_by_key(|e| matches!(e.body, Some(Body::NodeDrained(_))));
    // The pass decided at its events' time; settling an unanswered one comes later by however
    // long the sends before it took (an acknowledgement timeout, say).
    let started = std::time::Instant::now();
    let mut outcome = Outcome::default();
    // Per job: the sequence of this pass's earlier event of it, if it landed.
    let mut chained: HashMap<String, u64> = HashMap::new();
    let mut skipped: Vec<String> = Vec::new();
    // Waiters one of whose victims' orders was refused: the rest of that plan would not let
    // them fit, so its other victims are not ordered off for nothing; the next pass decides
    // again from the moved state.
    let mut abandoned: Vec<String> = Vec::new();
    // Waiters whose own events were looked up: each order is fenced on its victim, and the
    // reason it is given for, the waiter still waiting as the pass saw it, is checked here.
    let mut waiters_checked: Vec<String> = Vec::new();
    for event in events {
        let Some(body) = &event.body else { continue };
        let key = key_of(body).unwrap_or_default().to_owned();
        if skipped.contains(&key) {
            continue;
        }
        if let Body::PreemptionOrdered(p) = body
            && !p.for_job_id.is_empty()
            && !waiters_checked.contains(&p.for_job_id)
        {
            waiters_checked.push(p.for_job_id.clone());
            let seen = fold.job_sequence(&p.for_job_id).unwrap_or(0);
            // A lookup that fails says no: the order goes, fenced on its victim as always.
            if let Ok(Some(newest)) = waiter_moved(js, cluster, &p.for_job_id, seen).await {
                abandoned.push(p.for_job_id.clone());
                // The next pass waits for the fold to see why (its placement, say).
                outcome.max_sequence = outcome.max_sequence.max(newest);
            }
        }
        if let Body::PreemptionOrdered(p) = body
            && !p.for_job_id.is_empty()
            && abandoned.contains(&p.for_job_id)
        {
            tracing::debug!(
                job_id = p.job_id,
                for_job_id = p.for_job_id,
                "not ordered: the plan for its waiter no longer holds (another victim's order was refused, or the waiter moved on)"
            );
            outcome.refused += 1;
            continue;
        }
        let Some((subject, message_id, expected, scope)) = target(fold, cluster, body, &chained)
        else {
            tracing::warn!(
                ?body,
                "effect without a known subject sequence, not published"
            );
            continue;
        };
        // A job's order, kill or requeue is a child of the job's newest traced event (its
        // start, for a running victim); a drained node belongs to no job's trace.
        let span = match body {
            Body::NodeDrained(_) => None,
            _ => Some(Handling::start(
                format!("preemption {}", codec::event_kind(&event)),
                Role::Publish,
                fold.job_trace(&key),
                Relation::Child,
                &[("fairshare.job_id", &key)],
            )),
        };
        let envelope = Envelope {
            message_id: message_id.clone(),
            trace: span.as_ref().map(Handling::hand_on),
            expected_last_subject_sequence: Some((expected, Some(scope.clone()))),
            ..Default::default()
        };
        let (headers, payload) = (envelope.to_headers(), codec::encode(&event));
        // A duplicate another publisher's entry holds (a launcher may publish its reports with
        // any headers) is sent again under an id of its own, with the same fence.
        let result = async {
            let ack = js
                .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                .await?
                .await?;
            fairshare_runtime::log::resend_if_squatted(js, &subject, &headers, payload.clone(), ack)
                .await
        }
        .await;
        match result {
            Ok(ack) => {
                outcome.max_sequence = outcome.max_sequence.max(ack.sequence);
                if ack.duplicate {
                    outcome.duplicates += 1;
                } else {
                    outcome.landed += 1;
                }
                tracing::debug!(message_id, sequence = ack.sequence, "published");
                if !matches!(body, Body::NodeDrained(_)) {
                    chained.insert(key, ack.sequence);
                }
            }
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                tracing::debug!(message_id, "refused: the subject moved on");
                outcome.refused += 1;
                // The next pass waits for the fold to see what moved it: perhaps this very
                // effect, sent by an earlier pass and stored late. A failed lookup leaves it
                // to the fold catching up.
                if let Ok(newest) = newest_on(js, &scope).await {
                    outcome.max_sequence = outcome.max_sequence.max(newest);
                }
                if let Body::PreemptionOrdered(p) = body
                    && !p.for_job_id.is_empty()
                {
                    abandoned.push(p.for_job_id.clone());
                }
                skipped.push(key);
            }
            // A report holds up nothing, so it is not settled: one that can never land
            // (credentials that deny the node subjects) would otherwise keep every later pass
            // settling it, no kill, requeue or order decided again. One landing late is
            // harmless (the fold takes no report of a node that holds work), and one lost is
            // made again by the next pass that finds the node empty and unreported.
            Err(e) if matches!(body, Body::NodeDrained(_)) => {
                tracing::warn!(message_id, "drained report not published: {e}");
                outcome.unreported += 1;
            }
            Err(e) => {
                tracing::warn!(message_id, "not published, will decide again: {e}");
                outcome.failed += 1;
                // It may have landed all the same (an acknowledgement lost in a leader change),
                // or land later: the next pass must not decide before the fold has seen it, or
                // it could pick another victim for the same waiter.
                let for_job_id = match body {
                    Body::PreemptionOrdered(p) => p.for_job_id.clone(),
                    _ => String::new(),
                };
                let unanswered = Unanswered {
                    subject,
                    headers,
                    payload,
                    scope,
                    waiter_seen: fold.job_sequence(&for_job_id).unwrap_or(0),
                    for_job_id,
                    resend_until_ms: resend_until(event.at_ms, body),
                };
                let elapsed = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
                let now_ms = event.at_ms.saturating_add(elapsed);
                match settle(js, cluster, &unanswered, now_ms).await {
                    Ok(sequence) => outcome.max_sequence = outcome.max_sequence.max(sequence),
                    Err(_) => outcome.unresolved.push(unanswered),
                }
                break;
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fairshare_events::streams::EVENTS_STREAM;
    use fairshare_runtime::admin;
    use fairshare_runtime::log::LogEntry;

    const C: &str = "c";

    /// Appends `body` for job `job` and folds it.
    async fn append(js: &jetstream::Context, fold: &mut ShellFold, job: &str, body: Body) {
        let event = pb::Event {
            at_ms: 1,
            body: Some(body),
        };
        let subject = subjects::job_event(C, job, codec::event_kind(&event));
        let envelope = Envelope {
            message_id: format!("{subject}:test"),
            ..Default::default()
        };
        let sequence = admin::append(js, subject.clone(), &event, &envelope)
            .await
            .unwrap();
        fold.apply(&LogEntry {
            sequence,
            subject,
            event: Ok(event),
            pending: 0,
            trace: None,
            stored_ms: None,
        });
    }

    /// A resumable 1-GPU job `job` of allocation `x`.
    fn submitted(job: &str) -> Body {
        Body::JobSubmitted(pb::JobSubmitted {
            job_id: job.into(),
            spec: Some(pb::JobSpec {
                cluster: C.into(),
                allocation: "x".into(),
                gpus: 1,
                resumable: true,
                ..Default::default()
            }),
            shape: Some(pb::Shape {
                nodes: 1,
                gpus_per_node: 1,
            }),
            ..Default::default()
        })
    }

    async fn fold_all(js: &jetstream::Context, fold: &mut ShellFold) {
        let stream = js.get_stream(EVENTS_STREAM).await.unwrap();
        let last = stream.get_info().await.unwrap().state.last_sequence;
        for sequence in fold.last_applied() + 1..=last {
            let m = stream.get_raw_message(sequence).await.unwrap();
            fold.apply(&LogEntry {
                sequence,
                subject: m.subject.to_string(),
                event: codec::decode_log_entry(&m.subject, &m.payload),
                pending: 0,
                trace: None,
                stored_ms: None,
            });
        }
    }

    /// A fresh server with the streams, and a fold that has seen `jobs` submitted.
    async fn submitted_jobs(
        jobs: &[&str],
    ) -> (fairshare_testkit::NatsServer, jetstream::Context, ShellFold) {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server
            .jetstream(std::time::Duration::from_secs(5))
            .await
            .unwrap();
        let mut fold = ShellFold::new(C);
        for job in jobs {
            append(&js, &mut fold, job, submitted(job)).await;
        }
        (server, js, fold)
    }

    /// Appends `body` on job `job`'s subject without folding it: the log moves behind the
    /// fold's back.
    async fn behind_the_folds_back(js: &jetstream::Context, job: &str, body: Body) {
        let event = pb::Event {
            at_ms: 2,
            body: Some(body),
        };
        let subject = subjects::job_event(C, job, codec::event_kind(&event));
        let envelope = Envelope {
            message_id: format!("{subject}:behind"),
            ..Default::default()
        };
        admin::append(js, subject, &event, &envelope).await.unwrap();
    }

    fn order_for_w(victim: &str) -> Body {
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: victim.into(),
            for_job_id: "w".into(),
            grace_deadline_ms: 35,
            ..Default::default()
        })
    }

    /// Asserts that nothing was written for `job` beyond what the fold saw.
    async fn nothing_written_for(js: &jetstream::Context, fold: &ShellFold, job: &str) {
        let stream = js.get_stream(EVENTS_STREAM).await.unwrap();
        let newest = newest_sequence(&stream, &subjects::job(C, job))
            .await
            .unwrap();
        assert_eq!(newest, fold.job_sequence(job).unwrap(), "{job}");
    }

    /// Two victims ordered off for one waiter; the first's subject moved (its launcher
    /// reported something the fold has not seen): its order is refused, and the second is not
    /// ordered off for a plan that no longer holds.
    #[tokio::test]
    async fn a_refused_order_withdraws_the_rest_of_its_plan() {
        let (_server, js, fold) = submitted_jobs(&["v1", "v2", "w"]).await;
        let started = Body::JobStarted(pb::JobStarted {
            job_id: "v1".into(),
        });
        behind_the_folds_back(&js, "v1", started).await;
        let events = crate::domain::into_events(vec![order_for_w("v1"), order_for_w("v2")], 5);
        let out = publish(&js, C, &fold, events).await;
        assert_eq!((out.landed, out.refused, out.failed), (0, 2, 0));
        nothing_written_for(&js, &fold, "v2").await;
        // The next pass waits until the fold has seen what moved v1.
        let v1_newest = newest_on(&js, &subjects::job(C, "v1")).await.unwrap();
        assert!(v1_newest > fold.job_sequence("v1").unwrap());
        assert_eq!(out.max_sequence, v1_newest);
    }

    /// The waiter was placed (a job finished meanwhile) after the state the pass decided
    /// from: its victim is not ordered off for it.
    #[tokio::test]
    async fn no_victim_is_ordered_off_for_a_waiter_that_moved_on() {
        let (_server, js, fold) = submitted_jobs(&["v", "w"]).await;
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: "w".into(),
            ..Default::default()
        });
        behind_the_folds_back(&js, "w", placed).await;
        let events = crate::domain::into_events(vec![order_for_w("v")], 5);
        let out = publish(&js, C, &fold, events).await;
        assert_eq!((out.landed, out.refused), (0, 1));
        nothing_written_for(&js, &fold, "v").await;
        // The next pass waits until the fold has seen the waiter's placement.
        let w_newest = newest_on(&js, &subjects::job(C, "w")).await.unwrap();
        assert_eq!(out.max_sequence, w_newest);
    }

    /// A launcher's message squatting an order's message id (its own job's report, the id
    /// copied from the log's pattern) is no order: the order is sent again under an id of its
    /// own and lands, instead of being taken for a duplicate.
    #[tokio::test]
    async fn an_order_whose_id_another_publisher_took_lands_under_its_own() {
        let (_server, js, fold) = submitted_jobs(&["v", "w"]).await;
        let expected = fold.job_sequence("v").unwrap();
        fairshare_testkit::events::squat_message_id(&js, C, &format!("preempt:v:{expected}")).await;
        let events = crate::domain::into_events(vec![order_for_w("v")], 5);
        let out = publish(&js, C, &fold, events).await;
        assert_eq!((out.landed, out.duplicates), (1, 0));
        let stream = js.get_stream(EVENTS_STREAM).await.unwrap();
        let newest = stream
            .get_last_raw_message_by_subject(&subjects::job(C, "v"))
            .await
            .unwrap();
        assert_eq!(
            newest.subject.as_str(),
            subjects::job_event(C, "v", "preemption_ordered")
        );
    }

    /// A drained report the server never stores (the service's credentials deny the node
    /// subjects) holds up no order decided in the same pass: the reports go last.
    #[tokio::test]
    async fn a_drained_report_that_cannot_land_holds_up_no_order() {
        let config = format!(
            "authorization {{ users = [ {{ user: p, password: p, permissions: {{ \
             publish: {{ allow: [\">\"], deny: [\"{}\"] }}, subscribe: \">\" }} }} ] }}",
            subjects::node(C, "*")
        );
        let server = fairshare_testkit::NatsServer::start_with_config(&config).unwrap();
        let client = async_nats::ConnectOptions::with_user_and_password("p".into(), "p".into())
            .connect(server.url())
            .await
            .unwrap();
        let mut js = jetstream::new(client);
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        let mut fold = ShellFold::new(C);
        for job in ["v", "w"] {
            append(&js, &mut fold, job, submitted(job)).await;
        }
        // A refused publish is never acknowledged: do not wait the default 5 s for it.
        js.set_timeout(std::time::Duration::from_secs(1));
        let drained = Body::NodeDrained(pb::NodeDrained {
            cluster: C.into(),
            node: "n1".into(),
        });
        // In the order the domain returns them: the report before the fair-share order.
        let events = crate::domain::into_events(vec![drained, order_for_w("v")], 5);
        let out = publish(&js, C, &fold, events).await;
        assert_eq!(
            (out.landed, out.failed, out.unreported),
            (1, 0, 1),
            "{out:?}"
        );
        assert!(out.unresolved.is_empty(), "nothing to settle");
        let stream = js.get_stream(EVENTS_STREAM).await.unwrap();
        let newest = newest_sequence(&stream, &subjects::job(C, "v"))
            .await
            .unwrap();
        assert!(newest > fold.job_sequence("v").unwrap(), "the order landed");
    }

    #[tokio::test]
    async fn a_kill_and_its_requeue_land_chained_and_a_stale_repeat_is_refused() {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = jetstream::new(client);
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        let mut fold = ShellFold::new(C);
        fold_all(&js, &mut fold).await;
        admin::register_nodes(
            &js,
            1,
            vec![pb::NodeRegistered {
                cluster: C.into(),
                node: "n1".into(),
                gpus: 8,
            }],
        )
        .await
        .unwrap();
        fold_all(&js, &mut fold).await;
        append(&js, &mut fold, "j", submitted("j")).await;
        let before = fold.job_sequence("j").unwrap();
        assert_eq!(before, fold.last_applied());
        let effects = |bodies: Vec<Body>| crate::domain::into_events(bodies, 5);
        let kill_and_requeue = || {
            effects(vec![
                Body::JobPreempted(pb::JobPreempted {
                    job_id: "j".into(),
                    killed: true,
                }),
                Body::JobRequeued(pb::JobRequeued { job_id: "j".into() }),
            ])
        };
        let out = publish(&js, C, &fold, kill_and_requeue()).await;
        assert_eq!((out.landed, out.refused, out.failed), (2, 0, 0));
        let stream = js.get_stream(EVENTS_STREAM).await.unwrap();
        let requeue = stream.get_raw_message(out.max_sequence).await.unwrap();
        let kill = stream.get_raw_message(out.max_sequence - 1).await.unwrap();
        let id = |m: &async_nats::jetstream::message::StreamMessage| {
            m.headers
                .get(fairshare_events::headers::MESSAGE_ID)
                .unwrap()
                .as_str()
                .to_owned()
        };
        assert_eq!(id(&kill), format!("killed:j:{before}"));
        assert_eq!(id(&requeue), format!("requeue:j:{}", out.max_sequence - 1));

        // The same pass decided again from the same (stale) fold: nothing lands twice.
        let again = publish(&js, C, &fold, kill_and_requeue()).await;
        assert_eq!(again.landed, 0);
        assert_eq!(
            again.refused + again.duplicates,
            1,
            "the requeue is not sent"
        );
        fold_all(&js, &mut fold).await;
        assert_eq!(fold.job_sequence("j"), Some(out.max_sequence));

        // A drained report carries its node's newest sequence: the cordon's.
        let cordon = admin::append(
            &js,
            subjects::node(C, "n1"),
            &pb::Event {
                at_ms: 6,
                body: Some(Body::NodeCordoned(pb::NodeCordoned {
                    cluster: C.into(),
                    node: "n1".into(),
                    reason: String::new(),
                })),
            },
            &Envelope {
                message_id: "cordon".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        fold_all(&js, &mut fold).await;
        assert_eq!(fold.node_sequence("n1"), cordon);
        let drained = || {
            effects(vec![Body::NodeDrained(pb::NodeDrained {
                cluster: C.into(),
                node: "n1".into(),
            })])
        };
        let out = publish(&js, C, &fold, drained()).await;
        assert_eq!(out.landed, 1);
        let m = stream.get_raw_message(out.max_sequence).await.unwrap();
        assert_eq!(id(&m), format!("drained:n1:{cordon}"));
        let again = publish(&js, C, &fold, drained()).await;
        assert_eq!(again.landed, 0);
        // Reported again later in the same cordon (a late placement came and went): a new id,
        // not a duplicate of the first report.
        let first = out.max_sequence;
        fold_all(&js, &mut fold).await;
        let second = publish(&js, C, &fold, drained()).await;
        assert_eq!((second.landed, second.duplicates), (1, 0));
        let m = stream.get_raw_message(second.max_sequence).await.unwrap();
        assert_eq!(id(&m), format!("drained:n1:{first}"));
    }

    /// `jobs` submitted and folded, then the server killed: the connection's requests give up
    /// after 500 ms.
    async fn submitted_then_server_gone(
        jobs: &[&str],
    ) -> (fairshare_testkit::NatsServer, jetstream::Context, ShellFold) {
        let mut server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server
            .jetstream(std::time::Duration::from_millis(500))
            .await
            .unwrap();
        let mut fold = ShellFold::new(C);
        for job in jobs {
            append(&js, &mut fold, job, submitted(job)).await;
        }
        server.kill();
        (server, js, fold)
    }

    /// With the server gone, an effect's acknowledgement and its settling both fail: the pass
    /// stops there (the next effect would wait out the same trouble) and keeps the effect as
    /// unresolved, so the service decides nothing until it is settled.
    #[tokio::test]
    async fn with_the_server_gone_a_pass_stops_at_its_first_effect_and_leaves_it_unresolved() {
        let (_server, js, fold) = submitted_then_server_gone(&["j1", "j2"]).await;
        let kills = ["j1", "j2"]
            .map(|job| {
                Body::JobPreempted(pb::JobPreempted {
                    job_id: job.into(),
                    killed: true,
                })
            })
            .to_vec();
        let out = publish(&js, C, &fold, crate::domain::into_events(kills, 5)).await;
        assert_eq!((out.landed, out.failed), (0, 1), "stopped at the first");
        let unresolved: Vec<&str> = out.unresolved.iter().map(|u| u.scope.as_str()).collect();
        assert_eq!(unresolved, vec![subjects::job(C, "j1")]);
        assert_eq!(out.max_sequence, 0);
    }

    /// An order whose outcome stays unknown keeps what settling it later needs: the identical
    /// message, its victim's subjects, and its waiter as the pass saw it.
    #[tokio::test]
    async fn an_unsettled_order_keeps_its_message_and_its_waiter() {
        let (_server, js, fold) = submitted_then_server_gone(&["v", "w"]).await;
        let order = Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "v".into(),
            for_job_id: "w".into(),
            ..Default::default()
        });
        let out = publish(&js, C, &fold, crate::domain::into_events(vec![order], 5)).await;
        assert_eq!(out.failed, 1);
        let [unsettled] = out.unresolved.as_slice() else {
            panic!("one unsettled effect: {:?}", out.unresolved)
        };
        assert_eq!(
            unsettled.subject,
            subjects::job_event(C, "v", "preemption_ordered")
        );
        assert_eq!(unsettled.scope, subjects::job(C, "v"));
        assert_eq!(unsettled.for_job_id, "w");
        assert_eq!(Some(unsettled.waiter_seen), fold.job_sequence("w"));
        let expected = fold.job_sequence("v").unwrap();
        assert_eq!(
            unsettled
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_owned()),
            Some(format!("preempt:v:{expected}"))
        );
        let event = codec::decode_event(&unsettled.payload).unwrap();
        assert!(matches!(event.body, Some(Body::PreemptionOrdered(p)) if p.job_id == "v"));
    }

    /// An effect of unknown outcome is settled by the server's answer to the same message sent
    /// again: not stored yet, it is stored now; stored already, its sequence comes back and
    /// nothing is stored twice. An order whose waiter moved since is not sent again (it would
    /// stop its victim for nothing): its victim's newest event comes back.
    #[tokio::test]
    async fn an_unanswered_effect_is_settled_by_sending_it_again_unless_its_waiter_moved() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let stream = js.get_stream(EVENTS_STREAM).await.unwrap();
        let mut fold = ShellFold::new(C);
        for job in ["v1", "v2", "w"] {
            append(&js, &mut fold, job, submitted(job)).await;
        }
        let order = |fold: &ShellFold, victim: &str| {
            let expected = fold.job_sequence(victim).unwrap();
            let event = pb::Event {
                at_ms: 5,
                body: Some(Body::PreemptionOrdered(pb::PreemptionOrdered {
                    job_id: victim.into(),
                    for_job_id: "w".into(),
                    ..Default::default()
                })),
            };
            let envelope = Envelope {
                message_id: format!("preempt:{victim}:{expected}"),
                expected_last_subject_sequence: Some((expected, Some(subjects::job(C, victim)))),
                ..Default::default()
            };
            Unanswered {
                subject: subjects::job_event(C, victim, "preemption_ordered"),
                headers: envelope.to_headers(),
                payload: codec::encode(&event),
                scope: subjects::job(C, victim),
                for_job_id: "w".into(),
                waiter_seen: fold.job_sequence("w").unwrap(),
                resend_until_ms: resend_until(event.at_ms, event.body.as_ref().unwrap()),
            }
        };
        let orders_of = |victim: &'static str| {
            let stream = stream.clone();
            async move {
                stream
                    .get_last_raw_message_by_subject(&subjects::job_event(
                        C,
                        victim,
                        "preemption_ordered",
                    ))
                    .await
                    .map(|m| m.sequence)
                    .ok()
            }
        };

        // The first send never reached the stream, and a launcher's report took its id
        // meanwhile: the second send stores it, under an id of its own.
        let lost = order(&fold, "v1");
        let id = lost.headers.get("Nats-Msg-Id").unwrap().as_str().to_owned();
        let squatter = fairshare_testkit::events::squat_message_id(&js, C, &id).await;
        let stored = settle(&js, C, &lost, 5).await.unwrap();
        assert_ne!(stored, squatter);
        assert_eq!(orders_of("v1").await, Some(stored));
        // Sent again once more (its answer lost too): the same sequence, nothing new stored.
        assert_eq!(settle(&js, C, &lost, 5).await.unwrap(), stored);
        assert_eq!(
            newest_on(&js, &subjects::job(C, "v1")).await.unwrap(),
            stored
        );

        // The waiter was placed meanwhile: v2's order is not sent again.
        let v2 = order(&fold, "v2");
        let waiter_placed = Body::JobPlaced(pb::JobPlaced {
            job_id: "w".into(),
            ..Default::default()
        });
        append(&js, &mut fold, "w", waiter_placed).await;
        let v2_newest = fold.job_sequence("v2").unwrap();
        assert_eq!(settle(&js, C, &v2, 5).await.unwrap(), v2_newest);
        assert_eq!(orders_of("v2").await, None);
    }

    /// An order of unknown outcome is not sent again once half its grace (at most 10 s) has
    /// gone since it was decided, an outage in between: landing later, with the deadline it
    /// was decided with, its victim would get less grace than promised, or be killed by the
    /// next pass at once. It is only looked up; the next pass decides again.
    #[tokio::test]
    async fn an_order_decided_too_long_ago_is_not_sent_again() {
        let (_server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let mut fold = ShellFold::new(C);
        append(&js, &mut fold, "v", submitted("v")).await;
        let expected = fold.job_sequence("v").unwrap();
        let decided = 1_000_000;
        let body = Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "v".into(),
            grace_deadline_ms: decided + 30_000,
            ..Default::default()
        });
        assert_eq!(resend_until(decided, &body), decided + 10_000);
        let envelope = Envelope {
            message_id: format!("preempt:v:{expected}"),
            expected_last_subject_sequence: Some((expected, Some(subjects::job(C, "v")))),
            ..Default::default()
        };
        let event = pb::Event {
            at_ms: decided,
            body: Some(body.clone()),
        };
        let stale = Unanswered {
            subject: subjects::job_event(C, "v", "preemption_ordered"),
            headers: envelope.to_headers(),
            payload: codec::encode(&event),
            scope: subjects::job(C, "v"),
            for_job_id: String::new(),
            waiter_seen: 0,
            resend_until_ms: resend_until(decided, &body),
        };
        assert_eq!(
            settle(&js, C, &stale, decided + 10_001).await.unwrap(),
            expected,
            "looked up: the victim's newest event"
        );
        let stream = js.get_stream(EVENTS_STREAM).await.unwrap();
        assert!(
            stream
                .get_last_raw_message_by_subject(&subjects::job_event(C, "v", "preemption_ordered"))
                .await
                .is_err(),
            "nothing ordered"
        );
        // A short grace: half of it.
        let short = Body::PreemptionOrdered(pb::PreemptionOrdered {
            grace_deadline_ms: decided + 4_000,
            ..Default::default()
        });
        assert_eq!(resend_until(decided, &short), decided + 2_000);
    }
}
