//! Writes of the declarative connector into the emulator's JSON REST
//! target (`/records`): create once, never twice (reruns, lost answers,
//! conflicts), declared outcomes, updates, and the uniqueness rule.

use recon_core::{
    BuildContext, ConnectorConfig, ConnectorError, Currency, Field, FieldKind, Money, Record,
    Schema, Target, Value, WriteMode, WriteOutcome,
};
use recon_http::emulator::{Emulator, EmulatorConfig, Fault, TransportFault};
use recon_http::HttpSettings;
use serde_json::json;

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

/// The records target: list by offset with a total (client-side window),
/// lookup by external ID, create with Idempotency-Key, 409 = exists, 422
/// `amount_invalid` = this record fails, update by PUT.
fn records_api(emu: &Emulator, lookup: bool, rules: &str) -> String {
    let lookup = if lookup {
        "[lookup]\npath = \"/records/{{ id }}\"\n"
    } else {
        ""
    };
    format!(
        r#"
name = "Ledger API"
base_url = "{}"
auth = {{ kind = "basic", username = "{}", password = "unused" }}
rate = "100/s"
id = "$.external_id"
fields = {{ amount = "$.amount", currency = "$.currency", status = "$.status", created = "$.created" }}
[list]
path = "/records"
records = "$.records[*]"
window = "client"
paging = {{ kind = "offset", limit = 50, total = "$.total" }}
{lookup}
[write]
uniqueness = "unique_field"
{rules}
[write.create]
path = "/records"
idempotency_header = "Idempotency-Key"
body = {{ external_id = "{{{{ key }}}}", amount = "{{{{ fields.amount }}}}", currency = "{{{{ fields.currency }}}}", status = "{{{{ fields.status }}}}", created = "{{{{ fields.created | unix }}}}" }}
[write.update]
method = "PUT"
path = "/records/{{{{ key }}}}"
body = {{ amount = "{{{{ fields.amount }}}}", currency = "{{{{ fields.currency }}}}", status = "{{{{ fields.status }}}}" }}
"#,
        emu.base_url, emu.token
    )
}

const RULES: &str = r#"outcomes = [
  { status = 409, code = "duplicate_external_id", outcome = "unchanged" },
  { status = 422, code = "amount_invalid", outcome = "failed" },
]"#;

async fn target(text: &str) -> Result<Box<dyn Target>, ConnectorError> {
    let schema = schema();
    let s: HttpSettings = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    s.build_target(BuildContext {
        schema: &schema,
        time_field: Some(3),
        job: "http",
        tokens: None,
    })
    .await
}

fn record(key: &str, minor: i64, status: &str) -> Record {
    let usd = Currency::parse("USD").unwrap();
    Record {
        key: key.into(),
        values: vec![
            Value::Money(Money::from_minor(minor, usd)),
            Value::Currency(usd),
            Value::Text(status.into()),
            Value::Timestamp(jiff::Timestamp::from_second(1_795_824_000 + minor).unwrap()),
        ],
    }
}

fn fault(kind: TransportFault, after: u64, times: u64) -> Fault<TransportFault> {
    Fault { kind, after, times }
}

