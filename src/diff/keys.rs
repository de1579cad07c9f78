//! External IDs as the key index stores them: `varint(tag)` then the key.
//!
//! IDs made of letters, digits, `_` and `-` (Stripe's `ch_3MqLi2Lk…`,
//! hex digests, UUIDs, numbers) are packed six bits a character, a quarter
//! smaller: the bench pair's `ch_` + 24 hex digits take 22 bytes instead of
//! 28, 57 MiB of a 10M-row source. Other IDs are kept as they are. The tag
//! is `2 len + 1` for a packed ID of `len` characters, `2 len` for `len`
//! bytes as they are.
//!
//! An ID has exactly one encoding, so encoded IDs are equal exactly when
//! the IDs are (the index compares and hashes them encoded). The six-bit
//! codes follow ASCII order, so two packed IDs sort by their packed bytes,
//! then by length (a shorter ID pads with zero bits); an ID packed and one
//! kept as it is are compared decoded.

use std::cmp::Ordering;

/// Packed IDs are at least this long (shorter ones would save nothing)...
const MIN_PACKED: usize = 4;
/// ...and at most this long, so that one decodes into a stack buffer.
pub(crate) const MAX_PACKED: usize = 64;

/// The six-bit code of each byte, in ASCII order; `0xFF` for the others.
const CODE: [u8; 256] = {
    let mut t = [0xFF; 256];
    let mut code = 0;
    let mut b = 0;
    while b < 128 {
        if b == b'-' as usize
            || b == b'_' as usize
            || (b >= b'0' as usize && b <= b'9' as usize)
            || (b >= b'A' as usize && b <= b'Z' as usize)
            || (b >= b'a' as usize && b <= b'z' as usize)
        {
            t[b] = code;
            code += 1;
        }
        b += 1;
    }
    assert!(code == 64);
    t
};

/// The byte of each six-bit code.
const SYMBOL: [u8; 64] = {
    let mut s = [0; 64];
    let mut b = 0;
    while b < 128 {
        if CODE[b] != 0xFF {
            s[CODE[b] as usize] = b as u8;
        }
        b += 1;
    }
    s
};

#[inline]
fn packed_len(chars: usize) -> usize {
    (chars * 6).div_ceil(8)
}

/// Appends the encoded `key` to `buf`.
#[inline]
pub(crate) fn write_key(buf: &mut Vec<u8>, key: &[u8]) {
    let n = key.len();
    if (MIN_PACKED..=MAX_PACKED).contains(&n) {
        // The tag and four characters into three bytes, on the stack, then
        // one copy (a copy per group of three was a tenth of a 10M-row
        // diff), of the whole buffer: a copy of a length known when
        // compiling is a few moves, where the packed length's was a call
        // to memcpy (3% of a 10M-row diff's CPU); the rest is cut off.
        let mut out = [0u8; 2 + MAX_PACKED / 4 * 3];
        let tag = ((n as u16) << 1) | 1;
        let mut i = if tag < 0x80 {
            out[0] = tag as u8;
            1
        } else {
            out[0] = (tag as u8) | 0x80;
            out[1] = (tag >> 7) as u8;
            2
        };
        let head = i;
        let mut bad = 0u8;
        let chunks = key.chunks_exact(4);
        let tail = chunks.remainder();
        for c in chunks {
            let [a, b, c, d] = [c[0], c[1], c[2], c[3]].map(|b| CODE[usize::from(b)]);
            // An invalid byte (code 0xFF) spoils the group's bits, but the
            // group is then dropped with the rest.
            bad |= a | b | c | d;
            let v =
                (u32::from(a) << 18) | (u32::from(b) << 12) | (u32::from(c) << 6) | u32::from(d);
            out[i..i + 3].copy_from_slice(&v.to_be_bytes()[1..]);
            i += 3;
        }
        if !tail.is_empty() {
            // A short last group pads with zero bits.
            let mut v = 0u32;
            for j in 0..4 {
                let c = tail.get(j).map_or(0, |&b| CODE[usize::from(b)]);
                bad |= c;
                v = (v << 6) | u32::from(c & 63);
            }
            out[i..i + 3].copy_from_slice(&v.to_be_bytes()[1..]);
        }
        if bad & 0xC0 == 0 {
            let end = buf.len() + head + packed_len(n);
            buf.extend_from_slice(&out);
            buf.truncate(end);
            return;
        }
    }
    super::arena::write_varint(buf, (n as u64) << 1);
    buf.extend_from_slice(key);
}

