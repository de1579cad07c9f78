//! Exact money: integer minor units plus an ISO 4217 currency.
//!
//! Amounts never pass through floating point. A decimal string such as
//! Shopify's `"29.99"` is parsed digit by digit into minor units using the
//! currency's ISO 4217 exponent (2 for USD, 0 for JPY, 3 for KWD), and
//! formatted back the same way.
//!
//! The canonical [`Money`] is always in ISO 4217 minor units. A provider
//! whose API counts some currencies in other units (Stripe counts ISK in
//! hundredths although ISO 4217 gives it no decimals, and MGA in whole
//! ariary although ISO 4217 gives it two) declares those exceptions in a
//! [`MinorUnits`] table, and converts its integers with
//! [`MinorUnits::to_money`], which is exact or an error, never a rounding.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An ISO 4217 currency code, stored as three upper-case ASCII letters.
///
/// Only codes listed in the ISO 4217 table (see [`Currency::exponent`]) can be
/// constructed, so every `Currency` knows its number of minor-unit digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency([u8; 3]);

/// ISO 4217 active codes with a non-2 exponent. Every other listed code in
/// [`TWO_DECIMAL`] has two decimals. Source: ISO 4217 list one (2024). This
/// is the exponent of decimal text (Shopify's and HubSpot's amounts, ledger
/// NUMERIC columns, export files). It is not Stripe's table of API minor
/// units, which differs for ISK and MGA: see [`MinorUnits`].
const ZERO_DECIMAL: &[&str] = &[
    "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND",
    "VUV", "XAF", "XOF", "XPF",
];
const THREE_DECIMAL: &[&str] = &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];
const FOUR_DECIMAL: &[&str] = &["CLF", "UYW"];
const TWO_DECIMAL: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT",
    "BGN", "BMD", "BND", "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF",
    "CHE", "CHF", "CHW", "CNY", "COP", "COU", "CRC", "CUP", "CVE", "CZK", "DKK", "DOP", "DZD",
    "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GTQ", "GYD",
    "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IRR", "JMD", "KES", "KGS", "KHR", "KPW",
    "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT",
    "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK",
    "NPR", "NZD", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "QAR", "RON", "RSD", "RUB", "SAR",
    "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP",
    "SZL", "THB", "TJS", "TMT", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "USD", "USN", "UYU",
    "UZS", "VED", "VES", "WST", "XCD", "XCG", "YER", "ZAR", "ZMW", "ZWG",
];

const NOT_A_CURRENCY: u8 = u8::MAX;

const fn table_index(a: u8, b: u8, c: u8) -> usize {
    ((a - b'A') as usize) * 26 * 26 + ((b - b'A') as usize) * 26 + (c - b'A') as usize
}

/// Exponent of every three-letter code, indexed by [`table_index`]: one
/// byte read per lookup instead of a string search, because every amount of
/// a ten-million-row export is parsed with its currency.
static EXPONENTS: [u8; 26 * 26 * 26] = build_exponents();

const fn build_exponents() -> [u8; 26 * 26 * 26] {
    let mut table = [NOT_A_CURRENCY; 26 * 26 * 26];
    let lists: [(&[&str], u8); 4] = [
        (TWO_DECIMAL, 2),
        (ZERO_DECIMAL, 0),
        (THREE_DECIMAL, 3),
        (FOUR_DECIMAL, 4),
    ];
    let mut l = 0;
    while l < lists.len() {
        let (codes, exponent) = lists[l];
        let mut i = 0;
        while i < codes.len() {
            let b = codes[i].as_bytes();
            table[table_index(b[0], b[1], b[2])] = exponent;
            i += 1;
        }
        l += 1;
    }
    table
}

