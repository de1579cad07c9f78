//! Command-line arguments as typed by the user (clap lives only here and in
//! `main.rs`). Each command turns its arguments into a validated plan before
//! any I/O.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Reconcile a source of truth against a target: diff by external ID,
/// report gaps, orphans, mismatches and duplicates, backfill the gaps.
///
/// Exit status: 0 nothing left open, 1 discrepancies remain (reports
/// written), 2 trouble (bad input or config, connector failure).
#[derive(Debug, Parser)]
#[command(name = "recon", version, max_term_width = 100)]
pub struct Cli {
    /// Log verbosity: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, global = true, env = "RECON_LOG", default_value = "warn")]
    pub log: String,

    /// Log line format: text (for people) or json (one object per line, with
    /// run_id, job and phase, for log shippers).
    #[arg(
        long,
        global = true,
        env = "RECON_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    pub log_format: LogFormatArg,

    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line, or the exit status once an argument error (or
    /// `--help`, `--version`) has been printed: `--help` and `--version`
    /// as clap prints them (status 0); an argument error as clap prints it,
    /// or, when `--log-format json` (or `RECON_LOG_FORMAT=json`) was asked
    /// for, as one JSON line like every other log line (status 2).
    pub fn parse_or_exit_status() -> Result<Cli, u8> {
        let error = match Cli::try_parse() {
            Ok(cli) => return Ok(cli),
            Err(e) => e,
        };
        let code = u8::try_from(error.exit_code()).unwrap_or(2);
        let asked = json_logs_asked(
            std::env::args_os().skip(1),
            std::env::var_os("RECON_LOG_FORMAT"),
        );
        if code == 0 || !error.use_stderr() || !asked {
            let _ = error.print();
            return Err(code);
        }
        let (message, fields) = argument_error(&error);
        crate::logging::init_with("warn", crate::logging::Format::Json);
        crate::logging::stderr_line_with("error", &message, fields);
        Err(code)
    }
}

/// Whether the command line (or, when it does not say, `RECON_LOG_FORMAT`)
/// asks for JSON log lines, read without clap: for a command line clap
/// refused. The last `--log-format` before a `--` counts.
fn json_logs_asked(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    env: Option<std::ffi::OsString>,
) -> bool {
    let mut said: Option<std::ffi::OsString> = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--log-format" {
            said = Some(args.next().unwrap_or_default());
        } else if let Some(v) = arg.to_str().and_then(|a| a.strip_prefix("--log-format=")) {
            said = Some(v.into());
        }
    }
    said.or(env).is_some_and(|v| v == "json")
}

