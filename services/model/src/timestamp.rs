//! Instants for people: Unix epoch milliseconds as RFC 3339 UTC (`2026-11-30T08:21:08.873Z`),
//! for the reasons the decision service writes into explanations and for the CLI. Pure: the
//! instant is an argument, and no clock or time zone database is read.

/// `ms` since the Unix epoch as RFC 3339 UTC (fractional seconds only when there are any);
/// `"<ms>ms"` for an instant outside the years 1 to 9999.
pub fn utc(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms}ms"))
}

#[cfg(test)]
mod tests {
    use super::utc;

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
}
