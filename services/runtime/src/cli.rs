//! Command-line flags every binary shares, so `--help` reads the same everywhere.

use std::path::PathBuf;

use crate::nats::{ConnectError, connect};

/// Where NATS is and who this process is there.
#[derive(Debug, Clone, clap::Args)]
pub struct NatsArgs {
    /// NATS server to connect to.
    #[arg(
        long,
        env = "FAIRSHARE_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,
    /// NATS credentials file for this process (none: connect without authentication).
    #[arg(long, env = "FAIRSHARE_NATS_CREDS")]
    pub nats_creds: Option<PathBuf>,
}

impl NatsArgs {
    /// Connects as `name` (shown in the server's connection list).
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client, ConnectError> {
        connect(&self.nats_url, name, self.nats_creds.as_deref()).await
    }
}
