//! The report's text: inputs, one row per policy (delivery, where owed time was missed, where
//! idle GPUs went under contention, waits), the SPEC targets and a per-allocation table.
//!
//! Place in the flow: [`report::write`](super::write()) calls [`render`] with the measured runs
//! and the chart files it writes beside `report.md`. Every figure is formatted from integers
//! (no float formatting) and every list is iterated in a fixed order, so equal inputs give
//! byte-identical text.

use std::fmt::Write as _;

use super::{
    MIN_OWED_GPU_MS, Report, allocation_rows, at_least, fixed, gpu_hours_text, human_duration, pct,
};
use crate::metrics::{AllocationMetrics, Percentiles, RunMetrics, Waits};
use crate::replicas::{Range, Spread};

/// Renders the whole report as markdown; `charts` are (file name, caption) of the SVGs to link.
pub fn render(report: &Report, charts: &[(&str, &str)]) -> String {
    let mut out = String::new();
    out.push_str(&format!("# {}\n\n", escape(&report.inputs.title)));
    inputs_section(&mut out, report);
    if report.runs.is_empty() {
        out.push_str("No policy was run.\n");
        return out;
    }
    delivery_table(&mut out, &report.runs);
    missed_table(&mut out, &report.runs, report.inputs.window_ms);
    idle_table(&mut out, &report.runs);
    waits_table(&mut out, &report.runs);
    if let Some(spread) = &report.spread {
        spread_table(&mut out, spread);
    }
    targets_section(&mut out, &report.runs[0]);
    allocation_table(
        &mut out,
        &report.runs,
        &report.inputs.oversized_by_allocation,
    );
    charts_section(&mut out, charts);
    out
}

