//! The subject scheme.
//!
//! ```text
//! fairshare.api.submit                         request/reply: SubmitRequest -> SubmitReply
//! fairshare.api.cancel                         request/reply: CancelRequest -> CancelReply
//! fairshare.api.usage.<cluster>                request/reply: UsageQuery -> UsageReply
//! fairshare.api.explain.<cluster>              request/reply: ExplainRequest -> ExplainReply
//! fairshare.api.queue.<cluster>                request/reply: QueueRequest -> QueueReply
//! fairshare.intake.<cluster>                   FAIRSHARE_INTAKE: SubmitRequest, durable intake
//! fairshare.events.<cluster>.job.<job_id>.<kind>
//!                                              FAIRSHARE_EVENTS: one job's events, by kind
//!                                              (job_submitted, job_placed, job_started, ...)
//! fairshare.events.<cluster>.rejected          FAIRSHARE_EVENTS: intake submissions rejected
//! fairshare.events.<cluster>.policy            FAIRSHARE_EVENTS: budget tree set
//! fairshare.events.<cluster>.node.<node>       FAIRSHARE_EVENTS: node registered/cordoned/...
//! fairshare.events.<cluster>.maintenance       FAIRSHARE_EVENTS: maintenance scheduled
//! fairshare.events.<cluster>.usage             FAIRSHARE_EVENTS: usage snapshots
//! ```
//!
//! A job's events share the prefix `fairshare.events.<cluster>.job.<job_id>.`, and appends that
//! must not race (a cancel against a finish, a placement against a cancel) carry
//! `Nats-Expected-Last-Subject-Sequence` with `Nats-Expected-Last-Subject-Sequence-Subject` set
//! to [`job`] (the wildcard over the job's kinds): JetStream then refuses the append if any event
//! of that job landed since (reliable from nats-server 2.11). The kind in the subject lets each
//! consumer take only the kinds it folds, filtered by the server.
//!
//! Cluster and node names are single subject tokens, so they are restricted to
//! `[A-Za-z0-9][A-Za-z0-9_-]*` (see [`is_valid_token`]). Job ids are UUIDs, which qualify.
//! Intake rejections whose cluster name is not a valid token go to
//! `fairshare.events._.rejected`; `_` can never be a cluster name.

/// Request/reply subject for submissions.
pub const SUBMIT_API: &str = "fairshare.api.submit";
/// Request/reply subject for cancellations.
pub const CANCEL_API: &str = "fairshare.api.cancel";
/// Usage queries of one cluster (answered by the accounting service).
pub fn usage_api(cluster: &str) -> String {
    format!("fairshare.api.usage.{cluster}")
}

/// Explain requests of one cluster (answered by its decision service).
pub fn explain_api(cluster: &str) -> String {
    format!("fairshare.api.explain.{cluster}")
}

/// The decision service's queue listing for `cluster` (`QueueRequest` -> `QueueReply`).
pub fn queue_api(cluster: &str) -> String {
    format!("fairshare.api.queue.{cluster}")
}

/// Usage queries of every cluster: what an accounting instance serving all clusters listens on.
pub const USAGE_API_ALL: &str = "fairshare.api.usage.*";

/// Queue group the accounting service instances share.
pub const ACCOUNTING_QUEUE_GROUP: &str = "fairshare-accounting";

/// Queue group the submission service instances share, so each request is answered once.
pub const SUBMISSION_QUEUE_GROUP: &str = "fairshare-submission";

/// Prefix of every subject in the events stream.
pub const EVENTS_PREFIX: &str = "fairshare.events";
/// Prefix of every subject in the intake stream.
pub const INTAKE_PREFIX: &str = "fairshare.intake";
/// Stand-in cluster token for rejections whose cluster name cannot be a subject token.
pub const INVALID_CLUSTER_TOKEN: &str = "_";

/// Longest cluster or node name accepted.
pub const MAX_TOKEN_LEN: usize = 64;

