//! The fairshare policy on a virtual clock: the services' own domain code, driven in-process.
//!
//! Place in the flow: the simulator's counterpart of the whole running system. The world
//! (launchers submitting, jobs finishing, operators acting) comes from the [`agenda`]; after
//! every batch of happenings at one virtual time the services react in a fixed order until
//! nothing more happens at that time:
//!
//! 1. the accounting service publishes a `UsageSnapshot` if its interval has passed;
//! 2. the decision service runs a cycle ([`decide_placements`]: `decide` without the waiting
//!    reasons, the same placements) if some open GPU is free and work waits,
//!    appending its `JobPlaced` events with their basis; the [`launcher`] confirms each with
//!    `JobStarted`;
//! 3. the preemption service runs a pass ([`decide_preemptions_and_retry`]);
//!
//! and the preemption service's timer ([`next_due`], or sooner the next checkpoint of a victim
//! the last pass held back for its lost work) is put on the agenda, with, if
//! [`EngineConfig::periodic_pass_ms`] is set, its periodic pass. Everything appended
//! is a contract event folded by the same folds the services use ([`services`]), so the log
//! can be loaded into JetStream and audited like a production log.

pub mod agenda;
pub mod launcher;
pub mod services;
pub mod times;

use std::sync::Arc;

use fairshare_accounting::domain::FoldConfig;
use fairshare_decision::domain::debug::DEFAULT_DEBUG_ALLOWANCE_GPUS;
use fairshare_decision::domain::decide_placements;
use fairshare_events::pb::{self, event::Body};
use fairshare_preemption::domain::{self as preemption, decide_preemptions_and_retry, next_due};
use fairshare_submission::domain::{Checked, Limits, check_submission, job_submitted};

use crate::setup::{EPOCH_MS, Setup};
use crate::workload::{Workload, job_id};
use agenda::{Agenda, Happening};
use launcher::SimLauncher;
use services::Services;
use times::{Part, PartTimes};

/// How the simulated services and launcher behave.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The accounting window.
    pub window: FoldConfig,
    /// The preemption service's contract settings (grace, cap, checkpoint interval,
    /// hysteresis).
    pub preemption: preemption::Config,
    /// The submission service's limits.
    pub limits: Limits,
    /// How often the accounting service publishes a usage snapshot while the log moves.
    pub snapshot_interval_ms: i64,
    /// How long a job ordered off takes to stop and be confirmed by the launcher; at or past
    /// the grace period the preemption service kills it at the deadline instead.
    pub stop_delay_ms: i64,
    /// GPUs of debug work each allocation may run ahead of rank (0: no allowance).
    pub debug_allowance_gpus: u32,
    /// Whether the share floor is on (the services' setting), or ranking is by the window
    /// alone.
    pub share_floor: bool,
    /// Whether floors move with each hour's owed time (the services' setting), or stay at
    /// each allocation's fraction.
    pub hourly_floor: bool,
    /// The preemption service's periodic pass: at most this long after a step, another one
    /// runs, events or not (the service passes every 5 s). `None` (the default) steps only at
    /// happenings, at [`next_due`] and at the next checkpoint of a victim the last pass held
    /// back for its lost work ([`decide_preemptions_and_retry`]), which leaves out the hourly
    /// floors' moves within an hour (the next event, tens of seconds later on the bundled
    /// traces, sees them; [`next_due`] names the hour's end). On the bundled traces the
    /// periodic pass moves no headline figure beyond the spread of replicas and costs 2 to 4.5
    /// times the time (see the README, "Simulator").
    pub periodic_pass_ms: Option<i64>,
    /// Whether to time each part of the run ([`FairshareRun::times`], for the bench). It moves
    /// no outcome; off (the default), the run reads no clock.
    pub time_parts: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            window: FoldConfig::default(),
            preemption: preemption::Config::default(),
            limits: Limits::default(),
            snapshot_interval_ms: 10_000,
            stop_delay_ms: 10_000,
            debug_allowance_gpus: DEFAULT_DEBUG_ALLOWANCE_GPUS,
            share_floor: true,
            hourly_floor: true,
            periodic_pass_ms: None,
            time_parts: false,
        }
    }
}

