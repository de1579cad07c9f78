//! `type = "stripe"`: Stripe objects as a job's source of truth.

use std::collections::BTreeMap;

use recon_core::parse::positive_duration;
use recon_core::{
    BuildContext, ConnectorConfig, ConnectorError, Expand, Secret, Source, TargetRole,
};
use serde::Deserialize;

use crate::{StripeConfig, StripeObject, StripeSource};

/// The settings of a Stripe endpoint (source only).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeSettings {
    /// Secret or restricted API key; use `${STRIPE_API_KEY}`.
    pub api_key: Secret,
    /// `charges`, `payment_intents`, `invoices`, `refunds`, `customers`,
    /// `balance_transactions` or `payouts`.
    pub object: StripeObject,
    /// API base URL (default `https://api.stripe.com`).
    pub base_url: Option<String>,
    /// Pinned `Stripe-Version` (default the version recon was written against).
    pub api_version: Option<String>,
    /// Requests per second (default 25 with test keys, 100 with live keys).
    pub requests_per_second: Option<u32>,
    /// Most window slices paged at once (default 32).
    pub concurrency: Option<usize>,
    /// How long Stripe's 429s are retried while no request succeeds
    /// (default `15m`); then the run fails naming this setting.
    pub rate_limit_patience: Option<String>,
    /// Canonical field → JSON path in the object (`email = "receipt_email"`).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// Stripe list filters sent with every list call: balance transactions
    /// `type`, `currency`, `source`, `payout`; payouts `status`,
    /// `destination` (`filters = { type = "charge" }`). Lookups keep only
    /// objects that pass them.
    #[serde(default)]
    pub filters: BTreeMap<String, String>,
}

impl StripeSettings {
    /// The client config for a job's fields.
    pub fn client_config(&self, cx: BuildContext<'_>) -> Result<StripeConfig, ConnectorError> {
        // Stripe's lists are ordered and windowed by `created` (the source
        // sends created[gte]/created[lt]); a window on another field would
        // read the wrong records without a word.
        if let Some(field) = cx.time_field.and_then(|i| cx.schema.fields.get(i)) {
            let path = self
                .fields
                .get(&field.name)
                .cloned()
                .unwrap_or_else(|| self.object.default_path(&field.name));
            if path != "created" {
                return Err(ConnectorError::Config(format!(
                    "the job's time field `{}` reads Stripe's `{path}`, but a Stripe source reads its window by `created` \
                     (created[gte]/created[lt], the order Stripe lists {} in); set time_field = \"created\" \
                     (or map the time field to it: source.fields = {{ {} = \"created\" }})",
                    field.name,
                    self.object.path(),
                    field.name
                )));
            }
        }
        let mut cfg = StripeConfig::new(self.api_key.clone(), self.object);
        if let Some(p) = &self.rate_limit_patience {
            cfg.rate_limit_patience = Some(positive_duration(p, "Stripe rate_limit_patience")?);
        }
        if let Some(u) = &self.base_url {
            cfg.base_url = u.clone();
        }
        if let Some(v) = &self.api_version {
            cfg.api_version = v.clone();
        }
        cfg.requests_per_second = self.requests_per_second;
        if let Some(c) = self.concurrency {
            cfg.concurrency = c;
        }
        cfg.filters = self
            .filters
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        cfg.field_paths = cx
            .schema
            .fields
            .iter()
            .map(|f| self.fields.get(&f.name).cloned())
            .collect();
        Ok(cfg)
    }
}

#[async_trait::async_trait]
impl ConnectorConfig for StripeSettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        Some(("fields", &self.fields))
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.api_key = Secret::new(expand(self.api_key.expose(), &format!("{side}.api_key"))?);
        if let Some(u) = &mut self.base_url {
            *u = expand(u, &format!("{side}.base_url"))?;
        }
        Ok(())
    }

    fn target_role(&self) -> TargetRole {
        TargetRole::SourceOnly
    }

    async fn build_source(&self, cx: BuildContext<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(StripeSource::new(
            self.client_config(cx)?,
            cx.schema,
        )?))
    }

    fn kind(&self) -> &'static str {
        "Stripe"
    }

    fn type_name() -> &'static str {
        "stripe"
    }

    fn url_setting() -> Option<&'static str> {
        Some("base_url")
    }
}
