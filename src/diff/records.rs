//! [`Records`]: a sorted list of one side's records as the reports need
//! them, kept encoded in the engine's byte arena until they are read.
//!
//! A diff of a short source export against a large target finds millions of
//! target-only records (orphans), and the reverse finds millions of gaps.
//! Materialising each as an owned [`Record`] (a `String` and a `Vec<Value>`,
//! each value a heap cell) costs several times the encoded bytes: 1 row
//! against 5M peaked at 1.17 GB that way. The engine's arena already holds
//! these records encoded (~50 bytes each), so a list keeps that arena and
//! the offsets of its records, and decodes one record at a time while a
//! report is written. Callers that filter or rebuild a list (edge
//! confirmation, pending records in `recon run`) get an owned list back.

use std::borrow::Cow;
use std::sync::Arc;

use recon_core::{FieldKind, Record, Value, ValueRef};

use super::arena::{decode_scalar, decode_values, field_end, prefetch_ahead, split_record};
use super::keys::{key_string, with_key_str};
use super::texts::TextDict;

/// Records of one class (gaps or orphans), sorted by external ID.
///
/// Iterating yields [`Cow`]s: borrowed for an owned list, decoded one by
/// one for an encoded list, so reading a large list holds one record at a
/// time.
#[derive(Clone, Debug)]
pub struct Records(Repr);

#[derive(Clone, Debug)]
enum Repr {
    /// Encoded records in `arena` (see `arena::encode_record`), at these
    /// offsets, in report order.
    Encoded {
        arena: Arc<Vec<u8>>,
        offsets: Vec<u64>,
        kinds: Arc<[FieldKind]>,
        texts: Arc<TextDict>,
    },
    Owned(Vec<Record>),
}

impl Default for Records {
    fn default() -> Self {
        Records(Repr::Owned(Vec::new()))
    }
}

impl Records {
    /// A list of the encoded records at `offsets` (already in report order).
    pub(crate) fn encoded(
        arena: Arc<Vec<u8>>,
        offsets: Vec<u64>,
        kinds: Arc<[FieldKind]>,
        texts: Arc<TextDict>,
    ) -> Records {
        Records(Repr::Encoded {
            arena,
            offsets,
            kinds,
            texts,
        })
    }

