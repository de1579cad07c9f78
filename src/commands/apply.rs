//! `recon apply --plan FILE`: apply exactly a reviewed dry-run plan.
//!
//! Each item is checked again before writing (an `insert` whose key now
//! exists in the target is skipped), written through the same idempotent
//! upsert and ledger as `recon run`, and reported in `backfill.csv`.

use std::collections::HashSet;
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use jiff::Timestamp;
use recon_core::{
    format_timestamp, Currency, FieldKind, Money, Record, Schema, Value, Window, WriteMode,
    WriteOutcome,
};
use serde_json::json;

use crate::cli::{ApplyArgs, RunArgs};
use crate::commands::run::{apply, backfill_row, connect, lock, write_batch, RunPlan};
use crate::report::{write_backfill_csv, BackfillRow, ReportDir};
use crate::state::StateStore;
use crate::Status;

/// One line of plan.jsonl.
#[derive(Debug)]
struct PlanItem {
    job: String,
    window: Option<Window>,
    mode: WriteMode,
    /// Key, and values once typed by the job's schema ([`PlanItem::type_values`]).
    record: Record,
    /// The line's `values`, as written.
    raw: serde_json::Value,
    /// `plan.jsonl line N`, for errors.
    at: String,
}

impl PlanItem {
    /// Types the line's values by the job's schema.
    fn type_values(&mut self, schema: &Schema) -> Result<()> {
        self.record.values = schema
            .fields
            .iter()
            .map(|f| {
                value_from_json(f.kind, &self.raw[&f.name])
                    .map_err(|e| anyhow!("{}: field `{}`: {e}", self.at, f.name))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(())
    }
}

fn value_from_json(kind: FieldKind, v: &serde_json::Value) -> Result<Value> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    let text = || {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("expected text, found {v}"))
    };
    Ok(match kind {
        FieldKind::Text => Value::Text(text()?),
        FieldKind::Integer => Value::Integer(text()?.parse().context("expected a whole number")?),
        FieldKind::Currency => Value::Currency(Currency::parse(&text()?)?),
        FieldKind::Timestamp => Value::Timestamp(
            text()?
                .parse::<Timestamp>()
                .context("expected an RFC 3339 timestamp")?,
        ),
        FieldKind::Money => {
            let minor = v["minor"]
                .as_i64()
                .ok_or_else(|| anyhow!("money needs an integer `minor`"))?;
            let cur = v["currency"]
                .as_str()
                .ok_or_else(|| anyhow!("money needs a `currency`"))?;
            Value::Money(Money::from_minor(minor, Currency::parse(cur)?))
        }
    })
}

/// Reads every line of a plan; values stay untyped until the job is known.
fn read_plan(path: &PathBuf) -> Result<Vec<PlanItem>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read plan {}", path.display()))?;
    let mut items = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), i + 1);
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{}: not JSON", at()))?;
        let job = v["job"]
            .as_str()
            .ok_or_else(|| anyhow!("{}: no `job`", at()))?
            .to_string();
        let key = v["external_id"]
            .as_str()
            .ok_or_else(|| anyhow!("{}: no `external_id`", at()))?
            .to_string();
        let mode = match v["action"].as_str() {
            Some("insert") => WriteMode::Insert,
            Some("update") => WriteMode::Upsert,
            other => bail!("{}: action {other:?}; expected insert or update", at()),
        };
        let window = match (v["window"]["start"].as_str(), v["window"]["end"].as_str()) {
            (Some(s), Some(e)) => Some(Window {
                start: s.parse()?,
                end: e.parse()?,
            }),
            _ => None,
        };
        items.push(PlanItem {
            job,
            window,
            mode,
            record: Record {
                key,
                values: Vec::new(),
            },
            raw: v["values"].clone(),
            at: at(),
        });
    }
    Ok(items)
}

