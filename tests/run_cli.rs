//! `recon run` end to end through the binary: an export file as the source
//! of truth, a real PostgreSQL / MariaDB / SQLite table as the target. Each
//! test makes and drops its own database.

mod common;

use common::{summary, text};

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use recon::state::prelude::*;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;

/// 2026-11-28T00:00:00-05:00 (New York midnight) in Unix seconds.
const DAY_START: i64 = 1_795_842_000;
const DAY: &str = "2026-11-28";

struct Fixture {
    db: TestDb,
    dir: tempfile::TempDir,
}

fn ddl(dialect: Dialect, table: &str, unique: bool) -> String {
    let (text, ts) = match dialect {
        Dialect::Postgres => ("TEXT", "TIMESTAMPTZ"),
        Dialect::MySql => ("VARCHAR(64)", "DATETIME"),
        Dialect::Sqlite => ("TEXT", "TIMESTAMP"),
    };
    format!(
        "CREATE TABLE {table} (stripe_charge_id {text} NOT NULL {}, amount_cents BIGINT, currency {text}, status {text}, created_at {ts})",
        if unique { "UNIQUE" } else { "" }
    )
}

/// Source rows: 40 charges during the day, one at 23:59:59.
fn source_rows() -> Vec<(String, i64, &'static str, &'static str, i64)> {
    let mut rows: Vec<_> = (0..40)
        .map(|i| {
            (
                format!("ch_{i:04}"),
                1000 + i * 25,
                ["usd", "eur", "jpy", "kwd"][(i % 4) as usize],
                "succeeded",
                DAY_START + 3600 + i * 1200,
            )
        })
        .collect();
    rows.push((
        "ch_edge".into(),
        4200,
        "usd",
        "succeeded",
        DAY_START + 86_399,
    ));
    rows
}

fn sql_time(dialect: Dialect, secs: i64) -> String {
    let t = jiff::Timestamp::from_second(secs).unwrap();
    match dialect {
        Dialect::Postgres => format!("'{}'", t),
        _ => format!("'{}'", t.strftime("%Y-%m-%d %H:%M:%S")),
    }
}

impl Fixture {
    /// Target holds: most source rows; gaps ch_0003, ch_0010, ch_0020; an
    /// amount mismatch on ch_0005; orphans ch_9001, ch_9002; the edge
    /// record stored 6 seconds later, on the next day.
    async fn new(dialect: Dialect, unique: bool) -> Fixture {
        let db = TestDb::create(dialect).await;
        db.exec(&ddl(dialect, "payments", unique)).await;
        let mut inserts = Vec::new();
        for (id, amount, cur, status, created) in source_rows() {
            if ["ch_0003", "ch_0010", "ch_0020"].contains(&id.as_str()) {
                continue;
            }
            let amount = if id == "ch_0005" { amount + 1 } else { amount };
            let created = if id == "ch_edge" {
                created + 6
            } else {
                created
            };
            inserts.push(format!(
                "('{id}', {amount}, '{}', '{status}', {})",
                cur.to_uppercase(),
                sql_time(dialect, created)
            ));
        }
        for (id, secs) in [("ch_9001", DAY_START + 500), ("ch_9002", DAY_START + 7000)] {
            inserts.push(format!(
                "('{id}', 777, 'USD', 'succeeded', {})",
                sql_time(dialect, secs)
            ));
        }
        db.exec(&format!(
            "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) VALUES {}",
            inserts.join(", ")
        ))
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("id,amount,currency,status,created\n");
        for (id, amount, cur, status, created) in source_rows() {
            csv.push_str(&format!("{id},{amount},{cur},{status},{created}\n"));
        }
        std::fs::write(dir.path().join("charges.csv"), csv).unwrap();
        let f = Fixture { db, dir };
        f.write_config("");
        f
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("recon.toml")
    }

