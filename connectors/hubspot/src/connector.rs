//! HubSpot CRM objects behind the `Source` and `Target` traits.
//!
//! - **Reads** use the search API (`POST /crm/v3/objects/{type}/search`): a
//!   filter on the configured date property, ascending sort, `limit` 200,
//!   `after` paging. HubSpot returns at most 10,000 results per query, so a
//!   window whose `total` passes that is split in halves until every slice
//!   fits, then each slice is paged.
//! - **Lookups** use `batch/read` with `idProperty` (100 per call); they see
//!   writes at once, while search lags behind them (eventual consistency),
//!   which is why edge confirmation uses them.
//! - **Writes** in `upsert` mode use `batch/upsert` with `idProperty` (100
//!   per call): an upsert by a property created with `hasUniqueValue: true`,
//!   so writing the same record twice creates it once. A 207 multi-status
//!   answer is split into per-item outcomes. In `insert` mode existing
//!   objects are never modified: `batch/read` finds them (unchanged) and only
//!   the others go to `batch/create`; a unique-value conflict (an object
//!   created meanwhile) is unchanged, never overwritten.
//! - **At start** the properties API confirms the ID property exists and is
//!   unique; otherwise recon refuses and says how to fix it.
//! - **Rate limits** (https://developers.hubspot.com/docs/guides/apps/api-usage/usage-details):
//!   the general limit per rolling 10 s (100 by default, configurable for
//!   higher tiers) is paced at 95% of it, and the search API's own 5
//!   requests/s at 4/s, each by its own limiter of the shared HTTP policy,
//!   so no window as HubSpot counts it is passed by recon alone. Other apps
//!   share the account's budget: responses report what is left of the
//!   rolling window (`X-HubSpot-RateLimit-Remaining`,
//!   `-Interval-Milliseconds`), and the policy paces to it; when nothing
//!   remains, or a 429 names `TEN_SECONDLY_ROLLING`, every request waits
//!   the window's interval before the next (search answers carry no such
//!   headers, so a search 429 of that policy holds every request for the
//!   last interval seen, 10 s by default). A `SECONDLY` 429 of search is
//!   retried after the policy's short backoff. A run fails on rate limiting
//!   only after `rate_limit_patience` (default 15 minutes) without a
//!   successful call; a 429 for the DAILY policy stops the run at once.
//! - **Writes are correlated by `objectWriteTraceId`**: every upsert input
//!   carries a unique trace ID, and results are matched by the one they
//!   echo (errors by their `context`), never by position or by the echoed
//!   ID property, which the CRM v3 spec does not promise.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_core::stream::BoxStream;
use futures_util::{stream, StreamExt};
use recon_core::http::{
    default_error_body, HttpClient, HttpError, HttpPolicy, LimitHeaders, Provider, ProviderError,
    ResponseMeta, Throttle,
};
use recon_core::parse::{self, TimestampRules, ValueRules};
use recon_core::{
    AmountFormat, ConnectorError, Location, Page, Record, Schema, Secret, Source, Target, Value,
    Window, WriteMode, WriteOutcome,
};
use serde_json::{json, Value as Json};

/// HubSpot's identity for the HTTP policy: correlation IDs name requests,
/// and a 429 of the DAILY policy is final.
pub const HUBSPOT: Provider = Provider {
    name: "HubSpot",
    request_id_header: "X-HubSpot-Correlation-Id",
    should_retry_header: None,
    error_body: |body| hubspot_error_body(body, &["DAILY"]),
};

/// HubSpot's error body, `{"status": "error", "message", "category",
/// "policyName"?, …}`: the code is `code` or else `category`, and a
/// `policyName` among `final_policies` makes the answer final. Other bodies
/// are read the common way.
fn hubspot_error_body(body: &[u8], final_policies: &[&str]) -> Option<ProviderError> {
    let Ok(Json::Object(json)) = serde_json::from_slice::<Json>(body) else {
        return default_error_body(body);
    };
    let text = |key: &str| json.get(key).and_then(Json::as_str).map(str::to_owned);
    let said = ProviderError {
        message: text("message"),
        code: text("code").or_else(|| text("category")),
        is_final: text("policyName").is_some_and(|p| final_policies.contains(&p.as_str())),
    };
    if said == ProviderError::default() {
        return default_error_body(body);
    }
    Some(said)
}

