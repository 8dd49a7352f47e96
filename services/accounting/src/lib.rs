//! Accounting service: folds job lifecycle, budget tree and inventory events into exact
//! sliding-window usage per allocation, and publishes usage snapshots for the decision service.
//!
//! Not built yet (issue [2/5]); this crate exists so the workspace has its final shape.
