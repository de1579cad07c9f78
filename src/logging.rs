//! Structured logs on stderr, filtered by `--log` / `RECON_LOG`, in the
//! human format (default) or as JSON Lines (`--log-format json` /
//! `RECON_LOG_FORMAT=json`) for log shippers.
//!
//! Human lines are coloured only on a terminal, and never with `NO_COLOR`
//! set. Every log line passes through [`recon_core::scrub`] before it is
//! written: a secret a driver, a server or a library logs in its own words
//! (at any level, `trace` included) is replaced by `***`.
//!
//! A JSON line is one object: `timestamp` (RFC 3339), `level`, `target`,
//! `run_id` and `job` (from the run's span, or what the pipeline noted for
//! lines logged outside it; a run's first lines are held until the state
//! store gave it an id, see `JsonLines`; `null` when there is none), `phase` (read, diff, backfill, report, or `null`), `message`, the
//! event's other `fields`, and `spans` (names, outermost first). The human
//! format leaves recon's own spans out, so its lines are as they were.

use std::io::Write;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::ops::progress::SPAN_TARGET;

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// tracing's human format.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber (human format); a bad filter falls back
/// to `warn`.
pub fn init(filter: &str) {
    init_with(filter, Format::Text);
}

/// Installs the global subscriber in `format`; a bad filter falls back to
/// `warn`.
pub fn init_with(filter: &str, format: Format) {
    let _ = FORMAT.set(format);
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        Format::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(ScrubbedStderr)
                    .with_ansi(colour())
                    .with_target(false)
                    .with_filter(filter_fn(|m| !(m.is_span() && m.target() == SPAN_TARGET))),
            )
            .try_init(),
        Format::Json => registry.with(JsonLines::new(ScrubbedStderr)).try_init(),
    };
}

