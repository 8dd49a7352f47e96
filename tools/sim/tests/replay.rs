//! Whole runs: the report is a pure function of its inputs, and fairshare's log is a log the
//! decision and preemption services' audits accept, in-process and after loading into a real
//! JetStream.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use fairshare_model::trace::parse_replay;
use fairshare_sim::engine::{self, EngineConfig};
use fairshare_sim::mapping::MappingRules;
use fairshare_sim::report::{self, Report, ReportInputs};
use fairshare_sim::scenarios;
use fairshare_sim::setup::{EPOCH_MS, Setup};
use fairshare_sim::simulate::{Policy, simulate};
use fairshare_sim::workload::Workload;

const HOUR: i64 = 3_600_000;

/// Two days of the Helios trace on 64 GPUs (about 3x oversubscribed), with the repo's budget.
fn helios_slice() -> (Setup, Workload) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let trace = std::fs::read_to_string(format!("{root}/tests/data/traces/helios-15k/replay.csv"))
        .expect("trace");
    let budget = std::fs::read_to_string(format!("{root}/deploy/sim/budget.toml")).expect("budget");
    let budget = fairshare_model::files::parse_budget(&budget).expect("valid budget");
    let span = 48 * HOUR;
    let setup = Setup::new(budget, Setup::uniform_nodes("node", 8, 8), EPOCH_MS + span).unwrap();
    let rules = MappingRules {
        span_ms: span,
        ..MappingRules::default()
    };
    let jobs = rules.map(&parse_replay(&trace).unwrap(), &setup.allocations());
    assert!(jobs.len() > 500, "{} jobs", jobs.len());
    (setup, Workload::new(jobs, Vec::new()))
}

fn inputs(setup: &Setup, workload: &Workload) -> ReportInputs {
    ReportInputs::new(
        "test".into(),
        "helios slice".into(),
        MappingRules::default().describe(&[]),
        setup,
        workload,
        &workload.refused(setup, &EngineConfig::default().limits),
        &EngineConfig::default(),
    )
}

#[test]
fn same_inputs_give_a_byte_identical_report() {
    let (setup, workload) = helios_slice();
    let config = EngineConfig::default();
    let render = |dir: &std::path::Path| {
        let runs = simulate(&setup, &workload, &config, &Policy::all(), |_, _| {});
        let report = Report {
            inputs: inputs(&setup, &workload),
            runs: runs.iter().map(|r| r.metrics.clone()).collect(),
            spread: None,
        };
        let files = report::write(dir, &report).unwrap();
        let bytes: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
        (runs, bytes)
    };
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (runs_a, files_a) = render(a.path());
    let (runs_b, files_b) = render(b.path());
    assert_eq!(files_a.len(), 4, "report.md and three charts");
    assert_eq!(files_a, files_b, "the report is byte-identical");
    for (x, y) in runs_a.iter().zip(&runs_b) {
        assert_eq!(x.log, y.log, "{} log", x.policy.name());
    }
    // The runs differ between policies (the comparison means something).
    assert_ne!(runs_a[0].metrics, runs_a[1].metrics);
    let md = String::from_utf8(files_a[0].clone()).unwrap();
    for p in Policy::all() {
        assert!(
            md.contains(&format!("| {} |", p.name())),
            "{} row",
            p.name()
        );
    }
}

#[test]
fn the_idle_split_accounts_for_the_whole_occupancy_shortfall_of_every_policy() {
    let (setup, workload) = helios_slice();
    let runs = simulate(
        &setup,
        &workload,
        &EngineConfig::default(),
        &Policy::all(),
        |_, _| {},
    );
    for run in &runs {
        let m = &run.metrics;
        let shortfall = m.contention_available_gpu_ms - m.contention_used_gpu_ms;
        let split = m.idle_under_contention;
        // No node is cordoned here, so node by node the causes add up to the cluster's idle time.
        assert_eq!(split.total(), shortfall, "{}: {split:?}", m.policy);
        assert!(
            shortfall > 0,
            "{}: a 3x oversubscribed slice leaves holes",
            m.policy
        );
    }
    // Only fairshare preempts, so only its holes can wait on victims that are stopping.
    for run in &runs {
        let stopping = run.metrics.idle_under_contention.victims_stopping_gpu_ms;
        assert_eq!(
            stopping > 0,
            run.policy == Policy::Fairshare,
            "{}: {stopping}",
            run.metrics.policy
        );
    }
    // Helios jobs come in 1 to 8 GPUs and whole nodes: some holes are too small for any
    // waiting job, under every policy.
    assert!(
        runs.iter()
            .all(|r| r.metrics.idle_under_contention.nothing_fits_gpu_ms > 0)
    );
}

