//! An RFC 4180 CSV record scanner with a fast path for rows without quotes.
//!
//! Why not the `csv` crate: it is correct and was used first, but measured
//! on a 10M-row diff its byte-at-a-time state machine was the largest single
//! cost of the reader thread. Machine exports are overwhelmingly unquoted,
//! so this scanner makes one pass per line that notes commas, the line end
//! and whether every byte is ASCII (then the line is valid UTF-8 without a
//! second pass). A line with a `"` takes a careful path that handles `""`
//! escapes and newlines inside quotes, and is UTF-8-checked as a whole.

use std::io::Read;

/// Where a field's bytes are: in the read buffer, or unescaped in scratch.
#[derive(Clone, Copy, Debug)]
enum Span {
    Buf(usize, usize),
    Scratch(usize, usize),
}

/// A problem in the CSV text, with the 1-based line where its record starts.
#[derive(Debug)]
pub(crate) enum ScanError {
    Io(std::io::Error),
    Utf8 {
        line: u64,
    },
    Unterminated {
        line: u64,
    },
    /// A record longer than the scanner's limit (bytes), starting at `line`.
    TooLong {
        line: u64,
        limit: usize,
    },
    /// A record with more fields than `limit`, starting at `line`.
    TooManyFields {
        line: u64,
        limit: usize,
    },
}

pub(crate) struct Scanner<R> {
    reader: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Line number of the next record.
    line: u64,
    /// Bytes consumed before `buf[0]`.
    consumed: u64,
    spans: Vec<Span>,
    scratch: Vec<u8>,
    /// Line number of the last record returned.
    record_line: u64,
    /// Where the last record's text lies, for the UTF-8 check.
    record_range: (usize, usize),
    /// Whether the last record's text is all ASCII (and so valid UTF-8).
    record_ascii: bool,
    /// The last record ended with CR: a LF right after it belongs to it.
    skip_lf: bool,
    /// Whether the start of input (and a byte-order mark) was checked.
    started: bool,
    /// Longest record, in bytes: the buffer never grows past it, so a file
    /// without line ends costs this much memory, not its size.
    max_record: usize,
    /// Most fields in one record (the header's count, once it is read).
    max_fields: usize,
    /// Where this scanner's part of a split file ends: no record starting
    /// at or past it is read (see [`Scanner::stop_at`]).
    stop: u64,
}

/// Most columns a header may have: its field positions are kept in memory.
pub(crate) const MAX_HEADER_FIELDS: usize = 1 << 21;

const CHUNK: usize = 1 << 20;

/// Bytes classified at once by [`specials`].
const BLOCK: usize = 64;

/// Whether the fast path must look at byte `b`: a comma, a line end, a
/// quote, or a byte of a non-ASCII character.
#[inline(always)]
fn is_special(b: u8) -> bool {
    matches!(b, b',' | b'\n' | b'\r' | b'"') || b >= 0x80
}

/// Bit `j` is set when byte `j` of `block` [`is_special`]. A byte-table
/// loop over each row was a third of the reader's scanning time on the
/// 10M-row bench; 16 bytes compared at a time, then one bit per special
/// byte visited, does the same work in a few instructions per row.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)] // Reviewed: SSE2 loads within a borrowed block (SAFETY below).
fn specials(block: &[u8; BLOCK]) -> u64 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86_64 baseline, so the intrinsics are
    // available on every x86_64 CPU; each unaligned load reads bytes
    // 16 j .. 16 j + 16 of `block`, which is BLOCK = 64 bytes long.
    unsafe {
        let comma = _mm_set1_epi8(b',' as i8);
        let lf = _mm_set1_epi8(b'\n' as i8);
        let cr = _mm_set1_epi8(b'\r' as i8);
        let quote = _mm_set1_epi8(b'"' as i8);
        let mut marks = 0u64;
        for j in 0..BLOCK / 16 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * j).cast());
            let hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, lf)),
                _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, quote)),
            );
            // A byte's top bit is its non-ASCII mark: `or` it in as is.
            let bits = _mm_movemask_epi8(_mm_or_si128(hit, v)) as u16;
            marks |= u64::from(bits) << (16 * j);
        }
        marks
    }
}

