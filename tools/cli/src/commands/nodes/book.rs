//! Where each node of a cluster stands, folded from its node and maintenance events: what
//! `fairshare node list` prints and what the node commands check a change against.
//!
//! Place in the flow: a reader of the log, like the services' folds but of two kinds of subject
//! only (`fairshare.events.<cluster>.node.<node>` and `.maintenance`), corrected by the decision
//! service's fold where a drained report no longer holds ([`NodeBook::busy_again`]). Pure:
//! entries in, a book out; the time is an argument.

use std::collections::{BTreeMap, BTreeSet};

use fairshare_events::pb::{self, event::Body};

/// A node's standing, as the services see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Takes placements.
    InService,
    /// Cordoned: takes no placements; its jobs are ordered off as their protection ends.
    Draining,
    /// Cordoned, and the preemption service reported it empty.
    Drained,
    /// Out of the inventory.
    Removed,
}

impl Standing {
    /// In words, for the listing.
    pub fn words(self) -> &'static str {
        match self {
            Standing::InService => "in service",
            Standing::Draining => "cordoned, draining",
            Standing::Drained => "cordoned, drained",
            Standing::Removed => "removed",
        }
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEntry {
    /// GPUs it was registered with.
    pub gpus: u32,
    /// Where it stands.
    pub standing: Standing,
    /// The reason of its cordon, while cordoned.
    pub reason: String,
}

/// A maintenance window as scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceEntry {
    /// Start, Unix ms.
    pub start_ms: i64,
    /// End (exclusive), Unix ms.
    pub end_ms: i64,
    /// The nodes it takes.
    pub nodes: Vec<String>,
    /// Why.
    pub reason: String,
}

/// What an inventory file changes ([`NodeBook::inventory_changes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InventoryChanges {
    /// Registrations to append, each with the sequence its node's subject must still be at.
    pub write: Vec<(pb::NodeRegistered, u64)>,
    /// Nodes registered as the file says already.
    pub unchanged: usize,
    /// Nodes the file lists that were removed from the inventory (`node remove`).
    pub removed: Vec<String>,
    /// Nodes the file lists under a name that differs only by case from a node in service:
    /// `(the file's name, the registered one)`. Host names are case-insensitive, so
    /// registering it would count the same GPUs twice.
    pub case_clashes: Vec<(String, String)>,
}

/// A cluster's nodes and maintenance windows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeBook {
    /// Every node ever registered, by name.
    pub nodes: BTreeMap<String, NodeEntry>,
    /// Every maintenance window scheduled, in log order (a removed node taken out of each).
    pub maintenance: Vec<MaintenanceEntry>,
    /// Windows taken back, as `(start, end, node)`, until scheduled again: a cancel sent twice
    /// (a retry after an unknown outcome) is answered "already cancelled", not refused.
    pub cancelled: BTreeSet<(i64, i64, String)>,
    /// Per subject, the sequence of its newest entry, whatever it held (one this build cannot
    /// decode too): a change is appended only if its subject is still there.
    pub subject_sequences: BTreeMap<String, u64>,
}

