//! Shared fixtures for the end-to-end tests and benchmarks: a real nats-server (from
//! `fairshare-testkit`), the streams, a small cluster with a budget tree, and services run
//! in-process with a shutdown the test controls.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream;
use fairshare_events::headers::{TRACEPARENT, TraceParent};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::{codec, subjects};
use fairshare_model::files;
use fairshare_runtime::admin;
use fairshare_runtime::clock::SystemClock;
use fairshare_submission::shell::Service;
use fairshare_testkit::NatsServer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The test cluster's name.
pub const CLUSTER: &str = "alpha";

/// Budget tree of the test cluster: research 3 (nlp 1, vision 3), infra 1.
pub const BUDGET: &str = r#"
cluster = "alpha"
[accounts.research]
share = 3
[accounts.research.nlp]
share = 1
[accounts.research.vision]
share = 3
[accounts.infra]
share = 1
"#;

/// Inventory of the test cluster: 4 nodes of 8 GPUs.
pub const INVENTORY: &str = r#"
cluster = "alpha"
[[nodes]]
prefix = "gpu"
count = 4
gpus = 8
"#;

/// The SPEC's reference size (1,024 GPUs), used by the decision end-to-end test and the
/// latency bench: its cluster name.
pub const BIG: &str = "big";

/// [`BIG`]'s inventory: 128 nodes of 8 GPUs.
pub const BIG_INVENTORY: &str = r#"
cluster = "big"
[[nodes]]
prefix = "g"
count = 128
gpus = 8
"#;

/// [`BIG`]'s budget tree: research 3 (nlp 1, vision 2), ops 1 (infra 1, debug 1).
pub const BIG_BUDGET: &str = r#"
cluster = "big"
[accounts.research]
share = 3
[accounts.research.nlp]
share = 1
[accounts.research.vision]
share = 2
[accounts.ops]
share = 1
[accounts.ops.infra]
share = 1
[accounts.ops.debug]
share = 1
"#;

/// [`BIG_BUDGET`]'s allocations.
pub const BIG_ALLOCATIONS: [&str; 4] =
    ["research/nlp", "research/vision", "ops/infra", "ops/debug"];

/// A running submission service and the way to stop it.
struct RunningService {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), fairshare_submission::ServiceError>>,
}

/// A nats-server with the streams, the test cluster's policy, and optionally the submission
/// service.
pub struct Stack {
    /// The server (killed on drop).
    pub server: NatsServer,
    /// A client for the test itself.
    pub client: async_nats::Client,
    /// JetStream on that client.
    pub js: jetstream::Context,
    submission: Option<RunningService>,
}

/// Time used for fixture events.
fn now_ms() -> i64 {
    use fairshare_runtime::clock::Clock;
    SystemClock.now_ms()
}

impl Stack {
    /// Starts a server, creates the streams and applies [`BUDGET`] and [`INVENTORY`].
    pub async fn start() -> anyhow::Result<Self> {
        let server = NatsServer::start()?;
        let client = async_nats::connect(server.url()).await?;
        let js = jetstream::new(client.clone());
        fairshare_runtime::nats::ensure_streams(&js, 1).await?;
        admin::set_budget(&js, now_ms(), files::parse_budget(BUDGET)?).await?;
        admin::register_nodes(
            &js,
            now_ms(),
            files::parse_inventory(INVENTORY)?.registrations(),
        )
        .await?;
        Ok(Self {
            server,
            client,
            js,
            submission: None,
        })
    }

    /// Starts a decision service for [`CLUSTER`] with `config` on its own connection: it has
    /// folded the log to its end and waits for `serve`.
    pub async fn start_decision(
        &self,
        config: fairshare_decision::shell::Config,
    ) -> anyhow::Result<fairshare_decision::shell::Service> {
        let client = async_nats::connect(self.server.url()).await?;
        Ok(
            fairshare_decision::shell::Service::start(client, config, Arc::new(SystemClock))
                .await?,
        )
    }

    /// Submits five 8-GPU jobs, four of `research/vision` and then one of `infra`, and returns
    /// their ids in that order. On the stack's 4 x 8 GPUs one has to wait (nothing ends them);
    /// submitted before the decision service starts, they are ranked together in its first
    /// cycle (a service already running decides each as it comes, the first ones onto free
    /// GPUs whatever their rank), so infra's outranks vision's fourth.
    pub async fn submit_one_too_many(&self) -> anyhow::Result<Vec<String>> {
        let mut ids = Vec::new();
        for i in 0..5 {
            let mut r = request(&format!("full-{i}"));
            let spec = r.spec.get_or_insert_with(Default::default);
            spec.gpus = 8;
            spec.allocation = if i < 4 { "research/vision" } else { "infra" }.into();
            let reply = self.submit(&r).await?;
            ids.push(accepted(&reply)?.job_id.clone());
        }
        Ok(ids)
    }

