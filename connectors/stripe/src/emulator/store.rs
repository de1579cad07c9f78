//! The emulator's object store: one sorted collection per [`ObjectKind`].
//!
//! Objects are kept as their compact JSON text (serialized once, at insert), in a
//! `BTreeMap` keyed by `(Reverse(created), Reverse(id))`, so iterating the map in
//! order *is* Stripe's list order: newest first. Stripe documents that list
//! endpoints return objects "sorted by creation date, with the most recent ...
//! appearing first"; it does not document how objects created in the same second
//! are ordered, so breaking ties by id descending is this emulator's own
//! deterministic choice.
//!
//! Every list request is a `range` over that map: the `created` filters and the
//! `starting_after` / `ending_before` cursors become bounds of the range (a cursor
//! is looked up in an id → created index, then located by the `BTreeMap`'s binary
//! search), so a page costs O(log n + limit) however many objects are stored.
//!
//! The per-object filters of balance transactions and payouts (`type`,
//! `currency`, `source`, `payout`; `status`, `destination`, `arrival_date`)
//! are tested on each object of that range, against attributes read from the
//! object once at insert ([`Attrs`]), so a filtered page costs what it skips.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use super::ObjectKind;

/// The sort key: iterating keys in ascending order yields created desc, id desc.
pub(crate) type Key = (Reverse<i64>, Reverse<String>);

/// The filterable attributes of a balance transaction or payout, read from
/// the object at insert (other kinds have none).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Attrs {
    /// Balance transaction `type`.
    pub kind: Option<String>,
    /// `currency`, as stored (compared case-insensitively).
    pub currency: Option<String>,
    /// Balance transaction `source`: the ID, or an expanded object's `id`.
    pub source: Option<String>,
    /// Payout `status`.
    pub status: Option<String>,
    /// Payout `destination`: the ID, or an expanded object's `id`.
    pub destination: Option<String>,
    /// Payout `arrival_date`.
    pub arrival_date: Option<i64>,
}

/// The per-kind filters of a list request (all that are set apply).
#[derive(Debug, Default, Clone)]
pub(crate) struct Filters {
    /// Balance transactions: `type`.
    pub kind: Option<String>,
    /// Balance transactions: `currency` (case-insensitive).
    pub currency: Option<String>,
    /// Balance transactions: `source`.
    pub source: Option<String>,
    /// Balance transactions: `payout` (the payout that paid them out).
    pub payout: Option<String>,
    /// Payouts: `status`.
    pub status: Option<String>,
    /// Payouts: `destination`.
    pub destination: Option<String>,
    /// Payouts: inclusive bounds on `arrival_date`.
    pub arrival_min: Option<i64>,
    pub arrival_max: Option<i64>,
}

impl Filters {
    fn is_empty(&self) -> bool {
        self.kind.is_none()
            && self.currency.is_none()
            && self.source.is_none()
            && self.payout.is_none()
            && self.status.is_none()
            && self.destination.is_none()
            && self.arrival_min.is_none()
            && self.arrival_max.is_none()
    }

    /// Whether the object `id` with `attrs` passes; `paid_out` maps a
    /// balance transaction to the payout that paid it out.
    fn admits(&self, id: &str, attrs: Option<&Attrs>, paid_out: &HashMap<String, String>) -> bool {
        let none = Attrs::default();
        let a = attrs.unwrap_or(&none);
        let eq = |want: &Option<String>, have: &Option<String>| match want {
            None => true,
            Some(w) => have.as_deref() == Some(w.as_str()),
        };
        eq(&self.kind, &a.kind)
            && match &self.currency {
                None => true,
                Some(w) => a
                    .currency
                    .as_deref()
                    .is_some_and(|c| c.eq_ignore_ascii_case(w)),
            }
            && eq(&self.source, &a.source)
            && eq(&self.status, &a.status)
            && eq(&self.destination, &a.destination)
            && match &self.payout {
                None => true,
                Some(p) => paid_out.get(id) == Some(p),
            }
            && self
                .arrival_min
                .is_none_or(|m| a.arrival_date.is_some_and(|d| d >= m))
            && self
                .arrival_max
                .is_none_or(|m| a.arrival_date.is_some_and(|d| d <= m))
    }
}

