//! One simulation run: every policy on the same workload and cluster, measured alike.
//!
//! Place in the flow: the top of the simulator. [`simulate`] runs fairshare through the
//! [`engine`] and each baseline through [`baseline`], measures
//! every log with [`metrics::measure`], and returns the logs and figures a
//! [`Report`](crate::report::Report) is made of.

use fairshare_events::pb;

use crate::baseline::{self, Baseline};
use crate::engine::{self, EngineConfig, EngineStats};
use crate::metrics::{self, MeasureConfig, RunMetrics};
use crate::setup::{EPOCH_MS, Setup};
use crate::workload::Workload;

/// A policy the simulator can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// This product: the services' domain code.
    Fairshare,
    /// A baseline.
    Baseline(Baseline),
}

impl Policy {
    /// Fairshare, then every baseline.
    pub fn all() -> Vec<Policy> {
        std::iter::once(Policy::Fairshare)
            .chain(Baseline::ALL.iter().copied().map(Policy::Baseline))
            .collect()
    }

    /// Name used in the report and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fairshare => "fairshare",
            Policy::Baseline(b) => b.name(),
        }
    }

    /// The policy named `name`.
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::all().into_iter().find(|p| p.name() == name)
    }
}

/// One policy's outcome.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    /// The policy.
    pub policy: Policy,
    /// Its log.
    pub log: Vec<pb::Event>,
    /// Its figures.
    pub metrics: RunMetrics,
    /// What the fairshare services did (fairshare only).
    pub engine: Option<EngineStats>,
}

/// The measurement settings matching an engine configuration and setup.
pub fn measure_config(setup: &Setup, config: &EngineConfig) -> MeasureConfig {
    MeasureConfig {
        start_ms: EPOCH_MS,
        end_ms: setup.end_ms,
        contract: config.preemption,
        window: config.window,
    }
}

/// Runs `policies` on `workload` and `setup`; `progress(policy, virtual now)` is called as
/// each run advances.
pub fn simulate(
    setup: &Setup,
    workload: &Workload,
    config: &EngineConfig,
    policies: &[Policy],
    mut progress: impl FnMut(Policy, i64),
) -> Vec<PolicyRun> {
    let measure = measure_config(setup, config);
    policies
        .iter()
        .map(|&policy| {
            let (log, stats) = match policy {
                Policy::Fairshare => {
                    let run = engine::run(setup, workload, config, |t| progress(policy, t));
                    (run.log, Some(run.stats))
                }
                Policy::Baseline(b) => (baseline::run(b, setup, workload), None),
            };
            let metrics = metrics::measure(policy.name(), &log, &measure);
            PolicyRun {
                policy,
                log,
                metrics,
                engine: stats,
            }
        })
        .collect()
}
