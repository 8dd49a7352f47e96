//! One deciding instance per cluster and role (`fairshare_runtime::lease`), against a real
//! nats-server: a second decision service for a cluster folds the log but decides nothing
//! until the first lets its lease go, and a preemption service orders nothing while another
//! holds its lease; an instance whose lease another one took stops; a lease nobody renews runs
//! out and can be taken; a restart under the same name takes its own lease back at once.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_decision::shell as decision;
use fairshare_e2e::{CLUSTER, Stack, accepted, request, spawn_until_stopped};
use fairshare_events::pb::event::Body;
use fairshare_preemption::shell as preemption;
use fairshare_runtime::clock::SystemClock;
use fairshare_runtime::lease::{Attempt, LEASE_BUCKET, Lease, RenewError, Renewal};
use tokio::time::Instant;

/// A short lease, so that running out takes seconds: the services adopt the bucket's.
const TTL: Duration = Duration::from_secs(3);

async fn lease(js: &jetstream::Context, role: &str, holder: &str) -> Lease {
    Lease::open_with_ttl(js, role, CLUSTER, holder.to_owned(), 1, TTL)
        .await
        .unwrap()
}

/// The job id of each event in the log that `pick` names one for, in log order.
async fn job_ids(stack: &Stack, pick: fn(Body) -> Option<String>) -> Vec<String> {
    stack
        .all_events()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, _, e)| pick(e.body?))
        .collect()
}

/// Job ids placed in the log, in log order (one entry per placement).
async fn placements(stack: &Stack) -> Vec<String> {
    job_ids(stack, |b| match b {
        Body::JobPlaced(p) => Some(p.job_id),
        _ => None,
    })
    .await
}

/// Submits a one-GPU job with key `key` and waits until it is placed; its id.
async fn placed(stack: &Stack, key: &str) -> String {
    let job = accepted(&stack.submit(&request(key)).await.unwrap())
        .unwrap()
        .job_id
        .clone();
    wait_placed(stack, &job).await;
    job
}

