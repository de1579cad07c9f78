//! The connector against the emulator: windowed reads paged and exact,
//! duplicates kept as duplicates, lookups batched, writes that never
//! create twice (a lost answer, a rerun), `SyncToken` repairs, per-item
//! failures, and the refresh token rotated, saved sealed and used again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::TryStreamExt;
use recon_core::{
    BuildContext, ConnectorConfig, ConnectorError, Currency, Field, FieldKind, Money, Record,
    Schema, Target, TokenStore, Value, Window, WriteMode, WriteOutcome,
};
use recon_quickbooks::emulator::{Emulator, EmulatorConfig, Fault, Kind, TransportFault};
use recon_quickbooks::QuickbooksSettings;
use serde_json::{json, Value as Json};

#[derive(Default)]
struct MemoryStore(Mutex<HashMap<String, String>>);

#[async_trait::async_trait]
impl TokenStore for MemoryStore {
    async fn get(&self, name: &str) -> Result<Option<String>, ConnectorError> {
        Ok(self.0.lock().unwrap().get(name).cloned())
    }
    async fn put(&self, name: &str, value: &str) -> Result<(), ConnectorError> {
        self.0.lock().unwrap().insert(name.into(), value.into());
        Ok(())
    }
}

fn schema() -> Schema {
    let f = |name: &str, kind, compared| Field {
        name: name.into(),
        kind,
        compared,
    };
    Schema {
        fields: vec![
            f("amount", FieldKind::Money, true),
            f("currency", FieldKind::Currency, true),
            f("email", FieldKind::Text, false),
            f("created", FieldKind::Timestamp, false),
        ],
    }
}

fn settings(emu: &Emulator, extra: Json) -> QuickbooksSettings {
    let mut v = json!({
        "base_url": emu.base_url,
        "token_url": emu.token_url(),
        "realm_id": emu.realm_id,
        "client_id": emu.client_id,
        "client_secret": emu.client_secret,
        "refresh_token": emu.refresh_token,
        "time_field": "TxnDate",
        "fields": {"email": "BillEmail.Address", "created": "TxnDate"},
        "customer": {"id": "1"},
        "item_ref": "1",
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    serde_json::from_value(v).unwrap()
}

async fn target(s: &QuickbooksSettings, store: &Arc<dyn TokenStore>) -> Box<dyn Target> {
    let schema = schema();
    s.build_target(BuildContext {
        schema: &schema,
        time_field: Some(3),
        job: "payments",
        tokens: Some(store),
    })
    .await
    .unwrap()
}

fn store() -> Arc<dyn TokenStore> {
    Arc::new(MemoryStore::default())
}

fn day(d: &str) -> jiff::Timestamp {
    format!("{d}T12:00:00Z").parse().unwrap()
}

fn window() -> Window {
    Window {
        start: day("2026-03-01"),
        end: day("2026-03-05"),
    }
}

fn seeded(doc: &str, amount: &str, currency: &str, date: &str) -> Json {
    // The DocNumber as a JSON string literal (a backslash escaped).
    let doc = Json::from(doc);
    serde_json::from_str(&format!(
        r#"{{"DocNumber": {doc}, "TxnDate": "{date}", "CustomerRef": {{"value": "1"}},
            "CurrencyRef": {{"value": "{currency}"}},
            "Line": [{{"Amount": {amount}, "DetailType": "SalesItemLineDetail",
                       "SalesItemLineDetail": {{"ItemRef": {{"value": "1"}}}}}}]}}"#
    ))
    .unwrap()
}

