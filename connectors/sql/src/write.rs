//! The write path: idempotent inserts and upserts keyed by the external ID,
//! outcomes that say what the table now holds, and a prompt stop when the
//! connection is lost.
//!
//! Statement patterns, per dialect:
//!
//! - **PostgreSQL, SQLite**: `INSERT … ON CONFLICT (key) DO NOTHING` (insert)
//!   or `DO UPDATE` (upsert) `RETURNING key`. `ON CONFLICT (key)` arbitrates
//!   only the key's own unique index; a collision on any other unique index
//!   is an error, so no other row can be touched. `RETURNING` names exactly
//!   the rows written.
//! - **MySQL/MariaDB**: `ON DUPLICATE KEY UPDATE` fires on *any* unique
//!   index, so a row colliding on, say, `email` would update the row that
//!   holds that email. recon never uses it. It looks the batch's keys up,
//!   then updates existing rows with `UPDATE … WHERE key = ?` (upsert mode
//!   only) and inserts the others with a plain `INSERT`, all in one
//!   transaction. A plain `INSERT` either writes every row or fails, so
//!   `created` is what the table holds. A failed batch is retried row by
//!   row; a row refused for a collision on another unique index fails alone,
//!   with the database's message naming the index.
//!
//! Keys are compared exactly. Under a case- or accent-insensitive key
//! collation (MySQL's default `_ci`, PostgreSQL `citext` or a
//! nondeterministic collation, SQLite `NOCASE`) the database takes `ch_CCC`
//! and `ch_ccc` for one key while the source has two. recon never lets that
//! touch the other row (updates also compare the key in binary) and never
//! reports such an item as created or unchanged: it fails alone, naming the
//! stored variant and the fix. The check at start logs the `ALTER TABLE`
//! that makes the key exact.
//!
//! Errors are split in two: **data-level** refusals (a constraint, a bad
//! value) fail the items concerned and the run goes on; **connection-level**
//! errors (refused, reset, pool timeout, no answer within
//! [`WRITE_TIMEOUT`], database dropped, server shut down) end the call at
//! once with [`ConnectorError::ConnectionLost`]: the batch in flight may or
//! may not be committed, and the caller records it as unknown.

use std::collections::HashSet;
use std::time::Duration;

use recon_core::{AmountFormat, ConnectorError, Currency, Record, Value, WriteMode, WriteOutcome};
use sqlx::any::AnyArguments;
use sqlx::{Arguments, Row};

use crate::{db_error, Dialect, SqlTable, Storage};

/// Longest wait for one write statement (or one key look-up of the write
/// path) before the connection is taken as lost.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How currency codes are spelled in the target's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CurrencyCase {
    /// `USD` (ISO 4217's spelling; the default for an empty table).
    #[default]
    Upper,
    /// `usd` (Stripe's spelling, kept by many webhook handlers).
    Lower,
}

/// How a timestamp is written into a text column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampText {
    /// `2025-11-29T19:44:01Z` (with `frac` fractional digits).
    Rfc3339Z {
        /// Fractional second digits.
        frac: u8,
    },
    /// `2025-11-29T19:44:01+00:00`.
    Rfc3339Offset {
        /// Fractional second digits.
        frac: u8,
    },
    /// `2025-11-29 19:44:01` (UTC, SQL style).
    Sql {
        /// Fractional second digits.
        frac: u8,
    },
    /// `2025-11-29T19:44:01` (UTC, no zone).
    Local {
        /// Fractional second digits.
        frac: u8,
    },
    /// Unix seconds.
    Unix,
}

impl TimestampText {
    /// Recognises the format of one stored value; `None` if it is none of
    /// the known forms.
    pub fn detect(sample: &str) -> Option<TimestampText> {
        let s = sample.trim();
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return Some(TimestampText::Unix);
        }
        let b = s.as_bytes();
        if b.len() < 19
            || !b[..4].iter().all(u8::is_ascii_digit)
            || b[4] != b'-'
            || b[7] != b'-'
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        let sep = b[10];
        let mut rest = &s[19..];
        let mut frac = 0u8;
        if let Some(r) = rest.strip_prefix('.') {
            let digits = r.bytes().take_while(u8::is_ascii_digit).count();
            frac = u8::try_from(digits.min(9)).ok()?;
            rest = &r[digits..];
        }
        match (sep, rest) {
            (b'T', "Z") => Some(TimestampText::Rfc3339Z { frac }),
            (b'T', "+00:00") => Some(TimestampText::Rfc3339Offset { frac }),
            (b'T', "") => Some(TimestampText::Local { frac }),
            (b' ', "") => Some(TimestampText::Sql { frac }),
            _ => None,
        }
    }

    /// A setting's name: `rfc3339`, `sql`, `unix`.
    pub fn parse_setting(name: &str) -> Option<TimestampText> {
        match name {
            "rfc3339" => Some(TimestampText::Rfc3339Z { frac: 0 }),
            "rfc3339_offset" => Some(TimestampText::Rfc3339Offset { frac: 0 }),
            "sql" => Some(TimestampText::Sql { frac: 0 }),
            "unix" => Some(TimestampText::Unix),
            _ => None,
        }
    }

    /// The text of `t` in this format (UTC).
    pub fn format(&self, t: jiff::Timestamp) -> String {
        let z = t.to_zoned_datetime(jiff::tz::TimeZone::UTC);
        let base = |sep: char, frac: u8| {
            let mut s = format!("{}{sep}{}", z.strftime("%Y-%m-%d"), z.strftime("%H:%M:%S"));
            if frac > 0 {
                let nanos = format!("{:09}", z.subsec_nanosecond());
                s.push('.');
                s.push_str(&nanos[..usize::from(frac.min(9))]);
            }
            s
        };
        match *self {
            TimestampText::Rfc3339Z { frac } => format!("{}Z", base('T', frac)),
            TimestampText::Rfc3339Offset { frac } => format!("{}+00:00", base('T', frac)),
            TimestampText::Sql { frac } => base(' ', frac),
            TimestampText::Local { frac } => base('T', frac),
            TimestampText::Unix => t.as_second().to_string(),
        }
    }
}

