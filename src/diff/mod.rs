//! The diff engine: pure, no I/O.
//!
//! Records of the source side are loaded first into a compact key index;
//! records of the target side are then streamed past it, one at a time.
//! Memory grows with the source side's keys (and compared values), plus
//! the target-only records (orphans) in the same compact encoding; gaps and
//! orphans are never materialised as owned rows (see [`Records`]).
//!
//! Every distinct external ID lands in exactly one class:
//! - **duplicate**: it occurs more than once on either side. This wins over
//!   every other class, because a doubled record makes the pair ambiguous
//!   (which of the two copies should be compared?) and is the bug to fix first.
//! - **gap**: only in the source; **orphan**: only in the target;
//! - **mismatch**: in both once, and a compared field differs beyond its
//!   tolerance; **matched**: in both once, and equal.
//!
//! Per-currency totals sum every row read (duplicates included), so a
//! duplicated payment shows up in the money delta as well as in the count.

mod arena;
mod keys;
mod records;
mod texts;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use foldhash::fast::FixedState;
use recon_core::{Currency, FieldKind, Schema, Value, ValueRef};
use serde::Serialize;

use arena::{
    decode_scalar, decode_value, encode_record, field_end, hash_key, key_at, prefetch_ahead,
    prefetch_at, split_record, KeyIndex, AHEAD, DUP_OTHER, DUP_SELF, EMPTY, MISMATCH, OFFSET_MASK,
    SAME_OTHER, SEEN_OTHER,
};
use keys::{cmp_keys, key_string, with_key};
use recon_core::Record;
pub use records::Records;
use texts::{TextCodec, TextDict};

/// The engine's hash of an external ID (the same everywhere in a process).
pub fn key_hash(key: &str) -> u64 {
    arena::hash_key(key.as_bytes())
}

/// Records of one side, encoded and hashed ahead of the engine, possibly on
/// another thread: a reader fills batches while the engine indexes or
/// probes the previous one.
pub struct RecordBatch {
    bytes: Vec<u8>,
    /// (start, end) of each encoded record in `bytes`. Keys are hashed by
    /// the engine (a reader thread is the busier of the two).
    rows: Vec<(usize, usize)>,
    /// The batch's totals, a few currencies searched in turn (a map entry
    /// per row was 2% of a typed read).
    totals: Vec<(Option<Currency>, CurrencyTotal)>,
    money_field: Option<usize>,
    kinds: Vec<FieldKind>,
    /// The codes of the spec's text values this batch has learnt.
    texts: TextCodec,
    /// Where the batch lies in its file, for batches of one file read on
    /// two threads ([`RecordBatch::set_order`]).
    order: u64,
}

impl RecordBatch {
    /// An empty batch for records of this spec (and of every engine made
    /// with it or a clone of it: they share its text codes).
    pub fn new(spec: &DiffSpec) -> RecordBatch {
        RecordBatch {
            bytes: Vec::new(),
            rows: Vec::new(),
            totals: Vec::new(),
            money_field: spec.schema.money_field(),
            kinds: spec.schema.fields.iter().map(|f| f.kind).collect(),
            texts: TextCodec::new(spec.texts.clone()),
            order: 0,
        }
    }

    /// Numbers the batch by its place in the file: a source file read in
    /// two halves reaches the engine in batches out of file order, and
    /// the copies of a duplicated ID are put back in file order by these
    /// numbers (batches of the first half below those of the second).
    pub fn set_order(&mut self, order: u64) {
        self.order = order;
    }

    /// The batch's place in its file ([`RecordBatch::set_order`]).
    pub fn order(&self) -> u64 {
        self.order
    }

    /// Adds one record.
    pub fn push(&mut self, key: &str, values: &[ValueRef<'_>]) -> Result<(), DiffError> {
        if values.len() != self.kinds.len() {
            return Err(DiffError::Arity {
                key: key.to_string(),
                got: values.len(),
                want: self.kinds.len(),
            });
        }
        if has_nul(key.as_bytes()) {
            return Err(DiffError::Nul(key.to_string()));
        }
        let start = self.bytes.len();
        if let Err(i) = encode_record(&mut self.bytes, key, values, &self.kinds, &mut self.texts) {
            self.bytes.truncate(start);
            return Err(DiffError::Kind {
                key: key.to_string(),
                field: i,
                kind: self.kinds[i],
            });
        }
        add_total(&mut self.totals, self.money_field, values);
        self.rows.push((start, self.bytes.len()));
        Ok(())
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.rows.clear();
        self.totals.clear();
    }
}

/// Whether `b` holds a zero byte: eight bytes at a time (a key is a few
/// dozen bytes, where a `memchr` call costs more than the search; measured
/// at 1.4% of a 2M-row run's CPU).
#[inline]
fn has_nul(b: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let x = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        if x.wrapping_sub(LO) & !x & HI != 0 {
            return true;
        }
    }
    chunks.remainder().contains(&0)
}