fn inputs_section(out: &mut String, report: &Report) {
    let i = &report.inputs;
    let span_ms = u128::try_from(i.span_ms).unwrap_or(0);
    out.push_str("## Inputs\n\n");
    let _ = writeln!(out, "- Workload: {}", escape(&i.workload));
    let _ = writeln!(out, "- Cluster: {} GPUs on {} nodes", i.gpus, i.nodes);
    // Days to a tenth; a run under a day (whole hours) in hours, not "0.0 days".
    if span_ms < 86_400_000 {
        let _ = writeln!(out, "- Span: {} hours", fixed(span_ms, 3_600_000, 1));
    } else {
        let _ = writeln!(out, "- Span: {} days", fixed(span_ms, 86_400_000, 1));
    }
    let _ = writeln!(out, "- Jobs: {}", i.jobs);
    if i.refused > 0 {
        let _ = writeln!(
            out,
            "- Of those, jobs the submission checks refuse (of no allocation in the tree, or \
             of GPUs no shape on the nodes holds): {}; no policy runs them, and they count only \
             in the job count, the oversubscription and the shares of oversized work",
            i.refused
        );
    }
    let whole = if (i.oversubscription_whole - i.oversubscription).abs() >= 0.005 {
        format!(
            "; {:.2}x counting every job's whole run, past the run's end too",
            i.oversubscription_whole
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "- Oversubscription: {:.2}x (GPU time the jobs could run before the run ends, each from \
         its submission, over GPU time the cluster offers{whole})",
        i.oversubscription
    );
    let _ = writeln!(
        out,
        "- Allocated GPU time in jobs bigger than their allocation's share of the cluster: \
         {:.1}% (while one runs, its allocation gets more than it is owed that hour and others \
         less)",
        i.oversized_share * 100.0
    );
    let _ = writeln!(out, "- Fair-share window: {}", human_duration(i.window_ms));
    let _ = writeln!(out, "- Grace period: {}", human_duration(i.grace_ms));
    // Settings of a policy that did not run would read as if they shaped these figures.
    let fairshare_ran = report
        .runs
        .iter()
        .any(|r| r.policy == crate::simulate::Policy::Fairshare.name());
    if fairshare_ran && !i.settings.is_empty() {
        out.push_str("- fairshare's settings (the baselines use none of them):\n");
        for setting in &i.settings {
            let _ = writeln!(out, "  - {}", escape(setting));
        }
    }
    if report.runs.iter().any(|r| {
        crate::baseline::Baseline::ALL
            .iter()
            .any(|b| b.name() == r.policy)
    }) {
        out.push_str(BASELINES);
    }
    if i.rules.is_empty() {
        out.push_str("- Mapping rules: none\n");
    } else {
        out.push_str("- Mapping rules:\n");
        for rule in &i.rules {
            let _ = writeln!(out, "  - {}", code_span(rule));
        }
    }
    out.push('\n');
}

fn delivery_table(out: &mut String, runs: &[RunMetrics]) {
    out.push_str("## Delivery and use\n\n");
    table_head(
        out,
        &[
            "Policy",
            "Owed delivered",
            "Worst allocation (owed >= 1 GPU-day)",
            "Allocations >= 95%",
            "Occupancy under contention",
            "Unallocated share of delivered",
            "GPU-h idle while work waited",
            "Jobs finished / submitted",
        ],
    );
    for run in runs {
        let (met, held) = allocations_meeting(run);
        table_row(
            out,
            &[
                escape(&run.policy),
                percent_cell(run.delivered_owed_gpu_ms, run.owed_gpu_ms, 2),
                worst_cell(run),
                format!("{met}/{held}"),
                percent_cell(
                    run.contention_used_gpu_ms,
                    run.contention_available_gpu_ms,
                    1,
                ),
                percent_cell(run.unallocated_gpu_ms, run.used_gpu_ms, 1),
                gpu_hours_text(run.idle_while_waiting_gpu_ms),
                format!("{} / {}", run.jobs_finished, run.jobs_submitted),
            ],
        );
    }
    out.push_str(
        "\nOwed delivered: sum over allocations and hours of min(delivered, owed) over the sum of \
         owed, where owed = min(fraction x capacity, demand). Occupancy counts only time when \
         queued work exceeded idle GPUs.\n\n",
    );
    out.push_str(READINGS);
}

/// What the baselines do, for a report that has any.
const BASELINES: &str = "\
- Baselines (no preemption; EASY backfill: the first allocated job of a pass that the policy \
  admits but the nodes do not hold keeps what running jobs free for it soonest, planned with \
  their real run times, and others start only if they end by then or leave it that; \
  unallocated work runs as scavenger work, after every allocated job of a pass, outside \
  quotas, charging no usage, never reserved for):
  - fifo: one queue by declared priority, then submit time;
  - static-quotas: each allocation runs at most its fraction of the open GPUs; jobs go by \
    priority, then submit time, across allocations; idle quota is not lent, and a job larger \
    than its quota never starts;
  - decayed-fair-share: Slurm's classic fair-share factor 2^(-effective usage / share), \
    effective usage taken down the tree, usage decayed with a 7-day half-life.
";

/// How this report reads SPEC section 6 where it leaves room.
const READINGS: &str = "Readings of SPEC section 6: capacity in owed time is every registered \
     GPU, cordoned ones too (an allocation is owed its fraction of the cluster it was given), \
     while occupancy counts only GPUs of open nodes; a debug job is allocated work of at most 2 \
     GPUs with a minimum runtime of at most 15 min (\"a few GPUs\"); lost work is divided by \
     all delivered GPU time, unallocated work's included.\n\n";

fn missed_table(out: &mut String, runs: &[RunMetrics], window_ms: i64) {
    out.push_str("## Owed time missed\n\n");
    table_head(
        out,
        &[
            "Policy",
            "Owed GPU-h missed",
            "of which the allocation had used its allocation over the window",
            "of which it had not",
            "Owed delivered in hours below its window allocation",
            "GPU-h delivered beyond owed",
        ],
    );
    for run in runs {
        let missed = run.missed_gpu_ms();
        let over = run.missed_over_served_gpu_ms.min(missed);
        let beyond: u128 = run
            .allocations
            .iter()
            .map(|a| a.delivered_gpu_ms.saturating_sub(a.delivered_owed_gpu_ms))
            .sum();
        table_row(
            out,
            &[
                escape(&run.policy),
                gpu_hours_text(missed),
                format!(
                    "{} ({})",
                    gpu_hours_text(over),
                    percent_cell(over, missed, 1)
                ),
                gpu_hours_text(missed - over),
                {
                    let owed = run.owed_gpu_ms.saturating_sub(run.owed_over_served_gpu_ms);
                    percent_cell(owed.saturating_sub(missed - over), owed, 2)
                },
                gpu_hours_text(beyond),
            ],
        );
    }
    let _ = writeln!(
        out,
        "\nAn hour's missed owed time counts as \"used its allocation\" when the hour began with \
         the allocation's charged usage over the last {} at or above its allocated time there \
         (window ratio >= 1). A policy that ranks by the window lets the others go first then, \
         while the hourly metric still owes the allocation its fraction: that part is earlier \
         use being paid back. Delivered beyond owed: GPU time allocations ran above their hourly \
         owed (jobs bigger than the hourly share, or GPUs nobody else asked for).\n",
        human_duration(window_ms)
    );
}

fn idle_table(out: &mut String, runs: &[RunMetrics]) {
    out.push_str("## Idle GPUs under contention\n\n");
    table_head(
        out,
        &[
            "Policy",
            "Idle GPU-h",
            "awaiting the launcher's start",
            "a waiting job fitted",
            "victims still stopping",
            "fits once unallocated work leaves",
            "fits once work past its minimum runtime leaves",
            "nothing waiting fits",
        ],
    );
    for run in runs {
        let split = &run.idle_under_contention;
        let of_time = |gpu_ms: u128| {
            format!(
                "{} ({})",
                gpu_hours_text(gpu_ms),
                percent_cell(gpu_ms, run.contention_available_gpu_ms, 2)
            )
        };
        table_row(
            out,
            &[
                escape(&run.policy),
                of_time(split.total()),
                of_time(split.awaiting_start_gpu_ms),
                of_time(split.waiting_job_fits_gpu_ms),
                of_time(split.victims_stopping_gpu_ms),
                of_time(split.fits_without_unallocated_gpu_ms),
                of_time(split.fits_without_past_minimum_gpu_ms),
                of_time(split.nothing_fits_gpu_ms),
            ],
        );
    }
    out.push_str(
        "\nThe occupancy shortfall, node by node: each idle GPU of an open node, while queued work \
         exceeded idle GPUs, is filed under the first cause that held. Percentages are of the GPU \
         time available then, so with occupancy they add up to 100%. \"A waiting job fitted\": \
         the scheduler left usable GPUs idle (a reservation, the next cycle, or for static \
         quotas a quota). \"Victims still stopping\": the smallest waiting allocated job fits once \
         the jobs already ordered off the node stop. \"Fits once ... leaves\": it would fit had \
         that work gone too; under fairshare unallocated work may always be preempted, work past \
         its minimum runtime only for a better-ranked waiter (the baselines preempt nothing: for \
         them this names what holds the GPUs). \"Nothing waiting fits\": protected work holds the \
         rest of the node, or every waiting job is bigger (fragmentation).\n\n",
    );
}

fn spread_table(out: &mut String, spread: &Spread) {
    out.push_str("## Spread over replicas\n\n");
    table_head(
        out,
        &[
            "Policy",
            "Owed delivered",
            "Worst allocation",
            "Occupancy under contention",
            "Lost work",
        ],
    );
    let cell = |r: &Range, decimals: u32| {
        format!(
            "{} / {} / {}",
            percent_cell(r.min.0, r.min.1, decimals),
            percent_cell(r.median.0, r.median.1, decimals),
            percent_cell(r.max.0, r.max.1, decimals)
        )
    };
    for row in &spread.rows {
        table_row(
            out,
            &[
                escape(&row.policy),
                cell(&row.owed, 2),
                cell(&row.worst, 2),
                cell(&row.occupancy, 1),
                cell(&row.lost, 2),
            ],
        );
    }
    let _ = writeln!(
        out,
        "\nLowest / median / highest over {} runs of each policy: the run above, and in each \
         other run the same jobs arriving up to {} earlier or later (by a hash of the job and \
         the run). A difference between policies or settings inside these ranges is noise.{}\n",
        spread.replicas,
        human_duration(spread.jitter_ms),
        if spread.allocations.is_empty() {
            ""
        } else {
            " The worst allocation need not be the same one in every run: the table below gives \
             each allocation's own range, for the first policy."
        }
    );
    allocation_spread_table(out, spread);
}

/// Each allocation's figures over the replicas, for the first policy: what a budget change is
/// judged by, beside its noise.
fn allocation_spread_table(out: &mut String, spread: &Spread) {
    let (Some(first), false) = (spread.rows.first(), spread.allocations.is_empty()) else {
        return;
    };
    let _ = writeln!(
        out,
        "### Per allocation over the replicas ({})\n",
        escape(&first.policy)
    );
    table_head(out, &["Allocation", "Delivered / owed", "Delivered GPU-h"]);
    for a in &spread.allocations {
        // (The range holds GPU-ms over one hour's ms: its numerator is the GPU-ms.)
        let hours = |s: (u128, u128)| gpu_hours_text(s.0);
        table_row(
            out,
            &[
                escape(&a.path),
                format!(
                    "{} / {} / {}",
                    percent_cell(a.owed.min.0, a.owed.min.1, 2),
                    percent_cell(a.owed.median.0, a.owed.median.1, 2),
                    percent_cell(a.owed.max.0, a.owed.max.1, 2)
                ),
                format!(
                    "{} / {} / {}",
                    hours(a.delivered_gpu_h.min),
                    hours(a.delivered_gpu_h.median),
                    hours(a.delivered_gpu_h.max)
                ),
            ],
        );
    }
    out.push_str(
        "\nLowest / median / highest over the same runs. Two budgets compared on the same work \
         (`--write-tenant-map`, then `--tenant-map`): a change helped an allocation if its \
         ranges moved apart.\n\n",
    );
}

fn waits_table(out: &mut String, runs: &[RunMetrics]) {
    out.push_str("## Waits and preemption\n\n");
    table_head(
        out,
        &[
            "Policy",
            "Debug wait p50 / p90 / p99",
            "Other allocated wait p50 / p90 / p99",
            "Unallocated wait p50 / p90 / p99",
            "Preemptions (jobs stopped)",
            "Lost GPU-h (% of delivered)",
            "Min-runtime violations",
        ],
    );
    for run in runs {
        let lost = percent_cell(run.lost_gpu_ms, run.used_gpu_ms, 2);
        table_row(
            out,
            &[
                escape(&run.policy),
                waits_cell(&run.debug_waits),
                waits_cell(&run.allocated_waits),
                waits_cell(&run.unallocated_waits),
                format!("{} ({})", run.preemptions, run.preempted),
                format!("{} ({lost})", gpu_hours_text(run.lost_gpu_ms)),
                run.violations.to_string(),
            ],
        );
    }
    out.push_str(
        "\nWaits run from submission to first start; a job never started counts with the wait \
         it had at the end and is counted as unstarted.\n\n",
    );
    cause_table(out, runs);
}

/// Which rules ordered work off and what each cost, for the runs that preempted at all.
fn cause_table(out: &mut String, runs: &[RunMetrics]) {
    if runs.iter().all(|r| r.by_cause.is_empty()) {
        return;
    }
    table_head(
        out,
        &[
            "Policy",
            "Preemption cause",
            "Orders",
            "Jobs stopped",
            "Lost GPU-h",
            "Share of lost work",
        ],
    );
    for run in runs {
        for c in &run.by_cause {
            table_row(
                out,
                &[
                    escape(&run.policy),
                    c.cause.label().to_owned(),
                    c.orders.to_string(),
                    c.stopped.to_string(),
                    gpu_hours_text(c.lost_gpu_ms),
                    percent_cell(c.lost_gpu_ms, run.lost_gpu_ms, 1),
                ],
            );
        }
    }
    out.push_str(
        "\nBy the `cause` each `PreemptionOrdered` carries; a stop is filed under its job's \
         latest order. Unallocated: the victim had minimum runtime 0. Window: its allocation \
         ranked below the waiter's once the waiter was charged. Share floor: the waiter's \
         allocation held fewer GPUs than its floor. Debug allowance: for a debug job under its \
         allocation's allowance. Packing: moved so a waiter fits on one node. Maintenance: its \
         node was cordoned or due for maintenance.\n\n",
    );
}

/// One SPEC target: what it asks, the run's figure, and whether the figure meets it (`None`
/// when there is nothing to judge, e.g. no debug jobs).
struct Target {
    goal: &'static str,
    value: String,
    met: Option<bool>,
}

/// Most decimals a target's percentage is printed with to tell it from its limit.
const MAX_TARGET_DECIMALS: u32 = 6;

/// The SPEC's debug p90 wait limit.
const DEBUG_P90_TARGET_MS: i64 = 30_000;

impl Target {
    /// A target on the percentage `num / den` (`decimals` as the other tables print it) against
    /// the limit `limit_num / limit_den`. A missed target is printed with more decimals while
    /// its figure would otherwise read as the limit itself (99.496% as "99.50%" beside "no").
    fn percent(
        goal: &'static str,
        (num, den, decimals): (u128, u128, u32),
        (limit_num, limit_den): (u128, u128),
        met: Option<bool>,
    ) -> Target {
        let mut d = decimals;
        while met == Some(false)
            && d < MAX_TARGET_DECIMALS
            && percent_cell(num, den, d) == percent_cell(limit_num, limit_den, d)
        {
            d += 1;
        }
        Target {
            goal,
            value: percent_cell(num, den, d),
            met,
        }
    }
}

/// The debug p90 as the wait tables print it, or to the millisecond when that would read as
/// the 30 s limit while missing it (30.4 s prints "30 s").
fn debug_p90_cell(p90_ms: i64) -> String {
    let cell = human_duration(p90_ms);
    if p90_ms > DEBUG_P90_TARGET_MS && cell == human_duration(DEBUG_P90_TARGET_MS) {
        let ms = u128::try_from(p90_ms).unwrap_or(0);
        format!("{} s", fixed(ms, 1_000, 3))
    } else {
        cell
    }
}

fn targets_section(out: &mut String, run: &RunMetrics) {
    out.push_str("## Targets\n\n");
    out.push_str(
        "SPEC section 6 asks for: owed delivered >= 99.5% overall; every allocation owed >= 1 \
         GPU-day >= 95%; occupancy under contention >= 98%; debug p90 wait <= 30 s; lost work \
         <= 1% of delivered; 0 min-runtime violations.\n\n",
    );
    let _ = writeln!(out, "Checked for {}:\n", escape(&run.policy));
    table_head(out, &["Target", "Figure", "Met"]);
    for t in targets(run) {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "n/a",
        };
        table_row(out, &[t.goal.to_owned(), t.value, met.to_owned()]);
    }
    out.push('\n');
}

