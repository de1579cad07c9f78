//! The batched engine feed `recon diff` and `recon run` share: a reader
//! thread parses, filters and encodes file rows into batches, the calling
//! thread indexes (source) or probes (target) them. Batches travel through
//! a short queue and come back for reuse, so no record is ever owned.
//!
//! A large CSV source is cut into parts at line ends, and the engine's
//! thread reads parts too whenever no batch is waiting for it: measured
//! on the 10M bench pair, the reader was busy all through the source's
//! read and the engine two thirds of it. (A third thread reading parts
//! was tried first: the scheduler shared two cores evenly among three
//! threads, the engine got two thirds of one and the read barely sped
//! up.) The reader thread reads the first part and takes the next free
//! part after each; the engine takes one when idle.
//!
//! Whether a cut's line end was a record's (not one inside a quoted
//! field) only the part before can tell, once read to it: when one was
//! not, or when a part after the first failed (it may have begun inside a
//! quoted field, and its lines count from its own start), the engine
//! forgets the source and reads it again in one pass, where a real error
//! names its line in the file. Everything the diff reports is the one
//! pass's: the unplaced keys in file order, the copies of a duplicated ID
//! in file order (each batch carries its place in the file).
//!
//! A large CSV target read last is cut into parts as well, but its batches
//! are applied in file order: see [`ordered`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use recon_core::ValueRef;
use recon_file::{FileReader, ReadError};

use crate::diff::{DiffEngine, DiffSpec, RecordBatch};

/// Records per batch handed from the reader thread to the engine.
const BATCH: usize = 8192;

/// Smallest CSV source read in parts: below it, the parts cost more
/// than they save.
pub const SPLIT_MIN_BYTES: u64 = 16 << 20;

/// About how many bytes of a source make one part.
const PART_BYTES: u64 = 8 << 20;

/// Most parts a source is cut into.
const MAX_PARTS: u64 = 1 << 12;

/// Which side a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The source of truth: indexed.
    Source,
    /// The target: probed against the source.
    Target,
}

impl Side {
    /// `source` or `target`, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Side::Source => "source",
            Side::Target => "target",
        }
    }
}

/// What a row filter makes of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    /// Diffed.
    Keep,
    /// Outside the window.
    Skip,
    /// In no window (its time is empty): listed as unplaced, in the same
    /// pass, so no side is read twice.
    Unplaced,
}

