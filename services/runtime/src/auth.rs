//! Per-service NATS identities and what each may publish (SPEC section 6, reliability: a
//! launcher cannot publish a decision and cannot change budgets).
//!
//! Place in the flow: nothing here runs in a service's loop. `fairshare auth init` calls
//! [`init`] once per installation: it writes one nkey seed file per [`Role`] and the
//! `authorization` block of the nats-server config, which lists each role's public key with
//! its permissions. Each process then connects with its own seed (`--nats-nkey`, see
//! [`crate::cli::NatsArgs`]) and the server refuses what its role may not publish; a refused
//! append never reaches the log.
//!
//! The event log's subjects name the event kind (`fairshare.events.<cluster>.job.<id>.<kind>`,
//! see [`fairshare_events::subjects`]), so a role is granted the kinds it writes and no
//! others: the decision service `job_placed`, a launcher `job_started` and the other reports
//! of its runs, and only the operator the budget tree (`policy`) and the inventory. Node
//! events share one subject per node, so the preemption service, which appends `NodeDrained`,
//! could also append other node events there; the rest is kind by kind.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fairshare_events::streams::{EVENTS_STREAM, INTAKE_CONSUMER, INTAKE_STREAM};
use fairshare_events::subjects::{self, INTAKE_PREFIX};

/// Who a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The submission service: accepts, rejects and cancels jobs.
    Submission,
    /// The accounting service: usage snapshots and usage queries.
    Accounting,
    /// The decision service: placements, explain and the queue listing.
    Decision,
    /// The preemption service: orders, kills, requeues, drained nodes.
    Preemption,
    /// A job launcher: submits and cancels jobs, follows the log, reports its runs.
    Launcher,
    /// An operator (the `fairshare` CLI): budgets, inventory, streams, and everything else.
    Operator,
}

impl Role {
    /// Every role, in the order [`init`] writes them.
    pub const ALL: [Role; 6] = [
        Role::Submission,
        Role::Accounting,
        Role::Decision,
        Role::Preemption,
        Role::Launcher,
        Role::Operator,
    ];

