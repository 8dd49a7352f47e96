//! The simulator against real traces and constructed scenarios: one binary, a module per concern.

mod replay;
mod scenarios;
mod support;
