//! The emulator and the source against Stripe's own OpenAPI spec, trimmed
//! to balance transactions and payouts in `tests/spec/stripe-finance.json`
//! (where it came from: `tests/spec/README.md`):
//!
//! - every balance transaction and payout the emulator serves, listed or
//!   retrieved, carries the spec's required fields, only fields the spec
//!   declares, each of the spec's type (null only where nullable, enums
//!   within the enum), and its list envelope is the spec's;
//! - the emulator takes exactly the list parameters the spec declares for
//!   each endpoint and refuses the others;
//! - the fields recon documents for both objects have the spec's types;
//! - the source sends only parameters the spec declares for the endpoints
//!   it calls (list, retrieve, probe);
//! - nothing the emulator serves has been dropped from Stripe's newest
//!   fixtures.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::TryStreamExt;
use recon_core::{Field, FieldKind, Schema, Secret, Source, Window};
use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};
use recon_stripe::{StripeConfig, StripeObject, StripeSource};
use serde_json::{json, Value};

fn spec() -> Value {
    serde_json::from_str(include_str!("spec/stripe-finance.json")).unwrap()
}

/// Whether `v` is of the spec type `ty` (`integer`, `string`, …).
fn of_type(v: &Value, ty: &str) -> bool {
    match ty {
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        other => panic!("spec type {other}"),
    }
}

/// Every way `object` departs from the spec's schema `name`, as messages.
fn violations(spec: &Value, name: &str, object: &Value, out: &mut Vec<String>) {
    let schema = &spec["schemas"][name];
    let props = schema["properties"].as_object().unwrap();
    let obj = object.as_object().unwrap();
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    for r in schema["required"].as_array().unwrap() {
        if !obj.contains_key(r.as_str().unwrap()) {
            out.push(format!("{name} {id}: required `{r}` is missing"));
        }
    }
    for (k, v) in obj {
        let Some(p) = props.get(k) else {
            out.push(format!("{name} {id}: `{k}` is not in the spec"));
            continue;
        };
        if v.is_null() {
            if p["nullable"] != true {
                out.push(format!(
                    "{name} {id}: `{k}` is null, the spec says not nullable"
                ));
            }
            continue;
        }
        let types = p["types"].as_array().unwrap();
        if !types.iter().any(|t| of_type(v, t.as_str().unwrap())) {
            out.push(format!("{name} {id}: `{k}` = {v} is not of {types:?}"));
        }
        if let Some(e) = p.get("enum") {
            if !e.as_array().unwrap().contains(v) {
                out.push(format!("{name} {id}: `{k}` = {v} is not one of {e}"));
            }
        }
        if k == "fee_details" {
            for fee in v.as_array().unwrap() {
                violations(spec, "fee", fee, out);
            }
        }
    }
}

const START: i64 = 1_795_842_000;
const END: i64 = START + 86_400;

/// Balance transactions of several types and signs, and payouts of every
/// status, as tests seed them.
fn seed(emu: &Emulator) {
    let t = Emulator::balance_transaction;
    let mut txns = vec![
        t("txn_c", 5000, 175, "usd", "charge", Some("ch_1"), START),
        t("txn_r", -5000, 0, "usd", "refund", Some("re_1"), START + 1),
        t("txn_p", -4825, 0, "usd", "payout", Some("po_1"), START + 2),
        t(
            "txn_f",
            4825,
            0,
            "usd",
            "payout_failure",
            Some("po_1"),
            START + 3,
        ),
        t("txn_s", -200, 0, "usd", "stripe_fee", None, START + 4),
        t("txn_a", -15, 0, "usd", "adjustment", None, START + 5),
        t("txn_j", 500, 0, "jpy", "payment", Some("py_1"), START + 6),
    ];
    let mut pending = t(
        "txn_pend",
        1200,
        65,
        "eur",
        "charge",
        Some("ch_2"),
        START + 7,
    );
    pending["status"] = json!("pending");
    txns.push(pending);
    emu.insert_many(ObjectKind::BalanceTransaction, txns);
    let statuses = ["paid", "pending", "in_transit", "canceled", "failed"];
    emu.insert_many(
        ObjectKind::Payout,
        statuses.iter().enumerate().map(|(i, s)| {
            let at = START + i as i64;
            Emulator::payout(&format!("po_{s}"), 4825, "usd", s, at, at + 86_400)
        }),
    );
}

