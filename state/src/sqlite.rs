//! SQLite: one file, one writer at a time (WAL: readers never wait), JSON
//! through `json_each`, the run lock as a row with a heartbeat.

use std::time::Duration;

use futures_util::future::BoxFuture;
use jiff::{SignedDuration, Timestamp};
use sqlx::migrate::Migrator;
use sqlx::Row;

use crate::backend::{Dialect, Squashed};
use crate::history::{OpenBuilder, OpenIdsJson, OPEN_CHUNK};
use crate::lock::{holder_is_dead, lock_row, RunLock};
use crate::{friendly, ts_text, Backend, StateError, StateStore};

/// The SQLite dialect.
pub(crate) struct Sqlite;

/// The SQLite migrations, without sqlx's lock (see [`crate::migrate`]).
static MIGRATOR: Migrator = Migrator {
    locking: false,
    ..sqlx::migrate!("migrations/sqlite")
};

/// A new store's schema in one step (see [`crate::migrate`]). Run one
/// by one, the 16 migrations are 48 statements through sqlx's worker,
/// SQLite parses its schema again after each DDL statement, and three
/// steps rebuild a table: a typed first dry run of the 2M bench files
/// began reading 20.7 ms after it started, 13.5 ms with this (medians of
/// 15, interleaved).
static SQUASHED: Squashed = Squashed {
    sql: include_str!("../schema/sqlite.sql"),
    objects: "SELECT COUNT(*) FROM sqlite_master",
    record: "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
             execution_time) SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
             TRUE, unhex(json_extract(value, '$[2]')), 0 FROM json_each($1)",
};

