//! Shopify orders as a recon source, through the GraphQL Admin API
//! (`POST /admin/api/{version}/graphql.json` with `X-Shopify-Access-Token`):
//! cursor paging (`first: 250`, `after`, `pageInfo`), the window as search
//! syntax on `created_at` (or `updated_at`), amounts from
//! `totalPriceSet.shopMoney` converted exactly from decimal strings, pacing
//! by the cost bucket Shopify reports in every response, and bulk
//! operations for large windows. Shopify's REST Admin API is legacy (since
//! October 2024), so this connector speaks GraphQL only.
//!
//! With the `emulator` feature, [`emulator`] serves an imitation of the
//! GraphQL Admin API on 127.0.0.1 for tests and benchmarks.

#[cfg(feature = "emulator")]
pub mod emulator;
mod settings;
mod source;
pub mod webhook;

pub use settings::{ShopifySettings, DEFAULT_BULK_THRESHOLD};
pub use source::{BulkMode, OrderKey, ShopifyConfig, ShopifySource, TimeField, SHOPIFY};
