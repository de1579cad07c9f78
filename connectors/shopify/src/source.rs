//! Shopify orders through the GraphQL Admin API.
//!
//! **Cost-based throttling.** Shopify limits GraphQL by query cost: a bucket
//! of `maximumAvailable` points refilled at `restoreRate` points per second;
//! every response reports `requestedQueryCost` and the bucket's
//! `currentlyAvailable` in `extensions.cost`. recon keeps that estimate,
//! refills it with elapsed time, and waits before a query until the bucket
//! holds its cost, so a query is not throttled; when another client of the
//! same shop drains the bucket and Shopify answers `THROTTLED`, recon waits
//! for the bucket to restore and sends the query again. Waits are computed
//! from what the responses report (`currentlyAvailable`, and the restore
//! rate actually seen between two reports, which is below `restoreRate`
//! when another client of the same app spends part of it), not from the
//! nominal rate. THROTTLED answers are the HTTP policy's "slow down"
//! answers (its throttle hint), like 429s: retried with its backoff and
//! counts until no query succeeded for `rate_limit_patience` (default 15
//! minutes). Bulk results are downloaded through the policy too (retried on
//! 5xx and cut-short bodies), by a client without the access token.
//!
//! **Access scopes.** Shopify shows an app only the last 60 days of orders
//! unless it has `read_all_orders` ("Only the last 60 days' worth of orders
//! from a store are accessible from the Order object by default",
//! https://shopify.dev/docs/api/admin-graphql/latest/objects/Order). Before
//! reading a window that starts more than 60 days ago, recon asks for the
//! app's scopes (`currentAppInstallation { accessScopes { handle } }`) and
//! refuses the window, with the fix, when `read_all_orders` is missing: the
//! older orders would be silently absent (false gaps, missed orphans).
//!
//! **Bulk operations.** Above a configured expected size (estimated from the
//! first page's density), or when forced, the window is read with
//! `bulkOperationRunQuery`: recon polls `currentBulkOperation` until it is
//! COMPLETED and streams the JSONL result line by line. FAILED with a
//! `partialDataUrl`, CANCELED and EXPIRED are errors that say what happened.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures_core::stream::BoxStream;
use futures_util::{stream, StreamExt};
use recon_core::http::{
    default_error_body, BodyStream, HttpClient, HttpError, HttpPolicy, Provider, ProviderError,
    Throttle,
};
use recon_core::parse::{self, TimestampRules};
use recon_core::{
    ConnectorError, Currency, FieldKind, Location, Money, Page, Record, Schema, Secret, Source,
    Value, Window,
};
use serde::Deserialize;
use serde_json::{json, Value as Json};

/// Shopify's identity for the HTTP policy.
pub const SHOPIFY: Provider = Provider {
    name: "Shopify",
    request_id_header: "X-Request-Id",
    should_retry_header: None,
    error_body: shopify_error_body,
};

/// Shopify's error body as the HTTP status reports it: `{"errors": "…"}`
/// (`[API] Invalid API key or access token …`, `Not Found`). Other bodies
/// are read the common way. (GraphQL errors in a 200 answer are the
/// source's to read.)
fn shopify_error_body(body: &[u8]) -> Option<ProviderError> {
    let Ok(Json::Object(json)) = serde_json::from_slice::<Json>(body) else {
        return default_error_body(body);
    };
    let text = |key: &str| json.get(key).and_then(Json::as_str).map(str::to_owned);
    match text("errors") {
        Some(errors) => Some(ProviderError {
            message: text("message").or(Some(errors)),
            code: text("code"),
            is_final: false,
        }),
        None => default_error_body(body),
    }
}

/// The order fields recon selects, by canonical name.
const FIELDS: &[&str] = &[
    "amount", "currency", "status", "created", "updated", "email", "name",
];

const NODE: &str = "id legacyResourceId name createdAt updatedAt email displayFinancialStatus totalPriceSet { shopMoney { amount currencyCode } }";

/// Which value identifies an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderKey {
    /// The numeric legacy ID (`450789469`), as REST exports show it (default).
    LegacyId,
    /// The GID (`gid://shopify/Order/450789469`).
    Gid,
    /// The order name (`#1001`).
    Name,
}

/// Which timestamp the window filters on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeField {
    /// `created_at` (default).
    CreatedAt,
    /// `updated_at`.
    UpdatedAt,
}

/// When to use a bulk operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkMode {
    /// Above this many expected orders in the window.
    Auto(u64),
    /// Always.
    Always,
    /// Never.
    Never,
}

