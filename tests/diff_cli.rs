//! End-to-end tests of `recon diff`: the binary is run on files written into
//! a fresh temporary folder per test, and its exit status, stderr and report
//! files are checked against the contract (README, reports/README.md).

mod common;

use common::summary;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value as Json;

// ---------------------------------------------------------------- helpers

/// The `recon` binary built for this test run.
fn recon() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_recon"));
    cmd.env_remove("RECON_LOG");
    cmd
}

/// Runs `recon` with these arguments in `cwd`.
fn run_in(cwd: &Path, args: &[&str]) -> Output {
    recon()
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("run recon")
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("recon was killed by a signal")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails with everything recon printed when the exit status is not `want`.
fn expect_code(out: &Output, want: i32) {
    assert_eq!(
        code(out),
        want,
        "exit status\n--- stdout\n{}\n--- stderr\n{}",
        stdout(out),
        stderr(out)
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p
}

/// A report as (header, rows), parsed with the csv crate.
fn read_report(dir: &Path, name: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let path = dir.join(name);
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let header = r.headers().unwrap().iter().map(String::from).collect();
    let rows = r
        .records()
        .map(|rec| rec.unwrap().iter().map(String::from).collect())
        .collect();
    (header, rows)
}

/// Asserts a report's exact header and rows, in order.
fn assert_report(dir: &Path, name: &str, header: &[&str], rows: &[&[&str]]) {
    let (h, r) = read_report(dir, name);
    assert_eq!(h, header, "{name}: header");
    let want: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| c.to_string()).collect())
        .collect();
    assert_eq!(r, want, "{name}: rows");
}

/// The contract's top-level integers of summary.json.
fn counts(s: &Json) -> BTreeMap<&'static str, u64> {
    [
        "source_records",
        "target_records",
        "matched",
        "gaps",
        "orphans",
        "mismatches",
        "duplicates",
        "pending",
        "backfilled",
        "backfill_failed",
    ]
    .into_iter()
    .map(|k| {
        let v = s[k]
            .as_u64()
            .unwrap_or_else(|| panic!("summary.json `{k}` is not an integer: {}", s[k]));
        (k, v)
    })
    .collect()
}

#[allow(clippy::too_many_arguments)]
fn expected_counts(
    source_records: u64,
    target_records: u64,
    matched: u64,
    gaps: u64,
    orphans: u64,
    mismatches: u64,
    duplicates: u64,
) -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("source_records", source_records),
        ("target_records", target_records),
        ("matched", matched),
        ("gaps", gaps),
        ("orphans", orphans),
        ("mismatches", mismatches),
        ("duplicates", duplicates),
        ("pending", 0),
        ("backfilled", 0),
        ("backfill_failed", 0),
    ])
}

/// Per-currency totals of one side of summary.json: code -> (records, total).
fn totals(s: &Json, side: &str) -> BTreeMap<String, (u64, String)> {
    s["totals"][side]
        .as_array()
        .unwrap_or_else(|| panic!("summary.json totals.{side} is not an array: {s}"))
        .iter()
        .map(|t| {
            (
                t["currency"].as_str().unwrap_or("").to_string(),
                (
                    t["records"].as_u64().unwrap(),
                    t["total"].as_str().unwrap_or("").to_string(),
                ),
            )
        })
        .collect()
}

fn totals_of(items: &[(&str, u64, &str)]) -> BTreeMap<String, (u64, String)> {
    items
        .iter()
        .map(|(c, n, t)| (c.to_string(), (*n, t.to_string())))
        .collect()
}

/// Every file of a folder with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Names in `dir` that look like a report staging folder.
fn partial_leftovers(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial"))
        .collect()
}

/// Checks the contract of a failed run: exit 2, one `error:` message naming
/// `needles` (file, line, column...), and no report folder left behind.
fn assert_trouble(out: &Output, out_dir: &Path, needles: &[&str]) {
    expect_code(out, 2);
    let err = stderr(out);
    assert!(
        err.starts_with("error: "),
        "stderr must start with `error: `:\n{err}"
    );
    for n in needles {
        assert!(err.contains(n), "stderr should mention `{n}`:\n{err}");
    }
    assert!(
        !out_dir.exists(),
        "no report folder may be created on trouble, but {} exists",
        out_dir.display()
    );
    let parent = out_dir.parent().unwrap();
    assert_eq!(
        partial_leftovers(parent),
        Vec::<String>::new(),
        "staging folders left behind in {}",
        parent.display()
    );
}

const MISMATCH_HEADER: &[&str] = &[
    "external_id",
    "field",
    "source_value",
    "target_value",
    "currency",
    "difference",
];
const DUPLICATE_HEADER: &[&str] = &["external_id", "side", "count", "other_side_count"];
const SUMMARY_CSV_HEADER: &[&str] = &[
    "currency",
    "source_records",
    "source_total",
    "target_records",
    "target_total",
    "records_delta",
    "total_delta",
    "source_counted_twice",
    "target_counted_twice",
];
const RECORD_HEADER: &[&str] = &["external_id", "amount", "currency", "status", "created"];

// ------------------------------------------------- every class, id for id

