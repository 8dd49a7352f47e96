//! `fairshare node list`: the node book as a table for people.
//!
//! Place in the flow: a reader at the end; it prints what [`super::book`] folded from the node
//! and maintenance events (a drained node that holds work by the decision service's fold listed
//! as draining, [`super::book::NodeBook::busy_again`]), and writes nothing.

use fairshare_model::words::{Gpus, count};

use super::super::format_ms;
use super::book::{MaintenanceEntry, NodeBook, Standing};

/// Prints every node of `book`: GPUs, standing (with a cordon's reason) and the maintenance
/// windows not over at `now`.
pub(super) fn print(book: &NodeBook, cluster: &str, now: i64) {
    for line in lines(book, cluster, now) {
        fairshare_runtime::outln!("{line}");
    }
}

/// The lines [`print()`] writes. A node in service whose maintenance window is in progress reads
/// "in maintenance until ...": no work is placed on it then, whatever its cordon.
fn lines(book: &NodeBook, cluster: &str, now: i64) -> Vec<String> {
    let live = || {
        book.nodes
            .values()
            .filter(|e| e.standing != Standing::Removed)
    };
    let gpus = Gpus(live().map(|e| u64::from(e.gpus)).sum());
    let mut out = vec![format!(
        "cluster {cluster}: {}, {gpus}",
        count(live().count() as u64, "node")
    )];
    if book.nodes.is_empty() {
        out.push(format!(
            "  no node of cluster {cluster:?} was ever registered: is the name right? (nodes \
             are registered with `fairshare inventory apply`)"
        ));
    }
    for (name, e) in &book.nodes {
        let reason = if e.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", super::super::printable(&e.reason))
        };
        let windows = if e.standing == Standing::Removed {
            Vec::new()
        } else {
            book.windows_ahead(name, now)
        };
        let standing = match closed_until(&windows, now) {
            Some(end) if e.standing == Standing::InService => {
                format!("in maintenance until {}", format_ms(end))
            }
            _ => e.standing.words().to_owned(),
        };
        out.push(format!(
            "  {name:<20} {:>3} GPUs  {standing}{reason}",
            e.gpus
        ));
        for w in windows {
            let why = if w.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", super::super::printable(&w.reason))
            };
            out.push(format!(
                "  {:<20}            maintenance {} to {}{why}",
                "",
                format_ms(w.start_ms),
                format_ms(w.end_ms)
            ));
        }
    }
    out
}

/// When the maintenance under way at `now` ends, if any: the latest end of the windows in
/// progress, carried through every window that starts before the node opens again (windows
/// that overlap or meet keep it closed as one). `windows` are sorted by start.
fn closed_until(windows: &[&MaintenanceEntry], now: i64) -> Option<i64> {
    let mut until: Option<i64> = None;
    for w in windows {
        if w.start_ms > until.unwrap_or(now) {
            break;
        }
        until = Some(until.map_or(w.end_ms, |u| u.max(w.end_ms)));
    }
    until
}

#[cfg(test)]
mod tests {
    use fairshare_events::pb::{self, event::Body};

    use super::*;

    /// 2026-01-01T00:00:00Z.
    const T: i64 = 1_767_225_600_000;

    #[test]
    fn a_cluster_without_nodes_is_said_to_have_none_registered() {
        let lines = lines(&NodeBook::default(), "nosuch", T);
        assert_eq!(lines[0], "cluster nosuch: 0 nodes, 0 GPUs");
        assert!(lines[1].contains("no node of cluster \"nosuch\" was ever registered"));
    }

    #[test]
    fn a_node_whose_window_is_in_progress_reads_in_maintenance() {
        let mut book = NodeBook::default();
        for (seq, node) in [(1, "n1"), (2, "n2")] {
            let e = pb::Event {
                at_ms: 0,
                body: Some(Body::NodeRegistered(pb::NodeRegistered {
                    cluster: "c".into(),
                    node: node.into(),
                    gpus: 8,
                })),
            };
            book.apply(seq, &format!("n.{node}"), Some(&e));
        }
        let window = pb::Event {
            at_ms: 0,
            body: Some(Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                cluster: "c".into(),
                nodes: vec!["n1".into()],
                start_ms: T,
                end_ms: T + 3_600_000,
                reason: "disks".into(),
            })),
        };
        book.apply(3, "m", Some(&window));
        let before = lines(&book, "c", T - 1);
        assert!(before[1].ends_with("8 GPUs  in service"), "{before:?}");
        let during = lines(&book, "c", T + 60_000);
        assert!(
            during[1].ends_with("8 GPUs  in maintenance until 2026-01-01T01:00:00Z"),
            "{during:?}"
        );
        assert!(
            during[2].contains("maintenance 2026-01-01T00:00:00Z to 2026-01-01T01:00:00Z (disks)")
        );
        assert!(during[3].ends_with("8 GPUs  in service"), "{during:?}");
        let after = lines(&book, "c", T + 3_600_000);
        assert!(after[1].ends_with("in service"), "{after:?}");
        assert_eq!(after.len(), 3, "{after:?}");

        // Two more windows on n1: one overlapping the first, to 06:00, and one meeting that
        // one's end, to 07:00. The node is closed until 07:00, not until the first one ends.
        for (seq, start_ms, end_ms) in [
            (4, T + 3_600_000 / 2, T + 6 * 3_600_000),
            (5, T + 6 * 3_600_000, T + 7 * 3_600_000),
        ] {
            let more = pb::Event {
                at_ms: 0,
                body: Some(Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                    cluster: "c".into(),
                    nodes: vec!["n1".into()],
                    start_ms,
                    end_ms,
                    reason: String::new(),
                })),
            };
            book.apply(seq, "m", Some(&more));
        }
        let during = lines(&book, "c", T + 60_000);
        assert!(
            during[1].ends_with("8 GPUs  in maintenance until 2026-01-01T07:00:00Z"),
            "{during:?}"
        );
    }
}
