//! `recon run`: one reconciliation run of a configured job. Read both
//! sides over the window, diff, confirm edge cases by key, report, and
//! backfill gaps idempotently (or, with `--dry-run`, only plan it).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::TryStreamExt;
use jiff::{SignedDuration, Timestamp};
use recon_core::{
    format_timestamp, Field, FieldKind, Record, Schema, Target, Value, Window, WriteMode,
    WriteOutcome,
};
use serde_json::json;

use crate::cli::RunArgs;
use crate::config::{self, BackfillMode, EndpointConfig, ResolvedJob, ToleranceSetting};
use crate::diff::{
    equal, DiffEngine, DiffOutcome, DiffSpec, FieldDiff, Mismatch, RecordBatch, Tolerance,
};
use crate::plan::{Action, PlanLine, PLAN_FILE};
use crate::report::{write_diff_reports, BackfillRow, ReportDir, ResolvedRow, RunExtras, RunMeta};
use crate::state::{Class, ItemStatus, PlanRecord, RunLock, StateError, StateStore};
use crate::window::{parse_duration, WindowSpec};
use crate::Status;

/// How long a SQLite run lock may go without a heartbeat before another
/// run may take it over (the holder died without releasing it).
const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(600);

/// Environment variable of the test-only fault hook: abort the process
/// after this many backfill items were written, before they are recorded
/// as applied (the worst moment to crash).
pub const FAULT_ABORT_AFTER: &str = "RECON_FAULT_ABORT_AFTER_ITEMS";

/// A run validated from its arguments and config, before any connection.
pub struct RunPlan {
    /// The job.
    pub job: ResolvedJob,
    /// The canonical fields.
    pub spec: DiffSpec,
    /// Schema index of the field windows filter on.
    pub time_field: Option<usize>,
    /// The window as asked for.
    pub window: WindowSpec,
    /// The business time zone.
    pub tz: jiff::tz::TimeZone,
    /// Reach back before the window's start.
    pub lookback: SignedDuration,
    /// Young source records are pending for this long.
    pub grace: SignedDuration,
    /// Report and plan only.
    pub dry_run: bool,
    /// Report folder override.
    pub out: Option<PathBuf>,
    /// Safety limit: records.
    pub max_records: u64,
    /// Safety limit: share of the window's source records.
    pub max_ratio: f64,
}

fn kind_of(job: &config::JobConfig, name: &str) -> FieldKind {
    job.fields.get(name).copied().unwrap_or(FieldKind::Text)
}

impl RunPlan {
    /// Loads the config and checks everything that needs no connection.
    pub fn from_args(args: &RunArgs) -> Result<RunPlan> {
        let file = config::load(&args.config)?;
        let job = file.job(args.job.as_deref())?;
        let name = job.name.clone();
        let j = &job.job;
        // Fields: compared ones in their order, then the others declared.
        let mut names: Vec<String> = Vec::new();
        for c in &j.compare {
            if names.contains(c) {
                bail!("job `{name}`: `{c}` is listed twice in compare");
            }
            names.push(c.clone());
        }
        for f in j.fields.keys() {
            if !names.contains(f) {
                names.push(f.clone());
            }
        }
        let time_name = match &j.time_field {
            Some(t) => Some(t.clone()),
            None if j.fields.get("created") == Some(&FieldKind::Timestamp) => {
                Some("created".into())
            }
            None => None,
        };
        if let Some(t) = &time_name {
            if kind_of(j, t) != FieldKind::Timestamp {
                bail!("job `{name}`: time_field `{t}` must be declared as a timestamp in fields, e.g. fields = {{ {t} = \"timestamp\" }}");
            }
            if !names.contains(t) {
                names.push(t.clone());
            }
        }
        let fields: Vec<Field> = names
            .iter()
            .map(|n| Field {
                name: n.clone(),
                kind: kind_of(j, n),
                compared: j.compare.contains(n),
            })
            .collect();
        if fields.iter().filter(|f| f.kind == FieldKind::Money).count() > 1 {
            bail!("job `{name}`: only one money field is supported per job");
        }
        let schema = Schema { fields };
        let mut tolerances = vec![None; schema.fields.len()];
        for (field, tol) in &j.tolerances {
            let Some(i) = schema.index_of(field) else {
                bail!("job `{name}`: tolerance for `{field}`, which is not a compared field");
            };
            let kind = schema.fields[i].kind;
            tolerances[i] = Some(match (tol, kind) {
                (ToleranceSetting::Units(n), FieldKind::Money | FieldKind::Integer) if *n >= 0 => {
                    Tolerance::Units(*n)
                }
                (ToleranceSetting::Duration(d), FieldKind::Timestamp) => {
                    let d = parse_duration(d).map_err(|e| anyhow!("job `{name}`: tolerance `{field}`: {e}"))?;
                    Tolerance::Seconds(d.as_secs())
                }
                _ => bail!(
                    "job `{name}`: tolerance `{field}` does not fit a {kind} field; use a whole number of minor units for money and integers, a duration such as \"5s\" for timestamps"
                ),
            });
        }
        for (side, endpoint) in [("source", &j.source), ("target", &j.target)] {
            let columns = match endpoint {
                EndpointConfig::File { columns, .. } | EndpointConfig::Sql { columns, .. } => {
                    columns
                }
                EndpointConfig::Stripe { fields, .. } => fields,
                EndpointConfig::Hubspot { properties, .. } => properties,
                EndpointConfig::Shopify { .. } => &std::collections::BTreeMap::new(),
            };
            for c in columns.keys() {
                if schema.index_of(c).is_none() {
                    bail!(
                        "job `{name}`: {side}.columns maps `{c}`, which is not a field of the job; fields are: {}",
                        names.join(", ")
                    );
                }
            }
        }
        let window_text = args.window.clone().unwrap_or_else(|| j.window.clone());
        let window: WindowSpec = window_text
            .parse()
            .map_err(|e| anyhow!("job `{name}`: {e}"))?;
        let tz = jiff::tz::TimeZone::get(&job.timezone).map_err(|e| {
            anyhow!("job `{name}`: unknown time zone `{}` ({e}); use an IANA name such as America/New_York", job.timezone)
        })?;
        let duration = |v: &Option<String>, what: &str| -> Result<SignedDuration> {
            match v {
                Some(s) => parse_duration(s).map_err(|e| anyhow!("job `{name}`: {what}: {e}")),
                None => Ok(SignedDuration::ZERO),
            }
        };
        let lookback = duration(&j.lookback, "lookback")?;
        let grace = duration(&j.grace, "grace")?;
        if matches!(
            j.target,
            EndpointConfig::Stripe { .. } | EndpointConfig::Shopify { .. }
        ) {
            bail!("job `{name}`: Stripe and Shopify are sources of truth only; use them as the job's source");
        }
        if matches!(j.target, EndpointConfig::File { .. })
            && j.backfill.mode != BackfillMode::Off
            && !args.dry_run
        {
            bail!("job `{name}`: the target is an export file and cannot be backfilled; set backfill.mode = \"off\" or run with --dry-run");
        }
        let time_field = time_name.as_ref().and_then(|t| schema.index_of(t));
        let max_records = args.max_records.unwrap_or(j.backfill.max_records);
        let max_ratio = args.max_ratio.unwrap_or(j.backfill.max_ratio);
        Ok(RunPlan {
            spec: DiffSpec { schema, tolerances },
            time_field,
            window,
            tz,
            lookback,
            grace,
            dry_run: args.dry_run,
            out: args.out.clone(),
            max_records,
            max_ratio,
            job,
        })
    }
}

