//! The Salesforce client behind the `Source` and `Target` traits: its
//! config, the shared HTTP policy with Salesforce's error bodies and
//! `Sforce-Limit-Info`, and the describe every read and write is typed by.
//!
//! Every request goes through `recon_core::http` with the [`SALESFORCE`]
//! provider: its error-body hook reads Salesforce's JSON arrays
//! `[{"message", "errorCode", "fields"?}]` ("Status Codes and Error
//! Responses", REST API Developer Guide:
//! https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/errorcodes.htm)
//! into messages that start with the error code, and marks
//! `REQUEST_LIMIT_EXCEEDED` final; the auth hook is a [`RefreshableToken`]
//! (client credentials) or a static bearer token (see [`crate::auth`]).
//! Every successful response's `Sforce-Limit-Info` is noted (see
//! [`crate::limits`]).
//!
//! [`RefreshableToken`]: recon_core::http::RefreshableToken

use std::sync::Arc;
use std::time::Duration;

use recon_core::http::{
    default_error_body, HttpClient, HttpError, HttpPolicy, HttpStats, Method, Provider,
    ProviderError, RequestBuilder, ResponseMeta,
};
use recon_core::{ConnectorError, Currency, FieldKind, Schema, Secret};
use serde_json::Value as Json;
use tokio::sync::OnceCell;

use crate::auth::{bearer_auth, client_credentials};
use crate::describe::{FieldInfo, ObjectInfo};
use crate::limits::{parse_limit_info, ApiUsage, UsageTracker};
use crate::settings::{
    DEFAULT_API_VERSION, DEFAULT_BATCH_SIZE, DEFAULT_BULK_READ_THRESHOLD, DEFAULT_BULK_TIMEOUT,
    DEFAULT_BULK_WRITE_THRESHOLD, DEFAULT_DAILY_SHARE,
};

/// Salesforce's identity for the HTTP policy.
pub const SALESFORCE: Provider = Provider {
    error_body: salesforce_error_body,
    ..Provider::new("Salesforce", "X-Request-Id")
};

/// Salesforce's error body, a JSON array of `{"message", "errorCode",
/// "fields"?}` (bulk job errors: `{"errorCode", "message"}` alone). The
/// message starts with the error code (`REQUEST_LIMIT_EXCEEDED:
/// TotalRequests Limit exceeded.`), so every error recon shows names it,
/// 401 and 403 included; `REQUEST_LIMIT_EXCEEDED` is final. Other bodies
/// (OAuth's `{"error", "error_description"}`) are read the common way.
pub fn salesforce_error_body(body: &[u8]) -> Option<ProviderError> {
    let json: Json = serde_json::from_slice(body).ok()?;
    let first = match &json {
        Json::Array(items) => items.first()?,
        Json::Object(o) if o.contains_key("errorCode") => &json,
        _ => return default_error_body(body),
    };
    let code = first.get("errorCode").and_then(Json::as_str)?;
    let message = first.get("message").and_then(Json::as_str).unwrap_or("");
    let fields: Vec<&str> = first
        .get("fields")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(Json::as_str)
        .collect();
    let mut text = format!("{code}: {message}");
    if !fields.is_empty() {
        text.push_str(&format!(" (fields: {})", fields.join(", ")));
    }
    Some(ProviderError {
        message: Some(text),
        code: None,
        is_final: code == "REQUEST_LIMIT_EXCEEDED",
    })
}

/// How recon authenticates.
#[derive(Clone, Debug)]
pub enum SalesforceAuth {
    /// OAuth 2.0 client credentials against `token_url`.
    ClientCredentials {
        /// Consumer key.
        client_id: Secret,
        /// Consumer secret.
        client_secret: Secret,
        /// `{instance_url}/services/oauth2/token` by default.
        token_url: String,
    },
    /// A static access token (not refreshed).
    AccessToken(Secret),
}

