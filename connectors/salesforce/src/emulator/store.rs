//! The org's data: sObject definitions (with the implicit system fields),
//! records, the indexes of unique and external ID fields, and the write path
//! shared by sObject Collections and Bulk API 2.0 ingest.
//!
//! # Matching and uniqueness
//!
//! * Upsert matching by an external ID field is case-insensitive only when
//!   the field is unique and not case-sensitive ("Custom field matching is
//!   case-insensitive only if the custom field has the Unique and Treat "ABC"
//!   and "abc" as duplicate values (case insensitive) attributes selected",
//!   Apex Developer Guide, "Upserting Records"; the same rule in the SOAP API
//!   `upsert()` reference). A non-unique external ID matches case-sensitively,
//!   and a key matching several records fails with `DUPLICATE_EXTERNAL_ID`.
//! * Every unique field is enforced on every write: a value another record
//!   holds (compared case-insensitively unless the field is case-sensitive)
//!   fails with `DUPLICATE_VALUE`.
//! * Rows of one batch are applied in order, so a later row sees an earlier
//!   row's record ("Objects are created or updated in the order they're
//!   listed", sObject Collections upsert reference). The same external ID
//!   twice in one batch fails every such row with `DUPLICATE_VALUE`
//!   ("Duplicate external id specified").

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::values::{parse_date, parse_datetime, sf_id, Dec, Val};
use super::{FieldDef, FieldType};

/// A per-record error, as `{"statusCode","message","fields"}`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RecErr {
    pub code: &'static str,
    pub message: String,
    pub fields: Vec<String>,
}

impl RecErr {
    pub fn new(code: &'static str, message: impl Into<String>, fields: &[&str]) -> RecErr {
        RecErr {
            code,
            message: message.into(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
        }
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "statusCode": self.code,
            "message": self.message,
            "fields": self.fields,
        })
    }

    /// Bulk API's `sf__Error` form: `CODE:message:fields --`.
    pub fn to_bulk(&self) -> String {
        format!(
            "{}:{}:{} --",
            self.code,
            self.message,
            self.fields.join(",")
        )
    }
}

/// Indexes of the system fields every object has.
pub(crate) const ID: usize = 0;
pub(crate) const NAME: usize = 1;
pub(crate) const CREATED: usize = 2;
pub(crate) const MODIFIED: usize = 3;

pub(crate) struct Record {
    pub id: String,
    pub vals: Vec<Val>,
}

impl Record {
    pub fn get(&self, i: usize) -> &Val {
        self.vals.get(i).unwrap_or(&Val::Null)
    }
}

pub(crate) struct Object {
    pub name: String,
    pub key_prefix: String,
    pub fields: Vec<FieldDef>,
    by_lower: HashMap<String, usize>,
    pub records: Vec<Record>,
    /// Per indexed field (unique or external ID): key → record indexes.
    index: HashMap<usize, HashMap<String, Vec<usize>>>,
    next_id: u64,
}

/// How a write batch treats existing records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteOp {
    /// Always create (unique fields may refuse).
    Insert,
    /// Match by this field: update the one match, or create.
    Upsert(usize),
}

/// One row's outcome: `(record id, created)`.
pub(crate) type RowResult = Result<(String, bool), RecErr>;

enum Undo {
    Created,
    Updated(usize, Vec<Val>),
}

impl FieldDef {
    fn system(name: &str, kind: FieldType, length: u32) -> FieldDef {
        FieldDef {
            name: name.to_owned(),
            kind,
            external_id: false,
            unique: false,
            case_sensitive: false,
            scale: 0,
            precision: 0,
            length,
            nillable: false,
            createable: true,
            updateable: true,
        }
    }

    /// Compares and indexes case-insensitively (for SOQL: every field but a
    /// unique case-sensitive one).
    pub(crate) fn soql_ci(&self) -> bool {
        !(self.unique && self.case_sensitive)
    }

    /// Upsert matching is case-insensitive only for unique, case-insensitive
    /// fields.
    fn match_ci(&self) -> bool {
        self.unique && !self.case_sensitive
    }

    fn indexed(&self) -> bool {
        self.unique || self.external_id
    }

