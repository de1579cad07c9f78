//! The Stripe list and retrieve calls behind the `Source` trait.
//!
//! **Time-sliced concurrency.** Stripe's list endpoints page with a cursor
//! (`starting_after`), so one walk is strictly serial: one request in flight,
//! as the official SDKs' auto-pagination does. recon asks for the window's
//! newest page first; if more follow, the rest of the window is cut into
//! slices by `created` and the slices are paged concurrently under the one
//! rate limiter, then merged and de-duplicated by ID. The number of slices
//! follows the density seen on the first page (about 20 pages each, so list
//! calls stay within a few percent of the pages needed, but enough of them
//! to keep the limiter saturated at the first page's latency), so a quiet
//! night costs one request and a busy one keeps the limiter busy.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures_core::stream::BoxStream;
use futures_util::{stream, StreamExt, TryStreamExt};
use recon_core::http::{
    default_error_body, HttpClient, HttpError, HttpPolicy, Provider, ProviderError,
};
use recon_core::{ConnectorError, Page, Record, Schema, Secret, Source, Window};

use tokio::sync::OnceCell;

use crate::models::{created_of, passes_filter, to_record, FieldPaths, ListPage, StripeObject};

/// Stripe's documented identity for the HTTP policy: request IDs come in
/// `Request-Id`, `Stripe-Should-Retry` overrides the retry decision, and
/// error bodies are read by `stripe_error_body`.
pub const STRIPE: Provider = Provider {
    name: "Stripe",
    request_id_header: "Request-Id",
    should_retry_header: Some("Stripe-Should-Retry"),
    error_body: stripe_error_body,
};

/// Stripe's error body, `{"error": {"message", "code", "type", …}}`: the
/// code falls back to the error's `type` (`api_error`,
/// `invalid_request_error`), which every Stripe error has. Any other body (a
/// proxy's) is read the common way.
fn stripe_error_body(body: &[u8]) -> Option<ProviderError> {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Error,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        message: Option<String>,
        code: Option<String>,
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(Body { error }) => Some(ProviderError {
            message: error.message,
            code: error.code.or(error.kind),
            is_final: false,
        }),
        Err(_) => default_error_body(body),
    }
}

/// The API version recon was written against, sent as `Stripe-Version` so
/// that an account's default version cannot change the shapes it reads.
pub const DEFAULT_API_VERSION: &str = "2024-06-20";

/// How to reach Stripe and what to read.
#[derive(Clone, Debug)]
pub struct StripeConfig {
    /// Secret API key (`sk_live_…`, `sk_test_…`, or a restricted `rk_…`).
    pub api_key: Secret,
    /// Which objects.
    pub object: StripeObject,
    /// API base URL (default `https://api.stripe.com`; the emulator's for tests).
    pub base_url: String,
    /// Pinned `Stripe-Version`.
    pub api_version: String,
    /// Requests per second; default Stripe's documented limit: 25/s in test
    /// mode, 100/s in live mode.
    pub requests_per_second: Option<u32>,
    /// Most slices paged at once (default 32).
    pub concurrency: usize,
    /// JSON path per schema field (default: [`StripeObject::default_path`]).
    pub field_paths: Vec<Option<String>>,
    /// JSON path of the currency (default `currency`).
    pub currency_path: Option<String>,
    /// List filters sent with every list call (`type = "charge"`,
    /// `payout = "po_…"`); only those of [`StripeObject::list_filters`].
    pub filters: Vec<(String, String)>,
    /// Per-request timeout in seconds (default 30).
    pub timeout_secs: Option<u64>,
    /// Most attempts per request that fails other than by rate limiting
    /// (default 6).
    pub max_attempts: Option<u32>,
    /// How long 429s are retried while no request succeeds (default 15
    /// minutes); then the run fails naming `rate_limit_patience`.
    pub rate_limit_patience: Option<std::time::Duration>,
}

