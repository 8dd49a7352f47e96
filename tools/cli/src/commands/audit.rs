//! `fairshare audit`: re-derive every placement, every preemption order and every usage
//! snapshot in a cluster's log from the log prefix each names, and report what does not come
//! out identical.
//!
//! Place in the flow: a reader of the log, like `tail`. It reads the cluster's log twice,
//! holding none of it, and hands each entry to the decision service's audit
//! ([`fairshare_decision::shell::audit()`]), the preemption service's
//! ([`fairshare_preemption::shell::audit()`]) and the accounting service's
//! ([`fairshare_accounting::shell::audit`]): the first read notes what every decision names,
//! the second folds the log and decides again where each one's basis ends. The same pure code
//! the services decided with, so a divergence means the log was not written by this build
//! under these settings, or was tampered with.

use anyhow::{Context, bail};
use clap::Args;
use fairshare_accounting::shell::audit::SnapshotPlan;
use fairshare_decision::shell::{PlacementPlan, read_twice};
use fairshare_preemption::cli::PolicyArgs;
use fairshare_preemption::shell::OrderPlan;

use super::Connection;

/// Which cluster, from where, and the preemption settings the service ran with.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The cluster whose log is audited.
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    /// Hold only decisions from this sequence on to this build and these settings (say, from
    /// where the services' flags or build last changed); earlier findings are counted, not
    /// failed.
    #[arg(long, default_value_t = 1)]
    from: u64,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// Nothing was audited: the server or the log could not be read, the cluster has no events,
/// or the policy flags are invalid. The CLI exits with [`NotAudited::EXIT_CODE`] for it, so a
/// scheduled audit can tell it from findings (exit status 1).
#[derive(Debug, Clone, Copy)]
pub struct NotAudited;

impl std::fmt::Display for NotAudited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("nothing audited")
    }
}

impl NotAudited {
    /// The exit status when nothing was audited.
    pub const EXIT_CODE: u8 = 2;
}

/// Audits both services' decisions; an error (exit status 1) if any finding remains, or
/// [`NotAudited`] (exit status 2) if it could not audit, the cluster having no events at all
/// among the reasons.
pub async fn audit(args: AuditArgs, conn: &Connection) -> anyhow::Result<()> {
    let policy = args.policy.config().context(NotAudited)?;
    // Two reads, holding none of the log: the first notes what each decision names, the
    // second folds and decides again.
    let cluster = args.cluster.as_str();
    let plans = (
        PlacementPlan::new(cluster),
        OrderPlan::new(cluster, &policy),
        SnapshotPlan::new(cluster),
    );
    let (mut placements, mut orders, mut snapshots) = read_twice(&conn.js, cluster, plans)
        .await
        .with_context(|| format!("cannot read the log of cluster {cluster}"))
        .context(NotAudited)?;
    placements.keep_from(args.from);
    fairshare_runtime::out!("{}", placements.render(cluster));
    orders.keep_from(args.from);
    fairshare_runtime::out!("{}", orders.render(cluster));
    snapshots.keep_from(args.from);
    fairshare_runtime::out!("{}", snapshots.render(cluster));
    // Orders re-derive only under the flags the service ran with: say which were used.
    let p = &args.policy;
    let orders_hint = format!(
        "preemption orders that do not re-derive (under --grace {:?} --checkpoint-interval {:?} \
         --max-min-runtime {:?} --hysteresis-per-mille {} --packing {}: give the audit the \
         preemption service's own flags, or --from the sequence they last changed; a \
         simulator log run with the share floor, the hourly floor or the debug allowance \
         changed re-derives under no flags)",
        p.grace, p.checkpoint_interval, p.max_min_runtime, p.hysteresis_per_mille, p.packing
    );
    let failed: Vec<&str> = [
        (
            placements.is_clean(),
            "placements that do not re-derive or over-committed nodes",
        ),
        (orders.divergences.is_empty(), orders_hint.as_str()),
        (
            !orders.late.iter().any(|l| l.is_finding()),
            "preemption orders two passes made for one waiter (TWICE lines: two instances \
             deciding at once, or a late send; no flag changes them)",
        ),
        (
            snapshots.is_clean(),
            "usage snapshots that do not re-derive",
        ),
    ]
    .into_iter()
    .filter(|(clean, _)| !clean)
    .map(|(_, what)| what)
    .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{}", failed.join("; "))
    }
}
