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

use futures_util::future::BoxFuture;
use jiff::Timestamp;
use sqlx::{AnyConnection, AnyPool, Connection, Row};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::postgres::advisory_holders;
use crate::{random_u64, ts_text, RunLocks, StateError, StateStore};

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
    pub(crate) backend_pid: Option<i32>,
    stop: Option<oneshot::Sender<()>>,
    /// The heartbeat; it hands back the PostgreSQL lock connection.
    task: Option<JoinHandle<Option<AnyConnection>>>,
    /// How many beats the heartbeat has done; closed when it ends.
    #[cfg_attr(not(test), allow(dead_code))]
    beaten: watch::Receiver<u64>,
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
pub(crate) fn holder_is_dead(owner: &str) -> bool {
    local_pid(owner).is_some_and(|pid| !process_exists(pid))
}

/// Whether `owner` (`host:pid:random`) names a process on this machine
/// that still exists (and is not this process's own previous lock).
pub(crate) fn holder_is_alive_here(owner: &str) -> bool {
    local_pid(owner).is_some_and(|pid| pid != std::process::id() && process_exists(pid))
}

/// The `recon_locks` row of a job: owner, acquired_at, heartbeat_at.
pub(crate) async fn lock_row(
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

impl RunLocks for StateStore {
    async fn acquire_lock(&self, job: &str, stale_after: Duration) -> Result<RunLock, StateError> {
        if job.is_empty() {
            return Err(StateError::Invalid("a run lock needs a job name".into()));
        }
        if stale_after.is_zero() {
            return Err(StateError::Invalid(
                "the run lock's stale_after must be longer than zero".into(),
            ));
        }
        let owner = new_owner();
        self.dialect
            .acquire_lock(self, job, owner, stale_after, period(stale_after))
            .await
    }
}

/// How often a lock that goes stale after `stale_after` beats: every third
/// of it, never more often than [`MIN_HEARTBEAT`].
fn period(stale_after: Duration) -> Duration {
    (stale_after / 3).max(MIN_HEARTBEAT)
}

/// What one heartbeat found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Beat {
    /// Still ours (or a failure worth retrying).
    Held,
    /// Lost: the run should stop; no more beats.
    Lost,
}

/// Calls `beat` on `state` every `every` until told to stop or a beat
/// finds the lock lost. The schedule alone, apart from the database, so
/// that tests drive it on tokio's paused clock.
pub(crate) async fn beat_loop<S>(
    every: Duration,
    mut stop: oneshot::Receiver<()>,
    state: &mut S,
    beat: impl for<'s> Fn(&'s mut S) -> BoxFuture<'s, Beat>,
) {
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            _ = tokio::time::sleep(every) => {}
        }
        if beat(state).await == Beat::Lost {
            return;
        }
    }
}

/// What the heartbeat needs: where to write and whose lock it is.
struct Heart {
    pool: AnyPool,
    /// PostgreSQL: the connection holding the advisory lock.
    conn: Option<AnyConnection>,
    job: String,
    owner: String,
    held: Arc<AtomicBool>,
    /// Counts beats done, for whoever waits for one.
    beats: watch::Sender<u64>,
}

/// Refreshes `heartbeat_at` once.
fn beat(h: &mut Heart) -> BoxFuture<'_, Beat> {
    Box::pin(async move {
        let sql = "UPDATE recon_locks SET heartbeat_at = $1 WHERE job = $2 AND owner = $3";
        let postgres = h.conn.is_some();
        let q = sqlx::query(sql)
            .bind(ts_text(Timestamp::now()))
            .bind(h.job.clone())
            .bind(h.owner.clone());
        let result = match h.conn.as_mut() {
            Some(c) => q.execute(c).await,
            None => q.execute(&h.pool).await,
        };
        let found = match result {
            Ok(r) if r.rows_affected() == 0 && !postgres => {
                h.held.store(false, Ordering::SeqCst);
                tracing::error!(
                    message = "Another process took over this run's lock (our heartbeat was too late); this run should stop.",
                    job = %h.job,
                    owner = %h.owner,
                );
                Beat::Lost
            }
            Ok(_) => Beat::Held,
            Err(e) if postgres => {
                // The lock lives and dies with this session.
                h.held.store(false, Ordering::SeqCst);
                h.conn = None;
                tracing::error!(
                    message = "Lost the connection holding this run's lock; another run may start; this run should stop.",
                    job = %h.job,
                    error = %e,
                );
                Beat::Lost
            }
            Err(e) => {
                tracing::warn!(message = "Run lock heartbeat failed; retrying.", job = %h.job, error = %e);
                Beat::Held
            }
        };
        h.beats.send_modify(|n| *n += 1);
        found
    })
}

