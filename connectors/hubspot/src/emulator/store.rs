//! The emulator's CRM store: per object type, the property definitions, the
//! records (by record id, ascending) and an index per unique property
//! (value → record id).
//!
//! Unique properties: HubSpot lets a property be created with
//! `hasUniqueValue: true` ("Whether or not the property's value must be
//! unique", in the properties API's `PropertyCreate` schema), and only such a
//! property can serve as the `idProperty` of a batch upsert ("idProperty …
//! refers to a property whose values are unique for the object", HubSpot's
//! batch upsert reference). The index makes upsert-by-unique-value O(1) and
//! is checked on every write, so no two records can ever share a value of a
//! unique property. Contacts' `email` is indexed the same way: HubSpot
//! deduplicates contacts by email and accepts it as the contacts'
//! `idProperty`, although its definition says `hasUniqueValue: false`.
//!
//! Values are stored as HubSpot stores them — text — together with, for
//! numeric types (`number`, `date`, `datetime`), the number they compare as
//! (epoch milliseconds for dates), parsed once at write time so that searches
//! over tens of thousands of records never parse dates.

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use serde_json::{Map, Value};

use super::PropertyType;

pub(crate) const DAY_MS: i64 = 86_400_000;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `2024-01-02T03:04:05.678Z`: ISO 8601, UTC, milliseconds — the format of
/// HubSpot's `createdate`, `createdAt`, etc.
pub(crate) fn iso_ms(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => format!("{ts:.3}"),
        Err(_) => ms.to_string(),
    }
}

/// Epoch milliseconds from what HubSpot accepts for a date/datetime: epoch
/// milliseconds (as text), an RFC 3339 timestamp, or a bare `YYYY-MM-DD`
/// (midnight UTC).
pub(crate) fn parse_datetime_ms(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Some(ms);
    }
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Some(ts.as_millisecond());
    }
    if t.len() == 10 {
        if let Ok(ts) = format!("{t}T00:00:00Z").parse::<jiff::Timestamp>() {
            return Some(ts.as_millisecond());
        }
    }
    None
}

/// The canonical name of an object type as given in a path or to the API:
/// `contacts`, `companies`, `deals`, `tickets` (also by their object type ids
/// `0-1`, `0-2`, `0-3`, `0-5`, or singular), or a custom object type id
/// `2-<digits>`.
pub(crate) fn canonical_type(name: &str) -> Option<String> {
    let canonical = match name {
        "contacts" | "contact" | "0-1" => "contacts",
        "companies" | "company" | "0-2" => "companies",
        "deals" | "deal" | "0-3" => "deals",
        "tickets" | "ticket" | "0-5" => "tickets",
        custom => {
            let digits = custom.strip_prefix("2-")?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            return Some(custom.to_owned());
        }
    };
    Some(canonical.to_owned())
}

/// The properties every object type has, set by HubSpot on every record.
pub(crate) const ALWAYS: [&str; 3] = ["hs_object_id", "createdate", "lastmodifieddate"];

/// Properties a client cannot write.
pub(crate) fn read_only(name: &str) -> bool {
    matches!(name, "hs_object_id" | "lastmodifieddate")
}

/// The default properties of each standard object type (HubSpot's search guide
/// lists, per object, the properties returned when none are requested).
pub(crate) fn default_properties(object_type: &str) -> &'static [&'static str] {
    match object_type {
        "contacts" => &["email", "firstname", "lastname"],
        "companies" => &["domain", "name"],
        "deals" => &["amount", "closedate", "dealname", "dealstage", "pipeline"],
        "tickets" => &["content", "hs_pipeline", "hs_pipeline_stage", "subject"],
        _ => &[],
    }
}

fn builtin_properties(object_type: &str) -> Vec<(&'static str, PropertyType)> {
    let mut v = vec![
        ("hs_object_id", PropertyType::Number),
        ("createdate", PropertyType::DateTime),
        ("lastmodifieddate", PropertyType::DateTime),
    ];
    match object_type {
        "contacts" => v.extend([
            ("email", PropertyType::String),
            ("firstname", PropertyType::String),
            ("lastname", PropertyType::String),
        ]),
        "companies" => v.extend([
            ("domain", PropertyType::String),
            ("name", PropertyType::String),
        ]),
        "deals" => v.extend([
            ("amount", PropertyType::Number),
            ("closedate", PropertyType::DateTime),
            ("dealname", PropertyType::String),
            ("dealstage", PropertyType::Enumeration),
            ("pipeline", PropertyType::Enumeration),
        ]),
        "tickets" => v.extend([
            ("content", PropertyType::String),
            ("hs_pipeline", PropertyType::Enumeration),
            ("hs_pipeline_stage", PropertyType::Enumeration),
            ("subject", PropertyType::String),
        ]),
        _ => {}
    }
    v
}

