//! A small deterministic random number generator for generated workloads in tests and
//! benches, so a failing case is one seed and no dependency is needed.

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators,
/// scrambled", 2016). Not for anything but test workloads. The seed must not be 0.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_numbers_and_they_stay_below_the_bound() {
        let draw = |seed| {
            let mut r = Rng(seed);
            (0..100).map(|_| r.below(7)).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
        assert!(draw(42).iter().all(|&x| x < 7));
        assert!(
            (0..7).all(|v| draw(42).contains(&v)),
            "every value comes up"
        );
        assert_eq!(Rng(1).below(0), 0);
    }
}
