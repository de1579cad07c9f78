//! The placeholder syntax of URL, query, header and body templates: a small,
//! fixed, documented syntax, not an expression language.
//!
//! A template is text in which `{{ name }}` or `{{ name | format }}` stands
//! for a value recon knows at the time of the request. Nothing else is
//! special: there are no conditions, loops, arithmetic or functions, and an
//! unknown name or format is refused when the job is loaded, naming the
//! setting.
//!
//! | name | where | value |
//! |---|---|---|
//! | `start`, `end` | list request | the window's first instant and first instant after it |
//! | `id` | lookup by ID, batch `item` | one external ID looked up |
//! | `ids` | batch lookup | every ID of the batch: a JSON array in a body, comma-separated in text |
//! | `items` | batch lookup or write body | the rendered `item` template, once per ID or record, as a JSON array |
//! | `key` | writes | the record's external ID |
//! | `target_id` | update | the target's own ID of the record, as the lookup's `target_id` path found it |
//! | `idempotency_key` | writes | recon's deterministic key of the record (`recon-` + hex SHA-256) |
//! | `fields.NAME` | writes | the record's value of the job's field `NAME` |
//!
//! Formats: `unix` (seconds), `unix_ms` (milliseconds), `rfc3339`
//! (`2026-11-28T00:00:00Z`) and `date` (`2026-11-28`, UTC) for instants;
//! `minor` and `major` for amounts (minor units, `2999`, or a decimal in
//! major units, `29.99`; the default is the connector's `amount_format`);
//! `currency` for an amount's currency code. After it (or alone), one of
//! `text` (the value as a JSON string), `lower` or `upper` (the same, in
//! that letter case): `{{ fields.created | unix_ms | text }}` is
//! `"1795824000000"`. At most one of each kind, in that order. An instant
//! without a format is RFC 3339.
//!
//! In a JSON body template (a TOML table), a string that is exactly one
//! placeholder becomes the value's own JSON type: a number for amounts and
//! integers (written from their exact decimal text, never through a
//! float), `null` for an empty value, an array for `ids` and `items`. Any
//! other string has its placeholders replaced by their text.

use jiff::Timestamp;
use recon_core::{ConnectorError, Money};
use serde_json::Value as Json;

/// A value a placeholder stands for.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// No value (JSON `null`, empty text).
    Null,
    /// Text.
    Text(String),
    /// A number as its exact decimal text.
    Number(String),
    /// An instant.
    Time(Timestamp),
    /// An amount; rendered in the connector's `amount_format` unless the
    /// placeholder says `minor` or `major`.
    Money(Money, Major),
    /// Already JSON (`ids`, `items`).
    Json(Json),
}

/// Whether amounts are rendered in major units by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Major(pub bool);

/// How a placeholder's value is rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Unix,
    UnixMs,
    Rfc3339,
    Date,
    Minor,
    MajorUnits,
    Currency,
    Lower,
    Upper,
    Text,
}

impl Format {
    const ALL: &'static [(&'static str, Format)] = &[
        ("unix", Format::Unix),
        ("unix_ms", Format::UnixMs),
        ("rfc3339", Format::Rfc3339),
        ("date", Format::Date),
        ("minor", Format::Minor),
        ("major", Format::MajorUnits),
        ("currency", Format::Currency),
        ("lower", Format::Lower),
        ("upper", Format::Upper),
        ("text", Format::Text),
    ];

    fn parse(s: &str) -> Option<Format> {
        Format::ALL.iter().find(|(n, _)| *n == s).map(|(_, f)| *f)
    }
}

/// One `{{ name | format }}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Var {
    /// `start`, `fields.amount`, …
    pub name: String,
    /// The value's format (`unix`, `major`, …), if any.
    pub format: Option<Format>,
    /// `text`, `lower` or `upper` after it, if any: the value as a string.
    pub text: Option<Format>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(String),
    Var(Var),
}

/// A parsed text template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// As written, for messages.
    pub source: String,
    parts: Vec<Part>,
}

/// Which names a template may use: exact names, and prefixes such as
/// `fields.` followed by one of the job's fields.
#[derive(Clone, Copy, Debug)]
pub struct Names<'a> {
    /// Names allowed as they are (`start`, `end`, `id`).
    pub exact: &'a [&'a str],
    /// The job's field names, allowed after `fields.` when not empty.
    pub fields: &'a [String],
}

