//! Stripe (emulated, over real HTTP on 127.0.0.1) → SQLite through the
//! binary: `recon demo`, faults past the retry cap, a wrong key, and logs.

mod common;

use common::{recon_async as recon, summary, text};

use std::process::Output;

use recon_stripe::emulator::{Emulator, EmulatorConfig, Fault, FaultKind, ObjectKind};

#[test]
fn demo_runs_dry_run_apply_and_rerun_offline() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
        .args(["demo", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    // Orphans, mismatches and duplicates stay open: exit 1 by the contract.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let dry = summary(&out.join("1-dry-run"));
    let apply = summary(&out.join("2-apply"));
    let rerun = summary(&out.join("3-rerun"));
    let gaps = dry["gaps"].as_u64().unwrap();
    assert!(gaps > 10, "{dry}");
    assert_eq!(dry["backfilled"], 0);
    assert_eq!(dry["pending"], 4, "charges minutes old are pending: {dry}");
    assert!(dry["orphans"].as_u64().unwrap() >= 3, "{dry}");
    assert!(dry["mismatches"].as_u64().unwrap() >= 2, "{dry}");
    assert!(dry["duplicates"].as_u64().unwrap() >= 1, "{dry}");
    assert!(out.join("1-dry-run/plan.jsonl").exists());
    assert_eq!(apply["backfilled"].as_u64().unwrap(), gaps, "{apply}");
    assert_eq!(apply["backfill_failed"], 0);
    assert_eq!(rerun["gaps"], 0, "{rerun}");
    assert_eq!(rerun["backfilled"], 0);
    assert_eq!(rerun["resolved"].as_u64().unwrap(), gaps, "{rerun}");
    assert_eq!(
        rerun["orphans"], dry["orphans"],
        "orphans are never deleted"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    for name in ["1-dry-run", "2-apply", "3-rerun"] {
        assert!(stdout.contains(name), "{stdout}");
        for file in [
            "summary.json",
            "summary.csv",
            "gaps.csv",
            "orphans.csv",
            "mismatches.csv",
            "duplicates.csv",
            "pending.csv",
        ] {
            assert!(out.join(name).join(file).exists(), "{name}/{file}");
        }
    }
}

struct Job {
    dir: tempfile::TempDir,
    emulator: Emulator,
}

impl Job {
    async fn new() -> Job {
        let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
        let now = jiff::Timestamp::now().as_second();
        for i in 0..300 {
            emulator.insert(
                ObjectKind::Charge,
                Emulator::charge(
                    &format!("ch_{i:05}"),
                    100 + i,
                    "usd",
                    "succeeded",
                    now - 7200 + i * 10,
                ),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ledger.db");
        common::stripe_ledger_config(dir.path(), &emulator.base_url, &db, "");
        common::stripe_ledger(&db).await;
        Job { dir, emulator }
    }

    async fn run(&self, key: &str, out: &str, log: &str) -> Output {
        recon(
            vec![
                "run".into(),
                "--config".into(),
                self.dir.path().join("recon.toml").display().to_string(),
                "--out".into(),
                self.dir.path().join(out).display().to_string(),
            ],
            vec![
                ("RECON_TEST_STRIPE_KEY", key.to_string()),
                ("RECON_LOG", log.to_string()),
            ],
        )
        .await
    }

    async fn rows(&self) -> i64 {
        let ledger = format!("sqlite://{}", self.dir.path().join("ledger.db").display());
        common::count(&ledger, "SELECT COUNT(*) FROM payments").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_to_sqlite_backfills_and_never_logs_the_key() {
    sqlx::any::install_default_drivers();
    let job = Job::new().await;
    let key = job.emulator.api_key.clone();
    let o = job.run(&key, "first", "trace").await;
    assert_eq!(
        o.status.code(),
        Some(0),
        "all 300 backfilled, nothing open: {}",
        text(&o)
    );
    assert_eq!(summary(&job.dir.path().join("first"))["backfilled"], 300);
    assert_eq!(job.rows().await, 300);
    let logs = String::from_utf8_lossy(&o.stderr);
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG"),
        "trace logs were captured"
    );
    assert!(!logs.contains(&key), "the API key leaked into the logs");
    for file in std::fs::read_dir(job.dir.path().join("first")).unwrap() {
        let body = std::fs::read_to_string(file.unwrap().path()).unwrap();
        assert!(!body.contains(&key), "the API key leaked into a report");
    }
    job.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_past_the_cap_exit_2_naming_endpoint_and_request_and_write_nothing() {
    sqlx::any::install_default_drivers();
    let job = Job::new().await;
    job.emulator.set_faults(vec![Fault {
        kind: FaultKind::ServerError,
        after: 0,
        times: 10_000,
    }]);
    let key = job.emulator.api_key.clone();
    let o = job.run(&key, "failed", "warn").await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("GET /v1/charges") && err.contains("req_"),
        "{err}"
    );
    assert!(
        !job.dir.path().join("failed").exists(),
        "no reports for a failed run"
    );
    assert_eq!(job.rows().await, 0);
    job.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_exits_2_pointing_at_the_key_setting() {
    sqlx::any::install_default_drivers();
    let job = Job::new().await;
    let o = job
        .run("sk_test_not_the_right_one_987", "denied", "trace")
        .await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("401") && err.contains("api_key"), "{err}");
    assert!(!err.contains("sk_test_not_the_right_one_987"), "{err}");
    job.emulator.shutdown().await;
}
