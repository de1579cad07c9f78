//! The backfill plan file, `plan.jsonl`: one JSON object per planned write.
//!
//! `recon run` writes it (a dry run, or a run stopped by the safety limit)
//! and `recon apply --plan` reads it back; both go through [`PlanLine`], so
//! the two cannot drift apart. A line looks like
//!
//! ```json
//! {"action":"insert","external_id":"ch_1","job":"charges","plan_id":"charges-20261128T…",
//!  "values":{"amount":{"amount":"10.00","currency":"USD","minor":1000},"status":"succeeded"},
//!  "version":1,"window":{"end":"2026-11-29T05:00:00Z","start":"2026-11-28T05:00:00Z"}}
//! ```
//!
//! Version 1 has the keys of the unversioned plans recon wrote before, plus
//! `version`; readers of those keys keep working. Reading is strict: a line
//! with an unknown key, a value that disagrees with itself or a field the
//! job does not have is refused with its line number.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use jiff::Timestamp;
use recon_core::parse::{self, TimestampRules, ValueRules};
use recon_core::{
    format_timestamp, lower_hex, AmountFormat, Currency, FieldKind, Money, Record, Schema, Value,
    Window, WriteMode,
};
use serde::{Deserialize, Serialize};

/// The plan format this build writes and reads.
pub const PLAN_VERSION: u32 = 1;

/// The plan's file name in a report folder.
pub const PLAN_FILE: &str = "plan.jsonl";

/// SHA-256 of a file's bytes, lower-case hex: the digest the state store
/// keeps of a plan, so that an edited plan is known for one.
pub fn file_sha256(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("cannot read {} to take its digest", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .with_context(|| format!("cannot read {} to take its digest", path.display()))?;
    Ok(lower_hex(&hasher.finalize()))
}

/// SHA-256 of bytes already read, lower-case hex (as [`file_sha256`]).
pub fn file_sha256_bytes(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    lower_hex(&Sha256::digest(bytes))
}

/// What a plan line does to the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Create a record the target lacks (a gap).
    Insert,
    /// Overwrite a mismatched record (backfill mode `upsert` only).
    Update,
}

impl Action {
    /// The text in `plan.jsonl`, `backfill.csv` and the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Insert => "insert",
            Action::Update => "update",
        }
    }

    /// The write mode that carries the action out.
    pub fn mode(self) -> WriteMode {
        match self {
            Action::Insert => WriteMode::Insert,
            Action::Update => WriteMode::Upsert,
        }
    }
}

impl From<WriteMode> for Action {
    fn from(mode: WriteMode) -> Action {
        match mode {
            WriteMode::Insert => Action::Insert,
            WriteMode::Upsert => Action::Update,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The window the plan was made over, as RFC 3339 UTC text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanWindow {
    /// First instant of the window.
    pub start: String,
    /// First instant after the window.
    pub end: String,
}

/// An amount as written in a plan: minor units, currency code, and the
/// same amount in major units for the reviewer's eyes. The two must agree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanMoney {
    /// Integer minor units (cents): what is written.
    pub minor: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// `minor` in major units, as text (`10.00`).
    pub amount: String,
}

/// One field value of a plan line (`null` is `None` in [`PlanLine::values`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PlanValue {
    /// Text, a whole number, a currency code or an RFC 3339 timestamp.
    Text(String),
    /// An amount.
    Money(PlanMoney),
}

/// One line of `plan.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanLine {
    /// The format version, [`PLAN_VERSION`]; 0 when the line has none
    /// (a plan from a recon before plans were versioned).
    #[serde(default)]
    pub version: u32,
    /// The plan's id: the id of the run that made it.
    pub plan_id: String,
    /// The job.
    pub job: String,
    /// The window the plan was made over.
    pub window: PlanWindow,
    /// Insert or update.
    pub action: Action,
    /// The record's external ID.
    pub external_id: String,
    /// Every field of the job, by name.
    pub values: BTreeMap<String, Option<PlanValue>>,
    /// `backfill.via = "webhook"`: the request that will be sent (URL and
    /// headers with secrets masked, the exact body); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<crate::webhook::PlanRequest>,
}

