//! `POST /crm/v3/objects/{objectType}/search`: request parsing, filter
//! evaluation, sorting, and the query cache that keeps paging cheap.
//!
//! Semantics, per HubSpot's "Search the CRM" guide:
//!
//! * `filterGroups` are ORed, the filters inside a group ANDed; at most five
//!   groups, six filters per group and 18 filters in all (more is a `400`).
//! * One sort rule (`{"propertyName", "direction": "ASCENDING"|"DESCENDING"}`;
//!   the legacy string form `"createdate"` / `"-createdate"` is accepted too).
//!   Without one, results come by record id ascending. Ties are broken by
//!   record id ascending, and records without the sort property come last —
//!   the emulator's deterministic choices; HubSpot documents neither.
//! * `limit` 0..=200 (default 10); `after` is the offset of the page, as a
//!   string, echoed back in `paging.next.after`.
//! * "The search endpoints are limited to 10,000 total results for any given
//!   query" — requesting a page that would reach past result 10,000 is a
//!   `400 VALIDATION_ERROR` (AWS Glue's HubSpot connector notes: "Any partition
//!   having more than 10,000 records will result in a 400 error"); `total`
//!   still counts every match.
//! * Values compare by the property's type: `number`, `date` and `datetime`
//!   numerically (dates as epoch milliseconds; filter values may be epoch ms
//!   or ISO 8601), everything else as strings (case-sensitive).
//!
//! # Cost
//!
//! A query (filters + sort + free text) is evaluated once: every record of the
//! type is tested, the matches sorted, and the resulting id list cached,
//! keyed by the query and the type's version (bumped by every write). Paging
//! through the same query — the same body with another `after` — then costs a
//! cache lookup plus `limit` record lookups, not a scan. A cached list also
//! expires when a record hidden by `search_lag` becomes visible.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::time::Instant;

use serde_json::Value;

use super::store::{parse_datetime_ms, Record, TypeStore};
use super::PropertyType;

pub(crate) const MAX_RESULTS: usize = 10_000;
pub(crate) const MAX_LIMIT: usize = 200;
const MAX_GROUPS: usize = 5;
const MAX_FILTERS_PER_GROUP: usize = 6;
const MAX_FILTERS: usize = 18;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Neq,
    Gt,
    Gte,
    Lt,
    Lte,
    Between,
    In,
    NotIn,
    HasProperty,
    NotHasProperty,
    ContainsToken,
    NotContainsToken,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "EQ" => Op::Eq,
            "NEQ" => Op::Neq,
            "GT" => Op::Gt,
            "GTE" => Op::Gte,
            "LT" => Op::Lt,
            "LTE" => Op::Lte,
            "BETWEEN" => Op::Between,
            "IN" => Op::In,
            "NOT_IN" => Op::NotIn,
            "HAS_PROPERTY" => Op::HasProperty,
            "NOT_HAS_PROPERTY" => Op::NotHasProperty,
            "CONTAINS_TOKEN" => Op::ContainsToken,
            "NOT_CONTAINS_TOKEN" => Op::NotContainsToken,
            _ => return None,
        })
    }
}

/// A filter as received.
#[derive(Clone, Debug)]
struct RawFilter {
    property: String,
    op: Op,
    value: Option<Value>,
    high: Option<Value>,
    values: Vec<Value>,
}

