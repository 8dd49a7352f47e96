//! Every service crashed and restarted, over and over, under load (SPEC section 6,
//! reliability: "kill any service at any moment and restart it"), against a real nats-server.
//!
//! Cluster `chaos`: 4 nodes x 8 GPUs, allocations `a` and `b` with equal shares. Unallocated
//! 8-GPU jobs fill the cluster first; then allocated jobs of 1 to 8 GPUs (minimum runtimes of
//! 1-2 s, 1-3 s of work, resumable) arrive a few per second, so the preemption service orders
//! work off for them. The submission, accounting, decision and preemption services run
//! in-process, each with its sled checkpoint, beside the demo launcher. Every 700 ms one of them,
//! in turn, is killed (its task aborted, as a crash would end it: no last checkpoint, whatever it
//! was doing cut off) and started again 150 ms later on the same checkpoint directory. The
//! test's own launcher retries each submission with its key until one is accepted.
//!
//! Checked from the log once every job has finished:
//! - no submission lost, none twice: one `JobSubmitted` per key, for the job id it was answered
//!   with;
//! - no job placed twice: a job's placements are at most one more than its requeues, its starts
//!   no more than its placements, and it finishes exactly once;
//! - every placement re-derives from the log prefix its basis names and no node is ever given
//!   more GPUs than it has free (the decision service's audit);
//! - every preemption order re-derives the same way (the preemption service's audit), and
//!   there were orders to check.

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
use fairshare_testkit::NatsServer;
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

/// The preemption service's policy here: the defaults with a 1 s grace.
fn policy() -> fairshare_preemption::domain::Config {
    fairshare_preemption::domain::Config {
        grace_ms: 1_000,
        ..Default::default()
    }
}

