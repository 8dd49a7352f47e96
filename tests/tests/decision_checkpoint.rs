//! The decision service's sled checkpoint against a real nats-server (SPEC section 3,
//! principle 1: the checkpoint is a cache).
//!
//! The service places jobs on the 4 x 8 GPU test cluster and is stopped (writing its
//! checkpoint); more jobs are submitted and some running ones end while it is down; it starts
//! again on the same directory and must resume from the checkpoint, hold exactly the fold a
//! from-scratch replay of the log gives, and place the freed GPUs without placing any job
//! twice. Then the directory is deleted: the next start folds from sequence 1 and ends up with
//! the same fold. Every cycle in the log still re-derives byte for byte. A job submitted
//! before the stop and placed after the restart is placed in its submission's trace. Finally the old
//! checkpoint meets a fresh server whose log is shorter than it, and is not used.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fairshare_decision::domain::decide;
use fairshare_decision::shell::{self as decision, LogFold, audit, read_log};
use fairshare_e2e::{CLUSTER, Stack, accepted, request};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::clock::SystemClock;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A started decision service.
struct Running {
    /// The checkpoint sequence it resumed from (0: folded from the beginning).
    resumed_from: u64,
    /// Its fold right after start-up (the log's end as of then).
    started_with: LogFold,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<LogFold, decision::ServiceError>>,
}

impl Running {
    /// Stops it gracefully (it writes its last checkpoint) and returns its fold.
    async fn stop(self) -> LogFold {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops within 10 s")
            .unwrap()
            .unwrap()
    }
}

async fn start(stack: &Stack, dir: &Path) -> Running {
    start_with_window(stack, dir, None).await
}

/// [`start`], taking usage snapshots of a `usage_window_ms` window only (its `--window`).
async fn start_with_window(stack: &Stack, dir: &Path, usage_window_ms: Option<i64>) -> Running {
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = decision::Config {
        usage_window_ms,
        // Only event-driven cycles: a lost trigger fails the bounded wait.
        cycle_every: Duration::from_secs(60),
        checkpoint_dir: Some(dir.to_path_buf()),
        checkpoint_every_events: 5,
        checkpoint_every: Duration::from_millis(100),
        ..decision::Config::new(CLUSTER)
    };
    let service = decision::Service::start(client, config, Arc::new(SystemClock))
        .await
        .unwrap();
    let resumed_from = service.resumed_from();
    let started_with = service.fold().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(service.serve(async {
        let _ = stopped.await;
    }));
    Running {
        resumed_from,
        started_with,
        stop,
        task,
    }
}

/// A fresh fold of the cluster's log through sequence `through`.
async fn from_scratch(stack: &Stack, through: u64) -> LogFold {
    from_scratch_with_window(stack, through, None).await
}

/// [`from_scratch`], taking usage snapshots of a `usage_window_ms` window only.
async fn from_scratch_with_window(
    stack: &Stack,
    through: u64,
    usage_window_ms: Option<i64>,
) -> LogFold {
    let mut fold = LogFold::with_usage_window(CLUSTER, usage_window_ms);
    for entry in read_log(&stack.js, CLUSTER, Some(through)).await.unwrap() {
        if entry.sequence <= through {
            fold.apply(&entry);
        }
    }
    assert_eq!(fold.last_applied(), through);
    fold
}

/// The last sequence of the cluster's log.
async fn log_end(stack: &Stack) -> u64 {
    read_log(&stack.js, CLUSTER, None)
        .await
        .unwrap()
        .last()
        .map_or(0, |e| e.sequence)
}

/// `JobPlaced` events in the log, per job.
async fn placements(stack: &Stack) -> BTreeMap<String, usize> {
    let mut per_job = BTreeMap::new();
    for (_, _, event) in stack.all_events().await.unwrap() {
        if let Some(Body::JobPlaced(p)) = event.body {
            *per_job.entry(p.job_id).or_default() += 1;
        }
    }
    per_job
}

/// Waits until the log holds `n` placements.
async fn wait_for_placements(stack: &Stack, n: usize) -> BTreeMap<String, usize> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let placed = placements(stack).await;
        if placed.values().sum::<usize>() >= n {
            return placed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} placements after 10 s",
            placed.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Submits `n` 4-GPU jobs (keys `prefix-i`) over the cluster's three allocations.
