//! Writing a declared API: create (one by one, or through a batch
//! endpoint), update by key or by the ID a lookup found, declared outcome
//! rules, and the uniqueness declaration every write rests on.
//!
//! Every create carries recon's deterministic idempotency key (the same on
//! a retry, a rerun after a crash and `recon apply`), so an API that
//! deduplicates by it, or refuses a second record with the same unique
//! key (an `outcomes` rule making that answer `unchanged`), or upserts by
//! the key, never holds a record twice. A call whose answer is lost (a 5xx
//! after the work, a dropped connection) is retried by the shared policy
//! with the same key; when the retries run out the write stops the run
//! (`ConnectionLost`), and the next run settles those records by diff.

use std::collections::HashMap;

use futures_core::stream::BoxStream;
use recon_core::http::HttpError;
use recon_core::{
    format_timestamp, ConnectorError, Page, Probe, Record, Source, Target, Value, Window,
    WriteMode, WriteOutcome,
};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use crate::convert::kind_of;
use crate::settings::{BatchSpec, RequestSpec, RuleOutcome, Uniqueness, WriteSpec};
use crate::source::{by_key, http_error, shown, HttpSource, Inner};
use crate::template::Val;

/// A declared API as a target.
pub struct HttpTarget {
    source: HttpSource,
}

impl HttpTarget {
    /// The target over a built source.
    pub fn new(source: HttpSource) -> HttpTarget {
        HttpTarget { source }
    }

    fn inner(&self) -> &Inner {
        &self.source.inner
    }

    fn write_spec(&self) -> Result<&WriteSpec, ConnectorError> {
        self.inner().spec.write.as_ref().ok_or_else(|| {
            ConnectorError::Config(format!(
                "{}: no [write] is declared",
                self.inner().spec.name
            ))
        })
    }
}

/// recon's deterministic idempotency key of one record's create: `recon-`
/// followed by the hex SHA-256 of the API's create template, the external
/// ID and the record's time (RFC 3339 UTC, empty without one),
/// NUL-separated.
pub fn idempotency_key(scope: &str, key: &str, created: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(scope.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    h.update([0]);
    h.update(created.unwrap_or("").as_bytes());
    format!("recon-{}", recon_core::lower_hex(&h.finalize()))
}

/// How `uniqueness` keeps one record per key, for `recon check` and the log.
fn uniqueness_text(uniqueness: Uniqueness) -> &'static str {
    match uniqueness {
        Uniqueness::UniqueField => {
            "a unique field the API enforces (its conflict answer settles as unchanged)"
        }
        Uniqueness::UpsertByKey => "an upsert-by-key endpoint",
        Uniqueness::IdempotencyKeyAndLookup => "idempotency keys and a lookup before every create",
    }
}

/// A failure that ends the write call: the records of the call may or may
/// not be written; the next run settles them.
fn lost(e: HttpError) -> ConnectorError {
    match e {
        HttpError::Unauthorized { .. } | HttpError::Client { .. } => http_error(e),
        other => ConnectorError::ConnectionLost(format!(
            "{other}; the records of this call may or may not be written: the next run settles them by key"
        )),
    }
}

impl Inner {
    fn time_of(&self, r: &Record) -> Option<String> {
        let i = self.spec.mapping.time_field?;
        match r.values.get(i) {
            Some(Value::Timestamp(t)) => Some(format_timestamp(*t)),
            _ => None,
        }
    }

    /// The value of a write template's placeholder for record `r`.
    fn write_val(&self, scope: &str, r: &Record, target_id: Option<&str>, name: &str) -> Val {
        match name {
            "key" => Val::Text(r.key.clone()),
            "idempotency_key" => {
                Val::Text(idempotency_key(scope, &r.key, self.time_of(r).as_deref()))
            }
            "target_id" => target_id.map_or(Val::Null, |t| Val::Text(t.to_string())),
            other => match other.strip_prefix("fields.") {
                Some(f) => self.spec.mapping.field_val(&self.schema, r, f),
                None => Val::Null,
            },
        }
    }

    /// The outcome a declared rule gives an error answer, if any.
    fn rule(&self, w: &WriteSpec, status: u16, code: Option<&str>) -> Option<RuleOutcome> {
        w.outcomes
            .iter()
            .find(|o| o.status == status && o.code.as_deref().is_none_or(|c| Some(c) == code))
            .map(|o| o.outcome)
    }

