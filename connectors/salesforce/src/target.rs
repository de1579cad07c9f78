//! Writes, the idempotency precondition, and the daily-allowance guard.
//!
//! - **Upserts** go through sObject Collections,
//!   `PATCH /services/data/vXX.X/composite/sobjects/{SObject}/{ExternalIdField}`
//!   with at most 200 records per call and `allOrNone: false`: records are
//!   upserted in the order sent and one `UpsertResult` comes back per
//!   record, in the same order (`created` true or false, or `success:
//!   false` with `errors[{statusCode, message, fields}]`) ("Upsert Records
//!   Using sObject Collections", REST API Developer Guide:
//!   https://developer.salesforce.com/docs/platform/api-rest/guide/resources-composite-sobjects-collections-upsert.html).
//!   `created: true` is [`WriteOutcome::Created`], `false` is
//!   [`WriteOutcome::Updated`], an error [`WriteOutcome::Failed`] with its
//!   status code and message. Upserting by a unique external ID is
//!   idempotent: a call repeated after a lost answer updates the records
//!   the first created.
//! - **Large write calls** (from `bulk_write_threshold` records) use a
//!   Bulk API 2.0 ingest job: created with `operation: upsert` and
//!   `externalIdFieldName`, the CSV uploaded
//!   (`PUT /jobs/ingest/{id}/batches`), closed (`PATCH {"state":
//!   "UploadComplete"}`), polled with backoff until `JobComplete`, and its
//!   `successfulResults` (`sf__Created`), `failedResults` (`sf__Error`) and
//!   `unprocessedrecords` mapped back to the items by their key column
//!   (Bulk API 2.0 does not keep the upload's order) ("Step 5: Bulk
//!   Upsert" and "Upload Complete", Bulk API 2.0 Developer Guide:
//!   https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/walkthrough_upsert.htm,
//!   https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/close_job.htm).
//!   A null is written as `#N/A`, Bulk API's way to clear a field.
//! - **Insert mode never changes an existing record.** The batch's keys are
//!   looked up first (chunked `IN (…)`); those found are
//!   [`WriteOutcome::Unchanged`]. The others are *created*, never upserted:
//!   sObject Collections create (`POST /composite/sobjects`, 200 per call,
//!   `allOrNone: false`) or a Bulk API 2.0 `insert` job. The race — another
//!   integration creating the same key between the lookup and the create —
//!   is closed by the field's uniqueness, not by the lookup: Salesforce
//!   refuses the second record with `DUPLICATE_VALUE` on the key field, and
//!   recon looks that key up again and records it `Unchanged` when it is
//!   there (it never sends an update for it), or `Failed` when it is not (a
//!   key equal but for case on a case-insensitive field).
//!   A create whose answer was lost (a 5xx, a cut connection or a cut body
//!   after Salesforce did the work) is resent by the HTTP policy, and the
//!   resend meets the first attempt's records as `DUPLICATE_VALUE`: those
//!   found on the second lookup are [`WriteOutcome::Created`] when their
//!   call was sent more than once (this run created them), `Unchanged`
//!   otherwise. A resend after a `429` or a refreshed token, whose first
//!   attempt Salesforce did not process, meeting a record another writer
//!   created in that interval would be counted created too: the connector
//!   sees how often a call was sent, not why.
//! - **Precondition** ([`Target::check_idempotent`]): describe must show the
//!   key field with `externalId: true` and `unique: true`; otherwise recon
//!   refuses, giving the Setup steps that fix the field.
//! - **Fields the user cannot set.** Every field a write sends (the key, the
//!   mapped fields, the currency field with money; not the fields the
//!   platform maintains, `Id`, `CreatedDate`, …, and not those listed in
//!   `not_written`) must be `createable` in describe, and for repairs of
//!   existing records `updateable` too: a read-only Field-Level Security
//!   shows as `false`, and Salesforce refuses such a field with
//!   `INVALID_FIELD_FOR_INSERT_UPDATE`. recon refuses before writing
//!   anything, naming the object, each field, its flag and the permission
//!   that fixes it, or the `not_written` entry that leaves it out:
//!   `createable` in [`Target::check_idempotent`] (so `recon check` reports
//!   it: every backfill may create its gaps), `updateable` in
//!   [`Target::check_budget`] when the plan repairs records, and both again
//!   in every [`Target::write`].
//! - **A lost `UploadComplete`.** When a bulk job's close landed but its
//!   answer was lost, the resend is refused `INVALIDJOBSTATE`; recon reads
//!   the job and goes on when it is closed already (see `close_job`).
//! - **Daily allowance.** Before a write call sends anything, recon
//!   estimates the API calls it needs (lookups, one collection call per 200
//!   records, or about 14 for a bulk job) and refuses, with the figures,
//!   when they exceed `daily_share` of what the org has left today (from
//!   the last `Sforce-Limit-Info`); see [`crate::limits`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};

