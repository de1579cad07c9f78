//! Duplicates first-class, through the binary, for sides whose rows have
//! no ID of their own (files, tables): every copy of a duplicated external
//! ID listed in duplicate_copies.csv (copy 1 kept, the others to review,
//! `native_id` empty, in the order the side returned them), and the money
//! of the copies beyond the first counted exactly in summary.csv,
//! summary.json and report.html. `recon diff` writes the same file, by
//! default. A file's copies are kept in its one read; a target copy the
//! engine could not keep (it matched within a tolerance before its ID
//! turned out duplicated) is found by reading the target again.

mod common;

use common::{summary, text};

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;
use serde_json::json;

/// 2026-01-02T01:01:01Z in Unix seconds.
const T1: i64 = 1_767_315_661;

/// The source: ch_1 once, ch_k twice (KWD 1.500 each), ch_t once.
fn source_csv() -> String {
    format!(
        "id,amount,currency,created\n\
         ch_1,1000,usd,{T1}\n\
         ch_k,1500,kwd,{T1}\n\
         ch_t,3000,usd,{T1}\n\
         ch_k,1500,kwd,{T1}\n"
    )
}

/// The target's rows: ch_t booked three times (30.00, 12.50, 7.25 USD, in
/// this order), the others once.
const TARGET_ROWS: [(&str, i64, &str); 5] = [
    ("ch_1", 1000, "usd"),
    ("ch_t", 3000, "usd"),
    ("ch_k", 1500, "kwd"),
    ("ch_t", 1250, "usd"),
    ("ch_t", 725, "usd"),
];

/// The target's rows as CSV (`TARGET_ROWS`), each amount through `amount`
/// (to plant a change), then `extra` lines.
fn target_csv(amount: impl Fn(&str, i64) -> i64, extra: &str) -> String {
    let mut target = String::from("id,amount,currency,created\n");
    for (id, a, cur) in TARGET_ROWS {
        target.push_str(&format!("{id},{},{cur},{T1}\n", amount(id, a)));
    }
    target.push_str(extra);
    target
}

/// `recon diff` of the source and `target` (written into `dir`), amount
/// and currency compared, with `flags`; its output and report folder.
fn diff(dir: &Path, target: &str, flags: &[&str]) -> (Output, std::path::PathBuf) {
    std::fs::write(dir.join("source.csv"), source_csv()).unwrap();
    std::fs::write(dir.join("target.csv"), target).unwrap();
    let out = dir.join("out");
    let o = Command::cargo_bin("recon")
        .unwrap()
        .current_dir(dir)
        .args(["diff", "source.csv", "target.csv", "--key", "id"])
        .args(["--compare", "amount,currency"])
        .args(flags)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    (o, out)
}

fn config(dir: &Path, target: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("source.csv"), source_csv()).unwrap();
    let text = format!(
        r#"
[defaults]
timezone = "UTC"
state = "sqlite://{state}?mode=rwc"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount"]
time_field = "created"
window = "2026-01-02"

{source}
{target}
[jobs.charges.backfill]
mode = "off"
"#,
        source = common::file_side("charges", "source", &dir.join("source.csv")),
        state = dir.join("state.db").display(),
    );
    let path = dir.join("recon.toml");
    std::fs::write(&path, text).unwrap();
    path
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