/// [`specials`] a byte at a time: elsewhere, and the reference it is
/// tested against.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline]
fn specials_bytewise(block: &[u8; BLOCK]) -> u64 {
    block
        .iter()
        .enumerate()
        .fold(0, |m, (j, &b)| m | (u64::from(is_special(b)) << j))
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn specials(block: &[u8; BLOCK]) -> u64 {
    specials_bytewise(block)
}

impl<R: Read> Scanner<R> {
    /// A scanner whose records are at most `max_record` bytes long.
    pub(crate) fn new(reader: R, max_record: usize) -> Scanner<R> {
        Scanner {
            reader,
            buf: vec![0; CHUNK.min(max_record.max(64))],
            start: 0,
            end: 0,
            eof: false,
            line: 1,
            consumed: 0,
            spans: Vec::new(),
            scratch: Vec::new(),
            record_line: 0,
            record_range: (0, 0),
            record_ascii: true,
            skip_lf: false,
            started: false,
            max_record,
            max_fields: MAX_HEADER_FIELDS,
            stop: u64::MAX,
        }
    }

    /// A scanner over the rest of a file whose reader is at byte `position`,
    /// the start of a line (no byte-order mark is looked for there); its
    /// line numbers count from that line as 1.
    pub(crate) fn resume(reader: R, max_record: usize, position: u64) -> Scanner<R> {
        let mut s = Scanner::new(reader, max_record);
        s.consumed = position;
        s.started = true;
        s
    }

    /// Numbers this scanner's next line `line` (a scanner resumed at a
    /// place whose line in the file is known).
    pub(crate) fn set_line(&mut self, line: u64) {
        self.line = line;
    }

    /// The line the next record starts on (after the last record read).
    pub(crate) fn line(&self) -> u64 {
        self.line
    }

    /// Whether the last record ended with CR and a LF right after it,
    /// not yet read, belongs to it.
    pub(crate) fn pending_lf(&self) -> bool {
        self.skip_lf
    }

    /// Takes a LF at the start of input as the end of the line before
    /// (a scanner resumed right after a CR).
    pub(crate) fn set_pending_lf(&mut self, pending: bool) {
        self.skip_lf = pending;
    }

    /// Reads no record that starts at byte `stop` or later: the scanner
    /// ends there as at the end of input. Whether it ended exactly there
    /// (`position() == stop`: the byte before was a record's line end, not
    /// one inside quotes) tells whether a second scanner started at `stop`
    /// read the same records a single pass would have.
    pub(crate) fn stop_at(&mut self, stop: u64) {
        self.stop = stop;
    }

    /// Records after this one may have at most `n` fields.
    pub(crate) fn limit_fields(&mut self, n: usize) {
        self.max_fields = n;
    }

    fn too_many_fields(&self) -> ScanError {
        ScanError::TooManyFields {
            line: self.line,
            limit: self.max_fields,
        }
    }

    /// Skips a UTF-8 byte-order mark at the start of input, and the LF of
    /// a CRLF whose CR ended the previous record.
    fn skip_prefixes(&mut self) -> Result<(), ScanError> {
        if !self.started {
            self.started = true;
            while self.end - self.start < 3 && self.fill()? {}
            if self.buf[self.start..self.end].starts_with(b"\xEF\xBB\xBF") {
                self.start += 3;
            }
        }
        if self.skip_lf {
            self.skip_lf = false;
            if self.start == self.end {
                self.fill()?;
            }
            if self.start < self.end && self.buf[self.start] == b'\n' {
                self.start += 1;
            }
        }
        Ok(())
    }

    /// Bytes of the input consumed so far.
    pub(crate) fn position(&self) -> u64 {
        self.consumed + self.start as u64
    }

    /// Line where the last record returned starts.
    pub(crate) fn record_line(&self) -> u64 {
        self.record_line
    }

    /// Moves unread bytes to the front and reads more; false at end of input.
    fn fill(&mut self) -> Result<bool, ScanError> {
        if self.eof {
            return Ok(false);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.consumed += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A record longer than the buffer: grow it, up to the limit.
            if self.buf.len() >= self.max_record {
                return Err(ScanError::TooLong {
                    line: self.line,
                    limit: self.max_record,
                });
            }
            let grown = (self.buf.len() * 2).min(self.max_record);
            self.buf.resize(grown, 0);
        }
        let n = loop {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ScanError::Io(e)),
            }
        };
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.end += n;
        Ok(true)
    }

    /// Reads the next record; `Ok(false)` at end of input. Blank lines are skipped.
    pub(crate) fn next_record(&mut self) -> Result<bool, ScanError> {
        loop {
            self.skip_prefixes()?;
            if self.position() >= self.stop {
                return Ok(false);
            }
            // One pass over the line: commas, the line end, any quote, and
            // whether every byte is ASCII, found 64 bytes at a time (see
            // `specials`); ordinary bytes are never visited one by one.
            let mut i = self.start;
            let mut field_start = i;
            let mut high_bits = 0u8;
            self.spans.clear();
            let nl = 'scan: loop {
                if i == self.end {
                    let offset = i - self.start;
                    let field_offset = field_start - self.start;
                    let consumed_before = self.start;
                    let more = self.fill()?;
                    // Buffer compaction moved the bytes: shift our positions.
                    let shift = consumed_before - self.start;
                    for span in &mut self.spans {
                        if let Span::Buf(a, b) = span {
                            *a -= shift;
                            *b -= shift;
                        }
                    }
                    i = self.start + offset;
                    field_start = self.start + field_offset;
                    if !more {
                        break None;
                    }
                    continue;
                }
                // Classify 64 bytes at once, then visit only the special
                // ones (a row of the bench's shape has five or six).
                let avail = self.end - i;
                let (mut marks, n) = if avail >= BLOCK {
                    let block: &[u8; BLOCK] = self.buf[i..i + BLOCK]
                        .try_into()
                        .expect("BLOCK bytes were sliced");
                    (specials(block), BLOCK)
                } else {
                    // The last bytes read so far: zero bytes are ordinary.
                    let mut block = [0u8; BLOCK];
                    block[..avail].copy_from_slice(&self.buf[i..self.end]);
                    (specials(&block), avail)
                };
                while marks != 0 {
                    let p = i + marks.trailing_zeros() as usize;
                    marks &= marks - 1;
                    match self.buf[p] {
                        b',' => {
                            if self.spans.len() >= self.max_fields {
                                return Err(self.too_many_fields());
                            }
                            self.spans.push(Span::Buf(field_start, p));
                            field_start = p + 1;
                        }
                        b'\n' | b'\r' => break 'scan Some(p),
                        b'"' => {
                            self.record_line = self.line;
                            self.spans.clear();
                            self.scratch.clear();
                            return self.quoted_record();
                        }
                        _ => high_bits = 0x80,
                    }
                }
                i += n;
            };
            if nl.is_none() && self.start == self.end {
                return Ok(false);
            }
            let content_end = nl.unwrap_or(self.end);
            let next = nl.map_or(self.end, |n| n + 1);
            // CR, LF and CRLF all end a line (old Mac exports use CR alone).
            self.skip_lf = nl.is_some_and(|n| self.buf[n] == b'\r');
            if content_end == self.start {
                // Blank line.
                self.start = next;
                self.line += 1;
                continue;
            }
            self.spans
                .push(Span::Buf(field_start, content_end.max(field_start)));
            self.record_line = self.line;
            self.record_ascii = high_bits < 0x80;
            self.record_range = (self.start, content_end);
            self.start = next;
            self.line += 1;
            return Ok(true);
        }
    }

    /// The careful path: a record with quotes, possibly spanning lines.
    fn quoted_record(&mut self) -> Result<bool, ScanError> {
        let mut i = self.start;
        let mut lines = 0u64;
        let mut field = self.scratch.len();
        let mut in_quotes = false;
        let mut at_field_start = true;
        loop {
            if i == self.end {
                let offset = i - self.start;
                if !self.fill()? {
                    if in_quotes {
                        return Err(ScanError::Unterminated {
                            line: self.record_line,
                        });
                    }
                    self.spans.push(Span::Scratch(field, self.scratch.len()));
                    self.finish_quoted(self.end, lines);
                    return self.check_scratch_utf8();
                }
                i = self.start + offset;
                continue;
            }
            let b = self.buf[i];
            if in_quotes {
                if b == b'"' {
                    if i + 1 == self.end && !self.eof {
                        // Need the next byte to tell `""` from a closing quote.
                        let offset = i - self.start;
                        self.fill()?;
                        i = self.start + offset;
                        continue;
                    }
                    if self.buf.get(i + 1) == Some(&b'"') && i + 1 < self.end {
                        self.scratch.push(b'"');
                        i += 2;
                        continue;
                    }
                    in_quotes = false;
                } else {
                    // A line break inside quotes: CRLF counts once.
                    if b == b'\n' && !(i > self.start && self.buf[i - 1] == b'\r') || b == b'\r' {
                        lines += 1;
                    }
                    self.scratch.push(b);
                }
                i += 1;
                continue;
            }
            match b {
                b'"' if at_field_start => {
                    in_quotes = true;
                    at_field_start = false;
                }
                b',' => {
                    if self.spans.len() >= self.max_fields {
                        return Err(self.too_many_fields());
                    }
                    self.spans.push(Span::Scratch(field, self.scratch.len()));
                    field = self.scratch.len();
                    at_field_start = true;
                }
                b'\n' | b'\r' => {
                    self.spans.push(Span::Scratch(field, self.scratch.len()));
                    self.skip_lf = b == b'\r';
                    self.finish_quoted(i + 1, lines);
                    return self.check_scratch_utf8();
                }
                other => {
                    self.scratch.push(other);
                    at_field_start = false;
                }
            }
            i += 1;
        }
    }

    fn finish_quoted(&mut self, next: usize, inner_lines: u64) {
        self.record_range = (0, 0);
        self.record_ascii = true;
        self.start = next;
        self.line += 1 + inner_lines;
    }

    fn check_scratch_utf8(&self) -> Result<bool, ScanError> {
        std::str::from_utf8(&self.scratch)
            .map(|_| true)
            .map_err(|_| ScanError::Utf8 {
                line: self.record_line,
            })
    }

    /// The fields of the last record, as text.
    #[allow(unsafe_code)] // Reviewed: ASCII bytes taken as UTF-8 unchecked (SAFETY below).
    pub(crate) fn fields(&self) -> Result<Fields<'_>, ScanError> {
        let (a, b) = self.record_range;
        let bytes = &self.buf[a..b];
        let text = if self.record_ascii {
            debug_assert!(bytes.is_ascii());
            // SAFETY: every byte was seen below 0x80 while scanning the
            // record, and ASCII is valid UTF-8. Skipping the second pass
            // matters on ten-million-row files.
            unsafe { std::str::from_utf8_unchecked(bytes) }
        } else {
            std::str::from_utf8(bytes).map_err(|_| ScanError::Utf8 {
                line: self.record_line,
            })?
        };
        // The scratch was checked when the record was read (and is empty
        // for a row without quotes: no call to check it then, 0.6% of a
        // 10M-row diff).
        let scratch = if self.scratch.is_empty() {
            ""
        } else {
            std::str::from_utf8(&self.scratch).unwrap_or_default()
        };
        Ok(Fields {
            text,
            base: a,
            scratch,
            spans: &self.spans,
        })
    }
}

