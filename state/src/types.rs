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

/// The open discrepancies of one class, sorted by external ID (byte
/// order, as SQLite's BINARY collation and Rust's `str` compare), each
/// once, with its first sighting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OpenIds(Vec<(String, Timestamp)>);

impl OpenIds {
    /// Adds one, as the store lists them.
    pub(crate) fn push(&mut self, id: String, first: Timestamp) {
        self.0.push((id, first));
    }

    /// Sorts them unless they came sorted (SQLite lists them in key
    /// order, PostgreSQL in none); an ID listed twice keeps its first
    /// listing.
    pub(crate) fn sort(&mut self) {
        if !self.0.windows(2).all(|w| w[0].0 < w[1].0) {
            self.0.sort_by(|a, b| a.0.cmp(&b.0));
            self.0.dedup_by(|b, a| a.0 == b.0);
        }
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Discrepancies by class and external ID, hashed with foldhash: a run
/// with 300,000 of them builds these between its diff and its reports
/// (SipHash made that a tenth of a second).
pub type DiscrepancySet = HashSet<(Class, String), foldhash::fast::RandomState>;

/// Discrepancies by class and external ID, each with a value.
pub type DiscrepancyMap<V> = HashMap<(Class, String), V, foldhash::fast::RandomState>;

/// The discrepancies still open after a run, with when each was first
/// seen: sorted by class, then ID, each once. A sorted list rather than a
/// map: a nightly run's delta is a walk of two sorted lists per class
/// (the history's, the run's), and nothing looks one up by key but the
/// odd report row found out of its list's order ([`Persisting::get`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Persisting(Vec<((Class, String), Timestamp)>);

impl Persisting {
    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none persists.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// When `id` of `class` was first seen, if it persists.
    pub fn get(&self, class: Class, id: &str) -> Option<Timestamp> {
        self.0
            .binary_search_by(|((c, k), _)| (*c, k.as_str()).cmp(&(class, id)))
            .ok()
            .map(|i| self.0[i].1)
    }

    /// Every first sighting, in the list's order.
    pub fn values(&self) -> impl Iterator<Item = &Timestamp> {
        self.0.iter().map(|(_, t)| t)
    }

    /// Every one, in order.
    pub fn iter(&self) -> impl Iterator<Item = &((Class, String), Timestamp)> {
        self.0.iter()
    }
}

impl FromIterator<((Class, String), Timestamp)> for Persisting {
    fn from_iter<I: IntoIterator<Item = ((Class, String), Timestamp)>>(rows: I) -> Self {
        let mut rows: Vec<_> = rows.into_iter().collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.dedup_by(|b, a| a.0 == b.0);
        Persisting(rows)
    }
}

/// How the open discrepancies of a job changed with one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscrepancyDelta {
    /// Seen for the first time (or again after having been resolved):
    /// sorted by class, then ID (the order the store inserts them in),
    /// each once.
    pub new: Vec<(Class, String)>,
    /// Still open, with when each was first seen.
    pub persisting: Persisting,
    /// Open before, gone now, with when each was first seen; sorted.
    pub resolved: Vec<(Class, String, Timestamp)>,
}

/// The open discrepancies of a job, by class, each sorted by ID
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
    /// by reference ([`DeltaBuilder::see`]); only new ones are copied.
    pub fn delta_builder(self, expected: usize) -> DeltaBuilder {
        let open: usize = self.0.iter().map(OpenIds::len).sum();
        let new = expected.saturating_sub(open);
        DeltaBuilder {
            classes: self.0.map(|ids| {
                let mut part = ClassDelta::new(ids);
                // Most new ones are gaps, orphans or mismatches: room for
                // a third of them each.
                part.new.reserve(new / 3);
                Some(part)
            }),
        }
    }
}

/// Open discrepancies as the store lists them: class, ID, first seen.
impl FromIterator<(Class, String, Timestamp)> for OpenHistory {
    fn from_iter<I: IntoIterator<Item = (Class, String, Timestamp)>>(rows: I) -> Self {
        let mut open = OpenHistory::default();
        for (class, id, first) in rows {
            open.0[class as usize].push(id, first);
        }
        for ids in &mut open.0 {
            ids.sort();
        }
        open
    }
}

