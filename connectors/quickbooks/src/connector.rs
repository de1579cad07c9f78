//! Invoices or sales receipts of one company as a [`Source`]: windowed
//! reads paged with `STARTPOSITION`/`MAXRESULTS`, records keyed by the
//! external ID where the job keeps it, money exact, lookups batched, and
//! duplicates (two transactions carrying one external ID) named with
//! every QuickBooks `Id`.
//!
//! Which external ID placements the query language can filter on (see the
//! README): `DocNumber` can (lookups are `WHERE DocNumber IN ('a', 'b', …)`,
//! [`QboConfig::lookup_chunk`] values a query); `PrivateNote` and custom
//! fields cannot (no Intuit page documents a filter on either), so their
//! lookups read the window widened by [`QboConfig::lookup_widen`] once and
//! match in recon, never one call per record.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::stream::BoxStream;
use jiff::Timestamp;
use recon_core::{
    ConnectorError, Currency, DuplicateCopy, FieldKind, Location, Money, Page, Probe, Record,
    Schema, Source, TokenStore, Value, Window,
};
use serde_json::Value as Json;
use tokio::sync::OnceCell;

use crate::client::{Client, ClientConfig, Company};

/// Where the external ID lives on a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `DocNumber` (filterable; at most 21 characters).
    DocNumber,
    /// `PrivateNote` (the statement memo; not filterable).
    PrivateNote,
    /// A custom field, by name (not filterable).
    CustomField(String),
}

/// The field windows read over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeField {
    /// `TxnDate`, a date in the company's time zone.
    TxnDate,
    /// `MetaData.CreateTime`, when the transaction was entered.
    CreateTime,
}

impl TimeField {
    /// The property name.
    pub fn path(self) -> &'static str {
        match self {
            TimeField::TxnDate => "TxnDate",
            TimeField::CreateTime => "MetaData.CreateTime",
        }
    }
}

/// The customer of a backfilled transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CustomerChoice {
    /// This customer `Id`.
    Fixed(String),
    /// The customer whose `by` equals the record's field `field`.
    Lookup {
        /// Schema index.
        field: usize,
        /// `PrimaryEmailAddr` or `DisplayName`.
        by: String,
    },
}

/// A job's QuickBooks endpoint.
#[derive(Clone, Debug)]
pub struct QboConfig {
    /// How to reach the company.
    pub client: ClientConfig,
    /// `Invoice` or `SalesReceipt`.
    pub object: String,
    /// Where the external ID lives.
    pub placement: Placement,
    /// The field windows read over.
    pub time_field: TimeField,
    /// The property of each schema field.
    pub paths: Vec<String>,
    /// The customer of backfilled transactions.
    pub customer: Option<CustomerChoice>,
    /// The `ItemRef` of their one sales line.
    pub item_ref: Option<String>,
    /// Operations per batch request (≤ 30).
    pub batch_size: usize,
    /// Records per write call.
    pub write_batch: usize,
    /// Values per `IN (…)` lookup.
    pub lookup_chunk: usize,
    /// Rows per query page (≤ 1000).
    pub page_size: u32,
    /// The company's time zone, for `TxnDate`.
    pub company_tz: jiff::tz::TimeZone,
    /// How far around a window lookups of unfilterable IDs read.
    pub lookup_widen: Duration,
    /// The job's name (for request IDs).
    pub job: String,
}

/// The company's settings resolved against the job.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub company: Company,
    /// The `DefinitionId` of the external ID's custom field.
    pub key_definition: Option<String>,
    /// Per schema field: the `DefinitionId` when its path is `custom_field:NAME`.
    pub field_definitions: Vec<Option<String>>,
}

/// QuickBooks Online transactions as a [`Source`] and [`recon_core::Target`].
#[derive(Clone)]
pub struct QuickBooks {
    pub(crate) client: Client,
    pub(crate) cfg: Arc<QboConfig>,
    pub(crate) schema: Schema,
    pub(crate) time_index: Option<usize>,
    prepared: Arc<OnceCell<Prepared>>,
    last_window: Arc<Mutex<Option<Window>>>,
}

impl std::fmt::Debug for QuickBooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuickBooks")
            .field("object", &self.cfg.object)
            .field("realm_id", &self.cfg.client.realm_id)
            .finish_non_exhaustive()
    }
}

/// `'text'` with `'` written `\'` (Intuit blog, "Deep dive into QuickBooks
/// Online data queries").
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "\\'"))
}

