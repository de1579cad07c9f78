//! The emulator over real HTTP, as Intuit's pages describe the API: the
//! query language and its errors, paging, create and sparse update with
//! `SyncToken`, batch (its cap, per-item faults), `requestid` replay,
//! custom fields, multicurrency, OAuth refresh-token rotation and access
//! token expiry, throttling, transport faults before and after the work,
//! and `intuit_tid` on every answer.

use std::time::Duration;

use recon_quickbooks::emulator::{Emulator, EmulatorConfig, Fault, Kind, TransportFault};
use serde_json::{json, Value};

struct Api {
    emu: Emulator,
    http: reqwest::Client,
    access: String,
}

impl Api {
    async fn start(cfg: EmulatorConfig) -> Api {
        let emu = Emulator::start(cfg).await.unwrap();
        let http = reqwest::Client::new();
        let (status, v) = refresh(&http, &emu, &emu.refresh_token.clone()).await;
        assert_eq!(status, 200, "{v}");
        Api {
            access: v["access_token"].as_str().unwrap().to_string(),
            emu,
            http,
        }
    }

    fn url(&self, tail: &str) -> String {
        format!(
            "{}/v3/company/{}/{tail}",
            self.emu.base_url, self.emu.realm_id
        )
    }

    async fn query(&self, q: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url("query"))
            .bearer_auth(&self.access)
            .query(&[("query", q), ("minorversion", "75")])
            .send()
            .await
            .unwrap();
        assert!(
            r.headers().get("intuit_tid").is_some(),
            "intuit_tid on every answer"
        );
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn post(&self, tail: &str, body: &Value, requestid: Option<&str>) -> (u16, Value) {
        let mut q = vec![("minorversion", "75")];
        if let Some(r) = requestid {
            q.push(("requestid", r));
        }
        let r = self
            .http
            .post(self.url(tail))
            .bearer_auth(&self.access)
            .query(&q)
            .json(body)
            .send()
            .await
            .unwrap();
        assert!(r.headers().get("intuit_tid").is_some());
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
}

async fn refresh(http: &reqwest::Client, emu: &Emulator, token: &str) -> (u16, Value) {
    let r = http
        .post(emu.token_url())
        .basic_auth(&emu.client_id, Some(&emu.client_secret))
        .form(&[("grant_type", "refresh_token"), ("refresh_token", token)])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn invoice(doc: &str, amount: &str) -> Value {
    serde_json::from_str(&format!(
        r#"{{"DocNumber": "{doc}", "CustomerRef": {{"value": "1"}},
            "Line": [{{"Amount": {amount}, "DetailType": "SalesItemLineDetail",
                       "SalesItemLineDetail": {{"ItemRef": {{"value": "1"}}}}}}]}}"#
    ))
    .unwrap()
}

