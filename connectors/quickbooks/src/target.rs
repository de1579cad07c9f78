//! Writes that cannot book a sale twice.
//!
//! QuickBooks has no unique constraint on `DocNumber`, `PrivateNote` or a
//! custom field (a duplicate document number is at most a warning
//! preference), so recon's rule "write only where the key is unique"
//! takes this form here:
//!
//! 1. **Insert only** by default; `upsert` repairs an existing transaction
//!    with a sparse update carrying its `SyncToken` (a stale token, code
//!    `5010`: read it again by `Id`, retry once, else the item fails).
//! 2. **Look up right before creating**: every record of a write call is
//!    looked up by its external ID first (batched `IN` on `DocNumber`, one
//!    widened read otherwise); one found is never created again.
//! 3. **`requestid`** on every create request, derived from the job, the
//!    company, the object and the external IDs it carries (Intuit's
//!    "Request ID update", https://blogs.intuit.com/blog/2015/04/06/15346/:
//!    a repeated ID gets the original answer and no second entity), so a
//!    request retried after a lost answer or a 5xx never creates twice. How
//!    long Intuit remembers an ID is not documented: recon relies on it
//!    only across the retries of one call.
//! 4. **The ledger** records every item before and after its write (the
//!    pipeline's), so a crash or rerun settles what was sent by lookup.
//!
//! Creates go through the batch endpoint ("Batch without a Scratch",
//! https://blogs.intuit.com/2023/07/19/building-smarter-with-intuit-batch-without-a-scratch/),
//! `batch_size` operations a request, each answered by its `bId`.

use std::collections::HashMap;

use recon_core::http::HttpError;
use recon_core::{
    ConnectorError, FieldKind, Record, Source, Target, Value, WriteMode, WriteOutcome,
};
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};

use crate::client::fault_text;
use crate::connector::{conditions, CustomerChoice, Placement, Prepared, QuickBooks, TimeField};

/// The `requestid` of a request writing `keys` with `operation` and
/// `body`: the same job sending the same writes sends the same ID (a
/// retry), and different writes never share one.
pub fn request_id(
    job: &str,
    realm: &str,
    object: &str,
    operation: &str,
    keys: &[&str],
    body: &[u8],
) -> String {
    let mut h = Sha256::new();
    h.update(body);
    h.update([0]);
    for part in ["recon/quickbooks", job, realm, object, operation] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for k in keys {
        h.update(k.as_bytes());
        h.update([0]);
    }
    recon_core::lower_hex(&h.finalize()[..16])
}

/// What one item becomes before it is sent.
enum Plan {
    Done(WriteOutcome),
    Create(Json),
    Update { id: String, patch: Json },
}

impl QuickBooks {
    /// The amount of a record as a JSON number with its currency's digits.
    fn amount(&self, r: &Record) -> Result<(Json, recon_core::Currency), String> {
        let idx = self
            .schema
            .money_field()
            .ok_or("the job has no money field to make the sales line's amount of")?;
        match &r.values[idx] {
            Value::Money(m) => {
                let text = m.to_major_string();
                let n = serde_json::from_str::<Json>(&text)
                    .map_err(|e| format!("amount {text}: {e}"))?;
                Ok((n, m.currency))
            }
            _ => Err(format!(
                "no amount in `{}`: a sales line needs one",
                self.schema.fields[idx].name
            )),
        }
    }

