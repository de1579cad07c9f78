//! The schema subset, validation, query cost and execution.
//!
//! # Schema
//!
//! The types below are a subset of Shopify's Admin GraphQL schema, with
//! Shopify's type names (`QueryRoot`, `Mutation`, `OrderConnection`,
//! `MoneyBag`, `MoneyV2`, `BulkOperation`, …), enough for the three operations
//! the connector sends plus a few neighbouring fields (`edges`/`cursor`,
//! `hasPreviousPage`/`startCursor`, `processedAt`, `currencyCode`,
//! `presentmentMoney`, the rest of `BulkOperation`, `__typename`). Anything
//! else is a validation error, worded as Shopify's GraphQL server
//! (graphql-ruby) words it, e.g. `Field 'foo' doesn't exist on type 'Order'`
//! with `extensions: {code: "undefinedField", typeName, fieldName}` and a
//! `path` that starts with the operation (`"query Orders"`).
//!
//! Validation happens before anything is charged: an invalid request costs
//! nothing and its response reports `requestedQueryCost: 0`.
//!
//! # Query cost
//!
//! Shopify ("GraphQL Admin API rate limits"): "Every field in the schema has an
//! integer cost value assigned to it … By default, a field's cost is based on
//! what the field returns: Scalar 0, Enum 0, Object 1, … Connection: sized by
//! first and last arguments, Mutation 10", and "Shopify calculates the cost of
//! a query both before and after query execution. The requested cost is based
//! on the number of fields requested. The actual cost is based on the results
//! returned". The emulator's formula:
//!
//! * scalar or enum field: 0;
//! * object field: 1 + the cost of its selection (so `totalPriceSet {
//!   shopMoney { amount currencyCode } }` costs 1 + 1 = 2);
//! * connection field (`orders`): 2 + `first` × the cost of one node, where a
//!   node costs 1 (the `Order` object) + the cost of its selection; `nodes {…}`
//!   and `edges { node {…} }` select the same objects (the larger of the two
//!   counts when both are present), `edges`, `cursor` and `pageInfo` add
//!   nothing beyond the connection's 2;
//! * a mutation field: 10 (its payload adds nothing).
//!
//! So the connector's page query, `orders(first: 250) { nodes { <scalars>
//! totalPriceSet { shopMoney { … } } } pageInfo {…} }`, requests
//! 2 + 250 × (1 + 2) = **752**; `currentBulkOperation { <scalars> }` costs
//! **1**; `bulkOperationRunQuery` costs **10**. The actual cost replaces `first`
//! with the number of orders returned (a page of 100 orders costs 302, an empty
//! page 2) and counts a `null` object as 0. Shopify also documents a single
//! query limit ("A single query to the API cannot exceed a cost of 1000"),
//! enforced on the requested cost as `MAX_COST_EXCEEDED`; so does the emulator.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::time::Instant;

use recon_emulator_kit::{base64_decode, base64_encode};
use serde_json::{json, Map, Value as Json};

use super::graphql::{self, Field, OpKind, Operation, Pos, TypeRef, Value};
use super::search::{self, Search};
use super::server::Shared;
use super::store::{BulkOp, BulkView, Order, PageRequest, Position, SortKey};

// ---------------------------------------------------------------------------
// Schema

pub(crate) struct FieldDef {
    pub name: &'static str,
    /// The field's type; for list fields (`nodes`, `edges`, `userErrors`,
    /// `field`) the item type.
    pub ty: &'static str,
    pub args: &'static [ArgDef],
}

pub(crate) struct ArgDef {
    pub name: &'static str,
    pub ty: &'static str,
    pub required: bool,
}

const fn f(name: &'static str, ty: &'static str) -> FieldDef {
    FieldDef {
        name,
        ty,
        args: &[],
    }
}

/// A list field (`[ty]`); validation and projection treat lists and single
/// objects alike.
const fn list(name: &'static str, ty: &'static str) -> FieldDef {
    f(name, ty)
}

const fn with_args(name: &'static str, ty: &'static str, args: &'static [ArgDef]) -> FieldDef {
    FieldDef { name, ty, args }
}

const fn opt(name: &'static str, ty: &'static str) -> ArgDef {
    ArgDef {
        name,
        ty,
        required: false,
    }
}

const fn req(name: &'static str, ty: &'static str) -> ArgDef {
    ArgDef {
        name,
        ty,
        required: true,
    }
}

const ORDERS_ARGS: &[ArgDef] = &[
    opt("first", "Int"),
    opt("after", "String"),
    opt("last", "Int"),
    opt("before", "String"),
    opt("query", "String"),
    opt("sortKey", "OrderSortKeys"),
    opt("reverse", "Boolean"),
    opt("savedSearchId", "ID"),
];

const QUERY_ROOT: &[FieldDef] = &[
    with_args("orders", "OrderConnection", ORDERS_ARGS),
    with_args(
        "currentBulkOperation",
        "BulkOperation",
        &[opt("type", "BulkOperationType")],
    ),
    f("currentAppInstallation", "AppInstallation"),
];

/// `AppInstallation`: the calling app's installation on the shop.
/// https://shopify.dev/docs/api/admin-graphql/latest/objects/AppInstallation
const APP_INSTALLATION: &[FieldDef] = &[f("id", "ID"), list("accessScopes", "AccessScope")];

