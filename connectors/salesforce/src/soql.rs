//! SOQL text: literals quoted and escaped per Salesforce's rules, datetime
//! and date literals, the window and count queries, and chunked `IN (…)`
//! lookups that stay under Salesforce's query-length limits.
//!
//! - **Quoting.** Single quote and backslash are reserved in string
//!   literals and must be preceded by a backslash; new line, carriage
//!   return, tab, bell, form feed and `"` have escapes of their own; in a
//!   `LIKE` pattern only, `\%` and `\_` match a literal percent sign and
//!   underscore ("Reserved Characters" and "Quoted String Escape
//!   Sequences", SOQL and SOSL Reference:
//!   https://developer.salesforce.com/docs/atlas.en-us.soql_sosl.meta/soql_sosl/sforce_api_calls_soql_select_reservedcharacters.htm,
//!   https://developer.salesforce.com/docs/platform/salesforce-soql-sosl/guide/sforce-api-calls-soql-select-quotedstringescapes.html).
//!   A backslash anywhere else is an error, so `%` and `_` are escaped only
//!   inside `LIKE` patterns ([`like_literal`]), never in `=`/`IN` literals
//!   ([`literal`]).
//! - **Datetime literals** are unquoted, `YYYY-MM-DDThh:mm:ssZ`; date
//!   literals `YYYY-MM-DD` (SOQL "Date Formats and Date Literals"; "WHERE":
//!   `CreatedDate > 2011-04-26T10:00:00-08:00`). They hold whole seconds,
//!   and so do Salesforce's datetime values, so a half-open window
//!   `[start, end)` becomes `>= ceil(start) AND < ceil(end)` exactly.
//! - **Length limits.** A SOQL statement is at most 100,000 characters
//!   ("SOQL and SOSL Limits for Search Queries",
//!   https://developer.salesforce.com/docs/atlas.en-us.salesforce_app_limits_cheatsheet.meta/salesforce_app_limits_cheatsheet/salesforce_app_limits_platform_soslsoql.htm),
//!   each string in a WHERE clause at most 4,000 characters (ibid.), and a
//!   REST call's URI and headers together at most 16,384 bytes (414 URI Too
//!   Long or 431 beyond; Salesforce Help 000386264, "Maximum number of rows
//!   returned by SOQL queries over the REST API"). The query resource is a
//!   GET, so the percent-encoded query is what counts: [`in_chunks`] keeps
//!   every `…/query?q=…` URI under [`MAX_QUERY_URI`] (12,288 bytes, three
//!   quarters of the 16,384, leaving 4 KB to the headers, which recon keeps
//!   under 1 KB: a bearer token, `Sforce-Query-Options`, `Accept`,
//!   `User-Agent`), far under the statement limit. Salesforce's article
//!   also recommends URIs of about 2,000 characters; recon follows the
//!   limit instead, since every lookup query is an API call of the org's
//!   daily allowance: about 300 keys per query rather than 50.

use jiff::{civil::Date, tz::TimeZone, Timestamp};

/// Longest request URI a lookup query may take, in bytes: three quarters
/// of the 16,384 bytes Salesforce allows a REST call's URI and headers
/// together.
pub const MAX_QUERY_URI: usize = 12_288;

/// Longest SOQL statement Salesforce accepts, in characters.
pub const MAX_STATEMENT: usize = 100_000;

/// Longest string literal in a WHERE clause, in characters.
pub const MAX_WHERE_STRING: usize = 4_000;

/// Escapes the characters SOQL reserves or gives escapes to, for a string
/// literal compared with `=`, `!=` or `IN`.
fn escape_into(out: &mut String, s: &str, like: bool) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '%' if like => out.push_str("\\%"),
            '_' if like => out.push_str("\\_"),
            c => out.push(c),
        }
    }
}

/// `s` as a quoted SOQL string literal for `=`, `!=` and `IN`:
/// `Bob's` is `'Bob\'s'`, `a\b` is `'a\\b'`; `%` and `_` are themselves.
pub fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    escape_into(&mut out, s, false);
    out.push('\'');
    out
}

/// `s` as a quoted `LIKE` pattern that matches `s` exactly: also `%` and
/// `_` are escaped (`\%`, `\_`). Append an unescaped `%` for a prefix match.
pub fn like_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    escape_into(&mut out, s, true);
    out.push('\'');
    out
}

/// The first whole second at or after `t`.
fn ceil_second(t: Timestamp) -> Timestamp {
    let s = t.as_second();
    let whole = Timestamp::from_second(s).unwrap_or(t);
    if whole < t {
        Timestamp::from_second(s + 1).unwrap_or(t)
    } else {
        whole
    }
}

