//! The metrics file: Prometheus text exposition format 0.0.4
//! (https://prometheus.io/docs/instrumenting/exposition_formats/), for
//! node_exporter's textfile collector
//! (https://github.com/prometheus/node_exporter#textfile-collector), which
//! reads every `*.prom` file of its folder at each scrape.
//!
//! Every sample carries the `job` label. The file is replaced atomically (a
//! temporary file in the same folder, fsynced, renamed over it), so the
//! collector never reads half a file. Samples of other jobs found in the
//! previous file are kept, so several jobs may share one file when they do
//! not run at the same time; jobs that overlap should each have their own
//! (`metrics_file = "/var/lib/node_exporter/textfile/recon-{job}.prom"`).
//!
//! All values describe the job's last run; they are gauges (the `_total`
//! names count within that run). This job's whole-number samples are
//! encoded by prometheus-client's Prometheus text encoder; the seconds
//! (three decimals) and a money delta beyond 64 bits are written here, as
//! the file has always held them. Other jobs' lines are kept as they were.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use jiff::Timestamp;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use strum::IntoEnumIterator;

use super::Outcome;
use crate::report::Class;
use crate::state::RunStatus;

/// The families, in file order: name and help.
const FAMILIES: [(&str, &str); 9] = [
    (
        "recon_last_run_timestamp_seconds",
        "When the job's last run ended (Unix time).",
    ),
    (
        "recon_last_success_timestamp_seconds",
        "When a run of the job last ended with exit status 0 or 1 (Unix time).",
    ),
    (
        "recon_run_duration_seconds",
        "Wall time of the job's last run.",
    ),
    (
        "recon_discrepancies",
        "Open discrepancies after the job's last run, by class.",
    ),
    (
        "recon_money_delta_minor",
        "Target total minus source total over the last run's window, in minor units of the currency.",
    ),
    (
        "recon_backfilled_total",
        "Backfill items of the job's last run, by outcome.",
    ),
    (
        "recon_http_requests_total",
        "HTTP requests of the job's last run, retries included, by provider and response status (error: no response).",
    ),
    (
        "recon_rate_limited_total",
        "Slow-down answers (429, Shopify THROTTLED) the job's last run received, by provider.",
    ),
    (
        "recon_run_status",
        "1 for the status of the job's last run (clean: exit 0, discrepancies: exit 1, failed: exit 2), 0 for the others.",
    ),
];

/// A label value escaped as the format requires: `\` `"` and newline.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A provider's name as a label value: `Salesforce OAuth` → `salesforce_oauth`.
pub fn provider_label(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The label set of a sample: `job` first, then the family's own.
type Labels = Vec<(&'static str, String)>;

/// The whole-number families of this job, registered with
/// prometheus-client, which encodes them (names, HELP, TYPE, escaped
/// labels).
struct Gauges {
    registry: Registry,
    job: String,
}

impl Gauges {
    fn new(job: &str) -> Gauges {
        Gauges {
            registry: Registry::default(),
            job: job.to_string(),
        }
    }

    /// Registers `family` with one sample per label set.
    fn family(&mut self, family: &'static str, samples: Vec<(Labels, i64)>) {
        if samples.is_empty() {
            return;
        }
        let f = Family::<Labels, Gauge>::default();
        for (pairs, value) in samples {
            let mut labels = vec![("job", self.job.clone())];
            labels.extend(pairs);
            f.get_or_create(&labels).set(value);
        }
        // prometheus-client ends each HELP with a full stop: given without.
        let help = help_of(family).trim_end_matches('.');
        self.registry.register(family, help, f);
    }

    /// Each family's sample lines, in label order.
    fn lines(&self) -> BTreeMap<&'static str, Vec<String>> {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut text, &self.registry);
        let mut out: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
            if let Some((family, _)) = FAMILIES.iter().find(|(f, _)| *f == name) {
                out.entry(family).or_default().push(line.to_string());
            }
        }
        for lines in out.values_mut() {
            lines.sort();
        }
        out
    }
}

fn help_of(family: &str) -> &'static str {
    FAMILIES
        .iter()
        .find(|(f, _)| *f == family)
        .map_or("", |(_, help)| help)
}

