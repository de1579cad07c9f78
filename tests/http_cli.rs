//! `type = "http"` through the binary: the declarative connector
//! configured for Stripe's charges list against the Stripe emulator gives
//! the same reports and writes as the native `type = "stripe"` source, and
//! configured for HubSpot's batch read and batch upsert against the HubSpot
//! emulator writes the same objects as the native `type = "hubspot"`
//! target, each once.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{recon_async, summary, text};
use recon_http::emulator::{
    Emulator as RestApi, EmulatorConfig as RestConfig, Fault as RestFault, TransportFault,
};
use recon_hubspot::emulator::{Emulator as HubSpot, EmulatorConfig as HubSpotConfig};
use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig, Fault, FaultKind, ObjectKind};

/// 2026-11-28T00:00:00Z, the first instant of the job's window.
const DAY: i64 = 1_795_824_000;

const FIELDS: &str = r#"fields = { amount = "money", currency = "currency", status = "text", created = "timestamp" }
compare = ["amount", "currency", "status"]
window = "2026-11-28""#;

/// The native source of the job's charges.
fn native_source(base_url: &str) -> String {
    format!(
        r#"[jobs.charges.source]
type = "stripe"
object = "charges"
api_key = "${{RECON_TEST_STRIPE_KEY}}"
base_url = "{base_url}"
"#
    )
}

/// The same charges declared: Stripe's documented list (cursor paging with
/// `starting_after`, `has_more`, `created[gte]`/`created[lt]`) and
/// retrieve by ID (https://docs.stripe.com/api/charges/list,
/// https://docs.stripe.com/api/pagination), as in examples/http/stripe-charges.toml.
fn declared_source(base_url: &str) -> String {
    format!(
        r#"[jobs.charges.source]
type = "http"
name = "Stripe charges (declared)"
base_url = "{base_url}"
auth = {{ kind = "bearer", token = "${{RECON_TEST_STRIPE_KEY}}" }}
headers = {{ "Stripe-Version" = "2024-06-20" }}
rate = "25/s"
request_id_header = "Request-Id"
fields = {{ amount = "$.amount", currency = "$.currency", status = "$.status", created = "$.created" }}
[jobs.charges.source.list]
path = "/v1/charges"
query = {{ limit = "100", "created[gte]" = "{{{{ start | unix }}}}", "created[lt]" = "{{{{ end | unix }}}}" }}
records = "$.data[*]"
paging = {{ kind = "cursor", param = "starting_after", has_more = "$.has_more" }}
[jobs.charges.source.lookup]
path = "/v1/charges/{{{{ id }}}}"
"#
    )
}

/// `DIR/recon.toml`: the charges job from `source` into the SQLite
/// ledger `DIR/ledger.db`.
fn job(dir: &Path, source: &str) -> PathBuf {
    common::write_config(
        dir,
        &format!(
            "\n[defaults]\nstate = \"sqlite://{state}\"\n[jobs.charges]\n{FIELDS}\n{source}\n{target}[jobs.charges.backfill]\nmax_ratio = 1.0\n",
            state = dir.join("state.db").display(),
            target = common::sql_target(
                "charges",
                &format!("sqlite://{}?mode=rwc", dir.join("ledger.db").display()),
                "payments",
                "stripe_charge_id"
            ),
        ),
    )
}

async fn run(config: &Path, key: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run".to_string(),
        "--config".into(),
        config.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    recon_async(args, vec![("RECON_TEST_STRIPE_KEY", key.to_string())]).await
}

/// The counts of a summary.json that two equal runs share.
fn counts(dir: &Path) -> BTreeMap<String, serde_json::Value> {
    let s = summary(dir);
    [
        "source_records",
        "target_records",
        "matched",
        "gaps",
        "orphans",
        "mismatches",
        "duplicates",
        "pending",
        "unplaced",
        "backfilled",
        "backfill_failed",
        "edge_dismissed",
    ]
    .iter()
    .filter_map(|k| s.get(*k).map(|v| (k.to_string(), v.clone())))
    .collect()
}

fn file(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
}

/// A report file's rows without the columns that name when the run saw
/// them (`first_seen`, `last_seen`): what two runs of equal data share.
fn rows(dir: &Path, name: &str) -> Vec<Vec<String>> {
    let text = file(dir, name);
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let keep: Vec<usize> = (0..header.len())
        .filter(|&i| !header[i].ends_with("_seen"))
        .collect();
    let mut out = vec![keep.iter().map(|&i| header[i].clone()).collect::<Vec<_>>()];
    for rec in r.records() {
        let rec = rec.unwrap();
        out.push(keep.iter().map(|&i| rec[i].to_string()).collect());
    }
    out
}

