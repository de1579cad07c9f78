//! `recon run`: one reconciliation run of a configured job. Read both
//! sides over the window, diff, confirm edge cases by key, report, and
//! backfill gaps idempotently (or, with `--dry-run`, only plan it). The
//! stages live in [`crate::pipeline`].

use anyhow::Result;

use crate::cli::RunArgs;
use crate::pipeline::{execute, RunPlan};
use crate::Status;

/// The `recon run` command.
pub fn run(args: RunArgs) -> Result<Status> {
    let ops = crate::ops::Ops::start(
        &args.config,
        args.job.as_deref(),
        args.metrics_file.as_deref(),
    )?;
    let result = run_plan(&args);
    // The metrics file and the notification, whatever the outcome.
    ops.finish(&result);
    result.map(|f| f.status)
}

fn run_plan(args: &RunArgs) -> Result<crate::pipeline::Finished> {
    let plan = RunPlan::from_args(args)?;
    super::locked_command(execute(plan))
}
