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

/// Makes glibc hand memory back to the operating system as it is freed, for the rest of
/// a long-running process (the supervisor). Call it once, early.
///
/// [`release_free_memory`] alone does not keep such a process flat: `malloc_trim`
/// releases the free space at the top of the main heap and free pages inside every heap,
/// but never the top of another thread's arena, and that is where a step thread's freed
/// memory gathers. glibc trims such a top itself when a free leaves it larger than the
/// trim threshold, but the threshold rises by itself: each free of a block larger than the
/// mmap threshold (a file read whole, say) raises the mmap threshold to its size and the
/// trim threshold to twice that, up to 64 MiB. So the step threads' arenas each kept the
/// most their steps ever used, and the supervisor's memory crept up with rarer, larger
/// steps (BENCHMARKS.md, the soak). Fixing both thresholds (128 KiB, glibc's defaults)
/// stops them rising, and a top pad of 64 KiB (instead of 128 KiB) halves what each
/// arena keeps. Does nothing with another C library.
pub fn return_freed_memory_promptly() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (param, value) in [
        (libc::M_MMAP_THRESHOLD, 128 * 1024),
        (libc::M_TRIM_THRESHOLD, 128 * 1024),
        (libc::M_TOP_PAD, 64 * 1024),
    ] {
        // SAFETY: `mallopt` sets one of the allocator's parameters under its own lock;
        // glibc documents it as callable at any time, and these values are in range.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(param, value);
        }
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

    /// The probe for the test below, run in a child process of its own so that no other
    /// test's allocations (nor its `mallopt`) mix with it. In a thread: a 16 MiB block
    /// freed (the thresholds rise to 16 and 32 MiB unless fixed), then 8 MiB in 1 KiB
    /// pieces, all freed, so the thread's arena has an 8 MiB free top. Then a trim, as
    /// the supervisor makes. Prints how much resident memory that left behind.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    #[ignore = "a probe: `a_threads_freed_memory_goes_back_once_the_thresholds_are_fixed` runs it"]
    fn probe_a_threads_freed_top() {
        if std::env::var_os("WARDEN_SYS_PROBE_TUNED").is_some() {
            super::return_freed_memory_promptly();
        }
        let before = rss_kib();
        std::thread::spawn(|| {
            let big = vec![1u8; 16 << 20];
            assert_eq!(big[12345], 1);
            drop(big);
            let pieces: Vec<Box<[u8; 1024]>> = (0..8192).map(|_| Box::new([7u8; 1024])).collect();
            assert!(pieces.iter().all(|p| p[1023] == 7));
        })
        .join()
        .unwrap();
        super::release_free_memory();
        let kept = rss_kib().saturating_sub(before);
        use std::io::Write;
        writeln!(std::io::stdout().lock(), "probe-kept-kib={kept}").unwrap();
    }

    /// What a child running the probe kept resident, in KiB.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn probe_kept_kib(tuned: bool) -> u64 {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "tests::probe_a_threads_freed_top",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        // The allocator's settings from the environment would change both arms.
        for var in [
            "GLIBC_TUNABLES",
            "MALLOC_ARENA_MAX",
            "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TOP_PAD_",
            "MALLOC_TRIM_THRESHOLD_",
            "WARDEN_SYS_PROBE_TUNED",
        ] {
            cmd.env_remove(var);
        }
        if tuned {
            cmd.env("WARDEN_SYS_PROBE_TUNED", "1");
        }
        let out = cmd.output().unwrap();
        // libtest may print the probe's line on either stream.
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "the probe failed: {text}");
        text.lines()
            .find_map(|l| l.split("probe-kept-kib=").nth(1))
            .unwrap_or_else(|| panic!("the probe printed no figure: {text}"))
            .trim()
            .parse()
            .unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_threads_freed_memory_goes_back_once_the_thresholds_are_fixed() {
        // As glibc ships, the thread's 8 MiB stay resident, trim or no trim; with the
        // thresholds fixed, they go back as they are freed.
        let untuned = probe_kept_kib(false);
        let tuned = probe_kept_kib(true);
        assert!(
            untuned >= 6 * 1024,
            "the probe shows what it guards against: {untuned} KiB kept"
        );
        assert!(
            tuned <= 2 * 1024,
            "at most 2 MiB kept with the thresholds fixed, not {tuned} KiB (untuned: {untuned} KiB)"
        );
    }
}