impl Template {
    /// Parses `text`, the value of setting `key`, allowing `names`.
    pub fn parse(key: &str, text: &str, names: Names<'_>) -> Result<Template, ConnectorError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Lit(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                return Err(ConnectorError::Config(format!(
                    "{key} = {text:?}: a placeholder opened with {{{{ is not closed with }}}}"
                )));
            };
            let inner = after[..close].trim();
            let mut pieces = inner.split('|').map(str::trim);
            let name = pieces.next().unwrap_or("");
            let (mut format, mut as_text) = (None, None);
            for f in pieces {
                let parsed = Format::parse(f).ok_or_else(|| {
                    ConnectorError::Config(format!(
                        "{key} = {text:?}: unknown format `{f}` in {{{{ {inner} }}}}; formats are {}",
                        Format::ALL
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                let textual = matches!(parsed, Format::Text | Format::Lower | Format::Upper);
                if as_text.is_some() || (!textual && format.is_some()) {
                    return Err(ConnectorError::Config(format!(
                        "{key} = {text:?}: {{{{ {inner} }}}} has too many formats; use at most one value format (unix, unix_ms, rfc3339, date, minor, major, currency) followed by at most one of text, lower, upper"
                    )));
                }
                if textual {
                    as_text = Some(parsed);
                } else {
                    format = Some(parsed);
                }
            }
            let known = names.exact.contains(&name)
                || name
                    .strip_prefix("fields.")
                    .is_some_and(|f| names.fields.iter().any(|n| n == f));
            if !known {
                let mut allowed: Vec<String> = names.exact.iter().map(|s| s.to_string()).collect();
                allowed.extend(names.fields.iter().map(|f| format!("fields.{f}")));
                return Err(ConnectorError::Config(format!(
                    "{key} = {text:?}: unknown placeholder {{{{ {name} }}}}; here it may use {}",
                    if allowed.is_empty() {
                        "none".to_string()
                    } else {
                        allowed.join(", ")
                    }
                )));
            }
            parts.push(Part::Var(Var {
                name: name.to_string(),
                format,
                text: as_text,
            }));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_string()));
        }
        Ok(Template {
            source: text.to_string(),
            parts,
        })
    }

    /// The placeholders used.
    pub fn vars(&self) -> impl Iterator<Item = &Var> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v),
            Part::Lit(_) => None,
        })
    }

    /// Whether the template uses `name`.
    pub fn uses(&self, name: &str) -> bool {
        self.vars().any(|v| v.name == name)
    }

    /// The one placeholder the whole template is, if it is exactly one.
    fn single(&self) -> Option<&Var> {
        match self.parts.as_slice() {
            [Part::Var(v)] => Some(v),
            _ => None,
        }
    }

    /// The text, each placeholder replaced by `lookup`'s value as text
    /// (`escape` applied to it: percent-encoding in a URL path).
    pub fn render(
        &self,
        lookup: &dyn Fn(&str) -> Val,
        escape: fn(&str) -> String,
    ) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Var(v) => out.push_str(&escape(&as_text(&lookup(&v.name), v)?)),
            }
        }
        Ok(out)
    }
}

/// A JSON body template: a JSON value whose strings are templates.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonTemplate {
    /// A string template.
    Text(Template),
    /// Anything else without strings inside (numbers, booleans, null).
    Plain(Json),
    /// An array of templates.
    Array(Vec<JsonTemplate>),
    /// An object of templates (keys are plain).
    Object(Vec<(String, JsonTemplate)>),
}

impl JsonTemplate {
    /// Parses every string inside `value`, the setting `key`.
    pub fn parse(
        key: &str,
        value: &Json,
        names: Names<'_>,
    ) -> Result<JsonTemplate, ConnectorError> {
        Ok(match value {
            Json::String(s) => JsonTemplate::Text(Template::parse(key, s, names)?),
            Json::Array(a) => JsonTemplate::Array(
                a.iter()
                    .enumerate()
                    .map(|(i, v)| JsonTemplate::parse(&format!("{key}[{i}]"), v, names))
                    .collect::<Result<_, _>>()?,
            ),
            Json::Object(m) => JsonTemplate::Object(
                m.iter()
                    .map(|(k, v)| {
                        Ok((
                            k.clone(),
                            JsonTemplate::parse(&format!("{key}.{k}"), v, names)?,
                        ))
                    })
                    .collect::<Result<_, ConnectorError>>()?,
            ),
            other => JsonTemplate::Plain(other.clone()),
        })
    }

