//! Window reads that cannot miss, through the binary: a SQLite time column
//! declared TEXT holding RFC 3339 values is read by its window, a column
//! holding no timestamp at all is refused (exit 2), and a side whose window
//! read is empty while key lookups find the records is a warning in the
//! summary, never a silent clean, and a key column that compares
//! case-insensitively never lets a lookup match another case of a key.

mod common;

use common::{summary, text};

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;

/// 2026-01-02T01:01:01Z in Unix seconds.
const T1: i64 = 1_767_315_661;

fn config(dir: &Path, target: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[defaults]
timezone = "UTC"
state = "sqlite://{state}?mode=rwc"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount"]
window = "2026-01-02"

{source}
{target}

[jobs.charges.backfill]
mode = "off"
"#,
        state = dir.join("state.db").display(),
        source = common::file_side("charges", "source", &dir.join("source.csv")),
    );
    let path = dir.join("recon.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn sql_target(url: &str) -> String {
    format!(
        "[jobs.charges.target]\ntype = \"sql\"\nurl = \"{url}\"\ntable = \"payments\"\nkey = \"id\"\ncolumns = {{ amount = \"amount_cents\", created = \"created_at\" }}"
    )
}

/// The target table of a job whose target is `target.csv` in `dir`.
fn file_target(dir: &Path) -> String {
    format!(
        "[jobs.charges.target]\ntype = \"file\"\npath = \"{}\"\nkey = \"id\"",
        dir.join("target.csv").display()
    )
}

fn run(config: &Path, out: &Path) -> Output {
    Command::cargo_bin("recon")
        .unwrap()
        .args(["run", "--config"])
        .arg(config)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// `source.csv` holding `rows` (after its header) in a new folder, the job
/// against table `payments` at `url`, run into `out`: the folder, the
/// report folder and what the run printed.
fn run_against(url: &str, rows: &str) -> (tempfile::TempDir, std::path::PathBuf, Output) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("source.csv"),
        format!("id,amount,currency,created\n{rows}"),
    )
    .unwrap();
    let cfg = config(dir.path(), &sql_target(url));
    let out = dir.path().join("out");
    let o = run(&cfg, &out);
    (dir, out, o)
}

fn ids(dir: &Path, file: &str) -> Vec<String> {
    let mut r = csv::Reader::from_path(dir.join(file)).unwrap();
    r.records().map(|x| x.unwrap()[0].to_string()).collect()
}

#[tokio::test]
async fn sqlite_text_rfc3339_time_column_is_read_by_its_window() {
    let db = TestDb::create(Dialect::Sqlite).await;
    db.exec("CREATE TABLE payments (id TEXT PRIMARY KEY, amount_cents INTEGER, currency TEXT, created_at TEXT)")
        .await;
    db.exec(
        "INSERT INTO payments VALUES \
         ('ch_1', 1000, 'usd', '2026-01-02T01:01:01Z'), \
         ('ch_ORPHAN', 500, 'usd', '2026-01-02T07:30:00Z'), \
         ('ch_DAY_BEFORE', 700, 'usd', '2026-01-01T23:59:59Z')",
    )
    .await;
    let (_dir, out, o) = run_against(&db.url, &format!("ch_1,1000,usd,{T1}\n"));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&out);
    assert_eq!(s["target_records"], 2, "{s}");
    assert_eq!(s["matched"], 1, "{s}");
    assert_eq!(s["orphans"], 1, "{s}");
    assert_eq!(ids(&out, "orphans.csv"), ["ch_ORPHAN"]);
    assert_eq!(s["notes"].as_array().unwrap().len(), 0, "{s}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("source 1 records, target 2 records"),
        "{}",
        text(&o)
    );
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_time_column_without_any_timestamp_is_refused() {
    let db = TestDb::create(Dialect::Sqlite).await;
    db.exec("CREATE TABLE payments (id TEXT PRIMARY KEY, amount_cents INTEGER, currency TEXT, created_at TEXT)")
        .await;
    db.exec("INSERT INTO payments VALUES ('ch_1', 1000, 'usd', 'last tuesday')")
        .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("source.csv"),
        format!("id,amount,currency,created\nch_1,1000,usd,{T1}\n"),
    )
    .unwrap();
    let cfg = config(dir.path(), &sql_target(&db.url));
    let o = run(&cfg, &dir.path().join("out"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("created_at") && err.contains("last tuesday") && err.contains("RFC 3339"),
        "{}",
        text(&o)
    );
    db.drop_db().await;
}

#[tokio::test]
async fn empty_window_read_while_lookups_find_the_records_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("source.csv"),
        format!("id,amount,currency,created\nch_1,1000,usd,{T1}\nch_2,2000,usd,{T1}\n"),
    )
    .unwrap();
    // The target holds both records, stamped a day earlier: its window
    // read is empty, and only the key lookups find them.
    let earlier = T1 - 86_400;
    std::fs::write(
        dir.path().join("target.csv"),
        format!("id,amount,currency,created\nch_1,1000,usd,{earlier}\nch_2,2000,usd,{earlier}\n"),
    )
    .unwrap();
    let cfg = config(dir.path(), &file_target(dir.path()));
    let out = dir.path().join("out");
    let o = run(&cfg, &out);
    let s = summary(&out);
    assert_eq!(s["target_rows"], 0, "{s}");
    assert_eq!(s["confirmed_by_lookup"], 2, "{s}");
    let notes: Vec<String> = s["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("target's window read returned 0 records")
                && n.contains("2 of the source's records")),
        "{notes:?}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("warning: the target's window read returned 0"),
        "{}",
        text(&o)
    );
}

