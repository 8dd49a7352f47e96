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
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = decision::Config {
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
    let mut fold = LogFold::new(CLUSTER);
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
