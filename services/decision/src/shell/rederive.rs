//! The two reads of an audit that re-derives logged decisions (placements here, preemption
//! orders in the preemption service): the first counts the logged decisions per basis
//! ([`Tally`] of [`Logged`] entries); the second ([`Rederivation`]) folds the log entry by
//! entry, decides again where each decision's basis ends, and holds what was decided only
//! until the logged decisions naming that basis have streamed past.
//!
//! Place in the flow: after the fact, under `audit_log` of both services. A basis ends before
//! the decisions naming it (a decision naming its own sequence or a later one is reported
//! apart, never keyed), so each basis is decided again before its first logged decision comes;
//! with a count per basis from the first read, its re-derived set is dropped with its last. The
//! memory held is the folds and the decisions in flight, whatever the log's length.

use std::collections::{BTreeMap, HashMap};

use fairshare_events::codec;
use fairshare_events::pb;
use fairshare_model::logtime::{MAX_AHEAD_OF_LOG_MS, effective_at};
use fairshare_runtime::log::LogEntry;

use super::window::{Basis, Replay, WindowFold};

/// What one log entry is to an audit of one kind of decision (placements, orders).
pub enum Logged<'e, K, D, B> {
    /// Not such a decision (or not decodable: the folds pass over it).
    Other,
    /// A decision that names no basis it could be decided again from: a finding at once.
    Unkeyed(D),
    /// A decision, the basis it names, its body and the whole event.
    Keyed(K, &'e B, &'e pb::Event),
}

/// What an audit's first read keeps: counts, the decisions that name no basis, and per basis
/// how many logged decisions name it.
#[derive(Debug)]
pub struct Tally<K, D> {
    /// Entries read.
    pub entries: usize,
    /// The last one's sequence.
    pub last_sequence: u64,
    /// Decisions read, keyed or not.
    pub decisions: usize,
    /// The decisions that name no basis, as findings, in log order.
    pub unkeyed: Vec<D>,
    /// Per basis, how many logged decisions name it.
    pub per_basis: BTreeMap<K, usize>,
}

impl<K, D> Default for Tally<K, D> {
    fn default() -> Self {
        Self {
            entries: 0,
            last_sequence: 0,
            decisions: 0,
            unkeyed: Vec::new(),
            per_basis: BTreeMap::new(),
        }
    }
}

impl<K: Ord, D> Tally<K, D> {
    /// Counts the entry at `sequence`, which is `logged`.
    pub fn note<B>(&mut self, sequence: u64, logged: Logged<'_, K, D, B>) {
        self.entries += 1;
        self.last_sequence = sequence;
        match logged {
            Logged::Other => {}
            Logged::Unkeyed(finding) => {
                self.decisions += 1;
                self.unkeyed.push(finding);
            }
            Logged::Keyed(basis, ..) => {
                self.decisions += 1;
                *self.per_basis.entry(basis).or_default() += 1;
            }
        }
    }
}

/// How a logged decision compares with its basis's re-derivation.
#[derive(Debug, PartialEq)]
pub enum Compared {
    /// Re-derived byte for byte.
    Same,
    /// Deciding again from its basis decides nothing for its job.
    NotRederived,
    /// Deciding again decides for its job, with other bytes: this.
    Differs(Box<pb::Event>),
    /// Re-derived byte for byte, but its "now" is more than [`MAX_AHEAD_OF_LOG_MS`] before the
    /// log's time then: the latest time its basis's entries took effect, or the time the
    /// stream stored the decision itself if earlier (in ms). A service holds its "now" to no
    /// earlier than the newest entry it folded was stored, or than the server's clock when it
    /// reads it again (after the server's clock was set back), and an entry takes effect at
    /// most that margin after it was stored, so no service decided it then: a clock set back
    /// or a forged basis, re-derived at a time that may place or order what the log's time
    /// would not (a protection that runs into a maintenance window, say).
    BeforeItsLog(i64),
}

/// A basis decided again, held until its last logged decision has passed.
struct Held {
    /// The re-derived decisions, by the job each is about.
    decided: HashMap<String, pb::Event>,
    /// How many logged decisions found theirs.
    matched: usize,
    /// How many logged decisions are still to come.
    left: usize,
    /// The latest time the basis's entries took effect ([`Compared::BeforeItsLog`]).
    log_ms: i64,
}

/// Folds of the log under each window the bases name, deciding again at each basis.
pub struct Rederivation<F, K> {
    /// The folds, stopping at each basis.
    replay: Replay<F, K>,
    /// Per basis, how many logged decisions name it (from the first read), until decided.
    expected: BTreeMap<K, usize>,
    /// Bases decided again whose logged decisions are still to come.
    held: HashMap<K, Held>,
    /// Bases decided again.
    bases: usize,
    /// Decisions re-derived that no logged one matched, over the bases let go.
    unpublished: usize,
    /// The latest time an entry fed so far takes effect ([`effective_at`]).
    log_ms: i64,
}

impl<F: WindowFold, K: Basis + std::hash::Hash> Rederivation<F, K> {
    /// For the bases of `expected` (each with how many logged decisions name it) in
    /// `cluster`'s log.
    pub fn new(cluster: &str, expected: BTreeMap<K, usize>) -> Self {
        Self {
            replay: Replay::new(cluster, expected.keys().copied()),
            expected,
            held: HashMap::new(),
            bases: 0,
            unpublished: 0,
            log_ms: i64::MIN,
        }
    }

