//! The HTTP side: axum serving on a custom listener, one fallback handler that
//! routes `/crm/v3/...` itself, auth, rate limiting and fault injection.
//!
//! The listener, the server task and the `DropConnection` mechanism are
//! `recon_emulator_kit`'s, shared by the three emulators.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::faults::{Limits, Policy, RateHeaders};
use super::search::{self, QueryCache, MAX_RESULTS};
use super::store::{self, canonical_type, iso_ms, Record, Store, TypeStore, ALWAYS};
use super::{EmulatorConfig, EmulatorStats, Exchange};
use recon_emulator_kit::{
    percent_decode, splitmix64, uuid_v4, AfterWork, IdSeq, Injected, Transport, MALFORMED_JSON_BODY,
};

/// HubSpot's batch endpoints take at most 100 inputs.
const MAX_BATCH: usize = 100;
/// Request bodies above this are refused (HubSpot's own limit is far lower
/// than anything a batch of 100 needs).
const MAX_BODY: usize = 16 * 1024 * 1024;

// ---------------------------------------------------------------------------
// Shared state

pub(crate) struct Shared {
    pub token: String,
    pub search_lag: Duration,
    pub store: RwLock<Store>,
    /// The fault plan, latency and the kit's stats.
    pub transport: Transport,
    pub limits: Mutex<Limits>,
    /// For the `RateLimited` fault's `X-HubSpot-RateLimit-Max`.
    limit_per_10s: Option<u32>,
    pub fail_ids: RwLock<HashSet<String>>,
    /// See `EmulatorConfig::strict`.
    strict: bool,
    /// See `EmulatorConfig::scramble_batch_results`.
    scramble: bool,
    /// See `EmulatorConfig::record_exchanges`.
    record: bool,
    pub exchanges: Mutex<Vec<Exchange>>,
    pub cache: Mutex<QueryCache>,
    /// HubSpot's own counters (`transport` is filled in by `stats()`).
    pub stats: Mutex<EmulatorStats>,
    ids: IdSeq,
}

impl Shared {
    pub fn new(config: EmulatorConfig) -> Self {
        Shared {
            token: config.token,
            search_lag: config.search_lag,
            store: RwLock::new(Store::default()),
            transport: Transport::new(config.latency),
            limits: Mutex::new(Limits::new(
                config.limit_per_10s,
                config.search_per_sec,
                config.daily_limit,
                config.strict,
            )),
            limit_per_10s: config.limit_per_10s,
            fail_ids: RwLock::new(HashSet::new()),
            strict: config.strict,
            scramble: config.scramble_batch_results,
            record: config.record_exchanges,
            exchanges: Mutex::new(Vec::new()),
            cache: Mutex::new(QueryCache::default()),
            stats: Mutex::new(EmulatorStats::default()),
            ids: IdSeq::new(),
        }
    }

    /// A version-4-UUID-shaped id, like HubSpot's correlation ids
    /// (`c033cdaa-2c40-4a64-ae48-b4cec88dad24`). A bijective mix of a
    /// per-emulator counter, so ids never repeat within an emulator.
    fn next_uuid(&self) -> String {
        let hi = self.ids.next();
        uuid_v4(hi, splitmix64(hi ^ 0x5DEE_CE66_D1CE_5EED))
    }
}

// ---------------------------------------------------------------------------
// Replies

/// A response before the common headers are added.
struct Reply {
    status: u16,
    body: Vec<u8>,
    /// `X-HubSpot-RateLimit-*` values, when the response carries them.
    rate: Option<RateHeaders>,
}

impl Reply {
    fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            // `Display` is compiled inside serde_json (optimized even in
            // debug builds of this crate).
            body: body.to_string().into_bytes(),
            rate: None,
        }
    }
}

/// HubSpot's error body: `{"status":"error","message","correlationId","category"}`.
fn error(status: u16, category: &str, message: &str, cid: &str) -> Reply {
    Reply::json(
        status,
        &json!({
            "status": "error",
            "message": message,
            "correlationId": cid,
            "category": category,
        }),
    )
}

fn validation(message: &str, cid: &str) -> Reply {
    error(400, "VALIDATION_ERROR", message, cid)
}

