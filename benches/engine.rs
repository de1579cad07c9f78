//! The diff engine alone, without files: `cargo bench --bench engine [-- N]`.
//!
//! Indexes N source records shaped like the bench-diff pair's (random
//! `ch_` + 24 hex IDs, money, currency, status, and `created` compared as
//! text), then probes N target records (the same records in another order,
//! 1% with another amount), and prints the best of five runs of each
//! phase in ns per row, encoding the rows into batches (the reader
//! thread's share) first. What the 10M-row `recon diff` spends on its
//! engine thread, measured without the reader beside it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use recon::diff::{DiffEngine, DiffSpec, RecordBatch};
use recon_core::{Currency, Field, FieldKind, Money, Schema, ValueRef};

struct Row {
    key: String,
    minor: i64,
    currency: Currency,
    status: &'static str,
    created: String,
}

/// A xorshift64 generator: the same numbers on every run.
fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn rows(n: usize, seed: u64) -> Vec<Row> {
    let mut next = xorshift(seed);
    let currencies = ["usd", "eur", "gbp", "jpy"].map(|c| Currency::parse(c).unwrap());
    (0..n)
        .map(|_| {
            let (a, b) = (next(), next());
            Row {
                key: format!("ch_{:016x}{:08x}", a, b as u32),
                minor: (next() % 1_000_000) as i64,
                currency: currencies[(next() % 4) as usize],
                status: ["succeeded", "succeeded", "succeeded", "pending", "failed"]
                    [(next() % 5) as usize],
                created: (1_793_491_200 + next() % 2_592_000).to_string(),
            }
        })
        .collect()
}

/// The bench's four fields, of these kinds.
fn spec(kinds: [FieldKind; 4]) -> DiffSpec {
    let names = ["amount", "currency", "status", "created"];
    let fields = names.iter().zip(kinds).map(|(name, kind)| Field {
        name: (*name).into(),
        kind,
        compared: true,
    });
    DiffSpec::new(
        Schema {
            fields: fields.collect(),
        },
        vec![None; 4],
    )
}

/// The rows in batches of 8192, each row's values as `values` gives them.
fn batches<'a>(
    spec: &DiffSpec,
    rows: &'a [Row],
    values: impl Fn(usize, &'a Row) -> [ValueRef<'a>; 4],
) -> Vec<RecordBatch> {
    let mut out: Vec<RecordBatch> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        if i % 8192 == 0 {
            out.push(RecordBatch::new(spec));
        }
        let b = out.last_mut().expect("a batch was just made");
        b.push(&r.key, &values(i, r)).unwrap();
    }
    out
}

/// A row's values as the engine's typed fields hold them.
fn typed(_: usize, r: &Row) -> [ValueRef<'_>; 4] {
    let money = ValueRef::Money(Money {
        minor: r.minor,
        currency: r.currency,
    });
    [
        money,
        ValueRef::Currency(r.currency),
        ValueRef::Text(r.status),
        ValueRef::Text(&r.created),
    ]
}

/// The shortest of five runs of `f`, its result dropped within each.
fn best_of_five<T>(mut f: impl FnMut() -> T) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        black_box(f());
        best = best.min(t.elapsed());
    }
    best
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    use FieldKind::{Currency as Code, Money as Amount, Text};
    // As declared in a job (money, currency), and as `recon diff` reads
    // the same columns (every value text).
    let (text_spec, spec) = (spec([Text; 4]), spec([Amount, Code, Text, Text]));
    let source = rows(n, 0x9e37_79b9_7f4a_7c15);
    let mut target: Vec<Row> = rows(n, 0x9e37_79b9_7f4a_7c15);
    // Another order (a fixed shuffle), 1% other amounts.
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    for i in (1..target.len()).rev() {
        target.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    for r in target.iter_mut().step_by(100) {
        r.minor += 1;
    }
    // Text in memory in row order, as in a reader's buffer: the shuffle
    // left each row's strings where they were made, and every key read
    // missed the cache (three quarters of the encoding time).
    let target: Vec<Row> = target
        .iter()
        .map(|r| Row {
            key: r.key.clone(),
            created: r.created.clone(),
            ..*r
        })
        .collect();
    // Encoding the rows into batches is the reader thread's share.
    let encode = best_of_five(|| batches(&spec, &target, typed));
    // The same rows as `recon diff` reads them (no fields declared): every
    // value text, the currency a three-letter code.
    let codes: Vec<String> = target
        .iter()
        .map(|r| r.currency.code().to_lowercase())
        .collect();
    let minors: Vec<String> = target.iter().map(|r| r.minor.to_string()).collect();
    let encode_text = best_of_five(|| {
        batches(&text_spec, &target, |i, r| {
            [
                ValueRef::Text(&minors[i]),
                ValueRef::Text(&codes[i]),
                ValueRef::Text(r.status),
                ValueRef::Text(&r.created),
            ]
        })
    });
    let (src, tgt) = (
        batches(&spec, &source, typed),
        batches(&spec, &target, typed),
    );
    let (mut load, mut probe, mut finish) = (Duration::MAX, Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        let mut engine = DiffEngine::new(spec.clone());
        engine.reserve_source(n);
        let t = Instant::now();
        for b in &src {
            engine.add_source_batch(b).unwrap();
        }
        load = load.min(t.elapsed());
        let t = Instant::now();
        for b in &tgt {
            engine.add_target_batch(b);
        }
        probe = probe.min(t.elapsed());
        let t = Instant::now();
        let outcome = black_box(engine.finish());
        finish = finish.min(t.elapsed());
        assert_eq!(outcome.mismatches.len(), n.div_ceil(100));
    }
    let per_row = |d: Duration| d.as_nanos() as f64 / n as f64;
    println!(
        "engine, {n} rows: encode {:.1} ns/row (all text {:.1}), index {:.1} ns/row, probe {:.1} ns/row, finish {:.1} ns/row (best of 5)",
        per_row(encode),
        per_row(encode_text),
        per_row(load),
        per_row(probe),
        per_row(finish)
    );
}
