//! The HTTP side: one fallback handler that routes `/services/...` itself;
//! the token endpoint, auth, the daily API allowance, fault injection and the
//! REST resources (limits, describe, query, sObject Collections upsert). The
//! Bulk API 2.0 resources are in `bulk`.
//!
//! The listener, the server task and the `DropConnection` mechanism are
//! `recon_emulator_kit`'s, shared by every emulator.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::bulk::{self, Jobs};
use super::soql;
use super::store::{RecErr, Store, WriteOp};
use super::values::{now_ms, rest_datetime, sf_id, Val};
use super::{EmulatorConfig, EmulatorStats, FaultKind, FieldType};
use recon_emulator_kit::{
    base64_decode, base64_encode, fnv1a64, percent_decode, splitmix64, AfterWork, FaultPlan, IdSeq,
    Injected, Transport, MALFORMED_JSON_BODY,
};

/// "In each REST call, the maximum length for the combined URI and headers
/// is 16,384 bytes. A request exceeding this limit returns a 431 Request
/// Header Fields Too Large error. If the URI itself exceeds this limit, the
/// request returns a 414 URI Too Long error." (Salesforce Help 000386264,
/// "Maximum number of rows returned by SOQL queries over the REST API").
pub(crate) const MAX_URI_AND_HEADERS: usize = 16_384;
/// sObject Collections take at most 200 records.
pub(crate) const MAX_COLLECTION: usize = 200;
/// Request bodies above this are refused (Bulk API 2.0 takes up to 150 MB of
/// CSV per job upload).
const MAX_BODY: usize = 160 * 1024 * 1024;

// ---------------------------------------------------------------------------
// Shared state

/// Access tokens issued so far.
#[derive(Default)]
pub(crate) struct Tokens {
    issued: HashMap<String, (Instant, bool)>,
}

impl Tokens {
    pub fn add(&mut self, token: String) {
        self.issued.insert(token, (Instant::now(), true));
    }

    pub fn expire_all(&mut self) {
        for (_, valid) in self.issued.values_mut() {
            *valid = false;
        }
    }

    fn valid(&self, token: &str, ttl: Option<Duration>) -> bool {
        match self.issued.get(token) {
            Some((at, true)) => ttl.is_none_or(|ttl| at.elapsed() < ttl),
            _ => false,
        }
    }
}

/// The org's daily API allowance, shared with its other integrations.
pub(crate) struct Usage {
    pub used: u64,
    pub max: u64,
}

/// A query's results, for `nextRecordsUrl` pages.
struct Cursor {
    object: String,
    select: Vec<usize>,
    hits: Vec<usize>,
    batch: usize,
}

pub(crate) struct Shared {
    pub cfg: EmulatorConfig,
    pub base_url: String,
    pub org_id: String,
    pub user_id: String,
    pub store: RwLock<Store>,
    /// The shared fault plan, latency and the kit's stats.
    pub transport: Transport,
    /// Fault plans of single routes, by route name.
    pub route_faults: Mutex<HashMap<String, FaultPlan<FaultKind>>>,
    pub tokens: Mutex<Tokens>,
    pub usage: Mutex<Usage>,
    cursors: Mutex<HashMap<String, Cursor>>,
    pub jobs: Mutex<Jobs>,
    /// Salesforce's own counters (`transport` is filled in by `stats()`).
    pub stats: Mutex<EmulatorStats>,
    ids: IdSeq,
    seq: AtomicU64,
}

impl Shared {
    pub fn new(cfg: EmulatorConfig, base_url: String) -> Shared {
        let usage = Usage {
            used: 0,
            max: cfg.daily_api_limit,
        };
        Shared {
            transport: Transport::new(cfg.latency),
            cfg,
            base_url,
            org_id: sf_id("00D", 1),
            user_id: sf_id("005", 1),
            store: RwLock::new(Store::default()),
            route_faults: Mutex::new(HashMap::new()),
            tokens: Mutex::new(Tokens::default()),
            usage: Mutex::new(usage),
            cursors: Mutex::new(HashMap::new()),
            jobs: Mutex::new(Jobs::default()),
            stats: Mutex::new(EmulatorStats::default()),
            ids: IdSeq::new(),
            seq: AtomicU64::new(1),
        }
    }

    /// A fresh number for ids (query locators, jobs).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    /// A new access token, `00D…!AQ…` like Salesforce's session ids.
    pub fn issue_token(&self) -> String {
        let a = splitmix64(self.ids.next());
        let b = splitmix64(a ^ 0x5EED_0F5A_1E5F_0C17);
        let mut bytes = a.to_be_bytes().to_vec();
        bytes.extend_from_slice(&b.to_be_bytes());
        let tail: String = base64_encode(&bytes)
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let token = format!("{}!AQ{tail}", &self.org_id[..15]);
        self.tokens.lock().unwrap().add(token.clone());
        token
    }
}

