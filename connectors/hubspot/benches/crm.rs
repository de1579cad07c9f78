//! HubSpot benchmark: read 50,000 deals through search and upsert 10,000
//! through batch/upsert against the emulator at HubSpot's lowest documented
//! limits (100 requests per rolling 10 s; search 5 requests/s), and compare
//! with the bound those limits set. Target: within 10% of the bound.
//!
//! Then (issue 12) other apps of the account spend 90% of a 40-per-10-s
//! budget (the emulator in strict counting mode) while recon upserts 1,000
//! deals, three runs: every run must complete with 0 failures; the wall time
//! is compared with the bound of the 4 requests per 10 s left over.
//!
//! Run: `cargo bench -p recon-hubspot --features emulator --bench crm`
//! (`RECON_BENCH_SHARED_ONLY=1` for the shared-budget part alone).
//! A program that prints numbers, not a test.

use std::time::Instant;

use futures_util::TryStreamExt;
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Target, Value, Window,
    WriteMode,
};
use recon_hubspot::emulator::{Emulator, EmulatorConfig, PropertyType};
use recon_hubspot::{HubSpotConfig, HubSpotObjects};
use serde_json::json;

const START_MS: i64 = 1_795_842_000_000;
const DAY_MS: i64 = 86_400_000;
const READ: i64 = 50_000;
const WRITE: i64 = 10_000;

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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::var_os("RECON_BENCH_SHARED_ONLY").is_none() {
        alone().await;
    }
    shared_budget().await;
}

/// 1,000 upserts while other apps use 36 of the 40 requests per 10 s.
async fn shared_budget() {
    const RUNS: usize = 3;
    const LIMIT: u32 = 40;
    let mut failed = 0;
    let mut lines = Vec::new();
    for run in 0..RUNS {
        let e = Emulator::start(EmulatorConfig {
            limit_per_10s: Some(LIMIT),
            strict: true,
            others_share: 0.9,
            latency: std::time::Duration::from_millis(50),
            ..EmulatorConfig::default()
        })
        .await
        .unwrap();
        e.create_property("deals", "stripe_charge_id", true);
        for p in ["deal_currency_code", "dealstage"] {
            e.create_property("deals", p, false);
        }
        e.create_typed_property("deals", "amount", PropertyType::Number, false);
        e.create_typed_property("deals", "stripe_created", PropertyType::DateTime, false);
        // The other apps are already busy when the run starts.
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        let mut cfg = HubSpotConfig::new(
            Secret::new(e.token.clone()),
            "deals",
            "stripe_charge_id",
            vec!["amount".into(), "dealstage".into(), "stripe_created".into()],
        );
        cfg.currency_property = Some("deal_currency_code".into());
        cfg.date_property = "stripe_created".into();
        cfg.base_url = e.base_url.clone();
        cfg.requests_per_10s = LIMIT;
        let t = HubSpotObjects::new(cfg, &schema()).unwrap();
        let usd = Currency::parse("USD").unwrap();
        let records: Vec<Record> = (0..1000)
            .map(|i| Record {
                key: format!("ch_shared_{run}_{i:06}"),
                values: vec![
                    Value::Money(Money::from_minor(1000 + i, usd)),
                    if i % 10 == 0 {
                        Value::Null
                    } else {
                        Value::Text("closedwon".into())
                    },
                    Value::Timestamp(jiff::Timestamp::from_millisecond(START_MS + i).unwrap()),
                ],
            })
            .collect();
        let started = Instant::now();
        let result = match t.check_idempotent().await {
            Ok(()) => t.write(&records, WriteMode::Upsert).await,
            Err(e) => Err(e),
        };
        let took = started.elapsed().as_secs_f64();
        let (general, _) = t.stats();
        let stats = e.stats();
        match result {
            Ok(out) => {
                let bad = out
                    .iter()
                    .filter(|o| !matches!(o, recon_core::WriteOutcome::Created))
                    .count();
                if bad > 0 || e.count("deals") != 1000 {
                    failed += 1;
                }
                // The calls that succeeded, at the 4 per 10 s left over.
                let calls = general.requests - general.throttled;
                let bound = calls as f64 * 10.0 / f64::from(LIMIT / 10);
                lines.push(format!(
                    "run {}: {} deals upserted ({bad} not created) in {took:.1} s with {calls} calls ({} x 429, other apps {} requests); bound at the 4 requests / 10 s left: {bound:.1} s ({:.0}% of the bound's pace)",
                    run + 1,
                    e.count("deals"),
                    general.throttled,
                    stats.other_requests,
                    bound / took * 100.0
                ));
            }
            Err(err) => {
                failed += 1;
                lines.push(format!("run {}: FAILED after {took:.1} s: {err}", run + 1));
            }
        }
        e.shutdown().await;
    }
    println!("\nshared budget: other apps use 36 of 40 requests per rolling 10 s (strict emulator, 50 ms latency), 1,000 upserts per run");
    for l in &lines {
        println!("{l}");
    }
    println!("summary: {RUNS} runs, {failed} failed");
}

