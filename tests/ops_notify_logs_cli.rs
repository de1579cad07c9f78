//! `[notify]` and `--log-format json` through the binary: a webhook
//! receiver on 127.0.0.1 (plain HTTP/1.1 over a std TCP listener) gets the
//! right body on trouble and, when asked, on discrepancies; a receiver that
//! is down, says slow down (429 with Retry-After) or fails (5xx) changes no
//! exit status, and gets the post once it takes it; JSON log lines all parse, carry the run's
//! id and never a secret.

mod common;

use common::{json, text};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recon_sql::testing::TestDb;
use recon_sql::Dialect;

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    request_line: String,
    content_type: Option<String>,
    body: serde_json::Value,
    at: Instant,
}

/// `ok`, as Slack answers a post it took.
const OK: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

/// A webhook receiver answering `ok` (as Slack does) to every POST.
struct Receiver {
    base: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start() -> Receiver {
        Receiver::answering(Vec::new())
    }

    /// A receiver giving these answers (raw HTTP responses) in turn, then
    /// `ok` to every later post.
    fn answering(script: Vec<String>) -> Receiver {
        let mut script = script.into_iter();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let sink = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                reader.read_line(&mut request_line).unwrap();
                let mut length = 0usize;
                let mut content_type = None;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    let (name, value) = h.split_once(':').unwrap();
                    match name.to_ascii_lowercase().as_str() {
                        "content-length" => length = value.trim().parse().unwrap(),
                        "content-type" => content_type = Some(value.trim().to_string()),
                        _ => {}
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                sink.lock().unwrap().push(Received {
                    request_line: request_line.trim_end().to_string(),
                    content_type,
                    body: serde_json::from_slice(&body).expect("the body is JSON"),
                    at: Instant::now(),
                });
                let answer = script.next().unwrap_or_else(|| OK.to_string());
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Receiver { base, got }
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

/// A URL on 127.0.0.1 where nothing listens.
fn dead_url(path: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}{path}")
}

/// The webhook path: a Slack webhook's path is its credential.
const HOOK_PATH: &str = "/services/T0RECON/B0TEST/HookSecret9x7Q";

/// A file-to-file job: 400 source rows, every tenth missing from the
/// target, some amounts changed.
struct FileJob {
    dir: tempfile::TempDir,
}

impl FileJob {
    fn new(notify: &str) -> FileJob {
        let dir = tempfile::tempdir().unwrap();
        let mut source = String::from("id,amount,currency,created\n");
        let mut target = String::from("id,amount,currency,created\n");
        for i in 0..400i64 {
            let t = 1_795_842_000 + i * 60;
            let cur = ["usd", "eur", "jpy"][(i % 3) as usize];
            source.push_str(&format!("s{i},{},{cur},{t}\n", 100 + i));
            if i % 10 != 0 {
                let amount = 100 + i + i64::from(i % 7 == 0);
                target.push_str(&format!("s{i},{amount},{cur},{t}\n"));
            }
        }
        std::fs::write(dir.path().join("source.csv"), source).unwrap();
        std::fs::write(dir.path().join("target.csv"), target).unwrap();
        let job = FileJob { dir };
        job.config(
            notify,
            &format!("sqlite://{}?mode=rwc", job.path("state.db").display()),
        );
        job
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self, notify: &str, state: &str) {
        std::fs::write(
            self.path("recon.toml"),
            format!(
                r#"
[defaults]
state = "{state}"
{notify}
[jobs.files]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount", "currency"]
window = "2026-11-28"
{source}{target}[jobs.files.backfill]
mode = "off"
"#,
                source = common::file_side("files", "source", &self.path("source.csv")),
                target = common::file_side("files", "target", &self.path("target.csv")),
            ),
        )
        .unwrap();
    }

    fn run(&self, out: &str, extra: &[&str], envs: &[(&str, &str)]) -> Output {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .args(["run", "--config", self.path("recon.toml").to_str().unwrap()])
            .args(["--out", self.path(out).to_str().unwrap()])
            .args(extra)
            .envs(envs.iter().copied())
            .output()
            .unwrap()
    }

    /// Breaks the run after it started: the source file disappears.
    fn break_source(&self) {
        std::fs::rename(self.path("source.csv"), self.path("source.moved")).unwrap();
    }
}

/// A `[notify]` section whose URL comes from `RECON_TEST_HOOK`.
fn notify_section(extra: &str) -> String {
    format!("[notify]\nurl = \"${{RECON_TEST_HOOK}}\"\n{extra}\n")
}

#[test]
fn trouble_is_posted_in_slack_format_and_discrepancies_only_when_asked() {
    let receiver = Receiver::start();
    let url = format!("{}{HOOK_PATH}", receiver.base);
    let job = FileJob::new(&notify_section("timeout = \"5s\""));
    let env = [("RECON_TEST_HOOK", url.as_str())];

    // Discrepancies: not posted by default (on = ["trouble"]).
    let o = job.run("ok", &[], &env);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(receiver.received().is_empty(), "{:?}", receiver.received());

    // Trouble (exit 2): posted.
    job.break_source();
    let o = job.run("broken", &[], &env);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let got = receiver.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].request_line, format!("POST {HOOK_PATH} HTTP/1.1"));
    assert_eq!(got[0].content_type.as_deref(), Some("application/json"));
    let body = got[0].body.as_object().unwrap();
    assert_eq!(body.len(), 1, "Slack's body is {{\"text\": …}}: {body:?}");
    let message = body["text"].as_str().unwrap();
    assert!(
        message.contains("recon job `files`: TROUBLE (exit 2)"),
        "{message}"
    );
    assert!(
        message.contains("window 2026-11-28T00:00:00Z .. 2026-11-29T00:00:00Z"),
        "{message}"
    );
    assert!(
        message.contains("error: ") && message.contains("source.csv"),
        "{message}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("HookSecret9x7Q"), "{stderr}");
}

#[test]
fn discrepancies_are_posted_as_json_with_the_summary_figures() {
    let receiver = Receiver::start();
    let url = format!("{}{HOOK_PATH}", receiver.base);
    let job = FileJob::new(&notify_section(
        "format = \"json\"\non = [\"trouble\", \"discrepancies\"]",
    ));
    let o = job.run("first", &[], &[("RECON_TEST_HOOK", url.as_str())]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let summary = json(&job.path("first/summary.json"));
    let got = receiver.received();
    assert_eq!(got.len(), 1, "{got:?}");
    let b = &got[0].body;
    assert_eq!(b["job"], "files");
    assert_eq!(b["status"], "discrepancies");
    assert_eq!(b["exit_status"], 1);
    assert_eq!(b["run_id"], summary["run_id"]);
    assert_eq!(b["window"]["start"], "2026-11-28T00:00:00Z");
    for key in [
        "gaps",
        "orphans",
        "mismatches",
        "duplicates",
        "unplaced",
        "pending",
    ] {
        assert_eq!(b["counts"][key], summary[key], "{key}");
    }
    assert_eq!(summary["gaps"], 40);
    // Money delta per currency, exact: target total minus source total.
    let total = |side: &str, cur: &str| -> i128 {
        summary["totals"][side]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["currency"] == cur)
            .map_or(0, |t| t["total_minor"].as_str().unwrap().parse().unwrap())
    };
    let deltas = b["money_delta"].as_array().unwrap();
    assert_eq!(deltas.len(), 3, "{deltas:?}");
    for d in deltas {
        let cur = d["currency"].as_str().unwrap();
        let minor: i128 = d["delta_minor"].as_str().unwrap().parse().unwrap();
        assert_eq!(minor, total("target", cur) - total("source", cur), "{cur}");
    }
    let jpy = deltas.iter().find(|d| d["currency"] == "JPY").unwrap();
    assert!(jpy["delta"].as_str().unwrap().ends_with(" JPY"));
    assert!(
        !jpy["delta"].as_str().unwrap().contains('.'),
        "JPY has no minor digits: {jpy}"
    );
    assert_eq!(
        b["report"].as_str().map(PathBuf::from),
        Some(if job.path("first/report.html").exists() {
            job.path("first/report.html")
        } else {
            job.path("first")
        })
    );
    assert!(b["error"].is_null());
}

#[test]
fn a_receiver_that_is_down_changes_no_exit_status() {
    let url = dead_url(HOOK_PATH);
    let quiet = FileJob::new("");
    let o = quiet.run("plain", &[], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let job = FileJob::new(&notify_section(
        "on = [\"trouble\", \"discrepancies\"]\ntimeout = \"2s\"",
    ));
    let env = [("RECON_TEST_HOOK", url.as_str())];
    let o = job.run("down", &[], &env);
    assert_eq!(
        o.status.code(),
        Some(1),
        "same status as without [notify]: {}",
        text(&o)
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("notification not sent (the run's status stands)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("HookSecret9x7Q"),
        "the webhook path is a secret: {stderr}"
    );
    assert!(job.path("down/summary.json").exists(), "reports written");
    job.break_source();
    let o = job.run("down-broken", &[], &env);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("notification not sent"), "{stderr}");
    assert!(!stderr.contains("HookSecret9x7Q"), "{stderr}");
}

/// A raw HTTP response with `status` and extra header lines.
fn answer(status: &str, headers: &str) -> String {
    let body = "busy";
    format!(
        "HTTP/1.1 {status}\r\n{headers}content-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Slack rate-limits incoming webhooks (HTTP 429 with `Retry-After`,
/// https://api.slack.com/docs/rate-limits: posting messages 1 per second) and can answer 5xx: the post
/// waits as told, is retried, and lands once; the run's status stands.
#[test]
fn a_receiver_that_says_slow_down_then_fails_once_still_gets_the_post() {
    let receiver = Receiver::answering(vec![
        answer("429 Too Many Requests", "retry-after: 1\r\n"),
        answer("503 Service Unavailable", ""),
    ]);
    let url = format!("{}{HOOK_PATH}", receiver.base);
    let job = FileJob::new(&notify_section(
        "on = [\"trouble\", \"discrepancies\"]\ntimeout = \"20s\"",
    ));
    let o = job.run("busy", &[], &[("RECON_TEST_HOOK", url.as_str())]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("notification not sent"), "{stderr}");
    let got = receiver.received();
    assert_eq!(got.len(), 3, "429, 503, then taken: {got:?}");
    assert!(
        got.iter()
            .all(|r| r.body == got[0].body && r.request_line == got[0].request_line),
        "the same post each time: {got:?}"
    );
    let waited = got[1].at - got[0].at;
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After: 1 honoured, waited {waited:?}"
    );
}

/// A receiver that only fails: a bounded number of attempts, then a
/// warning without the webhook's secret path; the run's status stands.
#[test]
fn a_receiver_that_always_fails_gets_three_attempts_and_changes_no_status() {
    let receiver = Receiver::answering(vec![answer("500 Internal Server Error", ""); 10]);
    let url = format!("{}{HOOK_PATH}", receiver.base);
    let job = FileJob::new(&notify_section(
        "on = [\"trouble\", \"discrepancies\"]\ntimeout = \"20s\"",
    ));
    let o = job.run("failing", &[], &[("RECON_TEST_HOOK", url.as_str())]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("notification not sent (the run's status stands)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("500"),
        "the receiver's answer is named: {stderr}"
    );
    assert!(!stderr.contains("HookSecret9x7Q"), "{stderr}");
    assert_eq!(receiver.received().len(), 3, "{:?}", receiver.received());
    assert!(job.path("failing/summary.json").exists(), "reports written");
}

/// `url` (`postgres://USER@…`) with `password` typed in as is.
fn with_password(url: &str, password: &str) -> String {
    let start = url.find("://").unwrap() + 3;
    let at = start + url[start..].find('@').expect("test URL names a user");
    format!("{}:{password}{}", &url[..at], &url[at..])
}

/// A secret as typed, percent-decoded and percent-encoded.
fn forms(typed: &str) -> Vec<String> {
    let encoded: String = typed
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    vec![typed.to_string(), encoded]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_parse_carry_the_run_id_and_hold_no_secret() {
    let state_db = TestDb::create(Dialect::Postgres).await;
    let hook = dead_url(HOOK_PATH);
    let job = FileJob::new(&notify_section(
        "on = [\"trouble\", \"discrepancies\"]\ntimeout = \"1s\"",
    ));
    // PostgreSQL trusts local connections: the password is sent, never checked.
    let good = "Js0n@Pw-4kQ";
    let bad = "Js/0n#P?w@4kQ";
    let mut secrets: Vec<String> = Vec::new();
    for p in [good, bad, "HookSecret9x7Q"] {
        secrets.extend(forms(p));
    }
    for (password, out, expect) in [(good, "good", 1), (bad, "bad", 2)] {
        job.config(
            &notify_section("on = [\"trouble\", \"discrepancies\"]\ntimeout = \"1s\""),
            "${RECON_TEST_STATE}",
        );
        let state = with_password(&state_db.url, password);
        let o = {
            let job_path = job.path("recon.toml");
            let out_path = job.path(out);
            let hook = hook.clone();
            tokio::task::spawn_blocking(move || {
                std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
                    .args(["--log", "trace", "--log-format", "json", "run"])
                    .args(["--config", job_path.to_str().unwrap()])
                    .args(["--out", out_path.to_str().unwrap()])
                    .env("RECON_TEST_STATE", state)
                    .env("RECON_TEST_HOOK", hook)
                    .output()
                    .unwrap()
            })
            .await
            .unwrap()
        };
        assert_eq!(o.status.code(), Some(expect), "{}", text(&o));
        let stderr = String::from_utf8(o.stderr.clone()).unwrap();
        let lines: Vec<serde_json::Value> = stderr
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        assert!(lines.len() > 20, "trace logs were written: {}", lines.len());
        for (line, raw) in lines.iter().zip(stderr.lines()) {
            for key in [
                "timestamp",
                "level",
                "run_id",
                "job",
                "phase",
                "message",
                "spans",
            ] {
                assert!(line.get(key).is_some(), "no `{key}`: {raw}");
            }
            for s in &secrets {
                assert!(!raw.contains(s.as_str()), "secret {s:?} in {raw}");
            }
        }
        if expect == 1 {
            let run_id = json(&job.path(out).join("summary.json"))["run_id"].clone();
            assert!(run_id.is_string());
            for (line, raw) in lines.iter().zip(stderr.lines()) {
                assert_eq!(line["run_id"], run_id, "{raw}");
                assert_eq!(line["job"], "files", "{raw}");
            }
            for phase in ["backfill", "report"] {
                assert!(
                    lines.iter().any(|l| l["phase"] == phase),
                    "no line of phase {phase}"
                );
            }
            assert!(
                lines.iter().any(|l| l["level"] == "ERROR"
                    && l["message"]
                        .as_str()
                        .unwrap_or("")
                        .contains("notification not sent")),
                "the failed notification is a JSON line too"
            );
        } else {
            let last = lines.last().unwrap();
            assert_eq!(last["level"], "ERROR", "the final error is a JSON line");
            assert!(
                last["message"].as_str().unwrap().contains("state"),
                "{last}"
            );
        }
    }
    state_db.drop_db().await;
}

/// Whether anyone connected to `listener` (checked once the binary has
/// exited: a connection it made was queued by the kernel before its
/// `connect` returned, so it is there to be accepted).
fn connected_to(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

/// A 302 would turn the POST into a GET without the summary, a 307 would
/// send the summary to the other origin: neither is followed. Each is one
/// failed delivery (no retry), named by the two origins only; the other
/// listener is never contacted; the run's status stands.
#[test]
fn a_redirect_is_never_followed_and_is_a_failed_delivery() {
    let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = format!("http://{}", elsewhere.local_addr().unwrap());
    let location = format!("location: {other}/services/T0/B0/OtherSecretZ8\r\n");
    let receiver = Receiver::answering(vec![
        answer("302 Found", &location),
        answer("307 Temporary Redirect", &location),
    ]);
    let url = format!("{}{HOOK_PATH}", receiver.base);
    let job = FileJob::new(&notify_section(
        "on = [\"trouble\", \"discrepancies\"]\ntimeout = \"5s\"",
    ));
    for (n, (out, status)) in [("found", 302), ("temporary", 307)].into_iter().enumerate() {
        let o = job.run(out, &[], &[("RECON_TEST_HOOK", url.as_str())]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "the run's status stands: {}",
            text(&o)
        );
        assert!(job.path(out).join("summary.json").exists(), "{}", text(&o));
        let got = receiver.received();
        assert_eq!(got.len(), n + 1, "one POST per run, no retry: {got:?}");
        assert_eq!(got[n].request_line, format!("POST {HOOK_PATH} HTTP/1.1"));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("notification not sent (the run's status stands)"),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "{} answered {status}, a redirect to an address at {other};",
                receiver.base
            )),
            "both origins named: {stderr}"
        );
        assert!(stderr.contains("redirects are not followed"), "{stderr}");
        for secret in ["HookSecret9x7Q", "/services/", "OtherSecretZ8"] {
            assert!(!stderr.contains(secret), "{secret} shown: {stderr}");
        }
        assert!(
            !connected_to(&elsewhere),
            "the redirect's target was contacted after a {status}"
        );
    }
}

/// A source cell `` ` <!channel> <https://evil.example|click> `` in the
/// error text: Slack's `&`, `<`, `>` are escaped, and the cell's backtick
/// cannot close the code span it is posted in.
#[test]
fn data_in_a_slack_post_opens_no_mention_no_link_and_no_markup() {
    let receiver = Receiver::start();
    let url = format!("{}{HOOK_PATH}", receiver.base);
    let job = FileJob::new(&notify_section("timeout = \"5s\""));
    let mut source = std::fs::read_to_string(job.path("source.csv")).unwrap();
    source.push_str("evil1,100,\"` <!channel> <https://evil.example|click> `\",1795842000\n");
    std::fs::write(job.path("source.csv"), source).unwrap();
    let o = job.run("evil", &[], &[("RECON_TEST_HOOK", url.as_str())]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("<!channel>"),
        "the run failed on the cell: {stderr}"
    );
    let got = receiver.received();
    assert_eq!(got.len(), 1, "{got:?}");
    let message = got[0].body["text"].as_str().unwrap();
    assert!(!message.contains("<!channel>"), "{message}");
    assert!(!message.contains("<https://"), "{message}");
    assert!(
        !message.contains('<') && !message.contains('>'),
        "{message}"
    );
    assert!(
        message.contains("&lt;!channel&gt; &lt;https://evil.example|click&gt;"),
        "{message}"
    );
    // The error is one code span: the cell's backticks are not markup.
    let error = message
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line: {message}"));
    assert!(
        error.len() > 2 && error.starts_with('`') && error.ends_with('`'),
        "{error}"
    );
    assert!(
        !error[1..error.len() - 1].contains('`'),
        "a backtick inside: {error}"
    );
    assert!(
        message.contains("recon job `files`: TROUBLE (exit 2)"),
        "{message}"
    );
}

/// Human log lines written to a file or a pipe carry no colour codes: a
/// run whose notification is retried logs tracing's `WARN` line, with
/// stderr captured (not a terminal).
#[test]
fn logs_to_a_file_carry_no_colour_codes() {
    let receiver = Receiver::answering(vec![answer("503 Service Unavailable", "")]);
    let url = format!("{}{HOOK_PATH}", receiver.base);
    let job = FileJob::new(&notify_section(
        "on = [\"trouble\", \"discrepancies\"]\ntimeout = \"20s\"",
    ));
    let o = job.run(
        "plain",
        &["--log", "warn"],
        &[("RECON_TEST_HOOK", url.as_str()), ("NO_COLOR", "")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(receiver.received().len(), 2, "503, then taken");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains("Retrying request.")),
        "a warning was logged: {stderr}"
    );
    assert!(!stderr.contains("\x1b["), "ANSI codes: {stderr:?}");
}

/// `recon` with `args`, `env` set.
fn recon(args: &[&str], env: &[(&str, &str)]) -> Output {
    common::recon()
        .args(args)
        .env_remove("RECON_LOG_FORMAT")
        .env_remove("RECON_CONFIG")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The one JSON object stderr holds.
fn one_json_line(o: &Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {}", text(o));
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// An argument error (an unknown flag, a bad value) with `--log-format
/// json` or `RECON_LOG_FORMAT=json` is one JSON line like the others, exit
/// status 2; without, clap's text; `--help` and `--version` stay plain, 0.
#[test]
fn argument_errors_follow_the_log_format_and_help_stays_plain() {
    let o = recon(
        &[
            "--log-format",
            "json",
            "run",
            "--config",
            "x.toml",
            "--bogus",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(o.stdout.is_empty(), "{}", text(&o));
    let line = one_json_line(&o);
    assert_eq!(line["level"], "ERROR", "{line}");
    assert_eq!(
        line["message"], "unexpected argument '--bogus' found",
        "{line}"
    );
    for key in ["timestamp", "target", "run_id", "job", "phase", "spans"] {
        assert!(line.get(key).is_some(), "no `{key}`: {line}");
    }
    assert_eq!(line["fields"]["kind"], "UnknownArgument", "{line}");
    assert!(
        line["fields"]["usage"]
            .as_str()
            .is_some_and(|u| u.starts_with("recon run")),
        "{line}"
    );

    // A bad value, JSON asked for by the environment (and `=` spelling).
    for (args, env) in [
        (
            vec!["run", "--config", "x.toml", "--max-records", "-5"],
            vec![("RECON_LOG_FORMAT", "json")],
        ),
        (
            vec![
                "--log-format=json",
                "run",
                "--config",
                "x.toml",
                "--max-records",
                "-5",
            ],
            vec![],
        ),
    ] {
        let o = recon(&args, &env);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let line = one_json_line(&o);
        assert_eq!(line["level"], "ERROR", "{line}");
        let message = line["message"].as_str().unwrap();
        assert!(
            message.contains("--max-records must be a whole number"),
            "{line}"
        );
    }

    // Text (the default, or said on the command line over the environment).
    for env in [vec![], vec![("RECON_LOG_FORMAT", "json")]] {
        let o = recon(
            &[
                "--log-format",
                "text",
                "run",
                "--config",
                "x.toml",
                "--bogus",
            ],
            &env,
        );
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.starts_with("error: unexpected argument '--bogus' found"),
            "{stderr}"
        );
        assert!(!stderr.contains('{'), "{stderr}");
    }

    // --help and --version: plain on stdout, exit 0, even with JSON logs.
    let o = recon(&["--log-format", "json", "run", "--help"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("Usage: recon run"), "{}", text(&o));
    assert!(!stdout.trim_start().starts_with('{'), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    let o = recon(&["--version"], &[("RECON_LOG_FORMAT", "json")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("recon "),
        "{}",
        text(&o)
    );
    assert!(o.stderr.is_empty(), "{}", text(&o));
}
