//! A target read in parts on both threads, its batches taken in file order.
//!
//! The engine probes target records in file order: the first copy of an
//! ID is the one compared, later copies are duplicates listed in the order
//! read, an orphan keeps its first record. So unlike the source's parts,
//! whose batches may be indexed in any order, a target's batches are
//! applied strictly in file order. The reader thread reads the first part;
//! the engine's thread, whenever no batch is waiting for it, reads a batch
//! of the next free part and keeps it until its turn. That part is left
//! where the reader thread finds it: at the end of each part, the reader
//! thread goes on with the part the engine's thread began (the next in
//! turn), and the engine's thread begins another. So the engine's thread
//! reads only in time it would have spent waiting, and is never bound to
//! finish a part while the reader thread runs ahead (when it was, it read
//! every other part, and took longer than one reader: measured).
//!
//! Measured on the 10M bench pair before this: the target's side took
//! longer than the source's (read in parts already), its reader busy all
//! through and the engine idle about two fifths of it.
//!
//! Whether a part began at a record's start only the part before can tell,
//! once read to its cut; an error in a part after the first may come of a
//! cut inside a quoted field, and its lines count from the part's start.
//! Both are settled in file order: batches before them are the one pass's
//! (the parts before ended at their cuts), and the rest of the file is read
//! here in one pass from where the last batch taken ended, its lines
//! numbered as the file's (a real error then names its line, as a single
//! pass does). Parts after it are dropped unread or unused.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Mutex;

use anyhow::Result;
use recon_file::{FileReader, Place};

use super::{first_order, read_batch, read_side, Feed, Message, Parts, Seen};
use crate::diff::{DiffEngine, RecordBatch};

/// Most batches of later parts the engine's thread keeps before it stops
/// reading ahead and waits for the reader thread.
const AHEAD: usize = 8;

/// A batch of a part, with what the row filter set aside while it was
/// read (in file order) and where its reader stood after it.
pub(super) struct Piece {
    batch: RecordBatch,
    seen: Seen,
    /// Lines count from the part's start.
    place: Place,
}

/// How a part ended, and after how many pieces.
pub(super) struct PartEnd {
    k: usize,
    pieces: u32,
    how: Ended,
}

enum Ended {
    /// Read to its end: where its reader stood (lines from the part's
    /// start), and whether that is its cut, so that the part after began
    /// at a record's start.
    Read { place: Place, sound: bool },
    /// It failed (an error of its own, or of a start inside a quoted
    /// field), or it was left because a part before it can not be used.
    Failed,
}

/// A part being read, a batch at a time.
pub(super) struct Cursor {
    k: usize,
    reader: FileReader,
    pieces: u32,
    /// Bytes of it counted for progress.
    reported: u64,
    /// Its end, once its last piece is out.
    ended: Option<PartEnd>,
}

/// What one step of a part gives.
enum Step {
    Piece(Box<Piece>),
    End(PartEnd),
}

impl Cursor {
    fn open(parts: &Parts<'_>, k: usize) -> std::result::Result<Cursor, PartEnd> {
        match parts.open(k) {
            Ok(reader) => Ok(Cursor::new(k, reader)),
            Err(_) => {
                parts.stop_after(k);
                Err(PartEnd {
                    k,
                    pieces: 0,
                    how: Ended::Failed,
                })
            }
        }
    }

    fn new(k: usize, reader: FileReader) -> Cursor {
        Cursor {
            k,
            reader,
            pieces: 0,
            reported: 0,
            ended: None,
        }
    }

    /// Reads the part's next batch, or tells its end.
    fn step(&mut self, feed: &Feed<'_>, parts: &Parts<'_>, outside: bool) -> Step {
        if let Some(end) = self.ended.take() {
            return Step::End(end);
        }
        let end = |c: &Cursor, how| PartEnd {
            k: c.k,
            pieces: c.pieces,
            how,
        };
        if self.k > parts.stop_after.load(Ordering::Relaxed) {
            // A part before this one can not be used: nor can this one.
            return Step::End(end(self, Ended::Failed));
        }
        let mut batch = feed.fresh();
        batch.set_order(first_order(self.k) + u64::from(self.pieces));
        let mut seen = Seen::new(outside);
        let done = match read_batch(feed, &mut self.reader, &mut batch, &mut seen) {
            Ok(done) => done,
            Err(_) => {
                parts.stop_after(self.k);
                return Step::End(end(self, Ended::Failed));
            }
        };
        let place = self.reader.place().expect("a CSV file is read in parts");
        let ended = done.then(|| {
            let sound = self.reader.ended_at_stop();
            if !sound {
                parts.stop_after(self.k);
            }
            Ended::Read { place, sound }
        });
        let empty = batch.is_empty() && seen.unplaced.is_empty() && seen_nothing(&seen, outside);
        if !batch.is_empty() {
            feed.progress(batch.len(), self.reader.progress(), &mut self.reported);
        }
        let piece = (!empty).then(|| {
            self.pieces += 1;
            Piece { batch, seen, place }
        });
        match (piece, ended) {
            (Some(piece), Some(how)) => {
                self.ended = Some(end(self, how));
                Step::Piece(Box::new(piece))
            }
            (Some(piece), None) => Step::Piece(Box::new(piece)),
            (None, Some(how)) => Step::End(end(self, how)),
            // An empty batch before the end can not be: a batch fills up
            // to its size or to the part's end.
            (None, None) => {
                debug_assert!(false, "an empty batch before a part's end");
                parts.stop_after(self.k);
                Step::End(end(self, Ended::Failed))
            }
        }
    }
}

