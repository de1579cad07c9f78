//! Every test body runs twice: on its own SQLite file and on its own
//! PostgreSQL database (`recon_sql::testing::TestDb`).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use recon_core::{lower_hex, Window};
use recon_sql::testing::TestDb;
use recon_sql::Dialect;
use serde_json::json;

use super::*;
use crate::migrate;
use sqlx::{Connection, Row};

/// Runs `body` on a fresh database of `dialect`, then drops it.
async fn on<F, Fut>(dialect: Dialect, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let db = TestDb::create(dialect).await;
    body(db.url.clone()).await;
    db.drop_db().await;
}

/// One `#[tokio::test]` per dialect for a body `async fn(String)`.
macro_rules! both {
    ($($body:ident),* $(,)?) => {
        $(
            mod $body {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::on(recon_sql::Dialect::Sqlite, super::$body).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::on(recon_sql::Dialect::Postgres, super::$body).await;
                }
            }
        )*
    };
}

both!(
    migrations_are_idempotent,
    lock_excludes_until_released,
    heartbeat_keeps_a_live_lock,
    start_run_marks_crashed_runs,
    ledger_round_trip,
    discrepancy_history,
    history_written_before_marks,
    many_discrepancies,
    open_history_reads_every_row_once,
    last_success_end_ignores_dry_and_failed_runs,
    recent_runs_order_and_limit,
    run_summaries_round_trip,
);

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn window(start: &str, end: &str) -> Window {
    Window {
        start: ts(start),
        end: ts(end),
    }
}

fn day() -> Window {
    window("2026-11-28T00:00:00Z", "2026-11-29T00:00:00Z")
}

async fn count(store: &StateStore, sql: &str) -> i64 {
    sqlx::query(sql)
        .fetch_one(&store.pool)
        .await
        .and_then(|r| r.try_get::<i64, _>(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn migrations_are_idempotent(url: String) {
    let a = StateStore::open(&url).await.unwrap();
    let b = StateStore::open(&url).await.unwrap();
    // Two more at once, as two processes starting together would.
    let (c, d) = tokio::join!(StateStore::open(&url), StateStore::open(&url));
    c.unwrap();
    d.unwrap();
    let backend = a.backend();
    assert_eq!(
        count(&b, "SELECT COUNT(*) FROM _sqlx_migrations").await,
        migrate::migrator(backend).iter().count() as i64
    );
    assert_eq!(
        count(&a, "SELECT MAX(version) FROM _sqlx_migrations").await,
        migrate::latest(backend)
    );
    assert_eq!(
        count(
            &a,
            "SELECT COUNT(*) FROM _sqlx_migrations WHERE success = false"
        )
        .await,
        0
    );
    for table in [
        "recon_runs",
        "recon_backfill_items",
        "recon_discrepancies",
        "recon_locks",
    ] {
        assert_eq!(count(&a, &format!("SELECT COUNT(*) FROM {table}")).await, 0);
    }
    // Data survives reopening.
    let id = a.start_run("nightly", day(), false).await.unwrap();
    let e = StateStore::open(&url).await.unwrap();
    assert_eq!(e.recent_runs(None, 10).await.unwrap()[0].id, id);
}

async fn lock_excludes_until_released(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let other = StateStore::open(&url).await.unwrap();
    let stale = Duration::from_secs(600);
    let lock = store.acquire_lock("nightly", stale).await.unwrap();
    assert!(lock.is_held());
    assert_eq!(lock.job(), "nightly");
    for s in [&store, &other] {
        match s.acquire_lock("nightly", stale).await {
            Err(StateError::Locked { job, owner, .. }) => {
                assert_eq!(job, "nightly");
                assert_eq!(owner, lock.owner());
            }
            other => panic!("expected Locked, got {other:?}"),
        }
    }
    let message = other
        .acquire_lock("nightly", stale)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("job `nightly` is already running (since "),
        "{message}"
    );
    assert!(
        message.contains("if that run died, the lock expires"),
        "{message}"
    );
    // Another job is independent.
    let weekly = other.acquire_lock("weekly", stale).await.unwrap();
    lock.release().await.unwrap();
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM recon_locks WHERE job = 'nightly'"
        )
        .await,
        0
    );
    let again = other.acquire_lock("nightly", stale).await.unwrap();
    assert_ne!(again.owner(), weekly.owner());
    again.release().await.unwrap();
    weekly.release().await.unwrap();
    assert_eq!(count(&store, "SELECT COUNT(*) FROM recon_locks").await, 0);
}

async fn heartbeat_keeps_a_live_lock(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let stale = Duration::from_secs(1);
    let lock = store.acquire_lock("nightly", stale).await.unwrap();
    // What 1.5 s without a beat would leave: a heartbeat older than
    // stale_after. Then the holder beats (two beats: one surely after).
    let mut beats = lock.beats();
    let seen = *beats.borrow_and_update();
    let first = ts_text(Timestamp::now() - jiff::SignedDuration::from_millis(1500));
    sqlx::query("UPDATE recon_locks SET heartbeat_at = $1")
        .bind(first.clone())
        .execute(&store.pool)
        .await
        .unwrap();
    while *beats.borrow_and_update() < seen + 2 {
        beats.changed().await.expect("the heartbeat is running");
    }
    // Older than stale_after, but the holder is alive and beating.
    assert!(matches!(
        store.acquire_lock("nightly", stale).await,
        Err(StateError::Locked { .. })
    ));
    let later: String = sqlx::query("SELECT heartbeat_at FROM recon_locks")
        .fetch_one(&store.pool)
        .await
        .unwrap()
        .get(0);
    assert!(later > first, "{later} > {first}");
    assert!(lock.is_held());
    lock.release().await.unwrap();
}

