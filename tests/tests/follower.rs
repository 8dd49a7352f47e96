//! The log follower against a real nats-server, where its consumer goes: the idle check must
//! come due although services call `Follower::next` inside a `select!` that drops each call;
//! a consumer lost (deleted, or with the server restarted under a reconnecting client) is
//! replaced from where the follower left off, never re-reading the log; a stream deleted and
//! made again under it stops it and the services that fold it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use fairshare_e2e::{CLUSTER, Stack};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::log::{FOLLOW_IDLE_CHECK, Follower};

#[tokio::test]
async fn the_idle_check_comes_due_even_when_every_call_is_dropped() {
    let stack = Stack::start().await.unwrap();
    // A filter nothing matches: the follower delivers nothing while the log moves on.
    let mut follower = Follower::start(&stack.js, 1, vec![subjects::usage(CLUSTER)])
        .await
        .unwrap();
    let until = tokio::time::Instant::now() + FOLLOW_IDLE_CHECK + Duration::from_secs(3);
    let mut appended = 0;
    while tokio::time::Instant::now() < until {
        tokio::select! {
            entry = follower.next() => {
                let got = entry.map(|e| e.map(|e| e.sequence));
                panic!("nothing matches the filter, got {got:?}");
            }
            // Like a service's timer: fires long before the idle check would.
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                appended += 1;
                stack
                    .append(
                        subjects::job_event(CLUSTER, "j", "job_started"),
                        Body::JobStarted(pb::JobStarted { job_id: "j".into() }),
                        &format!("started-{appended}"),
                    )
                    .await
                    .unwrap();
            }
        }
    }
    assert!(
        follower.idle_checks() >= 1,
        "no idle check in {:?} of dropped calls",
        FOLLOW_IDLE_CHECK + Duration::from_secs(3)
    );
}

/// async-nats re-creates an ordered consumer that has delivered nothing yet from the stream's
/// first entry, not from where the follower asked to start. A follower resumed at the log's
/// end whose consumer is lost must still hand over only what comes after it, in order.
#[tokio::test]
async fn a_lost_consumer_resumed_at_the_end_does_not_hand_over_the_log_again() {
    use futures::StreamExt;
    let stack = Stack::start().await.unwrap();
    let subject = subjects::job_event(CLUSTER, "j", "job_started");
    let mut last = 0;
    let before = 200;
    for i in 0..before {
        last = stack
            .append(
                subject.clone(),
                Body::JobStarted(pb::JobStarted { job_id: "j".into() }),
                &format!("before-{i}"),
            )
            .await
            .unwrap();
    }
    let filter = subjects::cluster_events(CLUSTER);
    let mut follower = Follower::start(&stack.js, last + 1, vec![filter])
        .await
        .unwrap();
    // Its consumer goes (as when the member holding it dies).
    let stream = stack
        .js
        .get_stream(fairshare_events::streams::EVENTS_STREAM)
        .await
        .unwrap();
    let names: Vec<String> = stream.consumer_names().map(|n| n.unwrap()).collect().await;
    assert!(!names.is_empty());
    for name in names {
        stream.delete_consumer(&name).await.unwrap();
    }
    let next = stack
        .append(
            subject,
            Body::JobStarted(pb::JobStarted { job_id: "j".into() }),
            "after",
        )
        .await
        .unwrap();
    let entry = tokio::time::timeout(Duration::from_secs(30), follower.next())
        .await
        .expect("the follower recovers")
        .unwrap()
        .unwrap();
    assert_eq!(
        entry.sequence, next,
        "only what follows the start, not the log again"
    );
    // And it did not read its way back through the log to get there: the first entry of the
    // client's own new consumer (or the first repeat) made it follow anew from where it left
    // off.
    assert!(
        follower.repeats_skipped() <= 1,
        "skipped {} of the {before} entries before its start",
        follower.repeats_skipped()
    );
}

/// Restarts the stack's server and appends a `job_started` of job `j` on `subject` once it
/// answers (the test's own client reconnects too: the append is retried until the stream
/// answers); its sequence.
/// Appends `JobStarted` reports on `subject` (message ids `<prefix>-<n>`) until the log's end
/// is past `past`; returns the end.
async fn append_past(stack: &Stack, subject: &str, past: u64, prefix: &str) -> u64 {
    let mut end = 0;
    let mut n = 0;
    while end <= past {
        let started = Body::JobStarted(pb::JobStarted { job_id: "j".into() });
        end = stack
            .append(subject.to_owned(), started, &format!("{prefix}-{n}"))
            .await
            .unwrap();
        n += 1;
    }
    end
}