    /// The fields a create and a repair set besides the customer.
    fn body(&self, r: &Record, prep: &Prepared, key_too: bool) -> Result<Json, String> {
        let mut b = json!({});
        if key_too {
            match (&self.cfg.placement, &prep.key_definition) {
                (Placement::DocNumber, _) => {
                    if r.key.chars().count() > 21 {
                        return Err(format!(
                            "external ID `{}` has {} characters; DocNumber holds at most 21: keep the ID in a custom field or PrivateNote (external_id)",
                            r.key,
                            r.key.chars().count()
                        ));
                    }
                    b["DocNumber"] = json!(r.key);
                }
                (Placement::PrivateNote, _) => b["PrivateNote"] = json!(r.key),
                (Placement::CustomField(_), Some(def)) => {
                    b["CustomField"] =
                        json!([{"DefinitionId": def, "Type": "StringType", "StringValue": r.key}]);
                }
                (Placement::CustomField(name), None) => {
                    return Err(format!("custom field `{name}` is not resolved"))
                }
            }
        }
        let (amount, currency) = self.amount(r)?;
        let company = &prep.company;
        if currency != company.home_currency && !company.multicurrency {
            return Err(format!(
                "the record is in {} but the QuickBooks company keeps only {} (multicurrency is off): turn multicurrency on in QuickBooks, or leave this record out",
                currency.code(),
                company.home_currency.code()
            ));
        }
        if company.multicurrency {
            b["CurrencyRef"] = json!({"value": currency.code()});
        }
        let item = self.cfg.item_ref.clone().unwrap_or_default();
        b["Line"] = json!([{
            "Amount": amount,
            "DetailType": "SalesItemLineDetail",
            "SalesItemLineDetail": {"ItemRef": {"value": item}},
        }]);
        if let Some(t) = self.time_index.or_else(|| {
            self.schema
                .fields
                .iter()
                .position(|f| f.kind == FieldKind::Timestamp)
        }) {
            if let Value::Timestamp(ts) = r.values[t] {
                b["TxnDate"] = json!(self.date_of(ts));
            }
        }
        // Mapped text fields QuickBooks lets a create set.
        for (i, f) in self.schema.fields.iter().enumerate() {
            let Value::Text(text) = &r.values[i] else {
                continue;
            };
            let path = self.cfg.paths[i].as_str();
            if f.kind != FieldKind::Text {
                continue;
            }
            match (path, &prep.field_definitions[i]) {
                ("PrivateNote", _) if self.cfg.placement != Placement::PrivateNote => {
                    b["PrivateNote"] = json!(text)
                }
                ("CustomerMemo", _) => b["CustomerMemo"] = json!({"value": text}),
                (_, Some(def)) if prep.key_definition.as_deref() != Some(def) => {
                    let fields = b["CustomField"].as_array().cloned().unwrap_or_default();
                    let mut fields = fields;
                    fields.push(
                        json!({"DefinitionId": def, "Type": "StringType", "StringValue": text}),
                    );
                    b["CustomField"] = Json::Array(fields);
                }
                _ => {}
            }
        }
        Ok(b)
    }

    /// The customer of each record to create, or why there is none.
    async fn customers(
        &self,
        records: &[&Record],
    ) -> Result<Vec<Result<String, String>>, ConnectorError> {
        match self.cfg.customer.as_ref() {
            None => Ok(records
                .iter()
                .map(|_| Err("the job names no customer".to_string()))
                .collect()),
            Some(CustomerChoice::Fixed(id)) => Ok(records.iter().map(|_| Ok(id.clone())).collect()),
            Some(CustomerChoice::Lookup { field, by }) => {
                let values: Vec<Option<String>> = records
                    .iter()
                    .map(|r| match &r.values[*field] {
                        Value::Text(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
                        _ => None,
                    })
                    .collect();
                let mut wanted: Vec<String> = values.iter().flatten().cloned().collect();
                wanted.sort();
                wanted.dedup();
                let mut found: HashMap<String, Vec<String>> = HashMap::new();
                for condition in conditions(by, &wanted, self.cfg.lookup_chunk) {
                    let select = format!("SELECT * FROM Customer WHERE {condition} ORDERBY Id");
                    for c in self
                        .client
                        .query_all(&select, "Customer", self.cfg.page_size)
                        .await?
                    {
                        let v = crate::connector::text_at(&c, by).unwrap_or_default();
                        let id = c["Id"].as_str().unwrap_or_default().to_string();
                        found.entry(v).or_default().push(id);
                    }
                }
                let name = &self.schema.fields[*field].name;
                Ok(values
                    .into_iter()
                    .map(|v| match v {
                        None => Err(format!("no `{name}` to find the QuickBooks customer by")),
                        Some(v) => match found.get(&v).map(Vec::as_slice) {
                            Some([id]) => Ok(id.clone()),
                            None | Some([]) => Err(format!(
                                "no QuickBooks customer has {by} = `{v}`: create the customer in QuickBooks, or set customer = {{ id = \"…\" }}"
                            )),
                            Some(ids) => Err(format!(
                                "{} QuickBooks customers have {by} = `{v}` (Ids {}): recon does not pick one",
                                ids.len(),
                                ids.join(", ")
                            )),
                        },
                    })
                    .collect())
            }
        }
    }

    /// Whether `existing` already equals `r` on every compared field.
    fn same(&self, r: &Record, existing: &Json, prep: &Prepared) -> Result<bool, ConnectorError> {
        let Some(have) = self.record(existing, prep)? else {
            return Ok(false);
        };
        Ok(self
            .schema
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.compared)
            .all(|(i, _)| have.values[i] == r.values[i]))
    }

