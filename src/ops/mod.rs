//! What the people on call and in finance see of a run besides its report
//! folder: the metrics file for alerting ([`metrics`]), a webhook
//! notification ([`notify`]) and, on a terminal, progress ([`progress`]).
//!
//! `recon run` and `recon apply` wrap their work in [`Ops::start`] and
//! [`Ops::finish`], which gets the run's [`Finished`]: its
//! [`RunSummary`] is what summary.json holds (and the backfill's outcomes,
//! as backfill.csv lists them), so the metrics and the message agree with
//! the reports by construction. The pipeline tells this module which run
//! it is ([`note_run`]) for log lines and for a run that fails before it
//! has a summary. Nothing here changes a run's
//! exit status: a metrics file or a webhook that cannot be written is
//! reported on stderr (scrubbed) and the run's status stands.

pub mod metrics;
pub mod notify;
pub mod progress;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use jiff::Timestamp;
use recon_core::{format_timestamp, Secret, Window};

use crate::config::{self, ConfigFile};
use crate::pipeline::Finished;
use crate::report::{BackfillOutcome, Class, RunSummary};
use crate::state::prelude::*;
use crate::state::{RunStatus, StateStore};
use crate::Status;

/// What the pipeline said about the run of this process, before it had a
/// summary: for log lines (`run_id`, `job`) and a failed run's metrics and
/// message.
#[derive(Clone, Debug, Default)]
pub struct RunNote {
    /// The job.
    pub job: Option<String>,
    /// The run's id in the state store, once it has one.
    pub run_id: Option<String>,
    /// The window asked for.
    pub window: Option<Window>,
}

static NOTE: Mutex<RunNote> = Mutex::new(RunNote {
    job: None,
    run_id: None,
    window: None,
});

