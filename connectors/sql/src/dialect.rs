//! What differs between PostgreSQL, MySQL/MariaDB and SQLite: quoting,
//! placeholders, casts, epoch expressions, upsert syntax, introspection.

use recon_core::ConnectorError;

/// The SQL flavour of a database URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

/// How a column stores its values, as introspected at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// Whole numbers.
    Integer,
    /// Exact decimals (NUMERIC, DECIMAL).
    Decimal,
    /// Dates and times.
    Timestamp,
    /// Text and anything else read as text.
    Text,
}

impl Dialect {
    /// The dialect of a URL, by scheme.
    pub fn from_url(url: &str) -> Result<Dialect, ConnectorError> {
        let scheme = url
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::MySql),
            "sqlite" => Ok(Dialect::Sqlite),
            _ => Err(ConnectorError::Config(format!(
                "unsupported database URL scheme `{scheme}`; use postgres://, mysql:// or sqlite://"
            ))),
        }
    }

    /// Name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::MySql => "MySQL/MariaDB",
            Dialect::Sqlite => "SQLite",
        }
    }

    /// Quotes a validated identifier.
    pub fn quote(&self, ident: &str) -> String {
        match self {
            Dialect::MySql => format!("`{ident}`"),
            _ => format!("\"{ident}\""),
        }
    }

    /// Quotes a possibly schema-qualified table name.
    pub fn quote_table(&self, table: &str) -> String {
        table
            .split('.')
            .map(|p| self.quote(p))
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The `n`th (1-based) bind placeholder.
    pub fn placeholder(&self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("${n}"),
            _ => "?".to_string(),
        }
    }

    /// An expression reading `col` as text.
    pub fn as_text(&self, col: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({col} AS TEXT)"),
            Dialect::MySql => format!("CAST({col} AS CHAR)"),
            Dialect::Sqlite => format!("CAST({col} AS TEXT)"),
        }
    }

    /// An expression reading a timestamp column as Unix seconds, as text.
    pub fn epoch_text(&self, col: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("CAST(CAST(FLOOR(EXTRACT(EPOCH FROM {col})) AS BIGINT) AS TEXT)")
            }
            Dialect::MySql => format!("CAST(UNIX_TIMESTAMP({col}) DIV 1 AS CHAR)"),
            Dialect::Sqlite => format!("CAST({} AS TEXT)", self.epoch_expr(col)),
        }
    }

    /// An expression giving a timestamp column in whole Unix seconds (NULL
    /// when the value is NULL or, on SQLite, not a timestamp).
    ///
    /// SQLite has no date type: a column of any declared type may hold
    /// INTEGER or REAL Unix seconds, digits as text, or text such as
    /// `2026-01-02T01:01:01Z`, `2026-01-02T03:01:01+02:00` or
    /// `2026-01-02 01:01:01` (UTC). Each row is converted by what it holds:
    /// numbers as they are, digit-only text as seconds, other text by
    /// `strftime('%s', …)`, which understands `T` or a space, fractional
    /// seconds, `Z` and `±HH:MM` (<https://www.sqlite.org/lang_datefunc.html>,
    /// "Time Values"). Comparing the raw column with integer bounds instead
    /// compares text with text and finds nothing.
    pub fn epoch_expr(&self, col: &str) -> String {
        match self {
            Dialect::Postgres => format!("EXTRACT(EPOCH FROM {col})"),
            Dialect::MySql => format!("UNIX_TIMESTAMP({col})"),
            Dialect::Sqlite => format!(
                "(CASE WHEN typeof({col}) IN ('integer', 'real') THEN CAST({col} AS INTEGER) \
                 WHEN typeof({col}) = 'text' AND {col} <> '' AND {col} NOT GLOB '*[^0-9]*' THEN CAST({col} AS INTEGER) \
                 WHEN typeof({col}) = 'text' THEN CAST(strftime('%s', {col}) AS INTEGER) END)"
            ),
        }
    }

    /// How a window `[start, end)` in Unix seconds, bound as two integer
    /// parameters, is compared with a time column of this storage:
    /// `(column expression, lower bound, upper bound)`. `Err` names what to
    /// change when the column's type cannot be compared exactly.
    ///
    /// PostgreSQL and MySQL compare the column itself with converted bounds,
    /// so that an index on it serves the range; their sessions run in UTC
    /// (set at connect), so `timestamp without time zone` and `DATETIME`
    /// values are read as UTC and `timestamptz`/`TIMESTAMP` values are exact
    /// instants. Integer columns hold Unix seconds. Text columns are refused:
    /// comparing text with a number there is either an error (PostgreSQL) or
    /// a silent numeric cast of `2026-…` to 2026 (MySQL).
    pub fn window_compare(
        &self,
        col: &str,
        storage: Storage,
        declared: &str,
    ) -> Result<(String, String, String), String> {
        let (lo, hi) = (self.placeholder(1), self.placeholder(2));
        match (self, storage) {
            (Dialect::Sqlite, _) => Ok((self.epoch_expr(col), lo, hi)),
            (Dialect::Postgres, Storage::Timestamp) => Ok((
                col.to_string(),
                format!("to_timestamp({lo})"),
                format!("to_timestamp({hi})"),
            )),
            (Dialect::MySql, Storage::Timestamp) => Ok((
                col.to_string(),
                format!("FROM_UNIXTIME({lo})"),
                format!("FROM_UNIXTIME({hi})"),
            )),
            (_, Storage::Integer) => Ok((col.to_string(), lo, hi)),
            _ => Err(format!(
                "is declared `{declared}`, which recon cannot compare with a window on {}; \
                 store it as {} or as an integer of Unix seconds",
                self.name(),
                match self {
                    Dialect::Postgres => "`timestamp with time zone` (or `timestamp` in UTC)",
                    _ => "`TIMESTAMP` or `DATETIME` (in UTC)",
                }
            )),
        }
    }

    /// A condition true for rows whose time column no window can hold:
    /// NULL, or (SQLite) a value that is not a timestamp.
    pub fn unplaceable(&self, col: &str) -> String {
        match self {
            Dialect::Sqlite => format!("{} IS NULL", self.epoch_expr(col)),
            _ => format!("{col} IS NULL"),
        }
    }

    /// A bound RFC 3339 / `YYYY-MM-DD HH:MM:SS` UTC text as a timestamp.
    pub fn timestamp_param(&self, placeholder: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({placeholder} AS TIMESTAMPTZ)"),
            Dialect::MySql => format!("CAST({placeholder} AS DATETIME)"),
            Dialect::Sqlite => placeholder.to_string(),
        }
    }

    /// A bound decimal text as an exact decimal.
    pub fn decimal_param(&self, placeholder: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({placeholder} AS NUMERIC)"),
            Dialect::MySql => format!("CAST({placeholder} AS DECIMAL(38,10))"),
            Dialect::Sqlite => placeholder.to_string(),
        }
    }

    /// A bound integer, typed where the server needs it.
    pub fn integer_param(&self, placeholder: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({placeholder} AS BIGINT)"),
            _ => placeholder.to_string(),
        }
    }

    /// A bound text, typed where the server needs it.
    pub fn text_param(&self, placeholder: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({placeholder} AS TEXT)"),
            _ => placeholder.to_string(),
        }
    }

    /// Most bind parameters one statement may carry.
    pub fn max_params(&self) -> usize {
        match self {
            Dialect::Postgres => 65_535,
            Dialect::MySql => 65_535,
            Dialect::Sqlite => 32_766,
        }
    }

    /// Maps an introspected column type to how values are stored.
    pub fn storage_of(&self, data_type: &str) -> Storage {
        let t = data_type.to_ascii_lowercase();
        match self {
            Dialect::Sqlite => {
                // SQLite's type affinity rules, plus dates by name.
                if t.contains("int") {
                    Storage::Integer
                } else if t.contains("dec") || t.contains("numeric") {
                    Storage::Decimal
                } else if t.contains("time") || t.contains("date") {
                    Storage::Timestamp
                } else {
                    Storage::Text
                }
            }
            _ => {
                if t.contains("int") {
                    Storage::Integer
                } else if t.contains("numeric") || t.contains("decimal") {
                    Storage::Decimal
                } else if t.contains("timestamp") || t.contains("datetime") || t == "date" {
                    Storage::Timestamp
                } else {
                    Storage::Text
                }
            }
        }
    }

    /// The statement that would make `key` unique, for the refusal message.
    pub fn unique_ddl(&self, table: &str, key: &str) -> String {
        let bare = table.rsplit('.').next().unwrap_or(table);
        let name = format!("{bare}_{key}_key");
        match self {
            Dialect::Postgres => format!(
                "ALTER TABLE {} ADD CONSTRAINT {} UNIQUE ({});",
                self.quote_table(table),
                self.quote(&name),
                self.quote(key)
            ),
            Dialect::MySql => format!(
                "ALTER TABLE {} ADD UNIQUE KEY {} ({});",
                self.quote_table(table),
                self.quote(&name),
                self.quote(key)
            ),
            Dialect::Sqlite => format!(
                "CREATE UNIQUE INDEX {} ON {} ({});",
                self.quote(&name),
                self.quote_table(table),
                self.quote(key)
            ),
        }
    }
}

