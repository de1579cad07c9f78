//! `recon demo`: the whole product offline, with nothing installed.
//!
//! Serves a Stripe-compatible API from inside the process on 127.0.0.1 (the
//! Stripe crate's emulator), makes a SQLite ledger with planted gaps,
//! orphans, mismatches and duplicates, writes a real job config, and runs
//! the real pipeline three times: a dry run, an apply, and a rerun.
//!
//! The emulator is compiled in only with the `demo` cargo feature (on by
//! default); a build without it answers `recon demo` with exit status 2.

#[cfg(feature = "demo")]
use std::path::{Path, PathBuf};

#[cfg(feature = "demo")]
use anyhow::Context;
use anyhow::Result;
#[cfg(feature = "demo")]
use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};

use crate::cli::DemoArgs;
#[cfg(feature = "demo")]
use crate::cli::RunArgs;
#[cfg(feature = "demo")]
use crate::pipeline::{execute, RunPlan};
use crate::Status;

#[cfg(feature = "demo")]
const CURRENCIES: [(&str, i64); 5] = [("usd", 1), ("eur", 1), ("gbp", 1), ("jpy", 1), ("kwd", 10)];
#[cfg(feature = "demo")]
const CHARGES: usize = 3000;

/// Deterministic pseudo-random numbers, so every demo plants the same story.
#[cfg(feature = "demo")]
struct Lcg(u64);
#[cfg(feature = "demo")]
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// What the demo planted, to print beside what recon found.
#[cfg(feature = "demo")]
struct Story {
    gaps: usize,
    pending: usize,
    orphans: usize,
    mismatches: usize,
    duplicates: usize,
}

#[cfg(feature = "demo")]
async fn build_ledger(db: &Path, charges: &[Charge], story: &mut Story) -> Result<()> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}?mode=rwc", db.display());
    let mut conn = sqlx::AnyConnection::connect(&url)
        .await
        .context("creating the demo ledger")?;
    sqlx::query(
        "CREATE TABLE payments (id INTEGER PRIMARY KEY, stripe_charge_id TEXT NOT NULL UNIQUE, \
         amount_cents INTEGER NOT NULL, currency TEXT NOT NULL, status TEXT NOT NULL, created_at TIMESTAMP NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let mut rows = Vec::new();
    let ts = |secs: i64| {
        jiff::Timestamp::from_second(secs)
            .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default()
    };
    let n = charges.len();
    for (i, (id, amount, cur, status, created)) in charges.iter().enumerate() {
        // The newest few never reached the ledger yet: pending, not gaps.
        if i >= n - story.pending {
            continue;
        }
        // Every 120th charge was dropped by the webhook handler: a gap.
        if i % 120 == 7 {
            story.gaps += 1;
            continue;
        }
        let (amount, status) = match i % 250 {
            // A partial refund booked as the full amount; a status never updated.
            13 => (amount - 500, *status),
            101 => (*amount, "pending"),
            _ => (*amount, *status),
        };
        if i % 250 == 13 || i % 250 == 101 {
            story.mismatches += 1;
        }
        rows.push(format!(
            "('{id}', {amount}, '{}', '{status}', '{}')",
            cur.to_uppercase(),
            ts(*created)
        ));
        // A retried webhook stored the charge again, its ID with a trailing
        // space: a UNIQUE constraint cannot see it, recon does.
        if i % 700 == 42 {
            story.duplicates += 1;
            rows.push(format!(
                "('{id} ', {amount}, '{}', '{status}', '{}')",
                cur.to_uppercase(),
                ts(*created)
            ));
        }
    }
    // Test payments someone entered by hand: in the ledger, not in Stripe.
    let base = charges[n / 2].4;
    for k in 0..story.orphans {
        rows.push(format!(
            "('ch_manual_{k:04}', 1000, 'USD', 'succeeded', '{}')",
            ts(base + k as i64 * 60)
        ));
    }
    for chunk in rows.chunks(400) {
        let sql = format!(
            "INSERT INTO payments (stripe_charge_id, amount_cents, currency, status, created_at) VALUES {}",
            chunk.join(", ")
        );
        sqlx::query(&sql).execute(&mut conn).await?;
    }
    conn.close().await.ok();
    Ok(())
}

#[cfg(feature = "demo")]
fn config_text(emulator: &Emulator, ledger: &Path, state: &Path, reports: &Path) -> String {
    format!(
        r#"# Written by `recon demo`: a real job config, pointed at the emulator.
[defaults]
timezone = "UTC"
reports = "{reports}"
state = "sqlite://{state}"

[jobs.stripe_charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "last:24h"
grace = "15m"

[jobs.stripe_charges.source]
type = "stripe"
object = "charges"
api_key = "{key}"
base_url = "{base}"

[jobs.stripe_charges.target]
type = "sql"
url = "sqlite://{ledger}"
table = "payments"
key = "stripe_charge_id"
columns = {{ amount = "amount_cents", created = "created_at" }}

[jobs.stripe_charges.backfill]
mode = "insert"
max_records = 500
max_ratio = 0.05
"#,
        reports = reports.display(),
        state = state.display(),
        key = emulator.api_key,
        base = emulator.base_url,
        ledger = ledger.display(),
    )
}

/// The `recon demo` command.
#[cfg(feature = "demo")]
pub fn run(args: DemoArgs) -> Result<Status> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports/demo"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(demo(out, args.via == "webhook"))
}

