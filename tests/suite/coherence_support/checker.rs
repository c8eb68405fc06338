//! The stale-read checker: writers and readers of one table on several
//! cache nodes, and what their reads may not show.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use echo_cache::{Cache, Error, Id, Source};

use super::{Entity, Sor, bounded};

/// The delivery bound `D` on loopback, the same for `tracking`,
/// `broadcast` and `durable`, on one server and on a cluster: a write
/// acknowledged on one node is applied on every other node within it (see
/// "Delivery bound" in `echo-cache/src/coherence/mod.rs`; a durable lane's
/// read is blocked on the stream, so it takes a message as soon as it is
/// appended). A push or a message takes well under a millisecond on
/// loopback; the bound is generous so that a loaded two-core CI machine,
/// which may leave a lane's task unscheduled for a while, does not fail the
/// checker.
pub const D: Duration = Duration::from_millis(100);

/// How long the readers of a stale-read checker read at least.
pub const RUN_FOR: Duration = Duration::from_millis(2_500);

/// The acknowledged writes and the reads a run makes at least: on a
/// machine loaded enough to make fewer within its time, the run goes on
/// until it has made them (a run of a few writes would prove nothing).
const MIN_WRITES: usize = 100;
const MIN_READS: usize = 1_000;

/// Ids written and read by the stale-read checker.
const IDS: usize = 100;

/// Reader tasks per node.
const READERS: usize = 2;

/// With bulk writes, one write in this many is a bulk write.
const BULK_EVERY: usize = 25;

/// One read of the stale-read checker.
#[derive(Clone, Copy, Debug)]
struct Read {
    node: usize,
    id: usize,
    began: Instant,
    ended: Instant,
    revision: u64,
    source: Source,
}

/// How far a run has got: it ends once its time is up and it has made
/// [`MIN_WRITES`] and [`MIN_READS`].
#[derive(Default)]
struct Progress {
    writes: AtomicUsize,
    reads: AtomicUsize,
}

impl Progress {
    fn going(&self, until: Instant) -> bool {
        Instant::now() < until
            || self.writes.load(Ordering::Relaxed) < MIN_WRITES
            || self.reads.load(Ordering::Relaxed) < MIN_READS
    }
}

/// A small xorshift: the ids and the operations of the checker.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).expect("below n")
    }
}

/// The stale-read checker of a mode. A writer bumps the revision of one of
/// [`IDS`] ids in the system of record, then puts or invalidates it on the
/// first node, and records when that write was acknowledged; readers on
/// every node fetch ids continuously for `run_for` (and longer, if need be,
/// until [`MIN_WRITES`] writes and [`MIN_READS`] reads), while `disturb` runs
/// (a reshard, a failover, or nothing). Then:
///
/// (a) no read returns a revision older than one whose write was
///     acknowledged more than `d` before the read began;
/// (b) on each node, revisions never go backwards: a read that began after
///     another one ended returns a revision at least as new;
/// (c) no read failed.
///
/// A write the cache reports not delivered (a `durable` stream append that
/// failed) was not acknowledged: it is not held against the readers.
///
/// A disturbance that takes the server away answers the [`Outage`] it
/// caused: a write acknowledged during it is due `recovery` after it ended
/// (the cache delivers it then), and until then a node may read it and
/// then an older revision (a fill saw the system of record, L2 still held
/// the older frame), so (b) starts over at the end of the recovery.
pub async fn run<T: Entity>(
    nodes: &[Cache],
    sor: &Sor,
    run_for: Duration,
    d: Duration,
    disturb: impl Future<Output = Option<Outage>>,
) {
    run_with::<T>(nodes, sor, run_for, d, disturb, None).await;
}

/// A write of many ids at once, mixed in with the checker's puts and
/// invalidations.
#[derive(Debug)]
pub enum Bulk<T: Entity> {
    /// [`Cache::invalidate_all`]: every id.
    All,
    /// [`Cache::invalidate_tag`] of the tag of an id drawn at random, the
    /// ids of that tag by this function (the table's `tag` function of the
    /// value [`Entity::of`] the id).
    Tag(fn(Id<T>) -> u64),
}

// Not derived: that would ask `T: Copy`.
impl<T: Entity> Clone for Bulk<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Entity> Copy for Bulk<T> {}

impl<T: Entity> Bulk<T> {
    /// Draws what a bulk write covers among `ids` (by `rng`): the indices
    /// of the ids covered, and the tag to invalidate (none: the table).
    fn covers(self, ids: &[Id<T>], rng: &mut Rng) -> (Vec<usize>, Option<u64>) {
        match self {
            Bulk::All => ((0..ids.len()).collect(), None),
            Bulk::Tag(tag_of) => {
                let tag = tag_of(ids[rng.below(ids.len())]);
                let covered = (0..ids.len()).filter(|&i| tag_of(ids[i]) == tag);
                (covered.collect(), Some(tag))
            }
        }
    }
}