/// Refreshes `heartbeat_at` every `every` until told to stop; returns the
/// PostgreSQL lock connection, if it still has it.
async fn heartbeat(
    mut heart: Heart,
    every: Duration,
    stop: oneshot::Receiver<()>,
) -> Option<AnyConnection> {
    beat_loop(every, stop, &mut heart, beat).await;
    heart.conn
}

impl RunLock {
    pub(crate) fn start(
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
        let (beats, beaten) = watch::channel(0);
        let heart = Heart {
            pool: store.pool.clone(),
            conn,
            job: job.to_string(),
            owner: owner.clone(),
            held: held.clone(),
            beats,
        };
        let task = tokio::spawn(heartbeat(heart, every, stop_rx));
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
            beaten,
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

#[cfg(test)]
impl RunLock {
    /// The heartbeat's count of beats (see [`beat`]); `changed` fails once
    /// the heartbeat has ended.
    pub(crate) fn beats(&self) -> watch::Receiver<u64> {
        self.beaten.clone()
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

#[cfg(test)]
mod clock_tests {
    //! The heartbeat's schedule on tokio's paused clock: no database, no
    //! wall time.

    use super::*;
    use tokio::time::Instant;

    /// Beats recorded by a fake heartbeat: when, and what each found.
    struct Fake {
        at: Vec<Duration>,
        start: Instant,
        lose_at: Option<usize>,
    }

    fn fake_beat(f: &mut Fake) -> BoxFuture<'_, Beat> {
        Box::pin(async move {
            f.at.push(f.start.elapsed());
            if Some(f.at.len()) == f.lose_at {
                Beat::Lost
            } else {
                Beat::Held
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn beats_every_period_until_stopped() {
        let (stop, stopped) = oneshot::channel();
        let mut fake = Fake {
            at: Vec::new(),
            start: Instant::now(),
            lose_at: None,
        };
        let every = period(Duration::from_secs(30));
        assert_eq!(every, Duration::from_secs(10));
        let stopper = async {
            tokio::time::sleep(Duration::from_secs(35)).await;
            stop.send(()).unwrap();
        };
        tokio::join!(beat_loop(every, stopped, &mut fake, fake_beat), stopper);
        let s = Duration::from_secs;
        assert_eq!(fake.at, [s(10), s(20), s(30)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lock_ends_the_heartbeat() {
        let (_stop, stopped) = oneshot::channel::<()>();
        let mut fake = Fake {
            at: Vec::new(),
            start: Instant::now(),
            lose_at: Some(2),
        };
        beat_loop(Duration::from_secs(10), stopped, &mut fake, fake_beat).await;
        let s = Duration::from_secs;
        assert_eq!(fake.at, [s(10), s(20)], "no beat after the one that lost");
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_before_the_first_beat_beats_never() {
        let (stop, stopped) = oneshot::channel();
        let mut fake = Fake {
            at: Vec::new(),
            start: Instant::now(),
            lose_at: None,
        };
        stop.send(()).unwrap();
        beat_loop(Duration::from_secs(10), stopped, &mut fake, fake_beat).await;
        assert!(fake.at.is_empty());
        assert_eq!(fake.start.elapsed(), Duration::ZERO);
    }

    #[test]
    fn short_locks_beat_no_faster_than_the_minimum() {
        assert_eq!(period(Duration::from_millis(90)), MIN_HEARTBEAT);
        assert_eq!(period(Duration::from_secs(600)), Duration::from_secs(200));
    }
}
