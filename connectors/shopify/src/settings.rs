//! `type = "shopify"`: Shopify orders through the GraphQL Admin API, as a
//! job's source of truth.

use std::collections::BTreeMap;

use recon_core::parse::positive_duration;
use recon_core::{
    BuildContext, ConnectorConfig, ConnectorError, Expand, Secret, Source, TargetRole,
};
use serde::Deserialize;

use crate::{BulkMode, OrderKey, ShopifyConfig, ShopifySource, TimeField};

/// Above this many expected orders, `bulk = "auto"` reads with a bulk
/// operation.
pub const DEFAULT_BULK_THRESHOLD: u64 = 25_000;

/// The settings of a Shopify endpoint (source only).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShopifySettings {
    /// `https://{shop}.myshopify.com`.
    pub shop_url: String,
    /// Admin API access token; use `${SHOPIFY_TOKEN}`.
    pub token: Secret,
    /// API version (default `2025-01`).
    pub api_version: Option<String>,
    /// `legacy_id` (default), `gid` or `name`.
    pub key: Option<OrderKey>,
    /// `created_at` (default) or `updated_at`.
    pub time_field: Option<TimeField>,
    /// `auto` (default), `always` or `never`.
    pub bulk: Option<String>,
    /// Above this many expected orders, `auto` uses a bulk operation (default 25000).
    pub bulk_threshold: Option<u64>,
    /// Orders per page, 1..=250 (default 250).
    pub page_size: Option<u32>,
    /// How long THROTTLED answers may hold the read without a successful
    /// query before the run fails, e.g. `"30m"` (default 15m).
    pub rate_limit_patience: Option<String>,
}

impl ShopifySettings {
    /// The client config.
    pub fn client_config(&self) -> Result<ShopifyConfig, ConnectorError> {
        let mut cfg = ShopifyConfig::new(&self.shop_url, self.token.clone());
        if let Some(p) = &self.rate_limit_patience {
            cfg.rate_limit_patience = positive_duration(p, "Shopify rate_limit_patience")?;
        }
        if let Some(v) = &self.api_version {
            cfg.api_version = v.clone();
        }
        if let Some(k) = self.key {
            cfg.key = k;
        }
        if let Some(t) = self.time_field {
            cfg.time_field = t;
        }
        cfg.bulk = match self.bulk.as_deref().unwrap_or("auto") {
            "auto" => BulkMode::Auto(self.bulk_threshold.unwrap_or(DEFAULT_BULK_THRESHOLD)),
            "always" => BulkMode::Always,
            "never" => BulkMode::Never,
            other => {
                return Err(ConnectorError::Config(format!(
                    "Shopify bulk = \"{other}\": expected auto, always or never"
                )))
            }
        };
        if let Some(p) = self.page_size {
            cfg.page_size = p;
        }
        Ok(cfg)
    }
}

#[async_trait::async_trait]
impl ConnectorConfig for ShopifySettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        None
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.token = Secret::new(expand(self.token.expose(), &format!("{side}.token"))?);
        self.shop_url = expand(&self.shop_url, &format!("{side}.shop_url"))?;
        Ok(())
    }

    fn target_role(&self) -> TargetRole {
        TargetRole::SourceOnly
    }

    async fn build_source(&self, cx: BuildContext<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(ShopifySource::new(
            self.client_config()?,
            cx.schema,
        )?))
    }

    fn kind(&self) -> &'static str {
        "Shopify"
    }

    fn type_name() -> &'static str {
        "shopify"
    }

    fn url_setting() -> Option<&'static str> {
        Some("shop_url")
    }
}
