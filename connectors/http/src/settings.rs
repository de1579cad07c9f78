//! `type = "http"`: the job settings of a declarative REST connector, their
//! defaults and validation, and the build into a [`Spec`] the source and
//! target run on. Everything that can be checked without a call is checked
//! here, when the job is loaded: templates, JSONPaths, the paging kind,
//! the lookup's kind, the write's uniqueness declaration.

use std::collections::BTreeMap;
use std::time::Duration;

use recon_core::http::Method;
use recon_core::parse::{positive_duration, Unit};
use recon_core::{
    AmountFormat, BuildContext, ConnectorConfig, ConnectorError, Expand, FieldKind, Secret, Source,
    Target, TargetRole,
};
use serde::Deserialize;
use serde_json::Value as Json;

use crate::convert::Mapping;
use crate::path::Path;
use crate::template::{JsonTemplate, Names, Template};
use crate::{HttpSource, HttpTarget};

/// The settings of a `type = "http"` endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// The API's name in messages and logs (`Acme billing`; default `HTTP API`).
    #[serde(default = "default_name")]
    pub name: String,
    /// Scheme, host and optional path prefix every request path is appended
    /// to (`https://api.example.com/v2`); takes `${VAR}`.
    pub base_url: String,
    /// How requests authenticate (default: not at all).
    pub auth: Option<AuthSettings>,
    /// Headers sent with every request (`Accept`, an API version); values
    /// take `${VAR}`, and those that came from the environment are treated
    /// as secrets. `Debug` shows their names only.
    #[serde(default)]
    pub headers: Headers,
    /// The API's documented limit, `"N/s"`, `"N/m"`, `"N/h"` or per a
    /// duration (`"100/10s"`); default `"10/s"`.
    #[serde(default = "default_rate")]
    pub rate: String,
    /// Rate-limit headers the API sends to pace by: `"x-ratelimit"`
    /// (`X-RateLimit-Remaining` and `X-RateLimit-Reset`) or `"ietf"`
    /// (`RateLimit-Remaining`/`RateLimit-Reset`, or one `RateLimit` header,
    /// draft-ietf-httpapi-ratelimit-headers); default none.
    pub rate_limit_headers: Option<RateLimitHeaders>,
    /// The response header that carries the API's request ID, named in
    /// every error (default `X-Request-Id`).
    #[serde(default = "default_request_id_header")]
    pub request_id_header: String,
    /// Statuses retried besides the shared policy's 429, 500, 502, 503 and
    /// 504 (e.g. `[408, 423]`), as "slow down" answers; default none.
    #[serde(default)]
    pub retry_statuses: Vec<u16>,
    /// How long 429s are retried while no request succeeds (default `15m`).
    pub rate_limit_patience: Option<String>,
    /// Per-request timeout (default `30s`).
    pub timeout: Option<String>,
    /// JSONPath of the external ID in one record (default `$.id`).
    #[serde(default = "default_id")]
    pub id: String,
    /// Canonical field → JSONPath in one record (default `$.NAME`).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// JSONPath of the currency of money fields in one record (default:
    /// the path of the job's currency field, else `$.currency`).
    pub currency: Option<String>,
    /// Amounts in `minor` units (`2999`, the default) or `major` (`29.99`).
    #[serde(default)]
    pub amount_format: AmountFormat,
    /// What a bare number in a timestamp field counts: `seconds` (default)
    /// or `milliseconds`. Text is read as RFC 3339 or a date.
    #[serde(default)]
    pub timestamp_unit: TimestampUnit,
    /// Whether a date and time without an offset (`2026-11-28 10:00:00`,
    /// Pipedrive's `add_time`) is UTC, as the API documents; default
    /// `false`: such text is refused rather than guessed.
    #[serde(default)]
    pub naive_timestamps_are_utc: bool,
    /// The request that lists the records of a window.
    pub list: ListSettings,
    /// How records are fetched by external ID, to confirm discrepancies at
    /// the window's edge (and before writes). Without it, edge confirmation
    /// is off for this side.
    pub lookup: Option<LookupSettings>,
    /// How records are written (targets only).
    pub write: Option<WriteSettings>,
}

/// Header name → value; `Debug` masks the values (one may hold a key).
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Headers(pub BTreeMap<String, String>);

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "***")))
            .finish()
    }
}

fn default_name() -> String {
    "HTTP API".into()
}
fn default_rate() -> String {
    "10/s".into()
}
fn default_request_id_header() -> String {
    "X-Request-Id".into()
}
fn default_id() -> String {
    "$.id".into()
}
fn default_get() -> String {
    "GET".into()
}
fn default_post() -> String {
    "POST".into()
}
fn default_put() -> String {
    "PUT".into()
}
fn default_max_ids() -> usize {
    100
}
fn default_offset_param() -> String {
    "offset".into()
}
fn default_limit_param() -> String {
    "limit".into()
}
fn default_page_param() -> String {
    "page".into()
}
fn default_first_page() -> u64 {
    1
}
fn default_batch_size() -> usize {
    100
}

