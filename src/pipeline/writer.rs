//! The ledgered in-flight writer: one engine for the backfill's write
//! batches ([`super::backfill::apply`]) and the webhook route's deliveries
//! ([`super::webhook::deliver`]).
//!
//! A [`Work`] says how to prepare a unit, perform it and record what it
//! did; [`run`] does the rest, the same way for both:
//!
//! - up to [`Options::in_flight`] units are performed at once; the next
//!   one starts (prepared just before) as soon as one returns;
//! - before a unit starts, a stop request (SIGTERM, SIGINT) or a run lock
//!   that is no longer held (verified per [`Options::lock_every`]) starts no
//!   more units; the units in flight are awaited and recorded, since their
//!   outcome is known;
//! - a unit whose outcome is trouble ([`Settled::trouble`]: a lost
//!   connection, an endpoint that keeps failing) starts no more units
//!   either; the first trouble is reported;
//! - the ledger marks go through a channel to a recorder, which commits
//!   whatever has arrived in one ledger call while the next units are in
//!   flight: the target never waits for the state store;
//! - a recorder that fails closes the channel: no unit starts after it,
//!   and its error is the run's.
//!
//! Each performed unit is settled (and its mark sent) exactly once; a unit
//! never started is neither performed nor recorded.

use std::future::Future;
use std::time::Duration;

use anyhow::{anyhow, Result};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

/// Marks committed in one ledger call at the most.
const MARKS_PER_COMMIT: usize = 1024;

/// One kind of ledgered writing: its units, how each is performed, and
/// how its outcome is recorded.
pub trait Work {
    /// A unit prepared for performing (a write batch's records, a delivery).
    type Unit;
    /// What performing a unit returned.
    type Done;
    /// A unit's ledger mark.
    type Mark;
    /// What the caller keeps of a performed unit (its outcomes).
    type Kept;
    /// Why a unit's outcome ends the writing (kept: the first).
    type Trouble;

    /// How many units there are, numbered from 0.
    fn units(&self) -> usize;

    /// Unit `i`, built just before it starts.
    fn prepare(&self, i: usize) -> Self::Unit;

    /// Performs a unit (writes the batch, posts the delivery).
    fn perform(&self, unit: &Self::Unit) -> impl Future<Output = Self::Done>;

    /// What a performed unit did: its mark, how many items it answered
    /// for, whether it is trouble, and what is kept of it. `first` is the
    /// trouble already met, if any. An error ends the writing at once (the
    /// units in flight are dropped, their marks never sent).
    fn settle(
        &self,
        unit: Self::Unit,
        done: Self::Done,
        first: Option<&Self::Trouble>,
    ) -> Result<Settled<Self>>;

    /// Records marks in one ledger commit.
    fn record(&self, marks: Vec<Self::Mark>) -> impl Future<Output = Result<()>>;

    /// Whether the run still holds its lock (asked of the database now).
    fn holds_lock(&self) -> impl Future<Output = Result<bool>>;

    /// Whether a stop was requested (SIGTERM or SIGINT).
    fn interrupted(&self) -> bool {
        crate::interrupt::requested().is_some()
    }
}

/// What a performed unit did.
pub struct Settled<W: Work + ?Sized> {
    /// Its ledger mark.
    pub mark: W::Mark,
    /// How many items it answered for (written, delivered or refused):
    /// counted toward [`Report::items`] and the crash hook.
    pub items: usize,
    /// Trouble: no unit starts after it.
    pub trouble: Option<W::Trouble>,
    /// What the caller keeps of it ([`Report::kept`]).
    pub kept: W::Kept,
}

/// How [`run`] paces the work.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Units performed at once (at least 1).
    pub in_flight: usize,
    /// How often the run lock is verified before a unit starts: zero before
    /// every unit; otherwise once this long has passed since the last check
    /// (the first check is due this long after [`run`] starts: the caller
    /// has just verified it).
    pub lock_every: Duration,
    /// Test-only crash hook ([`crate::faults::abort_after_items`]): the
    /// process aborts once this many items were answered for, before their
    /// marks are sent.
    pub abort_after: Option<usize>,
}

/// How the writing ended, when no error ended it.
pub struct Report<W: Work> {
    /// What is kept of each unit performed, in the order they returned.
    pub kept: Vec<W::Kept>,
    /// Items answered for, by all units.
    pub items: usize,
    /// The first trouble a unit met.
    pub trouble: Option<W::Trouble>,
    /// The run lock was found lost: no unit started after.
    pub lock_lost: bool,
    /// A stop was requested: no unit started after.
    pub interrupted: bool,
}

