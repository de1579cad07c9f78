//! The SQL connector against real PostgreSQL, MariaDB and SQLite. Each test
//! makes and drops its own database.

use futures_util::TryStreamExt;
use recon_core::{
    ConnectorError, Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Target,
    Value, Window, WriteMode, WriteOutcome,
};
use recon_sql::testing::TestDb;
use recon_sql::{Dialect, SqlTable, SqlTableConfig};

fn schema() -> Schema {
    let f = |name: &str, kind| Field {
        name: name.into(),
        kind,
        compared: true,
    };
    Schema {
        fields: vec![
            f("amount", FieldKind::Money),
            f("status", FieldKind::Text),
            f("created", FieldKind::Timestamp),
        ],
    }
}

fn ddl(dialect: Dialect, table: &str, unique: bool, amount_type: &str) -> String {
    let (text, ts) = match dialect {
        Dialect::Postgres => ("TEXT", "TIMESTAMPTZ"),
        Dialect::MySql => ("VARCHAR(64)", "DATETIME"),
        Dialect::Sqlite => ("TEXT", "TIMESTAMP"),
    };
    format!(
        "CREATE TABLE {table} (stripe_charge_id {text} {}, amount_cents {amount_type}, currency {text}, status {text}, created_at {ts})",
        if unique { "NOT NULL UNIQUE" } else { "NOT NULL" }
    )
}

fn config(db: &TestDb, table: &str) -> SqlTableConfig {
    let mut cfg = SqlTableConfig::new(
        Secret::new(db.url.clone()),
        table,
        "stripe_charge_id",
        vec!["amount_cents".into(), "status".into(), "created_at".into()],
    );
    cfg.currency_column = Some("currency".into());
    cfg.time_field = Some(2);
    cfg.write_batch = 300;
    cfg
}

const T0: i64 = 1_764_288_000; // 2025-11-28T00:00:00Z

fn record(i: i64) -> Record {
    let cur = ["usd", "jpy", "kwd", "eur"][(i % 4) as usize];
    Record {
        key: format!("ch_{i:06}"),
        values: vec![
            Value::Money(Money::from_minor(
                i * 7 - 500,
                Currency::parse(cur).unwrap(),
            )),
            Value::Text(if i % 3 == 0 { "failed" } else { "succeeded" }.into()),
            Value::Timestamp(jiff::Timestamp::from_second(T0 + i * 60).unwrap()),
        ],
    }
}

