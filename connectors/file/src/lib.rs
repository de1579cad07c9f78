//! CSV and JSON Lines export files as a recon source or target.
//!
//! Files are streamed: a CSV row or a JSONL line is read into a reused
//! buffer, turned into typed [`ValueRef`]s that borrow from it, handed to the
//! caller, and forgotten. Nothing ever holds a whole file as rows, so a 10
//! GB export diffs in the memory of one side's keys.
//!
//! Every error names the file and the line (1-based, counting the header
//! line of a CSV), and says what was expected.

mod convert;
mod json;
mod scan;
mod settings;
mod source;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use recon_core::{ConnectorError, FieldKind, Location, Schema, ValueRef};

pub use settings::FileSettings;
pub use source::FileSource;

use convert::{convert, convert_fast, Cell, CurrencyCache};

/// The two export formats, chosen by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// RFC 4180 CSV with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl Format {
    /// `.csv` is CSV, `.jsonl`/`.ndjson` is JSON Lines.
    pub fn from_path(path: &Path) -> Result<Format, ConnectorError> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("csv") => Ok(Format::Csv),
            Some("jsonl") | Some("ndjson") => Ok(Format::Jsonl),
            _ => Err(ConnectorError::Config(format!(
                "{}: unknown file type; name it .csv or .jsonl",
                path.display()
            ))),
        }
    }
}

pub use recon_core::AmountFormat;

/// Which file columns feed which canonical fields.
#[derive(Clone, Debug)]
pub struct FileSpec {
    /// The file.
    pub path: PathBuf,
    /// Column (or JSON path, dotted) holding the external ID.
    pub key_column: String,
    /// For each schema field in order, the column (or dotted JSON path) holding it.
    pub columns: Vec<String>,
    /// Column holding the currency of money fields; `None` when the file has no money.
    pub currency_column: Option<String>,
    /// How amounts are written.
    pub amount_format: AmountFormat,
    /// Longest record (CSV row or JSON line) read, in bytes; a longer one
    /// stops the read with an error naming the line and this setting
    /// ([`DEFAULT_MAX_RECORD_BYTES`] unless configured).
    pub max_record_bytes: usize,
}

/// The default longest record: 64 MiB. A file without line ends (or with a
/// runaway quote) then costs at most this much memory, not its size.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 64 << 20;

/// How many names an error message lists before it says how many more.
const NAMES_SHOWN: usize = 20;

/// `names` for a message: the first [`NAMES_SHOWN`], each cut to 60
/// characters, then how many more there are (a hostile header may hold a
/// million columns).
fn shown_names(names: &[String]) -> String {
    let mut out: Vec<String> = names
        .iter()
        .take(NAMES_SHOWN)
        .map(|n| {
            if n.chars().count() > 60 {
                format!("{}…", n.chars().take(60).collect::<String>())
            } else {
                n.clone()
            }
        })
        .collect();
    if names.len() > NAMES_SHOWN {
        out.push(format!("… and {} more", names.len() - NAMES_SHOWN));
    }
    out.join(", ")
}

/// The message of a record longer than `limit`.
fn too_long(limit: usize) -> String {
    format!(
        "a record longer than {} (max_record_bytes): the file has no line end here, or a quote is never closed. \
         If records really are this long, raise max_record_bytes in the file's settings",
        human_bytes(limit)
    )
}

fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// Where a CSV reader stands between two records ([`FileReader::place`]):
/// the byte the next record starts at, its line, and whether the last
/// record ended with a CR whose LF, if next, belongs to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Bytes of the file before the next record.
    pub position: u64,
    /// The next record's line.
    pub line: u64,
    /// The last record ended with CR.
    pub pending_lf: bool,
}

/// A reader of the file a [`FileReader`] opened, at a position of its
/// own (positional reads, so readers on several threads share one open
/// file without sharing an offset). Every part, rest and second pass of a
/// read goes through the file the first open found: an export replaced
/// while it is read (written under a temporary name and renamed over the
/// path, as export jobs do) or removed is still read whole as it was,
/// never half one version and half the next.
#[derive(Debug)]
struct Handle {
    file: Arc<File>,
    pos: u64,
}

