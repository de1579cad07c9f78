//! Stripe emulator → QuickBooks Online emulator through the binary: Stripe
//! charges booked as invoices keyed by `DocNumber` in a multicurrency
//! company (USD, JPY and three-decimal KWD customers found by the charge's
//! email). A dry run, an apply of its plan, a rerun with nothing to write;
//! planted duplicate invoices reported with both Ids; a create whose answer
//! was lost (the resent batch gets the original through its requestid, no
//! second invoice); a crash mid-apply and a rerun (each charge exactly
//! once); the refresh token QuickBooks rotated saved in the state store and
//! used by the next run; a revoked one refused with exit 2 and the steps
//! to reconnect; and no token in any file, log line or message.

mod common;

use common::{recon_async as recon, summary, text};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use recon_quickbooks::emulator::{
    Emulator as Qbo, EmulatorConfig as QboConfig, Fault, Kind, TransportFault,
};
use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig as StripeConfig, ObjectKind};
use serde_json::{json, Value};

/// Customers of the company, one per currency, by billing email.
const CUSTOMERS: [(&str, &str); 3] = [
    ("usd", "ap@usd.test"),
    ("jpy", "ap@jpy.test"),
    ("kwd", "ap@kwd.test"),
];

fn currency_of(i: i64) -> &'static str {
    CUSTOMERS[(i % 3) as usize].0
}

/// Charge `i`: `ch_{i:05}`, amount by currency (JPY whole yen, KWD fils).
fn charge(i: i64, now: i64) -> (String, Value, i64, &'static str) {
    let id = format!("ch_{i:05}");
    let cur = currency_of(i);
    let amount = 1000 + i;
    let created = now - 30_000 + i * 10;
    let mut c = Stripe::charge(&id, amount, cur, "succeeded", created);
    c["billing_details"] = json!({"email": CUSTOMERS[(i % 3) as usize].1});
    (id, c, created, cur)
}

/// The invoice QuickBooks would hold for charge `i`.
fn invoice(i: i64, now: i64, qbo: &Qbo, customers: &HashMap<&str, String>) -> Value {
    let (id, _, created, cur) = charge(i, now);
    let amount = match cur {
        "jpy" => format!("{}", 1000 + i),
        "kwd" => format!("{}.{:03}", (1000 + i) / 1000, (1000 + i) % 1000),
        _ => format!("{}.{:02}", (1000 + i) / 100, (1000 + i) % 100),
    };
    let date = jiff::Timestamp::from_second(created).unwrap().to_string()[..10].to_string();
    let _ = qbo;
    serde_json::from_str(&format!(
        r#"{{"DocNumber": "{id}", "TxnDate": "{date}", "CustomerRef": {{"value": "{}"}},
            "CurrencyRef": {{"value": "{}"}},
            "Line": [{{"Amount": {amount}, "DetailType": "SalesItemLineDetail",
                       "SalesItemLineDetail": {{"ItemRef": {{"value": "1"}}}}}}]}}"#,
        customers[cur],
        cur.to_ascii_uppercase()
    ))
    .unwrap()
}

/// Invoices per DocNumber.
fn by_doc(qbo: &Qbo) -> HashMap<String, Vec<Value>> {
    let mut m: HashMap<String, Vec<Value>> = HashMap::new();
    for e in qbo.entities(Kind::Invoice) {
        m.entry(e["DocNumber"].as_str().unwrap().to_string())
            .or_default()
            .push(e);
    }
    m
}

/// Charges `0..n` booked exactly once each (but `ch_dup`, planted twice).
fn each_charge_once(qbo: &Qbo, n: i64) {
    let m = by_doc(qbo);
    for i in 0..n {
        let id = format!("ch_{i:05}");
        let copies = m.get(&id).map_or(0, Vec::len);
        let want = if id == DUP { 2 } else { 1 };
        assert_eq!(copies, want, "{id} booked {copies} times");
    }
}

/// The charge planted twice in QuickBooks (a retried webhook).
const DUP: &str = "ch_00004";

