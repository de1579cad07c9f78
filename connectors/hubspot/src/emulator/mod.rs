//! An emulator of HubSpot's CRM v3 API, served over real HTTP on `127.0.0.1`,
//! for tests, benchmarks and the offline demo. Modelled on the Stripe
//! emulator (`recon_stripe::emulator`): the same listener trick for dropped
//! connections, the same fault plans, the same stats.
//!
//! # Endpoints
//!
//! * `GET /crm/v3/properties/{objectType}` and
//!   `GET /crm/v3/properties/{objectType}/{propertyName}` — property
//!   definitions, with `hasUniqueValue`; an unknown property is
//!   `404 OBJECT_NOT_FOUND`.
//! * `POST /crm/v3/objects/{objectType}/search` — `filterGroups` (OR of ANDs;
//!   `EQ NEQ GT GTE LT LTE BETWEEN IN NOT_IN HAS_PROPERTY NOT_HAS_PROPERTY
//!   CONTAINS_TOKEN NOT_CONTAINS_TOKEN`), one sort, `properties`, `limit` (≤ 200,
//!   default 10), `after` (an offset), a free-text `query`; `total` is the full
//!   match count; pages past result 10,000 are refused with `400` (see the
//!   `search` module for the semantics and the query cache).
//! * `POST /crm/v3/objects/{objectType}/batch/read` — by record id or by a
//!   unique `idProperty`; missing inputs are listed in `errors` with `207`.
//! * `POST /crm/v3/objects/{objectType}/batch/upsert` — create-or-update by a
//!   unique `idProperty`; per-input failures give `207` with `errors`.
//! * `GET /crm/v3/objects/{objectType}/{id}` (`?idProperty=`, `?properties=`).
//!
//! Object types: `contacts`, `companies`, `deals`, `tickets` (also as `0-1`,
//! `0-2`, `0-3`, `0-5`) and custom object type ids `2-<digits>`.
//!
//! # Values
//!
//! HubSpot stores every property value as a string and returns strings, e.g.
//! `"amount": "1000"`, `"createdate": "2024-01-02T03:04:05.678Z"`; so does the
//! emulator. Values given as JSON numbers or booleans are stored as their text;
//! `null` or `""` clears a property. `datetime` properties are normalized to
//! ISO 8601 UTC with milliseconds and accept epoch milliseconds (number or
//! numeric string) or ISO 8601 on input; `date` properties are stored as
//! `YYYY-MM-DD` and must be midnight UTC, as HubSpot requires.
//!
//! # Rate limits
//!
//! HubSpot documents a rolling ten-second limit per app (100 requests per 10
//! seconds for private apps on Free/Starter accounts; "Request Limits" at
//! developers.hubspot.com/apisbytier), a daily limit, and a separate limit for
//! the CRM search endpoints (raised from one to four requests per second in the
//! developer changelog "CRM Search API Rate Limit Increase"; five per second in
//! today's search guide). Requests above a limit get `429` with HubSpot's
//! documented body (`developers.hubspot.com/docs/api/usage-details`):
//! `{"status":"error","message":"You have reached your … limit.",
//! "errorType":"RATE_LIMIT","correlationId":…,"policyName":…}`. Responses carry
//! `X-HubSpot-RateLimit-Max`, `-Remaining` and `-Interval-Milliseconds` (and
//! `-Daily`, `-Daily-Remaining` with a daily limit) — except search responses,
//! which HubSpot documents do not include the rate-limit headers.
//!
//! # Order of decisions for each request
//!
//! As in the Stripe emulator: the request is counted and matched against the
//! fault plan on arrival; an injected error fault answers without auth or rate
//! limiting; otherwise auth, then the rate limiters, then routing (after
//! `latency`, plus the `Slow` delay if any). A dropped connection is never
//! processed (no write happens); a `TruncatedJson` response *is* processed —
//! the write is done and the client cannot tell.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use recon_hubspot::emulator::{Emulator, EmulatorConfig};
//! let emu = Emulator::start(EmulatorConfig::default()).await?;
//! emu.create_property("deals", "stripe_charge_id", true);
//! let mut props = serde_json::Map::new();
//! props.insert("stripe_charge_id".into(), "ch_1".into());
//! let id = emu.insert("deals", props);
//! // POST {emu.base_url}/crm/v3/objects/deals/search with `Authorization: Bearer {emu.token}`
//! # let _ = id;
//! emu.shutdown().await;
//! # Ok(()) }
//! ```

mod faults;
mod search;
mod server;
mod store;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use recon_emulator_kit::{Server, Stats, TransportFault};
use serde_json::{Map, Value};
use tokio::task::JoinHandle;