fn targets(run: &RunMetrics) -> Vec<Target> {
    let (met, held) = allocations_meeting(run);
    let debug = Percentiles::of(&run.debug_waits.sorted_ms);
    vec![
        Target::percent(
            "owed delivered >= 99.5% overall",
            (run.delivered_owed_gpu_ms, run.owed_gpu_ms, 2),
            (995, 1000),
            (run.owed_gpu_ms > 0)
                .then(|| at_least(run.delivered_owed_gpu_ms, run.owed_gpu_ms, 995, 1000)),
        ),
        Target {
            goal: "every allocation owed >= 1 GPU-day >= 95%",
            value: format!("{met}/{held}"),
            met: (held > 0).then_some(met == held),
        },
        Target::percent(
            "occupancy under contention >= 98%",
            (
                run.contention_used_gpu_ms,
                run.contention_available_gpu_ms,
                1,
            ),
            (98, 100),
            (run.contention_available_gpu_ms > 0).then(|| {
                at_least(
                    run.contention_used_gpu_ms,
                    run.contention_available_gpu_ms,
                    98,
                    100,
                )
            }),
        ),
        Target {
            goal: "debug p90 wait <= 30 s",
            value: debug.map_or_else(|| "-".to_owned(), |p| debug_p90_cell(p.p90)),
            met: debug.map(|p| p.p90 <= DEBUG_P90_TARGET_MS),
        },
        Target::percent(
            "lost work <= 1% of delivered",
            (run.lost_gpu_ms, run.used_gpu_ms, 2),
            (1, 100),
            // Nothing delivered and nothing lost meets it; anything lost out of nothing does not.
            Some(run.lost_gpu_ms.saturating_mul(100) <= run.used_gpu_ms),
        ),
        Target {
            goal: "0 min-runtime violations",
            value: run.violations.to_string(),
            met: Some(run.violations == 0),
        },
    ]
}