/// Which sObject and fields hold a job's records.
#[derive(Clone, Debug)]
pub struct SalesforceConfig {
    /// `https://MyDomainName.my.salesforce.com`.
    pub instance_url: String,
    /// Client credentials or an access token.
    pub auth: SalesforceAuth,
    /// REST API version, `62.0`.
    pub api_version: String,
    /// The sObject's API name.
    pub object: String,
    /// The external ID field.
    pub external_id_field: String,
    /// Field API name per schema field.
    pub fields: Vec<String>,
    /// The currency field of a job with money (`CurrencyIsoCode`); used
    /// when the object has it.
    pub currency_field: Option<String>,
    /// A single-currency org's currency.
    pub currency: Option<Currency>,
    /// Datetime or date field windows filter on (`CreatedDate`).
    pub date_field: String,
    /// Above this many records in a window, read with Bulk API 2.0.
    pub bulk_read_threshold: u64,
    /// From this many records in a write call, write with Bulk API 2.0.
    pub bulk_write_threshold: usize,
    /// Records per write call of a backfill.
    pub batch_size: usize,
    /// Records per `/query` page (200..=2000).
    pub page_size: u32,
    /// Share of the remaining daily API calls a write may use.
    pub daily_share: f64,
    /// Requests per second at most.
    pub requests_per_second: u32,
    /// How long 429/5xx answers may hold the run without progress.
    pub rate_limit_patience: Duration,
    /// How long a Bulk API 2.0 job may take.
    pub bulk_timeout: Duration,
    /// First wait between polls of a bulk job (doubling up to 10 s).
    pub bulk_poll: Duration,
    /// Mapped fields never written (API names), see
    /// [`crate::SalesforceSettings::not_written`].
    pub not_written: Vec<String>,
}

impl SalesforceConfig {
    /// A config with the documented defaults.
    pub fn new(
        instance_url: &str,
        auth: SalesforceAuth,
        object: &str,
        external_id_field: &str,
        fields: Vec<String>,
    ) -> SalesforceConfig {
        SalesforceConfig {
            instance_url: instance_url.trim_end_matches('/').to_string(),
            auth,
            api_version: DEFAULT_API_VERSION.into(),
            object: object.to_string(),
            external_id_field: external_id_field.to_string(),
            fields,
            currency_field: None,
            currency: None,
            date_field: "CreatedDate".into(),
            bulk_read_threshold: DEFAULT_BULK_READ_THRESHOLD,
            bulk_write_threshold: DEFAULT_BULK_WRITE_THRESHOLD,
            batch_size: DEFAULT_BATCH_SIZE,
            page_size: 2000,
            daily_share: DEFAULT_DAILY_SHARE,
            requests_per_second: 20,
            rate_limit_patience: Duration::from_secs(15 * 60),
            bulk_timeout: DEFAULT_BULK_TIMEOUT,
            bulk_poll: Duration::from_millis(250),
            not_written: Vec::new(),
        }
    }
}

/// The describe, resolved against the job: each schema field's describe,
/// the key, date and currency fields, and the SELECT list.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// Per schema field.
    pub fields: Vec<FieldInfo>,
    /// The external ID field.
    pub key: FieldInfo,
    /// The window's field.
    pub date: FieldInfo,
    /// The currency field, when the job has money and the org has one.
    pub currency: Option<FieldInfo>,
    /// `Id`, the key, the date, the fields and the currency field, each
    /// once, as the org spells them.
    pub select: Vec<String>,
    /// The fields of `not_written`, lower case.
    pub not_written: Vec<String>,
}

impl Prepared {
    /// Whether writes send `f` (a mapped or the currency field): not a
    /// field the platform maintains, not listed in `not_written`.
    pub fn sends(&self, f: &FieldInfo) -> bool {
        !f.is_system() && !self.not_written.contains(&f.name.to_ascii_lowercase())
    }
}

