//! The run state store: what recon remembers between runs.
//!
//! One small database, SQLite by default (`sqlite://PATH`) or PostgreSQL
//! (`postgres://…`) when several machines share the work, reached through
//! sqlx's `Any` driver with runtime SQL (no query macros, no compile-time database).
//!
//! - **Runs** (`recon_runs`): one row per run, `running` until
//!   [`StateStore::finish_run`]. A run still `running` when the next run of
//!   its job starts died (the run lock guarantees none is live), so
//!   [`StateStore::start_run`] marks it `crashed`.
//!   [`StateStore::last_success_end`] feeds the `since-last-success` window.
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
//!   [`StateStore::lock_holder_gone`] tells `recon runs` that a run still
//!   `running` was killed.
//! - **Reviewed plans** (`recon_plans`): each plan.jsonl a dry run wrote,
//!   with its SHA-256, window and size, so that `recon apply --plan`
//!   applies only a plan recon made, unedited ([`PlanRecord`]).
//!
//! Every instant is stored as fixed-width RFC 3339 UTC text with nanoseconds
//! (`2026-11-28T00:00:00.000000000Z`): exact, readable in any SQL client, and
//! ordered when compared as text. The schema is created and upgraded by the
//! sqlx migrations in `state/migrations/` (see `migrate`).

mod lock;
mod migrate;
#[cfg(test)]
mod plans_tests;
mod probe;
mod story;
#[cfg(test)]
mod tests;
pub mod webhook;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::TryStreamExt;
use jiff::Timestamp;
use recon_core::{redact_url, Window};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyConnection, AnyPool, Connection, Row, Transaction};

pub use lock::RunLock;
pub use story::{ClosedStreak, DiscrepancyStreak, IdRecords, ItemRecord, RunTotals};

/// How long opening the first connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a SQLite connection waits for another writer before failing.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 30_000;

/// Run statuses, in the order of a run's life.
pub const RUN_STATUSES: [&str; 5] = ["running", "clean", "discrepancies", "failed", "crashed"];

/// The status of a run in `recon_runs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Started, not finished (or its process died: see [`RunStatus::Crashed`]).
    Running,
    /// Finished with nothing open.
    Clean,
    /// Finished with discrepancies left open.
    Discrepancies,
    /// Stopped by an error (exit 2).
    Failed,
    /// Its process ended without finishing it; found by a later run.
    Crashed,
}

impl RunStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Clean => "clean",
            RunStatus::Discrepancies => "discrepancies",
            RunStatus::Failed => "failed",
            RunStatus::Crashed => "crashed",
        }
    }

    /// Whether a run may finish with this status.
    pub fn is_final(self) -> bool {
        self != RunStatus::Running
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = StateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "running" => Ok(RunStatus::Running),
            "clean" => Ok(RunStatus::Clean),
            "discrepancies" => Ok(RunStatus::Discrepancies),
            "failed" => Ok(RunStatus::Failed),
            "crashed" => Ok(RunStatus::Crashed),
            _ => Err(StateError::Invalid(format!(
                "unknown run status `{s}`; expected one of {}",
                RUN_STATUSES.join(", ")
            ))),
        }
    }
}

impl TryFrom<&str> for RunStatus {
    type Error = StateError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<std::convert::Infallible> for StateError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// Backfill actions.
const ACTIONS: [&str; 2] = ["insert", "update"];

/// Why the state store could not do what was asked. Messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The URL names no supported backend.
    #[error("unsupported state URL `{url}`: {reason}")]
    UnsupportedUrl {
        /// The URL, password redacted.
        url: String,
        /// What is wrong and what to use instead.
        reason: String,
    },
    /// The database could not be reached or opened.
    #[error("cannot open the state database {url}: {source}; {hint}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// What to check.
        hint: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The schema could not be created or upgraded.
    #[error("cannot prepare the schema of the state database {url}: {message}")]
    Migrate {
        /// The URL, password redacted.
        url: String,
        /// What failed.
        message: String,
    },
    /// Another run of the job holds the run lock.
    #[error("job `{job}` is already running (since {since}, owner {owner}); {hint}")]
    Locked {
        /// The job.
        job: String,
        /// Who holds the lock (`host:pid:random`), or `unknown`.
        owner: String,
        /// When it was acquired, RFC 3339, or `an unknown time`.
        since: String,
        /// What happens if that run died, and what to do.
        hint: String,
    },
    /// No run has this id.
    #[error("no run `{0}` in the state database; pass the id that start_run returned")]
    UnknownRun(String),
    /// An argument is outside what the store accepts.
    #[error("{0}")]
    Invalid(String),
    /// A statement failed.
    #[error("state database {url}: {context}: {source}")]
    Database {
        /// The URL, password redacted.
        url: String,
        /// What recon was doing.
        context: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A stored value cannot be read back.
    #[error("state database {url}: {context}: {detail}; was the database edited by hand?")]
    Corrupt {
        /// The URL, password redacted.
        url: String,
        /// What was being read.
        context: String,
        /// The offending value.
        detail: String,
    },
}

/// Which database holds the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

impl Backend {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        }
    }
}

/// The status of one backfill item in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ItemStatus {
    /// In a plan, not yet written.
    Planned,
    /// Written to the target.
    Applied,
    /// The last write attempt failed.
    Failed,
    /// Its plan belonged to a run that crashed; a later run plans afresh.
    Superseded,
    /// The connection was lost while it was in flight: it may or may not
    /// be in the target. The next run settles it by key lookup.
    Unknown,
}

impl ItemStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::Planned => "planned",
            ItemStatus::Applied => "applied",
            ItemStatus::Failed => "failed",
            ItemStatus::Superseded => "superseded",
            ItemStatus::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ItemStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ItemStatus {
    type Err = StateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "planned" => Ok(ItemStatus::Planned),
            "applied" => Ok(ItemStatus::Applied),
            "failed" => Ok(ItemStatus::Failed),
            "superseded" => Ok(ItemStatus::Superseded),
            "unknown" => Ok(ItemStatus::Unknown),
            _ => Err(StateError::Invalid(format!(
                "unknown backfill item status `{s}`; expected planned, applied, failed, superseded or unknown"
            ))),
        }
    }
}

/// The class of a discrepancy, as kept in its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// In the source, missing in the target.
    Gap,
    /// In the target, missing in the source.
    Orphan,
    /// In both, a compared field differs.
    Mismatch,
    /// The ID appears more than once on one side.
    Duplicate,
}

impl Class {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Gap => "gap",
            Class::Orphan => "orphan",
            Class::Mismatch => "mismatch",
            Class::Duplicate => "duplicate",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Class {
    type Err = StateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gap" => Ok(Class::Gap),
            "orphan" => Ok(Class::Orphan),
            "mismatch" => Ok(Class::Mismatch),
            "duplicate" => Ok(Class::Duplicate),
            _ => Err(StateError::Invalid(format!(
                "unknown discrepancy class `{s}`; expected gap, orphan, mismatch or duplicate"
            ))),
        }
    }
}

/// The stable ID of a discrepancy across runs: `{job}:{class}:{external_id}`.
pub fn discrepancy_id(job: &str, class: Class, external_id: &str) -> String {
    format!("{job}:{class}:{external_id}")
}

/// One item of a backfill plan, as the ledger holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerItem {
    /// The record's external ID.
    pub external_id: String,
    /// `insert` or `update`.
    pub action: String,
    /// Where the item stands.
    pub status: ItemStatus,
    /// Write attempts so far.
    pub attempts: i64,
    /// The error of the last attempt, if it failed.
    pub last_error: Option<String>,
}

