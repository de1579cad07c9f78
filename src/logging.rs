//! Structured logs on stderr, filtered by `--log` / `RECON_LOG`.
//!
//! Every log line passes through [`recon_core::scrub`] before it is
//! written: a secret a driver, a server or a library logs in its own words
//! (at any level, `trace` included) is replaced by `***`.

use std::io::Write;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a bad filter falls back to `warn`.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(ScrubbedStderr)
        .with_target(false)
        .try_init();
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
        let _ = std::io::stderr().lock().write_all(clean.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