impl StripeConfig {
    /// A config with the documented defaults.
    pub fn new(api_key: Secret, object: StripeObject) -> StripeConfig {
        StripeConfig {
            api_key,
            object,
            base_url: "https://api.stripe.com".into(),
            api_version: DEFAULT_API_VERSION.into(),
            requests_per_second: None,
            concurrency: 32,
            field_paths: Vec::new(),
            currency_path: None,
            filters: Vec::new(),
            timeout_secs: None,
            max_attempts: None,
            rate_limit_patience: None,
        }
    }

    /// Stripe's documented rate limit for this key: 100 read requests per
    /// second in live mode, 25 in test mode
    /// (https://docs.stripe.com/rate-limits, "Rate limiter").
    pub fn default_rate(&self) -> u32 {
        if self.api_key.expose().contains("_test_") {
            25
        } else {
            100
        }
    }
}

/// Stripe objects as a [`Source`].
#[derive(Clone, Debug)]
pub struct StripeSource {
    client: HttpClient,
    cfg: StripeConfig,
    schema: Schema,
    paths: FieldPaths,
    /// The limiter's configured pace, requests per second.
    pace: f64,
    /// With a `payout` or `source` filter: every object the filtered list
    /// holds regardless of the window, by ID, listed once on the first
    /// lookup (what a retrieve cannot tell).
    members: Arc<OnceCell<HashMap<String, serde_json::Value>>>,
}

/// How much closer together than sent Stripe may see recon's requests
/// (see [`StripeSource::new`]).
const JITTER: std::time::Duration = std::time::Duration::from_millis(20);

/// Pages a slice is sized to hold on average. Each slice ends with one
/// partial page (half a call wasted on average), so slices of 20 pages keep
/// list calls within 2.5% of the pages the window needs.
const PAGES_PER_SLICE: f64 = 20.0;

/// The slices `[lo, end)` is cut into, from the density the first page
/// showed: about [`PAGES_PER_SLICE`] pages each, but enough slices to keep
/// the rate limiter busy while each walk waits for its responses
/// (`pace × latency` requests in flight, doubled for slack), and never more
/// slices than pages.
fn plan_slices(
    lo: i64,
    end: i64,
    pages: f64,
    pace: f64,
    latency: f64,
    cap: usize,
) -> Vec<(i64, i64)> {
    let by_size = (pages / PAGES_PER_SLICE).ceil();
    let in_flight = (pace * latency * 2.0).ceil();
    let least = by_size
        .max(in_flight)
        .min(pages.ceil())
        .clamp(1.0, cap.max(1) as f64) as i64;
    // Each slice costs its pages rounded up: of `least` up to twice as
    // many slices, the fewest that cost the fewest calls (199 pages in 11
    // slices cost 209 calls, in 20 slices 200).
    let calls = |n: i64| n as f64 * (pages / n as f64 - 1e-9).ceil();
    let most = (least * 2).min(pages.ceil() as i64).min(cap.max(1) as i64);
    let slices = (least..=most.max(least))
        .min_by(|a, b| calls(*a).total_cmp(&calls(*b)).then(a.cmp(b)))
        .unwrap_or(least);
    let span = (end - lo).max(1);
    let slices = slices.min(span);
    // Even cuts: slice k is [lo + span·k/n, lo + span·(k+1)/n).
    (0..slices)
        .map(|k| (lo + span * k / slices, lo + span * (k + 1) / slices))
        .filter(|(s, e)| s < e)
        .collect()
}

/// Refuses filters the object's list endpoint does not take, empty values
/// and repeats, naming `source.filters.NAME`.
fn check_filters(object: StripeObject, filters: &[(String, String)]) -> Result<(), ConnectorError> {
    let allowed = object.list_filters();
    let mut seen = HashSet::new();
    for (name, value) in filters {
        if !allowed.contains(&name.as_str()) {
            let hint = if allowed.is_empty() {
                format!(
                    "Stripe {} takes none here; remove source.filters",
                    object.path()
                )
            } else {
                format!("use one of: {}", allowed.join(", "))
            };
            return Err(ConnectorError::Config(format!(
                "source.filters.{name}: Stripe {} has no list filter `{name}` that recon sends; {hint}",
                object.path()
            )));
        }
        if value.trim().is_empty() {
            return Err(ConnectorError::Config(format!(
                "source.filters.{name} is empty; give the value to filter on (e.g. {name} = \"{}\") or remove it",
                match name.as_str() {
                    "type" => "charge",
                    "currency" => "usd",
                    "payout" => "po_…",
                    "status" => "paid",
                    "destination" => "ba_…",
                    _ => "ch_…",
                }
            )));
        }
        if !seen.insert(name.as_str()) {
            return Err(ConnectorError::Config(format!(
                "source.filters.{name} is given twice; keep one"
            )));
        }
    }
    Ok(())
}