#[tokio::test(start_paused = true)]
async fn creates_once_through_reruns_lost_answers_and_conflicts() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let t = target(&records_api(&emu, true, RULES)).await.unwrap();
    t.check_idempotent().await.unwrap();
    let first: Vec<Record> = (1..=5)
        .map(|i| record(&format!("r{i}"), i * 100, "paid"))
        .collect();
    let out = t.write(&first, WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Created; 5]);
    assert_eq!(emu.stats().creates, 5);
    let r1 = &emu.records()[0];
    assert_eq!(r1["external_id"], json!("r1"));
    assert_eq!(
        r1["amount"].to_string(),
        "100",
        "minor units as a JSON integer"
    );
    assert_eq!(r1["currency"], json!("USD"));
    assert_eq!(r1["created"].to_string(), "1795824100");

    // A rerun of the same records: found by lookup, nothing created.
    let out = t.write(&first, WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Unchanged; 5]);
    assert_eq!(emu.stats().creates, 5);

    // Lost answers: the work is done and the answer lost (a 500, then a
    // dropped connection); the retries carry the same Idempotency-Key and
    // get the first answer replayed.
    let next: Vec<Record> = (6..=8)
        .map(|i| record(&format!("r{i}"), i * 100, "paid"))
        .collect();
    // Requests 0-2 are the three lookups; 3 is r6's create, 5 is r7's.
    emu.set_faults(vec![
        fault(TransportFault::ServerErrorAfterWork, 3, 1),
        fault(TransportFault::DropAfterWork, 5, 1),
    ]);
    let out = t.write(&next, WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Created; 3]);
    let s = emu.stats();
    assert_eq!((s.creates, s.replays), (8, 2), "{s:?}");
    assert_eq!(emu.records().len(), 8, "each record once");

    // A declared per-record failure fails that record alone.
    let mixed = vec![record("r9", 900, "paid"), record("r10", -5, "paid")];
    let out = t.write(&mixed, WriteMode::Insert).await.unwrap();
    assert_eq!(out[0], WriteOutcome::Created);
    match &out[1] {
        WriteOutcome::Failed(m) => {
            assert!(m.contains("422") && m.contains("amount_invalid"), "{m}")
        }
        other => panic!("{other:?}"),
    }

    // Upsert: an existing record with other values is updated by key.
    let out = t
        .write(&[record("r2", 200, "refunded")], WriteMode::Upsert)
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Updated]);
    let r2 = emu
        .records()
        .into_iter()
        .find(|r| r["external_id"] == json!("r2"))
        .unwrap();
    assert_eq!(r2["status"], json!("refunded"));
    assert_eq!(emu.stats().updates, 1);
    assert_eq!(emu.records().len(), 9);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_lookup_the_conflict_answer_settles_an_existing_key() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.insert_record(json!({"id": "rec_0", "external_id": "r1", "amount": 100, "currency": "USD", "status": "paid", "created": 1_795_824_100}));
    let t = target(&records_api(&emu, false, RULES)).await.unwrap();
    t.check_idempotent().await.unwrap();
    let out = t
        .write(
            &[record("r1", 100, "paid"), record("r2", 200, "paid")],
            WriteMode::Insert,
        )
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Unchanged, WriteOutcome::Created]);
    // Edge confirmation is off without a lookup: nothing is found, and
    // the run's report says so.
    assert!(t.lookup(&["r1".to_string()]).await.unwrap().is_empty());
    let notes = t.read_notes().join("\n");
    assert!(
        notes.contains("no lookup declared: edge confirmation is off"),
        "{notes}"
    );
    assert!(notes.contains("cannot filter by the window"), "{notes}");
    // Upsert without a lookup: the 409 leads to the update by key.
    let out = t
        .write(&[record("r1", 150, "paid")], WriteMode::Upsert)
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Updated]);
    assert_eq!(emu.records().len(), 2);
    assert_eq!(emu.records()[0]["amount"].to_string(), "150");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_retries_run_out_stops_the_run_and_a_rerun_settles_it() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let t = target(&records_api(&emu, true, RULES)).await.unwrap();
    // The lookup answers, then every create attempt does the work and
    // loses the answer.
    emu.set_faults(vec![fault(TransportFault::ServerErrorAfterWork, 1, 100)]);
    let e = t
        .write(&[record("r1", 100, "paid")], WriteMode::Insert)
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectorError::ConnectionLost(_)), "{e}");
    assert!(e.to_string().contains("POST /records"), "{e}");
    assert_eq!(
        emu.stats().creates,
        1,
        "the first attempt did the work; the rest were replays"
    );
    emu.set_faults(vec![]);
    let out = t
        .write(&[record("r1", 100, "paid")], WriteMode::Insert)
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Unchanged]);
    assert_eq!(emu.records().len(), 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn the_uniqueness_rule_is_checked_before_any_write() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let t = target(&records_api(&emu, true, "")).await.unwrap();
    let e = t.check_idempotent().await.unwrap_err().to_string();
    assert!(
        e.contains("unique_field") && e.contains("write.outcomes") && e.contains("409"),
        "{e}"
    );
    let text = records_api(&emu, false, "").replace(
        "uniqueness = \"unique_field\"",
        "uniqueness = \"idempotency_key_and_lookup\"",
    );
    let e = target(&text)
        .await
        .unwrap()
        .check_idempotent()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("idempotency_key_and_lookup") && e.contains("the lookup"),
        "{e}"
    );
    let text = records_api(&emu, true, "").replace(
        "uniqueness = \"unique_field\"",
        "uniqueness = \"idempotency_key_and_lookup\"",
    );
    target(&text)
        .await
        .unwrap()
        .check_idempotent()
        .await
        .unwrap();
    // A target without [write] cannot be built for writing.
    let text = records_api(&emu, true, RULES);
    let read_only = &text[..text.find("[write]").unwrap()];
    let e = match target(read_only).await {
        Ok(_) => panic!("built"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("[write]"), "{e}");
    emu.shutdown().await;
}