fn add_total(
    totals: &mut Vec<(Option<Currency>, CurrencyTotal)>,
    money_field: Option<usize>,
    values: &[ValueRef<'_>],
) {
    let (currency, minor) = match money_field.map(|i| values[i]) {
        Some(ValueRef::Money(m)) => (Some(m.currency), i128::from(m.minor)),
        _ => (None, 0),
    };
    let t = match totals.iter().position(|(c, _)| *c == currency) {
        Some(i) => &mut totals[i].1,
        None => {
            totals.push((currency, CurrencyTotal::default()));
            &mut totals.last_mut().expect("just pushed").1
        }
    };
    t.records += 1;
    t.minor += minor;
}

fn merge_totals(into: &mut Totals, from: &[(Option<Currency>, CurrencyTotal)]) {
    for (c, t) in from {
        let e = into.entry(*c).or_default();
        e.records += t.records;
        e.minor += t.minor;
    }
}

/// How far apart two values of one field may be and still match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tolerance {
    /// Money or integers: at most this many minor units apart.
    Units(i64),
    /// Timestamps: at most this many seconds apart.
    Seconds(i64),
}

/// What to compare: the fields, their types and tolerances.
#[derive(Clone, Debug)]
pub struct DiffSpec {
    /// Canonical fields; records carry values in this order.
    pub schema: Schema,
    /// One entry per schema field.
    pub tolerances: Vec<Option<Tolerance>>,
    /// The codes of repeated text values, shared by the clones of this
    /// spec, their engines and batches (see `texts.rs`).
    texts: Arc<TextDict>,
}

impl DiffSpec {
    /// A spec comparing by these fields and tolerances (one per field).
    pub fn new(schema: Schema, tolerances: Vec<Option<Tolerance>>) -> DiffSpec {
        DiffSpec {
            schema,
            tolerances,
            texts: Arc::default(),
        }
    }

    /// A spec with exact comparison of every compared field.
    pub fn exact(schema: Schema) -> DiffSpec {
        let n = schema.fields.len();
        DiffSpec::new(schema, vec![None; n])
    }
}

/// Misuse of the engine by its caller.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// A source record arrived after target records had started.
    #[error("source record `{0}` added after the target side started")]
    SourceAfterTarget(String),
    /// A value is not of its field's kind.
    #[error("record `{key}`: value {field} is not a {kind}")]
    Kind {
        /// The record.
        key: String,
        /// Schema index of the field.
        field: usize,
        /// The kind the schema wants.
        kind: FieldKind,
    },
    /// A record has the wrong number of values.
    #[error("record `{key}` has {got} values; the schema has {want} fields")]
    Arity {
        /// The record.
        key: String,
        /// Values given.
        got: usize,
        /// Fields in the schema.
        want: usize,
    },
    /// An external ID holds a NUL character, which no state store keeps
    /// alike (PostgreSQL text refuses it, SQLite keeps it): refused here,
    /// so the same input fails the same way on every backend.
    #[error(
        "external ID `{}` holds a NUL character (U+0000), which recon cannot record (the state store keeps every discrepancy's ID, and PostgreSQL text refuses NUL); remove NUL bytes where the export is made, or strip them (tr -d '\\000' < in.csv > out.csv), then run again",
        .0.replace('\0', "\\0")
    )]
    Nul(String),
}

/// Which side of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The source of truth.
    Source,
    /// The system checked against it.
    Target,
}

impl Side {
    /// `source` or `target`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Side::Source => "source",
            Side::Target => "target",
        }
    }
}

/// One differing field of a mismatched record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDiff {
    /// Schema index of the field.
    pub field: usize,
    /// Value in the source.
    pub source: Value,
    /// Value in the target.
    pub target: Value,
}

/// A record present once on each side with differing compared fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// External ID.
    pub key: String,
    /// Every differing field, in schema order.
    pub fields: Vec<FieldDiff>,
}

/// An external ID present more than once on at least one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    /// External ID.
    pub key: String,
    /// Occurrences in the source.
    pub source_count: u32,
    /// Occurrences in the target.
    pub target_count: u32,
}

/// Count and sum of one currency on one side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CurrencyTotal {
    /// Rows read with this currency (duplicates included).
    pub records: u64,
    /// Sum of their amounts in minor units.
    pub minor: i128,
}

/// Per-currency totals of one side. `None` collects rows without an amount.
pub type Totals = BTreeMap<Option<Currency>, CurrencyTotal>;

/// The complete classification of one diff.
#[derive(Clone, Debug, Default)]
pub struct DiffOutcome {
    /// Distinct external IDs in the source.
    pub source_records: u64,
    /// Distinct external IDs in the target.
    pub target_records: u64,
    /// Rows read from the source (duplicates counted each time).
    pub source_rows: u64,
    /// Rows read from the target.
    pub target_rows: u64,
    /// IDs in both once, equal.
    pub matched: u64,
    /// Source records missing from the target, sorted by key.
    pub gaps: Records,
    /// Target records missing from the source, sorted by key; kept encoded
    /// (see [`Records`]), so that memory follows one side's size.
    pub orphans: Records,
    /// Records differing in compared fields, sorted by key.
    pub mismatches: Vec<Mismatch>,
    /// The source record of each mismatch the engine found, sorted by
    /// key: what an upsert writes, kept encoded in the source's arena (8
    /// bytes per mismatch), so a repair needs no second source fetch.
    pub mismatch_sources: Records,
    /// IDs occurring more than once on a side, sorted by key.
    pub duplicates: Vec<Duplicate>,
    /// Totals of every source row.
    pub source_totals: Totals,
    /// Totals of every target row.
    pub target_totals: Totals,
    /// Every copy of each duplicated ID, as the engine saw them, when it
    /// was asked to keep them ([`DiffEngine::capture_copies`]).
    pub copies: Option<Copies>,
}

