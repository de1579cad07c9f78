//! Issue 12 (provider limits) for Shopify: THROTTLED waits from what the
//! responses report while another client drains the cost bucket, a retry
//! budget by time, and the 60-day horizon of apps without `read_all_orders`.
#![cfg(feature = "emulator")]

use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

use futures_util::TryStreamExt;
use recon_core::{Field, FieldKind, Schema, Secret, Source, Window};
use recon_shopify::emulator::{Emulator, EmulatorConfig, OrderSpec};
use recon_shopify::{BulkMode, ShopifyConfig, ShopifySource};
use serde_json::{json, Value as Json};

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

fn ts(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(s).unwrap()
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// `n` orders spread over the day starting at `start`.
fn orders(e: &Emulator, start: i64, n: u64) {
    e.insert_orders(
        (0..n).map(|i| OrderSpec::example(5_000_000 + i, ts(start + i as i64 * DAY / n as i64))),
    );
}

fn source(e: &Emulator, patience: Duration) -> ShopifySource {
    let mut cfg = ShopifyConfig::new(&e.base_url, Secret::new(e.token.clone()));
    cfg.bulk = BulkMode::Never;
    cfg.rate_limit_patience = patience;
    ShopifySource::new(cfg, &schema()).unwrap()
}

fn day(start: i64) -> Window {
    Window {
        start: ts(start),
        end: ts(start + DAY),
    }
}

#[tokio::test(start_paused = true)]
async fn with_90_percent_of_the_restore_rate_drained_2000_orders_are_paged_completely() {
    // Another client of the app spends 90% of the restore rate; responses
    // still report the whole rate. (A fast plan keeps the test short: the
    // bucket restores 500 of its 5,000 points/s for recon.)
    let e = Emulator::start(EmulatorConfig {
        max_available: 1000,
        restore_rate: 5000,
        others_share: 0.9,
        latency: Duration::from_millis(10),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let start = now() - 10 * DAY;
    orders(&e, start, 2000);
    let s = source(&e, Duration::from_secs(15 * 60));
    let started = Instant::now();
    let pages: Vec<_> = s.read(day(start)).try_collect().await.unwrap();
    let took = started.elapsed();
    let keys: BTreeSet<String> = pages
        .into_iter()
        .flat_map(|p| p.records)
        .map(|r| r.key)
        .collect();
    assert_eq!(keys.len(), 2000);
    // 8 pages of 752 points: 6,016 points, 1,000 in the full bucket, the
    // rest at the 500 points/s left: ~10 s at best.
    let bound = (s.spent() as f64 - 1000.0) / 500.0;
    eprintln!(
        "2,000 orders with 90% drained: {took:?} (bound {bound:.1} s), {} THROTTLED, {:?}",
        s.throttled(),
        e.stats()
    );
    // Waits at the nominal 5,000 points/s would be a tenth of what is
    // needed, so each page would meet ~10 THROTTLED answers.
    assert!(
        s.throttled() <= 6,
        "waits follow the reported bucket: {} THROTTLED",
        s.throttled()
    );
    assert!(
        took.as_secs_f64() <= bound * 1.5 + 2.0,
        "{took:?} vs a bound of {bound:.1} s"
    );
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_bucket_that_never_restores_fails_after_rate_limit_patience_naming_it() {
    let e = Emulator::start(EmulatorConfig {
        others_share: 1.0,
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    e.drain_bucket(2000);
    let start = now() - 10 * DAY;
    orders(&e, start, 300);
    let s = source(&e, Duration::from_secs(20));
    let started = Instant::now();
    let err = s
        .read(day(start))
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("THROTTLED") && err.contains("rate_limit_patience"),
        "{err}"
    );
    assert!(err.contains("20s"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    // Not 20 quick retries: a handful of waits sized from the reports.
    assert!(s.throttled() <= 4, "{}", s.throttled());
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_old_window_without_read_all_orders_is_refused_naming_the_scope() {
    let e = Emulator::start(EmulatorConfig {
        access_scopes: vec!["read_orders".into()],
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let start = now() - 90 * DAY;
    orders(&e, start, 50);
    let s = source(&e, Duration::from_secs(60));
    let err = s
        .read(day(start))
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("read_all_orders"), "{err}");
    assert!(err.contains("only: read_orders"), "{err}");
    assert!(
        err.contains("60 days") && err.contains("90 days ago"),
        "{err}"
    );
    // Only the scope query ran: no orders were read.
    assert_eq!(e.stats().queries, 1, "{:?}", e.stats());
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_old_window_with_read_all_orders_is_read() {
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let start = now() - 90 * DAY;
    orders(&e, start, 300);
    let s = source(&e, Duration::from_secs(60));
    let pages: Vec<_> = s.read(day(start)).try_collect().await.unwrap();
    assert_eq!(pages.iter().map(|p| p.records.len()).sum::<usize>(), 300);
    // The scope query, then two pages.
    assert_eq!(e.stats().queries, 3, "{:?}", e.stats());
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_recent_window_is_read_without_asking_for_scopes() {
    let e = Emulator::start(EmulatorConfig {
        access_scopes: vec!["read_orders".into()],
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let start = now() - 30 * DAY;
    orders(&e, start, 100);
    let s = source(&e, Duration::from_secs(60));
    let pages: Vec<_> = s.read(day(start)).try_collect().await.unwrap();
    assert_eq!(pages.iter().map(|p| p.records.len()).sum::<usize>(), 100);
    assert_eq!(e.stats().queries, 1, "{:?}", e.stats());
    e.shutdown().await;
}

async fn graphql(e: &Emulator, query: &str) -> Json {
    reqwest::Client::new()
        .post(e.graphql_url())
        .header("X-Shopify-Access-Token", &e.token)
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_emulator_hides_orders_older_than_60_days_without_read_all_orders() {
    let e = Emulator::start(EmulatorConfig {
        access_scopes: vec!["read_orders".into(), "read_products".into()],
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    e.insert_order(OrderSpec::example(1, ts(now() - 61 * DAY)));
    e.insert_order(OrderSpec::example(2, ts(now() - 59 * DAY)));
    let v = graphql(&e, "{ orders(first: 10) { nodes { legacyResourceId } } }").await;
    assert_eq!(
        v["data"]["orders"]["nodes"],
        json!([{"legacyResourceId": "2"}]),
        "{v}"
    );
    let v = graphql(&e, "{ currentAppInstallation { accessScopes { handle } } }").await;
    assert_eq!(
        v["data"]["currentAppInstallation"]["accessScopes"],
        json!([{"handle": "read_orders"}, {"handle": "read_products"}]),
        "{v}"
    );
    e.shutdown().await;

    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    e.insert_order(OrderSpec::example(1, ts(now() - 61 * DAY)));
    let v = graphql(&e, "{ orders(first: 10) { nodes { legacyResourceId } } }").await;
    assert_eq!(
        v["data"]["orders"]["nodes"],
        json!([{"legacyResourceId": "1"}]),
        "{v}"
    );
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_emulators_other_client_drains_the_restore_rate_it_reports_whole() {
    let e = Emulator::start(EmulatorConfig {
        others_share: 0.9,
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    e.drain_bucket(2000);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // 100 points/s restored, 90 spent by the other client: ~20 points.
    let have = e.currently_available();
    assert!((15..=25).contains(&have), "{have}");
    let v = graphql(&e, "{ currentAppInstallation { id } }").await;
    assert_eq!(
        v["extensions"]["cost"]["throttleStatus"]["restoreRate"],
        json!(100.0),
        "{v}"
    );
    e.shutdown().await;
}