    /// [`Stack::start_decision`], serving on a task until [`Serving::stop`].
    pub async fn serve_decision(
        &self,
        config: fairshare_decision::shell::Config,
    ) -> anyhow::Result<Serving> {
        let service = self.start_decision(config).await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(service.serve(async {
            let _ = stopped.await;
        }));
        Ok(Serving { stop, task })
    }

    /// Starts the accounting service (every cluster, checkpoint in `checkpoint_dir`) on its own
    /// connection and serves until the returned task is aborted or the runtime ends.
    pub async fn serve_accounting(
        &self,
        checkpoint_dir: std::path::PathBuf,
    ) -> anyhow::Result<JoinHandle<()>> {
        let client = async_nats::connect(self.server.url()).await?;
        let config = fairshare_accounting::shell::Config::new(checkpoint_dir);
        let service =
            fairshare_accounting::shell::Service::start(client, config, Arc::new(SystemClock))
                .await?;
        Ok(tokio::spawn(async move {
            let _ = service.serve(std::future::pending::<()>()).await;
        }))
    }

    /// Starts the submission service on its own connection; returns once it serves.
    pub async fn start_submission(
        &mut self,
        config: fairshare_submission::Config,
    ) -> anyhow::Result<()> {
        let client = async_nats::connect(self.server.url()).await?;
        let service = Service::start(client, config, Arc::new(SystemClock)).await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(service.serve(async {
            let _ = stopped.await;
        }));
        self.submission = Some(RunningService { stop, task });
        Ok(())
    }

    /// Stops the submission service gracefully and waits for it.
    pub async fn stop_submission(&mut self) -> anyhow::Result<()> {
        if let Some(s) = self.submission.take() {
            let _ = s.stop.send(());
            s.task.await??;
        }
        Ok(())
    }

    /// Kills the submission service's task at once, as a crash would.
    pub fn crash_submission(&mut self) {
        if let Some(s) = self.submission.take() {
            s.task.abort();
        }
    }

    /// Sends raw bytes to the submit API and decodes the reply.
    pub async fn submit_bytes(&self, bytes: bytes::Bytes) -> anyhow::Result<pb::SubmitReply> {
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            self.client.request(subjects::SUBMIT_API, bytes),
        )
        .await??;
        Ok(codec::decode_submit_reply(&reply.payload)?)
    }

    /// Submits a request.
    pub async fn submit(&self, request: &pb::SubmitRequest) -> anyhow::Result<pb::SubmitReply> {
        self.submit_bytes(codec::encode(request)).await
    }

    /// Sends a cancel request.
    pub async fn cancel(&self, job_id: &str) -> anyhow::Result<pb::CancelReply> {
        let request = pb::CancelRequest {
            job_id: job_id.to_owned(),
            reason: "test".into(),
            requested_by: "tester".into(),
        };
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            self.client
                .request(subjects::CANCEL_API, codec::encode(&request)),
        )
        .await??;
        Ok(codec::decode_cancel_reply(&reply.payload)?)
    }

    /// The `traceparent` the newest event of `kind` (`job_placed`, ...) of job `job_id` of
    /// [`CLUSTER`] was published with; `None` if there is no such event or header.
    pub async fn traceparent_of(&self, job_id: &str, kind: &str) -> Option<TraceParent> {
        let stream = self.js.get_stream(EVENTS_STREAM).await.ok()?;
        let message = stream
            .get_last_raw_message_by_subject(&subjects::job_event(CLUSTER, job_id, kind))
            .await
            .ok()?;
        TraceParent::parse(message.headers.get(TRACEPARENT)?.as_str()).ok()
    }

    /// Messages in the events stream.
    pub async fn event_count(&self) -> anyhow::Result<u64> {
        let mut stream = self.js.get_stream(EVENTS_STREAM).await?;
        Ok(stream.info().await?.state.messages)
    }

    /// The event at `sequence`, decoded.
    pub async fn event_at(&self, sequence: u64) -> anyhow::Result<(String, pb::Event)> {
        let stream = self.js.get_stream(EVENTS_STREAM).await?;
        let message = stream.get_raw_message(sequence).await?;
        Ok((
            message.subject.to_string(),
            codec::decode_event(&message.payload)?,
        ))
    }

    /// Every event in the stream, in order, with its subject.
    pub async fn all_events(&self) -> anyhow::Result<Vec<(u64, String, pb::Event)>> {
        let stream = self.js.get_stream(EVENTS_STREAM).await?;
        let last = self
            .js
            .get_stream(EVENTS_STREAM)
            .await?
            .get_info()
            .await?
            .state
            .last_sequence;
        let mut out = Vec::new();
        // The events stream is append-only: every sequence up to the last is there, and one
        // that cannot be read fails the caller rather than vanish from what it checks (a
        // second placement, say).
        for seq in 1..=last {
            let message = stream
                .get_raw_message(seq)
                .await
                .with_context(|| format!("cannot read sequence {seq} of the events stream"))?;
            out.push((
                seq,
                message.subject.to_string(),
                codec::decode_event(&message.payload)?,
            ));
        }
        Ok(out)
    }

    /// Appends an event directly (as another service would), on `subject`, which must be
    /// where its kind belongs (the services would fold it as empty anywhere else, and a test
    /// meaning to exercise a fold would exercise nothing).
    pub async fn append(
        &self,
        subject: String,
        body: Body,
        message_id: &str,
    ) -> anyhow::Result<u64> {
        let event = pb::Event {
            at_ms: now_ms(),
            body: Some(body),
        };
        fairshare_events::subjects::check_filed(&subject, &event)?;
        let envelope = fairshare_runtime::envelope::Envelope {
            message_id: message_id.to_owned(),
            ..Default::default()
        };
        Ok(admin::append(&self.js, subject, &event, &envelope).await?)
    }
}

