//! What the launcher knows about its cluster's jobs, folded from the log, and what it should do
//! next. Pure: time is an argument.
//!
//! Every action names the sequence of the job's newest event it saw; the runner appends with that
//! as the expected last sequence over the job's subjects, so a start never lands after a cancel
//! and a finish never lands twice.

use std::collections::BTreeMap;

use fairshare_events::pb::{self, event::Body};

/// Where one job stands for the launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Submitted, not placed.
    Queued,
    /// Placed by the decision service; the launcher should start it.
    Placed,
    /// Running since `since_ms`.
    Running {
        /// When it started (the JobStarted event time).
        since_ms: i64,
    },
    /// Told to stop (preemption ordered); the launcher confirms.
    Stopping,
    /// Preempted, waiting for its requeue (a job that ended for good is forgotten).
    Ended,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Run time the job needs, in job time (milliseconds), from its payload.
    pub duration_ms: i64,
    /// Where it stands.
    pub phase: Phase,
    /// Sequence of its newest event.
    pub last_sequence: u64,
    /// An action was sent for the current phase; do not send it again until the log moves.
    pub acted: bool,
    /// Whether its work survives a preemption (up to its last checkpoint).
    pub resumable: bool,
    /// When its current run started, if it runs (or is being stopped).
    pub run_since_ms: Option<i64>,
    /// Clock time of each earlier run that a preemption ended, for a resumable job: the work
    /// of each up to its last checkpoint is done ([`CHECKPOINT_INTERVAL_MS`]).
    pub earlier_runs_ms: Vec<i64>,
    /// Longest one run may last, in job time (`time_limit_s`; `None`: no limit). The launcher
    /// enforces it: no service stops a job for running past it.
    pub time_limit_ms: Option<i64>,
}

/// How often a resumable job checkpoints, in job time: the product's default checkpoint
/// interval, as the simulator's launcher assumes. A preempted resumable job keeps the work up
/// to its last checkpoint of each run; any other job starts over.
pub const CHECKPOINT_INTERVAL_MS: i64 = 30 * 60 * 1000;

impl Job {
    /// Job time still to run, with job time `scale` times faster than the clock.
    fn remaining_ms(&self, scale: i64) -> i64 {
        let banked: i64 = self
            .earlier_runs_ms
            .iter()
            .map(|run| run.saturating_mul(scale) / CHECKPOINT_INTERVAL_MS * CHECKPOINT_INTERVAL_MS)
            .fold(0, i64::saturating_add);
        self.duration_ms.saturating_sub(banked).max(0)
    }

    /// The report of the current run's end (started at `since_ms`, due now): its time limit
    /// ended it, or it finished.
    fn end_of_run(&self, id: &str, expected: u64, since_ms: i64, scale: i64) -> Action {
        match self.time_limit_ms {
            Some(limit) if self.run_end(since_ms, scale).1 => Action::FailTimeLimit {
                job_id: id.to_owned(),
                expected,
                limit_s: limit / 1000,
            },
            _ => Action::Finish {
                job_id: id.to_owned(),
                expected,
            },
        }
    }

    /// When the current run, started at `since_ms`, ends by itself, and whether its time limit
    /// ends it (before its work is done), with job time `scale` times faster than the clock.
    fn run_end(&self, since_ms: i64, scale: i64) -> (i64, bool) {
        let remaining = self.remaining_ms(scale);
        match self.time_limit_ms {
            Some(limit) if limit < remaining => (since_ms.saturating_add(limit / scale), true),
            _ => (since_ms.saturating_add(remaining / scale), false),
        }
    }
}

/// Something to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Confirm a placement.
    Start {
        /// The job.
        job_id: String,
        /// Its newest event's sequence.
        expected: u64,
    },
    /// Report the end of a run.
    Finish {
        /// The job.
        job_id: String,
        /// Its newest event's sequence.
        expected: u64,
    },
    /// Report a run its time limit ended before its work was done.
    FailTimeLimit {
        /// The job.
        job_id: String,
        /// Its newest event's sequence.
        expected: u64,
        /// The limit, in seconds of job time.
        limit_s: i64,
    },
    /// Confirm a preemption order.
    ConfirmPreempted {
        /// The job.
        job_id: String,
        /// Its newest event's sequence.
        expected: u64,
    },
}

