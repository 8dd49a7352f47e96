//! Reading a simulated log back in the tests: who ran where and when.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;

use fairshare_events::pb::{self, event::Body};

/// One job as seen in a log.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Job name (the scenario's or trace's).
    pub name: String,
    /// Allocation it charges.
    pub allocation: String,
    /// GPUs it holds when running.
    pub gpus: u64,
    /// Declared minimum runtime.
    pub min_runtime_ms: i64,
    /// Submission time.
    pub submitted: i64,
    /// Every run: (start, end if it ended).
    pub runs: Vec<(i64, Option<i64>)>,
    /// Times a preemption was ordered.
    pub ordered: Vec<i64>,
    /// When it finished, if it did.
    pub finished: Option<i64>,
    /// Nodes of each placement.
    pub nodes: Vec<Vec<String>>,
}

impl Seen {
    /// Start of its first run.
    pub fn first_start(&self) -> Option<i64> {
        self.runs.first().map(|r| r.0)
    }

    /// Submission to first start.
    pub fn wait(&self) -> Option<i64> {
        self.first_start().map(|s| s - self.submitted)
    }

    /// Whether it was running at `t`.
    pub fn running_at(&self, t: i64) -> bool {
        self.runs
            .iter()
            .any(|&(s, e)| s <= t && e.is_none_or(|e| t < e))
    }
}

/// A log read back: its jobs and its node events.
pub struct SeenLog {
    /// Jobs by id.
    pub jobs: BTreeMap<String, Seen>,
    /// Node events: (kind, node, time).
    pub nodes: Vec<(&'static str, String, i64)>,
}

/// Reads a log.
pub fn read(log: &[pb::Event]) -> SeenLog {
    let mut jobs: BTreeMap<String, Seen> = BTreeMap::new();
    let mut nodes = Vec::new();
    for e in log {
        let t = e.at_ms;
        match &e.body {
            Some(Body::JobSubmitted(s)) => {
                let spec = s.spec.clone().unwrap_or_default();
                jobs.insert(
                    s.job_id.clone(),
                    Seen {
                        name: spec.name,
                        allocation: spec.allocation,
                        gpus: spec.gpus as u64,
                        min_runtime_ms: spec.min_runtime_s * 1000,
                        submitted: t,
                        ..Seen::default()
                    },
                );
            }
            Some(Body::JobPlaced(p)) => {
                let j = jobs.get_mut(&p.job_id).expect("placed before submitted");
                j.nodes
                    .push(p.nodes.iter().map(|n| n.node.clone()).collect());
            }
            Some(Body::JobStarted(s)) => {
                let j = jobs.get_mut(&s.job_id).expect("started before submitted");
                j.runs.push((t, None));
            }
            Some(Body::JobFinished(f)) => {
                let j = jobs.get_mut(&f.job_id).expect("finished before submitted");
                j.finished = Some(t);
                if let Some(r) = j.runs.last_mut() {
                    r.1 = Some(t);
                }
            }
            Some(Body::JobPreempted(p)) => {
                let j = jobs.get_mut(&p.job_id).expect("preempted before submitted");
                if let Some(r) = j.runs.last_mut() {
                    r.1 = Some(t);
                }
            }
            Some(Body::PreemptionOrdered(o)) => {
                jobs.get_mut(&o.job_id)
                    .expect("ordered before submitted")
                    .ordered
                    .push(t);
            }
            Some(Body::NodeCordoned(n)) => nodes.push(("cordoned", n.node.clone(), t)),
            Some(Body::NodeUncordoned(n)) => nodes.push(("uncordoned", n.node.clone(), t)),
            Some(Body::NodeDrained(n)) => nodes.push(("drained", n.node.clone(), t)),
            _ => {}
        }
    }
    SeenLog { jobs, nodes }
}

impl SeenLog {
    /// GPUs running per allocation at `t`.
    pub fn running_gpus(&self, allocation: &str, t: i64) -> u64 {
        self.jobs
            .values()
            .filter(|j| j.allocation == allocation && j.running_at(t))
            .map(|j| j.gpus)
            .sum()
    }

    /// Jobs whose name starts with `prefix`, in job id (submission) order.
    pub fn named(&self, prefix: &str) -> Vec<&Seen> {
        self.jobs
            .values()
            .filter(|j| j.name.starts_with(prefix))
            .collect()
    }
}
