//! A source read in parts (on two threads, in any order they take them)
//! makes the diff a single pass makes: same classes, totals, copies,
//! unplaced keys, errors.

use std::fmt::Write as _;
use std::path::Path;

use recon_core::{Field, FieldKind, Schema, ValueRef};
use recon_file::{FileReader, FileSpec};

use super::*;
use crate::diff::{DiffEngine, DiffOutcome, DiffSpec};

fn schema() -> Schema {
    let field = |name: &str, kind| Field {
        name: name.into(),
        kind,
        compared: true,
    };
    Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("status", FieldKind::Text),
        ],
    }
}

fn spec(path: &Path) -> FileSpec {
    FileSpec {
        path: path.to_path_buf(),
        key_column: "id".into(),
        columns: vec!["amount".into(), "status".into()],
        currency_column: Some("currency".into()),
        amount_format: recon_file::AmountFormat::Minor,
        max_record_bytes: recon_file::DEFAULT_MAX_RECORD_BYTES,
    }
}

/// Rows unplaced when their status is empty, skipped when it is `skip`.
fn filter(values: &[ValueRef<'_>]) -> Row {
    match values.get(1) {
        Some(ValueRef::Null) => Row::Unplaced,
        Some(ValueRef::Text("skip")) => Row::Skip,
        _ => Row::Keep,
    }
}

/// What a diff found, comparable: the classes with their records, the
/// totals, and the copies of each duplicated ID (grouped by ID, in the
/// order kept: the order reports list them).
fn view(o: &DiffOutcome) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "rows {} {}", o.source_rows, o.target_rows);
    let _ = writeln!(
        s,
        "records {} {} matched {}",
        o.source_records, o.target_records, o.matched
    );
    let _ = writeln!(s, "gaps {:?}", o.gaps.iter().collect::<Vec<_>>());
    let _ = writeln!(s, "orphans {:?}", o.orphans.iter().collect::<Vec<_>>());
    let _ = writeln!(s, "mismatches {:?}", o.mismatches);
    let _ = writeln!(s, "duplicates {:?}", o.duplicates);
    let _ = writeln!(s, "totals {:?} {:?}", o.source_totals, o.target_totals);
    if let Some(c) = &o.copies {
        let by_key = |records: &[recon_core::Record]| {
            let mut r = records.to_vec();
            r.sort_by(|a, b| a.key.cmp(&b.key));
            r
        };
        let _ = writeln!(
            s,
            "copies {:?} {:?} {:?}",
            by_key(&c.source),
            by_key(&c.target),
            c.target_unknown
        );
    }
    s
}

/// Diffs `source` against `target` (CSV text), both cut into parts of
/// about `part_bytes` (`None`: read whole); with the row filter on the
/// source when `filtered`.
fn diff(
    dir: &Path,
    source: &str,
    target: &str,
    part_bytes: Option<u64>,
    filtered: bool,
) -> Result<(String, Fed)> {
    let filtered = if filtered { Some(Side::Source) } else { None };
    let (view, mut fed) = diff_as(dir, source, target, part_bytes, filtered, false)?;
    Ok((view, fed.remove(0)))
}

