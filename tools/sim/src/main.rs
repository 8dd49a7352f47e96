//! `fairshare-sim`: replay a trace or a constructed scenario through fairshare and the
//! baselines, and write the policy report. See `fairshare-sim --help`.

mod cli;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    cli::Cli::parse().run()
}