/// A datetime literal, `2026-01-02T03:04:05Z`, of the first whole second at
/// or after `t`: `field >= datetime(start) AND field < datetime(end)` holds
/// exactly the whole-second values in `[start, end)`.
pub fn datetime(t: Timestamp) -> String {
    ceil_second(t).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The first date whose midnight (UTC) is at or after `t`, as a date
/// literal: a date field's day `d` is in `[start, end)` (at midnight UTC)
/// exactly when `d >= date(start) AND d < date(end)`.
pub fn date(t: Timestamp) -> String {
    let day: Date = TimeZone::UTC.to_datetime(t).date();
    let midnight = TimeZone::UTC
        .to_timestamp(day.to_datetime(jiff::civil::Time::midnight()))
        .unwrap_or(t);
    let day = if midnight < t {
        day.tomorrow().unwrap_or(day)
    } else {
        day
    };
    day.strftime("%Y-%m-%d").to_string()
}

/// The window condition on `field`: `field >= lo AND field < hi`, with
/// datetime literals, or date literals when the field is a date.
pub fn window_condition(field: &str, start: Timestamp, end: Timestamp, is_date: bool) -> String {
    let lit = if is_date { date } else { datetime };
    format!("{field} >= {} AND {field} < {}", lit(start), lit(end))
}

/// `SELECT a, b FROM object WHERE cond [ORDER BY …]`.
pub fn select(fields: &[String], object: &str, condition: &str, order_by: Option<&str>) -> String {
    let mut q = format!(
        "SELECT {} FROM {object} WHERE {condition}",
        fields.join(", ")
    );
    if let Some(o) = order_by {
        q.push_str(" ORDER BY ");
        q.push_str(o);
    }
    q
}

/// `SELECT COUNT() FROM object WHERE cond`.
pub fn count(object: &str, condition: &str) -> String {
    format!("SELECT COUNT() FROM {object} WHERE {condition}")
}

/// Bytes `s` takes in a query string as `application/x-www-form-urlencoded`
/// writes it (reqwest's `.query()`): ASCII letters, digits and `*-._` as
/// themselves, a space as `+`, every other byte as `%XX`.
pub fn encoded_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' | b' ' => 1,
            _ => 3,
        })
        .sum()
}

