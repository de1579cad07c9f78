//! `backfill.via = "webhook"`: each gap is replayed to the user's own
//! endpoint (their webhook handler, a Zapier/Make/n8n catch hook) as a JSON
//! POST, so that the handler runs its whole creation process again (the CRM
//! record, the invoice, the receipt email) instead of recon writing the row
//! alone.
//!
//! - **Settings** ([`WebhookConfig`], the `[jobs.NAME.backfill.webhook]`
//!   table): `url`, `headers` (values take `${ENV}`), `envelope`
//!   (`none`, `stripe`, `shopify`), `event_type`, `signing_secret`,
//!   `rate_limit` (`5/s` by default), `concurrency`, `timeout`,
//!   `verify_after`. Resolved and checked by [`resolve`].
//! - **Idempotency key** ([`idempotency_key`]): `recon-` followed by the
//!   lower-case hex SHA-256 of `job NUL external_id NUL identity`, where the
//!   identity is the record's time field (`created`) as RFC 3339 UTC text
//!   (empty when the job has none). It depends on nothing else (no clock,
//!   no randomness, no run id), so a retry, a rerun after a crash and
//!   `recon apply --plan` send the same key for the same record, and a
//!   handler that deduplicates by `Idempotency-Key` does the work once. A
//!   source record replaced by another under the same ID (a different
//!   `created`) gets another key.
//! - **Body** ([`body_object`]): the source record as the source API
//!   returned it when the source can fetch it ([`recon_core::Source::raw_json`];
//!   Stripe: `GET /v1/charges/{id}`), else the typed record rendered as
//!   JSON under the source's own names (its field map), with `id` the
//!   external ID. Wrapped by [`Envelope`].
//! - **Signature** ([`signature`]): with `signing_secret`, a header
//!   `Recon-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
//!   "<t>.<body>")>`, Stripe's scheme
//!   (<https://docs.stripe.com/webhooks#verify-manually>); computed per
//!   attempt (a fresh `t`, the same body).
//! - **Delivery** ([`Sender`]): the shared HTTP policy (`recon_core::http`)
//!   at the endpoint's own rate limit: 429, 5xx and timeouts are retried with
//!   the same key; 2xx is delivered; 409 is "already done" (never retried);
//!   another 4xx fails the item with the first 200 bytes of the answer.

pub mod receiver;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use recon_core::http::{HttpClient, HttpError, HttpPolicy, Method, Provider, ProviderError};
use recon_core::{format_timestamp, lower_hex, Delivery, Record, Schema, Secret, Signed, Value};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "Recon-Signature";

/// The header carrying the idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// Headers recon sets itself; a configured header may not replace them,
/// nor those an envelope reserves ([`recon_core::WebhookEnvelope::reserved_headers`]).
const RESERVED: [&str; 3] = [IDEMPOTENCY_HEADER, SIGNATURE_HEADER, "Content-Type"];

/// Whether a configured header may not be set: recon or an envelope sets it.
fn reserved(header: &str) -> bool {
    let envelopes = Envelope::ALL.iter().filter_map(|e| e.provider());
    RESERVED
        .iter()
        .copied()
        .chain(envelopes.flat_map(|e| e.reserved_headers().iter().copied()))
        .any(|r| r.eq_ignore_ascii_case(header))
}

/// The default rate limit: conservative, a handler is often a small service.
const DEFAULT_RATE: u32 = 5;

/// The default wait before delivered items are looked up in the target.
const DEFAULT_VERIFY_AFTER: &str = "2m";

/// The default per-request timeout.
const DEFAULT_TIMEOUT: &str = "30s";

/// The event type of a job with `envelope = "none"` and no `event_type`.
const DEFAULT_EVENT_TYPE: &str = "charge.succeeded";

/// The default number of deliveries in flight (under the rate limit).
const DEFAULT_CONCURRENCY: usize = 8;

pub use crate::registry::Envelope;

/// A rate limit as written: `5` (per second), `"5/s"` or `"300/m"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RateLimitSetting {
    /// Requests per second.
    PerSecond(u32),
    /// `N/s` or `N/m`.
    Text(String),
}

