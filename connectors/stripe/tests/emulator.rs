//! The Stripe API emulator, exercised over real HTTP with reqwest.
#![cfg(feature = "emulator")]

use std::collections::HashSet;
use std::time::Duration;

// The emulator's clock: on tokio's paused clock it is virtual time.
use tokio::time::Instant;

use recon_stripe::emulator::{Emulator, EmulatorConfig, Fault, FaultKind, ObjectKind, StripeFault};
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{json, Value};

const T0: i64 = 1_700_000_000;

async fn start() -> Emulator {
    Emulator::start(EmulatorConfig::default()).await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// GET with the emulator's key: (status, headers, raw body).
async fn get_raw(emu: &Emulator, path: &str) -> (u16, HeaderMap, String) {
    let res = client()
        .get(format!("{}{}", emu.base_url, path))
        .bearer_auth(&emu.api_key)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.text().await.unwrap())
}

async fn get(emu: &Emulator, path: &str) -> (u16, Value) {
    let (status, _, body) = get_raw(emu, path).await;
    (status, serde_json::from_str(&body).unwrap())
}

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Inserts charges `ch_<n>` created at the given times.
fn insert_charges(emu: &Emulator, items: &[(&str, i64)]) {
    for (id, created) in items {
        emu.insert(
            ObjectKind::Charge,
            Emulator::charge(id, 1000, "USD", "succeeded", *created),
        );
    }
}

fn assert_error(body: &Value, kind: &str, code: Option<&str>, param: Option<&str>) {
    let e = &body["error"];
    assert_eq!(e["type"], kind, "{body}");
    match code {
        Some(c) => {
            assert_eq!(e["code"], c, "{body}");
            assert_eq!(
                e["doc_url"],
                format!(
                    "https://stripe.com/docs/error-codes/{}",
                    c.replace('_', "-")
                ),
                "{body}"
            );
        }
        None => assert!(e.get("code").is_none(), "{body}"),
    }
    match param {
        Some(p) => assert_eq!(e["param"], p, "{body}"),
        None => assert!(e.get("param").is_none(), "{body}"),
    }
    assert!(e["message"].is_string(), "{body}");
}

