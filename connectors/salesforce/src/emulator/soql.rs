//! A SOQL subset: parser, binder (names and literal types checked against
//! the object's describe) and evaluator.
//!
//! ```text
//! SELECT field, … | COUNT()  FROM object
//!   [WHERE cond] [ORDER BY field [ASC|DESC] [NULLS FIRST|LAST], …]
//!   [LIMIT n] [OFFSET n]
//! cond  := term {AND term} | term {OR term}     -- mixing AND/OR needs ( )
//! term  := NOT term | ( cond ) | field op value
//!        | field [NOT] IN ( value, … ) | field LIKE 'pattern'
//! op    := = != <> < <= > >=
//! value := 'string' | number | TRUE | FALSE | NULL
//!        | 2026-01-02 | 2026-01-02T03:04:05Z | 2026-01-02T03:04:05.000+01:00
//! ```
//!
//! What the documentation says and the emulator does:
//!
//! * Keywords and field and object names are case-insensitive.
//! * "Parentheses are required whenever you mix the operators" (SOQL
//!   "Logical Operators"): `a AND b OR c` is `MALFORMED_QUERY`. `NOT` applies
//!   to the term after it.
//! * String literals take the escapes of "Quoted String Escape Sequences":
//!   `\n \N \r \R \t \T \b \B \f \F \" \' \\ \uXXXX`, and — in a `LIKE`
//!   pattern only — `\_` and `\%` for a literal `_` or `%`. "If you use a
//!   backslash character in any other context, an error occurs": any other
//!   escape, and `\_`/`\%` outside `LIKE`, is `MALFORMED_QUERY`. `\b` is
//!   the bell character (U+0007), as the English table says ("Bell"; the
//!   Japanese translation says backspace).
//! * Dates and datetimes are unquoted ("Date Formats and Date Literals");
//!   a datetime literal against a date field, a quoted value against a
//!   number or date field, or a number against a text field is refused.
//!   Relative date literals (`TODAY`, `LAST_N_DAYS:n`) are not supported.
//! * "Comparisons on strings are case-sensitive for unique case-sensitive
//!   fields. For all other fields, comparisons are case-insensitive"
//!   (SOQL "Comparison Operators"); `LIKE` the same; `''` is null.
//! * `!=` and `NOT IN` match records whose value is null; `<`, `>` … never do.
//! * Nulls sort first unless `NULLS LAST`; ties keep Id order (creation).
//! * "SOQL statements cannot exceed 100,000 characters", strings in `WHERE`
//!   4,000 characters ("SOQL and SOSL Limits for Search Queries"; SOQL
//!   "WHERE"), `OFFSET` at most 2,000 (SOQL "OFFSET").
//! * Unknown objects are `INVALID_TYPE`; unknown fields `INVALID_FIELD`;
//!   syntax errors `MALFORMED_QUERY` with `ERROR at Row:r:Column:c` and the
//!   unexpected token, as Salesforce words them.

use std::cmp::Ordering;

use super::store::{Object, Record, Store};
use super::values::{cmp_num, parse_date, parse_datetime, Dec, Val};
use super::FieldType;

/// The documented maximum SOQL statement length.
pub(crate) const MAX_SOQL: usize = 100_000;
const MAX_STRING: usize = 4_000;
const MAX_OFFSET: usize = 2_000;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SoqlError {
    pub code: &'static str,
    pub message: String,
}

fn malformed(message: impl Into<String>) -> SoqlError {
    SoqlError {
        code: "MALFORMED_QUERY",
        message: message.into(),
    }
}

// ---------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Pat {
    /// `%`
    Any,
    /// `_`
    One,
    Ch(char),
}