/// Which rate-limit headers to pace by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RateLimitHeaders {
    /// `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds until the
    /// window resets; a value above 10^9 is read as a Unix time).
    XRatelimit,
    /// The IETF draft's `RateLimit-Remaining` and `RateLimit-Reset`
    /// (seconds), or one `RateLimit` header with `r=`/`remaining=` and
    /// `t=`/`reset=`.
    Ietf,
}

/// The unit of bare numbers in timestamp fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampUnit {
    /// Unix seconds.
    #[default]
    Seconds,
    /// Unix milliseconds.
    Milliseconds,
}

/// How requests authenticate. Every value takes `${VAR}` and is a secret:
/// never logged, scrubbed from every message.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AuthSettings {
    /// `Authorization: Bearer <token>`.
    Bearer {
        /// The token; use `${API_TOKEN}`.
        token: Secret,
    },
    /// `Authorization: Basic base64(username:password)`.
    Basic {
        /// The user name (or an API key some APIs take here).
        username: Secret,
        /// The password (may be empty).
        #[serde(default = "empty_secret")]
        password: Secret,
    },
    /// An API key in a header or a query parameter.
    ApiKey {
        /// The header that carries it (`X-Api-Key`).
        header: Option<String>,
        /// Or the query parameter that carries it (`api_key`).
        query: Option<String>,
        /// The key; use `${API_KEY}`.
        value: Secret,
    },
    /// OAuth 2.0 client credentials (RFC 6749 section 4.4): a token
    /// fetched from `token_url` before the first request and again after a
    /// 401, sent as a bearer token.
    OauthClientCredentials {
        /// The token endpoint (`https://auth.example.com/oauth/token`).
        token_url: String,
        /// The client ID.
        client_id: Secret,
        /// The client secret.
        client_secret: Secret,
        /// Scopes to ask for, space-separated (default none).
        scope: Option<String>,
    },
    /// OAuth 2.0 refresh grant (RFC 6749 section 6) for APIs that issue a
    /// user's refresh token (authorization-code apps): an access token
    /// fetched with the refresh token before the first request and again
    /// after a 401. Where the API rotates the refresh token, the newest is
    /// kept, sealed, in the job's state store and used by the next run; the
    /// configured one only while the store holds none.
    OauthRefreshToken {
        /// The token endpoint (`https://auth.example.com/oauth/token`).
        token_url: String,
        /// The client ID.
        client_id: Secret,
        /// The client secret (it also seals the stored refresh token).
        client_secret: Secret,
        /// The refresh token to start from; use `${API_REFRESH_TOKEN}`.
        refresh_token: Option<Secret>,
        /// Scopes to ask for, space-separated (default none).
        scope: Option<String>,
        /// How the client authenticates at the token endpoint: `basic`
        /// (HTTP Basic, which RFC 6749 section 2.3.1 requires servers to
        /// take; the default) or `form` (`client_id`/`client_secret` in
        /// the body).
        #[serde(default = "default_client_auth")]
        client_auth: ClientAuthSetting,
    },
}

/// `auth.client_auth` of `oauth_refresh_token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuthSetting {
    /// HTTP Basic.
    Basic,
    /// In the form body.
    Form,
}

fn default_client_auth() -> ClientAuthSetting {
    ClientAuthSetting::Basic
}

fn empty_secret() -> Secret {
    Secret::new("")
}

/// Where the list request's window is applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowFilter {
    /// The request filters by the window (its templates use `start` and
    /// `end`); records outside it are still dropped.
    #[default]
    Server,
    /// The API cannot filter: every record is listed and those outside
    /// the window dropped here (said in the run's log and `recon check`).
    Client,
}

/// The request that lists records.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListSettings {
    /// `GET` (default) or `POST` (a search endpoint).
    #[serde(default = "default_get")]
    pub method: String,
    /// Path template appended to `base_url` (`/v1/charges`), or a whole URL.
    pub path: String,
    /// Query parameters: name → template (`"created[gte]" = "{{ start | unix }}"`).
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// JSON body template (a TOML table), for `POST` searches.
    pub body: Option<Json>,
    /// JSONPath of the records in one answer (`$.data[*]`).
    pub records: String,
    /// `server` (default): the request filters by the window; `client`:
    /// the API cannot, recon filters.
    #[serde(default)]
    pub window: WindowFilter,
    /// How the next page is asked for (default: one page only).
    pub paging: Option<PagingSettings>,
    /// Where the paging parameters go: `query` (default) or `body`, as
    /// top-level keys of the JSON body of a `POST` search (Notion's
    /// `start_cursor`, HubSpot search's `after`).
    #[serde(default)]
    pub paging_in: PagingIn,
}