use server::Shared;

/// How an [`Emulator`] behaves.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// The one private-app access token accepted (`Authorization: Bearer …`).
    /// Default `"pat-na1-emulator"`.
    pub token: String,
    /// HubSpot's `TEN_SECONDLY_ROLLING` policy: at most this many requests
    /// admitted in any rolling 10-second window (search requests included).
    /// Default `Some(100)`; `None`: unlimited.
    pub limit_per_10s: Option<u32>,
    /// The search endpoints' own limit (policy `SECONDLY`): at most this many
    /// search requests admitted in any rolling second. Default `Some(5)`.
    pub search_per_sec: Option<u32>,
    /// HubSpot's `DAILY` policy: at most this many requests admitted since the
    /// emulator started (the emulator's day never ends). Default `None`.
    pub daily_limit: Option<u64>,
    /// Added before every response. Requests are served concurrently.
    pub latency: Duration,
    /// Eventual consistency of search: an object created or updated by
    /// `batch/upsert` is invisible to search until this long after the write
    /// (batch read sees it at once). Objects from [`Emulator::insert`] are
    /// searchable immediately. Default zero.
    pub search_lag: Duration,
    /// Strict counting: an admission stays in its rolling window (10 s, and
    /// the search endpoints' 1 s) for the whole window, with no allowance for
    /// the emulator's own scheduling delays; and `batch/upsert` and
    /// `batch/create` refuse property values that are not strings (the CRM
    /// v3 spec's `properties` is a map of strings). Default `false`.
    pub strict: bool,
    /// The share (0.0 ..= 1.0) of `limit_per_10s` that other apps of the same
    /// account spend: a steady stream of `share × limit` requests per 10 s
    /// that count toward the rolling window (and its `Remaining` header);
    /// when the window is full such a request is retried every 5 ms until
    /// it fits, as a busy integration would. Default 0.
    pub others_share: f64,
    /// Batch answers (`batch/upsert`, `batch/create`, `batch/read`) list
    /// their results in reverse input order, and `batch/upsert` results echo
    /// only the default properties (`hs_object_id`, `createdate`,
    /// `lastmodifieddate`), not the id property: HubSpot's spec promises
    /// neither order nor echo, only `objectWriteTraceId`. Default `false`.
    pub scramble_batch_results: bool,
    /// Keep every request to the CRM objects endpoints and its answer, for
    /// [`Emulator::exchanges`]. Default `false`.
    pub record_exchanges: bool,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            token: "pat-na1-emulator".to_owned(),
            limit_per_10s: Some(100),
            search_per_sec: Some(5),
            daily_limit: None,
            latency: Duration::ZERO,
            search_lag: Duration::ZERO,
            strict: false,
            others_share: 0.0,
            scramble_batch_results: false,
            record_exchanges: false,
        }
    }
}

/// One request to a CRM objects endpoint and the emulator's answer (see
/// [`EmulatorConfig::record_exchanges`]).
#[derive(Clone, Debug)]
pub struct Exchange {
    /// The request path, e.g. `/crm/v3/objects/deals/batch/upsert`.
    pub path: String,
    /// The request body as JSON (`Null` when it was not JSON).
    pub request: Value,
    /// The response status.
    pub status: u16,
    /// The response body as JSON (`Null` when it was not JSON).
    pub response: Value,
}

/// A property's data type (HubSpot's `type` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PropertyType {
    /// `string` (field type `text`). Compared as strings.
    String,
    /// `number`. Compared numerically.
    Number,
    /// `date`: a day, `YYYY-MM-DD`, midnight UTC. Compared as epoch ms.
    Date,
    /// `datetime`: ISO 8601 with ms, UTC. Compared as epoch ms.
    DateTime,
    /// `enumeration` (field type `select`). Compared as strings.
    Enumeration,
    /// `bool` (`"true"` / `"false"`).
    Bool,
}

impl PropertyType {
    /// HubSpot's `type` value.
    pub fn name(self) -> &'static str {
        match self {
            PropertyType::String => "string",
            PropertyType::Number => "number",
            PropertyType::Date => "date",
            PropertyType::DateTime => "datetime",
            PropertyType::Enumeration => "enumeration",
            PropertyType::Bool => "bool",
        }
    }

    /// HubSpot's `fieldType` value for a property of this type.
    pub fn field_type(self) -> &'static str {
        match self {
            PropertyType::String => "text",
            PropertyType::Number => "number",
            PropertyType::Date | PropertyType::DateTime => "date",
            PropertyType::Enumeration => "select",
            PropertyType::Bool => "booleancheckbox",
        }
    }

    /// Compared numerically (as f64; epoch ms for dates).
    pub(crate) fn numeric(self) -> bool {
        matches!(
            self,
            PropertyType::Number | PropertyType::Date | PropertyType::DateTime
        )
    }
}

