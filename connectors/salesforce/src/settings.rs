//! `type = "salesforce"`: an sObject (standard or custom, e.g.
//! `Payment__c`) keyed by an external ID field, as a job's target (or
//! source).

use std::collections::BTreeMap;
use std::time::Duration;

use recon_core::parse::positive_duration;
use recon_core::{
    BuildContext, ConnectorConfig, ConnectorError, Currency, Expand, Secret, Source, Target,
    TargetRole,
};
use serde::Deserialize;

use crate::connector::{SalesforceAuth, SalesforceConfig, SalesforceObjects};

/// Above this many records in a window (`SELECT COUNT()`), reads use a
/// Bulk API 2.0 query job instead of paging `/query`.
pub const DEFAULT_BULK_READ_THRESHOLD: u64 = 20_000;
/// From this many records in one write call, writes use a Bulk API 2.0
/// ingest job instead of sObject Collections (200 per call).
pub const DEFAULT_BULK_WRITE_THRESHOLD: usize = 5_000;
/// Records per write call of a backfill.
pub const DEFAULT_BATCH_SIZE: usize = 10_000;
/// Share of the org's remaining daily API calls one run may use.
pub const DEFAULT_DAILY_SHARE: f64 = 0.5;
/// The REST API version used unless another is set.
pub const DEFAULT_API_VERSION: &str = "62.0";

/// How recon authenticates: OAuth 2.0 client credentials (a connected or
/// external client app with the client credentials flow enabled and a Run
/// As user), or an access token the org issued.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// The app's consumer key; use `${SF_CLIENT_ID}`.
    pub client_id: Option<Secret>,
    /// The app's consumer secret; use `${SF_CLIENT_SECRET}`.
    pub client_secret: Option<Secret>,
    /// Token endpoint (default `{instance_url}/services/oauth2/token`, the
    /// org's My Domain).
    pub token_url: Option<String>,
    /// A static access token instead of client credentials; use
    /// `${SF_ACCESS_TOKEN}`. It is not refreshed: a 401 is final.
    pub access_token: Option<Secret>,
}

/// The settings of a Salesforce endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SalesforceSettings {
    /// The org's My Domain URL, `https://MyDomainName.my.salesforce.com`.
    pub instance_url: String,
    /// Client credentials or an access token.
    pub auth: AuthSettings,
    /// The sObject's API name (`Payment__c`).
    pub object: String,
    /// The external ID field records are keyed by (`Stripe_Charge_Id__c`);
    /// it must be External ID and Unique.
    pub external_id_field: String,
    /// Canonical field → field API name; unlisted fields use their own name.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// Field holding amounts' currency in multi-currency orgs (default
    /// `CurrencyIsoCode`).
    pub currency_field: Option<String>,
    /// The currency of a single-currency org (one without
    /// `CurrencyIsoCode`): amounts are read in it, and others are refused.
    pub currency: Option<String>,
    /// Datetime or date field windows filter on (default: the field of the
    /// job's time field when `fields` maps it, else `CreatedDate`).
    pub date_field: Option<String>,
    /// REST API version (default `62.0`).
    pub api_version: Option<String>,
    /// Above this many records in a window, read with a Bulk API 2.0 query
    /// job (default 20000; 0: always).
    pub bulk_read_threshold: Option<u64>,
    /// From this many records in a write call, write with a Bulk API 2.0
    /// ingest job (default 5000).
    pub bulk_write_threshold: Option<usize>,
    /// Records per write call of a backfill (default 10000).
    pub batch_size: Option<usize>,
    /// Records per `/query` page, 200..=2000 (`Sforce-Query-Options:
    /// batchSize`; default 2000).
    pub page_size: Option<u32>,
    /// Share of the org's remaining daily API calls a run may use before
    /// writing, 0 < share <= 1 (default 0.5).
    pub daily_share: Option<f64>,
    /// Requests per second at most (default 20).
    pub requests_per_second: Option<u32>,
    /// How long 429/503 answers may hold the run without a successful call
    /// before it fails, e.g. `"30m"` (default 15m).
    pub rate_limit_patience: Option<String>,
    /// How long a Bulk API 2.0 job may take, e.g. `"1h"` (default 30m).
    pub bulk_timeout: Option<String>,
    /// Mapped fields recon never writes, by their API names (e.g.
    /// `["Status__c"]`): read and compared as usual, left out of every
    /// create and update. For a field the integration user may read but not
    /// edit (describe `createable: false` / `updateable: false`, a
    /// read-only Field-Level Security), which recon otherwise refuses to
    /// backfill rather than write records without it. Records recon
    /// creates then lack the field, and show as mismatches on it while it
    /// is compared. The external ID field cannot be listed.
    #[serde(default)]
    pub not_written: Vec<String>,
}

