//! `fairshare submit` and `fairshare cancel`: what a launcher does, by hand.
//!
//! A submission carries the caller's W3C `traceparent` (`--traceparent`, or the `TRACEPARENT`
//! variable a workflow tool sets), unchanged: the CLI records no span of its own, so the
//! submission service's span is the caller's child. Without one the submission service starts
//! the trace. Either way the CLI prints the trace id the job's events carry, under which the
//! services' spans for it (submit, placement, start, preemptions) can be found.

use anyhow::{Context, bail};
use clap::Args;
use fairshare_events::headers::{TRACEPARENT, TraceParent};
use fairshare_events::pb::{self, cancel_reply, submit_reply};
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::{codec, subjects};
use fairshare_model::duration::parse_duration;
use std::time::Duration;

use super::Connection;

/// A job to submit.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Cluster to run on.
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    /// Allocation (leaf path in the budget tree), e.g. research/nlp.
    #[arg(long)]
    allocation: String,
    /// Total GPUs.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    gpus: i64,
    /// Nodes (0: one node if it fits, else whole nodes).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    nodes: i64,
    /// Minimum runtime in whole seconds, protected from preemption (e.g. 15m, 2h, 90s); 0 =
    /// unallocated.
    #[arg(long, value_parser = whole_seconds, allow_hyphen_values = true)]
    min_runtime: i64,
    /// The job can be stopped and requeued.
    #[arg(long)]
    resumable: bool,
    /// Priority within the allocation (higher first; may be negative).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Optional time limit in whole seconds (e.g. 24h), recorded for the launcher to enforce.
    #[arg(long, value_parser = whole_seconds, allow_hyphen_values = true)]
    time_limit: Option<i64>,
    /// User the job runs for.
    #[arg(long, env = "USER", default_value = "unknown")]
    user: String,
    /// Job name.
    #[arg(long, default_value = "")]
    name: String,
    /// Idempotency key; a retry with the same key returns the same job. Default: a new UUIDv7.
    #[arg(long)]
    key: Option<String>,
    /// Opaque launcher payload (e.g. the command line).
    #[arg(long, default_value = "")]
    payload: String,
    /// Publish to the durable intake instead of waiting for the submission service.
    #[arg(long)]
    intake: bool,
    /// W3C trace context to submit under (`00-<trace id>-<span id>-<flags>`), e.g. a
    /// workflow's; default: the `TRACEPARENT` variable if it holds a valid one (an invalid one
    /// is ignored with a warning), else the submission service starts a new trace. The job's
    /// trace id is printed. Flags `00` (not sampled) mean no service exports spans for it.
    #[arg(long)]
    traceparent: Option<String>,
}

/// A job to cancel.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The job id.
    #[arg(value_parser = super::job_id)]
    job_id: String,
    /// Why, recorded on the event.
    #[arg(long, default_value = "cancelled by hand", value_parser = super::reason_text)]
    reason: String,
    /// Who asks.
    #[arg(long, env = "USER", default_value = "unknown")]
    requested_by: String,
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// The submission may have landed, or may not: only a retry with `key` is sure to give one
/// job. The CLI exits with [`RetryWithKey::EXIT_CODE`] for it (as the Python launcher does), so
/// a script can tell it from a rejection (exit 1).
#[derive(Debug)]
pub struct RetryWithKey {
    /// What went wrong.
    pub what: String,
    /// The submission's idempotency key.
    pub key: String,
}

impl std::fmt::Display for RetryWithKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; retry with --key {} and the same arguments: it may have landed, and the same \
             key with the same request never makes a second job (another request with it is \
             refused)",
            self.what, self.key
        )
    }
}

impl std::error::Error for RetryWithKey {}

impl RetryWithKey {
    /// The exit status for an outcome that is not known.
    pub const EXIT_CODE: u8 = 3;

    fn error(what: impl std::fmt::Display, key: &str) -> anyhow::Error {
        RetryWithKey {
            what: what.to_string(),
            key: key.to_owned(),
        }
        .into()
    }
}