/// Where the paging parameters of the list request go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PagingIn {
    /// Query parameters.
    #[default]
    Query,
    /// Top-level keys of the JSON body (numbers for offsets, page numbers
    /// and sizes; text for cursors).
    Body,
}

/// The paging kinds.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PagingSettings {
    /// A flag says more records follow and the next page starts after the
    /// last record's ID (Stripe: `has_more`, `starting_after`).
    Cursor {
        /// The query parameter that takes the last ID (`starting_after`).
        param: String,
        /// JSONPath of the flag in the answer (`$.has_more`).
        has_more: String,
        /// JSONPath of the cursor in the last record (default: the `id` path).
        last_id: Option<String>,
    },
    /// The answer holds the next page's cursor, absent or empty on the last
    /// page (HubSpot: `paging.next.after`; Slack: `response_metadata.next_cursor`).
    NextCursor {
        /// The query parameter that takes it (`after`, `cursor`).
        param: String,
        /// JSONPath of the cursor in the answer.
        cursor: String,
    },
    /// The answer holds the next page's URL, absent or null on the last
    /// page (`$.next`, `$.links.next`).
    NextUrl {
        /// JSONPath of the URL in the answer.
        next: String,
    },
    /// The RFC 8288 `Link` header's `rel="next"` URL (GitHub).
    LinkHeader {},
    /// `offset` and `limit` parameters; the end is a total, a more-items
    /// flag, or a short page.
    Offset {
        /// Default `offset`.
        #[serde(default = "default_offset_param")]
        offset_param: String,
        /// Default `limit`.
        #[serde(default = "default_limit_param")]
        limit_param: String,
        /// Records per page.
        limit: u64,
        /// JSONPath of the total number of records, if the API gives it.
        total: Option<String>,
        /// JSONPath of a "more items" flag, if the API gives one.
        more: Option<String>,
    },
    /// A page number; the end is a page count, a more flag, a short page
    /// or an empty one.
    Page {
        /// Default `page`.
        #[serde(default = "default_page_param")]
        page_param: String,
        /// The first page's number (default 1).
        #[serde(default = "default_first_page")]
        first: u64,
        /// The page-size parameter, if any (`per_page`).
        size_param: Option<String>,
        /// Records per page, sent in `size_param`.
        size: Option<u64>,
        /// JSONPath of the number of pages, if the API gives it.
        total_pages: Option<String>,
        /// JSONPath of a "more pages" flag, if the API gives one.
        more: Option<String>,
    },
}

/// How records are fetched by external ID: one at a time (a template that
/// uses `{{ id }}`) or in batches (one that uses `{{ ids }}` or `{{ items }}`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupSettings {
    /// `GET` (default) or `POST`.
    #[serde(default = "default_get")]
    pub method: String,
    /// Path template (`/v1/charges/{{ id }}`).
    pub path: String,
    /// Query templates (`ids = "{{ ids }}"`).
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// JSON body template (`{ inputs = "{{ items }}" }`).
    pub body: Option<Json>,
    /// With `{{ items }}`: the template of one item (`{ id = "{{ id }}" }`).
    pub item: Option<Json>,
    /// One by ID: JSONPath of the record in the answer (default `$`); 404
    /// means absent.
    pub record: Option<String>,
    /// Batched: JSONPath of the records in the answer.
    pub records: Option<String>,
    /// Batched: most IDs per request (default 100).
    #[serde(default = "default_max_ids")]
    pub max_ids: usize,
    /// JSONPath of the target's own ID in a record, for updates by it
    /// (`{{ target_id }}`).
    pub target_id: Option<String>,
}

/// How the API guarantees one record per external ID: the precondition of
/// every write (`recon check` and the run name it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Uniqueness {
    /// The API refuses a second record with the same key (a unique field
    /// it enforces): an `outcomes` rule must say which answer that is, as
    /// `unchanged`.
    UniqueField,
    /// The write endpoint creates or updates by the key (an upsert).
    UpsertByKey,
    /// The API deduplicates by an idempotency key header, and recon looks
    /// the key up before creating: `create.idempotency_header` and a
    /// `lookup` are required.
    IdempotencyKeyAndLookup,
}

/// How records are written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteSettings {
    /// How the API guarantees one record per key.
    pub uniqueness: Uniqueness,
    /// Creating one record.
    pub create: Option<RequestSettings>,
    /// Updating one existing record (`upsert` mode): `PUT` or `PATCH` by
    /// `{{ key }}` or by the `{{ target_id }}` a lookup found.
    pub update: Option<RequestSettings>,
    /// Writing many records per request.
    pub batch: Option<BatchSettings>,
    /// Answers that are not failures of the whole call: `{ status = 409,
    /// outcome = "unchanged" }`, `{ status = 422, code = "amount_invalid",
    /// outcome = "failed" }`.
    #[serde(default)]
    pub outcomes: Vec<OutcomeRule>,
    /// JSONPath of a flag in a create answer that is true when the record
    /// was created and false when an upsert updated it (default: created).
    pub created: Option<String>,
    /// Records per write call of the pipeline (default 100).
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
}