/// Whether a piece's filter set no key aside (outside the window). With
/// keys kept (`outside`), a list dropped for its size is something: the
/// piece carries the news that the file's list is dropped (found by
/// review).
fn seen_nothing(seen: &Seen, outside: bool) -> bool {
    match &seen.outside {
        Some(o) => o.is_empty(),
        None => !outside,
    }
}

/// The part the engine's thread is reading, between its batches: the
/// reader thread goes on with it at the end of its own part.
pub(super) type Begun = Mutex<Option<Cursor>>;

/// The reader thread's share: the first part, which `first` is
/// positioned at, then after each the part the engine's thread began, or
/// else the next free one; every batch sent.
pub(super) fn read_parts(
    feed: &Feed<'_>,
    parts: &Parts<'_>,
    begun: &Begun,
    first: FileReader,
    send: &mut dyn FnMut(Message) -> Result<()>,
    outside: bool,
) -> Result<()> {
    let mut cursor = Some(Cursor::new(0, first));
    while let Some(mut c) = cursor.take() {
        loop {
            match c.step(feed, parts, outside) {
                Step::Piece(piece) => send(Message::Piece(*piece))?,
                Step::End(end) => {
                    send(Message::PartEnd(end))?;
                    break;
                }
            }
        }
        // The part begun, or the next free one, taken under the lock: the
        // engine's thread cannot begin a part between the two (it would
        // then hold the part in turn while this one reads the next).
        // Nothing is sent under the lock: the engine may be waiting for it.
        let mut failed = Vec::new();
        {
            let mut slot = begun.lock().unwrap_or_else(|e| e.into_inner());
            cursor = slot.take();
            while cursor.is_none() {
                let Some(k) = parts.take() else { break };
                match Cursor::open(parts, k) {
                    Ok(c) => cursor = Some(c),
                    Err(end) => failed.push(end),
                }
            }
        }
        for end in failed {
            send(Message::PartEnd(end))?;
        }
    }
    Ok(())
}

/// What reading the target in parts found.
pub(super) struct Read {
    /// What its filter set aside, in file order.
    pub seen: Seen,
    /// How many parts were taken in order.
    pub parts: usize,
    /// Whether the rest was read in one pass.
    pub rest: bool,
}

/// The engine thread's side: batches taken in file order, and parts of
/// its own read between the reader thread's batches.
pub(super) struct Ordered<'p, 'a> {
    parts: &'p Parts<'a>,
    /// This thread's part, between its batches.
    begun: &'p Begun,
    feed: Feed<'p>,
    outside: bool,
    /// Whether this thread may read parts: every source batch is in.
    open: bool,
    /// The part being taken, and its next piece.
    k: usize,
    next: u32,
    /// The file line of part `k`'s first line.
    base: u64,
    /// Where the last batch taken ended (file lines).
    at: Place,
    /// Pieces before their turn, by order.
    waiting: BTreeMap<u64, Piece>,
    /// Parts read to their end (or failed), before their turn.
    ends: BTreeMap<usize, PartEnd>,
    seen: Seen,
    /// Every part taken, or the rest read in one pass.
    done: bool,
    rest: bool,
}

impl<'p, 'a> Ordered<'p, 'a> {
    /// `start`: where the first part's reader stands before its first
    /// record. `open`: no source batch is to come.
    pub(super) fn new(
        parts: &'p Parts<'a>,
        begun: &'p Begun,
        start: Place,
        feed: Feed<'p>,
        outside: bool,
        open: bool,
    ) -> Ordered<'p, 'a> {
        Ordered {
            parts,
            begun,
            feed,
            outside,
            open,
            k: 0,
            next: 0,
            base: 1,
            at: start,
            waiting: BTreeMap::new(),
            ends: BTreeMap::new(),
            seen: Seen::new(outside),
            done: false,
            rest: false,
        }
    }

    /// Whether this thread should read a batch of its own now: the source
    /// is in, a part is left to read, and it is not too far ahead.
    pub(super) fn may_read(&self) -> bool {
        if !self.open || self.done {
            return false;
        }
        let begun = self
            .begun
            .lock()
            .map(|b| b.as_ref().map(|c| c.k))
            .unwrap_or(None);
        // Its own part in turn is read whatever waits: it may have taken
        // that part just as the reader thread found none begun and took
        // the next (found by review).
        if begun == Some(self.k) {
            return true;
        }
        if self.waiting.len() >= AHEAD {
            return false;
        }
        let next = self.parts.next.load(Ordering::Relaxed);
        (next < self.parts.count() && next <= self.parts.stop_after.load(Ordering::Relaxed))
            || begun.is_some()
    }