// ---------------------------------------------------------------------------
// Replies

/// A response before the common headers are added.
pub(crate) struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    /// `(used, max)` for `Sforce-Limit-Info`.
    pub limit: Option<(u64, u64)>,
}

const JSON: &str = "application/json;charset=UTF-8";

impl Reply {
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            body: body.to_string().into_bytes(),
            content_type: JSON,
            headers: Vec::new(),
            limit: None,
        }
    }

    pub fn csv(body: String) -> Reply {
        Reply {
            status: 200,
            body: body.into_bytes(),
            content_type: "text/csv",
            headers: Vec::new(),
            limit: None,
        }
    }

    pub fn empty(status: u16) -> Reply {
        Reply {
            status,
            body: Vec::new(),
            content_type: JSON,
            headers: Vec::new(),
            limit: None,
        }
    }

    /// Salesforce's REST error body: a JSON array of `{message, errorCode}`.
    pub fn error(status: u16, code: &str, message: &str) -> Reply {
        Reply::json(status, &json!([{ "message": message, "errorCode": code }]))
    }

    pub fn not_found() -> Reply {
        Reply::error(404, "NOT_FOUND", "The requested resource does not exist")
    }
}

fn build(reply: Reply) -> Response {
    let len = reply.body.len();
    let mut res = Response::new(Body::from(reply.body));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let h = res.headers_mut();
    if len > 0 || reply.content_type != JSON {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(reply.content_type),
        );
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Some((used, max)) = reply.limit {
        if let Ok(v) = HeaderValue::from_str(&format!("api-usage={used}/{max}")) {
            h.insert("sforce-limit-info", v);
        }
    }
    for (name, value) in reply.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    res
}

// ---------------------------------------------------------------------------
// Routing

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IngestResults {
    Successful,
    Failed,
    Unprocessed,
}

#[derive(Debug, Clone)]
enum Route {
    Token,
    Versions,
    Resources(String),
    Limits,
    Describe(String, String),
    Query(String),
    QueryMore(String, String),
    CompositeUpsert(String, String),
    CompositeCreate,
    BulkQueryCreate(String),
    BulkQueryInfo(String, String),
    BulkQueryAbort(String, String),
    BulkQueryResults(String, String),
    BulkIngestCreate(String),
    BulkIngestInfo(String, String),
    BulkIngestState(String, String),
    BulkIngestUpload(String),
    BulkIngestResults(String, IngestResults),
    DataUnknown,
    /// `/services/data/vXX.X/…` of a version the org does not serve.
    UnservedVersion,
    NotAllowed(&'static str),
    Unknown,
}

impl Route {
    fn name(&self) -> &'static str {
        match self {
            Route::Token => "token",
            Route::Versions => "versions",
            Route::Resources(_) => "resources",
            Route::Limits => "limits",
            Route::Describe(..) => "describe",
            Route::Query(_) => "query",
            Route::QueryMore(..) => "query_more",
            Route::CompositeUpsert(..) => "composite_upsert",
            Route::CompositeCreate => "composite_create",
            Route::BulkQueryCreate(_) => "bulk_query_create",
            Route::BulkQueryInfo(..) => "bulk_query_info",
            Route::BulkQueryAbort(..) => "bulk_query_abort",
            Route::BulkQueryResults(..) => "bulk_query_results",
            Route::BulkIngestCreate(_) => "bulk_ingest_create",
            Route::BulkIngestInfo(..) => "bulk_ingest_info",
            Route::BulkIngestState(..) => "bulk_ingest_state",
            Route::BulkIngestUpload(_) => "bulk_ingest_upload",
            Route::BulkIngestResults(_, IngestResults::Successful) => "bulk_ingest_successful",
            Route::BulkIngestResults(_, IngestResults::Failed) => "bulk_ingest_failed",
            Route::BulkIngestResults(_, IngestResults::Unprocessed) => "bulk_ingest_unprocessed",
            Route::DataUnknown | Route::UnservedVersion | Route::NotAllowed(_) | Route::Unknown => {
                "unknown"
            }
        }
    }

    /// Under `/services/data/vXX.X/`: needs a token, counts against the
    /// daily allowance and carries `Sforce-Limit-Info`.
    fn is_data(&self) -> bool {
        !matches!(
            self,
            Route::Token | Route::Versions | Route::UnservedVersion | Route::Unknown
        )
    }

