//! Connecting to NATS and putting the streams of [`fairshare_events::streams`] in place.

use std::path::Path;

use async_nats::jetstream::{self, stream};
use fairshare_events::streams::{self, Storage, StreamSpec};

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The credentials file could not be read.
    #[error("cannot read NATS credentials {path}")]
    Credentials {
        /// The file given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The nkey seed file could not be read.
    #[error("cannot read NATS nkey seed {path}")]
    Nkey {
        /// The file given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server did not accept the connection.
    #[error("cannot connect to NATS at {url}")]
    Connect {
        /// The URL tried.
        url: String,
        /// What the client reported.
        source: async_nats::ConnectError,
    },
}

/// How a process proves who it is to the server.
#[derive(Debug, Clone, Copy)]
pub enum Identity<'a> {
    /// No authentication (a server without an `authorization` block).
    None,
    /// A JWT credentials file (operator-mode servers).
    Credentials(&'a Path),
    /// An nkey seed file of one [`crate::auth::Role`] (servers configured with the block
    /// `fairshare auth init` writes).
    Nkey(&'a Path),
}

impl<'a> Identity<'a> {
    /// The identity named by the `--nats-creds` and `--nats-nkey` flags (credentials win).
    pub fn from_files(credentials: Option<&'a Path>, nkey: Option<&'a Path>) -> Self {
        match (credentials, nkey) {
            (Some(path), _) => Identity::Credentials(path),
            (None, Some(path)) => Identity::Nkey(path),
            (None, None) => Identity::None,
        }
    }
}

/// Connects as `name` (shown in the server's connection list) with `identity` to `url`, one
/// server or a comma-separated list of a cluster's members, taking answers on the usual
/// `_INBOX` inboxes (a launcher, the CLI).
pub async fn connect(
    url: &str,
    name: &str,
    identity: Identity<'_>,
) -> Result<async_nats::Client, ConnectError> {
    connect_with_inbox(url, name, identity, "_INBOX").await
}

/// [`connect`] for a service of `role`: its answers and deliveries come on the role's own
/// inboxes ([`crate::auth::Role::inbox_prefix`]), which `fairshare auth init` lets no other
/// role read.
pub async fn connect_as(
    url: &str,
    name: &str,
    identity: Identity<'_>,
    role: crate::auth::Role,
) -> Result<async_nats::Client, ConnectError> {
    connect_with_inbox(url, name, identity, role.inbox_prefix()).await
}

async fn connect_with_inbox(
    url: &str,
    name: &str,
    identity: Identity<'_>,
    inbox_prefix: &str,
) -> Result<async_nats::Client, ConnectError> {
    let mut options = async_nats::ConnectOptions::new()
        .name(name)
        .custom_inbox_prefix(inbox_prefix);
    match identity {
        Identity::None => {}
        Identity::Credentials(path) => {
            options = options.credentials_file(path).await.map_err(|source| {
                ConnectError::Credentials {
                    path: path.display().to_string(),
                    source,
                }
            })?;
        }
        Identity::Nkey(path) => {
            let seed = std::fs::read_to_string(path).map_err(|source| ConnectError::Nkey {
                path: path.display().to_string(),
                source,
            })?;
            options = options.nkey(seed.trim().to_owned());
        }
    }
    // A comma-separated list names several members of a cluster; the client also learns the
    // rest from the server it reaches, and fails over among them.
    let addrs: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    options
        .connect(addrs.as_slice())
        .await
        .map_err(|source| ConnectError::Connect {
            url: url.to_owned(),
            source,
        })
}

/// Why the streams could not be put in place.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up stream {stream}: {detail}")]
pub struct StreamSetupError {
    /// The stream's name.
    pub stream: &'static str,
    /// What JetStream answered.
    pub detail: String,
}

/// The JetStream config for a stream spec.
pub fn stream_config(spec: &StreamSpec, replicas: usize) -> stream::Config {
    stream::Config {
        name: spec.name.to_owned(),
        subjects: spec.subjects.clone(),
        storage: match spec.storage {
            Storage::File => stream::StorageType::File,
        },
        retention: stream::RetentionPolicy::Limits,
        max_age: spec.max_age.unwrap_or_default(),
        duplicate_window: spec.duplicate_window,
        description: Some(spec.description.to_owned()),
        num_replicas: replicas.max(1),
        allow_direct: true,
        deny_delete: true,
        ..Default::default()
    }
}

/// The durable consumer the submission service reads the intake stream with, in order, one
/// message at a time (defined here beside the streams, so `deploy/nats/jetstream/` and the
/// service read one definition).
pub fn intake_consumer_config() -> jetstream::consumer::pull::Config {
    jetstream::consumer::pull::Config {
        durable_name: Some(streams::INTAKE_CONSUMER.to_owned()),
        description: Some("fairshare submission service: validates intake in order".into()),
        filter_subject: format!("{}.>", fairshare_events::subjects::INTAKE_PREFIX),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: std::time::Duration::from_secs(30),
        max_ack_pending: 1,
        ..Default::default()
    }
}

/// The size limits of `config` that delete the oldest entries when reached (an operator's,
/// kept by [`ensure_streams`]), in words; `None` if there are none, or if a full stream
/// refuses new entries instead: discard new for the stream's limits, and discard new per
/// subject too for the per-subject one (which deletes a subject's oldest entries otherwise).
fn limits_that_cut_the_log(config: &jetstream::stream::Config) -> Option<String> {
    let whole = config.discard != jetstream::stream::DiscardPolicy::New;
    let per_subject = whole || !config.discard_new_per_subject;
    let limits: Vec<String> = [
        ("max_bytes", config.max_bytes, whole),
        ("max_msgs", config.max_messages, whole),
        (
            "max_msgs_per_subject",
            config.max_messages_per_subject,
            per_subject,
        ),
    ]
    .into_iter()
    .filter(|(_, v, cuts)| *v > 0 && *cuts)
    .map(|(name, v, _)| format!("{name} {v}"))
    .collect();
    (!limits.is_empty()).then(|| limits.join(", "))
}

/// Creates every stream that is missing and brings existing ones to the current definition.
/// Safe to call from every service at start-up, concurrently.
pub async fn ensure_streams(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<(), StreamSetupError> {
    for spec in streams::all() {
        let config = stream_config(&spec, replicas);
        let err = |detail: String| StreamSetupError {
            stream: spec.name,
            detail,
        };
        match js.get_stream(spec.name).await {
            Ok(mut existing) => {
                let current = existing
                    .info()
                    .await
                    .map_err(|e| err(e.to_string()))?
                    .config
                    .clone();
                // The log is the truth: one kept in memory, or by interest or work-queue
                // retention, loses events. Refused rather than "fixed": storage cannot change in
                // place, and recreating or re-purposing the log is the operator's call.
                if current.storage != config.storage || current.retention != config.retention {
                    return Err(err(format!(
                        "it is stored as {:?} with {:?} retention; fairshare needs {:?} storage \
                         with {:?} retention (recreate it: see deploy/nats/jetstream/)",
                        current.storage, current.retention, config.storage, config.retention
                    )));
                }
                if current.num_replicas < replicas {
                    tracing::warn!(
                        stream = spec.name,
                        replicas = current.num_replicas,
                        asked = replicas,
                        "the stream has fewer replicas than this service was started with \
                         (--stream-replicas): it keeps them (they are chosen when a stream is \
                         made); raise them with `nats stream edit --replicas` if it should \
                         survive the loss of a server"
                    );
                }
                if spec.name == streams::EVENTS_STREAM
                    && let Some(limits) = limits_that_cut_the_log(&current)
                {
                    tracing::warn!(
                        stream = spec.name,
                        "the log has {limits} that delete its oldest events: once reached, they \
                         are deleted, the budget trees and node registrations among the first, \
                         and a service folding from scratch (a new instance, a deleted \
                         checkpoint, an audit) would see no tree or nodes; remove the limits, or \
                         set discard new (and discard new per subject, for a per-subject limit) so \
                         a full log refuses writes instead"
                    );
                }
                if current.subjects != config.subjects
                    || current.duplicate_window != config.duplicate_window
                    || current.max_age != config.max_age
                {
                    // Only what the definition owns changes. The rest stays as it is: replicas
                    // (chosen when a stream is created: a caller's default of 1 would silently
                    // drop a replicated stream to one copy) and whatever an operator set beyond
                    // the definition (size limits, compression, placement, purge protection).
                    let config = jetstream::stream::Config {
                        subjects: config.subjects.clone(),
                        duplicate_window: config.duplicate_window,
                        max_age: config.max_age,
                        ..current.clone()
                    };
                    // Under per-role identities only the operator may change a stream's
                    // definition (see `auth`): a service's update goes unanswered.
                    js.update_stream(config).await.map_err(|e| {
                        err(format!(
                            "its definition is out of date and updating it failed ({e}); with \
                             NATS authentication on, the operator updates it: `fairshare streams`"
                        ))
                    })?;
                }
            }
            Err(_) => {
                if let Err(e) = js.create_stream(config.clone()).await {
                    // Another service may have created it in between; that is success.
                    if js.get_stream(spec.name).await.is_err() {
                        return Err(err(e.to_string()));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn size_limits_that_delete_old_entries_are_named() {
        let spec = streams::all()
            .into_iter()
            .find(|s| s.name == streams::EVENTS_STREAM)
            .expect("the events stream");
        let mut config = stream_config(&spec, 1);
        assert_eq!(
            limits_that_cut_the_log(&config),
            None,
            "the definition has none"
        );
        config.max_bytes = 1 << 30;
        config.max_messages_per_subject = 5;
        assert_eq!(
            limits_that_cut_the_log(&config).as_deref(),
            Some("max_bytes 1073741824, max_msgs_per_subject 5")
        );
        config.discard = jetstream::stream::DiscardPolicy::New;
        assert_eq!(
            limits_that_cut_the_log(&config).as_deref(),
            Some("max_msgs_per_subject 5"),
            "a subject's oldest entries still go without discard new per subject"
        );
        config.discard_new_per_subject = true;
        assert_eq!(
            limits_that_cut_the_log(&config),
            None,
            "refuses writes instead"
        );
    }
}
