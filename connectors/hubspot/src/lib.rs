//! HubSpot CRM objects (contacts, companies, deals, custom `2-…` objects) as
//! a recon target keyed by a unique property such as `stripe_charge_id`:
//! windowed reads through the search API past its 10,000-result cap, key
//! lookups through `batch/read`, idempotent backfill through `batch/upsert`
//! with `idProperty`, per-item outcomes of 207 multi-status answers, and a
//! start-up check that the ID property is unique. Every request goes
//! through the shared HTTP policy of `recon_core::http`.
//!
//! With the `emulator` feature, [`emulator`] serves an imitation of the CRM
//! API on 127.0.0.1 for tests and benchmarks.

mod connector;
#[cfg(feature = "emulator")]
pub mod emulator;
mod settings;

pub use connector::{HubSpotConfig, HubSpotObjects, HUBSPOT, SEARCH_CAP};
pub use settings::{HubSpotSettings, DEFAULT_CURRENCY_PROPERTY};
