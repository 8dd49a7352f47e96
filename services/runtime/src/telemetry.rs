//! Tracing and OpenTelemetry for the binaries, and the span a service opens per message.
//!
//! Place in the flow: every binary calls [`init`] first. Then, for each message it handles (a
//! request, or a log entry it folds or acts on), a service opens a [`Handling`] span whose
//! parent is the `traceparent` the message carried, and hands [`Handling::hand_on`] on in the
//! `traceparent` header of whatever it publishes because of it. So one job's trace runs from
//! the launcher's submit through the submission service, the decision service's placement and
//! back to the launcher's start (SPEC section 3, principle 5).
//!
//! Export follows the standard variables ([`ExportSetting::from_env`]): spans go to an OTLP
//! collector over HTTP (protobuf) when `OTEL_TRACES_EXPORTER=otlp`, or when it is unset and
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` names one;
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turns it off. `OTEL_SERVICE_NAME`
//! and `OTEL_RESOURCE_ATTRIBUTES` name the service as usual. Without export the spans cost
//! next to nothing, and the trace context is still handed on with fresh span ids, so a
//! collector added later sees whole traces.
//!
//! Replays (a service folding the log again after a restart) open spans *linked* to the old
//! trace, not parented under it ([`Relation::Linked`]): a job's trace keeps the work done when
//! it happened, not every rebuild since.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use fairshare_events::headers::TraceParent;
use fairshare_events::pb;
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue, global};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use tracing_subscriber::EnvFilter;

/// The instrumentation scope every fairshare span is recorded under.
const SCOPE: &str = "fairshare";

/// Set once an exporter is installed: spans that only record (log entries folded) are not
/// even opened without one.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports spans.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// What the process exports, kept alive by `main`: dropping it flushes the spans still
/// buffered and stops the exporter.
#[must_use = "dropping it stops the span export"]
pub struct Telemetry {
    /// The installed provider, when spans are exported.
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported to a collector.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!("OpenTelemetry: could not flush the last spans: {e}");
        }
    }
}

/// Installs human logs on stderr (filtered by `RUST_LOG`, default `info`) and, if the
/// standard variables ask for it, OTLP span export; call once at the top of `main` and keep
/// the result until the service has stopped.
pub fn init(service: &str) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = colour_logs(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .try_init();
    let provider = match ExportSetting::from_env(|name| std::env::var(name).ok()) {
        Ok(ExportSetting::Off) => None,
        Ok(ExportSetting::Otlp) => match install_otlp(service, None) {
            Ok(provider) => Some(provider),
            Err(e) => {
                tracing::warn!("OpenTelemetry export not started: {e}");
                None
            }
        },
        Err(e) => {
            tracing::warn!("OpenTelemetry export not started: {e}");
            None
        }
    };
    tracing::info!(service, otlp = provider.is_some(), "starting");
    Telemetry { provider }
}

/// Whether log lines carry colour codes: only on a terminal, and not when `NO_COLOR` is set
/// to anything but the empty string (<https://no-color.org>). A log written to a file or a
/// pipe stays plain text, so `grep ' WARN '` finds its warnings.
fn colour_logs(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Whether spans are exported, as the standard `OTEL_*` variables say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportSetting {
    /// No export (the default without an OTLP endpoint).
    Off,
    /// OTLP over HTTP with protobuf bodies.
    Otlp,
}

/// A setting of the standard variables this build cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsupportedSetting {
    /// `OTEL_TRACES_EXPORTER` names an exporter other than `otlp` or `none`.
    #[error("OTEL_TRACES_EXPORTER={0:?}: only \"otlp\" and \"none\" are supported")]
    Exporter(String),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (or its traces variant) is not `http/protobuf`.
    #[error("{variable}={value:?}: only \"http/protobuf\" is supported")]
    Protocol {
        /// The variable that was set.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// An endpoint is `https://`: this build carries no TLS client for the exporter, whose
    /// every export would fail unseen.
    #[error("{variable}={value:?}: only http:// endpoints are supported (no TLS in this build)")]
    Tls {
        /// The variable that was set.
        variable: &'static str,
        /// Its value.
        value: String,
    },
}