/// The `recon apply` command.
pub fn run(args: ApplyArgs) -> Result<Status> {
    let mut items = read_plan(&args.plan)?;
    let Some(first) = items.first() else {
        bail!("plan {} is empty: nothing to apply", args.plan.display());
    };
    let job = first.job.clone();
    if let Some(other) = items.iter().find(|i| i.job != job) {
        bail!(
            "plan {} mixes jobs `{job}` and `{}`; apply one job's plan at a time",
            args.plan.display(),
            other.job
        );
    }
    let plan = RunPlan::from_args(&RunArgs {
        config: args.config.clone(),
        job: Some(job.clone()),
        window: None,
        dry_run: false,
        out: args.out.clone(),
        max_records: None,
        max_ratio: None,
    })?;
    for item in &mut items {
        item.type_values(&plan.spec.schema)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(execute(plan, items, args.plan.clone()))
}

async fn execute(plan: RunPlan, items: Vec<PlanItem>, plan_path: PathBuf) -> Result<Status> {
    let job = plan.job.name.clone();
    let schema = plan.spec.schema.clone();
    let now = Timestamp::now();
    let window = items[0].window.unwrap_or(Window {
        start: now,
        end: now,
    });
    let state = StateStore::open(plan.job.state.expose()).await?;
    let lock = lock(&state, &job).await?;
    let run_id = state.start_run(&job, window, false).await?;
    let result = async {
        let target = connect(&plan.job.job.target, &schema, plan.time_field).await.with_context(|| format!("job `{job}`: target"))?;
        target.check_unique_key().await?;
        // Re-check: an insert whose key has appeared since the dry run is skipped.
        let insert_keys: Vec<String> = items.iter().filter(|i| i.mode == WriteMode::Insert).map(|i| i.record.key.clone()).collect();
        let present: HashSet<String> = target.lookup(&schema, &insert_keys).await?.into_iter().map(|r| r.key).collect();
        let (skipped, todo): (Vec<&PlanItem>, Vec<&PlanItem>) =
            items.iter().partition(|i| i.mode == WriteMode::Insert && present.contains(&i.record.key));
        let work: Vec<(Record, WriteMode)> = todo.iter().map(|i| (i.record.clone(), i.mode)).collect();
        let batch = write_batch(&plan.job.job.target);
        let outcomes = if work.is_empty() { Vec::new() } else { apply(&state, target.as_ref(), &schema, &run_id, &job, &work, batch).await? };
        let dir_path = plan.out.clone().unwrap_or_else(|| plan.job.reports.join(&job).join(&run_id));
        let mut dir = ReportDir::create(&dir_path)?;
        let (mut done, mut failed) = (0u64, 0u64);
        let mut rows: Vec<BackfillRow> = skipped
            .iter()
            .map(|i| BackfillRow {
                key: i.record.key.clone(),
                action: "insert".into(),
                outcome: "skipped".into(),
                error: "already present in the target".into(),
            })
            .collect();
        for ((r, m), o) in work.iter().zip(&outcomes) {
            match o {
                WriteOutcome::Failed(_) => failed += 1,
                WriteOutcome::Created | WriteOutcome::Updated => done += 1,
                WriteOutcome::Unchanged => {}
            }
            rows.push(backfill_row(r, *m, o));
        }
        write_backfill_csv(&mut dir, &rows)?;
        let status = if failed > 0 { Status::Discrepancies } else { Status::Clean };
        let summary = json!({
            "job": job,
            "run_id": run_id,
            "plan": plan_path.display().to_string(),
            "window": { "start": format_timestamp(window.start), "end": format_timestamp(window.end) },
            "planned": items.len(),
            "skipped": skipped.len(),
            "backfilled": done,
            "backfill_failed": failed,
            "exit_status": status.code(),
        });
        let mut text = serde_json::to_vec_pretty(&summary)?;
        text.push(b'\n');
        dir.write_all("summary.json", &text)?;
        let path = dir.commit()?;
        println!("plan {}: {} items, {} skipped (already present), {} written, {} failed", plan_path.display(), items.len(), skipped.len(), done, failed);
        println!("reports: {}", path.display());
        Ok::<_, anyhow::Error>((status, summary, path))
    }
    .await;
    let (status_text, counts, dir, error) = match &result {
        Ok((s, summary, p)) => (
            if *s == Status::Clean {
                "clean"
            } else {
                "discrepancies"
            },
            summary.clone(),
            Some(p.display().to_string()),
            None,
        ),
        Err(e) => ("failed", json!(null), None, Some(format!("{e:#}"))),
    };
    state
        .finish_run(
            &run_id,
            status_text,
            &counts,
            dir.as_deref(),
            error.as_deref(),
        )
        .await?;
    lock.release().await?;
    result.map(|(s, _, _)| s)
}
