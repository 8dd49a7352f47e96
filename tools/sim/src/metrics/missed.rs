//! Where owed time was missed: hour by hour, whether the allocation that missed it had already
//! used its allocation over the fair-share window.
//!
//! Place in the flow: [`measure`](super::measure) calls [`MissedOwed::close_hours`] before it
//! folds each event, and once more at the end of the run. Each call closes every hour that
//! ended since the last one: it reads the accounting ledger's totals (owed, and owed that was
//! delivered), takes the difference since the previous hour, and files what each allocation
//! missed in that hour under what the window said when the hour began.
//!
//! Why: owed is measured hour by hour, but fairshare ranks by usage over the whole window. An
//! allocation that used idle GPUs last week has a window ratio (charged over allocated time)
//! of 1 or more, ranks after the others, and so gives GPUs back this week; the hourly metric
//! still owes it its fraction every hour it has work queued. Time missed that way is the window
//! working as specified, not the scheduler failing to deliver, and a report that does not
//! separate the two cannot tell a user which window to choose.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fairshare_accounting::domain::UsageFold;
use fairshare_model::hour::{HOUR_MS, hour_start};

/// The running split of missed owed time.
#[derive(Debug, Default)]
pub(super) struct MissedOwed {
    /// End of the hour now open (a Unix epoch hour, as the ledger counts), once an event was
    /// seen.
    hour_end_ms: Option<i64>,
    /// Allocations whose window ratio was at least 1 when the open hour began.
    over_served: BTreeSet<String>,
    /// Ledger totals (owed, owed delivered) per allocation at the end of the last hour closed.
    last: HashMap<String, (u128, u128)>,
    /// Per allocation: (owed GPU-ms, owed GPU-ms missed) in hours that began with it
    /// over-served.
    pub over_served_hours: BTreeMap<String, (u128, u128)>,
}

impl MissedOwed {
    /// Closes every hour that ends at or before `now`. `usage` must have folded every event
    /// before `now` and none at or after it.
    pub fn close_hours(&mut self, usage: &UsageFold, now: i64) {
        let Some(cluster) = usage.cluster_names().next() else {
            return;
        };
        let mut end = *self
            .hour_end_ms
            .get_or_insert_with(|| hour_start(now).saturating_add(HOUR_MS));
        while end <= now {
            self.close(usage, cluster, end);
            end = end.saturating_add(HOUR_MS);
            self.hour_end_ms = Some(end);
        }
    }

    fn close(&mut self, usage: &UsageFold, cluster: &str, end: i64) {
        if let Ok(ledger) = usage.ledger(cluster, end) {
            for row in &ledger.allocations {
                let now = (row.totals.owed_gpu_ms, row.totals.delivered_owed_gpu_ms);
                let before = self.last.insert(row.allocation.clone(), now);
                let (owed, met) = before.unwrap_or((0, 0));
                let missed = now
                    .0
                    .saturating_sub(owed)
                    .saturating_sub(now.1.saturating_sub(met));
                if self.over_served.contains(&row.allocation) {
                    let sums = self
                        .over_served_hours
                        .entry(row.allocation.clone())
                        .or_default();
                    sums.0 += now.0.saturating_sub(owed);
                    sums.1 += missed;
                }
            }
        }
        // What the window says as the next hour begins.
        self.over_served.clear();
        if let Ok(report) = usage.window(cluster, end) {
            self.over_served.extend(
                report
                    .allocations
                    .into_iter()
                    .filter(|a| a.allocated_gpu_ms > 0 && a.charged_gpu_ms >= a.allocated_gpu_ms)
                    .map(|a| a.path),
            );
        }
    }
}
