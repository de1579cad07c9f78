use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use recon_core::{Currency, Field, FieldKind, Money, Record, Schema, Value};

use super::arena::OCCUPIED;
use super::*;

fn schema() -> Schema {
    Schema {
        fields: vec![
            Field {
                name: "amount".into(),
                kind: FieldKind::Money,
                compared: true,
            },
            Field {
                name: "status".into(),
                kind: FieldKind::Text,
                compared: true,
            },
            Field {
                name: "note".into(),
                kind: FieldKind::Text,
                compared: false,
            },
        ],
    }
}

fn run(spec: DiffSpec, source: &[Record], target: &[Record]) -> DiffOutcome {
    feed(DiffEngine::new(spec), source, target)
}

fn feed(mut engine: DiffEngine, source: &[Record], target: &[Record]) -> DiffOutcome {
    for r in source {
        let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
        engine.add_source(&r.key, &v).unwrap();
    }
    for r in target {
        let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
        engine.add_target(&r.key, &v).unwrap();
    }
    engine.finish()
}

fn rec(key: &str, minor: i64, cur: &str, status: &str) -> Record {
    Record {
        key: key.into(),
        values: vec![
            Value::Money(Money::from_minor(minor, Currency::parse(cur).unwrap())),
            Value::Text(status.into()),
            Value::Text("ignored".into()),
        ],
    }
}

#[test]
fn classifies_each_planted_discrepancy() {
    let source = vec![
        rec("a", 100, "usd", "succeeded"),
        rec("b", 200, "usd", "succeeded"),
        rec("c", 300, "eur", "succeeded"),
        rec("d", 400, "jpy", "succeeded"),
        rec("d", 400, "jpy", "succeeded"),
        rec("e", 500, "usd", "succeeded"),
    ];
    let mut changed_note = rec("a", 100, "usd", "succeeded");
    changed_note.values[2] = Value::Text("different but not compared".into());
    let target = vec![
        changed_note,
        rec("c", 301, "eur", "failed"),
        rec("d", 400, "jpy", "succeeded"),
        rec("e", 500, "usd", "succeeded"),
        rec("e", 500, "usd", "succeeded"),
        rec("z", 900, "usd", "succeeded"),
    ];
    let out = run(DiffSpec::exact(schema()), &source, &target);
    assert_eq!(out.matched, 1);
    assert_eq!(
        out.gaps.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        ["b"]
    );
    assert_eq!(
        out.orphans
            .iter()
            .map(|r| r.key.clone())
            .collect::<Vec<_>>(),
        ["z"]
    );
    assert_eq!(out.mismatches.len(), 1);
    assert_eq!(out.mismatches[0].key, "c");
    assert_eq!(
        out.mismatches[0]
            .fields
            .iter()
            .map(|f| f.field)
            .collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(
        out.duplicates,
        vec![
            Duplicate {
                key: "d".into(),
                source_count: 2,
                target_count: 1
            },
            Duplicate {
                key: "e".into(),
                source_count: 1,
                target_count: 2
            },
        ]
    );
    assert_eq!(out.source_records, 5);
    assert_eq!(out.target_records, 5);
    assert_eq!(out.source_rows, 6);
    assert_eq!(out.target_rows, 6);
    let usd = Some(Currency::parse("USD").unwrap());
    assert_eq!(
        out.source_totals[&usd],
        CurrencyTotal {
            records: 3,
            minor: 800
        }
    );
    assert_eq!(
        out.target_totals[&usd],
        CurrencyTotal {
            records: 4,
            minor: 2000
        }
    );
}

#[test]
fn tolerances_apply_per_field() {
    let mut spec = DiffSpec::exact(schema());
    spec.tolerances[0] = Some(Tolerance::Units(1));
    let out = run(
        spec.clone(),
        &[
            rec("a", 100, "usd", "x"),
            rec("b", 100, "usd", "x"),
            rec("c", 100, "usd", "x"),
        ],
        &[
            rec("a", 101, "usd", "x"),
            rec("b", 102, "usd", "x"),
            rec("c", 100, "eur", "x"),
        ],
    );
    assert_eq!(out.matched, 1);
    assert_eq!(
        out.mismatches
            .iter()
            .map(|m| m.key.as_str())
            .collect::<Vec<_>>(),
        ["b", "c"],
        "2 units off and a currency change both exceed a 1-unit tolerance"
    );
    let t = |s| Value::Timestamp(jiff::Timestamp::from_second(s).unwrap());
    let ts = Schema {
        fields: vec![Field {
            name: "created".into(),
            kind: FieldKind::Timestamp,
            compared: true,
        }],
    };
    let mut spec = DiffSpec::exact(ts);
    spec.tolerances[0] = Some(Tolerance::Seconds(5));
    let r = |k: &str, s| Record {
        key: k.into(),
        values: vec![t(s)],
    };
    let out = run(
        spec,
        &[r("a", 1000), r("b", 1000)],
        &[r("a", 1005), r("b", 1006)],
    );
    assert_eq!(out.matched, 1);
    assert_eq!(out.mismatches[0].key, "b");
}

#[test]
fn null_differs_from_a_value() {
    let mut with_null = rec("a", 100, "usd", "x");
    with_null.values[1] = Value::Null;
    let out = run(
        DiffSpec::exact(schema()),
        &[rec("a", 100, "usd", "x")],
        &[with_null],
    );
    assert_eq!(out.mismatches.len(), 1);
    assert_eq!(out.mismatches[0].fields[0].target, Value::Null);
}

#[test]
fn source_after_target_is_refused() {
    let mut engine = DiffEngine::new(DiffSpec::exact(schema()));
    let r = rec("a", 1, "usd", "x");
    let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
    engine.add_target("a", &v).unwrap();
    assert!(matches!(
        engine.add_source("a", &v),
        Err(DiffError::SourceAfterTarget(_))
    ));
    assert!(matches!(
        engine.add_target("a", &v[..1]),
        Err(DiffError::Arity {
            got: 1,
            want: 3,
            ..
        })
    ));
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        0u8..40,
        -3i64..3,
        prop::sample::select(vec!["usd", "jpy", "kwd"]),
        prop::sample::select(vec!["succeeded", "failed"]),
    )
        .prop_map(|(k, minor, cur, status)| rec(&format!("id{k}"), minor, cur, status))
}

