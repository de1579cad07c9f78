//! The run lock: at most one live run per job.
//!
//! - **PostgreSQL**: `pg_try_advisory_lock` on a stable hash of the job, on
//!   a connection of its own that the lock holds. PostgreSQL releases it when
//!   [`RunLock::release`] unlocks it or when that connection closes, so a
//!   killed process frees the job at once. The `recon_locks` row only says
//!   who holds it, for the message another run prints.
//! - **SQLite**: the `recon_locks` row is the lock. Its holder refreshes
//!   `heartbeat_at` every third of `stale_after`; a row whose heartbeat is
//!   older than `stale_after` belonged to a run that died and is taken over
//!   (with a warning). Acquisition is one atomic upsert, so two processes
//!   cannot both win.
//!
//! Dropping a [`RunLock`] without [`RunLock::release`] stops the heartbeat,
//! closes the PostgreSQL connection and deletes the row in the background
//! (only if still ours).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sqlx::{AnyConnection, AnyPool, Connection, Row};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{friendly, random_u64, stable_hash, ts_text, Backend, StateError, StateStore};

/// Shortest heartbeat period, whatever `stale_after` is.
const MIN_HEARTBEAT: Duration = Duration::from_millis(50);

/// A held run lock of one job. Call [`RunLock::release`] when the run ends.
pub struct RunLock {
    job: String,
    owner: String,
    acquired_at: Timestamp,
    held: Arc<AtomicBool>,
    pool: AnyPool,
    display: String,
    /// PostgreSQL: the advisory lock key.
    advisory_key: Option<i64>,
    /// PostgreSQL: the backend PID of the session holding the lock.
    backend_pid: Option<i32>,
    stop: Option<oneshot::Sender<()>>,
    /// The heartbeat; it hands back the PostgreSQL lock connection.
    task: Option<JoinHandle<Option<AnyConnection>>>,
}

impl std::fmt::Debug for RunLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLock")
            .field("job", &self.job)
            .field("owner", &self.owner)
            .field("acquired_at", &self.acquired_at)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

/// `host:pid:random`, unique per lock, readable in the error another run
/// prints.
fn new_owner() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_string());
    format!(
        "{}:{}:{:08x}",
        host.trim(),
        std::process::id(),
        random_u64() as u32
    )
}

/// The PostgreSQL advisory lock key of a job's run lock.
pub(super) fn advisory_key(job: &str) -> i64 {
    stable_hash(&format!("recon:run-lock:{job}"))
}

/// How many sessions of this database hold the advisory lock `key` (only
/// session `pid`'s, when given). A bigint key shows in `pg_locks` as its
/// high half (classid) and low half (objid), objsubid 1:
/// https://www.postgresql.org/docs/current/view-pg-locks.html
pub(super) async fn advisory_holders(
    pool: &AnyPool,
    key: i64,
    pid: Option<i32>,
) -> Result<i64, sqlx::Error> {
    let key = key as u64;
    sqlx::query(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1 \
         AND (CAST($3 AS INTEGER) IS NULL OR pid = CAST($3 AS INTEGER))",
    )
    .bind((key >> 32) as i64)
    .bind((key & 0xffff_ffff) as i64)
    .bind(pid)
    .fetch_one(pool)
    .await
    .and_then(|r| r.try_get(0))
}

/// The PID of `owner` (`host:pid:random`) when it names a process of this
/// machine and `/proc` can tell whether it lives; `None` otherwise.
fn local_pid(owner: &str) -> Option<u32> {
    let host = |o: &str| o.split(':').next().unwrap_or_default().to_string();
    let pid = owner
        .split(':')
        .nth(1)
        .and_then(|p| p.parse::<u32>().ok())?;
    (host(owner) == host(&new_owner()) && std::path::Path::new("/proc/self").exists())
        .then_some(pid)
}

fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether `owner` (`host:pid:random`) names a process on this machine
/// that no longer exists. Only decidable where `/proc` exists.
pub(super) fn holder_is_dead(owner: &str) -> bool {
    local_pid(owner).is_some_and(|pid| !process_exists(pid))
}