#[tokio::test]
async fn list_pages_newest_first_with_has_more() {
    let emu = start().await;
    // 25 charges over 13 distinct seconds: ties are ordered by id descending.
    let mut expected: Vec<(i64, String)> = Vec::new();
    for i in 0..25 {
        let id = format!("ch_{:03}", (i * 7) % 25);
        let created = T0 + (i / 2) as i64;
        emu.insert(
            ObjectKind::Charge,
            Emulator::charge(&id, 100 + i as i64, "usd", "succeeded", created),
        );
        expected.push((created, id));
    }
    expected.sort_by(|a, b| b.cmp(a));
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();

    let mut seen = Vec::new();
    let mut path = "/v1/charges?limit=10".to_owned();
    let mut pages = Vec::new();
    loop {
        let (status, body) = get(&emu, &path).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["object"], "list");
        assert_eq!(body["url"], "/v1/charges");
        let page = ids(&body);
        pages.push((page.len(), body["has_more"].as_bool().unwrap()));
        seen.extend(page.iter().cloned());
        if !body["has_more"].as_bool().unwrap() {
            break;
        }
        path = format!(
            "/v1/charges?limit=10&starting_after={}",
            page.last().unwrap()
        );
    }
    assert_eq!(pages, [(10, true), (10, true), (5, false)]);
    assert_eq!(seen, expected);

    // Default limit is 10.
    let (_, body) = get(&emu, "/v1/charges").await;
    assert_eq!(ids(&body), expected[..10]);
    assert_eq!(body["has_more"], true);
    // Exactly `limit` left: has_more is false.
    let (_, body) = get(&emu, "/v1/charges?limit=25").await;
    assert_eq!(ids(&body), expected);
    assert_eq!(body["has_more"], false);
    // An empty collection.
    let (status, body) = get(&emu, "/v1/refunds").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"object": "list", "url": "/v1/refunds", "has_more": false, "data": []})
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn created_filters_and_boundaries() {
    let emu = start().await;
    insert_charges(
        &emu,
        &[
            ("ch_a", T0 + 100),
            ("ch_b", T0 + 200),
            ("ch_c", T0 + 200),
            ("ch_d", T0 + 300),
            ("ch_e", T0 + 400),
        ],
    );
    let cases: &[(String, &[&str])] = &[
        (
            format!("created[gte]={}", T0 + 200),
            &["ch_e", "ch_d", "ch_c", "ch_b"],
        ),
        (format!("created[gt]={}", T0 + 200), &["ch_e", "ch_d"]),
        (
            format!("created[lt]={}", T0 + 300),
            &["ch_c", "ch_b", "ch_a"],
        ),
        (
            format!("created[lte]={}", T0 + 300),
            &["ch_d", "ch_c", "ch_b", "ch_a"],
        ),
        (format!("created={}", T0 + 200), &["ch_c", "ch_b"]),
        (
            format!("created[gte]={}&created[lt]={}", T0 + 200, T0 + 400),
            &["ch_d", "ch_c", "ch_b"],
        ),
        (
            format!("created[gt]={}&created[lt]={}", T0 + 100, T0 + 200),
            &[],
        ),
        (format!("created[gte]={}", T0 + 401), &[]),
        (
            format!("created[lte]={}", i64::MAX),
            &["ch_e", "ch_d", "ch_c", "ch_b", "ch_a"],
        ),
        (format!("created[gt]={}", i64::MAX), &[]),
        // Filters combine with cursors.
        (
            format!("created[gte]={}&starting_after=ch_e", T0 + 200),
            &["ch_d", "ch_c", "ch_b"],
        ),
        (
            format!("created[lte]={}&ending_before=ch_a", T0 + 300),
            &["ch_d", "ch_c", "ch_b"],
        ),
        (
            format!("created[gte]={}&starting_after=ch_a", T0 + 300),
            &[],
        ),
    ];
    for (query, want) in cases {
        let (status, body) = get(&emu, &format!("/v1/charges?{query}")).await;
        assert_eq!(status, 200, "{query}: {body}");
        assert_eq!(ids(&body), *want, "{query}");
        assert_eq!(body["has_more"], false, "{query}");
    }
    // Percent-encoded brackets, as form encoders send them.
    let (_, body) = get(&emu, &format!("/v1/charges?created%5Bgte%5D={}", T0 + 400)).await;
    assert_eq!(ids(&body), ["ch_e"]);

    // Bad values name the parameter.
    for param in [
        "created",
        "created[gt]",
        "created[gte]",
        "created[lt]",
        "created[lte]",
    ] {
        let (status, body) = get(&emu, &format!("/v1/charges?{param}=yesterday")).await;
        assert_eq!(status, 400, "{param}");
        assert_error(
            &body,
            "invalid_request_error",
            Some("parameter_invalid_integer"),
            Some(param),
        );
        assert_eq!(body["error"]["message"], "Invalid integer: yesterday");
    }
    let (status, body) = get(&emu, "/v1/charges?created[since]=1").await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        "invalid_request_error",
        Some("parameter_unknown"),
        Some("created[since]"),
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn cursors() {
    let emu = start().await;
    // ch_00 oldest .. ch_09 newest.
    let items: Vec<(String, i64)> = (0..10)
        .map(|i| (format!("ch_{i:02}"), T0 + i as i64))
        .collect();
    for (id, created) in &items {
        emu.insert(
            ObjectKind::Charge,
            Emulator::charge(id, 500, "eur", "succeeded", *created),
        );
    }
    let (_, body) = get(&emu, "/v1/charges?limit=3&starting_after=ch_07").await;
    assert_eq!(ids(&body), ["ch_06", "ch_05", "ch_04"]);
    assert_eq!(body["has_more"], true);
    let (_, body) = get(&emu, "/v1/charges?limit=3&starting_after=ch_02").await;
    assert_eq!(ids(&body), ["ch_01", "ch_00"]);
    assert_eq!(body["has_more"], false);
    let (_, body) = get(&emu, "/v1/charges?starting_after=ch_00").await;
    assert_eq!(ids(&body), Vec::<String>::new());
    assert_eq!(body["has_more"], false);

    // ending_before: the page just newer than the cursor, still newest first;
    // has_more tells whether even newer objects exist.
    let (_, body) = get(&emu, "/v1/charges?limit=3&ending_before=ch_04").await;
    assert_eq!(ids(&body), ["ch_07", "ch_06", "ch_05"]);
    assert_eq!(body["has_more"], true);
    let (_, body) = get(&emu, "/v1/charges?limit=3&ending_before=ch_07").await;
    assert_eq!(ids(&body), ["ch_09", "ch_08"]);
    assert_eq!(body["has_more"], false);
    let (_, body) = get(&emu, "/v1/charges?ending_before=ch_09").await;
    assert_eq!(ids(&body), Vec::<String>::new());

    // Paging backwards from the oldest object visits everything.
    let mut cursor = "ch_00".to_owned();
    let mut back = Vec::new();
    loop {
        let (_, body) = get(&emu, &format!("/v1/charges?limit=4&ending_before={cursor}")).await;
        let page = ids(&body);
        back.splice(0..0, page.iter().cloned());
        if !body["has_more"].as_bool().unwrap() {
            break;
        }
        cursor = page[0].clone();
    }
    let newest_first: Vec<String> = items.iter().rev().map(|(id, _)| id.clone()).collect();
    assert_eq!(back, newest_first[..9]);

    // Unknown cursors.
    for param in ["starting_after", "ending_before"] {
        let (status, body) = get(&emu, &format!("/v1/charges?{param}=ch_nope")).await;
        assert_eq!(status, 400, "{body}");
        assert_error(
            &body,
            "invalid_request_error",
            Some("resource_missing"),
            Some(param),
        );
        assert_eq!(body["error"]["message"], "No such charge: 'ch_nope'");
    }
    // A cursor from another resource is unknown here too.
    let (status, body) = get(&emu, "/v1/payment_intents?starting_after=ch_01").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["message"], "No such payment_intent: 'ch_01'");
    // Both cursors at once are refused.
    let (status, body) = get(&emu, "/v1/charges?starting_after=ch_05&ending_before=ch_01").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    emu.shutdown().await;
}