    /// The role's name, also the stem of its seed file.
    pub fn name(self) -> &'static str {
        match self {
            Role::Submission => "submission",
            Role::Accounting => "accounting",
            Role::Decision => "decision",
            Role::Preemption => "preemption",
            Role::Launcher => "launcher",
            Role::Operator => "operator",
        }
    }

    /// The prefix of the inboxes this role's connections take answers and deliveries on
    /// (`async_nats::ConnectOptions::custom_inbox_prefix`): each service its own, which no
    /// other role may subscribe to, so a launcher (which may subscribe to `_INBOX.>` for its
    /// own answers) does not see a service's pull deliveries and, in their reply subjects, the
    /// names of its consumers, with which it could re-create or pull from them. Launchers and
    /// the operator keep the usual `_INBOX`, where the services answer them.
    pub fn inbox_prefix(self) -> &'static str {
        match self {
            Role::Submission => "_INBOX_submission",
            Role::Accounting => "_INBOX_accounting",
            Role::Decision => "_INBOX_decision",
            Role::Preemption => "_INBOX_preemption",
            Role::Launcher | Role::Operator => "_INBOX",
        }
    }

    /// Event kinds of job subjects this role appends.
    fn job_kinds(self) -> &'static [&'static str] {
        match self {
            Role::Submission => &["job_submitted", "job_cancelled"],
            Role::Decision => &["job_placed"],
            Role::Preemption => &["preemption_ordered", "job_preempted", "job_requeued"],
            // A launcher reports what its runs did; `job_preempted` is its confirmation of a
            // stop it was ordered to make.
            Role::Launcher => &["job_started", "job_finished", "job_failed", "job_preempted"],
            Role::Accounting | Role::Operator => &[],
        }
    }

    /// Subjects this role may publish on (nats-server wildcards).
    pub fn publish(self) -> Vec<String> {
        if self == Role::Operator {
            return vec![">".to_owned()];
        }
        let mut out: Vec<String> = self
            .job_kinds()
            .iter()
            .map(|k| subjects::job_event("*", "*", k))
            .collect();
        match self {
            // Every cluster's intake rejections. (Not `subjects::rejected("*")`: that gives
            // the stand-in subject of invalid cluster names, so every other rejection was
            // refused, and the intake retried it for good, holding up everything behind it.)
            Role::Submission => out.push(format!("{}.*.rejected", subjects::EVENTS_PREFIX)),
            Role::Accounting => out.push(subjects::usage("*")),
            Role::Preemption => out.push(subjects::node("*", "*")),
            _ => {}
        }
        if self.answers_requests() {
            out.push(format!("{}>", crate::reply::INBOX_PREFIX));
        }
        if self == Role::Submission {
            // Acknowledging its intake consumer's deliveries (their reply subjects).
            out.push(intake_acks());
        }
        if self == Role::Launcher {
            out.extend([
                subjects::SUBMIT_API.to_owned(),
                subjects::CANCEL_API.to_owned(),
                subjects::usage_api("*"),
                subjects::explain_api("*"),
                subjects::queue_api("*"),
                format!("{INTAKE_PREFIX}.*"),
            ]);
            // Reading the log: an ordered consumer of its own on the events stream. It can
            // neither change, purge nor delete a stream, nor list or delete consumers. (Its
            // client's delete of the consumer it re-creates after a gap is refused, and waits
            // out the request's timeout; allowing it would let a launcher delete the services'
            // consumers too, whose names reach every inbox subscriber in reply subjects.)
            out.extend([
                "$JS.API.INFO".to_owned(),
                format!("$JS.API.STREAM.INFO.{EVENTS_STREAM}"),
            ]);
            out.extend(consumer_api(EVENTS_STREAM));
            // And single events (what it could read through a consumer anyway): the CLI's
            // `status` reads the budget tree in force, `submit` its job's trace. And single
            // intake messages: `submit --intake`, dropped as a repeat of its key's message,
            // reads that message to tell a retry from another request under the key (the
            // events stream shows every accepted spec to launchers already).
            out.extend(single_event_api());
            out.push(format!("$JS.API.STREAM.MSG.GET.{INTAKE_STREAM}"));
        } else {
            out.extend(service_stream_api(self));
        }
        if let Some(role) = self.lease_role() {
            out.extend(lease_api(role));
        }
        out
    }

    /// The role part of the lease this role holds per cluster ([`crate::lease`]): only the
    /// services that decide hold one.
    fn lease_role(self) -> Option<&'static str> {
        match self {
            Role::Decision => Some("decision"),
            Role::Preemption => Some("preemption"),
            _ => None,
        }
    }

    /// Subjects this role may subscribe to.
    pub fn subscribe(self) -> Vec<String> {
        let mut out = vec![format!("{}.>", self.inbox_prefix())];
        match self {
            Role::Submission => out.extend([
                subjects::SUBMIT_API.to_owned(),
                subjects::CANCEL_API.to_owned(),
            ]),
            Role::Accounting => out.push(subjects::USAGE_API_ALL.to_owned()),
            Role::Decision => out.extend([subjects::explain_api("*"), subjects::queue_api("*")]),
            Role::Operator => out = vec![">".to_owned()],
            Role::Preemption | Role::Launcher => {}
        }
        out
    }

    /// Whether the role answers requests: it may then publish to inboxes (`_INBOX.>`), where
    /// clients take their answers, and nowhere else a requester names ([`crate::reply`]). Not
    /// `allow_responses`: that lets a service publish to whatever reply subject a request
    /// names, and a launcher naming `$JS.API.STREAM.PURGE.FAIRSHARE_EVENTS` had the
    /// submission service purge the log with its answer.
    fn answers_requests(self) -> bool {
        matches!(self, Role::Submission | Role::Accounting | Role::Decision)
    }
}