impl Dialect for Sqlite {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn name(&self) -> &'static str {
        "SQLite"
    }

    fn connect_hint(&self) -> &'static str {
        "check that the path is writable and is a SQLite file"
    }

    fn session_setup(&self) -> &'static [&'static str] {
        &[
            // How long a connection waits for another writer before failing.
            "PRAGMA busy_timeout = 30000",
            // A run's history transaction dirties tens of MB of B-tree
            // pages: past SQLite's 2 MB cache they were written to the WAL
            // mid-transaction (spilled), read back and written again. Dirty
            // pages now stay in memory until their commit (measured on a
            // 200k-gap backfill: a quarter less CPU, half the system time,
            // about 25 MB more peak RSS).
            "PRAGMA cache_spill = OFF",
            // A new store's pages (an existing one keeps its size: SQLite
            // changes it only before the first table). A first run's
            // history is tens of MB of rows; in 4 KiB pages the 61,800 of
            // the 2M bench files passed the WAL's 1,000-page checkpoint
            // mark in their own commit and were copied into the database
            // before the run could end. In 16 KiB pages that commit stays
            // under the mark and every page holds four times the rows: a
            // typed first dry run's tail after the diff went from 240 to
            // 194 ms (median of 8, interleaved).
            "PRAGMA page_size = 16384",
            // The WAL is copied into the database once past 8,192 pages
            // (128 MiB), not SQLite's 1,000 (16 MiB): the history of a
            // first run over the 10M bench files (309,000 rows, 61 MB)
            // was written to the WAL and then, in the same commit, copied
            // page by page into the database before the run could end
            // (typed first dry run's tail 739 -> 644 ms, median of 3,
            // interleaved; the nightly run after it unchanged). Copied
            // later, a page changed by several runs is copied once; the
            // WAL file keeps its largest size, as it did.
            "PRAGMA wal_autocheckpoint = 8192",
        ]
    }

    fn store_setup(&self) -> &'static [(&'static str, &'static str)] {
        // Readers never wait for the writer; persistent in the file.
        &[("PRAGMA journal_mode = WAL", "switching to WAL journal mode")]
    }

    fn begin_write(&self) -> Option<&'static str> {
        Some("BEGIN IMMEDIATE")
    }

    fn concurrent_writes(&self) -> bool {
        false
    }

    fn json_rows(&self, param: &str, columns: &[&str]) -> String {
        let cols: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("json_extract(value, '$[{i}]') AS {c}"))
            .collect();
        format!("(SELECT {} FROM json_each({param})) AS v", cols.join(", "))
    }

    /// No element is parsed again to pick a column out of it (200,000 new
    /// discrepancies of one class: two `json_extract` calls a row saved).
    fn json_keys(&self, param: &str) -> String {
        format!("(SELECT value AS external_id FROM json_each({param})) AS v")
    }

    fn keys_in(&self, param: &str) -> String {
        format!(
            "IN (SELECT v.external_id FROM {})",
            self.json_rows(param, &["external_id"])
        )
    }

    fn before_planned_batches(&self) -> Option<&'static str> {
        None
    }

    fn key_in_batch(&self) -> (&'static str, &'static str) {
        ("instr(b.keys, $3) > 0", "json_each(b.keys) AS k")
    }

    fn migrator(&self) -> &'static Migrator {
        &MIGRATOR
    }

    fn folder(&self) -> &'static str {
        "state/migrations/sqlite"
    }

    /// None: `BEGIN IMMEDIATE` already holds the database's one write lock.
    fn migration_lock(&self) -> Option<&'static str> {
        None
    }

    fn legacy_table_count(&self) -> &'static str {
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'recon_schema_version'"
    }

    fn legacy_import(&self) -> &'static str {
        "INSERT INTO _sqlx_migrations \
         (version, description, installed_on, success, checksum, execution_time) \
         VALUES ($1, $2, $3, TRUE, $4, 0) ON CONFLICT (version) DO NOTHING"
    }

    fn squashed(&self) -> Option<&'static Squashed> {
        Some(&SQUASHED)
    }

    /// A row streamed on its own costs a hand-off through sqlx's worker
    /// channel and an `AnyRow` of owned values: 6 µs a row, 0.37 s for the
    /// 61,800 open discrepancies of the 2M-row bench files, a third of a
    /// nightly dry run. The set is read in key order, 20,000 rows at a
    /// time, each chunk one row of JSON text built by SQLite (keyset
    /// pagination on the primary key: each chunk is an index range).
    fn read_open_history<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
        open: &'a mut OpenBuilder,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let context = "reading the discrepancy history";
            // Class by class, a chunk at a time: the next OPEN_CHUNK rows
            // in key order, their IDs as one JSON array and their first
            // sightings joined by commas (an RFC 3339 instant holds none;
            // the count of each is checked). The cursor is the chunk's
            // last ID: the column compares as BINARY (the table's
            // collation), which is Rust's byte order, so `>` and the
            // cursor always agree. Per row a JSON array of three strings
            // made and parsed, for the whole set, cost a nightly run of the
            // 2M bench files 54-71 ms of the read's two cores.
            let select = "SELECT json_group_array(external_id), group_concat(first_seen_at, ','), \
                          COUNT(*) FROM (SELECT external_id, first_seen_at \
                          FROM recon_discrepancies WHERE job = $1 AND class = $2 \
                          AND resolved_at IS NULL";
            let first = format!("{select} ORDER BY external_id LIMIT $3)");
            let next = format!("{select} AND external_id > $4 ORDER BY external_id LIMIT $3)");
            for class in crate::types::CLASSES {
                let mut after: Option<String> = None;
                loop {
                    let mut q = sqlx::query(if after.is_some() { &next } else { &first })
                        .bind(job.to_string())
                        .bind(class.as_str().to_string())
                        .bind(OPEN_CHUNK);
                    if let Some(after) = &after {
                        q = q.bind(after.clone());
                    }
                    let row = q.fetch_one(&store.pool).await.map_err(store.db(context))?;
                    let count: i64 = row.try_get(2).map_err(store.db(context))?;
                    if count == 0 {
                        break;
                    }
                    let ids: String = row.try_get(0).map_err(store.db(context))?;
                    let ats: String = row.try_get(1).map_err(store.db(context))?;
                    let OpenIdsJson(ids) = serde_json::from_str(&ids).map_err(|e| {
                        store.corrupt(context, format!("an unreadable chunk ({e})"))
                    })?;
                    let ats: Vec<&str> = ats.split(',').collect();
                    if ids.len() as i64 != count || ats.len() != ids.len() {
                        return Err(store.corrupt(
                            context,
                            format!(
                                "a chunk of {count} rows read as {} IDs and {} first sightings",
                                ids.len(),
                                ats.len()
                            ),
                        ));
                    }
                    // The chunk's largest ID, found here rather than
                    // taken from the aggregate's order.
                    after = ids.iter().max().map(|id| id.to_string());
                    for (id, at) in ids.into_iter().zip(ats) {
                        open.add_to(store, context, class, id.into_owned(), at)?;
                    }
                    if count < OPEN_CHUNK {
                        break;
                    }
                }
            }
            Ok(())
        })
    }

    fn acquire_lock<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
        owner: String,
        stale_after: Duration,
        every: Duration,
    ) -> BoxFuture<'a, Result<RunLock, StateError>> {
        Box::pin(acquire(store, job, owner, stale_after, every))
    }

    /// Proof: the lock row names a process on this machine that no longer
    /// exists.
    fn lock_holder_gone<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(async move {
            // No row: released between the listing and now, or never
            // taken; not proof either way.
            Ok(lock_row(store, job)
                .await?
                .is_some_and(|(owner, _, _)| holder_is_dead(&owner)))
        })
    }
}

