//! Usage snapshots refused for their window ([`Ignored::OtherWindow`]): what the decision and
//! preemption services tell the operator about them.
//!
//! Place in the flow: beside each service's fold of the log. A refusal while following the log
//! is a warning at once (an accounting instance runs with another `--window` now); refusals
//! while catching up (snapshots of a window used before, or that instance's backlog) are
//! counted and reported once when the service is caught up, so a log of thousands of them does
//! not flood the service's output.

use crate::domain::state::Ignored;

/// Snapshots of another window refused while catching up.
#[derive(Debug, Default)]
pub struct RefusedWindows {
    /// How many.
    count: u64,
    /// The last one's sequence and why.
    last: Option<(u64, Ignored)>,
}

impl RefusedWindows {
    /// Notes why the fold refused the entry at `sequence`: kept if for a snapshot's window.
    pub fn note(&mut self, sequence: u64, why: &Ignored) {
        if matches!(why, Ignored::OtherWindow { .. }) {
            self.count += 1;
            self.last = Some((sequence, why.clone()));
        }
    }

    /// Logs the count, once, if any was refused.
    pub fn report(&self, service: &str) {
        if let Some((sequence, why)) = &self.last {
            tracing::warn!(
                service,
                refused = self.count,
                last_sequence = sequence,
                "usage snapshots of another window refused while catching up; the last: {why}"
            );
        }
    }
}

/// Logs why the fold refused an entry met while following the log: a snapshot's window at
/// once as a warning (an operator must hear of it), anything else at debug level.
pub fn log_refusal(sequence: u64, subject: &str, why: &Ignored) {
    if matches!(why, Ignored::OtherWindow { .. }) {
        tracing::warn!(sequence, subject, "not folded: {why}");
    } else {
        tracing::debug!(sequence, subject, "not folded: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_for_the_window_are_counted() {
        let mut refused = RefusedWindows::default();
        refused.note(2, &Ignored::NoBody);
        assert_eq!(refused.count, 0);
        let other = Ignored::OtherWindow {
            window_ms: 2,
            expected_ms: 1,
        };
        refused.note(3, &other);
        refused.note(4, &other);
        assert_eq!(refused.count, 2);
        assert_eq!(refused.last, Some((4, other)));
    }
}
