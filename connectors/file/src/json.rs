//! One JSON Lines object, parsed strictly: numbers keep their text exactly
//! as written, and an object that names the same field twice, at any depth,
//! is refused instead of silently keeping the last one.
//!
//! Numbers come back as [`Value::String`] holding their source text
//! (`1234567890123456.7`, `18446744073709551617`, `3.0`, `4e0`): the reader
//! turns every cell into text before typing it by the field's kind, so
//! nothing needs the JSON type, and not even serde_json's
//! `arbitrary_precision` keeps the text of `4e0` (it writes `4e+0`).

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Why a line is not one acceptable JSON object.
#[derive(Debug)]
pub(crate) enum JsonLineError {
    /// Not JSON at all.
    Syntax(serde_json::Error),
    /// Valid JSON, but not an object.
    NotObject,
    /// The dotted path of a field that appears twice in one object.
    Duplicate(String),
}

/// The fields of one object in text order, values left as raw text.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(key) = map.next_key::<String>()? {
                    out.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Parses one line that must hold a JSON object.
pub(crate) fn parse_object(text: &str) -> Result<Value, JsonLineError> {
    if !text.starts_with('{') {
        // Report a syntax error where there is one, else "not an object".
        return match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Err(e) => Err(JsonLineError::Syntax(e)),
            Ok(_) => Err(JsonLineError::NotObject),
        };
    }
    // The whole line's syntax is checked here, so error columns are the line's.
    let entries: Entries<'_> = serde_json::from_str(text).map_err(JsonLineError::Syntax)?;
    object(entries, "").map(Value::Object)
}

fn object(entries: Entries<'_>, prefix: &str) -> Result<Map<String, Value>, JsonLineError> {
    let mut map = Map::new();
    for (key, raw) in entries.0 {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let value = value(raw, &path)?;
        if map.insert(key, value).is_some() {
            return Err(JsonLineError::Duplicate(path));
        }
    }
    Ok(map)
}

fn value(raw: &RawValue, path: &str) -> Result<Value, JsonLineError> {
    let text = raw.get();
    // The text was checked as part of the line: these parses cannot fail.
    match text.as_bytes().first() {
        Some(b'{') => {
            let entries: Entries<'_> = serde_json::from_str(text).map_err(JsonLineError::Syntax)?;
            object(entries, path).map(Value::Object)
        }
        Some(b'[') => {
            let items: Vec<&RawValue> =
                serde_json::from_str(text).map_err(JsonLineError::Syntax)?;
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| value(item, &format!("{path}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        // A number: its text as written (already checked as JSON).
        Some(b'-' | b'0'..=b'9') => Ok(Value::String(text.to_string())),
        _ => serde_json::from_str(text).map_err(JsonLineError::Syntax),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_number_text_and_refuses_repeated_fields() {
        let v = parse_object(
            r#"{"id": 18446744073709551617, "a": 1234567890123456.7, "b": 29.990000000000002, "c": 3.0, "d": 4e0, "n": {"x": [1, {"y": 2}]}}"#,
        )
        .unwrap();
        for (k, want) in [
            ("id", "18446744073709551617"),
            ("a", "1234567890123456.7"),
            ("b", "29.990000000000002"),
            ("c", "3.0"),
            ("d", "4e0"),
        ] {
            assert_eq!(v[k].as_str(), Some(want), "{k}");
        }
        assert_eq!(v["n"]["x"][1]["y"], "2");
        assert_eq!(v["n"]["x"].as_array().map(Vec::len), Some(2));
        for (line, path) in [
            (r#"{"amount": 1, "amount": 2}"#, "amount"),
            (r#"{"a": {"t": 1, "t": 1}}"#, "a.t"),
            (r#"{"a": [{"t": 1}, {"t": 1, "t": 2}]}"#, "a[1].t"),
            (r#"{"a\u0062": 1, "ab": 2}"#, "ab"),
        ] {
            match parse_object(line) {
                Err(JsonLineError::Duplicate(p)) => assert_eq!(p, path, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        assert!(matches!(parse_object("[1]"), Err(JsonLineError::NotObject)));
        assert!(matches!(parse_object("7"), Err(JsonLineError::NotObject)));
        match parse_object(r#"{"a": 1,, "b": 2}"#) {
            Err(JsonLineError::Syntax(e)) => assert_eq!(e.column(), 9, "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_object("nope"),
            Err(JsonLineError::Syntax(_))
        ));
    }
}