pub(crate) async fn connect(
    endpoint: &EndpointConfig,
    schema: &Schema,
    time_field: Option<usize>,
) -> Result<Box<dyn Target>> {
    let column = |columns: &std::collections::BTreeMap<String, String>, f: &str| {
        columns.get(f).cloned().unwrap_or_else(|| f.to_string())
    };
    let has_money = schema.money_field().is_some();
    Ok(match endpoint {
        EndpointConfig::File { .. } => Box::new(recon_file::FileSource {
            spec: file_spec(endpoint, schema).expect("a file endpoint"),
            time_field,
        }),
        EndpointConfig::Sql {
            url,
            table,
            key,
            columns,
            currency_column,
            amount_format,
            max_connections,
            write_batch,
            currency_case,
            timestamp_format,
        } => {
            let mut cfg = recon_sql::SqlTableConfig::new(
                url.clone(),
                table,
                key,
                schema
                    .fields
                    .iter()
                    .map(|f| column(columns, &f.name))
                    .collect(),
            );
            cfg.currency_column =
                has_money.then(|| currency_column.clone().unwrap_or_else(|| "currency".into()));
            cfg.amount_format = *amount_format;
            cfg.time_field = time_field;
            if let Some(n) = max_connections {
                cfg.max_connections = *n;
            }
            if let Some(n) = write_batch {
                cfg.write_batch = *n;
            }
            cfg.currency_case = match currency_case.as_deref() {
                None => None,
                Some("upper") => Some(recon_sql::CurrencyCase::Upper),
                Some("lower") => Some(recon_sql::CurrencyCase::Lower),
                Some(other) => {
                    bail!("SQL currency_case = \"{other}\": expected \"upper\" or \"lower\"")
                }
            };
            cfg.timestamp_format = match timestamp_format.as_deref() {
                None => None,
                Some(name) => Some(recon_sql::TimestampText::parse_setting(name).ok_or_else(
                    || anyhow!("SQL timestamp_format = \"{name}\": expected \"rfc3339\", \"rfc3339_offset\", \"sql\" or \"unix\""),
                )?),
            };
            Box::new(recon_sql::SqlTable::connect(cfg, schema).await?)
        }
        EndpointConfig::Shopify {
            shop_url,
            token,
            api_version,
            key,
            time_field: shop_time,
            bulk,
            bulk_threshold,
            page_size,
            rate_limit_patience,
        } => {
            let mut cfg = recon_shopify::ShopifyConfig::new(shop_url, token.clone());
            if let Some(p) = rate_limit_patience {
                cfg.rate_limit_patience = patience(p, "Shopify")?;
            }
            if let Some(v) = api_version {
                cfg.api_version = v.clone();
            }
            if let Some(k) = key {
                cfg.key = *k;
            }
            if let Some(t) = shop_time {
                cfg.time_field = *t;
            }
            cfg.bulk = match bulk.as_deref().unwrap_or("auto") {
                "auto" => recon_shopify::BulkMode::Auto(bulk_threshold.unwrap_or(25_000)),
                "always" => recon_shopify::BulkMode::Always,
                "never" => recon_shopify::BulkMode::Never,
                other => bail!("Shopify bulk = \"{other}\": expected auto, always or never"),
            };
            if let Some(p) = page_size {
                cfg.page_size = *p;
            }
            Box::new(SourceOnly(Box::new(recon_shopify::ShopifySource::new(
                cfg, schema,
            )?)))
        }
        EndpointConfig::Hubspot { .. } => {
            Box::new(hubspot(endpoint, schema, time_field)?.expect("a HubSpot endpoint"))
        }
        EndpointConfig::Stripe {
            api_key,
            object,
            base_url,
            api_version,
            requests_per_second,
            concurrency,
            rate_limit_patience,
            fields,
        } => {
            let mut cfg = recon_stripe::StripeConfig::new(api_key.clone(), *object);
            if let Some(p) = rate_limit_patience {
                let d = crate::window::parse_duration(p)
                    .with_context(|| format!("Stripe rate_limit_patience = \"{p}\""))?;
                cfg.rate_limit_patience = Some(d.unsigned_abs());
            }
            if let Some(u) = base_url {
                cfg.base_url = u.clone();
            }
            if let Some(v) = api_version {
                cfg.api_version = v.clone();
            }
            cfg.requests_per_second = *requests_per_second;
            if let Some(c) = concurrency {
                cfg.concurrency = *c;
            }
            cfg.field_paths = schema
                .fields
                .iter()
                .map(|f| fields.get(&f.name).cloned())
                .collect();
            Box::new(SourceOnly(Box::new(recon_stripe::StripeSource::new(
                cfg, schema,
            )?)))
        }
    })
}