fn arb_side() -> impl Strategy<Value = Vec<Record>> {
    prop::collection::vec(arb_record(), 0..60)
}

fn class_sets(out: &DiffOutcome) -> [BTreeSet<String>; 4] {
    [
        out.gaps.iter().map(|r| r.key.clone()).collect(),
        out.orphans.iter().map(|r| r.key.clone()).collect(),
        out.mismatches.iter().map(|m| m.key.clone()).collect(),
        out.duplicates.iter().map(|d| d.key.clone()).collect(),
    ]
}

fn sums(records: &[Record]) -> Totals {
    let mut t = Totals::new();
    for r in records {
        if let Value::Money(m) = r.values[0] {
            let e = t.entry(Some(m.currency)).or_default();
            e.records += 1;
            e.minor += i128::from(m.minor);
        }
    }
    t
}

proptest! {
    #[test]
    fn every_id_lands_in_exactly_one_class(source in arb_side(), target in arb_side()) {
        let out = run(DiffSpec::exact(schema()), &source, &target);
        let [gaps, orphans, mismatches, duplicates] = class_sets(&out);
        let count = |side: &[Record]| {
            let mut m = BTreeMap::<String, usize>::new();
            for r in side { *m.entry(r.key.clone()).or_default() += 1; }
            m
        };
        let (s, t) = (count(&source), count(&target));
        let all: BTreeSet<String> = s.keys().chain(t.keys()).cloned().collect();
        let listed = gaps.len() + orphans.len() + mismatches.len() + duplicates.len();
        prop_assert_eq!(listed as u64 + out.matched, all.len() as u64);
        let union: BTreeSet<String> = gaps.iter().chain(&orphans).chain(&mismatches).chain(&duplicates).cloned().collect();
        prop_assert_eq!(union.len(), listed, "classes overlap");
        for id in &all {
            let (ns, nt) = (s.get(id).copied().unwrap_or(0), t.get(id).copied().unwrap_or(0));
            if ns > 1 || nt > 1 {
                prop_assert!(duplicates.contains(id));
            } else if nt == 0 {
                prop_assert!(gaps.contains(id));
            } else if ns == 0 {
                prop_assert!(orphans.contains(id));
            } else {
                let a = source.iter().find(|r| &r.key == id).unwrap();
                let b = target.iter().find(|r| &r.key == id).unwrap();
                let differs = a.values[..2] != b.values[..2];
                prop_assert_eq!(mismatches.contains(id), differs);
            }
        }
        prop_assert_eq!(out.source_records, s.len() as u64);
        prop_assert_eq!(out.target_records, t.len() as u64);
    }

    #[test]
    fn swapping_sides_swaps_gaps_and_orphans(source in arb_side(), target in arb_side()) {
        let ab = run(DiffSpec::exact(schema()), &source, &target);
        let ba = run(DiffSpec::exact(schema()), &target, &source);
        let [g1, o1, m1, d1] = class_sets(&ab);
        let [g2, o2, m2, d2] = class_sets(&ba);
        prop_assert_eq!(&g1, &o2);
        prop_assert_eq!(&o1, &g2);
        prop_assert_eq!(&m1, &m2);
        prop_assert_eq!(&d1, &d2);
        prop_assert_eq!(ab.matched, ba.matched);
        for (x, y) in ab.mismatches.iter().zip(&ba.mismatches) {
            for (fx, fy) in x.fields.iter().zip(&y.fields) {
                prop_assert_eq!(&fx.source, &fy.target);
                prop_assert_eq!(&fx.target, &fy.source);
            }
        }
        for (x, y) in ab.duplicates.iter().zip(&ba.duplicates) {
            prop_assert_eq!((x.source_count, x.target_count), (y.target_count, y.source_count));
        }
    }

    #[test]
    fn identical_inputs_are_all_matched(mut side in arb_side()) {
        // Duplicates are their own class; identical inputs without them match entirely.
        let mut seen = BTreeSet::new();
        side.retain(|r| seen.insert(r.key.clone()));
        let out = run(DiffSpec::exact(schema()), &side, &side);
        prop_assert_eq!(out.matched, side.len() as u64);
        prop_assert!(out.gaps.is_empty() && out.orphans.is_empty());
        prop_assert!(out.mismatches.is_empty() && out.duplicates.is_empty());
    }

    #[test]
    fn totals_equal_the_sums_of_the_inputs(source in arb_side(), target in arb_side()) {
        let out = run(DiffSpec::exact(schema()), &source, &target);
        prop_assert_eq!(out.source_totals, sums(&source));
        prop_assert_eq!(out.target_totals, sums(&target));
    }
}

