//! What the submission service knows, folded from the log: each cluster's budget tree and
//! inventory, every job accepted (its cluster, whether it has ended, and the last sequence on
//! its subject for optimistic concurrency), and every idempotency key's first outcome.
//!
//! Applying is idempotent: an event at or below the last applied sequence is skipped, and the
//! shell may record its own accepted submissions early (see [`SubmissionState::note_accepted`])
//! because the later fold of the same event writes the same values.
//!
//! Nothing is kept for ever: an idempotency key is forgotten [`FORGET_AFTER_MS`] after its
//! outcome was logged (or, if its job still lives then, within that long after the job ends),
//! and a job that ended or was cancelled that long after it did, so a service that runs for
//! months holds a day of history, not all of it. Time here is the log's
//! own ([`SubmissionState::log_time_ms`]: the newest time the stream stored an entry at, or
//! without one the newest event time), never the wall clock, so a fold rebuilt from the log
//! forgets exactly what the running one forgot. A retry of a forgotten key is a new
//! submission, and a forgotten job is an unknown one to `cancel`.

use std::collections::{BTreeMap, HashMap};

use fairshare_events::pb::{self, event::Body};
use fairshare_model::budget::BudgetTree;
use fairshare_model::inventory::Inventory;
use fairshare_model::stored;
use serde::{Deserialize, Serialize};

/// How long a key's outcome, and an ended job, are remembered (log time): a day, far longer
/// than a launcher retries a submission.
pub const FORGET_AFTER_MS: i64 = 24 * 3_600_000;

/// How long before an intake message its key may have been answered and still be remembered
/// when the message is judged (see [`SubmissionState::intake_expired`]): a launcher whose
/// request/reply submit timed out falls back to the intake within this.
pub const INTAKE_RETRY_MARGIN_MS: i64 = 3_600_000;

/// A cluster as submission sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// The budget tree in force; `None` until one is set.
    #[serde(with = "stored::budget_tree")]
    pub budget: Option<BudgetTree>,
    /// Registered nodes.
    #[serde(with = "stored::inventory")]
    pub inventory: Inventory,
}

/// Where a job stands, as far as cancellation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobStatus {
    /// Queued, placed, running, or preempted and waiting to be requeued.
    Active,
    /// Cancelled, at the given stream sequence.
    Cancelled {
        /// Sequence of the cancellation event.
        sequence: u64,
    },
    /// Finished, failed, or preempted without requeue.
    Ended,
}

/// One accepted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The cluster it runs on (part of its subject).
    pub cluster: String,
    /// Where it stands.
    pub status: JobStatus,
    /// The last stream sequence on the job's subject.
    pub last_subject_sequence: u64,
    /// Whether a preemption requeues it (set from its `JobSubmitted` in the log): a preempted
    /// resumable job is waiting for its requeue, still cancellable, not ended.
    pub resumable: bool,
    /// Whether it holds a placement (placed, running or being stopped): only such a job is
    /// preempted, as the decision and accounting services hold.
    pub placed: bool,
}