    /// One create (or upsert) request.
    async fn create_one(
        &self,
        w: &WriteSpec,
        (req_spec, idem_header): &(RequestSpec, Option<String>),
        r: &Record,
    ) -> Result<WriteOutcome, ConnectorError> {
        let scope = req_spec.label.clone();
        let req = self.render(req_spec, &|n: &str| self.write_val(&scope, r, None, n))?;
        let mut headers = Vec::new();
        if let Some(h) = idem_header {
            headers.push((
                h.clone(),
                idempotency_key(&scope, &r.key, self.time_of(r).as_deref()),
            ));
        }
        let sent = match &w.created {
            // The answer is not read: a 2xx is the record created.
            None => self.send_status(&req, &headers).await.map(|_| Json::Null),
            Some(_) => self.send(&req, &headers).await.map(|(answer, _)| answer),
        };
        match sent {
            Ok(answer) => Ok(match &w.created {
                None => WriteOutcome::Created,
                Some(p) => match p.first(&answer) {
                    Some(Json::Bool(true)) => WriteOutcome::Created,
                    Some(Json::Bool(false)) => WriteOutcome::Updated,
                    other => {
                        return Err(p.failed(
                            &format!(
                                "found {} where true (created) or false (updated) should be",
                                other.map_or("nothing".to_string(), kind_of)
                            ),
                            &req_spec.label,
                            &answer,
                        ))
                    }
                },
            }),
            Err(HttpError::Status {
                status,
                message,
                body_code,
                request_id,
                ..
            }) if status < 500 => Ok(match self.rule(w, status, body_code.as_deref()) {
                Some(RuleOutcome::Unchanged) => WriteOutcome::Unchanged,
                _ => WriteOutcome::Failed(format!(
                    "{} returned {status}{}: {message} (request {})",
                    req_spec.label,
                    body_code.map(|c| format!(" ({c})")).unwrap_or_default(),
                    request_id.as_deref().unwrap_or("without ID")
                )),
            }),
            Err(e) => Err(lost(e)),
        }
    }

    /// One update of an existing record.
    async fn update_one(
        &self,
        w: &WriteSpec,
        update: &RequestSpec,
        r: &Record,
        target_id: Option<&str>,
    ) -> Result<WriteOutcome, ConnectorError> {
        let scope = update.label.clone();
        let req = self.render(update, &|n: &str| self.write_val(&scope, r, target_id, n))?;
        match self.send_status(&req, &[]).await {
            Ok(_) => Ok(WriteOutcome::Updated),
            Err(HttpError::Status {
                status,
                message,
                body_code,
                ..
            }) if status < 500 => Ok(match self.rule(w, status, body_code.as_deref()) {
                Some(RuleOutcome::Unchanged) => WriteOutcome::Unchanged,
                _ => WriteOutcome::Failed(format!(
                    "{} returned {status}{}: {message}",
                    update.label,
                    body_code.map(|c| format!(" ({c})")).unwrap_or_default()
                )),
            }),
            Err(e) => Err(lost(e)),
        }
    }

