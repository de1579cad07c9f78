//! The file connector behind the `Source` trait, for `recon run` jobs whose
//! source or target is an export file.

use std::fs::File;
use std::sync::{Arc, Mutex};

use futures_core::stream::BoxStream;
use recon_core::{ConnectorError, FileFeed, Page, Record, Schema, Source, Unplaced, Value, Window};

use crate::{FileReader, FileSpec, ReadError};

/// Records per page handed to the pipeline.
const PAGE: usize = 1000;

/// An export file as a [`Source`]. When `time_field` names a timestamp
/// field of the schema, only records inside the window are read; records
/// whose time cell is empty (or JSON null, or missing) belong to no window
/// and are listed in the pages' `unplaced` instead. A time cell that is not a
/// timestamp stops the read with an error naming its line.
#[derive(Clone, Debug)]
pub struct FileSource {
    /// Which columns feed which fields.
    pub spec: FileSpec,
    /// The job's canonical fields.
    pub schema: Schema,
    /// Schema index of the creation-time field used for windows.
    pub time_field: Option<usize>,
    /// The file this source's first read opened (its probe, in a run):
    /// every later read (the pages or the feed, the look-ups of edge
    /// records and of duplicated IDs' copies) reads that file, not the
    /// path again, so a run sees one version of an export even when a new
    /// one is renamed over the path meanwhile.
    opened: Arc<Mutex<Option<Arc<File>>>>,
}

/// Reads one page at a time from an open reader; the file is never held
/// in memory as rows.
struct PageStream<F> {
    state: Mutex<Option<Result<FileReader, ConnectorError>>>,
    keep: F,
    /// The time field's column, for unplaced rows.
    time_column: String,
}

/// What the stream's filter makes of a record.
enum Keep {
    Record,
    Skip,
    Unplaced,
}

impl<F: Fn(&Record) -> Keep> PageStream<F> {
    fn next_page(&self) -> Option<Result<Page, ConnectorError>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut reader = match state.take()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let mut page = Page::default();
        let result = reader.for_each_while(|key, values, _| {
            let record = Record {
                key: key.to_string(),
                values: values.iter().map(|v| v.to_owned_value()).collect(),
            };
            match (self.keep)(&record) {
                Keep::Record => page.records.push(record),
                Keep::Skip => {}
                Keep::Unplaced => page
                    .unplaced
                    .push(Unplaced::empty(record.key, &self.time_column)),
            }
            Ok::<bool, std::convert::Infallible>(page.records.len() + page.unplaced.len() < PAGE)
        });
        match result {
            // End of file: the stream ends after this page.
            Ok(true) if page.records.is_empty() && page.unplaced.is_empty() => None,
            Ok(true) => Some(Ok(page)),
            Ok(false) => {
                *state = Some(Ok(reader));
                Some(Ok(page))
            }
            Err(ReadError::Connector(e)) => Some(Err(e)),
            Err(ReadError::Caller(never)) => match never {},
        }
    }
}

impl<F: Fn(&Record) -> Keep + Unpin> futures_core::Stream for PageStream<F> {
    type Item = Result<Page, ConnectorError>;
    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        // Local file reads are short and bounded by one page; they run inline.
        std::task::Poll::Ready(self.next_page())
    }
}

impl FileSource {
    /// A source reading `spec`'s file as `schema`'s fields, windowed by
    /// the field at `time_field` when there is one.
    pub fn new(spec: FileSpec, schema: Schema, time_field: Option<usize>) -> FileSource {
        FileSource {
            spec,
            schema,
            time_field,
            opened: Arc::default(),
        }
    }

    /// This source, reading `file` (a reader's
    /// [`FileReader::shared_file`]) instead of opening the path.
    pub fn with_file(self, file: Arc<File>) -> FileSource {
        *self.opened.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
        self
    }

    /// A reader from the start of the file this source opened first
    /// (opening it now if none was).
    fn reader(&self) -> Result<FileReader, ConnectorError> {
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        match &*opened {
            Some(file) => FileReader::of_file(self.spec.clone(), &self.schema, Arc::clone(file)),
            None => {
                let reader = FileReader::open(self.spec.clone(), &self.schema)?;
                *opened = Some(reader.shared_file());
                Ok(reader)
            }
        }
    }