/// A fault to inject instead of (or on top of) the normal response: the
/// kit's transport faults, answered with HubSpot's bodies — `RateLimited` a
/// `429` with the `TEN_SECONDLY_ROLLING` body (and
/// `X-HubSpot-RateLimit-Remaining: 0`), `ServerError` a `500`
/// `INTERNAL_ERROR`, `Unavailable` a `503` `SERVICE_UNAVAILABLE`.
pub type FaultKind = TransportFault;

/// One entry of a fault plan: requests number `after .. after + times` (counted
/// from 0 since [`Emulator::set_faults`]) get `kind`. When entries overlap, the
/// first in the plan wins.
pub type Fault = recon_emulator_kit::Fault<FaultKind>;

/// Counters since [`Emulator::start`]: the kit's [`Stats`] (`requests`,
/// `throttled`, `by_status`, `max_in_flight`, read through `Deref` or
/// `transport`) and HubSpot's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmulatorStats {
    /// Every emulator's counters (`throttled`: `429`s of the rate limiters
    /// and of faults).
    pub transport: Stats,
    /// Requests received on a search endpoint (whatever their outcome).
    pub search_requests: u64,
    /// Searches that tested every record of the type (a query not in the
    /// cache): paging through one query costs one scan, not one per page.
    pub search_scans: u64,
    /// Requests of the other apps (see [`EmulatorConfig::others_share`])
    /// admitted into the 10-second window.
    pub other_requests: u64,
}

impl std::ops::Deref for EmulatorStats {
    type Target = Stats;

    fn deref(&self) -> &Stats {
        &self.transport
    }
}

/// A running emulator. Dropping it stops the server too (without waiting).
pub struct Emulator {
    /// `"http://127.0.0.1:PORT"`, no trailing slash.
    pub base_url: String,
    /// The token to present (`Authorization: Bearer <token>`).
    pub token: String,
    shared: Arc<Shared>,
    server: Server,
    others: Option<JoinHandle<()>>,
}

impl Emulator {
    /// Binds `127.0.0.1:0` and serves on a tokio task of the current runtime.
    pub async fn start(config: EmulatorConfig) -> std::io::Result<Emulator> {
        let (listener, base_url) = Server::bind().await?;
        let token = config.token.clone();
        let others = (config.others_share > 0.0)
            .then(|| {
                let n = (config.others_share.min(1.0) * f64::from(config.limit_per_10s?)).round();
                (n >= 1.0).then_some(n as u32)
            })
            .flatten();
        let shared = Arc::new(Shared::new(config));
        let app = Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        let server = Server::spawn(listener, app);
        let others = others.map(|n| tokio::spawn(other_apps(shared.clone(), n)));
        Ok(Emulator {
            base_url,
            token,
            shared,
            server,
            others,
        })
    }

