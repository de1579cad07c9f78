//! `[notify]`: a short summary of a run posted to a webhook.
//!
//! ```toml
//! [notify]
//! url = "${RECON_WEBHOOK_URL}"   # a Slack incoming webhook, or any JSON endpoint
//! format = "slack"               # or "json"
//! on = ["trouble", "discrepancies"]  # default ["trouble"]
//! timeout = "10s"
//! ```
//!
//! `slack` posts `{"text": "…"}`, the body Slack incoming webhooks take
//! (https://api.slack.com/messaging/webhooks; Mattermost and others accept
//! it too). `json` posts the facts as an object (job, run id, status, exit
//! status, window, counts, money delta per currency, report path, error).
//!
//! The URL is a secret (a Slack webhook's path is its credential): it is
//! never printed, and its path and query are scrubbed from every message.
//! The post goes through the shared HTTP policy (timeout, a retry on 5xx or
//! a dropped connection); a failure is logged and never changes the run's
//! exit status.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use recon_core::http::{HttpClient, HttpPolicy, Method, Provider};
use recon_core::{format_minor, Currency, Secret};
use serde::Deserialize;
use serde_json::json;

use super::Outcome;
use crate::state::RunStatus;

/// The `[notify]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The webhook URL; `${VAR}` is replaced from the environment.
    pub url: Secret,
    /// `slack` (default) or `json`.
    #[serde(default)]
    pub format: NotifyFormat,
    /// When to post: `trouble` (exit 2) and/or `discrepancies` (exit 1).
    #[serde(default = "default_on")]
    pub on: Vec<NotifyOn>,
    /// How long one attempt may take (default `10s`).
    pub timeout: Option<String>,
}

/// The body's shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyFormat {
    /// `{"text": "…"}`.
    #[default]
    Slack,
    /// The facts as a JSON object.
    Json,
}

/// Which outcomes are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyOn {
    /// Exit status 2.
    Trouble,
    /// Exit status 1.
    Discrepancies,
}

fn default_on() -> Vec<NotifyOn> {
    vec![NotifyOn::Trouble]
}

/// A `[notify]` section ready to post.
#[derive(Debug)]
pub struct Notify {
    url: Secret,
    format: NotifyFormat,
    on: Vec<NotifyOn>,
    timeout: Duration,
}

/// The webhook as the HTTP policy names it in messages.
const PROVIDER: Provider = Provider::new("webhook", "x-request-id");

impl Notify {
    /// Expands the URL and checks the settings.
    pub fn resolve(c: &NotifyConfig) -> Result<Notify> {
        let url = crate::config::expand_env(c.url.expose(), "url")?;
        let parsed = reqwest_url(&url)?;
        // The path and query of a webhook URL are its credential.
        for part in [parsed.0.as_str(), parsed.1.as_str()] {
            if part.len() > 1 {
                recon_core::register_secret(part);
            }
        }
        let url = Secret::new(url);
        let timeout = match &c.timeout {
            Some(t) => {
                let d = crate::window::parse_duration(t).map_err(|e| anyhow!("timeout: {e}"))?;
                if d.is_negative() || d.is_zero() {
                    bail!("timeout must be longer than zero, e.g. \"10s\"");
                }
                d.unsigned_abs()
            }
            None => Duration::from_secs(10),
        };
        Ok(Notify {
            url,
            format: c.format,
            on: c.on.clone(),
            timeout,
        })
    }

    /// `posts to https://hooks.example.com:443 on trouble, discrepancies`:
    /// the URL's scheme, host and port only (its path is the credential).
    pub fn describe(&self) -> String {
        let at = url::Url::parse(self.url.expose())
            .ok()
            .and_then(|u| {
                let host = u.host_str()?.to_string();
                let port = u.port_or_known_default()?;
                Some(format!("{}://{host}:{port}", u.scheme()))
            })
            .unwrap_or_else(|| "the webhook".into());
        let on: Vec<&str> = self
            .on
            .iter()
            .map(|o| match o {
                NotifyOn::Trouble => "trouble",
                NotifyOn::Discrepancies => "discrepancies",
            })
            .collect();
        if on.is_empty() {
            format!("{at}: set, but `on` lists no outcome, so nothing is posted")
        } else {
            format!("posts to {at} on {}", on.join(", "))
        }
    }

