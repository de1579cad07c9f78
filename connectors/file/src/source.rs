//! The file connector behind the `Source` trait, for `recon run` jobs whose
//! source or target is an export file.

use std::sync::Mutex;

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
            state: Mutex::new(Some(FileReader::open(self.spec.clone(), &self.schema))),
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
        FileReader::open(self.spec.clone(), &self.schema)?;
        let bytes = std::fs::metadata(&self.spec.path)
            .map(|m| m.len())
            .unwrap_or(0);
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
        let (spec, schema) = (self.spec.clone(), self.schema.clone());
        let wanted: std::collections::HashSet<String> = keys.iter().cloned().collect();
        tokio::task::spawn_blocking(move || lookup_in_file(spec, &schema, &wanted))
            .await
            .map_err(|e| ConnectorError::Config(format!("the file lookup stopped: {e}")))?
    }
}

/// The records of `wanted` keys in a file, every copy, in file order.
fn lookup_in_file(
    spec: FileSpec,
    schema: &Schema,
    wanted: &std::collections::HashSet<String>,
) -> Result<Vec<Record>, ConnectorError> {
    let mut reader = FileReader::open(spec, schema)?;
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
        Ok(Box::new(FileReader::open(self.spec.clone(), &self.schema)?))
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
        let source = FileSource {
            spec: FileSpec {
                path,
                key_column: "id".into(),
                columns: vec!["at".into()],
                currency_column: None,
                amount_format: Default::default(),
                max_record_bytes: crate::DEFAULT_MAX_RECORD_BYTES,
            },
            schema,
            time_field: Some(0),
        };
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
}