/// One write batch of a backfill, as the ledger records it before the
/// batch is written: one row for all its items (see migration 10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerBatch<'a> {
    /// Its number within the plan, from 0, in the order written.
    pub seq: u64,
    /// `insert` or `update`: every item of a batch has the same.
    pub action: &'static str,
    /// The external IDs it writes.
    pub keys: Vec<&'a str>,
}

/// The outcome of one write batch, as the ledger records it after the
/// write: `status` for every item but the `exceptions`, which keep their
/// own status and error (a row of their own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOutcome {
    /// The batch's number ([`LedgerBatch::seq`]).
    pub seq: u64,
    /// `insert` or `update`, as planned.
    pub action: &'static str,
    /// The status of its items (`applied` after a write that returned).
    pub status: ItemStatus,
    /// Items whose outcome differs: key, status, error.
    pub exceptions: Vec<(String, ItemStatus, Option<String>)>,
}

/// One run, as [`StateStore::recent_runs`] lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    /// The run id.
    pub id: String,
    /// The job.
    pub job: String,
    /// First instant of the window.
    pub window_start: Timestamp,
    /// First instant after the window.
    pub window_end: Timestamp,
    /// When the run started.
    pub started_at: Timestamp,
    /// When it finished; `None` while running or if it crashed.
    pub finished_at: Option<Timestamp>,
    /// Its status.
    pub status: RunStatus,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// The counts it finished with.
    pub counts: Option<serde_json::Value>,
    /// Where its reports are.
    pub report_dir: Option<String>,
    /// Why it failed or crashed.
    pub error: Option<String>,
}

/// Rows of the open discrepancy history read per statement.
const OPEN_CHUNK: i64 = 20_000;

/// Every class, in the order of its discriminant.
const CLASSES: [Class; 4] = [Class::Gap, Class::Orphan, Class::Mismatch, Class::Duplicate];

/// The open discrepancies of one class: external ID → first seen.
type OpenIds = HashMap<String, Timestamp, foldhash::fast::RandomState>;

/// `[class, external_id, first_seen_at]`, one element of a chunk of the
/// open history, borrowed from its JSON text where nothing is escaped.
#[derive(serde::Deserialize)]
struct OpenRow<'a>(
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
);

/// How the open discrepancies of a job changed with one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscrepancyDelta {
    /// Seen for the first time (or again after having been resolved).
    pub new: HashSet<(Class, String)>,
    /// Still open, with when each was first seen.
    pub persisting: HashMap<(Class, String), Timestamp>,
    /// Open before, gone now, with when each was first seen; sorted.
    pub resolved: Vec<(Class, String, Timestamp)>,
}

/// The open discrepancies of a job, by class: external ID → first seen
/// ([`StateStore::open_history`]).
#[derive(Debug, Default)]
pub struct OpenHistory([OpenIds; 4]);

impl OpenHistory {
    /// What `current` (the open discrepancies one run found) changes: the
    /// ones open before persist (with their first sighting), every other
    /// one is new, and the open ones not in `current` are resolved.
    /// Duplicates in `current` count once.
    pub fn delta(mut self, current: &[(Class, String)]) -> DiscrepancyDelta {
        let mut delta = DiscrepancyDelta::default();
        for (class, id) in current {
            // The open row's own key moves into `persisting`: no copy.
            if let Some((id, first)) = self.0[*class as usize].remove_entry(id.as_str()) {
                delta.persisting.insert((*class, id), first);
            } else {
                // Listed twice in `current`: counted once.
                let key = (*class, id.clone());
                if !delta.persisting.contains_key(&key) {
                    delta.new.insert(key);
                }
            }
        }
        delta.resolved = CLASSES
            .into_iter()
            .zip(self.0)
            .flat_map(|(class, open)| open.into_iter().map(move |(id, first)| (class, id, first)))
            .collect();
        delta.resolved.sort();
        delta
    }
}

/// The run state store. Cheap to share by reference; all methods take
/// `&self`. A clone shares the same connection pool (for a write handed to
/// its own task).
#[derive(Clone)]
pub struct StateStore {
    pool: AnyPool,
    backend: Backend,
    /// The full URL (may hold a password): for the lock's own connections.
    url: String,
    /// The URL for messages, password redacted.
    display: String,
}

impl fmt::Debug for StateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateStore")
            .field("url", &self.display)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// Instants as stored: fixed-width RFC 3339 UTC with nanoseconds, so that
/// text order is time order.
pub(crate) fn ts_text(t: Timestamp) -> String {
    let dt = jiff::tz::Offset::UTC.to_datetime(t);
    format!(
        "{}.{:09}Z",
        dt.strftime("%Y-%m-%dT%H:%M:%S"),
        dt.subsec_nanosecond()
    )
}

/// A duration for messages (`30m`, `1h 30m`, `1s`).
pub(crate) fn friendly(d: Duration) -> String {
    match jiff::SignedDuration::try_from(d) {
        Ok(s) => format!("{s:#}"),
        Err(_) => format!("{d:?}"),
    }
}

/// A random 64-bit value: std's per-process random hash keys, a counter and
/// the clock, enough for unique run ids and lock owners.
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// FNV-1a: a hash that is the same in every process and every build, for
/// PostgreSQL advisory lock keys.
pub(crate) fn stable_hash(text: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h as i64
}

/// The backend of a state URL and the URL to connect with.
fn normalize_url(url: &str) -> Result<(Backend, String), StateError> {
    let unsupported = |reason: String| StateError::UnsupportedUrl {
        url: redact_url(url),
        reason,
    };
    let scheme = url
        .split_once(':')
        .map(|(s, _)| s.to_ascii_lowercase())
        .unwrap_or_default();
    match scheme.as_str() {
        "postgres" | "postgresql" => Ok((Backend::Postgres, url.to_string())),
        "sqlite" => {
            let rest = url["sqlite:".len()..].trim_start_matches("//");
            let (path, query) = match rest.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (rest, None),
            };
            if path.is_empty() {
                return Err(unsupported(
                    "it names no file; use sqlite://PATH, e.g. sqlite://recon-state.db".into(),
                ));
            }
            if path != ":memory:" {
                if let Some(parent) = std::path::Path::new(path).parent() {
                    if !parent.as_os_str().is_empty() && !parent.exists() {
                        std::fs::create_dir_all(parent).map_err(|e| {
                            unsupported(format!(
                                "cannot create the folder {} for the state file ({e}); create it or choose another path",
                                parent.display()
                            ))
                        })?;
                    }
                }
            }
            let has_mode = query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("mode=")));
            let url = match (has_mode, query) {
                (true, _) => url.to_string(),
                (false, Some(_)) => format!("{url}&mode=rwc"),
                (false, None) => format!("{url}?mode=rwc"),
            };
            Ok((Backend::Sqlite, url))
        }
        "mysql" | "mariadb" => Err(unsupported(
            "MySQL/MariaDB cannot hold the run state; use sqlite://PATH (the default) or postgres://…"
                .into(),
        )),
        _ => Err(unsupported(format!(
            "unknown scheme `{scheme}`; use sqlite://PATH (the default) or postgres://USER@HOST/DB"
        ))),
    }
}

/// `count` numbered placeholders `$first`, `$first+1`, … (both PostgreSQL
/// and SQLite accept `$N`).
/// Rows per statement of the set-wise writes (one bound JSON array each).
const JSON_BATCH: usize = 50_000;

