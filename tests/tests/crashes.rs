//! Every service crashed and restarted, over and over, under load (SPEC section 6,
//! reliability: "kill any service at any moment and restart it"), against a real nats-server.
//!
//! Cluster `chaos`: 4 nodes x 8 GPUs, allocations `a` and `b` with equal shares. Unallocated
//! 8-GPU jobs fill the cluster first; then allocated jobs of 1 to 8 GPUs (minimum runtimes of
//! 1-2 s, 1-3 s of work, resumable) arrive a few per second, so the preemption service orders
//! work off for them. The submission, accounting, decision and preemption services run
//! in-process, each with its sled checkpoint, beside the demo launcher. Every 0.2 to 1.2 s (a
//! fixed pseudo-random sequence, so kills land at different points of the work) one of
//! them, in turn, is killed (its task aborted, as a crash would end it: no last checkpoint,
//! whatever it was doing cut off) and started again 150 ms later on the same checkpoint
//! directory, until each was killed at least 3 times. Once, with a service down, the
//! nats-server itself is killed for 3 s and restarted on its store, so every connection drops
//! and reconnects mid-flight. The test's submitter retries each submission with its key until
//! one is accepted.
//!
//! Checked from the log once every job has finished:
//! - no submission lost, none twice: one `JobSubmitted` per key, for the job id it was answered
//!   with;
//! - every job's events come in an order its life allows: placed only while queued (so never
//!   placed twice), started only once placed, preempted only under an order and once,
//!   requeued only once preempted, finished once, and nothing after;
//! - every placement re-derives from the log prefix its basis names and no node is ever given
//!   more GPUs than it has free (the decision service's audit);
//! - every preemption order re-derives the same way (the preemption service's audit), and
//!   there were orders to check;
//! - every usage snapshot re-derives too: the log folded through the sequence it names, by the
//!   accounting service's own fold, gives the same snapshot at its window end;
//! - restarts resumed from their checkpoints, and every service was still running at the end;
//! - at every start, every service's fold (checkpoint plus catch-up) equals a fold from scratch
//!   of the log through the same sequence.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_launcher::runner::{self, RunnerConfig};
use fairshare_model::files;
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_runtime::log::LogEntry;
use fairshare_testkit::NatsServer;
use fairshare_testkit::Rng;
use tokio::task::JoinHandle;

const CLUSTER: &str = "chaos";

const BUDGET: &str = r#"
cluster = "chaos"
[accounts.a]
share = 1
[accounts.b]
share = 1
"#;

const INVENTORY: &str = r#"
cluster = "chaos"
[[nodes]]
prefix = "n"
count = 4
gpus = 8
"#;

/// The usage window the decision and preemption services take snapshots of, as their binaries
/// do by default: the accounting service's (7 d), so every snapshot is folded.
const USAGE_WINDOW_MS: Option<i64> = Some(7 * 24 * 3_600_000);

/// The preemption service's policy here: the defaults with a 1 s grace.
fn policy() -> fairshare_preemption::domain::Config {
    fairshare_preemption::domain::Config {
        grace_ms: 1_000,
        ..Default::default()
    }
}

/// Four unallocated jobs that fill the cluster, then allocated work of both allocations.
fn workload() -> Vec<pb::SubmitRequest> {
    let mut rng = Rng(0x0c4a_05c4_a05c_4a05);
    let job = |i: usize, allocation: &str, gpus: i64, min_runtime_s: i64, seconds: u64| {
        pb::SubmitRequest {
            idempotency_key: format!("chaos-{i}"),
            spec: Some(pb::JobSpec {
                cluster: CLUSTER.into(),
                allocation: allocation.into(),
                user: "ada".into(),
                gpus,
                min_runtime_s,
                resumable: true,
                payload: format!("sleep {seconds}").into(),
                name: format!("job-{i}"),
                ..Default::default()
            }),
        }
    };
    let mut jobs: Vec<_> = (0..4).map(|i| job(i, "a", 8, 0, 12)).collect();
    for i in 4..64 {
        let allocation = if rng.below(2) == 0 { "a" } else { "b" };
        let gpus = [1, 2, 4, 8][rng.below(4) as usize];
        jobs.push(job(
            i,
            allocation,
            gpus,
            1 + rng.below(2) as i64,
            1 + rng.below(3),
        ));
    }
    jobs
}