/// `[jobs.NAME.backfill.webhook]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Where each gap is POSTed (`https://…`; `${ENV}` allowed).
    pub url: Secret,
    /// Extra headers; values take `${ENV}` and are masked in plans when
    /// they came from the environment or the name looks secret.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// `none` (default), `stripe` or `shopify`.
    #[serde(default)]
    pub envelope: Envelope,
    /// The Stripe event `type` (default `charge.succeeded`) or the Shopify
    /// topic (default `orders/create`).
    pub event_type: Option<String>,
    /// Signs every delivery (HMAC-SHA256; `${ENV}` allowed).
    pub signing_secret: Option<Secret>,
    /// The endpoint's rate limit: `5/s` (default), `100/s`, `300/m`.
    pub rate_limit: Option<RateLimitSetting>,
    /// Deliveries in flight at once, under the rate limit (default 8).
    pub concurrency: Option<usize>,
    /// Per-request timeout (default `30s`); a timeout is retried with the
    /// same key.
    pub timeout: Option<String>,
    /// How long after delivering to look the records up in the target
    /// (default `2m`; `0s` checks at once).
    pub verify_after: Option<String>,
}

/// A configured header, resolved.
#[derive(Clone, Debug)]
pub struct Header {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: Secret,
    /// Shown as `***` in plans (from `${ENV}`, or a secret-looking name).
    pub masked: bool,
}

/// The webhook route of a job, resolved and checked.
#[derive(Clone, Debug)]
pub struct Webhook {
    /// The endpoint.
    pub url: Secret,
    /// Configured headers.
    pub headers: Vec<Header>,
    /// The wrapping.
    pub envelope: Envelope,
    /// Event type or topic.
    pub event_type: String,
    /// The signing secret.
    pub signing_secret: Option<Secret>,
    /// Rate, timeout and retries.
    pub policy: HttpPolicy,
    /// Deliveries in flight.
    pub concurrency: usize,
    /// Wait before verification.
    pub verify_after: Duration,
}

fn secret_looking(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "auth",
        "token",
        "key",
        "secret",
        "cookie",
        "password",
        "signature",
    ]
    .iter()
    .any(|s| n.contains(s))
}

fn duration(name: &str, setting: &str, text: &str) -> Result<Duration> {
    let d = recon_core::parse::duration(text).map_err(|e| {
        anyhow!(
            "job `{name}`: backfill.webhook.{setting} = {text:?}: {} ({}); write a duration such as \"30s\" or \"2m\"",
            e.text,
            e.reason
        )
    })?;
    d.try_into()
        .map_err(|_| anyhow!("job `{name}`: backfill.webhook.{setting} must not be negative"))
}

/// `5/s`, `300/m` or `5`: (requests, interval).
fn rate(name: &str, setting: Option<&RateLimitSetting>) -> Result<(u32, Duration)> {
    let bad = |t: &str| {
        anyhow!(
            "job `{name}`: backfill.webhook.rate_limit = {t:?} is not a rate; write \"5/s\", \"100/s\" or \"300/m\" (a whole number of at least 1 per second or minute)"
        )
    };
    let (n, interval) = match setting {
        None => (DEFAULT_RATE, Duration::from_secs(1)),
        Some(RateLimitSetting::PerSecond(n)) => (*n, Duration::from_secs(1)),
        Some(RateLimitSetting::Text(t)) => {
            let (n, unit) = t.trim().split_once('/').ok_or_else(|| bad(t))?;
            let n: u32 = n.trim().parse().map_err(|_| bad(t))?;
            let interval = match unit.trim() {
                "s" | "sec" | "second" => Duration::from_secs(1),
                "m" | "min" | "minute" => Duration::from_secs(60),
                _ => return Err(bad(t)),
            };
            (n, interval)
        }
    };
    if n == 0 {
        return Err(bad(&n.to_string()));
    }
    Ok((n, interval))
}

