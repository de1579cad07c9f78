//! Executable GraphQL documents (operations with variable definitions and
//! selection sets) as the emulator executes them. The text is parsed by
//! apollo-parser (the GraphQL spec, October 2021: lexing, strings with all
//! escapes and block strings, comments, commas); this module turns its
//! syntax tree into the small tree `exec.rs` walks, each field, argument
//! and variable definition with its 1-based line and column for error
//! `locations`.
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
// From apollo-parser's syntax tree

use apollo_parser::cst::{self, CstNode};
use apollo_parser::{SyntaxKind, SyntaxNode};

/// Parses an executable document.
pub(crate) fn parse(src: &str) -> Result<Document, ParseError> {
    let tree = apollo_parser::Parser::new(src).parse();
    let at = Positions::new(src);
    if let Some(e) = tree.errors().next() {
        return Err(if e.is_eof() || e.index() >= src.len() {
            end_of_document()
        } else {
            at.unexpected(e.data(), e.index())
        });
    }
    let mut operations = Vec::new();
    for def in tree.document().definitions() {
        match def {
            cst::Definition::OperationDefinition(op) => operations.push(at.operation(&op)?),
            // `fragment` and type system definitions: never sent.
            other => return Err(at.refuse(other.syntax())),
        }
    }
    if operations.is_empty() {
        return Err(end_of_document());
    }
    Ok(Document { operations })
}

fn end_of_document() -> ParseError {
    ParseError {
        message: "Unexpected end of document".to_owned(),
        pos: None,
    }
}

/// graphql-ruby's name of the token `text` (for parse error messages).
fn token_kind(text: &str) -> &'static str {
    match text {
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
        t if t.starts_with('"') => "STRING",
        t if t.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic()) => "IDENTIFIER",
        t if t.parse::<i64>().is_ok() || t.bytes().all(|b| b.is_ascii_digit() || b == b'-') => {
            "INT"
        }
        t if t.parse::<f64>().is_ok() => "FLOAT",
        _ => "UNKNOWN_CHAR",
    }
}

/// Line starts of the source, for byte offset -> 1-based line and column
/// (columns count characters, as graphql-ruby's do).
struct Positions<'a> {
    src: &'a str,
    lines: Vec<usize>,
}

impl<'a> Positions<'a> {
    fn new(src: &'a str) -> Self {
        let mut lines = vec![0];
        let b = src.as_bytes();
        for (i, &c) in b.iter().enumerate() {
            // `\r\n`, `\n` and a lone `\r` end a line (spec 2.1.3).
            if c == b'\n' || (c == b'\r' && b.get(i + 1) != Some(&b'\n')) {
                lines.push(i + 1);
            }
        }
        Positions { src, lines }
    }

    fn pos(&self, offset: usize) -> Pos {
        let line = self.lines.partition_point(|&s| s <= offset);
        let start = self.lines[line - 1];
        let column = self.src[start..offset.min(self.src.len())]
            .trim_start_matches('\u{feff}')
            .chars()
            .count()
            + 1;
        Pos { line, column }
    }

    /// Where a node's first significant token starts.
    fn start(&self, node: &SyntaxNode) -> Pos {
        let offset = first_token(node).map_or(usize::from(node.text_range().start()), |t| {
            usize::from(t.text_range().start())
        });
        self.pos(offset)
    }

    fn unexpected(&self, text: &str, offset: usize) -> ParseError {
        let pos = self.pos(offset);
        ParseError {
            message: format!(
                "Parse error on {} ({}) at [{}, {}]",
                serde_json::Value::from(text),
                token_kind(text),
                pos.line,
                pos.column
            ),
            pos: Some(pos),
        }
    }

    /// A parse error on the first token of `node` (fragments, directives,
    /// type definitions: what the connector never sends).
    fn refuse(&self, node: &SyntaxNode) -> ParseError {
        let token = first_token(node);
        match token {
            Some(t) => self.unexpected(t.text(), usize::from(t.text_range().start())),
            None => end_of_document(),
        }
    }

    fn operation(&self, op: &cst::OperationDefinition) -> Result<Operation, ParseError> {
        if let Some(d) = op.directives() {
            return Err(self.refuse(d.syntax()));
        }
        let kind = match op.operation_type() {
            None => OpKind::Query,
            Some(t) if t.mutation_token().is_some() => OpKind::Mutation,
            Some(t) if t.subscription_token().is_some() => OpKind::Subscription,
            Some(_) => OpKind::Query,
        };
        let mut vars = Vec::new();
        if let Some(defs) = op.variable_definitions() {
            for v in defs.variable_definitions() {
                vars.push(self.var_def(&v)?);
            }
        }
        Ok(Operation {
            kind,
            name: op.name().map(|n| n.text().to_string()),
            vars,
            selection: self.selection_set(op.selection_set())?,
            pos: self.start(op.syntax()),
        })
    }

