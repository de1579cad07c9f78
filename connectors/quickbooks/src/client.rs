//! The QuickBooks Online client: the shared HTTP policy with Intuit's error
//! bodies and `intuit_tid`, the company's preferences, queries paged with
//! `STARTPOSITION`/`MAXRESULTS`, and the batch endpoint.
//!
//! Errors ("Review QuickBooks Online Accounting API error codes",
//! https://developer.intuit.com/app/developer/qbo/docs/develop/troubleshooting/error-codes)
//! come as `{"Fault": {"Error": [{"Message", "Detail", "code"}], "type"}}`,
//! or from the gateway as `{"code", "detail", …}`; both are read into
//! messages that start with the code. Every response's `intuit_tid` header
//! (Intuit: "Capture this field's value", "Fix GraphQL errors",
//! https://developer.intuit.com/app/developer/qbo/docs/develop/troubleshooting/graphql-errors)
//! is the request ID every error names. Throttling ("500 requests per
//! minute per realmId, including batch requests", 10 at once; 40 batch
//! requests a minute: Intuit blog
//! https://blogs.intuit.com/blog/2016/08/08/idg-concurrent-api-use-changes-coming-soon/
//! and the Batch page) is paced by two limiters of the shared policy, and
//! its 429s retried by it, honouring `Retry-After` when sent. Whether each
//! operation of a batch counts against the 500 a minute is not documented
//! (a third-party tutorial says so); the defaults assume it does: at most
//! 36 batch requests a minute of `batch_size` 10 is 360 operations, and a
//! write call's few lookup queries keep the minute under 500.

use std::sync::Arc;
use std::time::Duration;

use recon_core::http::{
    HttpClient, HttpError, HttpPolicy, Method, Provider, ProviderError, RefreshableToken,
};
use recon_core::{ConnectorError, Currency, Secret, TokenStore};
use serde_json::{json, Value as Json};
use tokio::sync::OnceCell;

use crate::auth::{is_invalid_grant, reconnect_steps, rotating_refresh};

/// QuickBooks Online's identity for the HTTP policy.
pub const QUICKBOOKS: Provider = Provider {
    error_body: quickbooks_error_body,
    ..Provider::new("QuickBooks", "intuit_tid")
};

/// Intuit's `Fault` body (first error: `code: Message: Detail`) or the
/// gateway's `{"code", "detail"}`.
pub fn quickbooks_error_body(body: &[u8]) -> Option<ProviderError> {
    let v: Json = serde_json::from_slice(body).ok()?;
    if let Some(f) = v.get("Fault") {
        let (code, text) = fault_text(f);
        return Some(ProviderError {
            message: Some(text),
            code,
            is_final: false,
        });
    }
    let code = v.get("code").and_then(Json::as_str)?.to_string();
    let detail = v
        .get("detail")
        .or_else(|| v.get("message"))
        .and_then(Json::as_str)
        .unwrap_or("");
    Some(ProviderError {
        message: Some(format!("{code}: {detail}")),
        code: Some(code),
        is_final: false,
    })
}

/// `(code, "code Message: Detail (type)")` of a `Fault` object.
pub fn fault_text(f: &Json) -> (Option<String>, String) {
    let e = &f["Error"][0];
    let code = e["code"].as_str().map(str::to_string);
    let s = |k: &str| e[k].as_str().unwrap_or("");
    let kind = f["type"].as_str().unwrap_or("Fault");
    let mut text = format!("{} {}", code.as_deref().unwrap_or("?"), s("Message"));
    if !s("Detail").is_empty() {
        text.push_str(&format!(": {}", s("Detail")));
    }
    text.push_str(&format!(" ({kind})"));
    (code, text)
}

/// `sandbox` or `production`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    /// `https://sandbox-quickbooks.api.intuit.com`.
    Sandbox,
    /// `https://quickbooks.api.intuit.com`.
    #[default]
    Production,
}