#[test]
fn mismatches_keep_their_whole_source_record_for_repair() {
    // "m" and "k" differ (in a compared field, and the uncompared note is
    // carried along whole); "d" differs but is duplicated in the source, so
    // it is a duplicate only and has no repair record.
    let mut m_source = rec("m", 100, "usd", "succeeded");
    m_source.values[2] = Value::Text("source note".into());
    let source = vec![
        m_source.clone(),
        rec("k", 700, "eur", "succeeded"),
        rec("d", 1, "usd", "succeeded"),
        rec("d", 1, "usd", "succeeded"),
        rec("same", 5, "usd", "succeeded"),
    ];
    let target = vec![
        rec("m", 100, "usd", "refunded"),
        rec("k", 701, "eur", "succeeded"),
        rec("d", 2, "usd", "succeeded"),
        rec("same", 5, "usd", "succeeded"),
    ];
    let out = run(DiffSpec::exact(schema()), &source, &target);
    let keys: Vec<&str> = out.mismatches.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, ["k", "m"]);
    let repairs: Vec<Record> = out
        .mismatch_sources
        .iter()
        .map(|r| r.into_owned())
        .collect();
    assert_eq!(repairs, vec![rec("k", 700, "eur", "succeeded"), m_source]);
}

#[test]
fn has_nul_finds_a_zero_byte_anywhere_and_nothing_else() {
    for len in 0..40usize {
        let clean: Vec<u8> = (0..len).map(|i| 1 + (i * 37 % 255) as u8).collect();
        assert!(!super::has_nul(&clean), "{clean:?}");
        // 0x80 and 0xff bytes are no zero (the SWAR test's edge cases).
        let high = vec![0x80u8; len];
        assert!(!super::has_nul(&high));
        for at in 0..len {
            let mut b = clean.clone();
            b[at] = 0;
            assert!(super::has_nul(&b), "zero at {at} of {len}");
        }
    }
}