/// A validated search request, not yet bound to a type's definitions.
#[derive(Clone, Debug)]
pub(crate) struct SearchRequest {
    groups: Vec<Vec<RawFilter>>,
    /// `(property, descending)`.
    sort: Option<(String, bool)>,
    query: Option<String>,
    pub properties: Vec<String>,
    pub limit: usize,
    pub after: usize,
    /// Identifies the result list (everything but properties/limit/after).
    pub cache_key: String,
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn offset(v: &Value) -> Option<usize> {
    match v {
        Value::String(s) => s.trim().parse().ok(),
        Value::Number(n) => n.as_u64().map(|n| n as usize),
        _ => None,
    }
}

/// Parses a request body; `Err` is the message of a `400 VALIDATION_ERROR`.
pub(crate) fn parse(object_type: &str, body: &Value) -> Result<SearchRequest, String> {
    let obj = body
        .as_object()
        .ok_or("The request body must be a JSON object.")?;
    let limit = match obj.get("limit") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if n as usize <= MAX_LIMIT => n as usize,
            _ => {
                return Err(format!(
                    "limit must be an integer between 0 and {MAX_LIMIT}; got {v}"
                ))
            }
        },
    };
    let after = match obj.get("after") {
        None | Some(Value::Null) => 0,
        Some(v) => offset(v).ok_or_else(|| format!("after must be a paging offset; got {v}"))?,
    };
    let properties = match obj.get("properties") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|p| p.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("properties must be an array of property names")?,
        Some(_) => return Err("properties must be an array of property names".into()),
    };
    let query = match obj.get("query") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(s.trim().to_lowercase()),
        Some(_) => return Err("query must be a string".into()),
    };

    let mut groups = Vec::new();
    let mut total_filters = 0;
    match obj.get("filterGroups") {
        None | Some(Value::Null) => {}
        Some(Value::Array(gs)) => {
            if gs.len() > MAX_GROUPS {
                return Err(format!(
                    "Too many filter groups ({}); the maximum is {MAX_GROUPS}.",
                    gs.len()
                ));
            }
            for g in gs {
                let filters = match g.get("filters") {
                    Some(Value::Array(f)) => f,
                    None | Some(Value::Null) => continue,
                    Some(_) => return Err("filters must be an array".into()),
                };
                if filters.len() > MAX_FILTERS_PER_GROUP {
                    return Err(format!(
                        "Too many filters in a filter group ({}); the maximum is {MAX_FILTERS_PER_GROUP}.",
                        filters.len()
                    ));
                }
                total_filters += filters.len();
                let mut group = Vec::with_capacity(filters.len());
                for f in filters {
                    group.push(parse_filter(f)?);
                }
                if !group.is_empty() {
                    groups.push(group);
                }
            }
            if total_filters > MAX_FILTERS {
                return Err(format!(
                    "Too many filters ({total_filters}); the maximum is {MAX_FILTERS} in all."
                ));
            }
        }
        Some(_) => return Err("filterGroups must be an array".into()),
    }

    let sort = match obj.get("sorts") {
        None | Some(Value::Null) => None,
        Some(Value::Array(s)) if s.is_empty() => None,
        Some(Value::Array(s)) if s.len() == 1 => Some(parse_sort(&s[0])?),
        Some(Value::Array(_)) => return Err("Only one sort rule is supported.".into()),
        Some(_) => return Err("sorts must be an array".into()),
    };

    let cache_key = format!(
        "{object_type}\u{1}{}\u{1}{}\u{1}{}",
        obj.get("filterGroups").unwrap_or(&Value::Null),
        obj.get("sorts").unwrap_or(&Value::Null),
        query.as_deref().unwrap_or(""),
    );
    Ok(SearchRequest {
        groups,
        sort,
        query,
        properties,
        limit,
        after,
        cache_key,
    })
}

fn parse_filter(f: &Value) -> Result<RawFilter, String> {
    let property = f
        .get("propertyName")
        .and_then(Value::as_str)
        .ok_or("Each filter needs a propertyName.")?
        .to_owned();
    let op_name = f
        .get("operator")
        .and_then(Value::as_str)
        .ok_or("Each filter needs an operator.")?;
    let op = Op::parse(op_name).ok_or_else(|| format!("Unknown filter operator {op_name}."))?;
    let value = f.get("value").filter(|v| !v.is_null()).cloned();
    let high = f.get("highValue").filter(|v| !v.is_null()).cloned();
    let values = match f.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(format!("values of the {op_name} filter must be an array.")),
    };
    let needs_value = !matches!(
        op,
        Op::HasProperty | Op::NotHasProperty | Op::In | Op::NotIn
    );
    if needs_value && value.is_none() {
        return Err(format!("The {op_name} filter on {property} needs a value."));
    }
    if op == Op::Between && high.is_none() {
        return Err(format!(
            "The BETWEEN filter on {property} needs a highValue."
        ));
    }
    if matches!(op, Op::In | Op::NotIn) && values.is_empty() {
        return Err(format!("The {op_name} filter on {property} needs values."));
    }
    Ok(RawFilter {
        property,
        op,
        value,
        high,
        values,
    })
}