/// A valid single-GPU submission to `research/nlp` with key `key`.
pub fn request(key: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        idempotency_key: key.to_owned(),
        spec: Some(pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: "research/nlp".into(),
            user: "ada".into(),
            gpus: 1,
            nodes: 0,
            min_runtime_s: 900,
            resumable: true,
            priority: 0,
            time_limit_s: 0,
            payload: bytes::Bytes::from_static(b"python train.py"),
            name: "train".into(),
        }),
    }
}

/// The accepted part of a reply, or a readable failure.
pub fn accepted(reply: &pb::SubmitReply) -> anyhow::Result<&pb::Accepted> {
    match &reply.result {
        Some(pb::submit_reply::Result::Accepted(a)) => Ok(a),
        other => anyhow::bail!("expected acceptance, got {other:?}"),
    }
}

/// The rejection part of a reply, or a readable failure.
pub fn rejected(reply: &pb::SubmitReply) -> anyhow::Result<&pb::Rejection> {
    match &reply.result {
        Some(pb::submit_reply::Result::Rejected(r)) => Ok(r),
        other => anyhow::bail!("expected rejection, got {other:?}"),
    }
}

/// The value after flag `name` on a bench's command line (`cargo bench ... -- --name V`), if
/// it is there and parses.
pub fn bench_arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

/// Runs the standard-library Python launcher (`tools/launcher-py/fairshare_submit.py`) against
/// the server at `url` for [`CLUSTER`] with `args`, its environment's nkey left out.
///
/// # Panics
/// If python3 cannot be run (the README's commands need it too).
pub async fn python_submit(url: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tools/launcher-py/fairshare_submit.py"
    );
    // The interpreter tools/test.sh checked (PYTHON), else python3.
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .args(["--url", url, "--cluster", CLUSTER])
        .args(args)
        .env_remove("FAIRSHARE_NATS_NKEY");
    match tokio::task::spawn_blocking(move || command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => panic!("python3 does not run: {e}"),
        Err(e) => panic!("the python3 task failed: {e}"),
    }
}

/// A task that runs until its stop is sent: `run` gets the shutdown future a service's `serve`
/// (or the launcher's `runner::run`) takes.
pub fn spawn_until_stopped<T, Fut>(
    run: impl FnOnce(futures::future::BoxFuture<'static, ()>) -> Fut,
) -> (oneshot::Sender<()>, JoinHandle<T>)
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run(Box::pin(async move {
        let _ = stopped.await;
    })));
    (stop, task)
}

/// A decision service serving on its own task ([`Stack::serve_decision`]).
pub struct Serving {
    /// Ends the service's `serve` when sent (or dropped).
    stop: oneshot::Sender<()>,
    /// The task running `serve`.
    task: JoinHandle<
        Result<fairshare_decision::shell::LogFold, fairshare_decision::shell::ServiceError>,
    >,
}

impl Serving {
    /// Stops the service and waits for it: an error if it had failed.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}