/// Which rows of a file to keep (e.g. those inside a run's window).
pub type RowFilter<'a> = &'a (dyn Fn(&[ValueRef<'_>]) -> Row + Sync);

/// One file to feed, its side, and its row filter.
pub type FileFeed<'a> = (FileReader, Side, Option<RowFilter<'a>>);

/// What the reader thread sends.
enum Message {
    /// A batch of source records, and an estimate of the source's size.
    Source(RecordBatch, Option<usize>),
    /// A batch of target records.
    Target(RecordBatch),
    /// A batch of a target read in parts ([`ordered`]).
    Piece(ordered::Piece),
    /// A part of a target read in parts was read to its end, or failed.
    PartEnd(ordered::PartEnd),
    /// The reader thread is done with the parts of a source read in parts
    /// (the first, and those it took after): what each found.
    SourceEnd(Vec<PartDone>),
}

/// Most keys [`Outside`] remembers (8 bytes each): past it, edge lookups
/// read the file again instead.
const OUTSIDE_CAP: usize = 8 << 20;

/// The hashes of a file's keys on rows the filter did not keep (outside
/// the window, or unplaced): an edge lookup in that file can only find one
/// of these, so keys not among them need no second read of the file.
#[derive(Debug, Default)]
pub struct Outside(Vec<u64>);

impl Outside {
    fn seal(mut self) -> Outside {
        self.0.sort_unstable();
        self.0.dedup();
        self
    }

    /// Whether the filter kept every row (no key to look up).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the file may hold `key` outside the rows it kept (hashes
    /// collide rarely; a collision only costs a lookup).
    pub fn may_hold(&self, key: &str) -> bool {
        self.0.binary_search(&crate::diff::key_hash(key)).is_ok()
    }
}

/// What feeding files found besides the diff.
#[derive(Debug, Default)]
pub struct Fed {
    /// How long after the call the source side was done, when a target
    /// side followed it.
    pub source_done: Option<Duration>,
    /// Keys of the rows the filters called [`Row::Unplaced`], in file order.
    pub unplaced: Vec<String>,
    /// For one filtered file: the keys of the rows not kept; `None` with
    /// no filter, several filtered files, or more than `OUTSIDE_CAP`.
    pub outside: Option<Outside>,
    /// How many parts the source's records were read in: 1 when it was
    /// read whole (small, not CSV, or read again after a cut fell inside
    /// a quoted field), 0 without a source.
    pub parts: usize,
    /// How many parts of the target were taken in file order (1 when it
    /// was read whole, 0 without a target); with `target_rest`, the last
    /// of them only up to where its rest was read in one pass.
    pub target_parts: usize,
    /// Whether the target's rest was read in one pass after a part that
    /// could not be used (a cut inside a quoted field, or an error).
    pub target_rest: bool,
}

/// Feeds files to the engine, in order, through the two stages (a CSV
/// source of [`SPLIT_MIN_BYTES`] or more read in parts).
pub fn feed_files(engine: &mut DiffEngine, files: Vec<FileFeed<'_>>) -> Result<Fed> {
    feed_files_split(engine, files, SPLIT_MIN_BYTES, PART_BYTES)
}

/// [`feed_files`], cutting a CSV source of `split_min` bytes or more, the
/// first of `files`, into parts of about `part_bytes`.
pub fn feed_files_split(
    engine: &mut DiffEngine,
    mut files: Vec<FileFeed<'_>>,
    split_min: u64,
    part_bytes: u64,
) -> Result<Fed> {
    let started = Instant::now();
    let spec = engine.spec().clone();
    let mut source_done = None;
    let filtered = files.iter().filter(|(_, _, keep)| keep.is_some()).count();
    let outside = filtered == 1;
    let has_source = files.iter().any(|(_, side, _)| *side == Side::Source);
    let has_target = files.iter().any(|(_, side, _)| *side == Side::Target);
    let parts = match files.first_mut() {
        Some((reader, Side::Source, keep)) => Parts::cut(reader, *keep, split_min, part_bytes)?,
        _ => None,
    };
    // A target read last is read in parts too, its batches taken in file
    // order ([`ordered`]).
    let last = files.len().saturating_sub(1);
    let target_parts = match files.last_mut() {
        Some((reader, Side::Target, keep)) => match reader.place() {
            Some(start) => {
                Parts::cut(reader, *keep, split_min, part_bytes)?.map(|parts| (parts, start))
            }
            None => None,
        },
        _ => None,
    };
    for (side, count, file) in [
        (
            Side::Source,
            parts.as_ref().map(Parts::count),
            files.first(),
        ),
        (
            Side::Target,
            target_parts.as_ref().map(|(p, _)| p.count()),
            files.last(),
        ),
    ] {
        if let (Some(count), Some((reader, _, _))) = (count, file) {
            tracing::debug!(
                message = "Reading a file in parts.",
                side = side.name(),
                file = reader.display(),
                parts = count
            );
        }
    }
    let bytes = [AtomicU64::new(0), AtomicU64::new(0)];
    let bytes_of = |side: Side| &bytes[usize::from(side == Side::Target)];
    // Batches the engine is done with go back to whichever reader takes one.
    let (free_tx, free_rx) = channel::<RecordBatch>();
    let free = Mutex::new(free_rx);
    // The target's part the engine's thread began ([`ordered`]).
    let begun = ordered::Begun::default();
    let (source_seen, rest_seen, target_read) = std::thread::scope(|scope| -> Result<Sides> {
        let (tx, rx) = sync_channel::<Message>(4);
        let (spec, free, parts) = (&spec, &free, parts.as_ref());
        let tparts = target_parts.as_ref().map(|(parts, _)| parts);
        let begun = &begun;
        let handle = scope.spawn(move || -> Result<Seen> {
            let mut seen = Seen::new(outside);
            for (i, (mut reader, side, keep)) in files.into_iter().enumerate() {
                let feed = Feed {
                    spec,
                    side,
                    free,
                    keep,
                    bytes: bytes_of(side),
                };
                let source_parts = parts.filter(|_| i == 0);
                let target_parts = tparts.filter(|_| i == last && side == Side::Target);
                match (source_parts, target_parts) {
                    (Some(parts), _) => {
                        let done = read_parts(&feed, parts, reader, &tx, outside)?;
                        send_to(&tx)(Message::SourceEnd(done))?;
                    }
                    (None, Some(parts)) => ordered::read_parts(
                        &feed,
                        parts,
                        begun,
                        reader,
                        &mut send_to(&tx),
                        outside,
                    )?,
                    (None, None) => read_side(&feed, &mut reader, &mut send_to(&tx), &mut seen, 0)?,
                }
            }
            Ok(seen)
        });
        // The target's parts, taken in file order here; this thread
        // reads parts of it too once every source batch is in (the
        // reader thread's first target batch tells: it follows them).
        let mut target = target_parts.as_ref().map(|(parts, start)| {
            ordered::Ordered::new(
                parts,
                begun,
                *start,
                Feed {
                    spec,
                    side: Side::Target,
                    free,
                    keep: parts.keep,
                    bytes: bytes_of(Side::Target),
                },
                outside,
                !has_source,
            )
        });
        let mut own = parts.map(|parts| OwnParts {
            parts,
            feed: Feed {
                spec,
                side: Side::Source,
                free,
                keep: parts.keep,
                bytes: bytes_of(Side::Source),
            },
            outside,
            current: None,
            done: Vec::new(),
            batch: RecordBatch::new(spec),
        });
        let mut source_seen = None;
        loop {
            // While the source's parts last, read one whenever no
            // batch is waiting; then the target's.
            let msg = if let Some(o) = own.as_mut().filter(|o| o.working()) {
                match rx.try_recv() {
                    Ok(msg) => msg,
                    Err(TryRecvError::Empty) => {
                        o.step(engine)?;
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => break,
                }
            } else if let Some(t) = target.as_mut().filter(|t| t.may_read()) {
                match rx.try_recv() {
                    Ok(msg) => msg,
                    Err(TryRecvError::Empty) => {
                        t.step(engine, &free_tx)?;
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                }
            };
            match msg {
                Message::Source(batch, estimate) => {
                    index_source(engine, &batch, estimate)?;
                    let _ = free_tx.send(batch);
                }
                Message::SourceEnd(done) => {
                    let mut o = own.take().expect("parts read when a source ends in parts");
                    source_seen = Some(o.settle(done, engine)?);
                }
                Message::Target(batch) => {
                    source_done.get_or_insert_with(|| started.elapsed());
                    engine.add_target_batch(&batch);
                    let _ = free_tx.send(batch);
                }
                Message::Piece(piece) => {
                    source_done.get_or_insert_with(|| started.elapsed());
                    let t = target.as_mut().expect("pieces of a target in parts");
                    t.piece(piece, engine, &free_tx)?;
                }
                Message::PartEnd(end) => {
                    source_done.get_or_insert_with(|| started.elapsed());
                    let t = target.as_mut().expect("parts of a target in parts");
                    t.part_end(end, engine, &free_tx)?;
                }
            }
        }
        let rest = handle
            .join()
            .map_err(|_| anyhow::anyhow!("file reader thread panicked"))??;
        // The reader thread is done: this thread's own part, if any,
        // is read to its end and every part taken in order.
        let target_read = target.map(|t| t.finish(engine, &free_tx)).transpose()?;
        Ok((source_seen, rest, target_read))
    })?;
    let source_parts = source_seen
        .as_ref()
        .map_or(usize::from(has_source), |(_, n)| *n);
    let mut seen = source_seen.map_or_else(|| Seen::new(outside), |(seen, _)| seen);
    seen.append(rest_seen);
    let (target_parts, target_rest) = match target_read {
        Some(read) => {
            seen.append(read.seen);
            (read.parts, read.rest)
        }
        None => (usize::from(has_target), false),
    };
    Ok(Fed {
        source_done,
        unplaced: seen.unplaced,
        outside: seen.outside.map(Outside::seal),
        parts: source_parts,
        target_parts,
        target_rest,
    })
}

/// Adds a source batch to the engine, sizing its index first by the
/// estimate the first batch carries.
fn index_source(
    engine: &mut DiffEngine,
    batch: &RecordBatch,
    estimate: Option<usize>,
) -> Result<()> {
    if let Some(n) = estimate {
        engine.reserve_source(n);
    }
    Ok(engine.add_source_batch(batch)?)
}

/// What one file is read with.
struct Feed<'a> {
    spec: &'a DiffSpec,
    side: Side,
    /// Batches the engine is done with.
    free: &'a Mutex<Receiver<RecordBatch>>,
    keep: Option<RowFilter<'a>>,
    /// Bytes read of the file, by every reader of it (for progress).
    bytes: &'a AtomicU64,
}

impl Feed<'_> {
    /// An empty batch: one the engine is done with, or a new one.
    fn fresh(&self) -> RecordBatch {
        let free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let mut b = free
            .try_recv()
            .unwrap_or_else(|_| RecordBatch::new(self.spec));
        b.clear();
        b
    }

    /// Shows a batch of `rows` read, its reader now at `read` bytes of its
    /// part (`reported` of them counted before) of a file of `total`.
    fn progress(&self, rows: usize, (read, total): (u64, u64), reported: &mut u64) {
        let all = self.bytes.fetch_add(read - *reported, Ordering::Relaxed) + read - *reported;
        *reported = read;
        crate::ops::progress::file_batch(self.side == Side::Source, rows, all, total);
    }
}

/// What the filters saw besides the rows they kept.
struct Seen {
    /// Keys of unplaced rows, in file order.
    unplaced: Vec<String>,
    /// Hashes of the keys not kept, while under [`OUTSIDE_CAP`].
    outside: Option<Outside>,
}

impl Seen {
    fn new(outside: bool) -> Seen {
        Seen {
            unplaced: Vec::new(),
            outside: outside.then(Outside::default),
        }
    }

    /// Adds what a later part of the files saw.
    fn append(&mut self, later: Seen) {
        self.unplaced.extend(later.unplaced);
        self.outside = match (self.outside.take(), later.outside) {
            (Some(mut a), Some(b)) if a.0.len() + b.0.len() <= OUTSIDE_CAP => {
                a.0.extend(b.0);
                Some(a)
            }
            _ => None,
        };
    }
}

/// What the two threads found: the source's parts, the files read whole,
/// the target's parts.
type Sides = (Option<(Seen, usize)>, Seen, Option<ordered::Read>);

/// A file cut into parts, shared by the two threads that read them.
struct Parts<'a> {
    /// Part `k` runs from `cuts[k]` to `cuts[k + 1]`.
    cuts: Vec<u64>,
    /// The next part nobody has taken (part 0 is the reader thread's).
    next: AtomicUsize,
    /// No part after this one is of use (`usize::MAX` until one fails):
    /// none is taken, and a target's readers leave theirs. A source's
    /// failed part stops them all ([`Parts::stop_after`] `0`): it is read
    /// again whole.
    stop_after: AtomicUsize,
    /// A reader of the file that opens the parts.
    template: FileReader,
    keep: Option<RowFilter<'a>>,
}

impl<'a> Parts<'a> {
    /// Cuts `reader`'s file into parts of about `part_bytes` when it is
    /// a CSV file of `split_min` bytes or more (`reader` then reads the
    /// first).
    fn cut(
        reader: &mut FileReader,
        keep: Option<RowFilter<'a>>,
        split_min: u64,
        part_bytes: u64,
    ) -> Result<Option<Parts<'a>>> {
        let n = (reader.progress().1 / part_bytes.max(1)).clamp(2, MAX_PARTS);
        Ok(match reader.cut(n as usize, split_min)? {
            Some(cuts) => Some(Parts {
                template: reader.part(cuts[cuts.len() - 2], *cuts.last().expect("cuts"))?,
                cuts,
                next: AtomicUsize::new(1),
                stop_after: AtomicUsize::new(usize::MAX),
                keep,
            }),
            None => None,
        })
    }
}

