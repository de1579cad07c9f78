//! Typed errors of connectors.

use crate::money::MoneyError;

/// Where in an input a bad value sits: `payments.csv line 12`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location(pub String);

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Everything a connector can fail with. Messages name the input and say
/// what to do; none ever contains a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// The input could not be opened or read.
    #[error("cannot read {what}")]
    Io {
        /// What was being read.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A record or value in the input is malformed.
    #[error("{location}: {message}")]
    Malformed {
        /// File and line, or object and field.
        location: Location,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A field the job needs is not in the input.
    #[error("{location}: {message}")]
    MissingField {
        /// The input.
        location: Location,
        /// Which field, and which fields exist.
        message: String,
    },
    /// An amount or currency is malformed.
    #[error("{location}: {source}")]
    Money {
        /// Where.
        location: Location,
        /// Why.
        #[source]
        source: MoneyError,
    },
    /// The connector is configured in a way it cannot work with.
    #[error("{0}")]
    Config(String),
    /// The system cannot be reached (connection refused, DNS, timeout).
    #[error("{0}")]
    Unreachable(String),
    /// The database answered with an error.
    #[error("{0}")]
    Database(String),
    /// The target cannot take idempotent writes.
    #[error("{0}")]
    NotIdempotent(String),
    /// The connection to the system was lost (refused, reset, timed out,
    /// database gone, server shut down) while a write was in flight: the
    /// records of that call may or may not be committed. The run stops;
    /// the next run settles them by key lookup.
    #[error("{0}")]
    ConnectionLost(String),
}
