//! How the three audits `fairshare audit` runs (placements, preemption orders, usage
//! snapshots) set findings aside and word their reports, so the three sections read alike.

use std::fmt::Display;

/// Drops the findings before sequence `from` (`sequence` says each one's); returns how many.
pub fn drop_before<T>(findings: &mut Vec<T>, from: u64, sequence: impl Fn(&T) -> u64) -> usize {
    let before = findings.len();
    findings.retain(|f| sequence(f) >= from);
    before - findings.len()
}

/// An audit's report for people: a `LABEL finding` line per finding, then one summary line.
#[derive(Debug, Default)]
pub struct Report(String);

impl Report {
    /// Adds a `label finding` line per finding.
    pub fn findings<T: Display>(mut self, label: &str, findings: &[T]) -> Self {
        for f in findings {
            self.0.push_str(&format!("{label} {f}\n"));
        }
        self
    }

    /// Ends with `summary`, and how many earlier `kind` were set aside if any.
    pub fn summary(mut self, summary: &str, set_aside: usize, kind: &str) -> String {
        self.0.push_str(summary);
        if set_aside > 0 {
            self.0
                .push_str(&format!(", {set_aside} earlier {kind} set aside"));
        }
        self.0.push('\n');
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_before_a_sequence_are_dropped_and_the_report_says_so() {
        let mut findings = vec![3u64, 7, 1, 9];
        assert_eq!(drop_before(&mut findings, 5, |f| *f), 2);
        assert_eq!(findings, [7, 9]);
        let text = Report::default().findings("DIVERGENCE", &findings).summary(
            "checked 4",
            2,
            "divergences",
        );
        assert_eq!(
            text,
            "DIVERGENCE 7\nDIVERGENCE 9\nchecked 4, 2 earlier divergences set aside\n"
        );
        assert_eq!(Report::default().summary("none", 0, "x"), "none\n");
    }
}
