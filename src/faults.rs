//! Test-only fault hooks, compiled in only with the `fault-injection`
//! cargo feature.
//!
//! The integration tests enable the feature through the crate's
//! dev-dependency on itself (see `Cargo.toml`), so `cargo test` builds the
//! binary with the hooks while `cargo build` (the production binary) does
//! not: there, the environment variable is never read and the hooks do
//! nothing.

/// Environment variable of the crash hook: abort the process after this many
/// backfill items were written, before they are recorded as applied (the
/// worst moment to crash).
pub const FAULT_ABORT_AFTER: &str = "RECON_FAULT_ABORT_AFTER_ITEMS";

/// Whether this build has the fault hooks (the `fault-injection` feature).
pub const ENABLED: bool = cfg!(feature = "fault-injection");

/// After how many written backfill items to abort the process, from
/// [`FAULT_ABORT_AFTER`]; `None` when unset or not a number.
///
/// Without the `fault-injection` feature, always `None`; if the variable is
/// set anyway, a warning says it is ignored, so that a test relying on the
/// hook fails with the reason instead of a puzzling exit status.
pub fn abort_after_items() -> Option<usize> {
    let value = std::env::var_os(FAULT_ABORT_AFTER)?;
    if !ENABLED {
        eprintln!(
            "warning: {FAULT_ABORT_AFTER} is set but ignored: this build of recon has no fault \
             injection (it is compiled in only with the `fault-injection` cargo feature, \
             which `cargo test` enables)"
        );
        return None;
    }
    value.to_str()?.trim().parse().ok()
}

/// Environment variable of the history crash hook: abort the process once
/// the run's discrepancy history is committed and its reports are staged,
/// before the report folder is committed and the run recorded finished.
pub const FAULT_ABORT_AFTER_HISTORY: &str = "RECON_FAULT_ABORT_AFTER_HISTORY";

/// Whether [`FAULT_ABORT_AFTER_HISTORY`] is set (to anything) in a build
/// with the hooks; always `false` without the `fault-injection` feature.
pub fn abort_after_history() -> bool {
    ENABLED && std::env::var_os(FAULT_ABORT_AFTER_HISTORY).is_some()
}

/// Environment variable of the ledger-failure hook: recording the outcome
/// of webhook deliveries fails (as a lost state-store connection would)
/// once any delivery was answered.
pub const FAULT_WEBHOOK_MARK_FAILS: &str = "RECON_FAULT_WEBHOOK_MARK_FAILS";

/// Whether [`FAULT_WEBHOOK_MARK_FAILS`] is set (to anything) in a build with
/// the hooks; always `false` without the `fault-injection` feature.
pub fn webhook_mark_fails() -> bool {
    ENABLED && std::env::var_os(FAULT_WEBHOOK_MARK_FAILS).is_some()
}

/// Environment variable of the backfill ledger-failure hook: recording the
/// outcomes of backfill batches fails (as a lost state-store connection
/// would) from the first outcome on.
pub const FAULT_LEDGER_MARK_FAILS: &str = "RECON_FAULT_LEDGER_MARK_FAILS";

/// Whether [`FAULT_LEDGER_MARK_FAILS`] is set (to anything) in a build with
/// the hooks; always `false` without the `fault-injection` feature.
pub fn ledger_mark_fails() -> bool {
    ENABLED && std::env::var_os(FAULT_LEDGER_MARK_FAILS).is_some()
}

/// Environment variable of the report-page hook: rendering a run's
/// `report.html` fails (as a state store that cannot record the run's
/// totals, or a page that cannot be written, would).
pub const FAULT_HTML_FAILS: &str = "RECON_FAULT_HTML_FAILS";

/// Whether [`FAULT_HTML_FAILS`] is set (to anything) in a build with the
/// hooks; always `false` without the `fault-injection` feature.
pub fn html_fails() -> bool {
    ENABLED && std::env::var_os(FAULT_HTML_FAILS).is_some()
}

/// Environment variable of the slow-reader hook: a file side sleeps this
/// many milliseconds after each batch it parses, so that a test sees the
/// progress display at work however fast the machine reads.
pub const FAULT_READ_DELAY_MS: &str = "RECON_FAULT_READ_DELAY_MS";

/// The pause after each parsed file batch, from [`FAULT_READ_DELAY_MS`]
/// (read once); always `None` without the `fault-injection` feature.
pub fn read_delay() -> Option<std::time::Duration> {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| number(FAULT_READ_DELAY_MS).map(std::time::Duration::from_millis))
}

/// The number in environment variable `name` in a build with the hooks;
/// `None` when unset, not a number, or without the `fault-injection`
/// feature.
fn number(name: &str) -> Option<u64> {
    if !ENABLED {
        return None;
    }
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Environment variable of the signal hook: once the target's file side
/// has parsed this many records, the process sends itself SIGTERM (with
/// `kill`, through the real handler), so a test stops a run while the
/// target is read, at a known place rather than at a moment it guesses.
pub const FAULT_SIGTERM_AT_TARGET_RECORDS: &str = "RECON_FAULT_SIGTERM_AT_TARGET_RECORDS";

/// The target record count after which to send SIGTERM, from
/// [`FAULT_SIGTERM_AT_TARGET_RECORDS`] (read once); always `None` without
/// the `fault-injection` feature.
pub fn sigterm_at_target_records() -> Option<u64> {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *AT.get_or_init(|| number(FAULT_SIGTERM_AT_TARGET_RECORDS))
}

/// Sends this process SIGTERM, once, with `kill` (the signal handler
/// then does what it does for a scheduler's signal).
pub fn send_sigterm_once() {
    static SENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SENT.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let sent = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(std::process::id().to_string())
        .status();
    if !sent.is_ok_and(|s| s.success()) {
        eprintln!("warning: the test hook {FAULT_SIGTERM_AT_TARGET_RECORDS} could not run `kill`");
        return;
    }
    // Back to the read only once the handler has seen the signal, so the
    // read stops at its next batch however loaded the machine is.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while crate::interrupt::requested().is_none() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_tests_build_has_the_hooks() {
        // `cargo test` enables the feature through the dev-dependency on
        // the crate itself; without it the crash tests could not crash.
        let enabled = std::hint::black_box(ENABLED);
        assert!(
            enabled,
            "cargo test must build recon with `fault-injection`"
        );
    }
}
