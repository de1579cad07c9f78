//! Structured logs on stderr, filtered by `--log` / `RECON_LOG`.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a bad filter falls back to `warn`.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
