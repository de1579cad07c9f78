//! Secrets never leave recon, through the binary at `--log trace`: database
//! passwords holding `/`, `#`, `?`, `@`, `:` or `%2F` (in the target URL and
//! in the state URL, typed literally or expanded from the environment), a
//! Stripe API key and a HubSpot token are planted; recon is run so that it
//! fails (bad URL, unreachable server, wrong key, TOML syntax error on the
//! secret's own line) and so that it succeeds; then every file recon wrote
//! (reports, the SQLite state file and its journal, the target database),
//! the rows of a PostgreSQL state store, and the captured stdout and stderr
//! are searched for each secret, in each form it could be echoed.

mod common;

use common::{recon_output as recon, text, CHARGE_FIELDS};

use std::path::{Path, PathBuf};
use std::process::Output;

use recon_sql::testing::TestDb;
use recon_sql::Dialect;
use sqlx::{Connection, Row};

/// 2026-11-28T00:00:00Z in Unix seconds.
const DAY_START: i64 = 1_795_824_000;
const DAY: &str = "2026-11-28";

/// A planted secret and every form in which it could be echoed.
struct Planted {
    what: String,
    forms: Vec<String>,
}

impl Planted {
    /// A secret shown as typed, percent-decoded and percent-encoded.
    fn new(what: &str, typed: &str) -> Planted {
        let decoded = percent_decode(typed);
        let encoded: String = decoded
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let mut forms: Vec<String> = Vec::new();
        for f in [typed.to_string(), decoded, encoded] {
            if !forms.contains(&f) {
                forms.push(f);
            }
        }
        Planted {
            what: what.to_string(),
            forms,
        }
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(hex, 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Asserts that no form of any planted secret is in the captured output of
/// any run, in any file under `written`, or in `extra` texts (database
/// rows). `written` must hold files: an empty set would prove nothing.
fn assert_no_leak(planted: &[Planted], runs: &[Output], written: &Path, extra: &[String]) {
    let mut files = Vec::new();
    files_under(written, &mut files);
    assert!(
        !files.is_empty(),
        "recon wrote no file under {}: the check would be vacuous",
        written.display()
    );
    for p in planted {
        for form in &p.forms {
            let needle = form.as_bytes();
            for o in runs {
                for (stream, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
                    assert!(
                        !contains(bytes, needle),
                        "{} (`{form}`) leaked into {stream}: {}",
                        p.what,
                        text(o)
                    );
                }
            }
            for f in &files {
                let body = std::fs::read(f).unwrap();
                assert!(
                    !contains(&body, needle),
                    "{} (`{form}`) leaked into {}",
                    p.what,
                    f.display()
                );
            }
            for (i, e) in extra.iter().enumerate() {
                assert!(
                    !e.contains(form.as_str()),
                    "{} (`{form}`) leaked into stored rows #{i}: {e}",
                    p.what
                );
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Runs the binary on a blocking thread so that emulators keep serving.
async fn recon_async(args: Vec<String>, envs: Vec<(String, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .args(&args)
            .envs(envs)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// `url` (`postgres://USER@…`) with `password` typed in as is.
fn with_password(url: &str, password: &str) -> String {
    let start = url.find("://").unwrap() + 3;
    let at = start + url[start..].find('@').expect("test URL names a user");
    format!("{}:{password}{}", &url[..at], &url[at..])
}

/// `url` with another port.
fn with_port(url: &str, port: u16) -> String {
    let at = url.rfind('@').unwrap();
    let colon = at + url[at..].find(':').unwrap();
    let slash = colon + url[colon..].find('/').unwrap();
    format!("{}:{port}{}", &url[..colon], &url[slash..])
}

/// A CSV of three charges of the day.
fn write_source(dir: &Path) -> PathBuf {
    let path = dir.join("charges.csv");
    let mut csv = String::from("id,amount,currency,status,created\n");
    for i in 0..3 {
        csv.push_str(&format!(
            "ch_{i},{},usd,succeeded,{}\n",
            1000 + i,
            DAY_START + 3600 * (i + 1)
        ));
    }
    std::fs::write(&path, csv).unwrap();
    path
}

/// A file → SQL job; `state` and `url` are written into the TOML as given.
fn config(source: &Path, reports: &Path, state: &str, url: &str) -> String {
    format!(
        r#"
[defaults]
reports = "{reports}"
state = "{state}"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "{DAY}"

{sides}
[jobs.charges.backfill]
max_ratio = 1
"#,
        reports = reports.display(),
        sides = common::file_to_sql(source, url, "stripe_charge_id"),
    )
}

/// Every row of every `recon_` table of a PostgreSQL state store, as JSON.
async fn pg_state_rows(url: &str) -> Vec<String> {
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let tables: Vec<String> = sqlx::query(
        "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
         WHERE table_name LIKE 'recon_%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<String, _>(0))
    .collect();
    assert!(tables.iter().any(|t| t == "recon_runs"), "{tables:?}");
    let mut rows = Vec::new();
    for t in tables {
        for r in sqlx::query(&format!("SELECT CAST(row_to_json(x) AS TEXT) FROM {t} x"))
            .fetch_all(&mut conn)
            .await
            .unwrap()
        {
            rows.push(r.get::<String, _>(0));
        }
    }
    conn.close().await.unwrap();
    rows
}

/// The target's password, typed into the URL literally or through
/// `${VAR}`, holding each character that ends a URL's authority; each run
/// at trace level, failing (the URL does not parse, the server is not
/// there) or succeeding (`@` and `%2F` make valid URLs and PostgreSQL here
/// trusts any password). The failures are stored in the runs table of the
/// SQLite state store, which is searched too.
#[tokio::test]
async fn database_passwords_in_the_target_url_never_leak() {
    let db = TestDb::create(Dialect::Postgres).await;
    db.exec(
        "CREATE TABLE payments (stripe_charge_id TEXT UNIQUE NOT NULL, amount_cents BIGINT, \
         currency TEXT, status TEXT, created_at TIMESTAMPTZ); \
         INSERT INTO payments VALUES ('ch_0', 1000, 'USD', 'succeeded', '2026-11-28T01:00:00Z')",
    )
    .await;
    let input = tempfile::tempdir().unwrap();
    let written = tempfile::tempdir().unwrap();
    let source = write_source(input.path());
    let state = format!("sqlite://{}", written.path().join("state.db").display());
    let reports = written.path().join("reports");
    // (label, password, through the environment, port override, succeeds)
    let cases: [(&str, &str, bool, Option<u16>, bool); 8] = [
        ("slash", "Tg7Sl/ash-9xQ", false, None, false),
        ("hash", "Tg7Ha#sh-9xQ", true, None, false),
        ("question", "Tg7Qu?est-9xQ", false, None, false),
        ("at", "Tg7At@sign-9xQ", true, None, true),
        ("encoded slash", "Tg7Enc%2Fslash-9xQ", false, None, true),
        ("colon", "Tg7Co:lon-9xQ", false, None, true),
        ("everything", "Tg7/a#b?c@d:e-9xQ", true, None, false),
        ("unreachable", "Tg7Unre@ch-9xQ", false, Some(1), false),
    ];
    let mut planted = Vec::new();
    let mut runs = Vec::new();
    for (label, password, from_env, port, succeeds) in cases {
        planted.push(Planted::new(
            &format!("target password ({label})"),
            password,
        ));
        let mut url = with_password(&db.url, password);
        if let Some(p) = port {
            url = with_port(&url, p);
        }
        let config_path = input
            .path()
            .join(format!("{}.toml", label.replace(' ', "-")));
        let env_url = url.clone();
        let typed = if from_env {
            "${RECON_TEST_SECRET_URL}".to_string()
        } else {
            url
        };
        std::fs::write(&config_path, config(&source, &reports, &state, &typed)).unwrap();
        let o = recon(
            &[
                "run",
                "--log",
                "trace",
                "--config",
                config_path.to_str().unwrap(),
            ],
            &[("RECON_TEST_SECRET_URL", env_url.as_str())],
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("TRACE") || stderr.contains("DEBUG"),
            "{}",
            text(&o)
        );
        if succeeds {
            assert!(
                matches!(o.status.code(), Some(0 | 1)),
                "{label}: {}",
                text(&o)
            );
        } else {
            assert_eq!(o.status.code(), Some(2), "{label}: {}", text(&o));
            assert!(
                stderr.contains("***"),
                "{label}: the URL is shown redacted: {}",
                text(&o)
            );
        }
        runs.push(o);
    }
    // The failures were recorded, with their messages, in the state store.
    let listing = recon(
        &[
            "runs",
            "--log",
            "trace",
            "--config",
            input.path().join("slash.toml").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(listing.status.code(), Some(0), "{}", text(&listing));
    assert!(
        String::from_utf8_lossy(&listing.stdout).contains("failed"),
        "{}",
        text(&listing)
    );
    runs.push(listing);
    assert!(written.path().join("state.db").exists());
    assert!(reports.exists(), "the succeeding runs wrote reports");
    assert_no_leak(&planted, &runs, written.path(), &[]);
    db.drop_db().await;
}

/// The state store's own URL: PostgreSQL with a password holding `@`
/// (valid, connects, so the store's rows are searched), `/`, `#`, `?`
/// (invalid as typed) and an unreachable port.
#[tokio::test]
async fn database_passwords_in_the_state_url_never_leak() {
    let state_db = TestDb::create(Dialect::Postgres).await;
    let input = tempfile::tempdir().unwrap();
    let written = tempfile::tempdir().unwrap();
    let source = write_source(input.path());
    let ledger = written.path().join("ledger.db");
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&format!("sqlite://{}?mode=rwc", ledger.display()))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE payments (stripe_charge_id TEXT UNIQUE NOT NULL, amount_cents INTEGER, \
         currency TEXT, status TEXT, created_at TIMESTAMP)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let target = format!("sqlite://{}", ledger.display());
    let reports = written.path().join("reports");
    let cases: [(&str, &str, Option<u16>, bool); 5] = [
        ("at", "St8At@sign-4wZ", None, true),
        ("slash", "St8Sl/ash-4wZ", None, false),
        ("hash", "St8Ha#sh-4wZ", None, false),
        ("question", "St8Qu?est-4wZ", None, false),
        ("unreachable", "St8Unre@ch-4wZ", Some(1), false),
    ];
    let mut planted = Vec::new();
    let mut runs = Vec::new();
    for (label, password, port, succeeds) in cases {
        planted.push(Planted::new(&format!("state password ({label})"), password));
        let mut url = with_password(&state_db.url, password);
        if let Some(p) = port {
            url = with_port(&url, p);
        }
        let config_path = input.path().join(format!("{label}.toml"));
        std::fs::write(
            &config_path,
            config(&source, &reports, "${RECON_TEST_STATE}", &target),
        )
        .unwrap();
        for command in ["run", "runs"] {
            let o = recon(
                &[
                    command,
                    "--log",
                    "trace",
                    "--config",
                    config_path.to_str().unwrap(),
                ],
                &[("RECON_TEST_STATE", url.as_str())],
            );
            if succeeds {
                assert!(
                    matches!(o.status.code(), Some(0 | 1)),
                    "{label} {command}: {}",
                    text(&o)
                );
            } else {
                assert_eq!(o.status.code(), Some(2), "{label} {command}: {}", text(&o));
            }
            runs.push(o);
        }
    }
    let rows = pg_state_rows(&state_db.url).await;
    assert!(!rows.is_empty(), "the state store holds the run");
    assert_no_leak(&planted, &runs, written.path(), &rows);
    state_db.drop_db().await;
}

/// A TOML syntax error on the very line that holds a literal secret: the
/// error says where, never what.
#[test]
fn toml_errors_on_a_secret_line_never_echo_it() {
    let input = tempfile::tempdir().unwrap();
    let written = tempfile::tempdir().unwrap();
    let source = write_source(input.path());
    let reports = written.path().join("reports");
    let state = format!("sqlite://{}", written.path().join("state.db").display());
    let good = config(
        &source,
        &reports,
        &state,
        "postgres://postgres:Lit3ral/Pw#x?y@127.0.0.1:5432/x",
    );
    let planted = vec![
        Planted::new("literal URL password", "Lit3ral/Pw#x?y"),
        Planted::new("literal Stripe key", "sk_live_Lit3ralStripeKey7h"),
        Planted::new("literal HubSpot token", "pat-na1-Lit3ralHubSpotT0ken"),
    ];
    let broken = [
        // Unterminated string on the URL's line.
        good.replace(
            "url = \"postgres://postgres:Lit3ral/Pw#x?y@127.0.0.1:5432/x\"",
            "url = \"postgres://postgres:Lit3ral/Pw#x?y@127.0.0.1:5432/x",
        ),
        // An unquoted key.
        good.replace(
            "[jobs.charges.source]\ntype = \"file\"",
            "[jobs.charges.source]\ntype = \"stripe\"\nobject = \"charges\"\napi_key = sk_live_Lit3ralStripeKey7h",
        ),
        // A wrong type next to a token, in an inline table.
        good.replace(
            "[jobs.charges.backfill]",
            "[jobs.charges.extra]\nx = { token = \"pat-na1-Lit3ralHubSpotT0ken\", n = 1 2 }\n[jobs.charges.backfill]",
        ),
    ];
    let mut runs = Vec::new();
    for (i, text_) in broken.iter().enumerate() {
        let path = input.path().join(format!("broken-{i}.toml"));
        std::fs::write(&path, text_).unwrap();
        for command in ["run", "runs"] {
            let o = recon(
                &[
                    command,
                    "--log",
                    "trace",
                    "--config",
                    path.to_str().unwrap(),
                ],
                &[],
            );
            assert_eq!(o.status.code(), Some(2), "{}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("line ") && err.contains("column "),
                "{}",
                text(&o)
            );
            runs.push(o);
        }
    }
    // Something must have been written for the file check to mean anything:
    // the one valid config's run (its target cannot connect).
    let path = input.path().join("good.toml");
    std::fs::write(&path, &good).unwrap();
    let o = recon(
        &["run", "--log", "trace", "--config", path.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    runs.push(o);
    assert_no_leak(&planted, &runs, written.path(), &[]);
}

/// A Stripe API key and a HubSpot token from the environment: Stripe →
/// SQLite and Stripe → HubSpot succeeding, then a wrong key and a wrong
/// token failing, all at trace level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_and_tokens_never_leak() {
    use recon_hubspot::emulator::{Emulator as HubSpot, EmulatorConfig as HubSpotConfig};
    use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig as StripeConfig, ObjectKind};

    let stripe_key = "sk_test_PlantedStripeKey9f8e7d6c";
    let hubspot_token = "pat-na1-PlantedHubSpotToken-4c3b2a";
    let wrong_key = "sk_test_WrongPlantedKey1a2b3c";
    let wrong_token = "pat-na1-WrongPlantedToken-9z8y";
    let stripe = Stripe::start(StripeConfig {
        api_key: stripe_key.into(),
        ..StripeConfig::default()
    })
    .await
    .unwrap();
    let hubspot = HubSpot::start(HubSpotConfig {
        token: hubspot_token.into(),
        ..HubSpotConfig::default()
    })
    .await
    .unwrap();
    common::deal_properties(&hubspot);
    let now = jiff::Timestamp::now().as_second();
    for i in 0..12i64 {
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(
                &format!("ch_{i:03}"),
                1999 + i,
                "usd",
                "succeeded",
                now - 7200 + i * 60,
            ),
        );
    }

    let input = tempfile::tempdir().unwrap();
    let written = tempfile::tempdir().unwrap();
    let ledger = written.path().join("ledger.db");
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&format!("sqlite://{}?mode=rwc", ledger.display()))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE payments (stripe_charge_id TEXT UNIQUE NOT NULL, amount_cents INTEGER, \
         currency TEXT, status TEXT, created_at TIMESTAMP)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let common = format!(
        r#"
[defaults]
reports = "{reports}"
state = "sqlite://{state}"
[jobs.charges]
{CHARGE_FIELDS}
{source}[jobs.charges.backfill]
max_ratio = 1
"#,
        reports = written.path().join("reports").display(),
        state = written.path().join("state.db").display(),
        source = common::stripe_source("charges", "${RECON_TEST_STRIPE_KEY}", &stripe.base_url),
    );
    let ledger_url = format!("sqlite://{}", ledger.display());
    let to_sqlite = format!(
        "{common}\n{}",
        common::sql_target("charges", &ledger_url, "payments", "stripe_charge_id")
    );
    let to_hubspot = format!(
        "{common}\n{}",
        common::hubspot_deals_target("charges", "${RECON_TEST_HUBSPOT_TOKEN}", &hubspot.base_url)
    );
    let sqlite_config = input.path().join("sqlite.toml");
    let hubspot_config = input.path().join("hubspot.toml");
    std::fs::write(&sqlite_config, to_sqlite).unwrap();
    std::fs::write(&hubspot_config, to_hubspot).unwrap();
    let run = |config: &Path, key: &str, token: &str| {
        recon_async(
            vec![
                "run".into(),
                "--log".into(),
                "trace".into(),
                "--config".into(),
                config.display().to_string(),
            ],
            vec![
                ("RECON_TEST_STRIPE_KEY".into(), key.into()),
                ("RECON_TEST_HUBSPOT_TOKEN".into(), token.into()),
            ],
        )
    };
    let mut runs = Vec::new();
    let o = run(&sqlite_config, stripe_key, hubspot_token).await;
    assert_eq!(o.status.code(), Some(0), "all 12 backfilled: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("TRACE"),
        "{}",
        text(&o)
    );
    runs.push(o);
    let o = run(&hubspot_config, stripe_key, hubspot_token).await;
    assert_eq!(o.status.code(), Some(0), "all 12 backfilled: {}", text(&o));
    assert_eq!(hubspot.objects("deals").len(), 12);
    runs.push(o);
    let o = run(&sqlite_config, wrong_key, hubspot_token).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    runs.push(o);
    let o = run(&hubspot_config, stripe_key, wrong_token).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    runs.push(o);
    let planted = vec![
        Planted::new("Stripe API key", stripe_key),
        Planted::new("HubSpot token", hubspot_token),
        Planted::new("wrong Stripe API key", wrong_key),
        Planted::new("wrong HubSpot token", wrong_token),
    ];
    assert!(written.path().join("reports").exists());
    assert_no_leak(&planted, &runs, written.path(), &[]);
    stripe.shutdown().await;
    hubspot.shutdown().await;
}
