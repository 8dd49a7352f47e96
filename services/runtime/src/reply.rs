//! Where a service may answer a request: only an inbox.
//!
//! Place in the flow: the submission, accounting and decision services answer requests (submit,
//! cancel, usage, explain, queue) by publishing to each request's reply subject. A requester
//! names that subject, so without a check a launcher could name a JetStream API subject
//! (`$JS.API.STREAM.PURGE.FAIRSHARE_EVENTS`) or a log subject, and the service would publish
//! there under its own, wider permissions: purge the log, or file an answer as an event. Clients
//! take their answers on inboxes (`_INBOX.…`, what request/reply in every NATS client uses), so
//! a service answers there and nowhere else; `fairshare auth init` grants the services the
//! same and no more (`crate::auth`).

use async_nats::{Message, Subject};

/// The prefix of every inbox a client takes its answers on.
pub const INBOX_PREFIX: &str = "_INBOX.";

/// Where to answer a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyTo {
    /// Its inbox.
    Inbox(Subject),
    /// It named no reply subject (nobody waits for an answer).
    Missing,
    /// It named a subject that is no inbox: the request is ignored whole.
    NotAnInbox(Subject),
}

/// Where `message` may be answered.
pub fn reply_to(message: &Message) -> ReplyTo {
    match &message.reply {
        None => ReplyTo::Missing,
        Some(reply) if reply.as_str().starts_with(INBOX_PREFIX) => ReplyTo::Inbox(reply.clone()),
        Some(reply) => ReplyTo::NotAnInbox(reply.clone()),
    }
}

/// [`reply_to`]'s inbox, with a warning for a reply subject that is no inbox and nothing for a
/// missing one (the caller says what a request without one means).
pub fn inbox_or_warn(message: &Message) -> Option<Subject> {
    match reply_to(message) {
        ReplyTo::Inbox(inbox) => Some(inbox),
        ReplyTo::Missing => None,
        ReplyTo::NotAnInbox(reply) => {
            tracing::warn!(
                subject = %message.subject,
                reply = %reply,
                "request ignored: its reply subject is no inbox (answers go only to {INBOX_PREFIX}…)"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(reply: Option<&str>) -> Message {
        Message {
            subject: "fairshare.api.submit".into(),
            reply: reply.map(Subject::from),
            payload: bytes::Bytes::new(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn only_an_inbox_is_answered() {
        assert_eq!(
            reply_to(&message(Some("_INBOX.abc.1"))),
            ReplyTo::Inbox("_INBOX.abc.1".into())
        );
        assert_eq!(reply_to(&message(None)), ReplyTo::Missing);
        for bad in [
            "$JS.API.STREAM.PURGE.FAIRSHARE_EVENTS",
            "fairshare.events.demo.policy",
            "_INBOX",
            "_INBOXES.x",
        ] {
            assert_eq!(
                reply_to(&message(Some(bad))),
                ReplyTo::NotAnInbox(bad.into()),
                "{bad}"
            );
            assert_eq!(inbox_or_warn(&message(Some(bad))), None, "{bad}");
        }
    }
}
