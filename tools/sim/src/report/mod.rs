//! The policy report: a markdown file of tables and SVG charts, one directory per run.
//!
//! Place in the flow: last. The simulator measures each policy's log into a
//! [`RunMetrics`](crate::metrics::RunMetrics); this module renders them side by side. Nothing
//! here reads a clock or the machine: the same inputs give a byte-identical report.

/// What was simulated, printed at the top of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportInputs {
    /// Report title, e.g. "helios-15k on 256 GPUs".
    pub title: String,
    /// Where the workload came from (trace folder and its attribution line, or scenario).
    pub workload: String,
    /// The mapping rules used, one line each.
    pub rules: Vec<String>,
    /// Cluster GPUs.
    pub gpus: u64,
    /// Nodes.
    pub nodes: u64,
    /// Simulated span in ms.
    pub span_ms: i64,
    /// Jobs replayed.
    pub jobs: u64,
    /// Of those, jobs the submission checks refuse
    /// ([`Workload::refused`](crate::workload::Workload::refused)).
    pub refused: u64,
    /// Demand over supply: GPU time the jobs could run before the run ends over GPU time the
    /// cluster offers in the span (2-3 for the clusters this product is built for).
    pub oversubscription: f64,
    /// The same with every job's whole run counted, past the run's end too.
    pub oversubscription_whole: f64,
    /// Share (0 to 1) of allocated GPU time in jobs bigger than their allocation's share of
    /// the cluster ([`Workload::oversized_share`](crate::workload::Workload::oversized_share)).
    pub oversized_share: f64,
    /// The same share per allocation path
    /// ([`Workload::oversized_by_allocation`](crate::workload::Workload::oversized_by_allocation)).
    pub oversized_by_allocation: std::collections::BTreeMap<String, f64>,
    /// Fair-share window in ms.
    pub window_ms: i64,
    /// Grace period in ms.
    pub grace_ms: i64,
    /// fairshare's other settings, one line each ([`crate::engine::EngineConfig::settings`]).
    pub settings: Vec<String>,
}

impl ReportInputs {
    /// The inputs of a run of `workload` on `setup` with `config`'s window and grace, of which
    /// the submission checks refuse `refused` ([`Workload::refused`], computed once by the
    /// caller: it replays every submission).
    ///
    /// [`Workload::refused`]: crate::workload::Workload::refused
    pub fn new(
        title: String,
        workload_source: String,
        rules: Vec<String>,
        setup: &crate::setup::Setup,
        workload: &crate::workload::Workload,
        refused: &crate::workload::Refused,
        config: &crate::engine::EngineConfig,
    ) -> ReportInputs {
        ReportInputs {
            title,
            workload: workload_source,
            rules,
            gpus: setup.total_gpus(),
            nodes: setup.nodes.len() as u64,
            span_ms: setup.end_ms - crate::setup::EPOCH_MS,
            jobs: workload.jobs.len() as u64,
            refused: refused.by_all,
            oversubscription: workload.demand_over_supply(setup),
            oversubscription_whole: workload.whole_demand_over_supply(setup),
            oversized_share: workload.oversized_share(setup),
            oversized_by_allocation: workload.oversized_by_allocation(setup),
            window_ms: i64::try_from(config.window.window_ms()).unwrap_or(i64::MAX),
            grace_ms: config.preemption.grace_ms,
            settings: config.settings(),
        }
    }
}

/// A whole report: the inputs and one measured run per policy, fairshare first.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// What was simulated.
    pub inputs: ReportInputs,
    /// One entry per policy.
    pub runs: Vec<crate::metrics::RunMetrics>,
    /// The headline figures over replicas of the run (`--replicas`), if any were run.
    pub spread: Option<crate::replicas::Spread>,
}

pub mod markdown;
pub mod svg;

use std::path::{Path, PathBuf};

/// Owed GPU time from which an allocation is held to the 95% target (SPEC section 6: one
/// GPU-day). Smaller allocations are reported but marked: a single short wait swings them.
pub const MIN_OWED_GPU_MS: u128 = 24 * 3_600_000;

/// The charts [`write()`] puts beside `report.md`: file name and caption, in report order.
pub const CHARTS: [(&str, &str); 3] = [
    (
        "delivered_vs_owed.svg",
        "Delivered share of owed GPU time per allocation",
    ),
    ("occupancy.svg", "GPU occupancy over time"),
    ("waits.svg", "Queue waits by job class"),
];

/// One allocation's metrics in every run, `None` where a run's log never mentioned it.
pub(crate) type AllocationRow<'a> = (&'a str, Vec<Option<&'a crate::metrics::AllocationMetrics>>);