/// The webhook route of job `name`, or `None` when it backfills through
/// its target. Checks that `via` and the table agree, expands `${ENV}` and
/// registers every secret for scrubbing.
pub fn resolve(
    name: &str,
    via: crate::config::BackfillVia,
    mode: crate::config::BackfillMode,
    cfg: Option<&WebhookConfig>,
) -> Result<Option<Webhook>> {
    use crate::config::{BackfillMode, BackfillVia};
    let cfg = match (via, cfg) {
        (BackfillVia::Target, None) => return Ok(None),
        (BackfillVia::Target, Some(_)) => bail!(
            "job `{name}`: [jobs.{name}.backfill.webhook] is set but backfill.via is \"target\" (the default); \
             set backfill.via = \"webhook\" to replay gaps to that endpoint, or remove the table"
        ),
        (BackfillVia::Webhook, None) => bail!(
            "job `{name}`: backfill.via = \"webhook\" needs a [jobs.{name}.backfill.webhook] table with at least \
             url = \"https://…\" (the endpoint that creates the records)"
        ),
        (BackfillVia::Webhook, Some(c)) => c,
    };
    if mode == BackfillMode::Upsert {
        bail!(
            "job `{name}`: backfill.via = \"webhook\" replays the creation of missing records (gaps) and cannot \
             repair mismatches; set backfill.mode = \"insert\" (or \"off\")"
        );
    }
    let expand = |value: &str, setting: &str| expand_setting(name, value, setting);
    let url = expand(cfg.url.expose(), "url")?;
    register_url_path(&url);
    if !(url.starts_with("https://") || url.starts_with("http://")) || url.len() < 10 {
        bail!(
            "job `{name}`: backfill.webhook.url `{}` is not an http(s) URL; write the endpoint as https://host/path",
            shown_url(&url)
        );
    }
    let headers = resolve_headers(name, cfg)?;
    let signing_secret = match &cfg.signing_secret {
        Some(s) => {
            let v = expand(s.expose(), "signing_secret")?;
            if v.is_empty() {
                bail!("job `{name}`: backfill.webhook.signing_secret is empty; set the shared secret, e.g. \"${{WEBHOOK_SECRET}}\"");
            }
            recon_core::register_secret(&v);
            Some(Secret::new(v))
        }
        None => None,
    };
    let policy = resolve_policy(name, cfg)?;
    let verify_after = duration(
        name,
        "verify_after",
        cfg.verify_after.as_deref().unwrap_or(DEFAULT_VERIFY_AFTER),
    )?;
    let concurrency = cfg.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    if !(1..=256).contains(&concurrency) {
        bail!(
            "job `{name}`: backfill.webhook.concurrency must be from 1 to 256, not {concurrency}"
        );
    }
    let event_type = cfg.event_type.clone().unwrap_or_else(|| {
        let provider = cfg.envelope.provider();
        provider
            .map_or(DEFAULT_EVENT_TYPE, |e| e.default_event_type())
            .to_string()
    });
    Ok(Some(Webhook {
        url: Secret::new(url),
        headers,
        envelope: cfg.envelope,
        event_type,
        signing_secret,
        policy,
        concurrency,
        verify_after,
    }))
}

/// `${ENV}` in a webhook setting expanded, naming the setting.
fn expand_setting(name: &str, value: &str, setting: &str) -> Result<String> {
    crate::config::expand_env(value, &format!("job `{name}` backfill.webhook.{setting}"))
}

/// The configured headers, checked (not reserved, valid names, one-line
/// values) and expanded; those from the environment or with secret-looking
/// names are masked in plans and scrubbed.
fn resolve_headers(name: &str, cfg: &WebhookConfig) -> Result<Vec<Header>> {
    let expand = |value: &str, setting: &str| expand_setting(name, value, setting);
    let mut headers = Vec::new();
    for (h, value) in &cfg.headers {
        if reserved(h) {
            bail!(
                "job `{name}`: backfill.webhook.headers sets `{h}`, which recon sets itself on every delivery; remove it"
            );
        }
        let valid = !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b));
        if !valid {
            bail!("job `{name}`: backfill.webhook.headers: `{h}` is not a valid header name");
        }
        let from_env = value.expose().contains("${");
        let expanded = expand(value.expose(), &format!("headers.{h}"))?;
        if expanded
            .bytes()
            .any(|b| (b < 0x20 && b != b'\t') || b == 0x7f)
        {
            bail!("job `{name}`: backfill.webhook.headers.{h}: the value holds a control character (a line break?); header values are one line");
        }
        let masked = from_env || secret_looking(h);
        if masked {
            recon_core::register_secret(&expanded);
        }
        headers.push(Header {
            name: h.clone(),
            value: Secret::new(expanded),
            masked,
        });
    }
    Ok(headers)
}