/// A `429` as documented in HubSpot's "API usage details": `{"status":
/// "error", "message": "You have reached your daily limit.", "errorType":
/// "RATE_LIMIT", "correlationId", "policyName": "DAILY", "requestId"}` — "the
/// message and policyName will indicate which limit you hit".
fn rate_limited(policy: Policy, cid: &str, request_id: &str) -> Reply {
    let (message, name, group) = match policy {
        Policy::Daily => (
            "You have reached your daily limit.",
            "DAILY",
            "publicapi:daily",
        ),
        Policy::TenSecondly => (
            "You have reached your ten_secondly_rolling limit.",
            "TEN_SECONDLY_ROLLING",
            "publicapi:private-app",
        ),
        Policy::Secondly => (
            "You have reached your secondly limit.",
            "SECONDLY",
            "publicapi:crm-search",
        ),
    };
    Reply::json(
        429,
        &json!({
            "status": "error",
            "message": message,
            "errorType": "RATE_LIMIT",
            "correlationId": cid,
            "policyName": name,
            "groupName": group,
            "requestId": request_id,
        }),
    )
}

/// `401`: no token, or not the emulator's token.
fn unauthenticated(cid: &str) -> Reply {
    error(
        401,
        "INVALID_AUTHENTICATION",
        "Authentication credentials not found. This API supports OAuth 2.0 authentication and you can find more details at https://developers.hubspot.com/docs/methods/auth/oauth-overview",
        cid,
    )
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let (scheme, token) = value.trim().split_once(' ').unwrap_or((value, ""));
    scheme.eq_ignore_ascii_case("bearer") && token.trim() == shared.token
}

fn build(reply: Reply, cid: &str) -> Response {
    let len = reply.body.len();
    let mut res = Response::new(Body::from(reply.body));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json;charset=utf-8"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(cid) {
        h.insert("x-hubspot-correlation-id", v);
    }
    if let Some(rate) = reply.rate {
        if let Some((max, remaining)) = rate.ten {
            h.insert("x-hubspot-ratelimit-max", HeaderValue::from(max));
            h.insert(
                "x-hubspot-ratelimit-remaining",
                HeaderValue::from(remaining),
            );
            h.insert(
                "x-hubspot-ratelimit-interval-milliseconds",
                HeaderValue::from_static("10000"),
            );
        }
        if let Some((daily, remaining)) = rate.daily {
            h.insert("x-hubspot-ratelimit-daily", HeaderValue::from(daily));
            h.insert(
                "x-hubspot-ratelimit-daily-remaining",
                HeaderValue::from(remaining),
            );
        }
    }
    res
}

// ---------------------------------------------------------------------------
// Routing

enum Route {
    PropertyList(String),
    Property(String, String),
    Search(String),
    BatchRead(String),
    BatchUpsert(String),
    BatchCreate(String),
    Create(String),
    Object(String, String),
    List(String),
    NotAllowed,
    Unknown,
}

impl Route {
    fn parse(method: &Method, path: &str) -> Route {
        let Some(rest) = path.strip_prefix("/crm/v3/") else {
            return Route::Unknown;
        };
        let seg: Vec<String> = rest.split('/').map(percent_decode).collect();
        let s: Vec<&str> = seg.iter().map(String::as_str).collect();
        let (route, allowed) = match s.as_slice() {
            ["properties", t] => (Route::PropertyList(t.to_string()), Method::GET),
            ["properties", t, p] if !p.is_empty() => {
                (Route::Property(t.to_string(), p.to_string()), Method::GET)
            }
            ["objects", t, "search"] => (Route::Search(t.to_string()), Method::POST),
            ["objects", t, "batch", "read"] => (Route::BatchRead(t.to_string()), Method::POST),
            ["objects", t, "batch", "upsert"] => (Route::BatchUpsert(t.to_string()), Method::POST),
            ["objects", t, "batch", "create"] => (Route::BatchCreate(t.to_string()), Method::POST),
            ["objects", t] if !t.is_empty() && *method == Method::GET => {
                (Route::List(t.to_string()), Method::GET)
            }
            ["objects", t] if !t.is_empty() => (Route::Create(t.to_string()), Method::POST),
            ["objects", t, id] if !id.is_empty() => {
                (Route::Object(t.to_string(), id.to_string()), Method::GET)
            }
            _ => return Route::Unknown,
        };
        if *method == allowed {
            route
        } else {
            Route::NotAllowed
        }
    }
}

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    // Everything that depends on arrival order is decided now.
    let arrival = shared.transport.arrive(&req);
    let cid = shared.next_uuid();
    let (parts, body) = req.into_parts();
    let route = Route::parse(&parts.method, parts.uri.path());
    let is_search = matches!(route, Route::Search(_));
    if is_search {
        shared.stats.lock().unwrap().search_requests += 1;
    }
    let admitted = match arrival.injected() {
        Some(injected) => Err(fault_reply(&shared, injected, &cid)),
        None if !authorized(&shared, &parts.headers) => Err(unauthenticated(&cid)),
        None => admit(&shared, is_search, &cid),
    };
    if let Err(dropped) = arrival.wait().await {
        // Never written: the connection's I/O now fails. Not counted in by_status.
        return dropped;
    }

    let mut reply = match admitted {
        Err(r) => r,
        Ok(rate) => {
            let mut r = match axum::body::to_bytes(body, MAX_BODY).await {
                Ok(bytes) => {
                    let r = serve(&shared, &cid, route, &parts.uri, &bytes);
                    if shared.record && parts.uri.path().starts_with("/crm/v3/objects/") {
                        shared.exchanges.lock().unwrap().push(Exchange {
                            path: parts.uri.path().to_owned(),
                            request: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                            status: r.status,
                            response: serde_json::from_slice(&r.body).unwrap_or(Value::Null),
                        });
                    }
                    r
                }
                Err(_) => validation("The request body could not be read.", &cid),
            };
            r.rate = rate;
            r
        }
    };
    match arrival.after_work(&mut reply.status, &mut reply.body) {
        AfterWork::Send => {}
        AfterWork::ServerError => reply = fault_reply(&shared, Injected::ServerError, &cid),
        AfterWork::Dropped(dropped) => return dropped,
    }
    arrival.sent(reply.status, false);
    build(reply, &cid)
}

