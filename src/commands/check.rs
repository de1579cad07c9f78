//! `recon check`: a preflight of a new or changed job, without reading a
//! window. One line per check, in the order a run meets them:
//!
//! | check | what it does |
//! |---|---|
//! | `config` | the file parses (strictly, as `recon run` reads it) and names the job |
//! | `secrets` | every `${VAR}` the job uses is set (names shown, never values): the connectors' settings, state, reports and `backfill.webhook` (url, headers, signing_secret) |
//! | `job` | the plan a run would make: fields, tolerances, window, time zone, target role |
//! | `source TYPE`, `target TYPE` | the connector builds (a SQL table: connection, table, columns) and answers one cheap authenticated call ([`recon_core::Source::probe`]), with the limits and remaining quota the provider reports |
//! | `target uniqueness` | when the job backfills: [`recon_core::Target::check_idempotent`], the unique key a write needs |
//! | `state store` | opened and migrated; a run row written and rolled back |
//! | `report folder` | a temporary file created and removed where the run's reports go |
//! | `webhook endpoint` | with `backfill.via = "webhook"`: the URL parses and its host accepts a TCP connection (nothing is POSTed; only `scheme://host:port` is shown); the target is then only read, its unique key not asked for |
//! | `metrics file` | when the job has a `metrics_file`: its folder exists and takes a file, as `recon run` requires |
//! | `notify` | with a `[notify]` section: its URL's `${VAR}` is set and the URL is valid, as `recon run` requires |
//!
//! A check that cannot run because an earlier one failed is shown as
//! `skip` with the reason. The exit status is 0 when every check passed, 2
//! otherwise. Every line passes through [`recon_core::scrub`].

use std::cell::RefCell;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use recon_core::{BuildContext, ConnectorError, Probe, TargetRole};

use crate::cli::CheckArgs;
use crate::config::{self, BackfillMode, EndpointConfig};
use crate::pipeline::RunPlan;
use crate::state::prelude::*;
use crate::state::StateStore;
use crate::Status;

/// The longest one check may wait for an answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// The outcome of one check.
enum Outcome {
    Ok(String),
    Fail { what: String, fix: String },
    Skip(String),
}

/// Prints each check's line as it completes and remembers whether any failed.
#[derive(Default)]
struct Report {
    failed: Vec<String>,
}

impl Report {
    fn line(&mut self, name: &str, outcome: Outcome) {
        // One line per check: a message's own line breaks (the statement
        // that adds a unique key) become spaces.
        let flat = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let line = match outcome {
            Outcome::Ok(detail) => format!("ok   {name}: {}", flat(&detail)),
            Outcome::Skip(why) => format!("skip {name}: {}", flat(&why)),
            Outcome::Fail { what, fix } => {
                self.failed.push(name.to_string());
                format!("FAIL {name}: {} -> fix: {}", flat(&what), flat(&fix))
            }
        };
        println!("{}", recon_core::scrub(&line));
    }

    fn ok(&mut self, name: &str, detail: impl Into<String>) {
        self.line(name, Outcome::Ok(detail.into()));
    }

    fn fail(&mut self, name: &str, what: impl Into<String>, fix: impl Into<String>) {
        self.line(
            name,
            Outcome::Fail {
                what: what.into(),
                fix: fix.into(),
            },
        );
    }

    fn skip(&mut self, name: &str, why: impl Into<String>) {
        self.line(name, Outcome::Skip(why.into()));
    }

    fn status(&self) -> Status {
        if self.failed.is_empty() {
            Status::Clean
        } else {
            Status::Trouble
        }
    }
}

/// The `recon check` command.
pub fn run(args: CheckArgs) -> Result<Status> {
    let mut report = Report::default();
    let status = check(&args, &mut report)?;
    if status == Status::Clean {
        println!("all checks passed");
    } else {
        println!(
            "{} check(s) failed: {}",
            report.failed.len(),
            report.failed.join(", ")
        );
    }
    Ok(status)
}

fn check(args: &CheckArgs, report: &mut Report) -> Result<Status> {
    // config: the file parses and names a job; nothing is expanded yet.
    let name = match config::load(&args.config).and_then(|f| job_name(f, args.job.as_deref())) {
        Ok(name) => {
            report.ok(
                "config",
                format!("{} parses; job `{name}`", args.config.display()),
            );
            name
        }
        Err(e) => {
            report.fail(
                "config",
                format!("{e:#}"),
                "correct the config file as the message says (examples/recon.toml is a complete, commented example)",
            );
            for name in [
                "secrets",
                "job",
                "source",
                "target",
                "target uniqueness",
                "state store",
                "report folder",
            ] {
                report.skip(name, "the config does not parse");
            }
            return Ok(report.status());
        }
    };

    job_checks(args, &name, report)?;
    ops_checks(&args.config, &name, report);
    Ok(report.status())
}

