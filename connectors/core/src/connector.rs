//! The `Source` and `Target` traits every connector implements, and the
//! window they read over.

use futures_core::stream::BoxStream;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::ConnectorError;
use crate::probe::Probe;
use crate::record::Record;

/// A half-open time window `[start, end)` over record creation times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// First instant included.
    pub start: Timestamp,
    /// First instant excluded.
    pub end: Timestamp,
}

impl Window {
    /// Whether `t` falls inside the window.
    ///
    /// Told by whole seconds unless `t`'s second is a bound's. jiff keeps a
    /// second and its fraction with one sign, so a smaller second is an
    /// earlier instant. A file reader asks this of each row just after
    /// writing the row's time, whose nanoseconds it wrote in pieces: read
    /// back at once they could not be forwarded from the store buffer,
    /// and that load was half the filter's time in a typed dry run.
    #[inline]
    pub fn contains(&self, t: Timestamp) -> bool {
        let (s, lo, hi) = (t.as_second(), self.start.as_second(), self.end.as_second());
        if s != lo && s != hi {
            return lo < s && s < hi;
        }
        self.start <= t && t < self.end
    }
}

/// One page of records as a connector fetched it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// Records in the order the system returned them.
    pub records: Vec<Record>,
    /// Rows the same read met that no window can hold (their time is empty,
    /// NULL or not a timestamp), listed instead of diffed: a side reports
    /// them from the read itself, so no side is read a second time for them.
    pub unplaced: Vec<Unplaced>,
}

impl Page {
    /// A page of records and nothing unplaced.
    pub fn new(records: Vec<Record>) -> Page {
        Page {
            records,
            unplaced: Vec::new(),
        }
    }
}

/// A record that no window can hold, because its time field is empty,
/// NULL or not a timestamp. Such records are not diffed (they belong to no
/// window) but are listed in every run's `unplaced.csv`, never dropped silently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unplaced {
    /// External ID.
    pub key: String,
    /// The column (or property) that should hold the record's time.
    pub field: String,
    /// Its raw value; empty when NULL or empty.
    pub value: String,
    /// Why it cannot be placed: `null`, `empty` or `not a timestamp`.
    pub reason: String,
}

impl Unplaced {
    /// A record whose time cell (in `field`) is empty.
    pub fn empty(key: String, field: &str) -> Unplaced {
        Unplaced {
            key,
            field: field.to_string(),
            value: String::new(),
            reason: "empty".to_string(),
        }
    }
}

/// One record of a key that a side holds more than once (two invoices
/// carrying one external ID), as [`Source::duplicate_copies`] returns it:
/// the report lists every copy, with the ID the system itself gives it,
/// so that finance can find each one and decide which to keep. recon never
/// deletes or voids a copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateCopy {
    /// The system's own ID of this copy (a QuickBooks `Id`), when the
    /// connector knows one; `None` for files and tables, whose rows have
    /// no ID besides the external ID.
    pub native_id: Option<String>,
    /// The copy as the job's schema reads it.
    pub record: Record,
}

/// A system recon reads records from.
///
/// Reads are streams of pages so that memory follows the page size, not the
/// window size.
#[async_trait::async_trait]
pub trait Source: Send + Sync {
    /// A short human name for errors and logs (`stripe charges`, `payments.csv`).
    fn describe(&self) -> String;

    /// Every record whose creation time falls inside `window` (all records
    /// for sources without time, such as an export file), page by page.
    /// Values follow the schema the connector was built with. Records the
    /// same read meets whose time is empty, NULL or not a timestamp belong
    /// to no window: they go into [`Page::unplaced`], so that a run counts
    /// and lists them without reading the side again (the API connectors,
    /// whose every record has a time, have none).
    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>>;

    /// Records for exactly these keys, those that exist; used to confirm a
    /// discrepancy at the window edge before reporting it.
    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError>;

    /// Every record this side holds for each of `keys`, keys it holds more
    /// than once (the diff's duplicates), with the system's own ID of each
    /// copy where it has one: what `duplicate_copies.csv` lists. The
    /// default is [`Source::lookup`] (which returns every record carrying
    /// a key) without native IDs; a connector whose records have their own
    /// ID (QuickBooks `Id`) overrides it to name them.
    async fn duplicate_copies(
        &self,
        keys: &[String],
    ) -> Result<Vec<DuplicateCopy>, ConnectorError> {
        let found = self.lookup(keys).await?;
        Ok(found
            .into_iter()
            .map(|record| DuplicateCopy {
                native_id: None,
                record,
            })
            .collect())
    }

    /// Whether [`Source::read`] returns every record whatever the window
    /// (a file or table with no time field): a key lookup could then find
    /// nothing the read did not, and is skipped.
    fn reads_whole(&self) -> bool {
        false
    }