impl PlanLine {
    /// The line for one planned write of `record` (values in `schema` order).
    pub fn new(
        plan_id: &str,
        job: &str,
        window: Window,
        action: Action,
        schema: &Schema,
        record: &Record,
    ) -> PlanLine {
        let values = schema
            .fields
            .iter()
            .zip(&record.values)
            .map(|(f, v)| {
                let v = match v {
                    Value::Null => None,
                    Value::Money(m) => Some(PlanValue::Money(PlanMoney {
                        minor: m.minor,
                        currency: m.currency.code().to_string(),
                        amount: m.to_major_string(),
                    })),
                    other => Some(PlanValue::Text(other.to_string())),
                };
                (f.name.clone(), v)
            })
            .collect();
        PlanLine {
            version: PLAN_VERSION,
            plan_id: plan_id.to_string(),
            job: job.to_string(),
            window: PlanWindow {
                start: format_timestamp(window.start),
                end: format_timestamp(window.end),
            },
            action,
            external_id: record.key.clone(),
            values,
            webhook: None,
        }
    }

    /// The line as a JSON value (object keys sorted).
    pub fn to_json(&self) -> serde_json::Value {
        // A struct of strings, numbers and maps always serialises.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Parses one line; `at` names it in errors (`plan.jsonl line 3`).
    pub fn parse(text: &str, at: &str) -> Result<PlanLine> {
        let line: PlanLine = serde_json::from_str(text).with_context(|| {
            format!("{at}: not a plan line ({}); a plan is the plan.jsonl that `recon run --dry-run` wrote, unedited", first_line_of(text))
        })?;
        if line.version != PLAN_VERSION {
            bail!(
                "{at}: plan version {} (0 = none); this recon reads version {PLAN_VERSION}; make the plan again with `recon run --dry-run`",
                line.version
            );
        }
        Ok(line)
    }

    /// The window, parsed.
    pub fn window(&self) -> Result<Window> {
        let ts = |s: &str, what: &str| {
            s.parse::<Timestamp>()
                .map_err(|e| anyhow!("window {what} `{s}` is not an RFC 3339 instant ({e})"))
        };
        let window = Window {
            start: ts(&self.window.start, "start")?,
            end: ts(&self.window.end, "end")?,
        };
        if window.end <= window.start {
            bail!("window {}..{} is empty", self.window.start, self.window.end);
        }
        Ok(window)
    }

    /// The record to write: the key and every field of `schema`, typed.
    /// Refuses a line that lacks a field of the job, names one the job does
    /// not have, or holds a value that disagrees with itself (an amount
    /// whose `minor` and `amount` differ).
    pub fn record(&self, schema: &Schema) -> Result<Record> {
        if let Some(extra) = self
            .values
            .keys()
            .find(|k| schema.index_of(k.as_str()).is_none())
        {
            bail!("`values` has `{extra}`, which is not a field of the job");
        }
        let values = schema
            .fields
            .iter()
            .map(|f| {
                let v = self.values.get(&f.name).ok_or_else(|| {
                    anyhow!(
                        "`values` lacks the field `{}`; every field of the job must be present (null for none)",
                        f.name
                    )
                })?;
                typed(f.kind, v.as_ref()).map_err(|e| anyhow!("field `{}`: {e}", f.name))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Record {
            key: self.external_id.clone(),
            values,
        })
    }
}

/// Writes the lines of one plan straight from its records: the same bytes
/// as `serde_json::to_writer(&PlanLine::new(…).to_json())` (keys in sorted
/// order, as a JSON object value writes them; a test compares the two on
/// every kind of value), without a `PlanLine`, a map and a JSON value per
/// line, which made a third of a 200,000-gap dry run's time. Lines with a
/// webhook preview go through [`PlanLine`].
pub struct PlanLineWriter {
    /// `"plan_id":…` and `"job":…` as JSON text.
    job: String,
    plan_id: String,
    /// `{"end":…,"start":…}`.
    window: String,
    /// The job's fields in key order: their JSON key text and schema index.
    fields: Vec<(String, usize)>,
}

impl PlanLineWriter {
    /// The writer of one plan's lines.
    pub fn new(plan_id: &str, job: &str, window: Window, schema: &Schema) -> PlanLineWriter {
        let json = |s: &str| serde_json::Value::from(s).to_string();
        let mut fields: Vec<(String, usize)> = schema
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        fields.sort();
        PlanLineWriter {
            job: json(job),
            plan_id: json(plan_id),
            window: format!(
                "{{\"end\":{},\"start\":{}}}",
                json(&format_timestamp(window.end)),
                json(&format_timestamp(window.start))
            ),
            fields: fields.into_iter().map(|(n, i)| (json(&n), i)).collect(),
        }
    }

    /// Writes the line of one planned write of `record`, and a newline.
    pub fn write(
        &self,
        out: &mut dyn std::io::Write,
        action: Action,
        record: &Record,
        scratch: &mut (Vec<u8>, String),
    ) -> std::io::Result<()> {
        use std::fmt::Write as _;
        let (line, text) = scratch;
        line.clear();
        line.extend_from_slice(b"{\"action\":\"");
        line.extend_from_slice(action.as_str().as_bytes());
        line.extend_from_slice(b"\",\"external_id\":");
        serde_json::to_writer(&mut *line, record.key.as_str())?;
        line.extend_from_slice(b",\"job\":");
        line.extend_from_slice(self.job.as_bytes());
        line.extend_from_slice(b",\"plan_id\":");
        line.extend_from_slice(self.plan_id.as_bytes());
        line.extend_from_slice(b",\"values\":{");
        // As `PlanLine::new`, a field without a value is left out.
        let present = self
            .fields
            .iter()
            .filter_map(|(key, i)| Some((key, record.values.get(*i)?)));
        for (n, (key, value)) in present.enumerate() {
            if n > 0 {
                line.push(b',');
            }
            line.extend_from_slice(key.as_bytes());
            line.push(b':');
            match value {
                Value::Null => line.extend_from_slice(b"null"),
                Value::Money(m) => {
                    line.extend_from_slice(b"{\"amount\":");
                    serde_json::to_writer(&mut *line, &m.to_major_string())?;
                    line.extend_from_slice(b",\"currency\":");
                    serde_json::to_writer(&mut *line, m.currency.code())?;
                    line.extend_from_slice(b",\"minor\":");
                    serde_json::to_writer(&mut *line, &m.minor)?;
                    line.push(b'}');
                }
                other => {
                    text.clear();
                    let _ = write!(text, "{other}");
                    serde_json::to_writer(&mut *line, text.as_str())?;
                }
            }
        }
        line.extend_from_slice(b"},\"version\":");
        line.extend_from_slice(PLAN_VERSION.to_string().as_bytes());
        line.extend_from_slice(b",\"window\":");
        line.extend_from_slice(self.window.as_bytes());
        line.extend_from_slice(b"}\n");
        out.write_all(line)
    }
}

/// The first 80 characters of a line, for errors.
fn first_line_of(text: &str) -> String {
    let t: String = text.chars().take(80).collect();
    if t.len() < text.len() {
        format!("{t}…")
    } else {
        t
    }
}

/// The rules of plan values: recon writes timestamps as RFC 3339 in UTC;
/// amounts are [`PlanMoney`], not text.
const PLAN_RULES: ValueRules = ValueRules {
    amounts: AmountFormat::Minor,
    timestamps: TimestampRules::RFC3339,
};

/// A plan value typed as a field of `kind`.
fn typed(kind: FieldKind, v: Option<&PlanValue>) -> Result<Value> {
    let m = match (kind, v) {
        (_, None) => return Ok(Value::Null),
        (FieldKind::Money, Some(PlanValue::Money(m))) => m,
        (FieldKind::Money, Some(PlanValue::Text(_))) => {
            bail!("expected an amount {{\"minor\", \"currency\", \"amount\"}}, found text")
        }
        (_, Some(PlanValue::Money(_))) => bail!("expected text, found an amount"),
        (_, Some(PlanValue::Text(s))) => {
            return Ok(parse::value(s.clone(), kind, None, PLAN_RULES)?)
        }
    };
    let money = Money::from_minor(m.minor, Currency::parse(&m.currency)?);
    if money.to_major_string() != m.amount {
        bail!(
            "`minor` {} {} is {} but `amount` says {}; the line disagrees with itself (edited by hand?)",
            m.minor,
            money.currency.code(),
            money.to_major_string(),
            m.amount
        );
    }
    Ok(Value::Money(money))
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::Field;

    fn schema() -> Schema {
        let f = |name: &str, kind| Field {
            name: name.into(),
            kind,
            compared: true,
        };
        Schema {
            fields: vec![
                f("amount", FieldKind::Money),
                f("currency", FieldKind::Currency),
                f("status", FieldKind::Text),
                f("created", FieldKind::Timestamp),
                f("n", FieldKind::Integer),
            ],
        }
    }

    fn record() -> Record {
        let usd = Currency::parse("usd").unwrap();
        Record {
            key: "ch_1".into(),
            values: vec![
                Value::Money(Money::from_minor(1050, usd)),
                Value::Currency(usd),
                Value::Text("succeeded".into()),
                Value::Timestamp("2026-11-28T10:00:00Z".parse().unwrap()),
                Value::Null,
            ],
        }
    }

    fn window() -> Window {
        Window {
            start: "2026-11-28T05:00:00Z".parse().unwrap(),
            end: "2026-11-29T05:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn a_line_round_trips_with_the_same_keys_plus_version() {
        let line = PlanLine::new(
            "p1",
            "charges",
            window(),
            Action::Insert,
            &schema(),
            &record(),
        );
        let text = serde_json::to_string(&line.to_json()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "action",
                "external_id",
                "job",
                "plan_id",
                "values",
                "version",
                "window"
            ]
        );
        assert_eq!(v["action"], "insert");
        assert_eq!(
            v["values"]["amount"],
            serde_json::json!({"minor": 1050, "currency": "USD", "amount": "10.50"})
        );
        assert_eq!(v["values"]["n"], serde_json::Value::Null);
        let back = PlanLine::parse(&text, "line 1").unwrap();
        assert_eq!(back, line);
        assert_eq!(back.record(&schema()).unwrap(), record());
        assert_eq!(back.window().unwrap(), window());
    }

    #[test]
    fn refuses_lines_that_disagree_or_lack_fields() {
        let line = PlanLine::new(
            "p1",
            "charges",
            window(),
            Action::Update,
            &schema(),
            &record(),
        );
        let text = serde_json::to_string(&line).unwrap();
        let edited = text.replace("\"minor\":1050", "\"minor\":99999");
        let e = PlanLine::parse(&edited, "l")
            .unwrap()
            .record(&schema())
            .unwrap_err()
            .to_string();
        assert!(e.contains("disagrees with itself"), "{e}");
        let mut empty = line.clone();
        empty.values.clear();
        let e = empty.record(&schema()).unwrap_err().to_string();
        assert!(e.contains("lacks the field `amount`"), "{e}");
        let mut extra = line.clone();
        extra.values.insert("zzz".into(), None);
        let e = extra.record(&schema()).unwrap_err().to_string();
        assert!(e.contains("`zzz`"), "{e}");
        let unversioned = text.replace("\"version\":1,", "");
        let e = PlanLine::parse(&unversioned, "l").unwrap_err().to_string();
        assert!(e.contains("plan version 0"), "{e}");
        let unknown = text.replace("\"version\":1,", "\"version\":1,\"extra\":true,");
        assert!(PlanLine::parse(&unknown, "l").is_err());
        assert_eq!(Action::from(WriteMode::Upsert), Action::Update);
        assert_eq!(Action::Update.mode(), WriteMode::Upsert);
    }

    #[test]
    fn values_are_typed_by_the_plan_rules() {
        let text = |s: &str| Some(PlanValue::Text(s.into()));
        let typed = |kind, v: Option<PlanValue>| typed(kind, v.as_ref());
        assert_eq!(
            typed(FieldKind::Integer, text(" 7 ")).unwrap(),
            Value::Integer(7)
        );
        assert_eq!(
            typed(FieldKind::Timestamp, text("2026-11-28T10:00:00Z")).unwrap(),
            Value::Timestamp("2026-11-28T10:00:00Z".parse().unwrap())
        );
        assert_eq!(typed(FieldKind::Text, None).unwrap(), Value::Null);
        let err = |kind, v| typed(kind, v).unwrap_err().to_string();
        assert_eq!(
            err(FieldKind::Integer, text("7.5")),
            "`7.5` is not a whole number"
        );
        // A plan holds what recon wrote: RFC 3339, never Unix seconds.
        assert_eq!(
            err(FieldKind::Timestamp, text("1764374399")),
            "`1764374399` is not a timestamp; expected RFC 3339 such as 2026-11-28T23:59:59Z"
        );
        assert!(err(FieldKind::Currency, text("zzz")).contains("unknown currency code `zzz`"));
        assert!(err(FieldKind::Money, text("10.50")).contains("found text"));
        let amount = PlanValue::Money(PlanMoney {
            minor: 1,
            currency: "USD".into(),
            amount: "0.01".into(),
        });
        assert_eq!(
            err(FieldKind::Text, Some(amount)),
            "expected text, found an amount"
        );
    }

    #[test]
    fn the_line_writer_writes_the_bytes_of_a_plan_line() {
        let jpy = Currency::parse("JPY").unwrap();
        let kwd = Currency::parse("KWD").unwrap();
        let hostile = "\"quoted\" \\ back\u{1}slash \u{202e} ünï \n newline";
        let mut records = vec![record()];
        records.push(Record {
            key: hostile.into(),
            values: vec![
                Value::Money(Money::from_minor(-123_456, kwd)),
                Value::Currency(jpy),
                Value::Text(hostile.into()),
                Value::Null,
                Value::Integer(i64::MIN),
            ],
        });
        records.push(Record {
            key: "ch_short".into(),
            values: vec![Value::Null, Value::Null],
        });
        // Field names out of key order and one that sorts before the rest.
        let mut schema = schema();
        schema.fields.push(Field {
            name: "A\"z".into(),
            kind: FieldKind::Text,
            compared: false,
        });
        records[0].values.push(Value::Text("=1+1".into()));
        let (plan_id, job) = ("charges-2026\"x", "ch\\arges");
        let writer = PlanLineWriter::new(plan_id, job, window(), &schema);
        let mut scratch = (Vec::new(), String::new());
        for r in &records {
            for action in [Action::Insert, Action::Update] {
                let mut fast = Vec::new();
                writer.write(&mut fast, action, r, &mut scratch).unwrap();
                let line = PlanLine::new(plan_id, job, window(), action, &schema, r);
                let mut slow = serde_json::to_vec(&line.to_json()).unwrap();
                slow.push(b'\n');
                assert_eq!(
                    String::from_utf8(fast).unwrap(),
                    String::from_utf8(slow).unwrap()
                );
            }
        }
    }
}
