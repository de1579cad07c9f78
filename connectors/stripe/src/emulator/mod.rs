//! An emulator of Stripe's API, served over real HTTP on `127.0.0.1`, for tests,
//! benchmarks and the offline demo.
//!
//! It serves the read side of seven resources — `GET /v1/{charges,
//! payment_intents, invoices, refunds, customers, balance_transactions,
//! payouts}` (list) and `GET /v1/<resource>/<id>` (retrieve) — with Stripe's
//! documented semantics:
//!
//! * **Auth.** `Authorization: Bearer <key>` or HTTP basic auth with the key as
//!   the username. Anything else is a `401` with Stripe's body, the presented key
//!   masked as Stripe masks it (`sk_test_****…last4`), plus
//!   `WWW-Authenticate: Basic realm="Stripe"`.
//! * **Headers.** Every response carries a unique `Request-Id: req_…` and
//!   `Content-Type: application/json`.
//! * **Lists.** Newest first (`created` desc; ties by id desc — the emulator's
//!   deterministic choice, Stripe documents none), `limit` 1..=100 (default 10),
//!   `starting_after` / `ending_before` cursors, `created` as an integer or
//!   `created[gt|gte|lt|lte]`, `expand[]` accepted; any other parameter is
//!   Stripe's `400 parameter_unknown`. See the `store` module for how pages stay
//!   O(log n + limit) at hundreds of thousands of objects.
//! * **Finance lists.** Balance transactions
//!   (<https://docs.stripe.com/api/balance_transactions/list>: "sorted
//!   order, with the most recent transactions appearing first") also take
//!   `type`, `source` (the object's `source` ID), `currency` and `payout`
//!   (the transactions an automatic payout paid out, linked with
//!   [`Emulator::pay_out`]); payouts
//!   (<https://docs.stripe.com/api/payouts/list>: "the most recently
//!   created payouts appearing first") take `status`, `destination` and
//!   `arrival_date` as a range like `created`. Retrieves are
//!   `GET /v1/balance_transactions/{id}`
//!   (<https://docs.stripe.com/api/balance_transactions/retrieve>) and
//!   `GET /v1/payouts/{payout}` (<https://docs.stripe.com/api/payouts/retrieve>),
//!   404 `resource_missing` "No such balance_transaction: 'txn_x'" as for
//!   the other kinds. The objects' shapes are checked against Stripe's
//!   OpenAPI schema in `tests/spec.rs`. Not emulated: Stripe's refusal of
//!   `payout=` for a manual payout (its message is not in any source read),
//!   and validation of `currency` and `status` values (any value filters).
//! * **Errors.** Stripe's error body `{"error": {"code", "doc_url", "message",
//!   "param", "type"}}`, e.g. `404 resource_missing` "No such charge: 'ch_x'".
//! * **Rate limit, latency, faults** — see [`EmulatorConfig`], [`RateLimitMode`]
//!   (a token bucket, strict fixed one-second windows, or any one second
//!   (sliding), with other clients spending a share; [`Emulator::arrivals`]
//!   lists what the limiter decided, for counts per second) and
//!   [`FaultKind`].
//!
//! Order of decisions for each request: it is counted and matched against the
//! fault plan on arrival; an injected error fault answers without auth or rate
//! limiting; otherwise auth, then the rate limiter, then routing. The response
//! (whatever it is) is sent after `latency` (plus the `Slow` delay, if any).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};
//! let emu = Emulator::start(EmulatorConfig::default()).await?;
//! emu.insert(ObjectKind::Charge, Emulator::charge("ch_1", 1000, "usd", "succeeded", 1_700_000_000));
//! // GET {emu.base_url}/v1/charges with `Authorization: Bearer {emu.api_key}`
//! emu.shutdown().await;
//! # Ok(()) }
//! ```

mod builders;
mod faults;
mod server;
mod store;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use recon_emulator_kit::{Server, TransportFault};
use serde_json::Value;

use server::Shared;
use store::Attrs;

/// How an [`Emulator`] behaves.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// The one key the emulator accepts. Default `"sk_test_emulator"`.
    pub api_key: String,
    /// `Some(n)`: a token bucket of capacity `n` refilled at `n` per second
    /// (a burst of `n`, then `n` per second); requests finding it empty get
    /// Stripe's `429 rate_limit`. `None`: unlimited.
    pub rate_limit_per_sec: Option<u32>,
    /// Added before every response. Requests are served concurrently, so this
    /// models network/server latency without limiting throughput.
    pub latency: Duration,
    /// How `rate_limit_per_sec` is counted (default a token bucket).
    pub rate_limit_mode: RateLimitMode,
    /// Percent of `rate_limit_per_sec` that other clients of the account
    /// spend (0..=100, default 0): they take their share of each window
    /// first (strict mode), or of the bucket's refill (token bucket).
    pub others_percent: u32,
}

