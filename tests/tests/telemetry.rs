//! OpenTelemetry over real NATS (SPEC section 3, principle 5): one job's trace runs from the
//! launcher's submit through the submission service and the decision service's placement to
//! the launcher's start, in the spans exported to an OTLP collector and in the `traceparent`
//! headers of the events in the log.
//!
//! The collector is a small OTLP/HTTP receiver in this test (protobuf bodies on
//! `/v1/traces`); the exporter is the services' own ([`telemetry::install_otlp`]), installed for
//! this test process, so every service started here exports to it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fairshare_decision::shell as decision;
use fairshare_e2e::{CLUSTER, Stack, accepted, request, spawn_until_stopped};
use fairshare_events::headers::{TRACEPARENT, TraceParent};
use fairshare_events::{codec, subjects};
use fairshare_launcher::runner::{self, RunnerConfig};
use fairshare_runtime::clock::SystemClock;
use fairshare_runtime::telemetry;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One exported span, as the collector received it.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: u128,
    span_id: u64,
    /// 0: a root span.
    parent_id: u64,
    /// `(trace id, span id)` of each linked span.
    links: Vec<(u128, u64)>,
}

fn id128(bytes: &[u8]) -> u128 {
    bytes.try_into().map(u128::from_be_bytes).unwrap_or(0)
}

fn id64(bytes: &[u8]) -> u64 {
    bytes.try_into().map(u64::from_be_bytes).unwrap_or(0)
}

/// Serves OTLP/HTTP on a free port; returns its traces URL and what it received.
async fn collector() -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let sink = Arc::clone(&received);
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(serve_connection(conn, Arc::clone(&sink)));
        }
    });
    (url, received)
}

/// Answers HTTP/1.1 requests on one connection (kept alive) until it closes.
async fn serve_connection(mut conn: tokio::net::TcpStream, sink: Arc<Mutex<Vec<Received>>>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buf.drain(..head_end + length).skip(head_end).collect();
        if let Ok(request) = ExportTraceServiceRequest::decode(body.as_slice()) {
            let mut sink = sink.lock().unwrap();
            for resource in request.resource_spans {
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        sink.push(Received {
                            name: span.name,
                            trace_id: id128(&span.trace_id),
                            span_id: id64(&span.span_id),
                            parent_id: id64(&span.parent_span_id),
                            links: span
                                .links
                                .iter()
                                .map(|l| (id128(&l.trace_id), id64(&l.span_id)))
                                .collect(),
                        });
                    }
                }
            }
        }
        let reply =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if conn.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn named(spans: &[Received], name: &str) -> Option<Received> {
    spans.iter().find(|s| s.name == name).cloned()
}

// Several threads: the exporter's flush blocks its caller while this runtime's collector
// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_jobs_trace_runs_from_submit_to_start_in_spans_and_headers() {
    let (url, received) = collector().await;
    let provider = telemetry::install_otlp("fairshare-e2e", Some(&url)).unwrap();
    assert!(telemetry::exporting());

    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();
    let service = stack
        .start_decision(decision::Config::new(CLUSTER))
        .await
        .unwrap();
    let (stop_decision, decision_task) = spawn_until_stopped(|s| service.serve(s));
    let runner_client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = RunnerConfig {
        cluster: CLUSTER.into(),
        time_scale: 1,
        default_duration: Duration::from_secs(3600),
        honour_preemption: true,
        tick: Duration::from_millis(20),
    };
    let (stop_runner, runner_task) =
        spawn_until_stopped(|s| runner::run(runner_client, config, Arc::new(SystemClock), s));

    // The launcher's own span, as a launcher in any language would send it.
    let launcher = TraceParent {
        trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
        parent_id: 0x00f0_67aa_0ba9_02b7,
        flags: 1,
    };
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(TRACEPARENT, launcher.to_string().as_str());
    let reply = stack
        .client
        .request_with_headers(
            subjects::SUBMIT_API,
            headers,
            codec::encode(&request("traced")),
        )
        .await
        .unwrap();
    let reply = codec::decode_submit_reply(&reply.payload).unwrap();
    let job_id = accepted(&reply).unwrap().job_id.clone();

    // Placed by the decision service and started by the launcher.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let started = loop {
        if let Some(t) = stack.traceparent_of(&job_id, "job_started").await {
            break t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job was not started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let submitted = stack
        .traceparent_of(&job_id, "job_submitted")
        .await
        .expect("JobSubmitted carries a traceparent");
    let placed = stack
        .traceparent_of(&job_id, "job_placed")
        .await
        .expect("JobPlaced carries a traceparent");

    // The spans reach the collector (the batch is sent at once on a flush).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let flushing = provider.clone();
        tokio::task::spawn_blocking(move || flushing.force_flush())
            .await
            .unwrap()
            .unwrap();
        let spans = received.lock().unwrap().clone();
        if ["submit", "decision place", "launcher job_started"]
            .iter()
            .all(|n| named(&spans, n).is_some())
        {
            break spans;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "spans missing at the collector: {spans:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let submit = named(&spans, "submit").unwrap();
    let place = named(&spans, "decision place").unwrap();
    let start = named(&spans, "launcher job_started").unwrap();

    // One trace, the launcher's, hop by hop: each span is the child of the one before, and
    // each event carries the span that published it.
    for span in [&submit, &place, &start] {
        assert_eq!(span.trace_id, launcher.trace_id, "{span:?} left the trace");
    }
    assert_eq!(submit.parent_id, launcher.parent_id);
    assert_eq!(submitted.trace_id, launcher.trace_id);
    assert_eq!(submitted.parent_id, submit.span_id);
    assert_eq!(place.parent_id, submit.span_id);
    assert_eq!(placed.trace_id, launcher.trace_id);
    assert_eq!(placed.parent_id, place.span_id);
    assert_eq!(start.parent_id, place.span_id);
    assert_eq!(started.trace_id, launcher.trace_id);
    assert_eq!(started.parent_id, start.span_id);
    // Folding the submission is a span of the same trace too.
    let folded = named(&spans, "decision job_submitted").expect("a span for the folded entry");
    assert_eq!(folded.trace_id, launcher.trace_id);
    assert_eq!(folded.parent_id, submit.span_id);

    let _ = stop_runner.send(());
    let _ = stop_decision.send(());
    runner_task.await.unwrap().unwrap();
    decision_task.await.unwrap().unwrap();

    // A decision service started afresh folds the log again: its span for the submission is
    // linked to the job's trace, not a child in it.
    let before = received.lock().unwrap().len();
    let again = stack
        .start_decision(decision::Config::new(CLUSTER))
        .await
        .unwrap();
    let flushing = provider.clone();
    tokio::task::spawn_blocking(move || flushing.force_flush())
        .await
        .unwrap()
        .unwrap();
    let replayed: Vec<Received> = received.lock().unwrap()[before..]
        .iter()
        .filter(|s| s.name == "decision job_submitted")
        .cloned()
        .collect();
    assert_eq!(replayed.len(), 1, "one replayed submission: {replayed:?}");
    assert_ne!(
        replayed[0].trace_id, launcher.trace_id,
        "not in the old trace"
    );
    assert_eq!(replayed[0].parent_id, 0);
    assert_eq!(replayed[0].links, vec![(launcher.trace_id, submit.span_id)]);
    drop(again);
    tokio::task::spawn_blocking(move || provider.shutdown())
        .await
        .unwrap()
        .unwrap();
}