impl NodeBook {
    /// Folds the entry at `sequence` on `subject` (`None`: it did not decode). Events for
    /// nodes never registered change nothing (the services ignore them too).
    pub fn apply(&mut self, sequence: u64, subject: &str, event: Option<&pb::Event>) {
        self.subject_sequences.insert(subject.to_owned(), sequence);
        let Some(body) = event.and_then(|e| e.body.as_ref()) else {
            return;
        };
        match body {
            Body::NodeRegistered(n) => {
                // A registration keeps a cordon, as the services' inventory does; it brings a
                // removed node back.
                let entry = self.nodes.entry(n.node.clone()).or_insert(NodeEntry {
                    gpus: n.gpus,
                    standing: Standing::InService,
                    reason: String::new(),
                });
                entry.gpus = n.gpus;
                if entry.standing == Standing::Removed {
                    entry.standing = Standing::InService;
                }
            }
            Body::NodeCordoned(n) => {
                if let Some(e) = self.nodes.get_mut(&n.node)
                    && e.standing != Standing::Removed
                {
                    e.standing = Standing::Draining;
                    e.reason.clone_from(&n.reason);
                }
            }
            Body::NodeUncordoned(n) => {
                if let Some(e) = self.nodes.get_mut(&n.node)
                    && e.standing != Standing::Removed
                {
                    e.standing = Standing::InService;
                    e.reason.clear();
                }
            }
            Body::NodeDrained(n) => {
                if let Some(e) = self.nodes.get_mut(&n.node)
                    && e.standing == Standing::Draining
                {
                    e.standing = Standing::Drained;
                }
            }
            Body::NodeRemoved(n) => {
                if let Some(e) = self.nodes.get_mut(&n.node) {
                    e.standing = Standing::Removed;
                    e.reason.clear();
                    // The services forget a removed node's windows.
                    for w in &mut self.maintenance {
                        w.nodes.retain(|name| *name != n.node);
                    }
                }
            }
            Body::MaintenanceCancelled(m) => {
                for w in &mut self.maintenance {
                    if (w.start_ms, w.end_ms) == (m.start_ms, m.end_ms) {
                        for name in w.nodes.iter().filter(|n| m.nodes.contains(n)) {
                            self.cancelled.insert((m.start_ms, m.end_ms, name.clone()));
                        }
                        w.nodes.retain(|name| !m.nodes.contains(name));
                    }
                }
            }
            Body::MaintenanceScheduled(m) => {
                for n in &m.nodes {
                    self.cancelled.remove(&(m.start_ms, m.end_ms, n.clone()));
                }
                // The same window scheduled again adds its nodes to the one listed, as the
                // services keep each window once per node.
                if let Some(w) = self
                    .maintenance
                    .iter_mut()
                    .find(|w| (w.start_ms, w.end_ms) == (m.start_ms, m.end_ms))
                {
                    for n in &m.nodes {
                        if !w.nodes.contains(n) {
                            w.nodes.push(n.clone());
                        }
                    }
                    return;
                }
                self.maintenance.push(MaintenanceEntry {
                    start_ms: m.start_ms,
                    end_ms: m.end_ms,
                    nodes: m.nodes.clone(),
                    reason: m.reason.clone(),
                });
            }
            _ => {}
        }
    }

    /// Whether any node is reported drained: only then does [`NodeBook::busy_again`] have
    /// anything to check.
    pub fn any_drained(&self) -> bool {
        self.nodes.values().any(|e| e.standing == Standing::Drained)
    }

    /// Marks draining again every node reported drained that holds work by `holds_work` (the
    /// decision service's fold of the whole log). A drained report is fenced on the node's own
    /// events, a placement on its job's: one decided before the cordon can land just after the
    /// report, or just before a report decided without it. The preemption service disregards
    /// such a report and reports the node again once that job has gone; so does the listing.
    pub fn busy_again(&mut self, holds_work: impl Fn(&str) -> bool) {
        for (name, e) in &mut self.nodes {
            if e.standing == Standing::Drained && holds_work(name) {
                e.standing = Standing::Draining;
            }
        }
    }

    /// What applying an inventory's `registrations` (of this book's cluster) would change:
    /// nodes new or registered with other GPUs are written, each expecting its subject's
    /// newest sequence; nodes registered as they are stay as they stand (a cordon too); nodes
    /// removed from the inventory come back only with `readd`, otherwise they are named.
    pub fn inventory_changes(
        &self,
        registrations: Vec<pb::NodeRegistered>,
        readd: bool,
    ) -> InventoryChanges {
        let mut changes = InventoryChanges::default();
        // Nodes in service by lower-cased name (registration names are checked to be unique
        // that way within a file, and the same holds against the log).
        let in_service: BTreeMap<String, &str> = self
            .nodes
            .iter()
            .filter(|(_, e)| e.standing != Standing::Removed)
            .map(|(name, _)| (name.to_ascii_lowercase(), name.as_str()))
            .collect();
        for r in registrations {
            // The exact name in service is that node, whatever other case variants of it a
            // log from before the check holds.
            let exact = self
                .nodes
                .get(&r.node)
                .is_some_and(|e| e.standing != Standing::Removed);
            if !exact
                && let Some(registered) = in_service.get(&r.node.to_ascii_lowercase())
                && *registered != r.node
            {
                changes
                    .case_clashes
                    .push((r.node.clone(), (*registered).to_owned()));
                continue;
            }
            match self.nodes.get(&r.node) {
                Some(e) if e.standing == Standing::Removed && !readd => {
                    changes.removed.push(r.node);
                }
                Some(e) if e.standing != Standing::Removed && e.gpus == r.gpus => {
                    changes.unchanged += 1;
                }
                _ => {
                    let subject = fairshare_events::subjects::node(&r.cluster, &r.node);
                    let last = self.sequence_on(&subject);
                    changes.write.push((r, last));
                }
            }
        }
        changes
    }