/// A Salesforce sObject as a [`recon_core::Source`] and
/// [`recon_core::Target`].
#[derive(Clone)]
pub struct SalesforceObjects {
    pub(crate) http: HttpClient,
    pub(crate) cfg: Arc<SalesforceConfig>,
    pub(crate) schema: Schema,
    pub(crate) usage: UsageTracker,
    pub(crate) described: Arc<OnceCell<ObjectInfo>>,
    pub(crate) prepared: Arc<OnceCell<Prepared>>,
}

impl std::fmt::Debug for SalesforceObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SalesforceObjects")
            .field("object", &self.cfg.object)
            .field("external_id_field", &self.cfg.external_id_field)
            .finish_non_exhaustive()
    }
}

pub(crate) const AUTH_HINT: &str = "check the job's auth (client_id and client_secret of a connected or external client app with the client credentials flow enabled and a Run As user, or a valid access_token) and that the user has API access and permission on the object";

/// Maps a policy error to the connector's, saying what to do.
pub(crate) fn http_error(e: HttpError) -> ConnectorError {
    let text = e.to_string();
    match &e {
        HttpError::Unauthorized { status: 401, .. } => {
            ConnectorError::Config(format!("{text}; {AUTH_HINT}"))
        }
        // The token endpoint refused the client credentials.
        HttpError::Status {
            provider: "Salesforce OAuth",
            status: 400 | 401,
            ..
        } => ConnectorError::Config(format!("{text}; {AUTH_HINT}")),
        _ if text.contains("REQUEST_LIMIT_EXCEEDED") => ConnectorError::Unreachable(format!(
            "{text}; the org's API request limit is spent (it counts calls over the last 24 hours): recon stopped at once. Run again when the org's usage has fallen, or raise the limit"
        )),
        HttpError::Unauthorized { .. } => ConnectorError::Config(format!("{text}; {AUTH_HINT}")),
        _ => ConnectorError::Unreachable(text),
    }
}

/// As [`http_error`], but during a write: a call whose answer never came
/// (connection lost, timeouts, 5xx until the retries ran out) may or may
/// not have been committed.
pub(crate) fn write_error(e: HttpError) -> ConnectorError {
    match e {
        HttpError::RetriesExhausted { .. } => ConnectorError::ConnectionLost(e.to_string()),
        e => http_error(e),
    }
}

impl SalesforceObjects {
    /// Builds the client; no request is sent yet.
    pub fn new(
        cfg: SalesforceConfig,
        schema: &Schema,
    ) -> Result<SalesforceObjects, ConnectorError> {
        if cfg.fields.len() != schema.fields.len() {
            return Err(ConnectorError::Config(format!(
                "Salesforce {}: {} fields mapped for {} job fields",
                cfg.object,
                cfg.fields.len(),
                schema.fields.len()
            )));
        }
        let mut policy = HttpPolicy::new(cfg.requests_per_second.max(1));
        policy.burst = cfg.requests_per_second.clamp(1, 5);
        policy.rate_limit_patience = cfg.rate_limit_patience;
        policy.timeout = Duration::from_secs(120);
        let to_client = |e: HttpError| ConnectorError::Config(e.to_string());
        let auth = match &cfg.auth {
            SalesforceAuth::ClientCredentials {
                client_id,
                client_secret,
                token_url,
            } => bearer_auth(
                Some(
                    client_credentials(
                        token_url,
                        client_id.clone(),
                        client_secret.clone(),
                        HttpPolicy::new(5),
                    )
                    .map_err(to_client)?,
                ),
                None,
            ),
            SalesforceAuth::AccessToken(t) => bearer_auth(None, Some(t)),
        };
        let http = HttpClient::with_auth(
            SALESFORCE,
            policy,
            auth,
            vec![("Accept".into(), "application/json".into())],
        )
        .map_err(to_client)?;
        Ok(SalesforceObjects {
            http,
            cfg: Arc::new(cfg),
            schema: schema.clone(),
            usage: UsageTracker::default(),
            described: Arc::new(OnceCell::new()),
            prepared: Arc::new(OnceCell::new()),
        })
    }

