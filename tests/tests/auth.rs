//! Per-service NATS identities against a real nats-server configured with the block
//! `fairshare auth init` writes: each role can do its own work, and a launcher cannot publish
//! a decision or change the budget (SPEC section 6, reliability).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_e2e::{
    BUDGET, CLUSTER, INVENTORY, accepted, python_submit, request, spawn_until_stopped,
};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::{EVENTS_STREAM, INTAKE_CONSUMER, INTAKE_STREAM};
use fairshare_events::{DecodeError, codec, subjects};
use fairshare_model::files;
use fairshare_runtime::auth::{self, Role};
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_runtime::log::Follower;
use fairshare_runtime::nats::{Identity, connect_as};
use fairshare_testkit::NatsServer;

/// A connection as `role`, with a shorter JetStream timeout: a refused publish is never
/// acknowledged, and the test need not wait the default 5 s to see it (2 s still leaves an
/// allowed publish on a busy machine plenty of time).
async fn as_role(
    server: &NatsServer,
    dir: &Path,
    role: Role,
) -> (async_nats::Client, jetstream::Context) {
    let seed = auth::seed_path(dir, role);
    let client = connect_as(&server.url(), role.name(), Identity::Nkey(&seed), role)
        .await
        .unwrap();
    let mut js = jetstream::new(client.clone());
    js.set_timeout(Duration::from_secs(2));
    (client, js)
}

fn event(body: Body) -> bytes::Bytes {
    codec::encode(&pb::Event {
        at_ms: 1,
        body: Some(body),
    })
}

async fn events_info(js: &jetstream::Context) -> jetstream::stream::Info {
    let mut stream = js.get_stream(EVENTS_STREAM).await.unwrap();
    stream.info().await.unwrap().clone()
}

async fn last_sequence(js: &jetstream::Context) -> u64 {
    events_info(js).await.state.last_sequence
}

/// The submission service's durable intake consumer, as the operator sees it.
async fn intake_consumer_info(js: &jetstream::Context) -> jetstream::consumer::Info {
    let stream = js.get_stream(INTAKE_STREAM).await.unwrap();
    let mut consumer: jetstream::consumer::PullConsumer =
        stream.get_consumer(INTAKE_CONSUMER).await.unwrap();
    consumer.info().await.unwrap().clone()
}

/// Publishes on the events stream and reports whether JetStream stored it.
async fn stored(js: &jetstream::Context, subject: String, payload: bytes::Bytes) -> bool {
    match js.publish(subject, payload).await {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    }
}

/// A server configured with `fairshare auth init`'s identities (seeds under the test's
/// directory), with the streams, the budget and the nodes the operator put in place.
struct Secured {
    server: NatsServer,
    /// The operator's connection (kept open) and its JetStream context.
    _op: async_nats::Client,
    op_js: jetstream::Context,
}

async fn secured(dir: &Path) -> Secured {
    secured_with(dir, |block| block).await
}

