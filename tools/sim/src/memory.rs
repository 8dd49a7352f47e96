//! How the simulator's process is given memory: set once, first thing in `main` (the
//! `fairshare-sim` binary's and the replay bench's), before a run grows its log.
//!
//! With transparent huge pages on for every mapping (`always`, as on this project's
//! machines), the first touch of memory clears a whole 2 MiB page. mimalloc hands memory it
//! freed back to the kernel after 10 ms, and a run frees and reuses its small vectors all the
//! time, so the same memory was cleared again and again: on 30 days of msft-itp at 1,024 GPUs,
//! 0.4-0.8 s of system time in a 3.3-3.9 s run. With ordinary 4 KiB pages only what is touched
//! is cleared: 0.1-0.5 s (four runs each, alternating; see the README, "Simulator"). What a
//! run computes does not change.

/// Asks the kernel not to back this process's memory with transparent huge pages. An error
/// (a kernel without the setting, another system) leaves the process as it was: only slower.
pub fn prefer_small_pages() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        rustix::thread::disable_transparent_huge_pages(true)?;
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn the_process_asks_for_small_pages() {
        super::prefer_small_pages().expect("the kernel takes the setting");
        assert_eq!(
            rustix::thread::transparent_huge_pages_are_disabled().ok(),
            Some(true)
        );
    }
}