impl<W: Work> Report<W> {
    /// Whether every unit was performed (nothing stopped the writing).
    pub fn complete(&self) -> bool {
        self.trouble.is_none() && !self.lock_lost && !self.interrupted
    }
}

/// Performs `work`'s units under the ledger (see the module docs). The
/// recorder's error comes first: with it, the ledger may lack marks.
pub async fn run<W: Work>(work: &W, options: Options) -> Result<Report<W>> {
    let (marks, marked) = unbounded_channel();
    let (recorded, produced) = tokio::join!(record(work, marked), produce(work, options, marks));
    recorded?;
    produced
}

/// Commits the marks as they come, whatever has arrived in one call. On
/// an error, the channel is closed at once: no unit starts after it.
async fn record<W: Work>(work: &W, mut marked: UnboundedReceiver<W::Mark>) -> Result<()> {
    let mut chunk = Vec::new();
    while marked.recv_many(&mut chunk, MARKS_PER_COMMIT).await > 0 {
        if let Err(e) = work.record(std::mem::take(&mut chunk)).await {
            marked.close();
            return Err(e);
        }
    }
    Ok(())
}

/// Why no unit starts any more.
enum Halt {
    Lock,
    Interrupted,
}

/// The writing side: keeps `in_flight` units going, settles each as it
/// returns and sends its mark to the recorder.
async fn produce<W: Work>(
    work: &W,
    options: Options,
    marks: UnboundedSender<W::Mark>,
) -> Result<Report<W>> {
    let mut report = Report {
        kept: Vec::new(),
        items: 0,
        trouble: None,
        lock_lost: false,
        interrupted: false,
    };
    let mut lock = LockCadence::new(options.lock_every);
    let mut pending = FuturesUnordered::new();
    let mut next = 0..work.units();
    let mut halted = false;
    loop {
        while !halted && pending.len() < options.in_flight.max(1) {
            let Some(i) = next.next() else { break };
            if marks.is_closed() {
                return Err(stopped());
            }
            match lock.before_unit(work).await? {
                Some(Halt::Lock) => report.lock_lost = true,
                Some(Halt::Interrupted) => report.interrupted = true,
                None => {}
            }
            if report.lock_lost || report.interrupted {
                halted = true;
                break;
            }
            let unit = work.prepare(i);
            pending.push(async move {
                let done = work.perform(&unit).await;
                (unit, done)
            });
        }
        // The units in flight are awaited and recorded even once halted:
        // their outcome is known.
        let Some((unit, done)) = pending.next().await else {
            break;
        };
        let settled = work.settle(unit, done, report.trouble.as_ref())?;
        report.items += settled.items;
        if options.abort_after.is_some_and(|n| report.items >= n) {
            // Test-only fault hook: die like a SIGKILL after items were
            // answered for and before their outcome is recorded.
            std::process::abort();
        }
        if let (None, Some(t)) = (&report.trouble, settled.trouble) {
            report.trouble = Some(t);
            halted = true;
        }
        report.kept.push(settled.kept);
        marks.send(settled.mark).map_err(|_| stopped())?;
    }
    Ok(report)
}

/// The error of a writer whose recorder stopped (its own error, returned
/// first, says why).
fn stopped() -> anyhow::Error {
    anyhow!("the ledger stopped recording; nothing more is written")
}

/// When the run lock is verified.
struct LockCadence {
    every: Duration,
    checked: Instant,
}

impl LockCadence {
    fn new(every: Duration) -> LockCadence {
        LockCadence {
            every,
            checked: Instant::now(),
        }
    }

