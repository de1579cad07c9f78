//! PostgreSQL, MySQL/MariaDB and SQLite tables as a recon source or target.
//!
//! One implementation over sqlx's `Any` driver, with a [`Dialect`] for what
//! differs. Every value is read back as text through a cast, so one code path
//! parses all three databases' types exactly (money never becomes a float).
//!
//! - **Reads** are windowed `SELECT`s streamed row by row and cut into pages;
//!   the table is never loaded.
//! - **Lookups** for edge confirmation are batched `IN (…)` queries.
//! - **Writes** are multi-row `INSERT … ON CONFLICT (key) DO NOTHING / DO
//!   UPDATE` (`ON DUPLICATE KEY UPDATE` on MySQL), idempotent by the key. A
//!   batch the server refuses is retried row by row so that each item gets
//!   its own outcome.
//! - **At start** the table and columns are introspected (so a typo is named
//!   before any work) and, before any write, the key must have a unique
//!   constraint or unique index; otherwise recon refuses and prints the DDL.
//! - Table and column names from config are validated as plain identifiers
//!   and quoted; values are always bound, never interpolated.

mod dialect;
pub mod testing;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures_core::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use recon_core::{
    redact_url, AmountFormat, ConnectorError, Currency, FieldKind, Money, Page, Record, Schema,
    Secret, Source, Target, Value, Window, WriteMode, WriteOutcome,
};
use sqlx::any::{AnyArguments, AnyPoolOptions};
use sqlx::{AnyPool, Arguments, Row};

pub use dialect::{validate_identifier, Dialect, Storage};

/// Records per page handed to the pipeline.
const PAGE: usize = 1000;
/// Keys per lookup query.
const LOOKUP_CHUNK: usize = 500;

/// Which table and columns hold a job's records.
#[derive(Clone, Debug)]
pub struct SqlTableConfig {
    /// Connection URL (`postgres://…`, `mysql://…`, `sqlite://…`); may hold a password.
    pub url: Secret,
    /// The table, optionally `schema.table`.
    pub table: String,
    /// Column holding the external ID.
    pub key_column: String,
    /// For each schema field in order, its column.
    pub columns: Vec<String>,
    /// Column holding the currency of money fields.
    pub currency_column: Option<String>,
    /// How amounts are stored; `None` decides by the column type (integer
    /// columns hold minor units, NUMERIC/DECIMAL columns major units).
    pub amount_format: Option<AmountFormat>,
    /// Schema index of the timestamp field windows filter on.
    pub time_field: Option<usize>,
    /// Maximum connections in the pool.
    pub max_connections: u32,
    /// Rows per multi-row INSERT.
    pub write_batch: usize,
}

impl SqlTableConfig {
    /// A config with default pool and batch sizes.
    pub fn new(url: Secret, table: &str, key_column: &str, columns: Vec<String>) -> SqlTableConfig {
        SqlTableConfig {
            url,
            table: table.to_string(),
            key_column: key_column.to_string(),
            columns,
            currency_column: None,
            amount_format: None,
            time_field: None,
            max_connections: 4,
            write_batch: 1000,
        }
    }
}

/// A table as a [`Source`] and [`Target`].
pub struct SqlTable {
    pool: AnyPool,
    dialect: Dialect,
    cfg: SqlTableConfig,
    schema: Schema,
    storage: Vec<Storage>,
    key_storage: Storage,
    currency_storage: Option<Storage>,
    amount_format: AmountFormat,
    select_list: String,
    /// The windowed (or whole-table) read, built once so streams can borrow it.
    read_sql: String,
    display: String,
}

impl std::fmt::Debug for SqlTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTable")
            .field("table", &self.display)
            .finish_non_exhaustive()
    }
}

fn db_error(context: &str, e: sqlx::Error) -> ConnectorError {
    ConnectorError::Database(format!("{context}: {e}"))
}