/// Why span export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the OTLP span exporter: {0}")]
pub struct ExportError(#[from] opentelemetry_otlp::ExporterBuildError);

impl ExportSetting {
    /// Reads the standard variables through `var` (the environment, or a table in tests).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, UnsupportedSetting> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Self::Off);
        }
        let wanted = match set("OTEL_TRACES_EXPORTER").as_deref() {
            Some("none") => return Ok(Self::Off),
            Some("otlp") => true,
            Some(other) => return Err(UnsupportedSetting::Exporter(other.to_owned())),
            None => {
                set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                    || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
            }
        };
        if !wanted {
            return Ok(Self::Off);
        }
        // The endpoint spans go to: the traces one if set, which overrides the general one.
        let used = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .into_iter()
        .find_map(|variable| set(variable).map(|value| (variable, value)));
        if let Some((variable, value)) = used
            && value
                .get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        {
            return Err(UnsupportedSetting::Tls { variable, value });
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = set(variable)
                && value != "http/protobuf"
            {
                return Err(UnsupportedSetting::Protocol { variable, value });
            }
        }
        Ok(Self::Otlp)
    }
}

/// Builds an OTLP/HTTP span exporter (to `traces_url`, or where the standard variables say)
/// with a batching processor, and installs it as the process's tracer provider. `service`
/// names the spans' service unless `OTEL_SERVICE_NAME` does.
pub fn install_otlp(
    service: &str,
    traces_url: Option<&str>,
) -> Result<SdkTracerProvider, ExportError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig as _};
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(url) = traces_url {
        exporter = exporter.with_endpoint(url);
    }
    let exporter = exporter.build()?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service.to_owned());
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    global::set_tracer_provider(provider.clone());
    EXPORTING.store(true, Ordering::Relaxed);
    Ok(provider)
}

/// How a handled message's trace context relates to the span handling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The span is a child of the message's context (handling it as it happens).
    Child,
    /// The span starts a trace of its own with a link to the message's context (a replay).
    Linked,
}

/// What a span handles, which sets its OpenTelemetry kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A request answered by this service (submit, cancel).
    Request,
    /// A log entry folded or acted on.
    Entry,
    /// An event this process publishes of its own accord (a placement, a preemption order,
    /// a launcher's report).
    Publish,
    /// A request this process sends (a launcher's submit).
    Call,
}

/// The span for handling one message. It ends when dropped.
pub struct Handling {
    /// The OpenTelemetry span; none when nothing is exported.
    span: Option<global::BoxedSpan>,
    /// The context messages caused by this one carry.
    hand_on: TraceParent,
}

