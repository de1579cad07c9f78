//! The emulator's orders, and its bulk operations.
//!
//! Orders live in a `BTreeMap` by legacy id, plus one sorted index per sort
//! key: `(created_at ns, id)`, `(updated_at ns, id)` and `(id, id)`. A page is a
//! range over the index of the requested sort key: the search bounds on that
//! same field (the hull of the `OR` clauses' bounds) and the `after` cursor
//! become the range's bounds, everything else is checked per order, so a page costs O(log n + first) when the
//! filter is on the sort field (the connector's case: `created_at` bounds with
//! `sortKey: CREATED_AT`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::search::{Field, Search};
use super::{BulkOutcome, OrderSpec};

pub(crate) struct Order {
    pub spec: OrderSpec,
    pub created_ns: i128,
    pub updated_ns: i128,
}

/// The `sortKey`s the emulator implements (of Shopify's `OrderSortKeys`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SortKey {
    Id,
    CreatedAt,
    UpdatedAt,
}

impl Order {
    fn matches(&self, s: &Search) -> bool {
        s.matches(
            self.created_ns,
            self.updated_ns,
            self.spec.legacy_id,
            &self.spec.name,
        )
    }
}

/// A position in a sort order: `(sort value, legacy id)`.
pub(crate) type Position = (i128, u64);

#[derive(Default)]
pub(crate) struct Store {
    orders: BTreeMap<u64, Arc<Order>>,
    by_id: BTreeSet<Position>,
    by_created: BTreeSet<Position>,
    by_updated: BTreeSet<Position>,
}

pub(crate) struct PageRequest<'a> {
    pub sort: SortKey,
    pub reverse: bool,
    /// The position of the `after` cursor.
    pub after: Option<Position>,
    pub search: &'a Search,
    /// `None`: no limit (bulk operations).
    pub limit: Option<usize>,
    /// Orders created before this (ns) do not exist for the caller: an app
    /// without `read_all_orders` sees only the last 60 days.
    pub created_from: i128,
}

pub(crate) struct Page {
    pub orders: Vec<Arc<Order>>,
    pub has_next: bool,
    pub has_previous: bool,
}

fn succ((v, id): Position) -> Position {
    if id == u64::MAX {
        (v.saturating_add(1), 0)
    } else {
        (v, id + 1)
    }
}

fn pred((v, id): Position) -> Position {
    if id == 0 {
        (v.saturating_sub(1), u64::MAX)
    } else {
        (v, id - 1)
    }
}

impl Store {
    pub fn insert(&mut self, spec: OrderSpec) {
        let id = spec.legacy_id;
        if let Some(old) = self.orders.remove(&id) {
            self.by_created.remove(&(old.created_ns, id));
            self.by_updated.remove(&(old.updated_ns, id));
        }
        let order = Order {
            created_ns: spec.created_at.as_nanosecond(),
            updated_ns: spec.updated_at.as_nanosecond(),
            spec,
        };
        self.by_id.insert((id as i128, id));
        self.by_created.insert((order.created_ns, id));
        self.by_updated.insert((order.updated_ns, id));
        self.orders.insert(id, Arc::new(order));
    }

    pub fn len(&self) -> usize {
        self.orders.len()
    }

    fn index(&self, key: SortKey) -> &BTreeSet<Position> {
        match key {
            SortKey::Id => &self.by_id,
            SortKey::CreatedAt => &self.by_created,
            SortKey::UpdatedAt => &self.by_updated,
        }
    }

    pub fn page(&self, r: &PageRequest<'_>) -> Page {
        let empty = Page {
            orders: Vec::new(),
            has_next: false,
            has_previous: false,
        };
        if r.search.is_empty() {
            return empty;
        }
        let field = r.search.hull(match r.sort {
            SortKey::Id => Field::Id,
            SortKey::CreatedAt => Field::CreatedAt,
            SortKey::UpdatedAt => Field::UpdatedAt,
        });
        // Inclusive bounds in position space.
        let filter_lo: Position = (field.lo, 0);
        let filter_hi: Position = (field.hi, u64::MAX);
        let (mut lo, mut hi) = (filter_lo, filter_hi);
        if let Some(cursor) = r.after {
            if r.reverse {
                hi = hi.min(pred(cursor));
            } else {
                lo = lo.max(succ(cursor));
            }
        }
        let index = self.index(r.sort);
        let order = |p: &Position| &self.orders[&p.1];
        let limit = r.limit.unwrap_or(usize::MAX);
        let mut orders: Vec<Arc<Order>> = Vec::new();
        if lo <= hi {
            let range = index.range(lo..=hi);
            let matching = |p: &&Position| {
                let o = order(p);
                o.created_ns >= r.created_from && o.matches(r.search)
            };
            let take = limit.saturating_add(1);
            orders = if r.reverse {
                range
                    .rev()
                    .filter(matching)
                    .take(take)
                    .map(|p| order(p).clone())
                    .collect()
            } else {
                range
                    .filter(matching)
                    .take(take)
                    .map(|p| order(p).clone())
                    .collect()
            };
        }
        let has_next = orders.len() > limit;
        orders.truncate(limit);
        // Is there a matching order on the other side of the cursor?
        let has_previous = match r.after {
            None => false,
            Some(cursor) => {
                let (plo, phi) = if r.reverse {
                    (cursor.max(filter_lo), filter_hi)
                } else {
                    (filter_lo, cursor.min(filter_hi))
                };
                plo <= phi
                    && index.range(plo..=phi).any(|p| {
                        let o = order(p);
                        o.created_ns >= r.created_from && o.matches(r.search)
                    })
            }
        };
        Page {
            orders,
            has_next,
            has_previous,
        }
    }
}

