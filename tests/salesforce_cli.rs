//! Stripe emulator → Salesforce emulator through the binary: Stripe charges
//! backfilled into a custom object `Payment__c` keyed by the external ID
//! `Stripe_Charge_Id__c` (the README's example): a dry run, an apply of its
//! plan, a rerun with nothing to write, and a crash mid-apply after which
//! the next run writes each remaining gap exactly once; a run killed while
//! its Bulk API ingest job still processes, whose job lands after the next
//! run sent its own: each charge exactly once. Fields the integration user
//! cannot set refused before anything is written (or left out with
//! `not_written`); an API version the org does not serve told apart from a
//! missing object; creates whose answer was lost reported created; a
//! resent `UploadComplete` refused as already done goes on.

mod common;

use common::{recon_async as recon, summary, text};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use recon_salesforce::emulator::{
    Emulator as Salesforce, EmulatorConfig as SalesforceConfig, Fault, FaultKind, FieldDef,
    FieldType,
};
use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig as StripeConfig, ObjectKind};
use serde_json::json;

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

/// The org holds `n` charges, each exactly once.
fn each_charge_once(sf: &Salesforce, n: usize) {
    let by_key = payments_by_key(sf);
    assert_eq!(by_key.len(), n);
    assert!(
        by_key.values().all(|&c| c == 1),
        "every charge exactly once"
    );
}

/// The README's custom object: `Payment__c` keyed by the external ID
/// `Stripe_Charge_Id__c` (unique, case-sensitive).
fn payment_object(sf: &Salesforce) {
    payment_object_with_status(sf, FieldDef::text("Status__c"));
}

/// [`payment_object`] with `status` as its `Status__c` (e.g. one the
/// integration user cannot edit).
fn payment_object_with_status(sf: &Salesforce, status: FieldDef) {
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
            status,
            FieldDef::datetime("Charge_Created__c"),
        ],
    );
}

/// Charges `ch_{i:05}` for `ids` in Stripe, created `now - 30000 + 10 i`
/// seconds; those `in_salesforce` picks are already payments there.
fn charges(
    stripe: &Stripe,
    sf: &Salesforce,
    ids: std::ops::Range<i64>,
    in_salesforce: impl Fn(i64) -> bool,
) {
    let now = jiff::Timestamp::now().as_second();
    for i in ids {
        let id = format!("ch_{i:05}");
        let created = now - 30_000 + i * 10;
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(&id, 1999 + i, "usd", "succeeded", created),
        );
        if in_salesforce(i) {
            sf.insert("Payment__c", payment(&id, 1999 + i, created));
        }
    }
}

/// The `outcome` column of a run's `backfill.csv`.
fn outcomes(dir: &Path) -> Vec<String> {
    let mut rows = csv::Reader::from_path(dir.join("backfill.csv")).unwrap();
    let header = rows.headers().unwrap().clone();
    let outcome = header.iter().position(|h| h == "outcome").unwrap();
    rows.records()
        .map(|r| r.unwrap()[outcome].to_string())
        .collect()
}

/// `recon run --config CONFIG --out OUT` with the Salesforce app's
/// credentials.
async fn run(sf: &Salesforce, config: &Path, out: &Path) -> Output {
    let args = ["run", "--config", path(config), "--out", path(out)];
    recon(args.map(String::from).to_vec(), sf_env(sf)).await
}