#[derive(Clone, Debug)]
pub(crate) struct PropDef {
    pub name: String,
    pub kind: PropertyType,
    pub unique: bool,
    /// Defined by HubSpot rather than by [`Emulator::create_property`](super::Emulator::create_property).
    pub builtin: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// One stored value: HubSpot's text, plus the number it compares as.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    pub text: String,
    pub num: Option<f64>,
}

/// Converts an input value for a property of type `kind` the way HubSpot
/// stores it. `Ok(None)` clears the property (`null` or `""`).
pub(crate) fn normalize(
    name: &str,
    kind: PropertyType,
    v: &Value,
) -> Result<Option<Stored>, String> {
    let text = match v {
        Value::Null => return Ok(None),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => {
            return Err(format!(
                "Property \"{name}\": {v} is not a valid value; property values are strings"
            ))
        }
    };
    if text.is_empty() {
        return Ok(None);
    }
    Ok(Some(match kind {
        PropertyType::String | PropertyType::Enumeration => Stored { text, num: None },
        PropertyType::Number => {
            let t = text.trim();
            match t.parse::<f64>() {
                Ok(n) if n.is_finite() => Stored {
                    text: t.to_owned(),
                    num: Some(n),
                },
                _ => return Err(format!("Property \"{name}\": {text} was not a valid number.")),
            }
        }
        PropertyType::Bool => match text.trim().to_ascii_lowercase().as_str() {
            b @ ("true" | "false") => Stored {
                text: b.to_owned(),
                num: None,
            },
            _ => return Err(format!("Property \"{name}\": {text} was not a valid boolean.")),
        },
        PropertyType::DateTime => match parse_datetime_ms(&text) {
            Some(ms) => Stored {
                text: iso_ms(ms),
                num: Some(ms as f64),
            },
            None => return Err(format!("Property \"{name}\": {text} was not a valid datetime.")),
        },
        PropertyType::Date => match parse_datetime_ms(&text) {
            // HubSpot: date properties take midnight UTC only.
            Some(ms) if ms.rem_euclid(DAY_MS) == 0 => Stored {
                text: iso_ms(ms)[..10].to_owned(),
                num: Some(ms as f64),
            },
            Some(_) => {
                return Err(format!(
                    "Property \"{name}\": {text} is not at midnight UTC; date properties take dates only."
                ))
            }
            None => return Err(format!("Property \"{name}\": {text} was not a valid date.")),
        },
    }))
}

pub(crate) struct Record {
    pub id: u64,
    pub props: BTreeMap<String, Stored>,
    /// `Some(t)`: invisible to search before `t` (the emulated search-index lag).
    pub searchable_at: Option<Instant>,
}

impl Record {
    fn ms(&self, name: &str) -> i64 {
        self.props
            .get(name)
            .and_then(|s| s.num)
            .map_or(0, |n| n as i64)
    }

    /// `createdAt` (from `createdate`).
    pub fn created_ms(&self) -> i64 {
        self.ms("createdate")
    }

    /// `updatedAt` (from `lastmodifieddate`).
    pub fn updated_ms(&self) -> i64 {
        self.ms("lastmodifieddate")
    }

    pub fn searchable(&self, now: Instant) -> bool {
        self.searchable_at.is_none_or(|t| t <= now)
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        self.props.get(name).map(|s| s.text.as_str())
    }
}

/// What an upsert did.
pub(crate) struct Upserted {
    pub id: u64,
    pub new: bool,
}

pub(crate) struct TypeStore {
    pub name: String,
    pub props: BTreeMap<String, PropDef>,
    pub records: BTreeMap<u64, Record>,
    /// Unique property → value → record id.
    unique: HashMap<String, HashMap<String, u64>>,
    /// Bumped on every change of records or definitions (search cache key).
    pub version: u64,
}

