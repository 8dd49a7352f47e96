//! Budget and inventory changes against a real nats-server: a change that repeats what is in
//! force writes nothing, and going back to an earlier budget or node size is written (an id
//! from the content alone would have been dropped as a duplicate inside the stream's duplicate
//! window, and acknowledged as if written).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use async_nats::jetstream;
use fairshare_e2e::{BUDGET, CLUSTER};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_model::files;
use fairshare_runtime::admin;
use fairshare_runtime::envelope::Envelope;
use fairshare_runtime::nats::ensure_streams;
use fairshare_testkit::NatsServer;

async fn start() -> (NatsServer, jetstream::Context) {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    ensure_streams(&js, 1).await.unwrap();
    (server, js)
}

/// Every event on `subject`, in log order.
async fn bodies_on(js: &jetstream::Context, subject: &str) -> Vec<(u64, Body)> {
    fairshare_testkit::events::stored(js)
        .await
        .into_iter()
        .filter(|s| s.subject == subject)
        .filter_map(|s| Some((s.sequence, s.event.body?)))
        .collect()
}

fn node(gpus: u32) -> pb::NodeRegistered {
    pb::NodeRegistered {
        cluster: CLUSTER.into(),
        node: "gpu-1".into(),
        gpus,
    }
}

#[tokio::test]
async fn reverting_a_budget_is_written_and_repeating_one_is_not() {
    let (_server, js) = start().await;
    let a = files::parse_budget(BUDGET).unwrap();
    let mut b = a.clone();
    b.accounts[0].share += 1;

    let first = admin::set_budget(&js, 1, a.clone()).await.unwrap();
    // The same budget again (a second apply, or a retry after a lost acknowledgement).
    assert_eq!(admin::set_budget(&js, 2, a.clone()).await.unwrap(), first);
    let second = admin::set_budget(&js, 3, b.clone()).await.unwrap();
    assert!(second > first);
    // Back to the first budget, well inside the duplicate window.
    let third = admin::set_budget(&js, 4, a.clone()).await.unwrap();
    assert!(third > second, "the revert was written as a new event");

    let policy = bodies_on(&js, &subjects::policy(CLUSTER)).await;
    assert_eq!(
        policy,
        vec![
            (first, Body::BudgetTreeSet(a.clone())),
            (second, Body::BudgetTreeSet(b)),
            (third, Body::BudgetTreeSet(a)),
        ]
    );
}

/// Another publisher's message under a budget change's message id (ids are predictable from
/// the log, and a launcher may publish its reports with any headers) does not pass for the
/// change: it is written under an id of its own.
#[tokio::test]
async fn a_budget_whose_message_id_another_publisher_took_is_written() {
    let (_server, js) = start().await;
    let a = files::parse_budget(BUDGET).unwrap();
    let content = fairshare_events::codec::encode(&pb::Event {
        at_ms: 0,
        body: Some(Body::BudgetTreeSet(a.clone())),
    });
    let id = fairshare_events::headers::policy_id(
        CLUSTER,
        "budget",
        fairshare_events::headers::content_hash(&content),
        0,
    );
    fairshare_testkit::events::squat_message_id(&js, CLUSTER, &id).await;
    let written = admin::set_budget(&js, 2, a.clone()).await.unwrap();
    assert_eq!(
        bodies_on(&js, &subjects::policy(CLUSTER)).await,
        vec![(written, Body::BudgetTreeSet(a))]
    );
}

#[tokio::test]
async fn a_node_back_to_its_earlier_size_is_written() {
    let (_server, js) = start().await;
    let eight = admin::register_nodes(&js, 1, vec![node(8)]).await.unwrap();
    let four = admin::register_nodes(&js, 2, vec![node(4)]).await.unwrap();
    let again = admin::register_nodes(&js, 3, vec![node(8)]).await.unwrap();
    assert!(eight < four && four < again);
    assert_eq!(
        admin::register_nodes(&js, 4, vec![node(8)]).await.unwrap(),
        again,
        "a repeat of what is in force writes nothing"
    );
    let sizes: Vec<u32> = bodies_on(&js, &subjects::node(CLUSTER, "gpu-1"))
        .await
        .into_iter()
        .map(|(_, b)| match b {
            Body::NodeRegistered(n) => n.gpus,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(sizes, [8, 4, 8]);
}

#[tokio::test]
async fn a_change_racing_another_on_the_same_subject_is_refused_not_interleaved() {
    let (_server, js) = start().await;
    let a = files::parse_budget(BUDGET).unwrap();
    let mut b = a.clone();
    b.accounts[0].share += 1;
    let first = admin::set_budget(&js, 1, a.clone()).await.unwrap();
    // Another writer appends between this one's look at the subject and its publish: the
    // expected sequence this one would send no longer holds, and the server refuses it.
    let subject = subjects::policy(CLUSTER);
    let event = pb::Event {
        at_ms: 2,
        body: Some(Body::BudgetTreeSet(b)),
    };
    let stale = Envelope {
        message_id: "another-writer-saw-an-older-log".into(),
        expected_last_subject_sequence: Some((first - 1, None)),
        ..Default::default()
    };
    let refused = admin::append(&js, subject.clone(), &event, &stale)
        .await
        .unwrap_err();
    assert!(
        refused
            .detail
            .contains("changed while this was being applied"),
        "{refused}"
    );
    assert_eq!(bodies_on(&js, &subject).await.len(), 1, "nothing was added");
}

/// A budget applied on a server without JetStream, or before any stream was made, is refused
/// with what is missing and what to do, not with the hint that the operator's identity may
/// lack permission (what a timeout means); the log reader says the same; once the stream is
/// made, the same budget goes in.
#[tokio::test]
async fn a_change_where_jetstream_or_the_stream_is_missing_says_which() {
    let budget = files::parse_budget(BUDGET).unwrap();

    let bare = NatsServer::start_without_jetstream().unwrap();
    let js = jetstream::new(async_nats::connect(bare.url()).await.unwrap());
    let off = admin::set_budget(&js, 1, budget.clone()).await.unwrap_err();
    let off = off.to_string();
    assert!(off.contains("no JetStream answered"), "{off}");
    assert!(!off.contains("may not publish there"), "{off}");
    let follow = fairshare_runtime::log::log_position(&js).await.unwrap_err();
    assert!(follow.to_string().contains("`-js`"), "{follow}");

    let server = NatsServer::start().unwrap();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let unmade = admin::set_budget(&js, 1, budget.clone()).await.unwrap_err();
    let unmade = unmade.to_string();
    assert!(
        unmade.contains("does not exist on this server yet"),
        "{unmade}"
    );
    assert!(!unmade.contains("may not publish there"), "{unmade}");
    let follow = fairshare_runtime::log::log_position(&js).await.unwrap_err();
    assert!(
        follow.to_string().contains("`fairshare streams`"),
        "{follow}"
    );

    ensure_streams(&js, 1).await.unwrap();
    let written = admin::set_budget(&js, 2, budget.clone()).await.unwrap();
    assert_eq!(
        bodies_on(&js, &subjects::policy(CLUSTER)).await,
        vec![(written, Body::BudgetTreeSet(budget))]
    );
}
