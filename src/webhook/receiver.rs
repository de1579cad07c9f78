//! An in-process webhook handler on 127.0.0.1, for `recon demo --via
//! webhook` and the tests: it behaves like a careful user's handler.
//!
//! - It verifies `Recon-Signature` when given the secret (401 otherwise).
//! - It deduplicates by `Idempotency-Key`: a key it has processed answers
//!   409, so a repeat never creates twice.
//! - It "creates" through a hook (the demo writes the demo ledger), or
//!   acknowledges without creating (a broken handler, for the
//!   `delivered_not_created` case).
//! - Faults: the first delivery of every n-th key answers 500 (before any
//!   work, so the retry does it); a latency before every answer; a slow
//!   first answer per key (after the work, so a client that times out and
//!   retries finds it done: 409).
//!
//! Compiled with the `demo` feature (axum).

#![cfg(feature = "demo")]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

use super::{Envelope, IDEMPOTENCY_HEADER, SIGNATURE_HEADER};

/// What the handler does with an accepted delivery: creates the record
/// (the object inside the envelope), or says why it cannot.
pub type CreateHook = Arc<
    dyn Fn(serde_json::Value) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// How the receiver behaves.
#[derive(Clone, Default)]
pub struct ReceiverConfig {
    /// Verify `Recon-Signature` with this secret; 401 when it does not match.
    pub secret: Option<String>,
    /// How bodies are wrapped (the record is `data.object` for `stripe`).
    pub envelope: Envelope,
    /// Sleep before every answer.
    pub latency: Duration,
    /// The first delivery of every n-th new key answers 500 (before the work).
    pub fail_once_every: Option<usize>,
    /// The first delivery of every n-th new key does the work, then answers
    /// 500 (the handler died before answering): the retry finds it done (409).
    pub fail_after_work_once_every: Option<usize>,
    /// The first answer for each key comes this late (after the work).
    pub slow_first: Option<Duration>,
    /// Creates the record; `None` acknowledges without creating anything.
    pub create: Option<CreateHook>,
    /// The first this-many requests answer 429 with `Retry-After` (a
    /// handler behind a gateway that says "slow down"), before any work.
    pub throttle_first: usize,
    /// The `Retry-After` of those answers, in seconds.
    pub throttle_retry_after: u64,
}

/// What the receiver saw.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Requests received.
    pub requests: usize,
    /// Requests per idempotency key.
    pub per_key: HashMap<String, usize>,
    /// Records created per key (more than 1 would be a double creation).
    pub created: HashMap<String, usize>,
    /// 409 answers.
    pub conflicts: usize,
    /// 500 answers (planted faults).
    pub server_errors: usize,
    /// 401 answers (signature missing or wrong).
    pub bad_signatures: usize,
    /// Requests without an `Idempotency-Key`.
    pub without_key: usize,
    /// Every header value received, for checks that no secret leaked.
    pub bodies: Vec<String>,
    /// When the last request arrived (the handler's clock).
    pub last_request_at: Option<jiff::Timestamp>,
    /// 429 answers, and when the first was given.
    pub throttled: usize,
    pub first_throttled_at: Option<std::time::Instant>,
    /// When the first request after the 429s arrived.
    pub first_after_throttle_at: Option<std::time::Instant>,
}

#[derive(Default)]
struct Book {
    stats: Stats,
    /// Keys processed: a repeat answers 409.
    done: HashSet<String>,
    /// Keys seen at least once (for the planted faults).
    seen: HashSet<String>,
    /// Keys whose first answer was slowed already.
    slowed: HashSet<String>,
}

struct Shared {
    cfg: ReceiverConfig,
    book: Mutex<Book>,
}