impl EngineConfig {
    /// Every setting that moves fairshare's outcome, one line each, for the report: with the
    /// inputs listed beside them, equal lines and equal inputs give an equal report.
    pub fn settings(&self) -> Vec<String> {
        let on_off = |on: bool| if on { "on" } else { "off" };
        let p = &self.preemption;
        vec![
            // The services' cap on what a job may declare; what the mapping has jobs declare
            // (`--min-runtime-cap`) is among the mapping rules.
            format!(
                "longest minimum runtime honoured (--max-min-runtime): {}",
                duration(p.min_runtime_cap_ms)
            ),
            format!(
                "checkpoint interval (lost work, fresh-victim limits): {}",
                duration(p.checkpoint_interval_ms)
            ),
            format!(
                "hysteresis: {}.{}%",
                p.hysteresis_permille / 10,
                p.hysteresis_permille % 10
            ),
            format!("packing moves: {}", on_off(p.packing)),
            format!(
                "debug allowance: {} GPUs per allocation",
                self.debug_allowance_gpus
            ),
            format!("share floor: {}", on_off(self.share_floor)),
            format!("hourly floor: {}", on_off(self.hourly_floor)),
            format!("launcher stop delay: {}", duration(self.stop_delay_ms)),
            format!(
                "usage snapshot interval: {}",
                duration(self.snapshot_interval_ms)
            ),
            format!(
                "periodic preemption pass: {}",
                self.periodic_pass_ms
                    .filter(|ms| *ms > 0)
                    .map_or_else(|| "off".to_owned(), duration)
            ),
        ]
    }
}

/// `ms` in the largest unit that holds it exactly ("2 d", "8 h", "90 s", "1500 ms"): a setting
/// is shown as it was given, never rounded.
pub use fairshare_model::duration::exact_words as duration;

/// Counts of what the services did, for the report's footnotes and for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Submissions the submission checks rejected (nothing was written for them).
    pub rejected: u64,
    /// Decision cycles run.
    pub cycles: u64,
    /// Decision cycles that placed something.
    pub placing_cycles: u64,
    /// Decision cycles known to place nothing without ranking or packing: no queued job's
    /// shape fitted the free GPUs
    /// ([`fairshare_decision::domain::DecisionState::any_queued_shape_fits_in`]). Counted in
    /// `cycles` too.
    pub known_empty_cycles: u64,
    /// Preemption passes run.
    pub passes: u64,
    /// Usage snapshots published.
    pub snapshots: u64,
    /// Distinct virtual times processed.
    pub steps: u64,
}

/// A fairshare run: its log and what the services did.
#[derive(Debug, Clone)]
pub struct FairshareRun {
    /// The log, as JetStream would hold it (sequence = index + 1).
    pub log: Vec<pb::Event>,
    /// Counts.
    pub stats: EngineStats,
    /// Wall time per part of the run, for the bench (never in the report: it varies); zero
    /// unless [`EngineConfig::time_parts`] asked for it.
    pub times: PartTimes,
}

/// The simulation in progress.
struct Engine<'a> {
    setup: &'a Setup,
    workload: &'a Workload,
    config: &'a EngineConfig,
    services: Services,
    launcher: SimLauncher,
    agenda: Agenda,
    stats: EngineStats,
    /// Decision cycle counter (stamped into each placement's basis).
    cycle: u64,
    /// Preemption pass counter.
    pass: u64,
    /// When the last snapshot was published, and the log length it covered.
    last_snapshot: Option<(i64, u64)>,
    /// The preemption timer currently on the agenda.
    wake_at: Option<i64>,
    /// When the last pass, which ordered nothing, held an order back until (a victim's next
    /// checkpoint, [`decide_preemptions_and_retry`]): the timer wakes then too.
    retry_at: Option<i64>,
    /// The periodic pass on the agenda (one at a time).
    periodic_at: Option<i64>,
}

