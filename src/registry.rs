//! The connectors this binary knows: one line each. A connector crate
//! brings its own settings struct (serde, defaults, validation) that builds
//! the connector ([`recon_core::ConnectorConfig`]); a job's `type = "…"`
//! picks the line. Adding a connector is one new crate and one line here.

use recon_core::{ConnectorConfig, WebhookEnvelope};
use serde::{Deserialize, Serialize};

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

            /// The endpoint's `type` as the config spells it (`stripe`, `sql`).
            pub fn type_name(&self) -> &'static str {
                match self {
                    $(EndpointConfig::$variant(_) => <$settings as ConnectorConfig>::type_name(),)*
                }
            }

            /// The setting that holds the address of the endpoint's system
            /// (`base_url`), `None` for a local file.
            pub fn url_setting(&self) -> Option<&'static str> {
                match self {
                    $(EndpointConfig::$variant(_) => <$settings as ConnectorConfig>::url_setting(),)*
                }
            }

            /// Every connector's `type`, in registry order.
            pub fn type_names() -> Vec<&'static str> {
                vec![$(<$settings as ConnectorConfig>::type_name(),)*]
            }

            /// Every setting that holds a system's address, in registry
            /// order, each once (`url`, `base_url`, …).
            pub fn url_settings() -> Vec<&'static str> {
                let mut all: Vec<&'static str> = Vec::new();
                $(
                    if let Some(u) = <$settings as ConnectorConfig>::url_setting() {
                        if !all.contains(&u) {
                            all.push(u);
                        }
                    }
                )*
                all
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
    /// `type = "quickbooks"`: QuickBooks Online invoices or sales receipts.
    Quickbooks => recon_quickbooks::QuickbooksSettings,
    /// `type = "http"`: any REST API, its requests, paging, fields and writes declared.
    Http => recon_http::HttpSettings,
}

macro_rules! envelopes {
    ($($(#[$doc:meta])* $variant:ident => $envelope:expr,)*) => {
        /// How a gap is wrapped for the handler with `backfill.via =
        /// "webhook"`: `envelope = "none"` (the record itself) or as a
        /// provider delivers its webhooks. Each provider's envelope lives in
        /// its connector crate ([`WebhookEnvelope`]).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Envelope {
            /// The record itself.
            #[default]
            None,
            $($(#[$doc])* $variant,)*
        }

        impl Envelope {
            /// Every envelope, `None` first.
            pub const ALL: &'static [Envelope] = &[Envelope::None, $(Envelope::$variant,)*];

            /// The provider's envelope; `None` for the record itself.
            pub fn provider(self) -> Option<&'static dyn WebhookEnvelope> {
                match self {
                    Envelope::None => None,
                    $(Envelope::$variant => Some(&$envelope),)*
                }
            }
        }
    };
}

envelopes! {
    /// `envelope = "stripe"`: a Stripe `event` whose `data.object` is the record.
    Stripe => recon_stripe::webhook::StripeEnvelope,
    /// `envelope = "shopify"`: the order with Shopify's webhook headers.
    Shopify => recon_shopify::webhook::ShopifyEnvelope,
}

#[cfg(test)]
mod tests {
    use super::EndpointConfig;

    /// Each connector's `type_name` is the tag the config is parsed with:
    /// a table of that type alone fails on a missing setting, never on an
    /// unknown `type`.
    #[test]
    fn type_names_are_the_config_tags() {
        let names = EndpointConfig::type_names();
        assert_eq!(names.len(), 8, "{names:?}");
        for name in names {
            let e = serde_json::from_value::<EndpointConfig>(serde_json::json!({ "type": name }))
                .unwrap_err()
                .to_string();
            assert!(e.contains("missing field"), "type `{name}`: {e}");
        }
        let e = serde_json::from_value::<EndpointConfig>(serde_json::json!({ "type": "nope" }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant"), "{e}");
    }

    #[test]
    fn url_settings_are_listed_once_each() {
        assert_eq!(
            EndpointConfig::url_settings(),
            ["url", "base_url", "shop_url", "instance_url"]
        );
    }
}