/// What `follower` says next, within its idle check and 5 s more.
async fn next_said(
    follower: &mut Follower,
) -> Option<Result<fairshare_runtime::log::LogEntry, fairshare_runtime::log::FollowError>> {
    let within = FOLLOW_IDLE_CHECK + Duration::from_secs(5);
    tokio::time::timeout(within, follower.next())
        .await
        .expect("the follower says what happened")
}

async fn restart_and_append(stack: &mut Stack, subject: &str) -> u64 {
    stack.server.restart().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let started = Body::JobStarted(pb::JobStarted { job_id: "j".into() });
        match stack.append(subject.to_owned(), started, "after").await {
            Ok(sequence) => return sequence,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("append after the restart: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the restarted server takes no append: {e}"),
        }
    }
}

/// The server the follower's client is connected to restarts (as when the member it was
/// given dies and the client reconnects): its consumer is gone with the server's memory. The
/// follower must follow anew once its client is connected again, well before the idle check
/// would notice (a decision service stalled that long after every member loss).
#[tokio::test]
async fn a_follower_whose_client_reconnects_delivers_again_before_the_idle_check() {
    let mut stack = Stack::start().await.unwrap();
    let subject = subjects::job_event(CLUSTER, "j", "job_started");
    let started = || Body::JobStarted(pb::JobStarted { job_id: "j".into() });
    let before = stack
        .append(subject.clone(), started(), "before")
        .await
        .unwrap();
    let filter = subjects::cluster_events(CLUSTER);
    let mut follower = Follower::start(&stack.js, before, vec![filter])
        .await
        .unwrap();
    let first = follower.next().await.unwrap().unwrap();
    assert_eq!(first.sequence, before);

    let after = restart_and_append(&mut stack, &subject).await;
    let appended_at = tokio::time::Instant::now();
    // async-nats's own re-creation of the consumer took about 5 s here (its pulls expire after
    // `FOLLOW_PULL_EXPIRES`); a follow anew on the reconnect takes a few requests.
    let within = Duration::from_secs(2);
    let entry = tokio::time::timeout(within, follower.next())
        .await
        .unwrap_or_else(|_| panic!("nothing delivered {within:?} after the reconnect"))
        .unwrap()
        .unwrap();
    assert_eq!(entry.sequence, after);
    eprintln!("delivered {:?} after the append", appended_at.elapsed());
}

/// The events stream is deleted and made again under a follower (an operator re-creating it,
/// a member's store wiped): the new log's sequences start over. The follower must say so and
/// deliver nothing of the new log (following on from its last sequence would skip the new
/// log's first entries), and a service folding it must stop rather than serve a fold of a log
/// that is gone.
#[tokio::test]
async fn a_stream_made_again_under_a_follower_stops_it_and_the_decision_service() {
    let stack = Stack::start().await.unwrap();
    let subject = subjects::job_event(CLUSTER, "j", "job_started");
    let started = || Body::JobStarted(pb::JobStarted { job_id: "j".into() });
    let mut old_end = 0;
    for i in 0..5 {
        old_end = stack
            .append(subject.clone(), started(), &format!("old-{i}"))
            .await
            .unwrap();
    }
    let old_log = fairshare_runtime::log::log_position(&stack.js)
        .await
        .unwrap();
    let filter = subjects::cluster_events(CLUSTER);
    let mut follower = Follower::start(&stack.js, 1, vec![filter.clone()])
        .await
        .unwrap();
    let mut old = 0;
    follower.catch_up(|_| old += 1).await.unwrap();
    assert!(old >= 5);
    let decision = stack
        .start_decision(fairshare_decision::shell::Config::new(CLUSTER))
        .await
        .unwrap();
    let (_stop, deciding) = fairshare_e2e::spawn_until_stopped(|stopped| decision.serve(stopped));

    stack
        .js
        .delete_stream(fairshare_events::streams::EVENTS_STREAM)
        .await
        .unwrap();
    fairshare_runtime::nats::ensure_streams(&stack.js, 1)
        .await
        .unwrap();
    // The new log, shorter than the old one and then longer: the client's own new consumer
    // delivers its entries past the old log's end, unless the follower stops it.
    append_past(&stack, &subject, old_end + 2, "new").await;
    match next_said(&mut follower).await {
        Some(Err(fairshare_runtime::log::FollowError::StreamReplaced { was_ns, now_ns })) => {
            assert_ne!(was_ns, now_ns);
        }
        other => panic!(
            "expected the stream's replacement, got {:?}",
            other.map(|r| r.map(|e| e.sequence))
        ),
    }
    // It stays said: nothing of the new log comes after it.
    assert!(matches!(
        follower.next().await,
        Some(Err(
            fairshare_runtime::log::FollowError::StreamReplaced { .. }
        ))
    ));
    // A service that resumed against the old log and starts following the new one says so.
    let mut late = Follower::start(&stack.js, old_end + 1, vec![filter])
        .await
        .unwrap();
    assert!(matches!(
        late.expect_log(&old_log),
        Err(fairshare_runtime::log::FollowError::StreamReplaced { .. })
    ));
    let stopped = tokio::time::timeout(FOLLOW_IDLE_CHECK + Duration::from_secs(5), deciding)
        .await
        .expect("the decision service stops")
        .unwrap();
    match stopped {
        Err(e) => assert!(e.to_string().contains("made again"), "{e}"),
        Ok(_) => panic!("the decision service went on serving a log that is gone"),
    }
}