    fn key(&self, v: &Val) -> Option<String> {
        let s = match v {
            Val::Null => return None,
            Val::Str(s) | Val::Num(s) => s.clone(),
            other => other.to_csv(),
        };
        Some(if self.match_ci() { s.to_lowercase() } else { s })
    }

    /// A field the platform maintains: never written through the API.
    pub(crate) fn platform_maintained(&self) -> bool {
        matches!(
            self.name.as_str(),
            "Id" | "CreatedDate" | "LastModifiedDate" | "SystemModstamp"
        )
    }

    /// describe's `createable`: settable when a record is created.
    pub(crate) fn can_create(&self) -> bool {
        self.createable && !self.platform_maintained()
    }

    /// describe's `updateable`: settable on an existing record.
    pub(crate) fn can_update(&self) -> bool {
        self.updateable && !self.platform_maintained()
    }
}

/// The key prefix of a few standard objects; custom objects get `a00`, `a01`, …
fn key_prefix(name: &str, n: usize) -> String {
    match name {
        "Account" => "001".into(),
        "Contact" => "003".into(),
        "Opportunity" => "006".into(),
        "Lead" => "00Q".into(),
        _ => format!("a{:02}", n % 100),
    }
}

impl Object {
    pub fn new(name: &str, ordinal: usize, defs: Vec<FieldDef>) -> Object {
        let mut fields = vec![
            FieldDef::system("Id", FieldType::Id, 18),
            FieldDef::system("Name", FieldType::String, 80),
            FieldDef::system("CreatedDate", FieldType::Datetime, 0),
            FieldDef::system("LastModifiedDate", FieldType::Datetime, 0),
        ];
        for mut d in defs {
            if d.name.eq_ignore_ascii_case("CurrencyIsoCode") {
                d.name = "CurrencyIsoCode".into();
                d.kind = FieldType::Picklist;
                d.length = 3;
            }
            match fields
                .iter()
                .position(|f| f.name.eq_ignore_ascii_case(&d.name))
            {
                // `Name` may be redefined (e.g. unique); the system ones not.
                Some(NAME) => fields[NAME] = d,
                Some(_) => {}
                None => fields.push(d),
            }
        }
        let by_lower = fields
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.to_lowercase(), i))
            .collect();
        let index = fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.indexed())
            .map(|(i, _)| (i, HashMap::new()))
            .collect();
        Object {
            name: name.to_owned(),
            key_prefix: key_prefix(name, ordinal),
            fields,
            by_lower,
            records: Vec::new(),
            index,
            next_id: 1,
        }
    }

    /// A field by name, case-insensitively (as SOQL and the REST API treat
    /// field names).
    pub fn field(&self, name: &str) -> Option<usize> {
        self.by_lower.get(&name.to_lowercase()).copied()
    }

    fn matches(&self, field: usize, v: &Val) -> Vec<usize> {
        let def = &self.fields[field];
        match (self.index.get(&field), def.key(v)) {
            (Some(ix), Some(k)) => ix.get(&k).cloned().unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Another record holding `v` in unique field `field`. A unique field's
    /// index is keyed the way its uniqueness compares (lowercased unless the
    /// field is case-sensitive), so this is one lookup.
    fn unique_holder(&self, field: usize, v: &Val, me: Option<usize>) -> Option<usize> {
        let k = self.fields[field].key(v)?;
        self.index
            .get(&field)?
            .get(&k)?
            .iter()
            .copied()
            .find(|&r| Some(r) != me)
    }

    fn index_add(&mut self, rec: usize) {
        for (&f, ix) in self.index.iter_mut() {
            if let Some(k) = self.fields[f].key(self.records[rec].get(f)) {
                ix.entry(k).or_default().push(rec);
            }
        }
    }

    fn index_remove(&mut self, rec: usize) {
        for (&f, ix) in self.index.iter_mut() {
            if let Some(k) = self.fields[f].key(self.records[rec].get(f)) {
                if let Some(list) = ix.get_mut(&k) {
                    list.retain(|&r| r != rec);
                    if list.is_empty() {
                        ix.remove(&k);
                    }
                }
            }
        }
    }

    /// Converts a JSON value for field `i` (REST bodies; `Emulator::insert`).
    pub fn coerce_json(&self, i: usize, v: &Value) -> Result<Val, RecErr> {
        let def = &self.fields[i];
        let text = match v {
            Value::Null => return Ok(Val::Null),
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => return Err(bad_type(def, &v.to_string())),
        };
        if def.kind == FieldType::Boolean && matches!(v, Value::Number(_)) {
            return Err(bad_type(def, &text));
        }
        self.coerce_text(i, &text)
    }

    /// Converts text (a JSON string, or a Bulk API CSV cell) for field `i`.
    /// Empty text is null (Salesforce stores no empty strings).
    pub fn coerce_text(&self, i: usize, text: &str) -> Result<Val, RecErr> {
        let def = &self.fields[i];
        if text.is_empty() {
            return Ok(Val::Null);
        }
        match def.kind {
            FieldType::String | FieldType::Picklist | FieldType::Id => {
                let n = text.chars().count();
                if def.length > 0 && n > def.length as usize {
                    let shown: String = text.chars().take(40).collect();
                    return Err(RecErr::new(
                        "STRING_TOO_LONG",
                        format!(
                            "{}: data value too large: {shown} (max length={})",
                            def.name, def.length
                        ),
                        &[&def.name],
                    ));
                }
                Ok(Val::Str(text.to_owned()))
            }
            FieldType::Currency | FieldType::Double | FieldType::Percent => {
                let d = Dec::parse(text).ok_or_else(|| bad_type(def, text))?;
                let max_int = def.precision.saturating_sub(def.scale) as usize;
                if def.precision > 0 && d.int_digits() > max_int {
                    return Err(RecErr::new(
                        "NUMBER_OUTSIDE_VALID_RANGE",
                        format!(
                            "{}: value outside of valid range on numeric field: {text}",
                            def.name
                        ),
                        &[&def.name],
                    ));
                }
                Ok(Val::Num(d.canonical(def.scale)))
            }
            FieldType::Boolean => match text.to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(Val::Bool(true)),
                "false" | "0" => Ok(Val::Bool(false)),
                _ => Err(bad_type(def, text)),
            },
            // "Regular dateTime fields are full timestamps with a precision
            // of one second" (SOAP API "Primitive Data Types").
            FieldType::Datetime => parse_datetime(text)
                .map(|ms| Val::DateTime(whole_second(ms)))
                .ok_or_else(|| bad_type(def, text)),
            FieldType::Date => parse_date(text)
                .map(Val::Date)
                .ok_or_else(|| bad_type(def, text)),
        }
    }

    /// Applies `rows` in order (see the module docs). A row that is already
    /// `Err` (a value that did not convert) fails as is. With `all_or_none`,
    /// one failure rolls every row back and the others fail with
    /// `ALL_OR_NONE_OPERATION_ROLLED_BACK`.
    pub fn write(
        &mut self,
        op: WriteOp,
        rows: Vec<Result<Vec<(usize, Val)>, RecErr>>,
        all_or_none: bool,
        system: bool,
        now: i64,
    ) -> Vec<RowResult> {
        let now = whole_second(now);
        let mut out: Vec<Option<RowResult>> = vec![None; rows.len()];
        // The same key twice in one batch fails every such row.
        if let WriteOp::Upsert(key) = op {
            let def = self.fields[key].clone();
            let mut seen: HashMap<String, Vec<usize>> = HashMap::new();
            for (n, row) in rows.iter().enumerate() {
                if let Ok(vals) = row {
                    if let Some(k) = vals
                        .iter()
                        .find(|(f, _)| *f == key)
                        .and_then(|(_, v)| def.key(v))
                    {
                        seen.entry(k).or_default().push(n);
                    }
                }
            }
            for rows_with_key in seen.values().filter(|v| v.len() > 1) {
                for &n in rows_with_key {
                    let shown = rows[n]
                        .as_ref()
                        .ok()
                        .and_then(|v| v.iter().find(|(f, _)| *f == key))
                        .map(|(_, v)| v.to_csv())
                        .unwrap_or_default();
                    out[n] = Some(Err(RecErr::new(
                        "DUPLICATE_VALUE",
                        format!("Duplicate external id specified: {shown}"),
                        &[&def.name],
                    )));
                }
            }
        }
        let mut undo = Vec::new();
        for (n, row) in rows.into_iter().enumerate() {
            if out[n].is_some() {
                continue;
            }
            out[n] = Some(match row {
                Err(e) => Err(e),
                Ok(vals) => self.write_row(op, vals, system, now, &mut undo),
            });
        }
        let mut out: Vec<RowResult> = out
            .into_iter()
            .map(|r| r.expect("every row decided"))
            .collect();
        if all_or_none && out.iter().any(Result::is_err) {
            for u in undo.into_iter().rev() {
                match u {
                    Undo::Created => {
                        let i = self.records.len() - 1;
                        self.index_remove(i);
                        self.records.pop();
                    }
                    Undo::Updated(i, old) => {
                        self.index_remove(i);
                        self.records[i].vals = old;
                        self.index_add(i);
                    }
                }
            }
            for r in out.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(RecErr::new(
                    "ALL_OR_NONE_OPERATION_ROLLED_BACK",
                    "Record rolled back because not all records were valid and the request was using AllOrNone header",
                    &[],
                ));
            }
        }
        out
    }

    fn write_row(
        &mut self,
        op: WriteOp,
        vals: Vec<(usize, Val)>,
        system: bool,
        now: i64,
        undo: &mut Vec<Undo>,
    ) -> RowResult {
        let existing = match op {
            WriteOp::Insert => None,
            WriteOp::Upsert(key) => {
                let name = self.fields[key].name.clone();
                let Some((_, v)) = vals.iter().find(|(f, v)| *f == key && !v.is_null()) else {
                    return Err(RecErr::new(
                        "MISSING_ARGUMENT",
                        format!("{name} not specified"),
                        &[&name],
                    ));
                };
                let found = self.matches(key, v);
                if found.len() > 1 {
                    let ids: Vec<&str> =
                        found.iter().map(|&i| self.records[i].id.as_str()).collect();
                    return Err(RecErr::new(
                        "DUPLICATE_EXTERNAL_ID",
                        format!(
                            "{name}: more than 1 record found for external id field: {}",
                            ids.join(", ")
                        ),
                        &[&name],
                    ));
                }
                found.first().copied()
            }
        };
        if !system {
            self.check_settable(&vals, existing.is_none())?;
        }
        match existing {
            Some(i) => self.update(i, vals, now, undo).map(|id| (id, false)),
            None => self.create(vals, now, undo).map(|id| (id, true)),
        }
    }

    /// Fields a create (`creating`) or an update may not set fail the row
    /// with `INVALID_FIELD_FOR_INSERT_UPDATE`, naming them (SOAP API "Core
    /// Data Types Used in API Calls", `StatusCode`; the message as
    /// Salesforce words it for a field the user's profile or permission
    /// set leaves read-only).
    fn check_settable(&self, vals: &[(usize, Val)], creating: bool) -> Result<(), RecErr> {
        let fixed: Vec<&str> = vals
            .iter()
            .map(|(f, _)| &self.fields[*f])
            .filter(|d| {
                if creating {
                    !d.can_create()
                } else {
                    !d.can_update()
                }
            })
            .map(|d| d.name.as_str())
            .collect();
        if fixed.is_empty() {
            return Ok(());
        }
        Err(RecErr::new(
            "INVALID_FIELD_FOR_INSERT_UPDATE",
            format!("Unable to create/update fields: {}. Please check the security settings of this field and verify that it is read/write for your profile or permission set.", fixed.join(", ")),
            &fixed,
        ))
    }

    fn check_unique(&self, vals: &[(usize, Val)], me: Option<usize>) -> Result<(), RecErr> {
        for (f, v) in vals {
            let def = &self.fields[*f];
            if !def.unique || v.is_null() {
                continue;
            }
            if let Some(other) = self.unique_holder(*f, v, me) {
                return Err(RecErr::new(
                    "DUPLICATE_VALUE",
                    format!(
                        "duplicate value found: {} duplicates value on record with id: {}",
                        def.name, self.records[other].id
                    ),
                    &[&def.name],
                ));
            }
        }
        Ok(())
    }

    fn create(
        &mut self,
        vals: Vec<(usize, Val)>,
        now: i64,
        undo: &mut Vec<Undo>,
    ) -> Result<String, RecErr> {
        let mut row = vec![Val::Null; self.fields.len()];
        for (f, v) in vals.iter() {
            row[*f] = v.clone();
        }
        let missing: Vec<&str> = self
            .fields
            .iter()
            .enumerate()
            .filter(|(i, d)| {
                !d.nillable
                    && row[*i].is_null()
                    && *i > MODIFIED
                    && d.kind != FieldType::Boolean
                    && d.name != "CurrencyIsoCode"
            })
            .map(|(_, d)| d.name.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(RecErr::new(
                "REQUIRED_FIELD_MISSING",
                format!("Required fields are missing: [{}]", missing.join(", ")),
                &missing,
            ));
        }
        self.check_unique(&vals, None)?;
        let id = sf_id(&self.key_prefix, self.next_id);
        self.next_id += 1;
        row[ID] = Val::Str(id.clone());
        for (i, d) in self.fields.iter().enumerate() {
            if row[i].is_null() {
                if d.kind == FieldType::Boolean {
                    row[i] = Val::Bool(false);
                } else if d.name == "CurrencyIsoCode" {
                    row[i] = Val::Str("USD".into());
                }
            }
        }
        // A custom object record created without a Name is named by its Id.
        if row[NAME].is_null() {
            row[NAME] = Val::Str(id.clone());
        }
        if row[CREATED].is_null() {
            row[CREATED] = Val::DateTime(now);
        }
        if row[MODIFIED].is_null() {
            row[MODIFIED] = row[CREATED].clone();
        }
        let i = self.records.len();
        self.records.push(Record {
            id: id.clone(),
            vals: row,
        });
        self.index_add(i);
        undo.push(Undo::Created);
        Ok(id)
    }

    fn update(
        &mut self,
        i: usize,
        vals: Vec<(usize, Val)>,
        now: i64,
        undo: &mut Vec<Undo>,
    ) -> Result<String, RecErr> {
        let cleared: Vec<&str> = vals
            .iter()
            .filter(|(f, v)| v.is_null() && !self.fields[*f].nillable)
            .map(|(f, _)| self.fields[*f].name.as_str())
            .collect();
        if !cleared.is_empty() {
            return Err(RecErr::new(
                "REQUIRED_FIELD_MISSING",
                format!("Required fields are missing: [{}]", cleared.join(", ")),
                &cleared,
            ));
        }
        self.check_unique(&vals, Some(i))?;
        let old = self.records[i].vals.clone();
        self.index_remove(i);
        for (f, v) in vals {
            self.records[i].vals[f] = v;
        }
        if self.records[i].vals[MODIFIED] == old[MODIFIED] {
            self.records[i].vals[MODIFIED] = Val::DateTime(now);
        }
        self.index_add(i);
        undo.push(Undo::Updated(i, old));
        Ok(self.records[i].id.clone())
    }

    /// The record as the REST API shows it, every field.
    pub fn record_json(&self, rec: &Record) -> Value {
        let mut m = Map::new();
        for (i, f) in self.fields.iter().enumerate() {
            m.insert(f.name.clone(), rec.get(i).to_json());
        }
        Value::Object(m)
    }
}

