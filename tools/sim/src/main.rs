//! `fairshare-sim`: replay a trace or a constructed scenario through fairshare and the
//! baselines, and write the policy report. See `fairshare-sim --help`.

mod cli;
mod folders;

use clap::Parser;

/// The simulator allocates and frees small maps and vectors in every decision cycle and
/// preemption pass. With mimalloc instead of glibc's allocator the baselines run about twice as
/// fast and fairshare 5-10% faster (`cargo bench -p fairshare-sim --bench replay`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // Only a speed setting: without it the run computes the same, more slowly.
    let _ = fairshare_sim::memory::prefer_small_pages();
    cli::Cli::parse().run()
}
