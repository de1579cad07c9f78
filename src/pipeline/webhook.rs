//! Stage 7 for `backfill.via = "webhook"`: gaps replayed to the user's
//! endpoint instead of written into the target (see [`crate::webhook`]).
//!
//! | step | what |
//! |---|---|
//! | [`prepare`] | each gap → its body (the source's own JSON, enveloped) and idempotency key |
//! | [`deliver`] | ledger `planned` → POST (rate limited, retried with the same key) → ledger outcome |
//! | verify | wait `verify_after`, look the delivered keys up in the target; also the deliveries of earlier runs not yet found |
//!
//! Exactly once: the delivery ledger (`recon_webhook_deliveries`) records
//! each item before its POST and its outcome after. An item delivered (2xx)
//! or already done (409) is never sent again under its key, by this run or
//! any later one (a later run that still sees the gap reports it
//! `delivered_not_created`; a record replaced under its ID has a new key
//! and is sent);
//! an item left `planned` by a crash is sent again with the same
//! `Idempotency-Key`, which the handler deduplicates.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use recon_core::{Record, Source};
use serde_json::json;

use super::backfill::{Guard, Item, Ledger};
use super::read::Sides;
use super::RunPlan;
use crate::plan::Action;
use crate::report::{BackfillOutcome, BackfillRow};
use crate::state::prelude::*;
use crate::state::webhook::{DeliveryMark, DeliveryStatus, Verified};
use crate::webhook::{
    body_object, idempotency_key, identity, render_record, PlanRequest, Prepared, Sender, Sent,
    Webhook,
};

/// What the webhook route did in a run (or would do, in a dry run).
#[derive(Debug, Default)]
pub struct Report {
    /// The requests a dry run (or a stopped run) would send, in plan order.
    pub previews: Option<Vec<PlanRequest>>,
    /// What was delivered, when the run delivered.
    pub delivered: Option<Delivered>,
}

/// The outcome of deliveries.
#[derive(Debug, Default)]
pub struct Delivered {
    /// `backfill.csv`: this run's items in plan order, then earlier
    /// deliveries checked again.
    pub rows: Vec<BackfillRow>,
    /// 2xx answers, found in the target.
    pub delivered: u64,
    /// 409 answers, found in the target.
    pub already_done: u64,
    /// Acknowledged (2xx or 409, by this run or an earlier one) but not in
    /// the target after `verify_after`: the handler is broken.
    pub not_created: u64,
    /// Refused (4xx).
    pub failed: u64,
    /// Earlier deliveries found in the target by this run's check.
    pub verified_earlier: u64,
    /// HTTP attempts, retries included.
    pub requests: u64,
    /// Retries.
    pub retries: u64,
    /// The endpoint, redacted.
    pub url: String,
}

impl Delivered {
    /// The `webhook` object of summary.json.
    pub fn summary(&self) -> serde_json::Value {
        json!({
            "url": self.url,
            "delivered": self.delivered,
            "already_done": self.already_done,
            "delivered_not_created": self.not_created,
            "failed": self.failed,
            "verified_earlier": self.verified_earlier,
            "requests": self.requests,
            "retries": self.retries,
        })
    }

    /// Lines for the terminal.
    pub fn render(&self) -> String {
        let mut s = format!(
            "  webhook     {} delivered, {} already done (409), {} failed, {} requests ({} retries)",
            self.delivered, self.already_done, self.failed, self.requests, self.retries
        );
        if self.not_created > 0 {
            s.push_str(&format!(
                "\n  delivered_not_created {}: the endpoint acknowledged them but the target does not hold them; its handler is broken (see backfill.csv)",
                self.not_created
            ));
        }
        s
    }
}