    fn write_config(&self, backfill_extra: &str) {
        let text = format!(
            r#"
{defaults}
[jobs.charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "{DAY}"

{sides}write_batch = 2

[jobs.charges.backfill]
mode = "insert"
max_records = 100
max_ratio = 0.5
{backfill_extra}
"#,
            defaults = common::defaults_in(self.dir.path(), "America/New_York"),
            sides = common::file_to_sql(
                &self.dir.path().join("charges.csv"),
                &self.db.url,
                "stripe_charge_id"
            ),
        );
        std::fs::write(self.config_path(), text).unwrap();
    }

    fn run(&self, args: &[&str], out: &str) -> Output {
        Command::cargo_bin("recon")
            .unwrap()
            .arg("run")
            .arg("--config")
            .arg(self.config_path())
            .args(["--out", self.dir.path().join(out).to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Every row of the target, sorted: a checksum of the table.
    async fn table(&self) -> Vec<String> {
        let cast = match self.db.dialect {
            Dialect::MySql => "CHAR",
            _ => "TEXT",
        };
        let sql = format!(
            "SELECT CAST(stripe_charge_id AS {cast}), CAST(amount_cents AS {cast}), CAST(currency AS {cast}), CAST(status AS {cast}), CAST(created_at AS {cast}) FROM payments"
        );
        common::joined_rows(&self.db.url, &sql, 5).await
    }
}

fn ids(dir: &Path, file: &str) -> Vec<String> {
    let mut r = csv::Reader::from_path(dir.join(file)).unwrap();
    let col = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "external_id")
        .unwrap();
    let mut v: Vec<String> = r.records().map(|x| x.unwrap()[col].to_string()).collect();
    v.sort();
    v.dedup();
    v
}

async fn dry_run_apply_rerun(dialect: Dialect) {
    let f = Fixture::new(dialect, true).await;
    let before = f.table().await;

    // Dry run: reports and plan, nothing written.
    let o = f.run(&["--dry-run"], "dry");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(f.table().await, before, "dry run changed the target");
    let s = summary(&f.out("dry"));
    assert_eq!(s["gaps"], 3, "{s}");
    assert_eq!(s["orphans"], 2);
    assert_eq!(s["mismatches"], 1);
    assert_eq!(s["backfilled"], 0);
    // The record at 23:59:59 stored at 00:00:05 is matched, not a gap and an orphan.
    assert_eq!(s["matched"], 41 - 3 - 1, "{s}");
    assert_eq!(s["confirmed_by_lookup"], 1);
    assert_eq!(
        ids(&f.out("dry"), "gaps.csv"),
        ["ch_0003", "ch_0010", "ch_0020"]
    );
    assert_eq!(ids(&f.out("dry"), "orphans.csv"), ["ch_9001", "ch_9002"]);
    let plan = std::fs::read_to_string(f.out("dry").join("plan.jsonl")).unwrap();
    assert_eq!(plan.lines().count(), 3, "{plan}");
    assert!(!f.out("dry").join("backfill.csv").exists());

    // Apply: each gap written once; orphans untouched.
    let o = f.run(&[], "apply");
    assert_eq!(
        o.status.code(),
        Some(1),
        "orphans and a mismatch remain: {}",
        text(&o)
    );
    let s = summary(&f.out("apply"));
    assert_eq!(s["backfilled"], 3, "{s}");
    assert_eq!(s["backfill_failed"], 0);
    let after = f.table().await;
    assert_eq!(after.len(), before.len() + 3);
    for id in ["ch_0003", "ch_0010", "ch_0020", "ch_9001", "ch_9002"] {
        assert_eq!(
            after
                .iter()
                .filter(|r| r.starts_with(&format!("{id}|")))
                .count(),
            1,
            "{id} in {after:?}"
        );
    }
    let backfill = std::fs::read_to_string(f.out("apply").join("backfill.csv")).unwrap();
    assert_eq!(
        backfill.matches(",insert,created,").count(),
        3,
        "{backfill}"
    );
    // gaps.csv, written while the target was, lists the gaps the run
    // found, each persisting since the dry run, as the dry run's did.
    let gaps = std::fs::read_to_string(f.out("apply").join("gaps.csv")).unwrap();
    let dry_gaps = std::fs::read_to_string(f.out("dry").join("gaps.csv")).unwrap();
    assert_eq!(
        ids(&f.out("apply"), "gaps.csv"),
        ["ch_0003", "ch_0010", "ch_0020"]
    );
    assert_eq!(gaps.lines().next(), dry_gaps.lines().next(), "{gaps}");
    let ending = |text: &str, state: &str| text.lines().filter(|l| l.ends_with(state)).count();
    assert_eq!(ending(&gaps, ",persisting"), 3, "{gaps}");
    assert_eq!(ending(&dry_gaps, ",new"), 3, "{dry_gaps}");

    // Rerun: nothing to backfill; the gaps are reported resolved.
    let o = f.run(&[], "rerun");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&f.out("rerun"));
    assert_eq!(s["gaps"], 0);
    assert_eq!(s["backfilled"], 0);
    assert_eq!(f.table().await, after);
    let mut r = csv::Reader::from_path(f.out("rerun").join("resolved.csv")).unwrap();
    let mut resolved: Vec<(String, String)> = r
        .records()
        .map(|x| {
            let x = x.unwrap();
            (x[0].to_string(), x[1].to_string())
        })
        .collect();
    resolved.sort();
    assert_eq!(
        resolved,
        [("gap", "ch_0003"), ("gap", "ch_0010"), ("gap", "ch_0020")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // Orphans persist from run to run, and are never deleted.
    let mut r = csv::Reader::from_path(f.out("rerun").join("orphans.csv")).unwrap();
    let state_col = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "state")
        .unwrap();
    assert!(r.records().all(|x| &x.unwrap()[state_col] == "persisting"));
    f.db.drop_db().await;
}

async fn crash_mid_backfill_then_rerun(dialect: Dialect) {
    let f = Fixture::new(dialect, true).await;
    // Abort after the first batch of two writes, before it is recorded.
    let o = Command::cargo_bin("recon")
        .unwrap()
        .args(["run", "--config", f.config_path().to_str().unwrap()])
        .args(["--out", f.out("crash").to_str().unwrap()])
        .env("RECON_FAULT_ABORT_AFTER_ITEMS", "2")
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_ne!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!f.out("crash").exists(), "a crashed run has no reports");
    let mid = f.table().await;
    let present = |t: &[String], id: &str| {
        t.iter()
            .filter(|r| r.starts_with(&format!("{id}|")))
            .count()
    };
    let written: usize = ["ch_0003", "ch_0010", "ch_0020"]
        .iter()
        .map(|id| present(&mid, id))
        .sum();
    assert_eq!(
        written, 2,
        "the first batch reached the target before the crash"
    );

    let o = f.run(&[], "again");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&f.out("again"));
    assert_eq!(s["gaps"], 1, "only the unwritten gap is left: {s}");
    assert_eq!(s["backfilled"], 1);
    let after = f.table().await;
    for id in ["ch_0003", "ch_0010", "ch_0020"] {
        assert_eq!(present(&after, id), 1, "{id} exactly once");
    }

    // The ledger: the crashed run is marked crashed and its unrecorded
    // items superseded; the second run's item applied.
    let state = recon::state::StateStore::open(&format!(
        "sqlite://{}",
        f.dir.path().join("state.db").display()
    ))
    .await
    .unwrap();
    let runs = state.recent_runs(Some("charges"), 10).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].status, "crashed");
    assert_eq!(runs[0].status, "discrepancies");
    let crashed = state.plan_items(&runs[1].id).await.unwrap();
    assert_eq!(crashed.len(), 3);
    assert!(crashed
        .iter()
        .all(|i| i.status == recon::state::ItemStatus::Superseded));
    let second = state.plan_items(&runs[0].id).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].status, recon::state::ItemStatus::Applied);
    // The run log holds the finished run's summary.json as written; the
    // crashed run, which never finished, holds none.
    let stored = state.summary(&runs[0].id).await.unwrap();
    let file = std::fs::read_to_string(f.out("again").join("summary.json")).unwrap();
    assert_eq!(stored.as_deref(), Some(file.as_str()));
    assert_eq!(state.summary(&runs[1].id).await.unwrap(), None);
    f.db.drop_db().await;
}

