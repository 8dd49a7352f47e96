//! Instants for people: Unix epoch milliseconds as RFC 3339 UTC (`2026-11-30T08:21:08.873Z`),
//! for the reasons the decision service writes into explanations and for the CLI, and the
//! instants operators type (a maintenance window's start). Pure: the instant, or "now", is an
//! argument, and no clock or time zone database is read.

use crate::duration::parse_duration;

/// Why an instant an operator typed was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstantError {
    /// Not a form this reads.
    #[error(
        "invalid time {0:?}: use RFC 3339 with an offset (2026-12-02T06:00:00Z), `now`, or \
         `+` and a duration from now (+90m, +2h, +1d)"
    )]
    Invalid(String),
    /// A time from now past the year 9999: nothing could print it as a date, so nobody
    /// could name it again (to cancel a window, say).
    #[error("time {0:?} is past the year 9999: give a nearer one")]
    PastTheCalendar(String),
}

/// Parses an instant: RFC 3339 with an offset, `now` (`now_ms`), `+DURATION` after `now_ms`
/// (any [`parse_duration`] form, up to the year 9999), or `<integer>ms`, Unix milliseconds, as
/// [`utc`] prints an instant outside the calendar (so one written before it was refused can
/// still be named). Returns Unix epoch milliseconds.
pub fn parse_instant(text: &str, now_ms: i64) -> Result<i64, InstantError> {
    let t = text.trim();
    let err = || InstantError::Invalid(text.to_owned());
    if t == "now" {
        return Ok(now_ms);
    }
    if let Some(after) = t.strip_prefix('+') {
        let d = parse_duration(after).map_err(|_| err())?;
        let ms = i64::try_from(d.as_millis()).map_err(|_| err())?;
        let at = now_ms.checked_add(ms).ok_or_else(err)?;
        if !in_calendar(at) {
            return Err(InstantError::PastTheCalendar(text.to_owned()));
        }
        return Ok(at);
    }
    if let Some(ms) = t.strip_suffix("ms")
        && let Ok(ms) = ms.parse::<i64>()
        && !in_calendar(ms)
    {
        return Ok(ms);
    }
    let at = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
        .map_err(|_| err())?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).map_err(|_| err())
}

/// Whether [`utc`] prints `ms` as a date (the years 1 to 9999).
pub fn in_calendar(ms: i64) -> bool {
    rfc3339(ms).is_some()
}

/// `ms` as an RFC 3339 date, if the calendar holds it.
fn rfc3339(ms: i64) -> Option<String> {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
}

/// `ms` since the Unix epoch as RFC 3339 UTC (fractional seconds only when there are any);
/// `"<ms>ms"` for an instant outside the years 1 to 9999.
pub fn utc(ms: i64) -> String {
    rfc3339(ms).unwrap_or_else(|| format!("{ms}ms"))
}

#[cfg(test)]
mod tests {
    use super::{InstantError, parse_instant, utc};

    #[test]
    fn instants_read_as_utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(-1), "1969-12-31T23:59:59.999Z");
        // A leap day, the day after, and a century that is not a leap year.
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(951_868_800_000), "2000-03-01T00:00:00Z");
        assert_eq!(utc(4_107_456_000_000), "2100-02-28T00:00:00Z");
        assert_eq!(utc(4_107_542_400_000), "2100-03-01T00:00:00Z");
        assert_eq!(utc(1_796_026_868_873), "2026-11-30T08:21:08.873Z");
        // Far outside the calendar (an unset time): the number, not a panic.
        assert_eq!(utc(i64::MIN), format!("{}ms", i64::MIN));
    }

    #[test]
    fn operators_type_dates_now_or_a_time_from_now() {
        let now = 1_796_026_868_873;
        assert_eq!(parse_instant("2026-11-30T08:21:08.873Z", 0), Ok(now));
        assert_eq!(parse_instant("2026-11-30T09:21:08.873+01:00", 0), Ok(now));
        assert_eq!(parse_instant(" now ", now), Ok(now));
        assert_eq!(parse_instant("+2h", now), Ok(now + 7_200_000));
        assert_eq!(parse_instant("+90", now), Ok(now + 90_000));
        for bad in [
            "",
            "tomorrow",
            "2026-11-30",
            "2026-11-30T08:21:08",
            "+",
            "+2x",
            "-2h",
        ] {
            assert_eq!(
                parse_instant(bad, now),
                Err(InstantError::Invalid(bad.into())),
                "{bad:?}"
            );
        }
        // Far past the end of time: refused, not wrapped.
        assert!(parse_instant("+99999999999999d", i64::MAX - 1).is_err());
        // Past the year 9999, which no date prints: refused as such.
        assert_eq!(
            parse_instant("+99999999999d", now),
            Err(InstantError::PastTheCalendar("+99999999999d".into()))
        );
        assert!(parse_instant("+2900000d", now).is_ok(), "the year 9966");
        // What `utc` prints outside the calendar reads back; inside it, the date is the form.
        let far = 8_640_001_796_145_961_584;
        assert_eq!(utc(far), format!("{far}ms"));
        assert_eq!(parse_instant(&utc(far), now), Ok(far));
        assert_eq!(
            parse_instant("1000ms", now),
            Err(InstantError::Invalid("1000ms".into()))
        );
    }
}
