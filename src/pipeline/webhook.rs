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

use anyhow::{bail, Context, Result};
use recon_core::{Record, Source};
use serde_json::json;

use super::backfill::{Guard, Item, Ledger};
use super::read::Sides;
use super::{writer, RunPlan};
use crate::plan::Action;
use crate::report::{BackfillOutcome, BackfillRow};
use crate::state::prelude::*;
use crate::state::webhook::{DeliveryMark, DeliveryRow, DeliveryStatus, Verified};
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
}

/// What the items ended as, by external ID.
type EndedMap = HashMap<String, Ended>;

/// Delivers `prepared` under the ledger, then verifies (see the module docs).
pub async fn deliver(
    ledger: &Ledger<'_>,
    wh: &Webhook,
    target: &dyn Source,
    prepared: Vec<Prepared>,
) -> Result<Delivered> {
    let (state, job) = (ledger.state, ledger.job);
    let keys: Vec<String> = prepared.iter().map(|p| p.external_id.clone()).collect();
    let (mut ended, to_send) = done_earlier(ledger, &prepared, &keys).await?;
    let sender = Sender::new(wh)?;
    if !ledger.lock.verify().await? {
        bail!("job `{job}`: lost the run lock before delivering; nothing was sent. Check that no other run of this job is active, then run again");
    }
    let mut report = send(ledger, wh, &sender, &to_send).await?;
    let sent = std::mem::take(&mut report.kept);
    ended.extend(sent.into_iter().map(|(id, sent)| (id, Ended::Sent(sent))));
    stopped(job, wh, &report, &ended, to_send.len(), prepared.len())?;
    let stats = sender.stats();
    // Verification: this run's acknowledged items, the plan's items
    // delivered earlier, and earlier deliveries not yet found.
    let earlier = state.webhook_unverified(job).await?;
    let in_plan: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let earlier: Vec<&DeliveryRow> = earlier
        .iter()
        .filter(|r| !in_plan.contains(r.external_id.as_str()))
        .collect();
    let found = verify(ledger, wh, target, &ended, &earlier).await?;
    let mut out = Delivered {
        url: crate::webhook::shown_url(wh.url.expose()),
        requests: stats.requests,
        retries: stats.retries,
        ..Delivered::default()
    };
    out.rows_of(wh, &prepared, &ended, &earlier, &found);
    Ok(out)
}

/// The items done under their key by an earlier run (not sent again), and
/// the ones to send, recorded `planned` in the delivery ledger.
async fn done_earlier<'p>(
    ledger: &Ledger<'_>,
    prepared: &'p [Prepared],
    keys: &[String],
) -> Result<(EndedMap, Vec<&'p Prepared>)> {
    let before = ledger.state.webhook_rows(ledger.job, keys).await?;
    let mut ended = HashMap::with_capacity(prepared.len());
    let mut to_send: Vec<&Prepared> = Vec::new();
    for p in prepared {
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
    let (state, job) = (ledger.state, ledger.job);
    state.webhook_plan(ledger.plan_id, job, &planned).await?;
    Ok((ended, to_send))
}

/// The deliveries as [`writer::Work`]: a unit is one item's POST.
struct Deliveries<'a> {
    ledger: &'a Ledger<'a>,
    sender: &'a Sender,
    to_send: &'a [&'a Prepared],
    mark_fails: bool,
}

impl<'a> writer::Work for Deliveries<'a> {
    type Unit = &'a Prepared;
    type Done = Sent;
    type Mark = DeliveryMark;
    type Kept = (String, Sent);
    /// Why the endpoint's answer is unsure.
    type Trouble = String;

    fn units(&self) -> usize {
        self.to_send.len()
    }