impl Currency {
    /// Parses a currency code, case-insensitively (`usd`, as Stripe writes
    /// it, and `USD`, as Shopify does, are the same currency).
    pub fn parse(code: &str) -> Result<Currency, MoneyError> {
        let bytes = code.trim().as_bytes();
        if bytes.len() != 3 || !bytes.iter().all(u8::is_ascii_alphabetic) {
            return Err(MoneyError::UnknownCurrency(code.to_string()));
        }
        let upper = [
            bytes[0].to_ascii_uppercase(),
            bytes[1].to_ascii_uppercase(),
            bytes[2].to_ascii_uppercase(),
        ];
        let c = Currency(upper);
        if c.lookup_exponent().is_none() {
            return Err(MoneyError::UnknownCurrency(code.to_string()));
        }
        Ok(c)
    }

    fn lookup_exponent(&self) -> Option<u32> {
        let [a, b, c] = self.0;
        match EXPONENTS[table_index(a, b, c)] {
            NOT_A_CURRENCY => None,
            e => Some(u32::from(e)),
        }
    }

    /// Number of digits after the decimal point in the major unit
    /// (USD 2, JPY 0, KWD 3).
    pub fn exponent(&self) -> u32 {
        // Construction guarantees the code is in the table.
        self.lookup_exponent().unwrap_or(2)
    }

    /// A dense number below 17,576 for this code, for compact storage.
    pub fn to_index(&self) -> u16 {
        let [a, b, c] = self.0;
        table_index(a, b, c) as u16
    }

    /// The currency of a number made by [`Currency::to_index`].
    pub fn from_index(index: u16) -> Option<Currency> {
        let i = usize::from(index);
        if i >= EXPONENTS.len() || EXPONENTS[i] == NOT_A_CURRENCY {
            return None;
        }
        let letter = |n: usize| b'A' + (n % 26) as u8;
        Some(Currency([letter(i / 676), letter(i / 26), letter(i)]))
    }

    /// The upper-case three-letter code.
    pub fn code(&self) -> &str {
        // Construction guarantees ASCII.
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({})", self.code())
    }
}

impl FromStr for Currency {
    type Err = MoneyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Currency::parse(s)
    }
}

impl Serialize for Currency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Currency::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// An amount of money in integer minor units (cents, yen, fils).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Money {
    /// Amount in the currency's minor unit; negative for refunds and credits.
    pub minor: i64,
    /// The currency the amount is in.
    pub currency: Currency,
}

/// Why an amount or currency could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// The code is not an ISO 4217 currency.
    #[error("unknown currency code `{0}`; expected an ISO 4217 code such as USD, EUR, JPY")]
    UnknownCurrency(String),
    /// The text is not a decimal number.
    #[error("`{0}` is not a number; expected digits with an optional sign and decimal point, such as 29.99 or -5")]
    NotANumber(String),
    /// A decimal where whole minor units were expected.
    #[error("`{0}` is a decimal, but this side's amounts are read as whole minor units (2999 for 29.99 USD); if it writes decimal amounts, set its amount format to major")]
    NotMinorUnits(String),
    /// More significant decimals than the currency has.
    #[error("`{amount}` has more decimal places than {currency} allows ({exponent}); amounts are never rounded")]
    TooManyDecimals {
        /// The text as given.
        amount: String,
        /// The currency.
        currency: Currency,
        /// Decimals the currency allows.
        exponent: u32,
    },
    /// Does not fit in 64-bit minor units.
    #[error("`{0}` is too large to represent in minor units")]
    Overflow(String),
    /// A provider's integer amount that is not a whole number of ISO 4217
    /// minor units (Stripe ISK `10050` is 100.50 ISK; ISK has no decimals).
    #[error("`{amount}` in {provider}'s {currency} units ({provider_exponent} decimals) is {major} {currency}, which has more decimal places than {currency} allows ({exponent}); amounts are never rounded")]
    NotExact {
        /// The provider's integer as given.
        amount: i64,
        /// Who counts in these units (`Stripe`).
        provider: &'static str,
        /// The provider's exponent for this currency.
        provider_exponent: u32,
        /// The amount in major units, exactly.
        major: String,
        /// The currency.
        currency: Currency,
        /// ISO 4217 decimals of the currency.
        exponent: u32,
    },
}

