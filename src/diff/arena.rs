//! A compact key index: external IDs and their encoded values packed into
//! one byte arena, found through an open-addressing table of 8-byte slots.
//!
//! Each slot holds the arena offset of its record (low 40 bits), 16 bits of
//! the key's hash (so that a probe rarely reads the arena for a key that is
//! not its own) and flag bits (high 8 bits). A record in the arena is
//! `key values…`: the key as `keys.rs` encodes it (six bits a character
//! for IDs of letters, digits, `_` and `-`), then values that carry no type
//! tag, since the schema gives each field's kind (text as `texts.rs` stores
//! it: a code for a value the field repeats, the number for canonical
//! digits, else its bytes; integers and timestamps a zigzag varint; a
//! currency two bytes). For the bench pair's Stripe-like rows (`ch_` + 24
//! hex digits, money, currency, a status, Unix seconds kept as text) that
//! is 35 bytes per key (56 before keys were packed and text coded) plus
//! ~11 bytes of table (sized to the load, not to a power of two): a fraction of what a map of owned `String`s and
//! `Vec<Value>`s would take.
//!
//! Why not `hashbrown`: at ten million keys nearly every probe misses the
//! CPU cache twice (slot, then arena). Owning the table lets the engine
//! prefetch the slot and then the record of rows a few positions ahead, so
//! those misses overlap instead of queueing; measured with
//! `scripts/bench-diff`, this halved the engine's time.
//!
//! Tried and dropped: the arena (reserved once from the reader's estimate)
//! and the table on transparent huge pages (`madvise(MADV_HUGEPAGE)`).
//! `cargo bench --bench engine -- 10000000` probed in 110-127 instead of
//! 158-170 ns/row (fewer TLB misses), and `recon diff` of the 10M bench
//! pair used 1.1 s less user CPU, but 1.4 s more system time faulting in
//! 2 MiB pages on this (virtual) machine: wall time unchanged. The table
//! alone on huge pages (52 of them, no compaction stall) was tried again
//! once its pages were faulted in on two threads ([`table`]): 4 batches
//! of 8-10 interleaved runs of the 10M pair, user CPU -0.07 to -0.47 s
//! (medians), system +0.01 to +0.07 s, wall medians 0 to -0.2 s, under
//! 2% on the whole: not worth a `libc` dependency and an `unsafe` call.

use foldhash::fast::FixedState;
use jiff::Timestamp;
use recon_core::{Currency, FieldKind, Money, Value, ValueRef};
use std::hash::BuildHasher;

use super::keys::{key_end, write_key};
use super::texts::{TextCodec, TextDict, TextForm};

pub(crate) const OFFSET_MASK: u64 = (1 << 40) - 1;
const TAG_SHIFT: u32 = 40;
const TAG_MASK: u64 = 0xffff << TAG_SHIFT;
/// An empty slot: zero, so that a table comes zeroed from the kernel and
/// only needs its pages faulted in ([`table`]), not a pattern written.
pub(crate) const EMPTY: u64 = 0;
/// Set in every occupied slot, so that none is zero (the first record's
/// offset is 0, and its hash bits may be).
pub(crate) const OCCUPIED: u64 = 1 << 56;
/// A table sized ahead ([`KeyIndex::reserve`]) is 3/4 full at the size
/// asked for: linear probing wants short runs.
const MAX_LOAD_NUM: usize = 3;
const MAX_LOAD_DEN: usize = 4;
/// A table doubles past 7/8 full, so that an estimate a little short
/// (the reader's is from the first batch) does not double it.
const GROW_NUM: usize = 7;
const GROW_DEN: usize = 8;
/// The key was seen on the other side.
pub(crate) const SEEN_OTHER: u64 = 1 << 63;
/// The key occurs more than once on this index's own side.
pub(crate) const DUP_SELF: u64 = 1 << 62;
/// The key occurs more than once on the other side.
pub(crate) const DUP_OTHER: u64 = 1 << 61;
/// At least one compared field differs.
pub(crate) const MISMATCH: u64 = 1 << 60;
/// The first copy the other side holds is byte for byte this record (set
/// only while copies are captured; see `DiffEngine::capture_copies`).
pub(crate) const SAME_OTHER: u64 = 1 << 59;