/// Allocations in path order with their metrics in every run. Runs should list the same
/// allocations; the union keyed by path keeps every row even if one policy's log never
/// mentioned an allocation.
pub(crate) fn allocation_rows(runs: &[crate::metrics::RunMetrics]) -> Vec<AllocationRow<'_>> {
    let mut rows: std::collections::BTreeMap<&str, Vec<_>> = std::collections::BTreeMap::new();
    for (i, run) in runs.iter().enumerate() {
        for a in &run.allocations {
            rows.entry(a.path.as_str())
                .or_insert_with(|| vec![None; runs.len()])[i] = Some(a);
        }
    }
    rows.into_iter().collect()
}

/// The names of the files [`write()`] puts in its folder: `report.md`, then the charts.
pub fn file_names() -> impl Iterator<Item = &'static str> {
    std::iter::once("report.md").chain(CHARTS.iter().map(|(name, _)| *name))
}

/// The first of the report's places in `dir` ([`file_names`]) that a folder takes: the report
/// cannot be written there. The command line asks before simulating, [`write()`] again before
/// it moves any file.
pub fn folder_in_the_way(dir: &Path) -> Option<PathBuf> {
    file_names().map(|name| dir.join(name)).find(|p| p.is_dir())
}

/// Writes `report.md` and the three charts into `dir` (created if missing); returns the paths
/// written, `report.md` first.
///
/// All or nothing, as far as the folder allows: each file is written beside its place under a
/// temporary name, and only once all four are, each is renamed into place. A failure to write
/// removes the temporary files and leaves whatever report was there before. A rename refused
/// once others went through (a report file another user owns in a sticky folder) leaves the
/// ones before it in place, mixed with the old report: the error names the file refused.
pub fn write(dir: &Path, report: &Report) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let files = [
        ("report.md", markdown::render(report, &CHARTS)),
        (CHARTS[0].0, svg::delivered_vs_owed(report)),
        (CHARTS[1].0, svg::occupancy(report)),
        (CHARTS[2].0, svg::waits(report)),
    ];
    let staged: Vec<(PathBuf, PathBuf)> = files
        .iter()
        // Named for this process, so two runs sharing a folder do not write over each other's.
        .map(|(name, _)| {
            let temporary = format!(".{name}.{}.partial", std::process::id());
            (dir.join(temporary), dir.join(name))
        })
        .collect();
    let result = (|| {
        // A rename fails on a folder in the way: found before any file moves.
        if let Some(path) = folder_in_the_way(dir) {
            return Err(std::io::Error::other(format!(
                "{} is a folder",
                path.display()
            )));
        }
        let naming = |path: &Path| {
            let path = path.display().to_string();
            move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{path}: {e}"))
        };
        for ((temporary, path), (_, text)) in staged.iter().zip(&files) {
            std::fs::write(temporary, text).map_err(naming(path))?;
        }
        for (temporary, path) in &staged {
            std::fs::rename(temporary, path).map_err(naming(path))?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (temporary, _) in &staged {
            let _ = std::fs::remove_file(temporary);
        }
        return Err(e);
    }
    Ok(staged.into_iter().map(|(_, path)| path).collect())
}

/// A duration for people: "0 s", "4.2 s", "42 s", "12 min", "3.4 h", "2.1 d". Negative
/// durations print as 0.
pub fn human_duration(ms: i64) -> String {
    const SECOND: u128 = 1_000;
    const MINUTE: u128 = 60 * SECOND;
    const HOUR: u128 = 60 * MINUTE;
    const DAY: u128 = 24 * HOUR;
    let ms = u128::try_from(ms).unwrap_or(0);
    if ms == 0 {
        return "0 s".to_owned();
    }
    // Each unit is chosen on the rounded value, so 59.7 s reads "1 min", never "60 s".
    if round_div(ms, SECOND / 10) < 100 {
        return format!("{} s", fixed(ms, SECOND, 1));
    }
    if round_div(ms, SECOND) < 60 {
        return format!("{} s", round_div(ms, SECOND));
    }
    if round_div(ms, MINUTE) < 60 {
        return format!("{} min", round_div(ms, MINUTE));
    }
    if round_div(ms, HOUR / 10) < 240 {
        return format!("{} h", fixed(ms, HOUR, 1));
    }
    format!("{} d", fixed(ms, DAY, 1))
}

/// `num / den` rounded half up, in integers.
fn round_div(num: u128, den: u128) -> u128 {
    match num.checked_mul(2) {
        Some(twice) => twice.saturating_add(den) / (2 * den).max(1),
        None => num / den.max(1),
    }
}

/// `num / den` with `decimals` fixed decimals, rounded half up, computed in integers so the
/// text never depends on float formatting. `den` must not be 0.
pub(crate) fn fixed(num: u128, den: u128, decimals: u32) -> String {
    let factor = 10u128.pow(decimals);
    let Some(scaled) = num.checked_mul(factor) else {
        // Beyond any real figure (over 10^34 GPU-ms); a float is good enough there.
        return format!("{:.*}", decimals as usize, num as f64 / den.max(1) as f64);
    };
    let q = round_div(scaled, den);
    if decimals == 0 {
        return q.to_string();
    }
    format!(
        "{}.{:0width$}",
        q / factor,
        q % factor,
        width = decimals as usize
    )
}

/// `num / den` in per cent with `decimals` fixed decimals, or `None` when `den` is 0 (a share
/// of nothing is not 0%).
pub(crate) fn pct(num: u128, den: u128, decimals: u32) -> Option<String> {
    (den != 0).then(|| fixed(num.saturating_mul(100), den, decimals))
}

/// GPU-ms as GPU-hours with one decimal.
pub(crate) fn gpu_hours_text(gpu_ms: u128) -> String {
    fixed(gpu_ms, 3_600_000, 1)
}

/// Whether `num / den >= target_num / target_den`, exactly; the target checks use this rather
/// than rounded percentages, so "99.50" can never be shown as met when it is 99.496.
pub(crate) fn at_least(num: u128, den: u128, target_num: u128, target_den: u128) -> bool {
    num.saturating_mul(target_den) >= den.saturating_mul(target_num)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(0), "0 s");
        assert_eq!(human_duration(-5), "0 s");
        assert_eq!(human_duration(4_240), "4.2 s");
        assert_eq!(human_duration(42_000), "42 s");
        assert_eq!(human_duration(59_700), "1 min");
        assert_eq!(human_duration(12 * 60_000), "12 min");
        assert_eq!(human_duration(3 * 3_600_000 + 24 * 60_000), "3.4 h");
        assert_eq!(human_duration(50 * 3_600_000 + 24 * 60_000), "2.1 d");
    }

    #[test]
    fn fixed_rounds_half_up_in_integers() {
        assert_eq!(fixed(990, 1000, 1), "1.0");
        assert_eq!(pct(990, 1000, 1).as_deref(), Some("99.0"));
        assert_eq!(pct(99_496, 100_000, 2).as_deref(), Some("99.50"));
        assert_eq!(pct(1, 3, 2).as_deref(), Some("33.33"));
        assert_eq!(pct(2, 3, 0).as_deref(), Some("67"));
        assert_eq!(pct(5, 0, 1), None);
        assert!(!at_least(99_496, 100_000, 995, 1000));
        assert!(at_least(995, 1000, 995, 1000));
    }

    #[test]
    fn write_puts_every_file_in_a_new_directory() {
        let dir = std::env::temp_dir().join(format!("fairshare-report-{}", std::process::id()));
        let report = sample::report();
        let paths = write(&dir.join("nested"), &report).expect("write report");
        let names: Vec<_> = paths
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        assert_eq!(
            names,
            [
                "report.md",
                "delivered_vs_owed.svg",
                "occupancy.svg",
                "waits.svg"
            ]
        );
        for p in &paths {
            let text = std::fs::read_to_string(p).expect("read back");
            assert!(!text.is_empty());
        }
        let md = std::fs::read_to_string(&paths[0]).expect("read report.md");
        assert!(md.contains("](occupancy.svg)"));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

/// A small hand-built report shared by the tests of the renderers.
#[cfg(test)]
pub(crate) mod sample {
    use fairshare_events::pb::PreemptionCause;

    use super::{Report, ReportInputs};
    use crate::metrics::{
        AllocationMetrics, CausePreemptions, HourPoint, IdleUnderContention, RunMetrics, Waits,
    };

    /// One GPU-hour in GPU-ms.
    pub(crate) const H: u128 = 3_600_000;

    fn alloc(path: &str, ppm: u64, owed_h: u128, delivered_owed_h: u128) -> AllocationMetrics {
        AllocationMetrics {
            path: path.to_owned(),
            fraction_ppm: ppm,
            demand_gpu_ms: owed_h * 2 * H,
            owed_gpu_ms: owed_h * H,
            delivered_gpu_ms: (delivered_owed_h + 5) * H,
            delivered_owed_gpu_ms: delivered_owed_h * H,
            owed_over_served_gpu_ms: 0,
            missed_over_served_gpu_ms: 0,
        }
    }

    fn waits(sorted_ms: &[i64], unstarted: u64) -> Waits {
        Waits {
            sorted_ms: sorted_ms.to_vec(),
            unstarted,
        }
    }

    fn hours(used_pct: &[u128]) -> Vec<HourPoint> {
        (0u64..)
            .zip(used_pct)
            .map(|(hour, pct)| HourPoint {
                hour,
                used_gpu_ms: 16 * H * pct / 100,
                capacity_gpu_ms: 16 * H,
            })
            .collect()
    }

    /// Two policies over three allocations: "lab/<tiny>" is owed under a GPU-day; fairshare
    /// delivers 990 of 1000 owed GPU-hours, its worst big allocation is "lab/c" (388/390);
    /// fifo's is "lab/a&b" (540/600).
    pub(crate) fn report() -> Report {
        let fairshare = RunMetrics {
            policy: "fairshare".to_owned(),
            allocations: vec![
                alloc("lab/<tiny>", 10_000, 10, 5),
                alloc("lab/a&b", 500_000, 600, 597),
                alloc("lab/c", 490_000, 390, 388),
            ],
            owed_gpu_ms: 1000 * H,
            delivered_owed_gpu_ms: 990 * H,
            owed_over_served_gpu_ms: 100 * H,
            missed_over_served_gpu_ms: 6 * H,
            used_gpu_ms: 1100 * H,
            available_gpu_ms: 1200 * H,
            contention_used_gpu_ms: 980 * H,
            contention_available_gpu_ms: 1000 * H,
            unallocated_gpu_ms: 50 * H,
            idle_while_waiting_gpu_ms: 3 * H / 2,
            idle_under_contention: IdleUnderContention {
                awaiting_start_gpu_ms: H,
                waiting_job_fits_gpu_ms: 2 * H,
                victims_stopping_gpu_ms: 5 * H,
                fits_without_unallocated_gpu_ms: 3 * H,
                fits_without_past_minimum_gpu_ms: 4 * H,
                nothing_fits_gpu_ms: 10 * H,
            },
            debug_waits: waits(
                &[
                    0, 5_000, 10_000, 12_000, 15_000, 20_000, 25_000, 28_000, 29_000, 3_600_000,
                ],
                0,
            ),
            allocated_waits: waits(&[60_000, 720_000], 1),
            unallocated_waits: Waits::default(),
            preemptions: 7,
            preempted: 6,
            lost_gpu_ms: 11 * H,
            by_cause: vec![
                CausePreemptions {
                    cause: PreemptionCause::Unallocated,
                    orders: 3,
                    stopped: 3,
                    lost_gpu_ms: 2 * H,
                },
                CausePreemptions {
                    cause: PreemptionCause::ShareFloor,
                    orders: 4,
                    stopped: 3,
                    lost_gpu_ms: 9 * H,
                },
            ],
            violations: 0,
            jobs_submitted: 120,
            jobs_finished: 110,
            events: 1000,
            hourly: hours(&[50, 100, 100, 97]),
        };
        let fifo = RunMetrics {
            policy: "fifo".to_owned(),
            allocations: vec![
                alloc("lab/<tiny>", 10_000, 10, 10),
                alloc("lab/a&b", 500_000, 600, 540),
                alloc("lab/c", 490_000, 400, 396),
            ],
            owed_gpu_ms: 1010 * H,
            delivered_owed_gpu_ms: 946 * H,
            owed_over_served_gpu_ms: 200 * H,
            missed_over_served_gpu_ms: 16 * H,
            used_gpu_ms: 1000 * H,
            available_gpu_ms: 1200 * H,
            contention_used_gpu_ms: 900 * H,
            contention_available_gpu_ms: 1000 * H,
            unallocated_gpu_ms: 0,
            idle_while_waiting_gpu_ms: 40 * H,
            idle_under_contention: IdleUnderContention::default(),
            debug_waits: waits(&[40_000], 0),
            allocated_waits: Waits::default(),
            unallocated_waits: waits(&[2 * 86_400_000], 0),
            preemptions: 0,
            preempted: 0,
            lost_gpu_ms: 0,
            by_cause: Vec::new(),
            violations: 2,
            jobs_submitted: 120,
            jobs_finished: 100,
            events: 900,
            hourly: hours(&[40, 80, 90, 90]),
        };
        Report {
            inputs: ReportInputs {
                title: "unit | test".to_owned(),
                workload: "hand-built".to_owned(),
                rules: vec!["debug: gpus <= 2".to_owned(), "rest: lab/c".to_owned()],
                gpus: 16,
                nodes: 2,
                span_ms: 4 * 3_600_000,
                jobs: 120,
                refused: 3,
                oversubscription: 2.5,
                oversubscription_whole: 2.5,
                oversized_share: 0.125,
                oversized_by_allocation: [("lab/c".to_owned(), 0.25)].into_iter().collect(),
                window_ms: 7 * 86_400_000,
                grace_ms: 30_000,
                settings: vec!["hysteresis: 10.0%".to_owned()],
            },
            runs: vec![fairshare, fifo],
            spread: None,
        }
    }
}