fn allocation_table(
    out: &mut String,
    runs: &[RunMetrics],
    oversized: &std::collections::BTreeMap<String, f64>,
) {
    let rows = allocation_rows(runs);
    out.push_str("## Per allocation\n\n");
    if rows.is_empty() {
        out.push_str("No allocations.\n\n");
        return;
    }
    let mut head = vec![
        "Allocation".to_owned(),
        "Fraction".to_owned(),
        "In jobs over its share".to_owned(),
        format!("Owed GPU-h ({})", escape(&runs[0].policy)),
        format!("Delivered GPU-h ({})", escape(&runs[0].policy)),
    ];
    head.extend(
        runs.iter()
            .map(|r| format!("{} delivered / owed", escape(&r.policy))),
    );
    table_head(out, &head.iter().map(String::as_str).collect::<Vec<_>>());
    for (path, cells) in &rows {
        let any = cells.iter().flatten().next();
        let mut row = vec![
            escape(path),
            any.map_or_else(
                || "-".to_owned(),
                |a| format!("{}%", fixed(u128::from(a.fraction_ppm), 10_000, 2)),
            ),
            oversized
                .get(*path)
                .map_or_else(|| "-".to_owned(), |share| format!("{:.1}%", share * 100.0)),
            cells[0].map_or_else(|| "-".to_owned(), |a| gpu_hours_text(a.owed_gpu_ms)),
            cells[0].map_or_else(|| "-".to_owned(), |a| gpu_hours_text(a.delivered_gpu_ms)),
        ];
        row.extend(
            cells
                .iter()
                .map(|c| c.map_or_else(|| "-".to_owned(), allocation_cell)),
        );
        table_row(out, &row);
    }
    out.push_str(
        "\nEach policy's share is of its own owed time: owed follows demand, and demand follows \
         how long each policy keeps work queued. Bold: under 95% while owed at least a GPU-day. \
         \\*: owed under one GPU-day in that run, reported but not held to the target. Fraction: in \
         the budget tree in force at the end. \"In jobs over its share\": the allocation's GPU \
         time in jobs of more GPUs than its fraction of the cluster in the tree in force when each \
         was submitted; while one runs the allocation gets more than its hourly owed time, while it \
         waits less, under any policy. Delivered GPU-h: all the allocated GPU time it ran, owed \
         or beyond, which says how much more or less a budget change gives it.\n\n",
    );
}

