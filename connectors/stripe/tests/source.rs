//! The Stripe source against the emulator over real HTTP on 127.0.0.1:
//! paging across pages and slices, window edges, lookups, every fault,
//! 401, and rate limiting.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::TryStreamExt;
use recon_core::{Field, FieldKind, Schema, Secret, Source, Window};
use recon_stripe::emulator::{Emulator, EmulatorConfig, Fault, FaultKind, ObjectKind, StripeFault};
use recon_stripe::{StripeConfig, StripeObject, StripeSource};

fn schema() -> Schema {
    let f = |n: &str, k| Field {
        name: n.into(),
        kind: k,
        compared: true,
    };
    Schema {
        fields: vec![
            f("amount", FieldKind::Money),
            f("status", FieldKind::Text),
            f("created", FieldKind::Timestamp),
        ],
    }
}

const START: i64 = 1_795_842_000; // 2026-11-28T05:00:00Z
const END: i64 = START + 86_400;

fn window() -> Window {
    Window {
        start: jiff::Timestamp::from_second(START).unwrap(),
        end: jiff::Timestamp::from_second(END).unwrap(),
    }
}

/// Inserts charges and returns the IDs inside the window.
fn seed(emulator: &Emulator, n: usize) -> BTreeSet<String> {
    let mut inside = BTreeSet::new();
    let mut add = |id: String, created: i64| {
        emulator.insert(
            ObjectKind::Charge,
            Emulator::charge(&id, 1000, "usd", "succeeded", created),
        );
        if (START..END).contains(&created) {
            inside.insert(id);
        }
    };
    for i in 0..n {
        add(format!("ch_{i:08}"), START + (i as i64 * 86_400) / n as i64);
    }
    // Exactly on the edges: the start is in, the end is out.
    add("ch_at_start".into(), START);
    add("ch_at_end".into(), END);
    add("ch_before".into(), START - 1);
    // 250 charges in one second: more than a page shares one timestamp.
    for i in 0..250 {
        add(format!("ch_same_{i:03}"), START + 40_000);
    }
    inside
}

fn source(emulator: &Emulator, concurrency: usize) -> StripeSource {
    let mut cfg = StripeConfig::new(Secret::new(emulator.api_key.clone()), StripeObject::Charges);
    cfg.base_url = emulator.base_url.clone();
    cfg.concurrency = concurrency;
    cfg.requests_per_second = Some(1000);
    cfg.max_attempts = Some(4);
    StripeSource::new(cfg, &schema()).unwrap()
}