/// The file and columns of a file endpoint; `None` for other endpoints.
pub(crate) fn file_spec(
    endpoint: &EndpointConfig,
    schema: &Schema,
) -> Option<recon_file::FileSpec> {
    let EndpointConfig::File {
        path,
        key,
        columns,
        currency_column,
        amount_format,
    } = endpoint
    else {
        return None;
    };
    let has_money = schema.money_field().is_some();
    Some(recon_file::FileSpec {
        path: PathBuf::from(path),
        key_column: key.clone(),
        columns: schema
            .fields
            .iter()
            .map(|f| {
                columns
                    .get(&f.name)
                    .cloned()
                    .unwrap_or_else(|| f.name.clone())
            })
            .collect(),
        currency_column: has_money
            .then(|| currency_column.clone().unwrap_or_else(|| "currency".into())),
        amount_format: amount_format.unwrap_or_default(),
    })
}

/// A `rate_limit_patience` setting (`"15m"`, `"1h"`) as a duration.
fn patience(text: &str, provider: &str) -> Result<std::time::Duration> {
    let d = crate::window::parse_duration(text)
        .map_err(|e| anyhow!("{provider} rate_limit_patience = \"{text}\": {e}"))?;
    std::time::Duration::try_from(d)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow!("{provider} rate_limit_patience = \"{text}\": must be longer than zero, e.g. \"15m\""))
}

/// HubSpot objects for a job.
fn hubspot(
    endpoint: &EndpointConfig,
    schema: &Schema,
    time_field: Option<usize>,
) -> Result<Option<recon_hubspot::HubSpotObjects>> {
    let EndpointConfig::Hubspot {
        token,
        object_type,
        id_property,
        properties,
        currency_property,
        date_property,
        amount_format,
        base_url,
        requests_per_10s,
        search_per_second,
        rate_limit_patience,
    } = endpoint
    else {
        return Ok(None);
    };
    let mut cfg = recon_hubspot::HubSpotConfig::new(
        token.clone(),
        object_type,
        id_property,
        schema
            .fields
            .iter()
            .map(|f| {
                properties
                    .get(&f.name)
                    .cloned()
                    .unwrap_or_else(|| f.name.clone())
            })
            .collect(),
    );
    cfg.currency_property = currency_property.clone();
    if schema.money_field().is_some() && cfg.currency_property.is_none() {
        cfg.currency_property = Some("deal_currency_code".into());
    }
    // Windows filter on the property that holds the job's time field (the
    // source's creation time), unless another date property is named.
    match (date_property, time_field) {
        (Some(d), _) => cfg.date_property = d.clone(),
        (None, Some(t)) => cfg.date_property = cfg.properties[t].clone(),
        (None, None) => {}
    }
    if let Some(a) = amount_format {
        cfg.amount_format = *a;
    }
    if let Some(u) = base_url {
        cfg.base_url = u.clone();
    }
    if let Some(n) = requests_per_10s {
        cfg.requests_per_10s = *n;
    }
    if let Some(p) = rate_limit_patience {
        cfg.rate_limit_patience = patience(p, "HubSpot")?;
    }
    if let Some(n) = search_per_second {
        cfg.search_per_second = *n;
    }
    Ok(Some(recon_hubspot::HubSpotObjects::new(cfg, schema)?))
}

/// A source that cannot be written to, behind the `Target` interface the
/// run uses for both sides.
struct SourceOnly(Box<dyn recon_core::Source>);

#[async_trait::async_trait]
impl recon_core::Source for SourceOnly {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn read(
        &self,
        schema: &Schema,
        window: Window,
    ) -> futures_core::stream::BoxStream<'_, Result<recon_core::Page, recon_core::ConnectorError>>
    {
        self.0.read(schema, window)
    }
    async fn lookup(
        &self,
        schema: &Schema,
        keys: &[String],
    ) -> Result<Vec<Record>, recon_core::ConnectorError> {
        self.0.lookup(schema, keys).await
    }
}

#[async_trait::async_trait]
impl Target for SourceOnly {
    async fn check_unique_key(&self) -> Result<(), recon_core::ConnectorError> {
        Err(recon_core::ConnectorError::NotIdempotent(format!(
            "{} is a source only",
            self.0.describe()
        )))
    }
    async fn write(
        &self,
        _schema: &Schema,
        _records: &[Record],
        _mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, recon_core::ConnectorError> {
        Err(recon_core::ConnectorError::NotIdempotent(format!(
            "{} is a source only",
            self.0.describe()
        )))
    }
}

/// Reads a whole side into the engine, page by page.
/// Feeds one side to the engine. A file side goes through `recon diff`'s
/// two-stage pipeline (no owned records, no pages); other sides stream
/// pages, each encoded as one batch.
async fn feed(
    endpoint: &EndpointConfig,
    side: &dyn Target,
    plan: &RunPlan,
    window: Window,
    engine: &mut DiffEngine,
    source_side: bool,
) -> Result<()> {
    let schema = &plan.spec.schema;
    if let Some(spec) = file_spec(endpoint, schema) {
        let reader = recon_file::FileReader::open(spec, schema)?;
        let time_field = plan.time_field;
        let in_window = move |values: &[recon_core::ValueRef<'_>]| match time_field {
            Some(t) => {
                matches!(values.get(t), Some(recon_core::ValueRef::Timestamp(ts)) if window.contains(*ts))
            }
            None => true,
        };
        let feed =
            || crate::commands::diff::feed_file(engine, reader, source_side, Some(&in_window));
        // The reader thread and this one work at full speed; other tasks
        // (the lock's heartbeat) move to another worker meanwhile.
        return match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(feed),
            _ => feed(),
        };
    }
    let mut pages = side.read(schema, window);
    // A page becomes one encoded batch: the engine's batch path, without a
    // per-record call.
    let mut batch = RecordBatch::new(engine.spec());
    while let Some(page) = pages.try_next().await? {
        batch.clear();
        let mut values = Vec::with_capacity(schema.fields.len());
        for r in &page.records {
            values.clear();
            values.extend(r.values.iter().map(Value::as_ref));
            batch.push(&r.key, &values)?;
        }
        if source_side {
            engine.add_source_batch(&batch)?;
        } else {
            engine.add_target_batch(&batch);
        }
    }
    Ok(())
}