/// An encoded key, split.
enum Key<'a> {
    Plain(&'a [u8]),
    Packed { chars: usize, bits: &'a [u8] },
}

#[inline]
fn parse(enc: &[u8]) -> Key<'_> {
    let (tag, at) = super::arena::read_varint(enc, 0);
    let len = (tag >> 1) as usize;
    if tag & 1 == 1 {
        Key::Packed {
            chars: len,
            bits: &enc[at..at + packed_len(len)],
        }
    } else {
        Key::Plain(&enc[at..at + len])
    }
}

/// Where the key encoded at `pos` of `buf` ends.
#[inline]
pub(crate) fn key_end(buf: &[u8], pos: usize) -> usize {
    let (tag, at) = super::arena::read_varint(buf, pos);
    let len = (tag >> 1) as usize;
    at + if tag & 1 == 1 { packed_len(len) } else { len }
}

fn unpack(chars: usize, bits: &[u8], out: &mut [u8; MAX_PACKED]) {
    for (i, group) in bits.chunks(3).enumerate() {
        let mut b = [0u8; 4];
        b[1..1 + group.len()].copy_from_slice(group);
        let v = u32::from_be_bytes(b);
        for j in 0..4 {
            let at = i * 4 + j;
            if at < chars {
                out[at] = SYMBOL[((v >> (18 - 6 * j)) & 63) as usize];
            }
        }
    }
}

/// Whether the key is packed.
#[inline]
pub(crate) fn is_packed(enc: &[u8]) -> bool {
    matches!(parse(enc), Key::Packed { .. })
}

/// The bytes after the tag: the key itself, or its packed bits. Among keys
/// of one form these sort as the keys do, but for packed keys that differ
/// only in a trailing `-` ([`cmp_keys`] then looks at their lengths).
#[inline]
pub(crate) fn payload(enc: &[u8]) -> &[u8] {
    match parse(enc) {
        Key::Plain(b) => b,
        Key::Packed { bits, .. } => bits,
    }
}

/// Calls `f` with the key's bytes (decoded on the stack when packed).
pub(crate) fn with_key<R>(enc: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    match parse(enc) {
        Key::Plain(b) => f(b),
        Key::Packed { chars, bits } => {
            let mut out = [0u8; MAX_PACKED];
            unpack(chars, bits, &mut out);
            f(&out[..chars])
        }
    }
}

/// Calls `f` with the key as text (decoded on the stack when packed).
pub(crate) fn with_key_str<R>(enc: &[u8], f: impl FnOnce(&str) -> R) -> R {
    // Only `&str`s are ever encoded, and packing keeps ASCII: checked, not
    // scanned in lossy chunks (a tenth of a 200,000-gap report phase's key
    // work), the lossy form only should that ever not hold.
    with_key(enc, |b| match std::str::from_utf8(b) {
        Ok(k) => f(k),
        Err(_) => f(&String::from_utf8_lossy(b)),
    })
}

/// The key, as text.
pub(crate) fn key_string(enc: &[u8]) -> String {
    with_key_str(enc, str::to_owned)
}