// ---------------------------------------------------------------------------
// Bulk operations

/// One bulk query operation. Its result is computed when it is created (a
/// snapshot); it reports `RUNNING` until `bulk_delay` has passed, then its
/// outcome.
pub(crate) struct BulkOp {
    pub number: u64,
    pub query: String,
    pub started: Instant,
    pub created_at: jiff::Timestamp,
    pub outcome: BulkOutcome,
    /// The JSONL lines of the full result, one per object.
    pub lines: Arc<Vec<String>>,
}

/// What a bulk operation looks like at some instant.
pub(crate) struct BulkView {
    pub number: u64,
    pub status: &'static str,
    pub error_code: Option<&'static str>,
    pub object_count: u64,
    pub file_size: Option<u64>,
    pub url: bool,
    pub partial: bool,
    pub created_at: jiff::Timestamp,
    pub completed_at: Option<jiff::Timestamp>,
    pub query: String,
}

impl BulkOp {
    pub fn done(&self, now: Instant, delay: Duration) -> bool {
        now.saturating_duration_since(self.started) >= delay
    }

    /// Lines served at the partial data URL: the first half.
    pub fn partial_len(&self) -> usize {
        self.lines.len() / 2
    }

    fn bytes(lines: &[String]) -> u64 {
        lines.iter().map(|l| l.len() as u64 + 1).sum()
    }

    pub fn view(&self, now: Instant, delay: Duration) -> BulkView {
        let total = self.lines.len() as u64;
        let mut v = BulkView {
            number: self.number,
            status: "RUNNING",
            error_code: None,
            object_count: 0,
            file_size: None,
            url: false,
            partial: false,
            created_at: self.created_at,
            completed_at: None,
            query: self.query.clone(),
        };
        if !self.done(now, delay) {
            // "A running count of all the objects processed": proportional to
            // the time elapsed.
            let elapsed = now.saturating_duration_since(self.started).as_nanos();
            let delay_ns = delay.as_nanos().max(1);
            v.object_count = (total as u128 * elapsed / delay_ns) as u64;
            return v;
        }
        let finished = jiff::Timestamp::from_nanosecond(
            self.created_at.as_nanosecond() + delay.as_nanos() as i128,
        )
        .unwrap_or(self.created_at);
        v.completed_at = Some(finished);
        match self.outcome {
            BulkOutcome::Completed => {
                v.status = "COMPLETED";
                v.object_count = total;
                v.file_size = Some(Self::bytes(&self.lines));
                v.url = true;
            }
            BulkOutcome::Expired => {
                // A completed operation whose URL has expired (Shopify: "url
                // and partialDataUrl values expire after seven days").
                v.status = "EXPIRED";
                v.object_count = total;
            }
            BulkOutcome::Canceled => {
                v.status = "CANCELED";
                v.object_count = self.partial_len() as u64;
                v.completed_at = None;
            }
            BulkOutcome::Failed => {
                v.status = "FAILED";
                v.error_code = Some("INTERNAL_SERVER_ERROR");
                v.completed_at = None;
            }
            BulkOutcome::PartialData => {
                v.status = "FAILED";
                v.error_code = Some("INTERNAL_SERVER_ERROR");
                v.object_count = self.partial_len() as u64;
                v.file_size = Some(Self::bytes(&self.lines[..self.partial_len()]));
                v.partial = true;
                v.completed_at = None;
            }
        }
        v
    }
}

#[derive(Default)]
pub(crate) struct Bulk {
    pub ops: HashMap<u64, BulkOp>,
    /// The most recent operation (what `currentBulkOperation` returns).
    pub current: Option<u64>,
    pub next_number: u64,
    /// The outcome of the next operation to be created.
    pub next_outcome: BulkOutcome,
}
