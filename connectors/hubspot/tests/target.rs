//! The HubSpot connector against the emulator over real HTTP on 127.0.0.1.

use std::collections::BTreeSet;

use futures_util::TryStreamExt;
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Target, Value, Window,
    WriteMode, WriteOutcome,
};
use recon_hubspot::emulator::{Emulator, EmulatorConfig, PropertyType};
use recon_hubspot::{HubSpotConfig, HubSpotObjects};
use serde_json::json;

const START_MS: i64 = 1_795_842_000_000;
const DAY_MS: i64 = 86_400_000;

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

fn window() -> Window {
    Window {
        start: jiff::Timestamp::from_millisecond(START_MS).unwrap(),
        end: jiff::Timestamp::from_millisecond(START_MS + DAY_MS).unwrap(),
    }
}

fn objects(emulator: &Emulator, rate: u32, search: u32) -> HubSpotObjects {
    let mut cfg = HubSpotConfig::new(
        Secret::new(emulator.token.clone()),
        "deals",
        "stripe_charge_id",
        vec!["amount".into(), "dealstage".into(), "stripe_created".into()],
    );
    cfg.currency_property = Some("deal_currency_code".into());
    cfg.date_property = "stripe_created".into();
    cfg.base_url = emulator.base_url.clone();
    cfg.requests_per_10s = rate;
    cfg.search_per_second = search;
    HubSpotObjects::new(cfg, &schema()).unwrap()
}

fn deal_props(i: i64, created_ms: i64) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("stripe_charge_id".into(), json!(format!("ch_{i:06}")));
    m.insert(
        "amount".into(),
        json!(format!("{}.{:02}", 10 + i % 90, i % 100)),
    );
    m.insert("deal_currency_code".into(), json!("USD"));
    m.insert("dealstage".into(), json!("closedwon"));
    m.insert("stripe_created".into(), json!(created_ms.to_string()));
    m
}

fn record(i: i64) -> Record {
    Record {
        key: format!("ch_{i:06}"),
        values: vec![
            Value::Money(Money::from_minor(
                (10 + i % 90) * 100 + i % 100,
                Currency::parse("USD").unwrap(),
            )),
            Value::Text("closedwon".into()),
            Value::Timestamp(jiff::Timestamp::from_millisecond(START_MS + i * 1000).unwrap()),
        ],
    }
}