/// Runs `workload` on `setup` under fairshare, calling `progress` with each virtual time
/// reached.
pub fn run(
    setup: &Setup,
    workload: &Workload,
    config: &EngineConfig,
    mut progress: impl FnMut(i64),
) -> FairshareRun {
    let mut engine = Engine {
        setup,
        workload,
        config,
        services: Services::new(&setup.cluster, config),
        launcher: SimLauncher::new(config.preemption.checkpoint_interval_ms),
        agenda: Agenda::default(),
        stats: EngineStats::default(),
        cycle: 0,
        pass: 0,
        last_snapshot: None,
        wake_at: None,
        retry_at: None,
        periodic_at: None,
    };
    // Seven to ten events per job on the bundled traces (submitted, placed, started,
    // finished, a share of snapshots and preemptions; 10.2 for msft-itp at 1,024 GPUs):
    // reserved once for twelve, the log of hundreds of thousands of events is not copied
    // (and its pages cleared) when it outgrows its buffer.
    engine
        .services
        .log
        .reserve(workload.jobs.len().saturating_mul(12));
    for event in setup.initial_events(EPOCH_MS) {
        engine.services.append(event);
    }
    for (i, job) in workload.jobs.iter().enumerate() {
        engine.agenda.schedule(job.submit_ms, Happening::Submit(i));
    }
    for (i, action) in workload.actions.iter().enumerate() {
        engine.agenda.schedule(action.at_ms, Happening::Action(i));
    }
    while let Some(now) = engine.agenda.next_time() {
        if now >= setup.end_ms {
            break;
        }
        progress(now);
        engine.stats.steps += 1;
        while let Some(h) = engine.agenda.pop_at(now) {
            engine.happen(now, h);
        }
        engine.settle(now);
    }
    FairshareRun {
        log: engine.services.log,
        stats: engine.stats,
        times: engine.services.times,
    }
}

fn event(at_ms: i64, body: Body) -> pb::Event {
    pb::Event {
        at_ms,
        body: Some(body),
    }
}

