//! Shopify orders through the GraphQL Admin API.
//!
//! **Cost-based throttling.** Shopify limits GraphQL by query cost: a bucket
//! of `maximumAvailable` points refilled at `restoreRate` points per second;
//! every response reports `requestedQueryCost` and the bucket's
//! `currentlyAvailable` in `extensions.cost`. recon keeps that estimate,
//! refills it with elapsed time, and waits before a query until the bucket
//! holds its cost, so a query is not throttled; when another client of the
//! same shop drains the bucket and Shopify answers `THROTTLED`, recon waits
//! for the bucket to restore and sends the query again. HTTP 429 and 5xx
//! go through the shared HTTP policy.
//!
//! **Bulk operations.** Above a configured expected size (estimated from the
//! first page's density), or when forced, the window is read with
//! `bulkOperationRunQuery`: recon polls `currentBulkOperation` until it is
//! COMPLETED and streams the JSONL result line by line. FAILED with a
//! `partialDataUrl`, CANCELED and EXPIRED are errors that say what happened.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_core::stream::BoxStream;
use futures_util::{stream, StreamExt};
use recon_core::http::{HttpClient, HttpError, HttpPolicy, Provider};
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
    final_when: &[],
};

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
            bulk: BulkMode::Auto(25_000),
            page_size: 250,
            bulk_poll: Duration::from_secs(1),
        }
    }
}

/// The cost bucket as last reported, refilled with time.
#[derive(Debug)]
struct Bucket {
    max: f64,
    available: f64,
    restore: f64,
    at: Instant,
    /// Requested cost of the last page query, to pace the next one.
    last_cost: f64,
}

impl Bucket {
    fn estimate(&self) -> f64 {
        (self.available + self.at.elapsed().as_secs_f64() * self.restore).min(self.max)
    }
}

/// Shopify orders as a [`Source`].
#[derive(Debug)]
pub struct ShopifySource {
    client: HttpClient,
    download: reqwest::Client,
    cfg: ShopifyConfig,
    schema: Schema,
    fields: Vec<usize>,
    bucket: Mutex<Option<Bucket>>,
    throttled: std::sync::atomic::AtomicU64,
    /// Sum of `actualQueryCost` of page queries, for benchmarks.
    spent: std::sync::atomic::AtomicU64,
}

const TOKEN_HINT: &str =
    "check the job's source.token (an Admin API access token shpat_… with read_orders)";

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
        let client = HttpClient::new(
            SHOPIFY,
            HttpPolicy::new(20),
            vec![("X-Shopify-Access-Token".into(), cfg.token.clone())],
            vec![],
        )
        .map_err(http_error)?;
        let download = reqwest::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|e| ConnectorError::Config(format!("Shopify download client: {e}")))?;
        Ok(ShopifySource {
            client,
            download,
            cfg,
            schema: schema.clone(),
            fields,
            bucket: Mutex::new(None),
            throttled: std::sync::atomic::AtomicU64::new(0),
            spent: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Points of the cost bucket that page queries spent so far.
    pub fn spent(&self) -> u64 {
        self.spent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// THROTTLED answers received so far.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(std::sync::atomic::Ordering::Relaxed)
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
                    let need = cost.unwrap_or(b.last_cost);
                    let have = b.estimate();
                    (need > have)
                        .then(|| Duration::from_secs_f64((need - have) / b.restore.max(1.0)))
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
        let cost = &v["extensions"]["cost"];
        if page_query && v["errors"].is_null() {
            if let Some(actual) = cost["actualQueryCost"].as_u64() {
                self.spent
                    .fetch_add(actual, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let status = &cost["throttleStatus"];
        if let (Some(max), Some(available), Some(restore)) = (
            status["maximumAvailable"].as_f64(),
            status["currentlyAvailable"].as_f64(),
            status["restoreRate"].as_f64(),
        ) {
            let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
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
                at: Instant::now(),
                last_cost,
            });
        }
    }

    /// One GraphQL call, paced, retried on THROTTLED.
    async fn graphql(
        &self,
        query: &str,
        variables: Json,
        page_query: bool,
    ) -> Result<Json, ConnectorError> {
        let body = json!({ "query": query, "variables": variables });
        let mut throttled_attempts = 0;
        loop {
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
            let throttled = errors
                .iter()
                .any(|e| e["extensions"]["code"].as_str() == Some("THROTTLED"));
            if throttled && throttled_attempts < 20 {
                throttled_attempts += 1;
                self.throttled
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let requested = v["extensions"]["cost"]["requestedQueryCost"].as_f64();
                tracing::warn!(message = "Shopify throttled the query; waiting for the cost bucket to restore.", attempt = throttled_attempts, request_id = ?meta.request_id);
                self.pace(requested).await;
                continue;
            }
            let messages: Vec<String> = errors
                .iter()
                .map(|e| e["message"].as_str().unwrap_or("error").to_string())
                .collect();
            return Err(ConnectorError::Malformed {
                location: Location(format!(
                    "Shopify GraphQL {} (request {})",
                    self.url()
                        .rsplit("myshopify.com")
                        .next()
                        .unwrap_or_default(),
                    meta.request_id.as_deref().unwrap_or("without ID")
                )),
                message: messages.join("; "),
            });
        }
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
                Some(t) => t
                    .parse()
                    .map(Some)
                    .map_err(|_| bad(f, format!("`{t}` is not a timestamp"))),
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
            response: Option<reqwest::Response>,
            buffer: Vec<u8>,
            done: bool,
        }
        let start = stream::once(async move {
            let url = self.bulk_url(window).await?;
            if url.is_empty() {
                return Ok(State {
                    response: None,
                    buffer: Vec::new(),
                    done: true,
                });
            }
            let response = self
                .download
                .get(&url)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| {
                    ConnectorError::Unreachable(format!(
                        "downloading the Shopify bulk result: {}",
                        e.without_url()
                    ))
                })?;
            Ok(State {
                response: Some(response),
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
                    let chunk = match s.response.as_mut() {
                        Some(r) => r.chunk().await.map_err(|e| {
                            ConnectorError::Unreachable(format!(
                                "reading the Shopify bulk result: {}",
                                e.without_url()
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

    fn read(
        &self,
        _schema: &Schema,
        window: Window,
    ) -> BoxStream<'_, Result<Page, ConnectorError>> {
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
            Ok(Page { records })
        };
        let seen2 = seen.clone();
        let first = async move {
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
                    let last_at: Option<jiff::Timestamp> =
                        last[field].as_str().and_then(|t| t.parse().ok());
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

    async fn lookup(
        &self,
        _schema: &Schema,
        keys: &[String],
    ) -> Result<Vec<Record>, ConnectorError> {
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
}