/// The metrics of each of `replicas` (arrivals nudged by up to a minute), run one by one.
fn replicas_alone(
    setup: &Setup,
    workload: &Workload,
    config: &EngineConfig,
    policies: &[Policy],
    replicas: std::ops::Range<u32>,
) -> Vec<Vec<fairshare_sim::metrics::RunMetrics>> {
    replicas
        .map(|r| {
            let w = fairshare_sim::replicas::jittered(workload, r, 60_000);
            simulate(setup, &w, config, policies, |_, _| {})
                .into_iter()
                .map(|run| run.metrics)
                .collect()
        })
        .collect()
}

#[test]
fn replicas_with_nudged_arrivals_give_a_reproducible_spread() {
    let (setup, workload) = helios_slice();
    let config = EngineConfig::default();
    let policies = Policy::all();
    let spread_of = || {
        let runs = replicas_alone(&setup, &workload, &config, &policies, 0..3);
        fairshare_sim::replicas::spread(&runs, 60_000, 0).unwrap()
    };
    let spread = spread_of();
    assert_eq!(spread, spread_of(), "replicas are the same every run");
    assert_eq!(spread.replicas, 3);
    let fs = &spread.rows[0];
    assert_eq!(fs.policy, "fairshare");
    // Nudged arrivals change the outcome: the runs are not copies of each other.
    let pct = |s: (u128, u128)| s.0 as f64 / s.1 as f64;
    assert!(pct(fs.owed.min) < pct(fs.owed.max), "{:?}", fs.owed);
    assert!(pct(fs.owed.min) <= pct(fs.owed.median) && pct(fs.owed.median) <= pct(fs.owed.max));
}

/// Replicas run on several threads come back in replica order, each equal to the same replica
/// run alone: the spread does not depend on which thread finished first.
#[test]
fn replicas_on_threads_come_back_in_replica_order() {
    let (setup, workload) = helios_slice();
    let config = EngineConfig::default();
    let policies = [
        Policy::Fairshare,
        Policy::Baseline(fairshare_sim::baseline::Baseline::Fifo),
    ];
    let alone = replicas_alone(&setup, &workload, &config, &policies, 1..4);
    let finished = std::sync::Mutex::new(Vec::new());
    for threads in [1, 3, 8] {
        finished.lock().unwrap().clear();
        let on_threads = fairshare_sim::replicas::run_replicas(
            &setup,
            &workload,
            &config,
            &policies,
            4,
            60_000,
            threads,
            |replica, _| finished.lock().unwrap().push(replica),
        );
        assert_eq!(on_threads, alone, "{threads} threads");
        let mut seen = finished.lock().unwrap().clone();
        seen.sort_unstable();
        assert_eq!(seen, [1, 2, 3], "each replica once, {threads} threads");
    }
}

#[test]
fn every_simulated_preemption_order_passes_the_preemption_audit() {
    use fairshare_events::pb::event::Body;
    let (setup, workload) = helios_slice();
    let config = EngineConfig::default();
    let run = engine::run(&setup, &workload, &config, |_| {});
    let audit = fairshare_sim::audit::audit_orders(&setup.cluster, &run.log, &config.preemption);
    assert!(audit.is_clean(), "{}", audit.divergences[0]);
    assert!(audit.orders > 50, "{} orders", audit.orders);
    assert!(audit.passes > 20, "{} passes", audit.passes);
    assert_eq!(
        audit.unpublished, 0,
        "the simulator appends every order it decides"
    );

    // A tampered log does not pass: one order names another waiter.
    let mut log = run.log.clone();
    let order = log
        .iter_mut()
        .find_map(|e| match &mut e.body {
            Some(Body::PreemptionOrdered(o)) if !o.for_job_id.is_empty() => Some(o),
            _ => None,
        })
        .unwrap();
    order.for_job_id.push_str("-not");
    let audit = fairshare_sim::audit::audit_orders(&setup.cluster, &log, &config.preemption);
    assert!(!audit.is_clean());
    // Nor does the log under another policy: a longer grace moves the deadlines.
    let mut other = config.preemption;
    other.grace_ms += 1_000;
    let audit = fairshare_sim::audit::audit_orders(&setup.cluster, &run.log, &other);
    assert!(!audit.is_clean());
}

