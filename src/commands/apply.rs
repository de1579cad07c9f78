//! `recon apply --plan FILE`: apply exactly a reviewed dry-run plan.
//!
//! The plan is trusted only as far as it can be proven. Before anything is
//! written (exit 2, nothing changed, when one fails):
//!
//! - the file must be, byte for byte, a plan that `recon run --dry-run`
//!   recorded in this job's state store (same SHA-256), so any edit made
//!   after the review is refused;
//! - it must belong to the job (`--job`, when given) and every action must
//!   be one the job's `backfill.mode` allows;
//! - keys must be non-empty, unpadded and unique, and every line must carry
//!   every field of the job with values that agree with themselves;
//! - it must be within the safety limits (`--max-records`/`--max-ratio`
//!   override them, as for `recon run`);
//! - its window must have begun when the dry run read it;
//! - the report folder must be writable and must not hold the plan: apply
//!   replaces its report folder whole, so `--out` naming the plan's folder is
//!   refused rather than deleting the reviewed plan and dry-run reports.
//!
//! Then each item is checked again against the target (an `insert` whose key
//! now exists is skipped), written through the same idempotent upsert and
//! ledger as `recon run`, and reported in `backfill.csv`. The apply's run is
//! recorded with its window ending no later than when the dry run read the
//! data, so `since-last-success` never starts after what was reconciled.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use jiff::Timestamp;
use recon_core::{format_timestamp, Record, Window, WriteMode};

use crate::cli::{ApplyArgs, RunArgs};
use crate::config::BackfillMode;
use crate::pipeline::backfill::{apply, breach, ensure_lock, Ledger};
use crate::pipeline::{locked_run, Finished, RunPlan, Start};
use crate::plan::{file_sha256_bytes, Action, PlanLine};
use crate::report::summary::{Class, RunFields, RunSummary, Webhook, WindowText};
use crate::report::{write_backfill_csv, BackfillOutcome, BackfillRow, ReportDir};
use crate::state::prelude::*;
use crate::state::{PlanRecord, StateStore};
use crate::webhook::Prepared;
use crate::Status;

/// A plan file as read: its lines and the digest of its bytes.
struct PlanFile {
    path: PathBuf,
    sha256: String,
    /// Each line with where it is, for messages (`plan.jsonl line 3`).
    lines: Vec<(PlanLine, String)>,
}

/// One checked item, ready to write.
#[derive(Debug)]
struct Item {
    action: Action,
    record: Record,
    /// `backfill.via = "webhook"`: the request the dry run planned.
    webhook: Option<crate::webhook::PlanRequest>,
}

/// What a plan says about itself once every line agrees.
struct Header {
    plan_id: String,
    job: String,
    window: Window,
}

/// Reads a plan once: the digest and the lines come from the same bytes.
fn read_plan(path: &Path) -> Result<PlanFile> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read plan {}", path.display()))?;
    let text = std::str::from_utf8(&bytes)
        .with_context(|| format!("plan {} is not UTF-8 text", path.display()))?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{} line {}", path.display(), i + 1);
        lines.push((PlanLine::parse(line, &at)?, at));
    }
    Ok(PlanFile {
        path: path.to_path_buf(),
        sha256: file_sha256_bytes(&bytes),
        lines,
    })
}

/// The plan id, job and window every line shares.
fn header(plan: &PlanFile) -> Result<Header> {
    let Some((first, at)) = plan.lines.first() else {
        bail!("plan {} is empty: nothing to apply", plan.path.display());
    };
    let window = first.window().with_context(|| at.clone())?;
    for (line, at) in &plan.lines[1..] {
        if line.plan_id != first.plan_id || line.job != first.job || line.window != first.window {
            bail!(
                "{at}: plan `{}` of job `{}` over {}..{}, unlike line 1 (plan `{}` of job `{}` over {}..{}); \
                 a plan file holds one dry run's plan: apply the plan.jsonl that dry run wrote, unedited",
                line.plan_id, line.job, line.window.start, line.window.end,
                first.plan_id, first.job, first.window.start, first.window.end
            );
        }
    }
    Ok(Header {
        plan_id: first.plan_id.clone(),
        job: first.job.clone(),
        window,
    })
}