    fn var_def(&self, v: &cst::VariableDefinition) -> Result<VarDef, ParseError> {
        if let Some(d) = v.directives() {
            return Err(self.refuse(d.syntax()));
        }
        let name = v
            .variable()
            .map(|x| x.text().to_string())
            .unwrap_or_default();
        let ty = self.type_ref(v.ty())?;
        let default = match v.default_value().and_then(|d| d.value()) {
            Some(value) => Some(self.value(&value, true)?),
            None => None,
        };
        Ok(VarDef {
            name,
            ty,
            default,
            pos: self.start(v.syntax()),
        })
    }

    fn type_ref(&self, ty: Option<cst::Type>) -> Result<TypeRef, ParseError> {
        Ok(match ty {
            Some(cst::Type::NamedType(n)) => TypeRef::Named(name_of(n.name())),
            Some(cst::Type::ListType(l)) => TypeRef::List(Box::new(self.type_ref(l.ty())?)),
            Some(cst::Type::NonNullType(n)) => {
                let inner = match (n.named_type(), n.list_type()) {
                    (Some(named), _) => TypeRef::Named(name_of(named.name())),
                    (None, Some(list)) => TypeRef::List(Box::new(self.type_ref(list.ty())?)),
                    (None, None) => return Err(end_of_document()),
                };
                TypeRef::NonNull(Box::new(inner))
            }
            None => return Err(end_of_document()),
        })
    }

    fn selection_set(&self, set: Option<cst::SelectionSet>) -> Result<Vec<Field>, ParseError> {
        let Some(set) = set else {
            return Err(end_of_document());
        };
        let mut fields = Vec::new();
        for sel in set.selections() {
            match sel {
                cst::Selection::Field(f) => fields.push(self.field(&f)?),
                // `...` spreads and inline fragments.
                other => return Err(self.refuse(other.syntax())),
            }
        }
        Ok(fields)
    }

    fn field(&self, f: &cst::Field) -> Result<Field, ParseError> {
        if let Some(d) = f.directives() {
            return Err(self.refuse(d.syntax()));
        }
        let mut args = Vec::new();
        if let Some(list) = f.arguments() {
            for a in list.arguments() {
                let value = match a.value() {
                    Some(v) => self.value(&v, false)?,
                    None => return Err(end_of_document()),
                };
                args.push(Argument {
                    name: name_of(a.name()),
                    value,
                    pos: self.start(a.syntax()),
                });
            }
        }
        let selection = match f.selection_set() {
            Some(set) => self.selection_set(Some(set))?,
            None => Vec::new(),
        };
        Ok(Field {
            alias: f.alias().map(|a| name_of(a.name())),
            name: name_of(f.name()),
            args,
            selection,
            pos: self.start(f.syntax()),
        })
    }

    /// A value; `constant` (a variable's default) refuses variables.
    fn value(&self, v: &cst::Value, constant: bool) -> Result<Value, ParseError> {
        let token = |node: &SyntaxNode| {
            let text = node.text().to_string();
            let text = text.trim().to_owned();
            self.unexpected(&text, usize::from(node.text_range().start()))
        };
        Ok(match v {
            cst::Value::Variable(x) if constant => return Err(self.refuse(x.syntax())),
            cst::Value::Variable(x) => Value::Var(x.text().to_string()),
            cst::Value::StringValue(s) => Value::Str(String::from(s)),
            cst::Value::IntValue(i) => {
                let text = i.syntax().text().to_string();
                match text.trim().parse::<i64>() {
                    Ok(n) => Value::Int(n),
                    Err(_) => return Err(token(i.syntax())),
                }
            }
            cst::Value::FloatValue(x) => match f64::try_from(x) {
                Ok(f) => Value::Float(f),
                Err(_) => return Err(token(x.syntax())),
            },
            cst::Value::BooleanValue(b) => Value::Bool(b.true_token().is_some()),
            cst::Value::NullValue(_) => Value::Null,
            cst::Value::EnumValue(e) => Value::Enum(e.text().to_string()),
            cst::Value::ListValue(l) => {
                let mut items = Vec::new();
                for item in l.values() {
                    items.push(self.value(&item, constant)?);
                }
                Value::List(items)
            }
            cst::Value::ObjectValue(o) => {
                let mut fields = Vec::new();
                for f in o.object_fields() {
                    let value = match f.value() {
                        Some(v) => self.value(&v, constant)?,
                        None => return Err(end_of_document()),
                    };
                    fields.push((name_of(f.name()), value));
                }
                Value::Object(fields)
            }
        })
    }
}

