//! The HTTP side: axum serving on a custom listener, one fallback handler that
//! routes itself, auth, the cost bucket and fault injection.
//!
//! The listener, the server task and the `DropConnection` mechanism are
//! `recon_emulator_kit`'s, shared by the three emulators.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value as Json};

use super::exec::{self, gql_error, MAX_QUERY_COST};
use super::faults::CostBucket;
use super::graphql;
use super::store::{Bulk, Store};
use super::{BulkOutcome, EmulatorConfig, EmulatorStats};
use recon_emulator_kit::{
    splitmix64, uuid_v4, AfterWork, IdSeq, Injected, Transport, MALFORMED_JSON_BODY,
};

// ---------------------------------------------------------------------------
// Shared state

pub(crate) struct Shared {
    pub token: String,
    pub bulk_delay: Duration,
    /// `http://127.0.0.1:PORT`, for bulk result URLs.
    pub base_url: String,
    pub store: RwLock<Store>,
    pub bulk: Mutex<Bulk>,
    /// The fault plan, latency and the kit's stats.
    pub transport: Transport,
    pub bucket: Mutex<CostBucket>,
    /// See `EmulatorConfig::access_scopes`.
    pub access_scopes: Vec<String>,
    /// Shopify's own counters (`transport` is filled in by `stats()`).
    pub stats: Mutex<EmulatorStats>,
    request_ids: IdSeq,
}

impl Shared {
    pub fn new(config: &EmulatorConfig, base_url: String) -> Self {
        Shared {
            token: config.token.clone(),
            bulk_delay: config.bulk_delay,
            base_url,
            store: RwLock::new(Store::default()),
            bulk: Mutex::new(Bulk {
                next_outcome: BulkOutcome::Completed,
                ..Bulk::default()
            }),
            transport: Transport::new(config.latency),
            bucket: Mutex::new({
                let now = Instant::now();
                let mut b = CostBucket::new(config.max_available, config.restore_rate, now);
                b.set_others(config.others_share, now);
                b
            }),
            access_scopes: config.access_scopes.clone(),
            stats: Mutex::new(EmulatorStats::default()),
            request_ids: IdSeq::new(),
        }
    }

    /// A UUID-shaped id (Shopify's `X-Request-Id` values are UUIDs), unique
    /// within an emulator: a bijective mix of a counter.
    fn next_request_id(&self) -> String {
        let a = self.request_ids.next();
        uuid_v4(a, splitmix64(a))
    }

    /// The earliest creation time (ns) of an order the app may see: 60 days
    /// ago without `read_all_orders` ("By default, apps can only access the
    /// last 60 days' worth of orders", Shopify's `Order` object docs), else
    /// the beginning of time.
    /// https://shopify.dev/docs/api/admin-graphql/latest/objects/Order
    pub fn visible_from(&self) -> i128 {
        if self.access_scopes.iter().any(|s| s == "read_all_orders") {
            i128::MIN
        } else {
            jiff::Timestamp::now().as_nanosecond() - 60 * 86_400 * 1_000_000_000
        }
    }

    /// `throttleStatus`, as of `now`. Shopify sends the bucket size and the
    /// restore rate as floats and `currentlyAvailable` as an integer, e.g.
    /// `{"maximumAvailable": 2000.0, "currentlyAvailable": 1990, "restoreRate": 100.0}`.
    fn throttle_status(&self, now: Instant) -> Json {
        let mut b = self.bucket.lock().unwrap();
        json!({
            "maximumAvailable": b.maximum() as f64,
            "currentlyAvailable": b.available(now),
            "restoreRate": b.restore_rate() as f64,
        })
    }
}

// ---------------------------------------------------------------------------
// Replies

/// A response before the common headers are added.
struct Reply {
    status: u16,
    body: Vec<u8>,
    content_type: &'static str,
    /// `Retry-After`, in seconds.
    retry_after: Option<&'static str>,
    /// The API version, echoed as `X-Shopify-API-Version` on GraphQL replies.
    api_version: Option<String>,
    /// A `THROTTLED` GraphQL error (counted in `stats.throttled`).
    throttled: bool,
}

