//! The command line of `fairshare-sim` (the binary edge: `anyhow` lives here only).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::folders::{NewFolder, check_writable, refuse_overlaps};
use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use fairshare_accounting::domain::FoldConfig;
use fairshare_decision::domain::debug::DEFAULT_DEBUG_ALLOWANCE_GPUS;
use fairshare_model::duration::parse_duration;
use fairshare_model::trace::parse_replay;
use fairshare_sim::engine::EngineConfig;
use fairshare_sim::mapping::{MappingRules, format_tenant_map, parse_tenant_map};
use fairshare_sim::metrics::RunMetrics;
use fairshare_sim::progress::Progress;
use fairshare_sim::replicas::{self, Spread};
use fairshare_sim::report::{self, MIN_OWED_GPU_MS, Report, ReportInputs};
use fairshare_sim::scenarios;
use fairshare_sim::setup::{EPOCH_MS, MAX_NODES, Setup};
use fairshare_sim::simulate::{Policy, PolicyRun, simulate};
use fairshare_sim::workload::Workload;
use fairshare_sim::{load, logfile};

const HOUR_MS: i64 = 3_600_000;

/// Trace-driven simulator of the fairshare scheduler. It runs the services' own domain code
/// (submission checks, accounting, decision, preemption) on a virtual clock, beside baseline
/// policies (FIFO with priorities, static quotas, decayed fair share), and writes a report
/// (markdown + SVG charts) of owed GPU-hours delivered, occupancy, queue waits, preemptions
/// and lost work.
#[derive(Debug, Parser)]
#[command(name = "fairshare-sim", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a `replay.csv` trace (see tests/data/traces/README.md).
    Trace(Box<TraceArgs>),
    /// Run a constructed scenario (`--list` names them).
    Scenario(ScenarioArgs),
    /// Publish a log written with `--log` to a fresh nats-server, for `fairshare audit` (or
    /// `fairshare-decision --audit` and `fairshare-preemption --audit`) to check.
    Load(LoadArgs),
}

#[derive(Debug, Args)]
struct TraceArgs {
    /// The trace file (`replay.csv`).
    #[arg(long, env = "FAIRSHARE_SIM_TRACE")]
    trace: PathBuf,
    /// Budget tree file (the format `fairshare budget apply` takes). Default: the copy of
    /// `deploy/sim/budget.toml` built into the binary, so it runs from any directory.
    #[arg(long, env = "FAIRSHARE_SIM_BUDGET")]
    budget: Option<PathBuf>,
    /// Cluster size: nodes of `--gpus-per-node` GPUs, 1 to 100,000 (ignored with
    /// `--inventory`).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=MAX_NODES as i64))]
    nodes: u32,
    /// GPUs per node with `--nodes`, 1 to 1,024.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1_024))]
    gpus_per_node: u32,
    /// Inventory file (the format `fairshare inventory apply` takes) instead of `--nodes`.
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// Trace time to skip at the start ("0", "3d").
    #[arg(long, default_value = "0s")]
    skip: String,
    /// Trace time to replay after the skip; the run lasts as long ("30d"; default: the whole
    /// trace).
    #[arg(long)]
    span: Option<String>,
    /// Per cent of jobs that are unallocated (minimum runtime 0), 0 to 100.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(0..=100))]
    unallocated_percent: u32,
    /// Largest debug job, in GPUs (over 2, the bigger ones are measured as other work: the
    /// product's debug job has at most 2).
    #[arg(long, default_value_t = 2)]
    debug_max_gpus: u32,
    /// Longest run of a debug job.
    #[arg(long, default_value = "15m")]
    debug_max_duration: String,
    /// Minimum runtime debug jobs declare (over 15m, they are measured as other work: the
    /// product's debug job declares at most 15 min).
    #[arg(long, default_value = "15m")]
    debug_min_runtime: String,
    /// Largest minimum runtime other jobs declare (their run time, clamped to it). Default: the
    /// checkpoint interval, the shortest run that banks progress (see README, "Minimum
    /// runtimes"; `2h` was the default before)
    #[arg(long)]
    min_runtime_cap: Option<String>,
    /// Jobs cannot resume after a preemption (they lose their whole run).
    #[arg(long)]
    not_resumable: bool,
    /// `tenant = allocation` lines overriding the round-robin dealing of tenants.
    #[arg(long)]
    tenant_map: Option<PathBuf>,
    /// Write which allocation each tenant charged in this run, as `--tenant-map` reads it. The
    /// dealing follows the budget's list of allocations, so a budget that adds, removes or
    /// renames one deals every tenant anew: to compare two budgets on the same work, write the
    /// map in the first run and give it to the second with `--tenant-map` (editing the lines of
    /// allocations the second budget renames or removes). Written once the run succeeds.
    #[arg(long)]
    write_tenant_map: Option<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Debug, Args)]