/// The keys' order, as their text would sort.
pub(crate) fn cmp_keys(a: &[u8], b: &[u8]) -> Ordering {
    match (parse(a), parse(b)) {
        (Key::Plain(x), Key::Plain(y)) => x.cmp(y),
        (Key::Packed { chars: m, bits: x }, Key::Packed { chars: n, bits: y }) => {
            x.cmp(y).then(m.cmp(&n))
        }
        _ => with_key(a, |x| with_key(b, |y| x.cmp(y))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc(key: &str) -> Vec<u8> {
        let mut buf = Vec::new();
        write_key(&mut buf, key.as_bytes());
        assert_eq!(key_end(&buf, 0), buf.len(), "{key:?}");
        buf
    }

    #[test]
    fn stripe_like_ids_pack_a_quarter_smaller() {
        assert_eq!(enc("ch_0123456789abcdef01234567").len(), 1 + 21);
        assert_eq!(enc("ch_3MqLi2LkdIwHu7ix0snN0B15").len(), 1 + 21);
        assert_eq!(enc("550e8400-e29b-41d4-a716-446655440000").len(), 1 + 27);
        // Kept as they are: too short, a character outside the alphabet, too long.
        assert_eq!(enc("abc").len(), 1 + 3);
        assert_eq!(enc("gid://shopify/Order/1").len(), 1 + 21);
        assert_eq!(enc(&"a".repeat(65)).len(), 2 + 65);
        assert_eq!(key_string(&enc(&"a".repeat(65))), "a".repeat(65));
    }

    /// The encoding `write_key` is specified by: `varint(tag)`, then the
    /// packed bits or the bytes (written here the slow way).
    fn reference(key: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let packable = key.iter().all(|&b| CODE[usize::from(b)] != 0xFF);
        if (MIN_PACKED..=MAX_PACKED).contains(&key.len()) && packable {
            super::super::arena::write_varint(&mut out, ((key.len() as u64) << 1) | 1);
            let mut bits = vec![0u8; packed_len(key.len())];
            for (i, &b) in key.iter().enumerate() {
                for j in 0..6 {
                    if CODE[usize::from(b)] & (0x20 >> j) != 0 {
                        let at = i * 6 + j;
                        bits[at / 8] |= 0x80 >> (at % 8);
                    }
                }
            }
            out.extend(bits);
        } else {
            super::super::arena::write_varint(&mut out, (key.len() as u64) << 1);
            out.extend_from_slice(key);
        }
        out
    }

    #[test]
    fn every_length_is_written_after_what_the_buffer_holds_with_its_own_tag() {
        // Lengths across the packed range's ends and the one-byte tag's
        // (2 * 63 + 1 < 128 <= 2 * 64 + 1), each appended to a buffer that
        // already holds a record, with spare capacity and without.
        for n in 0..=70 {
            let key: Vec<u8> = (0..n).map(|i| b"z-_09AZa"[i % 8]).collect();
            let want = reference(&key);
            for spare in [0, 64] {
                let mut buf = Vec::with_capacity(3 + spare);
                buf.extend_from_slice(b"abc");
                write_key(&mut buf, &key);
                assert_eq!(&buf[..3], b"abc", "length {n}");
                assert_eq!(&buf[3..], &want[..], "length {n}");
                assert_eq!(key_end(&buf, 3), buf.len(), "length {n}");
                assert_eq!(key_string(&buf[3..]).as_bytes(), &key[..], "length {n}");
            }
        }
    }

    proptest! {
        /// Decoding gives the key back, equal encodings mean equal keys,
        /// and encoded keys sort as the keys do, packed or not.
        #[test]
        fn keys_round_trip_and_keep_their_order(
            a in "([-_0-9A-Za-z]{0,70}|[-_.0-9a-z~]{0,8}|\\PC{0,6})",
            b in "([-_0-9A-Za-z]{0,70}|[-_.0-9a-z~]{0,8}|\\PC{0,6})",
        ) {
            let (ea, eb) = (enc(&a), enc(&b));
            prop_assert_eq!(key_string(&ea), a.clone());
            prop_assert_eq!(key_string(&eb), b.clone());
            prop_assert_eq!(ea == eb, a == b);
            prop_assert_eq!(cmp_keys(&ea, &eb), a.as_bytes().cmp(b.as_bytes()));
        }

        /// Keys that differ only at the end, or by a trailing `-` (code 0,
        /// the same bits as the padding), stay apart and in order.
        #[test]
        fn trailing_low_codes_stay_distinct(stem in "[0-9a-z]{3,40}", tail in "[-0-2]{0,3}") {
            let long = format!("{stem}{tail}");
            let (es, el) = (enc(&stem), enc(&long));
            prop_assert_eq!(es == el, tail.is_empty());
            prop_assert_eq!(cmp_keys(&es, &el), stem.as_bytes().cmp(long.as_bytes()));
        }
    }
}
