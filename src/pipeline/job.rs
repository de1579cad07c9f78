//! Stage 0: a run validated from its arguments and config, before any
//! connection: the schema, tolerances, window, time zone and limits.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use jiff::SignedDuration;
use recon_core::{BuildContext, Field, FieldKind, Schema, TargetRole, TokenStore};

use crate::cli::RunArgs;
use crate::config::{self, BackfillMode, JobConfig, ResolvedJob, ToleranceSetting};
use crate::diff::{DiffSpec, Tolerance};
use crate::window::{parse_duration, WindowSpec};

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
    /// `backfill.via = "webhook"`: the endpoint gaps are replayed to.
    pub webhook: Option<crate::webhook::Webhook>,
}

fn kind_of(job: &JobConfig, name: &str) -> FieldKind {
    job.fields.get(name).copied().unwrap_or(FieldKind::Text)
}

impl RunPlan {
    /// The job's token store (its state store, opened on first use), for
    /// [`RunPlan::build_context`].
    pub fn tokens(&self) -> std::sync::Arc<dyn TokenStore> {
        crate::state::LazyTokens::shared(self.job.state.clone())
    }

    /// What the job's connectors are built with.
    pub fn build_context<'a>(
        &'a self,
        tokens: &'a std::sync::Arc<dyn TokenStore>,
    ) -> BuildContext<'a> {
        BuildContext {
            schema: &self.spec.schema,
            time_field: self.time_field,
            job: &self.job.name,
            tokens: Some(tokens),
        }
    }

    /// Loads the config and checks everything that needs no connection.
    pub fn from_args(args: &RunArgs) -> Result<RunPlan> {
        let file = config::load(&args.config)?;
        let job = file.job(args.job.as_deref())?;
        let name = job.name.clone();
        let j = &job.job;
        let (schema, time_field) = schema_of(&name, j)?;
        let tolerances = tolerances(&name, j, &schema)?;
        check_endpoints(&name, j, &schema, args.dry_run)?;
        let b = &j.backfill;
        let webhook = crate::webhook::resolve(&name, b.via, b.mode, b.webhook.as_ref())?;
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
        Ok(RunPlan {
            spec: DiffSpec::new(schema, tolerances),
            time_field,
            window,
            tz,
            lookback: duration(&j.lookback, "lookback")?,
            grace: duration(&j.grace, "grace")?,
            dry_run: args.dry_run,
            out: args.out.clone(),
            max_records: args.max_records.unwrap_or(j.backfill.max_records),
            max_ratio: args.max_ratio.unwrap_or(j.backfill.max_ratio),
            webhook,
            job,
        })
    }

    /// Whether this run writes into the target.
    pub fn writes(&self) -> bool {
        self.job.job.backfill.mode != BackfillMode::Off && !self.dry_run
    }
}

/// The job's fields: compared ones in their order, then the others
/// declared, then the time field; and the time field's index.
fn schema_of(name: &str, j: &JobConfig) -> Result<(Schema, Option<usize>)> {
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
        None if j.fields.get("created") == Some(&FieldKind::Timestamp) => Some("created".into()),
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
    let time_field = time_name.as_ref().and_then(|t| schema.index_of(t));
    Ok((schema, time_field))
}

/// Each compared field's allowed difference, checked against its kind.
fn tolerances(name: &str, j: &JobConfig, schema: &Schema) -> Result<Vec<Option<Tolerance>>> {
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
                let d = parse_duration(d)
                    .map_err(|e| anyhow!("job `{name}`: tolerance `{field}`: {e}"))?;
                Tolerance::Seconds(d.as_secs())
            }
            _ => bail!(
                "job `{name}`: tolerance `{field}` does not fit a {kind} field; use a whole number of minor units for money and integers, a duration such as \"5s\" for timestamps"
            ),
        });
    }
    Ok(tolerances)
}

/// Each side's field map names fields of the job; the target can be one.
fn check_endpoints(name: &str, j: &JobConfig, schema: &Schema, dry_run: bool) -> Result<()> {
    for (side, endpoint) in [("source", &j.source), ("target", &j.target)] {
        let Some((setting, map)) = endpoint.connector().field_map() else {
            continue;
        };
        for c in map.keys() {
            if schema.index_of(c).is_none() {
                let fields: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
                bail!(
                    "job `{name}`: {side}.{setting} maps `{c}`, which is not a field of the job; fields are: {}",
                    fields.join(", ")
                );
            }
        }
    }
    let target = j.target.connector();
    match target.target_role() {
        TargetRole::SourceOnly => bail!(
            "job `{name}`: {} is a source of truth only; use it as the job's source",
            target.kind()
        ),
        // A webhook route only reads the target (to verify).
        TargetRole::ReadOnly
            if j.backfill.mode != BackfillMode::Off
                && !dry_run
                && j.backfill.via == config::BackfillVia::Target =>
        {
            bail!(
                "job `{name}`: the target is {} and cannot be backfilled; set backfill.mode = \"off\" or run with --dry-run",
                target.kind()
            )
        }
        _ => Ok(()),
    }
}
