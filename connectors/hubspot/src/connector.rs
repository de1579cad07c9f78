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
//!   requests/s at 4/s, each by its own limiter, so no window as HubSpot
//!   counts it is passed by recon alone. Other apps share the account's
//!   budget: when a response says `X-HubSpot-RateLimit-Remaining: 0`, or a
//!   429 names `TEN_SECONDLY_ROLLING` (or `SECONDLY` for search), every
//!   request waits the rolling window (`X-HubSpot-RateLimit-Interval-Milliseconds`,
//!   one second for search) before the next, and the call is sent again. A
//!   run fails on rate limiting only after `patience` (default 15 minutes)
//!   without a successful call. A 429 for the DAILY policy stops the run
//!   instead of retrying for hours.
//! - **Writes are correlated by `objectWriteTraceId`**: every upsert input
//!   carries a unique trace ID, and results are matched by the one they
//!   echo (errors by their `context`), never by position or by the echoed
//!   ID property, which the CRM v3 spec does not promise.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_core::stream::BoxStream;
use futures_util::{stream, StreamExt};
use recon_core::http::{HttpClient, HttpError, HttpPolicy, Provider, ResponseMeta};
use recon_core::{
    AmountFormat, ConnectorError, Currency, FieldKind, Location, Money, Page, Record, Schema,
    Secret, Source, Target, Value, Window, WriteMode, WriteOutcome,
};
use serde_json::{json, Value as Json};

/// HubSpot's identity for the HTTP policy: correlation IDs name requests,
/// and a 429 is never retried by the policy's short backoff: DAILY is final,
/// and the rolling policies (`TEN_SECONDLY_ROLLING`, `SECONDLY`) are waited
/// out by the connector for their whole window (see the module docs).
pub const HUBSPOT: Provider = Provider {
    name: "HubSpot",
    request_id_header: "X-HubSpot-Correlation-Id",
    should_retry_header: None,
    final_when: &[
        ("policyName", "DAILY"),
        ("policyName", "TEN_SECONDLY_ROLLING"),
        ("policyName", "SECONDLY"),
    ],
};

/// The default of [`HubSpotConfig::patience`]: 15 minutes.
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
    /// (default 15 minutes; the job's `patience` setting).
    pub patience: Duration,
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
            patience: DEFAULT_PATIENCE,
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
    gate: Arc<Gate>,
}

/// When requests may go again after HubSpot said a window is spent, and
/// when a call last succeeded (shared by clones).
#[derive(Debug)]
struct Gate {
    /// No request before this (the 10-second window, every endpoint).
    general: Mutex<Option<Instant>>,
    /// No search request before this (the search endpoints' second).
    search: Mutex<Option<Instant>>,
    /// The last successful call (or the start).
    progress: Mutex<Instant>,
    /// The last `X-HubSpot-RateLimit-Interval-Milliseconds` seen.
    interval_ms: AtomicU64,
    /// 429s of the rolling policies waited out.
    waits: AtomicU64,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            general: Mutex::new(None),
            search: Mutex::new(None),
            progress: Mutex::new(Instant::now()),
            interval_ms: AtomicU64::new(10_000),
            waits: AtomicU64::new(0),
        }
    }

    fn hold(slot: &Mutex<Option<Instant>>, until: Instant) {
        let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
        *s = Some(s.map_or(until, |t| t.max(until)));
    }

    async fn wait(&self, search: bool) {
        let slots: &[&Mutex<Option<Instant>>] = if search {
            &[&self.general, &self.search]
        } else {
            &[&self.general]
        };
        for slot in slots {
            let until = *slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(t) = until {
                tokio::time::sleep_until(t.into()).await;
            }
        }
    }
}

/// Why a call through [`HubSpotObjects::post`] failed.
#[derive(Debug)]
enum CallError {
    Http(HttpError),
    /// Rate limited without a successful call for the whole patience.
    Patience(String),
}

impl From<CallError> for ConnectorError {
    fn from(e: CallError) -> ConnectorError {
        match e {
            CallError::Http(e) => http_error(e),
            CallError::Patience(m) => ConnectorError::Unreachable(m),
        }
    }
}