/// An update by the target's own ID, as the lookup found it.
#[tokio::test(start_paused = true)]
async fn updates_go_to_the_id_the_lookup_found() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.insert_record(json!({"id": "rec_0", "external_id": "r1", "amount": 100, "currency": "USD", "status": "paid", "created": 1_795_824_100}));
    let text = records_api(&emu, true, RULES)
        .replace(
            "[lookup]\npath = \"/records/{{ id }}\"\n",
            "[lookup]\npath = \"/records/{{ id }}\"\ntarget_id = \"$.external_id\"\n",
        )
        .replace(
            "path = \"/records/{{ key }}\"",
            "path = \"/records/{{ target_id }}\"",
        );
    assert!(text.contains("{{ target_id }}") && text.contains("target_id = "));
    let t = target(&text).await.unwrap();
    let out = t
        .write(&[record("r1", 100, "refunded")], WriteMode::Upsert)
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Updated]);
    assert_eq!(emu.records()[0]["status"], json!("refunded"));
    // Without lookup.target_id, {{ target_id }} is refused when the job loads.
    let bad = text.replace("target_id = \"$.external_id\"\n", "");
    let e = match target(&bad).await {
        Ok(_) => panic!("built"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("lookup.target_id"), "{e}");
    emu.shutdown().await;
}

/// `retry_statuses` adds statuses the shared policy retries (as "slow
/// down" answers, under `rate_limit_patience`).
#[tokio::test(start_paused = true)]
async fn declared_retry_statuses_are_retried_by_the_shared_policy() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let text = records_api(&emu, true, RULES).replace(
        "rate = \"100/s\"",
        "rate = \"100/s\"\nretry_statuses = [404]\nrate_limit_patience = \"3s\"",
    );
    let t = target(&text).await.unwrap();
    let e = t
        .lookup(&["nobody".to_string()])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("3s") && e.contains("rate_limit_patience"), "{e}");
    let s = emu.stats();
    assert!(s.transport.requests > 2, "404 was retried: {s:?}");
    // Without it, a 404 of a lookup by ID is "absent", asked once.
    let before = emu.stats().transport.requests;
    let t = target(&records_api(&emu, true, RULES)).await.unwrap();
    assert!(t.lookup(&["nobody".to_string()]).await.unwrap().is_empty());
    assert_eq!(emu.stats().transport.requests, before + 1);
    emu.shutdown().await;
}

#[test]
fn debug_output_shows_no_secret() {
    let s: HttpSettings = toml::from_str(
        r#"
base_url = "http://127.0.0.1:1"
auth = { kind = "oauth_client_credentials", token_url = "http://127.0.0.1:1/t", client_id = "client-id-1234567", client_secret = "client-secret-98765" }
headers = { "X-Account-Key" = "account-key-55555" }
[list]
path = "/x"
records = "$[*]"
window = "client"
"#,
    )
    .unwrap();
    let dbg = format!("{s:?}");
    for secret in [
        "client-id-1234567",
        "client-secret-98765",
        "account-key-55555",
    ] {
        assert!(!dbg.contains(secret), "{dbg}");
    }
    assert!(dbg.contains("X-Account-Key"), "{dbg}");
}

