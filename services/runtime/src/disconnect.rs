//! How long a client has been cut off from NATS.
//!
//! Place in the flow: while the connection is down, the client keeps every publish it is
//! handed and sends it once it reconnects, however late (async-nats has no deadline on them).
//! JetStream drops a repeated `Nats-Msg-Id` only within the stream's duplicate window (2 h),
//! so a write made during an outage that outlasted it could land after a retry elsewhere was
//! written under the same id, as a second event. A service whose writes are not fenced on a
//! subject (the submission service's `JobSubmitted`, a new job's first event) stops instead
//! once it has been cut off for [`DEFAULT_MAX_DISCONNECT`]: the process ends, and its buffered
//! writes with it, long before they could outlive the window.

use std::time::Duration;

use async_nats::connection::State;
use tokio::time::Instant;

/// How long a service whose writes are unfenced stays cut off before it stops: half the
/// events stream's duplicate window, so a write it held lands, if at all, well inside the
/// window of any retry written meanwhile.
pub const DEFAULT_MAX_DISCONNECT: Duration = Duration::from_secs(3600);

/// Completes once `client` has not been connected for `limit` in a row, with how long it was.
/// Checks the connection's state a few times per `limit` (at least every 5 s).
pub async fn cut_off_for(client: &async_nats::Client, limit: Duration) -> Duration {
    let every = (limit / 8).clamp(Duration::from_millis(10), Duration::from_secs(5));
    let mut since: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if client.connection_state() == State::Connected {
            since = None;
        } else {
            let from = *since.get_or_insert(now);
            let cut_off = now.duration_since(from);
            if cut_off >= limit {
                return cut_off;
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// How often [`cut_off_unheld`] looks.
const UNHELD_CHECK: Duration = Duration::from_millis(250);

/// Whether `client` is cut off from NATS while `hold` no longer holds its lease.
pub fn is_cut_off_unheld(client: &async_nats::Client, hold: &crate::lease::HoldWatch) -> bool {
    client.connection_state() != State::Connected && !hold.holds(Instant::now())
}

/// Completes once `client` is cut off from NATS while its lease no longer holds (looked at every
/// 250 ms). A leader's decisions sent while cut off wait in the client's buffer and go out when
/// it reconnects, however late; once its lease stops holding, a successor may take it a third
/// of the ttl later ([`crate::lease`]) and decide from a log without them, so a leader with
/// decisions of unknown outcome stops here: the buffer ends with the process.
pub async fn cut_off_unheld(client: async_nats::Client, hold: crate::lease::HoldWatch) {
    loop {
        if is_cut_off_unheld(&client, &hold) {
            return;
        }
        tokio::time::sleep(UNHELD_CHECK).await;
    }
}
