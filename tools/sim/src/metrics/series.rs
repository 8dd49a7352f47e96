//! Percentiles of wait distributions.

/// p50, p90 and p99 of a distribution, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// Median.
    pub p50: i64,
    /// 90th percentile.
    pub p90: i64,
    /// 99th percentile.
    pub p99: i64,
}

/// The `q`-th percentile (0..=100) of `sorted` by the nearest-rank method; `None` when empty.
pub fn percentile(sorted: &[i64], q: u32) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // Nearest rank: the smallest value with at least q% of the values at or below it.
    let rank = (usize::try_from(q.min(100)).unwrap_or(100) * n)
        .div_ceil(100)
        .max(1);
    sorted.get(rank - 1).copied()
}

impl Percentiles {
    /// The percentiles of `sorted` (ascending); `None` when empty.
    pub fn of(sorted: &[i64]) -> Option<Percentiles> {
        Some(Percentiles {
            p50: percentile(sorted, 50)?,
            p90: percentile(sorted, 90)?,
            p99: percentile(sorted, 99)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<i64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50), Some(5));
        assert_eq!(percentile(&v, 90), Some(9));
        assert_eq!(percentile(&v, 99), Some(10));
        assert_eq!(percentile(&v, 0), Some(1));
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&[7], 99), Some(7));
    }
}