/// JSON text of rows for [`StateStore::json_rows`].
fn json_text<T: serde::Serialize>(rows: &T) -> String {
    serde_json::to_string(rows).unwrap_or_else(|_| "[]".into())
}

impl StateStore {
    /// Connects to the state database (creating a SQLite file if missing)
    /// and brings its schema up to date.
    pub async fn open(url: &str) -> Result<StateStore, StateError> {
        sqlx::any::install_default_drivers();
        let display = redact_url(url);
        let (backend, url) = normalize_url(url)?;
        let connect_error = |source| StateError::Connect {
            url: display.clone(),
            hint: match backend {
                Backend::Sqlite => "check that the path is writable and is a SQLite file".into(),
                Backend::Postgres => {
                    "check that PostgreSQL is running, the database exists and the URL is right"
                        .into()
                }
            },
            source,
        };
        // One plain connection first: a wrong URL or a server that is down
        // fails at once, instead of after the pool's retries.
        let probe = tokio::time::timeout(CONNECT_TIMEOUT, AnyConnection::connect(&url))
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
            .map_err(connect_error)?;
        let _ = probe.close().await;
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(60))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        sqlx::query(&format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"))
                            .execute(&mut *conn)
                            .await?;
                        // A run's history transaction dirties tens of MB of
                        // B-tree pages: past SQLite's 2 MB cache they were
                        // written to the WAL mid-transaction (spilled), read
                        // back and written again. Dirty pages now stay in
                        // memory until their commit (measured on a 200k-gap
                        // backfill: a quarter less CPU, half the system
                        // time, about 25 MB more peak RSS).
                        sqlx::query("PRAGMA cache_spill = OFF")
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(connect_error)?;
        let store = StateStore {
            pool,
            backend,
            url,
            display,
        };
        if backend == Backend::Sqlite {
            // Readers never wait for the writer; persistent in the file.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&store.pool)
                .await
                .map_err(store.db("switching to WAL journal mode"))?;
        }
        migrate::run(&store.pool, backend, &store.display).await?;
        Ok(store)
    }

    /// Which database holds the state.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL, password redacted, for messages.
    pub fn describe(&self) -> &str {
        &self.display
    }

