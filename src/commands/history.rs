//! `recon history ID`: one external ID's story across a job's runs, from
//! the state store: when it was first seen and as what, its class in each
//! run, each backfill attempt and outcome, and when it was resolved.
//!
//! The store keeps each discrepancy's latest streak (`recon_discrepancies`,
//! overwritten when the ID comes back) and, since migration 7, every streak
//! that ended (`recon_discrepancy_streaks`: first seen, resolved by which
//! run); the ledger keeps every planned write. A class is open in a run when
//! the run lies in one of its streaks: from the run that saw it anew (the
//! first run started at or after its first sighting, which is that run's
//! start) up to the last run that saw it (for an open streak, the job's
//! latest recording run, kept once per job since migration 13), or up to,
//! not including, the run that found it gone.

use std::collections::HashMap;

use anyhow::Result;
use jiff::Timestamp;
use recon_core::format_timestamp;
use serde_json::json;

use crate::cli::HistoryArgs;
use crate::config;
use crate::state::webhook::DeliveryRow;
use crate::state::ReportReads;
use crate::state::{Class, IdRecords, ItemRecord, RunStatus, StateStore};
use crate::Status;

/// The `recon history` command.
pub fn run(args: HistoryArgs) -> Result<Status> {
    let file = config::load(&args.config)?;
    let job = file.job(args.job.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let records = runtime.block_on(async {
        let state = StateStore::open(job.state.expose()).await?;
        let r = state.id_records(&job.name, &args.id).await?;
        // A `backfill.via = "webhook"` job keeps its deliveries apart.
        let delivery = state
            .webhook_rows(&job.name, std::slice::from_ref(&args.id))
            .await?
            .remove(&args.id);
        state.close().await;
        Ok::<_, anyhow::Error>((r, delivery))
    })?;
    let (records, delivery) = records;
    let mut story = Story::of(&job.name, &args.id, &records);
    story.webhook = delivery;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&story.to_json())?);
    } else {
        print!("{}", story.render());
    }
    Ok(Status::Clean)
}

/// How a streak ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum End {
    /// Still open; last seen by this run.
    Open(String),
    /// Resolved at this instant, by this run when known.
    Resolved(Option<String>, Timestamp),
}

/// One stretch of runs in which the ID had one class.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Streak {
    class: Class,
    start_run: Option<String>,
    start_at: Timestamp,
    end: End,
}

/// One run in the story.
#[derive(Clone, Debug, PartialEq)]
pub struct StoryRun {
    /// The run id.
    pub run_id: String,
    /// When it started.
    pub started_at: Timestamp,
    /// How it ended.
    pub status: RunStatus,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// The ID's classes in this run (none: it agreed, or was not read).
    pub classes: Vec<Class>,
    /// The ledger items this run planned for the ID.
    pub items: Vec<ItemRecord>,
}

/// An ID's story.
#[derive(Clone, Debug, PartialEq)]
pub struct Story {
    /// The job.
    pub job: String,
    /// The ID.
    pub external_id: String,
    /// First sighting: when, by which run, as what.
    pub first_seen: Option<(Timestamp, Option<String>, Class)>,
    /// The runs from the first that saw it (or planned a write) to the
    /// last that did anything with it.
    pub runs: Vec<StoryRun>,
    /// Each resolution: class, when, by which run.
    pub resolved: Vec<(Class, Timestamp, Option<String>)>,
    /// Classes open now, with since when.
    pub open: Vec<(Class, Timestamp)>,
    /// Its webhook delivery (`backfill.via = "webhook"`): one per ID, sent
    /// with the same key by every run and `recon apply`.
    pub webhook: Option<DeliveryRow>,
}

/// ` by run ID`, when the run is known.
fn by_run(run: Option<&str>) -> String {
    run.map(|r| format!(" by run {r}")).unwrap_or_default()
}

/// The runs of an ID's records, by run id: their places in `runs`.
type RunIndex<'a> = HashMap<&'a str, usize>;

