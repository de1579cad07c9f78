//! CPU priority of the threads that do work beside a run's critical path.
//!
//! A first dry run of the 2M bench files records 61,800 new discrepancies
//! in the state store (SQLite's one writer, on sqlx's worker thread) while
//! its reports are written on three threads and its diff's lists are freed
//! on a fourth: on two cores the history's write, the longest of them and
//! the one the run's end waits for, had a core to itself only part of the
//! time (about 50 ms alone, 80-95 ms beside the reports). The threads whose
//! work can wait now yield to it: their nice value is raised, on Linux a
//! per-thread attribute (`setpriority(2)`, "the nice value is a per-thread
//! attribute"), so the thread that lowers itself slows nothing else of the
//! process. Elsewhere this is a no-op.

/// By how much a report writer beside the history's write lowers itself:
/// nice 10 weighs a tenth of nice 0 in Linux's scheduler.
pub const REPORTS: i32 = 10;

/// By how much the thread that frees what a command no longer reads
/// lowers itself: to the lowest priority (the process may exit first; the
/// kernel takes the pages back then).
pub const CLEANUP: i32 = 19;

/// Lowers the calling thread's priority by `by` (its nice value raised,
/// to at most 19; never raised above what it was, which needs a
/// privilege). Returns the thread's nice value after, or `None` where
/// threads have no nice value of their own or it could not be read.
pub fn lower_this_thread(by: i32) -> Option<i32> {
    imp::lower(by)
}

/// The calling thread's nice value (`None`: not on Linux, or unreadable).
pub fn this_thread_nice() -> Option<i32> {
    imp::nice()
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // Reviewed: two syscalls on this thread's own id (SAFETY below).
mod imp {
    pub fn nice() -> Option<i32> {
        // SAFETY: gettid has no preconditions; getpriority reads an
        // integer attribute of a thread id and touches no memory of ours.
        // -1 is a valid nice value: errno tells an error from it.
        unsafe {
            let tid = libc::gettid() as libc::id_t;
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
            (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
        }
    }

    pub fn lower(by: i32) -> Option<i32> {
        let now = nice()?;
        let to = now.saturating_add(by.max(0)).min(19);
        if to != now {
            // SAFETY: as in `nice`; setpriority only sets the attribute
            // (lowering a thread's own priority needs no privilege).
            let failed = unsafe {
                let tid = libc::gettid() as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, to) != 0
            };
            if failed {
                return Some(now);
            }
        }
        nice()
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn nice() -> Option<i32> {
        None
    }

    pub fn lower(_by: i32) -> Option<i32> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The nice value is the calling thread's own: lowered on one thread,
    /// it stays as it was on the thread that spawned it (were it the
    /// process's, the history's write would be slowed with the reports),
    /// and a thread spawned after keeps the spawner's.
    #[test]
    fn lowering_a_thread_leaves_the_others_as_they_were() {
        let before = this_thread_nice().expect("a Linux thread has a nice value");
        let lowered = std::thread::spawn(|| lower_this_thread(REPORTS))
            .join()
            .unwrap()
            .expect("readable after");
        assert_eq!(lowered, (before + REPORTS).min(19));
        assert_ne!(lowered, before, "the test runs below nice 19");
        assert_eq!(this_thread_nice(), Some(before));
        let sibling = std::thread::spawn(this_thread_nice).join().unwrap();
        assert_eq!(sibling, Some(before));
    }

    /// Lowered twice, a thread stops at 19; asked to go up (a negative
    /// step), it stays where it is.
    #[test]
    fn a_thread_is_lowered_to_at_most_19_and_never_raised() {
        let (first, second, up, start) = std::thread::spawn(|| {
            let start = this_thread_nice().unwrap();
            let first = lower_this_thread(REPORTS).unwrap();
            let second = lower_this_thread(CLEANUP).unwrap();
            let up = lower_this_thread(-20).unwrap();
            (first, second, up, start)
        })
        .join()
        .unwrap();
        assert_eq!(first, (start + REPORTS).min(19));
        assert_eq!(second, 19);
        assert_eq!(up, 19);
    }
}