/// What one run's discrepancies of one class do to its open ones: a walk
/// of the open list (sorted) along the run's (sorted as a run's lists
/// are: then each is one step of a cursor, no hash, no string copied for
/// a persisting one). Told out of order, an ID is found by binary search
/// instead: any order gives the same delta.
#[derive(Debug)]
struct ClassDelta {
    open: Vec<(String, Timestamp)>,
    /// Per open one: told by this run.
    seen: Vec<bool>,
    /// Open ones before it are all below the last ID told.
    cursor: usize,
    /// The last ID told (for the order check), when told in order.
    last: Option<String>,
    /// New ones, in the order told (sorted when told in order).
    new: Vec<String>,
}

impl ClassDelta {
    fn new(open: OpenIds) -> ClassDelta {
        let seen = vec![false; open.0.len()];
        ClassDelta {
            open: open.0,
            seen,
            cursor: 0,
            last: Some(String::new()),
            new: Vec::new(),
        }
    }

    fn see(&mut self, id: &str) -> Option<Timestamp> {
        let found = match &mut self.last {
            Some(last) if id >= last.as_str() => {
                let told_again = id == last.as_str() && !last.is_empty();
                last.clear();
                last.push_str(id);
                // A step or a few along the list (most IDs told are open,
                // or fall between neighbours); a long way ahead by binary
                // search.
                let mut steps = 0;
                while self
                    .open
                    .get(self.cursor)
                    .is_some_and(|(k, _)| k.as_str() < id)
                {
                    self.cursor += 1;
                    steps += 1;
                    if steps == 8 {
                        let ahead = &self.open[self.cursor..];
                        self.cursor += ahead.partition_point(|(k, _)| k.as_str() < id);
                        break;
                    }
                }
                let at = self.cursor;
                match self.open.get(at) {
                    Some((k, _)) if k == id => Some(at),
                    // Told twice: counted once.
                    _ if told_again => return None,
                    _ => None,
                }
            }
            _ => {
                self.last = None;
                self.open.binary_search_by(|(k, _)| k.as_str().cmp(id)).ok()
            }
        };
        match found {
            Some(i) => {
                self.seen[i] = true;
                Some(self.open[i].1)
            }
            None => {
                self.new.push(id.to_string());
                None
            }
        }
    }
}

/// Builds a [`DiscrepancyDelta`] from the open history and the
/// discrepancies one run found, told one at a time.
#[derive(Debug)]
pub struct DeltaBuilder {
    /// Per class (`None`: split off to another builder).
    classes: [Option<ClassDelta>; 4],
}

impl DeltaBuilder {
    /// One discrepancy this run found: persisting when it was open (with
    /// its first sighting, which is returned), else new (`None`). Told
    /// twice, it counts once.
    ///
    /// # Panics
    /// When `class` was split off this builder ([`Self::split_off`]).
    pub fn see(&mut self, class: Class, id: &str) -> Option<Timestamp> {
        self.classes[class as usize]
            .as_mut()
            .expect("a class told to the builder it was split off to")
            .see(id)
    }

    /// Moves `classes` into a builder of their own, to be told on another
    /// thread and [`merge`](Self::merge)d back: each class is told to one
    /// builder only.
    pub fn split_off(&mut self, classes: &[Class]) -> DeltaBuilder {
        let mut part = DeltaBuilder {
            classes: [None, None, None, None],
        };
        for &class in classes {
            part.classes[class as usize] = self.classes[class as usize].take();
        }
        part
    }

