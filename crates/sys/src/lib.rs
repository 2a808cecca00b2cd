//! The calls into the operating system's C library that no safe crate offers. This is
//! the only crate of Warden's with `unsafe` code (every other one forbids it): one
//! audited call per function, allowed where it is made.

/// Hands the memory the allocator holds free back to the operating system (glibc's
/// `malloc_trim`), and says whether any was. A long-running supervisor needs it: glibc
/// keeps what its step threads freed in per-thread arenas, resident, and without a trim
/// that memory creeps up by about 0.75 KB per task run (BENCHMARKS.md, the soak). Does
/// nothing and returns `false` with another C library.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes a byte count and works on the allocator's own
        // state under the allocator's own locks; glibc documents it as safe to call from
        // any thread at any time, and it frees nothing that is still allocated.
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        released == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    /// This process's resident memory, in KiB.
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_memory_kept_by_a_threads_arena_goes_back() {
        // A thread allocates 64 MiB in small pieces and frees all but one piece in a
        // hundred: glibc keeps the freed pages resident in that thread's arena.
        let keep = std::thread::spawn(|| {
            let pieces: Vec<Box<[u8; 64]>> = (0..1_000_000).map(|_| Box::new([7u8; 64])).collect();
            pieces.into_iter().step_by(100).collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        let before = rss_kib();
        assert!(super::release_free_memory(), "some memory was released");
        let after = rss_kib();
        assert!(
            after + 32 * 1024 < before,
            "at least 32 MiB went back: {before} KiB → {after} KiB"
        );
        assert_eq!(keep.len(), 10_000);
        assert!(
            keep.iter().all(|p| p[63] == 7),
            "what is still allocated is intact"
        );
    }
}
