//! `type = "quickbooks"`: QuickBooks Online invoices or sales receipts of
//! one company, as a job's target (or source).

use std::collections::BTreeMap;
use std::time::Duration;

use recon_core::parse::positive_duration;
use recon_core::{
    BuildContext, ConnectorConfig, ConnectorError, Expand, FieldKind, Secret, Source, Target,
    TargetRole,
};
use serde::Deserialize;

use crate::client::{ClientConfig, Environment, TOKEN_URL};
use crate::connector::{CustomerChoice, Placement, QboConfig, QuickBooks, TimeField};

/// The `minorversion` sent unless another is set.
pub const DEFAULT_MINORVERSION: u32 = 75;

fn default_object() -> String {
    "Invoice".into()
}
fn default_external_id() -> String {
    "DocNumber".into()
}
fn default_time_field() -> String {
    "MetaData.CreateTime".into()
}
fn default_minorversion() -> u32 {
    DEFAULT_MINORVERSION
}
fn default_batch_size() -> usize {
    10
}
fn default_write_batch() -> usize {
    100
}
fn default_lookup_chunk() -> usize {
    30
}
fn default_page_size() -> u32 {
    1000
}
fn default_requests_per_minute() -> u32 {
    450
}
fn default_batches_per_minute() -> u32 {
    36
}
fn default_customer_by() -> String {
    "PrimaryEmailAddr".into()
}

/// Which customer a backfilled invoice is for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomerSettings {
    /// One customer for every backfilled invoice: its QuickBooks `Id`.
    pub id: Option<String>,
    /// Or: the job's field whose value names the customer (e.g. `email`).
    pub match_field: Option<String>,
    /// The Customer property `match_field` is compared to:
    /// `PrimaryEmailAddr` (default) or `DisplayName`.
    #[serde(default = "default_customer_by")]
    pub by: String,
}

/// The settings of a QuickBooks Online endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuickbooksSettings {
    /// `production` (default) or `sandbox`: which Intuit API host.
    #[serde(default)]
    pub environment: Environment,
    /// Another API host (an emulator); overrides `environment`.
    pub base_url: Option<String>,
    /// The OAuth 2.0 token endpoint (default Intuit's).
    pub token_url: Option<String>,
    /// The company ID (realm ID); use `${QBO_REALM_ID}`.
    pub realm_id: String,
    /// The app's client ID; use `${QBO_CLIENT_ID}`.
    pub client_id: Secret,
    /// The app's client secret; use `${QBO_CLIENT_SECRET}`.
    pub client_secret: Secret,
    /// The refresh token of the app's connection to the company; use
    /// `${QBO_REFRESH_TOKEN}`. Used only while the state store holds no
    /// newer one (QuickBooks replaces it on refresh; recon saves each).
    pub refresh_token: Option<Secret>,
    /// `Invoice` (default) or `SalesReceipt`.
    #[serde(default = "default_object")]
    pub object: String,
    /// Where the external ID lives: `DocNumber` (default; at most 21
    /// characters), `PrivateNote`, or `custom_field:NAME` (a custom field
    /// by its name in QuickBooks).
    #[serde(default = "default_external_id")]
    pub external_id: String,
    /// The field windows read over: `MetaData.CreateTime` (default) or `TxnDate`.
    #[serde(default = "default_time_field")]
    pub time_field: String,
    /// The API's `minorversion`, sent on every request (default 75).
    #[serde(default = "default_minorversion")]
    pub minorversion: u32,
    /// Canonical field → QuickBooks property: `TotalAmt` (the money field's
    /// default), `CurrencyRef` (the currency field's), `TxnDate`,
    /// `MetaData.CreateTime`, `PrivateNote`, `DocNumber`, `Id`,
    /// `CustomerRef`, `custom_field:NAME`, or another property path.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// The customer of backfilled invoices (needed to write).
    pub customer: Option<CustomerSettings>,
    /// The product/service (`ItemRef` Id) of the one sales line a
    /// backfilled transaction has (needed to write).
    pub item_ref: Option<String>,
    /// Operations per batch request, 1..=30 (default 10: Intuit's pages
    /// say 30 and 10).
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Records per write call of a backfill (default 100).
    #[serde(default = "default_write_batch")]
    pub write_batch: usize,
    /// External IDs per `IN (…)` lookup query (default 30).
    #[serde(default = "default_lookup_chunk")]
    pub lookup_chunk: usize,
    /// Rows per query page, 1..=1000 (default 1000, the API's maximum).
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// Requests per minute at most (default 450; QuickBooks allows 500 per company).
    #[serde(default = "default_requests_per_minute")]
    pub requests_per_minute: u32,
    /// Batch requests per minute at most (default 36; QuickBooks allows 40).
    #[serde(default = "default_batches_per_minute")]
    pub batches_per_minute: u32,
    /// The company's time zone (IANA name), for `TxnDate` (default UTC).
    pub company_timezone: Option<String>,
    /// For an external ID QuickBooks cannot filter on (`PrivateNote`, a
    /// custom field): how far around the window (or the records' times) a
    /// lookup reads (default `"3d"`).
    pub lookup_widen: Option<String>,
    /// How long 429s may hold the run without progress (default 15m).
    pub rate_limit_patience: Option<String>,
}

