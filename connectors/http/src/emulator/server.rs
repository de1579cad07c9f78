//! The emulator's one handler: the kit's fault sequence, the strict rate
//! counter, auth, and the routes of the module docs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::response::Response;
use recon_core::{format_minor, format_timestamp, Currency};
use recon_emulator_kit::{base64_decode, base64_encode, AfterWork, Injected, MALFORMED_JSON_BODY};
use serde_json::{json, Value as Json};

use super::{Item, Shared};

static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// What a route answers: status, body, extra headers.
struct Reply {
    status: u16,
    body: Json,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn json(status: u16, body: Json) -> Reply {
        Reply {
            status,
            body,
            headers: Vec::new(),
        }
    }

    fn error(status: u16, code: &str, message: &str) -> Reply {
        Reply::json(status, json!({"error": {"code": code, "message": message}}))
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

fn respond(status: u16, body: Vec<u8>, headers: &[(String, String)]) -> Response {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .header(
            "x-request-id",
            format!("req_{}", REQUESTS.fetch_add(1, Ordering::Relaxed) + 1),
        );
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request<Body>) -> Response {
    let creates = req.method() == Method::POST && req.uri().path() == "/records";
    let arrival = shared.transport.arrive_with(&req, || {
        creates
            .then(|| shared.create_faults.lock().unwrap().next())
            .flatten()
    });
    if let Some(injected) = arrival.injected() {
        let (status, body, headers): (u16, Vec<u8>, Vec<(String, String)>) = match injected {
            Injected::RateLimited => (
                429,
                json!({"error": {"code": "rate_limited", "message": "Too many requests"}})
                    .to_string()
                    .into_bytes(),
                vec![("retry-after".into(), "1".into())],
            ),
            Injected::ServerError => (
                500,
                json!({"error": {"code": "internal_error", "message": "Something went wrong"}})
                    .to_string()
                    .into_bytes(),
                vec![],
            ),
            Injected::Unavailable => (
                503,
                json!({"error": {"code": "unavailable", "message": "Service unavailable"}})
                    .to_string()
                    .into_bytes(),
                vec![],
            ),
            Injected::MalformedJson => (200, MALFORMED_JSON_BODY.to_vec(), vec![]),
            Injected::Provider(never) => match *never {},
        };
        arrival.sent(status, false);
        return respond(status, body, &headers);
    }
    if let Some(wait) = shared.admit() {
        arrival.sent(429, false);
        return respond(
            429,
            json!({"error": {"code": "rate_limited", "message": "API rate limit exceeded"}})
                .to_string()
                .into_bytes(),
            &[("retry-after".into(), wait.to_string())],
        );
    }
    if let Err(dropped) = arrival.wait().await {
        return dropped;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, 4 << 20).await {
        Ok(b) => b,
        Err(_) => {
            arrival.sent(400, false);
            return respond(400, b"{}".to_vec(), &[]);
        }
    };
    let query: Vec<(String, String)> = parts
        .uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let host = parts
        .headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string();
    let path = parts.uri.path().to_string();
    let reply = if path == "/oauth/token" && parts.method == Method::POST {
        token(&shared, &parts.headers, &bytes)
    } else if !authorized(&shared, &parts.headers, &query) {
        Reply::error(401, "unauthorized", "Invalid or missing credentials")
    } else {
        route(
            &shared,
            &parts.method,
            &path,
            &query,
            &parts.headers,
            &bytes,
            &host,
        )
    };
    let mut reply = reply;
    if let Some((remaining, reset)) = shared.remaining() {
        if path.starts_with("/link/") {
            let at = jiff::Timestamp::now().as_second() + reset as i64;
            reply = reply
                .header("x-ratelimit-remaining", remaining.to_string())
                .header("x-ratelimit-reset", at.to_string());
        } else if path.starts_with("/next/") {
            reply = reply
                .header("ratelimit-remaining", remaining.to_string())
                .header("ratelimit-reset", reset.to_string());
        }
    }
    let mut status = reply.status;
    let mut body = reply.body.to_string().into_bytes();
    match arrival.after_work(&mut status, &mut body) {
        AfterWork::Send => {
            arrival.sent(status, false);
            respond(status, body, &reply.headers)
        }
        AfterWork::ServerError => {
            arrival.sent(500, false);
            respond(
                500,
                json!({"error": {"code": "internal_error", "message": "Something went wrong"}})
                    .to_string()
                    .into_bytes(),
                &[],
            )
        }
        AfterWork::Dropped(r) => r,
    }
}

fn authorized(shared: &Shared, headers: &HeaderMap, query: &[(String, String)]) -> bool {
    let token = shared.config.token.as_str();
    let issued = |t: &str| shared.store.lock().unwrap().tokens.iter().any(|i| i == t);
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        if let Some(b) = auth.strip_prefix("Bearer ") {
            return b == token || issued(b);
        }
        if let Some(b) = auth.strip_prefix("Basic ") {
            return base64_decode(b.trim())
                .and_then(|raw| String::from_utf8(raw).ok())
                .is_some_and(|up| up.split(':').next() == Some(token));
        }
        return false;
    }
    if let Some(k) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return k == token;
    }
    query.iter().any(|(k, v)| k == "api_token" && v == token)
}

