//! Preemption service: enforces the minimum-runtime contract, orders victims off for
//! under-served work with a grace period, requeues resumable jobs and drains cordoned nodes.
//!
//! Not built yet (issue [4/5]); this crate exists so the workspace has its final shape.
