//! Salesforce benchmark against the emulator with 100 ms of latency per
//! request:
//!
//! - backfill 10,000 records: API calls used against the 50 that 200-record
//!   sObject Collections calls need, and records per second, by
//!   Collections upsert, by a Bulk API 2.0 ingest job, and in insert mode
//!   (lookups first, then creates);
//! - read a window of 100,000 records: paged `/query` (2,000 per page)
//!   against a Bulk API 2.0 query job, wall time and calls.
//!
//! Run: `cargo bench -p recon-salesforce --features emulator --bench salesforce`.
//! A program that prints numbers, not a test.

use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use jiff::{SignedDuration, Timestamp};
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Target, Value, Window,
    WriteMode, WriteOutcome,
};
use recon_salesforce::emulator::{Emulator, EmulatorConfig, FieldDef, FieldType};
use recon_salesforce::{SalesforceAuth, SalesforceConfig, SalesforceObjects};
use serde_json::json;

const OBJECT: &str = "Payment__c";
const KEY: &str = "Stripe_Charge_Id__c";
const WRITE: i64 = 10_000;
const READ: i64 = 100_000;

fn schema() -> Schema {
    let f = |n: &str, k| Field {
        name: n.into(),
        kind: k,
        compared: true,
    };
    Schema {
        fields: vec![
            f("amount", FieldKind::Money),
            f("status", FieldKind::Text),
            f("created", FieldKind::Timestamp),
        ],
    }
}

async fn org() -> Emulator {
    let e = Emulator::start(EmulatorConfig {
        latency: Duration::from_millis(100),
        daily_api_limit: 1_000_000,
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    e.define_object(
        OBJECT,
        vec![
            FieldDef {
                case_sensitive: true,
                ..FieldDef::external_id(KEY)
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
    e
}

fn connector(e: &Emulator, tweak: impl FnOnce(&mut SalesforceConfig)) -> SalesforceObjects {
    let mut cfg = SalesforceConfig::new(
        &e.base_url,
        SalesforceAuth::ClientCredentials {
            client_id: Secret::new(e.client_id.clone()),
            client_secret: Secret::new(e.client_secret.clone()),
            token_url: format!("{}/services/oauth2/token", e.base_url),
        },
        OBJECT,
        KEY,
        vec![
            "Amount__c".into(),
            "Status__c".into(),
            "Charge_Created__c".into(),
        ],
    );
    cfg.currency_field = Some("CurrencyIsoCode".into());
    cfg.date_field = "Charge_Created__c".into();
    tweak(&mut cfg);
    SalesforceObjects::new(cfg, &schema()).unwrap()
}

fn start() -> Timestamp {
    "2026-11-01T00:00:00Z".parse().unwrap()
}

fn records(prefix: &str, n: i64) -> Vec<Record> {
    let usd = Currency::parse("USD").unwrap();
    (0..n)
        .map(|i| Record {
            key: format!("ch_{prefix}_{i:020x}"),
            values: vec![
                Value::Money(Money::from_minor(1000 + i, usd)),
                Value::Text("succeeded".into()),
                Value::Timestamp(start() + SignedDuration::from_secs(i)),
            ],
        })
        .collect()
}

/// Writes 10,000 records one way and prints calls and pace.
async fn backfill(what: &str, mode: WriteMode, tweak: impl FnOnce(&mut SalesforceConfig)) {
    let e = org().await;
    let t = connector(&e, tweak);
    t.check_idempotent().await.unwrap();
    let recs = records(what.split(' ').next().unwrap_or("x"), WRITE);
    let before = e.stats().api_calls;
    let started = Instant::now();
    let out = t.write(&recs, mode).await.unwrap();
    let took = started.elapsed().as_secs_f64();
    let calls = e.stats().api_calls - before;
    let created = out.iter().filter(|o| **o == WriteOutcome::Created).count();
    assert_eq!(created, WRITE as usize, "{what}: every record created");
    assert_eq!(e.records(OBJECT).len(), WRITE as usize);
    let by_route = e.stats().by_route;
    println!(
        "backfill {WRITE} by {what}: {calls} API calls (200-record collections need {}), {took:.2} s, {:.0} records/s; routes {:?}",
        WRITE / 200,
        WRITE as f64 / took,
        by_route
            .iter()
            .filter(|(r, _)| !matches!(r.as_str(), "token" | "describe"))
            .collect::<Vec<_>>()
    );
    e.shutdown().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("emulator latency 100 ms per request\n");
    backfill("collections upsert", WriteMode::Upsert, |c| {
        c.bulk_write_threshold = usize::MAX;
    })
    .await;
    backfill("bulk ingest upsert", WriteMode::Upsert, |c| {
        c.bulk_write_threshold = 5_000;
    })
    .await;
    backfill(
        "insert mode (lookups, then collections create)",
        WriteMode::Insert,
        |c| {
            c.bulk_write_threshold = usize::MAX;
        },
    )
    .await;
    backfill(
        "insert mode (lookups, then a bulk insert job)",
        WriteMode::Insert,
        |c| {
            c.bulk_write_threshold = 5_000;
        },
    )
    .await;

    let e = org().await;
    let loading = Instant::now();
    for i in 0..READ {
        let at = start() + SignedDuration::from_millis(i * 800);
        e.insert(
            OBJECT,
            json!({
                KEY: format!("ch_{i:024x}"),
                "Amount__c": format!("{}.{:02}", i % 1000, i % 100).parse::<serde_json::Number>().unwrap(),
                "CurrencyIsoCode": "USD",
                "Status__c": "succeeded",
                "Charge_Created__c": at.to_string(),
            }),
        );
    }
    println!(
        "\nloaded {READ} records into the emulator in {:.1} s",
        loading.elapsed().as_secs_f64()
    );
    let window = Window {
        start: start(),
        end: start() + SignedDuration::from_secs(2 * 86_400),
    };
    let mut times = Vec::new();
    for (name, threshold) in [("paged /query", u64::MAX), ("Bulk API 2.0 query", 0)] {
        let t = connector(&e, |c| c.bulk_read_threshold = threshold);
        t.check_idempotent().await.unwrap(); // token and describe, not timed
        let before = e.stats().api_calls;
        let started = Instant::now();
        let pages: Vec<_> = t.read(window).try_collect().await.unwrap();
        let took = started.elapsed().as_secs_f64();
        let n: usize = pages.iter().map(|p| p.records.len()).sum();
        assert_eq!(n, READ as usize);
        let calls = e.stats().api_calls - before;
        println!(
            "read {n} by {name}: {took:.2} s, {calls} API calls, {} pages, {:.0} records/s",
            pages.len(),
            n as f64 / took
        );
        times.push(took);
    }
    println!(
        "\nsummary: 100,000-record window, paged {:.2} s vs Bulk API 2.0 {:.2} s ({:.1}x)",
        times[0],
        times[1],
        times[0] / times[1]
    );
    e.shutdown().await;
}
