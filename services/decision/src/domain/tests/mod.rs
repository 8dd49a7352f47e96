//! Tests of the decision core: hand-computed rankings and placements, the fold, and
//! properties over random clusters.

mod decide;
mod hourly;
mod listing;
mod promise;
mod props;
mod rank;
mod state;
pub(crate) mod support;