/// Every copy of each ID a side holds more than once, in file order per
/// ID (the order [`crate::report::copies::number`] keeps).
fn copies_by_key(mut records: Vec<Record>) -> Vec<Record> {
    records.sort_by(|a, b| a.key.cmp(&b.key));
    records
}

fn expected_copies(side: &[Record]) -> Vec<Record> {
    let mut n = BTreeMap::<&str, usize>::new();
    for r in side {
        *n.entry(r.key.as_str()).or_default() += 1;
    }
    side.iter()
        .filter(|r| n[r.key.as_str()] > 1)
        .cloned()
        .collect()
}

fn run_capturing(spec: DiffSpec, source: &[Record], target: &[Record]) -> DiffOutcome {
    let mut engine = DiffEngine::new(spec);
    engine.capture_copies();
    feed(engine, source, target)
}

proptest! {
    #[test]
    fn kept_copies_are_every_copy_of_each_duplicated_id(
        source in arb_side(),
        target in arb_side(),
        other_note in prop::collection::vec(any::<bool>(), 60),
    ) {
        // Some target rows differ from the source only in the uncompared
        // note: such a first copy matches without being the same bytes.
        let target: Vec<Record> = target
            .into_iter()
            .zip(&other_note)
            .map(|(mut r, &other)| {
                if other {
                    r.values[2] = Value::Text("other".into());
                }
                r
            })
            .collect();
        let out = run_capturing(DiffSpec::exact(schema()), &source, &target);
        let copies = out.copies.clone().expect("copies were asked for");
        prop_assert_eq!(
            copies_by_key(copies.source.clone()),
            copies_by_key(expected_copies(&source))
        );
        let unknown: BTreeSet<&str> = copies.target_unknown.iter().map(String::as_str).collect();
        let want: Vec<Record> = expected_copies(&target)
            .into_iter()
            .filter(|r| !unknown.contains(r.key.as_str()))
            .collect();
        prop_assert_eq!(copies_by_key(copies.target.clone()), copies_by_key(want));
        // Unknown only where the first target copy matched the source's
        // one record without being it (the note), of an ID copied twice.
        for key in &unknown {
            let of = |side: &[Record]| -> Vec<Record> {
                side.iter().filter(|r| r.key == *key).cloned().collect()
            };
            let (s, t) = (of(&source), of(&target));
            prop_assert_eq!(s.len(), 1);
            prop_assert!(t.len() > 1);
            prop_assert_eq!(&s[0].values[..2], &t[0].values[..2]);
            prop_assert_ne!(&s[0].values[2], &t[0].values[2]);
        }
        // Classification is the same as without keeping copies.
        let plain = run(DiffSpec::exact(schema()), &source, &target);
        prop_assert_eq!(class_sets(&out), class_sets(&plain));
        prop_assert_eq!(out.matched, plain.matched);
        prop_assert_eq!(out.duplicates, plain.duplicates);
    }
}