/// HubSpot's answer to an injected error fault.
fn fault_reply(shared: &Shared, injected: Injected<'_, Infallible>, cid: &str) -> Reply {
    match injected {
        Injected::RateLimited => {
            let mut r = rate_limited(Policy::TenSecondly, cid, &shared.next_uuid());
            let mut h = shared.limits.lock().unwrap().headers();
            h.ten = Some((shared.limit_per_10s.unwrap_or(100), 0));
            r.rate = Some(h);
            r
        }
        Injected::ServerError => error(500, "INTERNAL_ERROR", "internal error", cid),
        Injected::Unavailable => error(
            503,
            "SERVICE_UNAVAILABLE",
            "The service is temporarily unavailable. Please try again later.",
            cid,
        ),
        Injected::MalformedJson => Reply {
            status: 200,
            body: MALFORMED_JSON_BODY.to_vec(),
            rate: None,
        },
        Injected::Provider(never) => match *never {},
    }
}

/// The rate limits' decision on an authorized request arriving now: the
/// rate headers to send (none on searches: HubSpot's search guide says
/// search responses do not include the X-HubSpot-RateLimit headers, the
/// search endpoints have their own limit), or the `429`.
fn admit(shared: &Shared, is_search: bool, cid: &str) -> Result<Option<RateHeaders>, Reply> {
    let mut limits = shared.limits.lock().unwrap();
    let headers = |l: &Limits| (!is_search).then(|| l.headers());
    match limits.admit(Instant::now(), is_search) {
        Ok(()) => Ok(headers(&limits)),
        Err(policy) => {
            let mut r = rate_limited(policy, cid, &shared.next_uuid());
            r.rate = headers(&limits);
            Err(r)
        }
    }
}

fn parse_body(bytes: &[u8], cid: &str) -> Result<Value, Reply> {
    serde_json::from_slice(bytes).map_err(|e| {
        validation(
            &format!(
                "Invalid input JSON on line {}, column {}: {e}",
                e.line(),
                e.column()
            ),
            cid,
        )
    })
}

fn serve(shared: &Shared, cid: &str, route: Route, uri: &Uri, body: &[u8]) -> Reply {
    let result = match route {
        Route::PropertyList(t) => list_properties(shared, cid, &t),
        Route::Property(t, p) => get_property(shared, cid, &t, &p),
        Route::Search(t) => parse_body(body, cid).and_then(|b| search(shared, cid, &t, &b)),
        Route::BatchRead(t) => parse_body(body, cid).and_then(|b| batch_read(shared, cid, &t, &b)),
        Route::BatchUpsert(t) => {
            parse_body(body, cid).and_then(|b| batch_upsert(shared, cid, &t, &b, uri))
        }
        Route::BatchCreate(t) => {
            parse_body(body, cid).and_then(|b| batch_create(shared, cid, &t, &b))
        }
        Route::Create(t) => parse_body(body, cid).and_then(|b| {
            let one = json!({ "inputs": [b] });
            batch_create(shared, cid, &t, &one).map(|r| match r.status {
                201 => {
                    let all: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
                    Reply::json(201, &all["results"][0])
                }
                _ => r,
            })
        }),
        Route::Object(t, id) => get_object(shared, cid, &t, &id, uri),
        Route::List(t) => list_objects(shared, cid, &t, uri),
        Route::NotAllowed => Err(error(405, "METHOD_NOT_ALLOWED", "Method not allowed", cid)),
        Route::Unknown => Err(error(
            404,
            "OBJECT_NOT_FOUND",
            &format!("No route found for {}", uri.path()),
            cid,
        )),
    };
    result.unwrap_or_else(|r| r)
}