/// One write request.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSettings {
    /// Default `POST` for create, `PUT` for update.
    pub method: Option<String>,
    /// Path template (`/v1/customers`, `/v1/customers/{{ key }}`).
    pub path: String,
    /// Query templates.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// JSON body template of the mapped fields
    /// (`{ external_id = "{{ key }}", amount = "{{ fields.amount }}" }`).
    pub body: Option<Json>,
    /// The header that carries recon's deterministic idempotency key
    /// (`Idempotency-Key`), if the API takes one.
    pub idempotency_header: Option<String>,
}

/// A batch write endpoint.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSettings {
    /// Default `POST`.
    #[serde(default = "default_post")]
    pub method: String,
    /// Path template.
    pub path: String,
    /// Query templates.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Body template using `{{ items }}` (`{ inputs = "{{ items }}" }`).
    pub body: Json,
    /// Template of one record's item (`{ id = "{{ key }}", properties = { … } }`).
    pub item: Json,
    /// Most records per request (default 100).
    #[serde(default = "default_batch_size")]
    pub max_items: usize,
    /// JSONPath of the per-record results in the answer (`$.results[*]`).
    pub results: String,
    /// JSONPath of the external ID in one result.
    pub result_key: String,
    /// JSONPath of a flag in one result: true created, false updated
    /// (default: created).
    pub created: Option<String>,
    /// JSONPath of per-record errors in the answer (`$.errors[*]`).
    pub errors: Option<String>,
    /// JSONPath of the external IDs one error concerns (`$.context.ids[*]`).
    pub error_keys: Option<String>,
    /// JSONPath of one error's message (default `$.message`).
    pub error_message: Option<String>,
    /// The header that carries the batch's deterministic idempotency key.
    pub idempotency_header: Option<String>,
}

/// What an error answer means for one record.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeRule {
    /// The HTTP status.
    pub status: u16,
    /// The error code in the body (`error.code` or `code`), if the rule
    /// needs one.
    pub code: Option<String>,
    /// `unchanged` (the record exists: nothing to do) or `failed` (this
    /// record alone fails; the run goes on).
    pub outcome: RuleOutcome,
}

/// The outcome a rule gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleOutcome {
    /// Already there.
    Unchanged,
    /// This record fails alone.
    Failed,
}

// ---------------------------------------------------------------------------
// The validated form.

/// A request template, parsed.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    /// The method.
    pub method: Method,
    /// The path template.
    pub path: Template,
    /// Query templates.
    pub query: Vec<(String, Template)>,
    /// Body template.
    pub body: Option<JsonTemplate>,
    /// `METHOD path-template`, for messages.
    pub label: String,
}

impl RequestSpec {
    fn parse(
        key: &str,
        method: &str,
        path: &str,
        query: &BTreeMap<String, String>,
        body: Option<&Json>,
        names: Names<'_>,
    ) -> Result<RequestSpec, ConnectorError> {
        let method = parse_method(&format!("{key}.method"), method)?;
        let path_t = Template::parse(&format!("{key}.path"), path, names)?;
        let query = query
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.clone(),
                    Template::parse(&format!("{key}.query.{k}"), v, names)?,
                ))
            })
            .collect::<Result<Vec<_>, ConnectorError>>()?;
        let body = body
            .map(|b| JsonTemplate::parse(&format!("{key}.body"), b, names))
            .transpose()?;
        Ok(RequestSpec {
            label: format!("{method} {path}"),
            method,
            path: path_t,
            query,
            body,
        })
    }

    /// Whether any part uses `name`.
    pub fn uses(&self, name: &str) -> bool {
        self.path.uses(name)
            || self.query.iter().any(|(_, t)| t.uses(name))
            || self.body.as_ref().is_some_and(|b| b.uses(name))
    }
}

fn parse_method(key: &str, m: &str) -> Result<Method, ConnectorError> {
    match m.to_ascii_uppercase().as_str() {
        "GET" => Ok(Method::GET),
        "POST" => Ok(Method::POST),
        "PUT" => Ok(Method::PUT),
        "PATCH" => Ok(Method::PATCH),
        _ => Err(ConnectorError::Config(format!(
            "{key} = {m:?}: use GET, POST, PUT or PATCH"
        ))),
    }
}

