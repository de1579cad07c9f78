//! Memory of this process: its peak, for logs and run summaries; freeing
//! what a command no longer reads off its critical path.

/// Peak resident set size in MiB (Linux `VmHWM`), or 0 where unknown.
pub fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024)
        .unwrap_or(0)
}

/// Drops `value` on a thread of its own: what a command no longer reads
/// (a diff's arena of hundreds of MB, tens of thousands of strings) is
/// freed while it goes on, or not at all when it exits first (the kernel
/// takes the pages back whole). A 10M-row `recon diff` freed its outcome
/// for 90 ms before exiting; a 2M typed dry run, 20 ms after report.html.
/// The thread runs at the lowest priority (nice 19, [`crate::priority`]):
/// it yields to every other thread of the run. Should the thread not
/// start, `value` is dropped here.
pub fn drop_aside<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("recon-drop".into())
        .spawn(move || {
            crate::priority::lower_this_thread(crate::priority::CLEANUP);
            drop(value)
        });
}