/// A duration flag in whole seconds, as the contract carries durations (a usage error
/// otherwise). A fraction is refused, not dropped: `--min-runtime 500ms` would otherwise
/// become 0, which means unallocated. The services work in milliseconds, so the seconds must
/// hold as milliseconds too.
fn whole_seconds(text: &str) -> Result<i64, String> {
    if text.trim_start().starts_with('-') {
        return Err(format!(
            "{text:?} is negative: give 0 or more whole seconds (e.g. 0, 90s, 15m, 2h)"
        ));
    }
    let d = parse_duration(text).map_err(|e| e.to_string())?;
    if d.subsec_nanos() != 0 {
        return Err(format!(
            "{text:?} is not a whole number of seconds (e.g. 90s, 15m, 2h)"
        ));
    }
    i64::try_from(d.as_secs())
        .ok()
        .filter(|s| *s <= i64::MAX / 1000)
        .ok_or_else(|| format!("duration {text:?} is too large"))
}

/// Why a request the client refused to send for its size was not sent (`error` says the sizes).
fn too_large(error: &dyn std::fmt::Display) -> String {
    format!(
        "nothing was sent: the request is larger than the server's max_payload ({error}); \
         shorten --payload or the labels"
    )
}

/// What is wrong with an idempotency key given by hand, if anything: it travels in a NATS
/// header, which cannot hold a control character (the service refuses such keys as well).
fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("--key must not be empty".into());
    }
    key.chars()
        .find(|c| c.is_control())
        .map(|c| format!("--key must not contain control characters, found {c:?}"))
}

/// Answers an intake publish the stream dropped as a repeat of the message with key `key` at
/// intake sequence `sequence`: a retry of this very request (say after an exit 3) is fine, but
/// another request under the key was dropped and will never be a job, so that fails (exit 1),
/// as request/reply answers `KEY_REUSED`.
async fn intake_repeat(
    conn: &Connection,
    key: &str,
    request: &pb::SubmitRequest,
    sequence: u64,
) -> anyhow::Result<()> {
    let first = async {
        // Without the stream's info: a launcher's identity may read single intake messages,
        // nothing more.
        let stream = conn
            .js
            .get_stream_no_info(fairshare_events::streams::INTAKE_STREAM)
            .await
            .map_err(|e| e.to_string())?;
        let message = stream
            .get_raw_message(sequence)
            .await
            .map_err(|e| e.to_string())?;
        codec::decode_submit_request(&message.payload).map_err(|e| e.to_string())
    }
    .await;
    match first {
        Ok(first) if first == *request => {
            // The first publish's context is the one its submission carries.
            fairshare_runtime::outln!(
                "queued in intake already at sequence {sequence} (key {key}): this repeat was \
                 dropped; the outcome appears in the log"
            );
            Ok(())
        }
        Ok(_) => bail!(
            "key {key} was used for another request, queued in intake at sequence {sequence}: \
             this one was dropped and nothing was submitted for it; submit it with a new key"
        ),
        // The first message could not be read back (aged out after 30 days, or the stream
        // did not answer): what was dropped is known, whose request it repeats is not.
        Err(why) => {
            fairshare_runtime::outln!(
                "the intake took a message with key {key} already, at sequence {sequence}, and \
                 dropped this one as its repeat: nothing was submitted for this one (that \
                 message could not be read back: {why}). The log answers only the key's first \
                 use: if this request is not that one, submit it with a new key"
            );
            Ok(())
        }
    }
}