    /// Asked after [`Source::read`] of `window`, before edge
    /// discrepancies are looked up by key: whether this side holds no
    /// record that read left out of the diff (a table whose every row
    /// lies inside the window, as a table first backfilled holds; a row
    /// without a time counts as left out). Key lookups could then find
    /// nothing, and are skipped. The answer is of the moment it is asked:
    /// a row written inside the window after the read, which a look-up
    /// would have found, is then met by the backfill's writes instead
    /// (an insert leaves it unchanged). The default is
    /// [`Source::reads_whole`]; an error looks the keys up.
    async fn holds_nothing_outside(&self, window: Window) -> Result<bool, ConnectorError> {
        let _ = window;
        Ok(self.reads_whole())
    }

    /// What every run's report should say about how this side is read,
    /// beyond its records (a declared API that filters the window
    /// client-side, or has no lookup so that its edge discrepancies go
    /// unconfirmed); empty by default.
    fn read_notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// One cheap call that shows the system answers and accepts the
    /// credentials, without reading a window (`recon check`): the provider's
    /// limits and remaining quota where it reports them. Building the
    /// connector has already checked what needs no call (for a SQL table:
    /// the connection, the table and its columns). The default reports
    /// only [`Source::describe`].
    async fn probe(&self) -> Result<Probe, ConnectorError> {
        Ok(Probe::reached(self.describe()))
    }

    /// The records of these keys as the system's API returns them: one JSON
    /// object (as text) per key found, for replaying gaps to a webhook
    /// (`backfill.via = "webhook"`). `None` when the connector has no such
    /// form (files, tables): recon then renders the typed record.
    async fn raw_json(
        &self,
        keys: &[String],
    ) -> Result<Option<Vec<(String, String)>>, ConnectorError> {
        let _ = keys;
        Ok(None)
    }

    /// This source as a local file the run may read through its batched
    /// feed (a reader thread, rows borrowed, no pages) instead of
    /// [`Source::read`]; `None` (the default) for every other source.
    fn as_file_feed(&self) -> Option<&dyn FileFeed> {
        None
    }
}

/// An optional capability of a [`Source`] that is a local file
/// ([`Source::as_file_feed`]): the run's batched feed opens its reader once
/// per read and drives it itself, so that each row costs no dynamic call
/// and no owned record. The reader is the file connector's own type
/// (`recon_file::FileReader`, typed again by `FileReader::from_feed`):
/// this crate cannot name it, as the connector depends on this crate.
pub trait FileFeed: Send + Sync {
    /// Opens the file for one pass over its rows, in the schema's order.
    fn open_reader(&self) -> Result<Box<dyn std::any::Any + Send>, ConnectorError>;

    /// The column (or JSON path) that holds the job's time field, named on
    /// the rows no window can hold; `None` without a time field.
    fn time_column(&self) -> Option<String>;
}

/// How a backfill writes a record whose key may already exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Insert missing records; leave existing ones untouched.
    Insert,
    /// Insert missing records and overwrite compared fields of existing ones.
    Upsert,
}

/// What happened to one record of a backfill batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The record was created.
    Created,
    /// The record existed and was updated.
    Updated,
    /// The record existed and was left as it was.
    Unchanged,
    /// The target refused this record.
    Failed(String),
}

/// A system recon compares against and backfills into.
#[async_trait::async_trait]
pub trait Target: Source {
    /// Confirms that this target can write idempotently by external ID (a
    /// unique constraint on the key, a unique property, an external-ID
    /// field; a warehouse with `MERGE` could satisfy it without one), so
    /// that a write repeated after a crash never makes a second record.
    /// The error says how to fix the target.
    async fn check_idempotent(&self) -> Result<(), ConnectorError>;

    /// Writes records idempotently, keyed by external ID; one outcome per
    /// record, in order.
    async fn write(
        &self,
        records: &[Record],
        mode: WriteMode,
    ) -> Result<Vec<WriteOutcome>, ConnectorError>;

    /// Records per [`Target::write`] call during a backfill.
    fn write_batch(&self) -> usize {
        1000
    }

    /// Called once before a backfill's first write with how many records
    /// it will insert and upsert: a target whose provider meters calls
    /// (Salesforce's daily API allowance, shared with the org's other
    /// integrations) refuses here, with the figures, before anything is
    /// written. The default allows everything.
    async fn check_budget(&self, inserts: usize, upserts: usize) -> Result<(), ConnectorError> {
        let _ = (inserts, upserts);
        Ok(())
    }

    /// This target as a [`Source`], to read and look up.
    fn as_source(&self) -> &dyn Source;
}

/// How a provider delivers its webhooks, for replaying gaps to the user's
/// own handler as that provider would (`backfill.via = "webhook"`,
/// `envelope = "stripe"`): the body around the record, the headers beside
/// it and the signature headers. Implemented in the provider's connector
/// crate and listed in the binary's registry, which never looks inside one.
#[cfg(feature = "http")]
pub trait WebhookEnvelope: Send + Sync {
    /// The event type (Stripe) or topic (Shopify) when the job sets none.
    fn default_event_type(&self) -> &'static str;