impl Environment {
    /// The API base URL ("Query operations and syntax" names production;
    /// the sandbox host is Intuit's SDKs').
    pub fn base_url(self) -> &'static str {
        match self {
            Environment::Sandbox => "https://sandbox-quickbooks.api.intuit.com",
            Environment::Production => "https://quickbooks.api.intuit.com",
        }
    }
}

/// Intuit's token endpoint (the same for sandbox and production).
pub const TOKEN_URL: &str = "https://oauth.platform.intuit.com/oauth2/v1/tokens/bearer";

/// How to reach one company.
#[derive(Clone)]
pub struct ClientConfig {
    /// API base, no trailing slash.
    pub base_url: String,
    /// The token endpoint.
    pub token_url: String,
    /// The company.
    pub realm_id: String,
    /// The app's client ID.
    pub client_id: Secret,
    /// The app's client secret.
    pub client_secret: Secret,
    /// The configured refresh token, used when the store holds none.
    pub refresh_token: Option<Secret>,
    /// `minorversion` on every request.
    pub minorversion: u32,
    /// Requests per minute (≤ 500).
    pub requests_per_minute: u32,
    /// Batch requests per minute (≤ 40).
    pub batches_per_minute: u32,
    /// How long 429s may hold the run without progress.
    pub rate_limit_patience: Duration,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("realm_id", &self.realm_id)
            .field("minorversion", &self.minorversion)
            .finish_non_exhaustive()
    }
}

/// The company settings that shape reads and writes.
#[derive(Clone, Debug)]
pub struct Company {
    /// `CompanyInfo.CompanyName`.
    pub name: String,
    /// `CurrencyPrefs.HomeCurrency`.
    pub home_currency: Currency,
    /// `CurrencyPrefs.MultiCurrencyEnabled`.
    pub multicurrency: bool,
    /// Legacy custom field names by `DefinitionId` ("1".."3").
    pub custom_fields: Vec<(String, String)>,
    /// Duplicate-number and transaction-number preferences as QuickBooks
    /// reported them (`OtherPrefs.NameValue` entries naming `Duplicate`,
    /// `SalesFormsPrefs.CustomTxnNumbers`), verbatim.
    pub numbering: Vec<String>,
    /// `SalesFormsPrefs.CustomTxnNumbers` when reported.
    pub custom_txn_numbers: Option<bool>,
}

/// The client of one company.
#[derive(Clone)]
pub struct Client {
    pub(crate) http: HttpClient,
    batch_http: HttpClient,
    pub(crate) cfg: Arc<ClientConfig>,
    company: Arc<OnceCell<Company>>,
}

impl Client {
    /// Builds the client; no request is sent yet.
    pub fn new(
        cfg: ClientConfig,
        store: Option<Arc<dyn TokenStore>>,
    ) -> Result<Client, ConnectorError> {
        let to_config = |e: HttpError| ConnectorError::Config(e.to_string());
        let source = rotating_refresh(
            &cfg.token_url,
            cfg.client_id.clone(),
            cfg.client_secret.clone(),
            cfg.refresh_token.clone(),
            store,
            &cfg.realm_id,
        )
        .map_err(to_config)?;
        let auth = Arc::new(RefreshableToken::bearer(source));
        let headers = vec![("Accept".to_string(), "application/json".to_string())];
        let mut policy = HttpPolicy::new(cfg.requests_per_minute.clamp(1, 500));
        policy.interval = Duration::from_secs(60);
        policy.burst = 10;
        policy.rate_limit_patience = cfg.rate_limit_patience;
        policy.timeout = Duration::from_secs(120);
        let http = HttpClient::with_auth(QUICKBOOKS, policy.clone(), auth.clone(), headers.clone())
            .map_err(to_config)?;
        let mut batch_policy = policy;
        batch_policy.requests_per_second = cfg.batches_per_minute.clamp(1, 40);
        batch_policy.burst = 5;
        let batch_http = HttpClient::with_auth(QUICKBOOKS, batch_policy, auth, headers)
            .map_err(to_config)?
            .also_limited_by(&http);
        Ok(Client {
            http,
            batch_http,
            cfg: Arc::new(cfg),
            company: Arc::new(OnceCell::new()),
        })
    }