/// Which of HubSpot's policies a 429 names, from its documented message
/// ("You have reached your ten_secondly_rolling limit.", "… secondly
/// limit.", "… daily limit."): the policy's name reaches the connector only
/// through the message once the HTTP policy treats the 429 as final.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Daily,
    Secondly,
    TenSecondly,
}

fn policy_of(message: &str) -> Policy {
    let m = message.to_ascii_lowercase();
    if m.contains("daily") {
        Policy::Daily
    } else if m.contains("secondly") && !m.contains("ten_secondly") {
        Policy::Secondly
    } else {
        Policy::TenSecondly
    }
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

fn policy(per_interval: u32, interval: Duration, burst: u32) -> HttpPolicy {
    let mut p = HttpPolicy::new(per_interval.max(1));
    p.interval = interval;
    p.burst = burst.max(1);
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
        // At most 95% of `limit` requests in any rolling 10 s: a burst of 5%
        // and a steady rate for the rest, so burst + 10 s of rate stays 5%
        // under the limit, headroom for requests that reach HubSpot closer
        // together than they were sent.
        let limit = cfg.requests_per_10s.max(2);
        let burst = (limit / 20).max(1);
        let steady = (limit * 95 / 100).saturating_sub(burst).max(1);
        let general = HttpClient::new(
            HUBSPOT,
            policy(steady, Duration::from_secs(10), burst),
            auth.clone(),
            vec![],
        )
        .map_err(http_error)?;
        // Search has its own per-second limit (5, counted per one-second
        // window) and also counts toward the general one: its requests wait
        // for a permit of both limiters. Paced at 80% of it, one request per
        // 1.25/limit s (4/s at 5): five requests sent that way span a whole
        // second, so no second as HubSpot counts it holds more than the limit
        // unless arrivals bunch by a quarter of a second.
        // https://developers.hubspot.com/docs/guides/apps/api-usage/usage-details
        let search_limit = cfg.search_per_second.max(1);
        let search = HttpClient::new(
            HUBSPOT,
            policy(4 * search_limit, Duration::from_secs(5), 1),
            auth,
            vec![],
        )
        .map_err(http_error)?
        .also_limited_by(&general);
        Ok(HubSpotObjects {
            general,
            search,
            cfg,
            schema: schema.clone(),
            gate: Arc::new(Gate::new()),
        })
    }

    /// Requests sent, retried and throttled so far (general, search).
    pub fn stats(&self) -> (recon_core::http::HttpStats, recon_core::http::HttpStats) {
        (self.general.stats(), self.search.stats())
    }

    /// 429s of HubSpot's rolling-window policies waited out so far.
    pub fn rate_limit_waits(&self) -> u64 {
        self.gate.waits.load(Ordering::Relaxed)
    }

    /// `POST url` through the general client (or the search client), waiting
    /// out HubSpot's rolling windows: after `Remaining: 0` or a 429 of
    /// `TEN_SECONDLY_ROLLING`, every request waits the window's interval;
    /// after a search 429 of `SECONDLY`, searches wait one second. Gives up
    /// after `patience` without a successful call.
    async fn post(
        &self,
        url: &str,
        body: &Json,
        search: bool,
    ) -> Result<(Json, ResponseMeta), CallError> {
        let client = if search { &self.search } else { &self.general };
        loop {
            self.gate.wait(search).await;
            match client.post_json::<Json>(url, body).await {
                Ok((v, meta)) => {
                    self.succeeded(&meta);
                    return Ok((v, meta));
                }
                Err(HttpError::Status {
                    status: 429,
                    message,
                    request_id,
                    ..
                }) if policy_of(&message) != Policy::Daily => {
                    self.throttled(url, &message, request_id.as_deref(), search)?;
                }
                Err(e) => return Err(CallError::Http(e)),
            }
        }
    }

    /// `GET url` with the same waiting as [`HubSpotObjects::post`].
    async fn get(&self, url: &str) -> Result<(Json, ResponseMeta), CallError> {
        loop {
            self.gate.wait(false).await;
            match self.general.get_json::<Json>(url, &[]).await {
                Ok((v, meta)) => {
                    self.succeeded(&meta);
                    return Ok((v, meta));
                }
                Err(HttpError::Status {
                    status: 429,
                    message,
                    request_id,
                    ..
                }) if policy_of(&message) != Policy::Daily => {
                    self.throttled(url, &message, request_id.as_deref(), false)?;
                }
                Err(e) => return Err(CallError::Http(e)),
            }
        }
    }

    /// Notes progress, and holds every request for the window's interval
    /// when HubSpot says none of it remains: the window counts every app of
    /// the account, which this process cannot see.
    fn succeeded(&self, meta: &ResponseMeta) {
        let now = Instant::now();
        *self.gate.progress.lock().unwrap_or_else(|p| p.into_inner()) = now;
        let header = |name: &str| -> Option<u64> {
            meta.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok())
        };
        if let Some(interval) = header("X-HubSpot-RateLimit-Interval-Milliseconds") {
            self.gate
                .interval_ms
                .store(interval.clamp(1, 3_600_000), Ordering::Relaxed);
        }
        if header("X-HubSpot-RateLimit-Remaining") == Some(0) {
            let wait = Duration::from_millis(self.gate.interval_ms.load(Ordering::Relaxed));
            tracing::debug!(
                message = "HubSpot's rate-limit window is spent (other apps share it); waiting for it to roll.",
                wait_ms = wait.as_millis() as u64
            );
            Gate::hold(&self.gate.general, now + wait);
        }
    }

    /// A 429 of a rolling policy: hold requests for the policy's window, or
    /// fail when `patience` passed without a successful call.
    fn throttled(
        &self,
        url: &str,
        message: &str,
        request_id: Option<&str>,
        search: bool,
    ) -> Result<(), CallError> {
        let policy = policy_of(message);
        let wait = match policy {
            Policy::Secondly => Duration::from_secs(1),
            _ => Duration::from_millis(self.gate.interval_ms.load(Ordering::Relaxed)),
        };
        let last = *self.gate.progress.lock().unwrap_or_else(|p| p.into_inner());
        let patience = self.cfg.patience;
        if last.elapsed() + wait > patience {
            let path = url.split("/crm/").nth(1).unwrap_or(url);
            return Err(CallError::Patience(format!(
                "HubSpot /crm/{path} kept answering 429 ({message}; {}) and no call succeeded for {}: other apps use the account's rate limit. Run again when they are quieter, or raise the job's `patience` setting (now {}; default 15m)",
                request_id.map_or("no request ID".to_string(), |r| format!("request {r}")),
                human(patience),
                human(patience),
            )));
        }
        self.gate.waits.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            message = "HubSpot rate limit reached (the account's budget is shared with other apps); waiting for the window to roll.",
            policy = ?policy,
            wait_ms = wait.as_millis() as u64,
            request_id
        );
        let until = Instant::now() + wait;
        match policy {
            Policy::Secondly if search => Gate::hold(&self.gate.search, until),
            _ => Gate::hold(&self.gate.general, until),
        }
        Ok(())
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
        let bad = |p: &str, m: String| ConnectorError::Malformed {
            location: Location(format!("HubSpot {} {id} ({key})", self.cfg.object_type)),
            message: format!("property `{p}`: {m}"),
        };
        let mut values = Vec::with_capacity(self.schema.fields.len());
        for (f, p) in self.schema.fields.iter().zip(&self.cfg.properties) {
            let v = match text(p) {
                None => Value::Null,
                Some(t) => match f.kind {
                    FieldKind::Text => Value::Text(t),
                    FieldKind::Integer => Value::Integer(
                        t.trim()
                            .parse()
                            .map_err(|_| bad(p, format!("`{t}` is not a whole number")))?,
                    ),
                    FieldKind::Currency => {
                        Value::Currency(Currency::parse(&t).map_err(|e| bad(p, e.to_string()))?)
                    }
                    FieldKind::Timestamp => Value::Timestamp(
                        parse_datetime(&t)
                            .ok_or_else(|| bad(p, format!("`{t}` is not a date-time")))?,
                    ),
                    FieldKind::Money => {
                        let cp = self.cfg.currency_property.clone().unwrap_or_default();
                        let code = text(&cp)
                            .ok_or_else(|| bad(&cp, "is empty; amounts need a currency".into()))?;
                        let c = Currency::parse(&code).map_err(|e| bad(&cp, e.to_string()))?;
                        // HubSpot's `amount` is a decimal string in major
                        // units, so ISO 4217's exponent applies (no provider
                        // table of minor units, unlike Stripe's integers).
                        Value::Money(
                            match self.cfg.amount_format {
                                AmountFormat::Major => Money::parse_major(&t, c),
                                AmountFormat::Minor => Money::parse_minor(&t, c),
                            }
                            .map_err(|e| bad(p, e.to_string()))?,
                        )
                    }
                },
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
            .await?;
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
            .lookup(&self.schema, &keys)
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
                Err(CallError::Http(HttpError::Status {
                    status: 409 | 400, ..
                })) => {
                    for r in &fresh {
                        let o = self.create_one(r).await?;
                        created.insert(r.key.as_str(), o);
                    }
                }
                Err(e) => return Err(e.into()),
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
            Err(CallError::Http(HttpError::Status {
                status: 409,
                message,
                ..
            })) => {
                let now = self
                    .lookup(&self.schema, std::slice::from_ref(&r.key))
                    .await?;
                if now.iter().any(|x| x.key == r.key) {
                    Ok(WriteOutcome::Unchanged)
                } else {
                    Ok(WriteOutcome::Failed(format!(
                        "HubSpot refused to create it: {message}"
                    )))
                }
            }
            Err(CallError::Http(HttpError::Status {
                status, message, ..
            })) if (400..500).contains(&status) => Ok(WriteOutcome::Failed(format!(
                "HubSpot refused to create it ({status}): {message}"
            ))),
            Err(e) => Err(e.into()),
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
        let (v, _) = self.post(&self.url("search"), &body, true).await?;
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
                Ok(Some((Page { records }, next)))
            },
        ))
    }
}