fn write_config(dir: &Path, stripe: &Stripe, qbo: &Qbo, extra_target: &str) -> PathBuf {
    let config = dir.join("recon.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[defaults]
state = "sqlite://{state}"
[jobs.sales]
fields = {{ amount = "money", currency = "currency", email = "text", created = "timestamp" }}
compare = ["amount", "currency"]
time_field = "created"
window = "last:24h"
{source}[jobs.sales.target]
type = "quickbooks"
base_url = "{qbo}"
token_url = "{qbo}/oauth2/v1/tokens/bearer"
realm_id = "${{QBO_REALM_ID}}"
client_id = "${{QBO_CLIENT_ID}}"
client_secret = "${{QBO_CLIENT_SECRET}}"
refresh_token = "${{QBO_REFRESH_TOKEN}}"
object = "Invoice"
external_id = "DocNumber"
time_field = "TxnDate"
fields = {{ email = "BillEmail.Address", created = "TxnDate" }}
customer = {{ match_field = "email" }}
item_ref = "1"
batch_size = 10
write_batch = 20
{extra_target}
[jobs.sales.backfill]
mode = "insert"
max_ratio = 1.0
"#,
            state = dir.join("state.db").display(),
            source = common::stripe_source("sales", &stripe.api_key, &stripe.base_url),
            qbo = qbo.base_url,
        ),
    )
    .unwrap();
    config
}

/// The app's credentials and the connection's first refresh token, as the
/// environment gives them to every run.
fn env(qbo: &Qbo) -> Vec<(String, String)> {
    vec![
        ("QBO_REALM_ID".into(), qbo.realm_id.clone()),
        ("QBO_CLIENT_ID".into(), qbo.client_id.clone()),
        ("QBO_CLIENT_SECRET".into(), qbo.client_secret.clone()),
        ("QBO_REFRESH_TOKEN".into(), qbo.refresh_token.clone()),
    ]
}

async fn run(config: &Path, out: &Path, extra: &[&str], env: Vec<(String, String)>) -> Output {
    let mut args = vec![
        "run".to_string(),
        "--config".into(),
        config.display().to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    recon(args, env).await
}

/// Every file under `dir`, as bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// No token QuickBooks issued, nor the client secret, in any file under
/// `dir` (reports, the state store) or in any output.
fn no_secret_anywhere(qbo: &Qbo, dir: &Path, outputs: &[&Output]) {
    let mut secrets = qbo.issued_tokens();
    secrets.push(qbo.client_secret.clone());
    let mut haystacks: Vec<(String, Vec<u8>)> = files(dir)
        .into_iter()
        .map(|(p, b)| (p.display().to_string(), b))
        .collect();
    for (i, o) in outputs.iter().enumerate() {
        haystacks.push((format!("output {i} stdout"), o.stdout.clone()));
        haystacks.push((format!("output {i} stderr"), o.stderr.clone()));
    }
    for s in &secrets {
        for (name, bytes) in &haystacks {
            let found = bytes.windows(s.len()).any(|w| w == s.as_bytes());
            assert!(!found, "a token or the client secret is in {name}");
        }
    }
}

/// A CSV report's rows, each by column name.
fn csv_rows(path: &Path) -> Vec<HashMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(str::to_string).collect();
    r.records()
        .map(|x| {
            header
                .iter()
                .cloned()
                .zip(x.unwrap().iter().map(str::to_string))
                .collect()
        })
        .collect()
}