async fn refuses_without_unique_key(dialect: Dialect) {
    let f = Fixture::new(dialect, false).await;
    let before = f.table().await;
    let o = f.run(&[], "nokey");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no unique constraint on `stripe_charge_id`"),
        "{err}"
    );
    assert!(err.contains("UNIQUE"), "the DDL is printed: {err}");
    assert_eq!(f.table().await, before);
    assert!(!f.out("nokey").exists());
    f.db.drop_db().await;
}

#[tokio::test]
async fn postgres_dry_run_apply_rerun() {
    dry_run_apply_rerun(Dialect::Postgres).await;
}
#[tokio::test]
async fn mariadb_dry_run_apply_rerun() {
    dry_run_apply_rerun(Dialect::MySql).await;
}
#[tokio::test]
async fn sqlite_dry_run_apply_rerun() {
    dry_run_apply_rerun(Dialect::Sqlite).await;
}
#[tokio::test]
async fn postgres_crash_mid_backfill() {
    crash_mid_backfill_then_rerun(Dialect::Postgres).await;
}
#[tokio::test]
async fn mariadb_crash_mid_backfill() {
    crash_mid_backfill_then_rerun(Dialect::MySql).await;
}
#[tokio::test]
async fn sqlite_crash_mid_backfill() {
    crash_mid_backfill_then_rerun(Dialect::Sqlite).await;
}
#[tokio::test]
async fn postgres_refuses_without_unique_key() {
    refuses_without_unique_key(Dialect::Postgres).await;
}
#[tokio::test]
async fn mariadb_refuses_without_unique_key() {
    refuses_without_unique_key(Dialect::MySql).await;
}
#[tokio::test]
async fn sqlite_refuses_without_unique_key() {
    refuses_without_unique_key(Dialect::Sqlite).await;
}

