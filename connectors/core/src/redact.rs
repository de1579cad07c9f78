//! Keeping secrets out of logs, errors, reports and `Debug` output.
//!
//! Two layers, so that one mistake does not leak:
//!
//! 1. **Structural**: [`Secret`] never prints its value, and every URL shown
//!    anywhere goes through [`redact_url`], which removes the password and
//!    secret-bearing query values whatever characters they contain.
//! 2. **By value**: every [`Secret`] registers its value (and, for a URL,
//!    the password and secret query values in both their typed and
//!    percent-decoded forms) in a process-wide list; [`scrub`] replaces
//!    each of them by `***` in any text, and recon applies it where text
//!    leaves the process (logs, the error line, the state store), in case a
//!    driver or a server echoed a secret in its own words.
//!
//! # How a URL's password is found
//!
//! A URL typed by a user is often not a valid URL: a password holding a raw
//! `/`, `#`, `?` or `@` makes a WHATWG parser (the `url` crate, which sqlx
//! uses) end the authority early, so the parser's idea of the password is
//! not the user's. recon therefore reads the text as typed:
//!
//! - the userinfo runs from after `://` to the **last** `@` of the URL;
//! - if it holds a `:`, everything between its first `:` and that last `@`
//!   is the password.
//!
//! This range always contains what the WHATWG parser would call the
//! password (the parser's userinfo ends at an `@` no later than the last
//! one and starts at the same place), so it is the safe reading; the
//! parser's own password is registered with [`scrub`] too. The
//! price is over-redaction in rare URLs whose query or path holds an `@`
//! after a `:` (`postgres://h:5432/db?application_name=a@b` is shown as
//! `postgres://h:***@b`): the message loses detail, never a secret.
//! `sqlite:` and `file:` URLs name a file and have no userinfo.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::RwLock;

use percent_encoding::percent_decode_str;

/// A secret (API key, token, password, or a URL that may hold one). Its
/// `Debug` and `Display` never show the value.
///
/// Creating one registers its value with [`scrub`] (unless it still holds
/// a `${VAR}` placeholder, which is not the secret itself).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value and registers it with [`scrub`].
    pub fn new(value: impl Into<String>) -> Secret {
        let value = value.into();
        register_secret(&value);
        Secret(value)
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret::new)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Shortest value [`scrub`] replaces: shorter ones would turn ordinary
/// words of a message into `***` (a one-letter password would erase every
/// `a`). Passwords in URLs are redacted structurally whatever their length.
pub const MIN_SCRUB_LEN: usize = 4;

/// Query parameter names whose values are secrets: any name (lowercased,
/// percent-decoded) containing one of these. Over-matching (`sslkey`, a
/// file path) only hides a harmless value.
const SECRET_PARAMS: [&str; 8] = [
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
    "sig",
];

/// Schemes whose URLs name a file and so have no userinfo.
const FILE_SCHEMES: [&str; 2] = ["sqlite", "file"];

/// Shortest piece of a longer secret that [`scrub`] removes on its own:
/// text cut before it was scrubbed (a body's first 200 bytes, a column
/// width) may hold a secret's prefix or suffix, or a middle part; any run
/// of this many of a secret's characters is removed, so at most 7
/// characters of a secret survive at a cut.
pub const MIN_SCRUB_PART: usize = 8;

/// The registered secrets and, for the long ones, a matcher of every
/// [`MIN_SCRUB_PART`]-character window of them.
struct Registry {
    /// Whole values, longest first.
    whole: Vec<String>,
    /// Every window of every secret of at least [`MIN_SCRUB_PART`]
    /// characters; `None` while there is none.
    parts: Option<aho_corasick::AhoCorasick>,
}

static SECRETS: RwLock<Registry> = RwLock::new(Registry {
    whole: Vec::new(),
    parts: None,
});

/// How many leading bytes of a secret are its public form, not its secret:
/// an auth scheme (`Bearer `) and a type prefix that every key of its kind
/// shares (`sk_test_`, `whsec_`, `pat-na1-`: letters and digits up to the
/// last `_` or `-` among the token's first 16 characters). A window inside
/// it is not scrubbed on its own, so that a provider's own masked echo
/// (`Invalid API Key provided: sk_test_****1234`) stays readable; any
/// window reaching past it is.
fn public_prefix_len(secret: &str) -> usize {
    let token_start = secret.rfind(' ').map_or(0, |i| i + 1);
    let token = &secret[token_start..];
    let head: String = token.chars().take(16).collect();
    let Some(cut) = head.rfind(['_', '-']) else {
        return token_start;
    };
    let prefix = &head[..cut];
    if prefix.is_empty()
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return token_start;
    }
    token_start + cut + 1
}