/// A CSV report's header and rows.
fn read(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header = r.headers().unwrap().iter().map(str::to_string).collect();
    let rows = r
        .records()
        .map(|x| x.unwrap().iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

/// duplicate_copies.csv's ID, side and copy of each row, with column `col`.
fn listed(out: &Path, col: usize) -> Vec<[String; 4]> {
    let (_, rows) = read(&out.join("duplicate_copies.csv"));
    rows.into_iter()
        .map(|r| [r[0].clone(), r[1].clone(), r[2].clone(), r[col].clone()])
        .collect()
}

/// summary.csv's row of `currency`, by column name.
fn summary_row(out: &Path, currency: &str) -> std::collections::HashMap<String, String> {
    let (h, rows) = read(&out.join("summary.csv"));
    let row = rows
        .into_iter()
        .find(|r| r[0] == currency)
        .unwrap_or_else(|| panic!("no {currency} row in summary.csv"));
    h.into_iter().zip(row).collect()
}

/// What every run of these sides reports besides the target's order.
fn assert_counted_twice(
    out: &Path,
    target_copies: u64,
    target_twice_usd: &str,
    target_twice_minor: &str,
) {
    let s = summary(out);
    assert_eq!(s["duplicates"], 2, "{s}");
    assert_eq!(
        s["counted_twice"],
        json!({
            "source": [{"currency": "KWD", "records": 1, "total": "1.500", "total_minor": "1500"}],
            "target": [{"currency": "USD", "records": target_copies, "total": target_twice_usd, "total_minor": target_twice_minor}],
        }),
        "{s}"
    );
    let usd = summary_row(out, "USD");
    assert_eq!(usd["source_counted_twice"], "0.00", "{usd:?}");
    assert_eq!(usd["target_counted_twice"], target_twice_usd, "{usd:?}");
    let kwd = summary_row(out, "KWD");
    assert_eq!(kwd["source_counted_twice"], "1.500", "{kwd:?}");
    assert_eq!(kwd["target_counted_twice"], "0.000", "{kwd:?}");
    // The existing columns keep their places.
    let (h, _) = read(&out.join("summary.csv"));
    assert_eq!(
        h,
        [
            "currency",
            "source_records",
            "source_total",
            "target_records",
            "target_total",
            "records_delta",
            "total_delta",
            "source_counted_twice",
            "target_counted_twice",
        ]
    );
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains(&format!(
            "data-counted-twice=\"target\">{target_twice_usd} USD<"
        )),
        "{page}"
    );
    assert!(
        page.contains("data-counted-twice=\"source\">1.500 KWD<"),
        "{page}"
    );
    assert!(page.contains("Duplicate copies to review"), "{page}");
}

#[tokio::test]
async fn a_file_target_lists_every_copy_in_line_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("target.csv"), target_csv(|_, a| a, "")).unwrap();
    let config = config(
        dir.path(),
        &common::file_side("charges", "target", &dir.path().join("target.csv")),
    );
    let out = dir.path().join("out");
    let o = run(&config, &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let (header, rows) = read(&out.join("duplicate_copies.csv"));
    assert_eq!(
        header,
        [
            "external_id",
            "side",
            "copy",
            "native_id",
            "amount",
            "created",
            "currency"
        ]
    );
    let created = "2026-01-02T01:01:01Z";
    assert_eq!(
        rows,
        [
            ["ch_k", "source", "1", "", "1.500", created, "KWD"],
            ["ch_k", "source", "2", "", "1.500", created, "KWD"],
            ["ch_t", "target", "1", "", "30.00", created, "USD"],
            ["ch_t", "target", "2", "", "12.50", created, "USD"],
            ["ch_t", "target", "3", "", "7.25", created, "USD"],
        ]
    );
    // 12.50 + 7.25: every copy but the first.
    assert_counted_twice(&out, 2, "19.75", "1975");
}