/// One provider's minor units for the integer amounts of its API, where
/// they differ from ISO 4217. Every code not listed uses its ISO 4217
/// exponent ([`Currency::exponent`]).
///
/// Connectors of APIs that write decimal text in major units (Shopify's
/// `"29.99"`, HubSpot's `amount`) need no table: ISO 4217 applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinorUnits {
    /// Who counts in these units, for messages (`Stripe`).
    pub provider: &'static str,
    /// `(code, exponent)` of every currency whose API exponent is the
    /// provider's own (upper-case codes). Listing a code whose exponent
    /// equals ISO 4217's is allowed and documents the provider's rule.
    pub exponents: &'static [(&'static str, u32)],
}

impl MinorUnits {
    /// ISO 4217 itself: no exceptions.
    pub const ISO_4217: MinorUnits = MinorUnits {
        provider: "ISO 4217",
        exponents: &[],
    };

    /// The provider's exponent for a currency.
    pub fn exponent(&self, currency: Currency) -> u32 {
        self.exponents
            .iter()
            .find(|(code, _)| code.as_bytes() == currency.0)
            .map_or_else(|| currency.exponent(), |&(_, e)| e)
    }

    /// Converts a provider's integer amount into canonical ISO 4217 minor
    /// units, exactly: Stripe ISK `10000` is 100 ISK (`100`), Stripe MGA
    /// `500` is 500 MGA (`50000`). An amount that would need rounding
    /// (Stripe ISK `10050`, 100.50 ISK) is [`MoneyError::NotExact`], and
    /// one that no longer fits in 64 bits is [`MoneyError::Overflow`].
    pub fn to_money(&self, amount: i64, currency: Currency) -> Result<Money, MoneyError> {
        let provider = self.exponent(currency);
        let iso = currency.exponent();
        let overflow = || MoneyError::Overflow(amount.to_string());
        let minor = if provider > iso {
            let scale = 10i64.checked_pow(provider - iso).ok_or_else(overflow)?;
            if amount % scale != 0 {
                return Err(MoneyError::NotExact {
                    amount,
                    provider: self.provider,
                    provider_exponent: provider,
                    major: format_with_exponent(i128::from(amount), provider),
                    currency,
                    exponent: iso,
                });
            }
            amount / scale
        } else {
            10i64
                .checked_pow(iso - provider)
                .and_then(|scale| amount.checked_mul(scale))
                .ok_or_else(overflow)?
        };
        Ok(Money { minor, currency })
    }

    /// The provider's integer for a canonical amount (the inverse of
    /// [`MinorUnits::to_money`]): 100 ISK is Stripe `10000`. Exact or an
    /// error, as there.
    pub fn from_money(&self, money: Money) -> Result<i64, MoneyError> {
        let provider = self.exponent(money.currency);
        let iso = money.currency.exponent();
        let overflow = || MoneyError::Overflow(money.to_major_string());
        if provider >= iso {
            10i64
                .checked_pow(provider - iso)
                .and_then(|scale| money.minor.checked_mul(scale))
                .ok_or_else(overflow)
        } else {
            let scale = 10i64.checked_pow(iso - provider).ok_or_else(overflow)?;
            if money.minor % scale != 0 {
                return Err(MoneyError::TooManyDecimals {
                    amount: money.to_major_string(),
                    currency: money.currency,
                    exponent: provider,
                });
            }
            Ok(money.minor / scale)
        }
    }
}

impl Money {
    /// Builds an amount from minor units.
    pub fn from_minor(minor: i64, currency: Currency) -> Money {
        Money { minor, currency }
    }