/// Source of truth: Stripe-like, amounts in minor units, Unix seconds.
const CLASSES_SOURCE: &str = "\
id,amount,currency,status,created
m_usd,2999,usd,succeeded,1772442000
m_jpy,500,jpy,succeeded,1772442060
m_kwd,1234,kwd,succeeded,1772442120
gap_kwd,5678,kwd,succeeded,1772442180
gap_jpy,1500,jpy,pending,1772442240
mis_amount_status,2000,usd,succeeded,1772442300
mis_created,100000,jpy,succeeded,1772442360
mis_currency,1000,eur,succeeded,1772442420
dup_src,1500,usd,succeeded,1772442480
dup_src,1500,usd,succeeded,1772442480
dup_tgt,700,eur,succeeded,1772442540
dup_both,300,jpy,succeeded,1772442600
dup_both,300,jpy,succeeded,1772442600
dup_src_only,250,kwd,succeeded,1772442660
dup_src_only,250,kwd,succeeded,1772442660
";

/// Target: a ledger, amounts in major units, RFC 3339 (some with offsets).
const CLASSES_TARGET: &str = "\
id,amount,currency,status,created
m_usd,29.99,USD,succeeded,2026-03-02T09:00:00Z
m_jpy,500,JPY,succeeded,2026-03-02T09:01:00Z
m_kwd,1.234,KWD,succeeded,2026-03-02T12:02:00+03:00
mis_amount_status,25.00,USD,refunded,2026-03-02T09:05:00Z
mis_created,100000,JPY,succeeded,2026-03-02T09:06:30Z
mis_currency,10.00,USD,succeeded,2026-03-02T09:07:00Z
dup_src,15.00,USD,succeeded,2026-03-02T09:08:00Z
dup_tgt,7.00,EUR,succeeded,2026-03-02T09:09:00Z
dup_tgt,7.50,EUR,succeeded,2026-03-02T09:09:00Z
dup_both,300,JPY,succeeded,2026-03-02T09:10:00Z
dup_both,300,JPY,succeeded,2026-03-02T09:10:00Z
dup_both,300,JPY,succeeded,2026-03-02T09:10:00Z
dup_orphan,0.125,KWD,succeeded,2026-03-02T09:12:00Z
dup_orphan,0.125,KWD,succeeded,2026-03-02T09:12:00Z
orphan_usd,42.00,USD,succeeded,2026-03-02T09:13:00Z
";

const FULL_COMPARE: &[&str] = &[
    "--key",
    "id",
    "--compare",
    "amount,currency,status,created",
    "--timestamps",
    "created",
];

