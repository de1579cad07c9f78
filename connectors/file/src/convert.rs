//! Turning the text of a cell into a typed value.

use recon_core::{ConnectorError, Currency, FieldKind, Location, Money, ValueRef};

use crate::AmountFormat;

/// A cell as read: text (possibly empty) or absent (JSON null or missing).
pub(crate) enum Cell<'a> {
    Text(&'a str),
    Null,
}

/// A conversion failure, placed in the file by the caller.
pub(crate) enum ConvertError {
    Money(recon_core::MoneyError),
    /// The currency column of an amount holds no known currency.
    Currency(recon_core::MoneyError),
    Other(String),
}

impl ConvertError {
    pub(crate) fn at(
        self,
        location: Location,
        column: &str,
        currency_column: Option<&str>,
    ) -> ConnectorError {
        match self {
            ConvertError::Currency(source) => ConnectorError::Malformed {
                location,
                message: format!(
                    "column `{}` (currency of `{column}`): {source}",
                    currency_column.unwrap_or("currency")
                ),
            },
            ConvertError::Money(source) => ConnectorError::Malformed {
                location,
                message: format!("column `{column}`: {source}"),
            },
            ConvertError::Other(message) => ConnectorError::Malformed {
                location,
                message: format!("column `{column}`: {message}"),
            },
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
    fn parse(&mut self, text: &str) -> Result<Currency, ConvertError> {
        if let Some(c) = self.parsed {
            if self.text == text {
                return Ok(c);
            }
        }
        let c = Currency::parse(text).map_err(ConvertError::Money)?;
        self.text.clear();
        self.text.push_str(text);
        self.parsed = Some(c);
        Ok(c)
    }
}

pub(crate) fn convert<'a>(
    cell: Cell<'a>,
    kind: FieldKind,
    currency: Option<&str>,
    amount_format: AmountFormat,
    cache: &mut CurrencyCache,
) -> Result<ValueRef<'a>, ConvertError> {
    let text = match cell {
        Cell::Null => return Ok(ValueRef::Null),
        Cell::Text("") => return Ok(ValueRef::Null),
        Cell::Text(t) => t,
    };
    Ok(match kind {
        FieldKind::Text => ValueRef::Text(text),
        FieldKind::Integer => ValueRef::Integer(text.trim().parse().map_err(|_| {
            ConvertError::Other(format!("`{text}` is not a whole number"))
        })?),
        FieldKind::Currency => ValueRef::Currency(cache.parse(text)?),
        FieldKind::Money => {
            let code = currency.unwrap_or("");
            if code.is_empty() {
                return Err(ConvertError::Other(format!(
                    "amount `{text}` has no currency; fill the currency column"
                )));
            }
            let c = cache.parse(code).map_err(|e| match e {
                ConvertError::Money(m) => ConvertError::Currency(m),
                other => other,
            })?;
            ValueRef::Money(
                match amount_format {
                    AmountFormat::Minor => Money::parse_minor(text, c),
                    AmountFormat::Major => Money::parse_major(text, c),
                }
                .map_err(ConvertError::Money)?,
            )
        }
        FieldKind::Timestamp => ValueRef::Timestamp(parse_timestamp(text).ok_or_else(|| {
            ConvertError::Other(format!(
                "`{text}` is not a timestamp; expected Unix seconds or RFC 3339 such as 2026-11-28T23:59:59Z"
            ))
        })?),
    })
}

/// Unix seconds, or RFC 3339 / ISO 8601 with an offset.
pub fn parse_timestamp(text: &str) -> Option<jiff::Timestamp> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        return jiff::Timestamp::from_second(t.parse().ok()?).ok();
    }
    t.parse::<jiff::Timestamp>().ok()
}
