//! Exact integer arithmetic for fractions of the cluster: `floor(x * num / den)` without
//! overflow, so every service that multiplies integrated capacity by a budget fraction (the
//! accounting ledger, the decision service's hourly floor) gets the same answer from the same
//! log, on every machine, with no floats.

/// Greatest common divisor (binary-free Euclid; inputs are at most a few hundred bits of work).
pub fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

/// The full 256-bit product `x * y` as `(high, low)` 128-bit halves.
pub fn mul_wide(x: u128, y: u128) -> (u128, u128) {
    const MASK: u128 = u64::MAX as u128;
    let (x1, x0) = (x >> 64, x & MASK);
    let (y1, y0) = (y >> 64, y & MASK);
    let p00 = x0 * y0;
    let p01 = x0 * y1;
    let p10 = x1 * y0;
    let p11 = x1 * y1;
    // Middle column: the high half of p00 plus the low halves of the cross products; at most
    // three 64-bit values, so it fits in 128 bits and its high half carries into the top.
    let mid = (p00 >> 64) + (p01 & MASK) + (p10 & MASK);
    let low = (p00 & MASK) | (mid << 64);
    let high = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (high, low)
}

/// `floor(x * num / den)` computed exactly, for `den > 0`.
///
/// Saturates at `u128::MAX` when the quotient does not fit (only possible when `num > den`,
/// which a fraction of the cluster never is). A zero `den` yields 0 (no claim).
pub fn mul_div_floor(x: u128, num: u128, den: u128) -> u128 {
    if den == 0 {
        return 0;
    }
    // Typical figures (GPU-ms over a week, shares in the hundreds) fit in 64 bits, where the
    // hardware divides; 128-bit division is a much slower library routine.
    if let (Ok(x64), Ok(num64), Ok(den64)) =
        (u64::try_from(x), u64::try_from(num), u64::try_from(den))
        && let Some(p) = x64.checked_mul(num64)
    {
        return u128::from(p / den64);
    }
    if let Some(p) = x.checked_mul(num) {
        return p / den;
    }
    let (high, low) = mul_wide(x, num);
    if high >= den {
        return u128::MAX;
    }
    // Restoring long division of the 256-bit product by `den`, one bit of `low` at a time.
    // The remainder stays below `den`; `carry` holds the bit shifted out of a 128-bit word.
    let mut rem = high;
    let mut quot: u128 = 0;
    for bit in (0..128).rev() {
        let carry = rem >> 127;
        rem = (rem << 1) | ((low >> bit) & 1);
        quot <<= 1;
        if carry == 1 || rem >= den {
            rem = rem.wrapping_sub(den);
            quot |= 1;
        }
    }
    quot
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wide_product_of_the_largest_values() {
        // (2^128 - 1)^2 = 2^256 - 2^129 + 1.
        assert_eq!(mul_wide(u128::MAX, u128::MAX), (u128::MAX - 1, 1));
        assert_eq!(mul_wide(1 << 127, 4), (2, 0));
        assert_eq!(mul_wide(0, u128::MAX), (0, 0));
    }

    #[test]
    fn slow_path_matches_hand_values() {
        // x * num overflows 128 bits, the quotient does not.
        let x = 1u128 << 100;
        let num = (1u128 << 100) - 1;
        let den = 1u128 << 100;
        assert_eq!(mul_div_floor(x, num, den), (1u128 << 100) - 1);
        assert_eq!(mul_div_floor(u128::MAX, 3, 4), u128::MAX / 4 * 3 + 2);
        assert_eq!(mul_div_floor(7, 1, 0), 0);
        assert_eq!(mul_div_floor(u128::MAX, 2, 1), u128::MAX);
    }

    proptest! {
        #[test]
        fn wide_product_matches_narrow_when_it_fits(x in any::<u64>(), y in any::<u64>()) {
            let (hi, lo) = mul_wide(u128::from(x), u128::from(y));
            prop_assert_eq!(hi, 0);
            prop_assert_eq!(lo, u128::from(x) * u128::from(y));
        }

        #[test]
        fn quotient_is_the_exact_floor(x in any::<u128>(), a in any::<u128>(), b in any::<u128>()) {
            let (num, den) = if a <= b { (a, b.max(1)) } else { (b, a) };
            let q = mul_div_floor(x, num, den);
            // q * den <= x * num < (q + 1) * den, compared as 256-bit numbers.
            let lhs = mul_wide(q, den);
            let prod = mul_wide(x, num);
            prop_assert!(lhs <= prod);
            let (h, l) = mul_wide(q, den);
            let (l2, c) = l.overflowing_add(den);
            let next = (h + u128::from(c), l2);
            prop_assert!(prod < next);
        }
    }
}