#[test]
fn every_planted_class_is_reported_id_for_id() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "source.csv", CLASSES_SOURCE);
    write(tmp.path(), "target.csv", CLASSES_TARGET);
    let mut args = vec!["diff", "source.csv", "target.csv"];
    args.extend_from_slice(FULL_COMPARE);
    args.extend([
        "--target-amount-format",
        "major",
        "--copies",
        "--out",
        "out",
    ]);
    let out = run_in(tmp.path(), &args);
    expect_code(&out, 1);
    let dir = tmp.path().join("out");

    let s = summary(&dir);
    assert_eq!(counts(&s), expected_counts(12, 11, 3, 2, 1, 3, 5));
    assert_eq!(s["exit_status"], 1);
    assert_eq!(
        s["compared_fields"],
        serde_json::json!(["amount", "currency", "status", "created"])
    );
    // Totals sum every row read, duplicates included.
    assert_eq!(
        totals(&s, "source"),
        totals_of(&[
            ("EUR", 2, "17.00"),
            ("JPY", 5, "102600"),
            ("KWD", 4, "7.412"),
            ("USD", 4, "79.99"),
        ])
    );
    assert_eq!(
        totals(&s, "target"),
        totals_of(&[
            ("EUR", 2, "14.50"),
            ("JPY", 5, "101400"),
            ("KWD", 3, "1.484"),
            ("USD", 5, "121.99"),
        ])
    );
    assert_report(
        &dir,
        "summary.csv",
        SUMMARY_CSV_HEADER,
        &[
            &[
                "EUR", "2", "17.00", "2", "14.50", "0", "-2.50", "0.00", "7.50",
            ],
            &[
                "JPY", "5", "102600", "5", "101400", "0", "-1200", "300", "600",
            ],
            &[
                "KWD", "4", "7.412", "3", "1.484", "-1", "-5.928", "0.250", "0.125",
            ],
            &[
                "USD", "4", "79.99", "5", "121.99", "1", "42.00", "15.00", "0.00",
            ],
        ],
    );

    assert_report(
        &dir,
        "gaps.csv",
        RECORD_HEADER,
        &[
            &["gap_jpy", "1500", "JPY", "pending", "2026-03-02T09:04:00Z"],
            &[
                "gap_kwd",
                "5.678",
                "KWD",
                "succeeded",
                "2026-03-02T09:03:00Z",
            ],
        ],
    );
    assert_report(
        &dir,
        "orphans.csv",
        RECORD_HEADER,
        &[&[
            "orphan_usd",
            "42.00",
            "USD",
            "succeeded",
            "2026-03-02T09:13:00Z",
        ]],
    );
    assert_report(
        &dir,
        "mismatches.csv",
        MISMATCH_HEADER,
        &[
            &[
                "mis_amount_status",
                "amount",
                "20.00",
                "25.00",
                "USD",
                "5.00",
            ],
            &[
                "mis_amount_status",
                "status",
                "succeeded",
                "refunded",
                "",
                "",
            ],
            &[
                "mis_created",
                "created",
                "2026-03-02T09:06:00Z",
                "2026-03-02T09:06:30Z",
                "",
                "30",
            ],
            &["mis_currency", "amount", "10.00", "10.00", "EUR/USD", ""],
            &["mis_currency", "currency", "EUR", "USD", "", ""],
        ],
    );
    // A duplicate wins over every other class: dup_tgt's copies differ in
    // amount, dup_src_only is absent from the target, dup_orphan from the
    // source, and none of them is a mismatch, gap or orphan.
    assert_report(
        &dir,
        "duplicates.csv",
        DUPLICATE_HEADER,
        &[
            &["dup_both", "source", "2", "3"],
            &["dup_both", "target", "3", "2"],
            &["dup_orphan", "target", "2", "0"],
            &["dup_src", "source", "2", "1"],
            &["dup_src_only", "source", "2", "0"],
            &["dup_tgt", "target", "2", "1"],
        ],
    );
    // Every copy, in each file's line order (files have no IDs of their
    // own): copy 1 kept, the others' money counted twice.
    let t = |m: &str| format!("2026-03-02T09:{m}:00Z");
    let (src, tgt) = ("source", "target");
    let rows: Vec<Vec<String>> = [
        [
            "dup_both",
            src,
            "1",
            "",
            "300",
            "JPY",
            "succeeded",
            &t("10"),
        ],
        [
            "dup_both",
            src,
            "2",
            "",
            "300",
            "JPY",
            "succeeded",
            &t("10"),
        ],
        [
            "dup_both",
            tgt,
            "1",
            "",
            "300",
            "JPY",
            "succeeded",
            &t("10"),
        ],
        [
            "dup_both",
            tgt,
            "2",
            "",
            "300",
            "JPY",
            "succeeded",
            &t("10"),
        ],
        [
            "dup_both",
            tgt,
            "3",
            "",
            "300",
            "JPY",
            "succeeded",
            &t("10"),
        ],
        [
            "dup_orphan",
            tgt,
            "1",
            "",
            "0.125",
            "KWD",
            "succeeded",
            &t("12"),
        ],
        [
            "dup_orphan",
            tgt,
            "2",
            "",
            "0.125",
            "KWD",
            "succeeded",
            &t("12"),
        ],
        [
            "dup_src",
            src,
            "1",
            "",
            "15.00",
            "USD",
            "succeeded",
            &t("08"),
        ],
        [
            "dup_src",
            src,
            "2",
            "",
            "15.00",
            "USD",
            "succeeded",
            &t("08"),
        ],
        [
            "dup_src_only",
            src,
            "1",
            "",
            "0.250",
            "KWD",
            "succeeded",
            &t("11"),
        ],
        [
            "dup_src_only",
            src,
            "2",
            "",
            "0.250",
            "KWD",
            "succeeded",
            &t("11"),
        ],
        [
            "dup_tgt",
            tgt,
            "1",
            "",
            "7.00",
            "EUR",
            "succeeded",
            &t("09"),
        ],
        [
            "dup_tgt",
            tgt,
            "2",
            "",
            "7.50",
            "EUR",
            "succeeded",
            &t("09"),
        ],
    ]
    .map(|r| r.map(str::to_string).to_vec())
    .to_vec();
    let cells: Vec<Vec<&str>> = rows
        .iter()
        .map(|r| r.iter().map(String::as_str).collect())
        .collect();
    let rows: Vec<&[&str]> = cells.iter().map(Vec::as_slice).collect();
    let mut header = vec!["external_id", "side", "copy", "native_id"];
    header.extend(&RECORD_HEADER[1..]);
    assert_report(&dir, "duplicate_copies.csv", &header, &rows);
    assert_eq!(
        s["counted_twice"]["target"],
        serde_json::json!([
            {"currency": "EUR", "records": 1, "total": "7.50", "total_minor": "750"},
            {"currency": "JPY", "records": 2, "total": "600", "total_minor": "600"},
            {"currency": "KWD", "records": 1, "total": "0.125", "total_minor": "125"},
        ])
    );
}

#[test]
fn identical_inputs_exit_0_with_everything_matched() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "\
id,amount,currency,status,created
a,2999,usd,succeeded,1772442000
b,500,jpy,succeeded,1772442060
c,1234,kwd,succeeded,1772442120
d,-1500,usd,refunded,1772442180
";
    write(tmp.path(), "source.csv", text);
    write(tmp.path(), "target.csv", text);
    let mut args = vec!["diff", "source.csv", "target.csv"];
    args.extend_from_slice(FULL_COMPARE);
    args.extend(["--out", "out"]);
    let out = run_in(tmp.path(), &args);
    expect_code(&out, 0);
    let dir = tmp.path().join("out");
    let s = summary(&dir);
    assert_eq!(counts(&s), expected_counts(4, 4, 4, 0, 0, 0, 0));
    assert_eq!(s["exit_status"], 0);
    let both = totals_of(&[("JPY", 1, "500"), ("KWD", 1, "1.234"), ("USD", 2, "14.99")]);
    assert_eq!(totals(&s, "source"), both);
    assert_eq!(totals(&s, "target"), both);
    assert_report(
        &dir,
        "summary.csv",
        SUMMARY_CSV_HEADER,
        &[
            &["JPY", "1", "500", "1", "500", "0", "0", "0", "0"],
            &[
                "KWD", "1", "1.234", "1", "1.234", "0", "0.000", "0.000", "0.000",
            ],
            &[
                "USD", "2", "14.99", "2", "14.99", "0", "0.00", "0.00", "0.00",
            ],
        ],
    );
    assert_report(&dir, "gaps.csv", RECORD_HEADER, &[]);
    assert_report(&dir, "orphans.csv", RECORD_HEADER, &[]);
    assert_report(&dir, "mismatches.csv", MISMATCH_HEADER, &[]);
    assert_report(&dir, "duplicates.csv", DUPLICATE_HEADER, &[]);
}

// ------------------------------------------------------------ examples/

