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
mod settings;
#[cfg(feature = "testing")]
pub mod testing;
mod write;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures_core::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use recon_core::parse::{self, TimestampRules, ValueRules};
use recon_core::{
    redact_url, AmountFormat, ConnectorError, FieldKind, Page, Record, Schema, Secret, Source,
    Target, Unplaced, Value, Window, WriteMode, WriteOutcome,
};
use sqlx::any::{AnyArguments, AnyPoolOptions};
use sqlx::{AnyPool, Arguments, Row};

pub use dialect::{validate_identifier, Dialect, Storage};
pub use settings::SqlSettings;
pub use write::{CurrencyCase, TimestampText, WRITE_TIMEOUT};

/// Records per page handed to the pipeline.
const PAGE: usize = 1000;
/// Keys per lookup query.
const LOOKUP_CHUNK: usize = 5000;
/// Lookup chunks asked at once (bounded by the pool's size).
const LOOKUPS_IN_FLIGHT: usize = 3;

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
    /// Rows per multi-row INSERT (at most the dialect's bound parameters
    /// allow). Default 4,000: on a 200k-row backfill into PostgreSQL 4,000
    /// rows per statement took about 1 s less than 1,000 (fewer round trips
    /// and ledger steps); a batch the server refuses is retried row by row.
    pub write_batch: usize,
    /// Spelling of currency codes written; `None` follows the table's rows.
    pub currency_case: Option<CurrencyCase>,
    /// Text form of timestamps written into text columns; `None` follows
    /// the table's rows.
    pub timestamp_format: Option<TimestampText>,
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
            write_batch: 4000,
            currency_case: None,
            timestamp_format: None,
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
    /// Finds a row the window read leaves out (`None` without a time
    /// field: the read is the whole table).
    outside_sql: Option<String>,
    display: String,
    /// How written values are spelled, detected on the first write.
    style: tokio::sync::OnceCell<write::WriteStyle>,
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

/// The URL's dialect, after checking every identifier and that each field
/// has a column.
fn validate(cfg: &SqlTableConfig, schema: &Schema) -> Result<Dialect, ConnectorError> {
    let dialect = Dialect::from_url(cfg.url.expose())?;
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
    Ok(dialect)
}