impl TypeStore {
    pub fn new(name: &str) -> Self {
        let props = builtin_properties(name)
            .into_iter()
            .map(|(n, kind)| {
                (
                    n.to_owned(),
                    PropDef {
                        name: n.to_owned(),
                        kind,
                        unique: false,
                        builtin: true,
                        // 2019-01-01: HubSpot's own properties predate any test.
                        created_ms: 1_546_300_800_000,
                        updated_ms: 1_546_300_800_000,
                    },
                )
            })
            .collect();
        let mut unique = HashMap::new();
        if name == "contacts" {
            unique.insert("email".to_owned(), HashMap::new());
        }
        TypeStore {
            name: name.to_owned(),
            props,
            records: BTreeMap::new(),
            unique,
            version: 0,
        }
    }

    /// The type of a property; properties never defined compare as strings.
    pub fn kind(&self, name: &str) -> PropertyType {
        self.props
            .get(name)
            .map_or(PropertyType::String, |d| d.kind)
    }

    /// Whether values of `name` are kept unique (and it can be an idProperty).
    pub fn is_unique(&self, name: &str) -> bool {
        self.unique.contains_key(name)
    }

    pub fn find_by(&self, id_property: &str, value: &str) -> Option<&Record> {
        let id = self.unique.get(id_property)?.get(value)?;
        self.records.get(id)
    }

    fn index_remove(&mut self, name: &str, text: &str, id: u64) {
        if let Some(ix) = self.unique.get_mut(name) {
            if ix.get(text) == Some(&id) {
                ix.remove(text);
            }
        }
    }

    fn index_insert(&mut self, name: &str, text: &str, id: u64) {
        if let Some(ix) = self.unique.get_mut(name) {
            ix.insert(text.to_owned(), id);
        }
    }

    /// The first unique property among `values` whose value another record
    /// (not `except`) already has.
    fn unique_conflict(
        &self,
        values: &[(String, Option<Stored>)],
        except: Option<u64>,
    ) -> Option<String> {
        values.iter().find_map(|(name, v)| {
            let v = v.as_ref()?;
            let owner = *self.unique.get(name)?.get(&v.text)?;
            (Some(owner) != except).then(|| {
                format!(
                    "Unique property \"{name}\" value '{}' already exists on {} record {owner}.",
                    v.text, self.name
                )
            })
        })
    }

    /// Adds a new record built from `values` (built-ins filled in).
    fn create(
        &mut self,
        id: u64,
        mut values: Vec<(String, Option<Stored>)>,
        now_ms: i64,
        searchable_at: Option<Instant>,
    ) {
        let mut props = BTreeMap::new();
        let now = Stored {
            text: iso_ms(now_ms),
            num: Some(now_ms as f64),
        };
        props.insert(
            "hs_object_id".to_owned(),
            Stored {
                text: id.to_string(),
                num: Some(id as f64),
            },
        );
        props.insert("createdate".to_owned(), now.clone());
        props.insert("lastmodifieddate".to_owned(), now);
        for (name, v) in values.drain(..) {
            match v {
                Some(v) => {
                    self.index_insert(&name, &v.text, id);
                    props.insert(name, v);
                }
                None => {
                    props.remove(&name);
                }
            }
        }
        self.records.insert(
            id,
            Record {
                id,
                props,
                searchable_at,
            },
        );
        self.version += 1;
    }