/// Whether human log lines are coloured: only when stderr is a terminal
/// (a file or a pipe gets plain text) and `NO_COLOR` is unset or empty
/// (https://no-color.org).
fn colour() -> bool {
    use std::io::IsTerminal;
    colour_for(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

fn colour_for(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The format [`init_with`] installed.
static FORMAT: std::sync::OnceLock<Format> = std::sync::OnceLock::new();

/// A line the user must see whatever `--log` says (the final error, a
/// warning of the run): `{level}: {message}` in the human format, a JSON
/// object like every log line with `--log-format json`. Scrubbed.
pub fn stderr_line(level: &str, message: &str) {
    stderr_line_with(level, message, Map::new());
}

/// [`stderr_line`] with the event's other `fields`, written (scrubbed) in
/// the JSON object's `fields` as the log layer writes them; the human
/// format shows the message alone.
pub fn stderr_line_with(level: &str, message: &str, fields: Map<String, Value>) {
    let message = recon_core::scrub(message);
    if FORMAT.get() != Some(&Format::Json) {
        crate::ops::progress::around_output(|| {
            let _ = writeln!(std::io::stderr().lock(), "{level}: {message}");
        });
        return;
    }
    let note = crate::ops::current_run();
    let mut line = serde_json::json!({
        "timestamp": jiff::Timestamp::now().to_string(),
        "level": level.to_ascii_uppercase(),
        "target": "recon",
        "run_id": note.run_id,
        "job": note.job,
        "phase": null,
        "message": message,
    });
    if !fields.is_empty() {
        let fields: Map<String, Value> = fields
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(t) => (k, Value::String(recon_core::scrub(&t).into_owned())),
                v => (k, v),
            })
            .collect();
        line["fields"] = Value::Object(fields);
    }
    line["spans"] = Value::Array(Vec::new());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The format [`init_with`] installed (text when none was).
pub fn format() -> Format {
    FORMAT.get().copied().unwrap_or_default()
}

/// The JSON Lines layer, writing each line whole through `W`.
///
/// Lines of a run logged before the state store gave it an id (opening the
/// store, its migrations, the run lock) are held back, at most
/// [`HOLD_LINES`] lines for [`HOLD_FOR`], and written with the id once it
/// is known, so that every line of a run carries its `run_id`; a run that
/// never gets one (the store is unreachable, the lock is taken) writes them
/// with `run_id: null` when its span ends.
struct JsonLines<W> {
    out: W,
    held: std::sync::Mutex<Vec<Map<String, Value>>>,
    held_since: std::sync::Mutex<Option<std::time::Instant>>,
}

/// Most lines held back waiting for the run's id.
const HOLD_LINES: usize = 10_000;
/// Longest a line is held back waiting for the run's id.
const HOLD_FOR: std::time::Duration = std::time::Duration::from_secs(10);

impl<W: for<'w> MakeWriter<'w>> JsonLines<W> {
    fn new(out: W) -> JsonLines<W> {
        JsonLines {
            out,
            held: std::sync::Mutex::new(Vec::new()),
            held_since: std::sync::Mutex::new(None),
        }
    }

    fn write(&self, line: Map<String, Value>) {
        let Ok(mut text) = serde_json::to_string(&Value::Object(line)) else {
            return;
        };
        text.push('\n');
        let clean = recon_core::scrub(&text);
        let _ = self.out.make_writer().write_all(clean.as_bytes());
    }

    /// Writes the held lines with `run_id`.
    fn release(&self, run_id: &Value) {
        let lines = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        *self.held_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        for mut line in lines {
            line.insert("run_id".into(), run_id.clone());
            self.write(line);
        }
    }
}

/// Whether `span` is a run's span (see [`crate::ops::progress::run_span`]).
fn is_run_span(meta: &tracing::Metadata<'_>) -> bool {
    meta.target() == SPAN_TARGET && meta.name() == "run"
}

/// A span's fields, kept in its extensions.
struct SpanFields(Map<String, Value>);

/// Collects fields as JSON values, strings scrubbed.
struct Collect<'a>(&'a mut Map<String, Value>);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        self.0.insert(
            field.name().to_string(),
            Value::String(recon_core::scrub(&text).into_owned()),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(
            field.name().to_string(),
            Value::String(recon_core::scrub(value).into_owned()),
        );
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        let v = serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number);
        self.0.insert(field.name().to_string(), v);
    }
}

impl<S, W> Layer<S> for JsonLines<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Map::new();
        attrs.record(&mut Collect(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let run_id = {
            let mut ext = span.extensions_mut();
            let Some(f) = ext.get_mut::<SpanFields>() else {
                return;
            };
            values.record(&mut Collect(&mut f.0));
            f.0.get("run_id").cloned()
        };
        if let (true, Some(run_id)) = (is_run_span(span.metadata()), run_id) {
            self.release(&run_id);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if ctx.metadata(&id).is_some_and(is_run_span) {
            self.release(&Value::Null);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Map::new();
        event.record(&mut Collect(&mut fields));
        let meta = event.metadata();
        let (mut run_id, mut job, mut phase) = (Value::Null, Value::Null, Value::Null);
        let mut spans = Vec::new();
        let mut in_run = false;
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                in_run |= is_run_span(span.metadata());
                spans.push(Value::from(span.name()));
                if let Some(f) = span.extensions().get::<SpanFields>() {
                    for (key, slot) in [
                        ("run_id", &mut run_id),
                        ("job", &mut job),
                        ("phase", &mut phase),
                    ] {
                        if let Some(v) = f.0.get(key) {
                            *slot = v.clone();
                        }
                    }
                }
            }
        }
        // Lines logged outside the run's span (a spawned task, a driver's
        // thread, the notification after the run) belong to the run too.
        if !in_run && (run_id.is_null() || job.is_null()) {
            let note = crate::ops::current_run();
            if run_id.is_null() {
                run_id = note.run_id.map_or(Value::Null, Value::from);
            }
            if job.is_null() {
                job = note.job.map_or(Value::Null, Value::from);
            }
        }
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::from(jiff::Timestamp::now().to_string()),
        );
        line.insert("level".into(), Value::from(meta.level().as_str()));
        line.insert("target".into(), Value::from(meta.target()));
        line.insert("run_id".into(), run_id);
        line.insert("job".into(), job);
        line.insert("phase".into(), phase);
        line.insert(
            "message".into(),
            fields.remove("message").unwrap_or(Value::Null),
        );
        if !fields.is_empty() {
            line.insert("fields".into(), Value::Object(fields));
        }
        line.insert("spans".into(), Value::Array(spans));
        if in_run && line["run_id"].is_null() {
            let mut since = self.held_since.lock().unwrap_or_else(|e| e.into_inner());
            let first = *since.get_or_insert_with(std::time::Instant::now);
            drop(since);
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.push(line);
            let full = held.len() >= HOLD_LINES || first.elapsed() >= HOLD_FOR;
            drop(held);
            if full {
                self.release(&Value::Null);
            }
            return;
        }
        self.write(line);
    }
}

