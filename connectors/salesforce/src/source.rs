//! Reads and lookups.
//!
//! - **Windows** are read with one SOQL query over the date field,
//!   `SELECT … WHERE date >= start AND date < end ORDER BY date, Id`,
//!   through `GET /services/data/vXX.X/query` with `Sforce-Query-Options:
//!   batchSize=N` (200..2000, "Query Options Header",
//!   https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/headers_queryoptions.htm),
//!   following `nextRecordsUrl` until `done` ("Execute a SOQL Query",
//!   https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_query.htm).
//!   The query locator is a cursor over the result Salesforce fixed when
//!   the query ran, so every record is read exactly once, whatever is
//!   written meanwhile.
//! - **Large windows**: `SELECT COUNT()` first; above
//!   `bulk_read_threshold` records the window is read with a Bulk API 2.0
//!   query job instead: created (`POST /jobs/query`), polled with backoff
//!   until `JobComplete`, then its CSV results streamed page by page
//!   (`GET /jobs/query/{id}/results?maxRecords=N&locator=L`, the next
//!   locator in `Sforce-Locator`, `null` after the last page, each page's
//!   size in `Sforce-NumberOfRecords`), one page in memory at a time
//!   ("Get Results for a Query Job",
//!   https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/query_get_job_results.htm).
//!   Bulk queries take no ORDER BY (it disables PK chunking; "Understanding
//!   Bulk API 2.0 Query",
//!   https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/queries.htm).
//! - **Lookups** by external ID use `IN (…)` queries split by
//!   [`soql::in_chunks`] under Salesforce's query-length limits, each key
//!   quoted and escaped by [`soql::literal`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_core::stream::BoxStream;
use futures_util::{stream, StreamExt, TryStreamExt};
use recon_core::http::{HttpError, Method};
use recon_core::{ConnectorError, Currency, Location, Page, Record, Source, Window};
use serde_json::{json, Value as Json};

use crate::connector::{http_error, Prepared, SalesforceObjects};
use crate::convert::{json_text, value_from_text};
use crate::soql;

/// Records per page of Bulk API 2.0 query results.
pub const BULK_RESULTS_PAGE: u32 = 25_000;
/// Lookup queries in flight at once.
const LOOKUPS_IN_FLIGHT: usize = 4;
/// Longest wait between polls of a bulk job.
const MAX_POLL: Duration = Duration::from_secs(10);

/// Where a paged query goes next.
enum Next {
    Query(String),
    More(String),
    Done,
}

impl SalesforceObjects {
    /// One record from field texts (`get(name)`, names as the org spells
    /// them); `None` for a record without a key (not one recon manages).
    pub(crate) fn record_from(
        &self,
        p: &Prepared,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Record>, ConnectorError> {
        let Some(key) = get(&p.key.name)
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
        else {
            return Ok(None);
        };
        let id = get("Id").unwrap_or_else(|| "?".into());
        let bad = |field: &str, m: String| ConnectorError::Malformed {
            location: Location(format!("Salesforce {} {id} ({key})", self.cfg.object)),
            message: format!("field `{field}`: {m}"),
        };
        let currency = match &p.currency {
            Some(c) => match get(&c.name).filter(|t| !t.trim().is_empty()) {
                Some(code) => {
                    Some(Currency::parse(&code).map_err(|e| bad(&c.name, e.to_string()))?)
                }
                None => self.cfg.currency,
            },
            None => self.cfg.currency,
        };
        let mut values = Vec::with_capacity(p.fields.len());
        for (f, info) in self.schema.fields.iter().zip(&p.fields) {
            let text = get(&info.name);
            values.push(
                value_from_text(text.as_deref(), f.kind, info, currency)
                    .map_err(|m| bad(&info.name, m))?,
            );
        }
        Ok(Some(Record { key, values }))
    }

    fn record_from_json(&self, p: &Prepared, o: &Json) -> Result<Option<Record>, ConnectorError> {
        self.record_from(p, |name| json_text(o.get(name)))
    }

    /// One page of `/query` (first) or of its `nextRecordsUrl`.
    async fn query_page(&self, next: &Next) -> Result<Json, HttpError> {
        let options = format!("batchSize={}", self.cfg.page_size);
        match next {
            Next::Query(q) => {
                self.json(Method::GET, &self.data_url("query"), |r| {
                    r.query(&[("q", q.as_str())])
                        .header("Sforce-Query-Options", &options)
                })
                .await
            }
            Next::More(url) => {
                self.json(Method::GET, &self.absolute(url), |r| {
                    r.header("Sforce-Query-Options", &options)
                })
                .await
            }
            Next::Done => Ok(Json::Null),
        }
    }

    /// Every page of a SOQL query, following `nextRecordsUrl`.
    pub(crate) fn paged(&self, soql: String) -> BoxStream<'_, Result<Page, ConnectorError>> {
        Box::pin(stream::try_unfold(
            Next::Query(soql),
            move |next| async move {
                if let Next::Done = next {
                    return Ok(None);
                }
                let v = self.query_page(&next).await.map_err(http_error)?;
                let p = self.prepared().await?;
                let mut records = Vec::new();
                for o in v["records"].as_array().into_iter().flatten() {
                    if let Some(r) = self.record_from_json(p, o)? {
                        records.push(r);
                    }
                }
                let next = match (v["done"].as_bool(), v["nextRecordsUrl"].as_str()) {
                    (Some(false), Some(url)) => Next::More(url.to_string()),
                    _ => Next::Done,
                };
                Ok(Some((Page::new(records), next)))
            },
        ))
    }