/// The endpoint's HTTP policy: its rate limit and timeout, no redirects.
fn resolve_policy(name: &str, cfg: &WebhookConfig) -> Result<HttpPolicy> {
    let (n, interval) = rate(name, cfg.rate_limit.as_ref())?;
    let mut policy = HttpPolicy::new(n);
    policy.interval = interval;
    // A redirected POST would arrive as a GET without its body (301-303)
    // or carry the headers and signature to another host: a 3xx fails the
    // item, naming where it pointed.
    policy.follow_redirects = false;
    policy.timeout = duration(
        name,
        "timeout",
        cfg.timeout.as_deref().unwrap_or(DEFAULT_TIMEOUT),
    )?;
    if policy.timeout.is_zero() {
        bail!("job `{name}`: backfill.webhook.timeout must be longer than 0s");
    }
    Ok(policy)
}

/// Registers the path and query of a webhook URL with [`recon_core::scrub`]:
/// a catch-hook URL (Zapier, Make, n8n) carries its token in the path, so
/// an error or log line naming the path (`POST /hooks/catch/…`) or a server
/// echoing a segment must not show it. Registered: the path with and
/// without the query, the query, their percent-decoded forms, and each
/// token-like path segment or query value (8 characters or more with a
/// digit).
fn register_url_path(url: &str) {
    let Ok(parsed) = url::Url::parse(url.trim()) else {
        return;
    };
    let path = parsed.path();
    let query = parsed.query().unwrap_or("");
    let mut parts: Vec<String> = Vec::new();
    if path != "/" {
        parts.push(path.to_string());
        parts.push(path.trim_end_matches('/').to_string());
    }
    if !query.is_empty() {
        parts.push(format!("{path}?{query}"));
        parts.push(query.to_string());
    }
    let token_like = |s: &str| s.len() >= 8 && s.bytes().any(|b| b.is_ascii_digit());
    parts.extend(
        path.split('/')
            .filter(|s| token_like(s))
            .map(str::to_string),
    );
    parts.extend(
        query
            .split('&')
            .filter_map(|kv| kv.split_once('=').map(|(_, v)| v))
            .filter(|v| token_like(v))
            .map(str::to_string),
    );
    for p in parts {
        let decoded = percent_decode(&p);
        recon_core::register_secret(&p);
        recon_core::register_secret(&decoded);
    }
}