/// The conditions that find `values` of `field`, each a query of its own:
/// `field IN (…)` lists of at most `chunk` values, and, for a value holding
/// a backslash (the query language documents only `\'` as an escape, so
/// such a value has no exact literal), `field LIKE 'prefix%'` on the text
/// before its first backslash: a superset, which the caller narrows to the
/// exact values, as it does every answer.
pub fn conditions(field: &str, values: &[String], chunk: usize) -> Vec<String> {
    let (plain, odd): (Vec<&String>, Vec<&String>) = values.iter().partition(|v| !v.contains('\\'));
    let mut out: Vec<String> = plain
        .chunks(chunk.max(1))
        .map(|c| {
            let list: Vec<String> = c.iter().map(|v| literal(v)).collect();
            format!("{field} IN ({})", list.join(", "))
        })
        .collect();
    let mut prefixes: Vec<&str> = odd
        .iter()
        .map(|v| v.split('\\').next().unwrap_or_default())
        .collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    out.extend(
        prefixes
            .into_iter()
            .map(|p| format!("{field} LIKE {}", literal(&format!("{p}%")))),
    );
    out
}

/// The value at a property path: strings as they are, numbers by their
/// JSON text, a reference (`{"value"}`) by its value.
pub(crate) fn text_at(e: &Json, path: &str) -> Option<String> {
    let mut v = e;
    for part in path.split('.') {
        v = v.get(part)?;
    }
    if let Some(inner) = v.get("value").or_else(|| v.get("Address")) {
        v = inner;
    }
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The `StringValue` of custom field `definition`.
pub(crate) fn custom_value(e: &Json, definition: &str) -> Option<String> {
    e["CustomField"]
        .as_array()?
        .iter()
        .find(|f| f["DefinitionId"].as_str() == Some(definition))
        .and_then(|f| f["StringValue"].as_str())
        .map(str::to_string)
}

fn rfc3339(t: Timestamp) -> String {
    t.to_zoned_datetime(jiff::tz::TimeZone::UTC)
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string()
}

impl QuickBooks {
    /// Builds the connector; no request is sent yet.
    pub fn new(
        cfg: QboConfig,
        schema: &Schema,
        tokens: Option<Arc<dyn TokenStore>>,
    ) -> Result<QuickBooks, ConnectorError> {
        let client = Client::new(cfg.client.clone(), tokens)?;
        let time_index = schema
            .fields
            .iter()
            .zip(&cfg.paths)
            .position(|(f, p)| f.kind == FieldKind::Timestamp && p == cfg.time_field.path());
        Ok(QuickBooks {
            client,
            cfg: Arc::new(cfg),
            schema: schema.clone(),
            time_index,
            prepared: Arc::new(OnceCell::new()),
            last_window: Arc::new(Mutex::new(None)),
        })
    }

    /// Requests sent, retried and throttled so far.
    pub fn stats(&self) -> recon_core::http::HttpStats {
        self.client.http.stats()
    }

    /// The company, and the custom field definitions the job names.
    pub(crate) async fn prepared(&self) -> Result<&Prepared, ConnectorError> {
        self.prepared
            .get_or_try_init(|| async {
                let company = self.client.company().await?.clone();
                let resolve = |name: &str| -> Result<String, ConnectorError> {
                    let found: Vec<&(String, String)> = company
                        .custom_fields
                        .iter()
                        .filter(|(_, n)| n.trim().eq_ignore_ascii_case(name.trim()))
                        .collect();
                    match found.as_slice() {
                        [(id, _)] => Ok(id.clone()),
                        [] => Err(ConnectorError::Config(format!(
                            "QuickBooks company {} has no custom field named `{name}` on sales forms (its custom fields: {}); create it in QuickBooks (Account and settings → Sales → Custom fields: the API cannot) or fix the name",
                            self.cfg.client.realm_id,
                            if company.custom_fields.is_empty() { "none".to_string() } else { company.custom_fields.iter().map(|(_, n)| format!("`{n}`")).collect::<Vec<_>>().join(", ") }
                        ))),
                        _ => Err(ConnectorError::Config(format!(
                            "QuickBooks company {} has {} custom fields named `{name}`; rename one so the name picks one field",
                            self.cfg.client.realm_id,
                            found.len()
                        ))),
                    }
                };
                let key_definition = match &self.cfg.placement {
                    Placement::CustomField(name) => Some(resolve(name)?),
                    _ => None,
                };
                let mut field_definitions = Vec::new();
                for p in &self.cfg.paths {
                    field_definitions.push(match p.strip_prefix("custom_field:") {
                        Some(name) => Some(resolve(name)?),
                        None => None,
                    });
                }
                Ok(Prepared {
                    company,
                    key_definition,
                    field_definitions,
                })
            })
            .await
    }

    /// The external ID of a transaction, if it carries one.
    pub(crate) fn key_of(&self, e: &Json, prep: &Prepared) -> Option<String> {
        let k = match (&self.cfg.placement, &prep.key_definition) {
            (Placement::DocNumber, _) => e["DocNumber"].as_str().map(str::to_string),
            (Placement::PrivateNote, _) => e["PrivateNote"].as_str().map(|s| s.trim().to_string()),
            (Placement::CustomField(_), Some(def)) => custom_value(e, def),
            (Placement::CustomField(_), None) => None,
        }?;
        (!k.is_empty()).then_some(k)
    }

    /// The currency of a transaction: `CurrencyRef`, else the home currency.
    fn currency_of(&self, e: &Json, prep: &Prepared) -> Result<Currency, ConnectorError> {
        match e["CurrencyRef"]["value"].as_str() {
            Some(c) => Currency::parse(c).map_err(|source| ConnectorError::Money {
                location: self.location(e, "CurrencyRef"),
                source,
            }),
            None => Ok(prep.company.home_currency),
        }
    }

    fn location(&self, e: &Json, field: &str) -> Location {
        Location(format!(
            "QuickBooks {} Id {} {field}",
            self.cfg.object,
            e["Id"].as_str().unwrap_or("?")
        ))
    }

    /// A date as the instant it starts in the company's time zone.
    fn date_instant(&self, text: &str) -> Option<Timestamp> {
        let d: jiff::civil::Date = text.parse().ok()?;
        self.cfg
            .company_tz
            .to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
            .ok()
    }

    /// An instant as the date it falls on in the company's time zone.
    pub(crate) fn date_of(&self, t: Timestamp) -> String {
        self.cfg.company_tz.to_datetime(t).date().to_string()
    }

    /// A transaction as a record in the job's schema (`None` without an
    /// external ID).
    pub(crate) fn record(
        &self,
        e: &Json,
        prep: &Prepared,
    ) -> Result<Option<Record>, ConnectorError> {
        let Some(key) = self.key_of(e, prep) else {
            return Ok(None);
        };
        let mut values = Vec::with_capacity(self.schema.fields.len());
        for (i, f) in self.schema.fields.iter().enumerate() {
            let path = &self.cfg.paths[i];
            let text = match &prep.field_definitions[i] {
                Some(def) => custom_value(e, def),
                None => text_at(e, path),
            };
            let v = match (f.kind, text) {
                (FieldKind::Currency, None) if path == "CurrencyRef" => {
                    Value::Currency(prep.company.home_currency)
                }
                (_, None) => Value::Null,
                (FieldKind::Text, Some(t)) => Value::Text(t),
                (FieldKind::Integer, Some(t)) => match t.parse::<i64>() {
                    Ok(n) => Value::Integer(n),
                    Err(_) => {
                        return Err(ConnectorError::Malformed {
                            location: self.location(e, path),
                            message: format!("`{t}` is not a whole number"),
                        })
                    }
                },
                (FieldKind::Money, Some(t)) => {
                    let c = self.currency_of(e, prep)?;
                    Value::Money(Money::parse_major(&t, c).map_err(|source| {
                        ConnectorError::Money {
                            location: self.location(e, path),
                            source,
                        }
                    })?)
                }
                (FieldKind::Currency, Some(t)) => {
                    Value::Currency(Currency::parse(&t).map_err(|source| {
                        ConnectorError::Money {
                            location: self.location(e, path),
                            source,
                        }
                    })?)
                }
                (FieldKind::Timestamp, Some(t)) => {
                    let ts = t
                        .parse::<Timestamp>()
                        .ok()
                        .or_else(|| self.date_instant(&t))
                        .ok_or_else(|| ConnectorError::Malformed {
                            location: self.location(e, path),
                            message: format!(
                                "`{t}` is neither a date nor a date-time with an offset"
                            ),
                        })?;
                    Value::Timestamp(ts)
                }
            };
            values.push(v);
        }
        Ok(Some(Record { key, values }))
    }

    /// `WHERE …` of a window on the time field.
    fn window_filter(&self, w: Window) -> String {
        match self.cfg.time_field {
            TimeField::CreateTime => format!(
                "MetaData.CreateTime >= {} AND MetaData.CreateTime < {}",
                literal(&rfc3339(w.start)),
                literal(&rfc3339(
                    w.end
                        .checked_add(jiff::SignedDuration::from_secs(1))
                        .unwrap_or(w.end)
                ))
            ),
            TimeField::TxnDate => format!(
                "TxnDate >= {} AND TxnDate <= {}",
                literal(&self.date_of(w.start)),
                literal(&self.date_of(w.end))
            ),
        }
    }

    /// Whether a transaction read for `w` belongs to it.
    fn in_window(&self, e: &Json, w: Window) -> bool {
        match self.cfg.time_field {
            // Dates hold no time: every transaction of the window's dates.
            TimeField::TxnDate => true,
            TimeField::CreateTime => text_at(e, "MetaData.CreateTime")
                .and_then(|t| t.parse::<Timestamp>().ok())
                .is_none_or(|t| w.contains(t)),
        }
    }

    /// Every transaction with its time in `w` (dates: on its dates).
    pub(crate) async fn scan(&self, w: Window) -> Result<Vec<Json>, ConnectorError> {
        let select = format!(
            "SELECT * FROM {} WHERE {} ORDERBY Id",
            self.cfg.object,
            self.window_filter(w)
        );
        let rows = self
            .client
            .query_all(&select, &self.cfg.object, self.cfg.page_size)
            .await?;
        Ok(rows.into_iter().filter(|e| self.in_window(e, w)).collect())
    }

    /// The transactions carrying each of `keys` (every one of them: two
    /// for a duplicate): batched `IN` queries on `DocNumber`, else one
    /// widened read of `around` matched in recon.
    pub(crate) async fn find(
        &self,
        keys: &[String],
        around: Option<Window>,
    ) -> Result<HashMap<String, Vec<Json>>, ConnectorError> {
        let prep = self.prepared().await?;
        let mut out: HashMap<String, Vec<Json>> = HashMap::new();
        if keys.is_empty() {
            return Ok(out);
        }
        let rows = match self.cfg.placement {
            Placement::DocNumber => {
                let mut rows = Vec::new();
                for condition in conditions("DocNumber", keys, self.cfg.lookup_chunk) {
                    let select = format!(
                        "SELECT * FROM {} WHERE {condition} ORDERBY Id",
                        self.cfg.object
                    );
                    rows.extend(
                        self.client
                            .query_all(&select, &self.cfg.object, self.cfg.page_size)
                            .await?,
                    );
                }
                rows
            }
            _ => {
                let widen =
                    jiff::SignedDuration::try_from(self.cfg.lookup_widen).unwrap_or_default();
                let base = around
                    .or(*self.last_window.lock().unwrap_or_else(|p| p.into_inner()))
                    .unwrap_or_else(|| {
                        let now = Timestamp::now();
                        Window {
                            start: now,
                            end: now,
                        }
                    });
                let w = Window {
                    start: base.start.checked_sub(widen).unwrap_or(base.start),
                    end: base.end.checked_add(widen).unwrap_or(base.end),
                };
                tracing::debug!(
                    message = "Looking up external IDs QuickBooks cannot filter on by one widened read.",
                    keys = keys.len(),
                    start = %w.start,
                    end = %w.end
                );
                self.scan(w).await?
            }
        };
        let wanted: std::collections::HashSet<&str> = keys.iter().map(String::as_str).collect();
        for e in rows {
            if let Some(k) = self.key_of(&e, prep) {
                if wanted.contains(k.as_str()) {
                    out.entry(k).or_default().push(e);
                }
            }
        }
        Ok(out)
    }
}

/// One transaction of a duplicate, as the warning names it.
fn describe(e: &Json) -> String {
    format!(
        "Id {} (DocNumber {}, TxnDate {}, TotalAmt {} {})",
        e["Id"].as_str().unwrap_or("?"),
        e["DocNumber"].as_str().unwrap_or("-"),
        e["TxnDate"].as_str().unwrap_or("-"),
        text_at(e, "TotalAmt").unwrap_or_default(),
        text_at(e, "CurrencyRef").unwrap_or_default(),
    )
}

/// Every copy of one external ID, and the amounts counted more than once.
type Repeated = (Vec<String>, Vec<String>);

/// How many duplicated external IDs a read logs one by one.
const LOGGED_DUPLICATES: usize = 20;

/// The transactions of a read that share an external ID: the first of
/// each key is kept as one line (the `seen` map), the others added when a
/// key repeats.
#[derive(Default)]
struct Duplicates {
    seen: HashMap<String, String>,
    /// Key → every copy, and the amounts counted more than once.
    repeated: BTreeMap<String, Repeated>,
}

impl Duplicates {
    fn note(&mut self, key: &str, e: &Json) {
        let line = describe(e);
        match self.seen.get(key) {
            None => {
                self.seen.insert(key.to_string(), line);
            }
            Some(first) => {
                let (copies, extra) = self
                    .repeated
                    .entry(key.to_string())
                    .or_insert_with(|| (vec![first.clone()], Vec::new()));
                copies.push(line);
                extra.push(format!(
                    "{} {}",
                    text_at(e, "TotalAmt").unwrap_or_default(),
                    text_at(e, "CurrencyRef").unwrap_or_default()
                ));
            }
        }
    }

    /// The external IDs logged one by one (in key order), and how many
    /// more there are: a company that imported a batch twice would
    /// otherwise log a line per invoice, when the run's
    /// duplicate_copies.csv already lists every copy.
    fn logged(&self) -> (impl Iterator<Item = (&String, &Repeated)>, usize) {
        let more = self.repeated.len().saturating_sub(LOGGED_DUPLICATES);
        (self.repeated.iter().take(LOGGED_DUPLICATES), more)
    }

    /// Logs the external IDs two or more transactions carry (the first
    /// [`LOGGED_DUPLICATES`], each with its transactions and the money
    /// counted more than once), then how many more there are.
    fn report(&self, object: &str) {
        let (logged, more) = self.logged();
        for (key, (copies, extra)) in logged {
            tracing::warn!(
                message = "QuickBooks holds several transactions with one external ID: review them in QuickBooks (recon never deletes or voids).",
                object,
                external_id = key.as_str(),
                transactions = copies.join("; ").as_str(),
                counted_more_than_once = extra.join(" + ").as_str()
            );
        }
        if more > 0 {
            tracing::warn!(
                message = "More external IDs are carried by several QuickBooks transactions than are logged: every copy is listed in the run's duplicate_copies.csv.",
                object,
                not_logged = more,
                in_all = self.repeated.len()
            );
        }
    }
}

#[async_trait::async_trait]
impl Source for QuickBooks {
    fn describe(&self) -> String {
        format!(
            "QuickBooks {} of company {}",
            self.cfg.object, self.cfg.client.realm_id
        )
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        *self.last_window.lock().unwrap_or_else(|p| p.into_inner()) = Some(window);
        struct St {
            start: u64,
            done: bool,
            dups: Duplicates,
            unkeyed: u64,
        }
        let st = St {
            start: 1,
            done: false,
            dups: Duplicates::default(),
            unkeyed: 0,
        };
        Box::pin(futures_util::stream::try_unfold(
            st,
            move |mut st| async move {
                if st.done {
                    return Ok(None);
                }
                let prep = self.prepared().await?;
                let page = self.cfg.page_size;
                let select = format!(
                    "SELECT * FROM {} WHERE {} ORDERBY Id STARTPOSITION {} MAXRESULTS {page}",
                    self.cfg.object,
                    self.window_filter(window),
                    st.start
                );
                let rows = self.client.query(&select, &self.cfg.object).await?;
                st.done = rows.len() < page as usize;
                st.start += u64::from(page);
                let mut records = Vec::with_capacity(rows.len());
                for e in rows {
                    if !self.in_window(&e, window) {
                        continue;
                    }
                    match self.record(&e, prep)? {
                        Some(r) => {
                            st.dups.note(&r.key, &e);
                            records.push(r);
                        }
                        None => st.unkeyed += 1,
                    }
                }
                if st.done {
                    st.dups.report(&self.cfg.object);
                    if st.unkeyed > 0 {
                        tracing::info!(
                        message = "QuickBooks transactions without an external ID in the job's placement were not compared.",
                        object = self.cfg.object.as_str(),
                        count = st.unkeyed
                    );
                    }
                }
                Ok(Some((Page::new(records), st)))
            },
        ))
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        let found = self.find(keys, None).await?;
        let prep = self.prepared().await?;
        let mut out = Vec::new();
        for k in keys {
            for e in found.get(k).into_iter().flatten() {
                if let Some(r) = self.record(e, prep)? {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    /// Every transaction carrying each key, named by its QuickBooks `Id`
    /// (the lookup's query, which returns them all).
    async fn duplicate_copies(
        &self,
        keys: &[String],
    ) -> Result<Vec<DuplicateCopy>, ConnectorError> {
        let found = self.find(keys, None).await?;
        let prep = self.prepared().await?;
        let mut out = Vec::new();
        for k in keys {
            for e in found.get(k).into_iter().flatten() {
                if let Some(record) = self.record(e, prep)? {
                    out.push(DuplicateCopy {
                        native_id: e["Id"].as_str().map(str::to_string),
                        record,
                    });
                }
            }
        }
        Ok(out)
    }

    async fn probe(&self) -> Result<Probe, ConnectorError> {
        let prep = self.prepared().await?;
        let c = &prep.company;
        let mut p = Probe::reached(format!(
            "QuickBooks company \"{}\" ({}), {} at {}",
            c.name, self.cfg.client.realm_id, self.cfg.object, self.cfg.client.base_url
        ))
        .authenticated()
        .limit(format!("home currency {}", c.home_currency.code()))
        .limit(format!(
            "multicurrency {}",
            if c.multicurrency { "on" } else { "off" }
        ))
        .limit("500 requests/min, 10 at once, 40 batch requests/min per company (Intuit)");
        if c.numbering.is_empty() {
            p = p.limit("duplicate-number preference: not reported by QuickBooks");
        } else {
            p = p.limit(format!(
                "numbering preferences as QuickBooks reports them: {}",
                c.numbering.join(", ")
            ));
        }
        p = p.limit(
            "no unique constraint on the external ID in QuickBooks: writes are insert-only, looked up right before each create, sent with a deterministic requestid and recorded in the ledger",
        );
        if let Some(def) = &prep.key_definition {
            p = p.limit(format!("external ID in custom field DefinitionId {def}"));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_and_paths_read_references() {
        assert_eq!(literal("O'Brien"), "'O\\'Brien'");
        // A backslash has no documented escape: such values are found by
        // the prefix before it, narrowed afterwards.
        let keys: Vec<String> = ["a", "b'c", "x\\y", "x\\z", "\\q", "d"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            conditions("DocNumber", &keys, 2),
            [
                "DocNumber IN ('a', 'b\\'c')",
                "DocNumber IN ('d')",
                "DocNumber LIKE '%'",
                "DocNumber LIKE 'x%'",
            ]
        );
        let e: Json = serde_json::from_str(
            r#"{"CustomerRef": {"value": "7"}, "TotalAmt": 12.50,
                "CustomField": [{"DefinitionId": "2", "StringValue": "ch_1"}]}"#,
        )
        .unwrap();
        assert_eq!(text_at(&e, "CustomerRef").as_deref(), Some("7"));
        assert_eq!(text_at(&e, "TotalAmt").as_deref(), Some("12.50"));
        assert_eq!(custom_value(&e, "2").as_deref(), Some("ch_1"));
        assert_eq!(custom_value(&e, "1"), None);
    }

    #[test]
    fn duplicates_are_logged_twenty_at_most_then_counted() {
        let tx = |id: usize, doc: &str| -> Json {
            serde_json::json!({"Id": id.to_string(), "DocNumber": doc, "TotalAmt": 5,
                "CurrencyRef": {"value": "USD"}})
        };
        let mut d = Duplicates::default();
        for i in 0..25 {
            let key = format!("ch_{i:02}");
            d.note(&key, &tx(2 * i, &key));
            d.note(&key, &tx(2 * i + 1, &key));
        }
        d.note("ch_single", &tx(99, "ch_single"));
        let (logged, more) = d.logged();
        let keys: Vec<&String> = logged.map(|(k, _)| k).collect();
        assert_eq!(keys.len(), LOGGED_DUPLICATES);
        assert_eq!(keys[0], "ch_00");
        assert_eq!(keys[19], "ch_19");
        assert_eq!(
            more, 5,
            "ch_20..ch_24 are counted, the single one is no duplicate"
        );
        let (mut logged, _) = d.logged();
        let (_, (copies, extra)) = logged.next().unwrap();
        assert_eq!(copies.len(), 2);
        assert!(
            copies[0].starts_with("Id 0 ") && copies[1].starts_with("Id 1 "),
            "{copies:?}"
        );
        assert_eq!(
            extra.len(),
            1,
            "the second copy counts its money twice: {extra:?}"
        );
    }
}