    /// The route of `method path`; `served` says whether the org serves a
    /// version (`"62.0"`).
    fn parse(method: &Method, path: &str, served: impl Fn(&str) -> bool) -> Route {
        if path == "/services/oauth2/token" {
            return if method == Method::POST {
                Route::Token
            } else {
                Route::Unknown
            };
        }
        let Some(rest) = path.strip_prefix("/services/data") else {
            return Route::Unknown;
        };
        let mut seg: Vec<String> = rest.split('/').skip(1).map(percent_decode).collect();
        if seg.last().is_some_and(String::is_empty) {
            seg.pop();
        }
        let s: Vec<&str> = seg.iter().map(String::as_str).collect();
        if s.is_empty() {
            return if method == Method::GET {
                Route::Versions
            } else {
                Route::Unknown
            };
        }
        let Some(v) = s[0]
            .strip_prefix('v')
            .filter(|v| {
                v.split_once('.').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && !b.is_empty()
                        && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
                })
            })
            .map(str::to_owned)
        else {
            return Route::DataUnknown;
        };
        if !served(&v) {
            return Route::UnservedVersion;
        }
        let o = |x: &&str| x.to_string();
        let get = Method::GET;
        let (route, allowed): (Route, &[Method]) = match &s[1..] {
            [] => (Route::Resources(v), &[get]),
            ["limits"] => (Route::Limits, &[get]),
            ["sobjects", obj, "describe"] => (Route::Describe(v, o(obj)), &[get]),
            ["query"] => (Route::Query(v), &[get]),
            ["query", loc] => (Route::QueryMore(v, o(loc)), &[get]),
            ["composite", "sobjects"] => (Route::CompositeCreate, &[Method::POST]),
            ["composite", "sobjects", obj, field] => {
                (Route::CompositeUpsert(o(obj), o(field)), &[Method::PATCH])
            }
            ["jobs", "query"] => (Route::BulkQueryCreate(v), &[Method::POST]),
            ["jobs", "query", id] => {
                if method == Method::PATCH {
                    (Route::BulkQueryAbort(v, o(id)), &[Method::PATCH])
                } else {
                    (Route::BulkQueryInfo(v, o(id)), &[get])
                }
            }
            ["jobs", "query", id, "results"] => (Route::BulkQueryResults(v, o(id)), &[get]),
            ["jobs", "ingest"] => (Route::BulkIngestCreate(v), &[Method::POST]),
            ["jobs", "ingest", id] => {
                if method == Method::PATCH {
                    (Route::BulkIngestState(v, o(id)), &[Method::PATCH])
                } else {
                    (Route::BulkIngestInfo(v, o(id)), &[get])
                }
            }
            ["jobs", "ingest", id, "batches"] => (Route::BulkIngestUpload(o(id)), &[Method::PUT]),
            ["jobs", "ingest", id, kind] => {
                let k = match *kind {
                    "successfulResults" => IngestResults::Successful,
                    "failedResults" => IngestResults::Failed,
                    "unprocessedrecords" => IngestResults::Unprocessed,
                    _ => return Route::DataUnknown,
                };
                (Route::BulkIngestResults(o(id), k), &[get])
            }
            _ => return Route::DataUnknown,
        };
        if allowed.contains(method) {
            route
        } else if allowed.contains(&Method::GET) {
            Route::NotAllowed("GET")
        } else if allowed.contains(&Method::PATCH) {
            Route::NotAllowed("PATCH")
        } else if allowed.contains(&Method::PUT) {
            Route::NotAllowed("PUT")
        } else {
            Route::NotAllowed("POST")
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    // Salesforce takes `Bearer` and the older `OAuth` scheme.
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("oauth"))
        .then(|| token.trim())
}

