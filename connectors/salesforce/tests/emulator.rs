//! The Salesforce emulator, exercised over real HTTP with reqwest: OAuth,
//! the daily allowance, describe, SOQL, paging, sObject Collections upsert,
//! Bulk API 2.0 query and ingest jobs, faults.
#![cfg(feature = "emulator")]

use std::collections::HashSet;
use std::time::Duration;

// The emulator's clock: on tokio's paused clock it is virtual time.
use tokio::time::Instant;

use recon_salesforce::emulator::{Emulator, EmulatorConfig, Fault, FaultKind, FieldDef};
use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::{json, Value};

const V: &str = "/services/data/v62.0";
const OBJ: &str = "Payment__c";

async fn start(cfg: EmulatorConfig) -> Emulator {
    let emu = Emulator::start(cfg).await.unwrap();
    let mut code = FieldDef::external_id("Code__c");
    code.unique = false;
    code.case_sensitive = true;
    let mut invoice = FieldDef::text("Invoice_Number__c");
    invoice.unique = true;
    emu.define_object(
        OBJ,
        vec![
            FieldDef::external_id("Stripe_Charge_Id__c"),
            FieldDef::currency("Amount__c", 2),
            FieldDef::datetime("Charged_At__c"),
            FieldDef::date("Settled_On__c"),
            FieldDef::double("Fee_Rate__c", 4),
            invoice,
            code,
            FieldDef {
                name: "CurrencyIsoCode".into(),
                ..FieldDef::text("CurrencyIsoCode")
            },
        ],
    );
    emu
}

/// Bulk jobs stay `InProgress` long enough to be seen so on a busy machine.
fn slow_jobs() -> EmulatorConfig {
    EmulatorConfig {
        bulk_poll_delay: Duration::from_millis(1500),
        ..EmulatorConfig::default()
    }
}

/// A payment for charge `key`, created at `t0 + i` seconds.
fn payment(key: &str, i: i64) -> Value {
    let created = jiff::Timestamp::from_second(1_767_225_600 + i).unwrap();
    json!({
        "Stripe_Charge_Id__c": key,
        "Amount__c": format!("{}.{:02}", 10 + i, i % 100),
        "CreatedDate": format!("{created}"),
    })
}

struct Resp {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn call(
    emu: &Emulator,
    method: Method,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<(&str, Vec<u8>)>,
) -> Resp {
    let mut req = reqwest::Client::new().request(method, format!("{}{}", emu.base_url, path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some((ct, b)) = body {
        req = req.header("content-type", ct).body(b);
    }
    let res = req.send().await.unwrap();
    Resp {
        status: res.status().as_u16(),
        headers: res.headers().clone(),
        text: res.text().await.unwrap(),
    }
}

async fn get(emu: &Emulator, token: &str, path: &str) -> Resp {
    call(emu, Method::GET, path, Some(token), &[], None).await
}

async fn send_json(emu: &Emulator, token: &str, method: Method, path: &str, body: Value) -> Resp {
    let b = body.to_string().into_bytes();
    call(
        emu,
        method,
        path,
        Some(token),
        &[],
        Some(("application/json", b)),
    )
    .await
}

async fn query(emu: &Emulator, token: &str, soql: &str, batch: Option<usize>) -> Resp {
    let mut req = reqwest::Client::new()
        .get(format!("{}{V}/query", emu.base_url))
        .query(&[("q", soql)])
        .bearer_auth(token);
    if let Some(n) = batch {
        req = req.header("Sforce-Query-Options", format!("batchSize={n}"));
    }
    let res = req.send().await.unwrap();
    Resp {
        status: res.status().as_u16(),
        headers: res.headers().clone(),
        text: res.text().await.unwrap(),
    }
}

async fn token(emu: &Emulator) -> String {
    let body = format!(
        "grant_type=client_credentials&client_id={}&client_secret={}",
        emu.client_id, emu.client_secret
    );
    let r = call(
        emu,
        Method::POST,
        "/services/oauth2/token",
        None,
        &[],
        Some(("application/x-www-form-urlencoded", body.into_bytes())),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["access_token"].as_str().unwrap().to_owned()
}

fn assert_error(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    let body = r.json();
    assert_eq!(body[0]["errorCode"], code, "{}", r.text);
    assert!(body[0]["message"].is_string(), "{}", r.text);
}

/// The Ids and keys of every record a query returns, following
/// `nextRecordsUrl`; also the page sizes.
async fn query_all(
    emu: &Emulator,
    tok: &str,
    soql: &str,
    batch: Option<usize>,
) -> (Vec<Value>, Vec<usize>) {
    let mut r = query(emu, tok, soql, batch).await;
    let mut records = Vec::new();
    let mut pages = Vec::new();
    loop {
        assert_eq!(r.status, 200, "{}", r.text);
        let body = r.json();
        let page = body["records"].as_array().unwrap();
        pages.push(page.len());
        records.extend(page.iter().cloned());
        if body["done"] == true {
            assert!(body.get("nextRecordsUrl").is_none());
            break;
        }
        let next = body["nextRecordsUrl"].as_str().unwrap().to_owned();
        r = get(emu, tok, &next).await;
    }
    (records, pages)
}

/// Every cell of a CSV whose fields are all quoted (as the emulator writes).
fn csv(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut cells = Vec::new();
            let mut cell = String::new();
            let mut quoted = false;
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '"' if quoted && chars.peek() == Some(&'"') => {
                        chars.next();
                        cell.push('"');
                    }
                    '"' => quoted = !quoted,
                    ',' if !quoted => cells.push(std::mem::take(&mut cell)),
                    _ => cell.push(c),
                }
            }
            cells.push(cell);
            cells
        })
        .collect()
}