fn trim_url(u: &str) -> String {
    u.trim().trim_end_matches('/').to_string()
}

impl SalesforceSettings {
    /// The client config for a job's fields.
    pub fn client_config(&self, cx: BuildContext<'_>) -> Result<SalesforceConfig, ConnectorError> {
        let bad = |m: String| ConnectorError::Config(format!("Salesforce {}: {m}", self.object));
        let instance_url = trim_url(&self.instance_url);
        if !(instance_url.starts_with("https://") || instance_url.starts_with("http://")) {
            return Err(bad(format!(
                "instance_url `{instance_url}` must be the org's My Domain URL, e.g. https://MyDomainName.my.salesforce.com"
            )));
        }
        let a = &self.auth;
        let auth = match (&a.access_token, &a.client_id, &a.client_secret) {
            (Some(token), None, None) if a.token_url.is_none() => SalesforceAuth::AccessToken(token.clone()),
            (None, Some(id), Some(secret)) => SalesforceAuth::ClientCredentials {
                client_id: id.clone(),
                client_secret: secret.clone(),
                token_url: a.token_url.as_deref().map(trim_url).unwrap_or_else(|| {
                    format!("{instance_url}/services/oauth2/token")
                }),
            },
            _ => {
                return Err(bad(
                    "auth must be either { client_id, client_secret [, token_url] } (OAuth 2.0 client credentials) or { access_token }".into(),
                ))
            }
        };
        let mut cfg = SalesforceConfig::new(
            &instance_url,
            auth,
            &self.object,
            &self.external_id_field,
            cx.names(&self.fields),
        );
        cfg.currency_field = cx.currency(self.currency_field.as_ref(), "CurrencyIsoCode");
        if let Some(c) = &self.currency {
            cfg.currency = Some(Currency::parse(c).map_err(|e| bad(format!("currency: {e}")))?);
        }
        // Windows filter on the field the job's time field is mapped to,
        // unless another date field is named; else on CreatedDate.
        match (&self.date_field, cx.time_field) {
            (Some(d), _) => cfg.date_field = d.clone(),
            (None, Some(t)) if self.fields.contains_key(&cx.schema.fields[t].name) => {
                cfg.date_field = cfg.fields[t].clone();
            }
            _ => {}
        }
        if let Some(v) = &self.api_version {
            let v = v.trim().trim_start_matches('v');
            if v.split('.').count() != 2 || !v.split('.').all(|p| p.parse::<u32>().is_ok()) {
                return Err(bad(format!(
                    "api_version `{v}` is not a version such as 62.0"
                )));
            }
            cfg.api_version = v.to_string();
        }
        if let Some(t) = self.bulk_read_threshold {
            cfg.bulk_read_threshold = t;
        }
        if let Some(t) = self.bulk_write_threshold {
            cfg.bulk_write_threshold = t.max(1);
        }
        if let Some(b) = self.batch_size {
            if b == 0 {
                return Err(bad("batch_size must be at least 1".into()));
            }
            cfg.batch_size = b;
        }
        if let Some(p) = self.page_size {
            if !(200..=2000).contains(&p) {
                return Err(bad(format!(
                    "page_size = {p}: Salesforce takes a query batch size of 200 to 2000"
                )));
            }
            cfg.page_size = p;
        }
        if let Some(s) = self.daily_share {
            if !(s > 0.0 && s <= 1.0) {
                return Err(bad(format!(
                    "daily_share = {s}: must be more than 0 and at most 1 (the share of the org's remaining daily API calls a run may use)"
                )));
            }
            cfg.daily_share = s;
        }
        if let Some(r) = self.requests_per_second {
            cfg.requests_per_second = r.max(1);
        }
        if let Some(p) = &self.rate_limit_patience {
            cfg.rate_limit_patience = positive_duration(p, "Salesforce rate_limit_patience")?;
        }
        if let Some(p) = &self.bulk_timeout {
            cfg.bulk_timeout = positive_duration(p, "Salesforce bulk_timeout")?;
        }
        for f in &self.not_written {
            if f.trim().eq_ignore_ascii_case(self.external_id_field.trim()) {
                return Err(bad(format!(
                    "not_written lists the external ID field `{f}`: every write sends the key"
                )));
            }
        }
        cfg.not_written = self
            .not_written
            .iter()
            .map(|f| f.trim().to_string())
            .collect();
        Ok(cfg)
    }