    /// Reads one batch of this thread's part (beginning the next free part
    /// when the reader thread took it over or it ended), and takes what is
    /// in turn.
    pub(super) fn step(
        &mut self,
        engine: &mut DiffEngine,
        free: &Sender<RecordBatch>,
    ) -> Result<()> {
        // Held while the batch is read: the reader thread takes the part
        // over between two batches, never during one.
        let mut begun = self.begun.lock().unwrap_or_else(|e| e.into_inner());
        let mut cursor = match begun.take() {
            Some(c) => c,
            None => {
                let Some(k) = self.parts.take() else {
                    return Ok(());
                };
                match Cursor::open(self.parts, k) {
                    Ok(c) => c,
                    Err(end) => {
                        drop(begun);
                        return self.part_end(end, engine, free);
                    }
                }
            }
        };
        let step = cursor.step(&self.feed, self.parts, self.outside);
        if matches!(step, Step::Piece(_)) {
            *begun = Some(cursor);
        }
        drop(begun);
        match step {
            Step::Piece(piece) => self.piece(*piece, engine, free),
            Step::End(end) => self.part_end(end, engine, free),
        }
    }

    /// A piece from either thread.
    pub(super) fn piece(
        &mut self,
        piece: Piece,
        engine: &mut DiffEngine,
        free: &Sender<RecordBatch>,
    ) -> Result<()> {
        self.open = true;
        if self.done {
            let _ = free.send(piece.batch);
            return Ok(());
        }
        self.waiting.insert(piece.batch.order(), piece);
        self.advance(engine, free)
    }

    /// A part's end from either thread.
    pub(super) fn part_end(
        &mut self,
        end: PartEnd,
        engine: &mut DiffEngine,
        free: &Sender<RecordBatch>,
    ) -> Result<()> {
        self.open = true;
        if !self.done {
            self.ends.insert(end.k, end);
        }
        self.advance(engine, free)
    }

    /// The file's lines for a place in part `k`.
    fn in_file(&self, place: Place) -> Place {
        Place {
            line: self.base + place.line - 1,
            ..place
        }
    }

    /// Takes every piece and part end that is in turn.
    fn advance(&mut self, engine: &mut DiffEngine, free: &Sender<RecordBatch>) -> Result<()> {
        while !self.done {
            let order = first_order(self.k) + u64::from(self.next);
            if let Some(piece) = self.waiting.remove(&order) {
                engine.add_target_batch(&piece.batch);
                self.seen.append(piece.seen);
                self.at = self.in_file(piece.place);
                self.next += 1;
                let _ = free.send(piece.batch);
                continue;
            }
            match self.ends.first_key_value() {
                Some((&k, end)) if k == self.k && end.pieces == self.next => {}
                _ => return Ok(()),
            }
            let end = self.ends.remove(&self.k).expect("the part's end");
            match end.how {
                Ended::Failed => return self.read_rest(self.at, engine, free),
                Ended::Read { place, sound } => {
                    let place = self.in_file(place);
                    if self.k + 1 == self.parts.count() {
                        self.done = true;
                    } else if !sound {
                        // A quoted field ran across the cut: the part
                        // after began inside it.
                        return self.read_rest(place, engine, free);
                    } else {
                        self.k += 1;
                        self.next = 0;
                        self.base = place.line;
                        self.at = place;
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads the rest of the file from `at` in one pass, here: the parts
    /// after it are dropped.
    fn read_rest(
        &mut self,
        at: Place,
        engine: &mut DiffEngine,
        free: &Sender<RecordBatch>,
    ) -> Result<()> {
        tracing::debug!(
            message = "Reading the rest of the target in one pass (a cut inside a quoted field, or an error in a part).",
            file = self.parts.template.display(),
            line = at.line
        );
        self.parts.stop_after(0);
        self.done = true;
        self.rest = true;
        *self.begun.lock().unwrap_or_else(|e| e.into_inner()) = None;
        for (_, piece) in std::mem::take(&mut self.waiting) {
            let _ = free.send(piece.batch);
        }
        self.ends.clear();
        self.feed.bytes.store(at.position, Ordering::Relaxed);
        let mut reader = self.parts.template.rest(at)?;
        let mut take = |msg: Message| {
            if let Message::Target(batch) = msg {
                engine.add_target_batch(&batch);
                let _ = free.send(batch);
            }
            Ok(())
        };
        read_side(&self.feed, &mut reader, &mut take, &mut self.seen, 0)
    }

    /// Once the reader thread is done: reads this thread's part to its
    /// end and takes everything in turn.
    pub(super) fn finish(
        mut self,
        engine: &mut DiffEngine,
        free: &Sender<RecordBatch>,
    ) -> Result<Read> {
        while !self.done && self.begun.lock().is_ok_and(|b| b.is_some()) {
            self.step(engine, free)?;
        }
        self.advance(engine, free)?;
        anyhow::ensure!(
            self.done,
            "internal error: parts of {} were left unread",
            self.parts.template.display()
        );
        Ok(Read {
            seen: self.seen,
            parts: self.k + 1,
            rest: self.rest,
        })
    }
}