/// What the list handler asks the store for, already validated.
#[derive(Debug, Default, Clone)]
pub(crate) struct ListQuery {
    pub limit: usize,
    pub starting_after: Option<String>,
    pub ending_before: Option<String>,
    /// Inclusive lower bound on `created` (from `created[gt]`/`[gte]`/`=`).
    pub created_min: Option<i64>,
    /// Inclusive upper bound on `created` (from `created[lt]`/`[lte]`/`=`).
    pub created_max: Option<i64>,
    /// True when a bound was unsatisfiable (e.g. `created[gt]=i64::MAX`).
    pub empty: bool,
    /// The per-kind filters.
    pub filters: Filters,
}

/// One page of a list, as raw JSON texts in list order.
pub(crate) struct Page {
    pub data: Vec<Arc<str>>,
    pub has_more: bool,
}

/// A list request named a cursor that is not in the collection.
#[derive(Debug)]
pub(crate) struct MissingCursor {
    /// `"starting_after"` or `"ending_before"`.
    pub param: &'static str,
    pub id: String,
}

/// What a retrieve finds.
pub(crate) enum Found {
    Object(Arc<str>),
    /// A deleted customer: Stripe still answers a retrieve with a stub.
    Deleted,
    Missing,
}

/// One stored object: its JSON text and, for the kinds with per-object
/// filters, the attributes they test.
struct Stored {
    json: Arc<str>,
    attrs: Option<Box<Attrs>>,
}

#[derive(Default)]
struct Collection {
    sorted: BTreeMap<Key, Stored>,
    /// id → created, to find an object's key (for cursors and replacement).
    created_by_id: HashMap<String, i64>,
    /// Ids of deleted objects that Stripe still answers for (customers only).
    deleted: HashSet<String>,
    /// Balance transaction id → the automatic payout that paid it out (the
    /// `payout` filter; the object itself does not name its payout).
    paid_out: HashMap<String, String>,
}

/// All collections.
#[derive(Default)]
pub(crate) struct Store {
    collections: HashMap<ObjectKind, Collection>,
}

fn key(created: i64, id: &str) -> Key {
    (Reverse(created), Reverse(id.to_owned()))
}

/// The smallest key of all objects created at `created`, plus one step: every key
/// with this `created` is `<=` it, every key with a smaller (older) `created` is
/// `>` it. `Reverse("")` is the greatest `Reverse<String>`.
fn group_ceiling(created: i64) -> Key {
    (Reverse(created), Reverse(String::new()))
}

impl Store {
    /// Inserts or replaces (by id) an object. `json` is its serialized text,
    /// `attrs` what the per-kind filters test.
    pub fn insert(
        &mut self,
        kind: ObjectKind,
        id: String,
        created: i64,
        json: Arc<str>,
        attrs: Option<Box<Attrs>>,
    ) {
        let c = self.collections.entry(kind).or_default();
        if let Some(old) = c.created_by_id.insert(id.clone(), created) {
            c.sorted.remove(&key(old, &id));
        }
        c.deleted.remove(&id);
        c.sorted
            .insert((Reverse(created), Reverse(id)), Stored { json, attrs });
    }

    /// Records that the automatic payout `payout` paid out the balance
    /// transactions `txns` (what `GET /v1/balance_transactions?payout=`
    /// lists).
    pub fn pay_out(&mut self, payout: &str, txns: &[String]) {
        let c = self
            .collections
            .entry(ObjectKind::BalanceTransaction)
            .or_default();
        for t in txns {
            c.paid_out.insert(t.clone(), payout.to_owned());
        }
    }

    /// Removes an object. Customers leave a tombstone, because Stripe keeps
    /// answering `GET /v1/customers/{id}` for a deleted customer with
    /// `{"id": …, "object": "customer", "deleted": true}`.
    pub fn delete(&mut self, kind: ObjectKind, id: &str) {
        let Some(c) = self.collections.get_mut(&kind) else {
            return;
        };
        if let Some(created) = c.created_by_id.remove(id) {
            c.sorted.remove(&key(created, id));
            if kind == ObjectKind::Customer {
                c.deleted.insert(id.to_owned());
            }
        }
    }

