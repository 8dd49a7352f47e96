//! Services on a host whose clock is wrong, against a real nats-server: the decision service
//! on a clock a day behind decides at the log's time, never before it (a cycle in the past
//! would admit work beside a maintenance window as though the window were further off), and on
//! one an hour ahead within a minute of it; the
//! accounting service on a clock an hour ahead reports and snapshots windows ending at the
//! log's time, not in the future (running jobs would be charged an hour they have not run).
//! (The preemption service on a clock stepped ahead: `services/preemption/tests/e2e.rs`; the
//! submission service on a clock behind: its `shared` tests.)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use fairshare_e2e::{CLUSTER, Stack, accepted, request};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_runtime::clock::{Clock, ManualClock, SystemClock};
use fairshare_runtime::held_clock::HeldClock;

/// Submits a job, then starts the decision service on a host clock `off_ms` off the real one
/// and waits for its placement: the real time just before the submission and once placed, and
/// the placement's decision time and stamp.
async fn placed_on_a_clock_off_by(off_ms: i64) -> (i64, i64, i64, i64) {
    let mut stack = Stack::start().await.unwrap();
    stack
        .start_submission(fairshare_submission::Config::default())
        .await
        .unwrap();
    // Read before the submission, the newest entry when the service starts.
    let before = SystemClock.now_ms();
    let job = accepted(&stack.submit(&request("late")).await.unwrap())
        .unwrap()
        .job_id
        .clone();
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let off = ManualClock::new(SystemClock.now_ms() + off_ms);
    let service = fairshare_decision::shell::Service::start(
        client,
        fairshare_decision::shell::Config::new(CLUSTER),
        Arc::new(off),
    )
    .await
    .unwrap();
    let serving = tokio::spawn(service.serve(std::future::pending::<()>()));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (at_ms, basis) = loop {
        let placed = stack
            .all_events()
            .await
            .unwrap()
            .into_iter()
            .find_map(|(_, _, e)| match e.body {
                Some(Body::JobPlaced(p)) if p.job_id == job => Some((e.at_ms, p.basis)),
                _ => None,
            });
        if let Some(placed) = placed {
            break placed;
        }
        assert!(std::time::Instant::now() < deadline, "{job} never placed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let after = SystemClock.now_ms();
    serving.abort();
    (before, after, basis.unwrap().computed_at_ms, at_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_host_clock_a_day_behind_decides_at_the_logs_time() {
    let (before, _, computed_at, at_ms) = placed_on_a_clock_off_by(-86_400_000).await;
    assert!(
        computed_at >= before && at_ms >= before,
        "decided at {computed_at} (stamped {at_ms}), before the log's time {before}"
    );
}

/// A cycle an hour ahead would charge every running job an hour it has not run when ranking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_host_clock_an_hour_ahead_decides_within_a_minute_of_the_logs_time() {
    let (before, after, computed_at, at_ms) = placed_on_a_clock_off_by(3_600_000).await;
    assert!(
        computed_at >= before && computed_at <= after + 60_000 && at_ms == computed_at,
        "decided at {computed_at} (stamped {at_ms}), the server's time was {before}..{after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accounting_host_clock_an_hour_ahead_ends_its_windows_at_the_logs_time() {
    let mut stack = Stack::start().await.unwrap();
    stack
        .start_submission(fairshare_submission::Config::default())
        .await
        .unwrap();
    let submitted = accepted(&stack.submit(&request("ahead")).await.unwrap())
        .unwrap()
        .stream_sequence;
    let before = SystemClock.now_ms();
    let dir = tempfile::tempdir().unwrap();
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let ahead = ManualClock::new(before + 3_600_000);
    let config = fairshare_accounting::shell::Config {
        snapshot_every: Duration::from_secs(3600),
        ..fairshare_accounting::shell::Config::new(dir.path().to_path_buf())
    };
    let service = fairshare_accounting::shell::Service::start(client, config, Arc::new(ahead))
        .await
        .unwrap();
    let serving = tokio::spawn(service.serve(std::future::pending::<()>()));
    // Asked at once: no entry has arrived live, the service has only the server's time it
    // read at start.
    let query = pb::UsageQuery {
        cluster: CLUSTER.into(),
        path: String::new(),
        publish_snapshot: true,
    };
    let reply = stack
        .client
        .request(subjects::usage_api(CLUSTER), codec::encode(&query))
        .await
        .unwrap();
    let report = match codec::decode_usage_reply(&reply.payload).unwrap().result {
        Some(pb::usage_reply::Result::Report(r)) => r,
        other => panic!("expected a report, got {other:?}"),
    };
    assert!(report.through_sequence >= submitted, "folded at start");
    let after = SystemClock.now_ms();
    serving.abort();
    // Held to at most a minute past the server's time, never an hour ahead; and not before
    // the newest entry.
    assert!(
        report.window_end_ms >= before - 1_000 && report.window_end_ms <= after + 60_000,
        "window ends at {}, the server's time was {before}..{after}",
        report.window_end_ms
    );
    let (_, snapshot) = stack.event_at(report.snapshot_sequence).await.unwrap();
    assert_eq!(
        snapshot.at_ms, report.window_end_ms,
        "the snapshot's window too"
    );
}

/// A service that could not read the server's time when it caught up (here: no events stream
/// yet) holds "now" only from below, so a host clock an hour ahead goes unheld; it reads the
/// server's time again ([`HeldClock::refresh_anchor`], which the services call before they
/// decide and on their timers), but not within 30 s of the failed read, and once it has read
/// it, "now" is held to within a minute of the server's clock; two minutes later it reads it
/// again, and that reading may set the log's time back.
#[tokio::test]
async fn a_failed_read_of_the_servers_time_is_tried_again_after_30_s() {
    let server = fairshare_testkit::NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let host = ManualClock::new(SystemClock.now_ms() + 3_600_000);
    let mut now = HeldClock::new(Arc::new(host.clone()), "nothing");
    now.caught_up_with(&js, false).await;
    assert_eq!(now.now_ms(), host.now_ms(), "nothing to hold it to yet");
    fairshare_runtime::nats::ensure_streams(&js, 1)
        .await
        .unwrap();
    now.refresh_anchor(&js).await;
    assert_eq!(now.now_ms(), host.now_ms(), "not tried again within 30 s");
    host.advance(30_000);
    let before = SystemClock.now_ms();
    now.refresh_anchor(&js).await;
    let after = SystemClock.now_ms();
    let held = now.now_ms();
    // The host's monotonic clock stands still here, so the log's time is the server's reading.
    assert!(
        held >= before + 60_000 - 1_000 && held <= after + 60_000,
        "held to {held}, a minute past the server's time {before}..{after}"
    );
    // From then on the log's time moves with the host's monotonic clock: 30 s on by it (the
    // server's clock having moved only milliseconds), "now" has moved those 30 s, and a later
    // retry sets nothing back.
    host.advance(30_000);
    now.refresh_anchor(&js).await;
    assert_eq!(now.now_ms(), held + 30_000);
    // Two minutes after the read, by the host's monotonic clock, the server's time is read
    // again: it moved only milliseconds, so the log's time is set back to it (a log's time
    // that only rose would keep the two minutes).
    host.advance(90_000);
    let before = SystemClock.now_ms();
    now.refresh_anchor(&js).await;
    let after = SystemClock.now_ms();
    let again = now.now_ms();
    assert!(
        again >= before + 60_000 - 1_000 && again <= after + 60_000,
        "held to {again}, a minute past the server's time {before}..{after}, not {}",
        held + 120_000
    );
}