    /// Whether any string inside uses `name`.
    pub fn uses(&self, name: &str) -> bool {
        match self {
            JsonTemplate::Text(t) => t.uses(name),
            JsonTemplate::Plain(_) => false,
            JsonTemplate::Array(a) => a.iter().any(|t| t.uses(name)),
            JsonTemplate::Object(m) => m.iter().any(|(_, t)| t.uses(name)),
        }
    }

    /// The JSON, placeholders replaced (see the module docs).
    pub fn render(&self, lookup: &dyn Fn(&str) -> Val) -> Result<Json, String> {
        Ok(match self {
            JsonTemplate::Plain(v) => v.clone(),
            JsonTemplate::Text(t) => match t.single() {
                Some(v) => as_json(&lookup(&v.name), v)?,
                None => Json::String(t.render(lookup, |s| s.to_string())?),
            },
            JsonTemplate::Array(a) => Json::Array(
                a.iter()
                    .map(|t| t.render(lookup))
                    .collect::<Result<_, _>>()?,
            ),
            JsonTemplate::Object(m) => {
                let mut out = serde_json::Map::new();
                for (k, t) in m {
                    out.insert(k.clone(), t.render(lookup)?);
                }
                Json::Object(out)
            }
        })
    }
}

fn number(text: &str) -> Result<Json, String> {
    text.parse::<serde_json::Number>()
        .map(Json::Number)
        .map_err(|_| format!("`{text}` is not a JSON number"))
}

fn time_text(t: Timestamp, f: Option<Format>) -> Result<String, String> {
    Ok(match f {
        None | Some(Format::Rfc3339) => recon_core::format_timestamp(t),
        Some(Format::Unix) => t.as_second().to_string(),
        Some(Format::UnixMs) => t.as_millisecond().to_string(),
        Some(Format::Date) => t.strftime("%Y-%m-%d").to_string(),
        Some(other) => return Err(format!("format {other:?} does not apply to an instant")),
    })
}

fn money_text(m: &Money, major: Major, f: Option<Format>) -> Result<String, String> {
    Ok(match f {
        Some(Format::Minor) => m.minor.to_string(),
        Some(Format::MajorUnits) => m.to_major_string(),
        Some(Format::Currency) => m.currency.code().to_string(),
        None => {
            if major.0 {
                m.to_major_string()
            } else {
                m.minor.to_string()
            }
        }
        Some(other) => return Err(format!("format {other:?} does not apply to an amount")),
    })
}

