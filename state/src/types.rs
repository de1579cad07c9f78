//! The values the store keeps: run, item and discrepancy statuses, ledger
//! rows, runs as listed, reviewed plans and the open history of a job.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use recon_core::Window;

use crate::StateError;

/// Run statuses, in the order of a run's life.
pub const RUN_STATUSES: [&str; 5] = ["running", "clean", "discrepancies", "failed", "crashed"];

/// The status of a run in `recon_runs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Started, not finished (or its process died: see [`RunStatus::Crashed`]).
    Running,
    /// Finished with nothing open.
    Clean,
    /// Finished with discrepancies left open.
    Discrepancies,
    /// Stopped by an error (exit 2).
    Failed,
    /// Its process ended without finishing it; found by a later run.
    Crashed,
}

impl RunStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Clean => "clean",
            RunStatus::Discrepancies => "discrepancies",
            RunStatus::Failed => "failed",
            RunStatus::Crashed => "crashed",
        }
    }

    /// Whether a run may finish with this status.
    pub fn is_final(self) -> bool {
        self != RunStatus::Running
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = StateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "running" => Ok(RunStatus::Running),
            "clean" => Ok(RunStatus::Clean),
            "discrepancies" => Ok(RunStatus::Discrepancies),
            "failed" => Ok(RunStatus::Failed),
            "crashed" => Ok(RunStatus::Crashed),
            _ => Err(StateError::Invalid(format!(
                "unknown run status `{s}`; expected one of {}",
                RUN_STATUSES.join(", ")
            ))),
        }
    }
}

impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Backfill actions.
pub(crate) const ACTIONS: [&str; 2] = ["insert", "update"];

/// Which database holds the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

impl Backend {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        self.dialect().name()
    }
}

/// The status of one backfill item in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ItemStatus {
    /// In a plan, not yet written.
    Planned,
    /// Written to the target.
    Applied,
    /// The last write attempt failed.
    Failed,
    /// Its plan belonged to a run that crashed; a later run plans afresh.
    Superseded,
    /// The connection was lost while it was in flight: it may or may not
    /// be in the target. The next run settles it by key lookup.
    Unknown,
}

impl ItemStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::Planned => "planned",
            ItemStatus::Applied => "applied",
            ItemStatus::Failed => "failed",
            ItemStatus::Superseded => "superseded",
            ItemStatus::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ItemStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ItemStatus {
    type Err = StateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "planned" => Ok(ItemStatus::Planned),
            "applied" => Ok(ItemStatus::Applied),
            "failed" => Ok(ItemStatus::Failed),
            "superseded" => Ok(ItemStatus::Superseded),
            "unknown" => Ok(ItemStatus::Unknown),
            _ => Err(StateError::Invalid(format!(
                "unknown backfill item status `{s}`; expected planned, applied, failed, superseded or unknown"
            ))),
        }
    }
}

/// The class of a discrepancy, as kept in its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// In the source, missing in the target.
    Gap,
    /// In the target, missing in the source.
    Orphan,
    /// In both, a compared field differs.
    Mismatch,
    /// The ID appears more than once on one side.
    Duplicate,
}

impl Class {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Gap => "gap",
            Class::Orphan => "orphan",
            Class::Mismatch => "mismatch",
            Class::Duplicate => "duplicate",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Class {
    type Err = StateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gap" => Ok(Class::Gap),
            "orphan" => Ok(Class::Orphan),
            "mismatch" => Ok(Class::Mismatch),
            "duplicate" => Ok(Class::Duplicate),
            _ => Err(StateError::Invalid(format!(
                "unknown discrepancy class `{s}`; expected gap, orphan, mismatch or duplicate"
            ))),
        }
    }
}

/// The stable ID of a discrepancy across runs: `{job}:{class}:{external_id}`.
pub fn discrepancy_id(job: &str, class: Class, external_id: &str) -> String {
    format!("{job}:{class}:{external_id}")
}

/// One item of a backfill plan, as the ledger holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerItem {
    /// The record's external ID.
    pub external_id: String,
    /// `insert` or `update`.
    pub action: String,
    /// Where the item stands.
    pub status: ItemStatus,
    /// Write attempts so far.
    pub attempts: i64,
    /// The error of the last attempt, if it failed.
    pub last_error: Option<String>,
}

/// One write batch of a backfill, as the ledger records it before the
/// batch is written: one row for all its items (see migration 10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerBatch<'a> {
    /// Its number within the plan, from 0, in the order written.
    pub seq: u64,
    /// `insert` or `update`: every item of a batch has the same.
    pub action: &'static str,
    /// The external IDs it writes.
    pub keys: Vec<&'a str>,
}