async fn ledger(dir: &Path) -> Vec<String> {
    common::joined_rows(
        &format!("sqlite://{}", dir.join("ledger.db").display()),
        "SELECT stripe_charge_id || '|' || amount_cents || '|' || currency || '|' || status || '|' || created_at FROM payments ORDER BY stripe_charge_id",
        1,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_stripe_charges_report_and_write_exactly_as_the_native_source() {
    sqlx::any::install_default_drivers();
    let stripe = Stripe::start(EmulatorConfig::default()).await.unwrap();
    // 150 charges across the day and its edges: one at the first instant
    // (in), one at the first instant of the next day (out), one a second
    // before the day (out); amounts in three currencies.
    let currencies = ["usd", "eur", "jpy"];
    let mut created = vec![DAY, DAY + 86_400, DAY - 1, DAY + 86_399];
    created.extend((0..146).map(|i| DAY - 3_000 + i * 613));
    for (i, at) in created.iter().enumerate() {
        let i = i as i64;
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(
                &format!("ch_{i:05}"),
                199 + i * 1_013,
                currencies[(i % 3) as usize],
                if i % 7 == 0 { "failed" } else { "succeeded" },
                *at,
            ),
        );
    }
    // One charge of the last hour (outside the job's window), for `recon
    // check`'s probe of the last 7 days.
    stripe.insert(
        ObjectKind::Charge,
        Stripe::charge(
            "ch_recent",
            4_242,
            "usd",
            "succeeded",
            jiff::Timestamp::now().as_second() - 3_600,
        ),
    );
    let key = stripe.api_key.clone();
    let native = tempfile::tempdir().unwrap();
    let declared = tempfile::tempdir().unwrap();
    let configs = [
        job(native.path(), &native_source(&stripe.base_url)),
        job(declared.path(), &declared_source(&stripe.base_url)),
    ];
    for dir in [native.path(), declared.path()] {
        let mut conn = common::stripe_ledger(&dir.join("ledger.db")).await;
        // The ledger already holds: a charge of the day's last second
        // (matched), the first instant's with another status (a mismatch), one Stripe dates a second before the
        // day but the ledger inside it (an orphan that the source lookup
        // dismisses), and one Stripe never had (an orphan).
        for (id, cents, cur, at) in [
            ("ch_00003", 3_238, "usd", "2026-11-28 23:59:59"),
            ("ch_00000", 199, "usd", "2026-11-28 00:00:00"),
            ("ch_00002", 2_225, "jpy", "2026-11-28 00:00:10"),
            ("ch_ghost", 500, "usd", "2026-11-28 12:00:00"),
        ] {
            sqlx::query("INSERT INTO payments VALUES (?, ?, ?, 'succeeded', ?)")
                .bind(id)
                .bind(cents)
                .bind(cur)
                .bind(at)
                .execute(&mut conn)
                .await
                .unwrap();
        }
    }

    // `recon check`: one list call, one lookup, the first record mapped.
    let o = recon_async(
        vec![
            "check".to_string(),
            "--config".into(),
            configs[1].display().to_string(),
        ],
        vec![("RECON_TEST_STRIPE_KEY", key.clone())],
    )
    .await;
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for needle in [
        "Stripe charges (declared) (GET /v1/charges)",
        "25 requests per 1s (rate)",
        "first record of the last 7 days: id=ch_recent amount=42.42 currency=USD status=succeeded",
        "lookup found ch_recent",
    ] {
        assert!(out.contains(needle), "{needle:?} not in: {out}");
    }
    assert!(!out.contains(&key), "{out}");

    // Dry runs, each through the same faults at the start of its reads.
    let mut outs = Vec::new();
    for (config, dir) in configs.iter().zip([native.path(), declared.path()]) {
        stripe.set_faults(vec![
            Fault {
                kind: FaultKind::RateLimited,
                after: 0,
                times: 1,
            },
            Fault {
                kind: FaultKind::ServerError,
                after: 2,
                times: 1,
            },
        ]);
        let out = dir.join("dry");
        let o = run(config, &key, &["--dry-run", "--out", out.to_str().unwrap()]).await;
        assert_eq!(o.status.code(), Some(1), "discrepancies: {}", text(&o));
        outs.push(out);
    }
    let (n, d) = (&outs[0], &outs[1]);
    assert_eq!(counts(n), counts(d));
    let c = counts(n);
    assert!(c["gaps"].as_u64().unwrap() > 100, "{c:?}");
    assert_eq!(c["mismatches"], 1, "{c:?}");
    assert_eq!(c["orphans"], 1, "only ch_ghost: {c:?}");
    for f in [
        "gaps.csv",
        "orphans.csv",
        "mismatches.csv",
        "duplicates.csv",
        "pending.csv",
    ] {
        assert_eq!(rows(n, f), rows(d, f), "{f}");
    }
    assert_eq!(
        rows(d, "gaps.csv").len(),
        c["gaps"].as_u64().unwrap() as usize + 1
    );
    assert!(
        !file(d, "gaps.csv").contains("ch_00001"),
        "the next day's charge is outside"
    );
    assert!(
        !file(d, "orphans.csv").contains("ch_00002"),
        "dismissed by lookup"
    );

    // Apply: the same rows, cent for cent.
    let mut applied = Vec::new();
    for (config, dir) in configs.iter().zip([native.path(), declared.path()]) {
        let out = dir.join("apply");
        let o = run(config, &key, &["--out", out.to_str().unwrap()]).await;
        assert_eq!(
            o.status.code(),
            Some(1),
            "the ghost orphan stays: {}",
            text(&o)
        );
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains(&key),
            "key in logs"
        );
        applied.push(out);
    }
    assert_eq!(counts(&applied[0]), counts(&applied[1]));
    let (ln, ld) = (ledger(native.path()).await, ledger(declared.path()).await);
    assert_eq!(ln, ld);
    assert_eq!(ln.len(), c["gaps"].as_u64().unwrap() as usize + 4);
    stripe.shutdown().await;
}

