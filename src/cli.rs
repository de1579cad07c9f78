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

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Diff two export files (.csv or .jsonl) by external ID.
    Diff(DiffArgs),
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
    /// Tolerances: FIELD=N (money in minor units, or integers) or FIELD=Ns
    /// (timestamps, seconds), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tolerance: Vec<String>,
}