impl Parts<'_> {
    fn count(&self) -> usize {
        self.cuts.len() - 1
    }

    /// The next part to read, if any is left.
    fn take(&self) -> Option<usize> {
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        (k < self.count() && k <= self.stop_after.load(Ordering::Relaxed)).then_some(k)
    }

    /// No part after `k` is of use.
    fn stop_after(&self, k: usize) {
        self.stop_after.fetch_min(k, Ordering::Relaxed);
    }

    /// Whether a part failed (or, for a target, ended past its cut).
    fn stopped(&self) -> bool {
        self.stop_after.load(Ordering::Relaxed) != usize::MAX
    }

    fn open(&self, k: usize) -> Result<FileReader> {
        Ok(self.template.part(self.cuts[k], self.cuts[k + 1])?)
    }
}

/// The order of part `k`'s first batch: parts hold far fewer batches.
fn first_order(k: usize) -> u64 {
    (k as u64) << 32
}

/// What reading one part found.
struct PartDone {
    k: usize,
    seen: Seen,
    /// It was read without error and ended at its cut (see
    /// [`FileReader::ended_at_stop`]). An error in a part after the first
    /// is not kept: its lines count from the part's start, and the part
    /// may have begun inside a quoted field; the source is read again
    /// whole instead, where a real error names its line.
    sound: bool,
}