/// The planted duplicate as every report of `out` shows it: both invoices
/// in duplicate_copies.csv with their QuickBooks `Id`, DocNumber, date and
/// amount (the lower `Id` kept, the other to review), and their JPY 1004
/// counted twice in summary.csv, summary.json and report.html.
fn duplicate_in_reports(qbo: &Qbo, out: &Path, dup_ids: &[String; 2]) {
    let rows = csv_rows(&out.join("duplicate_copies.csv"));
    let mut ids = dup_ids.clone();
    ids.sort_by_key(|id| id.parse::<u64>().unwrap());
    assert_eq!(rows.len(), 2, "{rows:?}");
    let invoices = by_doc(qbo);
    for (i, (row, id)) in rows.iter().zip(&ids).enumerate() {
        let invoice = invoices[DUP]
            .iter()
            .find(|e| e["Id"] == id.as_str())
            .unwrap();
        let date = invoice["TxnDate"].as_str().unwrap();
        let copy = (i + 1).to_string();
        assert_eq!(row["external_id"], DUP, "the DocNumber: {row:?}");
        assert_eq!(row["side"], "target", "{row:?}");
        assert_eq!(row["copy"], copy, "{row:?}");
        assert_eq!(&row["native_id"], id, "the QuickBooks Id: {row:?}");
        assert_eq!(row["amount"], "1004", "{row:?}");
        assert_eq!(row["currency"], "JPY", "{row:?}");
        assert!(row["created"].starts_with(date), "TxnDate {date}: {row:?}");
    }
    let jpy = csv_rows(&out.join("summary.csv"))
        .into_iter()
        .find(|r| r["currency"] == "JPY")
        .unwrap();
    assert_eq!(jpy["target_counted_twice"], "1004", "{jpy:?}");
    assert_eq!(jpy["source_counted_twice"], "0", "{jpy:?}");
    let s = summary(out);
    assert_eq!(
        s["counted_twice"],
        json!({
            "source": [],
            "target": [{"currency": "JPY", "records": 1, "total": "1004", "total_minor": "1004"}],
        }),
        "{s}"
    );
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains("data-counted-twice=\"target\">1004 JPY<"),
        "money counted twice on the page: {page}"
    );
    for id in &ids {
        assert!(
            page.contains(&format!("<td>{id}</td>")),
            "Id {id} on the page"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_charges_to_quickbooks_invoices() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let qbo = Qbo::start(QboConfig {
        multicurrency: true,
        ..QboConfig::default()
    })
    .await
    .unwrap();
    let customers: HashMap<&str, String> = CUSTOMERS
        .iter()
        .map(|(cur, email)| {
            let id = qbo.add_customer(email, email, Some(&cur.to_ascii_uppercase()));
            (*cur, id)
        })
        .collect();
    let now = jiff::Timestamp::now().as_second();
    // 60 charges; a third already booked, and ch_00004 booked twice.
    for i in 0..60i64 {
        let (_, c, _, _) = charge(i, now);
        stripe.insert(ObjectKind::Charge, c);
        if i % 3 == 1 {
            qbo.insert(Kind::Invoice, invoice(i, now, &qbo, &customers));
        }
    }
    let dup_ids = [
        qbo.entities(Kind::Invoice)
            .iter()
            .find(|e| e["DocNumber"] == DUP)
            .unwrap()["Id"]
            .as_str()
            .unwrap()
            .to_string(),
        qbo.insert(Kind::Invoice, invoice(4, now, &qbo, &customers)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &stripe, &qbo, "");
    let out = |name: &str| dir.path().join(name);
    let mut outputs = Vec::new();

    // `recon check`: the company, its currencies, its numbering preferences.
    let args = [
        "check",
        "--config",
        config.to_str().unwrap(),
        "--job",
        "sales",
    ];
    let o = recon(args.map(String::from).to_vec(), env(&qbo)).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    for want in [
        "Sandbox Company_US_1",
        "home currency USD",
        "multicurrency on",
        "WarnDuplicateDocNum=false",
        "no unique constraint on the external ID in QuickBooks: writes are insert-only",
    ] {
        assert!(shown.contains(want), "check shows {want}: {}", text(&o));
    }
    outputs.push(o);

    // Dry run: 40 gaps, the planted duplicate, nothing written.
    let dry = out("dry");
    let o = run(&config, &dry, &["--dry-run"], env(&qbo)).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&dry);
    assert_eq!(s["gaps"], 40, "{s}");
    assert_eq!(s["duplicates"], 1, "{s}");
    assert_eq!(
        qbo.entities(Kind::Invoice).len(),
        21,
        "a dry run writes nothing"
    );
    let dups = std::fs::read_to_string(dry.join("duplicates.csv")).unwrap();
    assert!(dups.contains(DUP) && dups.contains("target"), "{dups}");
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    for id in &dup_ids {
        assert!(
            log.contains(&format!("Id {id} ")),
            "the warning names Id {id}: {log}"
        );
    }
    assert!(
        log.contains("counted_more_than_once") && log.contains("1004 JPY"),
        "the money booked twice: {log}"
    );
    duplicate_in_reports(&qbo, &dry, &dup_ids);
    outputs.push(o);

    // Apply the reviewed plan; the first create batch's answer is lost
    // (the connection drops after the work): the policy resends it with
    // the same requestid and QuickBooks answers it from the first time.
    let requests = qbo.stats().transport.requests;
    qbo.set_batch_faults(vec![Fault {
        kind: TransportFault::DropAfterWork,
        after: 0,
        times: 1,
    }]);
    let applied = out("applied");
    let args = vec![
        "apply".to_string(),
        "--config".into(),
        config.display().to_string(),
        "--plan".into(),
        dry.join("plan.jsonl").display().to_string(),
        "--out".into(),
        applied.display().to_string(),
    ];
    let o = recon(args, env(&qbo)).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(qbo.stats().transport.requests > requests);
    assert!(qbo.stats().replays >= 1, "the lost answer was replayed");
    let s = summary(&applied);
    assert_eq!(s["backfilled"], 40, "{s}");
    each_charge_once(&qbo, 60);
    let docs = by_doc(&qbo);
    assert_eq!(docs["ch_00000"][0]["TotalAmt"].to_string(), "10.00");
    assert_eq!(docs["ch_00001"][0]["TotalAmt"].to_string(), "1001", "JPY");
    assert_eq!(docs["ch_00002"][0]["TotalAmt"].to_string(), "1.002", "KWD");
    assert_eq!(docs["ch_00002"][0]["CurrencyRef"]["value"], "KWD");
    assert_eq!(
        docs["ch_00002"][0]["CustomerRef"]["value"],
        json!(customers["kwd"])
    );
    outputs.push(o);

    // Rerun: nothing to write. The configured refresh token was rotated
    // away by the first run: this run works with the one it saved.
    assert!(!qbo.valid_refresh_tokens().contains(&qbo.refresh_token));
    let again = out("again");
    let o = run(&config, &again, &[], env(&qbo)).await;
    assert_eq!(
        o.status.code(),
        Some(1),
        "only the duplicate remains: {}",
        text(&o)
    );
    let s = summary(&again);
    assert_eq!(s["gaps"], 0, "{s}");
    assert_eq!(s["backfilled"], 0, "{s}");
    assert_eq!(s["duplicates"], 1, "{s}");
    assert_eq!(qbo.entities(Kind::Invoice).len(), 61);
    duplicate_in_reports(&qbo, &again, &dup_ids);
    outputs.push(o);

    // 60 new charges; the run crashes after its first write call of 20
    // items, before recording them; the next run writes the rest once.
    for i in 60..120i64 {
        let (_, c, _, _) = charge(i, now);
        stripe.insert(ObjectKind::Charge, c);
    }
    let crash = out("crash");
    let mut crash_env = env(&qbo);
    crash_env.push(("RECON_FAULT_ABORT_AFTER_ITEMS".into(), "20".into()));
    let o = run(&config, &crash, &[], crash_env).await;
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_ne!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        qbo.entities(Kind::Invoice).len(),
        81,
        "the first 20 reached QuickBooks"
    );
    outputs.push(o);
    let after = out("after");
    let o = run(&config, &after, &[], env(&qbo)).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&after);
    assert_eq!(s["gaps"], 40, "only the unwritten gaps: {s}");
    assert_eq!(s["backfilled"], 40, "{s}");
    each_charge_once(&qbo, 120);
    outputs.push(o);

    // Revoked: exit 2 with the steps to reconnect, nothing written.
    qbo.revoke_all();
    let revoked = out("revoked");
    let o = run(&config, &revoked, &[], env(&qbo)).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("invalid_grant") && err.contains("To reconnect"),
        "{err}"
    );
    outputs.push(o);

    let all: Vec<&Output> = outputs.iter().collect();
    no_secret_anywhere(&qbo, dir.path(), &all);
    stripe.shutdown().await;
    qbo.shutdown().await;
}