    /// Sends `ops` (bId → payload) in batch requests; the answer per bId.
    async fn send(
        &self,
        operation: &str,
        ops: Vec<(String, Json)>,
    ) -> Result<HashMap<String, Result<Json, (Option<String>, String)>>, ConnectorError> {
        let mut out = HashMap::new();
        for chunk in ops.chunks(self.cfg.batch_size) {
            let keys: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
            let items: Vec<Json> = chunk
                .iter()
                .enumerate()
                .map(|(i, (_, body))| {
                    json!({"bId": (i + 1).to_string(), "operation": operation, self.cfg.object.clone(): body})
                })
                .collect();
            let rid = request_id(
                &self.cfg.job,
                &self.cfg.client.realm_id,
                &self.cfg.object,
                operation,
                &keys,
                serde_json::to_string(&items).unwrap_or_default().as_bytes(),
            );
            let answers = self
                .client
                .batch(items, &rid)
                .await
                .map_err(|e| self.client.write_error(e))?;
            let by_bid: HashMap<String, Json> = answers
                .into_iter()
                .filter_map(|a| Some((a["bId"].as_str()?.to_string(), a)))
                .collect();
            for (i, (key, _)) in chunk.iter().enumerate() {
                let answer = match by_bid.get(&(i + 1).to_string()) {
                    Some(a) if a.get("Fault").is_some() => Err(fault_text(&a["Fault"])),
                    Some(a) if a.get(&self.cfg.object).is_some() => Ok(a[&self.cfg.object].clone()),
                    _ => Err((
                        None,
                        "the batch answer has no item for this operation".into(),
                    )),
                };
                out.insert(key.clone(), answer);
            }
        }
        Ok(out)
    }

    /// A repair whose `SyncToken` went stale: read again by `Id`, once.
    async fn retry_stale(&self, key: &str, id: &str, patch: &Json) -> WriteOutcome {
        let read = self
            .client
            .get(&format!("{}/{id}", self.cfg.object.to_ascii_lowercase()))
            .await;
        let fresh = match read {
            Ok(v) => v[&self.cfg.object]["SyncToken"]
                .as_str()
                .map(str::to_string),
            Err(e) => {
                return WriteOutcome::Failed(format!(
                    "re-reading {} {id} after a stale SyncToken: {e}",
                    self.cfg.object
                ))
            }
        };
        let Some(token) = fresh else {
            return WriteOutcome::Failed(format!("{} {id} has no SyncToken", self.cfg.object));
        };
        let mut body = patch.clone();
        body["SyncToken"] = json!(token);
        let rid = request_id(
            &self.cfg.job,
            &self.cfg.client.realm_id,
            &self.cfg.object,
            "update",
            &[key],
            body.to_string().as_bytes(),
        );
        match self.client.post(&self.cfg.object, &body, &rid).await {
            Ok(_) => WriteOutcome::Updated,
            Err(HttpError::Status { message, .. }) => WriteOutcome::Failed(format!(
                "{message}; the SyncToken was stale twice (someone keeps editing {} {id}): not repaired",
                self.cfg.object
            )),
            Err(e) => WriteOutcome::Failed(e.to_string()),
        }
    }
}

