//! A compact key index: external IDs and their encoded values packed into
//! one byte arena, found through a hash table of 8-byte entries.
//!
//! Each entry is the arena offset of its record (low 48 bits) plus flag bits
//! (high 8 bits). A record in the arena is `varint(key_len) key values…`,
//! each value a tag byte and a payload. For Stripe-like rows this is about
//! 60 bytes per key plus ~9 bytes of table: a fraction of what a map of
//! owned `String`s and `Vec<Value>`s would take.

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use jiff::Timestamp;
use recon_core::{Currency, Money, ValueRef};
use std::hash::BuildHasher;

pub(crate) const OFFSET_MASK: u64 = (1 << 48) - 1;
/// The key was seen on the other side.
pub(crate) const SEEN_OTHER: u64 = 1 << 63;
/// The key occurs more than once on this index's own side.
pub(crate) const DUP_SELF: u64 = 1 << 62;
/// The key occurs more than once on the other side.
pub(crate) const DUP_OTHER: u64 = 1 << 61;
/// At least one compared field differs.
pub(crate) const MISMATCH: u64 = 1 << 60;

const TAG_NULL: u8 = 0;
const TAG_TEXT: u8 = 1;
const TAG_INTEGER: u8 = 2;
const TAG_MONEY: u8 = 3;
const TAG_CURRENCY: u8 = 4;
const TAG_TIMESTAMP: u8 = 5;

pub(crate) struct KeyIndex {
    arena: Vec<u8>,
    table: HashTable<u64>,
    hasher: FixedState,
}

impl KeyIndex {
    pub(crate) fn new() -> KeyIndex {
        KeyIndex {
            arena: Vec::new(),
            table: HashTable::new(),
            // A fixed seed keeps runs reproducible; keys are not attacker-chosen.
            hasher: FixedState::with_seed(0x7265_636f_6e00),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key.as_bytes())
    }

    /// Bytes held, for memory accounting in benchmarks.
    #[allow(dead_code)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.table.capacity() * 9
    }

    /// Finds the entry for `key`, mutably.
    pub(crate) fn find_mut(&mut self, hash: u64, key: &str) -> Option<&mut u64> {
        let arena = &self.arena;
        self.table
            .find_mut(hash, |&e| key_at(arena, e & OFFSET_MASK) == key.as_bytes())
    }

    /// Appends a new record and returns its entry. The caller has checked
    /// that `key` is absent.
    pub(crate) fn insert(&mut self, hash: u64, key: &str, values: &[ValueRef<'_>]) -> u64 {
        let offset = self.arena.len() as u64;
        assert!(offset <= OFFSET_MASK, "key index above 256 TiB");
        write_varint(&mut self.arena, key.len() as u64);
        self.arena.extend_from_slice(key.as_bytes());
        for v in values {
            encode(&mut self.arena, v);
        }
        let arena = &self.arena;
        let hasher = &self.hasher;
        self.table.insert_unique(hash, offset, |&e| {
            hasher.hash_one(key_at(arena, e & OFFSET_MASK))
        });
        offset
    }

    /// Every entry with its flags, in insertion order of the arena.
    pub(crate) fn entries(&self) -> impl Iterator<Item = u64> + '_ {
        self.table.iter().copied()
    }

    /// The key and decoded values of the record at `offset`.
    pub(crate) fn record(&self, offset: u64, n_values: usize) -> (&str, Vec<ValueRef<'_>>) {
        let (key, mut pos) = key_and_end(&self.arena, offset);
        let mut values = Vec::with_capacity(n_values);
        for _ in 0..n_values {
            let (v, next) = decode(&self.arena, pos);
            values.push(v);
            pos = next;
        }
        (as_str(key), values)
    }

    /// Calls `f` with each value of the record at `offset`, in order, until it returns false.
    pub(crate) fn visit_values(
        &self,
        offset: u64,
        n_values: usize,
        mut f: impl FnMut(usize, ValueRef<'_>) -> bool,
    ) {
        let (_, mut pos) = key_and_end(&self.arena, offset);
        for i in 0..n_values {
            let (v, next) = decode(&self.arena, pos);
            if !f(i, v) {
                return;
            }
            pos = next;
        }
    }
}

