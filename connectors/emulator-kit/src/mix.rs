//! Deterministic bit mixing for the emulators: stable hashes of ids (so the
//! same id always yields the same generated fields) and request ids that
//! never repeat within an emulator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The SplitMix64 output function (Steele, Lea, Flood: "Fast splittable
/// pseudorandom number generators", 2014) applied to `x`: adds the golden
/// gamma, then mixes. A bijection on `u64`, so distinct inputs never collide.
/// `splitmix64(k * GAMMA)` for k = 0, 1, 2 … is the generator's stream seeded
/// with 0.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a of `bytes`: the same in every process and every build.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A source of request-id material: `splitmix64(n ^ salt)` for a counter `n`,
/// with a salt taken from the clock when the emulator starts. The mix is a
/// bijection of the counter, so values never repeat within an emulator, and
/// two emulators (or runs) hand out different ones.
#[derive(Debug)]
pub struct IdSeq {
    next: AtomicU64,
    salt: u64,
}

impl IdSeq {
    /// Salted with the current time.
    pub fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        IdSeq::with_salt(nanos)
    }

    /// Salted with `seed` (mixed first).
    pub fn with_salt(seed: u64) -> Self {
        IdSeq {
            next: AtomicU64::new(0),
            salt: splitmix64(seed),
        }
    }

    /// The next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&self) -> u64 {
        splitmix64(self.next.fetch_add(1, Ordering::Relaxed) ^ self.salt)
    }
}

impl Default for IdSeq {
    fn default() -> Self {
        IdSeq::new()
    }
}

/// `hi` and `lo` as a UUID with the version-4 and RFC 4122 variant bits set,
/// like a random UUID: `xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`.
pub fn uuid_v4(hi: u64, lo: u64) -> String {
    let hi = (hi & !0xF000) | 0x4000;
    let lo = (lo & !(0xC000u64 << 48)) | (0x8000u64 << 48);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xFFFF,
        hi & 0xFFFF,
        lo >> 48,
        lo & 0xFFFF_FFFF_FFFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    #[test]
    fn splitmix64_is_the_reference_stream() {
        // The first outputs of the reference `splitmix64.c` (Vigna) seeded
        // with 0: each call adds GAMMA to the state, then mixes.
        let got: Vec<u64> = (0..4u64)
            .map(|k| splitmix64(k.wrapping_mul(GAMMA)))
            .collect();
        assert_eq!(
            got,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f,
                0xf88b_b8a8_724c_81ec,
            ]
        );
    }

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        // From the FNV reference test suite (Fowler, Noll, Vo).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn id_seqs_mix_a_salted_counter() {
        let seq = IdSeq::with_salt(7);
        let salt = splitmix64(7);
        let got: Vec<u64> = (0..3).map(|_| seq.next()).collect();
        assert_eq!(
            got,
            [splitmix64(salt), splitmix64(1 ^ salt), splitmix64(2 ^ salt)]
        );
        let many: std::collections::HashSet<u64> = (0..10_000).map(|_| seq.next()).collect();
        assert_eq!(many.len(), 10_000);
    }

    #[test]
    fn uuids_carry_version_4_and_the_rfc_variant() {
        assert_eq!(
            uuid_v4(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210),
            "01234567-89ab-4def-bedc-ba9876543210"
        );
        assert_eq!(uuid_v4(0, 0), "00000000-0000-4000-8000-000000000000");
        assert_eq!(
            uuid_v4(u64::MAX, u64::MAX),
            "ffffffff-ffff-4fff-bfff-ffffffffffff"
        );
    }
}