#[tokio::test]
async fn a_sql_target_without_a_unique_key_lists_every_copy() {
    let db = TestDb::create(Dialect::Sqlite).await;
    db.exec(
        "CREATE TABLE payments (id TEXT, amount_cents INTEGER, currency TEXT, created_at INTEGER)",
    )
    .await;
    let mut values: Vec<String> = TARGET_ROWS
        .iter()
        .map(|(id, amount, cur)| format!("('{id}', {amount}, '{cur}', {T1})"))
        .collect();
    // A fourth copy stored by a sloppy import with a trailing space: the
    // read trims it into `ch_t`, and so does the lookup of the copies.
    values.push(format!("('ch_t ', 100, 'usd', {T1})"));
    db.exec(&format!(
        "INSERT INTO payments VALUES {}",
        values.join(", ")
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &common::sql_target("charges", &db.url, "payments", "id"),
    );
    let out = dir.path().join("out");
    let o = run(&config, &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let (header, rows) = read(&out.join("duplicate_copies.csv"));
    assert_eq!(header[..4], ["external_id", "side", "copy", "native_id"]);
    let target: Vec<&Vec<String>> = rows.iter().filter(|r| r[1] == "target").collect();
    let copies: Vec<(&str, &str, &str)> = target
        .iter()
        .map(|r| (r[0].as_str(), r[2].as_str(), r[3].as_str()))
        .collect();
    assert_eq!(
        copies,
        [
            ("ch_t", "1", ""),
            ("ch_t", "2", ""),
            ("ch_t", "3", ""),
            ("ch_t", "4", "")
        ]
    );
    let mut amounts: Vec<&str> = target.iter().map(|r| r[4].as_str()).collect();
    amounts.sort_unstable();
    assert_eq!(amounts, ["1.00", "12.50", "30.00", "7.25"]);
    // The table returns its rows in an order of its own: the money counted
    // twice is every copy but the one it returned first.
    let minor = |s: &str| -> i64 { s.replace('.', "").parse().unwrap() };
    let twice: i64 = target[1..].iter().map(|r| minor(&r[4])).sum();
    assert_eq!(twice, 3000 + 1250 + 725 + 100 - minor(&target[0][4]));
    let text = format!("{}.{:02}", twice / 100, twice % 100);
    assert_counted_twice(&out, 3, &text, &twice.to_string());
    db.drop_db().await;
}

#[test]
fn recon_diff_lists_the_copies_of_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let (o, out) = diff(dir.path(), &target_csv(|_, a| a, ""), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        listed(&out, 3),
        [
            ["ch_k", "source", "1", ""],
            ["ch_k", "source", "2", ""],
            ["ch_t", "target", "1", ""],
            ["ch_t", "target", "2", ""],
            ["ch_t", "target", "3", ""],
        ]
    );
    let s = summary(&out);
    assert_eq!(
        s["counted_twice"]["target"],
        json!([{"currency": "USD", "records": 2, "total": "19.75", "total_minor": "1975"}]),
        "{s}"
    );
    assert_eq!(summary_row(&out, "USD")["target_counted_twice"], "19.75");
}

#[test]
fn a_first_copy_that_matched_within_a_tolerance_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    // ch_t's first target copy is 30.01 against the source's 30.00: a
    // match within the tolerance, not the same record, so the engine has
    // not kept it when the second copy shows.
    let planted = |id: &str, a: i64| if (id, a) == ("ch_t", 3000) { 3001 } else { a };
    let (o, out) = diff(
        dir.path(),
        &target_csv(planted, ""),
        &["--tolerance", "amount=1"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        listed(&out, 4),
        [
            ["ch_k", "source", "1", "1.500"],
            ["ch_k", "source", "2", "1.500"],
            ["ch_t", "target", "1", "30.01"],
            ["ch_t", "target", "2", "12.50"],
            ["ch_t", "target", "3", "7.25"],
        ]
    );
    assert_eq!(summary_row(&out, "USD")["target_counted_twice"], "19.75");
}

#[tokio::test]
async fn a_file_side_lists_the_copies_its_window_holds() {
    // A third copy of ch_t dated the day before the window: the read never
    // diffs it, so it is neither counted nor listed.
    let dir = tempfile::tempdir().unwrap();
    let earlier = format!("ch_t,999,usd,{}\n", T1 - 86_400);
    std::fs::write(
        dir.path().join("target.csv"),
        target_csv(|_, a| a, &earlier),
    )
    .unwrap();
    let config = config(
        dir.path(),
        &common::file_side("charges", "target", &dir.path().join("target.csv")),
    );
    let out = dir.path().join("out");
    let o = run(&config, &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let (_, rows) = read(&out.join("duplicate_copies.csv"));
    let amounts: Vec<&str> = rows
        .iter()
        .filter(|r| r[1] == "target")
        .map(|r| r[4].as_str())
        .collect();
    assert_eq!(amounts, ["30.00", "12.50", "7.25"]);
    let s = summary(&out);
    assert_eq!(s["target_rows"], 5, "{s}");
    assert_counted_twice(&out, 2, "19.75", "1975");
}