struct ScenarioArgs {
    /// Scenario name.
    name: Option<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Debug, Args)]
struct CommonArgs {
    /// Directory the report is written to (report.md and SVG charts).
    #[arg(long, default_value = "sim-report")]
    out: PathBuf,
    /// Also write fairshare's event log here (length-delimited protobuf; see `load`).
    #[arg(long)]
    log: Option<PathBuf>,
    /// Policies to run, comma-separated (fairshare, fifo, static-quotas,
    /// decayed-fair-share), each once. fairshare's column comes first, and the report's
    /// targets are checked for it; without it, for the first policy named.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fairshare,fifo,static-quotas,decayed-fair-share"
    )]
    policies: Vec<String>,
    /// Fair-share window.
    #[arg(long, env = "FAIRSHARE_WINDOW", default_value = "7d")]
    window: String,
    /// How long a job ordered off takes to stop and be confirmed by the launcher.
    #[arg(long, default_value = "10s")]
    stop_delay: String,
    /// Also run the preemption service's periodic pass this often ("5s", as the service
    /// does), events or not. Off by default: it takes 2 to 4.5 times as long, and since the
    /// simulator passes anyway at the next checkpoint of a victim held back for its lost work,
    /// it moves no headline figure beyond the replicas' spread (README, "Simulator").
    #[arg(long)]
    periodic_pass: Option<String>,
    /// The preemption service's own flags (grace, protection cap, checkpoint interval,
    /// hysteresis, packing), with its names, environment fall-backs and defaults: a run under
    /// the deployment's environment simulates the deployed policy, and its log audits with
    /// the same flags.
    #[command(flatten)]
    policy: fairshare_preemption::cli::PolicyArgs,
    /// How often accounting publishes usage snapshots while the log moves.
    #[arg(long, default_value = "10s")]
    snapshot_interval: String,
    /// GPUs of debug work (jobs of at most 2 GPUs with a minimum runtime of at most 15 min)
    /// each allocation may run ahead of rank order; 0 turns the allowance off. The services
    /// use the default; `--audit` needs it too.
    #[arg(long, default_value_t = DEFAULT_DEBUG_ALLOWANCE_GPUS)]
    debug_allowance_gpus: u32,
    /// The share floor: allocations holding fewer GPUs than their fraction of the cluster go
    /// first and may take work past its minimum runtime (see README, "Share floor"). `false`
    /// ranks by the window alone, to compare. The services keep it on; `--audit` needs it on.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    share_floor: bool,
    /// The hourly share floor: for the rest of each clock hour, an allocation's floor rises by
    /// what it is behind its owed time in that hour and falls by what it is ahead, cuts
    /// balanced against raises (see README, "Hourly share floor"). `false` keeps every floor
    /// at the allocation's fraction, to compare. The services keep it on; `--audit` needs it
    /// on.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    hourly_floor: bool,
    /// Re-derive every fairshare placement and preemption order from the log prefix its basis
    /// names (the decision and preemption services' audits, in-process) and fail if any
    /// differs.
    #[arg(long)]
    audit: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Runs of each policy, the main one included. The others replay the same jobs with each
    /// arrival nudged by up to `--replica-jitter`; the report then gives the lowest, median and
    /// highest headline figures over all runs, which says how large a difference between two
    /// settings must be to mean more than noise. Costs one more simulation per replica.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    replicas: u32,
    /// Largest nudge of a job's arrival in a replica ("1m", "10s").
    #[arg(long, default_value = "1m")]
    replica_jitter: String,
    /// Threads the replicas run on, one replica per thread at a time (0: one per core). The
    /// report is the same for any number; each thread holds one replica's runs in memory.
    #[arg(long, env = "FAIRSHARE_SIM_THREADS", default_value_t = 0)]
    threads: u32,
}

#[derive(Debug, Args)]
struct LoadArgs {
    /// The log file written with `--log`.
    file: PathBuf,
    /// Cluster the log is for. Default: the one its events name (the budget file's
    /// `cluster`); another is refused, since the services would fold every event as misfiled.
    #[arg(long)]
    cluster: Option<String>,
    #[command(flatten)]
    nats: fairshare_runtime::cli::NatsArgs,
}