fn as_text(v: &Val, var: &Var) -> Result<String, String> {
    let f = var.format;
    let fail = |e: String| format!("{{{{ {} }}}}: {e}", var.name);
    let text = match v {
        Val::Null => String::new(),
        Val::Time(t) => time_text(*t, f).map_err(fail)?,
        Val::Money(m, major) => money_text(m, *major, f).map_err(fail)?,
        _ if f.is_some() => {
            return Err(fail(format!(
                "format {:?} does not apply to this value",
                f.unwrap_or(Format::Text)
            )))
        }
        Val::Text(s) | Val::Number(s) => s.clone(),
        Val::Json(Json::Array(items)) => items
            .iter()
            .map(|i| match i {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(","),
        Val::Json(Json::String(s)) => s.clone(),
        Val::Json(other) => other.to_string(),
    };
    Ok(match var.text {
        Some(Format::Lower) => text.to_lowercase(),
        Some(Format::Upper) => text.to_uppercase(),
        _ => text,
    })
}

fn as_json(v: &Val, var: &Var) -> Result<Json, String> {
    let f = var.format;
    let fail = |e: String| format!("{{{{ {} }}}}: {e}", var.name);
    if var.text.is_some() {
        return Ok(match v {
            Val::Null => Json::Null,
            _ => Json::String(as_text(v, var)?),
        });
    }
    Ok(match v {
        Val::Null => Json::Null,
        Val::Time(t) if matches!(f, Some(Format::Unix | Format::UnixMs)) => {
            number(&time_text(*t, f).map_err(fail)?).map_err(fail)?
        }
        Val::Time(t) => Json::String(time_text(*t, f).map_err(fail)?),
        Val::Money(m, major) if f == Some(Format::Currency) => {
            Json::String(money_text(m, *major, f).map_err(fail)?)
        }
        Val::Money(m, major) => number(&money_text(m, *major, f).map_err(fail)?).map_err(fail)?,
        _ if f.is_some() => Json::String(as_text(v, var)?),
        Val::Text(s) => Json::String(s.clone()),
        Val::Number(n) => number(n).map_err(fail)?,
        Val::Json(j) => j.clone(),
    })
}

/// Percent-encodes one URL path segment (RFC 3986 unreserved characters
/// stay).
pub fn path_segment(s: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    utf8_percent_encode(s, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::Currency;
    use serde_json::json;

    const WINDOW: Names<'static> = Names {
        exact: &["start", "end"],
        fields: &[],
    };

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn window(name: &str) -> Val {
        match name {
            "start" => Val::Time(at("2026-11-28T05:00:00Z")),
            "end" => Val::Time(at("2026-11-29T05:00:00Z")),
            _ => Val::Null,
        }
    }

    #[test]
    fn instants_render_in_every_documented_format() {
        let t = Template::parse(
            "list.query.q",
            "{{start|unix}} {{ start | unix_ms }} {{start}} {{end|rfc3339}} {{end|date}}",
            WINDOW,
        )
        .unwrap();
        assert_eq!(
            t.render(&window, |s| s.to_string()).unwrap(),
            "1795842000 1795842000000 2026-11-28T05:00:00Z 2026-11-29T05:00:00Z 2026-11-29"
        );
    }

    #[test]
    fn unknown_names_formats_and_open_placeholders_name_the_setting() {
        let e = Template::parse("list.path", "/v1/{{ cursor }}", WINDOW)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("list.path") && e.contains("cursor") && e.contains("start, end"),
            "{e}"
        );
        let e = Template::parse("list.query.from", "{{start|epoch}}", WINDOW)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("list.query.from") && e.contains("epoch") && e.contains("unix_ms"),
            "{e}"
        );
        let e = Template::parse("list.query.from", "{{start", WINDOW)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not closed"), "{e}");
    }

    #[test]
    fn a_whole_string_placeholder_keeps_its_json_type_and_amounts_stay_exact() {
        let fields = ["amount".to_string(), "note".to_string()];
        let names = Names {
            exact: &["key"],
            fields: &fields,
        };
        let body = json!({
            "id": "{{key}}",
            "amount": "{{fields.amount}}",
            "amount_text": "{{fields.amount|text}}",
            "minor": "{{fields.amount|minor}}",
            "currency": "{{fields.amount|currency}}",
            "note": "{{fields.note}}",
            "label": "charge {{key}} of {{fields.amount|major}} {{fields.amount|currency|lower}}",
            "stamp": "{{ fields.amount | minor | text }}",
            "fixed": [1, true],
        });
        // Two value formats are refused.
        let mut twice = body.clone();
        twice["label"] = json!("{{fields.amount|major|minor}}");
        let e = JsonTemplate::parse("create.body", &twice, names)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("create.body.label") && e.contains("too many formats"),
            "{e}"
        );
        let t = JsonTemplate::parse("create.body", &body, names).unwrap();
        let usd = Currency::parse("USD").unwrap();
        let m = Money::parse_minor("90071992547409931", usd).unwrap();
        let lookup = |n: &str| match n {
            "key" => Val::Text("ch_1".into()),
            "fields.amount" => Val::Money(m, Major(true)),
            _ => Val::Null,
        };
        let out = t.render(&lookup).unwrap();
        assert_eq!(out["id"], json!("ch_1"));
        // Beyond 2^53: a float would have changed the last digits.
        assert_eq!(out["amount"].to_string(), "900719925474099.31");
        assert_eq!(out["amount_text"], json!("900719925474099.31"));
        assert_eq!(out["minor"].to_string(), "90071992547409931");
        assert_eq!(out["currency"], json!("USD"));
        assert_eq!(out["note"], Json::Null);
        assert_eq!(out["label"], json!("charge ch_1 of 900719925474099.31 usd"));
        assert_eq!(out["stamp"], json!("90071992547409931"));
        assert_eq!(out["fixed"], json!([1, true]));
    }

    #[test]
    fn lists_render_as_arrays_in_bodies_and_joined_in_text() {
        let names = Names {
            exact: &["ids"],
            fields: &[],
        };
        let ids = |_: &str| Val::Json(json!(["a", "b c"]));
        let t = JsonTemplate::parse("lookup.body", &json!({ "ids": "{{ids}}" }), names).unwrap();
        assert_eq!(t.render(&ids).unwrap(), json!({ "ids": ["a", "b c"] }));
        let q = Template::parse("lookup.query.ids", "{{ids}}", names).unwrap();
        assert_eq!(q.render(&ids, |s| s.to_string()).unwrap(), "a,b c");
        let p = Template::parse("lookup.path", "/x/{{ids}}", names).unwrap();
        assert_eq!(p.render(&ids, path_segment).unwrap(), "/x/a%2Cb%20c");
    }
}
