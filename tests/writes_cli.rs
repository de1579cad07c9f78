//! Writes you can trust, end to end through the binary against real
//! databases: the right row, a truthful outcome, a prompt stop.
//!
//! - MariaDB: an upsert never touches a row other than the one with its key,
//!   even when another unique index collides; a case variant of a key under
//!   a case-insensitive collation is a failed item, never "created".
//! - PostgreSQL: a database that goes away mid-apply (a TCP proxy killed
//!   from the test, or `DROP DATABASE … WITH (FORCE)`) ends the run within
//!   seconds with exit 2 and status `failed`; the batch in flight is
//!   recorded `unknown` and the next run settles it by key lookup.
//! - PostgreSQL state store: a run whose advisory-lock session is
//!   terminated stops writing at once (exit 2).
//! - Backfilled values look like the table's own rows (currency case,
//!   timestamp text).
//! - A DEFERRABLE unique constraint is refused with a fix that works.

mod common;

use common::{count, spawn_piped, summary, text, Stderr, PATIENCE};

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use recon::state::prelude::*;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;
use sqlx::{Connection, Row};

/// 2026-11-28T00:00:00Z.
const DAY_START: i64 = 1_795_824_000;

/// A job: CSV source `charges.csv` (id, amount, currency, email, created)
/// against a SQL target table.
struct Job {
    dir: tempfile::TempDir,
}

struct JobSpec<'a> {
    url: &'a str,
    table: &'a str,
    mode: &'a str,
    write_batch: usize,
    state: Option<&'a str>,
    /// Extra target settings.
    target_extra: &'a str,
    /// Map `email` to a column, or leave it out of the job.
    with_email: bool,
}

impl<'a> JobSpec<'a> {
    /// An insert job into `payments` at `url`, `write_batch` rows a batch,
    /// with `state` (None: SQLite beside the job).
    fn inserts(url: &'a str, write_batch: usize, state: Option<&'a str>) -> JobSpec<'a> {
        JobSpec {
            url,
            table: "payments",
            mode: "insert",
            write_batch,
            state,
            target_extra: "",
            with_email: false,
        }
    }
}

impl Job {
    fn new(rows: &[(&str, i64, &str, &str, i64)]) -> Job {
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("id,amount,currency,email,created\n");
        for (id, amount, cur, email, created) in rows {
            csv.push_str(&format!("{id},{amount},{cur},{email},{created}\n"));
        }
        std::fs::write(dir.path().join("charges.csv"), csv).unwrap();
        Job { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn configure(&self, spec: &JobSpec) {
        let state = spec
            .state
            .map(str::to_string)
            .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", self.path("state.db").display()));
        let (fields, compare) = if spec.with_email {
            (
                r#"{ amount = "money", currency = "currency", email = "text", created = "timestamp" }"#,
                r#"["amount", "currency", "email"]"#,
            )
        } else {
            (
                r#"{ amount = "money", currency = "currency", created = "timestamp" }"#,
                r#"["amount", "currency"]"#,
            )
        };
        let text = format!(
            r#"
[defaults]
timezone = "UTC"
reports = "{reports}"
state = "{state}"

[jobs.charges]
fields = {fields}
compare = {compare}
window = "2026-11-28"

{source}
{target}write_batch = {batch}
{extra}

[jobs.charges.backfill]
mode = "{mode}"
max_records = 100000
max_ratio = 1.0
"#,
            reports = self.path("reports").display(),
            source = common::file_side("charges", "source", &self.path("charges.csv")),
            target = common::sql_target("charges", spec.url, spec.table, "stripe_charge_id"),
            batch = spec.write_batch,
            extra = spec.target_extra,
            mode = spec.mode,
        );
        std::fs::write(self.path("recon.toml"), text).unwrap();
    }

    fn command(&self, out: &str) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"));
        c.arg("run")
            .arg("--config")
            .arg(self.path("recon.toml"))
            .arg("--out")
            .arg(self.path(out));
        c
    }

    fn run(&self, out: &str) -> Output {
        Command::from_std(self.command(out)).output().unwrap()
    }
}

/// `backfill.csv` rows as (external_id, action, outcome, error).
fn backfill(dir: &Path) -> Vec<(String, String, String, String)> {
    let mut r = csv::Reader::from_path(dir.join("backfill.csv")).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|x| x == name).unwrap();
    let (id, action, outcome, error) = (
        col("external_id"),
        col("action"),
        col("outcome"),
        col("error"),
    );
    let mut rows: Vec<_> = r
        .records()
        .map(|x| {
            let x = x.unwrap();
            (
                x[id].to_string(),
                x[action].to_string(),
                x[outcome].to_string(),
                x[error].to_string(),
            )
        })
        .collect();
    rows.sort();
    rows
}

async fn query_rows(url: &str, sql: &str, n: usize) -> Vec<Vec<String>> {
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let rows = sqlx::query(sql).fetch_all(&mut conn).await.unwrap();
    conn.close().await.ok();
    let mut out: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            (0..n)
                .map(|i| {
                    r.try_get::<Option<String>, _>(i)
                        .unwrap()
                        .unwrap_or_default()
                })
                .collect()
        })
        .collect();
    out.sort();
    out
}

fn state_url(job: &Job) -> String {
    format!("sqlite://{}", job.path("state.db").display())
}

/// Statuses of the job's runs, oldest first.
async fn run_statuses(job: &Job) -> Vec<String> {
    let mut conn = sqlx::AnyConnection::connect(&state_url(job)).await.unwrap();
    let rows = sqlx::query("SELECT status FROM recon_runs ORDER BY started_at, rowid")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).unwrap())
        .collect()
}