    /// Parses an integer count of minor units, such as Stripe's `2999`.
    #[inline]
    pub fn parse_minor(text: &str, currency: Currency) -> Result<Money, MoneyError> {
        if let Some(minor) = plain_integer(text.as_bytes()) {
            return Ok(Money { minor, currency });
        }
        let t = text.trim();
        let minor: i64 = t.parse().map_err(|_| {
            // Only a well-formed integer (one optional sign, then digits)
            // can be too large; `-` and `--5` are not numbers at all.
            let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                MoneyError::Overflow(text.to_string())
            } else if looks_decimal(t) {
                MoneyError::NotMinorUnits(text.to_string())
            } else {
                MoneyError::NotANumber(text.to_string())
            }
        })?;
        Ok(Money { minor, currency })
    }

    /// Parses a decimal string in major units, such as Shopify's `"29.99"`,
    /// exactly. Trailing zeros past the currency's exponent are accepted
    /// (`"500.0"` JPY is 500); a non-zero digit past it is an error.
    pub fn parse_major(text: &str, currency: Currency) -> Result<Money, MoneyError> {
        let t = text.trim();
        let (negative, digits) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let (int_part, frac_part) = match digits.split_once('.') {
            Some((i, f)) => (i, f),
            None => (digits, ""),
        };
        let nan = || MoneyError::NotANumber(text.to_string());
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(nan());
        }
        if !int_part.bytes().all(|b| b.is_ascii_digit())
            || !frac_part.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(nan());
        }
        let exponent = currency.exponent() as usize;
        if frac_part.len() > exponent && frac_part[exponent..].bytes().any(|b| b != b'0') {
            return Err(MoneyError::TooManyDecimals {
                amount: text.to_string(),
                currency,
                exponent: exponent as u32,
            });
        }
        let overflow = || MoneyError::Overflow(text.to_string());
        let mut minor: i64 = 0;
        let frac_digits = frac_part.as_bytes().iter().take(exponent);
        for &b in int_part.as_bytes().iter().chain(frac_digits) {
            minor = minor
                .checked_mul(10)
                .and_then(|m| m.checked_add(i64::from(b - b'0')))
                .ok_or_else(overflow)?;
        }
        for _ in frac_part.len().min(exponent)..exponent {
            minor = minor.checked_mul(10).ok_or_else(overflow)?;
        }
        Ok(Money {
            minor: if negative { -minor } else { minor },
            currency,
        })
    }

    /// Formats in major units with exactly the currency's decimals
    /// (`2999` USD is `29.99`, `500` JPY is `500`, `-1234` KWD is `-1.234`).
    pub fn to_major_string(&self) -> String {
        format_minor(i128::from(self.minor), self.currency)
    }

    /// [`to_major_string`](Self::to_major_string) into `w`, without a
    /// string of its own (and in 64-bit arithmetic: a report writes one
    /// per money cell).
    pub fn write_major<W: fmt::Write + ?Sized>(&self, w: &mut W) -> fmt::Result {
        let sign = if self.minor < 0 { "-" } else { "" };
        let abs = self.minor.unsigned_abs();
        let exponent = self.currency.exponent();
        if exponent == 0 {
            return write!(w, "{sign}{abs}");
        }
        let scale = 10u64.pow(exponent);
        write!(
            w,
            "{sign}{}.{:0width$}",
            abs / scale,
            abs % scale,
            width = exponent as usize
        )
    }
}