/// The services the test kills in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Submission,
    Accounting,
    Decision,
    Preemption,
}

const KINDS: [Kind; 4] = [
    Kind::Submission,
    Kind::Accounting,
    Kind::Decision,
    Kind::Preemption,
];

/// Starts `kind` as a supervisor would restart a crashed process: tried again for a while if
/// the start fails (a checkpoint write the crash left on a blocking thread may hold the sled
/// lock for a moment; a task left running for good would hold it for good and fail the test).
async fn start(kind: Kind, url: &str, dirs: &Path) -> (JoinHandle<()>, u64) {
    let mut tries = 0;
    loop {
        match start_once(kind, url, dirs).await {
            Ok(started) => return started,
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("{kind:?} did not start ({e}); trying again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{kind:?} did not start in 5 s: {e}"),
        }
    }
}

/// Starts `kind` on its own connection with its checkpoint under `dirs`; returns once it
/// serves, with the sequence it resumed from. It serves until its task is aborted.
async fn start_once(kind: Kind, url: &str, dirs: &Path) -> anyhow::Result<(JoinHandle<()>, u64)> {
    let client = async_nats::connect(url).await?;
    let clock = Arc::new(SystemClock);
    let dir = dirs.join(format!("{kind:?}"));
    let forever = std::future::pending::<()>();
    let js = jetstream::new(client.clone());
    match kind {
        Kind::Submission => {
            let config = fairshare_submission::Config {
                checkpoint_dir: Some(dir),
                ..Default::default()
            };
            let service =
                fairshare_submission::shell::Service::start(client, config, clock).await?;
            let rebuilt = service.state();
            let scratch = folded_through(
                &js,
                fairshare_submission::shell::log_filters(),
                rebuilt.last_sequence,
                fairshare_submission::domain::SubmissionState::default(),
                fairshare_submission::shell::apply_entry,
            )
            .await;
            assert_eq!(rebuilt, scratch, "submission fold rebuilt at restart");
            let resumed_from = service.resumed_from();
            Ok((serving(service.serve(forever)), resumed_from))
        }
        Kind::Accounting => {
            let config = fairshare_accounting::shell::Config {
                snapshot_every: Duration::from_millis(500),
                cluster: Some(CLUSTER.into()),
                ..fairshare_accounting::shell::Config::new(dir)
            };
            let fold_config = config.fold;
            let service =
                fairshare_accounting::shell::Service::start(client, config, clock).await?;
            let rebuilt = service.fold();
            let scratch = folded_through(
                &js,
                fairshare_accounting::shell::log_filters(Some(CLUSTER)),
                rebuilt.last_applied(),
                fairshare_accounting::domain::UsageFold::new(fold_config),
                fairshare_accounting::shell::apply_entry,
            )
            .await;
            assert_eq!(rebuilt, &scratch, "accounting fold rebuilt at restart");
            let resumed_from = service.resumed_from();
            Ok((serving(service.serve(forever)), resumed_from))
        }
        Kind::Decision => {
            let config = fairshare_decision::shell::Config {
                checkpoint_dir: Some(dir),
                usage_window_ms: USAGE_WINDOW_MS,
                ..fairshare_decision::shell::Config::new(CLUSTER)
            };
            let service = fairshare_decision::shell::Service::start(client, config, clock).await?;
            let rebuilt = service.fold();
            let scratch = folded_through(
                &js,
                vec![subjects::cluster_events(CLUSTER)],
                rebuilt.last_applied(),
                fairshare_decision::shell::LogFold::with_usage_window(CLUSTER, USAGE_WINDOW_MS),
                |fold, entry| fold.apply(entry),
            )
            .await;
            assert_eq!(rebuilt, &scratch, "decision fold rebuilt at restart");
            let resumed_from = service.resumed_from();
            Ok((serving(service.serve(forever)), resumed_from))
        }
        Kind::Preemption => {
            let config = fairshare_preemption::shell::Config {
                policy: policy(),
                checkpoint_dir: Some(dir),
                usage_window_ms: USAGE_WINDOW_MS,
                ..fairshare_preemption::shell::Config::new(CLUSTER)
            };
            let service =
                fairshare_preemption::shell::Service::start(client, config, clock).await?;
            let rebuilt = service.fold();
            let scratch = folded_through(
                &js,
                vec![subjects::cluster_events(CLUSTER)],
                rebuilt.last_applied(),
                fairshare_preemption::shell::ShellFold::with_usage_window(CLUSTER, USAGE_WINDOW_MS),
                |fold, entry| fold.apply(entry),
            )
            .await;
            assert_eq!(rebuilt, &scratch, "preemption fold rebuilt at restart");
            let resumed_from = service.resumed_from();
            Ok((serving(service.serve(forever)), resumed_from))
        }
    }
}

