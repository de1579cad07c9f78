//! The documented subset of the QuickBooks Online query language, parsed
//! and evaluated over the emulator's entities.
//!
//! Grammar ("Query operations and syntax",
//! https://developer.intuit.com/app/developer/qbo/docs/learn/explore-the-quickbooks-online-api/data-queries):
//!
//! ```text
//! SELECT * | count(*) FROM IntuitEntity
//!    [WHERE PropertyName Operator Value [AND ...]]
//!    [ORDERBY PropertyName [ASC|DESC]]
//!    [STARTPOSITION n] [MAXRESULTS n]
//! Operator = IN | = | < | > | <= | >= | LIKE
//! ```
//!
//! As that page documents: no projections, `OR`, `GROUP BY` or `JOIN`;
//! the `(a, b)` list form only after `IN`; `LIKE` with `%` only; one
//! entity, its name case sensitive. A quote inside a literal is written
//! `\'` (Intuit blog "Deep dive into QuickBooks Online data queries").
//! Modelling choices (not read on an Intuit page): keywords and property
//! names match case-insensitively; one ORDERBY key; only the properties in
//! [`filterable`] may be filtered or sorted on (`PrivateNote` and
//! `CustomField` are not), anything else is the parse error the API is
//! widely reported to give: 400, code `4000`, `Error parsing query`.

use std::cmp::Ordering;

use serde_json::Value;

/// A literal of a WHERE clause.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    /// `'text'` or a bare word.
    Text(String),
    /// `(a, b, …)` after `IN`.
    List(Vec<String>),
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Lt,
    Gt,
    Le,
    Ge,
    In,
    Like,
}

/// One `Property Op Value` condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    pub prop: String,
    pub op: Op,
    pub value: Lit,
}

/// A parsed statement.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub count: bool,
    pub entity: String,
    pub conds: Vec<Cond>,
    /// Property and descending.
    pub order: Option<(String, bool)>,
    /// 1-based.
    pub start: u64,
    pub max: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Sym(&'static str),
}

fn tokens(text: &str) -> Result<Vec<(Tok, usize)>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let at = i + 1;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'\'' {
            let mut s = String::new();
            i += 1;
            loop {
                match b.get(i) {
                    None => return Err(format!("unterminated string literal at column {at}")),
                    Some(b'\\') if b.get(i + 1) == Some(&b'\'') => {
                        s.push('\'');
                        i += 2;
                    }
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(_) => {
                        let ch = text[i..].chars().next().unwrap_or('\u{FFFD}');
                        s.push(ch);
                        i += ch.len_utf8();
                    }
                }
            }
            out.push((Tok::Str(s), at));
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.' {
            let start = i;
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'.' | b'-'))
            {
                i += 1;
            }
            out.push((Tok::Word(text[start..i].to_string()), at));
        } else {
            let two = text.get(i..i + 2).unwrap_or("");
            let sym = match two {
                "<=" => Some("<="),
                ">=" => Some(">="),
                "!=" | "<>" => return Err(format!("\"{two}\" at column {at}")),
                _ => None,
            };
            if let Some(s) = sym {
                out.push((Tok::Sym(s), at));
                i += 2;
                continue;
            }
            let s = match c {
                b'*' => "*",
                b'(' => "(",
                b')' => ")",
                b',' => ",",
                b'=' => "=",
                b'<' => "<",
                b'>' => ">",
                _ => return Err(format!("\"{}\" at column {at}", c as char)),
            };
            out.push((Tok::Sym(s), at));
            i += 1;
        }
    }
    Ok(out)
}

/// The entities the emulator serves to queries.
pub const ENTITIES: &[&str] = &["Invoice", "SalesReceipt", "Customer"];

