//! The subset of Shopify's search syntax the emulator understands, for the
//! `query` argument of `orders`.
//!
//! Shopify's "API search syntax" page (shopify.dev/docs/api/usage/search-syntax)
//! defines the grammar: `Query = Term { [ whitespace Connective ] whitespace
//! Term }`, connectives `AND` / `OR` ("When a connective is not specified
//! between two terms, AND is implied"), terms `field:value` with the
//! comparators `:<`, `:<=`, `:>`, `:>=`, and values that are "any name, or any
//! quoted string (single or double quotes are both permitted). Date values
//! must be a string surrounded by quotes." The `orders` query documents the
//! filters `created_at`, `updated_at`, `processed_at` and `id` among others,
//! e.g. `created_at:>'2020-10-21T23:39:20Z'`.
//!
//! Emulated: terms on `created_at`, `updated_at`, `processed_at` (the emulator's
//! orders are processed when created) and `id`, with `:>=`, `:>`, `:<`, `:<=`
//! or plain `:` (equality; for a bare date, that whole day), and `name:` (the
//! order name, with or without its `#`), joined by whitespace or `AND`, and
//! clauses of those joined by `OR` (AND binds tighter: `a b OR c` is
//! `(a AND b) OR c`). Values may be quoted or not. A timestamp with an offset
//! (`2026-11-28T05:00:00Z`, `…-05:00`) is that instant; without one, or a bare
//! date (midnight), it is read in the shop's time zone, which for the emulator
//! is UTC.
//!
//! Like Shopify, a term on a field that the resource does not support is
//! ignored and reported as a search warning ("Invalid search field for this
//! query."), not an error. Syntax that Shopify supports but the emulator does
//! not (`NOT`, `-` negation, parentheses, free text, other order fields such
//! as `financial_status`) is an error instead, so that a caller relying on it
//! fails loudly rather than silently getting unfiltered results.

/// Inclusive bounds on one field, in nanoseconds (or the id itself for `id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub lo: i128,
    pub hi: i128,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            lo: i128::MIN,
            hi: i128::MAX,
        }
    }
}

impl Bounds {
    pub fn contains(&self, v: i128) -> bool {
        self.lo <= v && v <= self.hi
    }

    pub fn is_empty(&self) -> bool {
        self.lo > self.hi
    }

    fn apply(&mut self, op: Op, lo: i128, hi_exclusive: i128) {
        // The value denotes the half-open interval [lo, hi_exclusive): one
        // instant for a timestamp, a day for an equality on a bare date.
        match op {
            Op::Ge => self.lo = self.lo.max(lo),
            Op::Gt => self.lo = self.lo.max(hi_exclusive),
            Op::Lt => self.hi = self.hi.min(lo - 1),
            Op::Le => self.hi = self.hi.min(hi_exclusive - 1),
            Op::Eq => {
                self.lo = self.lo.max(lo);
                self.hi = self.hi.min(hi_exclusive - 1);
            }
        }
    }
}

/// One AND-clause: every bound must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clause {
    pub created: Bounds,
    pub updated: Bounds,
    pub id: Bounds,
    /// `name:` values; the order's name must equal each (`#` optional).
    pub names: Vec<String>,
}

impl Clause {
    pub fn is_empty(&self) -> bool {
        self.created.is_empty() || self.updated.is_empty() || self.id.is_empty()
    }

    pub fn matches(&self, created: i128, updated: i128, id: u64, name: &str) -> bool {
        let bare = |n: &str| n.trim_start_matches('#').to_owned();
        self.created.contains(created)
            && self.updated.contains(updated)
            && self.id.contains(id as i128)
            && self.names.iter().all(|n| bare(n) == bare(name))
    }
}

/// A parsed `query` argument: OR of AND-clauses (at least one clause; no
/// `query` at all is one unconstrained clause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Search {
    pub clauses: Vec<Clause>,
    /// `(field, message)` for each ignored term.
    pub warnings: Vec<(String, String)>,
}

impl Default for Search {
    fn default() -> Self {
        Search {
            clauses: vec![Clause::default()],
            warnings: Vec::new(),
        }
    }
}

/// The fields a search can bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Id,
    CreatedAt,
    UpdatedAt,
}

impl Search {
    pub fn is_empty(&self) -> bool {
        self.clauses.iter().all(Clause::is_empty)
    }

    pub fn matches(&self, created: i128, updated: i128, id: u64, name: &str) -> bool {
        self.clauses
            .iter()
            .any(|c| !c.is_empty() && c.matches(created, updated, id, name))
    }