impl QuickbooksSettings {
    /// The connector's config for a job.
    pub fn config(&self, cx: BuildContext<'_>) -> Result<QboConfig, ConnectorError> {
        let bad = |m: String| ConnectorError::Config(format!("QuickBooks {}: {m}", self.object));
        let base_url = self
            .base_url
            .as_deref()
            .unwrap_or(self.environment.base_url())
            .trim()
            .trim_end_matches('/')
            .to_string();
        if !(base_url.starts_with("https://") || base_url.starts_with("http://")) {
            return Err(bad(format!("base_url `{base_url}` is not an http(s) URL")));
        }
        if self.realm_id.trim().is_empty()
            || !self.realm_id.trim().bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad(format!(
                "realm_id `{}` is not a company ID (digits, as in the app's connection or the URL of the company in QuickBooks)",
                self.realm_id
            )));
        }
        let object = match self.object.as_str() {
            "Invoice" | "SalesReceipt" => self.object.clone(),
            other => {
                return Err(bad(format!(
                    "object `{other}`: use Invoice or SalesReceipt"
                )))
            }
        };
        let placement = match self.external_id.as_str() {
            "DocNumber" => Placement::DocNumber,
            "PrivateNote" => Placement::PrivateNote,
            other => match other.strip_prefix("custom_field:") {
                Some(name) if !name.trim().is_empty() => {
                    Placement::CustomField(name.trim().to_string())
                }
                _ => {
                    return Err(bad(format!(
                        "external_id `{other}`: use DocNumber, PrivateNote or custom_field:NAME"
                    )))
                }
            },
        };
        let time_field = match self.time_field.as_str() {
            "TxnDate" => TimeField::TxnDate,
            "MetaData.CreateTime" => TimeField::CreateTime,
            other => {
                return Err(bad(format!(
                    "time_field `{other}`: use MetaData.CreateTime or TxnDate"
                )))
            }
        };
        if !(1..=30).contains(&self.batch_size) {
            return Err(bad(format!(
                "batch_size = {}: a QuickBooks batch request takes 1 to 30 operations",
                self.batch_size
            )));
        }
        if !(1..=1000).contains(&self.page_size) {
            return Err(bad(format!(
                "page_size = {}: a query page holds 1 to 1000 rows",
                self.page_size
            )));
        }
        if self.write_batch == 0 || self.lookup_chunk == 0 {
            return Err(bad("write_batch and lookup_chunk must be at least 1".into()));
        }
        let company_tz = match &self.company_timezone {
            None => jiff::tz::TimeZone::UTC,
            Some(name) => jiff::tz::TimeZone::get(name)
                .map_err(|e| bad(format!("company_timezone `{name}`: {e}")))?,
        };
        let mut paths = Vec::with_capacity(cx.schema.fields.len());
        for (i, f) in cx.schema.fields.iter().enumerate() {
            let path = match (self.fields.get(&f.name), f.kind) {
                (Some(p), _) => p.trim().to_string(),
                (None, FieldKind::Money) => "TotalAmt".into(),
                (None, FieldKind::Currency) => "CurrencyRef".into(),
                (None, FieldKind::Timestamp) if cx.time_field == Some(i) => self.time_field.clone(),
                (None, _) => f.name.clone(),
            };
            paths.push(path);
        }
        let customer = match &self.customer {
            None => None,
            Some(c) => Some(match (&c.id, &c.match_field) {
                (Some(id), None) => CustomerChoice::Fixed(id.trim().to_string()),
                (None, Some(field)) => {
                    let idx = cx.schema.index_of(field).ok_or_else(|| {
                        bad(format!("customer.match_field `{field}` is not one of the job's fields"))
                    })?;
                    if !matches!(c.by.as_str(), "PrimaryEmailAddr" | "DisplayName") {
                        return Err(bad(format!(
                            "customer.by `{}`: use PrimaryEmailAddr or DisplayName",
                            c.by
                        )));
                    }
                    CustomerChoice::Lookup {
                        field: idx,
                        by: c.by.clone(),
                    }
                }
                _ => {
                    return Err(bad(
                        "customer must be either { id = \"…\" } (one customer) or { match_field = \"…\", by = \"PrimaryEmailAddr\" }".into(),
                    ))
                }
            }),
        };
        let lookup_widen = match &self.lookup_widen {
            Some(w) => positive_duration(w, "QuickBooks lookup_widen")?,
            None => Duration::from_secs(3 * 86_400),
        };
        let rate_limit_patience = match &self.rate_limit_patience {
            Some(p) => positive_duration(p, "QuickBooks rate_limit_patience")?,
            None => Duration::from_secs(15 * 60),
        };
        Ok(QboConfig {
            client: ClientConfig {
                base_url,
                token_url: self.token_url.clone().unwrap_or_else(|| TOKEN_URL.into()),
                realm_id: self.realm_id.trim().to_string(),
                client_id: self.client_id.clone(),
                client_secret: self.client_secret.clone(),
                refresh_token: self.refresh_token.clone(),
                minorversion: self.minorversion,
                requests_per_minute: self.requests_per_minute,
                batches_per_minute: self.batches_per_minute,
                rate_limit_patience,
            },
            object,
            placement,
            time_field,
            paths,
            customer,
            item_ref: self.item_ref.clone(),
            batch_size: self.batch_size,
            write_batch: self.write_batch,
            lookup_chunk: self.lookup_chunk,
            page_size: self.page_size,
            company_tz,
            lookup_widen,
            job: cx.job.to_string(),
        })
    }

    fn build(&self, cx: BuildContext<'_>) -> Result<QuickBooks, ConnectorError> {
        QuickBooks::new(self.config(cx)?, cx.schema, cx.tokens.cloned())
    }
}