impl Handle {
    /// A reader of `file` from `pos`.
    fn at(file: &Arc<File>, pos: u64) -> Handle {
        Handle {
            file: Arc::clone(file),
            pos,
        }
    }
}

impl Read for Handle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(&*self.file, buf, self.pos)?;
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_read(&*self.file, buf, self.pos)?;
        #[cfg(not(any(unix, windows)))]
        compile_error!("recon-file reads export files with positional reads: Unix or Windows");
        self.pos += n as u64;
        Ok(n)
    }
}

/// A streaming reader over one export file.
pub struct FileReader {
    spec: FileSpec,
    schema: Schema,
    kinds: Vec<FieldKind>,
    /// The open file: parts and second passes read it, not the path.
    file: Arc<File>,
    inner: Inner,
    display: String,
    file_len: u64,
    /// Where this reader's part of a file begins ([`FileReader::part`]).
    part_start: u64,
    /// Where this reader's part ends, when it ends before the file.
    stop: Option<u64>,
}

enum Inner {
    Csv {
        scanner: scan::Scanner<Handle>,
        width: usize,
        key_idx: usize,
        idx: Vec<usize>,
        currency_idx: Option<usize>,
    },
    Jsonl {
        reader: BufReader<Handle>,
        line_no: u64,
        checked_first: bool,
        bytes: u64,
    },
}

const BUFFER: usize = 1 << 20;

/// Bytes searched for a line feed at each place a file is cut.
const CUT_SEARCH: usize = 1 << 20;

/// Bytes read at a time while looking for a cut's line end: a row is far
/// shorter, so one read nearly always finds it. (Reading all of
/// `CUT_SEARCH` for each cut copied 1 MiB per part: 280 MB and 18-55 ms
/// on one thread before the 10M bench pair's read could start.)
const CUT_STEP: usize = 16 << 10;

/// Where the first line end at or after `from` is, relative to `from`,
/// within [`CUT_SEARCH`] bytes; `buf` is read into, [`CUT_STEP`] at a time.
fn line_end_near(file: &Arc<File>, from: u64, buf: &mut [u8]) -> std::io::Result<Option<u64>> {
    let mut reader = Handle::at(file, from).take(CUT_SEARCH as u64);
    let mut scanned = 0u64;
    loop {
        let n = match reader.read(buf) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if let Some(p) = buf[..n].iter().position(|&b| b == b'\n') {
            return Ok(Some(scanned + p as u64));
        }
        scanned += n as u64;
    }
}

impl FileReader {
    /// Opens the file and checks that every needed column exists.
    pub fn open(spec: FileSpec, schema: &Schema) -> Result<FileReader, ConnectorError> {
        let file = File::open(&spec.path).map_err(|source| ConnectorError::Io {
            what: spec.path.display().to_string(),
            source,
        })?;
        FileReader::of_file(spec, schema, Arc::new(file))
    }

