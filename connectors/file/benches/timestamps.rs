//! Timestamp columns at the speed of the scanner: the reader over 1M rows
//! (`id,status,created`) with `created` read as text (the scanner and the
//! reader alone) and as a timestamp, written as Unix seconds and as RFC
//! 3339; prints ns per row and the ratio of each timestamp read to its text
//! read (goal: at most 1.25, i.e. parsing costs at most a quarter of what
//! scanning the row does). A third file is the row users' jobs read
//! (`id,amount,currency,status,created`, the bench-diff pair's columns)
//! with `amount` as money, `currency` as a currency (four, in no order)
//! and `created` as a timestamp, against the same columns read as text
//! (goal: at most 1.25 too).
//!
//! Each form also prints the issue's own measure, "at the speed of the
//! CSV scanner", as rates: the bytes a text read gets through per ns
//! (the whole file over its read time) and the bytes the conversion gets
//! through per ns (the converted cells' bytes over the time the typed
//! read adds). Goal: the conversion at least as fast as the read.
//!
//! Run: `cargo bench -p recon-file --bench timestamps` (`ROWS` to change
//! the row count, `RUNS` the repeats, text and typed reads in turn, the
//! best run of each kept; `ONLY`
//! to read only the files whose name holds it, e.g. `ONLY=stripe` under
//! `perf record`).

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

/// The file's forms: `created` as Unix seconds or RFC 3339 beside a
/// status, or the typed Stripe-like row.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    Unix,
    Rfc3339,
    Typed,
}

/// Writes the file; returns its path, its size and the bytes of the
/// cells a typed read converts (what the text read hands on as text).
fn write(dir: &Path, name: &str, rows: usize, form: Form) -> (PathBuf, usize, usize) {
    let mut converted = 0;
    let mut text = String::from(match form {
        Form::Typed => "id,amount,currency,status,created\n",
        _ => "id,status,created\n",
    });
    let start = 1_793_491_200i64; // 2026-11-01T00:00:00Z
    for i in 0..rows {
        let t = start + (i as i64 * 7919) % 2_592_000;
        let created = if form == Form::Rfc3339 {
            jiff::Timestamp::from_second(t).unwrap().to_string()
        } else {
            t.to_string()
        };
        let key = format!("ch_{:024x}", i as u128 * 0x9E37_79B9);
        if form == Form::Typed {
            // In no order a branch predictor could learn, as in an export
            // (a cycle of four currencies hid the cost of a search).
            let mix = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 62;
            let currency = ["usd", "eur", "jpy", "gbp"][mix as usize];
            let amount = 100 + (i * 7_919) % 999_900;
            let amount = amount.to_string();
            converted += amount.len() + currency.len() + created.len();
            text.push_str(&format!("{key},{amount},{currency},succeeded,{created}\n"));
        } else {
            converted += created.len();
            text.push_str(&format!("{key},succeeded,{created}\n"));
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, &text).unwrap();
    (path, text.len(), converted)
}

/// One full read, in ns per row.
fn read(path: &Path, form: Form, typed: bool, rows: usize) -> f64 {
    let kind = |k: FieldKind| if typed { k } else { FieldKind::Text };
    let columns: Vec<(&str, FieldKind)> = match form {
        Form::Typed => vec![
            ("amount", kind(FieldKind::Money)),
            ("currency", kind(FieldKind::Currency)),
            ("status", FieldKind::Text),
            ("created", kind(FieldKind::Timestamp)),
        ],
        _ => vec![
            ("status", FieldKind::Text),
            ("created", kind(FieldKind::Timestamp)),
        ],
    };
    let schema = Schema {
        fields: columns
            .iter()
            .map(|&(name, kind)| Field {
                name: name.into(),
                kind,
                compared: true,
            })
            .collect(),
    };
    {
        let spec = FileSpec {
            path: path.to_path_buf(),
            key_column: "id".into(),
            columns: columns.iter().map(|&(name, _)| name.into()).collect(),
            currency_column: (form == Form::Typed).then(|| "currency".into()),
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
        assert_eq!(n, rows * columns.len());
        ns
    }
}

/// The best of `runs` text reads and of `runs` typed reads, taken in
/// turn (text, typed, text, ...): on a host whose speed drifts over
/// seconds, each form meets the same minutes (all text reads first, then
/// all typed ones, the RFC 3339 ratio of one invocation was 1.49 and of
/// the next 1.37, with the text read at 26.5 and 44.2 ns per row).
fn read_both(path: &Path, form: Form, rows: usize, runs: usize) -> (f64, f64) {
    let (mut text, mut typed) = (f64::MAX, f64::MAX);
    for _ in 0..runs {
        text = text.min(read(path, form, false, rows));
        typed = typed.min(read(path, form, true, rows));
    }
    (text, typed)
}

fn main() {
    let rows = env("ROWS", 1_000_000);
    let runs = env("RUNS", 5);
    let dir = std::env::temp_dir().join(format!("recon-ts-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let only = std::env::var("ONLY").unwrap_or_default();
    let mut worst: f64 = 0.0;
    let mut slowest: f64 = f64::MAX;
    for (name, form, typed_as) in [
        ("unix seconds", Form::Unix, "timestamp"),
        ("rfc 3339", Form::Rfc3339, "timestamp"),
        ("stripe row", Form::Typed, "typed"),
    ] {
        if !name.contains(&only) {
            continue;
        }
        let (path, size, converted) = write(&dir, &format!("{name}.csv"), rows, form);
        let (text, typed) = read_both(&path, form, rows, runs);
        let ratio = typed / text;
        worst = worst.max(ratio);
        println!(
            "{name:>13}: as text {text:6.1} ns/row, as {typed_as} {typed:6.1} ns/row, ratio {ratio:.2} (goal <= 1.25)"
        );
        // Bytes per ns: the text read's over the whole file, the
        // conversion's over the cells it converts (in the time it adds).
        let read_rate = size as f64 / (text * rows as f64);
        let parse_rate = converted as f64 / ((typed - text).max(f64::EPSILON) * rows as f64);
        let speed = parse_rate / read_rate;
        slowest = slowest.min(speed);
        println!(
            "{:>13}  read {read_rate:.2} B/ns, conversion {parse_rate:.2} B/ns of {:.1} B/row, {speed:.2}x the read's speed (goal >= 1)",
            "",
            converted as f64 / rows as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "worst ratio {worst:.2}: {}",
        if worst <= 1.25 { "OK" } else { "over the goal" }
    );
    println!(
        "slowest conversion {slowest:.2}x the read's speed: {}",
        if slowest >= 1.0 {
            "OK"
        } else {
            "under the goal"
        }
    );
}