    /// Closes every connection (a held [`RunLock`] keeps its own).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    fn db(&self, context: &str) -> impl FnOnce(sqlx::Error) -> StateError + '_ {
        let context = context.to_string();
        move |source| StateError::Database {
            url: self.display.clone(),
            context,
            source,
        }
    }

    fn corrupt(&self, context: &str, detail: String) -> StateError {
        StateError::Corrupt {
            url: self.display.clone(),
            context: context.to_string(),
            detail,
        }
    }

    fn parse_ts(&self, context: &str, text: &str) -> Result<Timestamp, StateError> {
        text.parse::<Timestamp>()
            .map_err(|e| self.corrupt(context, format!("`{text}` is not a timestamp ({e})")))
    }

    /// A write transaction. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so that it waits for other writers instead of
    /// failing when it upgrades from reading to writing.
    /// A derived table `v(columns…)` of the rows in one bound JSON array of
    /// arrays (`[["a", "b"], …]`), expanded by the database itself.
    fn json_rows(&self, param: &str, columns: &[&str]) -> String {
        let cols: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| match self.backend {
                Backend::Sqlite => format!("json_extract(value, '$[{i}]') AS {c}"),
                Backend::Postgres => format!("value ->> {i} AS {c}"),
            })
            .collect();
        match self.backend {
            Backend::Sqlite => format!("(SELECT {} FROM json_each({param})) AS v", cols.join(", ")),
            Backend::Postgres => format!(
                "(SELECT {} FROM json_array_elements(CAST({param} AS json)) AS e(value)) AS v",
                cols.join(", ")
            ),
        }
    }

    /// A derived table `v(external_id)` of the strings in one bound JSON
    /// array (`["a", "b", …]`): no element is parsed again to pick a
    /// column out of it (200,000 new discrepancies of one class: two
    /// `json_extract` calls a row saved on SQLite).
    fn json_keys(&self, param: &str) -> String {
        match self.backend {
            Backend::Sqlite => {
                format!("(SELECT value AS external_id FROM json_each({param})) AS v")
            }
            Backend::Postgres => format!(
                "(SELECT value AS external_id FROM json_array_elements_text(CAST({param} AS json)) AS e(value)) AS v"
            ),
        }
    }

    async fn begin_write(&self, context: &str) -> Result<Transaction<'static, Any>, StateError> {
        match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .map_err(self.db(context))
    }

    /// Acquires the run lock of `job`; see [`RunLock`]. On SQLite a lock
    /// whose heartbeat is older than `stale_after` belonged to a run that
    /// died and is taken over.
    pub async fn acquire_lock(
        &self,
        job: &str,
        stale_after: Duration,
    ) -> Result<RunLock, StateError> {
        lock::acquire(self, job, stale_after).await
    }

    /// Records the start of a run and returns its id. Earlier runs of this
    /// job still `running` died (the caller holds the run lock), so they
    /// become `crashed` and their `planned` backfill items `superseded`.
    pub async fn start_run(
        &self,
        job: &str,
        window: Window,
        dry_run: bool,
    ) -> Result<String, StateError> {
        self.start_run_as(job, window, dry_run, None).await
    }

    /// [`StateStore::start_run`] for the holder of the run lock `owner`
    /// (`host:pid:random`), recorded with the run. An earlier `running` run
    /// is marked `crashed` only when its holder is provably gone: its
    /// process no longer exists on this host, or it ran elsewhere (the run
    /// lock, which the caller now holds, is the proof there). A run whose
    /// process is still alive on this host (it lost its lock and stops
    /// before its next write) makes this one refuse to start.
    pub async fn start_run_as(
        &self,
        job: &str,
        window: Window,
        dry_run: bool,
        owner: Option<&str>,
    ) -> Result<String, StateError> {
        if job.is_empty() {
            return Err(StateError::Invalid("a run needs a job name".into()));
        }
        let context = "reading the runs still marked running";
        let running = sqlx::query(
            "SELECT id, owner, started_at FROM recon_runs WHERE job = $1 AND status = 'running'",
        )
        .bind(job.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        for row in &running {
            let id: String = row.try_get(0).map_err(self.db(context))?;
            let holder: Option<String> = row.try_get(1).map_err(self.db(context))?;
            let since: String = row.try_get(2).map_err(self.db(context))?;
            if let Some(holder) = holder.filter(|h| lock::holder_is_alive_here(h)) {
                return Err(StateError::Locked {
                    job: job.to_string(),
                    owner: holder,
                    since,
                    hint: format!(
                        "run {id} lost its run lock but its process is still alive; it stops before its next write. Run again once it has ended"
                    ),
                });
            }
        }
        let now = Timestamp::now();
        let id = format!(
            "{job}-{}-{:08x}",
            now.strftime("%Y%m%dT%H%M%SZ"),
            random_u64() as u32
        );
        let now_s = ts_text(now);
        let context = "recording the start of a run";
        let mut tx = self.begin_write(context).await?;
        let crashed_plans = "job = $2 AND status = 'planned' AND plan_id IN \
             (SELECT id FROM recon_runs WHERE job = $2 AND status = 'running')";
        let mut superseded = sqlx::query(&format!(
            "UPDATE recon_ledger_items SET status = 'superseded', updated_at = $1 \
             WHERE {crashed_plans}"
        ))
        .bind(now_s.clone())
        .bind(job.to_string())
        .execute(&mut *tx)
        .await
        .map_err(self.db(context))?
        .rows_affected();
        // A batch planned but never marked: its write may or may not have
        // reached the target; the next run's diff decides what is missing.
        let batches = sqlx::query(&format!(
            "UPDATE recon_ledger_batches SET status = 'superseded', updated_at = $1 \
             WHERE {crashed_plans} RETURNING items"
        ))
        .bind(now_s.clone())
        .bind(job.to_string())
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(context))?;
        for b in &batches {
            superseded += b.try_get::<i64, _>(0).map_err(self.db(context))? as u64;
        }
        let crashed = sqlx::query(
            "UPDATE recon_runs SET status = 'crashed', error = COALESCE(error, $1) \
             WHERE job = $2 AND status = 'running' RETURNING id",
        )
        .bind(format!(
            "the run ended without finishing (process killed or machine lost); found by run {id} at {now}"
        ))
        .bind(job.to_string())
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(context))?;
        sqlx::query(
            "INSERT INTO recon_runs (id, job, window_start, window_end, started_at, finished_at, \
             status, dry_run, counts, report_dir, error, owner) \
             VALUES ($1, $2, $3, $4, $5, NULL, 'running', $6, NULL, NULL, NULL, $7)",
        )
        .bind(id.clone())
        .bind(job.to_string())
        .bind(ts_text(window.start))
        .bind(ts_text(window.end))
        .bind(now_s)
        .bind(i64::from(dry_run))
        .bind(owner.map(str::to_string))
        .execute(&mut *tx)
        .await
        .map_err(self.db(context))?;
        tx.commit().await.map_err(self.db(context))?;
        if !crashed.is_empty() {
            let ids: Vec<String> = crashed
                .iter()
                .filter_map(|r| r.try_get::<String, _>(0).ok())
                .collect();
            tracing::warn!(
                message = "Earlier runs of this job never finished; marked them crashed.",
                job,
                runs = %ids.join(", "),
                superseded_items = superseded,
            );
        }
        Ok(id)
    }

    /// Records how a run ended. `status` is one of `clean`,
    /// `discrepancies`, `failed` or `crashed`; `counts` is stored as JSON
    /// text (`null` as no counts).
    pub async fn finish_run<S>(
        &self,
        run_id: &str,
        status: S,
        counts: &serde_json::Value,
        report_dir: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), StateError>
    where
        S: TryInto<RunStatus>,
        StateError: From<S::Error>,
    {
        let status: RunStatus = status.try_into()?;
        if !status.is_final() {
            return Err(StateError::Invalid(format!(
                "a run cannot finish with status `{status}`; use one of clean, discrepancies, failed, crashed"
            )));
        }
        // JSON `null` is stored as SQL NULL: no counts.
        let counts = match counts {
            serde_json::Value::Null => None,
            c => Some(
                serde_json::to_string(c)
                    .map_err(|e| StateError::Invalid(format!("run counts are not JSON: {e}")))?,
            ),
        };
        let done = sqlx::query(
            "UPDATE recon_runs SET finished_at = $1, status = $2, counts = $3, report_dir = $4, \
             error = $5 WHERE id = $6",
        )
        .bind(ts_text(Timestamp::now()))
        .bind(status.as_str().to_string())
        .bind(counts)
        .bind(report_dir.map(str::to_string))
        // Scrubbed: a connector's error may echo a secret in its own words.
        .bind(error.map(|e| recon_core::scrub(e).into_owned()))
        .bind(run_id.to_string())
        .execute(&self.pool)
        .await
        .map_err(self.db("recording the end of a run"))?;
        if done.rows_affected() == 0 {
            return Err(StateError::UnknownRun(run_id.to_string()));
        }
        Ok(())
    }

    /// The window end of the job's latest (by start time) run that was not a
    /// dry run and completed (`clean` or `discrepancies`): where a
    /// `since-last-success` window starts.
    pub async fn last_success_end(&self, job: &str) -> Result<Option<Timestamp>, StateError> {
        let context = "reading the last successful run";
        let row = sqlx::query(
            "SELECT window_end FROM recon_runs WHERE job = $1 AND dry_run = 0 \
             AND status IN ('clean', 'discrepancies') ORDER BY started_at DESC, id DESC LIMIT 1",
        )
        .bind(job.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(context))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let text: String = r.try_get(0).map_err(self.db(context))?;
                self.parse_ts(context, &text).map(Some)
            }
        }
    }

    /// Records a backfill plan: each `(external_id, action)` with status
    /// `planned` and no attempts, in multi-row inserts inside one
    /// transaction. `plan_id` is by convention the id of the run making the
    /// plan. Items already in the plan keep their state, so recording the
    /// same plan again changes nothing.
    pub async fn record_plan(
        &self,
        plan_id: &str,
        job: &str,
        items: &[(String, &str)],
    ) -> Result<(), StateError> {
        self.item_step(plan_id, job, &[], items).await
    }

    /// Records write outcomes: each item's status and error, one more
    /// attempt, in batched updates inside one transaction. When an id
    /// appears more than once, its last outcome counts.
    pub async fn mark_items(
        &self,
        plan_id: &str,
        outcomes: &[(String, ItemStatus, Option<String>)],
    ) -> Result<(), StateError> {
        self.item_step(plan_id, "", outcomes, &[]).await
    }

    /// Outcomes ([`Self::mark_items`]) then planned items
    /// ([`Self::record_plan`]), one row per item, in one transaction.
    async fn item_step(
        &self,
        plan_id: &str,
        job: &str,
        outcomes: &[(String, ItemStatus, Option<String>)],
        planned: &[(String, &str)],
    ) -> Result<(), StateError> {
        if let Some((id, action)) = planned.iter().find(|(_, a)| !ACTIONS.contains(a)) {
            return Err(StateError::Invalid(format!(
                "backfill item `{id}` has action `{action}`; expected insert or update"
            )));
        }
        if outcomes.is_empty() && planned.is_empty() {
            return Ok(());
        }
        let context = if outcomes.is_empty() {
            "recording a backfill plan"
        } else {
            "recording backfill outcomes"
        };
        let now_s = ts_text(Timestamp::now());
        let mut tx = self.begin_write(context).await?;
        let (matched, unique) = self
            .mark_in(&mut tx, context, plan_id, &now_s, outcomes)
            .await?;
        self.plan_in(&mut tx, context, plan_id, job, &now_s, planned)
            .await?;
        tx.commit().await.map_err(self.db(context))?;
        if matched < unique {
            tracing::warn!(
                message = "Some backfill outcomes name items that are not in the plan; they were not recorded.",
                plan = plan_id,
                outcomes = unique,
                recorded = matched,
            );
        }
        Ok(())
    }

    /// One step of a backfill's ledger, in one transaction (one commit):
    /// the outcomes of the batches just written, then the next batches as
    /// planned, before any of them is written. A batch is one row whatever
    /// its size (migration 10); only the items whose outcome differs from
    /// their batch's get rows of their own. A backfill records each
    /// batch's plan in the same commit as the previous batch's outcomes,
    /// while the target writes: the ledger never waits for the target, nor
    /// the target for the ledger.
    pub async fn ledger_step(
        &self,
        plan_id: &str,
        job: &str,
        done: &[BatchOutcome],
        planned: &[LedgerBatch<'_>],
    ) -> Result<(), StateError> {
        let actions = done
            .iter()
            .map(|b| b.action)
            .chain(planned.iter().map(|b| b.action));
        if let Some(action) = actions.into_iter().find(|a| !ACTIONS.contains(a)) {
            return Err(StateError::Invalid(format!(
                "a backfill batch has action `{action}`; expected insert or update"
            )));
        }
        if done.is_empty() && planned.is_empty() {
            return Ok(());
        }
        let context = match (done.is_empty(), planned.is_empty()) {
            (true, _) => "recording a backfill plan",
            (false, true) => "recording backfill outcomes",
            (false, false) => "recording backfill outcomes and the next planned batches",
        };
        let now_s = ts_text(Timestamp::now());
        let mut tx = self.begin_write(context).await?;
        let mut unmatched = Vec::new();
        for b in done {
            let marked = sqlx::query(
                "UPDATE recon_ledger_batches SET status = $3, attempts = attempts + 1, \
                 updated_at = $4 WHERE plan_id = $1 AND seq = $2",
            )
            .bind(plan_id.to_string())
            .bind(b.seq as i64)
            .bind(b.status.as_str().to_string())
            .bind(now_s.clone())
            .execute(&mut *tx)
            .await
            .map_err(self.db(context))?
            .rows_affected();
            if marked == 0 {
                unmatched.push(b.seq);
                continue;
            }
            self.except_in(&mut tx, context, plan_id, job, &now_s, b)
                .await?;
        }
        if !planned.is_empty() && self.backend == Backend::Postgres {
            // A batch's keys are one TOASTed value (4,000 keys: 130 KB of
            // random IDs, which barely compress); pglz spends 3-4 ms on
            // each, 0.2 s for a 200,000-gap plan that the first write waits
            // for. lz4 takes half that (psql A/B of the same 50 rows: 0.15 s
            // instead of 0.32 s). For this transaction only, and only where
            // the server has it (PostgreSQL 14+, built with lz4): otherwise
            // no row, nothing set.
            sqlx::query(
                "SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_settings \
                 WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)",
            )
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db(context))?;
        }
        let insert = "INSERT INTO recon_ledger_batches (plan_id, seq, job, action, status, \
             attempts, updated_at, items, keys) VALUES ($1, $2, $3, $4, 'planned', 0, $5, $6, $7) \
             ON CONFLICT (plan_id, seq) DO NOTHING";
        for b in planned {
            sqlx::query(insert)
                .bind(plan_id.to_string())
                .bind(b.seq as i64)
                .bind(job.to_string())
                .bind(b.action.to_string())
                .bind(now_s.clone())
                .bind(b.keys.len() as i64)
                .bind(json_text(&b.keys))
                .execute(&mut *tx)
                .await
                .map_err(self.db(context))?;
        }
        tx.commit().await.map_err(self.db(context))?;
        if !unmatched.is_empty() {
            tracing::warn!(
                message = "Some backfill outcomes name batches that are not in the plan; they were not recorded.",
                plan = plan_id,
                batches = ?unmatched,
            );
        }
        Ok(())
    }

    /// The items of a marked batch whose outcome differs from the batch's:
    /// a row each in `recon_ledger_items` (which wins over the batch), and
    /// the unknown ones listed in `recon_unknown_items`.
    async fn except_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        job: &str,
        now_s: &str,
        batch: &BatchOutcome,
    ) -> Result<(), StateError> {
        if batch.exceptions.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO recon_ledger_items (plan_id, job, external_id, action, status, \
             attempts, last_error, updated_at) SELECT $1, $2, v.external_id, $3, v.status, 1, \
             v.last_error, $4 FROM {} WHERE true ON CONFLICT (plan_id, external_id) DO UPDATE \
             SET status = excluded.status, attempts = recon_ledger_items.attempts + 1, \
             last_error = excluded.last_error, updated_at = excluded.updated_at",
            self.json_rows("$5", &["external_id", "status", "last_error"])
        );
        let list = format!(
            "INSERT INTO recon_unknown_items (plan_id, job, external_id) \
             SELECT $1, $2, v.external_id FROM {} WHERE v.status = 'unknown' \
             ON CONFLICT (plan_id, external_id) DO NOTHING",
            self.json_rows("$3", &["external_id", "status"])
        );
        for chunk in batch.exceptions.chunks(JSON_BATCH) {
            let rows: Vec<(&str, &str, Option<&str>)> = chunk
                .iter()
                .map(|(id, status, error)| (id.as_str(), status.as_str(), error.as_deref()))
                .collect();
            let rows = json_text(&rows);
            sqlx::query(&sql)
                .bind(plan_id.to_string())
                .bind(job.to_string())
                .bind(batch.action.to_string())
                .bind(now_s.to_string())
                .bind(rows.clone())
                .execute(&mut **tx)
                .await
                .map_err(self.db(context))?;
            if chunk
                .iter()
                .any(|(_, status, _)| *status == ItemStatus::Unknown)
            {
                sqlx::query(&list)
                    .bind(plan_id.to_string())
                    .bind(job.to_string())
                    .bind(rows)
                    .execute(&mut **tx)
                    .await
                    .map_err(self.db(context))?;
            }
        }
        Ok(())
    }

    /// Inserts planned items (existing ones keep their state).
    async fn plan_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        job: &str,
        now_s: &str,
        items: &[(String, &str)],
    ) -> Result<(), StateError> {
        if items.is_empty() {
            return Ok(());
        }
        // Set-wise: one bound JSON array per chunk, expanded by the database
        // (json_each / json_array_elements), instead of thousands of bound
        // parameters per statement.
        let sql = format!(
            "INSERT INTO recon_ledger_items (plan_id, job, external_id, action, status, \
             attempts, last_error, updated_at) SELECT $1, $2, v.external_id, v.action, 'planned', \
             0, NULL, $3 FROM {} WHERE true ON CONFLICT (plan_id, external_id) DO NOTHING",
            self.json_rows("$4", &["external_id", "action"])
        );
        for chunk in items.chunks(JSON_BATCH) {
            let rows: Vec<[&str; 2]> = chunk.iter().map(|(id, a)| [id.as_str(), *a]).collect();
            sqlx::query(&sql)
                .bind(plan_id.to_string())
                .bind(job.to_string())
                .bind(now_s.to_string())
                .bind(json_text(&rows))
                .execute(&mut **tx)
                .await
                .map_err(self.db(context))?;
        }
        Ok(())
    }

    /// Records outcomes; returns (rows matched, distinct ids).
    async fn mark_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        now_s: &str,
        outcomes: &[(String, ItemStatus, Option<String>)],
    ) -> Result<(u64, u64), StateError> {
        if outcomes.is_empty() {
            return Ok((0, 0));
        }
        // The last outcome per id, in first-seen order.
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(outcomes.len());
        let mut unique: Vec<&(String, ItemStatus, Option<String>)> = Vec::new();
        for o in outcomes {
            match index.get(o.0.as_str()) {
                Some(&i) => unique[i] = o,
                None => {
                    index.insert(o.0.as_str(), unique.len());
                    unique.push(o);
                }
            }
        }
        let mut matched = 0u64;
        // Outcomes grouped by (status, error): one UPDATE per group and
        // chunk, its keys in one bound JSON array probed through the primary
        // key (`IN (SELECT … FROM json_each)`), so the database never scans
        // the ledger. Most items share `applied` with no error.
        let mut groups: BTreeMap<(&str, Option<&str>), Vec<&str>> = BTreeMap::new();
        for (id, status, error) in &unique {
            groups
                .entry((status.as_str(), error.as_deref()))
                .or_default()
                .push(id.as_str());
        }
        // PostgreSQL probes the primary key only for `= ANY(array)`; an
        // `IN (subquery)` would be planned as a scan of the whole ledger.
        let keys = match self.backend {
            Backend::Sqlite => format!(
                "IN (SELECT v.external_id FROM {})",
                self.json_rows("$5", &["external_id"])
            ),
            Backend::Postgres => format!(
                "= ANY(ARRAY(SELECT v.external_id FROM {}))",
                self.json_rows("$5", &["external_id"])
            ),
        };
        let sql = format!(
            "UPDATE recon_ledger_items SET status = $2, attempts = attempts + 1, \
             last_error = $3, updated_at = $4 WHERE plan_id = $1 AND external_id {keys}"
        );
        // Items of unknown outcome are also listed in `recon_unknown_items`
        // (no index on the ledger's status: see migration 6); an item
        // leaves that list when it gets any other status.
        let listed = sqlx::query("SELECT 1 FROM recon_unknown_items WHERE plan_id = $1 LIMIT 1")
            .bind(plan_id.to_string())
            .fetch_optional(&mut **tx)
            .await
            .map_err(self.db(context))?
            .is_some();
        let list = format!(
            "INSERT INTO recon_unknown_items (plan_id, job, external_id) \
             SELECT i.plan_id, i.job, i.external_id FROM recon_ledger_items i \
             WHERE i.plan_id = $1 AND i.external_id {} ON CONFLICT (plan_id, external_id) DO NOTHING",
            keys.replace("$5", "$2")
        );
        let unlist = format!(
            "DELETE FROM recon_unknown_items WHERE plan_id = $1 AND external_id {}",
            keys.replace("$5", "$2")
        );
        for ((status, error), ids) in &groups {
            for chunk in ids.chunks(JSON_BATCH) {
                let rows: Vec<[&str; 1]> = chunk.iter().map(|id| [*id]).collect();
                let keys_json = json_text(&rows);
                matched += sqlx::query(&sql)
                    .bind(plan_id.to_string())
                    .bind(status.to_string())
                    .bind(error.map(str::to_string))
                    .bind(now_s.to_string())
                    .bind(keys_json.clone())
                    .execute(&mut **tx)
                    .await
                    .map_err(self.db(context))?
                    .rows_affected();
                let side = if *status == ItemStatus::Unknown.as_str() {
                    Some(&list)
                } else {
                    listed.then_some(&unlist)
                };
                if let Some(side) = side {
                    sqlx::query(side)
                        .bind(plan_id.to_string())
                        .bind(keys_json)
                        .execute(&mut **tx)
                        .await
                        .map_err(self.db(context))?;
                }
            }
        }
        Ok((matched, unique.len() as u64))
    }

    /// Items of the job whose write outcome is unknown (the connection was
    /// lost while they were in flight): `(plan_id, external_id)`.
    pub async fn unknown_items(&self, job: &str) -> Result<Vec<(String, String)>, StateError> {
        let context = "reading backfill items of unknown outcome";
        let rows = sqlx::query(
            "SELECT plan_id, external_id FROM recon_unknown_items \
             WHERE job = $1 ORDER BY plan_id, external_id",
        )
        .bind(job.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(self.db(context))?,
                    r.try_get(1).map_err(self.db(context))?,
                ))
            })
            .collect()
    }

    /// Every item of a plan, by external ID.
    pub async fn plan_items(&self, plan_id: &str) -> Result<Vec<LedgerItem>, StateError> {
        let context = "reading a backfill plan";
        let rows = sqlx::query(
            "SELECT external_id, action, status, attempts, last_error FROM recon_backfill_items \
             WHERE plan_id = $1 ORDER BY external_id",
        )
        .bind(plan_id.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        rows.iter()
            .map(|r| {
                let status: String = r.try_get(2).map_err(self.db(context))?;
                Ok(LedgerItem {
                    external_id: r.try_get(0).map_err(self.db(context))?,
                    action: r.try_get(1).map_err(self.db(context))?,
                    status: status
                        .parse()
                        .map_err(|e: StateError| self.corrupt(context, e.to_string()))?,
                    attempts: r.try_get(3).map_err(self.db(context))?,
                    last_error: r.try_get(4).map_err(self.db(context))?,
                })
            })
            .collect()
    }

    /// Updates the discrepancy history of `job` with what run `run_id` found
    /// at `now`, and says what is new, what persists and what was resolved:
    /// [`Self::discrepancy_delta`] then [`Self::write_discrepancies`].
    pub async fn update_discrepancies(
        &self,
        job: &str,
        run_id: &str,
        now: Timestamp,
        current: &[(Class, String)],
    ) -> Result<DiscrepancyDelta, StateError> {
        let delta = self.discrepancy_delta(job, current).await?;
        self.write_discrepancies(job, run_id, now, &delta).await?;
        Ok(delta)
    }

    /// What `current` (the open discrepancies one run found) changes in the
    /// history of `job`, read without writing: the ones open before persist
    /// (with their first sighting), every other one is new, and the open
    /// ones not in `current` are resolved. Only the open set of the
    /// previous run is read. Duplicates in `current` count once. The run
    /// lock keeps the history from changing until
    /// [`Self::write_discrepancies`] records it, so the two may be apart
    /// (a run reads the delta first, writes the target, then records).
    pub async fn discrepancy_delta(
        &self,
        job: &str,
        current: &[(Class, String)],
    ) -> Result<DiscrepancyDelta, StateError> {
        Ok(self.open_history(job).await?.delta(current))
    }

    /// The open discrepancies of `job`, with when each was first seen: what
    /// [`OpenHistory::delta`] compares a run's findings with. Read while
    /// the run lock is held, it stays true until the run records its
    /// history, so a run reads it while it reads its sides.
    ///
    /// PostgreSQL streams the rows (0.19 s for 200,000). On SQLite a row
    /// streamed on its own costs a hand-off through sqlx's worker channel
    /// and an `AnyRow` of owned values: 6 µs a row, 0.37 s for the 61,800
    /// open discrepancies of the 2M-row bench files, a third of a nightly
    /// dry run. There the set is read in key order, 20,000 rows at
    /// a time, each chunk one row of JSON text built by SQLite (keyset
    /// pagination on the primary key: each chunk is an index range). The
    /// open set is held once, as keys, never as rows.
    pub async fn open_history(&self, job: &str) -> Result<OpenHistory, StateError> {
        let context = "reading the discrepancy history";
        let mut open: [OpenIds; 4] = Default::default();
        // Most rows of a history share a few first sightings: parse each once.
        let mut last_ts: Option<(String, Timestamp)> = None;
        let mut add = |class: &str, id: String, at: Cow<'_, str>| -> Result<(), StateError> {
            let class: Class = class
                .parse()
                .map_err(|e: StateError| self.corrupt(context, e.to_string()))?;
            let first = match &last_ts {
                Some((text, ts)) if **text == *at => *ts,
                _ => {
                    let ts = self.parse_ts(context, &at)?;
                    last_ts = Some((at.into_owned(), ts));
                    ts
                }
            };
            open[class as usize].insert(id, first);
            Ok(())
        };
        if self.backend == Backend::Postgres {
            let mut rows = sqlx::query(
                "SELECT class, external_id, first_seen_at FROM recon_discrepancies \
                 WHERE job = $1 AND resolved_at IS NULL",
            )
            .bind(job.to_string())
            .fetch(&self.pool);
            while let Some(row) = rows.try_next().await.map_err(self.db(context))? {
                let text = |i: usize| -> Result<String, StateError> {
                    row.try_get(i).map_err(self.db(context))
                };
                add(&text(0)?, text(1)?, Cow::Owned(text(2)?))?;
            }
            drop(rows);
            return Ok(OpenHistory(open));
        }
        // The cursor is the chunk's last element, ordered by SQLite itself
        // (the key's collation), so `>` and `ORDER BY` always agree.
        let sql = "SELECT json_group_array(json_array(class, external_id, first_seen_at) \
                   ORDER BY class, external_id), COUNT(*) \
                   FROM (SELECT class, external_id, first_seen_at \
                   FROM recon_discrepancies WHERE job = $1 AND resolved_at IS NULL \
                   AND (class, external_id) > ($2, $3) \
                   ORDER BY class, external_id LIMIT $4)";
        let (mut after_class, mut after_id) = (String::new(), String::new());
        loop {
            let row = sqlx::query(sql)
                .bind(job.to_string())
                .bind(after_class.clone())
                .bind(after_id.clone())
                .bind(OPEN_CHUNK)
                .fetch_one(&self.pool)
                .await
                .map_err(self.db(context))?;
            let count: i64 = row.try_get(1).map_err(self.db(context))?;
            if count == 0 {
                break;
            }
            let text: String = row.try_get(0).map_err(self.db(context))?;
            let chunk: Vec<OpenRow<'_>> = serde_json::from_str(&text)
                .map_err(|e| self.corrupt(context, format!("an unreadable chunk ({e})")))?;
            let full = count >= OPEN_CHUNK;
            if let Some(OpenRow(class, id, _)) = chunk.last() {
                (after_class, after_id) = (class.to_string(), id.to_string());
            }
            for OpenRow(class, id, at) in chunk {
                add(&class, id.into_owned(), at)?;
            }
            if !full {
                break;
            }
        }
        Ok(OpenHistory(open))
    }

    /// Records in the history of `job` what run `run_id` found at `now`, as
    /// `delta` says ([`OpenHistory::delta`], read under the same run
    /// lock), in one transaction:
    ///
    /// - a new discrepancy is inserted, first and last seen in this run; one
    ///   resolved before that reappears is reopened by the same upsert, and
    ///   migration 12's trigger first copies its closed streak into
    ///   `recon_discrepancy_streaks`;
    /// - one that persists is not written at all: an open row was last seen
    ///   by the job's latest recording run, which `recon_history_marks`
    ///   keeps once per job (migration 13);
    /// - one resolved ends its streak in place: resolved at `now` by
    ///   `run_id`, last seen by the run before (the job's mark).
    ///
    /// Statements are multi-row (50,000 rows each), in key order. If the
    /// job's history holds no resolved row, no new discrepancy has a row
    /// at all, and they are inserted without the upsert's conflict check (a
    /// first run over a long history: 40% less work per row on
    /// PostgreSQL); a conflict then fails the write, never silently.
    pub async fn write_discrepancies(
        &self,
        job: &str,
        run_id: &str,
        now: Timestamp,
        delta: &DiscrepancyDelta,
    ) -> Result<(), StateError> {
        let context = "updating the discrepancy history";
        let now_s = ts_text(now);
        let mut new: Vec<(Class, &str)> =
            delta.new.iter().map(|(c, id)| (*c, id.as_str())).collect();
        // Key order: neighbouring rows land on the same B-tree pages.
        new.sort_unstable();
        let mut tx = self.begin_write(context).await?;
        let mut reopen = false;
        if !new.is_empty() {
            reopen = sqlx::query(
                "SELECT 1 FROM recon_discrepancies WHERE job = $1 AND resolved_at IS NOT NULL \
                 LIMIT 1",
            )
            .bind(job.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db(context))?
            .is_some();
        }
        // Every open one this run did not see ends its streak first (the
        // new ones have no open row to match): the row keeps it, with the
        // run that ended it, until the ID comes back. Last seen by the run
        // before: the job's mark, still unmoved (a store older than
        // migration 13 has none, and every row then holds its own).
        if !delta.resolved.is_empty() {
            let resolve = "UPDATE recon_discrepancies SET resolved_at = $1, resolved_run = $3, \
                 last_seen_run = COALESCE((SELECT m.run_id FROM recon_history_marks m \
                 WHERE m.job = $2), last_seen_run), \
                 last_seen_at = COALESCE((SELECT m.seen_at FROM recon_history_marks m \
                 WHERE m.job = $2), last_seen_at) \
                 WHERE job = $2 AND resolved_at IS NULL";
            let by_key = format!(
                "{resolve} AND (class, external_id) IN (SELECT v.class, v.external_id FROM {})",
                self.json_rows("$4", &["class", "external_id"])
            );
            // Nothing persists: every open row is resolved, found by scan in
            // one statement; else by key, a chunk at a time.
            let (sql, lists) = if delta.persisting.is_empty() {
                (resolve, vec![None])
            } else {
                let mut keys: Vec<[&str; 2]> = delta
                    .resolved
                    .iter()
                    .map(|(c, id, _)| [c.as_str(), id.as_str()])
                    .collect();
                keys.sort_unstable();
                let lists = keys.chunks(JSON_BATCH).map(|c| Some(json_text(&c)));
                (by_key.as_str(), lists.collect())
            };
            for list in lists {
                let mut q = sqlx::query(sql)
                    .bind(now_s.clone())
                    .bind(job.to_string())
                    .bind(run_id.to_string());
                if let Some(list) = list {
                    q = q.bind(list);
                }
                q.execute(&mut *tx).await.map_err(self.db(context))?;
            }
        }
        // New ones with no row at all are inserted as they are; when the job
        // has resolved rows, some may come back: upserted (the same rows,
        // with the conflict clause).
        // One class at a time (`new` is sorted by class): the class is
        // bound once, the keys are a flat JSON array.
        let insert = format!(
            "INSERT INTO recon_discrepancies (job, class, external_id, first_seen_run, \
             first_seen_at, last_seen_run, last_seen_at, resolved_at) \
             SELECT $1, $5, v.external_id, $2, $3, $2, $3, NULL FROM {}",
            self.json_keys("$4")
        );
        let upsert = format!(
            "{insert} WHERE true \
             ON CONFLICT (job, class, external_id) DO UPDATE SET \
             first_seen_run = CASE WHEN recon_discrepancies.resolved_at IS NULL \
             THEN recon_discrepancies.first_seen_run ELSE excluded.first_seen_run END, \
             first_seen_at = CASE WHEN recon_discrepancies.resolved_at IS NULL \
             THEN recon_discrepancies.first_seen_at ELSE excluded.first_seen_at END, \
             last_seen_run = excluded.last_seen_run, last_seen_at = excluded.last_seen_at, \
             resolved_at = NULL, resolved_run = NULL"
        );
        let sql = if reopen { &upsert } else { &insert };
        for class in new.chunk_by(|a, b| a.0 == b.0) {
            for chunk in class.chunks(JSON_BATCH) {
                let keys: Vec<&str> = chunk.iter().map(|(_, id)| *id).collect();
                sqlx::query(sql)
                    .bind(job.to_string())
                    .bind(run_id.to_string())
                    .bind(now_s.clone())
                    .bind(json_text(&keys))
                    .bind(chunk[0].0.as_str().to_string())
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db(context))?;
            }
        }
        // This run is now the last that saw every open discrepancy.
        sqlx::query(
            "INSERT INTO recon_history_marks (job, run_id, seen_at) VALUES ($1, $2, $3) \
             ON CONFLICT (job) DO UPDATE SET run_id = excluded.run_id, seen_at = excluded.seen_at",
        )
        .bind(job.to_string())
        .bind(run_id.to_string())
        .bind(now_s)
        .execute(&mut *tx)
        .await
        .map_err(self.db(context))?;
        tx.commit().await.map_err(self.db(context))
    }

    /// The latest runs, newest first, of one job or of all.
    pub async fn recent_runs(
        &self,
        job: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRow>, StateError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let context = "listing runs";
        let columns = "id, job, window_start, window_end, started_at, finished_at, status, \
                       dry_run, counts, report_dir, error";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = match job {
            Some(_) => format!(
                "SELECT {columns} FROM recon_runs WHERE job = $1 \
                 ORDER BY started_at DESC, id DESC LIMIT $2"
            ),
            None => format!(
                "SELECT {columns} FROM recon_runs ORDER BY started_at DESC, id DESC LIMIT $1"
            ),
        };
        let query = match job {
            Some(job) => sqlx::query(&sql).bind(job.to_string()).bind(limit),
            None => sqlx::query(&sql).bind(limit),
        };
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(self.db(context))?;
        rows.iter().map(|r| self.run_row(r)).collect()
    }

    fn run_row(&self, r: &AnyRow) -> Result<RunRow, StateError> {
        let context = "reading a run";
        let text =
            |i: usize| -> Result<String, StateError> { r.try_get(i).map_err(self.db(context)) };
        let opt = |i: usize| -> Result<Option<String>, StateError> {
            r.try_get(i).map_err(self.db(context))
        };
        let counts =
            match opt(8)? {
                None => None,
                Some(c) => Some(serde_json::from_str(&c).map_err(|e| {
                    self.corrupt(context, format!("counts `{c}` are not JSON ({e})"))
                })?),
            };
        let finished_at = match opt(5)? {
            None => None,
            Some(t) => Some(self.parse_ts(context, &t)?),
        };
        Ok(RunRow {
            id: text(0)?,
            job: text(1)?,
            window_start: self.parse_ts(context, &text(2)?)?,
            window_end: self.parse_ts(context, &text(3)?)?,
            started_at: self.parse_ts(context, &text(4)?)?,
            finished_at,
            status: text(6)?
                .parse()
                .map_err(|e: StateError| self.corrupt(context, e.to_string()))?,
            dry_run: r.try_get::<i64, _>(7).map_err(self.db(context))? != 0,
            counts,
            report_dir: opt(9)?,
            error: opt(10)?,
        })
    }
}