/// `auth init`'s server config `block` with `subjects` taken out of what `role` may publish.
///
/// # Panics
/// If the role's block does not list one of them (the test would prove nothing).
fn denied(block: &str, role: Role, subjects: &[String]) -> String {
    let mut out = String::new();
    let mut theirs = false;
    let mut taken = 0;
    for line in block.lines() {
        if line.trim_start().starts_with('#') {
            theirs = line.trim() == format!("# {}", role.name());
        }
        let mut line = line.to_owned();
        if theirs && line.contains("publish:") {
            for subject in subjects {
                // Listed before another, or last.
                let listed = [format!("\"{subject}\", "), format!(", \"{subject}\"")];
                if let Some(l) = listed.iter().find(|l| line.contains(l.as_str())) {
                    line = line.replace(l.as_str(), "");
                    taken += 1;
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    assert_eq!(
        taken,
        subjects.len(),
        "{subjects:?} in {}'s block",
        role.name()
    );
    out
}

/// [`secured`], with the server config `auth init` wrote edited by `edit` first.
async fn secured_with(dir: &Path, edit: impl FnOnce(String) -> String) -> Secured {
    let block = edit(auth::init(dir).unwrap());
    let server = NatsServer::start_with_config(&block).unwrap();
    let (op, op_js) = as_role(&server, dir, Role::Operator).await;
    fairshare_runtime::nats::ensure_streams(&op_js, 1)
        .await
        .unwrap();
    fairshare_runtime::admin::set_budget(&op_js, 1, files::parse_budget(BUDGET).unwrap())
        .await
        .unwrap();
    let nodes = files::parse_inventory(INVENTORY).unwrap().registrations();
    fairshare_runtime::admin::register_nodes(&op_js, 1, nodes)
        .await
        .unwrap();
    Secured {
        server,
        _op: op,
        op_js,
    }
}

/// The submission service serving as its own role until the stop is sent.
async fn serve_submission(
    server: &NatsServer,
    dir: &Path,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), fairshare_submission::shell::ServiceError>>,
) {
    let (submission, _) = as_role(server, dir, Role::Submission).await;
    let service = fairshare_submission::shell::Service::start(
        submission,
        fairshare_submission::Config::default(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    spawn_until_stopped(|stopped| service.serve(stopped))
}

#[tokio::test]
async fn each_role_does_its_own_work_and_a_launcher_cannot_decide_or_set_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let Secured { server, _op, op_js } = secured(dir.path()).await;
    let budget = files::parse_budget(BUDGET).unwrap();

    // Nobody gets in without a role's seed.
    assert!(
        async_nats::connect(server.url()).await.is_err(),
        "an anonymous connection must be refused"
    );

    // The submission service runs as its own role and answers a launcher's request.
    let (stop, serving) = serve_submission(&server, dir.path()).await;
    let (launcher, launcher_js) = as_role(&server, dir.path(), Role::Launcher).await;
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        launcher.request(subjects::SUBMIT_API, codec::encode(&request("auth-1"))),
    )
    .await
    .unwrap()
    .unwrap();
    let job_id = accepted(&codec::decode_submit_reply(&reply.payload).unwrap())
        .unwrap()
        .job_id
        .clone();

    // A launcher may read every inbox of its own kind, but not the services': it sees none of
    // the submission service's intake deliveries (whose reply subjects name its consumer, which
    // a launcher could then re-create with another filter, or pull from).
    let (snoop, _) = as_role(&server, dir.path(), Role::Launcher).await;
    let mut snooped = snoop.subscribe("_INBOX.>").await.unwrap();
    snoop.flush().await.unwrap();

    // A launcher may also queue a submission in the durable intake: the submission service,
    // as its own role, takes it into the log and acknowledges it, so the next one is not held
    // up behind it until the acknowledgement times out (30 s).
    let before_intake = last_sequence(&op_js).await;
    launcher_js
        .publish(
            subjects::intake(CLUSTER),
            codec::encode(&request("auth-intake-1")),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let intake_done = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let info = intake_consumer_info(&op_js).await;
            if last_sequence(&op_js).await > before_intake
                && info.delivered.stream_sequence >= 1
                && info.num_ack_pending == 0
            {
                return info;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let info = intake_done.expect("the intake submission is in the log and acknowledged");
    assert_eq!(info.num_redelivered, 0, "taken once, not redelivered");
    let mut deliveries_seen = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(
        Duration::from_millis(300),
        futures::StreamExt::next(&mut snooped),
    )
    .await
    {
        if m.reply
            .as_ref()
            .is_some_and(|r| r.as_str().starts_with("$JS.ACK."))
        {
            deliveries_seen.push(m.subject.to_string());
        }
    }
    assert!(
        deliveries_seen.is_empty(),
        "a launcher saw a service's consumer deliveries: {deliveries_seen:?}"
    );
    // One the checks refuse is logged as rejected, under the submission service's role, and
    // acknowledged too (a refused append would be retried for good, holding up the intake).
    let before_rejection = last_sequence(&op_js).await;
    let mut refused = request("auth-intake-refused");
    refused.spec.as_mut().unwrap().gpus = 0;
    launcher_js
        .publish(subjects::intake(CLUSTER), codec::encode(&refused))
        .await
        .unwrap()
        .await
        .unwrap();
    let rejected_subject = subjects::rejected(CLUSTER);
    let logged = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let info = intake_consumer_info(&op_js).await;
            let last = last_sequence(&op_js).await;
            if last > before_rejection && info.num_ack_pending == 0 {
                let entry = op_js
                    .get_stream(EVENTS_STREAM)
                    .await
                    .unwrap()
                    .get_raw_message(last)
                    .await
                    .unwrap();
                return entry.subject.to_string();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the refused intake submission is logged as rejected and acknowledged");
    assert_eq!(logged, rejected_subject);

    // A request naming a subject that is no inbox as its reply (a JetStream API subject, a
    // log subject) is ignored: the service does not answer there, under its own rights, and
    // the server would refuse it if it tried. Before, the submission service purged the log.
    let before_lure = events_info(&op_js).await.state;
    for lure in [
        format!("$JS.API.STREAM.PURGE.{EVENTS_STREAM}"),
        format!("$JS.API.STREAM.PURGE.{INTAKE_STREAM}"),
        subjects::policy(CLUSTER),
    ] {
        for api in [subjects::SUBMIT_API, subjects::CANCEL_API] {
            launcher
                .publish_with_reply(api, lure.clone(), codec::encode(&request("auth-lure")))
                .await
                .unwrap();
        }
    }
    launcher.flush().await.unwrap();
    // An answer the service would have sent goes out within milliseconds of the request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_lure = events_info(&op_js).await.state;
    assert_eq!(
        (after_lure.messages, after_lure.last_sequence),
        (before_lure.messages, before_lure.last_sequence),
        "nothing purged, nothing written, nothing submitted"
    );

    // A launcher reports its runs...
    let started = Body::JobStarted(pb::JobStarted {
        job_id: job_id.clone(),
    });
    let subject = subjects::job_event(CLUSTER, &job_id, "job_started");
    assert!(stored(&launcher_js, subject, event(started)).await);

    // Its subjects are its own, but not what it puts there: a budget tree, or a placement,
    // stored on its job's subject reaches every service as an unusable entry (misfiled),
    // which they fold as empty.
    let finished_subject = subjects::job_event(CLUSTER, &job_id, "job_finished");
    let mut smuggled_tree = budget.clone();
    smuggled_tree.accounts[0].share += 7;
    let smuggled = [
        Body::BudgetTreeSet(smuggled_tree),
        Body::JobPlaced(pb::JobPlaced {
            job_id: job_id.clone(),
            ..Default::default()
        }),
    ];
    let mut smuggled_at = Vec::new();
    for body in smuggled {
        assert!(stored(&launcher_js, finished_subject.clone(), event(body)).await);
        smuggled_at.push(last_sequence(&op_js).await);
    }

    // ...but cannot place a job, order a preemption or change the budget: nothing lands.
    let before = last_sequence(&op_js).await;
    let placed = Body::JobPlaced(pb::JobPlaced {
        job_id: job_id.clone(),
        ..Default::default()
    });
    let placed_subject = subjects::job_event(CLUSTER, &job_id, "job_placed");
    assert!(!stored(&launcher_js, placed_subject.clone(), event(placed.clone())).await);
    let order = Body::PreemptionOrdered(pb::PreemptionOrdered {
        job_id: job_id.clone(),
        ..Default::default()
    });
    let order_subject = subjects::job_event(CLUSTER, &job_id, "preemption_ordered");
    assert!(!stored(&launcher_js, order_subject, event(order)).await);
    // A budget that differs from the one in force (the same one again would need no write).
    let mut changed = budget.clone();
    changed.accounts[0].share += 1;
    let refused = fairshare_runtime::admin::set_budget(&launcher_js, 2, changed.clone())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("may not publish there"),
        "the error names the likely cause: {refused}"
    );
    // Nor delete or purge the log.
    assert!(launcher_js.delete_stream(EVENTS_STREAM).await.is_err());
    assert_eq!(
        last_sequence(&op_js).await,
        before,
        "a refused append left a trace"
    );

    // It can still follow the log, as launchers do.
    let mut follower = Follower::start(&launcher_js, 1, vec![subjects::cluster_events(CLUSTER)])
        .await
        .unwrap();
    let mut seen = 0;
    let mut misfiled = Vec::new();
    follower
        .catch_up(|entry| {
            seen += 1;
            if let Err(DecodeError::Misfiled(m)) = entry.event {
                assert_eq!(m.subject, finished_subject);
                misfiled.push(entry.sequence);
            }
        })
        .await
        .unwrap();
    assert_eq!(seen, before, "the launcher reads the whole log");
    // And single events: the budget tree in force, as `fairshare status` reads it.
    let events = launcher_js.get_stream(EVENTS_STREAM).await.unwrap();
    let tree = events
        .get_last_raw_message_by_subject(&subjects::policy(CLUSTER))
        .await
        .unwrap();
    assert!(matches!(
        codec::decode_event(&tree.payload).unwrap().body,
        Some(Body::BudgetTreeSet(_))
    ));
    assert_eq!(
        misfiled, smuggled_at,
        "exactly the smuggled events are unusable"
    );

    // The decision service places; it cannot change the budget either.
    let (_decision, decision_js) = as_role(&server, dir.path(), Role::Decision).await;
    assert!(stored(&decision_js, placed_subject, event(placed)).await);
    assert!(
        fairshare_runtime::admin::set_budget(&decision_js, 3, changed)
            .await
            .is_err()
    );
    assert_eq!(last_sequence(&op_js).await, before + 1);

    // No service can destroy the log or rewrite its definition (a short maximum age would
    // expire it): each may create a missing stream, read and follow, but not delete, purge or
    // update. Updating the definition is the operator's (`fairshare streams`).
    let definition = events_info(&op_js).await.config;
    // A definition the server accepts (so only the role can refuse it) that would expire
    // every event older than a day.
    let mut shortened = definition.clone();
    shortened.max_age = Duration::from_secs(86_400);
    assert!(shortened.duplicate_window <= shortened.max_age);
    for role in [
        Role::Submission,
        Role::Accounting,
        Role::Decision,
        Role::Preemption,
    ] {
        let (_client, mut js) = as_role(&server, dir.path(), role).await;
        // Refusals (each waits out the timeout), but for one allowed look-up.
        js.set_timeout(Duration::from_secs(1));
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        assert!(js.delete_stream(EVENTS_STREAM).await.is_err(), "{role:?}");
        assert!(events.purge().await.is_err(), "{role:?}");
        assert!(
            js.update_stream(shortened.clone()).await.is_err(),
            "{role:?}"
        );
    }
    let after = events_info(&op_js).await;
    assert_eq!(after.config.max_age, definition.max_age);
    assert_eq!(after.state.last_sequence, before + 1, "nothing purged");
    // The operator may, which shows the refusals above were the roles'.
    op_js.update_stream(shortened).await.unwrap();
    op_js.update_stream(definition.clone()).await.unwrap();

    // A stream whose definition is out of date (as after an upgrade) stops a service with an
    // error that names the remedy; the operator's `fairshare streams` brings it up to date.
    let mut older = definition.clone();
    older.duplicate_window = definition.duplicate_window / 2;
    assert_ne!(older.duplicate_window, definition.duplicate_window);
    op_js.update_stream(older).await.unwrap();
    let refused = fairshare_runtime::nats::ensure_streams(&decision_js, 1)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("fairshare streams"),
        "the error names the remedy: {refused}"
    );
    fairshare_runtime::nats::ensure_streams(&op_js, 1)
        .await
        .unwrap();
    fairshare_runtime::nats::ensure_streams(&decision_js, 1)
        .await
        .unwrap();

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// The standard-library Python launcher under the same identities: with the launcher's seed
/// (`--nkey`) it signs the server's nonce and its submission is accepted; without one, or with
/// a seed the server does not know, it says so and submits nothing (exit 4, not a retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_launcher_submits_with_the_launcher_nkey() {
    let dir = tempfile::tempdir().unwrap();
    let Secured { server, _op, .. } = secured(dir.path()).await;
    let (stop, serving) = serve_submission(&server, dir.path()).await;
    let url = server.url();
    let job = [
        "--allocation",
        "research/nlp",
        "--min-runtime",
        "60",
        "--key",
        "py-auth",
    ];
    let job: Vec<&std::ffi::OsStr> = job.iter().map(std::ffi::OsStr::new).collect();
    let seed = auth::seed_path(dir.path(), Role::Launcher);
    let with_seed = [&job[..], &["--nkey".as_ref(), seed.as_os_str()]].concat();
    let without = python_submit(&url, &job).await;
    assert_eq!(without.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&without.stderr).contains("--nkey"));
    // A seed the server does not know: refused at CONNECT, nothing submitted (exit 4, not a
    // retry). Before the client waited for its PONG, the refusal raced the publish written
    // right behind CONNECT and often read as a lost answer (exit 3); tried a few times.
    let stranger = tempfile::tempdir().unwrap();
    auth::init(stranger.path()).unwrap();
    let unknown = auth::seed_path(stranger.path(), Role::Launcher);
    let with_unknown = [&job[..], &["--nkey".as_ref(), unknown.as_os_str()]].concat();
    for _ in 0..3 {
        let refused = python_submit(&url, &with_unknown).await;
        let said = String::from_utf8_lossy(&refused.stderr).into_owned();
        assert_eq!(refused.status.code(), Some(4), "{said}");
        assert!(said.contains("nothing was submitted"), "{said}");
    }
    let with = python_submit(&url, &with_seed).await;
    let said = String::from_utf8_lossy(&with.stdout).into_owned();
    assert_eq!(
        with.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&with.stderr)
    );
    assert!(said.starts_with("accepted job "), "{said}");
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// A decision cycle whose node fence cannot be read (here: the decision identity may not read
/// single events; in production, a JetStream API queue full or a leader election while plain
/// publishes go through) publishes nothing: unfenced, its placement could land on a node
/// cordoned or removed since. Before, it published anyway.
#[tokio::test]
async fn a_cycle_that_cannot_read_its_node_fence_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let single_event_reads = [
        format!("$JS.API.STREAM.MSG.GET.{EVENTS_STREAM}"),
        format!("$JS.API.DIRECT.GET.{EVENTS_STREAM}"),
        format!("$JS.API.DIRECT.GET.{EVENTS_STREAM}.>"),
    ];
    let s = secured_with(dir.path(), |block| {
        denied(&block, Role::Decision, &single_event_reads)
    })
    .await;
    let job =
        fairshare_testkit::events::one_gpu_submitted(CLUSTER, "research/nlp", "j-fence", "k-fence");
    let submitted_at = s
        .op_js
        .publish(
            subjects::job_event(CLUSTER, "j-fence", "job_submitted"),
            event(job),
        )
        .await
        .unwrap()
        .await
        .unwrap()
        .sequence;
    let (decision, _) = as_role(&s.server, dir.path(), Role::Decision).await;
    let service = fairshare_decision::shell::Service::start(
        decision,
        fairshare_decision::shell::Config::new(CLUSTER),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let (stop, serving) = spawn_until_stopped(|stopped| service.serve(stopped));
    // The first fence look-up waits out its request timeout; the cycle then publishes nothing
    // (before, it published unfenced once that timeout was over).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let _ = stop.send(());
    let _ = serving.await;
    assert_eq!(
        last_sequence(&s.op_js).await,
        submitted_at,
        "nothing was placed without its fence"
    );
}

/// A `NodeDrained` report the preemption service may not write (its identity denied the node
/// subjects) holds up no later pass: an order's kill at its grace deadline still lands. Before,
/// the unacknowledged report was kept for settling, and the service settled it for ever,
/// deciding nothing else.
#[tokio::test]
async fn a_drained_report_that_cannot_land_holds_up_no_kill() {
    let dir = tempfile::tempdir().unwrap();
    let node_reports = [subjects::node("*", "*")];
    let s = secured_with(dir.path(), |block| {
        denied(&block, Role::Preemption, &node_reports)
    })
    .await;
    let now = SystemClock.now_ms();
    let at = |body: Body| {
        codec::encode(&pb::Event {
            at_ms: now,
            body: Some(body),
        })
    };
    use fairshare_testkit::events::{one_gpu_submitted, placed_on};
    let job = |kind: &str| subjects::job_event(CLUSTER, "j", kind);
    let log = [
        (
            job("job_submitted"),
            at(one_gpu_submitted(CLUSTER, "research/nlp", "j", "k")),
        ),
        (job("job_placed"), at(placed_on("j", "gpu001", 1))),
        (
            job("job_started"),
            at(Body::JobStarted(pb::JobStarted { job_id: "j".into() })),
        ),
        // An empty node cordoned: the service reports it drained at once, and cannot.
        (
            subjects::node(CLUSTER, "gpu000"),
            at(Body::NodeCordoned(pb::NodeCordoned {
                cluster: CLUSTER.into(),
                node: "gpu000".into(),
                reason: "repair".into(),
            })),
        ),
        (
            job("preemption_ordered"),
            at(Body::PreemptionOrdered(pb::PreemptionOrdered {
                job_id: "j".into(),
                grace_deadline_ms: now + 3_000,
                reason: "test".into(),
                ..Default::default()
            })),
        ),
    ];
    for (subject, payload) in log {
        assert!(stored(&s.op_js, subject, payload).await);
    }
    let (preemption, _) = as_role(&s.server, dir.path(), Role::Preemption).await;
    let service = fairshare_preemption::shell::Service::start(
        preemption,
        fairshare_preemption::shell::Config::new(CLUSTER),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let (stop, serving) = spawn_until_stopped(|stopped| service.serve(stopped));
    let events = s.op_js.get_stream(EVENTS_STREAM).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let killed = loop {
        if let Ok(m) = events
            .get_last_raw_message_by_subject(&job("job_preempted"))
            .await
        {
            break codec::decode_event(&m.payload).unwrap();
        }
        if std::time::Instant::now() > deadline {
            break pb::Event::default();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = stop.send(());
    let _ = serving.await;
    assert!(
        matches!(killed.body, Some(Body::JobPreempted(ref p)) if p.killed),
        "the kill landed: {killed:?}"
    );
}

/// Each deciding service holds its own lease (`fairshare_runtime::lease`) under its own
/// identity, bucket made by whichever comes first; neither can take the other's role's lease,
/// and a launcher cannot open the bucket at all (it could otherwise stop a cluster's decisions
/// by writing a lease of its own).
#[tokio::test]
async fn each_deciding_service_holds_its_own_lease_and_no_other() {
    use fairshare_runtime::lease::{Attempt, Lease};
    let dir = tempfile::tempdir().unwrap();
    let s = secured(dir.path()).await;
    let (_d, decision_js) = as_role(&s.server, dir.path(), Role::Decision).await;
    let (_p, preemption_js) = as_role(&s.server, dir.path(), Role::Preemption).await;
    let (_l, launcher_js) = as_role(&s.server, dir.path(), Role::Launcher).await;
    let open = |js: &jetstream::Context, role: &str, holder: &str| {
        let (js, role, holder) = (js.clone(), role.to_owned(), holder.to_owned());
        async move { Lease::open(&js, &role, CLUSTER, holder, 1).await }
    };
    let mut decision = open(&decision_js, "decision", "d").await.unwrap();
    assert_eq!(decision.try_take().await, Attempt::Taken);
    decision.renew().await.unwrap();
    let mut preemption = open(&preemption_js, "preemption", "p").await.unwrap();
    assert_eq!(preemption.try_take().await, Attempt::Taken);

    let mut wrong_role = open(&preemption_js, "decision", "p").await.unwrap();
    assert!(
        matches!(wrong_role.try_take().await, Attempt::Unavailable(_)),
        "the preemption identity wrote the decision lease"
    );
    let held: Vec<(String, String)> = fairshare_runtime::lease::holders(&s.op_js)
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|h| (h.key, h.holder))
        .collect();
    assert_eq!(
        held,
        [
            (format!("decision.{CLUSTER}"), "d".to_owned()),
            (format!("preemption.{CLUSTER}"), "p".to_owned())
        ]
    );
    assert!(
        open(&launcher_js, "decision", "l").await.is_err(),
        "a launcher opened the lease bucket"
    );
}