    /// The sequence of the newest entry on `subject` (0: none).
    pub fn sequence_on(&self, subject: &str) -> u64 {
        self.subject_sequences.get(subject).copied().unwrap_or(0)
    }

    /// The node named `node`, unless it was never registered or was removed.
    pub fn live(&self, node: &str) -> Option<&NodeEntry> {
        self.nodes
            .get(node)
            .filter(|e| e.standing != Standing::Removed)
    }

    /// Whether a window of exactly `[start_ms, end_ms)` on `node` was taken back (and not
    /// scheduled again since).
    pub fn was_cancelled(&self, node: &str, start_ms: i64, end_ms: i64) -> bool {
        self.cancelled
            .contains(&(start_ms, end_ms, node.to_owned()))
    }

    /// Whether a window of exactly `[start_ms, end_ms)` takes `node`.
    pub fn has_window(&self, node: &str, start_ms: i64, end_ms: i64) -> bool {
        self.maintenance.iter().any(|w| {
            (w.start_ms, w.end_ms) == (start_ms, end_ms) && w.nodes.iter().any(|n| n == node)
        })
    }

    /// The maintenance windows not over at `now_ms` that take `node`, in start order.
    pub fn windows_ahead(&self, node: &str, now_ms: i64) -> Vec<&MaintenanceEntry> {
        let mut ahead: Vec<_> = self
            .maintenance
            .iter()
            .filter(|w| w.end_ms > now_ms && w.nodes.iter().any(|n| n == node))
            .collect();
        ahead.sort_by_key(|w| (w.start_ms, w.end_ms));
        ahead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inventory_writes_only_what_differs_and_names_removed_nodes() {
        let reg = |node: &str, gpus| pb::NodeRegistered {
            cluster: "c".into(),
            node: node.into(),
            gpus,
        };
        let event = |body| pb::Event {
            at_ms: 1,
            body: Some(body),
        };
        let mut book = NodeBook::default();
        let node_subject = |n: &str| fairshare_events::subjects::node("c", n);
        for (seq, n) in [(1, "same"), (2, "cordoned"), (3, "resized"), (4, "gone")] {
            book.apply(
                seq,
                &node_subject(n),
                Some(&event(Body::NodeRegistered(reg(n, 8)))),
            );
        }
        let cordon = Body::NodeCordoned(pb::NodeCordoned {
            cluster: "c".into(),
            node: "cordoned".into(),
            reason: "fan".into(),
        });
        book.apply(5, &node_subject("cordoned"), Some(&event(cordon)));
        let removed = Body::NodeRemoved(pb::NodeRemoved {
            cluster: "c".into(),
            node: "gone".into(),
        });
        book.apply(6, &node_subject("gone"), Some(&event(removed)));
        let file = || {
            vec![
                reg("same", 8),
                reg("cordoned", 8),
                reg("resized", 4),
                reg("gone", 8),
                reg("new", 8),
            ]
        };
        let changes = book.inventory_changes(file(), false);
        assert_eq!(changes.unchanged, 2, "a cordoned node stays cordoned");
        assert_eq!(changes.removed, ["gone"]);
        assert_eq!(changes.write, [(reg("resized", 4), 3), (reg("new", 8), 0)]);
        let readd = book.inventory_changes(file(), true);
        assert!(readd.removed.is_empty());
        assert_eq!(
            readd.write,
            [
                (reg("resized", 4), 3),
                (reg("gone", 8), 6),
                (reg("new", 8), 0)
            ]
        );
        assert!(changes.case_clashes.is_empty() && readd.case_clashes.is_empty());

        // A name that differs only by case from a node in service is no new node: the same
        // host, whose GPUs would count twice. One from a removed node's is a new one.
        let clashing = book.inventory_changes(
            vec![reg("SAME", 8), reg("Resized", 4), reg("GONE", 8)],
            false,
        );
        assert_eq!(
            clashing.case_clashes,
            [
                ("SAME".to_owned(), "same".to_owned()),
                ("Resized".to_owned(), "resized".to_owned())
            ]
        );
        assert_eq!(clashing.write, [(reg("GONE", 8), 0)]);

        // Two case variants in service already (a log from before the check): each is itself,
        // by its exact name; a third variant still clashes.
        book.apply(
            7,
            &node_subject("Same"),
            Some(&event(Body::NodeRegistered(reg("Same", 8)))),
        );
        let both =
            book.inventory_changes(vec![reg("same", 8), reg("Same", 4), reg("SAME", 8)], false);
        assert_eq!(both.unchanged, 1);
        assert_eq!(both.write, [(reg("Same", 4), 7)]);
        assert_eq!(both.case_clashes.len(), 1, "{:?}", both.case_clashes);
        assert_eq!(both.case_clashes[0].0, "SAME");
    }

    fn event(body: Body) -> pb::Event {
        pb::Event {
            at_ms: 0,
            body: Some(body),
        }
    }

    fn registered(node: &str, gpus: u32) -> pb::Event {
        event(Body::NodeRegistered(pb::NodeRegistered {
            cluster: "c".into(),
            node: node.into(),
            gpus,
        }))
    }

    fn cordoned(node: &str, reason: &str) -> pb::Event {
        event(Body::NodeCordoned(pb::NodeCordoned {
            cluster: "c".into(),
            node: node.into(),
            reason: reason.into(),
        }))
    }

    fn node_event(node: &str, kind: &str) -> pb::Event {
        let (cluster, node) = ("c".to_owned(), node.to_owned());
        event(match kind {
            "uncordoned" => Body::NodeUncordoned(pb::NodeUncordoned { cluster, node }),
            "drained" => Body::NodeDrained(pb::NodeDrained { cluster, node }),
            _ => Body::NodeRemoved(pb::NodeRemoved { cluster, node }),
        })
    }

    /// Folds `e` on the subject its writer would use: `n.<node>` or `m` (maintenance).
    fn feed(book: &mut NodeBook, sequence: u64, e: &pb::Event) {
        let subject = match &e.body {
            Some(Body::NodeRegistered(n)) => format!("n.{}", n.node),
            Some(Body::NodeCordoned(n)) => format!("n.{}", n.node),
            Some(Body::NodeUncordoned(n)) => format!("n.{}", n.node),
            Some(Body::NodeDrained(n)) => format!("n.{}", n.node),
            Some(Body::NodeRemoved(n)) => format!("n.{}", n.node),
            _ => "m".to_owned(),
        };
        book.apply(sequence, &subject, Some(e));
    }

    fn standing(book: &NodeBook, node: &str) -> Standing {
        book.nodes[node].standing
    }

    #[test]
    fn a_node_goes_from_service_through_a_drain_to_removal_and_back() {
        let mut book = NodeBook::default();
        feed(&mut book, 1, &registered("n1", 8));
        feed(&mut book, 2, &registered("n2", 4));
        assert_eq!(standing(&book, "n1"), Standing::InService);
        feed(&mut book, 3, &cordoned("n1", "disk"));
        assert_eq!(standing(&book, "n1"), Standing::Draining);
        assert_eq!(book.nodes["n1"].reason, "disk");
        // Applying the inventory again keeps the cordon, as the services do.
        feed(&mut book, 4, &registered("n1", 8));
        assert_eq!(standing(&book, "n1"), Standing::Draining);
        assert_eq!(book.sequence_on("n.n1"), 4);
        feed(&mut book, 5, &node_event("n1", "drained"));
        assert_eq!(standing(&book, "n1"), Standing::Drained);
        feed(&mut book, 6, &node_event("n1", "removed"));
        assert_eq!(standing(&book, "n1"), Standing::Removed);
        assert!(book.live("n1").is_none());
        assert_eq!(book.live("n2").map(|e| e.gpus), Some(4));
        feed(&mut book, 7, &registered("n1", 8));
        assert_eq!(standing(&book, "n1"), Standing::InService);
        assert_eq!(book.nodes["n1"].reason, "");
    }

    /// A node reported drained that holds work by the services' fold is draining again; one
    /// that holds none, or one never reported drained, keeps its standing.
    #[test]
    fn a_drained_node_that_holds_work_is_draining_again() {
        let mut book = NodeBook::default();
        for (i, n) in ["n1", "n2", "n3", "n4"].iter().enumerate() {
            feed(&mut book, i as u64 + 1, &registered(n, 8));
        }
        assert!(!book.any_drained());
        feed(&mut book, 5, &cordoned("n1", "disk"));
        feed(&mut book, 6, &cordoned("n2", "fan"));
        feed(&mut book, 7, &cordoned("n3", "psu"));
        feed(&mut book, 8, &node_event("n1", "drained"));
        feed(&mut book, 9, &node_event("n2", "drained"));
        assert!(book.any_drained());
        // n1 and n3 hold work (n3 was never reported drained), n2 and n4 none.
        book.busy_again(|n| n == "n1" || n == "n3");
        assert_eq!(standing(&book, "n1"), Standing::Draining);
        assert_eq!(standing(&book, "n2"), Standing::Drained);
        assert_eq!(standing(&book, "n3"), Standing::Draining);
        assert_eq!(standing(&book, "n4"), Standing::InService);
        // Emptied again, it is reported again.
        feed(&mut book, 10, &node_event("n1", "drained"));
        assert_eq!(standing(&book, "n1"), Standing::Drained);
    }

    #[test]
    fn an_uncordon_ends_a_drain_and_a_late_drained_report_does_not_bring_it_back() {
        let mut book = NodeBook::default();
        feed(&mut book, 1, &registered("n1", 8));
        feed(&mut book, 2, &cordoned("n1", "fan"));
        feed(&mut book, 3, &node_event("n1", "uncordoned"));
        assert_eq!(standing(&book, "n1"), Standing::InService);
        feed(&mut book, 4, &node_event("n1", "drained"));
        assert_eq!(standing(&book, "n1"), Standing::InService);
        // Events for a node never registered change nothing.
        feed(&mut book, 5, &cordoned("ghost", "x"));
        assert!(!book.nodes.contains_key("ghost"));
    }

    #[test]
    fn maintenance_windows_ahead_of_now_are_listed_per_node_in_start_order() {
        let mut book = NodeBook::default();
        let window = |start_ms, end_ms, nodes: &[&str]| {
            event(Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                cluster: "c".into(),
                nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
                start_ms,
                end_ms,
                reason: "r".into(),
            }))
        };
        feed(&mut book, 1, &window(500, 600, &["n1", "n2"]));
        feed(&mut book, 2, &window(100, 200, &["n1"]));
        feed(&mut book, 3, &window(10, 50, &["n1"]));
        assert_eq!(book.sequence_on("m"), 3);
        // An entry that does not decode still moves its subject's sequence.
        book.apply(4, "m", None);
        assert_eq!(book.sequence_on("m"), 4);
        let starts: Vec<i64> = book
            .windows_ahead("n1", 60)
            .iter()
            .map(|w| w.start_ms)
            .collect();
        assert_eq!(starts, [100, 500]);
        assert!(book.windows_ahead("n2", 600).is_empty());
        // Removed, a node's windows are gone, as the services forget them.
        feed(&mut book, 5, &registered("n1", 8));
        feed(&mut book, 6, &node_event("n1", "removed"));
        feed(&mut book, 7, &registered("n1", 8));
        assert!(book.windows_ahead("n1", 60).is_empty());
        assert_eq!(book.windows_ahead("n2", 60).len(), 1);
        // Cancelled for n2: gone for it (and a cancel of other times changes nothing).
        assert!(book.has_window("n2", 500, 600));
        let cancel = |start_ms, end_ms| {
            event(Body::MaintenanceCancelled(pb::MaintenanceCancelled {
                cluster: "c".into(),
                nodes: vec!["n2".into()],
                start_ms,
                end_ms,
                reason: String::new(),
            }))
        };
        feed(&mut book, 8, &cancel(500, 601));
        assert!(book.has_window("n2", 500, 600));
        feed(&mut book, 9, &cancel(500, 600));
        assert!(!book.has_window("n2", 500, 600));
        assert!(book.was_cancelled("n2", 500, 600));
        assert!(!book.was_cancelled("n2", 500, 601));
        assert!(!book.was_cancelled("n1", 500, 600));
        assert!(book.windows_ahead("n2", 60).is_empty());
        assert_eq!(book.sequence_on("m"), 9);
        // Scheduled again, a window is listed once (and is no longer a cancelled one).
        feed(&mut book, 10, &window(500, 600, &["n2"]));
        assert!(!book.was_cancelled("n2", 500, 600));
        feed(&mut book, 10, &window(100, 200, &["n1", "n2"]));
        assert_eq!(book.windows_ahead("n1", 60).len(), 1);
        assert!(book.has_window("n2", 100, 200));
    }
}
