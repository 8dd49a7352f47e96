//! `fairshare simulate ...`: the trace-driven simulator, run as `fairshare-sim ...` with the
//! same arguments.
//!
//! Place in the flow: outside the running system (no NATS). The simulator is its own binary,
//! with its own allocator and a report writer the other commands do not need; this command
//! only finds it and hands over, as `cargo` does with its external commands, so `fairshare`
//! stays the operators' one entry point.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use clap::Args;

/// The simulator's own arguments (`fairshare simulate --help` shows them).
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Passed to `fairshare-sim` as they are: `trace --trace FILE --nodes N ...`,
    /// `scenario NAME`, `scenario --list`, `load FILE ...`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Where the simulator binary is: `FAIRSHARE_SIM_BIN`, else beside this executable (how
/// `cargo build` and an install lay them out), else `fairshare-sim` on the `PATH`.
fn simulator() -> PathBuf {
    if let Some(path) = std::env::var_os("FAIRSHARE_SIM_BIN") {
        return PathBuf::from(path);
    }
    let name = format!("fairshare-sim{}", std::env::consts::EXE_SUFFIX);
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(&name)))
        .filter(|beside| beside.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Runs the simulator with `args.args` and returns its exit status's code (1 if a signal
/// ended it). `connection` is the `FAIRSHARE_NATS_*` variables to set for it: `fairshare`'s own
/// connection flags (`fairshare --nats-url ... simulate load FILE`), which `fairshare-sim load`
/// reads from them; a flag given after `simulate` still wins.
pub fn simulate(args: SimulateArgs, connection: &[(&str, OsString)]) -> anyhow::Result<u8> {
    let sim = simulator();
    let mut command = Command::new(&sim);
    // The simulator names itself in its usage and errors by how it was called: as
    // `fairshare simulate`, so `fairshare simulate trace --help` shows the line to type.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::arg0(&mut command, "fairshare simulate");
    let status = command
        .args(&args.args)
        .envs(connection.iter().map(|(k, v)| (k, v)))
        .status()
        .with_context(|| {
            format!(
                "cannot run the simulator {}: build it with `cargo build --release -p \
                 fairshare-sim`, or name it with FAIRSHARE_SIM_BIN",
                sim.display()
            )
        })?;
    Ok(status
        .code()
        .map_or(1, |code| u8::try_from(code).unwrap_or(1)))
}