#[tokio::test]
async fn mariadb_upsert_changes_only_the_row_with_its_key() {
    let db = TestDb::create(Dialect::MySql).await;
    db.exec(
        "CREATE TABLE pay (id INT AUTO_INCREMENT PRIMARY KEY, \
         stripe_charge_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL UNIQUE, \
         email VARCHAR(64) UNIQUE, amount_cents BIGINT, currency VARCHAR(3), created_at DATETIME)",
    )
    .await;
    db.exec(
        "INSERT INTO pay (stripe_charge_id, email, amount_cents, currency, created_at) VALUES \
         ('ch_AAA', 'alice', 1000, 'usd', '2026-11-28 01:00:00'), \
         ('ch_BBB', 'bob', 2000, 'usd', '2026-11-28 02:00:00')",
    )
    .await;
    let job = Job::new(&[
        // A new amount: updated in place.
        ("ch_AAA", 1500, "usd", "alice", DAY_START + 3600),
        // A new amount and alice's email: the update collides on `email`.
        ("ch_BBB", 2500, "usd", "alice", DAY_START + 7200),
        ("ch_DDD", 700, "usd", "carol", DAY_START + 9000),
        // A gap whose email belongs to ch_BBB: the insert collides.
        ("ch_EEE", 800, "usd", "bob", DAY_START + 9500),
    ]);
    job.configure(&JobSpec {
        url: &db.url,
        table: "pay",
        mode: "upsert",
        write_batch: 100,
        state: None,
        target_extra: "",
        with_email: true,
    });
    let o = job.run("out");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let rows = backfill(&job.path("out"));
    assert_eq!(rows.len(), 4, "{rows:?}");
    let row = |i: usize| (rows[i].0.as_str(), rows[i].1.as_str(), rows[i].2.as_str());
    assert_eq!(row(0), ("ch_AAA", "update", "updated"), "{rows:?}");
    assert_eq!(row(1), ("ch_BBB", "update", "failed"), "{rows:?}");
    assert!(
        rows[1].3.contains("email"),
        "the failure names the index: {rows:?}"
    );
    assert_eq!(row(2), ("ch_DDD", "insert", "created"), "{rows:?}");
    assert_eq!(row(3), ("ch_EEE", "insert", "failed"), "{rows:?}");
    assert!(rows[3].3.contains("email"), "{rows:?}");
    assert_eq!(run_statuses(&job).await, ["discrepancies"]);
    let table = query_rows(
        &db.url,
        "SELECT stripe_charge_id, email, CAST(amount_cents AS CHAR) FROM pay",
        3,
    )
    .await;
    assert_eq!(
        table,
        [
            ["ch_AAA", "alice", "1500"],
            ["ch_BBB", "bob", "2000"],
            ["ch_DDD", "carol", "700"],
        ],
        "ch_AAA updated in place, ch_DDD created; ch_BBB untouched"
    );
    let s = summary(&job.path("out"));
    assert_eq!(s["backfilled"], 2, "{s}");
    assert_eq!(s["backfill_failed"], 2, "{s}");
    db.drop_db().await;
}

#[tokio::test]
async fn mariadb_case_variant_key_is_failed_not_created() {
    let db = TestDb::create(Dialect::MySql).await;
    db.exec(
        "CREATE TABLE pay (stripe_charge_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL UNIQUE, \
         amount_cents BIGINT, currency VARCHAR(3), created_at DATETIME)",
    )
    .await;
    db.exec(
        "INSERT INTO pay VALUES ('ch_ccc', 500, 'usd', '2026-11-28 01:00:00'), ('ch_ok', 600, 'usd', '2026-11-28 01:00:00')",
    )
    .await;
    let job = Job::new(&[
        ("ch_CCC", 500, "usd", "x", DAY_START + 3600),
        ("ch_ok", 600, "usd", "x", DAY_START + 3600),
        ("ch_new", 700, "usd", "x", DAY_START + 3600),
    ]);
    job.configure(&JobSpec {
        url: &db.url,
        table: "pay",
        mode: "insert",
        write_batch: 100,
        state: None,
        target_extra: "",
        with_email: false,
    });
    for out in ["first", "second"] {
        let o = job.run(out);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        // The fix is named: the key column made exact.
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("ALTER TABLE") && err.contains("COLLATE utf8mb4_bin"),
            "{err}"
        );
        let rows = backfill(&job.path(out));
        let ccc = rows
            .iter()
            .find(|r| r.0 == "ch_CCC")
            .expect("ch_CCC planned");
        assert_eq!(ccc.2, "failed", "{rows:?}");
        assert!(
            ccc.3.contains("ch_ccc") && ccc.3.contains("collation"),
            "{rows:?}"
        );
        let s = summary(&job.path(out));
        assert_eq!(s["backfill_failed"], 1, "{s}");
    }
    // ch_new was created exactly once, on the first run; ch_CCC never was.
    let first = backfill(&job.path("first"));
    assert!(
        first.iter().any(|r| r.0 == "ch_new" && r.2 == "created"),
        "{first:?}"
    );
    let table = query_rows(&db.url, "SELECT stripe_charge_id FROM pay", 1).await;
    assert_eq!(table, [["ch_ccc"], ["ch_new"], ["ch_ok"]]);
    assert_eq!(run_statuses(&job).await, ["discrepancies", "discrepancies"]);
    db.drop_db().await;
}

/// A TCP proxy in front of a server that kills itself when the client sends
/// what it watches for: open connections are shut down and new ones are
/// closed at once.
struct Proxy {
    port: u16,
    killed: Arc<AtomicBool>,
}

/// What a client → server pump watches for.
#[derive(Clone)]
struct Watch {
    /// `(bytes, n)`: once the client sent these bytes, its `n`-th packet
    /// after them (on any connection; 0: that very packet) kills the proxy
    /// before it reaches the server (a connection lost in the middle of a
    /// query). Counted in packets, not time: a fast machine must not finish
    /// first.
    cut_on: Option<(&'static [u8], usize)>,
    /// Client packets since `cut_on`'s bytes were first seen.
    after: Arc<Mutex<Option<usize>>>,
    killed: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// A proxy that kills itself as `cut_on` says.
    fn cutting(upstream: &str, cut_on: Option<(&'static [u8], usize)>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let watch = Watch {
            cut_on,
            after: Arc::default(),
            killed: Arc::new(AtomicBool::new(false)),
            conns: Arc::default(),
        };
        let upstream = upstream.to_string();
        let w = watch.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if w.killed.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                {
                    let mut list = w.conns.lock().unwrap();
                    list.push(client.try_clone().unwrap());
                    list.push(server.try_clone().unwrap());
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let seen = w.clone();
                std::thread::spawn(move || pump(client, server, Some(seen)));
                std::thread::spawn(move || pump(s2, c2, None));
            }
        });
        Proxy {
            port,
            killed: watch.killed,
        }
    }
}