use futures_util::{stream, StreamExt, TryStreamExt};
use recon_core::http::{HttpError, Method};
use recon_core::{ConnectorError, Record, Source, Target, Value, WriteMode, WriteOutcome};
use serde_json::{json, Map, Value as Json};

use crate::connector::{write_error, Prepared, SalesforceObjects};
use crate::convert::{beyond_scale, to_json, value_to_field, Written};
use crate::describe::{edit_access_fix, key_fix, key_problem, write_problem, FieldInfo, Needs};
use crate::limits::check_share;
use crate::soql;

/// Records per sObject Collections call (Salesforce's maximum).
pub const COLLECTION: usize = 200;
/// Collection calls of one write call in flight at once.
const CONCURRENT_CALLS: usize = 4;
/// API calls a Bulk API 2.0 ingest job takes, about: create, upload,
/// close, a few polls, three result sets.
pub const BULK_JOB_CALLS: u64 = 14;

/// A record as one write sends it: field name → written value.
type Row = Vec<(String, Written)>;

/// Per row sent: its outcome, and whether its call was sent more than once
/// (an earlier attempt's answer was lost; Salesforce may have acted on it).
type Sent = Vec<(WriteOutcome, bool)>;

impl SalesforceObjects {
    /// The fields a write sends for `r`, or why it cannot be written.
    fn row_of(&self, p: &Prepared, r: &Record) -> Result<Row, String> {
        let mut row: Row = vec![(
            p.key.name.clone(),
            Written {
                text: Some(r.key.clone()),
                number: false,
                boolean: false,
            },
        )];
        for (info, v) in p.fields.iter().zip(&r.values) {
            if !p.sends(info) || info.name.eq_ignore_ascii_case(&p.key.name) {
                continue;
            }
            if let Value::Money(m) = v {
                match (&p.currency, self.cfg.currency) {
                    (Some(c), _) if !p.sends(c) => {}
                    (Some(c), _) => row.push((
                        c.name.clone(),
                        Written {
                            text: Some(m.currency.code().to_string()),
                            number: false,
                            boolean: false,
                        },
                    )),
                    (None, Some(org)) if org != m.currency => {
                        return Err(format!(
                            "the amount is in {}, but the org's only currency is {} (no {} field)",
                            m.currency.code(),
                            org.code(),
                            self.cfg
                                .currency_field
                                .as_deref()
                                .unwrap_or("CurrencyIsoCode")
                        ))
                    }
                    _ => {}
                }
            }
            row.push((info.name.clone(), value_to_field(v, info)?));
        }
        // One value per field: a later one (the money's currency) wins.
        let mut seen = HashSet::new();
        let mut deduped: Row = Vec::with_capacity(row.len());
        for (name, w) in row.into_iter().rev() {
            if seen.insert(name.to_ascii_lowercase()) {
                deduped.push((name, w));
            }
        }
        deduped.reverse();
        Ok(deduped)
    }

