//! `--metrics-file` through the binary: the file is read back by a strict
//! Prometheus text-format (0.0.4) parser written here, independently of the
//! writer, and its values are checked against the run's summary.json,
//! backfill.csv and what the emulated Stripe API counted; the last success
//! survives a failing run; a reader polling the file while runs replace it
//! never sees a partial file.

mod common;

use common::{json, recon_async as recon, text};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};

// ---------------------------------------------------------------------------
// A strict parser of the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), with the
// textfile collector's extra rule (no timestamps).

type Labels = BTreeMap<String, String>;

#[derive(Debug, Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<(Labels, f64)>,
}

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => s.parse::<f64>().map_err(|_| format!("bad value `{s}`")),
    }
}

fn parse_prometheus(text: &str) -> Result<BTreeMap<String, Family>, String> {
    if text.is_empty() || !text.ends_with('\n') {
        return Err("the file must end with a newline".into());
    }
    if text.contains('\r') {
        return Err("carriage return in the file".into());
    }
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut seen_series: BTreeSet<(String, Labels)> = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut closed: BTreeSet<String> = BTreeSet::new();
    let mut enter = |name: &str, current: &mut Option<String>| -> Result<(), String> {
        if current.as_deref() != Some(name) {
            if closed.contains(name) {
                return Err(format!("lines of `{name}` are not one group"));
            }
            if let Some(c) = current.take() {
                closed.insert(c);
            }
            *current = Some(name.to_string());
        }
        Ok(())
    };
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim_start();
            let mut parts = rest.splitn(3, ' ');
            let keyword = parts.next().unwrap_or("");
            if keyword != "HELP" && keyword != "TYPE" {
                continue; // a comment
            }
            let name = parts.next().ok_or_else(|| at("no metric name".into()))?;
            if !valid_metric_name(name) {
                return Err(at(format!("bad metric name `{name}`")));
            }
            let arg = parts.next().unwrap_or("");
            enter(name, &mut current).map_err(at)?;
            let f = families.entry(name.to_string()).or_default();
            if keyword == "HELP" {
                if f.help.is_some() {
                    return Err(at("second HELP".into()));
                }
                let mut help = String::new();
                let mut chars = arg.chars();
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        match chars.next() {
                            Some('\\') => help.push('\\'),
                            Some('n') => help.push('\n'),
                            other => return Err(at(format!("bad escape in HELP: {other:?}"))),
                        }
                    } else {
                        help.push(c);
                    }
                }
                f.help = Some(help);
            } else {
                if f.kind.is_some() {
                    return Err(at("second TYPE".into()));
                }
                if !f.samples.is_empty() {
                    return Err(at("TYPE after samples".into()));
                }
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg) {
                    return Err(at(format!("bad type `{arg}`")));
                }
                f.kind = Some(arg.to_string());
            }
            continue;
        }
        // A sample: name, optional labels, value; no timestamp.
        let name_end = line.find(['{', ' ']).ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !valid_metric_name(name) {
            return Err(at(format!("bad metric name `{name}`")));
        }
        let mut labels = Labels::new();
        let mut rest = &line[name_end..];
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end;
            loop {
                let (i, c) = chars.next().ok_or_else(|| at("unclosed labels".into()))?;
                if c == '}' {
                    end = i;
                    break;
                }
                let mut label = String::from(c);
                loop {
                    let (_, c) = chars.next().ok_or_else(|| at("unclosed label".into()))?;
                    if c == '=' {
                        break;
                    }
                    label.push(c);
                }
                if !valid_label_name(&label) {
                    return Err(at(format!("bad label name `{label}`")));
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(at("label value not quoted".into()));
                }
                let mut value = String::new();
                loop {
                    let (_, c) = chars.next().ok_or_else(|| at("unclosed value".into()))?;
                    match c {
                        '\\' => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => return Err(at(format!("bad escape {other:?}"))),
                        },
                        '"' => break,
                        '\n' => return Err(at("raw newline in a label value".into())),
                        c => value.push(c),
                    }
                }
                if labels.insert(label.clone(), value).is_some() {
                    return Err(at(format!("label `{label}` twice")));
                }
                match chars.peek().map(|(_, c)| *c) {
                    Some(',') => {
                        chars.next();
                    }
                    Some('}') => {}
                    other => {
                        return Err(at(format!("expected , or }} after a label, got {other:?}")))
                    }
                }
            }
            rest = &body[end + 1..];
        }
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before the value".into()))?;
        let fields: Vec<&str> = rest.split(' ').collect();
        if fields.len() != 1 {
            return Err(at(
                "a timestamp or trailing text (the textfile collector refuses timestamps)".into(),
            ));
        }
        let value = parse_value(fields[0]).map_err(at)?;
        enter(name, &mut current).map_err(at)?;
        let f = families.entry(name.to_string()).or_default();
        if f.kind.is_none() {
            return Err(at("a sample without a TYPE line before it".into()));
        }
        if !seen_series.insert((name.to_string(), labels.clone())) {
            return Err(at("the same series twice".into()));
        }
        f.samples.push((labels, value));
    }
    Ok(families)
}

