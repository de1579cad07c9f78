//! A small GraphQL parser: executable documents (operations with variable
//! definitions and selection sets), per the GraphQL spec (October 2021),
//! sections 2.1 (source text) through 2.10 (variables).
//!
//! What it handles: names, aliases, arguments whose values are variables
//! (`$x`), Int, Float, String (with all escapes, `\uXXXX` including surrogate
//! pairs, and block strings `"""…"""`), Boolean, `null`, enum values, lists and
//! input objects; nested selection sets; the query shorthand `{ … }`;
//! whitespace, commas (insignificant, like whitespace), comments (`# …`) and a
//! leading BOM are ignored. Every field, argument and variable definition keeps
//! its 1-based line and column for error `locations`.
//!
//! What it refuses, with a parse error: fragments (`fragment …`, `...`) and
//! directives (`@…`), which the connector never sends.
//!
//! Parse errors read like Shopify's (its GraphQL server is graphql-ruby):
//! `Parse error on "}" (RCURLY) at [1, 20]`, or `Unexpected end of document`.

use std::fmt;

/// A 1-based position in the query text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Var(String),
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Null,
    Enum(String),
    List(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl fmt::Display for Value {
    /// GraphQL literal syntax, as graphql-ruby echoes values in messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Var(v) => write!(f, "${v}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "{}", serde_json::Value::from(s.as_str())),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Null => write!(f, "null"),
            Value::Enum(e) => write!(f, "{e}"),
            Value::List(items) => {
                write!(f, "[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                write!(f, "]")
            }
            Value::Object(fields) => {
                write!(f, "{{")?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// A variable's declared type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TypeRef {
    Named(String),
    List(Box<TypeRef>),
    NonNull(Box<TypeRef>),
}

impl TypeRef {
    /// The innermost named type.
    pub fn base(&self) -> &str {
        match self {
            TypeRef::Named(n) => n,
            TypeRef::List(t) | TypeRef::NonNull(t) => t.base(),
        }
    }

    pub fn non_null(&self) -> bool {
        matches!(self, TypeRef::NonNull(_))
    }

    pub fn is_list(&self) -> bool {
        match self {
            TypeRef::List(_) => true,
            TypeRef::NonNull(t) => t.is_list(),
            TypeRef::Named(_) => false,
        }
    }
}

impl fmt::Display for TypeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeRef::Named(n) => write!(f, "{n}"),
            TypeRef::List(t) => write!(f, "[{t}]"),
            TypeRef::NonNull(t) => write!(f, "{t}!"),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct VarDef {
    pub name: String,
    pub ty: TypeRef,
    pub default: Option<Value>,
    pub pos: Pos,
}

#[derive(Clone, Debug)]
pub(crate) struct Argument {
    pub name: String,
    pub value: Value,
    pub pos: Pos,
}

#[derive(Clone, Debug)]
pub(crate) struct Field {
    pub alias: Option<String>,
    pub name: String,
    pub args: Vec<Argument>,
    pub selection: Vec<Field>,
    pub pos: Pos,
}

impl Field {
    /// The key of this field in the response: the alias, else the name.
    pub fn key(&self) -> &str {
        self.alias.as_deref().unwrap_or(&self.name)
    }

    pub fn arg(&self, name: &str) -> Option<&Argument> {
        self.args.iter().find(|a| a.name == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    Query,
    Mutation,
    Subscription,
}

impl OpKind {
    pub fn keyword(self) -> &'static str {
        match self {
            OpKind::Query => "query",
            OpKind::Mutation => "mutation",
            OpKind::Subscription => "subscription",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Operation {
    pub kind: OpKind,
    pub name: Option<String>,
    pub vars: Vec<VarDef>,
    pub selection: Vec<Field>,
    pub pos: Pos,
}

impl Operation {
    /// The first element of a static validation error's `path`, as
    /// graphql-ruby writes it: `"query Orders"`, or `"query"` when anonymous.
    pub fn path_head(&self) -> String {
        match &self.name {
            Some(n) => format!("{} {n}", self.kind.keyword()),
            None => self.kind.keyword().to_owned(),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Document {
    pub operations: Vec<Operation>,
}

/// A parse error: message plus where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub message: String,
    pub pos: Option<Pos>,
}

// ---------------------------------------------------------------------------
// Lexer

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Punct(&'static str),
    Name(String),
    Int(String),
    Float(String),
    Str(String),
    Eof,
}

impl Tok {
    /// graphql-ruby's token names, for parse error messages.
    fn describe(&self) -> (String, &'static str) {
        match self {
            Tok::Punct(p) => (
                (*p).to_owned(),
                match *p {
                    "{" => "LCURLY",
                    "}" => "RCURLY",
                    "(" => "LPAREN",
                    ")" => "RPAREN",
                    "[" => "LBRACKET",
                    "]" => "RBRACKET",
                    ":" => "COLON",
                    "!" => "BANG",
                    "$" => "VAR_SIGN",
                    "=" => "EQUALS",
                    "@" => "DIR_SIGN",
                    "|" => "PIPE",
                    "&" => "AMP",
                    "..." => "ELLIPSIS",
                    _ => "UNKNOWN_CHAR",
                },
            ),
            Tok::Name(n) => (n.clone(), "IDENTIFIER"),
            Tok::Int(i) => (i.clone(), "INT"),
            Tok::Float(x) => (x.clone(), "FLOAT"),
            Tok::Str(s) => (s.clone(), "STRING"),
            Tok::Eof => (String::new(), "EOF"),
        }
    }
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
}

impl Lexer {
    fn new(src: &str) -> Lexer {
        let src = src.strip_prefix('\u{feff}').unwrap_or(src);
        Lexer {
            chars: src.chars().collect(),
            i: 0,
            line: 1,
            col: 1,
        }
    }

    fn peek_char(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.get(self.i).copied()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else if c == '\r' {
            // "\r\n" is one line terminator.
            if self.peek_char(0) != Some('\n') {
                self.line += 1;
                self.col = 1;
            }
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.col,
        }
    }

    fn error(&self, message: impl Into<String>, pos: Pos) -> ParseError {
        ParseError {
            message: message.into(),
            pos: Some(pos),
        }
    }

    /// Skips ignored tokens: whitespace, line terminators, commas, comments.
    fn skip_ignored(&mut self) {
        while let Some(c) = self.peek_char(0) {
            match c {
                ' ' | '\t' | '\n' | '\r' | ',' | '\u{feff}' => {
                    self.bump();
                }
                '#' => {
                    while let Some(c) = self.peek_char(0) {
                        if c == '\n' || c == '\r' {
                            break;
                        }
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    fn next(&mut self) -> Result<(Tok, Pos), ParseError> {
        self.skip_ignored();
        let pos = self.pos();
        let Some(c) = self.peek_char(0) else {
            return Ok((Tok::Eof, pos));
        };
        let punct = match c {
            '{' => Some("{"),
            '}' => Some("}"),
            '(' => Some("("),
            ')' => Some(")"),
            '[' => Some("["),
            ']' => Some("]"),
            ':' => Some(":"),
            '!' => Some("!"),
            '$' => Some("$"),
            '=' => Some("="),
            '@' => Some("@"),
            '|' => Some("|"),
            '&' => Some("&"),
            _ => None,
        };
        if let Some(p) = punct {
            self.bump();
            return Ok((Tok::Punct(p), pos));
        }
        if c == '.' {
            if self.peek_char(1) == Some('.') && self.peek_char(2) == Some('.') {
                self.bump();
                self.bump();
                self.bump();
                return Ok((Tok::Punct("..."), pos));
            }
            return Err(self.error(
                format!(
                    "Parse error on \".\" (UNKNOWN_CHAR) at [{}, {}]",
                    pos.line, pos.column
                ),
                pos,
            ));
        }
        if c == '_' || c.is_ascii_alphabetic() {
            let mut name = String::new();
            while let Some(c) = self.peek_char(0) {
                if c == '_' || c.is_ascii_alphanumeric() {
                    name.push(c);
                    self.bump();
                } else {
                    break;
                }
            }
            return Ok((Tok::Name(name), pos));
        }
        if c == '-' || c.is_ascii_digit() {
            return self.number(pos);
        }
        if c == '"' {
            if self.peek_char(1) == Some('"') && self.peek_char(2) == Some('"') {
                return self.block_string(pos);
            }
            return self.string(pos);
        }
        Err(self.error(
            format!(
                "Parse error on {:?} (UNKNOWN_CHAR) at [{}, {}]",
                c.to_string(),
                pos.line,
                pos.column
            ),
            pos,
        ))
    }

    fn number(&mut self, pos: Pos) -> Result<(Tok, Pos), ParseError> {
        let mut text = String::new();
        if self.peek_char(0) == Some('-') {
            text.push('-');
            self.bump();
        }
        let digits = |lx: &mut Lexer, text: &mut String| -> usize {
            let mut n = 0;
            while let Some(c) = lx.peek_char(0) {
                if c.is_ascii_digit() {
                    text.push(c);
                    lx.bump();
                    n += 1;
                } else {
                    break;
                }
            }
            n
        };
        let int_start = text.len();
        if digits(self, &mut text) == 0 {
            return Err(self.error(
                format!(
                    "Parse error on {text:?} (UNKNOWN_CHAR) at [{}, {}]",
                    pos.line, pos.column
                ),
                pos,
            ));
        }
        // IntegerPart: no leading zeros ("0" alone is fine).
        let int_part = &text[int_start..];
        if int_part.len() > 1 && int_part.starts_with('0') {
            return Err(self.error(
                format!(
                    "Parse error on {text:?} (INT) at [{}, {}]",
                    pos.line, pos.column
                ),
                pos,
            ));
        }
        let mut float = false;
        if self.peek_char(0) == Some('.') && self.peek_char(1).is_some_and(|c| c.is_ascii_digit()) {
            float = true;
            text.push('.');
            self.bump();
            digits(self, &mut text);
        }
        if matches!(self.peek_char(0), Some('e') | Some('E')) {
            float = true;
            text.push('e');
            self.bump();
            if let Some(sign @ ('+' | '-')) = self.peek_char(0) {
                text.push(sign);
                self.bump();
            }
            if digits(self, &mut text) == 0 {
                return Err(self.error(
                    format!(
                        "Parse error on {text:?} (FLOAT) at [{}, {}]",
                        pos.line, pos.column
                    ),
                    pos,
                ));
            }
        }
        // A number immediately followed by a name start or '.' is invalid.
        if self
            .peek_char(0)
            .is_some_and(|c| c == '_' || c == '.' || c.is_ascii_alphabetic())
        {
            return Err(self.error(
                format!(
                    "Parse error on {text:?} (INT) at [{}, {}]",
                    pos.line, pos.column
                ),
                pos,
            ));
        }
        Ok((
            if float {
                Tok::Float(text)
            } else {
                Tok::Int(text)
            },
            pos,
        ))
    }

    fn string(&mut self, pos: Pos) -> Result<(Tok, Pos), ParseError> {
        self.bump(); // opening quote
        let mut out = String::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(self.error("Unterminated string", pos));
            };
            match c {
                '"' => return Ok((Tok::Str(out), pos)),
                '\n' | '\r' => return Err(self.error("Unterminated string", pos)),
                '\\' => {
                    let Some(e) = self.bump() else {
                        return Err(self.error("Unterminated string", pos));
                    };
                    match e {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        '/' => out.push('/'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            let hi = self.hex4(pos)?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                // A surrogate pair: "\uD83D\uDE00".
                                if self.peek_char(0) == Some('\\') && self.peek_char(1) == Some('u')
                                {
                                    self.bump();
                                    self.bump();
                                    let lo = self.hex4(pos)?;
                                    if !(0xDC00..0xE000).contains(&lo) {
                                        return Err(self.error("Bad unicode escape", pos));
                                    }
                                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                                } else {
                                    return Err(self.error("Bad unicode escape", pos));
                                }
                            } else {
                                hi
                            };
                            match char::from_u32(code) {
                                Some(ch) => out.push(ch),
                                None => return Err(self.error("Bad unicode escape", pos)),
                            }
                        }
                        other => {
                            return Err(
                                self.error(format!("Bad unicode escape in \"\\{other}\""), pos)
                            )
                        }
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self, pos: Pos) -> Result<u32, ParseError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = self
                .bump()
                .and_then(|c| c.to_digit(16))
                .ok_or_else(|| self.error("Bad unicode escape", pos))?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// `"""…"""`: raw text (only `\"""` is an escape), then the spec's
    /// BlockStringValue(): common indentation removed, blank first/last lines
    /// dropped.
    fn block_string(&mut self, pos: Pos) -> Result<(Tok, Pos), ParseError> {
        self.bump();
        self.bump();
        self.bump();
        let mut raw = String::new();
        loop {
            match self.peek_char(0) {
                None => return Err(self.error("Unterminated string", pos)),
                Some('"') if self.peek_char(1) == Some('"') && self.peek_char(2) == Some('"') => {
                    self.bump();
                    self.bump();
                    self.bump();
                    break;
                }
                Some('\\')
                    if self.peek_char(1) == Some('"')
                        && self.peek_char(2) == Some('"')
                        && self.peek_char(3) == Some('"') =>
                {
                    self.bump();
                    self.bump();
                    self.bump();
                    self.bump();
                    raw.push_str("\"\"\"");
                }
                Some(_) => raw.push(self.bump().unwrap()),
            }
        }
        Ok((Tok::Str(block_string_value(&raw)), pos))
    }
}

fn block_string_value(raw: &str) -> String {
    let normalized = raw.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = normalized.split('\n').collect();
    let indent_of = |l: &str| l.len() - l.trim_start_matches([' ', '\t']).len();
    let common = lines
        .iter()
        .skip(1)
        .filter(|l| !l.trim_matches([' ', '\t']).is_empty())
        .map(|l| indent_of(l))
        .min();
    let mut out: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| match common {
            Some(c) if i > 0 => l.get(c.min(l.len())..).unwrap_or("").to_owned(),
            _ => (*l).to_owned(),
        })
        .collect();
    while out
        .first()
        .is_some_and(|l| l.trim_matches([' ', '\t']).is_empty())
    {
        out.remove(0);
    }
    while out
        .last()
        .is_some_and(|l| l.trim_matches([' ', '\t']).is_empty())
    {
        out.pop();
    }
    out.join("\n")
}

// ---------------------------------------------------------------------------
// Parser

struct Parser {
    lexer: Lexer,
    tok: Tok,
    pos: Pos,
}

/// Parses an executable document.
pub(crate) fn parse(src: &str) -> Result<Document, ParseError> {
    let mut lexer = Lexer::new(src);
    let (tok, pos) = lexer.next()?;
    let mut p = Parser { lexer, tok, pos };
    let mut operations = Vec::new();
    while p.tok != Tok::Eof {
        operations.push(p.operation()?);
    }
    if operations.is_empty() {
        return Err(ParseError {
            message: "Unexpected end of document".to_owned(),
            pos: None,
        });
    }
    Ok(Document { operations })
}

impl Parser {
    fn advance(&mut self) -> Result<(Tok, Pos), ParseError> {
        let (tok, pos) = self.lexer.next()?;
        let prev = std::mem::replace(&mut self.tok, tok);
        let prev_pos = std::mem::replace(&mut self.pos, pos);
        Ok((prev, prev_pos))
    }

    fn unexpected(&self) -> ParseError {
        if self.tok == Tok::Eof {
            return ParseError {
                message: "Unexpected end of document".to_owned(),
                pos: None,
            };
        }
        let (text, kind) = self.tok.describe();
        ParseError {
            message: format!(
                "Parse error on {} ({kind}) at [{}, {}]",
                serde_json::Value::from(text),
                self.pos.line,
                self.pos.column
            ),
            pos: Some(self.pos),
        }
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(q) if *q == p)
    }

    fn expect_punct(&mut self, p: &str) -> Result<Pos, ParseError> {
        if self.is_punct(p) {
            Ok(self.advance()?.1)
        } else {
            Err(self.unexpected())
        }
    }

    fn name(&mut self) -> Result<(String, Pos), ParseError> {
        match &self.tok {
            Tok::Name(_) => {
                let (tok, pos) = self.advance()?;
                match tok {
                    Tok::Name(n) => Ok((n, pos)),
                    _ => unreachable!(),
                }
            }
            _ => Err(self.unexpected()),
        }
    }

    fn operation(&mut self) -> Result<Operation, ParseError> {
        if self.is_punct("{") {
            let pos = self.pos;
            let selection = self.selection_set()?;
            return Ok(Operation {
                kind: OpKind::Query,
                name: None,
                vars: Vec::new(),
                selection,
                pos,
            });
        }
        let kind = match &self.tok {
            Tok::Name(n) if n == "query" => OpKind::Query,
            Tok::Name(n) if n == "mutation" => OpKind::Mutation,
            Tok::Name(n) if n == "subscription" => OpKind::Subscription,
            // `fragment` definitions and anything else.
            _ => return Err(self.unexpected()),
        };
        let pos = self.advance()?.1;
        let name = if matches!(self.tok, Tok::Name(_)) {
            Some(self.name()?.0)
        } else {
            None
        };
        let mut vars = Vec::new();
        if self.is_punct("(") {
            self.advance()?;
            while !self.is_punct(")") {
                vars.push(self.var_def()?);
            }
            self.advance()?;
            if vars.is_empty() {
                return Err(self.unexpected());
            }
        }
        if self.is_punct("@") {
            return Err(self.unexpected());
        }
        let selection = self.selection_set()?;
        Ok(Operation {
            kind,
            name,
            vars,
            selection,
            pos,
        })
    }

    fn var_def(&mut self) -> Result<VarDef, ParseError> {
        let pos = self.expect_punct("$")?;
        let (name, _) = self.name()?;
        self.expect_punct(":")?;
        let ty = self.type_ref()?;
        let default = if self.is_punct("=") {
            self.advance()?;
            Some(self.value(true)?)
        } else {
            None
        };
        Ok(VarDef {
            name,
            ty,
            default,
            pos,
        })
    }

    fn type_ref(&mut self) -> Result<TypeRef, ParseError> {
        let base = if self.is_punct("[") {
            self.advance()?;
            let inner = self.type_ref()?;
            self.expect_punct("]")?;
            TypeRef::List(Box::new(inner))
        } else {
            TypeRef::Named(self.name()?.0)
        };
        if self.is_punct("!") {
            self.advance()?;
            Ok(TypeRef::NonNull(Box::new(base)))
        } else {
            Ok(base)
        }
    }

    fn selection_set(&mut self) -> Result<Vec<Field>, ParseError> {
        self.expect_punct("{")?;
        let mut fields = Vec::new();
        while !self.is_punct("}") {
            if !matches!(self.tok, Tok::Name(_)) {
                // Includes `...` (fragment spreads and inline fragments).
                return Err(self.unexpected());
            }
            fields.push(self.field()?);
        }
        self.advance()?;
        if fields.is_empty() {
            return Err(self.unexpected());
        }
        Ok(fields)
    }

    fn field(&mut self) -> Result<Field, ParseError> {
        let (first, pos) = self.name()?;
        let (alias, name) = if self.is_punct(":") {
            self.advance()?;
            (Some(first), self.name()?.0)
        } else {
            (None, first)
        };
        let mut args = Vec::new();
        if self.is_punct("(") {
            self.advance()?;
            while !self.is_punct(")") {
                let (arg, apos) = self.name()?;
                self.expect_punct(":")?;
                let value = self.value(false)?;
                args.push(Argument {
                    name: arg,
                    value,
                    pos: apos,
                });
            }
            self.advance()?;
            if args.is_empty() {
                return Err(self.unexpected());
            }
        }
        if self.is_punct("@") {
            return Err(self.unexpected());
        }
        let selection = if self.is_punct("{") {
            self.selection_set()?
        } else {
            Vec::new()
        };
        Ok(Field {
            alias,
            name,
            args,
            selection,
            pos,
        })
    }

    fn value(&mut self, constant: bool) -> Result<Value, ParseError> {
        match &self.tok {
            Tok::Punct("$") if !constant => {
                self.advance()?;
                Ok(Value::Var(self.name()?.0))
            }
            Tok::Punct("[") => {
                self.advance()?;
                let mut items = Vec::new();
                while !self.is_punct("]") {
                    items.push(self.value(constant)?);
                }
                self.advance()?;
                Ok(Value::List(items))
            }
            Tok::Punct("{") => {
                self.advance()?;
                let mut fields = Vec::new();
                while !self.is_punct("}") {
                    let (k, _) = self.name()?;
                    self.expect_punct(":")?;
                    fields.push((k, self.value(constant)?));
                }
                self.advance()?;
                Ok(Value::Object(fields))
            }
            Tok::Int(text) => {
                let v = text.parse::<i64>().map_err(|_| self.unexpected())?;
                self.advance()?;
                Ok(Value::Int(v))
            }
            Tok::Float(text) => {
                let v = text.parse::<f64>().map_err(|_| self.unexpected())?;
                self.advance()?;
                Ok(Value::Float(v))
            }
            Tok::Str(_) => match self.advance()?.0 {
                Tok::Str(s) => Ok(Value::Str(s)),
                _ => unreachable!(),
            },
            Tok::Name(n) => {
                let v = match n.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "null" => Value::Null,
                    other => Value::Enum(other.to_owned()),
                };
                self.advance()?;
                Ok(v)
            }
            _ => Err(self.unexpected()),
        }
    }
}