/// Every `MIN_SCRUB_PART`-character window of the long secrets, but those
/// wholly inside a secret's public prefix ([`public_prefix_len`]).
fn windows_of(secrets: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in secrets {
        let public = public_prefix_len(s);
        let bounds: Vec<usize> = s
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(s.len()))
            .collect();
        for w in bounds.windows(MIN_SCRUB_PART + 1) {
            if w[MIN_SCRUB_PART] <= public {
                continue;
            }
            let part = &s[w[0]..w[MIN_SCRUB_PART]];
            if !out.contains(&part) {
                out.push(part);
            }
        }
    }
    out
}

/// Adds a value (for a URL: its password and secret query values, in every
/// form they may be echoed) to the values [`scrub`] removes. Values shorter than [`MIN_SCRUB_LEN`] and
/// values still holding a `${` placeholder are ignored.
pub fn register_secret(value: &str) {
    if value.contains("${") {
        return;
    }
    // A URL's secrets are its password and secret query values; the rest of
    // it (scheme, user, host, database) stays readable in messages, which
    // show it through `redact_url` anyway.
    let mut found = Vec::new();
    if value.contains("://") {
        found.extend(url_secrets(value));
    } else {
        found.push(value.to_string());
        // `Bearer TOKEN`: the token alone too.
        if let Some((_, token)) = value.rsplit_once(' ') {
            found.push(token.to_string());
        }
    }
    let mut registry = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    let before = registry.whole.len();
    for s in found {
        if s.chars().count() >= MIN_SCRUB_LEN && s != "***" && !registry.whole.contains(&s) {
            registry.whole.push(s);
        }
    }
    if registry.whole.len() == before {
        return;
    }
    // Longest first, so that a secret containing another is removed whole.
    registry.whole.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let windows = windows_of(&registry.whole);
    registry.parts = if windows.is_empty() {
        None
    } else {
        // Only windows of registered values: a build failure would be a
        // bug, and scrubbing then falls back to whole values.
        aho_corasick::AhoCorasick::new(windows).ok()
    };
}

/// `text` with every registered secret replaced by `***`, every run of
/// [`MIN_SCRUB_PART`] or more characters of a registered secret too (what
/// is left of a secret where text was cut), and every URL in it passed
/// through [`redact_url`].
pub fn scrub(text: &str) -> Cow<'_, str> {
    let registry = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    let mut out = Cow::Borrowed(text);
    for s in registry.whole.iter() {
        if out.contains(s.as_str()) {
            out = Cow::Owned(out.replace(s.as_str(), "***"));
        }
    }
    if let Some(parts) = &registry.parts {
        if let Some(cut) = remove_parts(parts, &out) {
            out = Cow::Owned(cut);
        }
    }
    if out.contains("://") {
        out = Cow::Owned(redact_urls_in(&out));
    }
    out
}