fn ms(text: &str, what: &str) -> anyhow::Result<i64> {
    let d = parse_duration(text).with_context(|| format!("--{what} {text:?}"))?;
    i64::try_from(d.as_millis())
        .ok()
        .filter(|ms| *ms <= MAX_SPAN_MS)
        .with_context(|| format!("--{what} {text:?} is longer than ten years"))
}

/// Longest run simulated: ten years (the metrics keep one ledger entry per allocation and
/// hour).
const MAX_SPAN_MS: i64 = 3650 * 24 * HOUR_MS;

/// `deploy/sim/budget.toml`, the budget tree `trace` uses without `--budget`.
const DEFAULT_BUDGET: &str = include_str!("../../../deploy/sim/budget.toml");

fn read(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        // Where, so the byte can be found and mended.
        let before = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        anyhow::anyhow!(
            "cannot read {}: line {line} is not UTF-8 text (byte {})",
            path.display(),
            before.len() + 1
        )
    })
}

impl Cli {
    /// Runs the chosen command.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Trace(args) => args.run(),
            Command::Scenario(args) => args.run(),
            Command::Load(args) => args.run(),
        }
    }
}

impl CommonArgs {
    fn engine(&self) -> anyhow::Result<EngineConfig> {
        let window = u64::try_from(ms(&self.window, "window")?).context("--window")?;
        let mut config = EngineConfig {
            window: FoldConfig::new(window).context("--window")?,
            snapshot_interval_ms: ms(&self.snapshot_interval, "snapshot-interval")?,
            stop_delay_ms: ms(&self.stop_delay, "stop-delay")?,
            debug_allowance_gpus: self.debug_allowance_gpus,
            share_floor: self.share_floor,
            hourly_floor: self.hourly_floor,
            periodic_pass_ms: self
                .periodic_pass
                .as_deref()
                .map(|p| ms(p, "periodic-pass"))
                .transpose()?,
            ..EngineConfig::default()
        };
        if config.periodic_pass_ms.is_some_and(|ms| ms <= 0) {
            bail!("--periodic-pass must be longer than 0; leave it out to run no periodic pass");
        }
        if self.audit && !self.share_floor {
            bail!(
                "--audit re-derives placements as the decision service does, with the share \
                 floor on: drop --audit or --share-floor false"
            );
        }
        if self.audit && !self.hourly_floor {
            bail!(
                "--audit re-derives placements as the decision service does, with the hourly \
                 floor on: drop --audit or --hourly-floor false"
            );
        }
        if self.audit && self.debug_allowance_gpus != DEFAULT_DEBUG_ALLOWANCE_GPUS {
            bail!(
                "--audit re-derives placements as the decision service does, with its debug \
                 allowance of {DEFAULT_DEBUG_ALLOWANCE_GPUS} GPUs: drop --audit or \
                 --debug-allowance-gpus"
            );
        }
        config.preemption = self.policy.config().context("preemption settings")?;
        config.limits.max_min_runtime_s = config.preemption.min_runtime_cap_ms / 1000;
        Ok(config)
    }

    /// Runs the replicas beyond the main run (`--replicas`) and their spread, if any.
    fn replicate(
        &self,
        setup: &Setup,
        workload: &Workload,
        config: &EngineConfig,
        policies: &[Policy],
        main: &[RunMetrics],
        jitter_ms: i64,
    ) -> Option<Spread> {
        if self.replicas <= 1 {
            return None;
        }
        let threads = match self.threads {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            n => n as usize,
        };
        let mut all = vec![main.to_vec()];
        all.extend(replicas::run_replicas(
            setup,
            workload,
            config,
            policies,
            self.replicas,
            jitter_ms,
            threads,
            |replica, took| {
                eprintln!(
                    "replica {replica}/{}: simulated in {:.3} s",
                    self.replicas - 1,
                    took.as_secs_f64()
                );
            },
        ));
        replicas::spread(&all, jitter_ms, MIN_OWED_GPU_MS)
    }

    fn policies(&self) -> anyhow::Result<Vec<Policy>> {
        let mut policies: Vec<Policy> = Vec::new();
        for name in &self.policies {
            let policy = Policy::from_name(name.trim())
                .with_context(|| format!("--policies: no policy named {name:?}"))?;
            if policies.contains(&policy) {
                bail!("--policies names {} twice", policy.name());
            }
            policies.push(policy);
        }
        // The product's figures first: the report checks the SPEC's targets for the first run.
        policies.sort_by_key(|p| *p != Policy::Fairshare);
        Ok(policies)
    }

