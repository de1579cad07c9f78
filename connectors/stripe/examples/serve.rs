//! Serves the Stripe emulator on 127.0.0.1 for benchmarks of the binary
//! (`scripts/bench-pacing`): `recon run` is pointed at it as at Stripe.
//!
//! Build: `cargo build --release -p recon-stripe --features emulator --example serve`
//!
//! Options (all `--name value`): `--rate` (the limit, requests per second;
//! default 50), `--mode` (`window`: fixed one-second windows, default;
//! `sliding`: any one second; `bucket`: a token bucket), `--others` (percent
//! of the limit other clients spend, modelled by the emulator; default 0),
//! `--other-client` (requests per second a real second client sends to the
//! same account while the emulator runs, paced evenly, retrying its 429s;
//! default 0), `--latency-ms` (default 100), `--charges` (default 20000),
//! `--start` and `--span` (the charges' `created` spread evenly over
//! `[start, start + span)`, Unix seconds; default the day
//! 2026-11-28 UTC).
//!
//! Protocol: one JSON line on stdout once serving, `{"base_url", "api_key"}`;
//! then each line `stats` on stdin is answered with one JSON line
//! (`requests`, `throttled`, `by_status`, the other client's `other_sent`
//! and `other_refused`, and `seconds`: `[admitted, refused]` per fixed
//! one-second window from the start, and `max_sliding`, the most admitted
//! requests in any one second); `reset` forgets the arrivals and counters
//! kept so far (the next `stats` counts from then); end of input shuts the
//! emulator down.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recon_stripe::emulator::{Arrival, Emulator, EmulatorConfig, ObjectKind, RateLimitMode};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn num(args: &[String], name: &str, default: i64) -> i64 {
    let v = arg(args, name, &default.to_string());
    v.parse()
        .unwrap_or_else(|_| panic!("{name} must be an integer, not {v:?}"))
}

/// Per fixed second `[admitted, refused]`, and the most admitted in any
/// one second (a sliding window over the admitted arrivals).
fn seconds(arrivals: &[Arrival]) -> (Vec<[u64; 2]>, usize) {
    let mut per: Vec<[u64; 2]> = Vec::new();
    for a in arrivals {
        let s = a.at.as_secs() as usize;
        if per.len() <= s {
            per.resize(s + 1, [0, 0]);
        }
        per[s][usize::from(!a.admitted)] += 1;
    }
    let admitted: Vec<Duration> = arrivals
        .iter()
        .filter(|a| a.admitted)
        .map(|a| a.at)
        .collect();
    let mut most = 0;
    let mut lo = 0;
    for hi in 0..admitted.len() {
        while admitted[hi] - admitted[lo] >= Duration::from_secs(1) {
            lo += 1;
        }
        most = most.max(hi - lo + 1);
    }
    (per, most)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rate = num(&args, "--rate", 50) as u32;
    let mode = match arg(&args, "--mode", "window").as_str() {
        "window" => RateLimitMode::PerSecondWindow,
        "sliding" => RateLimitMode::SlidingWindow,
        "bucket" => RateLimitMode::TokenBucket,
        other => panic!("--mode is window, sliding or bucket, not {other:?}"),
    };
    let charges = num(&args, "--charges", 20_000);
    let start = num(&args, "--start", 1_795_824_000);
    let span = num(&args, "--span", 86_400).max(1);
    let other_rate = num(&args, "--other-client", 0) as u32;
    let emulator = Emulator::start(EmulatorConfig {
        rate_limit_per_sec: Some(rate),
        rate_limit_mode: mode,
        others_percent: num(&args, "--others", 0) as u32,
        latency: Duration::from_millis(num(&args, "--latency-ms", 100) as u64),
        ..EmulatorConfig::default()
    })
    .await
    .expect("starting the Stripe emulator");
    let currencies = ["usd", "eur", "gbp", "jpy"];
    emulator.insert_many(
        ObjectKind::Charge,
        (0..charges).map(|i| {
            Emulator::charge(
                &format!("ch_{i:08}"),
                100 + i % 50_000,
                currencies[(i % 4) as usize],
                "succeeded",
                start + i * span / charges.max(1),
            )
        }),
    );

    // A second client of the same account: evenly paced, as another
    // integration sending at a steady rate would.
    let stop = Arc::new(AtomicBool::new(false));
    let other_sent = Arc::new(AtomicU64::new(0));
    let other_refused = Arc::new(AtomicU64::new(0));
    if other_rate > 0 {
        let (stop, sent, refused) = (stop.clone(), other_sent.clone(), other_refused.clone());
        let url = format!("{}/v1/charges?limit=1", emulator.base_url);
        let key = emulator.api_key.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1) / other_rate);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let (client, url, key) = (client.clone(), url.clone(), key.clone());
                let (sent, refused) = (sent.clone(), refused.clone());
                tokio::spawn(async move {
                    sent.fetch_add(1, Ordering::Relaxed);
                    let r = client.get(&url).bearer_auth(&key).send().await;
                    if r.is_ok_and(|r| r.status().as_u16() == 429) {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
    }

    println!(
        "{}",
        serde_json::json!({"base_url": emulator.base_url, "api_key": emulator.api_key})
    );
    std::io::stdout().flush().unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Counters at the last `reset`.
    let mut base = (0usize, 0u64, 0u64, 0u64, 0u64);
    while let Some(line) = rx.recv().await {
        let stats = emulator.stats();
        let arrivals = emulator.arrivals();
        match line.trim() {
            "reset" => {
                base = (
                    arrivals.len(),
                    stats.requests,
                    stats.throttled,
                    other_sent.load(Ordering::Relaxed),
                    other_refused.load(Ordering::Relaxed),
                );
                println!("{{}}");
            }
            "stats" => {
                let (per, most) = seconds(&arrivals[base.0..]);
                let from = arrivals.get(base.0).map_or(0, |a| a.at.as_secs() as usize);
                println!(
                    "{}",
                    serde_json::json!({
                        "requests": stats.requests - base.1,
                        "throttled": stats.throttled - base.2,
                        "other_sent": other_sent.load(Ordering::Relaxed) - base.3,
                        "other_refused": other_refused.load(Ordering::Relaxed) - base.4,
                        "seconds": per.get(from..).unwrap_or_default(),
                        "max_sliding": most,
                    })
                );
            }
            other => println!("{}", serde_json::json!({ "error": other })),
        }
        std::io::stdout().flush().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    emulator.shutdown().await;
}