/// The fields of one record.
pub(crate) struct Fields<'a> {
    text: &'a str,
    base: usize,
    scratch: &'a str,
    spans: &'a [Span],
}

impl<'a> Fields<'a> {
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// Field `i`, or "" past the end.
    // Inlined: called for every cell of every row (4.5% of a typed read's
    // time as a call).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &'a str {
        match self.spans.get(i) {
            // Spans split at ASCII commas, so they fall on char boundaries.
            Some(&Span::Buf(a, b)) => self.text.get(a - self.base..b - self.base).unwrap_or(""),
            Some(&Span::Scratch(a, b)) => self.scratch.get(a..b).unwrap_or(""),
            None => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `.1` bytes per call, to split
    /// records across refills.
    struct Trickle<'a>(&'a [u8], usize);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(out.len()).min(self.1);
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn scan(input: &str) -> Vec<Vec<String>> {
        scan_chunked(input.as_bytes(), CHUNK)
    }

    /// Reads through a reader that returns at most `step` bytes per call,
    /// to exercise records split across refills.
    fn scan_chunked(input: &[u8], step: usize) -> Vec<Vec<String>> {
        scan_buffered(input, step, 8)
    }

    /// Every record's fields, read `step` bytes per call into a buffer
    /// that starts `buf` bytes long (and grows as a record needs).
    pub(super) fn scan_buffered(input: &[u8], step: usize, buf: usize) -> Vec<Vec<String>> {
        let mut s = Scanner::new(Trickle(input, step), usize::MAX);
        s.buf = vec![0; buf];
        let mut out = Vec::new();
        while s.next_record().unwrap() {
            let f = s.fields().unwrap();
            out.push((0..f.len()).map(|i| f.get(i).to_string()).collect());
        }
        out
    }

