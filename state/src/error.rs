//! What can go wrong in the state store.

use crate::RunStatus;

/// Why the state store could not do what was asked. Messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The URL names no supported backend.
    #[error("unsupported state URL `{url}`: {reason}")]
    UnsupportedUrl {
        /// The URL, password redacted.
        url: String,
        /// What is wrong and what to use instead.
        reason: String,
    },
    /// The database could not be reached or opened.
    #[error("cannot open the state database {url}: {source}; {hint}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// What to check.
        hint: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The schema could not be created or upgraded.
    #[error("cannot prepare the schema of the state database {url}: {message}")]
    Migrate {
        /// The URL, password redacted.
        url: String,
        /// What failed.
        message: String,
    },
    /// Another run of the job holds the run lock.
    #[error("job `{job}` is already running (since {since}, owner {owner}); {hint}")]
    Locked {
        /// The job.
        job: String,
        /// Who holds the lock (`host:pid:random`), or `unknown`.
        owner: String,
        /// When it was acquired, RFC 3339, or `an unknown time`.
        since: String,
        /// What happens if that run died, and what to do.
        hint: String,
    },
    /// No run has this id.
    #[error("no run `{0}` in the state database; pass the id that start_run returned")]
    UnknownRun(String),
    /// An argument is outside what the store accepts.
    #[error("{0}")]
    Invalid(String),
    /// A statement failed.
    #[error("state database {url}: {context}: {source}")]
    Database {
        /// The URL, password redacted.
        url: String,
        /// What recon was doing.
        context: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A stored value cannot be read back.
    #[error("state database {url}: {context}: {detail}; was the database edited by hand?")]
    Corrupt {
        /// The URL, password redacted.
        url: String,
        /// What was being read.
        context: String,
        /// The offending value.
        detail: String,
    },
}

impl From<std::convert::Infallible> for StateError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl TryFrom<&str> for RunStatus {
    type Error = StateError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}