fn as_str(bytes: &[u8]) -> &str {
    // Only `&str`s are ever written into the arena.
    std::str::from_utf8(bytes).expect("arena holds UTF-8 written from &str")
}

fn key_at(arena: &[u8], offset: u64) -> &[u8] {
    key_and_end(arena, offset).0
}

fn key_and_end(arena: &[u8], offset: u64) -> (&[u8], usize) {
    let (len, pos) = read_varint(arena, offset as usize);
    let end = pos + len as usize;
    (&arena[pos..end], end)
}

fn write_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn read_varint(buf: &[u8], mut pos: usize) -> (u64, usize) {
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

fn encode(buf: &mut Vec<u8>, v: &ValueRef<'_>) {
    match *v {
        ValueRef::Null => buf.push(TAG_NULL),
        ValueRef::Text(s) => {
            buf.push(TAG_TEXT);
            write_varint(buf, s.len() as u64);
            buf.extend_from_slice(s.as_bytes());
        }
        ValueRef::Integer(i) => {
            buf.push(TAG_INTEGER);
            write_varint(buf, zigzag(i));
        }
        ValueRef::Money(m) => {
            buf.push(TAG_MONEY);
            write_varint(buf, zigzag(m.minor));
            buf.extend_from_slice(m.currency.code().as_bytes());
        }
        ValueRef::Currency(c) => {
            buf.push(TAG_CURRENCY);
            buf.extend_from_slice(c.code().as_bytes());
        }
        ValueRef::Timestamp(t) => {
            buf.push(TAG_TIMESTAMP);
            write_varint(buf, zigzag(t.as_second()));
        }
    }
}

fn currency_at(buf: &[u8], pos: usize) -> Currency {
    Currency::parse(as_str(&buf[pos..pos + 3])).expect("arena holds valid currency codes")
}

fn decode(buf: &[u8], pos: usize) -> (ValueRef<'_>, usize) {
    let tag = buf[pos];
    let pos = pos + 1;
    match tag {
        TAG_NULL => (ValueRef::Null, pos),
        TAG_TEXT => {
            let (len, p) = read_varint(buf, pos);
            let end = p + len as usize;
            (ValueRef::Text(as_str(&buf[p..end])), end)
        }
        TAG_INTEGER => {
            let (v, p) = read_varint(buf, pos);
            (ValueRef::Integer(unzigzag(v)), p)
        }
        TAG_MONEY => {
            let (v, p) = read_varint(buf, pos);
            let c = currency_at(buf, p);
            (ValueRef::Money(Money::from_minor(unzigzag(v), c)), p + 3)
        }
        TAG_CURRENCY => (ValueRef::Currency(currency_at(buf, pos)), pos + 3),
        TAG_TIMESTAMP => {
            let (v, p) = read_varint(buf, pos);
            let t = Timestamp::from_second(unzigzag(v)).expect("arena holds valid timestamps");
            (ValueRef::Timestamp(t), p)
        }
        other => unreachable!("unknown arena tag {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_value_kind() {
        let usd = Currency::parse("usd").unwrap();
        let t = Timestamp::from_second(1_764_374_399).unwrap();
        let values = [
            ValueRef::Null,
            ValueRef::Text("succeeded – ünïcode"),
            ValueRef::Integer(-42),
            ValueRef::Integer(i64::MIN),
            ValueRef::Money(Money::from_minor(-2999, usd)),
            ValueRef::Currency(usd),
            ValueRef::Timestamp(t),
        ];
        let mut index = KeyIndex::new();
        let keys: Vec<String> = (0..1000).map(|i| format!("ch_{i:024x}")).collect();
        for k in &keys {
            let h = index.hash(k);
            assert!(index.find_mut(h, k).is_none());
            index.insert(h, k, &values);
        }
        assert_eq!(index.len(), 1000);
        for k in &keys {
            let h = index.hash(k);
            let e = *index.find_mut(h, k).expect("inserted key is found");
            let (key, decoded) = index.record(e & OFFSET_MASK, values.len());
            assert_eq!(key, k);
            assert_eq!(decoded, values);
        }
        assert!(index.find_mut(index.hash("ch_missing"), "ch_missing").is_none());
    }
}
