//! Issue 12 (provider limits) for HubSpot: the connector against the
//! emulator in strict counting mode, with other apps spending most of the
//! account's budget; `""` for empty values; results correlated by
//! `objectWriteTraceId`; request and response bodies checked against
//! HubSpot's public OpenAPI spec (tests/spec/crm-objects-v3.json).
#![cfg(feature = "emulator")]

use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

use futures_util::TryStreamExt;
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Target, Value, Window,
    WriteMode, WriteOutcome,
};
use recon_hubspot::emulator::{Emulator, EmulatorConfig, Fault, FaultKind, PropertyType};
use recon_hubspot::{HubSpotConfig, HubSpotObjects};
use serde_json::{json, Value as Json};

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

fn config(e: &Emulator, per_10s: u32) -> HubSpotConfig {
    let mut cfg = HubSpotConfig::new(
        Secret::new(e.token.clone()),
        "deals",
        "stripe_charge_id",
        vec!["amount".into(), "dealstage".into(), "stripe_created".into()],
    );
    cfg.currency_property = Some("deal_currency_code".into());
    cfg.date_property = "stripe_created".into();
    cfg.base_url = e.base_url.clone();
    cfg.requests_per_10s = per_10s;
    cfg
}

fn record(i: i64) -> Record {
    Record {
        key: format!("ch_{i:06}"),
        values: vec![
            Value::Money(Money::from_minor(1000 + i, Currency::parse("USD").unwrap())),
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

#[tokio::test(start_paused = true)]
async fn with_other_apps_using_90_percent_of_the_10s_budget_1000_upserts_complete() {
    // 36 of 40 requests per rolling 10 s go to other apps of the account.
    let e = emulator(EmulatorConfig {
        limit_per_10s: Some(40),
        strict: true,
        others_share: 0.9,
        latency: Duration::from_millis(20),
        ..EmulatorConfig::default()
    })
    .await;
    // Let the other apps fill their share of the window first.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t = HubSpotObjects::new(config(&e, 40), &schema()).unwrap();
    let records: Vec<Record> = (0..1000).map(record).collect();
    let started = Instant::now();
    t.check_idempotent().await.unwrap();
    let out = t.write(&records, WriteMode::Upsert).await.unwrap();
    let took = started.elapsed();
    eprintln!(
        "1,000 upserts with others at 90%: {took:?}; {:?}",
        e.stats()
    );
    assert_eq!(out.len(), 1000);
    assert!(
        out.iter().all(|o| *o == WriteOutcome::Created),
        "every upsert created its deal: {:?}",
        out.iter().find(|o| **o != WriteOutcome::Created)
    );
    assert_eq!(e.count("deals"), 1000);
    let stats = e.stats();
    assert!(
        stats.other_requests >= 36,
        "the other apps really spent the budget meanwhile: {stats:?}"
    );
    // 11 calls at the 4 slots per 10 s left over take at least ~20 s; they
    // must not take more than a few windows beyond that.
    assert!(took < Duration::from_secs(90), "took {took:?}; {stats:?}");
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn when_the_window_never_frees_the_run_fails_after_patience_naming_the_setting() {
    // Every answer is HubSpot's TEN_SECONDLY_ROLLING 429 with
    // `X-HubSpot-RateLimit-Remaining: 0` (other apps hold the whole window).
    let e = emulator(EmulatorConfig::default()).await;
    e.set_faults(vec![Fault {
        kind: FaultKind::RateLimited,
        after: 0,
        times: 1_000,
    }]);
    let mut cfg = config(&e, 100);
    cfg.rate_limit_patience = Duration::from_secs(12);
    let t = HubSpotObjects::new(cfg, &schema()).unwrap();
    let started = Instant::now();
    let err = t.check_idempotent().await.unwrap_err().to_string();
    let took = started.elapsed();
    assert!(
        err.contains("rate_limit_patience") && err.contains("12s"),
        "{err}"
    );
    assert!(err.contains("429"), "{err}");
    assert!(!err.contains("daily"), "{err}");
    // It waited whole windows (10 s each), not a handful of short retries.
    assert!(
        took >= Duration::from_secs(10) && took <= Duration::from_secs(35),
        "{took:?}"
    );
    assert!(
        e.stats().requests <= 4,
        "one request per window, not a burst of retries: {:?}",
        e.stats()
    );
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn search_never_meets_a_secondly_429_in_strict_mode() {
    let e = emulator(EmulatorConfig {
        strict: true,
        search_per_sec: Some(5),
        limit_per_10s: Some(100),
        latency: Duration::from_millis(15),
        ..EmulatorConfig::default()
    })
    .await;
    // 14,000 deals: past the search cap, so the window is split (count
    // queries) and then paged, 200 per page: over 64 searches.
    let objects = (0..14_000i64).map(|i| {
        let mut m = serde_json::Map::new();
        m.insert("stripe_charge_id".into(), json!(format!("ch_{i:06}")));
        m.insert("amount".into(), json!("10.00"));
        m.insert("deal_currency_code".into(), json!("USD"));
        m.insert("dealstage".into(), json!("closedwon"));
        m.insert(
            "stripe_created".into(),
            json!((START_MS + i * (DAY_MS / 14_000)).to_string()),
        );
        m
    });
    e.insert_many("deals", objects);
    let t = HubSpotObjects::new(config(&e, 100), &schema()).unwrap();
    let window = Window {
        start: jiff::Timestamp::from_millisecond(START_MS).unwrap(),
        end: jiff::Timestamp::from_millisecond(START_MS + DAY_MS).unwrap(),
    };
    let pages: Vec<_> = t.read(window).try_collect().await.unwrap();
    let keys: BTreeSet<String> = pages
        .into_iter()
        .flat_map(|p| p.records)
        .map(|r| r.key)
        .collect();
    assert_eq!(keys.len(), 14_000);
    let stats = e.stats();
    assert!(stats.search_requests >= 64, "{stats:?}");
    assert_eq!(stats.throttled, 0, "no SECONDLY 429: {stats:?}");
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn upserts_send_empty_strings_for_empty_values_and_creates_omit_them() {
    // Strict mode refuses any property value that is not a string.
    let e = emulator(EmulatorConfig {
        strict: true,
        record_exchanges: true,
        ..EmulatorConfig::default()
    })
    .await;
    let t = HubSpotObjects::new(config(&e, 100), &schema()).unwrap();
    let mut first = record(1);
    first.values[1] = Value::Text("closedwon".into());
    t.write(&[first], WriteMode::Upsert).await.unwrap();
    // The stage is now empty: the upsert must clear it with "".
    let mut cleared = record(1);
    cleared.values[1] = Value::Null;
    let out = t.write(&[cleared], WriteMode::Upsert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Updated]);
    let (_, props) = e
        .objects("deals")
        .into_iter()
        .find(|(_, p)| p["stripe_charge_id"] == "ch_000001")
        .unwrap();
    assert!(
        props
            .get("dealstage")
            .is_none_or(|v| v.is_null() || v == ""),
        "cleared: {props:?}"
    );
    let upserts: Vec<Json> = e
        .exchanges()
        .into_iter()
        .filter(|x| x.path.ends_with("/batch/upsert"))
        .map(|x| x.request)
        .collect();
    assert_eq!(upserts.len(), 2);
    assert_eq!(
        upserts[1]["inputs"][0]["properties"]["dealstage"],
        json!("")
    );
    for body in &upserts {
        for input in body["inputs"].as_array().unwrap() {
            for (k, v) in input["properties"].as_object().unwrap() {
                assert!(v.is_string(), "{k} = {v} in {body}");
            }
        }
    }
    // Insert mode creates with batch/create and leaves empty values out.
    let mut fresh = record(2);
    fresh.values[1] = Value::Null;
    let out = t.write(&[fresh], WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Created]);
    let create = e
        .exchanges()
        .into_iter()
        .find(|x| x.path.ends_with("/batch/create"))
        .unwrap();
    let props = create.request["inputs"][0]["properties"]
        .as_object()
        .unwrap();
    assert!(!props.contains_key("dealstage"), "{props:?}");
    assert_eq!(props["stripe_charge_id"], "ch_000002");
    e.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn upsert_results_are_matched_by_trace_id_whatever_their_order() {
    // Results come back in reverse order and without the id property.
    let e = emulator(EmulatorConfig {
        scramble_batch_results: true,
        record_exchanges: true,
        ..EmulatorConfig::default()
    })
    .await;
    let t = HubSpotObjects::new(config(&e, 100), &schema()).unwrap();
    // 30 exist already (updated), 70 are new (created); 5 of each fail.
    let existing: Vec<Record> = (0..30).map(record).collect();
    t.write(&existing, WriteMode::Upsert).await.unwrap();
    let failing: BTreeSet<String> = [3, 7, 11, 40, 41, 42, 77, 80, 95, 99]
        .iter()
        .map(|i| format!("ch_{i:06}"))
        .collect();
    e.fail_ids(failing.iter().cloned().collect());
    let records: Vec<Record> = (0..100).map(record).collect();
    let out = t.write(&records, WriteMode::Upsert).await.unwrap();
    for (r, o) in records.iter().zip(&out) {
        let i: i64 = r.key[3..].parse().unwrap();
        let expected = if failing.contains(&r.key) {
            "failed"
        } else if i < 30 {
            "updated"
        } else {
            "created"
        };
        let got = match o {
            WriteOutcome::Failed(_) => "failed",
            WriteOutcome::Updated => "updated",
            WriteOutcome::Created => "created",
            _ => "other",
        };
        assert_eq!(got, expected, "{} -> {o:?}", r.key);
    }
    // Every input carried its own trace ID, echoed on its result.
    let last = e.exchanges().pop().unwrap();
    let sent: BTreeSet<&str> = last.request["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["objectWriteTraceId"].as_str().unwrap())
        .collect();
    assert_eq!(sent.len(), 100);
    let echoed: Vec<&str> = last.response["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["objectWriteTraceId"].as_str().unwrap())
        .collect();
    assert_eq!(echoed.len(), 90);
    assert!(echoed.iter().all(|t| sent.contains(t)));
    assert!(
        last.response["results"][0]["properties"]
            .get("stripe_charge_id")
            .is_none(),
        "the id property is not echoed, so only the trace ID can match"
    );
    e.shutdown().await;
}

// ---------------------------------------------------------------------------
// Bodies against HubSpot's OpenAPI spec

/// The trimmed CRM objects v3 spec (see its `source` field).
fn spec() -> Json {
    serde_json::from_str(include_str!("spec/crm-objects-v3.json")).unwrap()
}

/// Checks `v` against `schema` (the subset of JSON Schema the spec uses:
/// `$ref`, `type`, `required`, `properties`, `additionalProperties`,
/// `items`, `enum`). `null_values`: a `null` is accepted where a string
/// is expected inside a `properties` map (HubSpot's responses list requested
/// properties without a value as `null`; requests never may).
fn check(
    spec: &Json,
    schema: &Json,
    v: &Json,
    path: &str,
    null_values: bool,
    errors: &mut Vec<String>,
) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return check(spec, &spec["schemas"][name], v, path, null_values, errors);
    }
    let ty = schema["type"].as_str().unwrap_or("");
    let ok = match (ty, v) {
        ("object", Json::Object(_)) | ("array", Json::Array(_)) | ("string", Json::String(_)) => {
            true
        }
        ("boolean", Json::Bool(_)) => true,
        ("integer", Json::Number(n)) => n.is_i64() || n.is_u64(),
        ("number", Json::Number(_)) => true,
        ("string", Json::Null) => null_values && path.contains(".properties."),
        ("", _) => true,
        _ => false,
    };
    if !ok {
        errors.push(format!("{path}: expected {ty}, got {v}"));
        return;
    }
    if let (Some(allowed), Some(s)) = (schema["enum"].as_array(), v.as_str()) {
        if !allowed.iter().any(|a| a == s) {
            errors.push(format!("{path}: {s} is not one of {allowed:?}"));
        }
    }
    match v {
        Json::Object(map) => {
            for req in schema["required"].as_array().into_iter().flatten() {
                let req = req.as_str().unwrap();
                if !map.contains_key(req) {
                    errors.push(format!("{path}: missing required `{req}`"));
                }
            }
            for (k, x) in map {
                let sub = &schema["properties"][k];
                if !sub.is_null() {
                    check(spec, sub, x, &format!("{path}.{k}"), null_values, errors);
                } else if schema["additionalProperties"].is_object() {
                    check(
                        spec,
                        &schema["additionalProperties"],
                        x,
                        &format!("{path}.{k}"),
                        null_values,
                        errors,
                    );
                }
            }
        }
        Json::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                check(
                    spec,
                    &schema["items"],
                    x,
                    &format!("{path}[{i}]"),
                    null_values,
                    errors,
                );
            }
        }
        _ => {}
    }
}

#[test]
fn the_checker_refuses_what_the_spec_refuses() {
    let spec = spec();
    let upsert =
        json!({"$ref": "#/components/schemas/BatchInputSimplePublicObjectBatchInputUpsert"});
    let mut errors = Vec::new();
    check(
        &spec,
        &upsert,
        &json!({"inputs": [{"id": "ch_1", "idProperty": "x", "properties": {"a": null}}]}),
        "request",
        false,
        &mut errors,
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("properties.a"), "{errors:?}");
    errors.clear();
    check(
        &spec,
        &upsert,
        &json!({"inputs": [{"properties": {"a": ""}}]}),
        "request",
        false,
        &mut errors,
    );
    assert!(errors.iter().any(|e| e.contains("`id`")), "{errors:?}");
}

#[tokio::test(start_paused = true)]
async fn batch_bodies_match_hubspots_openapi_spec() {
    let spec = spec();
    let e = emulator(EmulatorConfig {
        record_exchanges: true,
        ..EmulatorConfig::default()
    })
    .await;
    let t = HubSpotObjects::new(config(&e, 100), &schema()).unwrap();
    let mut with_null = record(1);
    with_null.values[1] = Value::Null;
    t.write(&[record(0), with_null], WriteMode::Upsert)
        .await
        .unwrap();
    e.fail_ids(vec!["ch_000005".into()]);
    t.write(&[record(4), record(5)], WriteMode::Upsert)
        .await
        .unwrap();
    e.fail_ids(vec![]);
    t.write(&[record(0), record(9)], WriteMode::Insert)
        .await
        .unwrap();
    t.lookup(&["ch_000000".into(), "ch_404".into()])
        .await
        .unwrap();
    t.lookup(&["ch_000009".into()]).await.unwrap();
    let mut seen = BTreeSet::new();
    let mut errors = Vec::new();
    for x in e.exchanges() {
        let op = x.path.rsplit("/objects/deals/").next().unwrap().to_string();
        let Some(ops) = spec["operations"].get(&op) else {
            continue;
        };
        let status = x.status.to_string();
        seen.insert(format!("{op} {status}"));
        let request = json!({"$ref": format!("#/{}", ops["request"].as_str().unwrap())});
        check(
            &spec,
            &request,
            &x.request,
            &format!("{op} request"),
            false,
            &mut errors,
        );
        let response = ops[&status]
            .as_str()
            .unwrap_or_else(|| panic!("{op} answered {status}, which the spec does not list"));
        check(
            &spec,
            &json!({"$ref": format!("#/{response}")}),
            &x.response,
            &format!("{op} {status} response"),
            true,
            &mut errors,
        );
    }
    assert!(errors.is_empty(), "{errors:#?}");
    for needed in [
        "batch/upsert 200",
        "batch/upsert 207",
        "batch/create 201",
        "batch/read 200",
        "batch/read 207",
    ] {
        assert!(seen.contains(needed), "{needed} not exercised: {seen:?}");
    }
    e.shutdown().await;
}