impl SqlTable {
    /// Connects, introspects the table, and checks every configured column.
    pub async fn connect(cfg: SqlTableConfig, schema: &Schema) -> Result<SqlTable, ConnectorError> {
        sqlx::any::install_default_drivers();
        let url = cfg.url.expose().to_string();
        let dialect = Dialect::from_url(&url)?;
        validate_identifier("table", &cfg.table, true)?;
        validate_identifier("key column", &cfg.key_column, false)?;
        for c in cfg.columns.iter().chain(cfg.currency_column.as_ref()) {
            validate_identifier("column", c, false)?;
        }
        if cfg.columns.len() != schema.fields.len() {
            return Err(ConnectorError::Config(format!(
                "table {}: {} columns mapped for {} fields",
                cfg.table,
                cfg.columns.len(),
                schema.fields.len()
            )));
        }
        let display = format!("{} table {}", redact_url(&url), cfg.table);
        // One plain connection first: a refused or unknown server fails at
        // once with its own error, instead of after the pool's retries.
        let unreachable = |e: &dyn std::fmt::Display| {
            ConnectorError::Unreachable(format!(
                "cannot connect to {} ({}): {e}; check that the database is running and the URL is right",
                redact_url(&url),
                dialect.name()
            ))
        };
        match tokio::time::timeout(
            Duration::from_secs(15),
            <sqlx::AnyConnection as sqlx::Connection>::connect(&url),
        )
        .await
        {
            Ok(Ok(conn)) => {
                let _ = sqlx::Connection::close(conn).await;
            }
            Ok(Err(e)) => return Err(unreachable(&e)),
            Err(_) => return Err(unreachable(&"no answer within 15 s")),
        }
        let dialect_setup = dialect;
        let pool = AnyPoolOptions::new()
            .max_connections(cfg.max_connections.max(1))
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    // Timestamps without zone are read and written as UTC.
                    let sql = match dialect_setup {
                        Dialect::Postgres => Some("SET TIME ZONE 'UTC'"),
                        Dialect::MySql => Some("SET time_zone = '+00:00'"),
                        Dialect::Sqlite => None,
                    };
                    if let Some(sql) = sql {
                        sqlx::query(sql).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(|e| unreachable(&e))?;
        let columns = introspect(&pool, dialect, &cfg.table).await?;
        if columns.is_empty() {
            return Err(ConnectorError::Config(format!(
                "{display}: the table does not exist (or has no columns); check `table` in the job config"
            )));
        }
        let lookup = |col: &str| -> Result<Storage, ConnectorError> {
            columns.get(col).copied().ok_or_else(|| {
                let mut names: Vec<&String> = columns.keys().collect();
                names.sort();
                ConnectorError::MissingField {
                    location: recon_core::Location(display.clone()),
                    message: format!(
                        "no column `{col}`; columns are: {}",
                        names
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            })
        };
        let key_storage = lookup(&cfg.key_column)?;
        let storage = cfg
            .columns
            .iter()
            .map(|c| lookup(c))
            .collect::<Result<Vec<_>, _>>()?;
        let has_money = schema.fields.iter().any(|f| f.kind == FieldKind::Money);
        let currency_storage = match (&cfg.currency_column, has_money) {
            (Some(c), true) => Some(lookup(c)?),
            (None, true) => {
                return Err(ConnectorError::Config(format!(
                    "{display}: money fields need a currency column"
                )))
            }
            _ => None,
        };
        let amount_format = cfg.amount_format.unwrap_or_else(|| {
            match schema
                .money_field()
                .map(|i| storage[i])
                .unwrap_or(Storage::Integer)
            {
                Storage::Decimal | Storage::Text => AmountFormat::Major,
                _ => AmountFormat::Minor,
            }
        });
        let mut select = vec![dialect.as_text(&dialect.quote(&cfg.key_column))];
        for (i, field) in schema.fields.iter().enumerate() {
            let col = dialect.quote(&cfg.columns[i]);
            select.push(match (field.kind, storage[i]) {
                (FieldKind::Timestamp, Storage::Timestamp) => dialect.epoch_text(&col),
                _ => dialect.as_text(&col),
            });
        }
        if let (Some(c), true) = (&cfg.currency_column, has_money) {
            select.push(dialect.as_text(&dialect.quote(c)));
        }
        let select_list = select.join(", ");
        let table_sql = dialect.quote_table(&cfg.table);
        let read_sql = match cfg.time_field {
            Some(i) => {
                let col = dialect.quote(&cfg.columns[i]);
                let (lo, hi) = (dialect.placeholder(1), dialect.placeholder(2));
                // Compare the column itself against converted bounds, so an
                // index on it serves the range (SQLite stores text: convert it).
                let (lo, hi, e) = match (storage[i], dialect) {
                    (Storage::Timestamp, Dialect::Postgres) => (
                        format!("to_timestamp({lo})"),
                        format!("to_timestamp({hi})"),
                        col,
                    ),
                    (Storage::Timestamp, Dialect::MySql) => (
                        format!("FROM_UNIXTIME({lo})"),
                        format!("FROM_UNIXTIME({hi})"),
                        col,
                    ),
                    (Storage::Timestamp, Dialect::Sqlite) => (lo, hi, dialect.epoch_expr(&col)),
                    _ => (lo, hi, col),
                };
                format!("SELECT {select_list} FROM {table_sql} WHERE {e} >= {lo} AND {e} < {hi}")
            }
            None => format!("SELECT {select_list} FROM {table_sql}"),
        };
        Ok(SqlTable {
            pool,
            dialect,
            select_list,
            read_sql,
            cfg,
            schema: schema.clone(),
            storage,
            key_storage,
            currency_storage,
            amount_format,
            display,
        })
    }

    /// The dialect in use.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The pool, for tests and benchmarks.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    fn table(&self) -> String {
        self.dialect.quote_table(&self.cfg.table)
    }

    fn parse_row(&self, row: &sqlx::any::AnyRow) -> Result<Record, ConnectorError> {
        let text = |i: usize| -> Result<Option<String>, ConnectorError> {
            row.try_get::<Option<String>, _>(i)
                .map_err(|e| db_error(&format!("{}: reading column {i}", self.display), e))
        };
        // Surrounding whitespace is never part of an external ID: `ch_1 `
        // stored by a sloppy import is the same charge as `ch_1` (and a
        // duplicate of it, which a UNIQUE constraint cannot see).
        let key = text(0)?
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .ok_or_else(|| ConnectorError::Malformed {
                location: recon_core::Location(self.display.clone()),
                message: format!("a row has a null or empty key `{}`", self.cfg.key_column),
            })?;
        let n = self.schema.fields.len();
        let currency = if self.currency_storage.is_some() {
            text(n + 1)?
        } else {
            None
        };
        let location = || recon_core::Location(format!("{} row `{key}`", self.display));
        let mut values = Vec::with_capacity(n);
        for (i, field) in self.schema.fields.iter().enumerate() {
            let raw = text(i + 1)?;
            let column = &self.cfg.columns[i];
            let bad = |m: String| ConnectorError::Malformed {
                location: location(),
                message: format!("column `{column}`: {m}"),
            };
            let v = match raw {
                None => Value::Null,
                Some(t) => match field.kind {
                    FieldKind::Text => Value::Text(t),
                    FieldKind::Integer => Value::Integer(
                        t.trim()
                            .parse()
                            .map_err(|_| bad(format!("`{t}` is not a whole number")))?,
                    ),
                    FieldKind::Currency => {
                        Value::Currency(Currency::parse(&t).map_err(|e| bad(e.to_string()))?)
                    }
                    FieldKind::Money => {
                        let code = currency.as_deref().unwrap_or("");
                        let c = Currency::parse(code).map_err(|e| bad(e.to_string()))?;
                        Value::Money(
                            match self.amount_format {
                                AmountFormat::Minor => Money::parse_minor(&t, c),
                                AmountFormat::Major => Money::parse_major(&t, c),
                            }
                            .map_err(|e| bad(e.to_string()))?,
                        )
                    }
                    FieldKind::Timestamp => Value::Timestamp(
                        parse_timestamp(&t)
                            .ok_or_else(|| bad(format!("`{t}` is not a timestamp")))?,
                    ),
                },
            };
            values.push(v);
        }
        Ok(Record { key, values })
    }

    /// Rows in the table (for tests and safety checks).
    pub async fn count(&self) -> Result<i64, ConnectorError> {
        let sql = format!("SELECT COUNT(*) FROM {}", self.table());
        let row = sqlx::query(&sql)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| db_error(&self.display, e))?;
        row.try_get::<i64, _>(0)
            .map_err(|e| db_error(&self.display, e))
    }

    fn bind_value(
        &self,
        args: &mut AnyArguments<'_>,
        n: &mut usize,
        value: &Value,
        storage: Storage,
    ) -> String {
        *n += 1;
        let p = self.dialect.placeholder(*n);
        match (value, storage) {
            (Value::Null, Storage::Integer) => {
                let _ = args.add(None::<i64>);
                self.dialect.integer_param(&p)
            }
            (Value::Null, Storage::Timestamp) => {
                let _ = args.add(None::<String>);
                self.dialect.timestamp_param(&p)
            }
            (Value::Null, Storage::Decimal) => {
                let _ = args.add(None::<String>);
                self.dialect.decimal_param(&p)
            }
            (Value::Null, Storage::Text) => {
                let _ = args.add(None::<String>);
                self.dialect.text_param(&p)
            }
            (Value::Money(m), Storage::Integer) if self.amount_format == AmountFormat::Minor => {
                let _ = args.add(m.minor);
                self.dialect.integer_param(&p)
            }
            (Value::Money(m), Storage::Decimal) => {
                let _ = args.add(m.to_major_string());
                self.dialect.decimal_param(&p)
            }
            (Value::Money(m), _) => {
                let _ = args.add(match self.amount_format {
                    AmountFormat::Minor => m.minor.to_string(),
                    AmountFormat::Major => m.to_major_string(),
                });
                self.dialect.text_param(&p)
            }
            (Value::Integer(i), Storage::Integer) => {
                let _ = args.add(*i);
                self.dialect.integer_param(&p)
            }
            (Value::Timestamp(t), Storage::Integer) => {
                let _ = args.add(t.as_second());
                self.dialect.integer_param(&p)
            }
            (Value::Timestamp(t), Storage::Timestamp) => {
                let _ = args.add(t.strftime("%Y-%m-%d %H:%M:%S").to_string());
                self.dialect.timestamp_param(&p)
            }
            (Value::Timestamp(t), _) => {
                let _ = args.add(recon_core::format_timestamp(*t));
                self.dialect.text_param(&p)
            }
            (Value::Currency(c), _) => {
                let _ = args.add(c.code().to_string());
                self.dialect.text_param(&p)
            }
            (Value::Text(s), Storage::Integer) => {
                let _ = args.add(s.clone());
                match self.dialect {
                    Dialect::Postgres => format!("CAST({p} AS BIGINT)"),
                    _ => p,
                }
            }
            (other, _) => {
                let _ = args.add(other.to_string());
                self.dialect.text_param(&p)
            }
        }
    }

    fn insert_sql(&self, records: &[Record], mode: WriteMode) -> (String, AnyArguments<'_>) {
        let d = self.dialect;
        let money = self.schema.money_field();
        let mut cols = vec![d.quote(&self.cfg.key_column)];
        cols.extend(self.cfg.columns.iter().map(|c| d.quote(c)));
        let currency_col = money.and(self.cfg.currency_column.as_ref());
        // A currency column that is also a mapped field is written once.
        let write_currency = currency_col.filter(|c| !self.cfg.columns.contains(c));
        if let Some(c) = write_currency {
            cols.push(d.quote(c));
        }
        let mut args = AnyArguments::default();
        let mut n = 0;
        let mut rows = Vec::with_capacity(records.len());
        for r in records {
            let mut row = Vec::with_capacity(cols.len());
            row.push(self.bind_value(
                &mut args,
                &mut n,
                &Value::Text(r.key.clone()),
                self.key_storage,
            ));
            for (i, v) in r.values.iter().enumerate() {
                row.push(self.bind_value(&mut args, &mut n, v, self.storage[i]));
            }
            if write_currency.is_some() {
                let cur = money
                    .and_then(|i| r.values[i].currency())
                    .map(|c| Value::Text(c.code().to_string()))
                    .unwrap_or(Value::Null);
                row.push(self.bind_value(
                    &mut args,
                    &mut n,
                    &cur,
                    self.currency_storage.unwrap_or(Storage::Text),
                ));
            }
            rows.push(format!("({})", row.join(", ")));
        }
        let key = d.quote(&self.cfg.key_column);
        let updates: Vec<String> = cols[1..]
            .iter()
            .map(|c| match d {
                Dialect::MySql => format!("{c} = VALUES({c})"),
                _ => format!("{c} = excluded.{c}"),
            })
            .collect();
        let conflict = match (d, mode) {
            (Dialect::MySql, WriteMode::Insert) => {
                format!(" ON DUPLICATE KEY UPDATE {key} = {key}")
            }
            (Dialect::MySql, WriteMode::Upsert) => {
                format!(" ON DUPLICATE KEY UPDATE {}", updates.join(", "))
            }
            (_, WriteMode::Insert) => format!(
                " ON CONFLICT ({key}) DO NOTHING RETURNING {}",
                d.as_text(&key)
            ),
            (_, WriteMode::Upsert) => format!(
                " ON CONFLICT ({key}) DO UPDATE SET {} RETURNING {}",
                updates.join(", "),
                d.as_text(&key)
            ),
        };
        let sql = format!(
            "INSERT INTO {} ({}) VALUES {}{conflict}",
            self.table(),
            cols.join(", "),
            rows.join(", ")
        );
        (sql, args)
    }

    /// Keys among `keys` that exist in the table.
    async fn existing(&self, keys: &[String]) -> Result<HashSet<String>, ConnectorError> {
        let select = self
            .dialect
            .as_text(&self.dialect.quote(&self.cfg.key_column));
        Ok(self
            .rows_by_key(&select, keys)
            .await?
            .iter()
            .filter_map(|row| row.try_get::<Option<String>, _>(0).ok().flatten())
            .collect())
    }

    /// `SELECT {select}` of the rows whose key is among `keys`, in chunks of
    /// `LOOKUP_CHUNK` bound keys.
    async fn rows_by_key(
        &self,
        select: &str,
        keys: &[String],
    ) -> Result<Vec<sqlx::any::AnyRow>, ConnectorError> {
        let key = self.dialect.quote(&self.cfg.key_column);
        let mut out = Vec::new();
        for chunk in keys.chunks(LOOKUP_CHUNK) {
            let mut args = AnyArguments::default();
            let marks: Vec<String> = (1..=chunk.len())
                .map(|i| self.dialect.text_param(&self.dialect.placeholder(i)))
                .collect();
            for k in chunk {
                let _ = args.add(k.clone());
            }
            let sql = format!(
                "SELECT {select} FROM {} WHERE {} IN ({})",
                self.table(),
                self.key_cmp(&key),
                marks.join(", ")
            );
            out.extend(
                sqlx::query_with(&sql, args)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| db_error(&self.display, e))?,
            );
        }
        Ok(out)
    }