    /// `SELECT COUNT() … WHERE cond`: the records a query would return.
    pub(crate) async fn count(&self, condition: &str) -> Result<u64, ConnectorError> {
        let q = soql::count(&self.cfg.object, condition);
        let v = self.query_page(&Next::Query(q)).await.map_err(http_error)?;
        v["totalSize"].as_u64().ok_or_else(|| {
            ConnectorError::Unreachable("Salesforce COUNT() answered without totalSize".into())
        })
    }

    /// Polls a bulk job (`jobs/query` or `jobs/ingest`) with backoff until
    /// `JobComplete`; returns its last status. A job that failed or was
    /// aborted is an error; one that outlasts `bulk_timeout` is aborted.
    pub(crate) async fn await_job(&self, kind: &str, id: &str) -> Result<Json, ConnectorError> {
        let url = self.data_url(&format!("jobs/{kind}/{id}"));
        let started = Instant::now();
        let mut wait = self.cfg.bulk_poll;
        loop {
            let v = self
                .json(Method::GET, &url, |r| r)
                .await
                .map_err(http_error)?;
            match v["state"].as_str().unwrap_or("") {
                "JobComplete" => return Ok(v),
                "Failed" | "Aborted" => {
                    if kind == "ingest" {
                        return Ok(v);
                    }
                    return Err(ConnectorError::Unreachable(format!(
                        "Salesforce Bulk API 2.0 {kind} job {id} ended {}: {}",
                        v["state"].as_str().unwrap_or("?"),
                        v["errorMessage"].as_str().unwrap_or("no error message")
                    )));
                }
                _ => {}
            }
            if started.elapsed() + wait > self.cfg.bulk_timeout {
                let _ = self
                    .json(Method::PATCH, &url, |r| {
                        r.json(&json!({"state": "Aborted"}))
                    })
                    .await;
                return Err(ConnectorError::ConnectionLost(format!(
                    "Salesforce Bulk API 2.0 {kind} job {id} was not complete after {}s (bulk_timeout); recon aborted it",
                    self.cfg.bulk_timeout.as_secs()
                )));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_POLL);
        }
    }

    /// Runs `soql` as a Bulk API 2.0 query job and streams its results.
    fn bulk_read(&self, soql: String) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let start = async move {
            let v = self
                .json(Method::POST, &self.data_url("jobs/query"), |r| {
                    r.json(&json!({"operation": "query", "query": soql}))
                })
                .await
                .map_err(http_error)?;
            let id = v["id"]
                .as_str()
                .ok_or_else(|| {
                    ConnectorError::Unreachable(
                        "Salesforce created a query job without an id".into(),
                    )
                })?
                .to_string();
            tracing::info!(
                message = "Reading the window with a Bulk API 2.0 query job.",
                object = self.cfg.object.as_str(),
                job = id.as_str()
            );
            self.await_job("query", &id).await?;
            Ok::<_, ConnectorError>(id)
        };
        Box::pin(
            stream::once(start)
                .map(move |id| match id {
                    Ok(id) => self.bulk_pages(id),
                    Err(e) => stream::once(async move { Err(e) }).boxed(),
                })
                .flatten(),
        )
    }

    /// The result pages of a completed query job.
    fn bulk_pages(&self, id: String) -> BoxStream<'_, Result<Page, ConnectorError>> {
        Box::pin(stream::try_unfold(Some(None::<String>), move |locator| {
            let id = id.clone();
            async move {
                let Some(locator) = locator else {
                    return Ok(None);
                };
                let url = self.data_url(&format!("jobs/query/{id}/results"));
                let mut query = vec![("maxRecords", BULK_RESULTS_PAGE.to_string())];
                if let Some(l) = &locator {
                    query.push(("locator", l.clone()));
                }
                let (csv, meta) = self
                    .text(Method::GET, &url, |r| {
                        r.query(&query).header("Accept", "text/csv")
                    })
                    .await
                    .map_err(http_error)?;
                let header = |n: &str| {
                    meta.headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(|v| v.trim().to_string())
                };
                let p = self.prepared().await?;
                let records = self.records_from_csv(p, &csv)?;
                if let Some(n) =
                    header("Sforce-NumberOfRecords").and_then(|n| n.parse::<usize>().ok())
                {
                    let rows = csv_rows(&csv)?;
                    if rows != n {
                        return Err(ConnectorError::Malformed {
                                location: Location(format!("Salesforce query job {id}")),
                                message: format!(
                                    "a results page held {rows} records, but Sforce-NumberOfRecords said {n}"
                                ),
                            });
                    }
                }
                let next = header("Sforce-Locator")
                    .filter(|l| !l.is_empty() && l != "null")
                    .map(Some);
                Ok(Some((Page::new(records), next)))
            }
        }))
    }

    /// Records of a CSV results page (header row first).
    pub(crate) fn records_from_csv(
        &self,
        p: &Prepared,
        csv: &str,
    ) -> Result<Vec<Record>, ConnectorError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(csv.as_bytes());
        let bad = |e: csv::Error| ConnectorError::Malformed {
            location: Location(format!("Salesforce {} bulk results", self.cfg.object)),
            message: e.to_string(),
        };
        let columns: HashMap<String, usize> = reader
            .headers()
            .map_err(bad)?
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_ascii_lowercase(), i))
            .collect();
        let mut out = Vec::new();
        for row in reader.records() {
            let row = row.map_err(bad)?;
            let get = |name: &str| {
                columns
                    .get(&name.to_ascii_lowercase())
                    .and_then(|&i| row.get(i))
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
            };
            if let Some(r) = self.record_from(p, get)? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// Data rows of a CSV text (quoted newlines counted right).
fn csv_rows(csv: &str) -> Result<usize, ConnectorError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(csv.as_bytes());
    let mut n = 0;
    for r in reader.records() {
        r.map_err(|e| ConnectorError::Malformed {
            location: Location("Salesforce bulk results".into()),
            message: e.to_string(),
        })?;
        n += 1;
    }
    Ok(n)
}

