//! Report writers: the CSV and JSON files finance reads.
//!
//! Files are written into a staging folder beside the destination and moved
//! into place only once every file is complete, `summary.json` last; a run
//! that fails part-way leaves the destination as it was.

pub mod copies;
mod files;
pub mod html;
mod staging;
pub mod summary;
#[cfg(test)]
mod top_tests;

pub use files::{
    summary_of, write_backfill_csv, write_diff_files, write_diff_reports, write_summary,
    BackfillOutcome, BackfillRow, GapsFile, GapsWriting, HistoryMap, InOrder, PlanLines,
    ResolvedRow, RunExtras, RunMeta, UnplacedRow,
};
pub use staging::ReportDir;
pub use summary::{Class, RunSummary};

use std::borrow::Cow;

/// Neutralises a cell that a spreadsheet would run as a formula (one
/// starting with `=`, `+`, `-`, `@`, tab or carriage return) by prefixing a
/// single quote, as OWASP recommends. Plain numbers such as `-12.50` stay
/// numbers.
pub fn neutralise(cell: &str) -> Cow<'_, str> {
    match cell.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r') if !is_plain_number(cell) => {
            Cow::Owned(format!("'{cell}"))
        }
        _ => Cow::Borrowed(cell),
    }
}

fn is_plain_number(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
}

/// A CSV writer with RFC 4180 quoting and CRLF line ends, whose every cell
/// goes through [`neutralise`].
pub struct CsvReport<W: std::io::Write> {
    inner: csv::Writer<W>,
}

impl<W: std::io::Write> CsvReport<W> {
    /// Starts a report with its header row.
    pub fn new(writer: W, header: &[&str]) -> std::io::Result<CsvReport<W>> {
        let mut inner = csv::WriterBuilder::new()
            .terminator(csv::Terminator::CRLF)
            .quote_style(csv::QuoteStyle::Necessary)
            .from_writer(writer);
        inner.write_record(header.iter().map(|h| neutralise(h).into_owned()))?;
        Ok(CsvReport { inner })
    }

    /// Writes one row.
    pub fn row<I, S>(&mut self, cells: I) -> std::io::Result<()>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        // Field by field: a cell is copied only when neutralised (a report
        // of 100,000 rows made a million strings here).
        for c in cells {
            self.inner.write_field(neutralise(c.as_ref()).as_bytes())?;
        }
        // An empty record after fields ends the row.
        self.inner.write_record(None::<&[u8]>)?;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> std::io::Result<W> {
        self.inner
            .into_inner()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(rows: &[&[&str]]) -> String {
        let mut w = CsvReport::new(Vec::new(), &["id", "note"]).unwrap();
        for r in rows {
            w.row(r.iter()).unwrap();
        }
        String::from_utf8(w.finish().unwrap()).unwrap()
    }

    #[test]
    fn quotes_commas_quotes_and_newlines_per_rfc_4180() {
        let out = write(&[&["a,b", "say \"hi\""], &["multi\nline", "x\r\ny"]]);
        assert_eq!(
            out,
            "id,note\r\n\"a,b\",\"say \"\"hi\"\"\"\r\n\"multi\nline\",\"x\r\ny\"\r\n"
        );
    }

    #[test]
    fn keeps_utf8_as_is() {
        let out = write(&[&["ch_1", "Zoë – 東京 – 💶"]]);
        assert!(out.contains("Zoë – 東京 – 💶"));
    }

    #[test]
    fn neutralises_formulas_but_not_numbers() {
        for f in [
            "=SUM(A1:A9)",
            "+cmd|' /C calc'!A0",
            "-2+3",
            "@SUM(1)",
            "\tx",
            "\rx",
            "-",
            "+",
        ] {
            assert_eq!(neutralise(f), format!("'{f}"), "{f:?}");
        }
        for n in ["-12.50", "+3", "-0.001", "42", "29.99", "ch_123", "", "a=b"] {
            assert_eq!(neutralise(n), n, "{n:?}");
        }
        let out = write(&[&["=1+1", "-5.00"]]);
        assert_eq!(out.lines().nth(1).unwrap(), "'=1+1,-5.00");
    }
}
