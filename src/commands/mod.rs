pub mod apply;
pub mod check;
pub mod demo;
pub mod demo_webhook;
pub mod diff;
pub mod history;
pub mod report;
pub mod run;
pub mod runs;

/// The edge of a command that writes under the job's lock (`recon run`,
/// `recon apply`): a two-worker runtime, the progress display (a terminal
/// only; its line is cleared when the work ends), the signal handler
/// installed inside the runtime, and a shutdown that does not wait for a
/// stopped run's blocking readers.
fn locked_command<T>(
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let _progress = crate::ops::progress::Display::start();
    let result = runtime.block_on(async {
        crate::interrupt::install();
        work.await
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
