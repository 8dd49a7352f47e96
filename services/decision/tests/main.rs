//! The decision service binary run as a process: one binary, a module per concern.

mod audit_cli;
mod plain_logs;
mod sigkill;