/// The route's stage of a run: previews for a plan file, deliveries when
/// the guard allows writing, nothing for a target-route job.
pub async fn stage(
    plan: &RunPlan,
    ledger: &Ledger<'_>,
    sides: &Sides,
    items: &[Item],
    guard: &Guard,
) -> Result<Option<Report>> {
    let Some(wh) = &plan.webhook else {
        return Ok(None);
    };
    // The deliveries are the run's backfill: their logs carry its phase.
    crate::ops::progress::phase(
        "backfill",
        stage_inner(plan, wh, ledger, sides, items, guard),
    )
    .await
}

async fn stage_inner(
    plan: &RunPlan,
    wh: &Webhook,
    ledger: &Ledger<'_>,
    sides: &Sides,
    items: &[Item],
    guard: &Guard,
) -> Result<Option<Report>> {
    let mut report = Report::default();
    let records: Vec<&Record> = items.iter().map(|(r, _)| r).collect();
    let prepared = prepare(plan, wh, sides.source.as_ref(), &records).await?;
    if guard.plan_file {
        let previews: Vec<PlanRequest> = prepared.iter().map(|p| wh.plan_request(p)).collect();
        if plan.dry_run {
            print_preview(&previews);
        }
        report.previews = Some(previews);
    }
    // Also with nothing to send: earlier deliveries are checked again.
    let mode = plan.job.job.backfill.mode;
    if !plan.dry_run && guard.trouble.is_none() && mode != crate::config::BackfillMode::Off {
        report.delivered = Some(deliver(ledger, wh, sides.target(), prepared).await?);
    }
    Ok(Some(report))
}

/// A short preview of what a dry run would send.
fn print_preview(previews: &[PlanRequest]) {
    let Some(first) = previews.first() else {
        return;
    };
    println!(
        "webhook: would POST {} deliveries to {} (plan.jsonl holds each request); the first:",
        previews.len(),
        first.url
    );
    for (name, value) in &first.headers {
        println!("  {name}: {value}");
    }
    let body = first.body.to_string();
    let cut: String = body.chars().take(300).collect();
    println!("  {cut}{}", if cut.len() < body.len() { "…" } else { "" });
}

/// Bodies and keys of the records to replay, in their order: the source's
/// own JSON when it can fetch it, else the typed record by the source's
/// field map.
pub async fn prepare(
    plan: &RunPlan,
    wh: &Webhook,
    source: &dyn Source,
    records: &[&Record],
) -> Result<Vec<Prepared>> {
    let job = &plan.job.name;
    let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
    let raw: HashMap<String, String> = if keys.is_empty() {
        HashMap::new()
    } else {
        source
            .raw_json(&keys)
            .await
            .with_context(|| format!("job `{job}`: fetching the source records to replay"))?
            .unwrap_or_default()
            .into_iter()
            .collect()
    };
    let names = plan
        .job
        .job
        .source
        .connector()
        .field_map()
        .map(|(_, m)| m.clone())
        .unwrap_or_default();
    let schema = &plan.spec.schema;
    records
        .iter()
        .map(|r| {
            let object = match raw.get(&r.key) {
                Some(text) => serde_json::from_str(text).with_context(|| {
                    format!(
                        "job `{job}`: the source's JSON of `{}` does not parse",
                        r.key
                    )
                })?,
                None => render_record(r, schema, &names),
            };
            let created = plan.time_field.and_then(|i| match r.values.get(i) {
                Some(recon_core::Value::Timestamp(t)) => Some(t.as_second()),
                _ => None,
            });
            let key = idempotency_key(job, &r.key, &identity(r, plan.time_field));
            let body = body_object(wh.envelope, &wh.event_type, &key, created, object);
            Ok(Prepared {
                external_id: r.key.clone(),
                key,
                body: body.to_string(),
            })
        })
        .collect()
}

/// How one item of this run ended.
enum Ended {
    Sent(Sent),
    /// Delivered or already done by an earlier run: not sent again.
    Earlier(DeliveryStatus, String),
    /// Not sent: the run stopped first.
    NotSent,
}

