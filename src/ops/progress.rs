//! The run's spans (for `--log-format json`) and progress on a terminal.
//!
//! Progress is counted at batch and page boundaries, never per record: the
//! file feed adds a batch's size (8,192 rows) and its byte position with a
//! few relaxed atomic stores, an API side a page's size, lookups and writes
//! their batch's size. A display thread reads the counters ten times a
//! second and sets one line on stderr (drawn by indicatif), only when stderr is a terminal
//! and logs are in the human format; otherwise there is no thread at all
//! and nothing but the final summary is printed (cron, pipes, log files).
//!
//! ```text
//! source 1,204,224 rec 402,113/s [#########-----------] 45% ETA 0:04 · target 0 rec · 12 pages · 40 lookups · 0 writes · 52 requests
//! ```

use std::future::Future;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use tracing::Instrument;

/// The target of recon's own spans; the human log format leaves them out
/// so its lines stay as they were.
pub const SPAN_TARGET: &str = "recon::run";

/// The span of one run: `job` now, `run_id` once the state store gave one
/// ([`super::note_run`] records it).
pub fn run_span(job: &str) -> tracing::Span {
    super::note_job(job);
    tracing::info_span!(target: SPAN_TARGET, "run", job = job, run_id = tracing::field::Empty)
}

/// Runs `work` inside the phase span `name` (read, diff, backfill, report).
/// The report phase prints the summary: the progress line goes first.
pub async fn phase<F: Future>(name: &'static str, work: F) -> F::Output {
    if name == "report" {
        pause();
    }
    let span = tracing::info_span!(target: SPAN_TARGET, "phase", phase = name);
    work.instrument(span).await
}

/// Counters of one side.
struct SideCounters {
    records: AtomicU64,
    /// Bytes read and the file's size (files only; 0 = unknown).
    bytes: AtomicU64,
    bytes_total: AtomicU64,
}

impl SideCounters {
    const fn new() -> SideCounters {
        SideCounters {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            bytes_total: AtomicU64::new(0),
        }
    }
}

static SOURCE: SideCounters = SideCounters::new();
static TARGET: SideCounters = SideCounters::new();
static PAGES: AtomicU64 = AtomicU64::new(0);
static LOOKUPS: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);

fn side(source: bool) -> &'static SideCounters {
    if source {
        &SOURCE
    } else {
        &TARGET
    }
}

/// A file side parsed a batch of `records`; `read` of `total` bytes so far.
pub fn file_batch(source: bool, records: usize, read: u64, total: u64) {
    let s = side(source);
    let before = s.records.fetch_add(records as u64, Ordering::Relaxed);
    s.bytes.store(read, Ordering::Relaxed);
    s.bytes_total.store(total, Ordering::Relaxed);
    // Test builds only: a reader slowed on purpose (called on the file
    // side's own thread, never on the async runtime).
    if let Some(pause) = crate::faults::read_delay() {
        std::thread::sleep(pause);
    }
    // Test builds only: a signal once the target has this many records.
    if let Some(at) = crate::faults::sigterm_at_target_records() {
        if !source && before + records as u64 >= at {
            crate::faults::send_sigterm_once();
        }
    }
}

/// An API or database side delivered a page of `records`.
pub fn page(source: bool, records: usize) {
    side(source)
        .records
        .fetch_add(records as u64, Ordering::Relaxed);
    PAGES.fetch_add(1, Ordering::Relaxed);
}

/// `keys` were looked up by key.
pub fn looked_up(keys: usize) {
    LOOKUPS.fetch_add(keys as u64, Ordering::Relaxed);
}

/// `records` were sent to the target.
pub fn wrote(records: usize) {
    WRITES.fetch_add(records as u64, Ordering::Relaxed);
}

/// What the counters say at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Records read per side (source, target).
    pub records: [u64; 2],
    /// Bytes read per side, and the files' sizes (0 = unknown).
    pub bytes: [(u64, u64); 2],
    /// Pages read from APIs and databases.
    pub pages: u64,
    /// Keys looked up.
    pub lookups: u64,
    /// Records written.
    pub writes: u64,
    /// HTTP requests sent.
    pub requests: u64,
}