/// An argument error as a log line: its message (clap's first paragraph,
/// without `error: `) and fields: `kind`, and the `usage` and `tip` clap
/// prints, when it does.
fn argument_error(e: &clap::Error) -> (String, serde_json::Map<String, serde_json::Value>) {
    use clap::error::ErrorKind;
    let rendered = e.render().to_string();
    let mut fields = serde_json::Map::new();
    fields.insert("kind".into(), format!("{:?}", e.kind()).into());
    let mut message = String::new();
    let mut tips = Vec::new();
    for paragraph in rendered.split("\n\n") {
        let flat = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        if flat.is_empty() || flat.starts_with("For more information") {
            continue;
        }
        if let Some(usage) = flat.strip_prefix("Usage: ") {
            fields.insert("usage".into(), usage.into());
        } else if let Some(tip) = flat.strip_prefix("tip: ") {
            tips.push(tip.to_string());
        } else if message.is_empty() {
            message = flat.strip_prefix("error: ").unwrap_or(&flat).to_string();
        }
    }
    if !tips.is_empty() {
        fields.insert("tip".into(), tips.join("; ").into());
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand || message.is_empty() {
        let names: Vec<String> = <Cli as clap::CommandFactory>::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        message = format!(
            "recon needs a command ({}); see recon --help",
            names.join(", ")
        );
    }
    (message, fields)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Diff two export files (.csv or .jsonl) by external ID.
    Diff(DiffArgs),
    /// One reconciliation run of a configured job: read, diff, report, backfill.
    Run(RunArgs),
    /// Apply exactly a reviewed dry-run plan (plan.jsonl).
    Apply(ApplyArgs),
    /// Run the whole product offline: an emulated Stripe API, a SQLite
    /// ledger with planted discrepancies, then a dry run, an apply and a rerun.
    #[cfg_attr(
        not(feature = "demo"),
        command(
            about = "Not in this build (compiled without the `demo` feature): exits with status 2",
            long_about = None
        )
    )]
    Demo(DemoArgs),
    /// Recent runs of each job, from the state store.
    Runs(RunsArgs),
    /// Write report.html again for a job's latest run (or --run), with
    /// charts of its last runs, from the state store and the run's folder.
    Report(ReportArgs),
    /// One external ID's story across a job's runs: first seen, class per
    /// run, backfill attempts and outcomes, resolved when.
    History(HistoryArgs),
    /// Preflight a job without reading a window: config, secrets, each
    /// endpoint reachable and authenticated, the target's unique key,
    /// provider limits, state store and report folder writable. Exit 0
    /// when every check passes, 2 otherwise.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The plan.jsonl of a dry run.
    #[arg(long)]
    pub plan: PathBuf,
    /// The job config (TOML).
    #[arg(long, env = "RECON_CONFIG")]
    pub config: PathBuf,
    /// The job the plan must belong to (default: the job the plan names).
    #[arg(long)]
    pub job: Option<String>,
    /// Write the reports directly into this folder (a new or empty folder,
    /// or an earlier report folder, which is replaced whole). It may not be
    /// the folder holding the plan: apply never deletes the plan it applies.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override backfill.max_records for this apply (a whole number, 0 or more).
    #[arg(long, allow_negative_numbers = true, value_parser = max_records_arg)]
    pub max_records: Option<u64>,
    /// Override backfill.max_ratio for this apply (0 to 1; 0.05 = 5%).
    #[arg(long, allow_negative_numbers = true, value_parser = max_ratio_arg)]
    pub max_ratio: Option<f64>,
    /// Write Prometheus metrics of the apply to this file, atomically
    /// (overrides the config's metrics_file).
    #[arg(long)]
    pub metrics_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job config (TOML).
    #[arg(long, env = "RECON_CONFIG")]
    pub config: PathBuf,
    /// Which job; may be omitted when the config has one.
    #[arg(long)]
    pub job: Option<String>,
    /// Window: today, yesterday, last:24h, 2026-11-28, 2026-11-01..2026-11-28,
    /// an RFC 3339 range, or since-last-success. Default: the job's `window`.
    #[arg(long)]
    pub window: Option<String>,
    /// Read, diff, report and write the backfill plan; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write the reports directly into this folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override backfill.max_records for this run (a whole number, 0 or more).
    #[arg(long, allow_negative_numbers = true, value_parser = max_records_arg)]
    pub max_records: Option<u64>,
    /// Override backfill.max_ratio for this run (0 to 1; 0.05 = 5%).
    #[arg(long, allow_negative_numbers = true, value_parser = max_ratio_arg)]
    pub max_ratio: Option<f64>,
    /// Write Prometheus metrics of the run to this file (node_exporter's
    /// textfile collector), atomically (overrides the config's metrics_file).
    #[arg(long)]
    pub metrics_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    /// The job config (TOML), for the state store's location.
    #[arg(long, env = "RECON_CONFIG")]
    pub config: PathBuf,
    /// Only this job.
    #[arg(long)]
    pub job: Option<String>,
    /// How many runs to list.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The job config (TOML).
    #[arg(long, env = "RECON_CONFIG")]
    pub config: PathBuf,
    /// Which job; may be omitted when the config has one.
    #[arg(long)]
    pub job: Option<String>,
}

impl CheckArgs {
    /// The arguments of `recon run --config FILE [--job NAME]` with every
    /// other flag at its default: the run this check prepares for.
    pub fn run_args(&self) -> RunArgs {
        use clap::{Args, FromArgMatches};
        let mut argv = vec![
            "run".into(),
            "--config".into(),
            self.config.clone().into_os_string(),
        ];
        if let Some(job) = &self.job {
            argv.extend(["--job".into(), job.into()]);
        }
        let matches = RunArgs::augment_args(clap::Command::new("run"))
            .get_matches_from::<_, std::ffi::OsString>(argv);
        RunArgs::from_arg_matches(&matches).expect("recon run's defaults parse")
    }
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The job config (TOML).
    #[arg(long, env = "RECON_CONFIG")]
    pub config: PathBuf,
    /// Which job; may be omitted when the config has one.
    #[arg(long)]
    pub job: Option<String>,
    /// How many runs the charts show (this one and those before it).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub runs: u16,
    /// The run whose report to write (default: the job's latest run with a
    /// report folder).
    #[arg(long)]
    pub run: Option<String>,
    /// Folder to write report.html into (default: the run's own report
    /// folder, beside its CSV files, replacing its report.html).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The external ID (for example a Stripe charge ID).
    pub id: String,
    /// The job config (TOML).
    #[arg(long, env = "RECON_CONFIG")]
    pub config: PathBuf,
    /// Which job; may be omitted when the config has one.
    #[arg(long)]
    pub job: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// tracing's human format.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl From<LogFormatArg> for crate::logging::Format {
    fn from(f: LogFormatArg) -> Self {
        match f {
            LogFormatArg::Text => crate::logging::Format::Text,
            LogFormatArg::Json => crate::logging::Format::Json,
        }
    }
}