#[test]
fn every_simulated_placement_passes_the_decision_audit() {
    let (setup, workload) = helios_slice();
    let run = engine::run(&setup, &workload, &EngineConfig::default(), |_| {});
    let audit = fairshare_sim::audit::audit_log(&setup.cluster, &run.log);
    assert!(audit.is_clean(), "{:?}", audit.divergences.first());
    assert!(audit.cycles > 100, "{} cycles", audit.cycles);
    assert!(audit.placements > 500, "{} placements", audit.placements);
    assert_eq!(
        audit.unpublished, 0,
        "the simulator publishes every placement it decides"
    );

    // A tampered log does not pass: move one placement to another node.
    let mut log = run.log.clone();
    let placed = log
        .iter_mut()
        .find_map(|e| match &mut e.body {
            Some(fairshare_events::pb::event::Body::JobPlaced(p)) => Some(p),
            _ => None,
        })
        .unwrap();
    placed.nodes[0].node = if placed.nodes[0].node == "node000" {
        "node001".into()
    } else {
        "node000".into()
    };
    let audit = fairshare_sim::audit::audit_log(&setup.cluster, &log);
    assert!(!audit.is_clean());
}

#[test]
fn the_log_file_round_trips_and_loads_into_jetstream_where_the_audit_agrees() {
    use fairshare_decision::shell::{audit_log, read_log};
    use fairshare_sim::load::{LoadError, load_log};
    use fairshare_sim::logfile;

    let s = scenarios::by_name("debug-burst").unwrap().unwrap();
    let run = engine::run(&s.setup, &s.workload, &EngineConfig::default(), |_| {});
    let log = logfile::decode(&logfile::encode(&run.log)).unwrap();
    assert_eq!(log, run.log);
    let in_process = fairshare_sim::audit::audit_log(&s.setup.cluster, &log);

    let server = fairshare_testkit::NatsServer::start().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        fairshare_runtime::nats::ensure_streams(&js, 1)
            .await
            .unwrap();
        let n = load_log(&js, &s.setup.cluster, &log).await.unwrap();
        assert_eq!(n, log.len() as u64);

        // What JetStream holds is the simulated log, event for event.
        let stored = read_log(&js, &s.setup.cluster, None).await.unwrap();
        assert_eq!(stored.len(), log.len());
        for (entry, event) in stored.iter().zip(&log) {
            assert_eq!(entry.event.as_ref().unwrap(), event);
        }
        let audit = audit_log(&js, &s.setup.cluster).await.unwrap();
        assert!(audit.is_clean(), "{:?}", audit.divergences.first());
        assert_eq!(audit.placements, in_process.placements);
        assert!(
            audit.placements >= 20,
            "at least every debug job was placed"
        );
        // The preemption service's audit agrees with the in-process one.
        let policy = EngineConfig::default().preemption;
        let orders = fairshare_preemption::shell::audit_log(&js, &s.setup.cluster, &policy)
            .await
            .unwrap();
        assert!(orders.is_clean(), "{:?}", orders.divergences.first());
        assert!(orders.orders >= 1, "the debug burst orders work off");
        assert_eq!(
            orders,
            fairshare_sim::audit::audit_orders(&s.setup.cluster, &log, &policy)
        );

        // A second load would land at the wrong sequences: refused, nothing written.
        let err = load_log(&js, &s.setup.cluster, &log).await.unwrap_err();
        assert!(matches!(err, LoadError::NotFresh { .. }), "{err}");
        // So is a load for another cluster than the log's events name, before anything else.
        assert_eq!(
            fairshare_sim::load::cluster_of(&log).as_deref(),
            Some(s.setup.cluster.as_str())
        );
        let err = load_log(&js, "elsewhere", &log).await.unwrap_err();
        assert!(matches!(err, LoadError::Misfiled { index: 0, .. }), "{err}");
        let again = read_log(&js, &s.setup.cluster, None).await.unwrap();
        assert_eq!(again.len(), log.len());
    });
}

/// `fairshare-sim trace` on the Helios trace with `args`.
fn helios(args: &[&str]) -> std::process::Command {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    trace_of(&root.join("tests/data/traces/helios-15k/replay.csv"), args)
}

/// `fairshare-sim trace --trace <trace> <args>`.
fn trace_of(trace: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare-sim"));
    command.arg("trace").arg("--trace").arg(trace).args(args);
    command
}

/// Runs `command`, which must fail saying `words`; returns what it said.
fn fails_saying(command: &mut std::process::Command, words: &str) -> String {
    let out = command.env("RUST_BACKTRACE", "0").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(words), "no {words:?} in {stderr}");
    stderr
}

/// `fairshare-sim trace` on the first 2 h of the Helios trace, FIFO only, 32 GPUs, quiet.
fn small_trace() -> std::process::Command {
    helios(&[
        "--nodes",
        "4",
        "--span",
        "2h",
        "--policies",
        "fifo",
        "--quiet",
    ])
}

