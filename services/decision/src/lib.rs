//! Fair-share decision service: ranks allocations by window usage over allocated time and
//! places queued jobs onto nodes, publishing deterministic, replayable placement decisions.
//!
//! Not built yet (issue [3/5]); this crate exists so the workspace has its final shape.