/// `state` with the log's entries on `filters` through sequence `through` folded into it by
/// `apply`: the fold from scratch that a restarted service's must equal.
async fn folded_through<S, R>(
    js: &jetstream::Context,
    filters: Vec<String>,
    through: u64,
    mut state: S,
    apply: impl Fn(&mut S, &LogEntry) -> R,
) -> S {
    for entry in entries_through(js, filters, through).await {
        apply(&mut state, &entry);
    }
    state
}

/// The log's entries on `filters` through sequence `through` (none for 0), as a service
/// following them reads them: what a restarted service's fold must equal once folded from
/// scratch (SPEC section 6: "rebuilt state equal to a from-scratch fold").
async fn entries_through(
    js: &jetstream::Context,
    filters: Vec<String>,
    through: u64,
) -> Vec<LogEntry> {
    let mut out = Vec::new();
    if through == 0 {
        return out;
    }
    let mut follower = fairshare_runtime::log::Follower::start(js, 1, filters)
        .await
        .unwrap();
    if follower.pending_at_start == 0 {
        return out;
    }
    while let Some(entry) = follower.next().await {
        let entry = entry.unwrap();
        let (sequence, pending) = (entry.sequence, entry.pending);
        if sequence <= through {
            out.push(entry);
        }
        if sequence >= through || pending == 0 {
            return out;
        }
    }
    panic!("the log closed before sequence {through}");
}

/// Runs a service's `serve` future on its own task; a service that stops with an error fails
/// the test (the final check that every task is still running catches it).
fn serving<T, E: std::fmt::Debug>(
    serve: impl std::future::Future<Output = Result<T, E>> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        serve.await.unwrap();
    })
}

/// Submits `request` until the submission service accepts it (it may be down, or killed
/// mid-request); returns the job id it answers with.
async fn submit_until_accepted(client: &async_nats::Client, request: &pb::SubmitRequest) -> String {
    let bytes = codec::encode(request);
    for _ in 0..200 {
        let reply = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subjects::SUBMIT_API, bytes.clone()),
        )
        .await;
        if let Ok(Ok(reply)) = reply {
            match codec::decode_submit_reply(&reply.payload).unwrap().result {
                Some(pb::submit_reply::Result::Accepted(a)) => return a.job_id,
                // The log did not confirm the write (a slow moment): retry with the same key.
                Some(pb::submit_reply::Result::Rejected(r))
                    if r.code == pb::RejectionCode::Unavailable as i32 => {}
                other => panic!("{}: {other:?}", request.idempotency_key),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never accepted", request.idempotency_key);
}

/// Where a job stands in its life, as its events so far say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Queued,
    Placed,
    Running,
    Preempted,
    Finished,
}