    /// Refuses, before anything is written, a write that would send a
    /// field the integration user cannot set as `needs` says (describe
    /// `createable: false` for creates, `updateable: false` for updates):
    /// Salesforce would refuse every record with
    /// `INVALID_FIELD_FOR_INSERT_UPDATE`, or, where a tool drops what it
    /// cannot write, records would be written without it. Names the
    /// object, each field and its flag, the Field-Level Security that
    /// fixes it, and `not_written`, which leaves a field out of writes.
    pub(crate) fn check_writable(&self, p: &Prepared, needs: Needs) -> Result<(), ConnectorError> {
        // The key, the mapped fields, and the currency field with money.
        let currency = p
            .currency
            .iter()
            .filter(|_| self.schema.money_field().is_some());
        let mut sent: Vec<&FieldInfo> = vec![&p.key];
        for f in p.fields.iter().chain(currency) {
            if p.sends(f) && !sent.iter().any(|s| s.name.eq_ignore_ascii_case(&f.name)) {
                sent.push(f);
            }
        }
        let bad: Vec<(&FieldInfo, String)> = sent
            .into_iter()
            .filter_map(|f| write_problem(f, needs).map(|why| (f, why)))
            .collect();
        if bad.is_empty() {
            return Ok(());
        }
        let object = &self.cfg.object;
        let what = match (needs.create, needs.update) {
            (true, true) => "create or update records",
            (false, true) => "update records",
            _ => "create records",
        };
        let listed = bad
            .iter()
            .map(|(f, why)| format!("{object}.{} ({why})", f.name))
            .collect::<Vec<_>>()
            .join(", ");
        let fixes = bad
            .iter()
            .map(|(f, _)| edit_access_fix(object, &f.name))
            .collect::<Vec<_>>()
            .join(". ");
        let key_listed = bad
            .iter()
            .any(|(f, _)| f.name.eq_ignore_ascii_case(&p.key.name));
        let exclude = if key_listed {
            "The external ID field must be writable: every write sends it".to_string()
        } else {
            format!(
                "Or, to backfill without it, list it in the job's target settings: not_written = [{}] (records are then written without it, and show as mismatches on it while it is compared)",
                bad.iter()
                    .map(|(f, _)| format!("\"{}\"", f.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        Err(ConnectorError::Config(format!(
            "Salesforce: the integration user cannot set {listed}, which recon must send to {what}; nothing was written. {fixes}. {exclude}"
        )))
    }

    fn sobject(&self, row: &Row) -> Json {
        let mut m = Map::new();
        m.insert("attributes".into(), json!({"type": self.cfg.object}));
        for (name, w) in row {
            m.insert(name.clone(), to_json(w));
        }
        Json::Object(m)
    }

    /// One collection call (`PATCH` upsert or `POST` create) of ≤200 rows.
    async fn collection_call(
        &self,
        p: &Prepared,
        rows: &[&Row],
        upsert: bool,
    ) -> Result<Sent, ConnectorError> {
        let body = json!({
            "allOrNone": false,
            "records": rows.iter().map(|r| self.sobject(r)).collect::<Vec<_>>(),
        });
        // Attempts of this call: more than one when the policy resent it
        // after an answer that never came (5xx, a cut connection, a cut
        // body), which Salesforce may have acted on.
        let attempts = AtomicU32::new(0);
        let (method, url) = if upsert {
            (
                Method::PATCH,
                self.data_url(&format!(
                    "composite/sobjects/{}/{}",
                    self.cfg.object, p.key.name
                )),
            )
        } else {
            (Method::POST, self.data_url("composite/sobjects"))
        };
        let v = self
            .json(method, &url, |r| {
                attempts.fetch_add(1, Ordering::Relaxed);
                r.json(&body)
            })
            .await
            .map_err(write_error)?;
        let resent = attempts.load(Ordering::Relaxed) > 1;
        let results = v.as_array().cloned().unwrap_or_default();
        Ok((0..rows.len())
            .map(|i| {
                let outcome = match results.get(i) {
                    Some(o) => outcome_of(o, upsert),
                    None => WriteOutcome::Failed(format!(
                        "Salesforce returned {} results for {} records; this one has none",
                        results.len(),
                        rows.len()
                    )),
                };
                (outcome, resent)
            })
            .collect())
    }

    /// Collection calls for `rows`, a few at once, outcomes in order.
    async fn collections(
        &self,
        p: &Prepared,
        rows: &[&Row],
        upsert: bool,
    ) -> Result<Sent, ConnectorError> {
        let calls: Vec<_> = rows
            .chunks(COLLECTION)
            .map(|chunk| self.collection_call(p, chunk, upsert))
            .collect();
        let chunks: Vec<Sent> = stream::iter(calls)
            .buffered(CONCURRENT_CALLS)
            .try_collect()
            .await?;
        Ok(chunks.into_iter().flatten().collect())
    }

    /// A Bulk API 2.0 ingest job (`upsert` or `insert`) for `rows`;
    /// outcomes in order of `rows`.
    async fn bulk_ingest(
        &self,
        p: &Prepared,
        rows: &[&Row],
        upsert: bool,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        // The columns of every row, the key first; a row without one (a
        // null amount has no currency) leaves its cell empty, which Bulk
        // API reads as "not set".
        let mut columns: Vec<String> = Vec::new();
        for row in rows {
            for (n, _) in row.iter() {
                if !columns.contains(n) {
                    columns.push(n.clone());
                }
            }
        }
        let mut w = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(Vec::new());
        let csv_err =
            |e: csv::Error| ConnectorError::Unreachable(format!("building the bulk CSV: {e}"));
        w.write_record(&columns).map_err(csv_err)?;
        for row in rows {
            let cells: Vec<&str> = columns
                .iter()
                .map(|c| match row.iter().find(|(n, _)| n == c) {
                    Some((_, v)) => v.text.as_deref().unwrap_or("#N/A"),
                    None => "",
                })
                .collect();
            w.write_record(&cells).map_err(csv_err)?;
        }
        let csv = String::from_utf8(w.into_inner().map_err(|e| csv_err(e.into_error().into()))?)
            .unwrap_or_default();
        let mut job = json!({
            "object": self.cfg.object,
            "contentType": "CSV",
            "operation": if upsert { "upsert" } else { "insert" },
            "lineEnding": "LF",
        });
        if upsert {
            job["externalIdFieldName"] = json!(p.key.name);
        }
        let created = self
            .json(Method::POST, &self.data_url("jobs/ingest"), |r| {
                r.json(&job)
            })
            .await
            .map_err(write_error)?;
        let id = created["id"].as_str().unwrap_or_default().to_string();
        if id.is_empty() {
            return Err(ConnectorError::Unreachable(
                "Salesforce created an ingest job without an id".into(),
            ));
        }
        tracing::info!(
            message = "Writing with a Bulk API 2.0 ingest job.",
            object = self.cfg.object.as_str(),
            job = id.as_str(),
            records = rows.len()
        );
        let job_url = self.data_url(&format!("jobs/ingest/{id}"));
        self.json(Method::PUT, &format!("{job_url}/batches"), |r| {
            r.header("Content-Type", "text/csv").body(csv.clone())
        })
        .await
        .map_err(write_error)?;
        self.close_job(&id, &job_url).await?;
        let status = self.await_job("ingest", &id).await?;
        // Items by key, in upload order (a key may repeat).
        let mut by_key: HashMap<String, VecDeque<usize>> = HashMap::new();
        for (i, row) in rows.iter().enumerate() {
            let key = row[0].1.text.clone().unwrap_or_default();
            by_key.entry(key).or_default().push_back(i);
        }
        let mut out: Vec<Option<WriteOutcome>> = vec![None; rows.len()];
        for (set, kind) in [
            ("successfulResults", 0u8),
            ("failedResults", 1),
            ("unprocessedrecords", 2),
        ] {
            let (text, _) = self
                .text(Method::GET, &format!("{job_url}/{set}"), |r| {
                    r.header("Accept", "text/csv")
                })
                .await
                .map_err(write_error)?;
            let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
            let headers: Vec<String> = reader
                .headers()
                .map_err(csv_err)?
                .iter()
                .map(str::to_string)
                .collect();
            let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
            let (Some(key_col), created_col, error_col) =
                (col(&p.key.name), col("sf__Created"), col("sf__Error"))
            else {
                continue;
            };
            for row in reader.records() {
                let row = row.map_err(csv_err)?;
                let key = row.get(key_col).unwrap_or_default();
                let Some(i) = by_key.get_mut(key).and_then(VecDeque::pop_front) else {
                    continue;
                };
                out[i] = Some(match kind {
                    0 if created_col
                        .and_then(|c| row.get(c))
                        .is_some_and(|v| v.eq_ignore_ascii_case("true")) =>
                    {
                        WriteOutcome::Created
                    }
                    0 if upsert => WriteOutcome::Updated,
                    0 => WriteOutcome::Created,
                    1 => WriteOutcome::Failed(
                        error_col
                            .and_then(|c| row.get(c))
                            .unwrap_or("failed in the bulk job")
                            .to_string(),
                    ),
                    _ => WriteOutcome::Failed(format!(
                        "not processed: the bulk job ended {}{}",
                        status["state"].as_str().unwrap_or("?"),
                        status["errorMessage"]
                            .as_str()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    )),
                });
            }
        }
        let state = status["state"].as_str().unwrap_or("?").to_string();
        let why = status["errorMessage"].as_str().unwrap_or("").to_string();
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    WriteOutcome::Failed(format!(
                        "the bulk job ({state}{}) reported nothing for this record",
                        if why.is_empty() {
                            String::new()
                        } else {
                            format!(": {why}")
                        }
                    ))
                })
            })
            .collect())
    }

    /// Closes an ingest job (`PATCH {"state": "UploadComplete"}`). When
    /// the first close landed but its answer was lost, the policy's resend
    /// meets a job no longer `Open` and Salesforce refuses it
    /// (`INVALIDJOBSTATE`: "The job state specified in a job update
    /// operation is invalid", Bulk API 2.0 "Errors",
    /// https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/bulk_api_2_0_errors.htm).
    /// Then the job is read (`GET jobs/ingest/{id}`): closed already
    /// (`UploadComplete`, `InProgress`, `JobComplete`, or `Failed`, whose
    /// records the results report) is what the close asked for, and the
    /// write goes on; any other state is the refusal it looks like.
    async fn close_job(&self, id: &str, job_url: &str) -> Result<(), ConnectorError> {
        let refused = match self
            .json(Method::PATCH, job_url, |r| {
                r.json(&json!({"state": "UploadComplete"}))
            })
            .await
        {
            Ok(_) => return Ok(()),
            Err(
                e @ HttpError::Status {
                    status: 400 | 409, ..
                },
            ) if e
                .to_string()
                .to_ascii_uppercase()
                .contains("INVALIDJOBSTATE") =>
            {
                e
            }
            Err(e) => return Err(write_error(e)),
        };
        let job = self
            .json(Method::GET, job_url, |r| r)
            .await
            .map_err(write_error)?;
        let state = job["state"].as_str().unwrap_or("");
        match state {
            "UploadComplete" | "InProgress" | "JobComplete" | "Failed" => {
                tracing::info!(
                    message = "The bulk job's close was refused as already done (its first answer was lost); the job is closed, going on.",
                    object = self.cfg.object.as_str(),
                    job = id,
                    state
                );
                Ok(())
            }
            _ => Err(ConnectorError::Unreachable(format!(
                "{refused}; Salesforce Bulk API 2.0 ingest job {id} is {}",
                if state.is_empty() {
                    "in no state"
                } else {
                    state
                }
            ))),
        }
    }

    /// Writes `rows` by collections or, from the threshold, a bulk job.
    async fn send(
        &self,
        p: &Prepared,
        rows: &[&Row],
        upsert: bool,
    ) -> Result<Sent, ConnectorError> {
        if rows.is_empty() {
            Ok(Vec::new())
        } else if rows.len() >= self.cfg.bulk_write_threshold {
            // A bulk job's results say what it created, resent or not.
            let outcomes = self.bulk_ingest(p, rows, upsert).await?;
            Ok(outcomes.into_iter().map(|o| (o, false)).collect())
        } else {
            self.collections(p, rows, upsert).await
        }
    }

    /// API calls writing `n` records takes, about.
    fn write_calls(&self, n: usize) -> u64 {
        if n == 0 {
            0
        } else if n >= self.cfg.bulk_write_threshold {
            BULK_JOB_CALLS
        } else {
            n.div_ceil(COLLECTION) as u64
        }
    }

    /// Refuses a write that would take more than `daily_share` of what the
    /// org has left.
    async fn guard(&self, what: &str, needed: u64) -> Result<(), ConnectorError> {
        let usage = self.current_usage().await?;
        check_share(what, needed, usage, self.cfg.daily_share).map_err(ConnectorError::Unreachable)
    }

    /// Insert mode: look up, then create only the missing records.
    async fn insert(
        &self,
        p: &Prepared,
        records: &[Record],
        rows: &[Result<Row, String>],
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
        let present: HashSet<String> = self
            .lookup(&keys)
            .await?
            .into_iter()
            .map(|r| r.key)
            .collect();
        let fresh: Vec<usize> = (0..records.len())
            .filter(|&i| rows[i].is_ok() && !present.contains(&records[i].key))
            .collect();
        let to_send: Vec<&Row> = fresh
            .iter()
            .filter_map(|&i| rows[i].as_ref().ok())
            .collect();
        let (mut sent, resent): (Vec<WriteOutcome>, Vec<bool>) =
            self.send(p, &to_send, false).await?.into_iter().unzip();
        // Refused as duplicates of the key: created meanwhile by someone
        // else, or by this very call's first attempt whose answer was
        // lost? Confirm by key; never update them.
        let dup: Vec<usize> = (0..sent.len())
            .filter(|&j| matches!(&sent[j], WriteOutcome::Failed(m) if is_key_duplicate(m, &p.key.name)))
            .collect();
        if !dup.is_empty() {
            let dup_keys: Vec<String> =
                dup.iter().map(|&j| records[fresh[j]].key.clone()).collect();
            let now: HashSet<String> = self
                .lookup(&dup_keys)
                .await?
                .into_iter()
                .map(|r| r.key)
                .collect();
            for &j in &dup {
                if now.contains(&records[fresh[j]].key) {
                    // Absent at this batch's lookup, refused as a duplicate
                    // only by a resend of the call that sent it: the first
                    // attempt created it (its answer was lost). Otherwise
                    // another writer did.
                    sent[j] = if resent[j] {
                        WriteOutcome::Created
                    } else {
                        WriteOutcome::Unchanged
                    };
                }
            }
        }
        let mut by_index: HashMap<usize, WriteOutcome> = fresh.into_iter().zip(sent).collect();
        Ok((0..records.len())
            .map(|i| match &rows[i] {
                Err(e) => WriteOutcome::Failed(e.clone()),
                Ok(_) => by_index.remove(&i).unwrap_or(WriteOutcome::Unchanged),
            })
            .collect())
    }
}