    /// The key column as compared against bound text keys.
    fn key_cmp(&self, key: &str) -> String {
        match (self.dialect, self.key_storage) {
            (Dialect::Postgres, Storage::Text) => key.to_string(),
            (Dialect::Postgres, _) => self.dialect.as_text(key),
            _ => key.to_string(),
        }
    }

    async fn write_batch(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, sqlx::Error> {
        let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
        // Which keys exist decides created vs updated; the write itself is
        // idempotent whatever happens between the two statements. An insert
        // with RETURNING names the rows it created, so it needs no look-up.
        let before = if mode == WriteMode::Insert && self.dialect != Dialect::MySql {
            HashSet::new()
        } else {
            self.existing(&keys)
                .await
                .map_err(|e| sqlx::Error::Protocol(e.to_string()))?
        };
        let (sql, args) = self.insert_sql(records, mode);
        let returned: Option<HashSet<String>> = match self.dialect {
            Dialect::MySql => {
                sqlx::query_with(&sql, args).execute(&self.pool).await?;
                None
            }
            _ => {
                let rows = sqlx::query_with(&sql, args).fetch_all(&self.pool).await?;
                Some(
                    rows.iter()
                        .filter_map(|r| r.try_get::<Option<String>, _>(0).ok().flatten())
                        .collect(),
                )
            }
        };
        Ok(records
            .iter()
            .map(|r| {
                let existed = before.contains(&r.key);
                match (mode, existed) {
                    (WriteMode::Insert, true) => WriteOutcome::Unchanged,
                    (WriteMode::Insert, false) => match &returned {
                        Some(set) if !set.contains(&r.key) => WriteOutcome::Unchanged,
                        _ => WriteOutcome::Created,
                    },
                    (WriteMode::Upsert, true) => WriteOutcome::Updated,
                    (WriteMode::Upsert, false) => WriteOutcome::Created,
                }
            })
            .collect())
    }
}

/// Unix seconds or RFC 3339 / `YYYY-MM-DD HH:MM:SS` (UTC).
fn parse_timestamp(text: &str) -> Option<jiff::Timestamp> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<i64>() {
        return jiff::Timestamp::from_second(secs).ok();
    }
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Some(ts);
    }
    t.parse::<jiff::civil::DateTime>()
        .ok()
        .and_then(|dt| jiff::tz::TimeZone::UTC.to_timestamp(dt).ok())
}

