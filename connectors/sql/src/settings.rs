//! `type = "sql"`: a PostgreSQL, MySQL/MariaDB or SQLite table as a job's
//! source or target.

use std::collections::BTreeMap;

use recon_core::{
    AmountFormat, BuildContext, ConnectorConfig, ConnectorError, Expand, Secret, Source, Target,
    TargetRole,
};
use serde::Deserialize;

use crate::{CurrencyCase, SqlTable, SqlTableConfig, TimestampText};

/// The settings of a SQL table endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlSettings {
    /// Connection URL (`${VAR}` allowed; never logged).
    pub url: Secret,
    /// Table, optionally `schema.table`.
    pub table: String,
    /// Column holding the external ID.
    pub key: String,
    /// Canonical field → column; unlisted fields use their own name.
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
    /// Column holding amounts' currency (default `currency`).
    pub currency_column: Option<String>,
    /// `minor` or `major`; by default decided by the column type.
    pub amount_format: Option<AmountFormat>,
    /// Pool size (default 4).
    pub max_connections: Option<u32>,
    /// Rows per multi-row INSERT (default 1000).
    pub write_batch: Option<usize>,
    /// Spelling of backfilled currency codes: `upper` or `lower`
    /// (default: as the table's existing rows spell them, else upper).
    pub currency_case: Option<String>,
    /// Text form of backfilled timestamps in text columns: `rfc3339`
    /// (`2025-11-29T19:44:01Z`), `rfc3339_offset` (`…+00:00`), `sql`
    /// (`2025-11-29 19:44:01`) or `unix` (default: as the table's
    /// existing rows hold them).
    pub timestamp_format: Option<String>,
}

impl SqlSettings {
    /// The connection config for a job's fields.
    pub fn table_config(&self, cx: BuildContext<'_>) -> Result<SqlTableConfig, ConnectorError> {
        let mut cfg = SqlTableConfig::new(
            self.url.clone(),
            &self.table,
            &self.key,
            cx.names(&self.columns),
        );
        cfg.currency_column = cx.currency(self.currency_column.as_ref(), "currency");
        cfg.amount_format = self.amount_format;
        cfg.time_field = cx.time_field;
        if let Some(n) = self.max_connections {
            cfg.max_connections = n;
        }
        if let Some(n) = self.write_batch {
            if n == 0 {
                return Err(ConnectorError::Config(
                    "SQL write_batch = 0: use a number of rows per INSERT, e.g. 1000".into(),
                ));
            }
            cfg.write_batch = n;
        }
        cfg.currency_case = match self.currency_case.as_deref() {
            None => None,
            Some("upper") => Some(CurrencyCase::Upper),
            Some("lower") => Some(CurrencyCase::Lower),
            Some(other) => {
                return Err(ConnectorError::Config(format!(
                    "SQL currency_case = \"{other}\": expected \"upper\" or \"lower\""
                )))
            }
        };
        cfg.timestamp_format = match self.timestamp_format.as_deref() {
            None => None,
            Some(name) => Some(TimestampText::parse_setting(name).ok_or_else(|| {
                ConnectorError::Config(format!(
                    "SQL timestamp_format = \"{name}\": expected \"rfc3339\", \"rfc3339_offset\", \"sql\" or \"unix\""
                ))
            })?),
        };
        Ok(cfg)
    }
}

#[async_trait::async_trait]
impl ConnectorConfig for SqlSettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        Some(("columns", &self.columns))
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.url = Secret::new(expand(self.url.expose(), &format!("{side}.url"))?);
        Ok(())
    }

    fn target_role(&self) -> TargetRole {
        TargetRole::Writable
    }

    async fn build_source(&self, cx: BuildContext<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(
            SqlTable::connect(self.table_config(cx)?, cx.schema).await?,
        ))
    }

    async fn build_target(&self, cx: BuildContext<'_>) -> Result<Box<dyn Target>, ConnectorError> {
        Ok(Box::new(
            SqlTable::connect(self.table_config(cx)?, cx.schema).await?,
        ))
    }

    fn kind(&self) -> &'static str {
        "a SQL table"
    }

    fn type_name() -> &'static str {
        "sql"
    }

    fn url_setting() -> Option<&'static str> {
        Some("url")
    }
}