    fn prepare(&self, i: usize) -> &'a Prepared {
        self.to_send[i]
    }

    async fn perform(&self, p: &&'a Prepared) -> Sent {
        self.sender.send(p).await
    }

    fn settle(
        &self,
        p: &'a Prepared,
        sent: Sent,
        _first: Option<&String>,
    ) -> Result<writer::Settled<Self>> {
        let id = p.external_id.clone();
        let (mark, trouble) = match &sent {
            Sent::Delivered(s) => (
                (id.clone(), DeliveryStatus::Delivered, Some(*s), None),
                None,
            ),
            Sent::AlreadyDone => (
                (id.clone(), DeliveryStatus::AlreadyDone, Some(409), None),
                None,
            ),
            Sent::Refused(s, m) => {
                let mark = (
                    id.clone(),
                    DeliveryStatus::Failed,
                    Some(*s),
                    Some(m.clone()),
                );
                (mark, None)
            }
            // Outcome unknown: stays planned, sent again (same key) by the
            // next run; nothing new is sent.
            Sent::Unsure(m) => {
                let mark = (id.clone(), DeliveryStatus::Planned, None, Some(m.clone()));
                (mark, Some(m.clone()))
            }
        };
        Ok(writer::Settled {
            mark,
            items: 1,
            trouble,
            kept: (id, sent),
        })
    }

    async fn record(&self, marks: Vec<DeliveryMark>) -> Result<()> {
        let job = self.ledger.job;
        if self.mark_fails {
            // Test-only fault hook: the state store is lost.
            bail!("job `{job}`: recording webhook outcomes failed (fault injection)");
        }
        Ok(self.ledger.state.webhook_mark(job, &marks).await?)
    }

    async fn holds_lock(&self) -> Result<bool> {
        Ok(self.ledger.lock.verify().await?)
    }
}

/// POSTs `to_send`, `wh.concurrency` at once, through the ledgered writer:
/// the POSTs never wait for the ledger; the lock is verified every
/// [`LOCK_EVERY`]; a stop request or an unsure answer sends nothing new,
/// what is in flight is answered and recorded.
async fn send<'a>(
    ledger: &'a Ledger<'a>,
    wh: &Webhook,
    sender: &'a Sender,
    to_send: &'a [&'a Prepared],
) -> Result<writer::Report<Deliveries<'a>>> {
    let work = Deliveries {
        ledger,
        sender,
        to_send,
        mark_fails: crate::faults::webhook_mark_fails(),
    };
    let options = writer::Options {
        in_flight: wh.concurrency,
        lock_every: LOCK_EVERY,
        abort_after: crate::faults::abort_after_items(),
    };
    writer::run(&work, options).await
}

/// How often the run lock is verified while delivering.
const LOCK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The error of deliveries that stopped early: a lost lock, a stop
/// request, an endpoint that kept failing.
fn stopped(
    job: &str,
    wh: &Webhook,
    report: &writer::Report<Deliveries<'_>>,
    ended: &EndedMap,
    to_send: usize,
    total: usize,
) -> Result<()> {
    let count = |f: &dyn Fn(&Ended) -> bool| ended.values().filter(|e| f(e)).count();
    let delivered_now =
        count(&|e| matches!(e, Ended::Sent(Sent::Delivered(_) | Sent::AlreadyDone)));
    if report.lock_lost {
        bail!(
            "job `{job}`: lost the run lock (its session ended or another run took it over); stopped delivering: {delivered_now} of {total} items were delivered, the rest stay planned and the next run sends them with the same Idempotency-Key"
        );
    }
    if crate::interrupt::requested().is_some() {
        return Err(crate::interrupt::error(
            job,
            &format!(
                "while delivering: stopped sending; {delivered_now} of {total} items were delivered and recorded, the rest stay planned and the next run sends them with the same Idempotency-Key"
            ),
        ));
    }
    if let Some(m) = &report.trouble {
        // Unsure, and not sent at all: recorded as planned.
        let definite = count(&|e| {
            matches!(
                e,
                Ended::Sent(Sent::Delivered(_) | Sent::AlreadyDone | Sent::Refused(..))
            )
        });
        let unsure = to_send - definite;
        bail!(
            "job `{job}`: the webhook endpoint {} kept failing ({m}); stopped delivering: {delivered_now} of {total} items were delivered; {unsure} are recorded as planned and the next run sends them again with the same Idempotency-Key (the handler deduplicates). Check the endpoint, then run again",
            crate::webhook::shown_url(wh.url.expose()),
        );
    }
    Ok(())
}

