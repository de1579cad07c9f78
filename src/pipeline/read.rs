//! Stages 1–2: build both sides, read them into the diff engine, list
//! records no window can hold, and confirm edge cases by key.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use futures_util::TryStreamExt;
use recon_core::{
    DuplicateCopy, FileFeed, Record, Source, Target, Unplaced, Value, ValueRef, Window,
};

use super::feed::{feed_files, Outside, Row, Side};
use super::RunPlan;
use crate::config::UnplacedPolicy;
use crate::diff::{
    equal, DiffEngine, DiffOutcome, DiffSpec, Duplicate, FieldDiff, Mismatch, RecordBatch, Records,
};
use crate::report::copies::{self, CopyRow};
use crate::report::UnplacedRow;

/// The target as the run needs it: read only, or read and written.
pub enum TargetSide {
    /// Compared against only (dry run, `backfill.mode = "off"`).
    Read(Box<dyn Source>),
    /// Compared against and backfilled.
    Write(Box<dyn Target>),
}

/// Both sides of a run, built from their settings.
pub struct Sides {
    /// The source of truth.
    pub source: Box<dyn Source>,
    /// The target.
    pub target: TargetSide,
}

impl Sides {
    /// Builds the source, and the target as a writer only when the run
    /// writes (then its idempotency precondition is checked first).
    pub async fn build(plan: &RunPlan, write: bool) -> Result<Sides> {
        let job = &plan.job.name;
        let tokens = plan.tokens();
        let cx = plan.build_context(&tokens);
        let source = plan.job.job.source.connector().build_source(cx).await;
        let source = source.with_context(|| format!("job `{job}`: source"))?;
        let target_cfg = plan.job.job.target.connector();
        let target = if write {
            let t = target_cfg.build_target(cx).await;
            let t = t.with_context(|| format!("job `{job}`: target"))?;
            t.check_idempotent().await?;
            TargetSide::Write(t)
        } else {
            let t = target_cfg.build_source(cx).await;
            TargetSide::Read(t.with_context(|| format!("job `{job}`: target"))?)
        };
        Ok(Sides { source, target })
    }

    /// The target, to read and look up.
    pub fn target(&self) -> &dyn Source {
        match &self.target {
            TargetSide::Read(s) => s.as_ref(),
            TargetSide::Write(t) => t.as_source(),
        }
    }

    /// The target, to write; `None` when the run does not write.
    pub fn writer(&self) -> Option<&dyn Target> {
        match &self.target {
            TargetSide::Read(_) => None,
            TargetSide::Write(t) => Some(t.as_ref()),
        }
    }
}

/// What reading both sides produced.
pub struct Read {
    /// The diff before edge confirmation.
    pub outcome: DiffOutcome,
    /// Milliseconds spent reading the source.
    pub source_ms: u128,
    /// Milliseconds spent reading the target.
    pub target_ms: u128,
    /// Records of each side (source, target) in no window, found by the
    /// read itself.
    pub unplaced: [Vec<Unplaced>; 2],
    /// Keys each side holds outside what it read, when the read itself
    /// saw them (export files): edge lookups ask only for those.
    pub outside: [Option<Outside>; 2],
}

/// What one side's read found besides its records.
#[derive(Default)]
struct SideRead {
    unplaced: Vec<Unplaced>,
    outside: Option<Outside>,
}

/// Reads the source, then the target, into one diff engine.
pub async fn read_and_diff(plan: &RunPlan, sides: &Sides, window: Window) -> Result<Read> {
    let job = &plan.job.name;
    let started = std::time::Instant::now();
    let mut engine = DiffEngine::new(plan.spec.clone());
    // Duplicate copies of file sides are kept in the one pass.
    engine.capture_copies();
    let (source, target) = (sides.source.as_ref(), sides.target());
    let source_read = feed(source, plan, window, &mut engine, true)
        .await
        .with_context(|| format!("job `{job}`: reading the source {}", source.describe()))?;
    let source_ms = started.elapsed().as_millis();
    let target_read = feed(target, plan, window, &mut engine, false)
        .await
        .with_context(|| format!("job `{job}`: reading the target {}", target.describe()))?;
    let target_ms = started.elapsed().as_millis() - source_ms;
    Ok(Read {
        outcome: engine.finish(),
        source_ms,
        target_ms,
        unplaced: [source_read.unplaced, target_read.unplaced],
        outside: [source_read.outside, target_read.outside],
    })
}