/// `AccessScope`: one granted scope, e.g. `{"handle": "read_orders"}`.
const ACCESS_SCOPE: &[FieldDef] = &[f("handle", "String"), f("description", "String")];

const MUTATION: &[FieldDef] = &[with_args(
    "bulkOperationRunQuery",
    "BulkOperationRunQueryPayload",
    &[req("query", "String"), opt("groupObjects", "Boolean")],
)];

const ORDER_CONNECTION: &[FieldDef] = &[
    list("nodes", "Order"),
    list("edges", "OrderEdge"),
    f("pageInfo", "PageInfo"),
];

const ORDER_EDGE: &[FieldDef] = &[f("cursor", "String"), f("node", "Order")];

const PAGE_INFO: &[FieldDef] = &[
    f("hasNextPage", "Boolean"),
    f("hasPreviousPage", "Boolean"),
    f("startCursor", "String"),
    f("endCursor", "String"),
];

const ORDER: &[FieldDef] = &[
    f("id", "ID"),
    f("legacyResourceId", "UnsignedInt64"),
    f("name", "String"),
    f("createdAt", "DateTime"),
    f("updatedAt", "DateTime"),
    f("processedAt", "DateTime"),
    f("email", "String"),
    f("displayFinancialStatus", "OrderDisplayFinancialStatus"),
    f("currencyCode", "CurrencyCode"),
    f("totalPriceSet", "MoneyBag"),
];

const MONEY_BAG: &[FieldDef] = &[f("shopMoney", "MoneyV2"), f("presentmentMoney", "MoneyV2")];

const MONEY_V2: &[FieldDef] = &[f("amount", "Decimal"), f("currencyCode", "CurrencyCode")];

const BULK_OPERATION: &[FieldDef] = &[
    f("completedAt", "DateTime"),
    f("createdAt", "DateTime"),
    f("errorCode", "BulkOperationErrorCode"),
    f("fileSize", "UnsignedInt64"),
    f("id", "ID"),
    f("objectCount", "UnsignedInt64"),
    f("partialDataUrl", "URL"),
    f("query", "String"),
    f("rootObjectCount", "UnsignedInt64"),
    f("status", "BulkOperationStatus"),
    f("type", "BulkOperationType"),
    f("url", "URL"),
];

const BULK_PAYLOAD: &[FieldDef] = &[
    f("bulkOperation", "BulkOperation"),
    list("userErrors", "BulkOperationUserError"),
];

const BULK_USER_ERROR: &[FieldDef] = &[
    f("code", "BulkOperationUserErrorCode"),
    list("field", "String"),
    f("message", "String"),
];

fn object_fields(ty: &str) -> Option<&'static [FieldDef]> {
    Some(match ty {
        "QueryRoot" => QUERY_ROOT,
        "Mutation" => MUTATION,
        "OrderConnection" => ORDER_CONNECTION,
        "OrderEdge" => ORDER_EDGE,
        "PageInfo" => PAGE_INFO,
        "Order" => ORDER,
        "MoneyBag" => MONEY_BAG,
        "MoneyV2" => MONEY_V2,
        "BulkOperation" => BULK_OPERATION,
        "BulkOperationRunQueryPayload" => BULK_PAYLOAD,
        "BulkOperationUserError" => BULK_USER_ERROR,
        "AppInstallation" => APP_INSTALLATION,
        "AccessScope" => ACCESS_SCOPE,
        _ => return None,
    })
}

fn field_def(ty: &str, name: &str) -> Option<&'static FieldDef> {
    object_fields(ty)?.iter().find(|f| f.name == name)
}

const SCALARS: &[&str] = &[
    "ID",
    "String",
    "Int",
    "Float",
    "Boolean",
    "DateTime",
    "Decimal",
    "URL",
    "UnsignedInt64",
];

/// Shopify's `OrderSortKeys` values (all valid; the emulator implements `ID`,
/// `CREATED_AT`, `UPDATED_AT` and `PROCESSED_AT`).
const ORDER_SORT_KEYS: &[&str] = &[
    "CREATED_AT",
    "CUSTOMER_NAME",
    "DESTINATION",
    "FINANCIAL_STATUS",
    "FULFILLMENT_STATUS",
    "ID",
    "ORDER_NUMBER",
    "PO_NUMBER",
    "PROCESSED_AT",
    "RELEVANCE",
    "TOTAL_ITEMS_QUANTITY",
    "TOTAL_PRICE",
    "UPDATED_AT",
];

const BULK_OPERATION_TYPE: &[&str] = &["MUTATION", "QUERY"];

fn enum_values(ty: &str) -> Option<&'static [&'static str]> {
    match ty {
        "OrderSortKeys" => Some(ORDER_SORT_KEYS),
        "BulkOperationType" => Some(BULK_OPERATION_TYPE),
        // Output-only enums: any value is fine, they are never input.
        "CurrencyCode"
        | "OrderDisplayFinancialStatus"
        | "BulkOperationStatus"
        | "BulkOperationErrorCode"
        | "BulkOperationUserErrorCode" => Some(&[]),
        _ => None,
    }
}

fn is_leaf(ty: &str) -> bool {
    SCALARS.contains(&ty) || enum_values(ty).is_some()
}

fn is_input_type(ty: &str) -> bool {
    SCALARS.contains(&ty) || matches!(ty, "OrderSortKeys" | "BulkOperationType")
}