/// HubSpot's rate-limit headers, read by the shared HTTP policy.
const LIMIT_HEADERS: LimitHeaders = LimitHeaders {
    remaining: "X-HubSpot-RateLimit-Remaining",
    interval_ms: "X-HubSpot-RateLimit-Interval-Milliseconds",
};

/// The default of [`HubSpotConfig::rate_limit_patience`]: 15 minutes.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(15 * 60);

/// Search returns at most this many results per query (HubSpot's documented cap).
pub const SEARCH_CAP: u64 = 10_000;
/// Objects per search page (HubSpot's maximum).
const SEARCH_PAGE: usize = 200;
/// Inputs per batch call (HubSpot's maximum).
const BATCH: usize = 100;

/// Which CRM object and properties hold a job's records.
#[derive(Clone, Debug)]
pub struct HubSpotConfig {
    /// Private app access token.
    pub token: Secret,
    /// `contacts`, `companies`, `deals`, or a custom object's `2-…` ID.
    pub object_type: String,
    /// The property holding the external ID; must have `hasUniqueValue: true`.
    pub id_property: String,
    /// Property per schema field.
    pub properties: Vec<String>,
    /// Property holding amounts' currency (deals: `deal_currency_code`).
    pub currency_property: Option<String>,
    /// Date property windows filter on (default `createdate`).
    pub date_property: String,
    /// Amounts as HubSpot stores them (default major units, `29.99`).
    pub amount_format: AmountFormat,
    /// API base URL (default `https://api.hubapi.com`).
    pub base_url: String,
    /// General limit per rolling 10 s (default 100, HubSpot's lowest tier).
    pub requests_per_10s: u32,
    /// The search API's own limit per second (default 5).
    pub search_per_second: u32,
    /// How long rate limiting (429 from other apps' use of the account's
    /// budget) may hold the run without a successful call before it fails
    /// (default 15 minutes; the endpoint's `rate_limit_patience` setting).
    pub rate_limit_patience: Duration,
}

impl HubSpotConfig {
    /// A config with HubSpot's documented defaults.
    pub fn new(
        token: Secret,
        object_type: &str,
        id_property: &str,
        properties: Vec<String>,
    ) -> HubSpotConfig {
        HubSpotConfig {
            token,
            object_type: object_type.to_string(),
            id_property: id_property.to_string(),
            properties,
            currency_property: None,
            date_property: "createdate".into(),
            amount_format: AmountFormat::Major,
            base_url: "https://api.hubapi.com".into(),
            requests_per_10s: 100,
            search_per_second: 5,
            rate_limit_patience: DEFAULT_PATIENCE,
        }
    }
}

/// A HubSpot object type as a [`Source`] and [`Target`].
#[derive(Clone, Debug)]
pub struct HubSpotObjects {
    general: HttpClient,
    search: HttpClient,
    cfg: HubSpotConfig,
    schema: Schema,
    /// The last `X-HubSpot-RateLimit-Interval-Milliseconds` seen.
    interval_ms: Arc<AtomicU64>,
}

/// The search client's throttle hint: a 429 of the `TEN_SECONDLY_ROLLING`
/// policy (`policyName`, or HubSpot's documented "You have reached your
/// ten_secondly_rolling limit." as the message) means the account's window
/// is spent, by other apps too: the policy holds every request (search and
/// general) for the window's interval, `interval_ms` (the last
/// `X-HubSpot-RateLimit-Interval-Milliseconds` seen: search answers carry
/// no rate-limit headers to say so), and retries under
/// `rate_limit_patience`.
fn ten_secondly(status: u16, body: &[u8], interval_ms: &AtomicU64) -> Option<Throttle> {
    if status != 429 {
        return None;
    }
    let json = serde_json::from_slice::<Json>(body).ok()?;
    let text = |key: &str| json.get(key).and_then(Json::as_str).unwrap_or_default();
    let named = text("policyName") == "TEN_SECONDLY_ROLLING"
        || text("message")
            .to_ascii_lowercase()
            .contains("ten_secondly");
    named.then(|| Throttle {
        wait: Some(Duration::from_millis(interval_ms.load(Ordering::Relaxed))),
        code: "429 TEN_SECONDLY_ROLLING".into(),
        shared_window: true,
    })
}