/// [`diff`] with the row filter on side `filtered`, the two files fed in
/// one call (as `recon diff` feeds them) or, when `apart`, in one call
/// each (as `recon run` feeds two file sides): what each call found.
fn diff_as(
    dir: &Path,
    source: &str,
    target: &str,
    part_bytes: Option<u64>,
    filtered: Option<Side>,
    apart: bool,
) -> Result<(String, Vec<Fed>)> {
    let (s, t) = (dir.join("source.csv"), dir.join("target.csv"));
    std::fs::write(&s, source)?;
    std::fs::write(&t, target)?;
    let schema = schema();
    let mut engine = DiffEngine::new(DiffSpec::new(schema.clone(), vec![None, None]));
    engine.capture_copies();
    let keep: &(dyn Fn(&[ValueRef<'_>]) -> Row + Sync) = &filter;
    let keep = |side| (filtered == Some(side)).then_some(keep);
    let files = vec![
        (
            FileReader::open(spec(&s), &schema)?,
            Side::Source,
            keep(Side::Source),
        ),
        (
            FileReader::open(spec(&t), &schema)?,
            Side::Target,
            keep(Side::Target),
        ),
    ];
    let mut feed = |files| match part_bytes {
        Some(bytes) => feed_files_split(&mut engine, files, 0, bytes),
        None => feed_files_split(&mut engine, files, u64::MAX, PART_BYTES),
    };
    let fed = if apart {
        let mut files = files;
        let target = files.pop().expect("two files");
        vec![feed(files)?, feed(vec![target])?]
    } else {
        vec![feed(files)?]
    };
    Ok((view(&engine.finish()), fed))
}

/// A source of `n` rows with a little of everything: IDs repeated far
/// apart (three copies of some), quoted cells, empty and `skip` statuses,
/// CRLF line ends when asked; and a target missing some, adding some,
/// changing some.
fn files(n: usize, crlf: bool) -> (String, String) {
    let end = if crlf { "\r\n" } else { "\n" };
    let (mut source, mut target) = (
        format!("id,amount,currency,status{end}"),
        format!("id,amount,currency,status{end}"),
    );
    for i in 0..n {
        let status = match i % 13 {
            0 => "",
            5 => "skip",
            7 => "\"paid, late\"",
            _ => "paid",
        };
        let _ = write!(source, "ch_{i:05},{},usd,{status}{end}", 100 + i);
        // Copies of earlier IDs, far from their first.
        if i % 97 == 0 && i >= n / 2 {
            let _ = write!(source, "ch_{:05},{},usd,paid{end}", i - n / 2, 7 + i);
        }
        if i % 211 == 0 && i >= n / 3 {
            let _ = write!(source, "ch_{:05},{},eur,paid{end}", i - n / 3, 9 + i);
            let _ = write!(source, "ch_{:05},{},eur,paid{end}", i - n / 3, 11 + i);
        }
        match i % 10 {
            0 => {}
            3 => {
                let _ = write!(target, "ch_{i:05},{},usd,{status}{end}", 101 + i);
            }
            _ => {
                let _ = write!(target, "ch_{i:05},{},usd,{status}{end}", 100 + i);
            }
        }
        if i % 50 == 0 {
            let _ = write!(target, "tg_{i:05},5,usd,paid{end}");
        }
    }
    (source, target)
}

#[test]
fn a_source_read_in_parts_is_diffed_as_in_one_pass() {
    for crlf in [false, true] {
        for filtered in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (source, target) = files(6000, crlf);
            let (whole, whole_fed) = diff(dir.path(), &source, &target, None, filtered).unwrap();
            assert_eq!(whole_fed.parts, 1);
            for part_bytes in [2_000, 9_000, 60_000] {
                let (parts, fed) =
                    diff(dir.path(), &source, &target, Some(part_bytes), filtered).unwrap();
                assert!(
                    fed.parts > 1,
                    "cut into parts of {part_bytes} bytes: {}",
                    fed.parts
                );
                assert_eq!(
                    parts, whole,
                    "parts of {part_bytes} bytes, crlf {crlf}, filtered {filtered}"
                );
                assert_eq!(fed.unplaced, whole_fed.unplaced);
                assert_eq!(
                    format!("{:?}", fed.outside),
                    format!("{:?}", whole_fed.outside)
                );
            }
            if filtered {
                assert!(
                    whole_fed.unplaced.len() > 400,
                    "{}",
                    whole_fed.unplaced.len()
                );
                assert!(whole_fed.outside.is_some());
            }
            assert!(whole.contains("copies"), "{whole}");
        }
    }
}

#[test]
fn a_cut_inside_a_quoted_field_reads_the_source_again_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, target) = files(3000, false);
    // A note of many short lines in one quoted cell, in the middle of the
    // file: every cut near it falls inside the quotes.
    let at = source.len() / 2;
    let at = at + source[at..].find('\n').unwrap() + 1;
    let lines: String = (0..400)
        .map(|i| format!("line {i} of the note\n"))
        .collect();
    source.insert_str(at, &format!("ch_quoted,5,usd,\"{lines}\"\n"));
    let (whole, _) = diff(dir.path(), &source, &target, None, false).unwrap();
    let (parts, fed) = diff(dir.path(), &source, &target, Some(1_000), false).unwrap();
    assert_eq!(fed.parts, 1, "read again whole");
    assert_eq!(parts, whole);
    assert!(whole.contains("ch_quoted"));
}

