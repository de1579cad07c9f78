//! Stripe emulator → Salesforce emulator through the binary: Stripe charges
//! backfilled into a custom object `Payment__c` keyed by the external ID
//! `Stripe_Charge_Id__c` (the README's example): a dry run, an apply of its
//! plan, a rerun with nothing to write, and a crash mid-apply after which
//! the next run writes each remaining gap exactly once; a run killed while
//! its Bulk API ingest job still processes, whose job lands after the next
//! run sent its own: each charge exactly once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use recon_salesforce::emulator::{
    Emulator as Salesforce, EmulatorConfig as SalesforceConfig, FieldDef, FieldType,
};
use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig as StripeConfig, ObjectKind};
use serde_json::json;

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// The binary, with the Salesforce app's credentials in the environment
/// (the config names them as `${SF_CLIENT_ID}`, `${SF_CLIENT_SECRET}`).
async fn recon(args: Vec<String>, env: Vec<(String, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .args(&args)
            .envs(env)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn payment(id: &str, cents: i64, created: i64) -> serde_json::Value {
    json!({
        "Stripe_Charge_Id__c": id,
        "Amount__c": format!("{}.{:02}", cents / 100, cents % 100).parse::<serde_json::Number>().unwrap(),
        "CurrencyIsoCode": "USD",
        "Status__c": "succeeded",
        "Charge_Created__c": jiff::Timestamp::from_second(created).unwrap().to_string(),
    })
}

/// Payments per Stripe charge ID, to check that none is written twice.
fn payments_by_key(sf: &Salesforce) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for r in sf.records("Payment__c") {
        *n.entry(r["Stripe_Charge_Id__c"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    n
}

/// The README's custom object: `Payment__c` keyed by the external ID
/// `Stripe_Charge_Id__c` (unique, case-sensitive).
fn payment_object(sf: &Salesforce) {
    sf.define_object(
        "Payment__c",
        vec![
            FieldDef {
                case_sensitive: true,
                ..FieldDef::external_id("Stripe_Charge_Id__c")
            },
            FieldDef::currency("Amount__c", 2),
            FieldDef {
                kind: FieldType::Picklist,
                ..FieldDef::text("CurrencyIsoCode")
            },
            FieldDef::text("Status__c"),
            FieldDef::datetime("Charge_Created__c"),
        ],
    );
}

/// The job's config (Stripe charges → `Payment__c`, insert mode), with
/// `extra_target` lines added to the target's settings.
fn write_config(dir: &Path, stripe: &Stripe, sf: &Salesforce, extra_target: &str) -> PathBuf {
    let config = dir.join("recon.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[defaults]
state = "sqlite://{state}"
[jobs.payments]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
time_field = "created"
window = "last:24h"
[jobs.payments.source]
type = "stripe"
object = "charges"
api_key = "{key}"
base_url = "{stripe}"
[jobs.payments.target]
type = "salesforce"
instance_url = "{sf}"
auth = {{ client_id = "${{SF_CLIENT_ID}}", client_secret = "${{SF_CLIENT_SECRET}}" }}
object = "Payment__c"
external_id_field = "Stripe_Charge_Id__c"
fields = {{ amount = "Amount__c", currency = "CurrencyIsoCode", status = "Status__c", created = "Charge_Created__c" }}
batch_size = 200
{extra_target}
[jobs.payments.backfill]
mode = "insert"
max_ratio = 1.0
"#,
            state = dir.join("state.db").display(),
            key = stripe.api_key,
            stripe = stripe.base_url,
            sf = sf.base_url,
            extra_target = extra_target,
        ),
    )
    .unwrap();
    config
}

/// The connected app's credentials, as the config names them.
fn sf_env(sf: &Salesforce) -> Vec<(String, String)> {
    vec![
        ("SF_CLIENT_ID".to_string(), sf.client_id.clone()),
        ("SF_CLIENT_SECRET".to_string(), sf.client_secret.clone()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_charges_to_salesforce_payments() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let sf = Salesforce::start(SalesforceConfig::default())
        .await
        .unwrap();
    payment_object(&sf);
    let now = jiff::Timestamp::now().as_second();
    // 300 charges; a third of them already reached Salesforce.
    for i in 0..300i64 {
        let id = format!("ch_{i:05}");
        let created = now - 30_000 + i * 10;
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(&id, 1999 + i, "usd", "succeeded", created),
        );
        if i % 3 == 0 {
            sf.insert("Payment__c", payment(&id, 1999 + i, created));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &stripe, &sf, "");
    let env = sf_env(&sf);
    let args = |cmd: &str, extra: &[&str]| {
        let mut v = vec![
            cmd.to_string(),
            "--config".into(),
            config.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let out = |name: &str| dir.path().join(name);

    // Dry run: 200 gaps planned, nothing written.
    let dry = out("dry");
    let o = recon(
        args("run", &["--dry-run", "--out", dry.to_str().unwrap()]),
        env.clone(),
    )
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&dry);
    assert_eq!(s["gaps"], 200, "{s}");
    assert_eq!(s["matched"], 100, "{s}");
    assert_eq!(
        sf.records("Payment__c").len(),
        100,
        "a dry run writes nothing"
    );
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains(&sf.client_secret),
        "the secret is never logged"
    );

    // Apply the reviewed plan.
    let applied = out("applied");
    let o = recon(
        args(
            "apply",
            &[
                "--plan",
                dry.join("plan.jsonl").to_str().unwrap(),
                "--out",
                applied.to_str().unwrap(),
            ],
        ),
        env.clone(),
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&applied);
    assert_eq!(s["backfilled"], 200, "{s}");
    let by_key = payments_by_key(&sf);
    assert_eq!(by_key.len(), 300);
    assert!(by_key.values().all(|&n| n == 1));
    let p = sf
        .records("Payment__c")
        .into_iter()
        .find(|r| r["Stripe_Charge_Id__c"] == json!("ch_00001"))
        .unwrap();
    assert_eq!(p["Amount__c"].to_string(), "20.00", "{p}");
    assert_eq!(p["CurrencyIsoCode"], json!("USD"));

    // Rerun: nothing to write; the 200 earlier gaps are resolved.
    let again = out("again");
    let o = recon(
        args("run", &["--out", again.to_str().unwrap()]),
        env.clone(),
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&again);
    assert_eq!(s["gaps"], 0, "{s}");
    assert_eq!(s["backfilled"], 0, "{s}");
    assert_eq!(s["resolved"], 200, "{s}");
    assert_eq!(sf.records("Payment__c").len(), 300);

    // 500 new charges; the run crashes after its first batch of 200 is
    // written, before recording it.
    for i in 300..800i64 {
        let id = format!("ch_{i:05}");
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(&id, 1999 + i, "usd", "succeeded", now - 30_000 + i * 10),
        );
    }
    let crash = out("crash");
    let mut crash_env = env.clone();
    crash_env.push(("RECON_FAULT_ABORT_AFTER_ITEMS".into(), "200".into()));
    let o = recon(args("run", &["--out", crash.to_str().unwrap()]), crash_env).await;
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_ne!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!crash.exists(), "a crashed run has no reports");
    assert_eq!(
        sf.records("Payment__c").len(),
        500,
        "the first batch reached Salesforce"
    );

    let after = out("after");
    let o = recon(
        args("run", &["--out", after.to_str().unwrap()]),
        env.clone(),
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&after);
    assert_eq!(s["gaps"], 300, "only the unwritten gaps: {s}");
    assert_eq!(s["backfilled"], 300, "{s}");
    let by_key = payments_by_key(&sf);
    assert_eq!(by_key.len(), 800);
    assert!(
        by_key.values().all(|&n| n == 1),
        "every charge exactly once"
    );
    stripe.shutdown().await;
    sf.shutdown().await;
}

/// A run killed (SIGKILL) while its Bulk API 2.0 ingest job is still
/// processing: closed (`UploadComplete`), not complete. Salesforce goes on
/// and lands the job after the next run has found the records missing and
/// sent its own job; the external ID's uniqueness refuses the second copy
/// (`DUPLICATE_VALUE`), recon looks those keys up again and records them
/// unchanged, never updated: every charge exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_job_left_processing_by_a_killed_run_is_never_written_twice() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let sf = Salesforce::start(SalesforceConfig {
        bulk_deferred: true,
        bulk_poll_delay: std::time::Duration::from_secs(4),
        ..SalesforceConfig::default()
    })
    .await
    .unwrap();
    payment_object(&sf);
    let now = jiff::Timestamp::now().as_second();
    for i in 0..150i64 {
        let id = format!("ch_{i:05}");
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(&id, 1999 + i, "usd", "succeeded", now - 30_000 + i * 10),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &stripe, &sf, "bulk_write_threshold = 50");
    let run = |out: &str| {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"));
        c.args(["run", "--config"])
            .arg(&config)
            .arg("--out")
            .arg(dir.path().join(out))
            .envs(sf_env(&sf))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };

    // Killed once it polls its closed job.
    let mut child = run("killed").spawn().unwrap();
    let polled = || {
        sf.stats()
            .by_route
            .get("bulk_ingest_info")
            .copied()
            .unwrap_or(0)
    };
    let t = std::time::Instant::now();
    while polled() == 0 && t.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(polled() > 0, "the run never polled a bulk job");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(sf.stats().by_route.get("bulk_ingest_state"), Some(&1));
    assert!(
        sf.records("Payment__c").is_empty(),
        "the job is still processing"
    );
    assert!(!dir.path().join("killed").exists());

    // The next run finds them missing, and its own job meets the first.
    let o = tokio::task::spawn_blocking({
        let mut c = run("after");
        move || c.output().unwrap()
    })
    .await
    .unwrap();
    let s = summary(&dir.path().join("after"));
    assert_eq!(s["gaps"], 150, "{}\n{s}", text(&o));
    assert_eq!(s["backfill_failed"], 0, "{}\n{s}", text(&o));
    let mut rows = csv::Reader::from_path(dir.path().join("after/backfill.csv")).unwrap();
    let header = rows.headers().unwrap().clone();
    let outcome = header.iter().position(|h| h == "outcome").unwrap();
    let outcomes: Vec<String> = rows
        .records()
        .map(|r| r.unwrap()[outcome].to_string())
        .collect();
    assert_eq!(outcomes.len(), 150);
    assert!(
        outcomes.iter().all(|o| o == "unchanged"),
        "the killed run's job landed first: {outcomes:?}"
    );
    let by_key = payments_by_key(&sf);
    assert_eq!(by_key.len(), 150);
    assert!(
        by_key.values().all(|&n| n == 1),
        "every charge exactly once"
    );
    assert_eq!(sf.stats().by_route.get("bulk_ingest_state"), Some(&2));

    // And the run after that finds nothing to do.
    let o = tokio::task::spawn_blocking({
        let mut c = run("then");
        move || c.output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&dir.path().join("then"))["gaps"], 0);
    stripe.shutdown().await;
    sf.shutdown().await;
}

/// The README's example parses, its target is Salesforce, and its settings
/// build (no request is sent before a run).
#[test]
fn the_example_config_is_a_salesforce_job() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/salesforce.toml");
    let file = recon::config::load(&path).unwrap();
    let job = &file.jobs["stripe_to_salesforce"];
    let recon::config::EndpointConfig::Salesforce(sf) = &job.target else {
        panic!("{:?}", job.target)
    };
    assert_eq!(sf.object, "Payment__c");
    assert_eq!(sf.external_id_field, "Stripe_Charge_Id__c");
    assert_eq!(sf.fields["created"], "Charge_Created__c");
    assert_eq!(sf.daily_share, Some(0.5));
}