/// Checks the object type's name; `Err` is HubSpot's `400` for a name that is
/// no object type.
fn check_type(object_type: &str, cid: &str) -> Result<(), Reply> {
    match canonical_type(object_type) {
        Some(_) => Ok(()),
        None => Err(validation(
            &format!("Unable to infer object type from: {object_type}"),
            cid,
        )),
    }
}

// ---------------------------------------------------------------------------
// Properties

fn property_json(ts: &TypeStore, name: &str) -> Option<Value> {
    let d = ts.props.get(name)?;
    let group = match ts.name.as_str() {
        "contacts" => "contactinformation".to_owned(),
        "companies" => "companyinformation".to_owned(),
        "deals" => "dealinformation".to_owned(),
        "tickets" => "ticketinformation".to_owned(),
        custom => format!("{custom}_information"),
    };
    let mut v = json!({
        "updatedAt": iso_ms(d.updated_ms),
        "createdAt": iso_ms(d.created_ms),
        "name": d.name,
        "label": d.name,
        "type": d.kind.name(),
        "fieldType": d.kind.field_type(),
        "description": "",
        "groupName": group,
        "options": [],
        "displayOrder": -1,
        "calculated": false,
        "externalOptions": false,
        "hasUniqueValue": d.unique,
        "hidden": false,
        "modificationMetadata": {
            "archivable": !d.builtin,
            "readOnlyDefinition": d.builtin,
            "readOnlyValue": store::read_only(name),
        },
        "formField": false,
        "archived": false,
    });
    if d.builtin {
        v["hubspotDefined"] = Value::Bool(true);
    }
    Some(v)
}

fn list_properties(shared: &Shared, cid: &str, object_type: &str) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let store = shared.store.read().unwrap();
    let fresh;
    let ts = match store.type_ref(object_type) {
        Ok(Some(ts)) => ts,
        _ => {
            fresh = TypeStore::new(&canonical_type(object_type).unwrap());
            &fresh
        }
    };
    let results: Vec<Value> = ts
        .props
        .keys()
        .filter_map(|n| property_json(ts, n))
        .collect();
    Ok(Reply::json(200, &json!({ "results": results })))
}

fn get_property(shared: &Shared, cid: &str, object_type: &str, name: &str) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let store = shared.store.read().unwrap();
    let fresh;
    let ts = match store.type_ref(object_type) {
        Ok(Some(ts)) => ts,
        _ => {
            fresh = TypeStore::new(&canonical_type(object_type).unwrap());
            &fresh
        }
    };
    match property_json(ts, name) {
        Some(v) => Ok(Reply::json(200, &v)),
        None => Err(error(
            404,
            "OBJECT_NOT_FOUND",
            &format!("Unable to find property {name} for object type {object_type}"),
            cid,
        )),
    }
}

// ---------------------------------------------------------------------------
// Objects

/// `{"id", "properties", "createdAt", "updatedAt", "archived": false}` with
/// `hs_object_id`, `createdate`, `lastmodifieddate` and `names` (each `null`
/// when unset, as HubSpot answers for requested properties without a value).
fn object_json<'a>(rec: &Record, names: impl IntoIterator<Item = &'a str>) -> Map<String, Value> {
    let mut props = Map::new();
    for n in ALWAYS.into_iter().chain(names) {
        if !props.contains_key(n) {
            props.insert(n.to_owned(), rec.text(n).map_or(Value::Null, Value::from));
        }
    }
    let mut o = Map::new();
    o.insert("id".into(), Value::from(rec.id.to_string()));
    o.insert("properties".into(), Value::Object(props));
    o.insert("createdAt".into(), Value::from(iso_ms(rec.created_ms())));
    o.insert("updatedAt".into(), Value::from(iso_ms(rec.updated_ms())));
    o.insert("archived".into(), Value::Bool(false));
    o
}