#[test]
fn an_error_in_a_later_part_names_its_line_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, target) = files(4000, false);
    // A row with a field too many, near the end.
    let at = source.len() - 300;
    let at = at + source[at..].find('\n').unwrap() + 1;
    source.insert_str(at, "ch_bad,5,usd,paid,extra\n");
    let line = source[..at].matches('\n').count() + 1;
    let whole = diff(dir.path(), &source, &target, None, false).unwrap_err();
    let parts = diff(dir.path(), &source, &target, Some(3_000), false).unwrap_err();
    assert_eq!(format!("{parts:#}"), format!("{whole:#}"));
    assert!(
        format!("{whole:#}").contains(&format!("line {line}")),
        "{whole:#}"
    );
}

#[test]
fn of_two_errors_the_first_in_the_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = files(4000, false);
    let mut lines: Vec<&str> = source.lines().collect();
    // A bad amount early (in the first part) and a row too short late.
    lines[40] = "ch_early,abc,usd,paid";
    let late = lines.len() - 20;
    lines[late] = "ch_late,5";
    let source = lines.join("\n") + "\n";
    let whole = diff(dir.path(), &source, &target, None, false).unwrap_err();
    let parts = diff(dir.path(), &source, &target, Some(3_000), false).unwrap_err();
    assert_eq!(format!("{parts:#}"), format!("{whole:#}"));
    assert!(format!("{whole:#}").contains("line 41"), "{whole:#}");
    // Only the late error: found in a later part, named by its line.
    let mut lines: Vec<&str> = source.lines().collect();
    lines[40] = "ch_early,1,usd,paid";
    let source = lines.join("\n") + "\n";
    let whole = diff(dir.path(), &source, &target, None, false).unwrap_err();
    let parts = diff(dir.path(), &source, &target, Some(3_000), false).unwrap_err();
    assert_eq!(format!("{parts:#}"), format!("{whole:#}"));
    assert!(
        format!("{whole:#}").contains(&format!("line {}", late + 1)),
        "{whole:#}"
    );
}

/// Parts of several batches each: a cut inside a long quoted note makes
/// the part after it fail at once (it begins inside the note), while the
/// part before may still be being read on the engine's thread (found by
/// review: the part before was then left unfinished, its bad cut never
/// seen, and the valid file failed); the source is read again whole and
/// diffs as in one pass.
#[test]
fn a_part_that_begins_inside_a_quoted_field_fails_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, target) = files(40_000, false);
    // Around the second cut, two thirds of the way in once the note is
    // in: the engine's thread takes part 1 at the start, the reader thread
    // part 2 after part 0, and part 2 begins inside the note.
    let third = source.len() * 2 / 3 - 5_000;
    let at = third + source[third..].find('\n').unwrap() + 1;
    let lines: String = (0..2_000).map(|i| format!("note line {i}\n")).collect();
    source.insert_str(at, &format!("ch_note,5,usd,\"{lines}\"\n"));
    let (whole, _) = diff(dir.path(), &source, &target, None, false).unwrap();
    // Three parts of some 13,000 rows (two batches) each.
    let part_bytes = source.len() as u64 / 3;
    for _ in 0..3 {
        let (parts, fed) = diff(dir.path(), &source, &target, Some(part_bytes), false).unwrap();
        assert_eq!(fed.parts, 1, "read again whole");
        assert_eq!(parts, whole);
    }
}

