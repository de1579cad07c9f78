//! The edges of the report files and report.html, through the binary:
//! IDs of 300 characters and of 10 KB, bidirectional controls and
//! zero-width characters in IDs and values (escaped visibly on the page,
//! exact in the CSVs), fields named like a report column, job names that
//! are not one folder name, and `recon report --out` links for job names
//! holding `#`, `%` and `?`.
//!
//! The layout of long IDs in a real browser is checked in
//! tests/report_html.rs (`long_ids_wrap_and_every_column_stays_on_screen`),
//! beside its Chromium helpers.

mod common;

use common::text;

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;

/// 2026-11-28T00:00:00-05:00 (New York midnight) in Unix seconds.
const DAY_START: i64 = 1_795_842_000;

/// The characters report.html must never carry as themselves: bidi
/// controls and zero-width characters.
const HIDDEN: [char; 17] = [
    '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}',
    '\u{2069}', '\u{200e}', '\u{200f}', '\u{061c}', '\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}',
    '\u{feff}',
];

/// `\u202e`, as the page shows a hidden character.
fn shown(c: char) -> String {
    format!("\\u{:04x}", u32::from(c))
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

struct Fixture {
    db: TestDb,
    dir: tempfile::TempDir,
    job: String,
}

impl Fixture {
    /// A job `job` whose source is a CSV file in `source_dir` (under the
    /// fixture's folder) holding `ids` (amounts 1.00, 2.00, … USD) and
    /// `ch_ok` (5.00), and whose target is an SQLite table holding
    /// `ch_ok` only: every ID of `ids` is a gap.
    async fn new(job: &str, source_dir: &str, ids: &[String]) -> Fixture {
        let db = TestDb::create(Dialect::Sqlite).await;
        db.exec("CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, amount_cents BIGINT, currency TEXT, created_at TIMESTAMP)")
            .await;
        let at = jiff::Timestamp::from_second(DAY_START + 3600)
            .unwrap()
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string();
        db.exec(&format!(
            "INSERT INTO payments (stripe_charge_id, amount_cents, currency, created_at) VALUES ('ch_ok', 500, 'USD', '{at}')"
        ))
        .await;
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join(source_dir);
        std::fs::create_dir_all(&source).unwrap();
        let mut csv = String::from("id,amount,currency,created\n");
        csv.push_str(&format!("ch_ok,500,usd,{}\n", DAY_START + 3600));
        for (i, id) in ids.iter().enumerate() {
            csv.push_str(&format!(
                "{},{},usd,{}\n",
                csv_cell(id),
                (i as i64 + 1) * 100,
                DAY_START + 3600 + i as i64 * 60
            ));
        }
        std::fs::write(source.join("charges.csv"), csv).unwrap();
        let f = Fixture {
            db,
            dir,
            job: job.to_string(),
        };
        f.write_config(
            source_dir,
            "amount = \"money\", currency = \"currency\", created = \"timestamp\"",
            "compare = [\"amount\", \"currency\"]",
        );
        f
    }

    /// A config without a database: the target is an SQLite file that
    /// must never be created (the config is refused first).
    fn without_db(job: &str, fields: &str, extra: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let config = config_text(
            job,
            &dir.path().join("reports"),
            &dir.path().join("state.db"),
            &dir.path().join("charges.csv"),
            &format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("target.db").display()
            ),
            fields,
            extra,
        );
        let path = dir.path().join("recon.toml");
        std::fs::write(&path, config).unwrap();
        (dir, path)
    }

    fn write_config(&self, source_dir: &str, fields: &str, extra: &str) {
        let text = config_text(
            &self.job,
            &self.dir.path().join("reports"),
            &self.dir.path().join("state.db"),
            &self.dir.path().join(source_dir).join("charges.csv"),
            &self.db.url,
            fields,
            extra,
        );
        std::fs::write(self.config(), text).unwrap();
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("recon.toml")
    }

    fn recon(&self, args: &[&str]) -> Output {
        recon(&self.config(), args)
    }
}