fn kill(killed: &AtomicBool, conns: &Mutex<Vec<TcpStream>>) {
    killed.store(true, Ordering::SeqCst);
    for s in conns.lock().unwrap().drain(..) {
        let _ = s.shutdown(Shutdown::Both);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, watch: Option<Watch>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(w) = &watch {
            let has = |pattern: &[u8]| buf[..n].windows(pattern.len()).any(|x| x == pattern);
            if let Some((pattern, n)) = w.cut_on {
                let mut after = w.after.lock().unwrap();
                match *after {
                    Some(ref mut k) => *k += 1,
                    None if has(pattern) => *after = Some(0),
                    None => {}
                }
                if *after >= Some(n) {
                    kill(&w.killed, &w.conns);
                    break;
                }
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

const GAPS: usize = 3000;

fn many_gaps() -> Job {
    let rows: Vec<(String, i64)> = (0..GAPS)
        .map(|i| (format!("ch_{i:05}"), DAY_START + 60 + i as i64))
        .collect();
    let refs: Vec<(&str, i64, &str, &str, i64)> = rows
        .iter()
        .map(|(id, t)| (id.as_str(), 1234, "usd", "x", *t))
        .collect();
    Job::new(&refs)
}

async fn payments_table(db: &TestDb) {
    db.exec(match db.dialect {
        Dialect::MySql => {
            "CREATE TABLE payments (stripe_charge_id VARCHAR(64) CHARACTER SET utf8mb4 \
             COLLATE utf8mb4_bin NOT NULL UNIQUE, amount_cents BIGINT, currency VARCHAR(3), \
             created_at DATETIME(6))"
        }
        _ => {
            "CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, amount_cents BIGINT, \
             currency TEXT, created_at TIMESTAMPTZ)"
        }
    })
    .await;
}

/// A SQLite `payments` table whose times are stored as text.
async fn sqlite_payments_table(db: &TestDb) {
    db.exec(
        "CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, amount_cents INTEGER, currency TEXT, created_at TEXT)",
    )
    .await;
}

/// Waits for the child, up to `limit`; kills it past that, failing.
fn wait(child: std::process::Child, limit: Duration) -> Output {
    common::finish_within(child, limit)
}

/// Runs the lost-database scenario: `lose` makes the database go away once
/// the apply started. Returns the job (for the rerun) after checking run 1.
async fn lost_mid_apply(db: &TestDb, via: &str, lose: impl FnOnce()) -> Job {
    payments_table(db).await;
    let job = many_gaps();
    job.configure(&JobSpec {
        url: via,
        table: "payments",
        mode: "insert",
        // Multi-row batches: a connection error must end the call, never
        // fall into the row-by-row retry meant for refused data.
        write_batch: 5,
        state: None,
        target_extra: "",
        with_email: false,
    });
    let child = spawn_piped(&mut job.command("run1"));
    let started = Instant::now();
    lose();
    // A run that does not end is killed after 120 s and fails the test.
    let o = wait(child, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown"), "{err}");
    assert!(!job.path("run1").exists(), "a failed run writes no reports");
    let state = state_url(&job);
    let status = query_rows(&state, "SELECT status FROM recon_runs", 1).await;
    assert_eq!(status, [["failed"]], "took {:?}", started.elapsed());
    let unknown = count(
        &state,
        "SELECT COUNT(*) FROM recon_backfill_items WHERE status = 'unknown'",
    )
    .await;
    assert!(unknown >= 1, "the batch in flight is unknown");
    let failed = count(
        &state,
        "SELECT COUNT(*) FROM recon_backfill_items WHERE status = 'failed'",
    )
    .await;
    assert_eq!(failed, 0, "nothing is called failed that may be committed");
    job
}

/// The next run settles the unknown items by key lookup and writes every
/// gap exactly once.
async fn rerun_settles(job: &Job, db: &TestDb) {
    let written_before = count(&db.url, "SELECT COUNT(*) FROM payments").await;
    job.configure(&JobSpec::inserts(&db.url, 500, None));
    let o = job.run("run2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let state = state_url(job);
    assert_eq!(
        count(
            &state,
            "SELECT COUNT(*) FROM recon_backfill_items WHERE status = 'unknown'"
        )
        .await,
        0
    );
    let runs = query_rows(
        &state,
        "SELECT id FROM recon_runs WHERE status = 'failed'",
        1,
    )
    .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let first_run = &runs[0][0];
    // Run 1's items now say what the table held when run 2 began.
    let applied_1 = count(
        &state,
        &format!("SELECT COUNT(*) FROM recon_backfill_items WHERE plan_id = '{first_run}' AND status = 'applied'"),
    )
    .await;
    assert_eq!(applied_1, written_before, "settled by key lookup");
    each_gap_once(job, db, written_before).await;
}

/// The table holds every gap exactly once after run 2, which wrote what
/// run 1 had not (`written_before` rows).
async fn each_gap_once(job: &Job, db: &TestDb, written_before: i64) {
    assert_eq!(
        count(&db.url, "SELECT COUNT(*) FROM payments").await,
        GAPS as i64
    );
    assert_eq!(
        count(
            &db.url,
            "SELECT COUNT(DISTINCT stripe_charge_id) FROM payments"
        )
        .await,
        GAPS as i64
    );
    assert_eq!(
        summary(&job.path("run2"))["backfilled"],
        GAPS as i64 - written_before
    );
}

/// The database's connection is cut (a proxy in front of it killed) once
/// the writes began; the run fails fast, and the next settles and writes
/// every gap once.
async fn killed_proxy_mid_apply(dialect: Dialect, upstream: &str) {
    let db = TestDb::create(dialect).await;
    // The 12th packet after the first INSERT (a few batches of 5 in): the
    // statements are prepared once per connection, so later batches carry
    // no SQL text to watch for.
    let proxy = Proxy::cutting(upstream, Some((b"INSERT INTO", 12)));
    let via = db
        .url
        .replace(upstream, &format!("127.0.0.1:{}", proxy.port));
    assert_ne!(via, db.url);
    let job = lost_mid_apply(&db, &via, || {}).await;
    assert!(proxy.killed.load(Ordering::SeqCst));
    let written = count(&db.url, "SELECT COUNT(*) FROM payments").await;
    assert!(
        written > 0 && written < GAPS as i64,
        "killed mid-apply: {written}"
    );
    rerun_settles(&job, &db).await;
    db.drop_db().await;
}

#[tokio::test]
async fn postgres_killed_proxy_mid_apply_fails_fast_and_settles_next_run() {
    killed_proxy_mid_apply(Dialect::Postgres, "127.0.0.1:5432").await;
}

/// MySQL/MariaDB writes a batch as a key lookup, then UPDATE/INSERT, in one
/// transaction: a connection lost inside it leaves the server to roll the
/// batch back, and recon cannot know whether the COMMIT got there. The
/// batch is unknown, never failed or applied, and the next run settles it
/// by key and writes every gap once.
#[tokio::test]
async fn mariadb_killed_proxy_mid_transaction_fails_fast_and_settles_next_run() {
    killed_proxy_mid_apply(Dialect::MySql, "127.0.0.1:3306").await;
}

/// The target's connection is lost in the middle of the edge lookup (the
/// proxy dies as the lookup query leaves): the run fails (exit 2) naming
/// the lookup, writes nothing and no reports, plans nothing; the next run
/// writes every gap once.
#[tokio::test]
async fn postgres_connection_lost_mid_lookup_fails_and_writes_nothing() {
    let db = TestDb::create(Dialect::Postgres).await;
    payments_table(&db).await;
    // A row from long before the window: the table holds what the window
    // read leaves out, so the gaps are looked up by key (into a table
    // holding none, nothing could be found and no look-up is sent).
    db.exec(
        "INSERT INTO payments (stripe_charge_id, amount_cents, currency, created_at) \
         VALUES ('ch_old', 100, 'USD', '2020-01-01T00:00:00Z')",
    )
    .await;
    let proxy = Proxy::cutting("127.0.0.1:5432", Some((b"json_array_elements_text", 0)));
    let via = db
        .url
        .replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port));
    let job = many_gaps();
    job.configure(&JobSpec::inserts(&via, 500, None));
    let child = spawn_piped(&mut job.command("run1"));
    let o = wait(child, Duration::from_secs(120));
    assert!(
        proxy.killed.load(Ordering::SeqCst),
        "the lookup was sent: {}",
        text(&o)
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("confirming gaps by key in the target"),
        "{err}"
    );
    assert!(!job.path("run1").exists(), "a failed run writes no reports");
    assert_eq!(
        count(&db.url, "SELECT COUNT(*) FROM payments").await,
        1,
        "nothing written beside the old row"
    );
    let state = state_url(&job);
    assert_eq!(
        query_rows(&state, "SELECT status FROM recon_runs", 1).await,
        [["failed"]]
    );
    assert_eq!(
        count(&state, "SELECT COUNT(*) FROM recon_backfill_items").await,
        0,
        "nothing planned before the lookup settled"
    );
    db.exec("DELETE FROM payments WHERE stripe_charge_id = 'ch_old'")
        .await;
    rerun_settles(&job, &db).await;
    db.drop_db().await;
}

#[tokio::test]
async fn postgres_database_dropped_mid_apply_fails_fast() {
    let db = TestDb::create(Dialect::Postgres).await;
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let url = db.url.clone();
    let job = lost_mid_apply(&db, &db.url.clone(), || {
        // Its own thread and runtime: the test's runtime is busy waiting.
        std::thread::spawn(move || drop_when_writing(&url, &name))
            .join()
            .unwrap();
    })
    .await;
    drop(job);
    db.drop_db().await;
}

fn drop_when_writing(url: &str, name: &str) {
    {
        // The apply has started once the first rows are there.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            common::wait_until_async("the apply started (over 20 rows)", PATIENCE, || async {
                let Ok(mut c) = sqlx::AnyConnection::connect(url).await else {
                    return false;
                };
                let n: i64 = sqlx::query("SELECT COUNT(*) FROM payments")
                    .fetch_one(&mut c)
                    .await
                    .and_then(|r| r.try_get(0))
                    .unwrap_or(0);
                c.close().await.ok();
                n > 20
            })
            .await;
            let admin = url.replace(&format!("/{name}"), "/test");
            let mut c = sqlx::AnyConnection::connect(&admin).await.unwrap();
            sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
                .execute(&mut c)
                .await
                .unwrap();
        });
    }
}

