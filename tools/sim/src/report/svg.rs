//! The report's charts, as standalone SVG text written by hand (no plotting dependency).
//!
//! Place in the flow: [`report::write`](super::write()) saves each chart beside `report.md`,
//! which links them. Policies keep one colour each, in run order, across all charts. Every
//! coordinate is printed with one fixed decimal and every list is walked in a fixed order,
//! so equal inputs give byte-identical files.

use std::fmt::Write as _;

use super::{AllocationRow, MIN_OWED_GPU_MS, Report, allocation_rows, human_duration};
use crate::metrics::{AllocationMetrics, Percentiles, RunMetrics, Waits, percent};

/// Policy colours in run order (Okabe-Ito, distinguishable with the common colour-vision
/// deficiencies); a ninth policy reuses the first colour.
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#7F7F7F", "#000000",
];
const TARGET_COLOUR: &str = "#C00000";
const GRID_COLOUR: &str = "#DDDDDD";
const AXIS_COLOUR: &str = "#333333";
const MUTED_TEXT: &str = "#888888";
/// Rough width of one character of 12 px sans-serif text, to size margins and legends.
const CHAR_W: f64 = 7.0;

fn colour(run: usize) -> &'static str {
    PALETTE[run % PALETTE.len()]
}

/// A coordinate or size with one fixed decimal; `+ 0.0` folds -0.0 into 0.0 and non-finite
/// values (an empty range) fall back to 0 rather than printing "NaN".
fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{:.1}", v + 0.0)
    } else {
        "0.0".to_owned()
    }
}

/// Escapes text and attribute values for XML.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// An SVG document being written; `finish` closes it.
struct Canvas {
    out: String,
}

impl Canvas {
    fn new(width: f64, height: f64, title: &str) -> Canvas {
        let (w, h) = (num(width), num(height));
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n"
        );
        let _ = writeln!(out, "<rect width=\"{w}\" height=\"{h}\" fill=\"#FFFFFF\"/>");
        let mut canvas = Canvas { out };
        canvas.text(
            16.0,
            24.0,
            "start",
            "font-size=\"16\" font-weight=\"bold\"",
            title,
        );
        canvas
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
        let _ = writeln!(
            self.out,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {style}/>",
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    fn text(&mut self, x: f64, y: f64, anchor: &str, style: &str, content: &str) {
        let _ = writeln!(
            self.out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\" {style}>{}</text>",
            num(x),
            num(y),
            xml(content)
        );
    }

    /// Text turned by `degrees` around its anchor point (axis titles, crowded labels).
    fn turned_text(&mut self, (x, y): (f64, f64), degrees: i32, style: &str, content: &str) {
        let (x, y) = (num(x), num(y));
        let _ = writeln!(
            self.out,
            "<text x=\"{x}\" y=\"{y}\" text-anchor=\"end\" transform=\"rotate({degrees} {x} {y})\" \
             {style}>{}</text>",
            xml(content)
        );
    }

    fn open_group(&mut self, tooltip: &str) {
        let _ = writeln!(self.out, "<g>\n<title>{}</title>", xml(tooltip));
    }

    fn close_group(&mut self) {
        self.out.push_str("</g>\n");
    }

    /// One swatch and name per policy, left to right from `(x, y)`.
    fn legend(&mut self, x: f64, y: f64, runs: &[RunMetrics]) -> f64 {
        let mut at = x;
        self.out.push_str("<g>\n");
        for (i, run) in runs.iter().enumerate() {
            let _ = writeln!(
                self.out,
                "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
                num(at),
                num(y - 10.0),
                colour(i)
            );
            self.text(at + 16.0, y, "start", "", &run.policy);
            at += 30.0 + CHAR_W * run.policy.chars().count() as f64;
        }
        self.close_group();
        at
    }

    /// A message in place of a chart with nothing to draw.
    fn empty(mut self, message: &str) -> String {
        self.text(
            16.0,
            56.0,
            "start",
            &format!("fill=\"{MUTED_TEXT}\""),
            message,
        );
        self.finish()
    }
}

/// Where a value lands on a linear axis from `lo` (at `from`) to `hi` (at `to`).
fn scale(v: f64, (lo, hi): (f64, f64), (from, to): (f64, f64)) -> f64 {
    if hi <= lo {
        return from;
    }
    from + (v.clamp(lo, hi) - lo) / (hi - lo) * (to - from)
}

// ---------------------------------------------------------------------------------------------
// Delivered vs owed

/// The least height of a bar for an allocation that was owed something, in pixels.
const MIN_BAR_H: f64 = 2.0;

/// Bars per allocation: each policy's delivered share of owed, in per cent.
///
/// Grouped bars, one group per allocation in path order and one bar per policy, with the 95%
/// target as a dashed line. Allocations owed under one GPU-day are drawn lighter (reported, not
/// held to the target); one owed something and delivered (almost) none of it is a sliver. The
/// chart widens with the number of allocations and turns the labels, so 150 allocations stay
/// legible; each bar's tooltip gives the exact figures.
pub fn delivered_vs_owed(report: &Report) -> String {
    let runs = &report.runs;
    let rows = allocation_rows(runs);
    let title = "Delivered share of owed GPU time per allocation";
    if rows.is_empty() {
        return Canvas::new(640.0, 100.0, title).empty("No allocations to show.");
    }
    let layout = BarLayout::new(&rows, runs.len());
    let mut c = Canvas::new(layout.width, layout.height, title);
    c.legend(16.0, 48.0, runs);
    // On its own line under the legend: beside it, a wide legend pushed it off the chart.
    c.text(
        16.0,
        64.0,
        "start",
        &format!("fill=\"{MUTED_TEXT}\""),
        "lighter: owed under one GPU-day (not held to 95%); no bar: nothing owed; \
         a sliver: little or none of it delivered",
    );
    bar_axes(&mut c, &layout);
    for (g, (path, cells)) in rows.iter().enumerate() {
        bar_group(&mut c, &layout, g, path, cells, runs);
    }
    target_line(&mut c, &layout);
    c.finish()
}

fn share(a: &AllocationMetrics) -> Option<f64> {
    (a.owed_gpu_ms > 0).then(|| percent(a.delivered_owed_gpu_ms, a.owed_gpu_ms))
}

/// Geometry of the bar chart, worked out once from the data.
struct BarLayout {
    width: f64,
    height: f64,
    left: f64,
    top: f64,
    plot_h: f64,
    group_w: f64,
    bar_w: f64,
    /// Lowest per cent on the y axis.
    floor: f64,
}

impl BarLayout {
    const MAX_LABEL_CHARS: usize = 40;

