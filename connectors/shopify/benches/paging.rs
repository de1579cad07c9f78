//! Shopify paging benchmark at the Standard plan's cost bucket (2,000
//! points, restored at 100 points/s): how close paced paging comes to what
//! the bucket allows, with the bulk path's time beside it.
//!
//! Run: `cargo bench -p recon-shopify --features emulator --bench paging`
//! (`RECON_BENCH_ORDERS=50000` for the full size: at 752 points per
//! page of 250 orders that is ~25 minutes of bucket time; the default 10,000
//! takes ~5). A program that prints numbers, not a test.
//!
//! Then (issue 12) another client of the app spends 90% of the restore rate
//! while recon pages 2,000 orders (`RECON_BENCH_RESTORE`, default 1000
//! points/s with a 2,000-point bucket, so 100 points/s are left; 100 is the
//! Standard plan and takes ~7 minutes). `RECON_BENCH_DRAINED_ONLY=1` runs
//! that part alone.

use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use recon_core::{Field, FieldKind, Schema, Secret, Source, Window};
use recon_shopify::emulator::{Emulator, EmulatorConfig, OrderSpec};
use recon_shopify::{BulkMode, ShopifyConfig, ShopifySource};

const START: i64 = 1_795_842_000;
const DAY: i64 = 86_400;

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
    if std::env::var_os("RECON_BENCH_DRAINED_ONLY").is_none() {
        alone().await;
    }
    drained().await;
}

/// 2,000 orders paged while another client spends 90% of the restore rate.
async fn drained() {
    let restore: u32 = std::env::var("RECON_BENCH_RESTORE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let config = EmulatorConfig {
        max_available: 2000,
        restore_rate: restore,
        others_share: 0.9,
        latency: Duration::from_millis(50),
        ..EmulatorConfig::default()
    };
    let e = Emulator::start(config).await.unwrap();
    let n = 2000u64;
    for i in 0..n {
        let t = jiff::Timestamp::from_second(START + (i as i64 * DAY) / n as i64).unwrap();
        e.insert_order(OrderSpec::example(2_000_000 + i, t));
    }
    let window = Window {
        start: jiff::Timestamp::from_second(START).unwrap(),
        end: jiff::Timestamp::from_second(START + DAY).unwrap(),
    };
    let mut cfg = ShopifyConfig::new(&e.base_url, Secret::new(e.token.clone()));
    cfg.bulk = BulkMode::Never;
    let s = ShopifySource::new(cfg, &schema()).unwrap();
    let started = Instant::now();
    let result: Result<Vec<_>, _> = s.read(window).try_collect().await;
    let took = started.elapsed().as_secs_f64();
    let left = f64::from(restore) * 0.1;
    let bound = (s.spent() as f64 - 2000.0).max(0.0) / left;
    match result {
        Ok(pages) => {
            let got: usize = pages.iter().map(|p| p.records.len()).sum();
            println!(
                "\ndrained: another client spends 90% of {restore} points/s (responses still report {restore}); {got} of {n} orders paged in {took:.1} s; {:.0} points spent; bound at the {left:.0} points/s left (after the 2,000-point bucket): {bound:.1} s ({:.0}% of the bound's pace); {} THROTTLED",
                s.spent() as f64,
                bound / took * 100.0,
                s.throttled()
            );
        }
        Err(err) => println!("\ndrained: FAILED after {took:.1} s: {err}"),
    }
    e.shutdown().await;
}

/// The whole bucket for recon.
async fn alone() {
    let orders: u64 = std::env::var("RECON_BENCH_ORDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let config = EmulatorConfig::default();
    let (max, restore) = (config.max_available as f64, config.restore_rate as f64);
    let e = Emulator::start(config).await.unwrap();
    for i in 0..orders {
        let t = jiff::Timestamp::from_second(START + (i as i64 * DAY) / orders as i64).unwrap();
        e.insert_order(OrderSpec {
            legacy_id: 1_000_000 + i,
            name: format!("#{}", 1001 + i),
            created_at: t,
            updated_at: t,
            amount: format!("{}.{:02}", 10 + i % 500, i % 100),
            currency: "USD".into(),
            financial_status: "PAID".into(),
            email: None,
        });
    }
    let window = Window {
        start: jiff::Timestamp::from_second(START).unwrap(),
        end: jiff::Timestamp::from_second(START + DAY).unwrap(),
    };
    println!("emulator: {orders} orders; Standard plan bucket: {max} points, restored at {restore} points/s");

    let mut cfg = ShopifyConfig::new(&e.base_url, Secret::new(e.token.clone()));
    cfg.bulk = BulkMode::Never;
    let paged = ShopifySource::new(cfg.clone(), &schema()).unwrap();
    let started = Instant::now();
    let pages: Vec<_> = paged.read(window).try_collect().await.unwrap();
    let took = started.elapsed().as_secs_f64();
    let n: usize = pages.iter().map(|p| p.records.len()).sum();
    // The bucket starts full; every point spent beyond it must be restored.
    let spent = paged.spent() as f64;
    let bound = ((spent - max).max(0.0)) / restore;
    println!(
        "paged: {n} orders in {took:.1} s ({:.0} orders/s); {spent:.0} points spent; the bucket allows it in {bound:.1} s at best ({:.1}% of that pace); THROTTLED {}",
        n as f64 / took,
        bound / took * 100.0,
        paged.throttled()
    );

    cfg.bulk = BulkMode::Always;
    cfg.bulk_poll = Duration::from_millis(250);
    let bulk = ShopifySource::new(cfg, &schema()).unwrap();
    let started = Instant::now();
    let pages: Vec<_> = bulk.read(window).try_collect().await.unwrap();
    let bulk_took = started.elapsed().as_secs_f64();
    let m: usize = pages.iter().map(|p| p.records.len()).sum();
    println!("bulk: {m} orders in {bulk_took:.2} s (one bulk operation, polled, JSONL streamed)");
    println!(
        "\nsummary: paging {n} orders at the Standard plan's restore rate: {:.1}% of the pace the cost bucket allows (target >= 90%), {} THROTTLED; bulk path {bulk_took:.2} s vs paged {took:.1} s",
        bound / took * 100.0,
        e.stats().throttled
    );
    e.shutdown().await;
}
