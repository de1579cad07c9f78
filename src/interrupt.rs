//! Stopping a run gracefully on SIGTERM or SIGINT.
//!
//! A scheduler stops a job with SIGTERM (systemd, Kubernetes, `timeout`),
//! a person with Ctrl-C. The first signal asks the run to stop:
//!
//! - while the sides are read and diffed (nothing written yet), the work is
//!   dropped at once ([`cancellable`]);
//! - during the backfill, no new write batch starts; the batches in flight
//!   finish and are recorded in the ledger ([`check`] before each batch);
//! - before the report folder is committed, the run stops ([`check`]).
//!
//! The run then ends as any failed run does: recorded `failed`
//! (interrupted) in the state store, its lock released, its staging folder
//! removed, the metrics file and the trouble notification written, exit
//! status 2. A second signal exits at once (status 2); what that leaves
//! (a lock row on SQLite, a hidden staging folder) is cleaned up by the next
//! run, as after a crash.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use anyhow::{bail, Result};
use tokio::sync::watch;

/// The signal received first (its number), or 0.
static RECEIVED: AtomicU8 = AtomicU8::new(0);

/// Wakes [`cancellable`] waiters when the first signal comes.
static WAKE: OnceLock<watch::Sender<bool>> = OnceLock::new();

fn wake() -> &'static watch::Sender<bool> {
    WAKE.get_or_init(|| watch::channel(false).0)
}

/// The name of a signal number this module handles.
fn name(signal: u8) -> &'static str {
    match signal {
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// The signal that asked this run to stop, if one did.
pub fn requested() -> Option<&'static str> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(name(s)),
    }
}

/// Records a stop request as if `signal` had been received (what the
/// signal task does; also for tests in the process).
pub fn request(signal: u8) {
    if RECEIVED
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        wake().send_replace(true);
    }
}

/// Listens for SIGTERM and SIGINT on the current runtime: the first asks
/// the run to stop, a second exits the process at once. Call once, inside
/// the runtime, before the run starts.
pub fn install() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::warn!(
                message = "Cannot listen for SIGTERM/SIGINT; a signal will stop the run at once."
            );
            return;
        };
        tokio::spawn(async move {
            let mut seen = 0u32;
            loop {
                let got: u8 = tokio::select! {
                    _ = term.recv() => 15,
                    _ = int.recv() => 2,
                };
                seen += 1;
                if seen == 1 {
                    request(got);
                    crate::logging::stderr_line(
                        "warn",
                        &format!(
                            "{} received: stopping the run (no new write batch; the batch in flight finishes and is recorded). A second signal exits at once",
                            name(got)
                        ),
                    );
                } else {
                    crate::logging::stderr_line(
                        "error",
                        &format!(
                            "{} received again: exiting at once; the next run cleans up this run's lock and staging folder",
                            name(got)
                        ),
                    );
                    std::process::exit(2);
                }
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let mut seen = 0u32;
        while tokio::signal::ctrl_c().await.is_ok() {
            seen += 1;
            if seen == 1 {
                request(2);
            } else {
                std::process::exit(2);
            }
        }
    });
}

/// The error of a run stopped by a signal, saying where it stopped.
pub fn error(job: &str, during: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "job `{job}`: interrupted by {} {during}; the run is recorded as failed. Run it again to finish",
        requested().unwrap_or("a signal")
    )
}

/// Fails when a stop was requested: call it before each step that commits
/// or writes (`during` says where the run stopped, e.g. "before writing
/// more").
pub fn check(job: &str, during: &str) -> Result<()> {
    if requested().is_some() {
        return Err(error(job, during));
    }
    Ok(())
}

/// `work`, dropped as soon as a stop is requested (for stages that write
/// nothing: reading, diffing, looking up).
pub async fn cancellable<T>(
    job: &str,
    during: &str,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    let mut rx = wake().subscribe();
    if requested().is_some() {
        bail!(error(job, during));
    }
    tokio::select! {
        done = work => done,
        _ = rx.wait_for(|stop| *stop) => Err(error(job, during)),
    }
}
