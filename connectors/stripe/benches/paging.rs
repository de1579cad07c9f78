//! Paging benchmark: the Stripe source against the emulator with Stripe's
//! live-mode limit (100 requests/s) and 150 ms of latency per request.
//!
//! Run: `cargo bench -p recon-stripe --features emulator --bench paging`
//!
//! Prints objects/s of the time-sliced concurrent read over 100,000 charges
//! (target: at least 95% of the limit, 9,500 objects/s, with zero 429s), and
//! of a serial cursor walk (one request in flight, as the official SDKs'
//! auto-pagination does) over 10,000 of them, and the ratio (target >= 10x).
//! A program that prints numbers, not a test: nothing here asserts a time.

use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use recon_core::{Field, FieldKind, Schema, Secret, Source, Window};
use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};
use recon_stripe::{StripeConfig, StripeObject, StripeSource};

const CHARGES: i64 = 100_000;
const START: i64 = 1_795_842_000;
const DAY: i64 = 86_400;

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

fn window(seconds: i64) -> Window {
    Window {
        start: jiff::Timestamp::from_second(START).unwrap(),
        end: jiff::Timestamp::from_second(START + seconds).unwrap(),
    }
}

async fn read(
    emulator: &Emulator,
    concurrency: usize,
    window: Window,
) -> (usize, Duration, StripeSource) {
    let mut cfg = StripeConfig::new(Secret::new(emulator.api_key.clone()), StripeObject::Charges);
    cfg.base_url = emulator.base_url.clone();
    cfg.requests_per_second = Some(100);
    cfg.concurrency = concurrency;
    let source = StripeSource::new(cfg, &schema()).unwrap();
    let started = Instant::now();
    let pages: Vec<_> = source.read(window).try_collect().await.unwrap();
    let n = pages.iter().map(|p| p.records.len()).sum();
    (n, started.elapsed(), source)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let emulator = Emulator::start(EmulatorConfig {
        rate_limit_per_sec: Some(100),
        latency: Duration::from_millis(150),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    let currencies = ["usd", "eur", "gbp", "jpy"];
    for i in 0..CHARGES {
        emulator.insert(
            ObjectKind::Charge,
            Emulator::charge(
                &format!("ch_{i:024x}"),
                100 + i % 50_000,
                currencies[(i % 4) as usize],
                "succeeded",
                START + i * DAY / CHARGES,
            ),
        );
    }
    println!("emulator: {CHARGES} charges over one day, limit 100 requests/s, 150 ms latency per request");

    let (n, took, source) = read(&emulator, 32, window(DAY)).await;
    let sliced_rate = n as f64 / took.as_secs_f64();
    let stats = emulator.stats();
    println!(
        "time-sliced (concurrency 32): {n} objects in {:.2} s = {:.0} objects/s ({:.1}% of the 10,000/s the limit allows); requests {}, 429s at the server {}, client retries {}",
        took.as_secs_f64(),
        sliced_rate,
        sliced_rate / 10_000.0 * 100.0,
        source.stats().requests,
        stats.throttled,
        source.stats().retries
    );
    assert_eq!(n as i64, CHARGES, "every charge read exactly once");

    // The serial walk over a tenth of the day (10,000 charges, ~100 pages).
    let before = emulator.stats().throttled;
    let (m, took_serial, _) = read(&emulator, 1, window(DAY / 10)).await;
    let serial_rate = m as f64 / took_serial.as_secs_f64();
    println!(
        "serial cursor walk (one request in flight): {m} objects in {:.2} s = {:.0} objects/s; 429s {}",
        took_serial.as_secs_f64(),
        serial_rate,
        emulator.stats().throttled - before
    );
    println!(
        "\nsummary: paging {CHARGES} charges at 100 req/s + 150 ms latency: {:.0} objects/s ({:.1}% of the limit, target >= 95%), {} x 429, {:.1}x the serial walk's {:.0} objects/s (target >= 10x)",
        sliced_rate,
        sliced_rate / 10_000.0 * 100.0,
        stats.throttled,
        sliced_rate / serial_rate,
        serial_rate
    );
    emulator.shutdown().await;
}