/// `recon check --config CONFIG` with the Salesforce app's credentials.
async fn check(sf: &Salesforce, config: &Path) -> Output {
    let args = ["check", "--config", path(config), "--job", "payments"];
    recon(args.map(String::from).to_vec(), sf_env(sf)).await
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Routes of `sf` that write records: none may have been called when a
/// run refuses before writing.
fn write_calls(sf: &Salesforce) -> u64 {
    let by_route = sf.stats().by_route;
    ["composite_create", "composite_upsert", "bulk_ingest_create"]
        .iter()
        .map(|r| by_route.get(*r).copied().unwrap_or(0))
        .sum()
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
{source}[jobs.payments.target]
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
            source = common::stripe_source("payments", &stripe.api_key, &stripe.base_url),
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
    each_charge_once(&sf, 800);
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
    common::wait_until("a poll of the bulk job", common::PATIENCE, || polled() > 0);
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
    let outcomes = outcomes(&dir.path().join("after"));
    assert_eq!(outcomes.len(), 150);
    assert!(
        outcomes.iter().all(|o| o == "unchanged"),
        "the killed run's job landed first: {outcomes:?}"
    );
    each_charge_once(&sf, 150);
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

/// A mapped field the integration user can read but not edit (Field-Level
/// Security read-only: describe `createable: false`, `updateable: false`):
/// the run refuses before writing anything, naming the object, the field,
/// the flag and the permission to grant; `recon check` says so too. Listed
/// in `not_written`, the run backfills without it, and the next run shows
/// the consequence: the records it created mismatch on status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_the_user_cannot_edit_is_refused_before_anything_is_written() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let sf = Salesforce::start(SalesforceConfig::default())
        .await
        .unwrap();
    payment_object_with_status(&sf, FieldDef::text("Status__c").read_only());
    charges(&stripe, &sf, 0..300, |i| i % 3 == 0);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &stripe, &sf, "");
    let out = |name: &str| dir.path().join(name);

    let o = run(&sf, &config, &out("refused")).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "Payment__c.Status__c (createable: false)",
        "Field-Level Security",
        "Object Manager → Payment__c → Fields & Relationships → Status__c",
        "not_written = [\"Status__c\"]",
    ] {
        assert!(err.contains(want), "{want}: {}", text(&o));
    }
    assert_eq!(write_calls(&sf), 0, "nothing was sent to be written");
    assert_eq!(sf.records("Payment__c").len(), 100);
    assert!(!out("refused").join("backfill.csv").exists());

    let o = check(&sf, &config).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        report.lines().any(
            |l| l.starts_with("FAIL") && l.contains("Payment__c.Status__c (createable: false)")
        ),
        "{}",
        text(&o)
    );
    assert_eq!(write_calls(&sf), 0);

    // Excluded explicitly: written without it.
    let config = write_config(dir.path(), &stripe, &sf, r#"not_written = ["Status__c"]"#);
    let o = run(&sf, &config, &out("without")).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&out("without"));
    assert_eq!(
        (s["gaps"].as_u64(), s["backfilled"].as_u64()),
        (Some(200), Some(200)),
        "{s}"
    );
    assert!(outcomes(&out("without")).iter().all(|o| o == "created"));
    let records = sf.records("Payment__c");
    assert_eq!(records.len(), 300);
    let without = records.iter().filter(|r| r["Status__c"].is_null()).count();
    assert_eq!(without, 200, "the created records lack the field");
    assert!(payments_by_key(&sf).values().all(|&n| n == 1));

    let o = run(&sf, &config, &out("next")).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&out("next"));
    assert_eq!(
        (s["gaps"].as_u64(), s["mismatches"].as_u64()),
        (Some(0), Some(200)),
        "{s}"
    );
    stripe.shutdown().await;
    sf.shutdown().await;
}

/// A field the user may set on create but not change (`updateable:
/// false`): an insert-mode job creates its gaps with it, an upsert job that
/// would repair mismatched records refuses before writing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repairs_need_updateable_fields_and_inserts_do_not() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let sf = Salesforce::start(SalesforceConfig::default())
        .await
        .unwrap();
    payment_object_with_status(
        &sf,
        FieldDef {
            updateable: false,
            ..FieldDef::text("Status__c")
        },
    );
    charges(&stripe, &sf, 0..30, |i| i < 10);
    // Ten more payments whose status differs from Stripe's.
    let now = jiff::Timestamp::now().as_second();
    for i in 30..40i64 {
        let id = format!("ch_{i:05}");
        let created = now - 30_000 + i * 10;
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(&id, 1999 + i, "usd", "succeeded", created),
        );
        let mut p = payment(&id, 1999 + i, created);
        p["Status__c"] = json!("pending");
        sf.insert("Payment__c", p);
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &stripe, &sf, "");
    let upsert = dir.path().join("upsert.toml");
    let text_of = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &upsert,
        text_of.replace(r#"mode = "insert""#, r#"mode = "upsert""#),
    )
    .unwrap();
    let out = |name: &str| dir.path().join(name);

    let o = run(&sf, &upsert, &out("repair")).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Payment__c.Status__c (updateable: false)")
            && err.contains("Field-Level Security"),
        "{}",
        text(&o)
    );
    assert_eq!(write_calls(&sf), 0, "nothing was sent to be written");
    let records = sf.records("Payment__c");
    assert_eq!(records.len(), 20);
    assert_eq!(
        records
            .iter()
            .filter(|r| r["Status__c"] == json!("pending"))
            .count(),
        10,
        "the mismatched records are as they were"
    );

    let o = run(&sf, &config, &out("insert")).await;
    assert_eq!(
        o.status.code(),
        Some(1),
        "the mismatches stay: {}",
        text(&o)
    );
    let s = summary(&out("insert"));
    assert_eq!(
        (s["backfilled"].as_u64(), s["mismatches"].as_u64()),
        (Some(20), Some(10)),
        "{s}"
    );
    let created: Vec<_> = sf
        .records("Payment__c")
        .into_iter()
        .filter(|r| r["Status__c"] == json!("succeeded"))
        .collect();
    assert_eq!(created.len(), 30, "created with their status");
    stripe.shutdown().await;
    sf.shutdown().await;
}