/// The properties to return: those requested, else the type's defaults.
fn requested<'a>(object_type: &str, requested: &'a [String]) -> Vec<&'a str> {
    if requested.is_empty() {
        store::default_properties(object_type).to_vec()
    } else {
        requested.iter().map(String::as_str).collect()
    }
}

fn string_list(v: Option<&Value>, what: &str, cid: &str) -> Result<Vec<String>, Reply> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|p| p.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| validation(&format!("{what} must be an array of strings"), cid)),
        Some(_) => Err(validation(
            &format!("{what} must be an array of strings"),
            cid,
        )),
    }
}

fn scalar_id(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn search(shared: &Shared, cid: &str, object_type: &str, body: &Value) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let canonical = canonical_type(object_type).unwrap();
    let req = search::parse(&canonical, body).map_err(|m| validation(&m, cid))?;
    let store = shared.store.read().unwrap();
    let ts = store.type_ref(object_type).ok().flatten();
    let now = Instant::now();
    let version = ts.map_or(0, |t| t.version);
    let cached = shared
        .cache
        .lock()
        .unwrap()
        .get(&req.cache_key, version, now);
    let ids = match cached {
        Some(ids) => ids,
        None => {
            let m = search::evaluate(&req, ts, now).map_err(|m| validation(&m, cid))?;
            shared.stats.lock().unwrap().search_scans += 1;
            shared
                .cache
                .lock()
                .unwrap()
                .put(req.cache_key.clone(), version, &m);
            m.ids
        }
    };
    let total = ids.len();
    let end = (req.after + req.limit).min(total);
    if req.after >= MAX_RESULTS || end > MAX_RESULTS {
        return Err(validation(
            &format!(
                "Search results are limited to {MAX_RESULTS} per query: this page (after {}, limit {}) reaches past result {MAX_RESULTS}. Narrow the query's filters to page further.",
                req.after, req.limit
            ),
            cid,
        ));
    }
    let names = requested(&canonical, &req.properties);
    let results: Vec<Value> = match ts {
        Some(ts) if req.after < end => ids[req.after..end]
            .iter()
            .filter_map(|id| ts.records.get(id))
            .map(|r| Value::Object(object_json(r, names.iter().copied())))
            .collect(),
        _ => Vec::new(),
    };
    let mut out = json!({ "total": total, "results": results });
    if end < total {
        out["paging"] = json!({ "next": { "after": end.to_string() } });
    }
    Ok(Reply::json(200, &out))
}

/// Resolves an `idProperty`: `None`/`hs_object_id` means record ids; anything
/// else must be a unique property of the type.
fn resolve_id_property<'a>(
    ts: Option<&TypeStore>,
    object_type: &str,
    prop: Option<&'a str>,
    cid: &str,
) -> Result<Option<&'a str>, Reply> {
    match prop {
        None | Some("hs_object_id") => Ok(None),
        Some(p) if ts.is_some_and(|t| t.is_unique(p)) => Ok(Some(p)),
        Some(p) if ts.is_some_and(|t| t.props.contains_key(p)) => Err(validation(
            &format!("{p} is not a unique property of {object_type}: only a property with hasUniqueValue can be the idProperty"),
            cid,
        )),
        Some(p) => Err(validation(
            &format!("Property \"{p}\" does not exist on {object_type}"),
            cid,
        )),
    }
}

fn batch_inputs<'a>(body: &'a Value, cid: &str) -> Result<&'a Vec<Value>, Reply> {
    let inputs = body
        .get("inputs")
        .and_then(Value::as_array)
        .ok_or_else(|| validation("inputs must be an array", cid))?;
    if inputs.len() > MAX_BATCH {
        return Err(validation(
            &format!(
                "Too many inputs: {} were given, the limit is {MAX_BATCH} per batch.",
                inputs.len()
            ),
            cid,
        ));
    }
    Ok(inputs)
}