/// Whether a per-record error is `DUPLICATE_VALUE` on the key field.
fn is_key_duplicate(message: &str, key: &str) -> bool {
    message.starts_with("DUPLICATE_VALUE")
        && message
            .to_ascii_lowercase()
            .contains(&key.to_ascii_lowercase())
}

/// One `SaveResult`/`UpsertResult` of sObject Collections.
fn outcome_of(o: &Json, upsert: bool) -> WriteOutcome {
    if o["success"].as_bool() == Some(true) {
        return match o["created"].as_bool() {
            Some(false) if upsert => WriteOutcome::Updated,
            _ => WriteOutcome::Created,
        };
    }
    let errors: Vec<String> = o["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let code = e["statusCode"].as_str().unwrap_or("UNKNOWN_EXCEPTION");
            let msg = e["message"].as_str().unwrap_or("");
            let fields: Vec<&str> = e["fields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Json::as_str)
                .collect();
            if fields.is_empty() {
                format!("{code}: {msg}")
            } else {
                format!("{code}: {msg} (fields: {})", fields.join(", "))
            }
        })
        .collect();
    if errors.is_empty() {
        WriteOutcome::Failed("refused by Salesforce without an error".into())
    } else {
        WriteOutcome::Failed(errors.join("; "))
    }
}

