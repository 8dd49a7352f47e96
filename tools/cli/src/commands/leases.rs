//! `fairshare leases`: which instance decides for each cluster, as the decision and preemption
//! services' leases say ([`fairshare_runtime::lease`]). An operator who started a second
//! instance, or replaced a host, sees here which one decides and which stands by.

use clap::Args;
use fairshare_runtime::lease::{self, Holding};

use super::Connection;

/// Which cluster.
#[derive(Debug, Args)]
pub struct LeasesArgs {
    /// Only this cluster's leases (default: every cluster's).
    #[arg(long, value_parser = super::cluster_name, env = "FAIRSHARE_CLUSTER")]
    cluster: Option<String>,
}

/// The lease `key` (`<role>.<cluster>`) is `cluster`'s.
fn of_cluster(key: &str, cluster: &str) -> bool {
    key.split_once('.').is_some_and(|(_, c)| c == cluster)
}

/// One line per lease: key, holder, how long ago it was last written.
fn render(holdings: &[Holding], now_ms: i64) -> Vec<String> {
    let mut out = vec![format!("{:<32} {:>10}  {}", "lease", "written", "holder")];
    for h in holdings {
        let ago_s = (now_ms.saturating_sub(h.written_ms)).max(0) as f64 / 1000.0;
        out.push(format!(
            "{:<32} {:>8.1}s ago  {}",
            h.key,
            ago_s,
            h.holder.escape_debug()
        ));
    }
    out
}

/// Prints the leases held now.
pub async fn leases(args: LeasesArgs, conn: &Connection) -> anyhow::Result<()> {
    let Some(mut holdings) = lease::holders(&conn.js).await? else {
        fairshare_runtime::outln!(
            "no leases: no decision or preemption service has started against this server"
        );
        return Ok(());
    };
    if let Some(cluster) = &args.cluster {
        holdings.retain(|h| of_cluster(&h.key, cluster));
    }
    if holdings.is_empty() {
        match &args.cluster {
            Some(cluster) => fairshare_runtime::outln!(
                "no lease is held: nothing decides for cluster {cluster} now"
            ),
            None => fairshare_runtime::outln!(
                "no lease is held: no decision or preemption instance decides now"
            ),
        }
        return Ok(());
    }
    use fairshare_runtime::clock::Clock;
    for line in render(&holdings, fairshare_runtime::clock::SystemClock.now_ms()) {
        fairshare_runtime::outln!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_its_clusters_by_the_key_after_the_role() {
        assert!(of_cluster("decision.gpu-east", "gpu-east"));
        assert!(of_cluster("preemption.gpu-east", "gpu-east"));
        assert!(!of_cluster("decision.gpu-east2", "gpu-east"));
        assert!(!of_cluster("decision", "decision"));
    }

    #[test]
    fn each_lease_is_a_line_with_its_age_and_an_escaped_holder() {
        let lines = render(
            &[Holding {
                key: "decision.demo".into(),
                holder: "host:/var/lib/x\u{1b}[2J".into(),
                written_ms: 1_000,
            }],
            3_500,
        );
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("decision.demo "), "{}", lines[1]);
        assert!(lines[1].contains("2.5s ago"), "{}", lines[1]);
        assert!(
            lines[1].ends_with("host:/var/lib/x\\u{1b}[2J"),
            "{}",
            lines[1]
        );
    }
}