    fn new(rows: &[AllocationRow<'_>], policies: usize) -> BarLayout {
        let n = rows.len() as f64;
        let p = policies.max(1) as f64;
        let gap = 6.0;
        // At least 4 px a bar; a few allocations spread over a readable minimum width.
        let group_w = (p * 4.0 + gap).max(640.0 / n);
        let bar_w = ((group_w - gap) / p).min(24.0);
        let longest = rows
            .iter()
            .map(|(path, _)| path.chars().count().min(Self::MAX_LABEL_CHARS))
            .max()
            .unwrap_or(0) as f64;
        // Labels are turned 60 degrees: their height is about sin(60) of their length.
        let label_h = 16.0 + longest * CHAR_W * 0.87;
        let (left, top, plot_h) = (72.0, 72.0, 320.0);
        let min_share = rows
            .iter()
            .flat_map(|(_, cells)| cells.iter().flatten().filter_map(|a| share(a)))
            .fold(100.0, f64::min);
        BarLayout {
            width: left + n * group_w + 48.0,
            height: top + plot_h + label_h + 24.0,
            left,
            top,
            plot_h,
            group_w,
            bar_w,
            floor: axis_floor(min_share),
        }
    }

    fn y(&self, pct: f64) -> f64 {
        scale(pct, (self.floor, 100.0), (self.top + self.plot_h, self.top))
    }

    fn plot_right(&self) -> f64 {
        self.width - 48.0
    }
}

/// The y axis starts high enough to tell 97% from 99% when every bar allows it, and at 0
/// otherwise; the axis title says where it starts.
fn axis_floor(min_share: f64) -> f64 {
    [90.0, 80.0, 50.0]
        .into_iter()
        .find(|f| *f <= min_share - 2.0)
        .unwrap_or(0.0)
}

fn bar_axes(c: &mut Canvas, l: &BarLayout) {
    let step = match l.floor {
        f if f >= 90.0 => 2,
        f if f >= 80.0 => 5,
        _ => 10,
    };
    let grid = format!("stroke=\"{GRID_COLOUR}\"");
    let mut tick = l.floor as i32;
    while tick <= 100 {
        let y = l.y(f64::from(tick));
        c.line((l.left, y), (l.plot_right(), y), &grid);
        c.text(l.left - 6.0, y + 4.0, "end", "", &format!("{tick}%"));
        tick += step;
    }
    let axis = format!("stroke=\"{AXIS_COLOUR}\"");
    let bottom = l.top + l.plot_h;
    c.line((l.left, l.top), (l.left, bottom), &axis);
    c.line((l.left, bottom), (l.plot_right(), bottom), &axis);
    let title = if l.floor > 0.0 {
        format!("delivered / owed (axis from {}%)", l.floor as i32)
    } else {
        "delivered / owed".to_owned()
    };
    let mid = l.top + l.plot_h / 2.0;
    let _ = writeln!(
        c.out,
        "<text x=\"20.0\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20.0 {0})\">{1}</text>",
        num(mid),
        xml(&title)
    );
}

fn bar_group(
    c: &mut Canvas,
    l: &BarLayout,
    g: usize,
    path: &str,
    cells: &[Option<&AllocationMetrics>],
    runs: &[RunMetrics],
) {
    let x0 = l.left + g as f64 * l.group_w;
    let bars_w = l.bar_w * cells.len() as f64;
    let first = x0 + (l.group_w - bars_w) / 2.0;
    c.open_group(path);
    for (i, a) in cells.iter().enumerate() {
        let Some((a, pct)) = a.and_then(|a| share(a).map(|s| (a, s))) else {
            continue;
        };
        let opacity = if a.owed_gpu_ms < MIN_OWED_GPU_MS {
            "0.35"
        } else {
            "1"
        };
        // Owed but (almost) nothing delivered still shows, as a sliver: no bar means nothing
        // was owed.
        let y = l.y(pct).min(l.top + l.plot_h - MIN_BAR_H);
        let _ = writeln!(
            c.out,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" fill-opacity=\"{opacity}\">\
             <title>{}</title></rect>",
            num(first + i as f64 * l.bar_w),
            num(y),
            num(l.bar_w),
            num(l.top + l.plot_h - y),
            colour(i),
            xml(&format!(
                "{path}, {}: {:.2}% of {:.1} GPU-h owed",
                runs[i].policy,
                pct,
                crate::metrics::gpu_hours(a.owed_gpu_ms)
            ))
        );
    }
    let small = cells
        .iter()
        .flatten()
        .all(|a| a.owed_gpu_ms < MIN_OWED_GPU_MS);
    let style = if small {
        format!("fill=\"{MUTED_TEXT}\"")
    } else {
        String::new()
    };
    let label_x = x0 + l.group_w / 2.0 + 4.0;
    let label_y = l.top + l.plot_h + 12.0;
    c.turned_text((label_x, label_y), -60, &style, &short_label(path));
    c.close_group();
}

/// A long path keeps its end, the part that tells allocations apart.
fn short_label(path: &str) -> String {
    let n = path.chars().count();
    if n <= BarLayout::MAX_LABEL_CHARS {
        return path.to_owned();
    }
    let tail: String = path
        .chars()
        .skip(n + 1 - BarLayout::MAX_LABEL_CHARS)
        .collect();
    format!("…{tail}")
}

fn target_line(c: &mut Canvas, l: &BarLayout) {
    let y = l.y(95.0);
    let style = format!("stroke=\"{TARGET_COLOUR}\" stroke-dasharray=\"6 4\"");
    c.line((l.left, y), (l.plot_right(), y), &style);
    c.text(
        l.plot_right() + 4.0,
        y + 4.0,
        "start",
        &format!("fill=\"{TARGET_COLOUR}\""),
        "95%",
    );
}

// ---------------------------------------------------------------------------------------------
// Occupancy

/// Lines of used over available GPU time per hour, one per policy, over the run in days.
///
/// Long runs are summed into buckets of several hours (the bucket's used over its available
/// time, not an average of hourly shares) so the line stays readable; the title says the
/// bucket size. An hour with no capacity breaks the line.
pub fn occupancy(report: &Report) -> String {
    let runs = &report.runs;
    let hours = runs
        .iter()
        .flat_map(|r| r.hourly.iter().map(|p| p.hour + 1))
        .max()
        .unwrap_or(0);
    if hours == 0 {
        return Canvas::new(640.0, 100.0, "GPU occupancy").empty("No hourly data to show.");
    }
    let bucket = bucket_hours(hours);
    let span = hours.div_ceil(bucket) * bucket;
    let title = if bucket == 1 {
        "GPU occupancy per hour (used / available GPU time)".to_owned()
    } else {
        format!("GPU occupancy per {bucket} hours (used / available GPU time)")
    };
    let frame = Frame {
        left: 64.0,
        top: 64.0,
        width: 840.0,
        height: 300.0,
    };
    let mut c = Canvas::new(
        frame.left + frame.width + 32.0,
        frame.top + frame.height + 56.0,
        &title,
    );
    c.legend(16.0, 48.0, runs);
    occupancy_axes(&mut c, &frame, span);
    // Drawn last to first so the first policy (fairshare) lies on top.
    for (i, run) in runs.iter().enumerate().rev() {
        let points = bucket_shares(run, bucket, span);
        occupancy_line(&mut c, &frame, &points, bucket, span, i);
    }
    c.finish()
}

/// A plot area.
struct Frame {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
}

impl Frame {
    fn bottom(&self) -> f64 {
        self.top + self.height
    }