    /// Why the next unit may not start: a stop request, or a lock found
    /// lost when a check is due.
    async fn before_unit<W: Work>(&mut self, work: &W) -> Result<Option<Halt>> {
        if work.interrupted() {
            return Ok(Some(Halt::Interrupted));
        }
        if self.every.is_zero() || self.checked.elapsed() >= self.every {
            self.checked = Instant::now();
            if !work.holds_lock().await? {
                return Ok(Some(Halt::Lock));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeSet;

    use anyhow::bail;

    use super::*;

    /// Units that take `took(i)` each, with trouble, a lost lock, a stop
    /// request or a failing ledger where a test puts them; it notes what
    /// was started, in flight and recorded.
    #[derive(Default)]
    struct Fake {
        units: usize,
        /// Unit `i` takes `(i % 3 + 1) × 100 ms` unless set.
        took: Option<Duration>,
        trouble_at: Option<usize>,
        settle_fails_at: Option<usize>,
        /// The lock check with this number (1 = the first) finds it lost.
        lock_lost_at_check: Option<usize>,
        /// A stop is requested once this many units started.
        interrupt_after: Option<usize>,
        record_fails: bool,
        started: RefCell<Vec<usize>>,
        in_flight: Cell<usize>,
        most_in_flight: Cell<usize>,
        commits: RefCell<Vec<Vec<usize>>>,
        lock_checks: Cell<usize>,
        /// What had started when the trouble unit was settled.
        started_at_trouble: RefCell<Option<Vec<usize>>>,
    }

    impl Fake {
        fn new(units: usize) -> Fake {
            Fake {
                units,
                ..Fake::default()
            }
        }

        fn recorded(&self) -> Vec<usize> {
            let mut all: Vec<usize> = self.commits.borrow().iter().flatten().copied().collect();
            all.sort();
            all
        }

        fn started(&self) -> Vec<usize> {
            let mut s = self.started.borrow().clone();
            s.sort();
            s
        }
    }

    impl Work for Fake {
        type Unit = usize;
        type Done = usize;
        type Mark = usize;
        type Kept = usize;
        type Trouble = String;

        fn units(&self) -> usize {
            self.units
        }

        fn prepare(&self, i: usize) -> usize {
            self.started.borrow_mut().push(i);
            i
        }

        async fn perform(&self, unit: &usize) -> usize {
            self.in_flight.set(self.in_flight.get() + 1);
            self.most_in_flight
                .set(self.most_in_flight.get().max(self.in_flight.get()));
            let took = self
                .took
                .unwrap_or(Duration::from_millis(100 * (*unit as u64 % 3 + 1)));
            tokio::time::sleep(took).await;
            self.in_flight.set(self.in_flight.get() - 1);
            *unit
        }

        fn settle(
            &self,
            unit: usize,
            done: usize,
            _first: Option<&String>,
        ) -> Result<Settled<Fake>> {
            assert_eq!(unit, done);
            if self.settle_fails_at == Some(unit) {
                bail!("unit {unit} refused whole");
            }
            let trouble = (self.trouble_at == Some(unit)).then(|| {
                *self.started_at_trouble.borrow_mut() = Some(self.started());
                format!("unit {unit} lost its connection")
            });
            Ok(Settled {
                mark: unit,
                items: 1,
                trouble,
                kept: unit,
            })
        }

        async fn record(&self, marks: Vec<usize>) -> Result<()> {
            // A commit takes a while: marks arrive meanwhile.
            tokio::time::sleep(Duration::from_millis(30)).await;
            if self.record_fails {
                bail!("the ledger went away");
            }
            self.commits.borrow_mut().push(marks);
            Ok(())
        }

        async fn holds_lock(&self) -> Result<bool> {
            let n = self.lock_checks.get() + 1;
            self.lock_checks.set(n);
            Ok(self.lock_lost_at_check.is_none_or(|at| n < at))
        }

        fn interrupted(&self) -> bool {
            self.interrupt_after
                .is_some_and(|n| self.started.borrow().len() >= n)
        }
    }

    fn each_unit(in_flight: usize) -> Options {
        Options {
            in_flight,
            lock_every: Duration::ZERO,
            abort_after: None,
        }
    }

    /// No mark is committed twice, and the marks are exactly the units
    /// performed.
    fn recorded_once_each(fake: &Fake, report: &Report<Fake>) {
        let recorded = fake.recorded();
        let distinct: BTreeSet<usize> = recorded.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            recorded.len(),
            "a unit recorded twice: {recorded:?}"
        );
        let mut done = report.kept.clone();
        done.sort();
        assert_eq!(recorded, done);
        assert_eq!(fake.started(), done, "every started unit was performed");
        assert_eq!(report.items, done.len());
    }

    /// Runs `fake`, which must stop with exactly units `0..started` started,
    /// each recorded once.
    async fn stops_after(fake: &Fake, options: Options, started: usize) -> Report<Fake> {
        let report = run(fake, options).await.unwrap();
        assert!(!report.complete());
        assert_eq!(fake.started(), (0..started).collect::<Vec<_>>());
        recorded_once_each(fake, &report);
        report
    }

    #[tokio::test(start_paused = true)]
    async fn the_outcomes_of_every_finished_unit_are_committed() {
        let fake = Fake::new(25);
        let report = run(&fake, each_unit(3)).await.unwrap();
        assert!(report.complete());
        assert_eq!(fake.recorded(), (0..25).collect::<Vec<_>>());
        recorded_once_each(&fake, &report);
        // The commits gather what arrived meanwhile: fewer than one a unit.
        assert!(fake.commits.borrow().len() < 25, "{:?}", fake.commits);
        assert_eq!(fake.lock_checks.get(), 25, "verified before every unit");
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_units_than_in_flight_are_performed_at_once() {
        for n in [1, 2, 4, 7] {
            let fake = Fake::new(30);
            let report = run(&fake, each_unit(n)).await.unwrap();
            assert!(report.complete());
            assert_eq!(fake.most_in_flight.get(), n, "in flight {n}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_trouble_mid_flight_starts_nothing_more_and_records_each_unit_once() {
        let mut fake = Fake::new(20);
        fake.trouble_at = Some(5);
        let report = run(&fake, each_unit(3)).await.unwrap();
        assert_eq!(
            report.trouble.as_deref(),
            Some("unit 5 lost its connection")
        );
        assert!(!report.lock_lost && !report.interrupted);
        // Nothing started after the trouble was seen; what was in flight
        // then finished and is recorded, once.
        let at_trouble = fake.started_at_trouble.borrow().clone().unwrap();
        assert_eq!(fake.started(), at_trouble);
        assert!(fake.started().len() < 20);
        assert!(fake.recorded().contains(&5));
        recorded_once_each(&fake, &report);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lock_starts_nothing_more_and_records_what_was_in_flight() {
        let mut fake = Fake::new(20);
        fake.lock_lost_at_check = Some(6);
        let report = stops_after(&fake, each_unit(2), 5).await;
        assert!(report.lock_lost);
        assert_eq!(fake.lock_checks.get(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_request_starts_nothing_more_and_records_what_was_in_flight() {
        let mut fake = Fake::new(20);
        fake.interrupt_after = Some(4);
        let report = stops_after(&fake, each_unit(3), 4).await;
        assert!(report.interrupted && !report.lock_lost);
    }

    #[tokio::test(start_paused = true)]
    async fn a_ledger_that_fails_stops_the_writing_with_its_error() {
        let mut fake = Fake::new(20);
        fake.record_fails = true;
        fake.took = Some(Duration::from_millis(100));
        let err = run(&fake, each_unit(1)).await.err().unwrap();
        assert_eq!(err.to_string(), "the ledger went away");
        // The first unit's commit failed while the second was in flight:
        // no third started.
        assert_eq!(fake.started(), vec![0, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_unit_refused_whole_ends_the_writing_at_once() {
        let mut fake = Fake::new(20);
        fake.settle_fails_at = Some(4);
        let err = run(&fake, each_unit(2)).await.err().unwrap();
        assert_eq!(err.to_string(), "unit 4 refused whole");
        let recorded = fake.recorded();
        assert!(!recorded.contains(&4), "{recorded:?}");
        let distinct: BTreeSet<usize> = recorded.iter().copied().collect();
        assert_eq!(distinct.len(), recorded.len());
        assert!(fake.started().len() < 20);
    }

    #[tokio::test(start_paused = true)]
    async fn the_lock_is_verified_at_its_cadence() {
        let mut fake = Fake::new(10);
        fake.took = Some(Duration::from_millis(500));
        let options = Options {
            in_flight: 1,
            lock_every: Duration::from_secs(2),
            abort_after: None,
        };
        let report = run(&fake, options).await.unwrap();
        assert!(report.complete());
        // Units start at 0, 0.5 … 4.5 s: checks are due at 2 s and 4 s.
        assert_eq!(fake.lock_checks.get(), 2);
        // A lock lost at the second check stops the units after it.
        let mut fake = Fake::new(10);
        fake.took = Some(Duration::from_millis(500));
        fake.lock_lost_at_check = Some(2);
        let report = stops_after(&fake, options, 8).await;
        assert!(report.lock_lost);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_to_do_records_nothing_and_checks_no_lock() {
        let fake = Fake::new(0);
        let report = run(&fake, each_unit(2)).await.unwrap();
        assert!(report.complete() && report.kept.is_empty());
        assert!(fake.commits.borrow().is_empty());
        assert_eq!(fake.lock_checks.get(), 0);
    }
}
