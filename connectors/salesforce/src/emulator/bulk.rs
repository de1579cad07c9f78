//! Bulk API 2.0: query jobs and ingest (insert/upsert) jobs, with CSV in and
//! out.
//!
//! # Query jobs
//!
//! `POST /jobs/query` validates the SOQL at once (same errors as the REST
//! query; `COUNT()` is refused: Bulk API 2.0 "doesn't support … Aggregate
//! Functions such as COUNT()") and answers the job in state `UploadComplete`.
//! The job reads `InProgress` until `bulk_poll_delay` has passed since its
//! creation, then `JobComplete`. Its results are the records as they were
//! when the job was created. `GET …/results?maxRecords=N&locator=L` returns
//! CSV (every value quoted, the job's line ending and delimiter; datetimes
//! `2026-01-02T03:04:05.000Z`), with `Sforce-NumberOfRecords` and
//! `Sforce-Locator` (the next set's locator, `null` after the last set).
//! A locator stays valid as long as the job exists and can be read again.
//! Without `maxRecords` a set holds at most 50,000 records (Salesforce sizes
//! sets by bytes; the emulator by records). Results must be read with the
//! API version the job was created with, else `409` ("Use the same API
//! version to get query results that you used to create the query").
//!
//! # Ingest jobs
//!
//! `POST /jobs/ingest` (`operation` `insert` or `upsert`, `externalIdFieldName`
//! for upsert) → `Open`; `PUT …/batches` with CSV → `201` (several uploads
//! append); `PATCH` `{"state":"UploadComplete"}` processes the rows (or
//! `{"state":"Aborted"}`); the job reads `InProgress` for `bulk_poll_delay`,
//! then `JobComplete` with `numberRecordsProcessed` and `numberRecordsFailed`.
//! With `bulk_deferred` the rows are processed only `bulk_poll_delay` after
//! `UploadComplete` (by the first request after that; the job reads
//! `InProgress` until then and for `bulk_poll_delay` more), whether or not
//! the client that closed the job is still there, as Salesforce processes
//! a closed job on its own.
//! CSV cells follow "Prepare CSV Files": an empty cell leaves the field as is
//! and `#N/A` sets it to null. An unknown column fails the whole job
//! (`Failed`, `errorMessage` `InvalidBatch : Field name not found : X`).
//! Results, in upload order: `successfulResults` (`sf__Id`, `sf__Created`,
//! then the uploaded columns), `failedResults` (`sf__Id`, `sf__Error` as
//! `STATUS_CODE:message:fields --`, then the uploaded columns) and
//! `unprocessedrecords` (the uploaded columns of rows never processed, e.g.
//! of an aborted job).

use std::collections::HashMap;
use tokio::time::Instant;

use serde_json::{json, Map, Value};

use super::server::{now_text, IngestResults, Reply, Shared};
use super::soql;
use super::store::{RecErr, RowResult, WriteOp};
use super::values::{now_ms, sf_id, Val};
use recon_emulator_kit::{base64_decode, base64_encode};

/// Records per result set when the request gives no `maxRecords`.
const DEFAULT_SET: usize = 50_000;

#[derive(Clone, Copy)]
struct Format {
    line_ending: &'static str,
    delimiter: char,
}

impl Format {
    fn from_request(body: &Value) -> Result<Format, Reply> {
        let line_ending = match body.get("lineEnding").and_then(Value::as_str) {
            None | Some("LF") => "\n",
            Some("CRLF") => "\r\n",
            Some(other) => return Err(api_error(&format!("Invalid lineEnding: {other}"))),
        };
        let delimiter = match body.get("columnDelimiter").and_then(Value::as_str) {
            None | Some("COMMA") => ',',
            Some("TAB") => '\t',
            Some("PIPE") => '|',
            Some("SEMICOLON") => ';',
            Some("CARET") => '^',
            Some("BACKQUOTE") => '`',
            Some(other) => return Err(api_error(&format!("Invalid columnDelimiter: {other}"))),
        };
        if let Some(ct) = body.get("contentType").and_then(Value::as_str) {
            if ct != "CSV" {
                return Err(api_error(&format!("Invalid contentType: {ct}")));
            }
        }
        Ok(Format {
            line_ending,
            delimiter,
        })
    }

