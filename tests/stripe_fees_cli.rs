//! Stripe balance transactions (emulated, over real HTTP on 127.0.0.1) →
//! a SQLite ledger of fees through the binary: `amount` the money field,
//! `fee` and `net` whole minor units, negative amounts (a refund, a
//! payout), the window's edges, a gap backfilled with exact values, a fee
//! mismatch and an orphan reported with exact figures.

mod common;

use common::{recon_async as recon, summary, text};

use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};
use sqlx::Row;

const HOUR: i64 = 3_600;

fn rfc3339(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).unwrap().to_string()
}

fn sql_time(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .unwrap()
        .strftime("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// The CSV's lines after the header, sorted.
fn lines(path: &std::path::Path) -> Vec<String> {
    let body = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut l: Vec<String> = body.lines().skip(1).map(str::to_owned).collect();
    l.sort();
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_transactions_reconcile_against_a_fee_ledger_with_exact_fees_and_nets() {
    sqlx::any::install_default_drivers();
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    // A whole day three days back, on the hour: old enough that nothing is
    // pending, with edges the test can put records on.
    let now = jiff::Timestamp::now().as_second();
    let start = (now - 3 * 86_400) / HOUR * HOUR;
    let end = start + 86_400;
    let t = Emulator::balance_transaction;
    emu.insert_many(
        ObjectKind::BalanceTransaction,
        [
            // In the ledger, equal.
            t(
                "txn_equal",
                10_000,
                320,
                "usd",
                "charge",
                Some("ch_1"),
                start + HOUR,
            ),
            // In the ledger with the fee booked at 1.00 (and the net at 24.00).
            t(
                "txn_fee_off",
                2_500,
                103,
                "usd",
                "charge",
                Some("ch_2"),
                start + 2 * HOUR,
            ),
            // A refund: negative amount and net.
            t(
                "txn_refund",
                -1_500,
                0,
                "usd",
                "refund",
                Some("re_1"),
                start + 3 * HOUR,
            ),
            // A payout, not in the ledger: a gap, backfilled exactly.
            t(
                "txn_payout",
                -11_077,
                0,
                "usd",
                "payout",
                Some("po_1"),
                start + 4 * HOUR,
            ),
            // A EUR charge, equal.
            t(
                "txn_eur",
                3_000,
                117,
                "eur",
                "charge",
                Some("ch_3"),
                start + 5 * HOUR,
            ),
            // On the window's first second (in) and on its end (out).
            t(
                "txn_at_start",
                700,
                50,
                "usd",
                "charge",
                Some("ch_4"),
                start,
            ),
            t("txn_at_end", 900, 56, "usd", "charge", Some("ch_5"), end),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.db");
    let url = format!("sqlite://{}?mode=rwc", ledger.display());
    let mut conn = common::connect(&url).await;
    sqlx::query("CREATE TABLE stripe_balance (txn_id TEXT UNIQUE NOT NULL, amount_cents INTEGER, currency TEXT, fee_cents INTEGER, net_cents INTEGER, txn_type TEXT, created_at TIMESTAMP)")
        .execute(&mut conn)
        .await
        .unwrap();
    let rows = [
        (
            "txn_equal",
            10_000,
            "usd",
            320,
            9_680,
            "charge",
            start + HOUR,
        ),
        (
            "txn_fee_off",
            2_500,
            "usd",
            100,
            2_400,
            "charge",
            start + 2 * HOUR,
        ),
        (
            "txn_refund",
            -1_500,
            "usd",
            0,
            -1_500,
            "refund",
            start + 3 * HOUR,
        ),
        (
            "txn_eur",
            3_000,
            "eur",
            117,
            2_883,
            "charge",
            start + 5 * HOUR,
        ),
        ("txn_at_start", 700, "usd", 50, 650, "charge", start),
        // Booked, but Stripe has no such transaction: an orphan.
        (
            "txn_orphan",
            4_200,
            "usd",
            152,
            4_048,
            "charge",
            start + 6 * HOUR,
        ),
    ];
    for (id, amount, cur, fee, net, ty, at) in rows {
        sqlx::query(&format!(
            "INSERT INTO stripe_balance VALUES ('{id}', {amount}, '{cur}', {fee}, {net}, '{ty}', '{}')",
            sql_time(at)
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let config = common::write_config(
        dir.path(),
        &format!(
            r#"[defaults]
state = "sqlite://{state}?mode=rwc"

[jobs.fees]
fields = {{ amount = "money", currency = "currency", fee = "integer", net = "integer", type = "text", created = "timestamp" }}
compare = ["amount", "currency", "fee", "net", "type"]
window = "{start}..{end}"

[jobs.fees.source]
type = "stripe"
object = "balance_transactions"
api_key = "${{RECON_TEST_STRIPE_KEY}}"
base_url = "{base_url}"

[jobs.fees.target]
type = "sql"
url = "{url}"
table = "stripe_balance"
key = "txn_id"
columns = {{ amount = "amount_cents", fee = "fee_cents", net = "net_cents", type = "txn_type", created = "created_at" }}

[jobs.fees.backfill]
mode = "insert"
max_ratio = 1.0
"#,
            state = dir.path().join("state.db").display(),
            start = rfc3339(start),
            end = rfc3339(end),
            base_url = emu.base_url,
        ),
    );
    let out = dir.path().join("reports");
    let o = recon(
        vec![
            "run".to_string(),
            "--config".into(),
            config.display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ],
        vec![("RECON_TEST_STRIPE_KEY", emu.api_key.clone())],
    )
    .await;
    // The mismatch and the orphan stay open: exit 1.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&out);
    assert_eq!(s["source_records"], 6, "txn_at_end is outside: {s}");
    assert_eq!(s["target_records"], 6, "{s}");
    assert_eq!(s["matched"], 4, "{s}");
    assert_eq!(s["gaps"], 1, "{s}");
    assert_eq!(s["orphans"], 1, "{s}");
    assert_eq!(s["mismatches"], 1, "{s}");
    assert_eq!(s["backfilled"], 1, "{s}");
    // Totals per currency, exact: Stripe's USD 10000 + 2500 - 1500 - 11077
    // + 700; the ledger's (before the backfill) 10000 + 2500 - 1500 + 700
    // + 4200.
    let total = |side: &str, cur: &str| {
        let t = s["totals"][side]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["currency"] == cur)
            .unwrap_or_else(|| panic!("{side} {cur}: {s}"));
        (
            t["total_minor"].clone(),
            t["total"].clone(),
            t["records"].clone(),
        )
    };
    assert_eq!(
        total("source", "USD"),
        ("623".into(), "6.23".into(), 5.into())
    );
    assert_eq!(
        total("source", "EUR"),
        ("3000".into(), "30.00".into(), 1.into())
    );
    assert_eq!(
        total("target", "USD"),
        ("15900".into(), "159.00".into(), 5.into())
    );

    // The fee and net differences, as whole minor units, target − source.
    let mismatches = lines(&out.join("mismatches.csv"));
    assert_eq!(mismatches.len(), 2, "{mismatches:?}");
    assert!(
        mismatches[0].starts_with("txn_fee_off,fee,103,100,,-3"),
        "{mismatches:?}"
    );
    assert!(
        mismatches[1].starts_with("txn_fee_off,net,2397,2400,,3"),
        "{mismatches:?}"
    );
    // The gap: a negative payout with its fee and net.
    let gaps = std::fs::read_to_string(out.join("gaps.csv")).unwrap();
    let header: Vec<&str> = gaps.lines().next().unwrap().split(',').collect();
    let gap: Vec<&str> = gaps.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| gap[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(col("external_id"), "txn_payout", "{gaps}");
    assert_eq!(col("amount"), "-110.77", "{gaps}");
    assert_eq!(col("fee"), "0", "{gaps}");
    assert_eq!(col("net"), "-11077", "{gaps}");
    assert_eq!(col("type"), "payout", "{gaps}");
    let orphans = std::fs::read_to_string(out.join("orphans.csv")).unwrap();
    assert!(orphans.contains("txn_orphan"), "{orphans}");
    assert!(!orphans.contains("txn_at_end") && !gaps.contains("txn_at_end"));

    // The backfilled row holds Stripe's exact figures; nothing else moved.
    let row = sqlx::query(
        "SELECT amount_cents, currency, fee_cents, net_cents, txn_type FROM stripe_balance WHERE txn_id = 'txn_payout'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(row.try_get::<i64, _>(0).unwrap(), -11_077);
    assert_eq!(
        row.try_get::<String, _>(1).unwrap().to_ascii_lowercase(),
        "usd"
    );
    assert_eq!(row.try_get::<i64, _>(2).unwrap(), 0);
    assert_eq!(row.try_get::<i64, _>(3).unwrap(), -11_077);
    assert_eq!(row.try_get::<String, _>(4).unwrap(), "payout");
    let fee: i64 = sqlx::query("SELECT fee_cents FROM stripe_balance WHERE txn_id = 'txn_fee_off'")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(fee, 100, "insert mode never repairs a mismatch");
    // The source read balance transactions, in the window, and looked the
    // orphan up by ID.
    let requests = emu.requests();
    assert!(requests.iter().any(|r| r.path == "/v1/balance_transactions"
        && r.query
            .contains(&("created[gte]".into(), start.to_string()))
        && r.query.contains(&("created[lt]".into(), end.to_string()))));
    assert!(requests
        .iter()
        .any(|r| r.path == "/v1/balance_transactions/txn_orphan"));
    emu.shutdown().await;
}

/// `examples/stripe_fees.toml` as shipped, pointed at the emulator and a
/// SQLite ledger: it parses, runs, and books the window's balance
/// transactions with their exact fees and nets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stripe_fees_example_runs_as_shipped() {
    sqlx::any::install_default_drivers();
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let now = jiff::Timestamp::now().as_second();
    let start = (now - 3 * 86_400) / HOUR * HOUR;
    let end = start + 86_400;
    let t = Emulator::balance_transaction;
    emu.insert_many(
        ObjectKind::BalanceTransaction,
        [
            t(
                "txn_a",
                4_999,
                175,
                "usd",
                "charge",
                Some("ch_a"),
                start + 60,
            ),
            t(
                "txn_b",
                -4_999,
                0,
                "usd",
                "refund",
                Some("re_b"),
                start + 120,
            ),
            t(
                "txn_c",
                125_000,
                0,
                "jpy",
                "charge",
                Some("ch_c"),
                start + 180,
            ),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/stripe_fees.toml"),
    )
    .unwrap();
    let api_key = r#"api_key = "${STRIPE_API_KEY}""#;
    assert!(example.contains(api_key));
    let config = example.replace(
        api_key,
        &format!("{api_key}\nbase_url = \"{}\"\n", emu.base_url),
    );
    let path = common::write_config(dir.path(), &config);
    let parsed = recon::config::load(&path).unwrap();
    assert!(parsed.jobs.contains_key("stripe_fees"));
    let ledger = dir.path().join("ledger.db");
    let url = format!("sqlite://{}?mode=rwc", ledger.display());
    let mut conn = common::connect(&url).await;
    sqlx::query("CREATE TABLE stripe_balance_transactions (txn_id TEXT PRIMARY KEY, amount_cents INTEGER NOT NULL, currency TEXT NOT NULL, fee_cents INTEGER NOT NULL, net_cents INTEGER NOT NULL, txn_type TEXT NOT NULL, source_id TEXT, created_at TIMESTAMP NOT NULL)")
        .execute(&mut conn)
        .await
        .unwrap();
    let mut cmd = common::recon();
    cmd.current_dir(dir.path())
        .args([
            "run",
            "--config",
            path.to_str().unwrap(),
            "--window",
            &format!("{}..{}", rfc3339(start), rfc3339(end)),
            // A first run books everything: past the example's 10% ratio.
            "--max-ratio",
            "1",
        ])
        .env("STRIPE_API_KEY", &emu.api_key)
        .env("LEDGER_DATABASE_URL", &url);
    let o = common::output_async(cmd).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rows = sqlx::query("SELECT txn_id, amount_cents, currency, fee_cents, net_cents, txn_type, source_id FROM stripe_balance_transactions ORDER BY txn_id")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let got: Vec<(String, i64, String, i64, i64, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.try_get(0).unwrap(),
                r.try_get(1).unwrap(),
                r.try_get::<String, _>(2).unwrap().to_ascii_lowercase(),
                r.try_get(3).unwrap(),
                r.try_get(4).unwrap(),
                r.try_get(5).unwrap(),
                r.try_get(6).unwrap(),
            )
        })
        .collect();
    let row = |id: &str, a, c: &str, f, n, ty: &str, s: &str| {
        (
            id.to_string(),
            a,
            c.to_string(),
            f,
            n,
            ty.to_string(),
            s.to_string(),
        )
    };
    assert_eq!(
        got,
        vec![
            row("txn_a", 4_999, "usd", 175, 4_824, "charge", "ch_a"),
            row("txn_b", -4_999, "usd", 0, -4_999, "refund", "re_b"),
            row("txn_c", 125_000, "jpy", 0, 125_000, "charge", "ch_c"),
        ]
    );
    // The reports went where the example says, under the job's name.
    assert!(dir.path().join("reports/stripe_fees").is_dir());
    emu.shutdown().await;
}

/// `source.filters` through the config file and the binary: a filter the
/// endpoint takes is sent by `recon check`'s probe; one it does not take
/// fails the check naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_sends_the_filters_and_refuses_one_the_endpoint_does_not_take() {
    sqlx::any::install_default_drivers();
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.db");
    let url = format!("sqlite://{}?mode=rwc", ledger.display());
    let mut conn = common::connect(&url).await;
    sqlx::query("CREATE TABLE payouts (po_id TEXT UNIQUE NOT NULL, amount_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)")
        .execute(&mut conn)
        .await
        .unwrap();
    let config = |filters: &str| {
        format!(
            r#"[defaults]
state = "sqlite://{state}?mode=rwc"

[jobs.payouts]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "yesterday"

[jobs.payouts.source]
type = "stripe"
object = "payouts"
api_key = "${{RECON_TEST_STRIPE_KEY}}"
base_url = "{base_url}"
filters = {filters}

[jobs.payouts.target]
type = "sql"
url = "{url}"
table = "payouts"
key = "po_id"
columns = {{ amount = "amount_cents", created = "created_at" }}
"#,
            state = dir.path().join("state.db").display(),
            base_url = emu.base_url,
        )
    };
    let check = |text: String| {
        let path = common::write_config(dir.path(), &text);
        let key = emu.api_key.clone();
        async move {
            recon(
                vec![
                    "check".to_string(),
                    "--config".into(),
                    path.display().to_string(),
                ],
                vec![("RECON_TEST_STRIPE_KEY", key)],
            )
            .await
        }
    };
    let o = check(config(r#"{ status = "failed" }"#)).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(emu
        .requests()
        .iter()
        .any(|r| r.path == "/v1/payouts" && r.query.contains(&("status".into(), "failed".into()))));
    let o = check(config(r#"{ type = "bank_account" }"#)).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("source.filters.type") && out.contains("use one of: status, destination"),
        "{out}"
    );
    emu.shutdown().await;
}
