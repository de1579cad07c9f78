//! The emulator's routes and state (see the module docs of `emulator`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::State;
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::Response;
use axum::Router;
use recon_core::Currency;
use recon_emulator_kit::{
    base64_decode, fnv1a64, percent_decode, AfterWork, FaultPlan, IdSeq, Injected, Transport,
    TransportFault, MALFORMED_JSON_BODY,
};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::query::{self, format_micros, micros};
use super::{EmuStats, EmulatorConfig, Kind};

/// A reply before the transport's after-work faults.
struct Reply {
    status: u16,
    body: Vec<u8>,
    throttled: bool,
    retry_after: bool,
}

fn reply(status: u16, body: Value) -> Reply {
    Reply {
        status,
        body: serde_json::to_vec(&body).unwrap_or_default(),
        throttled: false,
        retry_after: false,
    }
}

#[derive(Default)]
struct Tokens {
    /// Refresh token → still valid.
    refresh: HashMap<String, bool>,
    /// Refresh tokens rotated out, and when (for `refresh_grace`).
    retired: HashMap<String, Instant>,
    /// Access token → when it expires.
    access: HashMap<String, Instant>,
    issued: Vec<String>,
}

#[derive(Default)]
struct Store {
    next_id: u64,
    /// Id → (kind, entity).
    entities: BTreeMap<u64, (Kind, Value)>,
}

struct Remembered {
    hash: u64,
    status: u16,
    body: Vec<u8>,
    at: Instant,
}

#[derive(Default)]
struct Meter {
    requests: VecDeque<Instant>,
    batches: VecDeque<Instant>,
}

pub(super) struct Shared {
    cfg: EmulatorConfig,
    pub(super) client_id: String,
    pub(super) client_secret: String,
    pub(super) transport: Transport,
    ids: IdSeq,
    tokens: Mutex<Tokens>,
    store: Mutex<Store>,
    requestids: Mutex<HashMap<String, Remembered>>,
    meter: Mutex<Meter>,
    in_flight: AtomicU64,
    stats: Mutex<EmuStats>,
    /// An entity another user saves just before the next update of it.
    edit_before_update: Mutex<Option<u64>>,
    /// Faults of batch requests only, counted over batch requests.
    pub(super) batch_faults: Mutex<FaultPlan<TransportFault>>,
}

/// Decrements the company's in-flight count when dropped.
struct Busy<'a>(&'a AtomicU64);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn fault(kind: &str, code: &str, message: &str, detail: &str) -> Value {
    json!({
        "Fault": {
            "Error": [{"Message": message, "Detail": detail, "code": code, "element": ""}],
            "type": kind,
        },
        "time": now_text(-8),
    })
}

fn validation(code: &str, message: &str, detail: &str) -> Value {
    fault("ValidationFault", code, message, detail)
}

fn now_text(offset_hours: i8) -> String {
    let tz = jiff::tz::TimeZone::fixed(
        jiff::tz::Offset::from_hours(offset_hours).unwrap_or(jiff::tz::Offset::UTC),
    );
    jiff::Timestamp::now()
        .to_zoned_datetime(tz)
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string()
}

fn number(text: &str) -> Value {
    serde_json::from_str::<Value>(text).unwrap_or(Value::Null)
}