    /// `{base}/v3/company/{realm}/{tail}`.
    pub(crate) fn url(&self, tail: &str) -> String {
        format!(
            "{}/v3/company/{}/{tail}",
            self.cfg.base_url, self.cfg.realm_id
        )
    }

    fn minor(&self) -> (String, String) {
        ("minorversion".into(), self.cfg.minorversion.to_string())
    }

    /// Maps a policy error, saying what to do.
    pub(crate) fn error(&self, e: HttpError) -> ConnectorError {
        if is_invalid_grant(&e) {
            return ConnectorError::Config(format!("{e}; {}", reconnect_steps(&self.cfg.realm_id)));
        }
        match &e {
            HttpError::Unauthorized { .. } => ConnectorError::Config(format!(
                "{e}; check the job's client_id, client_secret and realm_id (company {}), and that the app is connected to that company with the com.intuit.quickbooks.accounting scope",
                self.cfg.realm_id
            )),
            HttpError::Client { .. } => ConnectorError::Config(e.to_string()),
            _ => ConnectorError::Unreachable(e.to_string()),
        }
    }

    /// As [`Client::error`], during a write: an answer that never came
    /// may hide a done write.
    pub(crate) fn write_error(&self, e: HttpError) -> ConnectorError {
        match e {
            HttpError::RetriesExhausted { .. } => ConnectorError::ConnectionLost(e.to_string()),
            e => self.error(e),
        }
    }

    /// `GET {tail}` as JSON.
    pub(crate) async fn get(&self, tail: &str) -> Result<Json, ConnectorError> {
        let q = [self.minor()];
        self.http
            .send_json::<Json>(Method::GET, &self.url(tail), |r| r.query(&q))
            .await
            .map(|(v, _)| v)
            .map_err(|e| self.error(e))
    }

    /// One page of `statement`: its rows of `entity` (none when the
    /// response has no array, as QuickBooks answers an empty result).
    pub(crate) async fn query(
        &self,
        statement: &str,
        entity: &str,
    ) -> Result<Vec<Json>, ConnectorError> {
        let q = [("query".to_string(), statement.to_string()), self.minor()];
        let (mut v, _) = self
            .http
            .send_json::<Json>(Method::GET, &self.url("query"), |r| r.query(&q))
            .await
            .map_err(|e| self.error(e))?;
        Ok(match v["QueryResponse"][entity].take() {
            Json::Array(rows) => rows,
            _ => Vec::new(),
        })
    }

    /// Every row of `select` (a statement without paging), paged by
    /// `STARTPOSITION`/`MAXRESULTS page` until a short page.
    pub(crate) async fn query_all(
        &self,
        select: &str,
        entity: &str,
        page: u32,
    ) -> Result<Vec<Json>, ConnectorError> {
        let mut out = Vec::new();
        let mut start = 1u64;
        loop {
            let rows = self
                .query(
                    &format!("{select} STARTPOSITION {start} MAXRESULTS {page}"),
                    entity,
                )
                .await?;
            let n = rows.len();
            out.extend(rows);
            if n < page as usize {
                return Ok(out);
            }
            start += u64::from(page);
        }
    }

    /// `POST batch?requestid=…` with `items`: the `BatchItemResponse`s by
    /// `bId`.
    pub(crate) async fn batch(
        &self,
        items: Vec<Json>,
        requestid: &str,
    ) -> Result<Vec<Json>, HttpError> {
        let body = json!({ "BatchItemRequest": items });
        let q = [
            ("requestid".to_string(), requestid.to_string()),
            self.minor(),
        ];
        let (mut v, _) = self
            .batch_http
            .send_json::<Json>(Method::POST, &self.url("batch"), |r| {
                r.query(&q).json(&body)
            })
            .await?;
        Ok(match v["BatchItemResponse"].take() {
            Json::Array(a) => a,
            _ => Vec::new(),
        })
    }

