//! Connecting to NATS and putting the streams of [`fairshare_events::streams`] in place.

use std::path::Path;

use async_nats::jetstream::{self, stream};
use fairshare_events::streams::{self, Storage, StreamSpec};

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The credentials file could not be read.
    #[error("cannot read NATS credentials {path}: {source}")]
    Credentials {
        /// The file given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server did not accept the connection.
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        /// The URL tried.
        url: String,
        /// What the client reported.
        source: async_nats::ConnectError,
    },
}

/// Connects as `name` (shown in the server's connection list), with optional credentials.
pub async fn connect(
    url: &str,
    name: &str,
    credentials: Option<&Path>,
) -> Result<async_nats::Client, ConnectError> {
    let mut options = async_nats::ConnectOptions::new().name(name);
    if let Some(path) = credentials {
        options =
            options
                .credentials_file(path)
                .await
                .map_err(|source| ConnectError::Credentials {
                    path: path.display().to_string(),
                    source,
                })?;
    }
    options
        .connect(url)
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
                if current.subjects != config.subjects
                    || current.duplicate_window != config.duplicate_window
                    || current.max_age != config.max_age
                {
                    js.update_stream(config)
                        .await
                        .map_err(|e| err(e.to_string()))?;
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