#[tokio::test]
async fn limit_validation_and_unknown_parameters() {
    let emu = start().await;
    insert_charges(&emu, &[("ch_1", T0)]);
    for (value, message) in [
        ("0", "This value must be greater than or equal to 1."),
        ("-5", "This value must be greater than or equal to 1."),
        ("101", "This value must be less than or equal to 100."),
    ] {
        let (status, body) = get(&emu, &format!("/v1/charges?limit={value}")).await;
        assert_eq!(status, 400, "limit={value}");
        assert_error(&body, "invalid_request_error", None, Some("limit"));
        assert_eq!(body["error"]["message"], message);
    }
    let (status, body) = get(&emu, "/v1/charges?limit=ten").await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        "invalid_request_error",
        Some("parameter_invalid_integer"),
        Some("limit"),
    );
    let (status, body) = get(&emu, "/v1/charges?limit=").await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        "invalid_request_error",
        Some("parameter_invalid_empty"),
        Some("limit"),
    );
    for ok in ["1", "100"] {
        let (status, _) = get(&emu, &format!("/v1/charges?limit={ok}")).await;
        assert_eq!(status, 200, "limit={ok}");
    }

    let (status, body) = get(&emu, "/v1/charges?x=1").await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        "invalid_request_error",
        Some("parameter_unknown"),
        Some("x"),
    );
    assert_eq!(body["error"]["message"], "Received unknown parameter: x");
    // Filters Stripe has but the emulator does not emulate are refused, not ignored.
    let (status, body) = get(&emu, "/v1/charges?customer=cus_1").await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "Received unknown parameter: customer"
    );

    // expand is accepted (and ignored), in all its spellings.
    for q in [
        "expand[]=data.customer",
        "expand%5B%5D=data.customer&expand%5B%5D=data.invoice",
        "expand[0]=data.customer",
    ] {
        let (status, body) = get(&emu, &format!("/v1/charges?{q}")).await;
        assert_eq!(status, 200, "{q}: {body}");
        assert_eq!(ids(&body), ["ch_1"]);
    }
    let (status, body) = get(&emu, "/v1/charges/ch_1?expand[]=customer").await;
    assert_eq!(status, 200, "{body}");
    emu.shutdown().await;
}