    /// Refuses a run whose report or log would be written over `inputs` or one another (with
    /// `more_outputs`, the command's own): see [`refuse_overlaps`].
    fn refuse_overlaps(
        &self,
        inputs: &[(&str, &Path)],
        more_outputs: &[(&str, &Path)],
    ) -> anyhow::Result<()> {
        let report: Vec<(String, PathBuf)> = report::file_names()
            .map(|name| (format!("--out (its {name})"), self.out.join(name)))
            .collect();
        let mut outputs: Vec<(&str, &Path)> = report
            .iter()
            .map(|(flag, path)| (flag.as_str(), path.as_path()))
            .collect();
        outputs.extend(self.log.as_deref().map(|path| ("--log", path)));
        outputs.extend_from_slice(more_outputs);
        refuse_overlaps(inputs, &outputs)
    }

    /// Runs every policy, writes the report (and the log), prints the summary.
    /// `title`, `source` and `rules` describe the workload at the top of the report.
    fn simulate_and_report(
        &self,
        setup: &Setup,
        workload: &Workload,
        (title, source, rules): (String, String, Vec<String>),
    ) -> anyhow::Result<()> {
        let config = self.engine()?;
        let policies = self.policies()?;
        if (self.log.is_some() || self.audit) && !policies.contains(&Policy::Fairshare) {
            // Only fairshare writes the contract's log; without it both would silently do
            // nothing (and an earlier run's log file would stay behind).
            bail!(
                "--log and --audit are of the fairshare policy's log: add fairshare to --policies"
            );
        }
        if let Some(path) = &self.log
            && (!self.share_floor
                || !self.hourly_floor
                || self.debug_allowance_gpus != DEFAULT_DEBUG_ALLOWANCE_GPUS)
        {
            eprintln!(
                "note: {} is written with settings the services do not run with (share floor, \
                 hourly floor or debug allowance): `fairshare audit` of it, once loaded, may \
                 report divergences wherever those settings decided",
                path.display()
            );
        }
        // Everything that can be refused is refused before minutes of simulation: the report's
        // folder and the log's are made now, and the replicas' jitter is read now.
        let jitter_ms = ms(&self.replica_jitter, "replica-jitter")?;
        // Unnudged replicas replay the main run exactly: their spread of 0 would read as a
        // measurement of noise.
        if self.replicas > 1 && jitter_ms == 0 {
            bail!(
                "--replicas {} with --replica-jitter {} would rerun the same simulation {} more \
                 times and report no spread: give a jitter over 0 (\"1m\"), or leave --replicas \
                 out",
                self.replicas,
                self.replica_jitter,
                self.replicas - 1
            );
        }
        let span_ms = setup.end_ms.saturating_sub(EPOCH_MS);
        if jitter_ms > span_ms {
            bail!(
                "--replica-jitter {} is longer than the run ({}): replicas would move arrivals \
                 past its end; give at most the span",
                self.replica_jitter,
                fairshare_sim::engine::duration(span_ms)
            );
        }
        if self.out.exists() && !self.out.is_dir() {
            bail!(
                "--out {} is a file, not a folder: the report is a folder of files",
                self.out.display()
            );
        }
        if let Some(path) = report::folder_in_the_way(&self.out) {
            bail!(
                "--out {}: {} is a folder, where the report writes a file of that name; move it \
                 or give another --out",
                self.out.display(),
                path.display()
            );
        }
        let mut out_dir = NewFolder::create(&self.out)?;
        // Declared after the report's, so dropped first: a log folder made inside a new report
        // folder goes before that one is tried (`remove_dir` takes only empty folders).
        let mut log_dir = self
            .log
            .as_deref()
            .map(|path| check_writable("--log", path))
            .transpose()?;
        // The baselines check allocations and shapes only: a job the submission service alone
        // refuses would make the runs compare different workloads.
        let refused = workload.refused(setup, &config.limits);
        let only_fairshare = refused.by_fairshare_only;
        if let Some((job, why)) = &refused.first_by_fairshare_only {
            bail!(
                "the submission checks would refuse {only_fairshare} jobs in the fairshare run \
                 only (a label, key or minimum runtime over the submission limits, or a \
                 repeated key), the first job {job:?}: {why}. The runs would compare different \
                 workloads"
            );
        }
        let inputs = ReportInputs::new(title, source, rules, setup, workload, &refused, &config);
        if inputs.refused > 0 {
            eprintln!(
                "warning: the submission checks refuse {} of the {} jobs (of no allocation in \
                 the tree, or of GPUs no shape on the nodes holds): no policy runs them",
                inputs.refused, inputs.jobs
            );
        }
        let span = (setup.end_ms - EPOCH_MS).max(1);
        let mut bars: Vec<Progress> = policies
            .iter()
            .map(|p| Progress::new(p.name(), u64::try_from(span).unwrap_or(0), !self.quiet))
            .collect();
        let mut timings = Vec::new();
        let mut runs: Vec<PolicyRun> = Vec::new();
        for (i, &policy) in policies.iter().enumerate() {
            let started = Instant::now();
            let bar = &mut bars[i];
            let mut run = simulate(setup, workload, &config, &[policy], |_, now| {
                bar.set(u64::try_from(now - EPOCH_MS).unwrap_or(0));
            });
            bar.finish();
            timings.push((policy.name(), started.elapsed()));
            runs.append(&mut run);
        }
        if let Some(path) = &self.log
            && let Some(run) = runs.iter().find(|r| r.policy == Policy::Fairshare)
        {
            std::fs::write(path, logfile::encode(&run.log))
                .with_context(|| format!("cannot write {}", path.display()))?;
            if let Some(dir) = &mut log_dir {
                dir.keep();
            }
            eprintln!(
                "fairshare log: {} events -> {}",
                run.log.len(),
                path.display()
            );
        }
        if self.audit
            && let Some(run) = runs.iter().find(|r| r.policy == Policy::Fairshare)
        {
            let audit = fairshare_sim::audit::audit_log(&setup.cluster, &run.log);
            eprintln!(
                "audit: {} cycles, {} placements re-derived, {} divergences, {} over-committed placements",
                audit.cycles,
                audit.placements,
                audit.divergences.len(),
                audit.overcommits.len()
            );
            if !audit.is_clean() {
                bail!(
                    "the audit found divergences ({:?}) or over-committed nodes ({:?})",
                    audit.divergences.first(),
                    audit.overcommits.first()
                );
            }
            let orders =
                fairshare_sim::audit::audit_orders(&setup.cluster, &run.log, &config.preemption);
            let twice = orders.late.iter().filter(|l| l.is_finding()).count();
            eprintln!(
                "audit: {} passes, {} preemption orders re-derived, {} divergences, {} beside \
                 another pass's order for the same waiter, {} once the waiter no longer waited",
                orders.passes,
                orders.orders,
                orders.divergences.len(),
                twice,
                orders.late.len() - twice
            );
            if let Some(first) = orders.divergences.first() {
                bail!("the audit found preemption orders that do not re-derive: {first}");
            }
            if let Some(first) = orders.late.iter().find(|l| l.is_finding()) {
                bail!("the audit found two passes' orders for one waiter: {first}");
            }
            let snapshots = fairshare_sim::audit::audit_snapshots(&setup.cluster, &run.log);
            eprintln!(
                "audit: {} usage snapshots re-derived, {} divergences",
                snapshots.snapshots,
                snapshots.divergences.len()
            );
            if let Some(first) = snapshots.divergences.first() {
                bail!("the audit found usage snapshots that do not re-derive: {first}");
            }
        }
        let main: Vec<RunMetrics> = runs.iter().map(|r| r.metrics.clone()).collect();
        let spread = self.replicate(setup, workload, &config, &policies, &main, jitter_ms);
        let report = Report {
            inputs,
            runs: main,
            spread,
        };
        let written = report::write(&self.out, &report)
            .with_context(|| format!("cannot write the report to {}", self.out.display()))?;
        out_dir.keep();
        for (name, took) in timings {
            eprintln!("{name}: simulated in {:.3} s", took.as_secs_f64());
        }
        for run in &runs {
            if let Some(stats) = &run.engine {
                eprintln!(
                    "fairshare: {} steps, {} cycles ({} placing, {} known empty), {} preemption passes, {} snapshots, {} rejected",
                    stats.steps,
                    stats.cycles,
                    stats.placing_cycles,
                    stats.known_empty_cycles,
                    stats.passes,
                    stats.snapshots,
                    stats.rejected
                );
                if stats.rejected != report.inputs.refused {
                    eprintln!(
                        "warning: the fairshare run refused {} jobs where the report's inputs \
                         count {}: an action at a job's own submission time changed the tree or \
                         the nodes it was checked against",
                        stats.rejected, report.inputs.refused
                    );
                }
            }
        }
        for path in written {
            fairshare_runtime::outln!("{}", path.display());
        }
        Ok(())
    }
}