/// A planted charge: ID, amount in minor units, currency, status, created.
#[cfg(feature = "demo")]
type Charge = (String, i64, &'static str, &'static str, i64);

/// Charges over the 24 hours before `now`, newest last; the last few
/// minutes old.
#[cfg(feature = "demo")]
fn charges(now: i64) -> Vec<Charge> {
    let mut rng = Lcg(0x5eed);
    let mut charges = Vec::with_capacity(CHARGES);
    for i in 0..CHARGES {
        let age = if i >= CHARGES - 4 {
            60 * (5 + (CHARGES - i) as i64)
        } else {
            3600 + (CHARGES - i) as i64 * 27
        };
        let (cur, scale) = CURRENCIES[(rng.next() % 5) as usize];
        let amount = (500 + (rng.next() % 20_000) as i64) * scale;
        let status = if rng.next().is_multiple_of(20) {
            "failed"
        } else {
            "succeeded"
        };
        let id = format!(
            "ch_3Q{:011x}{:011x}",
            rng.next() & 0xfff_ffff_ffff,
            (rng.next() ^ i as u64) & 0xfff_ffff_ffff
        );
        charges.push((id, amount, cur, status, now - age));
    }
    charges
}

/// The three runs a newcomer sees: dry run, apply, rerun.
#[cfg(feature = "demo")]
async fn steps(config: &Path, out: &Path) -> Result<Status> {
    let mut last = Status::Clean;
    for (name, dry_run) in [("1-dry-run", true), ("2-apply", false), ("3-rerun", false)] {
        println!(
            "== {name}{}",
            if dry_run { " (changes nothing)" } else { "" }
        );
        let plan = RunPlan::from_args(&RunArgs {
            config: config.to_path_buf(),
            job: None,
            window: None,
            dry_run,
            out: Some(out.join(name)),
            max_records: None,
            max_ratio: None,
            metrics_file: None,
        })?;
        last = execute(plan).await?.status;
        println!("exit status {}\n", last.code());
    }
    Ok(last)
}

#[cfg(feature = "demo")]
async fn demo(out: PathBuf, via_webhook: bool) -> Result<Status> {
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let work = out.join("work");
    if work.exists() {
        std::fs::remove_dir_all(&work)
            .with_context(|| format!("cannot clear {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    let emulator = Emulator::start(EmulatorConfig::default())
        .await
        .context("starting the Stripe emulator on 127.0.0.1")?;

    let charges = charges(jiff::Timestamp::now().as_second());
    for (id, amount, cur, status, created) in &charges {
        emulator.insert(
            ObjectKind::Charge,
            Emulator::charge(id, *amount, cur, status, *created),
        );
    }
    let mut story = Story {
        gaps: 0,
        pending: 4,
        orphans: 3,
        mismatches: 0,
        duplicates: 0,
    };
    let ledger = work.join("ledger.db");
    build_ledger(&ledger, &charges, &mut story).await?;
    let config = work.join("recon.toml");
    let mut text = config_text(
        &emulator,
        &ledger,
        &work.join("recon-state.db"),
        &out.join("runs"),
    );
    let handler = if via_webhook {
        let handler = super::demo_webhook::start(&ledger).await?;
        text.push_str(&super::demo_webhook::config(&handler));
        Some(handler)
    } else {
        None
    };
    std::fs::write(&config, text)?;
    println!(
        "recon demo: Stripe emulator at {} with {} charges in USD, EUR, GBP, JPY and KWD;",
        emulator.base_url, CHARGES
    );
    println!(
        "SQLite ledger {} with planted: {} gaps, {} orphans, {} mismatches, {} duplicates, and {} charges minutes old.\n",
        ledger.display(),
        story.gaps,
        story.orphans,
        story.mismatches,
        story.duplicates,
        story.pending
    );
    if let Some(h) = &handler {
        println!("{}\n", super::demo_webhook::intro(h));
    }
    let last = steps(&config, &out).await?;
    if let Some(h) = &handler {
        println!("{}\n", super::demo_webhook::outro(h));
    }
    emulator.shutdown().await;
    println!(
        "The reports are in {}/{{1-dry-run,2-apply,3-rerun}}; reports/README.md explains every column.",
        out.display()
    );
    println!("Orphans, mismatches and duplicates stay open on purpose: recon reports them and never deletes or guesses.");
    Ok(last)
}

/// The `recon demo` command of a build without the `demo` feature: there is
/// no emulator to run it against, so it says so and exits with status 2.
#[cfg(not(feature = "demo"))]
pub fn run(_args: DemoArgs) -> Result<Status> {
    anyhow::bail!(
        "this build of recon has no demo: it was compiled without the `demo` cargo feature, \
         which embeds the Stripe emulator and is off by default so that release builds ship \
         no emulator. Run it with `cargo run --release --features demo -- demo`, or build \
         with `cargo build --release --features demo`"
    )
}
