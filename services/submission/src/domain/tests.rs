//! Unit tests of the pure core: the fold and the checks, without NATS.

use fairshare_events::pb::{self, RejectionCode, event::Body};

use super::*;

fn event(body: Body) -> pb::Event {
    pb::Event {
        at_ms: 1_000,
        body: Some(body),
    }
}

fn account(name: &str, share: u64, children: Vec<pb::Account>) -> pb::Account {
    pb::Account {
        name: name.into(),
        share,
        children,
    }
}

/// A cluster "c" with 2 nodes of 8 GPUs and allocations a/x and b.
fn state() -> SubmissionState {
    let mut s = SubmissionState::default();
    s.apply(
        1,
        &event(Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: "c".into(),
            accounts: vec![
                account("a", 1, vec![account("x", 1, vec![])]),
                account("b", 1, vec![]),
            ],
        })),
    );
    for (seq, node) in [(2, "n0"), (3, "n1")] {
        s.apply(
            seq,
            &event(Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: node.into(),
                gpus: 8,
            })),
        );
    }
    s
}

fn request(key: &str, gpus: i64) -> pb::SubmitRequest {
    pb::SubmitRequest {
        idempotency_key: key.into(),
        spec: Some(pb::JobSpec {
            cluster: "c".into(),
            allocation: "a/x".into(),
            gpus,
            min_runtime_s: 600,
            ..Default::default()
        }),
    }
}

/// Job "job-1" of one GPU accepted under key "k" (`request("k", 1)`).
fn job_1_with_key_k() -> pb::Event {
    let one_gpu = fairshare_model::shape::Shape {
        nodes: 1,
        gpus_per_node: 1,
    };
    event(Body::JobSubmitted(job_submitted(
        "job-1",
        &request("k", 1),
        one_gpu,
    )))
}

fn code(result: Result<Checked, pb::Rejection>) -> RejectionCode {
    let rejection = result.expect_err("expected a rejection");
    RejectionCode::try_from(rejection.code).expect("known code")
}

#[test]
fn valid_submission_gets_its_shape() {
    let s = state();
    let checked = check_submission(&s, &request("k", 16), &Limits::default()).unwrap();
    assert_eq!(
        checked,
        Checked::New(fairshare_model::shape::Shape {
            nodes: 2,
            gpus_per_node: 8
        })
    );
}

#[test]
fn a_cluster_needs_both_a_tree_and_nodes() {
    let mut s = SubmissionState::default();
    s.apply(
        1,
        &event(Body::NodeRegistered(pb::NodeRegistered {
            cluster: "c".into(),
            node: "n0".into(),
            gpus: 8,
        })),
    );
    assert_eq!(
        code(check_submission(&s, &request("k", 1), &Limits::default())),
        RejectionCode::UnknownCluster
    );
}

#[test]
fn an_accepted_key_is_answered_from_the_fold() {
    let mut s = state();
    assert_eq!(s.apply(10, &job_1_with_key_k()), Applied::Applied);
    // A retry (the same request) gets the first answer.
    let checked = check_submission(&s, &request("k", 1), &Limits::default()).unwrap();
    assert_eq!(
        checked,
        Checked::Repeat {
            job_id: "job-1".into(),
            sequence: 10
        }
    );
    // Another request with the key is no retry: refused, naming the job the key is for, and
    // nothing new is accepted for it (the key is final).
    let other = check_submission(&s, &request("k", 999), &Limits::default()).unwrap_err();
    assert_eq!(other.code, RejectionCode::KeyReused as i32);
    assert!(other.message.contains("job-1"), "{}", other.message);
    // So is the same job asked of another cluster: keys are not per cluster.
    let mut elsewhere = request("k", 1);
    if let Some(spec) = elsewhere.spec.as_mut() {
        spec.cluster = "d".into();
    }
    assert_eq!(
        code(check_submission(&s, &elsewhere, &Limits::default())),
        RejectionCode::KeyReused
    );
    // The shell's early note, with the request's fingerprint, answers alike.
    let mut noted = state();
    let fingerprint = request_fingerprint(request("k", 1).spec.as_ref());
    noted.note_accepted("k", "job-1", "c", 10, fingerprint);
    assert!(matches!(
        check_submission(&noted, &request("k", 1), &Limits::default()),
        Ok(Checked::Repeat { .. })
    ));
    assert_eq!(
        code(check_submission(
            &noted,
            &request("k", 2),
            &Limits::default()
        )),
        RejectionCode::KeyReused
    );
}

