//! `type = "file"`: a CSV or JSON Lines export as a job's source, or as a
//! target that is compared against but never written.

use std::collections::BTreeMap;
use std::path::PathBuf;

use recon_core::{
    AmountFormat, BuildContext, ConnectorConfig, ConnectorError, Expand, Source, TargetRole,
};
use serde::Deserialize;

use crate::{FileSource, FileSpec};

/// The settings of a file endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    /// The file (`${VAR}` allowed).
    pub path: String,
    /// Column holding the external ID.
    pub key: String,
    /// Canonical field → column (or dotted JSON path); unlisted fields use their own name.
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
    /// Column holding amounts' currency (default `currency`).
    pub currency_column: Option<String>,
    /// `minor` (default) or `major`.
    pub amount_format: Option<AmountFormat>,
    /// Longest record (CSV row, JSON line) in bytes, default 64 MiB
    /// (`67108864`): a longer one stops the run (exit 2) naming the file
    /// and line, so that a file without line ends never takes its size in
    /// memory.
    pub max_record_bytes: Option<usize>,
}

impl FileSettings {
    /// The file and the columns of each schema field.
    pub fn spec(&self, cx: BuildContext<'_>) -> FileSpec {
        FileSpec {
            path: PathBuf::from(&self.path),
            key_column: self.key.clone(),
            columns: cx.names(&self.columns),
            currency_column: cx.currency(self.currency_column.as_ref(), "currency"),
            amount_format: self.amount_format.unwrap_or_default(),
            max_record_bytes: self
                .max_record_bytes
                .unwrap_or(crate::DEFAULT_MAX_RECORD_BYTES),
        }
    }
}

#[async_trait::async_trait]
impl ConnectorConfig for FileSettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        Some(("columns", &self.columns))
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.path = expand(&self.path, &format!("{side}.path"))?;
        Ok(())
    }

    fn target_role(&self) -> TargetRole {
        TargetRole::ReadOnly
    }

    async fn build_source(&self, cx: BuildContext<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(FileSource::new(
            self.spec(cx),
            cx.schema.clone(),
            cx.time_field,
        )))
    }

    async fn build_target(
        &self,
        _cx: BuildContext<'_>,
    ) -> Result<Box<dyn recon_core::Target>, ConnectorError> {
        Err(ConnectorError::NotIdempotent(format!(
            "{} is an export file and cannot be backfilled; set backfill.mode = \"off\" for this job or run with --dry-run",
            self.path
        )))
    }

    fn kind(&self) -> &'static str {
        "an export file"
    }

    fn type_name() -> &'static str {
        "file"
    }

    fn url_setting() -> Option<&'static str> {
        None
    }
}