/// A fingerprint of a submission's job spec (64-bit FNV-1a of its protobuf encoding, which is
/// the same for equal specs: no maps, fields in tag order): what tells a retry, which repeats
/// the request exactly, from another request that reuses its idempotency key. Stable across
/// builds and machines, since checkpoints keep it.
pub fn request_fingerprint(spec: Option<&pb::JobSpec>) -> u64 {
    use prost::Message;
    let bytes = spec.map(Message::encode_to_vec).unwrap_or_default();
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Whether a logged rejection is its key's outcome. A `KEY_REUSED` one is not: it answers a
/// request that reused a key another request holds, and must neither become that key's answer
/// nor schedule its forgetting (which would cut short how long the first job's key is kept).
fn is_key_outcome(rejected: &pb::JobRejected) -> bool {
    rejected
        .rejection
        .as_ref()
        .is_none_or(|r| r.code != pb::RejectionCode::KeyReused as i32)
}

/// The idempotency key an event may become the outcome of (a submission or a rejection).
fn event_key(event: &pb::Event) -> Option<&str> {
    match &event.body {
        Some(Body::JobSubmitted(s)) => Some(&s.idempotency_key),
        Some(Body::JobRejected(r)) => Some(&r.idempotency_key),
        _ => None,
    }
}

/// The first logged outcome of an idempotency key; it is final.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyOutcome {
    /// Accepted as this job, at this sequence.
    Accepted {
        /// The job id assigned.
        job_id: String,
        /// Sequence of the job-submitted event.
        sequence: u64,
        /// [`request_fingerprint`] of its job spec: a later request with the key and another
        /// spec is no retry, and is told so rather than answered with this job.
        request: u64,
    },
    /// Rejected (intake only; request/reply rejections are not logged).
    Rejected(#[serde(with = "rejection")] pb::Rejection),
}

/// Something the fold forgets once its time has come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Forget {
    /// An idempotency key's outcome.
    Key(String),
    /// A job, if it has ended (or was cancelled) by then.
    Job(String),
}

/// What applying one log entry did; the shell reports the ones that were ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The state changed, or the event carries nothing submission tracks.
    Applied,
    /// At or below the last applied sequence.
    Duplicate,
    /// Not applied, and why: an invalid budget tree, an event for an unknown job, ...
    Ignored(String),
}

/// The submission service's state; the shell's sled checkpoint holds it (serde).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubmissionState {
    /// Clusters by name.
    pub clusters: BTreeMap<String, ClusterView>,
    /// Accepted jobs by id.
    pub jobs: HashMap<String, JobRecord>,
    /// Outcomes by idempotency key.
    pub keys: HashMap<String, KeyOutcome>,
    /// The last stream sequence folded.
    pub last_sequence: u64,
    /// When the stream stored the entry at `last_sequence` (Unix ms), if the shell that folded
    /// it knew: a checkpoint names it, so that a resume can tell the log it was folded from
    /// from one rolled back and written anew.
    pub last_stored_ms: Option<i64>,
    /// The log's time: the newest stored (or, without one, event) time folded, Unix ms.
    pub log_time_ms: i64,
    /// What to forget, by (log time it is due at, sequence of the entry that scheduled it).
    pub forget: BTreeMap<(i64, u64), Forget>,
}

impl SubmissionState {
    /// Folds the log entry at `sequence`, its time taken from the event (the simulator's log,
    /// tests).
    pub fn apply(&mut self, sequence: u64, event: &pb::Event) -> Applied {
        self.apply_stored(sequence, event, None)
    }

    /// Folds the log entry at `sequence` that the stream stored at `stored_ms` (Unix ms, as
    /// [`fairshare_runtime`]'s log entries carry it; `None`: use the event's own time). The
    /// stored time is the server's, which no writer's clock can push ahead.
    pub fn apply_stored(
        &mut self,
        sequence: u64,
        event: &pb::Event,
        stored_ms: Option<i64>,
    ) -> Applied {
        if sequence <= self.last_sequence {
            return Applied::Duplicate;
        }
        self.last_sequence = sequence;
        self.advance_log_time(stored_ms.unwrap_or(event.at_ms));
        let key_known_before = event_key(event).is_some_and(|k| self.keys.contains_key(k));
        let applied = self.fold_body(sequence, event);
        self.schedule_forgetting(sequence, event, key_known_before);
        applied
    }

    /// Whether an intake message the stream stored at `stored_ms` (the server's clock, like
    /// the log time) is too old to judge. Keys are forgotten [`FORGET_AFTER_MS`] after their
    /// outcome once their job has ended, and the intake keeps messages far longer (30 days):
    /// a message that waited out an outage of a day could share its key with a submission
    /// answered just before it, already forgotten, and would start a second copy. One that has
    /// waited less than `FORGET_AFTER_MS - INTAKE_RETRY_MARGIN_MS` is judged as usual.
    pub fn intake_expired(&self, stored_ms: i64) -> bool {
        self.log_time_ms.saturating_sub(stored_ms)
            >= FORGET_AFTER_MS.saturating_sub(INTAKE_RETRY_MARGIN_MS)
    }

