//! Issue 11, provider minor units, through the binary: Stripe (emulated,
//! over real HTTP on 127.0.0.1) counts ISK in hundredths and MGA in whole
//! ariary, unlike ISO 4217; a ledger holding the same amounts in major
//! units (a SQLite NUMERIC column, a CSV export, HubSpot deals) must match
//! them all, with per-currency totals right in major units.

mod common;

use common::{summary, text};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use recon_hubspot::emulator::{Emulator as HubSpot, EmulatorConfig as HubSpotConfig, PropertyType};
use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig as StripeConfig, ObjectKind};
use serde_json::{json, Value as Json};

/// One charge per row: (currency as Stripe writes it, Stripe API amount,
/// the same amount in major units as a ledger writes it).
const CASES: &[(&str, i64, &str)] = &[
    // ISK: two decimals in Stripe's API, none in ISO 4217.
    ("isk", 10000, "100"),
    ("isk", 123400, "1234"),
    // MGA: zero-decimal at Stripe, two decimals in ISO 4217.
    ("mga", 500, "500.00"),
    ("mga", 75, "75"),
    // HUF and TWD: two decimals in Stripe's API amounts.
    ("huf", 12345, "123.45"),
    ("twd", 9900, "99.00"),
    // UGX and JPY: zero-decimal everywhere.
    ("ugx", 5000, "5000"),
    ("jpy", 500, "500"),
    // KWD: three decimals everywhere.
    ("kwd", 1230, "1.230"),
    ("usd", 2999, "29.99"),
];

/// Expected per-currency totals in major units: code -> (records, total).
fn expected_totals() -> BTreeMap<String, (u64, String)> {
    [
        ("HUF", 1, "123.45"),
        ("ISK", 2, "1334"),
        ("JPY", 1, "500"),
        ("KWD", 1, "1.230"),
        ("MGA", 2, "575.00"),
        ("TWD", 1, "99.00"),
        ("UGX", 1, "5000"),
        ("USD", 1, "29.99"),
    ]
    .into_iter()
    .map(|(c, n, t)| (c.to_string(), (n, t.to_string())))
    .collect()
}

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

/// Runs `recon run` on a blocking thread so the emulators keep serving.
async fn run(config: &Path, out: &Path, key: &str) -> Output {
    let args = vec![
        "run".to_string(),
        "--config".into(),
        config.display().to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    let key = key.to_string();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .args(&args)
            .env("RECON_TEST_STRIPE_KEY", key)
            .env_remove("RECON_LOG")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn charge_id(i: usize) -> String {
    format!("ch_{i:04}")
}

/// A Stripe emulator holding `cases`, created two hours ago.
async fn stripe_with(cases: &[(&str, i64, &str)], now: i64) -> Stripe {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    for (i, (cur, amount, _)) in cases.iter().enumerate() {
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(
                &charge_id(i),
                *amount,
                cur,
                "succeeded",
                now - 7200 + i as i64,
            ),
        );
    }
    stripe
}

fn config(dir: &Path, stripe: &Stripe, target: &str) -> std::path::PathBuf {
    let path = dir.join("recon.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[defaults]
state = "sqlite://{state}"
[jobs.charges]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount", "currency"]
window = "last:24h"
{source}{target}
[jobs.charges.backfill]
mode = "off"
"#,
            state = dir.join("state.db").display(),
            source = common::stripe_source("charges", "${RECON_TEST_STRIPE_KEY}", &stripe.base_url),
        ),
    )
    .unwrap();
    path
}

/// Asserts a run that matched every case: exit 0, counts, totals.
fn assert_all_matched(o: &Output, out: &Path) {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
    let s = summary(out);
    let n = CASES.len() as u64;
    for (k, want) in [
        ("source_records", n),
        ("target_records", n),
        ("matched", n),
        ("gaps", 0),
        ("orphans", 0),
        ("mismatches", 0),
    ] {
        assert_eq!(s[k].as_u64(), Some(want), "{k}: {s}");
    }
    assert_eq!(totals(&s, "source"), expected_totals(), "{s}");
    assert_eq!(totals(&s, "target"), expected_totals(), "{s}");
}