    /// Every request to a CRM objects endpoint so far and its answer, oldest
    /// first (empty unless [`EmulatorConfig::record_exchanges`]).
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.shared.exchanges.lock().unwrap().clone()
    }

    /// Defines a `string` property, e.g. `("deals", "stripe_charge_id", true)`.
    /// `unique` is HubSpot's `hasUniqueValue`: only such properties can be a
    /// batch `idProperty`, and no two objects may share a value of one. For a
    /// property that already exists (e.g. the deals' built-in `amount`, a
    /// `number`) only `hasUniqueValue` changes; its type stays.
    ///
    /// # Panics
    /// On an unknown object type, or when `unique` and stored objects already
    /// share a value of the property (HubSpot refuses that too).
    pub fn create_property(&self, object_type: &str, name: &str, unique: bool) {
        let r = self
            .shared
            .store
            .write()
            .unwrap()
            .define_property(object_type, name, None, unique);
        // Panic after the lock is released, so the store stays usable.
        if let Err(e) = r {
            panic!("emulator create_property({object_type}, {name}): {e}");
        }
    }

    /// [`create_property`](Self::create_property) with a data type (also
    /// changing an existing property's), e.g. a `datetime` property to search
    /// by date range with epoch-millisecond or ISO 8601 bounds.
    ///
    /// # Panics
    /// As `create_property`, and when stored values are invalid for `kind`.
    pub fn create_typed_property(
        &self,
        object_type: &str,
        name: &str,
        kind: PropertyType,
        unique: bool,
    ) {
        let r = self.shared.store.write().unwrap().define_property(
            object_type,
            name,
            Some(kind),
            unique,
        );
        if let Err(e) = r {
            panic!("emulator create_property({object_type}, {name}): {e}");
        }
    }

    /// Stores a new object and returns its HubSpot record id (a numeric
    /// string). `hs_object_id`, `createdate` and `lastmodifieddate` are set
    /// unless given (dates as epoch ms or ISO 8601). Properties need not be
    /// defined; values are stored as strings (see the module docs). The object
    /// is visible to search at once.
    ///
    /// # Panics
    /// On an unknown object type, an invalid value for a typed property, or a
    /// value of a unique property that another object already has.
    pub fn insert(&self, object_type: &str, properties: Map<String, Value>) -> String {
        let r = self
            .shared
            .store
            .write()
            .unwrap()
            .insert(object_type, properties, store::now_ms());
        match r {
            Ok(id) => id.to_string(),
            Err(e) => panic!("emulator insert into {object_type}: {e}"),
        }
    }

    /// [`insert`](Self::insert) for many objects, taking the store's lock once.
    pub fn insert_many(
        &self,
        object_type: &str,
        objects: impl IntoIterator<Item = Map<String, Value>>,
    ) -> Vec<String> {
        let now = store::now_ms();
        let r: Result<Vec<String>, String> = {
            let mut store = self.shared.store.write().unwrap();
            objects
                .into_iter()
                .map(|p| store.insert(object_type, p, now).map(|id| id.to_string()))
                .collect()
        };
        // Objects before the failing one stay inserted.
        r.unwrap_or_else(|e| panic!("emulator insert into {object_type}: {e}"))
    }

    /// Everything stored of `object_type`, by record id ascending: `(id,
    /// properties)` with every property value as stored (strings).
    pub fn objects(&self, object_type: &str) -> Vec<(String, Map<String, Value>)> {
        self.shared.store.read().unwrap().objects(object_type)
    }

    /// How many objects of `object_type` are stored.
    pub fn count(&self, object_type: &str) -> usize {
        self.shared.store.read().unwrap().count(object_type)
    }

    /// Replaces the fault plan; the next request is request number 0 of it.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        self.shared.transport.set_faults(faults);
    }

    /// `batch/upsert` inputs whose `id` (the idProperty value) is in `ids` fail
    /// with a per-input `VALIDATION_ERROR` (the batch answers `207`), until
    /// replaced; an empty vec clears the set.
    pub fn fail_ids(&self, ids: Vec<String>) {
        *self.shared.fail_ids.write().unwrap() = ids.into_iter().collect::<HashSet<_>>();
    }

    /// Lets the rolling windows (`TEN_SECONDLY_ROLLING` and the search
    /// endpoints' `SECONDLY`) pass at once: their admissions are forgotten,
    /// the daily count is kept. What a test calls between two `recon`
    /// processes (each paces from a fresh limiter while HubSpot counts per
    /// account) instead of sleeping through the windows.
    pub fn close_rate_windows(&self) {
        self.shared.limits.lock().unwrap().close_windows();
    }

    pub fn stats(&self) -> EmulatorStats {
        let mut stats = self.shared.stats.lock().unwrap().clone();
        stats.transport = self.shared.transport.stats();
        stats
    }

    /// Stops accepting connections, lets requests in flight finish (for up to
    /// five seconds), and returns once the server task has ended.
    pub async fn shutdown(mut self) {
        if let Some(others) = self.others.take() {
            others.abort();
        }
        self.server.shutdown().await;
    }
}

/// The other apps of the account: `per_10s` requests per 10 s, evenly
/// spaced; a request refused by a full window waits 5 ms and tries again
/// (at most one window's worth is kept pending).
async fn other_apps(shared: Arc<Shared>, per_10s: u32) {
    let every = Duration::from_secs(10) / per_10s;
    let mut next = tokio::time::Instant::now();
    let mut pending = 0u32;
    loop {
        let now = tokio::time::Instant::now();
        while next <= now {
            pending = (pending + 1).min(per_10s);
            next += every;
        }
        let mut admitted = 0;
        {
            let mut limits = shared.limits.lock().unwrap();
            while pending > 0 && limits.admit_other(now) {
                pending -= 1;
                admitted += 1;
            }
        }
        if admitted > 0 {
            shared.stats.lock().unwrap().other_requests += admitted;
        }
        let wake = if pending > 0 {
            now + Duration::from_millis(5)
        } else {
            next
        };
        tokio::time::sleep_until(wake).await;
    }
}

impl Drop for Emulator {
    /// Stops the other apps' task; the server stops as `server` drops.
    fn drop(&mut self) {
        if let Some(others) = self.others.take() {
            others.abort();
        }
    }
}