    /// Records in the list.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Encoded { offsets, .. } => offsets.len(),
            Repr::Owned(v) => v.len(),
        }
    }

    /// Whether the list holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records in order, one at a time.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Cow<'_, Record>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// The records' external IDs in order, without decoding their values
    /// (what the run's status and the history need of a list).
    pub fn keys(&self) -> impl Iterator<Item = Cow<'_, str>> + '_ {
        (0..self.len()).map(move |i| match &self.0 {
            Repr::Encoded { arena, offsets, .. } => {
                prefetch_ahead(arena, offsets, i);
                Cow::Owned(key_string(split_record(arena, offsets[i] as usize).0))
            }
            Repr::Owned(v) => Cow::Borrowed(v[i].key.as_str()),
        })
    }

    /// Calls `f` with each external ID in order, decoded on the stack: no
    /// string per key (what a count or a membership test needs).
    pub fn for_each_key(&self, mut f: impl FnMut(&str)) {
        match &self.0 {
            Repr::Encoded { arena, offsets, .. } => {
                for (i, &offset) in offsets.iter().enumerate() {
                    prefetch_ahead(arena, offsets, i);
                    with_key_str(split_record(arena, offset as usize).0, &mut f);
                }
            }
            Repr::Owned(v) => v.iter().for_each(|r| f(&r.key)),
        }
    }

    /// Every record, owned, in order. A long encoded list is decoded on
    /// two threads (a backfill of 200,000 gaps decoded them on one for
    /// 100 ms, with the other core idle).
    pub fn to_owned_vec(&self) -> Vec<Record> {
        /// Below this, one thread is quicker than starting another.
        const PARALLEL_FROM: usize = 20_000;
        let n = self.len();
        if n < PARALLEL_FROM || matches!(self.0, Repr::Owned(_)) {
            return self.iter().map(Cow::into_owned).collect();
        }
        let decode = |range: std::ops::Range<usize>| -> Vec<Record> {
            range.map(|i| self.get(i).into_owned()).collect()
        };
        let mid = n / 2;
        let (mut first, second) = std::thread::scope(|scope| {
            let second = scope.spawn(|| decode(mid..n));
            let first = decode(0..mid);
            (
                first,
                second
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            )
        });
        first.extend(second);
        first
    }

    /// Takes the records that `take` picks (by external ID and values) out
    /// of the list, owned and in order; the others stay, in order. An
    /// encoded list stays encoded: each record's values are decoded into
    /// one reused buffer to be asked, and only the taken records are
    /// decoded whole (the young gaps a grace period holds back and the
    /// gaps an edge look-up finds are few; decoding the others to keep
    /// them owned cost a 200,000-gap run 40 ms and 46 MB).
    pub fn take_where(&mut self, mut take: impl FnMut(&str, &[Value]) -> bool) -> Vec<Record> {
        match &mut self.0 {
            Repr::Owned(v) => {
                let (taken, kept) = std::mem::take(v)
                    .into_iter()
                    .partition(|r| take(&r.key, &r.values));
                *v = kept;
                taken
            }
            Repr::Encoded {
                arena,
                offsets,
                kinds,
                texts,
            } => {
                let mut values = Vec::new();
                take_encoded(arena, offsets, kinds, texts, |key, at| {
                    values.clear();
                    decode_values(arena, at, kinds, texts, |v| values.push(v));
                    with_key_str(key, |k| take(k, &values))
                })
            }
        }
    }

    /// Takes the records whose value of field `field` `take` picks, as
    /// [`Records::take_where`] does, reading only that value of each
    /// record: the fields before it are skipped, nothing is allocated
    /// (decoding every value of 20,000 gaps to ask for their time, a
    /// text's a string of its own, held a 2M-row typed dry run 3-4 ms).
    pub fn take_where_value(
        &mut self,
        field: usize,
        mut take: impl FnMut(ValueRef<'_>) -> bool,
    ) -> Vec<Record> {
        let Repr::Encoded {
            arena,
            offsets,
            kinds,
            texts,
        } = &mut self.0
        else {
            return self.take_where(|_, values| take(values[field].as_ref()));
        };
        // A text may be the dictionary's: read whole.
        if kinds[field] == FieldKind::Text {
            return self.take_where(|_, values| take(values[field].as_ref()));
        }
        take_encoded(arena, offsets, kinds, texts, |_, mut at| {
            for &kind in &kinds[..field] {
                at = field_end(arena, at, kind);
            }
            take(decode_scalar(arena, at, kinds[field]).0)
        })
    }

    /// The record at position `i`; panics past the end, like a slice.
    pub fn get(&self, i: usize) -> Cow<'_, Record> {
        match &self.0 {
            Repr::Encoded {
                arena,
                offsets,
                kinds,
                texts,
            } => {
                prefetch_ahead(arena, offsets, i);
                Cow::Owned(decode(arena, offsets[i], kinds, texts))
            }
            Repr::Owned(v) => Cow::Borrowed(&v[i]),
        }
    }
}

/// Takes out of an encoded list the records `pick` picks (by their
/// encoded key and where their values start), decoded whole and in order;
/// the offsets of the others stay, in order.
fn take_encoded(
    arena: &[u8],
    offsets: &mut Vec<u64>,
    kinds: &[FieldKind],
    texts: &TextDict,
    mut pick: impl FnMut(&[u8], usize) -> bool,
) -> Vec<Record> {
    let (mut taken, mut kept) = (Vec::new(), 0);
    for i in 0..offsets.len() {
        prefetch_ahead(arena, offsets, i);
        let offset = offsets[i];
        let (key, at) = split_record(arena, offset as usize);
        if pick(key, at) {
            taken.push(decode(arena, offset, kinds, texts));
        } else {
            offsets[kept] = offset;
            kept += 1;
        }
    }
    offsets.truncate(kept);
    taken
}

