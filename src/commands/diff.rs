//! `recon diff SOURCE TARGET`: an ad-hoc diff of two export files.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use recon_core::{Field, FieldKind, Schema};
use recon_file::{AmountFormat, FileReader, FileSource, FileSpec};

use crate::cli::{AmountFormatArg, DiffArgs};
use crate::diff::{DiffEngine, DiffOutcome, DiffSpec, Tolerance};
use crate::pipeline::feed::{feed_files, Side};
use crate::report::{write_diff_reports, ReportDir, RunMeta};
use crate::Status;

/// A diff fully validated from its arguments, before any file is opened.
#[derive(Debug)]
pub struct DiffPlan {
    /// How to read the source file.
    pub source: FileSpec,
    /// How to read the target file.
    pub target: FileSpec,
    /// What to compare.
    pub spec: DiffSpec,
    /// Where the reports go.
    pub out: PathBuf,
}

fn parse_renames(flag: &str, items: &[String]) -> Result<HashMap<String, String>> {
    let mut map = HashMap::new();
    for item in items.iter().filter(|i| !i.is_empty()) {
        let Some((column, name)) = item.split_once('=') else {
            bail!("--{flag} `{item}`: expected FILE_COLUMN=NAME, for example stripe_id=id");
        };
        map.insert(name.trim().to_string(), column.trim().to_string());
    }
    Ok(map)
}

fn amount_format(a: AmountFormatArg) -> AmountFormat {
    match a {
        AmountFormatArg::Minor => AmountFormat::Minor,
        AmountFormatArg::Major => AmountFormat::Major,
    }
}

impl DiffPlan {
    /// Validates arguments into a plan; every mistake is named here, before I/O.
    pub fn from_args(args: DiffArgs) -> Result<DiffPlan> {
        let key = args.key.trim().to_string();
        if key.is_empty() {
            bail!("--key is empty; name the column holding the external ID");
        }
        let compare = compare_list(&args, &key)?;
        let amount = args.amount.clone().or_else(|| {
            compare
                .iter()
                .any(|c| c == "amount")
                .then(|| "amount".to_string())
        });
        let tolerances = tolerances(&args, &compare)?;
        let spec = diff_spec(&args, &compare, amount.as_ref(), &tolerances)?;
        let side = |path: &PathBuf, flag: &str, renames: &[String], format: AmountFormatArg| {
            file_spec(
                &spec.schema,
                &key,
                &args.currency,
                path,
                flag,
                renames,
                format,
            )
        };
        let source = side(
            &args.source,
            "source-rename",
            &args.source_rename,
            args.source_amount_format,
        )?;
        let target = side(
            &args.target,
            "target-rename",
            &args.target_rename,
            args.target_amount_format,
        )?;
        Ok(DiffPlan {
            source,
            target,
            spec,
            out: args.out,
        })
    }
}

/// The compared columns, in order, without repeats or the key.
fn compare_list(args: &DiffArgs, key: &str) -> Result<Vec<String>> {
    let mut compare: Vec<String> = Vec::new();
    for c in args
        .compare
        .iter()
        .map(|c| c.trim())
        .filter(|c| !c.is_empty())
    {
        if c == key {
            bail!("--compare lists the key column `{key}`; the key is always matched, remove it");
        }
        if !compare.iter().any(|x| x == c) {
            compare.push(c.to_string());
        }
    }
    for ts in args.timestamps.iter().filter(|t| !t.is_empty()) {
        if !compare.iter().any(|c| c == ts) {
            bail!("--timestamps `{ts}` is not a compared field; add it to --compare");
        }
    }
    Ok(compare)
}

