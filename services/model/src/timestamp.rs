//! Instants for people: Unix epoch milliseconds as RFC 3339 UTC (`2026-11-30T08:21:08.873Z`),
//! for the reasons the decision service writes into explanations. Pure: the instant is an
//! argument, and no time zone database is read.

/// `ms` since the Unix epoch as RFC 3339 UTC, to the millisecond.
pub fn utc(ms: i64) -> String {
    const DAY_MS: i64 = 86_400_000;
    let (y, m, d) = civil_from_days(ms.div_euclid(DAY_MS));
    let in_day = ms.rem_euclid(DAY_MS);
    let (h, min) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (s, milli) = (in_day / 1000 % 60, in_day % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// The proleptic Gregorian (year, month, day) `days` days after 1970-01-01.
///
/// Counts in 400-year eras that start on a 1 March, so each leap day is the last day of its
/// year (the method of H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // 719,468 days from 0000-03-01 to 1970-01-01; 146,097 days in 400 years.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March: 0 is March, 11 is February.
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn instants_read_as_utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(-1), "1969-12-31T23:59:59.999Z");
        // A leap day, the day after, and a century that is not a leap year.
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(951_868_800_000), "2000-03-01T00:00:00.000Z");
        assert_eq!(utc(4_107_456_000_000), "2100-02-28T00:00:00.000Z");
        assert_eq!(utc(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(utc(1_796_026_868_873), "2026-11-30T08:21:08.873Z");
    }
}
