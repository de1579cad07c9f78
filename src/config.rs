//! Job configuration: a TOML file with one or more named jobs.
//!
//! Parsing is strict: unknown keys are errors with a "did you mean" hint,
//! `${ENV_VAR}` placeholders are expanded after parsing (so a secret never
//! passes through the TOML parser or its error messages), and a missing
//! variable is named together with the setting that uses it. Every field
//! is documented here and in `examples/recon.toml`.
//!
//! A TOML error is reported as `line L, column C, in [table], key `k`:
//! message`, never with the offending source line: that line may hold a
//! literal password or token, and no test on the key's name can tell (an
//! inline table `target = { url = "…" }`, a misspelt `pasword = "…"`, a
//! multi-line string). When the key at the error is secret-bearing, its
//! value is also masked in the parser's message (`url = 5` would otherwise
//! be echoed as "invalid type: integer `5`").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use recon_core::{FieldKind, Secret};
use serde::Deserialize;

/// The state store when neither the job nor the defaults name one.
pub const DEFAULT_STATE: &str = "sqlite://recon-state.db";

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Settings every job inherits unless it sets its own.
    #[serde(default)]
    pub defaults: Defaults,
    /// Jobs by name.
    #[serde(default)]
    pub jobs: BTreeMap<String, JobConfig>,
    /// A webhook told of trouble (and optionally discrepancies).
    pub notify: Option<crate::ops::notify::NotifyConfig>,
}

/// Settings shared by every job.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Folder under which each run writes `{job}/{run id}/` (default `reports`).
    pub reports: Option<String>,
    /// State store URL (default `sqlite://recon-state.db`).
    pub state: Option<Secret>,
    /// IANA time zone of the business day (default UTC).
    pub timezone: Option<String>,
    /// Prometheus metrics file written after each run (`{job}` is
    /// replaced by the job's name); `--metrics-file` overrides it.
    pub metrics_file: Option<String>,
}

/// One reconciliation job.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// The source of truth.
    pub source: EndpointConfig,
    /// The system checked against it, and backfilled.
    pub target: EndpointConfig,
    /// Canonical fields and their kinds: `text`, `integer`, `money`,
    /// `currency`, `timestamp`. Undeclared compared fields are text.
    #[serde(default)]
    pub fields: BTreeMap<String, FieldKind>,
    /// Fields whose differences are mismatches, in report order.
    #[serde(default)]
    pub compare: Vec<String>,
    /// Allowed differences: `amount = 1` (minor units) or `created = "5s"`.
    #[serde(default)]
    pub tolerances: BTreeMap<String, ToleranceSetting>,
    /// The timestamp field windows filter on (default `created` when declared).
    pub time_field: Option<String>,
    /// Window when `--window` is not given (default `yesterday`).
    #[serde(default = "default_window")]
    pub window: String,
    /// IANA time zone of the business day (`America/New_York`).
    pub timezone: Option<String>,
    /// Reach back this far before the window's start (late arrivals): `2h`.
    pub lookback: Option<String>,
    /// Source records younger than this are pending, not gaps: `15m`.
    pub grace: Option<String>,
    /// Records whose time field is empty, NULL or not a timestamp belong
    /// to no window: `report` them in unplaced.csv (default; the run exits
    /// 1) or `fail` the run (exit 2) before anything is written.
    #[serde(default)]
    pub unplaced: UnplacedPolicy,
    /// What to write into the target.
    #[serde(default)]
    pub backfill: BackfillConfig,
    /// Overrides `defaults.reports`.
    pub reports: Option<String>,
    /// Overrides `defaults.state`.
    pub state: Option<Secret>,
    /// Overrides `defaults.metrics_file`.
    pub metrics_file: Option<String>,
}

fn default_window() -> String {
    "yesterday".into()
}

/// What a run does with records no window can hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnplacedPolicy {
    /// List them in unplaced.csv and count them; the run exits 1.
    #[default]
    Report,
    /// Stop the run with exit 2 before anything is written.
    Fail,
}

/// A tolerance as written: a number (minor units) or a duration (`"5s"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ToleranceSetting {
    /// Minor units or whole numbers.
    Units(i64),
    /// A duration such as `5s` or `2m`.
    Duration(String),
}

