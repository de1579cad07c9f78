//! The run state store: what recon remembers between runs.
//!
//! One small database, SQLite by default (`sqlite://PATH`) or PostgreSQL
//! (`postgres://…`) when several machines share the work, reached through
//! sqlx's `Any` driver with runtime SQL (no query macros, no compile-time database).
//! One trait per role ([`roles`]), implemented by [`StateStore`] on both
//! backends; what differs between them is one dialect each (`sqlite.rs`,
//! `postgres.rs`), so callers never match on the backend.
//!
//! - **Runs** (`recon_runs`): one row per run, `running` until
//!   [`RunLog::finish_run`]. A run still `running` when the next run of
//!   its job starts died (the run lock guarantees none is live), so
//!   [`RunLog::start_run`] marks it `crashed`.
//!   [`RunLog::last_success_end`] feeds the `since-last-success` window.
//! - **Backfill ledger** (`recon_backfill_items`, a view of one row per
//!   item over `recon_ledger_batches`, one row per write batch, and
//!   `recon_ledger_items`, the items whose outcome differs from their
//!   batch's): every planned write and its outcome, so that a run started
//!   again after a crash writes each missing record exactly once. A plan's id is the id of the run that made
//!   it; that link is how a crashed run's `planned` items become
//!   `superseded`.
//! - **Discrepancy history** (`recon_discrepancies`): when each open
//!   discrepancy was first and last seen, and when it was resolved, so that
//!   reports can say "new", "open since …" and "resolved".
//! - **Run lock** (`recon_locks`, plus a PostgreSQL advisory lock): at most
//!   one live run per job, whatever the scheduler does. See [`RunLock`].
//!   [`ReportReads::lock_holder_gone`] tells `recon runs` that a run still
//!   `running` was killed.
//! - **Connector secrets** (`recon_connector_secrets`, [`tokens`]): what a
//!   connector must keep between runs, such as the newest OAuth refresh
//!   token QuickBooks Online issued, sealed by the connector before it is
//!   saved ([`recon_core::TokenStore`], reached through
//!   `BuildContext::tokens`).
//! - **Reviewed plans** (`recon_plans`): each plan.jsonl a dry run wrote,
//!   with its SHA-256, window and size, so that `recon apply --plan`
//!   applies only a plan recon made, unedited ([`PlanRecord`]).
//!
//! Every instant is stored as fixed-width RFC 3339 UTC text with nanoseconds
//! (`2026-11-28T00:00:00.000000000Z`): exact, readable in any SQL client, and
//! ordered when compared as text. The schema is created and upgraded by the
//! sqlx migrations in `state/migrations/` (see `migrate`).

mod backend;
mod error;
mod history;
mod ledger;
mod lock;
mod migrate;
#[cfg(test)]
mod plans_tests;
mod postgres;
mod reads;
pub mod roles;
mod runs;
mod sqlite;
mod store;
mod story;
#[cfg(test)]
mod tests;
pub mod tokens;
mod types;
pub mod webhook;

pub use error::StateError;
pub use lock::RunLock;
pub use roles::{
    BackfillLedger, DeliveryLedger, DiscrepancyHistory, ReportReads, RunLocks, RunLog,
};
pub use store::StateStore;
pub(crate) use store::{friendly, json_text, random_u64, stable_hash, ts_text, JSON_BATCH};
pub use story::{ClosedStreak, DiscrepancyStreak, IdRecords, ItemRecord, RunTotals};
pub use tokens::LazyTokens;
pub use types::{
    discrepancy_id, Backend, BatchOutcome, Class, DeltaBuilder, DiscrepancyDelta, DiscrepancyMap,
    DiscrepancySet, ItemStatus, LedgerBatch, LedgerItem, OpenHistory, Persisting, PlanRecord,
    RunRow, RunStatus, RUN_STATUSES,
};

/// Every role trait, for callers that use the store whole:
/// `use recon_state::prelude::*;`.
pub mod prelude {
    pub use crate::roles::{
        BackfillLedger, DeliveryLedger, DiscrepancyHistory, ReportReads, RunLocks, RunLog,
    };
}
