//! The Shopify GraphQL Admin API emulator, exercised over real HTTP with reqwest.
#![cfg(feature = "emulator")]

use std::collections::HashSet;
use std::time::Duration;

// The emulator's clock: on tokio's paused clock it is virtual time.
use tokio::time::Instant;

use jiff::Timestamp;
use recon_shopify::emulator::{BulkOutcome, Emulator, EmulatorConfig, Fault, FaultKind, OrderSpec};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

/// The connector's page query, verbatim.
const ORDERS: &str = r#"
query Orders($first: Int!, $after: String, $query: String) {
  orders(first: $first, after: $after, query: $query, sortKey: CREATED_AT) {
    nodes { id legacyResourceId name createdAt updatedAt email displayFinancialStatus totalPriceSet { shopMoney { amount currencyCode } } }
    pageInfo { hasNextPage endCursor }
  }
}"#;

/// The connector's bulk mutation, verbatim.
const BULK: &str = r#"mutation Bulk($q: String!) { bulkOperationRunQuery(query: $q) { bulkOperation { id status } userErrors { field message } } }"#;

/// The connector's poll, verbatim.
const POLL: &str =
    "query { currentBulkOperation { id status errorCode objectCount url partialDataUrl } }";

const NODE_FIELDS: &str = "id legacyResourceId name createdAt updatedAt email displayFinancialStatus totalPriceSet { shopMoney { amount currencyCode } }";

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn bulk_query(filter: &str) -> String {
    format!(
        "{{ orders(query: {}) {{ edges {{ node {{ {NODE_FIELDS} }} }} }} }}",
        serde_json::Value::from(filter)
    )
}

async fn start() -> Emulator {
    Emulator::start(EmulatorConfig::default()).await.unwrap()
}

async fn start_with(config: EmulatorConfig) -> Emulator {
    Emulator::start(config).await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// POST a GraphQL request with the emulator's token: (status, headers, raw body).
async fn post_raw(emu: &Emulator, body: &Value) -> (u16, HeaderMap, String) {
    let res = client()
        .post(format!("{}/admin/api/2025-01/graphql.json", emu.base_url))
        .header("X-Shopify-Access-Token", &emu.token)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.text().await.unwrap())
}