/// Every line checked against the job: actions the mode allows, keys that
/// are usable and unique, values complete and consistent.
fn check_items(plan: &PlanFile, run: &RunPlan) -> Result<Vec<Item>> {
    let job = &run.job.name;
    let mode = run.job.job.backfill.mode;
    let schema = &run.spec.schema;
    let mut seen: HashMap<&str, &str> = HashMap::with_capacity(plan.lines.len());
    let mut items = Vec::with_capacity(plan.lines.len());
    for (line, at) in &plan.lines {
        match (mode, line.action) {
            (BackfillMode::Off, a) => bail!(
                "{at}: `{a}` but job `{job}` has backfill.mode = \"off\", which writes nothing; \
                 set backfill.mode to \"insert\" (gaps) or \"upsert\" (gaps and mismatches) to apply a plan"
            ),
            (BackfillMode::Insert, Action::Update) => bail!(
                "{at}: `update` of `{}` but job `{job}` has backfill.mode = \"insert\", which never changes \
                 an existing record; set backfill.mode = \"upsert\" if updates are meant, then make the plan again",
                line.external_id
            ),
            _ => {}
        }
        let key = line.external_id.as_str();
        if key.is_empty() {
            bail!("{at}: the external_id is empty; a record without a key cannot be written or found again");
        }
        if key.trim() != key {
            bail!(
                "{at}: the external_id {key:?} has leading or trailing spaces; it would never match the source's key"
            );
        }
        if let Some(first) = seen.insert(key, at) {
            bail!("{at}: `{key}` is planned a second time (first at {first}); a plan writes each record once");
        }
        let record = line.record(schema).with_context(|| at.clone())?;
        items.push(Item {
            action: line.action,
            record,
            webhook: line.webhook.clone(),
        });
    }
    Ok(items)
}

/// Refuses a report folder that holds the plan: replacing it whole would
/// delete the reviewed plan and the dry-run reports beside it.
fn check_out(out: Option<&Path>, plan: &Path) -> Result<()> {
    let Some(out) = out else {
        return Ok(());
    };
    let (Ok(out_abs), Ok(plan_abs)) = (out.canonicalize(), plan.canonicalize()) else {
        // A folder that does not exist yet cannot hold the plan.
        return Ok(());
    };
    if plan_abs.starts_with(&out_abs) {
        bail!(
            "--out {} holds the plan {} being applied; apply replaces its report folder whole and would delete \
             the reviewed plan and the dry-run reports; give another folder, e.g. --out {}-applied",
            out.display(),
            plan.display(),
            out.display()
        );
    }
    Ok(())
}

/// The plan must be one the store recorded, unedited, within the limits,
/// over a window that had begun.
fn check_against_store(
    file: &PlanFile,
    head: &Header,
    saved: Option<PlanRecord>,
    run: &RunPlan,
    state: &StateStore,
) -> Result<PlanRecord> {
    let path = file.path.display();
    let Some(saved) = saved else {
        bail!(
            "plan {path} (plan `{}`) is not known to the state store {}; recon applies only a plan that \
             `recon run --dry-run` recorded there; run the dry run with this config and apply its plan.jsonl",
            head.plan_id,
            state.describe()
        );
    };
    if saved.sha256 != file.sha256 {
        bail!(
            "plan {path} is not the plan dry run `{}` wrote: its SHA-256 is {}, the recorded plan's is {}; \
             it was changed after the dry run; recon applies only a reviewed plan, unedited: run \
             `recon run --dry-run` again and apply the plan.jsonl it writes",
            saved.id,
            file.sha256,
            saved.sha256
        );
    }
    // The store keeps whole seconds; a `last:24h` window has sub-seconds.
    let same_window = saved.window.start.as_second() == head.window.start.as_second()
        && saved.window.end.as_second() == head.window.end.as_second();
    if saved.job != head.job || !same_window {
        bail!(
            "plan {path} does not match its record in the state store (job `{}`, window {}..{}); make the plan again with `recon run --dry-run`",
            saved.job,
            format_timestamp(saved.window.start),
            format_timestamp(saved.window.end)
        );
    }
    let now = Timestamp::now();
    if saved.window.start >= saved.read_at || saved.window.start > now {
        bail!(
            "plan {path} is over the window {}..{}, which had not begun when the dry run read the data ({}); \
             nothing in it can be settled yet, and applying it would move `since-last-success` into the future; \
             make a plan over a window that has begun",
            format_timestamp(saved.window.start),
            format_timestamp(saved.window.end),
            format_timestamp(saved.read_at)
        );
    }
    let n = file.lines.len() as u64;
    if let Some(b) = breach(n, saved.source_records, run.max_records, run.max_ratio) {
        bail!(
            "job `{}`: safety limit: plan {path} was not applied, nothing was written: {}. \
             Review the plan, then apply it with --max-records {} --max-ratio {} \
             (or raise the limits in the config)",
            head.job,
            b.why,
            b.records,
            b.ratio
        );
    }
    Ok(saved)
}