/// Whether `owner` (`host:pid:random`) names a process on this machine
/// that still exists (and is not this process's own previous lock).
pub(super) fn holder_is_alive_here(owner: &str) -> bool {
    local_pid(owner).is_some_and(|pid| pid != std::process::id() && process_exists(pid))
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

/// The `recon_locks` row of a job: owner, acquired_at, heartbeat_at.
async fn lock_row(
    store: &StateStore,
    job: &str,
) -> Result<Option<(String, String, String)>, StateError> {
    let context = "reading the run lock";
    let row =
        sqlx::query("SELECT owner, acquired_at, heartbeat_at FROM recon_locks WHERE job = $1")
            .bind(job.to_string())
            .fetch_optional(&store.pool)
            .await
            .map_err(store.db(context))?;
    match row {
        None => Ok(None),
        Some(r) => Ok(Some((
            r.try_get(0).map_err(store.db(context))?,
            r.try_get(1).map_err(store.db(context))?,
            r.try_get(2).map_err(store.db(context))?,
        ))),
    }
}

pub(super) async fn acquire(
    store: &StateStore,
    job: &str,
    stale_after: Duration,
) -> Result<RunLock, StateError> {
    if job.is_empty() {
        return Err(StateError::Invalid("a run lock needs a job name".into()));
    }
    if stale_after.is_zero() {
        return Err(StateError::Invalid(
            "the run lock's stale_after must be longer than zero".into(),
        ));
    }
    let owner = new_owner();
    let every = (stale_after / 3).max(MIN_HEARTBEAT);
    match store.backend {
        Backend::Sqlite => acquire_sqlite(store, job, owner, stale_after, every).await,
        Backend::Postgres => acquire_postgres(store, job, owner, every).await,
    }
}

async fn acquire_sqlite(
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

async fn acquire_postgres(
    store: &StateStore,
    job: &str,
    owner: String,
    every: Duration,
) -> Result<RunLock, StateError> {
    let context = "acquiring the run lock";
    let key = advisory_key(job);
    let mut conn =
        AnyConnection::connect(&store.url)
            .await
            .map_err(|source| StateError::Connect {
                url: store.display.clone(),
                hint: "check that PostgreSQL is running and accepts one more connection".into(),
                source,
            })?;
    let got: bool = sqlx::query("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut conn)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(store.db(context))?;
    if !got {
        let _ = conn.close().await;
        let (holder, since) = match lock_row(store, job).await? {
            Some((o, s, _)) => (o, s),
            None => ("unknown".into(), "an unknown time".into()),
        };
        return Err(StateError::Locked {
            job: job.to_string(),
            owner: holder,
            since,
            hint: "if that run died, the lock expires as soon as its PostgreSQL session ends \
                   (stop the process, or end its session with pg_terminate_backend); \
                   then run again"
                .into(),
        });
    }
    let backend_pid: i32 = sqlx::query("SELECT pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(store.db(context))?;
    let now = Timestamp::now();
    let previous = lock_row(store, job).await?;
    sqlx::query(
        "INSERT INTO recon_locks (job, owner, acquired_at, heartbeat_at) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (job) DO UPDATE SET owner = excluded.owner, \
         acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at",
    )
    .bind(job.to_string())
    .bind(owner.clone())
    .bind(ts_text(now))
    .execute(&mut conn)
    .await
    .map_err(store.db(context))?;
    if let Some((old_owner, since, heartbeat)) = previous {
        tracing::warn!(
            message = "The previous holder of this run lock ended without releasing it; it probably died.",
            job,
            previous_owner = %old_owner,
            previous_since = %since,
            last_heartbeat = %heartbeat,
        );
    }
    let mut lock = RunLock::start(store, job, owner, now, Some(key), Some(conn), every);
    lock.backend_pid = Some(backend_pid);
    Ok(lock)
}

/// Refreshes `heartbeat_at` every `every` until told to stop; returns the
/// PostgreSQL lock connection, if it still has it.
async fn heartbeat(
    pool: AnyPool,
    mut conn: Option<AnyConnection>,
    job: String,
    owner: String,
    every: Duration,
    held: Arc<AtomicBool>,
    mut stop: oneshot::Receiver<()>,
) -> Option<AnyConnection> {
    let sql = "UPDATE recon_locks SET heartbeat_at = $1 WHERE job = $2 AND owner = $3";
    let postgres = conn.is_some();
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return conn,
            _ = tokio::time::sleep(every) => {}
        }
        let q = sqlx::query(sql)
            .bind(ts_text(Timestamp::now()))
            .bind(job.clone())
            .bind(owner.clone());
        let result = match conn.as_mut() {
            Some(c) => q.execute(c).await,
            None => q.execute(&pool).await,
        };
        match result {
            Ok(r) if r.rows_affected() == 0 && !postgres => {
                held.store(false, Ordering::SeqCst);
                tracing::error!(
                    message = "Another process took over this run's lock (our heartbeat was too late); this run should stop.",
                    job = %job,
                    owner = %owner,
                );
                return None;
            }
            Ok(_) => {}
            Err(e) if postgres => {
                // The lock lives and dies with this session.
                held.store(false, Ordering::SeqCst);
                tracing::error!(
                    message = "Lost the connection holding this run's lock; another run may start; this run should stop.",
                    job = %job,
                    error = %e,
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(message = "Run lock heartbeat failed; retrying.", job = %job, error = %e);
            }
        }
    }
}

impl RunLock {
    fn start(
        store: &StateStore,
        job: &str,
        owner: String,
        acquired_at: Timestamp,
        advisory_key: Option<i64>,
        conn: Option<AnyConnection>,
        every: Duration,
    ) -> RunLock {
        let held = Arc::new(AtomicBool::new(true));
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(heartbeat(
            store.pool.clone(),
            conn,
            job.to_string(),
            owner.clone(),
            every,
            held.clone(),
            stop_rx,
        ));
        RunLock {
            job: job.to_string(),
            owner,
            acquired_at,
            held,
            pool: store.pool.clone(),
            display: store.display.clone(),
            advisory_key,
            backend_pid: None,
            stop: Some(stop_tx),
            task: Some(task),
        }
    }

    /// The job locked.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// This holder's id, `host:pid:random`.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// When the lock was acquired.
    pub fn acquired_at(&self) -> Timestamp {
        self.acquired_at
    }

    /// False once the heartbeat found the lock lost (taken over after a
    /// stall on SQLite, connection lost on PostgreSQL): the run should stop
    /// before writing more.
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    /// Asks the database, now, whether this run still holds its lock
    /// (PostgreSQL: the lock session still holds the advisory lock; SQLite:
    /// the lock row still names this owner). A lost lock is remembered:
    /// [`RunLock::is_held`] turns false. Called before every write batch.
    pub async fn verify(&self) -> Result<bool, StateError> {
        if !self.is_held() {
            return Ok(false);
        }
        let context = "checking the run lock";
        let db = |source| StateError::Database {
            url: self.display.clone(),
            context: context.to_string(),
            source,
        };
        let held = match (self.advisory_key, self.backend_pid) {
            (Some(key), Some(pid)) => {
                advisory_holders(&self.pool, key, Some(pid))
                    .await
                    .map_err(db)?
                    > 0
            }
            _ => {
                let owner: Option<String> =
                    sqlx::query("SELECT owner FROM recon_locks WHERE job = $1")
                        .bind(self.job.clone())
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(db)?
                        .map(|r| r.try_get(0))
                        .transpose()
                        .map_err(db)?;
                owner.as_deref() == Some(self.owner.as_str())
            }
        };
        if !held {
            self.held.store(false, Ordering::SeqCst);
        }
        Ok(held)
    }

    /// Stops the heartbeat and releases the lock (deleting the row only if
    /// it is still ours).
    pub async fn release(mut self) -> Result<(), StateError> {
        let context = "releasing the run lock";
        let db = |source| StateError::Database {
            url: self.display.clone(),
            context: context.to_string(),
            source,
        };
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if !self.is_held() {
            // Lost already (session ended, or taken over): there is nothing
            // of ours to unlock; remove the row only if it still names us.
            if let Some(task) = self.task.take() {
                task.abort();
            }
            let _ = sqlx::query("DELETE FROM recon_locks WHERE job = $1 AND owner = $2")
                .bind(self.job.clone())
                .bind(self.owner.clone())
                .execute(&self.pool)
                .await;
            return Ok(());
        }
        let conn = match self.task.take() {
            Some(task) => task.await.ok().flatten(),
            None => None,
        };
        let delete = "DELETE FROM recon_locks WHERE job = $1 AND owner = $2";
        let deleted = match (conn, self.advisory_key) {
            (Some(mut conn), Some(key)) => {
                let deleted = sqlx::query(delete)
                    .bind(self.job.clone())
                    .bind(self.owner.clone())
                    .execute(&mut conn)
                    .await
                    .map_err(db)?
                    .rows_affected();
                sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(key)
                    .execute(&mut conn)
                    .await
                    .map_err(db)?;
                let _ = conn.close().await;
                deleted
            }
            _ => sqlx::query(delete)
                .bind(self.job.clone())
                .bind(self.owner.clone())
                .execute(&self.pool)
                .await
                .map_err(db)?
                .rows_affected(),
        };
        if deleted == 0 && self.advisory_key.is_none() {
            tracing::warn!(
                message = "The run lock had already been taken over by another process.",
                job = %self.job,
            );
        }
        self.held.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Stops the heartbeat and drops the PostgreSQL connection without
    /// touching the row, as a killed process would.
    #[cfg(test)]
    pub(crate) fn abandon(mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        // Dropping the heartbeat drops the PostgreSQL connection, which
        // frees the advisory lock.
        self.stop.take();
        task.abort();
        self.held.store(false, Ordering::SeqCst);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let pool = self.pool.clone();
            let job = self.job.clone();
            let owner = self.owner.clone();
            handle.spawn(async move {
                let _ = sqlx::query("DELETE FROM recon_locks WHERE job = $1 AND owner = $2")
                    .bind(job)
                    .bind(owner)
                    .execute(&pool)
                    .await;
            });
        }
    }
}