/// Delivers `prepared` under the ledger, then verifies (see the module docs).
pub async fn deliver(
    ledger: &Ledger<'_>,
    wh: &Webhook,
    target: &dyn Source,
    prepared: Vec<Prepared>,
) -> Result<Delivered> {
    let (state, job) = (ledger.state, ledger.job);
    let keys: Vec<String> = prepared.iter().map(|p| p.external_id.clone()).collect();
    let before = state.webhook_rows(job, &keys).await?;
    let mut ended: HashMap<String, Ended> = HashMap::with_capacity(prepared.len());
    let mut to_send: Vec<&Prepared> = Vec::new();
    for p in &prepared {
        match before.get(&p.external_id) {
            // Done under this key. A record replaced under the same ID (a
            // new identity, so a new key) is another delivery: sent.
            Some(row) if row.status.is_done() && row.idempotency_key == p.key => {
                ended.insert(
                    p.external_id.clone(),
                    Ended::Earlier(row.status, row.plan_id.clone()),
                );
            }
            _ => to_send.push(p),
        }
    }
    let planned: Vec<(String, String)> = to_send
        .iter()
        .map(|p| (p.external_id.clone(), p.key.clone()))
        .collect();
    state.webhook_plan(ledger.plan_id, job, &planned).await?;
    drop(planned);
    let sender = Sender::new(wh)?;
    let stop = AtomicBool::new(false);
    let why: Mutex<Option<String>> = Mutex::new(None);
    let abort_after = crate::faults::abort_after_items();
    let mark_fails = crate::faults::webhook_mark_fails();
    let mut answered = 0usize;
    let mut lock_checked = Instant::now();
    let mut lost_lock = false;
    if !ledger.lock.verify().await? {
        bail!("job `{job}`: lost the run lock before delivering; nothing was sent. Check that no other run of this job is active, then run again");
    }
    {
        let sender = &sender;
        let stop = &stop;
        // The POSTs never wait for the ledger: answers go through a channel
        // to the marking loop, which records whatever has arrived in one
        // transaction while the next deliveries are in flight.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let produce = async move {
            let mut results = futures_util::stream::iter(to_send.iter().copied())
                .map(|p| async move {
                    if stop.load(Ordering::Relaxed) || crate::interrupt::requested().is_some() {
                        return (p, None);
                    }
                    (p, Some(sender.send(p).await))
                })
                .buffer_unordered(wh.concurrency);
            while let Some(r) = results.next().await {
                if tx.send(r).is_err() {
                    break;
                }
            }
        };
        let consume = async {
            // Owned here: when marking fails and this returns, the receiver
            // is closed at once, so the producer's next send fails and no
            // further delivery goes out unrecorded.
            let mut rx = rx;
            let marked = async {
                let mut chunk = Vec::new();
                while rx.recv_many(&mut chunk, 1024).await > 0 {
                    let chunk = std::mem::take(&mut chunk);
                    answered += chunk.iter().filter(|(_, s)| s.is_some()).count();
                    if abort_after.is_some_and(|n| answered >= n) {
                        // Test-only fault hook: die like a SIGKILL after POSTs were
                        // answered and before their outcome is recorded.
                        std::process::abort();
                    }
                    let mut marks: Vec<DeliveryMark> = Vec::with_capacity(chunk.len());
                    for (p, sent) in chunk {
                        let id = p.external_id.clone();
                        match sent {
                            None => {
                                ended.insert(id, Ended::NotSent);
                            }
                            Some(sent) => {
                                marks.push(match &sent {
                                    Sent::Delivered(s) => {
                                        (id.clone(), DeliveryStatus::Delivered, Some(*s), None)
                                    }
                                    Sent::AlreadyDone => {
                                        (id.clone(), DeliveryStatus::AlreadyDone, Some(409), None)
                                    }
                                    Sent::Refused(s, m) => (
                                        id.clone(),
                                        DeliveryStatus::Failed,
                                        Some(*s),
                                        Some(m.clone()),
                                    ),
                                    Sent::Unsure(m) => {
                                        // Outcome unknown: stays planned, sent again
                                        // (same key) by the next run.
                                        stop.store(true, Ordering::Relaxed);
                                        why.lock()
                                            .unwrap_or_else(|e| e.into_inner())
                                            .get_or_insert_with(|| m.clone());
                                        (id.clone(), DeliveryStatus::Planned, None, Some(m.clone()))
                                    }
                                });
                                ended.insert(id, Ended::Sent(sent));
                            }
                        }
                    }
                    if mark_fails && !marks.is_empty() {
                        // Test-only fault hook: the state store is lost.
                        bail!("job `{job}`: recording webhook outcomes failed (fault injection)");
                    }
                    state.webhook_mark(job, &marks).await?;
                    if crate::interrupt::requested().is_some() {
                        // A stop request: nothing new is sent; what is in
                        // flight is answered and recorded.
                        stop.store(true, Ordering::Relaxed);
                    }
                    if lock_checked.elapsed().as_secs() >= 2 {
                        lock_checked = Instant::now();
                        if !ledger.lock.verify().await? {
                            lost_lock = true;
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                Ok::<(), anyhow::Error>(())
            }
            .await;
            if marked.is_err() {
                // Nothing more is sent: the items not yet started see the
                // flag, and the producer stops at its next send.
                stop.store(true, Ordering::Relaxed);
                rx.close();
            }
            marked
        };
        let ((), consumed) = tokio::join!(produce, consume);
        consumed?;
    }
    let stats = sender.stats();
    let count = |f: &dyn Fn(&Ended) -> bool| ended.values().filter(|e| f(e)).count();
    let delivered_now =
        count(&|e| matches!(e, Ended::Sent(Sent::Delivered(_) | Sent::AlreadyDone)));
    if lost_lock {
        bail!(
            "job `{job}`: lost the run lock (its session ended or another run took it over); stopped delivering: {delivered_now} of {} items were delivered, the rest stay planned and the next run sends them with the same Idempotency-Key",
            prepared.len()
        );
    }
    if crate::interrupt::requested().is_some() {
        return Err(crate::interrupt::error(
            job,
            &format!(
                "while delivering: stopped sending; {delivered_now} of {} items were delivered and recorded, the rest stay planned and the next run sends them with the same Idempotency-Key",
                prepared.len()
            ),
        ));
    }
    if let Some(m) = why.into_inner().unwrap_or_else(|e| e.into_inner()) {
        let unsure = count(&|e| matches!(e, Ended::Sent(Sent::Unsure(_)) | Ended::NotSent));
        bail!(
            "job `{job}`: the webhook endpoint {} kept failing ({m}); stopped delivering: {delivered_now} of {} items were delivered; {unsure} are recorded as planned and the next run sends them again with the same Idempotency-Key (the handler deduplicates). Check the endpoint, then run again",
            crate::webhook::shown_url(wh.url.expose()),
            prepared.len()
        );
    }
    // Verification: this run's acknowledged items, the plan's items
    // delivered earlier, and earlier deliveries not yet found.
    let earlier = state.webhook_unverified(job).await?;
    let in_plan: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let mut check: Vec<String> = ended
        .iter()
        .filter(|(_, e)| {
            matches!(
                e,
                Ended::Sent(Sent::Delivered(_) | Sent::AlreadyDone) | Ended::Earlier(..)
            )
        })
        .map(|(k, _)| k.clone())
        .collect();
    check.extend(
        earlier
            .iter()
            .filter(|r| !in_plan.contains(r.external_id.as_str()))
            .map(|r| r.external_id.clone()),
    );
    check.sort();
    if delivered_now > 0 && !wh.verify_after.is_zero() {
        tracing::info!(
            message = "Waiting before verifying webhook deliveries in the target.",
            job,
            wait_s = wh.verify_after.as_secs_f64(),
        );
        tokio::time::sleep(wh.verify_after).await;
    }
    let found: HashSet<String> = if check.is_empty() {
        HashSet::new()
    } else {
        target
            .lookup(&check)
            .await
            .with_context(|| {
                format!(
                    "job `{job}`: verifying {} webhook deliveries by key lookup in the target",
                    check.len()
                )
            })?
            .into_iter()
            .map(|r| r.key)
            .collect()
    };
    let verified: Vec<(String, Verified)> = check
        .iter()
        .map(|k| {
            (
                k.clone(),
                if found.contains(k) {
                    Verified::Created
                } else {
                    Verified::NotCreated
                },
            )
        })
        .collect();
    state.webhook_verify(job, &verified).await?;
    let after = format!(
        "after {}",
        recon_core::http::human_duration(wh.verify_after)
    );
    let mut out = Delivered {
        url: crate::webhook::shown_url(wh.url.expose()),
        requests: stats.requests,
        retries: stats.retries,
        ..Delivered::default()
    };
    let not_created = |how: &str| {
        format!("{how}, but no record with this key is in the target {after}: the handler did not create it; check the handler (recon will not send it again)")
    };
    for p in &prepared {
        let id = &p.external_id;
        let (outcome, error) = match ended.get(id) {
            Some(Ended::Sent(Sent::Delivered(_))) if found.contains(id) => {
                out.delivered += 1;
                (BackfillOutcome::Delivered, String::new())
            }
            Some(Ended::Sent(Sent::AlreadyDone)) if found.contains(id) => {
                out.already_done += 1;
                (
                    BackfillOutcome::AlreadyDone,
                    "the endpoint answered 409: already done".to_string(),
                )
            }
            Some(Ended::Sent(Sent::Delivered(s))) => {
                out.not_created += 1;
                (
                    BackfillOutcome::DeliveredNotCreated,
                    not_created(&format!("the endpoint answered {s}")),
                )
            }
            Some(Ended::Sent(Sent::AlreadyDone)) => {
                out.not_created += 1;
                (
                    BackfillOutcome::DeliveredNotCreated,
                    not_created("the endpoint answered 409 (already done)"),
                )
            }
            Some(Ended::Sent(Sent::Refused(s, m))) => {
                out.failed += 1;
                (BackfillOutcome::Failed, format!("HTTP {s}: {m}"))
            }
            Some(Ended::Earlier(status, run)) if found.contains(id) => {
                out.verified_earlier += 1;
                let o = if *status == DeliveryStatus::AlreadyDone {
                    BackfillOutcome::AlreadyDone
                } else {
                    BackfillOutcome::Delivered
                };
                (o, format!("delivered by run {run}; not sent again"))
            }
            Some(Ended::Earlier(_, run)) => {
                out.not_created += 1;
                (
                    BackfillOutcome::DeliveredNotCreated,
                    not_created(&format!("delivered by run {run} (not sent again)")),
                )
            }
            // Unsure and not sent end the run above.
            Some(Ended::Sent(Sent::Unsure(_)) | Ended::NotSent) | None => continue,
        };
        out.rows.push(BackfillRow {
            key: id.clone(),
            action: Action::Insert,
            outcome,
            error,
        });
    }
    for r in earlier
        .iter()
        .filter(|r| !in_plan.contains(r.external_id.as_str()))
    {
        let id = &r.external_id;
        let (outcome, error) = if found.contains(id) {
            out.verified_earlier += 1;
            (
                BackfillOutcome::Delivered,
                format!("delivered by run {}; now in the target", r.plan_id),
            )
        } else {
            out.not_created += 1;
            (
                BackfillOutcome::DeliveredNotCreated,
                not_created(&format!("delivered by run {} (not sent again)", r.plan_id)),
            )
        };
        out.rows.push(BackfillRow {
            key: id.clone(),
            action: Action::Insert,
            outcome,
            error,
        });
    }
    Ok(out)
}
