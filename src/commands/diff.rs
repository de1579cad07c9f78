//! `recon diff SOURCE TARGET`: an ad-hoc diff of two export files.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use recon_core::{Field, FieldKind, Schema, ValueRef};
use recon_file::{AmountFormat, FileReader, FileSpec, ReadError};

use crate::cli::{AmountFormatArg, DiffArgs};
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};

use crate::diff::{DiffEngine, DiffOutcome, DiffSpec, RecordBatch, Tolerance};
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
        let mut compare: Vec<String> = Vec::new();
        for c in args
            .compare
            .iter()
            .map(|c| c.trim())
            .filter(|c| !c.is_empty())
        {
            if c == key {
                bail!(
                    "--compare lists the key column `{key}`; the key is always matched, remove it"
                );
            }
            if !compare.iter().any(|x| x == c) {
                compare.push(c.to_string());
            }
        }
        let amount = args.amount.clone().or_else(|| {
            compare
                .iter()
                .any(|c| c == "amount")
                .then(|| "amount".to_string())
        });

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
            let (number, seconds) = match value.strip_suffix('s') {
                Some(n) => (n, true),
                None => (value, false),
            };
            let n: i64 = number.parse().ok().filter(|n| *n >= 0).with_context(|| {
                format!("--tolerance `{t}`: `{value}` is not a non-negative whole number")
            })?;
            tolerances.insert(
                field.to_string(),
                if seconds {
                    Tolerance::Seconds(n)
                } else {
                    Tolerance::Units(n)
                },
            );
        }
        for ts in args.timestamps.iter().filter(|t| !t.is_empty()) {
            if !compare.iter().any(|c| c == ts) {
                bail!("--timestamps `{ts}` is not a compared field; add it to --compare");
            }
        }

        let mut fields = Vec::new();
        let mut tols = Vec::new();
        for name in &compare {
            let tol = tolerances.get(name).copied();
            let kind = if Some(name) == amount.as_ref() {
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
            };
            fields.push(Field {
                name: name.clone(),
                kind,
                compared: true,
            });
            tols.push(tol);
        }
        if let Some(a) = &amount {
            if !compare.contains(a) {
                // Read for the per-currency totals only.
                fields.push(Field {
                    name: a.clone(),
                    kind: FieldKind::Money,
                    compared: false,
                });
                tols.push(None);
            }
        }
        let schema = Schema { fields };
        let has_money = schema.money_field().is_some();

        let side = |path: &PathBuf,
                    flag: &str,
                    renames: &[String],
                    format: AmountFormatArg|
         -> Result<FileSpec> {
            let renames = parse_renames(flag, renames)?;
            let column = |name: &str| {
                renames
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| name.to_string())
            };
            Ok(FileSpec {
                path: path.clone(),
                key_column: column(&key),
                columns: schema.fields.iter().map(|f| column(&f.name)).collect(),
                currency_column: has_money.then(|| column(&args.currency)),
                amount_format: amount_format(format),
            })
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
            spec: DiffSpec {
                schema,
                tolerances: tols,
            },
            out: args.out,
        })
    }
}

/// Records per batch handed from the reader thread to the engine.
const BATCH: usize = 8192;

/// What the reader thread sends.
enum Message {
    /// A batch of source records, and an estimate of the source's size.
    Source(RecordBatch, Option<usize>),
    /// A batch of target records.
    Target(RecordBatch),
}

