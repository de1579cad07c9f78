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
//! - **Rate limits**: the general limit per rolling 10 s (100 by default,
//!   configurable for higher tiers) and the search API's own 5 requests/s,
//!   each paced by its own limiter; a 429 for the DAILY policy stops the run
//!   instead of retrying for hours.

use std::collections::HashMap;
use std::time::Duration;

use futures_core::stream::BoxStream;
use futures_util::{stream, StreamExt};
use recon_core::http::{HttpClient, HttpError, HttpPolicy, Provider};
use recon_core::{
    AmountFormat, ConnectorError, Currency, FieldKind, Location, Money, Page, Record, Schema,
    Secret, Source, Target, Value, Window, WriteMode, WriteOutcome,
};
use serde_json::{json, Value as Json};

/// HubSpot's identity for the HTTP policy: correlation IDs name requests,
/// and a 429 of the DAILY policy is final.
pub const HUBSPOT: Provider = Provider {
    name: "HubSpot",
    request_id_header: "X-HubSpot-Correlation-Id",
    should_retry_header: None,
    final_when: &[("policyName", "DAILY")],
};

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
        // At most `limit` requests in any rolling 10 s: a burst of 5% and a
        // steady rate for the rest, so burst + 10 s of rate never passes it.
        let limit = cfg.requests_per_10s.max(2);
        let burst = (limit / 20).max(1);
        let general = HttpClient::new(
            HUBSPOT,
            policy(limit - burst, Duration::from_secs(10), burst),
            auth.clone(),
            vec![],
        )
        .map_err(http_error)?;
        // Search has its own per-second limit and also counts toward the
        // general one: its requests wait for a permit of both limiters.
        let search = HttpClient::new(
            HUBSPOT,
            policy(cfg.search_per_second, Duration::from_secs(1), 1),
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
        })
    }

    /// Requests sent, retried and throttled so far (general, search).
    pub fn stats(&self) -> (recon_core::http::HttpStats, recon_core::http::HttpStats) {
        (self.general.stats(), self.search.stats())
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

    /// Properties of a new object: null values are left out (a new object
    /// has no value to clear).
    fn create_properties(&self, r: &Record) -> Json {
        let mut props = self.properties_of(r);
        props.retain(|_, v| !v.is_null());
        Json::Object(props)
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
            let inputs: Vec<Json> = fresh
                .iter()
                .map(|r| json!({ "properties": self.create_properties(r) }))
                .collect();
            match self
                .general
                .post_json::<Json>(&self.url("batch/create"), &json!({ "inputs": inputs }))
                .await
            {
                Ok((_, meta)) => {
                    pace(&meta).await;
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
        match self
            .general
            .post_json::<Json>(&url, &json!({ "properties": self.create_properties(r) }))
            .await
        {
            Ok((_, meta)) => {
                pace(&meta).await;
                Ok(WriteOutcome::Created)
            }
            Err(HttpError::Status {
                status: 409,
                message,
                ..
            }) => {
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
            .search
            .post_json::<Json>(&self.url("search"), &body)
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
                Ok(Some((Page { records }, next)))
            },
        ))
    }
}

/// Paces by HubSpot's `X-HubSpot-RateLimit-*` headers, which count what
/// every client of the account spent (our limiter knows only this process):
/// when the window is nearly spent, wait a tenth of it before going on.
async fn pace(meta: &recon_core::http::ResponseMeta) {
    let header = |name: &str| -> Option<u64> {
        meta.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
    };
    if let (Some(remaining), Some(interval)) = (
        header("X-HubSpot-RateLimit-Remaining"),
        header("X-HubSpot-RateLimit-Interval-Milliseconds"),
    ) {
        if remaining <= 1 {
            tracing::debug!(
                message = "HubSpot's rate-limit window is nearly spent; pausing.",
                remaining,
                interval_ms = interval
            );
            tokio::time::sleep(Duration::from_millis(interval / 10)).await;
        }
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
            });
            // 207 lists missing inputs as errors; the found ones are in results.
            let v = match self
                .general
                .post_json::<Json>(&self.url("batch/read"), &body)
                .await
            {
                Ok((v, meta)) => {
                    pace(&meta).await;
                    v
                }
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
        match self.general.get_json::<Json>(&url, &[]).await {
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
            let inputs: Vec<Json> = chunk
                .iter()
                .map(|r| json!({"idProperty": self.cfg.id_property, "id": r.key, "properties": self.properties_of(r)}))
                .collect();
            let (v, meta) = self
                .general
                .post_json::<Json>(&self.url("batch/upsert"), &json!({ "inputs": inputs }))
                .await
                .map_err(http_error)?;
            pace(&meta).await;
            let mut by_key: HashMap<String, WriteOutcome> = HashMap::new();
            for o in v["results"].as_array().into_iter().flatten() {
                let key = o["properties"][&self.cfg.id_property]
                    .as_str()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                let outcome = match (o["new"].as_bool(), mode) {
                    (Some(true), _) => WriteOutcome::Created,
                    (_, WriteMode::Insert) => WriteOutcome::Unchanged,
                    (_, WriteMode::Upsert) => WriteOutcome::Updated,
                };
                by_key.insert(key, outcome);
            }
            for e in v["errors"].as_array().into_iter().flatten() {
                let message = e["message"]
                    .as_str()
                    .unwrap_or("rejected by HubSpot")
                    .to_string();
                for id in e["context"]["ids"].as_array().into_iter().flatten() {
                    if let Some(id) = id.as_str() {
                        by_key.insert(id.trim().to_string(), WriteOutcome::Failed(message.clone()));
                    }
                }
            }
            for r in chunk {
                out.push(by_key.remove(&r.key).unwrap_or_else(|| {
                    WriteOutcome::Failed("HubSpot returned no result for this input".into())
                }));
            }
        }
        Ok(out)
    }
}