/// Column name → storage, for the table.
async fn introspect(
    pool: &AnyPool,
    dialect: Dialect,
    table: &str,
) -> Result<HashMap<String, Storage>, ConnectorError> {
    let (schema, bare) = match table.split_once('.') {
        Some((s, t)) => (Some(s.to_string()), t.to_string()),
        None => (None, table.to_string()),
    };
    let (sql, binds): (String, Vec<String>) = match dialect {
        Dialect::Postgres => (
            format!(
                "SELECT CAST(column_name AS TEXT), CAST(data_type AS TEXT) FROM information_schema.columns WHERE table_name = $1 AND table_schema = {}",
                if schema.is_some() { "$2" } else { "current_schema()" }
            ),
            std::iter::once(bare.clone()).chain(schema.clone()).collect(),
        ),
        Dialect::MySql => (
            format!(
                "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR) FROM information_schema.columns WHERE table_name = ? AND table_schema = {}",
                if schema.is_some() { "?" } else { "DATABASE()" }
            ),
            std::iter::once(bare.clone()).chain(schema.clone()).collect(),
        ),
        Dialect::Sqlite => (
            "SELECT name, type FROM pragma_table_info(?)".to_string(),
            vec![bare.clone()],
        ),
    };
    let mut q = sqlx::query(&sql);
    for b in binds {
        q = q.bind(b);
    }
    let rows = q
        .fetch_all(pool)
        .await
        .map_err(|e| db_error(&format!("reading the columns of {table}"), e))?;
    let mut out = HashMap::new();
    for row in rows {
        let name: String = row.try_get(0).map_err(|e| db_error(table, e))?;
        let ty: Option<String> = row.try_get(1).map_err(|e| db_error(table, e))?;
        out.insert(name, dialect.storage_of(ty.as_deref().unwrap_or("")));
    }
    Ok(out)
}