/// Keys per lookup query, about: lookups are split to keep each URI under
/// Salesforce's documented limit (see `soql::in_chunks`); used only to
/// estimate a backfill's calls.
const KEYS_PER_LOOKUP: usize = 300;

#[async_trait::async_trait]
impl Target for SalesforceObjects {
    async fn check_idempotent(&self) -> Result<(), ConnectorError> {
        let object = self.described().await?;
        let key = &self.cfg.external_id_field;
        match key_problem(object, key) {
            // Every backfill may create records (its gaps): each field it
            // sends must be createable. Whether existing records are
            // updated (updateable) is known with the plan, in check_budget.
            None => self.check_writable(
                self.prepared().await?,
                Needs {
                    create: true,
                    update: false,
                },
            ),
            Some(problem) => Err(ConnectorError::NotIdempotent(format!(
                "Salesforce {} {problem}: upserts by it would not be idempotent (Salesforce matches upserts only on an External ID field, and only a Unique one refuses a second record with the same key). {}",
                self.cfg.object,
                key_fix(&self.cfg.object, object.field(key).map_or(key.as_str(), |f| f.name.as_str()), object.field(key).is_some())
            ))),
        }
    }

    async fn write(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let p = self.prepared().await?;
        self.check_writable(
            p,
            Needs {
                create: true,
                update: mode == WriteMode::Upsert,
            },
        )?;
        let rows: Vec<Result<Row, String>> = records.iter().map(|r| self.row_of(p, r)).collect();
        let rounded = records
            .iter()
            .flat_map(|r| p.fields.iter().zip(&r.values))
            .filter(|(f, v)| matches!(v, Value::Money(m) if beyond_scale(*m, f)))
            .count();
        if rounded > 0 {
            tracing::warn!(
                message = "Amounts with more decimals than their Salesforce field's scale: stored exactly, but shown rounded in the UI, and a user saving such a record there would round it.",
                object = self.cfg.object.as_str(),
                amounts = rounded
            );
        }
        let ok = rows.iter().filter(|r| r.is_ok()).count();
        let what = format!(
            "{} {} records into {}",
            if mode == WriteMode::Insert {
                "inserting"
            } else {
                "upserting"
            },
            records.len(),
            self.cfg.object
        );
        if mode == WriteMode::Insert {
            let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
            let lookups = soql::in_chunks(
                &p.select,
                &self.cfg.object,
                &p.key.name,
                &keys,
                &self.data_url("query"),
            )
            .0
            .len() as u64;
            self.guard(&what, lookups + self.write_calls(ok)).await?;
            return self.insert(p, records, &rows).await;
        }
        self.guard(&what, self.write_calls(ok)).await?;
        let to_send: Vec<&Row> = rows.iter().filter_map(|r| r.as_ref().ok()).collect();
        let mut sent = self
            .send(p, &to_send, true)
            .await?
            .into_iter()
            .map(|(o, _)| o);
        Ok(rows
            .iter()
            .map(|r| match r {
                Err(e) => WriteOutcome::Failed(e.clone()),
                Ok(_) => sent
                    .next()
                    .unwrap_or_else(|| WriteOutcome::Failed("no result".into())),
            })
            .collect())
    }