/// `-12.50`, `29.99`: a sign, digits, one point, digits.
fn looks_decimal(t: &str) -> bool {
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    match digits.split_once('.') {
        Some((i, f)) => {
            !(i.is_empty() && f.is_empty())
                && i.bytes().all(|b| b.is_ascii_digit())
                && f.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// Formats a (possibly summed) minor-unit amount in major units.
pub fn format_minor(minor: i128, currency: Currency) -> String {
    format_with_exponent(minor, currency.exponent())
}

fn format_with_exponent(minor: i128, exponent: u32) -> String {
    let negative = minor < 0;
    let abs = minor.unsigned_abs();
    if exponent == 0 {
        return format!("{}{}", if negative { "-" } else { "" }, abs);
    }
    let scale = 10u128.pow(exponent);
    format!(
        "{}{}.{:0width$}",
        if negative { "-" } else { "" },
        abs / scale,
        abs % scale,
        width = exponent as usize
    )
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.to_major_string(), self.currency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cur(c: &str) -> Currency {
        Currency::parse(c).unwrap()
    }

    #[test]
    fn every_listed_code_has_its_exponent() {
        let lists: [(&[&str], u32); 4] = [
            (TWO_DECIMAL, 2),
            (ZERO_DECIMAL, 0),
            (THREE_DECIMAL, 3),
            (FOUR_DECIMAL, 4),
        ];
        let mut count = 0;
        for (codes, exponent) in lists {
            for code in codes {
                assert_eq!(cur(code).exponent(), exponent, "{code}");
                count += 1;
            }
        }
        let known = (0..26 * 26 * 26)
            .filter(|&i| EXPONENTS[i] != NOT_A_CURRENCY)
            .count();
        assert_eq!(known, count, "no code listed twice");
        assert_eq!(cur("jpy").exponent(), 0);
        for code in ["USD", "JPY", "KWD", "AED", "ZWG"] {
            assert_eq!(Currency::from_index(cur(code).to_index()), Some(cur(code)));
        }
        assert_eq!(Currency::from_index(0), None, "AAA is not a currency");
        assert_eq!(Currency::from_index(u16::MAX), None);
        assert_eq!(cur("KWD").exponent(), 3);
    }

    #[test]
    fn parses_major_units_exactly() {
        assert_eq!(Money::parse_major("29.99", cur("USD")).unwrap().minor, 2999);
        assert_eq!(Money::parse_major("500", cur("JPY")).unwrap().minor, 500);
        assert_eq!(Money::parse_major("500.0", cur("JPY")).unwrap().minor, 500);
        assert_eq!(Money::parse_major("1.234", cur("KWD")).unwrap().minor, 1234);
        assert_eq!(Money::parse_major("0.100", cur("KWD")).unwrap().minor, 100);
        assert_eq!(Money::parse_major("0.10", cur("usd")).unwrap().minor, 10);
        assert_eq!(
            Money::parse_major("-12.5", cur("EUR")).unwrap().minor,
            -1250
        );
        assert_eq!(Money::parse_major(".5", cur("EUR")).unwrap().minor, 50);
        assert_eq!(Money::parse_major("7.", cur("EUR")).unwrap().minor, 700);
        // 0.1 + 0.2 style values that float arithmetic gets wrong.
        assert_eq!(Money::parse_major("0.29", cur("USD")).unwrap().minor, 29);
        assert_eq!(Money::parse_major("1.15", cur("USD")).unwrap().minor, 115);
    }

    #[test]
    fn rejects_bad_amounts_with_clear_errors() {
        let e = Money::parse_major("1.234", cur("USD")).unwrap_err();
        assert!(matches!(e, MoneyError::TooManyDecimals { exponent: 2, .. }));
        assert!(e.to_string().contains("USD allows (2)"), "{e}");
        assert!(matches!(
            Money::parse_major("1.5", cur("JPY")),
            Err(MoneyError::TooManyDecimals { exponent: 0, .. })
        ));
        for bad in ["", "-", "abc", "1,5", "1.2.3", "1e5", "12 34"] {
            assert!(
                matches!(
                    Money::parse_major(bad, cur("USD")),
                    Err(MoneyError::NotANumber(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Money::parse_major("99999999999999999999", cur("USD")),
            Err(MoneyError::Overflow(_))
        ));
        let e = Money::parse_minor("12.5", cur("USD")).unwrap_err();
        assert!(matches!(e, MoneyError::NotMinorUnits(_)));
        assert!(e.to_string().contains("amount format to major"), "{e}");
        assert!(matches!(
            Money::parse_minor("12x", cur("USD")),
            Err(MoneyError::NotANumber(_))
        ));
        // A sign alone, or two signs, is not a number (it was once called
        // "too large"); only a well-formed integer can overflow.
        for bad in ["-", "+", "--5", "-+5", "5-", "1-2", ""] {
            let e = Money::parse_minor(bad, cur("USD")).unwrap_err();
            assert!(matches!(e, MoneyError::NotANumber(_)), "{bad}: {e:?}");
            assert!(e.to_string().contains("is not a number"), "{e}");
        }
        for big in [
            "99999999999999999999",
            "-99999999999999999999",
            "+9223372036854775808",
        ] {
            assert!(
                matches!(
                    Money::parse_minor(big, cur("USD")),
                    Err(MoneyError::Overflow(_))
                ),
                "{big}"
            );
        }
        assert!(matches!(
            Money::parse_major("--5", cur("USD")),
            Err(MoneyError::NotANumber(_))
        ));
        let e = Currency::parse("XYZ").unwrap_err();
        assert!(e.to_string().contains("unknown currency code `XYZ`"));
        assert!(Currency::parse("US").is_err());
    }

    #[test]
    fn formats_by_exponent() {
        assert_eq!(
            Money::from_minor(2999, cur("usd")).to_major_string(),
            "29.99"
        );
        assert_eq!(Money::from_minor(5, cur("usd")).to_major_string(), "0.05");
        assert_eq!(Money::from_minor(-5, cur("usd")).to_major_string(), "-0.05");
        assert_eq!(Money::from_minor(500, cur("JPY")).to_major_string(), "500");
        assert_eq!(
            Money::from_minor(-1234, cur("KWD")).to_major_string(),
            "-1.234"
        );
        assert_eq!(
            format_minor(i128::from(i64::MAX) * 3, cur("USD")),
            "276701161105643274.21"
        );
    }

    #[test]
    fn parse_and_format_round_trip() {
        for (text, c) in [
            ("29.99", "USD"),
            ("500", "JPY"),
            ("-1.234", "KWD"),
            ("0.00", "EUR"),
        ] {
            let m = Money::parse_major(text, cur(c)).unwrap();
            assert_eq!(m.to_major_string(), text);
        }
    }

    /// A provider table with Stripe's two kinds of exception (a larger and a
    /// smaller exponent than ISO 4217) and one that agrees with ISO.
    const TEST_UNITS: MinorUnits = MinorUnits {
        provider: "Test",
        exponents: &[("ISK", 2), ("MGA", 0), ("HUF", 2)],
    };

    #[test]
    fn provider_units_convert_exactly_or_refuse() {
        // (code, provider amount, canonical minor units, major text)
        let cases: &[(&str, i64, i64, &str)] = &[
            ("ISK", 10000, 100, "100"),
            ("ISK", -500, -5, "-5"),
            ("MGA", 500, 50000, "500.00"),
            ("HUF", 12345, 12345, "123.45"),
            ("JPY", 500, 500, "500"),
            ("KWD", 1234, 1234, "1.234"),
            ("USD", 2999, 2999, "29.99"),
        ];
        for &(code, amount, minor, major) in cases {
            let m = TEST_UNITS.to_money(amount, cur(code)).unwrap();
            assert_eq!(m, Money::from_minor(minor, cur(code)), "{code} {amount}");
            assert_eq!(m.to_major_string(), major, "{code} {amount}");
            assert_eq!(TEST_UNITS.from_money(m).unwrap(), amount, "{code} back");
            // ISO 4217 itself changes nothing.
            assert_eq!(MinorUnits::ISO_4217.to_money(minor, cur(code)).unwrap(), m);
        }
        assert_eq!(TEST_UNITS.exponent(cur("isk")), 2);
        assert_eq!(TEST_UNITS.exponent(cur("KWD")), 3, "unlisted codes use ISO");

        let e = TEST_UNITS.to_money(10050, cur("ISK")).unwrap_err();
        assert!(
            matches!(
                e,
                MoneyError::NotExact {
                    amount: 10050,
                    exponent: 0,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("`10050` in Test's ISK units (2 decimals) is 100.50 ISK")
                && text.contains("never rounded"),
            "{text}"
        );
        assert!(matches!(
            TEST_UNITS.to_money(i64::MAX, cur("MGA")),
            Err(MoneyError::Overflow(_))
        ));
        assert!(matches!(
            TEST_UNITS.from_money(Money::from_minor(12345, cur("MGA"))),
            Err(MoneyError::TooManyDecimals { exponent: 0, .. })
        ));
        assert!(matches!(
            TEST_UNITS.from_money(Money::from_minor(i64::MAX, cur("ISK"))),
            Err(MoneyError::Overflow(_))
        ));
    }
}

/// The common form of an integer, read without the general parser: an
/// optional `-`, then 1 to 18 ASCII digits (which never overflow an
/// `i64`). Anything else (spaces, `+`, 19 digits or more) is `None`, left
/// to `str::parse`, which reads every form this reads to the same value.
#[inline]
pub fn plain_integer(b: &[u8]) -> Option<i64> {
    let (negative, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, b),
    };
    // At most 18 digits: never an overflow.
    let v = crate::parse::ascii_digits(digits)? as i64;
    Some(if negative { -v } else { v })
}

/// [`plain_integer`] for amounts in minor units, whose common lengths
/// (four to eight digits) are read without a loop
/// ([`crate::parse::amount_digits`]); the same values. (Its sign rule is
/// [`plain_integer`]'s, written again: shared through a generic helper,
/// the file reader's code moved, and its text reads of the timestamps
/// bench were 0.5-1 ns a row slower in 6 interleaved rounds.)
#[inline]
pub fn plain_amount(b: &[u8]) -> Option<i64> {
    let (negative, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, b),
    };
    let v = crate::parse::amount_digits(digits)? as i64;
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod plain_integer_tests {
    use super::plain_integer;
    use proptest::prelude::*;

    #[test]
    fn reads_the_common_form_and_leaves_the_rest() {
        assert_eq!(plain_integer(b"2999"), Some(2999));
        assert_eq!(plain_integer(b"-5"), Some(-5));
        assert_eq!(plain_integer(b"-0"), Some(0));
        assert_eq!(plain_integer(b"007"), Some(7));
        assert_eq!(
            plain_integer(b"999999999999999999"),
            Some(999_999_999_999_999_999)
        );
        for other in [
            &b""[..],
            b"-",
            b"+5",
            b" 5",
            b"5 ",
            b"1.5",
            b"--5",
            b"5-",
            b"9223372036854775807",
            b"1e3",
            b"\xd9\xa3",
        ] {
            assert_eq!(plain_integer(other), None, "{other:?}");
        }
    }

    proptest! {
        /// Whatever it reads, `str::parse` reads to the same value.
        #[test]
        fn agrees_with_str_parse(
            text in "-?[0-9]{0,20}|[-+ 0-9a.]{0,6}|-?[0-9]{0,9}[/:0-9 a\\x00\u{e9}][0-9]{0,9}"
        ) {
            if let Some(v) = plain_integer(text.as_bytes()) {
                prop_assert_eq!(text.parse::<i64>().ok(), Some(v));
            }
        }

        #[test]
        fn reads_every_i64_of_at_most_18_digits(v in -999_999_999_999_999_999i64..=999_999_999_999_999_999) {
            prop_assert_eq!(plain_integer(v.to_string().as_bytes()), Some(v));
        }

        /// Amounts read as every integer is (four to eight digits without
        /// a loop): the same value or none, for the texts above and for
        /// one to nine digits with a byte of any value at any place.
        #[test]
        fn amounts_read_as_plain_integers_do(
            text in "-?[0-9]{0,20}|[-+ 0-9a.]{0,6}|-?[0-9]{0,9}[/:0-9 a\\x00\u{e9}][0-9]{0,9}",
            digits in "-?[0-9]{1,9}", at in 0usize..10, byte in any::<u8>(),
        ) {
            prop_assert_eq!(super::plain_amount(text.as_bytes()), plain_integer(text.as_bytes()), "{:?}", text);
            let mut b = digits.into_bytes();
            let at = at % b.len();
            prop_assert_eq!(super::plain_amount(&b), plain_integer(&b));
            b[at] = byte;
            prop_assert_eq!(super::plain_amount(&b), plain_integer(&b), "{:?}", b);
        }
    }
}