/// Waits `verify_after` (when this run delivered anything), looks up in
/// the target the items acknowledged (now or earlier) and `earlier`
/// deliveries, and records what it found; the keys found.
async fn verify(
    ledger: &Ledger<'_>,
    wh: &Webhook,
    target: &dyn Source,
    ended: &EndedMap,
    earlier: &[&DeliveryRow],
) -> Result<HashSet<String>> {
    let job = ledger.job;
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
    check.extend(earlier.iter().map(|r| r.external_id.clone()));
    check.sort();
    let delivered_now = ended
        .values()
        .any(|e| matches!(e, Ended::Sent(Sent::Delivered(_) | Sent::AlreadyDone)));
    if delivered_now && !wh.verify_after.is_zero() {
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
        .into_iter()
        .map(|k| {
            let v = if found.contains(&k) {
                Verified::Created
            } else {
                Verified::NotCreated
            };
            (k, v)
        })
        .collect();
    ledger.state.webhook_verify(job, &verified).await?;
    Ok(found)
}

/// Which count of [`Delivered`] an item adds to.
#[derive(Clone, Copy)]
enum Count {
    Delivered,
    AlreadyDone,
    NotCreated,
    Failed,
    VerifiedEarlier,
}

impl Delivered {
    fn add(&mut self, count: Count) {
        let n = match count {
            Count::Delivered => &mut self.delivered,
            Count::AlreadyDone => &mut self.already_done,
            Count::NotCreated => &mut self.not_created,
            Count::Failed => &mut self.failed,
            Count::VerifiedEarlier => &mut self.verified_earlier,
        };
        *n += 1;
    }

    /// `backfill.csv`'s rows and the counts: this run's items in plan
    /// order, then the earlier deliveries checked again.
    fn rows_of(
        &mut self,
        wh: &Webhook,
        prepared: &[Prepared],
        ended: &EndedMap,
        earlier: &[&DeliveryRow],
        found: &HashSet<String>,
    ) {
        let after = format!(
            "after {}",
            recon_core::http::human_duration(wh.verify_after)
        );
        let not_created = |how: &str| {
            format!("{how}, but no record with this key is in the target {after}: the handler did not create it; check the handler (recon will not send it again)")
        };
        let judged = prepared.iter().filter_map(|p| {
            let id = &p.external_id;
            let verdict = judge(ended.get(id)?, found.contains(id), &not_created)?;
            Some((id, verdict))
        });
        let again = earlier.iter().map(|r| {
            let id = &r.external_id;
            let verdict = if found.contains(id) {
                let why = format!("delivered by run {}; now in the target", r.plan_id);
                (Count::VerifiedEarlier, BackfillOutcome::Delivered, why)
            } else {
                let why = not_created(&format!("delivered by run {} (not sent again)", r.plan_id));
                (Count::NotCreated, BackfillOutcome::DeliveredNotCreated, why)
            };
            (id, verdict)
        });
        let all: Vec<_> = judged.chain(again).collect();
        for (id, (count, outcome, error)) in all {
            self.add(count);
            self.rows.push(BackfillRow {
                key: id.clone(),
                action: Action::Insert,
                outcome,
                error,
            });
        }
    }
}

/// What one item of this run comes to once verified (`found`: its key is
/// in the target). Unsure items end the run before, so have none.
fn judge(
    ended: &Ended,
    found: bool,
    not_created: &dyn Fn(&str) -> String,
) -> Option<(Count, BackfillOutcome, String)> {
    let missing = |how: &str| {
        (
            Count::NotCreated,
            BackfillOutcome::DeliveredNotCreated,
            not_created(how),
        )
    };
    Some(match ended {
        Ended::Sent(Sent::Delivered(_)) if found => {
            (Count::Delivered, BackfillOutcome::Delivered, String::new())
        }
        Ended::Sent(Sent::AlreadyDone) if found => (
            Count::AlreadyDone,
            BackfillOutcome::AlreadyDone,
            "the endpoint answered 409: already done".to_string(),
        ),
        Ended::Sent(Sent::Delivered(s)) => missing(&format!("the endpoint answered {s}")),
        Ended::Sent(Sent::AlreadyDone) => missing("the endpoint answered 409 (already done)"),
        Ended::Sent(Sent::Refused(s, m)) => (
            Count::Failed,
            BackfillOutcome::Failed,
            format!("HTTP {s}: {m}"),
        ),
        Ended::Earlier(status, run) if found => {
            let o = if *status == DeliveryStatus::AlreadyDone {
                BackfillOutcome::AlreadyDone
            } else {
                BackfillOutcome::Delivered
            };
            let why = format!("delivered by run {run}; not sent again");
            (Count::VerifiedEarlier, o, why)
        }
        Ended::Earlier(_, run) => missing(&format!("delivered by run {run} (not sent again)")),
        Ended::Sent(Sent::Unsure(_)) => return None,
    })
}
