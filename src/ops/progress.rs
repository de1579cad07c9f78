//! The run's spans (for `--log-format json`) and progress on a terminal.

use std::future::Future;

use tracing::Instrument;

/// The target of recon's own spans; the human log format leaves them out
/// so its lines stay as they were.
pub const SPAN_TARGET: &str = "recon::run";

/// The span of one run: `job` now, `run_id` once the state store gave one
/// ([`super::note_run`] records it).
pub fn run_span(job: &str) -> tracing::Span {
    super::note_job(job);
    tracing::info_span!(target: SPAN_TARGET, "run", job = job, run_id = tracing::field::Empty)
}

/// Runs `work` inside the phase span `name` (read, diff, backfill, report).
pub async fn phase<F: Future>(name: &'static str, work: F) -> F::Output {
    let span = tracing::info_span!(target: SPAN_TARGET, "phase", phase = name);
    work.instrument(span).await
}