    /// Moves the log's time to `at_ms` if that is later, and forgets what came due.
    pub fn advance_log_time(&mut self, at_ms: i64) {
        self.log_time_ms = self.log_time_ms.max(at_ms);
        while let Some(entry) = self.forget.first_entry() {
            if entry.key().0 > self.log_time_ms {
                break;
            }
            let ((_, sequence), what) = entry.remove_entry();
            match what {
                Forget::Key(key) => {
                    // A key answers retries for as long as its job lives: one forgotten while
                    // the job still ran would let a late retry start a second copy. Looked at
                    // again a day later.
                    let live = match self.keys.get(&key) {
                        Some(KeyOutcome::Accepted { job_id, .. }) => self
                            .jobs
                            .get(job_id)
                            .is_some_and(|j| j.status == JobStatus::Active),
                        _ => false,
                    };
                    let again = self.log_time_ms.saturating_add(FORGET_AFTER_MS);
                    // (At the end of time there is no later: forgotten, or this would not end.)
                    if live && again > self.log_time_ms {
                        self.forget.insert((again, sequence), Forget::Key(key));
                    } else {
                        self.keys.remove(&key);
                    }
                }
                Forget::Job(job_id) => {
                    if self
                        .jobs
                        .get(&job_id)
                        .is_some_and(|j| j.status != JobStatus::Active)
                    {
                        self.jobs.remove(&job_id);
                    }
                }
            }
        }
    }

    /// Schedules what `event`, just folded at `sequence`, makes forgettable: a key whose
    /// outcome it logs, a job it ends. `key_known_before`: whether the event's key had an
    /// outcome before it was folded.
    ///
    /// Only the entry that is a key's outcome schedules the key's forgetting. A later entry
    /// with the key (another request's rejection, a second acceptance a racing instance wrote)
    /// changes no outcome, and a forgetting scheduled by it would come due a day after it,
    /// after the outcome's own has removed the key: by then the key may answer a new
    /// acceptance, whose memory it would cut short, so that a retry of that submission inside
    /// its day would start a second job.
    fn schedule_forgetting(&mut self, sequence: u64, event: &pb::Event, key_known_before: bool) {
        let what = match &event.body {
            // The shell notes its own acceptance before the fold reaches it, so "new" for an
            // acceptance is: the key's outcome is this very entry.
            Some(Body::JobSubmitted(s)) => match self.keys.get(&s.idempotency_key) {
                Some(KeyOutcome::Accepted { sequence: at, .. }) if *at == sequence => {
                    Forget::Key(s.idempotency_key.clone())
                }
                _ => return,
            },
            Some(Body::JobRejected(r)) if is_key_outcome(r) && !key_known_before => {
                Forget::Key(r.idempotency_key.clone())
            }
            Some(
                Body::JobCancelled(pb::JobCancelled { job_id, .. })
                | Body::JobFinished(pb::JobFinished { job_id, .. })
                | Body::JobFailed(pb::JobFailed { job_id, .. })
                | Body::JobPreempted(pb::JobPreempted { job_id, .. }),
            ) if self
                .jobs
                .get(job_id)
                .is_some_and(|j| j.status != JobStatus::Active) =>
            {
                Forget::Job(job_id.clone())
            }
            _ => return,
        };
        let due = self.log_time_ms.saturating_add(FORGET_AFTER_MS);
        self.forget.insert((due, sequence), what);
    }

