use std::process::ExitCode;

use recon::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::parse_or_exit_status() {
        Ok(cli) => cli,
        // Printed already (plain, or a JSON line with --log-format json).
        Err(code) => return ExitCode::from(code),
    };
    recon::logging::init_with(&cli.log, cli.log_format.into());
    let result = match cli.command {
        Command::Diff(args) => recon::commands::diff::run(args),
        Command::Run(args) => recon::commands::run::run(args),
        Command::Apply(args) => recon::commands::apply::run(args),
        Command::Demo(args) => recon::commands::demo::run(args),
        Command::Runs(args) => recon::commands::runs::run(args),
        Command::Report(args) => recon::commands::report::run(args),
        Command::History(args) => recon::commands::history::run(args),
        Command::Check(args) => recon::commands::check::run(args),
    };
    match result {
        Ok(status) => status.into(),
        Err(e) => {
            // Scrubbed: a driver's error may echo a secret in its own words.
            recon::logging::stderr_line("error", &format!("{e:#}"));
            recon::Status::Trouble.into()
        }
    }
}
