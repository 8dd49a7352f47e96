//! Human durations for flags and files: `20ms`, `90s`, `15m`, `8h`, `7d`, or a bare number of
//! seconds.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {0:?}: use a whole number with ms, s, m, h or d (e.g. 20ms, 15m, 8h, 7d)"
)]
pub struct DurationError(pub String);

/// Parses `"20ms"`, `"15m"`, `"8h"`, `"7d"`, `"90s"` or `"90"` (seconds).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let err = || DurationError(text.to_owned());
    if let Some(ms) = t.strip_suffix("ms") {
        return ms
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| err());
    }
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| err())?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(err()),
    };
    n.checked_mul(scale)
        .map(Duration::from_secs)
        .ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("8h"), Ok(Duration::from_secs(28_800)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("42"), Ok(Duration::from_secs(42)));
        assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("3w").is_err());
        assert!(parse_duration("-3s").is_err());
    }
}