    fn write_batch(&self) -> usize {
        self.cfg.batch_size
    }

    /// The whole backfill's calls, estimated before its first write: per
    /// write call of `batch_size` records, the collection (or Bulk 2.0
    /// job) calls, and for inserts the key lookups (about
    /// [`KEYS_PER_LOOKUP`] keys per query).
    async fn check_budget(&self, inserts: usize, upserts: usize) -> Result<(), ConnectorError> {
        if inserts + upserts > 0 {
            // Before the first write, with the plan: repairs of existing
            // records need every field they send updateable.
            self.check_writable(
                self.prepared().await?,
                Needs {
                    create: true,
                    update: upserts > 0,
                },
            )?;
        }
        let batch = self.cfg.batch_size.max(1);
        let calls = |n: usize, insert: bool| -> u64 {
            (0..n.div_ceil(batch))
                .map(|i| {
                    let len = batch.min(n - i * batch);
                    let lookups = if insert {
                        len.div_ceil(KEYS_PER_LOOKUP) as u64
                    } else {
                        0
                    };
                    self.write_calls(len) + lookups
                })
                .sum()
        };
        let needed = calls(inserts, true) + calls(upserts, false);
        if needed == 0 {
            return Ok(());
        }
        let what = format!(
            "backfilling {} records into {} ({inserts} inserts, {upserts} upserts)",
            inserts + upserts,
            self.cfg.object
        );
        self.guard(&what, needed).await
    }