/// The stream's front, the entries a follower delivered among them, is cut away (a purge, as
/// size limits an operator set would) and the follower's client reconnects: it checks that the
/// log is still the one it read (`still_the_same_log`: a log rolled back under it would hold
/// another entry at its last sequence, or end before it, and stop it with `LogRewritten`), and
/// a front cut away is: it reads on.
#[tokio::test]
async fn a_follower_reads_on_after_the_logs_front_is_cut_away_and_its_client_reconnects() {
    let mut stack = Stack::start().await.unwrap();
    let subject = subjects::job_event(CLUSTER, "j", "job_started");
    let started = || Body::JobStarted(pb::JobStarted { job_id: "j".into() });
    let mut last = 0;
    for i in 0..3 {
        last = stack
            .append(subject.clone(), started(), &format!("before-{i}"))
            .await
            .unwrap();
    }
    let filter = subjects::cluster_events(CLUSTER);
    let mut follower = Follower::start(&stack.js, 1, vec![filter]).await.unwrap();
    let mut delivered = 0;
    follower.catch_up(|e| delivered = e.sequence).await.unwrap();
    assert_eq!(delivered, last);

    stack
        .js
        .get_stream(fairshare_events::streams::EVENTS_STREAM)
        .await
        .unwrap()
        .purge()
        .await
        .unwrap();
    let after = restart_and_append(&mut stack, &subject).await;
    assert!(after > last, "a purge keeps the sequence going");
    let entry = next_said(&mut follower)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the follower stopped: {e}"));
    assert_eq!(entry.sequence, after);
}

/// A service resumed from a checkpoint at the log's end, whose log is then rolled back and
/// written anew (a server restored from a backup: the same stream, other entries at the same
/// sequences), is told so as soon as its follower follows anew, before any entry it would
/// deliver: the checkpoint's last entry is looked up by its stored time
/// (`Follower::resuming_after`). Without it the follower delivered the new log's entries past
/// the checkpoint as though they followed it.
#[tokio::test]
async fn a_log_rewritten_under_a_resumed_follower_stops_it_before_a_new_entry() {
    let mut stack = Stack::start().await.unwrap();
    let subject = subjects::job_event(CLUSTER, "j", "job_started");
    let started = || Body::JobStarted(pb::JobStarted { job_id: "j".into() });
    for i in 0..3 {
        stack
            .append(subject.clone(), started(), &format!("kept-{i}"))
            .await
            .unwrap();
    }
    // The backup: the store as it stands now.
    stack.server.kill();
    let backup = tempfile::tempdir().unwrap();
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(status.success(), "cp -a {from:?} {to:?}");
    };
    copy(&stack.server.jetstream_dir(), backup.path());
    let mut last = restart_and_append(&mut stack, &subject).await;
    for i in 0..2 {
        last = stack
            .append(subject.clone(), started(), &format!("lost-{i}"))
            .await
            .unwrap();
    }
    let stored_ms = fairshare_testkit::events::stored_time_ms(&stack.js, last).await;
    // Resumed from a checkpoint at `last`, at the log's end.
    let filter = subjects::cluster_events(CLUSTER);
    let mut follower = Follower::start(&stack.js, last + 1, vec![filter])
        .await
        .unwrap();
    follower.resuming_after(Some(stored_ms));
    // The server comes back from the backup, and the log is written anew past it.
    stack.server.kill();
    let dir = stack.server.jetstream_dir();
    std::fs::remove_dir_all(&dir).unwrap();
    copy(&backup.path().join("jetstream"), &dir);
    restart_and_append(&mut stack, &subject).await;
    append_past(&stack, &subject, last, "rewritten").await;
    let got = next_said(&mut follower).await;
    assert!(
        matches!(
            got,
            Some(Err(
                fairshare_runtime::log::FollowError::LogRewritten { .. }
            ))
        ),
        "{:?}",
        got.map(|r| r.map(|e| e.sequence))
    );
}
