//! The queue listing (`fairshare queue`): every live job once, in the order the next cycle
//! meets the waiting ones, with the reasons `decide` gives; filters and limits.

use fairshare_events::pb::{self, event::Body};

use super::support::{H, HOUR, acc, leaf};
use crate::domain::listing;
use crate::domain::listing::fit_reply;

const NOW: i64 = 100 * HOUR;

fn ask(h: &H, allocation: &str, limit: u32) -> Result<pb::QueueListing, pb::Rejection> {
    let request = pb::QueueRequest {
        allocation: allocation.into(),
        limit,
        ..Default::default()
    };
    listing(&h.state, &request, NOW)
}

/// The launcher confirms `job_id` stopped at `NOW`.
fn stopped(h: &mut H, job_id: &str) {
    h.ok(
        NOW,
        Body::JobPreempted(pb::JobPreempted {
            job_id: job_id.into(),
            killed: false,
        }),
    );
}

fn ids(l: &pb::QueueListing) -> Vec<&str> {
    l.jobs.iter().map(|j| j.job_id.as_str()).collect()
}

fn rows(l: &pb::QueueListing) -> Vec<(&str, &str, &str)> {
    l.jobs
        .iter()
        .map(|j| (j.job_id.as_str(), j.status.as_str(), j.reason_code.as_str()))
        .collect()
}

/// research/{vision, text} and ops on one 8-GPU node, and one free 2-GPU node. vision ran a
/// lot in the window, text nothing: text's job goes first, vision's waits its turn.
fn cluster() -> H {
    let mut h = H::new();
    h.tree(vec![
        acc("research", 1, vec![leaf("vision", 1), leaf("text", 1)]),
        leaf("ops", 1),
    ]);
    h.node("n0", 8);
    h.node("n1", 2);
    h.snapshot(
        NOW - HOUR,
        &[("research/vision", 40 * HOUR as u64, 10 * HOUR as u64)],
    );
    h.running(NOW - 2 * HOUR, "ops-run", "ops", 600, &[("n0", 6)]);
    h.running(
        NOW - HOUR,
        "vision-run",
        "research/vision",
        600,
        &[("n0", 2)],
    );
    h.submit(NOW - 30 * 60_000, "vision-big", "research/vision", 8, 600);
    h.submit(NOW - 20 * 60_000, "text-small", "research/text", 2, 600);
    h.submit(NOW - 10 * 60_000, "text-big", "research/text", 8, 600);
    h.submit(NOW - 5 * 60_000, "free", "ops", 1, 0);
    h
}