/// FNV-1a 64 of this spec's protobuf encoding, worked out apart from this code (a Python
/// encoder of the same fields in tag order): what version-6 checkpoints hold for it.
const FULL_SPEC_FINGERPRINT: u64 = 0xb52d_a6c4_0b61_a25d;

#[test]
fn a_request_fingerprint_is_stable_and_tells_specs_apart() {
    // Pinned: checkpoints keep fingerprints, so a build that computed them otherwise would
    // refuse every retry answered from an older checkpoint.
    assert_eq!(request_fingerprint(None), 0xcbf2_9ce4_8422_2325);
    let full = pb::JobSpec {
        cluster: "c".into(),
        allocation: "a/x".into(),
        user: "ada".into(),
        gpus: 16,
        nodes: 2,
        min_runtime_s: 600,
        resumable: true,
        priority: -3,
        time_limit_s: 7200,
        payload: bytes::Bytes::from_static(b"train.sh"),
        name: "run-1".into(),
    };
    assert_eq!(request_fingerprint(Some(&full)), FULL_SPEC_FINGERPRINT);
    let one = request("k", 1);
    assert_eq!(
        request_fingerprint(one.spec.as_ref()),
        request_fingerprint(request("other key", 1).spec.as_ref())
    );
    assert_ne!(
        request_fingerprint(one.spec.as_ref()),
        request_fingerprint(request("k", 2).spec.as_ref())
    );
}

#[test]
fn a_rejected_intake_key_stays_rejected() {
    let mut s = state();
    let rejection = pb::Rejection {
        code: RejectionCode::InvalidGpus as i32,
        message: "no".into(),
    };
    s.apply(
        10,
        &event(Body::JobRejected(pb::JobRejected {
            idempotency_key: "k".into(),
            cluster: "c".into(),
            rejection: Some(rejection.clone()),
            intake_sequence: 4,
        })),
    );
    // Every request with the key gets that answer, said to be the earlier one.
    let again = check_submission(&s, &request("k", 1), &Limits::default()).unwrap_err();
    assert_eq!(again.code, rejection.code);
    assert!(
        again.message.contains("\"k\" was rejected before") && again.message.ends_with(": no"),
        "{}",
        again.message
    );
}

#[test]
fn replayed_and_out_of_date_entries_change_nothing() {
    let mut s = state();
    let before = s.clusters["c"].inventory.clone();
    let removal = event(Body::NodeRemoved(pb::NodeRemoved {
        cluster: "c".into(),
        node: "n0".into(),
    }));
    assert_eq!(
        s.apply(3, &removal),
        Applied::Duplicate,
        "sequence 3 was applied already"
    );
    assert_eq!(s.clusters["c"].inventory, before);
    assert_eq!(s.apply(4, &removal), Applied::Applied);
    assert_eq!(s.clusters["c"].inventory.total_gpus(), 8);
}

#[test]
fn an_invalid_tree_on_the_log_is_ignored_and_the_old_one_stays() {
    let mut s = state();
    let bad = event(Body::BudgetTreeSet(pb::BudgetTreeSet {
        cluster: "c".into(),
        accounts: vec![],
    }));
    assert!(matches!(s.apply(10, &bad), Applied::Ignored(_)));
    assert!(
        s.clusters["c"]
            .budget
            .as_ref()
            .unwrap()
            .allocation("a/x")
            .is_some()
    );
}

/// Folds job `j` (key `k`, 1 GPU, resumable or not) accepted at sequence 10.
fn submit_j_at_10(s: &mut SubmissionState, resumable: bool) {
    let mut req = request("k", 1);
    req.spec.as_mut().unwrap().resumable = resumable;
    let shape = match check_submission(s, &req, &Limits::default()) {
        Ok(Checked::New(shape)) => shape,
        other => panic!("{other:?}"),
    };
    s.apply(
        10,
        &event(Body::JobSubmitted(job_submitted("j", &req, shape))),
    );
}