/// Runs the `fairshare-sim` binary in `dir` on the first 2 h of the Helios trace (FIFO only,
/// 32 GPUs) with `extra` flags, and returns its report.
fn small_run(dir: &std::path::Path, extra: &[&std::ffi::OsStr]) -> String {
    let out = tempfile::tempdir().unwrap();
    let status = small_trace()
        .current_dir(dir)
        .args(extra)
        .arg("--out")
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(out.path().join("report.md")).unwrap()
}

/// The mapping's minimum-runtime cap follows `--checkpoint-interval` (the shortest run that
/// banks progress) unless `--min-runtime-cap` names one; the report's rules say which.
#[test]
fn the_minimum_runtime_cap_defaults_to_the_checkpoint_interval() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let rules_of = |extra: &[&str]| {
        let extra: Vec<&std::ffi::OsStr> = extra.iter().map(std::ffi::OsStr::new).collect();
        small_run(root, &extra)
            .lines()
            .find(|l| l.contains("others: minimum runtime"))
            .unwrap()
            .to_owned()
    };
    assert!(rules_of(&[]).contains("clamped to [1, 30] min"));
    // A checkpoint interval under the mapping's 1 min floor still runs, at that floor.
    assert!(rules_of(&["--checkpoint-interval", "30s"]).contains("clamped to [1, 1] min"));
    assert!(rules_of(&["--checkpoint-interval", "45m"]).contains("clamped to [1, 45] min"));
    assert!(
        rules_of(&["--checkpoint-interval", "45m", "--min-runtime-cap", "2h"])
            .contains("clamped to [1, 120] min")
    );
}

/// Without `--budget` the simulator uses its built-in copy of `deploy/sim/budget.toml`, so it
/// runs from any directory, and gives the same report as with the file named.
#[test]
fn the_default_budget_is_built_in_and_is_the_deploy_file() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let elsewhere = tempfile::tempdir().unwrap();
    let budget = root.join("deploy/sim/budget.toml");
    let built_in = small_run(elsewhere.path(), &[]);
    let named = small_run(
        elsewhere.path(),
        &[std::ffi::OsStr::new("--budget"), budget.as_os_str()],
    );
    // The inputs line names where the budget came from; the rest is the same.
    let workload = |report: &str| {
        report
            .lines()
            .find(|l| l.starts_with("- Workload: "))
            .unwrap()
            .to_owned()
    };
    assert!(workload(&built_in).contains("budget the built-in copy of deploy/sim/budget.toml"));
    assert!(
        workload(&named).contains(&format!("budget {}", budget.display())),
        "{}",
        workload(&named)
    );
    let without = |report: &str| {
        report
            .lines()
            .filter(|l| !l.starts_with("- Workload: "))
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    assert_eq!(without(&built_in), without(&named));
}

/// The dealing of tenants can be written and replayed: the same work under another budget
/// (found in a walkthrough, where adding an allocation dealt every tenant anew).
#[test]
fn a_written_tenant_map_replays_the_same_dealing() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("tenants.txt");
    let first = small_run(
        root,
        &[std::ffi::OsStr::new("--write-tenant-map"), map.as_os_str()],
    );
    let text = std::fs::read_to_string(&map).unwrap();
    let lines = text.lines().filter(|l| !l.starts_with('#')).count();
    assert!(lines > 5, "{text}");
    let replayed = small_run(
        root,
        &[std::ffi::OsStr::new("--tenant-map"), map.as_os_str()],
    );
    // Every tenant is now named by the map, and each charges what it charged before: the
    // report is the same but for the inputs line and the dealing rule.
    let same = |report: &str| {
        report
            .lines()
            .filter(|l| !l.starts_with("- Workload: ") && !l.contains("tenants dealt"))
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    assert_eq!(same(&first), same(&replayed));
    assert!(replayed.contains(&format!("but for the {lines} the tenant map names")));
}

/// The SPEC's targets are checked for fairshare whatever order `--policies` names the
/// policies in, and a policy named twice is refused (found in a walkthrough).
#[test]
fn targets_are_checked_for_fairshare_and_policies_are_named_once() {
    let out = tempfile::tempdir().unwrap();
    let run = |policies: &str| {
        helios(&[
            "--nodes",
            "4",
            "--span",
            "2h",
            "--quiet",
            "--policies",
            policies,
        ])
        .arg("--out")
        .arg(out.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
    };
    let ran = run("fifo,fairshare");
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("Checked for fairshare"), "{report}");
    let twice = run("fifo,fairshare,fifo");
    assert!(!twice.status.success());
    let stderr = String::from_utf8_lossy(&twice.stderr);
    assert!(stderr.contains("--policies names fifo twice"), "{stderr}");
}

