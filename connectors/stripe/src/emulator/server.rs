//! The HTTP side: axum serving on a custom listener, one fallback handler that
//! routes `/v1/...` itself, auth, rate limiting and fault injection.
//!
//! The listener, the server task and the `DropConnection` mechanism are
//! `recon_emulator_kit`'s, shared by the three emulators.

use std::sync::{Arc, Mutex, RwLock};

use tokio::time::Instant;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::faults::{Limiter, RateLimiter, SlidingCounter, WindowCounter};
use super::store::{Found, ListQuery, MissingCursor, Store};
use super::{Arrival, EmulatorConfig, LoggedRequest, ObjectKind, RateLimitMode, StripeFault};
use recon_emulator_kit::{
    base64_decode, percent_decode, splitmix64, AfterWork, IdSeq, Injected, Transport,
    MALFORMED_JSON_BODY,
};

// ---------------------------------------------------------------------------
// Shared state

pub(crate) struct Shared {
    pub api_key: String,
    pub store: RwLock<Store>,
    /// The fault plan, latency and stats.
    pub transport: Transport<StripeFault>,
    pub limiter: Option<Mutex<Limiter>>,
    /// The origin of the limiter's windows and of `arrivals`.
    pub origin: Instant,
    /// Every request the limiter decided on.
    pub arrivals: Mutex<Vec<Arrival>>,
    /// Every request received (see `Emulator::requests`).
    pub requests: Mutex<Vec<LoggedRequest>>,
    request_ids: IdSeq,
}

impl Shared {
    pub fn new(config: &EmulatorConfig) -> Self {
        let origin = Instant::now();
        Shared {
            api_key: config.api_key.clone(),
            store: RwLock::new(Store::default()),
            transport: Transport::new(config.latency),
            limiter: config.rate_limit_per_sec.map(|n| {
                Mutex::new(match config.rate_limit_mode {
                    RateLimitMode::TokenBucket => {
                        Limiter::Bucket(RateLimiter::new(n, config.others_percent))
                    }
                    RateLimitMode::PerSecondWindow => {
                        Limiter::Window(WindowCounter::new(n, config.others_percent, origin))
                    }
                    RateLimitMode::SlidingWindow => {
                        Limiter::Sliding(SlidingCounter::new(n, config.others_percent, origin))
                    }
                })
            }),
            origin,
            arrivals: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            request_ids: IdSeq::new(),
        }
    }

    /// `req_` and 14 base62 characters, like Stripe's request ids. The first 11
    /// characters encode a bijective mix of a per-emulator counter, so ids never
    /// repeat within an emulator.
    fn next_request_id(&self) -> String {
        let mixed = self.request_ids.next();
        let mut id = String::with_capacity(18);
        id.push_str("req_");
        push_base62(&mut id, mixed, 11);
        push_base62(&mut id, splitmix64(mixed), 3);
        id
    }
}

/// Appends exactly `width` base62 digits of `v` (least significant first).
pub(crate) fn push_base62(out: &mut String, mut v: u64, width: usize) {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for _ in 0..width {
        out.push(DIGITS[(v % 62) as usize] as char);
        v /= 62;
    }
}

// ---------------------------------------------------------------------------
// Replies

/// A response before the common headers are added.
struct Reply {
    status: u16,
    body: Vec<u8>,
    should_retry: bool,
}

impl Reply {
    fn json(status: u16, body: String) -> Reply {
        Reply {
            status,
            body: body.into_bytes(),
            should_retry: false,
        }
    }
}

/// Stripe's error body: `{"error": {"code"?, "doc_url"?, "message", "param"?, "type"}}`.
/// Per Stripe's "Errors" reference, `doc_url` links to the error code's page,
/// `https://stripe.com/docs/error-codes/<code with dashes>`.
fn error(status: u16, kind: &str, message: &str, code: Option<&str>, param: Option<&str>) -> Reply {
    let mut e = serde_json::Map::new();
    if let Some(code) = code {
        e.insert("code".into(), json!(code));
        e.insert(
            "doc_url".into(),
            json!(format!(
                "https://stripe.com/docs/error-codes/{}",
                code.replace('_', "-")
            )),
        );
    }
    e.insert("message".into(), json!(message));
    if let Some(param) = param {
        e.insert("param".into(), json!(param));
    }
    e.insert("type".into(), json!(kind));
    Reply::json(status, json!({ "error": Value::Object(e) }).to_string())
}

