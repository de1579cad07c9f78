//! report.html opened in a real headless browser (Chromium from Debian's
//! packages; scripts/test installs it like the databases): a run with
//! known numbers, its page's DOM as Chromium built it (counts, totals,
//! charts, the largest discrepancies, links) and a screenshot. Then
//! `recon report` writes it again from the state store.
//!
//! Without a Chromium binary that answers `--version` (`chromium`,
//! `chromium-browser`, or RECON_TEST_CHROMIUM) the browser part prints why
//! on stderr and is skipped; the page's own content is still checked. With
//! RECON_REQUIRE_CHROMIUM=1 (scripts/test sets it when chromium is
//! installed) that is a failure instead.

mod common;

use common::text;

use std::path::{Path, PathBuf};
use std::process::{Command as Std, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;

/// 2026-11-28T00:00:00-05:00 (New York midnight) in Unix seconds.
const DAY_START: i64 = 1_795_842_000;
const SCRIPT_ID: &str = "<script>alert(1)</script>";
const FORMULA_ID: &str = "=HYPERLINK(\"http://evil.example\",\"x\")";

struct Fixture {
    db: TestDb,
    dir: tempfile::TempDir,
}

/// The source: six charges of 10.00..60.00 USD, one of 2^53 + 1 cents
/// (a double cannot hold it), and two with hostile IDs (1.00 and 2.00).
fn source() -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = (1..=6).map(|i| (format!("ch_{i}"), i * 1000)).collect();
    v.push(("ch_big".into(), 9_007_199_254_740_993));
    v.push((SCRIPT_ID.into(), 100));
    v.push((FORMULA_ID.into(), 200));
    v
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl Fixture {
    /// The target holds ch_1, ch_2, ch_4 (40.01, a mismatch), ch_5, ch_6
    /// and the orphan ch_o1 (7.77): gaps ch_3, ch_big and the two hostile IDs.
    async fn new() -> Fixture {
        Fixture::with_gaps(&[]).await
    }

    /// [`Fixture::new`] with more gaps: `extra` (ID, cents) in the source
    /// only.
    async fn with_gaps(extra: &[(String, i64)]) -> Fixture {
        let source: Vec<(String, i64)> =
            source().into_iter().chain(extra.iter().cloned()).collect();
        let db = TestDb::create(Dialect::Sqlite).await;
        db.exec("CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, amount_cents BIGINT, currency TEXT, created_at TIMESTAMP)")
            .await;
        let at = |i: i64| {
            jiff::Timestamp::from_second(DAY_START + 3600 + i * 60)
                .unwrap()
                .strftime("%Y-%m-%d %H:%M:%S")
                .to_string()
        };
        let mut rows = Vec::new();
        for (i, (id, amount)) in source.iter().enumerate() {
            let amount = match id.as_str() {
                "ch_3" | "ch_big" => continue,
                _ if extra.iter().any(|(e, _)| e == id) => continue,
                "ch_4" => amount + 1,
                _ if id.starts_with('<') || id.starts_with('=') => continue,
                _ => *amount,
            };
            rows.push(format!("('{id}', {amount}, 'USD', '{}')", at(i as i64)));
        }
        rows.push(format!("('ch_o1', 777, 'USD', '{}')", at(50)));
        db.exec(&format!(
            "INSERT INTO payments (stripe_charge_id, amount_cents, currency, created_at) VALUES {}",
            rows.join(", ")
        ))
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("id,amount,currency,created\n");
        for (i, (id, amount)) in source.iter().enumerate() {
            csv.push_str(&format!(
                "{},{amount},usd,{}\n",
                csv_cell(id),
                DAY_START + 3600 + i as i64 * 60
            ));
        }
        std::fs::write(dir.path().join("charges.csv"), csv).unwrap();
        common::csv_insert_job(dir.path(), &db.url);
        Fixture { db, dir }
    }

    fn recon(&self, args: &[&str]) -> Output {
        self.recon_env(args, &[])
    }

    fn recon_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::cargo_bin("recon")
            .unwrap()
            .args(args)
            .arg("--config")
            .arg(self.dir.path().join("recon.toml"))
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }
}