fn record(key: &str, minor: i64, currency: &str, date: &str) -> Record {
    let c = Currency::parse(currency).unwrap();
    Record {
        key: key.into(),
        values: vec![
            Value::Money(Money::from_minor(minor, c)),
            Value::Currency(c),
            Value::Null,
            Value::Timestamp(day(date)),
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_page_exactly_keep_duplicates_and_look_up_in_batches() {
    let emu = Emulator::start(EmulatorConfig {
        multicurrency: true,
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    emu.add_customer("Acme", "ap@acme.test", None);
    for i in 0..23 {
        emu.insert(
            Kind::Invoice,
            seeded(&format!("ch_{i:03}"), "19.99", "USD", "2026-03-02"),
        );
    }
    emu.insert(Kind::Invoice, seeded("ch_jpy", "1500", "JPY", "2026-03-03"));
    emu.insert(
        Kind::Invoice,
        seeded("ch_kwd", "1.234", "KWD", "2026-03-03"),
    );
    // The seed case: a retried webhook booked ch_005 twice.
    let dup = emu.insert(
        Kind::Invoice,
        seeded("ch_005", "19.99", "USD", "2026-03-04"),
    );
    // Outside the window, and one without an external ID.
    emu.insert(Kind::Invoice, seeded("ch_old", "1.00", "USD", "2026-02-01"));
    let mut unkeyed = seeded("x", "1.00", "USD", "2026-03-02");
    unkeyed.as_object_mut().unwrap().remove("DocNumber");
    emu.insert(Kind::Invoice, unkeyed);

    let s = settings(&emu, json!({"page_size": 7, "lookup_chunk": 4}));
    let t = target(&s, &store()).await;
    let pages: Vec<_> = t.read(window()).try_collect().await.unwrap();
    assert_eq!(pages.len(), 4, "27 rows in pages of 7");
    let records: Vec<Record> = pages.into_iter().flat_map(|p| p.records).collect();
    assert_eq!(records.len(), 26, "the unkeyed one is not a record");
    assert_eq!(
        records.iter().filter(|r| r.key == "ch_005").count(),
        2,
        "a duplicate stays two records"
    );
    let by_key = |k: &str| records.iter().find(|r| r.key == k).unwrap().values[0].clone();
    assert_eq!(
        by_key("ch_jpy"),
        Value::Money(Money::from_minor(1500, Currency::parse("JPY").unwrap()))
    );
    assert_eq!(
        by_key("ch_kwd"),
        Value::Money(Money::from_minor(1234, Currency::parse("KWD").unwrap()))
    );
    assert_eq!(
        by_key("ch_001"),
        Value::Money(Money::from_minor(1999, Currency::parse("USD").unwrap()))
    );
    assert_eq!(emu.stats().minorversions.keys().collect::<Vec<_>>(), ["75"]);

    let before = emu.stats().by_route.get("query").copied().unwrap_or(0);
    let keys: Vec<String> = (0..10)
        .map(|i| format!("ch_{i:03}"))
        .chain(["nope".to_string()])
        .collect();
    let found = t.lookup(&keys).await.unwrap();
    assert_eq!(found.len(), 11, "ten keys, ch_005 twice");
    let after = emu.stats().by_route.get("query").copied().unwrap_or(0);
    assert_eq!(after - before, 3, "11 keys in IN chunks of 4");
    assert!(emu
        .entities(Kind::Invoice)
        .iter()
        .any(|e| e["Id"] == json!(dup)));
    // Both copies named by their QuickBooks Id, with their values.
    let copies = t.duplicate_copies(&["ch_005".to_string()]).await.unwrap();
    let first = emu
        .entities(Kind::Invoice)
        .into_iter()
        .find(|e| e["DocNumber"] == "ch_005")
        .unwrap()["Id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut ids: Vec<&str> = copies
        .iter()
        .map(|c| c.native_id.as_deref().unwrap())
        .collect();
    ids.sort_unstable();
    let mut want = [first.as_str(), dup.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want);
    assert_ne!(want[0], want[1]);
    let usd = Value::Money(Money::from_minor(1999, Currency::parse("USD").unwrap()));
    assert!(copies
        .iter()
        .all(|c| c.record.key == "ch_005" && c.record.values[0] == usd));

    // An external ID with a backslash has no exact query literal (only
    // `\'` is a documented escape): it is found by the prefix before the
    // backslash and matched exactly, never by a broken or widened query.
    emu.insert(Kind::Invoice, seeded("ch_\\9", "2.00", "USD", "2026-03-02"));
    emu.insert(
        Kind::Invoice,
        seeded("ch_\\9x", "3.00", "USD", "2026-03-02"),
    );
    let found = t.lookup(&["ch_\\9".to_string()]).await.unwrap();
    let keys: Vec<&str> = found.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["ch_\\9"]);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_create_once_through_a_lost_answer_and_a_rerun() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.add_customer("Acme", "ap@acme.test", None);
    emu.insert(
        Kind::Invoice,
        seeded("ch_have", "5.00", "USD", "2026-03-02"),
    );
    let s = settings(&emu, json!({"batch_size": 3}));
    let tokens = store();
    let t = target(&s, &tokens).await;
    t.check_idempotent().await.unwrap();
    let mut records: Vec<Record> = (0..7)
        .map(|i| record(&format!("ch_{i}"), 1000 + i, "USD", "2026-03-03"))
        .collect();
    records.push(record("ch_have", 500, "USD", "2026-03-02"));
    records.push(record("ch_in_jpy", 500, "JPY", "2026-03-02"));
    records.push(record(
        "ch_0123456789012345678901",
        100,
        "USD",
        "2026-03-02",
    ));
    // The first create batch is done, then its connection drops: the
    // policy sends it again with the same requestid and gets the original.
    let batches_before = emu.stats().by_route.get("batch").copied().unwrap_or(0);
    let requests = emu.stats().transport.requests;
    emu.set_batch_faults(vec![Fault {
        kind: TransportFault::DropAfterWork,
        after: 0,
        times: 1,
    }]);
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    assert!(emu.stats().transport.requests > requests);
    assert_eq!(&out[..7], &vec![WriteOutcome::Created; 7][..], "{out:?}");
    assert_eq!(
        out[7],
        WriteOutcome::Unchanged,
        "found right before creating"
    );
    let WriteOutcome::Failed(m) = &out[8] else {
        panic!("{out:?}")
    };
    assert!(m.contains("multicurrency is off"), "{m}");
    let WriteOutcome::Failed(m) = &out[9] else {
        panic!("{out:?}")
    };
    assert!(m.contains("21"), "{m}");
    assert_eq!(
        emu.stats().replays,
        1,
        "the lost answer came back from the replay"
    );
    assert_eq!(
        emu.stats().by_route["batch"] - batches_before,
        4,
        "3 + 3 + 1 creates, one batch resent"
    );
    let invoices = emu.entities(Kind::Invoice);
    assert_eq!(invoices.len(), 8, "seven created once each");
    let one = invoices.iter().find(|e| e["DocNumber"] == "ch_3").unwrap();
    assert_eq!(one["TotalAmt"].to_string(), "10.03");
    assert_eq!(one["TxnDate"], "2026-03-03");
    assert_eq!(one["CustomerRef"]["value"], "1");
    assert!(one.get("CurrencyRef").is_some());

    // A rerun of the same call (a crash before the ledger settled it).
    let again = target(&s, &tokens)
        .await
        .write(&records[..7], WriteMode::Insert)
        .await
        .unwrap();
    assert_eq!(again, vec![WriteOutcome::Unchanged; 7]);
    assert_eq!(emu.entities(Kind::Invoice).len(), 8);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customers_are_looked_up_by_a_mapped_field_or_the_item_fails() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.add_customer("Acme", "ap@acme.test", None);
    let bob = emu.add_customer("Bob", "bob@b.test", None);
    emu.add_customer("Twin A", "twin@t.test", None);
    emu.add_customer("Twin B", "twin@t.test", None);
    let s = settings(&emu, json!({"customer": {"match_field": "email"}}));
    let t = target(&s, &store()).await;
    let with = |key: &str, email: &str| {
        let mut r = record(key, 100, "USD", "2026-03-02");
        r.values[2] = Value::Text(email.into());
        r
    };
    let out = t
        .write(
            &[
                with("a", "bob@b.test"),
                with("b", "nobody@x.test"),
                with("c", "twin@t.test"),
            ],
            WriteMode::Insert,
        )
        .await
        .unwrap();
    assert_eq!(out[0], WriteOutcome::Created);
    let WriteOutcome::Failed(m) = &out[1] else {
        panic!("{out:?}")
    };
    assert!(
        m.contains("no QuickBooks customer has PrimaryEmailAddr = `nobody@x.test`"),
        "{m}"
    );
    let WriteOutcome::Failed(m) = &out[2] else {
        panic!("{out:?}")
    };
    assert!(m.contains("2 QuickBooks customers"), "{m}");
    let inv = emu.entities(Kind::Invoice);
    assert_eq!(inv.len(), 1);
    assert_eq!(inv[0]["CustomerRef"]["value"], json!(bob));
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_repair_with_the_sync_token_and_retry_a_stale_one_once() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.add_customer("Acme", "ap@acme.test", None);
    let id = emu.insert(Kind::Invoice, seeded("ch_1", "5.00", "USD", "2026-03-02"));
    emu.insert(Kind::Invoice, seeded("ch_2", "7.00", "USD", "2026-03-02"));
    emu.insert(Kind::Invoice, seeded("ch_2", "7.00", "USD", "2026-03-02"));
    let s = settings(&emu, json!({}));
    let t = target(&s, &store()).await;
    let fixed = record("ch_1", 600, "USD", "2026-03-02");
    let same = record("ch_2", 700, "USD", "2026-03-02");
    let out = t.write(&[fixed], WriteMode::Upsert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Updated]);
    let e = emu
        .entities(Kind::Invoice)
        .into_iter()
        .find(|e| e["Id"] == json!(id))
        .unwrap();
    assert_eq!(e["TotalAmt"].to_string(), "6.00");
    assert_eq!(e["SyncToken"], "1");
    // Stale: another user saves it between recon's lookup and its update.
    let stale_fix = record("ch_1", 650, "USD", "2026-03-02");
    emu.edit_before_next_update(&id);
    let reads = emu.stats().by_route.get("read").copied().unwrap_or(0);
    let out = t.write(&[stale_fix], WriteMode::Upsert).await.unwrap();
    assert_eq!(
        out,
        vec![WriteOutcome::Updated],
        "read again by Id, retried once"
    );
    assert_eq!(emu.stats().by_route["read"] - reads, 1);
    let e = emu
        .entities(Kind::Invoice)
        .into_iter()
        .find(|e| e["Id"] == json!(id))
        .unwrap();
    assert_eq!(e["TotalAmt"].to_string(), "6.50");
    // A duplicate is never picked for a repair.
    let out = t
        .write(
            &[record("ch_2", 800, "USD", "2026-03-02")],
            WriteMode::Upsert,
        )
        .await
        .unwrap();
    let WriteOutcome::Failed(m) = &out[0] else {
        panic!("{out:?}")
    };
    assert!(
        m.contains("2 QuickBooks Invoices carry this external ID"),
        "{m}"
    );
    let out = t.write(&[same], WriteMode::Upsert).await.unwrap();
    assert!(matches!(out[0], WriteOutcome::Failed(_)), "{out:?}");
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_field_ids_are_looked_up_by_one_widened_read() {
    let emu = Emulator::start(EmulatorConfig {
        custom_fields: vec!["Crew #".into(), "Stripe ID".into()],
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    emu.add_customer("Acme", "ap@acme.test", None);
    let s = settings(&emu, json!({"external_id": "custom_field:Stripe ID"}));
    let tokens = store();
    let t = target(&s, &tokens).await;
    let records: Vec<Record> = (0..5)
        .map(|i| record(&format!("ch_{i}"), 100 + i, "USD", "2026-03-02"))
        .collect();
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Created; 5]);
    let inv = emu.entities(Kind::Invoice);
    assert_eq!(inv[0]["CustomField"][0]["DefinitionId"], "2");
    assert_eq!(inv[0]["CustomField"][0]["StringValue"], "ch_0");
    // Edge lookups read the last window, widened.
    let _: Vec<_> = t.read(window()).try_collect().await.unwrap();
    let queries = emu.stats().by_route["query"];
    let found = t
        .lookup(&records.iter().map(|r| r.key.clone()).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(found.len(), 5);
    assert_eq!(
        emu.stats().by_route["query"] - queries,
        1,
        "one read for five keys"
    );
    let again = t.write(&records, WriteMode::Insert).await.unwrap();
    assert_eq!(again, vec![WriteOutcome::Unchanged; 5]);
    let bad = settings(&emu, json!({"external_id": "custom_field:Nope"}));
    let e = target(&bad, &tokens)
        .await
        .check_idempotent()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no custom field named `Nope`") && e.contains("`Stripe ID`"),
        "{e}"
    );
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_refresh_tokens_are_saved_sealed_and_a_revoked_one_says_how_to_reconnect() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.add_customer("Acme", "ap@acme.test", None);
    let memory = Arc::new(MemoryStore::default());
    let tokens: Arc<dyn TokenStore> = memory.clone();
    let s = settings(&emu, json!({}));
    let t = target(&s, &tokens).await;
    let probe = t.probe().await.unwrap();
    assert!(probe.reached.contains("Sandbox Company_US_1"), "{probe:?}");
    assert!(
        probe.limits.iter().any(|l| l == "home currency USD"),
        "{probe:?}"
    );
    assert!(
        probe.limits.iter().any(|l| l == "multicurrency off"),
        "{probe:?}"
    );
    let newest = emu.valid_refresh_tokens();
    assert_eq!(newest.len(), 1);
    assert_ne!(newest[0], emu.refresh_token, "rotated");
    let saved: Vec<String> = memory.0.lock().unwrap().values().cloned().collect();
    assert_eq!(saved.len(), 1);
    assert!(saved[0].starts_with("v1:"));
    for token in emu.issued_tokens() {
        assert!(!saved[0].contains(&token), "never in clear");
    }
    // The next run: the configured token is stale now; the saved one works.
    emu.expire_access_tokens();
    let t2 = target(&s, &tokens).await;
    assert!(t2.probe().await.is_ok());
    assert_eq!(emu.stats().refreshes, 2);
    // Revoked: a clear error with the reconnect steps, no token in it.
    emu.revoke_all();
    let t3 = target(&s, &tokens).await;
    let e = t3.probe().await.unwrap_err().to_string();
    assert!(
        e.contains("invalid_grant") && e.contains("To reconnect"),
        "{e}"
    );
    for token in emu.issued_tokens() {
        assert!(!e.contains(&token), "{e}");
    }
    assert!(!e.contains(&emu.client_secret));
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sales_receipts_read_over_create_times_with_offsets_through_429s() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let receipt = |doc: &str, created: &str| -> Json {
        let mut r = seeded(doc, "3.50", "USD", "2026-03-02");
        r.as_object_mut().unwrap().remove("CustomerRef");
        r["MetaData"] = json!({"CreateTime": created, "LastUpdatedTime": created});
        r
    };
    // Window [2026-03-01T12:00Z, 2026-03-05T12:00Z): -08:00 offsets as
    // QuickBooks writes them.
    emu.insert(
        Kind::SalesReceipt,
        receipt("in_1", "2026-03-01T04:00:00-08:00"),
    );
    emu.insert(
        Kind::SalesReceipt,
        receipt("out_early", "2026-03-01T03:59:59-08:00"),
    );
    emu.insert(
        Kind::SalesReceipt,
        receipt("in_2", "2026-03-05T04:00:00-07:00"),
    );
    emu.insert(
        Kind::SalesReceipt,
        receipt("out_late", "2026-03-05T04:00:00-08:00"),
    );
    emu.insert(
        Kind::Invoice,
        seeded("an_invoice", "1.00", "USD", "2026-03-02"),
    );
    let s = settings(
        &emu,
        json!({"object": "SalesReceipt", "time_field": "MetaData.CreateTime", "fields": {"email": "BillEmail.Address"}}),
    );
    let t = target(&s, &store()).await;
    // Two 429s first: the shared policy waits and asks again.
    emu.set_faults(vec![Fault {
        kind: TransportFault::RateLimited,
        after: 0,
        times: 2,
    }]);
    let pages: Vec<_> = t.read(window()).try_collect().await.unwrap();
    let mut keys: Vec<String> = pages
        .into_iter()
        .flat_map(|p| p.records)
        .map(|r| r.key)
        .collect();
    keys.sort();
    assert_eq!(keys, ["in_1", "in_2"]);
    assert_eq!(emu.stats().transport.throttled, 2);
    let created = t.lookup(&["in_1".to_string()]).await.unwrap();
    assert_eq!(
        created[0].values[3],
        Value::Timestamp("2026-03-01T12:00:00Z".parse().unwrap()),
        "the create time, offset applied"
    );
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_access_token_is_refreshed_mid_run_and_the_newest_refresh_token_saved() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.add_customer("Acme", "ap@acme.test", None);
    let memory = Arc::new(MemoryStore::default());
    let tokens: Arc<dyn TokenStore> = memory.clone();
    let s = settings(&emu, json!({}));
    let t = target(&s, &tokens).await;
    let first = t
        .write(
            &[record("ch_a", 100, "USD", "2026-03-02")],
            WriteMode::Insert,
        )
        .await
        .unwrap();
    assert_eq!(first, vec![WriteOutcome::Created]);
    let saved_once = memory.0.lock().unwrap().values().next().cloned().unwrap();
    // An hour later: the gateway refuses the access token, the policy
    // refreshes once (QuickBooks rotates the refresh token again) and the
    // request goes through; a 5xx before the next batch's work is retried.
    emu.expire_access_tokens();
    emu.set_batch_faults(vec![Fault {
        kind: TransportFault::ServerError,
        after: 0,
        times: 1,
    }]);
    let second = t
        .write(
            &[record("ch_b", 200, "USD", "2026-03-02")],
            WriteMode::Insert,
        )
        .await
        .unwrap();
    assert_eq!(second, vec![WriteOutcome::Created]);
    assert_eq!(
        emu.entities(Kind::Invoice).len(),
        2,
        "the 500 came before the work"
    );
    assert_eq!(emu.stats().refreshes, 2);
    let saved_twice = memory.0.lock().unwrap().values().next().cloned().unwrap();
    assert_ne!(
        saved_once, saved_twice,
        "the newest refresh token is saved after each refresh"
    );
    // A new client (the next run) uses what was saved last.
    let next = target(&s, &tokens).await;
    assert!(next.probe().await.is_ok());
    assert_eq!(
        emu.stats().invalid_grants,
        0,
        "never a stale refresh token sent"
    );
    emu.shutdown().await;
}