/// A node's first token that is not whitespace, a comment or a comma.
fn first_token(node: &SyntaxNode) -> Option<apollo_parser::SyntaxToken> {
    node.descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .find(|t| {
            !matches!(
                t.kind(),
                SyntaxKind::WHITESPACE | SyntaxKind::COMMENT | SyntaxKind::COMMA
            )
        })
}

fn name_of(name: Option<cst::Name>) -> String {
    name.map(|n| n.text().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(src: &str) -> String {
        parse(src).unwrap_err().message
    }

    #[test]
    fn positions_are_one_based_lines_and_columns_of_the_first_token() {
        let doc = parse(
            "# orders\nquery Q($first: Int!, $q: String = \"x\") {\r\n  o: orders(first: $first, query: $q) { nodes { id } }\n}",
        )
        .unwrap();
        let op = &doc.operations[0];
        assert_eq!((op.kind, op.name.as_deref()), (OpKind::Query, Some("Q")));
        assert_eq!(op.pos, Pos { line: 2, column: 1 });
        assert_eq!(op.vars[0].pos, Pos { line: 2, column: 9 });
        assert_eq!(op.vars[0].ty.to_string(), "Int!");
        assert_eq!(op.vars[1].default, Some(Value::Str("x".into())));
        let orders = &op.selection[0];
        assert_eq!((orders.key(), orders.name.as_str()), ("o", "orders"));
        assert_eq!(orders.pos, Pos { line: 3, column: 3 });
        assert_eq!(
            orders.args[1].pos,
            Pos {
                line: 3,
                column: 28
            }
        );
        assert_eq!(
            orders.arg("first").unwrap().value,
            Value::Var("first".into())
        );
        assert_eq!(orders.selection[0].selection[0].name, "id");
    }

    #[test]
    fn values_keep_their_exact_text() {
        let doc = parse(
            r#"{ a(s: "\u00e9\ud83d\ude00\n", b: """
                x
                  y
            """, n: -12, f: 1.5e3, t: true, z: null, e: ASC, l: [1, [2]], o: {k: "v"}) }"#,
        )
        .unwrap();
        let a = &doc.operations[0].selection[0];
        let v = |n: &str| a.arg(n).unwrap().value.clone();
        assert_eq!(v("s"), Value::Str("é😀\n".into()));
        assert_eq!(v("b"), Value::Str("x\n  y".into()));
        assert_eq!(v("n"), Value::Int(-12));
        assert_eq!(v("f"), Value::Float(1500.0));
        assert_eq!(v("t"), Value::Bool(true));
        assert_eq!(v("z"), Value::Null);
        assert_eq!(v("e"), Value::Enum("ASC".into()));
        assert_eq!(v("l").to_string(), "[1, [2]]");
        assert_eq!(v("o").to_string(), "{k: \"v\"}");
    }

    #[test]
    fn what_the_connector_never_sends_is_a_parse_error_at_its_token() {
        assert_eq!(
            error("{ ...F }"),
            "Parse error on \"...\" (ELLIPSIS) at [1, 3]"
        );
        assert_eq!(
            error("{ a @skip(if: true) }"),
            "Parse error on \"@\" (DIR_SIGN) at [1, 5]"
        );
        assert_eq!(
            error("fragment F on Order { id }"),
            "Parse error on \"fragment\" (IDENTIFIER) at [1, 1]"
        );
        assert_eq!(
            error("query ($d: Int = $x) { a }"),
            "Parse error on \"$\" (VAR_SIGN) at [1, 18]"
        );
        assert_eq!(
            error("{ a(n: 99999999999999999999) }"),
            "Parse error on \"99999999999999999999\" (INT) at [1, 8]"
        );
    }

    #[test]
    fn truncated_and_empty_documents() {
        for src in ["", "   # nothing", "{ orders { id }", "query Q("] {
            assert_eq!(error(src), "Unexpected end of document", "{src:?}");
        }
        assert_eq!(
            error("{ orders { id } } }"),
            "Parse error on \"}\" (RCURLY) at [1, 19]"
        );
        assert!(parse("{ }").is_err());
        assert!(parse("{ a() }").is_err());
    }
}