/// `value` as decimal text: a JSON number's own digits, or a string.
fn decimal_text(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

impl Shared {
    pub(super) fn new(cfg: EmulatorConfig) -> Shared {
        let ids = IdSeq::new();
        let client_id = format!("AB{:016x}", ids.next());
        let client_secret = format!(
            "sec{:032x}",
            u128::from(ids.next()) << 64 | u128::from(ids.next())
        );
        Shared {
            transport: Transport::new(cfg.latency),
            cfg,
            client_id,
            client_secret,
            ids,
            tokens: Mutex::new(Tokens::default()),
            store: Mutex::new(Store::default()),
            requestids: Mutex::new(HashMap::new()),
            meter: Mutex::new(Meter::default()),
            in_flight: AtomicU64::new(0),
            stats: Mutex::new(EmuStats::default()),
            edit_before_update: Mutex::new(None),
            batch_faults: Mutex::new(FaultPlan::default()),
        }
    }

    fn token(&self, prefix: &str) -> String {
        format!("{prefix}{:016x}{:016x}", self.ids.next(), self.ids.next())
    }

    pub(super) fn issue_refresh_token(&self) -> String {
        let t = self.token("RT1-");
        let mut tokens = self.tokens.lock().unwrap();
        tokens.refresh.insert(t.clone(), true);
        tokens.issued.push(t.clone());
        t
    }

    pub(super) fn revoke_all(&self) {
        let mut tokens = self.tokens.lock().unwrap();
        for v in tokens.refresh.values_mut() {
            *v = false;
        }
        tokens.retired.clear();
        tokens.access.clear();
    }

    pub(super) fn expire_access_tokens(&self) {
        self.tokens.lock().unwrap().access.clear();
    }

    pub(super) fn valid_refresh_tokens(&self) -> Vec<String> {
        let tokens = self.tokens.lock().unwrap();
        let mut v: Vec<String> = tokens
            .refresh
            .iter()
            .filter(|(_, ok)| **ok)
            .map(|(t, _)| t.clone())
            .collect();
        v.sort();
        v
    }

    pub(super) fn issued_tokens(&self) -> Vec<String> {
        self.tokens.lock().unwrap().issued.clone()
    }

    pub(super) fn stats(&self) -> EmuStats {
        let mut s = self.stats.lock().unwrap().clone();
        s.transport = self.transport.stats();
        s
    }

    fn count_route(&self, route: &str) {
        *self
            .stats
            .lock()
            .unwrap()
            .by_route
            .entry(route.to_string())
            .or_insert(0) += 1;
    }

    pub(super) fn entities(&self, kind: Kind) -> Vec<Value> {
        self.store
            .lock()
            .unwrap()
            .entities
            .values()
            .filter(|(k, _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub(super) fn bump_sync_token(&self, id: &str) {
        let mut store = self.store.lock().unwrap();
        if let Some((_, e)) = id
            .parse()
            .ok()
            .and_then(|n: u64| store.entities.get_mut(&n))
        {
            let t: u64 = e["SyncToken"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            e["SyncToken"] = json!((t + 1).to_string());
        }
    }

    pub(super) fn edit_before_next_update(&self, id: &str) {
        *self.edit_before_update.lock().unwrap() = id.parse().ok();
    }

    pub(super) fn seed(&self, kind: Kind, mut entity: Value) -> String {
        let mut store = self.store.lock().unwrap();
        store.next_id += 1;
        let id = store.next_id;
        let now = now_text(self.cfg.utc_offset_hours);
        let e = entity.as_object_mut().expect("an entity is a JSON object");
        e.insert("Id".into(), json!(id.to_string()));
        e.entry("SyncToken").or_insert(json!("0"));
        e.entry("domain").or_insert(json!("QBO"));
        e.entry("sparse").or_insert(json!(false));
        e.entry("MetaData")
            .or_insert(json!({"CreateTime": now, "LastUpdatedTime": now}));
        if kind != Kind::Customer {
            e.entry("TxnDate").or_insert(json!(now[..10].to_string()));
            let currency = e
                .get("CurrencyRef")
                .and_then(|c| c["value"].as_str())
                .unwrap_or(&self.cfg.home_currency)
                .to_string();
            e.insert("CurrencyRef".into(), json!({"value": currency}));
            e.entry("ExchangeRate").or_insert(json!(1));
            let total = self.line_total(e.get("Line"), &currency).ok();
            if let (Some(total), false) = (total, e.contains_key("TotalAmt")) {
                e.insert("TotalAmt".into(), number(&total));
            }
            self.dress(kind, e);
        }
        store.entities.insert(id, (kind, entity));
        id.to_string()
    }

    /// Decimals an amount in `currency` may carry.
    fn decimals(&self, currency: &str) -> u32 {
        self.cfg
            .currency_decimals
            .get(currency)
            .copied()
            .or_else(|| Currency::parse(currency).ok().map(|c| c.exponent()))
            .unwrap_or(2)
    }

    /// The exact sum of the sales lines, as text with the currency's decimals.
    fn line_total(&self, lines: Option<&Value>, currency: &str) -> Result<String, Value> {
        let lines = lines.and_then(Value::as_array).cloned().unwrap_or_default();
        let decimals = self.decimals(currency);
        let mut total: i128 = 0;
        let mut any = false;
        for l in &lines {
            if l["DetailType"] != json!("SalesItemLineDetail") {
                continue;
            }
            any = true;
            let text = decimal_text(&l["Amount"]).unwrap_or_default();
            let Some(m) = micros(&text) else {
                return Err(validation(
                    "2020",
                    "Required param missing, need to supply the required value for the API",
                    "Required parameter Line.Amount is missing in the request",
                ));
            };
            if format_micros(m, decimals).is_none() {
                return Err(validation(
                    "6000",
                    "A business validation error has occurred while processing your request",
                    &format!("Business Validation Error: The amount {text} has more decimal places than {currency} allows ({decimals})."),
                ));
            }
            total += m;
        }
        if !any {
            return Err(validation(
                "6000",
                "A business validation error has occurred while processing your request",
                "Business Validation Error: a transaction needs at least one sales line.",
            ));
        }
        Ok(format_micros(total, decimals).unwrap_or_default())
    }

    /// Adds line ids, the subtotal line, custom field names.
    fn dress(&self, kind: Kind, e: &mut Map<String, Value>) {
        if let Some(Value::Array(lines)) = e.get_mut("Line") {
            lines.retain(|l| l["DetailType"] != json!("SubTotalLineDetail"));
            for (i, l) in lines.iter_mut().enumerate() {
                l["Id"] = json!((i + 1).to_string());
                l["LineNum"] = json!(i + 1);
            }
            if self.cfg.subtotal_line {
                let total = e.get("TotalAmt").cloned().unwrap_or(Value::Null);
                if let Some(Value::Array(lines)) = e.get_mut("Line") {
                    lines.push(json!({"Amount": total, "DetailType": "SubTotalLineDetail", "SubTotalLineDetail": {}}));
                }
            }
        }
        if kind == Kind::Invoice && !e.contains_key("Balance") {
            if let Some(t) = e.get("TotalAmt").cloned() {
                e.insert("Balance".into(), t);
            }
        }
        if let Some(Value::Array(fields)) = e.get_mut("CustomField") {
            for f in fields.iter_mut() {
                let idx: usize = f["DefinitionId"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                if let Some(name) = idx
                    .checked_sub(1)
                    .and_then(|i| self.cfg.custom_fields.get(i))
                {
                    f["Name"] = json!(name);
                    f["Type"] = json!("StringType");
                }
            }
        }
    }

    /// Checks and completes a create of `kind` from `body`.
    fn create(&self, store: &mut Store, kind: Kind, body: &Value) -> Result<Value, Value> {
        let Some(src) = body.as_object() else {
            return Err(validation(
                "2310",
                "Invalid Request",
                "The request body is not a JSON object",
            ));
        };
        let mut e = src.clone();
        for k in [
            "Id",
            "SyncToken",
            "MetaData",
            "TotalAmt",
            "Balance",
            "domain",
        ] {
            e.remove(k);
        }
        let customer = e
            .get("CustomerRef")
            .and_then(|c| query::prop_text(&json!({"c": c}), "c"));
        let customer = match customer {
            Some(id) => {
                let found = id.parse::<u64>().ok().and_then(|n| store.entities.get(&n));
                match found {
                    Some((Kind::Customer, c)) => Some(c.clone()),
                    _ => {
                        return Err(validation(
                            "2500",
                            "Invalid Reference Id",
                            &format!("Invalid Reference Id : Customer assigned to this transaction has been deleted or does not exist (CustomerRef {id})"),
                        ))
                    }
                }
            }
            None if kind == Kind::Invoice => {
                return Err(validation(
                    "2020",
                    "Required param missing, need to supply the required value for the API",
                    "Required parameter CustomerRef is missing in the request",
                ));
            }
            None => None,
        };
        for l in e
            .get("Line")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if l["DetailType"] == json!("SalesItemLineDetail") {
                let item = l["SalesItemLineDetail"]["ItemRef"]["value"]
                    .as_str()
                    .unwrap_or("");
                if !self.cfg.items.iter().any(|i| i == item) {
                    return Err(validation(
                        "2500",
                        "Invalid Reference Id",
                        &format!("Invalid Reference Id : Item {item:?} does not exist"),
                    ));
                }
            }
        }
        if let Some(doc) = e.get("DocNumber").and_then(Value::as_str) {
            if doc.chars().count() > 21 {
                return Err(validation("6000", "A business validation error has occurred while processing your request", &format!("Business Validation Error: DocNumber {doc:?} is longer than 21 characters.")));
            }
            if self.cfg.duplicate_docnumber_error
                && store
                    .entities
                    .values()
                    .any(|(k, x)| *k == kind && x["DocNumber"] == json!(doc))
            {
                return Err(validation("6140", "Duplicate Document Number Error", "Duplicate Document Number Error : You must specify a different number. This number has already been used."));
            }
        }
        let home = self.cfg.home_currency.clone();
        let currency = e
            .get("CurrencyRef")
            .and_then(|c| c["value"].as_str())
            .unwrap_or(&home)
            .to_string();
        if currency != home && !self.cfg.multicurrency {
            return Err(validation("6000", "A business validation error has occurred while processing your request", &format!("Business Validation Error: Multicurrency is off in this company; every transaction is in {home}, not {currency}.")));
        }
        if let Some(c) = &customer {
            let theirs = c["CurrencyRef"]["value"].as_str().unwrap_or(&home);
            if theirs != currency {
                return Err(validation("6000", "A business validation error has occurred while processing your request", &format!("Business Validation Error: The customer's currency is {theirs}; a transaction for this customer must be in {theirs}, not {currency}.")));
            }
        }
        if let Some(fields) = e.get("CustomField").and_then(Value::as_array) {
            for f in fields {
                let idx: usize = f["DefinitionId"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                if idx == 0 || idx > self.cfg.custom_fields.len().min(3) {
                    return Err(validation(
                        "2500",
                        "Invalid Reference Id",
                        &format!(
                            "Invalid Reference Id : custom field definition {} does not exist",
                            f["DefinitionId"]
                        ),
                    ));
                }
            }
        }
        let total = self.line_total(e.get("Line"), &currency)?;
        store.next_id += 1;
        let id = store.next_id;
        let now = now_text(self.cfg.utc_offset_hours);
        e.insert("Id".into(), json!(id.to_string()));
        e.insert("SyncToken".into(), json!("0"));
        e.insert("domain".into(), json!("QBO"));
        e.insert("sparse".into(), json!(false));
        e.insert(
            "MetaData".into(),
            json!({"CreateTime": now, "LastUpdatedTime": now}),
        );
        e.entry("TxnDate").or_insert(json!(now[..10].to_string()));
        e.insert("CurrencyRef".into(), json!({"value": currency}));
        e.entry("ExchangeRate").or_insert(json!(1));
        e.insert("TotalAmt".into(), number(&total));
        self.dress(kind, &mut e);
        let v = Value::Object(e);
        store.entities.insert(id, (kind, v.clone()));
        Ok(v)
    }

    /// A sparse (or full) update of `kind` from `body`.
    fn update(&self, store: &mut Store, kind: Kind, body: &Value) -> Result<Value, Value> {
        let id = body["Id"].as_str().unwrap_or("");
        let not_found = || {
            validation("610", "Object Not Found", &format!("Object Not Found : Something you're trying to use has been made inactive. Check the fields with accounts, invoices, items, vendors or employees. ({} {id})", kind.name()))
        };
        let n: u64 = id.parse().map_err(|_| not_found())?;
        let mut pending = self.edit_before_update.lock().unwrap();
        if *pending == Some(n) {
            *pending = None;
            if let Some((_, e)) = store.entities.get_mut(&n) {
                let t: u64 = e["SyncToken"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                e["SyncToken"] = json!((t + 1).to_string());
            }
        }
        drop(pending);
        let Some((k, current)) = store.entities.get(&n).cloned() else {
            return Err(not_found());
        };
        if k != kind {
            return Err(not_found());
        }
        let sent = body["SyncToken"].as_str().unwrap_or("");
        if sent != current["SyncToken"].as_str().unwrap_or("") {
            return Err(validation("5010", "Stale Object Error", "Stale Object Error : You and API API were working on this at the same time. API API finished before you did, so your work was not saved."));
        }
        let mut e = current.as_object().cloned().unwrap_or_default();
        if body["sparse"] != json!(true) {
            // A full update: what is not sent is cleared.
            e.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "Id" | "SyncToken" | "MetaData" | "domain" | "CurrencyRef" | "ExchangeRate"
                )
            });
        }
        for (k, v) in body.as_object().into_iter().flatten() {
            if matches!(
                k.as_str(),
                "Id" | "SyncToken" | "sparse" | "MetaData" | "TotalAmt" | "Balance" | "domain"
            ) {
                continue;
            }
            if k == "CurrencyRef" && v["value"] != e["CurrencyRef"]["value"] {
                return Err(validation(
                    "6000",
                    "A business validation error has occurred while processing your request",
                    "Business Validation Error: the currency of a transaction cannot be changed.",
                ));
            }
            e.insert(k.clone(), v.clone());
        }
        let currency = e["CurrencyRef"]["value"]
            .as_str()
            .unwrap_or(&self.cfg.home_currency)
            .to_string();
        let total = self.line_total(e.get("Line"), &currency)?;
        e.insert("TotalAmt".into(), number(&total));
        e.remove("Balance");
        let token: u64 = sent.parse().unwrap_or(0);
        e.insert("SyncToken".into(), json!((token + 1).to_string()));
        e["MetaData"]["LastUpdatedTime"] = json!(now_text(self.cfg.utc_offset_hours));
        self.dress(kind, &mut e);
        let v = Value::Object(e);
        store.entities.insert(n, (kind, v.clone()));
        Ok(v)
    }

    fn run_query(
        &self,
        entities: &BTreeMap<u64, (Kind, Value)>,
        text: &str,
    ) -> Result<Value, Value> {
        let parse_error = |d: String| validation("4000", "Error parsing query", &d);
        let q = query::parse(text).map_err(parse_error)?;
        let kind = Kind::parse(&q.entity).expect("parsed entity");
        if let Some(m) = q.max {
            if m > 1000 && self.cfg.maxresults_over_limit_fails {
                return Err(parse_error(format!(
                    "QueryValidationError: MAXRESULTS {m} exceeds the absolute upper limit (1000)"
                )));
            }
        }
        let mut rows: Vec<Value> = entities
            .values()
            .filter(|(k, e)| *k == kind && query::matches(&q, e))
            .map(|(_, e)| e.clone())
            .collect();
        if q.count {
            return Ok(json!({"totalCount": rows.len()}));
        }
        query::sort(&q, &mut rows);
        let max = q.max.unwrap_or(self.cfg.default_max_results).min(1000) as usize;
        let page: Vec<Value> = rows
            .into_iter()
            .skip(q.start as usize - 1)
            .take(max)
            .collect();
        if page.is_empty() {
            return Ok(json!({}));
        }
        Ok(json!({
            q.entity.clone(): page.clone(),
            "startPosition": q.start,
            "maxResults": page.len(),
        }))
    }

    fn remembered(&self, key: &str, hash: u64) -> Option<Result<Reply, Reply>> {
        let mut ids = self.requestids.lock().unwrap();
        let r = ids.get(key)?;
        if let Some(w) = self.cfg.requestid_window {
            if r.at.elapsed() > w {
                ids.remove(key);
                return None;
            }
        }
        if r.hash != hash {
            return Some(Err(reply(400, validation("600", "Duplicate Request ID", "The request ID you're trying to use already exists: it was sent with another request."))));
        }
        self.stats.lock().unwrap().replays += 1;
        Some(Ok(Reply {
            status: r.status,
            body: r.body.clone(),
            throttled: false,
            retry_after: false,
        }))
    }

    fn remember(&self, key: String, hash: u64, r: &Reply) {
        self.requestids.lock().unwrap().insert(
            key,
            Remembered {
                hash,
                status: r.status,
                body: r.body.clone(),
                at: Instant::now(),
            },
        );
    }

    /// 429 when the company's minute or concurrency is spent.
    fn throttle(&self, batch_items: Option<usize>) -> Option<Reply> {
        let now = Instant::now();
        let minute = std::time::Duration::from_secs(60);
        let mut m = self.meter.lock().unwrap();
        while m
            .requests
            .front()
            .is_some_and(|t| now.duration_since(*t) >= minute)
        {
            m.requests.pop_front();
        }
        while m
            .batches
            .front()
            .is_some_and(|t| now.duration_since(*t) >= minute)
        {
            m.batches.pop_front();
        }
        let cost = match batch_items {
            Some(n) if self.cfg.meter_batch_items => n.max(1),
            _ => 1,
        };
        let over_minute = m.requests.len() + cost > self.cfg.requests_per_minute as usize;
        let over_batch =
            batch_items.is_some() && m.batches.len() >= self.cfg.batch_per_minute as usize;
        let over_concurrent =
            self.in_flight.load(Ordering::SeqCst) > u64::from(self.cfg.max_concurrent);
        if over_minute || over_batch || over_concurrent {
            let mut r = reply(
                429,
                fault(
                    "ThrottleExceeded",
                    "3001",
                    "message=ThrottleExceeded; errorCode=003001; statusCode=429",
                    "The request is throttled as it exceeded the throttle policy",
                ),
            );
            r.throttled = true;
            r.retry_after = self.cfg.retry_after;
            return Some(r);
        }
        for _ in 0..cost {
            m.requests.push_back(now);
        }
        if batch_items.is_some() {
            m.batches.push_back(now);
        }
        None
    }

    fn authorized(&self, auth: Option<&str>) -> Result<(), Reply> {
        let gateway = |detail: &str| {
            reply(
                401,
                json!({"code": "AuthenticationFailed", "type": "INPUT", "message": null, "detail": detail, "moreInfo": null}),
            )
        };
        let Some(token) = auth.and_then(|a| {
            a.strip_prefix("Bearer ")
                .or_else(|| a.strip_prefix("bearer "))
        }) else {
            return Err(gateway(
                "Authorization header is missing or not a bearer token",
            ));
        };
        let tokens = self.tokens.lock().unwrap();
        match tokens.access.get(token.trim()) {
            Some(exp) if Instant::now() < *exp => Ok(()),
            Some(_) => Err(gateway("Token expired")),
            None => Err(gateway("Malformed bearer token or token revoked")),
        }
    }

    fn client_ok(&self, auth: Option<&str>) -> bool {
        let Some(b64) = auth.and_then(|a| a.strip_prefix("Basic ")) else {
            return false;
        };
        let Some(raw) = base64_decode(b64.trim()) else {
            return false;
        };
        String::from_utf8_lossy(&raw) == format!("{}:{}", self.client_id, self.client_secret)
    }

    fn token_grant(&self, auth: Option<&str>, body: &[u8]) -> Reply {
        self.count_route("token");
        if !self.client_ok(auth) {
            return reply(401, json!({"error": "invalid_client"}));
        }
        let form = form(&String::from_utf8_lossy(body));
        if form.get("grant_type").map(String::as_str) != Some("refresh_token") {
            return reply(400, json!({"error": "unsupported_grant_type"}));
        }
        let presented = form.get("refresh_token").cloned().unwrap_or_default();
        let mut tokens = self.tokens.lock().unwrap();
        let in_grace = tokens.retired.get(&presented).is_some_and(|at| {
            self.cfg
                .refresh_grace
                .is_some_and(|g| Instant::now().duration_since(*at) < g)
        });
        if tokens.refresh.get(&presented) != Some(&true) && !in_grace {
            drop(tokens);
            self.stats.lock().unwrap().invalid_grants += 1;
            return reply(400, json!({"error": "invalid_grant"}));
        }
        let access = self.token("eyJ.AT.");
        tokens
            .access
            .insert(access.clone(), Instant::now() + self.cfg.access_token_ttl);
        tokens.issued.push(access.clone());
        let refresh = if self.cfg.rotate_refresh_tokens {
            let t = self.token("RT1-");
            // Every token valid now is retired by this rotation.
            let now = Instant::now();
            let valid: Vec<String> = tokens
                .refresh
                .iter()
                .filter(|(_, ok)| **ok)
                .map(|(k, _)| k.clone())
                .collect();
            for k in valid {
                tokens.refresh.insert(k.clone(), false);
                tokens.retired.insert(k, now);
            }
            tokens.refresh.insert(t.clone(), true);
            tokens.issued.push(t.clone());
            t
        } else {
            presented
        };
        drop(tokens);
        self.stats.lock().unwrap().refreshes += 1;
        reply(
            200,
            json!({
                "access_token": access,
                "refresh_token": refresh,
                "token_type": "bearer",
                "expires_in": self.cfg.access_token_ttl.as_secs(),
                "x_refresh_token_expires_in": 8_726_400,
            }),
        )
    }

    fn revoke(&self, auth: Option<&str>, body: &[u8]) -> Reply {
        self.count_route("revoke");
        if !self.client_ok(auth) {
            return reply(401, json!({"error": "invalid_client"}));
        }
        let token = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["token"].as_str().map(str::to_string))
            .unwrap_or_default();
        let mut tokens = self.tokens.lock().unwrap();
        if let Some(v) = tokens.refresh.get_mut(&token) {
            *v = false;
            tokens.access.clear();
        }
        tokens.access.remove(&token);
        reply(200, json!({}))
    }

    /// An API request under `/v3/company/{realm}/…`.
    fn api(
        &self,
        method: &str,
        rest: &[&str],
        params: &HashMap<String, String>,
        body: &[u8],
    ) -> Reply {
        if let Some(v) = params.get("minorversion") {
            *self
                .stats
                .lock()
                .unwrap()
                .minorversions
                .entry(v.clone())
                .or_insert(0) += 1;
        }
        let requestid = params.get("requestid").cloned();
        let bad = |d: &str| {
            reply(
                400,
                validation("2010", "Request has invalid or unsupported property", d),
            )
        };
        match (method, rest) {
            ("GET" | "POST", ["query"]) => {
                self.count_route("query");
                let text = if method == "GET" {
                    params.get("query").cloned().unwrap_or_default()
                } else {
                    String::from_utf8_lossy(body).to_string()
                };
                let store = self.store.lock().unwrap();
                match self.run_query(&store.entities, &text) {
                    Ok(v) => reply(
                        200,
                        json!({"QueryResponse": v, "time": now_text(self.cfg.utc_offset_hours)}),
                    ),
                    Err(f) => reply(400, f),
                }
            }
            ("GET", ["companyinfo", _]) => {
                self.count_route("companyinfo");
                reply(
                    200,
                    json!({"CompanyInfo": {
                    "Id": self.cfg.realm_id, "CompanyName": self.cfg.company_name, "LegalName": self.cfg.company_name,
                    "Country": "US", "SyncToken": "0", "domain": "QBO", "sparse": false,
                }, "time": now_text(self.cfg.utc_offset_hours)}),
                )
            }
            ("GET", ["preferences"]) => {
                self.count_route("preferences");
                let mut custom = Vec::new();
                for (i, name) in self.cfg.custom_fields.iter().take(3).enumerate() {
                    custom.push(json!({"Name": format!("SalesFormsPrefs.UseSalesCustom{}", i + 1), "Type": "BooleanType", "BooleanValue": true}));
                    custom.push(json!({"Name": format!("SalesFormsPrefs.SalesCustomName{}", i + 1), "Type": "StringType", "StringValue": name}));
                }
                reply(
                    200,
                    json!({"Preferences": {
                    "CurrencyPrefs": {"HomeCurrency": {"value": self.cfg.home_currency}, "MultiCurrencyEnabled": self.cfg.multicurrency},
                    "SalesFormsPrefs": {"CustomField": [{"CustomField": custom}], "CustomTxnNumbers": true},
                    "OtherPrefs": {"NameValue": [{"Name": "WarnDuplicateDocNum", "Value": if self.cfg.duplicate_docnumber_error { "true" } else { "false" }}]},
                }, "time": now_text(self.cfg.utc_offset_hours)}),
                )
            }
            ("GET", [entity, id]) => {
                self.count_route("read");
                let Some(kind) = Kind::parse(entity) else {
                    return bad(&format!("Unsupported entity {entity}"));
                };
                let store = self.store.lock().unwrap();
                match id.parse::<u64>().ok().and_then(|n| store.entities.get(&n)) {
                    Some((k, e)) if *k == kind => reply(
                        200,
                        json!({kind.name(): e, "time": now_text(self.cfg.utc_offset_hours)}),
                    ),
                    _ => reply(
                        400,
                        validation(
                            "610",
                            "Object Not Found",
                            &format!("Object Not Found : {} {id} does not exist", kind.name()),
                        ),
                    ),
                }
            }
            ("POST", ["batch"]) => {
                self.count_route("batch");
                if let Some(r) = &requestid {
                    if r.chars().count() > 36 {
                        return bad("requestid of a batch has at most 36 characters");
                    }
                }
                let key = requestid
                    .as_ref()
                    .map(|r| format!("{}|{r}", self.cfg.realm_id));
                let hash = fnv1a64(&[b"batch|".as_slice(), body].concat());
                if let Some(k) = &key {
                    if let Some(r) = self.remembered(k, hash) {
                        return r.unwrap_or_else(|e| e);
                    }
                }
                let r = self.batch(body, requestid.is_some());
                if let Some(k) = key {
                    self.remember(k, hash, &r);
                }
                r
            }
            ("POST", [entity]) => {
                let Some(kind) = Kind::parse(entity).filter(|k| *k != Kind::Customer) else {
                    return bad(&format!("Unsupported entity {entity}"));
                };
                if let Some(r) = &requestid {
                    if r.chars().count() > 50 {
                        return bad("requestid has at most 50 characters");
                    }
                }
                let key = requestid
                    .as_ref()
                    .map(|r| format!("{}|{r}", self.cfg.realm_id));
                let hash = fnv1a64(&[entity.as_bytes(), b"|", body].concat());
                if let Some(k) = &key {
                    if let Some(r) = self.remembered(k, hash) {
                        return r.unwrap_or_else(|e| e);
                    }
                }
                let r = match serde_json::from_slice::<Value>(body) {
                    Err(e) => reply(
                        400,
                        validation(
                            "2310",
                            "Invalid Request",
                            &format!("Request body is not JSON: {e}"),
                        ),
                    ),
                    Ok(v) => {
                        let mut store = self.store.lock().unwrap();
                        let is_update = v.get("Id").is_some();
                        self.count_route(if is_update { "update" } else { "create" });
                        let done = if is_update {
                            self.update(&mut store, kind, &v)
                        } else {
                            self.create(&mut store, kind, &v)
                        };
                        match done {
                            Ok(e) => reply(
                                200,
                                json!({kind.name(): e, "time": now_text(self.cfg.utc_offset_hours)}),
                            ),
                            Err(f) => reply(400, f),
                        }
                    }
                };
                if let Some(k) = key {
                    self.remember(k, hash, &r);
                }
                r
            }
            _ => reply(
                404,
                fault(
                    "SystemFault",
                    "404",
                    "Resource not found",
                    &format!("{method} {} is not an API resource", rest.join("/")),
                ),
            ),
        }
    }

    fn batch(&self, body: &[u8], with_requestid: bool) -> Reply {
        let v: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return reply(
                    400,
                    validation(
                        "2310",
                        "Invalid Request",
                        &format!("Request body is not JSON: {e}"),
                    ),
                )
            }
        };
        let items = v["BatchItemRequest"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if items.is_empty() {
            return reply(
                400,
                validation("400", "MalformedRequest", "Batch Request is Empty"),
            );
        }
        if items.len() > self.cfg.batch_max_items {
            return reply(
                400,
                validation(
                    "1040",
                    "Batch size exceeds allowed limit",
                    &format!(
                        "Batch size {} exceeds the allowed limit of {}",
                        items.len(),
                        self.cfg.batch_max_items
                    ),
                ),
            );
        }
        if with_requestid
            && items
                .iter()
                .any(|i| i["bId"].as_str().is_none_or(|b| b.chars().count() > 10))
        {
            return reply(
                400,
                validation(
                    "2010",
                    "Request has invalid or unsupported property",
                    "With a requestid, each bId has at most 10 characters",
                ),
            );
        }
        {
            let mut s = self.stats.lock().unwrap();
            s.batch_items += items.len() as u64;
            s.max_batch_items = s.max_batch_items.max(items.len());
        }
        let mut store = self.store.lock().unwrap();
        // Items do not see each other's writes.
        let snapshot = store.entities.clone();
        let mut out = Vec::new();
        for item in &items {
            let bid = item["bId"].clone();
            let answer = if let Some(q) = item["Query"].as_str() {
                match self.run_query(&snapshot, q) {
                    Ok(r) => json!({"bId": bid, "QueryResponse": r}),
                    Err(f) => json!({"bId": bid, "Fault": f["Fault"]}),
                }
            } else {
                let op = item["operation"].as_str().unwrap_or("");
                let entity = ["Invoice", "SalesReceipt"]
                    .into_iter()
                    .find(|e| item.get(*e).is_some());
                match (op, entity.and_then(Kind::parse)) {
                    ("create" | "update", Some(kind)) => {
                        let payload = &item[kind.name()];
                        let done = if op == "create" {
                            self.create(&mut store, kind, payload)
                        } else {
                            self.update(&mut store, kind, payload)
                        };
                        match done {
                            Ok(e) => json!({"bId": bid, kind.name(): e}),
                            Err(f) => json!({"bId": bid, "Fault": f["Fault"]}),
                        }
                    }
                    _ => {
                        json!({"bId": bid, "Fault": validation("2010", "Request has invalid or unsupported property", "Each BatchItemRequest needs a Query, or an operation (create, update) and an Invoice or SalesReceipt")["Fault"]})
                    }
                }
            };
            out.push(answer);
        }
        reply(
            200,
            json!({"BatchItemResponse": out, "time": now_text(self.cfg.utc_offset_hours)}),
        )
    }
}

/// `a=b&c=d` (form or query string), `+` as space, percent-decoded.
fn form(text: &str) -> HashMap<String, String> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

fn respond(r: Reply, tid: &str) -> Response {
    let mut resp = Response::new(Body::from(r.body));
    *resp.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(tid) {
        h.insert("intuit_tid", v);
    }
    if r.retry_after {
        h.insert("retry-after", HeaderValue::from_static("60"));
    }
    resp
}

async fn handle(State(s): State<Arc<Shared>>, req: Request<Body>) -> Response {
    let tid = format!("1-{:08x}-{:016x}", s.ids.next() as u32, s.ids.next());
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let params = form(req.uri().query().unwrap_or(""));
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // OAuth routes: no faults, no throttling.
    if path == "/oauth2/v1/tokens/bearer" || path == "/v2/oauth2/tokens/revoke" {
        let body = to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default();
        let r = if path.starts_with("/oauth2") {
            s.token_grant(auth.as_deref(), &body)
        } else {
            s.revoke(auth.as_deref(), &body)
        };
        return respond(r, &tid);
    }
    let is_batch = path.ends_with("/batch");
    let arrival = s.transport.arrive_with(&req, || {
        is_batch
            .then(|| s.batch_faults.lock().unwrap().next())
            .flatten()
    });
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let finish = |r: Reply| {
        arrival.sent(r.status, r.throttled);
        respond(r, &tid)
    };
    if let Some(inj) = arrival.injected() {
        let r = match inj {
            Injected::RateLimited => {
                let mut r = reply(429, fault("ThrottleExceeded", "3001", "message=ThrottleExceeded; errorCode=003001; statusCode=429", "The request is throttled as it exceeded the throttle policy"));
                r.throttled = true;
                r
            }
            Injected::ServerError => reply(500, fault("SystemFault", "10000", "An application error has occurred while processing your request", "System Failure Error: An unexpected error occurred while accessing or saving your data.")),
            Injected::Unavailable => reply(503, fault("SystemFault", "503", "Service Unavailable", "The service is temporarily unavailable")),
            Injected::MalformedJson => Reply { status: 200, body: MALFORMED_JSON_BODY.to_vec(), throttled: false, retry_after: false },
            Injected::Provider(never) => match *never {},
        };
        return finish(r);
    }
    let ["v3", "company", realm, rest @ ..] = seg.as_slice() else {
        return finish(reply(
            404,
            fault(
                "SystemFault",
                "404",
                "Resource not found",
                &format!("{path} is not an API resource"),
            ),
        ));
    };
    if let Err(r) = s.authorized(auth.as_deref()) {
        return finish(r);
    }
    if *realm != s.cfg.realm_id {
        return finish(reply(
            403,
            fault(
                "AuthorizationFault",
                "003100",
                "ApplicationAuthorizationFailed",
                "The access token does not grant access to this company (realm)",
            ),
        ));
    }
    let body = match to_bytes(req.into_body(), 16 << 20).await {
        Ok(b) => b,
        Err(_) => {
            return finish(reply(
                400,
                validation("2310", "Invalid Request", "Body too large"),
            ))
        }
    };
    let batch_items = (rest == ["batch"]).then(|| {
        serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["BatchItemRequest"].as_array().map(Vec::len))
            .unwrap_or(0)
    });
    s.in_flight.fetch_add(1, Ordering::SeqCst);
    let _busy = Busy(&s.in_flight);
    if let Some(r) = s.throttle(batch_items) {
        return finish(r);
    }
    if let Err(dropped) = arrival.wait().await {
        return dropped;
    }
    let r = s.api(&method, rest, &params, &body);
    let (mut status, mut bytes) = (r.status, r.body);
    match arrival.after_work(&mut status, &mut bytes) {
        AfterWork::Send => finish(Reply { status, body: bytes, throttled: false, retry_after: false }),
        AfterWork::ServerError => finish(reply(500, fault("SystemFault", "10000", "An application error has occurred while processing your request", "System Failure Error: An unexpected error occurred while accessing or saving your data."))),
        AfterWork::Dropped(resp) => resp,
    }
}