/// Insert mode never overwrites: an upsert endpoint without a lookup to
/// find existing records first is refused before anything is sent.
#[tokio::test(start_paused = true)]
async fn insert_mode_through_an_upsert_endpoint_needs_a_lookup() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let text = records_api(&emu, false, RULES).replace(
        "uniqueness = \"unique_field\"",
        "uniqueness = \"upsert_by_key\"",
    );
    let t = target(&text).await.unwrap();
    let e = t
        .write(&[record("r1", 100, "paid")], WriteMode::Insert)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("upsert_by_key") && e.contains("[lookup]"), "{e}");
    assert_eq!(emu.stats().transport.requests, 0, "nothing sent");
    emu.shutdown().await;
}

/// A batched lookup by an `ids=` list: one request per 100 keys, only the
/// keys asked for kept.
#[tokio::test(start_paused = true)]
async fn batched_lookups_by_an_ids_list() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    for i in 0..150 {
        emu.insert_record(json!({"id": format!("rec_{i}"), "external_id": format!("r{i}"), "amount": i, "currency": "USD", "status": "paid", "created": 1_795_824_000 + i}));
    }
    let text = records_api(&emu, true, RULES).replace(
        "[lookup]\npath = \"/records/{{ id }}\"\n",
        "[lookup]\npath = \"/records\"\nquery = { ids = \"{{ ids }}\" }\nrecords = \"$.records[*]\"\nmax_ids = 100\n",
    );
    assert!(text.contains("{{ ids }}"));
    let t = target(&text).await.unwrap();
    let mut keys: Vec<String> = (0..150).step_by(2).map(|i| format!("r{i}")).collect();
    keys.push("nobody".into());
    keys.extend((0..40).map(|i| format!("x{i}")));
    let before = emu.stats().transport.requests;
    let mut found: Vec<String> = t
        .lookup(&keys)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.key)
        .collect();
    found.sort();
    let mut want: Vec<String> = (0..150).step_by(2).map(|i| format!("r{i}")).collect();
    want.sort();
    assert_eq!(found, want);
    assert_eq!(
        emu.stats().transport.requests - before,
        2,
        "116 keys in 2 requests"
    );
    let usd = Currency::parse("USD").unwrap();
    let r = t.lookup(&["r7".to_string()]).await.unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].values[0], Value::Money(Money::from_minor(7, usd)));
    emu.shutdown().await;
}

/// The lookup's and the write's JSONPaths fail naming the key, the path
/// and the answer.
#[tokio::test(start_paused = true)]
async fn lookup_and_write_paths_that_find_nothing_name_the_key() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.insert_record(json!({"id": "rec_0", "external_id": "r1", "amount": 100, "currency": "USD", "status": "paid", "created": 1_795_824_100}));
    let text = records_api(&emu, true, RULES).replace(
        "[lookup]\npath = \"/records/{{ id }}\"\n",
        "[lookup]\npath = \"/records/{{ id }}\"\nrecord = \"$.data\"\n",
    );
    let e = target(&text)
        .await
        .unwrap()
        .lookup(&["r1".to_string()])
        .await
        .unwrap_err()
        .to_string();
    for needle in [
        "lookup.record = \"$.data\" matched nothing",
        "GET /records/{{ id }}",
        "\"external_id\":\"r1\"",
    ] {
        assert!(e.contains(needle), "{needle:?} not in: {e}");
    }
    let text = records_api(&emu, true, RULES).replace(
        "uniqueness = \"unique_field\"",
        "uniqueness = \"unique_field\"\ncreated = \"$.new\"",
    );
    let e = target(&text)
        .await
        .unwrap()
        .write(&[record("r2", 200, "paid")], WriteMode::Insert)
        .await
        .unwrap_err()
        .to_string();
    for needle in [
        "write.created = \"$.new\" found nothing",
        "POST /records",
        "\"external_id\":\"r2\"",
    ] {
        assert!(e.contains(needle), "{needle:?} not in: {e}");
    }
    emu.shutdown().await;
}