/// A running receiver. Dropping it stops the server.
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start(cfg: ReceiverConfig) -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cfg,
            book: Mutex::new(Book::default()),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver {
            url: format!("http://{addr}/hook"),
            shared,
            task,
        })
    }

    /// What it saw so far.
    pub fn stats(&self) -> Stats {
        self.book().stats.clone()
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.shared.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Checks `t=…,v1=…` against HMAC-SHA256(secret, "t.body").
pub fn verify_signature(secret: &str, header: &str, body: &str) -> bool {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1.push(v.to_string()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    // Stripe's default tolerance: five minutes.
    if (jiff::Timestamp::now().as_second() - t).abs() > 300 {
        return false;
    }
    let want = super::signature(secret, t, body);
    v1.iter().any(|v| want.ends_with(&format!("v1={v}")))
}

fn answer(status: StatusCode, text: &str) -> Response {
    (status, text.to_string()).into_response()
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    // On its own task: a client that goes away (recon killed mid-delivery)
    // does not cancel the handler halfway, between claiming the key and
    // creating the record, as hyper would by dropping this future. Like
    // most real handlers, the work runs to its end.
    tokio::spawn(process(shared, headers, body))
        .await
        .unwrap_or_else(|_| answer(StatusCode::INTERNAL_SERVER_ERROR, "handler panicked"))
}

async fn process(shared: Arc<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let cfg = &shared.cfg;
    let lock = || shared.book.lock().unwrap_or_else(|e| e.into_inner());
    let text = String::from_utf8_lossy(&body).into_owned();
    let key = headers
        .get(IDEMPOTENCY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    {
        let mut b = lock();
        b.stats.requests += 1;
        b.stats.last_request_at = Some(jiff::Timestamp::now());
        let mut seen: Vec<String> = headers
            .iter()
            .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v.as_bytes())))
            .collect();
        seen.push(text.clone());
        b.stats.bodies.push(seen.join("\n"));
        match &key {
            Some(k) => *b.stats.per_key.entry(k.clone()).or_default() += 1,
            None => b.stats.without_key += 1,
        }
    }
    {
        let mut b = lock();
        if b.stats.throttled < cfg.throttle_first {
            b.stats.throttled += 1;
            b.stats
                .first_throttled_at
                .get_or_insert_with(std::time::Instant::now);
            let retry_after = cfg.throttle_retry_after.to_string();
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(axum::http::header::RETRY_AFTER, retry_after)],
                "slow down",
            )
                .into_response();
        }
        if b.stats.throttled > 0 {
            b.stats
                .first_after_throttle_at
                .get_or_insert_with(std::time::Instant::now);
        }
    }
    tokio::time::sleep(cfg.latency).await;
    let Some(key) = key else {
        return answer(StatusCode::BAD_REQUEST, "missing Idempotency-Key");
    };
    if let Some(secret) = &cfg.secret {
        let sig = headers
            .get(SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !verify_signature(secret, sig, &text) {
            lock().stats.bad_signatures += 1;
            return answer(StatusCode::UNAUTHORIZED, "signature does not match");
        }
    }
    let fail_after_work = {
        let mut b = lock();
        if b.done.contains(&key) {
            b.stats.conflicts += 1;
            return answer(StatusCode::CONFLICT, "already processed");
        }
        let new = b.seen.insert(key.clone());
        let nth = |n: Option<usize>| n.is_some_and(|n| new && (b.seen.len() - 1) % n.max(1) == 0);
        if nth(cfg.fail_once_every) {
            b.stats.server_errors += 1;
            return answer(StatusCode::INTERNAL_SERVER_ERROR, "planted failure, retry");
        }
        let fail_after_work = nth(cfg.fail_after_work_once_every);
        // Claimed before the work, so a concurrent repeat gets 409.
        b.done.insert(key.clone());
        fail_after_work
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            lock().done.remove(&key);
            return answer(StatusCode::BAD_REQUEST, &format!("body is not JSON: {e}"));
        }
    };
    let object = match cfg.envelope.provider() {
        Some(e) => e.unwrap(value),
        None => value,
    };
    if let Some(create) = &cfg.create {
        if let Err(e) = create(object).await {
            lock().done.remove(&key);
            return answer(StatusCode::UNPROCESSABLE_ENTITY, &e);
        }
        *lock().stats.created.entry(key.clone()).or_default() += 1;
    }
    if fail_after_work {
        lock().stats.server_errors += 1;
        return answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed after doing the work",
        );
    }
    if let Some(slow) = cfg.slow_first {
        if lock().slowed.insert(key.clone()) {
            tokio::time::sleep(slow).await;
        }
    }
    answer(StatusCode::OK, "{\"received\":true}")
}