fn parse_sort(s: &Value) -> Result<(String, bool), String> {
    match s {
        Value::String(name) => Ok(match name.strip_prefix('-') {
            Some(n) => (n.to_owned(), true),
            None => (name.clone(), false),
        }),
        Value::Object(o) => {
            let name = o
                .get("propertyName")
                .and_then(Value::as_str)
                .ok_or("A sort needs a propertyName.")?;
            let desc = match o.get("direction").and_then(Value::as_str) {
                None | Some("ASCENDING") => false,
                Some("DESCENDING") => true,
                Some(d) => return Err(format!("Unknown sort direction {d}.")),
            };
            Ok((name.to_owned(), desc))
        }
        _ => Err("A sort must be an object.".into()),
    }
}

/// A filter operand, converted for the property's type.
#[derive(Clone, Debug)]
enum Operand {
    Num(f64),
    Text(String),
}

struct Filter {
    property: String,
    op: Op,
    operands: Vec<Operand>,
}

fn operand(property: &str, kind: PropertyType, v: &Value) -> Result<Operand, String> {
    let text = scalar_text(v)
        .ok_or_else(|| format!("Filter value {v} for {property} is not a scalar."))?;
    if !kind.numeric() {
        return Ok(Operand::Text(text));
    }
    let n = match kind {
        PropertyType::Number => text.trim().parse::<f64>().ok(),
        _ => parse_datetime_ms(&text).map(|ms| ms as f64),
    };
    n.map(Operand::Num).ok_or_else(|| {
        format!(
            "Filter value '{text}' for {property} is not a valid {}.",
            kind.name()
        )
    })
}

fn compile(req: &SearchRequest, ts: Option<&TypeStore>) -> Result<Vec<Vec<Filter>>, String> {
    let kind = |p: &str| ts.map_or(PropertyType::String, |t| t.kind(p));
    req.groups
        .iter()
        .map(|g| {
            g.iter()
                .map(|f| {
                    let k = kind(&f.property);
                    let mut operands = Vec::new();
                    if matches!(f.op, Op::ContainsToken | Op::NotContainsToken) {
                        let t = f.value.as_ref().and_then(scalar_text).unwrap_or_default();
                        operands.push(Operand::Text(t.trim_matches('*').to_lowercase()));
                    } else {
                        for v in f.value.iter().chain(f.high.iter()).chain(f.values.iter()) {
                            operands.push(operand(&f.property, k, v)?);
                        }
                    }
                    Ok(Filter {
                        property: f.property.clone(),
                        op: f.op,
                        operands,
                    })
                })
                .collect()
        })
        .collect()
}

fn compare(stored: &super::store::Stored, operand: &Operand) -> Option<Ordering> {
    match operand {
        Operand::Num(n) => stored.num?.partial_cmp(n),
        Operand::Text(t) => Some(stored.text.as_str().cmp(t.as_str())),
    }
}