/// Checks that a table or column name from config is a plain identifier
/// (letters, digits, underscores; a table may be `schema.table`), so that it
/// can be quoted and never interpolated raw.
pub fn validate_identifier(
    what: &str,
    name: &str,
    allow_schema: bool,
) -> Result<(), ConnectorError> {
    let parts: Vec<&str> = name.split('.').collect();
    let ok = (parts.len() == 1 || (allow_schema && parts.len() == 2))
        && parts.iter().all(|p| {
            let mut chars = p.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && p.len() <= 63
        });
    if ok {
        Ok(())
    } else {
        Err(ConnectorError::Config(format!(
            "{what} `{name}` is not a plain SQL identifier; use letters, digits and underscores{}",
            if allow_schema {
                " (optionally schema.table)"
            } else {
                ""
            }
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_validated_and_quoted() {
        assert!(validate_identifier("table", "public.payments", true).is_ok());
        assert!(validate_identifier("column", "stripe_charge_id", false).is_ok());
        for bad in [
            "",
            "1abc",
            "a-b",
            "x; DROP TABLE y",
            "a.b.c",
            "\"q\"",
            "a b",
        ] {
            let e = validate_identifier("table", bad, true)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a plain SQL identifier"), "{bad}: {e}");
        }
        assert!(validate_identifier("column", "s.col", false).is_err());
        assert_eq!(Dialect::MySql.quote_table("db.t"), "`db`.`t`");
        assert_eq!(Dialect::Postgres.quote_table("s.t"), "\"s\".\"t\"");
        assert_eq!(Dialect::Postgres.placeholder(3), "$3");
        assert_eq!(Dialect::Sqlite.placeholder(3), "?");
    }

    #[test]
    fn storage_follows_the_column_type() {
        assert_eq!(Dialect::Postgres.storage_of("bigint"), Storage::Integer);
        assert_eq!(Dialect::Postgres.storage_of("numeric"), Storage::Decimal);
        assert_eq!(
            Dialect::Postgres.storage_of("timestamp with time zone"),
            Storage::Timestamp
        );
        assert_eq!(Dialect::MySql.storage_of("datetime"), Storage::Timestamp);
        assert_eq!(Dialect::MySql.storage_of("varchar"), Storage::Text);
        assert_eq!(Dialect::Sqlite.storage_of("INTEGER"), Storage::Integer);
        assert_eq!(Dialect::Sqlite.storage_of("TIMESTAMP"), Storage::Timestamp);
        assert_eq!(Dialect::Sqlite.storage_of(""), Storage::Text);
    }

    #[test]
    fn unique_ddl_names_the_key() {
        assert_eq!(
            Dialect::Postgres.unique_ddl("payments", "stripe_charge_id"),
            "ALTER TABLE \"payments\" ADD CONSTRAINT \"payments_stripe_charge_id_key\" UNIQUE (\"stripe_charge_id\");"
        );
        assert!(Dialect::Sqlite
            .unique_ddl("payments", "k")
            .starts_with("CREATE UNIQUE INDEX"));
    }
}
