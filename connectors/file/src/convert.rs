//! Turning the text of a cell into a typed value, by the file rules of
//! [`recon_core::parse`].

use recon_core::parse::{self, TimestampRules, ValueError, ValueRules};
use recon_core::{ConnectorError, Currency, FieldKind, Location, MoneyError, ValueRef};

use crate::AmountFormat;

/// A cell as read: text (possibly empty) or absent (JSON null or missing).
#[derive(Clone, Copy)]
pub(crate) enum Cell<'a> {
    Text(&'a str),
    Null,
}

/// A conversion failure, placed in the file by the caller.
pub(crate) struct ConvertError(ValueError);

impl ConvertError {
    pub(crate) fn at(
        self,
        location: Location,
        column: &str,
        currency_column: Option<&str>,
    ) -> ConnectorError {
        ConnectorError::Malformed {
            location,
            message: self
                .0
                .message("column", column, currency_column.unwrap_or("currency")),
        }
    }
}

/// Remembers the currency codes read, as written: exports repeat a handful
/// of currencies (in any order: a one-code memory missed three rows in four
/// on a four-currency export). The reader asks once per row for the
/// row's currency column, which its amounts and, when compared, the
/// currency field itself share (asked per cell, it cost a second probe).
///
/// Found by a hash of the code, not by a search of the codes in turn: the
/// search's exit at a place that changes from row to row was a branch the
/// CPU mispredicted on most rows of a mixed-currency export, twice a row.
#[derive(Default)]
pub(crate) struct CurrencyCache {
    /// A code's three bytes (as written, any case) and its currency, at
    /// [`slot`] of the code or the next free slot after it; a free slot's
    /// code is 0, which no currency's is.
    slots: [(u32, Option<Currency>); SLOTS],
    len: usize,
    /// The dates of the RFC 3339 cells read last ([`parse::DateMemo`]),
    /// kept here beside the codes: the reader's loop passes this cache
    /// already (a memo of its own there slowed every text read).
    /// Boxed: its 1 KiB in the cache itself slowed every text read of the
    /// timestamps bench by 1.5-3 ns a row.
    pub(crate) dates: Box<parse::DateMemo>,
}

/// How many distinct codes the cache keeps; past it, codes are parsed.
const CACHED_CODES: usize = 16;

/// Twice [`CACHED_CODES`]: runs of slots stay short, and there is always a
/// free slot to end a search.
const SLOTS: usize = 2 * CACHED_CODES;

/// Where the search for `code` starts: the top bits of a multiplicative hash.
#[inline(always)]
fn slot(code: u32) -> usize {
    (code.wrapping_mul(0x9E37_79B1) >> (32 - SLOTS.trailing_zeros())) as usize
}

impl CurrencyCache {
    // Inlined: without it the reader pays a call per cell (measured).
    #[inline]
    fn parse(&mut self, text: &str) -> Result<Currency, MoneyError> {
        if let Some(currency) = self.cached(text) {
            return Ok(currency);
        }
        let currency = Currency::parse(text)?;
        if let (&[a, b, c], true) = (text.as_bytes(), self.len < CACHED_CODES) {
            let code = u32::from_le_bytes([a, b, c, 0]);
            // Not cached (asked above): the search ends at a free slot.
            let i = self.search(code);
            self.slots[i] = (code, Some(currency));
            self.len += 1;
        }
        Ok(currency)
    }

    /// The currency of a code read before, as written; `None` for any
    /// other text (then [`CurrencyCache::parse`] reads it).
    #[inline]
    pub(crate) fn cached(&self, text: &str) -> Option<Currency> {
        let &[a, b, c] = text.as_bytes() else {
            return None;
        };
        // A free slot holds no currency: a code not kept (or three zero
        // bytes) finds none.
        self.slots[self.search(u32::from_le_bytes([a, b, c, 0]))].1
    }

    /// The slot holding `code`, else the free slot that ends its search.
    #[inline(always)]
    fn search(&self, code: u32) -> usize {
        let mut i = slot(code);
        while self.slots[i].0 != code && self.slots[i].0 != 0 {
            i = (i + 1) % SLOTS;
        }
        i
    }
}