/// How to reach a shop and what to read.
#[derive(Clone, Debug)]
pub struct ShopifyConfig {
    /// `https://{shop}.myshopify.com` (or the emulator's URL).
    pub shop_url: String,
    /// Admin API access token (`shpat_…`).
    pub token: Secret,
    /// API version in the path (default `2025-01`).
    pub api_version: String,
    /// Which value is the external ID.
    pub key: OrderKey,
    /// Which timestamp windows filter on.
    pub time_field: TimeField,
    /// When to read with a bulk operation (default above 25,000 orders).
    pub bulk: BulkMode,
    /// Orders per page (1..=250, default 250).
    pub page_size: u32,
    /// How often to poll a bulk operation at most (default 1 s).
    pub bulk_poll: Duration,
    /// How long THROTTLED answers and HTTP 429s may hold the read without a
    /// successful query before it fails (default 15 minutes; the source's
    /// `rate_limit_patience` setting).
    pub rate_limit_patience: Duration,
}

impl ShopifyConfig {
    /// A config with the defaults.
    pub fn new(shop_url: &str, token: Secret) -> ShopifyConfig {
        ShopifyConfig {
            shop_url: shop_url.trim_end_matches('/').to_string(),
            token,
            api_version: "2025-01".into(),
            key: OrderKey::LegacyId,
            time_field: TimeField::CreatedAt,
            bulk: BulkMode::Auto(crate::DEFAULT_BULK_THRESHOLD),
            page_size: 250,
            bulk_poll: Duration::from_secs(1),
            rate_limit_patience: Duration::from_secs(15 * 60),
        }
    }
}

/// The cost bucket as last reported, refilled with time.
#[derive(Debug)]
struct Bucket {
    max: f64,
    available: f64,
    /// `restoreRate` as reported: the app's whole rate, also when another
    /// client of the same app spends part of it.
    restore: f64,
    /// The restore rate seen between reports (points/s, at most `restore`):
    /// what this client actually gets.
    observed: Option<f64>,
    at: Instant,
    /// Requested cost of the last page query, to pace the next one.
    last_cost: f64,
}

impl Bucket {
    /// Points per second this client can count on.
    fn rate(&self) -> f64 {
        let rate = self.observed.map_or(self.restore, |o| o.min(self.restore));
        rate.max(self.restore * 0.01).max(0.01)
    }

    fn estimate(&self) -> f64 {
        (self.available + self.at.elapsed().as_secs_f64() * self.rate()).min(self.max)
    }
}

/// Shopify orders as a [`Source`].
#[derive(Debug)]
pub struct ShopifySource {
    /// GraphQL calls; its throttle hint reads `THROTTLED` ([`throttled`]).
    client: HttpClient,
    /// Bulk results: their signed URLs are on another host, so this client
    /// sends no access token.
    download: HttpClient,
    cfg: ShopifyConfig,
    schema: Schema,
    fields: Vec<usize>,
    bucket: Arc<Mutex<Option<Bucket>>>,
    /// The app's access scopes, once asked.
    scopes: tokio::sync::OnceCell<Vec<String>>,
    throttled: Arc<AtomicU64>,
    /// Sum of `actualQueryCost` of page queries, for benchmarks.
    spent: AtomicU64,
}

/// The GraphQL client's throttle hint: a 200 whose errors include
/// `THROTTLED` is a "slow down" answer of the HTTP policy, retried after
/// the wait until the bucket holds the query's cost at the restore rate
/// actually seen (see [`record_cost`]), under `rate_limit_patience`.
fn throttled(
    status: u16,
    body: &[u8],
    bucket: &Mutex<Option<Bucket>>,
    count: &AtomicU64,
) -> Option<Throttle> {
    // Most answers are pages of orders: look before parsing.
    if status != 200 || !body.windows(9).any(|w| w == b"THROTTLED") {
        return None;
    }
    let v = serde_json::from_slice::<Json>(body).ok()?;
    let errors = v["errors"].as_array()?;
    if !errors
        .iter()
        .any(|e| e["extensions"]["code"].as_str() == Some("THROTTLED"))
    {
        return None;
    }
    count.fetch_add(1, Ordering::Relaxed);
    record_cost(bucket, &v, false);
    let requested = v["extensions"]["cost"]["requestedQueryCost"].as_f64();
    let bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
    let wait = bucket.as_ref().map_or(Duration::from_secs(1), |b| {
        let need = requested.unwrap_or(b.last_cost).min(b.max);
        Duration::from_secs_f64(((need - b.estimate()).max(0.0) / b.rate()).min(600.0))
    });
    tracing::warn!(
        message = "Shopify throttled the query; waiting for the cost bucket to restore.",
        wait_ms = wait.as_millis() as u64
    );
    Some(Throttle {
        wait: Some(wait),
        code: "THROTTLED".into(),
        shared_window: false,
    })
}