#[tokio::test]
async fn postgres_lost_run_lock_stops_writing() {
    let state_db = TestDb::create(Dialect::Postgres).await;
    let target = TestDb::create(Dialect::Postgres).await;
    payments_table(&target).await;
    let job = many_gaps();
    job.configure(&JobSpec::inserts(&target.url, 1, Some(&state_db.url)));
    let child = spawn_piped(&mut job.command("run1"));
    common::wait_until_async("the apply started (20 rows)", PATIENCE, || async {
        count(&target.url, "SELECT COUNT(*) FROM payments").await >= 20
    })
    .await;
    let name = state_db.url.rsplit('/').next().unwrap().to_string();
    let killed = count(
        &state_db.url,
        &format!(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(l.pid) FROM pg_locks l \
             JOIN pg_database d ON d.oid = l.database \
             WHERE l.locktype = 'advisory' AND d.datname = '{name}') t"
        ),
    )
    .await;
    assert_eq!(killed, 1, "one advisory-lock session");
    let o = wait(child, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("lost the run lock"),
        "{}",
        text(&o)
    );
    let written = count(&target.url, "SELECT COUNT(*) FROM payments").await;
    assert!(written < GAPS as i64, "stopped before the end: {written}");
    // Writing stopped: once no session of the run is left on the target
    // (none can still be finishing a statement), nothing more has arrived.
    let others = "SELECT COUNT(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()";
    common::wait_until_async(
        "the run's sessions on the target closed",
        PATIENCE,
        || async { count(&target.url, others).await == 0 },
    )
    .await;
    assert_eq!(
        count(&target.url, "SELECT COUNT(*) FROM payments").await,
        written
    );
    let status = query_rows(&state_db.url, "SELECT status FROM recon_runs", 1).await;
    assert_eq!(status, [["failed"]]);
    // The next run finishes the job, each gap once.
    job.configure(&JobSpec::inserts(&target.url, 500, Some(&state_db.url)));
    let o = job.run("run2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        count(
            &target.url,
            "SELECT COUNT(DISTINCT stripe_charge_id) FROM payments"
        )
        .await,
        GAPS as i64
    );
    assert_eq!(
        count(&target.url, "SELECT COUNT(*) FROM payments").await,
        GAPS as i64
    );
    target.drop_db().await;
    state_db.drop_db().await;
}