/// Which rows of a file to keep (e.g. those inside a run's window).
pub(crate) type RowFilter<'a> = &'a (dyn Fn(&[ValueRef<'_>]) -> bool + Sync);

/// Parses one file into batches on the calling thread, sending each full batch.
fn read_side(
    reader: &mut FileReader,
    spec: &DiffSpec,
    source_side: bool,
    tx: &SyncSender<Message>,
    free: &Receiver<RecordBatch>,
    keep: Option<RowFilter<'_>>,
) -> Result<()> {
    let fresh = |free: &Receiver<RecordBatch>| {
        let mut b = free.try_recv().unwrap_or_else(|_| RecordBatch::new(spec));
        b.clear();
        b
    };
    let mut first = true;
    loop {
        let mut batch = fresh(free);
        let done = reader.for_each_while(|key, values, _| -> Result<bool> {
            if keep.is_none_or(|k| k(values)) {
                batch.push(key, values)?;
            }
            Ok(batch.len() < BATCH)
        });
        let done = match done {
            Ok(done) => done,
            Err(ReadError::Connector(e)) => return Err(e.into()),
            Err(ReadError::Caller(e)) => return Err(e),
        };
        if !batch.is_empty() {
            let msg = if source_side {
                // Estimate the source's size from the first batch's bytes per
                // row, so that the engine sizes its index once.
                let (read, total) = reader.progress();
                let estimate = (first && read > 0)
                    .then(|| (total as f64 / (read as f64 / batch.len() as f64) * 1.02) as usize);
                Message::Source(batch, estimate)
            } else {
                Message::Target(batch)
            };
            first = false;
            // The engine stops listening only after failing itself.
            tx.send(msg)
                .map_err(|_| anyhow::anyhow!("diff engine stopped"))?;
        }
        if done {
            return Ok(());
        }
    }
}

/// Feeds one file to the engine through the same two stages as `recon
/// diff`: a reader thread parses, filters and encodes batches, the calling
/// thread indexes (source) or probes (target) them. `recon run` uses it for
/// file sides, so a job over exports runs at the speed of `recon diff`.
pub(crate) fn feed_file(
    engine: &mut DiffEngine,
    mut reader: FileReader,
    source_side: bool,
    keep: Option<RowFilter<'_>>,
) -> Result<()> {
    let spec = engine.spec().clone();
    std::thread::scope(|scope| -> Result<()> {
        let (tx, rx) = sync_channel::<Message>(4);
        let (free_tx, free_rx) = channel::<RecordBatch>();
        let spec = &spec;
        let handle = scope.spawn(move || -> Result<()> {
            read_side(&mut reader, spec, source_side, &tx, &free_rx, keep)
        });
        for msg in rx {
            match msg {
                Message::Source(batch, estimate) => {
                    if let Some(n) = estimate {
                        engine.reserve_source(n);
                    }
                    engine.add_source_batch(&batch)?;
                    let _ = free_tx.send(batch);
                }
                Message::Target(batch) => {
                    engine.add_target_batch(&batch);
                    let _ = free_tx.send(batch);
                }
            }
        }
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("file reader thread panicked"))?
    })
}

/// Runs a plan: reads both files, diffs, writes the reports.
pub fn execute(plan: DiffPlan) -> Result<(DiffOutcome, Status, PathBuf)> {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    // Open both before reading either, so a wrong column on the target is
    // reported at once rather than after the whole source is read.
    let mut source = FileReader::open(plan.source.clone(), &plan.spec.schema)?;
    let mut target = FileReader::open(plan.target.clone(), &plan.spec.schema)?;
    let mut dir = ReportDir::create(&plan.out)?;
    let mut engine = DiffEngine::new(plan.spec.clone());
    let mut source_ms = 0;
    // Two stages on two threads: one parses and encodes, the other indexes
    // and probes. Batches travel through a short queue and come back for reuse.
    let spec = &plan.spec;
    std::thread::scope(|scope| -> Result<()> {
        let (tx, rx) = sync_channel::<Message>(4);
        let (free_tx, free_rx) = channel::<RecordBatch>();
        let reader = scope.spawn(move || -> Result<()> {
            read_side(&mut source, spec, true, &tx, &free_rx, None)?;
            read_side(&mut target, spec, false, &tx, &free_rx, None)
        });
        let mut source_done = false;
        for msg in rx {
            match msg {
                Message::Source(batch, estimate) => {
                    if let Some(n) = estimate {
                        engine.reserve_source(n);
                    }
                    engine.add_source_batch(&batch)?;
                    let _ = free_tx.send(batch);
                }
                Message::Target(batch) => {
                    if !source_done {
                        source_done = true;
                        source_ms = started.elapsed().as_millis();
                        tracing::debug!(
                            message = "Source side indexed.",
                            ms = source_ms,
                            peak_rss_mib = crate::memory::peak_rss_mib()
                        );
                    }
                    engine.add_target_batch(&batch);
                    let _ = free_tx.send(batch);
                }
            }
        }
        reader
            .join()
            .map_err(|_| anyhow::anyhow!("file reader thread panicked"))?
    })?;
    if source_ms == 0 {
        source_ms = started.elapsed().as_millis();
    }
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
        &crate::report::RunExtras::default(),
        status.code(),
    )?;
    let path = dir.commit()?;
    Ok((outcome, status, path))
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