/// `POST /oauth/token`: the client credentials grant (RFC 6749 section
/// 4.4) and the refresh grant (section 6), the client authenticated by
/// HTTP Basic or by `client_id`/`client_secret` in the form (section
/// 2.3.1); errors as section 5.2 (`invalid_client` 401, `invalid_grant`
/// 400). A refresh grant rotates the refresh token.
fn token(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Reply {
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body).into_owned().collect();
    let get = |k: &str| {
        form.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.to_string())
    };
    let basic = headers
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Basic "))
        .and_then(|b| base64_decode(b.trim()))
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|up| {
            up.split_once(':')
                .map(|(u, p)| (u.to_string(), p.to_string()))
        });
    let (id, secret) = basic.unwrap_or((
        get("client_id").unwrap_or_default(),
        get("client_secret").unwrap_or_default(),
    ));
    if (&id, &secret) != (&shared.config.client.0, &shared.config.client.1) {
        return Reply::json(
            401,
            json!({"error": "invalid_client", "error_description": "Client authentication failed"}),
        );
    }
    let mut store = shared.store.lock().unwrap();
    let refreshed = match get("grant_type").as_deref() {
        Some("client_credentials") => None,
        Some("refresh_token") => {
            let given = get("refresh_token");
            if given.is_none() || given != store.refresh {
                return Reply::json(
                    400,
                    json!({"error": "invalid_grant", "error_description": "The refresh token is invalid, expired or revoked"}),
                );
            }
            store.refreshes += 1;
            let next = format!(
                "emu_rt_{}_{:08x}",
                store.refreshes,
                REQUESTS.load(Ordering::Relaxed) * 40503 % 0xffff_ffff
            );
            store.refresh = Some(next.clone());
            Some(next)
        }
        _ => return Reply::json(400, json!({"error": "unsupported_grant_type"})),
    };
    let t = format!(
        "emu_at_{}_{:08x}",
        store.tokens.len() + 1,
        REQUESTS.load(Ordering::Relaxed) * 2654435761 % 0xffff_ffff
    );
    store.tokens.push(t.clone());
    let mut answer = json!({"access_token": t, "token_type": "Bearer", "expires_in": 3600});
    if let Some(r) = refreshed {
        answer["refresh_token"] = json!(r);
    }
    Reply::json(200, answer)
}

fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn number(query: &[(String, String)], name: &str, default: u64) -> Result<u64, Reply> {
    match param(query, name) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| {
            Reply::error(
                400,
                "invalid_parameter",
                &format!("{name} must be a whole number"),
            )
        }),
    }
}

fn instant(query: &[(String, String)], name: &str) -> Result<Option<jiff::Timestamp>, Reply> {
    param(query, name)
        .map(|v| {
            v.parse::<jiff::Timestamp>().map_err(|_| {
                Reply::error(
                    400,
                    "invalid_parameter",
                    &format!("{name} must be an ISO 8601 timestamp"),
                )
            })
        })
        .transpose()
}

fn major(amount: i64, currency: &str) -> String {
    let c = Currency::parse(currency).unwrap_or_else(|_| Currency::parse("USD").unwrap());
    format_minor(i128::from(amount), c)
}