    /// Checks new objects' `properties` (each defined and writable; no
    /// unique value taken by a stored object or by another input) without
    /// changing anything. `Err((conflict, message))`: `conflict` is true for
    /// a taken unique value (HubSpot's 409), false for a validation error.
    pub fn check_new(&self, inputs: &[&Map<String, Value>]) -> Result<(), (bool, String)> {
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        for (i, properties) in inputs.iter().enumerate() {
            let values = self.values_of(properties).map_err(|m| (false, m))?;
            if let Some(msg) = self.unique_conflict(&values, None) {
                return Err((true, msg));
            }
            for (name, v) in &values {
                if let (true, Some(v)) = (self.is_unique(name), v) {
                    if seen.insert((name.clone(), v.text.clone()), i).is_some() {
                        return Err((
                            true,
                            format!(
                                "Unique property \"{name}\" value '{}' appears in two inputs.",
                                v.text
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Creates a new object from checked `properties` (see
    /// [`TypeStore::check_new`]); returns its id.
    pub fn create_new(
        &mut self,
        properties: &Map<String, Value>,
        now_ms: i64,
        searchable_at: Option<Instant>,
        next_id: &mut u64,
    ) -> Result<u64, String> {
        let values = self.values_of(properties)?;
        let id = *next_id;
        *next_id += 1;
        self.create(id, values, now_ms, searchable_at);
        Ok(id)
    }

    fn values_of(
        &self,
        properties: &Map<String, Value>,
    ) -> Result<Vec<(String, Option<Stored>)>, String> {
        let mut values = Vec::with_capacity(properties.len());
        for (name, v) in properties {
            let Some(def) = self.props.get(name) else {
                return Err(format!("Property \"{name}\" does not exist"));
            };
            if read_only(name) {
                return Err(format!(
                    "Property \"{name}\" is a read only property; its value cannot be set."
                ));
            }
            values.push((name.clone(), normalize(name, def.kind, v)?));
        }
        Ok(values)
    }

    /// Creates or updates the record whose unique `id_property` is `id_value`,
    /// setting `properties` (each must be defined and writable). The record's
    /// `lastmodifieddate` becomes `now_ms`; it is hidden from search until
    /// `searchable_at`. Nothing changes on error.
    pub fn upsert(
        &mut self,
        id_property: &str,
        id_value: &str,
        properties: &Map<String, Value>,
        now_ms: i64,
        searchable_at: Option<Instant>,
        next_id: &mut u64,
    ) -> Result<Upserted, String> {
        let mut values: Vec<(String, Option<Stored>)> = Vec::with_capacity(properties.len() + 1);
        for (name, v) in properties {
            let Some(def) = self.props.get(name) else {
                return Err(format!("Property \"{name}\" does not exist"));
            };
            if read_only(name) {
                return Err(format!(
                    "Property \"{name}\" is a read only property; its value cannot be set."
                ));
            }
            let v = normalize(name, def.kind, v)?;
            if name == id_property && v.as_ref().map(|s| s.text.as_str()) != Some(id_value) {
                return Err(format!(
                    "Property \"{name}\" is the idProperty of this input; its value must be the input's id '{id_value}'."
                ));
            }
            values.push((name.clone(), v));
        }
        if !properties.contains_key(id_property) {
            let v = normalize(id_property, self.kind(id_property), &Value::from(id_value))?;
            values.push((id_property.to_owned(), v));
        }
        let existing = self
            .unique
            .get(id_property)
            .and_then(|ix| ix.get(id_value))
            .copied();
        if let Some(msg) = self.unique_conflict(&values, existing) {
            return Err(msg);
        }
        let modified = Stored {
            text: iso_ms(now_ms),
            num: Some(now_ms as f64),
        };
        match existing {
            Some(id) => {
                for (name, v) in values {
                    let old = self.records.get_mut(&id).unwrap().props.remove(&name);
                    if let Some(old) = old {
                        self.index_remove(&name, &old.text, id);
                    }
                    if let Some(v) = v {
                        self.index_insert(&name, &v.text, id);
                        self.records.get_mut(&id).unwrap().props.insert(name, v);
                    }
                }
                let rec = self.records.get_mut(&id).unwrap();
                rec.props.insert("lastmodifieddate".to_owned(), modified);
                rec.searchable_at = searchable_at;
                self.version += 1;
                Ok(Upserted { id, new: false })
            }
            None => {
                let id = *next_id;
                *next_id += 1;
                self.create(id, values, now_ms, searchable_at);
                Ok(Upserted { id, new: true })
            }
        }
    }
}

/// All object types.
pub(crate) struct Store {
    types: HashMap<String, TypeStore>,
    /// HubSpot record ids: numeric, increasing (shared by all object types).
    next_id: u64,
}

impl Default for Store {
    fn default() -> Self {
        let types = ["contacts", "companies", "deals", "tickets"]
            .into_iter()
            .map(|t| (t.to_owned(), TypeStore::new(t)))
            .collect();
        Store {
            types,
            next_id: 10_001,
        }
    }
}

impl Store {
    /// The store of a known object type (created on first use for custom
    /// types); `Err` for a name that is no object type.
    pub fn type_mut(&mut self, object_type: &str) -> Result<&mut TypeStore, String> {
        let name = canonical_type(object_type)
            .ok_or_else(|| format!("Unable to infer object type from: {object_type}"))?;
        Ok(self
            .types
            .entry(name)
            .or_insert_with_key(|n| TypeStore::new(n)))
    }

    /// The store of an object type, if anything was ever stored or defined
    /// for it (`Ok(None)` for a custom type never used).
    pub fn type_ref(&self, object_type: &str) -> Result<Option<&TypeStore>, String> {
        let name = canonical_type(object_type)
            .ok_or_else(|| format!("Unable to infer object type from: {object_type}"))?;
        Ok(self.types.get(&name))
    }

    pub fn next_id_mut(&mut self, object_type: &str) -> Result<(&mut TypeStore, &mut u64), String> {
        let name = canonical_type(object_type)
            .ok_or_else(|| format!("Unable to infer object type from: {object_type}"))?;
        let ts = self
            .types
            .entry(name)
            .or_insert_with_key(|n| TypeStore::new(n));
        Ok((ts, &mut self.next_id))
    }

    pub fn define_property(
        &mut self,
        object_type: &str,
        name: &str,
        kind: Option<PropertyType>,
        unique: bool,
    ) -> Result<(), String> {
        let ts = self.type_mut(object_type)?;
        let kind = kind.unwrap_or_else(|| ts.kind(name));
        // Validate every stored value against the new definition first.
        let mut converted: Vec<(u64, Stored)> = Vec::new();
        let mut seen: HashMap<String, u64> = HashMap::new();
        for rec in ts.records.values() {
            if let Some(s) = rec.props.get(name) {
                let v = normalize(name, kind, &Value::from(s.text.as_str()))?
                    .expect("stored values are never empty");
                if unique {
                    if let Some(other) = seen.insert(v.text.clone(), rec.id) {
                        return Err(format!(
                            "records {other} and {} share the value '{}'; it cannot be made unique",
                            rec.id, v.text
                        ));
                    }
                }
                converted.push((rec.id, v));
            }
        }
        let now = now_ms();
        let def = ts.props.entry(name.to_owned()).or_insert_with(|| PropDef {
            name: name.to_owned(),
            kind,
            unique,
            builtin: false,
            created_ms: now,
            updated_ms: now,
        });
        def.kind = kind;
        def.unique = unique;
        def.updated_ms = now;
        let keep_indexed = unique || (ts.name == "contacts" && name == "email");
        if keep_indexed {
            ts.unique.insert(
                name.to_owned(),
                converted
                    .iter()
                    .map(|(id, v)| (v.text.clone(), *id))
                    .collect(),
            );
        } else {
            ts.unique.remove(name);
        }
        for (id, v) in converted {
            ts.records
                .get_mut(&id)
                .unwrap()
                .props
                .insert(name.to_owned(), v);
        }
        ts.version += 1;
        Ok(())
    }

    /// [`Emulator::insert`](super::Emulator::insert): a new record, searchable
    /// at once. `hs_object_id` may be given (a free numeric id).
    pub fn insert(
        &mut self,
        object_type: &str,
        properties: Map<String, Value>,
        now_ms: i64,
    ) -> Result<u64, String> {
        let (ts, next_id) = self.next_id_mut(object_type)?;
        let mut id = None;
        let mut values = Vec::with_capacity(properties.len());
        for (name, v) in properties {
            if name == "hs_object_id" {
                let n = match &v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.parse::<u64>().ok(),
                    _ => None,
                }
                .ok_or_else(|| format!("hs_object_id {v} is not a record id"))?;
                if ts.records.contains_key(&n) {
                    return Err(format!("record {n} already exists"));
                }
                id = Some(n);
                continue;
            }
            let v = normalize(&name, ts.kind(&name), &v)?;
            values.push((name, v));
        }
        if let Some(msg) = ts.unique_conflict(&values, None) {
            return Err(msg);
        }
        let id = match id {
            Some(n) => {
                *next_id = (*next_id).max(n + 1);
                n
            }
            None => {
                let n = *next_id;
                *next_id += 1;
                n
            }
        };
        // Given createdate / lastmodifieddate override the defaults in `create`.
        ts.create(id, values, now_ms, None);
        Ok(id)
    }

    pub fn objects(&self, object_type: &str) -> Vec<(String, Map<String, Value>)> {
        let Ok(Some(ts)) = self.type_ref(object_type) else {
            return Vec::new();
        };
        ts.records
            .values()
            .map(|r| {
                let props = r
                    .props
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v.text.as_str())))
                    .collect();
                (r.id.to_string(), props)
            })
            .collect()
    }

    pub fn count(&self, object_type: &str) -> usize {
        match self.type_ref(object_type) {
            Ok(Some(ts)) => ts.records.len(),
            _ => 0,
        }
    }
}