#[derive(Debug, Clone, PartialEq)]
struct StrLit {
    /// The value, escapes resolved (`\_` → `_`).
    value: String,
    /// The same text as a `LIKE` pattern.
    pattern: Vec<Pat>,
    /// Whether `\_` or `\%` occurred (valid in `LIKE` only).
    like_escape: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(StrLit),
    Num(String),
    DateTime(i64),
    Date(jiff::civil::Date),
    Comma,
    LParen,
    RParen,
    Op(&'static str),
    End,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    /// Byte offset in the statement.
    at: usize,
    text: String,
}

fn position(src: &str, at: usize) -> (usize, usize) {
    let before = &src[..at.min(src.len())];
    let row = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (row, col)
}

fn unexpected(src: &str, t: &Token) -> SoqlError {
    let (row, col) = position(src, t.at);
    let shown = if t.tok == Tok::End { "<EOF>" } else { &t.text };
    malformed(format!(
        "\n{src}\nERROR at Row:{row}:Column:{col}\nunexpected token: '{shown}'"
    ))
}

fn lex(src: &str) -> Result<Vec<Token>, SoqlError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let err_at = |at: usize, what: String| {
        let (row, col) = position(src, at);
        malformed(format!("\n{src}\nERROR at Row:{row}:Column:{col}\n{what}"))
    };
    while i < b.len() {
        let c = b[i];
        let start = i;
        let tok = match c {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'(' => {
                i += 1;
                Tok::LParen
            }
            b')' => {
                i += 1;
                Tok::RParen
            }
            b',' => {
                i += 1;
                Tok::Comma
            }
            b'=' => {
                i += 1;
                Tok::Op("=")
            }
            b'!' if b.get(i + 1) == Some(&b'=') => {
                i += 2;
                Tok::Op("!=")
            }
            b'<' => match b.get(i + 1) {
                Some(b'=') => {
                    i += 2;
                    Tok::Op("<=")
                }
                Some(b'>') => {
                    i += 2;
                    Tok::Op("!=")
                }
                _ => {
                    i += 1;
                    Tok::Op("<")
                }
            },
            b'>' => {
                if b.get(i + 1) == Some(&b'=') {
                    i += 2;
                    Tok::Op(">=")
                } else {
                    i += 1;
                    Tok::Op(">")
                }
            }
            b'\'' => {
                let (lit, end) = lex_string(src, i).map_err(|(at, m)| err_at(at, m))?;
                i = end;
                Tok::Str(lit)
            }
            b'0'..=b'9' | b'-' | b'+' => {
                let end = src[i..]
                    .find(|ch: char| ch.is_whitespace() || matches!(ch, ',' | '(' | ')'))
                    .map_or(b.len(), |n| i + n);
                let word = &src[i..end];
                i = end;
                if word.len() >= 10 && word.as_bytes().get(4) == Some(&b'-') {
                    if word.len() == 10 {
                        Tok::Date(parse_date(word).ok_or_else(|| {
                            err_at(
                                start,
                                format!(
                                    "line 1:{start} no viable alternative at character '{word}'"
                                ),
                            )
                        })?)
                    } else {
                        Tok::DateTime(parse_datetime(word).ok_or_else(|| {
                            err_at(start, format!("invalid datetime literal: {word}"))
                        })?)
                    }
                } else if Dec::parse(word).is_some() && !word.contains(['e', 'E']) {
                    Tok::Num(word.to_owned())
                } else {
                    return Err(err_at(start, format!("unexpected token: '{word}'")));
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let end = src[i..]
                    .find(|ch: char| {
                        !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '.' || ch == ':')
                    })
                    .map_or(b.len(), |n| i + n);
                let word = &src[i..end];
                i = end;
                Tok::Ident(word.to_owned())
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(err_at(start, format!("unexpected token: '{ch}'")));
            }
        };
        out.push(Token {
            tok,
            at: start,
            text: src[start..i].to_owned(),
        });
    }
    out.push(Token {
        tok: Tok::End,
        at: src.len(),
        text: String::new(),
    });
    Ok(out)
}

