//! Reading a declared API: the list request paged by its declared kind,
//! records mapped by JSONPath, the window applied (by the API, or here when
//! it cannot filter), lookups by ID or in batches, and `recon check`'s
//! probe.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures_core::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use recon_core::http::{HttpError, Method, ResponseMeta};
use recon_core::{
    BuildContext, ConnectorError, Page, Probe, Record, Schema, Source, Unplaced, Value, Window,
};
use serde_json::Value as Json;

use crate::client::{join, link_next, resolve, Api};
use crate::convert::kind_of;
use crate::path::{snippet, Path};
use crate::settings::{
    HttpSettings, LookupKind, Paging, PagingIn, RequestSpec, Spec, WindowFilter,
};
use crate::template::{path_segment, Val};

/// A declared API as a side that is read and looked up.
pub struct HttpSource {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub spec: Spec,
    pub api: Api,
    pub schema: Schema,
}

/// A rendered request.
pub(crate) struct Request {
    pub method: Method,
    pub url: String,
    pub query: Vec<(String, String)>,
    pub body: Option<Json>,
}

/// Lookups run this many requests at once (one by ID).
const LOOKUP_CONCURRENCY: usize = 4;
/// A read gives up after this many pages of one window: a paging
/// declaration that never ends would otherwise read forever.
const MAX_PAGES: u64 = 1_000_000;

impl HttpSource {
    /// Builds the source (no call is made).
    pub fn new(
        settings: &HttpSettings,
        cx: BuildContext<'_>,
    ) -> Result<HttpSource, ConnectorError> {
        let spec = settings.spec(cx)?;
        let api = Api::new(settings, spec.rate, cx.tokens.cloned())?;
        Ok(HttpSource {
            inner: Arc::new(Inner {
                spec,
                api,
                schema: cx.schema.clone(),
            }),
        })
    }
}

pub(crate) fn http_error(e: HttpError) -> ConnectorError {
    match e {
        HttpError::Status {
            body_code: Some(ref code),
            ..
        } if code == "invalid_grant" => ConnectorError::Config(format!(
            "{e}; the token endpoint refused the refresh token (expired, revoked, or replaced by a newer one that was lost): \
             authorize the app again, put the new refresh token in the variable auth.refresh_token names, and run again \
             (recon then keeps the newest one in the state store)"
        )),
        HttpError::Unauthorized { .. } => ConnectorError::Config(format!(
            "{e}; check the credentials in auth (and the environment variables they name)"
        )),
        HttpError::Client { .. } => ConnectorError::Config(e.to_string()),
        HttpError::Status { .. } => ConnectorError::Config(e.to_string()),
        _ => ConnectorError::Unreachable(e.to_string()),
    }
}

impl Inner {
    fn noun(&self) -> String {
        format!("{} record", self.spec.name)
    }

    /// Renders `r` with `lookup`; errors name the template.
    pub fn render(
        &self,
        r: &RequestSpec,
        lookup: &dyn Fn(&str) -> Val,
    ) -> Result<Request, ConnectorError> {
        let fail =
            |what: &str, e: String| ConnectorError::Config(format!("{} ({what}): {e}", r.label));
        let path = r
            .path
            .render(lookup, path_segment)
            .map_err(|e| fail("path", e))?;
        let mut query = Vec::with_capacity(r.query.len());
        for (k, t) in &r.query {
            query.push((
                k.clone(),
                t.render(lookup, |s| s.to_string())
                    .map_err(|e| fail(k, e))?,
            ));
        }
        let body = r
            .body
            .as_ref()
            .map(|b| b.render(lookup))
            .transpose()
            .map_err(|e| fail("body", e))?;
        Ok(Request {
            method: r.method.clone(),
            url: join(&self.spec.base_url, &path),
            query,
            body,
        })
    }