async fn submit(stack: &Stack, prefix: &str, n: usize) -> Vec<String> {
    let allocations = ["research/nlp", "research/vision", "infra"];
    let mut ids = Vec::new();
    for i in 0..n {
        let mut r = request(&format!("{prefix}-{i}"));
        let spec = r.spec.as_mut().unwrap();
        spec.gpus = 4;
        spec.allocation = allocations[i % 3].into();
        spec.priority = (i % 2) as i32;
        ids.push(
            accepted(&stack.submit(&r).await.unwrap())
                .unwrap()
                .job_id
                .clone(),
        );
    }
    ids
}

/// The fold equals the from-scratch one, and so does every decision it would take.
fn assert_same(fold: &LogFold, scratch: &LogFold, what: &str) {
    assert_eq!(
        fold, scratch,
        "{what}: fold differs from a replay of the log"
    );
    for now in [0, 1_700_000_000_000, 4_000_000_000_000] {
        let (a, b) = (decide(fold.state(), now), decide(scratch.state(), now));
        assert_eq!(a, b, "{what}: decision at {now}");
        assert_eq!(a.events(3), b.events(3), "{what}: events at {now}");
    }
}

#[tokio::test]
async fn a_restart_resumes_from_the_checkpoint_and_a_deleted_one_is_rebuilt() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("decision-alpha");

    // 12 jobs of 4 GPUs for 32 GPUs: 8 placed, 4 waiting (no launcher ends anything).
    let first = start(&stack, &cp).await;
    assert_eq!(first.resumed_from, 0, "no checkpoint yet");
    let before = submit(&stack, "before", 12).await;
    let placed = wait_for_placements(&stack, 8).await;
    let placed_first = placed.clone();
    // Let the fold take in its own placements before stopping.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = first.stop().await;
    assert_eq!(stopped.last_applied(), log_end(&stack).await);
    assert_same(
        &stopped,
        &from_scratch(&stack, stopped.last_applied()).await,
        "first run",
    );
    assert_eq!(stopped.state().queued_len(), 4);

    // While it is down: three more jobs, and three of the placed jobs end.
    submit(&stack, "while-down", 3).await;
    let mut last_while_down = 0;
    for job in placed.keys().take(3) {
        last_while_down = stack
            .append(
                subjects::job_event(CLUSTER, job, "job_finished"),
                Body::JobFinished(pb::JobFinished {
                    job_id: job.clone(),
                    exit_code: 0,
                }),
                &format!("finished:{job}"),
            )
            .await
            .unwrap();
    }

    // Restart on the same directory: resumes where the stop left off, then catches up.
    let second = start(&stack, &cp).await;
    assert!(second.resumed_from > 0, "resumed from the checkpoint");
    assert_eq!(
        second.resumed_from,
        stopped.last_applied(),
        "the stop checkpointed its last entry"
    );
    // Caught up through everything appended while it was down (its own first cycle may
    // already be appending, so compare with the log through the sequence it reports).
    assert_eq!(second.started_with.last_applied(), last_while_down);
    assert_same(
        &second.started_with,
        &from_scratch(&stack, last_while_down).await,
        "after resuming",
    );
    let placed = wait_for_placements(&stack, 11).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = second.stop().await;
    assert_eq!(stopped.last_applied(), log_end(&stack).await);
    let scratch = from_scratch(&stack, stopped.last_applied()).await;
    assert_same(&stopped, &scratch, "second run");
    assert_eq!(
        stopped.state().queued_len(),
        4,
        "the freed GPUs went to waiting jobs"
    );
    assert!(
        placed.values().all(|&n| n == 1),
        "a job was placed twice: {placed:?}"
    );
    assert_eq!(placed.len(), 11);
    // A job submitted before the stop and placed after the restart is placed in the trace
    // its submission started: the trace contexts came back with the checkpoint.
    let resumed_jobs: Vec<&String> = before
        .iter()
        .filter(|j| placed.contains_key(*j) && !placed_first.contains_key(*j))
        .collect();
    assert!(
        !resumed_jobs.is_empty(),
        "a waiting job was placed after the restart"
    );
    for job in resumed_jobs {
        let submitted = stack.traceparent_of(job, "job_submitted").await.unwrap();
        let placed = stack.traceparent_of(job, "job_placed").await.unwrap();
        assert_eq!(
            placed.trace_id, submitted.trace_id,
            "job {job} was placed outside its submission's trace"
        );
        assert_ne!(
            placed.parent_id, submitted.parent_id,
            "the placement's own span"
        );
    }

    // The cache deleted: the next start folds the whole log and holds the same fold.
    std::fs::remove_dir_all(&cp).unwrap();
    let third = start(&stack, &cp).await;
    assert_eq!(third.resumed_from, 0, "nothing to resume from");
    assert_same(&third.started_with, &scratch, "rebuilt from the log");
    let stopped = third.stop().await;
    assert_same(&stopped, &scratch, "third run");
    assert_eq!(
        placements(&stack).await,
        placed,
        "no placement after the rebuild"
    );

    // The rebuilt fold was checkpointed again.
    let fourth = start(&stack, &cp).await;
    assert_eq!(fourth.resumed_from, stopped.last_applied());
    fourth.stop().await;

    let report = audit(CLUSTER, &read_log(&stack.js, CLUSTER, None).await.unwrap());
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert!(report.cycles >= 2);

    // A checkpoint ahead of the log (here: a fresh server, as after its store was wiped) is
    // not trusted.
    let fresh = Stack::start().await.unwrap();
    let elsewhere = start(&fresh, &cp).await;
    assert_eq!(elsewhere.resumed_from, 0);
    let end = log_end(&fresh).await;
    assert_same(
        &elsewhere.started_with,
        &from_scratch(&fresh, end).await,
        "a fresh log",
    );
    elsewhere.stop().await;
}