/// A first backfill into a table that holds nothing outside the window
/// (here: nothing at all) looks no gap up by key, one statement telling
/// that nothing could be found; once the table holds a gap's record
/// outside the window (created two days before), the gaps are looked up
/// again and that one is confirmed, not reported.
async fn empty_table_needs_no_lookups(dialect: Dialect) {
    let f = Fixture::new(dialect, true).await;
    // A dry run into `out`: whether it skipped the target's look-ups, its gaps and
    // how many a look-up confirmed, the IDs gaps.csv lists, and its
    // summary (for messages).
    let dry_run = |out: &str| {
        let o = f.run(&["--dry-run", "--log", "debug"], out);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let s = summary(&f.out(out));
        (
            err.lines()
                .any(|l| l.contains("Edge look-ups skipped") && l.contains("payments")),
            s["gaps"].clone(),
            s["confirmed_by_lookup"].clone(),
            ids(&f.out(out), "gaps.csv"),
            format!("{dialect:?}: {s}"),
        )
    };
    f.db.exec("DELETE FROM payments").await;
    let (skipped, gaps, confirmed, _, said) = dry_run("empty");
    assert!(skipped, "{said}");
    assert_eq!((gaps, confirmed), (41.into(), 0.into()), "{said}");

    f.db.exec(&format!(
        "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) \
         VALUES ('ch_0003', 1075, 'KWD', 'succeeded', {})",
        sql_time(dialect, DAY_START - 2 * 86_400)
    ))
    .await;
    let (skipped, gaps, confirmed, listed, said) = dry_run("one");
    assert!(!skipped, "{said}");
    assert_eq!((gaps, confirmed), (40.into(), 1.into()), "{said}");
    assert!(!listed.contains(&"ch_0003".to_string()));

    // A row without a time is listed as unplaced, not diffed: a look-up
    // by key finds it, so the gaps are looked up again.
    f.db.exec("DELETE FROM payments").await;
    f.db.exec(
        "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) \
         VALUES ('ch_0010', 1250, 'JPY', 'succeeded', NULL)",
    )
    .await;
    let (skipped, gaps, confirmed, listed, said) = dry_run("untimed");
    assert!(!skipped, "{said}");
    assert_eq!((gaps, confirmed), (40.into(), 1.into()), "{said}");
    assert!(!listed.contains(&"ch_0010".to_string()));
    f.db.drop_db().await;
}