/// Reads `sleep <seconds>` from a payload; anything else runs for `default_ms`.
pub fn duration_from_payload(payload: &[u8], default_ms: i64) -> i64 {
    std::str::from_utf8(payload)
        .ok()
        .and_then(|p| p.trim().strip_prefix("sleep "))
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|s| *s >= 0)
        .map_or(default_ms, |s| s.saturating_mul(1000))
}

/// The launcher's view of one cluster.
#[derive(Debug, Clone, Default)]
pub struct LauncherState {
    /// Jobs by id (sorted: actions come out in a stable order).
    pub jobs: BTreeMap<String, Job>,
    /// Run time of jobs whose payload names none.
    pub default_duration_ms: i64,
    /// Whether to confirm preemption orders (tests turn it off to exercise the grace deadline).
    pub honour_preemption: bool,
}

impl LauncherState {
    /// An empty view.
    pub fn new(default_duration_ms: i64, honour_preemption: bool) -> Self {
        Self {
            jobs: BTreeMap::new(),
            default_duration_ms,
            honour_preemption,
        }
    }

    /// Folds one of the cluster's job events. An event the job's life does not allow where
    /// the job stands (a start of a job never placed, a preemption of a queued one: a
    /// launcher's mistake or a forged event, which the decision and accounting services refuse
    /// too) changes nothing but the sequence the job's next append must expect; followed, it
    /// would have this launcher finish a job that never ran, or forget one the decision
    /// service still places.
    pub fn apply(&mut self, sequence: u64, event: &pb::Event) {
        let Some(body) = &event.body else { return };
        let job_id = match body {
            Body::JobSubmitted(s) => {
                let payload = s
                    .spec
                    .as_ref()
                    .map(|s| s.payload.as_ref())
                    .unwrap_or_default();
                let duration_ms = duration_from_payload(payload, self.default_duration_ms);
                let time_limit_ms = s
                    .spec
                    .as_ref()
                    .map(|s| s.time_limit_s)
                    .filter(|&l| l > 0)
                    .map(|l| l.saturating_mul(1000));
                self.jobs.entry(s.job_id.clone()).or_insert(Job {
                    duration_ms,
                    phase: Phase::Queued,
                    last_sequence: sequence,
                    acted: false,
                    resumable: s.spec.as_ref().is_some_and(|s| s.resumable),
                    run_since_ms: None,
                    earlier_runs_ms: Vec::new(),
                    time_limit_ms,
                });
                return;
            }
            Body::JobPlaced(e) => &e.job_id,
            Body::JobStarted(e) => &e.job_id,
            Body::PreemptionOrdered(e) => &e.job_id,
            Body::JobRequeued(e) => &e.job_id,
            Body::JobFinished(e) => &e.job_id,
            Body::JobFailed(e) => &e.job_id,
            Body::JobCancelled(e) => &e.job_id,
            Body::JobPreempted(e) => &e.job_id,
            _ => return,
        };
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        if sequence <= job.last_sequence {
            return;
        }
        job.last_sequence = sequence;
        job.acted = false;
        let live = matches!(
            job.phase,
            Phase::Placed | Phase::Running { .. } | Phase::Stopping
        );
        // A job that finished, failed or was cancelled never comes back, nor does a preempted
        // one that cannot resume (only a resumable one is requeued): it is forgotten, so `due`
        // looks at live jobs only, not at every job the cluster ever ran.
        let forget = match body {
            Body::JobFinished(_) | Body::JobFailed(_) | Body::JobCancelled(_) => true,
            Body::JobPreempted(_) => live && !job.resumable,
            _ => false,
        };
        if forget {
            self.jobs.remove(job_id);
            return;
        }
        let at = event.at_ms;
        match (body, job.phase) {
            (Body::JobPlaced(_), Phase::Queued) => job.phase = Phase::Placed,
            (Body::JobStarted(_), Phase::Placed) => {
                job.phase = Phase::Running { since_ms: at };
                job.run_since_ms = Some(at);
            }
            // Ordered off before it started, then started: it still has to stop.
            (Body::JobStarted(_), Phase::Stopping) if job.run_since_ms.is_none() => {
                job.run_since_ms = Some(at);
            }
            (Body::PreemptionOrdered(_), _) if live => job.phase = Phase::Stopping,
            (Body::JobPreempted(_), _) if live => {
                if let Some(since) = job.run_since_ms.take() {
                    job.earlier_runs_ms.push(at.saturating_sub(since).max(0));
                }
                job.phase = Phase::Ended;
            }
            (Body::JobRequeued(_), Phase::Ended) => job.phase = Phase::Queued,
            _ => {}
        }
    }