/// A count as a gauge's value (a count beyond `i64::MAX` cannot happen).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `{job="a",class="gap"}`: the samples written here (seconds, and money
/// deltas beyond 64 bits).
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Seconds with three decimals: prometheus-client writes floats in Go's
/// shortest form (`1.5`, `1.8e+09`), the file has always had `1.500`.
fn seconds(t: Timestamp) -> String {
    format!("{:.3}", t.as_millisecond() as f64 / 1000.0)
}

/// This job's samples, by family.
fn samples(
    job: &str,
    o: &Outcome,
    last_success: Option<Timestamp>,
    traffic: &recon_core::http::Traffic,
) -> BTreeMap<&'static str, Vec<String>> {
    let mut g = Gauges::new(job);
    let one = |k: &'static str, v: &str| vec![(k, v.to_string())];
    let mut big_deltas = Vec::new();
    if o.summary.is_some() {
        let classes = Class::iter()
            .filter_map(|c| Some((one("class", c.one()?), count(o.count(c)?))))
            .collect();
        g.family("recon_discrepancies", classes);
        let (deltas, huge): (Vec<_>, Vec<_>) = o
            .money_delta()
            .into_iter()
            .partition(|(_, d)| i64::try_from(*d).is_ok());
        let deltas = deltas
            .into_iter()
            .map(|(c, d)| (one("currency", &c), d as i64));
        g.family("recon_money_delta_minor", deltas.collect());
        // prometheus-client's gauges stop at 64 bits; the file has always
        // held a delta beyond them exactly, so such a sample is written here.
        big_deltas = huge;
        let backfill = o.backfill().into_iter();
        let backfill = backfill.map(|(b, n)| (one("outcome", b.as_str()), count(n)));
        g.family("recon_backfilled_total", backfill.collect());
    }
    // Labels by provider label (two names could map to one label).
    let mut requests: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut limited: BTreeMap<String, u64> = BTreeMap::new();
    for ((provider, answer), n) in &traffic.requests {
        let p = provider_label(provider);
        *requests.entry((p.clone(), answer.label())).or_default() += n;
        limited.entry(p).or_default();
    }
    for (provider, n) in &traffic.rate_limited {
        *limited.entry(provider_label(provider)).or_default() += n;
    }
    let requests = requests.into_iter().map(|((p, status), n)| {
        let labels = vec![("provider", p), ("status", status)];
        (labels, count(n))
    });
    g.family("recon_http_requests_total", requests.collect());
    let limited = limited
        .into_iter()
        .map(|(p, n)| (one("provider", &p), count(n)));
    g.family("recon_rate_limited_total", limited.collect());
    let statuses = [
        RunStatus::Clean,
        RunStatus::Discrepancies,
        RunStatus::Failed,
    ];
    let statuses = statuses
        .into_iter()
        .map(|s| (one("status", s.as_str()), i64::from(o.status == s)));
    g.family("recon_run_status", statuses.collect());
    let mut out = g.lines();
    for (currency, d) in big_deltas {
        let pairs = [("job", job), ("currency", currency.as_str())];
        let line = format!("recon_money_delta_minor{} {d}", labels(&pairs));
        out.entry("recon_money_delta_minor").or_default().push(line);
    }
    let mut add = |family: &'static str, value: String| {
        let line = format!("{family}{} {value}", labels(&[("job", job)]));
        out.entry(family).or_default().push(line);
    };
    add("recon_last_run_timestamp_seconds", seconds(o.finished));
    if let Some(t) = last_success {
        add("recon_last_success_timestamp_seconds", seconds(t));
    }
    add(
        "recon_run_duration_seconds",
        format!("{:.3}", o.duration.as_secs_f64()),
    );
    out
}

/// The whole file: this job's samples, and those of other jobs kept from
/// the file at `path`.
pub fn render_file(
    path: &Path,
    job: &str,
    outcome: &Outcome,
    last_success: Option<Timestamp>,
) -> String {
    let previous = std::fs::read_to_string(path).unwrap_or_default();
    let traffic = recon_core::http::traffic();
    render(&previous, job, outcome, last_success, &traffic)
}