fn ts(secs: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

fn route(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &[(String, String)],
    headers: &HeaderMap,
    body: &[u8],
    host: &str,
) -> Reply {
    let mut items = shared.store.lock().unwrap().items.clone();
    items.sort_by_key(|i| (i.created, i.id));
    let result = match (method, path) {
        (&Method::GET, "/link/items") => link(&items, query, host),
        (&Method::GET, "/offset/items") => offset(&items, query),
        (&Method::GET, "/page/items") => page(&items, query),
        (&Method::GET, "/next/items") => next(&items, query, host),
        (&Method::POST, "/records") => Ok(create(shared, headers, body)),
        (&Method::POST, p) if p.starts_with("/notion/v1/databases/") && p.ends_with("/query") => {
            notion(&items, headers, body)
        }
        (&Method::GET, "/records") => list_records(shared, query),
        (m, p) if p.starts_with("/records/") => {
            let ext = recon_emulator_kit::percent_decode(&p["/records/".len()..]);
            match *m {
                Method::GET => Ok(get_record(shared, &ext)),
                Method::PUT => Ok(update(shared, &ext, body)),
                _ => Ok(Reply::error(405, "method_not_allowed", "Use GET or PUT")),
            }
        }
        _ => Ok(Reply::error(404, "not_found", "No such route")),
    };
    result.unwrap_or_else(|r| r)
}

/// GitHub: `page`, `per_page` (default 30, at most 100), a bare array and
/// the `Link` header.
fn link(items: &[Item], query: &[(String, String)], host: &str) -> Result<Reply, Reply> {
    let since = instant(query, "since")?;
    let until = instant(query, "until")?;
    let per_page = number(query, "per_page", 30)?.clamp(1, 100);
    let page = number(query, "page", 1)?.max(1);
    let matching: Vec<&Item> = items
        .iter()
        .filter(|i| {
            since.is_none_or(|s| ts(i.created) >= s) && until.is_none_or(|u| ts(i.created) < u)
        })
        .collect();
    let last = (matching.len() as u64).div_ceil(per_page).max(1);
    let body: Vec<Json> = matching
        .iter()
        .skip(((page - 1) * per_page) as usize)
        .take(per_page as usize)
        .map(|i| {
            json!({
                "id": i.id,
                "created_at": format_timestamp(ts(i.created)),
                "amount": major(i.amount, &i.currency),
                "currency": i.currency,
                "state": i.status,
            })
        })
        .collect();
    let url = |p: u64| {
        let mut q: Vec<(String, String)> = query
            .iter()
            .filter(|(k, _)| k != "page" && k != "api_token")
            .cloned()
            .collect();
        q.push(("page".into(), p.to_string()));
        let qs = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(q)
            .finish();
        format!("<http://{host}/link/items?{qs}>")
    };
    let mut links = Vec::new();
    if page < last {
        links.push(format!("{}; rel=\"next\"", url(page + 1)));
    }
    links.push(format!("{}; rel=\"last\"", url(last)));
    Ok(Reply::json(200, Json::Array(body))
        .header("link", links.join(", "))
        .header("x-github-request-id", format!("GH{page:04}")))
}

/// Pipedrive v1: `start`, `limit` (default 100, at most 500).
fn offset(items: &[Item], query: &[(String, String)]) -> Result<Reply, Reply> {
    let start = number(query, "start", 0)?;
    let limit = number(query, "limit", 100)?.clamp(1, 500);
    let data: Vec<Json> = items
        .iter()
        .skip(start as usize)
        .take(limit as usize)
        .map(|i| {
            let value: serde_json::Number =
                major(i.amount, &i.currency).parse().unwrap_or(0.into());
            json!({
                "id": format!("it_{}", i.id),
                "value": value,
                "currency": i.currency,
                "status": i.status,
                "add_time": ts(i.created).strftime("%Y-%m-%d %H:%M:%S").to_string(),
            })
        })
        .collect();
    let more = start + limit < items.len() as u64;
    let mut pagination = json!({"start": start, "limit": limit, "more_items_in_collection": more});
    if more {
        pagination["next_start"] = json!(start + limit);
    }
    Ok(Reply::json(
        200,
        json!({"success": true, "data": data, "additional_data": {"pagination": pagination}}),
    ))
}

/// Harvest v2: `page`, `per_page` (default 100, at most 2000), `from`/`to`
/// dates, both included.
fn page(items: &[Item], query: &[(String, String)]) -> Result<Reply, Reply> {
    let date = |name: &str| -> Result<Option<jiff::civil::Date>, Reply> {
        param(query, name)
            .map(|v| {
                v.parse::<jiff::civil::Date>().map_err(|_| {
                    Reply::error(
                        400,
                        "invalid_parameter",
                        &format!("{name} must be a date YYYY-MM-DD"),
                    )
                })
            })
            .transpose()
    };
    let (from, to) = (date("from")?, date("to")?);
    let per_page = number(query, "per_page", 100)?.clamp(1, 2000);
    let page = number(query, "page", 1)?.max(1);
    let day = |i: &Item| {
        ts(i.created)
            .strftime("%Y-%m-%d")
            .to_string()
            .parse::<jiff::civil::Date>()
            .unwrap_or_default()
    };
    let matching: Vec<&Item> = items
        .iter()
        .filter(|i| from.is_none_or(|f| day(i) >= f) && to.is_none_or(|t| day(i) <= t))
        .collect();
    let total_pages = (matching.len() as u64).div_ceil(per_page);
    let data: Vec<Json> = matching
        .iter()
        .skip(((page - 1) * per_page) as usize)
        .take(per_page as usize)
        .map(|i| {
            let amount: serde_json::Number =
                major(i.amount, &i.currency).parse().unwrap_or(0.into());
            json!({
                "id": i.id,
                "amount": amount,
                "currency": i.currency,
                "state": i.status,
                "created_at": format_timestamp(ts(i.created)),
            })
        })
        .collect();
    Ok(Reply::json(
        200,
        json!({
            "invoices": data,
            "per_page": per_page,
            "total_pages": total_pages,
            "total_entries": matching.len(),
            "page": page,
            "next_page": if page < total_pages { json!(page + 1) } else { Json::Null },
            "previous_page": if page > 1 { json!(page - 1) } else { Json::Null },
        }),
    ))
}

/// Zendesk cursor pagination: `page[size]` (default 100), `page[after]`,
/// `links.next`, `meta.has_more`; `start_time`/`end_time` in Unix seconds.
fn next(items: &[Item], query: &[(String, String)], host: &str) -> Result<Reply, Reply> {
    let start = param(query, "start_time")
        .map(|_| number(query, "start_time", 0))
        .transpose()?;
    let end = param(query, "end_time")
        .map(|_| number(query, "end_time", 0))
        .transpose()?;
    let size = number(query, "page[size]", 100)?.clamp(1, 100);
    let after = match param(query, "page[after]") {
        None => None,
        Some(c) => {
            let raw = base64_decode(c)
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| {
                    let (a, b) = s.split_once(':')?;
                    Some((a.parse::<i64>().ok()?, b.parse::<u64>().ok()?))
                });
            Some(raw.ok_or_else(|| {
                Reply::error(400, "invalid_cursor", "page[after] is not a cursor")
            })?)
        }
    };
    let matching: Vec<&Item> = items
        .iter()
        .filter(|i| {
            start.is_none_or(|s| i.created >= s as i64)
                && end.is_none_or(|e| i.created < e as i64)
                && after.is_none_or(|a| (i.created, i.id) > a)
        })
        .collect();
    let page: Vec<&Item> = matching.iter().take(size as usize).copied().collect();
    let has_more = matching.len() > page.len();
    let cursor = page
        .last()
        .map(|i| base64_encode(format!("{}:{}", i.created, i.id).as_bytes()));
    let next = match (&cursor, has_more) {
        (Some(c), true) => {
            let mut q: Vec<(String, String)> = query
                .iter()
                .filter(|(k, _)| k != "page[after]" && k != "api_token")
                .cloned()
                .collect();
            q.push(("page[after]".into(), c.clone()));
            let qs = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(q)
                .finish();
            json!(format!("http://{host}/next/items?{qs}"))
        }
        _ => Json::Null,
    };
    let data: Vec<Json> = page
        .iter()
        .map(|i| {
            json!({
                "id": i.id,
                "created_at": format_timestamp(ts(i.created)),
                "amount_cents": i.amount,
                "currency": i.currency.to_lowercase(),
                "status": i.status,
            })
        })
        .collect();
    Ok(Reply::json(
        200,
        json!({
            "items": data,
            "meta": {"has_more": has_more, "after_cursor": cursor, "before_cursor": Json::Null},
            "links": {"next": next, "prev": Json::Null},
        }),
    ))
}