    fn line_ending_name(&self) -> &'static str {
        if self.line_ending == "\n" {
            "LF"
        } else {
            "CRLF"
        }
    }

    fn delimiter_name(&self) -> &'static str {
        match self.delimiter {
            '\t' => "TAB",
            '|' => "PIPE",
            ';' => "SEMICOLON",
            '^' => "CARET",
            '`' => "BACKQUOTE",
            _ => "COMMA",
        }
    }

    fn row(&self, cells: impl IntoIterator<Item = impl AsRef<str>>) -> String {
        let mut line = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            if i > 0 {
                line.push(self.delimiter);
            }
            line.push('"');
            line.push_str(&c.as_ref().replace('"', "\"\""));
            line.push('"');
        }
        line.push_str(self.line_ending);
        line
    }
}

fn api_error(message: &str) -> Reply {
    Reply::error(400, "API_ERROR", message)
}

fn version_number(v: &str) -> Value {
    v.parse::<serde_json::Number>()
        .map(Value::Number)
        .unwrap_or_else(|_| Value::String(v.to_owned()))
}

struct QueryJob {
    version: String,
    object: String,
    created: Instant,
    created_text: String,
    format: Format,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    aborted: bool,
}

#[derive(Clone)]
enum IngestState {
    Open,
    /// Closed (`UploadComplete`), its rows not processed yet
    /// (`bulk_deferred`): processed by the first request at least
    /// `bulk_poll_delay` after this instant.
    Queued(Instant),
    Processed(Instant),
    Aborted,
    Failed(String),
}

struct IngestJob {
    version: String,
    object: String,
    operation: &'static str,
    external_id: Option<String>,
    created_text: String,
    format: Format,
    uploads: Vec<Vec<u8>>,
    state: IngestState,
    header: Vec<String>,
    /// Every uploaded row and, once processed, its outcome.
    rows: Vec<(Vec<String>, Option<RowResult>)>,
}

/// Every Bulk API 2.0 job.
#[derive(Default)]
pub(crate) struct Jobs {
    query: HashMap<String, QueryJob>,
    ingest: HashMap<String, IngestJob>,
    batches: u64,
}

impl Jobs {
    /// `(query jobs created, ingest batches processed)`, for `/limits`.
    pub fn counts(&self) -> (u64, u64) {
        (self.query.len() as u64, self.batches)
    }
}

fn job_base(
    shared: &Shared,
    id: &str,
    operation: &str,
    object: &str,
    created: &str,
    format: Format,
    v: &str,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("id".into(), json!(id));
    m.insert("operation".into(), json!(operation));
    m.insert("object".into(), json!(object));
    m.insert("createdById".into(), json!(shared.user_id));
    m.insert("createdDate".into(), json!(created));
    m.insert("systemModstamp".into(), json!(now_text()));
    m.insert("state".into(), json!("Open"));
    m.insert("concurrencyMode".into(), json!("Parallel"));
    m.insert("contentType".into(), json!("CSV"));
    m.insert("apiVersion".into(), version_number(v));
    m.insert("lineEnding".into(), json!(format.line_ending_name()));
    m.insert("columnDelimiter".into(), json!(format.delimiter_name()));
    m
}

// ---------------------------------------------------------------------------
// Query jobs

fn query_state(shared: &Shared, job: &QueryJob) -> &'static str {
    if job.aborted {
        "Aborted"
    } else if job.created.elapsed() < shared.cfg.bulk_poll_delay {
        "InProgress"
    } else {
        "JobComplete"
    }
}

fn query_json(shared: &Shared, id: &str, job: &QueryJob, state: &str, full: bool) -> Value {
    let mut m = job_base(
        shared,
        id,
        "query",
        &job.object,
        &job.created_text,
        job.format,
        &job.version,
    );
    m.insert("state".into(), json!(state));
    if full {
        m.insert("jobType".into(), json!("V2Query"));
        let done = state == "JobComplete";
        m.insert(
            "numberRecordsProcessed".into(),
            json!(if done { job.rows.len() } else { 0 }),
        );
        m.insert("retries".into(), json!(0));
        m.insert(
            "totalProcessingTime".into(),
            json!(if done { 1 } else { 0 }),
        );
    }
    Value::Object(m)
}