impl Snapshot {
    /// Now.
    pub fn take() -> Snapshot {
        let requests = recon_core::http::traffic().requests.values().sum();
        let get = |s: &SideCounters| {
            (
                s.records.load(Ordering::Relaxed),
                (
                    s.bytes.load(Ordering::Relaxed),
                    s.bytes_total.load(Ordering::Relaxed),
                ),
            )
        };
        let (sr, sb) = get(&SOURCE);
        let (tr, tb) = get(&TARGET);
        Snapshot {
            records: [sr, tr],
            bytes: [sb, tb],
            pages: PAGES.load(Ordering::Relaxed),
            lookups: LOOKUPS.load(Ordering::Relaxed),
            writes: WRITES.load(Ordering::Relaxed),
            requests,
        }
    }
}

/// `1,204,224`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `0:04`, `1:02:03`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// One progress line: records per side with their rate since the side
/// started (`started` per side: when its first record came), a bar and ETA
/// where the side's size is known, then pages, lookups, writes, requests.
/// At most `width` characters.
pub fn render(now: &Snapshot, rates: [Option<f64>; 2], width: usize) -> String {
    let mut parts = Vec::new();
    for (i, name) in ["source", "target"].into_iter().enumerate() {
        let mut part = format!("{name} {} rec", grouped(now.records[i]));
        if let Some(rate) = rates[i].filter(|r| r.is_finite() && *r > 0.0) {
            part.push_str(&format!(" {}/s", grouped(rate.round() as u64)));
        }
        let (read, total) = now.bytes[i];
        if total > 0 && read < total {
            let share = read as f64 / total as f64;
            let filled = (share * 20.0).floor() as usize;
            part.push_str(&format!(
                " [{}{}] {:>2}%",
                "#".repeat(filled),
                "-".repeat(20 - filled),
                (share * 100.0).floor() as u64
            ));
            if let Some(rate) = rates[i].filter(|r| *r > 0.0 && now.records[i] > 0) {
                // Records still to come, at the bytes-per-record seen so far.
                let left = (total - read) as f64 / (read as f64 / now.records[i] as f64);
                part.push_str(&format!(
                    " ETA {}",
                    clock(Duration::from_secs_f64(left / rate))
                ));
            }
        }
        parts.push(part);
    }
    // What this run does at all (a `recon diff` has no pages or requests).
    for (n, what) in [
        (now.pages, "pages"),
        (now.lookups, "lookups"),
        (now.writes, "writes"),
        (now.requests, "requests"),
    ] {
        if n > 0 {
            parts.push(format!("{} {what}", grouped(n)));
        }
    }
    let mut line = parts.join(" · ");
    if line.chars().count() > width {
        line = line.chars().take(width.saturating_sub(1)).collect();
        line.push('…');
    }
    line
}