fn batch_read(shared: &Shared, cid: &str, object_type: &str, body: &Value) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let canonical = canonical_type(object_type).unwrap();
    let started = store::now_ms();
    let inputs = batch_inputs(body, cid)?;
    let properties = string_list(body.get("properties"), "properties", cid)?;
    let store = shared.store.read().unwrap();
    let ts = store.type_ref(object_type).ok().flatten();
    let prop = match body.get("idProperty") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(validation("idProperty must be a string", cid)),
    };
    let id_prop = resolve_id_property(ts, object_type, prop, cid)?;
    let names = requested(&canonical, &properties);
    let mut results = Vec::new();
    let mut seen = HashSet::new();
    let mut missing: Vec<String> = Vec::new();
    for input in inputs {
        let Some(id) = scalar_id(input.get("id")) else {
            return Err(validation("Each input needs an id", cid));
        };
        let rec = ts.and_then(|ts| match id_prop {
            Some(p) => ts.find_by(p, &id),
            None => id.parse::<u64>().ok().and_then(|n| ts.records.get(&n)),
        });
        match rec {
            Some(r) => {
                if seen.insert(r.id) {
                    results.push(Value::Object(object_json(r, names.iter().copied())));
                }
            }
            None => {
                if !missing.contains(&id) {
                    missing.push(id);
                }
            }
        }
    }
    if shared.scramble {
        results.reverse();
    }
    let mut out = json!({
        "status": "COMPLETE",
        "results": results,
        "startedAt": iso_ms(started),
        "completedAt": iso_ms(store::now_ms()),
    });
    if missing.is_empty() {
        return Ok(Reply::json(200, &out));
    }
    // HubSpot lists the ids it could not find in one OBJECT_NOT_FOUND error
    // and answers 207 Multi-Status.
    out["numErrors"] = json!(1);
    out["errors"] = json!([{
        "status": "error",
        "category": "OBJECT_NOT_FOUND",
        "message": format!("Could not get some {canonical} objects, they may be deleted or not exist. Check that ids are valid."),
        "context": { "ids": missing },
        "errors": [],
        "links": {},
    }]);
    Ok(Reply::json(207, &out))
}

/// `POST …/batch/upsert`. Per HubSpot's reference, each input is
/// `{"idProperty", "id", "properties"}` and records are "identified by a
/// unique property value as specified by the idProperty"; the response lists
/// `results` (each with `"new"`) and, when some inputs failed, `errors` and
/// `numErrors` — with `207 Multi-Status`.
fn batch_upsert(
    shared: &Shared,
    cid: &str,
    object_type: &str,
    body: &Value,
    uri: &Uri,
) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let started = store::now_ms();
    let inputs = batch_inputs(body, cid)?;
    // `?idProperty=` applies to inputs that do not name their own.
    let query_prop = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .ok()
        .and_then(|Query(q)| {
            q.into_iter()
                .find(|(k, _)| k == "idProperty")
                .map(|(_, v)| v)
        });

    struct Input<'a> {
        id_property: String,
        id: String,
        properties: &'a Map<String, Value>,
        trace: Option<&'a Value>,
    }
    let empty = Map::new();
    let mut parsed = Vec::with_capacity(inputs.len());
    let mut pairs = HashSet::new();
    let mut duplicates = Vec::new();
    {
        let store = shared.store.read().unwrap();
        let ts = store.type_ref(object_type).ok().flatten();
        for input in inputs {
            let id_property = match input.get("idProperty").and_then(Value::as_str) {
                Some(p) => p.to_owned(),
                None => query_prop
                    .clone()
                    .ok_or_else(|| validation("Each input needs an idProperty", cid))?,
            };
            if id_property == "hs_object_id"
                || resolve_id_property(ts, object_type, Some(&id_property), cid)?.is_none()
            {
                return Err(validation(
                    &format!("{id_property} is not a unique property of {object_type}: only a property with hasUniqueValue can be the idProperty"),
                    cid,
                ));
            }
            let id = scalar_id(input.get("id"))
                .filter(|s| !s.is_empty())
                .ok_or_else(|| validation("Each input needs an id", cid))?;
            let properties = match input.get("properties") {
                None | Some(Value::Null) => &empty,
                Some(Value::Object(m)) => m,
                Some(_) => return Err(validation("properties must be an object", cid)),
            };
            if shared.strict {
                strings_only(properties, cid)?;
            }
            if !pairs.insert((id_property.clone(), id.clone())) {
                duplicates.push(id.clone());
            }
            parsed.push(Input {
                id_property,
                id,
                properties,
                trace: input.get("objectWriteTraceId"),
            });
        }
    }
    if !duplicates.is_empty() {
        return Err(validation(
            &format!("Duplicate IDs found in batch input: {duplicates:?}. IDs must be unique"),
            cid,
        ));
    }

    let fail: HashSet<String> = {
        let f = shared.fail_ids.read().unwrap();
        parsed
            .iter()
            .filter(|i| f.contains(&i.id))
            .map(|i| i.id.clone())
            .collect()
    };
    let searchable_at = (!shared.search_lag.is_zero()).then(|| Instant::now() + shared.search_lag);
    let mut results = Vec::new();
    let mut errors = Vec::new();
    {
        let mut store = shared.store.write().unwrap();
        let now = store::now_ms();
        let (ts, next_id) = store
            .next_id_mut(object_type)
            .map_err(|m| validation(&m, cid))?;
        for input in &parsed {
            let outcome = if fail.contains(&input.id) {
                Err(format!(
                    "Upsert of {} with {} '{}' failed (emulator fail_ids).",
                    ts.name, input.id_property, input.id
                ))
            } else {
                ts.upsert(
                    &input.id_property,
                    &input.id,
                    input.properties,
                    now,
                    searchable_at,
                    next_id,
                )
            };
            match outcome {
                Ok(up) => {
                    let rec = &ts.records[&up.id];
                    let names = input
                        .properties
                        .keys()
                        .map(String::as_str)
                        .chain([input.id_property.as_str()])
                        .filter(|_| !shared.scramble);
                    let mut o = object_json(rec, names);
                    o.insert("new".into(), Value::Bool(up.new));
                    // Documented correlation: "objectWriteTraceId" of the
                    // input comes back on its result.
                    // https://developers.hubspot.com/docs/api-reference/crm-objects-v3/batch/post-crm-v3-objects-objectType-batch-upsert
                    if let Some(t) = input.trace {
                        o.insert("objectWriteTraceId".into(), t.clone());
                    }
                    results.push(Value::Object(o));
                }
                Err(message) => errors.push(json!({
                    "status": "error",
                    "category": "VALIDATION_ERROR",
                    "message": message,
                    "context": { "ids": [input.id] },
                    "errors": [],
                    "links": {},
                })),
            }
        }
    }
    if shared.scramble {
        results.reverse();
    }
    let mut out = json!({
        "status": "COMPLETE",
        "results": results,
        "startedAt": iso_ms(started),
        "completedAt": iso_ms(store::now_ms()),
    });
    if errors.is_empty() {
        return Ok(Reply::json(200, &out));
    }
    out["numErrors"] = json!(errors.len());
    out["errors"] = Value::Array(errors);
    Ok(Reply::json(207, &out))
}