#[tokio::test]
async fn sqlite_backfilled_rows_look_like_the_tables_own() {
    let db = TestDb::create(Dialect::Sqlite).await;
    sqlite_payments_table(&db).await;
    db.exec("INSERT INTO payments VALUES ('ch_1', 100, 'eur', '2026-11-28T01:00:00Z')")
        .await;
    let job = Job::new(&[
        ("ch_1", 100, "eur", "x", DAY_START + 3600),
        ("ch_2", 200, "eur", "x", DAY_START + 7261),
    ]);
    job.configure(&JobSpec::inserts(&db.url, 10, None));
    let o = job.run("out");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rows = query_rows(
        &db.url,
        "SELECT stripe_charge_id, currency, created_at FROM payments",
        3,
    )
    .await;
    assert_eq!(
        rows,
        [
            ["ch_1", "eur", "2026-11-28T01:00:00Z"],
            ["ch_2", "eur", "2026-11-28T02:01:01Z"],
        ]
    );
    let b = backfill(&job.path("out"));
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!((b[0].0.as_str(), b[0].2.as_str()), ("ch_2", "created"));
    assert_eq!(run_statuses(&job).await, ["clean"]);
    db.drop_db().await;

    // An explicit setting wins over the rows.
    let db = TestDb::create(Dialect::Sqlite).await;
    sqlite_payments_table(&db).await;
    job.configure(&JobSpec {
        url: &db.url,
        table: "payments",
        mode: "insert",
        write_batch: 10,
        state: None,
        target_extra: "currency_case = \"upper\"\ntimestamp_format = \"sql\"",
        with_email: false,
    });
    let o = job.run("out2");
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let rows = query_rows(
        &db.url,
        "SELECT stripe_charge_id, currency, created_at FROM payments",
        3,
    )
    .await;
    assert_eq!(
        rows,
        [
            ["ch_1", "EUR", "2026-11-28 01:00:00"],
            ["ch_2", "EUR", "2026-11-28 02:01:01"],
        ]
    );
    db.drop_db().await;
}

#[tokio::test]
async fn postgres_backfilled_currency_follows_the_rows() {
    let db = TestDb::create(Dialect::Postgres).await;
    payments_table(&db).await;
    db.exec("INSERT INTO payments VALUES ('ch_1', 100, 'usd', '2026-11-28T01:00:00Z')")
        .await;
    let job = Job::new(&[
        ("ch_1", 100, "usd", "x", DAY_START + 3600),
        ("ch_2", 200, "usd", "x", DAY_START + 7200),
    ]);
    job.configure(&JobSpec::inserts(&db.url, 10, None));
    let o = job.run("out");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b = backfill(&job.path("out"));
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!((b[0].0.as_str(), b[0].2.as_str()), ("ch_2", "created"));
    assert_eq!(run_statuses(&job).await, ["clean"]);
    let rows = query_rows(
        &db.url,
        "SELECT stripe_charge_id, currency, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM payments",
        3,
    )
    .await;
    assert_eq!(
        rows,
        [
            ["ch_1", "usd", "2026-11-28 01:00:00"],
            ["ch_2", "usd", "2026-11-28 02:00:00"],
        ]
    );
    db.drop_db().await;
}

#[tokio::test]
async fn postgres_deferrable_unique_key_is_refused_with_a_fix_that_works() {
    let db = TestDb::create(Dialect::Postgres).await;
    db.exec(
        "CREATE TABLE payments (stripe_charge_id TEXT NOT NULL, amount_cents BIGINT, currency TEXT, created_at TIMESTAMPTZ, \
         CONSTRAINT payments_key UNIQUE (stripe_charge_id) DEFERRABLE INITIALLY DEFERRED)",
    )
    .await;
    let job = Job::new(&[("ch_1", 100, "usd", "x", DAY_START + 3600)]);
    job.configure(&JobSpec::inserts(&db.url, 10, None));
    let o = job.run("out");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("DEFERRABLE"), "{err}");
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM payments").await, 0);
    // The suggested statement is the fix.
    let ddl = err
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ALTER TABLE"))
        .unwrap_or_else(|| panic!("no fix in: {err}"));
    db.exec(ddl).await;
    let o = job.run("out2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM payments").await, 1);
    db.drop_db().await;
}

/// The host part of a run owner, as recon writes it.
fn this_host() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_string())
}

#[tokio::test]
async fn a_live_run_that_lost_its_lock_is_never_marked_crashed() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("state.db").display()
    );
    let store = recon::state::StateStore::open(&url).await.unwrap();
    let window = recon_core::Window {
        start: jiff::Timestamp::from_second(DAY_START).unwrap(),
        end: jiff::Timestamp::from_second(DAY_START + 86_400).unwrap(),
    };
    // Run 1 belongs to a live process on this host (it lost its lock).
    let mut live = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let owner = format!("{}:{}:0badf00d", this_host().trim(), live.id());
    let first = store
        .start_run_as("nightly", window, false, Some(&owner))
        .await
        .unwrap();
    let err = store
        .start_run_as("nightly", window, false, Some("elsewhere:1:1"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("still alive") && err.contains(&first), "{err}");
    let runs = query_rows(&url, "SELECT id, status FROM recon_runs", 2).await;
    assert_eq!(
        runs,
        [[first.clone(), "running".to_string()]],
        "run 1 untouched"
    );
    // Once its process is gone, it is provably crashed.
    live.kill().unwrap();
    live.wait().unwrap();
    let second = store
        .start_run_as("nightly", window, false, Some("elsewhere:1:1"))
        .await
        .unwrap();
    let mut runs = query_rows(&url, "SELECT id, status FROM recon_runs", 2).await;
    runs.sort();
    let mut expected = vec![
        vec![first, "crashed".to_string()],
        vec![second, "running".to_string()],
    ];
    expected.sort();
    assert_eq!(runs, expected);
}