/// Walks every job's events in log order and checks each is one its life allows at that point
/// (see the module doc); returns each job's final state and how many times it was placed.
fn lives(entries: &[LogEntry]) -> BTreeMap<String, (Life, usize)> {
    let mut jobs: BTreeMap<String, (Life, usize)> = BTreeMap::new();
    // Jobs with an order outstanding.
    let mut ordered: BTreeMap<String, u64> = BTreeMap::new();
    for e in entries {
        let event = e.event.as_ref().unwrap();
        let seq = e.sequence;
        let (id, kind) = match &event.body {
            Some(Body::JobSubmitted(j)) => {
                assert!(
                    jobs.insert(j.job_id.clone(), (Life::Queued, 0)).is_none(),
                    "{seq}: {} submitted twice",
                    j.job_id
                );
                continue;
            }
            Some(Body::JobPlaced(j)) => (&j.job_id, "placed"),
            Some(Body::JobStarted(j)) => (&j.job_id, "started"),
            Some(Body::PreemptionOrdered(j)) => (&j.job_id, "ordered"),
            Some(Body::JobPreempted(j)) => (&j.job_id, "preempted"),
            Some(Body::JobRequeued(j)) => (&j.job_id, "requeued"),
            Some(Body::JobFinished(j)) => (&j.job_id, "finished"),
            Some(Body::JobFailed(_) | Body::JobCancelled(_) | Body::JobRejected(_)) => {
                panic!("{seq}: nothing fails, is cancelled or rejected here: {event:?}")
            }
            _ => continue,
        };
        let (life, placements) = jobs
            .get_mut(id)
            .unwrap_or_else(|| panic!("{seq}: {kind} before {id} was submitted"));
        let next = match (kind, *life) {
            ("placed", Life::Queued) => {
                *placements += 1;
                Life::Placed
            }
            ("started", Life::Placed) => Life::Running,
            ("ordered", Life::Placed | Life::Running) => {
                ordered.insert(id.clone(), seq);
                *life
            }
            ("preempted", Life::Placed | Life::Running) => {
                assert!(
                    ordered.remove(id).is_some(),
                    "{seq}: {id} preempted without an order"
                );
                Life::Preempted
            }
            ("requeued", Life::Preempted) => Life::Queued,
            ("finished", Life::Running) => {
                ordered.remove(id);
                Life::Finished
            }
            (kind, life) => panic!("{seq}: {id} {kind} while {life:?}"),
        };
        *life = next;
    }
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_killed_in_turn_under_load_loses_nothing_and_audits_clean() {
    let mut server = NatsServer::start().unwrap();
    let url = server.url();
    let client = async_nats::connect(&url).await.unwrap();
    let js = jetstream::new(client.clone());
    fairshare_runtime::nats::ensure_streams(&js, 1)
        .await
        .unwrap();
    let now = SystemClock.now_ms();
    admin::set_budget(&js, now, files::parse_budget(BUDGET).unwrap())
        .await
        .unwrap();
    admin::register_nodes(
        &js,
        now,
        files::parse_inventory(INVENTORY).unwrap().registrations(),
    )
    .await
    .unwrap();
    let dirs = tempfile::tempdir().unwrap();
    let mut running = BTreeMap::new();
    for kind in KINDS {
        running.insert(kind, start(kind, &url, dirs.path()).await.0);
    }
    let launcher_client = async_nats::connect(&url).await.unwrap();
    let launcher = tokio::spawn(runner::run(
        launcher_client,
        RunnerConfig {
            cluster: CLUSTER.into(),
            time_scale: 1,
            default_duration: Duration::from_secs(1),
            honour_preemption: true,
            tick: Duration::from_millis(20),
        },
        Arc::new(SystemClock),
        std::future::pending(),
    ));

    // Submissions, a few per second, on their own task.
    let submitter = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut accepted = BTreeMap::new();
            for request in workload() {
                let id = submit_until_accepted(&client, &request).await;
                accepted.insert(request.idempotency_key.clone(), id);
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            accepted
        })
    };

    // Kill and restart one service after another while the work is submitted and runs, until
    // each was killed 3 times (the cap only bounds a machine too slow to restart them).
    let mut kills: BTreeMap<Kind, usize> = BTreeMap::new();
    let mut resumed: BTreeMap<Kind, usize> = BTreeMap::new();
    let cap = tokio::time::Instant::now() + Duration::from_secs(120);
    // Each kill after a different pause (200 ms to 1.2 s, from a fixed seed), so the kills
    // land at different points of the services' work rather than at one rhythm.
    let mut pauses = Rng(0x5eed_0f4b_1d5c_0de5);
    for kind in KINDS.iter().cycle().copied() {
        if KINDS.iter().all(|k| kills.get(k).is_some_and(|n| *n >= 3)) {
            break;
        }
        assert!(tokio::time::Instant::now() < cap, "only {kills:?} in 120 s");
        tokio::time::sleep(Duration::from_millis(200 + pauses.below(1_000))).await;
        let task = running.remove(&kind).unwrap();
        task.abort();
        assert!(
            task.await.unwrap_err().is_cancelled(),
            "{kind:?} was running"
        );
        *kills.entry(kind).or_default() += 1;
        if kills.values().sum::<usize>() == 6 {
            // The broker too, once, with a service down: everyone reconnects.
            server.kill();
            tokio::time::sleep(Duration::from_secs(3)).await;
            server.restart().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (task, resumed_from) = start(kind, &url, dirs.path()).await;
        if resumed_from > 0 {
            *resumed.entry(kind).or_default() += 1;
        }
        running.insert(kind, task);
    }
    let accepted = submitter.await.unwrap();
    assert_eq!(accepted.len(), workload().len());

    // Every job finishes (the last ones with every service up).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let entries = loop {
        let entries = fairshare_decision::shell::read_log(&js, CLUSTER, None)
            .await
            .unwrap();
        let lives = lives(&entries);
        let unfinished: Vec<_> = accepted
            .values()
            .filter(|id| {
                lives
                    .get(*id)
                    .is_none_or(|(life, _)| *life != Life::Finished)
            })
            .collect();
        if unfinished.is_empty() {
            break entries;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "unfinished after 90 s: {unfinished:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for (kind, task) in running {
        assert!(!task.is_finished(), "{kind:?} stopped on its own");
        task.abort();
    }
    launcher.abort();
    // Restarts took up their checkpoints (every service writes one after catch-up).
    assert!(
        KINDS
            .iter()
            .all(|k| resumed.get(k).is_some_and(|n| *n >= 2)),
        "resumed from a checkpoint: {resumed:?} of {kills:?}"
    );

    // No submission lost or doubled; every life in order (checked by `lives`).
    let lives = lives(&entries);
    assert_eq!(lives.len(), accepted.len(), "one JobSubmitted per key");
    for id in accepted.values() {
        assert!(lives.contains_key(id), "{id} is not in the log");
    }
    let placed: usize = lives.values().map(|(_, n)| n).sum();

    // Every decision, order and snapshot re-derives from the log; no node was over-committed.
    let placements = fairshare_decision::shell::audit(CLUSTER, &entries);
    assert!(
        placements.is_clean(),
        "{:#?} {:#?}",
        placements.divergences,
        placements.overcommits
    );
    assert_eq!(placements.placements, placed);
    let orders = fairshare_preemption::shell::audit(CLUSTER, &entries, &policy());
    assert!(orders.is_clean(), "{}", orders.render(CLUSTER));
    assert!(
        orders.orders >= 4,
        "{} orders: too little preemption",
        orders.orders
    );
    let snapshot_audit = fairshare_accounting::shell::audit::audit(CLUSTER, &entries);
    assert!(
        snapshot_audit.is_clean(),
        "{:#?}",
        snapshot_audit.divergences
    );
    let snapshots = snapshot_audit.snapshots;
    assert!(snapshots >= 5, "{snapshots} snapshots");
    eprintln!(
        "crashes: {kills:?}, resumed from a checkpoint {resumed:?}; {} entries, {placed} placements in {} cycles, {} orders in {} passes, {snapshots} snapshots",
        entries.len(),
        placements.cycles,
        orders.orders,
        orders.passes
    );
}
