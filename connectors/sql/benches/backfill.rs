//! Backfill and windowed-read throughput of the SQL connector against the
//! local PostgreSQL (`RECON_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).
//!
//! Run with `cargo bench -p recon-sql --bench backfill`. This is a program
//! that prints numbers, not a test: nothing here asserts on time. It checks
//! correctness (row counts, idempotence) and prints the targets beside the
//! measurements.
//!
//! The windowed read runs first, while the process holds nothing else, so
//! that its peak RSS is not masked by the 200,000 generated records of the
//! backfill (memory freed by the allocator is not always returned to the OS).

use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Target, Value, Window,
    WriteMode, WriteOutcome,
};
use recon_sql::testing::TestDb;
use recon_sql::{Dialect, SqlTable, SqlTableConfig};
use sqlx::Row;

/// Records backfilled in the batched run.
const BACKFILL_ROWS: usize = 200_000;
/// Records written row by row for the baseline.
const BASELINE_ROWS: usize = 10_000;
/// Rows in the table read through a window.
const READ_ROWS: i64 = 1_000_000;
/// 2025-11-01T00:00:00Z; all `created` times fall in the 30 days after it.
const T0: i64 = 1_761_955_200;
const THIRTY_DAYS: i64 = 30 * 86_400;

const TARGET_ROWS_PER_SEC: f64 = 50_000.0;
const TARGET_RATIO: f64 = 10.0;

fn schema() -> Schema {
    let f = |name: &str, kind| Field {
        name: name.into(),
        kind,
        compared: true,
    };
    Schema {
        fields: vec![
            f("amount", FieldKind::Money),
            f("status", FieldKind::Text),
            f("created", FieldKind::Timestamp),
        ],
    }
}

fn ddl(table: &str) -> String {
    format!(
        "CREATE TABLE {table} (stripe_charge_id TEXT UNIQUE NOT NULL, amount_cents BIGINT, \
         currency TEXT, status TEXT, created_at TIMESTAMPTZ)"
    )
}

/// The connector's defaults (pool size, `write_batch`) for `table`.
fn config(db: &TestDb, table: &str) -> SqlTableConfig {
    let mut cfg = SqlTableConfig::new(
        Secret::new(db.url.clone()),
        table,
        "stripe_charge_id",
        vec!["amount_cents".into(), "status".into(), "created_at".into()],
    );
    cfg.currency_column = Some("currency".into());
    cfg.time_field = Some(2);
    cfg
}

/// SplitMix64: deterministic, dependency-free pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Stripe-charge-like records: `ch_` + 24 hex digits, money in
/// usd/eur/gbp/jpy, a status, and a creation time within 30 days.
fn charges(n: usize) -> Vec<Record> {
    let mut rng = Rng(0x5EED_2025);
    let currencies: Vec<Currency> = ["usd", "eur", "gbp", "jpy"]
        .iter()
        .map(|c| Currency::parse(c).expect("currency"))
        .collect();
    (0..n)
        .map(|i| {
            // The index in the low bits keeps every key unique.
            let key = format!("ch_{:016x}{:08x}", rng.next(), i as u32);
            let cur = rng.below(4) as usize;
            let minor = match cur {
                3 => 50 + rng.below(200_000) as i64,   // yen: no minor unit
                _ => 50 + rng.below(1_000_000) as i64, // cents
            };
            let status = match rng.below(100) {
                0..=84 => "succeeded",
                85..=94 => "failed",
                _ => "pending",
            };
            let created = T0 + (i as i64 * THIRTY_DAYS) / n as i64;
            Record {
                key,
                values: vec![
                    Value::Money(Money::from_minor(minor, currencies[cur])),
                    Value::Text(status.into()),
                    Value::Timestamp(jiff::Timestamp::from_second(created).expect("timestamp")),
                ],
            }
        })
        .collect()
}

/// `VmHWM` (peak RSS) and `VmRSS` of this process, in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

