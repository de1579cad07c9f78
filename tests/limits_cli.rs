//! Limits that limit, through the binary: `max_ratio` NaN, infinite or
//! negative is refused at the config and at `--max-ratio`; the override the
//! safety-limit message suggests is rounded up, so running the suggested
//! command passes; an overflowing `grace`/`lookback` is refused with the
//! maximum allowed instead of silently becoming zero.

mod common;

use common::text;

use std::path::{Path, PathBuf};
use std::process::Output;

use sqlx::{Connection, Row};

/// 2026-11-28T00:00:00Z in Unix seconds.
const DAY_START: i64 = 1_795_824_000;
const DAY: &str = "2026-11-28";

/// A file source of `source` charges and a SQLite target holding the
/// first `target` of them.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn new(source: usize, target: usize) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("id,amount,currency,status,created\n");
        for i in 0..source {
            csv.push_str(&format!(
                "ch_{i:05},{},usd,succeeded,{}\n",
                100 + i,
                DAY_START + 10 + i as i64
            ));
        }
        std::fs::write(dir.path().join("charges.csv"), csv).unwrap();
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(&format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("ledger.db").display()
        ))
        .await
        .unwrap();
        sqlx::query(
            "CREATE TABLE payments (stripe_charge_id TEXT UNIQUE NOT NULL, amount_cents INTEGER, \
             currency TEXT, status TEXT, created_at TIMESTAMP)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        let rows: Vec<String> = (0..target)
            .map(|i| {
                let t = jiff::Timestamp::from_second(DAY_START + 10 + i as i64).unwrap();
                format!(
                    "('ch_{i:05}', {}, 'USD', 'succeeded', '{}')",
                    100 + i,
                    t.strftime("%Y-%m-%d %H:%M:%S")
                )
            })
            .collect();
        for chunk in rows.chunks(400) {
            sqlx::query(&format!(
                "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) VALUES {}",
                chunk.join(", ")
            ))
            .execute(&mut conn)
            .await
            .unwrap();
        }
        conn.close().await.unwrap();
        let f = Fixture { dir };
        f.write_config("", "");
        f
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("recon.toml")
    }

    /// The job, with extra lines in the job table and in `[backfill]`.
    fn write_config(&self, job_extra: &str, backfill_extra: &str) {
        let text = format!(
            r#"
[defaults]
reports = "{reports}"
state = "sqlite://{state}"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "{DAY}"
{job_extra}

{source}
[jobs.charges.target]
type = "sql"
url = "sqlite://{ledger}"
table = "payments"
key = "stripe_charge_id"
columns = {{ amount = "amount_cents", created = "created_at" }}

[jobs.charges.backfill]
mode = "insert"
{backfill_extra}
"#,
            reports = self.dir.path().join("reports").display(),
            state = self.dir.path().join("state.db").display(),
            source = common::file_side("charges", "source", &self.dir.path().join("charges.csv")),
            ledger = self.dir.path().join("ledger.db").display(),
        );
        std::fs::write(self.config(), text).unwrap();
    }

    fn run(&self, args: &[&str]) -> Output {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .arg("run")
            .arg("--config")
            .arg(self.config())
            .args(args)
            .output()
            .unwrap()
    }

    async fn rows(&self) -> i64 {
        let mut conn = sqlx::AnyConnection::connect(&format!(
            "sqlite://{}",
            self.dir.path().join("ledger.db").display()
        ))
        .await
        .unwrap();
        let n = sqlx::query("SELECT COUNT(*) FROM payments")
            .fetch_one(&mut conn)
            .await
            .unwrap()
            .get::<i64, _>(0);
        conn.close().await.unwrap();
        n
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn assert_refused(o: &Output, needles: &[&str]) {
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    for n in needles {
        assert!(err.contains(n), "`{n}` missing: {}", text(o));
    }
}

#[tokio::test]
async fn ratios_that_would_disable_the_limit_are_refused_in_config_and_flags() {
    let f = Fixture::new(10, 5).await;
    for bad in ["nan", "inf", "-inf", "-0.5", "1.5"] {
        f.write_config("", &format!("max_ratio = {bad}"));
        let o = f.run(&[]);
        assert_refused(
            &o,
            &["backfill.max_ratio must be a number from 0 to 1", "line "],
        );
    }
    f.write_config("", "");
    for bad in ["nan", "inf", "-0.5", "NaN", "1e400"] {
        let o = f.run(&["--max-ratio", bad]);
        assert_refused(&o, &["--max-ratio", "must be a number from 0 to 1"]);
        let o = f.run(&[&format!("--max-ratio={bad}")]);
        assert_refused(&o, &["--max-ratio", "must be a number from 0 to 1"]);
    }
    for bad in ["-5", "--5", "1.5", "nan"] {
        let o = f.run(&[&format!("--max-records={bad}")]);
        assert_refused(&o, &["--max-records", "must be a whole number from 0"]);
    }
    // Nothing ran: no state, no reports, no rows written.
    assert!(!f.path().join("reports").exists());
    assert_eq!(f.rows().await, 5);
}

#[tokio::test]
async fn the_suggested_override_is_rounded_up_and_its_rerun_passes() {
    // 103 gaps among 2000 source records: 5.15%, above a 5% limit.
    let f = Fixture::new(2000, 1897).await;
    f.write_config("", "max_ratio = 0.05");
    let o = f.run(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.contains("safety limit"), "{}", text(&o));
    assert_eq!(f.rows().await, 1897, "nothing written: {}", text(&o));
    // Parse `--max-records N --max-ratio R` out of the message.
    let after = &err
        [err.find("rerun with --max-records ").expect(&err) + "rerun with --max-records ".len()..];
    let mut words = after.split_whitespace();
    let records = words.next().unwrap().to_string();
    assert_eq!(words.next(), Some("--max-ratio"), "{err}");
    let ratio = words.next().unwrap().to_string();
    assert_eq!(ratio, "0.052", "103/2000 = 0.0515 rounds up: {err}");
    assert!(records.parse::<u64>().unwrap() >= 103, "{err}");
    let ratio_value: f64 = ratio.parse().unwrap();
    assert!(ratio_value >= 103.0 / 2000.0, "{ratio}");

    let o = f.run(&["--max-records", &records, "--max-ratio", &ratio]);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "the suggested rerun passes: {}",
        text(&o)
    );
    assert_eq!(f.rows().await, 2000, "{}", text(&o));

    // Over the count only: the suggestion keeps a ratio that already
    // allows the plan, and raises the count just enough.
    let f = Fixture::new(50, 40).await;
    f.write_config("", "max_records = 3\nmax_ratio = 0.25");
    let o = f.run(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("rerun with --max-records 10 --max-ratio 0.25 "),
        "{err}"
    );
    let o = f.run(&["--max-records", "10", "--max-ratio", "0.25"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert_eq!(f.rows().await, 50);
}

#[tokio::test]
async fn overflowing_durations_are_refused_with_the_maximum() {
    let f = Fixture::new(10, 5).await;
    for (setting, value) in [
        ("grace", "999999999999d"),
        ("grace", "36501d"),
        ("lookback", "99999999999999999999h"),
        ("lookback", "876001h"),
    ] {
        f.write_config(&format!("{setting} = \"{value}\""), "");
        let o = f.run(&[]);
        assert_refused(&o, &[setting, value, "too large", "the maximum is 36500d"]);
    }
    // The maximum itself is accepted: the run happens and backfills.
    f.write_config("grace = \"1h\"\nlookback = \"36500d\"", "max_ratio = 1");
    let o = f.run(&[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert_eq!(f.rows().await, 10);
}