#[test]
fn copies_are_kept_from_either_arena_and_from_the_stream() {
    let source = vec![
        rec("s", 1, "usd", "succeeded"),
        rec("both", 5, "usd", "succeeded"),
        rec("s", 2, "usd", "failed"),
        rec("t", 7, "usd", "succeeded"),
        rec("m", 9, "usd", "succeeded"),
        rec("s", 3, "usd", "succeeded"),
        rec("both", 6, "usd", "succeeded"),
    ];
    let target = vec![
        rec("t", 7, "usd", "succeeded"),
        rec("o", 4, "usd", "succeeded"),
        rec("m", 8, "usd", "succeeded"),
        rec("both", 5, "usd", "succeeded"),
        rec("t", 70, "usd", "succeeded"),
        rec("o", 40, "usd", "succeeded"),
        rec("m", 80, "usd", "succeeded"),
        rec("t", 700, "usd", "succeeded"),
        rec("single", 1, "usd", "succeeded"),
    ];
    let out = run_capturing(DiffSpec::exact(schema()), &source, &target);
    let copies = out.copies.unwrap();
    let amounts = |records: &[Record], key: &str| -> Vec<i64> {
        records
            .iter()
            .filter(|r| r.key == key)
            .map(|r| match &r.values[0] {
                Value::Money(m) => m.minor,
                v => panic!("{v:?}"),
            })
            .collect()
    };
    // The source's first copy from its arena, the later ones as read.
    assert_eq!(amounts(&copies.source, "s"), [1, 2, 3]);
    assert_eq!(amounts(&copies.source, "both"), [5, 6]);
    assert_eq!(copies.source.len(), 5);
    // The target's: the first copy is the source's record (same bytes),
    // an orphan's own record, a mismatch's kept bytes; "both" has one
    // target copy, so it lists none there.
    assert_eq!(amounts(&copies.target, "t"), [7, 70, 700]);
    assert_eq!(amounts(&copies.target, "o"), [4, 40]);
    assert_eq!(amounts(&copies.target, "m"), [8, 80]);
    assert_eq!(copies.target.len(), 7);
    assert!(copies.target_unknown.is_empty());
    // Without asking, nothing is kept.
    assert!(run(DiffSpec::exact(schema()), &source, &target)
        .copies
        .is_none());
}

proptest! {
    /// Offsets sorted by their keys' prefixes and then the keys are in the
    /// keys' own order, whatever prefix the keys share, their lengths, and
    /// whether the vector has room for the pairs.
    #[test]
    fn offsets_sort_in_key_order(
        keys in prop::collection::btree_set("(ch_|ch_3|x|in\\.)?[-0-9a-fA-F]{0,12}", 0..200),
        spare in any::<bool>(),
    ) {
        let mut arena = Vec::new();
        let mut offsets = Vec::new();
        let mut texts = texts::TextCodec::new(Default::default());
        for k in &keys {
            offsets.push(arena.len() as u64);
            arena::encode_record(&mut arena, k, &[], &[], &mut texts).unwrap();
        }
        // A fixed shuffle: reversed, then every other one moved to the back.
        offsets.reverse();
        let mut shuffled: Vec<u64> = offsets.iter().step_by(2).copied().collect();
        shuffled.extend(offsets.iter().skip(1).step_by(2));
        if spare {
            shuffled.reserve_exact(shuffled.len() * 2);
        } else {
            shuffled.shrink_to_fit();
        }
        sort_by_key(&arena, &mut shuffled);
        let sorted: Vec<String> = shuffled.iter().map(|&o| key_string(key_at(&arena, o))).collect();
        let want: Vec<String> = keys.iter().cloned().collect();
        prop_assert_eq!(sorted, want);
    }
}