#[test]
fn cancel_follows_the_job_lifecycle() {
    let mut s = state();
    let limits = Limits::default();
    let cancel = pb::CancelRequest {
        job_id: "j".into(),
        ..Default::default()
    };
    assert_eq!(
        check_cancel(&s, &cancel, &limits).unwrap_err().code,
        RejectionCode::UnknownJob as i32
    );
    submit_j_at_10(&mut s, true);
    assert_eq!(
        check_cancel(&s, &cancel, &limits),
        Ok(CancelTarget::Cancel {
            cluster: "c".into(),
            expected_last_subject_sequence: 10
        })
    );
    s.apply(
        11,
        &event(Body::JobPlaced(pb::JobPlaced {
            job_id: "j".into(),
            ..Default::default()
        })),
    );
    s.apply(
        12,
        &event(Body::JobStarted(pb::JobStarted { job_id: "j".into() })),
    );
    assert_eq!(
        check_cancel(&s, &cancel, &limits),
        Ok(CancelTarget::Cancel {
            cluster: "c".into(),
            expected_last_subject_sequence: 12
        })
    );
    // Preempted then requeued: still active (resumable).
    s.apply(
        13,
        &event(Body::JobPreempted(pb::JobPreempted {
            job_id: "j".into(),
            killed: false,
        })),
    );
    s.apply(
        14,
        &event(Body::JobRequeued(pb::JobRequeued { job_id: "j".into() })),
    );
    assert_eq!(
        check_cancel(&s, &cancel, &limits),
        Ok(CancelTarget::Cancel {
            cluster: "c".into(),
            expected_last_subject_sequence: 14
        })
    );
    // A reason with a control character is refused, whoever sends it.
    let escape = pb::CancelRequest {
        reason: "gone\u{1b}[2J".into(),
        ..cancel.clone()
    };
    let refused = check_cancel(&s, &escape, &limits).unwrap_err();
    assert_eq!(refused.code, RejectionCode::InvalidName as i32);
    assert!(
        refused.message.contains("control characters"),
        "{}",
        refused.message
    );
    s.apply(
        15,
        &event(Body::JobCancelled(pb::JobCancelled {
            job_id: "j".into(),
            ..Default::default()
        })),
    );
    assert_eq!(
        check_cancel(&s, &cancel, &limits),
        Ok(CancelTarget::AlreadyCancelled { sequence: 15 })
    );
}

/// The first end of a job stands, as in the decision and accounting folds: a launcher
/// reporting its kill after a cancel leaves the job cancelled, and a cancel written after the
/// job finished leaves it finished.
#[test]
fn a_jobs_first_end_stands() {
    let limits = Limits::default();
    let cancel = pb::CancelRequest {
        job_id: "j".into(),
        ..Default::default()
    };
    let mut s = state();
    submit_j_at_10(&mut s, true);
    s.apply(
        11,
        &event(Body::JobCancelled(pb::JobCancelled {
            job_id: "j".into(),
            ..Default::default()
        })),
    );
    let failed = s.apply(
        12,
        &event(Body::JobFailed(pb::JobFailed {
            job_id: "j".into(),
            ..Default::default()
        })),
    );
    assert!(matches!(failed, Applied::Ignored(_)), "{failed:?}");
    assert_eq!(
        check_cancel(&s, &cancel, &limits),
        Ok(CancelTarget::AlreadyCancelled { sequence: 11 }),
        "a retried cancel is still answered as done"
    );
    assert_eq!(
        s.jobs["j"].last_subject_sequence, 12,
        "the subject moved on all the same"
    );

    let mut s = state();
    submit_j_at_10(&mut s, true);
    s.apply(
        11,
        &event(Body::JobFinished(pb::JobFinished {
            job_id: "j".into(),
            exit_code: 0,
        })),
    );
    let cancelled = s.apply(
        12,
        &event(Body::JobCancelled(pb::JobCancelled {
            job_id: "j".into(),
            ..Default::default()
        })),
    );
    assert!(matches!(cancelled, Applied::Ignored(_)), "{cancelled:?}");
    assert_eq!(
        check_cancel(&s, &cancel, &limits).unwrap_err().code,
        RejectionCode::JobEnded as i32
    );
}

