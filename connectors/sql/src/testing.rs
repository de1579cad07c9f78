//! Throw-away databases for tests: each test gets its own PostgreSQL or
//! MariaDB database (or SQLite file), so tests run in parallel and twice in
//! a row. Server URLs come from `RECON_TEST_POSTGRES_URL` and
//! `RECON_TEST_MYSQL_URL`, defaulting to the local services.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::Connection;

use crate::Dialect;

/// Default PostgreSQL server for tests.
pub const DEFAULT_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Default MariaDB server for tests.
pub const DEFAULT_MYSQL: &str = "mysql://root@127.0.0.1:3306/test";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A database made for one test; call [`TestDb::drop_db`] at the end.
pub struct TestDb {
    /// The dialect.
    pub dialect: Dialect,
    /// URL of the new database.
    pub url: String,
    admin_url: String,
    name: String,
    _dir: Option<std::path::PathBuf>,
}

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos % 100_000
    )
}

fn replace_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..].find('/').map(|i| scheme_end + i);
    match path_start {
        Some(p) => format!("{}/{db}{query}", &base[..p]),
        None => format!("{base}/{db}{query}"),
    }
}

impl TestDb {
    /// A new, empty database of this dialect.
    pub async fn create(dialect: Dialect) -> TestDb {
        sqlx::any::install_default_drivers();
        let name = unique_name("recon_t");
        match dialect {
            Dialect::Sqlite => {
                let dir = std::env::temp_dir().join(&name);
                std::fs::create_dir_all(&dir).expect("temp dir");
                let path = dir.join("db.sqlite");
                TestDb {
                    dialect,
                    url: format!("sqlite://{}?mode=rwc", path.display()),
                    admin_url: String::new(),
                    name,
                    _dir: Some(dir),
                }
            }
            Dialect::Postgres | Dialect::MySql => {
                let admin_url = match dialect {
                    Dialect::Postgres => std::env::var("RECON_TEST_POSTGRES_URL")
                        .unwrap_or_else(|_| DEFAULT_POSTGRES.into()),
                    _ => std::env::var("RECON_TEST_MYSQL_URL")
                        .unwrap_or_else(|_| DEFAULT_MYSQL.into()),
                };
                let mut conn = sqlx::AnyConnection::connect(&admin_url)
                    .await
                    .unwrap_or_else(|e| {
                        panic!(
                            "test database server {} is not reachable ({e}); scripts/test starts the local services",
                            recon_core::redact_url(&admin_url)
                        )
                    });
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                conn.close().await.ok();
                TestDb {
                    dialect,
                    url: replace_db(&admin_url, &name),
                    admin_url,
                    name,
                    _dir: None,
                }
            }
        }
    }

    /// Runs statements in the test database.
    pub async fn exec(&self, sql: &str) {
        let mut conn = sqlx::AnyConnection::connect(&self.url)
            .await
            .expect("connect to test database");
        for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            sqlx::query(stmt)
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{stmt}: {e}"));
        }
        conn.close().await.ok();
    }

    /// Removes the database.
    pub async fn drop_db(self) {
        match self.dialect {
            Dialect::Sqlite => {
                if let Some(dir) = &self._dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            Dialect::Postgres => {
                if let Ok(mut conn) = sqlx::AnyConnection::connect(&self.admin_url).await {
                    let _ = sqlx::query(&format!(
                        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                        self.name
                    ))
                    .execute(&mut conn)
                    .await;
                }
            }
            Dialect::MySql => {
                if let Ok(mut conn) = sqlx::AnyConnection::connect(&self.admin_url).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {}", self.name))
                        .execute(&mut conn)
                        .await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_names_replace_the_path() {
        assert_eq!(
            super::replace_db("postgres://u@h:5432/test", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            super::replace_db("mysql://root@h:3306/test?ssl-mode=disabled", "y"),
            "mysql://root@h:3306/y?ssl-mode=disabled"
        );
    }
}