    fn right(&self) -> f64 {
        self.left + self.width
    }
}

/// The smallest bucket that keeps a line under ~240 points.
fn bucket_hours(hours: u64) -> u64 {
    const MAX_POINTS: u64 = 240;
    [1, 2, 3, 6, 12, 24, 48, 168]
        .into_iter()
        .find(|b| hours.div_ceil(*b) <= MAX_POINTS)
        .unwrap_or_else(|| hours.div_ceil(MAX_POINTS))
}

/// Per bucket, used over available in per cent; `None` where nothing was available.
fn bucket_shares(run: &RunMetrics, bucket: u64, span: u64) -> Vec<Option<f64>> {
    let n = usize::try_from(span / bucket).unwrap_or(0);
    let mut sums = vec![(0u128, 0u128); n];
    for p in &run.hourly {
        if let Some(s) = usize::try_from(p.hour / bucket)
            .ok()
            .and_then(|b| sums.get_mut(b))
        {
            s.0 += p.used_gpu_ms;
            s.1 += p.capacity_gpu_ms;
        }
    }
    sums.into_iter()
        .map(|(used, cap)| (cap > 0).then(|| percent(used, cap).min(100.0)))
        .collect()
}

fn occupancy_axes(c: &mut Canvas, f: &Frame, span: u64) {
    let grid = format!("stroke=\"{GRID_COLOUR}\"");
    for pct in (0..=100).step_by(20) {
        let y = scale(f64::from(pct), (0.0, 100.0), (f.bottom(), f.top));
        c.line((f.left, y), (f.right(), y), &grid);
        c.text(f.left - 6.0, y + 4.0, "end", "", &format!("{pct}%"));
    }
    let step = tick_hours(span);
    // Ticks of whole days are labelled in days; finer ones (a run of a few days or less) in
    // hours, which read where "0.08 days" would not.
    let in_days = step.is_multiple_of(24);
    let mut h = 0;
    while h <= span {
        let x = scale(h as f64, (0.0, span as f64), (f.left, f.right()));
        c.line(
            (x, f.bottom()),
            (x, f.bottom() + 4.0),
            &format!("stroke=\"{AXIS_COLOUR}\""),
        );
        let label = if in_days {
            (h / 24).to_string()
        } else {
            h.to_string()
        };
        c.text(x, f.bottom() + 18.0, "middle", "", &label);
        h += step;
    }
    let axis = format!("stroke=\"{AXIS_COLOUR}\"");
    c.line((f.left, f.top), (f.left, f.bottom()), &axis);
    c.line((f.left, f.bottom()), (f.right(), f.bottom()), &axis);
    c.text(
        f.left + f.width / 2.0,
        f.bottom() + 40.0,
        "middle",
        "",
        if in_days {
            "days since start"
        } else {
            "hours since start"
        },
    );
}

/// Tick spacing in hours: at most about 12 ticks, on whole days once the run is days long.
fn tick_hours(span: u64) -> u64 {
    [1, 2, 3, 6, 12, 24, 48, 72, 168, 336, 720, 1440, 2880, 8760]
        .into_iter()
        .find(|s| span / s <= 12)
        .unwrap_or_else(|| span.div_ceil(12).max(1))
}

fn occupancy_line(
    c: &mut Canvas,
    f: &Frame,
    points: &[Option<f64>],
    bucket: u64,
    span: u64,
    run: usize,
) {
    let mut d = String::new();
    let mut pen_down = false;
    let mut lone = Vec::new();
    for (b, p) in points.iter().enumerate() {
        let Some(pct) = p else {
            pen_down = false;
            continue;
        };
        let mid = b as f64 * bucket as f64 + bucket as f64 / 2.0;
        let x = scale(mid, (0.0, span as f64), (f.left, f.right()));
        let y = scale(*pct, (0.0, 100.0), (f.bottom(), f.top));
        let next_present = points.get(b + 1).is_some_and(Option::is_some);
        if !pen_down && !next_present {
            // A point with no neighbour would be an invisible path: mark it instead.
            lone.push((x, y));
        }
        let _ = write!(
            d,
            "{}{} {} ",
            if pen_down { "L" } else { "M" },
            num(x),
            num(y)
        );
        pen_down = true;
    }
    if !d.is_empty() {
        let _ = writeln!(
            c.out,
            "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>",
            d.trim_end(),
            colour(run)
        );
    }
    for (x, y) in lone {
        let _ = writeln!(
            c.out,
            "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"/>",
            num(x),
            num(y),
            colour(run)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Waits

/// Picks one class's waits out of a run.
type WaitsOf = fn(&RunMetrics) -> &Waits;

/// The job classes of the wait chart, in drawing order.
const CLASSES: [(&str, WaitsOf); 3] = [
    ("debug", |r| &r.debug_waits),
    ("other allocated", |r| &r.allocated_waits),
    ("unallocated", |r| &r.unallocated_waits),
];

/// Log-scale time axis ticks: position in ms and label.
const TIME_TICKS: [(i64, &str); 10] = [
    (1_000, "1 s"),
    (10_000, "10 s"),
    (60_000, "1 min"),
    (600_000, "10 min"),
    (3_600_000, "1 h"),
    (21_600_000, "6 h"),
    (86_400_000, "1 d"),
    (604_800_000, "7 d"),
    (2_592_000_000, "30 d"),
    (31_536_000_000, "1 y"),
];

/// Height of one policy's row in the wait chart.
const ROW_H: f64 = 20.0;
/// Height of a class's title above its rows.
const BAND_HEAD: f64 = 26.0;

/// Queue-wait percentiles by job class and policy on a log time axis.
///
/// One band per class (debug, other allocated, unallocated), one row per policy: a line from
/// p50 to p99 with a circle at p50, a diamond at p90 and a bar at p99, and the three values in
/// text on the right, with the count of jobs never started. The debug band carries the 30 s
/// p90 target. Waits under a second are drawn at one second.
pub fn waits(report: &Report) -> String {
    let runs = &report.runs;
    if runs.is_empty() {
        return Canvas::new(640.0, 100.0, "Queue waits").empty("No policy was run.");
    }
    let axis = WaitAxis::new(runs);
    let band_h = BAND_HEAD + ROW_H * runs.len() as f64;
    let frame = Frame {
        left: 150.0,
        top: 80.0,
        width: 560.0,
        height: band_h * CLASSES.len() as f64,
    };
    let mut c = Canvas::new(
        frame.right() + 300.0,
        frame.bottom() + 56.0,
        "Queue waits by job class",
    );
    let legend_end = c.legend(16.0, 48.0, runs);
    marker_key(&mut c, legend_end + 8.0, 48.0);
    wait_axis(&mut c, &frame, &axis);
    c.text(
        frame.right() + 16.0,
        frame.top - 8.0,
        "start",
        "font-weight=\"bold\"",
        "p50 / p90 / p99",
    );
    for (k, (class, waits_of)) in CLASSES.iter().enumerate() {
        let top = frame.top + k as f64 * band_h;
        if k > 0 {
            let grid = format!("stroke=\"{GRID_COLOUR}\"");
            c.line((8.0, top), (frame.right() + 290.0, top), &grid);
        }
        c.text(8.0, top + 16.0, "start", "font-weight=\"bold\"", class);
        for (i, run) in runs.iter().enumerate() {
            let y = top + BAND_HEAD + ROW_H * i as f64 + ROW_H / 2.0;
            wait_row(&mut c, &frame, &axis, (class, i, run), waits_of(run), y);
        }
        if k == 0 {
            debug_target(&mut c, axis.x(&frame, 30_000), top, band_h);
        }
    }
    c.finish()
}

/// The SPEC's debug p90 target, 30 s, across the debug band.
fn debug_target(c: &mut Canvas, x: f64, top: f64, band_h: f64) {
    let style = format!("stroke=\"{TARGET_COLOUR}\" stroke-dasharray=\"6 4\"");
    c.line((x, top + BAND_HEAD - 4.0), (x, top + band_h - 2.0), &style);
    let fill = format!("fill=\"{TARGET_COLOUR}\"");
    c.text(x + 4.0, top + 16.0, "start", &fill, "30 s p90 target");
}

/// The log time axis: 1 s to the first tick at or past the longest wait (at least a minute).
struct WaitAxis {
    hi_ms: i64,
}

impl WaitAxis {
    const LO_MS: i64 = 1_000;

    fn new(runs: &[RunMetrics]) -> WaitAxis {
        let longest = runs
            .iter()
            .flat_map(|r| CLASSES.iter().map(move |(_, w)| w(r)))
            .filter_map(|w| w.sorted_ms.last().copied())
            .max()
            .unwrap_or(0)
            .max(60_000);
        let hi_ms = TIME_TICKS
            .iter()
            .map(|(ms, _)| *ms)
            .find(|ms| *ms >= longest)
            .unwrap_or(longest);
        WaitAxis { hi_ms }
    }

    fn x(&self, f: &Frame, ms: i64) -> f64 {
        let log = |v: i64| (v.max(Self::LO_MS) as f64).log10();
        scale(
            log(ms),
            (log(Self::LO_MS), log(self.hi_ms)),
            (f.left, f.right()),
        )
    }
}

fn wait_axis(c: &mut Canvas, f: &Frame, axis: &WaitAxis) {
    let grid = format!("stroke=\"{GRID_COLOUR}\"");
    for (ms, label) in TIME_TICKS.iter().filter(|(ms, _)| *ms <= axis.hi_ms) {
        let x = axis.x(f, *ms);
        c.line((x, f.top), (x, f.bottom()), &grid);
        c.text(x, f.bottom() + 18.0, "middle", "", label);
    }
    let stroke = format!("stroke=\"{AXIS_COLOUR}\"");
    c.line((f.left, f.bottom()), (f.right(), f.bottom()), &stroke);
    c.text(
        f.left + f.width / 2.0,
        f.bottom() + 40.0,
        "middle",
        "",
        "wait from submission to first start (log scale; under 1 s drawn at 1 s)",
    );
}

/// The shapes' key: circle p50, diamond p90, bar p99.
fn marker_key(c: &mut Canvas, x: f64, y: f64) {
    let grey = "#555555";
    c.out.push_str("<g>\n");
    circle(c, (x + 6.0, y - 4.0), grey);
    c.text(x + 14.0, y, "start", "", "p50");
    diamond(c, (x + 50.0, y - 4.0), grey);
    c.text(x + 58.0, y, "start", "", "p90");
    tick(c, (x + 94.0, y - 4.0), grey);
    c.text(x + 100.0, y, "start", "", "p99");
    c.close_group();
}

fn wait_row(
    c: &mut Canvas,
    f: &Frame,
    axis: &WaitAxis,
    (class, i, run): (&str, usize, &RunMetrics),
    w: &Waits,
    y: f64,
) {
    let col = colour(i);
    let p = Percentiles::of(&w.sorted_ms);
    c.open_group(&wait_tooltip(class, run, w, p));
    let _ = writeln!(
        c.out,
        "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{col}\"/>",
        num(f.left - 18.0),
        num(y - 5.0)
    );
    c.text(f.left - 24.0, y + 4.0, "end", "", &run.policy);
    let summary = match p {
        None => {
            let muted = format!("fill=\"{MUTED_TEXT}\"");
            c.text(f.left + 6.0, y + 4.0, "start", &muted, "no jobs");
            "-".to_owned()
        }
        Some(p) => {
            let (x50, x90, x99) = (axis.x(f, p.p50), axis.x(f, p.p90), axis.x(f, p.p99));
            c.line(
                (x50, y),
                (x99, y),
                &format!("stroke=\"{col}\" stroke-width=\"2\""),
            );
            circle(c, (x50, y), col);
            diamond(c, (x90, y), col);
            tick(c, (x99, y), col);
            format!(
                "{} / {} / {}",
                human_duration(p.p50),
                human_duration(p.p90),
                human_duration(p.p99)
            )
        }
    };
    let text = if w.unstarted > 0 {
        format!("{summary} ({} unstarted)", w.unstarted)
    } else {
        summary
    };
    c.text(f.right() + 16.0, y + 4.0, "start", "", &text);
    c.close_group();
}

fn wait_tooltip(class: &str, run: &RunMetrics, w: &Waits, p: Option<Percentiles>) -> String {
    let jobs = w.sorted_ms.len();
    match p {
        None => format!("{}, {class}: no jobs", run.policy),
        Some(p) => format!(
            "{}, {class}: p50 {}, p90 {}, p99 {}; {jobs} jobs, {} unstarted",
            run.policy,
            human_duration(p.p50),
            human_duration(p.p90),
            human_duration(p.p99),
            w.unstarted
        ),
    }
}

fn circle(c: &mut Canvas, (x, y): (f64, f64), fill: &str) {
    let _ = writeln!(
        c.out,
        "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{fill}\"/>",
        num(x),
        num(y)
    );
}

fn diamond(c: &mut Canvas, (x, y): (f64, f64), fill: &str) {
    let _ = writeln!(
        c.out,
        "<polygon points=\"{},{} {},{} {},{} {},{}\" fill=\"{fill}\" stroke=\"#FFFFFF\"/>",
        num(x),
        num(y - 6.0),
        num(x + 6.0),
        num(y),
        num(x),
        num(y + 6.0),
        num(x - 6.0),
        num(y)
    );
}

fn tick(c: &mut Canvas, (x, y): (f64, f64), stroke: &str) {
    c.line(
        (x, y - 6.0),
        (x, y + 6.0),
        &format!("stroke=\"{stroke}\" stroke-width=\"3\""),
    );
}

#[cfg(test)]
mod tests {
    use super::super::sample;
    use super::*;
    use crate::metrics::AllocationMetrics;

    /// The value of the first `name="..."` attribute in `fragment` (`name` may carry its tag:
    /// `<path d`).
    fn attr<'a>(fragment: &'a str, name: &str) -> &'a str {
        fragment
            .split(&format!("{name}=\""))
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_else(|| panic!("no {name} in {fragment}"))
    }

    /// Checks what a renderer cares about: one root, every tag closed in order, no raw `&` or
    /// `<` in text, and the exact ending.
    fn assert_well_formed(svg: &str) {
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "root"
        );
        assert!(svg.ends_with("</svg>\n"), "ending");
        let mut open: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            assert_text_escaped(&rest[..start]);
            let after = &rest[start + 1..];
            let end = after.find('>').expect("tag closed");
            let tag = &after[..end];
            assert!(!tag.contains('<'), "no '<' inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name), "closing tag matches");
            } else if !tag.ends_with('/') {
                open.push(tag.split_whitespace().next().expect("tag name"));
            }
            rest = &after[end + 1..];
            if open.is_empty() {
                assert_eq!(rest, "\n", "nothing after the root");
            }
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        assert_eq!(svg.matches("<g>").count(), svg.matches("</g>").count());
    }

    fn assert_text_escaped(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "raw & in {text}"
            );
        }
    }