/// Updates the cost bucket from an answer's `extensions.cost`.
fn record_cost(bucket: &Mutex<Option<Bucket>>, v: &Json, page_query: bool) {
    let cost = &v["extensions"]["cost"];
    let status = &cost["throttleStatus"];
    let (Some(max), Some(available), Some(restore)) = (
        status["maximumAvailable"].as_f64(),
        status["currentlyAvailable"].as_f64(),
        status["restoreRate"].as_f64(),
    ) else {
        return;
    };
    let mut bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    // What restored between the last report and this one: this report's
    // level, less the last's, plus what this query spent (nothing when
    // THROTTLED). Below `restoreRate` when another client of the app spends
    // part of it. A full bucket says nothing.
    let spent = cost["actualQueryCost"].as_f64().unwrap_or(0.0);
    let observed = match bucket.as_ref() {
        Some(b) => {
            let dt = now.duration_since(b.at).as_secs_f64();
            if dt >= 0.05 && available < max && b.available < b.max {
                let seen = ((available - b.available + spent) / dt).clamp(0.0, restore);
                Some(b.observed.map_or(seen, |o| 0.5 * o + 0.5 * seen))
            } else {
                b.observed
            }
        }
        None => None,
    };
    let last_cost = match (
        page_query,
        cost["requestedQueryCost"].as_f64(),
        bucket.as_ref(),
    ) {
        (true, Some(c), _) => c,
        (_, _, Some(b)) => b.last_cost,
        (_, Some(c), None) => c,
        _ => 0.0,
    };
    *bucket = Some(Bucket {
        max,
        available,
        restore,
        observed,
        at: now,
        last_cost,
    });
}

const TOKEN_HINT: &str =
    "check the job's source.token (an Admin API access token shpat_… with read_orders, and read_all_orders for windows older than 60 days)";

/// Shopify's default horizon for apps without `read_all_orders`.
const DEFAULT_HORIZON_DAYS: i64 = 60;

fn http_error(e: HttpError) -> ConnectorError {
    match e {
        HttpError::Unauthorized { .. } => ConnectorError::Config(format!("{e}; {TOKEN_HINT}")),
        other => ConnectorError::Unreachable(other.to_string()),
    }
}