/// A tenant whose name a map line cannot hold is refused before the run, and no map is
/// written for a run that did not happen.
#[test]
fn a_tenant_map_line_that_could_not_be_read_back_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("replay.csv");
    std::fs::write(
        &trace,
        "job_id,submit_time,duration,num_gpus,user,group\nj1,0,600,1,a=b,\nj2,5,600,1,c,\n",
    )
    .unwrap();
    let map = dir.path().join("tenants.txt");
    let out = trace_of(
        &trace,
        &["--nodes", "1", "--policies", "fifo", "--quiet", "--out"],
    )
    .arg(dir.path().join("report"))
    .arg("--write-tenant-map")
    .arg(&map)
    .env("RUST_BACKTRACE", "0")
    .output()
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tenant \"a=b\" holds '=' or '#'"),
        "{stderr}"
    );
    assert!(!map.exists());
}

/// Two reports say how their inputs differ: the part of the trace replayed and the files read
/// are listed (found in a walkthrough, where a report left out `--skip` and `--budget`).
#[test]
fn the_report_names_the_trace_time_replayed_and_the_files_read() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("tenants.txt");
    std::fs::write(&map, "u001 = research/science/bio\n").unwrap();
    let report = small_run(
        root,
        &[
            std::ffi::OsStr::new("--skip"),
            std::ffi::OsStr::new("1d"),
            std::ffi::OsStr::new("--tenant-map"),
            map.as_os_str(),
        ],
    );
    let line = report
        .lines()
        .find(|l| l.starts_with("- Workload: "))
        .unwrap();
    assert!(
        line.contains("trace time replayed from 1 d for 2 h"),
        "{line}"
    );
    assert!(
        line.contains(&format!("tenant map {}", map.display())),
        "{line}"
    );
}

