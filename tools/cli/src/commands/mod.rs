//! One module per command group; each turns parsed arguments into NATS traffic.

pub mod explain;
pub mod policy;
pub mod status;
pub mod submit;
pub mod tail;

use fairshare_runtime::nats::Identity;

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
}

/// Milliseconds since the epoch as RFC 3339 UTC, for people.
pub use fairshare_model::timestamp::utc as format_ms;