fn with_note<R>(f: impl FnOnce(&mut RunNote) -> R) -> R {
    f(&mut NOTE.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The run has an id (called by the pipeline right after the state store
/// recorded its start).
pub fn note_run(job: &str, run_id: &str, window: Window) {
    tracing::Span::current().record("run_id", run_id);
    with_note(|n| {
        *n = RunNote {
            job: Some(job.to_string()),
            run_id: Some(run_id.to_string()),
            window: Some(window),
        }
    });
}

/// A run of `job` begins (it has no id yet).
pub fn note_job(job: &str) {
    with_note(|n| {
        *n = RunNote {
            job: Some(job.to_string()),
            ..RunNote::default()
        }
    });
}

/// What is known of the current run (for log lines).
pub fn current_run() -> RunNote {
    with_note(|n| n.clone())
}

/// The operations settings of one job, read from its config.
#[derive(Debug, Default)]
pub struct Settings {
    /// The job.
    pub job: Option<String>,
    /// Where the metrics go (`--metrics-file`, else the job's or the
    /// defaults' `metrics_file`), `{job}` replaced by the job's name.
    pub metrics_file: Option<PathBuf>,
    /// The `[notify]` section, its URL expanded.
    pub notify: Option<notify::Notify>,
    /// The state store, for the last success of a failed run.
    pub state: Option<Secret>,
}

impl Settings {
    /// Reads what it can: a config that does not load yields what the flags
    /// say (the run itself reports the config's error in its own words).
    fn load(config: &Path, job: Option<&str>, flag: Option<&Path>) -> (Settings, Option<String>) {
        let mut s = Settings {
            job: job.map(str::to_string),
            ..Settings::default()
        };
        let file = match config::load(config) {
            Ok(f) => f,
            Err(_) => {
                s.metrics_file = flag.map(|p| expand_job(p, s.job.as_deref()));
                return (s, None);
            }
        };
        if s.job.is_none() && file.jobs.len() == 1 {
            s.job = file.jobs.keys().next().cloned();
        }
        let configured = s
            .job
            .as_deref()
            .and_then(|j| file.jobs.get(j))
            .and_then(|j| j.metrics_file.clone())
            .or_else(|| file.defaults.metrics_file.clone());
        s.metrics_file = flag
            .map(Path::to_path_buf)
            .or(configured.map(PathBuf::from))
            .map(|p| expand_job(&p, s.job.as_deref()));
        let mut problem = None;
        let ConfigFile { notify, .. } = &file;
        if let Some(n) = notify {
            match notify::Notify::resolve(n) {
                Ok(n) => s.notify = Some(n),
                Err(e) => problem = Some(format!("{e:#}")),
            }
        }
        if let Some(job) = s.job.clone() {
            s.state = file.job(Some(&job)).ok().map(|j| j.state);
        }
        (s, problem)
    }
}

/// What [`Ops::start`] would find for `job` (read by `recon check`, which
/// has no `--metrics-file`): the configured metrics file, and the
/// `[notify]` section resolved (`None` without one; `Err` with the reason
/// `recon run` would refuse to start).
pub struct Preflight {
    /// The job's (or the defaults') `metrics_file`, `{job}` expanded.
    pub metrics_file: Option<PathBuf>,
    /// The `[notify]` section: `Ok(when)` (`on trouble, discrepancies`).
    pub notify: Option<Result<String, String>>,
}

/// The settings [`Ops::start`] checks, for `recon check`.
pub fn preflight(config: &Path, job: &str) -> Preflight {
    let (settings, problem) = Settings::load(config, Some(job), None);
    let notify = match (problem, &settings.notify) {
        (Some(p), _) => Some(Err(format!("config {}: [notify]: {p}", config.display()))),
        (None, Some(n)) => Some(Ok(n.describe())),
        (None, None) => None,
    };
    Preflight {
        metrics_file: settings.metrics_file,
        notify,
    }
}

/// `{job}` in a metrics path becomes the job's name (one file per job for
/// the textfile collector).
fn expand_job(path: &Path, job: Option<&str>) -> PathBuf {
    match (path.to_str(), job) {
        (Some(text), Some(job)) if text.contains("{job}") => {
            PathBuf::from(text.replace("{job}", job))
        }
        _ => path.to_path_buf(),
    }
}

/// The operations side of one `recon run` or `recon apply`.
pub struct Ops {
    started: Instant,
    settings: Settings,
    config: PathBuf,
    metrics_flag: Option<PathBuf>,
}

impl Ops {
    /// Reads the settings and checks, before anything is read or written,
    /// that the metrics file's folder exists and that `[notify]` is usable
    /// (exit 2 with the fix otherwise).
    pub fn start(config: &Path, job: Option<&str>, metrics_flag: Option<&Path>) -> Result<Ops> {
        let started = Instant::now();
        let (settings, problem) = Settings::load(config, job, metrics_flag);
        if let Some(problem) = problem {
            bail!("config {}: [notify]: {problem}", config.display());
        }
        if let Some(path) = &settings.metrics_file {
            metrics::check_destination(path)?;
        }
        Ok(Ops {
            started,
            settings,
            config: config.to_path_buf(),
            metrics_flag: metrics_flag.map(Path::to_path_buf),
        })
    }

    /// Writes the metrics file and sends the notification for the command's
    /// result. Never fails: problems are reported on stderr, scrubbed.
    pub fn finish(mut self, result: &Result<Finished>) {
        // `recon apply` learns its job from the plan file.
        if let (None, Some(job)) = (&self.settings.job, current_run().job) {
            self.settings =
                Settings::load(&self.config, Some(&job), self.metrics_flag.as_deref()).0;
        }
        let outcome = Outcome::of(&self.settings, result, self.started.elapsed());
        let needs_notify = self
            .settings
            .notify
            .as_ref()
            .is_some_and(|n| n.wants(outcome.status));
        if self.settings.metrics_file.is_none() && !needs_notify {
            return;
        }
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                crate::logging::stderr_line(
                    "error",
                    &format!("metrics and notification skipped: {e}"),
                );
                return;
            }
        };
        runtime.block_on(async {
            if needs_notify {
                if let Some(n) = &self.settings.notify {
                    if let Err(e) = n.send(&outcome).await {
                        let text = recon_core::scrub(&format!("{e:#}")).into_owned();
                        crate::logging::stderr_line(
                            "error",
                            &format!("notification not sent (the run's status stands): {text}"),
                        );
                    }
                }
            }
            if let (Some(path), Some(job)) = (&self.settings.metrics_file, &outcome.job) {
                let last_success = last_success(&self.settings, job, &outcome).await;
                let text = metrics::render_file(path, job, &outcome, last_success);
                if let Err(e) = metrics::write_atomic(path, text.as_bytes()) {
                    let text = recon_core::scrub(&format!("{e:#}")).into_owned();
                    crate::logging::stderr_line(
                        "error",
                        &format!("metrics file {} not written: {text}", path.display()),
                    );
                }
            } else if self.settings.metrics_file.is_some() {
                crate::logging::stderr_line(
                    "error",
                    "metrics file not written: the job is not known (the config did not load); name it with --job",
                );
            }
        });
    }
}

/// How a command ended, as the metrics and the notification tell it.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The job, when known.
    pub job: Option<String>,
    /// The run's id, when the state store gave it one.
    pub run_id: Option<String>,
    /// clean, discrepancies or failed.
    pub status: RunStatus,
    /// The process exit status.
    pub exit_status: u8,
    /// Why it failed (scrubbed).
    pub error: Option<String>,
    /// The run's summary, when its reports were written.
    pub summary: Option<RunSummary>,
    /// The report folder.
    pub report_dir: Option<PathBuf>,
    /// The window asked for, RFC 3339.
    pub window: Option<(String, String)>,
    /// Wall time of the command.
    pub duration: Duration,
    /// When it ended.
    pub finished: Timestamp,
}