/// Backfill policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillConfig {
    /// `insert` missing records, `upsert` (also repair mismatches), or `off`.
    #[serde(default = "default_mode")]
    pub mode: BackfillMode,
    /// Refuse to write more records than this in one run.
    #[serde(default = "default_max_records")]
    pub max_records: u64,
    /// Refuse to write more than this share of the window's source records:
    /// a number from 0 to 1 (1 = no ratio limit); NaN, infinities and
    /// negative numbers are refused.
    #[serde(default = "default_max_ratio", deserialize_with = "de_max_ratio")]
    pub max_ratio: f64,
    /// How gaps are backfilled: `target` (the target's own idempotent
    /// upsert, default) or `webhook` (replayed to `webhook.url`, see
    /// `crate::webhook`).
    #[serde(default)]
    pub via: BackfillVia,
    /// The endpoint of `via = "webhook"`.
    pub webhook: Option<crate::webhook::WebhookConfig>,
}

/// The route of a backfill.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackfillVia {
    /// Written into the target by recon.
    #[default]
    Target,
    /// POSTed to the user's own webhook handler, which creates the record.
    Webhook,
}

impl Default for BackfillConfig {
    fn default() -> Self {
        BackfillConfig {
            mode: default_mode(),
            max_records: default_max_records(),
            max_ratio: default_max_ratio(),
            via: BackfillVia::Target,
            webhook: None,
        }
    }
}

fn default_mode() -> BackfillMode {
    BackfillMode::Insert
}
fn default_max_records() -> u64 {
    10_000
}
fn default_max_ratio() -> f64 {
    0.10
}

/// What `max_ratio` may be, for messages.
pub const MAX_RATIO_RANGE: &str =
    "a number from 0 to 1 (the share of the window's source records, 0.05 = 5%; 1 = no ratio limit)";

/// Checks a `max_ratio` value (config or `--max-ratio`): finite, 0 to 1.
pub fn check_max_ratio(value: f64) -> Result<f64, String> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        // -0.0 is 0.
        Ok(value + 0.0)
    } else {
        Err(format!("max_ratio must be {MAX_RATIO_RANGE}, not {value}"))
    }
}

fn de_max_ratio<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    check_max_ratio(value).map_err(|e| serde::de::Error::custom(format!("backfill.{e}")))
}

/// What a backfill writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackfillMode {
    /// Insert gaps only.
    Insert,
    /// Insert gaps and overwrite mismatched fields.
    Upsert,
    /// Report only.
    Off,
}

pub use crate::registry::EndpointConfig;

/// Reads and checks a config file.
pub fn load(path: &Path) -> Result<ConfigFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    parse(&text).with_context(|| format!("config {}", path.display()))
}

/// Parses config text (no environment expansion yet) and checks what
/// needs no connection and no file: job names ([`check_job_name`]) and
/// field names (`check_field_names`).
pub fn parse(text: &str) -> Result<ConfigFile> {
    let file = toml::from_str::<ConfigFile>(text)
        .map_err(|e| anyhow!("{}", describe_toml_error(text, &e)))?;
    for (name, job) in &file.jobs {
        check_job_name(name)?;
        check_field_names(name, job)?;
    }
    Ok(file)
}

/// A job name as messages show it: control characters as `\u{7}`.
fn shown_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A job's name is one folder name: its reports go to
/// `REPORTS/JOB/RUN_ID/` (and its run IDs, metrics files and report links
/// are made of it). A name that is empty, `.` or `..`, or holds `/`, `\`
/// or a control character would put them elsewhere, or nowhere sensible.
pub fn check_job_name(name: &str) -> Result<()> {
    const WHY: &str = "a job name is one folder name under the reports folder (REPORTS/JOB/RUN/)";
    let shown = shown_name(name);
    // What to rename it to: the name with its separators and controls
    // replaced, leading dots and underscores dropped.
    let fixed: String = name
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\') || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect::<String>()
        .trim_start_matches(['.', '_'])
        .to_string();
    let example = if fixed.is_empty() || fixed == name {
        "a name such as [jobs.charges]".to_string()
    } else {
        format!("e.g. [jobs.{fixed}]")
    };
    if name.is_empty() {
        bail!("a job has an empty name ([jobs.\"\"]): {WHY}; name it, {example}");
    }
    if name == "." || name == ".." {
        bail!(
            "job `{name}`: {WHY}, and `{name}` is the reports folder itself or its parent, not a folder of its own; rename the job, {example}"
        );
    }
    if let Some(c) = name.chars().find(|c| matches!(c, '/' | '\\')) {
        bail!(
            "job `{shown}`: {WHY}, so it may not contain `{c}` (the job's reports would be written outside its folder); rename the job, {example}"
        );
    }
    if let Some((i, c)) = name.chars().enumerate().find(|(_, c)| c.is_control()) {
        bail!(
            "job `{shown}`: {WHY}, so it may not contain a control character ({} at character {}); rename the job, {example}",
            c.escape_unicode(),
            i + 1
        );
    }
    Ok(())
}