    /// The column that holds the time field.
    fn time_column_name(&self) -> Option<String> {
        self.time_field.map(|i| {
            self.spec
                .columns
                .get(i)
                .cloned()
                .unwrap_or_else(|| self.schema.fields[i].name.clone())
        })
    }

    fn stream<'a>(
        &'a self,
        keep: impl Fn(&Record) -> Keep + Send + Sync + Unpin + 'a,
    ) -> BoxStream<'a, Result<Page, ConnectorError>> {
        let time_column = self.time_column_name().unwrap_or_default();
        Box::pin(PageStream {
            state: Mutex::new(Some(self.reader())),
            keep,
            time_column,
        })
    }
}

#[async_trait::async_trait]
impl Source for FileSource {
    fn describe(&self) -> String {
        self.spec.path.display().to_string()
    }

    /// Opens the file and reads its header (CSV) or first line (JSON
    /// Lines): the file exists, is readable, and names the job's columns.
    async fn probe(&self) -> Result<recon_core::Probe, ConnectorError> {
        let bytes = self.reader()?.progress().1;
        Ok(recon_core::Probe::reached(format!(
            "{} ({bytes} bytes)",
            self.describe()
        )))
    }

    fn read(&self, window: Window) -> BoxStream<'_, Result<Page, ConnectorError>> {
        let time_field = self.time_field;
        self.stream(move |r| match time_field.map(|i| r.values.get(i)) {
            None => Keep::Record,
            Some(Some(Value::Timestamp(t))) if window.contains(*t) => Keep::Record,
            Some(Some(Value::Null) | None) => Keep::Unplaced,
            Some(Some(_)) => Keep::Skip,
        })
    }

    fn reads_whole(&self) -> bool {
        self.time_field.is_none()
    }

    fn as_file_feed(&self) -> Option<&dyn FileFeed> {
        Some(self)
    }

    async fn lookup(&self, keys: &[String]) -> Result<Vec<Record>, ConnectorError> {
        // A scan of the whole file: on the blocking pool, so that the two
        // sides' lookups (the copies of duplicated IDs) scan at once and no
        // async worker is held.
        let reader = self.reader()?;
        let wanted: std::collections::HashSet<String> = keys.iter().cloned().collect();
        tokio::task::spawn_blocking(move || lookup_in_file(reader, &wanted))
            .await
            .map_err(|e| ConnectorError::Config(format!("the file lookup stopped: {e}")))?
    }
}