/// Which setting holds the key, for 401 messages.
const KEY_HINT: &str =
    "check the job's source.api_key (a secret key sk_… or a restricted key rk_… with read access)";

fn http_error(e: HttpError) -> ConnectorError {
    match e {
        HttpError::Unauthorized { .. } => ConnectorError::Config(format!("{e}; {KEY_HINT}")),
        other => ConnectorError::Unreachable(other.to_string()),
    }
}

impl StripeSource {
    /// Builds the client; no request is sent yet.
    pub fn new(cfg: StripeConfig, schema: &Schema) -> Result<StripeSource, ConnectorError> {
        check_filters(cfg.object, &cfg.filters)?;
        if !(cfg.api_key.expose().starts_with("sk_") || cfg.api_key.expose().starts_with("rk_")) {
            return Err(ConnectorError::Config(format!(
                "the Stripe API key does not look like a secret key (sk_…) or restricted key (rk_…); {KEY_HINT}"
            )));
        }
        let rate = cfg
            .requests_per_second
            .unwrap_or_else(|| cfg.default_rate())
            .max(1);
        let mut policy = HttpPolicy::new(rate);
        // Stripe documents its limits as requests per second
        // (https://docs.stripe.com/rate-limits) and says nothing of bursts,
        // so recon reads them literally: no burst (any one-second window
        // holds at most the limit), and paced so that what it sends over
        // 1.02 s fits one second, because Stripe counts on its own clock
        // what the network delivers bunched (a request may arrive 20 ms
        // early without any second ever holding more than the limit): 2%
        // of the limit unused whatever the limit, where a 6% headroom left
        // 1.5 requests a second unused at 25/s and 6 at 100/s.
        policy.burst = 1;
        policy.jitter = JITTER;
        if let Some(t) = cfg.timeout_secs {
            policy.timeout = std::time::Duration::from_secs(t);
        }
        if let Some(a) = cfg.max_attempts {
            policy.max_attempts = a.max(1);
        }
        if let Some(p) = cfg.rate_limit_patience {
            policy.rate_limit_patience = p;
        }
        let pace = policy.pace();
        let client = HttpClient::new(
            STRIPE,
            policy,
            vec![(
                "Authorization".into(),
                Secret::new(format!("Bearer {}", cfg.api_key.expose())),
            )],
            vec![
                ("Stripe-Version".into(), cfg.api_version.clone()),
                (
                    "User-Agent".into(),
                    format!("recon/{}", env!("CARGO_PKG_VERSION")),
                ),
            ],
        )
        .map_err(http_error)?;
        let paths = FieldPaths {
            fields: schema
                .fields
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    cfg.field_paths
                        .get(i)
                        .cloned()
                        .flatten()
                        .unwrap_or_else(|| cfg.object.default_path(&f.name))
                })
                .collect(),
            currency: cfg
                .currency_path
                .clone()
                .unwrap_or_else(|| "currency".into()),
        };
        Ok(StripeSource {
            client,
            cfg,
            schema: schema.clone(),
            paths,
            pace,
            members: Arc::new(OnceCell::new()),
        })
    }

    /// Requests sent, retried and throttled so far.
    pub fn stats(&self) -> recon_core::http::HttpStats {
        self.client.stats()
    }

    fn url(&self) -> String {
        format!(
            "{}{}",
            self.cfg.base_url.trim_end_matches('/'),
            self.cfg.object.path()
        )
    }

    /// Whether lookups must search the filtered list (a `payout` or
    /// `source` filter).
    fn needs_members(&self) -> bool {
        self.cfg
            .filters
            .iter()
            .any(|(k, _)| matches!(k.as_str(), "payout" | "source"))
    }

    /// Whether `object` passes every filter it can be judged on by itself.
    fn passes_filters(&self, object: &serde_json::Value) -> bool {
        self.cfg
            .filters
            .iter()
            .all(|(k, v)| passes_filter(object, k, v) != Some(false))
    }

    /// The filtered list, whole (no `created` bound), by ID; listed once.
    async fn members(&self) -> Result<&HashMap<String, serde_json::Value>, ConnectorError> {
        self.members
            .get_or_try_init(|| async {
                let mut all = HashMap::new();
                let mut cursor: Option<String> = None;
                loop {
                    let mut q = vec![("limit".to_string(), "100".to_string())];
                    q.extend(self.cfg.filters.iter().cloned());
                    if let Some(c) = &cursor {
                        q.push(("starting_after".into(), c.clone()));
                    }
                    let (page, _) = self
                        .client
                        .get_json::<ListPage>(&self.url(), &q)
                        .await
                        .map_err(http_error)?;
                    let mut last = None;
                    for o in page.data {
                        let (id, _) = created_of(self.cfg.object, &o)?;
                        last = Some(id.clone());
                        all.insert(id, o);
                    }
                    match (page.has_more, last) {
                        (true, Some(l)) => cursor = Some(l),
                        _ => break,
                    }
                }
                Ok(all)
            })
            .await
    }

    /// One list page of `[gte, lt)`, after `cursor`.
    async fn list_page(
        &self,
        gte: i64,
        lt: i64,
        cursor: Option<&str>,
    ) -> Result<ListPage, ConnectorError> {
        let mut q = vec![
            ("limit".to_string(), "100".to_string()),
            ("created[gte]".to_string(), gte.to_string()),
            ("created[lt]".to_string(), lt.to_string()),
        ];
        q.extend(self.cfg.filters.iter().cloned());
        if let Some(c) = cursor {
            q.push(("starting_after".into(), c.to_string()));
        }
        let (page, _meta) = self
            .client
            .get_json::<ListPage>(&self.url(), &q)
            .await
            .map_err(http_error)?;
        Ok(page)
    }

    /// Every object of `[gte, lt)`, page by page, following the cursor.
    fn walk(
        &self,
        gte: i64,
        lt: i64,
    ) -> BoxStream<'_, Result<Vec<serde_json::Value>, ConnectorError>> {
        let state: Option<Option<String>> = Some(None);
        Box::pin(stream::try_unfold(state, move |state| async move {
            let Some(cursor) = state else { return Ok(None) };
            let page = self.list_page(gte, lt, cursor.as_deref()).await?;
            let next = if page.has_more {
                let last = page
                    .data
                    .last()
                    .map(|o| created_of(self.cfg.object, o))
                    .transpose()?;
                last.map(|(id, _)| Some(id))
            } else {
                None
            };
            Ok(Some((page.data, next)))
        }))
    }

    fn convert(
        &self,
        objects: Vec<serde_json::Value>,
        window: Window,
        seen: &Mutex<HashSet<String>>,
    ) -> Result<Page, ConnectorError> {
        let (lo, hi) = (window.start.as_second(), window.end.as_second());
        let mut records: Vec<Record> = Vec::with_capacity(objects.len());
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        for o in &objects {
            let (id, created) = created_of(self.cfg.object, o)?;
            // Never count what lies outside the window, whatever a server returns.
            if created < lo || created >= hi {
                continue;
            }
            if !seen.insert(id) {
                continue;
            }
            records.push(to_record(self.cfg.object, &self.schema, &self.paths, o)?);
        }
        Ok(Page::new(records))
    }
}

