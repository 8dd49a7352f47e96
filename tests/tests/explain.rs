//! Explaining jobs over NATS: the decision service says where a job runs or why it waits.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use fairshare_decision::shell as decision;
use fairshare_e2e::{CLUSTER, Stack};
use fairshare_events::pb::{self, explain_reply};
use fairshare_events::{codec, subjects};

async fn explain(stack: &Stack, job_id: &str) -> explain_reply::Result {
    let req = pb::ExplainRequest {
        job_id: job_id.into(),
    };
    let reply = stack
        .client
        .request(subjects::explain_api(CLUSTER), codec::encode(&req))
        .await
        .unwrap();
    codec::decode_explain_reply(&reply.payload)
        .unwrap()
        .result
        .unwrap()
}

async fn explanation(stack: &Stack, job_id: &str) -> pb::Explanation {
    match explain(stack, job_id).await {
        explain_reply::Result::Explanation(e) => e,
        other => panic!("expected an explanation, got {other:?}"),
    }
}

#[tokio::test]
async fn a_job_that_does_not_fit_is_told_why_and_placed_jobs_say_where() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();

    // One 8-GPU job more than the 4 x 8 cluster holds: one has to wait.
    let ids = stack.submit_one_too_many().await.unwrap();
    let service = stack
        .serve_decision(decision::Config::new(CLUSTER))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The explain API answers once the service serves.
    let probe = codec::encode(&pb::ExplainRequest {
        job_id: ids[0].clone(),
    });
    while let Err(e) = stack
        .client
        .request(subjects::explain_api(CLUSTER), probe.clone())
        .await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no explain answer: {e}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = loop {
        let mut all = Vec::new();
        for id in &ids {
            all.push(explanation(&stack, id).await);
        }
        if all.iter().filter(|e| e.status == "placed").count() == 4 {
            break all;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "four jobs were not placed: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for e in all.iter().filter(|e| e.status == "placed") {
        assert_eq!(e.nodes.iter().map(|n| n.gpus).sum::<u32>(), 8, "{e:?}");
        assert!(e.reason_code.is_empty());
    }
    // Fair share: once three vision jobs are charged, infra's first job outranks vision's fourth.
    assert_eq!(
        all[4].status, "placed",
        "infra's job is placed: {:?}",
        all[4]
    );
    let waiting: Vec<&pb::Explanation> = all.iter().filter(|e| e.status == "queued").collect();
    assert_eq!(waiting.len(), 1);
    let waiting = waiting[0];
    assert_eq!(waiting.allocation, "research/vision");
    // Nothing frees 8 GPUs before the running jobs' minimum runtimes end: it holds the reservation.
    assert_eq!(waiting.reason_code, "reservation_pending", "{waiting:?}");
    assert!(!waiting.reason.is_empty());
    assert!(waiting.allocation_rank >= 1 && waiting.allocation_rank <= waiting.allocations_ranked);
    assert!(waiting.basis.unwrap().through_sequence > 0);

    match explain(&stack, "no-such-job").await {
        explain_reply::Result::Rejected(r) => {
            assert_eq!(r.code, pb::RejectionCode::UnknownJob as i32)
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    service.stop().await.unwrap();
}