/// Submits one job and prints the answer.
pub async fn submit(args: SubmitArgs, conn: &Connection) -> anyhow::Result<()> {
    let parent = caller_trace(
        args.traceparent.as_deref(),
        std::env::var("TRACEPARENT").ok().as_deref(),
    )?;
    let key = args
        .key
        .unwrap_or_else(|| format!("cli-{}", uuid::Uuid::now_v7()));
    if let Some(problem) = key_problem(&key) {
        bail!(problem);
    }
    let mut headers = async_nats::HeaderMap::new();
    if let Some(parent) = parent {
        headers.insert(TRACEPARENT, parent.to_string().as_str());
    }
    let request = pb::SubmitRequest {
        idempotency_key: key.clone(),
        spec: Some(pb::JobSpec {
            cluster: args.cluster.clone(),
            allocation: args.allocation,
            user: args.user,
            gpus: args.gpus,
            nodes: args.nodes,
            min_runtime_s: args.min_runtime,
            resumable: args.resumable,
            priority: args.priority,
            time_limit_s: args.time_limit.unwrap_or(0),
            payload: args.payload.into_bytes().into(),
            name: args.name,
        }),
    };
    if args.intake {
        headers.insert(
            fairshare_events::headers::MESSAGE_ID,
            fairshare_events::headers::submission_id(&key).as_str(),
        );
        headers.insert(fairshare_events::headers::IDEMPOTENCY_KEY, key.as_str());
        // The key must survive a failure: the publish may have landed, and only a retry with
        // the same key is sure not to make a second job.
        use async_nats::jetstream::context::PublishErrorKind;
        let sent = conn
            .js
            .publish_with_headers(
                subjects::intake(&args.cluster),
                headers,
                codec::encode(&request),
            )
            .await;
        let ack = match sent {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        let ack = match ack {
            Ok(ack) => ack,
            // Refused by the client before sending, or taken by no stream: known not to have
            // landed (exit 1; a retry under the key would fail the same way).
            Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded => {
                bail!("{}", too_large(&e))
            }
            Err(e) if e.kind() == PublishErrorKind::StreamNotFound => bail!(
                "no stream takes {}, so nothing was queued: create the streams \
                 (`fairshare streams`) or start the submission service, which makes them",
                subjects::intake(&args.cluster)
            ),
            Err(e) => {
                return Err(RetryWithKey::error(
                    format!("intake publish not confirmed: {e}"),
                    &key,
                ));
            }
        };
        if ack.duplicate {
            return intake_repeat(conn, &key, &request, ack.sequence).await;
        }
        fairshare_runtime::outln!(
            "queued in intake at sequence {} (key {key}); the outcome appears in the log",
            ack.sequence
        );
        if let Some(parent) = parent {
            fairshare_runtime::outln!("trace {:032x}", parent.trace_id);
        }
        return Ok(());
    }
    let answer = tokio::time::timeout(
        TIMEOUT,
        conn.client
            .request_with_headers(subjects::SUBMIT_API, headers, codec::encode(&request)),
    )
    .await;
    let unknown = |why: String| {
        RetryWithKey::error(
            format!(
                "no usable answer from the submission service within 10 s ({why}; is it \
                 running? `--intake` queues the submission durably instead)"
            ),
            &key,
        )
    };
    let reply = match answer {
        Ok(Ok(reply)) => reply,
        // The server had nobody to hand the request to: it reached no service, so it is known
        // not to have landed (exit 1, not "retry with the key").
        Ok(Err(e)) if matches!(e.kind(), async_nats::RequestErrorKind::NoResponders) => bail!(
            "no submission service is listening, so nothing was submitted: start it, or queue \
             the submission durably with --intake"
        ),
        Ok(Err(e)) if matches!(e.kind(), async_nats::RequestErrorKind::MaxPayloadExceeded) => {
            bail!("{}", too_large(&e))
        }
        Ok(Err(e)) => return Err(unknown(e.to_string())),
        Err(elapsed) => return Err(unknown(elapsed.to_string())),
    };
    let decoded = codec::decode_submit_reply(&reply.payload)
        .map_err(|e| RetryWithKey::error(format!("the reply does not decode: {e}"), &key))?;
    match decoded.result {
        Some(submit_reply::Result::Accepted(a)) => {
            let again = if a.duplicate {
                " (already accepted earlier)"
            } else {
                ""
            };
            fairshare_runtime::outln!(
                "accepted job {} at sequence {}{again}",
                a.job_id,
                a.stream_sequence
            );
            // From the log, not this request: a repeat's job lives in the first one's trace.
            if let Some(t) = submitted_trace(conn, &args.cluster, &a.job_id).await {
                fairshare_runtime::outln!("trace {:032x}", t.trace_id);
            }
            Ok(())
        }
        Some(submit_reply::Result::Rejected(r))
            if r.code == pb::RejectionCode::Unavailable as i32 =>
        {
            Err(RetryWithKey::error(
                format!("not confirmed ({}): {}", code_name(r.code), r.message),
                &key,
            ))
        }
        Some(submit_reply::Result::Rejected(r)) => {
            bail!("rejected ({}): {}", code_name(r.code), r.message)
        }
        None => Err(RetryWithKey::error(
            "empty reply from the submission service",
            &key,
        )),
    }
}

/// The trace context to submit under: `--traceparent` (which must be valid: the caller asked
/// for that trace by name), else the `TRACEPARENT` variable when it holds a valid one. The
/// variable is ambient, set by whatever tool ran the shell, so an empty or malformed one is
/// ignored, with a warning for the latter, rather than blocking every submission.
fn caller_trace(flag: Option<&str>, env: Option<&str>) -> anyhow::Result<Option<TraceParent>> {
    if let Some(value) = flag {
        return Ok(Some(TraceParent::parse(value).context("--traceparent")?));
    }
    match env.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(value) => match TraceParent::parse(value) {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                eprintln!("warning: ignoring the TRACEPARENT variable: {e}");
                Ok(None)
            }
        },
    }
}

