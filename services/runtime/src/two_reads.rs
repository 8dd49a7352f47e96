//! Audits that read a cluster's log twice and hold none of it.
//!
//! Place in the flow: after the fact, under every audit (placements, preemption orders, usage
//! snapshots). A decision names the log prefix it was decided from and lands after it, so an
//! audit cannot compare it with its re-derivation in one read without keeping the log: the
//! first read ([`Plan::note`]) notes what each decision names, the second
//! ([`Check::feed`]) folds, decides again where each basis ends and compares the decisions as
//! they stream past. [`over_entries`] runs both over a log in memory; reading JetStream twice
//! is the decision service's `read_twice`, which checks the two reads found one log.

use crate::log::LogEntry;

/// An audit's first read.
pub trait Plan {
    /// The second read it prepares.
    type Check: Check;
    /// Notes the next entry of the log (in order).
    fn note(&mut self, entry: &LogEntry);
    /// The second read's checks, for the same entries again.
    fn check(self) -> Self::Check;
}

/// An audit's second read.
pub trait Check {
    /// What the audit found.
    type Report;
    /// Checks the next entry of the log (the same entries, in the same order, as the plan
    /// noted).
    fn feed(&mut self, entry: &LogEntry);
    /// What the audit found.
    fn finish(self) -> Self::Report;
}

/// Runs `plan`'s two reads over `entries` (one cluster's log, in order).
pub fn over_entries<P: Plan>(mut plan: P, entries: &[LogEntry]) -> <P::Check as Check>::Report {
    for entry in entries {
        plan.note(entry);
    }
    let mut check = plan.check();
    for entry in entries {
        check.feed(entry);
    }
    check.finish()
}

/// Several audits over the same two reads (`fairshare audit` runs three).
impl<A: Plan, B: Plan, C: Plan> Plan for (A, B, C) {
    type Check = (A::Check, B::Check, C::Check);

    fn note(&mut self, entry: &LogEntry) {
        self.0.note(entry);
        self.1.note(entry);
        self.2.note(entry);
    }

    fn check(self) -> Self::Check {
        (self.0.check(), self.1.check(), self.2.check())
    }
}

impl<A: Check, B: Check, C: Check> Check for (A, B, C) {
    type Report = (A::Report, B::Report, C::Report);

    fn feed(&mut self, entry: &LogEntry) {
        self.0.feed(entry);
        self.1.feed(entry);
        self.2.feed(entry);
    }

    fn finish(self) -> Self::Report {
        (self.0.finish(), self.1.finish(), self.2.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts what each read saw, to show the order: every entry noted, then every entry fed.
    #[derive(Default)]
    struct Seen(Vec<(char, u64)>);

    impl Plan for Seen {
        type Check = Seen;
        fn note(&mut self, entry: &LogEntry) {
            self.0.push(('n', entry.sequence));
        }
        fn check(self) -> Seen {
            self
        }
    }

    impl Check for Seen {
        type Report = Vec<(char, u64)>;
        fn feed(&mut self, entry: &LogEntry) {
            self.0.push(('f', entry.sequence));
        }
        fn finish(self) -> Self::Report {
            self.0
        }
    }

    #[test]
    fn both_reads_see_every_entry_in_order_and_a_tuple_runs_each_audit() {
        let entries: Vec<LogEntry> = [1, 3]
            .into_iter()
            .map(|sequence| LogEntry {
                sequence,
                subject: String::new(),
                event: Ok(Default::default()),
                pending: 0,
                trace: None,
                stored_ms: None,
            })
            .collect();
        let order = [('n', 1), ('n', 3), ('f', 1), ('f', 3)];
        assert_eq!(over_entries(Seen::default(), &entries), order);
        let (a, b, c) = over_entries(
            (Seen::default(), Seen::default(), Seen::default()),
            &entries,
        );
        assert_eq!((a, b, c), (order.to_vec(), order.to_vec(), order.to_vec()));
    }
}
