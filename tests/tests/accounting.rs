//! The accounting service against a real nats-server: restarts, lost checkpoints and duplicated
//! events leave its state equal to a from-scratch fold of the log.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fairshare_accounting::domain::{FoldConfig, UsageFold};
use fairshare_accounting::shell::{self, Config, Service};
use fairshare_e2e::{CLUSTER, Stack};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_runtime::clock::{Clock, ManualClock, SystemClock};
use fairshare_runtime::log::Follower;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Running {
    /// The checkpoint sequence the service resumed from (0: from the beginning).
    resumed_from: u64,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<UsageFold, shell::ServiceError>>,
}

async fn start(stack: &Stack, dir: &Path, clock: &ManualClock) -> Running {
    start_for(stack, dir, clock, None).await
}

/// [`start`], folding only `cluster`'s events when given.
async fn start_for(
    stack: &Stack,
    dir: &Path,
    clock: &ManualClock,
    cluster: Option<&str>,
) -> Running {
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = Config {
        checkpoint_every_events: 50,
        checkpoint_every: Duration::from_millis(200),
        snapshot_every: Duration::from_secs(3600),
        cluster: cluster.map(str::to_owned),
        ..Config::new(dir.to_path_buf())
    };
    let service = Service::start(client, config, Arc::new(clock.clone()))
        .await
        .unwrap();
    let resumed_from = service.resumed_from();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(service.serve(async {
        let _ = stopped.await;
    }));
    Running {
        resumed_from,
        stop,
        task,
    }
}

/// The accounting service's answer to a usage query about `path` of the test cluster.
async fn ask(stack: &Stack, path: &str, publish_snapshot: bool) -> Option<pb::usage_reply::Result> {
    let q = pb::UsageQuery {
        cluster: CLUSTER.into(),
        path: path.into(),
        publish_snapshot,
    };
    let reply = stack
        .client
        .request(subjects::usage_api(CLUSTER), codec::encode(&q))
        .await
        .unwrap();
    codec::decode_usage_reply(&reply.payload).unwrap().result
}

async fn query(stack: &Stack, publish_snapshot: bool) -> pb::UsageReport {
    match ask(stack, "", publish_snapshot).await {
        Some(pb::usage_reply::Result::Report(r)) => r,
        other => panic!("expected a report, got {other:?}"),
    }
}

/// A workload's base time and the service's clock. The events are stamped in the past (the
/// last of 100 jobs 1.5 min before the test starts; the fold holds each cluster's clock to its
/// newest event, so those stamped before the stack's registrations take effect at them, which
/// the reports compared share), and the clock reads 55 s ahead of the server's time, standing
/// still: the service's "now", held within a minute of the log's time and never before its
/// newest entry, is then the clock's while the test runs, so two reports of one log are equal.
/// (Reports are compared with a from-scratch fold at their own window end, whatever it is.)
fn times() -> (i64, ManualClock) {
    let now = SystemClock.now_ms();
    (now - 1_140_000, ManualClock::new(now + 55_000))
}