/// The typed cells exports write most, read inline by the reader's loop
/// without a call per cell: timestamps in Unix seconds or RFC 3339,
/// amounts in minor units as plain integers, and currency codes read
/// before (text cells the loop takes itself). `None` sends the cell to
/// [`convert`], which reads these forms to the same values (a test checks
/// it) and words the refusals.
#[inline(always)]
pub(crate) fn convert_fast<'a>(
    cell: Cell<'a>,
    kind: FieldKind,
    currency: Option<&str>,
    row_currency: Option<Currency>,
    amount_format: AmountFormat,
    cache: &CurrencyCache,
) -> Option<ValueRef<'a>> {
    let Cell::Text(text) = cell else {
        return None;
    };
    match kind {
        FieldKind::Timestamp => {
            parse::timestamp_fast_with(text, TimestampRules::FILE, Some(&cache.dates))
                .map(ValueRef::Timestamp)
        }
        // The row's currency column itself (the same text, not only an
        // equal one): its code was looked up once for the row.
        FieldKind::Currency => if currency.is_some_and(|c| std::ptr::eq(c, text)) {
            row_currency
        } else {
            cache.cached(text)
        }
        .map(ValueRef::Currency),
        FieldKind::Money if amount_format == AmountFormat::Minor => {
            let currency = row_currency?;
            let minor = parse::plain_amount(text.as_bytes())?;
            Some(ValueRef::Money(recon_core::Money::from_minor(
                minor, currency,
            )))
        }
        _ => None,
    }
}