    pub fn len(&self, kind: ObjectKind) -> usize {
        self.collections.get(&kind).map_or(0, |c| c.sorted.len())
    }

    pub fn get(&self, kind: ObjectKind, id: &str) -> Found {
        let Some(c) = self.collections.get(&kind) else {
            return Found::Missing;
        };
        if let Some(&created) = c.created_by_id.get(id) {
            if let Some(stored) = c.sorted.get(&key(created, id)) {
                return Found::Object(stored.json.clone());
            }
        }
        if c.deleted.contains(id) {
            Found::Deleted
        } else {
            Found::Missing
        }
    }

    /// One page of `kind`, newest first, per `q`.
    pub fn list(&self, kind: ObjectKind, q: &ListQuery) -> Result<Page, MissingCursor> {
        let empty = Collection::default();
        let c = self.collections.get(&kind).unwrap_or(&empty);

        // Resolve cursors first: an unknown cursor is an error even when the
        // created filter would make the page empty anyway.
        let cursor =
            |param: &'static str, id: &Option<String>| -> Result<Option<Key>, MissingCursor> {
                match id {
                    None => Ok(None),
                    Some(id) => match c.created_by_id.get(id) {
                        Some(&created) => Ok(Some(key(created, id))),
                        None => Err(MissingCursor {
                            param,
                            id: id.clone(),
                        }),
                    },
                }
            };
        let after = cursor("starting_after", &q.starting_after)?;
        let before = cursor("ending_before", &q.ending_before)?;
        let backwards = before.is_some();

        let nothing = Page {
            data: Vec::new(),
            has_more: false,
        };
        if q.empty || q.limit == 0 {
            return Ok(nothing);
        }

        // Lower bound of the key range = the newest end of the page.
        // created <= max  ⇔  key > group_ceiling(max + 1).
        let mut start: Option<Key> = match q.created_max {
            Some(max) => max.checked_add(1).map(group_ceiling),
            None => None,
        };
        if let Some(a) = after {
            // Both bounds are exclusive: the tighter one is the greater key.
            start = Some(match start {
                Some(s) if s > a => s,
                _ => a,
            });
        }
        let start: Bound<Key> = match start {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };

        // Upper bound = the oldest end. created >= min ⇔ key <= group_ceiling(min).
        let end: Bound<Key> = match (q.created_min.map(group_ceiling), before) {
            (None, None) => Bound::Unbounded,
            (Some(m), None) => Bound::Included(m),
            (None, Some(b)) => Bound::Excluded(b),
            (Some(m), Some(b)) => {
                if b <= m {
                    Bound::Excluded(b)
                } else {
                    Bound::Included(m)
                }
            }
        };

        // BTreeMap::range panics on an inverted range; such a range is empty.
        let inverted = match (&start, &end) {
            (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
            (Bound::Excluded(s), Bound::Included(e)) => s > e,
            _ => false,
        };
        if inverted {
            return Ok(nothing);
        }

        let filtered = !q.filters.is_empty();
        let admits = |(k, v): &(&Key, &Stored)| {
            !filtered || q.filters.admits(&k.1 .0, v.attrs.as_deref(), &c.paid_out)
        };
        let range = c.sorted.range((start, end));
        let limit = q.limit;
        if backwards {
            // `ending_before`: the `limit` objects immediately newer than the
            // cursor, still returned newest first; `has_more` says whether there
            // are even newer ones (the direction of paging).
            let mut data: Vec<Arc<str>> = range
                .rev()
                .filter(admits)
                .take(limit + 1)
                .map(|(_, v)| v.json.clone())
                .collect();
            let has_more = data.len() > limit;
            data.truncate(limit);
            data.reverse();
            Ok(Page { data, has_more })
        } else {
            let mut data: Vec<Arc<str>> = range
                .filter(admits)
                .take(limit + 1)
                .map(|(_, v)| v.json.clone())
                .collect();
            let has_more = data.len() > limit;
            data.truncate(limit);
            Ok(Page { data, has_more })
        }
    }
}