/// Properties an entity may be filtered and sorted on (modelled on the
/// "filterable"/"sortable" marks of Intuit's entity reference; see the
/// module docs).
pub fn filterable(entity: &str) -> &'static [&'static str] {
    match entity {
        "Invoice" => &[
            "Id",
            "DocNumber",
            "TxnDate",
            "MetaData.CreateTime",
            "MetaData.LastUpdatedTime",
            "CustomerRef",
            "TotalAmt",
            "Balance",
        ],
        "SalesReceipt" => &[
            "Id",
            "DocNumber",
            "TxnDate",
            "MetaData.CreateTime",
            "MetaData.LastUpdatedTime",
            "CustomerRef",
            "TotalAmt",
        ],
        "Customer" => &[
            "Id",
            "DisplayName",
            "PrimaryEmailAddr",
            "Active",
            "MetaData.CreateTime",
            "MetaData.LastUpdatedTime",
        ],
        _ => &[],
    }
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn err(&self, expected: &str) -> String {
        match self.toks.get(self.pos) {
            Some((t, at)) => {
                let shown = match t {
                    Tok::Word(w) => w.clone(),
                    Tok::Str(s) => format!("'{s}'"),
                    Tok::Sym(s) => (*s).to_string(),
                };
                format!("Encountered \" \"{shown}\" \" at line 1, column {at}. Was expecting: {expected}")
            }
            None => format!("Encountered \"<EOF>\". Was expecting: {expected}"),
        }
    }

    fn keyword(&mut self, kw: &str) -> bool {
        if let Some(Tok::Word(w)) = self.peek() {
            if w.eq_ignore_ascii_case(kw) {
                self.pos += 1;
                return true;
            }
        }
        false
    }

    fn sym(&mut self, s: &str) -> bool {
        if self.peek()
            == Some(&Tok::Sym(match s {
                "*" => "*",
                "(" => "(",
                ")" => ")",
                "," => ",",
                _ => return false,
            }))
        {
            self.pos += 1;
            return true;
        }
        false
    }

    fn word(&mut self, what: &str) -> Result<String, String> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => Err(self.err(what)),
        }
    }

    fn number(&mut self, what: &str) -> Result<u64, String> {
        let at = self.pos;
        let w = self.word(what)?;
        w.parse::<u64>().map_err(|_| {
            self.pos = at;
            self.err(what)
        })
    }

    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            Some(Tok::Word(w)) if !is_keyword(w) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => Err(self.err("a value")),
        }
    }
}

fn is_keyword(w: &str) -> bool {
    [
        "AND",
        "OR",
        "ORDERBY",
        "STARTPOSITION",
        "MAXRESULTS",
        "WHERE",
        "FROM",
        "GROUP",
        "JOIN",
    ]
    .iter()
    .any(|k| k.eq_ignore_ascii_case(w))
}

/// The property as the entity spells it, when it may be filtered on.
fn resolve(entity: &str, prop: &str) -> Option<&'static str> {
    filterable(entity)
        .iter()
        .find(|p| p.eq_ignore_ascii_case(prop))
        .copied()
}

