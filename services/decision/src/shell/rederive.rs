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
}

/// A basis decided again, held until its last logged decision has passed.
struct Held {
    /// The re-derived decisions, by the job each is about.
    decided: HashMap<String, pb::Event>,
    /// How many logged decisions found theirs.
    matched: usize,
    /// How many logged decisions are still to come.
    left: usize,
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
                },
            );
        });
    }

    /// Compares `logged`, a decision about `job_id` naming basis `key`, with the basis's
    /// re-derivation (decided before it came, as [`Rederivation::feed`] runs first), and lets
    /// the basis's decisions go with its last logged one.
    pub fn compare(&mut self, key: &K, job_id: &str, logged: &pb::Event) -> Compared {
        let Some(held) = self.held.get_mut(key) else {
            // Only a second read other than the first (which the two reads refuse) gets here.
            return Compared::NotRederived;
        };
        held.left = held.left.saturating_sub(1);
        let compared = match held.decided.get(job_id) {
            None => Compared::NotRederived,
            Some(r) => {
                held.matched += 1;
                if codec::encode(r) == codec::encode(logged) {
                    Compared::Same
                } else {
                    Compared::Differs(Box::new(r.clone()))
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