    /// [`Inner::send`] decided on the status alone (writes whose answer is
    /// not read).
    pub async fn send_status(
        &self,
        req: &Request,
        headers: &[(String, String)],
    ) -> Result<ResponseMeta, HttpError> {
        self.api
            .call_status(
                req.method.clone(),
                &req.url,
                &req.query,
                req.body.as_ref(),
                headers,
            )
            .await
    }

    pub async fn send(
        &self,
        req: &Request,
        headers: &[(String, String)],
    ) -> Result<(Json, ResponseMeta), HttpError> {
        self.api
            .call(
                req.method.clone(),
                &req.url,
                &req.query,
                req.body.as_ref(),
                headers,
            )
            .await
    }

    /// The records `records` selects in `answer`; an answer whose list is
    /// missing altogether is a config error naming the path.
    fn records<'a>(
        &self,
        records: &Path,
        answer: &'a Json,
        endpoint: &str,
    ) -> Result<Vec<&'a Json>, ConnectorError> {
        let found = records.all(answer);
        if let Some(odd) = found.iter().find(|n| !n.is_object()) {
            return Err(records.failed(
                &format!(
                    "selected {} where each record (a JSON object) should be",
                    kind_of(odd)
                ),
                endpoint,
                answer,
            ));
        }
        if !found.is_empty() {
            return Ok(found);
        }
        match records.container().map(|c| (c.first(answer).cloned(), c)) {
            // An empty list, or `null` where the list would be.
            Some((Some(Json::Array(_) | Json::Null), _)) => Ok(found),
            Some((Some(Json::Object(ref o)), _)) if o.is_empty() => Ok(found),
            Some((Some(other), _)) => Err(records.failed(
                &format!(
                    "found {} where a list of records should be",
                    kind_of(&other)
                ),
                endpoint,
                answer,
            )),
            _ => Err(records.failed("matched nothing", endpoint, answer)),
        }
    }

    /// One page: its records mapped and placed, and the request of the next.
    async fn page(
        &self,
        window: Window,
        next: &Next,
        state: &mut PageState,
    ) -> Result<(Page, Option<Next>), ConnectorError> {
        let spec = &self.spec;
        let label = spec.list.label.clone();
        let window_val = |n: &str| match n {
            "start" => Val::Time(window.start),
            "end" => Val::Time(window.end),
            _ => Val::Null,
        };
        let mut req = self.render(&spec.list, &window_val)?;
        let params = match next {
            Next::First => first_params(&spec.paging),
            Next::Params(extra) => extra.clone(),
            Next::Url(u) => {
                req.url = u.clone();
                req.query.clear();
                Vec::new()
            }
        };
        match (&spec.paging_in, &mut req.body) {
            (PagingIn::Body, Some(Json::Object(body))) => {
                let numeric = matches!(spec.paging, Paging::Offset { .. } | Paging::Page { .. });
                for (k, v) in params {
                    let value = match v.parse::<u64>() {
                        Ok(n) if numeric => Json::from(n),
                        _ => Json::String(v),
                    };
                    body.insert(k, value);
                }
            }
            _ => {
                req.query
                    .retain(|(k, _)| !params.iter().any(|(e, _)| e == k));
                req.query.extend(params);
            }
        }
        let (answer, meta) = self.send(&req, &[]).await.map_err(http_error)?;
        let nodes = self.records(&spec.records, &answer, &label)?;
        let mut page = Page::default();
        let tf = spec.mapping.time_field;
        for node in &nodes {
            let r = spec.mapping.to_record(node, &label, &self.noun())?;
            match tf.map(|i| &r.values[i]) {
                Some(Value::Timestamp(t)) => {
                    if window.contains(*t) {
                        page.records.push(r);
                    } else {
                        state.outside += 1;
                    }
                }
                Some(_) => page.unplaced.push(Unplaced::empty(
                    r.key.clone(),
                    &spec.mapping.fields[tf.unwrap_or(0)].text,
                )),
                None => page.records.push(r),
            }
        }
        state.pages += 1;
        if state.pages >= MAX_PAGES {
            return Err(ConnectorError::Config(format!(
                "list.paging: {label} gave {MAX_PAGES} pages for one window without an end; check the paging declaration"
            )));
        }
        let more = self.next(&answer, &meta, &req, &nodes, state)?;
        Ok((page, more))
    }

    /// The request of the next page, by the paging kind.
    fn next(
        &self,
        answer: &Json,
        meta: &ResponseMeta,
        req: &Request,
        nodes: &[&Json],
        state: &mut PageState,
    ) -> Result<Option<Next>, ConnectorError> {
        let label = &self.spec.list.label;
        let flag = |p: &Path| -> Result<bool, ConnectorError> {
            match p.first(answer) {
                Some(Json::Bool(b)) => Ok(*b),
                Some(other) => Err(p.failed(
                    &format!("found {} where true or false should be", kind_of(other)),
                    label,
                    answer,
                )),
                None => Err(p.failed("matched nothing", label, answer)),
            }
        };
        let count = |p: &Path| -> Result<u64, ConnectorError> {
            match p.first(answer) {
                Some(Json::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64().unwrap_or(0)),
                Some(other) => Err(p.failed(
                    &format!("found {} where a whole number should be", kind_of(other)),
                    label,
                    answer,
                )),
                None => Err(p.failed("matched nothing", label, answer)),
            }
        };
        let mut seen = |value: String, key: &str| -> Result<String, ConnectorError> {
            if state.cursors.insert(value.clone()) {
                Ok(value)
            } else {
                Err(ConnectorError::Config(format!(
                    "{key}: {label} gave the same next page ({}) twice; the paging declaration does not move forward",
                    recon_core::scrub(&value)
                )))
            }
        };
        Ok(match &self.spec.paging {
            Paging::None => None,
            Paging::Cursor {
                param,
                has_more,
                last_id,
            } => {
                if !flag(has_more)? {
                    return Ok(None);
                }
                let Some(last) = nodes.last() else {
                    return Ok(None);
                };
                let id = match last_id.first(last) {
                    Some(Json::String(s)) if !s.is_empty() => s.clone(),
                    Some(Json::Number(n)) => n.to_string(),
                    _ => {
                        return Err(last_id.failed("matched no ID in the last record", label, last))
                    }
                };
                Some(Next::Params(vec![(
                    param.clone(),
                    seen(id, "list.paging.last_id")?,
                )]))
            }
            Paging::NextCursor { param, cursor } => match cursor.first(answer) {
                None | Some(Json::Null) => None,
                Some(Json::String(s)) if s.is_empty() => None,
                Some(Json::String(s)) => Some(Next::Params(vec![(
                    param.clone(),
                    seen(s.clone(), "list.paging.cursor")?,
                )])),
                Some(Json::Number(n)) => Some(Next::Params(vec![(
                    param.clone(),
                    seen(n.to_string(), "list.paging.cursor")?,
                )])),
                Some(other) => {
                    return Err(cursor.failed(
                        &format!("found {} where a cursor should be", kind_of(other)),
                        label,
                        answer,
                    ))
                }
            },
            Paging::NextUrl { next } => match next.first(answer) {
                None | Some(Json::Null) => None,
                Some(Json::String(s)) if s.is_empty() => None,
                Some(Json::String(s)) => {
                    let url = resolve(&req.url, s)
                        .ok_or_else(|| next.failed("found no URL", label, answer))?;
                    Some(Next::Url(seen(url, "list.paging.next")?))
                }
                Some(other) => {
                    return Err(next.failed(
                        &format!("found {} where a URL should be", kind_of(other)),
                        label,
                        answer,
                    ))
                }
            },
            Paging::LinkHeader => {
                let header = meta
                    .headers
                    .get_all("link")
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect::<Vec<_>>()
                    .join(",");
                match link_next(&header) {
                    None => None,
                    Some(target) => {
                        let url = resolve(&req.url, &target).ok_or_else(|| {
                            ConnectorError::Config(format!(
                                "list.paging: the Link header of {label} names a next page that is not a URL"
                            ))
                        })?;
                        Some(Next::Url(seen(url, "list.paging")?))
                    }
                }
            }
            Paging::Offset {
                offset_param,
                limit_param,
                limit,
                total,
                more,
            } => {
                state.offset += nodes.len() as u64;
                if nodes.is_empty() {
                    return Ok(None);
                }
                let go_on = match (total, more) {
                    (Some(t), _) => state.offset < count(t)?,
                    (None, Some(m)) => flag(m)?,
                    (None, None) => nodes.len() as u64 >= *limit,
                };
                go_on.then(|| {
                    Next::Params(vec![
                        (offset_param.clone(), state.offset.to_string()),
                        (limit_param.clone(), limit.to_string()),
                    ])
                })
            }
            Paging::Page {
                page_param,
                first,
                size_param,
                size,
                total_pages,
                more,
            } => {
                let current = state.page.unwrap_or(*first);
                if nodes.is_empty() {
                    return Ok(None);
                }
                let go_on = match (total_pages, more) {
                    (Some(t), _) => current + 1 - first < count(t)?,
                    (None, Some(m)) => flag(m)?,
                    (None, None) => size.is_none_or(|s| nodes.len() as u64 >= s),
                };
                state.page = Some(current + 1);
                go_on.then(|| {
                    let mut p = vec![(page_param.clone(), (current + 1).to_string())];
                    if let (Some(sp), Some(s)) = (size_param, size) {
                        p.push((sp.clone(), s.to_string()));
                    }
                    Next::Params(p)
                })
            }
        })
    }

    /// What the run's report says about this side's read.
    pub fn read_notes(&self) -> Vec<String> {
        let spec = &self.spec;
        let mut notes = Vec::new();
        if spec.window == WindowFilter::Client {
            notes.push(format!(
                "{} cannot filter by the window (list.window = \"client\"): every record was listed and those outside the window dropped by recon",
                spec.name
            ));
        }
        if spec.lookup.is_none() {
            notes.push(format!(
                "{} has no lookup declared: edge confirmation is off for this side, so its discrepancies at the window's edge are reported unconfirmed; declare [lookup] to confirm them",
                spec.name
            ));
        }
        notes
    }

    /// The looked-up records of `keys` with their JSON, by the declared
    /// lookup; `None` when none is declared.
    pub async fn lookup_json(
        &self,
        keys: &[String],
    ) -> Result<Option<Vec<(Record, Json)>>, ConnectorError> {
        let Some(lookup) = &self.spec.lookup else {
            return Ok(None);
        };
        let label = lookup.request.label.clone();
        let wanted: HashSet<&str> = keys.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        match &lookup.kind {
            LookupKind::ById { record } => {
                let found: Vec<Option<(Record, Json)>> = futures_util::stream::iter(keys.to_vec())
                    .map(|key: String| {
                        let label = label.clone();
                        async move {
                            let req = self.render(&lookup.request, &|n: &str| match n {
                                "id" => Val::Text(key.to_string()),
                                _ => Val::Null,
                            })?;
                            match self.send(&req, &[]).await {
                                Ok((answer, _)) => {
                                    let Some(node) = record.first(&answer) else {
                                        return Err(record.failed(
                                            "matched nothing",
                                            &label,
                                            &answer,
                                        ));
                                    };
                                    let r =
                                        self.spec.mapping.to_record(node, &label, &self.noun())?;
                                    Ok(Some((r, node.clone())))
                                }
                                Err(HttpError::Status { status: 404, .. }) => Ok(None),
                                Err(e) => Err(http_error(e)),
                            }
                        }
                    })
                    .buffered(LOOKUP_CONCURRENCY)
                    .try_collect()
                    .await?;
                out.extend(found.into_iter().flatten());
            }
            LookupKind::Batch {
                records,
                item,
                max_ids,
            } => {
                for chunk in keys.chunks(*max_ids) {
                    let ids = Json::Array(chunk.iter().map(|k| Json::String(k.clone())).collect());
                    let items = match item {
                        Some(t) => Json::Array(
                            chunk
                                .iter()
                                .map(|k| {
                                    t.render(&|n: &str| match n {
                                        "id" => Val::Text(k.clone()),
                                        _ => Val::Null,
                                    })
                                })
                                .collect::<Result<_, _>>()
                                .map_err(|e| ConnectorError::Config(format!("lookup.item: {e}")))?,
                        ),
                        None => Json::Null,
                    };
                    let req = self.render(&lookup.request, &|n: &str| match n {
                        "ids" => Val::Json(ids.clone()),
                        "items" => Val::Json(items.clone()),
                        _ => Val::Null,
                    })?;
                    let (answer, _) = match self.send(&req, &[]).await {
                        Ok(a) => a,
                        // Some APIs answer a batch of unknown IDs with 404.
                        Err(HttpError::Status { status: 404, .. }) => continue,
                        Err(e) => return Err(http_error(e)),
                    };
                    for node in self.records(records, &answer, &label)? {
                        let r = self.spec.mapping.to_record(node, &label, &self.noun())?;
                        if wanted.contains(r.key.as_str()) {
                            out.push((r, node.clone()));
                        }
                    }
                }
            }
        }
        Ok(Some(out))
    }
}

