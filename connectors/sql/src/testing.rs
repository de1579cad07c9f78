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

/// A database made for one test; call [`TestDb::drop_db`] at the end. A
/// test that fails (panics) before it does still removes its database:
/// when the value is dropped, on a thread of its own (a test's runtime
/// cannot be blocked on from within).
pub struct TestDb {
    /// The dialect.
    pub dialect: Dialect,
    /// URL of the new database.
    pub url: String,
    admin_url: String,
    name: String,
    _dir: Option<std::path::PathBuf>,
    /// Removed already ([`TestDb::drop_db`]).
    removed: bool,
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
                    removed: false,
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
                    removed: false,
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
    pub async fn drop_db(mut self) {
        self.removed = true;
        remove(
            self.dialect,
            &self.admin_url,
            &self.name,
            self._dir.as_deref(),
        )
        .await;
    }

    /// The database's name on its server (its folder's for SQLite).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (dialect, admin_url, name) = (self.dialect, self.admin_url.clone(), self.name.clone());
        let dir = self._dir.clone();
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(remove(dialect, &admin_url, &name, dir.as_deref()));
        })
        .join();
    }
}

/// Removes a test database (its folder for SQLite); errors are ignored.
async fn remove(dialect: Dialect, admin_url: &str, name: &str, dir: Option<&std::path::Path>) {
    match dialect {
        Dialect::Sqlite => {
            if let Some(dir) = dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        Dialect::Postgres | Dialect::MySql => {
            // PostgreSQL ends the sessions still connected to it.
            let force = if dialect == Dialect::Postgres {
                " WITH (FORCE)"
            } else {
                ""
            };
            if let Ok(mut conn) = sqlx::AnyConnection::connect(admin_url).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}{force}"))
                    .execute(&mut conn)
                    .await;
                conn.close().await.ok();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Dialect, TestDb};

    /// Whether the server (or the folder, for SQLite) still holds the
    /// test database `name`.
    async fn exists(dialect: Dialect, name: &str) -> bool {
        use sqlx::Connection;
        let (url, sql) = match dialect {
            Dialect::Sqlite => return std::env::temp_dir().join(name).exists(),
            Dialect::Postgres => (
                std::env::var("RECON_TEST_POSTGRES_URL")
                    .unwrap_or_else(|_| super::DEFAULT_POSTGRES.into()),
                format!("SELECT COUNT(*) FROM pg_database WHERE datname = '{name}'"),
            ),
            Dialect::MySql => (
                std::env::var("RECON_TEST_MYSQL_URL")
                    .unwrap_or_else(|_| super::DEFAULT_MYSQL.into()),
                format!(
                    "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = '{name}'"
                ),
            ),
        };
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        let n: i64 = sqlx::query_scalar(&sql).fetch_one(&mut conn).await.unwrap();
        conn.close().await.ok();
        n == 1
    }

    /// A test that fails before `drop_db` leaves no database behind: the
    /// panic drops the value, which removes it; one that calls `drop_db`
    /// has it removed there (and the drop after it does nothing more).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_test_leaves_no_database_behind() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            let db = TestDb::create(dialect).await;
            let name = db.name().to_string();
            db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY)").await;
            assert!(exists(dialect, &name).await, "{name} was made");
            let failed = tokio::spawn(async move {
                let _db = db;
                panic!("a test fails");
            })
            .await;
            assert!(failed.unwrap_err().is_panic());
            assert!(
                !exists(dialect, &name).await,
                "{dialect:?}: {name} left behind"
            );

            let db = TestDb::create(dialect).await;
            let name = db.name().to_string();
            db.drop_db().await;
            assert!(
                !exists(dialect, &name).await,
                "{dialect:?}: {name} left behind"
            );
        }
    }
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