/// Salesforce's answer to an injected error fault.
fn fault_reply(injected: Injected<'_, Infallible>) -> Reply {
    match injected {
        // Not a documented Salesforce response: what a proxy or the edge in
        // front of the org sends when it sheds load.
        Injected::RateLimited => {
            let mut r = Reply::error(429, "TOO_MANY_REQUESTS", "Too many requests; retry later.");
            r.headers.push(("retry-after", "1".into()));
            r
        }
        Injected::ServerError => Reply::error(
            500,
            "UNKNOWN_EXCEPTION",
            "An unexpected error occurred. Please include this ErrorId if you contact support: 1234567890-12345 (-1234567890)",
        ),
        Injected::Unavailable => Reply::error(
            503,
            "SERVER_UNAVAILABLE",
            "Server temporarily unavailable. Please try again later.",
        ),
        Injected::MalformedJson => Reply {
            status: 200,
            body: MALFORMED_JSON_BODY.to_vec(),
            content_type: JSON,
            headers: Vec::new(),
            limit: None,
        },
        Injected::Provider(never) => match *never {},
    }
}

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let route = Route::parse(req.method(), req.uri().path(), |v| {
        shared.cfg.serves_version(v)
    });
    super::bulk::process_due(&shared);
    // Everything that depends on arrival order is decided now.
    let arrival = shared.transport.arrive_with(&req, || {
        let mut plans = shared.route_faults.lock().unwrap();
        plans.get_mut(route.name()).and_then(FaultPlan::next)
    });
    {
        let mut stats = shared.stats.lock().unwrap();
        *stats.by_route.entry(route.name().to_owned()).or_insert(0) += 1;
        if matches!(route, Route::Token) {
            stats.token_requests += 1;
        }
    }
    let (parts, body) = req.into_parts();
    let uri_len = parts.uri.to_string().len();
    let header_len: usize = parts
        .headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    let admitted: Result<Option<(u64, u64)>, Reply> = if let Some(i) = arrival.injected() {
        Err(fault_reply(i))
    } else if uri_len > MAX_URI_AND_HEADERS {
        Err(edge(414, "URI Too Long"))
    } else if uri_len + header_len > MAX_URI_AND_HEADERS {
        Err(edge(431, "Request Header Fields Too Large"))
    } else if route.is_data() && !arrival.drops() {
        // A dropped request is never processed, so never counted.
        admit(&shared, &parts.headers)
    } else {
        Ok(None)
    };
    if let Err(dropped) = arrival.wait().await {
        // Never written: the connection's I/O now fails. Not processed.
        return dropped;
    }

    let mut reply = match admitted {
        Err(r) => r,
        Ok(limit) => {
            let mut r = match axum::body::to_bytes(body, MAX_BODY).await {
                Ok(bytes) => serve(&shared, route, &parts.uri, &parts.headers, &bytes),
                Err(_) => Reply::error(413, "REQUEST_TOO_LARGE", "The request body is too large."),
            };
            r.limit = limit;
            r
        }
    };
    match arrival.after_work(&mut reply.status, &mut reply.body) {
        AfterWork::Send => {}
        // Done; its answer never arrives.
        AfterWork::Dropped(dropped) => return dropped,
        AfterWork::ServerError => {
            let limit = reply.limit;
            reply = fault_reply(Injected::ServerError);
            reply.limit = limit;
        }
    }
    arrival.sent(reply.status, false);
    build(reply)
}

/// What the edge sends for an over-long request line or headers: not a
/// Salesforce JSON body.
fn edge(status: u16, text: &str) -> Reply {
    Reply {
        status,
        body: format!("<html><body><h1>{status} {text}</h1></body></html>").into_bytes(),
        content_type: "text/html",
        headers: Vec::new(),
        limit: None,
    }
}

/// Auth, then the daily allowance: `Ok(Some((used, max)))` counts this
/// request (the header value), `Err` refuses it.
fn admit(shared: &Shared, headers: &HeaderMap) -> Result<Option<(u64, u64)>, Reply> {
    let ok = bearer(headers)
        .is_some_and(|t| shared.tokens.lock().unwrap().valid(t, shared.cfg.token_ttl));
    if !ok {
        return Err(Reply::error(
            401,
            "INVALID_SESSION_ID",
            "Session expired or invalid",
        ));
    }
    let mut usage = shared.usage.lock().unwrap();
    if usage.used >= usage.max {
        let mut r = Reply::error(
            403,
            "REQUEST_LIMIT_EXCEEDED",
            "TotalRequests Limit exceeded.",
        );
        r.limit = Some((usage.used, usage.max));
        return Err(r);
    }
    usage.used += 1;
    let counted = (usage.used, usage.max);
    drop(usage);
    shared.stats.lock().unwrap().api_calls += 1;
    Ok(Some(counted))
}

