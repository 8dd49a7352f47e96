//! The nodes a per-node command (`node cordon`, `uncordon`, `remove`, `inventory apply`) could
//! not change, and which failures leave a write's outcome unknown (exit status 3).
//!
//! Place in the flow: such a command appends one event per node. It tries every node, so one
//! that fails (removed meanwhile, a write refused or never acknowledged) does not leave the
//! nodes after it as they were; the failures are summed up at the end, after the lines of the
//! nodes that were changed.

use std::fmt;

use fairshare_runtime::admin::AppendError;

/// Each node a per-node command could not change, and why.
#[derive(Debug)]
pub struct NodesNotChanged {
    /// The nodes not changed, in the order tried, each with its error.
    failed: Vec<(String, anyhow::Error)>,
    /// How many nodes the command named.
    named: usize,
}

impl NodesNotChanged {
    /// None failed yet, of `named` nodes.
    pub fn new(named: usize) -> Self {
        NodesNotChanged {
            failed: Vec::new(),
            named,
        }
    }

    /// Notes that `node` could not be changed, for `why`.
    pub fn note(&mut self, node: &str, why: anyhow::Error) {
        self.failed.push((node.to_owned(), why));
    }

    /// Whether `node` is surely as it was: its change failed, and not for want of an
    /// acknowledgement (a write never acknowledged may have landed).
    pub fn surely_unchanged(&self, node: &str) -> bool {
        self.failed
            .iter()
            .any(|(n, e)| n == node && !outcome_unknown(e))
    }

    /// Whether some node's write may have landed: its acknowledgement never came.
    pub fn outcome_unknown(&self) -> bool {
        self.failed.iter().any(|(_, e)| outcome_unknown(e))
    }

    /// `Ok` if every node was changed (or was where it was asked to go already), else this.
    pub fn finish(self) -> anyhow::Result<()> {
        if self.failed.is_empty() {
            Ok(())
        } else {
            Err(self.into())
        }
    }
}

/// Whether `e` is, or was caused by, a write whose acknowledgement never came (the command
/// then exits 3: it may have landed). A publish the server drops for this identity's
/// permissions looks the same from here; the error's text names that possibility.
pub fn outcome_unknown(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<AppendError>()
            .is_some_and(|a| a.outcome_unknown)
            || cause
                .downcast_ref::<NodesNotChanged>()
                .is_some_and(NodesNotChanged::outcome_unknown)
    })
}

impl fmt::Display for NodesNotChanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes = if self.named == 1 { "node" } else { "nodes" };
        write!(
            f,
            "{} of {} {nodes} not changed",
            self.failed.len(),
            self.named
        )?;
        for (i, (node, why)) in self.failed.iter().enumerate() {
            let sep = if i == 0 { " (" } else { "; " };
            write!(f, "{sep}{node}: {why:#}")?;
        }
        write!(f, ")")?;
        if self.failed.len() < self.named {
            write!(f, "; the others are as printed above")?;
        }
        if self.outcome_unknown() {
            write!(
                f,
                "; a write whose acknowledgement never came may have landed: run the same \
                 command again, which leaves alone a node already where it was asked to go"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for NodesNotChanged {}

#[cfg(test)]
mod tests {
    use super::*;

    fn unacknowledged() -> anyhow::Error {
        AppendError {
            subject: "fairshare.events.c.node.n2".into(),
            detail: "timed out".into(),
            stale: false,
            outcome_unknown: true,
        }
        .into()
    }

    #[test]
    fn every_failure_is_named_and_an_unacknowledged_write_says_to_run_again() {
        let mut not_changed = NodesNotChanged::new(3);
        not_changed.note("n1", anyhow::anyhow!("removed meanwhile"));
        assert!(!not_changed.outcome_unknown(), "a refusal is an answer");
        not_changed.note("n2", unacknowledged());
        assert!(not_changed.surely_unchanged("n1"));
        assert!(!not_changed.surely_unchanged("n2"), "may have landed");
        assert!(!not_changed.surely_unchanged("n3"), "changed");
        let e = not_changed.finish().unwrap_err();
        assert!(outcome_unknown(&e));
        let text = e.to_string();
        assert!(text.starts_with("2 of 3 nodes not changed (n1: removed meanwhile; n2: "));
        assert!(text.contains("the others are as printed above"), "{text}");
        assert!(text.contains("run the same command again"), "{text}");
    }

    #[test]
    fn nothing_failed_is_success_and_a_wrapped_unknown_write_is_seen() {
        assert!(NodesNotChanged::new(2).finish().is_ok());
        let mut one = NodesNotChanged::new(1);
        one.note("n1", anyhow::anyhow!("refused"));
        assert_eq!(one.to_string(), "1 of 1 node not changed (n1: refused)");
        let wrapped = unacknowledged().context("maintenance window");
        assert!(outcome_unknown(&wrapped));
        assert!(!outcome_unknown(&anyhow::anyhow!("refused")));
    }
}
