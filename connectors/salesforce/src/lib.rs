//! Salesforce sObjects (standard or custom, e.g. `Payment__c`) as a recon
//! target keyed by an external ID field such as `Stripe_Charge_Id__c`.
//!
//! With the `emulator` feature, [`emulator`] serves an imitation of the
//! Salesforce REST API and Bulk API 2.0 on 127.0.0.1 for tests and
//! benchmarks.

#[cfg(feature = "emulator")]
pub mod emulator;