/// `text` with every stretch covered by overlapping or touching matches of
/// `parts` replaced by one `***`; `None` when nothing matched.
fn remove_parts(parts: &aho_corasick::AhoCorasick, text: &str) -> Option<String> {
    let mut found: Vec<Range<usize>> = parts
        .find_overlapping_iter(text)
        .map(|m| m.start()..m.end())
        .collect();
    found.sort_by_key(|m| m.start);
    let mut spans: Vec<Range<usize>> = Vec::new();
    for m in found {
        match spans.last_mut() {
            Some(last) if m.start <= last.end => last.end = last.end.max(m.end),
            _ => spans.push(m),
        }
    }
    if spans.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in spans {
        out.push_str(&text[at..span.start]);
        out.push_str("***");
        at = span.end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// Every URL-looking word (`scheme://…` up to white space, a quote or a
/// backtick) of free text, redacted.
fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // The scheme: letters, digits, `+`, `-`, `.` before `://`.
        let scheme_start = rest[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |j| j + 1);
        let end = rest[i..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .map_or(rest.len(), |j| i + j);
        out.push_str(&rest[..scheme_start]);
        if scheme_start == i {
            out.push_str(&rest[i..end]);
        } else {
            out.push_str(&redact_url(&rest[scheme_start..end]));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Where the password is in a URL as typed (see the module docs): between
/// the first `:` after `://` and the last `@`.
fn password_range(url: &str) -> Option<Range<usize>> {
    let scheme_end = url.find("://")?;
    let scheme = url[..scheme_end].to_ascii_lowercase();
    if FILE_SCHEMES.contains(&scheme.as_str()) {
        return None;
    }
    let start = scheme_end + 3;
    let at = start + url[start..].rfind('@')?;
    let colon = start + url[start..at].find(':')?;
    Some(colon + 1..at)
}

/// The password according to a WHATWG parser, as it appears in the
/// serialized URL (percent-encoded), when the URL parses.
fn parsed_password(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    parsed
        .password()
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

/// Whether a query parameter name (as typed) carries a secret.
fn is_secret_param(name: &str) -> bool {
    let name = percent_decode_str(name)
        .decode_utf8_lossy()
        .to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|p| name.contains(p))
}

/// The byte ranges of secret query values in `url` (after `start`).
fn secret_param_ranges(url: &str, start: usize) -> Vec<Range<usize>> {
    let Some(q) = url[start..].find('?').map(|i| start + i + 1) else {
        return Vec::new();
    };
    let mut ranges = Vec::new();
    let mut pos = q;
    for pair in url[q..].split('&') {
        if let Some((name, value)) = pair.split_once('=') {
            let value_start = pos + name.len() + 1;
            if is_secret_param(name) && !value.is_empty() {
                ranges.push(value_start..value_start + value.len());
            }
        }
        pos += pair.len() + 1;
    }
    ranges
}

/// A connection URL with its password and secret query values replaced by
/// `***`: `postgres://recon:***@db/finance`,
/// `postgres://db/finance?user=recon&password=***`. Any password is found,
/// whatever it contains (see the module docs for how a URL that is not
/// valid as typed is read).
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    // Removing the password first: the query is then found after it.
    let mut query_from = url.find("://").map_or(0, |i| i + 3);
    if let Some(range) = password_range(&out) {
        out.replace_range(range.clone(), "***");
        query_from = range.start + 3;
    }
    for range in secret_param_ranges(&out, query_from).into_iter().rev() {
        out.replace_range(range, "***");
    }
    out
}

/// A URL reduced to its origin: `https://hooks.example.com/***` (the
/// path and query masked, as a catch-hook URL's path is its token;
/// `https://hooks.example.com` when there is no path or query), the
/// password dropped. Text that is not an absolute URL is shown as `***`.
pub fn redact_url_path(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url.trim()) else {
        return "***".to_string();
    };
    let Some(host) = parsed.host_str() else {
        return "***".to_string();
    };
    let mut out = format!("{}://{host}", parsed.scheme());
    if let Some(port) = parsed.port() {
        out.push_str(&format!(":{port}"));
    }
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        out.push_str("/***");
    }
    out
}

/// Every secret a URL holds, in each form it may be echoed: the password as
/// typed and percent-decoded, the parser's password, and the values of
/// secret-bearing query parameters. Empty for a URL without secrets.
pub fn url_secrets(url: &str) -> Vec<String> {
    if !url.contains("://") {
        return Vec::new();
    }
    let mut raw: Vec<&str> = Vec::new();
    let mut query_from = url.find("://").map_or(0, |i| i + 3);
    if let Some(range) = password_range(url) {
        query_from = range.end;
        raw.push(&url[range]);
    }
    let parsed = parsed_password(url);
    raw.extend(parsed.as_deref());
    let ranges = secret_param_ranges(url, query_from);
    raw.extend(ranges.into_iter().map(|r| &url[r]));
    let mut out: Vec<String> = Vec::new();
    for r in raw.into_iter().filter(|r| !r.is_empty()) {
        let decoded = percent_decode_str(r).decode_utf8_lossy().into_owned();
        let plus = decoded.replace('+', " ");
        for s in [r.to_string(), decoded, plus] {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_paths_are_masked_to_the_origin() {
        assert_eq!(
            redact_url_path("https://hooks.zapier.com/hooks/catch/123456/abcdef/"),
            "https://hooks.zapier.com/***"
        );
        assert_eq!(
            redact_url_path("http://u:pw@127.0.0.1:8080/h?token=x"),
            "http://127.0.0.1:8080/***"
        );
        assert_eq!(
            redact_url_path("https://example.com"),
            "https://example.com"
        );
        assert_eq!(redact_url_path("/relative/secret"), "***");
    }

    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(
            redact_url("postgres://recon:s3cr3t@127.0.0.1:5432/finance"),
            "postgres://recon:***@127.0.0.1:5432/finance"
        );
        assert_eq!(
            redact_url("mysql://root:p@ss:w0rd@db/x?ssl-mode=required"),
            "mysql://root:***@db/x?ssl-mode=required"
        );
        assert_eq!(redact_url("sqlite://state.db"), "sqlite://state.db");
        assert_eq!(
            redact_url("postgres://root@localhost/test"),
            "postgres://root@localhost/test"
        );
        assert_eq!(
            redact_url("postgres://h/db?user=a&password=hunter2&x=1"),
            "postgres://h/db?user=a&password=***&x=1"
        );
    }

    /// Passwords holding every character that ends an authority, as typed
    /// (invalid URLs) and percent-encoded (valid ones).
    #[test]
    fn passwords_with_delimiters_are_redacted_whole() {
        let cases = [
            ("pa/ss", "postgres://u:pa/ss@db.example:5432/fin"),
            ("pa#ss", "postgres://u:pa#ss@db.example:5432/fin"),
            ("pa?ss", "postgres://u:pa?ss@db.example:5432/fin"),
            ("pa@ss", "postgres://u:pa@ss@db.example:5432/fin"),
            ("pa%2Fss", "postgres://u:pa%2Fss@db.example:5432/fin"),
            ("pa:ss", "postgres://u:pa:ss@db.example:5432/fin"),
            (
                "a/b#c?d@e:f",
                "postgres://u:a/b#c?d@e:f@db.example:5432/fin",
            ),
            ("/#?@", "mysql://u:/#?@@db.example:5432/fin"),
        ];
        for (password, url) in cases {
            let scheme = &url[..url.find(':').unwrap()];
            let shown = redact_url(url);
            assert_eq!(
                shown,
                format!("{scheme}://u:***@db.example:5432/fin"),
                "{url}"
            );
            assert!(!shown.contains(password), "{url} -> {shown}");
            // What a WHATWG parser calls the password lies inside the
            // typed reading's range, so redacting that range covers it.
            if let Some(p) = parsed_password(url) {
                let typed = &url[password_range(url).unwrap()];
                let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
                assert!(decode(typed).contains(&decode(&p)), "{url}: {p} vs {typed}");
            }
        }
        // Query values after such a password are still found.
        assert_eq!(
            redact_url("postgres://u:p/w@h/db?sslmode=require&sslpassword=k%2Fy&token=t"),
            "postgres://u:***@h/db?sslmode=require&sslpassword=***&token=***"
        );
        // A percent-encoded parameter name is still recognised.
        assert_eq!(
            redact_url("postgres://h/db?pass%77ord=x1&user=u"),
            "postgres://h/db?pass%77ord=***&user=u"
        );
        // No password: nothing to hide, nothing changed.
        assert_eq!(
            redact_url("postgres://u@h:5432/db?sslmode=require"),
            "postgres://u@h:5432/db?sslmode=require"
        );
        // A file URL has no userinfo even with `:` and `@` in its path.
        assert_eq!(
            redact_url("sqlite://C:/data/a@b.db"),
            "sqlite://C:/data/a@b.db"
        );
    }

    #[test]
    fn an_at_in_the_query_over_redacts_rather_than_leaks() {
        let shown = redact_url("postgres://u:pw/x@h/db?application_name=a@b");
        assert!(!shown.contains("pw/x"), "{shown}");
        assert!(shown.starts_with("postgres://u:***@"), "{shown}");
    }

    #[test]
    fn url_secrets_lists_each_form() {
        let s = url_secrets("postgres://u:pa%2Fss@h/db?password=q%23r");
        for form in ["pa%2Fss", "pa/ss", "q%23r", "q#r"] {
            assert!(s.iter().any(|x| x == form), "{form} missing from {s:?}");
        }
        assert!(url_secrets("sqlite://state.db").is_empty());
        assert!(url_secrets("postgres://u@h/db").is_empty());
    }

    #[test]
    fn a_registered_url_keeps_its_readable_parts_and_loses_its_password() {
        register_secret("mysql://reader:Sesame-9981/x@db.internal:3306/ledger_q7");
        // The database named in a message stays readable...
        assert_eq!(
            scrub("table ledger_q7 on mysql://reader@db.internal:3306/ledger_q7"),
            "table ledger_q7 on mysql://reader@db.internal:3306/ledger_q7"
        );
        // ...while the password goes, alone or inside the URL.
        let s = scrub(
            "auth Sesame-9981/x failed for mysql://reader:Sesame-9981/x@db.internal:3306/ledger_q7",
        );
        assert!(!s.contains("Sesame-9981"), "{s}");
        assert!(s.contains("db.internal:3306/ledger_q7"), "{s}");
    }

    #[test]
    fn scrub_removes_registered_values_and_urls_in_text() {
        Secret::new("postgres://u:Zq9/Wv#Xk@h/db");
        Secret::new("sk_test_ScrubMe123");
        let text = "connect failed: password Zq9/Wv#Xk rejected for key sk_test_ScrubMe123";
        let out = scrub(text);
        assert_eq!(out, "connect failed: password *** rejected for key ***");
        // An unregistered URL in free text loses its password too.
        assert_eq!(
            scrub("cannot open 'mysql://root:Other/Pw@db/x' now"),
            "cannot open 'mysql://root:***@db/x' now"
        );
        // Placeholders are not secrets.
        Secret::new("${SOME_VAR}");
        assert_eq!(scrub("uses ${SOME_VAR}"), "uses ${SOME_VAR}");
        // Short values are not scrubbed from prose.
        register_secret("ab");
        assert_eq!(scrub("abc"), "abc");
    }

    /// Text cut before it was scrubbed: what is left of the secret at the
    /// cut (its prefix, its suffix, a middle part) goes when 8 characters or
    /// more are left, however the secret was cut.
    #[test]
    fn a_secret_cut_at_any_place_leaves_at_most_seven_characters() {
        let token = "tok_Q7w3Er5tY9uI1oP2aS4dF6gH8jK0";
        Secret::new(token);
        let text = format!("{{\"echo\":\"Bearer {token}\"}} and more");
        for cut in 0..=text.len() {
            for start in [0, 10, 16] {
                if start > cut {
                    continue;
                }
                let piece = &text[start..cut];
                let out = scrub(piece);
                let chars: Vec<char> = token.chars().collect();
                for w in chars.windows(MIN_SCRUB_PART) {
                    let w: String = w.iter().collect();
                    assert!(!out.contains(&w), "{piece:?} -> {out:?} keeps {w}");
                }
            }
        }
        // A prefix at the end of the text and a suffix at its start.
        assert_eq!(scrub("said: tok_Q7w3Er5tY9"), "said: ***");
        assert_eq!(scrub("gH8jK0\" was sent"), "gH8jK0\" was sent");
        assert_eq!(scrub("F6gH8jK0\" was sent"), "***\" was sent");
        // Seven characters are not enough to be told from prose.
        assert_eq!(scrub("tok_Q7w"), "tok_Q7w");
        // A key's public type prefix is no secret: a provider's masked
        // echo stays readable, while a piece reaching past it goes.
        Secret::new("Bearer sk_test_51HqLyjWDarjtT1zdp7dc0abc");
        assert_eq!(
            scrub("Invalid API Key provided: sk_test_****0abc"),
            "Invalid API Key provided: sk_test_****0abc"
        );
        // (the part of the public prefix no secret window covers stays)
        assert_eq!(scrub("key sk_test_51HqLy cut"), "key s*** cut");
        assert_eq!(public_prefix_len("pat-na1-11111111-2222"), 8);
        assert_eq!(public_prefix_len("Bearer whsec_abc"), 13);
        assert_eq!(public_prefix_len("Zq9/Wv#Xk-long"), 0);
        // Non-ASCII secrets are cut at character boundaries.
        Secret::new("pässwörd-ÄÖÜ-123");
        assert_eq!(scrub("x pässwörd-Ä"), "x ***");
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk_live_123");
        assert_eq!(format!("{s:?} {s}"), "Secret(***) ***");
        assert_eq!(s.expose(), "sk_live_123");
    }
}