/// Every streak of the ID, in the order they began: the ended ones
/// (recorded since migration 7), then the latest per class as the history
/// table has it (the open one, or the last closed one: the only record of
/// streaks closed before migration 7).
fn streaks(r: &IdRecords) -> Vec<Streak> {
    // The run that first saw a streak: the first to start at or after its
    // first sighting (a run's sightings carry its start).
    let start_of = |at: Timestamp| {
        r.runs
            .iter()
            .find(|run| run.started_at >= at)
            .map(|run| run.id.clone())
    };
    let mut streaks: Vec<Streak> = r
        .closed
        .iter()
        .map(|c| Streak {
            class: c.class,
            start_run: start_of(c.first_seen_at),
            start_at: c.first_seen_at,
            end: End::Resolved(Some(c.resolved_run.clone()), c.resolved_at),
        })
        .collect();
    for d in &r.streaks {
        if streaks
            .iter()
            .any(|s| s.class == d.class && s.start_at == d.first_seen_at)
        {
            continue;
        }
        streaks.push(Streak {
            class: d.class,
            start_run: Some(d.first_seen_run.clone()),
            start_at: d.first_seen_at,
            end: match d.resolved_at {
                Some(at) => End::Resolved(None, at),
                None => End::Open(d.last_seen_run.clone()),
            },
        });
    }
    streaks.sort_by(|a, b| a.start_at.cmp(&b.start_at).then(a.class.cmp(&b.class)));
    streaks
}

/// Whether run `i` lies in streak `s`: from the run that saw it anew up
/// to the last that saw it, or up to (not including) the one that found
/// it gone.
fn in_streak(r: &IdRecords, index: &RunIndex, s: &Streak, i: usize) -> bool {
    let run = &r.runs[i];
    let started = s
        .start_run
        .as_deref()
        .and_then(|id| index.get(id))
        .map_or(s.start_at <= run.started_at, |&k| k <= i);
    let before_end = match &s.end {
        End::Open(last) => index.get(last.as_str()).is_none_or(|&k| i <= k),
        End::Resolved(Some(by), at) => index
            .get(by.as_str())
            .map_or(run.started_at < *at, |&k| i < k),
        End::Resolved(None, at) => run.started_at < *at,
    };
    started && before_end
}

/// Every run of the job with the ID's classes and ledger items in it.
fn story_runs(r: &IdRecords, index: &RunIndex, streaks: &[Streak]) -> Vec<StoryRun> {
    let mut items_by_run: HashMap<&str, Vec<ItemRecord>> = HashMap::new();
    for it in &r.items {
        items_by_run
            .entry(it.plan_id.as_str())
            .or_default()
            .push(it.clone());
    }
    r.runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let mut classes: Vec<Class> = streaks
                .iter()
                .filter(|s| in_streak(r, index, s, i))
                .map(|s| s.class)
                .collect();
            classes.sort();
            classes.dedup();
            StoryRun {
                run_id: run.id.clone(),
                started_at: run.started_at,
                status: run.status,
                dry_run: run.dry_run,
                classes,
                items: items_by_run.remove(run.id.as_str()).unwrap_or_default(),
            }
        })
        .collect()
}

/// The runs from the first with something to say to the last one, plus
/// the runs that found a streak resolved.
fn busy_span(
    r: &IdRecords,
    index: &RunIndex,
    streaks: &[Streak],
    mut runs: Vec<StoryRun>,
) -> Vec<StoryRun> {
    let resolving: Vec<usize> = streaks
        .iter()
        .filter_map(|s| match &s.end {
            End::Resolved(Some(by), _) => index.get(by.as_str()).copied(),
            End::Resolved(None, at) => r.runs.iter().position(|run| run.started_at >= *at),
            End::Open(_) => None,
        })
        .collect();
    let busy = |i: &usize| !runs[*i].classes.is_empty() || !runs[*i].items.is_empty();
    let first = (0..runs.len()).find(busy);
    let last = (0..runs.len())
        .rev()
        .find(busy)
        .into_iter()
        .chain(resolving.iter().copied())
        .max();
    match (first, last) {
        (Some(a), Some(b)) => runs.drain(a..=b).collect(),
        _ => Vec::new(),
    }
}

impl Story {
    /// Builds the story from what the store holds.
    pub fn of(job: &str, external_id: &str, r: &IdRecords) -> Story {
        let index: RunIndex = r
            .runs
            .iter()
            .enumerate()
            .map(|(i, run)| (run.id.as_str(), i))
            .collect();
        let streaks = streaks(r);
        let runs = story_runs(r, &index, &streaks);
        Story {
            job: job.to_string(),
            external_id: external_id.to_string(),
            first_seen: streaks
                .first()
                .map(|s| (s.start_at, s.start_run.clone(), s.class)),
            runs: busy_span(r, &index, &streaks, runs),
            resolved: streaks
                .iter()
                .filter_map(|s| match &s.end {
                    End::Resolved(by, at) => Some((s.class, *at, by.clone())),
                    End::Open(_) => None,
                })
                .collect(),
            open: streaks
                .iter()
                .filter(|s| matches!(s.end, End::Open(_)))
                .map(|s| (s.class, s.start_at))
                .collect(),
            webhook: None,
        }
    }