/// A `'…'` literal starting at byte `start`; returns it and the byte after
/// the closing quote.
fn lex_string(src: &str, start: usize) -> Result<(StrLit, usize), (usize, String)> {
    let mut value = String::new();
    let mut pattern = Vec::new();
    let mut like_escape = false;
    let mut chars = src[start + 1..].char_indices();
    let at = |n: usize| start + 1 + n;
    loop {
        let Some((n, c)) = chars.next() else {
            return Err((start, "unterminated string literal".into()));
        };
        match c {
            '\'' => {
                if value.chars().count() > MAX_STRING {
                    return Err((
                        start,
                        format!("string literal longer than {MAX_STRING} characters"),
                    ));
                }
                return Ok((
                    StrLit {
                        value,
                        pattern,
                        like_escape,
                    },
                    at(n) + 1,
                ));
            }
            '\\' => {
                let Some((_, e)) = chars.next() else {
                    return Err((start, "unterminated string literal".into()));
                };
                let ch = match e {
                    'n' | 'N' => '\n',
                    'r' | 'R' => '\r',
                    't' | 'T' => '\t',
                    'b' | 'B' => '\u{7}',
                    'f' | 'F' => '\u{c}',
                    '"' => '"',
                    '\'' => '\'',
                    '\\' => '\\',
                    '_' | '%' => {
                        like_escape = true;
                        value.push(e);
                        pattern.push(Pat::Ch(e));
                        continue;
                    }
                    'u' => {
                        let hex: String = chars.by_ref().take(4).map(|(_, h)| h).collect();
                        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            Some(ch) if hex.len() == 4 => ch,
                            _ => {
                                return Err((
                                    at(n),
                                    format!(
                                        "Invalid string literal: illegal unicode escape '\\u{hex}'"
                                    ),
                                ))
                            }
                        }
                    }
                    other => {
                        return Err((
                            at(n),
                            format!("Invalid string literal: illegal escape sequence '\\{other}'"),
                        ))
                    }
                };
                value.push(ch);
                pattern.push(Pat::Ch(ch));
            }
            '%' => {
                value.push(c);
                pattern.push(Pat::Any);
            }
            '_' => {
                value.push(c);
                pattern.push(Pat::One);
            }
            _ => {
                value.push(c);
                pattern.push(Pat::Ch(c));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Parser

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone)]
enum Cond {
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Not(Box<Cond>),
    Cmp(Token, Op, Token),
    In(Token, bool, Vec<Token>),
    Like(Token, Token),
}

struct Parsed {
    count: bool,
    fields: Vec<Token>,
    object: Token,
    filter: Option<Cond>,
    order: Vec<(Token, bool, bool)>,
    limit: Option<usize>,
    offset: Option<usize>,
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
}

fn is_kw(t: &Token, kw: &str) -> bool {
    matches!(&t.tok, Tok::Ident(w) if w.eq_ignore_ascii_case(kw))
}

const KEYWORDS: &[&str] = &[
    "SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "IN", "LIKE", "ORDER", "BY", "ASC", "DESC",
    "NULLS", "FIRST", "LAST", "LIMIT", "OFFSET", "TRUE", "FALSE", "NULL",
];

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.toks[self.pos]
    }

    fn next(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn err(&self) -> SoqlError {
        unexpected(self.src, self.peek())
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if is_kw(self.peek(), kw) {
            self.next();
            true
        } else {
            false
        }
    }

    fn expect_kw(&mut self, kw: &str) -> Result<(), SoqlError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(self.err())
        }
    }

    fn expect(&mut self, tok: Tok) -> Result<(), SoqlError> {
        if self.peek().tok == tok {
            self.next();
            Ok(())
        } else {
            Err(self.err())
        }
    }

    fn name(&mut self) -> Result<Token, SoqlError> {
        match &self.peek().tok {
            Tok::Ident(w) if !KEYWORDS.iter().any(|k| w.eq_ignore_ascii_case(k)) => Ok(self.next()),
            _ => Err(self.err()),
        }
    }

    fn count(&mut self) -> Result<usize, SoqlError> {
        match &self.peek().tok {
            Tok::Num(n) => match n.parse::<usize>() {
                Ok(v) => {
                    self.next();
                    Ok(v)
                }
                Err(_) => Err(self.err()),
            },
            _ => Err(self.err()),
        }
    }

    fn query(&mut self) -> Result<Parsed, SoqlError> {
        self.expect_kw("SELECT")?;
        let mut count = false;
        let mut fields = Vec::new();
        if is_kw(self.peek(), "COUNT")
            && self
                .toks
                .get(self.pos + 1)
                .is_some_and(|t| t.tok == Tok::LParen)
        {
            self.next();
            self.next();
            if self.peek().tok != Tok::RParen {
                return Err(malformed(
                    "the emulator supports COUNT() only, not COUNT(field) or other aggregate functions",
                ));
            }
            self.next();
            count = true;
        } else {
            loop {
                fields.push(self.name()?);
                if self.peek().tok != Tok::Comma {
                    break;
                }
                self.next();
            }
        }
        self.expect_kw("FROM")?;
        let object = self.name()?;
        let filter = if self.eat_kw("WHERE") {
            Some(self.cond()?)
        } else {
            None
        };
        let mut order = Vec::new();
        if self.eat_kw("ORDER") {
            self.expect_kw("BY")?;
            loop {
                let f = self.name()?;
                let desc = if self.eat_kw("DESC") {
                    true
                } else {
                    self.eat_kw("ASC");
                    false
                };
                let nulls_last = if self.eat_kw("NULLS") {
                    if self.eat_kw("LAST") {
                        true
                    } else {
                        self.expect_kw("FIRST")?;
                        false
                    }
                } else {
                    false
                };
                order.push((f, desc, nulls_last));
                if self.peek().tok != Tok::Comma {
                    break;
                }
                self.next();
            }
        }
        let limit = if self.eat_kw("LIMIT") {
            Some(self.count()?)
        } else {
            None
        };
        let offset = if self.eat_kw("OFFSET") {
            Some(self.count()?)
        } else {
            None
        };
        if self.peek().tok != Tok::End {
            return Err(self.err());
        }
        Ok(Parsed {
            count,
            fields,
            object,
            filter,
            order,
            limit,
            offset,
        })
    }

    fn cond(&mut self) -> Result<Cond, SoqlError> {
        let first = self.term()?;
        let joiner = if is_kw(self.peek(), "AND") {
            "AND"
        } else if is_kw(self.peek(), "OR") {
            "OR"
        } else {
            return Ok(first);
        };
        let mut terms = vec![first];
        while self.eat_kw(joiner) {
            terms.push(self.term()?);
        }
        // Mixing AND and OR at one level needs parentheses.
        if is_kw(self.peek(), "AND") || is_kw(self.peek(), "OR") {
            return Err(self.err());
        }
        Ok(if joiner == "AND" {
            Cond::And(terms)
        } else {
            Cond::Or(terms)
        })
    }

    fn term(&mut self) -> Result<Cond, SoqlError> {
        if self.eat_kw("NOT") {
            return Ok(Cond::Not(Box::new(self.term()?)));
        }
        if self.peek().tok == Tok::LParen {
            self.next();
            let c = self.cond()?;
            self.expect(Tok::RParen)?;
            return Ok(c);
        }
        let field = self.name()?;
        if self.eat_kw("LIKE") {
            return match self.peek().tok {
                Tok::Str(_) => Ok(Cond::Like(field, self.next())),
                _ => Err(self.err()),
            };
        }
        let not = self.eat_kw("NOT");
        if self.eat_kw("IN") {
            self.expect(Tok::LParen)?;
            if is_kw(self.peek(), "SELECT") {
                return Err(malformed(
                    "the emulator does not support semi-joins (IN (SELECT …))",
                ));
            }
            let mut values = vec![self.value()?];
            while self.peek().tok == Tok::Comma {
                self.next();
                values.push(self.value()?);
            }
            self.expect(Tok::RParen)?;
            return Ok(Cond::In(field, not, values));
        }
        if not {
            return Err(self.err());
        }
        let op = match self.peek().tok {
            Tok::Op("=") => Op::Eq,
            Tok::Op("!=") => Op::Ne,
            Tok::Op("<") => Op::Lt,
            Tok::Op("<=") => Op::Le,
            Tok::Op(">") => Op::Gt,
            Tok::Op(">=") => Op::Ge,
            _ => return Err(self.err()),
        };
        self.next();
        Ok(Cond::Cmp(field, op, self.value()?))
    }

    fn value(&mut self) -> Result<Token, SoqlError> {
        match &self.peek().tok {
            Tok::Str(_) | Tok::Num(_) | Tok::DateTime(_) | Tok::Date(_) => Ok(self.next()),
            Tok::Ident(w)
                if ["TRUE", "FALSE", "NULL"]
                    .iter()
                    .any(|k| w.eq_ignore_ascii_case(k)) =>
            {
                Ok(self.next())
            }
            _ => Err(self.err()),
        }
    }
}