    /// `POST {entity}?requestid=…` (a create or sparse update).
    pub(crate) async fn post(
        &self,
        entity: &str,
        body: &Json,
        requestid: &str,
    ) -> Result<Json, HttpError> {
        let q = [
            ("requestid".to_string(), requestid.to_string()),
            self.minor(),
        ];
        self.http
            .send_json::<Json>(Method::POST, &self.url(&entity.to_ascii_lowercase()), |r| {
                r.query(&q).json(body)
            })
            .await
            .map(|(v, _)| v)
    }

    /// The company's name, currencies and custom fields, read once.
    pub async fn company(&self) -> Result<&Company, ConnectorError> {
        self.company
            .get_or_try_init(|| async {
                let info = self
                    .get(&format!("companyinfo/{}", self.cfg.realm_id))
                    .await?;
                let prefs = self.get("preferences").await?;
                let p = &prefs["Preferences"];
                let home = p["CurrencyPrefs"]["HomeCurrency"]["value"]
                    .as_str()
                    .unwrap_or("USD");
                let home_currency = Currency::parse(home).map_err(|e| {
                    ConnectorError::Config(format!(
                        "QuickBooks company {} reports home currency `{home}`: {e}",
                        self.cfg.realm_id
                    ))
                })?;
                let mut custom_fields = Vec::new();
                for group in p["SalesFormsPrefs"]["CustomField"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    for f in group["CustomField"].as_array().into_iter().flatten() {
                        let name = f["Name"].as_str().unwrap_or("");
                        if let Some(n) = name.strip_prefix("SalesFormsPrefs.SalesCustomName") {
                            if let Some(v) = f["StringValue"].as_str() {
                                custom_fields.push((n.to_string(), v.to_string()));
                            }
                        }
                    }
                }
                let mut numbering = Vec::new();
                for nv in p["OtherPrefs"]["NameValue"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let name = nv["Name"].as_str().unwrap_or("");
                    if name.contains("Duplicate") {
                        numbering.push(format!("{name}={}", nv["Value"].as_str().unwrap_or("")));
                    }
                }
                let custom_txn_numbers = p["SalesFormsPrefs"]["CustomTxnNumbers"].as_bool();
                if let Some(c) = custom_txn_numbers {
                    numbering.push(format!("CustomTxnNumbers={c}"));
                }
                Ok(Company {
                    name: info["CompanyInfo"]["CompanyName"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    home_currency,
                    multicurrency: p["CurrencyPrefs"]["MultiCurrencyEnabled"]
                        .as_bool()
                        .unwrap_or(false),
                    custom_fields,
                    numbering,
                    custom_txn_numbers,
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_and_gateway_bodies_name_their_code() {
        let e = quickbooks_error_body(
            br#"{"Fault":{"Error":[{"Message":"Stale Object Error","Detail":"Stale Object Error : You and API API were working on this","code":"5010","element":""}],"type":"ValidationFault"},"time":"x"}"#,
        )
        .unwrap();
        assert_eq!(e.code.as_deref(), Some("5010"));
        assert_eq!(
            e.message.as_deref(),
            Some("5010 Stale Object Error: Stale Object Error : You and API API were working on this (ValidationFault)")
        );
        let g = quickbooks_error_body(
            br#"{"code":"AuthenticationFailed","type":"INPUT","message":null,"detail":"Token expired","moreInfo":null}"#,
        )
        .unwrap();
        assert_eq!(
            g.message.as_deref(),
            Some("AuthenticationFailed: Token expired")
        );
        assert_eq!(quickbooks_error_body(b"<html>"), None);
    }
}