/// [`render_file`] with its inputs given.
pub fn render(
    previous: &str,
    job: &str,
    outcome: &Outcome,
    last_success: Option<Timestamp>,
    traffic: &recon_core::http::Traffic,
) -> String {
    let mut mine = samples(job, outcome, last_success, traffic);
    let mut others: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for line in previous.lines() {
        let Some(sample) = parse_sample(line) else {
            continue;
        };
        let Some((family, _)) = FAMILIES.iter().find(|(f, _)| *f == sample.name) else {
            continue;
        };
        if sample.job.as_deref().is_some_and(|j| j != job) {
            others.entry(family).or_default().push(line.to_string());
        }
    }
    let mut text = String::new();
    for (family, help) in FAMILIES {
        let lines: Vec<String> = others
            .remove(family)
            .unwrap_or_default()
            .into_iter()
            .chain(mine.remove(family).unwrap_or_default())
            .collect();
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(text, "# HELP {family} {help}");
        let _ = writeln!(text, "# TYPE {family} gauge");
        for l in lines {
            text.push_str(&l);
            text.push('\n');
        }
    }
    text
}

/// A sample line as far as this module needs it.
struct Sample {
    name: String,
    job: Option<String>,
    value: String,
}

/// `name{labels} value`: the name, the `job` label (unescaped) and the
/// value; `None` for comments, blank lines and what does not parse.
fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut job = None;
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let mut key = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => break i,
                ',' | ' ' => continue,
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    if key == "job" {
                        job = Some(value);
                    }
                    key.clear();
                }
                c => key.push(c),
            }
        };
        rest = &body[end + 1..];
    }
    let value = rest.split_whitespace().next()?.to_string();
    Some(Sample { name, job, value })
}

/// `recon_last_success_timestamp_seconds` of `job` in the file at `path`.
pub fn previous_last_success(path: &Path, job: &str) -> Option<Timestamp> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .filter_map(parse_sample)
        .find(|s| s.name == "recon_last_success_timestamp_seconds" && s.job.as_deref() == Some(job))
        .and_then(|s| s.value.parse::<f64>().ok())
        .and_then(|secs| Timestamp::from_millisecond((secs * 1000.0).round() as i64).ok())
}

/// Refuses, before the run, a metrics path whose folder does not exist or
/// that names a folder.
pub fn check_destination(path: &Path) -> Result<()> {
    if path.is_dir() {
        bail!(
            "metrics file {} is a folder; give a file name such as {}",
            path.display(),
            path.join("recon.prom").display()
        );
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        bail!(
            "the folder of metrics file {} does not exist; create it (node_exporter's --collector.textfile.directory) or fix --metrics-file / metrics_file",
            path.display()
        );
    }
    Ok(())
}