    /// Notes an entry at `sequence` on job `job_id`'s subject that [`Self::apply`] does not
    /// fold (bytes that do not decode, a misfiled event, a kind newer than this launcher):
    /// the services fold it as empty, but it moved the job's subject, so the next append for
    /// the job must expect it, or every append would be refused for good.
    pub fn saw(&mut self, job_id: &str, sequence: u64) {
        if let Some(job) = self.jobs.get_mut(job_id)
            && sequence > job.last_sequence
        {
            job.last_sequence = sequence;
            job.acted = false;
        }
    }

    /// What is due at `now_ms`, with job time running `time_scale` times faster than the clock;
    /// marks each job acted on. Finishes come first, so GPUs are freed before new starts.
    pub fn due(&mut self, now_ms: i64, time_scale: u32) -> Vec<Action> {
        let mut finishes = Vec::new();
        let mut others = Vec::new();
        let scale = i64::from(time_scale.max(1));
        for (id, job) in self.jobs.iter_mut().filter(|(_, j)| !j.acted) {
            let expected = job.last_sequence;
            let action = match job.phase {
                Phase::Placed => Action::Start {
                    job_id: id.clone(),
                    expected,
                },
                Phase::Running { since_ms } if now_ms >= job.run_end(since_ms, scale).0 => {
                    job.end_of_run(id, expected, since_ms, scale)
                }
                // Its run over already (its finish raced the order and was refused, the order
                // having moved the subject): it finished (or its limit ended it), whatever the
                // order says. Confirming the stop instead would requeue a job that has nothing
                // left to run.
                Phase::Stopping
                    if job
                        .run_since_ms
                        .is_some_and(|since| now_ms >= job.run_end(since, scale).0) =>
                {
                    let since = job.run_since_ms.unwrap_or_default();
                    job.end_of_run(id, expected, since, scale)
                }
                Phase::Stopping if self.honour_preemption => Action::ConfirmPreempted {
                    job_id: id.clone(),
                    expected,
                },
                _ => continue,
            };
            job.acted = true;
            match action {
                Action::Finish { .. } | Action::FailTimeLimit { .. } => finishes.push(action),
                _ => others.push(action),
            }
        }
        finishes.extend(others);
        finishes
    }

    /// Lets a job be acted on again (its append failed for a reason worth retrying).
    pub fn retry(&mut self, job_id: &str) {
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.acted = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at_ms: i64, body: Body) -> pb::Event {
        pb::Event {
            at_ms,
            body: Some(body),
        }
    }

    fn placed(id: &str) -> Body {
        Body::JobPlaced(pb::JobPlaced {
            job_id: id.into(),
            ..Default::default()
        })
    }

    fn started(id: &str) -> Body {
        Body::JobStarted(pb::JobStarted { job_id: id.into() })
    }