/// The reader thread's share of a source in parts: the first part, which
/// `first` is positioned at, then the next free part after each. An error
/// in the first part is the file's first and returned; a later part that
/// fails is marked unsound.
fn read_parts(
    feed: &Feed<'_>,
    parts: &Parts<'_>,
    mut first: FileReader,
    tx: &SyncSender<Message>,
    outside: bool,
) -> Result<Vec<PartDone>> {
    let mut seen = Seen::new(outside);
    if let Err(e) = read_side(feed, &mut first, &mut send_to(tx), &mut seen, 0) {
        // The engine's thread takes no more parts.
        parts.stop_after(0);
        return Err(e);
    }
    let mut done = vec![PartDone {
        k: 0,
        seen,
        sound: first.ended_at_stop(),
    }];
    while let Some(k) = parts.take() {
        let mut seen = Seen::new(outside);
        let read = parts.open(k).and_then(|mut reader| {
            read_side(
                feed,
                &mut reader,
                &mut send_to(tx),
                &mut seen,
                first_order(k),
            )?;
            Ok(reader.ended_at_stop())
        });
        let failed = read.is_err();
        done.push(PartDone {
            k,
            seen,
            sound: read.unwrap_or(false),
        });
        if failed {
            parts.stop_after(0);
            break;
        }
    }
    Ok(done)
}