    fn as_source(&self) -> &dyn Source {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upsert_results_map_to_outcomes() {
        assert_eq!(
            outcome_of(
                &json!({"id": "a01", "success": true, "created": true, "errors": []}),
                true
            ),
            WriteOutcome::Created
        );
        assert_eq!(
            outcome_of(
                &json!({"id": "a01", "success": true, "created": false, "errors": []}),
                true
            ),
            WriteOutcome::Updated
        );
        assert_eq!(
            outcome_of(&json!({"id": "a01", "success": true, "errors": []}), false),
            WriteOutcome::Created
        );
        let failed = outcome_of(
            &json!({"success": false, "errors": [{"statusCode": "DUPLICATE_VALUE", "message": "duplicate value found: Stripe_Charge_Id__c duplicates value on record with id: a01", "fields": ["Stripe_Charge_Id__c"]}]}),
            false,
        );
        let WriteOutcome::Failed(m) = &failed else {
            panic!("{failed:?}")
        };
        assert!(m.starts_with("DUPLICATE_VALUE: duplicate value found"));
        assert!(is_key_duplicate(m, "stripe_charge_id__c"));
        assert!(!is_key_duplicate(m, "Other__c"));
        assert!(!is_key_duplicate(
            "REQUIRED_FIELD_MISSING: x (fields: Stripe_Charge_Id__c)",
            "Stripe_Charge_Id__c"
        ));
    }
}
