//! `recon check` through the binary: against each emulator (Stripe,
//! HubSpot, Shopify, Salesforce) and each database (SQLite, PostgreSQL,
//! MariaDB) every check passes; then one thing is broken at a time (a bad
//! token, a missing unique key, an unreachable host, an unwritable report
//! folder, a missing environment variable) and exactly that check fails,
//! with exit status 2.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use common::{closed_port, sql_target, stripe_source, text, write_config, CHARGE_FIELDS as FIELDS};

use recon_hubspot::emulator::{Emulator as HubSpot, EmulatorConfig as HubSpotConfig};
use recon_salesforce::emulator::{
    Emulator as Salesforce, EmulatorConfig as SalesforceConfig, FieldDef, FieldType,
};
use recon_shopify::emulator::{Emulator as Shopify, EmulatorConfig as ShopifyConfig};
use recon_sql::testing::TestDb;
use recon_sql::Dialect;
use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig as StripeConfig, ObjectKind};

/// The checks every job has, in the order they are printed.
const CHECKS: [&str; 8] = [
    "config",
    "secrets",
    "job",
    "source",
    "target",
    "target uniqueness",
    "state store",
    "report folder",
];

/// `recon check --config CONFIG --job JOB` with `env` set and `unset` removed.
async fn check(config: &Path, job: &str, env: &[(&str, &str)], unset: &[&str]) -> Output {
    let mut cmd = common::recon();
    cmd.args(["check", "--config"])
        .arg(config)
        .args(["--job", job])
        .env_remove("RECON_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in unset {
        cmd.env_remove(k);
    }
    common::output_async(cmd).await
}

/// The check lines, as (status, name, detail); a check's name is the part
/// before the first `:` less the endpoint type (`source stripe` → `source`).
fn lines(o: &Output) -> Vec<(String, String, String)> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            // `ok   `, `FAIL `, `skip `: the names line up.
            let (status, rest) = (l.get(..5)?.trim_end(), l.get(5..)?);
            if !matches!(status, "ok" | "FAIL" | "skip") {
                return None;
            }
            let (name, detail) = rest.split_once(": ")?;
            let name = match name.split_once(' ') {
                Some((side @ ("source" | "target"), ty)) if ty != "uniqueness" => side.to_string(),
                _ => name.to_string(),
            };
            Some((status.to_string(), name, detail.to_string()))
        })
        .collect()
}

/// Every check printed, once, in order, and each passed (uniqueness may be
/// skipped only when the job does not write); exit status 0.
fn assert_green(o: &Output) -> Vec<(String, String, String)> {
    let l = lines(o);
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
    let names: Vec<&str> = l.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(names, CHECKS, "{}", text(o));
    for (status, name, _) in &l {
        assert_eq!(status, "ok", "{name}: {}", text(o));
    }
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("all checks passed"),
        "{}",
        text(o)
    );
    l
}

/// Exactly the check `failed` failed (the checks after a config or secrets
/// failure are skipped, none passes or fails silently); exit status 2.
fn assert_only_failed(o: &Output, failed: &str) -> String {
    let l = lines(o);
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    let names: Vec<&str> = l.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(names, CHECKS, "{}", text(o));
    let fails: BTreeSet<&str> = l
        .iter()
        .filter(|(s, _, _)| s == "FAIL")
        .map(|(_, n, _)| n.as_str())
        .collect();
    assert_eq!(fails, BTreeSet::from([failed]), "{}", text(o));
    let (_, _, detail) = l.iter().find(|(s, _, _)| s == "FAIL").unwrap();
    assert!(detail.contains(" -> fix: "), "{}", text(o));
    detail.clone()
}

/// The detail of one check's line.
fn detail<'a>(l: &'a [(String, String, String)], name: &str) -> &'a str {
    &l.iter().find(|(_, n, _)| n == name).unwrap().2
}

/// The names of the checks that failed.
fn failed(l: &[(String, String, String)]) -> Vec<&str> {
    l.iter()
        .filter(|(s, _, _)| s == "FAIL")
        .map(|(_, n, _)| n.as_str())
        .collect()
}