/// Paging, validated.
#[derive(Clone, Debug)]
pub enum Paging {
    /// One page.
    None,
    /// `has_more` + last ID.
    Cursor {
        param: String,
        has_more: Path,
        last_id: Path,
    },
    /// A cursor in the answer.
    NextCursor { param: String, cursor: Path },
    /// A URL in the answer.
    NextUrl { next: Path },
    /// RFC 8288 `Link: <…>; rel="next"`.
    LinkHeader,
    /// Offset and limit.
    Offset {
        offset_param: String,
        limit_param: String,
        limit: u64,
        total: Option<Path>,
        more: Option<Path>,
    },
    /// Page numbers.
    Page {
        page_param: String,
        first: u64,
        size_param: Option<String>,
        size: Option<u64>,
        total_pages: Option<Path>,
        more: Option<Path>,
    },
}

/// How lookups are made.
#[derive(Clone, Debug)]
pub enum LookupKind {
    /// One request per ID; `record` is the record in the answer.
    ById { record: Path },
    /// Batched: the records in the answer, `item` per ID.
    Batch {
        records: Path,
        item: Option<JsonTemplate>,
        max_ids: usize,
    },
}

/// The lookup, validated.
#[derive(Clone, Debug)]
pub struct LookupSpec {
    pub request: RequestSpec,
    pub kind: LookupKind,
    pub target_id: Option<Path>,
}

/// A batch write, validated.
#[derive(Clone, Debug)]
pub struct BatchSpec {
    pub request: RequestSpec,
    pub item: JsonTemplate,
    pub max_items: usize,
    pub results: Path,
    pub result_key: Path,
    pub created: Option<Path>,
    pub errors: Option<Path>,
    pub error_keys: Option<Path>,
    pub error_message: Path,
    pub idempotency_header: Option<String>,
}

/// Writes, validated.
#[derive(Clone, Debug)]
pub struct WriteSpec {
    pub uniqueness: Uniqueness,
    pub create: Option<(RequestSpec, Option<String>)>,
    pub update: Option<RequestSpec>,
    pub batch: Option<BatchSpec>,
    pub outcomes: Vec<OutcomeRule>,
    pub created: Option<Path>,
    pub batch_size: usize,
}

/// Everything the connector runs on, checked.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub base_url: String,
    pub mapping: Mapping,
    pub list: RequestSpec,
    pub records: Path,
    pub window: WindowFilter,
    pub paging: Paging,
    pub paging_in: PagingIn,
    pub lookup: Option<LookupSpec>,
    pub write: Option<WriteSpec>,
    pub rate: (u32, Duration),
}

/// `"100/s"`, `"300/m"`, `"5000/h"`, `"100/10s"` → (limit, interval).
pub fn parse_rate(key: &str, text: &str) -> Result<(u32, Duration), ConnectorError> {
    let bad = || {
        ConnectorError::Config(format!(
            "{key} = {text:?}: write the API's limit as requests per interval, \"100/s\", \"300/m\", \"5000/h\" or \"100/10s\""
        ))
    };
    let (n, per) = text.split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    let interval = match per.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        other => positive_duration(other, key).map_err(|_| bad())?,
    };
    Ok((n, interval))
}