#[test]
fn the_fold_and_early_notes_agree() {
    // The shell notes its own write before the fold reaches it; the fold must not change it.
    let mut noted = state();
    noted.note_accepted(
        "k",
        "j",
        "c",
        10,
        request_fingerprint(request("k", 1).spec.as_ref()),
    );
    let submitted = job_submitted(
        "j",
        &request("k", 1),
        fairshare_model::shape::Shape {
            nodes: 1,
            gpus_per_node: 1,
        },
    );
    noted.apply(10, &event(Body::JobSubmitted(submitted.clone())));
    let mut folded = state();
    folded.apply(10, &event(Body::JobSubmitted(submitted)));
    assert_eq!(noted.jobs, folded.jobs);
    assert_eq!(noted.keys, folded.keys);
}

#[test]
fn a_key_with_a_control_character_is_refused_by_name() {
    let limits = Limits::default();
    for key in ["a\nb", "a\rb", "tab\there", "nul\0"] {
        let err = check_submission(&state(), &request(key, 1), &limits).unwrap_err();
        assert_eq!(err.code, RejectionCode::BadIdempotencyKey as i32, "{key:?}");
        assert!(err.message.contains("control character"), "{}", err.message);
    }
    // Any other text is a key, unicode included.
    assert!(check_submission(&state(), &request("job-ü-1 ✓", 1), &limits).is_ok());
}

#[test]
fn a_user_or_job_name_with_a_control_character_is_refused() {
    let limits = Limits::default();
    let with = |user: &str, name: &str| {
        let mut r = request("k", 1);
        if let Some(spec) = r.spec.as_mut() {
            spec.user = user.into();
            spec.name = name.into();
        }
        check_submission(&state(), &r, &limits)
    };
    for (user, name, what) in [
        ("evil\u{1b}[31mred", "", "user"),
        ("ok", "line\nbreak", "name"),
        ("ok", "nul\0", "name"),
    ] {
        let err = with(user, name).unwrap_err();
        assert_eq!(
            err.code,
            RejectionCode::InvalidName as i32,
            "{user:?} {name:?}"
        );
        assert!(
            err.message
                .starts_with(&format!("{what} must not contain control characters")),
            "{}",
            err.message
        );
    }
    assert!(with("rené", "train ✓ run 2").is_ok());
}

#[test]
fn a_preempted_resumable_job_awaits_its_requeue_and_can_be_cancelled() {
    let limits = Limits::default();
    let cancel = pb::CancelRequest {
        job_id: "j".into(),
        ..Default::default()
    };
    for (resumable, cancellable) in [(true, true), (false, false)] {
        let mut s = state();
        submit_j_at_10(&mut s, resumable);
        let preempted = || {
            event(Body::JobPreempted(pb::JobPreempted {
                job_id: "j".into(),
                killed: false,
            }))
        };
        // A preemption of a job that holds no placement (a launcher's mistake, or forged) is
        // refused, as the decision and accounting services refuse it: the job stays queued and
        // cancellable, whether or not it could resume.
        assert!(matches!(s.apply(11, &preempted()), Applied::Ignored(_)));
        assert_eq!(
            check_cancel(&s, &cancel, &limits),
            Ok(CancelTarget::Cancel {
                cluster: "c".into(),
                expected_last_subject_sequence: 11
            })
        );
        s.apply(
            12,
            &event(Body::JobPlaced(pb::JobPlaced {
                job_id: "j".into(),
                ..Default::default()
            })),
        );
        s.apply(
            13,
            &event(Body::JobStarted(pb::JobStarted { job_id: "j".into() })),
        );
        assert_eq!(s.apply(14, &preempted()), Applied::Applied);
        // Between the preemption and the requeue: a resumable job comes back, so a cancel
        // must still stop it; any other job has ended, and a requeue (which the decision
        // service refuses for it) does not bring it back.
        let answer = check_cancel(&s, &cancel, &limits);
        if cancellable {
            assert_eq!(
                answer,
                Ok(CancelTarget::Cancel {
                    cluster: "c".into(),
                    expected_last_subject_sequence: 14
                })
            );
        } else {
            assert_eq!(answer.unwrap_err().code, RejectionCode::JobEnded as i32);
            let requeued = event(Body::JobRequeued(pb::JobRequeued { job_id: "j".into() }));
            assert!(matches!(s.apply(15, &requeued), Applied::Ignored(_)));
            assert_eq!(
                check_cancel(&s, &cancel, &limits).unwrap_err().code,
                RejectionCode::JobEnded as i32
            );
        }
    }
}