/// Feeds one side to the engine. A side that is a local file
/// ([`Source::as_file_feed`]) goes through `recon diff`'s batched pipeline
/// (a reader thread, no owned records, no pages); other sides stream pages,
/// each encoded as one batch. Either way the rows in no window are listed
/// from the same pass.
async fn feed(
    side: &dyn Source,
    plan: &RunPlan,
    window: Window,
    engine: &mut DiffEngine,
    source_side: bool,
) -> Result<SideRead> {
    let which = if source_side {
        Side::Source
    } else {
        Side::Target
    };
    if let Some(file) = side.as_file_feed() {
        return feed_file(file, plan, window, engine, which);
    }
    let schema = &plan.spec.schema;
    let mut pages = side.read(window);
    let mut batch = RecordBatch::new(engine.spec());
    let mut unplaced = Vec::new();
    while let Some(mut page) = pages.try_next().await? {
        unplaced.append(&mut page.unplaced);
        crate::ops::progress::page(source_side, page.records.len());
        batch.clear();
        let mut values = Vec::with_capacity(schema.fields.len());
        for r in &page.records {
            values.clear();
            values.extend(r.values.iter().map(Value::as_ref));
            batch
                .push(&r.key, &values)
                .map_err(|e| anyhow::anyhow!("{} {}: {e}", which.name(), side.describe()))?;
        }
        if source_side {
            engine.add_source_batch(&batch)?;
        } else {
            engine.add_target_batch(&batch);
        }
    }
    // In key order: a table returns them in no particular order.
    unplaced.sort_by(|a: &Unplaced, b: &Unplaced| a.key.cmp(&b.key));
    Ok(SideRead {
        unplaced,
        outside: None,
    })
}

/// Feeds a local file through the batched pipeline: its reader is opened
/// once, and each row is filtered by the window on the reader thread.
fn feed_file(
    file: &dyn FileFeed,
    plan: &RunPlan,
    window: Window,
    engine: &mut DiffEngine,
    which: Side,
) -> Result<SideRead> {
    let time_field = plan.time_field;
    let reader = recon_file::FileReader::from_feed(file)?;
    let in_window = move |values: &[ValueRef<'_>]| match time_field.map(|t| values.get(t)) {
        None => Row::Keep,
        Some(Some(ValueRef::Timestamp(ts))) if window.contains(*ts) => Row::Keep,
        Some(Some(ValueRef::Null) | None) => Row::Unplaced,
        Some(Some(_)) => Row::Skip,
    };
    let feed = || feed_files(engine, vec![(reader, which, Some(&in_window))]);
    // The reader thread and this one work at full speed; other tasks
    // (the lock's heartbeat) move to another worker meanwhile.
    let fed = match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(feed),
        _ => feed(),
    }?;
    let field = file.time_column().unwrap_or_default();
    let unplaced = fed
        .unplaced
        .into_iter()
        .map(|key| Unplaced::empty(key, &field))
        .collect();
    Ok(SideRead {
        unplaced,
        outside: fed.outside,
    })
}

