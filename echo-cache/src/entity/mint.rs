//! Minting snowflake payloads: time, node and sequence in 64 bits.
//!
//! Layout, most significant first: 42 bits of milliseconds since
//! [`EPOCH_MS`] (2025-01-01T00:00:00Z; good for 139 years), 10 bits of node,
//! 12 bits of sequence. The time field leads, so payload order is time order;
//! within one minter the (time, sequence) pair strictly increases, so payload
//! order is mint order too.
//!
//! The wall clock may step back (NTP, a VM migration). A minter never follows
//! it backwards: it keeps the last (time, sequence) it issued and, when the
//! clock reads earlier, keeps counting from there. When 4096 ids are minted in
//! one millisecond the minter borrows the next millisecond. Either way it runs
//! ahead of the wall clock for a moment and the clock catches up.
//!
//! The node field tells apart ids minted by different processes in the same
//! millisecond; see [`Minter`]'s "Node numbers".

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::clock::millis;
use crate::entity::id::{Id, RawId};
use crate::entity::kind::Kind;
use crate::entity::spec::Cached;

/// The minting epoch: 2025-01-01T00:00:00Z in milliseconds since the Unix epoch.
pub const EPOCH_MS: u64 = 1_735_689_600_000;
const NODE_BITS: u32 = 10;
const SEQ_BITS: u32 = 12;
const TIME_BITS: u32 = 64 - NODE_BITS - SEQ_BITS;
/// The largest node number a minter accepts.
pub const MAX_NODE: u16 = (1 << NODE_BITS) - 1;
const SEQ_MAX: u64 = (1 << SEQ_BITS) - 1;
const TIME_MAX: u64 = (1 << TIME_BITS) - 1;

/// Mints ids that are unique and increasing across the threads that share it.
///
/// ```
/// use echo_cache::{Kind, Minter};
///
/// let minter = Minter::new(7).expect("7 is a valid node");
/// let a = minter.mint_raw(Kind::new("GAM"));
/// let b = minter.mint_raw(Kind::new("GAM"));
/// assert!(b.is_newer_than(&a));
/// assert_eq!(Minter::node_of(&a), 7);
/// ```
///
/// # Node numbers
///
/// The node field tells apart ids minted by different processes in the same
/// millisecond, so versions are unique across the processes sharing an L2
/// without any configuration:
///
/// - [`Minter::global`] starts on a node number drawn at random when the
///   process first mints;
/// - a cache with L2 claims that number on the server (a key
///   `ecc:node:<n>` holding a token of the process, leased for 30 s and
///   renewed every 3 s while the cache lives, deleted when it is dropped).
///   If another live process holds it, the cache draws another and claims
///   that; [`Cache::ready`](crate::Cache::ready) waits for the claim;
/// - [`Minter::set_node`] is the explicit override: a node number set by
///   hand is never changed by a claim (a clash with another process is
///   logged, not repaired).
///
/// The node field has 10 bits: 1,024 processes can share an L2 with
/// distinct numbers. Past that, a process that finds every number taken
/// keeps its random one, logs an error and tries again at every renewal;
/// two such processes can mint the same version in the same millisecond.
/// A process stopped (SIGSTOP, a VM pause) for longer than the lease may
/// find its number taken when it resumes; until its next renewal (at most
/// 3 s) it may share it.
#[derive(Debug)]
pub struct Minter {
    node: AtomicU64,
    /// Whether the node number was chosen by hand ([`Minter::new`],
    /// [`Minter::set_node`]): a claim on L2 never changes it.
    explicit: AtomicBool,
    /// The last `time << SEQ_BITS | sequence` issued.
    last: AtomicU64,
}

impl Minter {
    /// A minter stamping `node` into every id.
    ///
    /// Returns `None` if `node` is above [`MAX_NODE`].
    #[must_use]
    pub fn new(node: u16) -> Option<Minter> {
        (node <= MAX_NODE).then(|| Minter {
            node: AtomicU64::new(u64::from(node)),
            explicit: AtomicBool::new(true),
            last: AtomicU64::new(0),
        })
    }

