//! An emulator of REST APIs in the paging styles the declarative connector
//! supports (feature `emulator`), on 127.0.0.1, for tests and the examples
//! in `examples/http/`. One store of charges ("items") is served in five
//! documented styles, and a JSON REST collection ("records") takes writes.
//!
//! | route | style, after | documented behaviour emulated |
//! |---|---|---|
//! | `GET /link/items` | GitHub REST | `page`/`per_page`, a bare JSON array, the RFC 8288 `Link` header with `rel="next"` and `rel="last"`, `since`/`until` filters (RFC 3339), `X-RateLimit-Remaining` and `X-RateLimit-Reset` (a Unix time), `X-GitHub-Request-Id`: <https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api>, <https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api> |
//! | `GET /offset/items` | Pipedrive v1 | `start`/`limit`, `{"success", "data", "additional_data": {"pagination": {"start", "limit", "more_items_in_collection", "next_start"}}}`, no date filter (the window is filtered by the client), `add_time` as `YYYY-MM-DD HH:MM:SS` in UTC, the API token in the `api_token` query parameter: <https://pipedrive.readme.io/docs/core-api-concepts-pagination> |
//! | `GET /page/items` | Harvest v2 | `page`/`per_page`, `total_pages`, `next_page`, `from`/`to` date filters (both days included), amounts as decimal numbers in major units: <https://help.getharvest.com/api-v2/introduction/overview/pagination/> |
//! | `GET /next/items` | Zendesk cursor pagination | `page[size]`, `links.next` (a whole URL with `page[after]`, `null` on the last page), `meta.has_more`, `start_time`/`end_time` (Unix seconds), the IETF draft's `ratelimit-remaining` and `ratelimit-reset` headers: <https://developer.zendesk.com/api-reference/introduction/pagination/>, <https://developer.zendesk.com/documentation/api-basics/best-practices/best-practices-for-avoiding-rate-limiting> |
//! | `POST /notion/v1/databases/{id}/query` | Notion | the paging parameters in the JSON body (`start_cursor`, `page_size` ≤ 100), `{"object": "list", "results", "next_cursor", "has_more"}`, a `created_time` timestamp filter (`on_or_after`, `before`, under `and`), the `Notion-Version` header required, values nested in typed property objects: <https://developers.notion.com/reference/intro#pagination>, <https://developers.notion.com/reference/post-database-query-filter#timestamp> |
//! | `POST /records`, `GET /records/{external_id}`, `GET /records`, `PUT /records/{external_id}` | a JSON REST target | create with a unique `external_id` (a second create is `409` with code `duplicate_external_id`, RFC 9110 section 15.5.10), `Idempotency-Key` replaying the first answer of a key as Stripe does (<https://docs.stripe.com/api/idempotent_requests>), `422` with code `amount_invalid` for a negative amount, `404` with code `not_found`, offset/limit listing with `total`, or the records of `ids=a,b` (at most 100) |
//! | `POST /oauth/token` | OAuth 2.0 | client credentials grant (RFC 6749 section 4.4) and refresh grant (section 6) with a rotating refresh token, client by Basic or form (section 2.3.1); `{"access_token", "token_type": "Bearer", "expires_in", "refresh_token"?}`, errors `{"error": "invalid_grant" | "invalid_client"}` (section 5.2) |
//!
//! Every route but the token endpoint takes the emulator's token as
//! `Authorization: Bearer`, as `Authorization: Basic` (the token as user
//! name), as `X-Api-Key` or as the `api_token` query parameter, or an
//! access token the token endpoint issued; anything else is `401`.
//!
//! **Strict rate counter**: with [`EmulatorConfig::rate_limit`] `(n,
//! interval)`, a request that would make any window of `interval` hold
//! more than `n` requests is answered `429` with `Retry-After` and counted
//! in [`EmulatorStats::over_limit`]; a client pacing at the declared rate
//! never sees one. Faults come from the emulator kit's transport plan
//! ([`Emulator::set_faults`]): `429` (with `Retry-After: 1`), `500`, `503`,
//! malformed and truncated bodies, dropped connections, and `5xx` or a
//! dropped connection after the work is done (the answer lost).