fn compare_pair(spec: &DiffSpec, source: &Record, target: &Record) -> Vec<FieldDiff> {
    spec.schema
        .fields
        .iter()
        .enumerate()
        .filter(|(i, f)| {
            f.compared
                && !equal(
                    source.values[*i].as_ref(),
                    target.values[*i].as_ref(),
                    f.kind,
                    spec.tolerances[*i],
                )
        })
        .map(|(i, _)| FieldDiff {
            field: i,
            source: source.values[i].clone(),
            target: target.values[i].clone(),
        })
        .collect()
}

/// Records of either side that no window can hold (time field empty, NULL
/// or not a timestamp). With `unplaced = "fail"` any such record stops the
/// run (exit 2) before anything is written.
async fn unplaced_records(
    plan: &RunPlan,
    source: &dyn Target,
    target: &dyn Target,
) -> Result<Vec<crate::report::UnplacedRow>> {
    let job = &plan.job.name;
    let schema = &plan.spec.schema;
    let mut rows = Vec::new();
    for (side, endpoint) in [("source", source), ("target", target)] {
        let found = endpoint.unplaced(schema).await.with_context(|| {
            format!("job `{job}`: listing the {side}'s records that have no time")
        })?;
        rows.extend(found.into_iter().map(|record| crate::report::UnplacedRow {
            side: side.to_string(),
            record,
        }));
    }
    if let (Some(first), config::UnplacedPolicy::Fail) = (rows.first(), plan.job.job.unplaced) {
        bail!(
            "job `{job}`: {} record(s) have no usable time and belong to no window (first: {} `{}`, field `{}` {}); \
             fix them at their side, or set unplaced = \"report\" to list them in unplaced.csv",
            rows.len(),
            first.side,
            first.record.key,
            first.record.field,
            first.record.reason
        );
    }
    Ok(rows)
}

/// A side whose window read returned nothing although key lookups found
/// the other side's records in it: its time column is probably compared
/// wrongly, so the run must not look clean. One note per such side, also
/// printed as a warning.
fn empty_read_notes(
    outcome: &DiffOutcome,
    gaps_read: usize,
    orphans_read: usize,
    source: &dyn Target,
    target: &dyn Target,
) -> Vec<String> {
    let mut notes = Vec::new();
    let found_in_target = gaps_read - outcome.gaps.len();
    let found_in_source = orphans_read - outcome.orphans.len();
    for (rows, found, side, other) in [
        (outcome.target_rows, found_in_target, "target", "source"),
        (outcome.source_rows, found_in_source, "source", "target"),
    ] {
        if rows == 0 && found > 0 {
            let what = if side == "target" {
                target.describe()
            } else {
                source.describe()
            };
            notes.push(format!(
                "warning: the {side}'s window read returned 0 records, yet {found} of the {other}'s records were found in the {side} by key ({what}); \
                 check that the {side}'s time column holds the records' times and is compared in UTC"
            ));
        }
    }
    for n in &notes {
        eprintln!("{n}");
    }
    notes
}

/// Before a gap is reported the target is asked for it by key, and before
/// an orphan is reported the source is: a record at the window's edge may
/// sit on the other side of midnight in the other system.
async fn confirm_edges(
    outcome: &mut DiffOutcome,
    plan: &RunPlan,
    source: &dyn Target,
    target: &dyn Target,
) -> Result<u64> {
    let spec = &plan.spec;
    let schema = &spec.schema;
    let mut dismissed = 0;
    // A side read whole (a file or table with no time field to window on)
    // holds nothing a lookup could add: asking it again would only read it
    // twice.
    let whole = |e: &EndpointConfig| {
        plan.time_field.is_none()
            && matches!(e, EndpointConfig::File { .. } | EndpointConfig::Sql { .. })
    };
    let found: HashMap<String, Record> = if whole(&plan.job.job.target) {
        HashMap::new()
    } else {
        let gap_keys: Vec<String> = outcome.gaps.iter().map(|r| r.key.clone()).collect();
        target
            .lookup(schema, &gap_keys)
            .await
            .context("confirming gaps by key in the target")?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect()
    };
    let found_in_source: HashMap<String, Record> = if whole(&plan.job.job.source) {
        HashMap::new()
    } else {
        let orphan_keys: Vec<String> = outcome.orphans.iter().map(|r| r.key.clone()).collect();
        source
            .lookup(schema, &orphan_keys)
            .await
            .context("confirming orphans by key in the source")?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect()
    };
    let mut settle = |s: &Record, t: &Record, mismatches: &mut Vec<Mismatch>, matched: &mut u64| {
        let diffs = compare_pair(spec, s, t);
        if diffs.is_empty() {
            *matched += 1;
        } else {
            mismatches.push(Mismatch {
                key: s.key.clone(),
                fields: diffs,
            });
        }
        dismissed += 1;
    };
    // Lists stay in their compact form unless a lookup found something.
    if !found.is_empty() {
        let mut kept = Vec::new();
        for g in std::mem::take(&mut outcome.gaps) {
            match found.get(&g.key) {
                Some(t) => settle(&g, t, &mut outcome.mismatches, &mut outcome.matched),
                None => kept.push(g),
            }
        }
        outcome.gaps = kept.into();
    }
    if !found_in_source.is_empty() {
        let mut kept = Vec::new();
        for o in std::mem::take(&mut outcome.orphans) {
            match found_in_source.get(&o.key) {
                Some(s) => settle(s, &o, &mut outcome.mismatches, &mut outcome.matched),
                None => kept.push(o),
            }
        }
        outcome.orphans = kept.into();
    }
    outcome.mismatches.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(dismissed)
}