/// Whether `name` can be a cluster or node name (one subject token, no wildcards or dots).
pub fn is_valid_token(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    name.len() <= MAX_TOKEN_LEN && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The subject of one job event; `kind` is the event's [`crate::codec::event_kind`].
pub fn job_event(cluster: &str, job_id: &str, kind: &str) -> String {
    format!("{EVENTS_PREFIX}.{cluster}.job.{job_id}.{kind}")
}

/// The job id and event kind of a job event's subject ([`job_event`]), if it is one.
pub fn job_event_parts(subject: &str) -> Option<(&str, &str)> {
    let rest = subject.strip_prefix(EVENTS_PREFIX)?.strip_prefix('.')?;
    let mut tokens = rest.split('.');
    let (_cluster, job, job_id, kind) = (
        tokens.next()?,
        tokens.next()?,
        tokens.next()?,
        tokens.next()?,
    );
    (job == "job" && tokens.next().is_none()).then_some((job_id, kind))
}

/// The cluster token of an events subject, if it is one.
pub fn cluster_of(subject: &str) -> Option<&str> {
    subject
        .strip_prefix(EVENTS_PREFIX)?
        .strip_prefix('.')?
        .split('.')
        .next()
}

/// Every event of one job (a wildcard over kinds): the scope of optimistic concurrency.
pub fn job(cluster: &str, job_id: &str) -> String {
    format!("{EVENTS_PREFIX}.{cluster}.job.{job_id}.*")
}

/// Every event of one job whatever its cluster (job ids are global): where to look for a job
/// a service has not folded yet.
pub fn job_in_any_cluster(job_id: &str) -> String {
    format!("{EVENTS_PREFIX}.*.job.{job_id}.*")
}

/// Events of one kind for every job of every cluster, e.g. `job_kind("job_started")`.
pub fn job_kind(kind: &str) -> String {
    format!("{EVENTS_PREFIX}.*.job.*.{kind}")
}

/// Rejected intake submissions of a cluster (or of an invalid cluster name).
pub fn rejected(cluster: &str) -> String {
    let token = if is_valid_token(cluster) {
        cluster
    } else {
        INVALID_CLUSTER_TOKEN
    };
    format!("{EVENTS_PREFIX}.{token}.rejected")
}

/// Budget tree changes of a cluster.
pub fn policy(cluster: &str) -> String {
    format!("{EVENTS_PREFIX}.{cluster}.policy")
}

/// Inventory events of one node.
pub fn node(cluster: &str, node: &str) -> String {
    format!("{EVENTS_PREFIX}.{cluster}.node.{node}")
}

/// Maintenance windows of a cluster (scheduled and cancelled).
pub fn maintenance(cluster: &str) -> String {
    format!("{EVENTS_PREFIX}.{cluster}.maintenance")
}

/// Usage snapshots of a cluster.
pub fn usage(cluster: &str) -> String {
    format!("{EVENTS_PREFIX}.{cluster}.usage")
}

/// Every event of a cluster: the filter one cluster's decision instance consumes.
pub fn cluster_events(cluster: &str) -> String {
    format!("{EVENTS_PREFIX}.{cluster}.>")
}

/// The subject a writer appends `event` of cluster `cluster` on, by the scheme above; `None`
/// for an event with no body. Used where events are written from outside a service (the
/// simulator's log loaded into JetStream).
pub fn for_event(cluster: &str, event: &crate::pb::Event) -> Option<String> {
    use crate::pb::{self, event::Body};
    let kind = crate::codec::event_kind(event);
    Some(match event.body.as_ref()? {
        Body::JobRejected(_) => rejected(cluster),
        Body::BudgetTreeSet(_) => policy(cluster),
        Body::UsageSnapshot(_) => usage(cluster),
        Body::MaintenanceScheduled(_) | Body::MaintenanceCancelled(_) => maintenance(cluster),
        Body::NodeRegistered(pb::NodeRegistered { node: n, .. })
        | Body::NodeCordoned(pb::NodeCordoned { node: n, .. })
        | Body::NodeUncordoned(pb::NodeUncordoned { node: n, .. })
        | Body::NodeDrained(pb::NodeDrained { node: n, .. })
        | Body::NodeRemoved(pb::NodeRemoved { node: n, .. }) => node(cluster, n),
        Body::JobSubmitted(pb::JobSubmitted { job_id, .. })
        | Body::JobCancelled(pb::JobCancelled { job_id, .. })
        | Body::JobPlaced(pb::JobPlaced { job_id, .. })
        | Body::JobStarted(pb::JobStarted { job_id })
        | Body::JobFinished(pb::JobFinished { job_id, .. })
        | Body::JobFailed(pb::JobFailed { job_id, .. })
        | Body::PreemptionOrdered(pb::PreemptionOrdered { job_id, .. })
        | Body::JobPreempted(pb::JobPreempted { job_id, .. })
        | Body::JobRequeued(pb::JobRequeued { job_id }) => job_event(cluster, job_id, kind),
    })
}

/// Why an event is not where its kind belongs (see [`check_filed`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} on subject {subject}")]
pub struct Misfiled {
    /// The subject it was stored on.
    pub subject: String,
    /// What does not match.
    pub what: String,
}

/// Checks that `event`, stored on `subject`, is on the subject its kind is written to by the
/// scheme above ([`for_event`] for the subject's cluster), and that a cluster named in its body
/// is that cluster.
///
/// Why it matters: NATS permissions are granted by subject (a launcher may publish only its
/// jobs' started, finished, failed and preempted events), but the folds act on the body. An
/// event whose body does not belong where it was stored, a budget tree on a job's subject, a
/// finish of job A on job B's subject, would otherwise let any writer act as any other. The
/// services fold such an entry as an empty one (`codec::decode_log_entry`). An event with no
/// body is not checked: it is empty already.
pub fn check_filed(subject: &str, event: &crate::pb::Event) -> Result<(), Misfiled> {
    use crate::pb::event::Body;
    let misfiled = |what: String| Misfiled {
        subject: subject.to_owned(),
        what,
    };
    let Some(body) = &event.body else {
        return Ok(());
    };
    let cluster =
        cluster_of(subject).ok_or_else(|| misfiled("not an events subject".to_owned()))?;
    let named = match body {
        Body::JobSubmitted(s) => s.spec.as_ref().map(|spec| spec.cluster.as_str()),
        Body::BudgetTreeSet(b) => Some(b.cluster.as_str()),
        Body::NodeRegistered(n) => Some(n.cluster.as_str()),
        Body::NodeCordoned(n) => Some(n.cluster.as_str()),
        Body::NodeUncordoned(n) => Some(n.cluster.as_str()),
        Body::NodeDrained(n) => Some(n.cluster.as_str()),
        Body::NodeRemoved(n) => Some(n.cluster.as_str()),
        Body::MaintenanceScheduled(m) => Some(m.cluster.as_str()),
        Body::MaintenanceCancelled(m) => Some(m.cluster.as_str()),
        Body::UsageSnapshot(u) => Some(u.cluster.as_str()),
        // A rejection names the cluster asked for, which may be no valid token at all.
        _ => None,
    };
    if let Some(named) = named
        && named != cluster
    {
        return Err(misfiled(format!(
            "{} of cluster {named:?}",
            crate::codec::event_kind(event)
        )));
    }
    match for_event(cluster, event) {
        Some(expected) if expected == subject => Ok(()),
        Some(expected) => Err(misfiled(format!(
            "{} that belongs on {expected}",
            crate::codec::event_kind(event)
        ))),
        None => Ok(()),
    }
}

/// Durable intake of a cluster's submissions.
pub fn intake(cluster: &str) -> String {
    format!("{INTAKE_PREFIX}.{cluster}")
}

/// The cluster token of an intake subject, if it is one.
pub fn cluster_of_intake(subject: &str) -> Option<&str> {
    subject
        .strip_prefix(INTAKE_PREFIX)?
        .strip_prefix('.')
        .filter(|rest| !rest.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_event_subject_names_its_job_and_kind() {
        let s = job_event("gpu-a", "0190-ab", "job_placed");
        assert_eq!(job_event_parts(&s), Some(("0190-ab", "job_placed")));
        assert_eq!(job_event_parts(&policy("gpu-a")), None);
        assert_eq!(job_event_parts(&job("gpu-a", "x")), Some(("x", "*")));
        assert_eq!(job_event_parts("fairshare.events.a.job.x.y.z"), None);
        assert_eq!(job_event_parts("other.a.job.x.y"), None);
    }

    #[test]
    fn every_event_has_the_subject_its_writer_uses() {
        use crate::pb::{self, event::Body};
        let e = |body| pb::Event {
            at_ms: 1,
            body: Some(body),
        };
        let job = e(Body::JobStarted(pb::JobStarted {
            job_id: "j1".into(),
        }));
        assert_eq!(
            for_event("c", &job).as_deref(),
            Some("fairshare.events.c.job.j1.job_started")
        );
        let cordon = e(Body::NodeCordoned(pb::NodeCordoned {
            cluster: "c".into(),
            node: "n7".into(),
            reason: String::new(),
        }));
        assert_eq!(for_event("c", &cordon), Some(node("c", "n7")));
        let snapshot = e(Body::UsageSnapshot(pb::UsageSnapshot::default()));
        assert_eq!(for_event("c", &snapshot), Some(usage("c")));
        let tree = e(Body::BudgetTreeSet(pb::BudgetTreeSet::default()));
        assert_eq!(for_event("c", &tree), Some(policy("c")));
        let empty = pb::Event {
            at_ms: 1,
            body: None,
        };
        assert_eq!(for_event("c", &empty), None);
    }

    #[test]
    fn an_event_is_filed_only_where_its_writer_puts_it() {
        use crate::pb::{self, event::Body};
        let e = |body| pb::Event {
            at_ms: 1,
            body: Some(body),
        };
        let finish = |job: &str| {
            e(Body::JobFinished(pb::JobFinished {
                job_id: job.into(),
                exit_code: 0,
            }))
        };
        let tree = |cluster: &str| {
            e(Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: cluster.into(),
                ..Default::default()
            }))
        };
        let ok = job_event("c", "a", "job_finished");
        assert_eq!(check_filed(&ok, &finish("a")), Ok(()));
        assert_eq!(check_filed(&policy("c"), &tree("c")), Ok(()));
        // A launcher's subject carrying a budget tree, or another job's finish, or a finish
        // under the wrong kind.
        let launcher = job_event("c", "b", "job_started");
        let err = check_filed(&launcher, &tree("c")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "budget_tree_set that belongs on fairshare.events.c.policy on subject \
             fairshare.events.c.job.b.job_started"
        );
        assert!(check_filed(&job_event("c", "b", "job_finished"), &finish("a")).is_err());
        assert!(check_filed(&launcher, &finish("b")).is_err());
        // The right subject of another cluster than the body names.
        let err = check_filed(&policy("d"), &tree("c")).unwrap_err();
        assert!(err.what.contains("of cluster \"c\""), "{err}");
        // Not an events subject at all; an empty event is not checked.
        assert!(check_filed("fairshare.intake.c", &finish("a")).is_err());
        let empty = pb::Event {
            at_ms: 1,
            body: None,
        };
        assert_eq!(check_filed(&launcher, &empty), Ok(()));
        // A rejection of an invalid cluster name is filed under the placeholder token.
        let rejected_event = e(Body::JobRejected(pb::JobRejected {
            cluster: "a.b".into(),
            ..Default::default()
        }));
        assert_eq!(check_filed(&rejected("a.b"), &rejected_event), Ok(()));
    }

    #[test]
    fn tokens() {
        assert!(is_valid_token("alpha"));
        assert!(is_valid_token("gpu-007_a"));
        assert!(!is_valid_token(""));
        assert!(!is_valid_token("_"));
        assert!(!is_valid_token("-a"));
        assert!(!is_valid_token("a.b"));
        assert!(!is_valid_token("a*"));
        assert!(!is_valid_token("a>"));
        assert!(!is_valid_token("a b"));
        assert!(!is_valid_token(&"a".repeat(MAX_TOKEN_LEN + 1)));
    }

    #[test]
    fn rejected_with_bad_cluster_uses_placeholder() {
        assert_eq!(rejected("alpha"), "fairshare.events.alpha.rejected");
        assert_eq!(rejected("a.b.>"), "fairshare.events._.rejected");
    }

    #[test]
    fn intake_round_trip() {
        assert_eq!(cluster_of_intake(&intake("alpha")), Some("alpha"));
        assert_eq!(cluster_of_intake("fairshare.intake.a.b"), None);
        assert_eq!(cluster_of_intake("fairshare.intakex"), None);
    }
}
