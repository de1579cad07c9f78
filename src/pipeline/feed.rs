//! The batched engine feed `recon diff` and `recon run` share: a reader
//! thread parses, filters and encodes file rows into batches, the calling
//! thread indexes (source) or probes (target) them. Batches travel through
//! a short queue and come back for reuse, so no record is ever owned.

use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};
use std::time::{Duration, Instant};

use anyhow::Result;
use recon_core::ValueRef;
use recon_file::{FileReader, ReadError};

use crate::diff::{DiffEngine, DiffSpec, RecordBatch};

/// Records per batch handed from the reader thread to the engine.
const BATCH: usize = 8192;

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
}

/// Feeds files to the engine, in order, through the two stages.
pub fn feed_files(engine: &mut DiffEngine, files: Vec<FileFeed<'_>>) -> Result<Fed> {
    let started = Instant::now();
    let spec = engine.spec().clone();
    let mut source_done = None;
    let filtered = files.iter().filter(|(_, _, keep)| keep.is_some()).count();
    let (unplaced, outside) =
        std::thread::scope(|scope| -> Result<(Vec<String>, Option<Outside>)> {
            let (tx, rx) = sync_channel::<Message>(4);
            let (free_tx, free_rx) = channel::<RecordBatch>();
            let spec = &spec;
            let handle = scope.spawn(move || -> Result<(Vec<String>, Option<Outside>)> {
                let mut unplaced = Vec::new();
                let mut outside = (filtered == 1).then(Outside::default);
                for (mut reader, side, keep) in files {
                    let seen = (&mut unplaced, &mut outside);
                    read_side(&mut reader, spec, side, &tx, &free_rx, keep, seen)?;
                }
                Ok((unplaced, outside.map(Outside::seal)))
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
                        source_done.get_or_insert_with(|| started.elapsed());
                        engine.add_target_batch(&batch);
                        let _ = free_tx.send(batch);
                    }
                }
            }
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("file reader thread panicked"))?
        })?;
    Ok(Fed {
        source_done,
        unplaced,
        outside,
    })
}

/// Parses one file into batches on the calling thread, sending each full batch.
fn read_side(
    reader: &mut FileReader,
    spec: &DiffSpec,
    side: Side,
    tx: &SyncSender<Message>,
    free: &Receiver<RecordBatch>,
    keep: Option<RowFilter<'_>>,
    (unplaced, outside): (&mut Vec<String>, &mut Option<Outside>),
) -> Result<()> {
    let fresh = |free: &Receiver<RecordBatch>| {
        let mut b = free.try_recv().unwrap_or_else(|_| RecordBatch::new(spec));
        b.clear();
        b
    };
    let mut first = true;
    loop {
        let mut batch = fresh(free);
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
        let done = match done {
            Ok(done) => done,
            Err(ReadError::Connector(e)) => return Err(e.into()),
            Err(ReadError::Caller(e)) => return Err(e),
        };
        if !batch.is_empty() {
            let (read, total) = reader.progress();
            crate::ops::progress::file_batch(side == Side::Source, batch.len(), read, total);
            let msg = match side {
                // Estimate the source's size from the first batch's bytes
                // per row, so that the engine sizes its index once.
                Side::Source => {
                    let (read, total) = reader.progress();
                    let estimate = (first && read > 0).then(|| {
                        (total as f64 / (read as f64 / batch.len() as f64) * 1.02) as usize
                    });
                    Message::Source(batch, estimate)
                }
                Side::Target => Message::Target(batch),
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