/// The `recon run` command.
pub fn run(args: RunArgs) -> Result<Status> {
    let plan = RunPlan::from_args(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(execute(plan))
}

/// Runs a plan end to end; returns the exit status.
pub async fn execute(plan: RunPlan) -> Result<Status> {
    let started = Instant::now();
    let now = Timestamp::now();
    let job = plan.job.name.clone();
    let state = StateStore::open(plan.job.state.expose()).await?;
    let lock = lock(&state, &job).await?;
    let last = state.last_success_end(&job).await?;
    let asked = plan
        .window
        .resolve(now, &plan.tz, last)
        .map_err(|e| anyhow!("job `{job}`: {e}"))?;
    // A dry run may look at a future window (nothing it records counts for
    // `since-last-success`); a run that writes may not.
    if asked.start > now && !plan.dry_run {
        lock.release().await?;
        bail!(
            "job `{job}`: the window {}..{} has not begun yet; nothing can be reconciled before it starts. Check --window",
            format_timestamp(asked.start),
            format_timestamp(asked.end)
        );
    }
    // The part of the window after now was not read: a later
    // `since-last-success` must start where this run's reading ended.
    let recorded = Window {
        start: asked.start,
        end: asked.end.min(now).max(asked.start),
    };
    let (run_id, lock) = start_run(&state, lock, &job, recorded, plan.dry_run).await?;
    let ledger = Ledger {
        state: &state,
        lock: &lock,
        plan_id: &run_id,
        job: &job,
    };
    let result = run_locked(&plan, &ledger, asked, now, started).await;
    let (status, counts, dir, error) = match &result {
        Ok((status, counts, dir)) => (
            match status {
                Status::Clean => "clean",
                Status::Discrepancies => "discrepancies",
                Status::Trouble => "failed",
            },
            counts.clone(),
            Some(dir.display().to_string()),
            None,
        ),
        Err(e) => ("failed", json!(null), None, Some(format!("{e:#}"))),
    };
    state
        .finish_run(&run_id, status, &counts, dir.as_deref(), error.as_deref())
        .await?;
    lock.release().await?;
    let (status, _, dir) = result?;
    println!("reports: {}", dir.display());
    // Trouble here is the safety limit: reports and plan written, nothing else.
    Ok(status)
}

async fn run_locked(
    plan: &RunPlan,
    ledger: &Ledger<'_>,
    asked: Window,
    now: Timestamp,
    started: Instant,
) -> Result<(Status, serde_json::Value, PathBuf)> {
    let (state, run_id) = (ledger.state, ledger.plan_id);
    let job = &plan.job.name;
    let schema = &plan.spec.schema;
    // The report destination is checked (and its staging folder made)
    // before anything is read or written.
    let dir_path = match &plan.out {
        Some(p) => p.clone(),
        None => plan.job.reports.join(job).join(run_id),
    };
    let mut dir = ReportDir::prepare(&dir_path)?;
    let window = Window {
        start: asked.start.checked_sub(plan.lookback).map_err(|_| {
            anyhow!(
                "job `{job}`: lookback reaches before the earliest supported instant \
                 from the window's start {}; shorten lookback",
                asked.start
            )
        })?,
        end: asked.end,
    };
    let source = connect(&plan.job.job.source, schema, plan.time_field)
        .await
        .with_context(|| format!("job `{job}`: source"))?;
    let target = connect(&plan.job.job.target, schema, plan.time_field)
        .await
        .with_context(|| format!("job `{job}`: target"))?;
    let mode = plan.job.job.backfill.mode;
    if mode != BackfillMode::Off && !plan.dry_run {
        target.check_unique_key().await?;
    }

    let mut engine = DiffEngine::new(plan.spec.clone());
    feed(
        &plan.job.job.source,
        source.as_ref(),
        plan,
        window,
        &mut engine,
        true,
    )
    .await
    .with_context(|| format!("job `{job}`: reading the source {}", source.describe()))?;
    let source_ms = started.elapsed().as_millis();
    feed(
        &plan.job.job.target,
        target.as_ref(),
        plan,
        window,
        &mut engine,
        false,
    )
    .await
    .with_context(|| format!("job `{job}`: reading the target {}", target.describe()))?;
    let target_ms = started.elapsed().as_millis() - source_ms;
    let unplaced = unplaced_records(plan, source.as_ref(), target.as_ref()).await?;
    let mut outcome = engine.finish();
    let (gaps_read, orphans_read) = (outcome.gaps.len(), outcome.orphans.len());
    let confirmed = confirm_edges(&mut outcome, plan, source.as_ref(), target.as_ref()).await?;
    let window_notes = empty_read_notes(
        &outcome,
        gaps_read,
        orphans_read,
        source.as_ref(),
        target.as_ref(),
    );

    // Young source records are in flight, not missing.
    let mut pending = Vec::new();
    if let (Some(t), false) = (plan.time_field, plan.grace.is_zero()) {
        let cutoff = now.checked_sub(plan.grace).map_err(|_| {
            anyhow!(
                "job `{job}`: grace reaches before the earliest supported instant; shorten grace"
            )
        })?;
        let (young, old): (Vec<Record>, Vec<Record>) = std::mem::take(&mut outcome.gaps)
            .into_iter()
            .partition(|r| matches!(r.values[t], Value::Timestamp(ts) if ts >= cutoff));
        outcome.gaps = old.into();
        pending = young;
    }

    // History: new, persisting, resolved since the previous run.
    let mut current: Vec<(Class, String)> = Vec::new();
    current.extend(outcome.gaps.iter().map(|r| (Class::Gap, r.key.clone())));
    current.extend(
        outcome
            .orphans
            .iter()
            .map(|r| (Class::Orphan, r.key.clone())),
    );
    current.extend(
        outcome
            .mismatches
            .iter()
            .map(|m| (Class::Mismatch, m.key.clone())),
    );
    current.extend(
        outcome
            .duplicates
            .iter()
            .map(|d| (Class::Duplicate, d.key.clone())),
    );
    // The backfill plan: gaps, and mismatches when repairing.
    let mismatch_keys: HashSet<&str> = outcome.mismatches.iter().map(|m| m.key.as_str()).collect();
    let mut items: Vec<(Record, WriteMode)> = Vec::new();
    if mode != BackfillMode::Off {
        items.extend(
            outcome
                .gaps
                .iter()
                .map(|r| (r.into_owned(), WriteMode::Insert)),
        );
    }
    if mode == BackfillMode::Upsert && !mismatch_keys.is_empty() {
        let keys: Vec<String> = mismatch_keys.iter().map(|k| k.to_string()).collect();
        for r in source.lookup(schema, &keys).await? {
            items.push((r, WriteMode::Upsert));
        }
    }
    drop(mismatch_keys);
    // Built only when plan.jsonl is written (dry run, safety limit).
    let plan_json = || -> Vec<serde_json::Value> {
        items
            .iter()
            .map(|(r, m)| PlanLine::new(run_id, job, asked, Action::from(*m), schema, r).to_json())
            .collect()
    };

    let ratio = items.len() as f64 / (outcome.source_records.max(1)) as f64;
    let over_count = items.len() as u64 > plan.max_records;
    let over_ratio = outcome.source_records > 0 && ratio > plan.max_ratio;
    let mut trouble = None;
    let mut plan_lines = None;
    let write = !(plan.dry_run || items.is_empty() || over_count || over_ratio);
    if plan.dry_run || items.is_empty() {
        plan_lines = Some(plan_json());
    } else if over_count || over_ratio {
        let why = if over_count {
            format!(
                "{} records exceed backfill.max_records = {} by {}",
                items.len(),
                plan.max_records,
                items.len() as u64 - plan.max_records
            )
        } else {
            format!(
                "{} records are {:.1}% of the window's {} source records, above backfill.max_ratio = {:.1}%",
                items.len(),
                ratio * 100.0,
                outcome.source_records,
                plan.max_ratio * 100.0
            )
        };
        // The suggested ratio is rounded UP to 3 decimals (exact integer
        // arithmetic), so that the suggested rerun passes: 103 of 2000 is
        // 0.0515 and suggests 0.052, never 0.051. A configured ratio that
        // already allows the plan is kept as written (`{}` round-trips).
        let source = (outcome.source_records as u128).max(1);
        let milli = ((items.len() as u128 * 1000).div_ceil(source)).min(1000);
        let needed = format!("{}.{:03}", milli / 1000, milli % 1000);
        let suggested_ratio = if plan.max_ratio >= needed.parse::<f64>().unwrap_or(1.0) {
            plan.max_ratio.to_string()
        } else {
            needed
        };
        let msg = format!(
            "job `{job}`: safety limit: the backfill was stopped before writing anything: {why}. Review plan.jsonl, then rerun with --max-records {} --max-ratio {suggested_ratio} (or raise the limits in the config)",
            items.len().max(plan.max_records as usize),
        );
        plan_lines = Some(plan_json());
        trouble = Some(msg);
    }

    // The history and the backfill are independent. A PostgreSQL state
    // store writes the history while the target is written; SQLite has one
    // writer, whose lock waits would cost more than they save.
    let batch = write_batch(&plan.job.job.target);
    let backfill = async {
        if write {
            apply(ledger, target.as_ref(), schema, &items, batch)
                .await
                .map(Some)
        } else {
            Ok(None)
        }
    };
    let history = state.update_discrepancies(job, run_id, now, &current);
    let (delta, outcomes) = match state.backend() {
        crate::state::Backend::Postgres => tokio::join!(history, backfill),
        crate::state::Backend::Sqlite => {
            let delta = history.await;
            (delta, backfill.await)
        }
    };
    let outcomes = outcomes?;
    let delta = delta?;
    drop(current);
    let history = crate::report::HistoryMap {
        now: format_timestamp(now),
        persisting: delta
            .persisting
            .iter()
            .map(|((class, key), first)| {
                (
                    (class.as_str().to_string(), key.clone()),
                    format_timestamp(*first),
                )
            })
            .collect(),
    };
    let resolved: Vec<ResolvedRow> = delta
        .resolved
        .iter()
        .map(|(class, key, first)| ResolvedRow {
            class: class.as_str().to_string(),
            key: key.clone(),
            first_seen: format_timestamp(*first),
            resolved_at: format_timestamp(now),
        })
        .collect();
    drop(delta);

    let mut extras = RunExtras {
        run_id: Some(run_id.to_string()),
        dry_run: plan.dry_run,
        pending,
        history: Some(history),
        resolved,
        confirmed_by_lookup: confirmed,
        unplaced,
        notes: window_notes,
        plan: plan_lines,
        ..RunExtras::default()
    };
    if let Some(msg) = &trouble {
        extras.notes.push(msg.clone());
    }
    if let Some(outcomes) = outcomes {
        let mut rows = Vec::with_capacity(items.len());
        for ((r, m), o) in items.iter().zip(&outcomes) {
            match o {
                WriteOutcome::Failed(_) => extras.backfill_failed += 1,
                WriteOutcome::Created | WriteOutcome::Updated => extras.backfilled += 1,
                WriteOutcome::Unchanged => {}
            }
            rows.push(backfill_row(r, *m, o));
        }
        extras.backfill = Some(rows);
    }

    // What is still open after this run's writes.
    let written: HashSet<&str> = extras
        .backfill
        .iter()
        .flatten()
        .filter(|r| r.outcome != "failed")
        .map(|r| r.key.as_str())
        .collect();
    let open = outcome
        .gaps
        .iter()
        .filter(|r| !written.contains(r.key.as_str()))
        .count()
        + outcome.orphans.len()
        + outcome
            .mismatches
            .iter()
            .filter(|m| !written.contains(m.key.as_str()))
            .count()
        + outcome.duplicates.len()
        + extras.unplaced.len();
    let status = if trouble.is_some() {
        Status::Trouble
    } else if open == 0 {
        Status::Clean
    } else {
        Status::Discrepancies
    };
    let meta = RunMeta {
        job: job.clone(),
        source: source.describe(),
        target: target.describe(),
        window: Some((format_timestamp(window.start), format_timestamp(window.end))),
        started_at: format_timestamp(now),
        source_ms,
        target_ms,
        total_ms: started.elapsed().as_millis(),
    };
    write_diff_reports(&mut dir, schema, &outcome, &meta, &extras, status.code())?;
    if let Some(lines) = extras.plan.as_ref().filter(|p| !p.is_empty()) {
        // What `recon apply --plan` will accept: this file, unedited.
        state
            .save_plan(&PlanRecord {
                id: run_id.to_string(),
                job: job.clone(),
                window: asked,
                sha256: crate::plan::file_sha256(&dir.staged(PLAN_FILE))?,
                items: lines.len() as u64,
                source_records: outcome.source_records,
                read_at: now,
                created_at: Timestamp::now(),
            })
            .await?;
    }
    let path = dir.commit()?;
    let mut counts = crate::report::counts(&outcome);
    counts.insert("pending".into(), json!(extras.pending.len()));
    counts.insert("backfilled".into(), json!(extras.backfilled));
    counts.insert("backfill_failed".into(), json!(extras.backfill_failed));
    println!("{}", render(&outcome, &extras));
    if let Some(msg) = trouble {
        eprintln!("error: {msg}");
    }
    Ok((status, serde_json::Value::Object(counts), path))
}

/// Takes the job's run lock; an overlapping run is trouble, said plainly.
pub(crate) async fn lock(state: &StateStore, job: &str) -> Result<crate::state::RunLock> {
    match state.acquire_lock(job, STALE_LOCK).await {
        Ok(lock) => Ok(lock),
        Err(e @ StateError::Locked { .. }) => bail!("{e}"),
        Err(e) => Err(e.into()),
    }
}

/// Records per write batch of a target (the SQL `write_batch`, or 1000).
pub(crate) fn write_batch(target: &EndpointConfig) -> usize {
    match target {
        EndpointConfig::Sql { write_batch, .. } => write_batch.unwrap_or(1000),
        _ => 1000,
    }
}

/// The `backfill.csv` row of one written item.
pub(crate) fn backfill_row(r: &Record, mode: WriteMode, o: &WriteOutcome) -> BackfillRow {
    let (outcome, error) = match o {
        WriteOutcome::Created => ("created", String::new()),
        WriteOutcome::Updated => ("updated", String::new()),
        WriteOutcome::Unchanged => ("unchanged", String::new()),
        WriteOutcome::Failed(e) => ("failed", e.clone()),
    };
    BackfillRow {
        key: r.key.clone(),
        action: Action::from(mode).as_str().into(),
        outcome: outcome.into(),
        error,
    }
}

/// Records the start of a run under the held `lock`; when the store
/// refuses (an earlier run of the job is still alive), the lock is released
/// and the refusal returned.
pub(crate) async fn start_run(
    state: &StateStore,
    lock: RunLock,
    job: &str,
    window: Window,
    dry_run: bool,
) -> Result<(String, RunLock)> {
    match state
        .start_run_as(job, window, dry_run, Some(lock.owner()))
        .await
    {
        Ok(id) => Ok((id, lock)),
        Err(e) => {
            lock.release().await?;
            bail!("{e}");
        }
    }
}

/// Write batches sent to the target at once during a backfill.
const WRITES_IN_FLIGHT: usize = 2;

/// The ledger mark of one written item.
fn mark(r: &Record, o: &WriteOutcome) -> (String, ItemStatus, Option<String>) {
    match o {
        WriteOutcome::Failed(e) => (r.key.clone(), ItemStatus::Failed, Some(e.clone())),
        _ => (r.key.clone(), ItemStatus::Applied, None),
    }
}

/// Where a backfill records what it does: the state store, the plan's id
/// and job, and the run lock that must still be held before each write.
pub(crate) struct Ledger<'a> {
    /// The state store.
    pub state: &'a StateStore,
    /// The run lock, verified before every write batch.
    pub lock: &'a RunLock,
    /// The plan (run) id the items are recorded under.
    pub plan_id: &'a str,
    /// The job.
    pub job: &'a str,
}

