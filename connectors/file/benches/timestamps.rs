//! Timestamp columns at the speed of the scanner: the reader over 1M rows
//! (`id,status,created`) with `created` read as text (the scanner and the
//! reader alone) and as a timestamp, written as Unix seconds and as RFC
//! 3339; prints ns per row and the ratio of each timestamp read to its text
//! read (goal: at most 1.25, i.e. parsing costs at most a quarter of what
//! scanning the row does).
//!
//! Run: `cargo bench -p recon-file --bench timestamps` (`ROWS` to change
//! the row count, `RUNS` the repeats; the best run of each is kept).

use std::path::{Path, PathBuf};
use std::time::Instant;

use recon_core::{AmountFormat, Field, FieldKind, Schema};
use recon_file::{FileReader, FileSpec, DEFAULT_MAX_RECORD_BYTES};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn write(dir: &Path, name: &str, rows: usize, rfc3339: bool) -> PathBuf {
    let mut text = String::from("id,status,created\n");
    let start = 1_793_491_200i64; // 2026-11-01T00:00:00Z
    for i in 0..rows {
        let t = start + (i as i64 * 7919) % 2_592_000;
        let created = if rfc3339 {
            jiff::Timestamp::from_second(t).unwrap().to_string()
        } else {
            t.to_string()
        };
        text.push_str(&format!(
            "ch_{:024x},succeeded,{created}\n",
            i as u128 * 0x9E37_79B9
        ));
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The best of `runs` full reads, in ns per row.
fn read(path: &Path, kind: FieldKind, rows: usize, runs: usize) -> f64 {
    let schema = Schema {
        fields: vec![
            Field {
                name: "status".into(),
                kind: FieldKind::Text,
                compared: true,
            },
            Field {
                name: "created".into(),
                kind,
                compared: true,
            },
        ],
    };
    let mut best = f64::MAX;
    for _ in 0..runs {
        let spec = FileSpec {
            path: path.to_path_buf(),
            key_column: "id".into(),
            columns: vec!["status".into(), "created".into()],
            currency_column: None,
            amount_format: AmountFormat::Minor,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        };
        let mut reader = FileReader::open(spec, &schema).unwrap();
        let mut n = 0usize;
        let t = Instant::now();
        reader
            .for_each(|_, values, _| {
                n += values.len();
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap();
        let ns = t.elapsed().as_nanos() as f64 / rows as f64;
        assert_eq!(n, rows * 2);
        best = best.min(ns);
    }
    best
}

fn main() {
    let rows = env("ROWS", 1_000_000);
    let runs = env("RUNS", 5);
    let dir = std::env::temp_dir().join(format!("recon-ts-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut worst: f64 = 0.0;
    for (form, rfc) in [("unix seconds", false), ("rfc 3339", true)] {
        let path = write(&dir, &format!("{rfc}.csv"), rows, rfc);
        let text = read(&path, FieldKind::Text, rows, runs);
        let ts = read(&path, FieldKind::Timestamp, rows, runs);
        let ratio = ts / text;
        worst = worst.max(ratio);
        println!(
            "{form:>13}: as text {text:6.1} ns/row, as timestamp {ts:6.1} ns/row, ratio {ratio:.2} (goal <= 1.25)"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "worst ratio {worst:.2}: {}",
        if worst <= 1.25 { "OK" } else { "over the goal" }
    );
}
