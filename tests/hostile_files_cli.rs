//! Hostile export files through the binary: a file without line ends, one
//! huge row, a JSON line past the limit, a header of a million columns.
//! Each stops with exit 2 and a short message naming the file, the line and
//! the setting, without taking the file's size in memory (the peak RSS of
//! the 2 GiB cases is measured by `scripts/bench-hostile`, not here).

mod common;

use common::text;

use std::path::Path;
use std::process::Output;

fn recon(args: &[&str]) -> Output {
    common::recon_output(args, &[])
}

/// A `recon run` job reading `source` (with `settings` in its source
/// table) against a small valid CSV target.
fn job(dir: &Path, source: &Path, settings: &str) -> std::path::PathBuf {
    let state = format!("sqlite://{}", dir.join("state.db").display());
    job_with_state(dir, source, settings, &state)
}

fn job_with_state(dir: &Path, source: &Path, settings: &str, state: &str) -> std::path::PathBuf {
    let target = dir.join("target.csv");
    std::fs::write(&target, "id,amount,currency\nch_1,100,usd\n").unwrap();
    let config = dir.join("recon.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[defaults]
reports = "{reports}"
state = "{state}"

[jobs.charges]
fields = {{ amount = "money", currency = "currency" }}
compare = ["amount", "currency"]
window = "last:24h"

{source}{settings}

{target}
[jobs.charges.backfill]
mode = "off"
"#,
            reports = dir.join("reports").display(),
            source = common::file_side("charges", "source", source),
            target = common::file_side("charges", "target", &target),
        ),
    )
    .unwrap();
    config
}

fn assert_refused(o: &Output, file: &Path, line: &str, says: &[&str]) {
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&file.display().to_string()), "{}", text(o));
    assert!(err.contains(line), "{}", text(o));
    for s in says {
        assert!(err.contains(s), "`{s}` missing: {}", text(o));
    }
    assert!(
        err.len() < 2048,
        "stderr is {} bytes: {}",
        err.len(),
        &err[..300]
    );
}

#[test]
fn a_csv_without_line_ends_stops_at_the_configured_record_limit() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("charges.csv");
    let mut body = b"id,amount,currency\n".to_vec();
    body.extend(std::iter::repeat_n(b'x', 8 << 20));
    std::fs::write(&source, body).unwrap();
    let config = job(dir.path(), &source, "max_record_bytes = 1048576");
    let o = recon(&["run", "--config", config.to_str().unwrap()]);
    assert_refused(&o, &source, "line 2", &["1 MiB", "max_record_bytes"]);
    assert!(
        !dir.path().join("reports/charges").exists()
            || std::fs::read_dir(dir.path().join("reports/charges"))
                .unwrap()
                .next()
                .is_none()
    );
    // The lock was released: the same job with a valid source runs.
    std::fs::write(&source, "id,amount,currency\nch_1,100,usd\n").unwrap();
    let o = recon(&["run", "--config", config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn one_huge_data_row_stops_at_the_default_limit_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("charges.csv");
    let mut body = b"id,amount,currency\nch_1,100,usd\nch_2,".to_vec();
    body.extend(std::iter::repeat_n(b'9', (64 << 20) + 10));
    body.extend(b",usd\n");
    std::fs::write(&source, body).unwrap();
    let target = dir.path().join("t.csv");
    std::fs::write(&target, "id,amount,currency\nch_1,100,usd\n").unwrap();
    let out = dir.path().join("out");
    let o = recon(&[
        "diff",
        source.to_str().unwrap(),
        target.to_str().unwrap(),
        "--key",
        "id",
        "--compare",
        "amount,currency",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_refused(&o, &source, "line 3", &["64 MiB", "max_record_bytes"]);
    assert!(!out.exists());
}

#[test]
fn a_json_line_past_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("charges.jsonl");
    let mut body = br#"{"id":"ch_1","amount":100,"currency":"usd"}"#.to_vec();
    body.extend(b"\n{\"id\":\"ch_2\",\"amount\":\"");
    body.extend(std::iter::repeat_n(b'1', 3 << 20));
    std::fs::write(&source, body).unwrap();
    let config = job(dir.path(), &source, "max_record_bytes = 1048576");
    let o = recon(&["run", "--config", config.to_str().unwrap()]);
    assert_refused(&o, &source, "line 2", &["max_record_bytes"]);
}

#[test]
fn a_million_column_header_without_the_key_gives_a_short_message() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("wide.csv");
    let header: Vec<String> = (0..1_000_000).map(|i| format!("column_{i}")).collect();
    std::fs::write(&source, header.join(",") + "\n").unwrap();
    let config = job(dir.path(), &source, "");
    let o = recon(&["run", "--config", config.to_str().unwrap()]);
    assert_refused(
        &o,
        &source,
        "line 1",
        &[
            "key column `id` not found",
            "column_0, column_1",
            "and 999980 more",
        ],
    );
}

#[test]
fn a_row_with_far_more_fields_than_the_header_is_refused_as_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("charges.csv");
    let row = ",".repeat(4 << 20);
    std::fs::write(
        &source,
        format!("id,amount,currency\nch_1,100,usd\nch_2{row}\n"),
    )
    .unwrap();
    let config = job(dir.path(), &source, "");
    let o = recon(&["run", "--config", config.to_str().unwrap()]);
    assert_refused(&o, &source, "line 3", &["more fields than the header's 3"]);
}

/// A NUL in an external ID is refused where it is read, naming the side,
/// the file and the line, the same way on SQLite and PostgreSQL state (it
/// used to pass on SQLite and fail every run on PostgreSQL with no ID).
#[tokio::test]
async fn a_nul_in_an_id_is_refused_alike_on_both_state_backends() {
    let pg = recon_sql::testing::TestDb::create(recon_sql::Dialect::Postgres).await;
    let mut messages = Vec::new();
    for state in [None, Some(pg.url.clone())] {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("charges.csv");
        std::fs::write(
            &source,
            "id,amount,currency\nch_1,100,usd\nch_\u{0}2,200,usd\n",
        )
        .unwrap();
        let state =
            state.unwrap_or_else(|| format!("sqlite://{}", dir.path().join("state.db").display()));
        let config = job_with_state(dir.path(), &source, "", &state);
        let o = recon(&["run", "--config", config.to_str().unwrap()]);
        assert_refused(
            &o,
            &source,
            "line 3",
            &["source", "NUL", "ch_\\02", "tr -d"],
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        messages.push(err.replace(&source.display().to_string(), "FILE"));
    }
    assert_eq!(messages[0], messages[1], "same input, same message");
    pg.drop_db().await;
}
