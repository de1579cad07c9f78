//! Progress on a terminal: none at all when stderr is not a terminal (cron,
//! pipes), only the final summary; a line of counts on a terminal (a
//! pseudo-terminal made by util-linux `script`).

mod common;

use common::text;

use std::path::Path;

/// Two exports of `rows` charges; every tenth missing from the target.
fn exports(dir: &Path, rows: usize) {
    let mut source = String::with_capacity(rows * 40);
    let mut target = String::with_capacity(rows * 40);
    source.push_str("id,amount,currency,created\n");
    target.push_str("id,amount,currency,created\n");
    for i in 0..rows {
        let line = format!(
            "ch_{i:08},{},usd,{}\n",
            100 + i % 1000,
            1_795_842_000 + i % 86_000
        );
        source.push_str(&line);
        if i % 10 != 0 {
            target.push_str(&line);
        }
    }
    std::fs::write(dir.join("source.csv"), source).unwrap();
    std::fs::write(dir.join("target.csv"), target).unwrap();
}

fn diff_args(dir: &Path, out: &str) -> Vec<String> {
    [
        "diff",
        dir.join("source.csv").to_str().unwrap(),
        dir.join("target.csv").to_str().unwrap(),
        "--key",
        "id",
        "--compare",
        "amount,currency",
        "--out",
        dir.join(out).to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

/// What a progress line is made of.
fn has_progress(s: &str) -> bool {
    s.contains('\r') || s.contains("\x1b[") || s.contains(" rec ") || s.contains("ETA")
}

#[test]
fn without_a_terminal_only_the_summary_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    exports(dir.path(), 20_000);
    let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
        .args(diff_args(dir.path(), "diff"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.is_empty(), "nothing on stderr: {stderr:?}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("gaps        2000"), "{stdout}");
    assert!(!has_progress(&stdout), "{stdout:?}");

    // `recon run` the same way.
    std::fs::write(
        dir.path().join("recon.toml"),
        format!(
            r#"
[defaults]
state = "sqlite://{state}?mode=rwc"
[jobs.files]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount", "currency"]
window = "2026-11-28"
{source}{target}[jobs.files.backfill]
mode = "off"
"#,
            state = dir.path().join("state.db").display(),
            source = common::file_side("files", "source", &dir.path().join("source.csv")),
            target = common::file_side("files", "target", &dir.path().join("target.csv")),
        ),
    )
    .unwrap();
    let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
        .args([
            "run",
            "--config",
            dir.path().join("recon.toml").to_str().unwrap(),
        ])
        .args(["--out", dir.path().join("run").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    assert!(
        !has_progress(&String::from_utf8_lossy(&o.stdout)),
        "{}",
        text(&o)
    );
}

#[test]
fn on_a_terminal_a_progress_line_is_drawn_and_cleared_before_the_summary() {
    let script = std::process::Command::new("script")
        .arg("--version")
        .output();
    if !script.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: util-linux `script` (to make a pseudo-terminal) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 400,000 records a side: 49 batches of 8,192, each followed by a
    // 25-ms pause (the test hook), so each side is read for over a second
    // however fast the machine: the display draws (every 0.1 s) and
    // shows a rate (after 0.5 s of reading).
    exports(dir.path(), 400_000);
    let bin = assert_cmd::cargo::cargo_bin("recon");
    let command = std::iter::once(bin.display().to_string())
        .chain(diff_args(dir.path(), "diff"))
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let o = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("COLUMNS", "200")
        .env("RECON_FAULT_READ_DELAY_MS", "25")
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&o.stdout);
    assert!(all.contains("gaps        40000"), "{}", text(&o));
    assert!(
        // indicatif (re)draws the line after "\r" and a clear-line sequence.
        all.contains("\r\x1b[2Ksource ") && all.contains(" rec ") && all.contains("% "),
        "a progress line was drawn: {all:?}"
    );
    assert!(all.contains("/s"), "with a rate: {all:?}");
    // The summary starts on a clean line: the progress line was cleared.
    let summary_at = all.find("source 400000 records").expect("summary");
    assert!(
        all[..summary_at].ends_with("\r\x1b[2K"),
        "{:?}",
        &all[summary_at.saturating_sub(80)..summary_at]
    );
}