/// `POST /jobs/query`.
pub(crate) fn query_create(shared: &Shared, v: &str, body: &[u8]) -> Reply {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return Reply::error(
            400,
            "JSON_PARSER_ERROR",
            "The request body is not valid JSON",
        );
    };
    match req.get("operation").and_then(Value::as_str) {
        Some("query") | Some("queryAll") => {}
        _ => return api_error("Invalid operation: use query or queryAll"),
    }
    let Some(q) = req.get("query").and_then(Value::as_str) else {
        return api_error("The query is required");
    };
    let format = match Format::from_request(&req) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let (object, header, rows) = {
        let store = shared.store.read().unwrap();
        let plan = match soql::plan(&store, q) {
            Ok(p) => p,
            Err(e) => return Reply::error(400, e.code, &e.message),
        };
        if plan.count {
            return api_error(
                "Bulk API 2.0 doesn't support aggregate functions such as COUNT() in query jobs",
            );
        }
        let obj = store.object(&plan.object).expect("bound object exists");
        let header = plan
            .select
            .iter()
            .map(|&f| obj.fields[f].name.clone())
            .collect();
        let rows = soql::run(obj, &plan)
            .into_iter()
            .map(|i| {
                let rec = &obj.records[i];
                plan.select.iter().map(|&f| rec.get(f).to_csv()).collect()
            })
            .collect();
        (obj.name.clone(), header, rows)
    };
    let id = sf_id("750", shared.next_seq());
    let job = QueryJob {
        version: v.to_owned(),
        object,
        created: Instant::now(),
        created_text: now_text(),
        format,
        header,
        rows,
        aborted: false,
    };
    let out = query_json(shared, &id, &job, "UploadComplete", false);
    shared.jobs.lock().unwrap().query.insert(id, job);
    Reply::json(200, &out)
}

/// `GET /jobs/query/{id}`.
pub(crate) fn query_info(shared: &Shared, _v: &str, id: &str) -> Reply {
    let jobs = shared.jobs.lock().unwrap();
    match jobs.query.get(id) {
        Some(job) => Reply::json(
            200,
            &query_json(shared, id, job, query_state(shared, job), true),
        ),
        None => Reply::not_found(),
    }
}

/// `PATCH /jobs/query/{id}` with `{"state":"Aborted"}`.
pub(crate) fn query_abort(shared: &Shared, _v: &str, id: &str, body: &[u8]) -> Reply {
    let state = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|b| b.get("state").and_then(Value::as_str).map(str::to_owned));
    if state.as_deref() != Some("Aborted") {
        return api_error("A query job can only be set to Aborted");
    }
    let mut jobs = shared.jobs.lock().unwrap();
    let Some(job) = jobs.query.get_mut(id) else {
        return Reply::not_found();
    };
    if query_state(shared, job) == "JobComplete" {
        return Reply::error(400, "INVALIDJOBSTATE", "The job is already complete");
    }
    job.aborted = true;
    Reply::json(200, &query_json(shared, id, job, "Aborted", false))
}

/// The locator of the set starting at record `offset`: base64 of the offset.
fn locator(offset: usize) -> String {
    base64_encode(offset.to_string().as_bytes())
        .trim_end_matches('=')
        .to_owned()
}

