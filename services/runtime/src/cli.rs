//! Command-line flags every binary shares, so `--help` reads the same everywhere.

use std::path::PathBuf;

use crate::nats::{ConnectError, Identity, connect};

/// Where NATS is and who this process is there.
#[derive(Debug, Clone, clap::Args)]
pub struct NatsArgs {
    /// NATS server to connect to (a cluster: its members, comma-separated).
    #[arg(
        long,
        env = "FAIRSHARE_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,
    /// NATS credentials file (JWT) for this process (none: connect without authentication).
    #[arg(long, env = "FAIRSHARE_NATS_CREDS", conflicts_with = "nats_nkey")]
    pub nats_creds: Option<PathBuf>,
    /// Nkey seed file of this process's role, as `fairshare auth init` writes them (e.g.
    /// `.run/auth/decision.nk`), for a server configured with their `auth.conf`.
    #[arg(long, env = "FAIRSHARE_NATS_NKEY")]
    pub nats_nkey: Option<PathBuf>,
}

impl NatsArgs {
    /// Connects as `name` (shown in the server's connection list).
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client, ConnectError> {
        let identity = Identity::from_files(self.nats_creds.as_deref(), self.nats_nkey.as_deref());
        connect(&self.nats_url, name, identity).await
    }

    /// Connects as `name`, a service of `role`, on the role's own inboxes
    /// ([`crate::nats::connect_as`]).
    pub async fn connect_as(
        &self,
        name: &str,
        role: crate::auth::Role,
    ) -> Result<async_nats::Client, ConnectError> {
        let identity = Identity::from_files(self.nats_creds.as_deref(), self.nats_nkey.as_deref());
        crate::nats::connect_as(&self.nats_url, name, identity, role).await
    }
}

/// The usage window: the accounting service sums usage over it, and the services that read its
/// snapshots (decision, preemption) take only snapshots of it. One flag and one variable for
/// all three, so they cannot drift apart.
#[derive(Debug, Clone, clap::Args)]
pub struct UsageWindowArgs {
    /// The usage window, e.g. 7d, 36h: how far back the accounting service sums usage. The
    /// decision and preemption services refuse (and log) usage snapshots of any other window, so a second accounting instance started with another window cannot take
    /// turns with the first at setting the ranking. Set FAIRSHARE_WINDOW once for all three
    /// (an audit needs none: each decision's basis names the window it was made under).
    #[arg(
        long = "window",
        env = "FAIRSHARE_WINDOW",
        default_value = "7d",
        value_parser = fairshare_model::duration::parse_duration
    )]
    pub window: std::time::Duration,
}

impl UsageWindowArgs {
    /// The window in ms, as snapshots carry it: above 0 and countable in ms.
    pub fn window_ms(&self) -> Result<i64, BadWindow> {
        match i64::try_from(self.window.as_millis()) {
            Ok(0) => Err(BadWindow::Zero),
            Ok(ms) => Ok(ms),
            Err(_) => Err(BadWindow::TooLong(self.window)),
        }
    }
}

/// A `--window` no usage can be summed over.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BadWindow {
    /// 0 (or under a millisecond).
    #[error("--window must be at least 1 ms")]
    Zero,
    /// Too long to count in ms.
    #[error("--window {0:?} is too long")]
    TooLong(std::time::Duration),
}
