//! Core types shared by every recon connector.
//!
//! - [`Money`] and [`Currency`]: exact integer minor units with the ISO 4217
//!   exponent table; decimal strings are converted digit by digit, never
//!   through floating point. [`MinorUnits`] declares a provider's own API
//!   minor units (Stripe's ISK, MGA) and converts them exactly.
//! - [`Record`], [`Value`], [`Schema`]: the canonical record, keyed by
//!   external ID, with typed values in schema order.
//! - [`Source`] and [`Target`]: async streams of pages, point lookups by key,
//!   and idempotent writes, implemented once per connector crate (the sqlx
//!   model: one trait, one implementation per backend).
//!
//! This crate does no I/O of its own.

mod connector;
mod endpoint;
mod error;
#[cfg(feature = "http")]
pub mod http;
mod money;
pub mod parse;
mod probe;
mod record;
mod redact;

#[cfg(feature = "http")]
pub use connector::{Delivery, Signed, WebhookEnvelope};
pub use connector::{
    DuplicateCopy, FileFeed, Page, Source, Target, Unplaced, Window, WriteMode, WriteOutcome,
};
pub use endpoint::{BuildContext, ConnectorConfig, Expand, TargetRole, TokenStore};
pub use error::{ConnectorError, Location};
pub use money::{format_minor, Currency, MinorUnits, Money, MoneyError};
pub use probe::Probe;
pub use record::{
    format_timestamp, AmountFormat, Field, FieldKind, Record, Schema, Value, ValueRef,
};
pub use redact::{
    redact_url, redact_url_path, register_secret, scrub, url_secrets, Secret, MIN_SCRUB_LEN,
};

/// `bytes` as lower-case hex, two digits each: how digests and checksums
/// are written (plan and payload digests, webhook signatures, token names,
/// migration checksums).
pub fn lower_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