fn invalid(message: &str, code: Option<&str>, param: Option<&str>) -> Reply {
    error(400, "invalid_request_error", message, code, param)
}

/// `429`, code `rate_limit`: Stripe's answer to too many requests too fast.
fn rate_limited() -> Reply {
    error(
        429,
        "invalid_request_error",
        "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
        Some("rate_limit"),
        None,
    )
}

/// `429`, code `lock_timeout`: another request holds the object's lock. Stripe
/// documents that such errors are safe to retry and marks them with
/// `Stripe-Should-Retry: true`.
fn lock_timeout() -> Reply {
    let mut r = error(
        429,
        "invalid_request_error",
        "This object cannot be accessed right now because another API request or Stripe process is currently accessing it. If you see this error intermittently, retry the request. If you see this error frequently and are making multiple concurrent requests to a single object, make your requests serially or at a lower rate. See https://stripe.com/docs/rate-limits for more details.",
        Some("lock_timeout"),
        None,
    );
    r.should_retry = true;
    r
}

/// Stripe: "API errors cover any other type of problem (e.g., a temporary
/// problem with Stripe's servers), and are extremely uncommon" — type `api_error`.
fn server_error() -> Reply {
    error(500, "api_error", "An unknown error occurred", None, None)
}

fn unavailable() -> Reply {
    error(
        503,
        "api_error",
        "Stripe is temporarily unavailable. Please try again later.",
        None,
        None,
    )
}

/// Stripe's 404 for a path it has no route for.
fn unrecognized(method: &Method, path: &str) -> Reply {
    error(
        404,
        "invalid_request_error",
        &format!(
            "Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/."
        ),
        None,
        None,
    )
}

// ---------------------------------------------------------------------------
// Auth

/// Masks a key the way Stripe echoes it in its 401 message: the mode prefix
/// (`sk_test_`, `rk_live_`, ...) and the last four characters stay, everything
/// between becomes `*`.
pub(crate) fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let prefix_len = [
        "sk_test_", "sk_live_", "rk_test_", "rk_live_", "pk_test_", "pk_live_",
    ]
    .iter()
    .find(|p| key.starts_with(*p))
    .map_or(0, |p| p.len());
    let rest = chars.len() - prefix_len;
    let keep = if rest > 4 { 4 } else { 0 };
    let mut out: String = chars[..prefix_len].iter().collect();
    out.extend(std::iter::repeat_n('*', rest - keep));
    out.extend(&chars[chars.len() - keep..]);
    out
}

/// The key a request presents: `Authorization: Bearer <key>`, or HTTP basic
/// auth with the key as the username (Stripe accepts both: "Authentication to
/// the API is performed with HTTP Basic Auth. Provide your API key as the basic
/// auth username value. You do not need to provide a password." and
/// "If you need to authenticate via bearer auth ... use -H "Authorization:
/// Bearer sk_test_..."").
fn presented_key(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    if value.is_empty() {
        return None;
    }
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        Some(rest.to_owned())
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64_decode(rest)?;
        let decoded = String::from_utf8(decoded).ok()?;
        let user = decoded.split(':').next().unwrap_or("");
        Some(user.to_owned())
    } else {
        Some(value.to_owned())
    }
}

/// `None` when authorized, else Stripe's 401.
fn authorize(shared: &Shared, headers: &HeaderMap) -> Option<Reply> {
    let message = match presented_key(headers) {
        Some(key) if key == shared.api_key => return None,
        Some(key) => format!("Invalid API Key provided: {}", mask_key(&key)),
        None => "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.".to_owned(),
    };
    Some(error(401, "invalid_request_error", &message, None, None))
}

// ---------------------------------------------------------------------------
// Routing