/// A field may not have the name of a column that the reports write
/// beside the fields (`external_id`, `first_seen`, `state`: see
/// `crate::report::html::RESERVED_FIELD_NAMES`), compared ignoring ASCII
/// case (to a spreadsheet's lookup `State` is `state`), or gaps.csv would
/// hold two columns of that name and report.html would read the wrong one.
///
/// With a money field the reports add a `currency` column (the money's
/// code) unless a field is named `currency`, which then takes its place:
/// such a field must hold a code (kind `currency` or `text`), and
/// `Currency` or `CURRENCY` would be a second currency column.
fn check_field_names(job_name: &str, job: &JobConfig) -> Result<()> {
    use crate::report::html::{CURRENCY_COLUMN, RESERVED_FIELD_NAMES as RESERVED};
    let named = job
        .fields
        .keys()
        .map(|f| (f, "fields"))
        .chain(job.compare.iter().map(|f| (f, "compare")))
        .chain(job.time_field.iter().map(|f| (f, "time_field")));
    for (field, setting) in named {
        let Some(column) = RESERVED.iter().find(|r| r.eq_ignore_ascii_case(field)) else {
            continue;
        };
        let new = format!("{}_value", field.to_ascii_lowercase());
        let maps: Vec<String> = [("source", &job.source), ("target", &job.target)]
            .into_iter()
            .filter_map(|(side, e)| {
                let (map, _) = e.connector().field_map()?;
                Some(format!("{side}.{map} = {{ {new} = \"{field}\" }}"))
            })
            .collect();
        let map_hint = if maps.is_empty() {
            String::new()
        } else {
            format!(
                ", and map it to the column that holds it ({})",
                maps.join(", ")
            )
        };
        bail!(
            "job `{}`: field `{field}` (in {setting}) has the name of a column the reports write beside the fields \
             ({}: gaps.csv, orphans.csv and pending.csv would hold two `{column}` columns); \
             rename the field, e.g. `{new}`, wherever the job names it (fields, compare, tolerances, time_field){map_hint}",
            shown_name(job_name),
            RESERVED.join(", "),
        );
    }
    let money = job.fields.iter().find(|(_, k)| **k == FieldKind::Money);
    let Some((money, _)) = money else {
        return Ok(());
    };
    let named = job.fields.keys().chain(&job.compare);
    for field in named.filter(|f| f.eq_ignore_ascii_case(CURRENCY_COLUMN)) {
        let kind = job.fields.get(field).copied().unwrap_or(FieldKind::Text);
        if field != CURRENCY_COLUMN {
            bail!(
                "job `{}`: field `{field}` would be a second currency column beside the `{CURRENCY_COLUMN}` column \
                 the reports add for the money field `{money}`; name it `{CURRENCY_COLUMN}` (it then takes that column's place), \
                 or rename it, e.g. `{}_value`",
                shown_name(job_name),
                field.to_ascii_lowercase(),
            );
        }
        if !matches!(kind, FieldKind::Currency | FieldKind::Text) {
            bail!(
                "job `{}`: field `{CURRENCY_COLUMN}` is declared as `{kind}`, but it takes the place of the `{CURRENCY_COLUMN}` column \
                 the reports add for the money field `{money}`, so the reports would lose the money's currency code; \
                 declare it `{CURRENCY_COLUMN} = \"currency\"`, or rename the field, e.g. `{CURRENCY_COLUMN}_{kind}`",
                shown_name(job_name),
            );
        }
    }
    Ok(())
}

/// Keys whose values are secrets (or URLs that may hold one); a name
/// containing one of these counts (`sslpassword`, `access_token`).
const SECRET_KEYS: [&str; 8] = [
    "password",
    "token",
    "api_key",
    "url",
    "state",
    "secret",
    "key",
    "authorization",
];