    /// Decides again, with `decide` (the decisions of a basis from the fold of its window, by
    /// job), every basis that ends before `entry`, then folds `entry`. Entries come in log
    /// order, the same the first read counted.
    pub fn feed(
        &mut self,
        entry: &LogEntry,
        mut decide: impl FnMut(&K, &F) -> HashMap<String, pb::Event>,
    ) {
        let (expected, held, bases) = (&mut self.expected, &mut self.held, &mut self.bases);
        let log_ms = self.log_ms;
        self.replay.feed(entry, |key, fold| {
            *bases += 1;
            let left = expected.remove(key).unwrap_or(0);
            let decided = decide(key, fold);
            held.insert(
                *key,
                Held {
                    decided,
                    matched: 0,
                    left,
                    log_ms,
                },
            );
        });
        if let Ok(event) = &entry.event {
            self.log_ms = self.log_ms.max(effective_at(event.at_ms, entry.stored_ms));
        }
    }

    /// Compares `logged`, a decision about `job_id` naming basis `key` that the stream stored
    /// at `stored_ms`, with the basis's re-derivation (decided before it came, as
    /// [`Rederivation::feed`] runs first), and lets the basis's decisions go with its last
    /// logged one.
    pub fn compare(
        &mut self,
        key: &K,
        job_id: &str,
        logged: &pb::Event,
        stored_ms: Option<i64>,
    ) -> Compared {
        let Some(held) = self.held.get_mut(key) else {
            // Only a second read other than the first (which the two reads refuse) gets here.
            return Compared::NotRederived;
        };
        held.left = held.left.saturating_sub(1);
        let compared = match held.decided.get(job_id) {
            None => Compared::NotRederived,
            Some(r) => {
                held.matched += 1;
                // The log's time when the decision landed: a server clock set back since
                // its basis's entries were stored moved every service's "now" back with it.
                let log_ms = stored_ms.map_or(held.log_ms, |s| s.min(held.log_ms));
                if codec::encode(r) != codec::encode(logged) {
                    Compared::Differs(Box::new(r.clone()))
                } else if key.computed_at_ms() < log_ms.saturating_sub(MAX_AHEAD_OF_LOG_MS) {
                    Compared::BeforeItsLog(log_ms)
                } else {
                    Compared::Same
                }
            }
        };
        if held.left == 0
            && let Some(gone) = self.held.remove(key)
        {
            self.unpublished += gone.decided.len().saturating_sub(gone.matched);
        }
        compared
    }

    /// Bases decided again so far.
    pub fn bases(&self) -> usize {
        self.bases
    }

    /// Decisions re-derived that no logged decision matched, over the bases let go: refused
    /// by optimistic concurrency, or never sent because the service stopped mid-way.
    pub fn unpublished(&self) -> usize {
        self.unpublished
    }

    /// How many bases' re-derived decisions are held, their logged ones still to come.
    pub fn bases_held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fairshare_events::pb::event::Body;

    /// A fold that keeps nothing.
    struct Nothing;

    impl WindowFold for Nothing {
        fn for_window(_: &str, _: Option<i64>) -> Self {
            Nothing
        }

        fn fold(&mut self, _: &LogEntry) {}
    }

    /// A basis: through a sequence, decided at a time.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct At(u64, i64);

    impl Basis for At {
        fn through_sequence(&self) -> u64 {
            self.0
        }

        fn usage_window_ms(&self) -> i64 {
            0
        }

        fn computed_at_ms(&self) -> i64 {
            self.1
        }
    }

    fn started(sequence: u64, at_ms: i64, stored_ms: Option<i64>) -> LogEntry {
        let body = Body::JobStarted(pb::JobStarted { job_id: "x".into() });
        let mut entry = fairshare_testkit::events::logged(sequence, String::new(), at_ms, body);
        entry.stored_ms = stored_ms;
        entry
    }

    /// A decision whose "now" is more than the writers' allowance before the latest time its
    /// basis's entries took effect re-derives, but is reported as decided before its log; one
    /// at the allowance is the same. An entry counts from a minute after it was stored at the
    /// latest, and entries after the basis count for nothing.
    #[test]
    fn a_decision_before_its_basis_took_effect_is_told_apart() {
        let decided = pb::Event {
            at_ms: 0,
            body: Some(Body::JobStarted(pb::JobStarted { job_id: "j".into() })),
        };
        let compare_stored = |log: &[LogEntry], at: At, stored: Option<i64>| {
            let mut r = Rederivation::<Nothing, At>::new("c", [(at, 1)].into());
            for entry in log {
                r.feed(entry, |_, _| [("j".to_owned(), decided.clone())].into());
            }
            r.compare(&at, "j", &decided, stored)
        };
        let compare = |log: &[LogEntry], at: At| compare_stored(log, at, None);
        let log = [
            started(1, 10_000, None),
            started(2, 200_000, Some(20_000)),
            started(3, 500_000, None),
            // Where the decisions land: after every basis, so counting for none.
            started(4, 900_000, None),
        ];
        // Through 1: the log's time is 10 s.
        assert_eq!(compare(&log, At(1, 0)), Compared::Same);
        // Through 2: entry 2 was stored at 20 s, so it took effect at 80 s at the latest.
        assert_eq!(compare(&log, At(2, 20_000)), Compared::Same);
        assert_eq!(compare(&log, At(2, 19_999)), Compared::BeforeItsLog(80_000));
        // Through 3: 500 s.
        assert_eq!(
            compare(&log, At(3, 439_999)),
            Compared::BeforeItsLog(500_000)
        );
        // Stored at 100 s: the server's clock was set back after entry 3 (stamped by a clock
        // ahead with it), and every service's "now" with it.
        assert_eq!(
            compare_stored(&log, At(3, 40_000), Some(100_000)),
            Compared::Same
        );
        assert_eq!(
            compare_stored(&log, At(3, 39_999), Some(100_000)),
            Compared::BeforeItsLog(100_000)
        );
    }
}