async fn scalar_i64(t: &SqlTable, sql: &str) -> i64 {
    sqlx::query(sql)
        .fetch_one(t.pool())
        .await
        .and_then(|r| r.try_get::<i64, _>(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

struct ReadResult {
    rows: u64,
    table_bytes: i64,
    elapsed: Duration,
    rss_before_kib: u64,
    hwm_before_kib: u64,
    hwm_after_kib: u64,
    rss_after_kib: u64,
}

async fn windowed_read(db: &TestDb) -> ReadResult {
    println!("== windowed read ==");
    db.exec(&ddl("charges_read")).await;
    let fill = Instant::now();
    db.exec(&format!(
        "INSERT INTO charges_read (stripe_charge_id, amount_cents, currency, status, created_at) \
         SELECT 'ch_' || substr(md5(g::text), 1, 24), \
                50 + (g * 7919) % 1000000, \
                (ARRAY['usd','eur','gbp','jpy'])[1 + g % 4], \
                (ARRAY['succeeded','succeeded','succeeded','succeeded','succeeded','succeeded','failed','pending'])[1 + g % 8], \
                to_timestamp({T0}) + ((g - 1) * {THIRTY_DAYS} / {READ_ROWS}) * interval '1 second' \
         FROM generate_series(1::bigint, {READ_ROWS}::bigint) AS g; \
         VACUUM ANALYZE charges_read"
    ))
    .await;
    let fill_time = fill.elapsed();
    let t = SqlTable::connect(config(db, "charges_read"), &schema())
        .await
        .expect("connect");
    let table_bytes = scalar_i64(&t, "SELECT pg_total_relation_size('charges_read')").await;
    println!(
        "filled {} rows server-side in {:.1} s; pg_total_relation_size = {:.1} MiB",
        thousands(READ_ROWS as u64),
        fill_time.as_secs_f64(),
        table_bytes as f64 / 1_048_576.0
    );

    // A window covering every row (created_at spans 30 days from T0).
    let window = Window {
        start: jiff::Timestamp::from_second(T0 - 86_400).expect("start"),
        end: jiff::Timestamp::from_second(T0 + THIRTY_DAYS + 86_400).expect("end"),
    };
    let (hwm_before_kib, rss_before_kib) = rss_kib();
    let start = Instant::now();
    let mut rows = 0u64;
    let mut pages = 0u64;
    {
        let mut stream = t.read(window);
        while let Some(page) = stream.try_next().await.expect("read") {
            rows += page.records.len() as u64;
            pages += 1;
        }
    }
    let elapsed = start.elapsed();
    let (hwm_after_kib, rss_after_kib) = rss_kib();
    println!(
        "read {} records in {} pages: {:.2} s, {} records/s",
        thousands(rows),
        thousands(pages),
        elapsed.as_secs_f64(),
        thousands(per_sec(rows as usize, elapsed).round() as u64)
    );
    println!(
        "RSS before read: {:.1} MiB (peak so far {:.1} MiB); after read: {:.1} MiB (peak {:.1} MiB); \
         peak grew {:.1} MiB during the read",
        mib(rss_before_kib),
        mib(hwm_before_kib),
        mib(rss_after_kib),
        mib(hwm_after_kib),
        mib(hwm_after_kib.saturating_sub(rss_before_kib))
    );
    if rows != READ_ROWS as u64 {
        println!(
            "WARNING: expected {} records, read {}",
            thousands(READ_ROWS as u64),
            thousands(rows)
        );
    }
    t.pool().close().await;
    ReadResult {
        rows,
        table_bytes,
        elapsed,
        rss_before_kib,
        hwm_before_kib,
        hwm_after_kib,
        rss_after_kib,
    }
}

struct BackfillResult {
    batched: f64,
    batched_time: Duration,
    baseline: f64,
    baseline_time: Duration,
    rerun_unchanged: usize,
    rerun_created: usize,
    rerun_time: Duration,
    count: i64,
}

fn tally(out: &[WriteOutcome]) -> (usize, usize, usize) {
    let created = out.iter().filter(|o| **o == WriteOutcome::Created).count();
    let unchanged = out
        .iter()
        .filter(|o| **o == WriteOutcome::Unchanged)
        .count();
    (created, unchanged, out.len() - created - unchanged)
}

async fn backfill(db: &TestDb) -> BackfillResult {
    println!("== backfill ==");
    let gen = Instant::now();
    let records = charges(BACKFILL_ROWS);
    println!(
        "generated {} records in {:.2} s (e.g. {} {:?})",
        thousands(BACKFILL_ROWS as u64),
        gen.elapsed().as_secs_f64(),
        records[0].key,
        records[0].values
    );

    // Batched: the default write_batch.
    db.exec(&ddl("payments")).await;
    let cfg = config(db, "payments");
    let batch = cfg.write_batch;
    let t = SqlTable::connect(cfg, &schema()).await.expect("connect");
    t.check_idempotent().await.expect("unique key");
    let start = Instant::now();
    let out = t
        .write(&records, WriteMode::Insert)
        .await
        .expect("batched write");
    let batched_time = start.elapsed();
    let batched = per_sec(records.len(), batched_time);
    let (created, unchanged, other) = tally(&out);
    println!(
        "batched (write_batch = {batch}): {} rows in {:.2} s = {} rows/s ({} per batch of {batch}); \
         outcomes: {created} created, {unchanged} unchanged, {other} other",
        thousands(records.len() as u64),
        batched_time.as_secs_f64(),
        thousands(batched.round() as u64),
        fmt_ms(batched_time / (records.len() / batch) as u32),
    );
    let count = t.count().await.expect("count");
    println!(
        "COUNT(*) after batched run: {} ({})",
        thousands(count as u64),
        if count == BACKFILL_ROWS as i64 {
            "ok"
        } else {
            "WRONG"
        }
    );

    // Idempotent re-run: the same records again.
    let start = Instant::now();
    let out = t.write(&records, WriteMode::Insert).await.expect("re-run");
    let rerun_time = start.elapsed();
    let (rerun_created, rerun_unchanged, other) = tally(&out);
    let count_after = t.count().await.expect("count");
    println!(
        "idempotent re-run: {rerun_unchanged} unchanged, {rerun_created} created, {other} other in {:.2} s \
         ({} rows/s); COUNT(*) still {} ({})",
        rerun_time.as_secs_f64(),
        thousands(per_sec(records.len(), rerun_time).round() as u64),
        thousands(count_after as u64),
        if rerun_created == 0 && rerun_unchanged == records.len() && count_after == count {
            "ok"
        } else {
            "WRONG"
        }
    );
    t.pool().close().await;

    // Row-at-a-time baseline in a fresh table.
    db.exec(&ddl("payments_rowwise")).await;
    let mut cfg = config(db, "payments_rowwise");
    cfg.write_batch = 1;
    let t = SqlTable::connect(cfg, &schema()).await.expect("connect");
    let some = &records[..BASELINE_ROWS];
    let start = Instant::now();
    let out = t
        .write(some, WriteMode::Insert)
        .await
        .expect("row-at-a-time write");
    let baseline_time = start.elapsed();
    let baseline = per_sec(some.len(), baseline_time);
    let (created, _, _) = tally(&out);
    println!(
        "row-at-a-time (write_batch = 1): {} rows in {:.2} s = {} rows/s ({} per row); {created} created; \
         extrapolated to {} rows: {:.0} s",
        thousands(some.len() as u64),
        baseline_time.as_secs_f64(),
        thousands(baseline.round() as u64),
        fmt_ms(baseline_time / some.len() as u32),
        thousands(BACKFILL_ROWS as u64),
        BACKFILL_ROWS as f64 / baseline
    );
    t.pool().close().await;

    BackfillResult {
        batched,
        batched_time,
        baseline,
        baseline_time,
        rerun_unchanged,
        rerun_created,
        rerun_time,
        count,
    }
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    println!("recon-sql backfill benchmark (PostgreSQL)");
    let db = TestDb::create(Dialect::Postgres).await;
    let r = windowed_read(&db).await;
    let b = backfill(&db).await;
    db.drop_db().await;

    let ratio = b.batched / b.baseline;
    println!();
    println!("== summary ==");
    println!(
        "backfill {BACKFILL_ROWS} rows into PostgreSQL: batched {} rows/s ({:.1} s); \
         row-at-a-time {} rows/s (extrapolated from {} rows, {:.1} s); ratio {:.0}x \
         (targets: >= 50,000 rows/s {}, >= 10x {})",
        thousands(b.batched.round() as u64),
        b.batched_time.as_secs_f64(),
        thousands(b.baseline.round() as u64),
        thousands(BASELINE_ROWS as u64),
        b.baseline_time.as_secs_f64(),
        ratio,
        met(b.batched >= TARGET_ROWS_PER_SEC),
        met(ratio >= TARGET_RATIO),
    );
    println!(
        "idempotent re-run: {} unchanged, {} created, {:.1} s (COUNT(*) = {} after the batched run)",
        b.rerun_unchanged,
        b.rerun_created,
        b.rerun_time.as_secs_f64(),
        b.count
    );
    println!(
        "windowed read of {} rows (table {:.0} MiB): {:.1} s, {} rows/s, RSS grew {:.1} MiB \
         (peak {:.0} MiB; before {:.0} MiB, peak before {:.0} MiB, after {:.0} MiB)",
        thousands(r.rows),
        r.table_bytes as f64 / 1_048_576.0,
        r.elapsed.as_secs_f64(),
        thousands(per_sec(r.rows as usize, r.elapsed).round() as u64),
        mib(r.hwm_after_kib.saturating_sub(r.rss_before_kib)),
        mib(r.hwm_after_kib),
        mib(r.rss_before_kib),
        mib(r.hwm_before_kib),
        mib(r.rss_after_kib),
    );
}