fn serve(
    shared: &Shared,
    route: Route,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Reply {
    let params = || {
        Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map(|Query(q)| q)
            .unwrap_or_default()
    };
    match route {
        Route::Token => token(shared, headers, body),
        Route::Versions => versions(shared),
        Route::Resources(v) => resources(&v),
        Route::Limits => limits(shared),
        Route::Describe(v, obj) => describe(shared, &v, &obj),
        Route::Query(v) => {
            let q = params().into_iter().find(|(k, _)| k == "q").map(|(_, q)| q);
            query(shared, &v, q.as_deref(), batch_size(headers))
        }
        Route::QueryMore(v, loc) => query_more(shared, &v, &loc, batch_size(headers)),
        Route::CompositeUpsert(obj, field) => composite_upsert(shared, &obj, &field, body),
        Route::CompositeCreate => composite_create(shared, body),
        Route::BulkQueryCreate(v) => bulk::query_create(shared, &v, body),
        Route::BulkQueryInfo(v, id) => bulk::query_info(shared, &v, &id),
        Route::BulkQueryAbort(v, id) => bulk::query_abort(shared, &v, &id, body),
        Route::BulkQueryResults(v, id) => bulk::query_results(shared, &v, &id, &params()),
        Route::BulkIngestCreate(v) => bulk::ingest_create(shared, &v, body),
        Route::BulkIngestInfo(v, id) => bulk::ingest_info(shared, &v, &id),
        Route::BulkIngestState(v, id) => bulk::ingest_state(shared, &v, &id, body),
        Route::BulkIngestUpload(id) => bulk::ingest_upload(shared, &id, body),
        Route::BulkIngestResults(id, kind) => bulk::ingest_results(shared, &id, kind),
        Route::NotAllowed(allowed) => Reply::error(
            405,
            "METHOD_NOT_ALLOWED",
            &format!("HTTP Method not allowed. Allowed are {allowed}"),
        ),
        Route::DataUnknown | Route::UnservedVersion | Route::Unknown => Reply::not_found(),
    }
}

// ---------------------------------------------------------------------------
// OAuth 2.0 client credentials

fn form(body: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| percent_decode(&s.replace('+', " "));
            (dec(k), dec(v))
        })
        .collect()
}

/// `POST /services/oauth2/token`, `grant_type=client_credentials` with
/// `client_id`/`client_secret` in the form body or as HTTP Basic auth.
fn token(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Reply {
    let f = form(body);
    let oauth_error = |error: &str, description: &str| {
        Reply::json(
            400,
            &json!({ "error": error, "error_description": description }),
        )
    };
    match f.get("grant_type").map(String::as_str) {
        Some("client_credentials") => {}
        _ => return oauth_error("unsupported_grant_type", "grant type not supported"),
    }
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64_decode(b.trim()))
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.split_once(':').map(|(a, b)| (a.to_owned(), b.to_owned())));
    let (id, secret) = match (f.get("client_id"), f.get("client_secret"), basic) {
        (Some(i), Some(s), _) => (i.clone(), s.clone()),
        (_, _, Some((i, s))) => (i, s),
        (Some(i), None, None) => (i.clone(), String::new()),
        _ => return oauth_error("invalid_client_id", "client identifier invalid"),
    };
    if id != shared.cfg.client_id {
        return oauth_error("invalid_client_id", "client identifier invalid");
    }
    if secret != shared.cfg.client_secret {
        return oauth_error("invalid_client", "invalid client credentials");
    }
    let access_token = shared.issue_token();
    let issued_at = now_ms().to_string();
    let signature = base64_encode(
        &[
            fnv1a64(access_token.as_bytes()).to_be_bytes(),
            fnv1a64(issued_at.as_bytes()).to_be_bytes(),
        ]
        .concat(),
    );
    Reply::json(
        200,
        &json!({
            "access_token": access_token,
            "signature": signature,
            "scope": "api",
            "instance_url": shared.base_url,
            "id": format!("{}/id/{}/{}", shared.base_url, shared.org_id, shared.user_id),
            "token_type": "Bearer",
            "issued_at": issued_at,
        }),
    )
}

// ---------------------------------------------------------------------------
// REST resources

/// `GET /services/data/`: every version the org serves, oldest first, as
/// `{"label", "url", "version"}` (REST API "Versions" and "List Available
/// REST API Versions").
fn versions(shared: &Shared) -> Reply {
    let list: Vec<Value> = shared
        .cfg
        .served_versions()
        .into_iter()
        .map(|v| {
            json!({
                "label": super::release_label(&v),
                "url": format!("/services/data/v{v}"),
                "version": v,
            })
        })
        .collect();
    Reply::json(200, &Value::Array(list))
}

fn resources(v: &str) -> Reply {
    let base = format!("/services/data/v{v}");
    Reply::json(
        200,
        &json!({
            "limits": format!("{base}/limits"),
            "query": format!("{base}/query"),
            "sobjects": format!("{base}/sobjects"),
            "composite": format!("{base}/composite"),
            "jobs": format!("{base}/jobs"),
        }),
    )
}

/// `GET /limits`: `DailyApiRequests` as `{Max, Remaining}` (REST API "List
/// Organization Limits"), after counting this call.
fn limits(shared: &Shared) -> Reply {
    let (used, max) = {
        let u = shared.usage.lock().unwrap();
        (u.used, u.max)
    };
    let (query_jobs, batches) = shared.jobs.lock().unwrap().counts();
    Reply::json(
        200,
        &json!({
            "DailyApiRequests": { "Max": max, "Remaining": max.saturating_sub(used) },
            "DailyBulkV2QueryJobs": { "Max": 10000, "Remaining": 10000u64.saturating_sub(query_jobs) },
            "DailyBulkApiBatches": { "Max": 15000, "Remaining": 15000u64.saturating_sub(batches) },
        }),
    )
}