/// `%XX` escapes decoded (invalid ones kept as written), lossy UTF-8.
fn percent_decode(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A webhook URL as shown anywhere (plans, summary, terminal, errors):
/// `scheme://host[:port]/***`; the path and query may hold the token.
pub fn shown_url(url: &str) -> String {
    recon_core::redact_url_path(url)
}

/// The lower-case hex SHA-256 of the full URL: how a plan names its
/// endpoint without showing it, so that `recon apply` can tell the same
/// endpoint from another one behind the same host.
pub fn url_digest(url: &str) -> String {
    lower_hex(&Sha256::digest(url.as_bytes()))
}

/// The identity of a source record beside its external ID: its time field
/// (`created`) as RFC 3339 UTC, or empty when the job has none.
pub fn identity(record: &Record, time_field: Option<usize>) -> String {
    match time_field.and_then(|i| record.values.get(i)) {
        Some(Value::Timestamp(t)) => format_timestamp(*t),
        _ => String::new(),
    }
}

/// The `Idempotency-Key` of a record: `recon-` + hex SHA-256 of
/// `job NUL external_id NUL identity` (see the module docs). Never random.
pub fn idempotency_key(job: &str, external_id: &str, identity: &str) -> String {
    let mut h = Sha256::new();
    h.update(job.as_bytes());
    h.update([0]);
    h.update(external_id.as_bytes());
    h.update([0]);
    h.update(identity.as_bytes());
    format!("recon-{}", lower_hex(&h.finalize()))
}

/// `t=<t>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`: Stripe's signature
/// scheme (<https://docs.stripe.com/webhooks#verify-manually>).
pub fn signature(secret: &str, t: i64, body: &str) -> String {
    format!(
        "t={t},v1={}",
        lower_hex(&hmac_sha256(secret, format!("{t}.{body}").as_bytes()))
    )
}

fn hmac_sha256(secret: &str, message: &[u8]) -> Vec<u8> {
    use hmac::{Hmac, Mac};
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// The typed record as JSON under the source's own names: `id` is the
/// external ID; money is integer minor units (with its currency under
/// `currency` when the job has no currency field); timestamps RFC 3339.
/// Dotted names (`billing_details.email`) become nested objects.
pub fn render_record(
    record: &Record,
    schema: &Schema,
    names: &BTreeMap<String, String>,
) -> serde_json::Value {
    let mut obj = serde_json::Map::new();
    obj.insert("id".into(), serde_json::Value::String(record.key.clone()));
    let has_currency = schema
        .fields
        .iter()
        .any(|f| f.kind == recon_core::FieldKind::Currency);
    for (f, v) in schema.fields.iter().zip(&record.values) {
        let name = names
            .get(&f.name)
            .cloned()
            .unwrap_or_else(|| f.name.clone());
        let json = match v {
            Value::Null => serde_json::Value::Null,
            Value::Money(m) => {
                if !has_currency {
                    obj.insert(
                        "currency".into(),
                        serde_json::Value::String(m.currency.code().to_ascii_lowercase()),
                    );
                }
                serde_json::Value::from(m.minor)
            }
            Value::Integer(n) => serde_json::Value::from(*n),
            Value::Currency(c) => serde_json::Value::String(c.code().to_ascii_lowercase()),
            Value::Timestamp(t) => serde_json::Value::String(format_timestamp(*t)),
            other => serde_json::Value::String(other.to_string()),
        };
        insert_path(&mut obj, &name, json);
    }
    serde_json::Value::Object(obj)
}

fn insert_path(
    obj: &mut serde_json::Map<String, serde_json::Value>,
    path: &str,
    v: serde_json::Value,
) {
    match path.split_once('.') {
        Some((head, rest)) if !head.is_empty() && !rest.is_empty() => {
            let child = obj
                .entry(head.to_string())
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
            if !child.is_object() {
                *child = serde_json::Value::Object(Default::default());
            }
            if let serde_json::Value::Object(m) = child {
                insert_path(m, rest, v);
            }
        }
        _ => {
            obj.insert(path.to_string(), v);
        }
    }
}

/// The body object of one delivery: `object` (the source record) wrapped
/// by the envelope ([`recon_core::WebhookEnvelope::wrap`]); `created` is the record's
/// time (Unix seconds).
pub fn body_object(
    envelope: Envelope,
    event_type: &str,
    key: &str,
    created: Option<i64>,
    object: serde_json::Value,
) -> serde_json::Value {
    let delivery = Delivery {
        event_type,
        key,
        created,
    };
    match envelope.provider() {
        Some(e) => e.wrap(object, &delivery),
        None => object,
    }
}

/// One delivery, ready to send (or to show in a plan).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The record's external ID.
    pub external_id: String,
    /// Its `Idempotency-Key`.
    pub key: String,
    /// The exact body sent, JSON text.
    pub body: String,
}

/// What a plan line says would be sent (secrets masked as `***`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// `POST`.
    pub method: String,
    /// The endpoint as `scheme://host[:port]/***` (its path and query may
    /// be the token).
    pub url: String,
    /// The hex SHA-256 of the full endpoint URL, which `recon apply`
    /// compares with its configuration's.
    #[serde(default)]
    pub url_sha256: String,
    /// Every header recon sends, secrets as `***` (the signature is made at
    /// sending time: `t=<at send>,v1=***`).
    pub headers: BTreeMap<String, String>,
    /// The exact body.
    pub body: serde_json::Value,
}