#[async_trait::async_trait]
impl Source for StripeSource {
    /// `Stripe /v1/{object} at {base_url}`, with the job's list filters
    /// (`Stripe /v1/payouts?status=failed at …`).
    fn describe(&self) -> String {
        let filters: Vec<String> = self
            .cfg
            .filters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let query = if filters.is_empty() {
            String::new()
        } else {
            format!("?{}", filters.join("&"))
        };
        format!(
            "Stripe {}{query} at {}",
            self.cfg.object.path(),
            self.cfg.base_url
        )
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let (lo, hi) = (window.start.as_second(), window.end.as_second());
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let first = {
            let seen = seen.clone();
            async move {
                let started = std::time::Instant::now();
                let page = self.list_page(lo, hi, None).await?;
                let latency = started.elapsed().as_secs_f64();
                let oldest = page
                    .data
                    .last()
                    .map(|o| created_of(self.cfg.object, o))
                    .transpose()?
                    .map(|(_, c)| c);
                let rest = match (page.has_more, oldest) {
                    (true, Some(oldest)) if oldest >= lo => {
                        // The first page spans [oldest, hi): estimate how many
                        // pages the rest [lo, oldest] holds, and slice for it.
                        // Slices cover [lo, oldest + 1): objects created at
                        // `oldest` may be split across the first page and the
                        // last slice; de-duplication by ID merges them.
                        let span = (hi - oldest).max(1);
                        let remaining = (oldest - lo + 1).max(1);
                        let per_page = page.data.len().max(1) as f64 / 100.0;
                        let pages = remaining as f64 / span as f64 * per_page;
                        plan_slices(
                            lo,
                            oldest + 1,
                            pages.max(1.0),
                            self.pace,
                            latency,
                            self.cfg.concurrency.max(1) * 8,
                        )
                    }
                    _ => Vec::new(),
                };
                let page = self.convert(page.data, window, &seen)?;
                Ok::<_, ConnectorError>((page, rest))
            }
        };
        let concurrency = self.cfg.concurrency.max(1);
        Box::pin(
            stream::once(first)
                .map_ok(move |(page, rest)| {
                    let seen = seen.clone();
                    let slices = stream::iter(rest)
                        .map(move |(s, e)| self.walk(s, e))
                        .flatten_unordered(concurrency)
                        .and_then(move |objects| {
                            let seen = seen.clone();
                            async move { self.convert(objects, window, &seen) }
                        });
                    stream::once(async move { Ok(page) }).chain(slices)
                })
                .try_flatten(),
        )
    }

