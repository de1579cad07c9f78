//! recon: proves that two systems agree.
//!
//! The binary (`main.rs`) parses arguments with clap ([`cli`]) and hands
//! them to a command ([`commands`]), which validates them into a plan,
//! streams records through the pure [`diff`] engine and writes [`report`]s.
//! See ARCHITECTURE.md for the map and the invariants.

pub mod cli;
pub mod commands;
pub mod config;
pub mod diff;
pub mod faults;
pub mod interrupt;
pub mod logging;
pub mod memory;
pub mod ops;
pub mod pipeline;
pub mod plan;
pub mod priority;
pub mod registry;
pub mod report;
/// The run state store (crate `recon-state`).
pub use recon_state as state;
pub mod webhook;
pub mod window;

/// The exit status contract, as `diff(1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// 0: nothing left open.
    Clean,
    /// 1: discrepancies remain; reports written.
    Discrepancies,
    /// 2: trouble (bad config or input, connector failure, safety limit).
    Trouble,
}

impl Status {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Status::Clean => 0,
            Status::Discrepancies => 1,
            Status::Trouble => 2,
        }
    }
}

impl From<Status> for std::process::ExitCode {
    fn from(s: Status) -> Self {
        std::process::ExitCode::from(s.code())
    }
}