#[test]
fn readme_example_gives_exact_counts_for_csv_and_jsonl_ledgers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for ledger in ["examples/ledger.csv", "examples/ledger.jsonl"] {
        let dir = tmp.path().join(ledger.replace(['/', '.'], "_"));
        let out = run_in(
            root,
            &[
                "diff",
                "examples/stripe_charges.csv",
                ledger,
                "--key",
                "id",
                "--compare",
                "amount,currency,status,created",
                "--timestamps",
                "created",
                "--target-rename",
                "charge_id=id,amount_major=amount,created_at=created",
                "--target-amount-format",
                "major",
                "--copies",
                "--out",
                dir.to_str().unwrap(),
            ],
        );
        expect_code(&out, 1);
        let s = summary(&dir);
        assert_eq!(
            counts(&s),
            expected_counts(25, 24, 20, 2, 1, 2, 1),
            "{ledger}"
        );
        assert_eq!(s["source_rows"], 25, "{ledger}");
        assert_eq!(s["target_rows"], 25, "{ledger}");
        assert_report(
            &dir,
            "gaps.csv",
            RECORD_HEADER,
            &[
                &[
                    "ch_3QMe4LbyoVFz8uZdZv8FuKKI",
                    "120000",
                    "JPY",
                    "succeeded",
                    "2026-03-03T05:05:23Z",
                ],
                &[
                    "ch_3QNen5n1Ae6pWzpF1qH6Yytw",
                    "99.00",
                    "USD",
                    "succeeded",
                    "2026-03-03T03:13:27Z",
                ],
            ],
        );
        assert_report(
            &dir,
            "orphans.csv",
            RECORD_HEADER,
            &[&[
                "ch_3Qh4487Q7j58M1cIaHZcUEqP",
                "64.00",
                "USD",
                "succeeded",
                "2026-03-02T21:11:43Z",
            ]],
        );
        assert_report(
            &dir,
            "mismatches.csv",
            MISMATCH_HEADER,
            &[
                &[
                    "ch_3QBJl5dzpJn0meq7WJjjIBAz",
                    "status",
                    "refunded",
                    "succeeded",
                    "",
                    "",
                ],
                &[
                    "ch_3QJGvVvQe1sKhBN88hXJsi6B",
                    "amount",
                    "49.99",
                    "49.90",
                    "USD",
                    "-0.09",
                ],
            ],
        );
        assert_report(
            &dir,
            "duplicates.csv",
            DUPLICATE_HEADER,
            &[&["ch_3QOnzyw2MzP0ZvzOMhfWuBBy", "target", "2", "1"]],
        );
        assert_report(
            &dir,
            "summary.csv",
            SUMMARY_CSV_HEADER,
            &[
                &[
                    "EUR", "6", "241.89", "7", "261.88", "1", "19.99", "0.00", "19.99",
                ],
                &[
                    "JPY", "5", "227480", "4", "107480", "-1", "-120000", "0", "0",
                ],
                &[
                    "KWD", "4", "14.984", "4", "14.984", "0", "0.000", "0.000", "0.000",
                ],
                &[
                    "USD", "10", "630.46", "10", "595.37", "0", "-35.09", "0.00", "0.00",
                ],
            ],
        );
        outputs.push(dir);
    }
    // The JSON Lines ledger holds the same content: the same reports.
    for name in [
        "summary.csv",
        "gaps.csv",
        "orphans.csv",
        "mismatches.csv",
        "duplicates.csv",
        "duplicate_copies.csv",
    ] {
        assert_eq!(
            fs::read(outputs[0].join(name)).unwrap(),
            fs::read(outputs[1].join(name)).unwrap(),
            "{name} differs between the CSV and JSONL ledgers"
        );
    }
}

// ------------------------------------------------------ money conversion

const MINOR_SOURCE: &str = "\
id,amount,currency
usd,2999,usd
jpy,500,jpy
kwd,1234,kwd
";

#[test]
fn major_units_in_the_target_match_minor_units_in_the_source() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "source.csv", MINOR_SOURCE);
    write(
        tmp.path(),
        "target.csv",
        "id,amount_major,currency\nusd,29.99,USD\njpy,500,JPY\nkwd,1.234,KWD\n",
    );
    write(
        tmp.path(),
        "target.jsonl",
        concat!(
            "{\"id\":\"usd\",\"amount_major\":29.99,\"currency\":\"USD\"}\n",
            "{\"id\":\"jpy\",\"amount_major\":500,\"currency\":\"JPY\"}\n",
            "{\"id\":\"kwd\",\"amount_major\":\"1.234\",\"currency\":\"KWD\"}\n",
        ),
    );
    for target in ["target.csv", "target.jsonl"] {
        let out = run_in(
            tmp.path(),
            &[
                "diff",
                "source.csv",
                target,
                "--key",
                "id",
                "--compare",
                "amount,currency",
                "--target-rename",
                "amount_major=amount",
                "--target-amount-format",
                "major",
                "--out",
                "out",
            ],
        );
        expect_code(&out, 0);
        let s = summary(&tmp.path().join("out"));
        assert_eq!(counts(&s), expected_counts(3, 3, 3, 0, 0, 0, 0), "{target}");
        let both = totals_of(&[("JPY", 1, "500"), ("KWD", 1, "1.234"), ("USD", 1, "29.99")]);
        assert_eq!(totals(&s, "source"), both, "{target}");
        assert_eq!(totals(&s, "target"), both, "{target}");
    }
}