// ---------------------------------------------------------------------------
// Errors

/// A GraphQL error object, keys in graphql-ruby's order.
pub(crate) fn gql_error(
    message: impl Into<String>,
    pos: Option<Pos>,
    path: Option<Vec<Json>>,
    extensions: Option<Json>,
) -> Json {
    let mut e = Map::new();
    e.insert("message".into(), Json::from(message.into()));
    if let Some(p) = pos {
        e.insert(
            "locations".into(),
            json!([{"line": p.line, "column": p.column}]),
        );
    }
    if let Some(path) = path {
        e.insert("path".into(), Json::Array(path));
    }
    if let Some(ext) = extensions {
        e.insert("extensions".into(), ext);
    }
    Json::Object(e)
}

// ---------------------------------------------------------------------------
// Validation

struct Validator<'a> {
    op: &'a Operation,
    vars: HashMap<&'a str, &'a graphql::VarDef>,
    used: HashSet<String>,
    errors: Vec<Json>,
}

fn root_type(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Query | OpKind::Subscription => "QueryRoot",
        OpKind::Mutation => "Mutation",
    }
}

/// Whether a literal fits an input type (nullability checked by the caller).
fn literal_fits(v: &Value, ty: &str) -> bool {
    match v {
        Value::Var(_) | Value::Null => true,
        Value::Int(i) => match ty {
            "Int" => i32::try_from(*i).is_ok(),
            "Float" | "ID" => true,
            "UnsignedInt64" => *i >= 0,
            _ => false,
        },
        Value::Float(_) => ty == "Float",
        Value::Str(_) => matches!(
            ty,
            "String" | "ID" | "DateTime" | "Decimal" | "URL" | "UnsignedInt64"
        ),
        Value::Bool(_) => ty == "Boolean",
        Value::Enum(e) => {
            matches!(ty, "OrderSortKeys" | "BulkOperationType")
                && enum_values(ty).is_some_and(|vals| vals.contains(&e.as_str()))
        }
        Value::List(_) | Value::Object(_) => false,
    }
}

fn collect_vars(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Var(n) => out.push(n.clone()),
        Value::List(items) => items.iter().for_each(|i| collect_vars(i, out)),
        Value::Object(fields) => fields.iter().for_each(|(_, i)| collect_vars(i, out)),
        _ => {}
    }
}

impl<'a> Validator<'a> {
    fn op_label(&self) -> String {
        match &self.op.name {
            Some(n) => n.clone(),
            None => format!("anonymous {}", self.op.kind.keyword()),
        }
    }

    fn walk(&mut self, selection: &'a [Field], ty: &str, path: &mut Vec<Json>) {
        for field in selection {
            path.push(Json::from(field.key()));
            self.field(field, ty, path);
            path.pop();
        }
    }

    fn field(&mut self, field: &'a Field, ty: &str, path: &mut Vec<Json>) {
        if field.name == "__typename" {
            if !field.args.is_empty() {
                self.errors.push(gql_error(
                    format!(
                        "Field '__typename' doesn't accept argument '{}'",
                        field.args[0].name
                    ),
                    Some(field.args[0].pos),
                    Some(path.clone()),
                    Some(json!({"code": "argumentNotAccepted", "name": "__typename",
                        "typeName": "Field", "argumentName": field.args[0].name})),
                ));
            }
            if !field.selection.is_empty() {
                self.leaf_selection_error(field, "String", path);
            }
            return;
        }
        let Some(def) = field_def(ty, &field.name) else {
            self.errors.push(gql_error(
                format!("Field '{}' doesn't exist on type '{ty}'", field.name),
                Some(field.pos),
                Some(path.clone()),
                Some(json!({"code": "undefinedField", "typeName": ty, "fieldName": field.name})),
            ));
            return;
        };
        for arg in &field.args {
            let Some(adef) = def.args.iter().find(|a| a.name == arg.name) else {
                self.errors.push(gql_error(
                    format!(
                        "Field '{}' doesn't accept argument '{}'",
                        field.name, arg.name
                    ),
                    Some(arg.pos),
                    Some({
                        let mut p = path.clone();
                        p.push(Json::from(arg.name.as_str()));
                        p
                    }),
                    Some(json!({"code": "argumentNotAccepted", "name": field.name,
                        "typeName": "Field", "argumentName": arg.name})),
                ));
                continue;
            };
            let mut names = Vec::new();
            collect_vars(&arg.value, &mut names);
            for n in &names {
                self.used.insert(n.clone());
            }
            if let Value::Var(name) = &arg.value {
                self.variable_use(name, field, adef, arg.pos, path);
                continue;
            }
            for n in &names {
                self.variable_defined(n, arg.pos, path);
            }
            let null_for_required = adef.required && arg.value == Value::Null;
            if null_for_required || !literal_fits(&arg.value, adef.ty) {
                let expected = if adef.required {
                    format!("{}!", adef.ty)
                } else {
                    adef.ty.to_owned()
                };
                let mut p = path.clone();
                p.push(Json::from(arg.name.as_str()));
                self.errors.push(gql_error(
                    format!(
                        "Argument '{}' on Field '{}' has an invalid value ({}). Expected type '{expected}'.",
                        arg.name, field.name, arg.value
                    ),
                    Some(arg.pos),
                    Some(p),
                    Some(json!({"code": "argumentLiteralsIncompatible", "typeName": "Field",
                        "argumentName": arg.name})),
                ));
            }
        }
        let missing: Vec<&str> = def
            .args
            .iter()
            .filter(|a| a.required && field.arg(a.name).is_none())
            .map(|a| a.name)
            .collect();
        if !missing.is_empty() {
            self.errors.push(gql_error(
                format!(
                    "Field '{}' is missing required arguments: {}",
                    field.name,
                    missing.join(", ")
                ),
                Some(field.pos),
                Some(path.clone()),
                Some(
                    json!({"code": "missingRequiredArguments", "className": "Field",
                    "name": field.name, "arguments": missing.join(", ")}),
                ),
            ));
        }
        if is_leaf(def.ty) {
            if !field.selection.is_empty() {
                self.leaf_selection_error(field, def.ty, path);
            }
        } else if field.selection.is_empty() {
            self.errors.push(gql_error(
                format!(
                    "Field must have selections (field '{}' returns {} but has no selections. Did you mean '{} {{ ... }}'?)",
                    field.name, def.ty, field.name
                ),
                Some(field.pos),
                Some(path.clone()),
                Some(json!({"code": "selectionMismatch", "nodeName": format!("field '{}'", field.name),
                    "typeName": def.ty})),
            ));
        } else {
            self.walk(&field.selection, def.ty, path);
        }
    }