impl Filter {
    fn matches(&self, rec: &Record) -> bool {
        let stored = rec.props.get(&self.property);
        let cmp = |i: usize| stored.and_then(|s| compare(s, &self.operands[i]));
        let any_eq = || {
            stored.is_some_and(|s| {
                self.operands
                    .iter()
                    .any(|o| compare(s, o) == Some(Ordering::Equal))
            })
        };
        match self.op {
            Op::Eq => cmp(0) == Some(Ordering::Equal),
            Op::Neq => cmp(0) != Some(Ordering::Equal),
            Op::Gt => cmp(0) == Some(Ordering::Greater),
            Op::Gte => matches!(cmp(0), Some(Ordering::Greater | Ordering::Equal)),
            Op::Lt => cmp(0) == Some(Ordering::Less),
            Op::Lte => matches!(cmp(0), Some(Ordering::Less | Ordering::Equal)),
            Op::Between => {
                matches!(cmp(0), Some(Ordering::Greater | Ordering::Equal))
                    && matches!(cmp(1), Some(Ordering::Less | Ordering::Equal))
            }
            Op::In => any_eq(),
            Op::NotIn => !any_eq(),
            Op::HasProperty => stored.is_some(),
            Op::NotHasProperty => stored.is_none(),
            Op::ContainsToken | Op::NotContainsToken => {
                let Operand::Text(token) = &self.operands[0] else {
                    return false;
                };
                let has = stored.is_some_and(|s| s.text.to_lowercase().contains(token.as_str()));
                has == (self.op == Op::ContainsToken)
            }
        }
    }
}

/// The matching record ids of a query, in result order, and when the list
/// goes stale on its own (a hidden record becoming searchable).
pub(crate) struct Matches {
    pub ids: Arc<Vec<u64>>,
    pub expires: Option<Instant>,
}

/// Evaluates `req` over every record of `ts` visible to search at `now`.
pub(crate) fn evaluate(
    req: &SearchRequest,
    ts: Option<&TypeStore>,
    now: Instant,
) -> Result<Matches, String> {
    let groups = compile(req, ts)?;
    let Some(ts) = ts else {
        return Ok(Matches {
            ids: Arc::new(Vec::new()),
            expires: None,
        });
    };
    let mut expires: Option<Instant> = None;
    let mut hits: Vec<&Record> = Vec::new();
    for rec in ts.records.values() {
        if !rec.searchable(now) {
            let at = rec.searchable_at.unwrap();
            expires = Some(expires.map_or(at, |e| e.min(at)));
            continue;
        }
        let filtered = groups.is_empty() || groups.iter().any(|g| g.iter().all(|f| f.matches(rec)));
        let texted = req.query.as_ref().is_none_or(|q| {
            rec.props
                .values()
                .any(|s| s.text.to_lowercase().contains(q.as_str()))
        });
        if filtered && texted {
            hits.push(rec);
        }
    }
    if let Some((prop, desc)) = &req.sort {
        let numeric = ts.kind(prop).numeric();
        hits.sort_by(|a, b| {
            let (x, y) = (a.props.get(prop), b.props.get(prop));
            let primary = match (x, y) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(x), Some(y)) => {
                    let o = if numeric {
                        x.num.partial_cmp(&y.num).unwrap_or(Ordering::Equal)
                    } else {
                        x.text.cmp(&y.text)
                    };
                    if *desc {
                        o.reverse()
                    } else {
                        o
                    }
                }
            };
            primary.then(a.id.cmp(&b.id))
        });
    }
    Ok(Matches {
        ids: Arc::new(hits.iter().map(|r| r.id).collect()),
        expires,
    })
}

struct CacheEntry {
    key: String,
    version: u64,
    expires: Option<Instant>,
    ids: Arc<Vec<u64>>,
}

/// The most recent query results (a handful: a client pages one query at a
/// time, perhaps a few concurrently).
#[derive(Default)]
pub(crate) struct QueryCache {
    entries: VecDeque<CacheEntry>,
}

const CACHE_ENTRIES: usize = 16;

impl QueryCache {
    pub fn get(&mut self, key: &str, version: u64, now: Instant) -> Option<Arc<Vec<u64>>> {
        let pos = self.entries.iter().position(|e| e.key == key)?;
        let e = &self.entries[pos];
        if e.version == version && e.expires.is_none_or(|t| now < t) {
            Some(e.ids.clone())
        } else {
            self.entries.remove(pos);
            None
        }
    }

    pub fn put(&mut self, key: String, version: u64, m: &Matches) {
        self.entries.retain(|e| e.key != key);
        if self.entries.len() >= CACHE_ENTRIES {
            self.entries.pop_front();
        }
        self.entries.push_back(CacheEntry {
            key,
            version,
            expires: m.expires,
            ids: m.ids.clone(),
        });
    }
}