const JSON_TYPE: &str = "application/json; charset=utf-8";

impl Reply {
    fn json(status: u16, body: &Json) -> Reply {
        Reply {
            status,
            body: body.to_string().into_bytes(),
            content_type: JSON_TYPE,
            retry_after: None,
            api_version: None,
            throttled: false,
        }
    }
}

/// HTTP `429`. Shopify answers requests over its request-based limits with
/// `429 Too Many Requests` and a `Retry-After` header (in seconds, sent as a
/// float, e.g. `2.0`); the GraphQL Admin API's cost-based throttling is the
/// `THROTTLED` error instead (HTTP 200), see [`graphql`].
fn rate_limited() -> Reply {
    let mut r = Reply::json(
        429,
        &json!({"errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}]}),
    );
    r.retry_after = Some("1.0");
    r
}

/// HTTP 500 with Shopify's internal-error body, which names the request id.
fn server_error(request_id: &str) -> Reply {
    Reply::json(
        500,
        &json!({"errors": [{
            "message": format!("Internal error. Looks like something went wrong on our end.\nRequest ID: {request_id} (include this in support requests)."),
            "extensions": {"code": "INTERNAL_SERVER_ERROR", "requestId": request_id},
        }]}),
    )
}

fn unavailable() -> Reply {
    Reply::json(503, &json!({"errors": "Service Unavailable"}))
}

fn not_found() -> Reply {
    Reply::json(404, &json!({"errors": "Not Found"}))
}

/// Shopify's `401` for a missing or wrong `X-Shopify-Access-Token`.
fn unauthorized() -> Reply {
    Reply::json(
        401,
        &json!({"errors": "[API] Invalid API key or access token (unrecognized login or wrong password)"}),
    )
}

/// Shopify's `400` for a request without a usable `query`.
fn missing_query() -> Reply {
    Reply::json(
        400,
        &json!({"errors": {"query": "Required parameter missing or invalid"}}),
    )
}

// ---------------------------------------------------------------------------
// Handler

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    // The fault is decided on arrival, in arrival order.
    let arrival = shared.transport.arrive(&req);
    let request_id = shared.next_request_id();
    let (parts, body) = req.into_parts();
    // A dropped request has no effect (it is never routed); an injected error
    // answers without auth or throttling.
    let reply = match arrival.injected() {
        Some(injected) => Some(fault_reply(injected, &request_id)),
        None if arrival.drops() => None,
        None => {
            let body = axum::body::to_bytes(body, 16 << 20)
                .await
                .unwrap_or_default();
            Some(route(
                &shared,
                &parts.method,
                parts.uri.path(),
                &parts.headers,
                &body,
            ))
        }
    };
    if let Err(dropped) = arrival.wait().await {
        // Never written: the connection's I/O now fails. Not counted in by_status.
        return dropped;
    }
    let mut reply = reply.expect("a reply unless dropped");
    match arrival.after_work(&mut reply.status, &mut reply.body) {
        AfterWork::Send => {}
        AfterWork::ServerError => reply = server_error(&request_id),
        AfterWork::Dropped(dropped) => return dropped,
    }
    arrival.sent(reply.status, reply.throttled);
    build(reply, &request_id)
}

/// Shopify's answer to an injected error fault.
fn fault_reply(injected: Injected<'_, Infallible>, request_id: &str) -> Reply {
    match injected {
        Injected::RateLimited => rate_limited(),
        Injected::ServerError => server_error(request_id),
        Injected::Unavailable => unavailable(),
        Injected::MalformedJson => Reply {
            body: MALFORMED_JSON_BODY.to_vec(),
            ..Reply::json(200, &Json::Null)
        },
        Injected::Provider(never) => match *never {},
    }
}

fn build(reply: Reply, request_id: &str) -> Response {
    let len = reply.body.len();
    let mut res = Response::new(Body::from(reply.body));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert("x-request-id", v);
    }
    if let Some(v) = reply
        .api_version
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        h.insert("x-shopify-api-version", v);
    }
    if let Some(ra) = reply.retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static(ra));
    }
    res
}

