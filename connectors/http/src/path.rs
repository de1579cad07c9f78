//! JSONPath (RFC 9535) expressions of the config, compiled once with
//! `serde_json_path`, each remembering the setting it came from so that a
//! path that finds nothing is reported with its key and the answer it was
//! tried on.

use recon_core::{scrub, ConnectorError};
use serde_json::Value as Json;
use serde_json_path::JsonPath;

/// A compiled JSONPath and where it was configured.
#[derive(Clone, Debug)]
pub struct Path {
    /// The setting (`fields.amount`, `list.records`).
    pub key: String,
    /// As written (`$.data[*]`).
    pub text: String,
    compiled: JsonPath,
}

impl PartialEq for Path {
    fn eq(&self, other: &Path) -> bool {
        self.key == other.key && self.text == other.text
    }
}

impl Path {
    /// Compiles `text`, the value of setting `key`.
    pub fn parse(key: &str, text: &str) -> Result<Path, ConnectorError> {
        let compiled = JsonPath::parse(text).map_err(|e| {
            ConnectorError::Config(format!(
                "{key} = {text:?} is not a JSONPath (RFC 9535): {e}; paths start at the answer's root `$`, e.g. \"$.data[*]\" or \"$.amount\""
            ))
        })?;
        Ok(Path {
            key: key.to_string(),
            text: text.to_string(),
            compiled,
        })
    }

    /// Every node the path selects in `value`, in document order.
    pub fn all<'v>(&self, value: &'v Json) -> Vec<&'v Json> {
        self.compiled.query(value).all()
    }

    /// The first node the path selects, if any.
    pub fn first<'v>(&self, value: &'v Json) -> Option<&'v Json> {
        self.all(value).into_iter().next()
    }

    /// The path without a final `[*]` (or `.*`): the node that holds the
    /// list, to tell an empty list from a path that is wrong.
    pub fn container(&self) -> Option<Path> {
        let t = self.text.trim_end();
        let stem = t.strip_suffix("[*]").or_else(|| t.strip_suffix(".*"))?;
        Path::parse(&self.key, stem).ok()
    }

    /// The error of a path that found nothing (or not what it should) in
    /// `answer`, the answer of `endpoint`: the key, the path, the first 200
    /// scrubbed bytes of the answer and the fix.
    pub fn failed(&self, what: &str, endpoint: &str, answer: &Json) -> ConnectorError {
        ConnectorError::Config(format!(
            "{} = {:?} {what} in the answer of {endpoint} (first 200 bytes: {}); set {} to the JSONPath of it in that answer",
            self.key,
            self.text,
            snippet(answer),
            self.key
        ))
    }
}

/// The first 200 bytes of `value` as JSON text, secrets scrubbed first
/// (then cut on a character boundary).
pub fn snippet(value: &Json) -> String {
    let text = value.to_string();
    let clean = scrub(&text).into_owned();
    let mut end = clean.len().min(200);
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &clean[..end];
    if end < clean.len() {
        format!("{cut}…")
    } else {
        cut.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_select_in_document_order_and_know_their_container() {
        let p = Path::parse("list.records", "$.data[*]").unwrap();
        let v = json!({"data": [{"id": 1}, {"id": 2}], "has_more": false});
        assert_eq!(p.all(&v), vec![&json!({"id": 1}), &json!({"id": 2})]);
        let c = p.container().unwrap();
        assert_eq!(c.text, "$.data");
        assert_eq!(c.first(&json!({"data": []})), Some(&json!([])));
        assert!(Path::parse("id", "$.id").unwrap().container().is_none());
    }

    #[test]
    fn bad_paths_and_failed_lookups_name_the_key_and_show_the_answer() {
        let e = Path::parse("fields.amount", "amount")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fields.amount") && e.contains("\"amount\"") && e.contains("RFC 9535"),
            "{e}"
        );
        let p = Path::parse("list.records", "$.items[*]").unwrap();
        let long = "x".repeat(500);
        let e = p
            .failed(
                "matched nothing",
                "GET /v1/charges",
                &json!({"data": [], "pad": long}),
            )
            .to_string();
        assert!(
            e.contains(
                "list.records = \"$.items[*]\" matched nothing in the answer of GET /v1/charges"
            ),
            "{e}"
        );
        assert!(e.contains("{\"data\":[]"), "{e}");
        assert!(e.len() < 500, "the answer is cut at 200 bytes: {e}");
    }
}