/// The `recon apply` command.
pub fn run(args: ApplyArgs) -> Result<Status> {
    let ops = crate::ops::Ops::start(
        &args.config,
        args.job.as_deref(),
        args.metrics_file.as_deref(),
    )?;
    let result = apply_plan(args);
    // The metrics file and the notification, whatever the outcome.
    ops.finish(&result);
    result.map(|f| f.status)
}

fn apply_plan(args: ApplyArgs) -> Result<Finished> {
    let file = read_plan(&args.plan)?;
    let head = header(&file)?;
    if let Some(job) = args.job.as_deref().filter(|j| *j != head.job) {
        bail!(
            "plan {} belongs to job `{}`, not `{job}`; apply it with --job {} or give the plan of job `{job}`",
            args.plan.display(),
            head.job,
            head.job
        );
    }
    let plan = RunPlan::from_args(&RunArgs {
        config: args.config.clone(),
        job: Some(head.job.clone()),
        window: None,
        dry_run: false,
        out: args.out.clone(),
        max_records: args.max_records,
        max_ratio: args.max_ratio,
        metrics_file: None,
    })?;
    check_out(args.out.as_deref(), &args.plan)?;
    let items = check_items(&file, &plan)?;
    let span = crate::ops::progress::run_span(&plan.job.name);
    // Progress paused before the summary is printed.
    super::locked_command(tracing::Instrument::instrument(
        execute(plan, file, head, items),
        span,
    ))
}

async fn execute(
    plan: RunPlan,
    file: PlanFile,
    head: Header,
    items: Vec<Item>,
) -> Result<Finished> {
    let job = plan.job.name.clone();
    let state = StateStore::open(plan.job.state.expose()).await?;
    let saved = state.saved_plan(&head.plan_id).await?;
    let saved = check_against_store(&file, &head, saved, &plan, &state)?;
    // The apply settles the window only as of the dry run's reading: a
    // window end after that (or after now) is never recorded.
    let start = async || {
        Ok(Start {
            recorded: Window {
                start: saved.window.start,
                end: saved.window.end.min(saved.read_at).min(Timestamp::now()),
            },
            asked: saved.window,
            dry_run: false,
        })
    };
    locked_run(
        &state,
        &job,
        start,
        async |ledger, _| write_and_report(&plan, ledger, &file, &head, &items).await,
        crate::pipeline::finish::record,
    )
    .await
}

