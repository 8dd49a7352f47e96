//! One module per command group; each turns parsed arguments into NATS traffic.

pub mod explain;
pub mod policy;
pub mod status;
pub mod submit;
pub mod tail;

use std::path::Path;

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
    pub async fn new(url: &str, creds: Option<&Path>) -> anyhow::Result<Self> {
        let client = fairshare_runtime::nats::connect(url, "fairshare-cli", creds).await?;
        let js = jetstream::new(client.clone());
        Ok(Self { client, js })
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC, for people.
pub fn format_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms}ms"))
}