    /// The open file this reader reads (for [`FileSource`]'s later reads).
    pub fn shared_file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// A reader from the start of `file`, opened from `spec`'s path.
    pub(crate) fn of_file(
        spec: FileSpec,
        schema: &Schema,
        file: Arc<File>,
    ) -> Result<FileReader, ConnectorError> {
        let display = spec.path.display().to_string();
        let format = Format::from_path(&spec.path)?;
        if spec.columns.len() != schema.fields.len() {
            return Err(ConnectorError::Config(format!(
                "{display}: {} columns mapped for {} fields",
                spec.columns.len(),
                schema.fields.len()
            )));
        }
        if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(ConnectorError::Config(format!(
                "{display} is a folder; expected a .csv or .jsonl file"
            )));
        }
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if file_len == 0 {
            return Err(ConnectorError::Malformed {
                location: Location(format!("{display} line 1")),
                message: match format {
                    Format::Csv => "file is empty; expected a header row naming the columns".into(),
                    Format::Jsonl => "file is empty; expected one JSON object per line".into(),
                },
            });
        }
        let kinds = schema.fields.iter().map(|f| f.kind).collect::<Vec<_>>();
        let needs_currency = kinds.contains(&FieldKind::Money);
        if needs_currency && spec.currency_column.is_none() {
            return Err(ConnectorError::Config(format!(
                "{display}: money fields need a currency column"
            )));
        }
        let inner = match format {
            Format::Csv => open_csv(
                Handle::at(&file, 0),
                &spec,
                schema,
                &display,
                needs_currency,
            )?,
            Format::Jsonl => Inner::Jsonl {
                reader: BufReader::with_capacity(BUFFER, Handle::at(&file, 0)),
                line_no: 0,
                checked_first: false,
                bytes: 0,
            },
        };
        Ok(FileReader {
            spec,
            schema: schema.clone(),
            kinds,
            file,
            inner,
            display,
            file_len,
            part_start: 0,
            stop: None,
        })
    }

    /// The same file read again from its start, whole (the file this
    /// reader opened, whatever its path now names).
    pub fn reopen(&self) -> Result<FileReader, ConnectorError> {
        FileReader::of_file(self.spec.clone(), &self.schema, self.shared_file())
    }

    /// Where to cut a CSV file of at least `min_len` bytes, not yet read
    /// past its header, into about `parts` parts read on their own: the
    /// start of its rows, line ends near each `1/parts` of them, and its
    /// end. `None` for JSON Lines, a smaller file, or no line feed near a
    /// cut. This reader then reads the first part ([`FileReader::part`]
    /// opens the others).
    ///
    /// A line end is a record's end unless it lies inside a quoted field,
    /// which only the part before can tell by reading up to it: the parts
    /// make the file's records when each but the last
    /// [`FileReader::ended_at_stop`]. A later part's line numbers count
    /// from its first line.
    pub fn cut(&mut self, parts: usize, min_len: u64) -> Result<Option<Vec<u64>>, ConnectorError> {
        let Inner::Csv { scanner, .. } = &mut self.inner else {
            return Ok(None);
        };
        let data_start = scanner.position();
        if parts < 2
            || self.file_len < min_len.max(2)
            || self.stop.is_some()
            || self.part_start != 0
        {
            return Ok(None);
        }
        let io = |source| ConnectorError::Io {
            what: self.display.clone(),
            source,
        };
        let rows = self.file_len - data_start;
        let mut cuts = vec![data_start];
        let mut near = vec![0u8; CUT_STEP];
        for i in 1..parts as u64 {
            let from = (data_start + rows * i / parts as u64).max(*cuts.last().expect("one cut"));
            let Some(nl) = line_end_near(&self.file, from, &mut near).map_err(io)? else {
                return Ok(None);
            };
            let at = from + nl + 1;
            if at >= self.file_len {
                break;
            }
            if at > *cuts.last().expect("one cut") {
                cuts.push(at);
            }
        }
        if cuts.len() < 2 {
            return Ok(None);
        }
        cuts.push(self.file_len);
        scanner.stop_at(cuts[1]);
        self.stop = Some(cuts[1]);
        Ok(Some(cuts))
    }

    /// The part of a file [`FileReader::cut`] made from `start` (a cut, not
    /// the first) to `end`, read through the file this reader opened, at a position of its own.
    pub fn part(&self, start: u64, end: u64) -> Result<FileReader, ConnectorError> {
        self.part_at_line(start, end, 1)
    }

    /// The rest of a CSV file from `place`, where a reader of it stood
    /// after a record, its line made the file's: its records, and any
    /// error, are named by their lines in the file, as a single pass
    /// names them.
    pub fn rest(&self, place: Place) -> Result<FileReader, ConnectorError> {
        let mut rest = self.part_at_line(place.position, self.file_len, place.line)?;
        if let Inner::Csv { scanner, .. } = &mut rest.inner {
            scanner.set_pending_lf(place.pending_lf);
        }
        Ok(rest)
    }

    /// Where this reader stands, after its last record (`None` for JSON
    /// Lines): the line counts from the part's start for a part, from the
    /// file's for a whole file or [`FileReader::rest`].
    pub fn place(&self) -> Option<Place> {
        match &self.inner {
            Inner::Csv { scanner, .. } => Some(Place {
                position: scanner.position(),
                line: scanner.line(),
                pending_lf: scanner.pending_lf(),
            }),
            Inner::Jsonl { .. } => None,
        }
    }

    fn part_at_line(&self, start: u64, end: u64, line: u64) -> Result<FileReader, ConnectorError> {
        let Inner::Csv {
            width,
            key_idx,
            idx,
            currency_idx,
            ..
        } = &self.inner
        else {
            return Err(ConnectorError::Config(format!(
                "{}: only a CSV file is read in parts",
                self.display
            )));
        };
        let mut part = scan::Scanner::resume(
            Handle::at(&self.file, start),
            self.spec.max_record_bytes,
            start,
        );
        part.set_line(line);
        part.limit_fields(*width);
        let stop = (end < self.file_len).then_some(end);
        if let Some(end) = stop {
            part.stop_at(end);
        }
        Ok(FileReader {
            spec: self.spec.clone(),
            schema: self.schema.clone(),
            kinds: self.kinds.clone(),
            file: self.shared_file(),
            inner: Inner::Csv {
                scanner: part,
                width: *width,
                key_idx: *key_idx,
                idx: idx.clone(),
                currency_idx: *currency_idx,
            },
            display: self.display.clone(),
            file_len: self.file_len,
            part_start: start,
            stop,
        })
    }

    /// For a part that ends at a cut, once read: whether it ended exactly
    /// there, so that the next part began at a record's start (false when
    /// a quoted field ran across the cut). True for a part that ends with
    /// the file.
    pub fn ended_at_stop(&self) -> bool {
        match (&self.inner, self.stop) {
            (Inner::Csv { scanner, .. }, Some(at)) => scanner.position() == at,
            _ => true,
        }
    }

    /// Bytes consumed so far (of this reader's part, for a file read in parts) and
    /// the file's size, for progress and for sizing indexes ahead of time.
    pub fn progress(&self) -> (u64, u64) {
        let read = match &self.inner {
            Inner::Csv { scanner, .. } => scanner.position(),
            Inner::Jsonl { bytes, .. } => *bytes,
        };
        (read - self.part_start, self.file_len)
    }

    /// A short name for messages: the path.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// Calls `f` with the key and values of every record in file order.
    /// Values borrow from the reader's buffer and live only for the call.
    /// `f` returns the caller's own error type, wrapped in [`ReadError::Caller`].
    pub fn for_each<E>(
        &mut self,
        mut f: impl FnMut(&str, &[ValueRef<'_>], &dyn Fn() -> Location) -> Result<(), E>,
    ) -> Result<(), ReadError<E>> {
        self.for_each_while(|k, v, l| f(k, v, l).map(|()| true))
            .map(|_| ())
    }

    /// Like [`FileReader::for_each`], but stops after the record for which
    /// `f` returns `false`; the next call continues with the following
    /// record. Returns whether the end of the file was reached.
    pub fn for_each_while<E>(
        &mut self,
        f: impl FnMut(&str, &[ValueRef<'_>], &dyn Fn() -> Location) -> Result<bool, E>,
    ) -> Result<bool, ReadError<E>> {
        self.read_rows(None, f)
    }

    /// Like [`FileReader::for_each`], over the rows whose key `keep`
    /// accepts: the others are scanned and checked for their shape but
    /// their values are never converted (a lookup of a few keys in a large
    /// export costs little more than a scan).
    pub fn for_each_of_keys<E>(
        &mut self,
        keep: &dyn Fn(&str) -> bool,
        mut f: impl FnMut(&str, &[ValueRef<'_>], &dyn Fn() -> Location) -> Result<(), E>,
    ) -> Result<(), ReadError<E>> {
        self.read_rows(Some(keep), |k, v, l| f(k, v, l).map(|()| true))
            .map(|_| ())
    }

    fn read_rows<E>(
        &mut self,
        keep: Option<&dyn Fn(&str) -> bool>,
        mut f: impl FnMut(&str, &[ValueRef<'_>], &dyn Fn() -> Location) -> Result<bool, E>,
    ) -> Result<bool, ReadError<E>> {
        let FileReader {
            spec,
            kinds,
            inner,
            display,
            ..
        } = self;
        let cx = RowCx {
            display,
            spec,
            kinds,
            keep,
        };
        match inner {
            Inner::Csv {
                scanner,
                width,
                key_idx,
                idx,
                currency_idx,
            } => {
                let csv = CsvColumns {
                    width: *width,
                    key_idx: *key_idx,
                    idx,
                    currency_idx: *currency_idx,
                };
                csv_while(&cx, scanner, &csv, &mut f)
            }
            Inner::Jsonl {
                reader,
                line_no,
                checked_first,
                bytes,
            } => jsonl_while(&cx, reader, (line_no, checked_first, bytes), &mut f),
        }
    }
}

/// What every row of one file is read with: its name for messages, its
/// spec and the kind of each field.
struct RowCx<'r> {
    display: &'r str,
    spec: &'r FileSpec,
    kinds: &'r [FieldKind],
    /// Only rows whose key this accepts are converted and handed on.
    keep: Option<&'r dyn Fn(&str) -> bool>,
}

/// Where a CSV file's key, fields and currency are among its columns.
struct CsvColumns<'r> {
    width: usize,
    key_idx: usize,
    idx: &'r [usize],
    currency_idx: Option<usize>,
}

impl RowCx<'_> {
    /// Converts one row's cells into `values`, in the schema's order; an
    /// error names the location, column and currency column.
    #[inline]
    fn convert_row<'v, E>(
        &self,
        cells: impl Iterator<Item = Cell<'v>>,
        currency: Option<&'v str>,
        cache: &mut CurrencyCache,
        location: &dyn Fn() -> Location,
        values: &mut Vec<ValueRef<'v>>,
    ) -> Result<(), ReadError<E>> {
        let amount_format = self.spec.amount_format;
        // Once for the row, not per cell: its amounts and its currency
        // column itself, when compared, name the same code.
        let row_currency = currency.and_then(|c| cache.cached(c));
        for (k, (cell, &kind)) in cells.zip(self.kinds).enumerate() {
            // Text needs no conversion: no call, and no value returned
            // through memory (reloading it stalled the reader, measured).
            // Other common cells are read inline, the rest by convert.
            // Each arm pushes its own value: a value built in one arm and
            // pushed after the match went through the stack, and a
            // timestamp's halves were reloaded from it with loads the
            // store buffer could not forward (17% of a Unix-seconds read
            // in perf annotate).
            match (cell, kind) {
                (Cell::Text(t), FieldKind::Text) if !t.is_empty() => values.push(ValueRef::Text(t)),
                (cell, kind) => {
                    match convert_fast(cell, kind, currency, row_currency, amount_format, cache) {
                        Some(v) => values.push(v),
                        None => values.push(
                            convert(cell, kind, currency, amount_format, cache).map_err(|m| {
                                ReadError::Connector(m.at(
                                    location(),
                                    &self.spec.columns[k],
                                    self.spec.currency_column.as_deref(),
                                ))
                            })?,
                        ),
                    }
                }
            }
        }
        Ok(())
    }

    fn malformed<E>(&self, location: Location, message: String) -> ReadError<E> {
        ReadError::Connector(ConnectorError::Malformed { location, message })
    }
}

/// [`FileReader::for_each_while`] over a CSV file: one scanned record at a
/// time, its cells converted in place.
fn csv_while<E>(
    cx: &RowCx<'_>,
    scanner: &mut scan::Scanner<Handle>,
    csv: &CsvColumns<'_>,
    f: &mut impl FnMut(&str, &[ValueRef<'_>], &dyn Fn() -> Location) -> Result<bool, E>,
) -> Result<bool, ReadError<E>> {
    let display = cx.display;
    // One allocation for the whole file, recycled between rows (the
    // in-place collect keeps the buffer while changing its lifetime).
    let mut recycled: Vec<ValueRef<'static>> = Vec::with_capacity(cx.kinds.len());
    let mut cache = CurrencyCache::default();
    loop {
        match scanner.next_record() {
            Ok(true) => {}
            Ok(false) => return Ok(true),
            Err(e) => return Err(ReadError::Connector(scan_error(display, e))),
        }
        let line = scanner.record_line();
        let location = || Location(format!("{display} line {line}"));
        let row = scanner
            .fields()
            .map_err(|e| ReadError::Connector(scan_error(display, e)))?;
        if row.len() != csv.width {
            return Err(cx.malformed(
                location(),
                format!(
                    "row has {} fields but the header has {}; check for an unquoted comma or a missing field",
                    row.len(),
                    csv.width
                ),
            ));
        }
        let text = |i: usize| -> &str { row.get(i) };
        // Surrounding whitespace is never part of an external ID.
        let key = trim_key(text(csv.key_idx));
        if key.is_empty() {
            return Err(cx.malformed(
                location(),
                format!("empty key in column `{}`", cx.spec.key_column),
            ));
        }
        if cx.keep.is_some_and(|keep| !keep(key)) {
            continue;
        }
        let currency = csv.currency_idx.map(text);
        let mut values: Vec<ValueRef<'_>> = recycle(recycled);
        let cells = csv.idx.iter().map(|&i| Cell::Text(text(i)));
        cx.convert_row(cells, currency, &mut cache, &location, &mut values)?;
        let more = f(key, &values, &location).map_err(ReadError::Caller)?;
        values.clear();
        recycled = recycle(values);
        if !more {
            return Ok(false);
        }
    }
}

/// `key` without surrounding whitespace: as `str::trim`, which is called
/// only when an end is not a printable ASCII byte (`trim` was not
/// inlined, and cost a call per row: 0.9% of a 10M-row diff).
#[inline]
fn trim_key(key: &str) -> &str {
    match key.as_bytes() {
        [first, .., last] if (0x21..0x80).contains(first) && (0x21..0x80).contains(last) => key,
        _ => key.trim(),
    }
}

/// [`FileReader::for_each_while`] over a JSON Lines file: one line, one
/// object, at a time. `(line_no, checked_first, bytes)` carry on between
/// calls.
fn jsonl_while<E>(
    cx: &RowCx<'_>,
    reader: &mut BufReader<Handle>,
    (line_no, checked_first, bytes): (&mut u64, &mut bool, &mut u64),
    f: &mut impl FnMut(&str, &[ValueRef<'_>], &dyn Fn() -> Location) -> Result<bool, E>,
) -> Result<bool, ReadError<E>> {
    let display = cx.display;
    let mut recycled: Vec<ValueRef<'static>> = Vec::with_capacity(cx.kinds.len());
    let mut cache = CurrencyCache::default();
    let mut raw: Vec<u8> = Vec::new();
    loop {
        let Some(n) = read_line(cx, reader, *line_no, &mut raw)? else {
            return Ok(true);
        };
        *bytes += n as u64;
        *line_no += 1;
        let ln = *line_no;
        let location = || Location(format!("{display} line {ln}"));
        let line = std::str::from_utf8(&raw).map_err(|e| {
            cx.malformed(
                location(),
                format!(
                    "not valid UTF-8 (byte {} of the line); save the export as UTF-8",
                    e.valid_up_to() + 1
                ),
            )
        })?;
        let mut trimmed = line.trim();
        if ln == 1 {
            // Some Windows tools start UTF-8 files with a byte-order mark.
            trimmed = trimmed.trim_start_matches('\u{feff}');
        }
        if trimmed.is_empty() {
            continue;
        }
        let obj = json::parse_object(trimmed)
            .map_err(|e| cx.malformed(location(), json_line_message(e)))?;
        if !*checked_first {
            check_first_object(cx, &obj, &location)?;
            *checked_first = true;
        }
        let key = json_key(cx, &obj, &location)?;
        if cx.keep.is_some_and(|keep| !keep(&key)) {
            continue;
        }
        let currency_owned = match &cx.spec.currency_column {
            Some(c) if cx.kinds.contains(&FieldKind::Money) => json_text(json_path(&obj, c)),
            _ => None,
        };
        let currency = Some(currency_owned.as_deref().unwrap_or(""));
        let texts: Vec<Option<String>> = (cx.spec.columns.iter())
            .map(|c| json_text(json_path(&obj, c)))
            .collect();
        let mut values: Vec<ValueRef<'_>> = recycle(recycled);
        let cells = texts.iter().map(|cell| match cell {
            Some(s) => Cell::Text(s),
            None => Cell::Null,
        });
        cx.convert_row(cells, currency, &mut cache, &location, &mut values)?;
        let more = f(&key, &values, &location).map_err(ReadError::Caller)?;
        values.clear();
        recycled = recycle(values);
        if !more {
            return Ok(false);
        }
    }
}

/// Reads the next line into `raw`: its length in bytes, `None` at the end
/// of the file. At most one byte past the record limit is read, however
/// long the line.
fn read_line<E>(
    cx: &RowCx<'_>,
    reader: &mut BufReader<Handle>,
    line_no: u64,
    raw: &mut Vec<u8>,
) -> Result<Option<usize>, ReadError<E>> {
    raw.clear();
    let limit = cx.spec.max_record_bytes;
    let n = std::io::Read::take(&mut *reader, limit.saturating_add(1) as u64)
        .read_until(b'\n', raw)
        .map_err(|source| {
            ReadError::Connector(ConnectorError::Io {
                what: cx.display.to_string(),
                source,
            })
        })?;
    if raw.len() > limit && raw.last() != Some(&b'\n') {
        return Err(cx.malformed(
            Location(format!("{} line {}", cx.display, line_no + 1)),
            too_long(limit),
        ));
    }
    Ok((n > 0).then_some(n))
}

/// What a JSON line that is not one object is told.
fn json_line_message(e: json::JsonLineError) -> String {
    match e {
        json::JsonLineError::Syntax(e) => {
            // serde's message ends "at line 1 column N"; the line is ours.
            let what = e.to_string();
            let what = what.split(" at line ").next().unwrap_or_default();
            format!(
                "malformed JSON at column {}: {what}; expected one JSON object per line",
                e.column()
            )
        }
        json::JsonLineError::NotObject => "expected a JSON object".into(),
        json::JsonLineError::Duplicate(field) => format!(
            "field `{field}` appears more than once in this object; \
             remove the repeated one so it is clear which value to read"
        ),
    }
}

/// Columns missing from the first object are a wrong name, not sparse
/// data: say so at once.
fn check_first_object<E>(
    cx: &RowCx<'_>,
    obj: &serde_json::Value,
    location: &dyn Fn() -> Location,
) -> Result<(), ReadError<E>> {
    let mut needed = vec![("key", &cx.spec.key_column)];
    needed.extend(cx.spec.columns.iter().map(|c| ("compare", c)));
    if let Some(c) = &cx.spec.currency_column {
        if cx.kinds.contains(&FieldKind::Money) {
            needed.push(("currency", c));
        }
    }
    for (role, col) in needed {
        if json_path(obj, col).is_none() {
            let present = obj
                .as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            return Err(ReadError::Connector(ConnectorError::MissingField {
                location: location(),
                message: format!(
                    "{role} field `{col}` not found in the first object; fields are: {present}"
                ),
            }));
        }
    }
    Ok(())
}

/// The object's external ID: a non-empty string (trimmed) or a number.
fn json_key<E>(
    cx: &RowCx<'_>,
    obj: &serde_json::Value,
    location: &dyn Fn() -> Location,
) -> Result<String, ReadError<E>> {
    match json_path(obj, &cx.spec.key_column) {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        // Numbers arrive as their text from `json::parse_object`:
        // `3.0` stays `3.0`, IDs above 2^64 stay distinct.
        Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
        _ => Err(cx.malformed(
            location(),
            format!(
                "key `{}` is missing, empty or not a string or number",
                cx.spec.key_column
            ),
        )),
    }
}

/// Reads a CSV file's header and finds the key, each field's column and
/// the currency column in it.
fn open_csv(
    file: Handle,
    spec: &FileSpec,
    schema: &Schema,
    display: &str,
    needs_currency: bool,
) -> Result<Inner, ConnectorError> {
    let mut scanner = scan::Scanner::new(file, spec.max_record_bytes);
    let header_location = Location(format!("{display} line 1"));
    let has_header = scanner.next_record().map_err(|e| scan_error(display, e))?;
    if !has_header {
        return Err(ConnectorError::Malformed {
            location: header_location,
            message: "file has no header row; expected a header row naming the columns".into(),
        });
    }
    let fields = scanner.fields().map_err(|e| scan_error(display, e))?;
    let names: Vec<String> = (0..fields.len())
        .map(|i| {
            let h = fields.get(i);
            // Excel writes a byte-order mark before the first header.
            if i == 0 {
                h.trim_start_matches('\u{feff}').trim().to_string()
            } else {
                h.trim().to_string()
            }
        })
        .collect();
    let find = |col: &str, role: &str| -> Result<usize, ConnectorError> {
        let mut at = names.iter().enumerate().filter(|(_, n)| *n == col);
        let Some((first, _)) = at.next() else {
            return Err(ConnectorError::MissingField {
                location: Location(format!("{display} line 1")),
                message: format!(
                    "{role} column `{col}` not found in the header; columns are: {}",
                    shown_names(&names)
                ),
            });
        };
        // Two columns of one name (after trimming): which one
        // holds the data is a guess recon does not make.
        if let Some((second, _)) = at.next() {
            return Err(ConnectorError::Malformed {
                location: Location(format!("{display} line 1")),
                message: format!(
                    "{role} column `{col}` appears more than once in the header \
                     (columns {} and {}, counting from 1); rename or remove one \
                     so it is clear which to read",
                    first + 1,
                    second + 1
                ),
            });
        }
        Ok(first)
    };
    let key_idx = find(&spec.key_column, "key")?;
    let mut idx = Vec::with_capacity(spec.columns.len());
    for (col, field) in spec.columns.iter().zip(&schema.fields) {
        let role = if field.compared { "compare" } else { "amount" };
        idx.push(find(col, role)?);
    }
    let currency_idx = match (&spec.currency_column, needs_currency) {
        (Some(c), true) => Some(find(c, "currency")?),
        _ => None,
    };
    // A data row never needs more fields than the header has.
    scanner.limit_fields(names.len());
    Ok(Inner::Csv {
        width: names.len(),
        scanner,
        key_idx,
        idx,
        currency_idx,
    })
}

/// Empties a vector of borrowed values and returns its allocation with a
/// new lifetime, so one buffer serves every row (the in-place collect of an
/// empty iterator keeps the allocation).
#[inline]
fn recycle<'a, 'b>(mut values: Vec<ValueRef<'a>>) -> Vec<ValueRef<'b>> {
    values.clear();
    values.into_iter().map(|_| ValueRef::Null).collect()
}

/// An error while streaming: the file's, or the callback's.
#[derive(Debug)]
pub enum ReadError<E> {
    /// The file is unreadable or malformed.
    Connector(ConnectorError),
    /// The callback failed.
    Caller(E),
}

fn json_path<'v>(obj: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    if let Some(v) = obj.get(path) {
        return Some(v);
    }
    let mut cur = obj;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

fn json_text(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        // `json::parse_object` hands numbers over as their text, so
        // `29.990000000000002` reaches the amount parser as written and is
        // refused for USD, never read as 29.99.
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        other => Some(other.to_string()),
    }
}

fn scan_error(display: &str, e: scan::ScanError) -> ConnectorError {
    match e {
        scan::ScanError::Io(source) => ConnectorError::Io {
            what: display.to_string(),
            source,
        },
        scan::ScanError::Utf8 { line } => ConnectorError::Malformed {
            location: Location(format!("{display} line {line}")),
            message: "not valid UTF-8; save the export as UTF-8".into(),
        },
        scan::ScanError::Unterminated { line } => ConnectorError::Malformed {
            location: Location(format!("{display} line {line}")),
            message: "a quoted field is never closed; check for a stray double quote".into(),
        },
        scan::ScanError::TooLong { line, limit } => ConnectorError::Malformed {
            location: Location(format!("{display} line {line}")),
            message: too_long(limit),
        },
        scan::ScanError::TooManyFields { line, limit } => ConnectorError::Malformed {
            location: Location(format!("{display} line {line}")),
            message: if limit == scan::MAX_HEADER_FIELDS {
                format!("the header has more than {limit} columns; is this a CSV export?")
            } else {
                format!(
                    "row has more fields than the header's {limit}; check for an unquoted comma or a missing field"
                )
            },
        },
    }
}

/// Reads a whole file into owned records; for tests and small files only.
pub fn read_all(
    spec: FileSpec,
    schema: &Schema,
) -> Result<Vec<recon_core::Record>, ConnectorError> {
    let mut reader = FileReader::open(spec, schema)?;
    let mut out = Vec::new();
    reader
        .for_each(|key, values, _| {
            out.push(recon_core::Record {
                key: key.to_string(),
                values: values.iter().map(|v| v.to_owned_value()).collect(),
            });
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(|e| match e {
            ReadError::Connector(c) => c,
            ReadError::Caller(never) => match never {},
        })?;
    Ok(out)
}
