//! What `deploy/` ships stays true to the code: the JetStream definitions are the ones the
//! services create, every nats-server config is one the pinned server accepts, and the systemd
//! units run binaries that exist with environment variables those binaries read.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn files_in(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    out
}

#[test]
fn the_jetstream_definitions_in_deploy_are_the_ones_the_services_create() {
    let written = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["streams", "--write-definitions"])
        .arg(written.path())
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let shipped = repo().join("deploy/nats/jetstream");
    let names = |dir: &Path| -> Vec<String> {
        files_in(dir, ".json")
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(written.path()),
        names(&shipped),
        "deploy/nats/jetstream/ is out of date: `fairshare streams --write-definitions \
         deploy/nats/jetstream`"
    );
    // Every stream, and the intake consumer.
    assert_eq!(
        names(&shipped).len(),
        fairshare_events::streams::all().len() + 1
    );
    for name in names(&shipped) {
        assert_eq!(
            read(&written.path().join(&name)),
            read(&shipped.join(&name)),
            "deploy/nats/jetstream/{name} is out of date: `fairshare streams \
             --write-definitions deploy/nats/jetstream`"
        );
    }
}

/// Whether the pinned server takes `config` (`nats-server -t`) with the flags `extra`, and
/// what it said.
fn server_takes(config: &std::path::Path, extra: &[&std::ffi::OsStr]) -> (bool, String) {
    let server = fairshare_testkit::find_nats_server().unwrap();
    let out = Command::new(&server)
        .arg("-t")
        .arg("-c")
        .arg(config)
        .args(extra)
        .output()
        .unwrap();
    let said = format!(
        "{}: {}{}",
        config.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// Every shipped config is valid; a cluster member's (it listens on every interface) only once
/// `fairshare auth init` has written the identities it includes, beside it as the README says.
#[test]
fn every_shipped_nats_server_config_is_valid_for_the_pinned_server() {
    let nats = repo().join("deploy/nats");
    let single = files_in(&nats, ".conf");
    let members = files_in(&nats.join("cluster"), ".conf");
    assert_eq!(
        (single.len(), members.len()),
        (1, 3),
        "single node and three cluster members"
    );
    for config in &single {
        let (ok, said) = server_takes(config, &[]);
        assert!(ok, "{said}");
        // As deploy/start.sh runs it: with the store directory as a flag (nats-server refuses
        // a config that sets store_dir beside it).
        let store = tempfile::tempdir().unwrap();
        let (ok, said) = server_takes(config, &["-sd".as_ref(), store.path().as_os_str()]);
        assert!(ok, "{said}");
    }
    let etc = tempfile::tempdir().unwrap();
    for member in &members {
        // As shipped, without identities: refused.
        let (ok, said) = server_takes(member, &[]);
        assert!(
            !ok,
            "a member without client identities must not start: {said}"
        );
        // Installed as /etc/fairshare/nats.conf beside `fairshare auth init --dir .../auth`.
        let installed = etc.path().join("nats.conf");
        std::fs::copy(member, &installed).unwrap();
        if !etc.path().join("auth/auth.conf").exists() {
            let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
                .args(["auth", "init", "--dir"])
                .arg(etc.path().join("auth"))
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        let (ok, said) = server_takes(&installed, &[]);
        assert!(ok, "{said}");
    }
}

/// The `FAIRSHARE_*` variables a service binary reads: its own flags, the NATS flags every
/// binary shares, and (the preemption service) its policy flags.
fn variables_of(service: &str) -> BTreeSet<String> {
    let root = repo();
    let mut sources = vec![
        root.join(format!("services/{service}/src/main.rs")),
        root.join("services/runtime/src/cli.rs"),
    ];
    let policy = root.join(format!("services/{service}/src/cli.rs"));
    if policy.exists() {
        sources.push(policy);
    }
    let mut out = BTreeSet::new();
    for source in sources {
        let text = read(&source);
        for (at, _) in text.match_indices("env = \"FAIRSHARE_") {
            let rest = &text[at + "env = \"".len()..];
            let name = &rest[..rest.find('"').unwrap()];
            out.insert(name.to_owned());
        }
    }
    out
}

/// Names assigned in `text` that look like fairshare's (`NAME=` at a line's start or after
/// `Environment=`, quoted or not, commented out or not): every name containing `FAIRSHARE`, so
/// a misspelt prefix is caught too.
fn assigned(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(|l| {
            l.trim_start_matches('#')
                .trim_start_matches("Environment=")
                .trim_start_matches('"')
        })
        .filter_map(|l| l.split_once('=').map(|(name, _)| name))
        .filter(|name| name.contains("FAIRSHARE"))
        .map(str::to_owned)
        .collect()
}

/// The `--flags` of a unit's `ExecStart` line.
fn exec_flags(unit: &str) -> Vec<String> {
    unit.lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_systemd_units_run_real_binaries_with_flags_and_variables_they_read() {
    let systemd = repo().join("deploy/systemd");
    let services = ["submission", "accounting", "decision", "preemption"];
    // The shared file is read by every service: each of its variables must mean something to
    // all of them.
    let shared = assigned(&read(&systemd.join("fairshare.env")));
    assert!(shared.contains("FAIRSHARE_NATS_URL"));
    for service in services {
        let known = variables_of(service);
        assert!(known.contains("FAIRSHARE_NATS_URL"), "{service}: {known:?}");
        for name in &shared {
            assert!(
                known.contains(name),
                "fairshare.env sets {name}, which {service} ignores"
            );
        }
        let unit = if service == "submission" {
            "fairshare-submission.service".to_owned()
        } else {
            format!("fairshare-{service}@.service")
        };
        let text = read(&systemd.join(&unit));
        assert!(
            text.contains(&format!("ExecStart=/usr/local/bin/fairshare-{service} ")),
            "{unit}"
        );
        // A binary the package builds: a [[bin]] of that name (or, with none, the package's).
        let manifest = read(&repo().join(format!("services/{service}/Cargo.toml")));
        let name = format!("name = \"fairshare-{service}\"");
        let built = if manifest.contains("[[bin]]") {
            manifest.contains(&format!("[[bin]]\n{name}"))
        } else {
            manifest.contains(&name)
        };
        assert!(
            built,
            "{unit} runs fairshare-{service}, a binary of the workspace"
        );
        for name in assigned(&text) {
            assert!(
                known.contains(&name),
                "{unit} sets {name}, which {service} ignores"
            );
        }
        // Each flag is a field of the binary's arguments (clap spells `checkpoint_dir` as
        // `--checkpoint-dir`).
        let main = read(&repo().join(format!("services/{service}/src/main.rs")));
        let flags = exec_flags(&text);
        for flag in &flags {
            let field = format!("    {}: ", flag.replace('-', "_"));
            assert!(
                main.contains(&field),
                "{unit} passes --{flag}, which {service} lacks"
            );
        }
        // Per-instance values are flags, which win over any environment file; per-cluster
        // units are named after their cluster.
        assert!(flags.contains(&"checkpoint-dir".to_owned()), "{unit}");
        assert_eq!(
            text.contains("--cluster %i "),
            service != "submission",
            "{unit}"
        );
        assert!(
            text.contains("EnvironmentFile=/etc/fairshare/fairshare.env"),
            "{unit}"
        );
        assert!(
            text.contains("StartLimitIntervalSec=0"),
            "{unit}: keeps restarting while NATS is down"
        );
    }
}

/// `inventory check` on the demo's inventory prints what its help says: the cluster's count
/// and every node with its GPUs, and writes nothing (it needs no server).
#[test]
fn inventory_check_prints_the_files_nodes() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["inventory", "check"])
        .arg(repo().join("deploy/demo/inventory.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"cluster demo: 16 nodes, 128 GPUs"),
        "{text}"
    );
    assert_eq!(lines.len(), 17, "{text}");
    assert!(
        lines[1].starts_with("  gpu000") && lines[1].ends_with(" 8 GPUs"),
        "{text}"
    );
}