// ---------------------------------------------------------------------------
// Binding

#[derive(Debug, Clone)]
enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    Cmp(usize, Op, Val),
    In(usize, bool, Vec<Val>),
    Like(usize, Vec<Pat>),
}

/// A query bound to its object.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The object's API name.
    pub object: String,
    pub count: bool,
    /// Selected field indexes, in SELECT order.
    pub select: Vec<usize>,
    filter: Option<Filter>,
    order: Vec<(usize, bool, bool)>,
    limit: Option<usize>,
    offset: usize,
}

fn type_name(k: FieldType) -> &'static str {
    match k {
        FieldType::String | FieldType::Picklist => "string",
        FieldType::Id => "id",
        FieldType::Currency | FieldType::Double | FieldType::Percent => "double",
        FieldType::Boolean => "boolean",
        FieldType::Datetime => "dateTime",
        FieldType::Date => "date",
    }
}

fn bind_field(src: &str, obj: &Object, t: &Token) -> Result<usize, SoqlError> {
    let Tok::Ident(name) = &t.tok else {
        return Err(unexpected(src, t));
    };
    obj.field(name).ok_or_else(|| {
        let (row, col) = position(src, t.at);
        SoqlError {
            code: "INVALID_FIELD",
            message: format!(
                "\n{src}\nERROR at Row:{row}:Column:{col}\nNo such column '{name}' on entity '{}'. If you are attempting to use a custom field, be sure to append the '__c' after the custom field name. Please reference your WSDL or the describe call for the appropriate names.",
                obj.name
            ),
        }
    })
}

