//! Compact text cells for the key index: short values a field repeats
//! (`succeeded`, `pending`) stored as a code of one or two bytes, and
//! digit-only text (Unix seconds kept as text, numeric IDs) as the number.
//!
//! Why: in the bench pair's 10M-row source, a status cell took 10 bytes and
//! a `created` kept as text 11, of about 56 bytes per record; coded, they
//! take 1 and 5. The index is the run's peak memory, so this is the
//! difference between 0.20x and 0.15x of DuckDB's.
//!
//! The encoding must stay a function of the value alone, because the
//! engine compares a target record with the source's byte for byte: equal
//! bytes must mean equal values and the reverse. So a value gets its code
//! the first time any batch sees it, under the dictionary's lock, and keeps
//! it; once [`MAX_CODES`] values have codes, every other value is stored
//! inline, forever. A batch keeps the codes it learnt in a map of its own
//! (no lock on the hot path); when the dictionary is full it copies the
//! whole dictionary once, so that a value missing from its map is then
//! known to be inline without asking.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use foldhash::fast::FixedState;

/// Values with codes, at most; codes below 32 take one byte, the rest two.
pub(crate) const MAX_CODES: u32 = 4096;
/// Longer values are never coded (a code would save little, and a
/// free-text field would fill the dictionary with them).
const MAX_CODED_LEN: usize = 32;

/// The codes of one engine's text values, shared by every batch that
/// encodes records for it (they may be on other threads).
#[derive(Default)]
pub(crate) struct TextDict {
    inner: Mutex<DictInner>,
}

#[derive(Default)]
struct DictInner {
    codes: HashMap<Box<str>, u32, FixedState>,
    values: Vec<Box<str>>,
}

impl std::fmt::Debug for TextDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.lock().values.len();
        f.debug_struct("TextDict").field("codes", &n).finish()
    }
}

impl TextDict {
    fn lock(&self) -> std::sync::MutexGuard<'_, DictInner> {
        // The map is consistent between statements: a panic elsewhere
        // cannot leave it half-updated.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `code`; panics on a code this dictionary never gave.
    pub(crate) fn value(&self, code: u32) -> String {
        self.lock().values[code as usize].to_string()
    }

    /// Values with codes so far.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().values.len()
    }
}

/// How a text value is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextForm {
    /// Canonical digits (no leading zero but `0` itself, at most 18): the number.
    Digits(u64),
    /// A dictionary code.
    Code(u32),
    /// The bytes themselves.
    Inline,
}

/// The number that canonical digit-only text spells: `Some` exactly when
/// printing the number gives back the same text (no leading zero but `0`
/// itself, at most 18 digits).
#[inline]
pub(crate) fn canonical_digits(s: &[u8]) -> Option<u64> {
    if s.len() > 1 && s[0] == b'0' {
        return None;
    }
    recon_core::parse::ascii_digits(s)
}

/// One batch's view of a [`TextDict`]: the codes it has learnt.
pub(crate) struct TextCodec {
    dict: Arc<TextDict>,
    known: HashMap<Box<[u8]>, u32, FixedState>,
    /// The dictionary was full when `known` copied it: `known` is all of it.
    complete: bool,
    /// Recent coded values by a cheap hash: a hit costs two word compares
    /// instead of a map lookup (which cost the reader thread 6% of a
    /// 10M-row diff).
    recent: Box<[Recent; RECENT]>,
}

const RECENT: usize = 64;

#[derive(Clone, Copy)]
struct Recent {
    len: u8,
    code: u32,
    bytes: [u8; MAX_CODED_LEN],
}

fn recent_slot(b: &[u8]) -> usize {
    let n = b.len();
    (n.wrapping_mul(29)
        ^ usize::from(b[0]).wrapping_mul(7)
        ^ usize::from(b[n - 1])
        ^ usize::from(b[n / 2]) << 2)
        % RECENT
}

/// `a == b` for slices up to [`MAX_CODED_LEN`] long, without a call: two
/// overlapping words for 8 to 16 bytes, two overlapping half-words for 4
/// to 7, each byte for 1 to 3 (a three-letter currency code compared by
/// the slices was a call to `memcmp` per cell).
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if b.len() != n {
        return false;
    }
    let word =
        |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or_default());
    let half =
        |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or_default());
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        _ => a == b,
    }
}

impl TextCodec {
    pub(crate) fn new(dict: Arc<TextDict>) -> TextCodec {
        TextCodec {
            dict,
            known: HashMap::default(),
            complete: false,
            recent: Box::new(
                [Recent {
                    len: 0,
                    code: 0,
                    bytes: [0; MAX_CODED_LEN],
                }; RECENT],
            ),
        }
    }