    fn ordered(id: &str) -> Body {
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: id.into(),
            ..Default::default()
        })
    }

    fn preempted(id: &str, killed: bool) -> Body {
        Body::JobPreempted(pb::JobPreempted {
            job_id: id.into(),
            killed,
        })
    }

    fn requeued(id: &str) -> Body {
        Body::JobRequeued(pb::JobRequeued { job_id: id.into() })
    }

    fn submitted(id: &str, payload: &'static [u8]) -> Body {
        Body::JobSubmitted(pb::JobSubmitted {
            job_id: id.into(),
            spec: Some(pb::JobSpec {
                payload: bytes::Bytes::from_static(payload),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn a_preempted_resumable_job_keeps_its_work_up_to_its_last_checkpoint() {
        let placed = placed("a");
        let started = started("a");
        let preempted = preempted("a", false);
        let requeued = requeued("a");
        // (A job that cannot resume ends with its preemption: nothing requeues it, see
        // `ended_jobs_are_forgotten_but_a_preempted_one_comes_back`.)
        let mut s = LauncherState::new(1_000, true);
        // Two hours of job time at 60x: two minutes of clock time.
        let mut submit = submitted("a", b"sleep 7200");
        if let Body::JobSubmitted(j) = &mut submit {
            j.spec.as_mut().unwrap().resumable = true;
        }
        s.apply(1, &ev(0, submit));
        s.apply(2, &ev(0, placed.clone()));
        s.apply(3, &ev(0, started.clone()));
        // Stopped after 100 s of clock time: 100 min of job time, 3 checkpoints (90 min).
        s.apply(4, &ev(100_000, preempted));
        s.apply(5, &ev(100_000, requeued));
        s.apply(6, &ev(150_000, placed));
        s.apply(7, &ev(200_000, started));
        // 30 min of job time left: 30 s.
        assert!(s.due(229_999, 60).is_empty());
        assert_eq!(
            s.due(230_000, 60),
            vec![Action::Finish {
                job_id: "a".into(),
                expected: 7
            }]
        );
    }

    #[test]
    fn a_run_past_its_time_limit_is_ended_as_failed_at_the_limit() {
        let limited = |id: &str, limit_s: i64, resumable: bool| {
            let mut submit = submitted(id, b"sleep 3600");
            if let Body::JobSubmitted(j) = &mut submit {
                let spec = j.spec.as_mut().unwrap();
                spec.time_limit_s = limit_s;
                spec.resumable = resumable;
            }
            submit
        };
        let mut s = LauncherState::new(1_000, true);
        // An hour of work under a 10-minute limit, at 60x: the limit ends it after 10 s.
        s.apply(1, &ev(0, limited("a", 600, false)));
        s.apply(2, &ev(0, placed("a")));
        s.apply(3, &ev(0, started("a")));
        // Over an hour of limit: the work ends it, a plain finish.
        s.apply(4, &ev(0, limited("b", 7200, false)));
        s.apply(5, &ev(0, placed("b")));
        s.apply(6, &ev(0, started("b")));
        assert!(s.due(9_999, 60).is_empty());
        assert_eq!(
            s.due(10_000, 60),
            vec![Action::FailTimeLimit {
                job_id: "a".into(),
                expected: 3,
                limit_s: 600
            }]
        );
        assert!(s.due(59_999, 60).is_empty());
        assert_eq!(
            s.due(60_000, 60),
            vec![Action::Finish {
                job_id: "b".into(),
                expected: 6
            }]
        );
        // The limit is per run: a resumable job requeued after 5 s (5 min, no checkpoint)
        // gets its 10 minutes again, counted from its new start.
        s.apply(7, &ev(0, limited("c", 600, true)));
        s.apply(8, &ev(0, placed("c")));
        s.apply(9, &ev(100_000, started("c")));
        s.apply(10, &ev(105_000, ordered("c")));
        s.apply(11, &ev(105_000, preempted("c", false)));
        s.apply(12, &ev(105_000, requeued("c")));
        s.apply(13, &ev(200_000, placed("c")));
        s.apply(14, &ev(200_000, started("c")));
        assert!(s.due(209_999, 60).is_empty());
        assert!(matches!(
            s.due(210_000, 60).as_slice(),
            [Action::FailTimeLimit { job_id, expected: 14, .. }] if job_id == "c"
        ));
    }

    #[test]
    fn payload_durations() {
        assert_eq!(duration_from_payload(b"sleep 90", 5), 90_000);
        assert_eq!(duration_from_payload(b"python x.py", 5), 5);
        assert_eq!(duration_from_payload(b"sleep -3", 5), 5);
    }

    #[test]
    fn placed_jobs_start_once_and_finish_after_their_scaled_duration() {
        let mut s = LauncherState::new(1_000, true);
        s.apply(1, &ev(0, submitted("a", b"sleep 60")));
        assert!(
            s.due(0, 1).is_empty(),
            "queued jobs are not started by the launcher"
        );
        s.apply(2, &ev(10, placed("a")));
        assert_eq!(
            s.due(20, 1),
            vec![Action::Start {
                job_id: "a".into(),
                expected: 2
            }]
        );
        assert!(s.due(30, 1).is_empty(), "not twice before the log moves");
        s.apply(3, &ev(1_000, started("a")));
        // 60 s of job time at 60x is 1 s of clock time.
        assert!(s.due(1_999, 60).is_empty());
        assert_eq!(
            s.due(2_000, 60),
            vec![Action::Finish {
                job_id: "a".into(),
                expected: 3
            }]
        );
        s.apply(
            4,
            &ev(
                2_000,
                Body::JobFinished(pb::JobFinished {
                    job_id: "a".into(),
                    exit_code: 0,
                }),
            ),
        );
        assert!(s.due(99_999, 1).is_empty());
    }

    #[test]
    fn cancelled_placement_is_not_started_and_old_events_do_not_rewind() {
        let mut s = LauncherState::new(1_000, true);
        s.apply(1, &ev(0, submitted("a", b"sleep 1")));
        s.apply(2, &ev(0, placed("a")));
        s.apply(
            3,
            &ev(
                0,
                Body::JobCancelled(pb::JobCancelled {
                    job_id: "a".into(),
                    ..Default::default()
                }),
            ),
        );
        s.apply(2, &ev(0, placed("a")));
        assert!(s.due(10, 1).is_empty());
    }

    #[test]
    fn ended_jobs_are_forgotten_but_a_preempted_one_comes_back() {
        let mut s = LauncherState::new(1_000, true);
        for (i, id) in ["done", "failed", "cancelled", "preempted", "lost"]
            .iter()
            .enumerate()
        {
            let mut body = submitted(id, b"sleep 1");
            if let Body::JobSubmitted(j) = &mut body
                && let Some(spec) = &mut j.spec
            {
                spec.resumable = *id != "lost";
            }
            s.apply(i as u64 + 1, &ev(0, body));
        }
        // Only a placed (or running) job is preempted.
        s.apply(6, &ev(0, placed("preempted")));
        s.apply(7, &ev(0, placed("lost")));
        s.apply(
            10,
            &ev(
                0,
                Body::JobFinished(pb::JobFinished {
                    job_id: "done".into(),
                    exit_code: 0,
                }),
            ),
        );
        s.apply(
            11,
            &ev(
                0,
                Body::JobFailed(pb::JobFailed {
                    job_id: "failed".into(),
                    ..Default::default()
                }),
            ),
        );
        s.apply(
            12,
            &ev(
                0,
                Body::JobCancelled(pb::JobCancelled {
                    job_id: "cancelled".into(),
                    ..Default::default()
                }),
            ),
        );
        s.apply(13, &ev(0, preempted("preempted", false)));
        s.apply(9, &ev(0, preempted("lost", true)));
        assert_eq!(
            s.jobs.keys().collect::<Vec<_>>(),
            ["preempted"],
            "only a job that may be requeued is kept"
        );
        s.apply(
            14,
            &ev(
                0,
                Body::JobRequeued(pb::JobRequeued {
                    job_id: "preempted".into(),
                }),
            ),
        );
        s.apply(15, &ev(0, placed("preempted")));
        assert_eq!(
            s.due(1, 1),
            vec![Action::Start {
                job_id: "preempted".into(),
                expected: 15
            }]
        );
    }

    #[test]
    fn an_entry_it_cannot_fold_still_moves_the_expected_sequence() {
        let mut s = LauncherState::new(1_000, true);
        s.apply(1, &ev(0, submitted("j", b"sleep 1")));
        s.apply(2, &ev(0, placed("j")));
        let start = |expected| {
            vec![Action::Start {
                job_id: "j".into(),
                expected,
            }]
        };
        assert_eq!(s.due(1, 1), start(2));
        // Garbage lands on the job's subject: the start expecting 2 is refused, and the
        // launcher must try again expecting 3, not wait for an event that never comes.
        s.saw("j", 3);
        assert_eq!(s.due(1, 1), start(3));
        s.saw("j", 3);
        assert_eq!(s.due(1, 1), vec![], "acted on already");
    }

    /// A finish that raced a preemption order and lost (the order moved the subject) is sent
    /// again after the order: the job's work is done, so it finished, and is not confirmed
    /// preempted (a resumable job would be requeued with nothing left to run). One whose work
    /// is not done is confirmed preempted, as before.
    #[test]
    fn a_job_whose_work_is_done_finishes_even_once_ordered_off() {
        for honour in [true, false] {
            let mut s = LauncherState::new(1_000, honour);
            s.apply(1, &ev(0, submitted("a", b"sleep 60")));
            s.apply(2, &ev(0, placed("a")));
            s.apply(3, &ev(1_000, started("a")));
            // The order lands before the finish (60 s at 60x: done at 2,000).
            s.apply(4, &ev(1_500, ordered("a")));
            let early = s.due(1_600, 60);
            if honour {
                assert_eq!(
                    early,
                    vec![Action::ConfirmPreempted {
                        job_id: "a".into(),
                        expected: 4
                    }]
                );
                // That confirmation was refused too (say): tried again once its work is done,
                // it is a finish.
                s.retry("a");
            } else {
                assert!(early.is_empty());
            }
            assert_eq!(
                s.due(2_000, 60),
                vec![Action::Finish {
                    job_id: "a".into(),
                    expected: 4
                }],
                "honour {honour}"
            );
        }
    }

    #[test]
    fn preemption_is_confirmed_only_when_honoured() {
        for honour in [true, false] {
            let mut s = LauncherState::new(1_000, honour);
            s.apply(1, &ev(0, submitted("a", b"sleep 100")));
            s.apply(2, &ev(0, placed("a")));
            s.apply(3, &ev(0, started("a")));
            s.apply(4, &ev(5, ordered("a")));
            let due = s.due(10, 1);
            assert_eq!(due.is_empty(), !honour);
        }
    }

    /// Events the job's life does not allow where it stands (a launcher's mistake, or forged)
    /// change nothing but the sequence to expect, as the decision and accounting services
    /// refuse them: a start of a queued job is not run and finished, a preemption of a queued
    /// job does not forget it, a requeue of a running job does not stop it.
    #[test]
    fn events_the_jobs_life_does_not_allow_only_move_the_sequence() {
        let mut s = LauncherState::new(1_000, true);
        s.apply(1, &ev(0, submitted("a", b"sleep 1")));
        s.apply(2, &ev(0, started("a")));
        s.apply(3, &ev(0, preempted("a", true)));
        s.apply(4, &ev(0, requeued("a")));
        assert_eq!(s.jobs["a"].phase, Phase::Queued);
        assert!(
            s.due(3_600_000, 1).is_empty(),
            "a queued job is not finished"
        );
        s.apply(5, &ev(10, placed("a")));
        s.apply(6, &ev(10, placed("a")));
        assert_eq!(
            s.due(20, 1),
            vec![Action::Start {
                job_id: "a".into(),
                expected: 6
            }]
        );
        s.apply(7, &ev(20, started("a")));
        s.apply(8, &ev(30, requeued("a")));
        s.apply(9, &ev(40, started("a")));
        assert_eq!(s.jobs["a"].phase, Phase::Running { since_ms: 20 });
        assert_eq!(
            s.due(1_020, 1),
            vec![Action::Finish {
                job_id: "a".into(),
                expected: 9
            }],
            "finished a second after its first start"
        );

        // Ordered off while placed, then started: it must still stop.
        s.apply(10, &ev(0, submitted("b", b"sleep 600")));
        s.apply(11, &ev(0, placed("b")));
        s.apply(12, &ev(0, ordered("b")));
        s.apply(13, &ev(5, started("b")));
        assert_eq!(s.jobs["b"].phase, Phase::Stopping);
        assert!(s.due(6, 1).contains(&Action::ConfirmPreempted {
            job_id: "b".into(),
            expected: 13
        }));
    }
}