/// What the next request of a read is.
#[derive(Clone, Debug)]
enum Next {
    /// The list request as declared (with the paging's first parameters).
    First,
    /// The list request with these parameters replaced or added.
    Params(Vec<(String, String)>),
    /// This URL, as the API gave it.
    Url(String),
}

/// What a read keeps between pages.
#[derive(Default)]
struct PageState {
    pages: u64,
    offset: u64,
    page: Option<u64>,
    cursors: HashSet<String>,
    outside: u64,
}

/// The parameters of the first page (offset 0 and the limit; the first
/// page number and its size).
fn first_params(paging: &Paging) -> Vec<(String, String)> {
    match paging {
        Paging::Offset {
            offset_param,
            limit_param,
            limit,
            ..
        } => vec![
            (offset_param.clone(), "0".into()),
            (limit_param.clone(), limit.to_string()),
        ],
        Paging::Page {
            page_param,
            first,
            size_param,
            size,
            ..
        } => {
            let mut p = vec![(page_param.clone(), first.to_string())];
            if let (Some(sp), Some(s)) = (size_param, size) {
                p.push((sp.clone(), s.to_string()));
            }
            p
        }
        _ => Vec::new(),
    }
}

impl HttpSource {
    fn read_inner(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let inner = self.inner.clone();
        if inner.spec.window == WindowFilter::Client {
            tracing::warn!(
                api = inner.spec.name.as_str(),
                "{}: the API cannot filter by the window (list.window = \"client\"): every record is listed and those outside the window are dropped here",
                inner.spec.list.label
            );
        }
        let state = Some((Next::First, PageState::default()));
        futures_util::stream::unfold(state, move |state| {
            let inner = inner.clone();
            async move {
                let (next, mut st) = state?;
                match inner.page(window, &next, &mut st).await {
                    Ok((page, Some(n))) => Some((Ok(page), Some((n, st)))),
                    Ok((page, None)) => {
                        if st.outside > 0 {
                            tracing::info!(
                                api = inner.spec.name.as_str(),
                                outside = st.outside,
                                "Records outside the window were listed and dropped."
                            );
                        }
                        Some((Ok(page), None))
                    }
                    Err(e) => Some((Err(e), None)),
                }
            }
        })
        .boxed()
    }
}