#[tokio::test]
async fn sqlite_stale_lock_is_taken_over() {
    on(Dialect::Sqlite, |url| async move {
        let store = StateStore::open(&url).await.unwrap();
        let stale = Duration::from_secs(1);
        let dead = store.acquire_lock("nightly", stale).await.unwrap();
        let dead_owner = dead.owner().to_string();
        dead.abandon(); // killed: no more heartbeats, row left behind
        let e = store.acquire_lock("nightly", stale).await.unwrap_err();
        assert!(matches!(&e, StateError::Locked { owner, .. } if *owner == dead_owner));
        assert!(
            e.to_string()
                .contains("expires 1s after its last heartbeat"),
            "{e}"
        );
        // What 1.3 s without a beat leaves: a heartbeat older than stale_after.
        sqlx::query("UPDATE recon_locks SET heartbeat_at = $1")
            .bind(ts_text(
                Timestamp::now() - jiff::SignedDuration::from_millis(1300),
            ))
            .execute(&store.pool)
            .await
            .unwrap();
        let lock = store.acquire_lock("nightly", stale).await.unwrap();
        assert_ne!(lock.owner(), dead_owner);
        let owner: String = sqlx::query("SELECT owner FROM recon_locks WHERE job = 'nightly'")
            .fetch_one(&store.pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(owner, lock.owner());
        lock.release().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn sqlite_overtaken_holder_notices_and_keeps_the_row() {
    on(Dialect::Sqlite, |url| async move {
        let store = StateStore::open(&url).await.unwrap();
        let lock = store
            .acquire_lock("nightly", Duration::from_secs(600))
            .await
            .unwrap();
        // Someone else owns the row now (as after a takeover during a stall).
        sqlx::query("UPDATE recon_locks SET owner = 'other:1:0'")
            .execute(&store.pool)
            .await
            .unwrap();
        let lock2 = store
            .acquire_lock("nightly2", Duration::from_millis(150))
            .await
            .unwrap();
        sqlx::query("UPDATE recon_locks SET owner = 'other:2:0' WHERE job = 'nightly2'")
            .execute(&store.pool)
            .await
            .unwrap();
        // Its next beat finds the row taken and ends the heartbeat.
        let mut beats = lock2.beats();
        while lock2.is_held() {
            if beats.changed().await.is_err() {
                break;
            }
        }
        assert!(!lock2.is_held());
        lock2.release().await.unwrap();
        lock.release().await.unwrap();
        // Release deleted neither row: they are not ours.
        assert_eq!(count(&store, "SELECT COUNT(*) FROM recon_locks").await, 2);
    })
    .await;
}

#[tokio::test]
async fn postgres_lock_is_freed_when_its_connection_closes() {
    on(Dialect::Postgres, |url| async move {
        let a = StateStore::open(&url).await.unwrap();
        let b = StateStore::open(&url).await.unwrap();
        let stale = Duration::from_secs(600);

        // Killed process: the lock connection closes, the row stays.
        let dead = a.acquire_lock("nightly", stale).await.unwrap();
        let dead_owner = dead.owner().to_string();
        assert!(matches!(
            b.acquire_lock("nightly", stale).await,
            Err(StateError::Locked { .. })
        ));
        dead.abandon();
        let lock = acquire_once_free(&b, "nightly", stale).await;
        assert_ne!(lock.owner(), dead_owner);
        let owner: String = sqlx::query("SELECT owner FROM recon_locks WHERE job = 'nightly'")
            .fetch_one(&b.pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(owner, lock.owner());

        // Dropped without release, and the whole holding store closed.
        drop(lock);
        b.close().await;
        let again = acquire_once_free(&a, "nightly", stale).await;
        again.release().await.unwrap();
    })
    .await;
}

/// Waits until no session holds `job`'s advisory lock: the server notices
/// a closed connection a moment later. PostgreSQL itself waits (a blocking
/// `pg_advisory_lock` on a connection of its own, released at once): no
/// polling, no clock.
pub(crate) async fn wait_until_free(store: &StateStore, job: &str) {
    let key = crate::postgres::advisory_key(job);
    let mut conn = sqlx::AnyConnection::connect(&store.url).await.unwrap();
    sqlx::query("SELECT COUNT(*) FROM (SELECT pg_advisory_lock($1)) AS l")
        .bind(key)
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(key)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

/// Acquires `job`'s lock once its dead holder's session has ended.
async fn acquire_once_free(store: &StateStore, job: &str, stale: Duration) -> RunLock {
    wait_until_free(store, job).await;
    store.acquire_lock(job, stale).await.unwrap()
}

async fn start_run_marks_crashed_runs(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let first = store.start_run("nightly", day(), false).await.unwrap();
    assert!(first.starts_with("nightly-"), "{first}");
    let ids = |v: &[&str]| -> Vec<(String, &'static str)> {
        v.iter().map(|s| (s.to_string(), "insert")).collect()
    };
    store
        .record_plan(&first, "nightly", &ids(&["a", "b", "c"]))
        .await
        .unwrap();
    store
        .mark_items(&first, &[("a".into(), ItemStatus::Applied, None)])
        .await
        .unwrap();
    // Another job's run and plan are none of this job's business.
    let other = store.start_run("weekly", day(), false).await.unwrap();
    store
        .record_plan(&other, "weekly", &ids(&["x"]))
        .await
        .unwrap();
    // A finished run stays as it is.
    let done = store.start_run("nightly", day(), true).await.unwrap();
    assert_ne!(done, first);
    let runs = store.recent_runs(Some("nightly"), 10).await.unwrap();
    let status = |id: &str| {
        runs.iter()
            .find(|r| r.id == id)
            .map(|r| (r.status, r.error.clone()))
            .unwrap()
    };
    assert_eq!(status(&first).0, "crashed");
    assert!(status(&first)
        .1
        .unwrap()
        .contains("ended without finishing"));
    store
        .finish_run(&done, "clean", &json!({}), None, None)
        .await
        .unwrap();

    let second = store.start_run("nightly", day(), false).await.unwrap();
    let runs = store.recent_runs(None, 10).await.unwrap();
    let by_id: HashMap<&str, &str> = runs
        .iter()
        .map(|r| (r.id.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(by_id[first.as_str()], "crashed");
    assert_eq!(by_id[done.as_str()], "clean");
    assert_eq!(by_id[second.as_str()], "running");
    assert_eq!(by_id[other.as_str()], "running");

    let items = store.plan_items(&first).await.unwrap();
    let statuses: Vec<(&str, ItemStatus)> = items
        .iter()
        .map(|i| (i.external_id.as_str(), i.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("a", ItemStatus::Applied),
            ("b", ItemStatus::Superseded),
            ("c", ItemStatus::Superseded)
        ]
    );
    assert_eq!(
        store.plan_items(&other).await.unwrap()[0].status,
        ItemStatus::Planned
    );
}

async fn ledger_round_trip(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let plan = store.start_run("nightly", day(), false).await.unwrap();
    let items: Vec<(String, &str)> = vec![
        ("ch_3".into(), "insert"),
        ("ch_1".into(), "insert"),
        ("ch_2".into(), "update"),
        ("ch_4".into(), "insert"),
    ];
    store.record_plan(&plan, "nightly", &items).await.unwrap();
    // Recording the same plan again changes nothing.
    store.record_plan(&plan, "nightly", &items).await.unwrap();
    let e = store
        .record_plan(&plan, "nightly", &[("x".into(), "delete")])
        .await
        .unwrap_err();
    assert!(matches!(e, StateError::Invalid(_)), "{e}");

    store
        .mark_items(
            &plan,
            &[
                ("ch_1".into(), ItemStatus::Applied, None),
                ("ch_2".into(), ItemStatus::Failed, Some("HTTP 500".into())),
                ("ch_4".into(), ItemStatus::Failed, Some("timeout".into())),
            ],
        )
        .await
        .unwrap();
    store
        .mark_items(
            &plan,
            &[
                ("ch_2".into(), ItemStatus::Failed, Some("HTTP 503".into())),
                ("ch_4".into(), ItemStatus::Applied, None),
                ("not_in_plan".into(), ItemStatus::Applied, None),
            ],
        )
        .await
        .unwrap();
    store
        .mark_items(&plan, &[("ch_2".into(), ItemStatus::Applied, None)])
        .await
        .unwrap();
    store.record_plan(&plan, "nightly", &items).await.unwrap();

    let got = store.plan_items(&plan).await.unwrap();
    let item = |id: &str, action: &str, status, attempts, err: Option<&str>| LedgerItem {
        external_id: id.into(),
        action: action.into(),
        status,
        attempts,
        last_error: err.map(str::to_string),
    };
    assert_eq!(
        got,
        vec![
            item("ch_1", "insert", ItemStatus::Applied, 1, None),
            item("ch_2", "update", ItemStatus::Applied, 3, None),
            item("ch_3", "insert", ItemStatus::Planned, 0, None),
            item("ch_4", "insert", ItemStatus::Applied, 2, None),
        ]
    );
    store
        .mark_items(
            &plan,
            &[("ch_3".into(), ItemStatus::Failed, Some("refused".into()))],
        )
        .await
        .unwrap();
    let got = store.plan_items(&plan).await.unwrap();
    assert_eq!(
        got[2],
        item("ch_3", "insert", ItemStatus::Failed, 1, Some("refused"))
    );
    assert!(store.plan_items("no-such-plan").await.unwrap().is_empty());

    // A large plan goes in several batches.
    let big: Vec<(String, &str)> = (0..12_000)
        .map(|i| (format!("id{i:05}"), "insert"))
        .collect();
    store.record_plan("big", "nightly", &big).await.unwrap();
    let outcomes: Vec<(String, ItemStatus, Option<String>)> = (0..12_000)
        .step_by(2)
        .map(|i| (format!("id{i:05}"), ItemStatus::Applied, None))
        .collect();
    store.mark_items("big", &outcomes).await.unwrap();
    let got = store.plan_items("big").await.unwrap();
    assert_eq!(got.len(), 12_000);
    assert_eq!(
        got.iter()
            .filter(|i| i.status == ItemStatus::Applied && i.attempts == 1)
            .count(),
        6_000
    );
}

fn keys(v: &[(Class, &str)]) -> Vec<(Class, String)> {
    v.iter().map(|(c, s)| (*c, s.to_string())).collect()
}

fn set(v: &[(Class, &str)]) -> crate::DiscrepancySet {
    keys(v).into_iter().collect()
}

/// A delta's new discrepancies as a set, checking they are listed sorted
/// and once each, as the store inserts them.
fn as_set(new: &[(Class, String)]) -> crate::DiscrepancySet {
    assert!(
        new.windows(2).all(|w| w[0] < w[1]),
        "not sorted and unique: {new:?}"
    );
    new.iter().cloned().collect()
}

async fn discrepancy_history(url: String) {
    use Class::*;
    let store = StateStore::open(&url).await.unwrap();
    let t1 = ts("2026-11-29T03:00:00.123456789Z");
    let t2 = ts("2026-11-30T03:00:00Z");
    let t3 = ts("2026-12-01T03:00:00Z");
    let t4 = ts("2026-12-02T03:00:00Z");

    // Another job with the same IDs must not be touched.
    let w = store.start_run("weekly", day(), false).await.unwrap();
    store
        .update_discrepancies("weekly", &w, t1, &keys(&[(Gap, "a"), (Gap, "b")]))
        .await
        .unwrap();

    let r1 = store.start_run("nightly", day(), false).await.unwrap();
    let d1 = store
        .update_discrepancies(
            "nightly",
            &r1,
            t1,
            &keys(&[(Gap, "a"), (Gap, "b"), (Orphan, "c"), (Gap, "a")]),
        )
        .await
        .unwrap();
    assert_eq!(
        as_set(&d1.new),
        set(&[(Gap, "a"), (Gap, "b"), (Orphan, "c")])
    );
    assert!(d1.persisting.is_empty());
    assert!(d1.resolved.is_empty());

    let r2 = store.start_run("nightly", day(), false).await.unwrap();
    let d2 = store
        .update_discrepancies(
            "nightly",
            &r2,
            t2,
            &keys(&[(Gap, "a"), (Orphan, "c"), (Mismatch, "d")]),
        )
        .await
        .unwrap();
    assert_eq!(as_set(&d2.new), set(&[(Mismatch, "d")]));
    assert_eq!(
        d2.persisting,
        crate::Persisting::from_iter([
            ((Gap, "a".to_string()), t1),
            ((Orphan, "c".to_string()), t1)
        ])
    );
    assert_eq!(d2.resolved, vec![(Gap, "b".to_string(), t1)]);

    let r3 = store.start_run("nightly", day(), false).await.unwrap();
    let d3 = store
        .update_discrepancies(
            "nightly",
            &r3,
            t3,
            &keys(&[(Gap, "b"), (Mismatch, "d"), (Duplicate, "a")]),
        )
        .await
        .unwrap();
    // `b` was resolved and is back: new again.
    assert_eq!(as_set(&d3.new), set(&[(Gap, "b"), (Duplicate, "a")]));
    assert_eq!(
        d3.persisting,
        crate::Persisting::from_iter([((Mismatch, "d".to_string()), t2)])
    );
    assert_eq!(
        d3.resolved,
        vec![(Gap, "a".to_string(), t1), (Orphan, "c".to_string(), t1)]
    );

    let row = sqlx::query(
        "SELECT first_seen_run, first_seen_at, last_seen_run, resolved_at FROM recon_discrepancies \
         WHERE job = 'nightly' AND class = 'gap' AND external_id = 'b'",
    )
    .fetch_one(&store.pool)
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>(0), r3);
    assert_eq!(row.get::<String, _>(1), ts_text(t3));
    // Reopened: its own last sighting is empty while it is open (the
    // job's mark holds it).
    assert_eq!(row.get::<String, _>(2), "");
    assert_eq!(row.get::<Option<String>, _>(3), None);
    let resolved_a: Option<String> = sqlx::query(
        "SELECT resolved_at FROM recon_discrepancies \
         WHERE job = 'nightly' AND class = 'gap' AND external_id = 'a'",
    )
    .fetch_one(&store.pool)
    .await
    .unwrap()
    .get(0);
    assert_eq!(resolved_a, Some(ts_text(t3)));
    // `d` persisted through r3 without its row being written again
    // (migration 13): the row still holds what r2 wrote (its first
    // sighting, its last left empty), the story says r3.
    let stored = sqlx::query(
        "SELECT first_seen_run, last_seen_run, last_seen_at FROM recon_discrepancies \
         WHERE job = 'nightly' AND class = 'mismatch' AND external_id = 'd'",
    )
    .fetch_one(&store.pool)
    .await
    .unwrap();
    let stored: (String, String, String) = (stored.get(0), stored.get(1), stored.get(2));
    assert_eq!(stored, (r2.clone(), String::new(), String::new()));
    let d = store.id_records("nightly", "d").await.unwrap().streaks;
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].first_seen_run.as_str(), d[0].first_seen_at),
        (r2.as_str(), t2)
    );
    assert_eq!(
        (d[0].last_seen_run.as_str(), d[0].last_seen_at),
        (r3.as_str(), t3)
    );
    assert_eq!(d[0].resolved_at, None);
    // The resolved `a` was last seen by r2, the run before the one that
    // resolved it, although r2 did not write its row.
    let a = store.id_records("nightly", "a").await.unwrap().streaks;
    let gap_a = a.iter().find(|s| s.class == Gap).unwrap();
    assert_eq!(
        (gap_a.last_seen_run.as_str(), gap_a.last_seen_at),
        (r2.as_str(), t2)
    );
    assert_eq!(gap_a.resolved_at, Some(t3));

    // Nothing found: everything open resolves.
    let r4 = store.start_run("nightly", day(), false).await.unwrap();
    let d4 = store
        .update_discrepancies("nightly", &r4, t4, &[])
        .await
        .unwrap();
    assert!(d4.new.is_empty() && d4.persisting.is_empty());
    assert_eq!(
        d4.resolved,
        vec![
            (Gap, "b".to_string(), t3),
            (Mismatch, "d".to_string(), t2),
            (Duplicate, "a".to_string(), t3),
        ]
    );
    let d = store.id_records("nightly", "d").await.unwrap().streaks;
    assert_eq!(
        (d[0].last_seen_run.as_str(), d[0].last_seen_at),
        (r3.as_str(), t3)
    );
    assert_eq!(d[0].resolved_at, Some(t4));
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM recon_discrepancies WHERE job = 'weekly' AND resolved_at IS NULL"
        )
        .await,
        2
    );
    // The other job's open rows are still last seen by its own run.
    let b = store.id_records("weekly", "b").await.unwrap().streaks;
    assert_eq!(
        (b[0].last_seen_run.as_str(), b[0].resolved_at),
        (w.as_str(), None)
    );
    assert_eq!(discrepancy_id("nightly", Gap, "ch_1"), "nightly:gap:ch_1");
}

/// A store whose history was written before migration 13 has no mark:
/// every row holds its own last sighting. The first run after it neither
/// loses nor invents one.
async fn history_written_before_marks(url: String) {
    use Class::*;
    let store = StateStore::open(&url).await.unwrap();
    let (t1, t2, t3) = (
        ts("2026-11-29T03:00:00Z"),
        ts("2026-11-30T03:00:00Z"),
        ts("2026-12-01T03:00:00Z"),
    );
    let r1 = store.start_run("nightly", day(), false).await.unwrap();
    store
        .update_discrepancies("nightly", &r1, t1, &keys(&[(Gap, "a"), (Gap, "b")]))
        .await
        .unwrap();
    sqlx::query("DELETE FROM recon_history_marks")
        .execute(&store.pool)
        .await
        .unwrap();
    // Before migration 13 every run wrote each row's last sighting: `a`
    // as such a row (first seen by an earlier run). `b` keeps what runs
    // write now (its own empty): with no mark, its first sighting is its
    // last.
    sqlx::query(&format!(
        "UPDATE recon_discrepancies SET first_seen_run = 'r0', first_seen_at = '{}', \
         last_seen_run = '{r1}', last_seen_at = '{}' WHERE external_id = 'a'",
        ts_text(ts("2026-11-28T03:00:00Z")),
        ts_text(t1)
    ))
    .execute(&store.pool)
    .await
    .unwrap();
    let a = store.id_records("nightly", "a").await.unwrap().streaks;
    assert_eq!(
        (a[0].last_seen_run.as_str(), a[0].last_seen_at),
        (r1.as_str(), t1)
    );

    let r2 = store.start_run("nightly", day(), false).await.unwrap();
    let d2 = store
        .update_discrepancies("nightly", &r2, t2, &keys(&[(Gap, "a"), (Orphan, "c")]))
        .await
        .unwrap();
    assert_eq!(d2.resolved, vec![(Gap, "b".to_string(), t1)]);
    let b = store.id_records("nightly", "b").await.unwrap().streaks;
    assert_eq!(
        (b[0].last_seen_run.as_str(), b[0].last_seen_at),
        (r1.as_str(), t1)
    );
    assert_eq!(b[0].resolved_at, Some(t2));
    for id in ["a", "c"] {
        let s = store.id_records("nightly", id).await.unwrap().streaks;
        assert_eq!(
            (s[0].last_seen_run.as_str(), s[0].last_seen_at),
            (r2.as_str(), t2)
        );
    }

    // Everything resolves (the scan path): last seen by r2, from the mark.
    let r3 = store.start_run("nightly", day(), false).await.unwrap();
    store
        .update_discrepancies("nightly", &r3, t3, &[])
        .await
        .unwrap();
    for id in ["a", "c"] {
        let s = store.id_records("nightly", id).await.unwrap().streaks;
        assert_eq!(
            (s[0].last_seen_run.as_str(), s[0].last_seen_at),
            (r2.as_str(), t2)
        );
        assert_eq!(s[0].resolved_at, Some(t3));
    }
}

/// The open set is read in chunks of 20,000 (keyset pages in the
/// database's own key order, class by class): none is skipped or read
/// twice, and each keeps its own first sighting, whatever the IDs hold
/// (quotes, backslashes, commas, non-ASCII, case pairs, class borders)
/// and however sightings interleave.
async fn open_history_reads_every_row_once(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let shapes = |i: usize| match i % 7 {
        0 => format!("ch_{i:06}"),
        1 => format!("CH_{i:06}"),
        2 => format!("q\"{i}\\"),
        3 => format!("é{i}"),
        4 => format!("{i}\u{1F600}"),
        5 => format!("a,b,{i}"),
        _ => format!("a b/{i}?#@"),
    };
    // Gaps past one chunk; the other classes a few thousand each.
    let class = |i: usize| match i {
        0..25_000 => Class::Gap,
        _ => [Class::Gap, Class::Orphan, Class::Mismatch, Class::Duplicate][(i / 7) % 4],
    };
    let first: Vec<(Class, String)> = (0..45_001).map(|i| (class(i), shapes(i))).collect();
    // A second run finds more, their IDs between the first run's.
    let later: Vec<(Class, String)> = (0..45_001)
        .step_by(3)
        .map(|i| (class(i), format!("{}~", shapes(i))))
        .collect();
    let (t1, t2) = (ts("2026-11-29T03:00:00Z"), ts("2026-11-30T03:00:00.5Z"));
    let r1 = store.start_run("nightly", day(), false).await.unwrap();
    store
        .update_discrepancies("nightly", &r1, t1, &first)
        .await
        .unwrap();
    let all: Vec<(Class, String)> = first.iter().chain(&later).cloned().collect();
    let r2 = store.start_run("nightly", day(), false).await.unwrap();
    store
        .update_discrepancies("nightly", &r2, t2, &all)
        .await
        .unwrap();
    let again = store.discrepancy_delta("nightly", &all).await.unwrap();
    assert!(again.new.is_empty(), "{} read as new", again.new.len());
    assert_eq!(again.persisting.len(), all.len());
    for (c, id) in &first {
        assert_eq!(again.persisting.get(*c, id), Some(t1), "{c:?} {id}");
    }
    for (c, id) in &later {
        assert_eq!(again.persisting.get(*c, id), Some(t2), "{c:?} {id}");
    }
    let gone = store.discrepancy_delta("nightly", &[]).await.unwrap();
    let mut expected: Vec<(Class, String, Timestamp)> = first
        .iter()
        .map(|(c, id)| (*c, id.clone(), t1))
        .chain(later.iter().map(|(c, id)| (*c, id.clone(), t2)))
        .collect();
    expected.sort();
    assert_eq!(gone.resolved, expected);
}

async fn many_discrepancies(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let n = 20_000;
    let class = |i: usize| [Class::Gap, Class::Orphan, Class::Mismatch, Class::Duplicate][i % 4];
    let all: Vec<(Class, String)> = (0..n).map(|i| (class(i), format!("id{i:06}"))).collect();
    let t1 = ts("2026-11-29T03:00:00Z");
    let t2 = ts("2026-11-30T03:00:00Z");

    let r1 = store.start_run("nightly", day(), false).await.unwrap();
    let d1 = store
        .update_discrepancies("nightly", &r1, t1, &all)
        .await
        .unwrap();
    assert_eq!(d1.new.len(), n);
    assert_eq!(as_set(&d1.new), all.iter().cloned().collect());
    assert!(d1.persisting.is_empty() && d1.resolved.is_empty());

    // Second run: the first half persists, the second half resolves, and
    // 5,000 new ones appear.
    let mut current: Vec<(Class, String)> = all[..n / 2].to_vec();
    current.extend((n..n + 5000).map(|i| (class(i), format!("id{i:06}"))));
    let r2 = store.start_run("nightly", day(), false).await.unwrap();
    let d2 = store
        .update_discrepancies("nightly", &r2, t2, &current)
        .await
        .unwrap();
    assert_eq!(d2.new.len(), 5000);
    assert!(d2
        .new
        .iter()
        .all(|(_, id)| id.as_str() >= format!("id{n:06}").as_str()));
    assert_eq!(d2.persisting.len(), n / 2);
    assert!(d2.persisting.values().all(|t| *t == t1));
    assert_eq!(d2.resolved.len(), n / 2);
    let mut expected: Vec<(Class, String, Timestamp)> = all[n / 2..]
        .iter()
        .map(|(c, id)| (*c, id.clone(), t1))
        .collect();
    expected.sort();
    assert_eq!(d2.resolved, expected);
    // The persisting half was not written again; the story still says r2.
    assert_eq!(
        count(
            &store,
            &format!("SELECT COUNT(*) FROM recon_discrepancies WHERE first_seen_run = '{r1}' AND last_seen_run = '' AND resolved_at IS NULL"),
        )
        .await,
        (n / 2) as i64
    );
    let kept = store
        .id_records("nightly", &all[0].1)
        .await
        .unwrap()
        .streaks;
    assert_eq!(
        (kept[0].last_seen_run.as_str(), kept[0].resolved_at),
        (r2.as_str(), None)
    );
    let gone = store
        .id_records("nightly", &all[n - 1].1)
        .await
        .unwrap()
        .streaks;
    assert_eq!(
        (gone[0].last_seen_run.as_str(), gone[0].resolved_at),
        (r1.as_str(), Some(t2))
    );
}

async fn last_success_end_ignores_dry_and_failed_runs(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    assert_eq!(store.last_success_end("nightly").await.unwrap(), None);
    let runs = [
        ("2026-11-25T00:00:00Z", false, Some("clean")),
        ("2026-11-26T00:00:00Z", false, Some("discrepancies")),
        ("2026-11-27T00:00:00Z", true, Some("clean")),
        ("2026-11-28T00:00:00Z", false, Some("failed")),
        ("2026-11-29T00:00:00Z", false, None),
    ];
    for (end, dry, status) in runs {
        let w = Window {
            start: ts(end) - jiff::SignedDuration::from_hours(24),
            end: ts(end),
        };
        let id = store.start_run("nightly", w, dry).await.unwrap();
        if let Some(status) = status {
            store
                .finish_run(&id, status, &json!({"gaps": 1}), None, None)
                .await
                .unwrap();
        }
    }
    let other = store
        .start_run(
            "weekly",
            window("2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z"),
            false,
        )
        .await
        .unwrap();
    store
        .finish_run(&other, "clean", &json!({}), None, None)
        .await
        .unwrap();
    assert_eq!(
        store.last_success_end("nightly").await.unwrap(),
        Some(ts("2026-11-26T00:00:00Z"))
    );
    assert_eq!(
        store.last_success_end("weekly").await.unwrap(),
        Some(ts("2026-12-08T00:00:00Z"))
    );
    assert_eq!(store.last_success_end("monthly").await.unwrap(), None);
}

/// Migration 14: a run's summary is saved as JSON text and read back as
/// saved; none before it is saved; not JSON, or an unknown run, is refused.
async fn run_summaries_round_trip(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let run = store.start_run("nightly", day(), false).await.unwrap();
    let other = store.start_run("weekly", day(), false).await.unwrap();
    assert_eq!(store.summary(&run).await.unwrap(), None, "not saved yet");
    let json = r#"{"status":"clean","counts":{"gap":0},"total":12345678901234567890}"#;
    store.save_summary(&run, json).await.unwrap();
    assert_eq!(store.summary(&run).await.unwrap().as_deref(), Some(json));
    // Again: replaced.
    store
        .save_summary(&run, r#"{"status":"discrepancies"}"#)
        .await
        .unwrap();
    assert_eq!(
        store.summary(&run).await.unwrap().as_deref(),
        Some(r#"{"status":"discrepancies"}"#)
    );
    assert_eq!(store.summary(&other).await.unwrap(), None, "per run");
    match store.save_summary(&other, "{not json").await {
        Err(StateError::Invalid(m)) => assert!(m.contains("not JSON"), "{m}"),
        r => panic!("expected Invalid, got {r:?}"),
    }
    assert_eq!(store.summary(&other).await.unwrap(), None);
    assert!(matches!(
        store.save_summary("no-such-run", "{}").await,
        Err(StateError::UnknownRun(id)) if id == "no-such-run"
    ));
    assert_eq!(store.summary("no-such-run").await.unwrap(), None);
    // Finishing the run keeps it.
    store
        .finish_run(
            &run,
            RunStatus::Discrepancies,
            &json!({"gaps": 1}),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        store.summary(&run).await.unwrap().as_deref(),
        Some(r#"{"status":"discrepancies"}"#)
    );
}

async fn recent_runs_order_and_limit(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let w = window("2026-11-28T00:00:00.5Z", "2026-11-29T00:00:00Z");
    let mut ids = Vec::new();
    for (i, job) in ["nightly", "weekly", "nightly", "nightly", "weekly"]
        .iter()
        .enumerate()
    {
        ids.push((
            job.to_string(),
            store.start_run(job, w, i == 0).await.unwrap(),
        ));
    }
    store
        .finish_run(
            &ids[0].1,
            "discrepancies",
            &json!({"gaps": 3, "matched": 10}),
            Some("reports/nightly/1"),
            None,
        )
        .await
        .unwrap();
    store
        .finish_run(
            &ids[3].1,
            "failed",
            &json!(null),
            None,
            Some("target unreachable"),
        )
        .await
        .unwrap();
    let e = store
        .finish_run(&ids[2].1, "running", &json!({}), None, None)
        .await
        .unwrap_err();
    assert!(matches!(e, StateError::Invalid(_)), "{e}");
    assert!(matches!(
        store
            .finish_run("nope", "clean", &json!({}), None, None)
            .await,
        Err(StateError::UnknownRun(_))
    ));

    let all = store.recent_runs(None, 3).await.unwrap();
    let got: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(got, [&ids[4].1, &ids[3].1, &ids[2].1]);
    assert!(all.windows(2).all(|p| p[0].started_at >= p[1].started_at));

    let nightly = store.recent_runs(Some("nightly"), 10).await.unwrap();
    let got: Vec<&str> = nightly.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(got, [&ids[3].1, &ids[2].1, &ids[0].1]);
    assert!(store.recent_runs(None, 0).await.unwrap().is_empty());
    assert!(store
        .recent_runs(Some("monthly"), 5)
        .await
        .unwrap()
        .is_empty());

    let first = &nightly[2];
    assert_eq!(first.job, "nightly");
    assert_eq!(first.window_start, w.start);
    assert_eq!(first.window_end, w.end);
    assert!(first.dry_run);
    assert_eq!(first.status, "discrepancies");
    assert_eq!(first.counts, Some(json!({"gaps": 3, "matched": 10})));
    assert_eq!(first.report_dir.as_deref(), Some("reports/nightly/1"));
    assert!(first.finished_at.unwrap() >= first.started_at);
    let failed = &nightly[0];
    assert_eq!(failed.status, "failed");
    assert!(!failed.dry_run);
    assert_eq!(failed.error.as_deref(), Some("target unreachable"));
    assert_eq!(failed.counts, None);
    // Starting ids[3] found ids[2] still running: it crashed.
    let crashed = &nightly[1];
    assert_eq!(crashed.status, "crashed");
    assert_eq!(crashed.finished_at, None);
    assert_eq!(crashed.counts, None);
    assert!(crashed.error.as_deref().unwrap().contains(&ids[3].1));
    let running = &all[0];
    assert_eq!(running.job, "weekly");
    assert_eq!(running.status, "running");
    assert_eq!(running.finished_at, None);
}

#[test]
fn timestamps_are_fixed_width_and_exact() {
    let t = ts("2026-11-28T01:02:03.000000004Z");
    assert_eq!(ts_text(t), "2026-11-28T01:02:03.000000004Z");
    assert_eq!(ts_text(t).parse::<Timestamp>().unwrap(), t);
    assert_eq!(
        ts_text(ts("2026-11-28T00:00:00Z")),
        "2026-11-28T00:00:00.000000000Z"
    );
    assert_eq!(friendly(Duration::from_secs(1800)), "30m");
    assert_eq!(friendly(Duration::from_secs(1)), "1s");
}

#[test]
fn names_round_trip() {
    for c in [Class::Gap, Class::Orphan, Class::Mismatch, Class::Duplicate] {
        assert_eq!(c.as_str().parse::<Class>().unwrap(), c);
    }
    for s in [
        ItemStatus::Planned,
        ItemStatus::Applied,
        ItemStatus::Failed,
        ItemStatus::Superseded,
    ] {
        assert_eq!(s.as_str().parse::<ItemStatus>().unwrap(), s);
    }
    assert!("pending".parse::<Class>().is_err());
    assert!("done".parse::<ItemStatus>().is_err());
    assert_eq!(
        stable_hash("recon:run-lock:nightly"),
        stable_hash("recon:run-lock:nightly")
    );
    assert_ne!(
        stable_hash("recon:run-lock:a"),
        stable_hash("recon:run-lock:b")
    );
}

#[tokio::test]
async fn urls_are_checked_and_never_show_a_password() {
    for url in [
        "mysql://root:hunter2@127.0.0.1/db",
        "redis://u:hunter2@h/0",
        "sqlite://",
    ] {
        let e = StateStore::open(url).await.unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, StateError::UnsupportedUrl { .. }), "{m}");
        assert!(!m.contains("hunter2"), "{m}");
        assert!(m.contains("sqlite://PATH"), "{m}");
    }
    let e = StateStore::open("postgres://recon:hunter2@127.0.0.1:1/state")
        .await
        .unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, StateError::Connect { .. }), "{m}");
    assert!(!m.contains("hunter2"), "{m}");
    assert!(m.contains("recon:***@127.0.0.1:1"), "{m}");
}

#[tokio::test]
async fn sqlite_file_and_folder_are_created() {
    let dir = std::env::temp_dir().join(format!("recon_state_{:x}", random_u64()));
    let path = dir.join("sub").join("state.db");
    let store = StateStore::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert_eq!(store.backend(), Backend::Sqlite);
    assert!(path.exists());
    store.start_run("nightly", day(), false).await.unwrap();
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

// The sqlx migrations (`migrate`), and stores made by the hand-written
// runner that came before them (`migrate::legacy`).

both!(
    legacy_store_upgrades_in_place,
    legacy_store_at_step_2_upgrades_in_place,
    legacy_store_opened_twice_at_once,
    legacy_store_with_gaps_is_refused,
    edited_migration_is_named,
    newer_store_is_refused,
);

/// The SHA-384 of every released migration file. A change here means a
/// released migration was edited: stores that applied it refuse the new
/// build. Restore the file and add a new migration instead.
const RELEASED: &[(Backend, &str, &str)] = &[
    (Backend::Sqlite, "0001_runs_ledger_history_locks.sql", "ea60d1a0f89d8388e0a8addad00a8cbd641bc6fb96e904ae9a782598708ab4f2e942ee81d439916568e1e5ff809f415b"),
    (Backend::Sqlite, "0002_reviewed_plans.sql", "22e3118a8804fc58868611a0f8ef9aee23629999f6050aa394a3cc663859531967770dcf098600ae3556e168175647bf"),
    (Backend::Sqlite, "0003_unknown_outcomes_and_run_owners.sql", "3e8d9732616a7dc8f5538d6b659878b428b8213b46fa34a5abc2a5632ad532e67361acf413dcd1c5a204fc0db659277f"),
    (Backend::Sqlite, "0004_ledger_unknown_index.sql", "ced4f5fa20d781549dc7168d620b04c30a28e8e12a5e7dd4116529b7bdb6e28c1b9329c08be808ca1542f1351a887883"),
    (Backend::Sqlite, "0005_ledger_and_history_without_rowid.sql", "3a13d21ad2c3ffd66502139a8d767842c18591861e13ae640d190fc71a1be8e12e7fe1dd7302159fca66abb9368137a2"),
    (Backend::Sqlite, "0006_ledger_hot_updates_unknown_items.sql", "ce42c25c5ae632379ccb7bd7fd2ef60fc7630dc77b6bf541f63819618dc16ec7c65085b62101e52317c2d37574641e23"),
    (Backend::Sqlite, "0007_run_totals_and_discrepancy_streaks.sql", "afe09baa0b73fb74b7faa4cdd680410ce0faed3a3c4450b9ba47b8bf84c9d7f7731c03e3b791e91deb1e493433459d08"),
    (Backend::Sqlite, "0008_webhook_deliveries.sql", "2b87121d52b325af7ac4fa0c64fa23a749a2863dd06df3b081cb6bf646225d527e47e4a756b2db9813c0b266156fcefe"),
    (Backend::Sqlite, "0009_history_hot_updates.sql", "204be0e2599efdd8ac850cd016ba9a99225e5b11c3ecdaaba70987b8c4a5e7a59667a40f523be6e32ba5ec879803c09c"),
    (Backend::Sqlite, "0010_ledger_batches.sql", "920a88ca462d38acab358f1fd9608bef118c59f3df347df0e61c401858076b95f53c0c87f6f9ef74ed354ff6ab247c49"),
    (Backend::Sqlite, "0011_history_room_for_every_row.sql", "d3409dc5f10c119e5e1d266d28fe3271f1c5ebe227d0560d8d53b3a4ad346215696b2424d0c8138de94d285c9c4287bf"),
    (Backend::Sqlite, "0012_streaks_copied_when_reopened.sql", "a3de896fc822c7a8aa7e9a949c828e7610990786c28e514a1a33e4a043d499344ad75319ccfec9db17b3c0e46a4c672e"),
    (Backend::Sqlite, "0013_history_marks.sql", "523491276725c42de01505875c4c1c962d91414bf2617d03322a9006ccf7519140e072bd70bae32790a85b6fcc7504aa"),
    (Backend::Postgres, "0001_runs_ledger_history_locks.sql", "5f135219272fef83684ee941973c6da2c170b1d5ffeda5aed382486f6b0b2407fa584d067eb4d41e35356e868db6f676"),
    (Backend::Postgres, "0002_reviewed_plans.sql", "1f9eeec07ccb3ed8da4b3ee2ca4f30db64e1d5483c9304f325ce5621c3116b10bba871cea0ead7c06e312127320c950e"),
    (Backend::Postgres, "0003_unknown_outcomes_and_run_owners.sql", "b3938c4f7bb0ff9e4f9d51198cecc37500bee6e256e35dc59a9d9f795e1eb1fdb0a35bdc88736a9ab8b73e9cccb8746b"),
    (Backend::Postgres, "0004_ledger_unknown_index.sql", "ced4f5fa20d781549dc7168d620b04c30a28e8e12a5e7dd4116529b7bdb6e28c1b9329c08be808ca1542f1351a887883"),
    (Backend::Postgres, "0005_ledger_and_history_without_rowid.sql", "5cd970f66e8a9e1d598b14ee5951f1ae42a09e69c4298ae825b6ee52a791306b5548e90bb4666afb70f52cac6cfc27a5"),
    (Backend::Postgres, "0006_ledger_hot_updates_unknown_items.sql", "7dd9c2879130c90f6927d16cccf7de57e1e8d1cb5fc0babd94c0bad123f21f765a218f934c142d6c592ceb16e02b2a57"),
    (Backend::Postgres, "0007_run_totals_and_discrepancy_streaks.sql", "64936a744df6791cc9f0e6980a292135e151d3d9b81f917654e50b90d88613c51b61d4d2c205308082a88ded42caf77e"),
    (Backend::Postgres, "0008_webhook_deliveries.sql", "37a3362b6aad9ba50a9a4c18147a4219d7d5f75da3297a981f4a0c7cbc11ec6846b4ba47c280fa8d2f666668b6c76d2f"),
    (Backend::Postgres, "0009_history_hot_updates.sql", "4505aac01f00bf9466ef26de91b2bcb6859b035479e6b6a194b93294aba80cfba21d27bea3be834e8fb9a1420a7a3115"),
    (Backend::Postgres, "0010_ledger_batches.sql", "4ec1dd96cb7872b42d379e6391b5504ce68b3b98ed3f5781733066fd3d43151afdfc220c97ee157c4007918fdc8132cd"),
    (Backend::Postgres, "0011_history_room_for_every_row.sql", "9206dca3f5abf3c79464f4b39d4112c590f904bee5b60b7af4652db43204eab0ddf00c64e5421c5c065fc0f22aef37e4"),
    (Backend::Postgres, "0012_streaks_copied_when_reopened.sql", "fee98e106d97c8fe812f3718d41b834b8734debff10da43108fd2001bf02accba9a379ce0e235423084ea59391e8d312"),
    (Backend::Postgres, "0013_history_marks.sql", "523491276725c42de01505875c4c1c962d91414bf2617d03322a9006ccf7519140e072bd70bae32790a85b6fcc7504aa"),
];

/// What `state/schema/sqlite.sql` says after its first line.
const SQUASHED_HEADER: &str = "\
-- The SQLite state schema as the migrations in state/migrations/sqlite/
-- leave it: every object of sqlite_master, in creation order, as SQLite
-- records it. A new store is created from this file in one step (see
-- state/src/migrate.rs). Generated from the migrations; never edit it.
-- After adding a migration, write it again with
--   RECON_WRITE_SCHEMA=1 cargo test -p recon-state squashed
-- and rebuild (until then new stores run the migrations one by one, and
-- the test squashed_sqlite_schema_is_what_the_migrations_make fails).

";

/// What `state/schema/postgres.sql` says after its first line.
const POSTGRES_SQUASHED_HEADER: &str = "\
-- The PostgreSQL state schema as the migrations in state/migrations/postgres/
-- leave it, for a new store in one step (see state/src/migrate.rs): pg_dump
-- --schema-only --no-owner --no-privileges of a store migrated one migration
-- at a time, without its SET lines, sqlx's own table and the qualifier
-- `public.` (a store may live in any schema). Generated; never edit it.
-- After adding a migration, write it again with
--   RECON_WRITE_SCHEMA=1 cargo test -p recon-state squashed
-- (pg_dump on PATH) and rebuild (until then new stores run the migrations
-- one by one, and squashed_postgres_schema_is_what_the_migrations_make fails).

";

/// Every object of a PostgreSQL store's schema but sqlx's table, from the
/// catalogs, one line each, sorted: relations with their kind and storage
/// options (the history's fillfactor), columns in their order (a column
/// dropped by a migration leaves a gap in `attnum`; the rank does not),
/// types, defaults and NOT NULL, constraints, indexes, views, functions
/// and triggers as the server prints them back.
async fn postgres_objects(store: &StateStore) -> Vec<String> {
    let sql = "\
        SELECT 'relation ' || c.relname || ' ' || CAST(c.relkind AS TEXT) || ' ' \
            || COALESCE(array_to_string(c.reloptions, ','), '') \
            FROM pg_class c WHERE c.relnamespace = to_regnamespace(current_schema()) \
            AND c.relname NOT LIKE '\\_sqlx%' \
        UNION ALL SELECT 'column ' || c.relname || ' ' \
            || CAST(row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) AS TEXT) || ' ' \
            || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' \
            || CAST(a.attnotnull AS TEXT) || ' ' || COALESCE(pg_get_expr(d.adbin, d.adrelid), '') \
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
            WHERE c.relnamespace = to_regnamespace(current_schema()) AND a.attnum > 0 \
            AND NOT a.attisdropped AND c.relname NOT LIKE '\\_sqlx%' \
        UNION ALL SELECT 'constraint ' || CAST(conrelid::regclass AS TEXT) || ' ' || conname \
            || ' ' || pg_get_constraintdef(oid) FROM pg_constraint \
            WHERE connamespace = to_regnamespace(current_schema()) AND conname NOT LIKE '\\_sqlx%' \
        UNION ALL SELECT 'index ' || indexdef FROM pg_indexes \
            WHERE schemaname = current_schema() AND tablename NOT LIKE '\\_sqlx%' \
        UNION ALL SELECT 'view ' || viewname || ' ' || definition FROM pg_views \
            WHERE schemaname = current_schema() \
        UNION ALL SELECT 'function ' || pg_get_functiondef(oid) FROM pg_proc \
            WHERE pronamespace = to_regnamespace(current_schema()) \
        UNION ALL SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t \
            JOIN pg_class c ON c.oid = t.tgrelid \
            WHERE c.relnamespace = to_regnamespace(current_schema()) AND NOT t.tgisinternal";
    let mut lines: Vec<String> = sqlx::query(sql)
        .fetch_all(&store.pool)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    lines.sort();
    lines
}

/// The squashed schema file of a PostgreSQL database, from pg_dump's
/// schema-only output (see [`POSTGRES_SQUASHED_HEADER`]).
fn postgres_squashed_file(url: &str) -> String {
    let out = std::process::Command::new("pg_dump")
        .args(["--schema-only", "--no-owner", "--no-privileges", url])
        .output()
        .expect("pg_dump on PATH (RECON_WRITE_SCHEMA=1 writes the file with it)");
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump = String::from_utf8(out.stdout).unwrap();
    let mut statements = Vec::new();
    let mut current = Vec::new();
    for line in dump.lines().chain([""]) {
        if line.starts_with("--") || line.starts_with('\\') {
            continue;
        }
        if !line.trim().is_empty() {
            current.push(line);
            continue;
        }
        let statement = current.join("\n");
        current.clear();
        let setting = statement.starts_with("SET ") || statement.starts_with("SELECT pg_catalog.");
        if !statement.is_empty() && !setting && !statement.contains("_sqlx_migrations") {
            statements.push(statement.replace("public.", ""));
        }
    }
    format!(
        "-- schema at migration {}\n{POSTGRES_SQUASHED_HEADER}{}\n",
        migrate::latest(Backend::Postgres),
        statements.join("\n\n")
    )
}

/// A new PostgreSQL store made from `state/schema/postgres.sql` has every
/// object, option and record a store migrated one migration at a time
/// has; a database that already holds anything runs the migrations one by
/// one (the file never lands on someone else's schema).
#[tokio::test]
async fn squashed_postgres_schema_is_what_the_migrations_make() {
    let (a, b, c) = (
        TestDb::create(Dialect::Postgres).await,
        TestDb::create(Dialect::Postgres).await,
        TestDb::create(Dialect::Postgres).await,
    );
    let stepwise = StateStore::open_step_by_step(&a.url).await.unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/postgres.sql");
    if std::env::var_os("RECON_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, postgres_squashed_file(&a.url)).unwrap();
    }
    let squashed = Backend::Postgres.dialect().squashed().unwrap();
    assert_eq!(
        squashed.version(),
        Some(migrate::latest(Backend::Postgres)),
        "state/schema/postgres.sql is behind the migrations: write it again with \
         RECON_WRITE_SCHEMA=1 cargo test -p recon-state squashed (pg_dump on PATH), then rebuild"
    );

    let store = StateStore::open(&b.url).await.unwrap();
    let objects = postgres_objects(&store).await;
    assert!(objects.len() > 100, "{objects:?}");
    for kind in ["view ", "function ", "trigger ", "index ", "constraint "] {
        assert!(
            objects.iter().any(|o| o.starts_with(kind)),
            "no {kind}in {objects:?}"
        );
    }
    assert!(
        objects.contains(&"relation recon_discrepancies r fillfactor=45".to_string()),
        "{objects:?}"
    );
    assert_eq!(objects, postgres_objects(&stepwise).await);
    assert_eq!(schema_of(&store).await, schema_of(&stepwise).await);
    let (made, migrated) = (recorded(&store).await, recorded(&stepwise).await);
    let versions = |rows: &[(i64, i64, bool)]| rows.iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(
        versions(&made),
        (1..=migrate::latest(Backend::Postgres)).collect::<Vec<_>>()
    );
    assert_eq!(versions(&made), versions(&migrated));
    for (version, time, same) in &made {
        assert!(same, "migration {version}: checksum");
        assert_eq!(*time, 0, "migration {version}: made in one step");
    }
    assert!(
        migrated.iter().all(|(_, time, same)| *same && *time > 0),
        "{migrated:?}"
    );

    // Opened again, nothing changes, and the store works: the history's
    // trigger copies a streak when a resolved discrepancy comes back.
    store.close().await;
    let store = StateStore::open(&b.url).await.unwrap();
    assert_eq!(recorded(&store).await, made);
    let id = store.start_run("nightly", day(), false).await.unwrap();
    assert_eq!(store.recent_runs(None, 10).await.unwrap()[0].id, id);

    // A database with a table of its own already: not a new store, so the
    // migrations run one by one beside it.
    let shared =
        open_beside_own_table(&c.url, "CREATE TABLE their_own (id BIGINT PRIMARY KEY)").await;
    assert_eq!(versions(&recorded(&shared).await), versions(&migrated));
    let mut theirs = postgres_objects(&shared).await;
    theirs.retain(|o| !o.contains("their_own"));
    assert_eq!(theirs, postgres_objects(&stepwise).await);

    for s in [&store, &stepwise, &shared] {
        s.close().await;
    }
    for db in [a, b, c] {
        db.drop_db().await;
    }
}

/// Every object of a SQLite store's schema but sqlx's table, in creation
/// order: `(type, name, table, sql)` (an index SQLite makes for a key has
/// no SQL).
async fn sqlite_objects(store: &StateStore) -> Vec<(String, String, String, Option<String>)> {
    sqlx::query(
        "SELECT type, name, tbl_name, sql FROM sqlite_master \
         WHERE name <> '_sqlx_migrations' AND name NOT LIKE 'sqlite_autoindex__sqlx_migrations%' \
         ORDER BY rowid",
    )
    .fetch_all(&store.pool)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// The squashed schema file of a store's schema.
async fn squashed_file(store: &StateStore) -> String {
    let mut file = format!(
        "-- schema at migration {}\n{SQUASHED_HEADER}",
        migrate::latest(Backend::Sqlite)
    );
    for (_, name, _, sql) in sqlite_objects(store).await {
        // SQLite makes its own objects (key indexes, sqlite_sequence).
        if let Some(sql) = sql.filter(|_| !name.starts_with("sqlite_")) {
            file.push_str(&sql);
            file.push_str(";\n\n");
        }
    }
    file
}

#[tokio::test]
async fn squashed_sqlite_schema_is_what_the_migrations_make() {
    let (a, b) = (
        TestDb::create(Dialect::Sqlite).await,
        TestDb::create(Dialect::Sqlite).await,
    );
    let stepwise = StateStore::open_step_by_step(&a.url).await.unwrap();
    let file = squashed_file(&stepwise).await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/sqlite.sql");
    if std::env::var_os("RECON_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &file).unwrap();
    }
    let squashed = Backend::Sqlite.dialect().squashed().unwrap();
    assert!(
        squashed.sql == file,
        "state/schema/sqlite.sql is not the schema migrations 1-{} make: write it again with \
         RECON_WRITE_SCHEMA=1 cargo test -p recon-state squashed, then rebuild",
        migrate::latest(Backend::Sqlite)
    );
    assert_eq!(squashed.version(), Some(migrate::latest(Backend::Sqlite)));

    // A new store made from it: the same objects, the same SQL, in the
    // same order, and every migration recorded with its checksum.
    let store = StateStore::open(&b.url).await.unwrap();
    let objects = sqlite_objects(&store).await;
    assert!(objects.len() > 10, "{objects:?}");
    assert_eq!(objects, sqlite_objects(&stepwise).await);
    assert_eq!(schema_of(&store).await, schema_of(&stepwise).await);
    let (made, migrated) = (recorded(&store).await, recorded(&stepwise).await);
    let versions = |rows: &[(i64, i64, bool)]| rows.iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(versions(&made), versions(&migrated));
    assert_eq!(
        versions(&made),
        (1..=migrate::latest(Backend::Sqlite)).collect::<Vec<_>>()
    );
    for (version, time, same) in &made {
        assert!(same, "migration {version}: checksum");
        // Made in one step: no migration was run on its own...
        assert_eq!(*time, 0, "migration {version}");
    }
    // ...where the other store ran each.
    assert!(
        migrated.iter().all(|(_, time, same)| *same && *time > 0),
        "{migrated:?}"
    );
    async fn described(store: &StateStore) -> String {
        sqlx::query(
            "SELECT GROUP_CONCAT(version || ' ' || description || ' ' || success, '; ') \
             FROM (SELECT * FROM _sqlx_migrations ORDER BY version)",
        )
        .fetch_one(&store.pool)
        .await
        .unwrap()
        .get(0)
    }
    assert_eq!(described(&store).await, described(&stepwise).await);

    // Opened again, nothing changes, and the store works.
    store.close().await;
    let store = StateStore::open(&b.url).await.unwrap();
    assert_eq!(recorded(&store).await, made);
    let id = store.start_run("nightly", day(), false).await.unwrap();
    assert_eq!(store.recent_runs(None, 10).await.unwrap()[0].id, id);
    store.close().await;
    stepwise.close().await;
    a.drop_db().await;
    b.drop_db().await;
}

/// Opens the state store in a database that already holds a table of its
/// own (made by `create`): not a new store, so every migration is run and
/// recorded one by one (checksums equal, each with its execution time).
async fn open_beside_own_table(url: &str, create: &str) -> StateStore {
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    sqlx::query(create).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    let store = StateStore::open(url).await.unwrap();
    let rows = recorded(&store).await;
    assert_eq!(rows.len() as i64, migrate::latest(store.backend()));
    assert!(
        rows.iter().all(|(_, time, same)| *same && *time > 0),
        "{rows:?}"
    );
    store
}

#[tokio::test]
async fn a_sqlite_file_with_a_table_of_its_own_runs_each_migration() {
    // A file that holds anything is not new: the squashed schema is never
    // laid over it (a table of the same name would refuse it halfway).
    let db = TestDb::create(Dialect::Sqlite).await;
    let store = open_beside_own_table(&db.url, "CREATE TABLE notes (body TEXT)").await;
    assert_eq!(count(&store, "SELECT COUNT(*) FROM notes").await, 0);
    let fresh = TestDb::create(Dialect::Sqlite).await;
    let made = StateStore::open(&fresh.url).await.unwrap();
    assert_eq!(schema_of(&store).await, schema_of(&made).await);
    store.close().await;
    made.close().await;
    db.drop_db().await;
    fresh.drop_db().await;
}

#[test]
fn released_migrations_are_unchanged() {
    for (backend, file, sha384) in RELEASED {
        let m = migrate::migrator(*backend)
            .iter()
            .find(|m| migrate::file_of(*backend, m.version).ends_with(&format!("/{file}")))
            .unwrap_or_else(|| panic!("{} has no {file}", migrate::folder(*backend)));
        assert_eq!(
            lower_hex(&m.checksum),
            *sha384,
            "{}/{file} was edited after its release: restore it (git checkout) and put the \
             change in a new migration with the next number",
            migrate::folder(*backend)
        );
    }
}

#[test]
fn migrations_are_paired_named_and_transactional() {
    let sqlite: Vec<_> = migrate::migrator(Backend::Sqlite).iter().collect();
    let postgres: Vec<_> = migrate::migrator(Backend::Postgres).iter().collect();
    let numbered = |ms: &[&sqlx::migrate::Migration]| -> Vec<(i64, String)> {
        ms.iter()
            .map(|m| (m.version, m.description.to_string()))
            .collect()
    };
    // One number names one schema on both backends; numbers have no gaps.
    assert_eq!(numbered(&sqlite), numbered(&postgres));
    let versions: Vec<i64> = sqlite.iter().map(|m| m.version).collect();
    assert_eq!(
        versions,
        (1..=migrate::latest(Backend::Sqlite)).collect::<Vec<_>>()
    );
    // Every migration released before sqlx took over, plus what came since.
    assert!(migrate::latest(Backend::Sqlite) >= migrate::STEPS.len() as i64);
    for backend in [Backend::Sqlite, Backend::Postgres] {
        // Folders and files are named relative to the repository root.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap();
        let mut on_disk: Vec<String> = std::fs::read_dir(root.join(migrate::folder(backend)))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        on_disk.sort();
        let named: Vec<String> = migrate::migrator(backend)
            .iter()
            .map(|m| {
                let file = migrate::file_of(backend, m.version);
                assert!(
                    root.join(&file).is_file(),
                    "messages name {file}, which is missing"
                );
                file.rsplit('/').next().unwrap().to_string()
            })
            .collect();
        // Every file is embedded (a new one needs a rebuild of migrate.rs).
        assert_eq!(named, on_disk, "{}", migrate::folder(backend));
        for m in migrate::migrator(backend).iter() {
            // All-or-nothing: each runs in a savepoint of the locked transaction.
            assert!(!m.no_tx, "{} opts out of the transaction", m.version);
            assert!(!m.migration_type.is_down_migration());
        }
    }
}

/// The dialect of a test database URL.
fn dialect_of(url: &str) -> Dialect {
    if url.starts_with("sqlite:") {
        Dialect::Sqlite
    } else {
        Dialect::Postgres
    }
}

/// The schema as the database describes it, whitespace normalised, sorted,
/// without the migration bookkeeping: two stores with equal descriptions
/// were built by equivalent DDL.
async fn schema_of(store: &StateStore) -> Vec<String> {
    let sql = match store.backend() {
        Backend::Sqlite => {
            "SELECT type || ' ' || name || ' ' || tbl_name || ' ' || COALESCE(sql, '') \
             FROM sqlite_master WHERE name LIKE 'recon%' OR tbl_name LIKE 'recon%'"
        }
        Backend::Postgres => {
            "SELECT 'column ' || table_name || ' ' || CAST(ordinal_position AS TEXT) || ' ' \
             || column_name || ' ' || data_type || ' ' || is_nullable || ' ' \
             || COALESCE(column_default, '') FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name LIKE 'recon%' \
             UNION ALL SELECT 'index ' || indexdef FROM pg_indexes \
             WHERE schemaname = current_schema() AND tablename LIKE 'recon%' \
             UNION ALL SELECT 'constraint ' || CAST(conrelid::regclass AS TEXT) || ' ' || conname \
             || ' ' || pg_get_constraintdef(oid) FROM pg_constraint \
             WHERE connamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) \
             AND CAST(conrelid::regclass AS TEXT) LIKE 'recon%'"
        }
    };
    let mut lines: Vec<String> = sqlx::query(sql)
        .fetch_all(&store.pool)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let line: String = r.get(0);
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .collect();
    lines.sort();
    lines
}

/// `(version, execution_time)` of every recorded migration, and whether
/// each recorded checksum is the embedded one.
async fn recorded(store: &StateStore) -> Vec<(i64, i64, bool)> {
    let migrator = migrate::migrator(store.backend());
    sqlx::query("SELECT version, execution_time, checksum FROM _sqlx_migrations ORDER BY version")
        .fetch_all(&store.pool)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let version: i64 = r.get(0);
            let checksum: Vec<u8> = r.get(2);
            let same = migrator
                .iter()
                .any(|m| m.version == version && *m.checksum == *checksum);
            (version, r.get(1), same)
        })
        .collect()
}

async fn legacy_table_exists(store: &StateStore) -> bool {
    let sql = match store.backend() {
        Backend::Sqlite => "SELECT COUNT(*) FROM sqlite_master WHERE name = 'recon_schema_version'",
        Backend::Postgres => "SELECT COUNT(to_regclass('recon_schema_version'))",
    };
    count(store, sql).await > 0
}

/// Fills a store of the old runner, built through step `through`, with
/// runs, a reviewed plan (step 2), ledger items and discrepancy history, as
/// that release wrote them.
async fn fill_legacy(conn: &mut sqlx::AnyConnection, through: i64) {
    let owner = |o: &str| {
        if through >= 3 {
            (", owner", format!(", '{o}'"))
        } else {
            ("", String::new())
        }
    };
    for (id, status, dry, counts, error, o) in [
        (
            "nightly-1",
            "clean",
            0,
            "'{\"gaps\":0}'",
            "NULL",
            "host:1:a",
        ),
        (
            "nightly-2",
            "discrepancies",
            0,
            "'{\"gaps\":2}'",
            "NULL",
            "host:2:b",
        ),
        (
            "nightly-3",
            "failed",
            1,
            "NULL",
            "'HTTP 503 from the target'",
            "host:3:c",
        ),
    ] {
        let n = &id[id.len() - 1..];
        let (col, val) = owner(o);
        sqlx::query(&format!(
            "INSERT INTO recon_runs (id, job, window_start, window_end, started_at, finished_at, \
             status, dry_run, counts, report_dir, error{col}) VALUES ('{id}', 'nightly', \
             '2026-11-0{n}T00:00:00.000000000Z', '2026-11-0{m}T00:00:00.000000000Z', \
             '2026-11-0{m}T01:00:00.000000000Z', '2026-11-0{m}T01:00:05.000000000Z', '{status}', \
             {dry}, {counts}, 'reports/{id}', {error}{val})",
            m = n.parse::<u8>().unwrap() + 1,
        ))
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    let mut items = vec![
        ("cus_1", "insert", "applied", 1, "NULL"),
        ("cus_2", "update", "failed", 2, "'HTTP 500'"),
        ("cus_3", "insert", "planned", 0, "NULL"),
        ("cus_5", "insert", "superseded", 0, "NULL"),
    ];
    if through >= 3 {
        items.push(("cus_4", "insert", "unknown", 1, "'connection lost'"));
    }
    for (id, action, status, attempts, error) in items {
        sqlx::query(&format!(
            "INSERT INTO recon_backfill_items (plan_id, job, external_id, action, status, \
             attempts, last_error, updated_at) VALUES ('nightly-2', 'nightly', '{id}', \
             '{action}', '{status}', {attempts}, {error}, '2026-11-03T01:00:04.000000000Z')"
        ))
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    for (class, id, first, last, resolved) in [
        ("gap", "cus_3", "nightly-1", "nightly-2", "NULL"),
        ("orphan", "cus_7", "nightly-2", "nightly-2", "NULL"),
        (
            "mismatch",
            "cus_9",
            "nightly-1",
            "nightly-1",
            "'2026-11-03T01:00:05.000000000Z'",
        ),
    ] {
        sqlx::query(&format!(
            "INSERT INTO recon_discrepancies (job, class, external_id, first_seen_run, \
             first_seen_at, last_seen_run, last_seen_at, resolved_at) VALUES ('nightly', \
             '{class}', '{id}', '{first}', '2026-11-0{f}T01:00:00.000000000Z', '{last}', \
             '2026-11-0{l}T01:00:00.000000000Z', {resolved})",
            f = if first == "nightly-1" { 2 } else { 3 },
            l = if last == "nightly-1" { 2 } else { 3 },
        ))
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    if through >= 2 {
        sqlx::query(
            "INSERT INTO recon_plans (id, job, window_start, window_end, sha256, items, \
             source_records, read_at, created_at) VALUES ('nightly-2', 'nightly', \
             '2026-11-02T00:00:00.000000000Z', '2026-11-03T00:00:00.000000000Z', 'abab', 4, 41, \
             '2026-11-03T01:00:00.000000000Z', '2026-11-03T01:00:01.000000000Z')",
        )
        .execute(&mut *conn)
        .await
        .unwrap();
    }
}

/// Everything [`fill_legacy`] wrote reads back through the new code, and
/// the store keeps working.
async fn assert_legacy_data(store: &StateStore, through: i64) {
    let runs = store.recent_runs(Some("nightly"), 10).await.unwrap();
    let summary = runs
        .iter()
        .map(|r| {
            (
                r.id.as_str(),
                r.status.as_str(),
                r.dry_run,
                r.counts.as_ref().map(|c| c.to_string()),
                r.error.as_deref(),
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(
        summary,
        vec![
            (
                "nightly-3",
                "failed",
                true,
                None,
                Some("HTTP 503 from the target")
            ),
            (
                "nightly-2",
                "discrepancies",
                false,
                Some(r#"{"gaps":2}"#.into()),
                None
            ),
            (
                "nightly-1",
                "clean",
                false,
                Some(r#"{"gaps":0}"#.into()),
                None
            ),
        ]
    );
    assert_eq!(runs[1].window_start, ts("2026-11-02T00:00:00Z"));
    assert_eq!(runs[1].finished_at, Some(ts("2026-11-03T01:00:05Z")));
    assert_eq!(runs[1].report_dir.as_deref(), Some("reports/nightly-2"));
    assert_eq!(
        store.last_success_end("nightly").await.unwrap(),
        Some(ts("2026-11-03T00:00:00Z"))
    );

    let item = |id: &str, action: &str, status, attempts, error: Option<&str>| LedgerItem {
        external_id: id.into(),
        action: action.into(),
        status,
        attempts,
        last_error: error.map(str::to_string),
    };
    let mut want = vec![
        item("cus_1", "insert", ItemStatus::Applied, 1, None),
        item("cus_2", "update", ItemStatus::Failed, 2, Some("HTTP 500")),
        item("cus_3", "insert", ItemStatus::Planned, 0, None),
        item("cus_5", "insert", ItemStatus::Superseded, 0, None),
    ];
    let mut unknown = vec![];
    if through >= 3 {
        want.insert(
            3,
            item(
                "cus_4",
                "insert",
                ItemStatus::Unknown,
                1,
                Some("connection lost"),
            ),
        );
        unknown.push(("nightly-2".to_string(), "cus_4".to_string()));
    }
    assert_eq!(store.plan_items("nightly-2").await.unwrap(), want);
    assert_eq!(store.unknown_items("nightly").await.unwrap(), unknown);

    if through >= 2 {
        let plan = store.saved_plan("nightly-2").await.unwrap().unwrap();
        assert_eq!((plan.items, plan.source_records), (4, 41));
        assert_eq!(
            plan.window,
            window("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z")
        );
    }

    // The history goes on: the gap persists since its first sighting, the
    // orphan is resolved now, the mismatch resolved before stays resolved.
    let now = ts("2026-11-04T01:00:00Z");
    let delta = store
        .update_discrepancies("nightly", "nightly-4", now, &[(Class::Gap, "cus_3".into())])
        .await
        .unwrap();
    assert!(delta.new.is_empty(), "{delta:?}");
    assert_eq!(
        delta.persisting,
        crate::Persisting::from_iter([(
            (Class::Gap, "cus_3".to_string()),
            ts("2026-11-02T01:00:00Z")
        )])
    );
    assert_eq!(
        delta.resolved,
        vec![(
            Class::Orphan,
            "cus_7".to_string(),
            ts("2026-11-03T01:00:00Z")
        )]
    );

    // New writes use every column and index of the latest schema.
    let run = store
        .start_run_as("nightly", day(), false, Some("host:9:z"))
        .await
        .unwrap();
    store
        .record_plan(&run, "nightly", &[("cus_8".to_string(), "insert")])
        .await
        .unwrap();
    store
        .mark_items(
            &run,
            &[("cus_8".into(), ItemStatus::Unknown, Some("lost".into()))],
        )
        .await
        .unwrap();
    assert!(store
        .unknown_items("nightly")
        .await
        .unwrap()
        .contains(&(run, "cus_8".to_string())));
}

/// A store made by the previous release through step `through` is opened
/// by this one: the steps it had are recorded as sqlx migrations without
/// running their DDL, the rest run, the old version table is gone, the data
/// is all there, and the schema is the one a new store gets.
async fn legacy_upgrade(url: String, through: i64) {
    let mut conn = migrate::legacy::create(&url, through).await;
    fill_legacy(&mut conn, through).await;
    conn.close().await.unwrap();

    let store = StateStore::open(&url).await.unwrap();
    let backend = store.backend();
    let latest = migrate::latest(backend);
    assert!(!legacy_table_exists(&store).await);
    let rows = recorded(&store).await;
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=latest).collect::<Vec<_>>()
    );
    for (version, time, same) in &rows {
        assert!(same, "migration {version}: checksum");
        // Imported steps were not run again (execution time 0); the
        // others were run by sqlx.
        assert_eq!(
            *time == 0,
            *version <= through,
            "migration {version}: {time} ns"
        );
    }
    if backend == Backend::Postgres {
        // The original applied_at is kept.
        assert_eq!(
            count(
                &store,
                "SELECT COUNT(*) FROM _sqlx_migrations \
                 WHERE installed_on = TIMESTAMPTZ '2026-11-01 00:00:00+00' AND version = 1"
            )
            .await,
            1
        );
    }
    assert_legacy_data(&store, through).await;

    // Opening again changes nothing.
    store.close().await;
    let store = StateStore::open(&url).await.unwrap();
    assert_eq!(recorded(&store).await, rows);
    assert_eq!(
        store.plan_items("nightly-2").await.unwrap().len() as i64,
        4 + i64::from(through >= 3)
    );

    // The same schema as a store this release creates.
    let fresh_db = TestDb::create(dialect_of(&url)).await;
    let fresh = StateStore::open(&fresh_db.url).await.unwrap();
    let (upgraded, created) = (schema_of(&store).await, schema_of(&fresh).await);
    assert!(upgraded.len() > 10, "{upgraded:?}");
    assert_eq!(upgraded, created);
    fresh.close().await;
    fresh_db.drop_db().await;
    store.close().await;
}

async fn legacy_store_upgrades_in_place(url: String) {
    legacy_upgrade(url, migrate::STEPS.len() as i64).await;
}

async fn legacy_store_at_step_2_upgrades_in_place(url: String) {
    legacy_upgrade(url, 2).await;
}

async fn legacy_store_opened_twice_at_once(url: String) {
    let mut conn = migrate::legacy::create(&url, 5).await;
    fill_legacy(&mut conn, 5).await;
    conn.close().await.unwrap();
    let (a, b) = tokio::join!(StateStore::open(&url), StateStore::open(&url));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        recorded(&a).await.len() as i64,
        migrate::latest(a.backend())
    );
    assert!(!legacy_table_exists(&b).await);
    assert_legacy_data(&b, 5).await;
    a.close().await;
    b.close().await;
}

async fn legacy_store_with_gaps_is_refused(url: String) {
    let mut conn = migrate::legacy::create(&url, 5).await;
    sqlx::query("DELETE FROM recon_schema_version WHERE version = 3")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let e = StateStore::open(&url).await.unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, StateError::Migrate { .. }), "{m}");
    assert!(
        m.contains("it lists steps [1, 2, 4, 5], not 1 to 4 in order"),
        "{m}"
    );
    assert!(
        m.contains("Restore the state database from a backup"),
        "{m}"
    );
    // Nothing was changed: the old table is still there, nothing recorded.
    let mut conn = migrate::legacy::connect(&url).await;
    let left: i64 = sqlx::query("SELECT COUNT(*) FROM recon_schema_version")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 4);
    conn.close().await.unwrap();
}

/// A URL with a password the test server ignores (trust authentication),
/// to prove messages never show it.
fn with_password(url: &str) -> String {
    url.replacen("postgres://postgres@", "postgres://postgres:hunter2@", 1)
}

async fn edited_migration_is_named(url: String) {
    let url = with_password(&url);
    let store = StateStore::open(&url).await.unwrap();
    let backend = store.backend();
    let display = store.describe().to_string();
    let tamper = match backend {
        Backend::Sqlite => "UPDATE _sqlx_migrations SET checksum = X'00' WHERE version = 3",
        Backend::Postgres => {
            "UPDATE _sqlx_migrations SET checksum = decode('00', 'hex') WHERE version = 3"
        }
    };
    sqlx::query(tamper).execute(&store.pool).await.unwrap();
    store.close().await;
    let e = StateStore::open(&url).await.unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(&e, StateError::Migrate { url, .. } if *url == display),
        "{m}"
    );
    let file = format!(
        "{}/0003_unknown_outcomes_and_run_owners.sql",
        migrate::folder(backend)
    );
    assert_eq!(migrate::file_of(backend, 3), file);
    assert!(m.contains(&file), "{m}");
    assert!(m.contains(&display), "{m}");
    assert!(m.contains("a released migration was edited"), "{m}");
    assert!(m.contains("new migration with the next number"), "{m}");
    assert!(!m.contains("hunter2"), "{m}");
}

async fn newer_store_is_refused(url: String) {
    let url = with_password(&url);
    let store = StateStore::open(&url).await.unwrap();
    let latest = migrate::latest(store.backend());
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99, 'from the future', TRUE, $1, 1)",
    )
    .bind(vec![0u8; 48])
    .execute(&store.pool)
    .await
    .unwrap();
    store.close().await;
    let m = StateStore::open(&url).await.unwrap_err().to_string();
    assert!(
        m.contains(&format!(
            "the database is at schema version 99, newer than this recon understands ({latest}); \
             upgrade recon"
        )),
        "{m}"
    );
    assert!(
        m.starts_with("cannot prepare the schema of the state database "),
        "{m}"
    );
    assert!(!m.contains("hunter2"), "{m}");
}

