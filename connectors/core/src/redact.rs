//! Keeping secrets out of logs, errors, reports and `Debug` output.

use std::fmt;

/// A secret (API key, token, password, or a URL that may hold one). Its
/// `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
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

/// A connection URL with its password (and any `password=` query value)
/// replaced by `***`: `postgres://recon:***@db/finance`.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                let pw_start = rest_start + colon + 1;
                out.replace_range(pw_start..rest_start + at, "***");
            }
        }
    }
    // Query parameters that carry secrets.
    for key in ["password=", "sslpassword=", "token=", "api_key="] {
        let mut search = 0;
        while let Some(i) = out[search..].to_ascii_lowercase().find(key) {
            let start = search + i + key.len();
            let end = out[start..].find('&').map_or(out.len(), |j| start + j);
            out.replace_range(start..end, "***");
            search = start + 3;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk_live_123");
        assert_eq!(format!("{s:?} {s}"), "Secret(***) ***");
        assert_eq!(s.expose(), "sk_live_123");
    }
}