fn config_text(
    job: &str,
    reports: &Path,
    state: &Path,
    source: &Path,
    url: &str,
    fields: &str,
    extra: &str,
) -> String {
    let key = toml_str(job);
    format!(
        r#"
[defaults]
timezone = "America/New_York"
reports = {reports}
state = {state}

[jobs.{key}]
fields = {{ {fields} }}
window = "2026-11-28"
{extra}

[jobs.{key}.source]
type = "file"
path = {source}
key = "id"

[jobs.{key}.target]
type = "sql"
url = {url}
table = "payments"
key = "stripe_charge_id"
columns = {{ amount = "amount_cents", created = "created_at" }}

[jobs.{key}.backfill]
mode = "insert"
max_records = 100
max_ratio = 1
"#,
        reports = toml_str(&reports.display().to_string()),
        state = toml_str(&format!("sqlite://{}?mode=rwc", state.display())),
        source = toml_str(&source.display().to_string()),
        url = toml_str(url),
    )
}

fn recon(config: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("recon")
        .unwrap()
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
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

/// Every file and folder under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The `external_id` column of a report CSV, in file order.
fn csv_ids(path: &Path) -> Vec<String> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let col = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "external_id")
        .unwrap();
    r.records().map(|x| x.unwrap()[col].to_string()).collect()
}

/// A value cut for a message (the 10 KB ID would fill the screen).
fn short(s: &str) -> String {
    s.chars().take(60).collect()
}

fn short_row(r: &[String]) -> Vec<String> {
    r.iter().map(|c| short(c)).collect()
}