#[test]
fn too_many_decimals_for_the_currency_is_trouble_naming_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "source.csv", MINOR_SOURCE);
    let target = write(
        tmp.path(),
        "target.csv",
        "id,amount_major,currency\njpy,500,JPY\nusd,1.234,USD\nkwd,1.234,KWD\n",
    );
    let out_dir = tmp.path().join("out");
    let out = run_in(
        tmp.path(),
        &[
            "diff",
            "source.csv",
            target.to_str().unwrap(),
            "--key",
            "id",
            "--compare",
            "amount,currency",
            "--target-rename",
            "amount_major=amount",
            "--target-amount-format",
            "major",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert_trouble(
        &out,
        &out_dir,
        &[
            target.to_str().unwrap(),
            "line 3",
            "amount_major",
            "1.234",
            "USD",
        ],
    );
}

#[test]
fn decimal_amount_in_a_minor_units_file_is_trouble_that_says_minor_units_were_expected() {
    // A Shopify-style export read with the default --source-amount-format
    // minor: the message must say why 29.99 is refused (whole minor units
    // were expected), not call it "not a number".
    let tmp = tempfile::tempdir().unwrap();
    let source = write(
        tmp.path(),
        "orders.csv",
        "id,amount,currency\nord_1,29.99,usd\n",
    );
    write(
        tmp.path(),
        "target.csv",
        "id,amount,currency\nord_1,2999,usd\n",
    );
    let out_dir = tmp.path().join("out");
    let out = run_in(
        tmp.path(),
        &[
            "diff",
            source.to_str().unwrap(),
            "target.csv",
            "--key",
            "id",
            "--compare",
            "amount,currency",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert_trouble(
        &out,
        &out_dir,
        &[
            source.to_str().unwrap(),
            "line 2",
            "`amount`",
            "29.99",
            "minor",
        ],
    );
}

// ------------------------------------------------------------ tolerances

#[test]
fn amount_tolerance_in_minor_units() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        tmp.path(),
        "source.csv",
        "id,amount,currency\nwithin,1000,usd\nbeyond,1000,usd\nyen,500,jpy\nexact,700,eur\n",
    );
    write(
        tmp.path(),
        "target.csv",
        "id,amount,currency\nwithin,1001,usd\nbeyond,1002,usd\nyen,499,jpy\nexact,700,eur\n",
    );
    let base = [
        "diff",
        "source.csv",
        "target.csv",
        "--key",
        "id",
        "--compare",
        "amount,currency",
        "--out",
        "out",
    ];

    // Without a tolerance every difference is a mismatch.
    let out = run_in(tmp.path(), &base);
    expect_code(&out, 1);
    let dir = tmp.path().join("out");
    assert_eq!(counts(&summary(&dir)), expected_counts(4, 4, 1, 0, 0, 3, 0));

    let mut args = base.to_vec();
    args.extend(["--tolerance", "amount=1"]);
    let out = run_in(tmp.path(), &args);
    expect_code(&out, 1);
    assert_eq!(counts(&summary(&dir)), expected_counts(4, 4, 3, 0, 0, 1, 0));
    assert_report(
        &dir,
        "mismatches.csv",
        MISMATCH_HEADER,
        &[&["beyond", "amount", "10.00", "10.02", "USD", "0.02"]],
    );

    let mut args = base.to_vec();
    args.extend(["--tolerance", "amount=2"]);
    let out = run_in(tmp.path(), &args);
    expect_code(&out, 0);
    assert_eq!(counts(&summary(&dir)), expected_counts(4, 4, 4, 0, 0, 0, 0));
}

#[test]
fn timestamp_tolerance_in_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    // 1772442000 is 2026-03-02T09:00:00Z.
    write(
        tmp.path(),
        "source.csv",
        "id,created\nplus5,1772442000\nminus5,1772442000\nplus6,1772442000\nminus6,1772442000\n",
    );
    write(
        tmp.path(),
        "target.csv",
        "id,created\n\
         plus5,2026-03-02T09:00:05Z\n\
         minus5,2026-03-02T10:59:55+02:00\n\
         plus6,2026-03-02T09:00:06Z\n\
         minus6,2026-03-02T08:59:54Z\n",
    );
    let base = [
        "diff",
        "source.csv",
        "target.csv",
        "--key",
        "id",
        "--compare",
        "created",
        "--out",
        "out",
    ];
    let dir = tmp.path().join("out");

    let mut exact = base.to_vec();
    exact.extend(["--timestamps", "created"]);
    let out = run_in(tmp.path(), &exact);
    expect_code(&out, 1);
    assert_eq!(counts(&summary(&dir)), expected_counts(4, 4, 0, 0, 0, 4, 0));

    // With --timestamps, and without it (a seconds tolerance implies one).
    for with_timestamps in [true, false] {
        let mut args = base.to_vec();
        if with_timestamps {
            args.extend(["--timestamps", "created"]);
        }
        args.extend(["--tolerance", "created=5s"]);
        let out = run_in(tmp.path(), &args);
        expect_code(&out, 1);
        assert_eq!(
            counts(&summary(&dir)),
            expected_counts(4, 4, 2, 0, 0, 2, 0),
            "--timestamps given: {with_timestamps}"
        );
        assert_report(
            &dir,
            "mismatches.csv",
            MISMATCH_HEADER,
            &[
                &[
                    "minus6",
                    "created",
                    "2026-03-02T09:00:00Z",
                    "2026-03-02T08:59:54Z",
                    "",
                    "-6",
                ],
                &[
                    "plus6",
                    "created",
                    "2026-03-02T09:00:00Z",
                    "2026-03-02T09:00:06Z",
                    "",
                    "6",
                ],
            ],
        );
    }
}