/// Null for integer-like kinds: a varint that `write_varint` never
/// produces (a continuation byte followed by a zero byte).
const NULL_VARINT: [u8; 2] = [0x80, 0x00];
/// Null for a currency, whose codes are stored as `Currency::to_index`.
const NULL_CURRENCY: u16 = u16::MAX;

pub(crate) struct KeyIndex {
    arena: Vec<u8>,
    slots: Vec<u64>,
    len: usize,
}

/// The hash's low 16 bits: the slot comes from its high bits.
fn tag_of(hash: u64) -> u64 {
    (hash & 0xffff) << TAG_SHIFT
}

/// The home slot of `hash` in a table of `len` slots: the high bits of
/// `hash * len` (Lemire's multiply-shift), so that a table can be the size
/// a load needs rather than the next power of two (at 10M keys, 104 MiB
/// instead of 128).
#[inline(always)]
fn home(hash: u64, len: usize) -> usize {
    ((u128::from(hash) * len as u128) >> 64) as usize
}

/// Hints the CPU to fetch the cache line holding `p`; never faults.
#[inline(always)]
#[allow(unsafe_code)] // Reviewed: the one `unsafe` is a prefetch hint (SAFETY below).
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint and never dereferences the pointer.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How far ahead a pass over a list of records in key order (random
/// places in a large arena) starts loading the record it will read: each
/// read is otherwise a cache and TLB miss in a row (sorting, listing and
/// writing 100,000 gaps of a 10M-row diff waited on them one at a time).
pub(crate) const AHEAD: usize = 16;

/// Slots [`KeyIndex::prefetch_record`] looks through for a key's own.
const PROBE_AHEAD: usize = 6;

/// Starts loading the record at `offset`, when it is in the arena.
#[inline]
pub(crate) fn prefetch_at(arena: &[u8], offset: u64) {
    if let Some(byte) = arena.get(offset as usize) {
        prefetch(byte);
    }
}

/// Starts loading the record [`AHEAD`] places after position `i` of
/// `offsets`, when there is one: what a pass reading `offsets[i]` now
/// calls.
#[inline]
pub(crate) fn prefetch_ahead(arena: &[u8], offsets: &[u64], i: usize) {
    if let Some(&offset) = offsets.get(i + AHEAD) {
        prefetch_at(arena, offset);
    }
}

/// A fixed seed keeps runs reproducible; keys are not attacker-chosen, and
/// batches hashed on a reader thread must agree with the index.
const HASHER: FixedState = FixedState::with_seed(0x7265_636f_6e00);

/// The hash of an external ID, as the index uses it.
pub(crate) fn hash_key(key: &[u8]) -> u64 {
    HASHER.hash_one(key)
}

/// Appends `varint(key_len) key values…` to `buf`, text values in the
/// forms `texts` gives them.
/// Each value must be of its field's kind or null (the caller checks).
/// On a value that does not fit its field's kind, returns that field's
/// index (the caller drops what was appended).
pub(crate) fn encode_record(
    buf: &mut Vec<u8>,
    key: &str,
    values: &[ValueRef<'_>],
    kinds: &[FieldKind],
    texts: &mut TextCodec,
) -> Result<(), usize> {
    write_key(buf, key.as_bytes());
    for (i, (v, &kind)) in values.iter().zip(kinds).enumerate() {
        if !encode(buf, v, kind, texts) {
            return Err(i);
        }
    }
    Ok(())
}

/// Splits an encoded record into its encoded key (see `keys.rs`: equal
/// exactly when the keys are) and the offset where values start.
#[inline]
pub(crate) fn split_record(buf: &[u8], offset: usize) -> (&[u8], usize) {
    key_and_end(buf, offset as u64)
}

/// Decodes the values starting at `pos`, one per kind, owned (text codes
/// looked up in `dict`).
pub(crate) fn decode_values(
    buf: &[u8],
    mut pos: usize,
    kinds: &[FieldKind],
    dict: &TextDict,
    mut f: impl FnMut(Value),
) {
    for &kind in kinds {
        let (v, next) = decode_value(buf, pos, kind, dict);
        f(v);
        pos = next;
    }
}

/// Tables of at least this many slots (8 MiB) have their pages faulted in
/// on two threads as they are made.
const TOUCH_MIN: usize = 1 << 20;

/// Slots in a 4 KiB page.
const PAGE_SLOTS: usize = 512;

/// A table of `len` empty slots. A large one is allocated zeroed (its
/// pages untouched) and then written once per page, half on a thread of
/// its own: filling the 13M slots of the 10M bench pair's source with a
/// pattern held the engine's thread 50 ms (page faults, then the fill)
/// while the reader waited on a full queue, the other core idle. Left to
/// the inserts, each page was faulted twice instead (read, mapping the
/// zero page, then written, with a TLB flush of the other core): slower.
fn table(len: usize) -> Vec<u64> {
    let mut slots = vec![EMPTY; len];
    if len >= TOUCH_MIN {
        let (first, second) = slots.split_at_mut(len / 2);
        std::thread::scope(|scope| {
            scope.spawn(|| touch(first));
            touch(second);
        });
    }
    slots
}

/// Writes one slot of each page of `part` (with the value it holds), so
/// that the kernel maps the page now.
fn touch(part: &mut [u64]) {
    for page in part.chunks_mut(PAGE_SLOTS) {
        // Not a write the compiler may drop as storing what is there.
        page[0] = std::hint::black_box(EMPTY);
    }
}

impl KeyIndex {
    pub(crate) fn new() -> KeyIndex {
        KeyIndex {
            arena: Vec::new(),
            slots: vec![EMPTY; 16],
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        home(hash, self.slots.len())
    }

    /// The slot after `i`, wrapping round.
    #[inline(always)]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// Makes room for `additional` more keys, so that a large load does not
    /// rehash (and briefly hold two tables) on the way.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let want = self.len + additional;
        if want * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            self.rehash(want * MAX_LOAD_DEN / MAX_LOAD_NUM + 1);
        }
    }

    fn rehash(&mut self, new_len: usize) {
        let old = std::mem::replace(&mut self.slots, table(new_len));
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            let hash = hash_key(key_at(&self.arena, e & OFFSET_MASK));
            let mut i = self.home(hash);
            while self.slots[i] != EMPTY {
                i = self.next(i);
            }
            self.slots[i] = e;
        }
    }

    /// The arena and the table's slots (entries with their flags, and
    /// [`EMPTY`]), so that a caller can reuse the table's memory for the
    /// offsets it keeps instead of allocating a second list beside it.
    pub(crate) fn into_parts(self) -> (Vec<u8>, Vec<u64>) {
        (self.arena, self.slots)
    }

    /// The whole arena.
    pub(crate) fn arena(&self) -> &[u8] {
        &self.arena
    }

    /// Bytes held, for memory accounting in benchmarks.
    #[allow(dead_code)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.slots.capacity() * 8
    }

    /// Starts loading the slot a later lookup of `hash` will read.
    #[inline]
    pub(crate) fn prefetch_slot(&self, hash: u64) {
        prefetch(&self.slots[self.home(hash)]);
    }

    /// Starts loading the record a later lookup of `hash` will most likely
    /// compare (the first slot's, when its hash bits match).
    #[inline]
    pub(crate) fn prefetch_record(&self, hash: u64) {
        // Linear probing at 3/4 load leaves many keys a slot or two past
        // their home: the first slot whose hash bits match, within the
        // cache line or so the slot prefetch loaded.
        let tag = tag_of(hash);
        let mut i = self.home(hash);
        for _ in 0..PROBE_AHEAD {
            let e = self.slots[i];
            if e == EMPTY {
                return;
            }
            if e & TAG_MASK == tag {
                let offset = (e & OFFSET_MASK) as usize;
                if offset < self.arena.len() {
                    prefetch(&self.arena[offset]);
                    // A record of a few dozen bytes often runs into the
                    // next cache line: load that one too.
                    if let Some(end) = self.arena.get(offset + 40) {
                        prefetch(end);
                    }
                }
                return;
            }
            i = self.next(i);
        }
    }

    /// Walks `hash`'s run of slots from its home: `Ok(i)` at the first
    /// slot whose hash bits match and whose record (at the offset given)
    /// `holds` accepts, `Err(i)` at the empty slot that ends the run.
    #[inline(always)]
    fn probe(&self, hash: u64, mut holds: impl FnMut(usize) -> bool) -> Result<usize, usize> {
        let tag = tag_of(hash);
        let mut i = self.home(hash);
        loop {
            let e = self.slots[i];
            if e == EMPTY {
                return Err(i);
            }
            if e & TAG_MASK == tag && holds((e & OFFSET_MASK) as usize) {
                return Ok(i);
            }
            i = self.next(i);
        }
    }

    /// Whether the record at `at` holds `key` (encoded with its tag,
    /// length and form: a record starting with its bytes holds this key
    /// and no longer one).
    #[inline(always)]
    fn holds_key(&self, at: usize, key: &[u8]) -> bool {
        self.arena.get(at..at + key.len()) == Some(key)
    }

    /// Finds the entry for `key`, mutably.
    pub(crate) fn find_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut u64> {
        let i = self.probe(hash, |at| self.holds_key(at, key)).ok()?;
        Some(&mut self.slots[i])
    }

    /// Finds the entry for the key `record` (encoded, see
    /// [`encode_record`]) starts with, whose key is `key`, mutably, and
    /// whether the stored record is `record` byte for byte. The whole
    /// record is compared first: for the unchanged records that make most
    /// of a target, one `memcmp` instead of one for the key and another
    /// for the record (an encoded key carries its length, so a record
    /// starting with `record`'s bytes holds its key).
    pub(crate) fn find_record(
        &mut self,
        hash: u64,
        key: &[u8],
        record: &[u8],
    ) -> Option<(&mut u64, bool)> {
        let mut same = false;
        let i = self
            .probe(hash, |at| {
                same = self.holds_key(at, record);
                same || self.holds_key(at, key)
            })
            .ok()?;
        Some((&mut self.slots[i], same))
    }

    /// The entry for `key`, mutably, when the index holds it; else appends
    /// `record` (encoded, starting with `key`) and returns `None`. One
    /// probe of the key's run of slots for both (a source's keys are
    /// nearly all new: the insert walked the run again).
    pub(crate) fn find_or_insert(
        &mut self,
        hash: u64,
        key: &[u8],
        record: &[u8],
    ) -> Option<&mut u64> {
        match self.probe(hash, |at| self.holds_key(at, key)) {
            Ok(i) => Some(&mut self.slots[i]),
            // A table about to double finds the empty slot again in its new size.
            Err(_) if self.is_full() => {
                self.insert_encoded(hash, record);
                None
            }
            Err(empty) => {
                self.put(empty, hash, record);
                None
            }
        }
    }

    /// Whether one more key would take the table past [`GROW_NUM`] /
    /// [`GROW_DEN`] full (it then doubles first).
    fn is_full(&self) -> bool {
        (self.len + 1) * GROW_DEN > self.slots.len() * GROW_NUM
    }

    /// Appends an encoded record (see [`encode_record`]) and returns its
    /// offset. The caller has checked that its key is absent.
    pub(crate) fn insert_encoded(&mut self, hash: u64, record: &[u8]) -> u64 {
        if self.is_full() {
            self.rehash(self.slots.len() * 2);
        }
        let mut i = self.home(hash);
        while self.slots[i] != EMPTY {
            i = self.next(i);
        }
        self.put(i, hash, record)
    }

    /// Appends `record` to the arena and points the empty slot `i` at it:
    /// its offset.
    fn put(&mut self, i: usize, hash: u64, record: &[u8]) -> u64 {
        let offset = self.arena.len() as u64;
        assert!(offset <= OFFSET_MASK, "key index above 1 TiB");
        self.arena.extend_from_slice(record);
        self.slots[i] = offset | tag_of(hash) | OCCUPIED;
        self.len += 1;
        offset
    }

    /// The key and decoded values of the record at `offset`.
    #[cfg(test)]
    pub(crate) fn record(
        &self,
        offset: u64,
        kinds: &[FieldKind],
        dict: &TextDict,
    ) -> (String, Vec<Value>) {
        let (key, pos) = key_and_end(&self.arena, offset);
        let mut values = Vec::with_capacity(kinds.len());
        decode_values(&self.arena, pos, kinds, dict, |v| values.push(v));
        (super::keys::key_string(key), values)
    }
}