/// How many requests `Emulator::requests` keeps (the first ones): enough
/// for any test, bounded for long benchmark and demo servers.
pub(crate) const REQUEST_LOG_LIMIT: usize = 100_000;

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    // Everything that depends on arrival order is decided now.
    let arrival = shared.transport.arrive(&req);
    {
        let mut log = shared.requests.lock().unwrap();
        if log.len() < REQUEST_LOG_LIMIT {
            log.push(LoggedRequest {
                method: req.method().to_string(),
                path: req.uri().path().to_owned(),
                query: Query::<Vec<(String, String)>>::try_from_uri(req.uri())
                    .map(|Query(q)| q)
                    .unwrap_or_default(),
            });
        }
    }
    let request_id = shared.next_request_id();
    let early = match arrival.injected() {
        Some(injected) => Some(fault_reply(injected)),
        None => authorize(&shared, req.headers()).or_else(|| throttle(&shared)),
    };
    if let Err(dropped) = arrival.wait().await {
        // Never written: the connection's I/O now fails. Not counted in by_status.
        return dropped;
    }
    let mut reply = early.unwrap_or_else(|| route(&shared, req.method(), req.uri()));
    match arrival.after_work(&mut reply.status, &mut reply.body) {
        AfterWork::Send => {}
        AfterWork::ServerError => reply = server_error(),
        AfterWork::Dropped(dropped) => return dropped,
    }
    arrival.sent(reply.status, false);
    build(reply, &request_id)
}

/// Stripe's answer to an injected error fault.
fn fault_reply(injected: Injected<'_, StripeFault>) -> Reply {
    match injected {
        Injected::RateLimited => rate_limited(),
        Injected::Provider(StripeFault::LockTimeout) => lock_timeout(),
        Injected::ServerError => server_error(),
        Injected::Unavailable => unavailable(),
        Injected::MalformedJson => Reply {
            status: 200,
            body: MALFORMED_JSON_BODY.to_vec(),
            should_retry: false,
        },
    }
}

/// The rate limiter's decision on an authorized request arriving now:
/// `Some(429)` when refused. Every decision is logged in `arrivals`.
fn throttle(shared: &Shared) -> Option<Reply> {
    let limiter = shared.limiter.as_ref()?;
    let now = Instant::now();
    let admitted = limiter.lock().unwrap().admit(now);
    shared.arrivals.lock().unwrap().push(Arrival {
        at: now.saturating_duration_since(shared.origin),
        admitted,
    });
    (!admitted).then(rate_limited)
}

fn build(reply: Reply, request_id: &str) -> Response {
    let len = reply.body.len();
    let mut res = Response::new(Body::from(reply.body));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert("request-id", v);
    }
    h.insert(
        "cache-control",
        HeaderValue::from_static("no-cache, no-store"),
    );
    if reply.status == 401 {
        h.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"Stripe\""),
        );
    }
    if reply.should_retry {
        h.insert("stripe-should-retry", HeaderValue::from_static("true"));
    }
    res
}

fn route(shared: &Shared, method: &Method, uri: &axum::http::Uri) -> Reply {
    let path = uri.path();
    let rest = path.strip_prefix("/v1/");
    let segments: Vec<&str> = rest.map(|r| r.split('/').collect()).unwrap_or_default();
    let kind = segments.first().and_then(|s| ObjectKind::from_path(s));
    match (method, kind, segments.len()) {
        (&Method::GET, Some(kind), 1) => list(shared, kind, uri),
        (&Method::GET, Some(kind), 2) if !segments[1].is_empty() => {
            retrieve(shared, kind, &percent_decode(segments[1]))
        }
        _ => unrecognized(method, path),
    }
}

fn retrieve(shared: &Shared, kind: ObjectKind, id: &str) -> Reply {
    let found = shared.store.read().unwrap().get(kind, id);
    match found {
        Found::Object(json) => Reply::json(200, json.to_string()),
        Found::Deleted => Reply::json(
            200,
            json!({ "id": id, "object": kind.object_name(), "deleted": true }).to_string(),
        ),
        // Stripe: 404, `resource_missing`, "No such <object>: '<id>'", param `id`.
        Found::Missing => error(
            404,
            "invalid_request_error",
            &format!("No such {}: '{}'", kind.object_name(), id),
            Some("resource_missing"),
            Some("id"),
        ),
    }
}