/// The outcome of one write batch, as the ledger records it after the
/// write: `status` for every item but the `exceptions`, which keep their
/// own status and error (a row of their own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOutcome {
    /// The batch's number ([`LedgerBatch::seq`]).
    pub seq: u64,
    /// `insert` or `update`, as planned.
    pub action: &'static str,
    /// The status of its items (`applied` after a write that returned).
    pub status: ItemStatus,
    /// Items whose outcome differs: key, status, error.
    pub exceptions: Vec<(String, ItemStatus, Option<String>)>,
}

/// One run, as [`StateStore::recent_runs`] lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    /// The run id.
    pub id: String,
    /// The job.
    pub job: String,
    /// First instant of the window.
    pub window_start: Timestamp,
    /// First instant after the window.
    pub window_end: Timestamp,
    /// When the run started.
    pub started_at: Timestamp,
    /// When it finished; `None` while running or if it crashed.
    pub finished_at: Option<Timestamp>,
    /// Its status.
    pub status: RunStatus,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// The counts it finished with.
    pub counts: Option<serde_json::Value>,
    /// Where its reports are.
    pub report_dir: Option<String>,
    /// Why it failed or crashed.
    pub error: Option<String>,
}

/// Every class, in the order of its discriminant.
pub(crate) const CLASSES: [Class; 4] =
    [Class::Gap, Class::Orphan, Class::Mismatch, Class::Duplicate];

/// The open discrepancies of one class: external ID → first seen.
pub(crate) type OpenIds = HashMap<String, Timestamp, foldhash::fast::RandomState>;

/// Discrepancies by class and external ID, hashed with foldhash: a run
/// with 300,000 of them builds these between its diff and its reports
/// (SipHash made that a tenth of a second).
pub type DiscrepancySet = HashSet<(Class, String), foldhash::fast::RandomState>;

/// Discrepancies by class and external ID, each with a value.
pub type DiscrepancyMap<V> = HashMap<(Class, String), V, foldhash::fast::RandomState>;

/// How the open discrepancies of a job changed with one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscrepancyDelta {
    /// Seen for the first time (or again after having been resolved):
    /// sorted by class, then ID (the order the store inserts them in),
    /// each once.
    pub new: Vec<(Class, String)>,
    /// Still open, with when each was first seen.
    pub persisting: DiscrepancyMap<Timestamp>,
    /// Open before, gone now, with when each was first seen; sorted.
    pub resolved: Vec<(Class, String, Timestamp)>,
}

/// The open discrepancies of a job, by class: external ID → first seen
/// ([`StateStore::open_history`]).
#[derive(Debug, Default)]
pub struct OpenHistory(pub(crate) [OpenIds; 4]);

impl OpenHistory {
    /// What `current` (the open discrepancies one run found) changes: the
    /// ones open before persist (with their first sighting), every other
    /// one is new, and the open ones not in `current` are resolved.
    /// Duplicates in `current` count once.
    pub fn delta(self, current: &[(Class, String)]) -> DiscrepancyDelta {
        let mut delta = self.delta_builder(current.len());
        for (class, id) in current {
            delta.see(*class, id);
        }
        delta.finish()
    }

    /// A [`DeltaBuilder`] for about `expected` discrepancies: each is told
    /// by reference ([`DeltaBuilder::see`]), so a persisting one costs no
    /// string (the open row's own key moves into the delta) and only new
    /// ones are copied.
    pub fn delta_builder(self, expected: usize) -> DeltaBuilder {
        let mut delta = DiscrepancyDelta::default();
        let open: usize = self.0.iter().map(HashMap::len).sum();
        delta.persisting.reserve(open.min(expected));
        delta.new.reserve(expected.saturating_sub(open));
        DeltaBuilder { open: self, delta }
    }
}

/// Open discrepancies as the store lists them: class, ID, first seen.
impl FromIterator<(Class, String, Timestamp)> for OpenHistory {
    fn from_iter<I: IntoIterator<Item = (Class, String, Timestamp)>>(rows: I) -> Self {
        let mut open = OpenHistory::default();
        for (class, id, first) in rows {
            open.0[class as usize].insert(id, first);
        }
        open
    }
}

/// Builds a [`DiscrepancyDelta`] from the open history and the
/// discrepancies one run found, told one at a time.
#[derive(Debug)]
pub struct DeltaBuilder {
    open: OpenHistory,
    delta: DiscrepancyDelta,
}

impl DeltaBuilder {
    /// One discrepancy this run found: persisting when it was open (with
    /// its first sighting, which is returned), else new (`None`). Told
    /// twice, it counts once.
    pub fn see(&mut self, class: Class, id: &str) -> Option<Timestamp> {
        // The open row's own key moves into `persisting`.
        if let Some((id, first)) = self.open.0[class as usize].remove_entry(id) {
            self.delta.persisting.insert((class, id), first);
            return Some(first);
        }
        // Told twice: counted once (new ones are deduplicated at the end).
        let key = (class, id.to_string());
        if let Some(first) = self.delta.persisting.get(&key) {
            return Some(*first);
        }
        self.delta.new.push(key);
        None
    }