impl Outcome {
    fn of(settings: &Settings, result: &Result<Finished>, duration: Duration) -> Outcome {
        let note = current_run();
        let (status, exit_status, error) = match result {
            Ok(f) => (f.status.run_status(), f.status.code(), None),
            Err(e) => (
                RunStatus::Failed,
                Status::Trouble.code(),
                Some(recon_core::scrub(&format!("{e:#}")).into_owned()),
            ),
        };
        let (summary, report_dir) = match result {
            Ok(f) => (Some(f.summary.clone()), Some(f.report.clone())),
            Err(_) => (None, None),
        };
        // A finished run names itself; the note is for one that failed.
        let run_id = summary.as_ref().and_then(|s| s.run.run_id.clone());
        let window = note
            .window
            .map(|w| (format_timestamp(w.start), format_timestamp(w.end)));
        Outcome {
            job: note.job.or_else(|| settings.job.clone()),
            run_id: run_id.or(note.run_id),
            status,
            exit_status,
            error,
            summary,
            report_dir,
            window,
            duration,
            finished: Timestamp::now(),
        }
    }

    /// A count of the summary (`gaps`, `backfilled`…), when it holds it.
    pub fn count(&self, class: Class) -> Option<u64> {
        self.summary.as_ref()?.counts.present(class)
    }

    /// The report to open: report.html when the folder has one, else the
    /// folder.
    pub fn report(&self) -> Option<PathBuf> {
        let dir = self.report_dir.as_ref()?;
        let html = dir.join("report.html");
        Some(if html.exists() { html } else { dir.clone() })
    }

    /// Target total minus source total per currency, in minor units, from
    /// the summary's totals.
    pub fn money_delta(&self) -> Vec<(String, i128)> {
        self.summary
            .as_ref()
            .map(RunSummary::money_delta)
            .unwrap_or_default()
    }

    /// The backfill's items by outcome (every outcome listed, 0 when none).
    pub fn backfill(&self) -> Vec<(BackfillOutcome, u64)> {
        self.summary
            .as_ref()
            .map(RunSummary::backfill_outcomes)
            .unwrap_or_default()
    }
}

/// When the job last finished with exit 0 or 1: now, for such a run;
/// otherwise the latest of what the state store and the previous metrics
/// file say.
async fn last_success(settings: &Settings, job: &str, outcome: &Outcome) -> Option<Timestamp> {
    if outcome.status != RunStatus::Failed {
        return Some(outcome.finished);
    }
    let previous = settings
        .metrics_file
        .as_deref()
        .and_then(|p| metrics::previous_last_success(p, job));
    let stored = match &settings.state {
        Some(url) => tokio::time::timeout(Duration::from_secs(10), stored_success(url, job))
            .await
            .ok()
            .flatten(),
        None => None,
    };
    previous.max(stored)
}

/// The end of the job's latest run that finished clean or with
/// discrepancies (dry runs included: they read both sides whole).
async fn stored_success(url: &Secret, job: &str) -> Option<Timestamp> {
    let state = StateStore::open(url.expose()).await.ok()?;
    let runs = state.recent_runs(Some(job), 500).await.ok();
    state.close().await;
    runs?
        .into_iter()
        .find(|r| matches!(r.status, RunStatus::Clean | RunStatus::Discrepancies))
        .and_then(|r| r.finished_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_placeholder_names_one_file_per_job() {
        assert_eq!(
            expand_job(Path::new("/var/lib/node/recon-{job}.prom"), Some("charges")),
            PathBuf::from("/var/lib/node/recon-charges.prom")
        );
        assert_eq!(
            expand_job(Path::new("/m/recon.prom"), Some("charges")),
            PathBuf::from("/m/recon.prom")
        );
    }

    #[test]
    fn money_delta_is_target_minus_source_per_currency() {
        let o = Outcome {
            job: Some("j".into()),
            run_id: None,
            status: RunStatus::Discrepancies,
            exit_status: 1,
            error: None,
            summary: Some(
                RunSummary::of_json(serde_json::json!({"totals": {
                "source": [{"currency": "USD", "total_minor": "1000"}, {"currency": "JPY", "total_minor": "5"}],
                "target": [{"currency": "USD", "total_minor": "750"}, {"currency": null, "total_minor": null}],
            }}))
                .unwrap(),
            ),
            report_dir: None,
            window: None,
            duration: Duration::ZERO,
            finished: Timestamp::UNIX_EPOCH,
        };
        assert_eq!(
            o.money_delta(),
            vec![("JPY".to_string(), -5), ("USD".to_string(), -250)]
        );
    }
}