#[tokio::test]
async fn postgres_empty_table_needs_no_lookups() {
    empty_table_needs_no_lookups(Dialect::Postgres).await;
}
#[tokio::test]
async fn mariadb_empty_table_needs_no_lookups() {
    empty_table_needs_no_lookups(Dialect::MySql).await;
}
#[tokio::test]
async fn sqlite_empty_table_needs_no_lookups() {
    empty_table_needs_no_lookups(Dialect::Sqlite).await;
}

#[tokio::test]
async fn safety_limit_stops_before_writing() {
    let f = Fixture::new(Dialect::Sqlite, true).await;
    f.write_config("");
    let before = f.table().await;
    let o = f.run(&["--max-records", "2"], "limit");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("exceed backfill.max_records = 2 by 1"),
        "{err}"
    );
    assert!(
        err.contains("--max-records 3"),
        "says how to override: {err}"
    );
    assert_eq!(f.table().await, before);
    let plan = std::fs::read_to_string(f.out("limit").join("plan.jsonl")).unwrap();
    assert_eq!(plan.lines().count(), 3);
    f.db.drop_db().await;
}

#[tokio::test]
async fn overlapping_run_exits_2_and_writes_nothing() {
    let f = Fixture::new(Dialect::Sqlite, true).await;
    let before = f.table().await;
    let state = recon::state::StateStore::open(&format!(
        "sqlite://{}?mode=rwc",
        f.dir.path().join("state.db").display()
    ))
    .await
    .unwrap();
    let lock = state
        .acquire_lock("charges", std::time::Duration::from_secs(600))
        .await
        .unwrap();
    let o = f.run(&[], "second");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("already running"), "{err}");
    assert_eq!(f.table().await, before);
    assert!(!f.out("second").exists());
    lock.release().await.unwrap();
    let o = f.run(&[], "after");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    f.db.drop_db().await;
}

#[tokio::test]
async fn config_errors_exit_2_and_write_nothing() {
    let f = Fixture::new(Dialect::Sqlite, true).await;
    let before = f.table().await;
    let good = std::fs::read_to_string(f.config_path()).unwrap();
    let cases: Vec<(String, &str, Vec<&str>)> = vec![
        (
            good.replace("window = ", "windw = "),
            "did you mean `window`?",
            vec![],
        ),
        (
            good.replace(&f.db.url, "sqlite://${RECON_TEST_UNSET_DB}"),
            "RECON_TEST_UNSET_DB is not set",
            vec![],
        ),
        (
            good.clone(),
            "bad window `yesterdy`",
            vec!["--window", "yesterdy"],
        ),
        (
            good.replace(&f.db.url, "postgres://recon:hunter2@127.0.0.1:1/nowhere"),
            "cannot connect to postgres://recon:***@127.0.0.1:1/nowhere",
            vec![],
        ),
    ];
    for (i, (config, expected, args)) in cases.into_iter().enumerate() {
        std::fs::write(f.config_path(), config).unwrap();
        let out = format!("case{i}");
        let o = f.run(&args, &out);
        assert_eq!(o.status.code(), Some(2), "case {i}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(expected),
            "case {i}: expected `{expected}` in {err}"
        );
        assert!(!err.contains("hunter2"), "case {i} leaks a password: {err}");
        assert!(!f.out(&out).exists(), "case {i} wrote reports");
    }
    assert_eq!(f.table().await, before);
    f.db.drop_db().await;
}

#[tokio::test]
async fn dst_day_window_is_25_hours() {
    let f = Fixture::new(Dialect::Sqlite, true).await;
    let o = f.run(&["--window", "2026-11-01", "--dry-run"], "dst");
    assert_eq!(
        o.status.code(),
        Some(0),
        "nothing in that window: {}",
        text(&o)
    );
    let s = summary(&f.out("dst"));
    assert_eq!(s["window"]["start"], "2026-11-01T04:00:00Z");
    assert_eq!(s["window"]["end"], "2026-11-02T05:00:00Z");
    f.db.drop_db().await;
}