async fn get(emu: &Emulator, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", emu.base_url))
        .bearer_auth(&emu.api_key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn served_objects_carry_the_specs_fields_with_the_specs_types() {
    let spec = spec();
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    seed(&emu);
    let mut problems = Vec::new();
    for (endpoint, schema, count) in [
        ("/v1/balance_transactions", "balance_transaction", 8),
        ("/v1/payouts", "payout", 5),
    ] {
        let (status, list) = get(&emu, &format!("{endpoint}?limit=100")).await;
        assert_eq!(status, 200, "{list}");
        let envelope = &spec["endpoints"][endpoint]["list"];
        assert_eq!(envelope["data_items"], schema);
        for r in envelope["required"].as_array().unwrap() {
            assert!(list.get(r.as_str().unwrap()).is_some(), "{endpoint}: `{r}`");
        }
        assert!(envelope["object"]
            .as_array()
            .unwrap()
            .contains(&list["object"]));
        let pattern = envelope["url_pattern"].as_str().unwrap();
        assert!(
            list["url"]
                .as_str()
                .unwrap()
                .starts_with(pattern.trim_start_matches('^')),
            "{} against {pattern}",
            list["url"]
        );
        let data = list["data"].as_array().unwrap();
        assert_eq!(data.len(), count, "{endpoint}");
        let mut seen_fields = BTreeSet::new();
        for object in data {
            violations(&spec, schema, object, &mut problems);
            seen_fields.extend(object.as_object().unwrap().keys().cloned());
            let id = object["id"].as_str().unwrap();
            let (status, one) = get(&emu, &format!("{endpoint}/{id}")).await;
            assert_eq!(status, 200, "{one}");
            assert_eq!(&one, object, "a retrieve answers what the list holds");
        }
        // The builders carry every property of the schema.
        let declared: BTreeSet<String> = spec["schemas"][schema]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(seen_fields, declared, "{schema}");
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // A charge's fee_details were checked against `fee` (not vacuous).
    let (_, c) = get(&emu, "/v1/balance_transactions/txn_c").await;
    assert_eq!(c["fee_details"][0]["amount"], 175);
    assert_eq!(c["fee_details"][0]["type"], "stripe_fee");
    // And the check finds what it should.
    let mut broken = c.clone();
    broken["fee"] = json!(1.75);
    broken["status"] = Value::Null;
    broken["payout"] = json!("po_1");
    broken.as_object_mut().unwrap().remove("net");
    let mut found = Vec::new();
    violations(&spec, "balance_transaction", &broken, &mut found);
    assert_eq!(found.len(), 4, "{found:#?}");
    emu.shutdown().await;
}

/// A value for a query parameter of the spec: `(name, value)` pairs.
fn sample(name: &str, p: &Value) -> Vec<(String, String)> {
    if let Some(ops) = p.get("range") {
        let mut out = vec![(name.to_string(), START.to_string())];
        for op in ops.as_array().unwrap() {
            let v = if op.as_str().unwrap().starts_with('g') {
                START
            } else {
                END
            };
            out.push((format!("{name}[{}]", op.as_str().unwrap()), v.to_string()));
        }
        return out;
    }
    let v = match (name, p["types"][0].as_str().unwrap()) {
        ("limit", _) => "5".to_string(),
        ("starting_after" | "ending_before", _) => String::new(),
        (_, "array") => return vec![(format!("{name}[]"), "data.source".into())],
        (_, _) => "x".to_string(),
    };
    vec![(name.to_string(), v)]
}

#[tokio::test]
async fn the_emulator_takes_exactly_the_list_parameters_the_spec_declares() {
    let spec = spec();
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    seed(&emu);
    let endpoints = spec["endpoints"].as_object().unwrap();
    let mut every = BTreeSet::new();
    for e in endpoints.values() {
        every.extend(e["query"].as_object().unwrap().keys().cloned());
    }
    for (path, cursor) in [
        ("/v1/balance_transactions", "txn_c"),
        ("/v1/payouts", "po_paid"),
    ] {
        let declared = endpoints[path]["query"].as_object().unwrap();
        for (name, p) in declared {
            for (k, mut v) in sample(name, p) {
                if v.is_empty() {
                    v = cursor.into();
                }
                let (status, body) = get(&emu, &format!("{path}?{k}={v}")).await;
                assert_eq!(status, 200, "{path}?{k}={v}: {body}");
            }
        }
        for name in every.iter().filter(|n| !declared.contains_key(*n)) {
            let (status, body) = get(&emu, &format!("{path}?{name}=1")).await;
            assert_eq!(status, 400, "{path}?{name}");
            assert_eq!(body["error"]["code"], "parameter_unknown", "{path}?{name}");
        }
    }
    // Retrieves take `expand`.
    for path in ["/v1/balance_transactions/txn_c", "/v1/payouts/po_paid"] {
        let (status, body) = get(&emu, &format!("{path}?expand[]=source")).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    emu.shutdown().await;
}

#[test]
fn the_documented_fields_have_the_specs_types() {
    let spec = spec();
    for (object, schema) in [
        (StripeObject::BalanceTransactions, "balance_transaction"),
        (StripeObject::Payouts, "payout"),
    ] {
        assert!(!object.fields().is_empty());
        // The filters a job may set are the spec's list parameters.
        let list = &spec["endpoints"][object.path()]["query"];
        for f in object.list_filters() {
            assert_eq!(
                list[*f]["types"],
                json!(["string"]),
                "{} {f}",
                object.path()
            );
        }
        for (name, ty) in object.fields() {
            assert_eq!(object.default_path(name), *name);
            let p = &spec["schemas"][schema]["properties"][*name];
            let types: Vec<&str> = p["types"]
                .as_array()
                .unwrap_or_else(|| panic!("{schema}.{name} is not in the spec"))
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            let ok = match *ty {
                "integer" => types == ["integer"] && p.get("format").is_none(),
                "timestamp" => types == ["integer"] && p["format"] == "unix-time",
                "string" => types == ["string"],
                "boolean" => types == ["boolean"],
                "id" => types.contains(&"string") && types.contains(&"object"),
                other => panic!("{other}"),
            };
            assert!(ok, "{schema}.{name}: recon says {ty}, the spec {p}");
        }
    }
}

#[test]
fn what_the_emulator_serves_is_still_in_stripes_newest_fixtures() {
    let spec = spec();
    for (schema, object) in [
        (
            "balance_transaction",
            Emulator::balance_transaction("txn_1", 100, 3, "usd", "charge", Some("ch_1"), START),
        ),
        (
            "payout",
            Emulator::payout("po_1", 100, "usd", "failed", START, END),
        ),
    ] {
        let fixture = spec["fixtures"][schema].as_object().unwrap();
        for (k, v) in object.as_object().unwrap() {
            let f = fixture
                .get(k)
                .unwrap_or_else(|| panic!("{schema}.{k} is gone from Stripe's fixture"));
            if !v.is_null() && !f.is_null() {
                assert_eq!(
                    std::mem::discriminant(v),
                    std::mem::discriminant(f),
                    "{schema}.{k}: {v} vs the fixture's {f}"
                );
            }
        }
    }
}

fn schema_of(object: StripeObject) -> Schema {
    Schema {
        fields: object
            .fields()
            .iter()
            .map(|(name, ty)| Field {
                name: (*name).into(),
                kind: match (*name, *ty) {
                    ("amount", _) => FieldKind::Money,
                    ("currency", _) => FieldKind::Currency,
                    (_, "integer") => FieldKind::Integer,
                    (_, "timestamp") => FieldKind::Timestamp,
                    _ => FieldKind::Text,
                },
                compared: true,
            })
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_sends_only_parameters_the_spec_declares() {
    let spec = spec();
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    // More than a page of each in the window, so the source pages by cursor.
    emu.insert_many(
        ObjectKind::BalanceTransaction,
        (0..450).map(|i| {
            Emulator::balance_transaction(
                &format!("txn_{i:04}"),
                1000 + i,
                59,
                "usd",
                "charge",
                Some("ch_x"),
                START + i * 150,
            )
        }),
    );
    emu.insert_many(
        ObjectKind::Payout,
        (0..450).map(|i| {
            let at = START + i * 150;
            Emulator::payout(
                &format!("po_{i:04}"),
                1000 + i,
                "usd",
                "paid",
                at,
                at + 86_400,
            )
        }),
    );
    let window = Window {
        start: jiff::Timestamp::from_second(START).unwrap(),
        end: jiff::Timestamp::from_second(END).unwrap(),
    };
    emu.pay_out("po_z", &["txn_0001", "txn_0002"]);
    let destination = Emulator::payout("po_0001", 0, "usd", "paid", 0, 0)["destination"].clone();
    let destination = destination.as_str().unwrap();
    for (object, found, missing, filters) in [
        (
            StripeObject::BalanceTransactions,
            "txn_0001",
            "txn_none",
            vec![],
        ),
        (StripeObject::Payouts, "po_0001", "po_none", vec![]),
        (
            StripeObject::BalanceTransactions,
            "txn_0001",
            "txn_none",
            vec![
                ("type", "charge"),
                ("currency", "usd"),
                ("source", "ch_x"),
                ("payout", "po_z"),
            ],
        ),
        (
            StripeObject::Payouts,
            "po_0001",
            "po_none",
            vec![("status", "paid"), ("destination", destination)],
        ),
    ] {
        let mut cfg = StripeConfig::new(Secret::new(emu.api_key.clone()), object);
        cfg.base_url = emu.base_url.clone();
        cfg.requests_per_second = Some(1000);
        cfg.concurrency = 4;
        cfg.filters = filters
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let s = StripeSource::new(cfg, &schema_of(object)).unwrap();
        let pages: Vec<_> = s.read(window).try_collect().await.unwrap();
        let read: usize = pages.iter().map(|p| p.records.len()).sum();
        assert!(read > 0, "{object:?} {filters:?}");
        if filters.is_empty() {
            assert_eq!(read, 450);
        }
        let hits = s.lookup(&[found.into(), missing.into()]).await.unwrap();
        assert_eq!(hits.len(), 1, "{object:?} {filters:?}");
        s.probe().await.unwrap();
    }
    // Each request against the spec of its endpoint.
    let mut sent: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let requests = emu.requests();
    for r in &requests {
        let (endpoint, retrieve) = match r.path.as_str() {
            "/v1/balance_transactions" | "/v1/payouts" => (r.path.as_str(), false),
            p if p.starts_with("/v1/balance_transactions/") => {
                ("/v1/balance_transactions/{id}", true)
            }
            p if p.starts_with("/v1/payouts/") => ("/v1/payouts/{payout}", true),
            other => panic!("the source called {other}, which it should not"),
        };
        assert_eq!(r.method, "GET");
        let declared = &spec["endpoints"][endpoint]["query"];
        for (name, _) in &r.query {
            let (base, op) = match name.split_once('[') {
                Some((b, rest)) => (b, Some(rest.trim_end_matches(']'))),
                None => (name.as_str(), None),
            };
            let p = &declared[base];
            assert!(
                p.is_object(),
                "{endpoint}: `{name}` is not a parameter of the spec"
            );
            if let Some(op) = op {
                let ops = p["range"].as_array();
                assert!(
                    ops.is_some_and(|o| o.contains(&json!(op))),
                    "{endpoint}: `{name}`: the spec has no such range operator"
                );
            }
        }
        let key = if retrieve { endpoint } else { r.path.as_str() };
        let names = sent.entry(key).or_default();
        names.extend(r.query.iter().map(|(k, _)| k.clone()));
        if retrieve {
            names.insert("(retrieve)".into());
        }
    }
    // Not vacuous: every kind of call happened, with the parameters it needs.
    for (list, filters) in [
        (
            "/v1/balance_transactions",
            &["type", "currency", "source", "payout"][..],
        ),
        ("/v1/payouts", &["status", "destination"][..]),
    ] {
        let names = &sent[list];
        let needed = ["limit", "created[gte]", "created[lt]", "starting_after"];
        for p in needed.iter().chain(filters) {
            assert!(names.contains(*p), "{list}: {p} never sent ({names:?})");
        }
    }
    assert!(sent["/v1/balance_transactions/{id}"].contains("(retrieve)"));
    assert!(sent["/v1/payouts/{payout}"].contains("(retrieve)"));
    emu.shutdown().await;
}