/// The README's example parses, its target is QuickBooks, and its settings
/// build (no request is sent before a run).
#[test]
fn the_example_config_is_a_quickbooks_job() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickbooks.toml");
    let file = recon::config::load(&path).unwrap();
    let job = &file.jobs["stripe_to_quickbooks"];
    let recon::config::EndpointConfig::Quickbooks(q) = &job.target else {
        panic!("{:?}", job.target)
    };
    assert_eq!(q.object, "Invoice");
    assert_eq!(q.external_id, "DocNumber");
    assert_eq!(q.item_ref.as_deref(), Some("1"));
    assert_eq!(q.time_field, "TxnDate");
    assert_eq!(q.batch_size, 10);
    let customer = q.customer.as_ref().unwrap();
    assert_eq!(customer.match_field.as_deref(), Some("email"));
}

/// QuickBooks as the source: the company's invoices (entered over the last
/// hours, `MetaData.CreateTime` in the company's -08:00 offset) against a
/// warehouse export. Gaps, a mismatch, and a duplicate in QuickBooks
/// itself, named with both Ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickbooks_invoices_as_the_source_against_a_warehouse_export() {
    let qbo = Qbo::start(QboConfig::default()).await.unwrap();
    qbo.add_customer("Acme", "ap@acme.test", None);
    let now = jiff::Timestamp::now();
    let pacific = jiff::tz::TimeZone::fixed(jiff::tz::offset(-8));
    let mut csv = String::from("id,amount,currency,created\n");
    let mut ids = Vec::new();
    for i in 0..10i64 {
        let at = now - jiff::SignedDuration::from_mins(30 + i * 7);
        let created = at
            .to_zoned_datetime(pacific.clone())
            .strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string();
        let doc = format!("inv_{i}");
        let mut e: Value = serde_json::from_str(&format!(
            r#"{{"DocNumber": "{doc}", "CustomerRef": {{"value": "1"}},
                "Line": [{{"Amount": 19.99, "DetailType": "SalesItemLineDetail",
                           "SalesItemLineDetail": {{"ItemRef": {{"value": "1"}}}}}}]}}"#
        ))
        .unwrap();
        e["MetaData"] = json!({"CreateTime": created, "LastUpdatedTime": created});
        let copies = if i == 3 { 2 } else { 1 };
        for _ in 0..copies {
            ids.push((doc.clone(), qbo.insert(Kind::Invoice, e.clone())));
        }
        if i < 8 {
            let amount = if i == 1 { "20.00" } else { "19.99" };
            csv.push_str(&format!(
                "{doc},{amount},USD,{}\n",
                at.round(jiff::Unit::Second).unwrap()
            ));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("warehouse.csv");
    std::fs::write(&export, csv).unwrap();
    let config = dir.path().join("recon.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[defaults]
state = "sqlite://{state}"
[jobs.ledger]
fields = {{ amount = "money", currency = "currency", created = "timestamp" }}
compare = ["amount", "currency"]
time_field = "created"
window = "last:24h"
[jobs.ledger.source]
type = "quickbooks"
base_url = "{qbo}"
token_url = "{qbo}/oauth2/v1/tokens/bearer"
realm_id = "${{QBO_REALM_ID}}"
client_id = "${{QBO_CLIENT_ID}}"
client_secret = "${{QBO_CLIENT_SECRET}}"
refresh_token = "${{QBO_REFRESH_TOKEN}}"
time_field = "MetaData.CreateTime"
{target}amount_format = "major"
[jobs.ledger.backfill]
mode = "off"
"#,
            state = dir.path().join("state.db").display(),
            qbo = qbo.base_url,
            target = common::file_side("ledger", "target", &export),
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = run(&config, &out, &[], env(&qbo)).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&out);
    assert_eq!(s["gaps"], 2, "{s}");
    assert_eq!(s["mismatches"], 1, "{s}");
    assert_eq!(s["duplicates"], 1, "{s}");
    let mismatches = std::fs::read_to_string(out.join("mismatches.csv")).unwrap();
    assert!(
        mismatches.contains("inv_1")
            && mismatches.contains("19.99")
            && mismatches.contains("20.00"),
        "{mismatches}"
    );
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    for (doc, id) in ids.iter().filter(|(d, _)| d == "inv_3") {
        assert!(log.contains(&format!("Id {id} (DocNumber {doc}")), "{log}");
    }
    // Both copies of inv_3 in duplicate_copies.csv, by their Ids in order;
    // the second one's 19.99 is counted twice on the source's side.
    let copies: Vec<(String, String, String, String)> = csv_rows(&out.join("duplicate_copies.csv"))
        .into_iter()
        .map(|r| {
            let cells = [&r["external_id"], &r["side"], &r["copy"], &r["native_id"]];
            let [a, b, c, d] = cells.map(String::clone);
            (a, b, c, d)
        })
        .collect();
    let mut dup: Vec<&String> = ids
        .iter()
        .filter(|(d, _)| d == "inv_3")
        .map(|(_, id)| id)
        .collect();
    dup.sort_by_key(|id| id.parse::<u64>().unwrap());
    let want: Vec<(String, String, String, String)> = dup
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let (doc, side, copy) = ("inv_3".into(), "source".into(), (i + 1).to_string());
            (doc, side, copy, id.to_string())
        })
        .collect();
    assert_eq!(copies, want);
    assert_eq!(
        summary(&out)["counted_twice"]["source"],
        json!([{"currency": "USD", "records": 1, "total": "19.99", "total_minor": "1999"}])
    );
    no_secret_anywhere(&qbo, dir.path(), &[&o]);
    qbo.shutdown().await;
}