/// Parses a statement; the error is the `Detail` of a 4000 fault.
pub fn parse(text: &str) -> Result<Query, String> {
    let toks = tokens(text).map_err(|e| format!("QueryParserError: Encountered {e}"))?;
    let mut p = Parser { toks, pos: 0 };
    let wrap = |e: String| format!("QueryParserError: {e}");
    if !p.keyword("SELECT") {
        return Err(wrap(p.err("\"SELECT\"")));
    }
    let count = if p.sym("*") {
        false
    } else if p.keyword("count") {
        if !(p.sym("(") && p.sym("*") && p.sym(")")) {
            return Err(wrap(p.err("\"count(*)\"")));
        }
        true
    } else {
        return Err(wrap(
            p.err("\"*\" or \"count(*)\" (projections are not supported)"),
        ));
    };
    if !p.keyword("FROM") {
        return Err(wrap(p.err("\"FROM\"")));
    }
    let entity = p.word("an entity name").map_err(wrap)?;
    if p.sym(",") {
        return Err(wrap(p.err("one entity per query")));
    }
    if !ENTITIES.contains(&entity.as_str()) {
        return Err(format!(
            "QueryValidationError: Invalid entity name (entity names are case sensitive): {entity}"
        ));
    }
    let mut q = Query {
        count,
        entity: entity.clone(),
        conds: Vec::new(),
        order: None,
        start: 1,
        max: None,
    };
    if p.keyword("WHERE") {
        loop {
            let prop = p.word("a property name").map_err(wrap)?;
            let Some(canon) = resolve(&entity, &prop) else {
                return Err(format!(
                    "QueryValidationError: property '{prop}' is not queryable on {entity}"
                ));
            };
            let op = if p.keyword("IN") {
                Op::In
            } else if p.keyword("LIKE") {
                Op::Like
            } else {
                let op = match p.peek() {
                    Some(Tok::Sym("=")) => Op::Eq,
                    Some(Tok::Sym("<")) => Op::Lt,
                    Some(Tok::Sym(">")) => Op::Gt,
                    Some(Tok::Sym("<=")) => Op::Le,
                    Some(Tok::Sym(">=")) => Op::Ge,
                    _ => return Err(wrap(p.err("an operator: IN = < > <= >= LIKE"))),
                };
                p.pos += 1;
                op
            };
            let value = if op == Op::In {
                if !p.sym("(") {
                    return Err(wrap(p.err("\"(\"")));
                }
                let mut items = vec![p.value().map_err(wrap)?];
                while p.sym(",") {
                    items.push(p.value().map_err(wrap)?);
                }
                if !p.sym(")") {
                    return Err(wrap(p.err("\")\"")));
                }
                Lit::List(items)
            } else {
                if p.peek() == Some(&Tok::Sym("(")) {
                    return Err(wrap(p.err("a value (lists are only supported for IN)")));
                }
                Lit::Text(p.value().map_err(wrap)?)
            };
            q.conds.push(Cond {
                prop: canon.to_string(),
                op,
                value,
            });
            if p.keyword("AND") {
                continue;
            }
            break;
        }
    }
    if p.keyword("ORDERBY") {
        let prop = p.word("a property name").map_err(wrap)?;
        let Some(canon) = resolve(&entity, &prop) else {
            return Err(format!(
                "QueryValidationError: property '{prop}' is not sortable on {entity}"
            ));
        };
        let desc = if p.keyword("DESC") {
            true
        } else {
            p.keyword("ASC");
            false
        };
        q.order = Some((canon.to_string(), desc));
    }
    if p.keyword("STARTPOSITION") {
        q.start = p.number("a number").map_err(wrap)?.max(1);
    }
    if p.keyword("MAXRESULTS") {
        q.max = Some(p.number("a number").map_err(wrap)?);
    }
    if p.pos < p.toks.len() {
        return Err(wrap(p.err("<EOF>")));
    }
    Ok(q)
}