/// HubSpot's documented CRM v3 endpoints, declared: list deals with
/// `after` paging, `batch/read` by the unique property, `batch/upsert` by
/// it (https://developers.hubspot.com/docs/api-reference/crm-objects-v3/batch/post-crm-v3-objects-objectType-batch-upsert).
fn declared_hubspot(token: &str, base_url: &str) -> String {
    format!(
        r#"[jobs.deals.target]
type = "http"
name = "HubSpot deals (declared)"
base_url = "{base_url}"
auth = {{ kind = "bearer", token = "{token}" }}
rate = "90/10s"
request_id_header = "X-HubSpot-Correlation-Id"
id = "$.properties.stripe_charge_id"
fields = {{ amount = "$.properties.amount", currency = "$.properties.deal_currency_code", status = "$.properties.dealstage", created = "$.properties.stripe_created" }}
amount_format = "major"
timestamp_unit = "milliseconds"
[jobs.deals.target.list]
path = "/crm/v3/objects/deals"
query = {{ limit = "100", properties = "stripe_charge_id,amount,deal_currency_code,dealstage,stripe_created" }}
records = "$.results[*]"
window = "client"
paging = {{ kind = "next_cursor", param = "after", cursor = "$.paging.next.after" }}
[jobs.deals.target.lookup]
method = "POST"
path = "/crm/v3/objects/deals/batch/read"
body = {{ idProperty = "stripe_charge_id", inputs = "{{{{ items }}}}", properties = ["stripe_charge_id", "amount", "deal_currency_code", "dealstage", "stripe_created"] }}
item = {{ id = "{{{{ id }}}}" }}
records = "$.results[*]"
max_ids = 100
[jobs.deals.target.write]
uniqueness = "upsert_by_key"
[jobs.deals.target.write.batch]
path = "/crm/v3/objects/deals/batch/upsert"
body = {{ inputs = "{{{{ items }}}}" }}
item = {{ idProperty = "stripe_charge_id", id = "{{{{ key }}}}", properties = {{ stripe_charge_id = "{{{{ key }}}}", amount = "{{{{ fields.amount | text }}}}", deal_currency_code = "{{{{ fields.currency }}}}", dealstage = "{{{{ fields.status }}}}", stripe_created = "{{{{ fields.created | unix_ms | text }}}}" }} }}
max_items = 100
results = "$.results[*]"
result_key = "$.properties.stripe_charge_id"
created = "$.new"
errors = "$.errors[*]"
error_keys = "$.context.ids[*]"
"#
    )
}

