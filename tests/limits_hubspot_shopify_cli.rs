//! Issue 12 through the binary: a Shopify source over a window older than
//! 60 days without `read_all_orders` stops with exit 2, names the scope and
//! the fix, and writes nothing; with the scope the same job backfills; a
//! malformed `rate_limit_patience` is refused naming the setting.

mod common;

use common::text;

use std::path::Path;
use std::process::Output;

use recon_shopify::emulator::{Emulator, EmulatorConfig, OrderSpec};
use sqlx::Row;

/// `recon run --config CFG --out OUT`.
async fn run(cfg: &Path, out: &Path) -> Output {
    let args: Vec<&std::ffi::OsStr> = vec![
        "run".as_ref(),
        "--config".as_ref(),
        cfg.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ];
    common::recon_async(args, Vec::<(String, String)>::new()).await
}

/// A job reading Shopify orders of the day 90 days ago into SQLite.
fn config(dir: &Path, e: &Emulator, db: &str, day: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("recon.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[defaults]
state = "sqlite://{state}"
[jobs.orders]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "{day}"
[jobs.orders.source]
type = "shopify"
shop_url = "{shop}"
token = "{token}"
{extra}
[jobs.orders.target]
type = "sql"
url = "{db}"
table = "orders"
key = "shopify_id"
columns = {{ amount = "total_cents", created = "created_at" }}
[jobs.orders.backfill]
max_ratio = 1
"#,
            state = dir.join("state.db").display(),
            shop = e.base_url,
            token = e.token,
        ),
    )
    .unwrap();
    path
}

async fn setup(
    scopes: &[&str],
) -> (
    Emulator,
    tempfile::TempDir,
    String,
    String,
    sqlx::AnyConnection,
) {
    sqlx::any::install_default_drivers();
    let e = Emulator::start(EmulatorConfig {
        access_scopes: scopes.iter().map(|s| s.to_string()).collect(),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("ledger.db").display()
    );
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&db)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE orders (shopify_id TEXT UNIQUE NOT NULL, total_cents INTEGER, currency TEXT, status TEXT, created_at TIMESTAMP)")
        .execute(&mut conn)
        .await
        .unwrap();
    // Midnight UTC of the day 90 days ago.
    let start = (jiff::Timestamp::now().as_second() / 86_400 - 90) * 86_400;
    let day = jiff::Timestamp::from_second(start)
        .unwrap()
        .strftime("%Y-%m-%d")
        .to_string();
    for i in 0..40u64 {
        e.insert_order(OrderSpec::example(
            900_000 + i,
            jiff::Timestamp::from_second(start + 600 + i as i64 * 1800).unwrap(),
        ));
    }
    (e, dir, db, day, conn)
}

async fn rows(conn: &mut sqlx::AnyConnection) -> i64 {
    sqlx::query("SELECT COUNT(*) FROM orders")
        .fetch_one(conn)
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_shopify_window_without_read_all_orders_exits_2_with_the_fix_and_writes_nothing() {
    let (e, dir, db, day, mut conn) = setup(&["read_orders"]).await;
    let cfg = config(dir.path(), &e, &db, &day, "");
    let o = run(&cfg, &dir.path().join("out")).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("read_all_orders"), "{}", text(&o));
    assert!(
        stderr.contains("Admin API access scopes"),
        "the fix: {}",
        text(&o)
    );
    assert!(stderr.contains("90 days ago"), "{}", text(&o));
    assert!(!stderr.contains(&e.token), "no token in output");
    assert_eq!(rows(&mut conn).await, 0, "nothing written");
    assert_eq!(
        e.stats().queries,
        1,
        "only the scope query: {:?}",
        e.stats()
    );
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_old_window_with_read_all_orders_is_backfilled() {
    let (e, dir, db, day, mut conn) = setup(&["read_orders", "read_all_orders"]).await;
    let cfg = config(dir.path(), &e, &db, &day, "rate_limit_patience = \"30m\"");
    let o = run(&cfg, &dir.path().join("out")).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(rows(&mut conn).await, 40);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_rate_limit_patience_is_refused_naming_it() {
    let (e, dir, db, day, mut conn) = setup(&["read_orders", "read_all_orders"]).await;
    let cfg = config(dir.path(), &e, &db, &day, "rate_limit_patience = \"soon\"");
    let o = run(&cfg, &dir.path().join("out")).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("rate_limit_patience = \"soon\""),
        "{}",
        text(&o)
    );
    assert_eq!(rows(&mut conn).await, 0);
    e.shutdown().await;
}