/// How the emulator counts requests against `rate_limit_per_sec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RateLimitMode {
    /// A token bucket of capacity `n` refilled at `n` per second (Stripe's
    /// engineering blog describes its limiter as a token bucket).
    #[default]
    TokenBucket,
    /// Strict counting: at most `n` requests in each one-second window
    /// (fixed windows from the emulator's start); the rest get Stripe's
    /// `429 rate_limit` body. Rejected requests are not counted. This is the
    /// literal reading of "n requests per second"
    /// (https://docs.stripe.com/rate-limits): a client that keeps every
    /// one-second window at or under `n` is never throttled.
    PerSecondWindow,
    /// The strictest reading: at most `n` requests in any one second ending
    /// at an arrival (a sliding log of the last second), other clients'
    /// share spread evenly over it. A client whose every one-second span
    /// holds at most `n` arrivals is never throttled; one that lets two
    /// requests bunch at a fixed window's boundary is.
    SlidingWindow,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            api_key: "sk_test_emulator".to_owned(),
            rate_limit_per_sec: None,
            latency: Duration::ZERO,
            rate_limit_mode: RateLimitMode::TokenBucket,
            others_percent: 0,
        }
    }
}

/// The resources the emulator serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Charge,
    PaymentIntent,
    Invoice,
    Refund,
    Customer,
    BalanceTransaction,
    Payout,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 7] = [
        ObjectKind::Charge,
        ObjectKind::PaymentIntent,
        ObjectKind::Invoice,
        ObjectKind::Refund,
        ObjectKind::Customer,
        ObjectKind::BalanceTransaction,
        ObjectKind::Payout,
    ];

    /// The path segment after `/v1/`, e.g. `"payment_intents"`.
    pub fn path(self) -> &'static str {
        match self {
            ObjectKind::Charge => "charges",
            ObjectKind::PaymentIntent => "payment_intents",
            ObjectKind::Invoice => "invoices",
            ObjectKind::Refund => "refunds",
            ObjectKind::Customer => "customers",
            ObjectKind::BalanceTransaction => "balance_transactions",
            ObjectKind::Payout => "payouts",
        }
    }

    /// The value of the objects' `"object"` field, also the noun in Stripe's
    /// "No such <noun>: '<id>'" messages, e.g. `"payment_intent"`.
    pub fn object_name(self) -> &'static str {
        match self {
            ObjectKind::Charge => "charge",
            ObjectKind::PaymentIntent => "payment_intent",
            ObjectKind::Invoice => "invoice",
            ObjectKind::Refund => "refund",
            ObjectKind::Customer => "customer",
            ObjectKind::BalanceTransaction => "balance_transaction",
            ObjectKind::Payout => "payout",
        }
    }

    pub fn from_path(segment: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.path() == segment)
    }
}

/// Stripe's own fault, beyond the transport faults every emulator has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StripeFault {
    /// `429`, code `lock_timeout`, with `Stripe-Should-Retry: true`.
    LockTimeout,
}

/// A fault to inject instead of (or on top of) the normal response: the
/// kit's transport faults, answered with Stripe's bodies — `RateLimited` a
/// `429` with code `rate_limit`, `ServerError` a `500` and `Unavailable` a
/// `503` of type `api_error` — plus [`StripeFault`]s as `Provider(..)`.
pub type FaultKind = TransportFault<StripeFault>;

/// One entry of a fault plan: requests number `after .. after + times` (counted
/// from 0 since [`Emulator::set_faults`]) get `kind`. When entries overlap, the
/// first in the plan wins.
pub type Fault = recon_emulator_kit::Fault<FaultKind>;

/// One request the rate limiter decided on (see [`Emulator::arrivals`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When it arrived, from [`Emulator::start`] (the origin of the fixed
    /// windows of [`RateLimitMode::PerSecondWindow`]).
    pub at: Duration,
    /// Whether the limiter let it through (else it got a `429`).
    pub admitted: bool,
}

/// One request as the emulator received it (see [`Emulator::requests`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedRequest {
    /// `GET`, …
    pub method: String,
    /// The path, e.g. `/v1/payouts/po_1`.
    pub path: String,
    /// The query parameters in order, names and values percent-decoded
    /// (`created[gte]`).
    pub query: Vec<(String, String)>,
}