    #[test]
    fn splits_plain_and_quoted_records_like_rfc_4180() {
        let input = "id,note\r\nch_1,plain\r\n\r\nch_2,\"a,b\"\n\"ch_3\",\"say \"\"hi\"\"\"\nch_4,\"two\nlines\"\nch_5,last";
        let want = vec![
            vec!["id", "note"],
            vec!["ch_1", "plain"],
            vec!["ch_2", "a,b"],
            vec!["ch_3", "say \"hi\""],
            vec!["ch_4", "two\nlines"],
            vec!["ch_5", "last"],
        ];
        for step in [1, 2, 3, 7, 1 << 20] {
            assert_eq!(scan_chunked(input.as_bytes(), step), want, "step {step}");
        }
        assert_eq!(scan("a,,\n"), vec![vec!["a", "", ""]]);
        assert_eq!(scan("\"\",x\n"), vec![vec!["", "x"]]);
        assert_eq!(scan("ü,東京\n"), vec![vec!["ü", "東京"]]);
    }

    #[test]
    fn accepts_cr_lf_and_crlf_line_ends_and_a_bom() {
        let want = vec![vec!["id", "n"], vec!["a", "1"], vec!["b", "2"]];
        for input in [
            "id,n\ra,1\rb,2\r",
            "id,n\r\na,1\r\nb,2",
            "\u{feff}id,n\na,1\nb,2\n",
            "\u{feff}\"id\",\"n\"\r\n\"a\",1\r\"b\",\"2\"\r\n",
        ] {
            for step in [1, 2, 5, 1 << 20] {
                assert_eq!(
                    scan_chunked(input.as_bytes(), step),
                    want,
                    "{input:?} step {step}"
                );
            }
        }
        let mut s = Scanner::new("h\r\n\r\na\rb\n".as_bytes(), usize::MAX);
        let mut lines = Vec::new();
        while s.next_record().unwrap() {
            lines.push(s.record_line());
        }
        assert_eq!(lines, [1, 3, 4], "CRLF counts as one line end");
    }