#[async_trait::async_trait]
impl ConnectorConfig for QuickbooksSettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        Some(("fields", &self.fields))
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.realm_id = expand(&self.realm_id, &format!("{side}.realm_id"))?;
        for (name, s) in [
            ("client_id", &mut self.client_id),
            ("client_secret", &mut self.client_secret),
        ] {
            *s = Secret::new(expand(s.expose(), &format!("{side}.{name}"))?);
        }
        if let Some(s) = &mut self.refresh_token {
            *s = Secret::new(expand(s.expose(), &format!("{side}.refresh_token"))?);
        }
        for (name, u) in [
            ("base_url", &mut self.base_url),
            ("token_url", &mut self.token_url),
        ] {
            if let Some(v) = u {
                *v = expand(v, &format!("{side}.{name}"))?;
            }
        }
        Ok(())
    }

    fn target_role(&self) -> TargetRole {
        TargetRole::Writable
    }

    async fn build_source(&self, cx: BuildContext<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(self.build(cx)?))
    }

    async fn build_target(&self, cx: BuildContext<'_>) -> Result<Box<dyn Target>, ConnectorError> {
        let q = self.build(cx)?;
        if q.cfg.customer.is_none() || q.cfg.item_ref.is_none() {
            return Err(ConnectorError::Config(format!(
                "QuickBooks {}: a backfilled {} needs a customer and a product/service: set customer = {{ id = \"…\" }} (or {{ match_field = \"email\" }}) and item_ref = \"…\" (the Item Id of its one sales line)",
                self.object, self.object
            )));
        }
        Ok(Box::new(q))
    }

    fn kind(&self) -> &'static str {
        "QuickBooks Online"
    }

    fn type_name() -> &'static str {
        "quickbooks"
    }

    fn url_setting() -> Option<&'static str> {
        Some("base_url")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::{Field, Schema};
    use serde_json::{json, Value};

    fn schema() -> Schema {
        let f = |name: &str, kind| Field {
            name: name.into(),
            kind,
            compared: true,
        };
        Schema {
            fields: vec![
                f("amount", FieldKind::Money),
                f("currency", FieldKind::Currency),
                f("email", FieldKind::Text),
                f("created", FieldKind::Timestamp),
            ],
        }
    }

    fn settings(extra: Value) -> Result<QuickbooksSettings, serde_json::Error> {
        let mut v = json!({
            "realm_id": "9341453000000001",
            "client_id": "id",
            "client_secret": "the-client-secret",
            "refresh_token": "RT1-the-refresh-token",
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v)
    }

    fn config(s: &QuickbooksSettings) -> Result<QboConfig, ConnectorError> {
        let schema = schema();
        s.config(BuildContext {
            schema: &schema,
            time_field: Some(3),
            job: "payments",
            tokens: None,
        })
    }

    #[test]
    fn defaults_are_documented_ones_and_secrets_stay_out_of_debug() {
        let s = settings(json!({})).unwrap();
        let c = config(&s).unwrap();
        assert_eq!(c.client.base_url, "https://quickbooks.api.intuit.com");
        assert_eq!(c.client.token_url, TOKEN_URL);
        assert_eq!(c.client.minorversion, 75);
        assert_eq!(c.object, "Invoice");
        assert_eq!(c.placement, Placement::DocNumber);
        assert_eq!(c.time_field, TimeField::CreateTime);
        assert_eq!(
            c.paths,
            ["TotalAmt", "CurrencyRef", "email", "MetaData.CreateTime"]
        );
        assert_eq!(c.batch_size, 10);
        let sandbox = settings(json!({"environment": "sandbox"})).unwrap();
        assert_eq!(
            config(&sandbox).unwrap().client.base_url,
            "https://sandbox-quickbooks.api.intuit.com"
        );
        let dbg = format!("{s:?} {c:?}");
        assert!(
            !dbg.contains("the-client-secret") && !dbg.contains("RT1-the-refresh-token"),
            "{dbg}"
        );
    }

    #[test]
    fn bad_settings_name_the_setting_and_the_fix() {
        for (extra, want) in [
            (json!({"realm_id": "acme"}), "realm_id"),
            (json!({"object": "Bill"}), "Invoice or SalesReceipt"),
            (
                json!({"external_id": "Memo"}),
                "DocNumber, PrivateNote or custom_field:NAME",
            ),
            (
                json!({"external_id": "custom_field: "}),
                "custom_field:NAME",
            ),
            (
                json!({"time_field": "DueDate"}),
                "MetaData.CreateTime or TxnDate",
            ),
            (json!({"batch_size": 31}), "1 to 30"),
            (json!({"page_size": 1001}), "1 to 1000"),
            (
                json!({"company_timezone": "Mars/Olympus"}),
                "company_timezone",
            ),
            (
                json!({"customer": {"id": "1", "match_field": "email"}}),
                "customer must be either",
            ),
            (
                json!({"customer": {"match_field": "nope"}}),
                "not one of the job's fields",
            ),
            (
                json!({"customer": {"match_field": "email", "by": "Phone"}}),
                "PrimaryEmailAddr or DisplayName",
            ),
            (json!({"base_url": "quickbooks.example"}), "base_url"),
            (json!({"lookup_widen": "0s"}), "lookup_widen"),
        ] {
            let e = config(&settings(extra.clone()).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
        assert!(
            settings(json!({"password": "x"})).is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn secrets_and_urls_take_environment_variables() {
        let mut s = settings(json!({
            "realm_id": "${QBO_REALM_ID}",
            "client_secret": "${QBO_CLIENT_SECRET}",
            "refresh_token": "${QBO_REFRESH_TOKEN}",
            "base_url": "${QBO_URL}",
        }))
        .unwrap();
        let expand = |v: &str, setting: &str| -> Result<String, ConnectorError> {
            assert!(setting.starts_with("target."), "{setting}");
            Ok(match v {
                "${QBO_REALM_ID}" => "123".into(),
                "${QBO_CLIENT_SECRET}" => "s3cret".into(),
                "${QBO_REFRESH_TOKEN}" => "RT1-x".into(),
                "${QBO_URL}" => "http://127.0.0.1:9".into(),
                other => other.into(),
            })
        };
        s.expand_env("target", &expand).unwrap();
        let c = config(&s).unwrap();
        assert_eq!(c.client.realm_id, "123");
        assert_eq!(c.client.client_secret.expose(), "s3cret");
        assert_eq!(c.client.refresh_token.as_ref().unwrap().expose(), "RT1-x");
        assert_eq!(c.client.base_url, "http://127.0.0.1:9");
        assert_eq!(s.target_role(), TargetRole::Writable);
    }
}
