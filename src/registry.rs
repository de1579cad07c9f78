//! The connectors this binary knows: one line each. A connector crate
//! brings its own settings struct (serde, defaults, validation) that builds
//! the connector ([`recon_core::ConnectorConfig`]); a job's `type = "…"`
//! picks the line. Adding a connector is one new crate and one line here.

use recon_core::ConnectorConfig;
use serde::Deserialize;

macro_rules! registry {
    ($($(#[$doc:meta])* $variant:ident => $settings:ty,)*) => {
        /// Where records come from or go to: a job's `source` or `target`
        /// table, tagged by `type`.
        #[derive(Debug, Clone, Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        // Read once per job from the config file: a few hundred bytes per
        // value cost nothing, and boxing would only add derefs everywhere.
        #[allow(clippy::large_enum_variant)]
        pub enum EndpointConfig {
            $($(#[$doc])* $variant($settings),)*
        }

        impl EndpointConfig {
            /// The connector's own settings.
            pub fn connector(&self) -> &dyn ConnectorConfig {
                match self {
                    $(EndpointConfig::$variant(c) => c,)*
                }
            }

            /// The connector's own settings, to expand `${VAR}`s in.
            pub fn connector_mut(&mut self) -> &mut dyn ConnectorConfig {
                match self {
                    $(EndpointConfig::$variant(c) => c,)*
                }
            }
        }
    };
}

registry! {
    /// `type = "file"`: a CSV or JSON Lines export.
    File => recon_file::FileSettings,
    /// `type = "sql"`: a PostgreSQL, MySQL/MariaDB or SQLite table.
    Sql => recon_sql::SqlSettings,
    /// `type = "stripe"`: Stripe objects (source only).
    Stripe => recon_stripe::StripeSettings,
    /// `type = "hubspot"`: HubSpot CRM objects keyed by a unique property.
    Hubspot => recon_hubspot::HubSpotSettings,
    /// `type = "shopify"`: Shopify orders (source only).
    Shopify => recon_shopify::ShopifySettings,
    /// `type = "salesforce"`: Salesforce sObjects keyed by an external ID field.
    Salesforce => recon_salesforce::SalesforceSettings,
}