/// Whether a TOML key (last dotted part, quotes removed) names a secret.
/// `key` alone is the key *column* of a file or table, not a secret.
fn is_secret_key(key: &str) -> bool {
    let last = key
        .rsplit('.')
        .next()
        .unwrap_or(key)
        .trim()
        .trim_matches(['"', '\''])
        .to_ascii_lowercase();
    last != "key" && SECRET_KEYS.iter().any(|k| last.contains(k))
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\'' | ' ')
}

/// The values (quotes removed, at least 1 character) of every
/// secret-bearing `key = value` in a TOML text, inline tables included.
fn secret_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        for (eq, _) in line.match_indices('=') {
            let before = line[..eq].trim_end();
            let key_start = before
                .rfind(|c: char| !is_key_char(c) || c == ' ')
                .map_or(0, |i| i + 1);
            if !is_secret_key(&before[key_start..]) {
                continue;
            }
            let after = line[eq + 1..].trim_start();
            let value = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let body = &after[1..];
                    body.find(q).map_or(body, |end| &body[..end])
                }
                _ => after
                    .split([',', '}', ']', '#'])
                    .next()
                    .unwrap_or("")
                    .trim(),
            };
            if !value.is_empty() {
                out.push(value.to_string());
            }
        }
    }
    // Longest first, so that a value containing another is masked whole.
    out.sort_by_key(|v| std::cmp::Reverse(v.len()));
    out
}

/// A TOML error as `line L, column C, in [table], key `k`: message`,
/// without the source line (see the module docs).
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let mut message = e.message().trim_end().to_string();
    let Some(span) = e.span() else {
        return with_suggestion(&message);
    };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_no = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or("");
    // The table the line belongs to (or the header the error points at).
    let table = text[..line_start + line.len()]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .and_then(|l| l.split(']').next())
        .map(|l| l.trim_start_matches('['));
    // The key of a `key = value` line, when the text before `=` is a key.
    let key = line.split_once('=').and_then(|(k, _)| {
        let k = k.trim();
        let is_key = !k.is_empty() && k.chars().all(is_key_char);
        is_key.then_some(k)
    });
    // The parser's message may quote a value (`url = 5` gives "invalid
    // type: integer `5`"), and its span may cover a whole table: mask the
    // value of every secret-bearing key of the document.
    for value in secret_values(text) {
        message = message.replace(&value, "***");
    }
    let mut place = format!("line {line_no}, column {column}");
    if let Some(t) = table {
        place.push_str(&format!(", in [{t}]"));
    }
    if let Some(k) = key {
        place.push_str(&format!(", key `{k}`"));
    }
    with_suggestion(&format!("{place}: {message}"))
}

/// Adds "did you mean" to serde's unknown-field and unknown-variant messages.
fn with_suggestion(message: &str) -> String {
    let grab = |prefix: &str| -> Option<(String, Vec<String>)> {
        let start = message.find(prefix)? + prefix.len();
        let rest = &message[start..];
        let end = rest.find('`')?;
        let bad = rest[..end].to_string();
        let expected: Vec<String> = rest[end..]
            .split('`')
            .skip(2)
            .step_by(2)
            .map(str::to_string)
            .take_while(|s| !s.contains('\n'))
            .collect();
        Some((bad, expected))
    };
    let Some((bad, expected)) = grab("unknown field `").or_else(|| grab("unknown variant `"))
    else {
        return message.to_string();
    };
    let best = expected
        .iter()
        .map(|e| (strsim::levenshtein(&bad, e), e))
        .filter(|(d, e)| *d <= 2.max(e.len() / 3))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((_, e)) => format!("{}\ndid you mean `{e}`?", message.trim_end()),
        None => message.to_string(),
    }
}

/// Expands `${VAR}` from the environment; `what` names the setting for errors.
/// A URL's password and secret query values that came from the environment
/// are registered with [`recon_core::scrub`], whatever setting holds them.
pub fn expand_env(value: &str, what: &str) -> Result<String> {
    let out = expand_with(value, what, |k| std::env::var(k).ok())?;
    if value.contains("${") {
        for s in recon_core::url_secrets(&out) {
            recon_core::register_secret(&s);
        }
    }
    Ok(out)
}