/// The record encoded at `offset` of `arena`, owned.
pub(crate) fn decode(arena: &[u8], offset: u64, kinds: &[FieldKind], texts: &TextDict) -> Record {
    let (key, at) = split_record(arena, offset as usize);
    let mut values = Vec::with_capacity(kinds.len());
    decode_values(arena, at, kinds, texts, |v| values.push(v));
    Record {
        key: key_string(key),
        values,
    }
}

impl From<Vec<Record>> for Records {
    fn from(v: Vec<Record>) -> Records {
        Records(Repr::Owned(v))
    }
}

impl FromIterator<Record> for Records {
    fn from_iter<I: IntoIterator<Item = Record>>(iter: I) -> Records {
        Records(Repr::Owned(iter.into_iter().collect()))
    }
}

impl PartialEq for Records {
    fn eq(&self, other: &Records) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl Eq for Records {}

/// The records of a list, by value.
pub struct IntoIter(IntoIterRepr);

enum IntoIterRepr {
    Owned(std::vec::IntoIter<Record>),
    Encoded {
        arena: Arc<Vec<u8>>,
        offsets: std::vec::IntoIter<u64>,
        kinds: Arc<[FieldKind]>,
        texts: Arc<TextDict>,
    },
}

impl Iterator for IntoIter {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        match &mut self.0 {
            IntoIterRepr::Owned(v) => v.next(),
            IntoIterRepr::Encoded {
                arena,
                offsets,
                kinds,
                texts,
            } => offsets.next().map(|o| decode(arena, o, kinds, texts)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            IntoIterRepr::Owned(v) => v.size_hint(),
            IntoIterRepr::Encoded { offsets, .. } => offsets.size_hint(),
        }
    }
}

impl IntoIterator for Records {
    type Item = Record;
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        IntoIter(match self.0 {
            Repr::Owned(v) => IntoIterRepr::Owned(v.into_iter()),
            Repr::Encoded {
                arena,
                offsets,
                kinds,
                texts,
            } => IntoIterRepr::Encoded {
                arena,
                offsets: offsets.into_iter(),
                kinds,
                texts,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::Value;

    #[test]
    fn owned_and_encoded_lists_read_the_same() {
        let kinds: Arc<[FieldKind]> = Arc::from(vec![FieldKind::Text, FieldKind::Integer]);
        let records = vec![
            Record {
                key: "a".into(),
                values: vec![Value::Text("x".into()), Value::Integer(-3)],
            },
            Record {
                key: "b".into(),
                values: vec![Value::Null, Value::Null],
            },
        ];
        let mut arena = Vec::new();
        let mut offsets = Vec::new();
        let texts = Arc::new(TextDict::default());
        let mut codec = super::super::texts::TextCodec::new(texts.clone());
        for r in &records {
            offsets.push(arena.len() as u64);
            let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
            super::super::arena::encode_record(&mut arena, &r.key, &v, &kinds, &mut codec).unwrap();
        }
        let encoded = Records::encoded(Arc::new(arena), offsets, kinds, texts);
        let owned = Records::from(records.clone());
        assert_eq!(encoded.len(), 2);
        assert_eq!(
            encoded.iter().map(Cow::into_owned).collect::<Vec<_>>(),
            records
        );
        assert_eq!(encoded, owned);
        assert_eq!(encoded.clone().into_iter().collect::<Vec<_>>(), records);
        assert_eq!(owned.into_iter().collect::<Vec<_>>(), records);
    }

    /// Decoded whole (on two threads past 20,000 records) or key by key,
    /// an encoded list gives its records in order, each once.
    #[test]
    fn whole_lists_and_keys_read_in_order() {
        let kinds: Arc<[FieldKind]> = Arc::from(vec![FieldKind::Text, FieldKind::Integer]);
        let texts = Arc::new(TextDict::default());
        let mut codec = super::super::texts::TextCodec::new(texts.clone());
        for n in [0, 3, 19_999, 20_000, 20_001, 45_678] {
            let records: Vec<Record> = (0..n)
                .map(|i| Record {
                    key: format!("ch_{i:06}"),
                    values: vec![Value::Text(format!("s{}", i % 7)), Value::Integer(i as i64)],
                })
                .collect();
            let (mut arena, mut offsets) = (Vec::new(), Vec::new());
            for r in &records {
                offsets.push(arena.len() as u64);
                let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
                super::super::arena::encode_record(&mut arena, &r.key, &v, &kinds, &mut codec)
                    .unwrap();
            }
            let encoded = Records::encoded(Arc::new(arena), offsets, kinds.clone(), texts.clone());
            assert_eq!(encoded.to_owned_vec(), records, "{n} records");
            let mut keys = Vec::new();
            encoded.for_each_key(|k| keys.push(k.to_string()));
            let want: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
            assert_eq!(keys, want, "{n} keys");
            assert_eq!(Records::from(records.clone()).to_owned_vec(), records);
        }
    }

    /// Taking by one value reads that value wherever its field is (after
    /// texts inline or coded, digits, money, nulls), of every kind, and
    /// takes and keeps what taking by the whole record does, from both
    /// forms; an encoded list stays encoded.
    #[test]
    fn taking_by_one_value_takes_what_the_whole_record_does() {
        use recon_core::{Currency, Money};
        let kinds: Arc<[FieldKind]> = Arc::from(vec![
            FieldKind::Text,
            FieldKind::Money,
            FieldKind::Text,
            FieldKind::Currency,
            FieldKind::Integer,
            FieldKind::Timestamp,
            FieldKind::Text,
        ]);
        let usd = Currency::parse("usd").unwrap();
        let jpy = Currency::parse("jpy").unwrap();
        let at = |s: i64| jiff::Timestamp::from_second(s).unwrap();
        let records: Vec<Record> = (0..600i64)
            .map(|i| {
                let null_or = |every: i64, v: Value| if i % every == 0 { Value::Null } else { v };
                Record {
                    key: format!("k{i:05}"),
                    values: vec![
                        // Coded (few), inline (many), digits and empty.
                        match i % 4 {
                            0 => Value::Text(format!("s{}", i % 3)),
                            1 => Value::Text(format!(
                                "unique text {i} {}",
                                "x".repeat((i % 90) as usize)
                            )),
                            2 => Value::Text((i * 7919).to_string()),
                            _ => Value::Null,
                        },
                        null_or(
                            11,
                            Value::Money(Money::from_minor(
                                i * 1_000_003 - 300_000_000,
                                if i % 2 == 0 { usd } else { jpy },
                            )),
                        ),
                        null_or(5, Value::Text(format!("t{}", i % 13))),
                        null_or(7, Value::Currency(if i % 3 == 0 { jpy } else { usd })),
                        null_or(13, Value::Integer(i64::MIN / 3 + i * 99_991)),
                        null_or(
                            9,
                            Value::Timestamp(
                                at(1_793_491_200 + (i * 7919) % 2_592_000 - 1_296_000),
                            ),
                        ),
                        Value::Text(format!("after {i}")),
                    ],
                }
            })
            .collect();
        let texts = Arc::new(TextDict::default());
        let mut codec = super::super::texts::TextCodec::new(texts.clone());
        let (mut arena, mut offsets) = (Vec::new(), Vec::new());
        for r in &records {
            offsets.push(arena.len() as u64);
            let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
            super::super::arena::encode_record(&mut arena, &r.key, &v, &kinds, &mut codec).unwrap();
        }
        let arena = Arc::new(arena);
        let cutoff = at(1_793_491_200);
        // A question per field, each taking some records and keeping others.
        type Ask<'a> = Box<dyn Fn(ValueRef<'_>) -> bool + 'a>;
        let asks: Vec<(usize, Ask)> = vec![
            (
                0,
                Box::new(|v| matches!(v, ValueRef::Text(t) if t.starts_with('s'))),
            ),
            (
                1,
                Box::new(|v| matches!(v, ValueRef::Money(m) if m.minor > 0 && m.currency == usd)),
            ),
            (2, Box::new(|v| matches!(v, ValueRef::Null))),
            (3, Box::new(|v| v == ValueRef::Currency(jpy))),
            (
                4,
                Box::new(|v| matches!(v, ValueRef::Integer(n) if n % 2 == 0)),
            ),
            (
                5,
                Box::new(move |v| matches!(v, ValueRef::Timestamp(t) if t >= cutoff)),
            ),
            (
                6,
                Box::new(|v| matches!(v, ValueRef::Text(t) if t.ends_with('7'))),
            ),
        ];
        for (field, ask) in &asks {
            let (want_taken, want_kept): (Vec<Record>, Vec<Record>) = records
                .iter()
                .cloned()
                .partition(|r| ask(r.values[*field].as_ref()));
            assert!(
                !want_taken.is_empty() && !want_kept.is_empty(),
                "field {field}: {} taken",
                want_taken.len()
            );
            let mut encoded =
                Records::encoded(arena.clone(), offsets.clone(), kinds.clone(), texts.clone());
            let mut owned = Records::from(records.clone());
            assert_eq!(
                encoded.take_where_value(*field, ask),
                want_taken,
                "field {field}"
            );
            assert_eq!(
                owned.take_where_value(*field, ask),
                want_taken,
                "field {field}"
            );
            assert!(matches!(encoded.0, Repr::Encoded { .. }));
            assert_eq!(encoded.to_owned_vec(), want_kept, "field {field}");
            assert_eq!(owned.to_owned_vec(), want_kept, "field {field}");
        }
    }

    /// Taking records out of a list leaves the others in order in the
    /// list's own form (an encoded list stays encoded) and hands the taken
    /// ones back whole and in order, the same from both forms.
    #[test]
    fn taking_records_keeps_the_rest_in_order() {
        let kinds: Arc<[FieldKind]> = Arc::from(vec![FieldKind::Text, FieldKind::Integer]);
        let texts = Arc::new(TextDict::default());
        let mut codec = super::super::texts::TextCodec::new(texts.clone());
        let records: Vec<Record> = (0..1_000)
            .map(|i| Record {
                key: format!("ch_{i:06}"),
                values: vec![Value::Text(format!("s{}", i % 7)), Value::Integer(i)],
            })
            .collect();
        let (mut arena, mut offsets) = (Vec::new(), Vec::new());
        for r in &records {
            offsets.push(arena.len() as u64);
            let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
            super::super::arena::encode_record(&mut arena, &r.key, &v, &kinds, &mut codec).unwrap();
        }
        let young = |k: &str, v: &[Value]| {
            let Value::Integer(i) = v[1] else {
                panic!("{k}: {v:?}")
            };
            assert_eq!(k, format!("ch_{i:06}"));
            i % 3 == 0 || i > 990
        };
        let (want_taken, want_kept): (Vec<Record>, Vec<Record>) = records
            .iter()
            .cloned()
            .partition(|r| young(&r.key, &r.values));
        assert_eq!((want_taken.len(), want_kept.len()), (340, 660));
        let mut encoded = Records::encoded(Arc::new(arena), offsets, kinds, texts);
        let mut owned = Records::from(records);
        assert_eq!(encoded.take_where(young), want_taken);
        assert_eq!(owned.take_where(young), want_taken);
        assert!(matches!(encoded.0, Repr::Encoded { .. }));
        assert_eq!(encoded.to_owned_vec(), want_kept);
        assert_eq!(owned.to_owned_vec(), want_kept);
        // Nothing taken, or everything.
        assert_eq!(encoded.take_where(|_, _| false), Vec::new());
        assert_eq!(encoded.len(), 660);
        assert_eq!(encoded.take_where(|_, _| true), want_kept);
        assert!(encoded.is_empty());
    }
}