both!(unknown_items_are_listed_until_settled);

/// An item marked `unknown` is listed by `unknown_items` (from its own
/// table, migration 6) until it gets any other status; other plans' and
/// jobs' items are not listed, and marking applied items leaves the list
/// alone.
async fn unknown_items_are_listed_until_settled(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let run = store.start_run("nightly", day(), false).await.unwrap();
    let keys = ["a", "b", "c", "d"].map(|k| (k.to_string(), "insert"));
    store.record_plan(&run, "nightly", &keys).await.unwrap();
    let other = store.start_run("weekly", day(), false).await.unwrap();
    store
        .record_plan(&other, "weekly", &[("a".to_string(), "insert")])
        .await
        .unwrap();
    let lost = Some("connection lost".to_string());
    store
        .mark_items(
            &run,
            &[
                ("a".into(), ItemStatus::Applied, None),
                ("b".into(), ItemStatus::Unknown, lost.clone()),
                ("c".into(), ItemStatus::Unknown, lost.clone()),
            ],
        )
        .await
        .unwrap();
    store
        .mark_items(&other, &[("a".into(), ItemStatus::Unknown, lost.clone())])
        .await
        .unwrap();
    let listed = |v: &[&str]| -> Vec<(String, String)> {
        v.iter().map(|k| (run.clone(), k.to_string())).collect()
    };
    assert_eq!(
        store.unknown_items("nightly").await.unwrap(),
        listed(&["b", "c"])
    );
    // Applied items of the same plan leave the list as it is.
    store
        .mark_items(&run, &[("d".into(), ItemStatus::Applied, None)])
        .await
        .unwrap();
    assert_eq!(
        store.unknown_items("nightly").await.unwrap(),
        listed(&["b", "c"])
    );
    // Settled: found in the target (applied) or not (failed).
    store
        .mark_items(
            &run,
            &[
                ("b".into(), ItemStatus::Applied, None),
                ("c".into(), ItemStatus::Failed, Some("not committed".into())),
            ],
        )
        .await
        .unwrap();
    assert!(store.unknown_items("nightly").await.unwrap().is_empty());
    assert_eq!(
        store.unknown_items("weekly").await.unwrap(),
        vec![(other.clone(), "a".to_string())]
    );
    let statuses: Vec<ItemStatus> = store
        .plan_items(&run)
        .await
        .unwrap()
        .iter()
        .map(|i| i.status)
        .collect();
    assert_eq!(
        statuses,
        [
            ItemStatus::Applied,
            ItemStatus::Applied,
            ItemStatus::Failed,
            ItemStatus::Applied
        ]
    );
}