/// `DIR/ledger.db` with an empty `payments` table whose amounts are
/// NUMERIC major units; its URL and a connection to it.
async fn numeric_ledger(dir: &Path) -> (String, sqlx::AnyConnection) {
    let url = format!("sqlite://{}?mode=rwc", dir.join("ledger.db").display());
    let mut conn = common::connect(&url).await;
    sqlx::query(
        "CREATE TABLE payments (stripe_charge_id TEXT UNIQUE NOT NULL, amount NUMERIC(18, 3), \
         currency TEXT, created_at INTEGER)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    (url, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_against_a_sqlite_numeric_ledger_in_major_units() {
    sqlx::any::install_default_drivers();
    let now = jiff::Timestamp::now().as_second();
    let stripe = stripe_with(CASES, now).await;
    let dir = tempfile::tempdir().unwrap();
    let (url, mut conn) = numeric_ledger(dir.path()).await;
    for (i, (cur, _, major)) in CASES.iter().enumerate() {
        sqlx::query(&format!(
            "INSERT INTO payments VALUES ('{}', {major}, '{}', {})",
            charge_id(i),
            cur.to_uppercase(),
            now - 7200 + i as i64
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let target = format!(
        "[jobs.charges.target]\ntype = \"sql\"\nurl = \"{url}\"\ntable = \"payments\"\n\
         key = \"stripe_charge_id\"\ncolumns = {{ created = \"created_at\" }}\n"
    );
    let cfg = config(dir.path(), &stripe, &target);
    let out = dir.path().join("out");
    let o = run(&cfg, &out, &stripe.api_key).await;
    assert_all_matched(&o, &out);
    stripe.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_against_a_csv_export_in_major_units() {
    let now = jiff::Timestamp::now().as_second();
    let stripe = stripe_with(CASES, now).await;
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("id,amount,currency,created\n");
    for (i, (cur, _, major)) in CASES.iter().enumerate() {
        csv.push_str(&format!(
            "{},{major},{},{}\n",
            charge_id(i),
            cur.to_uppercase(),
            now - 7200 + i as i64
        ));
    }
    let ledger = dir.path().join("ledger.csv");
    std::fs::write(&ledger, csv).unwrap();
    let target = format!(
        "[jobs.charges.target]\ntype = \"file\"\npath = \"{}\"\nkey = \"id\"\namount_format = \"major\"\n",
        ledger.display()
    );
    let cfg = config(dir.path(), &stripe, &target);
    let out = dir.path().join("out");
    let o = run(&cfg, &out, &stripe.api_key).await;
    assert_all_matched(&o, &out);
    stripe.shutdown().await;
}

/// Stripe ISK 10050 would be 100.50 ISK, which ISK cannot hold: the run
/// stops with exit 2 naming the charge and the field, and writes no report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_amount_that_would_need_rounding_stops_the_run() {
    let now = jiff::Timestamp::now().as_second();
    let cases = [("usd", 2999, "29.99"), ("isk", 10050, "100.50")];
    let stripe = stripe_with(&cases, now).await;
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.csv");
    std::fs::write(
        &ledger,
        format!("id,amount,currency,created\nch_0000,29.99,USD,{now}\n"),
    )
    .unwrap();
    let target = format!(
        "[jobs.charges.target]\ntype = \"file\"\npath = \"{}\"\nkey = \"id\"\namount_format = \"major\"\n",
        ledger.display()
    );
    let cfg = config(dir.path(), &stripe, &target);
    let out = dir.path().join("out");
    let o = run(&cfg, &out, &stripe.api_key).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Stripe charge ch_0001")
            && err.contains("field `amount`")
            && err.contains("`10050`")
            && err.contains("100.50 ISK")
            && err.contains("never rounded"),
        "{err}"
    );
    assert!(!out.exists(), "no reports for a failed run");
    stripe.shutdown().await;
}

/// Stripe → HubSpot deals whose `amount` holds major units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_against_hubspot_deals_in_major_units() {
    let now = jiff::Timestamp::now().as_second();
    let stripe = stripe_with(CASES, now).await;
    let hubspot = HubSpot::start(HubSpotConfig::default()).await.unwrap();
    hubspot.create_property("deals", "stripe_charge_id", true);
    hubspot.create_property("deals", "deal_currency_code", false);
    hubspot.create_typed_property("deals", "amount", PropertyType::Number, false);
    hubspot.create_typed_property("deals", "stripe_created", PropertyType::DateTime, false);
    for (i, (cur, _, major)) in CASES.iter().enumerate() {
        let mut p = serde_json::Map::new();
        p.insert("stripe_charge_id".into(), json!(charge_id(i)));
        p.insert("amount".into(), json!(major));
        p.insert("deal_currency_code".into(), json!(cur.to_uppercase()));
        p.insert(
            "stripe_created".into(),
            json!(((now - 7200 + i as i64) * 1000).to_string()),
        );
        hubspot.insert("deals", p);
    }
    let dir = tempfile::tempdir().unwrap();
    let target = format!(
        "[jobs.charges.target]\ntype = \"hubspot\"\ntoken = \"{token}\"\nbase_url = \"{base}\"\n\
         object_type = \"deals\"\nid_property = \"stripe_charge_id\"\n\
         properties = {{ currency = \"deal_currency_code\", created = \"stripe_created\" }}\n\
         currency_property = \"deal_currency_code\"\n",
        token = hubspot.token,
        base = hubspot.base_url,
    );
    let cfg = config(dir.path(), &stripe, &target);
    let out = dir.path().join("out");
    let o = run(&cfg, &out, &stripe.api_key).await;
    assert_all_matched(&o, &out);
    stripe.shutdown().await;
}

/// The write direction: Stripe amounts backfilled into a NUMERIC column in
/// major units land as the ledger's own rows would hold them (ISK 10000 in
/// Stripe's units is 100 krónur), and the next run matches them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_amounts_backfilled_into_a_numeric_ledger_are_exact_major_units() {
    sqlx::any::install_default_drivers();
    let now = jiff::Timestamp::now().as_second();
    let stripe = stripe_with(CASES, now).await;
    let dir = tempfile::tempdir().unwrap();
    let (url, mut conn) = numeric_ledger(dir.path()).await;
    let target = format!(
        "[jobs.charges.target]\ntype = \"sql\"\nurl = \"{url}\"\ntable = \"payments\"\n\
         key = \"stripe_charge_id\"\ncolumns = {{ created = \"created_at\" }}\n"
    );
    let cfg = config(dir.path(), &stripe, &target);
    let text_cfg = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("mode = \"off\"", "mode = \"insert\"\nmax_ratio = 1.0");
    std::fs::write(&cfg, text_cfg).unwrap();
    let out = dir.path().join("backfill");
    let o = run(&cfg, &out, &stripe.api_key).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&out)["backfilled"], CASES.len() as u64);
    for (i, (cur, _, major)) in CASES.iter().enumerate() {
        use sqlx::Row;
        let row = sqlx::query(
            "SELECT CAST(amount AS TEXT), currency FROM payments WHERE stripe_charge_id = ?",
        )
        .bind(charge_id(i))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        let stored: String = row.get(0);
        let want: f64 = major.parse().unwrap();
        let got: f64 = stored.parse().unwrap();
        assert!(
            (got - want).abs() < 1e-9,
            "{cur}: stored {stored}, expected {major} in major units"
        );
        assert_eq!(row.get::<String, _>(1), cur.to_uppercase());
    }
    let again = dir.path().join("again");
    let o = run(&cfg, &again, &stripe.api_key).await;
    assert_all_matched(&o, &again);
    stripe.shutdown().await;
}