fn deals_job(dir: &Path, stripe: &Stripe, target: &str) -> PathBuf {
    common::write_config(
        dir,
        &format!(
            "\n[defaults]\nstate = \"sqlite://{state}\"\n[jobs.deals]\n{FIELDS}\n{source}{target}[jobs.deals.backfill]\nmode = \"insert\"\nmax_ratio = 1.0\n",
            state = dir.join("state.db").display(),
            source = common::stripe_source("deals", &stripe.api_key, &stripe.base_url),
        ),
    )
}

/// The written properties of every deal, by charge ID.
fn deals(h: &HubSpot) -> BTreeMap<String, Vec<String>> {
    h.objects("deals")
        .into_iter()
        .map(|(_, p)| {
            let get = |k: &str| p.get(k).map(|v| v.to_string()).unwrap_or_default();
            (
                get("stripe_charge_id"),
                [
                    "amount",
                    "deal_currency_code",
                    "dealstage",
                    "stripe_created",
                ]
                .iter()
                .map(|k| get(k))
                .collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_hubspot_target_writes_the_same_deals_once() {
    let stripe = Stripe::start(EmulatorConfig::default()).await.unwrap();
    for i in 0..40i64 {
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(
                &format!("ch_{i:05}"),
                1_999 + i * 37,
                if i % 2 == 0 { "usd" } else { "eur" },
                "succeeded",
                DAY + 600 + i * 1_800,
            ),
        );
    }
    let native_hs = HubSpot::start(HubSpotConfig::default()).await.unwrap();
    let declared_hs = HubSpot::start(HubSpotConfig::default()).await.unwrap();
    for h in [&native_hs, &declared_hs] {
        common::deal_properties(h);
    }
    let native = tempfile::tempdir().unwrap();
    let declared = tempfile::tempdir().unwrap();
    let configs = [
        deals_job(
            native.path(),
            &stripe,
            &common::hubspot_deals_target("deals", &native_hs.token, &native_hs.base_url),
        ),
        deals_job(
            declared.path(),
            &stripe,
            &declared_hubspot(&declared_hs.token, &declared_hs.base_url),
        ),
    ];
    for (round, want) in [("first", 0), ("rerun", 0)] {
        for (config, dir) in configs.iter().zip([native.path(), declared.path()]) {
            let out = dir.join(round);
            let o = run(config, &stripe.api_key, &["--out", out.to_str().unwrap()]).await;
            assert_eq!(o.status.code(), Some(want), "{round}: {}", text(&o));
        }
        native_hs.close_rate_windows();
        declared_hs.close_rate_windows();
    }
    let first = [
        summary(&native.path().join("first")),
        summary(&declared.path().join("first")),
    ];
    assert_eq!(first[0]["backfilled"], 40);
    assert_eq!(first[1]["backfilled"], 40);
    let rerun = summary(&declared.path().join("rerun"));
    assert_eq!(rerun["gaps"], 0, "{rerun}");
    assert_eq!(rerun["backfilled"], 0, "{rerun}");
    let (n, d) = (deals(&native_hs), deals(&declared_hs));
    assert_eq!(n.len(), 40);
    assert_eq!(n, d, "the same deals, property for property");
    assert_eq!(declared_hs.count("deals"), 40, "each once");
    stripe.shutdown().await;
    native_hs.shutdown().await;
    declared_hs.shutdown().await;
}

/// The emulator's JSON REST target declared: list by offset with a total
/// (filtered here), lookup by key, create with `Idempotency-Key`, `409`
/// = already there, `422 amount_invalid` = this record fails; as in
/// examples/http/rest-target.toml.
fn declared_records(emu: &RestApi) -> String {
    format!(
        r#"[jobs.charges.target]
type = "http"
name = "Ledger API"
base_url = "{}"
auth = {{ kind = "bearer", token = "${{LEDGER_TOKEN}}" }}
rate = "200/s"
id = "$.external_id"
fields = {{ amount = "$.amount", currency = "$.currency", status = "$.status", created = "$.created" }}
[jobs.charges.target.list]
path = "/records"
records = "$.records[*]"
window = "client"
paging = {{ kind = "offset", limit = 100, total = "$.total" }}
[jobs.charges.target.lookup]
path = "/records/{{{{ id }}}}"
[jobs.charges.target.write]
uniqueness = "unique_field"
batch_size = 10
outcomes = [
  {{ status = 409, code = "duplicate_external_id", outcome = "unchanged" }},
  {{ status = 422, code = "amount_invalid", outcome = "failed" }},
]
[jobs.charges.target.write.create]
path = "/records"
idempotency_header = "Idempotency-Key"
body = {{ external_id = "{{{{ key }}}}", amount = "{{{{ fields.amount }}}}", currency = "{{{{ fields.currency }}}}", status = "{{{{ fields.status }}}}", created = "{{{{ fields.created | unix }}}}" }}
"#,
        emu.base_url
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_rest_target_writes_each_gap_once_through_a_crash_and_lost_answers() {
    let stripe = Stripe::start(EmulatorConfig::default()).await.unwrap();
    for i in 0..60i64 {
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(
                &format!("ch_{i:05}"),
                500 + i,
                "usd",
                "succeeded",
                DAY + 60 + i * 1_000,
            ),
        );
    }
    let api = RestApi::start(RestConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = common::write_config(
        dir.path(),
        &format!(
            "\n[defaults]\nstate = \"sqlite://{state}\"\n[jobs.charges]\n{FIELDS}\n{source}\n{target}[jobs.charges.backfill]\nmax_ratio = 1.0\n",
            state = dir.path().join("state.db").display(),
            source = native_source(&stripe.base_url),
            target = declared_records(&api),
        ),
    );
    let go = |out: &str, extra: Vec<(&'static str, String)>| {
        let mut args = vec![
            "run".to_string(),
            "--config".into(),
            config.display().to_string(),
            "--out".into(),
            dir.path().join(out).display().to_string(),
        ];
        if out == "dry" {
            args.push("--dry-run".into());
        }
        let mut env = vec![
            ("RECON_TEST_STRIPE_KEY", stripe.api_key.clone()),
            ("LEDGER_TOKEN", api.token.clone()),
        ];
        env.extend(extra);
        recon_async(args, env)
    };

    // `recon check` names how the API keeps one record per key.
    let o = recon_async(
        vec![
            "check".to_string(),
            "--config".into(),
            config.display().to_string(),
        ],
        vec![
            ("RECON_TEST_STRIPE_KEY", stripe.api_key.clone()),
            ("LEDGER_TOKEN", api.token.clone()),
        ],
    )
    .await;
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for needle in [
        "writes keep one record per key by a unique field the API enforces",
        "the window is filtered client-side",
    ] {
        assert!(out.contains(needle), "{needle:?} not in: {out}");
    }
    assert!(!out.contains(&api.token), "{out}");

    let o = go("dry", vec![]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let dry = summary(&dir.path().join("dry"));
    assert_eq!(dry["gaps"], 60);
    let notes = dry["notes"].to_string();
    assert!(
        notes.contains("target: Ledger API cannot filter by the window"),
        "the report says the window was filtered here: {notes}"
    );
    assert!(api.records().is_empty(), "a dry run writes nothing");

    // Killed right after 20 records reached the API, before the ledger
    // recorded them.
    let o = go(
        "crash",
        vec![("RECON_FAULT_ABORT_AFTER_ITEMS", "20".into())],
    )
    .await;
    assert!(!matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert_eq!(api.records().len(), 20);

    // The rerun: two creates lose their answers (a 500 after the work,
    // then a dropped connection); the retries replay them by key.
    api.set_create_faults(vec![
        RestFault {
            kind: TransportFault::ServerErrorAfterWork,
            after: 1,
            times: 1,
        },
        RestFault {
            kind: TransportFault::DropAfterWork,
            after: 4,
            times: 1,
        },
    ]);
    let o = go("rerun", vec![]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&dir.path().join("rerun"));
    assert_eq!(s["gaps"], 40, "{s}");
    assert_eq!(s["backfilled"], 40, "{s}");
    assert!(!String::from_utf8_lossy(&o.stderr).contains(&api.token));
    let stats = api.stats();
    assert_eq!(stats.replays, 2, "{stats:?}");
    assert_eq!(stats.creates, 60, "{stats:?}");

    let o = go("again", vec![]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&dir.path().join("again"));
    assert_eq!(
        (s["gaps"].as_u64(), s["backfilled"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let mut keys: Vec<String> = api
        .records()
        .iter()
        .map(|r| r["external_id"].as_str().unwrap().to_string())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 60, "every charge exactly once");
    assert_eq!(api.records().len(), 60);
    let r = api
        .records()
        .into_iter()
        .find(|r| r["external_id"] == serde_json::json!("ch_00007"))
        .unwrap();
    assert_eq!(r["amount"].to_string(), "507", "minor units, exact");
    assert_eq!(r["created"].to_string(), (DAY + 7_060).to_string());
    stripe.shutdown().await;
    api.shutdown().await;
}