/// The progress line on the terminal while a display runs; `None` when
/// there is none or it was paused for the summary. indicatif draws it (at
/// most ten times a second), clears it, and takes it off the screen around
/// other output ([`around_output`]).
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn bar() -> Option<ProgressBar> {
    BAR.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Runs `write` (a log line, a message) with the progress line off the
/// screen, so that the output starts on a clean line; the line is drawn
/// again after it. Without a display, just runs `write`.
pub fn around_output<R>(write: impl FnOnce() -> R) -> R {
    match bar() {
        Some(line) => line.suspend(write),
        None => write(),
    }
}

/// Clears the progress line and draws no more (the summary follows).
pub fn pause() {
    let line = BAR.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(line) = line {
        line.finish_and_clear();
    }
}

/// The display thread; stops and clears its line when dropped.
pub struct Display {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Display {
    /// Starts the display when stderr is a terminal and logs are in the
    /// human format; otherwise does nothing.
    pub fn start() -> Display {
        let enabled = std::io::stderr().is_terminal()
            && crate::logging::format() == crate::logging::Format::Text;
        Display::start_if(enabled)
    }

    fn start_if(enabled: bool) -> Display {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = enabled.then(|| {
            let line = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
            line.set_style(ProgressStyle::with_template("{wide_msg}").expect("a valid template"));
            *BAR.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
            let stop = stop.clone();
            std::thread::spawn(move || draw(&stop))
        });
        Display { stop, thread }
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            pause();
        }
    }
}

/// Per side: when its first record came and its count then, and when its
/// count last grew (a finished side keeps its rate).
#[derive(Default)]
struct Rates {
    first: [Option<(Instant, u64)>; 2],
    last: [Option<(Instant, u64)>; 2],
}

impl Rates {
    /// Records per second of each side since it started, once it has read
    /// for half a second.
    fn update(&mut self, now: &Snapshot, at: Instant) -> [Option<f64>; 2] {
        let mut rates = [None, None];
        for (i, rate) in rates.iter_mut().enumerate() {
            if now.records[i] == 0 {
                continue;
            }
            let (began, base) = *self.first[i].get_or_insert((at, now.records[i]));
            if self.last[i].is_none_or(|(_, n)| n != now.records[i]) {
                self.last[i] = Some((at, now.records[i]));
            }
            let grew = self.last[i].map_or(began, |(t, _)| t);
            let secs = grew.duration_since(began).as_secs_f64();
            if secs >= 0.5 {
                *rate = Some((now.records[i] - base) as f64 / secs);
            }
        }
        rates
    }
}

/// Renders the line from the counters ten times a second until `stop`
/// (at most `COLUMNS` wide; indicatif cuts it to the terminal's width).
fn draw(stop: &AtomicBool) {
    let width = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
        .unwrap_or(120)
        .max(20);
    let mut rates = Rates::default();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let now = Snapshot::take();
        let rate = rates.update(&now, Instant::now());
        match bar() {
            Some(line) => line.set_message(render(&now, rate, width - 1)),
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_counts_rates_bar_and_eta() {
        let s = Snapshot {
            records: [1_204_224, 500],
            bytes: [(45_000_000, 100_000_000), (0, 0)],
            pages: 12,
            lookups: 40,
            writes: 3,
            requests: 52,
        };
        let line = render(&s, [Some(400_000.0), Some(250.4)], 400);
        assert!(
            line.starts_with("source 1,204,224 rec 400,000/s [#########-----------] 45%"),
            "{line}"
        );
        // 55 MB left at 45 MB per 1,204,224 records: 1,471,829 records at 400,000/s.
        assert!(line.contains("ETA 0:03"), "{line}");
        assert!(line.contains("target 500 rec 250/s ·"), "{line}");
        assert!(
            !line.contains("target 500 rec 250/s ["),
            "no bar without a size: {line}"
        );
        assert!(
            line.ends_with("12 pages · 40 lookups · 3 writes · 52 requests"),
            "{line}"
        );
        let short = render(&s, [None, None], 30);
        assert_eq!(short.chars().count(), 30, "{short}");
        assert!(short.ends_with('…'));
    }

    #[test]
    fn a_rate_shows_after_half_a_second_and_a_finished_side_keeps_it() {
        let t0 = Instant::now();
        let mut rates = Rates::default();
        let at = |records: u64| Snapshot {
            records: [records, 0],
            ..Snapshot::default()
        };
        assert_eq!(rates.update(&at(1_000), t0), [None, None]);
        let early = rates.update(&at(2_000), t0 + Duration::from_millis(400));
        assert_eq!(early, [None, None], "under half a second: no rate yet");
        let r = rates.update(&at(5_000), t0 + Duration::from_secs(2));
        assert_eq!(r, [Some(2_000.0), None], "4,000 records in 2 s");
        // The side stops growing: its rate stays what it was, not falling.
        let later = rates.update(&at(5_000), t0 + Duration::from_secs(10));
        assert_eq!(later, [Some(2_000.0), None]);
    }

    #[test]
    fn numbers_and_clocks_read_well() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(12_345_678), "12,345,678");
        assert_eq!(clock(Duration::from_secs(4)), "0:04");
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
    }

    #[test]
    fn a_finished_file_shows_no_bar_and_no_display_runs_when_disabled() {
        let s = Snapshot {
            records: [10, 0],
            bytes: [(100, 100), (0, 0)],
            ..Snapshot::default()
        };
        assert!(!render(&s, [Some(5.0), None], 200).contains('['));
        let d = Display::start_if(false);
        assert!(d.thread.is_none());
    }
}