/// An API version the org does not serve answers 404 NOT_FOUND like an
/// object it does not have: recon lists the versions the org serves and
/// names the one to set, and still says "no object" when the object is
/// what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unserved_api_version_is_told_apart_from_a_missing_object() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let sf = Salesforce::start(SalesforceConfig {
        api_version: "62.0".into(),
        oldest_api_version: "58.0".into(),
        ..SalesforceConfig::default()
    })
    .await
    .unwrap();
    payment_object(&sf);
    charges(&stripe, &sf, 0..10, |_| false);
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name);

    let config = write_config(dir.path(), &stripe, &sf, r#"api_version = "99.0""#);
    for o in [
        run(&sf, &config, &out("unserved")).await,
        check(&sf, &config).await,
    ] {
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        for want in [
            "does not serve REST API version 99.0",
            "58.0 to 62.0 (5 versions)",
            "api_version = \"62.0\"",
        ] {
            assert!(all.contains(want), "{want}: {}", text(&o));
        }
        assert!(!all.contains("has no object"), "{}", text(&o));
    }
    assert!(sf.stats().by_route.get("versions").copied().unwrap_or(0) >= 2);
    assert_eq!(write_calls(&sf), 0);

    let config = write_config(dir.path(), &stripe, &sf, "");
    let config_text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        config_text.replace(r#"object = "Payment__c""#, r#"object = "Paymnt__c""#),
    )
    .unwrap();
    let o = run(&sf, &config, &out("missing")).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Salesforce has no object `Paymnt__c`"),
        "{}",
        text(&o)
    );
    assert!(!err.contains("does not serve"), "{}", text(&o));

    stripe.shutdown().await;
    sf.shutdown().await;
}

/// Records created by a call whose answer was lost — a 500 after the work,
/// a connection cut after the work — are met by the policy's resend as
/// duplicates of themselves; recon looks them up and reports them
/// created, not unchanged: this run sent them. Each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_created_by_a_call_whose_answer_was_lost_are_reported_created() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let sf = Salesforce::start(SalesforceConfig::default())
        .await
        .unwrap();
    payment_object(&sf);
    charges(&stripe, &sf, 0..300, |i| i % 3 == 0);
    // The first two creates (one per batch of 100) do their work and lose
    // their answer; the resends go through.
    sf.set_route_faults(
        "composite_create",
        vec![
            Fault {
                kind: FaultKind::ServerErrorAfterWork,
                after: 0,
                times: 1,
            },
            Fault {
                kind: FaultKind::DropAfterWork,
                after: 1,
                times: 1,
            },
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &stripe, &sf, "");
    let config_text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        config_text.replace("batch_size = 200", "batch_size = 100"),
    )
    .unwrap();
    let out = dir.path().join("lost");
    let o = run(&sf, &config, &out).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&out);
    assert_eq!(
        (s["gaps"].as_u64(), s["backfilled"].as_u64()),
        (Some(200), Some(200)),
        "{s}"
    );
    let outcomes = outcomes(&out);
    assert_eq!(outcomes.len(), 200);
    assert!(
        outcomes.iter().all(|o| o == "created"),
        "this run created them: {outcomes:?}"
    );
    let stats = sf.stats();
    assert_eq!(
        stats.by_route.get("composite_create"),
        Some(&4),
        "two calls, each sent twice"
    );
    assert_eq!(stats.by_status.get(&500), Some(&1), "{stats:?}");
    each_charge_once(&sf, 300);
    stripe.shutdown().await;
    sf.shutdown().await;
}

/// A Bulk API 2.0 ingest job whose first `UploadComplete` landed but lost
/// its answer: the resend is refused `409 INVALIDJOBSTATE`; recon reads the
/// job, finds it closed, and goes on to its results instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_upload_complete_refused_as_already_done_goes_on() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let sf = Salesforce::start(SalesforceConfig::default())
        .await
        .unwrap();
    payment_object(&sf);
    charges(&stripe, &sf, 0..150, |_| false);
    sf.set_route_faults(
        "bulk_ingest_state",
        vec![Fault {
            kind: FaultKind::DropAfterWork,
            after: 0,
            times: 1,
        }],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &stripe, &sf, "bulk_write_threshold = 50");
    let out = dir.path().join("closed");
    let o = run(&sf, &config, &out).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stats = sf.stats();
    assert_eq!(
        stats.by_route.get("bulk_ingest_create"),
        Some(&1),
        "{stats:?}"
    );
    assert_eq!(
        stats.by_route.get("bulk_ingest_state"),
        Some(&2),
        "{stats:?}"
    );
    assert_eq!(
        stats.by_status.get(&409),
        Some(&1),
        "the resend was refused: {stats:?}"
    );
    let s = summary(&out);
    assert_eq!(
        (s["backfilled"].as_u64(), s["backfill_failed"].as_u64()),
        (Some(150), Some(0)),
        "{s}"
    );
    let outcomes = outcomes(&out);
    assert_eq!(outcomes.len(), 150);
    assert!(outcomes.iter().all(|o| o == "created"), "{outcomes:?}");
    each_charge_once(&sf, 150);
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
