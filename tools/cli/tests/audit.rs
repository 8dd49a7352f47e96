//! `fairshare audit` against a real nats-server holding a simulated log: the simulator ran the
//! services' own domain code, so every placement and order in its log re-derives; under other
//! preemption settings the orders do not (until set aside with `--from`), and a placement
//! moved to another node does not either. The exit status says which.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Output;

use crate::common::{stderr, stdout};

use crate::common::{server_with, simulated_log};
use fairshare_events::pb::{self, event::Body};
use fairshare_testkit::NatsServer;

/// Runs `fairshare audit` for `cluster` on `server` with `extra` flags.
fn fairshare_audit(server: &NatsServer, cluster: &str, extra: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["audit", "--nats-url", &server.url(), "--cluster", cluster])
        .args(extra)
        .env_remove("FAIRSHARE_GRACE")
        .env_remove("FAIRSHARE_MAX_MIN_RUNTIME")
        .env_remove("FAIRSHARE_CHECKPOINT_INTERVAL")
        .env_remove("FAIRSHARE_HYSTERESIS_PER_MILLE")
        .env_remove("FAIRSHARE_PACKING")
        .env_remove("FAIRSHARE_NATS_CREDS")
        .env_remove("FAIRSHARE_NATS_NKEY")
        .output()
        .unwrap()
}

fn count(log: &[pb::Event], f: impl Fn(&Body) -> bool) -> usize {
    log.iter()
        .filter(|e| e.body.as_ref().is_some_and(&f))
        .count()
}

#[test]
fn every_decision_of_a_simulated_log_re_derives_and_other_settings_fail_until_set_aside() {
    let (cluster, log) = simulated_log("debug-burst");
    let placements = count(&log, |b| matches!(b, Body::JobPlaced(_)));
    let orders = count(&log, |b| matches!(b, Body::PreemptionOrdered(_)));
    let snapshots = count(&log, |b| matches!(b, Body::UsageSnapshot(_)));
    assert!(
        placements >= 20 && orders >= 1 && snapshots >= 5,
        "{placements} / {orders} / {snapshots}"
    );
    let server = server_with(&cluster, &log);

    let clean = fairshare_audit(&server, &cluster, &[]);
    let out = stdout(&clean);
    assert!(clean.status.success(), "{out}\n{}", stderr(&clean));
    assert!(
        out.contains(&format!(
            "{placements} placements re-derived, 0 divergences, 0 over-committed"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("{orders} orders re-derived, 0 divergences")),
        "{out}"
    );
    assert!(
        out.contains(&format!("{snapshots} snapshots re-derived, 0 divergences")),
        "{out}"
    );
    assert!(!out.contains("DIVERGENCE"), "{out}");

    // The service ran with a 30 s grace: under 31 s every order's deadline differs.
    let other = fairshare_audit(&server, &cluster, &["--grace", "31s"]);
    let out = stdout(&other);
    assert_eq!(other.status.code(), Some(1), "findings: {out}");
    assert!(
        stderr(&other).contains("preemption orders that do not re-derive (under --grace 31s"),
        "{}",
        stderr(&other)
    );
    // Each finding says what differs, in words.
    assert!(
        out.lines()
            .filter(|l| l.starts_with("DIVERGENCE "))
            .all(|l| l.contains("grace deadline logged 20") && !l.contains("reason logged")),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("DIVERGENCE ")).count(),
        orders,
        "{out}"
    );
    assert!(out.contains(&format!(
        "{placements} placements re-derived, 0 divergences"
    )));

    // Held to 31 s only after the log's end, it passes and says what it set aside.
    let after = (log.len() + 1).to_string();
    let set_aside = fairshare_audit(&server, &cluster, &["--grace", "31s", "--from", &after]);
    let out = stdout(&set_aside);
    assert!(set_aside.status.success(), "{out}\n{}", stderr(&set_aside));
    assert!(
        out.contains(&format!("{orders} earlier findings set aside")),
        "{out}"
    );

    // A mistyped cluster has nothing to audit: that is a failure, not a clean audit.
    let typo = fairshare_audit(&server, &format!("{cluster}x"), &[]);
    assert!(!typo.status.success(), "{}", stdout(&typo));
    assert!(
        stderr(&typo).contains("no events of cluster"),
        "{}",
        stderr(&typo)
    );
}

/// Nothing audited (a cluster with no events, a server that cannot be reached, invalid
/// policy flags) exits 2, apart from findings (1), so a scheduled audit can tell them apart.
#[test]
fn an_audit_that_could_not_run_exits_2_not_1() {
    let (cluster, log) = simulated_log("debug-burst");
    let server = server_with(&cluster, &log);
    let typo = fairshare_audit(&server, &format!("{cluster}x"), &[]);
    assert_eq!(typo.status.code(), Some(2), "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("nothing audited") && stderr(&typo).contains("holds no events"),
        "{}",
        stderr(&typo)
    );
    let invalid = fairshare_audit(&server, &cluster, &["--checkpoint-interval", "0s"]);
    assert_eq!(invalid.status.code(), Some(2), "{}", stderr(&invalid));
    let url = server.url();
    drop(server);
    let gone = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["audit", "--nats-url", &url, "--cluster", &cluster])
        .env_remove("FAIRSHARE_NATS_CREDS")
        .env_remove("FAIRSHARE_NATS_NKEY")
        .output()
        .unwrap();
    assert_eq!(gone.status.code(), Some(2), "{}", stderr(&gone));
}

#[test]
fn a_placement_moved_to_another_node_fails_the_audit() {
    let (cluster, mut log) = simulated_log("debug-burst");
    let (index, placed) = log
        .iter_mut()
        .enumerate()
        .find_map(|(i, e)| match &mut e.body {
            Some(Body::JobPlaced(p)) => Some((i, p)),
            _ => None,
        })
        .unwrap();
    let first = format!(
        "DIVERGENCE sequence {}: job {} placed on",
        index + 1,
        placed.job_id
    );
    placed.nodes[0].node = if placed.nodes[0].node == "node000" {
        "node001".into()
    } else {
        "node000".into()
    };
    let server = server_with(&cluster, &log);
    let moved = fairshare_audit(&server, &cluster, &[]);
    let out = stdout(&moved);
    assert!(!moved.status.success(), "{out}");
    // (The orders decided after it, from a log that differs, may not re-derive either.)
    assert!(
        stderr(&moved).starts_with("error: placements"),
        "{}",
        stderr(&moved)
    );
    assert!(out.starts_with(&first), "{out}");
}

#[test]
fn a_usage_snapshot_with_a_changed_charge_fails_the_audit() {
    let (cluster, mut log) = simulated_log("debug-burst");
    let (index, snapshot) = log
        .iter_mut()
        .enumerate()
        .filter_map(|(i, e)| match &mut e.body {
            Some(Body::UsageSnapshot(s)) if !s.allocations.is_empty() => Some((i, s)),
            _ => None,
        })
        .nth(3)
        .unwrap();
    snapshot.allocations[0].charged_gpu_ms += 1_000;
    let server = server_with(&cluster, &log);
    let changed = fairshare_audit(&server, &cluster, &[]);
    let out = stdout(&changed);
    assert!(!changed.status.success(), "{out}");
    assert!(
        stderr(&changed).contains("usage snapshots that do not re-derive"),
        "{}",
        stderr(&changed)
    );
    assert!(
        out.contains(&format!(
            "DIVERGENCE usage snapshot at sequence {}:",
            index + 1
        )),
        "{out}"
    );
}