    /// Bounds on `field` that every match satisfies: the hull of the
    /// (non-empty) clauses' bounds.
    pub fn hull(&self, field: Field) -> Bounds {
        let mut hull: Option<Bounds> = None;
        for c in self.clauses.iter().filter(|c| !c.is_empty()) {
            let b = match field {
                Field::Id => c.id,
                Field::CreatedAt => c.created,
                Field::UpdatedAt => c.updated,
            };
            hull = Some(match hull {
                None => b,
                Some(h) => Bounds {
                    lo: h.lo.min(b.lo),
                    hi: h.hi.max(b.hi),
                },
            });
        }
        hull.unwrap_or(Bounds { lo: 1, hi: 0 })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Ge,
    Gt,
    Lt,
    Le,
    Eq,
}

/// Order filter fields Shopify documents that the emulator does not emulate:
/// using one is an error rather than a warning (they are valid on Shopify).
const UNEMULATED: &[&str] = &[
    "cart_token",
    "channel",
    "channel_id",
    "chargeback_status",
    "checkout_token",
    "confirmation_number",
    "credit_card_last4",
    "current_total_price",
    "customer_id",
    "delivery_method",
    "discount_code",
    "email",
    "financial_status",
    "fraud_protection_level",
    "fulfillment_location_id",
    "fulfillment_status",
    "gateway",
    "location_id",
    "payment_id",
    "payment_provider_id",
    "po_number",
    "reference_location_id",
    "return_status",
    "risk_level",
    "sales_channel",
    "sku",
    "source_identifier",
    "source_name",
    "status",
    "subtotal_line_items_quantity",
    "tag",
    "tag_not",
    "test",
    "total_weight",
];

/// Parses `q`. `Err` carries a message for a GraphQL error.
pub(crate) fn parse(q: &str) -> Result<Search, String> {
    let mut search = Search {
        clauses: Vec::new(),
        warnings: Vec::new(),
    };
    let mut clause = Clause::default();
    // Whether the last token was a connective (or the start of the query).
    let mut after_connective = true;
    let terms = terms(q)?;
    for term in &terms {
        let term = term.as_str();
        if term == "AND" || term == "OR" {
            if after_connective {
                return Err(format!("Unexpected {term} in search query {q:?}"));
            }
            after_connective = true;
            if term == "OR" {
                search.clauses.push(std::mem::take(&mut clause));
            }
            continue;
        }
        after_connective = false;
        if term == "NOT" {
            return Err(format!(
                "The emulator does not support the NOT connective in search queries: {q:?}"
            ));
        }
        if term.starts_with('-') || term.starts_with('(') || term.ends_with(')') {
            return Err(format!(
                "The emulator does not support negation or grouping in search queries: {q:?}"
            ));
        }
        let Some((field, rest)) = term.split_once(':') else {
            return Err(format!(
                "The emulator does not support free-text search terms ({term:?} in {q:?})"
            ));
        };
        let (op, raw) = if let Some(v) = rest.strip_prefix(">=") {
            (Op::Ge, v)
        } else if let Some(v) = rest.strip_prefix("<=") {
            (Op::Le, v)
        } else if let Some(v) = rest.strip_prefix('>') {
            (Op::Gt, v)
        } else if let Some(v) = rest.strip_prefix('<') {
            (Op::Lt, v)
        } else {
            (Op::Eq, rest)
        };
        let value = unquote(raw);
        match field {
            "created_at" | "processed_at" | "updated_at" => {
                let (lo, hi) = parse_time(value).ok_or_else(|| {
                    format!("Invalid date value {value:?} for {field} in search query {q:?}")
                })?;
                let bounds = if field == "updated_at" {
                    &mut clause.updated
                } else {
                    &mut clause.created
                };
                bounds.apply(op, lo, hi);
            }
            "id" => {
                // `id:123` or the global id `gid://shopify/Order/123`.
                let digits = value.rsplit('/').next().unwrap_or(value);
                let id: u64 = digits
                    .parse()
                    .map_err(|_| format!("Invalid id value {value:?} in search query {q:?}"))?;
                let id = id as i128;
                clause.id.apply(op, id, id + 1);
            }
            "name" if op == Op::Eq => clause.names.push(value.to_owned()),
            "name" => {
                return Err(format!(
                    "The emulator supports only equality on name (in {q:?})"
                ))
            }
            f if UNEMULATED.contains(&f) => {
                return Err(format!(
                    "The emulator does not support the search field {f:?} (in {q:?})"
                ))
            }
            f => search.warnings.push((
                f.to_owned(),
                "Invalid search field for this query.".to_owned(),
            )),
        }
    }
    if after_connective && !terms.is_empty() {
        return Err(format!("Search query ends with a connective: {q:?}"));
    }
    search.clauses.push(clause);
    Ok(search)
}

/// Splits on whitespace outside quotes; quotes stay in the term.
fn terms(q: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in q.chars() {
        match quote {
            Some(qc) => {
                cur.push(c);
                if c == qc {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                cur.push(c);
            }
            None if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            None => cur.push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("Unterminated quote in search query {q:?}"));
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

fn unquote(v: &str) -> &str {
    for q in ['\'', '"'] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

const DAY_NS: i128 = 86_400 * 1_000_000_000;

/// A search value as the half-open interval of nanoseconds it denotes: a
/// single instant for a timestamp, a whole day for a bare date.
fn parse_time(v: &str) -> Option<(i128, i128)> {
    if let Ok(ts) = v.parse::<jiff::Timestamp>() {
        let ns = ts.as_nanosecond();
        return Some((ns, ns + 1));
    }
    let utc = jiff::tz::TimeZone::UTC;
    if let Ok(dt) = v.parse::<jiff::civil::DateTime>() {
        if v.contains('T') || v.contains(' ') {
            let ns = utc.to_timestamp(dt).ok()?.as_nanosecond();
            return Some((ns, ns + 1));
        }
    }
    if let Ok(d) = v.parse::<jiff::civil::Date>() {
        let ns = utc
            .to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
            .ok()?
            .as_nanosecond();
        return Some((ns, ns + DAY_NS));
    }
    None
}