/// `[defaults]` with the state store and the reports in `dir`.
fn defaults(dir: &Path) -> String {
    format!(
        "[defaults]\nstate = \"sqlite://{}\"\nreports = \"{}\"\n",
        dir.join("state.db").display(),
        dir.join("reports").display(),
    )
}

/// Job `name`: Stripe's charges against `table` at `url` (key
/// `charge_id`), with `head` among the job's own settings and `tail`
/// after the target.
fn stripe_to_sql(
    stripe: &Stripe,
    name: &str,
    url: &str,
    table: &str,
    head: &str,
    tail: &str,
) -> String {
    format!(
        "\n[jobs.{name}]\n{FIELDS}\n{head}\n{}{}{tail}",
        stripe_source(name, &stripe.api_key, &stripe.base_url),
        sql_target(name, url, table, "charge_id"),
    )
}

async fn stripe() -> Stripe {
    let s = Stripe::start(StripeConfig::default()).await.unwrap();
    let now = jiff::Timestamp::now().as_second();
    s.insert(
        ObjectKind::Charge,
        Stripe::charge("ch_1", 1999, "usd", "succeeded", now - 60),
    );
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_to_hubspot_then_a_bad_token_and_a_property_that_is_not_unique() {
    let stripe = stripe().await;
    let hubspot = HubSpot::start(HubSpotConfig::default()).await.unwrap();
    hubspot.create_property("deals", "stripe_charge_id", true);
    hubspot.create_property("deals", "plain_charge_id", false);
    for p in ["deal_currency_code", "dealstage", "stripe_created"] {
        hubspot.create_property("deals", p, false);
    }
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str, key: &str, token: &str, id_property: &str| {
        format!(
            "\n[jobs.{name}]\n{FIELDS}\n{}{}",
            stripe_source(name, key, &stripe.base_url),
            common::hubspot_deals_target_by(name, token, &hubspot.base_url, id_property),
        )
    };
    let config = write_config(
        dir.path(),
        &format!(
            "{}{}{}{}{}",
            defaults(dir.path()),
            job("good", &stripe.api_key, &hubspot.token, "stripe_charge_id"),
            job(
                "bad_stripe_key",
                "sk_test_not_the_emulators_key",
                &hubspot.token,
                "stripe_charge_id"
            ),
            job(
                "bad_hubspot_token",
                &stripe.api_key,
                "pat-na1-wrong",
                "stripe_charge_id"
            ),
            job(
                "not_unique",
                &stripe.api_key,
                &hubspot.token,
                "plain_charge_id"
            ),
        ),
    );

    let o = check(&config, "good", &[], &[]).await;
    let l = assert_green(&o);
    let source = detail(&l, "source");
    assert!(
        source.starts_with("reachable, authenticated (Stripe /v1/charges at"),
        "{source}"
    );
    assert!(
        source.contains("25 req/s (Stripe's documented test-mode limit)"),
        "{source}"
    );
    let target = detail(&l, "target");
    assert!(target.starts_with("reachable, authenticated"), "{target}");
    // The emulator's X-HubSpot-RateLimit-* headers: 100 per 10 s, one used.
    assert!(
        target.contains("of 100 requests left in the 10-s window"),
        "{target}"
    );
    assert!(detail(&l, "state store").contains("takes writes"));
    assert!(detail(&l, "report folder").contains("will be created"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains(&stripe.api_key) && !out.contains(&hubspot.token),
        "{out}"
    );
    // Nothing was made: no report folder, no run recorded.
    assert!(!dir.path().join("reports").exists());

    let o = check(&config, "bad_stripe_key", &[], &[]).await;
    let why = assert_only_failed(&o, "source");
    assert!(why.contains("401"), "{why}");
    assert!(why.contains("source.api_key"), "{why}");
    assert!(!why.contains("sk_test_not_the_emulators_key"), "{why}");

    let o = check(&config, "bad_hubspot_token", &[], &[]).await;
    let why = assert_only_failed(&o, "target");
    assert!(why.contains("401") && why.contains("target.token"), "{why}");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("pat-na1-wrong"));
    // The unique key needs the target: skipped, not failed.
    assert!(lines(&o)
        .iter()
        .any(|(s, n, _)| s == "skip" && n == "target uniqueness"));

    let o = check(&config, "not_unique", &[], &[]).await;
    let why = assert_only_failed(&o, "target uniqueness");
    assert!(
        why.contains("plain_charge_id") && why.contains("hasUniqueValue"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shopify_to_sqlite_then_an_unreachable_shop_and_a_table_without_a_unique_key() {
    let shopify = Shopify::start(ShopifyConfig::default()).await.unwrap();
    let db = TestDb::create(Dialect::Sqlite).await;
    db.exec(
        "CREATE TABLE orders (shopify_id TEXT UNIQUE NOT NULL, total_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP);
         CREATE TABLE loose (shopify_id TEXT NOT NULL, total_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str, shop: &str, table: &str| {
        format!(
            r#"
[jobs.{name}]
{FIELDS}
[jobs.{name}.source]
type = "shopify"
shop_url = "{shop}"
token = "{token}"
[jobs.{name}.target]
type = "sql"
url = "{url}"
table = "{table}"
key = "shopify_id"
columns = {{ amount = "total_cents", created = "created_at" }}
"#,
            token = shopify.token,
            url = db.url,
        )
    };
    let config = write_config(
        dir.path(),
        &format!(
            "{}{}{}{}",
            defaults(dir.path()),
            job("good", &shopify.base_url, "orders"),
            job(
                "unreachable",
                &format!("http://127.0.0.1:{}", closed_port()),
                "orders"
            ),
            job("loose", &shopify.base_url, "loose"),
        ),
    );

    let o = check(&config, "good", &[], &[]).await;
    let l = assert_green(&o);
    let source = detail(&l, "source");
    // The cost bucket as the GraphQL answer's extensions.cost reported it.
    assert!(
        source.contains("query cost points available, restoring"),
        "{source}"
    );
    assert!(source.contains("read_all_orders: every window"), "{source}");
    let target = detail(&l, "target");
    assert!(
        target.contains("table orders") && target.contains("SQLite"),
        "{target}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains(&shopify.token));

    let o = check(&config, "unreachable", &[], &[]).await;
    let why = assert_only_failed(&o, "source");
    assert!(why.contains("Shopify"), "{why}");
    assert!(why.contains("reachable"), "{why}");

    let o = check(&config, "loose", &[], &[]).await;
    let why = assert_only_failed(&o, "target uniqueness");
    assert!(why.contains("loose") && why.contains("UNIQUE"), "{why}");

    // A token the shop accepts but that may not read orders.
    let no_orders = Shopify::start(ShopifyConfig {
        access_scopes: vec!["read_products".into()],
        ..ShopifyConfig::default()
    })
    .await
    .unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "{}{}",
            defaults(dir.path()),
            job("no_orders", &no_orders.base_url, "orders"),
        ),
    );
    let o = check(&config, "no_orders", &[], &[]).await;
    let why = assert_only_failed(&o, "source");
    assert!(
        why.contains("lacks the read_orders scope (it has: read_products)"),
        "{why}"
    );
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_to_salesforce_then_a_missing_environment_variable() {
    let stripe = stripe().await;
    let sf = Salesforce::start(SalesforceConfig::default())
        .await
        .unwrap();
    sf.define_object(
        "Payment__c",
        vec![
            FieldDef::external_id("Stripe_Charge_Id__c"),
            FieldDef::currency("Amount__c", 2),
            FieldDef {
                kind: FieldType::Picklist,
                ..FieldDef::text("CurrencyIsoCode")
            },
            FieldDef::text("Status__c"),
            FieldDef::datetime("Charge_Created__c"),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            r#"
[defaults]
state = "sqlite://{state}"
reports = "{reports}"
[jobs.payments]
{FIELDS}
{source}[jobs.payments.target]
type = "salesforce"
instance_url = "{sf}"
auth = {{ client_id = "${{SF_CLIENT_ID}}", client_secret = "${{SF_CLIENT_SECRET}}" }}
object = "Payment__c"
external_id_field = "Stripe_Charge_Id__c"
fields = {{ amount = "Amount__c", currency = "CurrencyIsoCode", status = "Status__c", created = "Charge_Created__c" }}
"#,
            state = dir.path().join("state.db").display(),
            reports = dir.path().join("reports").display(),
            source = stripe_source("payments", "${RECON_CHECK_STRIPE_KEY}", &stripe.base_url),
            sf = sf.base_url,
        ),
    );
    let env = [
        ("RECON_CHECK_STRIPE_KEY", stripe.api_key.as_str()),
        ("SF_CLIENT_ID", sf.client_id.as_str()),
        ("SF_CLIENT_SECRET", sf.client_secret.as_str()),
    ];

    let o = check(&config, "payments", &env, &[]).await;
    let l = assert_green(&o);
    assert_eq!(
        detail(&l, "secrets"),
        "RECON_CHECK_STRIPE_KEY, SF_CLIENT_ID, SF_CLIENT_SECRET set"
    );
    let target = detail(&l, "target");
    // GET /limits: DailyApiRequests of the emulated org (100,000 a day).
    assert!(
        target.contains("of 100000 daily API requests left; a backfill may use"),
        "{target}"
    );
    assert!(
        detail(&l, "target uniqueness").contains("Salesforce Payment__c"),
        "{l:?}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    for (_, secret) in env {
        assert!(!out.contains(secret), "{out}");
    }

    // One variable missing: the secrets check names it and the setting
    // that uses it; nothing after it runs.
    let o = check(&config, "payments", &env[..2], &["SF_CLIENT_SECRET"]).await;
    let why = assert_only_failed(&o, "secrets");
    assert!(
        why.contains("target.auth") || why.contains("SF_CLIENT_SECRET"),
        "{why}"
    );
    assert!(why.contains("export SF_CLIENT_SECRET"), "{why}");
    assert!(!why.contains("SF_CLIENT_ID"), "{why}");
    let skipped = lines(&o).iter().filter(|(s, _, _)| s == "skip").count();
    assert_eq!(skipped, 6, "{}", text(&o));
}

/// A payments table on PostgreSQL or MariaDB, with or without a unique key.
async fn payments_db(dialect: Dialect) -> TestDb {
    let db = TestDb::create(dialect).await;
    let (text, time) = match dialect {
        Dialect::Postgres => ("TEXT", "TIMESTAMPTZ"),
        _ => ("VARCHAR(64)", "DATETIME"),
    };
    db.exec(&format!(
        "CREATE TABLE payments (charge_id {text} NOT NULL PRIMARY KEY, amount_cents BIGINT, currency {text}, status {text}, created_at {time});
         CREATE TABLE loose (charge_id {text} NOT NULL, amount_cents BIGINT, currency {text}, status {text}, created_at {time})"
    ))
    .await;
    db
}

/// Stripe → a database table, the state in `state`: green, then the table
/// without a unique key.
async fn stripe_to_database(dialect: Dialect, state: impl Fn(&Path, &TestDb) -> String) {
    let stripe = stripe().await;
    let db = payments_db(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str, table: &str| stripe_to_sql(&stripe, name, &db.url, table, "", "");
    let config = write_config(
        dir.path(),
        &format!(
            "[defaults]\nstate = \"{}\"\nreports = \"{}\"\n{}{}",
            state(dir.path(), &db),
            dir.path().join("reports").display(),
            job("good", "payments"),
            job("loose", "loose"),
        ),
    );
    let o = check(&config, "good", &[], &[]).await;
    let l = assert_green(&o);
    let target = detail(&l, "target");
    assert!(
        target.contains("table payments") && target.contains("key `charge_id`"),
        "{target}"
    );
    let o = check(&config, "loose", &[], &[]).await;
    let why = assert_only_failed(&o, "target uniqueness");
    assert!(why.contains("loose") && why.contains("UNIQUE"), "{why}");
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_to_postgres_with_the_state_in_postgres() {
    // The state store in the same PostgreSQL database: opened, migrated,
    // and a run row written and rolled back.
    stripe_to_database(Dialect::Postgres, |_, db| db.url.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_to_mariadb() {
    stripe_to_database(Dialect::MySql, |dir, _| {
        format!("sqlite://{}", dir.join("state.db").display())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_report_folder_fails_alone_and_nothing_is_left_behind() {
    let stripe = stripe().await;
    let db = TestDb::create(Dialect::Sqlite).await;
    db.exec("CREATE TABLE payments (charge_id TEXT PRIMARY KEY, amount_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)").await;
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    // As root a 0555 folder is writable anyway: then reports go under a
    // regular file, which no user can write into.
    let is_root = common::is_root();
    let reports = if is_root {
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "not a folder").unwrap();
        file.join("reports")
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        locked.join("reports")
    };
    let job = |name: &str, reports: &Path| {
        let head = format!("reports = \"{}\"", reports.display());
        let tail = format!("[jobs.{name}.backfill]\nmode = \"off\"\n");
        stripe_to_sql(&stripe, name, &db.url, "payments", &head, &tail)
    };
    let config = write_config(
        dir.path(),
        &format!(
            "[defaults]\nstate = \"sqlite://{}\"\n{}{}",
            dir.path().join("state.db").display(),
            job("good", &dir.path().join("reports")),
            job("unwritable", &reports),
        ),
    );
    // A job that never writes: the unique key is not asked for.
    let o = check(&config, "good", &[], &[]).await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let skipped: Vec<&str> = l
        .iter()
        .filter(|(s, _, _)| s != "ok")
        .map(|(s, n, _)| {
            assert_eq!(s, "skip", "{}", text(&o));
            n.as_str()
        })
        .collect();
    assert_eq!(skipped, ["target uniqueness"], "{}", text(&o));

    let o = check(&config, "unwritable", &[], &[]).await;
    let why = assert_only_failed(&o, "report folder");
    if is_root {
        assert!(why.contains("is a file, not a folder"), "{why}");
    } else {
        assert!(why.contains("cannot create a file in"), "{why}");
    }
    // The check leaves no file of its own anywhere it wrote.
    for d in [dir.path().to_path_buf(), locked] {
        for e in std::fs::read_dir(&d).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!name.starts_with(".recon-check"), "{name} left in {d:?}");
        }
    }
    db.drop_db().await;
}

/// The checks of a job that backfills through a webhook: the target is
/// only read (its unique key is not asked for), then the endpoint.
const WEBHOOK_CHECKS: [&str; 9] = [
    "config",
    "secrets",
    "job",
    "source",
    "target",
    "target uniqueness",
    "webhook endpoint",
    "state store",
    "report folder",
];

/// A listener that records how many bytes each connection sent (until the
/// client closes or 2 s pass), so a test can show nothing was POSTed.
fn byte_counting_listener() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<usize>>>) {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { return };
            conn.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let mut buf = Vec::new();
            let _ = conn.read_to_end(&mut buf);
            record.lock().unwrap().push(buf.len());
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_job_reads_its_target_and_connects_to_the_endpoint_without_posting() {
    let stripe = stripe().await;
    let db = TestDb::create(Dialect::Sqlite).await;
    // No unique key: `recon run` never writes here on a webhook route.
    db.exec("CREATE TABLE payments (charge_id TEXT NOT NULL, amount_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)").await;
    let (port, seen) = byte_counting_listener();
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str, url: &str| {
        let tail = format!(
            "[jobs.{name}.backfill]\nmode = \"insert\"\nvia = \"webhook\"\n[jobs.{name}.backfill.webhook]\nurl = \"{url}\"\n"
        );
        stripe_to_sql(&stripe, name, &db.url, "payments", "", &tail)
    };
    let secret_path = "hooks/catch/123456/zz9secretpathtoken";
    let config = write_config(
        dir.path(),
        &format!(
            "{}{}{}",
            defaults(dir.path()),
            job("good", &format!("http://127.0.0.1:{port}/{secret_path}")),
            job(
                "down",
                &format!("http://127.0.0.1:{}/{secret_path}", closed_port())
            ),
        ),
    );

    let o = check(&config, "good", &[], &[]).await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let names: Vec<&str> = l.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(names, WEBHOOK_CHECKS, "{}", text(&o));
    for (status, name, _) in &l {
        let want = if name == "target uniqueness" {
            "skip"
        } else {
            "ok"
        };
        assert_eq!(status, want, "{name}: {}", text(&o));
    }
    assert!(
        detail(&l, "target uniqueness").contains("backfill.via = \"webhook\""),
        "{}",
        text(&o)
    );
    let endpoint = detail(&l, "webhook endpoint");
    assert!(
        endpoint.starts_with(&format!("http://127.0.0.1:{port} accepts connections")),
        "{endpoint}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("zz9secretpathtoken"), "{out}");
    // The endpoint saw one connection and not a byte of a request.
    common::wait_until("a connection to the endpoint", common::PATIENCE, || {
        !seen.lock().unwrap().is_empty()
    });
    assert_eq!(
        *seen.lock().unwrap(),
        vec![0],
        "bytes received per connection"
    );

    let o = check(&config, "down", &[], &[]).await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(failed(&l), ["webhook endpoint"], "{}", text(&o));
    let why = detail(&l, "webhook endpoint");
    assert!(
        why.contains("cannot connect to http://127.0.0.1:") && why.contains(" -> fix: "),
        "{why}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("zz9secretpathtoken"));
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_recon_run_refuses_to_start_with_fails_the_check_too() {
    let stripe = stripe().await;
    let db = TestDb::create(Dialect::Sqlite).await;
    db.exec("CREATE TABLE payments (charge_id TEXT PRIMARY KEY, amount_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("textfile")).unwrap();
    let job = |name: &str, metrics: &Path| {
        let head = format!("metrics_file = \"{}\"", metrics.display());
        stripe_to_sql(&stripe, name, &db.url, "payments", &head, "")
    };
    let config = write_config(
        dir.path(),
        &format!(
            "{}[notify]\nurl = \"${{RECON_TEST_CHECK_HOOK}}\"\non = [\"trouble\", \"discrepancies\"]\n{}{}",
            defaults(dir.path()),
            job("good", &dir.path().join("textfile/{job}.prom")),
            job("no_folder", &dir.path().join("missing/recon.prom")),
        ),
    );
    let hook = "http://127.0.0.1:9/services/T000/B000/zz9hooksecret";
    let mut names: Vec<&str> = CHECKS.to_vec();
    names.extend(["metrics file", "notify"]);

    let o = check(&config, "good", &[("RECON_TEST_CHECK_HOOK", hook)], &[]).await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        l.iter().map(|(_, n, _)| n.as_str()).collect::<Vec<_>>(),
        names,
        "{}",
        text(&o)
    );
    assert!(l.iter().all(|(s, _, _)| s == "ok"), "{}", text(&o));
    assert!(
        detail(&l, "metrics file").contains("textfile/good.prom"),
        "{}",
        text(&o)
    );
    assert_eq!(
        detail(&l, "notify"),
        "posts to http://127.0.0.1:9 on trouble, discrepancies"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("zz9hooksecret"));
    // The check left no file where the metrics go.
    assert_eq!(
        std::fs::read_dir(dir.path().join("textfile"))
            .unwrap()
            .count(),
        0
    );

    // The metrics file's folder is missing: exactly that check fails.
    let o = check(
        &config,
        "no_folder",
        &[("RECON_TEST_CHECK_HOOK", hook)],
        &[],
    )
    .await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(failed(&l), ["metrics file"], "{}", text(&o));
    assert!(
        detail(&l, "metrics file").contains("does not exist"),
        "{}",
        text(&o)
    );

    // The notify URL's variable is not set: exactly that check fails.
    let o = check(&config, "good", &[], &["RECON_TEST_CHECK_HOOK"]).await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(failed(&l), ["notify"], "{}", text(&o));
    let why = detail(&l, "notify");
    assert!(why.contains("RECON_TEST_CHECK_HOOK"), "{why}");
    // And `recon run` indeed refuses to start for the same reason.
    let mut run = common::recon();
    run.args(["run", "--config"])
        .arg(&config)
        .args(["--job", "good"])
        .env_remove("RECON_CONFIG")
        .env_remove("RECON_TEST_CHECK_HOOK");
    let o = common::output_async(run).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("RECON_TEST_CHECK_HOOK"),
        "{}",
        text(&o)
    );
    db.drop_db().await;
}

/// Every `${VAR}` of the webhook route counts: a job whose only variable
/// is `backfill.webhook.signing_secret` (or a header value) is not "the
/// job uses no ${VAR}", and a missing one fails the secrets check, naming
/// the setting, before anything connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_signing_secret_and_headers_are_secrets_the_job_uses() {
    let dir = tempfile::tempdir().unwrap();
    let rows = "id,amount,currency,created\nc1,100,usd,1795842000\n";
    for side in ["source.csv", "target.csv"] {
        std::fs::write(dir.path().join(side), rows).unwrap();
    }
    // The endpoint accepts connections (the check connects, sends nothing).
    let endpoint = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks/recon", endpoint.local_addr().unwrap());
    let job = |name: &str, webhook: &str| {
        format!(
            r#"
[jobs.{name}]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount", "currency"]
window = "2026-11-28"
{source}{target}[jobs.{name}.backfill]
mode = "insert"
via = "webhook"
[jobs.{name}.backfill.webhook]
url = "{url}"
{webhook}
"#,
            source = common::file_side(name, "source", &dir.path().join("source.csv")),
            target = common::file_side(name, "target", &dir.path().join("target.csv")),
        )
    };
    let config = write_config(
        dir.path(),
        &format!(
            "{}{}{}",
            defaults(dir.path()),
            job("signed", "signing_secret = \"${RECON_CHECK_SIGNING}\""),
            job(
                "headed",
                "headers = { X-Api-Token = \"${RECON_CHECK_HEADER}\" }\nsigning_secret = \"plain-shared-secret\"",
            ),
        ),
    );
    let signing = ("RECON_CHECK_SIGNING", "whsec_check_zz9signing");
    let header = ("RECON_CHECK_HEADER", "tok_check_zz9header");

    let o = check(&config, "signed", &[signing], &[header.0]).await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        detail(&l, "secrets"),
        "RECON_CHECK_SIGNING set",
        "{}",
        text(&o)
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains(signing.1));

    let o = check(&config, "headed", &[header], &[signing.0]).await;
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        detail(&l, "secrets"),
        "RECON_CHECK_HEADER set",
        "{}",
        text(&o)
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains(header.1));

    // Unset: exactly the secrets check fails, naming the setting.
    let o = check(&config, "signed", &[], &[signing.0, header.0]).await;
    let why = assert_only_failed(&o, "secrets");
    assert!(
        why.contains(
            "job `signed` backfill.webhook.signing_secret uses ${RECON_CHECK_SIGNING}, which is not set"
        ),
        "{why}"
    );
    assert!(why.contains("export RECON_CHECK_SIGNING"), "{why}");
    let o = check(&config, "headed", &[], &[signing.0, header.0]).await;
    let why = assert_only_failed(&o, "secrets");
    assert!(
        why.contains("backfill.webhook.headers.X-Api-Token uses ${RECON_CHECK_HEADER}"),
        "{why}"
    );
    drop(endpoint);
}