/// The report folder a run printed (`reports: PATH`).
fn folder(o: &Output) -> PathBuf {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("reports: "))
        .unwrap_or_else(|| panic!("no reports line: {}", text(o)));
    PathBuf::from(line.trim())
}

/// A Chromium binary, or why there is none.
fn chromium() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("RECON_TEST_CHROMIUM") {
        candidates.push(PathBuf::from(p));
    }
    for name in ["chromium", "chromium-browser"] {
        if let Ok(o) = Std::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
        {
            let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && !p.is_empty() {
                candidates.push(PathBuf::from(p));
            }
        }
    }
    if candidates.is_empty() {
        return Err(
            "no chromium on PATH (scripts/test installs Debian's `chromium` when run as root; \
             or set RECON_TEST_CHROMIUM)"
                .into(),
        );
    }
    // A name on PATH is not a browser: a snap shim or a broken install
    // fails `--version`; only one that answers it is used.
    let mut why = Vec::new();
    for bin in candidates {
        match version_of(&bin) {
            Ok(v) => {
                eprintln!("report_html: using {} ({v})", bin.display());
                return Ok(bin);
            }
            Err(e) => why.push(format!("{}: {e}", bin.display())),
        }
    }
    Err(format!(
        "no working chromium ({}); install Debian's `chromium` or set RECON_TEST_CHROMIUM",
        why.join("; ")
    ))
}

/// `<bin> --version`'s answer, within 60 s and with exit status 0.
fn version_of(bin: &Path) -> Result<String, String> {
    let mut child = Std::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                if let Some(mut o) = child.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                let out = out.trim().to_string();
                return if status.success() && !out.is_empty() {
                    Ok(out)
                } else {
                    Err(format!("`--version` failed ({status}, printed {out:?})"))
                };
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("`--version` did not answer within 60 s".into());
            }
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
}

/// Runs headless Chromium on a page with extra flags; its stdout.
fn headless(bin: &Path, profile: &Path, page: &Path, flags: &[String]) -> Vec<u8> {
    let child = Std::new(bin)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(flags)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    // Chromium still running after 120 s is killed and fails the test.
    common::finish_within(child, Duration::from_secs(120)).stdout
}

/// The text of the first element holding `attr` (`data-count="gaps"`).
fn cell<'a>(dom: &'a str, attr: &str) -> &'a str {
    let at = dom
        .find(attr)
        .unwrap_or_else(|| panic!("no {attr} in the DOM"));
    let rest = &dom[at..];
    let start = rest.find('>').unwrap() + 1;
    let end = rest[start..].find('<').unwrap() + start;
    &rest[start..end]
}

