//! `fairshare explain`: where a job stands and, if it waits, why (asked of the cluster's
//! decision service, which re-runs its decision on demand).

use anyhow::bail;
use clap::Args;
use fairshare_events::pb::{self, explain_reply};
use fairshare_events::{codec, subjects};
use fairshare_model::words::Gpus;
use fairshare_runtime::missing;

use super::{Connection, format_ms};

/// Which job.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The job id.
    #[arg(value_parser = super::job_id)]
    job_id: String,
    /// The job's cluster.
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
}

/// Prints the explanation.
pub async fn explain(args: ExplainArgs, conn: &Connection) -> anyhow::Result<()> {
    // Normalised by its parser (`super::job_id`).
    let job_id = args.job_id;
    let request = pb::ExplainRequest {
        job_id: job_id.clone(),
    };
    let who = format!("the decision service of cluster {}", args.cluster);
    let reply = conn
        .ask(
            subjects::explain_api(&args.cluster),
            codec::encode(&request),
            &who,
        )
        .await?;
    let e = match codec::decode_explain_reply(&reply.payload)?.result {
        Some(explain_reply::Result::Explanation(e)) => e,
        Some(explain_reply::Result::Rejected(r))
            if r.code == pb::RejectionCode::UnknownJob as i32 =>
        {
            // The service holds live jobs only: the log says what became of an ended one, and
            // that is the answer (exit 0); an id the log does not know is a mistake.
            let events = job_events(conn, &args.cluster, &job_id)
                .await
                .map_err(|why| {
                    anyhow::anyhow!(
                        "the decision service holds no live job {job_id:?}, and the log, which \
                         would say whether it ended or never was, cannot be read: {why}"
                    )
                })?;
            match not_live(&job_id, &args.cluster, &events) {
                NotLive::Ended(answer) => {
                    fairshare_runtime::outln!("{answer}");
                    return Ok(());
                }
                NotLive::Unknown(why) | NotLive::NotHeldYet(why) => bail!("{why}"),
            }
        }
        Some(explain_reply::Result::Rejected(r)) => bail!("refused: {}", r.message),
        None => bail!("empty reply from the decision service"),
    };
    fairshare_runtime::out!("{}", render(&e));
    Ok(())
}

/// The kinds of event that end a job's life or begin it, looked up for a job the decision
/// service does not hold.
const LIFE_KINDS: [&str; 6] = [
    "job_submitted",
    "job_finished",
    "job_failed",
    "job_cancelled",
    "job_preempted",
    // After a preemption, a resumable job lives on.
    "job_requeued",
];

/// The newest event of each of [`LIFE_KINDS`] on job `job_id`'s subjects, with its sequence;
/// why not, when the log cannot be read (an empty list would say the job never was).
async fn job_events(
    conn: &Connection,
    cluster: &str,
    job_id: &str,
) -> Result<Vec<(u64, pb::Event)>, String> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let stream = conn
        .js
        .get_stream(fairshare_events::streams::EVENTS_STREAM)
        .await
        .map_err(|e| missing::describe(&e))?;
    let mut events = Vec::new();
    for kind in LIFE_KINDS {
        let subject = subjects::job_event(cluster, job_id, kind);
        match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => {
                if let Ok(event) = codec::decode_log_entry(&m.subject, &m.payload) {
                    events.push((m.sequence, event));
                }
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {}
            Err(e) => return Err(missing::describe(&e)),
        }
    }
    events.sort_by_key(|(sequence, _)| *sequence);
    Ok(events)
}

/// What the log says of a job the decision service does not hold, in words.
#[derive(Debug, PartialEq, Eq)]
enum NotLive {
    /// It ended: how and when.
    Ended(String),
    /// No life event of it is in the cluster's log.
    Unknown(String),
    /// Submitted, but the service has not folded it yet.
    NotHeldYet(String),
}