    /// Whether a run of this status is posted.
    pub fn wants(&self, status: RunStatus) -> bool {
        match status {
            RunStatus::Failed | RunStatus::Crashed => self.on.contains(&NotifyOn::Trouble),
            RunStatus::Discrepancies => self.on.contains(&NotifyOn::Discrepancies),
            RunStatus::Clean | RunStatus::Running => false,
        }
    }

    /// Posts the summary of `o`.
    pub async fn send(&self, o: &Outcome) -> Result<()> {
        let mut policy = HttpPolicy::new(5);
        policy.timeout = self.timeout;
        policy.max_attempts = 3;
        policy.max_total_wait = self.timeout;
        policy.rate_limit_patience = self.timeout;
        let client = HttpClient::new(
            PROVIDER,
            policy,
            Vec::new(),
            vec![("content-type".into(), "application/json".into())],
        )?;
        let body = body(self.format, o);
        client
            .send_text(Method::POST, self.url.expose(), |r| r.json(&body))
            .await
            .map_err(|e| anyhow!("{}", recon_core::scrub(&e.to_string())))?;
        Ok(())
    }
}

/// The URL's path and query, checked to be an http(s) URL.
fn reqwest_url(url: &str) -> Result<(String, String)> {
    let parsed = url::Url::parse(url).map_err(|_| {
        anyhow!("url is not a valid URL (value not shown); give the webhook's https:// URL")
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        bail!(
            "url must be an http:// or https:// URL, not {}:",
            parsed.scheme()
        );
    }
    Ok((
        parsed.path().to_string(),
        parsed.query().unwrap_or_default().to_string(),
    ))
}

/// Counts in message order: summary.json key and label.
const COUNTS: [(&str, &str); 8] = [
    ("gaps", "gaps"),
    ("orphans", "orphans"),
    ("mismatches", "mismatches"),
    ("duplicates", "duplicates"),
    ("unplaced", "unplaced"),
    ("pending", "pending"),
    ("backfilled", "backfilled"),
    ("backfill_failed", "backfill failed"),
];

/// A money delta in major units (`-12.34 USD`), exact; minor units when the
/// currency is unknown to recon.
fn money(code: &str, minor: i128) -> String {
    match code.parse::<Currency>() {
        Ok(c) => format!("{} {code}", format_minor(minor, c)),
        Err(_) => format!("{minor} (minor units) {code}"),
    }
}

/// The body to post.
pub fn body(format: NotifyFormat, o: &Outcome) -> serde_json::Value {
    let job = o.job.as_deref().unwrap_or("?");
    let window = o.window.clone().or_else(|| {
        let w = o.summary.as_ref()?.get("window")?;
        Some((
            w.get("start")?.as_str()?.into(),
            w.get("end")?.as_str()?.into(),
        ))
    });
    let report = o.report().map(|p| p.display().to_string());
    let delta = o.money_delta();
    match format {
        NotifyFormat::Json => {
            let counts: serde_json::Map<String, serde_json::Value> = COUNTS
                .iter()
                .filter_map(|(k, _)| Some(((*k).to_string(), json!(o.count(k)?))))
                .collect();
            json!({
                "job": job,
                "run_id": o.run_id,
                "status": o.status.as_str(),
                "exit_status": o.exit_status,
                "window": window.map(|(s, e)| json!({"start": s, "end": e})),
                "counts": counts,
                "money_delta": delta.iter().map(|(c, m)| json!({
                    "currency": c,
                    "delta": money(c, *m),
                    "delta_minor": m.to_string(),
                })).collect::<Vec<_>>(),
                "report": report,
                "error": o.error,
            })
        }
        NotifyFormat::Slack => {
            let mut text = format!(
                "recon job `{job}`: {} (exit {})",
                match o.status {
                    RunStatus::Clean => "clean",
                    RunStatus::Discrepancies => "discrepancies",
                    _ => "TROUBLE",
                },
                o.exit_status
            );
            if let Some((s, e)) = &window {
                text.push_str(&format!("\nwindow {s} .. {e}"));
            }
            let counts: Vec<String> = COUNTS
                .iter()
                .filter_map(|(k, label)| Some(format!("{label} {}", o.count(k)?)))
                .collect();
            if !counts.is_empty() {
                text.push_str(&format!("\n{}", counts.join(", ")));
            }
            if !delta.is_empty() {
                let d: Vec<String> = delta.iter().map(|(c, m)| money(c, *m)).collect();
                text.push_str(&format!(
                    "\nmoney delta (target - source): {}",
                    d.join(", ")
                ));
            }
            if let Some(e) = &o.error {
                let mut e = e.clone();
                if e.len() > 600 {
                    let cut = (0..=600)
                        .rev()
                        .find(|i| e.is_char_boundary(*i))
                        .unwrap_or(0);
                    e.truncate(cut);
                    e.push('…');
                }
                text.push_str(&format!("\nerror: {e}"));
            }
            if let Some(r) = &report {
                text.push_str(&format!("\nreport: {r}"));
            }
            json!({ "text": text })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn outcome() -> Outcome {
        Outcome {
            job: Some("charges".into()),
            run_id: Some("run-1".into()),
            status: RunStatus::Discrepancies,
            exit_status: 1,
            error: None,
            summary: Some(json!({
                "gaps": 3, "orphans": 1, "mismatches": 0, "duplicates": 0,
                "window": {"start": "2026-11-28T05:00:00Z", "end": "2026-11-29T05:00:00Z"},
                "totals": {"source": [{"currency": "USD", "total_minor": "10050"}],
                           "target": [{"currency": "USD", "total_minor": "9000"}]}
            })),
            report_dir: Some("/r/charges/run-1".into()),
            window: None,
            duration: Duration::ZERO,
            finished: Timestamp::UNIX_EPOCH,
            backfill: Vec::new(),
        }
    }

    #[test]
    fn slack_text_has_job_window_counts_money_and_report() {
        let b = body(NotifyFormat::Slack, &outcome());
        let text = b["text"].as_str().unwrap();
        assert!(text.contains("`charges`: discrepancies (exit 1)"), "{text}");
        assert!(
            text.contains("window 2026-11-28T05:00:00Z .. 2026-11-29T05:00:00Z"),
            "{text}"
        );
        assert!(text.contains("gaps 3, orphans 1, mismatches 0"), "{text}");
        assert!(
            text.contains("money delta (target - source): -10.50 USD"),
            "{text}"
        );
        assert!(text.contains("report: /r/charges/run-1"), "{text}");
    }

    #[test]
    fn json_body_has_the_facts() {
        let b = body(NotifyFormat::Json, &outcome());
        assert_eq!(b["job"], "charges");
        assert_eq!(b["exit_status"], 1);
        assert_eq!(b["counts"]["gaps"], 3);
        assert_eq!(b["money_delta"][0]["delta"], "-10.50 USD");
        assert_eq!(b["money_delta"][0]["delta_minor"], "-1050");
        assert_eq!(b["window"]["end"], "2026-11-29T05:00:00Z");
    }

    #[test]
    fn trouble_only_by_default() {
        let c: NotifyConfig = toml::from_str("url = \"https://hooks.example/x\"").unwrap();
        let n = Notify::resolve(&c).unwrap();
        assert!(n.wants(RunStatus::Failed));
        assert!(!n.wants(RunStatus::Discrepancies));
        assert!(!n.wants(RunStatus::Clean));
        let bad: Result<NotifyConfig, _> = toml::from_str("url = \"x\"\non = [\"sometimes\"]");
        assert!(bad.is_err());
        let c: NotifyConfig = toml::from_str("url = \"ftp://h/x\"").unwrap();
        assert!(Notify::resolve(&c).is_err());
    }
}