/// Items whose outcome a lost connection left unknown are settled first:
/// each is looked up by key in the target; present means applied, absent
/// means it was never committed.
async fn settle_unknown(ledger: &Ledger<'_>, target: &dyn Target, schema: &Schema) -> Result<()> {
    let unknown = ledger.state.unknown_items(ledger.job).await?;
    if unknown.is_empty() {
        return Ok(());
    }
    let keys: Vec<String> = unknown.iter().map(|(_, k)| k.clone()).collect();
    let present: HashSet<String> = target
        .lookup(schema, &keys)
        .await
        .with_context(|| {
            format!(
                "job `{}`: settling {} backfill items of unknown outcome by key lookup in the target",
                ledger.job,
                keys.len()
            )
        })?
        .into_iter()
        .map(|r| r.key)
        .collect();
    type Marks = Vec<(String, ItemStatus, Option<String>)>;
    let mut by_plan: HashMap<&str, Marks> = HashMap::new();
    for (plan, key) in &unknown {
        let mark = if present.contains(key) {
            (key.clone(), ItemStatus::Applied, None)
        } else {
            (
                key.clone(),
                ItemStatus::Failed,
                Some("not committed: the connection was lost while it was in flight".to_string()),
            )
        };
        by_plan.entry(plan.as_str()).or_default().push(mark);
    }
    for (plan, marks) in &by_plan {
        ledger.state.mark_items(plan, marks).await?;
    }
    tracing::info!(
        message = "Settled backfill items of unknown outcome by key lookup.",
        job = ledger.job,
        items = unknown.len(),
        present = present.len(),
    );
    Ok(())
}