    /// Moves `classes` into a builder of their own, to be told on another
    /// thread and [`merge`](Self::merge)d back: each class is told to one
    /// builder only (a class told to the other one is new there, whatever
    /// the history says).
    pub fn split_off(&mut self, classes: &[Class]) -> DeltaBuilder {
        let mut part = DeltaBuilder {
            open: OpenHistory::default(),
            delta: DiscrepancyDelta::default(),
        };
        for &class in classes {
            part.open.0[class as usize] = std::mem::take(&mut self.open.0[class as usize]);
        }
        let open: usize = part.open.0.iter().map(HashMap::len).sum();
        part.delta.persisting.reserve(open);
        part
    }

    /// Takes back a part [`split_off`](Self::split_off) this builder, with
    /// what it was told. Its new ones go after this builder's: a part of
    /// the last classes keeps them in class order (and `finish`'s sort a
    /// check).
    pub fn merge(&mut self, part: DeltaBuilder) {
        let DeltaBuilder { open, delta } = part;
        for (mine, theirs) in self.open.0.iter_mut().zip(open.0) {
            if !theirs.is_empty() {
                *mine = theirs;
            }
        }
        self.delta.persisting.extend(delta.persisting);
        self.delta.new.extend(delta.new);
    }

    /// The delta: the open discrepancies not told are resolved.
    pub fn finish(self) -> DiscrepancyDelta {
        let DeltaBuilder {
            open: OpenHistory(open),
            mut delta,
        } = self;
        delta.resolved = CLASSES
            .into_iter()
            .zip(open)
            .flat_map(|(class, open)| open.into_iter().map(move |(id, first)| (class, id, first)))
            .collect();
        delta.resolved.sort();
        // Told in class order, each class's IDs sorted (as a run's lists
        // are), the new ones are in order already: the sort only checks.
        delta.new.sort_unstable();
        delta.new.dedup();
        delta
    }
}

/// A reviewed backfill plan as the store knows it: what `recon run
/// --dry-run` wrote, so that `recon apply --plan` can prove the file it is
/// given is that plan, unedited (table `recon_plans`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRecord {
    /// The plan id: the id of the run that made it.
    pub id: String,
    /// The job.
    pub job: String,
    /// The window the plan was made over.
    pub window: Window,
    /// SHA-256 of the plan.jsonl file, lower-case hex.
    pub sha256: String,
    /// Lines in the plan.
    pub items: u64,
    /// Source records in the window when the plan was made (for `max_ratio`).
    pub source_records: u64,
    /// When the run that made the plan started reading.
    pub read_at: Timestamp,
    /// When the plan was recorded.
    pub created_at: Timestamp,
}

#[cfg(test)]
mod delta_tests {
    use super::*;

    fn open_of(rows: &[(Class, &str, i64)]) -> OpenHistory {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        rows.iter()
            .map(|&(class, id, s)| (class, id.to_string(), at(s)))
            .collect()
    }

    /// Told to two builders (mismatches and duplicates split off, as a
    /// run with many discrepancies tells them on two threads) and merged, a
    /// run's discrepancies make the delta one builder makes: the same new,
    /// persisting and resolved ones, the same first sightings returned.
    #[test]
    fn a_split_builder_merged_back_makes_the_same_delta() {
        use Class::*;
        let open = [
            (Gap, "g1", 1),
            (Gap, "g2", 2),
            (Orphan, "o1", 3),
            (Orphan, "o2", 4),
            (Mismatch, "m1", 5),
            (Duplicate, "d1", 6),
            (Duplicate, "d2", 7),
        ];
        let told = [
            (Gap, "g1"),
            (Gap, "g9"),
            (Mismatch, "m1"),
            (Mismatch, "m9"),
            (Orphan, "o2"),
            (Orphan, "o9"),
            (Orphan, "o9"),
            (Duplicate, "d1"),
            (Duplicate, "g1"),
        ];
        let mut one = open_of(&open).delta_builder(told.len());
        let firsts_one: Vec<_> = told.iter().map(|&(c, k)| one.see(c, k)).collect();
        let mut main = open_of(&open).delta_builder(told.len());
        let mut part = main.split_off(&[Mismatch, Duplicate]);
        let firsts_two: Vec<_> = told
            .iter()
            .map(|&(c, k)| match c {
                Mismatch | Duplicate => part.see(c, k),
                _ => main.see(c, k),
            })
            .collect();
        main.merge(part);
        assert_eq!(firsts_two, firsts_one);
        let (one, two) = (one.finish(), main.finish());
        assert_eq!(two, one);
        // What the builders were told shows in the delta.
        assert_eq!(two.persisting.len(), 4);
        assert_eq!(
            two.resolved
                .iter()
                .map(|(c, k, _)| (*c, k.as_str()))
                .collect::<Vec<_>>(),
            [(Gap, "g2"), (Orphan, "o1"), (Duplicate, "d2")]
        );
        assert_eq!(two.new.len(), 4, "{:?}", two.new);
    }
}
