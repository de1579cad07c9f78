//! The reviewed-plan table, its migration from a version-1 store, and the
//! lock-holder check `recon runs` uses; on SQLite and PostgreSQL.

use std::time::Duration;

use jiff::Timestamp;
use recon_core::Window;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;

use super::*;
use crate::migrate;
use crate::store::normalize_url;
use sqlx::{Connection, Row};

fn plan(id: &str) -> PlanRecord {
    PlanRecord {
        id: id.into(),
        job: "charges".into(),
        window: Window {
            start: "2026-11-28T05:00:00Z".parse().unwrap(),
            end: "2026-11-29T05:00:00Z".parse().unwrap(),
        },
        sha256: "ab".repeat(32),
        items: 3,
        source_records: 41,
        read_at: "2026-11-30T10:00:00.123456789Z".parse().unwrap(),
        created_at: "2026-11-30T10:00:01Z".parse().unwrap(),
    }
}

async fn plans_round_trip_and_upgrade(dialect: Dialect) {
    let db = TestDb::create(dialect).await;
    // A store made by a recon from before plans were recorded: schema
    // version 1 only, with one finished run.
    {
        sqlx::any::install_default_drivers();
        let (backend, url) = normalize_url(&db.url).unwrap();
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::query(
            "CREATE TABLE recon_schema_version (version BIGINT NOT NULL PRIMARY KEY, \
             name TEXT NOT NULL, applied_at TEXT NOT NULL)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        let step = &migrate::STEPS[0];
        let ddl = match backend {
            Backend::Sqlite => step.sqlite,
            Backend::Postgres => step.postgres,
        };
        for sql in ddl {
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
        sqlx::query(
            "INSERT INTO recon_schema_version VALUES (1, 'v1', '2026-11-01T00:00:00.000000000Z')",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO recon_runs (id, job, window_start, window_end, started_at, finished_at, \
             status, dry_run, counts, report_dir, error) VALUES ('old-run', 'charges', \
             '2026-11-01T00:00:00.000000000Z', '2026-11-02T00:00:00.000000000Z', \
             '2026-11-02T01:00:00.000000000Z', '2026-11-02T01:00:05.000000000Z', 'clean', 0, \
             NULL, NULL, NULL)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    }
    let store = StateStore::open(&db.url).await.unwrap();
    assert_eq!(store.recent_runs(None, 5).await.unwrap()[0].id, "old-run");
    assert_eq!(store.saved_plan("p1").await.unwrap(), None);
    store.save_plan(&plan("p1")).await.unwrap();
    assert_eq!(store.saved_plan("p1").await.unwrap(), Some(plan("p1")));
    assert!(
        store.save_plan(&plan("p1")).await.is_err(),
        "a plan id is recorded once"
    );
    store.close().await;
    // Reopening changes nothing.
    let store = StateStore::open(&db.url).await.unwrap();
    assert_eq!(store.saved_plan("p1").await.unwrap(), Some(plan("p1")));
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_plans_round_trip_and_upgrade() {
    plans_round_trip_and_upgrade(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_plans_round_trip_and_upgrade() {
    plans_round_trip_and_upgrade(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_holder_is_gone_only_when_its_process_is() {
    let db = TestDb::create(Dialect::Sqlite).await;
    let store = StateStore::open(&db.url).await.unwrap();
    assert!(!store.lock_holder_gone("charges").await.unwrap(), "no row");
    let lock = store
        .acquire_lock("charges", Duration::from_secs(600))
        .await
        .unwrap();
    assert!(
        !store.lock_holder_gone("charges").await.unwrap(),
        "this process holds it"
    );
    // The same row, as left by a process of this machine that is gone.
    let mut parts: Vec<String> = lock.owner().split(':').map(str::to_string).collect();
    parts[1] = "2147483646".into();
    let dead = parts.join(":");
    sqlx::query("UPDATE recon_locks SET owner = $1 WHERE job = 'charges'")
        .bind(dead)
        .execute(&store.pool)
        .await
        .unwrap();
    assert!(store.lock_holder_gone("charges").await.unwrap());
    // A holder on another machine is not proof of anything.
    sqlx::query("UPDATE recon_locks SET owner = 'elsewhere:1:abc' WHERE job = 'charges'")
        .execute(&store.pool)
        .await
        .unwrap();
    assert!(!store.lock_holder_gone("charges").await.unwrap());
    lock.abandon();
    store.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_holder_is_gone_when_nobody_holds_the_advisory_lock() {
    let db = TestDb::create(Dialect::Postgres).await;
    let store = StateStore::open(&db.url).await.unwrap();
    let lock = store
        .acquire_lock("charges", Duration::from_secs(600))
        .await
        .unwrap();
    assert!(!store.lock_holder_gone("charges").await.unwrap());
    assert!(
        store.lock_holder_gone("other-job").await.unwrap(),
        "another job's lock is not this one"
    );
    // Killed: the session ends, the advisory lock with it; the row stays.
    lock.abandon();
    crate::tests::wait_until_free(&store, "charges").await;
    assert!(
        store.lock_holder_gone("charges").await.unwrap(),
        "the advisory lock died with its session"
    );
    let rows: i64 = sqlx::query("SELECT COUNT(*) FROM recon_locks")
        .fetch_one(&store.pool)
        .await
        .and_then(|r| r.try_get(0))
        .unwrap();
    assert_eq!(rows, 1, "the row alone proves nothing on PostgreSQL");
    store.close().await;
    db.drop_db().await;
}

#[test]
fn timestamps_of_a_plan_keep_nanoseconds() {
    let t: Timestamp = plan("p").read_at;
    assert_eq!(ts_text(t), "2026-11-30T10:00:00.123456789Z");
}