/// Whether the event at `sequence` ended its job, among its newest life events `events`: a
/// finish, failure or cancellation, or a stop nothing followed (a resumable job's stop is
/// followed by its requeue, or ended by a later cancel, finish or failure).
fn ends(sequence: u64, event: &pb::Event, events: &[(u64, pb::Event)]) -> bool {
    use fairshare_events::pb::event::Body;
    match &event.body {
        Some(Body::JobFinished(_) | Body::JobFailed(_) | Body::JobCancelled(_)) => true,
        Some(Body::JobPreempted(_)) => !events.iter().any(|(s, _)| *s > sequence),
        _ => false,
    }
}

/// Why job `job_id` has no explanation, from its newest life events in the log (sorted by
/// sequence): the first that ended it, as the services keep the first end (a launcher's
/// failure report landing after a cancel changes nothing), or else the newest.
fn not_live(job_id: &str, cluster: &str, events: &[(u64, pb::Event)]) -> NotLive {
    use fairshare_events::pb::event::Body;
    let first_end = events.iter().find(|(s, e)| ends(*s, e, events));
    let Some((sequence, last)) = first_end.or(events.last()) else {
        return NotLive::Unknown(format!(
            "no job {job_id:?} in cluster {cluster:?}'s log: check the id and --cluster"
        ));
    };
    let at = format_ms(last.at_ms);
    let ended = match &last.body {
        Some(Body::JobFinished(f)) => format!("finished at {at} (exit code {})", f.exit_code),
        Some(Body::JobFailed(f)) => format!("failed at {at}: {}", f.reason),
        Some(Body::JobCancelled(c)) => {
            let by = if c.requested_by.is_empty() {
                String::new()
            } else {
                format!(" by {}", c.requested_by)
            };
            format!("was cancelled at {at}{by}: {}", c.reason)
        }
        Some(Body::JobPreempted(p)) => format!(
            "was {} at {at} and, not resumable, ended there",
            if p.killed {
                "killed at its grace deadline"
            } else {
                "stopped for a preemption"
            }
        ),
        _ => {
            return NotLive::NotHeldYet(format!(
                "job {job_id} was submitted at {at} (sequence {sequence}) but the decision \
                 service does not hold it yet: ask again in a moment"
            ));
        }
    };
    let answer = format!("job {job_id} is not live: it {ended} (sequence {sequence})");
    NotLive::Ended(super::printable(&answer).into_owned())
}

