//! How a connector configures and builds itself (vector's
//! `SourceConfig::build` pattern): each connector crate has a
//! deserialisable config struct, with its defaults and validation, that
//! implements [`ConnectorConfig`]. The binary only lists the configs in its
//! registry, one line per connector, and never looks inside one.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::connector::{Source, Target};
use crate::error::ConnectorError;
use crate::record::Schema;

/// What a connector needs from the job to build itself.
#[derive(Clone, Copy, Debug)]
pub struct BuildContext<'a> {
    /// The job's canonical fields, in order; records are built in it.
    pub schema: &'a Schema,
    /// Schema index of the timestamp field windows filter on.
    pub time_field: Option<usize>,
    /// The job's name (`[jobs.NAME]`): part of what a connector derives
    /// deterministic request IDs from.
    pub job: &'a str,
    /// Where the connector may keep secrets that change between runs (a
    /// rotating OAuth refresh token): the job's state store. `None` where
    /// no store is at hand (unit tests).
    pub tokens: Option<&'a Arc<dyn TokenStore>>,
}

/// Secrets a connector keeps between runs, by name, in the job's state
/// store: an OAuth refresh token that the provider replaces on every
/// refresh (QuickBooks Online) must outlive the run that received it.
/// Values are opaque to the store; the connector encrypts them before
/// `put` (the store never holds a token in clear). Runs of one job are
/// serialised by the run lock, so one job never refreshes twice at once.
#[async_trait::async_trait]
pub trait TokenStore: Send + Sync {
    /// The value saved under `name`, if any.
    async fn get(&self, name: &str) -> Result<Option<String>, ConnectorError>;

    /// Saves `value` under `name`, replacing what was there, durably
    /// before it returns.
    async fn put(&self, name: &str, value: &str) -> Result<(), ConnectorError>;
}

impl std::fmt::Debug for dyn TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenStore")
    }
}

impl BuildContext<'_> {
    /// For each schema field, its native name: mapped in `map`, else its own.
    pub fn names(&self, map: &BTreeMap<String, String>) -> Vec<String> {
        self.schema
            .fields
            .iter()
            .map(|f| map.get(&f.name).cloned().unwrap_or_else(|| f.name.clone()))
            .collect()
    }

    /// The currency column or property of a job with a money field (the
    /// configured one, else `default`); `None` without money.
    pub fn currency(&self, configured: Option<&String>, default: &str) -> Option<String> {
        self.schema
            .money_field()
            .is_some()
            .then(|| configured.cloned().unwrap_or_else(|| default.to_string()))
    }
}

/// What an endpoint can be on a job's target side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetRole {
    /// A source of truth only (Stripe, Shopify): never a target.
    SourceOnly,
    /// Can be compared against but not written (an export file).
    ReadOnly,
    /// Can be compared against and backfilled idempotently.
    Writable,
}

/// Expands `${VAR}` placeholders in one setting: `(value, setting name)` to
/// the expanded value, or an error naming the setting and the variable.
pub type Expand<'a> = &'a dyn Fn(&str, &str) -> Result<String, ConnectorError>;

/// A connector's settings as a job writes them, and the factory that
/// builds the connector from them.
#[async_trait::async_trait]
pub trait ConnectorConfig: Send + Sync + std::fmt::Debug {
    /// The settings that map canonical fields to the system's own names
    /// (`columns`, `properties`, `fields`), for validation against the
    /// job's fields; `None` when the connector has no such map.
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)>;

    /// Expands `${VAR}` placeholders in the settings that allow them
    /// (secrets, paths, URLs). `side` is `source` or `target`, for messages.
    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError>;

    /// What this endpoint can be on the target side.
    fn target_role(&self) -> TargetRole;

    /// Builds the connector as a side that is read (and looked up).
    async fn build_source(&self, cx: BuildContext<'_>) -> Result<Box<dyn Source>, ConnectorError>;

    /// Builds the connector as a target that is read and written. The
    /// default refuses: the endpoint is a source of truth only.
    async fn build_target(&self, cx: BuildContext<'_>) -> Result<Box<dyn Target>, ConnectorError> {
        let _ = cx;
        Err(ConnectorError::Config(format!(
            "{} is a source of truth only and cannot be written; use it as the job's source",
            self.kind()
        )))
    }

    /// A short name of the connector for messages (`Stripe`, `a SQL table`).
    fn kind(&self) -> &'static str;

    /// The `type = "…"` a job selects this connector by (`stripe`, `sql`).
    /// The registry lists it, for messages, and its test checks it against
    /// the tag the config is parsed with.
    fn type_name() -> &'static str
    where
        Self: Sized;

    /// The setting that holds the address of the system the connector
    /// calls (`base_url`, `shop_url`), named when the system cannot be
    /// reached; `None` for an endpoint without one (a local file).
    fn url_setting() -> Option<&'static str>
    where
        Self: Sized;
}