/// Waits until the service has folded through `sequence`, then returns its report.
async fn report_through(stack: &Stack, sequence: u64) -> pb::UsageReport {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = query(stack, false).await;
        if r.through_sequence >= sequence {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "fold stuck at {}",
            r.through_sequence
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A from-scratch fold of the whole log, answered at `now`.
async fn from_scratch(stack: &Stack, now: i64) -> pb::UsageReport {
    let mut fold = UsageFold::new(FoldConfig::default());
    let mut follower = Follower::start(&stack.js, 1, shell::log_filters(None))
        .await
        .unwrap();
    follower
        .catch_up(|entry| {
            // As the service folds: no event takes effect long after the stream stored it.
            let event = entry.event.unwrap();
            match entry.stored_ms {
                Some(stored) => fold.apply_stored(entry.sequence, &event, stored),
                None => fold.apply(entry.sequence, &event),
            };
        })
        .await
        .unwrap();
    let q = pb::UsageQuery {
        cluster: CLUSTER.into(),
        ..Default::default()
    };
    shell::report(&fold, &q, now).unwrap()
}

/// Appends job `job`'s event `body` of `kind` at `at`, with a message id of the two; returns
/// its sequence.
async fn append_job_event(stack: &Stack, job: &str, kind: &str, at: i64, body: Body) -> u64 {
    let event = pb::Event {
        at_ms: at,
        body: Some(body),
    };
    let envelope = fairshare_runtime::envelope::Envelope {
        message_id: format!("{job}:{kind}"),
        ..Default::default()
    };
    fairshare_runtime::admin::append(
        &stack.js,
        subjects::job_event(CLUSTER, job, kind),
        &event,
        &envelope,
    )
    .await
    .unwrap()
}

/// Appends the lifecycle of jobs `range`: submitted at t, started at t+1 s, finished at t+61 s
/// for even jobs (odd ones keep running); allocations and allocated/unallocated alternate.
async fn workload(stack: &Stack, base: i64, range: std::ops::Range<u64>) -> u64 {
    let allocations = ["research/nlp", "research/vision", "infra"];
    let mut last = 0;
    for i in range {
        let job = format!("job-{i:05}");
        let t = base + i as i64 * 10_000;
        let spec = pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: allocations[i as usize % 3].into(),
            gpus: 1 + (i % 8) as i64,
            min_runtime_s: if i % 5 == 0 { 0 } else { 600 },
            ..Default::default()
        };
        let gpus = spec.gpus as u32;
        let events = [
            (
                "job_submitted",
                t,
                Body::JobSubmitted(pb::JobSubmitted {
                    job_id: job.clone(),
                    idempotency_key: job.clone(),
                    spec: Some(spec),
                    shape: Some(pb::Shape {
                        nodes: 1,
                        gpus_per_node: gpus,
                    }),
                }),
            ),
            (
                "job_placed",
                t + 1_000,
                fairshare_testkit::events::placed_on(&job, "gpu000", gpus),
            ),
            (
                "job_started",
                t + 1_000,
                Body::JobStarted(pb::JobStarted {
                    job_id: job.clone(),
                }),
            ),
            (
                "job_finished",
                t + 61_000,
                Body::JobFinished(pb::JobFinished {
                    job_id: job.clone(),
                    exit_code: 0,
                }),
            ),
        ];
        for (kind, at, body) in events {
            if kind == "job_finished" && i % 2 == 1 {
                continue;
            }
            last = append_job_event(stack, &job, kind, at, body).await;
        }
    }
    last
}

#[tokio::test]
async fn killed_and_restarted_service_equals_a_from_scratch_fold() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (base, clock) = times();
    workload(&stack, base, 0..40).await;
    let running = start(&stack, dir.path(), &clock).await;
    // Events keep arriving while it runs; kill it part-way through.
    let mid = workload(&stack, base, 40..70).await;
    report_through(&stack, mid).await;
    running.task.abort();
    let _ = running.task.await;
    let last = workload(&stack, base, 70..100).await;

    let running = start(&stack, dir.path(), &clock).await;
    assert!(
        running.resumed_from > 0,
        "the restart resumes from the checkpoint written before the kill"
    );
    let restarted = report_through(&stack, last).await;
    let scratch = from_scratch(&stack, restarted.window_end_ms).await;
    assert_eq!(restarted, scratch);
    // The figures are real: jobs ran, both allocated and unallocated.
    assert!(
        restarted
            .accounts
            .iter()
            .any(|a| a.path == "research/nlp" && a.charged_gpu_ms > 0)
    );
    assert!(restarted.unallocated_gpu_ms > 0);
    // Odd-numbered jobs never finish: the allocated ones of research/nlp (every third job)
    // still run, and research counts both of its allocations.
    let still_running = |allocation: usize| -> u64 {
        (1..100u64)
            .step_by(2)
            .filter(|i| i % 5 != 0 && i % 3 == allocation as u64)
            .map(|i| 1 + i % 8)
            .sum()
    };
    let running_gpus = |path: &str, allocation: bool| {
        restarted
            .accounts
            .iter()
            .find(|a| a.path == path && a.allocation == allocation)
            .map(|a| a.running_gpus)
    };
    assert_eq!(running_gpus("research/nlp", true), Some(still_running(0)));
    assert_eq!(
        running_gpus("research", false),
        Some(still_running(0) + still_running(1))
    );
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn deleting_the_checkpoint_rebuilds_the_identical_state() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (base, clock) = times();
    let last = workload(&stack, base, 0..60).await;
    let running = start(&stack, dir.path(), &clock).await;
    let before = report_through(&stack, last).await;
    let _ = running.stop.send(());
    let fold = running.task.await.unwrap().unwrap();
    assert_eq!(fold.last_applied(), before.through_sequence);

    std::fs::remove_dir_all(dir.path()).unwrap();
    let running = start(&stack, dir.path(), &clock).await;
    assert_eq!(running.resumed_from, 0);
    let after = report_through(&stack, last).await;
    assert_eq!(after, before);
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_checkpoint_folded_with_another_cluster_filter_is_rebuilt() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (base, clock) = times();
    let last = workload(&stack, base, 0..30).await;
    // One instance for this cluster alone, then the same directory for every cluster and back:
    // each start must fold the whole log for what it follows, not resume the other's fold.
    for cluster in [Some(CLUSTER), None, Some(CLUSTER)] {
        let running = start_for(&stack, dir.path(), &clock, cluster).await;
        assert_eq!(
            running.resumed_from, 0,
            "{cluster:?} resumed another filter's fold"
        );
        let report = report_through(&stack, last).await;
        assert_eq!(report, from_scratch(&stack, report.window_end_ms).await);
        let _ = running.stop.send(());
        running.task.await.unwrap().unwrap();
    }
    // The same filter again resumes its own checkpoint.
    let running = start_for(&stack, dir.path(), &clock, Some(CLUSTER)).await;
    assert!(running.resumed_from > 0);
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

/// A checkpoint written while folding a log of `old_jobs` jobs, then a new stream (a server
/// whose store was wiped) holding `new_jobs`: the service must rebuild from the new log, not
/// resume, whether the new log is shorter than the checkpoint (its sequence is past the end)
/// or longer (only the stream's identity tells).
async fn a_checkpoint_of_an_earlier_log_is_rebuilt(old_jobs: u64, new_jobs: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (base, clock) = times();
    {
        let old = Stack::start().await.unwrap();
        let last = workload(&old, base, 0..old_jobs).await;
        let running = start(&old, dir.path(), &clock).await;
        report_through(&old, last).await;
        let _ = running.stop.send(());
        running.task.await.unwrap().unwrap();
    }
    let stack = Stack::start().await.unwrap();
    let last = workload(&stack, base + 1, 0..new_jobs).await;
    let running = start(&stack, dir.path(), &clock).await;
    assert_eq!(running.resumed_from, 0, "resumed the fold of another log");
    let report = report_through(&stack, last).await;
    assert_eq!(report, from_scratch(&stack, report.window_end_ms).await);
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_checkpoint_ahead_of_the_log_is_rebuilt() {
    a_checkpoint_of_an_earlier_log_is_rebuilt(60, 10).await;
}

#[tokio::test]
async fn a_checkpoint_of_an_earlier_log_is_rebuilt_even_when_the_new_log_is_longer() {
    a_checkpoint_of_an_earlier_log_is_rebuilt(10, 60).await;
}

#[tokio::test]
async fn a_corrupt_checkpoint_is_rebuilt_from_the_log() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (base, clock) = times();
    let last = workload(&stack, base, 0..30).await;
    let running = start(&stack, dir.path(), &clock).await;
    let before = report_through(&stack, last).await;
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
    {
        let store =
            fairshare_runtime::checkpoint::CheckpointStore::open(dir.path(), "x", 1).unwrap();
        // Refused by its checksum before anything is decoded.
        store.write_raw(b"FSC3 damaged, not a fold").unwrap();
    }
    let running = start(&stack, dir.path(), &clock).await;
    assert_eq!(running.resumed_from, 0, "a corrupt checkpoint is not used");
    assert_eq!(report_through(&stack, last).await, before);
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_duplicated_event_changes_nothing() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (base, clock) = times();
    let last = workload(&stack, base, 0..20).await;
    let running = start(&stack, dir.path(), &clock).await;
    let before = report_through(&stack, last).await;
    // The same start and finish again, published under new message ids (so JetStream keeps them).
    let mut seq = 0;
    for (job, kind, body) in [
        (
            "job-00002",
            "job_started",
            Body::JobStarted(pb::JobStarted {
                job_id: "job-00002".into(),
            }),
        ),
        (
            "job-00002",
            "job_finished",
            Body::JobFinished(pb::JobFinished {
                job_id: "job-00002".into(),
                exit_code: 0,
            }),
        ),
        (
            "job-00004",
            "job_submitted",
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: "job-00004".into(),
                idempotency_key: "job-00004".into(),
                spec: Some(pb::JobSpec {
                    cluster: CLUSTER.into(),
                    allocation: "infra".into(),
                    gpus: 4,
                    min_runtime_s: 600,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: 1,
                    gpus_per_node: 4,
                }),
            }),
        ),
    ] {
        seq = stack
            .append(
                subjects::job_event(CLUSTER, job, kind),
                body,
                &format!("dup-{kind}"),
            )
            .await
            .unwrap();
    }
    let after = report_through(&stack, seq).await;
    assert_eq!(after.through_sequence, seq);
    assert_eq!(
        pb::UsageReport {
            through_sequence: 0,
            ..after
        },
        pb::UsageReport {
            through_sequence: 0,
            ..before
        }
    );
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn snapshots_carry_the_sequence_they_reflect() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = SystemClock.now_ms() + 60_000;
    let clock = ManualClock::new(base + 10 * 10_000);
    let last = workload(&stack, base, 0..10).await;
    let running = start(&stack, dir.path(), &clock).await;
    report_through(&stack, last).await;
    let report = query(&stack, true).await;
    assert!(report.snapshot_sequence > last);
    let (subject, event) = stack.event_at(report.snapshot_sequence).await.unwrap();
    assert_eq!(subject, subjects::usage(CLUSTER));
    let Some(Body::UsageSnapshot(snapshot)) = event.body else {
        panic!("{event:?}")
    };
    assert_eq!(snapshot.through_sequence, report.through_sequence);
    assert_eq!(snapshot.window_end_ms, report.window_end_ms);
    let charged: Vec<(String, u64)> = snapshot
        .allocations
        .iter()
        .map(|a| (a.allocation.clone(), a.charged_gpu_ms))
        .collect();
    let expected: Vec<(String, u64)> = report
        .accounts
        .iter()
        .filter(|a| a.allocation)
        .map(|a| (a.path.clone(), a.charged_gpu_ms))
        .collect();
    assert_eq!(charged, expected);
    // A query for an account that does not exist is refused with its own code.
    let Some(pb::usage_reply::Result::Rejected(r)) = ask(&stack, "nope", false).await else {
        panic!()
    };
    assert_eq!(r.code, pb::RejectionCode::UnknownAccount as i32);
    // Another snapshot asked for at once is refused with the time to wait (and appends
    // nothing: `snapshots_on_request_come_at_most_once_a_second_per_cluster`), so a caller
    // asking in a loop gets one a second.
    let Some(pb::usage_reply::Result::Rejected(r)) = ask(&stack, "", true).await else {
        panic!("a second snapshot at once was not refused")
    };
    assert_eq!(r.code, pb::RejectionCode::Unavailable as i32);
    assert!(r.message.contains("retry in"), "{}", r.message);
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