/// The checks of the job itself: secrets, plan, both sides, the unique key
/// or the webhook endpoint, the state store and the report folder.
fn job_checks(args: &CheckArgs, name: &str, report: &mut Report) -> Result<()> {
    const LATER: [&str; 6] = [
        "job",
        "source",
        "target",
        "target uniqueness",
        "state store",
        "report folder",
    ];
    let skip_rest = |report: &mut Report, from: usize, why: &str| {
        for name in &LATER[from..] {
            report.skip(name, why);
        }
    };

    if !secrets_check(&args.config, name, report)? {
        skip_rest(report, 0, "the job's secrets are not all set");
        return Ok(());
    }

    // job: the plan `recon run` would make, before any connection.
    let plan = match RunPlan::from_args(&args.run_args()) {
        Ok(plan) => {
            report.ok("job", describe_plan(&plan));
            plan
        }
        Err(e) => {
            report.fail(
                "job",
                format!("{e:#}"),
                "correct the job's settings as the message says",
            );
            skip_rest(report, 1, "the job is not valid");
            return Ok(());
        }
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(connect_checks(&plan, report));
    Ok(())
}

/// secrets: every `${VAR}` of the job is set; `false` when one is not.
fn secrets_check(config: &Path, name: &str, report: &mut Report) -> Result<bool> {
    let uses = placeholders(config, name)?;
    let missing: Vec<&(String, String)> = uses
        .iter()
        .filter(|(_, var)| std::env::var_os(var).is_none())
        .collect();
    if missing.is_empty() {
        let mut vars: Vec<&str> = uses.iter().map(|(_, v)| v.as_str()).collect();
        vars.sort_unstable();
        vars.dedup();
        report.ok(
            "secrets",
            if vars.is_empty() {
                "the job uses no ${VAR}".to_string()
            } else {
                format!("{} set", vars.join(", "))
            },
        );
        return Ok(true);
    }
    let what: Vec<String> = missing
        .iter()
        .map(|(setting, var)| format!("{setting} uses ${{{var}}}, which is not set"))
        .collect();
    let mut vars: Vec<&str> = missing.iter().map(|(_, v)| v.as_str()).collect();
    vars.dedup();
    report.fail(
        "secrets",
        what.join("; "),
        format!(
            "export {} (in cron, set it in the crontab or a wrapper script)",
            vars.join(", ")
        ),
    );
    Ok(false)
}

/// The job's name as `recon run` would pick it.
fn job_name(file: config::ConfigFile, asked: Option<&str>) -> Result<String> {
    let names: Vec<String> = file.jobs.keys().cloned().collect();
    match asked {
        Some(n) if names.iter().any(|j| j == n) => Ok(n.to_string()),
        None if names.len() == 1 => Ok(names[0].clone()),
        // No such job, none, or several: picking fails before anything is
        // expanded, with the run's own message.
        _ => file.job(asked).map(|j| j.name),
    }
}

/// Every `${VAR}` the job uses, as (setting, variable), in the order the
/// run expands them: source, target (each connector names its expandable
/// settings), state and reports folder (the job's own or the defaults'),
/// then the webhook route's URL, header values and signing secret. The
/// `[notify]` URL has its own check (`notify`).
fn placeholders(path: &Path, job: &str) -> Result<Vec<(String, String)>> {
    let mut file = config::load(path)?;
    let defaults_state = file.defaults.state.as_ref().map(|s| s.expose().to_string());
    let defaults_reports = file.defaults.reports.clone();
    let Some(j) = file.jobs.get_mut(job) else {
        return Ok(Vec::new());
    };
    let found = RefCell::new(Vec::new());
    let record = |value: &str, setting: &str| {
        for var in vars_in(value) {
            found
                .borrow_mut()
                .push((format!("job `{job}` {setting}"), var));
        }
        Ok::<String, ConnectorError>(value.to_string())
    };
    for (side, endpoint) in [("source", &mut j.source), ("target", &mut j.target)] {
        endpoint.connector_mut().expand_env(side, &record)?;
    }
    let state = j
        .state
        .as_ref()
        .map(|s| s.expose().to_string())
        .or(defaults_state);
    if let Some(s) = state {
        record(&s, "state")?;
    }
    if let Some(r) = j.reports.clone().or(defaults_reports) {
        record(&r, "reports")?;
    }
    // The webhook route's settings, as `recon run` expands them when it
    // plans the job: its URL, header values and signing secret.
    if let Some(w) = &j.backfill.webhook {
        record(w.url.expose(), "backfill.webhook.url")?;
        for (name, value) in &w.headers {
            record(value.expose(), &format!("backfill.webhook.headers.{name}"))?;
        }
        if let Some(s) = &w.signing_secret {
            record(s.expose(), "backfill.webhook.signing_secret")?;
        }
    }
    Ok(found.into_inner())
}

/// The variable names of the `${NAME}`s in a setting (well-formed ones;
/// the run's expansion reports malformed ones).
fn vars_in(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(name.to_string());
        }
        rest = &after[end + 1..];
    }
    out
}

