//! The clock hour that SPEC section 6 measures owed time by: Unix epoch hours. The accounting
//! service's hourly ledger and the decision service's hourly share floor both count in these
//! hours, so they must agree on where one starts. Pure: times are arguments.

/// Length of one hour, in ms.
pub const HOUR_MS: i64 = 3_600_000;

/// The hour index (Unix epoch hours) containing `t`.
pub fn hour_of(t: i64) -> i64 {
    t.div_euclid(HOUR_MS)
}

/// The start of the hour containing `t`.
pub fn hour_start(t: i64) -> i64 {
    hour_of(t).saturating_mul(HOUR_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_are_epoch_aligned_and_negative_times_round_down() {
        assert_eq!(hour_of(0), 0);
        assert_eq!(hour_of(HOUR_MS - 1), 0);
        assert_eq!(hour_of(HOUR_MS), 1);
        assert_eq!(hour_of(-1), -1);
        assert_eq!(hour_start(2 * HOUR_MS + 5), 2 * HOUR_MS);
        assert_eq!(hour_start(-1), -HOUR_MS);
    }
}