async fn wait_placed(stack: &Stack, job_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !placements(stack).await.iter().any(|j| j == job_id) {
        assert!(Instant::now() < deadline, "job {job_id} placed within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_lease_has_one_holder_until_it_is_let_go_taken_back_or_runs_out() {
    let stack = Stack::start().await.unwrap();
    let js = &stack.js;
    let mut a = lease(js, "decision", "a").await;
    let mut b = lease(js, "decision", "b").await;
    assert_eq!(a.ttl(), TTL);
    assert_eq!(a.try_take().await, Attempt::Taken);
    assert!(a.holds(Instant::now()));
    assert_eq!(b.try_take().await, Attempt::HeldBy("a".into()));
    assert!(!b.holds(Instant::now()));
    assert_eq!(a.renew().await, Ok(Renewal::Renewed));
    assert_eq!(b.try_take().await, Attempt::HeldBy("a".into()));
    // Another role's lease of the same cluster is another key.
    let mut other_role = lease(js, "preemption", "b").await;
    assert_eq!(other_role.try_take().await, Attempt::Taken);

    // Let go: the next instance takes it at once, and the old holder finds out at its next
    // renewal.
    a.release().await;
    assert!(!a.holds(Instant::now()));
    assert_eq!(b.try_take().await, Attempt::Taken);
    assert_eq!(
        a.renew().await,
        Err(RenewError::Lost {
            key: format!("decision.{CLUSTER}"),
            holder: "b".into()
        })
    );

    // A restart under the same name (the same checkpoint directory, which sled keeps to one
    // live process) takes it back at once.
    drop(b);
    let mut b_again = lease(js, "decision", "b").await;
    assert_eq!(b_again.try_take().await, Attempt::Taken);

    // Nobody renews: while the holder still counts it as its own nobody else can take it;
    // within the ttl (plus the server's expiry check) after the last write, someone can.
    let mut c = lease(js, "decision", "c").await;
    let written = Instant::now();
    b_again.renew().await.unwrap();
    loop {
        let now = Instant::now();
        let attempt = c.try_take().await;
        if b_again.holds(now) {
            assert_eq!(
                attempt,
                Attempt::HeldBy("b".into()),
                "taken while b held it"
            );
        }
        if attempt == Attempt::Taken {
            assert!(
                written.elapsed() >= TTL * 2 / 3,
                "taken before b's lease ran out"
            );
            break;
        }
        assert!(
            written.elapsed() < TTL * 3,
            "the lease ran out within 3 ttl"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        b_again.renew().await,
        Err(RenewError::Lost {
            key: format!("decision.{CLUSTER}"),
            holder: "c".into()
        })
    );

    // A lease that ran out with nobody taking it (a server away longer than the ttl) is
    // simply taken again at the next renewal.
    let kv = js.get_key_value(LEASE_BUCKET).await.unwrap();
    let deadline = Instant::now() + TTL * 3;
    while kv
        .get(format!("decision.{CLUSTER}"))
        .await
        .unwrap()
        .is_some()
    {
        assert!(Instant::now() < deadline, "the lease ran out within 3 ttl");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!c.holds(Instant::now()));
    // Taken afresh, not renewed: a service's keeper then has its fold catch up, as on any
    // taking (someone may have held it in between).
    assert_eq!(c.renew().await, Ok(Renewal::TakenAgain));
    assert!(c.holds(Instant::now()));
    assert_eq!(b_again.try_take().await, Attempt::HeldBy("c".into()));
}

#[tokio::test]
async fn a_second_decision_service_stands_by_until_the_first_lets_its_lease_go() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();
    drop(lease(&stack.js, "decision", "setup").await); // the bucket, with the short ttl
    let config = decision::Config::new(CLUSTER);

    let first = stack.start_decision(config.clone()).await.unwrap();
    let (stop_first, first) = spawn_until_stopped(|stopped| first.serve(stopped));
    let one = placed(&stack, "lease-1").await;

    let second = stack.start_decision(config).await.unwrap();
    let mut second_cycles = second.explainer();
    let (stop_second, second) = spawn_until_stopped(|stopped| second.serve(stopped));
    let two = placed(&stack, "lease-2").await;
    // Several renewal periods: the standby never ran a cycle.
    tokio::time::sleep(TTL).await;
    assert_eq!(second_cycles.latest().cycle, 0, "the standby decided");

    // The first stops and lets its lease go: the standby takes over and places what comes.
    let _ = stop_first.send(());
    first.await.unwrap().unwrap();
    tokio::time::timeout(TTL, second_cycles.wait_for_cycle(1))
        .await
        .expect("the standby decides within one renewal period of the lease let go")
        .unwrap();
    let three = placed(&stack, "lease-3").await;
    let placed = placements(&stack).await;
    for job in [&one, &two, &three] {
        assert_eq!(placed.iter().filter(|j| j == &job).count(), 1, "{job}");
    }
    let _ = stop_second.send(());
    second.await.unwrap().unwrap();
}

/// A decision service for the test cluster, under the short ttl, serving until aborted (or it
/// stops on its own) once it has run its first cycle.
async fn deciding(
    stack: &Stack,
) -> tokio::task::JoinHandle<Result<decision::LogFold, decision::ServiceError>> {
    drop(lease(&stack.js, "decision", "setup").await);
    let service = stack
        .start_decision(decision::Config::new(CLUSTER))
        .await
        .unwrap();
    let mut cycles = service.explainer();
    let serving = tokio::spawn(service.serve(std::future::pending()));
    cycles.wait_for_cycle(1).await.unwrap();
    serving
}

/// A preemption service for the test cluster, serving until aborted (or it stops on its own).
async fn preempting(
    stack: &Stack,
) -> tokio::task::JoinHandle<Result<preemption::ShellFold, preemption::ServiceError>> {
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let service = preemption::Service::start(
        client,
        preemption::Config::new(CLUSTER),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    tokio::spawn(service.serve(std::future::pending()))
}

/// Takes `role`'s lease of the cluster out from under its holder, as a second instance would
/// once the holder's lease ran out.
async fn take_over(js: &jetstream::Context, role: &str) {
    let kv = js.get_key_value(LEASE_BUCKET).await.unwrap();
    kv.put(format!("{role}.{CLUSTER}"), "intruder".into())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_service_whose_lease_was_taken_stops() {
    let stack = Stack::start().await.unwrap();
    let serving = deciding(&stack).await;
    take_over(&stack.js, "decision").await;
    let stopped = tokio::time::timeout(TTL, serving)
        .await
        .expect("stops within a renewal period")
        .unwrap();
    match stopped {
        Err(decision::ServiceError::LeaseLost(RenewError::Lost { holder, .. })) => {
            assert_eq!(holder, "intruder")
        }
        other => panic!("expected a lost lease, got {:?}", other.map(|_| ())),
    }

    let serving = preempting(&stack).await;
    // Its first renewal period takes the lease; then it is taken away.
    let kv = stack.js.get_key_value(LEASE_BUCKET).await.unwrap();
    let deadline = Instant::now() + TTL;
    while kv
        .get(format!("preemption.{CLUSTER}"))
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the preemption service took its lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    take_over(&stack.js, "preemption").await;
    let stopped = tokio::time::timeout(TTL, serving)
        .await
        .expect("stops within a renewal period")
        .unwrap();
    assert!(
        matches!(
            stopped,
            Err(preemption::ServiceError::LeaseLost(RenewError::Lost { .. }))
        ),
        "expected a lost lease"
    );
}

#[tokio::test]
async fn a_decision_service_restarted_on_its_checkpoint_after_a_crash_decides_at_once() {
    let stack = Stack::start().await.unwrap();
    drop(lease(&stack.js, "decision", "setup").await);
    let dir = tempfile::tempdir().unwrap();
    let config = decision::Config {
        checkpoint_dir: Some(dir.path().to_path_buf()),
        ..decision::Config::new(CLUSTER)
    };
    let crashed = stack.start_decision(config.clone()).await.unwrap();
    let mut cycles = crashed.explainer();
    let serving = tokio::spawn(crashed.serve(std::future::pending()));
    cycles.wait_for_cycle(1).await.unwrap();
    // A crash: no last checkpoint, and the lease is not let go.
    serving.abort();
    let _ = serving.await;
    let kv = stack.js.get_key_value(LEASE_BUCKET).await.unwrap();
    let held = kv.get(format!("decision.{CLUSTER}")).await.unwrap();
    assert!(
        held.is_some(),
        "the crashed instance's lease is still there"
    );

    let restarted = stack.start_decision(config).await.unwrap();
    let mut cycles = restarted.explainer();
    let began = Instant::now();
    let serving = tokio::spawn(restarted.serve(std::future::pending()));
    // Waiting the old lease out would take at least 2/3 of the ttl.
    tokio::time::timeout(TTL / 3, cycles.wait_for_cycle(1))
        .await
        .expect("the restart took its own lease back at once")
        .unwrap();
    assert!(began.elapsed() < TTL / 3);
    serving.abort();
}

/// The preemption orders in the log, by victim.
async fn orders(stack: &Stack) -> Vec<String> {
    job_ids(stack, |b| match b {
        Body::PreemptionOrdered(o) => Some(o.job_id),
        _ => None,
    })
    .await
}

#[tokio::test]
async fn a_preemption_service_orders_nothing_while_another_holds_its_lease() {
    use fairshare_events::{pb, subjects};
    use fairshare_testkit::events::{placed_on, shaped_submitted};
    let stack = Stack::start().await.unwrap();
    // Unallocated work fills the 4 x 8 GPUs; an allocated 8-GPU job waits: any preemption
    // pass orders one of the unallocated jobs off for it.
    for n in 0..4 {
        let job = format!("u{n}");
        for (kind, body) in [
            (
                "job_submitted",
                shaped_submitted(CLUSTER, "research/nlp", &job, 0, 8, 0),
            ),
            ("job_placed", placed_on(&job, &format!("gpu00{n}"), 8)),
            (
                "job_started",
                Body::JobStarted(pb::JobStarted {
                    job_id: job.clone(),
                }),
            ),
        ] {
            let subject = subjects::job_event(CLUSTER, &job, kind);
            stack
                .append(subject, body, &format!("{kind}:{job}"))
                .await
                .unwrap();
        }
    }
    stack
        .append(
            subjects::job_event(CLUSTER, "w", "job_submitted"),
            shaped_submitted(CLUSTER, "infra", "w", 0, 8, 600),
            "submit:w",
        )
        .await
        .unwrap();
    // Another instance holds the preemption lease (and keeps renewing it).
    let mut other = lease(&stack.js, "preemption", "other").await;
    assert_eq!(other.try_take().await, Attempt::Taken);

    let serving = preempting(&stack).await;
    let until = Instant::now() + TTL;
    while Instant::now() < until {
        other.renew().await.unwrap();
        tokio::time::sleep(TTL / 6).await;
    }
    assert_eq!(
        orders(&stack).await,
        Vec::<String>::new(),
        "the standby ordered"
    );

    // Let go: the service takes the lease and orders a victim for the waiter.
    other.release().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while orders(&stack).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "an order within 10 s of taking the lease"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serving.abort();
}

#[tokio::test]
async fn a_lease_bucket_deleted_under_a_running_service_is_made_again() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();
    let serving = deciding(&stack).await;
    let holder = fairshare_runtime::lease::holders(&stack.js)
        .await
        .unwrap()
        .unwrap()[0]
        .holder
        .clone();

    stack.js.delete_key_value(LEASE_BUCKET).await.unwrap();
    // A few renewal periods later the service has made the bucket again and holds its lease.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let held = fairshare_runtime::lease::holders(&stack.js)
            .await
            .unwrap()
            .unwrap_or_default();
        if held.iter().any(|h| h.holder == holder) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bucket was made again within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!serving.is_finished());
    placed(&stack, "after-delete").await;
    serving.abort();
}

#[tokio::test]
async fn a_holder_whose_bucket_is_deleted_stops_counting_its_lease_at_once() {
    let stack = Stack::start().await.unwrap();
    let mut holder = lease(&stack.js, "decision", "h").await;
    assert_eq!(holder.try_take().await, Attempt::Taken);
    stack.js.delete_key_value(LEASE_BUCKET).await.unwrap();
    // Its last write was just now, but the lease went with the bucket: had it counted on
    // until its margin ran out, a standby making the bucket again could take the key while
    // it still decided.
    assert!(matches!(
        holder.renew().await,
        Err(RenewError::Unavailable { .. })
    ));
    assert!(!holder.holds(Instant::now()));
    assert!(!holder.taken());
}

#[tokio::test]
async fn a_keeper_reports_the_taking_with_the_logs_end_and_lets_go_on_release() {
    use fairshare_runtime::lease::Keeper;
    let stack = Stack::start().await.unwrap();
    let end = stack.event_count().await.unwrap();
    assert!(end > 0);
    let mut keeper = Keeper::spawn(lease(&stack.js, "decision", "k").await);
    let view = tokio::time::timeout(TTL, keeper.changed()).await.unwrap();
    assert_eq!(view.taken, 1);
    // What the service's first decision waits for its fold to reach.
    assert_eq!(view.log_end, end);
    assert!(view.lost.is_none());
    assert!(keeper.holds(Instant::now()));
    let mut next = lease(&stack.js, "decision", "next").await;
    assert_eq!(next.try_take().await, Attempt::HeldBy("k".into()));
    keeper.release(Duration::from_secs(2)).await;
    assert_eq!(next.try_take().await, Attempt::Taken);
}

/// A keeper dropped without being asked to let go (the service crashed, its serve future
/// aborted) leaves its lease to run out: a successor must not take it while the crashed
/// instance's last writes may still be landing. Many times over, on a runtime with several
/// workers, where the keeper's task could run between its handle's fields being dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_dropped_in_a_crash_leaves_its_lease_held() {
    use fairshare_runtime::lease::Keeper;
    let stack = Stack::start().await.unwrap();
    for round in 0..20 {
        let name = format!("crashed-{round}");
        let mut keeper = Keeper::spawn(lease(&stack.js, "decision", &name).await);
        let view = tokio::time::timeout(TTL, keeper.changed()).await.unwrap();
        assert_eq!(view.taken, 1, "round {round}");
        drop(keeper);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut next = lease(&stack.js, "decision", "next").await;
        assert_eq!(
            next.try_take().await,
            Attempt::HeldBy(name.clone()),
            "round {round}: the lease was let go"
        );
        // For the next round: clear the key as an operator would.
        let kv = stack.js.get_key_value(LEASE_BUCKET).await.unwrap();
        kv.purge(format!("decision.{CLUSTER}")).await.unwrap();
    }
}

/// A lease that vanished under its keeper (purged by an operator, or run out unseen) and is
/// taken afresh counts as a new taking: someone may have held it in between, so the service
/// must catch its fold up again before deciding.
#[tokio::test]
async fn a_lease_taken_afresh_under_its_keeper_counts_as_a_new_taking() {
    use fairshare_runtime::lease::Keeper;
    let stack = Stack::start().await.unwrap();
    let mut keeper = Keeper::spawn(lease(&stack.js, "decision", "k").await);
    let first = tokio::time::timeout(TTL, keeper.changed()).await.unwrap();
    assert_eq!(first.taken, 1);
    let kv = stack.js.get_key_value(LEASE_BUCKET).await.unwrap();
    kv.purge(format!("decision.{CLUSTER}")).await.unwrap();
    let deadline = Instant::now() + TTL;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let view = tokio::time::timeout(left, keeper.changed())
            .await
            .expect("taken again within the ttl");
        assert!(view.lost.is_none());
        if view.taken == 2 {
            assert!(keeper.holds(Instant::now()));
            break;
        }
    }
}