#[test]
fn rejection_messages_are_bounded_whatever_was_submitted() {
    let mut req = request("k", 1);
    req.spec.as_mut().unwrap().allocation = "é".repeat(200_000);
    let err = check_submission(&state(), &req, &Limits::default()).unwrap_err();
    assert!(
        err.message.len() <= MAX_REJECTION_MESSAGE_BYTES,
        "{}",
        err.message.len()
    );
    assert!(err.message.ends_with('…'));
    assert_eq!(bounded("short".into(), 10), "short");
    assert_eq!(bounded("ééééé".into(), 7), "éé…");
}

#[test]
fn keys_and_ended_jobs_are_forgotten_a_day_of_log_time_later_and_live_jobs_are_not() {
    let mut s = state();
    let limits = Limits::default();
    let at = |ms: i64, body: Body| pb::Event {
        at_ms: ms,
        body: Some(body),
    };
    let tick = |s: &mut SubmissionState, seq: u64, ms: i64| {
        s.apply(seq, &at(ms, Body::UsageSnapshot(Default::default())));
    };
    let finished = |job: &str| {
        Body::JobFinished(pb::JobFinished {
            job_id: job.into(),
            exit_code: 0,
        })
    };
    let shape = fairshare_model::shape::Shape {
        nodes: 1,
        gpus_per_node: 1,
    };
    let t0 = 1_000_000;
    for (seq, key, job) in [(10, "k-done", "done"), (11, "k-live", "live")] {
        let submitted = job_submitted(job, &request(key, 1), shape);
        s.apply(seq, &at(t0, Body::JobSubmitted(submitted)));
    }
    s.apply(12, &at(t0 + 5_000, finished("done")));
    let cancel = |job: &str| pb::CancelRequest {
        job_id: job.into(),
        ..Default::default()
    };
    let repeat = |s: &SubmissionState, key: &str| {
        matches!(
            check_submission(s, &request(key, 1), &limits),
            Ok(Checked::Repeat { .. })
        )
    };

    // Just before a day has passed, in the log's time, everything is remembered.
    tick(&mut s, 13, t0 + FORGET_AFTER_MS - 1);
    assert!(repeat(&s, "k-done") && repeat(&s, "k-live"));
    assert_eq!(
        check_cancel(&s, &cancel("done"), &limits).unwrap_err().code,
        RejectionCode::JobEnded as i32
    );

    // A day after it was logged the ended job's key is gone: a retry now is a new submission.
    // The live job's key stays while the job lives.
    tick(&mut s, 14, t0 + FORGET_AFTER_MS);
    assert!(!repeat(&s, "k-done") && repeat(&s, "k-live"));
    assert!(matches!(
        check_submission(&s, &request("k-done", 1), &limits),
        Ok(Checked::New(_))
    ));
    // The ended job is still known until a day after it ended; the live one stays.
    assert_eq!(s.jobs.len(), 2);
    tick(&mut s, 15, t0 + 5_000 + FORGET_AFTER_MS);
    assert_eq!(
        check_cancel(&s, &cancel("done"), &limits).unwrap_err().code,
        RejectionCode::UnknownJob as i32,
        "forgotten"
    );
    assert!(matches!(
        check_cancel(&s, &cancel("live"), &limits),
        Ok(CancelTarget::Cancel { .. })
    ));
    assert_eq!(s.jobs.keys().collect::<Vec<_>>(), ["live"]);
    assert_eq!(s.keys.keys().collect::<Vec<_>>(), ["k-live"]);

    // Once the live job ends, its key and then the job go within a day.
    let ended = t0 + 5_000 + FORGET_AFTER_MS + 10;
    s.apply(16, &at(ended, finished("live")));
    tick(&mut s, 17, ended + FORGET_AFTER_MS);
    assert!(
        s.keys.is_empty() && s.jobs.is_empty() && s.forget.is_empty(),
        "{:?} {:?} {:?}",
        s.keys,
        s.jobs,
        s.forget
    );

    // An event stamped in the past does not move the log's time back.
    tick(&mut s, 18, t0);
    assert_eq!(s.log_time_ms, ended + FORGET_AFTER_MS);
}