    /// Requests sent, retried and throttled so far.
    pub fn stats(&self) -> HttpStats {
        self.http.stats()
    }

    /// The org's API usage as the last response reported it.
    pub fn api_usage(&self) -> Option<ApiUsage> {
        self.usage.latest()
    }

    /// `{instance}/services/data/v{version}/{tail}`.
    pub(crate) fn data_url(&self, tail: &str) -> String {
        format!(
            "{}/services/data/v{}/{tail}",
            self.cfg.instance_url, self.cfg.api_version
        )
    }

    /// An absolute URL for a path Salesforce returned (`nextRecordsUrl`).
    pub(crate) fn absolute(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            path.to_string()
        } else {
            format!("{}{path}", self.cfg.instance_url)
        }
    }

    fn note(&self, meta: &ResponseMeta) {
        if let Some(u) = meta
            .headers
            .get("Sforce-Limit-Info")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_limit_info)
        {
            self.usage.note(u);
        }
    }

    /// A JSON request under the policy; `Sforce-Limit-Info` noted.
    pub(crate) async fn json(
        &self,
        method: Method,
        url: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Json, HttpError> {
        let (v, meta) = self.http.send_json::<Json>(method, url, build).await?;
        self.note(&meta);
        Ok(v)
    }

    /// A request whose answer is text (CSV), with its response headers.
    pub(crate) async fn text(
        &self,
        method: Method,
        url: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<(String, ResponseMeta), HttpError> {
        let (t, meta) = self.http.send_text(method, url, build).await?;
        self.note(&meta);
        Ok((t, meta))
    }

    /// The org's API usage: the last `Sforce-Limit-Info` seen, else
    /// `GET /limits` (`DailyApiRequests`).
    pub(crate) async fn current_usage(&self) -> Result<ApiUsage, ConnectorError> {
        if let Some(u) = self.usage.latest() {
            return Ok(u);
        }
        let v = match self
            .json(Method::GET, &self.data_url("limits"), |r| r)
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.not_found_or(e).await),
        };
        if let Some(u) = self.usage.latest() {
            return Ok(u);
        }
        let d = &v["DailyApiRequests"];
        match (d["Max"].as_u64(), d["Remaining"].as_u64()) {
            (Some(max), Some(rem)) => Ok(ApiUsage {
                used: max.saturating_sub(rem),
                max,
            }),
            _ => Err(ConnectorError::Unreachable(
                "Salesforce reported no API usage (no Sforce-Limit-Info header and no DailyApiRequests in /limits)".into(),
            )),
        }
    }

    /// A request answered 404 as [`http_error`] maps it, unless the org
    /// does not serve the configured API version: then that, with the
    /// versions it serves.
    pub(crate) async fn not_found_or(&self, e: HttpError) -> ConnectorError {
        if matches!(e, HttpError::Status { status: 404, .. }) {
            if let Some(unserved) = self.unserved_version().await {
                return unserved;
            }
        }
        http_error(e)
    }

    /// After a 404: whether the org does not serve `api_version`. Salesforce
    /// answers a path under a version it does not serve with the same `404
    /// NOT_FOUND` ("The requested resource does not exist") as one naming
    /// an object it does not have, so the versions are listed with `GET
    /// /services/data/` (REST API "Versions", no authentication needed:
    /// https://developer.salesforce.com/docs/platform/api-rest/guide/resources-versions.html).
    /// `None` when the version is served, or the list cannot be read (then
    /// the 404 is reported as it came).
    async fn unserved_version(&self) -> Option<ConnectorError> {
        let url = format!("{}/services/data/", self.cfg.instance_url);
        let listed = match self.json(Method::GET, &url, |r| r).await {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "Could not list the org's API versions after a 404.");
                return None;
            }
        };
        let mut versions: Vec<String> = listed
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("version").and_then(Json::as_str).map(str::to_string))
            .collect();
        if versions.is_empty() || versions.contains(&self.cfg.api_version) {
            return None;
        }
        let number = |v: &String| {
            let (a, b) = v.split_once('.').unwrap_or((v, "0"));
            (a.parse::<u32>().unwrap_or(0), b.parse::<u32>().unwrap_or(0))
        };
        versions.sort_by_key(number);
        let newest = versions.last().cloned().unwrap_or_default();
        let served = if versions.len() > 2 {
            format!("{} to {newest} ({} versions)", versions[0], versions.len())
        } else {
            versions.join(" and ")
        };
        Some(ConnectorError::Config(format!(
            "Salesforce at {} does not serve REST API version {} (it answered 404 NOT_FOUND; GET /services/data/ lists the versions this org serves: {served}); set api_version in the job's target settings to one of them, e.g. api_version = \"{newest}\" (the newest)",
            self.cfg.instance_url, self.cfg.api_version
        )))
    }

    /// The describe, fetched once and resolved against the job's fields.
    pub(crate) async fn prepared(&self) -> Result<&Prepared, ConnectorError> {
        self.prepared.get_or_try_init(|| self.prepare()).await
    }

    /// The object's describe, fetched once.
    pub(crate) async fn described(&self) -> Result<&ObjectInfo, ConnectorError> {
        self.described
            .get_or_try_init(|| async {
                let cfg = &self.cfg;
                let url = self.data_url(&format!("sobjects/{}/describe", cfg.object));
                match self.json(Method::GET, &url, |r| r).await {
                    Ok(v) => Ok(ObjectInfo::from_json(&v)),
                    Err(HttpError::Status { status: 404, .. }) => {
                        if let Some(unserved) = self.unserved_version().await {
                            return Err(unserved);
                        }
                        Err(ConnectorError::Config(format!(
                            "Salesforce has no object `{}` (describe answered 404 NOT_FOUND; the org serves API version {}); check the job's object (custom objects end in __c) and that the integration user can read it",
                            cfg.object, cfg.api_version
                        )))
                    }
                    Err(e) => Err(http_error(e)),
                }
            })
            .await
    }

    async fn prepare(&self) -> Result<Prepared, ConnectorError> {
        let cfg = &self.cfg;
        let object = self.described().await?.clone();
        let missing = |name: &str, what: &str| {
            ConnectorError::Config(format!(
                "Salesforce {} has no field `{name}` ({what}); its fields: {}",
                cfg.object,
                object.names(40)
            ))
        };
        let mut fields = Vec::with_capacity(cfg.fields.len());
        for (f, name) in self.schema.fields.iter().zip(&cfg.fields) {
            let info = object.field(name).ok_or_else(|| {
                missing(
                    name,
                    &format!("the job's field `{}`; map it in fields", f.name),
                )
            })?;
            if f.kind == FieldKind::Timestamp && !(info.is_date() || info.is_datetime()) {
                return Err(ConnectorError::Config(format!(
                    "Salesforce {}.{} is a {} field, but the job's field `{}` is a timestamp; map it to a datetime or date field",
                    cfg.object, info.name, info.kind, f.name
                )));
            }
            if f.kind == FieldKind::Money && !info.is_number() && info.kind != "string" {
                return Err(ConnectorError::Config(format!(
                    "Salesforce {}.{} is a {} field, but the job's field `{}` is money; map it to a currency, number or percent field",
                    cfg.object, info.name, info.kind, f.name
                )));
            }
            fields.push(info.clone());
        }
        let key = object
            .field(&cfg.external_id_field)
            .cloned()
            .ok_or_else(|| missing(&cfg.external_id_field, "external_id_field"))?;
        let date = object
            .field(&cfg.date_field)
            .cloned()
            .ok_or_else(|| missing(&cfg.date_field, "date_field"))?;
        if !(date.is_date() || date.is_datetime()) {
            return Err(ConnectorError::Config(format!(
                "Salesforce {}.{} is a {} field; date_field must be a datetime or date field",
                cfg.object, date.name, date.kind
            )));
        }
        let currency = cfg
            .currency_field
            .as_deref()
            .and_then(|c| object.field(c).cloned());
        if self.schema.money_field().is_some() && currency.is_none() && cfg.currency.is_none() {
            return Err(ConnectorError::Config(format!(
                "Salesforce {} has no currency field `{}` (a single-currency org): set the job's currency to the org's currency, e.g. currency = \"USD\", or currency_field to the field holding each record's currency",
                cfg.object,
                cfg.currency_field.as_deref().unwrap_or("CurrencyIsoCode")
            )));
        }
        let mut not_written = Vec::new();
        for name in &cfg.not_written {
            let mapped = fields
                .iter()
                .chain(currency.iter())
                .find(|f| f.name.eq_ignore_ascii_case(name));
            match mapped {
                Some(f) => not_written.push(f.name.to_ascii_lowercase()),
                None => {
                    return Err(ConnectorError::Config(format!(
                        "Salesforce {}: not_written lists `{name}`, which is not a field the job writes; the fields it writes: {}",
                        cfg.object,
                        fields
                            .iter()
                            .chain(currency.iter())
                            .filter(|f| !f.is_system() && !f.name.eq_ignore_ascii_case(&key.name))
                            .map(|f| f.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        }
        if !not_written.is_empty() {
            tracing::info!(
                message = "Fields listed in not_written are read and compared, never written.",
                object = cfg.object.as_str(),
                fields = cfg.not_written.join(", ").as_str()
            );
        }
        let mut select: Vec<String> = Vec::new();
        let mut add = |n: &str| {
            if !select.iter().any(|s| s.eq_ignore_ascii_case(n)) {
                select.push(n.to_string());
            }
        };
        add("Id");
        add(&key.name);
        add(&date.name);
        for f in &fields {
            add(&f.name);
        }
        if let Some(c) = &currency {
            add(&c.name);
        }
        if !key.case_sensitive && key.unique {
            tracing::warn!(
                message = "The external ID field is unique but not case sensitive: keys that differ only in case are one record to Salesforce.",
                object = cfg.object.as_str(),
                field = key.name.as_str()
            );
        }
        Ok(Prepared {
            fields,
            key,
            date,
            currency,
            select,
            not_written,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_name_the_code_and_the_daily_limit_is_final() {
        let e = salesforce_error_body(
            br#"[{"message":"TotalRequests Limit exceeded.","errorCode":"REQUEST_LIMIT_EXCEEDED"}]"#,
        )
        .unwrap();
        assert_eq!(
            e.message.as_deref(),
            Some("REQUEST_LIMIT_EXCEEDED: TotalRequests Limit exceeded.")
        );
        assert!(e.is_final);
        let e = salesforce_error_body(
            br#"[{"message":"Session expired or invalid","errorCode":"INVALID_SESSION_ID"}]"#,
        )
        .unwrap();
        assert_eq!(
            e.message.as_deref(),
            Some("INVALID_SESSION_ID: Session expired or invalid")
        );
        assert!(!e.is_final);
        let e = salesforce_error_body(
            br#"[{"message":"No such column","errorCode":"INVALID_FIELD","fields":["Nope__c"]}]"#,
        )
        .unwrap();
        assert_eq!(
            e.message.as_deref(),
            Some("INVALID_FIELD: No such column (fields: Nope__c)")
        );
        let bulk =
            salesforce_error_body(br#"{"errorCode":"INVALIDJOB","message":"bad job"}"#).unwrap();
        assert_eq!(bulk.message.as_deref(), Some("INVALIDJOB: bad job"));
        let oauth = salesforce_error_body(
            br#"{"error":"invalid_client","error_description":"invalid client credentials"}"#,
        )
        .unwrap();
        assert_eq!(oauth.message.as_deref(), Some("invalid client credentials"));
        assert_eq!(oauth.code.as_deref(), Some("invalid_client"));
        assert_eq!(salesforce_error_body(b"<html>"), None);
        assert_eq!(salesforce_error_body(b"[]"), None);
    }
}