    /// The process-wide minter: its node number is drawn at random, then
    /// claimed on L2 by the process's caches (see
    /// [node numbers](Minter#node-numbers)), unless set with
    /// [`set_node`](Self::set_node).
    pub fn global() -> &'static Minter {
        static GLOBAL: OnceLock<Minter> = OnceLock::new();
        GLOBAL.get_or_init(|| Minter {
            node: AtomicU64::new(u64::from(random_node())),
            explicit: AtomicBool::new(false),
            last: AtomicU64::new(0),
        })
    }

    /// Sets the node stamped into ids minted from now on, for good: a
    /// cache's claim on L2 will not change it.
    ///
    /// Returns `false` (and changes nothing) if `node` is above [`MAX_NODE`].
    pub fn set_node(&self, node: u16) -> bool {
        if node > MAX_NODE {
            return false;
        }
        self.explicit.store(true, Ordering::Relaxed);
        self.node.store(u64::from(node), Ordering::Relaxed);
        true
    }

    /// The node number stamped into the ids minted now.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // at most MAX_NODE
    pub fn node(&self) -> u16 {
        self.node.load(Ordering::Relaxed) as u16
    }

    /// Whether the node number was chosen by hand.
    pub(crate) fn is_explicit(&self) -> bool {
        self.explicit.load(Ordering::Relaxed)
    }

    /// Moves from node `from` to `to`, unless the number was chosen by hand
    /// or changed meanwhile; whether it moved.
    pub(crate) fn adopt(&self, from: u16, to: u16) -> bool {
        !self.is_explicit()
            && self
                .node
                .compare_exchange(
                    u64::from(from),
                    u64::from(to),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// The node stamped into `id`.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // masked to 10 bits
    pub fn node_of(id: &RawId) -> u16 {
        ((id.payload() >> SEQ_BITS) & u64::from(MAX_NODE)) as u16
    }

    /// The wall-clock time, in milliseconds since the Unix epoch, at which
    /// `id` was minted (or the minter's time, if it was running ahead).
    #[must_use]
    pub fn unix_ms_of(id: &RawId) -> u64 {
        unix_ms_of_payload(id.payload())
    }

    /// Mints an id of `T`'s kind.
    #[must_use]
    pub fn mint<T: Cached>(&self) -> Id<T> {
        Id::from_payload(self.next_payload(wall_ms()))
    }

    /// Mints an id of `kind`.
    #[must_use]
    pub fn mint_raw(&self, kind: Kind) -> RawId {
        RawId::new(kind, self.next_payload(wall_ms()))
    }

    /// The next payload when the wall clock reads `now` (ms since [`EPOCH_MS`]).
    fn next_payload(&self, now: u64) -> u64 {
        let now = now.min(TIME_MAX);
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let (time, seq) = (last >> SEQ_BITS, last & SEQ_MAX);
            let next = if now > time {
                now << SEQ_BITS
            } else if seq < SEQ_MAX {
                last + 1
            } else {
                // The sequence of this millisecond is spent: borrow the next one.
                (time + 1).min(TIME_MAX) << SEQ_BITS
            };
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let (time, seq) = (next >> SEQ_BITS, next & SEQ_MAX);
                    let node = self.node.load(Ordering::Relaxed);
                    return time << (NODE_BITS + SEQ_BITS) | node << SEQ_BITS | seq;
                }
                Err(seen) => last = seen,
            }
        }
    }
}

/// Ids mint here, not in `id`: the minter builds on ids, not ids on it.
impl<T: Cached> Id<T> {
    /// Mints a fresh id of `T`'s kind from the process-wide
    /// [`Minter`].
    #[must_use]
    pub fn mint() -> Id<T> {
        Minter::global().mint()
    }
}

/// A node number drawn at random.
pub(crate) fn random_node() -> u16 {
    fastrand::u16(..=MAX_NODE)
}

/// When a payload was minted, in milliseconds since the Unix epoch.
pub(crate) fn unix_ms_of_payload(payload: u64) -> u64 {
    (payload >> (NODE_BITS + SEQ_BITS)) + EPOCH_MS
}

/// Milliseconds since [`EPOCH_MS`] by the wall clock (0 if it reads earlier).
fn wall_ms() -> u64 {
    unix_ms().saturating_sub(EPOCH_MS)
}

/// Milliseconds since the Unix epoch by the wall clock.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_monotonic_when_the_clock_steps_back() {
        let minter = Minter::new(3).unwrap();
        let mut last = 0;
        for now in [1_000, 1_000, 999, 500, 1_000, 1_001, 10, 2_000] {
            let next = minter.next_payload(now);
            assert!(next > last, "{next} after {last} at {now}");
            last = next;
        }
    }

    #[test]
    fn a_spent_millisecond_borrows_the_next() {
        let minter = Minter::new(0).unwrap();
        let first = minter.next_payload(50);
        let ids: Vec<u64> = (0..SEQ_MAX + 10).map(|_| minter.next_payload(50)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids[0] > first);
        assert_eq!(ids.last().unwrap() >> (NODE_BITS + SEQ_BITS), 51);
    }

    #[test]
    fn node_and_time_are_stamped() {
        let minter = Minter::new(MAX_NODE).unwrap();
        let id = RawId::new(Kind::new("GAM"), minter.next_payload(1234));
        assert_eq!(Minter::node_of(&id), MAX_NODE);
        assert_eq!(Minter::unix_ms_of(&id), EPOCH_MS + 1234);
        assert!(Minter::new(MAX_NODE + 1).is_none());
        assert!(!minter.set_node(MAX_NODE + 1));
    }
}