/// An unusable `--log` is refused before the simulation, not after minutes of it, and a report
/// whose files cannot all be written leaves none of them (found in a walkthrough).
#[test]
fn output_paths_are_checked_before_the_run_and_a_report_is_written_whole_or_not_at_all() {
    let out = tempfile::tempdir().unwrap();
    let run = |extra: &[&std::ffi::OsStr]| {
        helios(&["--nodes", "4", "--span", "2h", "--quiet"])
            .args(["--policies", "fairshare"])
            .arg("--out")
            .arg(out.path())
            .args(extra)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    // A folder named as the log: refused by name, before any report exists.
    let folder = tempfile::tempdir().unwrap();
    let refused = run(&[std::ffi::OsStr::new("--log"), folder.path().as_os_str()]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("is a folder"), "{stderr}");
    assert!(
        !stderr.contains("simulated in"),
        "refused only after simulating: {stderr}"
    );
    assert!(!out.path().join("report.md").exists());
    // A log file that does not exist yet is not left behind by the check.
    let log = folder.path().join("sub/run.log");
    let ran = run(&[std::ffi::OsStr::new("--log"), log.as_os_str()]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(log.exists());
    // A link to a file not made yet is written through, not replaced.
    #[cfg(unix)]
    {
        let target = folder.path().join("target.log");
        let link = folder.path().join("link.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let ran = run(&[std::ffi::OsStr::new("--log"), link.as_os_str()]);
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(
            std::fs::read(&target).unwrap(),
            std::fs::read(&log).unwrap()
        );
    }
    // One chart's place taken by a folder: no file of the report is written.
    let blocked = tempfile::tempdir().unwrap();
    std::fs::create_dir(blocked.path().join("waits.svg")).unwrap();
    let failed = helios(&["--nodes", "4", "--span", "2h", "--quiet"])
        .args(["--policies", "fifo", "--out"])
        .arg(blocked.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let mut left: Vec<String> = std::fs::read_dir(blocked.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["waits.svg"]);
    // A file given as the report's folder is named as such.
    let file = blocked.path().join("waits.svg/file");
    std::fs::write(&file, "x").unwrap();
    let not_a_folder = helios(&["--nodes", "4", "--span", "2h", "--quiet"])
        .args(["--policies", "fifo", "--out"])
        .arg(&file)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&not_a_folder.stderr);
    assert!(stderr.contains("is a file, not a folder"), "{stderr}");
}

/// A run that would write over a file it reads, or two of its files to one place, is refused
/// before anything runs, by both flags' names, and every file is left as it was.
#[test]
fn outputs_that_would_write_over_an_input_or_each_other_are_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let trace = dir.path().join("trace.csv");
    std::fs::copy(root.join("tests/data/traces/helios-15k/replay.csv"), &trace).unwrap();
    let original = std::fs::read(&trace).unwrap();
    let out = dir.path().join("out");
    let run = |extra: &[&str]| {
        trace_of(&trace, &["--nodes", "4", "--span", "2h", "--quiet"])
            .args(["--policies", "fairshare", "--out"])
            .arg(&out)
            .args(extra)
            .current_dir(dir.path())
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    let refused = |extra: &[&str], words: &[&str]| {
        let output = run(extra);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra:?} ran: {stderr}");
        for w in words {
            assert!(stderr.contains(w), "{extra:?}: no {w:?} in {stderr}");
        }
        assert!(!stderr.contains("simulated in"), "refused late: {stderr}");
        assert_eq!(std::fs::read(&trace).unwrap(), original, "{extra:?}");
        assert!(!out.exists(), "{extra:?} left {}", out.display());
    };
    // The trace, named otherwise (relative to the working folder, through a `..`).
    refused(
        &["--log", "trace.csv"],
        &["--log trace.csv", "--trace", "own input"],
    );
    refused(
        &["--write-tenant-map", "out/../trace.csv"],
        &["--write-tenant-map", "--trace"],
    );
    // A report file, and the log and the map in one place.
    refused(
        &["--log", "out/report.md"],
        &["--out (its report.md)", "--log"],
    );
    refused(
        &["--write-tenant-map", "out/waits.svg"],
        &["--out (its waits.svg)", "--write-tenant-map"],
    );
    refused(
        &["--log", "run.bin", "--write-tenant-map", "run.bin"],
        &["--log run.bin and --write-tenant-map run.bin are one file"],
    );
    // A tenant map that could not be written is refused before the run, as a log is.
    refused(
        &["--write-tenant-map", "."],
        &["--write-tenant-map . is a folder"],
    );
    // Side by side, they are written.
    let ok = run(&[
        "--log",
        "out/run.bin",
        "--write-tenant-map",
        "out/tenants.txt",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    for name in ["report.md", "run.bin", "tenants.txt"] {
        assert!(out.join(name).is_file(), "{name}");
    }
    assert_eq!(std::fs::read(&trace).unwrap(), original);
}

/// Settings under which the fairshare run's submission checks would refuse jobs the baselines
/// run (a mapping cap over the protection cap), or a span the hourly ledger cannot hold, are
/// refused before anything runs, by name.
#[test]
fn settings_that_would_change_the_workload_are_refused() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let out = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fairshare-sim"))
            .arg("trace")
            .arg("--trace")
            .arg(root.join("tests/data/traces/helios-15k/replay.csv"))
            .args(["--nodes", "4", "--policies", "fifo", "--quiet", "--out"])
            .arg(out.path())
            .args(extra)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    for (extra, expected) in [
        (
            &["--checkpoint-interval", "9h"][..],
            "over --max-min-runtime",
        ),
        (
            &["--min-runtime-cap", "3h", "--max-min-runtime", "2h"][..],
            "over --max-min-runtime",
        ),
        (
            &[
                "--debug-min-runtime",
                "20m",
                "--max-min-runtime",
                "10m",
                "--min-runtime-cap",
                "5m",
            ][..],
            "--debug-min-runtime",
        ),
        (&["--span", "99999d"][..], "longer than ten years"),
        (&["--span", "0s"][..], "--span must be longer than 0"),
        (&["--min-runtime-cap", "0s"][..], "is under the 1 min"),
        (&["--nodes", "0"][..], "--nodes"),
        (&["--gpus-per-node", "4294967295"][..], "--gpus-per-node"),
        // A declared 0 s would make every debug job unallocated work.
        (
            &["--debug-min-runtime", "500ms"][..],
            "makes them unallocated",
        ),
        (&["--unallocated-percent", "150"][..], "150"),
    ] {
        let o = run(extra);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?} ran");
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
    assert!(
        !out.path().join("report.md").exists(),
        "nothing was written"
    );
}

/// `--log` (and `--audit`) are of fairshare's log: asked for without fairshare among the
/// policies, the run is refused rather than silently writing nothing.
#[test]
fn a_log_without_the_fairshare_policy_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.pb");
    let out = small_trace()
        .arg("--log")
        .arg(&log)
        .arg("--out")
        .arg(dir.path().join("report"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("add fairshare to --policies"), "{stderr}");
    assert!(!log.exists());
}

/// The report credits the bundled trace it ran on (both licences require it), and `--log` into
/// a folder that does not exist yet is written there (it used to fail after the whole run).
#[test]
fn the_report_credits_the_trace_and_a_log_goes_into_a_new_folder() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim-report").join("helios.log");
    let out = helios(&[])
        .args([
            "--nodes",
            "4",
            "--span",
            "1h",
            "--policies",
            "fairshare,fifo",
        ])
        .args(["--quiet", "--log"])
        .arg(&log)
        .arg("--out")
        .arg(dir.path().join("sim-report").join("helios"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(log.is_file());
    let report = std::fs::read_to_string(dir.path().join("sim-report/helios/report.md")).unwrap();
    assert!(
        report.contains("SenseTime Helios trace, Hu et al., SC'21, CC-BY-4.0"),
        "{report}"
    );
}

/// An empty log file is refused as empty, before any connection is tried.
#[test]
fn an_empty_log_is_refused_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, b"").unwrap();
    fails_saying(
        std::process::Command::new(env!("CARGO_BIN_EXE_fairshare-sim"))
            .arg("load")
            .arg(&empty)
            .args(["--nats-url", "nats://127.0.0.1:1"]),
        "empty.log holds no events",
    );
}

/// A trace that is not UTF-8 text is refused with the line and byte where it stops being so.
#[test]
fn a_trace_that_is_not_text_is_refused_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.csv");
    let mut bytes = b"job_id,submit_time,duration,num_gpus,user,group\nj1,0,60,1,u,g\nj2,".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(b",60,1,u,g\n");
    std::fs::write(&trace, &bytes).unwrap();
    fails_saying(
        trace_of(&trace, &["--quiet", "--out"]).arg(dir.path().join("out")),
        "bad.csv: line 3 is not UTF-8 text (byte 66)",
    );
}

/// A scenario whose jobs declare more minimum runtime than `--max-min-runtime` allows is
/// refused before it runs: the fairshare run alone would refuse those jobs.
#[test]
fn a_scenario_over_the_minimum_runtime_cap_is_refused() {
    let out = tempfile::tempdir().unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare-sim"))
        .args([
            "scenario",
            "fragmented",
            "--max-min-runtime",
            "4h",
            "--quiet",
        ])
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(stderr.contains("over --max-min-runtime"), "{stderr}");
    assert!(!out.path().join("report.md").exists());
}

/// A run refused after the log's folder was made for it (here a user name over the
/// submission service's label limit: the fairshare run alone would refuse that job) removes
/// that folder again, and the new folders above it: no empty folder is left where no log was
/// written. A folder that was there stays.
#[test]
fn a_refused_run_leaves_no_empty_log_folder() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("replay.csv");
    std::fs::write(
        &trace,
        format!(
            "job_id,submit_time,duration,num_gpus,user,group,status,num_nodes\n\
             x1,0,600,1,{},,Pass,1\nx2,10,600,1,u002,,Pass,1\n",
            "u".repeat(300)
        ),
    )
    .unwrap();
    let log = dir.path().join("new").join("logs").join("run.log");
    let run = trace_of(
        &trace,
        &["--nodes", "2", "--span", "1h", "--policies", "fairshare"],
    )
    .args(["--quiet", "--log"])
    .arg(&log)
    .arg("--out")
    .arg(dir.path().join("report"))
    .env("RUST_BACKTRACE", "0")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(stderr.contains("in the fairshare run only"), "{stderr}");
    assert!(
        !dir.path().join("new").exists(),
        "the log's new folders went"
    );
    assert!(!dir.path().join("report").exists(), "and the report's");
    assert!(trace.is_file(), "what was there stays");
}

