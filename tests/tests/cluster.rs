//! A 3-member JetStream cluster loses a member under load (SPEC section 6, reliability): every
//! service and the launchers' runner carry on, every submission a launcher got accepted is in
//! the log exactly once, every job is placed once and runs to its end, usage snapshots go on,
//! and the decision and preemption services end having folded the whole log, each fold equal
//! to one built from scratch, with every placement and order re-derived by the audits.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use fairshare_accounting::shell as accounting;
use fairshare_decision::shell as decision;
use fairshare_e2e::{BUDGET, CLUSTER, INVENTORY, request, spawn_until_stopped};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::subjects;
use fairshare_launcher::runner::{self, RunnerConfig};
use fairshare_launcher::submit::{Retry, submit};
use fairshare_model::files;
use fairshare_preemption::shell as preemption;
use fairshare_runtime::clock::SystemClock;
use fairshare_runtime::log::{FOLLOW_IDLE_CHECK, Follower};
use fairshare_runtime::nats::{Identity, connect, ensure_streams};
use fairshare_testkit::NatsCluster;

/// Submissions in the run; the member dies after a third of them.
const SUBMISSIONS: usize = 300;
/// Launchers submitting at once.
const LAUNCHERS: usize = 6;

/// Retries `attempt` until it succeeds or `within` has passed (a new cluster elects its
/// JetStream leader after the members meet).
async fn retry<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    within: Duration,
    mut attempt: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying: {e}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("still failing after {within:?}: {e}"),
        }
    }
}

/// The name of the member leading the events stream, asked of whichever member answers.
async fn events_leader(js: &jetstream::Context) -> String {
    retry(Duration::from_secs(30), || async {
        let mut stream = js
            .get_stream(EVENTS_STREAM)
            .await
            .map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        info.cluster
            .as_ref()
            .and_then(|c| c.leader.clone())
            .ok_or_else(|| "no leader yet".to_owned())
    })
    .await
}