async fn write_and_report(
    plan: &RunPlan,
    ledger: &Ledger<'_>,
    file: &PlanFile,
    head: &Header,
    items: &[Item],
) -> Result<Finished> {
    let run_id = ledger.plan_id;
    let job = &plan.job.name;
    // Checked before the target is touched: a destination that cannot take
    // the reports fails here, with nothing written.
    let dir_path = plan
        .out
        .clone()
        .unwrap_or_else(|| plan.job.reports.join(job).join(run_id));
    let mut dir = ReportDir::prepare(&dir_path)?;
    let Written {
        rows,
        skipped,
        done,
        failed,
        webhook,
    } = write_items(plan, ledger, items).await?;
    crate::ops::progress::pause();
    write_backfill_csv(&mut dir, &rows)?;
    // Acknowledged by the webhook endpoint but not in the target: the
    // handler is broken, a discrepancy as `recon run` says.
    let webhook: Option<Webhook> = webhook.map(serde_json::from_value).transpose()?;
    let not_created = webhook.as_ref().map_or(0, |w| w.delivered_not_created);
    let status = if failed > 0 || not_created > 0 {
        Status::Discrepancies
    } else {
        Status::Clean
    };
    let counts = [
        (Class::Planned, items.len() as u64),
        (Class::Skipped, skipped as u64),
        (Class::Backfilled, done),
        (Class::BackfillFailed, failed),
    ];
    let mut summary = apply_summary(run_id, file, head, counts, webhook, status, &rows);
    crate::report::write_summary(&mut dir, &summary)?;
    // report.html too: the apply's outcomes, charted with the job's runs.
    let schema = &plan.spec.schema;
    let money_field = schema.money_field().map(|i| schema.fields[i].name.as_str());
    crate::report::html::write_for_run(
        &mut dir,
        ledger.state,
        job,
        money_field,
        &mut summary,
        None,
        Some(crate::report::html::Backfill::of_rows(Some(&rows), None)),
    )
    .await?;
    crate::report::html::record_totals(&mut dir, ledger.state, &mut summary).await?;
    ensure_lock(ledger.lock, job, "committing the report folder").await?;
    crate::interrupt::check(job, "before committing its report folder")?;
    let path = dir.commit()?;
    println!(
        "plan {}: {} items, {} skipped (already present), {} written, {} failed",
        file.path.display(),
        items.len(),
        skipped,
        done,
        failed
    );
    println!("reports: {}", path.display());
    Ok(Finished {
        status,
        summary,
        report: path,
    })
}

/// The summary.json of an apply.
fn apply_summary(
    run_id: &str,
    file: &PlanFile,
    head: &Header,
    counts: [(Class, u64); 4],
    webhook: Option<Webhook>,
    status: Status,
    rows: &[BackfillRow],
) -> RunSummary {
    let mut summary = RunSummary::default();
    for (class, n) in counts {
        summary.counts.set(class, n);
    }
    if let Some(w) = &webhook {
        let n = w.delivered_not_created;
        summary.counts.set(Class::DeliveredNotCreated, n);
    }
    summary.run = RunFields {
        job: head.job.clone(),
        run_id: Some(run_id.to_string()),
        plan: Some(file.path.display().to_string()),
        plan_id: Some(head.plan_id.clone()),
        plan_sha256: Some(file.sha256.clone()),
        window: Some(WindowText {
            start: format_timestamp(head.window.start),
            end: format_timestamp(head.window.end),
        }),
        exit_status: Some(status.code()),
        webhook,
        ..RunFields::default()
    };
    summary.count_backfill(rows);
    summary
}

/// What writing a plan's items did.
struct Written {
    /// `backfill.csv`: skipped items first, then written ones in plan order.
    rows: Vec<BackfillRow>,
    /// Inserts skipped because the key is already in the target.
    skipped: usize,
    /// Items created or updated.
    done: u64,
    /// Items the target refused.
    failed: u64,
    /// `backfill.via = "webhook"`: the deliveries' counts.
    webhook: Option<serde_json::Value>,
}