    /// The body of one delivery: `object`, the source record, wrapped.
    fn wrap(&self, object: serde_json::Value, delivery: &Delivery<'_>) -> serde_json::Value;

    /// The record inside a delivered body, as a handler finds it (the
    /// inverse of [`WebhookEnvelope::wrap`]). The default: the body itself.
    fn unwrap(&self, body: serde_json::Value) -> serde_json::Value {
        body
    }

    /// Headers the provider sends with every delivery, besides recon's own
    /// and the signature: (name, value).
    fn headers(&self, delivery: &Delivery<'_>) -> Vec<(&'static str, String)> {
        let _ = delivery;
        Vec::new()
    }

    /// The provider's signature headers of one signed delivery: (name,
    /// value), made from what recon computes once per attempt.
    fn signature_headers(&self, signed: &Signed<'_>) -> Vec<(&'static str, String)>;

    /// The same headers as a plan shows them, their values masked.
    fn planned_signature_headers(&self) -> Vec<(&'static str, &'static str)>;

    /// The provider's name in messages (`"Stripe"`).
    fn provider_name(&self) -> &'static str;

    /// For envelopes whose body names its event type (Stripe's `event`
    /// object and its `type`): the type `body` carries, or `None` when
    /// `body` is not such a delivery. Envelopes that carry the type
    /// elsewhere (Shopify's topic header) keep the default, `None`, and
    /// [`WebhookEnvelope::marks_its_bodies`] `false`.
    fn event_type_in<'a>(&self, body: &'a serde_json::Value) -> Option<&'a str> {
        let _ = body;
        None
    }

    /// Whether every body of this envelope is recognised by
    /// [`WebhookEnvelope::event_type_in`], so a body it does not
    /// recognise was made with another envelope.
    fn marks_its_bodies(&self) -> bool {
        false
    }

    /// Headers a job's configured headers may never set, whichever
    /// envelope it uses (recon sets them itself).
    fn reserved_headers(&self) -> &'static [&'static str] {
        &[]
    }
}

/// What one delivery is made of, besides the record.
#[cfg(feature = "http")]
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// The event type or topic.
    pub event_type: &'a str,
    /// The delivery's `Idempotency-Key` (`recon-` + hex digest).
    pub key: &'a str,
    /// The record's time, Unix seconds, when the job has a time field.
    pub created: Option<i64>,
}

/// What recon computes to sign one delivery attempt, with the job's
/// `signing_secret`.
#[cfg(feature = "http")]
#[derive(Clone, Copy, Debug)]
pub struct Signed<'a> {
    /// recon's own signature, `t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
    /// "<t>.<body>")>` (Stripe's scheme).
    pub recon: &'a str,
    /// HMAC-SHA256(secret, body), raw bytes.
    pub body_hmac: &'a [u8],
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An instant from 1900 to 2100, with or without a fraction.
    fn instant() -> impl Strategy<Value = Timestamp> {
        (
            -2_208_988_800i64..4_102_444_800,
            prop_oneof![Just(0i32), 0..1_000_000_000],
        )
            .prop_map(|(s, n)| {
                // The fraction takes the second's sign, as jiff keeps it.
                let n = if s < 0 { -n } else { n };
                Timestamp::new(s, n).unwrap()
            })
    }

    proptest! {
        #[test]
        fn contains_is_start_to_end(a in instant(), b in instant(), t in instant(),
                                    near in 0usize..4, delta in -1i64..=1) {
            let (start, end) = (a.min(b), a.max(b));
            let window = Window { start, end };
            // Often on a bound's second, or one either side of it.
            let t = match near {
                0 => t,
                1 => Timestamp::new(start.as_second() + delta, t.subsec_nanosecond().abs())
                    .unwrap_or(t),
                2 => Timestamp::new(end.as_second() + delta, t.subsec_nanosecond().abs())
                    .unwrap_or(t),
                _ => start,
            };
            prop_assert_eq!(window.contains(t), start <= t && t < end, "{} in {}..{}", t, start, end);
        }
    }

    #[test]
    fn contains_at_the_bounds_and_across_zero() {
        let at = |s: i64, n: i32| Timestamp::new(s, n).unwrap();
        let w = Window {
            start: at(-1, -500_000_000),
            end: at(1, 500_000_000),
        };
        assert!(!w.contains(at(-2, 0)));
        assert!(!w.contains(at(-1, -600_000_000)));
        assert!(w.contains(at(-1, -500_000_000)));
        assert!(w.contains(at(-1, 0)));
        assert!(w.contains(at(0, 0)));
        assert!(w.contains(at(1, 499_999_999)));
        assert!(!w.contains(at(1, 500_000_000)));
        assert!(!w.contains(at(2, 0)));
        // Within one second, and empty.
        let w = Window {
            start: at(5, 100),
            end: at(5, 200),
        };
        assert!(w.contains(at(5, 150)) && !w.contains(at(5, 200)) && !w.contains(at(5, 99)));
        let empty = Window {
            start: at(5, 0),
            end: at(5, 0),
        };
        assert!(!empty.contains(at(5, 0)) && !empty.contains(at(4, 0)));
    }
}