fn bind_value(src: &str, obj: &Object, f: usize, t: &Token) -> Result<Val, SoqlError> {
    let def = &obj.fields[f];
    let quoted = matches!(t.tok, Tok::Str(_));
    let mismatch = || {
        let (row, col) = position(src, t.at);
        let should = if matches!(
            def.kind,
            FieldType::String | FieldType::Picklist | FieldType::Id
        ) {
            "should be enclosed in quotes"
        } else {
            "should not be enclosed in quotes"
        };
        malformed(format!(
            "\n{src}\nERROR at Row:{row}:Column:{col}\nvalue of filter criterion for field '{}' must be of type {} and {should}",
            def.name,
            type_name(def.kind)
        ))
    };
    if is_kw(t, "NULL") {
        return Ok(Val::Null);
    }
    match (&t.tok, def.kind) {
        (Tok::Str(s), FieldType::String | FieldType::Picklist | FieldType::Id) => {
            if s.like_escape {
                let (row, col) = position(src, t.at);
                return Err(malformed(format!(
                    "\n{src}\nERROR at Row:{row}:Column:{col}\nInvalid string literal '{}'. Illegal character sequence '\\_' or '\\%' outside a LIKE expression",
                    t.text
                )));
            }
            Ok(if s.value.is_empty() {
                Val::Null
            } else {
                Val::Str(s.value.clone())
            })
        }
        (Tok::Num(n), FieldType::Currency | FieldType::Double | FieldType::Percent) => Ok(
            Val::Num(Dec::parse(n).map(|d| d.canonical(0)).ok_or_else(mismatch)?),
        ),
        (Tok::Ident(w), FieldType::Boolean) if w.eq_ignore_ascii_case("TRUE") => {
            Ok(Val::Bool(true))
        }
        (Tok::Ident(w), FieldType::Boolean) if w.eq_ignore_ascii_case("FALSE") => {
            Ok(Val::Bool(false))
        }
        (Tok::DateTime(ms), FieldType::Datetime) => Ok(Val::DateTime(*ms)),
        (Tok::Date(d), FieldType::Date) => Ok(Val::Date(*d)),
        _ => {
            let _ = quoted;
            Err(mismatch())
        }
    }
}