#[tokio::test]
async fn a_window_that_has_not_begun_is_refused_and_never_recorded() {
    let db = TestDb::create(Dialect::Sqlite).await;
    sqlite_payments_table(&db).await;
    let job = Job::new(&[("ch_1", 100, "usd", "x", DAY_START + 3600)]);
    job.configure(&JobSpec::inserts(&db.url, 10, None));
    let o = Command::from_std(job.command("future"))
        .args(["--window", "2099-01-01"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("has not begun"),
        "{}",
        text(&o)
    );
    let runs = count(&state_url(&job), "SELECT COUNT(*) FROM recon_runs").await;
    assert_eq!(
        runs, 0,
        "nothing recorded that since-last-success could start from"
    );
    db.drop_db().await;
}

/// The backfill's ledger fails while the target is written (its state
/// store went away): the run stops writing at once and fails, never
/// reporting a success it could not record; the next run writes every gap
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ledger_failure_mid_backfill_stops_writing_and_rerun_writes_once() {
    let db = TestDb::create(Dialect::Postgres).await;
    payments_table(&db).await;
    let job = many_gaps();
    job.configure(&JobSpec::inserts(&db.url, 10, None));
    let o = Command::from_std(job.command("run1"))
        .env("RECON_FAULT_LEDGER_MARK_FAILS", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("state store went away"), "{err}");
    assert!(!job.path("run1").exists(), "a failed run writes no reports");
    // The first outcome could not be recorded: the writes stopped within a
    // few batches of 10, far from the 3000 planned.
    let written = count(&db.url, "SELECT COUNT(*) FROM payments").await;
    assert!((1..=100).contains(&written), "{written} rows written");
    eprintln!("rows written before the ledger failure stopped the run: {written}");
    let state = state_url(&job);
    let status = query_rows(&state, "SELECT status FROM recon_runs", 1).await;
    assert_eq!(status, [["failed"]]);

    let o = job.run("run2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    each_gap_once(&job, &db, written).await;
    db.drop_db().await;
}

/// Holds `LOCK TABLE payments IN EXCLUSIVE MODE` in an open transaction:
/// reads go on, every INSERT waits until [`TableLock::release`].
struct TableLock(sqlx::PgConnection);

impl TableLock {
    async fn take(url: &str) -> TableLock {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut c).await.unwrap();
        sqlx::query("LOCK TABLE payments IN EXCLUSIVE MODE")
            .execute(&mut c)
            .await
            .unwrap();
        TableLock(c)
    }

    /// Waits until a backfill INSERT is blocked on this lock.
    async fn wait_for_blocked_insert(&self, url: &str) {
        let blocked = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query ILIKE '%INSERT INTO%'";
        common::wait_until_async("an INSERT blocked on the table lock", PATIENCE, || async {
            count(url, blocked).await > 0
        })
        .await;
    }

    async fn release(mut self) {
        sqlx::query("COMMIT").execute(&mut self.0).await.unwrap();
    }
}

fn send_signal(child: &std::process::Child, signal: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Names of the hidden staging folders (`.NAME.partial-…`) in `dir`.
fn staging_folders(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.contains(".partial-"))
        .collect()
}

/// SIGTERM while the backfill's batches wait on the target: no new batch
/// starts, the batches in flight finish and are recorded, the run is
/// recorded failed (interrupted), the lock is released, the metrics file
/// says failed, the staging folder is gone, and the rerun writes every gap
/// exactly once. `state` is the state-store URL (None: SQLite).
async fn sigterm_mid_backfill(state: Option<&str>) {
    let target = TestDb::create(Dialect::Postgres).await;
    payments_table(&target).await;
    let job = many_gaps();
    job.configure(&JobSpec::inserts(&target.url, 500, state));
    let held = TableLock::take(&target.url).await;
    let metrics = job.path("recon.prom");
    let mut child = spawn_piped(job.command("run1").arg("--metrics-file").arg(&metrics));
    let stderr = Stderr::follow(&mut child);
    held.wait_for_blocked_insert(&target.url).await;
    assert_eq!(staging_folders(job.dir.path()).len(), 1, "run 1 is staging");
    send_signal(&child, "TERM");
    stderr.wait_for("SIGTERM received", Duration::from_secs(60));
    // The flag is up before the batches in flight can return.
    held.release().await;
    let o = wait(child, Duration::from_secs(120));
    let err = stderr.text();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    let written = count(&target.url, "SELECT COUNT(*) FROM payments").await;
    // The two batches in flight (500 rows each) finished; no other began.
    assert!(
        written > 0 && written <= 1000 && written % 500 == 0,
        "written {written}"
    );
    let state_url = state.map(str::to_string).unwrap_or_else(|| state_url(&job));
    let runs = query_rows(&state_url, "SELECT status, error FROM recon_runs", 2).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0][0], "failed", "{runs:?}");
    assert!(runs[0][1].contains("interrupted by SIGTERM"), "{runs:?}");
    // What was written is recorded as applied.
    let applied = count(
        &state_url,
        "SELECT COUNT(*) FROM recon_backfill_items WHERE status = 'applied'",
    )
    .await;
    assert_eq!(applied, written);
    assert_eq!(
        count(&state_url, "SELECT COUNT(*) FROM recon_locks").await,
        0
    );
    if state.is_some() {
        assert_eq!(
            count(
                &state_url,
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            .await,
            0,
            "the advisory lock is released"
        );
    }
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prom.contains("recon_run_status{job=\"charges\",status=\"failed\"} 1"),
        "{prom}"
    );
    assert!(!job.path("run1").exists(), "no report folder");
    assert_eq!(staging_folders(job.dir.path()), Vec::<String>::new());
    // The rerun writes the rest, each gap once.
    let o = job.run("run2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    each_gap_once(&job, &target, written).await;
    target.drop_db().await;
}