fn charts_section(out: &mut String, charts: &[(&str, &str)]) {
    if charts.is_empty() {
        return;
    }
    out.push_str("## Charts\n\n");
    for (file, caption) in charts {
        let _ = writeln!(out, "![{}]({})\n", escape(caption), link_target(file));
    }
}

/// Delivered share of owed for one allocation in one run: bold when it misses the 95% target,
/// starred when the allocation is too small to be held to it.
fn allocation_cell(a: &AllocationMetrics) -> String {
    let Some(share) = pct(a.delivered_owed_gpu_ms, a.owed_gpu_ms, 2) else {
        return "-".to_owned();
    };
    if a.owed_gpu_ms < MIN_OWED_GPU_MS {
        format!("{share}% \\*")
    } else if at_least(a.delivered_owed_gpu_ms, a.owed_gpu_ms, 95, 100) {
        format!("{share}%")
    } else {
        format!("**{share}%**")
    }
}

/// Of the allocations owed at least a GPU-day, how many got at least 95% of it, and how many
/// there are.
fn allocations_meeting(run: &RunMetrics) -> (usize, usize) {
    let held: Vec<_> = run
        .allocations
        .iter()
        .filter(|a| a.owed_gpu_ms >= MIN_OWED_GPU_MS)
        .collect();
    let met = held
        .iter()
        .filter(|a| at_least(a.delivered_owed_gpu_ms, a.owed_gpu_ms, 95, 100))
        .count();
    (met, held.len())
}