/// A bad `--replica-jitter` is refused before anything runs: the log named by `--log` (which
/// is written after the runs) is not there.
#[test]
fn a_bad_replica_jitter_is_refused_before_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.log");
    let out = helios(&[])
        .args([
            "--nodes",
            "4",
            "--span",
            "1h",
            "--policies",
            "fairshare",
            "--quiet",
        ])
        .args(["--replicas", "3", "--replica-jitter", "soon", "--log"])
        .arg(&log)
        .arg("--out")
        .arg(dir.path().join("report"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--replica-jitter"), "{stderr}");
    assert!(!log.exists(), "the runs went ahead");
    // A nudge longer than the whole run is refused as such.
    fails_saying(
        helios(&["--nodes", "4", "--span", "1h", "--policies", "fairshare"])
            .args(["--quiet", "--replicas", "3", "--replica-jitter", "3000d"])
            .arg("--out")
            .arg(dir.path().join("report")),
        "--replica-jitter 3000d is longer than the run (1 h)",
    );
    assert!(!dir.path().join("report").exists(), "the runs went ahead");
}

/// Replicas with no jitter would replay the main run exactly and report a spread of 0 as if
/// it measured noise: refused before anything runs (the log, written after the runs, is not
/// there). One run with no jitter is no replica, and runs.
#[test]
fn replicas_without_jitter_are_refused_before_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.log");
    let stderr = fails_saying(
        helios(&["--nodes", "4", "--span", "1h", "--policies", "fairshare"])
            .args([
                "--quiet",
                "--replicas",
                "3",
                "--replica-jitter",
                "0s",
                "--log",
            ])
            .arg(&log)
            .arg("--out")
            .arg(dir.path().join("report")),
        "--replicas 3 with --replica-jitter 0s",
    );
    assert!(!stderr.contains("simulated in"), "{stderr}");
    assert!(!log.exists(), "the runs went ahead");
    assert!(!dir.path().join("report").exists(), "the runs went ahead");
    let one = helios(&["--nodes", "4", "--span", "1h", "--policies", "fifo"])
        .args(["--quiet", "--replica-jitter", "0s", "--out"])
        .arg(dir.path().join("report"))
        .output()
        .unwrap();
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
}