impl Handling {
    /// Opens a span named `name` for a message that arrived with `incoming` (none: a new
    /// trace), with `attributes` (name, value).
    pub fn start(
        name: impl Into<Cow<'static, str>>,
        role: Role,
        incoming: Option<TraceParent>,
        relation: Relation,
        attributes: &[(&'static str, &str)],
    ) -> Self {
        // Without export a span records nothing: skip the tracer and the attributes (this
        // runs per submission, placement and launcher report), keep handing the trace on.
        if !exporting() {
            return Self {
                span: None,
                hand_on: hand_on(&SpanContext::NONE, incoming, relation),
            };
        }
        let tracer = global::tracer(SCOPE);
        let kind = match role {
            Role::Request => SpanKind::Server,
            Role::Entry => SpanKind::Consumer,
            Role::Publish => SpanKind::Producer,
            Role::Call => SpanKind::Client,
        };
        let mut builder = tracer.span_builder(name).with_kind(kind).with_attributes(
            attributes
                .iter()
                .map(|(k, v)| KeyValue::new(*k, (*v).to_owned()))
                .collect::<Vec<_>>(),
        );
        let remote = incoming.map(remote_context);
        let parent = match (remote, relation) {
            (Some(sc), Relation::Child) => Context::new().with_remote_span_context(sc),
            (Some(sc), Relation::Linked) => {
                builder = builder.with_links(vec![Link::with_context(sc)]);
                Context::new()
            }
            (None, _) => Context::new(),
        };
        let span = builder.start_with_context(&tracer, &parent);
        let hand_on = hand_on(span.span_context(), incoming, relation);
        Self {
            span: Some(span),
            hand_on,
        }
    }

    /// The trace context to put on messages this one causes.
    pub fn hand_on(&self) -> TraceParent {
        self.hand_on
    }

    /// Marks the span as failed with `why`.
    pub fn fail(&mut self, why: &str) {
        if let Some(span) = &mut self.span {
            span.set_status(opentelemetry::trace::Status::error(why.to_owned()));
        }
    }
}

/// The span for folding one log entry, named `<service> <event kind>`, if spans are exported
/// and the entry carries a trace context (entries without one, such as usage snapshots and
/// policy changes, belong to no job's trace). `relation` is [`Relation::Linked`] while a
/// service catches up on the log at start-up. Without export none is opened: such a span
/// hands nothing on, and a rebuild folds hundreds of thousands of entries.
pub fn entry_span(
    service: &str,
    entry: &crate::log::LogEntry,
    relation: Relation,
) -> Option<Handling> {
    if !exporting() {
        return None;
    }
    let trace = entry.trace?;
    let (job_id, kind) = fairshare_events::subjects::job_event_parts(&entry.subject)
        .unwrap_or(("", entry.subject.as_str()));
    let sequence = entry.sequence.to_string();
    Some(Handling::start(
        format!("{service} {kind}"),
        Role::Entry,
        Some(trace),
        relation,
        &[
            ("fairshare.job_id", job_id),
            ("fairshare.sequence", &sequence),
        ],
    ))
}

/// The trace context of each live job, judged from the log's subjects alone: the parent of
/// what a launcher publishes about the job. (The decision and preemption folds keep theirs
/// beside their state, which knows which jobs are live.)
#[derive(Debug, Default)]
pub struct JobTraces {
    /// Per job id, the context of its newest entry that carried one.
    by_job: HashMap<String, TraceParent>,
    /// Live jobs whose submission says they cannot resume: a preemption ends them.
    not_resumable: HashSet<String>,
}

impl JobTraces {
    /// Notes one entry: a job event with a trace context becomes the job's; the job's end
    /// forgets it (finished, failed, cancelled, or preempted when it cannot resume, which no
    /// later event of the job follows).
    pub fn note(&mut self, entry: &crate::log::LogEntry) {
        let Some((job_id, kind)) = fairshare_events::subjects::job_event_parts(&entry.subject)
        else {
            return;
        };
        let ended = match kind {
            "job_finished" | "job_failed" | "job_cancelled" => true,
            "job_preempted" => self.not_resumable.contains(job_id),
            _ => false,
        };
        if ended {
            self.by_job.remove(job_id);
            self.not_resumable.remove(job_id);
            return;
        }
        if let Ok(pb::Event {
            body: Some(pb::event::Body::JobSubmitted(s)),
            ..
        }) = &entry.event
            && s.spec.as_ref().is_some_and(|spec| !spec.resumable)
        {
            self.not_resumable.insert(job_id.to_owned());
        }
        if let Some(trace) = entry.trace {
            self.by_job.insert(job_id.to_owned(), trace);
        }
    }

    /// The context of job `job_id`'s newest traced entry.
    pub fn get(&self, job_id: &str) -> Option<TraceParent> {
        self.by_job.get(job_id).copied()
    }

    /// Jobs remembered.
    pub fn len(&self) -> usize {
        self.by_job.len()
    }

    /// Whether no job is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }
}

/// A `traceparent` as an OpenTelemetry remote span context.
fn remote_context(t: TraceParent) -> SpanContext {
    SpanContext::new(
        TraceId::from(t.trace_id),
        SpanId::from(t.parent_id),
        TraceFlags::new(t.flags),
        true,
        TraceState::default(),
    )
}

/// The context to hand on: the new span's own when one is recorded; without export (a no-op
/// span echoes its parent's context, or none), the incoming trace with a fresh span id, or a
/// fresh trace. A replay's span is not the parent of anything it sends.
fn hand_on(span: &SpanContext, incoming: Option<TraceParent>, relation: Relation) -> TraceParent {
    let fresh_span = || u64::from_be_bytes(RandomIdGenerator::default().new_span_id().to_bytes());
    let recorded = span.is_valid()
        && !span.is_remote()
        && incoming.is_none_or(|t| u64::from_be_bytes(span.span_id().to_bytes()) != t.parent_id);
    if recorded {
        return TraceParent {
            trace_id: u128::from_be_bytes(span.trace_id().to_bytes()),
            parent_id: u64::from_be_bytes(span.span_id().to_bytes()),
            flags: span.trace_flags().to_u8(),
        };
    }
    match (incoming, relation) {
        (Some(t), Relation::Child) => t.child(fresh_span()),
        _ => TraceParent::new_root((
            u128::from_be_bytes(RandomIdGenerator::default().new_trace_id().to_bytes()),
            fresh_span(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn export_follows_the_standard_variables() {
        use ExportSetting::{Off, Otlp};
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(ExportSetting::from_env(table(&[])), Ok(Off));
        assert_eq!(ExportSetting::from_env(table(&[endpoint])), Ok(Otlp));
        assert_eq!(
            ExportSetting::from_env(table(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces"
            )])),
            Ok(Otlp)
        );
        assert_eq!(
            ExportSetting::from_env(table(&[("OTEL_TRACES_EXPORTER", "otlp")])),
            Ok(Otlp),
            "otlp asked for by name goes to the default endpoint"
        );
        assert_eq!(
            ExportSetting::from_env(table(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")])),
            Ok(Off)
        );
        assert_eq!(
            ExportSetting::from_env(table(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")])),
            Ok(Off)
        );
        assert_eq!(
            ExportSetting::from_env(table(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")])),
            Err(UnsupportedSetting::Exporter("zipkin".into()))
        );
        assert_eq!(
            ExportSetting::from_env(table(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Err(UnsupportedSetting::Protocol {
                variable: "OTEL_EXPORTER_OTLP_PROTOCOL",
                value: "grpc".into()
            })
        );
        assert_eq!(
            ExportSetting::from_env(table(&[
                endpoint,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            ])),
            Ok(Otlp)
        );
        assert_eq!(
            ExportSetting::from_env(table(&[(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "HTTPS://collector:4318"
            )])),
            Err(UnsupportedSetting::Tls {
                variable: "OTEL_EXPORTER_OTLP_ENDPOINT",
                value: "HTTPS://collector:4318".into()
            }),
            "no TLS client: refused at start, not failing unseen"
        );
        assert_eq!(
            ExportSetting::from_env(table(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://elsewhere:4318"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://c:4318/v1/traces"
                ),
            ])),
            Ok(Otlp),
            "the traces endpoint is the one used"
        );
    }

    #[test]
    fn a_job_keeps_its_newest_context_until_it_ends() {
        use crate::log::LogEntry;
        let t = |n: u64| TraceParent {
            trace_id: 7,
            parent_id: n,
            flags: 1,
        };
        let entry = |kind: &str, trace: Option<TraceParent>| LogEntry {
            sequence: 1,
            subject: fairshare_events::subjects::job_event("c", "j1", kind),
            event: Ok(fairshare_events::pb::Event::default()),
            pending: 0,
            trace,
            stored_ms: None,
        };
        let mut traces = JobTraces::default();
        traces.note(&entry("job_submitted", Some(t(1))));
        assert_eq!(traces.get("j1"), Some(t(1)));
        traces.note(&entry("job_placed", None));
        assert_eq!(
            traces.get("j1"),
            Some(t(1)),
            "an entry without one keeps the last"
        );
        traces.note(&entry("job_placed", Some(t(2))));
        assert_eq!(traces.get("j1"), Some(t(2)));
        traces.note(&entry("job_finished", Some(t(3))));
        assert_eq!(traces.get("j1"), None, "an ended job is forgotten");
        assert!(traces.is_empty());

        // A preemption ends a job that cannot resume, and only such a job.
        let submitted = |id: &str, resumable: bool| LogEntry {
            sequence: 2,
            subject: fairshare_events::subjects::job_event("c", id, "job_submitted"),
            event: Ok(fairshare_events::pb::Event {
                at_ms: 1,
                body: Some(fairshare_events::pb::event::Body::JobSubmitted(
                    fairshare_events::pb::JobSubmitted {
                        job_id: id.into(),
                        spec: Some(fairshare_events::pb::JobSpec {
                            resumable,
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                )),
            }),
            pending: 0,
            trace: Some(t(4)),
            stored_ms: None,
        };
        let preempted = |id: &str| LogEntry {
            subject: fairshare_events::subjects::job_event("c", id, "job_preempted"),
            ..entry("job_preempted", Some(t(5)))
        };
        traces.note(&submitted("once", false));
        traces.note(&submitted("again", true));
        traces.note(&preempted("once"));
        traces.note(&preempted("again"));
        assert_eq!(traces.get("once"), None, "not resumable: ended");
        assert_eq!(traces.get("again"), Some(t(5)), "resumable: requeued next");
        assert_eq!(traces.len(), 1);
    }

    #[test]
    fn without_export_the_trace_is_still_handed_on() {
        let incoming = TraceParent {
            trace_id: 0x1234,
            parent_id: 0x99,
            flags: 1,
        };
        let child = Handling::start("t", Role::Entry, Some(incoming), Relation::Child, &[]);
        assert_eq!(child.hand_on().trace_id, incoming.trace_id, "same trace");
        assert_ne!(
            child.hand_on().parent_id,
            incoming.parent_id,
            "a span of its own"
        );
        let replay = Handling::start("t", Role::Entry, Some(incoming), Relation::Linked, &[]);
        assert_ne!(
            replay.hand_on().trace_id,
            incoming.trace_id,
            "a replay starts its own trace"
        );
        let root = Handling::start("t", Role::Request, None, Relation::Child, &[]);
        assert_ne!(root.hand_on().trace_id, 0);
        assert_ne!(root.hand_on().parent_id, 0);
    }
}