#[tokio::test]
async fn sigterm_mid_backfill_stops_gracefully_with_sqlite_state() {
    sigterm_mid_backfill(None).await;
}

#[tokio::test]
async fn sigterm_mid_backfill_stops_gracefully_with_postgres_state() {
    let state = TestDb::create(Dialect::Postgres).await;
    sigterm_mid_backfill(Some(&state.url)).await;
    state.drop_db().await;
}

/// SIGTERM while a large target file is read in parts (its batches taken
/// in file order by two threads): the read stops, the run exits 2 recorded
/// failed (interrupted) with no report folder and its lock released, and
/// the next run reads the whole file and finds what one pass finds. The
/// signal is real (`kill`, through the handler), sent by the test hook
/// once the target has 60,000 records, while a 20-ms pause after each
/// batch keeps the rest of the file unread.
#[tokio::test]
async fn sigterm_while_the_target_is_read_in_parts() {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source.csv"), dir.path().join("target.csv"));
    // 600,000 rows, about 18.6 MB: past the 16 MiB from which a file is
    // read in parts. The source holds one of them, and one of its own.
    let mut t = String::with_capacity(19_000_000);
    t.push_str("id,amount,currency,created\n");
    for i in 0..600_000u64 {
        t.push_str(&format!(
            "ch_{i:08},{},usd,{}\n",
            100 + i % 1000,
            DAY_START + (i % 80_000) as i64
        ));
    }
    assert!(t.len() > 16 << 20, "{}", t.len());
    std::fs::write(&target, t).unwrap();
    std::fs::write(
        &source,
        format!(
            "id,amount,currency,created\nch_00000001,101,usd,{}\nch_x,5,usd,{}\n",
            DAY_START + 1,
            DAY_START + 2
        ),
    )
    .unwrap();
    let state = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("state.db").display()
    );
    let config = dir.path().join("recon.toml");
    std::fs::write(
        &config,
        format!(
            r#"{defaults}
[jobs.charges]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
time_field = "created"
compare = ["amount", "currency"]
window = "2026-11-28"
backfill = {{ mode = "off" }}

{source}
{target}"#,
            defaults = common::defaults_in(dir.path(), "UTC"),
            source = common::file_side("charges", "source", &source),
            target = common::file_side("charges", "target", &target),
        ),
    )
    .unwrap();
    let run = |out: &str| {
        let mut c = common::recon();
        c.args(["run", "--config"])
            .arg(&config)
            .arg("--out")
            .arg(dir.path().join(out))
            .args(["--log", "debug"]);
        c
    };
    let o = wait(
        spawn_piped(
            run("run1")
                .env("RECON_FAULT_READ_DELAY_MS", "20")
                .env("RECON_FAULT_SIGTERM_AT_TARGET_RECORDS", "60000"),
        ),
        Duration::from_secs(120),
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.lines().any(|l| l.contains("Reading a file in parts.")
            && l.contains("side=\"target\"")
            && l.contains("parts=")),
        "the target was read in parts: {err}"
    );
    assert!(err.contains("SIGTERM received"), "{err}");
    assert!(
        err.contains(&format!(
            "interrupted by SIGTERM while reading {}",
            target.display()
        )),
        "{err}"
    );
    assert!(!dir.path().join("run1").exists(), "no report folder");
    assert_eq!(staging_folders(dir.path()), Vec::<String>::new());
    let runs = query_rows(&state, "SELECT status, error FROM recon_runs", 2).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0][0], "failed", "{runs:?}");
    assert!(runs[0][1].contains("interrupted by SIGTERM"), "{runs:?}");
    assert_eq!(count(&state, "SELECT COUNT(*) FROM recon_locks").await, 0);

    // The next run reads the whole file: one gap, one match, the rest of
    // the day's rows orphans.
    let o = wait(spawn_piped(&mut run("run2")), Duration::from_secs(300));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&dir.path().join("run2"));
    assert_eq!(s["gaps"], 1, "{s}");
    assert_eq!(s["matched"], 1, "{s}");
    assert_eq!(s["orphans"], 600_000 - 1, "{s}");
}

