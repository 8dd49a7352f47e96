//! A 3-member JetStream cluster loses a member under load (SPEC section 6, reliability): the
//! submission service carries on, and every submission a launcher got accepted is in the log
//! exactly once.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use fairshare_e2e::{BUDGET, INVENTORY, request};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_launcher::submit::{Retry, submit};
use fairshare_model::files;
use fairshare_runtime::clock::SystemClock;
use fairshare_runtime::log::Follower;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_dies_under_load_and_no_accepted_submission_is_lost() {
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

    let service_client = connect(&urls, "submission", Identity::None).await.unwrap();
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
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(service.serve(async {
        let _ = stopped.await;
    }));

    // The member the service talks to is the one that dies: its connection, its consumers
    // and perhaps the streams' leader go with it. Several launchers submit at once, so
    // requests are in flight when it does.
    let doomed = service_client.server_info().port;
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
    member.kill();
    let killed_after = done.load(Ordering::Relaxed);
    let mut accepted: BTreeMap<String, String> = BTreeMap::new();
    for launcher in launchers {
        accepted.extend(launcher.await.unwrap());
    }
    assert!(
        killed_after < SUBMISSIONS,
        "the member died before the load ended"
    );
    assert_ne!(
        service_client.server_info().port,
        doomed,
        "the service moved to a surviving member"
    );
    assert!(
        !serving.is_finished(),
        "the submission service stopped: {:?}",
        serving.await
    );
    assert_eq!(accepted.len(), SUBMISSIONS);

    // Every accepted job is in the log once, under the id its launcher was given.
    let reader = connect(&urls, "reader", Identity::None).await.unwrap();
    let reader_js = jetstream::new(reader);
    let mut follower = retry(Duration::from_secs(30), || {
        Follower::start(&reader_js, 1, vec![subjects::job_kind("job_submitted")])
    })
    .await;
    let mut logged: BTreeMap<String, Vec<String>> = BTreeMap::new();
    follower
        .catch_up(|entry| {
            if let Ok(pb::Event {
                body: Some(Body::JobSubmitted(s)),
                ..
            }) = entry.event
            {
                logged.entry(s.idempotency_key).or_default().push(s.job_id);
            }
        })
        .await
        .unwrap();
    for (key, job_id) in &accepted {
        assert_eq!(
            logged.get(key),
            Some(&vec![job_id.clone()]),
            "{key} must be logged once, as {job_id}"
        );
    }
    assert_eq!(logged.len(), SUBMISSIONS, "nothing else was logged");

    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(15), serving).await;
}