/// `15m`, `90s`, `1h30m`: a duration as the config writes it.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, 0) => format!("{h}h{m}m"),
        (h, m, sec) => format!("{h}h{m}m{sec}s"),
    }
}

fn parse_datetime(t: &str) -> Option<jiff::Timestamp> {
    let t = t.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return jiff::Timestamp::from_millisecond(ms).ok();
    }
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Some(ts);
    }
    // A date property holds a day at midnight UTC.
    t.parse::<jiff::civil::Date>().ok().and_then(|d| {
        jiff::tz::TimeZone::UTC
            .to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
            .ok()
    })
}

#[async_trait::async_trait]
impl Source for HubSpotObjects {
    fn describe(&self) -> String {
        format!(
            "HubSpot {} (by {})",
            self.cfg.object_type, self.cfg.id_property
        )
    }

    fn read(
        &self,
        _schema: &Schema,
        window: Window,
    ) -> BoxStream<'_, Result<Page, ConnectorError>> {
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

    async fn lookup(
        &self,
        _schema: &Schema,
        keys: &[String],
    ) -> Result<Vec<Record>, ConnectorError> {
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
                Err(CallError::Http(HttpError::Status { status: 404, .. })) => continue,
                Err(e) => return Err(e.into()),
            };
            for o in v["results"].as_array().into_iter().flatten() {
                if let Some(r) = self.parse(o)? {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Target for HubSpotObjects {
    async fn check_unique_key(&self) -> Result<(), ConnectorError> {
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
            Err(CallError::Http(HttpError::Status { status: 404, .. })) => Err(ConnectorError::NotIdempotent(format!(
                "HubSpot {} has no property `{}`; {fix}",
                self.cfg.object_type, self.cfg.id_property
            ))),
            Err(e) => Err(e.into()),
        }
    }

    async fn write(
        &self,
        _schema: &Schema,
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
}