/// `POST …/batch/create` (and, one input at a time, `POST …/objects/{type}`).
/// Each input is `{"properties", "objectWriteTraceId"?}`. All inputs are
/// checked first; a unique value already taken (by a stored object or by
/// another input) refuses the whole batch with `409` and category
/// `CONFLICT`, as HubSpot does; nothing is created then. Otherwise `201`
/// with every created object in `results`.
/// https://developers.hubspot.com/docs/api-reference/crm-objects-v3/batch/post-crm-v3-objects-objectType-batch-create
fn batch_create(
    shared: &Shared,
    cid: &str,
    object_type: &str,
    body: &Value,
) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let started = store::now_ms();
    let inputs = batch_inputs(body, cid)?;
    let empty = Map::new();
    let mut props = Vec::with_capacity(inputs.len());
    for input in inputs {
        props.push(match input.get("properties") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(_) => return Err(validation("properties must be an object", cid)),
        });
        if shared.strict {
            strings_only(props.last().unwrap(), cid)?;
        }
    }
    {
        // Injected failures refuse the whole batch, as a validation error would.
        let f = shared.fail_ids.read().unwrap();
        if let Some(id) = props
            .iter()
            .flat_map(|p| p.values())
            .filter_map(Value::as_str)
            .find(|v| f.contains(*v))
        {
            return Err(validation(
                &format!("Create of {object_type} with '{id}' failed (emulator fail_ids)."),
                cid,
            ));
        }
    }
    let searchable_at = (!shared.search_lag.is_zero()).then(|| Instant::now() + shared.search_lag);
    let mut store = shared.store.write().unwrap();
    let now = store::now_ms();
    let (ts, next_id) = store
        .next_id_mut(object_type)
        .map_err(|m| validation(&m, cid))?;
    match ts.check_new(&props) {
        Err((true, msg)) => return Err(error(409, "CONFLICT", &msg, cid)),
        Err((false, msg)) => return Err(validation(&msg, cid)),
        Ok(()) => {}
    }
    let mut results = Vec::with_capacity(props.len());
    for (p, input) in props.iter().zip(inputs) {
        let id = ts
            .create_new(p, now, searchable_at, next_id)
            .map_err(|m| validation(&m, cid))?;
        let rec = &ts.records[&id];
        let mut o = object_json(rec, p.keys().map(String::as_str));
        if let Some(t) = input.get("objectWriteTraceId") {
            o.insert("objectWriteTraceId".into(), t.clone());
        }
        results.push(Value::Object(o));
    }
    if shared.scramble {
        results.reverse();
    }
    Ok(Reply::json(
        201,
        &json!({
            "status": "COMPLETE",
            "results": results,
            "startedAt": iso_ms(started),
            "completedAt": iso_ms(store::now_ms()),
        }),
    ))
}

