//! Tests of the preemption core: hand-computed rule tests and a property test over simulated
//! workloads.

mod cycles;
mod debug;
mod pack;
mod promise;
mod rules;
mod support;