/// Parses an integer parameter the way Stripe reports a bad one:
/// `"Invalid integer: <value>"`, code `parameter_invalid_integer`, with the param.
fn int_param(name: &str, value: &str) -> Result<i64, Reply> {
    value.parse::<i64>().map_err(|_| {
        invalid(
            &format!("Invalid integer: {value}"),
            Some("parameter_invalid_integer"),
            Some(name),
        )
    })
}

/// A range filter (`created`, `arrival_date`) as Stripe takes it: an integer
/// timestamp, or a hash of `gt`, `gte`, `lt`, `lte`, all applying at once.
/// `None` in a bound list is a bound no timestamp meets
/// (`created[gt]=<i64::MAX>`, `created[lt]=<i64::MIN>`).
#[derive(Default)]
struct Range {
    lower: Vec<Option<i64>>,
    upper: Vec<Option<i64>>,
}

impl Range {
    /// Takes `name` (`{field}` or `{field}[op]`) if it belongs to `field`:
    /// `Ok(true)` when taken.
    fn take(&mut self, field: &str, name: &str, value: &str) -> Result<bool, Reply> {
        let Some(op) = name.strip_prefix(field) else {
            return Ok(false);
        };
        match op {
            "" => {
                let v = int_param(name, value)?;
                self.lower.push(Some(v));
                self.upper.push(Some(v));
            }
            "[gte]" => self.lower.push(Some(int_param(name, value)?)),
            "[gt]" => self.lower.push(int_param(name, value)?.checked_add(1)),
            "[lte]" => self.upper.push(Some(int_param(name, value)?)),
            "[lt]" => self.upper.push(int_param(name, value)?.checked_sub(1)),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// (inclusive min, inclusive max, unsatisfiable).
    fn bounds(self) -> (Option<i64>, Option<i64>, bool) {
        let mut empty = self.lower.contains(&None) || self.upper.contains(&None);
        let min = self.lower.into_iter().flatten().max();
        let max = self.upper.into_iter().flatten().min();
        if let (Some(lo), Some(hi)) = (min, max) {
            empty |= lo > hi;
        }
        (min, max, empty)
    }
}

/// The plain (string) filters `kind`'s list endpoint takes beyond the
/// common ones, per Stripe's API reference:
/// <https://docs.stripe.com/api/balance_transactions/list> (`currency`,
/// `payout`, `source`, `type`) and <https://docs.stripe.com/api/payouts/list>
/// (`destination`, `status`; `arrival_date` is a range, see
/// [`parse_list_query`]). The other kinds' own filters (e.g. a charge's
/// `customer`) are not emulated.
fn kind_filters(kind: ObjectKind) -> &'static [&'static str] {
    match kind {
        ObjectKind::BalanceTransaction => &["currency", "payout", "source", "type"],
        ObjectKind::Payout => &["destination", "status"],
        _ => &[],
    }
}

/// Validates the list parameters Stripe documents for `GET /v1/<kind>`: `limit`
/// ("Limit can range between 1 and 100, and the default is 10"), the
/// `starting_after` / `ending_before` cursors, the `created` filter (an integer
/// timestamp, or a hash of `gt`, `gte`, `lt`, `lte`) and `expand` (accepted and
/// ignored: the emulator stores objects with whatever the caller put in them),
/// plus the kind's own filters: for balance transactions `type`, `source`,
/// `payout` (exact matches) and `currency` (case-insensitive; Stripe asks
/// for lowercase), for payouts `status`, `destination` and the
/// `arrival_date` range (<https://docs.stripe.com/api/payouts/list>).
/// Stripe rejects parameters an endpoint does not take with "Received unknown
/// parameter: <name>" (code `parameter_unknown`); so does the emulator. The
/// per-kind filters Stripe offers on the other kinds (e.g. `customer`) are
/// not emulated and are rejected the same way.
fn parse_list_query(kind: ObjectKind, params: &[(String, String)]) -> Result<ListQuery, Reply> {
    let mut q = ListQuery {
        limit: 10,
        ..Default::default()
    };
    let mut created = Range::default();
    let mut arrival = Range::default();
    for (name, value) in params {
        let name = name.as_str();
        if name == "expand" || (name.starts_with("expand[") && name.ends_with(']')) {
            continue;
        }
        let ranged = |field: &str| {
            name == field
                || ["[gt]", "[gte]", "[lt]", "[lte]"]
                    .iter()
                    .any(|op| name.strip_prefix(field) == Some(op))
        };
        let known = matches!(name, "limit" | "starting_after" | "ending_before")
            || ranged("created")
            || (kind == ObjectKind::Payout && ranged("arrival_date"))
            || kind_filters(kind).contains(&name);
        if !known {
            return Err(invalid(
                &format!("Received unknown parameter: {name}"),
                Some("parameter_unknown"),
                Some(name),
            ));
        }
        if value.is_empty() {
            // Stripe's answer to `param=` for a parameter that cannot be unset.
            return Err(invalid(
                &format!(
                    "You passed an empty string for '{name}'. We assume empty values are an attempt to unset a parameter; however '{name}' cannot be unset. You should remove '{name}' from your request or supply a non-empty value."
                ),
                Some("parameter_invalid_empty"),
                Some(name),
            ));
        }
        if created.take("created", name, value)? || arrival.take("arrival_date", name, value)? {
            continue;
        }
        let f = &mut q.filters;
        match name {
            "limit" => {
                let n = int_param(name, value)?;
                if n < 1 {
                    return Err(invalid(
                        "This value must be greater than or equal to 1.",
                        None,
                        Some("limit"),
                    ));
                }
                if n > 100 {
                    return Err(invalid(
                        "This value must be less than or equal to 100.",
                        None,
                        Some("limit"),
                    ));
                }
                q.limit = n as usize;
            }
            "starting_after" => q.starting_after = Some(value.clone()),
            "ending_before" => q.ending_before = Some(value.clone()),
            "type" => f.kind = Some(value.clone()),
            "currency" => f.currency = Some(value.clone()),
            "source" => f.source = Some(value.clone()),
            "payout" => f.payout = Some(value.clone()),
            "status" => f.status = Some(value.clone()),
            "destination" => f.destination = Some(value.clone()),
            _ => unreachable!("`{name}` is known"),
        }
    }
    if q.starting_after.is_some() && q.ending_before.is_some() {
        // Stripe's cursors are mutually exclusive; the emulator refuses both at
        // once rather than guess which one wins.
        return Err(invalid(
            "You may only specify one of these parameters: ending_before, starting_after.",
            None,
            Some("ending_before"),
        ));
    }
    // Several bounds (e.g. `created=` and `created[gte]=`) all apply.
    let (min, max, empty) = created.bounds();
    q.created_min = min;
    q.created_max = max;
    let (amin, amax, aempty) = arrival.bounds();
    q.filters.arrival_min = amin;
    q.filters.arrival_max = amax;
    q.empty = empty || aempty;
    Ok(q)
}

fn list(shared: &Shared, kind: ObjectKind, uri: &axum::http::Uri) -> Reply {
    let params = match Query::<Vec<(String, String)>>::try_from_uri(uri) {
        Ok(Query(p)) => p,
        Err(_) => return invalid("Invalid query string.", None, None),
    };
    let q = match parse_list_query(kind, &params) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let page = shared.store.read().unwrap().list(kind, &q);
    let page = match page {
        Ok(p) => p,
        // An unknown cursor: Stripe's `resource_missing`, naming the cursor param.
        Err(MissingCursor { param, id }) => {
            return invalid(
                &format!("No such {}: '{}'", kind.object_name(), id),
                Some("resource_missing"),
                Some(param),
            )
        }
    };
    // `{"object": "list", "url": "/v1/<kind>", "has_more": bool, "data": [...]}`,
    // assembled from the stored JSON texts without re-serializing them.
    let size: usize = page.data.iter().map(|d| d.len() + 1).sum();
    let mut body = String::with_capacity(size + 96);
    body.push_str("{\"object\":\"list\",\"url\":\"/v1/");
    body.push_str(kind.path());
    body.push_str("\",\"has_more\":");
    body.push_str(if page.has_more { "true" } else { "false" });
    body.push_str(",\"data\":[");
    for (i, d) in page.data.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(d);
    }
    body.push_str("]}");
    Reply::json(200, body)
}
