//! An emulator of Shopify's GraphQL Admin API (orders, bulk queries), served
//! over real HTTP on `127.0.0.1`, for tests, benchmarks and the offline demo.
//!
//! Endpoints:
//!
//! * `POST /admin/api/{version}/graphql.json` (any version string, echoed as
//!   `X-Shopify-API-Version`), body `{"query", "variables"?,
//!   "operationName"?}` (or the bare query with `Content-Type:
//!   application/graphql`). Requires `X-Shopify-Access-Token: <token>`;
//!   otherwise `401 {"errors": "[API] Invalid API key or access token
//!   (unrecognized login or wrong password)"}`. A body without a query is
//!   Shopify's `400 {"errors": {"query": "Required parameter missing or
//!   invalid"}}`.
//! * `GET /bulk/{n}.jsonl` and `/bulk/{n}-partial.jsonl`: bulk results (no
//!   auth: on Shopify these are signed storage URLs).
//!
//! Every response carries a unique `X-Request-Id` (UUID-shaped).
//!
//! GraphQL: the document is parsed generically (see the `graphql` module) and
//! validated against a subset of Shopify's schema (see `exec`): `orders` (with
//! `first` 1..=250, `after`, `query` in Shopify's search syntax — see `search`
//! — `sortKey` `ID`/`CREATED_AT`/`UPDATED_AT`/`PROCESSED_AT`, `reverse`),
//! `currentBulkOperation` and the `bulkOperationRunQuery` mutation. Errors
//! are Shopify's (graphql-ruby's) GraphQL errors with HTTP 200.
//!
//! Cost and throttling follow Shopify's documented leaky bucket (see
//! `faults::CostBucket` and the cost formula in `exec`): every GraphQL
//! response has `extensions.cost = {requestedQueryCost, actualQueryCost,
//! throttleStatus: {maximumAvailable, currentlyAvailable, restoreRate}}`, and a
//! query whose requested cost exceeds what the bucket holds gets
//! `{"errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED",
//! …}}]}` (HTTP 200, `actualQueryCost: null`).
//!
//! Order of decisions for each request: it is counted and matched against the
//! fault plan on arrival; an injected error fault answers without auth or
//! throttling, a dropped connection has no effect; otherwise the body is read,
//! then auth, parse and validation (free), the single-query cost limit, the
//! bucket, execution and the refund of `requested − actual`. The response
//! (whatever it is) is sent after `latency` (plus the `Slow` delay, if any).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use recon_shopify::emulator::{Emulator, EmulatorConfig, OrderSpec};
//! let emu = Emulator::start(EmulatorConfig::default()).await?;
//! emu.insert_order(OrderSpec::example(1001, "2026-11-28T12:00:00Z".parse().unwrap()));
//! // POST {emu.graphql_url()} with `X-Shopify-Access-Token: {emu.token}`
//! emu.shutdown().await;
//! # Ok(()) }
//! ```

mod exec;
mod faults;
mod graphql;
mod search;
mod server;
mod store;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use recon_emulator_kit::{Server, Stats, TransportFault};
use tokio::time::Instant;

use server::Shared;

/// How an [`Emulator`] behaves.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// The one access token accepted in `X-Shopify-Access-Token`. Default
    /// `"shpat_emulator"`.
    pub token: String,
    /// The cost bucket's size (`throttleStatus.maximumAvailable`). Default
    /// 2000.
    pub max_available: u32,
    /// Points restored per second (`throttleStatus.restoreRate`). Default 100,
    /// the Standard plan's rate ("Standard: 100 points/second", Shopify's
    /// "GraphQL Admin API rate limits").
    pub restore_rate: u32,
    /// Added before every response. Requests are served concurrently, so this
    /// models network/server latency without limiting throughput.
    pub latency: Duration,
    /// How long a bulk operation stays `RUNNING` before it ends with its
    /// outcome. Default 200 ms.
    pub bulk_delay: Duration,
    /// The access scopes granted to the app, as
    /// `currentAppInstallation { accessScopes { handle } }` lists them.
    /// Without `read_all_orders`, orders created more than 60 days ago do
    /// not exist for the app (paging, search and bulk operations skip them),
    /// as on Shopify. Default `read_orders` and `read_all_orders`.
    pub access_scopes: Vec<String>,
    /// The share (0.0 ..= 1.0) of `restore_rate` another client of the same
    /// app and shop spends continuously: the bucket refills at the rest,
    /// while `throttleStatus.restoreRate` still reports the whole rate.
    /// Default 0.
    pub others_share: f64,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            token: "shpat_emulator".to_owned(),
            max_available: 2000,
            restore_rate: 100,
            latency: Duration::ZERO,
            bulk_delay: Duration::from_millis(200),
            access_scopes: vec!["read_orders".to_owned(), "read_all_orders".to_owned()],
            others_share: 0.0,
        }
    }
}

/// A fault to inject instead of (or on top of) the normal response: the
/// kit's transport faults, answered with Shopify's bodies — `RateLimited` an
/// HTTP `429` with `Retry-After: 1.0` and a `THROTTLED` error body,
/// `ServerError` a `500` with Shopify's "Internal error. Looks like
/// something went wrong on our end." body (code `INTERNAL_SERVER_ERROR`, the
/// request id), `Unavailable` a `503` `{"errors": "Service Unavailable"}`.
/// `DropConnection` has no effect on the shop.
pub type FaultKind = TransportFault;

/// One entry of a fault plan: requests number `after .. after + times` (counted
/// from 0 since [`Emulator::set_faults`], every HTTP request including bulk
/// downloads) get `kind`. When entries overlap, the first in the plan wins.
pub type Fault = recon_emulator_kit::Fault<FaultKind>;