async fn gql(emu: &Emulator, query: &str, variables: Value) -> Value {
    let (status, _, body) = post_raw(emu, &json!({"query": query, "variables": variables})).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn orders_page(
    emu: &Emulator,
    first: u64,
    after: Option<&str>,
    query: Option<&str>,
) -> Value {
    gql(
        emu,
        ORDERS,
        json!({"first": first, "after": after, "query": query}),
    )
    .await
}

/// Waits as long as a `THROTTLED` answer says is needed:
/// (requested − available) / restoreRate. Returns whether it was throttled.
async fn wait_if_throttled(body: &Value) -> bool {
    if body["errors"][0]["extensions"]["code"] != "THROTTLED" {
        return false;
    }
    let c = cost(body);
    let missing = c["requestedQueryCost"].as_f64().unwrap()
        - c["throttleStatus"]["currentlyAvailable"].as_f64().unwrap();
    let rate = c["throttleStatus"]["restoreRate"].as_f64().unwrap();
    tokio::time::sleep(Duration::from_secs_f64(missing.max(0.0) / rate + 0.01)).await;
    true
}

/// Every node of a paged query, following `endCursor` (and waiting out
/// throttling, as a client must): (nodes, times throttled).
async fn page_all_counting(emu: &Emulator, query: &str, filter: Option<&str>) -> (Vec<Value>, u32) {
    let mut after: Option<String> = None;
    let mut out = Vec::new();
    let mut throttled = 0;
    loop {
        let body = gql(
            emu,
            query,
            json!({"first": 250, "after": after, "query": filter}),
        )
        .await;
        if wait_if_throttled(&body).await {
            throttled += 1;
            continue;
        }
        assert!(body.get("errors").is_none(), "{body}");
        let conn = &body["data"]["orders"];
        out.extend(conn["nodes"].as_array().unwrap().iter().cloned());
        if !conn["pageInfo"]["hasNextPage"].as_bool().unwrap() {
            return (out, throttled);
        }
        after = Some(conn["pageInfo"]["endCursor"].as_str().unwrap().to_owned());
    }
}

async fn page_all(emu: &Emulator, query: &str, filter: Option<&str>) -> Vec<Value> {
    page_all_counting(emu, query, filter).await.0
}

/// A faster bucket refill, so tests that page through everything don't wait.
fn fast_restore() -> EmulatorConfig {
    EmulatorConfig {
        restore_rate: 1000,
        ..EmulatorConfig::default()
    }
}

fn sorted_by_id(mut nodes: Vec<Value>) -> Vec<Value> {
    nodes.sort_by_key(|n| {
        n["legacyResourceId"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    });
    nodes
}

fn legacy_ids(nodes: &[Value]) -> Vec<u64> {
    nodes
        .iter()
        .map(|n| n["legacyResourceId"].as_str().unwrap().parse().unwrap())
        .collect()
}

fn cost(body: &Value) -> &Value {
    &body["extensions"]["cost"]
}

fn available(body: &Value) -> u64 {
    cost(body)["throttleStatus"]["currentlyAvailable"]
        .as_u64()
        .unwrap()
}

/// 600 orders: created two per minute (so created_at ties are broken by id),
/// ids a permutation of 1..=600 unrelated to time.
fn six_hundred() -> Vec<OrderSpec> {
    let t0 = ts("2026-11-28T00:00:00Z").as_second();
    (0..600u64)
        .map(|i| {
            let id = (i * 37) % 600 + 1;
            let created = Timestamp::from_second(t0 + (i / 2) as i64 * 60).unwrap();
            let mut o = OrderSpec::example(id, created);
            o.updated_at = Timestamp::from_second(t0 + 100_000 - i as i64).unwrap();
            o
        })
        .collect()
}

fn expected_created_order(orders: &[OrderSpec]) -> Vec<u64> {
    let mut v: Vec<(Timestamp, u64)> = orders.iter().map(|o| (o.created_at, o.legacy_id)).collect();
    v.sort();
    v.into_iter().map(|(_, id)| id).collect()
}

#[tokio::test(start_paused = true)]
async fn pages_600_orders_with_cursors_in_created_order() {
    let emu = start_with(fast_restore()).await;
    let orders = six_hundred();
    emu.insert_orders(orders.clone());
    assert_eq!(emu.order_count(), 600);

    let mut after: Option<String> = None;
    let mut seen = Vec::new();
    let mut shapes = Vec::new();
    let mut throttled = 0;
    loop {
        let body = orders_page(&emu, 250, after.as_deref(), None).await;
        // Two full pages leave 2000 − 2 × 752 = 496 (+ restored) points: the
        // third page must wait for the bucket, as on Shopify.
        if wait_if_throttled(&body).await {
            throttled += 1;
            continue;
        }
        assert!(body.get("errors").is_none(), "{body}");
        let conn = &body["data"]["orders"];
        let nodes = conn["nodes"].as_array().unwrap();
        let has_next = conn["pageInfo"]["hasNextPage"].as_bool().unwrap();
        shapes.push((
            nodes.len(),
            has_next,
            cost(&body)["requestedQueryCost"].as_u64().unwrap(),
            cost(&body)["actualQueryCost"].as_u64().unwrap(),
        ));
        seen.extend(legacy_ids(nodes));
        // Only the selected fields come back.
        assert_eq!(
            conn.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["nodes", "pageInfo"]
        );
        if !has_next {
            break;
        }
        after = Some(conn["pageInfo"]["endCursor"].as_str().unwrap().to_owned());
    }
    // Requested: 2 + 250 × (Order 1 + totalPriceSet 1 + shopMoney 1) = 752;
    // actual: 2 + returned × 3.
    assert_eq!(
        shapes,
        [
            (250, true, 752, 752),
            (250, true, 752, 752),
            (100, false, 752, 302)
        ]
    );
    assert_eq!(seen, expected_created_order(&orders));
    assert!(throttled <= 1, "{throttled}");
    assert_eq!(emu.stats().throttled, throttled);

    // The cursor is opaque but decodes to Shopify's shape.
    let body = orders_page(&emu, 1, None, None).await;
    let cursor = body["data"]["orders"]["pageInfo"]["endCursor"]
        .as_str()
        .unwrap();
    assert!(!cursor.contains('{'), "{cursor}");
    // A garbage cursor is an error, not a silent first page.
    let body = orders_page(&emu, 10, Some("not a cursor"), None).await;
    assert_eq!(body["errors"][0]["message"], "Invalid cursor.", "{body}");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn node_fields_are_serialized_like_shopify() {
    let emu = start().await;
    let amounts = ["29.99", "500.0", "0.100"];
    for (i, amount) in amounts.iter().enumerate() {
        let i = i as u64;
        emu.insert_order(OrderSpec {
            legacy_id: 5_000_000_000 + i,
            name: format!("#{}", 1001 + i),
            created_at: ts("2026-11-28T05:00:00.123456789Z")
                + jiff::SignedDuration::from_secs(i as i64),
            updated_at: ts("2026-11-29T06:07:08Z"),
            amount: (*amount).to_owned(),
            currency: "EUR".to_owned(),
            financial_status: if i == 2 { "PARTIALLY_REFUNDED" } else { "PAID" }.to_owned(),
            email: (i != 1).then(|| format!("buyer{i}@example.com")),
        });
    }
    let body = orders_page(&emu, 10, None, None).await;
    let nodes = body["data"]["orders"]["nodes"].as_array().unwrap();
    assert_eq!(
        nodes[0],
        json!({
            "id": "gid://shopify/Order/5000000000",
            "legacyResourceId": "5000000000",
            "name": "#1001",
            "createdAt": "2026-11-28T05:00:00Z",
            "updatedAt": "2026-11-29T06:07:08Z",
            "email": "buyer0@example.com",
            "displayFinancialStatus": "PAID",
            "totalPriceSet": {"shopMoney": {"amount": "29.99", "currencyCode": "EUR"}},
        })
    );
    let got: Vec<&str> = nodes
        .iter()
        .map(|n| n["totalPriceSet"]["shopMoney"]["amount"].as_str().unwrap())
        .collect();
    assert_eq!(got, amounts);
    assert_eq!(nodes[1]["email"], Value::Null);
    assert_eq!(nodes[2]["displayFinancialStatus"], "PARTIALLY_REFUNDED");
    assert_eq!(body["data"]["orders"]["pageInfo"]["hasNextPage"], false);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn search_filter_boundaries_on_created_at_and_updated_at() {
    let emu = start().await;
    let at = |id: u64, created: &str, updated: &str| {
        let mut o = OrderSpec::example(id, ts(created));
        o.updated_at = ts(updated);
        o
    };
    emu.insert_orders([
        at(1, "2026-11-28T04:59:59Z", "2026-12-01T00:00:00Z"),
        at(2, "2026-11-28T05:00:00Z", "2026-12-01T09:59:59Z"),
        at(3, "2026-11-28T17:30:00Z", "2026-12-01T10:00:00Z"),
        at(4, "2026-11-29T04:59:59Z", "2026-12-01T10:00:01Z"),
        at(5, "2026-11-29T05:00:00Z", "2026-12-02T10:00:00Z"),
        at(6, "2026-11-29T05:00:01Z", "2026-12-02T10:00:01Z"),
    ]);
    let ids = |body: &Value| legacy_ids(body["data"]["orders"]["nodes"].as_array().unwrap());

    // The connector's window: >= included, < excluded.
    let q = "created_at:>='2026-11-28T05:00:00Z' AND created_at:<'2026-11-29T05:00:00Z'";
    assert_eq!(ids(&orders_page(&emu, 250, None, Some(q)).await), [2, 3, 4]);
    // Unquoted and double-quoted values, implicit AND.
    let q = r#"created_at:>2026-11-28T05:00:00Z created_at:<="2026-11-29T05:00:00Z""#;
    assert_eq!(ids(&orders_page(&emu, 250, None, Some(q)).await), [3, 4, 5]);
    // Offsets are honoured: 00:00-05:00 is 05:00Z.
    let q = "created_at:>='2026-11-28T00:00:00-05:00' AND created_at:<'2026-11-28T18:00:00Z'";
    assert_eq!(ids(&orders_page(&emu, 250, None, Some(q)).await), [2, 3]);
    // A bare date equality is that whole (UTC) day.
    let q = "created_at:'2026-11-29'";
    assert_eq!(ids(&orders_page(&emu, 250, None, Some(q)).await), [4, 5, 6]);
    // An empty window.
    let q = "created_at:>='2026-11-29T05:00:00Z' AND created_at:<'2026-11-29T05:00:00Z'";
    let body = orders_page(&emu, 250, None, Some(q)).await;
    assert_eq!(ids(&body), Vec::<u64>::new());
    assert_eq!(body["data"]["orders"]["pageInfo"]["endCursor"], Value::Null);
    assert_eq!(cost(&body)["actualQueryCost"], 2);

    // updated_at, sorted by UPDATED_AT.
    let by_updated = ORDERS.replace("sortKey: CREATED_AT", "sortKey: UPDATED_AT");
    let q = "updated_at:>='2026-12-01T10:00:00Z' AND updated_at:<'2026-12-02T10:00:00Z'";
    let body = gql(&emu, &by_updated, json!({"first": 250, "query": q})).await;
    assert_eq!(ids(&body), [3, 4]);
    let q = "updated_at:>'2026-12-01T09:59:59Z' AND updated_at:<='2026-12-02T10:00:00Z'";
    let body = gql(&emu, &by_updated, json!({"first": 250, "query": q})).await;
    assert_eq!(ids(&body), [3, 4, 5]);
    // Sorted by updated_at even when created_at disagrees.
    let mut reordered = OrderSpec::example(7, ts("2026-11-20T00:00:00Z"));
    reordered.updated_at = ts("2026-12-01T10:00:00.5Z");
    emu.insert_order(reordered);
    let body = gql(&emu, &by_updated, json!({"first": 250, "query": q})).await;
    assert_eq!(ids(&body), [3, 7, 4, 5]);
    // Paging through a filtered, updated_at-sorted result with cursors.
    let mut after: Option<String> = None;
    let mut seen = Vec::new();
    loop {
        let body = gql(
            &emu,
            &by_updated,
            json!({"first": 1, "after": after, "query": q}),
        )
        .await;
        seen.extend(ids(&body));
        let info = &body["data"]["orders"]["pageInfo"];
        if !info["hasNextPage"].as_bool().unwrap() {
            break;
        }
        after = Some(info["endCursor"].as_str().unwrap().to_owned());
    }
    assert_eq!(seen, [3, 7, 4, 5]);

    // An unknown search field is ignored with a warning, as on Shopify.
    let body = orders_page(
        &emu,
        250,
        None,
        Some("bogus_field:1 created_at:<'2026-11-28T05:00:00Z'"),
    )
    .await;
    assert_eq!(ids(&body), [7, 1]);
    assert_eq!(
        body["extensions"]["search"][0]["warnings"][0],
        json!({"field": "bogus_field", "message": "Invalid search field for this query."})
    );
    // OR of clauses (AND binds tighter), as the connector's key lookups send.
    let body = orders_page(&emu, 250, None, Some("id:1 OR id:5 OR id:6")).await;
    assert_eq!(ids(&body), [1, 5, 6]);
    let q = "created_at:>='2026-11-28T05:00:00Z' AND created_at:<'2026-11-29T05:00:00Z' OR id:6";
    assert_eq!(
        ids(&orders_page(&emu, 250, None, Some(q)).await),
        [2, 3, 4, 6]
    );
    let body = orders_page(
        &emu,
        250,
        None,
        Some("name:'#3' OR name:4 OR id:gid://shopify/Order/2"),
    )
    .await;
    assert_eq!(ids(&body), [2, 3, 4]);
    // Syntax the emulator does not implement is an error, not a silent no-op.
    for q in [
        "NOT id:1",
        "-id:1",
        "(id:1 OR id:2)",
        "financial_status:paid",
        "some free text",
        "id:1 OR",
    ] {
        let body = orders_page(&emu, 250, None, Some(q)).await;
        assert!(body["errors"][0]["message"].is_string(), "{q}: {body}");
        assert_eq!(body["errors"][0]["path"], json!(["orders"]), "{q}");
        assert!(body.get("data").is_none(), "{q}");
    }
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn literal_arguments_aliases_comments_and_escapes() {
    let emu = start().await;
    emu.insert_orders((1..=5).map(|i| {
        OrderSpec::example(
            i,
            Timestamp::from_second(1_800_000_000 + i as i64 * 3600).unwrap(),
        )
    }));
    // Literal Int and String (with escaped quotes), an alias, comments, commas,
    // edges/cursor, sortKey ID and reverse.
    let query = r#"
        # a comment
        {
          recent: orders(first: 2, reverse: true, sortKey: ID,
                         query: "id:>=2 AND created_at:>=\"2026-01-01T00:00:00Z\"") {
            edges { cursor node { legacyResourceId __typename } }
            pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
          }
        }"#;
    let body = gql(&emu, query, json!({})).await;
    assert!(body.get("errors").is_none(), "{body}");
    let conn = &body["data"]["recent"];
    let edges = conn["edges"].as_array().unwrap();
    let got: Vec<&str> = edges
        .iter()
        .map(|e| e["node"]["legacyResourceId"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["5", "4"]);
    assert_eq!(edges[0]["node"]["__typename"], "Order");
    assert_eq!(conn["pageInfo"]["hasNextPage"], true);
    assert_eq!(conn["pageInfo"]["hasPreviousPage"], false);
    assert_eq!(conn["pageInfo"]["endCursor"], edges[1]["cursor"]);
    // Requested 2 + 2 × 1; actual the same.
    assert_eq!(cost(&body)["requestedQueryCost"], 4);
    let after = edges[1]["cursor"].as_str().unwrap();
    let next = query.replace("first: 2,", &format!("first: 5, after: \"{after}\","));
    let body = gql(&emu, &next, json!({})).await;
    let got: Vec<&str> = body["data"]["recent"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["legacyResourceId"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["3", "2"]);
    assert_eq!(body["data"]["recent"]["pageInfo"]["hasPreviousPage"], true);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn unknown_field_is_a_graphql_error() {
    let emu = start().await;
    let query =
        "query Orders($first: Int!) {\n  orders(first: $first) {\n    nodes { id foo }\n  }\n}";
    let (status, headers, raw) =
        post_raw(&emu, &json!({"query": query, "variables": {"first": 5}})).await;
    assert_eq!(status, 200);
    assert!(headers.contains_key("x-request-id"));
    let body: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        body["errors"],
        json!([{
            "message": "Field 'foo' doesn't exist on type 'Order'",
            "locations": [{"line": 3, "column": 16}],
            "path": ["query Orders", "orders", "nodes", "foo"],
            "extensions": {"code": "undefinedField", "typeName": "Order", "fieldName": "foo"},
        }])
    );
    assert!(body.get("data").is_none());
    // Invalid requests cost nothing.
    assert_eq!(cost(&body)["requestedQueryCost"], 0);
    assert_eq!(available(&body), 2000);

    // Other validation errors.
    let body = gql(
        &emu,
        "{ orders(first: 1, bogus: 2) { nodes { id } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        body["errors"][0]["message"],
        "Field 'orders' doesn't accept argument 'bogus'"
    );
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        "argumentNotAccepted"
    );
    let body = gql(
        &emu,
        "{ orders(first: 1) { nodes { totalPriceSet } } }",
        json!({}),
    )
    .await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "selectionMismatch");
    let body = gql(&emu, "{ shop { name } }", json!({})).await;
    assert_eq!(
        body["errors"][0]["message"],
        "Field 'shop' doesn't exist on type 'QueryRoot'"
    );
    let body = gql(&emu, "{ orders(first: 1) { nodes { id } }", json!({})).await;
    assert_eq!(body["errors"][0]["message"], "Unexpected end of document");
    let body = gql(&emu, "{ orders(first: 1) { nodes { id } } } }", json!({})).await;
    assert_eq!(
        body["errors"][0]["message"],
        "Parse error on \"}\" (RCURLY) at [1, 39]"
    );
    let body = gql(&emu, ORDERS, json!({})).await;
    assert_eq!(
        body["errors"][0]["message"],
        "Variable $first of type Int! was provided invalid value"
    );
    let body = gql(&emu, ORDERS, json!({"first": "ten"})).await;
    assert_eq!(
        body["errors"][0]["extensions"]["problems"][0]["explanation"],
        "Could not coerce value \"ten\" to Int"
    );
    let body = gql(&emu, "{ orders(first: $n) { nodes { id } } }", json!({})).await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        "variableNotDefined"
    );
    let body = gql(
        &emu,
        "{ orders(sortKey: BOGUS, first: 1) { nodes { id } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        "argumentLiteralsIncompatible"
    );
    let body = gql(&emu, "{ orders { nodes { id } } }", json!({})).await;
    assert_eq!(
        body["errors"][0]["message"],
        "you must provide one of first or last"
    );
    assert_eq!(emu.stats().queries, 0);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn first_must_be_between_1_and_250() {
    let emu = start().await;
    emu.insert_orders(six_hundred());
    for first in [251, 0, 1000] {
        let body = orders_page(&emu, first, None, None).await;
        let errors = body["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1, "{body}");
        assert!(
            errors[0]["message"]
                .as_str()
                .unwrap()
                .contains("between 1 and 250"),
            "{body}"
        );
        assert_eq!(errors[0]["path"], json!(["orders"]));
        assert!(body.get("data").is_none());
        assert_eq!(cost(&body)["requestedQueryCost"], 0);
    }
    let body = orders_page(&emu, 250, None, None).await;
    assert_eq!(
        body["data"]["orders"]["nodes"].as_array().unwrap().len(),
        250
    );
    let body = orders_page(&emu, 1, None, None).await;
    assert_eq!(body["data"]["orders"]["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(cost(&body)["requestedQueryCost"], 5);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cost_extension_and_bucket_restore() {
    let emu = start().await;
    emu.insert_orders(
        (1..=10).map(|i| {
            OrderSpec::example(i, Timestamp::from_second(1_800_000_000 + i as i64).unwrap())
        }),
    );
    let body = orders_page(&emu, 250, None, None).await;
    // 2000 − 752 requested + (752 − 32) refunded = 1968 (the bucket was full,
    // so the microseconds that passed restore nothing).
    assert_eq!(
        cost(&body),
        &json!({
            "requestedQueryCost": 752,
            "actualQueryCost": 32,
            "throttleStatus": {"maximumAvailable": 2000.0, "currentlyAvailable": 1968, "restoreRate": 100.0},
        })
    );
    // Floats and an integer, as Shopify sends them.
    let raw = serde_json::to_string(&cost(&body)["throttleStatus"]).unwrap();
    assert!(raw.contains("2000.0") && raw.contains("100.0"), "{raw}");

    // Spend more; the bucket then restores at 100 points per second.
    emu.drain_bucket(1000);
    let before = emu.currently_available();
    assert!((968..1000).contains(&before), "{before}");
    let t = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let body = gql(&emu, POLL, json!({})).await;
    let elapsed = t.elapsed().as_secs_f64();
    // No bulk operation yet: null, actual cost 0 (the requested 1 is refunded).
    assert_eq!(body["data"]["currentBulkOperation"], Value::Null);
    assert_eq!(cost(&body)["requestedQueryCost"], 1);
    assert_eq!(cost(&body)["actualQueryCost"], 0);
    // At least 0.5 s × 100/s were restored, and no more than the time that
    // passed allows (the poll's 1 point was refunded: it returned null).
    let now = available(&body) as f64;
    let at_most = before as f64 + 100.0 * elapsed + 1.0;
    assert!(
        now >= before as f64 + 49.0 && now <= at_most,
        "before {before}, now {now}, elapsed {elapsed}"
    );
    // Never above the bucket size.
    tokio::time::sleep(Duration::from_millis(200)).await;
    emu.drain_bucket(0);
    assert!(emu.currently_available() <= 2000);
    emu.shutdown().await;

    // Another bucket size and rate.
    let emu = start_with(EmulatorConfig {
        max_available: 1000,
        restore_rate: 50,
        ..EmulatorConfig::default()
    })
    .await;
    let body = gql(&emu, POLL, json!({})).await;
    assert_eq!(
        cost(&body)["throttleStatus"],
        json!({"maximumAvailable": 1000.0, "currentlyAvailable": 1000, "restoreRate": 50.0})
    );
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn throttled_when_drained_then_recovers() {
    let emu = start().await;
    emu.insert_orders(six_hundred());
    // Another client of the shop leaves 700 points: less than the 752 needed.
    emu.drain_bucket(1300);
    let body = orders_page(&emu, 250, None, None).await;
    assert_eq!(
        body["errors"],
        json!([{"message": "Throttled", "extensions": {"code": "THROTTLED", "documentation": "https://shopify.dev/api/usage/rate-limits"}}])
    );
    assert!(body.get("data").is_none());
    assert_eq!(cost(&body)["requestedQueryCost"], 752);
    assert_eq!(cost(&body)["actualQueryCost"], Value::Null);
    let left = available(&body);
    assert!((700..752).contains(&left), "{left}");
    // A throttled request takes nothing; cheaper queries still go through.
    let body = orders_page(&emu, 10, None, None).await;
    assert!(body.get("errors").is_none(), "{body}");
    let stats = emu.stats();
    assert_eq!((stats.throttled, stats.queries), (1, 1));
    assert_eq!(stats.by_status.get(&200), Some(&2));

    // ~700 − 32 = 668 left, 84 short at 100/s: after ~0.85 s the big page
    // is admitted.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let body = orders_page(&emu, 250, None, None).await;
    assert!(body.get("errors").is_none(), "{body}");
    assert_eq!(
        body["data"]["orders"]["nodes"].as_array().unwrap().len(),
        250
    );

    // Fully drained (saturating at 0).
    emu.drain_bucket(u32::MAX);
    let body = orders_page(&emu, 250, None, None).await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "THROTTLED");
    assert!(available(&body) < 100, "{body}");
    assert_eq!(emu.stats().throttled, 2);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn single_query_cost_limit() {
    let emu = start().await;
    // A node with presentmentMoney too costs 1 + (1 + 1 + 1) = 4:
    // 2 + 250 × 4 = 1002 > 1000.
    let query = "{ orders(first: 250) { nodes { id totalPriceSet { shopMoney { amount } presentmentMoney { amount } } } } }";
    let body = gql(&emu, query, json!({})).await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "MAX_COST_EXCEEDED");
    assert_eq!(body["errors"][0]["extensions"]["cost"], 1002);
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .starts_with("Query cost is 1002, which exceeds the single query max cost limit (1000)."));
    assert_eq!(cost(&body)["requestedQueryCost"], 1002);
    assert_eq!(available(&body), 2000);
    emu.shutdown().await;
}

async fn poll_until_done(emu: &Emulator) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = gql(emu, POLL, json!({})).await;
        let op = body["data"]["currentBulkOperation"].clone();
        if !matches!(op["status"].as_str(), Some("CREATED") | Some("RUNNING")) {
            return op;
        }
        assert!(Instant::now() < deadline, "bulk operation never finished");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn run_bulk(emu: &Emulator, filter: &str) -> Value {
    let body = gql(emu, BULK, json!({"q": bulk_query(filter)})).await;
    assert!(body.get("errors").is_none(), "{body}");
    body
}

async fn download(url: &str) -> (u16, String) {
    // No access token: the URL is "signed".
    let res = client().get(url).send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

fn jsonl(text: &str) -> Vec<Value> {
    assert!(text.is_empty() || text.ends_with('\n'));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn bulk_operation_completes_with_the_paged_results() {
    // Long enough to observe RUNNING and the refusal on a busy machine.
    let emu = start_with(EmulatorConfig {
        bulk_delay: Duration::from_millis(800),
        ..fast_restore()
    })
    .await;
    emu.insert_orders(six_hundred());
    let window = "created_at:>='2026-11-28T01:00:00Z' AND created_at:<'2026-11-28T04:00:00Z'";
    let paged = page_all(&emu, ORDERS, Some(window)).await;
    assert_eq!(paged.len(), 360);

    let body = run_bulk(&emu, window).await;
    assert_eq!(
        body["data"],
        json!({"bulkOperationRunQuery": {
            "bulkOperation": {"id": "gid://shopify/BulkOperation/1", "status": "CREATED"},
            "userErrors": [],
        }})
    );
    assert_eq!(cost(&body)["requestedQueryCost"], 10);
    assert_eq!(cost(&body)["actualQueryCost"], 10);

    // Running: a second operation is refused.
    let op = gql(&emu, POLL, json!({})).await["data"]["currentBulkOperation"].clone();
    assert_eq!(op["status"], "RUNNING");
    assert_eq!(op["url"], Value::Null);
    let body = gql(&emu, BULK, json!({"q": bulk_query(window)})).await;
    assert_eq!(
        body["data"]["bulkOperationRunQuery"],
        json!({"bulkOperation": null, "userErrors": [{
            "field": null,
            "message": "A bulk query operation for this app and shop is already in progress",
        }]})
    );
    // Not yet downloadable.
    let url = format!("{}/bulk/1.jsonl", emu.base_url);
    assert_eq!(download(&url).await.0, 404);

    let op = poll_until_done(&emu).await;
    assert_eq!(
        op,
        json!({
            "id": "gid://shopify/BulkOperation/1",
            "status": "COMPLETED",
            "errorCode": null,
            "objectCount": "360",
            "url": url,
            "partialDataUrl": null,
        })
    );
    let (status, text) = download(&url).await;
    assert_eq!(status, 200);
    // The same objects (the bulk query has no sortKey: Shopify's default, ID).
    let lines = jsonl(&text);
    assert_eq!(legacy_ids(&lines), {
        let mut ids = legacy_ids(&lines);
        ids.sort();
        ids
    });
    assert_eq!(lines, sorted_by_id(paged));

    // Done: the next one may start, and becomes current.
    let body = run_bulk(&emu, "created_at:<'2026-11-28T00:01:00Z'").await;
    assert_eq!(
        body["data"]["bulkOperationRunQuery"]["bulkOperation"]["id"],
        "gid://shopify/BulkOperation/2"
    );
    let op = poll_until_done(&emu).await;
    assert_eq!(op["objectCount"], "2");
    let (_, text) = download(op["url"].as_str().unwrap()).await;
    assert_eq!(legacy_ids(&jsonl(&text)).len(), 2);
    assert_eq!(emu.stats().bulk_operations, 2);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn bulk_operation_failure_outcomes() {
    let emu = start_with(EmulatorConfig {
        bulk_delay: Duration::from_millis(50),
        ..fast_restore()
    })
    .await;
    emu.insert_orders(six_hundred());
    let all = "created_at:>='2026-01-01T00:00:00Z'";

    for (outcome, status, code) in [
        (
            BulkOutcome::Failed,
            "FAILED",
            json!("INTERNAL_SERVER_ERROR"),
        ),
        (BulkOutcome::Canceled, "CANCELED", Value::Null),
        (BulkOutcome::Expired, "EXPIRED", Value::Null),
    ] {
        emu.set_bulk_outcome(outcome);
        run_bulk(&emu, all).await;
        let op = poll_until_done(&emu).await;
        assert_eq!(op["status"], status, "{op}");
        assert_eq!(op["errorCode"], code, "{op}");
        assert_eq!(op["url"], Value::Null, "{op}");
        assert_eq!(op["partialDataUrl"], Value::Null, "{op}");
        let n = op["id"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        let (s, _) = download(&format!("{}/bulk/{n}.jsonl", emu.base_url)).await;
        assert_eq!(s, 404);
    }

    // Partial data: FAILED, with the first half at partialDataUrl.
    let paged = page_all(&emu, &ORDERS.replace("CREATED_AT", "ID"), Some(all)).await;
    emu.set_bulk_outcome(BulkOutcome::PartialData);
    // Sorted by id, like the paged reference.
    let q = format!("{{ orders(sortKey: ID, query: \"{all}\") {{ nodes {{ {NODE_FIELDS} }} }} }}");
    let body = gql(&emu, BULK, json!({"q": q})).await;
    assert_eq!(
        body["data"]["bulkOperationRunQuery"]["userErrors"],
        json!([]),
        "{body}"
    );
    let op = poll_until_done(&emu).await;
    assert_eq!(op["status"], "FAILED");
    assert_eq!(op["errorCode"], "INTERNAL_SERVER_ERROR");
    assert_eq!(op["url"], Value::Null);
    assert_eq!(op["objectCount"], "300");
    let url = op["partialDataUrl"].as_str().unwrap();
    assert!(url.starts_with(&emu.base_url), "{url}");
    let (status, text) = download(url).await;
    assert_eq!(status, 200);
    assert_eq!(jsonl(&text), paged[..300]);

    // The outcome applies once; then operations complete again.
    run_bulk(&emu, all).await;
    let op = poll_until_done(&emu).await;
    assert_eq!(op["status"], "COMPLETED");
    assert_eq!(op["objectCount"], "600");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn invalid_bulk_queries_are_user_errors() {
    let emu = start().await;
    let with_code = "mutation Bulk($q: String!) { bulkOperationRunQuery(query: $q) { bulkOperation { id } userErrors { field message code } } }";
    let body = gql(
        &emu,
        with_code,
        json!({"q": "{ orders { edges { node { id foo } } } }"}),
    )
    .await;
    assert_eq!(
        body["data"]["bulkOperationRunQuery"],
        json!({"bulkOperation": null, "userErrors": [{
            "field": ["query"],
            "message": "Invalid bulk query: Field 'foo' doesn't exist on type 'Order'",
            "code": "INVALID",
        }]})
    );
    let body = gql(
        &emu,
        with_code,
        json!({"q": "{ orders { edges { node { id } }"}),
    )
    .await;
    assert_eq!(
        body["data"]["bulkOperationRunQuery"]["userErrors"][0]["message"],
        "Invalid bulk query: Unexpected end of document"
    );
    let body = gql(
        &emu,
        with_code,
        json!({"q": "{ currentBulkOperation { id } }"}),
    )
    .await;
    assert_eq!(
        body["data"]["bulkOperationRunQuery"]["userErrors"][0]["message"],
        "Invalid bulk query: Bulk queries must contain at least one connection."
    );
    // Nothing was created.
    assert_eq!(emu.stats().bulk_operations, 0);
    assert_eq!(
        gql(&emu, POLL, json!({})).await["data"]["currentBulkOperation"],
        Value::Null
    );
    // The mutation's own argument is required.
    let body = gql(
        &emu,
        "mutation { bulkOperationRunQuery { userErrors { message } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        "missingRequiredArguments"
    );
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn auth_routing_and_request_ids() {
    let emu = start().await;
    let url = emu.graphql_url();
    let body = json!({"query": POLL});
    let expected = json!({"errors": "[API] Invalid API key or access token (unrecognized login or wrong password)"});
    let mut ids = HashSet::new();
    for token in [None, Some("shpat_wrong")] {
        let mut req = client().post(&url).json(&body);
        if let Some(t) = token {
            req = req.header("X-Shopify-Access-Token", t);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401);
        ids.insert(res.headers()["x-request-id"].to_str().unwrap().to_owned());
        assert_eq!(res.json::<Value>().await.unwrap(), expected);
    }
    // Any version string.
    let res = client()
        .post(format!("{}/admin/api/2024-10/graphql.json", emu.base_url))
        .header("X-Shopify-Access-Token", &emu.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-shopify-api-version"], "2024-10");
    let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(id.len(), 36, "{id}");
    ids.insert(id);
    // No query.
    let (status, headers, raw) = post_raw(&emu, &json!({"variables": {}})).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&raw).unwrap(),
        json!({"errors": {"query": "Required parameter missing or invalid"}})
    );
    ids.insert(headers["x-request-id"].to_str().unwrap().to_owned());
    // Unknown paths.
    let res = client()
        .post(format!("{}/admin/api/2025-01/orders.json", emu.base_url))
        .header("X-Shopify-Access-Token", &emu.token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    ids.insert(res.headers()["x-request-id"].to_str().unwrap().to_owned());
    assert_eq!(ids.len(), 5);
    // application/graphql bodies.
    let res = client()
        .post(&url)
        .header("X-Shopify-Access-Token", &emu.token)
        .header("Content-Type", "application/graphql")
        .body(POLL)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.json::<Value>().await.unwrap()["data"],
        json!({"currentBulkOperation": null})
    );
    let stats = emu.stats();
    assert_eq!(stats.requests, 6);
    assert_eq!(stats.by_status.get(&401), Some(&2));
    assert_eq!(stats.queries, 2);
    emu.shutdown().await;
}

fn fault(kind: FaultKind, after: u64, times: u64) -> Vec<Fault> {
    vec![Fault { kind, after, times }]
}

#[tokio::test(start_paused = true)]
async fn faults_are_injected_in_arrival_order() {
    let emu = start().await;
    emu.insert_orders(six_hundred());
    let request = json!({"query": ORDERS, "variables": {"first": 3}});
    let full = post_raw(&emu, &request).await.2;
    let data = |body: &str| serde_json::from_str::<Value>(body).unwrap()["data"].clone();

    emu.set_faults(vec![
        Fault {
            kind: FaultKind::RateLimited,
            after: 0,
            times: 1,
        },
        Fault {
            kind: FaultKind::ServerError,
            after: 1,
            times: 1,
        },
        Fault {
            kind: FaultKind::Unavailable,
            after: 2,
            times: 1,
        },
    ]);
    let (status, headers, body) = post_raw(&emu, &request).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "1.0");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["errors"][0]["extensions"]["code"],
        "THROTTLED"
    );
    let (status, headers, body) = post_raw(&emu, &request).await;
    assert_eq!(status, 500);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        "INTERNAL_SERVER_ERROR"
    );
    assert_eq!(
        body["errors"][0]["extensions"]["requestId"],
        headers["x-request-id"].to_str().unwrap()
    );
    assert_eq!(post_raw(&emu, &request).await.0, 503);
    let (status, _, body) = post_raw(&emu, &request).await;
    assert_eq!((status, data(&body)), (200, data(&full)));
    let stats = emu.stats();
    assert_eq!(stats.throttled, 1);
    assert_eq!(stats.by_status.get(&429), Some(&1));
    assert_eq!(stats.by_status.get(&500), Some(&1));
    assert_eq!(stats.by_status.get(&503), Some(&1));

    emu.set_faults(fault(FaultKind::TruncatedJson, 0, 1));
    let res = client()
        .post(emu.graphql_url())
        .header("X-Shopify-Access-Token", &emu.token)
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let declared: usize = res.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let text = res.text().await.unwrap();
    assert_eq!(text.len(), declared);
    assert!(text.len().abs_diff(full.len() / 2) <= 1, "{text}");
    assert_eq!(text[..40], full[..40]);
    assert!(serde_json::from_str::<Value>(&text).is_err());

    emu.set_faults(fault(FaultKind::MalformedJson, 0, 1));
    let (status, headers, body) = post_raw(&emu, &request).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    assert!(serde_json::from_str::<Value>(&body).is_err(), "{body}");

    emu.set_faults(fault(FaultKind::Slow(Duration::from_millis(300)), 0, 1));
    let t = Instant::now();
    let (status, _, body) = post_raw(&emu, &request).await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert_eq!((status, data(&body)), (200, data(&full)));

    // A dropped connection: no response at all, and no effect (the bulk
    // operation is not created).
    emu.set_faults(fault(FaultKind::DropConnection, 0, 2));
    let before = emu.stats();
    for _ in 0..2 {
        let err = client()
            .post(emu.graphql_url())
            .header("X-Shopify-Access-Token", &emu.token)
            .json(&json!({"query": BULK, "variables": {"q": bulk_query("id:>0")}}))
            .send()
            .await
            .expect_err("a dropped connection must not produce a response");
        assert!(err.status().is_none());
        assert!(err.is_request() || err.is_connect(), "{err:?}");
    }
    let after = emu.stats();
    assert_eq!(after.requests, before.requests + 2);
    assert_eq!(after.by_status, before.by_status);
    assert_eq!(after.bulk_operations, 0);
    // The next request is served normally.
    assert_eq!(post_raw(&emu, &request).await.0, 200);

    // Faults also apply to bulk downloads, counted with every request.
    run_bulk(&emu, "id:>0").await;
    let op = poll_until_done(&emu).await;
    emu.set_faults(fault(FaultKind::Unavailable, 0, 1));
    let url = op["url"].as_str().unwrap();
    assert_eq!(download(url).await.0, 503);
    let (status, text) = download(url).await;
    assert_eq!(status, 200);
    assert_eq!(jsonl(&text).len(), 600);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn latency_is_added_to_every_response() {
    let emu = start_with(EmulatorConfig {
        latency: Duration::from_millis(150),
        ..EmulatorConfig::default()
    })
    .await;
    let t = Instant::now();
    let (a, b) = tokio::join!(gql(&emu, POLL, json!({})), gql(&emu, POLL, json!({})));
    let elapsed = t.elapsed();
    assert!(a.get("errors").is_none() && b.get("errors").is_none());
    // Concurrent: both within roughly one latency, not two.
    assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(300), "{elapsed:?}");
    emu.shutdown().await;
}