    /// Whether the store knows anything about the ID.
    pub fn found(&self) -> bool {
        self.first_seen.is_some() || !self.runs.is_empty() || self.webhook.is_some()
    }

    /// The webhook delivery in one line.
    fn delivery_line(d: &DeliveryRow) -> String {
        format!(
            "{}{} ({} attempt{}), verified {}, key {}, last planned by run {}{}",
            d.status.as_str(),
            d.http_status
                .map(|s| format!(" HTTP {s}"))
                .unwrap_or_default(),
            d.attempts,
            if d.attempts == 1 { "" } else { "s" },
            d.verified.as_str(),
            d.idempotency_key,
            d.plan_id,
            d.last_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        )
    }

    /// The story as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "job": self.job,
            "external_id": self.external_id,
            "found": self.found(),
            "first_seen": self.first_seen.as_ref().map(|(at, run, class)| json!({
                "at": format_timestamp(*at), "run_id": run, "class": class.as_str(),
            })),
            "runs": self.runs.iter().map(|r| json!({
                "run_id": r.run_id,
                "started_at": format_timestamp(r.started_at),
                "status": r.status.as_str(),
                "dry_run": r.dry_run,
                "classes": r.classes.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                "backfill": r.items.iter().map(|i| json!({
                    "action": i.action,
                    "status": i.status.as_str(),
                    "attempts": i.attempts,
                    "last_error": i.last_error,
                    "updated_at": format_timestamp(i.updated_at),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "resolved": self.resolved.iter().map(|(c, at, by)| json!({
                "class": c.as_str(), "at": format_timestamp(*at), "run_id": by,
            })).collect::<Vec<_>>(),
            "open": self.open.iter().map(|(c, since)| json!({
                "class": c.as_str(), "since": format_timestamp(*since),
            })).collect::<Vec<_>>(),
            "webhook": self.webhook.as_ref().map(|d| json!({
                "status": d.status.as_str(),
                "http_status": d.http_status,
                "attempts": d.attempts,
                "verified": d.verified.as_str(),
                "idempotency_key": d.idempotency_key,
                "plan_id": d.plan_id,
                "last_error": d.last_error,
            })),
        })
    }

    /// The story as text.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "{} in job {}", self.external_id, self.job);
        if !self.found() {
            let _ = writeln!(
                out,
                "never seen: no run of this job found it as a discrepancy or planned a write for it"
            );
            return out;
        }
        if let Some((at, run, class)) = &self.first_seen {
            let _ = writeln!(
                out,
                "first seen  {}{}, as {class}",
                format_timestamp(*at),
                by_run(run.as_deref())
            );
        }
        self.render_runs(&mut out);
        out.push('\n');
        for (class, at, by) in &self.resolved {
            let _ = writeln!(
                out,
                "resolved    {} ({class}){}",
                format_timestamp(*at),
                by_run(by.as_deref())
            );
        }
        if self.open.is_empty() {
            let _ = writeln!(out, "now         resolved: nothing open");
        }
        for (class, since) in &self.open {
            let _ = writeln!(
                out,
                "now         open as {class} since {}",
                format_timestamp(*since)
            );
        }
        if let Some(d) = &self.webhook {
            let _ = writeln!(out, "webhook     {}", Self::delivery_line(d));
        }
        out
    }

    /// The table of runs: start, id, status, classes, backfill items.
    fn render_runs(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "\n{:<20}  {:<44} {:<24} {:<18} backfill",
            "started", "run", "status", "class"
        );
        for r in &self.runs {
            let status = format!("{}{}", r.status, if r.dry_run { " (dry run)" } else { "" });
            let classes = if r.classes.is_empty() {
                "-".to_string()
            } else {
                r.classes
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let items = r
                .items
                .iter()
                .map(|i| {
                    format!(
                        "{} {} ({} attempt{}){}",
                        i.action,
                        i.status,
                        i.attempts,
                        if i.attempts == 1 { "" } else { "s" },
                        i.last_error
                            .as_deref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let _ = writeln!(
                out,
                "{:<20}  {:<44} {:<24} {:<18} {}",
                format_timestamp(r.started_at),
                r.run_id,
                status,
                classes,
                if items.is_empty() { "-" } else { &items }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ClosedStreak, DiscrepancyStreak, ItemStatus, RunRow};

    fn t(h: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + h * 3600).unwrap()
    }

    fn run(id: &str, h: i64) -> RunRow {
        RunRow {
            id: id.into(),
            job: "j".into(),
            window_start: t(0),
            window_end: t(1),
            started_at: t(h),
            finished_at: Some(t(h)),
            status: RunStatus::Discrepancies,
            dry_run: false,
            counts: None,
            report_dir: None,
            error: None,
        }
    }

    fn closed(class: Class, first: i64, by: &str, at: i64) -> ClosedStreak {
        ClosedStreak {
            class,
            first_seen_at: t(first),
            resolved_run: by.into(),
            resolved_at: t(at),
        }
    }

    #[test]
    fn a_gap_that_came_back_has_two_streaks() {
        // r1 sees it, r2 resolves it, r3 agrees, r4 sees it again (open).
        let records = IdRecords {
            runs: vec![
                run("r0", 0),
                run("r1", 1),
                run("r2", 2),
                run("r3", 3),
                run("r4", 4),
            ],
            streaks: vec![DiscrepancyStreak {
                class: Class::Gap,
                first_seen_run: "r4".into(),
                first_seen_at: t(4),
                last_seen_run: "r4".into(),
                last_seen_at: t(4),
                resolved_at: None,
            }],
            closed: vec![closed(Class::Gap, 1, "r2", 2)],
            items: vec![ItemRecord {
                plan_id: "r1".into(),
                action: "insert".into(),
                status: ItemStatus::Applied,
                attempts: 1,
                last_error: None,
                updated_at: t(1),
            }],
        };
        let s = Story::of("j", "ch_1", &records);
        let classes: Vec<(&str, Vec<Class>)> = s
            .runs
            .iter()
            .map(|r| (r.run_id.as_str(), r.classes.clone()))
            .collect();
        assert_eq!(
            classes,
            [
                ("r1", vec![Class::Gap]),
                ("r2", vec![]),
                ("r3", vec![]),
                ("r4", vec![Class::Gap])
            ]
        );
        assert_eq!(s.first_seen, Some((t(1), Some("r1".into()), Class::Gap)));
        assert_eq!(s.resolved, [(Class::Gap, t(2), Some("r2".into()))]);
        assert_eq!(s.open, [(Class::Gap, t(4))]);
        assert_eq!(s.runs[0].items.len(), 1);
        let text = s.render();
        assert!(text.contains("insert applied (1 attempt)"), "{text}");
        assert!(text.contains("open as gap since"), "{text}");
    }

    #[test]
    fn a_webhook_delivery_is_part_of_the_story() {
        use crate::state::webhook::{DeliveryStatus, Verified};
        let records = IdRecords {
            runs: vec![run("r1", 1)],
            streaks: Vec::new(),
            closed: Vec::new(),
            items: Vec::new(),
        };
        let mut s = Story::of("j", "ch_1", &records);
        assert!(!s.found(), "nothing known yet");
        s.webhook = Some(DeliveryRow {
            external_id: "ch_1".into(),
            idempotency_key: "recon-abc".into(),
            plan_id: "r1".into(),
            status: DeliveryStatus::Delivered,
            verified: Verified::NotCreated,
            http_status: Some(200),
            attempts: 2,
            last_error: None,
        });
        assert!(s.found());
        let text = s.render();
        assert!(
            text.contains("webhook     delivered HTTP 200 (2 attempts), verified not_created, key recon-abc, last planned by run r1"),
            "{text}"
        );
        let j = s.to_json();
        assert_eq!(j["webhook"]["verified"], "not_created");
        assert_eq!(j["webhook"]["attempts"], 2);
        assert_eq!(j["found"], true);
    }

    #[test]
    fn a_streak_older_than_the_event_table_comes_from_the_history_row() {
        let records = IdRecords {
            runs: vec![run("r1", 1), run("r2", 2), run("r3", 3)],
            streaks: vec![DiscrepancyStreak {
                class: Class::Orphan,
                first_seen_run: "r1".into(),
                first_seen_at: t(1),
                last_seen_run: "r2".into(),
                last_seen_at: t(2),
                resolved_at: Some(t(3)),
            }],
            ..IdRecords::default()
        };
        let s = Story::of("j", "x", &records);
        let runs: Vec<_> = s
            .runs
            .iter()
            .map(|r| (r.run_id.as_str(), r.classes.len()))
            .collect();
        assert_eq!(runs, [("r1", 1), ("r2", 1), ("r3", 0)]);
        assert_eq!(s.resolved, [(Class::Orphan, t(3), None)]);
        assert!(s.open.is_empty());
        let nothing = Story::of("j", "y", &IdRecords::default());
        assert!(!nothing.found());
        assert!(nothing.render().contains("never seen"));
        assert_eq!(nothing.to_json()["found"], false);
    }
}
