//! `fairshare node list`: the node book as a table for people.
//!
//! Place in the flow: a reader at the end; it prints what [`super::book`] folded from the node
//! and maintenance events, and writes nothing.

use super::super::format_ms;
use super::book::{NodeBook, Standing};

/// Prints every node of `book`: GPUs, standing (with a cordon's reason) and the maintenance
/// windows not over at `now`.
pub(super) fn print(book: &NodeBook, cluster: &str, now: i64) {
    let gpus: u64 = book
        .nodes
        .values()
        .filter(|e| e.standing != Standing::Removed)
        .map(|e| u64::from(e.gpus))
        .sum();
    let live = book
        .nodes
        .values()
        .filter(|e| e.standing != Standing::Removed);
    fairshare_runtime::outln!("cluster {cluster}: {} nodes, {gpus} GPUs", live.count());
    for (name, e) in &book.nodes {
        let reason = if e.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", e.reason)
        };
        fairshare_runtime::outln!(
            "  {name:<20} {:>3} GPUs  {}{reason}",
            e.gpus,
            e.standing.words()
        );
        if e.standing == Standing::Removed {
            continue;
        }
        for w in book.windows_ahead(name, now) {
            let why = if w.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", w.reason)
            };
            fairshare_runtime::outln!(
                "  {:<20}            maintenance {} to {}{why}",
                "",
                format_ms(w.start_ms),
                format_ms(w.end_ms)
            );
        }
    }
}