/// Keys and text values in every stored form (packed keys, keys kept as
/// they are, keys too long to pack; coded text, text past a full
/// dictionary, canonical digits, digits with a leading zero, empty and
/// long text) read back as they went in, and compare exactly: `7` and
/// `007`, a code and the same text stored inline never pass for each other.
#[test]
fn every_stored_form_reads_back_and_compares_exactly() {
    let field = |name: &str, compared| Field {
        name: name.into(),
        kind: FieldKind::Text,
        compared,
    };
    let spec = DiffSpec::exact(Schema {
        fields: vec![
            field("status", true),
            field("created", true),
            field("note", false),
        ],
    });
    let text = |s: String| Value::Text(s);
    let source: Vec<Record> = (0..6000u32)
        .map(|i| Record {
            key: match i % 3 {
                0 => format!("ch_{i:024x}"),
                1 => format!("in.{i}"),
                _ => format!("{}-{i}", "x".repeat(70)),
            },
            values: vec![
                // 5,000 distinct values: the dictionary fills part way.
                text(format!("s{}", i % 5000)),
                match i % 5 {
                    0 => text(i.to_string()),
                    1 => text(format!("{i:08}")),
                    2 => text(format!("{i}.5")),
                    3 => text(String::new()),
                    _ => text("a long text that no dictionary code is given for".repeat(2)),
                },
                text(format!("n{i}")),
            ],
        })
        .collect();
    let mut target: Vec<Record> = Vec::new();
    for (i, r) in source.iter().enumerate() {
        let mut r = r.clone();
        match i % 11 {
            0 => continue, // a gap
            1 => r.values[0] = text(format!("s{}", (i + 1) % 5000)),
            2 => {
                // The same number with a leading zero, or digits for text.
                r.values[1] = match &r.values[1] {
                    Value::Text(t) if !t.is_empty() => text(format!("0{t}")),
                    _ => text(i.to_string()),
                }
            }
            3 => r.values[2] = text("another note (not compared)".into()),
            _ => {}
        }
        target.push(r);
    }
    target.extend((0..50).map(|i| Record {
        key: format!("ch_orphan_{i:020}"),
        values: vec![text(format!("t{i}")), text("77".into()), Value::Null],
    }));
    let out = run(spec, &source, &target);

    let by_key = |side: &[Record]| -> BTreeMap<String, Record> {
        side.iter().map(|r| (r.key.clone(), r.clone())).collect()
    };
    let (s, t) = (by_key(&source), by_key(&target));
    let want_gaps: Vec<Record> = s
        .values()
        .filter(|r| !t.contains_key(&r.key))
        .cloned()
        .collect();
    let want_orphans: Vec<Record> = t
        .values()
        .filter(|r| !s.contains_key(&r.key))
        .cloned()
        .collect();
    assert_eq!(
        out.gaps.iter().map(|r| r.into_owned()).collect::<Vec<_>>(),
        want_gaps
    );
    assert_eq!(
        out.orphans
            .iter()
            .map(|r| r.into_owned())
            .collect::<Vec<_>>(),
        want_orphans
    );
    let mut want_mismatches = Vec::new();
    for (key, a) in &s {
        let Some(b) = t.get(key) else { continue };
        let fields: Vec<FieldDiff> = (0..2)
            .filter(|&f| a.values[f] != b.values[f])
            .map(|f| FieldDiff {
                field: f,
                source: a.values[f].clone(),
                target: b.values[f].clone(),
            })
            .collect();
        if !fields.is_empty() {
            want_mismatches.push(Mismatch {
                key: key.clone(),
                fields,
            });
        }
    }
    assert!(want_mismatches.len() > 900, "{}", want_mismatches.len());
    assert_eq!(out.mismatches, want_mismatches);
    let sources: Vec<Record> = out
        .mismatch_sources
        .iter()
        .map(|r| r.into_owned())
        .collect();
    let want_sources: Vec<Record> = want_mismatches.iter().map(|m| s[&m.key].clone()).collect();
    assert_eq!(sources, want_sources);
    assert_eq!(
        out.matched as usize,
        s.len() - want_gaps.len() - want_mismatches.len()
    );
    assert!(out.duplicates.is_empty());
}

