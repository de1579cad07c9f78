//! The store's handle: one connection pool and the backend's dialect.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use recon_core::redact_url;
use sqlx::any::AnyPoolOptions;
use sqlx::{Any, AnyConnection, AnyPool, Connection, Transaction};

use crate::backend::Dialect;
use crate::{migrate, Backend, StateError};

/// How long opening the first connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The run state store. Cheap to share by reference; all methods take
/// `&self`. A clone shares the same connection pool (for a write handed to
/// its own task). What it does is in its role traits ([`crate::prelude`]).
#[derive(Clone)]
pub struct StateStore {
    pub(crate) pool: AnyPool,
    /// What differs between SQLite and PostgreSQL.
    pub(crate) dialect: &'static dyn Dialect,
    /// The full URL (may hold a password): for the lock's own connections.
    pub(crate) url: String,
    /// The URL for messages, password redacted.
    pub(crate) display: String,
}

impl fmt::Debug for StateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateStore")
            .field("url", &self.display)
            .field("backend", &self.backend())
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
pub(crate) fn normalize_url(url: &str) -> Result<(Backend, String), StateError> {
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

/// Rows per statement of the set-wise writes (one bound JSON array each).
pub(crate) const JSON_BATCH: usize = 50_000;

/// JSON text of rows for [`StateStore::json_rows`].
pub(crate) fn json_text<T: serde::Serialize>(rows: &T) -> String {
    serde_json::to_string(rows).unwrap_or_else(|_| "[]".into())
}

impl StateStore {
    /// Connects to the state database (creating a SQLite file if missing)
    /// and brings its schema up to date.
    pub async fn open(url: &str) -> Result<StateStore, StateError> {
        Self::open_with(url, true).await
    }

    /// [`StateStore::open`], a new store migrated one migration at a time
    /// (what the squashed schema is checked against).
    #[cfg(test)]
    pub(crate) async fn open_step_by_step(url: &str) -> Result<StateStore, StateError> {
        Self::open_with(url, false).await
    }

    async fn open_with(url: &str, squash: bool) -> Result<StateStore, StateError> {
        sqlx::any::install_default_drivers();
        let display = redact_url(url);
        let (backend, url) = normalize_url(url)?;
        let dialect = backend.dialect();
        let connect_error = |source| StateError::Connect {
            url: display.clone(),
            hint: dialect.connect_hint().into(),
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
                    for sql in dialect.session_setup() {
                        sqlx::query(sql).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(connect_error)?;
        let store = StateStore {
            pool,
            dialect,
            url,
            display,
        };
        for (sql, context) in dialect.store_setup() {
            sqlx::query(sql)
                .execute(&store.pool)
                .await
                .map_err(store.db(context))?;
        }
        migrate::run_with(&store.pool, backend, &store.display, squash).await?;
        Ok(store)
    }

    /// Which database holds the state.
    pub fn backend(&self) -> Backend {
        self.dialect.backend()
    }

    /// Whether a write may run while another write of this store is in
    /// progress (PostgreSQL), or waits for it (SQLite: one writer). A run
    /// records its history beside the backfill only where it may.
    pub fn concurrent_writes(&self) -> bool {
        self.dialect.concurrent_writes()
    }

    /// The URL, password redacted, for messages.
    pub fn describe(&self) -> &str {
        &self.display
    }

    /// Closes every connection (a held [`crate::RunLock`] keeps its own).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) fn db(&self, context: &str) -> impl FnOnce(sqlx::Error) -> StateError + '_ {
        let context = context.to_string();
        move |source| StateError::Database {
            url: self.display.clone(),
            context,
            source,
        }
    }

    pub(crate) fn corrupt(&self, context: &str, detail: String) -> StateError {
        StateError::Corrupt {
            url: self.display.clone(),
            context: context.to_string(),
            detail,
        }
    }

    pub(crate) fn parse_ts(&self, context: &str, text: &str) -> Result<Timestamp, StateError> {
        text.parse::<Timestamp>()
            .map_err(|e| self.corrupt(context, format!("`{text}` is not a timestamp ({e})")))
    }

    /// A derived table `v(columns…)` of the rows in one bound JSON array of
    /// arrays (`[["a", "b"], …]`), expanded by the database itself.
    pub(crate) fn json_rows(&self, param: &str, columns: &[&str]) -> String {
        self.dialect.json_rows(param, columns)
    }

    /// `IN (…)` over the keys of one bound JSON array of one-element rows
    /// `param`, probed through the primary key.
    pub(crate) fn keys_in(&self, param: &str) -> String {
        self.dialect.keys_in(param)
    }

    /// A write transaction. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so that it waits for other writers instead of
    /// failing when it upgrades from reading to writing.
    pub(crate) async fn begin_write(
        &self,
        context: &str,
    ) -> Result<Transaction<'static, Any>, StateError> {
        match self.dialect.begin_write() {
            Some(begin) => self.pool.begin_with(begin).await,
            None => self.pool.begin().await,
        }
        .map_err(self.db(context))
    }
}