/// How backfilled values are spelled so that they look like the table's own
/// rows: detected from existing rows on the first write, overridable in
/// config.
#[derive(Clone, Debug)]
pub(crate) struct WriteStyle {
    pub currency_case: CurrencyCase,
    /// Per schema field: the text format of a timestamp stored as text.
    pub timestamp_text: Vec<Option<TimestampText>>,
}

/// One written value, before it is bound or put in a JSON row.
enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// The cast a written value's placeholder gets ([`Dialect`]'s `*_param`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cast {
    Integer,
    Timestamp,
    Decimal,
    Text,
    /// The bare placeholder.
    None,
}

/// `t` as `YYYY-MM-DD HH:MM:SS` in UTC, what `strftime("%Y-%m-%d %H:%M:%S")`
/// writes (years 0-9999 formatted by hand: a backfill formats one per row).
fn sql_utc(t: jiff::Timestamp) -> String {
    let dt = jiff::tz::TimeZone::UTC.to_datetime(t);
    if !(0..=9999).contains(&dt.year()) {
        return t.strftime("%Y-%m-%d %H:%M:%S").to_string();
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    )
}

/// What went wrong with one statement.
enum WriteError {
    /// The connection is gone; the statement may or may not have committed.
    Connection(String),
    /// The database refused the data.
    Refused(String),
}

/// PostgreSQL SQLSTATEs that mean the session or database is gone:
/// class 08 (connection exception), 57P01-57P03 (admin shutdown, crash
/// shutdown, cannot connect now), 3D000 (database does not exist), 53300
/// (too many connections).
fn postgres_connection_state(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "3D000" | "53300")
}

/// MySQL/MariaDB error numbers of the same kind: server shutdown (1053),
/// connection killed (1927), unknown database (1049), too many connections
/// (1040), server gone / lost (2006, 2013), aborted connection (1152, 1184).
fn mysql_connection_number(n: u16) -> bool {
    matches!(n, 1040 | 1049 | 1053 | 1152 | 1184 | 1927 | 2006 | 2013)
}

fn classify(e: sqlx::Error) -> WriteError {
    match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => WriteError::Connection(e.to_string()),
        sqlx::Error::Database(db) => {
            if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                if mysql_connection_number(my.number()) {
                    return WriteError::Connection(e.to_string());
                }
                return WriteError::Refused(e.to_string());
            }
            if db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
                && db.code().is_some_and(|c| postgres_connection_state(&c))
            {
                return WriteError::Connection(e.to_string());
            }
            // SQLite: cannot open (14), I/O error (10), not a database (26).
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
                && db
                    .code()
                    .is_some_and(|c| matches!(c.as_ref(), "10" | "14" | "26"))
            {
                return WriteError::Connection(e.to_string());
            }
            WriteError::Refused(e.to_string())
        }
        _ => WriteError::Refused(e.to_string()),
    }
}

/// Runs a statement future under [`WRITE_TIMEOUT`], classifying its error.
async fn timed<T>(
    fut: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, WriteError> {
    match tokio::time::timeout(WRITE_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(e)),
        Err(_) => Err(WriteError::Connection(format!(
            "no answer within {} s",
            WRITE_TIMEOUT.as_secs()
        ))),
    }
}

impl SqlTable {
    /// The write style, detected once from the table's rows.
    async fn style(&self) -> Result<&WriteStyle, ConnectorError> {
        self.style
            .get_or_try_init(|| async { self.detect_style().await })
            .await
    }