/// The `traceparent` job `job_id`'s `JobSubmitted` was appended with, if any.
async fn submitted_trace(conn: &Connection, cluster: &str, job_id: &str) -> Option<TraceParent> {
    let stream = conn.js.get_stream(EVENTS_STREAM).await.ok()?;
    let message = stream
        .get_last_raw_message_by_subject(&subjects::job_event(cluster, job_id, "job_submitted"))
        .await
        .ok()?;
    TraceParent::parse(message.headers.get(TRACEPARENT)?.as_str()).ok()
}

/// A cancel whose outcome is not known: the submission service could not confirm it, or did
/// not answer in time. The CLI exits with [`RetryWithKey::EXIT_CODE`] for it, as for a
/// submission; cancelling again is safe.
#[derive(Debug)]
pub struct CancelUnconfirmed {
    /// What went wrong.
    pub what: String,
}

impl std::fmt::Display for CancelUnconfirmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; the job may or may not be cancelled: cancel it again (a second cancel of a \
             cancelled job is answered \"cancelled already\")",
            self.what
        )
    }
}

impl std::error::Error for CancelUnconfirmed {}

/// Cancels one job and prints the answer.
pub async fn cancel(args: CancelArgs, conn: &Connection) -> anyhow::Result<()> {
    let request = pb::CancelRequest {
        job_id: args.job_id,
        reason: args.reason,
        requested_by: args.requested_by,
    };
    let reply = conn
        .ask(
            subjects::CANCEL_API.to_owned(),
            codec::encode(&request),
            "the submission service",
        )
        .await
        .map_err(|e| {
            // No answer in time: the service may have written the cancellation. (Nobody
            // answering at all wrote nothing: that error stands as it is.)
            let timed_out = e
                .chain()
                .any(|cause| cause.is::<tokio::time::error::Elapsed>());
            if timed_out {
                CancelUnconfirmed {
                    what: format!("{e:#}"),
                }
                .into()
            } else {
                e
            }
        })?;
    let answer = cancel_answer(codec::decode_cancel_reply(&reply.payload)?.result)?;
    fairshare_runtime::outln!("{answer}");
    Ok(())
}

/// What to print for the submission service's answer to a cancel, or the error to end with.
fn cancel_answer(result: Option<cancel_reply::Result>) -> anyhow::Result<String> {
    match result {
        Some(cancel_reply::Result::Cancelled(c)) if c.already => Ok(format!(
            "job {} was cancelled already, at sequence {}; nothing new written",
            c.job_id, c.stream_sequence
        )),
        Some(cancel_reply::Result::Cancelled(c)) => Ok(format!(
            "cancelled job {} at sequence {}",
            c.job_id, c.stream_sequence
        )),
        // The service could not write, or could not confirm its write: not a refusal.
        Some(cancel_reply::Result::Rejected(r))
            if r.code == pb::RejectionCode::Unavailable as i32 =>
        {
            Err(CancelUnconfirmed {
                what: format!("not confirmed ({}): {}", code_name(r.code), r.message),
            }
            .into())
        }
        Some(cancel_reply::Result::Rejected(r)) => {
            bail!("refused ({}): {}", code_name(r.code), r.message)
        }
        None => bail!("empty reply from the submission service"),
    }
}