/// `GET /jobs/query/{id}/results?maxRecords=&locator=`.
pub(crate) fn query_results(
    shared: &Shared,
    v: &str,
    id: &str,
    params: &[(String, String)],
) -> Reply {
    let jobs = shared.jobs.lock().unwrap();
    let Some(job) = jobs.query.get(id) else {
        return Reply::not_found();
    };
    if job.version != v {
        return Reply::error(
            409,
            "API_ERROR",
            &format!(
                "Use the same API version to get query results that you used to create the query (v{})",
                job.version
            ),
        );
    }
    if query_state(shared, job) != "JobComplete" {
        return Reply::error(
            400,
            "INVALIDJOBSTATE",
            "The job must have the state JobComplete to get its results",
        );
    }
    let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let max = match param("maxRecords") {
        None => DEFAULT_SET,
        Some(m) => match m.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return api_error(&format!("Invalid maxRecords: {m}")),
        },
    };
    let from = match param("locator") {
        None | Some("") => 0,
        Some(l) => match base64_decode(l)
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|&n| n <= job.rows.len())
        {
            Some(n) => n,
            None => {
                return Reply::error(
                    400,
                    "INVALID_QUERY_LOCATOR",
                    &format!("Invalid locator: {l}"),
                )
            }
        },
    };
    let to = (from + max).min(job.rows.len());
    let mut csv = job.format.row(&job.header);
    for row in &job.rows[from..to] {
        csv.push_str(&job.format.row(row));
    }
    let mut r = Reply::csv(csv);
    let next = if to < job.rows.len() {
        locator(to)
    } else {
        "null".into()
    };
    r.headers.push(("sforce-locator", next));
    r.headers
        .push(("sforce-numberofrecords", (to - from).to_string()));
    r
}

// ---------------------------------------------------------------------------
// Ingest jobs

fn ingest_state_name(shared: &Shared, job: &IngestJob) -> &'static str {
    match &job.state {
        IngestState::Open => "Open",
        IngestState::Aborted => "Aborted",
        IngestState::Failed(_) => "Failed",
        IngestState::Queued(_) => "InProgress",
        IngestState::Processed(at) if at.elapsed() < shared.cfg.bulk_poll_delay => "InProgress",
        IngestState::Processed(_) => "JobComplete",
    }
}

fn ingest_json(shared: &Shared, id: &str, job: &IngestJob, state: &str, full: bool) -> Value {
    let mut m = job_base(
        shared,
        id,
        job.operation,
        &job.object,
        &job.created_text,
        job.format,
        &job.version,
    );
    m.insert("state".into(), json!(state));
    if let Some(ext) = &job.external_id {
        m.insert("externalIdFieldName".into(), json!(ext));
    }
    m.insert(
        "contentUrl".into(),
        json!(format!(
            "services/data/v{}/jobs/ingest/{id}/batches",
            job.version
        )),
    );
    if full {
        let done = state == "JobComplete";
        let processed = if done {
            job.rows.iter().filter(|r| r.1.is_some()).count()
        } else {
            0
        };
        let failed = if done {
            job.rows
                .iter()
                .filter(|r| matches!(r.1, Some(Err(_))))
                .count()
        } else {
            0
        };
        m.insert("jobType".into(), json!("V2Ingest"));
        m.insert("numberRecordsProcessed".into(), json!(processed));
        m.insert("numberRecordsFailed".into(), json!(failed));
        m.insert("retries".into(), json!(0));
        m.insert(
            "totalProcessingTime".into(),
            json!(if done { 1 } else { 0 }),
        );
        m.insert(
            "apiActiveProcessingTime".into(),
            json!(if done { 1 } else { 0 }),
        );
        m.insert("apexProcessingTime".into(), json!(0));
        if let IngestState::Failed(msg) = &job.state {
            m.insert("errorMessage".into(), json!(msg));
        }
    }
    Value::Object(m)
}

