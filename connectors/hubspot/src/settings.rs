//! `type = "hubspot"`: HubSpot CRM objects keyed by a unique property, as
//! a job's source or target.

use std::collections::BTreeMap;

use recon_core::parse::positive_duration;
use recon_core::{
    AmountFormat, BuildContext, ConnectorConfig, ConnectorError, Expand, Secret, Source, Target,
    TargetRole,
};
use serde::Deserialize;

use crate::{HubSpotConfig, HubSpotObjects};

/// The currency property of deals, used when a job with money names none.
pub const DEFAULT_CURRENCY_PROPERTY: &str = "deal_currency_code";

/// The settings of a HubSpot endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubSpotSettings {
    /// Private app access token; use `${HUBSPOT_TOKEN}`.
    pub token: Secret,
    /// `contacts`, `companies`, `deals`, or a custom object's `2-…` ID.
    pub object_type: String,
    /// The property holding the external ID (created with `hasUniqueValue: true`).
    pub id_property: String,
    /// Canonical field → property; unlisted fields use their own name.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Property holding amounts' currency (default `deal_currency_code`).
    pub currency_property: Option<String>,
    /// Date property windows filter on (default: the property of the job's
    /// time field, else `createdate`).
    pub date_property: Option<String>,
    /// `major` (default: HubSpot stores `29.99`) or `minor`.
    pub amount_format: Option<AmountFormat>,
    /// API base URL (default `https://api.hubapi.com`).
    pub base_url: Option<String>,
    /// General limit per rolling 10 s (default 100; set your tier's).
    pub requests_per_10s: Option<u32>,
    /// The search API's limit per second (default 5).
    pub search_per_second: Option<u32>,
    /// How long 429s (other apps using the account's budget) may hold
    /// the run without a successful call before it fails, e.g. `"30m"`
    /// (default 15m).
    pub rate_limit_patience: Option<String>,
}

impl HubSpotSettings {
    /// The client config for a job's fields.
    pub fn client_config(&self, cx: BuildContext<'_>) -> Result<HubSpotConfig, ConnectorError> {
        let mut cfg = HubSpotConfig::new(
            self.token.clone(),
            &self.object_type,
            &self.id_property,
            cx.names(&self.properties),
        );
        cfg.currency_property =
            cx.currency(self.currency_property.as_ref(), DEFAULT_CURRENCY_PROPERTY);
        // Windows filter on the property that holds the job's time field
        // (the source's creation time), unless another date property is named.
        match (&self.date_property, cx.time_field) {
            (Some(d), _) => cfg.date_property = d.clone(),
            (None, Some(t)) => cfg.date_property = cfg.properties[t].clone(),
            (None, None) => {}
        }
        if let Some(a) = self.amount_format {
            cfg.amount_format = a;
        }
        if let Some(u) = &self.base_url {
            cfg.base_url = u.clone();
        }
        if let Some(n) = self.requests_per_10s {
            cfg.requests_per_10s = n;
        }
        if let Some(p) = &self.rate_limit_patience {
            cfg.rate_limit_patience = positive_duration(p, "HubSpot rate_limit_patience")?;
        }
        if let Some(n) = self.search_per_second {
            cfg.search_per_second = n;
        }
        Ok(cfg)
    }

    fn build(&self, cx: BuildContext<'_>) -> Result<HubSpotObjects, ConnectorError> {
        HubSpotObjects::new(self.client_config(cx)?, cx.schema)
    }
}

#[async_trait::async_trait]
impl ConnectorConfig for HubSpotSettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        Some(("properties", &self.properties))
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.token = Secret::new(expand(self.token.expose(), &format!("{side}.token"))?);
        if let Some(u) = &mut self.base_url {
            *u = expand(u, &format!("{side}.base_url"))?;
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
        "HubSpot"
    }

    fn type_name() -> &'static str {
        "hubspot"
    }

    fn url_setting() -> Option<&'static str> {
        Some("base_url")
    }
}
