//! Tests of the fold as a whole: hand-computed cases, and property tests against a brute-force
//! recomputation from the full list of intervals.

mod brute;
mod hand;
mod props;
pub(super) mod support;