/// The events stream's last sequence, asked of whichever member answers.
async fn last_sequence(js: &jetstream::Context) -> u64 {
    retry(Duration::from_secs(10), || async {
        let mut stream = js
            .get_stream(EVENTS_STREAM)
            .await
            .map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        Ok::<u64, String>(info.state.last_sequence)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_dies_under_load_and_no_accepted_submission_is_lost() {
    let _telemetry = fairshare_runtime::telemetry::init("cluster-test");
    let mut cluster = NatsCluster::start(3).unwrap();
    let urls = cluster.urls();
    let operator = connect(&urls, "operator", Identity::None).await.unwrap();
    let js = jetstream::new(operator.clone());
    retry(Duration::from_secs(30), || ensure_streams(&js, 3)).await;
    let budget = files::parse_budget(BUDGET).unwrap();
    fairshare_runtime::admin::set_budget(&js, 1, budget)
        .await
        .unwrap();
    let nodes = files::parse_inventory(INVENTORY).unwrap().registrations();
    fairshare_runtime::admin::register_nodes(&js, 1, nodes)
        .await
        .unwrap();

    // The services and the runner of the launchers' jobs all start on the member that leads
    // the events stream, the one that dies: their connections, their consumers and that
    // stream's leader go with it (the hardest loss: the log must elect a new leader while the
    // services reconnect). They were given that member alone and must find the others from it.
    let leader = events_leader(&js).await;
    let doomed_member = cluster
        .servers
        .iter()
        .position(|s| s.name() == leader)
        .unwrap_or_else(|| panic!("no member named {leader}"));
    eprintln!("the events stream's leader, to be killed: {leader}");
    let doomed_url = cluster.servers[doomed_member].url();
    let doomed = cluster.servers[doomed_member].port();
    let service_client = connect(&doomed_url, "submission", Identity::None)
        .await
        .unwrap();
    let service = fairshare_submission::shell::Service::start(
        service_client.clone(),
        fairshare_submission::Config {
            stream_replicas: 3,
            ..Default::default()
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let (stop, serving) = spawn_until_stopped(|stopped| service.serve(stopped));
    let decision_client = connect(&doomed_url, "decision", Identity::None)
        .await
        .unwrap();
    let decision = decision::Service::start(
        decision_client.clone(),
        decision::Config {
            stream_replicas: 3,
            ..decision::Config::new(CLUSTER)
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let (stop_decision, deciding) = spawn_until_stopped(|stopped| decision.serve(stopped));
    let runner_client = connect(&doomed_url, "runner", Identity::None)
        .await
        .unwrap();
    let runner_config = RunnerConfig {
        cluster: CLUSTER.into(),
        time_scale: 10,
        default_duration: Duration::from_secs(1),
        honour_preemption: true,
        tick: Duration::from_millis(10),
    };
    let preemption_client = connect(&doomed_url, "preemption", Identity::None)
        .await
        .unwrap();
    let preemption = preemption::Service::start(
        preemption_client.clone(),
        preemption::Config {
            stream_replicas: 3,
            ..preemption::Config::new(CLUSTER)
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let (stop_preemption, preempting) = spawn_until_stopped(|stopped| preemption.serve(stopped));
    let accounting_dir = tempfile::tempdir().unwrap();
    let accounting_client = connect(&doomed_url, "accounting", Identity::None)
        .await
        .unwrap();
    let accounting = accounting::Service::start(
        accounting_client.clone(),
        accounting::Config {
            snapshot_every: Duration::from_millis(500),
            cluster: Some(CLUSTER.to_owned()),
            stream_replicas: 3,
            ..accounting::Config::new(accounting_dir.path().to_path_buf())
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let (stop_accounting, accounting_task) =
        spawn_until_stopped(|stopped| accounting.serve(stopped));
    let (stop_runner, running) = spawn_until_stopped(|stopped| {
        runner::run(runner_client, runner_config, Arc::new(SystemClock), stopped)
    });

    // Several launchers submit at once (to any member), so requests are in flight when
    // member 0 dies.
    let done = Arc::new(AtomicUsize::new(0));
    let mut launchers = Vec::new();
    for l in 0..LAUNCHERS {
        let launcher = connect(&urls, "launcher", Identity::None).await.unwrap();
        let done = Arc::clone(&done);
        launchers.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            for i in (l..SUBMISSIONS).step_by(LAUNCHERS) {
                let key = format!("load-{i}");
                // As a launcher does: the same key again until a final answer comes.
                let reply = submit(&launcher, &request(&key), Retry::default())
                    .await
                    .unwrap();
                match reply.result {
                    Some(pb::submit_reply::Result::Accepted(a)) => accepted.push((key, a.job_id)),
                    other => panic!("{key}: expected acceptance, got {other:?}"),
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            accepted
        }));
    }
    while done.load(Ordering::Relaxed) < SUBMISSIONS / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let member = cluster
        .servers
        .iter_mut()
        .find(|s| s.port() == doomed)
        .unwrap();
    let log_at_kill = last_sequence(&js).await;
    member.kill();
    let killed_at = Instant::now();
    let killed_after = done.load(Ordering::Relaxed);
    let mut accepted: BTreeMap<String, String> = BTreeMap::new();
    for launcher in launchers {
        accepted.extend(launcher.await.unwrap());
    }
    assert!(
        killed_after < SUBMISSIONS,
        "the member died before the load ended"
    );
    for (name, client) in [
        ("submission", &service_client),
        ("decision", &decision_client),
        ("preemption", &preemption_client),
        ("accounting", &accounting_client),
    ] {
        assert_ne!(
            client.server_info().port,
            doomed,
            "{name} moved to a survivor"
        );
    }
    assert!(
        !serving.is_finished(),
        "the submission service stopped: {:?}",
        serving.await
    );
    assert_eq!(accepted.len(), SUBMISSIONS);

    // Every accepted job is in the log once, under the id its launcher was given, and is
    // placed exactly once and finishes (nothing preempts here, so a second placement would
    // be a job placed twice).
    let reader = connect(&urls, "reader", Identity::None).await.unwrap();
    let reader_js = jetstream::new(reader);
    // JetStream itself may take half a minute to serve again after the loss on a loaded
    // 2-core machine (publish acks timing out for 25 s, seen once in six runs): the deadline
    // leaves room for that and for the workload that waited through it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (submitted, placed, finished, snapshots_after_kill) = loop {
        let mut follower = retry(Duration::from_secs(30), || {
            Follower::start(&reader_js, 1, vec![subjects::cluster_events(CLUSTER)])
        })
        .await;
        let mut submitted: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut placed: BTreeMap<String, usize> = BTreeMap::new();
        let mut finished = 0;
        let mut snapshots_after_kill = 0;
        follower
            .catch_up(|entry| match entry.event.map(|e| e.body) {
                Ok(Some(Body::JobSubmitted(s))) => {
                    submitted
                        .entry(s.idempotency_key)
                        .or_default()
                        .push(s.job_id);
                }
                Ok(Some(Body::JobPlaced(p))) => *placed.entry(p.job_id).or_default() += 1,
                Ok(Some(Body::JobFinished(_))) => finished += 1,
                Ok(Some(Body::UsageSnapshot(u))) if u.through_sequence > log_at_kill => {
                    snapshots_after_kill += 1;
                }
                _ => {}
            })
            .await
            .unwrap();
        // The last jobs can finish before the accounting service, reconnecting to the
        // surviving members, has published past the kill: wait for that too.
        let complete = finished >= SUBMISSIONS && snapshots_after_kill > 0;
        if complete || Instant::now() > deadline {
            break (submitted, placed, finished, snapshots_after_kill);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "submitted {}, placed {} ({} more than once), finished {finished}",
        submitted.len(),
        placed.len(),
        placed.values().filter(|&&n| n > 1).count()
    );
    for (key, job_id) in &accepted {
        assert_eq!(
            submitted.get(key),
            Some(&vec![job_id.clone()]),
            "{key} must be logged once, as {job_id}"
        );
        assert_eq!(placed.get(job_id), Some(&1), "{key} ({job_id}) placed once");
    }
    assert_eq!(submitted.len(), SUBMISSIONS, "nothing else was submitted");
    assert_eq!(finished, SUBMISSIONS, "every job ran to its end");
    assert!(
        snapshots_after_kill > 0,
        "the accounting service snapshots usage past the kill"
    );

    // The following services stop cleanly, having folded the whole log: nothing delivered
    // after the kill was skipped, and nothing is missing at the end. A follower whose
    // consumer the client lost without noticing (seen with async-nats 0.51 after a member
    // loss) follows anew once its client has reconnected, or at the latest once it has
    // delivered nothing for `FOLLOW_IDLE_CHECK` (a consumer lost without a reconnect): the
    // check waits that long past the kill, since the workload itself may end sooner (it took under
    // 8 s once the decision service stopped debouncing every change, and the preemption
    // service was stopped still stalled at the kill).
    let recovered_by = killed_at + FOLLOW_IDLE_CHECK + Duration::from_secs(3);
    tokio::time::sleep_until(recovered_by.into()).await;
    let _ = stop_runner.send(());
    let _ = tokio::time::timeout(Duration::from_secs(15), running).await;
    let _ = stop_accounting.send(());
    accounting_task.await.unwrap().unwrap();
    let log_end = last_sequence(&js).await;
    // Delivery lags appends by a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = stop_decision.send(());
    let decision_fold = deciding.await.unwrap().unwrap();
    assert_eq!(
        decision_fold.last_applied(),
        log_end,
        "decision folded the whole log"
    );
    let _ = stop_preemption.send(());
    let preemption_fold = preempting.await.unwrap().unwrap();
    assert_eq!(
        preemption_fold.last_applied(),
        log_end,
        "preemption folded the whole log"
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(15), serving).await;

    // And nothing was skipped on the way: each fold equals one built from scratch over the
    // same log, and every placement and preemption order re-derives from its log prefix.
    let entries = decision::read_log(&js, CLUSTER, Some(log_end))
        .await
        .unwrap();
    let mut decision_scratch = decision::LogFold::new(CLUSTER);
    let mut preemption_scratch = preemption::ShellFold::new(CLUSTER);
    for entry in entries.iter().filter(|e| e.sequence <= log_end) {
        decision_scratch.apply(entry);
        preemption_scratch.apply(entry);
    }
    assert!(
        decision_scratch == decision_fold,
        "the decision service's fold differs from a fold of the log from scratch"
    );
    assert!(
        preemption_scratch == preemption_fold,
        "the preemption service's fold differs from a fold of the log from scratch"
    );
    let placements = decision::audit(CLUSTER, &entries);
    assert!(
        placements.is_clean(),
        "{:#?} {:#?}",
        placements.divergences,
        placements.overcommits
    );
    assert!(placements.placements >= SUBMISSIONS, "{placements:?}");
    let orders = preemption::audit(CLUSTER, &entries, &preemption::Config::new(CLUSTER).policy);
    assert!(orders.is_clean(), "{:#?}", orders.divergences);
    let snapshots = accounting::audit::audit(CLUSTER, &entries);
    assert!(snapshots.is_clean(), "{:#?}", snapshots.divergences);
    assert!(snapshots.snapshots > 0);
}