/// Strict mode: the CRM v3 spec's `properties` is a map of strings
/// (`SimplePublicObjectBatchInputUpsert`, `SimplePublicObjectBatchInputForCreate`);
/// `""` clears a value, `null` or a number is refused.
fn strings_only(properties: &Map<String, Value>, cid: &str) -> Result<(), Reply> {
    match properties.iter().find(|(_, v)| !v.is_string()) {
        Some((name, v)) => Err(validation(
            &format!("Invalid input JSON: property \"{name}\" is {v}, expected a string (use \"\" to clear a value)"),
            cid,
        )),
        None => Ok(()),
    }
}

/// `GET …/objects/{type}/{id}?idProperty=&properties=a,b`.
/// `GET /crm/v3/objects/{objectType}`: a page of objects by ID, `limit`
/// 1..=100 (default 10), after the cursor `after`, with `paging.next` when
/// more follow.
/// https://developers.hubspot.com/docs/api-reference/crm-objects-v3/basic/get-crm-v3-objects-objectType
fn list_objects(shared: &Shared, cid: &str, object_type: &str, uri: &Uri) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let canonical = canonical_type(object_type).unwrap();
    let params = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let (mut limit, mut after, mut properties) = (10usize, 0u64, Vec::new());
    for (k, v) in &params {
        match k.as_str() {
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => limit = n,
                _ => return Err(validation(&format!("limit must be 1 to 100, not {v}"), cid)),
            },
            "after" => {
                after = v
                    .parse()
                    .map_err(|_| validation(&format!("invalid paging cursor {v}"), cid))?
            }
            "properties" => {
                properties.extend(v.split(',').filter(|s| !s.is_empty()).map(str::to_owned))
            }
            _ => {}
        }
    }
    let store = shared.store.read().unwrap();
    let ts = store.type_ref(object_type).ok().flatten();
    let mut page: Vec<&Record> = ts
        .map(|ts| {
            ts.records
                .range(after..)
                .map(|(_, r)| r)
                .take(limit + 1)
                .collect()
        })
        .unwrap_or_default();
    let more = page.len() > limit;
    page.truncate(limit);
    let names = requested(&canonical, &properties);
    let results: Vec<Value> = page
        .iter()
        .map(|r| Value::Object(object_json(r, names.iter().copied())))
        .collect();
    let mut body = json!({ "results": results });
    if let (true, Some(last)) = (more, page.last()) {
        let next = (last.id + 1).to_string();
        body["paging"] =
            json!({ "next": { "after": next, "link": format!("{}?after={next}", uri.path()) } });
    }
    Ok(Reply::json(200, &body))
}

fn get_object(
    shared: &Shared,
    cid: &str,
    object_type: &str,
    id: &str,
    uri: &Uri,
) -> Result<Reply, Reply> {
    check_type(object_type, cid)?;
    let canonical = canonical_type(object_type).unwrap();
    let params = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let mut properties = Vec::new();
    let mut prop = None;
    for (k, v) in &params {
        match k.as_str() {
            "properties" => {
                properties.extend(v.split(',').filter(|s| !s.is_empty()).map(str::to_owned))
            }
            "idProperty" => prop = Some(v.as_str()),
            _ => {}
        }
    }
    let store = shared.store.read().unwrap();
    let ts = store.type_ref(object_type).ok().flatten();
    let id_prop = resolve_id_property(ts, object_type, prop, cid)?;
    let rec = ts.and_then(|ts| match id_prop {
        Some(p) => ts.find_by(p, id),
        None => id.parse::<u64>().ok().and_then(|n| ts.records.get(&n)),
    });
    match rec {
        Some(r) => Ok(Reply::json(
            200,
            &Value::Object(object_json(r, requested(&canonical, &properties))),
        )),
        None => Err(error(404, "OBJECT_NOT_FOUND", "Object not found.", cid)),
    }
}