fn code_name(code: i32) -> &'static str {
    pb::RejectionCode::try_from(code)
        .map(|c| c.as_str_name())
        .unwrap_or("UNKNOWN_CODE")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const VALID: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const OTHER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// A cancel the service could not confirm ends as an unknown outcome (exit 3, "cancel it
    /// again"), not as a refusal (exit 1), which a script takes as final.
    #[test]
    fn an_unconfirmed_cancel_is_told_apart_from_a_refusal() {
        let rejected = |code: pb::RejectionCode| {
            Some(cancel_reply::Result::Rejected(pb::Rejection {
                code: code as i32,
                message: "m".into(),
            }))
        };
        let unsure = cancel_answer(rejected(pb::RejectionCode::Unavailable)).unwrap_err();
        assert!(unsure.is::<CancelUnconfirmed>(), "{unsure:#}");
        assert!(format!("{unsure}").contains("cancel it again"), "{unsure}");
        let refused = cancel_answer(rejected(pb::RejectionCode::JobEnded)).unwrap_err();
        assert!(!refused.is::<CancelUnconfirmed>(), "{refused:#}");
        assert!(format!("{refused}").contains("JOB_ENDED"), "{refused}");
        let done = cancel_answer(Some(cancel_reply::Result::Cancelled(pb::Cancelled {
            job_id: "j".into(),
            stream_sequence: 7,
            already: true,
        })))
        .unwrap();
        assert_eq!(
            done,
            "job j was cancelled already, at sequence 7; nothing new written"
        );
    }

    #[test]
    fn durations_are_whole_seconds_and_keys_have_no_control_characters() {
        assert_eq!(whole_seconds("15m"), Ok(900));
        assert_eq!(whole_seconds("2000ms"), Ok(2));
        let err = whole_seconds("500ms").unwrap_err();
        assert!(err.contains("not a whole number of seconds"), "{err}");
        assert!(whole_seconds("1500ms").is_err());
        // Too large for the services' milliseconds, or for a duration at all: said so.
        assert_eq!(
            whole_seconds("106751991167301d"),
            Err("duration \"106751991167301d\" is too large".to_owned())
        );
        assert!(
            whole_seconds("999999999999999d")
                .unwrap_err()
                .contains("is too large")
        );
        assert_eq!(key_problem("job-1 ✓"), None);
        assert!(key_problem("a\nb").is_some());
        assert!(key_problem("").is_some());
    }

    #[test]
    fn the_flag_wins_and_must_be_valid() {
        let flag = caller_trace(Some(VALID), Some(OTHER)).unwrap().unwrap();
        assert_eq!(flag.trace_id, 0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c);
        let err = caller_trace(Some("00-zz-01"), Some(OTHER)).unwrap_err();
        assert!(format!("{err:#}").contains("--traceparent"), "{err:#}");
        assert!(caller_trace(Some(""), None).is_err());
    }

    #[test]
    fn the_variable_is_used_when_valid_and_ignored_otherwise() {
        let env = caller_trace(None, Some(OTHER)).unwrap().unwrap();
        assert_eq!(env.parent_id, 0x00f0_67aa_0ba9_02b7);
        assert_eq!(
            caller_trace(None, Some(&format!(" {OTHER}\n"))).unwrap(),
            Some(env)
        );
        assert_eq!(caller_trace(None, Some("")).unwrap(), None);
        assert_eq!(caller_trace(None, Some("not-a-trace")).unwrap(), None);
        assert_eq!(caller_trace(None, None).unwrap(), None);
    }
}