/// `stripe charges -> sql, window yesterday (America/New_York), backfill insert (at most 500 records, 10%)`.
fn describe_plan(plan: &RunPlan) -> String {
    let j = &plan.job.job;
    let backfill = match j.backfill.mode {
        BackfillMode::Off => "backfill off".to_string(),
        mode => format!(
            "backfill {} (at most {} records, {}% of the source)",
            format!("{mode:?}").to_lowercase(),
            plan.max_records,
            plan.max_ratio * 100.0
        ),
    };
    format!(
        "`{}`: {} -> {}, {} field(s), window {} ({}), {backfill}",
        plan.job.name,
        j.source.type_name(),
        j.target.type_name(),
        plan.spec.schema.fields.len(),
        j.window,
        plan.job.timezone,
    )
}

/// The setting that holds the endpoint's address (`base_url`), else every
/// connector's (`url, base_url, shop_url or instance_url`), from the registry.
fn url_hint(endpoint: &EndpointConfig) -> String {
    if let Some(setting) = endpoint.url_setting() {
        return setting.to_string();
    }
    let all = EndpointConfig::url_settings();
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => all.join(""),
    }
}

/// What to do about a connector's failure, by its kind; the message itself
/// names the setting or the object.
fn connector_fix(side: &str, endpoint: &EndpointConfig, e: &anyhow::Error) -> String {
    match e.downcast_ref::<ConnectorError>() {
        Some(ConnectorError::Unreachable(_)) | Some(ConnectorError::ConnectionLost(_)) => format!(
            "check that the system is running and reachable at the {side}'s URL ({}), and the network between",
            url_hint(endpoint)
        ),
        Some(ConnectorError::NotIdempotent(_)) => {
            "add the unique key the message names, then check again".into()
        }
        Some(ConnectorError::Io { .. }) => format!(
            "check the {side}'s path: the file must exist and be readable by this user"
        ),
        Some(ConnectorError::Database(_)) => format!(
            "check the {side}'s table, columns and the database user's permissions"
        ),
        _ => format!("correct the job's {side} settings as the message says"),
    }
}

/// Runs a check's future under [`CHECK_TIMEOUT`].
async fn timed<T>(what: &str, f: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(CHECK_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(ConnectorError::Unreachable(format!(
            "{what}: no answer within {} s",
            CHECK_TIMEOUT.as_secs()
        ))
        .into()),
    }
}

/// `reachable, authenticated (…; 25 req/s …)`.
fn describe_probe(p: &Probe) -> String {
    let head = if p.authenticated {
        "reachable, authenticated"
    } else {
        "readable"
    };
    let mut detail = p.reached.clone();
    for l in &p.limits {
        detail.push_str("; ");
        detail.push_str(l);
    }
    format!("{head} ({detail})")
}

/// The checks that connect: both sides, the unique key, the state store
/// and the report folder.
async fn connect_checks(plan: &RunPlan, report: &mut Report) {
    let tokens = plan.tokens();
    let cx = plan.build_context(&tokens);
    source_check(plan, cx, report).await;
    target_checks(plan, cx, report).await;
    webhook_check(plan, report).await;
    state_check(plan, report).await;
    folder_check(plan, report);
}

/// source: built as a run builds it, then one cheap call.
async fn source_check(plan: &RunPlan, cx: BuildContext<'_>, report: &mut Report) {
    let endpoint = &plan.job.job.source;
    let name = format!("source {}", endpoint.type_name());
    let source = timed("source", async {
        let s = endpoint.connector().build_source(cx).await?;
        let p = s.probe().await?;
        Ok(p)
    })
    .await;
    match source {
        Ok(p) => report.ok(&name, describe_probe(&p)),
        Err(e) => report.fail(
            &name,
            format!("{e:#}"),
            connector_fix("source", endpoint, &e),
        ),
    }
}

