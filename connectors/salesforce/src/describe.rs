//! The sObject's describe: which fields exist, their types, scale and
//! flags, read once per connector from
//! `GET /services/data/vXX.X/sobjects/{SObject}/describe` ("sObject
//! Describe", REST API Developer Guide:
//! https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/resources_sobject_describe.htm;
//! the field properties `type`, `externalId`, `unique`, `caseSensitive`,
//! `scale`, `precision`, `length`, `createable`, `updateable`, `nillable`
//! are those of the `Field` type in the SOAP API's `DescribeSObjectResult`).
//!
//! The key field must exist with `externalId: true` and `unique: true`:
//! only then is an upsert by it idempotent (a second write of the same key
//! updates the record the first created, and an insert of an existing key
//! is refused with `DUPLICATE_VALUE` instead of making a second record).

use std::collections::HashMap;

use serde_json::Value as Json;

/// One field as describe reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// API name as the org spells it (`Stripe_Charge_Id__c`).
    pub name: String,
    /// Salesforce field type: `string`, `currency`, `double`, `percent`,
    /// `int`, `datetime`, `date`, `picklist`, `boolean`, `id`, …
    pub kind: String,
    /// External ID.
    pub external_id: bool,
    /// Unique.
    pub unique: bool,
    /// Unique values compared case-sensitively.
    pub case_sensitive: bool,
    /// Decimal places of a number field.
    pub scale: u32,
    /// Digits of a number field, decimals included.
    pub precision: u32,
    /// Can be set when a record is created.
    pub createable: bool,
    /// Can be set when a record is updated.
    pub updateable: bool,
}

/// Fields the platform maintains itself: never written.
const SYSTEM_FIELDS: [&str; 7] = [
    "Id",
    "CreatedDate",
    "CreatedById",
    "LastModifiedDate",
    "LastModifiedById",
    "SystemModstamp",
    "IsDeleted",
];

impl FieldInfo {
    /// A number field, whose values are exact decimals.
    pub fn is_number(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "currency" | "double" | "percent" | "int" | "long"
        )
    }

    /// A date field (a day, no time).
    pub fn is_date(&self) -> bool {
        self.kind == "date"
    }

    /// A datetime field.
    pub fn is_datetime(&self) -> bool {
        self.kind == "datetime"
    }

    /// A field the platform maintains itself (`Id`, `CreatedDate`, …):
    /// never sent in a write, whatever the job maps to it.
    pub fn is_system(&self) -> bool {
        SYSTEM_FIELDS
            .iter()
            .any(|s| s.eq_ignore_ascii_case(&self.name))
    }

    fn from_json(f: &Json) -> Option<FieldInfo> {
        let flag = |k: &str, default: bool| f.get(k).and_then(Json::as_bool).unwrap_or(default);
        let num = |k: &str| f.get(k).and_then(Json::as_u64).unwrap_or(0) as u32;
        let name = f.get("name")?.as_str()?.to_string();
        let system = SYSTEM_FIELDS.iter().any(|s| s.eq_ignore_ascii_case(&name));
        Some(FieldInfo {
            kind: f
                .get("type")
                .and_then(Json::as_str)
                .unwrap_or("string")
                .to_ascii_lowercase(),
            external_id: flag("externalId", false),
            unique: flag("unique", false),
            case_sensitive: flag("caseSensitive", false),
            scale: num("scale"),
            precision: num("precision"),
            createable: flag("createable", !system),
            updateable: flag("updateable", !system),
            name,
        })
    }
}

/// The describe of one sObject: its fields by lower-case name (API names
/// are case-insensitive).
#[derive(Clone, Debug, Default)]
pub struct ObjectInfo {
    fields: HashMap<String, FieldInfo>,
    order: Vec<String>,
}

impl ObjectInfo {
    /// Reads a describe answer.
    pub fn from_json(v: &Json) -> ObjectInfo {
        let mut info = ObjectInfo::default();
        for f in v
            .get("fields")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(fi) = FieldInfo::from_json(f) {
                info.order.push(fi.name.clone());
                info.fields.insert(fi.name.to_ascii_lowercase(), fi);
            }
        }
        info
    }

    /// The field named `name`, whatever its case.
    pub fn field(&self, name: &str) -> Option<&FieldInfo> {
        self.fields.get(&name.to_ascii_lowercase())
    }

    /// Field names as the org lists them, for messages (the first `n`).
    pub fn names(&self, n: usize) -> String {
        let mut s = self
            .order
            .iter()
            .take(n)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if self.order.len() > n {
            s.push_str(&format!(", … ({} fields)", self.order.len()));
        }
        s
    }
}

/// What is wrong with the key field for idempotent writes, if anything.
pub fn key_problem(object: &ObjectInfo, key: &str) -> Option<String> {
    let Some(f) = object.field(key) else {
        return Some(format!("has no field `{key}`"));
    };
    match (f.external_id, f.unique) {
        (true, true) => None,
        (false, true) => Some(format!(
            "field `{}` is not an External ID (externalId: false)",
            f.name
        )),
        (true, false) => Some(format!("field `{}` is not Unique (unique: false)", f.name)),
        (false, false) => Some(format!(
            "field `{}` is neither an External ID nor Unique (externalId: false, unique: false)",
            f.name
        )),
    }
}

/// What a write needs of a field it sends: to be set on create, on update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// Records are created (gaps; an upsert that matches nothing).
    pub create: bool,
    /// Existing records are changed (repairs of mismatches).
    pub update: bool,
}