impl HttpSettings {
    /// The validated spec for a job's schema.
    pub fn spec(&self, cx: BuildContext<'_>) -> Result<Spec, ConnectorError> {
        let field_names: Vec<String> = cx.schema.fields.iter().map(|f| f.name.clone()).collect();
        for name in self.fields.keys() {
            if !field_names.contains(name) {
                return Err(ConnectorError::Config(format!(
                    "fields.{name}: the job has no field `{name}` (its fields: {})",
                    field_names.join(", ")
                )));
            }
        }
        let field_path = |name: &str| -> Result<Path, ConnectorError> {
            let text = self
                .fields
                .get(name)
                .cloned()
                .unwrap_or_else(|| format!("$['{}']", name.replace('\'', "\\'")));
            Path::parse(&format!("fields.{name}"), &text)
        };
        let fields = field_names
            .iter()
            .map(|n| field_path(n))
            .collect::<Result<Vec<_>, _>>()?;
        let currency = match (&self.currency, cx.schema.money_field()) {
            (Some(c), _) => Some(Path::parse("currency", c)?),
            (None, Some(_)) => Some(
                match cx
                    .schema
                    .fields
                    .iter()
                    .position(|f| f.kind == FieldKind::Currency)
                {
                    Some(i) => fields[i].clone(),
                    None => Path::parse("currency", "$.currency")?,
                },
            ),
            (None, None) => None,
        };
        let id = Path::parse("id", &self.id)?;
        let mapping = Mapping {
            id: id.clone(),
            fields,
            kinds: cx.schema.fields.iter().map(|f| f.kind).collect(),
            names: field_names.clone(),
            currency,
            amount_format: self.amount_format,
            timestamp_unit: match self.timestamp_unit {
                TimestampUnit::Seconds => Unit::Seconds,
                TimestampUnit::Milliseconds => Unit::Milliseconds,
            },
            time_field: cx.time_field,
            naive_is_utc: self.naive_timestamps_are_utc,
        };

        let window_names = Names {
            exact: &["start", "end"],
            fields: &[],
        };
        let l = &self.list;
        let list = RequestSpec::parse(
            "list",
            &l.method,
            &l.path,
            &l.query,
            l.body.as_ref(),
            window_names,
        )?;
        let uses_window = list.uses("start") || list.uses("end");
        match (l.window, uses_window) {
            (WindowFilter::Server, false) if cx.time_field.is_some() => {
                return Err(ConnectorError::Config(format!(
                    "list: the request does not use the window ({{{{ start }}}} or {{{{ end }}}} in list.path, list.query or list.body), so the API cannot filter by it; add the API's date filters (e.g. list.query.\"created[gte]\" = \"{{{{ start | unix }}}}\") or set list.window = \"client\" to read every record and filter here ({})",
                    list.label
                )))
            }
            (WindowFilter::Client, true) => {
                return Err(ConnectorError::Config(
                    "list.window = \"client\" but the list request uses {{ start }} or {{ end }}; remove them, or set list.window = \"server\"".into(),
                ))
            }
            _ => {}
        }
        let records = Path::parse("list.records", &l.records)?;
        let paging = match &l.paging {
            None => Paging::None,
            Some(PagingSettings::Cursor {
                param,
                has_more,
                last_id,
            }) => Paging::Cursor {
                param: param.clone(),
                has_more: Path::parse("list.paging.has_more", has_more)?,
                last_id: match last_id {
                    Some(p) => Path::parse("list.paging.last_id", p)?,
                    None => id.clone(),
                },
            },
            Some(PagingSettings::NextCursor { param, cursor }) => Paging::NextCursor {
                param: param.clone(),
                cursor: Path::parse("list.paging.cursor", cursor)?,
            },
            Some(PagingSettings::NextUrl { next }) => Paging::NextUrl {
                next: Path::parse("list.paging.next", next)?,
            },
            Some(PagingSettings::LinkHeader {}) => Paging::LinkHeader,
            Some(PagingSettings::Offset {
                offset_param,
                limit_param,
                limit,
                total,
                more,
            }) => {
                if *limit == 0 {
                    return Err(ConnectorError::Config(
                        "list.paging.limit must be at least 1 (records per page)".into(),
                    ));
                }
                Paging::Offset {
                    offset_param: offset_param.clone(),
                    limit_param: limit_param.clone(),
                    limit: *limit,
                    total: total
                        .as_ref()
                        .map(|t| Path::parse("list.paging.total", t))
                        .transpose()?,
                    more: more
                        .as_ref()
                        .map(|t| Path::parse("list.paging.more", t))
                        .transpose()?,
                }
            }
            Some(PagingSettings::Page {
                page_param,
                first,
                size_param,
                size,
                total_pages,
                more,
            }) => {
                if size_param.is_some() != size.is_some() {
                    return Err(ConnectorError::Config(
                        "list.paging: size_param and size go together (the parameter and the records per page)".into(),
                    ));
                }
                Paging::Page {
                    page_param: page_param.clone(),
                    first: *first,
                    size_param: size_param.clone(),
                    size: *size,
                    total_pages: total_pages
                        .as_ref()
                        .map(|t| Path::parse("list.paging.total_pages", t))
                        .transpose()?,
                    more: more
                        .as_ref()
                        .map(|t| Path::parse("list.paging.more", t))
                        .transpose()?,
                }
            }
        };

        if l.paging_in == PagingIn::Body && l.body.as_ref().is_none_or(|b| !b.is_object()) {
            return Err(ConnectorError::Config(
                "list.paging_in = \"body\" puts the paging parameters into the JSON body: declare list.body as a table (e.g. body = { page_size = 100 })".into(),
            ));
        }
        if l.paging_in == PagingIn::Body
            && matches!(
                l.paging,
                Some(PagingSettings::NextUrl { .. } | PagingSettings::LinkHeader {})
            )
        {
            return Err(ConnectorError::Config(
                "list.paging_in = \"body\" is for parameters; a next-page URL (next_url, link_header) is followed as given".into(),
            ));
        }
        let lookup = self.lookup.as_ref().map(lookup_spec).transpose()?;
        let write = self
            .write
            .as_ref()
            .map(|w| write_spec(w, &field_names, lookup.as_ref()))
            .transpose()?;
        let rate = parse_rate("rate", &self.rate)?;
        for s in &self.retry_statuses {
            if !(400..600).contains(s) || matches!(s, 401 | 403) {
                return Err(ConnectorError::Config(format!(
                    "retry_statuses: {s} cannot be retried; list 4xx or 5xx statuses other than 401 and 403"
                )));
            }
        }
        Ok(Spec {
            name: self.name.clone(),
            base_url: self.base_url.trim_end_matches('/').to_string(),
            mapping,
            list,
            records,
            window: l.window,
            paging,
            paging_in: l.paging_in,
            lookup,
            write,
            rate,
        })
    }