/// The acknowledgements of the submission service's durable intake consumer.
fn intake_acks() -> String {
    format!("$JS.ACK.{INTAKE_STREAM}.{INTAKE_CONSUMER}.>")
}

/// The JetStream API a service may call: create a stream that is missing (never change,
/// purge or delete one: an update to a short maximum age would expire the log, so bringing a
/// stream to a new definition is the operator's `fairshare streams`), follow the events
/// stream with consumers of its own (an ordered consumer deletes its predecessor when it
/// recreates itself after a gap) and read single events from it. The submission service also
/// keeps its durable consumer on the intake stream, which it acknowledges on
/// its own deliveries' reply subjects ([`intake_acks`]).
fn service_stream_api(role: Role) -> Vec<String> {
    let mut out = vec!["$JS.API.INFO".to_owned()];
    for stream in [EVENTS_STREAM, INTAKE_STREAM] {
        out.extend([
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.STREAM.CREATE.{stream}"),
        ]);
    }
    out.extend(consumer_api(EVENTS_STREAM));
    if role == Role::Submission {
        out.extend(consumer_api(INTAKE_STREAM));
    }
    out.push(format!("$JS.API.CONSUMER.DELETE.{EVENTS_STREAM}.>"));
    out.extend(single_event_api());
    out
}

/// Holding this role's leases ([`crate::lease`]): making the bucket if it is missing, reading
/// and writing its own role's keys, no other role's (a decision instance cannot take the
/// preemption service's lease away).
fn lease_api(role: &str) -> Vec<String> {
    let stream = format!("KV_{}", crate::lease::LEASE_BUCKET);
    let keys = format!("$KV.{}.{role}.*", crate::lease::LEASE_BUCKET);
    vec![
        format!("$JS.API.STREAM.INFO.{stream}"),
        format!("$JS.API.STREAM.CREATE.{stream}"),
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}.{keys}"),
        keys,
    ]
}

/// Reading single events of the events stream (by sequence, or the newest on a subject).
fn single_event_api() -> [String; 3] {
    [
        format!("$JS.API.STREAM.MSG.GET.{EVENTS_STREAM}"),
        format!("$JS.API.DIRECT.GET.{EVENTS_STREAM}"),
        format!("$JS.API.DIRECT.GET.{EVENTS_STREAM}.>"),
    ]
}