#[async_trait::async_trait]
impl Source for HttpSource {
    fn describe(&self) -> String {
        format!("{} ({})", self.inner.spec.name, self.inner.spec.list.label)
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        self.read_inner(window)
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        match self.inner.lookup_json(keys).await? {
            Some(found) => Ok(found.into_iter().map(|(r, _)| r).collect()),
            None => {
                tracing::warn!(
                    api = self.inner.spec.name.as_str(),
                    keys = keys.len(),
                    "{}: no lookup is declared, so edge confirmation is off for this side: {} discrepancies at the window's edge are reported unconfirmed; declare [lookup] to confirm them",
                    self.inner.spec.name,
                    keys.len()
                );
                Ok(Vec::new())
            }
        }
    }

    fn read_notes(&self) -> Vec<String> {
        self.inner.read_notes()
    }

    async fn raw_json(
        &self,
        keys: &[String],
    ) -> Result<Option<Vec<(String, String)>>, ConnectorError> {
        // The records as the API's lookup returns them, for webhook replays.
        Ok(self.inner.lookup_json(keys).await?.map(|found| {
            found
                .into_iter()
                .map(|(r, json)| (r.key, json.to_string()))
                .collect()
        }))
    }

    fn reads_whole(&self) -> bool {
        // Without a time field every record is listed, whatever the window.
        self.inner.spec.mapping.time_field.is_none()
    }

