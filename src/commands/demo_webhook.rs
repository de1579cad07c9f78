//! `recon demo --via webhook`: the demo's gaps replayed to an in-process
//! webhook handler instead of written into the ledger.
//!
//! The handler (`crate::webhook::receiver`) is what a careful user would
//! run: it verifies the signature, deduplicates by `Idempotency-Key`
//! (a repeat answers 409), and creates the payment in the demo's SQLite
//! ledger. It fails some deliveries once with 500 before doing anything
//! (recon retries them with the same key) and some after doing the work
//! (the retry is answered 409, "already done"), so the three runs show
//! replay, retry, deduplication and verification end to end.

#![cfg(feature = "demo")]

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::webhook::receiver::{CreateHook, Receiver, ReceiverConfig};
use crate::webhook::Envelope;

/// The demo's shared signing secret (a demo value, not a credential).
const DEMO_SECRET: &str = "whsec_recon_demo_only";

/// Starts the handler on 127.0.0.1; it writes into the ledger at `ledger`.
pub async fn start(ledger: &Path) -> Result<Receiver> {
    let url = format!("sqlite://{}", ledger.display());
    let create: CreateHook = Arc::new(move |charge: serde_json::Value| {
        let url = url.clone();
        Box::pin(async move { insert(&url, &charge).await.map_err(|e| format!("{e:#}")) })
    });
    Receiver::start(ReceiverConfig {
        secret: Some(DEMO_SECRET.into()),
        envelope: Envelope::Stripe,
        fail_once_every: Some(5),
        fail_after_work_once_every: Some(7),
        create: Some(create),
        ..ReceiverConfig::default()
    })
    .await
    .context("starting the demo's webhook handler on 127.0.0.1")
}

/// The handler's creation step: the Stripe charge of `data.object` as a
/// row of the demo ledger.
async fn insert(url: &str, charge: &serde_json::Value) -> Result<()> {
    use sqlx::Connection;
    let text = |k: &str| {
        charge[k]
            .as_str()
            .map(str::to_string)
            .context(k.to_string())
    };
    let created = charge["created"].as_i64().context("created")?;
    let created = jiff::Timestamp::from_second(created)?
        .strftime("%Y-%m-%d %H:%M:%S")
        .to_string();
    let mut conn = sqlx::AnyConnection::connect(url).await?;
    sqlx::query(
        "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(text("id")?)
    .bind(charge["amount"].as_i64().context("amount")?)
    .bind(text("currency")?.to_uppercase())
    .bind(text("status")?)
    .bind(created)
    .execute(&mut conn)
    .await?;
    conn.close().await.ok();
    Ok(())
}

/// The job's webhook route, appended to `[jobs.stripe_charges.backfill]`.
pub fn config(handler: &Receiver) -> String {
    format!(
        r#"via = "webhook"

# Gaps are replayed to the handler (here in-process) as Stripe events,
# signed, at most 20 a second, then looked up in the ledger after 1 s.
[jobs.stripe_charges.backfill.webhook]
url = "{url}"
envelope = "stripe"
event_type = "charge.succeeded"
signing_secret = "{DEMO_SECRET}"
rate_limit = "20/s"
verify_after = "1s"
"#,
        url = handler.url
    )
}

/// What the newcomer is about to see.
pub fn intro(handler: &Receiver) -> String {
    format!(
        "Backfill via webhook: the gaps go to a webhook handler at {} (in this process) that \
         creates the payment in the ledger, deduplicates by Idempotency-Key (repeats get 409) \
         and fails some deliveries once with 500.",
        handler.url
    )
}

/// What the handler saw over the three runs.
pub fn outro(handler: &Receiver) -> String {
    let s = handler.stats();
    let twice = s.created.values().filter(|n| **n > 1).count();
    format!(
        "The handler received {} requests for {} keys: {} answered 500 and retried by recon with \
         the same key, {} answered 409 (already done), {} payments created, {} created twice.",
        s.requests,
        s.per_key.len(),
        s.server_errors,
        s.conflicts,
        s.created.len(),
        twice
    )
}