    /// Each key by `GET /v1/{object}/{id}` (404 or `deleted: true` is
    /// missing), kept only if it passes the job's list filters: `type`,
    /// `currency`, `status`, `destination` judged on the object; with a
    /// `payout` or `source` filter, which the object cannot show, the keys
    /// are looked up in the filtered list itself, listed once (all pages,
    /// any `created`).
    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        if self.needs_members() {
            let members = self.members().await?;
            return keys
                .iter()
                .filter_map(|k| members.get(k))
                .filter(|v| self.passes_filters(v))
                .map(|v| to_record(self.cfg.object, &self.schema, &self.paths, v))
                .collect();
        }
        let concurrency = self.cfg.concurrency.max(1);
        let found: Vec<Option<Record>> = stream::iter(keys.iter().cloned())
            .map(|key| async move {
                let url = format!("{}/{}", self.url(), key);
                match self.client.get_json::<serde_json::Value>(&url, &[]).await {
                    Ok((v, _)) => {
                        // A deleted object (customers) is missing for recon.
                        if v.get("deleted").and_then(|d| d.as_bool()) == Some(true) {
                            return Ok(None);
                        }
                        // One the job's filters leave out is not the job's.
                        if !self.passes_filters(&v) {
                            return Ok(None);
                        }
                        to_record(self.cfg.object, &self.schema, &self.paths, &v).map(Some)
                    }
                    Err(HttpError::Status { status: 404, .. }) => Ok(None),
                    Err(e) => Err(http_error(e)),
                }
            })
            .buffer_unordered(concurrency)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Each object as `GET /v1/{object}/{id}` returns it
    /// (<https://docs.stripe.com/api/charges/retrieve>), for webhook replay,
    /// with every `client_secret` (PaymentIntents, SetupIntents) replaced by
    /// `"***"`: Stripe says it must not be stored, logged or shown to anyone
    /// but the customer
    /// (<https://docs.stripe.com/api/payment_intents/object#payment_intent_object-client_secret>),
    /// and the body is written to plan.jsonl.
    async fn raw_json(
        &self,
        keys: &[String],
    ) -> Result<Option<Vec<(String, String)>>, ConnectorError> {
        let concurrency = self.cfg.concurrency.max(1);
        let found: Vec<Option<(String, String)>> = stream::iter(keys.iter().cloned())
            .map(|key| async move {
                let url = format!("{}/{}", self.url(), key);
                match self.client.get_json::<serde_json::Value>(&url, &[]).await {
                    Ok((mut v, _)) => {
                        mask_client_secrets(&mut v);
                        Ok(Some((key, v.to_string())))
                    }
                    Err(HttpError::Status { status: 404, .. }) => Ok(None),
                    Err(e) => Err(http_error(e)),
                }
            })
            .buffer_unordered(concurrency)
            .try_collect()
            .await?;
        Ok(Some(found.into_iter().flatten().collect()))
    }

