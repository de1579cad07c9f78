//! QuickBooks Online (Intuit's Accounting API v3) invoices or sales
//! receipts of one company as a recon target, and as a source:
//!
//! - reads over the window on `MetaData.CreateTime` or `TxnDate` through
//!   the query endpoint, paged with `STARTPOSITION`/`MAXRESULTS` (at most
//!   1000), `minorversion` pinned and configurable ("Query operations and
//!   syntax",
//!   https://developer.intuit.com/app/developer/qbo/docs/learn/explore-the-quickbooks-online-api/data-queries);
//! - the external ID in `DocNumber` (looked up with batched `IN`), a
//!   custom field by name or `PrivateNote` (looked up by one widened read:
//!   no documented filter exists on either);
//! - money exact: `TotalAmt` read from its JSON text, in `CurrencyRef` or
//!   the company's home currency (`Preferences.CurrencyPrefs`);
//! - duplicates (several transactions with one external ID) reported with
//!   every QuickBooks `Id`; recon never deletes or voids;
//! - writes that cannot book a sale twice (see `target`): insert only,
//!   looked up right before creating, batched creates with a deterministic
//!   `requestid`, sparse `SyncToken` repairs for `upsert`;
//! - OAuth 2.0 with rotating refresh tokens saved, encrypted, in the state
//!   store (see `auth`);
//! - Intuit's throttles paced by the shared HTTP policy, `intuit_tid` in
//!   every error (see `client`).
//!
//! With the `emulator` feature, [`emulator`] serves an imitation of the API
//! and the token endpoint on 127.0.0.1 for tests; its module docs cite the
//! Intuit page of each behaviour.

pub mod auth;
pub mod client;
mod connector;
pub mod settings;
mod target;

#[cfg(feature = "emulator")]
pub mod emulator;

pub use client::{quickbooks_error_body, Environment, QUICKBOOKS};
pub use connector::{CustomerChoice, Placement, QboConfig, QuickBooks, TimeField};
pub use settings::{CustomerSettings, QuickbooksSettings};
pub use target::request_id;