/// [`run`], and with `bulk`, one write in [`BULK_EVERY`] is a bulk write:
/// the writer bumps the revision of every id it covers in the system of
/// record, then makes it on the first node ([`Cache::invalidate_all`] or
/// [`Cache::invalidate_tag`]); once that is acknowledged those ids' new
/// revisions are held against the readers.
pub async fn run_with<T: Entity>(
    nodes: &[Cache],
    sor: &Sor,
    run_for: Duration,
    d: Duration,
    disturb: impl Future<Output = Option<Outage>>,
    bulk: Option<Bulk<T>>,
) {
    let ids: Arc<Vec<Id<T>>> = Arc::new((0..IDS).map(|_| Id::mint()).collect());
    let start = Instant::now();
    let until = start + run_for;
    let progress = Arc::new(Progress::default());

    let writer = {
        let (a, ids, sor) = (nodes[0].clone(), Arc::clone(&ids), sor.clone());
        let progress = Arc::clone(&progress);
        tokio::spawn(async move {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let mut acks: Vec<Vec<(u64, Instant)>> = vec![Vec::new(); IDS];
            while progress.going(until) {
                if let Some(bulk) = bulk
                    && rng.below(BULK_EVERY) == 0
                {
                    let (covered, tag) = bulk.covers(&ids, &mut rng);
                    let revisions: Vec<u64> =
                        covered.iter().map(|&i| sor.bump(ids[i].raw())).collect();
                    let written = match tag {
                        None => a.invalidate_all::<T>().await,
                        Some(tag) => a.invalidate_tag::<T>(tag).await,
                    };
                    match written {
                        Ok(_) => {
                            let at = Instant::now();
                            progress.writes.fetch_add(covered.len(), Ordering::Relaxed);
                            for (i, revision) in covered.into_iter().zip(revisions) {
                                acks[i].push((revision, at));
                            }
                        }
                        Err(Error::NotDelivered { .. }) => {}
                        Err(error) => panic!("a bulk write failed: {error}"),
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                let i = rng.below(IDS);
                let revision = sor.bump(ids[i].raw());
                let written = if rng.below(2) == 0 {
                    a.put(ids[i], T::of(ids[i], revision)).await.map(drop)
                } else {
                    a.invalidate(ids[i]).await.map(drop)
                };
                match written {
                    Ok(()) => {
                        acks[i].push((revision, Instant::now()));
                        progress.writes.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::NotDelivered { .. }) => {}
                    Err(error) => panic!("a write failed: {error}"),
                }
                tokio::task::yield_now().await;
            }
            acks
        })
    };
    let readers: Vec<_> = (0..nodes.len() * READERS)
        .map(|r| {
            let (node, ids) = (r % nodes.len(), Arc::clone(&ids));
            let (cache, progress) = (nodes[node].clone(), Arc::clone(&progress));
            tokio::spawn(async move {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (r as u64 + 1));
                let mut reads = Vec::new();
                while progress.going(until) {
                    let id = rng.below(IDS);
                    let began = Instant::now();
                    let fetched = cache.fetch(ids[id]).await.expect("fetch");
                    reads.push(Read {
                        node,
                        id,
                        began,
                        ended: Instant::now(),
                        revision: fetched.revision(),
                        source: fetched.source(),
                    });
                    progress.reads.fetch_add(1, Ordering::Relaxed);
                    // A hit never yields by itself: let the links run.
                    tokio::task::yield_now().await;
                }
                reads
            })
        })
        .collect();

    let outage = disturb.await;
    let disturbed = start.elapsed();
    let acks = bounded("the writer", writer).await.expect("the writer");
    let mut reads = Vec::new();
    for reader in readers {
        reads.extend(bounded("a reader", reader).await.expect("a reader"));
    }
    let writes: usize = acks.iter().map(Vec::len).sum();

    let (lag, stale) = staleness(&acks, &reads, d, outage);
    let settled = outage.map(|outage| outage.ended + outage.recovery);
    let backwards: Vec<_> = regressions(&reads, nodes.len())
        .into_iter()
        .filter(|(_, later)| settled.is_none_or(|settled| later.began > settled))
        .collect();
    let mode = T::spec().coherence();
    let from = |source| reads.iter().filter(|r| r.source == source).count();
    eprintln!(
        "stale-read checker, {mode:?}: {writes} writes, {} reads \
         ({} hits, {} from L2, {} fills), longest staleness {lag:?} (D = {d:?}), \
         {} reads past D, {} regressions",
        reads.len(),
        from(Source::Hit),
        from(Source::L2),
        from(Source::Fill),
        stale.len(),
        backwards.len()
    );
    // What a failure needs to be told apart: when, from where, and what
    // the nodes saw of the server meanwhile.
    let since = |at: Instant| at.saturating_duration_since(start);
    let first = stale.first().map(|&(read, missed)| {
        let acked = acks[read.id].iter().find(|(r, _)| *r == missed);
        format!(
            "node {} read revision {} from {:?}, in {:?}..{:?}; revision {missed} \
             was acknowledged at {:?}",
            read.node,
            read.revision,
            read.source,
            since(read.began),
            since(read.ended),
            acked.map(|&(_, at)| since(at))
        )
    });
    assert!(
        stale.is_empty(),
        "{mode:?}: {} reads returned a revision older than one acknowledged \
         more than {d:?} before they began; first: {}. (Times from the \
         checker's start; the disturbance ended at {disturbed:?}; the \
         nodes' stats: {:?})",
        stale.len(),
        first.unwrap_or_default(),
        nodes.iter().map(Cache::stats::<T>).collect::<Vec<_>>()
    );
    assert!(
        backwards.is_empty(),
        "{mode:?}: {} reads went backwards on their node; first: {:?}",
        backwards.len(),
        backwards.first()
    );
}

/// The stale-read checker of `T` undisturbed, on two nodes: `node` builds
/// each (its loaders reading `sor`), `ready` waits until they serve, then
/// [`run`] for [`RUN_FOR`] with the bound [`D`].
pub async fn two_nodes<T: Entity>(node: impl Fn(&Sor) -> Cache, ready: impl AsyncFn(&[Cache])) {
    let sor = Sor::default();
    let nodes = [node(&sor), node(&sor)];
    ready(&nodes).await;
    run::<T>(&nodes, &sor, RUN_FOR, D, std::future::ready(None)).await;
}

/// [`two_nodes`] with `bulk` writes ([`run_with`]): table-wide or tag
/// invalidations mixed in with the puts and invalidations.
pub async fn two_nodes_bulk<T: Entity>(
    node: impl Fn(&Sor) -> Cache,
    ready: impl AsyncFn(&[Cache]),
    bulk: Bulk<T>,
) {
    let sor = Sor::default();
    let nodes = [node(&sor), node(&sor)];
    ready(&nodes).await;
    let undisturbed = std::future::ready(None);
    run_with::<T>(&nodes, &sor, RUN_FOR, D, undisturbed, Some(bulk)).await;
}

/// The server away: from `began` to `ended`; a write acknowledged meanwhile
/// reaches every node within `recovery` after.
#[derive(Clone, Copy, Debug)]
pub struct Outage {
    pub began: Instant,
    pub ended: Instant,
    pub recovery: Duration,
}

/// For every read, how long before it began the first write newer than
/// what it returned was due (acknowledged, or, during `outage`, recovered):
/// the longest such staleness, and the reads whose staleness exceeds `d`
/// (with the revision they missed).
fn staleness(
    acks: &[Vec<(u64, Instant)>],
    reads: &[Read],
    d: Duration,
    outage: Option<Outage>,
) -> (Duration, Vec<(Read, u64)>) {
    let due = |acked: Instant| match outage {
        Some(outage) if (outage.began..=outage.ended).contains(&acked) => {
            outage.ended + outage.recovery
        }
        _ => acked,
    };
    let mut longest = Duration::ZERO;
    let mut past = Vec::new();
    for read in reads {
        let missed = acks[read.id]
            .iter()
            .filter(|(r, _)| *r > read.revision)
            .map(|&(r, acked)| (r, read.began.saturating_duration_since(due(acked))))
            .max_by_key(|&(_, stale_for)| stale_for);
        let Some((missed, stale_for)) = missed else {
            continue;
        };
        longest = longest.max(stale_for);
        if stale_for > d {
            past.push((*read, missed));
        }
    }
    (longest, past)
}

/// The reads that returned an older revision than a read of the same id on
/// the same node that ended before they began: `(earlier, later)`.
fn regressions(reads: &[Read], nodes: usize) -> Vec<(Read, Read)> {
    let mut out = Vec::new();
    let mut groups: HashMap<(usize, usize), Vec<Read>> = HashMap::new();
    for read in reads {
        groups.entry((read.node, read.id)).or_default().push(*read);
    }
    for node in 0..nodes {
        for id in 0..IDS {
            let Some(group) = groups.get(&(node, id)) else {
                continue;
            };
            let mut by_end = group.clone();
            by_end.sort_by_key(|r| r.ended);
            let mut by_start = group.clone();
            by_start.sort_by_key(|r| r.began);
            let mut newest: Option<Read> = None;
            let mut ended = by_end.iter().peekable();
            for read in &by_start {
                while let Some(done) = ended.next_if(|r| r.ended < read.began) {
                    if newest.is_none_or(|n| done.revision > n.revision) {
                        newest = Some(*done);
                    }
                }
                if let Some(newest) = newest
                    && read.revision < newest.revision
                {
                    out.push((newest, *read));
                }
            }
        }
    }
    out
}