/// What the page of the apply run must show, in the page's source or in
/// the DOM Chromium built from it.
fn check_page(dom: &str, runs: usize) {
    assert_eq!(cell(dom, "data-count=\"gaps\""), "4");
    assert_eq!(cell(dom, "data-count=\"orphans\""), "1");
    assert_eq!(cell(dom, "data-count=\"mismatches\""), "1");
    assert_eq!(cell(dom, "data-count=\"matched\""), "4");
    assert_eq!(cell(dom, "data-count=\"source_records\""), "9");
    assert_eq!(cell(dom, "data-count=\"backfilled\""), "4");
    assert_eq!(cell(dom, "data-status=\"discrepancies\""), "discrepancies");
    // 60.00 + … + 10.00 + 90071992547409.93 + 1.00 + 2.00, exactly.
    assert_eq!(cell(dom, "data-total=\"source\""), "90071992547622.93 USD");
    assert_eq!(cell(dom, "data-total=\"target\""), "187.78 USD");
    assert_eq!(cell(dom, "data-total=\"delta\""), "-90071992547435.15 USD");
    // One chart per class and one of the money delta, a bar per run.
    for series in ["gaps", "orphans", "mismatches", "duplicates", "delta-USD"] {
        let fig = dom
            .split(&format!("data-series=\"{series}\""))
            .nth(1)
            .unwrap_or_else(|| panic!("no {series} chart"));
        let fig = fig.split("</figure>").next().unwrap();
        assert!(fig.contains("<svg"), "{series}: {fig}");
        assert_eq!(fig.matches("<rect").count(), runs, "{series}: {fig}");
    }
    let gaps_chart = dom.split("data-series=\"gaps\"").nth(1).unwrap();
    let gaps_chart = gaps_chart.split("</figure>").next().unwrap();
    assert_eq!(gaps_chart.matches("data-value=\"4\"").count(), runs);
    // The largest gap first, its amount exact, its hostile neighbours inert.
    let top = dom.split("id=\"top\"").nth(1).expect("top table");
    let first = top.split("</tr>").nth(1).unwrap();
    assert!(first.contains("ch_big"), "{first}");
    assert!(first.contains("90071992547409.93 USD"), "{first}");
    assert!(
        top.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{top}"
    );
    // Formula-safe as in the CSVs: the cell starts with a quote.
    assert!(
        top.contains("&#39;=HYPERLINK(") || top.contains("'=HYPERLINK("),
        "{top}"
    );
    assert!(!top.contains(">=HYPERLINK("), "{top}");
    assert!(
        !dom.to_ascii_lowercase().contains("<script"),
        "a script in {dom}"
    );
    // Links to the CSV files beside it.
    for f in [
        "gaps.csv",
        "orphans.csv",
        "mismatches.csv",
        "backfill.csv",
        "summary.csv",
    ] {
        assert!(dom.contains(&format!("href=\"{f}\"")), "no link to {f}");
    }
}

