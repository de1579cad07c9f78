//! `recon apply --plan` trusts only what it can prove, report folders are
//! replaced whole, and `recon runs` tells a killed run from a live one; end
//! to end through the binary, with an export file as the source of truth
//! and a SQLite table as the target.

mod common;

use common::text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use recon::state::prelude::*;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;

/// 2026-11-28T00:00:00-05:00 (New York midnight) in Unix seconds.
const DAY_START: i64 = 1_795_842_000;
/// 2099-01-01T12:00:00-05:00.
const FUTURE: i64 = 4_070_970_000;

struct Fixture {
    db: TestDb,
    dir: tempfile::TempDir,
}

/// Source: 40 charges on 2026-11-28 and one in 2099.
fn source_rows() -> Vec<(String, i64, &'static str, i64)> {
    let mut rows: Vec<_> = (0..40)
        .map(|i| {
            (
                format!("ch_{i:04}"),
                1000 + i * 25,
                ["usd", "eur", "jpy", "kwd"][(i % 4) as usize],
                DAY_START + 3600 + i * 1200,
            )
        })
        .collect();
    rows.push(("ch_future".into(), 500, "usd", FUTURE));
    rows
}

/// The gaps of the 2026-11-28 window.
const GAPS: [&str; 3] = ["ch_0003", "ch_0010", "ch_0020"];

impl Fixture {
    async fn new() -> Fixture {
        let db = TestDb::create(Dialect::Sqlite).await;
        db.exec("CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, amount_cents BIGINT, currency TEXT, status TEXT, created_at TIMESTAMP)").await;
        let inserts: Vec<String> = source_rows()
            .into_iter()
            .filter(|(id, ..)| !GAPS.contains(&id.as_str()) && id != "ch_future")
            .map(|(id, amount, cur, created)| {
                let t = jiff::Timestamp::from_second(created).unwrap();
                format!(
                    "('{id}', {amount}, '{}', 'succeeded', '{}')",
                    cur.to_uppercase(),
                    t.strftime("%Y-%m-%d %H:%M:%S")
                )
            })
            .collect();
        db.exec(&format!(
            "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) VALUES {}",
            inserts.join(", ")
        ))
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("id,amount,currency,status,created\n");
        for (id, amount, cur, created) in source_rows() {
            csv.push_str(&format!("{id},{amount},{cur},succeeded,{created}\n"));
        }
        std::fs::write(dir.path().join("charges.csv"), csv).unwrap();
        let f = Fixture { db, dir };
        f.write_config("insert", "charges.csv");
        f
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("recon.toml")
    }

