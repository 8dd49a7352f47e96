//! The decision, preemption and accounting services' audits, run over a simulated log without
//! NATS.
//!
//! Place in the flow: after the [`engine`](crate::engine). The log is handed to
//! `fairshare_decision::shell::audit` and `fairshare_preemption::shell::audit` exactly as
//! `read_log` would hand it over from a fresh JetStream stream (sequence = position, subjects
//! by the contract's scheme), so a clean audit here means every placement and every
//! preemption order the simulator made re-derives byte for byte from the log prefix its basis
//! names, as it must in production.

use fairshare_accounting::shell::audit::SnapshotAudit;
use fairshare_decision::shell::{AuditReport, audit};
use fairshare_events::{pb, subjects};
use fairshare_preemption::domain::Config;
use fairshare_preemption::shell::OrderAudit;
use fairshare_runtime::log::LogEntry;

/// The log as the entries a follower of a fresh stream would deliver.
pub fn entries(cluster: &str, log: &[pb::Event]) -> Vec<LogEntry> {
    let total = log.len() as u64;
    log.iter()
        .enumerate()
        .map(|(i, event)| LogEntry {
            sequence: i as u64 + 1,
            subject: subjects::for_event(cluster, event).unwrap_or_default(),
            event: Ok(event.clone()),
            pending: total - i as u64 - 1,
            trace: None,
            stored_ms: None,
        })
        .collect()
}

/// Audits every placement of `log` (one cluster's simulated log). Its usage snapshots are all
/// of the run's one window, so the audit takes any (the services' audits are given theirs).
pub fn audit_log(cluster: &str, log: &[pb::Event]) -> AuditReport {
    audit(cluster, &entries(cluster, log))
}

/// Re-derives every usage snapshot of `log` (one cluster's simulated log) with the
/// accounting service's fold.
pub fn audit_snapshots(cluster: &str, log: &[pb::Event]) -> SnapshotAudit {
    fairshare_accounting::shell::audit::audit(cluster, &entries(cluster, log))
}

/// Audits every preemption order of `log` (one cluster's simulated log) under `policy`, the
/// preemption settings the run used.
pub fn audit_orders(cluster: &str, log: &[pb::Event], policy: &Config) -> OrderAudit {
    fairshare_preemption::shell::audit(cluster, &entries(cluster, log), policy)
}