/// Replaces the file at `path` with `bytes` atomically: a temporary file in
/// the same folder (not ending in `.prom`, so the collector ignores it),
/// fsynced, then renamed over `path`; the folder is fsynced after.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("metrics file {} has no file name", path.display()))?;
    let tmp = parent.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        drop(f);
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    // The rename is durable once the folder is (best effort: not every
    // platform can open a folder).
    if let Ok(dir) = std::fs::File::open(parent) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::http::{Answer, Traffic};
    use std::time::Duration;

    fn outcome(status: RunStatus) -> Outcome {
        Outcome {
            job: Some("charges".into()),
            run_id: Some("r1".into()),
            status,
            exit_status: 1,
            error: None,
            summary: Some({
                let mut s = crate::report::RunSummary::of_json(serde_json::json!({
                    "gaps": 3, "orphans": 2, "mismatches": 1, "duplicates": 0, "unplaced": 0,
                    "totals": {"source": [{"currency": "USD", "total_minor": "1000"}],
                               "target": [{"currency": "USD", "total_minor": "900"}]}
                }))
                .unwrap();
                s.backfill
                    .insert(crate::report::BackfillOutcome::Created, 3);
                s.backfill.insert(crate::report::BackfillOutcome::Failed, 0);
                s
            }),
            report_dir: None,
            window: None,
            duration: Duration::from_millis(1500),
            finished: Timestamp::from_second(1_800_000_000).unwrap(),
        }
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        let job = "we\"ird\\job\nname";
        let text = render(
            "",
            job,
            &outcome(RunStatus::Clean),
            None,
            &Traffic::default(),
        );
        let s = parse_sample(text.lines().find(|l| !l.starts_with('#')).unwrap()).unwrap();
        assert_eq!(s.job.as_deref(), Some(job));
        assert!(!text.contains("we\"ird"), "{text}");
    }

    #[test]
    fn other_jobs_are_kept_and_this_job_replaced() {
        let mut t = Traffic::default();
        t.requests.insert(("Stripe", Answer::Status(200)), 7);
        t.requests.insert(("Stripe", Answer::Status(429)), 2);
        t.rate_limited.insert("Stripe", 2);
        let first = render("", "other", &outcome(RunStatus::Clean), None, &t);
        let second = render(
            &first,
            "charges",
            &outcome(RunStatus::Discrepancies),
            None,
            &t,
        );
        let third = render(&second, "charges", &outcome(RunStatus::Failed), None, &t);
        // One HELP and TYPE per family, samples of both jobs once each.
        assert_eq!(third.matches("# TYPE recon_run_status gauge").count(), 1);
        assert!(third.contains("recon_run_status{job=\"other\",status=\"clean\"} 1"));
        assert!(third.contains("recon_run_status{job=\"charges\",status=\"failed\"} 1"));
        assert!(third.contains("recon_run_status{job=\"charges\",status=\"discrepancies\"} 0"));
        assert_eq!(
            third.matches("job=\"charges\",status=\"failed\"").count(),
            1
        );
        assert!(third.contains(
            "recon_http_requests_total{job=\"charges\",provider=\"stripe\",status=\"429\"} 2"
        ));
        assert!(third.contains("recon_money_delta_minor{job=\"charges\",currency=\"USD\"} -100"));
        assert!(third.contains("recon_discrepancies{job=\"charges\",class=\"gap\"} 3"));
        assert!(third.contains("recon_backfilled_total{job=\"charges\",outcome=\"created\"} 3"));
        assert!(third.contains("recon_run_duration_seconds{job=\"charges\"} 1.500"));
        assert!(third.ends_with('\n'));
    }

    #[test]
    fn the_last_success_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recon.prom");
        let t = Timestamp::from_millisecond(1_790_000_000_250).unwrap();
        let text = render(
            "",
            "charges",
            &outcome(RunStatus::Clean),
            Some(t),
            &Traffic::default(),
        );
        write_atomic(&path, text.as_bytes()).unwrap();
        assert_eq!(previous_last_success(&path, "charges"), Some(t));
        assert_eq!(previous_last_success(&path, "other"), None);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn the_headers_are_those_prometheus_client_writes() {
        let mut g = Gauges::new("j");
        for (family, _) in FAMILIES {
            g.family(family, vec![(Vec::new(), 1)]);
        }
        let mut text = String::new();
        prometheus_text::encode(&mut text, &g.registry).unwrap();
        let theirs: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
        let ours: Vec<String> = FAMILIES
            .iter()
            .flat_map(|(f, help)| [format!("# HELP {f} {help}"), format!("# TYPE {f} gauge")])
            .collect();
        assert_eq!(theirs, ours);
        assert!(text.contains("recon_run_status{job=\"j\"} 1\n"), "{text}");
    }

    #[test]
    fn money_deltas_beyond_64_bits_are_exact() {
        let mut o = outcome(RunStatus::Clean);
        let big = i128::from(i64::MAX) * 4;
        let totals = &mut o.summary.as_mut().unwrap().run.totals.as_mut().unwrap();
        totals.target.push(crate::report::summary::Total {
            currency: Some("EUR".into()),
            records: 1,
            total: None,
            total_minor: Some(big.to_string()),
        });
        let text = render("", "charges", &o, None, &Traffic::default());
        let f: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("recon_money_delta_minor"))
            .collect();
        assert_eq!(
            f,
            [
                "recon_money_delta_minor{job=\"charges\",currency=\"USD\"} -100",
                "recon_money_delta_minor{job=\"charges\",currency=\"EUR\"} 36893488147419103228",
            ]
        );
        assert_eq!(
            text.matches("# TYPE recon_money_delta_minor gauge").count(),
            1
        );
    }

    #[test]
    fn a_missing_folder_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_destination(&dir.path().join("nope/recon.prom")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = check_destination(dir.path()).unwrap_err();
        assert!(e.to_string().contains("is a folder"), "{e}");
        check_destination(&dir.path().join("recon.prom")).unwrap();
    }
}
