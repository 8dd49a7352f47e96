//! Exact integer arithmetic for allocated time.
//!
//! Place in the flow: a `BudgetTreeSet` gives every account an exact fraction of the cluster
//! ([`Frac`]); when a window or ledger hour is queried, that fraction multiplies the integrated
//! capacity (GPU-ms). The product is taken exactly and floored once ([`mul_div_floor`]), so the
//! answer is a pure function of the log, identical on every machine, with no floats anywhere.

use serde::{Deserialize, Serialize};

/// An exact fraction `num / den` of the cluster, reduced, with `den > 0` and `num <= den`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frac {
    /// Numerator.
    pub num: u128,
    /// Denominator, never 0.
    pub den: u128,
}

impl Frac {
    /// No claim on the cluster.
    pub const ZERO: Frac = Frac { num: 0, den: 1 };

    /// The reduced fraction `num / den`; a zero denominator is taken as "no claim".
    pub fn new(num: u128, den: u128) -> Frac {
        if num == 0 || den == 0 {
            return Frac::ZERO;
        }
        // Reducing keeps the common case (small shares) on the fast multiplication path.
        let g = gcd(num, den);
        Frac {
            num: num / g,
            den: den / g,
        }
    }

    /// Whether the fraction is zero.
    pub fn is_zero(&self) -> bool {
        self.num == 0
    }

    /// `floor(self x amount)`, exact.
    pub fn of(&self, amount: u128) -> u128 {
        mul_div_floor(amount, self.num, self.den)
    }
}

impl From<fairshare_model::budget::Fraction> for Frac {
    fn from(f: fairshare_model::budget::Fraction) -> Frac {
        Frac::new(f.num, f.den)
    }
}

pub use fairshare_model::exact::{gcd, mul_div_floor, mul_wide};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_reduce() {
        assert_eq!(Frac::new(6, 8), Frac { num: 3, den: 4 });
        assert_eq!(Frac::new(0, 8), Frac::ZERO);
        assert_eq!(Frac::new(5, 0), Frac::ZERO);
        assert_eq!(Frac::new(9, 16).of(1_000), 562);
    }
}