fn find<'a>(records: &'a [Json], ext: &str) -> Option<&'a Json> {
    records
        .iter()
        .find(|r| r.get("external_id").and_then(Json::as_str) == Some(ext))
}

/// `POST /records`.
fn create(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Reply {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut store = shared.store.lock().unwrap();
    if let Some(k) = &key {
        if let Some((status, body)) = store.idempotent.get(k).cloned() {
            store.replays += 1;
            return Reply::json(status, body).header("idempotent-replayed", "true");
        }
    }
    let reply = match serde_json::from_slice::<Json>(body) {
        Err(_) => Reply::error(400, "invalid_json", "The body is not JSON"),
        Ok(Json::Object(mut o)) => {
            let ext = o
                .get("external_id")
                .and_then(Json::as_str)
                .map(str::to_string);
            let amount = o.get("amount").and_then(Json::as_i64);
            match (ext, amount) {
                (None, _) => Reply::error(400, "parameter_missing", "external_id is required"),
                (Some(ext), _) if find(&store.records, &ext).is_some() => Reply::error(
                    409,
                    "duplicate_external_id",
                    &format!("A record with external_id {ext} already exists"),
                ),
                (Some(_), Some(a)) if a < 0 => {
                    Reply::error(422, "amount_invalid", "amount must be zero or more")
                }
                (Some(_), None) if o.contains_key("amount") => Reply::error(
                    422,
                    "amount_invalid",
                    "amount must be a whole number of minor units",
                ),
                (Some(_), _) => {
                    let id = format!("rec_{}", store.records.len() + 1);
                    o.insert("id".into(), json!(id));
                    let record = Json::Object(o);
                    store.records.push(record.clone());
                    store.creates += 1;
                    Reply::json(201, record)
                }
            }
        }
        Ok(_) => Reply::error(400, "invalid_body", "The body must be a JSON object"),
    };
    if let Some(k) = key {
        if reply.status < 500 {
            store
                .idempotent
                .insert(k, (reply.status, reply.body.clone()));
        }
    }
    reply
}

fn get_record(shared: &Shared, ext: &str) -> Reply {
    let store = shared.store.lock().unwrap();
    match find(&store.records, ext) {
        Some(r) => Reply::json(200, r.clone()),
        None => Reply::error(
            404,
            "not_found",
            &format!("No record with external_id {ext}"),
        ),
    }
}

/// `GET /records?offset=&limit=`, or `?ids=a,b` (at most 100 external
/// IDs, comma-separated): the records among them, in creation order.
fn list_records(shared: &Shared, query: &[(String, String)]) -> Result<Reply, Reply> {
    let offset = number(query, "offset", 0)?;
    let limit = number(query, "limit", 100)?.clamp(1, 100);
    let store = shared.store.lock().unwrap();
    if let Some(ids) = param(query, "ids") {
        let ids: Vec<&str> = ids.split(',').filter(|s| !s.is_empty()).collect();
        if ids.len() > 100 {
            return Err(Reply::error(
                400,
                "too_many_ids",
                "ids takes at most 100 IDs",
            ));
        }
        let found: Vec<Json> = store
            .records
            .iter()
            .filter(|r| {
                r.get("external_id")
                    .and_then(Json::as_str)
                    .is_some_and(|e| ids.contains(&e))
            })
            .cloned()
            .collect();
        return Ok(Reply::json(
            200,
            json!({"records": found, "total": found.len()}),
        ));
    }
    let page: Vec<Json> = store
        .records
        .iter()
        .skip(offset as usize)
        .take(limit as usize)
        .cloned()
        .collect();
    Ok(Reply::json(
        200,
        json!({"records": page, "total": store.records.len()}),
    ))
}

/// `PUT /records/{external_id}`: replaces every field but `id` and
/// `external_id`.
fn update(shared: &Shared, ext: &str, body: &[u8]) -> Reply {
    let Ok(Json::Object(fields)) = serde_json::from_slice::<Json>(body) else {
        return Reply::error(400, "invalid_body", "The body must be a JSON object");
    };
    if fields
        .get("amount")
        .and_then(Json::as_i64)
        .is_some_and(|a| a < 0)
    {
        return Reply::error(422, "amount_invalid", "amount must be zero or more");
    }
    let mut store = shared.store.lock().unwrap();
    let Some(r) = store
        .records
        .iter_mut()
        .find(|r| r.get("external_id").and_then(Json::as_str) == Some(ext))
    else {
        return Reply::error(
            404,
            "not_found",
            &format!("No record with external_id {ext}"),
        );
    };
    if let Json::Object(o) = r {
        for (k, v) in fields {
            if k != "id" && k != "external_id" {
                o.insert(k, v);
            }
        }
    }
    let out = r.clone();
    store.updates += 1;
    Reply::json(200, out)
}

/// Notion's database query: `POST …/databases/{id}/query` with a JSON
/// body of `filter` (here: `created_time` timestamp conditions, alone or
/// under `and`), `start_cursor` and `page_size` (at most 100); the answer
/// `{"object": "list", "results", "next_cursor", "has_more"}`; the
/// `Notion-Version` header is required.
fn notion(items: &[Item], headers: &HeaderMap, body: &[u8]) -> Result<Reply, Reply> {
    let invalid = |m: &str| {
        Reply::json(
            400,
            json!({"object": "error", "status": 400, "code": "validation_error", "message": m}),
        )
    };
    if headers.get("notion-version").is_none() {
        return Err(Reply::json(
            400,
            json!({"object": "error", "status": 400, "code": "missing_version", "message": "Notion-Version header failed validation: Notion-Version header should be defined."}),
        ));
    }
    let body: Json = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|_| invalid("body failed validation: not JSON"))?
    };
    let size = match body.get("page_size") {
        None => 100,
        Some(n) => n
            .as_u64()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| invalid("body.page_size should be a number from 1 to 100"))?,
    };
    let conditions: Vec<&Json> = match body.get("filter") {
        None => Vec::new(),
        Some(f) => match f.get("and").and_then(Json::as_array) {
            Some(all) => all.iter().collect(),
            None => vec![f],
        },
    };
    let mut bounds: Vec<(String, jiff::Timestamp)> = Vec::new();
    for c in conditions {
        if c.get("timestamp").and_then(Json::as_str) != Some("created_time") {
            return Err(invalid(
                "body.filter: only created_time timestamp conditions are emulated",
            ));
        }
        let Some(Json::Object(cond)) = c.get("created_time") else {
            return Err(invalid("body.filter.created_time should be an object"));
        };
        for (op, v) in cond {
            let at = v
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .ok_or_else(|| invalid("body.filter.created_time: a date should be ISO 8601"))?;
            if !matches!(
                op.as_str(),
                "on_or_after" | "after" | "before" | "on_or_before"
            ) {
                return Err(invalid("body.filter.created_time: unknown condition"));
            }
            bounds.push((op.clone(), at));
        }
    }
    let after = match body.get("start_cursor").and_then(Json::as_str) {
        None => None,
        Some(c) => Some(
            base64_decode(c)
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| {
                    let (a, b) = s.split_once(':')?;
                    Some((a.parse::<i64>().ok()?, b.parse::<u64>().ok()?))
                })
                .ok_or_else(|| invalid("body.start_cursor should be a cursor"))?,
        ),
    };
    let matching: Vec<&Item> = items
        .iter()
        .filter(|i| {
            let t = ts(i.created);
            bounds.iter().all(|(op, at)| match op.as_str() {
                "on_or_after" => t >= *at,
                "after" => t > *at,
                "before" => t < *at,
                _ => t <= *at,
            }) && after.is_none_or(|a| (i.created, i.id) > a)
        })
        .collect();
    let page: Vec<&Item> = matching.iter().take(size as usize).copied().collect();
    let has_more = matching.len() > page.len();
    let next = match (has_more, page.last()) {
        (true, Some(i)) => json!(base64_encode(format!("{}:{}", i.created, i.id).as_bytes())),
        _ => Json::Null,
    };
    let results: Vec<Json> = page
        .iter()
        .map(|i| {
            let amount: serde_json::Number =
                major(i.amount, &i.currency).parse().unwrap_or(0.into());
            json!({
                "object": "page",
                "id": format!("8e2c1f0a-0000-4000-8000-{:012}", i.id),
                "created_time": ts(i.created).strftime("%Y-%m-%dT%H:%M:%S.000Z").to_string(),
                "properties": {
                    "Amount": {"type": "number", "number": amount},
                    "Currency": {"type": "select", "select": {"name": i.currency}},
                    "Status": {"type": "status", "status": {"name": i.status}},
                },
            })
        })
        .collect();
    Ok(Reply::json(
        200,
        json!({"object": "list", "results": results, "next_cursor": next, "has_more": has_more}),
    ))
}