// ------------------------------------------------------------- bad input

const GOOD_CSV: &str = "\
id,amount,currency,status
a,2999,usd,succeeded
b,500,jpy,succeeded
c,1234,kwd,succeeded
";

/// Runs a diff of `source` against `target` (file names in a fresh folder
/// holding `files`), comparing amount, currency and status, and checks the
/// trouble contract with `needles` plus the bad file's full path.
fn assert_bad_input(
    files: &[(&str, &str)],
    source: &str,
    target: &str,
    bad: &str,
    needles: &[&str],
) {
    let tmp = tempfile::tempdir().unwrap();
    for (name, text) in files {
        write(tmp.path(), name, text);
    }
    let source = tmp.path().join(source);
    let target = tmp.path().join(target);
    let bad = tmp.path().join(bad);
    let out_dir = tmp.path().join("reports");
    let out = run_in(
        tmp.path(),
        &[
            "diff",
            source.to_str().unwrap(),
            target.to_str().unwrap(),
            "--key",
            "id",
            "--compare",
            "amount,currency,status",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    let mut all = vec![bad.to_str().unwrap()];
    all.extend_from_slice(needles);
    assert_trouble(&out, &out_dir, &all);
}

#[test]
fn missing_key_column_is_trouble() {
    assert_bad_input(
        &[
            (
                "source.csv",
                "charge,amount,currency,status\na,2999,usd,succeeded\n",
            ),
            ("target.csv", GOOD_CSV),
        ],
        "source.csv",
        "target.csv",
        "source.csv",
        &["line 1", "`id`"],
    );
}

#[test]
fn missing_compare_column_is_trouble() {
    assert_bad_input(
        &[
            ("source.csv", GOOD_CSV),
            ("target.csv", "id,amount,currency\na,2999,usd\n"),
        ],
        "source.csv",
        "target.csv",
        "target.csv",
        &["line 1", "`status`"],
    );
}

#[test]
fn missing_compare_field_in_jsonl_is_trouble() {
    assert_bad_input(
        &[
            ("source.csv", GOOD_CSV),
            (
                "target.jsonl",
                "{\"id\":\"a\",\"amount\":2999,\"currency\":\"usd\"}\n",
            ),
        ],
        "source.csv",
        "target.jsonl",
        "target.jsonl",
        &["line 1", "`status`"],
    );
}

#[test]
fn malformed_jsonl_line_is_trouble_with_its_line_number() {
    assert_bad_input(
        &[
            ("source.csv", GOOD_CSV),
            (
                "target.jsonl",
                concat!(
                    "{\"id\":\"a\",\"amount\":2999,\"currency\":\"usd\",\"status\":\"succeeded\"}\n",
                    "\n",
                    "{\"id\":\"b\",\"amount\":500,\"currency\":\"jpy\",\"status\":\n",
                    "{\"id\":\"c\",\"amount\":1234,\"currency\":\"kwd\",\"status\":\"succeeded\"}\n",
                ),
            ),
        ],
        "source.csv",
        "target.jsonl",
        "target.jsonl",
        &["line 3"],
    );
}

#[test]
fn ragged_csv_row_is_trouble_with_its_line_number() {
    assert_bad_input(
        &[
            (
                "source.csv",
                "id,amount,currency,status\na,2999,usd,succeeded\nb,500,jpy,succeeded\nc,12,34,kwd,succeeded\n",
            ),
            ("target.csv", GOOD_CSV),
        ],
        "source.csv",
        "target.csv",
        "source.csv",
        &["line 4"],
    );
}

#[test]
fn empty_file_is_trouble() {
    assert_bad_input(
        &[("source.csv", GOOD_CSV), ("target.csv", "")],
        "source.csv",
        "target.csv",
        "target.csv",
        &["empty"],
    );
}

#[test]
fn nonexistent_path_is_trouble() {
    assert_bad_input(
        &[("target.csv", GOOD_CSV)],
        "no_such_export.csv",
        "target.csv",
        "no_such_export.csv",
        &[],
    );
}

#[test]
fn nonexistent_path_message_states_the_os_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "target.csv", GOOD_CSV);
    let out = run_in(
        tmp.path(),
        &[
            "diff",
            "no_such_export.csv",
            "target.csv",
            "--key",
            "id",
            "--compare",
            "amount",
            "--out",
            "out",
        ],
    );
    expect_code(&out, 2);
    let err = stderr(&out);
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}

#[test]
fn unknown_file_extension_is_trouble() {
    assert_bad_input(
        &[("source.csv", GOOD_CSV), ("target.txt", GOOD_CSV)],
        "source.csv",
        "target.txt",
        "target.txt",
        &[".csv", ".jsonl"],
    );
}

#[test]
fn unknown_currency_code_is_trouble_with_its_line_number() {
    assert_bad_input(
        &[
            (
                "source.csv",
                "id,amount,currency,status\na,2999,usd,succeeded\nb,500,xyz,succeeded\n",
            ),
            ("target.csv", GOOD_CSV),
        ],
        "source.csv",
        "target.csv",
        "source.csv",
        &["line 3", "xyz", "currency"],
    );
}

// ------------------------------------------------- formula neutralisation

