//! The preemption service end to end against a real nats-server, with the submission service,
//! the decision service and the demo launcher in-process (all on the system clock).
//!
//! Cluster `pre`: 2 nodes x 8 GPUs; allocations `a` and `b` with equal shares. A usage snapshot
//! charges `a` heavily and `b` nothing, so `b` is under-served. The cluster is filled by `a`:
//! one 8-GPU job with a 1-hour minimum runtime (it gets a node to itself) and eight 1-GPU jobs
//! with a 1-second minimum runtime. Once those seconds have passed, a debug job of `b` (1 GPU,
//! minimum runtime 10 min) is submitted. Checked from the log:
//!
//! - the debug job starts within grace + 5 s (one decision cycle plus the grace period, with
//!   margin for a shared 2-core machine);
//! - exactly one job is ordered off, a 1-GPU job of `a` past its minimum runtime, for the debug
//!   job; the 1-hour job is never ordered off; nothing is ordered twice;
//! - with the launcher confirming, the victim ends `JobPreempted{killed:false}` and is requeued;
//!   with the launcher ignoring orders, the service kills it at the grace deadline
//!   (`JobPreempted{killed:true}`, message id `killed:…`, not before the deadline) and requeues
//!   it (resumable).
//!
//! Broker outage (its own run): with the broker gone from before an order's grace deadline
//! until well after it, the kill lands once when it is back, and the victim is requeued once.
//!
//! Packing (its own run): a blocked 8-GPU job of `a` starts once the service moves a small
//! job of `a` from one node into the hole beside a protected job on the other.
//!
//! Lost work (its own run, 6 s checkpoint interval, no timed pass): a 1-GPU job of `b`
//! submitted when every victim is past the 2 s a third of the interval allows is ordered for
//! at the victim's next checkpoint, which the pass that held it back named.
//!
//! Every run ends with the order audit: each `PreemptionOrdered` in the log re-derives from the
//! log prefix its basis names (`shell::audit_log`).
//!
//! A host clock stepped ahead (its own run, the preemption service on a clock stepped an hour
//! ahead while the others keep time): jobs inside their 10-minute minimum runtimes are not
//! ordered off for an under-served waiter, since the service holds its "now" to the log's
//! time; once half an hour has passed on the service's clock (monotonic too), one is.
//!
//! The sled checkpoint: after such a run, a restart on the same checkpoint directory resumes
//! past sequence 0 and holds the fold a start from scratch builds; so does a restart after the
//! directory is deleted, which folds from sequence 1.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_launcher::runner::{self, RunnerConfig};
use fairshare_model::files;
use fairshare_preemption::{domain, shell};
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, ManualClock, SystemClock};
use fairshare_runtime::envelope::Envelope;
use fairshare_testkit::NatsServer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const CLUSTER: &str = "pre";
const GRACE: Duration = Duration::from_secs(2);

const BUDGET: &str = r#"
cluster = "pre"
[accounts.a]
share = 1
[accounts.b]
share = 1
"#;

const INVENTORY: &str = r#"
cluster = "pre"
[[nodes]]
prefix = "g"
count = 2
gpus = 8
"#;