    /// `GET /v1/{object}?limit=1`: one list call, the cheapest that proves
    /// the key may read the object. Stripe sends no rate-limit headers; its
    /// limits are documented (https://docs.stripe.com/rate-limits): 100
    /// read requests per second in live mode, 25 in test mode.
    async fn probe(&self) -> Result<recon_core::Probe, ConnectorError> {
        // With the job's filters, so that one Stripe refuses shows now.
        let mut q = vec![("limit".to_string(), "1".to_string())];
        q.extend(self.cfg.filters.iter().cloned());
        self.client
            .get_json::<serde_json::Value>(&self.url(), &q)
            .await
            .map_err(http_error)?;
        let mode = if self.cfg.api_key.expose().contains("_test_") {
            "test"
        } else {
            "live"
        };
        let limit = match self.cfg.requests_per_second {
            Some(r) => format!("{r} req/s (requests_per_second)"),
            None => format!(
                "{} req/s (Stripe's documented {mode}-mode limit)",
                self.cfg.default_rate()
            ),
        };
        Ok(recon_core::Probe::reached(self.describe())
            .authenticated()
            .limit(limit))
    }
}

/// Every string `client_secret` in `v` (at any depth) replaced by `"***"`,
/// its value registered with [`recon_core::scrub`] in case it shows
/// elsewhere.
pub fn mask_client_secrets(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if k == "client_secret" {
                    if let serde_json::Value::String(secret) = child {
                        recon_core::register_secret(secret);
                        *child = serde_json::Value::String("***".into());
                    }
                } else {
                    mask_client_secrets(child);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(mask_client_secrets),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::plan_slices;

    #[test]
    fn slices_hold_about_twenty_pages_but_keep_the_limiter_busy() {
        // 500 pages at 25/s and 100 ms: 25 slices of 20 pages, covering
        // [0, 50_000) without gaps or overlaps.
        let s = plan_slices(0, 50_000, 500.0, 23.5, 0.1, 256);
        assert_eq!(s.len(), 25);
        assert_eq!(s[0].0, 0);
        assert_eq!(s.last().unwrap().1, 50_000);
        assert!(s.windows(2).all(|w| w[0].1 == w[1].0));
        // At 94/s and 150 ms, 29 requests should be in flight: at least 29
        // slices, and of those the fewest that cost the fewest calls: 50
        // of 10 pages (29 slices of 17.2 pages would cost 522 calls).
        assert_eq!(plan_slices(0, 50_000, 500.0, 94.0, 0.15, 256).len(), 50);
        // 199 pages at 49/s and 104 ms: 11 would do, 20 cost 200 calls.
        assert_eq!(plan_slices(0, 50_000, 199.0, 49.02, 0.104, 256).len(), 20);
        // Never more slices than pages, seconds, or the cap.
        assert_eq!(plan_slices(0, 50_000, 3.0, 94.0, 0.15, 256).len(), 3);
        assert_eq!(plan_slices(0, 2, 300.0, 94.0, 0.15, 256).len(), 2);
        assert_eq!(plan_slices(0, 50_000, 1e6, 94.0, 0.15, 256).len(), 256);
    }
}