#[tokio::test]
async fn retrieve_and_not_found() {
    let emu = start().await;
    let charge = Emulator::charge("ch_3Abc", 2599, "GBP", "succeeded", T0);
    emu.insert(ObjectKind::Charge, charge.clone());
    let (status, body) = get(&emu, "/v1/charges/ch_3Abc").await;
    assert_eq!(status, 200);
    assert_eq!(body, charge);

    let (status, body) = get(&emu, "/v1/charges/ch_x").await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"error": {
            "code": "resource_missing",
            "doc_url": "https://stripe.com/docs/error-codes/resource-missing",
            "message": "No such charge: 'ch_x'",
            "param": "id",
            "type": "invalid_request_error"
        }})
    );
    for (kind, noun) in [
        ("payment_intents", "payment_intent"),
        ("invoices", "invoice"),
        ("refunds", "refund"),
        ("customers", "customer"),
    ] {
        let (status, body) = get(&emu, &format!("/v1/{kind}/nope_1")).await;
        assert_eq!(status, 404);
        assert_eq!(
            body["error"]["message"],
            format!("No such {noun}: 'nope_1'")
        );
    }

    // Objects inserted without "object" get it; objects are otherwise as given.
    emu.insert(
        ObjectKind::Refund,
        json!({"id": "re_1", "created": T0, "amount": 5, "custom": [1, 2]}),
    );
    let (_, body) = get(&emu, "/v1/refunds/re_1").await;
    assert_eq!(
        body,
        json!({"id": "re_1", "object": "refund", "created": T0, "amount": 5, "custom": [1, 2]})
    );
    // Replacing by id moves the object in the list order.
    emu.insert(ObjectKind::Refund, json!({"id": "re_0", "created": T0 + 5}));
    emu.insert(
        ObjectKind::Refund,
        json!({"id": "re_1", "created": T0 + 10, "amount": 6}),
    );
    let (_, body) = get(&emu, "/v1/refunds").await;
    assert_eq!(ids(&body), ["re_1", "re_0"]);
    assert_eq!(body["data"][0]["amount"], 6);
    assert_eq!(emu.count(ObjectKind::Refund), 2);

    // Unknown routes get Stripe's unrecognized-URL 404.
    let (status, body) = get(&emu, "/v1/widgets").await;
    assert_eq!(status, 404);
    assert_error(&body, "invalid_request_error", None, None);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Unrecognized request URL (GET: /v1/widgets)"));
    emu.shutdown().await;
}

#[tokio::test]
async fn deleted_objects() {
    let emu = start().await;
    emu.insert(
        ObjectKind::Customer,
        Emulator::customer("cus_1", "a@example.com", "A", T0),
    );
    emu.insert(
        ObjectKind::Customer,
        Emulator::customer("cus_2", "b@example.com", "B", T0 + 1),
    );
    insert_charges(&emu, &[("ch_1", T0)]);
    emu.delete(ObjectKind::Customer, "cus_1");
    emu.delete(ObjectKind::Charge, "ch_1");

    let (status, body) = get(&emu, "/v1/customers/cus_1").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"id": "cus_1", "object": "customer", "deleted": true})
    );
    let (_, body) = get(&emu, "/v1/customers").await;
    assert_eq!(ids(&body), ["cus_2"]);
    let (status, body) = get(&emu, "/v1/charges/ch_1").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "resource_missing");
    let (_, body) = get(&emu, "/v1/charges").await;
    assert_eq!(ids(&body), Vec::<String>::new());
    // Never-existing customers stay missing.
    emu.delete(ObjectKind::Customer, "cus_9");
    let (status, _) = get(&emu, "/v1/customers/cus_9").await;
    assert_eq!(status, 404);
    emu.shutdown().await;
}