#[test]
fn the_parser_is_strict() {
    let good = "# HELP a_b x\\\\y\n# TYPE a_b gauge\na_b{job=\"q\\\"\\n\",x=\"1\"} 2.5\na_b 1\n";
    let f = parse_prometheus(good).unwrap();
    assert_eq!(f["a_b"].samples[0].0["job"], "q\"\n");
    for bad in [
        "# TYPE a gauge\na 1",                                      // no final newline
        "a 1\n",                                                    // no TYPE
        "# TYPE a gauge\na{x=\"1\"} 1 1700000000\n",                // timestamp
        "# TYPE a gauge\na{x=\"\\t\"} 1\n",                         // bad escape
        "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n",                   // label twice
        "# TYPE a gauge\na 1\na 2\n",                               // series twice
        "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"1\"} 1\n", // not grouped
        "# TYPE a gauge\na{1x=\"1\"} 1\n",                          // bad label name
        "# TYPE a gauge\na x\n",                                    // bad value
    ] {
        assert!(parse_prometheus(bad).is_err(), "accepted {bad:?}");
    }
}

// ---------------------------------------------------------------------------

/// The one sample of `family` whose labels include `want`.
fn value(f: &BTreeMap<String, Family>, family: &str, want: &[(&str, &str)]) -> Option<f64> {
    let fam = f.get(family)?;
    let hits: Vec<f64> = fam
        .samples
        .iter()
        .filter(|(l, _)| {
            want.iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
        .collect();
    assert!(
        hits.len() <= 1,
        "{family} {want:?} matches {} samples",
        hits.len()
    );
    hits.first().copied()
}

fn read_metrics(path: &Path) -> BTreeMap<String, Family> {
    let body = std::fs::read_to_string(path).unwrap();
    parse_prometheus(&body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// Stripe (emulated, 2 requests/s: the client is throttled) → SQLite.
struct StripeJob {
    dir: tempfile::TempDir,
    emulator: Emulator,
}

impl StripeJob {
    async fn new() -> StripeJob {
        let emulator = Emulator::start(EmulatorConfig {
            rate_limit_per_sec: Some(2),
            ..EmulatorConfig::default()
        })
        .await
        .unwrap();
        let now = jiff::Timestamp::now().as_second();
        for i in 0..300i64 {
            let currency = ["usd", "eur", "jpy"][(i % 3) as usize];
            emulator.insert(
                ObjectKind::Charge,
                Emulator::charge(
                    &format!("ch_{i:05}"),
                    100 + i,
                    currency,
                    "succeeded",
                    now - 7200 + i * 10,
                ),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ledger.db");
        common::stripe_ledger_config(dir.path(), &emulator.base_url, &db, "");
        let mut conn = common::stripe_ledger(&db).await;
        // 20 rows already there, 5 of them with another amount; 2 orphans.
        for i in 0..20i64 {
            let currency = ["USD", "EUR", "JPY"][(i % 3) as usize];
            let amount = if i < 5 { 1 } else { 100 + i };
            sqlx::query(&format!(
                "INSERT INTO payments VALUES ('ch_{i:05}', {amount}, '{currency}', 'succeeded', '{}')",
                jiff::Timestamp::from_second(now - 7200 + i * 10).unwrap()
            ))
            .execute(&mut conn)
            .await
            .unwrap();
        }
        for id in ["ch_x1", "ch_x2"] {
            sqlx::query(&format!(
                "INSERT INTO payments VALUES ('{id}', 999, 'USD', 'succeeded', '{}')",
                jiff::Timestamp::from_second(now - 3600).unwrap()
            ))
            .execute(&mut conn)
            .await
            .unwrap();
        }
        StripeJob { dir, emulator }
    }

    fn metrics(&self) -> PathBuf {
        self.dir.path().join("textfile").join("recon.prom")
    }

    async fn run(&self, key: &str, out: &str) -> Output {
        recon(
            vec![
                "run".into(),
                "--config".into(),
                self.dir.path().join("recon.toml").display().to_string(),
                "--out".into(),
                self.dir.path().join(out).display().to_string(),
                "--metrics-file".into(),
                self.metrics().display().to_string(),
            ],
            vec![
                ("RECON_TEST_STRIPE_KEY", key.to_string()),
                ("RECON_LOG", "warn".into()),
            ],
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_agree_with_summary_and_the_provider_and_keep_the_last_success() {
    sqlx::any::install_default_drivers();
    let job = StripeJob::new().await;
    std::fs::create_dir(job.metrics().parent().unwrap()).unwrap();
    let key = job.emulator.api_key.clone();
    let started = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    let o = job.run(&key, "first").await;
    assert_eq!(o.status.code(), Some(1), "orphans stay open: {}", text(&o));
    let ended = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    let summary = json(&job.dir.path().join("first/summary.json"));
    let m = read_metrics(&job.metrics());
    let v = |family: &str, labels: &[(&str, &str)]| {
        let mut all = vec![("job", "charges")];
        all.extend_from_slice(labels);
        value(&m, family, &all).unwrap_or_else(|| panic!("no {family} {labels:?}"))
    };
    for (family, fam) in &m {
        assert!(fam.help.is_some(), "{family} has HELP");
        assert!(
            fam.samples.iter().all(|(l, _)| l["job"] == "charges"),
            "{family}: every sample names the job"
        );
    }
    // Discrepancies by class, as summary.json counts them.
    for (class, key) in [
        ("gap", "gaps"),
        ("orphan", "orphans"),
        ("mismatch", "mismatches"),
        ("duplicate", "duplicates"),
        ("unplaced", "unplaced"),
    ] {
        assert_eq!(
            v("recon_discrepancies", &[("class", class)]),
            summary[key].as_u64().unwrap() as f64,
            "{class}"
        );
    }
    assert_eq!(summary["orphans"], 2);
    assert_eq!(summary["mismatches"], 5);
    // Money delta per currency: target minus source, minor units.
    let totals = |side: &str, cur: &str| -> f64 {
        summary["totals"][side]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["currency"] == cur)
            .map_or(0.0, |t| {
                t["total_minor"].as_str().unwrap().parse::<f64>().unwrap()
            })
    };
    for cur in ["USD", "EUR", "JPY"] {
        assert_eq!(
            v("recon_money_delta_minor", &[("currency", cur)]),
            totals("target", cur) - totals("source", cur),
            "{cur}"
        );
    }
    assert_ne!(v("recon_money_delta_minor", &[("currency", "USD")]), 0.0);
    // Backfill outcomes, as backfill.csv lists them.
    let mut csv = csv::Reader::from_path(job.dir.path().join("first/backfill.csv")).unwrap();
    let outcome_col = csv
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "outcome")
        .unwrap();
    let mut by_outcome: BTreeMap<String, f64> = BTreeMap::new();
    for r in csv.records() {
        *by_outcome
            .entry(r.unwrap()[outcome_col].to_string())
            .or_default() += 1.0;
    }
    assert_eq!(by_outcome.get("created").copied().unwrap_or(0.0), 280.0);
    for outcome in ["created", "updated", "unchanged", "failed", "skipped"] {
        assert_eq!(
            v("recon_backfilled_total", &[("outcome", outcome)]),
            by_outcome.get(outcome).copied().unwrap_or(0.0),
            "{outcome}"
        );
    }
    assert_eq!(
        v("recon_backfilled_total", &[("outcome", "created")])
            + v("recon_backfilled_total", &[("outcome", "updated")]),
        summary["backfilled"].as_u64().unwrap() as f64
    );
    // HTTP: what the client counted is what the emulator served.
    let stats = job.emulator.stats();
    let stripe: Vec<&(Labels, f64)> = m["recon_http_requests_total"]
        .samples
        .iter()
        .filter(|(l, _)| l["provider"] == "stripe")
        .collect();
    let sent: f64 = stripe.iter().map(|(_, n)| n).sum();
    assert_eq!(sent, stats.requests as f64, "{stats:?}");
    for (status, n) in &stats.by_status {
        assert_eq!(
            v(
                "recon_http_requests_total",
                &[("provider", "stripe"), ("status", &status.to_string())]
            ),
            *n as f64,
            "status {status}"
        );
    }
    assert!(
        stats.throttled > 0,
        "the emulator's limit was reached: {stats:?}"
    );
    assert_eq!(
        v("recon_rate_limited_total", &[("provider", "stripe")]),
        stats.throttled as f64
    );
    // Status and clocks.
    assert_eq!(v("recon_run_status", &[("status", "discrepancies")]), 1.0);
    assert_eq!(v("recon_run_status", &[("status", "clean")]), 0.0);
    assert_eq!(v("recon_run_status", &[("status", "failed")]), 0.0);
    let last_run = v("recon_last_run_timestamp_seconds", &[]);
    assert!(
        started <= last_run && last_run <= ended,
        "{started} {last_run} {ended}"
    );
    let success = v("recon_last_success_timestamp_seconds", &[]);
    assert_eq!(success, last_run);
    let duration = v("recon_run_duration_seconds", &[]);
    let total_ms = summary["timings"]["total_ms"].as_u64().unwrap() as f64;
    assert!(
        duration >= total_ms / 1000.0 && duration <= ended - started,
        "{duration} {total_ms}"
    );

    // A failing run: status failed, the last success kept from the file.
    let o = job.run("sk_test_wrong_key_123", "second").await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let m2 = read_metrics(&job.metrics());
    let v2 = |family: &str, labels: &[(&str, &str)]| {
        let mut all = vec![("job", "charges")];
        all.extend_from_slice(labels);
        value(&m2, family, &all)
    };
    assert_eq!(v2("recon_run_status", &[("status", "failed")]), Some(1.0));
    assert_eq!(
        v2("recon_run_status", &[("status", "discrepancies")]),
        Some(0.0)
    );
    assert_eq!(
        v2("recon_last_success_timestamp_seconds", &[]),
        Some(success)
    );
    assert!(v2("recon_last_run_timestamp_seconds", &[]).unwrap() > last_run);
    assert_eq!(
        v2("recon_discrepancies", &[("class", "gap")]),
        None,
        "no stale counts"
    );
    assert!(
        v2(
            "recon_http_requests_total",
            &[("provider", "stripe"), ("status", "401")]
        )
        .unwrap()
            >= 1.0
    );

    // Without the file, the last success comes from the state store.
    std::fs::remove_file(job.metrics()).unwrap();
    let o = job.run("sk_test_wrong_key_123", "third").await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let m3 = read_metrics(&job.metrics());
    let from_store = value(
        &m3,
        "recon_last_success_timestamp_seconds",
        &[("job", "charges")],
    )
    .unwrap();
    // Exactly the end the state store recorded for the first run (the
    // only one that succeeded), read here from its table.
    sqlx::any::install_default_drivers();
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&format!(
        "sqlite://{}",
        job.dir.path().join("state.db").display()
    ))
    .await
    .unwrap();
    let ended: Vec<String> = sqlx::query_scalar(
        "SELECT finished_at FROM recon_runs WHERE job = 'charges' AND status IN ('clean', 'discrepancies')",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(ended.len(), 1, "{ended:?}");
    let at: jiff::Timestamp = ended[0].parse().unwrap();
    assert_eq!(
        from_store,
        at.as_millisecond() as f64 / 1000.0,
        "the store's end of the first run ({}) vs the metric",
        ended[0]
    );
    job.emulator.shutdown().await;
}

/// A quick file-to-file job (no backfill).
fn file_job(dir: &Path, metrics_key: &str) -> PathBuf {
    let mut source = String::from("id,amount,currency,created\n");
    let mut target = String::from("id,amount,currency,created\n");
    for i in 0..400 {
        let t = 1_795_842_000 + i * 60;
        let cur = ["usd", "eur"][(i % 2) as usize];
        source.push_str(&format!("s{i},{},{cur},{t}\n", 100 + i));
        if i % 10 != 0 {
            target.push_str(&format!(
                "s{i},{},{cur},{t}\n",
                100 + i + i64::from(i % 7 == 0)
            ));
        }
    }
    std::fs::write(dir.join("source.csv"), source).unwrap();
    std::fs::write(dir.join("target.csv"), target).unwrap();
    let config = dir.join("recon.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[defaults]
state = "sqlite://{state}?mode=rwc"
reports = "{reports}"
{metrics_key}
[jobs.files]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount", "currency"]
window = "2026-11-28"
{source}{target}[jobs.files.backfill]
mode = "off"
"#,
            state = dir.join("state.db").display(),
            reports = dir.join("reports").display(),
            source = common::file_side("files", "source", &dir.join("source.csv")),
            target = common::file_side("files", "target", &dir.join("target.csv")),
        ),
    )
    .unwrap();
    config
}

#[test]
fn a_reader_never_sees_a_partial_file_while_runs_replace_it() {
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("files.prom");
    // The config key, with `{job}`.
    let config = file_job(
        dir.path(),
        &format!(
            "metrics_file = \"{}\"",
            dir.path().join("{job}.prom").display()
        ),
    );
    // Another job's samples in the file are kept.
    std::fs::write(
        &prom,
        "# HELP recon_run_status x\n# TYPE recon_run_status gauge\nrecon_run_status{job=\"other\",status=\"clean\"} 1\n",
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let prom = prom.clone();
        std::thread::spawn(move || {
            let mut reads = 0u64;
            let mut versions = BTreeSet::new();
            while !stop.load(Ordering::Relaxed) {
                let body = std::fs::read_to_string(&prom).expect("the file is always there");
                let f =
                    parse_prometheus(&body).unwrap_or_else(|e| panic!("partial file: {e}\n{body}"));
                assert!(f.contains_key("recon_run_status"), "{body}");
                if let Some(v) = value(&f, "recon_last_run_timestamp_seconds", &[("job", "files")])
                {
                    versions.insert(v.to_bits());
                    assert_eq!(
                        value(
                            &f,
                            "recon_run_status",
                            &[("job", "files"), ("status", "discrepancies")]
                        ),
                        Some(1.0),
                        "{body}"
                    );
                }
                reads += 1;
            }
            (reads, versions.len())
        })
    };
    for i in 0..6 {
        let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .args(["run", "--config", config.to_str().unwrap()])
            .args([
                "--out",
                dir.path().join(format!("out{i}")).to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    }
    stop.store(true, Ordering::Relaxed);
    let (reads, versions) = reader.join().unwrap();
    assert!(reads > 6, "the reader kept reading ({reads} reads)");
    assert!(
        versions >= 2,
        "the reader saw the file replaced ({versions} versions)"
    );
    let f = read_metrics(&prom);
    assert_eq!(
        value(
            &f,
            "recon_run_status",
            &[("job", "other"), ("status", "clean")]
        ),
        Some(1.0)
    );
    let summary = json(&dir.path().join("out5/summary.json"));
    assert_eq!(
        value(
            &f,
            "recon_discrepancies",
            &[("job", "files"), ("class", "gap")]
        ),
        Some(summary["gaps"].as_u64().unwrap() as f64)
    );
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_metrics_folder_that_does_not_exist_stops_the_run_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let config = file_job(dir.path(), "");
    let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
        .args(["run", "--config", config.to_str().unwrap()])
        .args([
            "--metrics-file",
            dir.path().join("missing/recon.prom").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("metrics file") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!dir.path().join("reports").exists(), "nothing was run");
}