/// The engine thread's share of a source in parts, read a batch at a time
/// between the reader thread's batches.
struct OwnParts<'p, 'a> {
    parts: &'p Parts<'a>,
    feed: Feed<'p>,
    outside: bool,
    /// The part being read.
    current: Option<Current>,
    done: Vec<PartDone>,
    batch: RecordBatch,
}

/// A part the engine's thread is reading.
struct Current {
    k: usize,
    reader: FileReader,
    seen: Seen,
    /// The order of its next batch.
    order: u64,
    /// Its bytes counted for progress.
    reported: u64,
}

impl OwnParts<'_, '_> {
    /// Whether a part may still be read here (none once a part failed:
    /// the engine then only waits for the reader thread).
    fn working(&self) -> bool {
        !self.parts.stopped()
            && (self.current.is_some()
                || self.parts.next.load(Ordering::Relaxed) < self.parts.count())
    }

    /// Reads one batch of the current part (taking a part when none is
    /// under way) into the engine.
    fn step(&mut self, engine: &mut DiffEngine) -> Result<()> {
        let mut part = match self.current.take() {
            Some(part) => part,
            None => {
                let Some(k) = self.parts.take() else {
                    return Ok(());
                };
                match self.parts.open(k) {
                    Ok(reader) => Current {
                        k,
                        reader,
                        seen: Seen::new(self.outside),
                        order: first_order(k),
                        reported: 0,
                    },
                    Err(_) => {
                        self.fail(k, Seen::new(self.outside));
                        return Ok(());
                    }
                }
            }
        };
        self.batch.clear();
        self.batch.set_order(part.order);
        match read_batch(
            &self.feed,
            &mut part.reader,
            &mut self.batch,
            &mut part.seen,
        ) {
            Ok(finished) => {
                if !self.batch.is_empty() {
                    let progress = part.reader.progress();
                    self.feed
                        .progress(self.batch.len(), progress, &mut part.reported);
                    engine.add_source_batch(&self.batch)?;
                }
                if finished {
                    self.done.push(PartDone {
                        k: part.k,
                        seen: part.seen,
                        sound: part.reader.ended_at_stop(),
                    });
                } else {
                    part.order += 1;
                    self.current = Some(part);
                }
            }
            Err(_) => self.fail(part.k, part.seen),
        }
        Ok(())
    }

    /// A part that failed: no part is taken after it.
    fn fail(&mut self, k: usize, seen: Seen) {
        self.parts.stop_after(0);
        self.done.push(PartDone {
            k,
            seen,
            sound: false,
        });
    }

