//! Stripe emulator → HubSpot emulator through the binary: the README's CRM
//! example (Stripe charges → HubSpot deals), with search lag and a
//! partially failed batch.

mod common;

use common::{summary, text, CHARGE_FIELDS};

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use recon_hubspot::emulator::{Emulator as HubSpot, EmulatorConfig as HubSpotConfig};
use recon_stripe::emulator::{Emulator as Stripe, EmulatorConfig as StripeConfig, ObjectKind};
use serde_json::json;

/// `DIR/recon.toml` of job `deals`: Stripe's charges against HubSpot's
/// deals, with `backfill` as the body of `[jobs.deals.backfill]`.
fn deals_config(dir: &Path, stripe: &Stripe, hubspot: &HubSpot, backfill: &str) -> PathBuf {
    common::write_config(
        dir,
        &format!(
            "\n[defaults]\nstate = \"sqlite://{state}\"\n[jobs.deals]\n{CHARGE_FIELDS}\n{source}{target}[jobs.deals.backfill]\n{backfill}",
            state = dir.join("state.db").display(),
            source = common::stripe_source("deals", &stripe.api_key, &stripe.base_url),
            target = common::hubspot_deals_target("deals", &hubspot.token, &hubspot.base_url),
        ),
    )
}

async fn recon(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("recon"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_charges_to_hubspot_deals() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let hubspot = HubSpot::start(HubSpotConfig {
        // Upserted deals reach search only a minute later; batch read sees them at once.
        search_lag: Duration::from_secs(60),
        ..HubSpotConfig::default()
    })
    .await
    .unwrap();
    common::deal_properties(&hubspot);
    let now = jiff::Timestamp::now().as_second();
    for i in 0..120i64 {
        let id = format!("ch_{i:05}");
        let created = now - 20_000 + i * 100;
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(&id, 1999 + i, "usd", "succeeded", created),
        );
        // 100 of them already made it to HubSpot as deals.
        if i % 6 != 0 {
            let mut p = serde_json::Map::new();
            p.insert("stripe_charge_id".into(), json!(id));
            p.insert(
                "amount".into(),
                json!(format!("{}.{:02}", (1999 + i) / 100, (1999 + i) % 100)),
            );
            p.insert("deal_currency_code".into(), json!("USD"));
            p.insert("dealstage".into(), json!("succeeded"));
            p.insert("stripe_created".into(), json!((created * 1000).to_string()));
            hubspot.insert("deals", p);
        }
    }
    // Two of the 20 gaps will be refused by HubSpot in the first apply.
    hubspot.fail_ids(vec!["ch_00006".into(), "ch_00012".into()]);
    let dir = tempfile::tempdir().unwrap();
    let config = deals_config(dir.path(), &stripe, &hubspot, "max_ratio = 0.5\n");
    let run = |out: &str| {
        recon(vec![
            "run".into(),
            "--config".into(),
            config.display().to_string(),
            "--out".into(),
            dir.path().join(out).display().to_string(),
        ])
    };

    let o = run("first").await;
    assert_eq!(o.status.code(), Some(1), "two items failed: {}", text(&o));
    let s = summary(&dir.path().join("first"));
    assert_eq!(s["gaps"], 20, "{s}");
    assert_eq!(s["backfilled"], 18, "{s}");
    assert_eq!(s["backfill_failed"], 2, "{s}");
    let backfill = std::fs::read_to_string(dir.path().join("first/backfill.csv")).unwrap();
    assert!(backfill.contains("ch_00006,insert,failed,"), "{backfill}");
    assert!(backfill.contains("ch_00012,insert,failed,"), "{backfill}");
    assert_eq!(hubspot.objects("deals").len(), 118);

    // Search does not see the 18 new deals yet: batch read confirms them,
    // so they are matched, not gaps; the two failed ones are written now.
    hubspot.fail_ids(vec![]);
    // Each process paces itself from a fresh limiter, while HubSpot counts
    // per account: let the search API's one-second window pass between runs.
    hubspot.close_rate_windows();
    let o = run("second").await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&dir.path().join("second"));
    assert_eq!(s["gaps"], 2, "only the two that failed: {s}");
    assert_eq!(s["backfilled"], 2);
    assert_eq!(s["confirmed_by_lookup"], 18, "{s}");
    assert_eq!(hubspot.objects("deals").len(), 120, "nothing duplicated");

    // Third run: nothing to write, the earlier gaps are resolved.
    hubspot.close_rate_windows();
    let o = run("third").await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&dir.path().join("third"));
    assert_eq!(s["backfilled"], 0);
    assert_eq!(s["gaps"], 0);
    assert_eq!(s["resolved"], 2, "{s}");
    assert_eq!(hubspot.objects("deals").len(), 120);
    assert_eq!(
        hubspot.stats().throttled,
        0,
        "{:?}\n{}",
        hubspot.stats(),
        text(&o)
    );
    stripe.shutdown().await;
    hubspot.shutdown().await;
}