#[async_trait::async_trait]
impl Source for SalesforceObjects {
    fn describe(&self) -> String {
        format!(
            "Salesforce {} (by {})",
            self.cfg.object, self.cfg.external_id_field
        )
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let plan = async move {
            let p = self.prepared().await?;
            let cond =
                soql::window_condition(&p.date.name, window.start, window.end, p.date.is_date());
            let total = self.count(&cond).await?;
            let bulk = total > self.cfg.bulk_read_threshold;
            tracing::info!(
                message = "Reading a Salesforce window.",
                object = self.cfg.object.as_str(),
                records = total,
                bulk
            );
            let order = (!bulk).then(|| format!("{} ASC, Id ASC", p.date.name));
            let q = soql::select(&p.select, &self.cfg.object, &cond, order.as_deref());
            Ok::<_, ConnectorError>((q, bulk))
        };
        Box::pin(
            stream::once(plan)
                .map(move |planned| match planned {
                    Ok((q, true)) => self.bulk_read(q),
                    Ok((q, false)) => self.paged(q),
                    Err(e) => stream::once(async move { Err(e) }).boxed(),
                })
                .flatten(),
        )
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        let p = self.prepared().await?;
        let mut unique: Vec<String> = keys.to_vec();
        unique.sort();
        unique.dedup();
        let (queries, too_long) = soql::in_chunks(
            &p.select,
            &self.cfg.object,
            &p.key.name,
            &unique,
            &self.data_url("query"),
        );
        if !too_long.is_empty() {
            tracing::warn!(
                message = "Keys too long for a SOQL string literal were not looked up.",
                keys = too_long.len()
            );
        }
        // A few queries at once; each is paged to its end.
        let runs: Vec<_> = queries
            .into_iter()
            .map(|q| async move {
                let mut records = Vec::new();
                let mut pages = self.paged(q);
                while let Some(page) = pages.next().await {
                    records.extend(page?.records);
                }
                Ok::<_, ConnectorError>(records)
            })
            .collect();
        let found: Vec<Vec<Record>> = stream::iter(runs)
            .buffer_unordered(LOOKUPS_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// `GET /services/data/vXX.X/limits` (after the token request, for
    /// client credentials): it proves the credentials are accepted, and
    /// reports the org's `DailyApiRequests` {Max, Remaining} ("List
    /// Organization Limits",
    /// https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_limits.htm).
    async fn probe(&self) -> Result<recon_core::Probe, ConnectorError> {
        let v = match self
            .json(Method::GET, &self.data_url("limits"), |r| r)
            .await
        {
            Ok(v) => v,
            // A 404 here is an API version the org does not serve.
            Err(e) => return Err(self.not_found_or(e).await),
        };
        let d = &v["DailyApiRequests"];
        let usage = match (d["Max"].as_u64(), d["Remaining"].as_u64()) {
            (Some(max), Some(rem)) => Some(crate::limits::ApiUsage {
                used: max.saturating_sub(rem),
                max,
            }),
            _ => self.usage.latest(),
        };
        let mut probe =
            recon_core::Probe::reached(format!("{} at {}", self.describe(), self.cfg.instance_url))
                .authenticated()
                .limit(format!("{} req/s", self.cfg.requests_per_second));
        if let Some(u) = usage {
            let share = (u.remaining() as f64 * self.cfg.daily_share).floor() as u64;
            probe = probe.limit(format!(
                "{} of {} daily API requests left; a backfill may use {share} (daily_share = {})",
                u.remaining(),
                u.max,
                self.cfg.daily_share
            ));
        }
        Ok(probe)
    }
}
