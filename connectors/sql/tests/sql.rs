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
    let pages: Vec<_> = t.read(window).try_collect().await.unwrap();
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
    t.check_idempotent().await.unwrap();

    // Insert 2,500 records in batches of 300: all created.
    let records: Vec<Record> = (0..2500).map(record).collect();
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    assert_eq!(out.len(), 2500);
    assert!(
        out.iter().all(|o| *o == WriteOutcome::Created),
        "{dialect:?}"
    );
    assert_eq!(t.count().await.unwrap(), 2500);

    // Again: idempotent, nothing written twice.
    let out = t.write(&records, WriteMode::Insert).await.unwrap();
    assert!(out.iter().all(|o| *o == WriteOutcome::Unchanged));
    assert_eq!(t.count().await.unwrap(), 2500);

    // A batch mixing stored and new keys (on PostgreSQL the plain insert
    // tried first meets a unique violation and writes nothing; the guarded
    // one then sorts it out): the new ones created, once, the rest unchanged.
    let mixed: Vec<Record> = (2490..2520).map(record).collect();
    let out = t.write(&mixed, WriteMode::Insert).await.unwrap();
    let created: Vec<bool> = out.iter().map(|o| *o == WriteOutcome::Created).collect();
    let expected: Vec<bool> = (2490..2520).map(|i| i >= 2500).collect();
    assert_eq!(created, expected, "{dialect:?}: {out:?}");
    assert!(out[..10].iter().all(|o| *o == WriteOutcome::Unchanged));
    assert_eq!(t.count().await.unwrap(), 2520);

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
    let mut found = t.lookup(&keys).await.unwrap();
    found.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(found, vec![record(7), record(2499)]);

    // A lookup larger than one query (several chunks asked at once) finds
    // every existing key exactly once, whatever chunk it falls in.
    let keys: Vec<String> = (0..16_000)
        .map(|i| format!("ch_{:06}", (i * 7919) % 40_000))
        .collect();
    let mut found = t.lookup(&keys).await.unwrap();
    found.sort_by(|a, b| a.key.cmp(&b.key));
    let mut want: Vec<Record> = (0..16_000i64)
        .map(|i| (i * 7919) % 40_000)
        .filter(|i| *i < 2520)
        .map(record)
        .collect();
    want.sort_by(|a, b| a.key.cmp(&b.key));
    want.dedup();
    assert!(want.len() > 500, "the keys hit the table: {}", want.len());
    assert_eq!(found, want, "{dialect:?}");

    // Keys with quotes, backslashes, JSON escapes and non-ASCII text are
    // found exactly (PostgreSQL binds them as one JSON array).
    let mut odd = record(5000);
    odd.key = "ch_\"q'\\u00e9\\n\u{e9}\u{1F600}".into();
    let out = t.write(&[odd.clone()], WriteMode::Insert).await.unwrap();
    assert_eq!(out, vec![WriteOutcome::Created], "{dialect:?}");
    let found = t
        .lookup(&[
            odd.key.clone(),
            "ch_\"q'".into(),
            "CH_\"Q'\\U00E9\\N\u{e9}\u{1F600}".into(),
        ])
        .await
        .unwrap();
    assert_eq!(found, vec![odd], "{dialect:?}");

    // Upsert repairs a field and reports which rows it created or updated.
    let mut changed = record(5);
    changed.values[1] = Value::Text("refunded".into());
    let out = t
        .write(&[changed.clone(), record(3000)], WriteMode::Upsert)
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Updated, WriteOutcome::Created]);
    assert_eq!(
        t.lookup(&["ch_000005".into()]).await.unwrap(),
        vec![changed]
    );

    // A row the server refuses fails alone; its batch-mates are written.
    let mut too_long = record(4000);
    too_long.values[1] = Value::Text("x".repeat(100));
    if dialect == Dialect::MySql {
        let out = t
            .write(&[record(4001), too_long, record(4002)], WriteMode::Insert)
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
    let e = loose.check_idempotent().await.unwrap_err().to_string();
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
    ledger.write(&some, WriteMode::Insert).await.unwrap();
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

// ---------------------------------------------------------------------------
// Window reads for every storage form of a time column (issue 11, item 7).
// Each case stores four rows: two inside [2026-01-02, 2026-01-03) UTC (one
// exactly at the start) and two just outside (one second before, and
// exactly at the end), written in the column's own form.

/// 2026-01-02T00:00:00Z.
const DAY2: i64 = 1_767_312_000;
/// 2026-01-02T01:01:01Z.
const IN1: i64 = DAY2 + 3661;

fn time_schema() -> Schema {
    Schema {
        fields: vec![Field {
            name: "created".into(),
            kind: FieldKind::Timestamp,
            compared: true,
        }],
    }
}

fn time_config(db: &TestDb) -> SqlTableConfig {
    let mut cfg = SqlTableConfig::new(Secret::new(db.url.clone()), "events", "k", vec!["t".into()]);
    cfg.time_field = Some(0);
    cfg
}

fn day2() -> Window {
    Window {
        start: jiff::Timestamp::from_second(DAY2).unwrap(),
        end: jiff::Timestamp::from_second(DAY2 + 86_400).unwrap(),
    }
}

/// Creates `events (k, t <column_type>)`, inserts `in1`, `start`, `before`
/// and `end` with these SQL literals, and checks that the window read
/// returns exactly `in1` and `start`, with their instants.
async fn window_case(dialect: Dialect, column_type: &str, literals: [&str; 4]) {
    let db = TestDb::create(dialect).await;
    let key = if dialect == Dialect::MySql {
        "VARCHAR(16)"
    } else {
        "TEXT"
    };
    db.exec(&format!(
        "CREATE TABLE events (k {key} NOT NULL, t {column_type})"
    ))
    .await;
    let keys = ["in1", "start", "before", "end"];
    let rows: Vec<String> = keys
        .iter()
        .zip(literals)
        .map(|(k, v)| format!("('{k}', {v})"))
        .collect();
    db.exec(&format!(
        "INSERT INTO events (k, t) VALUES {}",
        rows.join(", ")
    ))
    .await;
    let t = SqlTable::connect(time_config(&db), &time_schema())
        .await
        .unwrap_or_else(|e| panic!("{dialect:?} {column_type}: {e}"));
    let pages: Vec<_> = t.read(day2()).try_collect().await.unwrap();
    assert!(pages.iter().all(|p| p.unplaced.is_empty()));
    let mut got: Vec<(String, Value)> = pages
        .into_iter()
        .flat_map(|p| p.records)
        .map(|r| (r.key, r.values[0].clone()))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let at = |s: i64| Value::Timestamp(jiff::Timestamp::from_second(s).unwrap());
    assert_eq!(
        got,
        vec![
            ("in1".to_string(), at(IN1)),
            ("start".to_string(), at(DAY2))
        ],
        "{dialect:?} {column_type} {literals:?}"
    );
    // What the read left out, as the edge look-ups ask before looking
    // keys up: a row before the window, then one at its (excluded) end,
    // and a row without a time (listed as unplaced, not diffed: a look-up
    // by key could find it).
    let outside = || async { !t.holds_nothing_outside(day2()).await.unwrap() };
    let case = format!("{dialect:?} {column_type} {literals:?}");
    assert!(outside().await, "{case}: `before` and `end` lie outside");
    db.exec("DELETE FROM events WHERE k = 'before'").await;
    assert!(
        outside().await,
        "{case}: `end` (the excluded end) lies outside"
    );
    db.exec("DELETE FROM events WHERE k = 'end'").await;
    assert!(!outside().await, "{case}: only the window's rows are left");
    db.exec("INSERT INTO events (k, t) VALUES ('none', NULL)")
        .await;
    assert!(
        outside().await,
        "{case}: a row without a time is not diffed"
    );
    db.exec("DELETE FROM events WHERE k = 'none'").await;
    assert!(!outside().await, "{case}: only the window's rows again");
    db.exec(&format!(
        "INSERT INTO events (k, t) VALUES ('again', {})",
        literals[2]
    ))
    .await;
    assert!(outside().await, "{case}: a row before the window again");
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_window_reads_every_time_form() {
    let d = Dialect::Sqlite;
    // TEXT, RFC 3339 with Z.
    let z = [
        "'2026-01-02T01:01:01Z'",
        "'2026-01-02T00:00:00Z'",
        "'2026-01-01T23:59:59Z'",
        "'2026-01-03T00:00:00Z'",
    ];
    window_case(d, "TEXT", z).await;
    // TEXT, RFC 3339 with offsets (the same instants).
    let offsets = [
        "'2026-01-02T03:01:01+02:00'",
        "'2026-01-01T19:00:00-05:00'",
        "'2026-01-02T01:59:59+02:00'",
        "'2026-01-02T19:00:00-05:00'",
    ];
    window_case(d, "TEXT", offsets).await;
    // TEXT, `YYYY-MM-DD HH:MM:SS` in UTC, with and without fractions.
    window_case(
        d,
        "TEXT",
        [
            "'2026-01-02 01:01:01'",
            "'2026-01-02 00:00:00.000'",
            "'2026-01-01 23:59:59'",
            "'2026-01-03 00:00:00'",
        ],
    )
    .await;
    // INTEGER Unix seconds, and the same digits stored as text.
    let secs = IN1.to_string();
    let start = DAY2.to_string();
    let before = (DAY2 - 1).to_string();
    let end = (DAY2 + 86_400).to_string();
    window_case(d, "INTEGER", [&secs, &start, &before, &end]).await;
    let quoted: Vec<String> = [&secs, &start, &before, &end]
        .iter()
        .map(|s| format!("'{s}'"))
        .collect();
    window_case(d, "TEXT", [&quoted[0], &quoted[1], &quoted[2], &quoted[3]]).await;
    // A declared TIMESTAMP / DATETIME column holding a mix of forms.
    window_case(
        d,
        "DATETIME",
        [
            "'2026-01-02T03:01:01+02:00'",
            &start,
            "'2026-01-01 23:59:59'",
            "'2026-01-03T00:00:00Z'",
        ],
    )
    .await;
    window_case(d, "TIMESTAMP", z).await;
}

#[tokio::test]
async fn postgres_window_reads_timestamp_forms() {
    let d = Dialect::Postgres;
    let z = [
        "'2026-01-02T01:01:01Z'",
        "'2026-01-02T00:00:00Z'",
        "'2026-01-01T23:59:59Z'",
        "'2026-01-03T00:00:00Z'",
    ];
    window_case(d, "TIMESTAMPTZ", z).await;
    window_case(
        d,
        "TIMESTAMPTZ",
        [
            "'2026-01-02T03:01:01+02:00'",
            "'2026-01-01T19:00:00-05:00'",
            "'2026-01-02T01:59:59+02:00'",
            "'2026-01-02T19:00:00-05:00'",
        ],
    )
    .await;
    // Without time zone: values are UTC.
    window_case(
        d,
        "TIMESTAMP",
        [
            "'2026-01-02 01:01:01'",
            "'2026-01-02 00:00:00'",
            "'2026-01-01 23:59:59'",
            "'2026-01-03 00:00:00'",
        ],
    )
    .await;
    let s = |v: i64| v.to_string();
    let (a, b, c, e) = (s(IN1), s(DAY2), s(DAY2 - 1), s(DAY2 + 86_400));
    window_case(d, "BIGINT", [&a, &b, &c, &e]).await;
}

#[tokio::test]
async fn mariadb_window_reads_timestamp_forms() {
    let d = Dialect::MySql;
    let naive = [
        "'2026-01-02 01:01:01'",
        "'2026-01-02 00:00:00'",
        "'2026-01-01 23:59:59'",
        "'2026-01-03 00:00:00'",
    ];
    // DATETIME has no zone: values are UTC.
    window_case(d, "DATETIME", naive).await;
    // TIMESTAMP is an instant; FROM_UNIXTIME writes it in any session zone.
    let f = |v: i64| format!("FROM_UNIXTIME({v})");
    let (a, b, c, e) = (f(IN1), f(DAY2), f(DAY2 - 1), f(DAY2 + 86_400));
    window_case(d, "TIMESTAMP NULL", [&a, &b, &c, &e]).await;
    let s = |v: i64| v.to_string();
    let (a, b, c, e) = (s(IN1), s(DAY2), s(DAY2 - 1), s(DAY2 + 86_400));
    window_case(d, "BIGINT", [&a, &b, &c, &e]).await;
}

/// A text time column on PostgreSQL or MySQL cannot be compared with a
/// window exactly: refused at connect, naming the type and what to use.
#[tokio::test]
async fn text_time_columns_are_refused_on_servers() {
    for (dialect, ty, declared, want) in [
        (
            Dialect::Postgres,
            "TEXT",
            "`text`",
            "timestamp with time zone",
        ),
        (Dialect::MySql, "VARCHAR(40)", "`varchar`", "TIMESTAMP"),
    ] {
        let db = TestDb::create(dialect).await;
        let key = if dialect == Dialect::MySql {
            "VARCHAR(16)"
        } else {
            "TEXT"
        };
        db.exec(&format!("CREATE TABLE events (k {key} NOT NULL, t {ty})"))
            .await;
        let e = SqlTable::connect(time_config(&db), &time_schema())
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ConnectorError::Config(_)), "{msg}");
        assert!(
            msg.contains("time column `t`") && msg.contains(want) && msg.contains(declared),
            "{msg}"
        );
        db.drop_db().await;
    }
}