mod server;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
/// The kit's fault plan entries and transport faults, for [`Emulator::set_faults`].
pub use recon_emulator_kit::{Fault, Stats, TransportFault};
use recon_emulator_kit::{FaultPlan, Server, Transport};
use serde_json::Value as Json;
use tokio::time::Instant;

/// How the emulator behaves.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// The token every route takes.
    pub token: String,
    /// The OAuth client ID and secret of the token endpoint.
    pub client: (String, String),
    /// The refresh token the token endpoint takes first; each refresh grant
    /// replaces it with a new one and the old one is refused from then on
    /// (`invalid_grant`), as rotating providers do (RFC 6749 section 6:
    /// "the authorization server MAY issue a new refresh token, in which
    /// case the client MUST discard the old refresh token").
    pub refresh_token: String,
    /// At most this many requests in any window of this length.
    pub rate_limit: Option<(u32, Duration)>,
    /// Delay before every answer.
    pub latency: Duration,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            token: "emu_token_5b0c9d2e7f41a8".into(),
            client: ("emu_client".into(), "emu_client_secret_73ac1e".into()),
            refresh_token: "emu_rt_0_c41d7a9e2b".into(),
            rate_limit: None,
            latency: Duration::ZERO,
        }
    }
}

/// One charge of the store, served in each style's own shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Numeric ID (styles with string IDs prefix it: `it_42`).
    pub id: u64,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217, upper case.
    pub currency: String,
    /// `paid`, `open`, …
    pub status: String,
    /// Unix seconds.
    pub created: i64,
}

/// Counters since [`Emulator::start`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmulatorStats {
    /// The kit's counters (requests, statuses, throttled).
    pub transport: Stats,
    /// Requests refused by the strict rate counter.
    pub over_limit: u64,
    /// Records created by `POST /records` (replays not counted).
    pub creates: u64,
    /// Answers replayed for a repeated `Idempotency-Key`.
    pub replays: u64,
    /// Records changed by `PUT /records/{external_id}`.
    pub updates: u64,
    /// Access tokens issued and not expired.
    pub tokens: u64,
}

impl EmulatorStats {
    /// `401` answers sent.
    pub fn by_401(&self) -> u64 {
        self.transport.by_status.get(&401).copied().unwrap_or(0)
    }
}

pub(crate) struct Shared {
    config: EmulatorConfig,
    transport: Transport,
    /// Faults of `POST /records` alone, counted over those requests.
    create_faults: Mutex<FaultPlan<TransportFault>>,
    store: Mutex<Store>,
    arrivals: Mutex<VecDeque<Instant>>,
}

#[derive(Default)]
pub(crate) struct Store {
    items: Vec<Item>,
    /// `POST /records` records in creation order.
    records: Vec<Json>,
    /// Idempotency key → (status, body) of its first answer.
    idempotent: HashMap<String, (u16, Json)>,
    tokens: Vec<String>,
    /// The one refresh token the endpoint takes now (`None`: revoked), and
    /// how many refresh grants it answered.
    refresh: Option<String>,
    refreshes: u64,
    over_limit: u64,
    creates: u64,
    replays: u64,
    updates: u64,
}

impl Shared {
    /// Counts one arrival; `Some(seconds to wait)` when it is over the limit.
    fn admit(&self) -> Option<u64> {
        let (n, interval) = self.config.rate_limit?;
        let now = Instant::now();
        let mut a = self.arrivals.lock().unwrap();
        while a
            .front()
            .is_some_and(|t| now.duration_since(*t) >= interval)
        {
            a.pop_front();
        }
        if a.len() as u64 >= u64::from(n) {
            self.store.lock().unwrap().over_limit += 1;
            let wait = a.front().map_or(interval, |t| {
                interval.saturating_sub(now.duration_since(*t))
            });
            return Some(wait.as_secs().max(1));
        }
        a.push_back(now);
        None
    }

