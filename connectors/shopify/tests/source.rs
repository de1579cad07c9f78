//! The Shopify source against the GraphQL emulator over real HTTP.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::TryStreamExt;
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Value, Window,
};
use recon_shopify::emulator::{BulkOutcome, Emulator, EmulatorConfig, OrderSpec};
use recon_shopify::{BulkMode, ShopifyConfig, ShopifySource};

const START: i64 = 1_795_842_000;
const DAY: i64 = 86_400;

fn ts(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(s).unwrap()
}

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
            f("email", FieldKind::Text),
        ],
    }
}

fn window() -> Window {
    Window {
        start: ts(START),
        end: ts(START + DAY),
    }
}

fn order(id: u64, created: i64, amount: &str, currency: &str) -> OrderSpec {
    OrderSpec {
        legacy_id: id,
        name: format!("#{}", 1000 + id),
        created_at: ts(created),
        updated_at: ts(created + 60),
        amount: amount.into(),
        currency: currency.into(),
        financial_status: "PAID".into(),
        email: Some(format!("buyer{id}@example.com")),
    }
}

fn source(e: &Emulator, bulk: BulkMode) -> ShopifySource {
    let mut cfg = ShopifyConfig::new(&e.base_url, Secret::new(e.token.clone()));
    cfg.bulk = bulk;
    cfg.bulk_poll = Duration::from_millis(100);
    ShopifySource::new(cfg, &schema()).unwrap()
}

async fn read(s: &ShopifySource) -> Result<Vec<Record>, recon_core::ConnectorError> {
    let pages: Vec<_> = s.read(window()).try_collect().await?;
    let mut v: Vec<Record> = pages.into_iter().flat_map(|p| p.records).collect();
    v.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(v)
}

/// 1,200 orders in the window, plus orders exactly on and just off its edges.
fn seed(e: &Emulator) -> BTreeSet<String> {
    let mut inside = BTreeSet::new();
    for i in 0..1_200u64 {
        e.insert_order(order(
            i + 1,
            START + (i as i64 * DAY) / 1_200,
            "19.99",
            "USD",
        ));
        inside.insert((i + 1).to_string());
    }
    e.insert_order(order(5_000, START + DAY, "1.00", "USD"));
    e.insert_order(order(5_001, START - 1, "1.00", "USD"));
    inside
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amounts_convert_exactly_and_a_bad_one_names_the_order() {
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    e.insert_order(order(1, START + 10, "29.99", "USD"));
    e.insert_order(order(2, START + 20, "500.0", "JPY"));
    e.insert_order(order(3, START + 30, "0.100", "KWD"));
    e.insert_order(order(4, START + 40, "0.10", "EUR"));
    let got = read(&source(&e, BulkMode::Never)).await.unwrap();
    let amounts: Vec<Value> = got.iter().map(|r| r.values[0].clone()).collect();
    let m = |minor, c| Value::Money(Money::from_minor(minor, Currency::parse(c).unwrap()));
    assert_eq!(
        amounts,
        vec![m(2999, "USD"), m(500, "JPY"), m(100, "KWD"), m(10, "EUR")]
    );
    assert_eq!(got[0].values[1], Value::Text("PAID".into()));
    assert_eq!(got[0].values[3], Value::Text("buyer1@example.com".into()));

    e.insert_order(order(9, START + 50, "12.345", "USD"));
    let err = read(&source(&e, BulkMode::Never))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("#1009") && err.contains("12.345"), "{err}");
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_loses_and_doubles_nothing_at_the_edges() {
    let e = Emulator::start(EmulatorConfig {
        max_available: 100_000,
        restore_rate: 100_000,
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let inside = seed(&e);
    let got = read(&source(&e, BulkMode::Never)).await.unwrap();
    let keys: Vec<String> = got.iter().map(|r| r.key.clone()).collect();
    let set: BTreeSet<String> = keys.iter().cloned().collect();
    assert_eq!(keys.len(), set.len());
    assert_eq!(set, inside);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_avoids_throttling_and_recovers_when_another_client_drains_the_bucket() {
    let e = Emulator::start(EmulatorConfig {
        max_available: 2_000,
        restore_rate: 1_000,
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let inside = seed(&e);
    let s = source(&e, BulkMode::Never);
    let got = read(&s).await.unwrap();
    assert_eq!(got.len(), inside.len());
    assert_eq!(
        e.stats().throttled,
        0,
        "pacing kept every query under the bucket"
    );
    assert_eq!(s.throttled(), 0);

    // Another app of the same shop spends the bucket right before we read.
    e.drain_bucket(2_000);
    let s = source(&e, BulkMode::Never);
    let got = read(&s).await.unwrap();
    assert_eq!(got.len(), inside.len(), "recovered with exact counts");
    assert!(s.throttled() >= 1, "the first query met THROTTLED");
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_and_paged_reads_give_identical_records() {
    let e = Emulator::start(EmulatorConfig {
        max_available: 100_000,
        restore_rate: 100_000,
        bulk_delay: Duration::from_millis(300),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    seed(&e);
    let paged = read(&source(&e, BulkMode::Never)).await.unwrap();
    let bulk = read(&source(&e, BulkMode::Always)).await.unwrap();
    assert_eq!(paged, bulk);
    // Auto switches to bulk when the first page shows a large window.
    let before = e.stats().bulk_operations;
    let auto = read(&source(&e, BulkMode::Auto(500))).await.unwrap();
    assert_eq!(auto, paged);
    assert_eq!(e.stats().bulk_operations, before + 1);
    // A failed bulk operation is an error that says so.
    for outcome in [
        BulkOutcome::Failed,
        BulkOutcome::Canceled,
        BulkOutcome::Expired,
        BulkOutcome::PartialData,
    ] {
        e.set_bulk_outcome(outcome);
        let err = read(&source(&e, BulkMode::Always))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("bulk operation"), "{err}");
    }
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_find_orders_by_key() {
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    seed(&e);
    let found = source(&e, BulkMode::Never)
        .lookup(&["7".into(), "5000".into(), "999999".into()])
        .await
        .unwrap();
    let mut keys: Vec<String> = found.into_iter().map(|r| r.key).collect();
    keys.sort();
    assert_eq!(keys, ["5000", "7"]);
    e.shutdown().await;
}