/// xorshift64*: a deterministic workload without dependencies.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
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
async fn start(kind: Kind, url: &str, dirs: &Path) -> JoinHandle<()> {
    let mut tries = 0;
    loop {
        match start_once(kind, url, dirs).await {
            Ok(task) => return task,
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
/// serves. It serves until its task is aborted.
async fn start_once(kind: Kind, url: &str, dirs: &Path) -> anyhow::Result<JoinHandle<()>> {
    let client = async_nats::connect(url).await?;
    let clock = Arc::new(SystemClock);
    let dir = dirs.join(format!("{kind:?}"));
    let forever = std::future::pending::<()>();
    match kind {
        Kind::Submission => {
            let config = fairshare_submission::Config {
                checkpoint_dir: Some(dir),
                ..Default::default()
            };
            let service =
                fairshare_submission::shell::Service::start(client, config, clock).await?;
            Ok(tokio::spawn(async move {
                service.serve(forever).await.unwrap();
            }))
        }
        Kind::Accounting => {
            let config = fairshare_accounting::shell::Config {
                snapshot_every: Duration::from_millis(500),
                cluster: Some(CLUSTER.into()),
                ..fairshare_accounting::shell::Config::new(dir)
            };
            let service =
                fairshare_accounting::shell::Service::start(client, config, clock).await?;
            Ok(tokio::spawn(async move {
                service.serve(forever).await.unwrap();
            }))
        }
        Kind::Decision => {
            let config = fairshare_decision::shell::Config {
                checkpoint_dir: Some(dir),
                ..fairshare_decision::shell::Config::new(CLUSTER)
            };
            let service = fairshare_decision::shell::Service::start(client, config, clock).await?;
            Ok(tokio::spawn(async move {
                service.serve(forever).await.unwrap();
            }))
        }
        Kind::Preemption => {
            let config = fairshare_preemption::shell::Config {
                policy: policy(),
                checkpoint_dir: Some(dir),
                ..fairshare_preemption::shell::Config::new(CLUSTER)
            };
            let service =
                fairshare_preemption::shell::Service::start(client, config, clock).await?;
            Ok(tokio::spawn(async move {
                service.serve(forever).await.unwrap();
            }))
        }
    }
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
                other => panic!("{}: {other:?}", request.idempotency_key),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never accepted", request.idempotency_key);
}

/// Per job, what the log says happened to it.
#[derive(Debug, Default)]
struct Facts {
    submitted: usize,
    placed: usize,
    started: usize,
    requeued: usize,
    finished: usize,
}

fn facts(entries: &[fairshare_runtime::log::LogEntry]) -> BTreeMap<String, Facts> {
    let mut jobs: BTreeMap<String, Facts> = BTreeMap::new();
    for e in entries {
        let Ok(event) = &e.event else { continue };
        let (id, field): (&str, fn(&mut Facts) -> &mut usize) = match &event.body {
            Some(Body::JobSubmitted(j)) => (&j.job_id, |f| &mut f.submitted),
            Some(Body::JobPlaced(j)) => (&j.job_id, |f| &mut f.placed),
            Some(Body::JobStarted(j)) => (&j.job_id, |f| &mut f.started),
            Some(Body::JobRequeued(j)) => (&j.job_id, |f| &mut f.requeued),
            Some(Body::JobFinished(j)) => (&j.job_id, |f| &mut f.finished),
            _ => continue,
        };
        *field(jobs.entry(id.to_owned()).or_default()) += 1;
    }
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_killed_in_turn_under_load_loses_nothing_and_audits_clean() {
    let server = NatsServer::start().unwrap();
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
        running.insert(kind, start(kind, &url, dirs.path()).await);
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

    // Kill and restart one service after another while the work is submitted and runs.
    let mut kills: BTreeMap<Kind, usize> = BTreeMap::new();
    let killing = tokio::time::Instant::now() + Duration::from_secs(14);
    let mut turn = 0;
    while tokio::time::Instant::now() < killing {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let kind = KINDS[turn % KINDS.len()];
        turn += 1;
        let task = running.remove(&kind).unwrap();
        task.abort();
        assert!(
            task.await.unwrap_err().is_cancelled(),
            "{kind:?} was running"
        );
        *kills.entry(kind).or_default() += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
        running.insert(kind, start(kind, &url, dirs.path()).await);
    }
    let accepted = submitter.await.unwrap();
    assert_eq!(accepted.len(), workload().len());
    assert!(
        KINDS
            .iter()
            .all(|k| kills.get(k).copied().unwrap_or(0) >= 3),
        "{kills:?}"
    );

    // Every job finishes (the last ones with every service up).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let entries = loop {
        let entries = fairshare_decision::shell::read_log(&js, CLUSTER, None)
            .await
            .unwrap();
        let facts = facts(&entries);
        if accepted
            .values()
            .all(|id| facts.get(id).is_some_and(|f| f.finished > 0))
        {
            break entries;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "unfinished after 90 s: {:?}",
            facts
                .iter()
                .filter(|(_, f)| f.finished == 0)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for (_, task) in running {
        task.abort();
    }
    launcher.abort();

    // No submission lost or doubled, no job placed twice.
    let facts = facts(&entries);
    let submitted: usize = facts.values().map(|f| f.submitted).sum();
    assert_eq!(submitted, accepted.len(), "one JobSubmitted per key");
    for (key, id) in &accepted {
        let f = &facts[id];
        assert_eq!(f.submitted, 1, "{key} -> {id}");
        assert!(f.placed <= f.requeued + 1, "{id} placed twice: {f:?}");
        assert!(f.started <= f.placed, "{id}: {f:?}");
        assert_eq!(f.finished, 1, "{id}: {f:?}");
    }

    // Every decision and every order re-derives from the log; no node was over-committed.
    let placements = fairshare_decision::shell::audit(CLUSTER, &entries);
    assert!(
        placements.is_clean(),
        "{:#?} {:#?}",
        placements.divergences,
        placements.overcommits
    );
    assert!(placements.placements >= accepted.len());
    let orders = fairshare_preemption::shell::audit(CLUSTER, &entries, &policy());
    assert!(orders.is_clean(), "{:#?}", orders.divergences);
    assert!(
        orders.orders >= 4,
        "{} orders: too little preemption",
        orders.orders
    );
    let requeues: usize = facts.values().map(|f| f.requeued).sum();
    eprintln!(
        "crashes: {kills:?}; {} entries, {} placements in {} cycles, {} orders in {} passes, {requeues} requeues",
        entries.len(),
        placements.placements,
        placements.cycles,
        orders.orders,
        orders.passes
    );
}
