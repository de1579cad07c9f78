//! Salesforce sObjects (standard or custom, e.g. `Payment__c`) as a recon
//! target keyed by an external ID field such as `Stripe_Charge_Id__c`:
//! windowed SOQL reads paged with `nextRecordsUrl` or, for large windows, a
//! Bulk API 2.0 query job; lookups by chunked `IN (…)` queries; idempotent
//! backfill through sObject Collections upserts (200 per call) or a Bulk
//! API 2.0 ingest job; OAuth 2.0 client credentials refreshed once on
//! `INVALID_SESSION_ID`; a describe-based check that the key is an
//! External ID and Unique; and a guard on the org's daily API allowance.
//! Every request goes through the shared HTTP policy of `recon_core::http`.
//!
//! Modules: [`settings`] (`type = "salesforce"`), `auth` (tokens),
//! [`soql`] (query text), `describe` (field types), `convert` (values),
//! [`limits`] (`Sforce-Limit-Info`), `source` (reads), `target` (writes).
//!
//! With the `emulator` feature, [`emulator`] serves an imitation of the
//! Salesforce REST API and Bulk API 2.0 on 127.0.0.1 for tests and
//! benchmarks.

mod auth;
mod connector;
mod convert;
mod describe;
pub mod limits;
pub mod settings;
pub mod soql;
mod source;
mod target;

#[cfg(feature = "emulator")]
pub mod emulator;

pub use connector::{
    salesforce_error_body, SalesforceAuth, SalesforceConfig, SalesforceObjects, SALESFORCE,
};
pub use settings::{AuthSettings, SalesforceSettings};
pub use source::BULK_RESULTS_PAGE;
pub use target::{BULK_JOB_CALLS, COLLECTION};