/// Unique `objectWriteTraceId`s: a per-process prefix and a counter.
fn trace_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        nanos ^ u64::from(std::process::id()).rotate_left(32)
    });
    format!(
        "recon-{prefix:016x}-{}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

const TOKEN_HINT: &str =
    "check the job's target.token (a private app access token with CRM read and write scopes)";

fn http_error(e: HttpError) -> ConnectorError {
    match &e {
        HttpError::Unauthorized { .. } => ConnectorError::Config(format!("{e}; {TOKEN_HINT}")),
        HttpError::Status { status: 429, .. } => ConnectorError::Unreachable(format!(
            "{e}; the HubSpot account's daily API limit is used up: run again after it resets (midnight in the account's time zone) or raise the limit"
        )),
        _ => ConnectorError::Unreachable(e.to_string()),
    }
}

/// `limit` per `interval`, `burst` at once, `headroom` percent unused.
fn policy(
    limit: u32,
    interval: Duration,
    burst: u32,
    headroom: u32,
    patience: Duration,
) -> HttpPolicy {
    let mut p = HttpPolicy::new(limit.max(1));
    p.interval = interval;
    p.burst = burst.max(1);
    p.headroom_percent = headroom;
    p.rate_limit_patience = patience;
    p
}

impl HubSpotObjects {
    /// Builds the clients; no request is sent yet.
    pub fn new(cfg: HubSpotConfig, schema: &Schema) -> Result<HubSpotObjects, ConnectorError> {
        if cfg.properties.len() != schema.fields.len() {
            return Err(ConnectorError::Config(format!(
                "HubSpot {}: {} properties mapped for {} fields",
                cfg.object_type,
                cfg.properties.len(),
                schema.fields.len()
            )));
        }
        let auth = vec![(
            "Authorization".to_string(),
            Secret::new(format!("Bearer {}", cfg.token.expose())),
        )];
        // At most 95% of `limit` requests in any rolling 10 s (a burst of 5%
        // paid out of the steady rate): headroom for requests that reach
        // HubSpot closer together than they were sent. Responses report
        // what other apps left of the window; the policy paces to it.
        let limit = cfg.requests_per_10s.max(2);
        let mut general_policy = policy(
            limit,
            Duration::from_secs(10),
            (limit / 20).max(1),
            5,
            cfg.rate_limit_patience,
        );
        general_policy.limit_headers = Some(LIMIT_HEADERS);
        let general =
            HttpClient::new(HUBSPOT, general_policy, auth.clone(), vec![]).map_err(http_error)?;
        // Search has its own per-second limit (5, counted per one-second
        // window) and also counts toward the general one: its requests wait
        // for a permit of both limiters. Paced at 80% of it, one request per
        // 1.25/limit s (4/s at 5): five requests sent that way span a whole
        // second, so no second as HubSpot counts it holds more than the limit
        // unless arrivals bunch by a quarter of a second.
        // https://developers.hubspot.com/docs/guides/apps/api-usage/usage-details
        let interval_ms = Arc::new(AtomicU64::new(10_000));
        let interval = interval_ms.clone();
        let search = HttpClient::new(
            HUBSPOT,
            policy(
                cfg.search_per_second.max(1),
                Duration::from_secs(1),
                1,
                20,
                cfg.rate_limit_patience,
            ),
            auth,
            vec![],
        )
        .map_err(http_error)?
        .also_limited_by(&general)
        .with_throttle_hint(move |status, body| ten_secondly(status, body, &interval));
        Ok(HubSpotObjects {
            general,
            search,
            cfg,
            schema: schema.clone(),
            interval_ms,
        })
    }

    /// Requests sent, retried and throttled so far (general, search).
    pub fn stats(&self) -> (recon_core::http::HttpStats, recon_core::http::HttpStats) {
        (self.general.stats(), self.search.stats())
    }

    /// `POST url` through the general client, or the search client (whose
    /// 429s of `TEN_SECONDLY_ROLLING` the policy waits out, see
    /// [`ten_secondly`]).
    async fn post(
        &self,
        url: &str,
        body: &Json,
        search: bool,
    ) -> Result<(Json, ResponseMeta), HttpError> {
        let client = if search { &self.search } else { &self.general };
        let (v, meta) = client.post_json::<Json>(url, body).await?;
        if !search {
            self.note_interval(&meta);
        }
        Ok((v, meta))
    }

    /// `GET url` through the general client.
    async fn get(&self, url: &str) -> Result<(Json, ResponseMeta), HttpError> {
        let (v, meta) = self.general.get_json::<Json>(url, &[]).await?;
        self.note_interval(&meta);
        Ok((v, meta))
    }

    /// Remembers the window's interval for search 429s, whose answers do
    /// not carry it.
    fn note_interval(&self, meta: &ResponseMeta) {
        if let Some(ms) = meta
            .headers
            .get(LIMIT_HEADERS.interval_ms)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            self.interval_ms
                .store(ms.clamp(1, 3_600_000), Ordering::Relaxed);
        }
    }

    fn url(&self, tail: &str) -> String {
        format!(
            "{}/crm/v3/objects/{}/{tail}",
            self.cfg.base_url.trim_end_matches('/'),
            self.cfg.object_type
        )
    }

    fn requested_properties(&self) -> Vec<String> {
        let mut p = vec![self.cfg.id_property.clone(), self.cfg.date_property.clone()];
        p.extend(self.cfg.properties.iter().cloned());
        p.extend(self.cfg.currency_property.iter().cloned());
        p.sort();
        p.dedup();
        p
    }

    fn parse(&self, object: &Json) -> Result<Option<Record>, ConnectorError> {
        let id = object.get("id").and_then(|i| i.as_str()).unwrap_or("?");
        let props = object.get("properties").cloned().unwrap_or(Json::Null);
        let text = |p: &str| -> Option<String> {
            match props.get(p) {
                Some(Json::String(s)) if !s.is_empty() => Some(s.clone()),
                // HubSpot sends property values as strings; a number is
                // taken by its text as received (serde_json's
                // `arbitrary_precision`), never through a float.
                Some(Json::Number(n)) => Some(n.to_string()),
                Some(Json::Bool(b)) => Some(b.to_string()),
                _ => None,
            }
        };
        // An object without the ID property is not one recon manages.
        let Some(key) = text(&self.cfg.id_property).map(|k| k.trim().to_string()) else {
            return Ok(None);
        };
        // HubSpot's `amount` is a decimal string in major units by default,
        // so ISO 4217's exponent applies (no provider table of minor units,
        // unlike Stripe's integers).
        let rules = ValueRules {
            amounts: self.cfg.amount_format,
            timestamps: TimestampRules::HUBSPOT,
        };
        let cp = self.cfg.currency_property.as_deref().unwrap_or_default();
        let code = text(cp);
        let bad = |p: &str, e: parse::ValueError| ConnectorError::Malformed {
            location: Location(format!("HubSpot {} {id} ({key})", self.cfg.object_type)),
            message: e.message("property", p, cp),
        };
        let mut values = Vec::with_capacity(self.schema.fields.len());
        for (f, p) in self.schema.fields.iter().zip(&self.cfg.properties) {
            let v = match text(p) {
                None => Value::Null,
                Some(t) => {
                    parse::value(t, f.kind, code.as_deref(), rules).map_err(|e| bad(p, e))?
                }
            };
            values.push(v);
        }
        Ok(Some(Record { key, values }))
    }

    fn properties_of(&self, r: &Record) -> serde_json::Map<String, Json> {
        let mut props = serde_json::Map::new();
        for ((f, p), v) in self
            .schema
            .fields
            .iter()
            .zip(&self.cfg.properties)
            .zip(&r.values)
        {
            let text = match (f.kind, v) {
                (_, Value::Null) => Json::Null,
                (_, Value::Money(m)) => {
                    if let Some(cp) = &self.cfg.currency_property {
                        props.insert(cp.clone(), json!(m.currency.code()));
                    }
                    json!(match self.cfg.amount_format {
                        AmountFormat::Major => m.to_major_string(),
                        AmountFormat::Minor => m.minor.to_string(),
                    })
                }
                // HubSpot takes datetime values as epoch milliseconds.
                (_, Value::Timestamp(t)) => json!(t.as_millisecond().to_string()),
                (_, other) => json!(other.to_string()),
            };
            props.insert(p.clone(), text);
        }
        props.insert(self.cfg.id_property.clone(), json!(r.key));
        props
    }

    /// A `batch/create` input (`SimplePublicObjectBatchInputForCreate` of
    /// the CRM v3 spec: `properties` and `associations` required): null
    /// values are left out, a new object has no value to clear.
    fn create_input(&self, r: &Record) -> Json {
        let mut props = self.properties_of(r);
        props.retain(|_, v| !v.is_null());
        json!({
            "properties": props,
            "associations": [],
            "objectWriteTraceId": trace_id(),
        })
    }

    /// One `batch/upsert` call for at most 100 records. Each input is
    /// `SimplePublicObjectBatchInputUpsert` of the CRM v3 spec: `properties`
    /// is a map of strings, so an empty value is sent as `""`, which clears
    /// it (HubSpot's documented way), never `null`. Every input carries its
    /// own `objectWriteTraceId`; results are matched to inputs by the trace
    /// ID they echo (errors by the input `id`s or trace IDs in their
    /// `context`), whatever their order.
    /// https://developers.hubspot.com/docs/api-reference/crm-objects-v3/batch/post-crm-v3-objects-objectType-batch-upsert
    async fn upsert(&self, chunk: &[Record]) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let traces: Vec<String> = chunk.iter().map(|_| trace_id()).collect();
        let inputs: Vec<Json> = chunk
            .iter()
            .zip(&traces)
            .map(|(r, trace)| {
                let mut props = self.properties_of(r);
                for v in props.values_mut() {
                    if v.is_null() {
                        *v = json!("");
                    }
                }
                json!({
                    "idProperty": self.cfg.id_property,
                    "id": r.key,
                    "objectWriteTraceId": trace,
                    "properties": props,
                })
            })
            .collect();
        let (v, _) = self
            .post(
                &self.url("batch/upsert"),
                &json!({ "inputs": inputs }),
                false,
            )
            .await
            .map_err(http_error)?;
        let by_trace: HashMap<&str, usize> = traces
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        let by_key: HashMap<&str, usize> = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| (r.key.as_str(), i))
            .collect();
        let mut outcomes: Vec<Option<WriteOutcome>> = vec![None; chunk.len()];
        for o in v["results"].as_array().into_iter().flatten() {
            let Some(i) = o["objectWriteTraceId"]
                .as_str()
                .and_then(|t| by_trace.get(t))
            else {
                tracing::warn!(
                    message = "HubSpot upsert result without a known objectWriteTraceId; ignored.",
                    id = o["id"].as_str()
                );
                continue;
            };
            outcomes[*i] = Some(if o["new"].as_bool() == Some(true) {
                WriteOutcome::Created
            } else {
                WriteOutcome::Updated
            });
        }
        for e in v["errors"].as_array().into_iter().flatten() {
            let message = e["message"]
                .as_str()
                .unwrap_or("rejected by HubSpot")
                .to_string();
            let context = &e["context"];
            let by = |field: &str, map: &HashMap<&str, usize>| -> Vec<usize> {
                context[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str())
                    .filter_map(|x| map.get(x.trim()).copied())
                    .collect()
            };
            for i in by("objectWriteTraceId", &by_trace)
                .into_iter()
                .chain(by("ids", &by_key))
            {
                outcomes[i] = Some(WriteOutcome::Failed(message.clone()));
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    WriteOutcome::Failed("HubSpot returned no result for this input".into())
                })
            })
            .collect())
    }

    /// Insert mode: creates the objects that do not exist and never touches
    /// one that does. Existing objects are found with `batch/read` by the ID
    /// property (unchanged); the others go to `batch/create`, which HubSpot
    /// refuses whole with 409 CONFLICT when any input's unique value is
    /// already taken (an object created meanwhile). Then each input is
    /// created alone (`POST /crm/v3/objects/{type}`): a 409 whose key now
    /// exists is unchanged, any other refusal fails that item alone.
    /// https://developers.hubspot.com/docs/api-reference/crm-objects-v3/batch/post-crm-v3-objects-objectType-batch-create
    async fn create_missing(&self, chunk: &[Record]) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let keys: Vec<String> = chunk.iter().map(|r| r.key.clone()).collect();
        let present: std::collections::HashSet<String> = self
            .lookup(&keys)
            .await?
            .into_iter()
            .map(|r| r.key)
            .collect();
        let fresh: Vec<&Record> = chunk.iter().filter(|r| !present.contains(&r.key)).collect();
        let mut created: HashMap<&str, WriteOutcome> = HashMap::new();
        if !fresh.is_empty() {
            let inputs: Vec<Json> = fresh.iter().map(|r| self.create_input(r)).collect();
            match self
                .post(
                    &self.url("batch/create"),
                    &json!({ "inputs": inputs }),
                    false,
                )
                .await
            {
                Ok(_) => {
                    for r in &fresh {
                        created.insert(r.key.as_str(), WriteOutcome::Created);
                    }
                }
                Err(HttpError::Status {
                    status: 409 | 400, ..
                }) => {
                    for r in &fresh {
                        let o = self.create_one(r).await?;
                        created.insert(r.key.as_str(), o);
                    }
                }
                Err(e) => return Err(http_error(e)),
            }
        }
        Ok(chunk
            .iter()
            .map(|r| {
                created
                    .remove(r.key.as_str())
                    .unwrap_or(WriteOutcome::Unchanged)
            })
            .collect())
    }

    async fn create_one(&self, r: &Record) -> Result<WriteOutcome, ConnectorError> {
        let url = format!(
            "{}/crm/v3/objects/{}",
            self.cfg.base_url.trim_end_matches('/'),
            self.cfg.object_type
        );
        match self.post(&url, &self.create_input(r), false).await {
            Ok(_) => Ok(WriteOutcome::Created),
            Err(HttpError::Status {
                status: 409,
                message,
                ..
            }) => {
                let now = self.lookup(std::slice::from_ref(&r.key)).await?;
                if now.iter().any(|x| x.key == r.key) {
                    Ok(WriteOutcome::Unchanged)
                } else {
                    Ok(WriteOutcome::Failed(format!(
                        "HubSpot refused to create it: {message}"
                    )))
                }
            }
            Err(HttpError::Status {
                status, message, ..
            }) if (400..500).contains(&status) => Ok(WriteOutcome::Failed(format!(
                "HubSpot refused to create it ({status}): {message}"
            ))),
            Err(e) => Err(http_error(e)),
        }
    }

    async fn search_page(
        &self,
        lo_ms: i64,
        hi_ms: i64,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Json, ConnectorError> {
        let mut body = json!({
            "filterGroups": [{"filters": [
                {"propertyName": self.cfg.date_property, "operator": "GTE", "value": lo_ms.to_string()},
                {"propertyName": self.cfg.date_property, "operator": "LT", "value": hi_ms.to_string()},
            ]}],
            "sorts": [{"propertyName": self.cfg.date_property, "direction": "ASCENDING"}],
            "properties": self.requested_properties(),
            "limit": limit,
        });
        if let Some(a) = after {
            body["after"] = json!(a);
        }
        let (v, _) = self
            .post(&self.url("search"), &body, true)
            .await
            .map_err(http_error)?;
        Ok(v)
    }

    /// Splits `[lo, hi)` until each slice's total fits under the search cap.
    async fn slices(&self, lo: i64, hi: i64) -> Result<Vec<(i64, i64)>, ConnectorError> {
        let mut todo = vec![(lo, hi)];
        let mut done = Vec::new();
        while let Some((a, b)) = todo.pop() {
            let total = self.search_page(a, b, None, 1).await?["total"]
                .as_u64()
                .unwrap_or(0);
            if total <= SEARCH_CAP || b - a <= 1 {
                if total > SEARCH_CAP {
                    return Err(ConnectorError::Malformed {
                        location: Location(format!("HubSpot {}", self.cfg.object_type)),
                        message: format!(
                            "more than {SEARCH_CAP} objects share the millisecond {a} of `{}`; recon cannot page them through search",
                            self.cfg.date_property
                        ),
                    });
                }
                if total > 0 {
                    done.push((a, b));
                }
            } else {
                let mid = a + (b - a) / 2;
                todo.push((mid, b));
                todo.push((a, mid));
            }
        }
        done.sort();
        Ok(done)
    }

    fn walk(&self, lo: i64, hi: i64) -> BoxStream<'_, Result<Page, ConnectorError>> {
        Box::pin(stream::try_unfold(
            Some(None::<String>),
            move |state| async move {
                let Some(after) = state else { return Ok(None) };
                let v = self
                    .search_page(lo, hi, after.as_deref(), SEARCH_PAGE)
                    .await?;
                let mut records = Vec::new();
                for o in v["results"].as_array().into_iter().flatten() {
                    if let Some(r) = self.parse(o)? {
                        records.push(r);
                    }
                }
                let next = v["paging"]["next"]["after"]
                    .as_str()
                    .map(|s| Some(s.to_string()));
                Ok(Some((Page::new(records), next)))
            },
        ))
    }
}