both!(batch_ledger_round_trip);

/// The backfill's ledger (migration 10): a batch is one row, planned before
/// its write and marked after; the items whose outcome differs from their
/// batch's keep rows of their own, which win. Every reader still sees one
/// row per item: `plan_items`, `unknown_items`, the crashed-run supersede,
/// `id_records` (keys found exactly, JSON escapes included, never by a
/// longer key that contains them) and the `recon_backfill_items` view.
async fn batch_ledger_round_trip(url: String) {
    let store = StateStore::open(&url).await.unwrap();
    let run = store.start_run("nightly", day(), false).await.unwrap();
    let odd = "quo\"te\\ü/é";
    let planned = [
        LedgerBatch {
            seq: 0,
            action: "insert",
            keys: vec!["a", "b", "c"],
        },
        LedgerBatch {
            seq: 1,
            action: "update",
            keys: vec![odd, "d", "ab"],
        },
    ];
    store
        .ledger_step(&run, "nightly", &[], &planned)
        .await
        .unwrap();
    let items = store.plan_items(&run).await.unwrap();
    assert_eq!(items.len(), 6, "{items:?}");
    assert!(items
        .iter()
        .all(|i| i.status == ItemStatus::Planned && i.attempts == 0));
    let action = |items: &[LedgerItem], id: &str| {
        items
            .iter()
            .find(|i| i.external_id == id)
            .map(|i| i.action.clone())
    };
    assert_eq!(action(&items, "c").as_deref(), Some("insert"));
    assert_eq!(action(&items, odd).as_deref(), Some("update"));

    // Batch 0 written (b refused), batch 1 lost, batch 2 planned meanwhile.
    let lost = "connection lost".to_string();
    let done = [
        BatchOutcome {
            seq: 0,
            action: "insert",
            status: ItemStatus::Applied,
            exceptions: vec![("b".into(), ItemStatus::Failed, Some("HTTP 500".into()))],
        },
        BatchOutcome {
            seq: 1,
            action: "update",
            status: ItemStatus::Unknown,
            exceptions: [odd, "d", "ab"]
                .iter()
                .map(|k| (k.to_string(), ItemStatus::Unknown, Some(lost.clone())))
                .collect(),
        },
    ];
    let next = [LedgerBatch {
        seq: 2,
        action: "insert",
        keys: vec!["e", "f"],
    }];
    store
        .ledger_step(&run, "nightly", &done, &next)
        .await
        .unwrap();
    let items = store.plan_items(&run).await.unwrap();
    let of = |id: &str| items.iter().find(|i| i.external_id == id).unwrap().clone();
    assert_eq!(items.len(), 8, "{items:?}");
    assert_eq!((of("a").status, of("a").attempts), (ItemStatus::Applied, 1));
    assert_eq!(of("b").status, ItemStatus::Failed);
    assert_eq!(of("b").last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(of("c").status, ItemStatus::Applied);
    assert_eq!(of(odd).status, ItemStatus::Unknown);
    assert_eq!(of("e").status, ItemStatus::Planned);
    let mut unknown = store.unknown_items("nightly").await.unwrap();
    unknown.sort();
    let mut want: Vec<(String, String)> = ["ab", "d", odd]
        .iter()
        .map(|k| (run.clone(), k.to_string()))
        .collect();
    want.sort();
    assert_eq!(unknown, want);
    // The next run settles the unknown items one by one.
    store
        .mark_items(
            &run,
            &[
                ("d".into(), ItemStatus::Applied, None),
                (odd.into(), ItemStatus::Applied, None),
                (
                    "ab".into(),
                    ItemStatus::Failed,
                    Some("not committed".into()),
                ),
            ],
        )
        .await
        .unwrap();
    assert!(store.unknown_items("nightly").await.unwrap().is_empty());
    let items = store.plan_items(&run).await.unwrap();
    let of = |id: &str| items.iter().find(|i| i.external_id == id).unwrap().clone();
    assert_eq!((of(odd).status, of(odd).attempts), (ItemStatus::Applied, 2));
    assert_eq!(of("ab").status, ItemStatus::Failed);

    // The run dies with batch 2 planned: the next run supersedes it.
    let next_run = store.start_run("nightly", day(), false).await.unwrap();
    let items = store.plan_items(&run).await.unwrap();
    let of = |id: &str| items.iter().find(|i| i.external_id == id).unwrap().clone();
    assert_eq!(of("e").status, ItemStatus::Superseded);
    assert_eq!(of("f").status, ItemStatus::Superseded);
    assert_eq!(of("a").status, ItemStatus::Applied, "marked batches stay");
    assert!(store.plan_items(&next_run).await.unwrap().is_empty());

    // One ID's story finds it in its batch, exactly.
    let story = |id: &'static str| {
        let store = store.clone();
        async move { store.id_records("nightly", id).await.unwrap().items }
    };
    let a = story("a").await;
    assert_eq!(a.len(), 1, "`a`, not `ab`: {a:?}");
    assert_eq!((a[0].status, a[0].attempts), (ItemStatus::Applied, 1));
    assert_eq!(a[0].plan_id, run);
    let b = story("b").await;
    assert_eq!(b.len(), 1, "its own row wins over its batch: {b:?}");
    assert_eq!(b[0].last_error.as_deref(), Some("HTTP 500"));
    let q = story(odd).await;
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0].action, "update");
    assert_eq!(story("e").await[0].status, ItemStatus::Superseded);
    assert!(story("quo").await.is_empty());

    // Raw SQL sees one row per item through the view.
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    let rows: i64 = sqlx::query("SELECT COUNT(*) FROM recon_backfill_items WHERE plan_id = $1")
        .bind(run.clone())
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 8);
    let batches: i64 = sqlx::query("SELECT COUNT(*) FROM recon_ledger_batches")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(batches, 3, "one row per batch");
}

