//! Jobs that declare a longer minimum runtime than this service honours.
//!
//! Place in the flow: the submission service accepts minimum runtimes up to its own
//! `--max-min-runtime`; this service protects each job for at most its own
//! ([`crate::domain::contract::effective_min_runtime_ms`]). The two flags are set apart (one
//! submission service for every cluster, one preemption service per cluster), and nothing in
//! the log says which cap a job was accepted under. So the shell looks at the live jobs of the
//! checkpoint it resumed and at each `JobSubmitted` it folds, catching up or live, and the
//! first one over its cap in a start is logged as a warning that names both flags: the job was
//! promised more protection than it will get.

use fairshare_events::pb::event::Body;
use fairshare_runtime::log::LogEntry;

/// Counts the jobs folded whose declared minimum runtime is over the cap, and warns once.
#[derive(Debug)]
pub(crate) struct OverCap {
    /// This service's cap ([`crate::domain::Config::min_runtime_cap_ms`]).
    cap_ms: i64,
    /// Jobs over it folded since start.
    count: u64,
}

impl OverCap {
    pub fn new(cap_ms: i64) -> Self {
        OverCap { cap_ms, count: 0 }
    }

    /// Looks at the live jobs of a state resumed from a checkpoint (`(job id, declared
    /// minimum runtime in ms)`), whose submissions this start does not fold again: those over
    /// the cap count, and the first warns, as a folded one would.
    pub fn note_resumed<'j>(&mut self, jobs: impl Iterator<Item = (&'j str, i64)>) {
        for (job_id, declared_ms) in jobs {
            if declared_ms > self.cap_ms {
                self.found(job_id, declared_ms);
            }
        }
    }

    /// Counts a job over the cap, warning at the first.
    fn found(&mut self, job_id: &str, declared_ms: i64) {
        self.count += 1;
        if self.count == 1 {
            tracing::warn!(
                job_id,
                declared_ms,
                cap_ms = self.cap_ms,
                "a job declares a longer minimum runtime than this service's --max-min-runtime \
                 (FAIRSHARE_MAX_MIN_RUNTIME): it is protected only up to the cap; the submission \
                 service accepted it under a higher cap of its own, so set the same cap for both \
                 (further such jobs are logged at debug level)"
            );
        } else {
            tracing::debug!(job_id, declared_ms, "minimum runtime over the cap");
        }
    }

    /// Looks at a folded entry: for a job submitted with a minimum runtime over the cap, its
    /// id and declared minimum runtime (ms), after a warning if it is the first since start.
    pub fn note<'e>(&mut self, entry: &'e LogEntry) -> Option<(&'e str, i64)> {
        let Ok(event) = &entry.event else {
            return None;
        };
        let Some(Body::JobSubmitted(submitted)) = &event.body else {
            return None;
        };
        let declared_ms = submitted.spec.as_ref()?.min_runtime_s.saturating_mul(1000);
        if declared_ms <= self.cap_ms {
            return None;
        }
        self.found(&submitted.job_id, declared_ms);
        Some((&submitted.job_id, declared_ms))
    }

    /// How many jobs over the cap were found since start (resumed or folded).
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use fairshare_events::pb;

    use super::*;

    fn submitted(job_id: &str, min_runtime_s: i64) -> LogEntry {
        LogEntry {
            sequence: 1,
            subject: "fairshare.events.c.job.x".into(),
            event: Ok(pb::Event {
                at_ms: 1,
                body: Some(Body::JobSubmitted(pb::JobSubmitted {
                    job_id: job_id.into(),
                    spec: Some(pb::JobSpec {
                        min_runtime_s,
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
            }),
            pending: 0,
            trace: None,
            stored_ms: None,
        }
    }

    #[test]
    fn jobs_declaring_more_than_the_cap_are_found_and_counted() {
        let mut over = OverCap::new(4 * 3_600_000);
        assert_eq!(over.note(&submitted("at-cap", 4 * 3600)), None);
        assert_eq!(
            over.note(&submitted("six-hours", 6 * 3600)),
            Some(("six-hours", 6 * 3_600_000))
        );
        assert_eq!(
            over.note(&submitted("huge", i64::MAX)),
            Some(("huge", i64::MAX))
        );
        let mut other = submitted("x", 0);
        other.event = Ok(pb::Event::default());
        assert_eq!(over.note(&other), None);
        assert_eq!(over.count(), 2);
        over.note_resumed([("resumed", 5 * 3_600_000), ("short", 60_000)].into_iter());
        assert_eq!(
            over.count(),
            3,
            "a resumed checkpoint's live jobs count too"
        );
    }
}