#[test]
fn the_log_time_is_the_streams_when_it_says_so_whatever_the_event_claims() {
    let mut s = state();
    let shape = fairshare_model::shape::Shape {
        nodes: 1,
        gpus_per_node: 1,
    };
    let submitted = job_submitted("j", &request("k", 1), shape);
    let stored = 5_000_000;
    s.apply_stored(
        10,
        &pb::Event {
            at_ms: stored,
            body: Some(Body::JobSubmitted(submitted)),
        },
        Some(stored),
    );
    // A writer whose clock is a year ahead: its event's own time is not the log's.
    let year = 365 * FORGET_AFTER_MS;
    let ahead = pb::Event {
        at_ms: stored + year,
        body: Some(Body::UsageSnapshot(Default::default())),
    };
    s.apply_stored(11, &ahead, Some(stored + 1));
    assert_eq!(s.log_time_ms, stored + 1);
    assert!(s.keys.contains_key("k"), "not forgotten by a skewed clock");
    // Without a stored time (the simulator, tests) the event's time is all there is.
    s.apply(12, &ahead);
    assert_eq!(s.log_time_ms, stored + year);
}

/// A requeue of a job that ended (which the decision service refuses: only a resumable job
/// is requeued, and it never ended) brings back no record: the ended job is forgotten on time.
#[test]
fn a_job_requeued_after_it_ended_stays_ended_and_is_forgotten() {
    let mut s = state();
    let at = |ms: i64, body: Body| pb::Event {
        at_ms: ms,
        body: Some(body),
    };
    s.note_accepted("k", "j", "c", 10, 0);
    s.apply(
        11,
        &at(
            0,
            Body::JobPlaced(pb::JobPlaced {
                job_id: "j".into(),
                ..Default::default()
            }),
        ),
    );
    // Not resumable (no submission folded): the preemption ends it.
    s.apply(
        12,
        &at(
            0,
            Body::JobPreempted(pb::JobPreempted {
                job_id: "j".into(),
                killed: true,
            }),
        ),
    );
    assert!(matches!(
        s.apply(
            13,
            &at(1, Body::JobRequeued(pb::JobRequeued { job_id: "j".into() })),
        ),
        Applied::Ignored(_)
    ));
    assert_eq!(s.jobs["j"].status, JobStatus::Ended);
    assert_eq!(s.jobs["j"].last_subject_sequence, 13);
    s.apply(
        14,
        &at(2 * FORGET_AFTER_MS, Body::UsageSnapshot(Default::default())),
    );
    assert!(!s.jobs.contains_key("j"));
}

#[test]
fn a_live_key_at_the_end_of_time_is_forgotten_rather_than_looked_at_for_ever() {
    let mut s = state();
    let shape = fairshare_model::shape::Shape {
        nodes: 1,
        gpus_per_node: 1,
    };
    let submitted = job_submitted("j", &request("k", 1), shape);
    s.apply(
        10,
        &pb::Event {
            at_ms: 0,
            body: Some(Body::JobSubmitted(submitted)),
        },
    );
    s.apply(
        11,
        &pb::Event {
            at_ms: i64::MAX,
            body: Some(Body::UsageSnapshot(Default::default())),
        },
    );
    assert!(s.keys.is_empty() && s.forget.is_empty());
    assert_eq!(s.jobs["j"].status, JobStatus::Active, "the live job stays");
}

/// An intake message is judged while every key answered up to the retry margin before it is
/// still remembered, and refused as expired from then on.
#[test]
fn an_intake_message_expires_before_keys_answered_just_before_it_are_forgotten() {
    let mut s = SubmissionState::default();
    let stored = 1_000_000;
    let limit = FORGET_AFTER_MS - INTAKE_RETRY_MARGIN_MS;
    s.advance_log_time(stored + limit - 1);
    assert!(!s.intake_expired(stored));
    s.advance_log_time(stored + limit);
    assert!(s.intake_expired(stored));
}