/// A second signal exits at once, even while a batch is still blocked; the
/// lock row and the staging folder it leaves are cleaned up by the next
/// run, which writes every gap exactly once.
#[tokio::test]
async fn a_second_signal_exits_at_once_and_the_next_run_cleans_up() {
    let target = TestDb::create(Dialect::Postgres).await;
    payments_table(&target).await;
    let job = many_gaps();
    job.configure(&JobSpec::inserts(&target.url, 500, None));
    let held = TableLock::take(&target.url).await;
    let mut child = spawn_piped(&mut job.command("run1"));
    let stderr = Stderr::follow(&mut child);
    held.wait_for_blocked_insert(&target.url).await;
    send_signal(&child, "INT");
    stderr.wait_for("SIGINT received", Duration::from_secs(60));
    send_signal(&child, "TERM");
    // Exits while its batches are still blocked on the table lock.
    let o = wait(child, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(2), "{}", stderr.text());
    assert!(
        stderr.text().contains("received again"),
        "{}",
        stderr.text()
    );
    held.release().await;
    assert_eq!(staging_folders(job.dir.path()).len(), 1, "left behind");
    let state = state_url(&job);
    assert_eq!(count(&state, "SELECT COUNT(*) FROM recon_locks").await, 1);
    let o = job.run("run2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(staging_folders(job.dir.path()), Vec::<String>::new());
    assert_eq!(count(&state, "SELECT COUNT(*) FROM recon_locks").await, 0);
    // Nothing of run 1 was committed (its transactions died with it).
    each_gap_once(&job, &target, 0).await;
    target.drop_db().await;
}

/// Every early exit under the lock releases it: a window that cannot be
/// resolved and one that has not begun (SQLite state, where the lock is a
/// row that would stay).
#[tokio::test]
async fn early_exits_release_the_run_lock() {
    let db = TestDb::create(Dialect::Sqlite).await;
    sqlite_payments_table(&db).await;
    let job = Job::new(&[("ch_1", 100, "usd", "x", DAY_START + 3600)]);
    job.configure(&JobSpec::inserts(&db.url, 10, None));
    for (window, says) in [
        ("9999-12-31", "job `charges`"),
        ("2099-01-01", "has not begun"),
    ] {
        let o = Command::from_std(job.command("early"))
            .args(["--window", window])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{}",
            text(&o)
        );
        let locks = count(&state_url(&job), "SELECT COUNT(*) FROM recon_locks").await;
        assert_eq!(locks, 0, "--window {window} left its lock: {}", text(&o));
        assert!(!job.path("early").exists());
    }
    // And the job runs at once afterwards.
    let o = Command::from_std(job.command("ok"))
        .args(["--window", "2026-11-28"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    db.drop_db().await;
}

/// The state store's sessions are terminated while the only write batch is
/// in flight: the batch finishes and is recorded, but the run, no longer
/// holding its lock, commits no report folder and is recorded failed
/// (exit 2); the next run finds every gap written, once.
#[tokio::test]
async fn lock_lost_during_the_only_batch_commits_nothing_after_it() {
    let state_db = TestDb::create(Dialect::Postgres).await;
    let target = TestDb::create(Dialect::Postgres).await;
    payments_table(&target).await;
    let job = many_gaps();
    job.configure(&JobSpec::inserts(&target.url, 5000, Some(&state_db.url)));
    let held = TableLock::take(&target.url).await;
    let child = spawn_piped(&mut job.command("run1"));
    held.wait_for_blocked_insert(&target.url).await;
    let name = state_db.url.rsplit('/').next().unwrap().to_string();
    let killed = count(
        &state_db.url,
        &format!(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{name}' AND pid <> pg_backend_pid()) t"
        ),
    )
    .await;
    assert!(killed >= 1, "the lock session at least");
    held.release().await;
    let o = wait(child, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("lost the run lock"), "{}", text(&o));
    assert!(!job.path("run1").exists(), "no report folder: {}", text(&o));
    assert_eq!(staging_folders(job.dir.path()), Vec::<String>::new());
    assert_eq!(
        count(&target.url, "SELECT COUNT(*) FROM payments").await,
        GAPS as i64,
        "the batch in flight finished"
    );
    let runs = query_rows(&state_db.url, "SELECT status FROM recon_runs", 1).await;
    assert_eq!(runs, [["failed"]]);
    assert_eq!(
        count(
            &state_db.url,
            "SELECT COUNT(*) FROM recon_backfill_items WHERE status = 'applied'"
        )
        .await,
        GAPS as i64,
        "the batch's outcome is recorded"
    );
    let o = job.run("run2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&job.path("run2"))["backfilled"], 0);
    assert_eq!(summary(&job.path("run2"))["matched"], GAPS as i64);
    assert_eq!(
        count(&target.url, "SELECT COUNT(*) FROM payments").await,
        GAPS as i64
    );
    target.drop_db().await;
    state_db.drop_db().await;
}

/// A small tmpfs mounted for one test (root only), unmounted on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    /// `None` when this process may not mount (not root): said on stderr.
    fn mount(at: PathBuf, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(&at).unwrap();
        let root = std::process::Command::new("id").arg("-u").output().unwrap();
        if String::from_utf8_lossy(&root.stdout).trim() != "0" {
            eprintln!("skipped: mounting a small tmpfs needs root (CI runs as root)");
            return None;
        }
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(ok.success(), "mount -t tmpfs failed as root");
        Some(SmallDisk(at))
    }

    /// Fills the file system up to `leave` free bytes with a ballast file.
    fn fill(&self, leave: u64) -> PathBuf {
        let out = std::process::Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.0)
            .output()
            .unwrap();
        let avail: u64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let ballast = self.0.join("ballast");
        std::fs::write(&ballast, vec![0u8; avail.saturating_sub(leave) as usize]).unwrap();
        ballast
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Every file of a folder with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// The disk fills while the reports of a run that backfilled are written:
/// exit 2 naming the phase and the file, the old report folder intact, and
/// the run's record keeps what it wrote (recon runs shows it); the next run
/// writes nothing twice.
#[tokio::test]
async fn a_full_disk_while_reporting_keeps_the_old_folder_and_records_the_backfill() {
    let db = TestDb::create(Dialect::Postgres).await;
    payments_table(&db).await;
    let job = many_gaps();
    job.configure(&JobSpec::inserts(&db.url, 500, None));
    let Some(disk) = SmallDisk::mount(job.path("disk"), "2m") else {
        return;
    };
    let out = disk.0.join("nightly");
    let run = |extra: &[&str]| {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"));
        c.arg("run")
            .arg("--config")
            .arg(job.path("recon.toml"))
            .arg("--out")
            .arg(&out)
            .args(extra);
        c.output().unwrap()
    };
    let o = run(&["--dry-run"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let before = snapshot(&out);
    let ballast = disk.fill(16 * 1024);
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for says in [
        "report phase",
        "of the report folder",
        "No space left on device",
        "already written 3000",
    ] {
        assert!(err.contains(says), "`{says}`: {}", text(&o));
    }
    assert_eq!(snapshot(&out), before, "the old report folder is intact");
    assert_eq!(
        count(&db.url, "SELECT COUNT(*) FROM payments").await,
        GAPS as i64
    );
    // The run's record says what it wrote.
    let counts = query_rows(
        &state_url(&job),
        "SELECT status, counts FROM recon_runs WHERE dry_run = 0",
        2,
    )
    .await;
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert_eq!(counts[0][0], "failed");
    let c: serde_json::Value = serde_json::from_str(&counts[0][1]).unwrap();
    assert_eq!(c["backfilled"], GAPS as u64, "{c}");
    let runs = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
        .args(["runs", "--config"])
        .arg(job.path("recon.toml"))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&runs.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("failed") && l.trim_end().ends_with(" 3000")),
        "{listed}"
    );
    // Space again: the next run finds every gap written, once.
    std::fs::remove_file(ballast).unwrap();
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["backfilled"], 0);
    assert_eq!(s["matched"], GAPS as u64);
    assert_eq!(
        count(&db.url, "SELECT COUNT(*) FROM payments").await,
        GAPS as i64
    );
    drop(disk);
    db.drop_db().await;
}