/// A usage snapshot of the cluster's research/nlp allocation, `charged_gpu_ms` charged, over a
/// `window_ms` window ending at `window_end_ms`.
fn snapshot(window_end_ms: i64, window_ms: i64, charged_gpu_ms: u64) -> Body {
    Body::UsageSnapshot(pb::UsageSnapshot {
        cluster: CLUSTER.into(),
        window_end_ms,
        window_ms,
        through_sequence: 0,
        allocations: vec![pb::AllocationUsage {
            allocation: "research/nlp".into(),
            charged_gpu_ms,
            allocated_gpu_ms: 1_000_000,
        }],
        unallocated_gpu_ms: 0,
    })
}

/// Two accounting instances with different windows publish in turn: the service set to one
/// window folds only its snapshots, however recent the other's; its checkpoint is resumed
/// under that window only, and a start under the other window folds the log afresh and
/// takes the other's.
#[tokio::test]
async fn snapshots_of_another_window_are_refused_and_a_checkpoint_is_resumed_under_its_own_window()
{
    const DAY: i64 = 24 * 3_600_000;
    let (week, fortnight) = (7 * DAY, 14 * DAY);
    let stack = Stack::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("decision-alpha");
    let usage = subjects::usage(CLUSTER);

    let first = start_with_window(&stack, &cp, Some(week)).await;
    let base = 1_700_000_000_000;
    stack
        .append(usage.clone(), snapshot(base, week, 100), "week-1")
        .await
        .unwrap();
    stack
        .append(
            usage.clone(),
            snapshot(base + 10_000, fortnight, 900),
            "fortnight-1",
        )
        .await
        .unwrap();
    let end = stack
        .append(usage.clone(), snapshot(base + 5_000, week, 200), "week-2")
        .await
        .unwrap();
    // Stopped, it checkpoints what it folded; started again under the same window it resumes
    // that checkpoint and folds the rest before it serves (however far the first one got).
    let folded = first.stop().await.last_applied();
    assert!(folded > 0, "the first instance folded the cluster's set-up");
    let again = start_with_window(&stack, &cp, Some(week)).await;
    assert_eq!(again.resumed_from, folded, "resumed under its own window");
    let caught_up = &again.started_with;
    assert_eq!(caught_up.last_applied(), end);
    assert_eq!(caught_up.state().usage_window_ms(), Some(week));
    let held = caught_up.state().usage().unwrap();
    // The newer 14-day snapshot was refused; the second week's is held (after the refused
    // one's window end, it would have looked stale beside it).
    assert_eq!((held.window_ms, held.window_end_ms), (week, base + 5_000));
    assert_eq!(held.by_allocation["research/nlp"].charged_gpu_ms, 200);
    assert_same(
        caught_up,
        &from_scratch_with_window(&stack, end, Some(week)).await,
        "under the week's window",
    );
    // Taking any window, the log's order decides: the 14-day one, newer, stays.
    let any = from_scratch(&stack, end).await;
    assert_eq!(any.state().usage().unwrap().window_ms, fortnight);
    again.stop().await;

    // ...another folds the log afresh and takes the other instance's snapshots.
    let other = start_with_window(&stack, &cp, Some(fortnight)).await;
    assert_eq!(
        other.resumed_from, 0,
        "a checkpoint of another window is not resumed"
    );
    let held = other.started_with.state().usage().unwrap();
    assert_eq!(
        (held.window_ms, held.window_end_ms),
        (fortnight, base + 10_000)
    );
    assert_same(
        &other.started_with,
        &from_scratch_with_window(&stack, end, Some(fortnight)).await,
        "under the fortnight's window",
    );
    other.stop().await;
}