fn expand_with(value: &str, what: &str, get: impl Fn(&str) -> Option<String>) -> Result<String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            bail!("{what}: `${{` without a closing `}}`; write ${{NAME}}");
        };
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("{what}: `${{{name}}}` is not a valid environment variable name");
        }
        match get(name) {
            Some(v) => out.push_str(&v),
            None => bail!(
                "{what} uses ${{{name}}}, but the environment variable {name} is not set; export it (in cron, set it in the crontab or a wrapper script)"
            ),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A job resolved against defaults and the environment.
#[derive(Debug)]
pub struct ResolvedJob {
    /// Job name.
    pub name: String,
    /// The job as written.
    pub job: JobConfig,
    /// Reports root folder.
    pub reports: PathBuf,
    /// State store URL.
    pub state: Secret,
    /// Time zone name.
    pub timezone: String,
}

impl ConfigFile {
    /// Picks a job: the named one, or the only one.
    pub fn job(mut self, name: Option<&str>) -> Result<ResolvedJob> {
        let names: Vec<String> = self.jobs.keys().cloned().collect();
        let name = match name {
            Some(n) => n.to_string(),
            None if names.len() == 1 => names[0].clone(),
            None if names.is_empty() => {
                bail!("the config defines no jobs; add a [jobs.NAME] table")
            }
            None => bail!(
                "the config defines several jobs ({}); choose one with --job",
                names.join(", ")
            ),
        };
        let Some(mut job) = self.jobs.remove(&name) else {
            let hint = names
                .iter()
                .min_by_key(|n| strsim::levenshtein(n, &name))
                .map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_default();
            bail!(
                "no job `{name}` in the config; jobs are: {}{hint}",
                names.join(", ")
            );
        };
        for (side, endpoint) in [("source", &mut job.source), ("target", &mut job.target)] {
            let expand = |value: &str, setting: &str| {
                expand_env(value, &format!("job `{name}` {setting}"))
                    .map_err(|e| recon_core::ConnectorError::Config(format!("{e:#}")))
            };
            endpoint.connector_mut().expand_env(side, &expand)?;
        }
        let state = job
            .state
            .take()
            .or(self.defaults.state.take())
            .map(|s| expand_env(s.expose(), &format!("job `{name}` state")))
            .transpose()?
            .unwrap_or_else(|| DEFAULT_STATE.into());
        let reports = job
            .reports
            .clone()
            .or(self.defaults.reports.clone())
            .map(|s| expand_env(&s, &format!("job `{name}` reports")))
            .transpose()?
            .unwrap_or_else(|| "reports".into());
        let timezone = job
            .timezone
            .clone()
            .or(self.defaults.timezone.clone())
            .unwrap_or_else(|| "UTC".into());
        Ok(ResolvedJob {
            name,
            job,
            reports: PathBuf::from(reports),
            state: Secret::new(state),
            timezone,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[defaults]
timezone = "America/New_York"

[jobs.charges]
compare = ["amount", "currency", "status"]
window = "yesterday"
lookback = "2h"
grace = "15m"
tolerances = { amount = 0, created = "5s" }
fields = { amount = "money", currency = "currency", status = "text", created = "timestamp" }

[jobs.charges.source]
type = "file"
path = "exports/${EXPORT_DAY}.csv"
key = "id"

[jobs.charges.target]
type = "sql"
url = "postgres://recon:${PGPASSWORD}@127.0.0.1/finance"
table = "payments"
key = "stripe_charge_id"
columns = { amount = "amount_cents", created = "created_at" }

[jobs.charges.backfill]
mode = "insert"
max_records = 500
"#;

    #[test]
    fn parses_a_full_job() {
        let cfg = parse(GOOD).unwrap();
        let job = &cfg.jobs["charges"];
        assert_eq!(job.compare, ["amount", "currency", "status"]);
        assert_eq!(job.fields["amount"], FieldKind::Money);
        assert_eq!(job.backfill.max_records, 500);
        assert_eq!(job.backfill.max_ratio, 0.10);
        assert!(
            matches!(job.tolerances["created"], ToleranceSetting::Duration(ref d) if d == "5s")
        );
        match &job.target {
            EndpointConfig::Sql(sql) => {
                assert_eq!(sql.table, "payments");
                assert_eq!(sql.columns["amount"], "amount_cents");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_keys_are_refused_with_a_suggestion() {
        let bad = GOOD.replace("window = \"yesterday\"", "windw = \"yesterday\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("unknown field `windw`"), "{e}");
        assert!(e.contains("did you mean `window`?"), "{e}");
        let bad = GOOD.replace("table = \"payments\"", "tabel = \"payments\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("did you mean `table`?"), "{e}");
        let bad = GOOD.replace("mode = \"insert\"", "mode = \"inserts\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("did you mean `insert`?"), "{e}");
        let bad = GOOD.replace("type = \"sql\"", "type = \"postgres\"");
        assert!(parse(&bad).is_err());
    }

    #[test]
    fn env_placeholders_expand_and_missing_ones_are_named() {
        let env = |k: &str| (k == "PGPASSWORD").then(|| "s3cret".to_string());
        assert_eq!(
            expand_with("postgres://u:${PGPASSWORD}@h/db", "target.url", env).unwrap(),
            "postgres://u:s3cret@h/db"
        );
        let e = expand_with("x/${EXPORT_DAY}.csv", "job `charges` source.path", env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("EXPORT_DAY is not set") && e.contains("source.path"),
            "{e}"
        );
        assert!(expand_with("${oops", "x", env).is_err());
        assert!(expand_with("${a-b}", "x", env).is_err());
    }

    #[test]
    fn resolving_expands_env_and_hides_secrets_in_debug() {
        std::env::set_var("RECON_TEST_PW_7", "hunter2");
        std::env::set_var("EXPORT_DAY", "2026-11-28");
        let text = GOOD.replace("${PGPASSWORD}", "${RECON_TEST_PW_7}");
        let job = parse(&text).unwrap().job(None).unwrap();
        assert_eq!(job.timezone, "America/New_York");
        let debug = format!("{job:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        match &job.job.target {
            EndpointConfig::Sql(sql) => assert!(sql.url.expose().contains("hunter2")),
            other => panic!("{other:?}"),
        }
        let e = parse(GOOD)
            .unwrap()
            .job(Some("chargse"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `charges`?"), "{e}");
    }

    #[test]
    fn toml_errors_never_echo_secret_values() {
        // A syntax error on the line of a literal password.
        let bad = GOOD.replace(
            "url = \"postgres://recon:${PGPASSWORD}@127.0.0.1/finance\"",
            "url = \"postgres://recon:Li7/te#ral?pw@127.0.0.1/finance",
        );
        let e = parse(&bad).unwrap_err().to_string();
        assert!(!e.contains("Li7/te#ral?pw"), "{e}");
        assert!(e.contains("line 20"), "{e}");
        assert!(e.contains("key `url`"), "{e}");
        assert!(e.contains("[jobs.charges.target]"), "{e}");
        // A wrong type on a secret-bearing key: the value is masked.
        let bad = GOOD.replace(
            "url = \"postgres://recon:${PGPASSWORD}@127.0.0.1/finance\"",
            "url = 987654321",
        );
        let e = parse(&bad).unwrap_err().to_string();
        assert!(!e.contains("987654321"), "{e}");
        assert!(e.contains("[jobs.charges.target]"), "{e}");
        // A secret in an inline table on a line whose own key is not
        // secret-bearing: the line is never echoed.
        let bad = GOOD.replace(
            "[jobs.charges.backfill]",
            "[jobs.charges.extra]\nconn = { url = \"postgres://u:Inl1ne/pw@h/db\", tabel = 1 }\n[jobs.charges.backfill]",
        );
        let e = parse(&bad).unwrap_err().to_string();
        assert!(!e.contains("Inl1ne"), "{e}");
        assert!(e.contains("line "), "{e}");
    }

    #[test]
    fn ratios_outside_zero_to_one_are_refused() {
        for bad in ["nan", "inf", "-inf", "-0.5", "1.5", "+nan"] {
            let text = GOOD.replace(
                "max_records = 500",
                &format!("max_records = 500\nmax_ratio = {bad}"),
            );
            let e = parse(&text).unwrap_err().to_string();
            assert!(
                e.contains("backfill.max_ratio must be a number from 0 to 1"),
                "{bad}: {e}"
            );
            assert!(e.contains("key `max_ratio`"), "{bad}: {e}");
        }
        for ok in ["0", "0.0", "-0.0", "1", "0.051"] {
            let text = GOOD.replace(
                "max_records = 500",
                &format!("max_records = 500\nmax_ratio = {ok}"),
            );
            let cfg = parse(&text).unwrap();
            let r = cfg.jobs["charges"].backfill.max_ratio;
            assert!(
                (0.0..=1.0).contains(&r) && r.is_sign_positive(),
                "{ok}: {r}"
            );
        }
        assert_eq!(
            check_max_ratio(f64::NAN).unwrap_err(),
            format!("max_ratio must be {MAX_RATIO_RANGE}, not NaN")
        );
    }
}