/// Every copy of the IDs a side holds more than once, in the order the
/// engine saw them (a file's order), kept during the one pass so that no
/// side is read again to list them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copies {
    /// The source's copies: every copy of each ID it holds more than once.
    pub source: Vec<Record>,
    /// The target's copies, except those of `target_unknown`.
    pub target: Vec<Record>,
    /// IDs the target holds more than once whose first copy the engine
    /// did not keep: it matched the source's record without being the
    /// same bytes (within a tolerance, or apart in a field not compared)
    /// before the ID turned out duplicated. Their copies must be asked of
    /// the target.
    pub target_unknown: Vec<String>,
}

/// One kept copy: a record still in an index's arena, or one copied into
/// the capture's own ([`Capture::bytes`]).
#[derive(Clone, Copy)]
enum Kept {
    Source(u64),
    Orphan(u64),
    Copied(u64),
}

/// What [`DiffEngine::capture_copies`] keeps while records stream past.
#[derive(Default)]
struct Capture {
    source: Vec<Kept>,
    target: Vec<Kept>,
    /// Records kept that are in no index, one after another: one buffer,
    /// not an allocation each (a 10M-row diff keeps the first target copy
    /// of 100,000 mismatches; their boxes were freed one by one at the
    /// end, and glibc then sorted the fragments for 40 ms before the next
    /// allocations on the engine's thread).
    bytes: Vec<u8>,
    /// First target copies that differ from the source's record (of IDs
    /// the source holds more than once, or mismatched), until a second
    /// target copy shows: source offset -> offset in `bytes`.
    first_target: HashMap<u64, u64, FixedState>,
    /// Source offsets whose first target copy was not kept.
    unknown: Vec<u64>,
    /// For each of `source`: the order of its batch and its row in it,
    /// `None` for a record in the index (found through `starts`).
    source_at: Vec<Option<(u64, u32)>>,
    /// Where each source batch's records begin in the index's arena, and
    /// the batch's order.
    starts: Vec<(u64, u64)>,
    /// A source batch came after one of a higher order.
    reordered: bool,
}

struct PendingMismatch {
    offset: u64,
    diffs: Vec<FieldDiff>,
}

/// Classifies records of two sides. Add every source record, then every
/// target record, then call [`DiffEngine::finish`].
pub struct DiffEngine {
    spec: DiffSpec,
    source: KeyIndex,
    orphans: KeyIndex,
    /// Occurrence counts of duplicated keys, by source offset.
    source_dups: HashMap<u64, (u32, u32), FixedState>,
    /// Occurrence counts of duplicated orphan keys, by orphan offset.
    orphan_dups: HashMap<u64, u32, FixedState>,
    mismatches: Vec<PendingMismatch>,
    source_totals: Totals,
    target_totals: Totals,
    source_rows: u64,
    target_rows: u64,
    target_started: bool,
    /// Every field compared exactly: equal encodings mean equal records.
    bytewise: bool,
    /// Reused by the one-record calls, so they allocate nothing per record.
    scratch: Option<RecordBatch>,
    kinds: Vec<FieldKind>,
    copies: Option<Box<Capture>>,
    /// The hashes of a batch's keys, reused from batch to batch.
    hashes: Vec<u64>,
}

impl DiffEngine {
    /// A new engine for this spec.
    pub fn new(spec: DiffSpec) -> DiffEngine {
        DiffEngine {
            source: KeyIndex::new(),
            orphans: KeyIndex::new(),
            source_dups: HashMap::default(),
            orphan_dups: HashMap::default(),
            mismatches: Vec::new(),
            source_totals: Totals::new(),
            target_totals: Totals::new(),
            source_rows: 0,
            target_rows: 0,
            target_started: false,
            bytewise: spec_is_bytewise(&spec),
            scratch: None,
            kinds: spec.schema.fields.iter().map(|f| f.kind).collect(),
            copies: None,
            hashes: Vec::new(),
            spec,
        }
    }

    /// Keeps every copy of each duplicated ID as it streams past, for
    /// [`DiffOutcome::copies`]: a few bytes per copy of a duplicate, and
    /// nothing for the rest.
    pub fn capture_copies(&mut self) {
        self.copies.get_or_insert_with(Box::default);
    }

    /// Forgets every source record added so far, to read the source again
    /// from its start (a split read whose halves did not meet at a record
    /// boundary). Copies are still captured if they were.
    pub fn restart_source(&mut self) {
        assert!(!self.target_started, "source restarted after the target");
        let capture = self.copies.is_some();
        *self = DiffEngine::new(self.spec.clone());
        if capture {
            self.capture_copies();
        }
    }

    /// Makes room for about `records` distinct source keys up front.
    pub fn reserve_source(&mut self, records: usize) {
        self.source
            .reserve(records.saturating_sub(self.source.len()));
    }