fn worst_cell(run: &RunMetrics) -> String {
    match run.worst_allocation(MIN_OWED_GPU_MS) {
        Some((a, _)) => format!(
            "{} {}",
            escape(&a.path),
            percent_cell(a.delivered_owed_gpu_ms, a.owed_gpu_ms, 2)
        ),
        None => "-".to_owned(),
    }
}

/// "15 s / 29 s / 1.0 h", "-" for an empty class, and the unstarted count when there is one.
fn waits_cell(w: &Waits) -> String {
    let Some(p) = Percentiles::of(&w.sorted_ms) else {
        return "-".to_owned();
    };
    let mut cell = format!(
        "{} / {} / {}",
        human_duration(p.p50),
        human_duration(p.p90),
        human_duration(p.p99)
    );
    if w.unstarted > 0 {
        let _ = write!(cell, " ({} unstarted)", w.unstarted);
    }
    cell
}

fn percent_cell(num: u128, den: u128, decimals: u32) -> String {
    pct(num, den, decimals).map_or_else(|| "-".to_owned(), |p| format!("{p}%"))
}

fn table_head(out: &mut String, head: &[&str]) {
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(head.len()));
}

fn table_row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

/// Makes names safe in markdown text and table cells: a `|` would split a cell, `<` could open
/// HTML, `*`, `_` and backticks could start emphasis or code, `&` an entity.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '|' | '*' | '_' | '`' | '[' | ']' | '&' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// Text as a markdown code span, shown literally: mapping rules are full of `<=` and `*`
/// that escaping would make unreadable in the raw file.
fn code_span(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    // The fence must be longer than any run of backticks inside.
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    // A space keeps a backtick at either end from merging with the fence (CommonMark strips one).
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A file name as a link target: the characters that would end or break the link are
/// percent-encoded.
fn link_target(file: &str) -> String {
    let mut out = String::with_capacity(file.len());
    for c in file.chars() {
        match c {
            ' ' => out.push_str("%20"),
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{CHARTS, sample};
    use super::*;

    fn rendered() -> String {
        render(&sample::report(), &CHARTS)
    }

    /// The table row of `policy` in the section titled `section`.
    fn row<'a>(md: &'a str, section: &str, policy: &str) -> &'a str {
        let start = md.find(section).expect("section present");
        md[start..]
            .lines()
            .find(|l| l.starts_with(&format!("| {policy} |")))
            .expect("policy row present")
    }

    #[test]
    fn main_tables_carry_the_computed_figures() {
        let md = rendered();
        let fs = row(&md, "## Delivery and use", "fairshare");
        assert!(fs.contains("| 99.00% |"), "{fs}");
        // The tiny allocation (5/10, owed under a GPU-day) must not be the worst one.
        assert!(fs.contains("lab/c 99.49%"), "{fs}");
        assert!(fs.contains("| 2/2 |"), "{fs}");
        assert!(fs.contains("| 98.0% |"), "{fs}");
        assert!(fs.contains("| 4.5% |"), "{fs}");
        assert!(fs.contains("| 1.5 |"), "{fs}");
        assert!(fs.contains("| 110 / 120 |"), "{fs}");
        let fifo = row(&md, "## Delivery and use", "fifo");
        assert!(fifo.contains("| 93.66% |"), "{fifo}");
        assert!(fifo.contains("lab/a\\&b 90.00%"), "{fifo}");
        assert!(fifo.contains("| 1/2 |"), "{fifo}");
        assert!(fifo.contains("| 0.0% |"), "{fifo}");
    }

    #[test]
    fn missed_owed_time_is_split_by_what_the_window_said() {
        let md = rendered();
        // fairshare: 1000 owed, 990 delivered: 10 missed, 6 of them while over-served; every
        // allocation ran 5 GPU-h beyond its owed time.
        let fs = row(&md, "## Owed time missed", "fairshare");
        // Hours below the window allocation: 900 owed, 4 missed.
        assert!(
            fs.contains("| 10.0 | 6.0 (60.0%) | 4.0 | 99.56% | 15.0 |"),
            "{fs}"
        );
        let fifo = row(&md, "## Owed time missed", "fifo");
        // 810 owed, 48 missed.
        assert!(
            fifo.contains("| 64.0 | 16.0 (25.0%) | 48.0 | 94.07% | 15.0 |"),
            "{fifo}"
        );
        assert!(md.contains("over the last 7.0 d at or above"));
        assert!(md.contains("share of the cluster: 12.5% (while"));
    }

    #[test]
    fn idle_gpus_are_split_by_cause_as_shares_of_the_contended_time() {
        let md = rendered();
        // fairshare: 1000 GPU-h available under contention, 25 idle: 1 + 2 + 5 + 3 + 4 + 10.
        let fs = row(&md, "## Idle GPUs under contention", "fairshare");
        assert!(
            fs.contains(
                "| 25.0 (2.50%) | 1.0 (0.10%) | 2.0 (0.20%) | 5.0 (0.50%) | 3.0 (0.30%) | 4.0 (0.40%) | 10.0 (1.00%) |"
            ),
            "{fs}"
        );
        // fifo filed nothing (a log without placements on nodes).
        let fifo = row(&md, "## Idle GPUs under contention", "fifo");
        assert!(fifo.contains("| 0.0 (0.00%) | 0.0 (0.00%) |"), "{fifo}");
    }

    #[test]
    fn the_spread_over_replicas_is_printed_only_when_replicas_ran() {
        assert!(!rendered().contains("## Spread over replicas"));
        let mut report = sample::report();
        let mut nudged = report.runs.clone();
        nudged[0].delivered_owed_gpu_ms = 950 * 3_600_000;
        nudged[0].lost_gpu_ms = 0;
        report.spread =
            crate::replicas::spread(&[report.runs.clone(), nudged], 60_000, MIN_OWED_GPU_MS);
        let md = render(&report, &CHARTS);
        let fs = row(&md, "## Spread over replicas", "fairshare");
        // Owed 950 or 990 of 1000 (median: the lower); lost 0 or 11 of 1100.
        assert!(fs.contains("| 95.00% / 95.00% / 99.00% |"), "{fs}");
        assert!(fs.contains("| 0.00% / 0.00% / 1.00% |"), "{fs}");
        assert!(md.contains("over 2 runs of each policy: the run above, and in each other"));
        assert!(md.contains("arriving up to 1 min earlier or later"));
        // Each of fairshare's allocations over the runs: lab/c delivered 388 of 390 owed
        // GPU-h and 393 in all in both runs (the nudged run changed only the overall owed).
        let per = &md[md
            .find("### Per allocation over the replicas (fairshare)")
            .expect("table")..];
        let c = per
            .lines()
            .find(|l| l.starts_with("| lab/c |"))
            .expect("lab/c");
        assert_eq!(
            c,
            "| lab/c | 99.49% / 99.49% / 99.49% | 393.0 / 393.0 / 393.0 |"
        );
    }

    #[test]
    fn waits_are_human_with_dashes_and_unstarted() {
        let md = rendered();
        let fs = row(&md, "## Waits and preemption", "fairshare");
        assert!(fs.contains("| 15 s / 29 s / 1.0 h |"), "{fs}");
        assert!(
            fs.contains("| 1 min / 12 min / 12 min (1 unstarted) |"),
            "{fs}"
        );
        assert!(fs.contains("| - |"), "empty unallocated class: {fs}");
        assert!(fs.contains("| 7 (6) |"), "{fs}");
        assert!(fs.contains("| 11.0 (1.00%) |"), "{fs}");
        // Preemptions by cause: fairshare's two causes, fifo (which never preempted) absent.
        let causes = &md[md.find("| Policy | Preemption cause").expect("cause table")..];
        let causes = &causes[..causes.find("\n\n").expect("table ends")];
        assert!(
            causes.contains("| fairshare | unallocated | 3 | 3 | 2.0 | 18.2% |"),
            "{causes}"
        );
        assert!(
            causes.contains("| fairshare | share floor | 4 | 3 | 9.0 | 81.8% |"),
            "{causes}"
        );
        assert!(!causes.contains("| fifo |"), "{causes}");
        let fifo = row(&md, "## Waits and preemption", "fifo");
        assert!(
            fifo.contains("| 40 s / 40 s / 40 s | - | 2.0 d / 2.0 d / 2.0 d |"),
            "{fifo}"
        );
        assert!(fifo.ends_with("| 2 |"), "{fifo}");
    }

    #[test]
    fn targets_are_judged_exactly_for_the_first_run() {
        let md = rendered();
        let section = &md[md.find("## Targets").expect("targets")..];
        assert!(section.contains("Checked for fairshare"));
        assert!(section.contains("| owed delivered >= 99.5% overall | 99.00% | **no** |"));
        assert!(section.contains("| every allocation owed >= 1 GPU-day >= 95% | 2/2 | yes |"));
        assert!(section.contains("| occupancy under contention >= 98% | 98.0% | yes |"));
        assert!(section.contains("| debug p90 wait <= 30 s | 29 s | yes |"));
        // 11 of 1100 GPU-h is exactly 1%: met.
        assert!(section.contains("| lost work <= 1% of delivered | 1.00% | yes |"));
        assert!(section.contains("| 0 min-runtime violations | 0 | yes |"));
    }

    #[test]
    fn a_missed_target_never_reads_as_its_limit() {
        let mut report = sample::report();
        let run = &mut report.runs[0];
        // 99.496% owed, 1.004% lost, a p90 of 30.4 s: each rounds to its limit at the tables'
        // precision, and each misses.
        run.owed_gpu_ms = 1_000_000;
        run.delivered_owed_gpu_ms = 994_960;
        run.used_gpu_ms = 1_000_000;
        run.lost_gpu_ms = 10_040;
        let mut waits = vec![0; 9];
        waits.push(30_400);
        waits.push(30_400);
        run.debug_waits.sorted_ms = waits;
        let md = render(&report, &CHARTS);
        let section = &md[md.find("## Targets").expect("targets")..];
        assert!(
            section.contains("| owed delivered >= 99.5% overall | 99.496% | **no** |"),
            "{section}"
        );
        assert!(
            section.contains("| lost work <= 1% of delivered | 1.004% | **no** |"),
            "{section}"
        );
        assert!(
            section.contains("| debug p90 wait <= 30 s | 30.400 s | **no** |"),
            "{section}"
        );
        // Met, or plainly missed, they print as before.
        targets_met_or_plainly_missed_print_as_before(&mut report);
    }

    /// Owed exactly at the limit and a p90 of 31 s print at the tables' precision.
    fn targets_met_or_plainly_missed_print_as_before(report: &mut crate::report::Report) {
        let run = &mut report.runs[0];
        run.delivered_owed_gpu_ms = 995_000;
        run.debug_waits.sorted_ms = vec![31_000; 10];
        let md = render(report, &CHARTS);
        let section = &md[md.find("## Targets").expect("targets")..];
        assert!(
            section.contains("| owed delivered >= 99.5% overall | 99.50% | yes |"),
            "{section}"
        );
        assert!(
            section.contains("| debug p90 wait <= 30 s | 31 s | **no** |"),
            "{section}"
        );
    }

    #[test]
    fn per_allocation_rows_mark_small_and_missed_allocations() {
        let md = rendered();
        let row = |start: &str| {
            md.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no row {start}"))
        };
        assert_eq!(
            row("| lab/&lt;tiny&gt; |"),
            // Delivered: 5 GPU-h of its owed time and 5 beyond it.
            "| lab/&lt;tiny&gt; | 1.00% | - | 10.0 | 10.0 | 50.00% \\* | 100.00% \\* |"
        );
        assert_eq!(
            row("| lab/a\\&b |"),
            "| lab/a\\&b | 50.00% | - | 600.0 | 602.0 | 99.50% | **90.00%** |"
        );
        // The share of its GPU time in jobs bigger than its share, where the workload has it.
        let c = row("| lab/c |");
        assert!(
            c.starts_with("| lab/c | 49.00% | 25.0% | 390.0 | 393.0 |"),
            "{c}"
        );
        let order: Vec<_> = ["| lab/&lt;tiny&gt; |", "| lab/a\\&b |", "| lab/c |"]
            .iter()
            .map(|r| md.find(r).expect("row"))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "path order");
    }

    #[test]
    fn inputs_title_and_charts() {
        let md = rendered();
        assert!(md.starts_with("# unit \\| test\n"));
        assert!(md.contains("- Cluster: 16 GPUs on 2 nodes\n"));
        assert!(md.contains("Readings of SPEC section 6: capacity in owed time"));
        assert!(md.contains("- Span: 4.0 hours\n"), "{md}");
        assert!(md.contains("- Oversubscription: 2.50x"));
        assert!(md.contains("the nodes holds): 3; no policy runs them"));
        assert!(md.contains("- Fair-share window: 7.0 d\n"));
        assert!(md.contains("- Grace period: 30 s\n"));
        assert!(md.contains(
            "- fairshare's settings (the baselines use none of them):\n  - hysteresis: 10.0%\n"
        ));
        assert!(md.contains("  - `debug: gpus <= 2`\n  - `rest: lab/c`\n"));
        assert_eq!(code_span("a `b` c"), "``a `b` c``");
        assert_eq!(code_span("`x`"), "`` `x` ``");
        assert!(md.contains("![Queue waits by job class](waits.svg)"));
        assert_eq!(link_target("a b(1).svg"), "a%20b%281%29.svg");
    }

    /// Without a fairshare run the inputs leave out fairshare's settings: no figure of the
    /// report comes from them.
    #[test]
    fn fairshares_settings_are_listed_only_when_it_ran() {
        let mut report = sample::report();
        report.runs.retain(|r| r.policy == "fifo");
        let md = render(&report, &CHARTS);
        assert!(!md.contains("fairshare's settings"), "{md}");
        assert!(!md.contains("hysteresis: 10.0%"), "{md}");
        assert!(md.contains("| fifo |"), "{md}");
    }

    #[test]
    fn rendering_is_deterministic() {
        assert_eq!(rendered(), rendered());
    }

    #[test]
    fn no_runs_still_renders_inputs() {
        let mut report = sample::report();
        report.runs.clear();
        let md = render(&report, &[]);
        assert!(md.contains("## Inputs"));
        assert!(md.contains("No policy was run."));
    }
}
