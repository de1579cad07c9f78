//! The HubSpot CRM emulator, exercised over real HTTP with reqwest.
#![cfg(feature = "emulator")]

use std::collections::HashSet;
use std::time::Duration;

// The emulator's clock: on tokio's paused clock it is virtual time.
use tokio::time::Instant;

use recon_hubspot::emulator::{Emulator, EmulatorConfig, Fault, FaultKind, PropertyType};
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};

/// 2026-11-28T00:00:00Z.
const T0: i64 = 1_795_824_000_000;

/// No rate limits (for tests that are not about them).
fn unlimited() -> EmulatorConfig {
    EmulatorConfig {
        limit_per_10s: None,
        search_per_sec: None,
        ..EmulatorConfig::default()
    }
}

async fn start(config: EmulatorConfig) -> Emulator {
    let emu = Emulator::start(config).await.unwrap();
    emu.create_property("deals", "stripe_charge_id", true);
    emu.create_typed_property("deals", "stripe_created", PropertyType::DateTime, false);
    emu
}

fn props(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// A deal for charge `ch_<i>` created at `created_ms`.
fn deal(i: i64, created_ms: i64) -> Map<String, Value> {
    props(&[
        ("stripe_charge_id", json!(format!("ch_{i:06}"))),
        ("stripe_created", json!(created_ms)),
        ("amount", json!(format!("{}.00", 10 + i))),
        ("dealname", json!(format!("Deal {i}"))),
    ])
}

async fn send(
    emu: &Emulator,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, HeaderMap, String) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{}", emu.base_url, path))
        .bearer_auth(&emu.token);
    if let Some(b) = body {
        req = req.json(b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.text().await.unwrap())
}

async fn post(emu: &Emulator, path: &str, body: Value) -> (u16, HeaderMap, Value) {
    let (s, h, b) = send(emu, reqwest::Method::POST, path, Some(&body)).await;
    (s, h, serde_json::from_str(&b).unwrap_or(Value::Null))
}

async fn get(emu: &Emulator, path: &str) -> (u16, HeaderMap, Value) {
    let (s, h, b) = send(emu, reqwest::Method::GET, path, None).await;
    (s, h, serde_json::from_str(&b).unwrap_or(Value::Null))
}

fn assert_error(body: &Value, category: &str) {
    assert_eq!(body["status"], "error", "{body}");
    assert_eq!(body["category"], category, "{body}");
    assert!(body["message"].is_string(), "{body}");
    assert!(body["correlationId"].is_string(), "{body}");
}

/// The `stripe_charge_id`s of a search or batch answer, in order.
fn keys(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            o["properties"]["stripe_charge_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn range_search(lo: Value, hi: Value, limit: usize, after: Option<&str>) -> Value {
    let mut b = json!({
        "filterGroups": [{"filters": [
            {"propertyName": "stripe_created", "operator": "GTE", "value": lo},
            {"propertyName": "stripe_created", "operator": "LT", "value": hi},
        ]}],
        "sorts": [{"propertyName": "stripe_created", "direction": "ASCENDING"}],
        "properties": ["stripe_charge_id", "stripe_created"],
        "limit": limit,
    });
    if let Some(a) = after {
        b["after"] = json!(a);
    }
    b
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

#[tokio::test]
async fn properties_endpoint() {
    let emu = start(unlimited()).await;
    let (status, headers, body) = get(&emu, "/crm/v3/properties/deals/stripe_charge_id").await;
    assert_eq!(status, 200);
    assert_eq!(body["name"], "stripe_charge_id");
    assert_eq!(body["type"], "string");
    assert_eq!(body["fieldType"], "text");
    assert_eq!(body["hasUniqueValue"], true);
    assert!(is_uuid(
        headers["x-hubspot-correlation-id"].to_str().unwrap()
    ));

    let (_, _, body) = get(&emu, "/crm/v3/properties/deals/stripe_created").await;
    assert_eq!(body["type"], "datetime");
    assert_eq!(body["hasUniqueValue"], false);
    let (_, _, body) = get(&emu, "/crm/v3/properties/0-3/createdate").await;
    assert_eq!(body["type"], "datetime");
    assert_eq!(body["hubspotDefined"], true);

    // An existing property keeps its type when "created" again.
    emu.create_property("deals", "amount", false);
    let (_, _, body) = get(&emu, "/crm/v3/properties/deals/amount").await;
    assert_eq!(body["type"], "number");

    let (status, _, body) = get(&emu, "/crm/v3/properties/deals/nope").await;
    assert_eq!(status, 404);
    assert_error(&body, "OBJECT_NOT_FOUND");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .starts_with("Unable to find property nope"));

    // Custom objects: unknown until defined.
    let (status, _, _) = get(&emu, "/crm/v3/properties/2-1234/external_id").await;
    assert_eq!(status, 404);
    emu.create_property("2-1234", "external_id", true);
    let (status, _, body) = get(&emu, "/crm/v3/properties/2-1234/external_id").await;
    assert_eq!(status, 200);
    assert_eq!(body["hasUniqueValue"], true);

    let (status, _, body) = get(&emu, "/crm/v3/properties/widgets/x").await;
    assert_eq!(status, 400);
    assert_error(&body, "VALIDATION_ERROR");

    let (status, _, body) = get(&emu, "/crm/v3/properties/deals").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"stripe_charge_id") && names.contains(&"hs_object_id"));
    emu.shutdown().await;
}