fn bind_filter(src: &str, obj: &Object, c: &Cond) -> Result<Filter, SoqlError> {
    Ok(match c {
        Cond::And(v) => Filter::And(
            v.iter()
                .map(|c| bind_filter(src, obj, c))
                .collect::<Result<_, _>>()?,
        ),
        Cond::Or(v) => Filter::Or(
            v.iter()
                .map(|c| bind_filter(src, obj, c))
                .collect::<Result<_, _>>()?,
        ),
        Cond::Not(c) => Filter::Not(Box::new(bind_filter(src, obj, c)?)),
        Cond::Cmp(f, op, v) => {
            let i = bind_field(src, obj, f)?;
            let val = bind_value(src, obj, i, v)?;
            let kind = obj.fields[i].kind;
            if kind == FieldType::Boolean && !matches!(op, Op::Eq | Op::Ne) {
                return Err(SoqlError {
                    code: "INVALID_QUERY_FILTER_OPERATOR",
                    message: format!("invalid operator on boolean field: {}", obj.fields[i].name),
                });
            }
            Filter::Cmp(i, *op, val)
        }
        Cond::In(f, not, vs) => {
            let i = bind_field(src, obj, f)?;
            let vals = vs
                .iter()
                .map(|v| bind_value(src, obj, i, v))
                .collect::<Result<_, _>>()?;
            Filter::In(i, *not, vals)
        }
        Cond::Like(f, v) => {
            let i = bind_field(src, obj, f)?;
            if !matches!(
                obj.fields[i].kind,
                FieldType::String | FieldType::Picklist | FieldType::Id
            ) {
                return Err(SoqlError {
                    code: "INVALID_QUERY_FILTER_OPERATOR",
                    message: format!(
                        "invalid operator on {} field: LIKE is supported for string fields only ({})",
                        type_name(obj.fields[i].kind),
                        obj.fields[i].name
                    ),
                });
            }
            let Tok::Str(s) = &v.tok else {
                return Err(unexpected(src, v));
            };
            Filter::Like(i, s.pattern.clone())
        }
    })
}

/// Parses and binds `soql` against the store.
pub(crate) fn plan(store: &Store, soql: &str) -> Result<Plan, SoqlError> {
    if soql.chars().count() > MAX_SOQL {
        return Err(malformed(format!(
            "SOQL statements cannot be longer than {MAX_SOQL} characters"
        )));
    }
    let toks = lex(soql)?;
    let mut p = Parser {
        src: soql,
        toks,
        pos: 0,
    };
    let q = p.query()?;
    let Tok::Ident(obj_name) = &q.object.tok else {
        return Err(unexpected(soql, &q.object));
    };
    let obj = store.object(obj_name).ok_or_else(|| {
        let (row, col) = position(soql, q.object.at);
        SoqlError {
            code: "INVALID_TYPE",
            message: format!(
                "\n{soql}\nERROR at Row:{row}:Column:{col}\nsObject type '{obj_name}' is not supported. If you are attempting to use a custom object, be sure to append the '__c' after the entity name. Please reference your WSDL or the describe call for the appropriate names."
            ),
        }
    })?;
    let mut select = Vec::new();
    for t in &q.fields {
        let i = bind_field(soql, obj, t)?;
        if select.contains(&i) {
            return Err(malformed(format!(
                "duplicate field selected: {}",
                obj.fields[i].name
            )));
        }
        select.push(i);
    }
    let filter = q
        .filter
        .as_ref()
        .map(|c| bind_filter(soql, obj, c))
        .transpose()?;
    let order = q
        .order
        .iter()
        .map(|(t, d, n)| bind_field(soql, obj, t).map(|i| (i, *d, *n)))
        .collect::<Result<_, _>>()?;
    let offset = q.offset.unwrap_or(0);
    if offset > MAX_OFFSET {
        return Err(SoqlError {
            code: "NUMBER_OUTSIDE_VALID_RANGE",
            message: format!("Maximum SOQL offset allowed is {MAX_OFFSET}"),
        });
    }
    Ok(Plan {
        object: obj.name.clone(),
        count: q.count,
        select,
        filter,
        order,
        limit: q.limit,
        offset,
    })
}