#[test]
fn formulas_are_neutralised_in_reports_but_negative_numbers_stay_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        tmp.path(),
        "source.csv",
        "id,amount,currency,status\nf1,1000,usd,succeeded\n@SUM(1),-1250,usd,-2+3\n",
    );
    write(
        tmp.path(),
        "target.csv",
        "id,amount,currency,status\nf1,500,usd,\"=HYPERLINK(\"\"x\"\")\"\n",
    );
    let out = run_in(
        tmp.path(),
        &[
            "diff",
            "source.csv",
            "target.csv",
            "--key",
            "id",
            "--compare",
            "amount,currency,status",
            "--out",
            "out",
        ],
    );
    expect_code(&out, 1);
    let dir = tmp.path().join("out");
    assert_report(
        &dir,
        "mismatches.csv",
        MISMATCH_HEADER,
        &[
            &["f1", "amount", "10.00", "5.00", "USD", "-5.00"],
            &["f1", "status", "succeeded", "'=HYPERLINK(\"x\")", "", ""],
        ],
    );
    assert_report(
        &dir,
        "gaps.csv",
        &["external_id", "amount", "currency", "status"],
        &[&["'@SUM(1)", "-12.50", "USD", "'-2+3"]],
    );
    // The raw bytes too: the number is unquoted and unprefixed.
    let raw = fs::read_to_string(dir.join("mismatches.csv")).unwrap();
    assert!(raw.contains("f1,amount,10.00,5.00,USD,-5.00\r\n"), "{raw}");
    assert!(!raw.contains("'-5.00"), "{raw}");
    assert!(raw.contains("\"'=HYPERLINK(\"\"x\"\")\""), "{raw}");
    let s = summary(&dir);
    assert_eq!(totals(&s, "source"), totals_of(&[("USD", 2, "-2.50")]));
}

// ------------------------------------------- reports written on success only

#[test]
fn a_failed_run_leaves_the_previous_reports_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "source.csv", CLASSES_SOURCE);
    write(tmp.path(), "target.csv", CLASSES_TARGET);
    // Fails while reading, after the reports' staging folder exists.
    let mut ragged = CLASSES_TARGET.to_string();
    ragged.push_str("late,1.00,USD,succeeded,2026-03-02T09:14:00Z,extra\n");
    write(tmp.path(), "ragged.csv", &ragged);
    // Fails on a bad amount deep in the source.
    let mut bad_amount = CLASSES_SOURCE.to_string();
    bad_amount.push_str("late,12.5,usd,succeeded,1772442720\n");
    write(tmp.path(), "bad_amount.csv", &bad_amount);

    let diff = |source: &str, target: &str| {
        let mut args = vec!["diff", source, target];
        args.extend_from_slice(FULL_COMPARE);
        args.extend([
            "--target-amount-format",
            "major",
            "--copies",
            "--out",
            "out",
        ]);
        run_in(tmp.path(), &args)
    };
    let out = diff("source.csv", "target.csv");
    expect_code(&out, 1);
    let dir = tmp.path().join("out");
    let before = snapshot(&dir);
    assert_eq!(
        before.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "duplicate_copies.csv",
            "duplicates.csv",
            "gaps.csv",
            "mismatches.csv",
            "orphans.csv",
            "pending.csv",
            "summary.csv",
            "summary.json"
        ]
    );

    for (source, target, needle) in [
        ("source.csv", "ragged.csv", "line 17"),
        ("bad_amount.csv", "target.csv", "line 17"),
        ("source.csv", "missing.csv", "missing.csv"),
        ("source.csv", "target.txt", "target.txt"),
    ] {
        let out = diff(source, target);
        expect_code(&out, 2);
        let err = stderr(&out);
        assert!(err.starts_with("error: "), "{err}");
        assert!(
            err.contains(needle),
            "stderr should mention `{needle}`:\n{err}"
        );
        assert_eq!(
            snapshot(&dir),
            before,
            "reports changed by the failed run of {source} vs {target}"
        );
        assert_eq!(
            partial_leftovers(tmp.path()),
            Vec::<String>::new(),
            "staging folder left by the failed run of {source} vs {target}"
        );
    }
}

// ------------------------------------------- many rows, across batch boundaries

/// Formats minor units in major units with `exponent` decimals (test oracle).
fn major(minor: i64, exponent: u32) -> String {
    if exponent == 0 {
        return minor.to_string();
    }
    let scale = 10i64.pow(exponent);
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.abs();
    format!(
        "{sign}{}.{:0width$}",
        abs / scale,
        abs % scale,
        width = exponent as usize
    )
}

