//! One module per command group; each turns parsed arguments into NATS traffic.

pub mod audit;
pub mod definitions;
pub mod explain;
pub mod leases;
pub mod nodes;
pub mod not_changed;
pub mod policy;
pub mod queue;
pub mod simulate;
pub mod status;
pub mod submit;
pub mod tail;
mod tail_line;

use fairshare_events::pb::event::Body;
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::{codec, pb, subjects};
use fairshare_model::budget::BudgetTree;
use fairshare_runtime::missing;
use fairshare_runtime::nats::Identity;

use anyhow::Context;
use async_nats::jetstream;

/// A connection and its JetStream context.
pub struct Connection {
    /// Core NATS, for request/reply.
    pub client: async_nats::Client,
    /// JetStream, for appending and reading the log.
    pub js: jetstream::Context,
}

impl Connection {
    /// Connects as the CLI.
    pub async fn new(url: &str, identity: Identity<'_>) -> anyhow::Result<Self> {
        let client = fairshare_runtime::nats::connect(url, "fairshare-cli", identity).await?;
        let js = jetstream::new(client.clone());
        Ok(Self { client, js })
    }

    /// Sends `payload` to a service's API `subject` and waits up to 10 s for its answer.
    /// `who` names the service that should answer (for example "the decision service of
    /// cluster gpu-east"), so a subject nobody serves says which one is missing rather than
    /// NATS's bare "no responders".
    pub async fn ask(
        &self,
        subject: String,
        payload: bytes::Bytes,
        who: &str,
    ) -> anyhow::Result<async_nats::Message> {
        let answer = tokio::time::timeout(ASK_TIMEOUT, self.client.request(subject, payload))
            .await
            .with_context(|| format!("no answer from {who} within 10 s"))?;
        answer.map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::NoResponders => {
                // `who` names the cluster for a cluster's service, so a mistyped cluster shows.
                anyhow::anyhow!("nothing answers for {who}: is it running?")
            }
            _ => anyhow::Error::new(e).context(format!("asking {who}")),
        })
    }
}

/// How long [`Connection::ask`] waits.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A `--cluster` value: one NATS subject token, as every cluster's subjects need (a name with
/// a `.` or a space would address other subjects, or none).
pub fn cluster_name(name: &str) -> Result<String, String> {
    if fairshare_events::subjects::is_valid_token(name) {
        Ok(name.to_owned())
    } else {
        Err(format!(
            "{name:?} is not a cluster name: letters, digits, '_' and '-', starting with a \
             letter or digit"
        ))
    }
}

/// Longest reason an operator may give (a cordon's, a window's, a cancel's), in bytes: what
/// the submission service allows a cancel's.
pub const MAX_REASON_BYTES: usize = 256;