/// The target's parts are taken in file order, fed with the source (as
/// `recon diff` feeds it) or alone (as `recon run` does), filtered or
/// not: the same classes, the target's copies in file order, its
/// unplaced keys in file order, as one pass.
#[test]
fn a_target_read_in_parts_is_diffed_as_in_one_pass() {
    for crlf in [false, true] {
        for apart in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            // Copies of target IDs far apart (from the source's copies):
            // the same file shapes, sides swapped.
            let (target, source) = files(6000, crlf);
            let filtered = Some(Side::Target);
            let (whole, whole_fed) =
                diff_as(dir.path(), &source, &target, None, filtered, apart).unwrap();
            let whole_fed = whole_fed.last().unwrap();
            assert_eq!(whole_fed.target_parts, 1);
            assert!(
                whole_fed.unplaced.len() > 400,
                "{}",
                whole_fed.unplaced.len()
            );
            assert!(whole.contains("copies"), "{whole}");
            for part_bytes in [2_000, 9_000, 60_000] {
                let (parts, fed) = diff_as(
                    dir.path(),
                    &source,
                    &target,
                    Some(part_bytes),
                    filtered,
                    apart,
                )
                .unwrap();
                let fed = fed.last().unwrap();
                assert!(
                    fed.target_parts > 1 && !fed.target_rest,
                    "cut into parts of {part_bytes} bytes: {} {}",
                    fed.target_parts,
                    fed.target_rest
                );
                assert_eq!(
                    parts, whole,
                    "parts of {part_bytes} bytes, crlf {crlf}, apart {apart}"
                );
                assert_eq!(fed.unplaced, whole_fed.unplaced);
                assert_eq!(
                    format!("{:?}", fed.outside),
                    format!("{:?}", whole_fed.outside)
                );
            }
        }
    }
}

/// A quoted note of many lines in the target: the part whose cut falls
/// inside it ends past its cut, and the rest of the file is read in one
/// pass from there; with CRLF line ends the rest starts after a CR whose
/// LF is the next byte. The diff is one pass's, and an error after the
/// note names its line in the file.
#[test]
fn a_cut_inside_a_quoted_field_of_the_target_reads_its_rest_in_one_pass() {
    for crlf in [false, true] {
        let end = if crlf { "\r\n" } else { "\n" };
        let dir = tempfile::tempdir().unwrap();
        let (source, mut target) = files(3000, crlf);
        let at = target.len() / 2;
        let at = at + target[at..].find('\n').unwrap() + 1;
        let lines: String = (0..400)
            .map(|i| format!("line {i} of the note{end}"))
            .collect();
        target.insert_str(at, &format!("ch_quoted,5,usd,\"{lines}\"{end}"));
        let (whole, _) = diff(dir.path(), &source, &target, None, false).unwrap();
        let (parts, fed) = diff(dir.path(), &source, &target, Some(1_000), false).unwrap();
        assert!(fed.target_rest, "read on in one pass");
        assert!(fed.target_parts > 1, "{}", fed.target_parts);
        assert_eq!(parts, whole);
        assert!(whole.contains("ch_quoted"));
        // A row with a field too many near the end, after the note.
        let bad_at = target.len() - 200;
        let bad_at = bad_at + target[bad_at..].find('\n').unwrap() + 1;
        let mut bad = target.clone();
        bad.insert_str(bad_at, &format!("ch_bad,5,usd,paid,extra{end}"));
        // Lines as a reader counts them: CRLF once, a CR or LF alone once.
        let line = bad[..bad_at].matches('\n').count() + 1;
        let whole = diff(dir.path(), &source, &bad, None, false).unwrap_err();
        let parts = diff(dir.path(), &source, &bad, Some(1_000), false).unwrap_err();
        assert_eq!(format!("{parts:#}"), format!("{whole:#}"));
        assert!(
            format!("{whole:#}").contains(&format!("line {line}")),
            "{whole:#}"
        );
    }
}