/// How amounts are written in a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum AmountFormatArg {
    /// Integer minor units, as Stripe writes them: 2999.
    #[default]
    Minor,
    /// Decimal major units, as Shopify and dashboards write them: 29.99.
    Major,
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The source of truth: a .csv or .jsonl export.
    pub source: PathBuf,
    /// The target to check: a .csv or .jsonl export.
    pub target: PathBuf,
    /// Column holding the external ID on both sides.
    #[arg(long)]
    pub key: String,
    /// Columns to compare, comma-separated (for example amount,currency,status).
    #[arg(long, value_delimiter = ',')]
    pub compare: Vec<String>,
    /// Folder the reports are written into.
    #[arg(long, default_value = "reports/diff")]
    pub out: PathBuf,
    /// Accepted for scripts written before every copy of a duplicated ID
    /// was listed by default (duplicate_copies.csv and the money counted
    /// twice are kept in the one pass now); it changes nothing.
    #[arg(long, hide = true)]
    pub copies: bool,
    /// The amount column, read as money with the currency column; it is the
    /// money of the per-currency totals. Defaults to `amount` when compared.
    #[arg(long)]
    pub amount: Option<String>,
    /// The currency column of amounts.
    #[arg(long, default_value = "currency")]
    pub currency: String,
    /// How the source writes amounts.
    #[arg(long, value_enum, default_value_t)]
    pub source_amount_format: AmountFormatArg,
    /// How the target writes amounts.
    #[arg(long, value_enum, default_value_t)]
    pub target_amount_format: AmountFormatArg,
    /// Columns compared as instants (Unix seconds or RFC 3339 on either side).
    #[arg(long, value_delimiter = ',')]
    pub timestamps: Vec<String>,
    /// Renames of source columns to the names used in --key and --compare:
    /// FILE_COLUMN=NAME, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub source_rename: Vec<String>,
    /// Renames of target columns: FILE_COLUMN=NAME, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub target_rename: Vec<String>,
    /// Tolerances: FIELD=N (money in minor units, or integers) or
    /// FIELD=DURATION (timestamps: 5s, 2m, 1h30m), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tolerance: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Folder for the three runs' reports (default reports/demo).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// How the gaps are backfilled: `target` (written into the ledger) or
    /// `webhook` (replayed to an in-process webhook handler that creates
    /// them, deduplicating by Idempotency-Key).
    #[arg(long, default_value = "target", value_parser = ["target", "webhook"])]
    pub via: String,
}

/// `--max-ratio`: a finite number from 0 to 1 (NaN, infinities and
/// negative numbers are refused, as in the config).
fn max_ratio_arg(text: &str) -> Result<f64, String> {
    let value: f64 = text.trim().parse().map_err(|_| {
        format!(
            "`{text}` is not a number; --max-ratio must be {}",
            crate::config::MAX_RATIO_RANGE
        )
    })?;
    crate::config::check_max_ratio(value).map_err(|e| format!("--{}", e.replace('_', "-")))
}

/// `--max-records`: a whole number of records, 0 or more.
fn max_records_arg(text: &str) -> Result<u64, String> {
    text.trim().parse().map_err(|_| {
        format!(
            "--max-records must be a whole number from 0 to {} (records written in one run), not `{text}`",
            u64::MAX
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_logs_are_found_in_a_command_line_clap_refused() {
        let asked = |args: &[&str], env: Option<&str>| {
            json_logs_asked(args.iter().map(Into::into), env.map(Into::into))
        };
        assert!(asked(&["--log-format", "json", "run", "--bogus"], None));
        assert!(asked(&["run", "--log-format=json"], None));
        assert!(asked(&["run", "--bogus"], Some("json")));
        assert!(!asked(&["--log-format", "text", "run"], Some("json")));
        assert!(!asked(&["--log-format=json", "--log-format", "text"], None));
        assert!(!asked(&["diff", "--", "--log-format", "json"], None));
        assert!(!asked(&["--log-format", "JSON"], None));
        assert!(!asked(&["--log-format"], Some("json")));
        assert!(!asked(&[], None));
    }

    #[test]
    fn limit_flags_refuse_what_would_disable_the_limit() {
        for bad in [
            "nan", "NaN", "inf", "-inf", "infinity", "-0.5", "1.01", "x", "",
        ] {
            let e = max_ratio_arg(bad).unwrap_err();
            assert!(
                e.contains("--max-ratio must be a number from 0 to 1"),
                "{bad}: {e}"
            );
        }
        assert_eq!(max_ratio_arg("0.052"), Ok(0.052));
        assert!(max_ratio_arg("-0").unwrap().is_sign_positive());
        for bad in ["-5", "--5", "1.5", "nan", "18446744073709551616"] {
            let e = max_records_arg(bad).unwrap_err();
            assert!(
                e.contains("--max-records must be a whole number from 0"),
                "{bad}: {e}"
            );
        }
        assert_eq!(max_records_arg("103"), Ok(103));
    }
}