    fn fold_body(&mut self, sequence: u64, event: &pb::Event) -> Applied {
        let Some(body) = &event.body else {
            return Applied::Ignored("event without body".into());
        };
        match body {
            Body::BudgetTreeSet(set) => match BudgetTree::from_accounts(&set.accounts) {
                Ok(tree) => {
                    self.clusters.entry(set.cluster.clone()).or_default().budget = Some(tree);
                    Applied::Applied
                }
                Err(e) => {
                    Applied::Ignored(format!("budget tree for {:?} ignored: {e}", set.cluster))
                }
            },
            Body::NodeRegistered(n) => {
                self.clusters
                    .entry(n.cluster.clone())
                    .or_default()
                    .inventory
                    .register(&n.node, n.gpus);
                Applied::Applied
            }
            Body::NodeRemoved(n) => {
                if let Some(c) = self.clusters.get_mut(&n.cluster) {
                    c.inventory.remove(&n.node);
                }
                Applied::Applied
            }
            Body::JobSubmitted(s) => {
                let cluster = s
                    .spec
                    .as_ref()
                    .map(|s| s.cluster.clone())
                    .unwrap_or_default();
                let request = request_fingerprint(s.spec.as_ref());
                self.note_accepted(&s.idempotency_key, &s.job_id, &cluster, sequence, request);
                if let Some(job) = self.jobs.get_mut(&s.job_id) {
                    job.resumable = s.spec.as_ref().is_some_and(|spec| spec.resumable);
                }
                Applied::Applied
            }
            Body::JobRejected(r) => {
                if is_key_outcome(r) {
                    let rejection = r.rejection.clone().unwrap_or_default();
                    self.keys
                        .entry(r.idempotency_key.clone())
                        .or_insert(KeyOutcome::Rejected(rejection));
                }
                Applied::Applied
            }
            Body::JobCancelled(e) => self.end_job(
                &e.job_id,
                sequence,
                JobStatus::Cancelled { sequence },
                "job_cancelled",
            ),
            Body::JobFinished(e) => {
                self.end_job(&e.job_id, sequence, JobStatus::Ended, "job_finished")
            }
            Body::JobFailed(e) => self.end_job(&e.job_id, sequence, JobStatus::Ended, "job_failed"),
            // A preempted job has ended unless it is resumable: then its requeue follows (the
            // preemption service writes it), and until then it may still be cancelled. Only a
            // placed job is preempted: the decision and accounting services refuse any other
            // (a launcher's mistake, or forged), and this fold ending it would refuse its
            // cancel while the decision service still places it.
            Body::JobPreempted(e) => {
                let Some(job) = self.jobs.get(&e.job_id) else {
                    return self.job_event(&e.job_id, sequence, None);
                };
                if !job.placed || job.status != JobStatus::Active {
                    self.job_event(&e.job_id, sequence, None);
                    return Applied::Ignored(format!(
                        "job_preempted for job {} that holds no placement",
                        e.job_id
                    ));
                }
                let status = if job.resumable {
                    JobStatus::Active
                } else {
                    JobStatus::Ended
                };
                self.set_placed(&e.job_id, false);
                self.job_event(&e.job_id, sequence, Some(status))
            }
            // Only a job still live is requeued: a requeue of one that ended would bring back
            // a record the forgetting never drops.
            Body::JobRequeued(e) => {
                let live = self
                    .jobs
                    .get(&e.job_id)
                    .is_some_and(|j| j.status == JobStatus::Active && !j.placed);
                if !live && self.jobs.contains_key(&e.job_id) {
                    self.job_event(&e.job_id, sequence, None);
                    return Applied::Ignored(format!(
                        "job_requeued for job {} that is not waiting for a requeue",
                        e.job_id
                    ));
                }
                self.job_event(&e.job_id, sequence, Some(JobStatus::Active))
            }
            Body::JobPlaced(e) => {
                if self
                    .jobs
                    .get(&e.job_id)
                    .is_some_and(|j| j.status == JobStatus::Active)
                {
                    self.set_placed(&e.job_id, true);
                }
                self.job_event(&e.job_id, sequence, None)
            }
            Body::JobStarted(e) => self.job_event(&e.job_id, sequence, None),
            Body::PreemptionOrdered(e) => self.job_event(&e.job_id, sequence, None),
            Body::NodeCordoned(_)
            | Body::NodeUncordoned(_)
            | Body::NodeDrained(_)
            | Body::MaintenanceScheduled(_)
            | Body::MaintenanceCancelled(_)
            | Body::UsageSnapshot(_) => Applied::Applied,
        }
    }