/// Counters since [`Emulator::start`]: the kit's (`throttled` counts the
/// `429`s of the rate limiter and of faults).
pub type EmulatorStats = recon_emulator_kit::Stats;

/// A running emulator. Dropping it stops the server too (without waiting).
pub struct Emulator {
    /// `"http://127.0.0.1:PORT"`, no trailing slash.
    pub base_url: String,
    /// The key to present (`Authorization: Bearer <api_key>`).
    pub api_key: String,
    shared: Arc<Shared>,
    server: Server,
}

impl Emulator {
    /// Binds `127.0.0.1:0` and serves on a tokio task of the current runtime.
    pub async fn start(config: EmulatorConfig) -> std::io::Result<Emulator> {
        let (listener, base_url) = Server::bind().await?;
        let shared = Arc::new(Shared::new(&config));
        let app = Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        Ok(Emulator {
            base_url,
            api_key: config.api_key,
            shared,
            server: Server::spawn(listener, app),
        })
    }

    /// Stores `object` (replacing any object of this kind with the same id).
    /// It must have a string `"id"` and an integer `"created"`; it is stored and
    /// served as given, except that a missing `"object"` field is filled in.
    ///
    /// # Panics
    /// If `"id"` or `"created"` is missing or mistyped.
    pub fn insert(&self, kind: ObjectKind, object: Value) {
        let (id, created, json, attrs) = prepare(kind, object);
        self.shared
            .store
            .write()
            .unwrap()
            .insert(kind, id, created, json, attrs);
    }

    /// [`insert`](Self::insert) for many objects, taking the store's lock once
    /// (objects are serialized before it is taken).
    pub fn insert_many(&self, kind: ObjectKind, objects: impl IntoIterator<Item = Value>) {
        let prepared: Vec<_> = objects.into_iter().map(|o| prepare(kind, o)).collect();
        let mut store = self.shared.store.write().unwrap();
        for (id, created, json, attrs) in prepared {
            store.insert(kind, id, created, json, attrs);
        }
    }

    /// Records that the automatic payout `payout` paid out the balance
    /// transactions `txns`: `GET /v1/balance_transactions?payout={payout}`
    /// then lists them ("For automatic Stripe payouts only, only returns
    /// transactions that were paid out on the specified payout ID",
    /// <https://docs.stripe.com/api/balance_transactions/list>). A balance
    /// transaction does not name its payout, so the link is kept beside it.
    pub fn pay_out(&self, payout: &str, txns: &[&str]) {
        let txns: Vec<String> = txns.iter().map(|t| (*t).to_owned()).collect();
        self.shared.store.write().unwrap().pay_out(payout, &txns);
    }

    /// Every request received since [`Emulator::start`] (the first 100,000,
    /// so that a long-running server stays bounded), in arrival order:
    /// method, path and query parameters as sent (percent-decoded), for
    /// tests of what a client asks.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Removes an object. A deleted customer still answers a retrieve, as on
    /// Stripe, with `{"id": …, "object": "customer", "deleted": true}` (and is
    /// no longer listed); other kinds simply become `404 resource_missing`.
    pub fn delete(&self, kind: ObjectKind, id: &str) {
        self.shared.store.write().unwrap().delete(kind, id);
    }

    /// How many (non-deleted) objects of `kind` are stored.
    pub fn count(&self, kind: ObjectKind) -> usize {
        self.shared.store.read().unwrap().len(kind)
    }