/// `POST /jobs/ingest`.
pub(crate) fn ingest_create(shared: &Shared, v: &str, body: &[u8]) -> Reply {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return Reply::error(
            400,
            "JSON_PARSER_ERROR",
            "The request body is not valid JSON",
        );
    };
    let format = match Format::from_request(&req) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let operation = match req.get("operation").and_then(Value::as_str) {
        Some("insert") => "insert",
        Some("upsert") => "upsert",
        Some(other) => {
            return api_error(&format!(
                "The emulator supports the insert and upsert operations, not {other}"
            ))
        }
        None => return api_error("The operation is required"),
    };
    let Some(object) = req.get("object").and_then(Value::as_str) else {
        return api_error("The object is required");
    };
    let store = shared.store.read().unwrap();
    let Some(obj) = store.object(object) else {
        return Reply::error(
            400,
            "NOT_FOUND",
            &format!("sObject type '{object}' is not supported"),
        );
    };
    let external_id = match (
        operation,
        req.get("externalIdFieldName").and_then(Value::as_str),
    ) {
        ("upsert", None) => return api_error("externalIdFieldName is required for upsert"),
        ("upsert", Some(f)) => match obj.field(f) {
            Some(i) if obj.fields[i].external_id || obj.fields[i].name == "Id" => {
                Some(obj.fields[i].name.clone())
            }
            _ => {
                return api_error(&format!(
                    "The field {f} is not an External ID or indexed field for {}",
                    obj.name
                ))
            }
        },
        _ => None,
    };
    let job = IngestJob {
        version: v.to_owned(),
        object: obj.name.clone(),
        operation,
        external_id,
        created_text: now_text(),
        format,
        uploads: Vec::new(),
        state: IngestState::Open,
        header: Vec::new(),
        rows: Vec::new(),
    };
    drop(store);
    let id = sf_id("750", shared.next_seq());
    let out = ingest_json(shared, &id, &job, "Open", false);
    shared.jobs.lock().unwrap().ingest.insert(id, job);
    Reply::json(200, &out)
}

/// `GET /jobs/ingest/{id}`.
pub(crate) fn ingest_info(shared: &Shared, _v: &str, id: &str) -> Reply {
    let jobs = shared.jobs.lock().unwrap();
    match jobs.ingest.get(id) {
        Some(job) => Reply::json(
            200,
            &ingest_json(shared, id, job, ingest_state_name(shared, job), true),
        ),
        None => Reply::not_found(),
    }
}

/// `PUT /jobs/ingest/{id}/batches`.
pub(crate) fn ingest_upload(shared: &Shared, id: &str, body: &[u8]) -> Reply {
    let mut jobs = shared.jobs.lock().unwrap();
    let Some(job) = jobs.ingest.get_mut(id) else {
        return Reply::not_found();
    };
    if !matches!(job.state, IngestState::Open) {
        return Reply::error(
            409,
            "INVALIDJOBSTATE",
            "Job is not in the Open state; no more data can be uploaded",
        );
    }
    job.uploads.push(body.to_vec());
    Reply::empty(201)
}

/// `PATCH /jobs/ingest/{id}` with `{"state":"UploadComplete"}` or `"Aborted"`.
pub(crate) fn ingest_state(shared: &Shared, _v: &str, id: &str, body: &[u8]) -> Reply {
    let state = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|b| b.get("state").and_then(Value::as_str).map(str::to_owned));
    let mut jobs = shared.jobs.lock().unwrap();
    let Some(job) = jobs.ingest.get_mut(id) else {
        return Reply::not_found();
    };
    match state.as_deref() {
        Some("UploadComplete") => {
            if !matches!(job.state, IngestState::Open) {
                return Reply::error(409, "INVALIDJOBSTATE", "Job is not in the Open state");
            }
            if shared.cfg.bulk_deferred {
                job.state = IngestState::Queued(Instant::now());
                return Reply::json(200, &ingest_json(shared, id, job, "UploadComplete", false));
            }
            let batches = process(shared, job);
            jobs.batches += batches;
            let job = jobs.ingest.get(id).expect("job exists");
            let state = if matches!(job.state, IngestState::Failed(_)) {
                "Failed"
            } else {
                "UploadComplete"
            };
            Reply::json(200, &ingest_json(shared, id, job, state, false))
        }
        Some("Aborted") => {
            if matches!(job.state, IngestState::Processed(_))
                && ingest_state_name(shared, job) == "JobComplete"
            {
                return Reply::error(409, "INVALIDJOBSTATE", "The job is already complete");
            }
            if matches!(job.state, IngestState::Open | IngestState::Queued(_)) {
                // Rows uploaded but never processed stay "unprocessed".
                let _ = parse_uploads(job);
            }
            job.state = IngestState::Aborted;
            Reply::json(200, &ingest_json(shared, id, job, "Aborted", false))
        }
        _ => api_error("The state must be UploadComplete or Aborted"),
    }
}