    fn leaf_selection_error(&mut self, field: &Field, ty: &str, path: &[Json]) {
        let kind = if SCALARS.contains(&ty) || ty == "String" {
            "scalars"
        } else {
            "enums"
        };
        let names: Vec<&str> = field.selection.iter().map(|f| f.name.as_str()).collect();
        self.errors.push(gql_error(
            format!(
                "Selections can't be made on {kind} (field '{}' returns {ty} but has selections [{}])",
                field.name,
                names.join(", ")
            ),
            Some(field.pos),
            Some(path.to_vec()),
            Some(json!({"code": "selectionMismatch", "nodeName": format!("field '{}'", field.name),
                "typeName": ty})),
        ));
    }

    fn variable_defined(&mut self, name: &str, pos: Pos, path: &[Json]) -> bool {
        if self.vars.contains_key(name) {
            return true;
        }
        self.errors.push(gql_error(
            format!(
                "Variable ${name} is used by {} but not declared",
                self.op_label()
            ),
            Some(pos),
            Some(path.to_vec()),
            Some(json!({"code": "variableNotDefined", "variableName": name})),
        ));
        false
    }

    fn variable_use(&mut self, name: &str, field: &Field, adef: &ArgDef, pos: Pos, path: &[Json]) {
        if !self.variable_defined(name, pos, path) {
            return;
        }
        let def = self.vars[name];
        let arg_type = if adef.required {
            format!("{}!", adef.ty)
        } else {
            adef.ty.to_owned()
        };
        let mismatch = if def.ty.is_list() || def.ty.base() != adef.ty {
            Some("Type mismatch")
        } else if adef.required && !def.ty.non_null() && def.default.is_none() {
            Some("Nullability mismatch")
        } else {
            None
        };
        if let Some(kind) = mismatch {
            let mut p = path.to_vec();
            p.push(Json::from(adef.name));
            self.errors.push(gql_error(
                format!(
                    "{kind} on variable ${name} and argument {} ({} / {arg_type})",
                    adef.name, def.ty
                ),
                Some(pos),
                Some(p),
                Some(json!({"code": "variableMismatch", "variableName": name,
                    "typeName": def.ty.to_string(), "argumentName": adef.name,
                    "errorMessage": kind})),
            ));
        }
        let _ = field;
    }
}

/// JSON for a constant literal (variables already substituted).
fn literal_json(v: &Value, vars: &Map<String, Json>) -> Json {
    match v {
        Value::Var(n) => vars.get(n).cloned().unwrap_or(Json::Null),
        Value::Int(i) => Json::from(*i),
        Value::Float(x) => Json::from(*x),
        Value::Str(s) => Json::from(s.as_str()),
        Value::Bool(b) => Json::from(*b),
        Value::Null => Json::Null,
        Value::Enum(e) => Json::from(e.as_str()),
        Value::List(items) => Json::Array(items.iter().map(|i| literal_json(i, vars)).collect()),
        Value::Object(fields) => Json::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), literal_json(v, vars)))
                .collect(),
        ),
    }
}

/// An argument's value, `Null` when absent.
fn arg(field: &Field, name: &str, vars: &Map<String, Json>) -> Json {
    field
        .arg(name)
        .map(|a| literal_json(&a.value, vars))
        .unwrap_or(Json::Null)
}

/// Coerces one provided variable value; `Err` is the problem's explanation.
fn coerce_variable(v: &Json, ty: &TypeRef) -> Result<Json, String> {
    if v.is_null() {
        return if ty.non_null() {
            Err("Expected value to not be null".to_owned())
        } else {
            Ok(Json::Null)
        };
    }
    if ty.is_list() {
        return if v.is_array() {
            Ok(v.clone())
        } else {
            Err(format!("Could not coerce value {v} to {}", ty.base()))
        };
    }
    let base = ty.base();
    let ok = match base {
        "Int" => v.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
        "Float" => v.is_number(),
        "Boolean" => v.is_boolean(),
        "ID" => v.is_string() || v.is_i64() || v.is_u64(),
        "String" | "DateTime" | "Decimal" | "URL" => v.is_string(),
        "UnsignedInt64" => v.is_string() || v.is_u64(),
        other => v
            .as_str()
            .is_some_and(|s| enum_values(other).is_some_and(|vals| vals.contains(&s))),
    };
    if !ok {
        return Err(format!("Could not coerce value {v} to {base}"));
    }
    Ok(match (base, v) {
        ("ID", Json::Number(n)) => Json::from(n.to_string()),
        _ => v.clone(),
    })
}