fn route(shared: &Shared, method: &Method, path: &str, headers: &HeaderMap, body: &Bytes) -> Reply {
    if let Some(file) = path.strip_prefix("/bulk/") {
        return if method == Method::GET {
            bulk_file(shared, file)
        } else {
            not_found()
        };
    }
    // POST /admin/api/{version}/graphql.json
    let version = path
        .strip_prefix("/admin/api/")
        .and_then(|rest| rest.strip_suffix("/graphql.json"))
        .filter(|v| !v.is_empty() && !v.contains('/'));
    let Some(version) = version else {
        return not_found();
    };
    let token = headers
        .get("x-shopify-access-token")
        .and_then(|v| v.to_str().ok());
    if token != Some(shared.token.as_str()) {
        return unauthorized();
    }
    if method != Method::POST {
        return Reply::json(405, &json!({"errors": "Method Not Allowed"}));
    }
    let mut reply = graphql_request(shared, headers, body);
    reply.api_version = Some(version.to_owned());
    reply
}

/// `GET /bulk/{n}.jsonl` (a completed operation's `url`) or
/// `/bulk/{n}-partial.jsonl` (a failed one's `partialDataUrl`). No auth: on
/// Shopify these are pre-signed storage URLs. A URL the emulator never handed
/// out is the storage service's `404 NoSuchKey`.
fn bulk_file(shared: &Shared, file: &str) -> Reply {
    let no_such_key = || {
        Reply {
        content_type: "application/xml; charset=UTF-8",
        ..Reply::json(404, &Json::Null)
    }
    .with_body(
        "<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>",
    )
    };
    let Some(stem) = file.strip_suffix(".jsonl") else {
        return no_such_key();
    };
    let (number, partial) = match stem.strip_suffix("-partial") {
        Some(n) => (n, true),
        None => (stem, false),
    };
    let Ok(number) = number.parse::<u64>() else {
        return no_such_key();
    };
    let bulk = shared.bulk.lock().unwrap();
    let Some(op) = bulk.ops.get(&number) else {
        return no_such_key();
    };
    let view = op.view(Instant::now(), shared.bulk_delay);
    let lines = if partial && view.partial {
        &op.lines[..op.partial_len()]
    } else if !partial && view.url {
        &op.lines[..]
    } else {
        return no_such_key();
    };
    let mut body = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for line in lines {
        body.push_str(line);
        body.push('\n');
    }
    Reply {
        content_type: "application/jsonl",
        ..Reply::json(200, &Json::Null)
    }
    .with_body(body)
}

impl Reply {
    fn with_body(mut self, body: impl Into<String>) -> Reply {
        self.body = body.into().into_bytes();
        self
    }
}

/// The body of a GraphQL response: `errors` and/or `data`, and
/// `extensions.cost` (every Shopify GraphQL response reports the query's cost
/// and the bucket's state).
fn graphql_body(
    errors: Option<Vec<Json>>,
    data: Option<Json>,
    requested: u64,
    actual: Option<u64>,
    throttle: Json,
    search: Vec<Json>,
) -> Json {
    let mut body = Map::new();
    if let Some(errors) = errors {
        body.insert("errors".into(), Json::Array(errors));
    }
    if let Some(data) = data {
        body.insert("data".into(), data);
    }
    let mut ext = Map::new();
    ext.insert(
        "cost".into(),
        json!({
            "requestedQueryCost": requested,
            "actualQueryCost": actual,
            "throttleStatus": throttle,
        }),
    );
    if !search.is_empty() {
        ext.insert("search".into(), Json::Array(search));
    }
    body.insert("extensions".into(), Json::Object(ext));
    Json::Object(body)
}