/// Processes the closed jobs whose `bulk_poll_delay` has passed
/// (`bulk_deferred`): called as each request arrives, so their rows land
/// while other clients read and write, as Salesforce processes a job
/// asynchronously after `UploadComplete` ("Upload Complete", Bulk API 2.0
/// Developer Guide: "Salesforce processes the data in the job").
pub(crate) fn process_due(shared: &Shared) {
    if !shared.cfg.bulk_deferred {
        return;
    }
    let mut jobs = shared.jobs.lock().unwrap();
    let mut batches = 0;
    for job in jobs.ingest.values_mut() {
        if matches!(job.state, IngestState::Queued(at) if at.elapsed() >= shared.cfg.bulk_poll_delay)
        {
            batches += process(shared, job);
        }
    }
    jobs.batches += batches;
}

/// Parses every upload into `job.header` and `job.rows`.
fn parse_uploads(job: &mut IngestJob) -> Result<(), String> {
    job.rows.clear();
    for data in &job.uploads {
        let text = String::from_utf8_lossy(data);
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let mut rows = parse_csv(text, job.format.delimiter)?.into_iter();
        let Some(header) = rows.next() else {
            continue;
        };
        if job.header.is_empty() {
            job.header = header;
        } else if job.header != header {
            return Err("InvalidBatch : Every upload must have the same header row".into());
        }
        for row in rows {
            job.rows.push((row, None));
        }
    }
    Ok(())
}

/// Applies the uploaded rows; returns the number of internal batches
/// (10,000 records each) for the daily batch allocation.
fn process(shared: &Shared, job: &mut IngestJob) -> u64 {
    if let Err(e) = parse_uploads(job) {
        job.state = IngestState::Failed(e);
        return 0;
    }
    if job.rows.is_empty() {
        job.state =
            IngestState::Failed("InvalidBatch : No data found in the uploaded content".into());
        return 0;
    }
    let mut store = shared.store.write().unwrap();
    let Some(obj) = store.object_mut(&job.object) else {
        job.state = IngestState::Failed(format!(
            "InvalidJob : Unable to find object: {}",
            job.object
        ));
        return 0;
    };
    let mut columns = Vec::new();
    for name in &job.header {
        match obj.field(name) {
            Some(i) => columns.push(i),
            None => {
                job.state =
                    IngestState::Failed(format!("InvalidBatch : Field name not found : {name}"));
                return 0;
            }
        }
    }
    let op = match &job.external_id {
        Some(f) => WriteOp::Upsert(obj.field(f).expect("checked at create")),
        None => WriteOp::Insert,
    };
    let rows = job
        .rows
        .iter()
        .map(|(cells, _)| {
            if cells.len() != columns.len() {
                return Err(RecErr::new(
                    "INVALID_FIELD",
                    format!(
                        "Row has {} columns, the header {}",
                        cells.len(),
                        columns.len()
                    ),
                    &[],
                ));
            }
            let mut vals = Vec::new();
            for (&f, cell) in columns.iter().zip(cells) {
                if cell.is_empty() {
                    continue;
                }
                let v = if cell == "#N/A" {
                    Ok(Val::Null)
                } else {
                    obj.coerce_text(f, cell)
                };
                vals.push((f, v?));
            }
            Ok(vals)
        })
        .collect();
    let results = obj.write(op, rows, false, false, now_ms());
    for (row, r) in job.rows.iter_mut().zip(results) {
        row.1 = Some(r);
    }
    job.state = IngestState::Processed(Instant::now());
    job.rows.len().div_ceil(10_000) as u64
}