/// The supported arguments of one `orders` field, validated.
pub(crate) struct OrdersArgs {
    pub first: Option<usize>,
    pub after: Option<Position>,
    pub sort: SortKey,
    pub reverse: bool,
    pub query: Option<String>,
    pub search: Search,
}

/// The largest page: Shopify's connections return at most 250 items per
/// request (its pagination guide; also the "Shopify API limits" cap of 250 on
/// input arrays).
pub(crate) const MAX_PAGE: i64 = 250;

fn orders_args(field: &Field, vars: &Map<String, Json>, bulk: bool) -> Result<OrdersArgs, String> {
    let first = arg(field, "first", vars);
    if !arg(field, "last", vars).is_null() || !arg(field, "before", vars).is_null() {
        return Err(
            "The emulator supports forward pagination only (`first` and `after`), not `last`/`before`."
                .to_owned(),
        );
    }
    if !arg(field, "savedSearchId", vars).is_null() {
        return Err("The emulator does not support `savedSearchId`.".to_owned());
    }
    let first = match first.as_i64() {
        None if bulk => None,
        // Shopify's own message for a connection without `first` or `last`.
        None => return Err("you must provide one of first or last".to_owned()),
        Some(n) if !(1..=MAX_PAGE).contains(&n) && !bulk => {
            return Err(format!(
                "The value of `first` must be between 1 and {MAX_PAGE} (got {n})."
            ))
        }
        Some(n) => Some(n.max(0) as usize),
    };
    let sort = match arg(field, "sortKey", vars).as_str() {
        None | Some("ID") => SortKey::Id,
        Some("CREATED_AT") | Some("PROCESSED_AT") => SortKey::CreatedAt,
        Some("UPDATED_AT") => SortKey::UpdatedAt,
        Some(other) => {
            return Err(format!(
                "The emulator does not support sortKey {other} (supported: ID, CREATED_AT, UPDATED_AT, PROCESSED_AT)."
            ))
        }
    };
    let reverse = arg(field, "reverse", vars).as_bool().unwrap_or(false);
    let query = arg(field, "query", vars).as_str().map(str::to_owned);
    let search = match &query {
        Some(q) => search::parse(q)?,
        None => Search::default(),
    };
    let after = match arg(field, "after", vars).as_str() {
        Some(c) => Some(decode_cursor(c, sort).ok_or_else(|| "Invalid cursor.".to_owned())?),
        None => None,
    };
    Ok(OrdersArgs {
        first,
        after,
        sort,
        reverse,
        query,
        search,
    })
}