/// The explanation as the operator reads it, one fact per line.
fn render(e: &pb::Explanation) -> String {
    let mut lines = Vec::new();
    lines.push(format!(
        "job {} ({}) is {}",
        e.job_id, e.allocation, e.status
    ));
    if e.allocation_rank > 0 {
        lines.push(format!(
            "  its allocation is served {} of {} (allocations below their share floor first, then by window usage)",
            e.allocation_rank, e.allocations_ranked
        ));
    }
    if !e.reason.is_empty() {
        lines.push(format!("  why: {} [{}]", e.reason, e.reason_code));
    }
    for n in &e.nodes {
        lines.push(format!("  holds {} on {}", Gpus(u64::from(n.gpus)), n.node));
    }
    if !e.held_for_it.is_empty() {
        let gpus = Gpus(e.held_for_it.iter().map(|n| u64::from(n.gpus)).sum());
        let nodes: Vec<String> = e
            .held_for_it
            .iter()
            .map(|n| format!("{} on {}", n.gpus, n.node))
            .collect();
        lines.push(format!(
            "  {gpus} freed by preemption are held for it until {} ({})",
            format_ms(e.held_until_ms),
            nodes.join(", ")
        ));
    }
    if !e.victims_stopping.is_empty() {
        lines.push(format!(
            "  still stopping to make room for it: {}",
            e.victims_stopping.join(", ")
        ));
    }
    if let Some(p) = &e.last_preemption {
        let for_job = if p.for_job_id.is_empty() {
            String::new()
        } else {
            format!(" for job {}", p.for_job_id)
        };
        // A cause this build does not know (a newer service) is shown by number.
        let cause = match pb::PreemptionCause::try_from(p.cause) {
            Ok(pb::PreemptionCause::Unspecified) => String::new(),
            Ok(c) => format!(" ({})", c.label()),
            Err(_) => format!(" (cause {})", p.cause),
        };
        // Placed or running and not ordered off now: the order was carried out before this
        // placement, and the job was placed again since.
        let carried_out =
            matches!(e.status.as_str(), "placed" | "running") && e.reason_code != "ordered_off";
        if carried_out {
            lines.push(format!(
                "  earlier preemption order{cause}: {}{for_job}, stopped by {}; placed again since",
                format_ms(p.ordered_at_ms),
                format_ms(p.grace_deadline_ms)
            ));
        } else {
            lines.push(format!(
                "  last preemption order{cause}: {}{for_job}, to stop by {}",
                format_ms(p.ordered_at_ms),
                format_ms(p.grace_deadline_ms)
            ));
        }
        // Being stopped or preempted, the reason is the "why" above; otherwise it is not.
        if e.status == "queued" || carried_out {
            lines.push(format!("    {}", p.reason));
        }
    }
    if let Some(b) = &e.basis {
        lines.push(format!(
            "  (as of sequence {}, {})",
            b.through_sequence,
            format_ms(b.computed_at_ms)
        ));
    }
    // Reasons and ids come from the log, where any launcher writes: control characters are
    // shown escaped, never sent to the terminal.
    lines
        .iter()
        .map(|l| format!("{}\n", super::printable(l)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z.
    const T: i64 = 1_767_225_600_000;

    fn requeued(cause: i32) -> pb::Explanation {
        pb::Explanation {
            job_id: "v".into(),
            allocation: "research/bio".into(),
            status: "queued".into(),
            reason: "waits for 8 GPUs".into(),
            reason_code: "no_room".into(),
            allocation_rank: 2,
            allocations_ranked: 5,
            last_preemption: Some(pb::PreemptionNote {
                ordered_at_ms: T,
                for_job_id: "w".into(),
                reason: "share floor: makes room for job w".into(),
                grace_deadline_ms: T + 30_000,
                cause,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_job_the_service_no_longer_holds_is_said_how_it_ended() {
        use fairshare_events::pb::event::Body;
        let at = |at_ms, body| pb::Event {
            at_ms,
            body: Some(body),
        };
        let submitted = at(
            T,
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: "j".into(),
                ..Default::default()
            }),
        );
        let cancelled = at(
            T + 60_000,
            Body::JobCancelled(pb::JobCancelled {
                job_id: "j".into(),
                reason: "wrong data".into(),
                requested_by: "ada".into(),
            }),
        );
        // The launcher's failure report landing after the cancel (its kill) ends nothing:
        // the services keep the first end.
        let failed = at(
            T + 120_000,
            Body::JobFailed(pb::JobFailed {
                job_id: "j".into(),
                reason: "killed".into(),
            }),
        );
        assert_eq!(
            not_live(
                "j",
                "c",
                &[(5, submitted.clone()), (9, cancelled.clone()), (11, failed)]
            ),
            not_live("j", "c", &[(5, submitted.clone()), (9, cancelled.clone())]),
        );
        // A resumable job stopped for a preemption and cancelled before its requeue ended
        // with the cancel, not with the stop.
        let stopped = at(
            T + 30_000,
            Body::JobPreempted(pb::JobPreempted {
                job_id: "j".into(),
                killed: false,
            }),
        );
        assert_eq!(
            not_live(
                "j",
                "c",
                &[(5, submitted.clone()), (7, stopped), (9, cancelled.clone())]
            ),
            not_live("j", "c", &[(5, submitted.clone()), (9, cancelled.clone())]),
        );
        // An ended job is an answer (printed, exit 0); the others are errors (exit 1).
        assert_eq!(
            not_live("j", "c", &[(5, submitted.clone()), (9, cancelled)]),
            NotLive::Ended(
                "job j is not live: it was cancelled at 2026-01-01T00:01:00Z by ada: wrong \
                 data (sequence 9)"
                    .into()
            )
        );
        assert!(matches!(
            not_live("j", "c", &[(5, submitted)]),
            NotLive::NotHeldYet(why) if why.contains("does not hold it yet")
        ));
        assert_eq!(
            not_live("j", "c", &[]),
            NotLive::Unknown(
                "no job \"j\" in cluster \"c\"'s log: check the id and --cluster".into()
            )
        );
    }

    #[test]
    fn a_requeued_job_shows_the_rule_that_stopped_it_and_the_reason() {
        let text = render(&requeued(pb::PreemptionCause::ShareFloor.into()));
        assert_eq!(
            text,
            "job v (research/bio) is queued\n\
             \x20 its allocation is served 2 of 5 (allocations below their share floor first, then by window usage)\n\
             \x20 why: waits for 8 GPUs [no_room]\n\
             \x20 last preemption order (share floor): 2026-01-01T00:00:00Z for job w, to stop \
             by 2026-01-01T00:00:30Z\n\
             \x20   share floor: makes room for job w\n"
        );
    }

    #[test]
    fn a_running_job_shows_an_order_carried_out_before_as_past_and_one_in_force_as_pending() {
        let mut again = requeued(pb::PreemptionCause::ShareFloor.into());
        again.status = "running".into();
        again.reason = String::new();
        again.reason_code = String::new();
        let text = render(&again);
        assert!(
            text.contains(
                "  earlier preemption order (share floor): 2026-01-01T00:00:00Z for job w, \
                 stopped by 2026-01-01T00:00:30Z; placed again since\n    share floor: makes \
                 room for job w\n"
            ),
            "{text}"
        );
        let mut stopping = again.clone();
        stopping.reason_code = "ordered_off".into();
        stopping.reason = "ordered off: share floor: makes room for job w".into();
        let text = render(&stopping);
        assert!(
            text.contains("  last preemption order (share floor): 2026-01-01T00:00:00Z for job w, to stop by 2026-01-01T00:00:30Z\n"),
            "{text}"
        );
        assert!(!text.contains("placed again"), "{text}");
    }

    /// What a launcher wrote (a reason, a requester) reaches the terminal escaped.
    #[test]
    fn text_from_the_log_is_shown_escaped() {
        let mut e = requeued(pb::PreemptionCause::ShareFloor.into());
        e.reason = "waits\u{1b}[2J".into();
        let text = render(&e);
        assert!(text.contains("why: waits\\u{1b}[2J"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        use fairshare_events::pb::event::Body;
        let failed = pb::Event {
            at_ms: T,
            body: Some(Body::JobFailed(pb::JobFailed {
                job_id: "j".into(),
                reason: "oom\u{7}\u{1b}]0;owned\u{7}".into(),
            })),
        };
        let NotLive::Ended(answer) = not_live("j", "c", &[(9, failed)]) else {
            panic!("ended")
        };
        assert!(!answer.chars().any(char::is_control), "{answer}");
        assert!(answer.contains("failed at"), "{answer}");
    }

    #[test]
    fn a_job_being_made_room_for_shows_what_is_held_and_what_still_stops() {
        let e = pb::Explanation {
            job_id: "w".into(),
            allocation: "research/bio".into(),
            status: "queued".into(),
            held_for_it: vec![
                pb::NodeGpus {
                    node: "n1".into(),
                    gpus: 8,
                },
                pb::NodeGpus {
                    node: "n2".into(),
                    gpus: 4,
                },
            ],
            held_until_ms: T + 90_000,
            victims_stopping: vec!["v1".into(), "v2".into()],
            ..Default::default()
        };
        assert_eq!(
            render(&e),
            "job w (research/bio) is queued\n\
             \x20 12 GPUs freed by preemption are held for it until 2026-01-01T00:01:30Z (8 on n1, \
             4 on n2)\n\
             \x20 still stopping to make room for it: v1, v2\n"
        );
    }

    #[test]
    fn an_order_without_a_cause_or_with_an_unknown_one_still_reads() {
        let old = render(&requeued(pb::PreemptionCause::Unspecified.into()));
        assert!(
            old.contains("  last preemption order: 2026-01-01T00:00:00Z for job w"),
            "{old}"
        );
        let newer = render(&requeued(99));
        assert!(
            newer.contains("  last preemption order (cause 99): "),
            "{newer}"
        );
    }
}
