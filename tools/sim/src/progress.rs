//! A progress bar on stderr for long simulations.
//!
//! Place in the flow: the simulator's driver calls [`Progress::set`] once per simulated event
//! time, possibly millions of times, so `set` is one integer comparison until the next 1% of
//! work is done. It reads the wall clock only to throttle redraws; nothing of it reaches the
//! report, which stays a function of its inputs alone.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Least time between two redraws: faster is flicker, not information.
const MIN_REDRAW: Duration = Duration::from_millis(200);
/// Characters in the bar.
const BAR_WIDTH: u64 = 30;
/// Without a known total, how much work between two redraw checks.
const UNKNOWN_TOTAL_STEP: u64 = 1 << 16;

/// Where the bar is drawn.
enum Sink {
    /// Disabled, or stderr is not a terminal (a log file must not fill with redraws).
    Off,
    Stderr,
    #[cfg(test)]
    Buffer(Vec<u8>),
}

/// A progress bar on stderr, drawn only when enabled and stderr is a terminal.
pub struct Progress {
    label: String,
    total: u64,
    /// `set` does nothing below this; `u64::MAX` when the bar is off.
    next_check: u64,
    /// Work between two redraw checks: about 1% of the total.
    step: u64,
    /// The last value that passed the check, for `finish` when the total is unknown.
    last_done: u64,
    started: Instant,
    last_draw: Option<Instant>,
    sink: Sink,
    finished: bool,
}

impl Progress {
    /// A bar for `total` units of work (0 if unknown: then it counts instead); draws nothing
    /// unless `enabled` and stderr is a terminal.
    pub fn new(label: &str, total: u64, enabled: bool) -> Progress {
        let sink = if enabled && std::io::stderr().is_terminal() {
            Sink::Stderr
        } else {
            Sink::Off
        };
        Progress::with_sink(label, total, sink)
    }

    fn with_sink(label: &str, total: u64, sink: Sink) -> Progress {
        let step = if total == 0 {
            UNKNOWN_TOTAL_STEP
        } else {
            (total / 100).max(1)
        };
        Progress {
            label: label.to_owned(),
            total,
            next_check: if matches!(sink, Sink::Off) {
                u64::MAX
            } else {
                0
            },
            step,
            last_done: 0,
            started: Instant::now(),
            last_draw: None,
            sink,
            finished: false,
        }
    }

    /// Reports `done` units of work; redraws at most every ~1% and every 200 ms.
    #[inline]
    pub fn set(&mut self, done: u64) {
        if done < self.next_check {
            return;
        }
        self.check(done);
    }

    /// The slow path of `set`, taken about a hundred times a run.
    #[cold]
    fn check(&mut self, done: u64) {
        self.next_check = done.saturating_add(self.step);
        self.last_done = done;
        let now = Instant::now();
        if self
            .last_draw
            .is_some_and(|t| now.saturating_duration_since(t) < MIN_REDRAW)
        {
            return;
        }
        self.last_draw = Some(now);
        let line = self.line(done, now.saturating_duration_since(self.started));
        self.emit(&format!("\r{line}\x1b[K"));
    }

    /// Draws the bar complete and ends its line; later calls do nothing.
    pub fn finish(&mut self) {
        if self.finished || matches!(self.sink, Sink::Off) {
            self.finished = true;
            return;
        }
        self.finished = true;
        self.next_check = u64::MAX;
        let done = self.total.max(self.last_done);
        let line = self.line(done, self.started.elapsed());
        self.emit(&format!("\r{line}\x1b[K\n"));
    }