/// The source table's scan in two halves (past `SCAN_SPLIT_MIN` slots)
/// finds what one pass in order finds: the same gaps in the same order,
/// the same counts and duplicates. Entries of every class are spread over
/// both halves, with runs of gaps across the split point.
#[test]
fn split_scan_of_the_source_table_is_the_one_pass() {
    // A fixed xorshift: every run checks the same tables.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % 6
    };
    let flags = [
        0,
        SEEN_OTHER,
        SEEN_OTHER | MISMATCH,
        DUP_SELF,
        SEEN_OTHER | DUP_OTHER,
    ];
    for len in [SCAN_SPLIT_MIN - 1, SCAN_SPLIT_MIN, SCAN_SPLIT_MIN * 2 + 3] {
        let slots: Vec<u64> = (0..len as u64)
            .map(|i| match next() {
                0 => EMPTY,
                // Gaps around the middle, where the halves meet.
                _ if (len as u64 / 2).abs_diff(i) < 40 => i | OCCUPIED,
                n => i | OCCUPIED | flags[n as usize - 1],
            })
            .collect();
        // The one pass, as `finish` made it before.
        let (mut matched, mut seen, mut dups) = (0, 0, Vec::new());
        let mut gaps = slots.clone();
        gaps.retain(|&e| {
            if e == EMPTY {
                return false;
            }
            seen += u64::from(e & SEEN_OTHER != 0);
            if e & (DUP_SELF | DUP_OTHER) != 0 {
                dups.push(e);
                return false;
            }
            if e & SEEN_OTHER == 0 {
                return true;
            }
            matched += u64::from(e & MISMATCH == 0);
            false
        });
        let mut split = slots.clone();
        let scan = scan_source_slots(&mut split);
        assert_eq!(split, gaps, "{len} slots: the gaps, in table order");
        assert_eq!(scan.matched, matched, "{len} slots");
        assert_eq!(scan.seen_in_target, seen, "{len} slots");
        assert_eq!(scan.duplicates, dups, "{len} slots");
        assert!(gaps.len() > 100 && matched > 100 && !dups.is_empty());
    }
}

/// Mismatches listed in their offsets' order are put in the order of the
/// same offsets sorted; a list whose offsets repeat, or of another length,
/// is left as it is (the sort by key after `finish` orders it then).
#[test]
fn mismatches_follow_their_sorted_offsets() {
    let m = |key: &str| Mismatch {
        key: key.into(),
        fields: Vec::new(),
    };
    let keys = |list: &[Mismatch]| list.iter().map(|m| m.key.clone()).collect::<Vec<_>>();
    let mut list = vec![m("c"), m("a"), m("d"), m("b")];
    in_order_of(&mut list, &[30, 10, 40, 20], &[10, 20, 30, 40]);
    assert_eq!(keys(&list), ["a", "b", "c", "d"]);
    let mut list = vec![m("c"), m("a"), m("d"), m("b")];
    in_order_of(&mut list, &[30, 10, 40, 20], &[40, 30, 20, 10]);
    assert_eq!(keys(&list), ["d", "c", "b", "a"]);
    let mut list = vec![m("c"), m("a"), m("b")];
    in_order_of(&mut list, &[30, 10, 30], &[10, 30, 30]);
    assert_eq!(keys(&list), ["c", "a", "b"]);
    in_order_of(&mut list, &[30, 10], &[10, 30]);
    assert_eq!(keys(&list), ["c", "a", "b"]);
}
