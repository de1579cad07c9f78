//! Provider limits through the binary (issue 12): the Stripe emulator counts
//! requests strictly per one-second window at recon's configured limit
//! (25/s for a test key) while other clients of the account spend part of
//! it. `recon run` must finish with exact counts, never "failed after N
//! attempts"; when nothing gets through for `rate_limit_patience`, it exits
//! 2 naming that setting.

mod common;

use common::text;

use std::path::Path;
use std::process::Output;

use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind, RateLimitMode};

/// An emulator at 25 requests per one-second window, `others` percent of
/// which other clients spend, holding `charges` charges of the last hours.
async fn emulator(others: u32, charges: i64) -> Emulator {
    let emulator = Emulator::start(EmulatorConfig {
        rate_limit_per_sec: Some(25),
        rate_limit_mode: RateLimitMode::PerSecondWindow,
        others_percent: others,
        latency: std::time::Duration::from_millis(20),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let now = jiff::Timestamp::now().as_second();
    emulator.insert_many(
        ObjectKind::Charge,
        (0..charges).map(|i| {
            Emulator::charge(
                &format!("ch_{i:06}"),
                100 + i,
                "usd",
                "succeeded",
                now - 20 * 3600 + i * 10,
            )
        }),
    );
    emulator
}

/// A job reading the emulator's charges into an empty SQLite table.
async fn job(dir: &Path, base_url: &str, extra: &str) {
    let ledger = dir.join("ledger.db");
    common::stripe_ledger_config(dir, base_url, &ledger, extra);
    common::stripe_ledger(&ledger).await;
}

async fn rows(dir: &Path) -> i64 {
    let ledger = format!("sqlite://{}", dir.join("ledger.db").display());
    common::count(&ledger, "SELECT COUNT(*) FROM payments").await
}

/// Runs `recon run` on a blocking thread so the emulator keeps serving;
/// a run still going after [`common::PATIENCE`] is killed and fails the
/// test (a hang, not a slow machine).
async fn run(dir: &Path, key: &str, out: &str) -> Output {
    let mut cmd = common::recon();
    cmd.arg("run")
        .arg("--config")
        .arg(dir.join("recon.toml"))
        .arg("--out")
        .arg(dir.join(out))
        .env("RECON_TEST_STRIPE_KEY", key)
        .env("RECON_LOG", "warn");
    common::output_within(cmd, common::PATIENCE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_at_the_strict_limit_shared_with_other_clients_completes_with_exact_counts() {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    // Others spend 40% of the 25 per second; recon starts at its full
    // configured pace and must settle into the rest.
    let emulator = emulator(40, 4_000).await;
    job(dir.path(), &emulator.base_url, "").await;
    let o = run(dir.path(), &emulator.api_key, "shared").await;
    let stats = emulator.stats();
    assert_eq!(o.status.code(), Some(0), "{}\n{stats:?}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("failed after"), "{err}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("shared/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["source_records"], 4_000, "{summary}");
    assert_eq!(summary["gaps"], 4_000, "{summary}");
    assert_eq!(summary["backfilled"], 4_000, "{summary}");
    assert_eq!(rows(dir.path()).await, 4_000);
    // The other clients did leave recon short: the emulator refused some.
    assert!(stats.throttled > 0, "{stats:?}");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_at_the_strict_limit_at_most_one_percent_is_refused() {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    let emulator = emulator(0, 4_000).await;
    job(dir.path(), &emulator.base_url, "").await;
    let o = run(dir.path(), &emulator.api_key, "alone").await;
    let stats = emulator.stats();
    assert_eq!(o.status.code(), Some(0), "{}\n{stats:?}", text(&o));
    assert_eq!(rows(dir.path()).await, 4_000);
    assert!(
        stats.throttled * 100 <= stats.requests,
        "more than 1% of requests refused: {stats:?}"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_progress_for_rate_limit_patience_exits_2_naming_the_setting() {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    // Other clients spend the whole budget: nothing gets through.
    let emulator = emulator(100, 10).await;
    job(
        dir.path(),
        &emulator.base_url,
        r#"rate_limit_patience = "3s""#,
    )
    .await;
    let started = std::time::Instant::now();
    let o = run(dir.path(), &emulator.api_key, "starved").await;
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rate_limit_patience"), "{err}");
    assert!(err.contains("still rate limited after 3s"), "{err}");
    assert!(!err.contains("failed after"), "{err}");
    // It kept trying for the whole patience (a hang is caught by `run`'s
    // timeout, not by a bound on the time here).
    assert!(took >= std::time::Duration::from_secs(3), "{took:?}");
    // Retried for the whole 3 s (backoff caps of 0.25, 0.5 and 1 s add up
    // to 1.75 s, so at least 4 attempts), every one refused.
    let stats = emulator.stats();
    assert!(stats.requests >= 4, "{stats:?}");
    assert_eq!(stats.requests, stats.throttled, "{stats:?}");
    assert!(
        !dir.path().join("starved").exists(),
        "no reports for a failed run"
    );
    emulator.shutdown().await;
}
