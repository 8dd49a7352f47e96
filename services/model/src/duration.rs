//! Human durations for flags and files: `20ms`, `90s`, `15m`, `8h`, `7d`, or a bare number of
//! seconds.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a number with a unit.
    #[error(
        "invalid duration {0:?}: use a whole number with ms, s, m, h or d (e.g. 20ms, 15m, 8h, 7d)"
    )]
    Invalid(String),
    /// A number with a unit, past what a duration holds.
    #[error("duration {0:?} is too large")]
    TooLarge(String),
}

/// `ms` in the largest unit that holds it exactly ("2 d", "8 h", "90 s", "1500 ms"): a setting
/// is shown as it was given, never rounded.
pub fn exact_words(ms: i64) -> String {
    for (unit, name) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1_000, "s"),
    ] {
        if ms != 0 && ms % unit == 0 {
            return format!("{} {name}", ms / unit);
        }
    }
    format!("{ms} ms")
}

/// Parses `"20ms"`, `"15m"`, `"8h"`, `"7d"`, `"90s"` or `"90"` (seconds).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let err = || DurationError::Invalid(text.to_owned());
    let too_large = || DurationError::TooLarge(text.to_owned());
    // All digits but too many for a number: too large, not malformed.
    let number = |digits: &str| {
        digits.parse::<u64>().map_err(|_| {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                too_large()
            } else {
                err()
            }
        })
    };
    if let Some(ms) = t.strip_suffix("ms") {
        return number(ms).map(Duration::from_millis);
    }
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(err()),
    };
    number(digits)?
        .checked_mul(scale)
        .map(Duration::from_secs)
        .ok_or_else(too_large)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_words_keep_every_millisecond() {
        assert_eq!(exact_words(7 * 86_400_000), "7 d");
        assert_eq!(exact_words(36 * 3_600_000), "36 h");
        assert_eq!(exact_words(90_000), "90 s");
        assert_eq!(exact_words(1_500), "1500 ms");
        assert_eq!(exact_words(0), "0 ms");
    }

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

    #[test]
    fn a_number_too_large_is_called_that() {
        let huge = "99999999999999999999999d";
        assert_eq!(
            parse_duration(huge),
            Err(DurationError::TooLarge(huge.into()))
        );
        assert_eq!(
            parse_duration("999999999999999d"),
            Err(DurationError::TooLarge("999999999999999d".into()))
        );
        assert!(matches!(
            parse_duration("12x"),
            Err(DurationError::Invalid(_))
        ));
    }
}