/// Makes one [`EventWriter`] per log event.
struct ScrubbedStderr;

impl<'a> MakeWriter<'a> for ScrubbedStderr {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> Self::Writer {
        EventWriter(Vec::with_capacity(256))
    }
}

/// Collects one formatted event; scrubs it and writes it to stderr when
/// dropped (the formatter drops its writer after each event).
struct EventWriter(Vec<u8>);

impl Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        let clean = recon_core::scrub(&text);
        crate::ops::progress::around_output(|| {
            let _ = std::io::stderr().lock().write_all(clean.as_bytes());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Lines written by the JSON layer, for the test.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;

        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    #[test]
    fn json_lines_carry_run_job_phase_and_no_secret() {
        let secret = "JsonLog/pw#1@x?y";
        recon_core::register_secret(secret);
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(JsonLines::new(lines.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let run = crate::ops::progress::run_span("charges");
            let _r = run.enter();
            tracing::warn!("before the id");
            run.record("run_id", "r-42");
            let read = tracing::info_span!(target: SPAN_TARGET, "phase", phase = "read");
            let _p = read.enter();
            tracing::warn!(
                rows = 3u64,
                url = format!("postgres://u:{secret}@h/db"),
                "reading \"{secret}\""
            );
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains(secret), "{text}");
        let parsed: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(parsed.len(), 2, "{text}");
        assert_eq!(parsed[0]["job"], "charges");
        assert_eq!(parsed[0]["message"], "before the id");
        assert_eq!(parsed[0]["run_id"], "r-42", "held until the id was known");
        assert_eq!(parsed[1]["run_id"], "r-42");
        assert_eq!(parsed[1]["phase"], "read");
        assert_eq!(parsed[1]["level"], "WARN");
        assert_eq!(parsed[1]["fields"]["rows"], 3);
        assert_eq!(parsed[1]["fields"]["url"], "postgres://u:***@h/db");
        assert_eq!(parsed[1]["message"], "reading \"***\"");
        assert_eq!(parsed[1]["spans"], serde_json::json!(["run", "phase"]));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour_for(true, None));
        assert!(colour_for(true, Some(OsStr::new(""))));
        assert!(!colour_for(true, Some(OsStr::new("1"))));
        assert!(!colour_for(false, None));
        assert!(!colour_for(false, Some(OsStr::new(""))));
    }

    #[test]
    fn an_event_is_written_whole_after_scrubbing() {
        recon_core::register_secret("LogSecret/42#x");
        let mut w = ScrubbedStderr.make_writer();
        write!(w, "connect postgres://u:LogSecret/42#x@h/db failed").unwrap();
        // What Drop would write.
        let text = String::from_utf8_lossy(&w.0).into_owned();
        w.0.clear();
        assert_eq!(
            recon_core::scrub(&text),
            "connect postgres://u:***@h/db failed"
        );
    }
}