    /// How `s` is stored, giving it a code if it is new and there is room.
    #[inline]
    pub(crate) fn form(&mut self, s: &str) -> TextForm {
        let b = s.as_bytes();
        if let Some(v) = canonical_digits(b) {
            return TextForm::Digits(v);
        }
        if b.is_empty() || b.len() > MAX_CODED_LEN {
            return TextForm::Inline;
        }
        let slot = recent_slot(b);
        let r = &self.recent[slot];
        if usize::from(r.len) == b.len() && same(&r.bytes[..b.len()], b) {
            return TextForm::Code(r.code);
        }
        let form = match self.known.get(b) {
            Some(&code) => TextForm::Code(code),
            None if self.complete => return TextForm::Inline,
            None => self.learn(s),
        };
        if let TextForm::Code(code) = form {
            let r = &mut self.recent[slot];
            r.len = b.len() as u8;
            r.code = code;
            r.bytes[..b.len()].copy_from_slice(b);
        }
        form
    }

    #[cold]
    fn learn(&mut self, s: &str) -> TextForm {
        let mut d = self.dict.lock();
        let code = match d.codes.get(s) {
            Some(&code) => code,
            None if (d.values.len() as u32) < MAX_CODES => {
                let code = d.values.len() as u32;
                d.values.push(s.into());
                d.codes.insert(s.into(), code);
                code
            }
            None => {
                // Full for good: take every code once, then answer alone.
                for (v, &c) in &d.codes {
                    self.known.insert(v.as_bytes().into(), c);
                }
                self.complete = true;
                return TextForm::Inline;
            }
        };
        self.known.insert(s.as_bytes().into(), code);
        TextForm::Code(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_tells_every_difference_at_every_length() {
        for n in 0..=MAX_CODED_LEN + 2 {
            let a: Vec<u8> = (0..n).map(|i| b"usdjpy-succeeded_"[i % 17]).collect();
            assert!(same(&a, &a.clone()), "{n} equal bytes");
            for at in 0..n {
                for flip in [1u8, 0x20, 0x80] {
                    let mut b = a.clone();
                    b[at] ^= flip;
                    assert!(!same(&a, &b), "{n} bytes, byte {at} differs");
                }
            }
            if n > 0 {
                assert!(!same(&a, &a[..n - 1]), "{n} bytes against one fewer");
            }
        }
    }

    #[test]
    fn digits_are_canonical_only() {
        assert_eq!(canonical_digits(b"0"), Some(0));
        assert_eq!(canonical_digits(b"1793491200"), Some(1_793_491_200));
        assert_eq!(
            canonical_digits(b"999999999999999999"),
            Some(999_999_999_999_999_999)
        );
        for s in [
            &b""[..],
            b"00",
            b"0123",
            b"12a",
            b"-1",
            b"+1",
            b" 1",
            b"1.0",
            b"1234567890123456789",
        ] {
            assert_eq!(
                canonical_digits(s),
                None,
                "{:?}",
                String::from_utf8_lossy(s)
            );
        }
    }

    proptest::proptest! {
        /// The eight-at-a-time reading agrees with `str::parse` and the
        /// printed number, on digits and on near-digits (`/`, `:`, `?`
        /// and bytes that carry when 6 is added).
        #[test]
        fn digits_agree_with_parse(s in "([0-9]{1,20}|[0-9/:?\\xFA-\\xFF]{1,20})") {
            let canonical = s.parse::<u64>().ok().filter(|n| n.to_string() == s && s.len() <= 18);
            proptest::prop_assert_eq!(canonical_digits(s.as_bytes()), canonical);
        }
    }

    #[test]
    fn a_value_keeps_one_form_across_codecs_and_a_full_dictionary() {
        let dict = Arc::new(TextDict::default());
        let mut a = TextCodec::new(dict.clone());
        let mut b = TextCodec::new(dict.clone());
        assert_eq!(a.form("succeeded"), TextForm::Code(0));
        assert_eq!(b.form("pending"), TextForm::Code(1));
        assert_eq!(b.form("succeeded"), TextForm::Code(0));
        assert_eq!(a.form("pending"), TextForm::Code(1));
        // Digits with a leading zero are text like any other.
        assert_eq!(a.form("042"), TextForm::Code(2));
        assert_eq!(a.form("42"), TextForm::Digits(42));
        assert_eq!(a.form(&"x".repeat(33)), TextForm::Inline);
        // Fill the dictionary through `a`; `b` learns of the codes only
        // when it finds the dictionary full.
        for i in 3..MAX_CODES {
            assert_eq!(a.form(&format!("v{i}")), TextForm::Code(i));
        }
        assert_eq!(a.form("one too many"), TextForm::Inline);
        assert_eq!(b.form("one too many"), TextForm::Inline);
        assert_eq!(b.form("v7"), TextForm::Code(7));
        assert_eq!(b.form("another"), TextForm::Inline);
        assert_eq!(dict.len(), MAX_CODES as usize);
        assert_eq!(dict.value(7), "v7");
        // A codec made after the dictionary filled agrees as well.
        let mut c = TextCodec::new(dict.clone());
        assert_eq!(c.form("one too many"), TextForm::Inline);
        assert_eq!(
            c.form(&format!("v{}", MAX_CODES - 1)),
            TextForm::Code(MAX_CODES - 1)
        );
    }
}
