//! `backfill.via = "webhook"` end to end through the binary: an export file
//! as the source of truth, a SQLite table as the target, and a webhook
//! handler on 127.0.0.1 (`recon::webhook::receiver`) that deduplicates by
//! `Idempotency-Key` and creates the record in that table, like a user's
//! own handler would.

mod common;

use common::{summary, text, CHARGE_FIELDS};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use recon::webhook::receiver::{CreateHook, Receiver, ReceiverConfig};
use sha2::Sha256;
use sqlx::{Connection, Row};

/// Source charges; the target lacks every one with an odd index.
const CHARGES: i64 = 24;

struct Fixture {
    dir: tempfile::TempDir,
    now: i64,
}

fn target_url(dir: &Path) -> String {
    format!("sqlite://{}?mode=rwc", dir.join("target.db").display())
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let now = jiff::Timestamp::now().as_second();
        let mut csv = String::from("id,amount,currency,status,created\n");
        let mut conn = sqlx::SqliteConnection::connect(&target_url(dir.path()))
            .await
            .unwrap();
        sqlx::query(
            "CREATE TABLE payments (charge_id TEXT NOT NULL UNIQUE, amount_cents INTEGER, \
             currency TEXT, status TEXT, created_at TIMESTAMP)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        for i in 0..CHARGES {
            let (id, amount, created) = Self::charge(now, i);
            csv.push_str(&format!("{id},{amount},usd,succeeded,{created}\n"));
            if i % 2 == 0 {
                sqlx::query("INSERT INTO payments VALUES ($1, $2, 'usd', 'succeeded', $3)")
                    .bind(&id)
                    .bind(amount)
                    .bind(sql_time(created))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
        }
        std::fs::write(dir.path().join("charges.csv"), csv).unwrap();
        Fixture { dir, now }
    }

    fn charge(now: i64, i: i64) -> (String, i64, i64) {
        (format!("ch_{i:04}"), 1000 + i * 7, now - 3 * 3600 + i * 60)
    }

    fn gaps(&self) -> Vec<String> {
        (0..CHARGES)
            .filter(|i| i % 2 == 1)
            .map(|i| Self::charge(self.now, i).0)
            .collect()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A handler's creation step: inserts the delivered charge into the
    /// target table (a second insert of a key would fail: UNIQUE).
    /// A receiver started with `config` that creates each record in the
    /// target table.
    async fn receiver(&self, config: ReceiverConfig) -> Receiver {
        Receiver::start(ReceiverConfig {
            create: Some(self.create_hook()),
            ..config
        })
        .await
        .unwrap()
    }

    /// The job config delivering to `url` at 50/s, with `settings` among
    /// the webhook's settings.
    fn deliver_to(&self, url: &str, settings: &str) {
        self.write_config(&format!(
            "url = \"{url}\"\nrate_limit = \"50/s\"\n{settings}"
        ));
    }

    fn create_hook(&self) -> CreateHook {
        let url = target_url(self.dir.path());
        Arc::new(move |obj: serde_json::Value| {
            let url = url.clone();
            Box::pin(async move {
                let mut conn = sqlx::SqliteConnection::connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                let created: jiff::Timestamp = obj["created"]
                    .as_str()
                    .ok_or("no created")?
                    .parse()
                    .map_err(|e: jiff::Error| e.to_string())?;
                sqlx::query("INSERT INTO payments VALUES ($1, $2, $3, $4, $5)")
                    .bind(obj["id"].as_str().ok_or("no id")?.to_string())
                    .bind(obj["amount"].as_i64().ok_or("no amount")?)
                    .bind(obj["currency"].as_str().unwrap_or("").to_string())
                    .bind(obj["status"].as_str().unwrap_or("").to_string())
                    .bind(sql_time(created.as_second()))
                    .execute(&mut conn)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
    }

    /// The job config, with `webhook` as the body of
    /// `[jobs.charges.backfill.webhook]`.
    fn write_config(&self, webhook: &str) {
        let text = format!(
            r#"
[defaults]
reports = "{reports}"
state = "sqlite://{state}"

[jobs.charges]
{CHARGE_FIELDS}

{source}
[jobs.charges.target]
type = "sql"
url = "{target}"
table = "payments"
key = "charge_id"
columns = {{ amount = "amount_cents", created = "created_at" }}

[jobs.charges.backfill]
mode = "insert"
max_records = 1000
max_ratio = 1
via = "webhook"

[jobs.charges.backfill.webhook]
{webhook}
"#,
            reports = self.path("reports").display(),
            state = self.path("state.db").display(),
            source = common::file_side("charges", "source", &self.path("charges.csv")),
            target = target_url(self.dir.path()),
        );
        std::fs::write(self.path("recon.toml"), text).unwrap();
    }

    fn command(&self, args: &[&str], envs: &[(&str, &str)]) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"));
        // Fault hooks only when a test asks for them.
        c.args(args)
            .env_remove("RECON_FAULT_ABORT_AFTER_ITEMS")
            .env_remove("RECON_FAULT_WEBHOOK_MARK_FAILS")
            .envs(envs.iter().copied());
        c
    }

    /// `recon run` into `out`, on a blocking thread (the receiver keeps
    /// serving on this runtime).
    async fn run(&self, out: &str, extra: &[&str], envs: &[(&str, &str)]) -> Output {
        let config = self.path("recon.toml").display().to_string();
        let out = self.path(out).display().to_string();
        let mut args = vec!["run", "--config", &config, "--out", &out];
        args.extend_from_slice(extra);
        let mut c = self.command(&args, envs);
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
    }

    async fn target_keys(&self) -> Vec<String> {
        let mut conn = sqlx::SqliteConnection::connect(&target_url(self.dir.path()))
            .await
            .unwrap();
        let mut keys: Vec<String> = sqlx::query("SELECT charge_id FROM payments")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        keys.sort();
        keys
    }

    /// The delivery ledger's `updated_at` of every row.
    async fn ledger_times(&self) -> Vec<jiff::Timestamp> {
        let url = format!("sqlite://{}", self.path("state.db").display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("SELECT updated_at FROM recon_webhook_deliveries")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>(0).parse().unwrap())
            .collect()
    }

    /// The delivery ledger: external ID → status.
    async fn ledger(&self) -> HashMap<String, String> {
        let url = format!("sqlite://{}", self.path("state.db").display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("SELECT external_id, status FROM recon_webhook_deliveries")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }
}

fn sql_time(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .unwrap()
        .strftime("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// backfill.csv as external ID → (outcome, error).
fn backfill(dir: &Path) -> HashMap<String, (String, String)> {
    let mut r = csv::Reader::from_path(dir.join("backfill.csv")).unwrap();
    r.records()
        .map(|row| {
            let row = row.unwrap();
            (row[0].to_string(), (row[2].to_string(), row[3].to_string()))
        })
        .collect()
}

fn key_of(job: &str, id: &str, created: i64) -> String {
    let t = jiff::Timestamp::from_second(created).unwrap();
    recon::webhook::idempotency_key(job, id, &recon_core::format_timestamp(t))
}

fn all_created_once(stats: &recon::webhook::receiver::Stats, keys: &[String]) {
    for k in keys {
        assert_eq!(
            stats.created.get(k),
            Some(&1),
            "{k} created once: {stats:?}"
        );
    }
    assert_eq!(stats.created.len(), keys.len(), "{stats:?}");
}

fn gap_keys(f: &Fixture) -> Vec<String> {
    (0..CHARGES)
        .filter(|i| i % 2 == 1)
        .map(|i| {
            let (id, _, created) = Fixture::charge(f.now, i);
            key_of("charges", &id, created)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_then_200_is_delivered_once_and_a_rerun_sends_nothing() {
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            fail_once_every: Some(1),
            ..ReceiverConfig::default()
        })
        .await;
    f.deliver_to(&rx.url, "verify_after = \"0s\"");
    let o = f.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    let keys = gap_keys(&f);
    // Every gap: a 500, then the same key again, created once.
    assert_eq!(stats.server_errors, keys.len(), "{stats:?}");
    for k in &keys {
        assert_eq!(stats.per_key.get(k), Some(&2), "{k}: {stats:?}");
    }
    assert_eq!(stats.requests, 2 * keys.len());
    all_created_once(&stats, &keys);
    let rows = backfill(&f.path("r1"));
    assert_eq!(rows.len(), keys.len());
    assert!(rows.values().all(|(o, _)| o == "delivered"), "{rows:?}");
    let s = summary(&f.path("r1"));
    assert_eq!(s["webhook"]["delivered"], keys.len());
    assert_eq!(s["webhook"]["retries"], keys.len());
    assert_eq!(s["delivered_not_created"], 0);
    assert_eq!(s["backfilled"], keys.len());
    let mut want: Vec<String> = (0..CHARGES).map(|i| Fixture::charge(f.now, i).0).collect();
    want.sort();
    assert_eq!(f.target_keys().await, want);
    // The ledger says delivered; a rerun finds nothing to send.
    let ledger = f.ledger().await;
    assert!(
        f.gaps().iter().all(|g| ledger[g] == "delivered"),
        "{ledger:?}"
    );
    let o = f.run("r2", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(rx.stats().requests, 2 * keys.len(), "nothing sent again");
}

/// A storm of 429s with `Retry-After: 1` (a handler behind a gateway
/// saying "slow down"): every delivery waits as told, nothing is given up
/// or failed, and every record is created exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_429s_is_waited_out_and_each_record_is_created_once() {
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            throttle_first: 8,
            throttle_retry_after: 1,
            ..ReceiverConfig::default()
        })
        .await;
    f.deliver_to(&rx.url, "verify_after = \"0s\"");
    let o = f.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    let keys = gap_keys(&f);
    assert_eq!(stats.throttled, 8, "{stats:?}");
    assert_eq!(stats.requests, keys.len() + 8, "{stats:?}");
    all_created_once(&stats, &keys);
    let waited = stats.first_after_throttle_at.unwrap() - stats.first_throttled_at.unwrap();
    assert!(
        waited >= std::time::Duration::from_millis(950),
        "Retry-After: 1 honoured: the first request after the 429s came {waited:?} after the first 429"
    );
    let rows = backfill(&f.path("r1"));
    assert_eq!(rows.len(), keys.len());
    assert!(rows.values().all(|(o, _)| o == "delivered"), "{rows:?}");
    let s = summary(&f.path("r1"));
    assert_eq!(s["webhook"]["delivered"], keys.len(), "{s}");
    assert_eq!(s["webhook"]["failed"], 0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_is_already_done_and_never_retried() {
    let f = Fixture::new().await;
    // The handler does the work, then fails before answering (500): the
    // retry is answered 409 "already processed".
    let rx = f
        .receiver(ReceiverConfig {
            fail_after_work_once_every: Some(1),
            ..ReceiverConfig::default()
        })
        .await;
    f.deliver_to(&rx.url, "verify_after = \"0s\"");
    let o = f.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    let keys = gap_keys(&f);
    // One 500, one 409, and no third attempt: a 409 is final.
    assert_eq!(stats.conflicts, keys.len(), "{stats:?}");
    for k in &keys {
        assert_eq!(stats.per_key.get(k), Some(&2), "{k}: {stats:?}");
    }
    all_created_once(&stats, &keys);
    let rows = backfill(&f.path("r1"));
    assert!(rows.values().all(|(o, _)| o == "already_done"), "{rows:?}");
    let s = summary(&f.path("r1"));
    assert_eq!(s["webhook"]["already_done"], keys.len());
    let ledger = f.ledger().await;
    assert!(
        f.gaps().iter().all(|g| ledger[g] == "already_done"),
        "{ledger:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_times_out_and_is_retried_with_the_same_key() {
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            // Far beyond the timeout, so a loaded machine cannot blur the two:
            // the first attempt always times out, the retry (answered at once,
            // 409: the work is done) never does.
            slow_first: Some(Duration::from_secs(10)),
            ..ReceiverConfig::default()
        })
        .await;
    f.deliver_to(
        &rx.url,
        "concurrency = 16\ntimeout = \"3s\"\nverify_after = \"0s\"",
    );
    let o = f.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    let keys = gap_keys(&f);
    // Each key twice (the timed-out attempt and its retry), no other key.
    assert_eq!(stats.per_key.len(), keys.len(), "{stats:?}");
    for k in &keys {
        assert_eq!(stats.per_key.get(k), Some(&2), "{k}: {stats:?}");
    }
    assert_eq!(stats.without_key, 0);
    all_created_once(&stats, &keys);
    let s = summary(&f.path("r1"));
    assert_eq!(s["webhook"]["retries"], keys.len(), "{s}");
    assert_eq!(s["backfilled"], keys.len(), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_delivery_then_rerun_each_record_is_created_once() {
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            latency: Duration::from_millis(250),
            ..ReceiverConfig::default()
        })
        .await;
    f.write_config(&format!(
        "url = \"{}\"\nrate_limit = \"4/s\"\nconcurrency = 2\nverify_after = \"0s\"",
        rx.url
    ));
    let config = f.path("recon.toml").display().to_string();
    let out = f.path("r1").display().to_string();
    let mut child = f
        .command(&["run", "--config", &config, "--out", &out], &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // 12 deliveries at 4/s take 3 s: killing after the third leaves a wide
    // window however loaded the machine is.
    common::wait_until_async("three deliveries", common::PATIENCE, || async {
        rx.stats().requests >= 3
    })
    .await;
    // SIGKILL while deliveries are in flight.
    child.kill().unwrap();
    child.wait().unwrap();
    let keys = gap_keys(&f);
    let at_kill = rx.stats();
    assert!(
        at_kill.requests < keys.len(),
        "killed too late: {at_kill:?}"
    );
    let ledger = f.ledger().await;
    let recorded: Vec<String> = ledger
        .iter()
        .filter(|(_, s)| *s == "delivered")
        .map(|(k, _)| k.clone())
        .collect();
    assert!(
        ledger.values().any(|s| s == "planned"),
        "the kill left items planned: {ledger:?}"
    );
    let o = f.run("r2", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    // The handler saw every key and created each record exactly once.
    for k in &keys {
        assert!(stats.per_key.contains_key(k), "{k} never delivered");
    }
    all_created_once(&stats, &keys);
    // Items recorded as delivered before the kill were never sent again;
    // every repeat (a POST answered but not yet recorded) was deduplicated.
    let by_id: HashMap<String, String> = (0..CHARGES)
        .filter(|i| i % 2 == 1)
        .map(|i| {
            let (id, _, created) = Fixture::charge(f.now, i);
            (id.clone(), key_of("charges", &id, created))
        })
        .collect();
    for id in &recorded {
        assert_eq!(
            stats.per_key[&by_id[id]], at_kill.per_key[&by_id[id]],
            "{id} resent"
        );
    }
    // Only what was in flight (or answered, not yet recorded) at the kill
    // went again: at most 2 × concurrency.
    let repeats: usize = stats.per_key.values().map(|n| n - 1).sum();
    assert!(repeats <= 4, "{stats:?}");
    let mut want: Vec<String> = (0..CHARGES).map(|i| Fixture::charge(f.now, i).0).collect();
    want.sort();
    assert_eq!(f.target_keys().await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_verify_with_the_secret_and_fail_with_a_wrong_one() {
    let secret = "whsec_test_4f9a1c77e2";
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            secret: Some(secret.into()),
            ..ReceiverConfig::default()
        })
        .await;
    f.deliver_to(
        &rx.url,
        "verify_after = \"0s\"\nsigning_secret = \"${RECON_TEST_WH_SECRET}\"",
    );
    let o = f.run("r1", &[], &[("RECON_TEST_WH_SECRET", secret)]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    assert_eq!(stats.bad_signatures, 0);
    all_created_once(&stats, &gap_keys(&f));
    // Checked here too, independently of recon's code: HMAC-SHA256 of
    // "t.body" under the secret.
    for req in &stats.bodies {
        let header = req
            .lines()
            .find_map(|l| l.strip_prefix("recon-signature: "))
            .expect("signed");
        let body = req.lines().last().unwrap();
        let (t, v1) = header.split_once(",v1=").unwrap();
        let t = t.strip_prefix("t=").unwrap();
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.{body}").as_bytes());
        let want: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(v1, want);
    }

    // Another job signing with a wrong secret: every delivery is refused.
    let g = Fixture::new().await;
    let rx = Receiver::start(ReceiverConfig {
        secret: Some(secret.into()),
        create: Some(g.create_hook()),
        ..ReceiverConfig::default()
    })
    .await
    .unwrap();
    g.write_config(&format!(
        "url = \"{}\"\nrate_limit = \"50/s\"\nverify_after = \"0s\"\nsigning_secret = \"whsec_wrong_0000000\"",
        rx.url
    ));
    let o = g.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stats = rx.stats();
    let n = g.gaps().len();
    assert_eq!(stats.bad_signatures, n, "{stats:?}");
    assert!(stats.created.is_empty());
    let rows = backfill(&g.path("r1"));
    assert!(
        rows.values().all(|(o, e)| o == "failed"
            && e.contains("401")
            && e.contains("signature does not match")),
        "{rows:?}"
    );
    assert_eq!(summary(&g.path("r1"))["backfill_failed"], n);
    // Refused items are not sent again by retries within the run.
    assert_eq!(stats.requests, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_acknowledges_but_never_creates_is_delivered_not_created() {
    let f = Fixture::new().await;
    let rx = Receiver::start(ReceiverConfig::default()).await.unwrap();
    f.deliver_to(&rx.url, "verify_after = \"2s\"");
    let o = f.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // The verification (recorded in the ledger after the target lookup)
    // came at least verify_after after the handler saw the last delivery.
    let last = rx.stats().last_request_at.expect("deliveries");
    let verified_at = f.ledger_times().await;
    assert_eq!(verified_at.len(), f.gaps().len());
    for t in verified_at {
        assert!(
            t >= last + jiff::SignedDuration::from_secs(2),
            "verified at {t}, last delivery at {last}: verify_after did not wait"
        );
    }
    let n = f.gaps().len();
    let rows = backfill(&f.path("r1"));
    assert_eq!(rows.len(), n);
    assert!(
        rows.values().all(|(o, _)| o == "delivered_not_created"),
        "{rows:?}"
    );
    let s = summary(&f.path("r1"));
    assert_eq!(s["delivered_not_created"], n, "{s}");
    assert_eq!(s["backfilled"], 0, "{s}");
    assert_eq!(s["gaps"], n, "{s}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("delivered_not_created {n}")),
        "{stdout}"
    );
    // The next run checks again, sends nothing, and still says so.
    let o = f.run("r2", &[], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(rx.stats().requests, n, "never sent again");
    let rows = backfill(&f.path("r2"));
    assert!(
        rows.values()
            .all(|(o, e)| o == "delivered_not_created" && e.contains("not sent again")),
        "{rows:?}"
    );
    // Once the handler is fixed and the records appear, the check says so.
    let hook = f.create_hook();
    for i in (0..CHARGES).filter(|i| i % 2 == 1) {
        let (id, amount, created) = Fixture::charge(f.now, i);
        let t = jiff::Timestamp::from_second(created).unwrap();
        hook(serde_json::json!({"id": id, "amount": amount, "currency": "usd", "status": "succeeded", "created": recon_core::format_timestamp(t)}))
            .await
            .unwrap();
    }
    let o = f.run("r3", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&f.path("r3"));
    assert_eq!(s["delivered_not_created"], 0, "{s}");
    assert_eq!(s["webhook"]["verified_earlier"], n, "{s}");
    assert_eq!(rx.stats().requests, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_plans_exactly_what_apply_sends_and_no_secret_is_in_any_report_or_log() {
    let token = "tok_Sec/ret#42?xyz";
    let secret = "whsec_Plan0123456789";
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            secret: Some(secret.into()),
            envelope: recon::webhook::Envelope::Stripe,
            // Retries log the endpoint: its path must not show.
            fail_once_every: Some(3),
            ..ReceiverConfig::default()
        })
        .await;
    // A catch-hook URL: the token is the path (Zapier, Make, n8n).
    let path_token = "zq81CatchToken77";
    let hook_url = format!("{}/catch/4471/{path_token}/", rx.url);
    let origin = rx.url.trim_end_matches("/hook").to_string();
    f.write_config(&format!(
        "url = \"{hook_url}\"\nenvelope = \"stripe\"\nrate_limit = \"50/s\"\nverify_after = \"0s\"\n\
         signing_secret = \"${{RECON_TEST_WH_SECRET}}\"\n\
         headers = {{ Authorization = \"Bearer ${{RECON_TEST_WH_TOKEN}}\", X-Source = \"recon\" }}"
    ));
    let envs = [
        ("RECON_TEST_WH_SECRET", secret),
        ("RECON_TEST_WH_TOKEN", token),
    ];
    let o = f.run("dry", &["--dry-run", "--log", "debug"], &envs).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(rx.stats().requests, 0, "a dry run sends nothing");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("would POST 12 deliveries"), "{stdout}");
    let plan_text = std::fs::read_to_string(f.path("dry/plan.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = plan_text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), f.gaps().len());
    let keys = gap_keys(&f);
    let mut planned: HashMap<String, String> = HashMap::new();
    for l in &lines {
        let w = &l["webhook"];
        assert_eq!(w["method"], "POST");
        assert_eq!(w["url"], format!("{origin}/***"));
        let digest: String = <Sha256 as sha2::Digest>::digest(hook_url.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(w["url_sha256"], digest);
        assert_eq!(w["headers"]["Authorization"], "***");
        assert_eq!(w["headers"]["X-Source"], "recon");
        assert_eq!(w["headers"]["Recon-Signature"], "t=<at send>,v1=***");
        let key = w["headers"]["Idempotency-Key"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(keys.contains(&key), "{key}");
        assert_eq!(w["body"]["object"], "event");
        assert_eq!(w["body"]["type"], "charge.succeeded");
        assert_eq!(w["body"]["data"]["object"]["id"], l["external_id"]);
        planned.insert(key, w["body"].to_string());
    }
    let dry_logs = text(&o);
    // Apply exactly that plan.
    let config = f.path("recon.toml").display().to_string();
    let plan = f.path("dry/plan.jsonl").display().to_string();
    let out = f.path("applied").display().to_string();
    let mut c = f.command(
        &[
            "apply", "--plan", &plan, "--config", &config, "--out", &out, "--log", "debug",
        ],
        &envs,
    );
    let o = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    assert_eq!(stats.bad_signatures, 0);
    all_created_once(&stats, &keys);
    // Each received body is byte for byte the planned one, under its key.
    let mut sent: HashMap<String, String> = HashMap::new();
    for req in &stats.bodies {
        let key = req
            .lines()
            .find_map(|l| l.strip_prefix("idempotency-key: "))
            .unwrap()
            .to_string();
        assert!(req.contains(&format!("authorization: Bearer {token}")));
        sent.insert(key, req.lines().last().unwrap().to_string());
    }
    assert_eq!(sent, planned);
    let s = summary(&f.path("applied"));
    assert_eq!(s["webhook"]["delivered"], keys.len(), "{s}");
    // No secret anywhere: reports, plan, logs, the state store.
    let mut everything = dry_logs + &text(&o);
    for dir in [f.path("dry"), f.path("applied")] {
        for e in std::fs::read_dir(dir).unwrap() {
            everything.push_str(&String::from_utf8_lossy(
                &std::fs::read(e.unwrap().path()).unwrap(),
            ));
        }
    }
    everything.push_str(&String::from_utf8_lossy(&state_bytes(&f.path("state.db"))));
    assert!(
        everything.contains("Retrying request"),
        "a retry was logged"
    );
    for s in [token, "Sec/ret#42", secret, path_token, "/catch/4471"] {
        assert!(!everything.contains(s), "secret {s} leaked");
    }
    let _: HashSet<()> = HashSet::new();
}

#[test]
fn webhook_settings_that_disagree_are_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture {
        dir,
        now: jiff::Timestamp::now().as_second(),
    };
    std::fs::write(f.path("charges.csv"), "id,amount,currency,status,created\n").unwrap();
    let cases = [
        ("url = \"ftp://x\"", "is not an http(s) URL"),
        (
            "url = \"http://127.0.0.1:9/h\"\nrate_limit = \"fast\"",
            "backfill.webhook.rate_limit",
        ),
        (
            "url = \"http://127.0.0.1:9/h\"\nheaders = { Idempotency-Key = \"x\" }",
            "recon sets itself",
        ),
        (
            "url = \"http://127.0.0.1:9/h\"\nsigning_secret = \"${RECON_TEST_UNSET_9}\"",
            "RECON_TEST_UNSET_9 is not set",
        ),
        (
            "url = \"http://127.0.0.1:9/h\"\nenvelop = \"stripe\"",
            "did you mean `envelope`?",
        ),
    ];
    for (webhook, want) in cases {
        f.write_config(webhook);
        let config = f.path("recon.toml").display().to_string();
        let o = f
            .command(&["run", "--config", &config, "--dry-run"], &[])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{webhook}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{webhook}: {err}");
    }
    // via = "webhook" without the table.
    f.write_config("url = \"http://127.0.0.1:9/h\"");
    let cfg = std::fs::read_to_string(f.path("recon.toml")).unwrap();
    let cut = cfg.find("[jobs.charges.backfill.webhook]").unwrap();
    std::fs::write(f.path("recon.toml"), &cfg[..cut]).unwrap();
    let config = f.path("recon.toml").display().to_string();
    let o = f
        .command(&["run", "--config", &config, "--dry-run"], &[])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("needs a [jobs.charges.backfill.webhook] table"));
}

#[test]
fn demo_via_webhook_replays_retries_dedups_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
        .args(["demo", "--via", "webhook", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    // Orphans, mismatches and duplicates stay open: exit 1.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let dry = summary(&out.join("1-dry-run"));
    let apply = summary(&out.join("2-apply"));
    let rerun = summary(&out.join("3-rerun"));
    let gaps = dry["gaps"].as_u64().unwrap();
    assert!(gaps > 10, "{dry}");
    let plan = std::fs::read_to_string(out.join("1-dry-run/plan.jsonl")).unwrap();
    assert!(plan.contains("\"Idempotency-Key\""), "{plan}");
    let w = &apply["webhook"];
    assert_eq!(
        w["delivered"].as_u64().unwrap() + w["already_done"].as_u64().unwrap(),
        gaps,
        "{apply}"
    );
    assert!(w["already_done"].as_u64().unwrap() > 0, "{apply}");
    assert!(w["retries"].as_u64().unwrap() > 0, "{apply}");
    assert_eq!(apply["delivered_not_created"], 0, "{apply}");
    assert_eq!(rerun["gaps"], 0, "{rerun}");
    assert_eq!(rerun["resolved"].as_u64().unwrap(), gaps, "{rerun}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("0 created twice"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_source_replays_each_charge_as_stripe_returns_it_in_an_event() {
    use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let now = jiff::Timestamp::now().as_second();
    let mut conn = sqlx::SqliteConnection::connect(&target_url(dir.path()))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE payments (charge_id TEXT NOT NULL UNIQUE, amount_cents INTEGER, \
         currency TEXT, status TEXT, created_at TIMESTAMP)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let mut charges = HashMap::new();
    for i in 0..10i64 {
        let id = format!("ch_3Qwebhook{i:04}");
        let created = now - 7200 + i * 60;
        let charge = Emulator::charge(&id, 500 + i, "eur", "succeeded", created);
        emulator.insert(ObjectKind::Charge, charge.clone());
        if i % 3 == 0 {
            sqlx::query("INSERT INTO payments VALUES ($1, $2, 'eur', 'succeeded', $3)")
                .bind(&id)
                .bind(500 + i)
                .bind(sql_time(created))
                .execute(&mut conn)
                .await
                .unwrap();
        } else {
            charges.insert(id, charge);
        }
    }
    // The handler of a Stripe integration: data.object is a charge.
    let url = target_url(dir.path());
    let create: CreateHook = Arc::new(move |obj: serde_json::Value| {
        let url = url.clone();
        Box::pin(async move {
            let mut conn = sqlx::SqliteConnection::connect(&url)
                .await
                .map_err(|e| e.to_string())?;
            sqlx::query("INSERT INTO payments VALUES ($1, $2, $3, $4, $5)")
                .bind(obj["id"].as_str().ok_or("no id")?.to_string())
                .bind(obj["amount"].as_i64().ok_or("no amount")?)
                .bind(obj["currency"].as_str().unwrap_or("").to_string())
                .bind(obj["status"].as_str().unwrap_or("").to_string())
                .bind(sql_time(obj["created"].as_i64().ok_or("no created")?))
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    });
    let rx = Receiver::start(ReceiverConfig {
        envelope: recon::webhook::Envelope::Stripe,
        create: Some(create),
        ..ReceiverConfig::default()
    })
    .await
    .unwrap();
    std::fs::write(
        dir.path().join("recon.toml"),
        format!(
            r#"
[defaults]
state = "sqlite://{state}"
[jobs.charges]
{CHARGE_FIELDS}
{source}[jobs.charges.target]
type = "sql"
url = "{target}"
table = "payments"
key = "charge_id"
columns = {{ amount = "amount_cents", created = "created_at" }}
[jobs.charges.backfill]
mode = "insert"
max_ratio = 1
via = "webhook"
[jobs.charges.backfill.webhook]
url = "{hook}"
envelope = "stripe"
rate_limit = "50/s"
verify_after = "0s"
"#,
            state = dir.path().join("state.db").display(),
            source =
                common::stripe_source("charges", "${RECON_TEST_STRIPE_KEY}", &emulator.base_url),
            target = target_url(dir.path()),
            hook = rx.url,
        ),
    )
    .unwrap();
    let config = dir.path().join("recon.toml").display().to_string();
    let out = dir.path().join("r1").display().to_string();
    let key = emulator.api_key.clone();
    let o = tokio::task::spawn_blocking(move || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .args(["run", "--config", &config, "--out", &out])
            .env("RECON_TEST_STRIPE_KEY", key)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    assert_eq!(stats.created.len(), charges.len(), "{stats:?}");
    for req in &stats.bodies {
        let event: serde_json::Value = serde_json::from_str(req.lines().last().unwrap()).unwrap();
        assert_eq!(event["object"], "event");
        assert_eq!(event["type"], "charge.succeeded");
        assert!(event["id"].as_str().unwrap().starts_with("evt_"));
        let charge = &event["data"]["object"];
        let id = charge["id"].as_str().unwrap();
        // The whole charge as the emulated Stripe API holds and returns it.
        assert_eq!(charge, &charges[id], "{id}");
        assert_eq!(event["created"], charges[id]["created"]);
    }
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_failure_stops_delivering_at_once_and_the_rerun_sends_the_rest() {
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            latency: Duration::from_millis(50),
            ..ReceiverConfig::default()
        })
        .await;
    f.deliver_to(&rx.url, "concurrency = 1\nverify_after = \"0s\"");
    // Recording the first answer fails: the run ends in trouble and sends
    // nothing more (before the fix, every remaining item went out
    // unrecorded while the run was already failing).
    let o = f
        .run("r1", &[], &[("RECON_FAULT_WEBHOOK_MARK_FAILS", "1")])
        .await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("recording webhook outcomes failed"),
        "{}",
        text(&o)
    );
    let keys = gap_keys(&f);
    let at_failure = rx.stats();
    // The answered one and at most the next in flight (concurrency 1).
    assert!(
        (1..=2).contains(&at_failure.requests),
        "sent after the ledger failed: {at_failure:?}"
    );
    let ledger = f.ledger().await;
    assert!(
        f.gaps().iter().all(|g| ledger[g] == "planned"),
        "{ledger:?}"
    );
    // A rerun sends the rest (what the handler created before the failure
    // is no longer a gap), and each record is created once.
    let o = f.run("r2", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = rx.stats();
    for k in &keys {
        assert_eq!(stats.per_key.get(k), Some(&1), "{k}: {stats:?}");
    }
    all_created_once(&stats, &keys);
}

/// A raw HTTP/1.1 server on 127.0.0.1 answering every request with
/// `answer` (bytes as written, then the connection is closed); returns its
/// URL and the request lines it saw (`POST /path`, `GET /other`).
fn raw_server(answer: Vec<u8>) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // The head, then the body by Content-Length.
            let head_end = loop {
                let n = conn.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(i + 4);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < head_end + len {
                let n = conn.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let line = head.lines().next().unwrap_or("");
            let mut parts = line.split(' ');
            let (m, p) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            log.lock().unwrap().push(format!("{m} {p}"));
            let _ = conn.write_all(&answer);
            let _ = conn.flush();
        }
    });
    (format!("http://{addr}"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2xx_with_a_broken_body_is_delivered_and_never_sent_again() {
    let f = Fixture::new().await;
    // 200 with a body that is not UTF-8 and is cut short (Content-Length
    // promises more than is sent before the connection closes).
    let mut answer = b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\nConnection: close\r\n\r\n".to_vec();
    answer.extend_from_slice(&[0xff, 0xfe, 0xfd]);
    let (url, seen) = raw_server(answer);
    f.write_config(&format!(
        "url = \"{url}/hook\"\nrate_limit = \"50/s\"\nverify_after = \"0s\""
    ));
    let o = f.run("r1", &[], &[]).await;
    // Acknowledged; nothing created (this server is no handler): exit 1.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let n = f.gaps().len();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), n, "each delivery sent once: {seen:?}");
    let rows = backfill(&f.path("r1"));
    assert!(
        rows.values().all(|(o, _)| o == "delivered_not_created"),
        "{rows:?}"
    );
    let s = summary(&f.path("r1"));
    assert_eq!(s["webhook"]["retries"], 0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed_and_fails_the_item_naming_where_it_points() {
    let f = Fixture::new().await;
    let answer = b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/hooks/catch/998877/zz9secretpath\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec();
    let (url, seen) = raw_server(answer);
    f.write_config(&format!(
        "url = \"{url}/hook\"\nrate_limit = \"50/s\"\nverify_after = \"0s\""
    ));
    let o = f.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let n = f.gaps().len();
    let seen = seen.lock().unwrap().clone();
    // Only the POSTs: no GET to the Location, no retry.
    assert_eq!(seen.len(), n, "{seen:?}");
    assert!(seen.iter().all(|l| l == "POST /hook"), "{seen:?}");
    let rows = backfill(&f.path("r1"));
    assert_eq!(rows.len(), n);
    assert!(
        rows.values().all(|(o, e)| o == "failed"
            && e.contains("302")
            && e.contains("http://127.0.0.1:9/***")
            && e.contains("not followed")),
        "{rows:?}"
    );
    let csv = std::fs::read_to_string(f.path("r1/backfill.csv")).unwrap();
    assert!(!csv.contains("zz9secretpath"), "{csv}");
    assert_eq!(
        f.ledger().await.values().filter(|s| *s == "failed").count(),
        n
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_a_plan_to_a_handler_that_never_creates_exits_1() {
    let f = Fixture::new().await;
    // Acknowledges every delivery, creates nothing.
    let rx = Receiver::start(ReceiverConfig::default()).await.unwrap();
    f.deliver_to(&rx.url, "verify_after = \"0s\"");
    let o = f.run("dry", &["--dry-run"], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let config = f.path("recon.toml").display().to_string();
    let plan = f.path("dry/plan.jsonl").display().to_string();
    let out = f.path("applied").display().to_string();
    let mut c = f.command(
        &["apply", "--plan", &plan, "--config", &config, "--out", &out],
        &[],
    );
    let o = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    let n = f.gaps().len();
    assert_eq!(rx.stats().requests, n);
    // As `recon run` would: the handler is broken, exit 1.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&f.path("applied"));
    assert_eq!(s["delivered_not_created"], n, "{s}");
    assert_eq!(s["exit_status"], 1, "{s}");
    let rows = backfill(&f.path("applied"));
    assert!(
        rows.values().all(|(o, _)| o == "delivered_not_created"),
        "{rows:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_answer_and_record_resends_the_same_key_and_creates_once() {
    let f = Fixture::new().await;
    // A queueing handler (like a Zapier zap): it acknowledges at once and
    // creates the record later (here: when the test flushes its queue), so
    // the rerun still sees every gap.
    let queue: Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Arc::default();
    let q = queue.clone();
    let create: CreateHook = Arc::new(move |obj: serde_json::Value| {
        q.lock().unwrap().push(obj);
        Box::pin(async { Ok(()) })
    });
    let rx = Receiver::start(ReceiverConfig {
        create: Some(create),
        ..ReceiverConfig::default()
    })
    .await
    .unwrap();
    f.deliver_to(&rx.url, "concurrency = 1\nverify_after = \"0s\"");
    // Dies (abort) once 3 deliveries were answered, before recording them.
    let o = f
        .run("r1", &[], &[("RECON_FAULT_ABORT_AFTER_ITEMS", "3")])
        .await;
    assert_eq!(o.status.code(), None, "killed: {}", text(&o));
    let ledger = f.ledger().await;
    let unrecorded: Vec<String> = ledger
        .iter()
        .filter(|(_, s)| *s == "planned")
        .map(|(k, _)| k.clone())
        .collect();
    let first = rx.stats();
    let by_id: HashMap<String, String> = (0..CHARGES)
        .filter(|i| i % 2 == 1)
        .map(|i| {
            let (id, _, created) = Fixture::charge(f.now, i);
            (id.clone(), key_of("charges", &id, created))
        })
        .collect();
    // Answered but unrecorded: at least the third.
    let answered_unrecorded: Vec<&String> = unrecorded
        .iter()
        .filter(|id| first.per_key.contains_key(&by_id[*id]))
        .collect();
    assert!(!answered_unrecorded.is_empty(), "{ledger:?} {first:?}");
    // The rerun sends those again under the same key (the handler answers
    // 409), the recorded ones never, the rest once.
    let o = f.run("r2", &[], &[]).await;
    assert_ne!(o.status.code(), Some(2), "{}", text(&o));
    let stats = rx.stats();
    let keys = gap_keys(&f);
    for k in &keys {
        assert!(stats.per_key.contains_key(k), "{k} never delivered");
    }
    for id in &answered_unrecorded {
        assert_eq!(stats.per_key[&by_id[*id]], 2, "{id} resent: {stats:?}");
    }
    for (id, status) in &ledger {
        if status == "delivered" {
            assert_eq!(stats.per_key[&by_id[id]], 1, "{id} resent");
        }
    }
    assert_eq!(stats.conflicts, answered_unrecorded.len(), "{stats:?}");
    // The handler's work: each record once.
    all_created_once(&stats, &keys);
    let hook = f.create_hook();
    let queued = std::mem::take(&mut *queue.lock().unwrap());
    assert_eq!(queued.len(), keys.len());
    for obj in queued {
        hook(obj).await.unwrap();
    }
    let mut want: Vec<String> = (0..CHARGES).map(|i| Fixture::charge(f.now, i).0).collect();
    want.sort();
    assert_eq!(f.target_keys().await, want);
    let o = f.run("r3", &[], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_refuses_a_plan_whose_request_the_config_no_longer_makes() {
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            envelope: recon::webhook::Envelope::Stripe,
            ..ReceiverConfig::default()
        })
        .await;
    let base = "rate_limit = \"50/s\"\nverify_after = \"0s\"";
    let planned = format!(
        "url = \"{}\"\nenvelope = \"stripe\"\nheaders = {{ X-Source = \"recon\" }}\n{base}",
        rx.url
    );
    f.write_config(&planned);
    let o = f.run("dry", &["--dry-run"], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let apply = |out: &str| {
        let config = f.path("recon.toml").display().to_string();
        let plan = f.path("dry/plan.jsonl").display().to_string();
        let out = f.path(out).display().to_string();
        f.command(
            &["apply", "--plan", &plan, "--config", &config, "--out", &out],
            &[],
        )
        .output()
        .unwrap()
    };
    let cases = [
        (
            format!(
                "url = \"{}\"\nenvelope = \"stripe\"\nheaders = {{ X-Source = \"other\" }}\n{base}",
                rx.url
            ),
            // (The new value is scrubbed: every configured header value
            // is registered as a possible secret.)
            "header X-Source is \"recon\" in the plan, ",
        ),
        (
            format!("url = \"{}\"\nenvelope = \"stripe\"\n{base}", rx.url),
            "header X-Source is in the plan, not set now",
        ),
        (
            format!(
                "url = \"{}\"\nenvelope = \"stripe\"\nevent_type = \"charge.captured\"\nheaders = {{ X-Source = \"recon\" }}\n{base}",
                rx.url
            ),
            "event_type = \"charge.captured\" now",
        ),
        (
            format!(
                "url = \"{}\"\nheaders = {{ X-Source = \"recon\" }}\n{base}",
                rx.url
            ),
            "the plan's body is a Stripe event, but envelope = \"none\" now",
        ),
        (
            format!(
                "url = \"{}\"\nenvelope = \"stripe\"\nsigning_secret = \"whsec_0123456789\"\nheaders = {{ X-Source = \"recon\" }}\n{base}",
                rx.url
            ),
            "header Recon-Signature is set now, not in the plan",
        ),
        // Another endpoint on the same host: the same shown URL, another digest.
        (
            format!(
                "url = \"{}/other\"\nenvelope = \"stripe\"\nheaders = {{ X-Source = \"recon\" }}\n{base}",
                rx.url
            ),
            "another endpoint",
        ),
    ];
    for (i, (config, want)) in cases.iter().enumerate() {
        f.write_config(config);
        let o = tokio::task::block_in_place(|| apply(&format!("a{i}")));
        assert_eq!(o.status.code(), Some(2), "{config}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{config}: {err}");
        assert!(err.contains("make the plan again"), "{err}");
    }
    assert_eq!(rx.stats().requests, 0, "nothing sent");
    // The settings the plan was made with: sent.
    f.write_config(&planned);
    let o = tokio::task::block_in_place(|| apply("ok"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    all_created_once(&rx.stats(), &gap_keys(&f));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_outcomes_are_in_the_metrics_and_deliveries_log_in_the_backfill_phase() {
    let f = Fixture::new().await;
    let rx = f
        .receiver(ReceiverConfig {
            ..ReceiverConfig::default()
        })
        .await;
    f.deliver_to(&rx.url, "verify_after = \"1s\"");
    let metrics = f.path("recon.prom").display().to_string();
    let o = f
        .run(
            "r1",
            &[
                "--metrics-file",
                &metrics,
                "--log-format",
                "json",
                "--log",
                "info",
            ],
            &[],
        )
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let n = f.gaps().len();
    let prom = std::fs::read_to_string(&metrics).unwrap();
    for (outcome, count) in [
        ("delivered", n),
        ("already_done", 0),
        ("delivered_not_created", 0),
        ("created", 0),
    ] {
        let line =
            format!("recon_backfilled_total{{job=\"charges\",outcome=\"{outcome}\"}} {count}");
        assert!(prom.contains(&line), "{line} in:\n{prom}");
    }
    let stderr = String::from_utf8_lossy(&o.stderr);
    let waiting: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.contains("verifying webhook deliveries"))
        })
        .collect();
    assert_eq!(waiting.len(), 1, "{stderr}");
    assert_eq!(waiting[0]["phase"], "backfill", "{}", waiting[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_replaced_under_the_same_id_is_delivered_again_under_its_new_key() {
    let f = Fixture::new().await;
    // Acknowledges, creates nothing: every gap stays open.
    let rx = Receiver::start(ReceiverConfig::default()).await.unwrap();
    f.deliver_to(&rx.url, "verify_after = \"0s\"");
    let o = f.run("r1", &[], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let n = f.gaps().len();
    assert_eq!(rx.stats().requests, n);
    // ch_0001 is replaced at the source by another charge under the same
    // ID (another `created`): a new identity, so a new key.
    let (id, amount, created) = Fixture::charge(f.now, 1);
    let csv = std::fs::read_to_string(f.path("charges.csv")).unwrap();
    let old_line = format!("{id},{amount},usd,succeeded,{created}");
    assert!(csv.contains(&old_line));
    std::fs::write(
        f.path("charges.csv"),
        csv.replace(
            &old_line,
            &format!("{id},{amount},usd,succeeded,{}", created + 30),
        ),
    )
    .unwrap();
    let o = f.run("r2", &[], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stats = rx.stats();
    let new_key = key_of("charges", &id, created + 30);
    assert_eq!(stats.per_key.get(&new_key), Some(&1), "{stats:?}");
    // Only that one: the others were delivered under their own keys.
    assert_eq!(stats.requests, n + 1, "{stats:?}");
    let rows = backfill(&f.path("r2"));
    assert!(!rows[&id].1.contains("not sent again"), "{rows:?}");
}

/// Every window of `secret` of 8 characters: a piece of it left at a cut.
fn secret_windows(secret: &str) -> Vec<String> {
    let chars: Vec<char> = secret.chars().collect();
    chars.windows(8).map(|w| w.iter().collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_echoes_a_token_cut_at_its_200th_byte_leaks_no_piece_of_it() {
    let f = Fixture::new().await;
    let token = "whk_9fQ2xL7pV4mZ8rT1kB6nC3hJ5dS0aE";
    // The handler echoes the request's Authorization header in its 400,
    // placed so that recon's first 200 bytes end in the middle of the token.
    let prefix = r#"{"error":"rejected","echo":"#;
    let pad = "x".repeat(200 - prefix.len() - "Bearer ".len() - 12 - 1);
    let body = format!("{prefix}\"{pad}Bearer {token}\"}}");
    assert!(
        body.len() > 200 && body[..200].ends_with(&token[..12]),
        "{body}"
    );
    let mut answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body.as_bytes());
    let (url, seen) = raw_server(answer);
    f.write_config(&format!(
        "url = \"{url}/hook\"\nrate_limit = \"50/s\"\nverify_after = \"0s\"\nheaders = {{ Authorization = \"Bearer ${{HOOK_TOKEN}}\" }}"
    ));
    let o = f
        .run("r1", &["--log", "debug"], &[("HOOK_TOKEN", token)])
        .await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(seen.lock().unwrap().len(), f.gaps().len());
    let rows = backfill(&f.path("r1"));
    assert!(
        rows.values()
            .all(|(o, e)| o == "failed" && e.contains("400") && e.contains("rejected")),
        "{rows:?}"
    );
    // No piece of the token anywhere: every report file, the state store
    // (the delivery ledger's last_error included), stdout and stderr.
    let mut texts: Vec<(String, Vec<u8>)> = Vec::new();
    for dir in [f.path("r1"), f.path("reports")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_file() {
                texts.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    texts.push(("state.db".into(), state_bytes(&f.path("state.db"))));
    let url = format!("sqlite://{}", f.path("state.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let errors: Vec<String> = sqlx::query("SELECT last_error FROM recon_webhook_deliveries")
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<Option<String>, _>(0).unwrap_or_default())
        .collect();
    assert_eq!(errors.len(), f.gaps().len());
    assert!(
        errors
            .iter()
            .all(|e| e.contains("rejected") && e.contains("***")),
        "{errors:?}"
    );
    texts.push(("last_error".into(), errors.join("\n").into_bytes()));
    texts.push(("stdout".into(), o.stdout.clone()));
    texts.push(("stderr".into(), o.stderr.clone()));
    assert!(texts.iter().any(|(n, _)| n.ends_with("backfill.csv")));
    assert!(texts.iter().any(|(n, _)| n.ends_with("report.html")));
    for (name, bytes) in &texts {
        let body = String::from_utf8_lossy(bytes);
        for w in secret_windows(token) {
            assert!(!body.contains(&w), "`{w}` of the token in {name}");
        }
    }
}

/// A SQLite state store's bytes: the database file and its write-ahead log
/// (where the latest commits are until a checkpoint copies them over).
fn state_bytes(db: &std::path::Path) -> Vec<u8> {
    let mut bytes = std::fs::read(db).unwrap();
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(log) = std::fs::read(&wal) {
        bytes.extend(log);
    }
    bytes
}