fn graphql_request(shared: &Shared, headers: &HeaderMap, body: &Bytes) -> Reply {
    let now = Instant::now();
    let invalid = |errors: Vec<Json>| {
        Reply::json(
            200,
            &graphql_body(
                Some(errors),
                None,
                0,
                Some(0),
                shared.throttle_status(now),
                Vec::new(),
            ),
        )
    };

    // The body: JSON `{"query", "variables"?, "operationName"?}`, or (with
    // `Content-Type: application/graphql`) the query itself.
    let is_graphql = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/graphql"));
    let (query, variables, operation_name) = if is_graphql {
        match std::str::from_utf8(body) {
            Ok(q) => (q.to_owned(), Map::new(), None),
            Err(_) => return missing_query(),
        }
    } else {
        let Ok(Json::Object(mut obj)) = serde_json::from_slice::<Json>(body) else {
            return missing_query();
        };
        let Some(Json::String(query)) = obj.remove("query") else {
            return missing_query();
        };
        let variables = match obj.remove("variables") {
            Some(Json::Object(v)) => v,
            None | Some(Json::Null) => Map::new(),
            // graphql-ruby also accepts variables as a JSON-encoded string.
            Some(Json::String(s)) => match serde_json::from_str::<Json>(&s) {
                Ok(Json::Object(v)) => v,
                _ => return missing_query(),
            },
            Some(_) => return missing_query(),
        };
        let operation_name = match obj.remove("operationName") {
            Some(Json::String(n)) => Some(n),
            _ => None,
        };
        (query, variables, operation_name)
    };

    let doc = match graphql::parse(&query) {
        Ok(d) => d,
        Err(e) => return invalid(vec![gql_error(e.message, e.pos, None, None)]),
    };
    let op = match &operation_name {
        Some(name) => doc
            .operations
            .iter()
            .find(|o| o.name.as_deref() == Some(name.as_str())),
        None if doc.operations.len() == 1 => doc.operations.first(),
        None => {
            return invalid(vec![gql_error(
                "An operation name is required",
                None,
                None,
                None,
            )])
        }
    };
    let Some(op) = op else {
        return invalid(vec![gql_error(
            format!(
                "No operation named \"{}\"",
                operation_name.unwrap_or_default()
            ),
            None,
            None,
            None,
        )]);
    };
    let vars = match exec::validate(op, &variables, false) {
        Ok(v) => v,
        Err(errors) => return invalid(errors),
    };

    let requested = exec::requested_cost(op, &vars);
    if requested > MAX_QUERY_COST {
        // Shopify: "A single query to the API cannot exceed a cost of 1000.
        // This limit is enforced before query execution begins".
        let message = format!(
            "Query cost is {requested}, which exceeds the single query max cost limit ({MAX_QUERY_COST}).\n\nSee https://shopify.dev/concepts/about-apis/rate-limits for more information on how the\ncost of a query is calculated.\n\nTo query larger amounts of data with fewer limits, bulk operations should be used instead.\nSee https://shopify.dev/tutorials/perform-bulk-operations-with-admin-api for usage details.\n"
        );
        let error = gql_error(
            message,
            None,
            None,
            Some(
                json!({"code": "MAX_COST_EXCEEDED", "cost": requested, "maxCost": MAX_QUERY_COST}),
            ),
        );
        return Reply::json(
            200,
            &graphql_body(
                Some(vec![error]),
                None,
                requested,
                None,
                shared.throttle_status(now),
                Vec::new(),
            ),
        );
    }

    // The leaky bucket: the requested cost must be available now.
    let admitted = shared.bucket.lock().unwrap().try_take(requested, now);
    if !admitted {
        // Shopify's throttled answer: HTTP 200, a `THROTTLED` error, no data,
        // `actualQueryCost: null`.
        let error = gql_error(
            "Throttled",
            None,
            None,
            Some(
                json!({"code": "THROTTLED", "documentation": "https://shopify.dev/api/usage/rate-limits"}),
            ),
        );
        let mut reply = Reply::json(
            200,
            &graphql_body(
                Some(vec![error]),
                None,
                requested,
                None,
                shared.throttle_status(now),
                Vec::new(),
            ),
        );
        reply.throttled = true;
        return reply;
    }

    let executed = exec::execute(shared, op, &vars, now);
    let actual = executed.actual.min(requested);
    shared.bucket.lock().unwrap().refund(requested - actual);
    shared.stats.lock().unwrap().queries += 1;
    Reply::json(
        200,
        &graphql_body(
            None,
            Some(executed.data),
            requested,
            Some(actual),
            shared.throttle_status(now),
            executed.search,
        ),
    )
}