fn as_str(bytes: &[u8]) -> &str {
    // Only `&str`s are ever written into the arena.
    std::str::from_utf8(bytes).expect("arena holds UTF-8 written from &str")
}

/// The key of the record at `offset`.
#[inline]
pub(crate) fn key_at(arena: &[u8], offset: u64) -> &[u8] {
    key_and_end(arena, offset).0
}

#[inline]
fn key_and_end(arena: &[u8], offset: u64) -> (&[u8], usize) {
    let start = offset as usize;
    let end = key_end(arena, start);
    (&arena[start..end], end)
}

#[inline]
pub(crate) fn write_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
pub(crate) fn read_varint(buf: &[u8], mut pos: usize) -> (u64, usize) {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[pos];
        pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return (v, pos);
        }
        shift += 7;
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v`; false when it is not of `kind` (checked in the same match
/// that encodes, so the check costs nothing on the hot path).
fn encode(buf: &mut Vec<u8>, v: &ValueRef<'_>, kind: FieldKind, texts: &mut TextCodec) -> bool {
    match (*v, kind) {
        (ValueRef::Null, _)
        | (ValueRef::Text(_), FieldKind::Text)
        | (ValueRef::Integer(_), FieldKind::Integer)
        | (ValueRef::Money(_), FieldKind::Money)
        | (ValueRef::Currency(_), FieldKind::Currency)
        | (ValueRef::Timestamp(_), FieldKind::Timestamp) => {}
        _ => return false,
    }
    match *v {
        // The decoder knows the kind, so each null reads back unambiguously.
        ValueRef::Null => match kind {
            FieldKind::Text => buf.push(0),
            FieldKind::Currency => buf.extend_from_slice(&NULL_CURRENCY.to_le_bytes()),
            _ => buf.extend_from_slice(&NULL_VARINT),
        },
        ValueRef::Text(s) => match texts.form(s) {
            TextForm::Digits(n) => write_varint(buf, (n << 1) | 1),
            TextForm::Code(c) => write_varint(buf, (u64::from(c) << 2) | 2),
            TextForm::Inline => {
                write_varint(buf, (s.len() as u64 + 1) << 2);
                buf.extend_from_slice(s.as_bytes());
            }
        },
        ValueRef::Integer(i) => write_varint(buf, zigzag(i)),
        ValueRef::Money(m) => {
            write_varint(buf, zigzag(m.minor));
            buf.extend_from_slice(&m.currency.to_index().to_le_bytes());
        }
        ValueRef::Currency(c) => buf.extend_from_slice(&c.to_index().to_le_bytes()),
        ValueRef::Timestamp(t) => write_varint(buf, zigzag(t.as_second())),
    }
    true
}

fn currency_at(buf: &[u8], pos: usize) -> Currency {
    let index = u16::from_le_bytes([buf[pos], buf[pos + 1]]);
    Currency::from_index(index).expect("arena holds valid currency codes")
}

/// A text cell as stored: `varint(tag)`, where tag 0 is null, an odd tag
/// `2n + 1` canonical digits spelling `n`, a tag `4c + 2` the dictionary's
/// code `c`, and a tag `4(len + 1)` the `len` bytes that follow.
enum TextCell<'a> {
    Null,
    Digits(u64),
    Code(u32),
    Inline(&'a [u8]),
}

fn text_at(buf: &[u8], pos: usize) -> (TextCell<'_>, usize) {
    let (tag, p) = read_varint(buf, pos);
    if tag == 0 {
        (TextCell::Null, p)
    } else if tag & 1 == 1 {
        (TextCell::Digits(tag >> 1), p)
    } else if tag & 3 == 2 {
        (TextCell::Code((tag >> 2) as u32), p)
    } else {
        let end = p + (tag >> 2) as usize - 1;
        (TextCell::Inline(&buf[p..end]), end)
    }
}

/// Where the value of `kind` starting at `pos` ends.
pub(crate) fn field_end(buf: &[u8], pos: usize, kind: FieldKind) -> usize {
    match kind {
        FieldKind::Text => text_at(buf, pos).1,
        _ => decode_scalar(buf, pos, kind).1,
    }
}

/// The value of `kind` (any kind but text, which may need the dictionary)
/// at `pos`, and where it ends.
pub(crate) fn decode_scalar(buf: &[u8], pos: usize, kind: FieldKind) -> (ValueRef<'static>, usize) {
    let is_null_varint = buf.get(pos..pos + 2) == Some(&NULL_VARINT[..]);
    match kind {
        FieldKind::Text => unreachable!("text is decoded by decode_value"),
        FieldKind::Currency => {
            if u16::from_le_bytes([buf[pos], buf[pos + 1]]) == NULL_CURRENCY {
                return (ValueRef::Null, pos + 2);
            }
            (ValueRef::Currency(currency_at(buf, pos)), pos + 2)
        }
        _ if is_null_varint => (ValueRef::Null, pos + 2),
        FieldKind::Integer => {
            let (v, p) = read_varint(buf, pos);
            (ValueRef::Integer(unzigzag(v)), p)
        }
        FieldKind::Money => {
            let (v, p) = read_varint(buf, pos);
            let c = currency_at(buf, p);
            (ValueRef::Money(Money::from_minor(unzigzag(v), c)), p + 2)
        }
        FieldKind::Timestamp => {
            let (v, p) = read_varint(buf, pos);
            let t = Timestamp::from_second(unzigzag(v)).expect("arena holds valid timestamps");
            (ValueRef::Timestamp(t), p)
        }
    }
}

/// The value of `kind` at `pos`, owned, and where it ends.
pub(crate) fn decode_value(
    buf: &[u8],
    pos: usize,
    kind: FieldKind,
    dict: &TextDict,
) -> (Value, usize) {
    if kind != FieldKind::Text {
        let (v, end) = decode_scalar(buf, pos, kind);
        return (v.to_owned_value(), end);
    }
    let (cell, end) = text_at(buf, pos);
    let v = match cell {
        TextCell::Null => Value::Null,
        TextCell::Digits(n) => Value::Text(n.to_string()),
        TextCell::Code(c) => Value::Text(dict.value(c)),
        TextCell::Inline(b) => Value::Text(as_str(b).to_string()),
    };
    (v, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_the_bytes_of_seven_bit_groups_and_read_back() {
        // Every bit length and its neighbours, after bytes already there:
        // the fewest bytes that hold the number (records are compared
        // byte for byte, so each number has one encoding), lowest group
        // first, each but the last marked as continued; read back.
        let mut values = vec![0, 1, u64::MAX];
        for bits in 1..64 {
            let p = 1u64 << bits;
            values.extend([p - 1, p, p + 1, p | (p >> 1) | 0x55]);
        }
        for v in values {
            let mut buf = vec![0xAA, 0xBB];
            write_varint(&mut buf, v);
            assert_eq!(&buf[..2], [0xAA, 0xBB], "{v}");
            let enc = &buf[2..];
            let bits = 64 - (v | 1).leading_zeros() as usize;
            assert_eq!(enc.len(), bits.div_ceil(7), "{v}");
            let (last, rest) = enc.split_last().unwrap();
            assert!(*last < 0x80 && rest.iter().all(|b| b & 0x80 != 0), "{v}");
            let groups = enc.iter().enumerate();
            let back = groups.fold(0u128, |n, (k, b)| n | u128::from(b & 0x7f) << (7 * k));
            assert_eq!(back, u128::from(v), "{v}");
            assert_eq!(read_varint(&buf, 2), (v, buf.len()), "{v}");
        }
    }

    #[test]
    fn a_large_table_is_made_empty_and_finds_what_goes_in() {
        // Past TOUCH_MIN, pages faulted in on two threads: every slot must
        // still read empty, the odd length's last slot included.
        let slots = table(TOUCH_MIN + 3);
        assert_eq!(slots.len(), TOUCH_MIN + 3);
        assert!(slots.iter().all(|&e| e == EMPTY));
        // A record at offset 0 whose hash has zero low bits is still
        // occupied (bit 56), so it is found, not taken for an empty slot.
        let mut index = KeyIndex::new();
        index.reserve(TOUCH_MIN);
        let mut first = Vec::new();
        write_key(&mut first, b"ch_0");
        assert_eq!(index.insert_encoded(0, &first), 0);
        assert_eq!(index.find_mut(0, &first).map(|e| *e & OFFSET_MASK), Some(0));
        let mut second = Vec::new();
        write_key(&mut second, b"ch_1");
        assert!(index.find_mut(0, &second).is_none());
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn one_probe_finds_or_inserts_and_tells_same_records_from_same_keys() {
        let record = |key: &str, value: &[u8]| {
            let mut r = Vec::new();
            write_key(&mut r, key.as_bytes());
            let key_len = r.len();
            r.extend_from_slice(value);
            (r, key_len)
        };
        // Grown on the way (40 keys, 16 slots at first), with the keys'
        // own hashes: every key found again, once.
        let mut grown = KeyIndex::new();
        let keys: Vec<String> = (0..40).map(|i| format!("ch_{i:04}")).collect();
        for round in 0..2 {
            for k in &keys {
                let (r, n) = record(k, &[7, 7]);
                let found = grown.find_or_insert(hash_key(&r[..n]), &r[..n], &r);
                assert_eq!(found.is_some(), round == 1, "{k} in round {round}");
            }
        }
        assert_eq!(grown.len(), 40);
        // Every key on one hash (and so one tag), in a table that does not
        // grow (a rehash places keys by their own hashes): only the bytes
        // tell them apart.
        let mut index = KeyIndex::new();
        index.reserve(100);
        for k in &keys {
            let (r, n) = record(k, &[7, 7]);
            assert!(index.find_or_insert(0, &r[..n], &r).is_none(), "{k} is new");
        }
        assert_eq!(index.len(), 40);
        for k in &keys {
            let (same, n) = record(k, &[7, 7]);
            let (other, _) = record(k, &[7, 8]);
            let found = index.find_record(0, &same[..n], &same).map(|(_, s)| s);
            assert_eq!(found, Some(true), "{k}: same bytes");
            let found = index.find_record(0, &other[..n], &other).map(|(_, s)| s);
            assert_eq!(found, Some(false), "{k}: same key, other values");
            // A second copy is found, not inserted.
            assert!(
                index.find_or_insert(0, &same[..n], &same).is_some(),
                "{k}: held"
            );
        }
        assert_eq!(index.len(), 40);
        // A key whose encoding starts another's (`ch_00` is no prefix of
        // `ch_0000` once encoded: the length is in the tag) is absent.
        let (r, n) = record("ch_00", &[7, 7]);
        assert!(index.find_record(0, &r[..n], &r).is_none());
    }

    #[test]
    fn round_trips_every_value_kind() {
        let usd = Currency::parse("usd").unwrap();
        let long = "a long text, more than any coded value: ".repeat(4);
        let t = Timestamp::from_second(1_764_374_399).unwrap();
        let values = [
            ValueRef::Text("succeeded – ünïcode"),
            ValueRef::Integer(-42),
            ValueRef::Integer(i64::MIN),
            ValueRef::Money(Money::from_minor(-2999, usd)),
            ValueRef::Currency(usd),
            ValueRef::Timestamp(t),
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Integer(0),
            ValueRef::Integer(64),
            ValueRef::Integer(i64::MAX),
            ValueRef::Text(""),
            ValueRef::Text("1793491200"),
            ValueRef::Text("0"),
            ValueRef::Text("007"),
            ValueRef::Text("succeeded"),
            ValueRef::Text(&long),
        ];
        use FieldKind as K;
        let kinds = [
            K::Text,
            K::Integer,
            K::Integer,
            K::Money,
            K::Currency,
            K::Timestamp,
            K::Text,
            K::Integer,
            K::Money,
            K::Currency,
            K::Timestamp,
            K::Integer,
            K::Integer,
            K::Integer,
            K::Text,
            K::Text,
            K::Text,
            K::Text,
            K::Text,
            K::Text,
        ];
        let owned: Vec<Value> = values.iter().map(ValueRef::to_owned_value).collect();
        let dict = std::sync::Arc::new(TextDict::default());
        let mut texts = TextCodec::new(dict.clone());
        let mut index = KeyIndex::new();
        let keys: Vec<String> = (0..1000).map(|i| format!("ch_{i:024x}")).collect();
        // The index finds keys by their encoding (`keys.rs`).
        let enc = |k: &str| {
            let mut b = Vec::new();
            write_key(&mut b, k.as_bytes());
            b
        };
        let mut buf = Vec::new();
        for k in &keys {
            let h = hash_key(&enc(k));
            assert!(index.find_mut(h, &enc(k)).is_none());
            buf.clear();
            encode_record(&mut buf, k, &values, &kinds, &mut texts).unwrap();
            index.insert_encoded(h, &buf);
        }
        assert_eq!(index.len(), 1000);
        for k in &keys {
            let h = hash_key(&enc(k));
            let e = *index.find_mut(h, &enc(k)).expect("inserted key is found");
            let (key, decoded) = index.record(e & OFFSET_MASK, &kinds, &dict);
            assert_eq!(&key, k);
            assert_eq!(decoded, owned);
        }
        assert!(index
            .find_mut(hash_key(&enc("ch_missing")), &enc("ch_missing"))
            .is_none());
        // A key is not found by its bytes as they are, only encoded.
        let packed = &keys[0];
        assert!(index
            .find_mut(hash_key(packed.as_bytes()), packed.as_bytes())
            .is_none());
    }

    #[test]
    fn a_table_sized_ahead_is_the_size_asked_for_and_still_grows() {
        let dict = std::sync::Arc::new(TextDict::default());
        let mut texts = TextCodec::new(dict);
        let mut index = KeyIndex::new();
        index.reserve(1000);
        assert_eq!(
            index.slots.len(),
            1334,
            "1000 keys at 3/4, not a power of two"
        );
        let enc = |i: usize, texts: &mut TextCodec| {
            let mut b = Vec::new();
            encode_record(&mut b, &format!("in_{i}"), &[], &[], texts).unwrap();
            b
        };
        // 7/8 of 1334 before the table doubles, then more.
        for i in 0..3000 {
            let rec = enc(i, &mut texts);
            let (key, _) = split_record(&rec, 0);
            let h = hash_key(key);
            assert!(index.find_mut(h, key).is_none());
            index.insert_encoded(h, &rec);
            if i == 1166 {
                assert_eq!(index.slots.len(), 1334);
            }
        }
        assert_eq!(index.slots.len(), 1334 * 4);
        for i in 0..3000 {
            let rec = enc(i, &mut texts);
            let (key, _) = split_record(&rec, 0);
            let e = *index.find_mut(hash_key(key), key).expect("found");
            assert_eq!(key_at(index.arena(), e & OFFSET_MASK), key);
        }
    }
}
