//! Stripe as a recon source: charges, payment intents, invoices, refunds,
//! customers, balance transactions and payouts, read through the list endpoints over a `created` window
//! (`created[gte]`/`created[lt]`, `limit=100`, `starting_after` cursors) and
//! the retrieve endpoints for edge confirmation (404 or `deleted: true` is
//! missing). Every request goes through the shared HTTP policy of
//! `recon_core::http`: a rate limiter sized to Stripe's documented limit
//! (25 requests/s in test mode, 100/s in live mode), retries with backoff and
//! full jitter honouring `Retry-After` and `Stripe-Should-Retry`, and
//! `Request-Id` in every error. The API key never appears in logs or errors.
//!
//! With the `emulator` feature, [`emulator`] serves a faithful imitation of
//! the API on 127.0.0.1 for tests, benchmarks and `recon demo`.

#[cfg(feature = "emulator")]
pub mod emulator;
mod models;
mod settings;
mod source;
pub mod webhook;

pub use models::{FieldPaths, StripeObject};
pub use settings::StripeSettings;
pub use source::{StripeConfig, StripeSource, DEFAULT_API_VERSION, STRIPE};