    /// "label [#####-----]  42% 420/1000 3.1 s", or "label 420 3.1 s" without a total.
    fn line(&self, done: u64, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64();
        if self.total == 0 {
            return format!("{} {done} {secs:.1} s", self.label);
        }
        let done = done.min(self.total);
        let filled = u128::from(done) * u128::from(BAR_WIDTH) / u128::from(self.total);
        let filled = usize::try_from(filled).unwrap_or(0);
        let width = usize::try_from(BAR_WIDTH).unwrap_or(0);
        let percent = u128::from(done) * 100 / u128::from(self.total);
        format!(
            "{} [{}{}] {percent:>3}% {done}/{} {secs:.1} s",
            self.label,
            "#".repeat(filled),
            "-".repeat(width.saturating_sub(filled)),
            self.total
        )
    }

    fn emit(&mut self, text: &str) {
        // A bar that cannot be drawn is no reason to stop a simulation: errors are dropped.
        match &mut self.sink {
            Sink::Off => {}
            Sink::Stderr => {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(text.as_bytes());
                let _ = err.flush();
            }
            #[cfg(test)]
            Sink::Buffer(buf) => buf.extend_from_slice(text.as_bytes()),
        }
    }
}

impl Drop for Progress {
    /// A bar left unfinished (an error cut the run short) still ends its line, so whatever is
    /// printed next starts on a fresh one.
    fn drop(&mut self) {
        if !self.finished && self.last_draw.is_some() {
            self.emit("\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffered(total: u64) -> Progress {
        Progress::with_sink("sim", total, Sink::Buffer(Vec::new()))
    }

    fn output(p: &Progress) -> String {
        match &p.sink {
            Sink::Buffer(buf) => String::from_utf8(buf.clone()).expect("utf-8"),
            _ => panic!("not buffered"),
        }
    }

    #[test]
    fn disabled_draws_nothing_and_never_passes_the_check() {
        let mut p = Progress::new("sim", 100, false);
        assert!(matches!(p.sink, Sink::Off));
        for d in 0..=100 {
            p.set(d);
        }
        p.finish();
        assert_eq!(p.next_check, u64::MAX);
        assert!(p.last_draw.is_none());
    }

    #[test]
    fn the_integer_check_opens_every_percent() {
        let mut p = buffered(1000);
        p.set(0);
        assert_eq!(p.next_check, 10);
        p.set(9);
        assert_eq!((p.next_check, p.last_done), (10, 0));
        p.set(15);
        assert_eq!((p.next_check, p.last_done), (25, 15));
    }

    #[test]
    fn redraws_are_throttled_by_time() {
        let mut p = buffered(1000);
        for d in 0..1000 {
            p.set(d);
        }
        // A hundred checks passed within milliseconds: only the first one drew.
        let draws = output(&p).matches('\r').count();
        assert!((1..5).contains(&draws), "{draws} draws");
        p.last_draw = Instant::now().checked_sub(Duration::from_millis(300));
        p.set(1000);
        assert_eq!(output(&p).matches('\r').count(), draws + 1);
    }

    #[test]
    fn finish_draws_the_full_bar_once_and_ends_the_line() {
        let mut p = buffered(1000);
        p.set(420);
        p.finish();
        p.finish();
        let out = output(&p);
        assert_eq!(out.matches('\n').count(), 1);
        assert!(out.ends_with("\x1b[K\n"));
        assert!(
            out.contains(&format!("[{}] 100% 1000/1000", "#".repeat(30))),
            "{out}"
        );
        p.set(1000);
        assert_eq!(output(&p), out, "nothing after finish");
    }

    #[test]
    fn the_line_shows_bar_percent_and_counts() {
        let p = buffered(1000);
        let line = p.line(420, Duration::from_millis(3_140));
        assert_eq!(
            line,
            format!(
                "sim [{}{}]  42% 420/1000 3.1 s",
                "#".repeat(12),
                "-".repeat(18)
            )
        );
        // Overshooting the total is clamped rather than drawing past the bar.
        assert!(p.line(5000, Duration::ZERO).contains("100% 1000/1000"));
        let unknown = buffered(0);
        assert_eq!(unknown.line(7, Duration::ZERO), "sim 7 0.0 s");
        assert_eq!(unknown.step, UNKNOWN_TOTAL_STEP);
    }
}
