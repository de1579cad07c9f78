//! `recon runs`: recent runs of each job, newest first.

use anyhow::Result;

use crate::cli::RunsArgs;
use crate::config;
use crate::report::summary::{Class, Counts};
use crate::state::ReportReads;
use crate::state::{RunRow, RunStatus, StateStore};
use crate::Status;

/// The `recon runs` command.
pub fn run(args: RunsArgs) -> Result<Status> {
    let file = config::load(&args.config)?;
    // The defaults' store, for a config of several jobs listed without --job.
    let default_state = file
        .defaults
        .state
        .as_ref()
        .map(|s| config::expand_env(s.expose(), "defaults.state"))
        .transpose()?
        .unwrap_or_else(|| config::DEFAULT_STATE.into());
    let several = file.jobs.len() > 1;
    let (state_url, only) = match &args.job {
        // A named job must exist: its own store, its runs only.
        Some(name) => {
            let j = file.job(Some(name))?;
            (j.state.expose().to_string(), Some(j.name))
        }
        None if several => (default_state, None),
        None => (file.job(None)?.state.expose().to_string(), None),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let rows = runtime.block_on(async {
        let state = StateStore::open(&state_url).await?;
        let mut rows = state.recent_runs(only.as_deref(), args.limit).await?;
        settle_dead_runs(&state, &mut rows).await?;
        Ok::<_, anyhow::Error>(rows)
    })?;
    println!(
        "{:<40} {:<16} {:<13} {:<7} {:<41} {:>6} {:>8} {:>10}",
        "run", "job", "status", "dry", "window", "gaps", "orphans", "backfilled"
    );
    for r in rows {
        let counts = r.counts.as_ref().map(Counts::of_json).unwrap_or_default();
        let n = |class: Class| {
            counts
                .present(class)
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{:<40} {:<16} {:<13} {:<7} {:<41} {:>6} {:>8} {:>10}",
            r.id,
            r.job,
            r.status,
            if r.dry_run { "yes" } else { "no" },
            format!("{}..{}", r.window_start, r.window_end),
            n(Class::Gaps),
            n(Class::Orphans),
            n(Class::Backfilled),
        );
    }
    Ok(Status::Clean)
}

/// Shows as `crashed` each `running` run whose lock holder is provably gone
/// (killed with `kill -9`, say), instead of `running` until the next run of
/// its job starts and records it so. The store is not changed: the next
/// run still records the crash and supersedes the run's unwritten items.
///
/// A run still `running` after its holder was seen gone cannot be in
/// progress: a live run holds the lock from before it is recorded until
/// after it finishes. The status is read again after the lock check, so a
/// run that finished in between is shown as it finished.
async fn settle_dead_runs(state: &StateStore, rows: &mut [RunRow]) -> Result<()> {
    let mut gone: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    for r in rows.iter_mut().filter(|r| r.status == RunStatus::Running) {
        let holder_gone = match gone.get(&r.job) {
            Some(g) => *g,
            None => {
                let g = state.lock_holder_gone(&r.job).await?;
                gone.insert(r.job.clone(), g);
                g
            }
        };
        if !holder_gone || state.run_owner_alive_here(&r.id).await? {
            continue;
        }
        match state.run_status(&r.id).await? {
            Some(RunStatus::Running) => r.status = RunStatus::Crashed,
            Some(now) => r.status = now,
            None => {}
        }
    }
    Ok(())
}