#[async_trait::async_trait]
impl Target for QuickBooks {
    async fn check_idempotent(&self) -> Result<(), ConnectorError> {
        let prep = self.prepared().await?;
        // `SalesFormsPrefs.CustomTxnNumbers` is the preference's common
        // name, not read on an Intuit page: refused only when QuickBooks
        // reports it, and reports it off.
        if self.cfg.placement == Placement::DocNumber
            && prep.company.custom_txn_numbers == Some(false)
        {
            return Err(ConnectorError::NotIdempotent(format!(
                "QuickBooks company {} numbers its transactions itself (SalesFormsPrefs.CustomTxnNumbers is false), so DocNumber cannot hold the external ID: turn on Custom transaction numbers (Account and settings → Sales), or keep the ID in a custom field (external_id = \"custom_field:NAME\")",
                self.cfg.client.realm_id
            )));
        }
        if self.cfg.time_field == TimeField::CreateTime
            && self.cfg.placement != Placement::DocNumber
        {
            tracing::info!(
                message = "Lookups of this external ID read the window widened by lookup_widen; time_field = \"TxnDate\" keeps backfilled transactions on the source's dates.",
                object = self.cfg.object.as_str()
            );
        }
        tracing::info!(
            message = "QuickBooks has no unique constraint on the external ID: recon writes insert-only, looks each record up right before creating it, sends each create request with a requestid derived from the job and the external IDs, and records every item in the ledger before and after.",
            object = self.cfg.object.as_str(),
            external_id = match &self.cfg.placement {
                Placement::DocNumber => "DocNumber".to_string(),
                Placement::PrivateNote => "PrivateNote".to_string(),
                Placement::CustomField(n) => format!("custom field {n}"),
            }
            .as_str()
        );
        Ok(())
    }

