//! Helpers shared by the end-to-end tests (`mod common;` in each
//! `tests/*.rs`): starting the `recon` binary with its output captured,
//! reading what a run wrote, writing a job config, and waiting for an
//! observable condition with a deadline instead of a fixed sleep.
//!
//! A deadline here is a safety net against a hang, never a performance
//! assertion: each one is generous and fails with a message naming what
//! never happened.
#![allow(dead_code)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a test waits for something that normally takes a moment
/// (a line, a row, a request) before it fails, naming what it waited for.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);

/// A child's exit status, stdout and stderr, for an assertion's message.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A JSON file, parsed.
pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `DIR/summary.json` of a run's report folder, parsed.
pub fn summary(dir: &Path) -> serde_json::Value {
    json(&dir.join("summary.json"))
}

/// The `recon` binary under test, as a command to add arguments to.
pub fn recon() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("recon"))
}

/// `recon ARGS` with `envs` set, run to the end.
pub fn recon_output<A: AsRef<std::ffi::OsStr>>(args: &[A], envs: &[(&str, &str)]) -> Output {
    recon()
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

/// Runs `cmd` to the end on a blocking thread, so that the test's runtime
/// (and the emulators on it) keep serving meanwhile.
pub async fn output_async(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// [`recon_output`] on a blocking thread: `recon ARGS` with `envs` set.
pub async fn recon_async<A, K, V>(args: Vec<A>, envs: Vec<(K, V)>) -> Output
where
    A: AsRef<std::ffi::OsStr>,
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let mut cmd = recon();
    cmd.args(args).envs(envs);
    output_async(cmd).await
}

/// Writes `text` to `DIR/recon.toml`; its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("recon.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A port on 127.0.0.1 that nothing listens on.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The fields, compared fields and window of a Stripe charges job (the
/// first lines of a `[jobs.NAME]` table).
pub const CHARGE_FIELDS: &str = r#"fields = { amount = "money", currency = "currency", status = "text", created = "timestamp" }
compare = ["amount", "currency", "status"]
window = "last:24h""#;

/// `[jobs.JOB.source]`: the charges of the Stripe (emulator) at `base_url`.
pub fn stripe_source(job: &str, api_key: &str, base_url: &str) -> String {
    format!(
        r#"[jobs.{job}.source]
type = "stripe"
object = "charges"
api_key = "{api_key}"
base_url = "{base_url}"
"#
    )
}

/// `[jobs.JOB.target]`: table `table` at `url`, keyed by `key`, with the
/// money in `amount_cents` and the time in `created_at`.
pub fn sql_target(job: &str, url: &str, table: &str, key: &str) -> String {
    format!(
        r#"[jobs.{job}.target]
type = "sql"
url = "{url}"
table = "{table}"
key = "{key}"
columns = {{ amount = "amount_cents", created = "created_at" }}
"#
    )
}

/// Starts `c` with its stdout and stderr captured.
pub fn spawn_piped(c: &mut Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Polls `ready` until it holds; panics naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < until, "{what}: not within {limit:?}");
        std::thread::sleep(POLL);
    }
}

/// [`wait_until`] for a condition that is checked asynchronously (a query,
/// an emulator's counters read on the test's runtime).
pub async fn wait_until_async<F, Fut>(what: &str, limit: Duration, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + limit;
    while !ready().await {
        assert!(Instant::now() < until, "{what}: not within {limit:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// Waits for the child to end, reading its captured stdout and stderr
/// meanwhile (a full pipe cannot stall it); past `limit` it is killed and
/// the test fails with what it printed.
pub fn finish_within(mut child: Child, limit: Duration) -> Output {
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let until = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(POLL);
    };
    let o = Output {
        status: status.unwrap_or_else(|| child.wait().unwrap()),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "the child process still running after {limit:?}, killed: {}",
        text(&o)
    );
    o
}

/// Runs `cmd` with its output captured, at most `limit` (see
/// [`finish_within`]), on a blocking thread.
pub async fn output_within(mut cmd: Command, limit: Duration) -> Output {
    tokio::task::spawn_blocking(move || finish_within(spawn_piped(&mut cmd), limit))
        .await
        .unwrap()
}

/// A child's stderr read on a thread of its own, line by line, so that a
/// test can wait for a line (event-driven, not a sleep) and still read the
/// whole of it when the child ends.
pub struct Stderr {
    lines: Arc<Mutex<Vec<String>>>,
    seen: std::sync::mpsc::Receiver<String>,
}

impl Stderr {
    pub fn follow(child: &mut Child) -> Stderr {
        let pipe = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, seen) = std::sync::mpsc::channel();
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                keep.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        Stderr { lines, seen }
    }

    /// Blocks until a line containing `needle` arrives (at most `limit`).
    pub fn wait_for(&self, needle: &str, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.seen.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(_) => panic!(
                    "no stderr line with `{needle}` within {limit:?}: {:?}",
                    self.lines.lock().unwrap()
                ),
            }
        }
    }

    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

/// Runs `id -u`: whether the tests run as root (who may write into a 0555
/// folder anyway).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `[jobs.JOB.SIDE]` (`source` or `target`): the file at `path`, keyed by
/// its `id` column.
pub fn file_side(job: &str, side: &str, path: &Path) -> String {
    format!(
        "[jobs.{job}.{side}]\ntype = \"file\"\npath = \"{}\"\nkey = \"id\"\n",
        path.display()
    )
}