    async fn detect_style(&self) -> Result<WriteStyle, ConnectorError> {
        let d = self.dialect;
        let table = self.table();
        let currency_case = match (&self.cfg.currency_case, &self.cfg.currency_column) {
            (Some(c), _) => *c,
            (None, Some(col)) if self.currency_storage.is_some() => {
                let col = d.quote(col);
                let sql = format!(
                    "SELECT {} FROM {table} WHERE {col} IS NOT NULL LIMIT 100",
                    d.as_text(&col)
                );
                let rows = sqlx::query(&sql)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| db_error(&self.display, e))?;
                let codes: Vec<String> = rows
                    .iter()
                    .filter_map(|r| r.try_get::<Option<String>, _>(0).ok().flatten())
                    .filter(|s| s.chars().any(|c| c.is_ascii_alphabetic()))
                    .collect();
                if !codes.is_empty()
                    && codes
                        .iter()
                        .all(|c| !c.chars().any(|ch| ch.is_ascii_uppercase()))
                {
                    CurrencyCase::Lower
                } else {
                    CurrencyCase::Upper
                }
            }
            _ => CurrencyCase::Upper,
        };
        let mut timestamp_text = Vec::with_capacity(self.schema.fields.len());
        for (i, field) in self.schema.fields.iter().enumerate() {
            let text_stored = field.kind == recon_core::FieldKind::Timestamp
                && (self.storage[i] == Storage::Text
                    || (self.storage[i] == Storage::Timestamp && d == Dialect::Sqlite));
            if !text_stored {
                timestamp_text.push(None);
                continue;
            }
            if let Some(f) = self.cfg.timestamp_format {
                timestamp_text.push(Some(f));
                continue;
            }
            let col = d.quote(&self.cfg.columns[i]);
            let sql = format!(
                "SELECT {} FROM {table} WHERE {col} IS NOT NULL LIMIT 1",
                d.as_text(&col)
            );
            let sample: Option<String> = sqlx::query(&sql)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| db_error(&self.display, e))?
                .and_then(|r| r.try_get::<Option<String>, _>(0).ok().flatten());
            let default = if self.storage[i] == Storage::Timestamp {
                TimestampText::Sql { frac: 0 }
            } else {
                TimestampText::Rfc3339Z { frac: 0 }
            };
            let detected = match sample {
                None => default,
                Some(s) => TimestampText::detect(&s).ok_or_else(|| {
                    ConnectorError::Config(format!(
                        "{}: column `{}` holds timestamps as text like `{s}`, a form recon cannot reproduce; set timestamp_format = \"rfc3339\", \"sql\" or \"unix\" in the target config",
                        self.display, self.cfg.columns[i]
                    ))
                })?,
            };
            timestamp_text.push(Some(detected));
        }
        Ok(WriteStyle {
            currency_case,
            timestamp_text,
        })
    }

    fn currency_text(&self, c: Currency, style: &WriteStyle) -> String {
        match style.currency_case {
            CurrencyCase::Upper => c.code().to_string(),
            CurrencyCase::Lower => c.code().to_ascii_lowercase(),
        }
    }

    /// What `value` is written as into a column stored as `storage`: the
    /// bound cell and the cast its placeholder gets. One function for both
    /// statement shapes (bound parameters, PostgreSQL's JSON rows), so that
    /// a value is written the same way through either.
    fn cell(
        &self,
        value: &Value,
        storage: Storage,
        text_ts: Option<TimestampText>,
        style: &WriteStyle,
    ) -> (Cell, Cast) {
        match (value, storage) {
            (Value::Null, Storage::Integer) => (Cell::Null, Cast::Integer),
            (Value::Null, Storage::Timestamp) if text_ts.is_none() => (Cell::Null, Cast::Timestamp),
            (Value::Null, Storage::Decimal) => (Cell::Null, Cast::Decimal),
            (Value::Null, _) => (Cell::Null, Cast::Text),
            (Value::Money(m), Storage::Integer) if self.amount_format == AmountFormat::Minor => {
                (Cell::Int(m.minor), Cast::Integer)
            }
            (Value::Money(m), Storage::Decimal) => (Cell::Text(m.to_major_string()), Cast::Decimal),
            (Value::Money(m), _) => (
                Cell::Text(match self.amount_format {
                    AmountFormat::Minor => m.minor.to_string(),
                    AmountFormat::Major => m.to_major_string(),
                }),
                Cast::Text,
            ),
            (Value::Integer(i), Storage::Integer) => (Cell::Int(*i), Cast::Integer),
            (Value::Timestamp(t), Storage::Integer) => (Cell::Int(t.as_second()), Cast::Integer),
            (Value::Timestamp(t), _) if text_ts.is_some() => {
                let f = text_ts.unwrap_or(TimestampText::Rfc3339Z { frac: 0 });
                if f == TimestampText::Unix && self.dialect == Dialect::Sqlite {
                    // Unix seconds in a SQLite text-affinity column are
                    // stored as integers by the rows the table already has.
                    return (Cell::Int(t.as_second()), Cast::None);
                }
                (Cell::Text(f.format(*t)), Cast::Text)
            }
            (Value::Timestamp(t), Storage::Timestamp) => (Cell::Text(sql_utc(*t)), Cast::Timestamp),
            (Value::Timestamp(t), _) => (Cell::Text(recon_core::format_timestamp(*t)), Cast::Text),
            (Value::Currency(c), _) => (Cell::Text(self.currency_text(*c, style)), Cast::Text),
            // PostgreSQL: `CAST($n AS BIGINT)`; elsewhere the bare placeholder.
            (Value::Text(s), Storage::Integer) => (Cell::Text(s.clone()), Cast::Integer),
            (Value::Text(s), _) => (Cell::Text(s.clone()), Cast::Text),
            (other, _) => (Cell::Text(other.to_string()), Cast::Text),
        }
    }

    /// `expr` (a placeholder, or a PostgreSQL JSON row's element) with `cast`.
    fn cast(&self, expr: &str, cast: Cast) -> String {
        let d = self.dialect;
        match cast {
            Cast::Integer => d.integer_param(expr),
            Cast::Timestamp => d.timestamp_param(expr),
            Cast::Decimal => d.decimal_param(expr),
            Cast::Text => d.text_param(expr),
            Cast::None => expr.to_string(),
        }
    }

    /// Binds one cell; returns the placeholder expression.
    fn bind_cell(
        &self,
        args: &mut AnyArguments<'_>,
        n: &mut usize,
        (cell, cast): (Cell, Cast),
    ) -> String {
        *n += 1;
        let p = self.dialect.placeholder(*n);
        match cell {
            Cell::Null if cast == Cast::Integer => {
                let _ = args.add(None::<i64>);
            }
            Cell::Null => {
                let _ = args.add(None::<String>);
            }
            Cell::Int(i) => {
                let _ = args.add(i);
            }
            Cell::Text(s) => {
                let _ = args.add(s);
            }
        }
        self.cast(&p, cast)
    }

    /// The written columns: key, mapped fields, and the currency column
    /// when it is not also a mapped field.
    fn write_columns(&self) -> Vec<String> {
        let d = self.dialect;
        let mut cols = vec![d.quote(&self.cfg.key_column)];
        cols.extend(self.cfg.columns.iter().map(|c| d.quote(c)));
        if let (true, Some(c)) = (self.writes_currency_column(), &self.cfg.currency_column) {
            cols.push(d.quote(c));
        }
        cols
    }

    /// Whether the currency column is written as a column of its own.
    fn writes_currency_column(&self) -> bool {
        self.schema.money_field().is_some()
            && self
                .cfg
                .currency_column
                .as_ref()
                .is_some_and(|c| !self.cfg.columns.contains(c))
    }

    /// The cells of one record, in [`SqlTable::write_columns`] order.
    fn row_cells(&self, r: &Record, with_key: bool, style: &WriteStyle) -> Vec<(Cell, Cast)> {
        let write_currency = self.writes_currency_column();
        let mut row = Vec::with_capacity(r.values.len() + 2);
        if with_key {
            // What `cell` gives the key as a `Value::Text`, without a copy more.
            let cast = match self.key_storage {
                Storage::Integer => Cast::Integer,
                _ => Cast::Text,
            };
            row.push((Cell::Text(r.key.clone()), cast));
        }
        for (i, v) in r.values.iter().enumerate() {
            row.push(self.cell(v, self.storage[i], style.timestamp_text[i], style));
        }
        if write_currency {
            let cur = self
                .schema
                .money_field()
                .and_then(|i| r.values[i].currency())
                .map(|c| Value::Text(self.currency_text(c, style)))
                .unwrap_or(Value::Null);
            row.push(self.cell(
                &cur,
                self.currency_storage.unwrap_or(Storage::Text),
                None,
                style,
            ));
        }
        row
    }

    /// The bound values of one record, in [`SqlTable::write_columns`] order.
    fn bind_row(
        &self,
        args: &mut AnyArguments<'_>,
        n: &mut usize,
        r: &Record,
        with_key: bool,
        style: &WriteStyle,
    ) -> Vec<String> {
        self.row_cells(r, with_key, style)
            .into_iter()
            .map(|c| self.bind_cell(args, n, c))
            .collect()
    }

    /// PostgreSQL: the rows of `records` as one bound JSON array (an array
    /// of cells per row), expanded by the server
    /// (`SELECT CAST(e->>0 AS …), … FROM jsonb_array_elements($1)`), with
    /// each column's cast as [`SqlTable::cell`] gives it: one parameter
    /// instead of one per cell. 4,000 rows of 5 columns bound as 20,000
    /// parameters cost recon their encoding and the server the parsing
    /// and planning of a 4,000-row VALUES list. `jsonb`: each row is parsed
    /// once, where `->>` on `json` scans the row's text again for every
    /// column (8-10% less server time in a psql A/B of 50 such batches).
    /// `None` when a column's cells need different casts (the bound VALUES
    /// list handles that).
    fn json_rows(&self, records: &[&Record], style: &WriteStyle) -> Option<(String, String)> {
        let mut casts: Vec<Option<Cast>> = Vec::new();
        // Bytes, turned into a String once: serde_json writes valid UTF-8.
        let mut json: Vec<u8> = Vec::with_capacity(records.len() * 96 + 2);
        json.push(b'[');
        for (i, r) in records.iter().enumerate() {
            let cells = self.row_cells(r, true, style);
            if casts.is_empty() {
                casts = vec![None; cells.len()];
            }
            if i > 0 {
                json.push(b',');
            }
            json.push(b'[');
            for (j, (cell, cast)) in cells.into_iter().enumerate() {
                match casts[j] {
                    None => casts[j] = Some(cast),
                    Some(c) if c != cast => return None,
                    Some(_) => {}
                }
                if j > 0 {
                    json.push(b',');
                }
                // Writing into a Vec<u8> cannot fail.
                let _ = match cell {
                    Cell::Null => serde_json::to_writer(&mut json, &()),
                    Cell::Int(n) => serde_json::to_writer(&mut json, &n),
                    Cell::Text(t) => serde_json::to_writer(&mut json, &t),
                };
            }
            json.push(b']');
        }
        json.push(b']');
        let json = String::from_utf8(json).ok()?;
        let select: Vec<String> = casts
            .iter()
            .enumerate()
            .map(|(j, c)| self.cast(&format!("(e->>{j})"), c.unwrap_or(Cast::Text)))
            .collect();
        let source = format!(
            "SELECT {} FROM jsonb_array_elements(CAST($1 AS jsonb)) AS e",
            select.join(", ")
        );
        Some((source, json))
    }

    /// `INSERT … VALUES …` of `records`, with the dialect's conflict clause
    /// (PostgreSQL/SQLite: `ON CONFLICT (key)` only; MySQL: none), or, with
    /// `guard` off, none but the `RETURNING` of the keys (see
    /// [`SqlTable::insert_unguarded`]).
    fn insert_sql(
        &self,
        records: &[&Record],
        mode: WriteMode,
        style: &WriteStyle,
        guard: bool,
    ) -> (String, AnyArguments<'_>) {
        let d = self.dialect;
        let cols = self.write_columns();
        let mut args = AnyArguments::default();
        let json = match d {
            Dialect::Postgres => self.json_rows(records, style),
            _ => None,
        };
        let rows = match json {
            Some((select, json)) => {
                let _ = args.add(json);
                select
            }
            None => {
                let mut n = 0;
                let rows: Vec<String> = records
                    .iter()
                    .map(|r| {
                        format!(
                            "({})",
                            self.bind_row(&mut args, &mut n, r, true, style).join(", ")
                        )
                    })
                    .collect();
                format!("VALUES {}", rows.join(", "))
            }
        };
        let key = d.quote(&self.cfg.key_column);
        let conflict = match (d, mode) {
            (Dialect::MySql, _) => String::new(),
            (_, WriteMode::Insert) if !guard => format!(" RETURNING {}", d.as_text(&key)),
            (_, WriteMode::Insert) => format!(
                " ON CONFLICT ({key}) DO NOTHING RETURNING {}",
                d.as_text(&key)
            ),
            (_, WriteMode::Upsert) => {
                let updates: Vec<String> = cols[1..]
                    .iter()
                    .map(|c| format!("{c} = excluded.{c}"))
                    .collect();
                // Only the row whose key is exactly this one: under a
                // case-insensitive key (citext, NOCASE) ON CONFLICT would
                // otherwise update `ch_abc` for `ch_ABC`.
                let table = self.table();
                let exact = match d {
                    Dialect::Sqlite => format!("{table}.{key} = excluded.{key} COLLATE BINARY"),
                    _ => format!(
                        "CAST({table}.{key} AS TEXT) COLLATE \"C\" = CAST(excluded.{key} AS TEXT) COLLATE \"C\""
                    ),
                };
                format!(
                    " ON CONFLICT ({key}) DO UPDATE SET {} WHERE {exact} RETURNING {}",
                    updates.join(", "),
                    d.as_text(&key)
                )
            }
        };
        let sql = format!(
            "INSERT INTO {} ({}) {rows}{conflict}",
            self.table(),
            cols.join(", "),
        );
        (sql, args)
    }

    /// `UPDATE … SET … WHERE key = ?` of one record (MySQL upsert).
    fn update_sql(&self, r: &Record, style: &WriteStyle) -> (String, AnyArguments<'_>) {
        let d = self.dialect;
        let cols = self.write_columns();
        let mut args = AnyArguments::default();
        let mut n = 0;
        let values = self.bind_row(&mut args, &mut n, r, false, style);
        let sets: Vec<String> = cols[1..]
            .iter()
            .zip(&values)
            .map(|(c, v)| format!("{c} = {v}"))
            .collect();
        n += 1;
        let _ = args.add(r.key.clone());
        let _ = args.add(r.key.clone());
        // The second, binary comparison keeps a case-insensitive key
        // collation from matching `ch_abc` for `ch_ABC`.
        let key = d.quote(&self.cfg.key_column);
        let sql = format!(
            "UPDATE {} SET {} WHERE {key} = {} AND CAST({key} AS BINARY) = CAST({} AS BINARY)",
            self.table(),
            sets.join(", "),
            d.placeholder(n),
            d.placeholder(n + 1)
        );
        (sql, args)
    }

    /// Keys among `keys` that exist in the table, exactly as stored.
    async fn existing_keys(&self, keys: &[String]) -> Result<HashSet<String>, WriteError> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.existing(keys)).await {
            Ok(Ok(set)) => Ok(set),
            Ok(Err(ConnectorError::Database(m))) => Err(WriteError::Connection(m)),
            Ok(Err(e)) => Err(WriteError::Connection(e.to_string())),
            Err(_) => Err(WriteError::Connection(format!(
                "no answer within {} s",
                WRITE_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Writes one batch: every record gets the outcome the table shows.
    async fn write_chunk(
        &self,
        records: &[Record],
        mode: WriteMode,
        style: &WriteStyle,
    ) -> Result<Vec<WriteOutcome>, WriteError> {
        let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
        if self.dialect == Dialect::MySql {
            return self.write_chunk_mysql(records, &keys, mode, style).await;
        }
        // Which keys exist decides created vs updated. An insert with
        // RETURNING names exactly the rows it created, so it needs no look-up.
        let before = if mode == WriteMode::Insert {
            HashSet::new()
        } else {
            self.existing_keys(&keys).await?
        };
        // In key order: neighbouring keys land on the same pages of the
        // key's index (random IDs, as Stripe's, otherwise touch a page of
        // it per row). The outcomes are matched by key, not by position.
        let mut refs: Vec<&Record> = records.iter().collect();
        refs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let rows = match self.insert_unguarded(&refs, mode, style).await? {
            Some(rows) => rows,
            None => {
                let (sql, args) = self.insert_sql(&refs, mode, style, true);
                timed(sqlx::query_with(&sql, args).fetch_all(&self.pool)).await?
            }
        };
        if rows.len() == records.len() {
            // Every record's key came back, exactly (`refs` is in key
            // order; a trigger that rewrote a key, or a case variant, takes
            // the path below): each record wrote its own row, and has the
            // outcome its mode and the look-up before give it. Compared in
            // order, without a set of the batch's keys.
            let mut got: Vec<String> = rows
                .iter()
                .filter_map(|r| r.try_get::<Option<String>, _>(0).ok().flatten())
                .collect();
            got.sort_unstable();
            if got.len() == refs.len() && got.iter().zip(&refs).all(|(g, r)| *g == r.key) {
                return Ok(records
                    .iter()
                    .map(|r| match mode {
                        WriteMode::Insert => WriteOutcome::Created,
                        WriteMode::Upsert if before.contains(&r.key) => WriteOutcome::Updated,
                        WriteMode::Upsert => WriteOutcome::Created,
                    })
                    .collect());
            }
        }
        let returned: HashSet<String> = rows
            .iter()
            .filter_map(|r| r.try_get::<Option<String>, _>(0).ok().flatten())
            .collect();
        // A key not written is unchanged only if exactly that key is in
        // the table; otherwise a case variant took its place.
        let missing: Vec<String> = keys
            .iter()
            .filter(|k| !returned.contains(*k))
            .cloned()
            .collect();
        let (exact, variants) = if missing.is_empty() {
            (HashSet::new(), Vec::new())
        } else {
            self.stored_variants(&missing).await?
        };
        Ok(records
            .iter()
            .map(|r| match (mode, returned.contains(&r.key)) {
                (_, false) if exact.contains(&r.key) => WriteOutcome::Unchanged,
                (_, false) => WriteOutcome::Failed(self.variant_message(&r.key, &variants)),
                (WriteMode::Insert, true) => WriteOutcome::Created,
                (WriteMode::Upsert, true) if before.contains(&r.key) => WriteOutcome::Updated,
                (WriteMode::Upsert, true) => WriteOutcome::Created,
            })
            .collect())
    }

    /// PostgreSQL inserts of gaps first go without `ON CONFLICT`: the
    /// speculative insertion that clause costs is a quarter of the server's
    /// time per row on a table with a surrogate primary key and the unique
    /// external ID beside it (psql, 200,000 random `ch_` keys in 50
    /// statements: 2.06 s with the clause, 1.58 s without), and gaps were
    /// confirmed missing just before. The statement is atomic: if any row's
    /// key (or another unique index) is taken, it writes nothing and fails
    /// with a unique violation, and the batch is written again through the
    /// guarded statement, which sorts out row by row what exists. `None`:
    /// take that guarded path (not PostgreSQL, not an insert, or a
    /// conflict).
    async fn insert_unguarded(
        &self,
        refs: &[&Record],
        mode: WriteMode,
        style: &WriteStyle,
    ) -> Result<Option<Vec<sqlx::any::AnyRow>>, WriteError> {
        if self.dialect != Dialect::Postgres || mode != WriteMode::Insert {
            return Ok(None);
        }
        let (sql, args) = self.insert_sql(refs, mode, style, false);
        match tokio::time::timeout(
            WRITE_TIMEOUT,
            sqlx::query_with(&sql, args).fetch_all(&self.pool),
        )
        .await
        {
            Ok(Ok(rows)) => Ok(Some(rows)),
            Ok(Err(sqlx::Error::Database(db))) if db.is_unique_violation() => Ok(None),
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => Err(WriteError::Connection(format!(
                "no answer within {} s",
                WRITE_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Keys of `keys` stored exactly, and the stored keys the database
    /// matched that differ from every asked key (case variants under a
    /// case-insensitive key collation).
    async fn stored_variants(
        &self,
        keys: &[String],
    ) -> Result<(HashSet<String>, Vec<String>), WriteError> {
        let found = self.existing_keys(keys).await?;
        let asked: HashSet<&String> = keys.iter().collect();
        let exact = found
            .iter()
            .filter(|k| asked.contains(k))
            .cloned()
            .collect();
        let variants = found.into_iter().filter(|k| !asked.contains(k)).collect();
        Ok((exact, variants))
    }

    fn variant_message(&self, key: &str, variants: &[String]) -> String {
        match variants.iter().find(|v| v.to_lowercase() == key.to_lowercase()) {
            Some(v) => format!(
                "not written: the table holds `{v}`, which the key column `{}` compares as equal to `{key}` (case-insensitive collation); make the key compare exactly (MySQL/MariaDB: COLLATE utf8mb4_bin; PostgreSQL: text instead of citext; SQLite: no NOCASE), then run again",
                self.cfg.key_column
            ),
            None => format!(
                "not written: the database reported no row for `{key}` after the write; check triggers or rules on the table"
            ),
        }
    }

    async fn write_chunk_mysql(
        &self,
        records: &[Record],
        keys: &[String],
        mode: WriteMode,
        style: &WriteStyle,
    ) -> Result<Vec<WriteOutcome>, WriteError> {
        let before = self.existing_keys(keys).await?;
        let fresh: Vec<&Record> = records
            .iter()
            .filter(|r| !before.contains(&r.key))
            .collect();
        let stale: Vec<&Record> = records.iter().filter(|r| before.contains(&r.key)).collect();
        let mut tx = timed(self.pool.begin()).await?;
        if mode == WriteMode::Upsert {
            for r in &stale {
                let (sql, args) = self.update_sql(r, style);
                timed(sqlx::query_with(&sql, args).execute(&mut *tx)).await?;
            }
        }
        if !fresh.is_empty() {
            let (sql, args) = self.insert_sql(&fresh, mode, style, true);
            let done = timed(sqlx::query_with(&sql, args).execute(&mut *tx)).await?;
            if done.rows_affected() != fresh.len() as u64 {
                return Err(WriteError::Refused(format!(
                    "the database inserted {} of {} rows",
                    done.rows_affected(),
                    fresh.len()
                )));
            }
        }
        timed(tx.commit()).await?;
        Ok(records
            .iter()
            .map(|r| match (mode, before.contains(&r.key)) {
                (WriteMode::Insert, true) => WriteOutcome::Unchanged,
                (WriteMode::Upsert, true) => WriteOutcome::Updated,
                (_, false) => WriteOutcome::Created,
            })
            .collect())
    }

    /// One record alone, after its batch was refused. A refused insert
    /// whose key now exists (written meanwhile by someone else) is
    /// unchanged, not failed.
    async fn write_one(
        &self,
        r: &Record,
        mode: WriteMode,
        style: &WriteStyle,
    ) -> Result<WriteOutcome, WriteError> {
        match self.write_chunk(std::slice::from_ref(r), mode, style).await {
            Ok(mut o) => Ok(o.pop().unwrap_or(WriteOutcome::Unchanged)),
            Err(WriteError::Refused(msg)) => {
                let (exact, variants) = self.stored_variants(std::slice::from_ref(&r.key)).await?;
                if mode == WriteMode::Insert && exact.contains(&r.key) {
                    return Ok(WriteOutcome::Unchanged);
                }
                if !variants.is_empty() {
                    return Ok(WriteOutcome::Failed(
                        self.variant_message(&r.key, &variants),
                    ));
                }
                Ok(WriteOutcome::Failed(format!(
                    "refused by the database: {msg}"
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Writes records idempotently; see the module docs.
    pub(crate) async fn write_records(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let lost = |m: String| {
            ConnectorError::ConnectionLost(format!(
                "{}: lost the connection while writing ({m}); the rows of the batch in flight may or may not be committed",
                self.display
            ))
        };
        let style = self.style().await?;
        let per_row = self.cfg.columns.len() + 2;
        let batch = self
            .cfg
            .write_batch
            .clamp(1, self.dialect.max_params() / per_row);
        let mut out = Vec::with_capacity(records.len());
        for chunk in records.chunks(batch) {
            match self.write_chunk(chunk, mode, style).await {
                Ok(outcomes) => out.extend(outcomes),
                Err(WriteError::Connection(m)) => return Err(lost(m)),
                Err(WriteError::Refused(e)) => {
                    // Data-level refusal: find out which rows, one at a time.
                    tracing::warn!(message = "Batch write refused; retrying row by row.", error = %e, rows = chunk.len());
                    for r in chunk {
                        match self.write_one(r, mode, style).await {
                            Ok(o) => out.push(o),
                            Err(WriteError::Connection(m)) => return Err(lost(m)),
                            Err(WriteError::Refused(m)) => out.push(WriteOutcome::Failed(m)),
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Checks that writes keyed by the external ID are idempotent and
    /// exact: a usable unique index on the key alone (not partial, not
    /// deferrable), and a key column that compares exactly.
    pub(crate) async fn check_writable(&self) -> Result<(), ConnectorError> {
        let key = &self.cfg.key_column;
        let table = &self.cfg.table;
        let (schema, bare) = match table.split_once('.') {
            Some((s, t)) => (Some(s.to_string()), t.to_string()),
            None => (None, table.clone()),
        };
        let db = |e| db_error(&self.display, e);
        let count = |row: sqlx::any::AnyRow| row.try_get::<i64, _>(0).map_err(db);
        let unique = match self.dialect {
            Dialect::Postgres => {
                let sql = "SELECT COUNT(*) FILTER (WHERE i.indimmediate), \
                     CAST(MIN(con.conname) FILTER (WHERE NOT i.indimmediate) AS TEXT) \
                     FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0] \
                     LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid \
                     WHERE i.indisunique AND i.indnatts = 1 AND i.indpred IS NULL AND c.relname = $1 \
                     AND n.nspname = COALESCE($2, current_schema()) AND a.attname = $3";
                let row = sqlx::query(sql)
                    .bind(bare.clone())
                    .bind(schema.clone())
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(db)?;
                let immediate: i64 = row.try_get(0).map_err(db)?;
                let deferrable: Option<String> = row.try_get(1).map_err(db)?;
                // ON CONFLICT takes every unique index on the key as an
                // arbiter and refuses if any is deferrable.
                if let Some(name) = deferrable {
                    let q = |s: &str| self.dialect.quote(s);
                    return Err(ConnectorError::NotIdempotent(format!(
                        "target {}: the unique constraint `{name}` on `{key}` is DEFERRABLE, and PostgreSQL cannot use a deferrable constraint for ON CONFLICT, so every write would fail. Make it immediate:\n  ALTER TABLE {} DROP CONSTRAINT {}, ADD CONSTRAINT {} UNIQUE ({});",
                        self.display,
                        self.dialect.quote_table(table),
                        q(&name),
                        q(&name),
                        q(key)
                    )));
                }
                immediate > 0
            }
            Dialect::MySql => {
                let sql = "SELECT COUNT(*) FROM (SELECT index_name FROM information_schema.statistics \
                     WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND non_unique = 0 \
                     AND sub_part IS NULL \
                     GROUP BY index_name HAVING COUNT(*) = 1 AND MAX(column_name) = ?) u";
                let row = sqlx::query(sql)
                    .bind(schema.clone())
                    .bind(bare.clone())
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(db)?;
                count(row)? > 0
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
                    .map_err(db)?;
                let by_index = count(row)? > 0;
                // An INTEGER PRIMARY KEY is the rowid itself and has no index.
                let pk_sql = "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE pk > 0";
                let pk_is_key_sql =
                    "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE pk = 1 AND name = ?2";
                let pks: i64 = sqlx::query(pk_sql)
                    .bind(bare.clone())
                    .fetch_one(&self.pool)
                    .await
                    .and_then(|r| r.try_get(0))
                    .map_err(db)?;
                let pk_is_key: i64 = sqlx::query(pk_is_key_sql)
                    .bind(bare.clone())
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .and_then(|r| r.try_get(0))
                    .map_err(db)?;
                by_index || (pks == 1 && pk_is_key == 1)
            }
        };
        if !unique {
            return Err(ConnectorError::NotIdempotent(format!(
                "target {} has no unique constraint on `{key}`; backfill would not be idempotent. Add one with:\n  {}",
                self.display,
                self.dialect.unique_ddl(table, key)
            )));
        }
        match self.check_exact_key(schema, &bare).await {
            // Writes stay exact (see the module docs); the items that meet a
            // case variant fail one by one, naming it.
            Err(ConnectorError::NotIdempotent(why)) => {
                tracing::warn!(message = "Key column compares case-insensitively.", detail = %why)
            }
            Err(e) => {
                tracing::warn!(message = "Could not read the key column's collation.", error = %e)
            }
            Ok(()) => {}
        }
        Ok(())
    }

    /// Refuses a key column that compares case- or accent-insensitively.
    async fn check_exact_key(
        &self,
        schema: Option<String>,
        bare: &str,
    ) -> Result<(), ConnectorError> {
        let key = &self.cfg.key_column;
        let table = &self.cfg.table;
        let db = |e| db_error(&self.display, e);
        let refuse = |what: String, fix: String| {
            Err(ConnectorError::NotIdempotent(format!(
                "target {}: key column `{key}` {what}, so the database takes `ch_ABC` and `ch_abc` for one key while the source has two; writes could land on the wrong row or silently do nothing. Make the key compare exactly:\n  {fix}",
                self.display
            )))
        };
        match self.dialect {
            Dialect::MySql => {
                let sql = "SELECT CAST(COLLATION_NAME AS CHAR), CAST(CHARACTER_SET_NAME AS CHAR), \
                     CAST(COLUMN_TYPE AS CHAR), CAST(IS_NULLABLE AS CHAR) FROM information_schema.columns \
                     WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND column_name = ?";
                let row = sqlx::query(sql)
                    .bind(schema)
                    .bind(bare.to_string())
                    .bind(key.clone())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db)?;
                if let Some(row) = row {
                    // information_schema text may come back typed as BLOB.
                    let text = |i: usize| -> Option<String> {
                        row.try_get::<Option<String>, _>(i)
                            .ok()
                            .flatten()
                            .or_else(|| {
                                row.try_get::<Option<Vec<u8>>, _>(i)
                                    .ok()
                                    .flatten()
                                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                            })
                    };
                    let collation = text(0);
                    let charset = text(1);
                    let ty = text(2).unwrap_or_else(|| "VARCHAR(255)".into());
                    let nullable = text(3).unwrap_or_default();
                    if let Some(c) = collation.filter(|c| {
                        let c = c.to_ascii_lowercase();
                        c.ends_with("_ci") || c.ends_with("_ai") || c.contains("_ai_")
                    }) {
                        let cs = charset.unwrap_or_else(|| "utf8mb4".into());
                        return refuse(
                            format!("has the case-insensitive collation `{c}`"),
                            format!(
                                "ALTER TABLE {} MODIFY {} {ty} CHARACTER SET {cs} COLLATE {cs}_bin{};",
                                self.dialect.quote_table(table),
                                self.dialect.quote(key),
                                if nullable == "NO" { " NOT NULL" } else { "" }
                            ),
                        );
                    }
                }
            }
            Dialect::Postgres => {
                let sql = "SELECT CAST(t.typname AS TEXT), COALESCE(co.collisdeterministic, TRUE) \
                     FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     JOIN pg_type t ON t.oid = a.atttypid \
                     LEFT JOIN pg_collation co ON co.oid = a.attcollation \
                     WHERE c.relname = $1 AND n.nspname = COALESCE($2, current_schema()) AND a.attname = $3";
                let row = sqlx::query(sql)
                    .bind(bare.to_string())
                    .bind(schema)
                    .bind(key.clone())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db)?;
                if let Some(row) = row {
                    let ty: String = row.try_get(0).map_err(db)?;
                    let deterministic: bool = row.try_get(1).map_err(db)?;
                    if ty == "citext" || !deterministic {
                        return refuse(
                            if ty == "citext" {
                                "is of type citext".to_string()
                            } else {
                                "has a nondeterministic collation".to_string()
                            },
                            format!(
                                "ALTER TABLE {} ALTER COLUMN {} TYPE text COLLATE \"C\";",
                                self.dialect.quote_table(table),
                                self.dialect.quote(key)
                            ),
                        );
                    }
                }
            }
            Dialect::Sqlite => {
                // The collation of the key's unique index decides how
                // ON CONFLICT compares keys.
                let sql = "SELECT COUNT(*) FROM pragma_index_list(?1) l \
                     WHERE l.\"unique\" = 1 AND l.partial = 0 \
                     AND (SELECT COUNT(*) FROM pragma_index_info(l.name)) = 1 \
                     AND EXISTS (SELECT 1 FROM pragma_index_xinfo(l.name) x \
                         WHERE x.name = ?2 AND x.key = 1 AND UPPER(x.coll) <> 'BINARY')";
                let n: i64 = sqlx::query(sql)
                    .bind(bare.to_string())
                    .bind(key.clone())
                    .fetch_one(&self.pool)
                    .await
                    .and_then(|r| r.try_get(0))
                    .map_err(db)?;
                if n > 0 {
                    return refuse(
                        "is unique under a case-insensitive collation (NOCASE)".to_string(),
                        format!(
                            "CREATE UNIQUE INDEX {} ON {} ({} COLLATE BINARY);  -- and drop the NOCASE index or column collation",
                            self.dialect.quote(&format!("{bare}_{key}_bin")),
                            self.dialect.quote_table(table),
                            self.dialect.quote(key)
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_text_is_detected_and_reproduced() {
        let t: jiff::Timestamp = "2025-11-29T19:44:01Z".parse().unwrap();
        for (sample, expected) in [
            ("2025-11-29T19:44:01Z", "2025-11-29T19:44:01Z"),
            ("2025-01-02T03:04:05.123Z", "2025-11-29T19:44:01.000Z"),
            ("2025-11-29 00:53:41", "2025-11-29 19:44:01"),
            ("2025-11-29T00:53:41+00:00", "2025-11-29T19:44:01+00:00"),
            ("2025-11-29T00:53:41", "2025-11-29T19:44:01"),
            ("1764445441", "1764445441"),
        ] {
            let f = TimestampText::detect(sample).unwrap_or_else(|| panic!("{sample}"));
            assert_eq!(f.format(t), expected, "{sample}");
        }
        assert_eq!(TimestampText::detect("29/11/2025"), None);
        assert_eq!(TimestampText::detect("2025-11-29T19:44:01-05:00"), None);
    }

    #[test]
    fn sql_timestamps_are_what_strftime_writes() {
        for text in [
            "2026-11-28T00:00:00Z",
            "2026-11-28T23:59:59.999999999Z",
            "1970-01-01T00:00:00Z",
            "0999-03-04T05:06:07Z",
            "9999-12-30T00:00:00Z",
            "-000001-06-01T12:00:00Z",
        ] {
            let t: jiff::Timestamp = text.parse().unwrap();
            assert_eq!(
                sql_utc(t),
                t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
                "{text}"
            );
        }
    }

    #[test]
    fn connection_errors_are_told_from_refusals() {
        assert!(postgres_connection_state("08006"));
        assert!(postgres_connection_state("57P01"));
        assert!(postgres_connection_state("3D000"));
        assert!(!postgres_connection_state("23505"));
        assert!(mysql_connection_number(1927));
        assert!(!mysql_connection_number(1062));
        assert!(matches!(
            classify(sqlx::Error::PoolTimedOut),
            WriteError::Connection(_)
        ));
        assert!(matches!(
            classify(sqlx::Error::RowNotFound),
            WriteError::Refused(_)
        ));
    }
}