#[async_trait::async_trait]
impl Source for SqlTable {
    fn describe(&self) -> String {
        self.display.clone()
    }

    fn read(
        &self,
        _schema: &Schema,
        window: Window,
    ) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let mut args = AnyArguments::default();
        if self.cfg.time_field.is_some() {
            let _ = args.add(window.start.as_second());
            let _ = args.add(window.end.as_second());
        }
        Box::pin(stream_pages(self, args))
    }

    async fn lookup(
        &self,
        _schema: &Schema,
        keys: &[String],
    ) -> Result<Vec<Record>, ConnectorError> {
        self.rows_by_key(&self.select_list, keys)
            .await?
            .iter()
            .map(|row| self.parse_row(row))
            .collect()
    }
}

/// Streams the rows of `sql` as pages of parsed records.
fn stream_pages<'a>(
    table: &'a SqlTable,
    args: AnyArguments<'a>,
) -> impl futures_core::Stream<Item = Result<Page, ConnectorError>> + Send + 'a {
    sqlx::query_with(&table.read_sql, args)
        .fetch(&table.pool)
        .map_err(move |e| db_error(&table.display, e))
        .and_then(move |row| std::future::ready(table.parse_row(&row)))
        .chunks(PAGE)
        .map(|chunk| {
            chunk
                .into_iter()
                .collect::<Result<Vec<Record>, ConnectorError>>()
                .map(|records| Page { records })
        })
}