/// A task with a graceful stop.
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Running {
    fn spawn<F, Fut>(f: F) -> Self
    where
        F: FnOnce(oneshot::Receiver<()>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        Self {
            stop,
            task: tokio::spawn(f(stopped)),
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops within 10 s")
            .expect("task did not panic");
    }
}

struct Stack {
    server: NatsServer,
    client: async_nats::Client,
    js: jetstream::Context,
    services: Vec<Running>,
    /// The preemption service's policy, which the audit at [`Stack::stop`] re-derives with.
    policy: domain::Config,
}

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// The preemption service's policy in these tests: the defaults with a short grace.
fn policy() -> domain::Config {
    domain::Config {
        grace_ms: GRACE.as_millis() as i64,
        ..domain::Config::default()
    }
}

/// Starts a preemption service on `url` with `config` and `clock`, serving until stopped.
async fn serve_preemption(url: &str, config: shell::Config, clock: Arc<dyn Clock>) -> Running {
    let c = async_nats::connect(url).await.unwrap();
    let preemption = shell::Service::start(c, config, clock).await.unwrap();
    Running::spawn(|stopped| async move {
        preemption
            .serve(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    })
}

impl Stack {
    async fn start(honour_preemption: bool) -> Self {
        Self::start_with(honour_preemption, None).await
    }

    /// As [`Stack::start`], with the preemption service checkpointing into `checkpoint_dir`.
    async fn start_with(honour_preemption: bool, checkpoint_dir: Option<PathBuf>) -> Self {
        let config = shell::Config {
            policy: policy(),
            checkpoint_dir,
            ..shell::Config::new(CLUSTER)
        };
        Self::start_configured(honour_preemption, config).await
    }

    /// As [`Stack::start`], with the preemption service configured by `config` (its policy is
    /// the audit's too).
    async fn start_configured(honour_preemption: bool, config: shell::Config) -> Self {
        Self::start_clocked(honour_preemption, config, Arc::new(SystemClock)).await
    }

    /// As [`Stack::start_configured`], with the preemption service reading `clock` (the other
    /// services and the launcher read the system clock).
    async fn start_clocked(
        honour_preemption: bool,
        config: shell::Config,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let policy = config.policy;
        let server = NatsServer::start().unwrap();
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = jetstream::new(client.clone());
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        admin::set_budget(&js, now_ms(), files::parse_budget(BUDGET).unwrap())
            .await
            .unwrap();
        admin::register_nodes(
            &js,
            now_ms(),
            files::parse_inventory(INVENTORY).unwrap().registrations(),
        )
        .await
        .unwrap();
        // `a` has used half its window's allocation, `b` nothing: `b` is under-served.
        let day = 24 * 3_600_000u64;
        let snapshot = pb::UsageSnapshot {
            cluster: CLUSTER.into(),
            window_end_ms: now_ms(),
            window_ms: 7 * day as i64,
            through_sequence: 0,
            allocations: vec![
                pb::AllocationUsage {
                    allocation: "a".into(),
                    charged_gpu_ms: 8 * 16 * day / 2 * 7,
                    allocated_gpu_ms: 8 * 16 * day * 7,
                },
                pb::AllocationUsage {
                    allocation: "b".into(),
                    charged_gpu_ms: 0,
                    allocated_gpu_ms: 8 * 16 * day * 7,
                },
            ],
            unallocated_gpu_ms: 0,
        };
        admin::append(
            &js,
            subjects::usage(CLUSTER),
            &pb::Event {
                at_ms: now_ms(),
                body: Some(Body::UsageSnapshot(snapshot)),
            },
            &Envelope {
                message_id: "usage:test:1".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();

        let mut services = Vec::new();
        let url = server.url();
        let c = async_nats::connect(&url).await.unwrap();
        let submission = fairshare_submission::shell::Service::start(
            c,
            fairshare_submission::Config::default(),
            Arc::new(SystemClock),
        )
        .await
        .unwrap();
        services.push(Running::spawn(|stopped| async move {
            submission
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        }));
        let c = async_nats::connect(&url).await.unwrap();
        let decision = fairshare_decision::shell::Service::start(
            c,
            fairshare_decision::shell::Config::new(CLUSTER),
            Arc::new(SystemClock),
        )
        .await
        .unwrap();
        services.push(Running::spawn(|stopped| async move {
            decision
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        }));
        services.push(serve_preemption(&url, config, clock).await);
        let c = async_nats::connect(&url).await.unwrap();
        let launcher = RunnerConfig {
            cluster: CLUSTER.into(),
            time_scale: 1,
            default_duration: Duration::from_secs(100_000),
            honour_preemption,
            tick: Duration::from_millis(20),
        };
        services.push(Running::spawn(|stopped| async move {
            runner::run(c, launcher, Arc::new(SystemClock), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        }));
        Self {
            server,
            client,
            js,
            services,
            policy,
        }
    }

    /// Stops every service, then audits the log: every preemption order re-derives from the
    /// log prefix its basis names (the audit's report is returned for counts).
    async fn stop(self) -> shell::OrderAudit {
        for s in self.services {
            s.stop().await;
        }
        let audit = shell::audit_log(&self.js, CLUSTER, &self.policy)
            .await
            .unwrap();
        assert!(audit.is_clean(), "{}", audit.render(CLUSTER));
        drop(self.server);
        audit
    }

    async fn submit(&self, key: &str, allocation: &str, gpus: i64, min_runtime_s: i64) -> String {
        self.submit_to_run(key, allocation, gpus, min_runtime_s, 100_000)
            .await
    }

    /// As [`Stack::submit`], for a job the launcher runs `run_s` seconds.
    async fn submit_to_run(
        &self,
        key: &str,
        allocation: &str,
        gpus: i64,
        min_runtime_s: i64,
        run_s: u64,
    ) -> String {
        let request = pb::SubmitRequest {
            idempotency_key: key.into(),
            spec: Some(pb::JobSpec {
                cluster: CLUSTER.into(),
                allocation: allocation.into(),
                user: "ada".into(),
                gpus,
                min_runtime_s,
                resumable: true,
                payload: format!("sleep {run_s}").into(),
                name: key.into(),
                ..Default::default()
            }),
        };
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            self.client
                .request(subjects::SUBMIT_API, codec::encode(&request)),
        )
        .await
        .unwrap()
        .unwrap();
        match codec::decode_submit_reply(&reply.payload).unwrap().result {
            Some(pb::submit_reply::Result::Accepted(a)) => a.job_id,
            other => panic!("submission of {key} not accepted: {other:?}"),
        }
    }

    /// Every event in the stream: (sequence, message id, event).
    async fn log(&self) -> Vec<(u64, String, pb::Event)> {
        fairshare_testkit::events::stored(&self.js)
            .await
            .into_iter()
            .map(|s| (s.sequence, s.message_id, s.event))
            .collect()
    }

    /// Polls the log until `done` holds for it, or panics after `within`.
    async fn wait_for(
        &self,
        within: Duration,
        what: &str,
        done: impl Fn(&[(u64, String, pb::Event)]) -> bool,
    ) -> Vec<(u64, String, pb::Event)> {
        let started = Instant::now();
        loop {
            let log = self.log().await;
            if done(&log) {
                return log;
            }
            assert!(
                started.elapsed() < within,
                "{what}: not seen within {within:?}; log:\n{}",
                render(&log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn render(log: &[(u64, String, pb::Event)]) -> String {
    log.iter()
        .map(|(s, id, e)| format!("{s:>4} {id:<60} {:?}", e.body))
        .collect::<Vec<_>>()
        .join("\n")
}

fn started(log: &[(u64, String, pb::Event)], job: &str) -> Option<i64> {
    log.iter().find_map(|(_, _, e)| match &e.body {
        Some(Body::JobStarted(s)) if s.job_id == job => Some(e.at_ms),
        _ => None,
    })
}

struct Filled {
    long: String,
    short: Vec<String>,
}

/// Fills the cluster with `a`'s work and waits out the short minimum runtimes.
async fn fill(stack: &Stack) -> Filled {
    let long = stack.submit("long", "a", 8, 3_600).await;
    let mut short = Vec::new();
    for i in 0..8 {
        short.push(stack.submit(&format!("short-{i}"), "a", 1, 1).await);
    }
    let all: Vec<String> = std::iter::once(long.clone())
        .chain(short.iter().cloned())
        .collect();
    stack
        .wait_for(Duration::from_secs(10), "a's jobs all started", |log| {
            all.iter().all(|j| started(log, j).is_some())
        })
        .await;
    // Past the 1 s minimum runtimes, with margin.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    Filled { long, short }
}

fn placed_seq(log: &[(u64, String, pb::Event)], job: &str) -> Option<(u64, String)> {
    log.iter().find_map(|(s, _, e)| match &e.body {
        Some(Body::JobPlaced(p)) if p.job_id == job => Some((*s, p.nodes[0].node.clone())),
        _ => None,
    })
}

/// The preemption orders in the log by victim, checked to be one per job.
fn orders(
    log: &[(u64, String, pb::Event)],
) -> BTreeMap<String, (u64, String, pb::PreemptionOrdered)> {
    let mut out = BTreeMap::new();
    for (seq, id, e) in log {
        if let Some(Body::PreemptionOrdered(p)) = &e.body {
            let before = out.insert(p.job_id.clone(), (*seq, id.clone(), p.clone()));
            assert!(
                before.is_none(),
                "{} ordered off twice:\n{}",
                p.job_id,
                render(log)
            );
        }
    }
    out
}

async fn debug_job_gets_a_victims_gpu(honour_preemption: bool) {
    let stack = Stack::start(honour_preemption).await;
    let f = fill(&stack).await;
    let submitted_at = Instant::now();
    let debug_submitted_ms = now_ms();
    let debug = stack.submit("debug", "b", 1, 600).await;
    let bound = GRACE + Duration::from_secs(5);
    let log = stack
        .wait_for(bound, "the debug job starts", |log| {
            started(log, &debug).is_some()
        })
        .await;
    let waited = submitted_at.elapsed();
    println!(
        "honour_preemption={honour_preemption}: debug job started {waited:?} after submission (bound {bound:?})"
    );

    if std::env::var_os("E2E_PRINT_LOG").is_some() {
        println!("{}", render(&log));
    }
    let orders = orders(&log);
    assert_eq!(orders.len(), 1, "one victim is enough:\n{}", render(&log));
    let (victim, (order_seq, order_id, order)) = orders.iter().next().unwrap();
    assert!(
        f.short.contains(victim),
        "victim {victim} is a short job of a"
    );
    assert_ne!(
        *victim, f.long,
        "the job inside its minimum runtime is untouched"
    );
    assert_eq!(order.for_job_id, debug);
    assert!(
        order_id.starts_with(&format!("preempt:{victim}:")),
        "{order_id}"
    );
    let ordered_at = log
        .iter()
        .find(|(s, _, _)| s == order_seq)
        .map(|(_, _, e)| e.at_ms)
        .unwrap();
    assert!(ordered_at >= debug_submitted_ms);
    assert_eq!(
        order.grace_deadline_ms,
        ordered_at + GRACE.as_millis() as i64
    );
    let victim_started = started(&log, victim).unwrap();
    assert!(
        ordered_at >= victim_started + 1_000,
        "ordered off inside its minimum runtime"
    );
    let basis = order.basis.unwrap();
    assert!(basis.through_sequence < *order_seq && basis.cycle >= 1);

    // How the victim ended, and its requeue (resumable) after it.
    let ends: Vec<_> = log
        .iter()
        .filter_map(|(s, id, e)| match &e.body {
            Some(Body::JobPreempted(p)) if p.job_id == *victim => {
                Some((*s, id.clone(), p.killed, e.at_ms))
            }
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 1, "ended once:\n{}", render(&log));
    let (end_seq, end_id, killed, end_at) = ends[0].clone();
    assert_eq!(killed, !honour_preemption, "{}", render(&log));
    let (debug_placed, _) = placed_seq(&log, &debug).unwrap();
    assert!(
        debug_placed > end_seq,
        "the debug job is placed only once the victim has ended"
    );
    if killed {
        assert!(end_id.starts_with(&format!("killed:{victim}:")), "{end_id}");
        assert!(
            end_at >= order.grace_deadline_ms,
            "killed before the deadline"
        );
    }
    let requeue = |log: &[(u64, String, pb::Event)]| {
        log.iter().find_map(|(s, id, e)| match &e.body {
            Some(Body::JobRequeued(r)) if r.job_id == *victim => Some((*s, id.clone())),
            _ => None,
        })
    };
    let log = stack
        .wait_for(Duration::from_secs(5), "the victim is requeued", |log| {
            requeue(log).is_some()
        })
        .await;
    let (requeue_seq, requeue_id) = requeue(&log).unwrap();
    assert!(requeue_seq > end_seq);
    assert!(
        requeue_id.starts_with(&format!("requeue:{victim}:")),
        "{requeue_id}"
    );
    assert_eq!(
        log.iter()
            .filter(
                |(_, _, e)| matches!(&e.body, Some(Body::JobRequeued(r)) if r.job_id == *victim)
            )
            .count(),
        1,
        "requeued once"
    );

    // A little later: still one order in all, and the long job never touched.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = stack.log().await;
    let orders = self::orders(&log);
    assert_eq!(orders.len(), 1, "{}", render(&log));
    assert!(!orders.contains_key(&f.long));
    assert!(!log.iter().any(|(_, _, e)| matches!(
        &e.body,
        Some(Body::JobPreempted(p)) if p.job_id == f.long
    )));
    let audit = stack.stop().await;
    assert!(audit.orders >= 1, "the order re-derives from its basis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debug_job_of_an_under_served_allocation_starts_within_a_cycle_and_the_grace() {
    debug_job_gets_a_victims_gpu(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_order_is_killed_at_the_grace_deadline_and_requeued() {
    debug_job_gets_a_victims_gpu(false).await;
}

/// Packing: `a` holds 6 GPUs on one node (`p`, protected for an hour) and 2 on the other
/// (`m`, past its 1 s minimum runtime), after a 2-GPU job beside `p` finished. `a`'s 8-GPU
/// job `w` fits neither node, and no rule lets a job take its own allocation's work: the
/// preemption service moves `m` into the hole beside `p`, and `w` starts on the emptied node.
/// The broker is gone when an order's grace deadline passes: the kill cannot be written, and
/// neither can its outcome be looked up. Once the broker is back the service settles what it
/// could not look up and kills the victim: once, requeued once, and the waiter starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_due_while_the_broker_is_down_lands_once_when_it_is_back() {
    let mut stack = Stack::start(false).await;
    let f = fill(&stack).await;
    let debug = stack.submit("debug", "b", 1, 600).await;
    let log = stack
        .wait_for(
            Duration::from_secs(10),
            "an order for the debug job",
            |log| !orders(log).is_empty(),
        )
        .await;
    let (victim, _) = orders(&log).into_iter().next().unwrap();
    assert!(f.short.contains(&victim));
    // Down from before the deadline (the launcher ignores orders) until well after the kill's
    // acknowledgement (5 s) and the lookup after it have failed: the service must then wait,
    // deciding nothing, until a lookup succeeds.
    stack.server.kill();
    tokio::time::sleep(GRACE + Duration::from_secs(18)).await;
    stack.server.restart().unwrap();
    let log = stack
        .wait_for(
            Duration::from_secs(60),
            "the victim killed and the debug job started",
            |log| started(log, &debug).is_some(),
        )
        .await;
    let kills = log
        .iter()
        .filter(|(_, _, e)| {
            matches!(&e.body, Some(Body::JobPreempted(p)) if p.job_id == victim && p.killed)
        })
        .count();
    assert_eq!(kills, 1, "killed once:\n{}", render(&log));
    assert_eq!(orders(&log).len(), 1, "one order in all:\n{}", render(&log));
    stack
        .wait_for(Duration::from_secs(10), "the victim requeued", |log| {
            log.iter().any(
                |(_, _, e)| matches!(&e.body, Some(Body::JobRequeued(r)) if r.job_id == victim),
            )
        })
        .await;
    let audit = stack.stop().await;
    assert!(
        audit.orders >= 1,
        "the order decided before the outage re-derives"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_job_starts_once_a_small_job_is_moved_into_a_hole_elsewhere() {
    let stack = Stack::start(true).await;
    // One at a time, each placed before the next comes: decided together in one cycle, the
    // debug jobs q and m would go first and the layout differ (it did when the first cycle
    // came late, waiting for the decision lease).
    let p = stack.submit("p", "a", 6, 3_600).await;
    let placed = |job: &str| {
        let job = job.to_owned();
        move |log: &[(u64, String, pb::Event)]| placed_seq(log, &job).is_some()
    };
    stack
        .wait_for(Duration::from_secs(10), "p placed", placed(&p))
        .await;
    let q = stack.submit_to_run("q", "a", 2, 1, 3).await;
    stack
        .wait_for(Duration::from_secs(10), "q placed", placed(&q))
        .await;
    let m = stack.submit("m", "a", 2, 1).await;
    let log = stack
        .wait_for(Duration::from_secs(10), "p, q and m started", |log| {
            [&p, &q, &m].iter().all(|j| started(log, j).is_some())
        })
        .await;
    let (_, p_node) = placed_seq(&log, &p).unwrap();
    let (_, m_node) = placed_seq(&log, &m).unwrap();
    assert_ne!(p_node, m_node, "q filled p's node, so m went to the other");
    let finished = |log: &[(u64, String, pb::Event)], job: &str| {
        log.iter()
            .any(|(_, _, e)| matches!(&e.body, Some(Body::JobFinished(f)) if f.job_id == job))
    };
    stack
        .wait_for(Duration::from_secs(10), "q finished", |log| {
            finished(log, &q)
        })
        .await;

    let w = stack.submit("w", "a", 8, 3_600).await;
    let log = stack
        .wait_for(Duration::from_secs(15), "w starts", |log| {
            started(log, &w).is_some()
        })
        .await;
    if std::env::var_os("E2E_PRINT_LOG").is_some() {
        println!("{}", render(&log));
    }
    let orders = orders(&log);
    assert_eq!(
        orders.len(),
        1,
        "one move:
{}",
        render(&log)
    );
    let (_, _, order) = &orders[&m];
    assert_eq!(order.for_job_id, w);
    assert!(
        order.reason.starts_with(&format!("packing: moves {m} ")),
        "{}",
        order.reason
    );
    let (_, w_node) = placed_seq(&log, &w).unwrap();
    assert_eq!(w_node, m_node, "w runs on the node m left");
    // m was requeued and placed again, in the hole beside p.
    let placements_of_m = |log: &[(u64, String, pb::Event)]| -> Vec<String> {
        log.iter()
            .filter_map(|(_, _, e)| match &e.body {
                Some(Body::JobPlaced(pl)) if pl.job_id == m => Some(pl.nodes[0].node.clone()),
                _ => None,
            })
            .collect()
    };
    let log = stack
        .wait_for(Duration::from_secs(5), "m placed again", |log| {
            placements_of_m(log).len() >= 2
        })
        .await;
    let m_again = placements_of_m(&log)[1].clone();
    assert_eq!(m_again, p_node, "m moved into the hole beside p");
    assert!(!orders.contains_key(&p), "p is protected");
    // Asked why m stopped, the decision service answers with the order that moved it.
    let reply = stack
        .client
        .request(
            subjects::explain_api(CLUSTER),
            codec::encode(&pb::ExplainRequest { job_id: m.clone() }),
        )
        .await
        .unwrap();
    let Some(pb::explain_reply::Result::Explanation(e)) =
        codec::decode_explain_reply(&reply.payload).unwrap().result
    else {
        panic!("no explanation for {m}");
    };
    let note = e.last_preemption.expect("m's last preemption order");
    assert_eq!(note.for_job_id, w);
    assert_eq!(note.reason, order.reason);
    assert_eq!(note.cause, i32::from(pb::PreemptionCause::Packing));
    let audit = stack.stop().await;
    assert!(audit.orders >= 1, "the packing move re-derives");
}

/// Checkpoint interval of the held-back test: its victims may lose at most a third of it (2 s)
/// for a waiter whose allocation holds nothing of its floor.
const SHORT_CHECKPOINT_MS: i64 = 6_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_held_back_for_lost_work_goes_at_the_victims_next_checkpoint_not_the_timer() {
    // No periodic pass within the test: only the held-back order's retry time can wake it.
    let config = shell::Config {
        policy: domain::Config {
            checkpoint_interval_ms: SHORT_CHECKPOINT_MS,
            ..policy()
        },
        pass_every: Duration::from_secs(3_600),
        ..shell::Config::new(CLUSTER)
    };
    let stack = Stack::start_configured(true, config).await;
    let f = fill(&stack).await;
    let log = stack.log().await;
    let starts: Vec<i64> = f.short.iter().map(|j| started(&log, j).unwrap()).collect();
    let (first, last) = (*starts.iter().min().unwrap(), *starts.iter().max().unwrap());
    assert!(last - first < 1_500, "the short jobs started together");
    // Submit when every short job is 2.6 s or more past its last checkpoint (over the 2 s
    // limit) and at least 1.4 s before its next.
    let phase = |t: i64| (t - last).rem_euclid(SHORT_CHECKPOINT_MS);
    let now = now_ms();
    let wait = (2_600 - phase(now)).rem_euclid(SHORT_CHECKPOINT_MS);
    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    let submitted_ms = now_ms();
    // Not a debug job (those take their victims at once): 1 GPU for an hour.
    let waiter = stack.submit("w", "b", 1, 3_600).await;
    let log = stack
        .wait_for(
            Duration::from_millis(SHORT_CHECKPOINT_MS as u64 + 4_000),
            "an order for the waiter",
            |log| !orders(log).is_empty(),
        )
        .await;
    let orders = orders(&log);
    assert_eq!(orders.len(), 1, "{}", render(&log));
    let (victim, (order_seq, _, order)) = orders.iter().next().unwrap();
    assert_eq!(order.for_job_id, waiter);
    assert!(f.short.contains(victim), "{victim}");
    let ordered_ms = log
        .iter()
        .find(|(s, _, _)| s == order_seq)
        .map(|(_, _, e)| e.at_ms)
        .unwrap();
    let victim_start = started(&log, victim).unwrap();
    let since_checkpoint = (ordered_ms - victim_start).rem_euclid(SHORT_CHECKPOINT_MS);
    assert!(
        ordered_ms - submitted_ms >= 1_000,
        "held back until a checkpoint: ordered {} ms after the submission",
        ordered_ms - submitted_ms
    );
    assert!(
        since_checkpoint <= 1_000,
        "ordered {since_checkpoint} ms after the victim's checkpoint:\n{}",
        render(&log)
    );
    println!(
        "ordered {} ms after the submission, {since_checkpoint} ms after the victim's checkpoint",
        ordered_ms - submitted_ms
    );
    let audit = stack.stop().await;
    assert!(audit.orders >= 1, "the order re-derives from its basis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_node_drains_as_minimum_runtimes_end_and_is_reported_once() {
    let stack = Stack::start(true).await;
    let f = fill(&stack).await;
    let log = stack.log().await;
    let (_, long_node) = placed_seq(&log, &f.long).unwrap();
    let (_, node) = placed_seq(&log, &f.short[0]).unwrap();
    assert_ne!(long_node, node, "the long job has a node to itself");
    let cordon_seq = admin::append(
        &stack.js,
        subjects::node(CLUSTER, &node),
        &pb::Event {
            at_ms: now_ms(),
            body: Some(Body::NodeCordoned(pb::NodeCordoned {
                cluster: CLUSTER.into(),
                node: node.clone(),
                reason: "repair".into(),
            })),
        },
        &Envelope {
            message_id: "cordon:test:1".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let drained = |log: &[(u64, String, pb::Event)]| {
        log.iter()
            .filter(|(_, _, e)| matches!(&e.body, Some(Body::NodeDrained(d)) if d.node == node))
            .map(|(s, id, _)| (*s, id.clone()))
            .collect::<Vec<_>>()
    };
    let log = stack
        .wait_for(Duration::from_secs(5), "the node drains", |log| {
            !drained(log).is_empty()
        })
        .await;
    let orders = orders(&log);
    assert_eq!(orders.len(), 8, "{}", render(&log));
    for (victim, (_, _, order)) in &orders {
        assert!(f.short.contains(victim));
        assert!(order.for_job_id.is_empty(), "a drain order names no waiter");
    }
    let (drained_seq, drained_id) = drained(&log)[0].clone();
    assert_eq!(drained_id, format!("drained:{node}:{cordon_seq}"));
    for job in &f.short {
        let ended = log.iter().find_map(|(s, _, e)| match &e.body {
            Some(Body::JobPreempted(p)) if p.job_id == *job => Some(*s),
            _ => None,
        });
        assert!(ended.unwrap() < drained_seq, "drained only when empty");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = stack.log().await;
    assert_eq!(drained(&log).len(), 1, "reported once per cordon");
    assert!(!self::orders(&log).contains_key(&f.long));
    // The requeued jobs wait: the cordoned node takes nothing new.
    for job in &f.short {
        assert_eq!(
            log.iter()
                .filter(|(_, _, e)| matches!(&e.body, Some(Body::JobPlaced(p)) if p.job_id == *job))
                .count(),
            1
        );
    }
    let audit = stack.stop().await;
    assert!(audit.orders >= 1, "the drain orders re-derive");
}

/// Starts the preemption service on `stack`'s server (folding only, never serving) and returns
/// where it resumed from and its fold.
async fn fold_once(stack: &Stack, checkpoint_dir: Option<PathBuf>) -> (u64, shell::ShellFold) {
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = shell::Config {
        checkpoint_dir,
        ..shell::Config::new(CLUSTER)
    };
    let service = shell::Service::start(client, config, Arc::new(SystemClock))
        .await
        .unwrap();
    // Dropping the service releases the checkpoint store for the next start.
    (service.resumed_from(), service.fold().clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_from_the_checkpoint_and_a_deleted_one_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("preemption-pre");
    let mut stack = Stack::start_with(false, Some(checkpoint.clone())).await;
    fill(&stack).await;
    // An order outstanding past its grace: the fold carries orders, kills and requeues.
    let debug = stack.submit("debug", "b", 1, 600).await;
    stack
        .wait_for(
            GRACE + Duration::from_secs(5),
            "the debug job starts",
            |log| started(log, &debug).is_some(),
        )
        .await;
    // Stop every writer (the preemption service checkpoints at shutdown), keep the server.
    for s in std::mem::take(&mut stack.services) {
        s.stop().await;
    }
    let log_end = stack.log().await.last().unwrap().0;

    let (_, scratch) = fold_once(&stack, None).await;
    assert_eq!(scratch.last_applied(), log_end);
    assert!(scratch.last_cycle() > 0, "the fold holds a preemption pass");

    let (resumed_from, fold) = fold_once(&stack, Some(checkpoint.clone())).await;
    assert!(resumed_from > 0, "resumed from the checkpoint");
    assert!(resumed_from <= log_end);
    assert_eq!(fold, scratch, "resumed fold equals the fold from scratch");

    // The start checkpointed after catch-up: the next one resumes at the log's end.
    let (resumed_from, fold) = fold_once(&stack, Some(checkpoint.clone())).await;
    assert_eq!(resumed_from, log_end);
    assert_eq!(fold, scratch);
    // Everything it holds came from the checkpoint, the live jobs' trace contexts too (the
    // parents of the orders it would publish about them).
    let debug_trace = fold
        .job_trace(&debug)
        .expect("the debug job's trace context");
    assert_eq!(Some(debug_trace), scratch.job_trace(&debug));

    std::fs::remove_dir_all(&checkpoint).unwrap();
    let (resumed_from, fold) = fold_once(&stack, Some(checkpoint.clone())).await;
    assert_eq!(
        resumed_from, 0,
        "a deleted checkpoint is rebuilt from sequence 1"
    );
    assert_eq!(fold, scratch);
    stack.stop().await;
}

/// `a` fills the cluster with two 8-GPU jobs protected for 10 minutes; returns them once both
/// have started.
async fn fill_protected(stack: &Stack) -> Vec<String> {
    let mut jobs = Vec::new();
    for i in 0..2 {
        jobs.push(stack.submit(&format!("a-{i}"), "a", 8, 600).await);
    }
    stack
        .wait_for(Duration::from_secs(10), "a's jobs started", |log| {
            jobs.iter().all(|j| started(log, j).is_some())
        })
        .await;
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_clock_stepped_an_hour_ahead_cuts_no_minimum_runtime() {
    let clock = ManualClock::new(now_ms());
    let config = shell::Config {
        policy: policy(),
        ..shell::Config::new(CLUSTER)
    };
    let stack = Stack::start_clocked(true, config, Arc::new(clock.clone())).await;
    let jobs = fill_protected(&stack).await;
    // The preemption host's clock is set an hour (and 10 s) ahead; no time passes for it.
    // Read as it is, every protection would be over, with 10 s of work since the victims'
    // second checkpoint to lose (no hold-back for lost work).
    clock.step(3_610_000);
    let waiter = stack.submit("b-wait", "b", 8, 600).await;
    // Its submission and placement attempts are live entries: a pass runs at once, and the
    // timer's every 5 s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let log = stack.log().await;
    assert!(
        orders(&log).is_empty(),
        "ordered off inside a minimum runtime:\n{}",
        render(&log)
    );
    assert!(started(&log, &waiter).is_none());
    // Half an hour passes on the service's clock, its monotonic reading too, but not on the
    // server's: the service reads the server's time again (two minutes after the last read,
    // by its monotonic clock) before it passes, and the protections stand. Until 2026-12-04
    // the log's time was carried forward by the monotonic clock alone, so a server clock
    // stepped ahead for a moment and set right kept "now" ahead as long as the process lived.
    clock.advance(1_810_000);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let log = stack.log().await;
    assert!(
        orders(&log).is_empty(),
        "ordered off by a clock the server's time does not bear out:\n{}",
        render(&log)
    );
    assert!(started(&log, &jobs[0]).is_some());
    stack.stop().await;
}

/// Restarted on a host clock an hour ahead, with a blocked waiter and protected jobs already in
/// the log, the service's first pass (before any entry arrives live) still decides at the log's
/// time: the server's clock, read once caught up (or, failing that, the newest entry caught up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_a_host_clock_an_hour_ahead_cuts_no_minimum_runtime() {
    let config = shell::Config {
        policy: policy(),
        ..shell::Config::new(CLUSTER)
    };
    let mut stack = Stack::start_configured(true, config.clone()).await;
    fill_protected(&stack).await;
    let waiter = stack.submit("b-wait", "b", 8, 600).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The preemption service (third of the stack's) stops, and comes back on a host clock an
    // hour and 10 s ahead; nothing is written meanwhile.
    stack.services.remove(2).stop().await;
    let ahead = ManualClock::new(now_ms());
    ahead.step(3_610_000);
    stack
        .services
        .push(serve_preemption(&stack.server.url(), config, Arc::new(ahead)).await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = stack.log().await;
    assert!(
        orders(&log).is_empty(),
        "ordered off inside a minimum runtime for {waiter}:\n{}",
        render(&log)
    );
    stack.stop().await;
}