#[test]
fn every_live_job_once_waiting_ones_in_the_cycles_order() {
    let mut h = cluster();
    // ops-run is being ordered off for text-big.
    h.ok(
        NOW - 60_000,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "ops-run".into(),
            grace_deadline_ms: NOW + 60_000,
            reason: "text ranks ahead".into(),
            for_job_id: "text-big".into(),
            basis: None,
            cause: pb::PreemptionCause::Window as i32,
        }),
    );
    let l = ask(&h, "", 0).unwrap();
    let d = h.decide(NOW);
    // The next cycle places text-small on the free node; the rest wait in its order.
    assert_eq!(
        d.placements.iter().map(|p| p.job_id).collect::<Vec<_>>(),
        ["text-small"]
    );
    let mut expected = vec![("text-small", "queued", "placed_next_cycle")];
    expected.extend(
        d.waiting
            .iter()
            .map(|w| (w.job_id, "queued", w.reason.code())),
    );
    expected.push(("ops-run", "running", "ordered_off"));
    expected.push(("vision-run", "running", ""));
    assert_eq!(rows(&l), expected);
    // text-big before vision-big: text ranks first; the unallocated job last of the waiting.
    let waiting: Vec<&str> = d.waiting.iter().map(|w| w.job_id).collect();
    assert_eq!(waiting, ["text-big", "vision-big", "free"]);
    assert_eq!(l.matched, 6);
    assert_eq!(l.basis.unwrap().computed_at_ms, NOW);

    let by_id = |id: &str| l.jobs.iter().find(|j| j.job_id == id).unwrap();
    // Ranks: ops first (its one job is being ordered off, so it holds nothing toward its
    // floor), then text (nothing used), then vision; unallocated work has none.
    assert_eq!(by_id("ops-run").allocation_rank, 1);
    assert_eq!(by_id("text-big").allocation_rank, 2);
    assert_eq!(by_id("vision-big").allocation_rank, 3);
    assert_eq!(by_id("free").allocation_rank, 0);
    assert!(by_id("free").unallocated && !by_id("text-big").unallocated);
    // A running job says where and since when; the one ordered off says why.
    let ops = by_id("ops-run");
    assert_eq!((ops.since_ms, ops.gpus), (NOW - 2 * HOUR, 6));
    assert_eq!(ops.nodes.len(), 1);
    assert_eq!(ops.reason, "ordered off: text ranks ahead");
    // Each waiting reason is the sentence `explain` starts with.
    for id in ["text-big", "vision-big"] {
        let explained = crate::domain::explain(&h.state, id, NOW).unwrap();
        assert!(explained.reason.starts_with(&by_id(id).reason), "{id}");
        assert_eq!(explained.reason_code, by_id(id).reason_code, "{id}");
        assert_eq!(explained.allocation_rank, by_id(id).allocation_rank, "{id}");
    }

    // Stopped and waiting for its requeue: listed after the queued jobs, before the running.
    stopped(&mut h, "ops-run");
    let l = ask(&h, "", 0).unwrap();
    let statuses: Vec<&str> = l.jobs.iter().map(|j| j.status.as_str()).collect();
    let preempted = statuses.iter().position(|s| *s == "preempted").unwrap();
    assert!(statuses[..preempted].iter().all(|s| *s == "queued"));
    assert!(statuses[preempted + 1..].iter().all(|s| *s == "running"));
    assert_eq!(l.jobs[preempted].job_id, "ops-run");
    assert_eq!(l.jobs[preempted].reason_code, "awaiting_requeue");

    // A job its launcher stopped with no order on record comes after those ordered off.
    stopped(&mut h, "vision-run");
    let l = ask(&h, "", 0).unwrap();
    let preempted: Vec<&str> = (l.jobs.iter())
        .filter(|j| j.status == "preempted")
        .map(|j| j.job_id.as_str())
        .collect();
    assert_eq!(preempted, ["ops-run", "vision-run"]);
}

#[test]
fn a_filter_takes_an_account_and_everything_under_it_and_a_limit_cuts_the_list() {
    let h = cluster();
    let research = ask(&h, "research", 0).unwrap();
    let ids: Vec<&str> = research.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["text-small", "text-big", "vision-big", "vision-run"]);
    // The trailing slash the status table writes is the same account.
    assert_eq!(ask(&h, "research/", 0).unwrap().jobs, research.jobs);
    let vision = ask(&h, "research/vision", 0).unwrap();
    assert_eq!(rows(&vision).len(), 2);
    assert!(
        vision
            .jobs
            .iter()
            .all(|j| j.allocation == "research/vision")
    );
    // Not a prefix of a name: "research/vis" is no account.
    let typo = ask(&h, "research/vis", 0).unwrap_err();
    assert_eq!(typo.code, pb::RejectionCode::UnknownAllocation as i32);
    assert!(
        typo.message.contains("\"research/vis\""),
        "{}",
        typo.message
    );

    let two = ask(&h, "", 2).unwrap();
    assert_eq!((two.jobs.len(), two.matched), (2, 6));
    assert_eq!(two.jobs[..], ask(&h, "", 0).unwrap().jobs[..2]);
}

/// A filter of slashes alone names no account: refused, not read as "every job".
#[test]
fn a_filter_of_slashes_alone_is_refused() {
    let h = cluster();
    for filter in ["/", "//"] {
        let refused = ask(&h, filter, 0).unwrap_err();
        assert_eq!(refused.code, pb::RejectionCode::UnknownAllocation as i32);
        assert!(
            refused.message.contains("names no account"),
            "{}",
            refused.message
        );
    }
    // A trailing slash on a real account still takes it.
    assert_eq!(
        ask(&h, "research/", 0).unwrap(),
        ask(&h, "research", 0).unwrap()
    );
}