#[test]
fn twenty_thousand_rows_classified_across_reader_batches() {
    const N: usize = 20_000;
    const CURRENCIES: [(&str, u32); 4] = [("USD", 2), ("JPY", 0), ("KWD", 3), ("EUR", 2)];
    let id = |i: usize| format!("ch_{i:06}");
    // Some refunds among the charges.
    let amount = |i: usize| (i % 5000) as i64 + 1 - if i.is_multiple_of(97) { 3000 } else { 0 };
    let currency = |i: usize| CURRENCIES[i % 4];
    let is_gap = |i: usize| i % 1000 == 7;
    let is_mismatch = |i: usize| i % 1000 == 500;
    // Every row written, per side: (currency, minor), for the totals.
    type Written<'a> = Vec<((&'a str, u32), i64)>;
    let mut rows: BTreeMap<&str, Written> = BTreeMap::new();

    // Source: CSV, minor units, lower-case currencies. Keys 42, 8191 and
    // 1007 (a gap) appear again at the end, thousands of rows (and reader
    // batches) after their first occurrence.
    let source_dups = [42usize, 8191, 1007];
    let mut source = String::from("id,amount,currency,status\n");
    for i in (0..N).chain(source_dups) {
        let (code, _) = currency(i);
        source.push_str(&format!(
            "{},{},{},succeeded\n",
            id(i),
            amount(i),
            code.to_lowercase()
        ));
        rows.entry("source")
            .or_default()
            .push((currency(i), amount(i)));
    }

    // Target: JSON Lines, major units; gaps left out, mismatches one minor
    // unit off, orphans interleaved, keys 123, 9000, 17777 and 2500 (a
    // mismatch) repeated at the end.
    let target_dups = [123usize, 9000, 17777, 2500];
    let mut target = String::new();
    let mut push_target = |key: &str, cur: (&'static str, u32), minor: i64| {
        target.push_str(&format!(
            "{{\"id\":\"{key}\",\"amount\":\"{}\",\"currency\":\"{}\",\"status\":\"succeeded\"}}\n",
            major(minor, cur.1),
            cur.0
        ));
        rows.entry("target").or_default().push((cur, minor));
    };
    let mut orphans = Vec::new();
    for i in 0..N {
        if i % 1300 == 0 && orphans.len() < 15 {
            let key = format!("or_{:02}", orphans.len());
            push_target(&key, ("USD", 2), 1000);
            orphans.push(key);
        }
        if !is_gap(i) {
            push_target(&id(i), currency(i), amount(i) + i64::from(is_mismatch(i)));
        }
    }
    for i in target_dups {
        push_target(&id(i), currency(i), amount(i));
    }
    assert_eq!(orphans.len(), 15);

    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "source.csv", &source);
    write(tmp.path(), "target.jsonl", &target);
    let out = run_in(
        tmp.path(),
        &[
            "diff",
            "source.csv",
            "target.jsonl",
            "--key",
            "id",
            "--compare",
            "amount,currency,status",
            "--target-amount-format",
            "major",
            "--out",
            "out",
        ],
    );
    expect_code(&out, 1);
    let dir = tmp.path().join("out");

    let gaps: Vec<String> = (0..N)
        .filter(|&i| is_gap(i) && !source_dups.contains(&i))
        .map(id)
        .collect();
    let mismatches: Vec<String> = (0..N)
        .filter(|&i| is_mismatch(i) && !target_dups.contains(&i))
        .map(id)
        .collect();
    assert_eq!((gaps.len(), mismatches.len()), (19, 19));
    let target_distinct = (N - 20 + orphans.len()) as u64;
    let matched = (N - gaps.len() - mismatches.len() - 7) as u64;
    let s = summary(&dir);
    assert_eq!(
        counts(&s),
        expected_counts(N as u64, target_distinct, matched, 19, 15, 19, 7)
    );
    assert_eq!(s["source_rows"], N as u64 + 3);
    assert_eq!(s["target_rows"], N as u64 - 20 + 15 + 4);

    let column = |name: &str, i: usize| -> Vec<String> {
        read_report(&dir, name)
            .1
            .into_iter()
            .map(|r| r[i].clone())
            .collect()
    };
    assert_eq!(column("gaps.csv", 0), gaps);
    assert_eq!(column("orphans.csv", 0), orphans);
    assert_eq!(column("mismatches.csv", 0), mismatches);
    assert_eq!(column("mismatches.csv", 1), vec!["amount"; 19]);
    let (_, dup_rows) = read_report(&dir, "duplicates.csv");
    let want_dups: Vec<Vec<String>> = [
        (42, "source", 2, 1),
        (123, "target", 2, 1),
        (1007, "source", 2, 0),
        (2500, "target", 2, 1),
        (8191, "source", 2, 1),
        (9000, "target", 2, 1),
        (17777, "target", 2, 1),
    ]
    .into_iter()
    .map(|(i, side, n, other)| vec![id(i), side.to_string(), n.to_string(), other.to_string()])
    .collect();
    assert_eq!(dup_rows, want_dups);

    // Per-currency totals over every row read, duplicates included.
    for side in ["source", "target"] {
        let mut sums: BTreeMap<String, (u64, i64, u32)> = BTreeMap::new();
        for ((code, exp), minor) in &rows[side] {
            let e = sums.entry(code.to_string()).or_insert((0, 0, *exp));
            e.0 += 1;
            e.1 += minor;
        }
        let want: BTreeMap<String, (u64, String)> = sums
            .into_iter()
            .map(|(c, (n, minor, exp))| (c, (n, major(minor, exp))))
            .collect();
        assert_eq!(totals(&s, side), want, "{side} totals");
    }
}

#[test]
fn timestamp_tolerance_takes_the_duration_syntax_of_every_setting() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        tmp.path(),
        "source.csv",
        "id,created\nin,1772442000\nout,1772442000\n",
    );
    write(
        tmp.path(),
        "target.csv",
        "id,created\nin,2026-03-02T09:01:30Z\nout,2026-03-02T09:02:01Z\n",
    );
    let args = |tolerance: &'static str| {
        [
            "diff",
            "source.csv",
            "target.csv",
            "--key",
            "id",
            "--compare",
            "created",
            "--out",
            "out",
            "--tolerance",
            tolerance,
        ]
    };
    let dir = tmp.path().join("out");
    // 2m and 1m30s allow 90 s and 120 s: `out` (121 s) stays a mismatch.
    for tolerance in ["created=2m", "created=1m30s", "created=120s"] {
        let out = run_in(tmp.path(), &args(tolerance));
        expect_code(&out, 1);
        assert_eq!(
            counts(&summary(&dir)),
            expected_counts(2, 2, 1, 0, 0, 1, 0),
            "{tolerance}"
        );
    }
    let out = run_in(tmp.path(), &args("created=2x"));
    expect_code(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`2x` is neither a whole number") && err.contains("unknown unit `x`"),
        "{err}"
    );
}