// ---------------------------------------------------------------------------
// Evaluation

fn fold(s: &str, ci: bool) -> String {
    if ci {
        s.to_lowercase()
    } else {
        s.to_owned()
    }
}

fn ordering(a: &Val, b: &Val, ci: bool) -> Option<Ordering> {
    match (a, b) {
        (Val::Str(x), Val::Str(y)) => Some(fold(x, ci).cmp(&fold(y, ci))),
        (Val::Num(x), Val::Num(y)) => Some(cmp_num(x, y)),
        (Val::Bool(x), Val::Bool(y)) => Some(x.cmp(y)),
        (Val::DateTime(x), Val::DateTime(y)) => Some(x.cmp(y)),
        (Val::Date(x), Val::Date(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn equal(a: &Val, b: &Val, ci: bool) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Null, _) | (_, Val::Null) => false,
        _ => ordering(a, b, ci) == Some(Ordering::Equal),
    }
}

fn like(text: &str, pat: &[Pat], ci: bool) -> bool {
    let t: Vec<char> = fold(text, ci).chars().collect();
    let p: Vec<Pat> = pat
        .iter()
        .map(|x| match x {
            Pat::Ch(c) if ci => Pat::Ch(c.to_lowercase().next().unwrap_or(*c)),
            other => other.clone(),
        })
        .collect();
    // Iterative wildcard matching with one backtrack point per `%`.
    let (mut ti, mut pi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some(Pat::One) => {
                ti += 1;
                pi += 1;
            }
            Some(Pat::Ch(c)) if *c == t[ti] => {
                ti += 1;
                pi += 1;
            }
            Some(Pat::Any) => {
                star = Some((pi, ti));
                pi += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|x| *x == Pat::Any)
}

fn matches(obj: &Object, rec: &Record, f: &Filter) -> bool {
    match f {
        Filter::And(v) => v.iter().all(|f| matches(obj, rec, f)),
        Filter::Or(v) => v.iter().any(|f| matches(obj, rec, f)),
        Filter::Not(f) => !matches(obj, rec, f),
        Filter::Cmp(i, op, lit) => {
            let ci = obj.fields[*i].soql_ci();
            let v = rec.get(*i);
            match op {
                Op::Eq => equal(v, lit, ci),
                Op::Ne => !equal(v, lit, ci),
                _ => match ordering(v, lit, ci) {
                    Some(o) => match op {
                        Op::Lt => o == Ordering::Less,
                        Op::Le => o != Ordering::Greater,
                        Op::Gt => o == Ordering::Greater,
                        _ => o != Ordering::Less,
                    },
                    None => false,
                },
            }
        }
        Filter::In(i, not, lits) => {
            let ci = obj.fields[*i].soql_ci();
            let v = rec.get(*i);
            lits.iter().any(|l| equal(v, l, ci)) != *not
        }
        Filter::Like(i, pat) => match rec.get(*i) {
            Val::Str(s) => like(s, pat, obj.fields[*i].soql_ci()),
            _ => false,
        },
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum SortKey {
    Str(String),
    Num(Dec),
    Bool(bool),
    Time(i64),
    Date(jiff::civil::Date),
}

fn sort_key(v: &Val, ci: bool) -> Option<SortKey> {
    Some(match v {
        Val::Null => return None,
        Val::Str(s) => SortKey::Str(fold(s, ci)),
        Val::Num(n) => SortKey::Num(Dec::parse(n)?),
        Val::Bool(b) => SortKey::Bool(*b),
        Val::DateTime(ms) => SortKey::Time(*ms),
        Val::Date(d) => SortKey::Date(*d),
    })
}

/// The matching records' indexes, ordered, offset and limited.
pub(crate) fn run(obj: &Object, plan: &Plan) -> Vec<usize> {
    let mut hits: Vec<usize> = obj
        .records
        .iter()
        .enumerate()
        .filter(|(_, r)| plan.filter.as_ref().is_none_or(|f| matches(obj, r, f)))
        .map(|(i, _)| i)
        .collect();
    if !plan.order.is_empty() {
        let mut keyed: Vec<(Vec<Option<SortKey>>, usize)> = hits
            .iter()
            .map(|&i| {
                let keys = plan
                    .order
                    .iter()
                    .map(|(f, _, _)| sort_key(obj.records[i].get(*f), obj.fields[*f].soql_ci()))
                    .collect();
                (keys, i)
            })
            .collect();
        keyed.sort_by(|(a, ai), (b, bi)| {
            for (n, (_, desc, nulls_last)) in plan.order.iter().enumerate() {
                let o = match (&a[n], &b[n]) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => {
                        if *nulls_last {
                            Ordering::Greater
                        } else {
                            Ordering::Less
                        }
                    }
                    (Some(_), None) => {
                        if *nulls_last {
                            Ordering::Less
                        } else {
                            Ordering::Greater
                        }
                    }
                    (Some(x), Some(y)) => {
                        let o = x.cmp(y);
                        if *desc {
                            o.reverse()
                        } else {
                            o
                        }
                    }
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
            ai.cmp(bi)
        });
        hits = keyed.into_iter().map(|(_, i)| i).collect();
    }
    let hits = hits.into_iter().skip(plan.offset);
    match plan.limit {
        Some(n) => hits.take(n).collect(),
        None => hits.collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(src: &str) -> Result<StrLit, (usize, String)> {
        lex_string(src, 0).map(|(l, _)| l)
    }

    #[test]
    fn string_escapes_follow_the_documented_table() {
        assert_eq!(lit(r"'Bob\'s BBQ'").unwrap().value, "Bob's BBQ");
        assert_eq!(lit(r"'a\\b'").unwrap().value, r"a\b");
        assert_eq!(lit(r#"'say \"hi\"'"#).unwrap().value, "say \"hi\"");
        assert_eq!(
            lit(r"'\n\N\r\R\t\T\b\B\f\F'").unwrap().value,
            "\n\n\r\r\t\t\u{7}\u{7}\u{c}\u{c}"
        );
        assert_eq!(lit(r"'caf\u00e9'").unwrap().value, "café");
        let l = lit(r"'Ter\%\_x%_'").unwrap();
        assert!(l.like_escape);
        assert_eq!(
            l.pattern,
            vec![
                Pat::Ch('T'),
                Pat::Ch('e'),
                Pat::Ch('r'),
                Pat::Ch('%'),
                Pat::Ch('_'),
                Pat::Ch('x'),
                Pat::Any,
                Pat::One
            ]
        );
        assert!(lit(r"'a\qb'").is_err());
        assert!(lit(r"'abc").is_err());
        assert!(lit(r"'\u12'").is_err());
    }

    #[test]
    fn like_matches_wildcards_and_escapes() {
        let p = |s: &str| lit(s).unwrap().pattern;
        assert!(like("Terminal", &p("'ter%'"), true));
        assert!(!like("Terminal", &p("'ter%'"), false));
        assert!(like("Ter%", &p(r"'Ter\%'"), true));
        assert!(!like("Term", &p(r"'Ter\%'"), true));
        assert!(like("Ter%x", &p(r"'Ter\%%'"), true));
        assert!(like("a_b", &p(r"'a\_b'"), true));
        assert!(!like("axb", &p(r"'a\_b'"), true));
        assert!(like("axb", &p("'a_b'"), true));
        assert!(like("abcabd", &p("'%abd'"), true));
        assert!(like("", &p("'%'"), true));
        assert!(!like("abc", &p("'%x%'"), true));
    }
}
