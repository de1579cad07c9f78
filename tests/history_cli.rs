//! `recon history ID` through the binary over several runs of a job (an
//! export file against a SQLite table): a gap appears in a dry run, is
//! backfilled, is found resolved, then comes back; an orphan stays open
//! throughout; an unknown ID has no story.

mod common;

use common::text;

use std::path::PathBuf;
use std::process::Output;

use assert_cmd::Command;
use recon_sql::testing::TestDb;
use recon_sql::Dialect;
use serde_json::Value;

/// 2026-11-28T00:00:00-05:00 (New York midnight) in Unix seconds.
const DAY_START: i64 = 1_795_842_000;

struct Fixture {
    db: TestDb,
    dir: tempfile::TempDir,
}

impl Fixture {
    /// Source ch_1..ch_4; the target holds ch_1, ch_2 and the orphan ch_o1.
    async fn new() -> Fixture {
        let db = TestDb::create(Dialect::Sqlite).await;
        db.exec("CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, amount_cents BIGINT, currency TEXT, created_at TIMESTAMP)")
            .await;
        let at = |i: i64| {
            jiff::Timestamp::from_second(DAY_START + 3600 + i * 60)
                .unwrap()
                .strftime("%Y-%m-%d %H:%M:%S")
                .to_string()
        };
        db.exec(&format!(
            "INSERT INTO payments VALUES ('ch_1', 1000, 'USD', '{}'), ('ch_2', 2000, 'USD', '{}'), ('ch_o1', 777, 'USD', '{}')",
            at(1),
            at(2),
            at(9)
        ))
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("id,amount,currency,created\n");
        for i in 1..=4 {
            csv.push_str(&format!(
                "ch_{i},{},usd,{}\n",
                i * 1000,
                DAY_START + 3600 + i * 60
            ));
        }
        std::fs::write(dir.path().join("charges.csv"), csv).unwrap();
        common::csv_insert_job(dir.path(), &db.url);
        Fixture { db, dir }
    }

    fn recon(&self, args: &[&str]) -> Output {
        Command::cargo_bin("recon")
            .unwrap()
            .args(args)
            .arg("--config")
            .arg(self.dir.path().join("recon.toml"))
            .output()
            .unwrap()
    }