    async fn probe(&self) -> Result<Probe, ConnectorError> {
        let inner = &self.inner;
        let spec = &inner.spec;
        let now = Timestamp::now();
        let window = Window {
            start: now - jiff::SignedDuration::from_hours(24 * 7),
            end: now,
        };
        let (page, _) = inner
            .page(window, &Next::First, &mut PageState::default())
            .await?;
        let mut probe = Probe::reached(format!(
            "{} at {}",
            self.describe(),
            recon_core::redact_url(&spec.base_url)
        ));
        probe.authenticated = true;
        let (n, per) = spec.rate;
        probe = probe.limit(format!(
            "{n} requests per {} (rate)",
            recon_core::http::human_duration(per)
        ));
        if spec.window == WindowFilter::Client {
            probe = probe.limit(
                "the window is filtered client-side (list.window = \"client\"): every record is listed on each run".to_string(),
            );
        }
        match page.records.first() {
            Some(first) => {
                let shown: Vec<String> = spec
                    .mapping
                    .names
                    .iter()
                    .zip(&first.values)
                    .map(|(n, v)| format!("{n}={v}"))
                    .collect();
                probe = probe.limit(format!(
                    "first record of the last 7 days: id={} {}",
                    first.key,
                    shown.join(" ")
                ));
                match inner.lookup_json(std::slice::from_ref(&first.key)).await? {
                    None => {
                        probe = probe.limit("no lookup declared: edge confirmation is off for this side".to_string())
                    }
                    Some(found) if found.iter().any(|(r, _)| r.key == first.key) => {
                        probe = probe.limit(format!("lookup found {}", first.key))
                    }
                    Some(_) => {
                        return Err(ConnectorError::Config(format!(
                            "lookup: {} did not find {}, which the list returned; check lookup.path and lookup.record(s)",
                            spec.lookup.as_ref().map_or(String::new(), |l| l.request.label.clone()),
                            first.key
                        )))
                    }
                }
            }
            None => {
                probe = probe.limit("no record in the last 7 days (lookup not tried)".to_string());
                if spec.lookup.is_none() {
                    probe = probe.limit(
                        "no lookup declared: edge confirmation is off for this side".to_string(),
                    );
                }
            }
        }
        Ok(probe)
    }
}

/// The records of `found` by key.
pub(crate) fn by_key(found: Vec<(Record, Json)>) -> HashMap<String, (Record, Json)> {
    found
        .into_iter()
        .map(|(r, j)| (r.key.clone(), (r, j)))
        .collect()
}

/// The first 200 scrubbed bytes of an answer, for messages.
pub(crate) fn shown(answer: &Json) -> String {
    snippet(answer)
}