impl Engine<'_> {
    fn happen(&mut self, now: i64, what: Happening) {
        match what {
            Happening::Submit(i) => self.submit(now, i),
            Happening::Action(i) => {
                if let Some(a) = self.workload.actions.get(i) {
                    let body = a.action.body(&self.setup.cluster);
                    self.append(event(now, body));
                }
            }
            Happening::Finish { job_id, run } => {
                if self.launcher.is_running(&job_id, run) {
                    self.append(event(
                        now,
                        Body::JobFinished(pb::JobFinished {
                            job_id: job_id.to_string(),
                            exit_code: 0,
                        }),
                    ));
                }
            }
            Happening::StopConfirmed { job_id, run } => {
                let ordered = self.services.preemption.orders().contains_key(&*job_id);
                if ordered && self.launcher.is_running(&job_id, run) {
                    self.append(event(
                        now,
                        Body::JobPreempted(pb::JobPreempted {
                            job_id: job_id.to_string(),
                            killed: false,
                        }),
                    ));
                }
            }
            Happening::Wake => {
                if self.wake_at == Some(now) {
                    self.wake_at = None;
                }
            }
        }
    }

    fn submit(&mut self, now: i64, index: usize) {
        let Some(job) = self.workload.jobs.get(index) else {
            return;
        };
        let request = job.request(&self.setup.cluster);
        let start = self.services.times.start();
        let checked = check_submission(&self.services.submission, &request, &self.config.limits);
        self.services.times.add_since(Part::SubmissionChecks, start);
        match checked {
            Ok(Checked::New(shape)) => {
                let id = job_id(index, job.submit_ms);
                self.launcher
                    .accepted(Arc::from(id.as_str()), job.duration_ms, job.resumable);
                let body = job_submitted(&id, &request, shape);
                self.append(event(now, Body::JobSubmitted(body)));
            }
            Ok(Checked::Repeat { .. }) | Err(_) => self.stats.rejected += 1,
        }
    }

    /// Appends an event and lets the launcher react to it.
    fn append(&mut self, e: pb::Event) {
        let now = e.at_ms;
        let reaction = match &e.body {
            Some(Body::PreemptionOrdered(o)) => self
                .launcher
                .running_run(&o.job_id)
                .map(|run| (Arc::<str>::from(o.job_id.as_str()), run)),
            Some(Body::JobPreempted(p)) => {
                self.launcher.stopped(&p.job_id, now);
                None
            }
            Some(Body::JobFinished(f)) => {
                self.launcher.ended(&f.job_id);
                None
            }
            _ => None,
        };
        self.services.append(e);
        if let Some((job_id, run)) = reaction {
            self.agenda.schedule(
                now.saturating_add(self.config.stop_delay_ms.max(0)),
                Happening::StopConfirmed { job_id, run },
            );
        }
    }

    /// The services react at `now` until nothing more happens.
    fn settle(&mut self, now: i64) {
        // A pass that appended nothing after the cycle means both services are settled: the
        // cycle already saw everything before the pass. A pass that acted (orders, kills,
        // requeues) may have freed or queued work, so the cycle runs again. Each round acts,
        // which cannot repeat without bound at one instant; the cap only guards a bug.
        for _ in 0..64 {
            self.decision_cycle(now);
            if !self.preemption_pass(now) {
                break;
            }
        }
        self.set_wake(now);
        self.set_periodic(now);
    }

    /// Puts the periodic pass on the agenda unless one is still ahead: a step at `now` ran a
    /// pass, so the next is due `periodic_pass_ms` later at the latest.
    fn set_periodic(&mut self, now: i64) {
        let Some(every) = self.config.periodic_pass_ms.filter(|ms| *ms > 0) else {
            return;
        };
        if self.periodic_at.is_none_or(|at| at <= now) {
            let at = now.saturating_add(every);
            self.periodic_at = Some(at);
            self.agenda.schedule(at, Happening::Wake);
        }
    }

    fn snapshot_if_due(&mut self, now: i64) {
        let log_len = self.services.last_sequence();
        let due = match self.last_snapshot {
            None => true,
            Some((at, covered)) => {
                covered < log_len && now.saturating_sub(at) >= self.config.snapshot_interval_ms
            }
        };
        if !due {
            return;
        }
        let start = self.services.times.start();
        let report = self.services.accounting.window(&self.setup.cluster, now);
        self.services.times.add_since(Part::Snapshots, start);
        let Ok(report) = report else {
            return;
        };
        let window_ms = self.config.window.window_ms();
        let body = Body::UsageSnapshot(report.to_snapshot(log_len, window_ms));
        self.append(event(now, body));
        self.stats.snapshots += 1;
        self.last_snapshot = Some((now, log_len));
    }

    fn decision_cycle(&mut self, now: i64) -> bool {
        let room = {
            let state = self.services.preemption.decision();
            if state.queued_len() == 0 {
                return false;
            }
            // No free GPU on an uncordoned node: no cycle (and no snapshot for one). GPUs
            // promised to a waiting job count as free here: that job may take them.
            let free = state.free_room();
            if !free.any_free() {
                return false;
            }
            state.free_room_at_given(now, free)
        };
        self.snapshot_if_due(now);
        self.cycle += 1;
        self.stats.cycles += 1;
        // In a full cluster most cycles find no queued shape that fits what is free: their
        // outcome (nothing) is known without the ranking and packing. GPUs promised to a
        // waiting job are free for that job alone, so they count only for it. (The snapshot
        // just appended changes no node's load.)
        let start = self.services.times.start();
        let fits = self
            .services
            .preemption
            .decision()
            .any_queued_shape_fits_at(&room, now);
        if !fits {
            self.services.times.add_since(Part::DecisionCycles, start);
            self.stats.known_empty_cycles += 1;
            return false;
        }
        let placed = decide_placements(self.services.preemption.decision(), now).events(self.cycle);
        self.services.times.add_since(Part::DecisionCycles, start);
        if placed.is_empty() {
            return false;
        }
        self.stats.placing_cycles += 1;
        let ids: Vec<String> = placed
            .iter()
            .filter_map(|e| match &e.body {
                Some(Body::JobPlaced(p)) => Some(p.job_id.clone()),
                _ => None,
            })
            .collect();
        for e in placed {
            self.append(e);
        }
        for id in ids {
            if let Some((finish_at, run)) = self.launcher.start(&id, now) {
                self.append(event(
                    now,
                    Body::JobStarted(pb::JobStarted { job_id: id.clone() }),
                ));
                self.agenda.schedule(
                    finish_at,
                    Happening::Finish {
                        job_id: Arc::from(id.as_str()),
                        run,
                    },
                );
            }
        }
        true
    }

    fn preemption_pass(&mut self, now: i64) -> bool {
        self.stats.passes += 1;
        let start = self.services.times.start();
        let (mut bodies, retry_at) =
            decide_preemptions_and_retry(&self.services.preemption, now, &self.config.preemption);
        self.retry_at = retry_at;
        self.services.times.add_since(Part::PreemptionPasses, start);
        if bodies.is_empty() {
            return false;
        }
        self.pass += 1;
        preemption::stamp_cycle(&mut bodies, self.pass);
        for e in preemption::into_events(bodies, now) {
            self.append(e);
        }
        true
    }

    fn set_wake(&mut self, now: i64) {
        let start = self.services.times.start();
        let due = next_due(&self.services.preemption, now, &self.config.preemption);
        self.services.times.add_since(Part::Timers, start);
        let Some(due) = [due, self.retry_at].into_iter().flatten().min() else {
            return;
        };
        if due > now && self.wake_at.is_none_or(|w| due < w || w <= now) {
            self.wake_at = Some(due);
            self.agenda.schedule(due, Happening::Wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EngineConfig;

    #[test]
    fn settings_name_every_knob_that_moves_the_outcome() {
        let default = EngineConfig::default();
        let lines = default.settings();
        for expected in [
            "longest minimum runtime honoured (--max-min-runtime): 8 h",
            "checkpoint interval (lost work, fresh-victim limits): 30 min",
            "hysteresis: 10.0%",
            "packing moves: on",
            "debug allowance: 16 GPUs per allocation",
            "share floor: on",
            "hourly floor: on",
            "launcher stop delay: 10 s",
            "usage snapshot interval: 10 s",
            "periodic preemption pass: off",
        ] {
            assert!(
                lines.iter().any(|l| l == expected),
                "{expected} in {lines:?}"
            );
        }
        // Each knob changed alone changes the lines.
        let mut changed: Vec<EngineConfig> = vec![default.clone(); 10];
        changed[0].preemption.min_runtime_cap_ms += 1_000;
        changed[1].preemption.checkpoint_interval_ms += 60_000;
        changed[2].preemption.hysteresis_permille += 5;
        changed[3].preemption.packing = false;
        changed[4].debug_allowance_gpus = 0;
        changed[5].share_floor = false;
        changed[6].hourly_floor = false;
        changed[7].stop_delay_ms += 1_000;
        changed[8].snapshot_interval_ms += 1_000;
        changed[9].periodic_pass_ms = Some(5_000);
        for (i, c) in changed.iter().enumerate() {
            assert_ne!(c.settings(), lines, "knob {i}");
        }
    }
}