/// A `--reason` value: at most [`MAX_REASON_BYTES`], and no control characters, which would
/// reach every terminal that tails or lists it (a newline, an escape sequence).
pub fn reason_text(text: &str) -> Result<String, String> {
    if text.len() > MAX_REASON_BYTES {
        return Err(format!(
            "a reason of {} bytes is over the {MAX_REASON_BYTES} allowed",
            text.len()
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(format!(
            "a reason must not contain control characters, found {c:?}"
        ));
    }
    Ok(text.to_owned())
}

/// `text` as a terminal should show it: control characters escaped (`\n`, `\u{1b}`), since
/// what is in the log may have been written by anyone.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

/// The cluster's budget tree in force (the newest usable one on its policy subject, as the
/// services hold it: [`budget_in_force`]); `None` when none was ever set. A failure to read it
/// is an error: "no tree" would mislead a preview.
pub async fn budget_tree(conn: &Connection, cluster: &str) -> anyhow::Result<Option<BudgetTree>> {
    match budget_in_force(conn, cluster).await?.in_force {
        Some((_, set)) => Ok(Some(BudgetTree::from_accounts(&set.accounts)?)),
        None => Ok(None),
    }
}

/// What a cluster's policy subject holds.
pub struct PolicyRead {
    /// The subject's newest sequence (0: nothing written there): what a change is appended
    /// against, and `budget apply --expect-sequence` compares with.
    pub newest: u64,
    /// The tree the services hold, as written, with its sequence: the newest usable one
    /// (they refuse an entry that is not a valid tree for the cluster and keep the one
    /// before); `None` if none was ever set.
    pub in_force: Option<(u64, pb::BudgetTreeSet)>,
}

/// The budget tree in force for `cluster` ([`PolicyRead`]). An unusable newest entry is
/// warned about on stderr.
pub async fn budget_in_force(conn: &Connection, cluster: &str) -> anyhow::Result<PolicyRead> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let unreadable = |e: &(dyn std::error::Error + 'static)| {
        anyhow::anyhow!(
            "cannot read the budget tree of cluster {cluster}: {}",
            missing::describe(e)
        )
    };
    let stream = conn
        .js
        .get_stream(EVENTS_STREAM)
        .await
        .map_err(|e| unreadable(&e))?;
    let message = match stream
        .get_last_raw_message_by_subject(&subjects::policy(cluster))
        .await
    {
        Ok(m) => m,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {
            return Ok(PolicyRead {
                newest: 0,
                in_force: None,
            });
        }
        Err(e) => return Err(unreadable(&e)),
    };
    let newest = codec::decode_log_entry(&message.subject, &message.payload)
        .map_err(|e| e.to_string())
        .and_then(|event| usable_tree(cluster, event));
    let in_force = match newest {
        Ok(set) => Some((message.sequence, set)),
        Err(why) => {
            // The services refuse such an entry whole and keep the tree before it: so does this.
            let kept = newest_usable_tree(conn, cluster).await?;
            let kept_text = match &kept {
                Some((sequence, _)) => format!("the tree of sequence {sequence}"),
                None => "no tree (none before it was usable)".to_owned(),
            };
            eprintln!(
                "warning: the newest entry on cluster {cluster}'s policy subject (sequence {}) \
                 is not a usable budget tree ({why}); the services ignore it and keep {kept_text}",
                message.sequence
            );
            kept
        }
    };
    Ok(PolicyRead {
        newest: message.sequence,
        in_force,
    })
}

/// `event` as a budget tree the services would put in force for `cluster`, or why not.
fn usable_tree(cluster: &str, event: pb::Event) -> Result<pb::BudgetTreeSet, String> {
    let kind = codec::event_kind(&event);
    match event.body {
        Some(Body::BudgetTreeSet(set)) if set.cluster != cluster => {
            Err(format!("it names cluster {:?}", printable(&set.cluster)))
        }
        Some(Body::BudgetTreeSet(set)) => match BudgetTree::from_accounts(&set.accounts) {
            Ok(_) => Ok(set),
            Err(e) => Err(format!("it does not validate: {e}")),
        },
        _ => Err(format!("it is a {kind} event")),
    }
}

/// The newest usable budget tree of `cluster`, reading its whole policy subject (trees are
/// few): what the services hold when the newest entry is not one.
async fn newest_usable_tree(
    conn: &Connection,
    cluster: &str,
) -> anyhow::Result<Option<(u64, pb::BudgetTreeSet)>> {
    let mut follower =
        fairshare_runtime::log::Follower::start(&conn.js, 1, vec![subjects::policy(cluster)])
            .await
            .with_context(|| format!("cannot read cluster {cluster}'s policy subject"))?;
    let mut kept = None;
    follower
        .catch_up(|entry| {
            if let Ok(set) = entry
                .event
                .map_err(|e| e.to_string())
                .and_then(|event| usable_tree(cluster, event))
            {
                kept = Some((entry.sequence, set));
            }
        })
        .await
        .with_context(|| format!("cannot read cluster {cluster}'s policy subject"))?;
    Ok(kept)
}

/// A job id argument, as [`job_id_arg`] normalises it; an empty one is refused here rather
/// than sent as an empty request, which a service can only call malformed.
pub fn job_id(id: &str) -> Result<String, String> {
    if id.trim().is_empty() {
        return Err("a job id is needed (as `submit` printed it)".to_owned());
    }
    let id = job_id_arg(id);
    // One subject token: a `*` or `>` would name every job's subjects in a lookup, and a `.`
    // other subjects (`explain '*'` described some other job).
    if fairshare_events::subjects::is_valid_token(&id) {
        Ok(id)
    } else {
        Err(format!(
            "{id:?} is not a job id: job ids are UUIDs (letters, digits and '-')"
        ))
    }
}

/// A job id as the services write it: job ids are UUIDs in lower case, and one pasted in upper
/// case is the same job. Anything else is left as typed (the service answers for it).
pub fn job_id_arg(id: &str) -> String {
    match uuid::Uuid::parse_str(id) {
        Ok(uuid) => uuid.hyphenated().to_string(),
        Err(_) => id.to_owned(),
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC, for people.
pub use fairshare_model::timestamp::utc as format_ms;

#[cfg(test)]
mod tests {
    use super::{MAX_REASON_BYTES, cluster_name, job_id_arg, printable, reason_text};

    #[test]
    fn reasons_are_short_text_and_shown_escaped() {
        assert_eq!(reason_text("new PSU").as_deref(), Ok("new PSU"));
        assert!(reason_text(&"x".repeat(MAX_REASON_BYTES)).is_ok());
        let long = reason_text(&"x".repeat(MAX_REASON_BYTES + 1)).unwrap_err();
        assert!(long.contains("257 bytes"), "{long}");
        let escape = reason_text("why\u{1b}[2J").unwrap_err();
        assert!(escape.contains("control characters"), "{escape}");
        assert!(reason_text("two\nlines").is_err());
        // What another writer put in the log reaches the terminal escaped, not raw.
        assert_eq!(printable("plain"), "plain");
        assert_eq!(printable("why\u{1b}[2Jx\n"), "why\\u{1b}[2Jx\\n");
    }

    #[test]
    fn a_job_id_pasted_in_upper_case_is_the_uuid_the_services_wrote() {
        assert_eq!(
            job_id_arg("01A234F5-66C7-7000-8000-00000000ABCD"),
            "01a234f5-66c7-7000-8000-00000000abcd"
        );
        assert_eq!(job_id_arg("not-a-uuid"), "not-a-uuid");
        assert_eq!(
            super::job_id("01A234F5-66C7-7000-8000-00000000ABCD").as_deref(),
            Ok("01a234f5-66c7-7000-8000-00000000abcd")
        );
        assert!(
            super::job_id(" ")
                .unwrap_err()
                .contains("a job id is needed")
        );
        // A wildcard or a dot would name other jobs' subjects in a lookup.
        for bad in ["*", ">", "a.b", "a b"] {
            assert!(
                super::job_id(bad).unwrap_err().contains("is not a job id"),
                "{bad}"
            );
        }
    }

    #[test]
    fn cluster_names_are_one_subject_token() {
        assert_eq!(cluster_name("gpu-east_1").as_deref(), Ok("gpu-east_1"));
        for bad in ["a.b", "a b", "*", ">", "", "-lead", "a\nb"] {
            assert!(cluster_name(bad).is_err(), "{bad:?}");
        }
    }
}