async fn read_all(t: &SqlTable, window: Window) -> Vec<Record> {
    let pages: Vec<_> = t.read(&schema(), window).try_collect().await.unwrap();
    let mut out: Vec<Record> = pages.into_iter().flat_map(|p| p.records).collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

async fn suite(dialect: Dialect) {
    let db = TestDb::create(dialect).await;
    db.exec(&ddl(dialect, "payments", true, "BIGINT")).await;
    let t = SqlTable::connect(config(&db, "payments"), &schema())
        .await
        .unwrap();
    t.check_unique_key().await.unwrap();

    // Insert 2,500 records in batches of 300: all created.
    let records: Vec<Record> = (0..2500).map(record).collect();
    let out = t
        .write(&schema(), &records, WriteMode::Insert)
        .await
        .unwrap();
    assert_eq!(out.len(), 2500);
    assert!(
        out.iter().all(|o| *o == WriteOutcome::Created),
        "{dialect:?}"
    );
    assert_eq!(t.count().await.unwrap(), 2500);

    // Again: idempotent, nothing written twice.
    let out = t
        .write(&schema(), &records, WriteMode::Insert)
        .await
        .unwrap();
    assert!(out.iter().all(|o| *o == WriteOutcome::Unchanged));
    assert_eq!(t.count().await.unwrap(), 2500);

    // A window reads exactly the records created inside it, values intact
    // (money in every exponent, negative amounts, timestamps to the second).
    let window = Window {
        start: jiff::Timestamp::from_second(T0 + 100 * 60).unwrap(),
        end: jiff::Timestamp::from_second(T0 + 1100 * 60).unwrap(),
    };
    let got = read_all(&t, window).await;
    assert_eq!(got, records[100..1100].to_vec(), "{dialect:?}");

    // Lookups find what exists and skip what does not.
    let keys: Vec<String> = vec!["ch_000007".into(), "ch_999999".into(), "ch_002499".into()];
    let mut found = t.lookup(&schema(), &keys).await.unwrap();
    found.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(found, vec![record(7), record(2499)]);

    // Upsert repairs a field and reports which rows it created or updated.
    let mut changed = record(5);
    changed.values[1] = Value::Text("refunded".into());
    let out = t
        .write(
            &schema(),
            &[changed.clone(), record(3000)],
            WriteMode::Upsert,
        )
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Updated, WriteOutcome::Created]);
    assert_eq!(
        t.lookup(&schema(), &["ch_000005".into()]).await.unwrap(),
        vec![changed]
    );

    // A row the server refuses fails alone; its batch-mates are written.
    let mut too_long = record(4000);
    too_long.values[1] = Value::Text("x".repeat(100));
    if dialect == Dialect::MySql {
        let out = t
            .write(
                &schema(),
                &[record(4001), too_long, record(4002)],
                WriteMode::Insert,
            )
            .await
            .unwrap();
        assert_eq!(out[0], WriteOutcome::Created);
        assert!(matches!(out[1], WriteOutcome::Failed(_)), "{out:?}");
        assert_eq!(out[2], WriteOutcome::Created);
    }

    // No unique constraint: refusal with the DDL that fixes it.
    db.exec(&ddl(dialect, "loose", false, "BIGINT")).await;
    let loose = SqlTable::connect(config(&db, "loose"), &schema())
        .await
        .unwrap();
    let e = loose.check_unique_key().await.unwrap_err().to_string();
    assert!(
        e.contains("no unique constraint on `stripe_charge_id`"),
        "{e}"
    );
    assert!(e.contains("UNIQUE"), "{e}");

    // A decimal amount column is read and written in major units, exactly.
    let dec = match dialect {
        Dialect::Postgres => "NUMERIC(14,3)",
        _ => "DECIMAL(14,3)",
    };
    db.exec(&ddl(dialect, "ledger", true, dec)).await;
    let ledger = SqlTable::connect(config(&db, "ledger"), &schema())
        .await
        .unwrap();
    let some: Vec<Record> = (0..8).map(record).collect();
    ledger
        .write(&schema(), &some, WriteMode::Insert)
        .await
        .unwrap();
    let window = Window {
        start: jiff::Timestamp::from_second(T0).unwrap(),
        end: jiff::Timestamp::from_second(T0 + 3600).unwrap(),
    };
    assert_eq!(read_all(&ledger, window).await, some, "{dialect:?} decimal");

    // A typo in a column is named, with the columns that exist.
    let mut bad = config(&db, "payments");
    bad.columns[1] = "stauts".into();
    let e = SqlTable::connect(bad, &schema())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no column `stauts`") && e.contains("status"),
        "{e}"
    );

    db.drop_db().await;
}

#[tokio::test]
async fn postgres() {
    suite(Dialect::Postgres).await;
}

#[tokio::test]
async fn mariadb() {
    suite(Dialect::MySql).await;
}

#[tokio::test]
async fn sqlite() {
    suite(Dialect::Sqlite).await;
}

#[tokio::test]
async fn unreachable_database_is_named_without_its_password() {
    let mut cfg = SqlTableConfig::new(
        Secret::new("postgres://recon:hunter2@127.0.0.1:1/finance".to_string()),
        "payments",
        "id",
        vec!["amount".into(), "status".into(), "created".into()],
    );
    cfg.currency_column = Some("currency".into());
    let e = SqlTable::connect(cfg, &schema()).await.unwrap_err();
    assert!(matches!(e, ConnectorError::Unreachable(_)));
    let msg = e.to_string();
    assert!(
        msg.contains("postgres://recon:***@127.0.0.1:1/finance"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"), "{msg}");
}

#[tokio::test]
async fn identifiers_from_config_are_never_interpolated() {
    let db = TestDb::create(Dialect::Sqlite).await;
    let cfg = SqlTableConfig::new(
        Secret::new(db.url.clone()),
        "payments; DROP TABLE x",
        "id",
        vec!["a".into(), "b".into(), "c".into()],
    );
    let e = SqlTable::connect(cfg, &schema())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a plain SQL identifier"), "{e}");
    db.drop_db().await;
}