    /// Takes back a part [`split_off`](Self::split_off) this builder, with
    /// what it was told.
    pub fn merge(&mut self, part: DeltaBuilder) {
        for (mine, theirs) in self.classes.iter_mut().zip(part.classes) {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
    }

    /// The delta: the open discrepancies not told are resolved. Class by
    /// class, each list sorted: the whole is sorted by class, then ID.
    ///
    /// # Panics
    /// When a class split off was not merged back.
    pub fn finish(self) -> DiscrepancyDelta {
        let mut delta = DiscrepancyDelta::default();
        let mut persisting = Vec::new();
        for (class, part) in CLASSES.into_iter().zip(self.classes) {
            let part = part.expect("every class split off merged back");
            let ClassDelta {
                open,
                seen,
                mut new,
                last,
                ..
            } = part;
            // Told in order, the new ones are sorted and each once already.
            if last.is_none() {
                new.sort_unstable();
            }
            new.dedup();
            delta.new.extend(new.into_iter().map(|id| (class, id)));
            for ((id, first), seen) in open.into_iter().zip(seen) {
                if seen {
                    persisting.push(((class, id), first));
                } else {
                    delta.resolved.push((class, id, first));
                }
            }
        }
        delta.persisting = Persisting(persisting);
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

    /// The walk of sorted lists is a model's delta: every ID told (in a
    /// run's order, or shuffled, some told twice, some told in both
    /// orders, IDs that differ by a prefix, by case, by a byte above
    /// ASCII) persists with its first sighting when it was open, is new
    /// once when it was not, and every open one not told is resolved.
    #[test]
    fn the_sorted_walk_is_a_models_delta() {
        use std::collections::{BTreeMap, BTreeSet};
        let ids = [
            "",
            "a",
            "a0",
            "a00",
            "A",
            "b",
            "ch_1",
            "ch_10",
            "ch_2",
            "é",
            "z",
            "zz",
            "\u{10ffff}",
        ];
        // A small deterministic generator: no dependency for one test.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for round in 0..400 {
            let mut open = Vec::new();
            let mut told = Vec::new();
            for class in CLASSES {
                for (i, id) in ids.iter().enumerate() {
                    match next(4) {
                        0 => open.push((class, id.to_string(), 1_000 + i as i64)),
                        1 => {
                            open.push((class, id.to_string(), 2_000 + i as i64));
                            told.push((class, id.to_string()));
                        }
                        2 => told.push((class, id.to_string())),
                        _ => {}
                    }
                    if next(8) == 0 {
                        told.push((class, id.to_string()));
                    }
                }
            }
            // The open set listed in any order: it is sorted on the way in.
            let listed = open.len();
            for i in (1..listed).rev() {
                open.swap(i, next(i + 1));
            }
            told.sort();
            if round % 2 == 1 {
                for i in (1..told.len()).rev() {
                    told.swap(i, next(i + 1));
                }
            }
            let at = |s: i64| Timestamp::from_second(s).unwrap();
            let history: OpenHistory = open
                .iter()
                .map(|(c, k, s)| (*c, k.clone(), at(*s)))
                .collect();
            let mut builder = history.delta_builder(told.len());
            let firsts: Vec<_> = told.iter().map(|(c, k)| builder.see(*c, k)).collect();
            let delta = builder.finish();

            let was: BTreeMap<(Class, String), Timestamp> = open
                .iter()
                .map(|(c, k, s)| ((*c, k.clone()), at(*s)))
                .collect();
            let now: BTreeSet<(Class, String)> = told.iter().cloned().collect();
            for ((c, k), first) in told.iter().zip(&firsts) {
                assert_eq!(
                    *first,
                    was.get(&(*c, k.clone())).copied(),
                    "{c:?} {k:?} round {round}"
                );
            }
            let new: Vec<_> = now
                .iter()
                .filter(|k| !was.contains_key(*k))
                .cloned()
                .collect();
            assert_eq!(delta.new, new, "round {round}");
            let persisting: Vec<_> = was
                .iter()
                .filter(|(k, _)| now.contains(*k))
                .map(|(k, t)| (k.clone(), *t))
                .collect();
            assert_eq!(
                delta.persisting.iter().cloned().collect::<Vec<_>>(),
                persisting
            );
            for ((c, k), t) in &persisting {
                assert_eq!(delta.persisting.get(*c, k), Some(*t));
            }
            assert_eq!(delta.persisting.get(Class::Gap, "not told"), None);
            let resolved: Vec<_> = was
                .iter()
                .filter(|(k, _)| !now.contains(*k))
                .map(|((c, k), t)| (*c, k.clone(), *t))
                .collect();
            assert_eq!(delta.resolved, resolved, "round {round}");
        }
    }
}