#[tokio::test]
async fn authentication() {
    let emu = Emulator::start(EmulatorConfig {
        api_key: "sk_test_51Hx9secretKEYabcd".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let url = format!("{}/v1/charges", emu.base_url);

    let res = client()
        .get(&url)
        .bearer_auth("sk_test_51Hx9wrongKEYwxyz")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert!(res.headers().contains_key("request-id"));
    assert_eq!(res.headers()["www-authenticate"], "Basic realm=\"Stripe\"");
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": {
            "message": "Invalid API Key provided: sk_test_*************wxyz",
            "type": "invalid_request_error"
        }})
    );

    // No key at all.
    let res = client().get(&url).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("You did not provide an API key."));

    // Bearer and basic auth (key as username, empty password) both work.
    let res = client()
        .get(&url)
        .bearer_auth(&emu.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = client()
        .get(&url)
        .basic_auth(&emu.api_key, None::<&str>)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = client()
        .get(&url)
        .basic_auth("sk_test_nope", Some(""))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "Invalid API Key provided: sk_test_****"
    );
    let stats = emu.stats();
    assert_eq!(stats.by_status.get(&401), Some(&3));
    assert_eq!(stats.by_status.get(&200), Some(&2));
    emu.shutdown().await;
}

#[tokio::test]
async fn request_ids_and_content_type() {
    let emu = start().await;
    insert_charges(&emu, &[("ch_1", T0)]);
    let mut seen = HashSet::new();
    for path in [
        "/v1/charges",
        "/v1/charges/ch_1",
        "/v1/charges/ch_2",
        "/v1/charges?x=1",
    ]
    .iter()
    .cycle()
    .take(40)
    {
        let (_, headers, _) = get_raw(&emu, path).await;
        let id = headers["request-id"].to_str().unwrap().to_owned();
        assert!(id.starts_with("req_") && id.len() == 18, "{id}");
        assert!(id[4..].chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
        assert!(seen.insert(id), "duplicate request id");
        assert_eq!(headers["content-type"], "application/json");
    }
    // Unauthenticated responses carry one too.
    let res = client()
        .get(format!("{}/v1/charges", emu.base_url))
        .send()
        .await
        .unwrap();
    let id = res.headers()["request-id"].to_str().unwrap().to_owned();
    assert!(seen.insert(id));
    assert_eq!(res.headers()["content-type"], "application/json");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn rate_limit() {
    let emu = Emulator::start(EmulatorConfig {
        rate_limit_per_sec: Some(10),
        ..Default::default()
    })
    .await
    .unwrap();
    let started = Instant::now();
    let (mut ok, mut limited) = (0u64, 0u64);
    for _ in 0..30 {
        let (status, body) = get(&emu, "/v1/charges?limit=1").await;
        match status {
            200 => ok += 1,
            429 => {
                limited += 1;
                assert_eq!(
                    body["error"]["message"].as_str().unwrap(),
                    "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits."
                );
                assert_error(&body, "invalid_request_error", Some("rate_limit"), None);
            }
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    let elapsed = started.elapsed();
    assert!(limited > 0, "no request was throttled");
    // A bucket of 10, refilled at 10 per second: a burst of 10, then 10/s.
    let refilled = (elapsed.as_secs_f64() * 10.0).ceil() as u64;
    assert!(ok >= 10 && ok <= 10 + refilled, "ok={ok} in {elapsed:?}");
    let stats = emu.stats();
    assert_eq!(stats.throttled, limited);
    assert_eq!(stats.requests, 30);
    assert_eq!(stats.by_status.get(&429).copied().unwrap_or(0), limited);

    // The bucket refills: after a second, a full burst is admitted again.
    tokio::time::sleep(Duration::from_millis(1050)).await;
    for _ in 0..10 {
        let (status, body) = get(&emu, "/v1/charges").await;
        assert_eq!(status, 200, "{body}");
    }
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_client_pacing_at_the_limit_is_never_throttled() {
    // A token-bucket client of the same rate and burst (like `governor`): a
    // burst of 50, then one request per 1/50 s.
    let emu = Emulator::start(EmulatorConfig {
        rate_limit_per_sec: Some(50),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client();
    let url = format!("{}/v1/charges", emu.base_url);
    let burst = (0..50).map(|_| {
        let (client, url, key) = (client.clone(), url.clone(), emu.api_key.clone());
        async move {
            client
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    let statuses = futures_util::future::join_all(burst).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let start = tokio::time::Instant::now();
    for i in 1..=25u32 {
        tokio::time::sleep_until(start + Duration::from_millis(20) * i).await;
        let res = client
            .get(&url)
            .bearer_auth(&emu.api_key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "paced request {i}");
    }
    assert_eq!(emu.stats().throttled, 0);
    // A burst on top of that is over the limit.
    let extra = (0..20).map(|_| {
        let (client, url, key) = (client.clone(), url.clone(), emu.api_key.clone());
        async move {
            client
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    let statuses = futures_util::future::join_all(extra).await;
    assert!(statuses.iter().any(|s| *s == 429), "{statuses:?}");
    emu.shutdown().await;
}

fn fault(kind: FaultKind, after: u64, times: u64) -> Vec<Fault> {
    vec![Fault { kind, after, times }]
}

#[tokio::test]
async fn faults_error_statuses() {
    let emu = start().await;
    insert_charges(&emu, &[("ch_1", T0)]);

    emu.set_faults(fault(FaultKind::RateLimited, 0, 1));
    let (status, _, body) = get_raw(&emu, "/v1/charges").await;
    assert_eq!(status, 429);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_error(&body, "invalid_request_error", Some("rate_limit"), None);

    emu.set_faults(fault(FaultKind::Provider(StripeFault::LockTimeout), 0, 1));
    let (status, headers, body) = get_raw(&emu, "/v1/charges").await;
    assert_eq!(status, 429);
    assert_eq!(headers["stripe-should-retry"], "true");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_error(&body, "invalid_request_error", Some("lock_timeout"), None);

    emu.set_faults(fault(FaultKind::ServerError, 0, 1));
    let (status, body) = get(&emu, "/v1/charges").await;
    assert_eq!(status, 500);
    assert_error(&body, "api_error", None, None);

    emu.set_faults(fault(FaultKind::Unavailable, 0, 1));
    let (status, body) = get(&emu, "/v1/charges").await;
    assert_eq!(status, 503);
    assert_error(&body, "api_error", None, None);

    // Faults apply before auth.
    emu.set_faults(fault(FaultKind::ServerError, 0, 1));
    let res = client()
        .get(format!("{}/v1/charges", emu.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 500);

    // after/times: requests 0 and 1 pass, 2..=3 fail, then pass again.
    emu.set_faults(fault(FaultKind::Unavailable, 2, 2));
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(get(&emu, "/v1/charges/ch_1").await.0);
    }
    assert_eq!(statuses, [200, 200, 503, 503, 200, 200]);

    // Several faults count from the same origin; the first match wins.
    emu.set_faults(vec![
        Fault {
            kind: FaultKind::RateLimited,
            after: 1,
            times: 1,
        },
        Fault {
            kind: FaultKind::ServerError,
            after: 0,
            times: 3,
        },
    ]);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(get(&emu, "/v1/charges").await.0);
    }
    assert_eq!(statuses, [500, 429, 500, 200]);

    // An empty plan clears faults.
    emu.set_faults(vec![]);
    assert_eq!(get(&emu, "/v1/charges").await.0, 200);

    let stats = emu.stats();
    assert_eq!(stats.throttled, 3);
    assert_eq!(stats.by_status[&429], 3);
    assert_eq!(stats.by_status[&500], 4);
    assert_eq!(stats.by_status[&503], 3);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn faults_bodies_and_timing() {
    let emu = start().await;
    insert_charges(&emu, &[("ch_1", T0), ("ch_2", T0 + 1)]);
    let (_, _, full) = get_raw(&emu, "/v1/charges").await;

    emu.set_faults(fault(FaultKind::TruncatedJson, 0, 1));
    let res = client()
        .get(format!("{}/v1/charges", emu.base_url))
        .bearer_auth(&emu.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let declared: usize = res.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = res.bytes().await.unwrap();
    assert_eq!(declared, body.len());
    assert_eq!(body.len(), full.len() / 2);
    assert!(full.as_bytes().starts_with(&body));
    assert!(serde_json::from_slice::<Value>(&body).is_err());

    emu.set_faults(fault(FaultKind::MalformedJson, 0, 1));
    let (status, headers, body) = get_raw(&emu, "/v1/charges").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    assert!(serde_json::from_str::<Value>(&body).is_err(), "{body}");

    emu.set_faults(fault(FaultKind::Slow(Duration::from_millis(300)), 0, 1));
    let t = Instant::now();
    let (status, _, body) = get_raw(&emu, "/v1/charges").await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert_eq!(status, 200);
    assert_eq!(body, full);
    let t = Instant::now();
    assert_eq!(get(&emu, "/v1/charges").await.0, 200);
    assert!(t.elapsed() < Duration::from_millis(300));
    emu.shutdown().await;
}

#[tokio::test]
async fn fault_drop_connection() {
    let emu = start().await;
    insert_charges(&emu, &[("ch_1", T0)]);
    let client = client();
    // Warm a pooled keep-alive connection first, so the drop happens on a
    // reused connection as well as on a fresh one.
    let url = format!("{}/v1/charges", emu.base_url);
    assert_eq!(
        client
            .get(&url)
            .bearer_auth(&emu.api_key)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    emu.set_faults(fault(FaultKind::DropConnection, 0, 2));
    for _ in 0..2 {
        let result = client.get(&url).bearer_auth(&emu.api_key).send().await;
        let err = result.expect_err("a dropped connection must not produce a response");
        assert!(err.status().is_none());
        assert!(err.is_request() || err.is_connect(), "{err:?}");
    }
    // The next request is served normally, on a new connection.
    let res = client
        .get(&url)
        .bearer_auth(&emu.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    // Also with a raw socket: the server closes without sending a single byte.
    emu.set_faults(fault(FaultKind::DropConnection, 0, 1));
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = emu.base_url.trim_start_matches("http://").to_owned();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    sock.write_all(
        format!(
            "GET /v1/charges HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n",
            emu.api_key
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut buf))
        .await
        .expect("the server must close the connection");
    // EOF (or a reset) with nothing received.
    if read.is_ok() {
        assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
    }

    let stats = emu.stats();
    assert_eq!(stats.requests, 5);
    assert_eq!(stats.by_status[&200], 2);
    assert_eq!(stats.by_status.values().sum::<u64>(), 2);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn latency_is_concurrent() {
    let emu = Emulator::start(EmulatorConfig {
        latency: Duration::from_millis(150),
        ..Default::default()
    })
    .await
    .unwrap();
    insert_charges(&emu, &[("ch_1", T0)]);
    let client = client();
    let started = Instant::now();
    let requests = (0..20).map(|_| {
        let client = client.clone();
        let url = format!("{}/v1/charges", emu.base_url);
        let key = emu.api_key.clone();
        async move {
            let t = Instant::now();
            let res = client.get(url).bearer_auth(key).send().await.unwrap();
            assert_eq!(res.status(), 200);
            res.bytes().await.unwrap();
            t.elapsed()
        }
    });
    let each = futures_util::future::join_all(requests).await;
    let total = started.elapsed();
    assert!(each.iter().all(|d| *d >= Duration::from_millis(150)));
    // Serially this would take 3 s.
    assert!(total < Duration::from_millis(1500), "{total:?}");
    let stats = emu.stats();
    assert!(stats.max_in_flight >= 10, "{stats:?}");
    assert_eq!(stats.requests, 20);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_charges() {
    #[derive(Deserialize)]
    struct Item {
        id: String,
        created: i64,
    }
    #[derive(Deserialize)]
    struct Page {
        has_more: bool,
        data: Vec<Item>,
    }

    const N: usize = 200_000;
    let emu = start().await;
    // Four charges per second, so ties are everywhere; ids are zero-padded so
    // that id order is index order, making the expected list order index desc.
    // Compact charges: in a debug build, building and serializing 200,000 full
    // `Emulator::charge` objects alone takes ~8 s (serde_json's cost, not the
    // store's); what this test measures is the store and the paging.
    emu.insert_many(
        ObjectKind::Charge,
        (0..N).map(|i| {
            let amount = 100 + (i % 5000) as i64;
            json!({
                "id": format!("ch_{i:07}"),
                "object": "charge",
                "amount": amount,
                "amount_captured": amount,
                "amount_refunded": 0,
                "captured": true,
                "created": T0 + (i / 4) as i64,
                "currency": "usd",
                "customer": format!("cus_{:05}", i % 1000),
                "livemode": false,
                "metadata": {},
                "paid": true,
                "refunded": false,
                "status": "succeeded",
            })
        }),
    );
    assert_eq!(emu.count(ObjectKind::Charge), N);

    let client = client();
    let mut expected = N;
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut url = format!("{}/v1/charges?limit=100", emu.base_url);
        if let Some(c) = &cursor {
            url.push_str("&starting_after=");
            url.push_str(c);
        }
        let page: Page = client
            .get(url)
            .bearer_auth(&emu.api_key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        pages += 1;
        for item in &page.data {
            expected -= 1;
            assert_eq!(item.id, format!("ch_{expected:07}"));
            assert_eq!(item.created, T0 + (expected / 4) as i64);
        }
        if !page.has_more {
            break;
        }
        assert_eq!(page.data.len(), 100);
        cursor = Some(page.data.last().unwrap().id.clone());
    }
    assert_eq!(expected, 0);
    assert_eq!(pages, N / 100);

    // A created window deep inside the data set, via the same sorted index.
    let (status, body) = get(
        &emu,
        &format!(
            "/v1/charges?limit=100&created[gte]={}&created[lt]={}",
            T0 + 1000,
            T0 + 1002
        ),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        ids(&body),
        (4000..4008)
            .rev()
            .map(|i| format!("ch_{i:07}"))
            .collect::<Vec<_>>()
    );
    emu.shutdown().await;
}

#[test]
fn builders_follow_stripe_shapes() {
    let c = Emulator::charge("ch_3Mml", 1099, "USD", "succeeded", T0);
    assert_eq!(c["object"], "charge");
    assert_eq!(c["currency"], "usd");
    assert_eq!(c["amount"], 1099);
    assert_eq!(c["amount_captured"], 1099);
    assert_eq!(c["amount_refunded"], 0);
    assert_eq!(c["paid"], true);
    assert_eq!(c["captured"], true);
    assert_eq!(c["refunded"], false);
    assert_eq!(c["livemode"], false);
    assert_eq!(c["metadata"], json!({}));
    assert_eq!(c["payment_intent"], "pi_3Mml");
    assert_eq!(c["created"], T0);
    let customer = c["customer"].as_str().unwrap();
    assert!(customer.starts_with("cus_"));
    assert_eq!(customer, Emulator::customer_id_for("ch_3Mml"));
    assert!(c["billing_details"]["email"]
        .as_str()
        .unwrap()
        .contains('@'));
    assert_eq!(c["billing_details"]["email"], c["receipt_email"]);
    assert!(c["billing_details"]["name"].is_string());
    assert!(c["description"].is_string());
    // Deterministic.
    assert_eq!(c, Emulator::charge("ch_3Mml", 1099, "USD", "succeeded", T0));

    let failed = Emulator::charge("ch_f", 500, "eur", "failed", T0);
    assert_eq!(failed["paid"], false);
    assert_eq!(failed["amount_captured"], 0);
    assert_eq!(failed["failure_code"], "card_declined");

    let pi = Emulator::payment_intent("pi_3Mml", 1099, "usd", "succeeded", T0);
    assert_eq!(pi["object"], "payment_intent");
    assert_eq!(pi["latest_charge"], "ch_3Mml");
    assert_eq!(pi["amount_received"], 1099);
    assert_eq!(pi["customer"], c["customer"]);

    let re = Emulator::refund("re_1", "ch_3Mml", 100, "usd", "succeeded", T0);
    assert_eq!(re["object"], "refund");
    assert_eq!(re["charge"], "ch_3Mml");
    assert_eq!(re["payment_intent"], "pi_3Mml");

    let cus = Emulator::customer("cus_1", "x@example.com", "X", T0);
    assert_eq!(cus["object"], "customer");
    assert_eq!(cus["email"], "x@example.com");

    let inv = Emulator::invoice("in_1", "cus_1", 2000, "usd", "paid", T0);
    assert_eq!(inv["object"], "invoice");
    assert_eq!(inv["amount_paid"], 2000);
    assert_eq!(inv["amount_remaining"], 0);
    assert_eq!(inv["customer"], "cus_1");
    assert_eq!(inv["status"], "paid");
}