/// An error in a later part of the target names its line in the file, and
/// of two errors the first in the file is reported, as in one pass.
#[test]
fn an_error_in_a_part_of_the_target_is_the_one_pass_error() {
    for crlf in [false, true] {
        let end = if crlf { "\r\n" } else { "\n" };
        let dir = tempfile::tempdir().unwrap();
        let (source, target) = files(4000, crlf);
        let mut lines: Vec<&str> = target.lines().map(|l| l.trim_end_matches('\r')).collect();
        let (early, late) = (30, lines.len() - 20);
        lines[late] = "ch_late,5";
        let one = lines.join(end) + end;
        lines[early] = "ch_early,abc,usd,paid";
        let two = lines.join(end) + end;
        for (target, line) in [(one, late + 1), (two, early + 1)] {
            let whole = diff(dir.path(), &source, &target, None, false).unwrap_err();
            for part_bytes in [1_500, 3_000] {
                let parts =
                    diff(dir.path(), &source, &target, Some(part_bytes), false).unwrap_err();
                assert_eq!(format!("{parts:#}"), format!("{whole:#}"));
            }
            assert!(
                format!("{whole:#}").contains(&format!("target.csv line {line}")),
                "{whole:#}"
            );
        }
    }
}

/// Parts of several batches: a long note around the second cut makes the
/// part after it begin inside the note (it fails, or reads the note's
/// lines as records), whichever thread reads it and whenever; nothing
/// fails and the diff is one pass's.
#[test]
fn a_target_part_that_begins_inside_a_quoted_field_fails_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (source, mut target) = files(40_000, false);
    let third = target.len() * 2 / 3 - 5_000;
    let at = third + target[third..].find('\n').unwrap() + 1;
    // Lines that read as records of a bad shape, and some as good ones.
    let lines: String = (0..2_000)
        .map(|i| match i % 3 {
            0 => format!("nt_{i},{i},usd,paid\n"),
            _ => format!("note line {i}\n"),
        })
        .collect();
    target.insert_str(at, &format!("ch_note,5,usd,\"{lines}\"\n"));
    let (whole, _) = diff(dir.path(), &source, &target, None, false).unwrap();
    // The note's lines are one field of one record, never records.
    assert!(!whole.contains("\"nt_3\""));
    assert!(whole.contains("\"ch_note\""));
    let part_bytes = target.len() as u64 / 3;
    for _ in 0..3 {
        let (parts, fed) = diff(dir.path(), &source, &target, Some(part_bytes), false).unwrap();
        assert!(fed.target_rest);
        assert_eq!(parts, whole);
    }
}

/// Parts of a few dozen rows each, read again and again: the two threads
/// hand parts over hundreds of times per read, in whatever interleaving
/// the scheduler makes (the engine's thread reading a part in turn, a
/// cut inside a note settled while the other thread is mid-part); every
/// read diffs as one pass.
#[test]
fn target_parts_in_any_interleaving_diff_as_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (source, mut target) = files(4000, false);
    let at = target.len() * 3 / 4;
    let at = at + target[at..].find('\n').unwrap() + 1;
    let note: String = (0..60).map(|i| format!("nt_{i},{i},usd,paid\n")).collect();
    let with_note = {
        let mut t = target.clone();
        t.insert_str(at, &format!("ch_note,5,usd,\"{note}\"\n"));
        t
    };
    for (target, rest) in [(std::mem::take(&mut target), false), (with_note, true)] {
        let (whole, whole_fed) = diff(dir.path(), &source, &target, None, true).unwrap();
        for round in 0..12 {
            let (parts, fed) = diff(dir.path(), &source, &target, Some(700), true).unwrap();
            assert!(fed.target_parts > 20, "{}", fed.target_parts);
            assert_eq!(fed.target_rest, rest, "round {round}");
            assert_eq!(parts, whole, "round {round}");
            assert_eq!(fed.unplaced, whole_fed.unplaced, "round {round}");
        }
    }
}