    fn write_config(&self, mode: &str, source: &str) {
        let text = format!(
            r#"
{defaults}
[jobs.charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "2026-11-28"

{sides}write_batch = 2

[jobs.charges.backfill]
mode = "{mode}"
max_records = 100
max_ratio = 0.5
"#,
            defaults = common::defaults_in(self.dir.path(), "America/New_York"),
            sides = common::file_to_sql(
                &self.dir.path().join(source),
                &self.db.url,
                "stripe_charge_id"
            ),
        );
        std::fs::write(self.config_path(), text).unwrap();
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn recon(&self, command: &str, args: &[&str]) -> Output {
        Command::cargo_bin("recon")
            .unwrap()
            .arg(command)
            .arg("--config")
            .arg(self.config_path())
            .args(args)
            .output()
            .unwrap()
    }

    /// `recon run --out OUT ARGS…`.
    fn run(&self, out: &str, args: &[&str]) -> Output {
        let out = self.out(out);
        let mut all = vec!["--out", out.to_str().unwrap()];
        all.extend_from_slice(args);
        self.recon("run", &all)
    }

    /// `recon apply --plan PLAN --out OUT ARGS…`.
    fn apply(&self, plan: &Path, out: &Path, args: &[&str]) -> Output {
        let mut all = vec![
            "--plan",
            plan.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        self.recon("apply", &all)
    }

    /// A dry run into `out`; returns the plan's path.
    fn dry_run(&self, out: &str, args: &[&str]) -> PathBuf {
        let mut all = vec!["--dry-run"];
        all.extend_from_slice(args);
        let o = self.run(out, &all);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        self.out(out).join("plan.jsonl")
    }

    /// Every row of the target, sorted.
    async fn table(&self) -> Vec<String> {
        common::joined_rows(
            &self.db.url,
            "SELECT CAST(stripe_charge_id AS TEXT), CAST(amount_cents AS TEXT), CAST(currency AS TEXT), \
             CAST(status AS TEXT), CAST(created_at AS TEXT) FROM payments",
            5,
        )
        .await
    }

    async fn state(&self) -> recon::state::StateStore {
        recon::state::StateStore::open(&format!(
            "sqlite://{}",
            self.dir.path().join("state.db").display()
        ))
        .await
        .unwrap()
    }
}

/// Every file of a folder with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Hidden staging or backup folders left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial") || n.contains(".old-"))
        .collect()
}

/// The plan's lines as JSON.
fn plan_lines(plan: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(plan)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn write_lines(path: &Path, lines: &[serde_json::Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = String::new();
    for l in lines {
        text.push_str(&serde_json::to_string(l).unwrap());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn an_unaltered_plan_writes_exactly_the_planned_rows() {
    let f = Fixture::new().await;
    let before = f.table().await;
    let plan = f.dry_run("dry", &[]);
    assert_eq!(f.table().await, before, "a dry run writes nothing");
    let lines = plan_lines(&plan);
    let mut keys: Vec<&str> = lines
        .iter()
        .map(|l| l["external_id"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, GAPS);
    assert!(lines
        .iter()
        .all(|l| l["version"] == 1 && l["action"] == "insert"));
    // The store knows the plan by its digest.
    let state = f.state().await;
    let id = lines[0]["plan_id"].as_str().unwrap();
    let saved = state.saved_plan(id).await.unwrap().expect("plan recorded");
    assert_eq!(saved.sha256, recon::plan::file_sha256(&plan).unwrap());
    assert_eq!(saved.items, 3);
    assert_eq!(saved.job, "charges");

    let o = f.apply(&plan, &f.out("applied"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let after = f.table().await;
    let added: Vec<&String> = after.iter().filter(|r| !before.contains(r)).collect();
    assert_eq!(after.len(), before.len() + 3, "{added:?}");
    for (id, amount, ..) in source_rows()
        .into_iter()
        .filter(|(id, ..)| GAPS.contains(&id.as_str()))
    {
        assert!(
            added
                .iter()
                .any(|r| r.starts_with(&format!("{id}|{amount}|"))),
            "{id} with amount {amount} in {added:?}"
        );
    }
    let backfill = std::fs::read_to_string(f.out("applied").join("backfill.csv")).unwrap();
    assert_eq!(
        backfill.matches(",insert,created,").count(),
        3,
        "{backfill}"
    );
    f.db.drop_db().await;
}

#[tokio::test]
async fn every_untrusted_plan_is_refused_before_anything_is_written() {
    let f = Fixture::new().await;
    let plan = f.dry_run("dry", &[]);
    let good = plan_lines(&plan);
    let before = f.table().await;
    let edit = |change: &dyn Fn(&mut Vec<serde_json::Value>)| {
        let mut lines = good.clone();
        change(&mut lines);
        lines
    };
    // A gap's amount as (minor, currency) and its major text for `minor`.
    let money = |minor: i64, cur: &str| {
        recon_core::Money::from_minor(minor, recon_core::Currency::parse(cur).unwrap())
            .to_major_string()
    };
    let usd_line = good
        .iter()
        .position(|l| l["values"]["amount"]["currency"] == "USD")
        .expect("a USD gap");

    type Case = (
        &'static str,
        Vec<serde_json::Value>,
        Vec<&'static str>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "unknown",
            edit(&|l| {
                l.iter_mut()
                    .for_each(|x| x["plan_id"] = "charges-20990101T000000Z-deadbeef".into())
            }),
            vec![],
            vec!["is not known to the state store", "recon run --dry-run"],
        ),
        (
            "edited-consistently",
            edit(&|l| {
                l[usd_line]["values"]["amount"]["minor"] = 99_999.into();
                l[usd_line]["values"]["amount"]["amount"] = money(99_999, "usd").into();
            }),
            vec![],
            vec!["SHA-256", "changed after the dry run"],
        ),
        (
            "edited-minor",
            edit(&|l| l[usd_line]["values"]["amount"]["minor"] = 99_999.into()),
            vec![],
            vec!["disagrees with itself"],
        ),
        (
            "update-under-insert",
            edit(&|l| l[0]["action"] = "update".into()),
            vec![],
            vec!["backfill.mode = \"insert\"", "upsert"],
        ),
        (
            "empty-key",
            edit(&|l| l[1]["external_id"] = "".into()),
            vec![],
            vec!["external_id is empty"],
        ),
        (
            "padded-key",
            edit(&|l| l[1]["external_id"] = " ch_0010".into()),
            vec![],
            vec!["leading or trailing spaces"],
        ),
        (
            "duplicate",
            edit(&|l| l.push(l[0].clone())),
            vec![],
            vec!["planned a second time"],
        ),
        (
            "empty-values",
            edit(&|l| l[2]["values"] = serde_json::json!({})),
            vec![],
            vec!["lacks the field"],
        ),
        (
            "other-job",
            good.clone(),
            vec!["--job", "refunds"],
            vec!["belongs to job `charges`, not `refunds`"],
        ),
        (
            "max-records",
            good.clone(),
            vec!["--max-records", "2"],
            vec!["exceed backfill.max_records = 2 by 1", "--max-records 3"],
        ),
        (
            "max-ratio",
            good.clone(),
            vec!["--max-ratio", "0.01"],
            vec!["above backfill.max_ratio = 1.0%", "--max-ratio 0.075"],
        ),
    ];
    for (name, lines, args, needles) in cases {
        let path = f.out(&format!("cases/{name}/plan.jsonl"));
        write_lines(&path, &lines);
        let out = f.out(&format!("out-{name}"));
        let o = f.apply(&path, &out, &args);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        for n in needles {
            assert!(err.contains(n), "{name}: expected `{n}` in {err}");
        }
        assert_eq!(f.table().await, before, "{name} changed the target");
        assert!(!out.exists(), "{name} wrote reports");
    }

    // A job whose mode writes nothing applies nothing, even its own plan.
    f.write_config("off", "charges.csv");
    let o = f.apply(&plan, &f.out("out-off"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("backfill.mode = \"off\""),
        "{}",
        text(&o)
    );
    assert_eq!(f.table().await, before);
    f.write_config("insert", "charges.csv");

    // None of the refusals was recorded as a run that succeeded.
    let state = f.state().await;
    assert_eq!(state.last_success_end("charges").await.unwrap(), None);
    // The unaltered plan still applies afterwards.
    let o = f.apply(&plan, &f.out("applied"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(f.table().await.len(), before.len() + 3);
    f.db.drop_db().await;
}

#[tokio::test]
async fn a_plan_over_a_future_window_never_moves_since_last_success() {
    let f = Fixture::new().await;
    let before = f.table().await;
    let plan = f.dry_run("future", &["--window", "2099-01-01"]);
    let lines = plan_lines(&plan);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["external_id"], "ch_future");
    let o = f.apply(&plan, &f.out("applied"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("had not begun"), "{err}");
    assert!(err.contains("since-last-success"), "{err}");
    assert_eq!(f.table().await, before);
    let state = f.state().await;
    assert_eq!(state.last_success_end("charges").await.unwrap(), None);
    // A plan over a past window records its end as the last success.
    let plan = f.dry_run("day", &[]);
    let o = f.apply(&plan, &f.out("applied-day"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let end = state.last_success_end("charges").await.unwrap().unwrap();
    assert!(end <= jiff::Timestamp::now(), "{end}");
    assert_eq!(end.to_string(), "2026-11-29T05:00:00Z");
    f.db.drop_db().await;
}

#[tokio::test]
async fn report_folders_are_replaced_whole_and_kept_when_a_run_fails() {
    let f = Fixture::new().await;
    f.dry_run("rep", &[]);
    let rep = f.out("rep");
    std::fs::write(rep.join("notes.txt"), b"from an earlier run").unwrap();
    std::fs::write(rep.join("backfill.csv"), b"stale").unwrap();
    // A second dry run into the same folder: the old folder goes whole.
    f.dry_run("rep", &[]);
    let files: Vec<String> = snapshot(&rep).into_keys().collect();
    assert!(!files.contains(&"notes.txt".to_string()), "{files:?}");
    assert!(!files.contains(&"backfill.csv".to_string()), "{files:?}");
    for name in ["summary.json", "plan.jsonl", "gaps.csv", "orphans.csv"] {
        assert!(files.contains(&name.to_string()), "{name} in {files:?}");
    }
    assert_eq!(leftovers(f.dir.path()), Vec::<String>::new());

    // A run that fails (the source cannot be read) leaves it byte for byte.
    let before = snapshot(&rep);
    f.write_config("insert", "missing.csv");
    let o = f.run("rep", &["--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("missing.csv"),
        "{}",
        text(&o)
    );
    assert_eq!(snapshot(&rep), before);
    assert_eq!(leftovers(f.dir.path()), Vec::<String>::new());
    f.db.drop_db().await;
}

#[tokio::test]
async fn apply_never_deletes_the_plan_it_applies() {
    let f = Fixture::new().await;
    let plan = f.dry_run("dry", &[]);
    let before_dir = snapshot(&f.out("dry"));
    let before = f.table().await;
    let o = f.apply(&plan, &f.out("dry"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("holds the plan"), "{err}");
    assert!(err.contains("give another folder"), "{err}");
    assert_eq!(snapshot(&f.out("dry")), before_dir, "plan and reports kept");
    assert_eq!(f.table().await, before);
    // Its parent folder would delete it too.
    let o = f.apply(&plan, f.dir.path(), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(snapshot(&f.out("dry")), before_dir);
    assert_eq!(f.table().await, before);
    f.db.drop_db().await;
}

#[tokio::test]
async fn reports_that_cannot_be_written_stop_the_run_before_the_target_is_written() {
    let f = Fixture::new().await;
    let before = f.table().await;
    let file = f.out("a-file");
    std::fs::write(&file, b"not a folder").unwrap();
    // recon run, backfilling: refused before any write.
    let o = f.recon("run", &["--out", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is a file"),
        "{}",
        text(&o)
    );
    assert_eq!(f.table().await, before, "no rows inserted");
    // An unwritable place: below a regular file.
    let o = f.recon("run", &["--out", file.join("sub").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(f.table().await, before);
    // recon apply of a good plan, likewise.
    let plan = f.dry_run("dry", &[]);
    let o = f.apply(&plan, &file, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is a file"),
        "{}",
        text(&o)
    );
    assert_eq!(f.table().await, before, "no rows inserted");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a folder");
    f.db.drop_db().await;
}

#[tokio::test]
async fn a_killed_run_is_listed_as_crashed() {
    let f = Fixture::new().await;
    // The process aborts mid-backfill, as kill -9 would stop it: no
    // cleanup, the lock row and the `running` row stay behind.
    let o = Command::cargo_bin("recon")
        .unwrap()
        .args(["run", "--config", f.config_path().to_str().unwrap()])
        .args(["--out", f.out("killed").to_str().unwrap()])
        .env("RECON_FAULT_ABORT_AFTER_ITEMS", "2")
        .output()
        .unwrap();
    assert!(
        !matches!(o.status.code(), Some(0..=2)),
        "the process was killed: {}",
        text(&o)
    );
    let state = f.state().await;
    let runs = state.recent_runs(Some("charges"), 5).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, "running", "nothing recorded the crash yet");
    let o = f.recon("runs", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let listing = String::from_utf8_lossy(&o.stdout);
    let line = listing
        .lines()
        .find(|l| l.starts_with(&runs[0].id))
        .unwrap_or_else(|| panic!("{listing}"));
    assert!(line.contains(" crashed "), "{listing}");
    assert!(!line.contains(" running "), "{listing}");
    f.db.drop_db().await;
}
