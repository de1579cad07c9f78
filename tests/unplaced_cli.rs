//! No silent drops, through the binary: a record whose time field is empty
//! (CSV) or NULL (SQL) belongs to no window; it is listed in unplaced.csv
//! and counted in summary.json and the terminal summary (exit 1), or stops
//! the run with exit 2 under `unplaced = "fail"`.

mod common;

use common::{summary, text};

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;

/// 2026-01-02T01:01:01Z in Unix seconds.
const T1: i64 = 1_767_315_661;

struct Case {
    db: TestDb,
    dir: tempfile::TempDir,
}

impl Case {
    /// A source CSV and a SQLite target table, both holding ch_1 in the
    /// window, plus the given extra rows.
    async fn new(source_extra: &str, target_extra: &str, policy: &str) -> Case {
        let db = TestDb::create(Dialect::Sqlite).await;
        db.exec("CREATE TABLE payments (id TEXT PRIMARY KEY, amount_cents INTEGER, currency TEXT, created_at INTEGER)")
            .await;
        db.exec(&format!(
            "INSERT INTO payments VALUES ('ch_1', 1000, 'usd', {T1}){target_extra}"
        ))
        .await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("source.csv"),
            format!("id,amount,currency,created\nch_1,1000,usd,{T1}\n{source_extra}"),
        )
        .unwrap();
        let text = format!(
            r#"
[defaults]
timezone = "UTC"
state = "sqlite://{state}?mode=rwc"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount"]
window = "2026-01-02"
{policy}

{sides}
[jobs.charges.backfill]
mode = "off"
"#,
            sides = common::file_to_sql(&dir.path().join("source.csv"), &db.url, "id"),
            state = dir.path().join("state.db").display(),
        );
        std::fs::write(dir.path().join("recon.toml"), text).unwrap();
        Case { db, dir }
    }

    fn run(&self) -> Output {
        Command::cargo_bin("recon")
            .unwrap()
            .args(["run", "--config"])
            .arg(self.dir.path().join("recon.toml"))
            .arg("--out")
            .arg(self.out())
            .output()
            .unwrap()
    }

    fn out(&self) -> std::path::PathBuf {
        self.dir.path().join("out")
    }
}

fn unplaced_rows(dir: &Path) -> Vec<Vec<String>> {
    let mut r = csv::Reader::from_path(dir.join("unplaced.csv")).unwrap();
    assert_eq!(
        r.headers().unwrap().iter().collect::<Vec<_>>(),
        ["side", "external_id", "field", "value", "reason"]
    );
    r.records()
        .map(|x| x.unwrap().iter().map(str::to_string).collect())
        .collect()
}

#[tokio::test]
async fn csv_source_row_with_an_empty_time_is_listed() {
    let case = Case::new("ch_2,2000,usd,\n", "", "").await;
    let o = case.run();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&case.out());
    assert_eq!(s["unplaced"], 1, "{s}");
    assert_eq!(s["matched"], 1, "{s}");
    assert_eq!(s["gaps"], 0, "{s}");
    assert_eq!(
        unplaced_rows(&case.out()),
        [["source", "ch_2", "created", "", "empty"]]
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("unplaced    1"),
        "{}",
        text(&o)
    );
    case.db.drop_db().await;
}

#[tokio::test]
async fn sqlite_target_row_with_a_null_time_is_listed() {
    let case = Case::new("", ", ('ch_3', 300, 'usd', NULL)", "").await;
    let o = case.run();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&case.out());
    assert_eq!(s["unplaced"], 1, "{s}");
    assert_eq!(s["orphans"], 0, "{s}");
    assert_eq!(s["target_records"], 1, "{s}");
    assert_eq!(
        unplaced_rows(&case.out()),
        [["target", "ch_3", "created_at", "", "null"]]
    );
    case.db.drop_db().await;
}

#[tokio::test]
async fn a_clean_run_has_an_empty_unplaced_list() {
    let case = Case::new("", "", "").await;
    let o = case.run();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&case.out())["unplaced"], 0);
    assert!(unplaced_rows(&case.out()).is_empty());
    case.db.drop_db().await;
}

#[tokio::test]
async fn fail_setting_stops_the_run_with_exit_2() {
    let case = Case::new(
        "ch_2,2000,usd,\n",
        ", ('ch_3', 300, 'usd', NULL)",
        "unplaced = \"fail\"",
    )
    .await;
    let o = case.run();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("2 record(s) have no usable time") && err.contains("ch_2"),
        "{}",
        text(&o)
    );
    assert!(!case.out().join("summary.json").exists());
    case.db.drop_db().await;
}