/// `DIR/recon.toml` of job `charges`: the Stripe charges at `base_url`
/// (the API key from `RECON_TEST_STRIPE_KEY`, `source_extra` among the
/// source's settings) against table `payments` of the SQLite file `ledger`
/// keyed by `stripe_charge_id`, backfilling up to all of it; the state in
/// `DIR/state.db`. Its path.
pub fn stripe_ledger_config(
    dir: &Path,
    base_url: &str,
    ledger: &Path,
    source_extra: &str,
) -> PathBuf {
    write_config(
        dir,
        &format!(
            "\n[defaults]\nstate = \"sqlite://{state}\"\n[jobs.charges]\n{CHARGE_FIELDS}\n{source}{source_extra}\n{target}[jobs.charges.backfill]\nmax_ratio = 1.0\n",
            state = dir.join("state.db").display(),
            source = stripe_source("charges", "${RECON_TEST_STRIPE_KEY}", base_url),
            target = sql_target(
                "charges",
                &format!("sqlite://{}?mode=rwc", ledger.display()),
                "payments",
                "stripe_charge_id"
            ),
        ),
    )
}

/// A connection to the database at `url` (sqlx's `Any` driver).
pub async fn connect(url: &str) -> sqlx::AnyConnection {
    sqlx::any::install_default_drivers();
    <sqlx::AnyConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// The SQLite file `ledger` (created) with an empty `payments` table of
/// Stripe charges keyed by `stripe_charge_id`; the connection to it.
pub async fn stripe_ledger(ledger: &Path) -> sqlx::AnyConnection {
    let mut conn = connect(&format!("sqlite://{}?mode=rwc", ledger.display())).await;
    sqlx::query("CREATE TABLE payments (stripe_charge_id TEXT UNIQUE NOT NULL, amount_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

/// The one integer `sql` (a `SELECT COUNT(*) …`) answers at `url`.
pub async fn count(url: &str, sql: &str) -> i64 {
    use sqlx::{Connection, Row};
    let mut conn = connect(url).await;
    let n: i64 = sqlx::query(sql)
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    conn.close().await.ok();
    n
}

/// `[jobs.charges.source]` and `[jobs.charges.target]` of a file → SQL
/// job: the file `source` keyed by `id`, table `payments` at `url` keyed by
/// `key` (target settings may follow).
pub fn file_to_sql(source: &Path, url: &str, key: &str) -> String {
    format!(
        "{}\n{}",
        file_side("charges", "source", source),
        sql_target("charges", url, "payments", key)
    )
}

/// `[defaults]` with `timezone`, the reports in `DIR/reports` and the state
/// store in `DIR/state.db`.
pub fn defaults_in(dir: &Path, timezone: &str) -> String {
    format!(
        "[defaults]\ntimezone = \"{timezone}\"\nreports = \"{}\"\nstate = \"sqlite://{}?mode=rwc\"\n",
        dir.join("reports").display(),
        dir.join("state.db").display()
    )
}

/// `[jobs.JOB.target]`: HubSpot deals at `base_url`, keyed by the unique
/// property `stripe_charge_id`, status/created/currency mapped to
/// `dealstage`, `stripe_created`, `deal_currency_code`.
pub fn hubspot_deals_target(job: &str, token: &str, base_url: &str) -> String {
    hubspot_deals_target_by(job, token, base_url, "stripe_charge_id")
}

/// [`hubspot_deals_target`] keyed by the property `id_property`.
pub fn hubspot_deals_target_by(
    job: &str,
    token: &str,
    base_url: &str,
    id_property: &str,
) -> String {
    format!(
        r#"[jobs.{job}.target]
type = "hubspot"
token = "{token}"
object_type = "deals"
id_property = "{id_property}"
properties = {{ status = "dealstage", created = "stripe_created", currency = "deal_currency_code" }}
currency_property = "deal_currency_code"
base_url = "{base_url}"
"#
    )
}

/// The deal properties a Stripe → HubSpot job writes: the unique
/// `stripe_charge_id`, text `deal_currency_code` and `dealstage`, number
/// `amount`, date-time `stripe_created`.
pub fn deal_properties(hubspot: &recon_hubspot::emulator::Emulator) {
    use recon_hubspot::emulator::PropertyType;
    hubspot.create_property("deals", "stripe_charge_id", true);
    for p in ["deal_currency_code", "dealstage"] {
        hubspot.create_property("deals", p, false);
    }
    hubspot.create_typed_property("deals", "amount", PropertyType::Number, false);
    hubspot.create_typed_property("deals", "stripe_created", PropertyType::DateTime, false);
}

/// `DIR/recon.toml` of job `charges` over 2026-11-28 (New York): the
/// file `DIR/charges.csv` (id, amount, currency, created) against table
/// `payments` at `url`, inserting at most 100 gaps and 90 % of the source.
/// Its path.
pub fn csv_insert_job(dir: &Path, url: &str) -> PathBuf {
    write_config(
        dir,
        &format!(
            r#"
{defaults}
[jobs.charges]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount", "currency"]
window = "2026-11-28"

{sides}
[jobs.charges.backfill]
mode = "insert"
max_records = 100
max_ratio = 0.9
"#,
            defaults = defaults_in(dir, "America/New_York"),
            sides = file_to_sql(&dir.join("charges.csv"), url, "stripe_charge_id"),
        ),
    )
}

/// Every row `sql` answers at `url`, its first `n` cells (NULL as empty)
/// joined by `|`, sorted: a checksum of a table.
pub async fn joined_rows(url: &str, sql: &str, n: usize) -> Vec<String> {
    use sqlx::Row;
    let mut conn = connect(url).await;
    let mut rows: Vec<String> = sqlx::query(sql)
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (0..n)
                .map(|i| {
                    r.try_get::<Option<String>, _>(i)
                        .unwrap()
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    rows.sort();
    rows
}