#[tokio::test]
async fn apply_exactly_a_reviewed_plan_rechecking_each_item() {
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let f = Fixture::new(dialect, true).await;
        let o = f.run(&["--dry-run"], "dry");
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let plan = f.out("dry").join("plan.jsonl");
        // Between review and apply, someone else writes one of the gaps.
        f.db.exec(&format!(
            "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) VALUES ('ch_0003', 1075, 'KWD', 'succeeded', {})",
            sql_time(dialect, DAY_START + 3600 + 3 * 1200)
        ))
        .await;
        let apply = |out: &str| {
            Command::cargo_bin("recon")
                .unwrap()
                .args(["apply", "--plan", plan.to_str().unwrap()])
                .args(["--config", f.config_path().to_str().unwrap()])
                .args(["--out", f.out(out).to_str().unwrap()])
                .output()
                .unwrap()
        };
        let o = apply("applied");
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let backfill = std::fs::read_to_string(f.out("applied").join("backfill.csv")).unwrap();
        assert!(backfill.contains("ch_0003,insert,skipped,"), "{backfill}");
        assert!(backfill.contains("ch_0010,insert,created,"), "{backfill}");
        assert!(backfill.contains("ch_0020,insert,created,"), "{backfill}");
        let table = f.table().await;
        for id in ["ch_0003", "ch_0010", "ch_0020"] {
            assert_eq!(
                table
                    .iter()
                    .filter(|r| r.starts_with(&format!("{id}|")))
                    .count(),
                1,
                "{dialect:?} {id}"
            );
        }
        // The same plan again changes nothing.
        let o = apply("again");
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let s = summary(&f.out("again"));
        assert_eq!(s["skipped"], 3, "{s}");
        assert_eq!(s["backfilled"], 0);
        assert_eq!(f.table().await, table);
        // `recon runs` lists the three runs (dry, apply, apply again).
        let o = Command::cargo_bin("recon")
            .unwrap()
            .args(["runs", "--config", f.config_path().to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let listing = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            listing
                .lines()
                .filter(|l| l.starts_with("charges-"))
                .count(),
            3,
            "{listing}"
        );
        f.db.drop_db().await;
    }
}

#[tokio::test]
async fn young_records_are_pending_not_gaps_and_never_backfilled() {
    let f = Fixture::new(Dialect::Sqlite, true).await;
    let now = jiff::Timestamp::now().as_second();
    // One charge a minute old, one an hour old; neither reached the target.
    std::fs::write(
        f.dir.path().join("charges.csv"),
        format!(
            "id,amount,currency,status,created\nch_young,100,usd,succeeded,{}\nch_old,200,usd,succeeded,{}\n",
            now - 60,
            now - 3600
        ),
    )
    .unwrap();
    let text_cfg = std::fs::read_to_string(f.config_path()).unwrap().replace(
        "window = \"2026-11-28\"",
        "window = \"last:2h\"\ngrace = \"15m\"",
    );
    std::fs::write(f.config_path(), text_cfg).unwrap();
    let before = f.table().await;
    let o = f.run(&[], "grace");
    // The old gap is backfilled and pending is in flight: nothing left open.
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&f.out("grace"));
    assert_eq!(s["pending"], 1, "{s}");
    assert_eq!(s["gaps"], 1, "{s}");
    assert_eq!(ids(&f.out("grace"), "pending.csv"), ["ch_young"]);
    assert_eq!(ids(&f.out("grace"), "gaps.csv"), ["ch_old"]);
    let after = f.table().await;
    assert_eq!(
        after.len(),
        before.len() + 1,
        "only the old gap is backfilled"
    );
    assert!(after.iter().any(|r| r.starts_with("ch_old|")));
    assert!(!after.iter().any(|r| r.starts_with("ch_young|")));
    f.db.drop_db().await;
}