/// Milliseconds dropped: Salesforce datetimes hold whole seconds.
fn whole_second(ms: i64) -> i64 {
    ms - ms.rem_euclid(1000)
}

fn bad_type(def: &FieldDef, text: &str) -> RecErr {
    RecErr::new(
        "INVALID_TYPE_ON_FIELD_IN_RECORD",
        format!("{}: value not of required type: {text}", def.name),
        &[&def.name],
    )
}

/// Every object of the org.
#[derive(Default)]
pub(crate) struct Store {
    objects: HashMap<String, Object>,
}

impl Store {
    /// An object by API name, case-insensitively.
    pub fn object(&self, name: &str) -> Option<&Object> {
        self.objects.get(&name.to_lowercase())
    }

    pub fn object_mut(&mut self, name: &str) -> Option<&mut Object> {
        self.objects.get_mut(&name.to_lowercase())
    }

    pub fn define(&mut self, name: &str, defs: Vec<FieldDef>) -> Result<(), String> {
        let key = name.to_lowercase();
        if self
            .objects
            .get(&key)
            .is_some_and(|o| !o.records.is_empty())
        {
            return Err(format!("{name} already has records"));
        }
        let ordinal = self.objects.len() + 1;
        self.objects.insert(key, Object::new(name, ordinal, defs));
        Ok(())
    }
}