    /// One batch request for `records`; an outcome per record, in order.
    async fn batch(
        &self,
        b: &BatchSpec,
        records: &[&Record],
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let label = b.request.label.clone();
        let items = records
            .iter()
            .map(|r| b.item.render(&|n: &str| self.write_val(&label, r, None, n)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ConnectorError::Config(format!("write.batch.item: {e}")))?;
        let keys: Vec<&str> = records.iter().map(|r| r.key.as_str()).collect();
        let batch_key = idempotency_key(&label, &keys.join("\u{0}"), None);
        let items = Json::Array(items);
        let req = self.render(&b.request, &|n: &str| match n {
            "items" => Val::Json(items.clone()),
            "idempotency_key" => Val::Text(batch_key.clone()),
            _ => Val::Null,
        })?;
        let headers: Vec<(String, String)> = b
            .idempotency_header
            .iter()
            .map(|h| (h.clone(), batch_key.clone()))
            .collect();
        let answer = match self.send(&req, &headers).await {
            Ok((answer, _)) => answer,
            Err(HttpError::Status {
                status,
                message,
                body_code,
                ..
            }) if status < 500 => {
                let m = format!(
                    "{label} refused the batch with {status}{}: {message}",
                    body_code.map(|c| format!(" ({c})")).unwrap_or_default()
                );
                return Ok(records
                    .iter()
                    .map(|_| WriteOutcome::Failed(m.clone()))
                    .collect());
            }
            Err(e) => return Err(lost(e)),
        };
        let mut by: HashMap<String, WriteOutcome> = HashMap::new();
        for result in b.results.all(&answer) {
            let key = match b.result_key.first(result) {
                Some(Json::String(s)) => s.clone(),
                Some(Json::Number(n)) => n.to_string(),
                _ => {
                    return Err(b.result_key.failed(
                        "matched no external ID in a result",
                        &label,
                        result,
                    ))
                }
            };
            let outcome = match &b.created {
                None => WriteOutcome::Created,
                Some(p) => match p.first(result) {
                    Some(Json::Bool(true)) => WriteOutcome::Created,
                    Some(Json::Bool(false)) => WriteOutcome::Updated,
                    _ => {
                        return Err(p.failed(
                            "found no true (created) or false (updated) in a result",
                            &label,
                            result,
                        ))
                    }
                },
            };
            by.insert(key, outcome);
        }
        if let Some(errors) = &b.errors {
            for e in errors.all(&answer) {
                let message = match b.error_message.first(e) {
                    Some(Json::String(s)) => s.clone(),
                    _ => shown(e),
                };
                if let Some(ek) = &b.error_keys {
                    for k in ek.all(e) {
                        let k = match k {
                            Json::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        by.insert(k, WriteOutcome::Failed(message.clone()));
                    }
                }
            }
        }
        Ok(records
            .iter()
            .map(|r| {
                by.remove(&r.key).unwrap_or_else(|| {
                    WriteOutcome::Failed(format!(
                        "{label}: the answer has neither a result nor an error for this record (write.batch.results = {:?}, write.batch.result_key = {:?}; first 200 bytes: {})",
                        b.results.text,
                        b.result_key.text,
                        shown(&answer)
                    ))
                })
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl Source for HttpTarget {
    fn describe(&self) -> String {
        self.source.describe()
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        self.source.read(window)
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        self.source.lookup(keys).await
    }

    fn reads_whole(&self) -> bool {
        self.source.reads_whole()
    }

    fn read_notes(&self) -> Vec<String> {
        self.source.read_notes()
    }

    async fn raw_json(
        &self,
        keys: &[String],
    ) -> Result<Option<Vec<(String, String)>>, ConnectorError> {
        self.source.raw_json(keys).await
    }

    async fn probe(&self) -> Result<Probe, ConnectorError> {
        let probe = self.source.probe().await?;
        Ok(match &self.inner().spec.write {
            Some(w) => probe.limit(format!(
                "writes keep one record per key by {} (write.uniqueness)",
                uniqueness_text(w.uniqueness)
            )),
            None => probe,
        })
    }
}

#[async_trait::async_trait]
impl Target for HttpTarget {
    async fn check_idempotent(&self) -> Result<(), ConnectorError> {
        let w = self.write_spec()?;
        let inner = self.inner();
        let name = &inner.spec.name;
        let how = match w.uniqueness {
            Uniqueness::UniqueField => {
                if !w
                    .outcomes
                    .iter()
                    .any(|o| o.outcome == RuleOutcome::Unchanged)
                {
                    return Err(ConnectorError::NotIdempotent(format!(
                        "{name}: write.uniqueness = \"unique_field\" says the API refuses a second record with the same key, but no write.outcomes rule says which answer that is; add e.g. write.outcomes = [{{ status = 409, outcome = \"unchanged\" }}] (the API's documented conflict answer), or declare another uniqueness"
                    )));
                }
                uniqueness_text(w.uniqueness)
            }
            Uniqueness::UpsertByKey => uniqueness_text(w.uniqueness),
            Uniqueness::IdempotencyKeyAndLookup => {
                let header = w.create.as_ref().is_some_and(|(_, h)| h.is_some())
                    || w.batch
                        .as_ref()
                        .is_some_and(|b| b.idempotency_header.is_some());
                if inner.spec.lookup.is_none() || !header {
                    return Err(ConnectorError::NotIdempotent(format!(
                        "{name}: write.uniqueness = \"idempotency_key_and_lookup\" needs both a [lookup] (each key is looked up before it is created) and write.create.idempotency_header (the header the API deduplicates by, e.g. \"Idempotency-Key\"); {} is missing",
                        if inner.spec.lookup.is_none() { "the lookup" } else { "the header" }
                    )));
                }
                uniqueness_text(w.uniqueness)
            }
        };
        tracing::info!(
            api = name.as_str(),
            "{name} keeps one record per key by {how} (write.uniqueness)."
        );
        Ok(())
    }

    async fn write(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError> {
        let w = self.write_spec()?;
        let inner = self.inner();
        if mode == WriteMode::Insert
            && w.uniqueness == Uniqueness::UpsertByKey
            && inner.spec.lookup.is_none()
        {
            // An upsert would change a record that exists: insert mode
            // must find those first and leave them alone.
            return Err(ConnectorError::Config(format!(
                "{}: backfill.mode = \"insert\" with write.uniqueness = \"upsert_by_key\" needs a [lookup], so that records that exist are found and left unchanged rather than overwritten; declare one, or set backfill.mode = \"upsert\"",
                inner.spec.name
            )));
        }
        let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
        let existing = match inner.lookup_json(&keys).await? {
            Some(found) => by_key(found),
            None => HashMap::new(),
        };
        let target_id = |key: &str| -> Option<String> {
            let (_, json) = existing.get(key)?;
            let p = inner.spec.lookup.as_ref()?.target_id.as_ref()?;
            match p.first(json)? {
                Json::String(s) => Some(s.clone()),
                Json::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        let mut outcomes: Vec<Option<WriteOutcome>> = vec![None; records.len()];
        let mut to_create: Vec<usize> = Vec::new();
        for (i, r) in records.iter().enumerate() {
            if !existing.contains_key(&r.key) {
                to_create.push(i);
                continue;
            }
            match (mode, &w.update) {
                (WriteMode::Insert, _) => outcomes[i] = Some(WriteOutcome::Unchanged),
                (WriteMode::Upsert, Some(u)) => {
                    outcomes[i] = Some(inner.update_one(w, u, r, target_id(&r.key).as_deref()).await?)
                }
                (WriteMode::Upsert, None) if w.uniqueness == Uniqueness::UpsertByKey => {
                    to_create.push(i)
                }
                (WriteMode::Upsert, None) => {
                    outcomes[i] = Some(WriteOutcome::Failed(format!(
                        "{} holds this record with other values and no write.update is declared to change it",
                        inner.spec.name
                    )))
                }
            }
        }
        if let Some(b) = &w.batch {
            for chunk in to_create.chunks(b.max_items) {
                let rs: Vec<&Record> = chunk.iter().map(|&i| &records[i]).collect();
                for (&i, o) in chunk.iter().zip(inner.batch(b, &rs).await?) {
                    outcomes[i] = Some(o);
                }
            }
        } else if let Some(create) = &w.create {
            for &i in &to_create {
                let r = &records[i];
                let mut o = inner.create_one(w, create, r).await?;
                // Without a lookup an existing record shows as the API's
                // conflict answer: in upsert mode, update it by key.
                if let (WriteOutcome::Unchanged, WriteMode::Upsert, Some(u)) = (&o, mode, &w.update)
                {
                    if !u.uses("target_id") {
                        o = inner.update_one(w, u, r, None).await?;
                    }
                }
                outcomes[i] = Some(o);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| WriteOutcome::Failed("not written".into())))
            .collect())
    }

    fn write_batch(&self) -> usize {
        self.inner()
            .spec
            .write
            .as_ref()
            .map_or(100, |w| w.batch_size)
    }

    fn as_source(&self) -> &dyn Source {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::idempotency_key;

    #[test]
    fn idempotency_keys_are_deterministic_and_differ_by_key_and_time() {
        let a = idempotency_key("POST /v1/records", "r1", Some("2026-11-28T00:00:00Z"));
        assert_eq!(
            a,
            idempotency_key("POST /v1/records", "r1", Some("2026-11-28T00:00:00Z"))
        );
        assert!(a.starts_with("recon-") && a.len() == 6 + 64, "{a}");
        assert_ne!(
            a,
            idempotency_key("POST /v1/records", "r2", Some("2026-11-28T00:00:00Z"))
        );
        assert_ne!(a, idempotency_key("POST /v1/records", "r1", None));
    }
}