/// How the next bulk operation ends, once `bulk_delay` has passed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BulkOutcome {
    /// `COMPLETED`, `url` = `{base_url}/bulk/{n}.jsonl`, `objectCount` = all.
    #[default]
    Completed,
    /// `FAILED`, `errorCode: INTERNAL_SERVER_ERROR`, no `url`, no
    /// `partialDataUrl`.
    Failed,
    /// `CANCELED`, no `url`.
    Canceled,
    /// `EXPIRED` (a completed result whose URL expired), `url: null`.
    Expired,
    /// `FAILED`, `errorCode: INTERNAL_SERVER_ERROR`, `partialDataUrl` =
    /// `{base_url}/bulk/{n}-partial.jsonl` holding the first half of the lines
    /// (rounded down), `objectCount` = that half.
    PartialData,
}

/// An order as the emulator stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderSpec {
    /// The numeric id: `id` is `gid://shopify/Order/{legacy_id}`,
    /// `legacyResourceId` is its decimal string.
    pub legacy_id: u64,
    /// E.g. `"#1001"`.
    pub name: String,
    /// Served as ISO 8601 UTC, whole seconds, `Z` (filters and sorting use the
    /// full precision).
    pub created_at: jiff::Timestamp,
    pub updated_at: jiff::Timestamp,
    /// `totalPriceSet.shopMoney.amount`, exactly as given (Shopify's `Decimal`
    /// is a string: `"29.99"`, `"500.0"`, `"0.100"`).
    pub amount: String,
    /// `currencyCode`, e.g. `"USD"`.
    pub currency: String,
    /// `displayFinancialStatus`, e.g. `"PAID"`.
    pub financial_status: String,
    pub email: Option<String>,
}

impl OrderSpec {
    /// A plausible paid USD order: name `#{legacy_id}`, `updated_at` =
    /// `created_at`, amount `"{legacy_id % 1000}.99"`, email
    /// `customer{legacy_id}@example.com`.
    pub fn example(legacy_id: u64, created_at: jiff::Timestamp) -> OrderSpec {
        OrderSpec {
            legacy_id,
            name: format!("#{legacy_id}"),
            created_at,
            updated_at: created_at,
            amount: format!("{}.99", legacy_id % 1000),
            currency: "USD".to_owned(),
            financial_status: "PAID".to_owned(),
            email: Some(format!("customer{legacy_id}@example.com")),
        }
    }
}

/// Counters since [`Emulator::start`]: the kit's [`Stats`] (`requests`,
/// every HTTP request including dropped connections and bulk downloads;
/// `throttled`, `THROTTLED` GraphQL errors plus HTTP `429`s; `by_status`;
/// `max_in_flight`; read through `Deref` or `transport`) and Shopify's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmulatorStats {
    /// Every emulator's counters.
    pub transport: Stats,
    /// GraphQL operations executed (admitted by the bucket; not counting
    /// invalid, throttled or faulted requests).
    pub queries: u64,
    /// Bulk operations created.
    pub bulk_operations: u64,
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
    /// The token to present in `X-Shopify-Access-Token`.
    pub token: String,
    shared: Arc<Shared>,
    server: Server,
}

impl Emulator {
    /// Binds `127.0.0.1:0` and serves on a tokio task of the current runtime.
    pub async fn start(config: EmulatorConfig) -> std::io::Result<Emulator> {
        let (listener, base_url) = Server::bind().await?;
        let shared = Arc::new(Shared::new(&config, base_url.clone()));
        let app = Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        Ok(Emulator {
            base_url,
            token: config.token,
            shared,
            server: Server::spawn(listener, app),
        })
    }

    /// `{base_url}/admin/api/2025-01/graphql.json`.
    pub fn graphql_url(&self) -> String {
        format!("{}/admin/api/2025-01/graphql.json", self.base_url)
    }

    /// Stores an order (replacing any with the same `legacy_id`).
    pub fn insert_order(&self, order: OrderSpec) {
        self.shared.store.write().unwrap().insert(order);
    }

    /// [`insert_order`](Self::insert_order) for many, taking the lock once.
    pub fn insert_orders(&self, orders: impl IntoIterator<Item = OrderSpec>) {
        let mut store = self.shared.store.write().unwrap();
        for o in orders {
            store.insert(o);
        }
    }

    /// How many orders are stored.
    pub fn order_count(&self) -> usize {
        self.shared.store.read().unwrap().len()
    }

    /// Spends `points` of the bucket now (down to 0), as another app client of
    /// the same shop would.
    pub fn drain_bucket(&self, points: u32) {
        self.shared
            .bucket
            .lock()
            .unwrap()
            .drain(points as u64, Instant::now());
    }

    /// Whole points the bucket holds now (`currentlyAvailable`).
    pub fn currently_available(&self) -> u64 {
        self.shared.bucket.lock().unwrap().available(Instant::now())
    }

    /// Replaces the fault plan; the next request is request number 0 of it.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        self.shared.transport.set_faults(faults);
    }

    /// How the next bulk operation created will end (afterwards the outcome
    /// reverts to [`BulkOutcome::Completed`]).
    pub fn set_bulk_outcome(&self, outcome: BulkOutcome) {
        self.shared.bulk.lock().unwrap().next_outcome = outcome;
    }

    pub fn stats(&self) -> EmulatorStats {
        let mut stats = self.shared.stats.lock().unwrap().clone();
        stats.transport = self.shared.transport.stats();
        stats
    }

    /// Stops accepting connections, lets requests in flight finish (for up to
    /// five seconds), and returns once the server task has ended.
    pub async fn shutdown(mut self) {
        self.server.shutdown().await;
    }
}