/// Insert mode never modifies an existing HubSpot object: a deal that the
/// user's own handler created after the dry run keeps its values when the
/// reviewed plan is applied (the apply finds it and skips it; the insert
/// path itself uses batch/create, never batch/upsert).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_mode_never_overwrites_a_deal_that_appeared_since_the_dry_run() {
    let stripe = Stripe::start(StripeConfig::default()).await.unwrap();
    let hubspot = HubSpot::start(HubSpotConfig::default()).await.unwrap();
    common::deal_properties(&hubspot);
    let now = jiff::Timestamp::now().as_second();
    for i in 0..4i64 {
        stripe.insert(
            ObjectKind::Charge,
            Stripe::charge(
                &format!("ch_{i:05}"),
                1000 + i,
                "usd",
                "succeeded",
                now - 5000 + i,
            ),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = deals_config(
        dir.path(),
        &stripe,
        &hubspot,
        "mode = \"insert\"\nmax_ratio = 1.0\n",
    );
    let args = |cmd: &str, extra: &[&str]| {
        let mut v = vec![
            cmd.to_string(),
            "--config".into(),
            config.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let dry = dir.path().join("dry");
    let o = recon(args("run", &["--dry-run", "--out", dry.to_str().unwrap()])).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(summary(&dry)["gaps"], 4);
    // The user's handler creates ch_00001 meanwhile, with its own values.
    let mut p = serde_json::Map::new();
    p.insert("stripe_charge_id".into(), json!("ch_00001"));
    p.insert("amount".into(), json!("99.99"));
    p.insert("deal_currency_code".into(), json!("USD"));
    p.insert("dealstage".into(), json!("handler-made"));
    p.insert(
        "stripe_created".into(),
        json!(((now - 4999) * 1000).to_string()),
    );
    hubspot.insert("deals", p);
    hubspot.close_rate_windows();
    let applied = dir.path().join("applied");
    let o = recon(args(
        "apply",
        &[
            "--plan",
            dry.join("plan.jsonl").to_str().unwrap(),
            "--out",
            applied.to_str().unwrap(),
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(0), "nothing left open: {}", text(&o));
    let backfill = std::fs::read_to_string(applied.join("backfill.csv")).unwrap();
    assert!(backfill.contains("ch_00001,insert,skipped"), "{backfill}");
    let deals = hubspot.objects("deals");
    assert_eq!(deals.len(), 4, "three created, none twice");
    let (_, props) = deals
        .iter()
        .find(|(_, p)| p["stripe_charge_id"] == json!("ch_00001"))
        .unwrap();
    assert_eq!(props["dealstage"], json!("handler-made"), "not overwritten");
    assert_eq!(props["amount"], json!("99.99"), "not overwritten");
    stripe.shutdown().await;
    hubspot.shutdown().await;
}
