//! Text codecs the emulators need: base64 (Shopify's opaque cursors, HTTP
//! basic auth) and percent-decoding of path segments. Thin wrappers over the
//! `base64` and `percent-encoding` crates, which the emulators' dependency
//! tree builds anyway (reqwest, axum).

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;

/// Decoding as forgiving as the emulators' clients may need: padding optional,
/// unused bits of the last symbol ignored.
const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const LENIENT_STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);
const LENIENT_URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT);

/// Standard base64 (RFC 4648 §4, `+/`, padded with `=`).
pub fn base64_encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// Base64 in the standard (`+/`) or the URL-safe (`-_`) alphabet, with or
/// without `=` padding; `None` when it is neither.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    LENIENT_STANDARD
        .decode(text)
        .or_else(|_| LENIENT_URL_SAFE.decode(text))
        .ok()
}

/// Decodes `%XX` escapes (a `%` not followed by two hex digits stays as is);
/// bytes that are not UTF-8 become U+FFFD.
pub fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4648 §10.
    const VECTORS: [(&str, &str); 7] = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];

    #[test]
    fn base64_matches_the_rfc_4648_test_vectors() {
        for (plain, encoded) in VECTORS {
            assert_eq!(base64_encode(plain.as_bytes()), encoded, "{plain:?}");
            assert_eq!(
                base64_decode(encoded).as_deref(),
                Some(plain.as_bytes()),
                "{encoded:?}"
            );
            // Padding is optional when decoding.
            let bare = encoded.trim_end_matches('=');
            assert_eq!(
                base64_decode(bare).as_deref(),
                Some(plain.as_bytes()),
                "{bare:?}"
            );
        }
    }

    #[test]
    fn base64_decodes_both_alphabets_and_refuses_garbage() {
        let bytes = [0xfb, 0xff, 0xbf];
        assert_eq!(base64_encode(&bytes), "+/+/");
        assert_eq!(base64_decode("+/+/").as_deref(), Some(&bytes[..]));
        assert_eq!(base64_decode("-_-_").as_deref(), Some(&bytes[..]));
        // Unused low bits of the last symbol are ignored ("Zh" = "Zg" + 1 bit).
        assert_eq!(base64_decode("Zh==").as_deref(), Some(&b"f"[..]));
        // Basic auth as HTTP clients send it: `user:` (empty password).
        assert_eq!(
            base64_decode("c2tfdGVzdF9lbXVsYXRvcjo=").as_deref(),
            Some(&b"sk_test_emulator:"[..])
        );
        for bad in ["not a cursor", "Zg=a", "Z!==", "{\"last_id\":1}"] {
            assert_eq!(base64_decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn percent_decode_decodes_escapes_and_keeps_the_rest() {
        assert_eq!(percent_decode("ch_1"), "ch_1");
        assert_eq!(percent_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(percent_decode("%E2%82%AC"), "€");
        // A `%` without two hex digits after it is literal.
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz1"), "%zz1");
        // Not UTF-8: replaced, not an error.
        assert_eq!(percent_decode("x%FFy"), "x\u{FFFD}y");
    }
}