/// Why the integration user cannot write `f` as `needs` says, if so:
/// describe's `createable: false` / `updateable: false` (Field-Level
/// Security that leaves the field read-only for the user, or a formula or
/// auto-number field).
pub fn write_problem(f: &FieldInfo, needs: Needs) -> Option<String> {
    let mut flags = Vec::new();
    if needs.create && !f.createable {
        flags.push("createable: false");
    }
    if needs.update && !f.updateable {
        flags.push("updateable: false");
    }
    (!flags.is_empty()).then(|| flags.join(", "))
}

/// The Setup steps that give the integration user edit access to `field`.
pub fn edit_access_fix(object: &str, field: &str) -> String {
    format!(
        "Grant edit access to it (Field-Level Security) for the integration user: Setup → Object Manager → {object} → Fields & Relationships → {field} → Set Field-Level Security → for the user's profile check \"Visible\" and clear \"Read-Only\" → Save; or in the permission set assigned to the user: Object Settings → {object} → Edit → Field Permissions → {field} → check \"Edit Access\" → Save (a formula or auto-number field can never be written)"
    )
}

/// The Setup steps that make `key` an external ID that upserts can rely on.
pub fn key_fix(object: &str, key: &str, exists: bool) -> String {
    if exists {
        format!(
            "Fix it in Setup: Object Manager → {object} → Fields & Relationships → {key} → Edit → check \"Unique\" (with \"Treat \\\"ABC\\\" and \\\"abc\\\" as different values (case sensitive)\" for case-sensitive keys such as Stripe IDs) and \"External ID\" → Save. Salesforce refuses Unique while two records share a value: find them with SELECT {key}, COUNT(Id) FROM {object} GROUP BY {key} HAVING COUNT(Id) > 1 and merge or delete the duplicates first"
        )
    } else {
        format!(
            "Fix it in Setup: Object Manager → {object} → Fields & Relationships → New → Text (length 255) → Field Name `{}` → check \"Unique\" (case sensitive for keys such as Stripe IDs) and \"External ID\" → Save, and give the recon integration user's profile or permission set edit access to it",
            key.strip_suffix("__c").unwrap_or(key)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn describe() -> ObjectInfo {
        ObjectInfo::from_json(&json!({
            "name": "Payment__c",
            "fields": [
                {"name": "Id", "type": "id", "createable": false, "updateable": false},
                {"name": "Stripe_Charge_Id__c", "type": "string", "externalId": true, "unique": true, "caseSensitive": true, "length": 255},
                {"name": "Plain__c", "type": "string"},
                {"name": "Ext__c", "type": "string", "externalId": true},
                {"name": "Amount__c", "type": "currency", "scale": 2, "precision": 18},
                {"name": "CreatedDate", "type": "datetime"},
            ]
        }))
    }

    #[test]
    fn fields_are_found_whatever_their_case() {
        let d = describe();
        let f = d.field("stripe_charge_id__C").unwrap();
        assert_eq!(f.name, "Stripe_Charge_Id__c");
        assert!(f.external_id && f.unique && f.case_sensitive);
        let a = d.field("amount__c").unwrap();
        assert_eq!((a.kind.as_str(), a.scale, a.precision), ("currency", 2, 18));
        assert!(a.is_number() && a.createable && a.updateable && !a.is_system());
        assert!(d.field("Id").unwrap().is_system());
        let created = d.field("CreatedDate").unwrap();
        assert!(created.is_system() && !created.createable, "system field");
        assert!(d.names(2).ends_with("(6 fields)"));
    }

    #[test]
    fn read_only_fields_are_named_with_the_flag_the_write_needs() {
        let d = ObjectInfo::from_json(&json!({"fields": [
            {"name": "Status__c", "type": "string", "createable": false, "updateable": false},
            {"name": "Note__c", "type": "string", "createable": true, "updateable": false},
        ]}));
        let status = d.field("Status__c").unwrap();
        let note = d.field("Note__c").unwrap();
        let insert = Needs {
            create: true,
            update: false,
        };
        let repair = Needs {
            create: true,
            update: true,
        };
        assert_eq!(
            write_problem(status, insert).as_deref(),
            Some("createable: false")
        );
        assert_eq!(
            write_problem(status, repair).as_deref(),
            Some("createable: false, updateable: false")
        );
        assert_eq!(write_problem(note, insert), None, "inserts never update");
        assert_eq!(
            write_problem(note, repair).as_deref(),
            Some("updateable: false")
        );
        let fix = edit_access_fix("Payment__c", "Status__c");
        assert!(fix.contains("Field-Level Security"), "{fix}");
        assert!(fix.contains("Object Manager → Payment__c → Fields & Relationships → Status__c"));
    }

    #[test]
    fn the_key_must_be_external_id_and_unique() {
        let d = describe();
        assert_eq!(key_problem(&d, "Stripe_Charge_Id__c"), None);
        assert!(key_problem(&d, "Plain__c").unwrap().contains("neither"));
        assert!(key_problem(&d, "Ext__c").unwrap().contains("not Unique"));
        assert!(key_problem(&d, "Nope__c").unwrap().contains("no field"));
        let fix = key_fix("Payment__c", "Plain__c", true);
        assert!(fix.contains("Object Manager → Payment__c → Fields & Relationships → Plain__c"));
        assert!(fix.contains("\"External ID\""));
        assert!(key_fix("Payment__c", "Nope__c", false).contains("Field Name `Nope`"));
    }
}