    async fn write(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let prep = self.prepared().await?;
        let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
        // Around the records' own times, up to now: a transaction recon
        // created is dated by the source and entered now.
        let around = self.time_index.and_then(|t| {
            let times: Vec<jiff::Timestamp> = records
                .iter()
                .filter_map(|r| match r.values[t] {
                    Value::Timestamp(ts) => Some(ts),
                    _ => None,
                })
                .collect();
            let start = *times.iter().min()?;
            let now = jiff::Timestamp::now();
            let end = (*times.iter().max()?).max(now);
            Some(recon_core::Window { start, end })
        });
        let existing = self.find(&keys, around).await?;
        let mut plans: Vec<Plan> = Vec::with_capacity(records.len());
        for r in records {
            let found = existing.get(&r.key).map(Vec::as_slice).unwrap_or(&[]);
            let plan = match (found, mode) {
                ([], _) => match self.body(r, prep, true) {
                    Ok(b) => Plan::Create(b),
                    Err(m) => Plan::Done(WriteOutcome::Failed(m)),
                },
                ([_, ..], WriteMode::Insert) => Plan::Done(WriteOutcome::Unchanged),
                ([one], WriteMode::Upsert) => {
                    if self.same(r, one, prep)? {
                        Plan::Done(WriteOutcome::Unchanged)
                    } else {
                        match self.body(r, prep, false) {
                            Ok(mut patch) => {
                                let id = one["Id"].as_str().unwrap_or_default().to_string();
                                patch["Id"] = json!(id);
                                patch["SyncToken"] = one["SyncToken"].clone();
                                patch["sparse"] = json!(true);
                                if let Some(o) = patch.as_object_mut() {
                                    o.remove("CurrencyRef");
                                }
                                Plan::Update { id, patch }
                            }
                            Err(m) => Plan::Done(WriteOutcome::Failed(m)),
                        }
                    }
                }
                (many, WriteMode::Upsert) => Plan::Done(WriteOutcome::Failed(format!(
                    "{} QuickBooks {}s carry this external ID (Ids {}): recon does not pick one to repair; review them in QuickBooks",
                    many.len(),
                    self.cfg.object,
                    many.iter().map(|e| e["Id"].as_str().unwrap_or("?")).collect::<Vec<_>>().join(", ")
                ))),
            };
            plans.push(plan);
        }
        // Customers of the creates.
        let creating: Vec<usize> = (0..records.len())
            .filter(|i| matches!(plans[*i], Plan::Create(_)))
            .collect();
        let refs: Vec<&Record> = creating.iter().map(|i| &records[*i]).collect();
        let customers = self.customers(&refs).await?;
        let mut creates: Vec<(String, Json)> = Vec::new();
        for (i, c) in creating.iter().zip(customers) {
            match c {
                Ok(id) => {
                    if let Plan::Create(b) = &mut plans[*i] {
                        b["CustomerRef"] = json!({"value": id});
                        creates.push((records[*i].key.clone(), b.clone()));
                    }
                }
                Err(m) => plans[*i] = Plan::Done(WriteOutcome::Failed(m)),
            }
        }
        // Deterministic chunks: the same records make the same requests.
        creates.sort_by(|a, b| a.0.cmp(&b.0));
        creates.dedup_by(|a, b| a.0 == b.0);
        let created = self.send("create", creates).await?;
        let updates: Vec<(String, Json)> = records
            .iter()
            .zip(&plans)
            .filter_map(|(r, p)| match p {
                Plan::Update { patch, .. } => Some((r.key.clone(), patch.clone())),
                _ => None,
            })
            .collect();
        let updated = self.send("update", updates).await?;
        let mut out = Vec::with_capacity(records.len());
        for (r, plan) in records.iter().zip(plans) {
            let outcome = match plan {
                Plan::Done(o) => o,
                Plan::Create(_) => match created.get(&r.key) {
                    Some(Ok(_)) => WriteOutcome::Created,
                    Some(Err((code, text))) if code.as_deref() == Some("6140") => {
                        // Someone holds the number: the record exists now.
                        match self
                            .find(std::slice::from_ref(&r.key), around)
                            .await?
                            .get(&r.key)
                        {
                            Some(found) if !found.is_empty() => WriteOutcome::Unchanged,
                            _ => WriteOutcome::Failed(text.clone()),
                        }
                    }
                    Some(Err((_, text))) => WriteOutcome::Failed(text.clone()),
                    None => WriteOutcome::Failed("not sent".into()),
                },
                Plan::Update { id, patch } => match updated.get(&r.key) {
                    Some(Ok(_)) => WriteOutcome::Updated,
                    Some(Err((code, _))) if code.as_deref() == Some("5010") => {
                        self.retry_stale(&r.key, &id, &patch).await
                    }
                    Some(Err((_, text))) => WriteOutcome::Failed(text.clone()),
                    None => WriteOutcome::Failed("not sent".into()),
                },
            };
            out.push(outcome);
        }
        Ok(out)
    }

    fn write_batch(&self) -> usize {
        self.cfg.write_batch
    }

    fn as_source(&self) -> &dyn Source {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_deterministic_short_and_distinct() {
        let id = |job: &str, keys: &[&str], body: &str| {
            request_id(job, "1", "Invoice", "create", keys, body.as_bytes())
        };
        let a = id("payments", &["ch_1"], "{}");
        assert_eq!(a.len(), 32, "fits the 36 characters of a batch requestid");
        assert_eq!(a, id("payments", &["ch_1"], "{}"));
        assert_ne!(a, id("other", &["ch_1"], "{}"));
        assert_ne!(a, id("payments", &["ch_1", "ch_2"], "{}"));
        assert_ne!(a, id("payments", &["ch_1"], "{\"x\":1}"));
        assert_ne!(id("p", &["a", "b"], ""), id("p", &["ab"], ""));
    }
}