/// The value of a filterable property as text (`CustomerRef` by its
/// `value`, `PrimaryEmailAddr` by its `Address`).
pub fn prop_text(entity: &Value, prop: &str) -> Option<String> {
    let mut v = entity;
    for part in prop.split('.') {
        v = v.get(part)?;
    }
    if let Some(inner) = v.get("value").or_else(|| v.get("Address")) {
        v = inner;
    }
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A decimal text as an integer of millionths (exact; `None` past six
/// decimals or not a number).
pub fn micros(text: &str) -> Option<i128> {
    let t = text.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let (i, f) = t.split_once('.').unwrap_or((t, ""));
    if (i.is_empty() && f.is_empty())
        || !i.bytes().all(|b| b.is_ascii_digit())
        || !f.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let f = f.trim_end_matches('0');
    if f.len() > 6 {
        return None;
    }
    let mut v: i128 = if i.is_empty() { 0 } else { i.parse().ok()? };
    v = v.checked_mul(1_000_000)?;
    let frac: i128 = format!("{f:0<6}").parse().ok()?;
    v += frac;
    Some(if neg { -v } else { v })
}

/// Millionths as decimal text with exactly `decimals` places (`None`
/// when that would drop a non-zero digit).
pub fn format_micros(v: i128, decimals: u32) -> Option<String> {
    let decimals = decimals.min(6);
    let drop = 10i128.pow(6 - decimals);
    if v % drop != 0 {
        return None;
    }
    let scaled = v / drop;
    let neg = scaled < 0;
    let a = scaled.unsigned_abs();
    let unit = 10u128.pow(decimals);
    let s = if decimals == 0 {
        format!("{a}")
    } else {
        format!("{}.{:0w$}", a / unit, a % unit, w = decimals as usize)
    };
    Some(if neg { format!("-{s}") } else { s })
}

fn cmp_prop(prop: &str, a: &str, b: &str) -> Ordering {
    match prop {
        "Id" | "CustomerRef" => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => a.cmp(b),
        },
        "TotalAmt" | "Balance" => match (micros(a), micros(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => a.cmp(b),
        },
        p if p.ends_with("Time") => match (instant(a), instant(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => a.cmp(b),
        },
        _ => a.cmp(b),
    }
}

/// A datetime with an offset (`2024-05-29T23:22:07-07:00`, also
/// `-0700`), or a date (midnight UTC).
fn instant(text: &str) -> Option<jiff::Timestamp> {
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Some(t);
    }
    // `-0700` without a colon, as in Intuit's URI example.
    if text.len() > 5 {
        let (head, tail) = text.split_at(text.len() - 5);
        if (tail.starts_with('-') || tail.starts_with('+'))
            && tail[1..].bytes().all(|b| b.is_ascii_digit())
        {
            let fixed = format!("{head}{}:{}", &tail[..3], &tail[3..]);
            if let Ok(t) = fixed.parse::<jiff::Timestamp>() {
                return Some(t);
            }
        }
    }
    let d: jiff::civil::Date = text.parse().ok()?;
    jiff::tz::TimeZone::UTC
        .to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
        .ok()
}

fn like(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('%').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Whether `entity` satisfies every condition.
pub fn matches(q: &Query, entity: &Value) -> bool {
    q.conds.iter().all(|c| {
        let have = prop_text(entity, &c.prop);
        // `' '` stands for null.
        let is_null = |v: &str| v == " ";
        match (&c.value, have) {
            (Lit::Text(v), None) => is_null(v) && c.op == Op::Eq,
            (Lit::List(_), None) => false,
            (Lit::Text(v), Some(h)) => {
                if is_null(v) {
                    return false;
                }
                let o = cmp_prop(&c.prop, &h, v);
                match c.op {
                    Op::Eq => o == Ordering::Equal,
                    Op::Lt => o == Ordering::Less,
                    Op::Gt => o == Ordering::Greater,
                    Op::Le => o != Ordering::Greater,
                    Op::Ge => o != Ordering::Less,
                    Op::Like => like(v, &h),
                    Op::In => false,
                }
            }
            (Lit::List(vs), Some(h)) => vs
                .iter()
                .any(|v| cmp_prop(&c.prop, &h, v) == Ordering::Equal),
        }
    })
}

/// Sorts `rows` by the query's ORDERBY (else by `Id`).
pub fn sort(q: &Query, rows: &mut [Value]) {
    let (prop, desc) = q.order.clone().unwrap_or(("Id".into(), false));
    rows.sort_by(|a, b| {
        let x = prop_text(a, &prop).unwrap_or_default();
        let y = prop_text(b, &prop).unwrap_or_default();
        let o = cmp_prop(&prop, &x, &y).then_with(|| {
            cmp_prop(
                "Id",
                &prop_text(a, "Id").unwrap_or_default(),
                &prop_text(b, "Id").unwrap_or_default(),
            )
        });
        if desc {
            o.reverse()
        } else {
            o
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_documented_subset_parses() {
        let q = parse("select * from Invoice where DocNumber IN ('a', 'b\\'c') and TxnDate >= '2026-01-01' ORDERBY Id DESC STARTPOSITION 11 MAXRESULTS 10").unwrap();
        assert_eq!(q.entity, "Invoice");
        assert_eq!(q.conds.len(), 2);
        assert_eq!(q.conds[0].value, Lit::List(vec!["a".into(), "b'c".into()]));
        assert_eq!(q.order, Some(("Id".into(), true)));
        assert_eq!((q.start, q.max), (11, Some(10)));
        assert!(parse("SELECT count(*) FROM SalesReceipt").unwrap().count);
    }

    #[test]
    fn what_the_language_lacks_is_refused() {
        for (bad, want) in [
            ("SELECT Id FROM Invoice", "projections"),
            ("SELECT * FROM invoice", "case sensitive"),
            ("SELECT * FROM Invoice, Customer", "one entity"),
            ("SELECT * FROM Invoice WHERE Id = '1' OR Id = '2'", "OR"),
            (
                "SELECT * FROM Invoice WHERE PrivateNote = 'x'",
                "not queryable",
            ),
            (
                "SELECT * FROM Invoice WHERE CustomField = 'x'",
                "not queryable",
            ),
            (
                "SELECT * FROM Invoice WHERE Id = ('1', '2')",
                "only supported for IN",
            ),
            ("SELECT * FROM Invoice WHERE Id != '1'", "!="),
            ("SELECT * FROM Invoice WHERE DocNumber = 'x", "unterminated"),
            ("SELECT * FROM Invoice GROUP BY Id", "GROUP"),
            ("SELECT * FROM Invoice ORDERBY Id, TxnDate", ","),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn conditions_compare_by_the_property_type() {
        let inv = json!({"Id": "12", "DocNumber": "ch_1", "TxnDate": "2026-03-02",
            "TotalAmt": 10.50, "CustomerRef": {"value": "7"},
            "MetaData": {"CreateTime": "2026-03-02T10:00:00-08:00"}});
        let m = |s: &str| matches(&parse(s).unwrap(), &inv);
        assert!(m("SELECT * FROM Invoice WHERE Id > '9'"));
        assert!(m("SELECT * FROM Invoice WHERE TotalAmt = '10.5'"));
        assert!(m("SELECT * FROM Invoice WHERE CustomerRef = '7'"));
        assert!(m("SELECT * FROM Invoice WHERE DocNumber LIKE 'ch%'"));
        assert!(!m("SELECT * FROM Invoice WHERE DocNumber LIKE 'x%'"));
        assert!(m(
            "SELECT * FROM Invoice WHERE MetaData.CreateTime >= '2026-03-02T18:00:00Z'"
        ));
        assert!(!m(
            "SELECT * FROM Invoice WHERE MetaData.CreateTime > '2026-03-02T18:00:00Z'"
        ));
        assert!(m(
            "SELECT * FROM Invoice WHERE MetaData.CreateTime < '2026-03-02T11:00:00-0800'"
        ));
        assert!(m(
            "SELECT * FROM Invoice WHERE TxnDate >= '2026-03-01' AND TxnDate < '2026-03-03'"
        ));
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(micros("10.50"), Some(10_500_000));
        assert_eq!(micros("-0.001"), Some(-1_000));
        assert_eq!(micros("1.0000001"), None);
        assert_eq!(format_micros(10_500_000, 2).as_deref(), Some("10.50"));
        assert_eq!(format_micros(1_234_000, 3).as_deref(), Some("1.234"));
        assert_eq!(format_micros(500_000_000, 0).as_deref(), Some("500"));
        assert_eq!(format_micros(1_500_000, 0), None);
    }
}