/// Creating consumers of one's own on `stream`, looking them up and pulling from them; not
/// listing, deleting or changing anyone else's.
fn consumer_api(stream: &str) -> [String; 4] {
    [
        format!("$JS.API.CONSUMER.CREATE.{stream}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
        format!("$JS.API.CONSUMER.INFO.{stream}.>"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.>"),
    ]
}

/// The `authorization` block of a nats-server config: each role's public nkey and
/// permissions. Appended to a server config (`deploy/nats/single.conf`), it makes every
/// connection authenticate with one of the roles' seeds.
pub fn server_block(public_keys: &[(Role, String)]) -> String {
    fn list(items: &[String]) -> String {
        items
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }
    let mut out = String::from(
        "# Written by `fairshare auth init`: one nkey per role, and what each may publish.\n\
         authorization {\n  users = [\n",
    );
    for (role, key) in public_keys {
        let _ = writeln!(out, "    # {}", role.name());
        let _ = writeln!(out, "    {{ nkey: \"{key}\", permissions: {{");
        let _ = writeln!(
            out,
            "      publish: {{ allow: [{}] }}",
            list(&role.publish())
        );
        let _ = writeln!(
            out,
            "      subscribe: {{ allow: [{}] }}",
            list(&role.subscribe())
        );
        out.push_str("    } }\n");
    }
    out.push_str("  ]\n}\n");
    out
}

/// Why the identities could not be written.
#[derive(Debug, thiserror::Error)]
pub enum AuthInitError {
    /// A file could not be read or written.
    #[error("cannot write NATS identities: {path}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An existing seed file does not hold a user nkey seed.
    #[error("{path} does not hold an nkey user seed ({detail}); remove it to have a new one made")]
    BadSeed {
        /// The file.
        path: String,
        /// What nkeys said.
        detail: String,
    },
}

/// The seed file of `role` under `dir`.
pub fn seed_path(dir: &Path, role: Role) -> PathBuf {
    dir.join(format!("{}.nk", role.name()))
}

/// The server config block [`init`] writes under `dir`.
pub fn server_block_path(dir: &Path) -> PathBuf {
    dir.join("auth.conf")
}

/// Writes a seed file per role under `dir` (keeping seeds already there, so identities
/// survive a re-run) and the server's `authorization` block (`auth.conf`), which it returns.
/// Seed files are readable by their owner only.
pub fn init(dir: &Path) -> Result<String, AuthInitError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| AuthInitError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut keys = Vec::new();
    for role in Role::ALL {
        let path = seed_path(dir, role);
        let pair = match std::fs::read_to_string(&path) {
            Ok(seed) => {
                nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| AuthInitError::BadSeed {
                    path: path.display().to_string(),
                    detail: e.to_string(),
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let pair = nkeys::KeyPair::new_user();
                let seed = pair.seed().map_err(|e| AuthInitError::BadSeed {
                    path: path.display().to_string(),
                    detail: e.to_string(),
                })?;
                write_private(&path, &seed).map_err(io(&path))?;
                pair
            }
            Err(e) => return Err(io(&path)(e)),
        };
        keys.push((role, pair.public_key()));
    }
    let block = server_block(&keys);
    let path = server_block_path(dir);
    std::fs::write(&path, &block).map_err(io(&path))?;
    Ok(block)
}

/// Writes `text` to a new file only its owner can read.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairshare_events::subjects::EVENTS_PREFIX;

    #[test]
    fn the_submission_service_may_reject_intake_submissions_of_any_cluster() {
        let publish = Role::Submission.publish();
        assert!(publish.contains(&format!("{EVENTS_PREFIX}.*.rejected")));
        // And a launcher may delete no consumer: the services' names reach its inbox.
        assert!(
            !Role::Launcher
                .publish()
                .iter()
                .any(|s| s.contains("CONSUMER.DELETE"))
        );
    }

    #[test]
    fn a_launcher_may_publish_its_reports_but_no_decision_and_no_budget() {
        let publish = Role::Launcher.publish();
        assert!(publish.contains(&format!("{EVENTS_PREFIX}.*.job.*.job_started")));
        assert!(publish.contains(&format!("{EVENTS_PREFIX}.*.job.*.job_preempted")));
        for forbidden in [
            "job_placed",
            "preemption_ordered",
            "job_requeued",
            "job_submitted",
        ] {
            assert!(
                !publish.iter().any(|s| s.ends_with(forbidden)),
                "{forbidden}"
            );
        }
        assert!(
            !publish
                .iter()
                .any(|s| s.ends_with(".policy") || s.contains(".node."))
        );
        // No wildcard over the JetStream API: it could delete or purge the log.
        assert!(!publish.iter().any(|s| s == ">" || s == "$JS.API.>"));
    }

    #[test]
    fn only_the_operator_sets_budgets() {
        for role in Role::ALL {
            let may = role
                .publish()
                .iter()
                .any(|s| s == ">" || s.ends_with(".policy"));
            assert_eq!(may, role == Role::Operator, "{}", role.name());
        }
    }

    /// A service answers on inboxes only: no role may publish to whatever reply subject a
    /// request names (`allow_responses`), which let a launcher's request purge the log.
    #[test]
    fn services_answer_on_inboxes_and_nowhere_a_requester_names() {
        let keys: Vec<(Role, String)> = Role::ALL.iter().map(|r| (*r, "UKEY".to_owned())).collect();
        assert!(!server_block(&keys).contains("allow_responses"));
        let inboxes = format!("{}>", crate::reply::INBOX_PREFIX);
        for role in [Role::Submission, Role::Accounting, Role::Decision] {
            assert!(role.publish().contains(&inboxes), "{role:?}");
        }
        for role in [Role::Preemption, Role::Launcher] {
            assert!(!role.publish().contains(&inboxes), "{role:?}");
        }
        assert!(Role::Submission.publish().contains(&intake_acks()));
    }

    /// Each service reads inboxes of its own; a launcher reads the usual ones, not theirs.
    #[test]
    fn each_service_reads_its_own_inboxes_only() {
        let services = [
            Role::Submission,
            Role::Accounting,
            Role::Decision,
            Role::Preemption,
        ];
        for role in services {
            let own = format!("{}.>", role.inbox_prefix());
            assert!(role.subscribe().contains(&own), "{role:?}");
            assert!(
                !role.subscribe().contains(&"_INBOX.>".to_owned()),
                "{role:?}"
            );
            for other in Role::ALL
                .into_iter()
                .filter(|r| *r != role && *r != Role::Operator)
            {
                assert_ne!(
                    other.inbox_prefix(),
                    role.inbox_prefix(),
                    "{role:?} {other:?}"
                );
            }
        }
        assert_eq!(Role::Launcher.subscribe(), ["_INBOX.>"]);
    }

    #[test]
    fn no_service_may_delete_purge_or_redefine_a_stream() {
        for role in [
            Role::Submission,
            Role::Accounting,
            Role::Decision,
            Role::Preemption,
            Role::Launcher,
        ] {
            let publish = role.publish();
            let inboxes = format!("{}>", crate::reply::INBOX_PREFIX);
            for s in &publish {
                // Answers go to inboxes, the one broad wildcard (see `answers_requests`).
                assert!(
                    !s.ends_with('>')
                        || s.matches('.').count() >= 4
                        || *s == inboxes
                        || *s == intake_acks(),
                    "{}: broad wildcard {s}",
                    role.name()
                );
                for forbidden in ["DELETE.", "PURGE", "UPDATE", "MSG.DELETE", "SNAPSHOT"] {
                    let allowed_delete = s.starts_with("$JS.API.CONSUMER.DELETE.");
                    assert!(
                        !s.contains(forbidden) || allowed_delete,
                        "{}: {s}",
                        role.name()
                    );
                }
            }
            // Consumers may be deleted on the events stream only, where each service's are
            // ordered consumers that re-create themselves.
            assert!(
                !publish
                    .iter()
                    .any(|s| s.contains(&format!("DELETE.{INTAKE_STREAM}")))
            );
        }
        // Only the submission service consumes the intake.
        for role in Role::ALL {
            let consumes_intake = role
                .publish()
                .iter()
                .any(|s| s == ">" || s.contains(&format!("CONSUMER.CREATE.{INTAKE_STREAM}")));
            assert_eq!(
                consumes_intake,
                matches!(role, Role::Submission | Role::Operator),
                "{}",
                role.name()
            );
        }
    }

    #[test]
    fn init_keeps_existing_seeds_and_lists_every_role() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = init(dir.path()).expect("init");
        let again = init(dir.path()).expect("init again");
        assert_eq!(first, again, "the same seeds give the same block");
        assert_eq!(first.matches("nkey: \"U").count(), Role::ALL.len());
        let seed = std::fs::read_to_string(seed_path(dir.path(), Role::Decision)).expect("seed");
        assert!(seed.starts_with("SU"), "a user seed: {seed}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(seed_path(dir.path(), Role::Decision))
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "seed readable by its owner only");
        }
        std::fs::write(seed_path(dir.path(), Role::Launcher), "not a seed").expect("write");
        assert!(matches!(
            init(dir.path()),
            Err(AuthInitError::BadSeed { .. })
        ));
    }
}