#[tokio::test]
async fn report_html_in_a_headless_browser() {
    let f = Fixture::new().await;
    let dry = f.recon(&["run", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "{}", text(&dry));
    let run = f.recon(&["run"]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let run_folder = folder(&run);
    let page = run_folder.join("report.html");
    let source = std::fs::read_to_string(&page).unwrap();
    check_page(&source, 2);
    assert!(source.contains("default-src 'none'"));
    // Self-contained: nothing to fetch, nothing to run.
    for loads in [" src=", "<link", "<script", "@import", "url("] {
        assert!(!source.contains(loads), "`{loads}` in the page");
    }

    match chromium() {
        // scripts/test sets RECON_REQUIRE_CHROMIUM=1 when chromium is
        // installed: then a browser that does not work is a failure.
        Err(why) if std::env::var_os("RECON_REQUIRE_CHROMIUM").is_some_and(|v| v == "1") => {
            panic!("RECON_REQUIRE_CHROMIUM=1 but {why}")
        }
        Err(why) => eprintln!("SKIPPED the browser part of report_html: {why}"),
        Ok(bin) => {
            let profile = f.dir.path().join("chromium-profile");
            let dom =
                String::from_utf8(headless(&bin, &profile, &page, &["--dump-dom".into()])).unwrap();
            assert!(dom.contains("<svg"), "chromium built no DOM: {dom}");
            check_page(&dom, 2);
            let shot = f.dir.path().join("report.png");
            headless(
                &bin,
                &profile,
                &page,
                &[
                    format!("--screenshot={}", shot.display()),
                    "--window-size=1280,2400".into(),
                    "--hide-scrollbars".into(),
                ],
            );
            let png = std::fs::read(&shot).expect("screenshot written");
            assert!(png.len() > 1000, "screenshot of {} bytes", png.len());
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
            eprintln!("screenshot: {} ({} bytes)", shot.display(), png.len());
            // To look at it: RECON_TEST_KEEP_SCREENSHOT=/tmp/report.png
            if let Ok(keep) = std::env::var("RECON_TEST_KEEP_SCREENSHOT") {
                std::fs::copy(&shot, keep).unwrap();
            }
        }
    }

    // `recon report` writes it again in the run's folder, from the store.
    std::fs::remove_file(&page).unwrap();
    let o = f.recon(&["report", "--job", "charges"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let again = std::fs::read_to_string(&page).unwrap();
    check_page(&again, 2);
    // --runs 1: only this run in the charts; --out elsewhere links back.
    let out = f.dir.path().join("mail");
    let o = f.recon(&[
        "report",
        "--job",
        "charges",
        "--runs",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let other = std::fs::read_to_string(out.join("report.html")).unwrap();
    let gaps_chart = other.split("data-series=\"gaps\"").nth(1).unwrap();
    assert_eq!(
        gaps_chart
            .split("</figure>")
            .next()
            .unwrap()
            .matches("<rect")
            .count(),
        1
    );
    let run_name = run_folder.file_name().unwrap().to_str().unwrap();
    assert!(
        other.contains(&format!("href=\"../reports/charges/{run_name}/gaps.csv\"")),
        "{other}"
    );
    // `recon apply` folders get a page too: the plan's outcomes.
    f.db.exec("DELETE FROM payments WHERE stripe_charge_id = 'ch_3'")
        .await;
    let dry = f.recon(&["run", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "{}", text(&dry));
    let plan = folder(&dry).join("plan.jsonl");
    let o = f.recon(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let applied = std::fs::read_to_string(folder(&o).join("report.html")).unwrap();
    assert_eq!(cell(&applied, "data-outcome=\"created\""), "1");
    assert_eq!(cell(&applied, "data-count=\"backfilled\""), "1");
    assert_eq!(cell(&applied, "data-status=\"clean\""), "clean");
    assert!(applied.contains("href=\"backfill.csv\""), "{applied}");

    // A job without runs is a clear error, exit 2.
    let empty = Fixture::new().await;
    let o = empty.recon(&["report"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("has no runs"), "{}", text(&o));
    f.db.drop_db().await;
    empty.db.drop_db().await;
}

/// The notes of a report folder's summary.json.
fn notes(folder: &Path) -> Vec<String> {
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder.join("summary.json")).unwrap()).unwrap();
    summary["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_page_that_cannot_be_made_fails_neither_the_run_nor_the_apply() {
    const FAIL: (&str, &str) = ("RECON_FAULT_HTML_FAILS", "1");
    let f = Fixture::new().await;
    // The run: its status stands (gaps were found and backfilled), its
    // folder is committed with every other file, the reason is noted.
    let run = f.recon_env(&["run"], &[FAIL]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("warning: report.html was not written (injected failure"),
        "{}",
        text(&run)
    );
    let dir = folder(&run);
    assert!(!dir.join("report.html").exists());
    for f in ["summary.json", "summary.csv", "gaps.csv", "backfill.csv"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let backfill = std::fs::read_to_string(dir.join("backfill.csv")).unwrap();
    assert!(
        backfill.contains("ch_3") && backfill.contains("created"),
        "{backfill}"
    );
    let n = notes(&dir);
    assert!(
        n.iter()
            .any(|n| n.starts_with("report.html was not written (injected failure")),
        "{n:?}"
    );
    // The written records are in the target: the run went through.
    let again = f.recon(&["run", "--dry-run"]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder(&again).join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["gaps"], 0, "{}", text(&again));
    // `recon report` makes the page afterwards.
    let o = f.recon(&["report", "--job", "charges"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // The apply: the same.
    f.db.exec("DELETE FROM payments WHERE stripe_charge_id = 'ch_3'")
        .await;
    let dry = f.recon(&["run", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "{}", text(&dry));
    let plan = folder(&dry).join("plan.jsonl");
    let o = f.recon_env(&["apply", "--plan", plan.to_str().unwrap()], &[FAIL]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("warning: report.html was not written"),
        "{}",
        text(&o)
    );
    let applied = folder(&o);
    assert!(!applied.join("report.html").exists());
    assert!(applied.join("backfill.csv").is_file());
    assert!(
        notes(&applied)
            .iter()
            .any(|n| n.starts_with("report.html was not written")),
        "{:?}",
        notes(&applied)
    );
    f.db.drop_db().await;
}

/// Measures the table of the largest discrepancies as laid out: the
/// viewport's width, the page's scroll width, and each row's cells
/// (left, right, width, height, scroll width, client width, and how far
/// below the cell's top its text starts). The result is
/// written into the DOM as `<pre id="probe">JSON</pre>`, for `--dump-dom`.
const PROBE: &str = "<script>(function(){var de=document.documentElement;\
var out={vw:de.clientWidth,sw:de.scrollWidth,rows:[]};\
document.querySelectorAll('#top tr[data-class]').forEach(function(tr){var cells=[];\
for(var i=0;i<tr.cells.length;i++){var td=tr.cells[i];var r=td.getBoundingClientRect();\
var q=document.createRange();q.selectNodeContents(td);var t=q.getBoundingClientRect();\
cells.push({l:r.left,r:r.right,w:r.width,h:r.height,sw:td.scrollWidth,cw:td.clientWidth,t:t.top-r.top});}\
out.rows.push({len:tr.cells[1].textContent.length,cells:cells});});\
var pre=document.createElement('pre');pre.id='probe';pre.textContent=JSON.stringify(out);\
document.body.appendChild(pre);})();</script>";

/// The page with [`PROBE`] at the end of its body and the page's own
/// Content-Security-Policy kept, with inline scripts allowed for the probe
/// only (the page itself has none); `extra_style` is added after the
/// page's style.
fn probed(page: &str, extra_style: &str) -> String {
    const POLICY: &str = "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"";
    assert!(page.contains(POLICY), "the page's policy changed");
    let probed = page
        .replacen(
            POLICY,
            "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'unsafe-inline'\"",
            1,
        )
        .replacen("</head>", &format!("{extra_style}</head>"), 1)
        .replacen("</body>", &format!("{PROBE}</body>"), 1);
    assert_eq!(probed.matches("<script>").count(), 1);
    probed
}

/// Opens `page` in Chromium 1280 px wide and returns what [`PROBE`] measured.
fn measure(bin: &Path, profile: &Path, page: &Path) -> serde_json::Value {
    let dom = String::from_utf8(headless(
        bin,
        profile,
        page,
        &["--dump-dom".into(), "--window-size=1280,1000".into()],
    ))
    .unwrap();
    let json = dom
        .split("<pre id=\"probe\">")
        .nth(1)
        .and_then(|p| p.split("</pre>").next())
        .unwrap_or_else(|| panic!("the probe did not run: {dom:.2000}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[tokio::test]
async fn long_ids_wrap_and_every_column_stays_on_screen() {
    let long = format!("ch_{}", "7".repeat(297));
    let huge = format!("ch_{}", "K".repeat(10 * 1024 - 3));
    // Larger than every other amount: first in the table.
    let f = Fixture::with_gaps(&[
        (huge.clone(), 900_000_000_000_000_000),
        (long.clone(), 800_000_000_000_000_000),
    ])
    .await;
    let run = f.recon(&["run", "--dry-run"]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let dir = folder(&run);
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains(&huge) && page.contains(&long));
    assert!(
        page.contains("td,.note{word-break:break-word;overflow-wrap:anywhere}"),
        "the wrapping rule"
    );

    let bin = match chromium() {
        Err(why) if std::env::var_os("RECON_REQUIRE_CHROMIUM").is_some_and(|v| v == "1") => {
            panic!("RECON_REQUIRE_CHROMIUM=1 but {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED the browser part of long_ids_wrap: {why}");
            f.db.drop_db().await;
            return;
        }
        Ok(bin) => bin,
    };
    let profile = f.dir.path().join("chromium-profile");

    // The page itself renders in Chromium, under its own policy.
    let dom = String::from_utf8(headless(
        &bin,
        &profile,
        &dir.join("report.html"),
        &["--dump-dom".into()],
    ))
    .unwrap();
    assert!(
        dom.contains("id=\"top\""),
        "chromium built no DOM: {dom:.2000}"
    );
    assert!(dom.contains(&huge) && dom.contains(&long));
    assert_eq!(cell(&dom, "data-count=\"gaps\""), "6");
    assert!(
        !dom.to_ascii_lowercase().contains("<script"),
        "a script in the DOM"
    );

    // Laid out 1280 px wide: nothing is wider than the window, and every
    // cell of every row, the long IDs' too, holds its content.
    let probe_page = f.dir.path().join("probe.html");
    std::fs::write(&probe_page, probed(&page, "")).unwrap();
    let m = measure(&bin, &profile, &probe_page);
    let vw = num(&m["vw"]);
    assert!(vw > 1000.0, "{m}");
    assert!(num(&m["sw"]) <= vw, "the page scrolls sideways: {m}");
    let rows = m["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "{m}");
    let mut short_height = f64::MAX;
    for row in rows {
        let cells = row["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 6, "{row}");
        for (i, c) in cells.iter().enumerate() {
            assert!(
                num(&c["l"]) >= 0.0 && num(&c["r"]) <= vw,
                "cell {i} off-screen: {row}"
            );
            assert!(num(&c["sw"]) <= num(&c["cw"]), "cell {i} overflows: {row}");
        }
        // The amount, state and first-seen columns keep their width, and
        // their text stands at the top of the row, beside the ID's start.
        for (i, min) in [(2, 150.0), (3, 60.0), (4, 120.0)] {
            assert!(num(&cells[i]["w"]) >= min, "cell {i} squeezed: {row}");
            assert!(num(&cells[i]["t"]) < 20.0, "cell {i} not at the top: {row}");
        }
        if num(&row["len"]) < 100.0 {
            short_height = short_height.min(num(&cells[1]["h"]));
        }
    }
    // The long IDs wrap onto lines of their own (the 10 KB one onto many).
    let height = |len: usize| {
        let row = rows
            .iter()
            .find(|r| num(&r["len"]) as usize == len)
            .unwrap_or_else(|| panic!("no row of an ID of {len} characters: {m}"));
        num(&row["cells"][1]["h"])
    };
    assert!(height(long.len()) > short_height * 1.5, "{m}");
    assert!(height(huge.len()) > short_height * 10.0, "{m}");
    eprintln!("layout at 1280 px: {m}");
    // To look at it: RECON_TEST_KEEP_SCREENSHOT=/tmp/long-ids.png
    if let Ok(keep) = std::env::var("RECON_TEST_KEEP_SCREENSHOT") {
        headless(
            &bin,
            &profile,
            &dir.join("report.html"),
            &[
                format!("--screenshot={keep}"),
                "--window-size=1280,2400".into(),
                "--hide-scrollbars".into(),
            ],
        );
    }

    // The probe sees the fault it guards against: without the wrapping
    // rules the same page pushes the amount past the window's edge.
    let unwrapped = f.dir.path().join("unwrapped.html");
    std::fs::write(
        &unwrapped,
        probed(
            &page,
            "<style>h1,td,.note{word-break:normal!important;overflow-wrap:normal!important}\
             table.wrap{table-layout:auto!important;width:auto!important}</style>",
        ),
    )
    .unwrap();
    let m = measure(&bin, &profile, &unwrapped);
    let vw = num(&m["vw"]);
    let first = &m["rows"][0]["cells"];
    assert!(
        num(&first[2]["l"]) > vw,
        "the amount stayed visible unwrapped: {m}"
    );
    assert!(num(&m["sw"]) > vw, "{m}");
    f.db.drop_db().await;
}