#[test]
fn a_minimum_runtime_over_the_cap_is_refused_in_hours_a_person_reads() {
    let s = state();
    let mut r = request("k", 1);
    if let Some(spec) = r.spec.as_mut() {
        spec.min_runtime_s = 9 * 3600;
    }
    let refused = check_submission(&s, &r, &Limits::default()).unwrap_err();
    assert_eq!(refused.code, RejectionCode::MinRuntimeOverCap as i32);
    assert_eq!(
        refused.message,
        "minimum runtime 32400 s (9 h) is over the cap of 28800 s (8 h)"
    );
}

#[test]
fn a_key_reused_rejection_is_no_outcome_of_the_key_and_does_not_shorten_its_memory() {
    let mut s = state();
    s.apply(10, &job_1_with_key_k());
    let forgets_before = s.forget.len();
    s.apply(
        11,
        &event(Body::JobRejected(pb::JobRejected {
            idempotency_key: "k".into(),
            cluster: "c".into(),
            rejection: Some(key_reused("k", "job-1")),
            intake_sequence: 3,
        })),
    );
    // Nothing new to forget, and the key still answers its own request.
    assert_eq!(s.forget.len(), forgets_before);
    assert!(matches!(
        check_submission(&s, &request("k", 1), &Limits::default()),
        Ok(Checked::Repeat { .. })
    ));
    // On a key the fold has forgotten (or never had), it does not become the key's answer.
    let mut fresh = state();
    fresh.apply(
        11,
        &event(Body::JobRejected(pb::JobRejected {
            idempotency_key: "gone".into(),
            cluster: "c".into(),
            rejection: Some(key_reused("gone", "job-0")),
            intake_sequence: 3,
        })),
    );
    assert!(!fresh.keys.contains_key("gone"));
}

#[test]
fn a_later_entry_with_an_answered_key_does_not_cut_short_a_new_acceptances_memory() {
    let at = |ms: i64, body: Body| pb::Event {
        at_ms: ms,
        body: Some(body),
    };
    let shape = fairshare_model::shape::Shape {
        nodes: 1,
        gpus_per_node: 1,
    };
    let accepted = |job: &str| Body::JobSubmitted(job_submitted(job, &request("k", 1), shape));
    let finished = |job: &str| {
        Body::JobFinished(pb::JobFinished {
            job_id: job.into(),
            exit_code: 0,
        })
    };
    let rejected = Body::JobRejected(pb::JobRejected {
        idempotency_key: "k".into(),
        cluster: "c".into(),
        rejection: Some(pb::Rejection {
            code: RejectionCode::UnknownAllocation as i32,
            message: "another request's answer".into(),
        }),
        intake_sequence: 3,
    });
    // Two entries after "k"'s outcome that change no outcome: another request's rejection,
    // and a second acceptance of the key (two instances racing).
    let later_entries: [(&str, Body); 2] = [
        ("a rejection", rejected),
        ("an acceptance", accepted("twin")),
    ];
    for (what, later) in later_entries {
        let mut s = state();
        let t0 = 1_000_000;
        s.apply(10, &at(t0, accepted("first")));
        s.apply(11, &at(t0 + 1_000, finished("first")));
        let half_day = FORGET_AFTER_MS / 2;
        s.apply(12, &at(t0 + half_day, later));
        // A day after its outcome the key is forgotten, and a new submission takes it.
        s.apply(13, &at(t0 + FORGET_AFTER_MS + 1, accepted("second")));
        assert!(
            matches!(s.keys.get("k"), Some(KeyOutcome::Accepted { job_id, .. }) if job_id == "second"),
            "{what}: {:?}",
            s.keys
        );
        // Its job ends at once (a live job's key is kept anyway). Half a day into the new
        // acceptance's day, its key still answers retries: one forgotten now would start a
        // second job.
        s.apply(14, &at(t0 + FORGET_AFTER_MS + 2, finished("second")));
        s.apply(
            15,
            &at(
                t0 + half_day + FORGET_AFTER_MS + 1,
                Body::UsageSnapshot(Default::default()),
            ),
        );
        assert!(
            matches!(
                check_submission(&s, &request("k", 1), &Limits::default()),
                Ok(Checked::Repeat { ref job_id, .. }) if job_id == "second"
            ),
            "{what}: the key was forgotten early: {:?}",
            s.keys
        );
    }
}
