//! Shopify (emulated GraphQL Admin API) → SQLite through the binary.

mod common;

use common::{text, CHARGE_FIELDS};

use recon_shopify::emulator::{Emulator, EmulatorConfig, OrderSpec};
use sqlx::Row;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shopify_orders_to_sqlite() {
    sqlx::any::install_default_drivers();
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let url = format!("sqlite://{}?mode=rwc", db.display());
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE orders (shopify_id TEXT UNIQUE NOT NULL, total_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)")
        .execute(&mut conn)
        .await
        .unwrap();
    let now = jiff::Timestamp::now().as_second();
    let mut rows = Vec::new();
    for i in 0..200u64 {
        let created = now - 30_000 + i as i64 * 100;
        let (amount, cents, cur) = match i % 3 {
            0 => (
                format!("{}.{:02}", 10 + i, i % 100),
                (10 + i) * 100 + i % 100,
                "USD",
            ),
            1 => (format!("{}.0", 500 + i), 500 + i, "JPY"),
            _ => (format!("0.{:03}", 100 + i), 100 + i, "KWD"),
        };
        e.insert_order(OrderSpec {
            legacy_id: 820_000 + i,
            name: format!("#{}", 1001 + i),
            created_at: jiff::Timestamp::from_second(created).unwrap(),
            updated_at: jiff::Timestamp::from_second(created).unwrap(),
            amount,
            currency: cur.into(),
            financial_status: "PAID".into(),
            email: None,
        });
        if i % 10 != 0 {
            let t = jiff::Timestamp::from_second(created)
                .unwrap()
                .strftime("%Y-%m-%d %H:%M:%S");
            rows.push(format!(
                "('{}', {cents}, '{cur}', 'PAID', '{t}')",
                820_000 + i
            ));
        }
    }
    sqlx::query(&format!(
        "INSERT INTO orders (shopify_id, total_cents, currency, status, created_at) VALUES {}",
        rows.join(", ")
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let config = dir.path().join("recon.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[defaults]
state = "sqlite://{state}"
[jobs.orders]
{CHARGE_FIELDS}
[jobs.orders.source]
type = "shopify"
shop_url = "{shop}"
token = "{token}"
[jobs.orders.target]
type = "sql"
url = "{url}"
table = "orders"
key = "shopify_id"
columns = {{ amount = "total_cents", created = "created_at" }}
[jobs.orders.backfill]
max_ratio = 0.5
"#,
            state = dir.path().join("state.db").display(),
            shop = e.base_url,
            token = e.token,
        ),
    )
    .unwrap();
    let run = |out: &str| {
        let args = vec![
            "run".to_string(),
            "--config".into(),
            config.display().to_string(),
            "--out".into(),
            dir.path().join(out).display().to_string(),
        ];
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
                .args(&args)
                .output()
                .unwrap()
        })
    };
    let o = run("first").await.unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("first/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["gaps"], 20, "{s}");
    assert_eq!(
        s["matched"], 180,
        "JPY 500.0 and KWD 0.100 compare exactly: {s}"
    );
    assert_eq!(s["backfilled"], 20);
    let count: i64 = sqlx::query("SELECT COUNT(*) FROM orders")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 200);
    let o = run("second").await.unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("second/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["backfilled"], 0);
    assert_eq!(s["resolved"], 20, "{s}");
    e.shutdown().await;
}
