//! What an operator reads of a table's rows, beside its counters: its
//! [`Figures`] (rows, bytes, the next expiry) and its hottest ids
//! ([`Hot`]).

use std::time::Duration;

/// A table's rows, counted now: what
/// [`Cache::figures`](crate::Cache::figures) and
/// [`TableOps::figures`](crate::TableOps::figures) answer.
///
/// Counted by a walk of the table's slots (about 1 ms for 100,000 rows,
/// see [Inspection](crate#inspection)) that takes no lock while it reads
/// them: rows written during the walk may be miscounted by as many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Figures {
    /// Rows alive now: values, and remembered absences (ids the loader did
    /// not find, kept for `absent_ttl_ms`). [`Stats::size`](crate::Stats::size)
    /// counts the dead rows not yet swept too.
    pub rows: u64,
    /// Of [`rows`](Self::rows), the remembered absences.
    pub absent: u64,
    /// Rows past their expiry that the sweeper has not reclaimed yet (or
    /// keeps for the table's `stale_if_error_ms`).
    pub dead: u64,
    /// The bytes L1 holds for the table: its slot arrays (32 bytes a slot;
    /// 1.5 to 2 slots a row), its eviction state (the sketch, 12 bytes a
    /// row of `max_size` once the table has filled; the probation queue)
    /// and each value's `Arc` allocation (`size_of::<T>()` and two
    /// counts). Not what a value owns on the heap (a `String`'s buffer, a
    /// `Vec`'s items): L1 keeps values decoded and does not know their
    /// encoded size.
    pub bytes: u64,
    /// In a table with a byte bound (`max_bytes`), the weight of its rows
    /// as the bound counts it: what the weigher said of each value, else
    /// its encoded size (see [A byte bound](crate#a-byte-bound)); at most
    /// `max_bytes`. `None` without a byte bound. [`bytes`](Self::bytes)
    /// counts the weights' own bookkeeping (about 17 bytes a row).
    pub weight: Option<u64>,
    /// How long until the live row nearest its expiry dies: the age of the
    /// oldest row, seen from the other end (a row lives `ttl_ms ±
    /// ttl·jitter`, or less if its loader or `put_with_ttl` gave it less).
    /// `None` if no live row dies (the table is empty).
    pub next_expiry: Option<Duration>,
}

/// One of a table's hottest rows: its id and its heat, what
/// [`Cache::hottest`](crate::Cache::hottest) (an [`Id<T>`](crate::Id))
/// and [`TableOps::hottest`](crate::TableOps::hottest) (a
/// [`RawId`](crate::RawId), which prints as text) list.
///
/// The heat is the eviction policy's own estimate, from 1 to 16: how often
/// the id was asked for lately as the table's sketch counts it (misses,
/// and one for each turn of the clock hand that found the row read since
/// its last; hits count nothing themselves), halved for every two turns
/// of the hand that found the row unread, plus one if it was read since
/// the hand last passed. See [Inspection](crate#inspection) for when the
/// policy counts at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Hot<I> {
    /// The row's id.
    pub id: I,
    /// Its heat, 1 to 16.
    pub heat: u8,
}

impl<I> Hot<I> {
    pub(crate) fn new(id: I, heat: u8) -> Hot<I> {
        Hot { id, heat }
    }
}