#[async_trait::async_trait]
impl Source for HubSpotObjects {
    fn describe(&self) -> String {
        format!(
            "HubSpot {} (by {})",
            self.cfg.object_type, self.cfg.id_property
        )
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let (lo, hi) = (window.start.as_millisecond(), window.end.as_millisecond());
        Box::pin(
            stream::once(async move { self.slices(lo, hi).await })
                .map(move |slices| match slices {
                    Ok(slices) => stream::iter(slices)
                        .map(move |(a, b)| self.walk(a, b))
                        .flatten()
                        .boxed(),
                    Err(e) => stream::once(async move { Err(e) }).boxed(),
                })
                .flatten(),
        )
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        let mut out = Vec::new();
        for chunk in keys.chunks(BATCH) {
            let body = json!({
                "idProperty": self.cfg.id_property,
                "inputs": chunk.iter().map(|k| json!({"id": k})).collect::<Vec<_>>(),
                "properties": self.requested_properties(),
                "propertiesWithHistory": [],
            });
            // 207 lists missing inputs as errors; the found ones are in results.
            let v = match self.post(&self.url("batch/read"), &body, false).await {
                Ok((v, _)) => v,
                Err(HttpError::Status { status: 404, .. }) => continue,
                Err(e) => return Err(http_error(e)),
            };
            for o in v["results"].as_array().into_iter().flatten() {
                if let Some(r) = self.parse(o)? {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    /// `GET /crm/v3/objects/{objectType}?limit=1`: one general call that
    /// proves the token may read the object type, and whose
    /// `X-HubSpot-RateLimit-*` headers report what is left of the account's
    /// 10-second window and day
    /// (https://developers.hubspot.com/docs/guides/apps/api-usage/usage-details).
    async fn probe(&self) -> Result<recon_core::Probe, ConnectorError> {
        let (_, meta) = self
            .get(&format!("{}?limit=1", self.url("").trim_end_matches('/')))
            .await
            .map_err(http_error)?;
        let header = |name: &str| {
            meta.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let mut probe = recon_core::Probe::reached(self.describe()).authenticated();
        probe = match (
            header("X-HubSpot-RateLimit-Remaining"),
            header("X-HubSpot-RateLimit-Max"),
        ) {
            (Some(left), Some(max)) => probe.limit(format!(
                "{left} of {max} requests left in the 10-s window (requests_per_10s = {})",
                self.cfg.requests_per_10s
            )),
            _ => probe.limit(format!(
                "{} requests per 10 s (requests_per_10s)",
                self.cfg.requests_per_10s
            )),
        };
        if let (Some(left), Some(max)) = (
            header("X-HubSpot-RateLimit-Daily-Remaining"),
            header("X-HubSpot-RateLimit-Daily"),
        ) {
            probe = probe.limit(format!("{left} of {max} daily requests left"));
        }
        Ok(probe.limit(format!("search {}/s", self.cfg.search_per_second)))
    }
}

#[async_trait::async_trait]
impl Target for HubSpotObjects {
    async fn check_idempotent(&self) -> Result<(), ConnectorError> {
        let url = format!(
            "{}/crm/v3/properties/{}/{}",
            self.cfg.base_url.trim_end_matches('/'),
            self.cfg.object_type,
            self.cfg.id_property
        );
        let fix = format!(
            "create it with POST /crm/v3/properties/{} {{\"name\": \"{}\", \"type\": \"string\", \"fieldType\": \"text\", \"hasUniqueValue\": true, …}} (a unique property cannot be made unique later: create a new one and copy the values)",
            self.cfg.object_type, self.cfg.id_property
        );
        match self.get(&url).await {
            Ok((v, _)) if v["hasUniqueValue"].as_bool() == Some(true) => Ok(()),
            Ok(_) => Err(ConnectorError::NotIdempotent(format!(
                "HubSpot property `{}` of {} is not unique (hasUniqueValue is false); upserts by it would not be idempotent. Use a property with hasUniqueValue: true: {fix}",
                self.cfg.id_property, self.cfg.object_type
            ))),
            Err(HttpError::Status { status: 404, .. }) => Err(ConnectorError::NotIdempotent(format!(
                "HubSpot {} has no property `{}`; {fix}",
                self.cfg.object_type, self.cfg.id_property
            ))),
            Err(e) => Err(http_error(e)),
        }
    }

    async fn write(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        if mode == WriteMode::Insert {
            let mut out = Vec::with_capacity(records.len());
            for chunk in records.chunks(BATCH) {
                out.extend(self.create_missing(chunk).await?);
            }
            return Ok(out);
        }
        let mut out = Vec::with_capacity(records.len());
        for chunk in records.chunks(BATCH) {
            out.extend(self.upsert(chunk).await?);
        }
        Ok(out)
    }

    fn as_source(&self) -> &dyn Source {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ten_secondly_429_holds_every_request_for_the_interval_seen() {
        let interval = AtomicU64::new(7_000);
        let by_policy =
            br#"{"status":"error","message":"limit","policyName":"TEN_SECONDLY_ROLLING"}"#;
        let t = ten_secondly(429, by_policy, &interval).unwrap();
        assert_eq!(t.wait, Some(Duration::from_secs(7)));
        assert_eq!(t.code, "429 TEN_SECONDLY_ROLLING");
        assert!(t.shared_window);
        // HubSpot's documented message names it too.
        let by_message =
            br#"{"status":"error","message":"You have reached your ten_secondly_rolling limit."}"#;
        assert!(ten_secondly(429, by_message, &interval).is_some());
    }

    #[test]
    fn other_429s_are_left_to_the_policy() {
        let interval = AtomicU64::new(10_000);
        let secondly = br#"{"status":"error","message":"limit","policyName":"SECONDLY"}"#;
        assert_eq!(ten_secondly(429, secondly, &interval), None);
        let daily = br#"{"status":"error","message":"limit","policyName":"DAILY"}"#;
        assert_eq!(ten_secondly(429, daily, &interval), None);
        let ok = br#"{"policyName":"TEN_SECONDLY_ROLLING"}"#;
        assert_eq!(ten_secondly(200, ok, &interval), None);
        assert_eq!(ten_secondly(429, b"not json", &interval), None);
    }
}