/// Validates `op` against the schema and `variables`. `Ok` holds the coerced
/// variables. `bulk`: the inner query of `bulkOperationRunQuery` (no `first`
/// needed, no variables).
pub(crate) fn validate(
    op: &Operation,
    variables: &Map<String, Json>,
    bulk: bool,
) -> Result<Map<String, Json>, Vec<Json>> {
    if op.kind == OpKind::Subscription {
        return Err(vec![gql_error(
            "Schema is not configured for subscriptions",
            Some(op.pos),
            Some(vec![Json::from(op.path_head())]),
            Some(
                json!({"code": "missingSubscriptionConfiguration", "operationName": op.path_head()}),
            ),
        )]);
    }
    let mut v = Validator {
        op,
        vars: op.vars.iter().map(|d| (d.name.as_str(), d)).collect(),
        used: HashSet::new(),
        errors: Vec::new(),
    };
    for def in &op.vars {
        let base = def.ty.base();
        if !is_input_type(base) {
            let what = if object_fields(base).is_some() || enum_values(base).is_some() {
                "isn't a valid input type"
            } else {
                "isn't a defined input type"
            };
            v.errors.push(gql_error(
                format!("{base} {what} (on ${})", def.name),
                Some(def.pos),
                Some(vec![Json::from(op.path_head())]),
                Some(
                    json!({"code": "variableRequiresValidType", "typeName": base,
                    "variableName": def.name}),
                ),
            ));
        }
    }
    let mut path = vec![Json::from(op.path_head())];
    v.walk(&op.selection, root_type(op.kind), &mut path);
    for def in &op.vars {
        if !v.used.contains(&def.name) {
            v.errors.push(gql_error(
                format!(
                    "Variable ${} is declared by {} but not used",
                    def.name,
                    v.op_label()
                ),
                Some(def.pos),
                Some(vec![Json::from(op.path_head())]),
                Some(json!({"code": "variableNotUsed", "variableName": def.name})),
            ));
        }
    }
    if !v.errors.is_empty() {
        return Err(v.errors);
    }

    // Variable values.
    let mut coerced = Map::new();
    let mut errors = Vec::new();
    for def in &op.vars {
        let provided = variables.get(&def.name);
        let value = match (provided, &def.default) {
            (Some(p), _) => p.clone(),
            (None, Some(d)) => literal_json(d, &Map::new()),
            (None, None) => Json::Null,
        };
        match coerce_variable(&value, &def.ty) {
            Ok(c) => {
                coerced.insert(def.name.clone(), c);
            }
            Err(explanation) => errors.push(gql_error(
                format!(
                    "Variable ${} of type {} was provided invalid value",
                    def.name, def.ty
                ),
                Some(def.pos),
                None,
                Some(
                    json!({"value": value, "problems": [{"path": [], "explanation": explanation}]}),
                ),
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    // Argument values the schema alone cannot check.
    for field in &op.selection {
        if field.name == "orders" && op.kind == OpKind::Query {
            if let Err(message) = orders_args(field, &coerced, bulk) {
                errors.push(gql_error(
                    message,
                    Some(field.pos),
                    Some(vec![Json::from(field.key())]),
                    None,
                ));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(coerced)
}

// ---------------------------------------------------------------------------
// Cost

/// The cost of one node of a connection field's selection (see the module docs).
fn node_cost(conn: &Field) -> u64 {
    let mut best = 0;
    for f in &conn.selection {
        match f.name.as_str() {
            "nodes" => best = best.max(1 + selection_cost(&f.selection, "Order", None)),
            "edges" => {
                for e in &f.selection {
                    if e.name == "node" {
                        best = best.max(1 + selection_cost(&e.selection, "Order", None));
                    }
                }
            }
            _ => {}
        }
    }
    best
}

fn selection_cost(selection: &[Field], ty: &str, vars: Option<&Map<String, Json>>) -> u64 {
    selection
        .iter()
        .map(|f| field_cost(f, ty, vars))
        .fold(0u64, u64::saturating_add)
}

/// Requested cost of one field. `vars: None` inside connections (no nested
/// connections exist in the schema subset).
fn field_cost(field: &Field, ty: &str, vars: Option<&Map<String, Json>>) -> u64 {
    let Some(def) = field_def(ty, &field.name) else {
        return 0;
    };
    if ty == "Mutation" {
        return 10;
    }
    if is_leaf(def.ty) {
        return 0;
    }
    if def.ty == "OrderConnection" {
        let first = vars
            .map(|v| arg(field, "first", v).as_u64().unwrap_or(0))
            .unwrap_or(0);
        return 2u64.saturating_add(first.saturating_mul(node_cost(field)));
    }
    1 + selection_cost(&field.selection, def.ty, vars)
}

/// `requestedQueryCost` of a validated operation.
pub(crate) fn requested_cost(op: &Operation, vars: &Map<String, Json>) -> u64 {
    selection_cost(&op.selection, root_type(op.kind), Some(vars))
}

/// Shopify's single query limit.
pub(crate) const MAX_QUERY_COST: u64 = 1000;

// ---------------------------------------------------------------------------
// Execution

/// Shopify's `DateTime`: ISO 8601 in UTC, whole seconds, `Z`.
pub(crate) fn iso(ns: i128) -> String {
    match jiff::Timestamp::from_nanosecond(ns) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => String::new(),
    }
}

fn iso_ts(ts: jiff::Timestamp) -> String {
    iso(ts.as_nanosecond())
}

/// Every field of an order, as Shopify serializes it.
fn order_json(o: &Order) -> Json {
    let s = &o.spec;
    let money = json!({"amount": s.amount, "currencyCode": s.currency});
    json!({
        "id": format!("gid://shopify/Order/{}", s.legacy_id),
        "legacyResourceId": s.legacy_id.to_string(),
        "name": s.name,
        "createdAt": iso(o.created_ns),
        "updatedAt": iso(o.updated_ns),
        "processedAt": iso(o.created_ns),
        "email": s.email,
        "displayFinancialStatus": s.financial_status,
        "currencyCode": s.currency,
        "totalPriceSet": {"shopMoney": money.clone(), "presentmentMoney": money},
    })
}

/// Projects a fully built object onto a (validated) selection of type `ty`.
fn project(full: &Json, selection: &[Field], ty: &str) -> Json {
    let mut out = Map::new();
    for field in selection {
        let v = if field.name == "__typename" {
            Json::from(ty)
        } else {
            let child_ty = field_def(ty, &field.name).map_or("", |d| d.ty);
            let raw = full.get(&field.name).unwrap_or(&Json::Null);
            if field.selection.is_empty() {
                raw.clone()
            } else {
                match raw {
                    Json::Null => Json::Null,
                    Json::Array(items) => Json::Array(
                        items
                            .iter()
                            .map(|i| project(i, &field.selection, child_ty))
                            .collect(),
                    ),
                    obj => project(obj, &field.selection, child_ty),
                }
            }
        };
        out.insert(field.key().to_owned(), v);
    }
    Json::Object(out)
}

/// The opaque cursor of `o` in `sort` order: base64 of
/// `{"last_id": <id>, "last_value": <sort value>}`, the shape Shopify's own
/// cursors decode to.
fn encode_cursor(o: &Order, sort: SortKey) -> String {
    let value = match sort {
        SortKey::Id => Json::from(o.spec.legacy_id),
        SortKey::CreatedAt => Json::from(precise(o.created_ns)),
        SortKey::UpdatedAt => Json::from(precise(o.updated_ns)),
    };
    let text = json!({"last_id": o.spec.legacy_id, "last_value": value}).to_string();
    base64_encode(text.as_bytes())
}

fn precise(ns: i128) -> String {
    jiff::Timestamp::from_nanosecond(ns)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn decode_cursor(cursor: &str, sort: SortKey) -> Option<Position> {
    let bytes = base64_decode(cursor)?;
    let v: Json = serde_json::from_slice(&bytes).ok()?;
    let id = v.get("last_id")?.as_u64()?;
    let value = v.get("last_value")?;
    let value = match sort {
        SortKey::Id => value.as_u64()? as i128,
        SortKey::CreatedAt | SortKey::UpdatedAt => value
            .as_str()?
            .parse::<jiff::Timestamp>()
            .ok()?
            .as_nanosecond(),
    };
    Some((value, id))
}

/// What executing a validated operation produced.
pub(crate) struct Executed {
    pub data: Json,
    pub actual: u64,
    /// `extensions.search` entries (search warnings), if any.
    pub search: Vec<Json>,
}

pub(crate) fn execute(
    shared: &Shared,
    op: &Operation,
    vars: &Map<String, Json>,
    now: Instant,
) -> Executed {
    let mut data = Map::new();
    let mut actual = 0u64;
    let mut search = Vec::new();
    for field in &op.selection {
        let value = match (op.kind, field.name.as_str()) {
            (_, "__typename") => Json::from(root_type(op.kind)),
            (OpKind::Query, "orders") => {
                let (v, cost, warnings) = run_orders(shared, field, vars);
                actual += cost;
                if let Some(w) = warnings {
                    search.push(w);
                }
                v
            }
            (OpKind::Query, "currentBulkOperation") => {
                let v = current_bulk(shared, field, vars, now);
                if !v.is_null() {
                    actual += 1 + selection_cost(&field.selection, "BulkOperation", None);
                }
                v
            }
            (OpKind::Query, "currentAppInstallation") => {
                actual += 1 + selection_cost(&field.selection, "AppInstallation", None);
                let scopes: Vec<Json> = shared
                    .access_scopes
                    .iter()
                    .map(|h| json!({"handle": h, "description": format!("The {h} access scope")}))
                    .collect();
                let full = json!({
                    "id": "gid://shopify/AppInstallation/1",
                    "accessScopes": scopes,
                });
                project(&full, &field.selection, "AppInstallation")
            }
            (OpKind::Mutation, "bulkOperationRunQuery") => {
                actual += 10;
                run_bulk(shared, field, vars, now)
            }
            _ => Json::Null,
        };
        data.insert(field.key().to_owned(), value);
    }
    Executed {
        data: Json::Object(data),
        actual,
        search,
    }
}

/// One page of `orders`: (projected connection, actual cost, search warnings).
fn run_orders(
    shared: &Shared,
    field: &Field,
    vars: &Map<String, Json>,
) -> (Json, u64, Option<Json>) {
    let args = match orders_args(field, vars, false) {
        Ok(a) => a,
        // Validation already ran the same checks.
        Err(_) => return (Json::Null, 0, None),
    };
    let page = shared.store.read().unwrap().page(&PageRequest {
        sort: args.sort,
        reverse: args.reverse,
        after: args.after,
        search: &args.search,
        limit: args.first,
        created_from: shared.visible_from(),
    });
    let wants = |name: &str| field.selection.iter().any(|f| f.name == name);
    let nodes: Vec<Json> = page.orders.iter().map(|o| order_json(o)).collect();
    let cursors: Vec<String> = page
        .orders
        .iter()
        .map(|o| encode_cursor(o, args.sort))
        .collect();
    let mut full = Map::new();
    if wants("edges") {
        let edges = nodes
            .iter()
            .zip(&cursors)
            .map(|(n, c)| json!({"cursor": c, "node": n}))
            .collect();
        full.insert("edges".into(), Json::Array(edges));
    }
    full.insert(
        "pageInfo".into(),
        json!({
            "hasNextPage": page.has_next,
            "hasPreviousPage": page.has_previous,
            "startCursor": cursors.first(),
            "endCursor": cursors.last(),
        }),
    );
    full.insert("nodes".into(), Json::Array(nodes));
    let cost = 2 + page.orders.len() as u64 * node_cost(field);
    let warnings = (!args.search.warnings.is_empty()).then(|| {
        json!({
            "path": [field.key()],
            "query": args.query,
            "warnings": args.search.warnings.iter()
                .map(|(f, m)| json!({"field": f, "message": m}))
                .collect::<Vec<_>>(),
        })
    });
    (
        project(&Json::Object(full), &field.selection, "OrderConnection"),
        cost,
        warnings,
    )
}

fn bulk_json(v: &BulkView, base_url: &str) -> Json {
    let n = v.number;
    json!({
        "id": format!("gid://shopify/BulkOperation/{n}"),
        "status": v.status,
        "errorCode": v.error_code,
        // `UnsignedInt64` is serialized as a string.
        "objectCount": v.object_count.to_string(),
        "rootObjectCount": v.object_count.to_string(),
        "fileSize": v.file_size.map(|s| s.to_string()),
        "url": v.url.then(|| format!("{base_url}/bulk/{n}.jsonl")),
        "partialDataUrl": v.partial.then(|| format!("{base_url}/bulk/{n}-partial.jsonl")),
        "createdAt": iso_ts(v.created_at),
        "completedAt": v.completed_at.map(iso_ts),
        "query": v.query,
        "type": "QUERY",
    })
}

/// `currentBulkOperation(type:)`: the most recent bulk query, or `null`.
fn current_bulk(shared: &Shared, field: &Field, vars: &Map<String, Json>, now: Instant) -> Json {
    if arg(field, "type", vars).as_str() == Some("MUTATION") {
        // The emulator runs no bulk mutations.
        return Json::Null;
    }
    let bulk = shared.bulk.lock().unwrap();
    let Some(op) = bulk.current.and_then(|n| bulk.ops.get(&n)) else {
        return Json::Null;
    };
    let view = op.view(now, shared.bulk_delay);
    project(
        &bulk_json(&view, &shared.base_url),
        &field.selection,
        "BulkOperation",
    )
}

/// `bulkOperationRunQuery(query:)`.
///
/// Shopify ("Perform bulk operations with the GraphQL Admin API", and the
/// `currentBulkOperation` reference): "Apps can run one bulk query and one bulk
/// mutation operation at a time per shop"; the mutation answers with the new
/// operation (status `CREATED`) or `userErrors`; the result is a JSONL file,
/// one object per line, the connection's nodes flattened (no `edges`/`node`
/// wrappers).
fn run_bulk(shared: &Shared, field: &Field, vars: &Map<String, Json>, now: Instant) -> Json {
    let query = arg(field, "query", vars)
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let payload = |op: Option<Json>, errors: Vec<Json>| {
        let full = json!({"bulkOperation": op, "userErrors": errors});
        project(&full, &field.selection, "BulkOperationRunQueryPayload")
    };
    let user_error = |field: Option<&str>, message: String, code: &str| json!({"field": field.map(|f| vec![f]), "message": message, "code": code});
    let mut bulk = shared.bulk.lock().unwrap();
    let running = bulk
        .current
        .and_then(|n| bulk.ops.get(&n))
        .is_some_and(|op| !op.done(now, shared.bulk_delay));
    if running {
        return payload(
            None,
            vec![user_error(
                None,
                "A bulk query operation for this app and shop is already in progress".to_owned(),
                "OPERATION_IN_PROGRESS",
            )],
        );
    }
    let lines = match bulk_lines(shared, &query) {
        Ok(lines) => lines,
        Err(message) => {
            return payload(
                None,
                vec![user_error(
                    Some("query"),
                    format!("Invalid bulk query: {message}"),
                    "INVALID",
                )],
            )
        }
    };
    bulk.next_number += 1;
    let number = bulk.next_number;
    let outcome = std::mem::take(&mut bulk.next_outcome);
    let op = BulkOp {
        number,
        query,
        started: now,
        created_at: jiff::Timestamp::now(),
        outcome,
        lines: Arc::new(lines),
    };
    // The mutation's answer: just created, nothing processed yet.
    let created = BulkView {
        number,
        status: "CREATED",
        error_code: None,
        object_count: 0,
        file_size: None,
        url: false,
        partial: false,
        created_at: op.created_at,
        completed_at: None,
        query: op.query.clone(),
    };
    let json = bulk_json(&created, &shared.base_url);
    bulk.ops.insert(number, op);
    bulk.current = Some(number);
    drop(bulk);
    shared.stats.lock().unwrap().bulk_operations += 1;
    payload(Some(json), Vec::new())
}

/// Runs a bulk query now: its JSONL lines, or why it is invalid.
fn bulk_lines(shared: &Shared, query: &str) -> Result<Vec<String>, String> {
    let doc = graphql::parse(query).map_err(|e| e.message)?;
    if doc.operations.len() != 1 {
        return Err("bulk queries must contain exactly one operation".to_owned());
    }
    let op = &doc.operations[0];
    if op.kind != OpKind::Query {
        return Err("bulk queries must be queries".to_owned());
    }
    if !op.vars.is_empty() {
        return Err("bulk queries cannot use variables".to_owned());
    }
    let vars = validate(op, &Map::new(), true).map_err(|errors| {
        errors[0]["message"]
            .as_str()
            .unwrap_or("invalid query")
            .to_owned()
    })?;
    let [root] = op.selection.as_slice() else {
        return Err(
            "the emulator runs bulk queries with exactly one top-level field, `orders`".to_owned(),
        );
    };
    if root.name != "orders" {
        return Err("Bulk queries must contain at least one connection.".to_owned());
    }
    let node_selection = root
        .selection
        .iter()
        .find_map(|f| match f.name.as_str() {
            "nodes" => Some(&f.selection),
            "edges" => f
                .selection
                .iter()
                .find(|e| e.name == "node")
                .map(|e| &e.selection),
            _ => None,
        })
        .ok_or_else(|| "select `edges { node { … } }` (or `nodes { … }`) on `orders`".to_owned())?;
    let args = orders_args(root, &vars, true)?;
    let page = shared.store.read().unwrap().page(&PageRequest {
        sort: args.sort,
        reverse: args.reverse,
        after: args.after,
        search: &args.search,
        limit: args.first,
        created_from: shared.visible_from(),
    });
    Ok(page
        .orders
        .iter()
        .map(|o| project(&order_json(o), node_selection, "Order").to_string())
        .collect())
}