    #[test]
    fn counts_lines_across_quoted_newlines() {
        let mut s = Scanner::new("h\n\"a\nb\"\nc\n".as_bytes(), usize::MAX);
        let mut lines = Vec::new();
        while s.next_record().unwrap() {
            lines.push(s.record_line());
        }
        assert_eq!(lines, [1, 2, 4]);
    }

    #[test]
    fn a_record_past_the_limit_is_refused_without_reading_on() {
        // 10 MB without a line end, a 1 KiB limit: refused at line 2, and
        // the buffer never grew past the limit.
        let mut input = b"h\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10 << 20));
        let mut s = Scanner::new(&input[..], 1024);
        assert!(s.next_record().unwrap());
        match s.next_record() {
            Err(ScanError::TooLong {
                line: 2,
                limit: 1024,
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(s.buf.len() <= 1024);
        // Quoted records are bounded alike.
        let mut input = b"h\n\"".to_vec();
        input.extend(std::iter::repeat_n(b'y', 5000));
        let mut s = Scanner::new(&input[..], 1024);
        assert!(s.next_record().unwrap());
        assert!(matches!(
            s.next_record(),
            Err(ScanError::TooLong { line: 2, .. })
        ));
        // A record within the limit is read whole.
        let mut s = Scanner::new("h\nabc,def\n".as_bytes(), 64);
        assert!(s.next_record().unwrap() && s.next_record().unwrap());
        assert_eq!(s.fields().unwrap().get(1), "def");
    }

    #[test]
    fn a_row_with_more_fields_than_the_header_is_refused_as_it_is_read() {
        for input in ["a,b\n1,2\n1,2,3,4,5\n", "a,b\n1,2\n\"1\",2,3,4\n"] {
            let mut s = Scanner::new(input.as_bytes(), usize::MAX);
            assert!(s.next_record().unwrap());
            s.limit_fields(2);
            assert!(s.next_record().unwrap());
            match s.next_record() {
                Err(ScanError::TooManyFields { line: 3, limit: 2 }) => {}
                other => panic!("{input:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn reports_bad_utf8_and_unterminated_quotes_with_lines() {
        let mut s = Scanner::new(&b"h\nok\n\xff\xfe\n"[..], usize::MAX);
        assert!(s.next_record().unwrap());
        assert!(s.next_record().unwrap());
        assert!(s.next_record().unwrap());
        assert!(matches!(s.fields(), Err(ScanError::Utf8 { line: 3 })));
        let mut s = Scanner::new("h\n\"open\n".as_bytes(), usize::MAX);
        assert!(s.next_record().unwrap());
        assert!(matches!(
            s.next_record(),
            Err(ScanError::Unterminated { line: 2 })
        ));
    }
}

#[cfg(test)]
mod differential {
    use super::tests::scan_buffered;
    use super::*;
    use proptest::prelude::*;

    fn field() -> impl Strategy<Value = String> {
        prop::string::string_regex("[a-z0-9 ,\"\\n\\r€é]{0,12}").unwrap()
    }

    /// Mostly the bytes the scanner looks for, and every byte value.
    fn block() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![
                prop::sample::select(vec![b',', b'\n', b'\r', b'"', b'a', 0x7F, 0x80, 0xFF, 0]),
                any::<u8>(),
            ],
            BLOCK,
        )
    }

    /// Rows longer than a block, so that records start and end anywhere
    /// inside one.
    fn long_field() -> impl Strategy<Value = String> {
        prop::string::string_regex("[a-z0-9 ,\"\n\r€é]{0,12}|[a-z0-9€]{40,150}").unwrap()
    }

    proptest! {
        /// The 16-at-a-time classification marks exactly the bytes the
        /// byte-at-a-time one does.
        #[test]
        fn specials_marks_what_the_bytewise_reference_does(bytes in block()) {
            let block: [u8; BLOCK] = bytes.try_into().unwrap();
            prop_assert_eq!(specials(&block), specials_bytewise(&block));
        }

        /// Long rows read from a large buffer (whole blocks classified at
        /// once), at any refill size.
        #[test]
        fn reads_back_long_rows_through_whole_blocks(
            rows in prop::collection::vec(prop::collection::vec(long_field(), 1..6), 1..30),
            step in prop_oneof![Just(usize::MAX), 1usize..200],
        ) {
            let mut w = csv::WriterBuilder::new().flexible(true).from_writer(Vec::new());
            for r in &rows {
                w.write_record(r).unwrap();
            }
            let bytes = w.into_inner().unwrap();
            let got = scan_buffered(&bytes, step, CHUNK);
            // The csv crate writes a lone empty field as `""`, never as a
            // blank line, so no row is skipped.
            prop_assert_eq!(got, rows);
        }

        /// Whatever the `csv` crate writes, the scanner reads back the same
        /// fields, at any refill size.
        #[test]
        fn reads_back_what_the_csv_crate_writes(
            rows in prop::collection::vec(prop::collection::vec(field(), 3), 1..20),
            step in 1usize..64,
        ) {
            let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
            for r in &rows {
                w.write_record(r).unwrap();
            }
            let bytes = w.into_inner().unwrap();
            let got = scan_buffered(&bytes, step, 16);
            // A row of three empty fields is written as `,,` and read back
            // as such; the only rows the scanner skips are blank lines,
            // which the csv crate never writes for three fields.
            prop_assert_eq!(got, rows);
        }
    }
}