fn type_json(kind: FieldType) -> (&'static str, &'static str) {
    match kind {
        FieldType::String => ("string", "xsd:string"),
        FieldType::Currency => ("currency", "xsd:double"),
        FieldType::Double => ("double", "xsd:double"),
        FieldType::Percent => ("percent", "xsd:double"),
        FieldType::Datetime => ("datetime", "xsd:dateTime"),
        FieldType::Date => ("date", "xsd:date"),
        FieldType::Picklist => ("picklist", "xsd:string"),
        FieldType::Boolean => ("boolean", "xsd:boolean"),
        FieldType::Id => ("id", "tns:ID"),
    }
}

/// `GET /sobjects/{SObject}/describe`.
fn describe(shared: &Shared, v: &str, name: &str) -> Reply {
    let store = shared.store.read().unwrap();
    let Some(obj) = store.object(name) else {
        return Reply::not_found();
    };
    let fields: Vec<Value> = obj
        .fields
        .iter()
        .map(|f| {
            let (ty, soap) = type_json(f.kind);
            let system = f.platform_maintained();
            let text = matches!(
                f.kind,
                FieldType::String | FieldType::Picklist | FieldType::Id
            );
            let number = matches!(
                f.kind,
                FieldType::Currency | FieldType::Double | FieldType::Percent
            );
            json!({
                "name": f.name,
                "label": f.name.trim_end_matches("__c").replace('_', " "),
                "type": ty,
                "soapType": soap,
                "length": if text { f.length } else { 0 },
                "byteLength": if text { f.length * 3 } else { 0 },
                "precision": if number { f.precision } else { 0 },
                "scale": if number { f.scale } else { 0 },
                "digits": 0,
                "externalId": f.external_id,
                "unique": f.unique,
                "caseSensitive": f.case_sensitive,
                "idLookup": f.external_id || f.name == "Id" || f.name == "Name",
                "nillable": f.nillable,
                "createable": f.can_create(),
                "updateable": f.can_update(),
                "defaultedOnCreate": system || f.name == "Name" || f.kind == FieldType::Boolean,
                "custom": f.name.ends_with("__c"),
                "nameField": f.name == "Name",
                "calculated": false,
                "autoNumber": false,
                "filterable": true,
                "sortable": true,
                "groupable": !number,
            })
        })
        .collect();
    let base = format!("/services/data/v{v}/sobjects/{}", obj.name);
    Reply::json(
        200,
        &json!({
            "name": obj.name,
            "label": obj.name.trim_end_matches("__c").replace('_', " "),
            "labelPlural": format!("{}s", obj.name.trim_end_matches("__c").replace('_', " ")),
            "keyPrefix": obj.key_prefix,
            "custom": obj.name.ends_with("__c"),
            "createable": true,
            "updateable": true,
            "queryable": true,
            "fields": fields,
            "urls": {
                "sobject": base,
                "describe": format!("{base}/describe"),
                "rowTemplate": format!("{base}/{{ID}}"),
            },
        }),
    )
}

/// `Sforce-Query-Options: batchSize=N`: "The default is 2,000; the minimum is
/// 200, and the maximum is 2,000" (REST API "Query Options Header"). Values
/// out of range are clamped.
fn batch_size(headers: &HeaderMap) -> Option<usize> {
    let v = headers.get("sforce-query-options")?.to_str().ok()?;
    v.split([',', ';'])
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("batchSize"))
        .and_then(|(_, n)| n.trim().parse::<usize>().ok())
        .map(|n| n.clamp(200, 2000))
}

fn soql_error(e: soql::SoqlError) -> Reply {
    Reply::error(400, e.code, &e.message)
}

/// A record as a query returns it: `attributes`, then the selected fields.
pub(crate) fn query_record(v: &str, object: &str, id: &str, fields: Vec<(String, Value)>) -> Value {
    let mut m = Map::new();
    m.insert(
        "attributes".into(),
        json!({ "type": object, "url": format!("/services/data/v{v}/sobjects/{object}/{id}") }),
    );
    m.extend(fields);
    Value::Object(m)
}