/// The cells of the largest-discrepancies table, row by row.
fn top_rows(html: &str) -> Vec<Vec<String>> {
    let table = html
        .split("<table id=\"top\"")
        .nth(1)
        .expect("top table")
        .split("</table>")
        .next()
        .unwrap();
    table
        .split("<tr data-class=")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|c| {
                    let c = &c[c.find('>').unwrap() + 1..];
                    c[..c.find("</td>").unwrap()].to_string()
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn long_and_invisible_ids_are_escaped_on_the_page_and_exact_in_the_csvs() {
    let long = format!("ch_{}", "7".repeat(297));
    let huge = format!("ch_{}", "K".repeat(10 * 1024 - 3));
    let every: String = HIDDEN.iter().collect();
    let ids = vec![
        long.clone(),
        huge.clone(),
        "ch_\u{202e}fdp.exe".to_string(),
        "ch_\u{2066}iso\u{2069}_\u{2067}r\u{2068}f\u{2069}".to_string(),
        "ch_\u{202a}\u{202b}\u{202c}\u{202d}_embed".to_string(),
        "ch_zw\u{200b}\u{200c}\u{200d}\u{2060}\u{feff}x".to_string(),
        "ch_marks\u{200e}\u{200f}\u{061c}".to_string(),
        format!("ch_all_{every}_end"),
        "ch_esc\u{1b}[31mred".to_string(),
        "=1+2".to_string(),
    ];
    // The source file sits in a folder whose name holds an override: the
    // page shows the source's path.
    let f = Fixture::new("charges", "exp\u{202e}orts", &ids).await;
    let o = f.recon(&["run", "--dry-run"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let dir = folder(&o);

    // The CSVs keep every ID exactly; only the formula is neutralised, as
    // before, with a leading quote.
    let mut expected: Vec<String> = ids
        .iter()
        .map(|id| {
            if id == "=1+2" {
                "'=1+2".to_string()
            } else {
                id.clone()
            }
        })
        .collect();
    expected.sort();
    let mut gaps = csv_ids(&dir.join("gaps.csv"));
    gaps.sort();
    assert_eq!(gaps, expected);
    let raw = std::fs::read_to_string(dir.join("gaps.csv")).unwrap();
    for c in HIDDEN {
        assert!(raw.contains(c), "{c:?} missing from gaps.csv");
        assert!(!raw.contains(&shown(c)), "{c:?} escaped in gaps.csv");
    }
    assert!(raw.contains(&huge), "the 10 KB ID whole in gaps.csv");
    assert!(raw.contains("\r\n'=1+2,"), "{raw:.200}");
    let plan = std::fs::read_to_string(dir.join("plan.jsonl")).unwrap();
    assert!(
        plan.contains("ch_\u{202e}fdp.exe"),
        "plan.jsonl keeps IDs exactly"
    );

    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for c in HIDDEN {
        assert!(!html.contains(c), "{c:?} live in report.html");
    }
    assert!(!html.contains('\u{1b}'), "ESC live in report.html");
    let rows = top_rows(&html);
    assert_eq!(
        rows.len(),
        ids.len(),
        "{:?}",
        rows.iter().map(|r| short_row(r)).collect::<Vec<_>>()
    );
    let keys: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
    for want in [
        "ch_\\u202efdp.exe".to_string(),
        "ch_\\u2066iso\\u2069_\\u2067r\\u2068f\\u2069".to_string(),
        "ch_\\u202a\\u202b\\u202c\\u202d_embed".to_string(),
        "ch_zw\\u200b\\u200c\\u200d\\u2060\\ufeffx".to_string(),
        "ch_marks\\u200e\\u200f\\u061c".to_string(),
        format!("ch_all_{}_end", HIDDEN.map(shown).concat()),
        "ch_esc\\u001b[31mred".to_string(),
        "&#39;=1+2".to_string(),
        long.clone(),
        huge.clone(),
    ] {
        let short_keys: Vec<String> = keys.iter().map(|k| short(k)).collect();
        assert!(
            keys.contains(&want.as_str()),
            "{} not in {short_keys:?}",
            short(&want)
        );
    }
    // Every row keeps its amount, state and first sighting, the long ones too.
    for r in &rows {
        assert_eq!(r.len(), 6, "{:?}", short_row(r));
        assert!(r[2].ends_with(" USD"), "{:?}", short_row(r));
        assert_eq!(r[3], "new", "{:?}", short_row(r));
        assert!(r[4].starts_with("20"), "{:?}", short_row(r));
    }
    let row_of = |key: &str| rows.iter().find(|r| r[1] == key).unwrap();
    assert_eq!(row_of(&huge)[2], "2.00 USD");
    assert_eq!(row_of(&long)[2], "1.00 USD");
    // The source's path, escaped.
    assert!(html.contains("exp\\u202eorts"), "{html:.3000}");
    // Long values wrap: a rule on the table cells, and the table of the
    // largest discrepancies lays its columns out by their headers, so the
    // ID column takes what is left (the browser check is in report_html.rs).
    let style = html
        .split("<style>")
        .nth(1)
        .unwrap()
        .split("</style>")
        .next()
        .unwrap();
    assert!(
        style.contains("h1,td,.note{word-break:break-word;overflow-wrap:anywhere}"),
        "{style}"
    );
    assert!(
        style.contains("table.wrap{table-layout:fixed;width:100%}"),
        "{style}"
    );
    assert!(
        html.contains("<table id=\"top\" class=\"wrap\">"),
        "{html:.3000}"
    );
    for class in ["w-amount", "w-state", "w-first"] {
        assert!(style.contains(&format!(".{class}{{width:")), "{style}");
        assert!(
            html.contains(&format!("class=\"n {class}\""))
                || html.contains(&format!("class=\"{class}\"")),
            "{class}"
        );
    }
    // Still inert: the policy stands, nothing runs or loads.
    assert!(
        html.contains("content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"")
    );
    for loads in [" src=", "<link", "<script", "@import", "url("] {
        assert!(!html.contains(loads), "`{loads}` in the page");
    }

    // `recon report` writes the same page again from the folder.
    std::fs::remove_file(dir.join("report.html")).unwrap();
    let o = f.recon(&["report"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let again = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(top_rows(&again), rows);
    f.db.drop_db().await;
}

/// Nothing was made: no reports folder, no state store, no target
/// database (the SQLite URLs have `mode=rwc`, so opening one creates it).
fn assert_untouched(dir: &Path) {
    let made = tree(dir);
    assert_eq!(made, ["recon.toml"], "files made by a refused config");
}

#[test]
fn fields_named_like_a_report_column_are_refused_before_anything_is_opened() {
    // Each reserved name, where a job can name a field; in any case.
    let base = "amount = \"money\", currency = \"currency\", created = \"timestamp\"";
    let cases: Vec<(String, String, &str, &str)> = vec![
        (
            format!("{base}, state = \"text\""),
            "compare = [\"amount\", \"currency\"]".into(),
            "state",
            "fields",
        ),
        (
            base.into(),
            "compare = [\"amount\", \"first_seen\"]".into(),
            "first_seen",
            "compare",
        ),
        (
            format!("{base}, external_id = \"text\""),
            "compare = [\"amount\", \"external_id\"]".into(),
            "external_id",
            "fields",
        ),
        (
            format!("{base}, State = \"text\""),
            String::new(),
            "State",
            "fields",
        ),
        (
            "amount = \"money\", first_seen = \"timestamp\"".into(),
            "time_field = \"first_seen\"".into(),
            "first_seen",
            "fields",
        ),
    ];
    for (fields, extra, field, setting) in &cases {
        let (dir, config) = Fixture::without_db("charges", fields, extra);
        for args in [&["run"][..], &["run", "--dry-run"], &["report"], &["runs"]] {
            let o = recon(&config, args);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?} {field}: {t}");
            let stderr = String::from_utf8_lossy(&o.stderr);
            let line = stderr
                .lines()
                .find(|l| l.contains("has the name of a column"))
                .unwrap_or_else(|| panic!("{args:?} {field}: {t}"));
            for want in [
                "job `charges`".to_string(),
                format!("field `{field}` (in {setting})"),
                "(external_id, first_seen, state: gaps.csv, orphans.csv and pending.csv would hold two"
                    .to_string(),
                format!(
                    "rename the field, e.g. `{}_value`",
                    field.to_ascii_lowercase()
                ),
                format!(
                    "source.columns = {{ {}_value = \"{field}\" }}",
                    field.to_ascii_lowercase()
                ),
            ] {
                assert!(line.contains(&want), "{args:?}: `{want}` not in {line}");
            }
            assert_untouched(dir.path());
        }
    }

    // With a money field, a field named `currency` takes the place of the
    // currency column the reports add: it must hold the code, and no other
    // spelling of it is a second currency column.
    for (fields, compare, want) in [
        (
            "amount = \"money\", currency = \"integer\", created = \"timestamp\"",
            "",
            "field `currency` is declared as `integer`, but it takes the place of the `currency` column \
             the reports add for the money field `amount`, so the reports would lose the money's currency code; \
             declare it `currency = \"currency\"`, or rename the field, e.g. `currency_integer`",
        ),
        (
            "amount = \"money\", created = \"timestamp\", Currency = \"currency\"",
            "",
            "field `Currency` would be a second currency column beside the `currency` column the reports add \
             for the money field `amount`; name it `currency` (it then takes that column's place), or rename it, \
             e.g. `currency_value`",
        ),
        (
            "amount = \"money\", created = \"timestamp\"",
            "compare = [\"amount\", \"CURRENCY\"]",
            "field `CURRENCY` would be a second currency column",
        ),
    ] {
        let (dir, config) = Fixture::without_db("charges", fields, compare);
        let o = recon(&config, &["run"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("job `charges`: "), "{}", text(&o));
        assert!(stderr.contains(want), "{}", text(&o));
        assert_untouched(dir.path());
    }

    // Renamed and mapped as the message says, the job runs; its gaps.csv
    // has the reserved columns once each, and the field under its name.
    let f = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(Fixture::new("charges", "exports", &["ch_1".to_string()]));
    let csv = f.dir.path().join("exports/charges.csv");
    let body = std::fs::read_to_string(&csv).unwrap();
    let mut lines = body.lines();
    let mut with_state = format!("{},state\n", lines.next().unwrap());
    for l in lines {
        with_state.push_str(&format!("{l},settled\n"));
    }
    std::fs::write(&csv, with_state).unwrap();
    f.write_config(
        "exports",
        "amount = \"money\", currency = \"currency\", created = \"timestamp\", state_value = \"text\"",
        "compare = [\"amount\", \"currency\"]",
    );
    let text_cfg = std::fs::read_to_string(f.config()).unwrap();
    let text_cfg = text_cfg.replacen(
        "key = \"id\"",
        "key = \"id\"\ncolumns = { state_value = \"state\" }",
        1,
    );
    let text_cfg = text_cfg.replacen(
        "created = \"created_at\" }",
        "created = \"created_at\", state_value = \"state\" }",
        1,
    );
    std::fs::write(f.config(), text_cfg).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(f.db.exec("ALTER TABLE payments ADD COLUMN state TEXT"));
    let o = f.recon(&["run", "--dry-run"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let mut r = csv::Reader::from_path(folder(&o).join("gaps.csv")).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header,
        [
            "external_id",
            "amount",
            "currency",
            "created",
            "state_value",
            "first_seen",
            "state"
        ]
    );
    let row = r.records().next().unwrap().unwrap();
    assert_eq!((&row[0], &row[4], &row[6]), ("ch_1", "settled", "new"));
    rt.block_on(f.db.drop_db());
}

#[test]
fn job_names_that_are_not_one_folder_name_are_refused() {
    let fields = "amount = \"money\", currency = \"currency\", created = \"timestamp\"";
    let cases: [(&str, &str, &str); 10] = [
        ("../../x", "job `../../x`", "may not contain `/`"),
        ("a/b", "job `a/b`", "may not contain `/`"),
        ("/abs", "job `/abs`", "may not contain `/`"),
        ("a\\b", "job `a\\b`", "may not contain `\\`"),
        ("..\\..\\x", "job `..\\..\\x`", "may not contain `\\`"),
        ("..", "job `..`", "the reports folder itself or its parent"),
        (".", "job `.`", "the reports folder itself or its parent"),
        ("", "a job has an empty name ([jobs.\"\"])", "name it"),
        (
            "a\u{7}b",
            "job `a\\u{7}b`",
            "may not contain a control character (\\u{7} at character 2)",
        ),
        (
            "line\nbreak",
            "job `line\\u{a}break`",
            "may not contain a control character (\\u{a} at character 5)",
        ),
    ];
    for (name, who, why) in cases {
        let (dir, config) = Fixture::without_db(name, fields, "");
        let mut commands: Vec<Vec<&str>> = vec![
            vec!["run"],
            vec!["run", "--dry-run"],
            vec!["report"],
            vec!["runs"],
            vec!["history", "ch_1"],
            vec!["check"],
        ];
        if !name.is_empty() {
            commands.push(vec!["run", "--job", name]);
        }
        for args in &commands {
            let o = recon(&config, args);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(2), "{name:?} {args:?}: {t}");
            // On stderr; `recon check` prints its failed line on stdout.
            let said = if args[0] == "check" {
                String::from_utf8_lossy(&o.stdout)
            } else {
                String::from_utf8_lossy(&o.stderr)
            };
            assert!(said.contains(who), "{name:?} {args:?}: {t}");
            assert!(said.contains(why), "{name:?} {args:?}: {t}");
            assert!(
                said.contains("a job name is one folder name under the reports folder"),
                "{name:?} {args:?}: {t}"
            );
            assert!(
                said.contains("rename the job") || said.contains("name it"),
                "{t}"
            );
            // Nothing written, outside the reports folder or in it.
            assert_untouched(dir.path());
            assert!(
                !dir.path().parent().unwrap().join("x").exists() && !dir.path().join("x").exists(),
                "{name:?}"
            );
        }
    }
    // With a source and a target that work, `../escaped` would have had
    // its reports written beside the reports folder: refused, nothing made.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let f = rt.block_on(Fixture::new("../escaped", "exports", &["ch_1".to_string()]));
    for args in [&["run"][..], &["run", "--dry-run"]] {
        let o = f.recon(args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("job `../escaped`"),
            "{}",
            text(&o)
        );
        assert_eq!(
            tree(f.dir.path()),
            ["exports", "exports/charges.csv", "recon.toml"],
            "{}",
            text(&o)
        );
    }
    rt.block_on(f.db.drop_db());

    // The suggested names.
    let (_dir, config) = Fixture::without_db("../../x", fields, "");
    let o = recon(&config, &["run"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("rename the job, e.g. [jobs.x]"),
        "{}",
        text(&o)
    );
    let (_dir, config) = Fixture::without_db("a/b", fields, "");
    let o = recon(&config, &["run"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("rename the job, e.g. [jobs.a_b]"),
        "{}",
        text(&o)
    );
}

/// Decodes `%XX` in a URL path.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The `href` values of a page (attribute-escaped as written).
fn hrefs(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .map(|h| h[..h.find('"').unwrap()].replace("&amp;", "&"))
        .collect()
}

#[tokio::test]
async fn report_links_work_for_job_names_with_hash_percent_and_question_mark() {
    // A folder name a URL would otherwise cut at `#` or `?`, or decode at `%`.
    let job = "eu#2 50%25?x=1&y";
    let f = Fixture::new(job, "exports", &["ch_1".to_string()]).await;
    let o = f.recon(&["run", "--dry-run"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let run = folder(&o);
    assert_eq!(
        run.parent().unwrap(),
        f.dir.path().join("reports").join(job),
        "the job's folder is named after it, whole"
    );
    let run_name = run.file_name().unwrap().to_str().unwrap().to_string();
    assert!(run_name.starts_with(job), "{run_name}");

    // The page in the run's folder links to its files by name.
    let own = std::fs::read_to_string(run.join("report.html")).unwrap();
    let links = hrefs(&own);
    assert!(links.contains(&"gaps.csv".to_string()), "{links:?}");
    for l in &links {
        assert!(run.join(percent_decode(l)).is_file(), "{l}");
    }

    // --out elsewhere: every link is a relative URL path whose segments
    // are percent-encoded, and each leads to the run's file.
    let out = f.dir.path().join("mail");
    let o = f.recon(&["report", "--job", job, "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let links = hrefs(&page);
    let files: Vec<String> = tree(&run)
        .into_iter()
        .filter(|n| n.ends_with(".csv") || n.ends_with(".jsonl") || n == "summary.json")
        .collect();
    assert_eq!(links.len(), files.len(), "{links:?} {files:?}");
    let encoded = "eu%232%2050%2525%3Fx%3D1%26y";
    for name in &files {
        let want = format!("../reports/{encoded}/{}/{name}", {
            let mut seg = String::new();
            for b in run_name.bytes() {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    seg.push(b as char);
                } else {
                    seg.push_str(&format!("%{b:02X}"));
                }
            }
            seg
        });
        assert!(links.contains(&want), "{want} not in {links:?}");
    }
    for l in &links {
        assert!(!l.contains(['#', '?', ' ']), "{l}");
        let target = out.join(percent_decode(l));
        assert!(target.is_file(), "{l} -> {}", target.display());
        assert_eq!(
            target.canonicalize().unwrap().parent().unwrap(),
            run.canonicalize().unwrap()
        );
    }
    f.db.drop_db().await;
}