    /// The HTTP policy's settings.
    pub fn timeout(&self) -> Result<Option<Duration>, ConnectorError> {
        self.timeout
            .as_deref()
            .map(|t| positive_duration(t, "timeout"))
            .transpose()
    }

    /// `rate_limit_patience`, parsed.
    pub fn patience(&self) -> Result<Option<Duration>, ConnectorError> {
        self.rate_limit_patience
            .as_deref()
            .map(|t| positive_duration(t, "rate_limit_patience"))
            .transpose()
    }
}

fn lookup_spec(l: &LookupSettings) -> Result<LookupSpec, ConnectorError> {
    let names = Names {
        exact: &["id", "ids", "items"],
        fields: &[],
    };
    let request = RequestSpec::parse(
        "lookup",
        &l.method,
        &l.path,
        &l.query,
        l.body.as_ref(),
        names,
    )?;
    let by_id = request.uses("id");
    let batched = request.uses("ids") || request.uses("items");
    let kind = match (by_id, batched) {
        (true, false) => {
            if l.records.is_some() || l.item.is_some() {
                return Err(ConnectorError::Config(
                    "lookup: a lookup by {{ id }} reads one record (lookup.record); lookup.records and lookup.item are for batched lookups with {{ ids }} or {{ items }}".into(),
                ));
            }
            LookupKind::ById {
                record: Path::parse("lookup.record", l.record.as_deref().unwrap_or("$"))?,
            }
        }
        (false, true) => {
            let records = l.records.as_deref().ok_or_else(|| {
                ConnectorError::Config(
                    "lookup.records: a batched lookup needs the JSONPath of the records in its answer (e.g. \"$.results[*]\")".into(),
                )
            })?;
            let item = match (&l.item, request.uses("items")) {
                (Some(i), true) => Some(JsonTemplate::parse(
                    "lookup.item",
                    i,
                    Names {
                        exact: &["id"],
                        fields: &[],
                    },
                )?),
                (None, false) => None,
                (None, true) => {
                    return Err(ConnectorError::Config(
                        "lookup.item: {{ items }} needs the template of one item, e.g. item = { id = \"{{ id }}\" }".into(),
                    ))
                }
                (Some(_), false) => {
                    return Err(ConnectorError::Config(
                        "lookup.item is set but no lookup template uses {{ items }}".into(),
                    ))
                }
            };
            if l.max_ids == 0 {
                return Err(ConnectorError::Config(
                    "lookup.max_ids must be at least 1".into(),
                ));
            }
            LookupKind::Batch {
                records: Path::parse("lookup.records", records)?,
                item,
                max_ids: l.max_ids,
            }
        }
        _ => {
            return Err(ConnectorError::Config(format!(
                "lookup: {} must use {{{{ id }}}} (one record per request) or {{{{ ids }}}} / {{{{ items }}}} (a batch), not both or neither",
                request.label
            )))
        }
    };
    Ok(LookupSpec {
        request,
        kind,
        target_id: l
            .target_id
            .as_deref()
            .map(|t| Path::parse("lookup.target_id", t))
            .transpose()?,
    })
}