fn page(shared: &Shared, v: &str, loc: &str, cursor: &Cursor, from: usize, batch: usize) -> Reply {
    let store = shared.store.read().unwrap();
    let Some(obj) = store.object(&cursor.object) else {
        return Reply::error(400, "INVALID_QUERY_LOCATOR", "invalid query locator");
    };
    let to = (from + batch).min(cursor.hits.len());
    let records: Vec<Value> = cursor.hits[from.min(to)..to]
        .iter()
        .map(|&i| {
            let rec = &obj.records[i];
            let fields = cursor
                .select
                .iter()
                .map(|&f| (obj.fields[f].name.clone(), rec.get(f).to_json()))
                .collect();
            query_record(v, &obj.name, &rec.id, fields)
        })
        .collect();
    let mut out = Map::new();
    out.insert("totalSize".into(), json!(cursor.hits.len()));
    out.insert("done".into(), json!(to >= cursor.hits.len()));
    if to < cursor.hits.len() {
        out.insert(
            "nextRecordsUrl".into(),
            json!(format!("/services/data/v{v}/query/{loc}-{to}")),
        );
    }
    out.insert("records".into(), Value::Array(records));
    Reply::json(200, &Value::Object(out))
}

/// `GET /query?q=SOQL`.
fn query(shared: &Shared, v: &str, q: Option<&str>, batch: Option<usize>) -> Reply {
    let Some(q) = q.filter(|q| !q.trim().is_empty()) else {
        return Reply::error(400, "MALFORMED_QUERY", "A query string has to be specified");
    };
    let (plan, hits) = {
        let store = shared.store.read().unwrap();
        let plan = match soql::plan(&store, q) {
            Ok(p) => p,
            Err(e) => return soql_error(e),
        };
        let obj = store.object(&plan.object).expect("bound object exists");
        let hits = soql::run(obj, &plan);
        (plan, hits)
    };
    if plan.count {
        return Reply::json(
            200,
            &json!({ "totalSize": hits.len(), "done": true, "records": [] }),
        );
    }
    let batch = batch.unwrap_or(2000);
    let loc = sf_id("01g", shared.next_seq());
    let cursor = Cursor {
        object: plan.object,
        select: plan.select,
        hits,
        batch,
    };
    let reply = page(shared, v, &loc, &cursor, 0, batch);
    if cursor.hits.len() > batch {
        shared.cursors.lock().unwrap().insert(loc, cursor);
    }
    reply
}

/// `GET /query/{locator}-{offset}` (a `nextRecordsUrl`). Pages can be read
/// again (a retry after a lost response gets the same records).
fn query_more(shared: &Shared, v: &str, loc: &str, batch: Option<usize>) -> Reply {
    let invalid = || Reply::error(400, "INVALID_QUERY_LOCATOR", "invalid query locator");
    let Some((id, from)) = loc.rsplit_once('-') else {
        return invalid();
    };
    let Ok(from) = from.parse::<usize>() else {
        return invalid();
    };
    let cursors = shared.cursors.lock().unwrap();
    let Some(cursor) = cursors.get(id) else {
        return invalid();
    };
    if from > cursor.hits.len() {
        return invalid();
    }
    let batch = batch.unwrap_or(cursor.batch);
    page(shared, v, id, cursor, from, batch)
}

// ---------------------------------------------------------------------------
// sObject Collections upsert

/// Converts a JSON record of `obj` into field values. An unknown field fails
/// the whole request (`INVALID_FIELD`, as Salesforce's deserializer does); a
/// value that does not convert fails the record.
pub(crate) fn json_row(
    obj: &super::store::Object,
    rec: &Map<String, Value>,
) -> Result<Result<Vec<(usize, Val)>, RecErr>, Reply> {
    let mut vals = Vec::new();
    let mut bad = None;
    for (k, v) in rec {
        if k == "attributes" {
            continue;
        }
        let Some(i) = obj.field(k) else {
            return Err(Reply::error(
                400,
                "INVALID_FIELD",
                &format!("No such column '{k}' on sobject of type {}", obj.name),
            ));
        };
        match obj.coerce_json(i, v) {
            Ok(val) => vals.push((i, val)),
            Err(e) => {
                bad.get_or_insert(e);
            }
        }
    }
    Ok(match bad {
        Some(e) => Err(e),
        None => Ok(vals),
    })
}

/// An sObject Collections request: each record with its `attributes.type`,
/// and `allOrNone`.
type Collection = (Vec<(String, Map<String, Value>)>, bool);

/// The records of an sObject Collections body, `{"allOrNone", "records"}`;
/// at most 200.
fn collection_body(body: &[u8]) -> Result<Collection, Reply> {
    let parsed: Value = serde_json::from_slice(body).map_err(|e| {
        Reply::error(
            400,
            "JSON_PARSER_ERROR",
            &format!("The request body is not valid JSON: {e}"),
        )
    })?;
    let Some(records) = parsed.get("records").and_then(Value::as_array) else {
        return Err(Reply::error(
            400,
            "JSON_PARSER_ERROR",
            "The request body must have a records array",
        ));
    };
    let all_or_none = parsed
        .get("allOrNone")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if records.len() > MAX_COLLECTION {
        return Err(Reply::error(
            400,
            "EXCEEDED_ID_LIMIT",
            "record limit reached. cannot submit more than 200 records in this operation",
        ));
    }
    let mut out = Vec::with_capacity(records.len());
    for rec in records {
        let Some(m) = rec.as_object() else {
            return Err(Reply::error(
                400,
                "JSON_PARSER_ERROR",
                "Each record must be a JSON object",
            ));
        };
        let Some(ty) = m
            .get("attributes")
            .and_then(|a| a.get("type"))
            .and_then(Value::as_str)
        else {
            return Err(Reply::error(
                400,
                "INVALID_TYPE",
                "Each record in the list must have an attributes map with a value for type",
            ));
        };
        out.push((ty.to_owned(), m.clone()));
    }
    Ok((out, all_or_none))
}