/// target: as a writer when the run writes into it (then its unique key
/// is checked), else as a side that is read: a webhook route reads the
/// target only, to verify, as `recon run` builds it.
async fn target_checks(plan: &RunPlan, cx: BuildContext<'_>, report: &mut Report) {
    let endpoint = &plan.job.job.target;
    let name = format!("target {}", endpoint.type_name());
    let writes = plan.writes()
        && plan.webhook.is_none()
        && endpoint.connector().target_role() == TargetRole::Writable;
    if writes {
        writable_target_checks(endpoint, &name, cx, report).await;
        return;
    }
    let read = timed("target", async {
        let t = endpoint.connector().build_source(cx).await?;
        let p = t.probe().await?;
        Ok(p)
    })
    .await;
    match read {
        Ok(p) => report.ok(&name, describe_probe(&p)),
        Err(e) => report.fail(
            &name,
            format!("{e:#}"),
            connector_fix("target", endpoint, &e),
        ),
    }
    report.skip(
        "target uniqueness",
        if plan.webhook.is_some() {
            "backfill.via = \"webhook\": recon never writes into the target (the endpoint's handler creates the records; recon reads them back to verify)"
        } else {
            "backfill.mode = \"off\": the job never writes into the target"
        },
    );
}

/// A target the run writes into: built as a writer and probed, then its
/// unique key checked.
async fn writable_target_checks(
    endpoint: &EndpointConfig,
    name: &str,
    cx: BuildContext<'_>,
    report: &mut Report,
) {
    let built = timed("target", async {
        let t = endpoint.connector().build_target(cx).await?;
        let p = t.as_source().probe().await?;
        Ok((t, p))
    })
    .await;
    let t = match built {
        Ok((t, p)) => {
            report.ok(name, describe_probe(&p));
            t
        }
        Err(e) => {
            report.fail(
                name,
                format!("{e:#}"),
                connector_fix("target", endpoint, &e),
            );
            report.skip("target uniqueness", "the target cannot be reached");
            return;
        }
    };
    let unique = timed("target uniqueness", async {
        t.check_idempotent().await?;
        Ok(())
    })
    .await;
    match unique {
        Ok(()) => report.ok(
            "target uniqueness",
            format!(
                "{} can be written idempotently by its key",
                t.as_source().describe()
            ),
        ),
        Err(e) => report.fail(
            "target uniqueness",
            format!("{e:#}"),
            "add the unique key the message names (the statement or setup step is in the message), then check again",
        ),
    }
}

/// webhook endpoint: the URL's host accepts a connection; nothing is sent.
async fn webhook_check(plan: &RunPlan, report: &mut Report) {
    let Some(w) = plan.webhook.as_ref() else {
        return;
    };
    if plan.writes() {
        match webhook_endpoint(w.url.expose(), w.policy.timeout.min(CHECK_TIMEOUT)).await {
            Ok(detail) => report.ok("webhook endpoint", detail),
            Err((what, fix)) => report.fail("webhook endpoint", what, fix),
        }
    } else {
        report.skip(
            "webhook endpoint",
            "backfill.mode = \"off\": nothing is delivered",
        );
    }
}

/// state store: opened (created and migrated as a run would), then a
/// write rolled back.
async fn state_check(plan: &RunPlan, report: &mut Report) {
    let state = timed("state store", async {
        let store = StateStore::open(plan.job.state.expose()).await?;
        store.check_writable(&plan.job.name).await?;
        let display = store.describe().to_string();
        store.close().await;
        Ok(display)
    })
    .await;
    match state {
        Ok(display) => report.ok(
            "state store",
            format!("{display}: schema up to date, takes writes"),
        ),
        Err(e) => report.fail(
            "state store",
            format!("{e:#}"),
            "set the job's state (or defaults.state) to a writable SQLite path or a reachable PostgreSQL database the user may write",
        ),
    }
}

/// report folder: where this job's run folders are made.
fn folder_check(plan: &RunPlan, report: &mut Report) {
    let folder = plan
        .out
        .clone()
        .unwrap_or_else(|| plan.job.reports.join(&plan.job.name));
    match check_folder(&folder) {
        Ok(detail) => report.ok("report folder", detail),
        Err(e) => report.fail(
            "report folder",
            format!("{e:#}"),
            format!(
                "make {} a folder this user can write (or set the job's reports / defaults.reports to one)",
                folder.display()
            ),
        ),
    }
}