#[async_trait::async_trait]
impl Target for SqlTable {
    async fn check_unique_key(&self) -> Result<(), ConnectorError> {
        let key = &self.cfg.key_column;
        let table = &self.cfg.table;
        let (schema, bare) = match table.split_once('.') {
            Some((s, t)) => (Some(s.to_string()), t.to_string()),
            None => (None, table.clone()),
        };
        let unique = match self.dialect {
            Dialect::Postgres => {
                let sql = "SELECT COUNT(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0] \
                     WHERE i.indisunique AND i.indnatts = 1 AND i.indpred IS NULL AND c.relname = $1 \
                     AND n.nspname = COALESCE($2, current_schema()) AND a.attname = $3";
                let row = sqlx::query(sql)
                    .bind(bare)
                    .bind(schema)
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| db_error(&self.display, e))?;
                row.try_get::<i64, _>(0)
                    .map_err(|e| db_error(&self.display, e))?
                    > 0
            }
            Dialect::MySql => {
                let sql = "SELECT COUNT(*) FROM (SELECT index_name FROM information_schema.statistics \
                     WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND non_unique = 0 \
                     GROUP BY index_name HAVING COUNT(*) = 1 AND MAX(column_name) = ?) u";
                let row = sqlx::query(sql)
                    .bind(schema)
                    .bind(bare)
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| db_error(&self.display, e))?;
                row.try_get::<i64, _>(0)
                    .map_err(|e| db_error(&self.display, e))?
                    > 0
            }
            Dialect::Sqlite => {
                let sql = "SELECT COUNT(*) FROM pragma_index_list(?1) l \
                     WHERE l.\"unique\" = 1 AND l.partial = 0 \
                     AND (SELECT COUNT(*) FROM pragma_index_info(l.name)) = 1 \
                     AND (SELECT name FROM pragma_index_info(l.name)) = ?2";
                let row = sqlx::query(sql)
                    .bind(bare.clone())
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| db_error(&self.display, e))?;
                let by_index = row
                    .try_get::<i64, _>(0)
                    .map_err(|e| db_error(&self.display, e))?
                    > 0;
                // An INTEGER PRIMARY KEY is the rowid itself and has no index.
                let pk_sql = "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE pk > 0";
                let pk_is_key_sql =
                    "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE pk = 1 AND name = ?2";
                let pks: i64 = sqlx::query(pk_sql)
                    .bind(bare.clone())
                    .fetch_one(&self.pool)
                    .await
                    .and_then(|r| r.try_get(0))
                    .map_err(|e| db_error(&self.display, e))?;
                let pk_is_key: i64 = sqlx::query(pk_is_key_sql)
                    .bind(bare)
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .and_then(|r| r.try_get(0))
                    .map_err(|e| db_error(&self.display, e))?;
                by_index || (pks == 1 && pk_is_key == 1)
            }
        };
        if unique {
            Ok(())
        } else {
            Err(ConnectorError::NotIdempotent(format!(
                "target {} has no unique constraint on `{key}`; backfill would not be idempotent. Add one with:\n  {}",
                self.display,
                self.dialect.unique_ddl(table, key)
            )))
        }
    }

    async fn write(
        &self,
        _schema: &Schema,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let per_row = self.cfg.columns.len() + 2;
        let batch = self
            .cfg
            .write_batch
            .clamp(1, self.dialect.max_params() / per_row);
        let mut out = Vec::with_capacity(records.len());
        for chunk in records.chunks(batch) {
            match self.write_batch(chunk, mode).await {
                Ok(outcomes) => out.extend(outcomes),
                Err(e) if chunk.len() > 1 => {
                    // Find out which rows the server refuses: one at a time.
                    tracing::warn!(message = "Batch write refused; retrying row by row.", error = %e, rows = chunk.len());
                    for r in chunk {
                        match self.write_batch(std::slice::from_ref(r), mode).await {
                            Ok(o) => out.extend(o),
                            Err(e) => out.push(WriteOutcome::Failed(e.to_string())),
                        }
                    }
                }
                Err(e) if is_connection_error(&e) => {
                    return Err(db_error(&self.display, e));
                }
                Err(e) => out.push(WriteOutcome::Failed(e.to_string())),
            }
        }
        Ok(out)
    }
}

fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
    )
}