async fn wait_for(emu: &Emulator, tok: &str, path: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let r = get(emu, tok, path).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let body = r.json();
        let s = body["state"].as_str().unwrap().to_owned();
        if seen.last() != Some(&s) {
            seen.push(s.clone());
        }
        if s == state {
            assert!(
                seen.len() >= 2,
                "the job was never observed in progress: {seen:?}"
            );
            return body;
        }
        assert!(Instant::now() < deadline, "job stuck in {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn token_endpoint_issues_bearer_tokens_for_the_client_credentials() {
    let emu = start(EmulatorConfig::default()).await;
    let form = |s: String| Some(("application/x-www-form-urlencoded", s.into_bytes()));
    let r = call(
        &emu,
        Method::POST,
        "/services/oauth2/token",
        None,
        &[],
        form(format!(
            "grant_type=client_credentials&client_id={}&client_secret={}",
            emu.client_id, emu.client_secret
        )),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["instance_url"], emu.base_url.as_str());
    for k in ["access_token", "signature", "id", "issued_at", "scope"] {
        assert!(body[k].is_string(), "{k}: {body}");
    }
    let tok = body["access_token"].as_str().unwrap();
    assert!(tok.starts_with("00D") && tok.contains('!'), "{tok}");
    assert_eq!(get(&emu, tok, &format!("{V}/limits")).await.status, 200);

    // Wrong secret, wrong id, wrong grant: OAuth errors, no token.
    let bad = |id: &str, secret: &str, grant: &str| {
        format!("grant_type={grant}&client_id={id}&client_secret={secret}")
    };
    for (body, error) in [
        (
            bad(&emu.client_id, "nope", "client_credentials"),
            "invalid_client",
        ),
        (
            bad("nope", &emu.client_secret, "client_credentials"),
            "invalid_client_id",
        ),
        (
            bad(&emu.client_id, &emu.client_secret, "password"),
            "unsupported_grant_type",
        ),
    ] {
        let r = call(
            &emu,
            Method::POST,
            "/services/oauth2/token",
            None,
            &[],
            form(body),
        )
        .await;
        assert_eq!(r.status, 400, "{}", r.text);
        assert_eq!(r.json()["error"], error, "{}", r.text);
        assert!(r.json()["error_description"].is_string());
    }

    // HTTP Basic client authentication works too.
    let basic = format!(
        "Basic {}",
        base64_std(&format!("{}:{}", emu.client_id, emu.client_secret))
    );
    let r = call(
        &emu,
        Method::POST,
        "/services/oauth2/token",
        None,
        &[("authorization", &basic)],
        form("grant_type=client_credentials".into()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // No token, or a made-up one.
    let r = call(&emu, Method::GET, &format!("{V}/limits"), None, &[], None).await;
    assert_error(&r, 401, "INVALID_SESSION_ID");
    assert_eq!(r.json()[0]["message"], "Session expired or invalid");
    assert_error(
        &get(&emu, "00Dxx!made-up", &format!("{V}/limits")).await,
        401,
        "INVALID_SESSION_ID",
    );
    // A static token works like an issued one.
    assert_eq!(
        get(&emu, &emu.issue_token(), &format!("{V}/limits"))
            .await
            .status,
        200
    );
    assert_eq!(emu.stats().token_requests, 5);
    emu.shutdown().await;
}

fn base64_std(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | (u32::from(c) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn expired_and_revoked_tokens_get_invalid_session_id() {
    let emu = start(EmulatorConfig {
        token_ttl: Some(Duration::from_millis(300)),
        ..EmulatorConfig::default()
    })
    .await;
    let limits = format!("{V}/limits");
    let tok = token(&emu).await;
    assert_eq!(get(&emu, &tok, &limits).await.status, 200);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = get(&emu, &tok, &limits).await;
    assert_error(&r, 401, "INVALID_SESSION_ID");
    assert!(
        r.header("sforce-limit-info").is_none(),
        "a 401 carries no usage"
    );

    // A fresh token works until every token is revoked.
    let fresh = token(&emu).await;
    assert_eq!(get(&emu, &fresh, &limits).await.status, 200);
    emu.expire_tokens();
    assert_error(&get(&emu, &fresh, &limits).await, 401, "INVALID_SESSION_ID");
    let after = token(&emu).await;
    assert_eq!(get(&emu, &after, &limits).await.status, 200);
    // 401s are not counted against the allowance.
    assert_eq!(emu.stats().api_calls, 3);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn every_data_response_carries_the_usage_and_the_allowance_runs_out() {
    let emu = start(EmulatorConfig::default()).await;
    let tok = token(&emu).await;
    // Other integrations have used 10 of 14 calls today.
    emu.set_api_usage(10, 14);
    let r = get(&emu, &tok, &format!("{V}/limits")).await;
    assert_eq!(r.header("sforce-limit-info"), Some("api-usage=11/14"));
    assert_eq!(
        r.json()["DailyApiRequests"],
        json!({"Max": 14, "Remaining": 3})
    );
    let r = get(&emu, &tok, &format!("{V}/sobjects/{OBJ}/describe")).await;
    assert_eq!(r.header("sforce-limit-info"), Some("api-usage=12/14"));
    // Errors count too, and carry the header.
    let r = query(&emu, &tok, "SELECT Id FROM", None).await;
    assert_error(&r, 400, "MALFORMED_QUERY");
    assert_eq!(r.header("sforce-limit-info"), Some("api-usage=13/14"));
    // The version list is free and has no header.
    let r = get(&emu, &tok, "/services/data/").await;
    assert_eq!(r.status, 200);
    assert!(r.header("sforce-limit-info").is_none());
    let r = query(&emu, &tok, &format!("SELECT COUNT() FROM {OBJ}"), None).await;
    assert_eq!(r.header("sforce-limit-info"), Some("api-usage=14/14"));
    // Past the allowance: refused, not counted, for every resource.
    for path in [
        format!("{V}/limits"),
        format!("{V}/query?q=SELECT+Id+FROM+{OBJ}"),
    ] {
        let r = get(&emu, &tok, &path).await;
        assert_error(&r, 403, "REQUEST_LIMIT_EXCEEDED");
        assert_eq!(r.json()[0]["message"], "TotalRequests Limit exceeded.");
        assert_eq!(r.header("sforce-limit-info"), Some("api-usage=14/14"));
    }
    let s = emu.stats();
    assert_eq!(s.api_calls, 4);
    assert_eq!(s.by_route.get("limits"), Some(&2));
    assert_eq!(s.by_route.get("query"), Some(&3));
    assert_eq!(s.by_route.get("versions"), Some(&1));
    // A new day (or a raised allowance) lets calls through again.
    emu.set_api_usage(0, 100);
    let r = get(&emu, &tok, &format!("{V}/limits")).await;
    assert_eq!(r.header("sforce-limit-info"), Some("api-usage=1/100"));
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn describe_shows_external_id_unique_scale_and_types() {
    let emu = start(EmulatorConfig::default()).await;
    let tok = token(&emu).await;
    let r = get(&emu, &tok, &format!("{V}/sobjects/payment__C/describe")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let d = r.json();
    assert_eq!(d["name"], OBJ);
    assert_eq!(d["custom"], true);
    let field = |n: &str| {
        d["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap_or_else(|| panic!("no field {n}"))
            .clone()
    };
    let key = field("Stripe_Charge_Id__c");
    assert_eq!(
        (
            &key["type"],
            &key["externalId"],
            &key["unique"],
            &key["caseSensitive"],
            &key["idLookup"],
            &key["length"]
        ),
        (
            &json!("string"),
            &json!(true),
            &json!(true),
            &json!(false),
            &json!(true),
            &json!(255)
        )
    );
    let amount = field("Amount__c");
    assert_eq!(
        (
            &amount["type"],
            &amount["scale"],
            &amount["precision"],
            &amount["externalId"],
            &amount["unique"]
        ),
        (
            &json!("currency"),
            &json!(2),
            &json!(18),
            &json!(false),
            &json!(false)
        )
    );
    assert_eq!(field("Fee_Rate__c")["type"], "double");
    assert_eq!(field("Fee_Rate__c")["scale"], 4);
    assert_eq!(field("Charged_At__c")["type"], "datetime");
    assert_eq!(field("Settled_On__c")["type"], "date");
    assert_eq!(field("CurrencyIsoCode")["type"], "picklist");
    assert_eq!(field("Code__c")["caseSensitive"], true);
    assert_eq!(field("Code__c")["unique"], false);
    assert_eq!(field("Id")["type"], "id");
    assert_eq!(field("CreatedDate")["createable"], false);
    assert_eq!(field("Name")["type"], "string");

    assert_error(
        &get(&emu, &tok, &format!("{V}/sobjects/Nope__c/describe")).await,
        404,
        "NOT_FOUND",
    );
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn soql_parses_escapes_operators_and_refuses_malformed_queries() {
    let emu = start(EmulatorConfig::default()).await;
    let tok = token(&emu).await;
    let keys = [
        "ch_plain",
        "ch_O'Brien",
        r"ch_back\slash",
        "ch_100%",
        "ch_under_score",
        "ch_\"quoted\"",
        "ch_tab\there",
        "ch_underXscore",
    ];
    for (i, k) in keys.iter().enumerate() {
        emu.insert(OBJ, payment(k, i as i64));
    }
    let esc = |s: &str| {
        let mut o = String::new();
        for c in s.chars() {
            match c {
                '\'' => o.push_str("\\'"),
                '\\' => o.push_str("\\\\"),
                '"' => o.push_str("\\\""),
                '\t' => o.push_str("\\t"),
                _ => o.push(c),
            }
        }
        format!("'{o}'")
    };
    let keys_of = |r: &Resp| -> Vec<String> {
        r.json()["records"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", r.text))
            .iter()
            .map(|x| x["Stripe_Charge_Id__c"].as_str().unwrap().to_owned())
            .collect()
    };

    // IN with every awkward key escaped per SOQL finds exactly those.
    let awkward = &keys[1..7];
    let list: Vec<String> = awkward.iter().map(|k| esc(k)).collect();
    let q = format!(
        "SELECT Id, Stripe_Charge_Id__c FROM {OBJ} WHERE Stripe_Charge_Id__c IN ({}) ORDER BY Stripe_Charge_Id__c",
        list.join(", ")
    );
    let r = query(&emu, &tok, &q, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got: HashSet<String> = keys_of(&r).into_iter().collect();
    assert_eq!(
        got,
        awkward
            .iter()
            .map(|k| k.to_string())
            .collect::<HashSet<_>>()
    );
    // `=` is case-insensitive on a case-insensitive field; `_` and `%` are
    // plain characters outside LIKE.
    let r = query(&emu, &tok, "select id, STRIPE_CHARGE_ID__C from payment__c where Stripe_Charge_Id__c = 'CH_UNDER_SCORE'", None).await;
    assert_eq!(keys_of(&r), ["ch_under_score"]);
    // LIKE: `_` is a wildcard unless escaped, `%` too.
    let r = query(&emu, &tok, &format!("SELECT Stripe_Charge_Id__c FROM {OBJ} WHERE Stripe_Charge_Id__c LIKE 'ch\\_under\\_score' ORDER BY Stripe_Charge_Id__c"), None).await;
    assert_eq!(keys_of(&r), ["ch_under_score"]);
    let r = query(&emu, &tok, &format!("SELECT Stripe_Charge_Id__c FROM {OBJ} WHERE Stripe_Charge_Id__c LIKE 'ch_under_score' ORDER BY Stripe_Charge_Id__c"), None).await;
    assert_eq!(keys_of(&r), ["ch_under_score", "ch_underXscore"]);
    let r = query(
        &emu,
        &tok,
        &format!("SELECT Stripe_Charge_Id__c FROM {OBJ} WHERE Stripe_Charge_Id__c LIKE '%\\%'"),
        None,
    )
    .await;
    assert_eq!(keys_of(&r), ["ch_100%"]);
    // Unicode and line escapes.
    let r = query(
        &emu,
        &tok,
        &format!(
            "SELECT Stripe_Charge_Id__c FROM {OBJ} WHERE Stripe_Charge_Id__c = 'ch\\u005fplain'"
        ),
        None,
    )
    .await;
    assert_eq!(keys_of(&r), ["ch_plain"]);

    // Logic: parentheses, NOT, NOT IN, !=, decimals compared exactly,
    // datetime literals unquoted.
    let q = format!("SELECT Stripe_Charge_Id__c FROM {OBJ} WHERE (Amount__c > 11.01 AND Amount__c <= 13.03) OR (NOT Stripe_Charge_Id__c LIKE 'ch_%') ORDER BY Amount__c DESC");
    let r = query(&emu, &tok, &q, None).await;
    assert_eq!(keys_of(&r), ["ch_100%", "ch_back\\slash"], "{}", r.text);
    let q = format!("SELECT Stripe_Charge_Id__c FROM {OBJ} WHERE CreatedDate >= 2026-01-01T00:00:06Z AND Stripe_Charge_Id__c NOT IN ('ch_tab\\there') ORDER BY CreatedDate");
    assert_eq!(
        keys_of(&query(&emu, &tok, &q, None).await),
        ["ch_underXscore"]
    );
    let q = format!("SELECT Stripe_Charge_Id__c FROM {OBJ} WHERE CreatedDate <= 2026-01-01T01:00:01.000+01:00 AND Stripe_Charge_Id__c != 'ch_plain'");
    assert_eq!(keys_of(&query(&emu, &tok, &q, None).await), ["ch_O'Brien"]);
    let q =
        format!("SELECT Stripe_Charge_Id__c FROM {OBJ} ORDER BY CreatedDate DESC LIMIT 2 OFFSET 1");
    assert_eq!(
        keys_of(&query(&emu, &tok, &q, None).await),
        ["ch_tab\there", "ch_\"quoted\""]
    );

    // Refused: each with the documented error code.
    for (q, code) in [
        (
            format!("SELECT Id FROM {OBJ} WHERE Amount__c > 1 AND Amount__c < 5 OR Id = null"),
            "MALFORMED_QUERY",
        ),
        (
            format!("SELECT Id FROM {OBJ} WHERE Stripe_Charge_Id__c = 'a\\qb'"),
            "MALFORMED_QUERY",
        ),
        (
            format!("SELECT Id FROM {OBJ} WHERE Stripe_Charge_Id__c = 'a\\_b'"),
            "MALFORMED_QUERY",
        ),
        (
            format!("SELECT Id FROM {OBJ} WHERE Stripe_Charge_Id__c = 'open"),
            "MALFORMED_QUERY",
        ),
        (
            format!("SELECT Id FROM {OBJ} WHERE Stripe_Charge_Id__c = \"double\""),
            "MALFORMED_QUERY",
        ),
        (
            format!("SELECT Id FROM {OBJ} WHERE CreatedDate > '2026-01-01T00:00:00Z'"),
            "MALFORMED_QUERY",
        ),
        (
            format!("SELECT Id FROM {OBJ} WHERE Amount__c > '5'"),
            "MALFORMED_QUERY",
        ),
        (
            format!("SELECT Id FROM {OBJ} WHERE Settled_On__c > 2026-01-01T00:00:00Z"),
            "MALFORMED_QUERY",
        ),
        (format!("SELECT Id FORM {OBJ}"), "MALFORMED_QUERY"),
        (format!("SELECT Id, Id FROM {OBJ}"), "MALFORMED_QUERY"),
        (format!("SELECT Id FROM {OBJ} LIMIT"), "MALFORMED_QUERY"),
        (format!("SELECT Nope__c FROM {OBJ}"), "INVALID_FIELD"),
        ("SELECT Id FROM Nope__c".to_owned(), "INVALID_TYPE"),
        (
            format!("SELECT Id FROM {OBJ} OFFSET 2001"),
            "NUMBER_OUTSIDE_VALID_RANGE",
        ),
    ] {
        let r = query(&emu, &tok, &q, None).await;
        assert_error(&r, 400, code);
        if code == "MALFORMED_QUERY" && q.contains("FORM") {
            assert!(
                r.json()[0]["message"]
                    .as_str()
                    .unwrap()
                    .contains("ERROR at Row:1:Column:11"),
                "{}",
                r.text
            );
        }
    }

    // COUNT(): the number only.
    let r = query(
        &emu,
        &tok,
        &format!("SELECT COUNT() FROM {OBJ} WHERE Stripe_Charge_Id__c LIKE 'ch\\_under%'"),
        None,
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"totalSize": 2, "done": true, "records": []})
    );

    // A request URI over 16,384 bytes is refused at the edge.
    let long = format!(
        "SELECT Id FROM {OBJ} WHERE Stripe_Charge_Id__c IN ({})",
        vec!["'ch_xxxxxxxxxxxxxxxxxxxx'"; 800].join(",")
    );
    assert_eq!(query(&emu, &tok, &long, None).await.status, 414);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn five_thousand_records_page_in_batches_each_exactly_once_in_order() {
    let emu = start(EmulatorConfig::default()).await;
    let tok = token(&emu).await;
    // Inserted out of order; the query orders by CreatedDate.
    for i in (0..5000).rev() {
        emu.insert(OBJ, payment(&format!("ch_{i:05}"), i));
    }
    let q = format!("SELECT Id, Stripe_Charge_Id__c, Amount__c, CreatedDate FROM {OBJ} WHERE CreatedDate >= 2026-01-01T00:00:00Z ORDER BY CreatedDate ASC");
    let before = emu.stats();
    let (records, pages) = query_all(&emu, &tok, &q, Some(2000)).await;
    assert_eq!(pages, [2000, 2000, 1000]);
    let keys: Vec<&str> = records
        .iter()
        .map(|r| r["Stripe_Charge_Id__c"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..5000).map(|i| format!("ch_{i:05}")).collect();
    assert_eq!(
        keys,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let ids: HashSet<&str> = records.iter().map(|r| r["Id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 5000);
    // Shape of a record: attributes, then the selected fields.
    let first = &records[0];
    assert_eq!(first["attributes"]["type"], OBJ);
    assert_eq!(
        first["attributes"]["url"],
        format!("{V}/sobjects/{OBJ}/{}", first["Id"].as_str().unwrap())
    );
    assert_eq!(first["CreatedDate"], "2026-01-01T00:00:00.000+0000");
    let after = emu.stats();
    assert_eq!(
        after.by_route["query"] - before.by_route.get("query").copied().unwrap_or(0),
        1
    );
    assert_eq!(after.by_route["query_more"], 2);
    assert_eq!(after.api_calls - before.api_calls, 3);

    // The page size is clamped to 200..=2000; a page can be read again.
    let r = query(&emu, &tok, &q, Some(50)).await;
    let body = r.json();
    assert_eq!(body["records"].as_array().unwrap().len(), 200);
    assert_eq!(body["totalSize"], 5000);
    let next = body["nextRecordsUrl"].as_str().unwrap().to_owned();
    assert!(
        next.starts_with(&format!("{V}/query/01g")) && next.ends_with("-200"),
        "{next}"
    );
    let a = get(&emu, &tok, &next).await.json();
    let b = get(&emu, &tok, &next).await.json();
    assert_eq!(a, b);
    assert_eq!(a["records"][0]["Stripe_Charge_Id__c"], "ch_00200");
    let (_, default_pages) = query_all(&emu, &tok, &q, None).await;
    assert_eq!(default_pages, [2000, 2000, 1000]);
    assert_error(
        &get(&emu, &tok, &format!("{V}/query/01gnope-2000")).await,
        400,
        "INVALID_QUERY_LOCATOR",
    );
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn composite_upsert_creates_updates_and_refuses_per_record() {
    let emu = start(EmulatorConfig::default()).await;
    let tok = token(&emu).await;
    let existing = emu.insert(
        OBJ,
        json!({"Stripe_Charge_Id__c": "ch_Existing", "Amount__c": 1, "Invoice_Number__c": "INV-1"}),
    );
    let path = format!("{V}/composite/sobjects/{OBJ}/Stripe_Charge_Id__c");
    let rec = |fields: Value| {
        let mut m = fields.as_object().unwrap().clone();
        m.insert("attributes".into(), json!({"type": OBJ}));
        Value::Object(m)
    };
    let body = json!({
        "allOrNone": false,
        "records": [
            rec(json!({"Stripe_Charge_Id__c": "ch_new_1", "Amount__c": 12.3, "Charged_At__c": "2026-01-02T03:04:05Z"})),
            // Matches ch_Existing: the key is unique and case-insensitive.
            rec(json!({"Stripe_Charge_Id__c": "CH_EXISTING", "Amount__c": "1234567890123456.78"})),
            // INV-1 belongs to ch_Existing: every unique field is enforced.
            rec(json!({"Stripe_Charge_Id__c": "ch_new_2", "Invoice_Number__c": "inv-1"})),
            rec(json!({"Stripe_Charge_Id__c": "ch_new_3", "Amount__c": "twelve"})),
            rec(json!({"Amount__c": 5})),
            rec(json!({"Stripe_Charge_Id__c": "ch_new_4", "Amount__c": 0.125, "Fee_Rate__c": 1e-3, "Charged_At__c": "2026-03-04T05:06:07.890+02:00"})),
            rec(json!({"Stripe_Charge_Id__c": "ch_new_5", "Amount__c": 12_345_678_901_234_567u64})),
        ],
    });
    let r = send_json(&emu, &tok, Method::PATCH, &path, body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let results = r.json();
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 7);
    assert_eq!(results[0]["success"], true);
    assert_eq!(results[0]["created"], true);
    assert_eq!(results[0]["errors"], json!([]));
    assert_eq!(
        results[1],
        json!({"id": existing, "success": true, "errors": [], "created": false})
    );
    let err = |i: usize| results[i]["errors"][0].clone();
    assert_eq!(results[2]["success"], false);
    assert_eq!(err(2)["statusCode"], "DUPLICATE_VALUE");
    assert_eq!(err(2)["fields"], json!(["Invoice_Number__c"]));
    assert!(
        err(2)["message"].as_str().unwrap().contains(&existing),
        "{}",
        err(2)
    );
    assert_eq!(err(3)["statusCode"], "INVALID_TYPE_ON_FIELD_IN_RECORD");
    assert_eq!(err(4)["statusCode"], "MISSING_ARGUMENT");
    assert_eq!(results[5]["created"], true);
    assert_eq!(err(6)["statusCode"], "NUMBER_OUTSIDE_VALID_RANGE");

    // Money stays exact: written and read back as decimal text, never f64;
    // extra decimals are kept as the API does (no rounding).
    let r = query(&emu, &tok, &format!("SELECT Stripe_Charge_Id__c, Amount__c, Fee_Rate__c, Charged_At__c FROM {OBJ} ORDER BY Stripe_Charge_Id__c"), None).await;
    assert!(
        r.text.contains(r#""Amount__c":1234567890123456.78"#),
        "{}",
        r.text
    );
    assert!(r.text.contains(r#""Amount__c":12.30"#), "{}", r.text);
    assert!(r.text.contains(r#""Amount__c":0.125"#), "{}", r.text);
    assert!(r.text.contains(r#""Fee_Rate__c":0.0010"#), "{}", r.text);
    // Datetimes are stored in UTC, to the second.
    assert!(
        r.text
            .contains(r#""Charged_At__c":"2026-03-04T03:06:07.000+0000""#),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains(r#""Charged_At__c":"2026-01-02T03:04:05.000+0000""#),
        "{}",
        r.text
    );
    let stored = emu.records(OBJ);
    assert_eq!(stored.len(), 3);
    // An update writes every field of the body, the key as given included.
    assert_eq!(stored[0]["Stripe_Charge_Id__c"], "CH_EXISTING");
    assert_eq!(stored[0]["Invoice_Number__c"], "INV-1");

    // The same key twice in one request fails both; a retry of the rest alone works.
    let body = json!({"allOrNone": false, "records": [
        rec(json!({"Stripe_Charge_Id__c": "ch_dup", "Amount__c": 1})),
        rec(json!({"Stripe_Charge_Id__c": "CH_DUP", "Amount__c": 2})),
        rec(json!({"Stripe_Charge_Id__c": "ch_new_6", "Amount__c": 3})),
    ]});
    let r = send_json(&emu, &tok, Method::PATCH, &path, body)
        .await
        .json();
    assert_eq!(r[0]["errors"][0]["statusCode"], "DUPLICATE_VALUE");
    assert_eq!(r[1]["errors"][0]["statusCode"], "DUPLICATE_VALUE");
    assert_eq!(r[2]["created"], true);

    // allOrNone: one failure rolls the others back.
    let before = emu.records(OBJ).len();
    let body = json!({"allOrNone": true, "records": [
        rec(json!({"Stripe_Charge_Id__c": "ch_aon_1", "Amount__c": 1})),
        rec(json!({"Stripe_Charge_Id__c": "ch_aon_2", "Amount__c": "x"})),
    ]});
    let r = send_json(&emu, &tok, Method::PATCH, &path, body)
        .await
        .json();
    assert_eq!(
        r[0]["errors"][0]["statusCode"],
        "ALL_OR_NONE_OPERATION_ROLLED_BACK"
    );
    assert_eq!(emu.records(OBJ).len(), before);

    // A non-unique, case-sensitive external ID matches case-sensitively.
    let code_path = format!("{V}/composite/sobjects/{OBJ}/Code__c");
    let body = json!({"records": [rec(json!({"Code__c": "AbC"})), rec(json!({"Code__c": "abc"}))]});
    let r = send_json(&emu, &tok, Method::PATCH, &code_path, body)
        .await
        .json();
    assert_eq!(
        (r[0]["created"].clone(), r[1]["created"].clone()),
        (json!(true), json!(true))
    );

    // Create (insert mode): never touches an existing record; the key is
    // unique, so an existing key is refused.
    let body = json!({"allOrNone": false, "records": [
        rec(json!({"Stripe_Charge_Id__c": "ch_new_1", "Amount__c": 99})),
        rec(json!({"Stripe_Charge_Id__c": "ch_created", "Amount__c": 7})),
    ]});
    let r = send_json(
        &emu,
        &tok,
        Method::POST,
        &format!("{V}/composite/sobjects"),
        body,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = r.json();
    assert_eq!(r[0]["success"], false);
    assert_eq!(r[0]["errors"][0]["statusCode"], "DUPLICATE_VALUE");
    assert_eq!(r[0]["errors"][0]["fields"], json!(["Stripe_Charge_Id__c"]));
    assert_eq!(r[1]["success"], true);
    assert!(r[1].get("created").is_none(), "{r}");
    let new_1: Vec<Value> = emu
        .records(OBJ)
        .into_iter()
        .filter(|x| x["Stripe_Charge_Id__c"] == "ch_new_1")
        .collect();
    assert_eq!(new_1.len(), 1);
    assert_eq!(new_1[0]["Amount__c"].to_string(), "12.30");
    assert_eq!(emu.stats().by_route["composite_create"], 1);

    // Request-level refusals.
    let many: Vec<Value> = (0..201)
        .map(|i| rec(json!({"Stripe_Charge_Id__c": format!("ch_m{i}")})))
        .collect();
    let r = send_json(&emu, &tok, Method::PATCH, &path, json!({"records": many})).await;
    assert_error(&r, 400, "EXCEEDED_ID_LIMIT");
    let r = send_json(
        &emu,
        &tok,
        Method::PATCH,
        &path,
        json!({"records": [rec(json!({"Stripe_Charge_Id__c": "x", "Nope__c": 1}))]}),
    )
    .await;
    assert_error(&r, 400, "INVALID_FIELD");
    let r = send_json(
        &emu,
        &tok,
        Method::PATCH,
        &format!("{V}/composite/sobjects/{OBJ}/Amount__c"),
        json!({"records": []}),
    )
    .await;
    assert_error(&r, 400, "INVALID_FIELD");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn bulk_query_results_are_the_rest_query_records() {
    let emu = start(slow_jobs()).await;
    let tok = token(&emu).await;
    for i in 0..2500 {
        let mut p = payment(&format!("ch_{i:05}"), i);
        if i % 7 == 0 {
            p["Settled_On__c"] = json!("2026-02-03");
        }
        if i == 3 {
            p["Stripe_Charge_Id__c"] = json!("ch_00003, \"quoted\"");
        }
        emu.insert(OBJ, p);
    }
    let soql = format!("SELECT Id, Stripe_Charge_Id__c, Amount__c, Settled_On__c, CreatedDate FROM {OBJ} WHERE CreatedDate >= 2026-01-01T00:00:00Z ORDER BY CreatedDate");
    let (rest, _) = query_all(&emu, &tok, &soql, Some(2000)).await;
    assert_eq!(rest.len(), 2500);

    let r = send_json(
        &emu,
        &tok,
        Method::POST,
        &format!("{V}/jobs/query"),
        json!({"operation": "query", "query": soql}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let job = r.json();
    assert_eq!(job["state"], "UploadComplete");
    assert_eq!(job["operation"], "query");
    assert_eq!(job["object"], OBJ);
    let id = job["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("750"));
    // Results before completion are refused.
    assert_eq!(
        get(&emu, &tok, &format!("{V}/jobs/query/{id}/results"))
            .await
            .status,
        400
    );
    let done = wait_for(&emu, &tok, &format!("{V}/jobs/query/{id}"), "JobComplete").await;
    assert_eq!(done["numberRecordsProcessed"], 2500);

    let mut rows = Vec::new();
    let mut locator: Option<String> = None;
    let mut sets = Vec::new();
    loop {
        let mut path = format!("{V}/jobs/query/{id}/results?maxRecords=1000");
        if let Some(l) = &locator {
            path.push_str(&format!("&locator={l}"));
        }
        let r = get(&emu, &tok, &path).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(r.header("content-type").unwrap().starts_with("text/csv"));
        let mut table = csv(&r.text);
        assert_eq!(
            table.remove(0),
            [
                "Id",
                "Stripe_Charge_Id__c",
                "Amount__c",
                "Settled_On__c",
                "CreatedDate"
            ]
        );
        assert_eq!(
            r.header("sforce-numberofrecords"),
            Some(table.len().to_string().as_str())
        );
        sets.push(table.len());
        rows.extend(table);
        match r.header("sforce-locator") {
            Some("null") => break,
            Some(l) => locator = Some(l.to_owned()),
            None => panic!("no Sforce-Locator"),
        }
    }
    assert_eq!(sets, [1000, 1000, 500]);
    // Field for field the same as the REST query (datetimes: `Z` in CSV).
    for (row, rec) in rows.iter().zip(&rest) {
        let text = |v: &Value| match v {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let expected = [
            text(&rec["Id"]),
            text(&rec["Stripe_Charge_Id__c"]),
            text(&rec["Amount__c"]),
            text(&rec["Settled_On__c"]),
            text(&rec["CreatedDate"]).replace("+0000", "Z"),
        ];
        assert_eq!(row, &expected);
    }
    assert_eq!(rows[3][1], "ch_00003, \"quoted\"");
    // Results are read with the API version the job was created with.
    let r = get(
        &emu,
        &tok,
        &format!("/services/data/v61.0/jobs/query/{id}/results"),
    )
    .await;
    assert_eq!(r.status, 409);
    // COUNT() is not a bulk query.
    let r = send_json(
        &emu,
        &tok,
        Method::POST,
        &format!("{V}/jobs/query"),
        json!({"operation": "query", "query": format!("SELECT COUNT() FROM {OBJ}")}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = send_json(
        &emu,
        &tok,
        Method::POST,
        &format!("{V}/jobs/query"),
        json!({"operation": "query", "query": "SELECT Id FROM"}),
    )
    .await;
    assert_error(&r, 400, "MALFORMED_QUERY");
    let s = emu.stats();
    assert_eq!(s.by_route["bulk_query_results"], 5);
    assert_eq!(s.by_route["bulk_query_create"], 3);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn bulk_ingest_upsert_reports_created_updated_and_failed_rows() {
    let emu = start(slow_jobs()).await;
    let tok = token(&emu).await;
    let existing = emu.insert(
        OBJ,
        json!({"Stripe_Charge_Id__c": "ch_1", "Amount__c": "1.00", "Invoice_Number__c": "INV-9"}),
    );
    let r = send_json(
        &emu,
        &tok,
        Method::POST,
        &format!("{V}/jobs/ingest"),
        json!({"object": OBJ, "externalIdFieldName": "Stripe_Charge_Id__c", "contentType": "CSV", "operation": "upsert", "lineEnding": "LF"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let job = r.json();
    assert_eq!(job["state"], "Open");
    assert_eq!(job["externalIdFieldName"], "Stripe_Charge_Id__c");
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(
        job["contentUrl"],
        format!("services/data/v62.0/jobs/ingest/{id}/batches")
    );

    let data = "Stripe_Charge_Id__c,Amount__c,Charged_At__c,Invoice_Number__c\n\
                ch_1,10.50,2026-01-02T03:04:05.000Z,\n\
                ch_2,\"1,000.00\",,\n\
                ch_3,20.25,2026-01-02T03:04:05.000+0100,#N/A\n\
                ch_4,7,,INV-9\n";
    let r = call(
        &emu,
        Method::PUT,
        &format!("{V}/jobs/ingest/{id}/batches"),
        Some(&tok),
        &[],
        Some(("text/csv", data.as_bytes().to_vec())),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = send_json(
        &emu,
        &tok,
        Method::PATCH,
        &format!("{V}/jobs/ingest/{id}"),
        json!({"state": "UploadComplete"}),
    )
    .await;
    assert_eq!(r.json()["state"], "UploadComplete", "{}", r.text);
    // No more data once closed.
    let r = call(
        &emu,
        Method::PUT,
        &format!("{V}/jobs/ingest/{id}/batches"),
        Some(&tok),
        &[],
        Some(("text/csv", data.as_bytes().to_vec())),
    )
    .await;
    assert_eq!(r.status, 409);

    let done = wait_for(&emu, &tok, &format!("{V}/jobs/ingest/{id}"), "JobComplete").await;
    assert_eq!(done["numberRecordsProcessed"], 4);
    assert_eq!(done["numberRecordsFailed"], 2);

    let ok = csv(&get(
        &emu,
        &tok,
        &format!("{V}/jobs/ingest/{id}/successfulResults/"),
    )
    .await
    .text);
    assert_eq!(
        ok[0],
        [
            "sf__Id",
            "sf__Created",
            "Stripe_Charge_Id__c",
            "Amount__c",
            "Charged_At__c",
            "Invoice_Number__c"
        ]
    );
    assert_eq!(ok.len(), 3);
    assert_eq!(
        ok[1][..3],
        [existing.clone(), "false".into(), "ch_1".into()]
    );
    assert_eq!(ok[2][1..3], ["true", "ch_3"]);
    assert_eq!(ok[2][0].len(), 18);

    let failed = csv(
        &get(&emu, &tok, &format!("{V}/jobs/ingest/{id}/failedResults/"))
            .await
            .text,
    );
    assert_eq!(failed[0][..2], ["sf__Id", "sf__Error"]);
    assert_eq!(failed.len(), 3);
    assert_eq!(failed[1][2], "ch_2");
    assert!(
        failed[1][1].starts_with("INVALID_TYPE_ON_FIELD_IN_RECORD:Amount__c"),
        "{:?}",
        failed[1]
    );
    assert!(failed[1][1].ends_with(" --"), "{:?}", failed[1]);
    assert_eq!(failed[2][2], "ch_4");
    assert!(
        failed[2][1].starts_with("DUPLICATE_VALUE:"),
        "{:?}",
        failed[2]
    );
    let unprocessed = csv(&get(
        &emu,
        &tok,
        &format!("{V}/jobs/ingest/{id}/unprocessedrecords/"),
    )
    .await
    .text);
    assert_eq!(unprocessed.len(), 1, "header only: {unprocessed:?}");

    // The records: ch_1 updated (an empty cell leaves a field as is), ch_3
    // created with its datetime converted to UTC.
    let recs = emu.records(OBJ);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0]["Amount__c"].to_string(), "10.50");
    assert_eq!(recs[0]["Invoice_Number__c"], "INV-9");
    assert_eq!(recs[1]["Stripe_Charge_Id__c"], "ch_3");
    assert_eq!(recs[1]["Charged_At__c"], "2026-01-02T02:04:05.000+0000");
    assert_eq!(recs[1]["Invoice_Number__c"], Value::Null);
    assert_eq!(recs[1]["CurrencyIsoCode"], "USD");

    // Insert never changes an existing record: a taken unique key fails the row.
    let r = send_json(
        &emu,
        &tok,
        Method::POST,
        &format!("{V}/jobs/ingest"),
        json!({"object": OBJ, "operation": "insert", "contentType": "CSV", "lineEnding": "LF"}),
    )
    .await;
    let ins = r.json()["id"].as_str().unwrap().to_owned();
    let data = "Stripe_Charge_Id__c,Amount__c\nch_1,999.00\nch_5,5.00\n";
    call(
        &emu,
        Method::PUT,
        &format!("{V}/jobs/ingest/{ins}/batches"),
        Some(&tok),
        &[],
        Some(("text/csv", data.as_bytes().to_vec())),
    )
    .await;
    send_json(
        &emu,
        &tok,
        Method::PATCH,
        &format!("{V}/jobs/ingest/{ins}"),
        json!({"state": "UploadComplete"}),
    )
    .await;
    let done = wait_for(&emu, &tok, &format!("{V}/jobs/ingest/{ins}"), "JobComplete").await;
    assert_eq!(
        (
            done["numberRecordsProcessed"].clone(),
            done["numberRecordsFailed"].clone()
        ),
        (json!(2), json!(1))
    );
    let failed = csv(
        &get(&emu, &tok, &format!("{V}/jobs/ingest/{ins}/failedResults"))
            .await
            .text,
    );
    assert_eq!(failed[1][2], "ch_1");
    assert!(
        failed[1][1].starts_with("DUPLICATE_VALUE:"),
        "{:?}",
        failed[1]
    );
    let ok = csv(&get(
        &emu,
        &tok,
        &format!("{V}/jobs/ingest/{ins}/successfulResults"),
    )
    .await
    .text);
    assert_eq!(ok[1][1..3], ["true", "ch_5"]);
    assert_eq!(emu.records(OBJ)[0]["Amount__c"].to_string(), "10.50");

    // An unknown column fails the whole job.
    let r = send_json(
        &emu,
        &tok,
        Method::POST,
        &format!("{V}/jobs/ingest"),
        json!({"object": OBJ, "operation": "insert"}),
    )
    .await;
    let id2 = r.json()["id"].as_str().unwrap().to_owned();
    call(
        &emu,
        Method::PUT,
        &format!("{V}/jobs/ingest/{id2}/batches"),
        Some(&tok),
        &[],
        Some(("text/csv", b"Nope__c\nx\n".to_vec())),
    )
    .await;
    let r = send_json(
        &emu,
        &tok,
        Method::PATCH,
        &format!("{V}/jobs/ingest/{id2}"),
        json!({"state": "UploadComplete"}),
    )
    .await;
    assert_eq!(r.json()["state"], "Failed");
    let info = get(&emu, &tok, &format!("{V}/jobs/ingest/{id2}"))
        .await
        .json();
    assert_eq!(info["state"], "Failed");
    assert!(
        info["errorMessage"].as_str().unwrap().contains("Nope__c"),
        "{info}"
    );
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn faults_answer_before_auth_and_processing() {
    let emu = start(EmulatorConfig::default()).await;
    let tok = token(&emu).await;
    let limits = format!("{V}/limits");
    emu.set_faults(vec![
        Fault {
            kind: FaultKind::Unavailable,
            after: 0,
            times: 1,
        },
        Fault {
            kind: FaultKind::RateLimited,
            after: 1,
            times: 1,
        },
        Fault {
            kind: FaultKind::ServerError,
            after: 2,
            times: 1,
        },
        Fault {
            kind: FaultKind::DropConnection,
            after: 3,
            times: 1,
        },
        Fault {
            kind: FaultKind::TruncatedJson,
            after: 4,
            times: 1,
        },
        Fault {
            kind: FaultKind::Slow(Duration::from_millis(300)),
            after: 5,
            times: 1,
        },
    ]);
    assert_error(&get(&emu, &tok, &limits).await, 503, "SERVER_UNAVAILABLE");
    let r = get(&emu, &tok, &limits).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_error(&get(&emu, &tok, &limits).await, 500, "UNKNOWN_EXCEPTION");
    // A dropped connection: no response at all, and nothing written.
    let path = format!(
        "{}{V}/composite/sobjects/{OBJ}/Stripe_Charge_Id__c",
        emu.base_url
    );
    let body =
        json!({"records": [{"attributes": {"type": OBJ}, "Stripe_Charge_Id__c": "ch_lost"}]});
    let res = reqwest::Client::new()
        .patch(&path)
        .bearer_auth(&tok)
        .json(&body)
        .send()
        .await;
    assert!(res.is_err(), "{res:?}");
    assert!(emu.records(OBJ).is_empty());
    // A truncated response: processed, half a body.
    let r = send_json(
        &emu,
        &tok,
        Method::PATCH,
        &format!("{V}/composite/sobjects/{OBJ}/Stripe_Charge_Id__c"),
        body,
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        serde_json::from_str::<Value>(&r.text).is_err(),
        "{}",
        r.text
    );
    assert_eq!(emu.records(OBJ).len(), 1);
    let t = Instant::now();
    assert_eq!(get(&emu, &tok, &limits).await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(300));
    // Faults are not counted against the allowance; processed requests are.
    assert_eq!(emu.stats().api_calls, 2);
    assert_eq!(emu.stats().requests, 7);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn versions_are_listed_and_others_are_not_found() {
    let emu = start(EmulatorConfig {
        oldest_api_version: "60.0".into(),
        ..EmulatorConfig::default()
    })
    .await;
    // No token needed, not counted.
    let r = call(&emu, Method::GET, "/services/data/", None, &[], None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json(),
        json!([
            {"label": "Spring '24", "url": "/services/data/v60.0", "version": "60.0"},
            {"label": "Summer '24", "url": "/services/data/v61.0", "version": "61.0"},
            {"label": "Winter '25", "url": "/services/data/v62.0", "version": "62.0"},
        ])
    );
    assert_eq!(r.header("sforce-limit-info"), None);
    let tok = token(&emu).await;
    // An unserved version answers as an unknown object does.
    let unserved = get(
        &emu,
        &tok,
        &format!("/services/data/v59.0/sobjects/{OBJ}/describe"),
    )
    .await;
    assert_error(&unserved, 404, "NOT_FOUND");
    let unknown = get(&emu, &tok, &format!("{V}/sobjects/Nope__c/describe")).await;
    assert_error(&unknown, 404, "NOT_FOUND");
    assert_eq!(unserved.json(), unknown.json());
    assert_eq!(
        unserved.json(),
        json!([{"errorCode": "NOT_FOUND", "message": "The requested resource does not exist"}])
    );
    assert_eq!(unserved.header("sforce-limit-info"), None, "not counted");
    assert_eq!(get(&emu, &tok, &format!("{V}/limits")).await.status, 200);
    assert_eq!(
        emu.stats().api_calls,
        2,
        "the unknown object and the limits"
    );
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_field_the_user_cannot_edit_fails_its_record_as_documented() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    emu.define_object(
        OBJ,
        vec![
            FieldDef::external_id("Stripe_Charge_Id__c"),
            FieldDef::text("Status__c").read_only(),
            FieldDef {
                updateable: false,
                ..FieldDef::text("Note__c")
            },
        ],
    );
    let tok = token(&emu).await;
    let d = get(&emu, &tok, &format!("{V}/sobjects/{OBJ}/describe"))
        .await
        .json();
    let field = |n: &str| {
        d["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            field("Status__c")["createable"].clone(),
            field("Status__c")["updateable"].clone()
        ),
        (json!(false), json!(false))
    );
    assert_eq!(
        (
            field("Note__c")["createable"].clone(),
            field("Note__c")["updateable"].clone()
        ),
        (json!(true), json!(false))
    );
    let upsert = format!("{V}/composite/sobjects/{OBJ}/Stripe_Charge_Id__c");
    let rec = |key: &str, extra: Value| {
        let mut r = json!({"attributes": {"type": OBJ}, "Stripe_Charge_Id__c": key});
        for (k, v) in extra.as_object().unwrap() {
            r[k] = v.clone();
        }
        r
    };
    let r = send_json(
        &emu,
        &tok,
        Method::PATCH,
        &upsert,
        json!({"allOrNone": false, "records": [
            rec("ch_1", json!({"Status__c": "succeeded"})),
            rec("ch_2", json!({"Note__c": "first"})),
        ]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let out = r.json();
    assert_eq!(out[0]["success"], false, "{out}");
    assert_eq!(
        out[0]["errors"][0]["statusCode"],
        "INVALID_FIELD_FOR_INSERT_UPDATE"
    );
    assert_eq!(out[0]["errors"][0]["fields"], json!(["Status__c"]));
    assert_eq!(
        out[1]["created"], true,
        "Note__c can be set on create: {out}"
    );
    // Not stripped and stored: refused whole.
    let keys: Vec<Value> = emu
        .records(OBJ)
        .iter()
        .map(|r| r["Stripe_Charge_Id__c"].clone())
        .collect();
    assert_eq!(keys, [json!("ch_2")]);
    // Updating Note__c is refused; the record keeps its value.
    let r = send_json(
        &emu,
        &tok,
        Method::PATCH,
        &upsert,
        json!({"records": [rec("ch_2", json!({"Note__c": "second"}))]}),
    )
    .await;
    assert_eq!(
        r.json()[0]["errors"][0]["statusCode"],
        "INVALID_FIELD_FOR_INSERT_UPDATE",
        "{}",
        r.text
    );
    assert_eq!(emu.records(OBJ)[0]["Note__c"], "first");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn after_work_faults_lose_the_answer_of_a_call_that_was_processed() {
    let emu = start(EmulatorConfig::default()).await;
    let tok = token(&emu).await;
    emu.set_route_faults(
        "composite_create",
        vec![
            Fault {
                kind: FaultKind::ServerErrorAfterWork,
                after: 0,
                times: 1,
            },
            Fault {
                kind: FaultKind::DropAfterWork,
                after: 1,
                times: 1,
            },
        ],
    );
    let create = |key: &str| json!({"allOrNone": false, "records": [{"attributes": {"type": OBJ}, "Stripe_Charge_Id__c": key}]});
    // Other routes are not counted by the create route's plan.
    assert_eq!(get(&emu, &tok, &format!("{V}/limits")).await.status, 200);
    let path = format!("{V}/composite/sobjects");
    let r = send_json(&emu, &tok, Method::POST, &path, create("ch_1")).await;
    assert_error(&r, 500, "UNKNOWN_EXCEPTION");
    let res = reqwest::Client::new()
        .post(format!("{}{path}", emu.base_url))
        .bearer_auth(&tok)
        .json(&create("ch_2"))
        .send()
        .await;
    assert!(res.is_err(), "no answer: {res:?}");
    assert_eq!(emu.records(OBJ).len(), 2, "both were processed");
    // A resend meets its own first call's record.
    let r = send_json(&emu, &tok, Method::POST, &path, create("ch_1")).await;
    assert_eq!(
        r.json()[0]["errors"][0]["statusCode"],
        "DUPLICATE_VALUE",
        "{}",
        r.text
    );
    assert_eq!(emu.stats().by_route.get("composite_create"), Some(&3));
    emu.shutdown().await;
}