/// `--tolerance FIELD=N` (minor units) or `FIELD=Ns` (seconds), by field.
fn tolerances(args: &DiffArgs, compare: &[String]) -> Result<HashMap<String, Tolerance>> {
    let mut tolerances: HashMap<String, Tolerance> = HashMap::new();
    for t in args.tolerance.iter().filter(|t| !t.is_empty()) {
        let Some((field, value)) = t.split_once('=') else {
            bail!("--tolerance `{t}`: expected FIELD=N (minor units) or FIELD=Ns (seconds)");
        };
        let field = field.trim();
        if !compare.iter().any(|c| c == field) {
            bail!("--tolerance `{t}`: `{field}` is not a compared field; add it to --compare");
        }
        let value = value.trim();
        // A whole number is minor units (or units); anything else is a
        // duration in the one syntax of every setting (`5s`, `2m`, `1h30m`).
        let tolerance = if value.bytes().all(|b| b.is_ascii_digit()) && !value.is_empty() {
            Tolerance::Units(
                value
                    .parse()
                    .with_context(|| format!("--tolerance `{t}`: `{value}` is too large"))?,
            )
        } else {
            let d = recon_core::parse::duration(value).map_err(|e| {
                anyhow::anyhow!(
                    "--tolerance `{t}`: `{value}` is neither a whole number (minor units) nor a duration such as 5s or 2m ({})",
                    e.reason
                )
            })?;
            Tolerance::Seconds(d.as_secs())
        };
        tolerances.insert(field.to_string(), tolerance);
    }
    Ok(tolerances)
}

/// The kind of a compared column, from the flags and its tolerance.
fn kind_of(
    args: &DiffArgs,
    name: &String,
    amount: Option<&String>,
    tol: Option<Tolerance>,
) -> Result<FieldKind> {
    Ok(if Some(name) == amount {
        if matches!(tol, Some(Tolerance::Seconds(_))) {
            bail!("--tolerance for the amount `{name}` is in minor units; drop the `s`");
        }
        FieldKind::Money
    } else if name == &args.currency {
        if tol.is_some() {
            bail!("--tolerance on the currency `{name}` makes no sense; remove it");
        }
        FieldKind::Currency
    } else if args.timestamps.contains(name) || matches!(tol, Some(Tolerance::Seconds(_))) {
        if matches!(tol, Some(Tolerance::Units(_))) {
            bail!("--tolerance for the timestamp `{name}` is in seconds: write {name}=Ns");
        }
        FieldKind::Timestamp
    } else if matches!(tol, Some(Tolerance::Units(_))) {
        FieldKind::Integer
    } else {
        FieldKind::Text
    })
}

/// The fields (compared ones, then an uncompared amount read for the
/// per-currency totals) and their tolerances.
fn diff_spec(
    args: &DiffArgs,
    compare: &[String],
    amount: Option<&String>,
    tolerances: &HashMap<String, Tolerance>,
) -> Result<DiffSpec> {
    let mut fields = Vec::new();
    let mut tols = Vec::new();
    for name in compare {
        let tol = tolerances.get(name).copied();
        fields.push(Field {
            name: name.clone(),
            kind: kind_of(args, name, amount, tol)?,
            compared: true,
        });
        tols.push(tol);
    }
    if let Some(a) = amount.filter(|a| !compare.contains(a)) {
        fields.push(Field {
            name: a.clone(),
            kind: FieldKind::Money,
            compared: false,
        });
        tols.push(None);
    }
    Ok(DiffSpec::new(Schema { fields }, tols))
}

/// How to read one side's file: its columns after `--*-rename`.
fn file_spec(
    schema: &Schema,
    key: &str,
    currency: &str,
    path: &Path,
    flag: &str,
    renames: &[String],
    format: AmountFormatArg,
) -> Result<FileSpec> {
    let renames = parse_renames(flag, renames)?;
    let column = |name: &str| {
        renames
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_string())
    };
    Ok(FileSpec {
        path: path.to_path_buf(),
        key_column: column(key),
        columns: schema.fields.iter().map(|f| column(&f.name)).collect(),
        currency_column: schema.money_field().is_some().then(|| column(currency)),
        amount_format: amount_format(format),
        max_record_bytes: recon_file::DEFAULT_MAX_RECORD_BYTES,
    })
}