    fn set_placed(&mut self, job_id: &str, placed: bool) {
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.placed = placed;
        }
    }

    /// Ends a live job with `status`. The first end stands: the decision and accounting
    /// services ignore an end, or a cancel, of a job that has ended (a launcher reporting its
    /// kill after a cancel, say), so a later one here would answer a retried cancel with
    /// "ended" where the log says "cancelled", or the reverse.
    fn end_job(&mut self, job_id: &str, sequence: u64, status: JobStatus, event: &str) -> Applied {
        let ended = self
            .jobs
            .get(job_id)
            .is_some_and(|j| j.status != JobStatus::Active);
        if ended {
            self.job_event(job_id, sequence, None);
            return Applied::Ignored(format!("{event} for job {job_id} that has ended already"));
        }
        self.job_event(job_id, sequence, Some(status))
    }

    fn job_event(&mut self, job_id: &str, sequence: u64, status: Option<JobStatus>) -> Applied {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return Applied::Ignored(format!("event for unknown job {job_id}"));
        };
        job.last_subject_sequence = job.last_subject_sequence.max(sequence);
        if let Some(status) = status {
            job.status = status;
        }
        Applied::Applied
    }

    /// Notes that the log holds an entry at `sequence` on job `job_id`'s subject, whatever it
    /// said: an entry that does not decode, or whose body names another job, still moves the
    /// sequence a writer of that job must expect next (`Nats-Expected-Last-Subject-Sequence`).
    /// Unknown jobs are left alone.
    pub fn note_job_subject(&mut self, job_id: &str, sequence: u64) {
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.last_subject_sequence = job.last_subject_sequence.max(sequence);
        }
    }

    /// Forgets the acceptances noted ahead of the fold ([`SubmissionState::note_accepted`]
    /// for an entry past [`SubmissionState::last_sequence`]), keys and jobs: what a checkpoint
    /// at `last_sequence` may say, since the log it is resumed on may not hold them. Entries
    /// the fold applied are never past `last_sequence`.
    pub fn drop_noted_ahead(&mut self) {
        let through = self.last_sequence;
        self.keys.retain(|_, outcome| match outcome {
            KeyOutcome::Accepted { sequence, .. } => *sequence <= through,
            _ => true,
        });
        self.jobs
            .retain(|_, job| job.last_subject_sequence <= through);
    }

    /// Records an accepted submission. Called by the fold, and by the shell as soon as the
    /// stream acknowledged its own write, so a retry arriving before the fold catches up is
    /// still answered with the same job. The first outcome of a key wins.
    pub fn note_accepted(
        &mut self,
        key: &str,
        job_id: &str,
        cluster: &str,
        sequence: u64,
        request: u64,
    ) {
        self.keys
            .entry(key.to_owned())
            .or_insert(KeyOutcome::Accepted {
                job_id: job_id.to_owned(),
                sequence,
                request,
            });
        self.jobs.entry(job_id.to_owned()).or_insert(JobRecord {
            cluster: cluster.to_owned(),
            status: JobStatus::Active,
            last_subject_sequence: sequence,
            // Set when the fold applies the job's submission.
            resumable: false,
            placed: false,
        });
    }
}

/// A [`pb::Rejection`] as its code and message (the event types carry no serde of their own).
mod rejection {
    use fairshare_events::pb;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(r: &pb::Rejection, s: S) -> Result<S::Ok, S::Error> {
        (r.code, r.message.as_str()).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<pb::Rejection, D::Error> {
        let (code, message) = <(i32, String)>::deserialize(d)?;
        Ok(pb::Rejection { code, message })
    }
}