/// Rows no window can hold are listed, with why.
#[tokio::test]
async fn unplaced_rows_are_listed_on_every_backend() {
    for (dialect, ty) in [
        (Dialect::Sqlite, "TEXT"),
        (Dialect::Postgres, "TIMESTAMPTZ"),
        (Dialect::MySql, "DATETIME"),
    ] {
        let db = TestDb::create(dialect).await;
        let key = if dialect == Dialect::MySql {
            "VARCHAR(16)"
        } else {
            "TEXT"
        };
        db.exec(&format!("CREATE TABLE events (k {key} NOT NULL, t {ty})"))
            .await;
        let mut rows = vec!["('ok', '2026-01-02 01:01:01')", "('nul', NULL)"];
        if dialect == Dialect::Sqlite {
            rows.push("('bad', 'soon')");
            rows.push("('blank', '')");
        }
        db.exec(&format!(
            "INSERT INTO events (k, t) VALUES {}",
            rows.join(", ")
        ))
        .await;
        let t = SqlTable::connect(time_config(&db), &time_schema())
            .await
            .unwrap();
        // Listed by the window read itself, beside the records it returns.
        let pages: Vec<_> = t.read(day2()).try_collect().await.unwrap();
        let mut got: Vec<(String, String, String, String)> = pages
            .iter()
            .flat_map(|p| p.unplaced.iter().cloned())
            .map(|u| (u.key, u.field, u.value, u.reason))
            .collect();
        got.sort();
        let records: Vec<&str> = pages
            .iter()
            .flat_map(|p| p.records.iter().map(|r| r.key.as_str()))
            .collect();
        assert_eq!(records, ["ok"], "{dialect:?}");
        let row = |k: &str, v: &str, r: &str| {
            (k.to_string(), "t".to_string(), v.to_string(), r.to_string())
        };
        let mut want = vec![row("nul", "", "null")];
        if dialect == Dialect::Sqlite {
            want = vec![
                row("bad", "soon", "not a timestamp"),
                row("blank", "", "empty"),
                row("nul", "", "null"),
            ];
        }
        assert_eq!(got, want, "{dialect:?}");
        db.drop_db().await;
    }
}