fn save_results(results: Vec<super::store::RowResult>, upsert: bool) -> Reply {
    let out: Vec<Value> = results
        .into_iter()
        .map(|r| match r {
            Ok((id, created)) if upsert => {
                json!({ "id": id, "success": true, "errors": [], "created": created })
            }
            Ok((id, _)) => json!({ "id": id, "success": true, "errors": [] }),
            Err(e) => json!({ "success": false, "errors": [e.to_json()] }),
        })
        .collect();
    Reply::json(200, &Value::Array(out))
}

/// `PATCH /composite/sobjects/{SObject}/{ExternalIdField}`.
fn composite_upsert(shared: &Shared, object: &str, field: &str, body: &[u8]) -> Reply {
    let (records, all_or_none) = match collection_body(body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mut store = shared.store.write().unwrap();
    let Some(obj) = store.object_mut(object) else {
        return Reply::error(
            400,
            "INVALID_TYPE",
            &format!("sObject type '{object}' is not supported."),
        );
    };
    let key = match obj.field(field) {
        None => {
            return Reply::error(
                404,
                "NOT_FOUND",
                &format!("Provided external ID field does not exist or is not accessible: {field}"),
            )
        }
        Some(k) if !obj.fields[k].external_id && obj.fields[k].name != "Name" => {
            return Reply::error(
                400,
                "INVALID_FIELD",
                &format!(
                    "Field name provided, {} is not an External ID or indexed field for {}",
                    obj.fields[k].name, obj.name
                ),
            )
        }
        Some(k) => k,
    };
    let mut rows = Vec::with_capacity(records.len());
    for (ty, m) in &records {
        if !ty.eq_ignore_ascii_case(&obj.name) {
            return Reply::error(
                400,
                "INVALID_TYPE",
                &format!(
                    "The list can contain objects only of type {}; got {ty}",
                    obj.name
                ),
            );
        }
        match json_row(obj, m) {
            Ok(row) => rows.push(row),
            Err(reply) => return reply,
        }
    }
    let results = obj.write(WriteOp::Upsert(key), rows, all_or_none, false, now_ms());
    drop(store);
    save_results(results, true)
}

/// `POST /composite/sobjects`: create up to 200 records ("Create Records
/// Using sObject Collections"); results `{"id", "success", "errors"}` in
/// order. Records of several types are written one by one in order; with
/// `allOrNone` the emulator takes one type per request.
fn composite_create(shared: &Shared, body: &[u8]) -> Reply {
    let (records, all_or_none) = match collection_body(body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mut store = shared.store.write().unwrap();
    let types: Vec<String> = records.iter().map(|(t, _)| t.to_lowercase()).collect();
    let mut rows = Vec::with_capacity(records.len());
    for (ty, m) in &records {
        let Some(obj) = store.object(ty) else {
            return Reply::error(
                400,
                "INVALID_TYPE",
                &format!("sObject type '{ty}' is not supported."),
            );
        };
        // Unknown fields fail the request before anything is written.
        match json_row(obj, m) {
            Ok(row) => rows.push(row),
            Err(reply) => return reply,
        }
    }
    let one_type = types.windows(2).all(|w| w[0] == w[1]);
    if all_or_none && !one_type {
        return Reply::error(
            400,
            "INVALID_TYPE",
            "the emulator takes allOrNone creates of one sObject type per request",
        );
    }
    let now = now_ms();
    let mut results = Vec::with_capacity(records.len());
    if one_type && !records.is_empty() {
        let obj = store.object_mut(&types[0]).expect("checked above");
        results = obj.write(WriteOp::Insert, rows, all_or_none, false, now);
    } else {
        for (ty, row) in types.iter().zip(rows) {
            let obj = store.object_mut(ty).expect("checked above");
            results.extend(obj.write(WriteOp::Insert, vec![row], false, false, now));
        }
    }
    drop(store);
    save_results(results, false)
}

/// `rest_datetime` of now, for job info bodies.
pub(crate) fn now_text() -> String {
    rest_datetime(now_ms())
}