    /// What remains of the current window, and seconds until it frees a slot.
    fn remaining(&self) -> Option<(u32, u64)> {
        let (n, interval) = self.config.rate_limit?;
        let now = Instant::now();
        let a = self.arrivals.lock().unwrap();
        let used = a
            .iter()
            .filter(|t| now.duration_since(**t) < interval)
            .count() as u32;
        let reset = a.front().map_or(interval, |t| {
            interval.saturating_sub(now.duration_since(*t))
        });
        Some((n.saturating_sub(used), reset.as_secs().max(1)))
    }
}

/// A running emulator. Dropping it stops the server (without waiting).
pub struct Emulator {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub base_url: String,
    /// The token every route takes.
    pub token: String,
    shared: Arc<Shared>,
    server: Server,
}

impl Emulator {
    /// Binds `127.0.0.1:0` and serves on a task of the current runtime.
    pub async fn start(config: EmulatorConfig) -> std::io::Result<Emulator> {
        let (listener, base_url) = Server::bind().await?;
        let token = config.token.clone();
        let refresh = Some(config.refresh_token.clone());
        let shared = Arc::new(Shared {
            transport: Transport::new(config.latency),
            create_faults: Mutex::new(FaultPlan::default()),
            config,
            store: Mutex::new(Store {
                refresh,
                ..Store::default()
            }),
            arrivals: Mutex::new(VecDeque::new()),
        });
        let app = Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        Ok(Emulator {
            base_url,
            token,
            shared,
            server: Server::spawn(listener, app),
        })
    }

    /// Adds charges to the store.
    pub fn insert_items(&self, items: impl IntoIterator<Item = Item>) {
        self.shared.store.lock().unwrap().items.extend(items);
    }

    /// Adds a record to the `/records` collection as if created before.
    pub fn insert_record(&self, record: Json) {
        self.shared.store.lock().unwrap().records.push(record);
    }

    /// The `/records` collection, in creation order.
    pub fn records(&self) -> Vec<Json> {
        self.shared.store.lock().unwrap().records.clone()
    }

    /// Replaces the fault plan; the next request is number 0 of it.
    pub fn set_faults(&self, faults: Vec<Fault<TransportFault>>) {
        self.shared.transport.set_faults(faults);
    }

    /// Faults for `POST /records` only, numbered over those requests (the
    /// shared plan's fault wins when both name one).
    pub fn set_create_faults(&self, faults: Vec<Fault<TransportFault>>) {
        *self.shared.create_faults.lock().unwrap() = FaultPlan::new(faults);
    }

    /// Counters so far.
    pub fn stats(&self) -> EmulatorStats {
        let s = self.shared.store.lock().unwrap();
        EmulatorStats {
            transport: self.shared.transport.stats(),
            over_limit: s.over_limit,
            creates: s.creates,
            replays: s.replays,
            updates: s.updates,
            tokens: s.tokens.len() as u64,
        }
    }

    /// Forgets every access token issued (as when they expire).
    pub fn expire_tokens(&self) {
        self.shared.store.lock().unwrap().tokens.clear();
    }

    /// The refresh token the token endpoint takes now (`None`: revoked).
    pub fn refresh_token(&self) -> Option<String> {
        let s = self.shared.store.lock().unwrap();
        s.refresh.clone()
    }

    /// Refresh grants answered so far.
    pub fn refreshes(&self) -> u64 {
        self.shared.store.lock().unwrap().refreshes
    }

    /// Revokes the refresh token (the user disconnected the app): every
    /// refresh grant is `invalid_grant` from now on.
    pub fn revoke_refresh_token(&self) {
        self.shared.store.lock().unwrap().refresh = None;
    }

    /// Stops the server and waits for it.
    pub async fn shutdown(mut self) {
        self.server.shutdown().await;
    }
}