/// A key column that compares case-insensitively (SQLite NOCASE,
/// PostgreSQL citext, MariaDB's default `_ci` collation) on the lookup
/// path: a gap at the window's edge whose key only matches another case of
/// it in the target stays a gap (the lookup's answer is taken by its exact
/// key), while an exact key found by lookup is dismissed.
async fn case_insensitive_key_on_the_lookup_path(dialect: Dialect) {
    let db = TestDb::create(dialect).await;
    let (ddl, day_before) = match dialect {
        Dialect::Sqlite => (
            "CREATE TABLE payments (id TEXT COLLATE NOCASE PRIMARY KEY, amount_cents INTEGER, \
             currency TEXT, created_at TEXT)",
            "2026-01-01T01:01:01Z",
        ),
        Dialect::Postgres => (
            "CREATE TABLE payments (id citext PRIMARY KEY, amount_cents BIGINT, \
             currency TEXT, created_at TIMESTAMPTZ)",
            "2026-01-01 01:01:01+00",
        ),
        _ => (
            "CREATE TABLE payments (id VARCHAR(64) CHARACTER SET utf8mb4 \
             COLLATE utf8mb4_general_ci PRIMARY KEY, amount_cents BIGINT, \
             currency VARCHAR(3), created_at DATETIME)",
            "2026-01-01 01:01:01",
        ),
    };
    if dialect == Dialect::Postgres {
        db.exec("CREATE EXTENSION IF NOT EXISTS citext").await;
    }
    db.exec(ddl).await;
    // Both stamped the day before the window: only lookups find them.
    db.exec(&format!(
        "INSERT INTO payments VALUES ('ch_SAME', 1000, 'usd', '{day_before}'), \
         ('ch_UPPER', 2000, 'usd', '{day_before}')"
    ))
    .await;
    let (_dir, out, o) = run_against(
        &db.url,
        &format!("ch_SAME,1000,usd,{T1}\nch_upper,2000,usd,{T1}\n"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&out);
    assert_eq!(s["target_rows"], 0, "{s}");
    assert_eq!(s["confirmed_by_lookup"], 1, "{s}");
    assert_eq!(s["matched"], 1, "{s}");
    assert_eq!(s["gaps"], 1, "{s}");
    assert_eq!(s["mismatches"], 0, "{s}");
    assert_eq!(ids(&out, "gaps.csv"), ["ch_upper"]);
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_nocase_key_on_the_lookup_path() {
    case_insensitive_key_on_the_lookup_path(Dialect::Sqlite).await;
}

#[tokio::test]
async fn postgres_citext_key_on_the_lookup_path() {
    case_insensitive_key_on_the_lookup_path(Dialect::Postgres).await;
}

#[tokio::test]
async fn mariadb_ci_collation_key_on_the_lookup_path() {
    case_insensitive_key_on_the_lookup_path(Dialect::MySql).await;
}

/// Export files on both sides, read once: the pass that feeds the diff
/// remembers which keys each file holds outside the window, so edge
/// lookups still find an orphan's source row stamped the day before, a
/// gap's target row stamped the day after and a target row without a time,
/// while a gap no row of the target holds stays a gap.
#[tokio::test]
async fn file_edges_are_confirmed_from_the_keys_the_read_saw_outside_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = (T1 - 86_400, T1 + 86_400);
    std::fs::write(
        dir.path().join("source.csv"),
        format!(
            "id,amount,currency,created\n\
             ch_in,1000,usd,{T1}\n\
             ch_late,2000,usd,{T1}\n\
             ch_blank,2500,usd,{T1}\n\
             ch_gap,3000,usd,{T1}\n\
             ch_early,4000,usd,{before}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("target.csv"),
        format!(
            "id,amount,currency,created\n\
             ch_in,1000,usd,{T1}\n\
             ch_late,2000,usd,{after}\n\
             ch_blank,2500,usd,\n\
             ch_early,4000,usd,{T1}\n\
             ch_orphan,5000,usd,{T1}\n"
        ),
    )
    .unwrap();
    let cfg = config(dir.path(), &file_target(dir.path()));
    let out = dir.path().join("out");
    let o = run(&cfg, &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&out);
    // ch_late and ch_blank found in the target, ch_early in the source.
    assert_eq!(s["confirmed_by_lookup"], 3, "{s}");
    assert_eq!(s["gaps"], 1, "{s}");
    assert_eq!(s["orphans"], 1, "{s}");
    let gaps = std::fs::read_to_string(out.join("gaps.csv")).unwrap();
    assert!(
        gaps.contains("ch_gap") && !gaps.contains("ch_late"),
        "{gaps}"
    );
    let orphans = std::fs::read_to_string(out.join("orphans.csv")).unwrap();
    assert!(
        orphans.contains("ch_orphan") && !orphans.contains("ch_early"),
        "{orphans}"
    );
    // The target row without a time is listed, from the same pass.
    let unplaced = std::fs::read_to_string(out.join("unplaced.csv")).unwrap();
    assert!(
        unplaced.contains("target,ch_blank,created,,empty"),
        "{unplaced}"
    );
}