impl ShopifySource {
    /// Builds the client; no request is sent yet.
    pub fn new(cfg: ShopifyConfig, schema: &Schema) -> Result<ShopifySource, ConnectorError> {
        let fields = schema
            .fields
            .iter()
            .map(|f| {
                FIELDS.iter().position(|n| *n == f.name).ok_or_else(|| {
                    ConnectorError::Config(format!(
                        "Shopify orders have no field `{}`; fields are: {}",
                        f.name,
                        FIELDS.join(", ")
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !(1..=250).contains(&cfg.page_size) {
            return Err(ConnectorError::Config(
                "Shopify page_size must be 1..=250".into(),
            ));
        }
        // The HTTP policy paces requests; the cost bucket paces queries.
        let mut policy = HttpPolicy::new(20);
        policy.rate_limit_patience = cfg.rate_limit_patience;
        let client = HttpClient::new(
            SHOPIFY,
            policy,
            vec![("X-Shopify-Access-Token".into(), cfg.token.clone())],
            vec![],
        )
        .map_err(http_error)?;
        let bucket = Arc::new(Mutex::new(None));
        let count = Arc::new(AtomicU64::new(0));
        let client = {
            let (bucket, count) = (bucket.clone(), count.clone());
            client.with_throttle_hint(move |status, body| throttled(status, body, &bucket, &count))
        };
        // A bulk result may take minutes to stream: the timeout covers it.
        let mut download_policy = HttpPolicy::new(20);
        download_policy.timeout = Duration::from_secs(600);
        download_policy.rate_limit_patience = cfg.rate_limit_patience;
        let download =
            HttpClient::new(SHOPIFY, download_policy, vec![], vec![]).map_err(http_error)?;
        Ok(ShopifySource {
            client,
            download,
            cfg,
            schema: schema.clone(),
            fields,
            bucket,
            scopes: tokio::sync::OnceCell::new(),
            throttled: count,
            spent: AtomicU64::new(0),
        })
    }

    /// Points of the cost bucket that page queries spent so far.
    pub fn spent(&self) -> u64 {
        self.spent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// THROTTLED answers received so far.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    fn url(&self) -> String {
        format!(
            "{}/admin/api/{}/graphql.json",
            self.cfg.shop_url, self.cfg.api_version
        )
    }

    fn search(&self, window: Window) -> String {
        let field = match self.cfg.time_field {
            TimeField::CreatedAt => "created_at",
            TimeField::UpdatedAt => "updated_at",
        };
        format!(
            "{field}:>='{}' AND {field}:<'{}'",
            recon_core::format_timestamp(window.start),
            recon_core::format_timestamp(window.end)
        )
    }

    /// Waits until the bucket should hold `cost` points.
    async fn pace(&self, cost: Option<f64>) {
        let wait = {
            let bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
            match bucket.as_ref() {
                Some(b) => {
                    let need = cost.unwrap_or(b.last_cost).min(b.max);
                    let have = b.estimate();
                    (need > have).then(|| Duration::from_secs_f64((need - have) / b.rate()))
                }
                None => None,
            }
        };
        if let Some(w) = wait {
            tracing::debug!(
                message = "Pacing Shopify query to its cost.",
                wait_ms = w.as_millis() as u64
            );
            tokio::time::sleep(w).await;
        }
    }

    fn note_cost(&self, v: &Json, page_query: bool) {
        if page_query && v["errors"].is_null() {
            if let Some(actual) = v["extensions"]["cost"]["actualQueryCost"].as_u64() {
                self.spent.fetch_add(actual, Ordering::Relaxed);
            }
        }
        record_cost(&self.bucket, v, page_query);
    }

    /// One GraphQL call, paced to the cost bucket; `THROTTLED` answers are
    /// retried by the HTTP policy (see [`throttled`]).
    async fn graphql(
        &self,
        query: &str,
        variables: Json,
        page_query: bool,
    ) -> Result<Json, ConnectorError> {
        let body = json!({ "query": query, "variables": variables });
        self.pace(None).await;
        let (v, meta) = self
            .client
            .post_json::<Json>(&self.url(), &body)
            .await
            .map_err(http_error)?;
        self.note_cost(&v, page_query);
        let errors = v["errors"].as_array().cloned().unwrap_or_default();
        if errors.is_empty() {
            return Ok(v["data"].clone());
        }
        let messages: Vec<String> = errors
            .iter()
            .map(|e| e["message"].as_str().unwrap_or("error").to_string())
            .collect();
        Err(ConnectorError::Malformed {
            location: Location(format!(
                "Shopify GraphQL {} (request {})",
                self.url()
                    .rsplit("myshopify.com")
                    .next()
                    .unwrap_or_default(),
                meta.request_id.as_deref().unwrap_or("without ID")
            )),
            message: messages.join("; "),
        })
    }

    /// Refuses a window that starts more than 60 days ago when the app lacks
    /// `read_all_orders`: Shopify would silently leave the older orders out.
    async fn check_horizon(&self, window: Window) -> Result<(), ConnectorError> {
        let now = jiff::Timestamp::now();
        let horizon = now - jiff::SignedDuration::from_hours(24 * DEFAULT_HORIZON_DAYS);
        if window.start >= horizon {
            return Ok(());
        }
        let scopes = self
            .scopes
            .get_or_try_init(|| async {
                let data = self
                    .graphql(
                        "query AccessScopes { currentAppInstallation { accessScopes { handle } } }",
                        json!({}),
                        false,
                    )
                    .await?;
                Ok::<_, ConnectorError>(
                    data["currentAppInstallation"]["accessScopes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s["handle"].as_str().map(str::to_string))
                        .collect(),
                )
            })
            .await?;
        if scopes.iter().any(|s| s == "read_all_orders") {
            return Ok(());
        }
        let days = (now.as_second() - window.start.as_second()) / 86_400;
        Err(ConnectorError::Config(format!(
            "Shopify shows an app only the last {DEFAULT_HORIZON_DAYS} days of orders unless it has the read_all_orders scope, and the access token in source.token has only: {}. The window starts {} ({days} days ago), so its older orders would be missing (false gaps and orphans). Fix: give the app read_all_orders (custom app: Shopify admin > Settings > Apps and sales channels > Develop apps > the app > Configuration > Admin API access scopes, tick read_all_orders, save and reinstall, then use the new token; public app: request access to all orders in the Partner Dashboard and add the scope), or reconcile a window within the last {DEFAULT_HORIZON_DAYS} days",
            if scopes.is_empty() { "no scopes".to_string() } else { scopes.join(", ") },
            recon_core::format_timestamp(window.start),
        )))
    }

    /// Converts one order node into a record; `None` outside the window.
    fn to_record(&self, node: &Json, window: Window) -> Result<Option<Record>, ConnectorError> {
        let gid = node["id"].as_str().unwrap_or_default();
        let name = node["name"].as_str().unwrap_or_default();
        let bad = |field: &str, what: String| ConnectorError::Malformed {
            location: Location(format!("Shopify order {name} ({gid})")),
            message: format!("field `{field}` {what}"),
        };
        let time = |f: &str| -> Result<Option<jiff::Timestamp>, ConnectorError> {
            match node[f].as_str() {
                None => Ok(None),
                Some(t) => parse::timestamp(t, TimestampRules::RFC3339)
                    .map(Some)
                    .map_err(|e| bad(f, e.to_string())),
            }
        };
        let created = time("createdAt")?;
        let updated = time("updatedAt")?;
        let at = match self.cfg.time_field {
            TimeField::CreatedAt => created,
            TimeField::UpdatedAt => updated,
        };
        // Never count what lies outside the window, whatever a server returns.
        if !at.is_some_and(|t| window.contains(t)) {
            return Ok(None);
        }
        let key = match self.cfg.key {
            OrderKey::LegacyId => node["legacyResourceId"].as_str().map(str::to_string),
            OrderKey::Gid => Some(gid.to_string()),
            OrderKey::Name => Some(name.to_string()),
        }
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad("legacyResourceId", "is missing".into()))?;
        let money = &node["totalPriceSet"]["shopMoney"];
        let currency = match money["currencyCode"].as_str() {
            Some(c) => Some(Currency::parse(c).map_err(|e| bad("currencyCode", e.to_string()))?),
            None => None,
        };
        let mut values = Vec::with_capacity(self.fields.len());
        for (&i, f) in self.fields.iter().zip(&self.schema.fields) {
            let v = match (FIELDS[i], f.kind) {
                // A `Decimal` string in major units ("29.99"), so ISO 4217's
                // exponent applies: unlike Stripe's integer amounts there is
                // no provider table of minor units (no MinorUnits) to apply,
                // and a digit finer than the currency allows is an error.
                ("amount", FieldKind::Money) => match (money["amount"].as_str(), currency) {
                    (Some(a), Some(c)) => Value::Money(
                        Money::parse_major(a, c)
                            .map_err(|e| bad("totalPriceSet.shopMoney.amount", e.to_string()))?,
                    ),
                    (None, _) => Value::Null,
                    (Some(_), None) => return Err(bad("currencyCode", "is missing".into())),
                },
                ("currency", _) => currency.map(Value::Currency).unwrap_or(Value::Null),
                ("created", _) => created.map(Value::Timestamp).unwrap_or(Value::Null),
                ("updated", _) => updated.map(Value::Timestamp).unwrap_or(Value::Null),
                ("status", _) => node["displayFinancialStatus"]
                    .as_str()
                    .map(|s| Value::Text(s.to_string()))
                    .unwrap_or(Value::Null),
                ("email", _) => node["email"]
                    .as_str()
                    .map(|s| Value::Text(s.to_string()))
                    .unwrap_or(Value::Null),
                ("name", _) => Value::Text(name.to_string()),
                (other, kind) => {
                    return Err(ConnectorError::Config(format!(
                        "Shopify field `{other}` cannot be read as {kind}"
                    )))
                }
            };
            values.push(v);
        }
        Ok(Some(Record { key, values }))
    }

    async fn page(
        &self,
        window: Window,
        after: Option<String>,
    ) -> Result<(Vec<Json>, Option<String>), ConnectorError> {
        let sort = match self.cfg.time_field {
            TimeField::CreatedAt => "CREATED_AT",
            TimeField::UpdatedAt => "UPDATED_AT",
        };
        let query = format!(
            "query Orders($first: Int!, $after: String, $query: String) {{ orders(first: $first, after: $after, query: $query, sortKey: {sort}) {{ nodes {{ {NODE} }} pageInfo {{ hasNextPage endCursor }} }} }}"
        );
        let data = self
            .graphql(
                &query,
                json!({"first": self.cfg.page_size, "after": after, "query": self.search(window)}),
                true,
            )
            .await?;
        let orders = &data["orders"];
        let nodes = orders["nodes"].as_array().cloned().unwrap_or_default();
        let next = if orders["pageInfo"]["hasNextPage"].as_bool() == Some(true) {
            orders["pageInfo"]["endCursor"].as_str().map(str::to_string)
        } else {
            None
        };
        Ok((nodes, next))
    }

    /// Runs a bulk operation over the window and returns its JSONL URL.
    async fn bulk_url(&self, window: Window) -> Result<String, ConnectorError> {
        let inner = format!(
            "{{ orders(query: {}) {{ edges {{ node {{ {NODE} }} }} }} }}",
            serde_json::to_string(&self.search(window)).unwrap_or_default()
        );
        let data = self
            .graphql(
                "mutation Bulk($q: String!) { bulkOperationRunQuery(query: $q) { bulkOperation { id status } userErrors { field message } } }",
                json!({ "q": inner }),
                false,
            )
            .await?;
        let run = &data["bulkOperationRunQuery"];
        if let Some(errors) = run["userErrors"].as_array().filter(|e| !e.is_empty()) {
            let msgs: Vec<&str> = errors
                .iter()
                .filter_map(|e| e["message"].as_str())
                .collect();
            return Err(ConnectorError::Unreachable(format!(
                "Shopify refused the bulk operation: {}",
                msgs.join("; ")
            )));
        }
        let id = run["bulkOperation"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut wait = Duration::from_millis(100);
        loop {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(self.cfg.bulk_poll.max(Duration::from_millis(100)));
            let data = self
                .graphql(
                    "query { currentBulkOperation { id status errorCode objectCount url partialDataUrl } }",
                    json!({}),
                    false,
                )
                .await?;
            let op = &data["currentBulkOperation"];
            if op["id"].as_str() != Some(id.as_str()) {
                return Err(ConnectorError::Unreachable(format!(
                    "Shopify bulk operation {id} is no longer the shop's current one; another app or run started one"
                )));
            }
            match op["status"].as_str().unwrap_or_default() {
                "CREATED" | "RUNNING" => continue,
                "COMPLETED" => {
                    return Ok(op["url"].as_str().unwrap_or_default().to_string());
                }
                status => {
                    let partial = op["partialDataUrl"]
                        .as_str()
                        .map(|_| " (it left partial data, which recon does not use: a partial read would report false gaps)")
                        .unwrap_or_default();
                    return Err(ConnectorError::Unreachable(format!(
                        "Shopify bulk operation {id} ended {status} (error code {}){partial}; run again, or set bulk = \"never\" to page instead",
                        op["errorCode"].as_str().unwrap_or("none")
                    )));
                }
            }
        }
    }

    /// Streams a bulk result, one JSON node per line.
    fn bulk_lines(&self, window: Window) -> BoxStream<'_, Result<Vec<Json>, ConnectorError>> {
        struct State {
            body: Option<BodyStream>,
            buffer: Vec<u8>,
            done: bool,
        }
        let start = stream::once(async move {
            let url = self.bulk_url(window).await?;
            if url.is_empty() {
                return Ok(State {
                    body: None,
                    buffer: Vec::new(),
                    done: true,
                });
            }
            let body = self.download.get_stream(&url).await.map_err(|e| {
                ConnectorError::Unreachable(format!("downloading the Shopify bulk result: {e}"))
            })?;
            Ok(State {
                body: Some(body),
                buffer: Vec::new(),
                done: false,
            })
        });
        Box::pin(start.flat_map(|state: Result<State, ConnectorError>| {
            match state {
                Err(e) => stream::once(async move { Err(e) }).boxed(),
                Ok(state) => stream::try_unfold(state, |mut s| async move {
                    if s.done {
                        return Ok(None);
                    }
                    let chunk = match s.body.as_mut() {
                        Some(body) => body.chunk().await.map_err(|e| {
                            ConnectorError::Unreachable(format!(
                                "reading the Shopify bulk result: {e}"
                            ))
                        })?,
                        None => None,
                    };
                    match chunk {
                        Some(bytes) => s.buffer.extend_from_slice(&bytes),
                        None => {
                            s.done = true;
                            s.buffer.push(b'\n');
                        }
                    }
                    let mut nodes = Vec::new();
                    while let Some(pos) = s.buffer.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = s.buffer.drain(..=pos).collect();
                        let line = &line[..line.len() - 1];
                        if line.iter().all(u8::is_ascii_whitespace) {
                            continue;
                        }
                        let v: Json = serde_json::from_slice(line).map_err(|e| {
                            ConnectorError::Malformed {
                                location: Location("Shopify bulk result".into()),
                                message: format!("a line is not JSON ({e})"),
                            }
                        })?;
                        nodes.push(v);
                    }
                    Ok(Some((nodes, s)))
                })
                .boxed(),
            }
        }))
    }
}

#[async_trait::async_trait]
impl Source for ShopifySource {
    fn describe(&self) -> String {
        format!("Shopify orders at {}", self.cfg.shop_url)
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let seen = std::sync::Arc::new(Mutex::new(HashSet::<String>::new()));
        let convert = move |nodes: Vec<Json>,
                            seen: &Mutex<HashSet<String>>|
              -> Result<Page, ConnectorError> {
            let mut records = Vec::new();
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            for n in &nodes {
                if let Some(r) = self.to_record(n, window)? {
                    if seen.insert(r.key.clone()) {
                        records.push(r);
                    }
                }
            }
            Ok(Page::new(records))
        };
        let seen2 = seen.clone();
        let first = async move {
            self.check_horizon(window).await?;
            if self.cfg.bulk == BulkMode::Always {
                return Ok::<_, ConnectorError>((Vec::new(), None, true));
            }
            let (nodes, next) = self.page(window, None).await?;
            // Estimate the window's size from the first page's time span.
            let bulk = match (self.cfg.bulk, &next, nodes.last()) {
                (BulkMode::Auto(threshold), Some(_), Some(last)) => {
                    let field = if self.cfg.time_field == TimeField::CreatedAt {
                        "createdAt"
                    } else {
                        "updatedAt"
                    };
                    let last_at = last[field]
                        .as_str()
                        .and_then(|t| parse::timestamp(t, TimestampRules::RFC3339).ok());
                    match last_at {
                        Some(t) => {
                            let covered = (t.as_second() - window.start.as_second()).max(1) as f64;
                            let span =
                                (window.end.as_second() - window.start.as_second()).max(1) as f64;
                            (nodes.len() as f64 * span / covered) as u64 > threshold
                        }
                        None => false,
                    }
                }
                _ => false,
            };
            Ok((nodes, next, bulk))
        };
        Box::pin(
            stream::once(first)
                .map(move |r| match r {
                    Err(e) => stream::once(async move { Err(e) }).boxed(),
                    Ok((nodes, next, bulk)) => {
                        let seen = seen2.clone();
                        let first_page = stream::once({
                            let seen = seen.clone();
                            async move { convert(nodes, &seen) }
                        });
                        if bulk {
                            if next.is_some() || self.cfg.bulk == BulkMode::Always {
                                tracing::info!(
                                    message = "Reading the Shopify window with a bulk operation."
                                );
                            }
                            let seen = seen.clone();
                            first_page
                                .chain(
                                    self.bulk_lines(window)
                                        .map(move |r| r.and_then(|nodes| convert(nodes, &seen))),
                                )
                                .boxed()
                        } else {
                            let rest = stream::try_unfold(next, move |after| async move {
                                let Some(after) = after else { return Ok(None) };
                                let (nodes, next) = self.page(window, Some(after)).await?;
                                Ok(Some((nodes, next)))
                            })
                            .map(
                                move |r: Result<Vec<Json>, ConnectorError>| {
                                    r.and_then(|nodes| convert(nodes, &seen))
                                },
                            );
                            first_page.chain(rest).boxed()
                        }
                    }
                })
                .flatten(),
        )
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        // Orders are confirmed by searching their key; chunks keep the search string short.
        let mut out = Vec::new();
        let wide = Window {
            start: jiff::Timestamp::MIN,
            end: jiff::Timestamp::MAX,
        };
        for chunk in keys.chunks(50) {
            let terms: Vec<String> = chunk
                .iter()
                .map(|k| match self.cfg.key {
                    OrderKey::LegacyId => format!("id:{k}"),
                    OrderKey::Gid => format!("id:{}", k.rsplit('/').next().unwrap_or(k)),
                    OrderKey::Name => format!("name:'{}'", k.replace('\'', "")),
                })
                .collect();
            let query = format!(
                "query Orders($first: Int!, $after: String, $query: String) {{ orders(first: $first, after: $after, query: $query, sortKey: CREATED_AT) {{ nodes {{ {NODE} }} pageInfo {{ hasNextPage endCursor }} }} }}"
            );
            let data = self
                .graphql(
                    &query,
                    json!({"first": 250, "after": null, "query": terms.join(" OR ")}),
                    false,
                )
                .await?;
            for n in data["orders"]["nodes"].as_array().into_iter().flatten() {
                if let Some(r) = self.to_record(n, wide)? {
                    if chunk.contains(&r.key) {
                        out.push(r);
                    }
                }
            }
        }
        Ok(out)
    }

    /// One GraphQL query of the app's access scopes
    /// (`currentAppInstallation { accessScopes { handle } }`, cost 1): it
    /// proves the token is accepted, shows whether it may read orders
    /// (`read_orders`; `read_all_orders` for windows older than 60 days), and
    /// its `extensions.cost.throttleStatus` reports the cost bucket
    /// (https://shopify.dev/docs/api/usage/limits#graphql-admin-api-rate-limits).
    async fn probe(&self) -> Result<recon_core::Probe, ConnectorError> {
        let data = self
            .graphql(
                "query AccessScopes { currentAppInstallation { accessScopes { handle } } }",
                json!({}),
                false,
            )
            .await?;
        let scopes: Vec<String> = data["currentAppInstallation"]["accessScopes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["handle"].as_str().map(str::to_string))
            .collect();
        let _ = self.scopes.set(scopes.clone());
        let has = |s: &str| scopes.iter().any(|h| h == s);
        if !has("read_orders") && !has("write_orders") {
            return Err(ConnectorError::Config(format!(
                "the access token in source.token lacks the read_orders scope (it has: {}); give the app read_orders (custom app: Shopify admin > Settings > Apps and sales channels > Develop apps > the app > Configuration > Admin API access scopes), reinstall it and use the new token",
                if scopes.is_empty() { "no scopes".to_string() } else { scopes.join(", ") }
            )));
        }
        let mut probe = recon_core::Probe::reached(self.describe()).authenticated();
        let bucket = self
            .bucket
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|b| (b.available, b.max, b.restore));
        if let Some((available, max, restore)) = bucket {
            probe = probe.limit(format!(
                "{available:.0} of {max:.0} query cost points available, restoring {restore:.0}/s"
            ));
        }
        Ok(probe.limit(if has("read_all_orders") {
            "read_all_orders: every window".to_string()
        } else {
            format!("no read_all_orders: windows within the last {DEFAULT_HORIZON_DAYS} days only")
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(code: &str, available: f64) -> Vec<u8> {
        json!({
            "errors": [{"message": "Throttled", "extensions": {"code": code}}],
            "extensions": {"cost": {
                "requestedQueryCost": 752,
                "throttleStatus": {"maximumAvailable": 2000.0, "currentlyAvailable": available, "restoreRate": 100.0}
            }}
        })
        .to_string()
        .into_bytes()
    }

    #[tokio::test(start_paused = true)]
    async fn throttled_is_read_as_a_wait_for_the_bucket_to_hold_the_cost() {
        let bucket = Mutex::new(None);
        let count = AtomicU64::new(0);
        // 752 points needed, 152 there, 100 restored per second: 6 s.
        let t = throttled(200, &answer("THROTTLED", 152.0), &bucket, &count).unwrap();
        assert_eq!(t.wait, Some(Duration::from_secs(6)));
        assert_eq!(t.code, "THROTTLED");
        assert!(!t.shared_window);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        // The bucket was updated from the answer.
        let level = bucket.lock().unwrap().as_ref().map(|b| b.available);
        assert_eq!(level, Some(152.0));
        // Two seconds later, nothing restored: the wait follows the rate
        // seen (0, so 1% of the nominal), not the nominal 100 points/s.
        tokio::time::advance(Duration::from_secs(2)).await;
        let t = throttled(200, &answer("THROTTLED", 152.0), &bucket, &count).unwrap();
        assert_eq!(t.wait, Some(Duration::from_secs(600)));
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn other_answers_are_not_throttled() {
        let bucket = Mutex::new(None);
        let count = AtomicU64::new(0);
        // Another error, a 429 (the policy's own), a page of orders.
        assert_eq!(
            throttled(200, &answer("MAX_COST_EXCEEDED", 0.0), &bucket, &count),
            None
        );
        assert_eq!(
            throttled(429, &answer("THROTTLED", 0.0), &bucket, &count),
            None
        );
        let page = br#"{"data":{"orders":{"nodes":[{"name":"THROTTLED"}]}}}"#;
        assert_eq!(throttled(200, page, &bucket, &count), None);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