#[tokio::test]
async fn insert_sets_builtins_and_stores_strings() {
    let emu = start(unlimited()).await;
    let id = emu.insert("deals", deal(1, T0 + 5));
    assert!(id.parse::<u64>().is_ok(), "{id}");
    let objects = emu.objects("deals");
    assert_eq!(objects.len(), 1);
    let (oid, p) = &objects[0];
    assert_eq!(oid, &id);
    assert_eq!(p["hs_object_id"], json!(id));
    assert_eq!(p["stripe_created"], "2026-11-28T00:00:00.005Z");
    assert_eq!(p["amount"], "11.00");
    for d in ["createdate", "lastmodifieddate"] {
        let s = p[d].as_str().unwrap();
        assert!(s.ends_with('Z') && s.len() == 24, "{s}");
    }
    // Given dates are kept (epoch ms or ISO 8601).
    let id2 = emu.insert(
        "contacts",
        props(&[
            ("email", json!("a@example.com")),
            ("createdate", json!(T0)),
            ("lastmodifieddate", json!("2026-11-28T01:00:00Z")),
        ]),
    );
    let (_, p) = emu
        .objects("contacts")
        .into_iter()
        .find(|(i, _)| *i == id2)
        .unwrap();
    assert_eq!(p["createdate"], "2026-11-28T00:00:00.000Z");
    assert_eq!(p["lastmodifieddate"], "2026-11-28T01:00:00.000Z");
    assert_eq!(emu.count("contacts"), 1);
    assert_eq!(emu.count("0-1"), 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn search_date_range_boundaries_sort_and_paging() {
    let emu = start(unlimited()).await;
    // Inserted out of order: deal i at T0 + i seconds.
    for i in (0..50).rev() {
        emu.insert("deals", deal(i, T0 + i * 1000));
    }
    let lo = T0 + 10_000; // deal 10 exactly
    let hi = T0 + 30_000; // deal 30 exactly: excluded
    let expected: Vec<String> = (10..30).map(|i| format!("ch_{i:06}")).collect();

    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let (status, headers, body) = post(
            &emu,
            "/crm/v3/objects/deals/search",
            range_search(json!(lo.to_string()), json!(hi), 7, after.as_deref()),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        // HubSpot: no rate-limit headers on search responses.
        assert!(headers.get("x-hubspot-ratelimit-max").is_none());
        assert!(headers.get("x-hubspot-correlation-id").is_some());
        assert_eq!(body["total"], 20);
        pages += 1;
        let r = &body["results"][0];
        assert!(r["id"].is_string());
        assert_eq!(r["archived"], false);
        assert!(r["createdAt"].is_string() && r["updatedAt"].is_string());
        let p = r["properties"].as_object().unwrap();
        let mut names: Vec<&str> = p.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "createdate",
                "hs_object_id",
                "lastmodifieddate",
                "stripe_charge_id",
                "stripe_created"
            ]
        );
        seen.extend(keys(&body));
        match body.get("paging") {
            Some(p) => after = Some(p["next"]["after"].as_str().unwrap().to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, expected);

    // ISO 8601 bounds select the same; a date-only value is midnight UTC.
    let (_, _, body) = post(
        &emu,
        "/crm/v3/objects/deals/search",
        range_search(
            json!("2026-11-28T00:00:10Z"),
            json!("2026-11-28T00:00:30.000Z"),
            200,
            None,
        ),
    )
    .await;
    assert_eq!(keys(&body), expected);
    assert!(body.get("paging").is_none());
    let (_, _, body) = post(
        &emu,
        "/crm/v3/objects/deals/search",
        range_search(json!("2026-11-28"), json!(T0 + 1), 10, None),
    )
    .await;
    assert_eq!(keys(&body), ["ch_000000"]);

    // GT / LTE flip the boundaries.
    let (_, _, body) = post(
        &emu,
        "/crm/v3/objects/deals/search",
        json!({
            "filterGroups": [{"filters": [
                {"propertyName": "stripe_created", "operator": "GT", "value": lo},
                {"propertyName": "stripe_created", "operator": "LTE", "value": hi},
            ]}],
            "sorts": [{"propertyName": "stripe_created", "direction": "DESCENDING"}],
            "properties": ["stripe_charge_id"],
            "limit": 100,
        }),
    )
    .await;
    let desc: Vec<String> = (11..=30).rev().map(|i| format!("ch_{i:06}")).collect();
    assert_eq!(keys(&body), desc);
    assert_eq!(body["total"], 20);
    emu.shutdown().await;
}

#[tokio::test]
async fn search_operators_and_defaults() {
    let emu = start(unlimited()).await;
    emu.create_property("deals", "note", false);
    for i in 0..6 {
        let mut p = deal(i, T0 + i);
        if i % 2 == 0 {
            p.insert("note".into(), json!(format!("even {i}")));
        }
        emu.insert("deals", p);
    }
    let find = |filters: Value| {
        json!({
            "filterGroups": [{"filters": filters}],
            "properties": ["stripe_charge_id", "note"],
        })
    };
    let url = "/crm/v3/objects/deals/search";
    let (_, _, b) = post(
        &emu,
        url,
        find(json!([{"propertyName": "stripe_charge_id", "operator": "EQ", "value": "ch_000003"}])),
    )
    .await;
    assert_eq!(keys(&b), ["ch_000003"]);
    assert_eq!(b["results"][0]["properties"]["note"], Value::Null);
    let (_, _, b) = post(
        &emu,
        url,
        find(json!([{"propertyName": "stripe_charge_id", "operator": "IN", "values": ["ch_000001", "ch_000004", "ch_9"]}])),
    )
    .await;
    assert_eq!(keys(&b), ["ch_000001", "ch_000004"]);
    let (_, _, b) = post(
        &emu,
        url,
        find(json!([{"propertyName": "note", "operator": "HAS_PROPERTY"}])),
    )
    .await;
    assert_eq!(keys(&b), ["ch_000000", "ch_000002", "ch_000004"]);
    let (_, _, b) = post(
        &emu,
        url,
        find(json!([{"propertyName": "note", "operator": "NEQ", "value": "even 2"}])),
    )
    .await;
    assert_eq!(b["total"], 5);
    // Numeric comparison on a number property: "9.00" < "15.00" numerically.
    let (_, _, b) = post(
        &emu,
        url,
        find(json!([{"propertyName": "amount", "operator": "GTE", "value": "13"}])),
    )
    .await;
    assert_eq!(keys(&b), ["ch_000003", "ch_000004", "ch_000005"]);
    // Groups are ORed.
    let (_, _, b) = post(
        &emu,
        url,
        json!({"filterGroups": [
            {"filters": [{"propertyName": "stripe_charge_id", "operator": "EQ", "value": "ch_000000"}]},
            {"filters": [{"propertyName": "stripe_charge_id", "operator": "EQ", "value": "ch_000005"}]},
        ], "properties": ["stripe_charge_id"]}),
    )
    .await;
    assert_eq!(keys(&b), ["ch_000000", "ch_000005"]);

    // No filters, no properties: everything, 10 per page by default, with
    // the deals' default properties.
    let (_, _, b) = post(&emu, url, json!({})).await;
    assert_eq!(b["total"], 6);
    let p = b["results"][0]["properties"].as_object().unwrap();
    for n in [
        "amount",
        "dealname",
        "dealstage",
        "hs_object_id",
        "createdate",
    ] {
        assert!(p.contains_key(n), "{n}: {b}");
    }

    // Validation errors.
    for bad in [
        json!({"limit": 201}),
        json!({"after": "x"}),
        json!({"filterGroups": [{"filters": [{"propertyName": "amount", "operator": "LIKE", "value": "1"}]}]}),
        json!({"filterGroups": [{"filters": [{"propertyName": "stripe_created", "operator": "GT", "value": "yesterday"}]}]}),
        json!({"sorts": [{"propertyName": "amount"}, {"propertyName": "dealname"}]}),
        json!({"filterGroups": (0..6).map(|_| json!({"filters": []})).collect::<Vec<_>>()}),
    ] {
        let (status, _, b) = post(&emu, url, bad.clone()).await;
        assert_eq!(status, 400, "{bad}");
        assert_error(&b, "VALIDATION_ERROR");
    }
    let (status, _, b) = send(&emu, reqwest::Method::POST, url, None).await;
    assert_eq!(status, 400, "{b}");
    emu.shutdown().await;
}

#[tokio::test]
async fn the_10000_result_cap() {
    let emu = start(unlimited()).await;
    emu.insert_many("deals", (0..10_050).map(|i| deal(i, T0 + i)));
    let url = "/crm/v3/objects/deals/search";
    let all = |after: &str, limit: usize| {
        range_search(json!(T0), json!(T0 + 1_000_000), limit, Some(after))
    };

    let (status, _, b) = post(&emu, url, all("9800", 200)).await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["total"], 10_050);
    assert_eq!(b["results"].as_array().unwrap().len(), 200);
    assert_eq!(keys(&b)[0], "ch_009800");
    assert_eq!(b["paging"]["next"]["after"], "10000");

    for (after, limit) in [("10000", 200), ("9900", 200), ("9999", 2), ("12000", 10)] {
        let (status, _, b) = post(&emu, url, all(after, limit)).await;
        assert_eq!(status, 400, "after {after} limit {limit}: {b}");
        assert_error(&b, "VALIDATION_ERROR");
    }
    let (status, _, b) = post(&emu, url, all("9999", 1)).await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(keys(&b), ["ch_009999"]);

    // A narrower query (9,990 matches) may page to its end.
    let (status, _, b) = post(
        &emu,
        url,
        range_search(json!(T0), json!(T0 + 9_990), 200, Some("9800")),
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["total"], 9_990);
    assert_eq!(b["results"].as_array().unwrap().len(), 190);
    assert!(b.get("paging").is_none());
    emu.shutdown().await;
}

#[tokio::test]
async fn batch_read_found_and_missing() {
    let emu = start(unlimited()).await;
    let id1 = emu.insert("deals", deal(1, T0));
    emu.insert("deals", deal(2, T0));
    let url = "/crm/v3/objects/deals/batch/read";
    let (status, headers, b) = post(
        &emu,
        url,
        json!({
            "idProperty": "stripe_charge_id",
            "inputs": [{"id": "ch_000001"}, {"id": "ch_nope"}, {"id": "ch_000002"}, {"id": "ch_gone"}],
            "properties": ["stripe_charge_id", "amount"],
        }),
    )
    .await;
    assert_eq!(status, 207, "{b}");
    assert!(headers.get("x-hubspot-ratelimit-remaining").is_none());
    assert_eq!(b["status"], "COMPLETE");
    assert_eq!(keys(&b), ["ch_000001", "ch_000002"]);
    assert_eq!(b["results"][0]["id"], json!(id1));
    assert_eq!(b["results"][0]["properties"]["amount"], "11.00");
    assert_eq!(b["numErrors"], 1);
    assert_eq!(b["errors"][0]["category"], "OBJECT_NOT_FOUND");
    assert_eq!(
        b["errors"][0]["context"]["ids"],
        json!(["ch_nope", "ch_gone"])
    );

    let (status, _, b) = post(
        &emu,
        url,
        json!({"idProperty": "stripe_charge_id", "inputs": [{"id": "ch_000002"}], "properties": ["stripe_charge_id"]}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(b.get("errors").is_none());
    assert_eq!(keys(&b), ["ch_000002"]);

    // By record id (no idProperty).
    let (status, _, b) = post(
        &emu,
        url,
        json!({"inputs": [{"id": id1}], "properties": ["stripe_charge_id"]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(keys(&b), ["ch_000001"]);

    // Over 100 inputs; a non-unique idProperty.
    let many: Vec<Value> = (0..101).map(|i| json!({"id": format!("ch_{i}")})).collect();
    let (status, _, b) = post(
        &emu,
        url,
        json!({"idProperty": "stripe_charge_id", "inputs": many}),
    )
    .await;
    assert_eq!(status, 400);
    assert_error(&b, "VALIDATION_ERROR");
    let (status, _, b) = post(
        &emu,
        url,
        json!({"idProperty": "dealname", "inputs": [{"id": "Deal 1"}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_error(&b, "VALIDATION_ERROR");

    // Single object read.
    let (status, _, b) = get(
        &emu,
        "/crm/v3/objects/deals/ch_000002?idProperty=stripe_charge_id&properties=amount",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(b["properties"]["amount"], "12.00");
    let (status, _, b) = get(&emu, "/crm/v3/objects/deals/999999999").await;
    assert_eq!(status, 404);
    assert_error(&b, "OBJECT_NOT_FOUND");
    emu.shutdown().await;
}

fn upsert_input(key: &str, props: Value) -> Value {
    json!({"idProperty": "stripe_charge_id", "id": key, "properties": props})
}

#[tokio::test]
async fn batch_upsert_creates_then_updates() {
    let emu = start(EmulatorConfig::default()).await;
    let url = "/crm/v3/objects/deals/batch/upsert";
    let (status, headers, b) = post(
        &emu,
        url,
        json!({"inputs": [
            upsert_input("ch_1", json!({"amount": "10.00", "stripe_created": T0.to_string(), "stripe_charge_id": "ch_1"})),
            upsert_input("ch_2", json!({"amount": 20})),
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(
        headers["x-hubspot-ratelimit-interval-milliseconds"],
        "10000"
    );
    assert_eq!(headers["x-hubspot-ratelimit-max"], "100");
    assert_eq!(headers["x-hubspot-ratelimit-remaining"], "99");
    assert_eq!(b["status"], "COMPLETE");
    let results = b["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["new"] == true));
    let r1 = &results[0];
    let id = r1["id"].as_str().unwrap().to_owned();
    assert_eq!(r1["properties"]["stripe_charge_id"], "ch_1");
    assert_eq!(
        r1["properties"]["stripe_created"],
        "2026-11-28T00:00:00.000Z"
    );
    assert_eq!(r1["properties"]["hs_object_id"], json!(id));
    assert_eq!(results[1]["properties"]["amount"], "20");

    tokio::time::sleep(Duration::from_millis(5)).await;
    let (status, _, b) = post(
        &emu,
        url,
        json!({"inputs": [upsert_input("ch_1", json!({"amount": "11.50", "dealname": "Renamed"}))]}),
    )
    .await;
    assert_eq!(status, 200, "{b}");
    let r = &b["results"][0];
    assert_eq!(r["new"], false);
    assert_eq!(r["id"], json!(id));
    assert_eq!(r["properties"]["amount"], "11.50");
    assert_ne!(r["updatedAt"], r["createdAt"]);

    let objects = emu.objects("deals");
    assert_eq!(objects.len(), 2);
    let (_, p) = objects.iter().find(|(i, _)| *i == id).unwrap();
    assert_eq!(p["amount"], "11.50");
    assert_eq!(p["dealname"], "Renamed");
    assert_eq!(p["stripe_created"], "2026-11-28T00:00:00.000Z", "kept");

    // `null` clears a property.
    post(
        &emu,
        url,
        json!({"inputs": [upsert_input("ch_1", json!({"dealname": null}))]}),
    )
    .await;
    let (_, p) = emu
        .objects("deals")
        .into_iter()
        .find(|(i, _)| *i == id)
        .unwrap();
    assert!(p.get("dealname").is_none());

    // Whole-batch validation: too many inputs, a non-unique idProperty,
    // duplicate ids, no idProperty.
    let many: Vec<Value> = (0..101)
        .map(|i| upsert_input(&format!("ch_x{i}"), json!({})))
        .collect();
    for bad in [
        json!({"inputs": many}),
        json!({"inputs": [{"idProperty": "dealname", "id": "x", "properties": {}}]}),
        json!({"inputs": [upsert_input("ch_9", json!({})), upsert_input("ch_9", json!({}))]}),
        json!({"inputs": [{"id": "ch_9", "properties": {}}]}),
    ] {
        let (status, _, b) = post(&emu, url, bad.clone()).await;
        assert_eq!(status, 400, "{bad}");
        assert_error(&b, "VALIDATION_ERROR");
    }
    assert_eq!(emu.count("deals"), 2, "nothing written by a refused batch");

    // `?idProperty=` for inputs that name none.
    let (status, _, b) = post(
        &emu,
        &format!("{url}?idProperty=stripe_charge_id"),
        json!({"inputs": [{"id": "ch_2", "properties": {"amount": "21"}}]}),
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["results"][0]["new"], false);
    emu.shutdown().await;
}

#[tokio::test]
async fn unique_values_are_enforced() {
    let emu = start(unlimited()).await;
    emu.create_property("deals", "invoice_ref", true);
    emu.insert(
        "deals",
        props(&[
            ("stripe_charge_id", json!("ch_1")),
            ("invoice_ref", json!("in_1")),
        ]),
    );

    // insert() refuses a duplicate (and the emulator stays usable).
    let dup = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        emu.insert("deals", props(&[("stripe_charge_id", json!("ch_1"))]));
    }));
    assert!(dup.is_err());
    assert_eq!(emu.count("deals"), 1);

    // An upsert that would give a second record in_1 fails per item.
    let (status, _, b) = post(
        &emu,
        "/crm/v3/objects/deals/batch/upsert",
        json!({"inputs": [
            upsert_input("ch_2", json!({"invoice_ref": "in_1"})),
            upsert_input("ch_3", json!({"invoice_ref": "in_3"})),
            upsert_input("ch_1", json!({"invoice_ref": "in_1"})),
        ]}),
    )
    .await;
    assert_eq!(status, 207, "{b}");
    assert_eq!(b["numErrors"], 1);
    assert_eq!(b["errors"][0]["context"]["ids"], json!(["ch_2"]));
    assert_eq!(keys(&b), ["ch_3", "ch_1"]);
    assert_eq!(b["results"][1]["new"], false);

    // Within one batch, too.
    let (status, _, b) = post(
        &emu,
        "/crm/v3/objects/deals/batch/upsert",
        json!({"inputs": [
            upsert_input("ch_4", json!({"invoice_ref": "in_4"})),
            upsert_input("ch_5", json!({"invoice_ref": "in_4"})),
        ]}),
    )
    .await;
    assert_eq!(status, 207, "{b}");
    assert_eq!(b["errors"][0]["context"]["ids"], json!(["ch_5"]));

    let mut refs: Vec<String> = emu
        .objects("deals")
        .into_iter()
        .filter_map(|(_, p)| p.get("invoice_ref").map(|v| v.as_str().unwrap().to_owned()))
        .collect();
    let n = refs.len();
    refs.sort();
    refs.dedup();
    assert_eq!(refs.len(), n, "no duplicate unique values: {refs:?}");

    // A property cannot become unique while values repeat.
    emu.create_property("deals", "colour", false);
    emu.insert(
        "deals",
        props(&[
            ("stripe_charge_id", json!("ch_a")),
            ("colour", json!("red")),
        ]),
    );
    emu.insert(
        "deals",
        props(&[
            ("stripe_charge_id", json!("ch_b")),
            ("colour", json!("red")),
        ]),
    );
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        emu.create_property("deals", "colour", true);
    }));
    assert!(r.is_err());
    let (_, _, b) = get(&emu, "/crm/v3/properties/deals/colour").await;
    assert_eq!(b["hasUniqueValue"], false);
    emu.shutdown().await;
}

#[tokio::test]
async fn partial_failure_is_207_multi_status() {
    let emu = start(unlimited()).await;
    emu.fail_ids(vec!["ch_2".into()]);
    let url = "/crm/v3/objects/deals/batch/upsert";
    let body = json!({"inputs": [
        upsert_input("ch_1", json!({"amount": "1"})),
        upsert_input("ch_2", json!({"amount": "2"})),
        upsert_input("ch_3", json!({"amount": "3", "no_such_property": "x"})),
        upsert_input("ch_4", json!({"stripe_created": "not a date"})),
    ]});
    let (status, _, b) = post(&emu, url, body.clone()).await;
    assert_eq!(status, 207, "{b}");
    assert_eq!(b["status"], "COMPLETE");
    assert_eq!(keys(&b), ["ch_1"]);
    assert_eq!(b["numErrors"], 3);
    let errors = b["errors"].as_array().unwrap();
    let failed: Vec<&Value> = errors.iter().map(|e| &e["context"]["ids"][0]).collect();
    assert_eq!(failed, [&json!("ch_2"), &json!("ch_3"), &json!("ch_4")]);
    for e in errors {
        assert_eq!(e["status"], "error");
        assert_eq!(e["category"], "VALIDATION_ERROR");
        assert!(e["message"].is_string());
    }
    assert_eq!(emu.count("deals"), 1);

    // Cleared: the retry of ch_2 succeeds; ch_1 is now an update.
    emu.fail_ids(vec![]);
    let (status, _, b) = post(
        &emu,
        url,
        json!({"inputs": [upsert_input("ch_1", json!({"amount": "1"})), upsert_input("ch_2", json!({"amount": "2"}))]}),
    )
    .await;
    assert_eq!(status, 200, "{b}");
    let new: Vec<&Value> = b["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["new"])
        .collect();
    assert_eq!(new, [&json!(false), &json!(true)]);
    assert_eq!(emu.count("deals"), 2);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn search_lag_hides_fresh_upserts_from_search_only() {
    let emu = start(EmulatorConfig {
        search_lag: Duration::from_millis(400),
        ..unlimited()
    })
    .await;
    emu.insert("deals", deal(1, T0));
    let by_key = |k: &str| {
        json!({
            "filterGroups": [{"filters": [{"propertyName": "stripe_charge_id", "operator": "EQ", "value": k}]}],
            "properties": ["stripe_charge_id"],
        })
    };
    // Inserted objects are searchable at once.
    let (_, _, b) = post(&emu, "/crm/v3/objects/deals/search", by_key("ch_000001")).await;
    assert_eq!(b["total"], 1);

    let written = Instant::now();
    let (status, _, _) = post(
        &emu,
        "/crm/v3/objects/deals/batch/upsert",
        json!({"inputs": [upsert_input("ch_new", json!({"stripe_created": T0 + 5}))]}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, _, b) = post(&emu, "/crm/v3/objects/deals/search", by_key("ch_new")).await;
    assert_eq!(b["total"], 0, "{b}");
    let (_, _, b) = post(
        &emu,
        "/crm/v3/objects/deals/search",
        range_search(json!(T0), json!(T0 + 10), 10, None),
    )
    .await;
    assert_eq!(keys(&b), ["ch_000001"]);
    let (status, _, b) = post(
        &emu,
        "/crm/v3/objects/deals/batch/read",
        json!({"idProperty": "stripe_charge_id", "inputs": [{"id": "ch_new"}], "properties": ["stripe_charge_id"]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(keys(&b), ["ch_new"]);
    assert!(
        written.elapsed() < Duration::from_millis(400),
        "test too slow to observe the lag"
    );

    tokio::time::sleep(Duration::from_millis(450)).await;
    let (_, _, b) = post(&emu, "/crm/v3/objects/deals/search", by_key("ch_new")).await;
    assert_eq!(b["total"], 1, "{b}");
    let (_, _, b) = post(
        &emu,
        "/crm/v3/objects/deals/search",
        range_search(json!(T0), json!(T0 + 10), 10, None),
    )
    .await;
    assert_eq!(keys(&b), ["ch_000001", "ch_new"]);

    // An update hides the object again for the lag.
    post(
        &emu,
        "/crm/v3/objects/deals/batch/upsert",
        json!({"inputs": [upsert_input("ch_new", json!({"amount": "5"}))]}),
    )
    .await;
    let (_, _, b) = post(&emu, "/crm/v3/objects/deals/search", by_key("ch_new")).await;
    assert_eq!(b["total"], 0, "{b}");
    emu.shutdown().await;
}

#[tokio::test]
async fn authentication() {
    let emu = start(EmulatorConfig::default()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/crm/v3/properties/deals/stripe_charge_id", emu.base_url);
    for req in [
        client.get(&url),
        client.get(&url).bearer_auth("pat-na1-wrong"),
        client.get(&url).basic_auth(&emu.token, None::<&str>),
    ] {
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401);
        let cid = res.headers()["x-hubspot-correlation-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(res.headers().get("x-hubspot-ratelimit-max").is_none());
        let b: Value = res.json().await.unwrap();
        assert_error(&b, "INVALID_AUTHENTICATION");
        assert!(b["message"]
            .as_str()
            .unwrap()
            .starts_with("Authentication credentials not found"));
        assert_eq!(b["correlationId"], cid);
    }
    let (status, _, _) = get(&emu, "/crm/v3/properties/deals/stripe_charge_id").await;
    assert_eq!(status, 200);
    assert_eq!(emu.stats().by_status[&401], 3);
    emu.shutdown().await;
}

#[tokio::test]
async fn correlation_ids_are_unique() {
    let emu = start(unlimited()).await;
    let mut ids = HashSet::new();
    for _ in 0..20 {
        let (_, h, _) = get(&emu, "/crm/v3/properties/deals/stripe_charge_id").await;
        let cid = h["x-hubspot-correlation-id"].to_str().unwrap().to_owned();
        assert!(is_uuid(&cid), "{cid}");
        assert!(ids.insert(cid));
    }
    let (status, _, b) = get(&emu, "/crm/v3/nothing/here").await;
    assert_eq!(status, 404);
    assert_eq!(b["status"], "error");
    let (status, _, _) = send(
        &emu,
        reqwest::Method::GET,
        "/crm/v3/objects/deals/search",
        None,
    )
    .await;
    assert_eq!(status, 405);
    emu.shutdown().await;
}

#[tokio::test]
async fn ten_second_limit() {
    let emu = start(EmulatorConfig {
        limit_per_10s: Some(5),
        ..EmulatorConfig::default()
    })
    .await;
    let path = "/crm/v3/properties/deals/stripe_charge_id";
    for i in 0..5u32 {
        let (status, h, _) = get(&emu, path).await;
        assert_eq!(status, 200);
        assert_eq!(h["x-hubspot-ratelimit-max"], "5");
        assert_eq!(
            h["x-hubspot-ratelimit-remaining"],
            (4 - i).to_string().as_str()
        );
        assert_eq!(h["x-hubspot-ratelimit-interval-milliseconds"], "10000");
        assert!(h.get("x-hubspot-ratelimit-daily").is_none());
    }
    let (status, h, b) = get(&emu, path).await;
    assert_eq!(status, 429);
    assert_eq!(h["x-hubspot-ratelimit-max"], "5");
    assert_eq!(h["x-hubspot-ratelimit-remaining"], "0");
    assert_eq!(h["x-hubspot-ratelimit-interval-milliseconds"], "10000");
    assert_eq!(b["status"], "error");
    assert_eq!(b["errorType"], "RATE_LIMIT");
    assert_eq!(b["policyName"], "TEN_SECONDLY_ROLLING");
    assert_eq!(
        b["message"],
        "You have reached your ten_secondly_rolling limit."
    );
    assert!(b["groupName"].is_string());
    assert_eq!(
        b["correlationId"],
        h["x-hubspot-correlation-id"].to_str().unwrap()
    );
    // Searches are refused by the 10-second limit too.
    let (status, h, b) = post(&emu, "/crm/v3/objects/deals/search", json!({})).await;
    assert_eq!(status, 429);
    assert_eq!(b["policyName"], "TEN_SECONDLY_ROLLING");
    assert!(h.get("x-hubspot-ratelimit-max").is_none());
    let stats = emu.stats();
    assert_eq!(stats.throttled, 2);
    assert_eq!(stats.by_status[&429], 2);
    assert_eq!(stats.search_requests, 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn searches_count_toward_the_ten_second_limit() {
    let emu = start(EmulatorConfig {
        limit_per_10s: Some(3),
        search_per_sec: None,
        ..EmulatorConfig::default()
    })
    .await;
    for _ in 0..3 {
        let (status, _, _) = post(&emu, "/crm/v3/objects/deals/search", json!({})).await;
        assert_eq!(status, 200);
    }
    let (status, h, b) = get(&emu, "/crm/v3/properties/deals/stripe_charge_id").await;
    assert_eq!(status, 429);
    assert_eq!(b["policyName"], "TEN_SECONDLY_ROLLING");
    assert_eq!(h["x-hubspot-ratelimit-remaining"], "0");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn search_secondly_limit() {
    let emu = start(EmulatorConfig::default()).await;
    let url = "/crm/v3/objects/deals/search";
    let mut statuses = Vec::new();
    let mut throttled = None;
    for _ in 0..10 {
        let (status, h, b) = post(&emu, url, json!({"limit": 1})).await;
        statuses.push(status);
        if status == 429 && throttled.is_none() {
            throttled = Some((h, b));
        }
    }
    assert_eq!(&statuses[..5], &[200; 5], "{statuses:?}");
    // The clock is paused: all ten fall into one second.
    assert_eq!(&statuses[5..], &[429; 5], "{statuses:?}");
    let (h, b) = throttled.expect("a search above 5 per second is throttled");
    assert_eq!(b["policyName"], "SECONDLY");
    assert_eq!(b["errorType"], "RATE_LIMIT");
    assert_eq!(b["message"], "You have reached your secondly limit.");
    assert!(h.get("x-hubspot-ratelimit-max").is_none());
    // Other endpoints are not affected by the search limit.
    let (status, _, _) = get(&emu, "/crm/v3/properties/deals/stripe_charge_id").await;
    assert_eq!(status, 200);
    // After a second, searches pass again.
    tokio::time::sleep(Duration::from_millis(1050)).await;
    let (status, _, _) = post(&emu, url, json!({})).await;
    assert_eq!(status, 200);
    let stats = emu.stats();
    assert_eq!(stats.search_requests, 11);
    assert!(stats.throttled >= 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn daily_limit() {
    let emu = start(EmulatorConfig {
        daily_limit: Some(2),
        ..EmulatorConfig::default()
    })
    .await;
    let path = "/crm/v3/properties/deals/stripe_charge_id";
    let (_, h, _) = get(&emu, path).await;
    assert_eq!(h["x-hubspot-ratelimit-daily"], "2");
    assert_eq!(h["x-hubspot-ratelimit-daily-remaining"], "1");
    let (status, _, _) = post(&emu, "/crm/v3/objects/deals/search", json!({})).await;
    assert_eq!(status, 200, "searches use the daily budget too");
    let (status, h, b) = get(&emu, path).await;
    assert_eq!(status, 429);
    assert_eq!(b["policyName"], "DAILY");
    assert_eq!(b["errorType"], "RATE_LIMIT");
    assert_eq!(b["message"], "You have reached your daily limit.");
    assert_eq!(h["x-hubspot-ratelimit-daily-remaining"], "0");
    emu.shutdown().await;
}

fn fault(kind: FaultKind, after: u64, times: u64) -> Vec<Fault> {
    vec![Fault { kind, after, times }]
}

#[tokio::test]
async fn faults_error_statuses() {
    let emu = start(EmulatorConfig::default()).await;
    let path = "/crm/v3/properties/deals/stripe_charge_id";

    emu.set_faults(fault(FaultKind::RateLimited, 0, 1));
    let (status, h, b) = get(&emu, path).await;
    assert_eq!(status, 429);
    assert_eq!(b["policyName"], "TEN_SECONDLY_ROLLING");
    assert_eq!(b["errorType"], "RATE_LIMIT");
    assert_eq!(h["x-hubspot-ratelimit-remaining"], "0");

    emu.set_faults(fault(FaultKind::ServerError, 0, 1));
    let (status, h, b) = get(&emu, path).await;
    assert_eq!(status, 500);
    assert_eq!(b["status"], "error");
    assert!(h.get("x-hubspot-correlation-id").is_some());

    emu.set_faults(fault(FaultKind::Unavailable, 0, 1));
    let (status, _, b) = get(&emu, path).await;
    assert_eq!(status, 503);
    assert_eq!(b["status"], "error");

    // Faults apply before auth.
    emu.set_faults(fault(FaultKind::ServerError, 0, 1));
    let res = reqwest::Client::new()
        .get(format!("{}{path}", emu.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 500);

    // after/times, and the first matching fault wins.
    emu.set_faults(vec![
        Fault {
            kind: FaultKind::RateLimited,
            after: 1,
            times: 1,
        },
        Fault {
            kind: FaultKind::Unavailable,
            after: 0,
            times: 3,
        },
    ]);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get(&emu, path).await.0);
    }
    assert_eq!(statuses, [503, 429, 503, 200, 200]);
    emu.set_faults(vec![]);
    assert_eq!(get(&emu, path).await.0, 200);

    let stats = emu.stats();
    assert_eq!(stats.throttled, 2);
    assert_eq!(stats.by_status[&429], 2);
    assert_eq!(stats.by_status[&500], 2);
    assert_eq!(stats.by_status[&503], 3);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn faults_bodies_and_timing() {
    let emu = start(unlimited()).await;
    emu.insert("deals", deal(1, T0));
    let url = "/crm/v3/objects/deals/search";
    let body = json!({"properties": ["stripe_charge_id"]});
    let (_, _, full) = send(&emu, reqwest::Method::POST, url, Some(&body)).await;

    emu.set_faults(fault(FaultKind::TruncatedJson, 0, 1));
    let res = reqwest::Client::new()
        .post(format!("{}{url}", emu.base_url))
        .bearer_auth(&emu.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let declared: usize = res.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let got = res.bytes().await.unwrap();
    assert_eq!(declared, got.len());
    assert_eq!(got.len(), full.len() / 2);
    assert!(serde_json::from_slice::<Value>(&got).is_err());

    // A truncated upsert answer: the write happened anyway.
    emu.set_faults(fault(FaultKind::TruncatedJson, 0, 1));
    let (status, _, b) = send(
        &emu,
        reqwest::Method::POST,
        "/crm/v3/objects/deals/batch/upsert",
        Some(&json!({"inputs": [upsert_input("ch_t", json!({}))]})),
    )
    .await;
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&b).is_err());
    assert_eq!(emu.count("deals"), 2);

    emu.set_faults(fault(FaultKind::MalformedJson, 0, 1));
    let (status, h, b) = send(&emu, reqwest::Method::POST, url, Some(&body)).await;
    assert_eq!(status, 200);
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    assert!(serde_json::from_str::<Value>(&b).is_err(), "{b}");

    emu.set_faults(fault(FaultKind::Slow(Duration::from_millis(300)), 0, 1));
    let t = Instant::now();
    let (status, _, b) = send(&emu, reqwest::Method::POST, url, Some(&body)).await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&b).unwrap()["total"], 2);
    let t = Instant::now();
    assert_eq!(
        send(&emu, reqwest::Method::POST, url, Some(&body)).await.0,
        200
    );
    assert!(t.elapsed() < Duration::from_millis(300));
    emu.shutdown().await;
}

#[tokio::test]
async fn fault_drop_connection() {
    let emu = start(unlimited()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/crm/v3/objects/deals/batch/upsert", emu.base_url);
    let body = json!({"inputs": [upsert_input("ch_d", json!({}))]});
    // A pooled keep-alive connection first.
    let warm = client
        .get(format!(
            "{}/crm/v3/properties/deals/stripe_charge_id",
            emu.base_url
        ))
        .bearer_auth(&emu.token)
        .send()
        .await
        .unwrap();
    assert_eq!(warm.status(), 200);
    emu.set_faults(fault(FaultKind::DropConnection, 0, 2));
    for _ in 0..2 {
        let err = client
            .post(&url)
            .bearer_auth(&emu.token)
            .json(&body)
            .send()
            .await
            .expect_err("a dropped connection must not produce a response");
        assert!(err.status().is_none());
        assert!(err.is_request() || err.is_connect(), "{err:?}");
    }
    assert_eq!(emu.count("deals"), 0, "a dropped request is not processed");
    let res = client
        .post(&url)
        .bearer_auth(&emu.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(emu.count("deals"), 1);

    // With a raw socket: the server closes without sending a single byte.
    emu.set_faults(fault(FaultKind::DropConnection, 0, 1));
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = emu.base_url.trim_start_matches("http://").to_owned();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    sock.write_all(
        format!(
            "GET /crm/v3/properties/deals/stripe_charge_id HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n",
            emu.token
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut buf))
        .await
        .expect("the server must close the connection");
    if read.is_ok() {
        assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
    }

    let stats = emu.stats();
    assert_eq!(stats.requests, 5);
    assert_eq!(stats.by_status.values().sum::<u64>(), 2);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn latency_is_concurrent() {
    let emu = start(EmulatorConfig {
        latency: Duration::from_millis(200),
        ..unlimited()
    })
    .await;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let url = format!("{}/crm/v3/properties/deals/stripe_charge_id", emu.base_url);
        let token = emu.token.clone();
        tasks.push(tokio::spawn(async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let elapsed = t.elapsed();
    assert!(elapsed >= Duration::from_millis(200));
    assert!(elapsed < Duration::from_millis(1200), "{elapsed:?}");
    assert!(emu.stats().max_in_flight >= 2);
    emu.shutdown().await;
}

/// 60,000 deals read by date windows of at most 9,000 results, in pages of
/// 200: every deal exactly once, and paging a query does not rescan (the
/// emulator counts its full scans).
#[tokio::test(start_paused = true)]
async fn sixty_thousand_deals_by_date_windows() {
    const N: i64 = 60_000;
    const WINDOW: i64 = 9_000;
    let emu = start(unlimited()).await;
    emu.insert_many("deals", (0..N).map(|i| deal(i, T0 + i * 1000)));

    let client = reqwest::Client::new();
    let url = format!("{}/crm/v3/objects/deals/search", emu.base_url);
    let mut seen = HashSet::new();
    let mut previous = i64::MIN;
    let mut pages = 0;
    let mut lo = T0;
    while lo < T0 + N * 1000 {
        let hi = lo + WINDOW * 1000;
        let mut after: Option<String> = None;
        loop {
            let b: Value = client
                .post(&url)
                .bearer_auth(&emu.token)
                .json(&range_search(json!(lo), json!(hi), 200, after.as_deref()))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            pages += 1;
            for r in b["results"].as_array().unwrap() {
                let created = r["properties"]["stripe_created"].as_str().unwrap();
                let ms = created.parse::<jiff::Timestamp>().unwrap().as_millisecond();
                assert!(ms >= lo && ms < hi && ms > previous);
                previous = ms;
                assert!(seen.insert(
                    r["properties"]["stripe_charge_id"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                ));
            }
            match b["paging"]["next"]["after"].as_str() {
                Some(a) => after = Some(a.to_owned()),
                None => break,
            }
        }
        lo = hi;
    }
    assert_eq!(seen.len(), N as usize);
    assert_eq!(pages, 300);
    // Each of the 7 windows is evaluated once; its other pages come from the
    // query cache (a rescan per page would make this 300).
    let stats = emu.stats();
    assert_eq!(stats.search_requests, 300, "{stats:?}");
    assert_eq!(stats.search_scans, 7, "{stats:?}");
    emu.shutdown().await;
}

/// `GET /crm/v3/objects/{objectType}` (what `recon check` probes with):
/// pages by ID with `limit` and `after`, `paging.next` only when more
/// follow, the rate-limit headers on the answer, limits outside 1..=100
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_objects_pages_by_id() {
    let emu = start(EmulatorConfig::default()).await;
    for i in 0..3 {
        emu.insert("deals", deal(i, 1_700_000_000_000 + i));
    }
    let (status, headers, first) = get(
        &emu,
        "/crm/v3/objects/deals?limit=2&properties=stripe_charge_id",
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert!(headers.contains_key("x-hubspot-ratelimit-remaining"));
    let results = first["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{first}");
    assert_eq!(results[0]["properties"]["stripe_charge_id"], "ch_000000");
    let after = first["paging"]["next"]["after"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, _, rest) = get(
        &emu,
        &format!("/crm/v3/objects/deals?limit=2&after={after}"),
    )
    .await;
    let results = rest["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{rest}");
    assert!(rest.get("paging").is_none(), "{rest}");
    let (status, _, empty) = get(&emu, "/crm/v3/objects/contacts?limit=1").await;
    assert_eq!(
        (status, empty["results"].as_array().unwrap().len()),
        (200, 0)
    );
    for bad in ["0", "101", "x"] {
        let (status, _, b) = get(&emu, &format!("/crm/v3/objects/deals?limit={bad}")).await;
        assert_eq!(status, 400, "{bad}: {b}");
        assert_error(&b, "VALIDATION_ERROR");
    }
}
