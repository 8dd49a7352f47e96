//! Tests of the preemption core: hand-computed rule tests and a property test over simulated
//! workloads.

mod cycles;
mod debug;
mod grace;
mod pack;
mod promise;
mod rules;
mod support;