/// The whole budget for recon: 50,000 reads and 10,000 writes.
async fn alone() {
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    e.create_property("deals", "stripe_charge_id", true);
    for p in ["deal_currency_code", "dealstage"] {
        e.create_property("deals", p, false);
    }
    e.create_typed_property("deals", "amount", PropertyType::Number, false);
    e.create_typed_property("deals", "stripe_created", PropertyType::DateTime, false);
    for i in 0..READ {
        let mut m = serde_json::Map::new();
        m.insert("stripe_charge_id".into(), json!(format!("ch_{i:024x}")));
        m.insert(
            "amount".into(),
            json!(format!("{}.{:02}", i % 1000, i % 100)),
        );
        m.insert("deal_currency_code".into(), json!("USD"));
        m.insert("dealstage".into(), json!("closedwon"));
        m.insert(
            "stripe_created".into(),
            json!((START_MS + i * (DAY_MS / READ)).to_string()),
        );
        e.insert("deals", m);
    }
    let mut cfg = HubSpotConfig::new(
        Secret::new(e.token.clone()),
        "deals",
        "stripe_charge_id",
        vec!["amount".into(), "dealstage".into(), "stripe_created".into()],
    );
    cfg.currency_property = Some("deal_currency_code".into());
    cfg.date_property = "stripe_created".into();
    cfg.base_url = e.base_url.clone();
    let t = HubSpotObjects::new(cfg, &schema()).unwrap();
    println!("emulator: {READ} deals; limits 100 requests / 10 s, search 5 requests / s");

    let window = Window {
        start: jiff::Timestamp::from_millisecond(START_MS).unwrap(),
        end: jiff::Timestamp::from_millisecond(START_MS + DAY_MS).unwrap(),
    };
    let started = Instant::now();
    let pages: Vec<_> = t.read(window).try_collect().await.unwrap();
    let read_time = started.elapsed().as_secs_f64();
    let n: usize = pages.iter().map(|p| p.records.len()).sum();
    let (_, search) = t.stats();
    // Search is paced by both limits: 5/s, and 100 per 10 s shared.
    let read_bound = (search.requests as f64 - 1.0) / 5.0;
    println!(
        "read {n} deals in {read_time:.1} s with {} search requests; bound at 5 requests/s: {read_bound:.1} s ({:.1}% of the bound's pace)",
        search.requests,
        read_bound / read_time * 100.0
    );

    let usd = Currency::parse("USD").unwrap();
    let records: Vec<Record> = (0..WRITE)
        .map(|i| Record {
            key: format!("ch_new_{i:020x}"),
            values: vec![
                Value::Money(Money::from_minor(1000 + i, usd)),
                Value::Text("closedwon".into()),
                Value::Timestamp(jiff::Timestamp::from_millisecond(START_MS + i).unwrap()),
            ],
        })
        .collect();
    let (before, _) = t.stats();
    let started = Instant::now();
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    let write_time = started.elapsed().as_secs_f64();
    let (after, _) = t.stats();
    let calls = after.requests - before.requests;
    // The general limit: 100 per rolling 10 s, i.e. a sustained 10/s.
    let write_bound = (calls as f64 - 5.0).max(0.0) / 10.0;
    let created = out
        .iter()
        .filter(|o| **o == recon_core::WriteOutcome::Created)
        .count();
    println!(
        "upserted {created} deals in {write_time:.1} s with {calls} batch calls; bound at 100 / 10 s: {write_bound:.1} s ({:.1}% of the bound's pace)",
        write_bound / write_time * 100.0
    );
    let stats = e.stats();
    println!(
        "\nsummary: read {n} + upsert {created} at 100 req/10 s and 5 searches/s: {:.1} s total vs a bound of {:.1} s ({:.1}% of the bound's pace, target >= 90%); {} x 429",
        read_time + write_time,
        read_bound + write_bound,
        (read_bound + write_bound) / (read_time + write_time) * 100.0,
        stats.throttled
    );
    e.shutdown().await;
}
