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
//! it too). Its text is mrkdwn: `&`, `<` and `>` are escaped as Slack
//! documents, and values from the job or its data (the job's name, the
//! error, the report path, an unknown currency) are code spans they cannot
//! close, so a cell can post no mention, no link and no formatting. `json` posts the facts as an object (job, run id, status, exit
//! status, window, counts, money delta per currency, report path, error).
//!
//! The URL is a secret (a Slack webhook's path is its credential): it is
//! never printed, and its path and query are scrubbed from every message.
//! The post goes through the shared HTTP policy (timeout, a retry on 5xx or
//! a dropped connection) with redirects not followed: a 3xx is a failed
//! delivery naming the webhook's and the `Location`'s origins only. A
//! failure is logged and never changes the run's exit status.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use recon_core::http::{HttpClient, HttpError, HttpPolicy, Method, Provider};
use recon_core::{format_minor, Currency, Secret};
use serde::Deserialize;
use serde_json::json;

use super::Outcome;
use crate::report::Class;
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
        // A redirected POST arrives as a GET without its body (301-303) or
        // takes the summary to another origin (307, 308): never followed, a
        // 3xx is a failed delivery.
        policy.follow_redirects = false;
        let client = HttpClient::new(
            PROVIDER,
            policy,
            Vec::new(),
            vec![("content-type".into(), "application/json".into())],
        )?;
        let body = body(self.format, o);
        match client
            .send_text(Method::POST, self.url.expose(), |r| r.json(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(HttpError::Status {
                status, message, ..
            }) if (300..400).contains(&status) => Err(anyhow!(
                "{}",
                recon_core::scrub(&redirected(self.url.expose(), status, &message))
            )),
            Err(e) => Err(anyhow!("{}", recon_core::scrub(&e.to_string()))),
        }
    }
}

/// The failure of a post answered with a redirect: the webhook's origin
/// and where the `Location` pointed (its origin only), never a path.
/// `message` is the HTTP policy's, which names the `Location` with its
/// path masked.
fn redirected(url: &str, status: u16, message: &str) -> String {
    let at = origin(url).unwrap_or_else(|| "the webhook".into());
    let to = message
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | ',' | '(' | ')'))
        .find(|w| w.contains("://"))
        .and_then(origin)
        .map_or_else(
            || "an address not shown".to_string(),
            |o| format!("an address at {o}"),
        );
    format!(
        "{at} answered {status}, a redirect to {to}; redirects are not followed for notifications \
         (a 301-303 would drop the summary, a 307/308 would send it elsewhere), so it was not delivered: \
         set [notify] url to the webhook's final address"
    )
}

/// `scheme://host[:port]` of a URL: what may be shown of a webhook URL
/// (its path and query are its credential).
fn origin(url: &str) -> Option<String> {
    let u = url::Url::parse(url.trim()).ok()?;
    let host = u.host_str()?;
    Some(match u.port() {
        Some(port) => format!("{}://{host}:{port}", u.scheme()),
        None => format!("{}://{host}", u.scheme()),
    })
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

/// Counts in message order, with their labels.
const COUNTS: [(Class, &str); 8] = [
    (Class::Gaps, "gaps"),
    (Class::Orphans, "orphans"),
    (Class::Mismatches, "mismatches"),
    (Class::Duplicates, "duplicates"),
    (Class::Unplaced, "unplaced"),
    (Class::Pending, "pending"),
    (Class::Backfilled, "backfilled"),
    (Class::BackfillFailed, "backfill failed"),
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
        let w = o.summary.as_ref()?.run.window.as_ref()?;
        Some((w.start.clone(), w.end.clone()))
    });
    let report = o.report().map(|p| p.display().to_string());
    let delta = o.money_delta();
    match format {
        NotifyFormat::Json => {
            let counts: serde_json::Map<String, serde_json::Value> = COUNTS
                .iter()
                .filter_map(|(c, _)| Some((c.key().to_string(), json!(o.count(*c)?))))
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
                "error": o.error.as_deref().map(|e| recon_core::scrub(e).into_owned()),
            })
        }
        NotifyFormat::Slack => {
            let mut text = format!(
                "recon job {}: {} (exit {})",
                code(job),
                match o.status {
                    RunStatus::Clean => "clean",
                    RunStatus::Discrepancies => "discrepancies",
                    _ => "TROUBLE",
                },
                o.exit_status
            );
            if let Some((s, e)) = &window {
                text.push_str(&format!("\nwindow {} .. {}", plain(s), plain(e)));
            }
            let counts: Vec<String> = COUNTS
                .iter()
                .filter_map(|(c, label)| Some(format!("{label} {}", o.count(*c)?)))
                .collect();
            if !counts.is_empty() {
                text.push_str(&format!("\n{}", counts.join(", ")));
            }
            if !delta.is_empty() {
                let d: Vec<String> = delta.iter().map(|(c, m)| slack_money(c, *m)).collect();
                text.push_str(&format!(
                    "\nmoney delta (target - source): {}",
                    d.join(", ")
                ));
            }
            if let Some(e) = &o.error {
                text.push_str(&format!("\nerror: {}", code(&error_text(e))));
            }
            if let Some(r) = &report {
                text.push_str(&format!("\nreport: {}", code(r)));
            }
            json!({ "text": text })
        }
    }
}