fn code(v: &Value) -> &str {
    v["Fault"]["Error"][0]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn queries_page_filter_and_refuse_what_the_language_lacks() {
    let api = Api::start(EmulatorConfig::default()).await;
    api.emu.add_customer("Acme", "ap@acme.test", None);
    for i in 0..25 {
        api.emu
            .insert(Kind::Invoice, invoice(&format!("ch_{i:03}"), "10.00"));
    }
    let (s, v) = api
        .query("SELECT * FROM Invoice ORDERBY Id STARTPOSITION 11 MAXRESULTS 10")
        .await;
    assert_eq!(s, 200, "{v}");
    let rows = v["QueryResponse"]["Invoice"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    assert_eq!(rows[0]["DocNumber"], "ch_010");
    assert_eq!(v["QueryResponse"]["startPosition"], 11);
    assert_eq!(v["QueryResponse"]["maxResults"], 10);
    assert_eq!(
        rows[0]["Id"].as_str().map(|s| !s.is_empty()),
        Some(true),
        "Ids are strings"
    );
    assert_eq!(
        rows[0]["TotalAmt"].to_string(),
        "10.00",
        "exact decimal text"
    );

    let (_, v) = api
        .query("SELECT * FROM Invoice WHERE DocNumber IN ('ch_001', 'ch_024', 'nope')")
        .await;
    assert_eq!(v["QueryResponse"]["Invoice"].as_array().unwrap().len(), 2);
    let (_, v) = api
        .query("SELECT * FROM Invoice WHERE DocNumber = 'nope'")
        .await;
    assert_eq!(
        v["QueryResponse"],
        json!({}),
        "no rows: an empty QueryResponse"
    );
    let (_, v) = api.query("SELECT count(*) FROM Invoice").await;
    assert_eq!(v["QueryResponse"]["totalCount"], 25);
    let (_, v) = api.query("SELECT * FROM Invoice MAXRESULTS 5000").await;
    assert_eq!(
        v["QueryResponse"]["maxResults"], 25,
        "clamped at 1000, all 25 fit"
    );

    for bad in [
        "SELECT * FROM Invoice WHERE PrivateNote = 'x'",
        "SELECT * FROM Invoice WHERE DocNumber = 'a' OR DocNumber = 'b'",
        "SELECT DocNumber FROM Invoice",
        "SELECT * FROM invoice",
    ] {
        let (s, v) = api.query(bad).await;
        assert_eq!((s, code(&v)), (400, "4000"), "{bad}: {v}");
        assert_eq!(v["Fault"]["type"], "ValidationFault");
    }
    api.emu.shutdown().await;
}

#[tokio::test]
async fn creates_sparse_updates_and_stale_sync_tokens() {
    let api = Api::start(EmulatorConfig {
        custom_fields: vec!["Stripe ID".into()],
        ..EmulatorConfig::default()
    })
    .await;
    api.emu.add_customer("Acme", "ap@acme.test", None);
    let mut body = invoice("ch_1", "19.99");
    body["CustomField"] =
        json!([{"DefinitionId": "1", "Type": "StringType", "StringValue": "ch_1"}]);
    let (s, v) = api.post("invoice", &body, None).await;
    assert_eq!(s, 200, "{v}");
    let inv = &v["Invoice"];
    assert_eq!(inv["SyncToken"], "0");
    assert_eq!(inv["TotalAmt"].to_string(), "19.99");
    assert_eq!(inv["CurrencyRef"]["value"], "USD", "the home currency");
    assert_eq!(inv["CustomField"][0]["Name"], "Stripe ID");
    let lines = inv["Line"].as_array().unwrap();
    assert_eq!(lines.last().unwrap()["DetailType"], "SubTotalLineDetail");
    let id = inv["Id"].as_str().unwrap().to_string();

    let patch = json!({"Id": id, "SyncToken": "0", "sparse": true, "PrivateNote": "repaired"});
    let (s, v) = api.post("invoice", &patch, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["Invoice"]["SyncToken"], "1");
    assert_eq!(
        v["Invoice"]["DocNumber"], "ch_1",
        "a sparse update keeps what it does not send"
    );
    let (s, v) = api.post("invoice", &patch, None).await;
    assert_eq!((s, code(&v)), (400, "5010"), "{v}");
    assert_eq!(v["Fault"]["Error"][0]["Message"], "Stale Object Error");

    // Invalid references, a non-home currency without multicurrency, too
    // long a DocNumber, too many decimals.
    let mut no_customer = invoice("x", "1.00");
    no_customer["CustomerRef"] = json!({"value": "999"});
    let mut jpy = invoice("y", "100");
    jpy["CurrencyRef"] = json!({"value": "JPY"});
    for (b, want) in [
        (no_customer, "2500"),
        (jpy, "6000"),
        (invoice("0123456789012345678901", "1.00"), "6000"),
        (invoice("z", "1.001"), "6000"),
    ] {
        let (s, v) = api.post("invoice", &b, None).await;
        assert_eq!((s, code(&v)), (400, want), "{v}");
    }
    assert_eq!(api.emu.entities(Kind::Invoice).len(), 1);
    api.emu.shutdown().await;
}

#[tokio::test]
async fn multicurrency_companies_take_a_customers_currency_with_its_own_decimals() {
    let api = Api::start(EmulatorConfig {
        multicurrency: true,
        ..EmulatorConfig::default()
    })
    .await;
    let yen = api
        .emu
        .add_customer("Tokyo KK", "ap@tokyo.test", Some("JPY"));
    let mut b = invoice("ch_jpy", "1500");
    b["CustomerRef"] = json!({"value": yen});
    b["CurrencyRef"] = json!({"value": "JPY"});
    let (s, v) = api.post("invoice", &b, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["Invoice"]["TotalAmt"].to_string(), "1500");
    b["CurrencyRef"] = json!({"value": "USD"});
    let (s, v) = api.post("invoice", &b, None).await;
    assert_eq!(
        (s, code(&v)),
        (400, "6000"),
        "a customer has one currency: {v}"
    );
    api.emu.shutdown().await;
}

#[tokio::test]
async fn batches_answer_per_item_and_refuse_more_than_the_cap() {
    let api = Api::start(EmulatorConfig {
        batch_max_items: 10,
        ..EmulatorConfig::default()
    })
    .await;
    api.emu.add_customer("Acme", "ap@acme.test", None);
    let items: Vec<Value> = (0..3)
        .map(|i| json!({"bId": (i + 1).to_string(), "operation": "create", "Invoice": invoice(&format!("b{i}"), "5.00")}))
        .chain([
            json!({"bId": "4", "operation": "create", "Invoice": invoice("bad", "5.001")}),
            json!({"bId": "5", "Query": "SELECT * FROM Invoice WHERE DocNumber = 'b0'"}),
        ])
        .collect();
    let (s, v) = api
        .post("batch", &json!({"BatchItemRequest": items}), None)
        .await;
    assert_eq!(s, 200, "{v}");
    let answers = v["BatchItemResponse"].as_array().unwrap();
    assert_eq!(answers.len(), 5);
    assert!(answers[0]["Invoice"]["Id"].is_string());
    assert_eq!(answers[3]["Fault"]["Error"][0]["code"], "6000");
    assert_eq!(
        answers[4]["QueryResponse"],
        json!({}),
        "items do not see each other's writes"
    );
    let eleven: Vec<Value> = (0..11)
        .map(|i| json!({"bId": i.to_string(), "Query": "SELECT * FROM Invoice"}))
        .collect();
    let (s, v) = api
        .post("batch", &json!({"BatchItemRequest": eleven}), None)
        .await;
    assert_eq!((s, code(&v)), (400, "1040"), "{v}");
    let (s, v) = api
        .post("batch", &json!({"BatchItemRequest": []}), None)
        .await;
    assert_eq!(s, 400);
    assert_eq!(v["Fault"]["Error"][0]["Message"], "MalformedRequest");
    let long_bid =
        json!({"BatchItemRequest": [{"bId": "01234567890", "Query": "SELECT * FROM Invoice"}]});
    let (s, _) = api.post("batch", &long_bid, Some("rid-1")).await;
    assert_eq!(s, 400, "bId over 10 characters with a requestid");
    api.emu.shutdown().await;
}

#[tokio::test]
async fn a_repeated_requestid_gets_the_original_answer_and_no_second_invoice() {
    let api = Api::start(EmulatorConfig::default()).await;
    api.emu.add_customer("Acme", "ap@acme.test", None);
    // The work is done, its answer lost (500 after the work).
    api.emu.set_faults(vec![Fault {
        kind: TransportFault::ServerErrorAfterWork,
        after: 0,
        times: 1,
    }]);
    let body = invoice("ch_lost", "42.00");
    let (s, _) = api.post("invoice", &body, Some("req-4957")).await;
    assert_eq!(s, 500);
    assert_eq!(
        api.emu.entities(Kind::Invoice).len(),
        1,
        "created before the 500"
    );
    let (s, v) = api.post("invoice", &body, Some("req-4957")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        api.emu.entities(Kind::Invoice).len(),
        1,
        "the replay creates nothing"
    );
    assert_eq!(v["Invoice"]["Id"], api.emu.entities(Kind::Invoice)[0]["Id"]);
    assert_eq!(api.emu.stats().replays, 1);
    let (s, v) = api
        .post("invoice", &invoice("other", "1.00"), Some("req-4957"))
        .await;
    assert_eq!((s, code(&v)), (400, "600"), "same ID, another body: {v}");
    let (s, _) = api.post("invoice", &body, Some(&"x".repeat(51))).await;
    assert_eq!(s, 400, "requestid over 50 characters");
    // 500 before the work: nothing is created, nothing remembered.
    api.emu.set_faults(vec![Fault {
        kind: TransportFault::ServerError,
        after: 0,
        times: 1,
    }]);
    let (s, _) = api
        .post("invoice", &invoice("ch_b", "1.00"), Some("req-b"))
        .await;
    assert_eq!(s, 500);
    assert_eq!(api.emu.entities(Kind::Invoice).len(), 1);
    let (s, _) = api
        .post("invoice", &invoice("ch_b", "1.00"), Some("req-b"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(api.emu.entities(Kind::Invoice).len(), 2);
    api.emu.shutdown().await;
}

#[tokio::test]
async fn refresh_tokens_rotate_and_the_old_one_is_refused() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let http = reqwest::Client::new();
    let first = emu.refresh_token.clone();
    let (s, v) = refresh(&http, &emu, &first).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["token_type"], "bearer");
    assert_eq!(v["expires_in"], 3600);
    let second = v["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(second, first, "a new refresh token on every refresh");
    assert_eq!(emu.valid_refresh_tokens(), vec![second.clone()]);
    let (s, v) = refresh(&http, &emu, &first).await;
    assert_eq!((s, v["error"].as_str()), (400, Some("invalid_grant")));
    let r = http
        .post(emu.token_url())
        .basic_auth(&emu.client_id, Some("wrong"))
        .form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", second.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    emu.revoke_all();
    let (s, v) = refresh(&http, &emu, &second).await;
    assert_eq!((s, v["error"].as_str()), (400, Some("invalid_grant")));
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn access_tokens_expire_after_an_hour_of_the_emulators_clock() {
    let api = Api::start(EmulatorConfig::default()).await;
    let (s, _) = api.query("SELECT * FROM Invoice").await;
    assert_eq!(s, 200);
    tokio::time::advance(Duration::from_secs(3601)).await;
    let (s, v) = api.query("SELECT * FROM Invoice").await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["code"], "AuthenticationFailed");
    api.emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_companys_minute_and_batch_minute_are_throttled() {
    let api = Api::start(EmulatorConfig {
        requests_per_minute: 5,
        batch_per_minute: 2,
        meter_batch_items: false,
        ..EmulatorConfig::default()
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(api.query("SELECT * FROM Invoice").await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    let (_, v) = api.query("SELECT * FROM Invoice").await;
    assert_eq!(v["Fault"]["type"], "ThrottleExceeded");
    tokio::time::advance(Duration::from_secs(61)).await;
    let batch = json!({"BatchItemRequest": [{"bId": "1", "Query": "SELECT * FROM Invoice"}]});
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(api.post("batch", &batch, None).await.0);
    }
    assert_eq!(
        statuses,
        [200, 200, 429],
        "40 batch requests a minute, here 2"
    );
    assert!(api.emu.stats().transport.throttled >= 3);
    api.emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn request_ids_are_forgotten_after_the_configured_window() {
    let api = Api::start(EmulatorConfig {
        requestid_window: Some(Duration::from_secs(600)),
        ..EmulatorConfig::default()
    })
    .await;
    api.emu.add_customer("Acme", "ap@acme.test", None);
    let body = invoice("ch_w", "1.00");
    assert_eq!(api.post("invoice", &body, Some("rid-w")).await.0, 200);
    assert_eq!(api.post("invoice", &body, Some("rid-w")).await.0, 200);
    assert_eq!(
        api.emu.entities(Kind::Invoice).len(),
        1,
        "replayed inside the window"
    );
    tokio::time::advance(Duration::from_secs(601)).await;
    assert_eq!(api.post("invoice", &body, Some("rid-w")).await.0, 200);
    assert_eq!(
        api.emu.entities(Kind::Invoice).len(),
        2,
        "past the window the same ID is new work: why recon never relies on it across runs"
    );
    assert_eq!(api.emu.stats().replays, 1);
    api.emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_sent_only_when_asked() {
    for (knob, want) in [(false, None), (true, Some("60"))] {
        let api = Api::start(EmulatorConfig {
            requests_per_minute: 1,
            retry_after: knob,
            ..EmulatorConfig::default()
        })
        .await;
        assert_eq!(api.query("SELECT * FROM Invoice").await.0, 200);
        let r = api
            .http
            .get(api.url("query"))
            .bearer_auth(&api.access)
            .query(&[("query", "SELECT * FROM Invoice")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 429);
        let header = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        assert_eq!(header.as_deref(), want);
        api.emu.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_grace_period_keeps_a_rotated_refresh_token_working_for_a_while() {
    let emu = Emulator::start(EmulatorConfig {
        refresh_grace: Some(Duration::from_secs(60)),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let first = emu.refresh_token.clone();
    let (s, _) = refresh(&http, &emu, &first).await;
    assert_eq!(s, 200);
    let (s, v) = refresh(&http, &emu, &first).await;
    assert_eq!(s, 200, "inside the grace period: {v}");
    tokio::time::advance(Duration::from_secs(61)).await;
    let (s, v) = refresh(&http, &emu, &first).await;
    assert_eq!((s, v["error"].as_str()), (400, Some("invalid_grant")));
    emu.shutdown().await;
}