/// A cell as a value of `kind`; an empty cell is null. Timestamps are Unix
/// seconds or RFC 3339 ([`TimestampRules::FILE`]).
pub(crate) fn convert<'a>(
    cell: Cell<'a>,
    kind: FieldKind,
    currency: Option<&str>,
    amount_format: AmountFormat,
    cache: &mut CurrencyCache,
) -> Result<ValueRef<'a>, ConvertError> {
    let text = match cell {
        Cell::Null | Cell::Text("") => return Ok(ValueRef::Null),
        Cell::Text(t) => t,
    };
    let rules = ValueRules {
        amounts: amount_format,
        timestamps: TimestampRules::FILE,
    };
    parse::value_ref(text, kind, currency, rules, |c| cache.parse(c)).map_err(ConvertError)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read<'a>(
        text: &'a str,
        kind: FieldKind,
        currency: Option<&str>,
    ) -> Result<ValueRef<'a>, String> {
        convert(
            Cell::Text(text),
            kind,
            currency,
            AmountFormat::Minor,
            &mut CurrencyCache::default(),
        )
        .map_err(|e| {
            e.at(Location("p.csv line 2".into()), "col", Some("cur"))
                .to_string()
        })
    }

    #[test]
    fn empty_and_absent_cells_are_null_whatever_the_kind() {
        let mut cache = CurrencyCache::default();
        for kind in [FieldKind::Integer, FieldKind::Money, FieldKind::Timestamp] {
            for cell in [Cell::Text(""), Cell::Null] {
                let v = convert(cell, kind, None, AmountFormat::Minor, &mut cache);
                assert!(matches!(v, Ok(ValueRef::Null)));
            }
        }
    }

    #[test]
    fn a_date_in_a_timestamp_column_is_refused_not_read_as_seconds() {
        // All digits and dashes, like Unix seconds: refused with the file's
        // forms, never turned into a number of seconds.
        assert_eq!(
            read("2026-11-28", FieldKind::Timestamp, None),
            Err(
                "p.csv line 2: column `col`: `2026-11-28` is not a timestamp; \
                 expected Unix seconds or RFC 3339 such as 2026-11-28T23:59:59Z"
                    .into()
            )
        );
        assert_eq!(
            read("-60", FieldKind::Timestamp, None),
            Ok(ValueRef::Timestamp("1969-12-31T23:59:00Z".parse().unwrap()))
        );
    }

    #[test]
    fn currency_errors_are_put_on_the_currency_column() {
        assert_eq!(
            read("5", FieldKind::Money, Some("")),
            Err("p.csv line 2: column `col`: amount `5` has no currency; fill the currency column `cur`".into())
        );
        let e = read("5", FieldKind::Money, Some("zzz")).unwrap_err();
        assert!(
            e.starts_with(
                "p.csv line 2: column `cur` (currency of `col`): unknown currency code `zzz`"
            ),
            "{e}"
        );
    }

    proptest::proptest! {
        /// The inline path reads exactly what convert reads, for every
        /// kind, with and without the currency cached, in both amount
        /// formats; and the forms exports write take it.
        #[test]
        fn the_inline_path_reads_what_convert_reads(
            text in proptest::prop_oneof![
                "-?[0-9]{1,20}",
                "[ +]?[0-9]{1,6}(\\.[0-9]{1,3})?[ ]?",
                "2026-11-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})",
                "(usd|USD|jpy|kwd|zzz|us|)",
                "[a-zA-Z0-9 .:-]{0,24}",
            ],
            kind in proptest::sample::select(vec![
                FieldKind::Text, FieldKind::Integer, FieldKind::Currency,
                FieldKind::Money, FieldKind::Timestamp,
            ]),
            currency in proptest::option::of("(usd|jpy|kwd|eur|zzz|)"),
            major in proptest::bool::ANY,
            warm in proptest::bool::ANY,
            itself in proptest::bool::ANY,
        ) {
            let format = if major { AmountFormat::Major } else { AmountFormat::Minor };
            let mut cache = CurrencyCache::default();
            if warm {
                for code in ["usd", "jpy", "kwd"] {
                    cache.parse(code).unwrap();
                }
            }
            // The cell may be the row's currency column itself (the same
            // text), whose code the reader looks up once for the row.
            let text = match &currency {
                Some(code) if itself => code.clone(),
                _ => text,
            };
            let currency = if itself { Some(text.as_str()) } else { currency.as_deref() };
            let row_currency = currency.and_then(|c| cache.cached(c));
            let fast = convert_fast(Cell::Text(&text), kind, currency, row_currency, format, &cache);
            let slow = convert(Cell::Text(&text), kind, currency, format, &mut cache)
                .map_err(|e| e.0);
            if let Some(v) = fast {
                proptest::prop_assert_eq!(Ok(v), slow, "{:?} as {:?}", text, kind);
            }
            let common = match kind {
                FieldKind::Text | FieldKind::Integer => false,
                FieldKind::Timestamp => text.len() <= 11 && text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty(),
                FieldKind::Money => warm && !major && text.len() <= 18 && !text.is_empty()
                    && text.bytes().all(|b| b.is_ascii_digit())
                    && matches!(currency, Some("usd" | "jpy" | "kwd")),
                FieldKind::Currency => warm && matches!(text.as_str(), "usd" | "jpy" | "kwd"),
            };
            if common {
                proptest::prop_assert!(fast.is_some(), "{:?} as {:?} not inline", text, kind);
            }
        }
    }

    #[test]
    fn the_cache_answers_repeated_codes_and_follows_a_new_one() {
        let mut cache = CurrencyCache::default();
        let usd = Currency::parse("USD").unwrap();
        let eur = Currency::parse("EUR").unwrap();
        assert_eq!(cache.parse("usd"), Ok(usd));
        assert_eq!(cache.parse("usd"), Ok(usd));
        assert_eq!(cache.parse("eur"), Ok(eur));
        assert!(cache.parse("zzz").is_err());
        // A refused code is never remembered, and the others still are.
        assert!(cache.parse("zzz").is_err());
        assert_eq!(cache.parse("usd"), Ok(usd));
        assert_eq!(cache.parse("EUR"), Ok(eur));
        assert_eq!(cache.parse("eur"), Ok(eur));
        // Codes with surrounding space are parsed (and trimmed) each time.
        assert_eq!(cache.parse(" usd "), Ok(usd));
        // Past its size the cache still answers, by parsing.
        let codes = [
            "aud", "brl", "cad", "chf", "cny", "czk", "dkk", "gbp", "hkd", "huf", "inr", "jpy",
            "krw", "kwd", "mxn", "nok", "nzd", "pln", "sek", "sgd",
        ];
        for code in codes.iter().chain(&codes) {
            assert_eq!(cache.parse(code), Currency::parse(code), "{code}");
        }
        assert_eq!(cache.len, CACHED_CODES);
        // Every code kept is found, and none past the size is.
        let kept: Vec<&&str> = ["usd", "eur", "EUR"]
            .iter()
            .chain(&codes)
            .take(CACHED_CODES)
            .collect();
        for code in &kept {
            assert_eq!(cache.cached(code), Currency::parse(code).ok(), "{code}");
        }
        for code in codes.iter().skip(CACHED_CODES - 3) {
            assert_eq!(cache.cached(code), None, "{code}");
        }
        // A free slot's code (three zero bytes) is no currency.
        assert_eq!(cache.cached("\0\0\0"), None);
    }

    #[test]
    fn codes_whose_searches_start_at_one_slot_are_all_found() {
        // Every currency code, by where its search starts: the largest
        // group, kept together, is found one after another in its run.
        let mut by_start: std::collections::HashMap<usize, Vec<String>> = Default::default();
        for a in b'a'..=b'z' {
            for b in b'a'..=b'z' {
                for c in b'a'..=b'z' {
                    let code = String::from_utf8(vec![a, b, c]).unwrap();
                    if Currency::parse(&code).is_ok() {
                        by_start
                            .entry(slot(u32::from_le_bytes([a, b, c, 0])))
                            .or_default()
                            .push(code);
                    }
                }
            }
        }
        let group = by_start.values().max_by_key(|g| g.len()).unwrap();
        assert!(group.len() >= 3, "{group:?}");
        let mut cache = CurrencyCache::default();
        for code in group.iter().take(CACHED_CODES) {
            assert_eq!(cache.parse(code), Currency::parse(code), "{code}");
        }
        for code in group.iter().take(CACHED_CODES) {
            assert_eq!(cache.cached(code), Currency::parse(code).ok(), "{code}");
        }
    }
}
