//! Issue 11, numbers you can trust, through `recon diff`: JSON numbers are
//! read from their text (never through a float), IDs keep their text,
//! ambiguous input (a repeated CSV column or JSON field) is refused, and
//! unreadable input is an error naming the file and line.

mod common;

use common::{summary, text as show};

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value as Json;

fn recon(cwd: &Path, args: &[&str]) -> Output {
    assert_cmd::Command::new(env!("CARGO_BIN_EXE_recon"))
        .env_remove("RECON_LOG")
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("run recon")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn count(s: &Json, k: &str) -> u64 {
    s[k].as_u64()
        .unwrap_or_else(|| panic!("summary.json `{k}` is not an integer: {s}"))
}

fn totals(s: &Json, side: &str) -> BTreeMap<String, String> {
    s["totals"][side]
        .as_array()
        .unwrap_or_else(|| panic!("no totals.{side}: {s}"))
        .iter()
        .map(|t| {
            (
                t["currency"].as_str().unwrap_or("").to_string(),
                t["total"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// `recon diff source target` keyed by `id`, comparing amount and currency
/// in major units on both sides.
fn diff(dir: &Path, source: &str, target: &str) -> Output {
    recon(
        dir,
        &[
            "diff",
            source,
            target,
            "--key",
            "id",
            "--compare",
            "amount,currency",
            "--source-amount-format",
            "major",
            "--target-amount-format",
            "major",
            "--out",
            "out",
        ],
    )
}

/// `source.jsonl` and `target.csv` with these contents in a new folder,
/// and [`diff`] of the two.
fn diff_jsonl(source: impl AsRef<[u8]>, target: impl AsRef<[u8]>) -> (tempfile::TempDir, Output) {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("source.jsonl"), source).unwrap();
    fs::write(tmp.path().join("target.csv"), target).unwrap();
    let o = diff(tmp.path(), "source.jsonl", "target.csv");
    (tmp, o)
}

/// Amounts f64 cannot hold are read exactly from the JSON text: no false
/// mismatch, and the totals keep every digit.
#[test]
fn jsonl_amounts_beyond_f64_match_exactly() {
    // (amount as JSON number in the source, the same in the target CSV).
    let cases = [
        ("1234567890123456.7", "EUR"),
        ("90071992547409.93", "USD"),
        ("0.07", "GBP"),
    ];
    let mut source = String::new();
    let mut target = String::from("id,amount,currency\n");
    for (i, (amount, cur)) in cases.iter().enumerate() {
        source.push_str(&format!(
            "{{\"id\":\"r{i}\",\"amount\":{amount},\"currency\":\"{cur}\"}}\n"
        ));
        target.push_str(&format!("r{i},{amount},{cur}\n"));
    }
    let (tmp, o) = diff_jsonl(source, target);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let s = summary(&tmp.path().join("out"));
    assert_eq!(count(&s, "matched"), 3, "{s}");
    assert_eq!(count(&s, "mismatches"), 0, "{s}");
    let want: BTreeMap<String, String> = [
        ("EUR", "1234567890123456.70"),
        ("GBP", "0.07"),
        ("USD", "90071992547409.93"),
    ]
    .into_iter()
    .map(|(c, t)| (c.to_string(), t.to_string()))
    .collect();
    assert_eq!(totals(&s, "source"), want, "{s}");
    assert_eq!(totals(&s, "target"), want, "{s}");
}

/// 29.990000000000002 is not a USD amount: an error naming the file, the
/// line and the field, never a silent 29.99.
#[test]
fn jsonl_amount_finer_than_the_currency_exits_2_naming_file_line_and_field() {
    let (tmp, o) = diff_jsonl(
        "{\"id\":\"a\",\"amount\":29.99,\"currency\":\"USD\"}\n{\"id\":\"b\",\"amount\":29.990000000000002,\"currency\":\"USD\"}\n",
        "id,amount,currency\na,29.99,USD\nb,29.99,USD\n",
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = stderr(&o);
    assert!(
        err.contains("source.jsonl line 2")
            && err.contains("`amount`")
            && err.contains("29.990000000000002")
            && err.contains("more decimal places than USD allows (2)"),
        "{err}"
    );
    assert!(!tmp.path().join("out").exists(), "no reports on exit 2");
}

/// Two IDs above 2^64 differ in their last digit: they stay two IDs, not
/// one "duplicated" key.
#[test]
fn numeric_ids_above_2_pow_64_stay_distinct() {
    let ids = ["18446744073709551617", "18446744073709551618"];
    let source: String = ids
        .iter()
        .map(|id| format!("{{\"id\":{id},\"amount\":1.00,\"currency\":\"USD\"}}\n"))
        .collect();
    let target: String = std::iter::once("id,amount,currency\n".to_string())
        .chain(ids.iter().map(|id| format!("{id},1.00,USD\n")))
        .collect();
    let (tmp, o) = diff_jsonl(source, target);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let s = summary(&tmp.path().join("out"));
    assert_eq!(count(&s, "source_records"), 2, "{s}");
    assert_eq!(count(&s, "matched"), 2, "{s}");
    assert_eq!(count(&s, "duplicates"), 0, "{s}");
}

/// `3.0` and `4e0` as IDs are kept as written: they match the same text on
/// the other side, and a report shows them unchanged.
#[test]
fn numeric_ids_keep_their_text() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("source.jsonl"),
        "{\"id\":3.0,\"amount\":1,\"currency\":\"USD\"}\n{\"id\":4e0,\"amount\":2,\"currency\":\"USD\"}\n",
    )
    .unwrap();
    // The target has `3.0` as written, and `4` where the source says `4e0`.
    fs::write(
        tmp.path().join("target.csv"),
        "id,amount,currency\n3.0,1,USD\n4,2,USD\n",
    )
    .unwrap();
    let o = diff(tmp.path(), "source.jsonl", "target.csv");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let dir = tmp.path().join("out");
    let s = summary(&dir);
    assert_eq!(count(&s, "matched"), 1, "{s}");
    assert_eq!(count(&s, "gaps"), 1, "{s}");
    assert_eq!(count(&s, "orphans"), 1, "{s}");
    let gaps = fs::read_to_string(dir.join("gaps.csv")).unwrap();
    let orphans = fs::read_to_string(dir.join("orphans.csv")).unwrap();
    let first_cells = |t: &str| -> Vec<String> {
        t.lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(first_cells(&gaps), ["4e0"], "{gaps}");
    assert_eq!(first_cells(&orphans), ["4"], "{orphans}");
}

/// A header naming a column twice (after trimming) is ambiguous: exit 2
/// naming the file, line 1 and the column.
#[test]
fn csv_header_with_a_repeated_column_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("source.csv"),
        "id,amount,currency\na,1.00,USD\n",
    )
    .unwrap();
    for header in ["id,amount,amount,currency", "id,amount, amount ,currency"] {
        fs::write(
            tmp.path().join("target.csv"),
            format!("{header}\na,1.00,2.00,USD\n"),
        )
        .unwrap();
        let o = diff(tmp.path(), "source.csv", "target.csv");
        assert_eq!(o.status.code(), Some(2), "{header}: {}", show(&o));
        let err = stderr(&o);
        assert!(
            err.contains("target.csv line 1")
                && err.contains("column `amount` appears more than once in the header")
                && err.contains("columns 2 and 3"),
            "{header}: {err}"
        );
        assert!(!tmp.path().join("out").exists());
    }
}

/// An object naming a field twice is ambiguous: exit 2 naming the file,
/// the line and the field.
#[test]
fn jsonl_object_with_a_repeated_field_exits_2() {
    let (_tmp, o) = diff_jsonl(
        "{\"id\":\"a\",\"amount\":1.00,\"currency\":\"USD\"}\n{\"id\":\"b\",\"amount\":1.00,\"currency\":\"USD\",\"amount\":2.00}\n",
        "id,amount,currency\na,1.00,USD\nb,2.00,USD\n",
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = stderr(&o);
    assert!(
        err.contains("source.jsonl line 2")
            && err.contains("field `amount` appears more than once"),
        "{err}"
    );
}

/// Bytes that are not UTF-8 in a JSON Lines file: exit 2 naming the line.
#[test]
fn jsonl_invalid_utf8_exits_2_naming_the_line() {
    let (_tmp, o) = diff_jsonl(
        b"{\"id\":\"a\",\"amount\":1.00,\"currency\":\"USD\"}\n{\"id\":\"b\xff\",\"amount\":1.00,\"currency\":\"USD\"}\n",
        "id,amount,currency\na,1.00,USD\n",
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = stderr(&o);
    assert!(
        err.contains("source.jsonl line 2") && err.contains("not valid UTF-8"),
        "{err}"
    );
}

/// `-` and `--5` are not numbers (they were once reported as "too large").
#[test]
fn sign_only_amounts_are_not_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("target.csv"),
        "id,amount,currency\na,1,USD\n",
    )
    .unwrap();
    for amount in ["-", "--5"] {
        fs::write(
            tmp.path().join("source.csv"),
            format!("id,amount,currency\na,{amount},USD\n"),
        )
        .unwrap();
        let o = recon(
            tmp.path(),
            &[
                "diff",
                "source.csv",
                "target.csv",
                "--key",
                "id",
                "--compare",
                "amount,currency",
                "--out",
                "out",
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{amount}: {}", show(&o));
        let err = stderr(&o);
        assert!(
            err.contains("source.csv line 2")
                && err.contains(&format!("`{amount}` is not a number"))
                && !err.contains("too large"),
            "{amount}: {err}"
        );
    }
}