/// Builds the target, skips inserts whose key has appeared since the dry
/// run, and writes the rest through the ledger.
async fn write_items(plan: &RunPlan, ledger: &Ledger<'_>, items: &[Item]) -> Result<Written> {
    if let Some(wh) = &plan.webhook {
        return write_webhook(plan, wh, ledger, items).await;
    }
    let job = &plan.job.name;
    let tokens = plan.tokens();
    let cx = plan.build_context(&tokens);
    let target = plan.job.job.target.connector().build_target(cx).await;
    let target = target.with_context(|| format!("job `{job}`: target"))?;
    target.check_idempotent().await?;
    let insert_keys: Vec<String> = items
        .iter()
        .filter(|i| i.action == Action::Insert)
        .map(|i| i.record.key.clone())
        .collect();
    let present = present_keys(target.as_ref(), &insert_keys).await?;
    let (skipped, todo): (Vec<&Item>, Vec<&Item>) = items
        .iter()
        .partition(|i| i.action == Action::Insert && present.contains(&i.record.key));
    let work: Vec<(Record, WriteMode)> = todo
        .iter()
        .map(|i| (i.record.clone(), i.action.mode()))
        .collect();
    let outcomes = if work.is_empty() {
        Vec::new()
    } else {
        apply(ledger, target.as_ref(), &work, None).await?
    };
    let done = crate::pipeline::finish::backfill_rows(&work, &outcomes);
    let mut rows = skipped_rows(skipped.iter().map(|i| &i.record.key));
    rows.extend(done.rows);
    let written = Written {
        rows,
        skipped: skipped.len(),
        done: done.written,
        failed: done.failed,
        webhook: None,
    };
    Ok(written)
}

/// How a planned webhook request differs from the one the configuration
/// makes now (`now`, built from the plan's body): method, headers (masked
/// values compared as masked), and whether the body is the configured
/// envelope's (for envelopes that mark their bodies, such as Stripe's
/// events: one of the configured type).
fn request_differences(
    wh: &crate::webhook::Webhook,
    planned: &crate::webhook::PlanRequest,
    now: &crate::webhook::PlanRequest,
) -> Vec<String> {
    use crate::webhook::Envelope;
    let mut out = Vec::new();
    if planned.method != now.method {
        out.push(format!(
            "method {} in the plan, {} now",
            planned.method, now.method
        ));
    }
    let names: std::collections::BTreeSet<&String> =
        planned.headers.keys().chain(now.headers.keys()).collect();
    for name in names {
        match (planned.headers.get(name), now.headers.get(name)) {
            (Some(a), Some(b)) if a != b => {
                out.push(format!("header {name} is {a:?} in the plan, {b:?} now"))
            }
            (Some(_), None) => out.push(format!("header {name} is in the plan, not set now")),
            (None, Some(_)) => out.push(format!("header {name} is set now, not in the plan")),
            _ => {}
        }
    }
    let configured = wh.envelope;
    let setting = |e: Envelope| format!("{:?}", format!("{e:?}").to_ascii_lowercase());
    let carried = Envelope::ALL
        .iter()
        .find_map(|e| Some((*e, e.provider()?.event_type_in(&planned.body)?)));
    match (carried, configured.provider()) {
        (Some((e, _)), _) if e != configured => out.push(format!(
            "the plan's body is a {} event, but envelope = {} now",
            e.provider().map_or("", |p| p.provider_name()),
            setting(configured)
        )),
        (Some((_, t)), _) if t != wh.event_type => out.push(format!(
            "the plan's event type is {t:?}, event_type = {:?} now",
            wh.event_type
        )),
        (None, Some(p)) if p.marks_its_bodies() => out.push(format!(
            "the plan's body is not a {} event, but envelope = {} now",
            p.provider_name(),
            setting(configured)
        )),
        _ => {}
    }
    out
}

/// `backfill.via = "webhook"`: sends exactly the requests of the plan (its
/// bodies and idempotency keys; the URL and headers' secrets come from the
/// config, which must still name the plan's endpoint), skipping inserts
/// whose key the target holds now, through the delivery ledger.
async fn write_webhook(
    plan: &RunPlan,
    wh: &crate::webhook::Webhook,
    ledger: &Ledger<'_>,
    items: &[Item],
) -> Result<Written> {
    let job = &plan.job.name;
    let prepared = planned_requests(plan, wh, items)?;
    let tokens = plan.tokens();
    let cx = plan.build_context(&tokens);
    let target = plan.job.job.target.connector().build_source(cx).await;
    let target = target.with_context(|| format!("job `{job}`: target"))?;
    let keys: Vec<String> = prepared.iter().map(|p| p.external_id.clone()).collect();
    let present = present_keys(target.as_ref(), &keys).await?;
    let (skipped, todo): (Vec<Prepared>, Vec<Prepared>) = prepared
        .into_iter()
        .partition(|p| present.contains(&p.external_id));
    let delivered = crate::ops::progress::phase(
        "backfill",
        crate::pipeline::webhook::deliver(ledger, wh, target.as_ref(), todo),
    )
    .await?;
    println!("{}", delivered.render());
    let mut rows = skipped_rows(skipped.iter().map(|p| &p.external_id));
    rows.extend(delivered.rows.iter().cloned());
    Ok(Written {
        rows,
        skipped: skipped.len(),
        done: delivered.delivered + delivered.already_done,
        failed: delivered.failed,
        webhook: Some(delivered.summary()),
    })
}