    /// Runs the job; returns the run's id (from its summary.json).
    fn run(&self, args: &[&str], expect: i32) -> String {
        let mut all = vec!["run"];
        all.extend(args);
        let o = self.recon(&all);
        assert_eq!(o.status.code(), Some(expect), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let folder = PathBuf::from(
            out.lines()
                .find_map(|l| l.strip_prefix("reports: "))
                .unwrap()
                .trim(),
        );
        let summary: Value =
            serde_json::from_slice(&std::fs::read(folder.join("summary.json")).unwrap()).unwrap();
        summary["run_id"].as_str().unwrap().to_string()
    }

    fn history(&self, id: &str) -> Value {
        let o = self.recon(&["history", id, "--job", "charges", "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
    }
}

/// (run id, classes, backfill statuses) of each run in a story.
fn timeline(story: &Value) -> Vec<(String, Vec<String>, Vec<String>)> {
    story["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let strings = |v: &Value, f: &dyn Fn(&Value) -> String| {
                v.as_array().unwrap().iter().map(f).collect::<Vec<_>>()
            };
            (
                r["run_id"].as_str().unwrap().to_string(),
                strings(&r["classes"], &|c| c.as_str().unwrap().to_string()),
                strings(&r["backfill"], &|b| {
                    format!(
                        "{} {} {}",
                        b["action"].as_str().unwrap(),
                        b["status"].as_str().unwrap(),
                        b["attempts"]
                    )
                }),
            )
        })
        .collect()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[tokio::test]
async fn an_ids_story_across_runs() {
    let f = Fixture::new().await;
    // 1: the gap appears (dry run: planned, nothing written).
    let r1 = f.run(&["--dry-run"], 1);
    // 2: backfilled.
    let r2 = f.run(&[], 1);
    // 3: found in the target: resolved.
    let r3 = f.run(&[], 1);
    // 4: someone deletes it from the target; it is a gap again.
    f.db.exec("DELETE FROM payments WHERE stripe_charge_id = 'ch_3'")
        .await;
    let r4 = f.run(&["--dry-run"], 1);

    let story = f.history("ch_3");
    assert_eq!(story["found"], true, "{story:#}");
    assert_eq!(story["first_seen"]["run_id"], r1.as_str(), "{story:#}");
    assert_eq!(story["first_seen"]["class"], "gap");
    assert_eq!(
        timeline(&story),
        [
            (r1.clone(), s(&["gap"]), s(&[])),
            (r2.clone(), s(&["gap"]), s(&["insert applied 1"])),
            (r3.clone(), s(&[]), s(&[])),
            (r4.clone(), s(&["gap"]), s(&[])),
        ],
        "{story:#}"
    );
    assert_eq!(story["runs"][0]["dry_run"], true);
    assert_eq!(story["runs"][1]["dry_run"], false);
    let resolved = story["resolved"].as_array().unwrap();
    assert_eq!(resolved.len(), 1, "{story:#}");
    assert_eq!(resolved[0]["class"], "gap");
    assert_eq!(resolved[0]["run_id"], r3.as_str());
    let open = story["open"].as_array().unwrap();
    assert_eq!(open.len(), 1, "{story:#}");
    assert_eq!(open[0]["class"], "gap");

    // The orphan was open in every run, never written.
    let orphan = f.history("ch_o1");
    assert_eq!(
        timeline(&orphan),
        [&r1, &r2, &r3, &r4].map(|r| (r.clone(), s(&["orphan"]), s(&[]))),
        "{orphan:#}"
    );
    assert_eq!(orphan["resolved"].as_array().unwrap().len(), 0);

    // A matched ID, and one never seen: no story, still exit 0.
    for id in ["ch_1", "ch_nope"] {
        let none = f.history(id);
        assert_eq!(none["found"], false, "{none:#}");
        assert_eq!(none["runs"].as_array().unwrap().len(), 0);
    }

    // The text form tells the same story.
    let o = f.recon(&["history", "ch_3", "--job", "charges"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    eprintln!("{out}");
    assert!(out.contains("first seen"), "{out}");
    assert!(out.contains(&format!("by run {r1}, as gap")), "{out}");
    assert!(out.contains("insert applied (1 attempt)"), "{out}");
    assert!(out.contains(&format!("(gap) by run {r3}")), "{out}");
    assert!(out.contains("open as gap since"), "{out}");
    for r in [&r1, &r2, &r3, &r4] {
        assert!(out.contains(r.as_str()), "{r} in {out}");
    }
    let o = f.recon(&["history", "ch_nope"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("never seen"));

    // An unknown job is a clear error, exit 2.
    let o = f.recon(&["history", "ch_3", "--job", "nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    f.db.drop_db().await;
}

/// A run killed once its history is committed, before its report folder
/// is: the next run starts from that history (a discrepancy the killed run
/// resolved is not resolved twice, one it saw persists), the killed run's
/// folder never appears, and `recon history` names the killed run as the
/// one that resolved it.
#[tokio::test]
async fn a_run_killed_after_its_history_commit() {
    let f = Fixture::new().await;
    let r1 = f.run(&["--dry-run"], 1);
    // ch_4 reaches the target: the next run resolves its gap.
    f.db.exec("INSERT INTO payments VALUES ('ch_4', 4000, 'USD', '2026-11-28 06:04:00')")
        .await;
    let killed_out = f.dir.path().join("killed");
    let o = Command::cargo_bin("recon")
        .unwrap()
        .args(["run", "--dry-run", "--out"])
        .arg(&killed_out)
        .arg("--config")
        .arg(f.dir.path().join("recon.toml"))
        .env("RECON_FAULT_ABORT_AFTER_HISTORY", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "killed by SIGABRT: {}", text(&o));
    assert!(!killed_out.exists(), "a killed run's folder never appears");

    let out = f.dir.path().join("after");
    let r3 = f.run(&["--dry-run", "--out", out.to_str().unwrap()], 1);
    let csv = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    let resolved = csv("resolved.csv");
    assert_eq!(
        resolved.lines().count(),
        1,
        "resolved once, by the killed run: {resolved}"
    );
    let gaps = csv("gaps.csv");
    let ch3: Vec<&str> = gaps.lines().filter(|l| l.starts_with("ch_3,")).collect();
    assert_eq!(ch3.len(), 1, "{gaps}");
    assert!(ch3[0].ends_with(",persisting"), "{gaps}");
    assert!(!gaps.contains("ch_4"), "{gaps}");

    let story = f.history("ch_4");
    let resolved = story["resolved"].as_array().unwrap();
    assert_eq!(resolved.len(), 1, "{story:#}");
    let killed = resolved[0]["run_id"].as_str().unwrap().to_string();
    assert!(killed != r1 && killed != r3, "{story:#}");
    let runs = story["runs"].as_array().unwrap();
    let run = |id: &str| runs.iter().find(|r| r["run_id"] == id).cloned();
    assert_eq!(run(&killed).unwrap()["status"], "crashed", "{story:#}");
    // ch_3 was seen by all three runs, the killed one included.
    let ch3 = f.history("ch_3");
    let seen: Vec<&str> = ch3["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["classes"].as_array().unwrap().is_empty())
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(seen, [r1.as_str(), killed.as_str(), r3.as_str()], "{ch3:#}");
    f.db.drop_db().await;
}

/// Each row of gaps.csv and orphans.csv carries its own ID's history when
/// new and persisting discrepancies interleave in key order (the reports
/// take the first sightings in list order, as the run found them).
#[tokio::test]
async fn new_and_persisting_rows_interleaved() {
    let f = Fixture::new().await;
    let path = f.dir.path().join("charges.csv");
    // A mismatch open from the first run, new ones either side of it in
    // the second (mismatches.csv takes its first sightings in list order
    // too).
    let mismatch = |id: &str, minute: i64| {
        let at = DAY_START + 3600 + minute * 60 + 45;
        let row = format!("{id},100,usd,{at}\n");
        let created = jiff::Timestamp::from_second(at)
            .unwrap()
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string();
        let insert = format!("INSERT INTO payments VALUES ('{id}', 200, 'USD', '{created}')");
        (row, insert)
    };
    let (row, insert) = mismatch("ch_m2", 5);
    std::fs::write(&path, std::fs::read_to_string(&path).unwrap() + &row).unwrap();
    f.db.exec(&insert).await;
    f.run(&["--dry-run"], 1);
    for (id, minute) in [("ch_m1", 6), ("ch_m3", 7)] {
        let (row, insert) = mismatch(id, minute);
        std::fs::write(&path, std::fs::read_to_string(&path).unwrap() + &row).unwrap();
        f.db.exec(&insert).await;
    }
    // New gaps after each open one, a new orphan before the open one.
    let mut csv = std::fs::read_to_string(&path).unwrap();
    for (id, minute) in [("ch_35", 3), ("ch_45", 4)] {
        csv.push_str(&format!(
            "{id},3500,usd,{}\n",
            DAY_START + 3600 + minute * 60 + 30
        ));
    }
    std::fs::write(&path, csv).unwrap();
    f.db.exec("INSERT INTO payments VALUES ('ch_o0', 5, 'USD', '2026-11-28 06:00:30')")
        .await;
    let out = f.dir.path().join("second");
    f.run(&["--dry-run", "--out", out.to_str().unwrap()], 1);
    let states = |name: &str| -> Vec<(String, String)> {
        let mut r = csv::Reader::from_path(out.join(name)).unwrap();
        let h = r.headers().unwrap().clone();
        let col = |n: &str| h.iter().position(|c| c == n).unwrap();
        let (id, state) = (col("external_id"), col("state"));
        r.records()
            .map(|x| {
                let x = x.unwrap();
                (x[id].to_string(), x[state].to_string())
            })
            .collect()
    };
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        states("gaps.csv"),
        pairs(&[
            ("ch_3", "persisting"),
            ("ch_35", "new"),
            ("ch_4", "persisting"),
            ("ch_45", "new")
        ])
    );
    assert_eq!(
        states("orphans.csv"),
        pairs(&[("ch_o0", "new"), ("ch_o1", "persisting")])
    );
    assert_eq!(
        states("mismatches.csv"),
        pairs(&[("ch_m1", "new"), ("ch_m2", "persisting"), ("ch_m3", "new")])
    );
    f.db.drop_db().await;
}