/// A run killed on this machine (SIGKILL, OOM) leaves its row behind; when
/// its process is gone the lock is taken over at once instead of after
/// `stale_after`. Compare-and-swap on the owner, so two takers cannot both win.
async fn take_over_dead_holder(
    store: &StateStore,
    job: &str,
    owner: &str,
    now: Timestamp,
) -> Result<bool, StateError> {
    let Some((holder, _, _)) = lock_row(store, job).await? else {
        return Ok(false);
    };
    if !holder_is_dead(&holder) {
        return Ok(false);
    }
    let swapped = sqlx::query(
        "UPDATE recon_locks SET owner = $1, acquired_at = $2, heartbeat_at = $2 WHERE job = $3 AND owner = $4",
    )
    .bind(owner.to_string())
    .bind(ts_text(now))
    .bind(job.to_string())
    .bind(holder.clone())
    .execute(&store.pool)
    .await
    .map_err(store.db("taking over the run lock of a dead run"))?
    .rows_affected()
        == 1;
    if swapped {
        tracing::warn!(message = "Took over the run lock of a run whose process is gone.", job, previous_owner = %holder);
    }
    Ok(swapped)
}

async fn acquire(
    store: &StateStore,
    job: &str,
    owner: String,
    stale_after: Duration,
    every: Duration,
) -> Result<RunLock, StateError> {
    let context = "acquiring the run lock";
    let now = Timestamp::now();
    let stale = SignedDuration::try_from(stale_after).unwrap_or(SignedDuration::MAX);
    let cutoff = now.checked_sub(stale).unwrap_or(Timestamp::MIN);
    let previous = lock_row(store, job).await?;
    // One statement: insert, or take over a stale row; a live row stays.
    let won = sqlx::query(
        "INSERT INTO recon_locks (job, owner, acquired_at, heartbeat_at) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (job) DO UPDATE SET owner = excluded.owner, \
         acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at \
         WHERE recon_locks.heartbeat_at < $4",
    )
    .bind(job.to_string())
    .bind(owner.clone())
    .bind(ts_text(now))
    .bind(ts_text(cutoff))
    .execute(&store.pool)
    .await
    .map_err(store.db(context))?
    .rows_affected()
        == 1;
    let won = won || take_over_dead_holder(store, job, &owner, now).await?;
    if !won {
        let (holder, since, heartbeat) = match lock_row(store, job).await? {
            Some(row) => row,
            // Released between the two statements: let the caller retry.
            None => ("unknown".into(), "an unknown time".into(), String::new()),
        };
        let expires = heartbeat
            .parse::<Timestamp>()
            .ok()
            .and_then(|h| h.checked_add(stale).ok())
            .map(|t| format!(" (at {t} unless it beats again)"))
            .unwrap_or_default();
        return Err(StateError::Locked {
            job: job.to_string(),
            owner: holder,
            since,
            hint: format!(
                "if that run died, the lock expires {} after its last heartbeat{expires}; \
                 then run again",
                friendly(stale_after)
            ),
        });
    }
    if let Some((old_owner, since, heartbeat)) = previous {
        tracing::warn!(
            message = "Took over the run lock of a run that stopped beating; it probably died.",
            job,
            previous_owner = %old_owner,
            previous_since = %since,
            last_heartbeat = %heartbeat,
            stale_after = %friendly(stale_after),
        );
    }
    Ok(RunLock::start(store, job, owner, now, None, None, every))
}