/// Past its order's grace deadline a job counts as killed (SPEC section 2): its allocation is
/// charged up to the deadline, not up to the kill that a preemption service back from an
/// outage reports minutes later.
#[tokio::test]
async fn a_kill_reported_late_charges_only_up_to_the_grace_deadline() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // After the stack's own events, and less than a minute ahead of the stream's clock (an
    // event takes effect no later than a minute after the stream stored it).
    let base = SystemClock.now_ms();
    let clock = ManualClock::new(base + 55_000);
    let job = "job-late-kill";
    let spec = pb::JobSpec {
        cluster: CLUSTER.into(),
        allocation: "research/nlp".into(),
        gpus: 4,
        min_runtime_s: 60,
        resumable: true,
        ..Default::default()
    };
    let events = [
        (
            "job_submitted",
            base,
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: job.into(),
                idempotency_key: job.into(),
                spec: Some(spec),
                shape: Some(pb::Shape {
                    nodes: 1,
                    gpus_per_node: 4,
                }),
            }),
        ),
        (
            "job_placed",
            base + 1_000,
            fairshare_testkit::events::placed_on(job, "gpu000", 4),
        ),
        (
            "job_started",
            base + 1_000,
            Body::JobStarted(pb::JobStarted { job_id: job.into() }),
        ),
        // Ordered off at 2 s with a 3 s grace: the job counts as killed at 5 s.
        (
            "preemption_ordered",
            base + 2_000,
            Body::PreemptionOrdered(pb::PreemptionOrdered {
                job_id: job.into(),
                grace_deadline_ms: base + 5_000,
                ..Default::default()
            }),
        ),
        // The preemption service, down since, reports the kill at 50 s.
        (
            "job_preempted",
            base + 50_000,
            Body::JobPreempted(pb::JobPreempted {
                job_id: job.into(),
                killed: true,
            }),
        ),
    ];
    let mut last = 0;
    for (kind, at, body) in events {
        last = append_job_event(&stack, job, kind, at, body).await;
    }
    let running = start(&stack, dir.path(), &clock).await;
    let report = report_through(&stack, last).await;
    let charged = report
        .accounts
        .iter()
        .find(|a| a.path == "research/nlp")
        .map(|a| a.charged_gpu_ms);
    // 4 GPUs from 1 s to 5 s, not to 50 s.
    assert_eq!(charged, Some(4 * 4_000), "{report:?}");
    assert_eq!(report, from_scratch(&stack, report.window_end_ms).await);
    let _ = running.stop.send(());
    running.task.await.unwrap().unwrap();
}

/// A `--cluster` that is not a cluster name (a dot would split the subject token) is refused
/// at start, by name, rather than folding nothing and answering no query.
#[tokio::test]
async fn an_invalid_cluster_name_is_refused_at_start() {
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = Config {
        cluster: Some("gpu.east".to_owned()),
        ..Config::new(dir.path().to_path_buf())
    };
    match Service::start(client, config, Arc::new(SystemClock)).await {
        Err(shell::ServiceError::InvalidCluster(name)) => assert_eq!(name, "gpu.east"),
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("started for an invalid cluster name"),
    }
}