/// Writes the plan's items in batches, recording each in the ledger first
/// (planned) and after (applied or failed). A crash between the write and
/// the record is harmless: the write is an upsert by key, so the next run
/// finds the record present and plans nothing for it. Before each batch
/// the run lock is verified: a lost lock stops the writes at once. A lost
/// connection records the batch in flight as `unknown` and ends the run;
/// the next run settles those items by key lookup.
pub(crate) async fn apply(
    ledger: &Ledger<'_>,
    target: &dyn Target,
    schema: &Schema,
    items: &[(Record, WriteMode)],
    batch: usize,
) -> Result<Vec<WriteOutcome>> {
    let (state, plan_id, job) = (ledger.state, ledger.plan_id, ledger.job);
    settle_unknown(ledger, target, schema).await?;
    let planned: Vec<(String, &str)> = items
        .iter()
        .map(|(r, m)| (r.key.clone(), Action::from(*m).as_str()))
        .collect();
    state.record_plan(plan_id, job, &planned).await?;
    let abort_after: Option<usize> = std::env::var(FAULT_ABORT_AFTER)
        .ok()
        .and_then(|v| v.parse().ok());
    let batch = batch.max(1);
    let mut outcomes = Vec::with_capacity(items.len());
    let mut written = 0usize;
    // Batches of one mode each, in plan order, built as they are sent.
    let mut batches = items
        .chunks(batch)
        .flat_map(|chunk| {
            [WriteMode::Insert, WriteMode::Upsert].map(|mode| {
                let records: Vec<Record> = chunk
                    .iter()
                    .filter(|(_, m)| *m == mode)
                    .map(|(r, _)| r.clone())
                    .collect();
                (mode, records)
            })
        })
        .filter(|(_, records)| !records.is_empty());
    // `WRITES_IN_FLIGHT` batches (disjoint keys) are written at once, and
    // the outcomes of the previous ones are recorded meanwhile (always after
    // their own write, as exactly-once requires): neither the target's round
    // trips nor the state store's commits wait for each other.
    let mut unmarked: Vec<(String, ItemStatus, Option<String>)> = Vec::new();
    // With the test-only crash hook, one batch at a time, so that the crash
    // falls exactly after N items and before their record.
    let in_flight = if abort_after.is_some() {
        1
    } else {
        WRITES_IN_FLIGHT
    };
    loop {
        let group: Vec<(WriteMode, Vec<Record>)> = batches.by_ref().take(in_flight).collect();
        if group.is_empty() {
            break;
        }
        if !ledger.lock.verify().await? {
            state.mark_items(plan_id, &unmarked).await?;
            bail!(
                "job `{job}`: lost the run lock (its session ended or another run took it over); stopped before writing more: {written} of {} items were written. Check that no other run of this job is active, then run again",
                items.len()
            );
        }
        let previous = std::mem::take(&mut unmarked);
        let (marked, results) = tokio::join!(
            state.mark_items(plan_id, &previous),
            futures_util::future::join_all(
                group
                    .iter()
                    .map(|(mode, records)| target.write(schema, records, *mode))
            )
        );
        marked?;
        let lost = results.iter().find_map(|r| match r {
            Err(recon_core::ConnectorError::ConnectionLost(m)) => Some(m),
            _ => None,
        });
        if let Some(m) = lost {
            // Every batch of the group whose outcome is not known for sure.
            let mut marks = Vec::new();
            for ((_, records), result) in group.iter().zip(&results) {
                match result {
                    Ok(outcomes) => {
                        marks.extend(records.iter().zip(outcomes).map(|(r, o)| mark(r, o)))
                    }
                    Err(_) => marks.extend(
                        records
                            .iter()
                            .map(|r| (r.key.clone(), ItemStatus::Unknown, Some(m.clone()))),
                    ),
                }
            }
            state.mark_items(plan_id, &marks).await?;
            let unknown = marks.iter().filter(|m| m.1 == ItemStatus::Unknown).count();
            bail!(
                "job `{job}`: {m}. {written} items were written before; the {unknown} in flight are recorded as unknown and the next run settles them by key lookup. Check the database, then run again"
            );
        }
        for ((_, records), result) in group.iter().zip(results) {
            let result = result?;
            written += records.len();
            if abort_after.is_some_and(|n| written >= n) {
                // Test-only fault hook: die like a SIGKILL, mid-backfill.
                std::process::abort();
            }
            unmarked.extend(records.iter().zip(&result).map(|(r, o)| mark(r, o)));
            outcomes.extend(records.iter().map(|r| r.key.clone()).zip(result));
        }
    }
    state.mark_items(plan_id, &unmarked).await?;
    // Back into plan order.
    let mut by_key: HashMap<String, WriteOutcome> = outcomes.into_iter().collect();
    items
        .iter()
        .map(|(r, _)| {
            by_key
                .remove(&r.key)
                .ok_or_else(|| anyhow!("no outcome recorded for {}", r.key))
        })
        .collect()
}

fn render(o: &DiffOutcome, e: &RunExtras) -> String {
    format!(
        "{}\n  unplaced    {}\n  pending     {}\n  resolved    {}\n  backfilled  {}{}",
        crate::commands::diff::render_summary(o),
        e.unplaced.len(),
        e.pending.len(),
        e.resolved.len(),
        e.backfilled,
        if e.backfill_failed > 0 {
            format!("\n  failed      {}", e.backfill_failed)
        } else if e.dry_run {
            " (dry run: see plan.jsonl)".to_string()
        } else {
            String::new()
        }
    )
}
