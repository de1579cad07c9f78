//! What differs between the two backends, behind one trait: SQL fragments,
//! session setup, capabilities, and the few operations whose whole shape
//! differs (reading the open history, taking and probing the run lock).
//! Implemented by [`crate::sqlite::Sqlite`] and [`crate::postgres::Postgres`];
//! everything else is one SQL text for both.

use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::migrate::Migrator;

use crate::history::OpenBuilder;
use crate::postgres::Postgres;
use crate::sqlite::Sqlite;
use crate::{Backend, RunLock, StateError, StateStore};

/// One backend's dialect. Static: a store holds `&'static dyn Dialect`.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// Which backend this is.
    fn backend(&self) -> Backend;
    /// Name for messages.
    fn name(&self) -> &'static str;
    /// What to check when the database cannot be opened.
    fn connect_hint(&self) -> &'static str;
    /// Statements run on every new connection of the pool.
    fn session_setup(&self) -> &'static [&'static str];
    /// Statements run once per open, with what each does (for errors).
    fn store_setup(&self) -> &'static [(&'static str, &'static str)];
    /// The statement that begins a write transaction, if not sqlx's own.
    fn begin_write(&self) -> Option<&'static str>;
    /// Whether two writes may run at once ([`StateStore::concurrent_writes`]).
    fn concurrent_writes(&self) -> bool;
    /// A derived table `v(columns…)` of the rows of one bound JSON array of
    /// arrays (`[["a", "b"], …]`), expanded by the database.
    fn json_rows(&self, param: &str, columns: &[&str]) -> String;
    /// A derived table `v(external_id)` of the strings of one bound JSON
    /// array (`["a", "b", …]`).
    fn json_keys(&self, param: &str) -> String;
    /// `IN (…)` (or its equivalent) over the keys of one bound JSON array of
    /// one-element rows, probed through the primary key.
    fn keys_in(&self, param: &str) -> String;
    /// Run in a transaction before it records planned ledger batches.
    fn before_planned_batches(&self) -> Option<&'static str>;
    /// How a ledger batch's `keys` (JSON text, alias `b`) is searched for
    /// the JSON-quoted key `$3`: a fast text test, and the derived table
    /// `k(value)` of its elements.
    fn key_in_batch(&self) -> (&'static str, &'static str);
    /// The embedded migrations.
    fn migrator(&self) -> &'static Migrator;
    /// Their folder, relative to the repository root.
    fn folder(&self) -> &'static str;
    /// Taken at the start of the migration transaction (binds the lock key).
    fn migration_lock(&self) -> Option<&'static str>;
    /// Counts the tables named `recon_schema_version` (0 or 1).
    fn legacy_table_count(&self) -> &'static str;
    /// Records one step of the old runner in `_sqlx_migrations`.
    fn legacy_import(&self) -> &'static str;
    /// The schema a new store is created from in one step, if the backend
    /// has one ([`crate::migrate`]).
    fn squashed(&self) -> Option<&'static Squashed>;
    /// Adds every open discrepancy of `job` to `open`.
    fn read_open_history<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
        open: &'a mut OpenBuilder,
    ) -> BoxFuture<'a, Result<(), StateError>>;
    /// Takes `job`'s run lock for `owner` (see [`crate::lock`]).
    fn acquire_lock<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
        owner: String,
        stale_after: Duration,
        every: Duration,
    ) -> BoxFuture<'a, Result<RunLock, StateError>>;
    /// Whether the holder of `job`'s run lock is provably gone.
    fn lock_holder_gone<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
    ) -> BoxFuture<'a, Result<bool, StateError>>;
}

/// A backend's whole schema at one migration, for new stores: what the
/// migrations up to `version` leave, generated from them and checked
/// against them by a test.
pub(crate) struct Squashed {
    /// The DDL, as the database itself records it, in creation order; its
    /// first line is `-- schema at migration N`.
    pub sql: &'static str,
    /// Counts the objects of the database's schema (0 on a new store).
    pub objects: &'static str,
    /// Records the migrations as applied: binds one JSON array of
    /// `[version, description, hex checksum]`.
    pub record: &'static str,
}

impl Squashed {
    /// The migration the schema is at, from the file's first line.
    pub fn version(&self) -> Option<i64> {
        let first = self.sql.lines().next()?;
        first
            .strip_prefix("-- schema at migration ")?
            .trim()
            .parse()
            .ok()
    }
}

impl Backend {
    /// The dialect of this backend: the one place a backend is matched.
    pub(crate) fn dialect(self) -> &'static dyn Dialect {
        match self {
            Backend::Sqlite => &Sqlite,
            Backend::Postgres => &Postgres,
        }
    }
}