    /// The spec this engine compares by.
    pub fn spec(&self) -> &DiffSpec {
        &self.spec
    }

    /// Adds one source record.
    pub fn add_source(&mut self, key: &str, values: &[ValueRef<'_>]) -> Result<(), DiffError> {
        if self.target_started {
            return Err(DiffError::SourceAfterTarget(key.to_string()));
        }
        let mut batch = self
            .scratch
            .take()
            .unwrap_or_else(|| RecordBatch::new(&self.spec));
        batch.clear();
        let result = batch.push(key, values);
        if result.is_ok() {
            self.add_source_batch(&batch)?;
        }
        self.scratch = Some(batch);
        result
    }

    /// Adds one target record. Source records can no longer be added.
    pub fn add_target(&mut self, key: &str, values: &[ValueRef<'_>]) -> Result<(), DiffError> {
        let mut batch = self
            .scratch
            .take()
            .unwrap_or_else(|| RecordBatch::new(&self.spec));
        batch.clear();
        let result = batch.push(key, values);
        if result.is_ok() {
            self.add_target_batch(&batch);
        }
        self.scratch = Some(batch);
        result
    }

    /// Adds a batch of source records.
    pub fn add_source_batch(&mut self, batch: &RecordBatch) -> Result<(), DiffError> {
        if self.target_started {
            let key = batch
                .rows
                .first()
                .map(|&(s, _)| key_string(split_record(&batch.bytes, s).0))
                .unwrap_or_default();
            return Err(DiffError::SourceAfterTarget(key));
        }
        self.source_rows += batch.len() as u64;
        merge_totals(&mut self.source_totals, &batch.totals);
        if let Some(c) = self.copies.as_mut() {
            c.source_batch(self.source.arena().len() as u64, batch.order);
        }
        let hashes = hash_rows(&mut self.hashes, batch);
        for (n, (&hash, &(start, end))) in hashes.iter().zip(&batch.rows).enumerate() {
            if let Some(&h) = hashes.get(n + PREFETCH_SLOTS) {
                self.source.prefetch_slot(h);
            }
            let (key, _) = split_record(&batch.bytes, start);
            if let Some(entry) = self
                .source
                .find_or_insert(hash, key, &batch.bytes[start..end])
            {
                let first_dup = *entry & DUP_SELF == 0;
                *entry |= DUP_SELF;
                let offset = *entry & OFFSET_MASK;
                self.source_dups.entry(offset).or_insert((1, 0)).0 += 1;
                if let Some(c) = self.copies.as_mut() {
                    if first_dup {
                        c.source.push(Kept::Source(offset));
                        c.source_at.push(None);
                    }
                    let kept = c.copy(&batch.bytes[start..end]);
                    c.source.push(kept);
                    c.source_at.push(Some((batch.order, n as u32)));
                }
            }
        }
        Ok(())
    }

    /// Adds a batch of target records. Source records can no longer be added.
    pub fn add_target_batch(&mut self, batch: &RecordBatch) {
        self.target_started = true;
        self.target_rows += batch.len() as u64;
        merge_totals(&mut self.target_totals, &batch.totals);
        let mut hashes = std::mem::take(&mut self.hashes);
        hash_rows(&mut hashes, batch);
        for (n, (&hash, &(start, end))) in hashes.iter().zip(&batch.rows).enumerate() {
            // Two-stage prefetch: the slot of a row far ahead, then the
            // record of a row nearer (its slot has arrived by now).
            if let Some(&h) = hashes.get(n + PREFETCH_SLOTS) {
                self.source.prefetch_slot(h);
            }
            if let Some(&h) = hashes.get(n + PREFETCH_RECORDS) {
                self.source.prefetch_record(h);
            }
            let record = &batch.bytes[start..end];
            let (key, values_at) = split_record(record, 0);
            if let Some((entry, same_bytes)) = self.source.find_record(hash, key, record) {
                let offset = *entry & OFFSET_MASK;
                if *entry & SEEN_OTHER != 0 {
                    let first_dup = *entry & DUP_OTHER == 0;
                    let same = *entry & SAME_OTHER != 0;
                    *entry |= DUP_OTHER;
                    let counts = self.source_dups.entry(offset).or_insert((1, 1));
                    counts.1 += 1;
                    if let Some(c) = self.copies.as_mut() {
                        c.target_copy(offset, first_dup, same, record);
                    }
                    continue;
                }
                *entry |= SEEN_OTHER;
                if *entry & DUP_SELF != 0 {
                    // Already a duplicate: comparing fields would be meaningless.
                    self.source_dups.entry(offset).or_insert((1, 0)).1 = 1;
                    if let Some(c) = self.copies.as_mut() {
                        c.keep_first(offset, record);
                    }
                    continue;
                }
                // Records are encoded the same way on both sides, so equal
                // bytes mean equal records: the common case costs one memcmp
                // (made while finding the entry).
                if same_bytes {
                    if self.copies.is_some() {
                        // A second copy then knows the first is the source's record.
                        *entry |= SAME_OTHER;
                    }
                    if self.bytewise {
                        continue;
                    }
                }
                let diffs = self.compare(offset, record, values_at);
                if !diffs.is_empty() {
                    if let Some(entry) = self.source.find_mut(hash, key) {
                        *entry |= MISMATCH;
                    }
                    if let Some(c) = self.copies.as_mut() {
                        // Kept in case a second copy follows (a mismatch
                        // already holds more than these bytes).
                        c.keep_first(offset, record);
                    }
                    self.mismatches.push(PendingMismatch { offset, diffs });
                }
            } else if let Some(entry) = self.orphans.find_mut(hash, key) {
                let first_dup = *entry & DUP_SELF == 0;
                *entry |= DUP_SELF;
                let offset = *entry & OFFSET_MASK;
                *self.orphan_dups.entry(offset).or_insert(1) += 1;
                if let Some(c) = self.copies.as_mut() {
                    if first_dup {
                        c.target.push(Kept::Orphan(offset));
                    }
                    let kept = c.copy(record);
                    c.target.push(kept);
                }
            } else {
                self.orphans.insert_encoded(hash, record);
            }
        }
        self.hashes = hashes;
    }

    fn compare(&self, offset: u64, record: &[u8], values_at: usize) -> Vec<FieldDiff> {
        let mut diffs = Vec::new();
        let fields = &self.spec.schema.fields;
        let arena = self.source.arena();
        let (_, mut sp) = split_record(arena, offset as usize);
        let mut tp = values_at;
        for (i, field) in fields.iter().enumerate() {
            let kind = field.kind;
            let (se, te) = (field_end(arena, sp, kind), field_end(record, tp, kind));
            // Text is compared exactly, and each text value has one
            // encoding: equal bytes are equal text (no decoding).
            let differ = field.compared
                && if kind == FieldKind::Text {
                    arena[sp..se] != record[tp..te]
                } else {
                    let (a, _) = decode_scalar(arena, sp, kind);
                    let (b, _) = decode_scalar(record, tp, kind);
                    !equal(a, b, kind, self.spec.tolerances[i])
                };
            if differ {
                let texts = &self.spec.texts;
                diffs.push(FieldDiff {
                    field: i,
                    source: decode_value(arena, sp, kind, texts).0,
                    target: decode_value(record, tp, kind, texts).0,
                });
            }
            sp = se;
            tp = te;
        }
        diffs
    }

    /// Classifies every key and returns the outcome.
    ///
    /// Gaps and orphans stay encoded in the arena their side was read into
    /// (see [`Records`]); the hash table's memory is reused for their
    /// offsets, so the peak stays at the size of the larger index.
    pub fn finish(self) -> DiffOutcome {
        let kinds: Arc<[FieldKind]> = Arc::from(self.kinds.as_slice());
        let mut out = DiffOutcome {
            source_rows: self.source_rows,
            target_rows: self.target_rows,
            source_records: self.source.len() as u64,
            source_totals: self.source_totals,
            target_totals: self.target_totals,
            ..DiffOutcome::default()
        };
        let key_string = |arena: &[u8], offset: u64| key_string(key_at(arena, offset));
        let texts = &self.spec.texts;

        // Target side: every key not in the source, once or more. One table
        // and its own sort, classified on a thread of its own beside the
        // source side (nothing else runs then: the other core was idle).
        let orphan_keys = self.orphans.len() as u64;
        let (orphan_arena, mut orphan_slots) = self.orphans.into_parts();
        let orphan_arena = Arc::new(orphan_arena);
        let orphan_dups = &self.orphan_dups;
        let target_side = || {
            let mut duplicates = Vec::new();
            orphan_slots.retain(|&entry| {
                if entry == EMPTY {
                    return false;
                }
                if entry & DUP_SELF != 0 {
                    let offset = entry & OFFSET_MASK;
                    duplicates.push(Duplicate {
                        key: key_string(&orphan_arena, offset),
                        source_count: 0,
                        target_count: orphan_dups.get(&offset).copied().unwrap_or(2),
                    });
                    return false;
                }
                true
            });
            let orphans = sorted_records(orphan_arena.clone(), orphan_slots, &kinds, texts);
            (orphans, duplicates)
        };

        let (orphans, orphan_duplicates) = std::thread::scope(|scope| {
            let target = scope.spawn(target_side);
            // Source side: gaps stay in the table's vector (in place), the
            // other classes are counted or noted.
            let (arena, mut slots) = self.source.into_parts();
            let scan = scan_source_slots(&mut slots);
            out.matched = scan.matched;
            out.target_records = scan.seen_in_target + orphan_keys;
            let dup_entries = scan.duplicates;
            for entry in dup_entries {
                let offset = entry & OFFSET_MASK;
                let (s, t) = self.source_dups.get(&offset).copied().unwrap_or((1, 1));
                let target_count = if entry & SEEN_OTHER != 0 { t.max(1) } else { 0 };
                out.duplicates.push(Duplicate {
                    key: key_string(&arena, offset),
                    source_count: s,
                    target_count,
                });
            }
            // The gaps are sorted on a thread of their own while the
            // mismatches are listed here (10M rows: 100,000 of each).
            let arena = Arc::new(arena);
            let gaps = {
                let (arena, kinds) = (arena.clone(), &kinds);
                scope.spawn(move || sorted_records(arena, slots, kinds, texts))
            };
            // The copies are decoded on a thread of their own too: the
            // engine's thread listed the mismatches alone after them.
            let copies = self.copies.map(|c| {
                let (arena, orphan_arena, kinds) =
                    (arena.clone(), orphan_arena.clone(), &self.kinds);
                scope.spawn(move || c.finish(&arena, &orphan_arena, kinds, texts))
            });
            let mut pending = self.mismatches;
            let mut mismatch_offsets = Vec::with_capacity(pending.len());
            for i in 0..pending.len() {
                if let Some(p) = pending.get(i + AHEAD) {
                    prefetch_at(&arena, p.offset);
                }
                let p = &mut pending[i];
                // A key that later turned out duplicated is reported as a duplicate only.
                if !self.source_dups.contains_key(&p.offset) {
                    out.mismatches.push(Mismatch {
                        key: key_string(&arena, p.offset),
                        fields: std::mem::take(&mut p.diffs),
                    });
                    mismatch_offsets.push(p.offset);
                }
            }
            let listed = mismatch_offsets.clone();
            sort_by_key(&arena, &mut mismatch_offsets);
            in_order_of(&mut out.mismatches, &listed, &mismatch_offsets);
            out.mismatch_sources = Records::encoded(
                arena.clone(),
                mismatch_offsets,
                kinds.clone(),
                texts.clone(),
            );
            out.copies = copies.map(|c| {
                c.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            });
            out.gaps = gaps
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            target
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        out.orphans = orphans;
        out.duplicates.extend(orphan_duplicates);
        out.mismatches.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        out.duplicates.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

impl Capture {
    /// Notes a source batch's start in the arena and its order.
    fn source_batch(&mut self, arena_len: u64, order: u64) {
        match self.starts.last() {
            // Records added one at a time come in batches of one, all of
            // order 0: one entry serves them.
            Some(&(_, last)) if last == order => {}
            Some(&(_, last)) => {
                self.reordered |= last > order;
                self.starts.push((arena_len, order));
            }
            None => self.starts.push((arena_len, order)),
        }
    }

    /// Puts the source's copies back in file order when batches came out
    /// of it: a copy in the index sorts by its batch (before the copies
    /// that batch's later rows found), the others by batch and row.
    fn source_in_file_order(&mut self) {
        if !self.reordered {
            return;
        }
        // Pushed as batches came, so in arena order; of two starting at
        // one offset, the first added nothing and the record is the later's.
        let starts = std::mem::take(&mut self.starts);
        let batch_of = |offset: u64| {
            let i = starts.partition_point(|&(at, _)| at <= offset);
            starts[i.saturating_sub(1)].1
        };
        let at = std::mem::take(&mut self.source_at);
        let mut kept: Vec<((u64, u64), Kept)> = std::mem::take(&mut self.source)
            .into_iter()
            .zip(at)
            .map(|(k, at)| match (&k, at) {
                (_, Some((order, row))) => ((order, u64::from(row) + 1), k),
                (Kept::Source(o), None) => ((batch_of(*o), 0), k),
                (_, None) => ((u64::MAX, u64::MAX), k),
            })
            .collect();
        kept.sort_by_key(|(at, _)| *at);
        self.source = kept.into_iter().map(|(_, k)| k).collect();
    }

    /// A second or later target copy of a source ID (`record`); with the
    /// first, when this is the second.
    fn target_copy(&mut self, offset: u64, first_dup: bool, same: bool, record: &[u8]) {
        if first_dup {
            if let Some(first) = self.first_target.remove(&offset) {
                self.target.push(Kept::Copied(first));
            } else if same {
                self.target.push(Kept::Source(offset));
            } else {
                self.unknown.push(offset);
            }
        }
        let kept = self.copy(record);
        self.target.push(kept);
    }

    /// Copies `record` into [`Capture::bytes`]: where it starts there.
    fn append(&mut self, record: &[u8]) -> u64 {
        let at = self.bytes.len() as u64;
        self.bytes.extend_from_slice(record);
        at
    }

    /// Keeps a copy of `record`, in [`Capture::bytes`].
    fn copy(&mut self, record: &[u8]) -> Kept {
        Kept::Copied(self.append(record))
    }

    /// Keeps the first target copy of the source record at `offset`, in
    /// case a second copy follows.
    fn keep_first(&mut self, offset: u64, record: &[u8]) {
        let at = self.append(record);
        self.first_target.insert(offset, at);
    }

    /// The kept copies, decoded; the target's copies of IDs whose first
    /// copy is unknown are left out (they are asked of the target).
    fn finish(
        mut self,
        source: &[u8],
        orphans: &[u8],
        kinds: &[FieldKind],
        texts: &TextDict,
    ) -> Copies {
        self.source_in_file_order();
        let decode = |k: &Kept| match k {
            Kept::Source(o) => records::decode(source, *o, kinds, texts),
            Kept::Orphan(o) => records::decode(orphans, *o, kinds, texts),
            Kept::Copied(o) => records::decode(&self.bytes, *o, kinds, texts),
        };
        let target_unknown: Vec<String> = self
            .unknown
            .iter()
            .map(|&o| key_string(key_at(source, o)))
            .collect();
        let unknown: std::collections::HashSet<&str> =
            target_unknown.iter().map(String::as_str).collect();
        let target = self
            .target
            .iter()
            .map(decode)
            .filter(|r| !unknown.contains(r.key.as_str()))
            .collect();
        Copies {
            source: self.source.iter().map(decode).collect(),
            target,
            target_unknown,
        }
    }
}

/// Puts `mismatches`, listed in the order of `listed` (their records'
/// offsets), in the order of `sorted` (the same offsets sorted by key),
/// so that sorting them by key afterwards only checks: sorting 100,000
/// key strings from scratch chases two pointers per comparison, where the
/// offsets were sorted by key prefixes. Were offsets repeated, the list is
/// left as it is for that sort.
fn in_order_of(mismatches: &mut Vec<Mismatch>, listed: &[u64], sorted: &[u64]) {
    let n = mismatches.len();
    if n < 2 || listed.len() != n || sorted.len() != n {
        return;
    }
    let mut at: Vec<(u64, usize)> = listed.iter().copied().zip(0..).collect();
    at.sort_unstable();
    if at.windows(2).any(|w| w[0].0 == w[1].0) {
        return;
    }
    let mut taken: Vec<Option<Mismatch>> = mismatches.drain(..).map(Some).collect();
    for offset in sorted {
        let Ok(i) = at.binary_search_by_key(offset, |&(o, _)| o) else {
            continue;
        };
        if let Some(m) = taken[at[i].1].take() {
            mismatches.push(m);
        }
    }
    // Anything not placed (none, as `sorted` holds the same offsets) is kept.
    mismatches.extend(taken.into_iter().flatten());
}

/// What one pass over the source table's slots found: the gaps are left
/// at the front of the slots, in table order.
#[derive(Default)]
struct SourceScan {
    matched: u64,
    seen_in_target: u64,
    duplicates: Vec<u64>,
}

/// Tables past this many slots are scanned in two halves on two threads.
const SCAN_SPLIT_MIN: usize = 1 << 18;

/// Classifies the source table's entries, keeping the gaps' in place at
/// the front of `slots` (no new memory: the table's vector becomes the gap
/// list). A large table is scanned in two halves, the second on a thread
/// of its own (the 2.7M slots of a 2M-row diff took 20 ms in one pass,
/// the other core idle), and its gaps moved down after the first half's,
/// so the order is the one pass's.
fn scan_source_slots(slots: &mut Vec<u64>) -> SourceScan {
    let len = slots.len();
    let mid = if len >= SCAN_SPLIT_MIN { len / 2 } else { len };
    let (first, second) = slots.split_at_mut(mid);
    let (scan, kept) = if second.is_empty() {
        scan_slots(first)
    } else {
        let ((mut scan, kept), (rest, kept_rest)) = std::thread::scope(|scope| {
            let other = scope.spawn(move || scan_slots(second));
            let first = scan_slots(first);
            let second = other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (first, second)
        });
        scan.matched += rest.matched;
        scan.seen_in_target += rest.seen_in_target;
        scan.duplicates.extend(rest.duplicates);
        slots.copy_within(mid..mid + kept_rest, kept);
        (scan, kept + kept_rest)
    };
    slots.truncate(kept);
    scan
}

/// [`scan_source_slots`] of one part: its gaps compacted to its front,
/// and how many there are.
fn scan_slots(part: &mut [u64]) -> (SourceScan, usize) {
    let mut scan = SourceScan::default();
    let mut kept = 0;
    for i in 0..part.len() {
        let entry = part[i];
        if entry == EMPTY {
            continue;
        }
        if entry & SEEN_OTHER != 0 {
            scan.seen_in_target += 1;
        }
        if entry & (DUP_SELF | DUP_OTHER) != 0 {
            scan.duplicates.push(entry);
        } else if entry & SEEN_OTHER == 0 {
            part[kept] = entry;
            kept += 1;
        } else if entry & MISMATCH == 0 {
            scan.matched += 1;
        }
    }
    (scan, kept)
}

/// The records at these entries of `arena`, sorted by key. `entries` (the
/// table's own vector) becomes the list of offsets.
fn sorted_records(
    arena: Arc<Vec<u8>>,
    mut entries: Vec<u64>,
    kinds: &Arc<[FieldKind]>,
    texts: &Arc<TextDict>,
) -> Records {
    for e in entries.iter_mut() {
        *e &= OFFSET_MASK;
    }
    sort_by_key(&arena, &mut entries);
    entries.shrink_to_fit();
    Records::encoded(arena, entries, kinds.clone(), texts.clone())
}

/// Lists longer than this sort by key alone when their vector has no room
/// for key prefixes beside the offsets (a second vector that size would
/// raise the peak).
const PREFIX_SORT_ALLOC_MAX: usize = 1 << 20;

/// Sorts arena offsets by their records' keys. Keys are distinct within
/// one index, so an unstable sort is exact.
///
/// Comparing keys reads the arena at two random places (two cache misses);
/// 100,000 gaps of a 10M-row diff took a tenth of a second that way. So
/// each offset is paired with the 8 bytes of its key that follow the
/// prefix every key shares (`ch_` for Stripe IDs), big-endian and padded
/// with zeros (keys hold no NUL), and the pairs are sorted by those first:
/// the arena is read again only for keys whose 8 bytes tie. The pairs live
/// in the vector's own spare room when it has it (a hash table's vector,
/// reused: no new memory), else in a new one up to
/// [`PREFIX_SORT_ALLOC_MAX`] offsets.
fn sort_by_key(arena: &[u8], offsets: &mut Vec<u64>) {
    let n = offsets.len();
    if n < 2 {
        return;
    }
    let by_key = |a: &u64, b: &u64| cmp_keys(key_at(arena, *a), key_at(arena, *b));
    if offsets.capacity() < 2 * n {
        if n > PREFIX_SORT_ALLOC_MAX {
            offsets.sort_unstable_by(by_key);
            return;
        }
        offsets.reserve_exact(n);
    }
    // Keys of one form (all packed, or none) compare by their encoded
    // bytes, as `cmp_keys` does, and ties of equal bytes go to it; a list
    // of both forms is decoded.
    // Each pass reads the keys at random places in the arena: the key
    // `AHEAD` places on is loaded while this one is read.
    let ahead = |i: usize| prefetch_ahead(arena, offsets, i);
    let first_packed = keys::is_packed(key_at(arena, offsets[0]));
    let uniform = offsets.iter().enumerate().all(|(i, &o)| {
        ahead(i);
        keys::is_packed(key_at(arena, o)) == first_packed
    });
    let view = |o: u64, f: &mut dyn FnMut(&[u8])| {
        let enc = key_at(arena, o);
        if uniform {
            f(keys::payload(enc))
        } else {
            with_key(enc, f)
        }
    };
    let mut first = Vec::new();
    view(offsets[0], &mut |k| first = k.to_vec());
    let mut shared = first.len();
    for (i, &o) in offsets.iter().enumerate() {
        ahead(i);
        view(o, &mut |key| {
            shared = first[..shared]
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        });
        if shared == 0 {
            break;
        }
    }
    let prefix = |o: u64| -> u64 {
        let mut bytes = [0u8; 8];
        view(o, &mut |key| {
            let tail = key.get(shared..).unwrap_or_default();
            let k = tail.len().min(8);
            bytes[..k].copy_from_slice(&tail[..k]);
        });
        u64::from_be_bytes(bytes)
    };
    // Pairs (prefix, offset) from the back, so that no offset is
    // overwritten before it is read (pair i lands at 2i and 2i + 1 >= i).
    offsets.resize(2 * n, 0);
    for i in (0..n).rev() {
        if let Some(&o) = i.checked_sub(AHEAD).map(|j| &offsets[j]) {
            prefetch_at(arena, o);
        }
        let o = offsets[i];
        offsets[2 * i + 1] = o;
        offsets[2 * i] = prefix(o);
    }
    let (pairs, _) = offsets.as_chunks_mut::<2>();
    pairs.sort_unstable_by(|a, b| a[0].cmp(&b[0]).then_with(|| by_key(&a[1], &b[1])));
    for i in 0..n {
        offsets[i] = offsets[2 * i + 1];
    }
    offsets.truncate(n);
}

/// The hashes of a batch's keys, in row order, into `out`.
fn hash_rows<'a>(out: &'a mut Vec<u64>, batch: &RecordBatch) -> &'a [u64] {
    out.clear();
    let rows = &batch.rows;
    out.extend(rows.iter().enumerate().map(|(n, &(start, _))| {
        if let Some(&(ahead, _)) = rows.get(n + HASH_AHEAD) {
            prefetch_at(&batch.bytes, ahead as u64);
        }
        hash_key(split_record(&batch.bytes, start).0)
    }));
    out
}

/// How many rows ahead [`hash_rows`] loads a row's key.
const HASH_AHEAD: usize = 8;

/// How many rows ahead slots are prefetched.
const PREFETCH_SLOTS: usize = 16;
/// How many rows ahead records are prefetched.
const PREFETCH_RECORDS: usize = 8;

fn spec_is_bytewise(spec: &DiffSpec) -> bool {
    spec.schema.fields.iter().all(|f| f.compared) && spec.tolerances.iter().all(Option::is_none)
}

/// Whether two values of one field agree, within its tolerance.
pub fn equal(
    a: ValueRef<'_>,
    b: ValueRef<'_>,
    kind: FieldKind,
    tolerance: Option<Tolerance>,
) -> bool {
    let within =
        |x: i64, y: i64, tol: i64| (i128::from(x) - i128::from(y)).abs() <= i128::from(tol);
    match (a, b) {
        (ValueRef::Money(x), ValueRef::Money(y)) => {
            x.currency == y.currency
                && match tolerance {
                    Some(Tolerance::Units(t)) => within(x.minor, y.minor, t),
                    _ => x.minor == y.minor,
                }
        }
        (ValueRef::Integer(x), ValueRef::Integer(y)) => match tolerance {
            Some(Tolerance::Units(t)) => within(x, y, t),
            _ => x == y,
        },
        (ValueRef::Timestamp(x), ValueRef::Timestamp(y)) => match tolerance {
            Some(Tolerance::Seconds(t)) => within(x.as_second(), y.as_second(), t),
            _ => x.as_second() == y.as_second(),
        },
        _ => {
            let _ = kind;
            a == b
        }
    }
}

#[cfg(test)]
mod tests;