impl Webhook {
    /// The headers of a delivery of `p` other than the signature, as
    /// (name, value, masked).
    fn headers_of(&self, p: &Prepared) -> Vec<(String, String, bool)> {
        let mut h = vec![
            (
                "Content-Type".to_string(),
                "application/json".to_string(),
                false,
            ),
            (IDEMPOTENCY_HEADER.to_string(), p.key.clone(), false),
        ];
        if let Some(e) = self.envelope.provider() {
            let delivery = Delivery {
                event_type: &self.event_type,
                key: &p.key,
                created: None,
            };
            let named = e.headers(&delivery).into_iter();
            h.extend(named.map(|(name, value)| (name.to_string(), value, false)));
        }
        for c in &self.headers {
            h.push((c.name.clone(), c.value.expose().to_string(), c.masked));
        }
        h
    }

    /// The plan's view of a delivery.
    pub fn plan_request(&self, p: &Prepared) -> PlanRequest {
        let mut headers: BTreeMap<String, String> = self
            .headers_of(p)
            .into_iter()
            .map(|(n, v, masked)| (n, if masked { "***".into() } else { v }))
            .collect();
        if self.signing_secret.is_some() {
            headers.insert(SIGNATURE_HEADER.into(), "t=<at send>,v1=***".into());
            if let Some(e) = self.envelope.provider() {
                for (name, masked) in e.planned_signature_headers() {
                    headers.insert(name.into(), masked.into());
                }
            }
        }
        PlanRequest {
            method: "POST".into(),
            url: shown_url(self.url.expose()),
            url_sha256: url_digest(self.url.expose()),
            headers,
            body: serde_json::from_str(&p.body).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// What one delivery came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// 2xx.
    Delivered(u16),
    /// 409: the handler had done it already.
    AlreadyDone,
    /// Another 4xx (401/403 included): the status and the first 200 bytes
    /// of the answer.
    Refused(u16, String),
    /// Retries exhausted (5xx, timeouts, connection errors) or rate limited
    /// past patience: the outcome is not known; the item stays planned and
    /// is sent again (same key) by the next run.
    Unsure(String),
}

/// The endpoint as a provider of the shared HTTP policy.
const ENDPOINT: Provider = Provider {
    error_body: first_200_bytes,
    ..Provider::new("webhook endpoint", "x-request-id")
};

/// The first 200 bytes of a refusal, as text.
fn first_200_bytes(body: &[u8]) -> Option<ProviderError> {
    let head = &body[..body.len().min(200)];
    let text = String::from_utf8_lossy(head).trim().to_string();
    (!text.is_empty()).then_some(ProviderError {
        message: Some(text),
        code: None,
        is_final: false,
    })
}

/// Sends deliveries under the shared HTTP policy.
#[derive(Clone)]
pub struct Sender {
    client: HttpClient,
    webhook: Webhook,
}

impl Sender {
    /// A sender for `webhook`.
    pub fn new(webhook: &Webhook) -> Result<Sender> {
        let client = HttpClient::new(ENDPOINT, webhook.policy.clone(), Vec::new(), Vec::new())
            .map_err(|e| anyhow!("backfill.webhook: {e}"))?;
        Ok(Sender {
            client,
            webhook: webhook.clone(),
        })
    }

    /// POSTs one delivery (retries included) and classifies the answer.
    pub async fn send(&self, p: &Prepared) -> Sent {
        let w = &self.webhook;
        let headers = w.headers_of(p);
        let build = |mut req: recon_core::http::RequestBuilder| {
            for (name, value, _) in &headers {
                req = req.header(name.as_str(), value.as_str());
            }
            if let Some(secret) = &w.signing_secret {
                // A fresh timestamp per attempt, as Stripe does; the body
                // (and so the key) never changes.
                let t = jiff::Timestamp::now().as_second();
                let sig = signature(secret.expose(), t, &p.body);
                req = req.header(SIGNATURE_HEADER, sig.clone());
                if let Some(e) = w.envelope.provider() {
                    let body_hmac = hmac_sha256(secret.expose(), p.body.as_bytes());
                    let signed = Signed {
                        recon: &sig,
                        body_hmac: &body_hmac,
                    };
                    for (name, value) in e.signature_headers(&signed) {
                        req = req.header(name, value);
                    }
                }
            }
            req.body(p.body.clone())
        };
        // Decided on the status alone: a 2xx whose body is not UTF-8 or is
        // cut short was accepted, and must not be sent again.
        match self
            .client
            .send_status(Method::POST, w.url.expose(), build)
            .await
        {
            Ok(meta) => Sent::Delivered(meta.status),
            Err(HttpError::Status { status: 409, .. }) => Sent::AlreadyDone,
            Err(HttpError::Status {
                status, message, ..
            })
            | Err(HttpError::Unauthorized {
                status, message, ..
            }) => Sent::Refused(status, recon_core::scrub(&message).into_owned()),
            Err(e) => Sent::Unsure(recon_core::scrub(&e.to_string()).into_owned()),
        }
    }

    /// Attempts and retries so far.
    pub fn stats(&self) -> recon_core::http::HttpStats {
        self.client.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_deterministic_and_depend_on_job_id_and_identity() {
        let k = idempotency_key("charges", "ch_1", "2026-11-28T10:00:00Z");
        assert_eq!(
            k,
            idempotency_key("charges", "ch_1", "2026-11-28T10:00:00Z")
        );
        assert!(k.starts_with("recon-") && k.len() == 6 + 64, "{k}");
        // Independently: sha256 of the documented bytes.
        let want = lower_hex(&Sha256::digest(b"charges\x00ch_1\x002026-11-28T10:00:00Z"));
        assert_eq!(k, format!("recon-{want}"));
        assert_ne!(
            k,
            idempotency_key("charges", "ch_2", "2026-11-28T10:00:00Z")
        );
        assert_ne!(k, idempotency_key("other", "ch_1", "2026-11-28T10:00:00Z"));
        assert_ne!(
            k,
            idempotency_key("charges", "ch_1", "2026-11-28T10:00:01Z")
        );
        // NUL separation: no two splits of the same text collide.
        assert_ne!(
            idempotency_key("a", "bc", ""),
            idempotency_key("ab", "c", "")
        );
    }

    #[test]
    fn signature_matches_stripes_documented_scheme() {
        // HMAC-SHA256 test vector (RFC 4231 case 2): key "Jefe".
        assert_eq!(
            lower_hex(&hmac_sha256("Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let s = signature("Jefe", 1_700_000_000, "{}");
        assert_eq!(
            s,
            format!(
                "t=1700000000,v1={}",
                lower_hex(&hmac_sha256("Jefe", b"1700000000.{}"))
            )
        );
    }

    #[test]
    fn recons_and_the_envelopes_reserved_headers_cannot_be_configured() {
        for h in [
            "Idempotency-Key",
            "recon-signature",
            "CONTENT-TYPE",
            "Stripe-Signature",
        ] {
            assert!(reserved(h), "{h}");
        }
        assert!(!reserved("X-Source"));
    }

    #[test]
    fn rates_parse_and_bad_ones_name_the_setting() {
        let r = |s: &str| rate("j", Some(&RateLimitSetting::Text(s.into())));
        assert_eq!(r("100/s").unwrap(), (100, Duration::from_secs(1)));
        assert_eq!(r("300/m").unwrap(), (300, Duration::from_secs(60)));
        assert_eq!(rate("j", None).unwrap(), (5, Duration::from_secs(1)));
        for bad in ["0/s", "fast", "5/h", "-1/s"] {
            let e = r(bad).unwrap_err().to_string();
            assert!(e.contains("backfill.webhook.rate_limit"), "{e}");
        }
    }

    #[test]
    fn plans_mask_secrets_and_shopify_gets_its_headers() {
        let cfg: WebhookConfig = toml::from_str(
            r#"
url = "https://hooks.example.com/orders?token=abcdef123456"
envelope = "shopify"
signing_secret = "shpss_0123456789"
headers = { Authorization = "Bearer literal-token-99", X-Plain = "visible" }
"#,
        )
        .unwrap();
        use crate::config::{BackfillMode, BackfillVia};
        let wh = resolve(
            "orders",
            BackfillVia::Webhook,
            BackfillMode::Insert,
            Some(&cfg),
        )
        .unwrap()
        .unwrap();
        assert_eq!(wh.policy.requests_per_second, 5);
        assert_eq!(wh.verify_after, Duration::from_secs(120));
        let key = idempotency_key("orders", "1001", "");
        let p = Prepared {
            external_id: "1001".into(),
            key: key.clone(),
            body: "{\"id\":1001}".into(),
        };
        let r = wh.plan_request(&p);
        assert_eq!(r.headers["X-Shopify-Topic"], "orders/create");
        assert_eq!(r.headers["X-Shopify-Webhook-Id"], key);
        assert_eq!(r.headers["X-Shopify-Hmac-Sha256"], "***");
        assert_eq!(r.headers["Authorization"], "***");
        assert_eq!(r.headers["X-Plain"], "visible");
        assert_eq!(r.headers[IDEMPOTENCY_HEADER], key);
        assert_eq!(r.body, serde_json::json!({"id": 1001}));
        let text = serde_json::to_string(&r).unwrap();
        for secret in ["abcdef123456", "literal-token-99", "shpss_0123456789"] {
            assert!(!text.contains(secret), "{text}");
        }
        // via and the table must agree; upsert cannot be replayed.
        let e = resolve(
            "orders",
            BackfillVia::Target,
            BackfillMode::Insert,
            Some(&cfg),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("set backfill.via = \"webhook\""), "{e}");
        let e = resolve(
            "orders",
            BackfillVia::Webhook,
            BackfillMode::Upsert,
            Some(&cfg),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("backfill.mode = \"insert\""), "{e}");
    }

    #[test]
    fn a_catch_hook_path_is_scrubbed_everywhere_and_shown_as_the_origin() {
        let url = "https://hooks.zapier.com/hooks/catch/9183/ab7Zk2q9%2Fx/?sig=Zz99yy88";
        register_url_path(url);
        assert_eq!(shown_url(url), "https://hooks.zapier.com/***");
        for text in [
            "POST /hooks/catch/9183/ab7Zk2q9%2Fx/ failed",
            "unknown hook ab7Zk2q9/x",
            "bad sig Zz99yy88",
        ] {
            let out = recon_core::scrub(text);
            for leak in ["ab7Zk2q9", "Zz99yy88", "catch/9183"] {
                assert!(!out.contains(leak), "{text} -> {out}");
            }
        }
        assert_eq!(url_digest(url), lower_hex(&Sha256::digest(url.as_bytes())));
        assert_eq!(percent_decode("a%2Fb%zz%4"), "a/b%zz%4");
    }

    #[test]
    fn envelopes_wrap_the_object() {
        let obj = serde_json::json!({"id": "ch_1", "object": "charge", "livemode": false});
        let key = idempotency_key("j", "ch_1", "");
        let e = body_object(
            Envelope::Stripe,
            "charge.succeeded",
            &key,
            Some(5),
            obj.clone(),
        );
        assert_eq!(e["object"], "event");
        assert_eq!(e["type"], "charge.succeeded");
        assert_eq!(e["data"]["object"], obj);
        assert_eq!(e["created"], 5);
        assert!(e["id"].as_str().unwrap().starts_with("evt_"));
        assert_eq!(
            e,
            body_object(
                Envelope::Stripe,
                "charge.succeeded",
                &key,
                Some(5),
                obj.clone()
            )
        );
        assert_eq!(
            body_object(Envelope::None, "x", &key, None, obj.clone()),
            obj
        );
    }
}