/// Longest error text posted, in bytes (before escaping).
const ERROR_BYTES: usize = 600;

/// An error as posted: scrubbed of secrets first (a secret cut in half
/// would no longer be recognised), then cut at [`ERROR_BYTES`] on a
/// character boundary.
fn error_text(e: &str) -> String {
    let mut e = recon_core::scrub(e).into_owned();
    if e.len() > ERROR_BYTES {
        let cut = (0..=ERROR_BYTES)
            .rev()
            .find(|i| e.is_char_boundary(*i))
            .unwrap_or(0);
        e.truncate(cut);
        e.push('…');
    }
    e
}

/// Text for Slack's mrkdwn with `&`, `<` and `>` escaped as Slack
/// documents ("Escaping text", https://api.slack.com/reference/surfaces/formatting#escaping),
/// so that data can open no mention (`<!channel>`) and no link
/// (`<https://…|…>`); backticks become `'`, so that data can neither open
/// nor close a code span.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('\''),
            // One line: a line break would end the code span it is in.
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A value from the job or its data as an inline code span, where Slack
/// applies no `*bold*`, `_italic_` or `~strike~` (see [`plain`]).
fn code(text: &str) -> String {
    let text = plain(text);
    if text.trim().is_empty() {
        return "(empty)".into();
    }
    format!("`{text}`")
}

/// [`money`] for Slack: a currency recon does not know is data, shown as
/// code.
fn slack_money(code_text: &str, minor: i128) -> String {
    match code_text.parse::<Currency>() {
        Ok(c) => plain(&format!("{} {code_text}", format_minor(minor, c))),
        Err(_) => format!("{minor} (minor units) {}", code(code_text)),
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
            summary: Some(
                crate::report::RunSummary::of_json(json!({
                    "gaps": 3, "orphans": 1, "mismatches": 0, "duplicates": 0,
                    "window": {"start": "2026-11-28T05:00:00Z", "end": "2026-11-29T05:00:00Z"},
                    "totals": {"source": [{"currency": "USD", "total_minor": "10050"}],
                               "target": [{"currency": "USD", "total_minor": "9000"}]}
                }))
                .unwrap(),
            ),
            report_dir: Some("/r/charges/run-1".into()),
            window: None,
            duration: Duration::ZERO,
            finished: Timestamp::UNIX_EPOCH,
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
        assert!(text.contains("report: `/r/charges/run-1`"), "{text}");
    }

    #[test]
    fn a_long_error_is_scrubbed_before_it_is_cut() {
        // A secret across the 600-byte cut: cut first, its head would be
        // left and no longer recognised as the secret.
        let secret = "CutSecret/9q8w7e6r5t4y";
        recon_core::register_secret(secret);
        let mut o = outcome();
        o.error = Some(format!("{}{secret} and more", "x".repeat(590)));
        let b = body(NotifyFormat::Slack, &o);
        let text = b["text"].as_str().unwrap();
        assert!(!text.contains(&secret[..6]), "{text}");
        assert!(text.contains("x***"), "{text}");
        let b = body(NotifyFormat::Json, &o);
        assert!(!b["error"].as_str().unwrap().contains(&secret[..6]));
    }

    #[test]
    fn slack_values_are_escaped_and_kept_out_of_markup() {
        assert_eq!(plain("a & <b> `c`"), "a &amp; &lt;b&gt; 'c'");
        assert_eq!(code("*x*_`y`_"), "`*x*_'y'_`");
        assert_eq!(code(" "), "(empty)");
        assert_eq!(
            slack_money("<!here>", -5),
            "-5 (minor units) `&lt;!here&gt;`"
        );
        let mut o = outcome();
        o.job = Some("a`b <!channel>".into());
        o.report_dir = Some("/r/my_job/*run*".into());
        let b = body(NotifyFormat::Slack, &o);
        let text = b["text"].as_str().unwrap();
        assert!(
            text.starts_with("recon job `a'b &lt;!channel&gt;`: discrepancies"),
            "{text}"
        );
        assert!(text.contains("report: `/r/my_job/*run*`"), "{text}");
    }

    #[test]
    fn a_redirect_names_origins_only() {
        let m = redirected(
            "https://hooks.example.com/services/T0/B0/Tok",
            307,
            "redirected (307) to http://10.0.0.9:8080/***; redirects are not followed",
        );
        assert!(
            m.starts_with(
                "https://hooks.example.com answered 307, a redirect to an address at http://10.0.0.9:8080;"
            ),
            "{m}"
        );
        assert!(!m.contains("/services") && !m.contains("***"), "{m}");
        let m = redirected(
            "http://127.0.0.1:9/x",
            302,
            "redirected (302) without a Location",
        );
        assert!(m.contains("a redirect to an address not shown"), "{m}");
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