fn write_spec(
    w: &WriteSettings,
    fields: &[String],
    lookup: Option<&LookupSpec>,
) -> Result<WriteSpec, ConnectorError> {
    let names = Names {
        exact: &["key", "idempotency_key", "target_id"],
        fields,
    };
    let create = w
        .create
        .as_ref()
        .map(|c| {
            Ok::<_, ConnectorError>((
                RequestSpec::parse(
                    "write.create",
                    c.method.as_deref().unwrap_or("POST"),
                    &c.path,
                    &c.query,
                    c.body.as_ref(),
                    names,
                )?,
                c.idempotency_header.clone(),
            ))
        })
        .transpose()?;
    let update = w
        .update
        .as_ref()
        .map(|u| {
            RequestSpec::parse(
                "write.update",
                u.method.as_deref().unwrap_or(&default_put()),
                &u.path,
                &u.query,
                u.body.as_ref(),
                names,
            )
        })
        .transpose()?;
    if let Some(c) = &create {
        if c.0.uses("target_id") {
            return Err(ConnectorError::Config(
                "write.create: {{ target_id }} is only known for records that exist; use it in write.update".into(),
            ));
        }
    }
    if let Some(u) = &update {
        if u.uses("target_id") && lookup.is_none_or(|l| l.target_id.is_none()) {
            return Err(ConnectorError::Config(
                "write.update uses {{ target_id }}: declare lookup.target_id, the JSONPath of the target's own ID in a looked-up record".into(),
            ));
        }
    }
    let batch = w
        .batch
        .as_ref()
        .map(|b| {
            let request = RequestSpec::parse(
                "write.batch",
                &b.method,
                &b.path,
                &b.query,
                Some(&b.body),
                Names {
                    exact: &["items", "idempotency_key"],
                    fields: &[],
                },
            )?;
            if !request.uses("items") {
                return Err(ConnectorError::Config(
                    "write.batch.body must use {{ items }}, where the records' items go".into(),
                ));
            }
            let p = |k: &str, t: &str| Path::parse(&format!("write.batch.{k}"), t);
            if b.max_items == 0 {
                return Err(ConnectorError::Config(
                    "write.batch.max_items must be at least 1".into(),
                ));
            }
            Ok(BatchSpec {
                request,
                item: JsonTemplate::parse("write.batch.item", &b.item, names)?,
                max_items: b.max_items,
                results: p("results", &b.results)?,
                result_key: p("result_key", &b.result_key)?,
                created: b.created.as_deref().map(|t| p("created", t)).transpose()?,
                errors: b.errors.as_deref().map(|t| p("errors", t)).transpose()?,
                error_keys: b
                    .error_keys
                    .as_deref()
                    .map(|t| p("error_keys", t))
                    .transpose()?,
                error_message: p(
                    "error_message",
                    b.error_message.as_deref().unwrap_or("$.message"),
                )?,
                idempotency_header: b.idempotency_header.clone(),
            })
        })
        .transpose()?;
    if create.is_none() && batch.is_none() {
        return Err(ConnectorError::Config(
            "write: declare write.create (one record per request) or write.batch (many), or both"
                .into(),
        ));
    }
    if w.batch_size == 0 {
        return Err(ConnectorError::Config(
            "write.batch_size must be at least 1".into(),
        ));
    }
    Ok(WriteSpec {
        uniqueness: w.uniqueness,
        create,
        update,
        batch,
        outcomes: w.outcomes.clone(),
        created: w
            .created
            .as_deref()
            .map(|t| Path::parse("write.created", t))
            .transpose()?,
        batch_size: w.batch_size,
    })
}

#[async_trait::async_trait]
impl ConnectorConfig for HttpSettings {
    fn field_map(&self) -> Option<(&'static str, &BTreeMap<String, String>)> {
        Some(("fields", &self.fields))
    }

    fn expand_env(&mut self, side: &str, expand: Expand<'_>) -> Result<(), ConnectorError> {
        self.base_url = expand(&self.base_url, &format!("{side}.base_url"))?;
        for (name, value) in self.headers.0.iter_mut() {
            let v = expand(value, &format!("{side}.headers.{name}"))?;
            if v != *value {
                // A value that came from the environment is a secret.
                recon_core::register_secret(&v);
            }
            *value = v;
        }
        let secret = |s: &mut Secret, name: &str| -> Result<(), ConnectorError> {
            *s = Secret::new(expand(s.expose(), &format!("{side}.auth.{name}"))?);
            Ok(())
        };
        match &mut self.auth {
            None => {}
            Some(AuthSettings::Bearer { token }) => secret(token, "token")?,
            Some(AuthSettings::Basic { username, password }) => {
                secret(username, "username")?;
                secret(password, "password")?;
            }
            Some(AuthSettings::ApiKey { value, .. }) => secret(value, "value")?,
            Some(AuthSettings::OauthClientCredentials {
                token_url,
                client_id,
                client_secret,
                ..
            }) => {
                *token_url = expand(token_url, &format!("{side}.auth.token_url"))?;
                secret(client_id, "client_id")?;
                secret(client_secret, "client_secret")?;
            }
            Some(AuthSettings::OauthRefreshToken {
                token_url,
                client_id,
                client_secret,
                refresh_token,
                ..
            }) => {
                *token_url = expand(token_url, &format!("{side}.auth.token_url"))?;
                secret(client_id, "client_id")?;
                secret(client_secret, "client_secret")?;
                if let Some(r) = refresh_token {
                    secret(r, "refresh_token")?;
                }
            }
        }
        Ok(())
    }

    fn target_role(&self) -> TargetRole {
        if self.write.is_some() {
            TargetRole::Writable
        } else {
            TargetRole::ReadOnly
        }
    }

    async fn build_source(&self, cx: BuildContext<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(HttpSource::new(self, cx)?))
    }

    async fn build_target(&self, cx: BuildContext<'_>) -> Result<Box<dyn Target>, ConnectorError> {
        if self.write.is_none() {
            return Err(ConnectorError::Config(format!(
                "{}: declare [write] (create or batch, and uniqueness) to backfill into this API, or set backfill.mode = \"off\"",
                self.name
            )));
        }
        Ok(Box::new(HttpTarget::new(HttpSource::new(self, cx)?)))
    }

    fn kind(&self) -> &'static str {
        "an HTTP API"
    }

    fn type_name() -> &'static str {
        "http"
    }

    fn url_setting() -> Option<&'static str> {
        Some("base_url")
    }
}