/// What `recon run` checks before it starts ([`crate::ops::Ops::start`]),
/// one line each when the job has it: the metrics file's folder exists and
/// takes a file; the `[notify]` section's URL is set and valid.
fn ops_checks(config: &Path, job: &str, report: &mut Report) {
    let pre = crate::ops::preflight(config, job);
    if let Some(path) = &pre.metrics_file {
        let checked = crate::ops::metrics::check_destination(path).and_then(|()| {
            let folder = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            check_folder(folder)
        });
        match checked {
            Ok(_) => report.ok(
                "metrics file",
                format!("{}: its folder exists and takes a file", path.display()),
            ),
            Err(e) => report.fail(
                "metrics file",
                format!("{e:#}"),
                "create the folder (node_exporter's --collector.textfile.directory) and let this user write it, or fix metrics_file",
            ),
        }
    }
    match pre.notify {
        Some(Ok(detail)) => report.ok("notify", detail),
        Some(Err(what)) => report.fail(
            "notify",
            what,
            "set the variable [notify] url names (in cron, in the crontab or a wrapper script) or correct the url",
        ),
        None => {}
    }
}

/// The webhook's URL parses and its host accepts a TCP connection within
/// `timeout`. Nothing is POSTed (a delivery would create a record), and
/// only `scheme://host:port` is shown: the path and query of a webhook URL
/// are often its credential. `Err((what, fix))`.
async fn webhook_endpoint(
    url: &str,
    timeout: Duration,
) -> std::result::Result<String, (String, String)> {
    let fix_url = "write backfill.webhook.url as the endpoint's full URL, e.g. https://hooks.example.com/recon".to_string();
    let parsed = url::Url::parse(url).map_err(|e| {
        (
            format!("backfill.webhook.url is not a valid URL ({e}; value not shown)"),
            fix_url.clone(),
        )
    })?;
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        return Err((
            "backfill.webhook.url names no host (value not shown)".into(),
            fix_url,
        ));
    };
    let at = format!("{}://{host}:{port}", parsed.scheme());
    let fix = format!(
        "check that the endpoint's server is running and reachable from this host at {at} (backfill.webhook.url), and the network or firewall between"
    );
    match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect(format!("{host}:{port}")),
    )
    .await
    {
        Ok(Ok(_stream)) => Ok(format!(
            "{at} accepts connections (connected only; nothing is POSTed)"
        )),
        Ok(Err(e)) => Err((format!("cannot connect to {at}: {e}"), fix)),
        Err(_) => Err((
            format!(
                "cannot connect to {at}: no answer within {} s (backfill.webhook.timeout)",
                timeout.as_secs_f64()
            ),
            fix,
        )),
    }
}

/// Creates and removes a temporary file in `folder`, or, when it does not
/// exist yet, in the nearest folder above it (the run creates the rest).
fn check_folder(folder: &Path) -> Result<String> {
    let mut at: PathBuf = folder.to_path_buf();
    let mut missing = Vec::new();
    loop {
        match std::fs::metadata(&at) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => anyhow::bail!(
                "{} is a file, not a folder, so reports cannot be written under {}",
                at.display(),
                folder.display()
            ),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                missing.push(at.clone());
                match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => at = p.to_path_buf(),
                    _ => {
                        at = PathBuf::from(".");
                    }
                }
            }
            Err(e) => anyhow::bail!("cannot look at {}: {e}", at.display()),
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let probe = at.join(format!(".recon-check-{}-{nanos}", std::process::id()));
    std::fs::write(&probe, b"recon check\n")
        .map_err(|e| anyhow::anyhow!("cannot create a file in {}: {e}", at.display()))?;
    std::fs::remove_file(&probe)
        .map_err(|e| anyhow::anyhow!("cannot remove {}: {e}", probe.display()))?;
    Ok(if missing.is_empty() {
        format!("{} is writable", folder.display())
    } else {
        format!(
            "{} will be created; {} is writable",
            folder.display(),
            at.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_by_name() {
        assert_eq!(
            vars_in("postgres://u:${PG_PW}@h/${DB}?x=${}"),
            ["PG_PW", "DB"]
        );
        assert!(vars_in("no vars, ${unclosed").is_empty());
    }

    #[test]
    fn folders_under_a_file_are_refused_and_missing_ones_checked_above() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let e = check_folder(&file.join("reports/job"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a file, not a folder"), "{e}");
        let ok = check_folder(&dir.path().join("new/job")).unwrap();
        assert!(ok.contains("will be created"), "{ok}");
        assert!(!dir.path().join("new").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