/// The records of `wanted` keys in a file, every copy, in file order.
fn lookup_in_file(
    mut reader: FileReader,
    wanted: &std::collections::HashSet<String>,
) -> Result<Vec<Record>, ConnectorError> {
    let mut found = Vec::new();
    reader
        .for_each_of_keys(&|key| wanted.contains(key), |key, values, _| {
            found.push(Record {
                key: key.to_string(),
                values: values.iter().map(|v| v.to_owned_value()).collect(),
            });
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(|e| match e {
            ReadError::Connector(c) => c,
            ReadError::Caller(never) => match never {},
        })?;
    Ok(found)
}

impl FileFeed for FileSource {
    fn open_reader(&self) -> Result<Box<dyn std::any::Any + Send>, ConnectorError> {
        Ok(Box::new(self.reader()?))
    }

    fn time_column(&self) -> Option<String> {
        self.time_column_name()
    }
}

impl FileReader {
    /// Opens the reader of a [`Source::as_file_feed`] capability: the file
    /// connector's own reader, typed again.
    pub fn from_feed(feed: &dyn FileFeed) -> Result<FileReader, ConnectorError> {
        match feed.open_reader()?.downcast::<FileReader>() {
            Ok(reader) => Ok(*reader),
            Err(_) => Err(ConnectorError::Config(
                "a file feed opened a reader other than recon_file's FileReader; \
                 implement FileFeed only for recon_file::FileSource"
                    .into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::{Field, FieldKind};

    #[test]
    fn a_file_source_is_a_file_feed_whose_reader_reads_its_rows() {
        let path = std::env::temp_dir().join(format!("recon-file-feed-{}.csv", std::process::id()));
        std::fs::write(&path, "id,at\nk1,2024-01-01T00:00:00Z\nk2,\n").unwrap();
        let schema = Schema {
            fields: vec![Field {
                name: "at".into(),
                kind: FieldKind::Timestamp,
                compared: true,
            }],
        };
        let source = FileSource::new(
            FileSpec {
                path,
                key_column: "id".into(),
                columns: vec!["at".into()],
                currency_column: None,
                amount_format: Default::default(),
                max_record_bytes: crate::DEFAULT_MAX_RECORD_BYTES,
            },
            schema,
            Some(0),
        );
        let feed = source.as_file_feed().expect("a file source is a file feed");
        assert_eq!(feed.time_column().as_deref(), Some("at"));
        let mut reader = FileReader::from_feed(feed).unwrap();
        let mut keys = Vec::new();
        reader
            .for_each(|key, _, _| {
                keys.push(key.to_string());
                Ok::<(), std::convert::Infallible>(())
            })
            .map_err(|_| "read failed")
            .unwrap();
        std::fs::remove_file(&source.spec.path).unwrap();
        assert_eq!(keys, ["k1", "k2"]);
    }

    /// A new version of the export renamed over the path after the run
    /// opened it (its probe), then the path removed: the feed's reader,
    /// the pages and the look-ups all read the version the probe opened.
    /// A source made afterwards reads the new one.
    #[test]
    fn every_read_of_a_source_reads_the_file_its_first_read_opened() {
        let dir = std::env::temp_dir().join(format!("recon-file-version-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("export.csv");
        std::fs::write(
            &path,
            "id,at\nk1,2024-01-01T00:00:00Z\nk2,2024-01-02T00:00:00Z\n",
        )
        .unwrap();
        let schema = Schema {
            fields: vec![Field {
                name: "at".into(),
                kind: FieldKind::Timestamp,
                compared: true,
            }],
        };
        let spec = FileSpec {
            path: path.clone(),
            key_column: "id".into(),
            columns: vec!["at".into()],
            currency_column: None,
            amount_format: Default::default(),
            max_record_bytes: crate::DEFAULT_MAX_RECORD_BYTES,
        };
        let source = FileSource::new(spec.clone(), schema.clone(), None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(source.probe()).unwrap();
        let new = dir.join("export.csv.tmp");
        std::fs::write(&new, "id,at\nk9,2024-01-03T00:00:00Z\n").unwrap();
        std::fs::rename(&new, &path).unwrap();

        let keys_of =
            |records: Vec<Record>| -> Vec<String> { records.into_iter().map(|r| r.key).collect() };
        let mut fed = Vec::new();
        FileReader::from_feed(source.as_file_feed().unwrap())
            .unwrap()
            .for_each(|key, _, _| {
                fed.push(key.to_string());
                Ok::<(), std::convert::Infallible>(())
            })
            .map_err(|_| "read failed")
            .unwrap();
        assert_eq!(fed, ["k1", "k2"]);
        let window = Window {
            start: "2024-01-01T00:00:00Z".parse().unwrap(),
            end: "2024-02-01T00:00:00Z".parse().unwrap(),
        };
        let paged = rt.block_on(async {
            let mut stream = source.read(window);
            let mut all = Vec::new();
            while let Some(page) =
                std::future::poll_fn(|cx| futures_core::Stream::poll_next(stream.as_mut(), cx))
                    .await
            {
                all.extend(page.unwrap().records);
            }
            all
        });
        assert_eq!(keys_of(paged), ["k1", "k2"]);
        std::fs::remove_file(&path).unwrap();
        let found = rt
            .block_on(source.lookup(&["k2".to_string(), "k9".to_string()]))
            .unwrap();
        assert_eq!(keys_of(found), ["k2"]);
        // A new source given a reader's file reads it, not the path.
        let file = FileReader::from_feed(source.as_file_feed().unwrap())
            .unwrap()
            .shared_file();
        let pinned = FileSource::new(spec.clone(), schema.clone(), None).with_file(file);
        let found = rt
            .block_on(pinned.lookup(&["k1".to_string(), "k9".to_string()]))
            .unwrap();
        assert_eq!(keys_of(found), ["k1"]);

        // A source made now reads what the path names now.
        std::fs::write(&path, "id,at\nk9,2024-01-03T00:00:00Z\n").unwrap();
        let later = FileSource::new(spec, schema, None);
        let found = rt
            .block_on(later.lookup(&["k2".to_string(), "k9".to_string()]))
            .unwrap();
        assert_eq!(keys_of(found), ["k9"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