async fn read_ids(s: &StripeSource) -> Result<Vec<String>, recon_core::ConnectorError> {
    let pages: Vec<_> = s.read(window()).try_collect().await?;
    Ok(pages
        .into_iter()
        .flat_map(|p| p.records)
        .map(|r| r.key)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_and_slices_lose_nothing_and_double_nothing() {
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let inside = seed(&emulator, 5_000);
    for concurrency in [1, 4, 32] {
        let ids = read_ids(&source(&emulator, concurrency)).await.unwrap();
        let set: BTreeSet<String> = ids.iter().cloned().collect();
        assert_eq!(
            ids.len(),
            set.len(),
            "no duplicates (concurrency {concurrency})"
        );
        assert_eq!(
            set, inside,
            "exactly the window (concurrency {concurrency})"
        );
    }
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_window_costs_one_request() {
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    for i in 0..40 {
        emulator.insert(
            ObjectKind::Charge,
            Emulator::charge(&format!("ch_{i}"), 100, "eur", "succeeded", START + i),
        );
    }
    let s = source(&emulator, 32);
    assert_eq!(read_ids(&s).await.unwrap().len(), 40);
    assert_eq!(emulator.stats().requests, 1);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_find_what_exists_and_treat_404_and_deleted_as_missing() {
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    seed(&emulator, 10);
    let s = source(&emulator, 4);
    let mut found: Vec<String> = s
        .lookup(&["ch_00000003".into(), "ch_nope".into(), "ch_at_end".into()])
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.key)
        .collect();
    found.sort();
    assert_eq!(found, ["ch_00000003", "ch_at_end"]);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_is_survived_with_exact_counts() {
    let faults = [
        FaultKind::RateLimited,
        FaultKind::Provider(StripeFault::LockTimeout),
        FaultKind::ServerError,
        FaultKind::Unavailable,
        FaultKind::Slow(Duration::from_secs(3)),
        FaultKind::TruncatedJson,
        FaultKind::MalformedJson,
        FaultKind::DropConnection,
    ];
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let inside = seed(&emulator, 2_000);
    for kind in faults {
        emulator.set_faults(vec![Fault {
            kind: kind.clone(),
            after: 3,
            times: 2,
        }]);
        let mut cfg =
            StripeConfig::new(Secret::new(emulator.api_key.clone()), StripeObject::Charges);
        cfg.base_url = emulator.base_url.clone();
        cfg.requests_per_second = Some(1000);
        cfg.concurrency = 1; // one request at a time: the fault hits one call twice
        cfg.timeout_secs = Some(1);
        let s = StripeSource::new(cfg, &schema()).unwrap();
        let ids: BTreeSet<String> = read_ids(&s)
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"))
            .into_iter()
            .collect();
        assert_eq!(ids, inside, "{kind:?}");
        assert!(
            s.stats().retries >= 2,
            "{kind:?} was retried: {:?}",
            s.stats()
        );
    }
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_attempt_cap_the_error_names_endpoint_and_request() {
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    seed(&emulator, 10);
    emulator.set_faults(vec![Fault {
        kind: FaultKind::Unavailable,
        after: 0,
        times: 1000,
    }]);
    let mut cfg = StripeConfig::new(Secret::new(emulator.api_key.clone()), StripeObject::Charges);
    cfg.base_url = emulator.base_url.clone();
    cfg.max_attempts = Some(3);
    let s = StripeSource::new(cfg, &schema()).unwrap();
    let e = read_ids(&s).await.unwrap_err().to_string();
    assert!(e.contains("GET /v1/charges"), "{e}");
    assert!(e.contains("req_"), "names the request ID: {e}");
    assert!(e.contains("3 attempts"), "{e}");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_points_at_the_api_key_setting() {
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let mut cfg = StripeConfig::new(
        Secret::new("sk_test_wrong_key_123456".to_string()),
        StripeObject::Charges,
    );
    cfg.base_url = emulator.base_url.clone();
    let s = StripeSource::new(cfg, &schema()).unwrap();
    let e = read_ids(&s).await.unwrap_err().to_string();
    assert!(e.contains("401"), "{e}");
    assert!(e.contains("api_key"), "{e}");
    assert!(!e.contains("sk_test_wrong_key_123456"), "{e}");
    assert_eq!(emulator.stats().requests, 1, "401 is never retried");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_the_emulators_limit_is_never_throttled() {
    let emulator = Emulator::start(EmulatorConfig {
        rate_limit_per_sec: Some(20),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let inside = seed(&emulator, 3_000);
    let mut cfg = StripeConfig::new(Secret::new(emulator.api_key.clone()), StripeObject::Charges);
    cfg.base_url = emulator.base_url.clone();
    cfg.requests_per_second = Some(20);
    cfg.concurrency = 16;
    let s = StripeSource::new(cfg, &schema()).unwrap();
    let ids: BTreeSet<String> = read_ids(&s).await.unwrap().into_iter().collect();
    assert_eq!(ids, inside);
    assert_eq!(emulator.stats().throttled, 0, "{:?}", emulator.stats());
    assert_eq!(s.stats().throttled, 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_calls_exceed_pages_by_at_most_five_percent() {
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    // 10,000 charges spread over the day: 100 full pages at least.
    for i in 0..10_000i64 {
        emulator.insert(
            ObjectKind::Charge,
            Emulator::charge(
                &format!("ch_{i:06}"),
                100,
                "usd",
                "succeeded",
                START + (i * 86_400) / 10_000,
            ),
        );
    }
    // At Stripe's live limit (100/s), as a run uses it: far above it the
    // planner rightly buys concurrency with partial pages.
    let mut cfg = StripeConfig::new(Secret::new(emulator.api_key.clone()), StripeObject::Charges);
    cfg.base_url = emulator.base_url.clone();
    cfg.requests_per_second = Some(100);
    let s = StripeSource::new(cfg, &schema()).unwrap();
    assert_eq!(read_ids(&s).await.unwrap().len(), 10_000);
    let calls = emulator.stats().requests;
    assert!(calls >= 100, "{calls}");
    assert!(
        calls <= 105,
        "{calls} list calls for 100 pages: more than 5% over"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_json_for_replay_masks_payment_intent_client_secrets() {
    let emulator = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let pi = Emulator::payment_intent("pi_3Qmask0001", 4200, "usd", "succeeded", START + 10);
    let secret = pi["client_secret"].as_str().unwrap().to_string();
    assert!(secret.contains("_secret_"), "{pi}");
    emulator.insert(ObjectKind::PaymentIntent, pi.clone());
    let mut cfg = StripeConfig::new(
        Secret::new(emulator.api_key.clone()),
        StripeObject::PaymentIntents,
    );
    cfg.base_url = emulator.base_url.clone();
    cfg.requests_per_second = Some(1000);
    let s = StripeSource::new(cfg, &schema()).unwrap();
    let raw = s
        .raw_json(&["pi_3Qmask0001".into()])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&raw[0].1).unwrap();
    assert_eq!(v["client_secret"], "***");
    assert!(!raw[0].1.contains(&secret), "{}", raw[0].1);
    // Everything else as Stripe returned it.
    let mut want = pi;
    want["client_secret"] = "***".into();
    assert_eq!(v, want);
    assert!(!recon_core::scrub(&format!("x {secret} y")).contains(&secret));
    emulator.shutdown().await;
}