    /// Replaces the fault plan; the next request is request number 0 of it.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        self.shared.transport.set_faults(faults);
    }

    pub fn stats(&self) -> EmulatorStats {
        self.shared.transport.stats()
    }

    /// Every request the rate limiter decided on, in arrival order (empty
    /// without `rate_limit_per_sec`): how many each second held, for
    /// benchmarks of a client's pacing. Faults and 401s are not in it.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.arrivals.lock().unwrap().clone()
    }

    /// Stops accepting connections, lets requests in flight finish (for up to
    /// five seconds), and returns once the server task has ended.
    pub async fn shutdown(mut self) {
        self.server.shutdown().await;
    }

    /// A full Charge object per Stripe's API reference. `currency` is
    /// lowercased; `status` is `"succeeded"`, `"pending"` or `"failed"` (a failed
    /// charge is not paid or captured and carries `card_declined`). The
    /// customer, billing details, receipt email, card and description are
    /// derived from `id`; `payment_intent` is `pi_` + the id's suffix.
    pub fn charge(id: &str, amount: i64, currency: &str, status: &str, created: i64) -> Value {
        builders::charge(id, amount, currency, status, created)
    }

    /// A PaymentIntent object. `latest_charge` is `ch_` + the id's suffix when
    /// the status implies a charge (`succeeded`, `processing`,
    /// `requires_capture`).
    pub fn payment_intent(
        id: &str,
        amount: i64,
        currency: &str,
        status: &str,
        created: i64,
    ) -> Value {
        builders::payment_intent(id, amount, currency, status, created)
    }

    /// A Refund object of `charge`.
    pub fn refund(
        id: &str,
        charge: &str,
        amount: i64,
        currency: &str,
        status: &str,
        created: i64,
    ) -> Value {
        builders::refund(id, charge, amount, currency, status, created)
    }

    /// A Customer object.
    pub fn customer(id: &str, email: &str, name: &str, created: i64) -> Value {
        builders::customer(id, email, name, created)
    }

    /// An Invoice object; `status` is one of `draft`, `open`, `paid`,
    /// `uncollectible`, `void`.
    pub fn invoice(
        id: &str,
        customer: &str,
        amount_due: i64,
        currency: &str,
        status: &str,
        created: i64,
    ) -> Value {
        builders::invoice(id, customer, amount_due, currency, status, created)
    }

    /// A BalanceTransaction object per
    /// <https://docs.stripe.com/api/balance_transactions/object>: `net` is
    /// `amount - fee`, `fee_details` one `stripe_fee` of `fee` when it is
    /// not zero, `available_on` two days after `created` and `status`
    /// `available`, `reporting_category` derived from `kind` (the `type`)
    /// per <https://docs.stripe.com/reports/reporting-categories>. Amounts
    /// are signed: a refund's or a payout's are negative. Change any field
    /// before inserting (e.g. `status: "pending"`).
    pub fn balance_transaction(
        id: &str,
        amount: i64,
        fee: i64,
        currency: &str,
        kind: &str,
        source: Option<&str>,
        created: i64,
    ) -> Value {
        builders::balance_transaction(id, amount, fee, currency, kind, source, created)
    }

    /// A Payout object per <https://docs.stripe.com/api/payouts/object>:
    /// automatic, `standard`, to a bank account derived from `id`, with
    /// its balance transaction `txn_` + the id's suffix; a `failed` payout
    /// carries `failure_code` `account_closed` and a
    /// `failure_balance_transaction`.
    pub fn payout(
        id: &str,
        amount: i64,
        currency: &str,
        status: &str,
        created: i64,
        arrival_date: i64,
    ) -> Value {
        builders::payout(id, amount, currency, status, created, arrival_date)
    }

    /// The customer id [`Emulator::charge`] (and `payment_intent`) assign to an
    /// object id, so callers can insert matching customers.
    pub fn customer_id_for(id: &str) -> String {
        builders::customer_for(id)
    }
}

/// An ID field that may be expanded: the string, or the object's `id`.
fn id_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("id").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// What the per-kind list filters test, read from the object once.
fn attrs_of(kind: ObjectKind, object: &serde_json::Map<String, Value>) -> Option<Box<Attrs>> {
    let text = |f: &str| object.get(f).and_then(Value::as_str).map(str::to_owned);
    match kind {
        ObjectKind::BalanceTransaction => Some(Box::new(Attrs {
            kind: text("type"),
            currency: text("currency"),
            source: id_of(object.get("source")),
            ..Attrs::default()
        })),
        ObjectKind::Payout => Some(Box::new(Attrs {
            currency: text("currency"),
            status: text("status"),
            destination: id_of(object.get("destination")),
            arrival_date: object.get("arrival_date").and_then(Value::as_i64),
            ..Attrs::default()
        })),
        _ => None,
    }
}

type Prepared = (String, i64, Arc<str>, Option<Box<Attrs>>);

fn prepare(kind: ObjectKind, mut object: Value) -> Prepared {
    let map = object
        .as_object_mut()
        .expect("emulator insert: the object must be a JSON object");
    let id = map
        .get("id")
        .and_then(Value::as_str)
        .expect("emulator insert: the object must have a string \"id\"")
        .to_owned();
    let created = map
        .get("created")
        .and_then(Value::as_i64)
        .expect("emulator insert: the object must have an integer \"created\"");
    map.entry("object")
        .or_insert_with(|| Value::from(kind.object_name()));
    let attrs = attrs_of(kind, map);
    // `Display` rather than `serde_json::to_string`: it is compiled inside
    // serde_json (optimized even in debug builds of this crate), the generic
    // `to_string::<Value>` would be instantiated here, unoptimized, ~2x slower.
    let json: Arc<str> = Arc::from(object.to_string());
    (id, created, json, attrs)
}