#[test]
fn a_reply_over_the_payload_limit_loses_jobs_from_the_end_only() {
    let h = cluster();
    let whole = ask(&h, "", 0).unwrap();
    let reply = |l: &pb::QueueListing| pb::QueueReply {
        result: Some(pb::queue_reply::Result::Listing(l.clone())),
    };
    let size = fairshare_events::codec::encoded_len(&reply(&whole));
    // Room enough: nothing goes.
    let mut fits = reply(&whole);
    assert_eq!(fit_reply(&mut fits, size), 0);
    assert_eq!(fits, reply(&whole));
    // One byte short: the last job goes, the first ones stay as they were, `matched` says
    // how many there were.
    let mut cut = reply(&whole);
    assert_eq!(fit_reply(&mut cut, size - 1), 1);
    let Some(pb::queue_reply::Result::Listing(l)) = cut.result else {
        panic!("a listing")
    };
    assert_eq!(l.jobs[..], whole.jobs[..whole.jobs.len() - 1]);
    assert_eq!(l.matched, whole.matched);
    assert!(fairshare_events::codec::encoded_len(&reply(&l)) < size);
    // A rejection is left alone.
    let mut refused = pb::QueueReply {
        result: Some(pb::queue_reply::Result::Rejected(pb::Rejection::default())),
    };
    assert_eq!(fit_reply(&mut refused, 0), 0);
}

/// Over a long list the cut is the fewest jobs that bring the reply under the limit: one more
/// job kept would not fit.
#[test]
fn a_long_reply_loses_only_as_many_jobs_as_it_must() {
    let entry = |i: usize| pb::QueueEntry {
        job_id: format!("job-{i:05}"),
        allocation: "research/vision".into(),
        status: "queued".into(),
        reason: "x".repeat(i % 300),
        ..Default::default()
    };
    let jobs: Vec<pb::QueueEntry> = (0..600).map(entry).collect();
    let reply = |n: usize| pb::QueueReply {
        result: Some(pb::queue_reply::Result::Listing(pb::QueueListing {
            basis: Some(pb::DecisionBasis::default()),
            jobs: jobs[..n].to_vec(),
            matched: 600,
        })),
    };
    let size = |n: usize| fairshare_events::codec::encoded_len(&reply(n));
    for limit in [
        size(600) - 1,
        size(599),
        size(599) - 1,
        size(300) + 5,
        size(1),
        10,
    ] {
        let mut cut = reply(600);
        let dropped = fit_reply(&mut cut, limit);
        let kept = 600 - dropped;
        assert_eq!(cut, reply(kept), "limit {limit}");
        assert!(
            size(kept) <= limit || kept == 0,
            "limit {limit}: {} kept",
            kept
        );
        assert!(
            kept == 600 || size(kept + 1) > limit,
            "limit {limit}: cut too many"
        );
    }
}

#[test]
fn a_user_sees_their_own_jobs_in_the_same_order() {
    let mut h = cluster();
    // Ada's job, submitted last: it waits behind text's and vision's.
    h.ok(
        NOW - 60_000,
        Body::JobSubmitted(pb::JobSubmitted {
            job_id: "ada-1".into(),
            idempotency_key: "k-ada-1".into(),
            spec: Some(pb::JobSpec {
                cluster: super::support::CLUSTER.into(),
                allocation: "research/text".into(),
                user: "ada".into(),
                gpus: 8,
                nodes: 1,
                min_runtime_s: 600,
                resumable: true,
                ..Default::default()
            }),
            shape: Some(pb::Shape {
                nodes: 1,
                gpus_per_node: 8,
            }),
        }),
    );
    let everyone = ask(&h, "", 0).unwrap();
    let mine = |user: &str, allocation: &str| {
        let request = pb::QueueRequest {
            allocation: allocation.into(),
            user: user.into(),
            ..Default::default()
        };
        listing(&h.state, &request, NOW).unwrap()
    };
    let ada = mine("ada", "");
    assert_eq!(ids(&ada), ["ada-1"]);
    assert_eq!(ada.matched, 1);
    assert_eq!(ada.jobs[0].user, "ada");
    // Her entry is the one everyone's listing gives her job.
    let hers = everyone.jobs.iter().find(|j| j.job_id == "ada-1").unwrap();
    assert_eq!(&ada.jobs[0], hers);
    // Everyone else's jobs are the test harness user's, in everyone's order.
    let u = mine("u", "");
    let others: Vec<&str> = ids(&everyone)
        .into_iter()
        .filter(|id| *id != "ada-1")
        .collect();
    assert_eq!(ids(&u), others);
    assert!(u.jobs.iter().all(|j| j.user == "u"));
    // Both filters at once; a user with no live job is an empty listing, not an error.
    assert!(mine("ada", "research/vision").jobs.is_empty());
    assert_eq!(ids(&mine("ada", "research")), ["ada-1"]);
    let nobody = mine("nobody", "");
    assert_eq!((nobody.jobs.len(), nobody.matched), (0, 0));
}