/// Records of either side that no window can hold (time field empty, NULL
/// or not a timestamp). With `unplaced = "fail"` any such record stops the
/// run (exit 2) before anything is written.
pub fn unplaced_records(plan: &RunPlan, read: [Vec<Unplaced>; 2]) -> Result<Vec<UnplacedRow>> {
    let job = &plan.job.name;
    let mut rows = Vec::new();
    for (side, found) in ["source", "target"].into_iter().zip(read) {
        rows.extend(found.into_iter().map(|record| UnplacedRow {
            side: side.to_string(),
            record,
        }));
    }
    if let (Some(first), UnplacedPolicy::Fail) = (rows.first(), plan.job.job.unplaced) {
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

/// What edge confirmation settled.
pub struct Confirmed {
    /// Gaps and orphans dismissed because a lookup found the record.
    pub dismissed: u64,
    /// The source record of each mismatch a lookup found: what an upsert
    /// writes (the engine keeps those of the mismatches it found).
    pub mismatch_sources: Vec<Record>,
    /// Warnings about a side whose window read looks wrong.
    pub notes: Vec<String>,
}

/// Before a gap is reported the target is asked for it by key, and before
/// an orphan is reported the source is: a record at the window's edge may
/// sit on the other side of midnight in the other system.
pub async fn confirm_edges(
    outcome: &mut DiffOutcome,
    sides: &Sides,
    spec: &DiffSpec,
    (outside, window): (&[Option<Outside>; 2], Window),
) -> Result<Confirmed> {
    let (gaps_read, orphans_read) = (outcome.gaps.len(), outcome.orphans.len());
    let in_target = lookup(sides.target(), &outcome.gaps, outside[1].as_ref(), window)
        .await
        .context("confirming gaps by key in the target")?;
    let in_source = lookup(
        sides.source.as_ref(),
        &outcome.orphans,
        outside[0].as_ref(),
        window,
    )
    .await
    .context("confirming orphans by key in the source")?;
    let mut dismissed = 0;
    let mut sources = Vec::new();
    // Lists stay in their compact form: only the records a look-up found
    // are taken out of them (decoded) and settled.
    if !in_target.is_empty() {
        let found = outcome.gaps.take_where(|k, _| in_target.contains_key(k));
        for g in found {
            settle(spec, outcome, &g, &in_target[&g.key], &mut sources);
        }
        dismissed += (gaps_read - outcome.gaps.len()) as u64;
    }
    if !in_source.is_empty() {
        let found = outcome.orphans.take_where(|k, _| in_source.contains_key(k));
        for o in found {
            settle(spec, outcome, &in_source[&o.key], &o, &mut sources);
        }
        dismissed += (orphans_read - outcome.orphans.len()) as u64;
    }
    outcome.mismatches.sort_by(|a, b| a.key.cmp(&b.key));
    let mut notes = empty_read_notes(outcome, gaps_read, orphans_read, sides);
    // What a side says about how it is read (a declared API's client-side
    // window, or its missing lookup).
    for (name, side) in [
        ("source", sides.source.as_ref()),
        ("target", sides.target()),
    ] {
        notes.extend(
            side.read_notes()
                .into_iter()
                .map(|n| format!("{name}: {n}")),
        );
    }
    Ok(Confirmed {
        dismissed,
        mismatch_sources: sources,
        notes,
    })
}

/// The copies of `keys` on one side; `None` without keys (nothing asked).
async fn copies_of(
    side: &dyn Source,
    keys: &[String],
    name: &str,
) -> Result<Option<Vec<DuplicateCopy>>> {
    if keys.is_empty() {
        return Ok(None);
    }
    side.duplicate_copies(keys)
        .await
        .map(Some)
        .with_context(|| format!("listing the copies of the {name}'s duplicated IDs"))
}

/// Every copy of the external IDs each side holds more than once (the
/// outcome's duplicates), numbered for `duplicate_copies.csv`: one
/// [`Source::duplicate_copies`] call per side that has duplicates, none
/// for a side without. A side that returns fewer copies of a key than its
/// read counted gets a note (into `notes`): its money counted twice is
/// then short.
pub async fn duplicate_copies(
    outcome: &DiffOutcome,
    source: &dyn Source,
    target: &dyn Source,
    notes: &mut Vec<String>,
) -> Result<Vec<CopyRow>> {
    let mut rows = Vec::new();
    let counts: [fn(&Duplicate) -> u32; 2] = [|d| d.source_count, |d| d.target_count];
    let keys = counts.map(|count| {
        outcome
            .duplicates
            .iter()
            .filter(|d| count(d) > 1)
            .map(|d| d.key.clone())
            .collect::<Vec<String>>()
    });
    // A file side's copies were kept by the engine as the file streamed
    // past (in file order, no native ID): only the IDs whose first copy it
    // could not keep are asked of the file. Other sides are asked for all
    // their copies, which carry the system's own IDs.
    let plan = |side: &dyn Source, i: usize| -> (Option<Vec<DuplicateCopy>>, Vec<String>) {
        let Some(c) = outcome
            .copies
            .as_ref()
            .filter(|_| side.as_file_feed().is_some())
        else {
            return (None, keys[i].clone());
        };
        let (kept, unknown) = match i {
            0 => (&c.source, &[][..]),
            _ => (&c.target, &c.target_unknown[..]),
        };
        let kept = kept.iter().map(|record| DuplicateCopy {
            native_id: None,
            record: record.clone(),
        });
        (Some(kept.collect()), unknown.to_vec())
    };
    let ((kept_source, ask_source), (kept_target, ask_target)) = (plan(source, 0), plan(target, 1));
    // Both sides at once (a file side scans its file).
    let (from_source, from_target) = tokio::join!(
        copies_of(source, &ask_source, "source"),
        copies_of(target, &ask_target, "target")
    );
    // None for a side without duplicates, as when nothing was asked.
    let with_kept =
        |kept: Option<Vec<DuplicateCopy>>, asked: Option<Vec<DuplicateCopy>>, i: usize| {
            let Some(mut kept) = kept else { return asked };
            kept.extend(asked.unwrap_or_default());
            (!keys[i].is_empty()).then_some(kept)
        };
    let from_source = with_kept(kept_source, from_source?, 0);
    let from_target = with_kept(kept_target, from_target?, 1);
    for (side, name, count, copies) in [
        (source, "source", counts[0], from_source),
        (target, "target", counts[1], from_target),
    ] {
        let Some(copies) = copies else { continue };
        let numbered = copies::number(name, copies);
        let mut found: HashMap<&str, u32> = HashMap::new();
        for r in &numbered {
            *found.entry(r.record.key.as_str()).or_default() += 1;
        }
        let short: Vec<String> = outcome
            .duplicates
            .iter()
            .filter(|d| count(d) > 1 && found.get(d.key.as_str()).copied().unwrap_or(0) < count(d))
            .map(|d| d.key.clone())
            .collect();
        if !short.is_empty() {
            let note = format!(
                "the {name} ({}) returned fewer copies than its read counted for {} duplicated ID(s) (first: {}); duplicate_copies.csv and the money counted twice leave the missing copies out",
                side.describe(),
                short.len(),
                short[0]
            );
            crate::logging::stderr_line("warning", &note);
            notes.push(format!("warning: {note}"));
        }
        rows.extend(numbered);
    }
    Ok(rows)
}

/// The records a side holds for the keys of `records`, by key. A side read
/// whole holds nothing a lookup could add: asking it again would only read
/// it twice, so the keys are not even collected. Neither does a side whose
/// read saw every key it holds outside the window (`outside`): only those
/// keys are asked for, and none means no second read.
async fn lookup(
    side: &dyn Source,
    records: &Records,
    outside: Option<&Outside>,
    window: Window,
) -> Result<HashMap<String, Record>> {
    // A file whose filter kept every row can add nothing: its keys are not
    // even decoded (40,000 gaps and orphans of the 2M bench files: 11 ms).
    if records.is_empty() || outside.is_some_and(Outside::is_empty) {
        return Ok(HashMap::new());
    }
    // Nor can a side that holds nothing its read left out: one read whole
    // (no time field), or a table first backfilled, every row in the
    // window (one statement instead of a look-up of every key: 200,000
    // gaps into an empty PostgreSQL table, 40 look-ups, about 0.17 s). If
    // it cannot tell, the keys are looked up.
    match side.holds_nothing_outside(window).await {
        Ok(true) => {
            tracing::debug!(
                message =
                    "Edge look-ups skipped: the side holds no record outside the window read.",
                side = side.describe(),
                records = records.len()
            );
            return Ok(HashMap::new());
        }
        Ok(false) => {}
        Err(e) => tracing::debug!(
            message = "Could not tell whether the side holds records outside the window; looking the keys up.",
            error = %e
        ),
    }
    // Keys only: decoding each record's values to read its key was most
    // of a 10M dry run's confirmation (0.07 s for 200,000 gaps and orphans).
    let keys: Vec<String> = records
        .keys()
        .filter(|k| outside.is_none_or(|o| o.may_hold(k)))
        .map(|k| k.into_owned())
        .collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    crate::ops::progress::looked_up(keys.len());
    let found = side.lookup(&keys).await?;
    Ok(found.into_iter().map(|r| (r.key.clone(), r)).collect())
}

/// A pair found by lookup is a match or a mismatch (whose source record
/// is kept for the backfill).
fn settle(
    spec: &DiffSpec,
    outcome: &mut DiffOutcome,
    source: &Record,
    target: &Record,
    sources: &mut Vec<Record>,
) {
    let diffs = compare_pair(spec, source, target);
    if diffs.is_empty() {
        outcome.matched += 1;
    } else {
        outcome.mismatches.push(Mismatch {
            key: source.key.clone(),
            fields: diffs,
        });
        sources.push(source.clone());
    }
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

/// A side whose window read returned nothing although key lookups found
/// the other side's records in it: its time column is probably compared
/// wrongly, so the run must not look clean. One note per such side, also
/// printed as a warning.
fn empty_read_notes(
    outcome: &DiffOutcome,
    gaps_read: usize,
    orphans_read: usize,
    sides: &Sides,
) -> Vec<String> {
    let mut notes = Vec::new();
    let found_in_target = gaps_read - outcome.gaps.len();
    let found_in_source = orphans_read - outcome.orphans.len();
    for (rows, found, side, other, what) in [
        (
            outcome.target_rows,
            found_in_target,
            "target",
            "source",
            sides.target(),
        ),
        (
            outcome.source_rows,
            found_in_source,
            "source",
            "target",
            sides.source.as_ref(),
        ),
    ] {
        if rows == 0 && found > 0 {
            notes.push(format!(
                "warning: the {side}'s window read returned 0 records, yet {found} of the {other}'s records were found in the {side} by key ({}); \
                 check that the {side}'s time column holds the records' times and is compared in UTC",
                what.describe()
            ));
        }
    }
    for n in &notes {
        match n.strip_prefix("warning: ") {
            Some(rest) => crate::logging::stderr_line("warning", rest),
            None => eprintln!("{n}"),
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_core::stream::BoxStream;
    use recon_core::{ConnectorError, Page};

    use super::*;

    /// A side whose lookup returns one record per key, however many it
    /// holds (as a store keyed by a unique ID would), and counts its calls.
    #[derive(Default)]
    struct OnePerKey {
        calls: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Source for OnePerKey {
        fn describe(&self) -> String {
            "one per key".into()
        }

        fn read(&self, _: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
            Box::pin(futures_util::stream::empty())
        }

        async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(keys
                .iter()
                .map(|k| Record {
                    key: k.clone(),
                    values: Vec::new(),
                })
                .collect())
        }
    }

    #[tokio::test]
    async fn a_side_without_duplicates_is_not_asked_and_a_short_answer_is_noted() {
        let outcome = DiffOutcome {
            duplicates: vec![
                Duplicate {
                    key: "a".into(),
                    source_count: 1,
                    target_count: 3,
                },
                Duplicate {
                    key: "b".into(),
                    source_count: 0,
                    target_count: 2,
                },
            ],
            ..DiffOutcome::default()
        };
        let (source, target) = (OnePerKey::default(), OnePerKey::default());
        let mut notes = Vec::new();
        let rows = duplicate_copies(&outcome, &source, &target, &mut notes)
            .await
            .unwrap();
        assert_eq!(source.calls.load(Ordering::SeqCst), 0);
        assert_eq!(target.calls.load(Ordering::SeqCst), 1, "one call per side");
        let seen: Vec<(&str, &str, u32)> = rows
            .iter()
            .map(|r| (r.record.key.as_str(), r.side, r.copy))
            .collect();
        assert_eq!(seen, [("a", "target", 1), ("b", "target", 1)]);
        assert_eq!(
            notes,
            ["warning: the target (one per key) returned fewer copies than its read counted for 2 duplicated ID(s) (first: a); duplicate_copies.csv and the money counted twice leave the missing copies out"]
        );
        // Both sides asked: each notes only the keys it holds twice.
        let mut outcome = outcome;
        outcome.duplicates.push(Duplicate {
            key: "c".into(),
            source_count: 2,
            target_count: 1,
        });
        let mut notes = Vec::new();
        let rows = duplicate_copies(&outcome, &source, &target, &mut notes)
            .await
            .unwrap();
        assert_eq!(source.calls.load(Ordering::SeqCst), 1);
        assert_eq!(rows.len(), 3);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with("warning: the source (one per key) returned fewer copies than its read counted for 1 duplicated ID(s) (first: c)"),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("for 2 duplicated ID(s) (first: a)"),
            "{notes:?}"
        );
    }
}
