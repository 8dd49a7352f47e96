//! Names the two set-up mistakes behind most JetStream errors an operator meets before the
//! system runs: a nats-server started without JetStream, and a server whose streams nobody has
//! made yet (no service started, no `fairshare streams`).
//!
//! Place in the flow: beside every read or append of the log made on an operator's behalf
//! (the CLI's budget, inventory, node and tail commands, [`crate::admin`]). async-nats reports
//! the first as "requested JetStream resource does not exist" (a request nobody answered) and
//! the second as a bare error code, and neither says what to do; appending the permission hint
//! to them, as the admin appends did, blamed the operator's identity instead.

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{
    GetStreamErrorKind, PublishErrorKind, RequestError, RequestErrorKind,
};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, context, stream};
use fairshare_events::streams::EVENTS_STREAM;

/// What a JetStream error shows to be missing on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Nothing answered a JetStream API request: the server runs without JetStream (or no
    /// server of its cluster has it).
    JetStream,
    /// JetStream answered that the stream does not exist.
    Stream,
    /// A publish found no stream taking its subject: either of the above.
    StreamOrJetStream,
}

impl Missing {
    /// What the operator should do, in one sentence.
    pub fn hint(self) -> String {
        match self {
            Missing::JetStream => "no JetStream answered on this server: start nats-server with \
                                   JetStream on (`-js`, as `./deploy/start.sh` and \
                                   `deploy/nats/` do)"
                .to_owned(),
            Missing::Stream => format!(
                "the stream {EVENTS_STREAM} does not exist on this server yet: every service \
                 makes it when it starts, or `fairshare streams` does"
            ),
            // On a cluster that just lost a member the stream is only between leaders for a
            // few seconds, and the same error comes back: said too, so that nobody goes to
            // remake a stream that is there.
            Missing::StreamOrJetStream => format!(
                "no stream takes this subject: is JetStream on (`-js`) and {EVENTS_STREAM} made \
                 (`fairshare streams`, or any service's start)? On a JetStream cluster that just \
                 lost a member, the stream may be electing a new leader: that passes within \
                 seconds"
            ),
        }
    }
}

/// What `error`, or any error it was caused by, shows to be missing; `None` for every other
/// failure (a timeout, a refused permission, a broken connection).
pub fn missing(error: &(dyn std::error::Error + 'static)) -> Option<Missing> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = missing_here(e) {
            return Some(found);
        }
        next = e.source();
    }
    None
}

fn missing_here(e: &(dyn std::error::Error + 'static)) -> Option<Missing> {
    let not_found =
        |code: ErrorCode| (code == ErrorCode::STREAM_NOT_FOUND).then_some(Missing::Stream);
    if let Some(e) = e.downcast_ref::<RequestError>() {
        return (e.kind() == RequestErrorKind::NoResponders).then_some(Missing::JetStream);
    }
    if let Some(e) = e.downcast_ref::<context::GetStreamError>()
        && let GetStreamErrorKind::JetStream(js) = e.kind()
    {
        return not_found(js.error_code());
    }
    if let Some(e) = e.downcast_ref::<stream::LastRawMessageError>()
        && let LastRawMessageErrorKind::JetStream(js) = e.kind()
    {
        return not_found(js.error_code());
    }
    if let Some(e) = e.downcast_ref::<jetstream::Error>() {
        return not_found(e.error_code());
    }
    if let Some(e) = e.downcast_ref::<context::PublishError>() {
        return (e.kind() == PublishErrorKind::StreamNotFound)
            .then_some(Missing::StreamOrJetStream);
    }
    None
}

/// `error` as text, with what to do when it shows JetStream or the stream to be missing.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    match missing(error) {
        Some(m) => format!("{error} ({})", m.hint()),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A publish that found no stream may also mean a cluster between leaders: the hint says
    /// both, so nobody remakes a stream that is there.
    #[test]
    fn a_missing_stream_on_publish_also_names_a_leader_election() {
        let hint = Missing::StreamOrJetStream.hint();
        assert!(hint.contains("`fairshare streams`"), "{hint}");
        assert!(hint.contains("electing a new leader"), "{hint}");
        assert!(!Missing::Stream.hint().contains("leader"));
    }
}