    fn all_charts(report: &Report) -> [String; 3] {
        [delivered_vs_owed(report), occupancy(report), waits(report)]
    }

    #[test]
    fn charts_are_well_formed_and_deterministic() {
        let report = sample::report();
        for (a, b) in all_charts(&report).iter().zip(all_charts(&report).iter()) {
            assert_well_formed(a);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn allocation_names_are_escaped() {
        let svg = delivered_vs_owed(&sample::report());
        assert!(svg.contains(">lab/a&amp;b</text>"), "label escaped");
        assert!(
            svg.contains("<title>lab/&lt;tiny&gt;</title>"),
            "tooltip escaped"
        );
        assert!(!svg.contains("a&b"));
        assert!(!svg.contains("<tiny>"));
    }

    #[test]
    fn bars_carry_figures_colours_and_marks() {
        let svg = delivered_vs_owed(&sample::report());
        // Six bars: three allocations by two policies, in palette order.
        assert_eq!(
            svg.matches("<rect x=").count(),
            2 + 6,
            "legend swatches and bars"
        );
        assert_eq!(
            svg.matches(&format!("fill=\"{}\" fill-opacity", PALETTE[0]))
                .count(),
            3
        );
        assert_eq!(
            svg.matches(&format!("fill=\"{}\" fill-opacity", PALETTE[1]))
                .count(),
            3
        );
        // Only the tiny allocation (owed 10 GPU-h) is lighter, once per policy.
        assert_eq!(svg.matches("fill-opacity=\"0.35\"").count(), 2);
        assert!(svg.contains("lab/c, fairshare: 99.49% of 390.0 GPU-h owed"));
        // fairshare's tiny allocation got 50%: the axis must start at 0 to show it.
        assert!(svg.contains(">delivered / owed</text>"));
        assert!(svg.contains(">95%</text>"));
    }

    #[test]
    fn an_allocation_owed_time_and_given_none_is_a_sliver_not_a_missing_bar() {
        let mut report = sample::report();
        let starved = &mut report.runs[1].allocations[0];
        starved.delivered_owed_gpu_ms = 0;
        let path = starved.path.clone();
        let svg = delivered_vs_owed(&report);
        let bar = svg
            .split("<rect ")
            .find(|r| r.contains(&format!("{}, fifo: 0.00% of", xml(&path))))
            .expect("the starved bar");
        let height: f64 = attr(bar, "height").parse().expect("a height");
        assert_eq!(height, MIN_BAR_H, "{bar}");
        // The note under the legend says so, and starts at the chart's left edge.
        assert!(svg.contains("a sliver: little or none of it delivered"));
        assert!(svg.contains("<text x=\"16.0\" y=\"64.0\""), "{svg}");
    }

    #[test]
    fn the_axis_floor_rises_only_when_every_bar_clears_it() {
        assert_eq!(axis_floor(99.0), 90.0);
        assert_eq!(axis_floor(91.0), 80.0);
        assert_eq!(axis_floor(50.0), 0.0);
        assert_eq!(axis_floor(100.0), 90.0);
    }

    #[test]
    fn many_allocations_widen_the_chart_and_keep_long_names_short() {
        let mut report = sample::report();
        let long = "x".repeat(60);
        for run in &mut report.runs {
            run.allocations = (0..150)
                .map(|i| AllocationMetrics {
                    path: format!("org/{i:03}/{long}"),
                    fraction_ppm: 6_000,
                    demand_gpu_ms: 200 * sample::H,
                    owed_gpu_ms: 100 * sample::H,
                    delivered_gpu_ms: 100 * sample::H,
                    delivered_owed_gpu_ms: 97 * sample::H,
                    owed_over_served_gpu_ms: 0,
                    missed_over_served_gpu_ms: 0,
                })
                .collect();
        }
        let svg = delivered_vs_owed(&report);
        assert_well_formed(&svg);
        let width: f64 = attr(&svg, "width").parse().expect("width");
        // Every bar at least 4 px wide.
        assert!(width >= 150.0 * (2.0 * 4.0), "width {width}");
        assert_eq!(svg.matches("rotate(-60").count(), 150);
        assert!(svg.contains(&format!(">…{}</text>", &format!("/{long}")[22..])));
        assert!(svg.contains("(axis from 90%)"));
    }

    #[test]
    fn occupancy_buckets_long_runs_and_plots_every_policy() {
        let mut report = sample::report();
        let line_count = |svg: &str| svg.matches("<path d=").count();
        assert_eq!(line_count(&occupancy(&report)), 2);
        // A run of hours is labelled in hours, not in fractions of a day.
        let short = occupancy(&report);
        assert!(short.contains("hours since start"), "{short}");
        assert!(!short.contains(">0.08<"), "{short}");
        for run in &mut report.runs {
            run.hourly = (0..720)
                .map(|hour| crate::metrics::HourPoint {
                    hour,
                    used_gpu_ms: if hour < 360 {
                        8 * sample::H
                    } else {
                        16 * sample::H
                    },
                    capacity_gpu_ms: 16 * sample::H,
                })
                .collect();
        }
        let svg = occupancy(&report);
        assert_well_formed(&svg);
        assert!(svg.contains("per 3 hours"));
        let d = attr(&svg, "<path d");
        assert_eq!(d.matches(['M', 'L']).count(), 240);
        assert!(svg.contains(">30</text>"), "last day tick");
        assert!(svg.contains("days since start"));
    }

    #[test]
    fn occupancy_breaks_the_line_where_nothing_was_available() {
        let mut report = sample::report();
        report.runs.truncate(1);
        report.runs[0].hourly[2].capacity_gpu_ms = 0;
        let svg = occupancy(&report);
        let d = attr(&svg, "<path d");
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(
            svg.matches("<circle").count(),
            1,
            "lone last hour is marked"
        );
    }

    #[test]
    fn waits_show_values_empty_classes_and_the_target() {
        let svg = waits(&sample::report());
        assert!(svg.contains(">15 s / 29 s / 1.0 h</text>"));
        assert!(svg.contains(">1 min / 12 min / 12 min (1 unstarted)</text>"));
        assert_eq!(
            svg.matches(">no jobs</text>").count(),
            2,
            "fairshare unallocated, fifo allocated"
        );
        assert!(svg.contains(">30 s p90 target</text>"));
        // The longest wait is fifo's 2-day unallocated job: the axis runs to the 7-day tick.
        assert!(svg.contains(">7 d</text>"));
        assert!(!svg.contains(">30 d</text>"));
    }

    #[test]
    fn empty_reports_still_give_valid_svg() {
        let mut report = sample::report();
        report.runs.clear();
        for svg in all_charts(&report) {
            assert_well_formed(&svg);
        }
    }

    #[test]
    fn numbers_never_print_negative_zero_or_nan() {
        assert_eq!(num(-0.0), "0.0");
        assert_eq!(num(f64::NAN), "0.0");
        assert_eq!(num(1.26), "1.3");
    }
}