async fn emulator(config: EmulatorConfig) -> Emulator {
    let e = Emulator::start(config).await.unwrap();
    e.create_property("deals", "stripe_charge_id", true);
    for p in ["deal_currency_code", "dealstage"] {
        e.create_property("deals", p, false);
    }
    e.create_typed_property("deals", "amount", PropertyType::Number, false);
    e.create_typed_property("deals", "stripe_created", PropertyType::DateTime, false);
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_25000_deals_is_read_completely_past_the_search_cap() {
    let e = emulator(EmulatorConfig {
        limit_per_10s: None,
        search_per_sec: None,
        ..EmulatorConfig::default()
    })
    .await;
    let mut inside = BTreeSet::new();
    for i in 0..25_000i64 {
        let created = START_MS + i * (DAY_MS / 25_000);
        e.insert("deals", deal_props(i, created));
        inside.insert(format!("ch_{i:06}"));
    }
    // Just outside the window on both sides.
    e.insert("deals", deal_props(900_001, START_MS - 1));
    e.insert("deals", deal_props(900_002, START_MS + DAY_MS));
    let pages: Vec<_> = objects(&e, 10_000, 1_000)
        .read(window())
        .try_collect()
        .await
        .unwrap();
    let ids: Vec<String> = pages
        .into_iter()
        .flat_map(|p| p.records)
        .map(|r| r.key)
        .collect();
    let set: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), set.len(), "nothing read twice");
    assert_eq!(set, inside);
    assert!(
        !e.stats().by_status.contains_key(&400),
        "the cap was never hit: {:?}",
        e.stats()
    );
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_are_idempotent_and_partial_failures_are_per_item() {
    let e = emulator(EmulatorConfig::default()).await;
    let t = objects(&e, 100, 5);
    t.check_idempotent().await.unwrap();
    let records: Vec<Record> = (0..250).map(record).collect();
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    assert!(out.iter().all(|o| *o == WriteOutcome::Created), "{out:?}");
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    assert!(
        out.iter().all(|o| *o == WriteOutcome::Unchanged),
        "new: false on the second write"
    );
    assert_eq!(e.objects("deals").len(), 250);

    // Two inputs of one batch fail; the rest of the batch is written.
    let more: Vec<Record> = (300..310).map(record).collect();
    e.fail_ids(vec!["ch_000303".into(), "ch_000307".into()]);
    let out = t.write(&more, WriteMode::Insert).await.unwrap();
    let failed: Vec<&str> = more
        .iter()
        .zip(&out)
        .filter(|(_, o)| matches!(o, WriteOutcome::Failed(_)))
        .map(|(r, _)| r.key.as_str())
        .collect();
    assert_eq!(failed, ["ch_000303", "ch_000307"]);
    assert_eq!(
        out.iter().filter(|o| **o == WriteOutcome::Created).count(),
        8
    );
    e.fail_ids(vec![]);
    let out = t.write(&more, WriteMode::Insert).await.unwrap();
    assert_eq!(
        out.iter().filter(|o| **o == WriteOutcome::Created).count(),
        2
    );
    assert_eq!(e.objects("deals").len(), 260, "nothing duplicated");

    // Lookups find written objects by the unique property.
    let found = t
        .lookup(&["ch_000005".into(), "ch_nope".into()])
        .await
        .unwrap();
    assert_eq!(found, vec![record(5)]);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_mode_never_modifies_an_existing_object() {
    let e = emulator(EmulatorConfig::default()).await;
    e.create_property("deals", "invoice_no", true);
    let t = objects(&e, 100, 5);
    // ch_000001 exists with other values than the source's.
    let mut existing = deal_props(1, START_MS);
    existing.insert("dealstage".into(), json!("appointmentscheduled"));
    existing.insert("amount".into(), json!("1.00"));
    e.insert("deals", existing.clone());
    // Another object holds the unique invoice_no that ch_000003 will carry.
    let mut other = deal_props(99, START_MS);
    other.insert("invoice_no".into(), json!("INV-3"));
    e.insert("deals", other);
    let records: Vec<Record> = (1..=4).map(record).collect();
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    assert_eq!(out[0], WriteOutcome::Unchanged, "{out:?}");
    assert_eq!(out[1], WriteOutcome::Created, "{out:?}");
    assert_eq!(out[2], WriteOutcome::Created, "{out:?}");
    assert_eq!(out[3], WriteOutcome::Created, "{out:?}");
    let stored = e.objects("deals");
    let (_, props) = stored
        .iter()
        .find(|(_, p)| p["stripe_charge_id"] == json!("ch_000001"))
        .unwrap();
    assert_eq!(
        props["dealstage"],
        json!("appointmentscheduled"),
        "not overwritten"
    );
    assert_eq!(props["amount"], json!("1.00"), "not overwritten");
    assert_eq!(stored.len(), 5);

    // A create that collides on another unique property fails alone; the
    // rest of its batch is created, and nothing is overwritten.
    let mut clash = record(5);
    clash.key = "ch_clash".into();
    let t2 = {
        let mut cfg = HubSpotConfig::new(
            Secret::new(e.token.clone()),
            "deals",
            "stripe_charge_id",
            vec![
                "amount".into(),
                "invoice_no".into(),
                "stripe_created".into(),
            ],
        );
        cfg.currency_property = Some("deal_currency_code".into());
        cfg.date_property = "stripe_created".into();
        cfg.base_url = e.base_url.clone();
        HubSpotObjects::new(cfg, &schema()).unwrap()
    };
    let mut fine = record(6);
    fine.values[1] = Value::Text("INV-6".into());
    clash.values[1] = Value::Text("INV-3".into());
    let out = t2.write(&[fine, clash], WriteMode::Insert).await.unwrap();
    assert_eq!(out[0], WriteOutcome::Created, "{out:?}");
    assert!(
        matches!(&out[1], WriteOutcome::Failed(m) if m.contains("invoice_no")),
        "{out:?}"
    );
    assert_eq!(e.objects("deals").len(), 6);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_property_that_is_not_unique_is_refused_with_the_fix() {
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    e.create_property("deals", "stripe_charge_id", false);
    let err = objects(&e, 100, 5)
        .check_idempotent()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("hasUniqueValue"), "{err}");
    let e2 = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let err = objects(&e2, 100, 5)
        .check_idempotent()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no property `stripe_charge_id`"), "{err}");
    e.shutdown().await;
    e2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_emulators_limits_no_request_is_throttled() {
    let e = emulator(EmulatorConfig {
        limit_per_10s: Some(12),
        search_per_sec: Some(5),
        ..EmulatorConfig::default()
    })
    .await;
    for i in 0..2_000i64 {
        e.insert("deals", deal_props(i, START_MS + i * 1000));
    }
    let t = objects(&e, 12, 5);
    let pages: Vec<_> = t.read(window()).try_collect().await.unwrap();
    assert_eq!(pages.iter().map(|p| p.records.len()).sum::<usize>(), 2_000);
    // 11 searches and 6 upserts: more than 12 in 10 s unless paced.
    let records: Vec<Record> = (5000..5600).map(record).collect();
    t.write(&records, WriteMode::Insert).await.unwrap();
    assert_eq!(e.stats().throttled, 0, "{:?}", e.stats());
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_points_at_the_token_setting() {
    let e = emulator(EmulatorConfig::default()).await;
    let mut cfg = HubSpotConfig::new(
        Secret::new("pat-na1-wrong".to_string()),
        "deals",
        "stripe_charge_id",
        vec!["amount".into(), "dealstage".into(), "stripe_created".into()],
    );
    cfg.base_url = e.base_url.clone();
    cfg.currency_property = Some("deal_currency_code".into());
    let t = HubSpotObjects::new(cfg, &schema()).unwrap();
    let err = t.check_idempotent().await.unwrap_err().to_string();
    assert!(err.contains("401") && err.contains("token"), "{err}");
    assert!(!err.contains("pat-na1-wrong"), "{err}");
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_daily_limit_stops_at_once_instead_of_retrying() {
    let e = emulator(EmulatorConfig {
        daily_limit: Some(2),
        ..EmulatorConfig::default()
    })
    .await;
    let t = objects(&e, 100, 5);
    t.check_idempotent().await.unwrap();
    let records: Vec<Record> = (0..300).map(record).collect();
    let err = t
        .write(&records, WriteMode::Insert)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("daily"), "{err}");
    // One property check, one upsert, then the refused one: no retries.
    assert_eq!(e.stats().requests, 3, "{:?}", e.stats());
    e.shutdown().await;
}