/// One plain connection first: a refused or unknown server fails at once
/// with its own error, instead of after the pool's retries. Then the pool,
/// each of whose connections reads and writes times in UTC.
async fn open_pool(
    url: &str,
    dialect: Dialect,
    max_connections: u32,
) -> Result<AnyPool, ConnectorError> {
    let unreachable = |e: &dyn std::fmt::Display| {
        ConnectorError::Unreachable(format!(
            "cannot connect to {} ({}): {e}; check that the database is running and the URL is right",
            redact_url(url),
            dialect.name()
        ))
    };
    match tokio::time::timeout(
        Duration::from_secs(15),
        <sqlx::AnyConnection as sqlx::Connection>::connect(url),
    )
    .await
    {
        Ok(Ok(conn)) => {
            let _ = sqlx::Connection::close(conn).await;
        }
        Ok(Err(e)) => return Err(unreachable(&e)),
        Err(_) => return Err(unreachable(&"no answer within 15 s")),
    }
    AnyPoolOptions::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(Duration::from_secs(10))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                // Timestamps without zone are read and written as UTC.
                let sql = match dialect {
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
        .connect(url)
        .await
        .map_err(|e| unreachable(&e))
}

/// How the table stores the key, each field's column and the currency.
struct ColumnStorage {
    key: Storage,
    fields: Vec<Storage>,
    currency: Option<Storage>,
}

impl ColumnStorage {
    /// Looks each configured column up among the table's; a missing one
    /// is named with the columns there are.
    fn of(
        columns: &HashMap<String, Storage>,
        cfg: &SqlTableConfig,
        schema: &Schema,
        display: &str,
    ) -> Result<ColumnStorage, ConnectorError> {
        let lookup = |col: &str| -> Result<Storage, ConnectorError> {
            columns.get(col).copied().ok_or_else(|| {
                let mut names: Vec<&str> = columns.keys().map(|s| s.as_str()).collect();
                names.sort();
                ConnectorError::MissingField {
                    location: recon_core::Location(display.to_string()),
                    message: format!("no column `{col}`; columns are: {}", names.join(", ")),
                }
            })
        };
        let key = lookup(&cfg.key_column)?;
        let fields = cfg
            .columns
            .iter()
            .map(|c| lookup(c))
            .collect::<Result<Vec<_>, _>>()?;
        let has_money = schema.fields.iter().any(|f| f.kind == FieldKind::Money);
        let currency = match (&cfg.currency_column, has_money) {
            (Some(c), true) => Some(lookup(c)?),
            (None, true) => {
                return Err(ConnectorError::Config(format!(
                    "{display}: money fields need a currency column"
                )))
            }
            _ => None,
        };
        Ok(ColumnStorage {
            key,
            fields,
            currency,
        })
    }
}

/// Amounts in a decimal or text column are major units, else minor.
fn default_amount_format(schema: &Schema, storage: &[Storage]) -> AmountFormat {
    match schema
        .money_field()
        .map(|i| storage[i])
        .unwrap_or(Storage::Integer)
    {
        Storage::Decimal | Storage::Text => AmountFormat::Major,
        _ => AmountFormat::Minor,
    }
}

/// The key, each field (times as the window compares them) and the
/// currency, as the SELECT list of every read.
fn select_list(
    dialect: Dialect,
    cfg: &SqlTableConfig,
    schema: &Schema,
    storage: &[Storage],
) -> String {
    let mut select = vec![dialect.as_text(&dialect.quote(&cfg.key_column))];
    for (i, field) in schema.fields.iter().enumerate() {
        let col = dialect.quote(&cfg.columns[i]);
        select.push(match (field.kind, storage[i], dialect) {
            // SQLite may store a time in any column type: read it as
            // the window compares it.
            (FieldKind::Timestamp, _, Dialect::Sqlite) => dialect.epoch_text(&col),
            (FieldKind::Timestamp, Storage::Timestamp, _) => dialect.epoch_text(&col),
            _ => dialect.as_text(&col),
        });
    }
    let has_money = schema.fields.iter().any(|f| f.kind == FieldKind::Money);
    if let (Some(c), true) = (&cfg.currency_column, has_money) {
        select.push(dialect.as_text(&dialect.quote(c)));
    }
    select.join(", ")
}

/// The window read: every row without a time field, else the rows inside
/// the window and those no window holds, after checking that the time
/// column can be compared.
async fn read_sql(
    pool: &AnyPool,
    dialect: Dialect,
    cfg: &SqlTableConfig,
    storage: &[Storage],
    select_list: &str,
    display: &str,
) -> Result<ReadSql, ConnectorError> {
    let table_sql = dialect.quote_table(&cfg.table);
    let Some(i) = cfg.time_field else {
        return Ok(ReadSql {
            read: format!("SELECT {select_list} FROM {table_sql}"),
            outside: None,
        });
    };
    let column = &cfg.columns[i];
    let col = dialect.quote(column);
    let (e, lo, hi) = match dialect.window_compare(&col, storage[i], "") {
        Ok(parts) => parts,
        Err(_) => {
            let declared = declared_type(pool, dialect, &cfg.table, column).await?;
            let why = dialect
                .window_compare(&col, storage[i], &declared)
                .err()
                .unwrap_or_default();
            return Err(ConnectorError::Config(format!(
                "{display}: the time column `{column}` {why}"
            )));
        }
    };
    if dialect == Dialect::Sqlite {
        check_sqlite_times(pool, &table_sql, &col, column, display).await?;
    }
    // The rows no window holds come in the same read, flagged by a last
    // column, so that they are listed without a second pass over the table.
    let unplaceable = dialect.unplaceable(&col);
    let raw = dialect.as_text(&col);
    let inside = format!("{e} >= {lo} AND {e} < {hi}");
    let read = format!("({inside}) OR {unplaceable}");
    Ok(ReadSql {
        // A row outside the window, or with no time (the read lists it as
        // unplaced but does not diff it, so a look-up by key could find
        // it): anything the window test does not hold for, NULL included.
        outside: Some(format!(
            "SELECT 1 FROM {table_sql} WHERE (CASE WHEN {inside} THEN 0 ELSE 1 END) = 1 LIMIT 1"
        )),
        read: format!(
            "SELECT {select_list}, CASE WHEN {unplaceable} THEN 1 ELSE 0 END, \
             CASE WHEN {unplaceable} THEN {raw} END FROM {table_sql} WHERE {read}"
        ),
    })
}

/// The window read's statement, and the one that finds a row it leaves
/// out (`None`: it reads the whole table).
struct ReadSql {
    read: String,
    outside: Option<String>,
}

impl SqlTable {
    /// Connects, introspects the table, and checks every configured column.
    pub async fn connect(cfg: SqlTableConfig, schema: &Schema) -> Result<SqlTable, ConnectorError> {
        sqlx::any::install_default_drivers();
        let dialect = validate(&cfg, schema)?;
        let url = cfg.url.expose().to_string();
        let display = format!("{} table {}", redact_url(&url), cfg.table);
        let pool = open_pool(&url, dialect, cfg.max_connections).await?;
        let columns = introspect(&pool, dialect, &cfg.table).await?;
        if columns.is_empty() {
            return Err(ConnectorError::Config(format!(
                "{display}: the table does not exist (or has no columns); check `table` in the job config"
            )));
        }
        let found = ColumnStorage::of(&columns, &cfg, schema, &display)?;
        let amount_format = cfg
            .amount_format
            .unwrap_or_else(|| default_amount_format(schema, &found.fields));
        let select_list = select_list(dialect, &cfg, schema, &found.fields);
        let ReadSql {
            read: read_sql,
            outside: outside_sql,
        } = read_sql(&pool, dialect, &cfg, &found.fields, &select_list, &display).await?;
        Ok(SqlTable {
            pool,
            dialect,
            select_list,
            read_sql,
            outside_sql,
            cfg,
            schema: schema.clone(),
            storage: found.fields,
            key_storage: found.key,
            currency_storage: found.currency,
            amount_format,
            display,
            style: tokio::sync::OnceCell::new(),
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
        let rules = ValueRules {
            amounts: self.amount_format,
            timestamps: TimestampRules::SQL,
        };
        let currency_column = self.cfg.currency_column.as_deref().unwrap_or("currency");
        let bad = |i: usize, e: parse::ValueError| ConnectorError::Malformed {
            location: recon_core::Location(format!("{} row `{key}`", self.display)),
            message: e.message("column", &self.cfg.columns[i], currency_column),
        };
        let mut values = Vec::with_capacity(n);
        for (i, field) in self.schema.fields.iter().enumerate() {
            let v = match text(i + 1)? {
                None => Value::Null,
                Some(t) => parse::value(t, field.kind, currency.as_deref(), rules)
                    .map_err(|e| bad(i, e))?,
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

    /// Keys among `keys` that exist in the table.
    pub(crate) async fn existing(
        &self,
        keys: &[String],
    ) -> Result<HashSet<String>, ConnectorError> {
        let select = self
            .dialect
            .as_text(&self.dialect.quote(&self.cfg.key_column));
        Ok(self
            .rows_by_key(&select, keys, false)
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
        trimmed: bool,
    ) -> Result<Vec<sqlx::any::AnyRow>, ConnectorError> {
        let key = self.dialect.quote(&self.cfg.key_column);
        // Copies of a duplicated ID are found by the key as the read sees
        // it, surrounding whitespace trimmed (`ch_1 ` beside `ch_1`): TRIM
        // defeats the key's index, so only that rare lookup pays for it.
        let key = if trimmed {
            format!("TRIM({})", self.key_cmp(&key))
        } else {
            key
        };
        // Chunks are asked a few at a time (up to the pool's size): one
        // chunk's statement is built and bound while another runs.
        let in_flight = (self.cfg.max_connections.max(1) as usize).min(LOOKUPS_IN_FLIGHT);
        let asks: Vec<_> = keys
            .chunks(LOOKUP_CHUNK)
            .map(|chunk| self.rows_of_chunk(select, &key, chunk, trimmed))
            .collect();
        let chunks: Vec<Vec<sqlx::any::AnyRow>> = futures_util::stream::iter(asks)
            .buffered(in_flight)
            .try_collect()
            .await?;
        Ok(chunks.into_iter().flatten().collect())
    }

    /// The rows of one chunk of keys.
    async fn rows_of_chunk(
        &self,
        select: &str,
        key: &str,
        chunk: &[String],
        trimmed: bool,
    ) -> Result<Vec<sqlx::any::AnyRow>, ConnectorError> {
        // A trimmed key is already text, compared as it is.
        let cmp = |key: &str| match trimmed {
            true => key.to_string(),
            false => self.key_cmp(key),
        };
        let mut args = AnyArguments::default();
        let sql = if self.dialect == Dialect::Postgres {
            // One bound JSON array, expanded by the server: no statement
            // of thousands of parameters to build, send and plan. `=
            // ANY(ARRAY(…))` probes the key's index (an `IN (subquery)`
            // may be planned as a scan of the table).
            let _ = args.add(serde_json::to_string(chunk).unwrap_or_else(|_| "[]".into()));
            format!(
                "SELECT {select} FROM {} WHERE {} = ANY(ARRAY(SELECT json_array_elements_text(CAST($1 AS json))))",
                self.table(),
                cmp(key),
            )
        } else {
            let marks: Vec<String> = (1..=chunk.len())
                .map(|i| self.dialect.text_param(&self.dialect.placeholder(i)))
                .collect();
            for k in chunk {
                let _ = args.add(k.clone());
            }
            format!(
                "SELECT {select} FROM {} WHERE {} IN ({})",
                self.table(),
                cmp(key),
                marks.join(", ")
            )
        };
        sqlx::query_with(&sql, args)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(&self.display, e))
    }

    /// The key column as compared against bound text keys.
    fn key_cmp(&self, key: &str) -> String {
        match (self.dialect, self.key_storage) {
            (Dialect::Postgres, Storage::Text) => key.to_string(),
            (Dialect::Postgres, _) => self.dialect.as_text(key),
            _ => key.to_string(),
        }
    }
}

/// Column name → storage, for the table.
async fn introspect(
    pool: &AnyPool,
    dialect: Dialect,
    table: &str,
) -> Result<HashMap<String, Storage>, ConnectorError> {
    Ok(introspect_types(pool, dialect, table)
        .await?
        .into_iter()
        .map(|(name, ty)| {
            let storage = dialect.storage_of(&ty);
            (name, storage)
        })
        .collect())
}

/// Column name → declared type (as the catalog spells it), for the table.
async fn introspect_types(
    pool: &AnyPool,
    dialect: Dialect,
    table: &str,
) -> Result<HashMap<String, String>, ConnectorError> {
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
        out.insert(name, ty.unwrap_or_default());
    }
    Ok(out)
}

/// The declared type of one column, for messages.
async fn declared_type(
    pool: &AnyPool,
    dialect: Dialect,
    table: &str,
    column: &str,
) -> Result<String, ConnectorError> {
    Ok(introspect_types(pool, dialect, table)
        .await?
        .remove(column)
        .unwrap_or_default())
}

/// Refuses a SQLite time column none of whose values is a timestamp,
/// naming one of them: every window would be empty. A column with some
/// good values reads them; its other rows are listed as unplaced.
async fn check_sqlite_times(
    pool: &AnyPool,
    table_sql: &str,
    col: &str,
    column: &str,
    display: &str,
) -> Result<(), ConnectorError> {
    let epoch = Dialect::Sqlite.epoch_expr(col);
    let good = format!("SELECT 1 FROM {table_sql} WHERE {epoch} IS NOT NULL LIMIT 1");
    let found = sqlx::query(&good)
        .fetch_optional(pool)
        .await
        .map_err(|e| db_error(display, e))?;
    if found.is_some() {
        return Ok(());
    }
    let sample = format!(
        "SELECT CAST({col} AS TEXT) FROM {table_sql} WHERE {col} IS NOT NULL AND {col} <> '' LIMIT 1"
    );
    let row = sqlx::query(&sample)
        .fetch_optional(pool)
        .await
        .map_err(|e| db_error(display, e))?;
    match row.map(|r| r.try_get::<Option<String>, _>(0)) {
        Some(Ok(Some(value))) => Err(ConnectorError::Config(format!(
            "{display}: the time column `{column}` holds `{value}`, which is not a timestamp, and no row holds one; \
             store RFC 3339 text such as 2026-01-02T01:01:01Z (or with an offset), `YYYY-MM-DD HH:MM:SS` in UTC, or INTEGER Unix seconds"
        ))),
        _ => Ok(()),
    }
}

#[async_trait::async_trait]
impl Source for SqlTable {
    fn describe(&self) -> String {
        self.display.clone()
    }

    /// Connecting has found the table and every mapped column; this runs
    /// the read's own SELECT list against the table with no rows wanted, so
    /// a column the database cannot read as configured fails here.
    async fn probe(&self) -> Result<recon_core::Probe, ConnectorError> {
        let sql = format!(
            "SELECT {} FROM {} WHERE 1 = 0",
            self.select_list,
            self.table()
        );
        sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(&format!("{}: reading the mapped columns", self.display), e))?;
        Ok(recon_core::Probe::reached(format!(
            "{} ({}, key `{}`, {} column(s) mapped)",
            self.display,
            self.dialect.name(),
            self.cfg.key_column,
            self.cfg.columns.len()
        ))
        .authenticated())
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let mut args = AnyArguments::default();
        if self.cfg.time_field.is_some() {
            let _ = args.add(window.start.as_second());
            let _ = args.add(window.end.as_second());
        }
        Box::pin(stream_pages(self, args))
    }

    fn reads_whole(&self) -> bool {
        self.cfg.time_field.is_none()
    }

    /// One statement that stops at the first row outside the window or
    /// without a time (a table with older rows answers from its first
    /// page); it scans further only while the rows it meets are the
    /// window's, so at most what the read itself scanned when every row
    /// is.
    async fn holds_nothing_outside(&self, window: Window) -> Result<bool, ConnectorError> {
        let Some(sql) = &self.outside_sql else {
            return Ok(true);
        };
        let mut args = AnyArguments::default();
        let _ = args.add(window.start.as_second());
        let _ = args.add(window.end.as_second());
        let found = sqlx::query_with(sql, args)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| db_error(&self.display, e))?;
        Ok(found.is_none())
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        self.rows_by_key(&self.select_list, keys, false)
            .await?
            .iter()
            .map(|row| self.parse_row(row))
            .collect()
    }

    /// Every row whose key, trimmed as the read trims it, is one of
    /// `keys`: a copy stored as `ch_1 ` beside `ch_1` (which a UNIQUE
    /// constraint lets through) is listed too. Rows carry no ID of their own
    /// here.
    async fn duplicate_copies(
        &self,
        keys: &[String],
    ) -> Result<Vec<recon_core::DuplicateCopy>, ConnectorError> {
        self.rows_by_key(&self.select_list, keys, true)
            .await?
            .iter()
            .map(|row| {
                Ok(recon_core::DuplicateCopy {
                    native_id: None,
                    record: self.parse_row(row)?,
                })
            })
            .collect()
    }
}

/// A row of the read: a record, or one no window holds.
enum ReadRow {
    Record(Record),
    Unplaced(Unplaced),
}

impl SqlTable {
    /// A row of the windowed read: flagged by the column after the select
    /// list when its time column is NULL (or, on SQLite, holds no
    /// timestamp), the stored text in the one after that.
    fn read_row(&self, row: &sqlx::any::AnyRow) -> Result<ReadRow, ConnectorError> {
        let Some(i) = self.cfg.time_field else {
            return self.parse_row(row).map(ReadRow::Record);
        };
        let flag_at = self.schema.fields.len() + 1 + usize::from(self.currency_storage.is_some());
        let flagged: i64 = row
            .try_get(flag_at)
            .map_err(|e| db_error(&self.display, e))?;
        if flagged == 0 {
            return self.parse_row(row).map(ReadRow::Record);
        }
        let text = |i: usize| {
            row.try_get::<Option<String>, _>(i)
                .map_err(|e| db_error(&self.display, e))
        };
        let key = text(0)?.map(|k| k.trim().to_string()).unwrap_or_default();
        // The time column as stored (the select list reads it converted).
        let value = text(flag_at + 1)?;
        let reason = match value.as_deref() {
            None => "null",
            Some(v) if v.trim().is_empty() => "empty",
            Some(_) => "not a timestamp",
        };
        Ok(ReadRow::Unplaced(Unplaced {
            key,
            field: self.cfg.columns[i].clone(),
            value: value.unwrap_or_default(),
            reason: reason.to_string(),
        }))
    }
}

/// Streams the rows of `sql` as pages of parsed records, with the rows no
/// window holds listed beside them.
fn stream_pages<'a>(
    table: &'a SqlTable,
    args: AnyArguments<'a>,
) -> impl futures_core::Stream<Item = Result<Page, ConnectorError>> + Send + 'a {
    sqlx::query_with(&table.read_sql, args)
        .fetch(&table.pool)
        .map_err(move |e| db_error(&table.display, e))
        .and_then(move |row| std::future::ready(table.read_row(&row)))
        .chunks(PAGE)
        .map(|chunk| {
            let mut page = Page::default();
            for row in chunk {
                match row? {
                    ReadRow::Record(r) => page.records.push(r),
                    ReadRow::Unplaced(u) => page.unplaced.push(u),
                }
            }
            Ok(page)
        })
}

#[async_trait::async_trait]
impl Target for SqlTable {
    async fn check_idempotent(&self) -> Result<(), ConnectorError> {
        self.check_writable().await
    }

    async fn write(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        self.write_records(records, mode).await
    }

    fn write_batch(&self) -> usize {
        self.cfg.write_batch
    }

    fn as_source(&self) -> &dyn Source {
        self
    }
}