/// Runs a plan: reads both files, diffs, writes the reports.
pub fn execute(plan: DiffPlan) -> Result<(DiffOutcome, Status, PathBuf)> {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    // Open both before reading either, so a wrong column on the target is
    // reported at once rather than after the whole source is read.
    let source = FileReader::open(plan.source.clone(), &plan.spec.schema)?;
    let target = FileReader::open(plan.target.clone(), &plan.spec.schema)?;
    // The copies of duplicated IDs are looked up in these same files.
    let files = (source.shared_file(), target.shared_file());
    let mut dir = ReportDir::create(&plan.out)?;
    let mut engine = DiffEngine::new(plan.spec.clone());
    // Every copy of a duplicated ID, kept in the one pass.
    engine.capture_copies();
    // Two stages on two threads: one parses and encodes both files in
    // turn, the other indexes (source) and probes (target).
    // Progress on a terminal only, while the files are read.
    let progress = crate::ops::progress::Display::start();
    let source_done = feed_files(
        &mut engine,
        vec![(source, Side::Source, None), (target, Side::Target, None)],
    )?
    .source_done;
    drop(progress);
    let source_ms = source_done.unwrap_or_else(|| started.elapsed()).as_millis();
    tracing::debug!(
        message = "Source side indexed.",
        ms = source_ms,
        peak_rss_mib = crate::memory::peak_rss_mib()
    );
    let target_ms = started.elapsed().as_millis() - source_ms;
    tracing::debug!(
        message = "Target side probed.",
        ms = target_ms,
        peak_rss_mib = crate::memory::peak_rss_mib()
    );
    let outcome = engine.finish();
    tracing::debug!(
        message = "Classified.",
        peak_rss_mib = crate::memory::peak_rss_mib()
    );
    let copies = Some(copies_in_files(&plan, &outcome, files)?);
    let status = status_of(&outcome);
    let meta = RunMeta {
        job: "diff".into(),
        source: plan.source.path.display().to_string(),
        target: plan.target.path.display().to_string(),
        window: None,
        started_at: recon_core::format_timestamp(started_at),
        source_ms,
        target_ms,
        total_ms: started.elapsed().as_millis(),
    };
    write_diff_reports(
        &mut dir,
        &plan.spec.schema,
        &outcome,
        &meta,
        &crate::report::RunExtras {
            duplicate_copies: copies,
            ..crate::report::RunExtras::default()
        },
        status.code(),
    )?;
    let path = dir.commit()?;
    Ok((outcome, status, path))
}

/// Every copy of the IDs a file holds more than once: those the engine
/// kept in its one pass, and the copies of the few IDs whose first copy
/// it could not keep (a target copy that differed within a tolerance
/// before its ID turned out duplicated), found by reading the target
/// again for those IDs only.
fn copies_in_files(
    plan: &DiffPlan,
    outcome: &DiffOutcome,
    (source_file, target_file): (Arc<File>, Arc<File>),
) -> Result<Vec<crate::report::copies::CopyRow>> {
    if outcome.duplicates.is_empty() {
        return Ok(Vec::new());
    }
    let side = |spec: &FileSpec, file| {
        FileSource::new(spec.clone(), plan.spec.schema.clone(), None).with_file(file)
    };
    let (source, target) = (
        side(&plan.source, source_file),
        side(&plan.target, target_file),
    );
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    // A file returns every copy: there is nothing to note.
    let mut notes = Vec::new();
    runtime.block_on(crate::pipeline::read::duplicate_copies(
        outcome, &source, &target, &mut notes,
    ))
}

/// 1 when anything is left open, 0 otherwise.
pub fn status_of(outcome: &DiffOutcome) -> Status {
    if outcome.gaps.is_empty()
        && outcome.orphans.is_empty()
        && outcome.mismatches.is_empty()
        && outcome.duplicates.is_empty()
    {
        Status::Clean
    } else {
        Status::Discrepancies
    }
}

/// The `recon diff` command.
pub fn run(args: DiffArgs) -> Result<Status> {
    let plan = DiffPlan::from_args(args)?;
    let (outcome, status, path) = execute(plan)?;
    println!("{}", render_summary(&outcome));
    println!("reports: {}", path.display());
    crate::memory::drop_aside(outcome);
    Ok(status)
}

/// A few readable lines for the terminal.
pub fn render_summary(o: &DiffOutcome) -> String {
    format!(
        "source {} records, target {} records\n  matched     {}\n  gaps        {}\n  orphans     {}\n  mismatches  {}\n  duplicates  {}",
        o.source_records,
        o.target_records,
        o.matched,
        o.gaps.len(),
        o.orphans.len(),
        o.mismatches.len(),
        o.duplicates.len()
    )
}