/// `GET /jobs/ingest/{id}/successfulResults|failedResults|unprocessedrecords`.
pub(crate) fn ingest_results(shared: &Shared, id: &str, kind: IngestResults) -> Reply {
    let jobs = shared.jobs.lock().unwrap();
    let Some(job) = jobs.ingest.get(id) else {
        return Reply::not_found();
    };
    let state = ingest_state_name(shared, job);
    if !matches!(state, "JobComplete" | "Failed" | "Aborted") {
        return Reply::error(
            400,
            "INVALIDJOBSTATE",
            "The job must be complete, failed or aborted to get its results",
        );
    }
    let f = job.format;
    let mut csv = String::new();
    match kind {
        IngestResults::Successful => {
            csv.push_str(
                &f.row(
                    ["sf__Id", "sf__Created"]
                        .into_iter()
                        .map(String::from)
                        .chain(job.header.iter().cloned()),
                ),
            );
            for (cells, r) in &job.rows {
                if let Some(Ok((rid, created))) = r {
                    csv.push_str(
                        &f.row(
                            [rid.clone(), created.to_string()]
                                .into_iter()
                                .chain(cells.iter().cloned()),
                        ),
                    );
                }
            }
        }
        IngestResults::Failed => {
            csv.push_str(
                &f.row(
                    ["sf__Id", "sf__Error"]
                        .into_iter()
                        .map(String::from)
                        .chain(job.header.iter().cloned()),
                ),
            );
            for (cells, r) in &job.rows {
                if let Some(Err(e)) = r {
                    csv.push_str(
                        &f.row(
                            [String::new(), e.to_bulk()]
                                .into_iter()
                                .chain(cells.iter().cloned()),
                        ),
                    );
                }
            }
        }
        IngestResults::Unprocessed => {
            csv.push_str(&f.row(&job.header));
            for (cells, r) in &job.rows {
                if r.is_none() {
                    csv.push_str(&f.row(cells));
                }
            }
        }
    }
    Reply::csv(csv)
}

// ---------------------------------------------------------------------------
// CSV

/// RFC 4180 CSV with `delim`: quoted fields may hold the delimiter, line
/// breaks and doubled quotes; LF and CRLF line endings; blank lines skipped.
pub(crate) fn parse_csv(text: &str, delim: char) -> Result<Vec<Vec<String>>, String> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut cell = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut line = 1;
    let mut any = false;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    cell.push('"');
                }
                '"' => quoted = false,
                '\n' => {
                    line += 1;
                    cell.push(c);
                }
                _ => cell.push(c),
            }
            continue;
        }
        match c {
            '"' if cell.is_empty() => {
                quoted = true;
                any = true;
            }
            '"' => return Err(format!("InvalidBatch : Unexpected quote on line {line}")),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                line += 1;
                if any || !cell.is_empty() || !row.is_empty() {
                    row.push(std::mem::take(&mut cell));
                    rows.push(std::mem::take(&mut row));
                }
                any = false;
            }
            c if c == delim => {
                row.push(std::mem::take(&mut cell));
                any = true;
            }
            _ => {
                cell.push(c);
                any = true;
            }
        }
    }
    if quoted {
        return Err("InvalidBatch : Unterminated quoted field".into());
    }
    if any || !cell.is_empty() || !row.is_empty() {
        row.push(cell);
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_parses_quotes_delimiters_and_line_endings() {
        let rows = parse_csv(
            "a,b,c\r\n\"x, y\",\"say \"\"hi\"\"\",\n\"multi\nline\",2,3\n\n",
            ',',
        )
        .unwrap();
        assert_eq!(
            rows,
            vec![
                vec!["a", "b", "c"],
                vec!["x, y", "say \"hi\"", ""],
                vec!["multi\nline", "2", "3"],
            ]
        );
        assert_eq!(
            parse_csv("a|b\n1|2", '|').unwrap(),
            vec![vec!["a", "b"], vec!["1", "2"]]
        );
        assert!(parse_csv("\"open", ',').is_err());
        assert!(parse_csv("a\"b", ',').is_err());
    }

    #[test]
    fn locators_are_base64_offsets() {
        assert_eq!(locator(10000), "MTAwMDA");
        assert_eq!(
            base64_decode(&locator(2000)).map(|b| String::from_utf8(b).unwrap()),
            Some("2000".into())
        );
    }
}
