//! Turning the text of a cell into a typed value, by the file rules of
//! [`recon_core::parse`].

use recon_core::parse::{self, TimestampRules, ValueError, ValueRules};
use recon_core::{ConnectorError, Currency, FieldKind, Location, MoneyError, ValueRef};

use crate::AmountFormat;

/// A cell as read: text (possibly empty) or absent (JSON null or missing).
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

/// Remembers the last currency code read: exports repeat a handful of
/// currencies, and each row names its currency for the amount and again for
/// a compared currency field.
#[derive(Default)]
pub(crate) struct CurrencyCache {
    text: String,
    parsed: Option<Currency>,
}

impl CurrencyCache {
    // Inlined: without it the reader pays a call per cell (measured).
    #[inline]
    fn parse(&mut self, text: &str) -> Result<Currency, MoneyError> {
        if let Some(c) = self.parsed {
            if self.text == text {
                return Ok(c);
            }
        }
        let c = Currency::parse(text)?;
        self.text.clear();
        self.text.push_str(text);
        self.parsed = Some(c);
        Ok(c)
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

    #[test]
    fn the_cache_answers_repeated_codes_and_follows_a_new_one() {
        let mut cache = CurrencyCache::default();
        let usd = Currency::parse("USD").unwrap();
        let eur = Currency::parse("EUR").unwrap();
        assert_eq!(cache.parse("usd"), Ok(usd));
        assert_eq!(cache.parse("usd"), Ok(usd));
        assert_eq!(cache.parse("eur"), Ok(eur));
        assert!(cache.parse("zzz").is_err());
        // A refused code does not replace the remembered one.
        assert_eq!(cache.parse("eur"), Ok(eur));
    }
}