/// A reviewed backfill plan as the store knows it: what `recon run
/// --dry-run` wrote, so that `recon apply --plan` can prove the file it is
/// given is that plan, unedited (table `recon_plans`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRecord {
    /// The plan id: the id of the run that made it.
    pub id: String,
    /// The job.
    pub job: String,
    /// The window the plan was made over.
    pub window: Window,
    /// SHA-256 of the plan.jsonl file, lower-case hex.
    pub sha256: String,
    /// Lines in the plan.
    pub items: u64,
    /// Source records in the window when the plan was made (for `max_ratio`).
    pub source_records: u64,
    /// When the run that made the plan started reading.
    pub read_at: Timestamp,
    /// When the plan was recorded.
    pub created_at: Timestamp,
}

impl StateStore {
    /// Records a plan written to a plan.jsonl file. Recording the same plan
    /// id twice is refused: a plan is made once, by one run.
    pub async fn save_plan(&self, plan: &PlanRecord) -> Result<(), StateError> {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO recon_plans (id, job, window_start, window_end, sha256, items, \
             source_records, read_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(plan.id.clone())
        .bind(plan.job.clone())
        .bind(ts_text(plan.window.start))
        .bind(ts_text(plan.window.end))
        .bind(plan.sha256.clone())
        .bind(count(plan.items))
        .bind(count(plan.source_records))
        .bind(ts_text(plan.read_at))
        .bind(ts_text(plan.created_at))
        .execute(&self.pool)
        .await
        .map_err(self.db("recording a reviewed backfill plan"))?;
        Ok(())
    }

    /// The plan recorded under `id`, if any.
    pub async fn saved_plan(&self, id: &str) -> Result<Option<PlanRecord>, StateError> {
        let context = "reading a reviewed backfill plan";
        let row = sqlx::query(
            "SELECT id, job, window_start, window_end, sha256, items, source_records, read_at, \
             created_at FROM recon_plans WHERE id = $1",
        )
        .bind(id.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(context))?;
        let Some(r) = row else {
            return Ok(None);
        };
        let text =
            |i: usize| -> Result<String, StateError> { r.try_get(i).map_err(self.db(context)) };
        let count = |i: usize| -> Result<u64, StateError> {
            let n: i64 = r.try_get(i).map_err(self.db(context))?;
            u64::try_from(n).map_err(|_| self.corrupt(context, format!("negative count {n}")))
        };
        Ok(Some(PlanRecord {
            id: text(0)?,
            job: text(1)?,
            window: Window {
                start: self.parse_ts(context, &text(2)?)?,
                end: self.parse_ts(context, &text(3)?)?,
            },
            sha256: text(4)?,
            items: count(5)?,
            source_records: count(6)?,
            read_at: self.parse_ts(context, &text(7)?)?,
            created_at: self.parse_ts(context, &text(8)?)?,
        }))
    }

    /// Whether the holder of `job`'s run lock is provably gone, so that a
    /// run of the job still `running` died (killed, machine lost) rather
    /// than being in progress. On SQLite: the lock row names a process on
    /// this machine that no longer exists. On PostgreSQL: nobody holds the
    /// job's advisory lock (it dies with its session). Anything else, such
    /// as a holder on another machine, is not proof: `false`.
    pub async fn lock_holder_gone(&self, job: &str) -> Result<bool, StateError> {
        let context = "checking the run lock's holder";
        match self.backend {
            Backend::Sqlite => {
                let row = sqlx::query("SELECT owner FROM recon_locks WHERE job = $1")
                    .bind(job.to_string())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(self.db(context))?;
                match row {
                    Some(r) => {
                        let owner: String = r.try_get(0).map_err(self.db(context))?;
                        Ok(lock::holder_is_dead(&owner))
                    }
                    // No row: released between the listing and now, or
                    // never taken; not proof either way.
                    None => Ok(false),
                }
            }
            Backend::Postgres => {
                let held = lock::advisory_holders(&self.pool, lock::advisory_key(job), None)
                    .await
                    .map_err(self.db(context))?;
                Ok(held == 0)
            }
        }
    }

    /// Whether the process that started run `run_id` is still alive on this
    /// host (its recorded owner's PID exists): such a run is not crashed,
    /// even if it lost its lock; it stops before its next write.
    pub async fn run_owner_alive_here(&self, run_id: &str) -> Result<bool, StateError> {
        let context = "reading a run's owner";
        let owner: Option<String> = sqlx::query("SELECT owner FROM recon_runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(self.db(context))?
            .map(|r| r.try_get::<Option<String>, _>(0))
            .transpose()
            .map_err(self.db(context))?
            .flatten();
        Ok(owner.is_some_and(|o| lock::holder_is_alive_here(&o)))
    }

    /// The stored status of one run, if the run exists.
    pub async fn run_status(&self, run_id: &str) -> Result<Option<RunStatus>, StateError> {
        let context = "reading a run's status";
        let row = sqlx::query("SELECT status FROM recon_runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(self.db(context))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let text: String = r.try_get(0).map_err(self.db(context))?;
                Ok(Some(text.parse()?))
            }
        }
    }
}