impl TraceArgs {
    fn run(self) -> anyhow::Result<()> {
        let inputs: Vec<(&str, &Path)> = [
            Some(("--trace", self.trace.as_path())),
            self.budget.as_deref().map(|p| ("--budget", p)),
            self.inventory.as_deref().map(|p| ("--inventory", p)),
            self.tenant_map.as_deref().map(|p| ("--tenant-map", p)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let map_output: Vec<(&str, &Path)> = self
            .write_tenant_map
            .as_deref()
            .map(|p| ("--write-tenant-map", p))
            .into_iter()
            .collect();
        self.common.refuse_overlaps(&inputs, &map_output)?;
        // Refused now rather than after minutes of simulation; its folder is taken back if
        // the run fails before the map is written.
        let mut map_folder = self
            .write_tenant_map
            .as_deref()
            .map(|path| check_writable("--write-tenant-map", path))
            .transpose()?;
        let text = read(&self.trace)?;
        let trace = parse_replay(&text).with_context(|| self.trace.display().to_string())?;
        let skip_ms = ms(&self.skip, "skip")?;
        let last_s = trace.iter().map(|t| t.submit_s).max().unwrap_or(0);
        let span_ms = match &self.span {
            Some(s) => ms(s, "span")?,
            None => (last_s * 1000 - skip_ms).max(0) + 1000,
        };
        if span_ms <= 0 {
            bail!("--span must be longer than 0");
        }
        if span_ms > MAX_SPAN_MS {
            anyhow::bail!(
                "the run would span {} days, over the {} the simulator keeps an hourly ledger for \
                 (a trace time far in the future?): give a shorter --span",
                span_ms / (24 * HOUR_MS),
                MAX_SPAN_MS / (24 * HOUR_MS)
            );
        }
        // Whole hours, so the ledger's last hour closes at the end.
        let given_ms = span_ms;
        let span_ms = (span_ms + HOUR_MS - 1) / HOUR_MS * HOUR_MS;
        if let Some(given) = &self.span
            && span_ms != given_ms
        {
            eprintln!(
                "note: --span {given} is rounded up to {} (owed time is counted by whole hours): \
                 jobs submitted in the {} added are replayed too",
                fairshare_sim::engine::duration(span_ms),
                fairshare_sim::engine::duration(span_ms - given_ms)
            );
        }
        let budget = match &self.budget {
            Some(path) => read(path)?,
            None => DEFAULT_BUDGET.to_owned(),
        };
        let budget_name = || {
            self.budget.as_ref().map_or_else(
                || "the built-in copy of deploy/sim/budget.toml".to_owned(),
                |p| p.display().to_string(),
            )
        };
        let setup = match &self.inventory {
            Some(path) => Setup::from_files(&budget, &read(path)?, EPOCH_MS + span_ms)
                .with_context(|| format!("{} with {}", budget_name(), path.display()))?,
            None => {
                let budget =
                    fairshare_model::files::parse_budget(&budget).with_context(budget_name)?;
                let nodes = Setup::uniform_nodes("node", self.nodes as usize, self.gpus_per_node);
                Setup::new(budget, nodes, EPOCH_MS + span_ms)?
            }
        };
        if setup.owes_nothing() {
            eprintln!(
                "warning: every allocation in {} has share 0 (or sits under one that has): no \
                 allocation is owed GPU time, so the report's owed-delivery figures measure nothing",
                budget_name()
            );
        }
        let allocations = setup.allocations();
        let policy = self.common.policy.config().context("preemption settings")?;
        let tenant_map = match &self.tenant_map {
            Some(path) => parse_tenant_map(&read(path)?, &allocations)
                .with_context(|| path.display().to_string())?,
            None => Default::default(),
        };
        let rules = MappingRules {
            unallocated_percent: self.unallocated_percent,
            debug_max_gpus: self.debug_max_gpus,
            debug_max_duration_ms: ms(&self.debug_max_duration, "debug-max-duration")?,
            debug_min_runtime_ms: ms(&self.debug_min_runtime, "debug-min-runtime")?,
            min_runtime_cap_ms: match &self.min_runtime_cap {
                Some(cap) => ms(cap, "min-runtime-cap")?,
                None => policy.checkpoint_interval_ms,
            },
            resumable: !self.not_resumable,
            tenant_map,
            skip_ms,
            span_ms,
        };
        // (Its default, the checkpoint interval, may be shorter: the mapping gives 1 min then.)
        if let Some(cap) = &self.min_runtime_cap
            && rules.min_runtime_cap_ms < 60_000
        {
            bail!(
                "--min-runtime-cap {cap:?} is under the 1 min the mapping gives at least: give 1m \
                 or more"
            );
        }
        // A declared minimum runtime of 0 (under a second, in whole seconds) is unallocated
        // work, not debugging.
        if rules.debug_min_runtime_ms < 1_000 {
            bail!(
                "--debug-min-runtime {:?} declares debug jobs' minimum runtime as 0 s, which \
                 makes them unallocated work: give at least 1s",
                self.debug_min_runtime
            );
        }
        // Every mapped job must pass the submission checks the fairshare run applies, or that
        // run would refuse jobs the baselines run, and compare different workloads.
        let cap = policy.min_runtime_cap_ms;
        for (flag, value) in [
            (
                "--min-runtime-cap (default: --checkpoint-interval)",
                rules.min_runtime_cap_ms,
            ),
            ("--debug-min-runtime", rules.debug_min_runtime_ms),
        ] {
            if value > cap {
                bail!(
                    "{flag} gives minimum runtimes of {} s, over --max-min-runtime ({} s): the \
                     submission checks would refuse those jobs in the fairshare run only",
                    value / 1000,
                    cap / 1000
                );
            }
        }
        for warning in rules.warnings() {
            eprintln!("warning: {warning}");
        }
        let unmatched = rules.unmatched_tenants(&trace);
        if !unmatched.is_empty() {
            eprintln!(
                "warning: --tenant-map names tenants no GPU job in the chosen part of the trace \
                 has (their lines change nothing): {}",
                unmatched.join(", ")
            );
        }
        let jobs = rules.map(&trace, &allocations);
        if jobs.is_empty() {
            bail!("no GPU jobs in the chosen part of the trace");
        }
        let past_last = skip_ms.saturating_add(span_ms) - last_s.saturating_mul(1000);
        if past_last > 24 * HOUR_MS {
            eprintln!(
                "warning: the run goes on {} days after the trace's last submission: the \
                 oversubscription and every rate are taken over the whole span",
                past_last / (24 * HOUR_MS)
            );
        }
        // Written once the run has succeeded; a tenant the map's lines cannot hold is refused
        // before it starts.
        let tenant_map = match &self.write_tenant_map {
            Some(path) => {
                let map = rules.tenant_allocations(&trace, &allocations);
                if let Some(tenant) = map.keys().find(|t| t.contains(['=', '#'])) {
                    bail!(
                        "--write-tenant-map: tenant {tenant:?} holds '=' or '#', which a tenant \
                         map line cannot: pin it by hand, or leave the map out"
                    );
                }
                Some((path, map))
            }
            None => None,
        };
        if tenant_map.is_none() && self.budget.is_some() && self.tenant_map.is_none() {
            eprintln!(
                "note: tenants are dealt over this budget's allocations; a budget with other \
                 allocations deals them anew. To compare budgets on the same work, write the \
                 dealing with --write-tenant-map and replay it with --tenant-map"
            );
        }
        let workload = Workload::new(jobs, Vec::new());
        // Every file and choice the run read, so two reports say how their inputs differ.
        let mut source = format!(
            "{} ({}); trace time replayed from {} for {}; budget {}",
            self.trace.display(),
            attribution(&trace_name(&self.trace)),
            if skip_ms == 0 {
                "its start".to_owned()
            } else {
                fairshare_sim::engine::duration(skip_ms)
            },
            fairshare_sim::engine::duration(span_ms),
            budget_name(),
        );
        if let Some(path) = &self.inventory {
            source.push_str(&format!("; inventory {}", path.display()));
        }
        if let Some(path) = &self.tenant_map {
            source.push_str(&format!("; tenant map {}", path.display()));
        }
        let described = (
            format!("{} on {} GPUs", trace_name(&self.trace), setup.total_gpus()),
            source,
            rules.describe(&trace),
        );
        self.common
            .simulate_and_report(&setup, &workload, described)?;
        if let Some((path, map)) = tenant_map {
            std::fs::write(path, format_tenant_map(&map))
                .with_context(|| format!("cannot write {}", path.display()))?;
            if let Some(folder) = &mut map_folder {
                folder.keep();
            }
            eprintln!("tenant map: {} tenants -> {}", map.len(), path.display());
        }
        Ok(())
    }
}

/// The credit a report on a bundled trace must carry (tests/data/traces/README.md: both
/// licences require it), by the trace's folder name; other traces are the user's to credit.
fn attribution(trace: &str) -> &'static str {
    match trace {
        "helios-15k" => {
            "SenseTime Helios trace, Hu et al., SC'21, CC-BY-4.0; the 15,000-job subset cut by \
             DIR-LAB/Gen-Parallel-Workloads, Soundar Raj et al., JSSPP'24"
        }
        "msft-itp" => {
            "Microsoft ITP clusters, 2021, from microsoft/elasticflow-traces (ElasticFlow, \
             ASPLOS'23), MIT licence"
        }
        _ => "not a bundled trace: credit its source as its licence asks",
    }
}

/// The trace's name: its folder's ("helios-15k") for a `replay.csv`, as the bundled traces
/// are laid out; otherwise its file's, without the extension ("unsorted" for
/// `/tmp/x/unsorted.csv`), so another file in some folder is not named, or credited, as the
/// folder.
fn trace_name(path: &Path) -> String {
    let bundled = path.file_name().is_some_and(|n| n == "replay.csv");
    let name = if bundled {
        path.parent().and_then(Path::file_name)
    } else {
        None
    };
    name.or_else(|| path.file_stem())
        .map_or_else(|| "trace".to_owned(), |n| n.to_string_lossy().into_owned())
}

impl ScenarioArgs {
    fn run(self) -> anyhow::Result<()> {
        if self.list {
            for name in scenarios::NAMES {
                if let Some(Ok(s)) = scenarios::by_name(name) {
                    fairshare_runtime::outln!("{name:20} {}", s.description);
                }
            }
            return Ok(());
        }
        let Some(name) = &self.name else {
            bail!("name a scenario (see --list)");
        };
        self.common.refuse_overlaps(&[], &[])?;
        let scenario = scenarios::by_name(name)
            .with_context(|| format!("no scenario named {name:?} (see --list)"))??;
        // As for traces: the fairshare run's submission checks must accept every job the
        // baselines run, or the runs compare different workloads.
        let cap_ms = self.common.policy.config().context("preemption settings")?;
        let cap_ms = cap_ms.min_runtime_cap_ms;
        if let Some(job) = scenario
            .workload
            .jobs
            .iter()
            .find(|j| j.min_runtime_ms > cap_ms)
        {
            bail!(
                "scenario {name} has jobs declaring {} s of minimum runtime ({}), over \
                 --max-min-runtime ({} s): the submission checks would refuse them in the \
                 fairshare run only",
                job.min_runtime_ms / 1000,
                job.name,
                cap_ms / 1000
            );
        }
        let described = (
            format!("scenario {}", scenario.name),
            scenario.description.to_owned(),
            vec!["constructed jobs (see tools/sim/src/scenarios.rs)".to_owned()],
        );
        self.common
            .simulate_and_report(&scenario.setup, &scenario.workload, described)
    }
}

impl LoadArgs {
    fn run(self) -> anyhow::Result<()> {
        let bytes = std::fs::read(&self.file)
            .with_context(|| format!("cannot read {}", self.file.display()))?;
        let events = logfile::decode(&bytes)?;
        if events.is_empty() {
            bail!(
                "{} holds no events: nothing to load (a log `--log` wrote holds at least the \
                 budget and the nodes)",
                self.file.display()
            );
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let cluster = match self.cluster {
            Some(c) => c,
            None => load::cluster_of(&events).ok_or(load::LoadError::NoCluster)?,
        };
        runtime.block_on(async {
            let client = self.nats.connect("fairshare-sim-load").await?;
            let js = async_nats::jetstream::new(client);
            fairshare_runtime::nats::ensure_streams(&js, 1).await?;
            let n = load::load_log(&js, &cluster, &events).await?;
            fairshare_runtime::outln!("loaded {n} events of cluster {cluster}");
            anyhow::Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundled trace is named (and credited) by its folder; any other file by its own name.
    #[test]
    fn a_trace_is_named_by_its_folder_only_in_the_bundled_layout() {
        let name = |p: &str| trace_name(Path::new(p));
        assert_eq!(
            name("tests/data/traces/helios-15k/replay.csv"),
            "helios-15k"
        );
        assert_eq!(name("/tmp/x/helios-15k/unsorted.csv"), "unsorted");
        assert_eq!(name("replay.csv"), "replay");
        assert_eq!(name("/data/mine.csv"), "mine");
        assert!(attribution(&name("/tmp/helios-15k/other.csv")).starts_with("not a bundled"));
        assert!(attribution(&name("x/msft-itp/replay.csv")).starts_with("Microsoft ITP"));
    }
}
