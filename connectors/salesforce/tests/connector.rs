//! The Salesforce connector against the emulator: windows read once by
//! paging and by Bulk API 2.0, lookups of awkward keys, upserts by sObject
//! Collections and Bulk API 2.0 with per-item outcomes, insert mode, token
//! refresh, the external-ID precondition, the daily allowance.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use futures_util::StreamExt;
use jiff::Timestamp;
use recon_core::{
    ConnectorError, Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Target,
    Value, Window, WriteMode, WriteOutcome,
};
use recon_salesforce::emulator::{Emulator, EmulatorConfig, Fault, FaultKind, FieldDef, FieldType};
use recon_salesforce::{SalesforceAuth, SalesforceConfig, SalesforceObjects};
use serde_json::json;

const OBJECT: &str = "Payment__c";
const KEY: &str = "Stripe_Charge_Id__c";

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn usd(minor: i64) -> Money {
    Money::from_minor(minor, Currency::parse("USD").unwrap())
}

fn schema() -> Schema {
    let f = |name: &str, kind| Field {
        name: name.into(),
        kind,
        compared: true,
    };
    Schema {
        fields: vec![
            f("amount", FieldKind::Money),
            f("currency", FieldKind::Currency),
            f("status", FieldKind::Text),
            f("created", FieldKind::Timestamp),
        ],
    }
}

fn payment_fields() -> Vec<FieldDef> {
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
        FieldDef {
            length: 20,
            ..FieldDef::text("Status__c")
        },
        FieldDef::datetime("Charge_Created__c"),
    ]
}

async fn org(cfg: EmulatorConfig) -> Emulator {
    let emu = Emulator::start(cfg).await.unwrap();
    emu.define_object(OBJECT, payment_fields());
    emu
}

fn config(emu: &Emulator) -> SalesforceConfig {
    let mut cfg = SalesforceConfig::new(
        &emu.base_url,
        SalesforceAuth::ClientCredentials {
            client_id: Secret::new(emu.client_id.clone()),
            client_secret: Secret::new(emu.client_secret.clone()),
            token_url: format!("{}/services/oauth2/token", emu.base_url),
        },
        OBJECT,
        KEY,
        vec![
            "Amount__c".into(),
            "CurrencyIsoCode".into(),
            "Status__c".into(),
            "Charge_Created__c".into(),
        ],
    );
    cfg.currency_field = Some("CurrencyIsoCode".into());
    cfg.bulk_poll = Duration::from_millis(50);
    cfg
}

fn connector(cfg: SalesforceConfig) -> SalesforceObjects {
    SalesforceObjects::new(cfg, &schema()).unwrap()
}

/// A record as the emulator stores it.
fn stored(key: &str, cents: i64, created: Timestamp) -> serde_json::Value {
    json!({
        KEY: key,
        "Amount__c": format!("{}.{:02}", cents / 100, cents % 100).parse::<serde_json::Number>().unwrap(),
        "CurrencyIsoCode": "USD",
        "Status__c": "succeeded",
        "Charge_Created__c": created.to_string(),
        "CreatedDate": created.to_string(),
    })
}

fn record(key: &str, cents: i64, created: Timestamp) -> Record {
    let c = Currency::parse("USD").unwrap();
    Record {
        key: key.into(),
        values: vec![
            Value::Money(usd(cents)),
            Value::Currency(c),
            Value::Text("succeeded".into()),
            Value::Timestamp(created),
        ],
    }
}

async fn read_all(src: &SalesforceObjects, window: Window) -> Result<Vec<Record>, ConnectorError> {
    let mut out = Vec::new();
    let mut pages = src.read(window);
    while let Some(p) = pages.next().await {
        out.extend(p?.records);
    }
    Ok(out)
}

fn routes(emu: &Emulator) -> BTreeMap<String, u64> {
    emu.stats().by_route
}

fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>, route: &str) -> u64 {
    after.get(route).copied().unwrap_or(0) - before.get(route).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_25000_is_read_exactly_once_by_paging_and_by_bulk_api() {
    let emu = org(EmulatorConfig::default()).await;
    let start = ts("2026-01-01T00:00:00Z");
    let end = ts("2026-01-02T00:00:00Z");
    for i in 0..25_000i64 {
        let at = start + jiff::SignedDuration::from_secs(i * 3);
        emu.insert(OBJECT, stored(&format!("ch_{i:06}"), 100 + i, at));
    }
    // Just outside, on both sides; one exactly at the end (excluded).
    emu.insert(OBJECT, stored("ch_before", 1, ts("2025-12-31T23:59:59Z")));
    emu.insert(OBJECT, stored("ch_at_end", 1, end));
    let window = Window { start, end };

    let mut paged_cfg = config(&emu);
    paged_cfg.bulk_read_threshold = u64::MAX;
    let paged_src = connector(paged_cfg);
    let before = routes(&emu);
    let mut paged = read_all(&paged_src, window).await.unwrap();
    let after = routes(&emu);
    assert_eq!(paged.len(), 25_000);
    // COUNT(), the first page, then 12 more pages of 2,000.
    assert_eq!(delta(&after, &before, "query"), 2);
    assert_eq!(delta(&after, &before, "query_more"), 12);
    assert_eq!(delta(&after, &before, "bulk_query_create"), 0);

    let mut bulk_cfg = config(&emu);
    bulk_cfg.bulk_read_threshold = 0;
    let bulk_src = connector(bulk_cfg);
    let before = routes(&emu);
    let mut bulk = read_all(&bulk_src, window).await.unwrap();
    let after = routes(&emu);
    assert_eq!(delta(&after, &before, "bulk_query_create"), 1);
    assert!(delta(&after, &before, "bulk_query_results") >= 1);
    assert_eq!(delta(&after, &before, "query_more"), 0);

    let keys: HashSet<&str> = paged.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys.len(), 25_000, "every record once");
    assert!(!keys.contains("ch_before") && !keys.contains("ch_at_end"));
    paged.sort_by(|a, b| a.key.cmp(&b.key));
    bulk.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(paged, bulk, "the same records, value for value");
    assert_eq!(
        paged[7],
        record(
            "ch_000007",
            107,
            start + jiff::SignedDuration::from_secs(21)
        )
    );
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_results_are_streamed_page_by_page() {
    let emu = org(EmulatorConfig::default()).await;
    let start = ts("2026-01-01T00:00:00Z");
    let n = recon_salesforce::BULK_RESULTS_PAGE as i64 * 2 + 10;
    for i in 0..n {
        emu.insert(
            OBJECT,
            stored(
                &format!("ch_{i:06}"),
                i,
                start + jiff::SignedDuration::from_secs(i),
            ),
        );
    }
    let mut cfg = config(&emu);
    cfg.bulk_read_threshold = 0;
    let src = connector(cfg);
    let window = Window {
        start,
        end: ts("2026-01-03T00:00:00Z"),
    };
    let mut pages = src.read(window);
    let mut sizes = Vec::new();
    while let Some(p) = pages.next().await {
        sizes.push(p.unwrap().records.len());
    }
    assert_eq!(
        sizes,
        vec![
            recon_salesforce::BULK_RESULTS_PAGE as usize,
            recon_salesforce::BULK_RESULTS_PAGE as usize,
            10
        ]
    );
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_find_keys_with_quotes_backslashes_and_wildcards() {
    let emu = org(EmulatorConfig::default()).await;
    let at = ts("2026-01-01T00:00:00Z");
    let awkward = [
        "ch_o'brien",
        r"ch_back\slash",
        r"ch_\'both",
        "ch_100%",
        "ch_under_score",
        "ch_%_'\\",
        "ch_ünïcödé ☃",
    ];
    for k in awkward {
        emu.insert(OBJECT, stored(k, 1, at));
    }
    // Records a wildcard would match if % or _ were not literal.
    for k in ["ch_1000", "ch_underXscore", "ch_ab'_x"] {
        emu.insert(OBJECT, stored(k, 1, at));
    }
    let src = connector(config(&emu));
    let mut asked: Vec<String> = awkward.iter().map(|k| k.to_string()).collect();
    asked.push("ch_missing'".into());
    asked.push("ch_1%".into());
    asked.push("ch_under_score".into()); // twice
    let found = src.lookup(&asked).await.unwrap();
    let keys: HashSet<String> = found.iter().map(|r| r.key.clone()).collect();
    let want: HashSet<String> = awkward.iter().map(|k| k.to_string()).collect();
    assert_eq!(keys, want);
    assert_eq!(found.len(), awkward.len());

    // Many keys: several IN (…) queries, each under the URI limit (the
    // emulator refuses longer ones with 414/431).
    let many: Vec<String> = (0..3000).map(|i| format!("ch_many_{i:05}_'\\%_")).collect();
    for k in many.iter().step_by(100) {
        emu.insert(OBJECT, stored(k, 1, at));
    }
    let before = routes(&emu);
    let found = src.lookup(&many).await.unwrap();
    let after = routes(&emu);
    assert_eq!(found.len(), 30);
    let queries = delta(&after, &before, "query");
    assert!((2..=30).contains(&queries), "{queries} lookup queries");
    assert_eq!(emu.stats().by_status.get(&414), None);
    assert_eq!(emu.stats().by_status.get(&431), None);
    emu.shutdown().await;
}

/// 450 records, two of which Salesforce refuses: one amount out of the
/// field's range, one status longer than the field.
fn batch_of_450(at: Timestamp) -> Vec<Record> {
    (0..450)
        .map(|i| {
            let mut r = record(&format!("ch_{i:04}"), 1000 + i, at);
            if i == 17 {
                r.values[0] = Value::Money(usd(i64::MAX));
            }
            if i == 333 {
                r.values[2] = Value::Text("x".repeat(21));
            }
            r
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_go_200_per_call_with_per_item_outcomes_and_refused_items_retry_alone() {
    let emu = org(EmulatorConfig::default()).await;
    let at = ts("2026-01-01T00:00:00Z");
    // 50 exist already, with other amounts.
    for i in 0..50 {
        emu.insert(OBJECT, stored(&format!("ch_{i:04}"), 1, at));
    }
    let target = connector(config(&emu));
    target.check_idempotent().await.unwrap();
    let records = batch_of_450(at);
    let before = routes(&emu);
    let out = target.write(&records, WriteMode::Upsert).await.unwrap();
    let after = routes(&emu);
    assert_eq!(
        delta(&after, &before, "composite_upsert"),
        3,
        "450 = 200 + 200 + 50"
    );
    assert_eq!(out.len(), 450);
    for (i, o) in out.iter().enumerate() {
        match i {
            17 => assert!(
                matches!(o, WriteOutcome::Failed(m) if m.starts_with("NUMBER_OUTSIDE_VALID_RANGE")),
                "{o:?}"
            ),
            333 => assert!(
                matches!(o, WriteOutcome::Failed(m) if m.starts_with("STRING_TOO_LONG")),
                "{o:?}"
            ),
            0..50 => assert_eq!(o, &WriteOutcome::Updated, "item {i}"),
            _ => assert_eq!(o, &WriteOutcome::Created, "item {i}"),
        }
    }
    // ch_0333 was refused; ch_0017 existed before.
    assert_eq!(emu.records(OBJECT).len(), 449);

    // The two refused items, fixed, are written alone: one call.
    let retry = vec![record("ch_0017", 1017, at), record("ch_0333", 1333, at)];
    let before = routes(&emu);
    let out = target.write(&retry, WriteMode::Upsert).await.unwrap();
    assert_eq!(delta(&routes(&emu), &before, "composite_upsert"), 1);
    assert_eq!(out, vec![WriteOutcome::Updated, WriteOutcome::Created]);
    assert_eq!(emu.records(OBJECT).len(), 450);

    // Everything reads back exactly.
    let back = target
        .lookup(&records.iter().map(|r| r.key.clone()).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(back.len(), 450);
    let by_key: BTreeMap<&str, &Record> = back.iter().map(|r| (r.key.as_str(), r)).collect();
    assert_eq!(by_key["ch_0449"].values[0], Value::Money(usd(1449)));
    assert_eq!(by_key["ch_0017"].values[0], Value::Money(usd(1017)));
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_upserts_go_through_a_bulk_ingest_job_with_outcomes_mapped_back() {
    let emu = org(EmulatorConfig::default()).await;
    let at = ts("2026-01-01T00:00:00Z");
    for i in 0..50 {
        emu.insert(OBJECT, stored(&format!("ch_{i:04}"), 1, at));
    }
    let mut cfg = config(&emu);
    cfg.bulk_write_threshold = 400;
    let target = connector(cfg);
    let records = batch_of_450(at);
    let before = routes(&emu);
    let out = target.write(&records, WriteMode::Upsert).await.unwrap();
    let after = routes(&emu);
    assert_eq!(delta(&after, &before, "composite_upsert"), 0);
    assert_eq!(delta(&after, &before, "bulk_ingest_create"), 1);
    assert_eq!(delta(&after, &before, "bulk_ingest_upload"), 1);
    for (i, o) in out.iter().enumerate() {
        match i {
            17 => assert!(
                matches!(o, WriteOutcome::Failed(m) if m.contains("NUMBER_OUTSIDE_VALID_RANGE")),
                "{o:?}"
            ),
            333 => assert!(
                matches!(o, WriteOutcome::Failed(m) if m.contains("STRING_TOO_LONG")),
                "{o:?}"
            ),
            0..50 => assert_eq!(o, &WriteOutcome::Updated, "item {i}"),
            _ => assert_eq!(o, &WriteOutcome::Created, "item {i}"),
        }
    }
    assert_eq!(emu.records(OBJECT).len(), 449);
    let back = target.lookup(&["ch_0449".to_string()]).await.unwrap();
    assert_eq!(back, vec![records[449].clone()]);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_mode_creates_only_missing_records_and_never_changes_existing_ones() {
    let emu = org(EmulatorConfig::default()).await;
    let at = ts("2026-01-01T00:00:00Z");
    emu.insert(OBJECT, stored("ch_old", 1, at));
    let target = connector(config(&emu));
    let records = vec![record("ch_old", 999, at), record("ch_new", 2, at)];
    let out = target.write(&records, WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Unchanged, WriteOutcome::Created]);
    let back = target.lookup(&["ch_old".to_string()]).await.unwrap();
    assert_eq!(back[0].values[0], Value::Money(usd(1)), "never overwritten");
    // Twice: nothing more is created.
    let out = target.write(&records, WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Unchanged, WriteOutcome::Unchanged]);
    assert_eq!(emu.records(OBJECT).len(), 2);

    // The race: another integration creates ch_race after recon's lookup
    // and before its create arrives (the create is held 500 ms). The
    // unique key refuses recon's record; the existing one is untouched.
    let race = vec![record("ch_race", 999, at)];
    let before = emu.stats().requests;
    emu.set_faults(vec![Fault {
        kind: FaultKind::Slow(Duration::from_millis(500)),
        after: 1,
        times: 1,
    }]);
    let writing = tokio::spawn({
        let target = target.clone();
        async move { target.write(&race, WriteMode::Insert).await }
    });
    while emu.stats().requests < before + 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    emu.insert(OBJECT, stored("ch_race", 1, at));
    let out = writing.await.unwrap().unwrap();
    assert_eq!(out, vec![WriteOutcome::Unchanged]);
    let back = target.lookup(&["ch_race".to_string()]).await.unwrap();
    assert_eq!(back[0].values[0], Value::Money(usd(1)), "never overwritten");
    assert_eq!(emu.records(OBJECT).len(), 3);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_mode_through_a_bulk_insert_job_creates_only_the_missing() {
    let emu = org(EmulatorConfig::default()).await;
    let at = ts("2026-01-01T00:00:00Z");
    emu.insert(OBJECT, stored("ch_old", 1, at));
    let mut cfg = config(&emu);
    cfg.bulk_write_threshold = 2;
    let target = connector(cfg);
    let mut records: Vec<Record> = (0..5)
        .map(|i| record(&format!("ch_new{i}"), 10 + i, at))
        .collect();
    records.insert(2, record("ch_old", 999, at));
    let before = routes(&emu);
    let out = target.write(&records, WriteMode::Insert).await.unwrap();
    let after = routes(&emu);
    assert_eq!(delta(&after, &before, "bulk_ingest_create"), 1);
    assert_eq!(delta(&after, &before, "composite_upsert"), 0);
    let mut want = vec![WriteOutcome::Created; 6];
    want[2] = WriteOutcome::Unchanged;
    assert_eq!(out, want);
    let back = target
        .lookup(&["ch_old".to_string(), "ch_new4".to_string()])
        .await
        .unwrap();
    let by_key: BTreeMap<&str, &Record> = back.iter().map(|r| (r.key.as_str(), r)).collect();
    assert_eq!(
        by_key["ch_old"].values[0],
        Value::Money(usd(1)),
        "never overwritten"
    );
    assert_eq!(by_key["ch_new4"], &records[5]);
    assert_eq!(emu.records(OBJECT).len(), 6);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refreshed_once_mid_read() {
    let emu = org(EmulatorConfig::default()).await;
    let start = ts("2026-01-01T00:00:00Z");
    for i in 0..5000i64 {
        emu.insert(
            OBJECT,
            stored(
                &format!("ch_{i:05}"),
                i,
                start + jiff::SignedDuration::from_secs(i),
            ),
        );
    }
    let mut cfg = config(&emu);
    cfg.bulk_read_threshold = u64::MAX;
    let src = connector(cfg);
    let window = Window {
        start,
        end: ts("2026-01-02T00:00:00Z"),
    };
    let mut pages = src.read(window);
    let mut keys = Vec::new();
    keys.extend(
        pages
            .next()
            .await
            .unwrap()
            .unwrap()
            .records
            .into_iter()
            .map(|r| r.key),
    );
    assert_eq!(emu.stats().token_requests, 1);
    emu.expire_tokens();
    while let Some(p) = pages.next().await {
        keys.extend(p.unwrap().records.into_iter().map(|r| r.key));
    }
    assert_eq!(keys.len(), 5000);
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 5000);
    assert_eq!(emu.stats().token_requests, 2, "refreshed exactly once");
    assert_eq!(emu.stats().by_status.get(&401), Some(&1));

    // A static token is not refreshed: the 401 is final and names the code.
    let mut cfg = config(&emu);
    cfg.auth = SalesforceAuth::AccessToken(Secret::new(emu.issue_token()));
    let src = connector(cfg);
    emu.expire_tokens();
    let e = src.lookup(&["ch_00001".to_string()]).await.unwrap_err();
    assert!(e.to_string().contains("INVALID_SESSION_ID"), "{e}");
    assert_eq!(emu.stats().token_requests, 2);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_client_credentials_are_a_config_error_that_never_shows_the_secret() {
    let emu = org(EmulatorConfig::default()).await;
    let mut cfg = config(&emu);
    let wrong = "wrong-secret-4f9a1c77";
    if let SalesforceAuth::ClientCredentials { client_secret, .. } = &mut cfg.auth {
        *client_secret = Secret::new(wrong);
    }
    let e = connector(cfg)
        .lookup(&["ch_1".to_string()])
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectorError::Config(_)), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("invalid_client") && m.contains("client credentials flow"),
        "{m}"
    );
    assert!(!m.contains(wrong), "{m}");
    assert_eq!(
        emu.stats().token_requests,
        1,
        "a refused token request is not retried"
    );
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_is_not_a_unique_external_id_is_refused_with_the_fix() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let mut fields = payment_fields();
    fields[0] = FieldDef::text(KEY);
    emu.define_object(OBJECT, fields);
    let mut other = payment_fields();
    other[0] = FieldDef {
        unique: false,
        ..FieldDef::external_id(KEY)
    };
    emu.define_object("Loose__c", other);

    let e = connector(config(&emu))
        .check_idempotent()
        .await
        .unwrap_err();
    let ConnectorError::NotIdempotent(m) = &e else {
        panic!("{e:?}")
    };
    assert!(m.contains("neither an External ID nor Unique"), "{m}");
    assert!(
        m.contains(
            "Object Manager → Payment__c → Fields & Relationships → Stripe_Charge_Id__c → Edit"
        ),
        "{m}"
    );
    assert!(
        m.contains("\"Unique\"") && m.contains("\"External ID\""),
        "{m}"
    );

    let mut cfg = config(&emu);
    cfg.object = "Loose__c".into();
    let e = connector(cfg).check_idempotent().await.unwrap_err();
    assert!(e.to_string().contains("is not Unique"), "{e}");

    let mut cfg = config(&emu);
    cfg.external_id_field = "Nope__c".into();
    let e = connector(cfg).check_idempotent().await.unwrap_err();
    assert!(e.to_string().contains("has no field `Nope__c`"), "{e}");
    assert!(e.to_string().contains("New → Text"), "{e}");
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_limit_exceeded_stops_at_once() {
    let emu = org(EmulatorConfig::default()).await;
    let target = connector(config(&emu));
    target.check_idempotent().await.unwrap();
    let at = ts("2026-01-01T00:00:00Z");
    let window = Window {
        start: at,
        end: ts("2026-01-02T00:00:00Z"),
    };
    read_all(&target, window).await.unwrap(); // describe, token: done
    emu.set_api_usage(100_000, 100_000);
    let before = emu.stats().requests;
    let e = target
        .write(&[record("ch_1", 1, at)], WriteMode::Upsert)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("REQUEST_LIMIT_EXCEEDED"), "{e}");
    assert_eq!(emu.stats().requests - before, 1, "no retry");
    let before = emu.stats().requests;
    let e = read_all(&target, window).await.unwrap_err();
    assert!(e.to_string().contains("REQUEST_LIMIT_EXCEEDED"), "{e}");
    assert_eq!(emu.stats().requests - before, 1, "no retry");
    assert!(emu.records(OBJECT).is_empty());
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_share_guard_refuses_a_write_with_the_figures() {
    let emu = org(EmulatorConfig::default()).await;
    emu.set_api_usage(99_980, 100_000);
    let target = connector(config(&emu));
    target.check_idempotent().await.unwrap(); // describe: 99,981 used
    let at = ts("2026-01-01T00:00:00Z");
    let records: Vec<Record> = (0..2200)
        .map(|i| record(&format!("ch_{i}"), 1, at))
        .collect();
    let before = emu.stats().requests;
    let e = target.write(&records, WriteMode::Upsert).await.unwrap_err();
    let m = e.to_string();
    for figure in [
        "needs about 11 API calls",
        "used 99981 of its 100000",
        "(19 remain)",
        "daily_share = 0.5",
        "at most 9",
    ] {
        assert!(m.contains(figure), "{figure:?} missing from: {m}");
    }
    assert_eq!(emu.stats().requests, before, "nothing sent");
    assert!(emu.records(OBJECT).is_empty());
    // Within the share it goes through.
    let out = target
        .write(&records[..200], WriteMode::Upsert)
        .await
        .unwrap();
    assert!(out.iter().all(|o| o == &WriteOutcome::Created));
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_backfill_is_checked_against_the_daily_share_before_any_write() {
    let emu = org(EmulatorConfig::default()).await;
    emu.set_api_usage(99_900, 100_000);
    let target = connector(config(&emu));
    target.check_idempotent().await.unwrap(); // describe: 99,901 used
    let before = emu.stats().requests;
    // 99 remain and a run may use 49 of them. Each write call of 10,000
    // records is one Bulk 2.0 job (14 calls): 40,000 upserts need 56,
    // estimated as a whole although each write call alone would fit.
    let e = target.check_budget(0, 40_000).await.unwrap_err();
    let m = e.to_string();
    assert!(m.contains("backfilling 40000 records"), "{m}");
    assert!(m.contains("needs about 56 API calls"), "{m}");
    assert!(m.contains("(99 remain)") && m.contains("at most 49"), "{m}");
    // Inserts add their key lookups (about 300 keys per query): 30,000
    // inserts are 3 jobs (42 calls) plus 34 lookups per 10,000 keys.
    let e = target.check_budget(30_000, 0).await.unwrap_err();
    assert!(e.to_string().contains("needs about 144 API calls"), "{e}");
    // A backfill that fits passes; the checks wrote nothing.
    target.check_budget(0, 20_000).await.unwrap();
    assert!(emu.stats().requests - before <= 3, "only usage reads");
    assert!(emu.records(OBJECT).is_empty());
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_on_reads_and_writes_lose_nothing_and_write_nothing_twice() {
    let emu = org(EmulatorConfig::default()).await;
    let start = ts("2026-01-01T00:00:00Z");
    let end = ts("2026-01-02T00:00:00Z");
    // 3,000 records inside the window, plus one exactly at its start (in)
    // and one exactly at its end (out).
    for i in 0..3000i64 {
        let at = start + jiff::SignedDuration::from_secs(1 + i * 28);
        emu.insert(OBJECT, stored(&format!("ch_{i:05}"), 100 + i, at));
    }
    emu.insert(OBJECT, stored("ch_at_start", 1, start));
    emu.insert(OBJECT, stored("ch_at_end", 1, end));
    let target = connector(config(&emu));
    target.check_idempotent().await.unwrap();
    // Every kind of trouble the policy retries, on the read's first six
    // requests in turn (a fault's `after` counts from the plan's start).
    let fault = |kind, after| Fault {
        kind,
        after,
        times: 1,
    };
    emu.set_faults(vec![
        fault(FaultKind::RateLimited, 0),
        fault(FaultKind::ServerError, 1),
        fault(FaultKind::Unavailable, 2),
        fault(FaultKind::TruncatedJson, 3),
        fault(FaultKind::MalformedJson, 4),
        fault(FaultKind::DropConnection, 5),
    ]);
    let window = Window { start, end };
    let read = read_all(&target, window).await.unwrap();
    let mut keys: Vec<&str> = read.iter().map(|r| r.key.as_str()).collect();
    keys.sort_unstable();
    let before = keys.len();
    keys.dedup();
    assert_eq!(before, keys.len(), "no record read twice");
    assert_eq!(
        keys.len(),
        3001,
        "every record once, the one at the end excluded"
    );
    assert!(keys.contains(&"ch_at_start") && !keys.contains(&"ch_at_end"));
    // Writes under the same trouble: a truncated answer means the upsert
    // was done and is sent again, which updates instead of creating twice.
    emu.set_faults(vec![
        fault(FaultKind::TruncatedJson, 0),
        fault(FaultKind::ServerError, 1),
        fault(FaultKind::DropConnection, 2),
        fault(FaultKind::RateLimited, 3),
    ]);
    let fresh: Vec<Record> = (0..450)
        .map(|i| record(&format!("new_{i:04}"), 500 + i, start))
        .collect();
    let out = target.write(&fresh, WriteMode::Upsert).await.unwrap();
    assert_eq!(out.len(), 450);
    assert!(
        out.iter().all(|o| !matches!(o, WriteOutcome::Failed(_))),
        "{out:?}"
    );
    let stored_keys: Vec<String> = emu
        .records(OBJECT)
        .iter()
        .filter_map(|r| r[KEY].as_str().map(str::to_string))
        .filter(|k| k.starts_with("new_"))
        .collect();
    let unique: std::collections::BTreeSet<&String> = stored_keys.iter().collect();
    assert_eq!(stored_keys.len(), 450, "each written once");
    assert_eq!(unique.len(), 450);
    // The faults did fire: two 429s, two 500s, one 503.
    let by_status = emu.stats().transport.by_status;
    for (status, n) in [(429u16, 2u64), (500, 2), (503, 1)] {
        assert_eq!(by_status.get(&status).copied(), Some(n), "{by_status:?}");
    }
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_written_names_only_fields_the_job_writes_and_leaves_them_out() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let mut fields = payment_fields();
    fields[3] = FieldDef::text("Status__c").read_only();
    emu.define_object(OBJECT, fields);
    let created = ts("2026-01-01T00:00:00Z");

    let refused = connector(config(&emu));
    let e = refused.check_idempotent().await.unwrap_err();
    assert!(matches!(e, ConnectorError::Config(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("Payment__c.Status__c (createable: false)"),
        "{e}"
    );
    let e = refused
        .write(&[record("ch_1", 100, created)], WriteMode::Insert)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Status__c"), "{e}");
    assert!(emu.records(OBJECT).is_empty(), "nothing written");

    let mut cfg = config(&emu);
    cfg.not_written = vec!["Nope__c".into()];
    let e = connector(cfg).check_idempotent().await.unwrap_err();
    assert!(
        e.to_string()
            .contains("not_written lists `Nope__c`, which is not a field the job writes"),
        "{e}"
    );

    let mut cfg = config(&emu);
    cfg.not_written = vec!["status__C".into()];
    let target = connector(cfg);
    target.check_idempotent().await.unwrap();
    let out = target
        .write(&[record("ch_1", 100, created)], WriteMode::Insert)
        .await
        .unwrap();
    assert_eq!(out, [WriteOutcome::Created]);
    let stored = &emu.records(OBJECT)[0];
    assert!(stored["Status__c"].is_null(), "{stored}");
    assert_eq!(stored["Amount__c"].to_string(), "1.00");
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_is_reported_created_not_unchanged() {
    let emu = org(EmulatorConfig::default()).await;
    let created = ts("2026-01-01T00:00:00Z");
    let target = connector(config(&emu));
    target.check_idempotent().await.unwrap();
    // The first create's work is done and its answer lost: the resend
    // meets its own records.
    emu.set_route_faults(
        "composite_create",
        vec![Fault {
            kind: FaultKind::ServerErrorAfterWork,
            after: 0,
            times: 1,
        }],
    );
    let batch: Vec<Record> = (0..3)
        .map(|i| record(&format!("ch_{i}"), 100 + i, created))
        .collect();
    let out = target.write(&batch, WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Created; 3]);
    assert_eq!(emu.stats().by_route.get("composite_create"), Some(&2));
    assert_eq!(emu.records(OBJECT).len(), 3, "each once");
    emu.shutdown().await;
}
