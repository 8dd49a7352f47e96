//! How the simulator's process is given memory: set once, first thing in `main` (the
//! `fairshare-sim` binary's and the replay bench's), before a run grows its log.
//!
//! mimalloc (v3, as the `mimalloc` crate builds it) asks the kernel for transparent huge pages
//! on the regions it maps, which this machine grants (its THP mode is `madvise`; under
//! `always` the kernel does so unasked). The first touch of such memory clears a whole 2 MiB
//! page, and mimalloc hands memory that stayed free for a second back to the kernel and takes
//! it again later: a run, which frees and reuses small vectors all the time, had the same
//! memory cleared again and again. On 30 days of msft-itp at 1,024 GPUs that was 0.4-0.8 s of
//! system time in a 3.3-3.9 s run; with ordinary 4 KiB pages, 0.1-0.5 s (four runs each,
//! alternating; see the README, "Simulator"). What a run computes does not change.
//!
//! The setting is the process's (every thread's), and programs it starts inherit it.

/// Asks the kernel not to back this process's memory with transparent huge pages, whatever
/// the allocator asks for. An error (a kernel without the setting, a sandbox that refuses it,
/// another system) leaves the process as it was: only slower.
pub fn prefer_small_pages() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        rustix::thread::disable_transparent_huge_pages(true)?;
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use rustix::thread::{disable_transparent_huge_pages, transparent_huge_pages_are_disabled};

    #[test]
    fn the_process_asks_for_small_pages() {
        // The setting is inherited: clear it first, so only the call under test can set it.
        // Where the kernel refuses the setting there is nothing to see.
        if disable_transparent_huge_pages(false).is_err() {
            return;
        }
        assert_eq!(transparent_huge_pages_are_disabled().ok(), Some(false));
        super::prefer_small_pages().expect("the kernel took the setting a moment ago");
        assert_eq!(transparent_huge_pages_are_disabled().ok(), Some(true));
    }
}