/// A folder where a report file goes is refused before the runs, by `--out`, as the other
/// output paths are: the log, written after the runs, is not there.
#[test]
fn a_folder_in_the_way_of_a_report_file_is_refused_before_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    std::fs::create_dir_all(out.join("report.md")).unwrap();
    let log = dir.path().join("run.log");
    let stderr = fails_saying(
        helios(&["--nodes", "4", "--span", "1h", "--policies", "fairshare"])
            .args(["--quiet", "--log"])
            .arg(&log)
            .arg("--out")
            .arg(&out),
        "report.md is a folder, where the report writes a file",
    );
    assert!(stderr.contains("--out"), "{stderr}");
    assert!(!log.exists(), "the runs went ahead");
    let mut left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["report.md"]);
}

/// A run refused after the report's folder was made (here `--log` names a folder, found only
/// once the folder exists) leaves no empty report folder behind; a folder that was there
/// before stays.
#[test]
fn a_refused_run_leaves_no_empty_report_folder() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("new").join("report");
    let refused = || {
        helios(&["--nodes", "4", "--span", "1h", "--policies", "fairshare"])
            .args(["--quiet", "--log"])
            .arg(dir.path())
            .arg("--out")
            .arg(&report)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    let o = refused();
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("is a folder"), "{stderr}");
    assert!(!report.exists(), "the empty report folder was removed");
    assert!(
        !dir.path().join("new").exists(),
        "and the new folder it was made in"
    );
    assert!(dir.path().is_dir(), "a folder that was there stays");
    std::fs::create_dir_all(&report).unwrap();
    assert!(!refused().status.success());
    assert!(report.is_dir(), "a folder made before the run stays");
}

/// A `--span` that is not whole hours is rounded up, and the run says so and by how much
/// (the jobs submitted in the added time are replayed too).
#[test]
fn a_span_of_part_hours_is_rounded_up_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let o = helios(&["--nodes", "4", "--span", "90m", "--policies", "fifo"])
        .args(["--quiet", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("--span 90m is rounded up to 2 h") && stderr.contains("the 30 min added"),
        "{stderr}"
    );
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("- Span: 2.0 hours\n"), "{report}");
    // Whole hours are taken as given, without the note.
    let whole = helios(&["--nodes", "4", "--span", "1h", "--policies", "fifo"])
        .args(["--quiet", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(whole.status.success());
    assert!(!String::from_utf8_lossy(&whole.stderr).contains("rounded up"));
}

/// A budget whose shares are all 0 owes nobody anything: the run goes on, and says that its
/// owed figures measure nothing.
#[test]
fn a_budget_of_zero_shares_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let budget = dir.path().join("budget.toml");
    std::fs::write(
        &budget,
        "cluster = \"sim\"\n[accounts.a]\nshare = 0\n[accounts.b]\nshare = 0\n",
    )
    .unwrap();
    let o = helios(&["--nodes", "4", "--span", "1h", "--policies", "fifo"])
        .args(["--quiet", "--budget"])
        .arg(&budget)
        .arg("--out")
        .arg(dir.path().join("report"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("every allocation in") && stderr.contains("has share 0"),
        "{stderr}"
    );
    // The simulator's own budget owes time: no such warning.
    let own = helios(&["--nodes", "4", "--span", "1h", "--policies", "fifo"])
        .args(["--quiet", "--out"])
        .arg(dir.path().join("report2"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&own.stderr).contains("has share 0"));
}