/// Migration 11: PostgreSQL leaves room on the history's pages for a new
/// version of every row (fillfactor 45), so that a rerun resolving every
/// discrepancy updates each row on its own page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_history_pages_leave_room_for_every_row() {
    let db = TestDb::create(Dialect::Postgres).await;
    StateStore::open(&db.url).await.unwrap();
    let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let options: String = sqlx::query(
        "SELECT CAST(array_to_string(reloptions, ',') AS TEXT) FROM pg_class \
         WHERE relname = 'recon_discrepancies'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
    .get(0);
    assert_eq!(options, "fillfactor=45");
    drop(conn);
    db.drop_db().await;
}

/// A new SQLite store is made of 16 KiB pages; one made before (4 KiB
/// pages) keeps its size and still opens, migrates and records history.
#[tokio::test]
async fn sqlite_page_size_is_set_on_new_stores_only() {
    async fn page_size(store: &StateStore) -> i64 {
        sqlx::query("PRAGMA page_size")
            .fetch_one(&store.pool)
            .await
            .unwrap()
            .get(0)
    }
    on(Dialect::Sqlite, |url| async move {
        let store = StateStore::open(&url).await.unwrap();
        assert_eq!(page_size(&store).await, 16384);
        // Every session copies the WAL into the database past 128 MiB.
        let mark: i64 = sqlx::query("PRAGMA wal_autocheckpoint")
            .fetch_one(&store.pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(mark, 8192);
        store.close().await;
    })
    .await;
    on(Dialect::Sqlite, |url| async move {
        // What an earlier release made: the default 4 KiB pages, in WAL.
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        for sql in [
            "PRAGMA page_size = 4096",
            "PRAGMA journal_mode = WAL",
            "CREATE TABLE made_before (x INTEGER)",
        ] {
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
        conn.close().await.unwrap();
        let store = StateStore::open(&url).await.unwrap();
        assert_eq!(page_size(&store).await, 4096);
        let run = "r1";
        let delta =
            OpenHistory::default().delta(&keys(&[(Class::Gap, "g1"), (Class::Orphan, "o1")]));
        store
            .write_discrepancies("job", run, ts("2026-12-01T00:00:00Z"), &delta)
            .await
            .unwrap();
        let open = store.open_history("job").await.unwrap();
        let again = open.delta(&keys(&[(Class::Gap, "g1")]));
        assert_eq!(again.persisting.len(), 1);
        assert_eq!(again.resolved.len(), 1);
        store.close().await;
    })
    .await;
}

/// Step 16 on a store that step 15 made, with history: every row and its
/// columns are kept, the trigger still copies a reopened row's closed
/// streak, the check still refuses a class not among the four (and takes
/// each of them), and the table's check is now comparisons.
#[tokio::test]
async fn step_16_keeps_the_history_its_trigger_and_its_rule() {
    on(Dialect::Sqlite, |url| async move {
        let mut conn = migrate::legacy::connect(&url).await;
        let through_15 = sqlx::migrate::Migrator {
            migrations: std::borrow::Cow::Owned(
                migrate::migrator(Backend::Sqlite)
                    .iter()
                    .filter(|m| m.version <= 15)
                    .cloned()
                    .collect(),
            ),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        through_15.run(&mut conn).await.unwrap();
        for (class, id, resolved) in [
            ("gap", "g1", "NULL"),
            ("orphan", "o1", "'2026-11-03T01:00:00.000000000Z'"),
            ("mismatch", "m1", "NULL"),
            ("duplicate", "d1", "NULL"),
        ] {
            let resolved_run = if resolved == "NULL" { "NULL" } else { "'r2'" };
            sqlx::query(&format!(
                "INSERT INTO recon_discrepancies (job, class, external_id, first_seen_run, \
                 first_seen_at, last_seen_run, last_seen_at, resolved_at, resolved_run) VALUES \
                 ('nightly', '{class}', '{id}', 'r1', '2026-11-02T01:00:00.000000000Z', 'r1', \
                 '2026-11-02T01:00:00.000000000Z', {resolved}, {resolved_run})"
            ))
            .execute(&mut conn)
            .await
            .unwrap();
        }
        let rows = |sql: &'static str| {
            let url = url.clone();
            async move {
                let mut conn = migrate::legacy::connect(&url).await;
                let rows: Vec<Vec<Option<String>>> = sqlx::query(sql)
                    .fetch_all(&mut conn)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| (0..r.len()).map(|i| r.try_get(i).unwrap()).collect())
                    .collect();
                rows
            }
        };
        let all = "SELECT job, class, external_id, first_seen_run, first_seen_at, last_seen_run, \
                   last_seen_at, resolved_at, resolved_run FROM recon_discrepancies \
                   ORDER BY job, class, external_id";
        conn.close().await.unwrap();
        let before = rows(all).await;
        assert_eq!(before.len(), 4);

        let store = StateStore::open(&url).await.unwrap();
        assert_eq!(rows(all).await, before);
        let check = rows("SELECT sql FROM sqlite_master WHERE name = 'recon_discrepancies'").await;
        let check = check[0][0].clone().unwrap();
        assert!(
            check.contains("class = 'gap' OR class = 'orphan'"),
            "{check}"
        );
        assert!(!check.contains("IN ("), "{check}");
        // A class not among the four is refused; a stored class of each
        // kind reads back.
        let refused = sqlx::query(
            "INSERT INTO recon_discrepancies (job, class, external_id, first_seen_run, \
             first_seen_at, last_seen_run, last_seen_at) VALUES ('nightly', 'Gap', 'x', 'r', 't', \
             'r', 't')",
        )
        .execute(&store.pool)
        .await;
        assert!(
            format!("{:?}", refused.unwrap_err()).contains("CHECK constraint failed"),
            "an unknown class is refused"
        );
        // The orphan comes back: its closed streak is copied by the trigger.
        let now = ts("2026-11-04T01:00:00Z");
        let delta = store
            .update_discrepancies(
                "nightly",
                "r3",
                now,
                &[
                    (Class::Gap, "g1".into()),
                    (Class::Orphan, "o1".into()),
                    (Class::Mismatch, "m1".into()),
                    (Class::Duplicate, "d1".into()),
                ],
            )
            .await
            .unwrap();
        assert_eq!(delta.new, vec![(Class::Orphan, "o1".to_string())]);
        assert_eq!(delta.persisting.len(), 3);
        let streaks = rows(
            "SELECT external_id, class, first_seen_at, resolved_run, resolved_at \
             FROM recon_discrepancy_streaks",
        )
        .await;
        let text = |s: &str| Some(s.to_string());
        assert_eq!(
            streaks,
            vec![vec![
                text("o1"),
                text("orphan"),
                text("2026-11-02T01:00:00.000000000Z"),
                text("r2"),
                text("2026-11-03T01:00:00.000000000Z"),
            ]]
        );
        store.close().await;
    })
    .await;
}