    /// Once the reader thread is done with the source (`theirs`): reads
    /// the rest of this thread's part, then checks that the parts met at
    /// record boundaries and found no error, and returns what they saw in
    /// file order, with how many parts they were. When a cut was inside
    /// a quoted field or a later part failed, the engine forgets the
    /// source and reads it again here in one pass.
    fn settle(&mut self, theirs: Vec<PartDone>, engine: &mut DiffEngine) -> Result<(Seen, usize)> {
        while self.current.is_some() && !self.parts.stopped() {
            self.step(engine)?;
        }
        let mut done = theirs;
        done.append(&mut self.done);
        done.sort_by_key(|d| d.k);
        let last = self.parts.count() - 1;
        // A later part's error may come of a cut inside a quoted field
        // (the part began inside it) whose part before was never finished
        // (after a failure no part is read on); and its lines count from
        // the part's start. Either way, as for a cut inside a quoted field,
        // the source is read again whole: a real error then stops it,
        // named by its line in the file.
        if done.iter().any(|d| !d.sound) {
            tracing::debug!(
                message = "Reading the source again in one pass (a cut inside a quoted field, or an error in a part).",
                file = self.parts.template.display()
            );
            engine.restart_source();
            self.feed.bytes.store(0, Ordering::Relaxed);
            let mut seen = Seen::new(self.outside);
            let mut reader = self.parts.template.reopen()?;
            let mut index = |msg: Message| match msg {
                Message::Source(batch, estimate) => index_source(engine, &batch, estimate),
                _ => Ok(()),
            };
            read_side(&self.feed, &mut reader, &mut index, &mut seen, 0)?;
            return Ok((seen, 1));
        }
        anyhow::ensure!(
            done.iter().map(|d| d.k).eq(0..=last),
            "internal error: parts of {} were left unread",
            self.parts.template.display()
        );
        let mut seen = Seen::new(self.outside);
        for d in done {
            seen.append(d.seen);
        }
        Ok((seen, last + 1))
    }
}

/// Sends to the engine.
fn send_to(tx: &SyncSender<Message>) -> impl FnMut(Message) -> Result<()> + '_ {
    // The engine stops listening only after failing itself.
    |msg| {
        tx.send(msg)
            .map_err(|_| anyhow::anyhow!("diff engine stopped"))
    }
}

/// Reads up to a batch of rows into `batch`; true at the end of the file
/// (or part).
fn read_batch(
    feed: &Feed<'_>,
    reader: &mut FileReader,
    batch: &mut RecordBatch,
    seen: &mut Seen,
) -> Result<bool> {
    let Feed { side, keep, .. } = *feed;
    let Seen { unplaced, outside } = seen;
    if let Some(signal) = crate::interrupt::requested() {
        anyhow::bail!("interrupted by {signal} while reading {}", reader.display());
    }
    let done = reader.for_each_while(|key, values, location| -> Result<bool> {
        let row = keep.map_or(Row::Keep, |k| k(values));
        match row {
            Row::Keep => batch
                .push(key, values)
                .map_err(|e| anyhow::anyhow!("{} {}: {e}", side.name(), location()))?,
            Row::Skip => {}
            Row::Unplaced => unplaced.push(key.to_string()),
        }
        if row != Row::Keep {
            if let Some(o) = outside.as_mut() {
                if o.0.len() < OUTSIDE_CAP {
                    o.0.push(crate::diff::key_hash(key));
                } else {
                    *outside = None;
                }
            }
        }
        Ok(batch.len() < BATCH)
    });
    match done {
        Ok(done) => Ok(done),
        Err(ReadError::Connector(e)) => Err(e.into()),
        Err(ReadError::Caller(e)) => Err(e),
    }
}

/// Parses one file (or part) into batches on the calling thread, sending
/// each full batch; batches are numbered from `order`.
fn read_side(
    feed: &Feed<'_>,
    reader: &mut FileReader,
    send: &mut dyn FnMut(Message) -> Result<()>,
    seen: &mut Seen,
    mut order: u64,
) -> Result<()> {
    let side = feed.side;
    let mut first = order == 0;
    let mut reported = 0;
    loop {
        let mut batch = feed.fresh();
        batch.set_order(order);
        order += 1;
        let done = read_batch(feed, reader, &mut batch, seen)?;
        if !batch.is_empty() {
            let (read, total) = reader.progress();
            feed.progress(batch.len(), (read, total), &mut reported);
            let msg = match side {
                // Estimate the source's size from the first batch's bytes
                // per row, so that the engine sizes its index once.
                Side::Source => {
                    let estimate = (first && read > 0).then(|| {
                        (total as f64 / (read as f64 / batch.len() as f64) * 1.02) as usize
                    });
                    Message::Source(batch, estimate)
                }
                Side::Target => Message::Target(batch),
            };
            first = false;
            send(msg)?;
        }
        if done {
            return Ok(());
        }
    }
}

#[path = "feed_ordered.rs"]
mod ordered;

#[cfg(test)]
#[path = "feed_tests.rs"]
mod tests;