/// Splits `keys` into `IN (…)` lookups: each query is
/// `SELECT … FROM object WHERE key_field IN ('k1', 'k2', …)`, and each one's
/// URI (`base_uri` + `?q=` + the encoded query) stays under
/// [`MAX_QUERY_URI`] bytes (so the statement stays under
/// [`MAX_STATEMENT`] characters too). A key longer than
/// [`MAX_WHERE_STRING`] characters cannot be looked up and is returned in
/// the second list (an external ID field holds at most 255).
pub fn in_chunks(
    fields: &[String],
    object: &str,
    key_field: &str,
    keys: &[String],
    base_uri: &str,
) -> (Vec<String>, Vec<String>) {
    let head = format!(
        "SELECT {} FROM {object} WHERE {key_field} IN (",
        fields.join(", ")
    );
    let fixed = base_uri.len() + "?q=".len() + encoded_len(&head) + encoded_len(")");
    let budget = MAX_QUERY_URI.min(MAX_STATEMENT);
    let mut queries = Vec::new();
    let mut too_long = Vec::new();
    let mut current = String::new();
    let mut used = fixed;
    for key in keys {
        if key.chars().count() > MAX_WHERE_STRING {
            too_long.push(key.clone());
            continue;
        }
        let lit = literal(key);
        if fixed + encoded_len(&lit) > budget {
            too_long.push(key.clone());
            continue;
        }
        let sep = if current.is_empty() {
            0
        } else {
            encoded_len(", ")
        };
        if !current.is_empty() && used + sep + encoded_len(&lit) > budget {
            queries.push(format!("{head}{current})"));
            current.clear();
            used = fixed;
        }
        if !current.is_empty() {
            current.push_str(", ");
            used += encoded_len(", ");
        }
        used += encoded_len(&lit);
        current.push_str(&lit);
    }
    if !current.is_empty() {
        queries.push(format!("{head}{current})"));
    }
    (queries, too_long)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn literals_escape_quote_and_backslash_but_not_wildcards() {
        assert_eq!(literal("Bob's BBQ"), r"'Bob\'s BBQ'");
        assert_eq!(literal(r"a\b"), r"'a\\b'");
        assert_eq!(literal(r"\'"), r"'\\\''");
        assert_eq!(literal("50%_off"), "'50%_off'");
        assert_eq!(literal("line\nbreak\ttab\"q"), r#"'line\nbreak\ttab\"q'"#);
        assert_eq!(literal(""), "''");
        assert_eq!(literal("é☃"), "'é☃'");
    }

    #[test]
    fn like_patterns_also_escape_percent_and_underscore() {
        assert_eq!(like_literal("50%_off"), r"'50\%\_off'");
        assert_eq!(like_literal(r"it's a\b"), r"'it\'s a\\b'");
    }

    #[test]
    fn datetime_literals_round_up_to_whole_seconds() {
        assert_eq!(datetime(ts("2026-01-02T03:04:05Z")), "2026-01-02T03:04:05Z");
        assert_eq!(
            datetime(ts("2026-01-02T03:04:05.001Z")),
            "2026-01-02T03:04:06Z"
        );
        assert_eq!(
            datetime(ts("2026-12-31T23:59:59.5Z")),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            datetime(ts("1969-12-31T23:59:59.5Z")),
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn date_literals_are_the_first_day_whose_midnight_is_in_the_window() {
        assert_eq!(date(ts("2026-01-02T00:00:00Z")), "2026-01-02");
        assert_eq!(date(ts("2026-01-02T00:00:00.001Z")), "2026-01-03");
        assert_eq!(date(ts("2026-01-02T05:00:00Z")), "2026-01-03");
        assert_eq!(
            window_condition(
                "Day__c",
                ts("2026-01-02T05:00:00Z"),
                ts("2026-01-03T05:00:00Z"),
                true
            ),
            "Day__c >= 2026-01-03 AND Day__c < 2026-01-04"
        );
    }

    #[test]
    fn window_and_count_queries() {
        let cond = window_condition(
            "CreatedDate",
            ts("2026-01-02T00:00:00Z"),
            ts("2026-01-03T00:00:00Z"),
            false,
        );
        assert_eq!(
            cond,
            "CreatedDate >= 2026-01-02T00:00:00Z AND CreatedDate < 2026-01-03T00:00:00Z"
        );
        assert_eq!(
            select(
                &["Id".into(), "Name".into()],
                "Payment__c",
                &cond,
                Some("CreatedDate ASC, Id ASC")
            ),
            format!(
                "SELECT Id, Name FROM Payment__c WHERE {cond} ORDER BY CreatedDate ASC, Id ASC"
            )
        );
        assert_eq!(
            count("Payment__c", &cond),
            format!("SELECT COUNT() FROM Payment__c WHERE {cond}")
        );
    }

    #[test]
    fn encoded_length_matches_form_urlencoding() {
        assert_eq!(encoded_len("a b"), 3);
        assert_eq!(encoded_len("'"), 3);
        assert_eq!(encoded_len("é"), 6);
        assert_eq!(encoded_len("A-z_0.9*"), 8);
    }

    #[test]
    fn in_chunks_stay_under_the_uri_budget_and_keep_every_key_once() {
        let keys: Vec<String> = (0..3000)
            .map(|i| format!("ch_{i:06}'\\%_{}", "x".repeat(i % 40)))
            .collect();
        let base = "https://example.my.salesforce.com/services/data/v62.0/query";
        let fields = vec!["Id".to_string(), "Stripe_Charge_Id__c".to_string()];
        let (queries, too_long) =
            in_chunks(&fields, "Payment__c", "Stripe_Charge_Id__c", &keys, base);
        assert!(too_long.is_empty());
        assert!(queries.len() > 1, "3000 keys need several queries");
        let mut seen = 0;
        for q in &queries {
            let uri = base.len() + 3 + encoded_len(q);
            assert!(uri <= MAX_QUERY_URI, "{uri} bytes");
            assert!(q.chars().count() <= MAX_STATEMENT);
            assert!(q.starts_with(
                "SELECT Id, Stripe_Charge_Id__c FROM Payment__c WHERE Stripe_Charge_Id__c IN ("
            ));
            assert!(q.ends_with(')'));
            seen += q.matches("ch_").count();
        }
        assert_eq!(seen, keys.len());
        // Each key appears escaped exactly once.
        assert!(queries
            .iter()
            .any(|q| q.contains(r"'ch_000007\'\\%_xxxxxxx'")));
        // Chunks are filled: each but the last could not take the next key.
        assert!(queries.len() < 3000 / 40);
    }

    #[test]
    fn a_key_longer_than_a_where_string_is_set_aside() {
        let keys = vec!["a".repeat(MAX_WHERE_STRING + 1), "ok".into()];
        let (queries, too_long) = in_chunks(&["Id".into()], "X__c", "K__c", &keys, "http://h/q");
        assert_eq!(too_long.len(), 1);
        assert_eq!(
            queries,
            vec!["SELECT Id FROM X__c WHERE K__c IN ('ok')".to_string()]
        );
    }
}