    fn build(&self, cx: BuildContext<'_>) -> Result<SalesforceObjects, ConnectorError> {
        SalesforceObjects::new(self.client_config(cx)?, cx.schema)
    }
}

/// The default of `bulk_timeout`.
pub const DEFAULT_BULK_TIMEOUT: Duration = Duration::from_secs(30 * 60);

#[async_trait::async_trait]
impl ConnectorConfig for SalesforceSettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        Some(("fields", &self.fields))
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.instance_url = expand(&self.instance_url, &format!("{side}.instance_url"))?;
        let a = &mut self.auth;
        for (name, secret) in [
            ("client_id", &mut a.client_id),
            ("client_secret", &mut a.client_secret),
            ("access_token", &mut a.access_token),
        ] {
            if let Some(s) = secret {
                *s = Secret::new(expand(s.expose(), &format!("{side}.auth.{name}"))?);
            }
        }
        if let Some(u) = &mut a.token_url {
            *u = expand(u, &format!("{side}.auth.token_url"))?;
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
        Ok(Box::new(self.build(cx)?))
    }

    fn kind(&self) -> &'static str {
        "Salesforce"
    }

    fn type_name() -> &'static str {
        "salesforce"
    }

    fn url_setting() -> Option<&'static str> {
        Some("instance_url")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::{Field, FieldKind, Schema};
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
                f("created", FieldKind::Timestamp),
            ],
        }
    }

    /// Settings as a job's table would give them, with `extra` keys.
    fn settings(extra: Value) -> SalesforceSettings {
        let mut v = json!({
            "instance_url": "https://acme.my.salesforce.com/",
            "object": "Payment__c",
            "external_id_field": "Stripe_Charge_Id__c",
            "auth": {"client_id": "id", "client_secret": "secret"},
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn build(
        s: &SalesforceSettings,
        time_field: Option<usize>,
    ) -> Result<SalesforceConfig, ConnectorError> {
        let schema = schema();
        s.client_config(BuildContext {
            schema: &schema,
            time_field,
            job: "payments",
            tokens: None,
        })
    }

    #[test]
    fn client_credentials_default_to_the_my_domain_token_endpoint() {
        let cfg = build(&settings(json!({})), None).unwrap();
        let SalesforceAuth::ClientCredentials { token_url, .. } = &cfg.auth else {
            panic!("{:?}", cfg.auth)
        };
        assert_eq!(
            token_url,
            "https://acme.my.salesforce.com/services/oauth2/token"
        );
        assert_eq!(cfg.instance_url, "https://acme.my.salesforce.com");
        assert_eq!(cfg.api_version, "62.0");
        assert_eq!(cfg.date_field, "CreatedDate");
        assert_eq!(cfg.currency_field.as_deref(), Some("CurrencyIsoCode"));
        assert_eq!(
            cfg.fields,
            vec!["amount".to_string(), "created".to_string()]
        );
        assert_eq!(cfg.daily_share, 0.5);
        let dbg = format!("{cfg:?}");
        assert!(
            !dbg.contains("\"secret\""),
            "secrets are not in Debug: {dbg}"
        );
    }

    #[test]
    fn auth_is_one_kind_or_the_other() {
        let token = build(&settings(json!({"auth": {"access_token": "00D!x"}})), None).unwrap();
        assert!(matches!(token.auth, SalesforceAuth::AccessToken(_)));
        for bad in [
            json!({"access_token": "t", "client_id": "id"}),
            json!({"client_id": "id"}),
            json!({}),
        ] {
            let e = build(&settings(json!({ "auth": bad })), None).unwrap_err();
            assert!(e.to_string().contains("client credentials"), "{e}");
        }
        let unknown = serde_json::from_value::<SalesforceSettings>(json!({
            "instance_url": "https://x", "object": "A", "external_id_field": "K",
            "auth": {"password": "p"},
        }));
        assert!(unknown.is_err());
    }

    #[test]
    fn windows_filter_on_the_mapped_time_field_unless_a_date_field_is_named() {
        let mapped = settings(json!({
            "fields": {"created": "Charge_Created__c", "amount": "Amount__c"}
        }));
        assert_eq!(
            build(&mapped, Some(1)).unwrap().date_field,
            "Charge_Created__c"
        );
        assert_eq!(build(&mapped, None).unwrap().date_field, "CreatedDate");
        let named = settings(json!({
            "fields": {"created": "Charge_Created__c"},
            "date_field": "Booked__c",
        }));
        assert_eq!(build(&named, Some(1)).unwrap().date_field, "Booked__c");
    }

    #[test]
    fn limits_and_sizes_are_checked() {
        for (extra, want) in [
            (json!({"daily_share": 0.0}), "daily_share"),
            (json!({"daily_share": 1.5}), "daily_share"),
            (json!({"page_size": 100}), "200 to 2000"),
            (json!({"batch_size": 0}), "batch_size"),
            (json!({"api_version": "sixty"}), "api_version"),
            (json!({"currency": "XXXX"}), "currency"),
            (json!({"bulk_timeout": "0s"}), "bulk_timeout"),
            (
                json!({"not_written": ["stripe_charge_id__c"]}),
                "not_written lists the external ID field",
            ),
            (
                json!({"instance_url": "acme.my.salesforce.com"}),
                "My Domain",
            ),
        ] {
            let e = build(&settings(extra.clone()), None).unwrap_err();
            assert!(e.to_string().contains(want), "{extra}: {e}");
        }
        let cfg = build(
            &settings(json!({
                "api_version": "v61.0",
                "daily_share": 0.25,
                "bulk_read_threshold": 0,
                "batch_size": 200,
            })),
            None,
        )
        .unwrap();
        assert_eq!(cfg.api_version, "61.0");
        assert_eq!(cfg.daily_share, 0.25);
        assert_eq!(cfg.bulk_read_threshold, 0);
        assert_eq!(cfg.batch_size, 200);
    }

    #[test]
    fn secrets_and_urls_take_environment_variables() {
        let mut s = settings(json!({"auth": {
            "client_id": "${ID}",
            "client_secret": "${SECRET}",
            "token_url": "${TOKEN_URL}",
        }}));
        let expand = |v: &str, setting: &str| -> Result<String, ConnectorError> {
            assert!(setting.starts_with("target."), "{setting}");
            Ok(match v {
                "${ID}" => "the-id".into(),
                "${SECRET}" => "the-secret-value".into(),
                "${TOKEN_URL}" => "https://login.example/services/oauth2/token".into(),
                other => other.into(),
            })
        };
        s.expand_env("target", &expand).unwrap();
        assert_eq!(
            s.auth.client_secret.as_ref().unwrap().expose(),
            "the-secret-value"
        );
        let cfg = build(&s, None).unwrap();
        let SalesforceAuth::ClientCredentials {
            token_url,
            client_id,
            ..
        } = &cfg.auth
        else {
            panic!()
        };
        assert_eq!(token_url, "https://login.example/services/oauth2/token");
        assert_eq!(client_id.expose(), "the-id");
        assert_eq!(s.target_role(), TargetRole::Writable);
    }
}