/// The plan's requests, each checked against what the config would send
/// now (endpoint, idempotency key, headers, envelope).
fn planned_requests(
    plan: &RunPlan,
    wh: &crate::webhook::Webhook,
    items: &[Item],
) -> Result<Vec<Prepared>> {
    let url = crate::webhook::shown_url(wh.url.expose());
    let digest = crate::webhook::url_digest(wh.url.expose());
    items
        .iter()
        .map(|i| planned_request(plan, wh, i, &url, &digest))
        .collect()
}

/// One item's planned request, refused when the config would not send it
/// as planned.
fn planned_request(
    plan: &RunPlan,
    wh: &crate::webhook::Webhook,
    i: &Item,
    url: &str,
    digest: &str,
) -> Result<Prepared> {
    use crate::webhook::{idempotency_key, identity, IDEMPOTENCY_HEADER};
    let job = &plan.job.name;
    let key = &i.record.key;
    let Some(req) = &i.webhook else {
        bail!(
            "the plan's line of `{key}` holds no webhook request: it was made while job `{job}` backfilled \
             through its target, and the job now has backfill.via = \"webhook\"; make the plan again with \
             `recon run --dry-run`"
        );
    };
    if req.url != url || req.url_sha256 != digest {
        bail!(
            "the plan sends to {} (URL sha256 {}) but job `{job}` now has backfill.webhook.url = {url} \
             (sha256 {}), another endpoint; make the plan again with `recon run --dry-run`",
            req.url,
            if req.url_sha256.is_empty() { "not recorded" } else { &req.url_sha256[..req.url_sha256.len().min(12)] },
            &digest[..12]
        );
    }
    let idem = idempotency_key(job, key, &identity(&i.record, plan.time_field));
    if req.headers.get(IDEMPOTENCY_HEADER) != Some(&idem) {
        bail!(
            "the plan's line of `{key}` carries another {IDEMPOTENCY_HEADER} than its record derives \
             ({idem}); make the plan again with `recon run --dry-run`"
        );
    }
    let p = Prepared {
        external_id: key.clone(),
        key: idem,
        body: req.body.to_string(),
    };
    // The whole request as the config would send it now (secrets masked
    // alike) must be the planned one: a header, the signing or the
    // envelope changed since the dry run is refused, not sent silently.
    let differences = request_differences(wh, req, &wh.plan_request(&p));
    if !differences.is_empty() {
        bail!(
            "the plan's request of `{key}` is not what job `{job}` would send now: {}; make the plan \
             again with `recon run --dry-run` (or restore the settings the plan was made with)",
            differences.join("; ")
        );
    }
    Ok(p)
}

/// The keys of `keys` the target holds now.
async fn present_keys(target: &dyn recon_core::Source, keys: &[String]) -> Result<HashSet<String>> {
    let found = target.lookup(keys).await?;
    Ok(found.into_iter().map(|r| r.key).collect())
}

/// `backfill.csv` rows of inserts skipped because the target holds their
/// key now.
fn skipped_rows<'a>(keys: impl Iterator<Item = &'a String>) -> Vec<BackfillRow> {
    keys.map(|key| BackfillRow {
        key: key.clone(),
        action: Action::Insert,
        outcome: BackfillOutcome::Skipped,
        error: "already present in the target".into(),
    })
    .collect()
}
