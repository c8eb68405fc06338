//! The versioned L2 writes (`WRITE_IF_NEWER`: frames and 14-byte
//! tombstones compared by version) and newer-wins on the receiving node, as
//! property tests against a real server: random sequences of puts,
//! invalidations at chosen versions (fresh, repeated, older, barely newer)
//! and fetches on one key, through the public API of two cache nodes, each
//! step checked against a model of L2 and of both nodes.
//!
//! What they establish: a late (stale) invalidation never erases a newer L2
//! row; a duplicate or late message is a no-op on the node that receives it
//! (its `invalidations` counter is unchanged, its row is kept); a fill never
//! overwrites a newer frame or tombstone.

use std::fmt::Debug;

use crate::coherence_support::{
    Broadcast, Entity, Row, Sor, Tracked, bounded, eventually, l2_row, linked, node,
};
use echo_cache::{Cache, Coherence, Id, Minter, RawId, Source};
use echo_cache_testkit::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::aio::MultiplexedConnection;

/// Which version an invalidation carries.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// Minted now: newer than everything so far.
    Fresh,
    /// A version seen before in the case (a duplicate).
    Repeat(usize),
    /// Older than a version seen before (a late message).
    Older(usize, u64),
    /// Barely newer than a version seen before (maybe newer than the next
    /// minted one, too).
    Newer(usize, u64),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `put` on node A (it mints its own version).
    Put,
    /// `invalidate_at` on node A.
    Invalidate(Pick),
    /// `fetch` on node A (`broadcast` only: a `tracking` node may be sent
    /// its own scripted writes back, which the model does not predict).
    FetchA,
    /// `fetch` on node B.
    FetchB,
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        Just(Pick::Fresh),
        any::<usize>().prop_map(Pick::Repeat),
        (any::<usize>(), 1..5_000u64).prop_map(|(i, d)| Pick::Older(i, d)),
        (any::<usize>(), 1..4u64).prop_map(|(i, d)| Pick::Newer(i, d)),
    ]
}

fn ops(fetch_a: bool) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        2 => Just(Op::Put),
        4 => pick().prop_map(Op::Invalidate),
        if fetch_a { 1 } else { 0 } => Just(Op::FetchA),
        2 => Just(Op::FetchB),
    ];
    prop::collection::vec(op, 1..16)
}

/// What the model expects of one node's L1.
#[derive(Clone, Copy, Debug, Default)]
struct Node {
    /// The version of its row of the key, if it holds one.
    row: Option<u64>,
}

/// The model of one key: L2, both nodes, and the newest version applied.
#[derive(Debug)]
struct Model {
    mode: Coherence,
    l2: Row,
    a: Node,
    b: Node,
    /// The newest invalidation or put version applied (newer-wins memory):
    /// the same on both nodes of a `broadcast` table (every write is
    /// announced); node A's only for a `tracking` table (whose pushes carry
    /// no version).
    applied: Option<u64>,
    /// Expected increase of node B's `invalidations`.
    b_invalidations: u64,
    /// Versions seen, for the picks.
    seen: Vec<RawId>,
}

fn newer(v: u64, than: Option<u64>) -> bool {
    than.is_none_or(|than| v > than)
}

/// Whether a value at `v` is older than the newest applied invalidation:
/// it is then neither installed in L1 nor served from L2.
fn overtakes(applied: Option<u64>, v: u64) -> bool {
    applied.is_some_and(|applied| applied > v)
}

impl Model {
    fn new(mode: Coherence) -> Model {
        Model {
            mode,
            l2: Row::Absent,
            a: Node::default(),
            b: Node::default(),
            applied: None,
            b_invalidations: 0,
            seen: Vec::new(),
        }
    }

    fn l2_version(&self) -> Option<u64> {
        self.l2.version().map(|v| v.payload())
    }

    fn version<T: Entity>(&self, pick: Pick) -> RawId {
        let at = |i: usize| self.seen[i % self.seen.len()];
        match pick {
            _ if self.seen.is_empty() => Minter::global().mint_raw(T::KIND),
            Pick::Fresh => Minter::global().mint_raw(T::KIND),
            Pick::Repeat(i) => at(i),
            Pick::Older(i, d) => RawId::new(T::KIND, at(i).payload().saturating_sub(d).max(1)),
            Pick::Newer(i, d) => RawId::new(T::KIND, at(i).payload() + d),
        }
    }

    /// A write of the key at `version` reached L2 through the script: a
    /// frame (`put`) or a tombstone. Returns whether it was written.
    fn scripted(&mut self, version: RawId, frame: bool) -> bool {
        let written = newer(version.payload(), self.l2_version());
        if written {
            self.l2 = if frame {
                Row::Frame(version)
            } else {
                Row::Tombstone(version)
            };
        }
        written
    }

    /// Node B is told of a write at `version` (a message), or, for a
    /// `tracking` table, of a write to the key (`written`: a push).
    fn tell_b(&mut self, version: u64, written: bool) {
        match self.mode {
            Coherence::Broadcast => {
                // `applied` was advanced by A already: newer-wins against
                // what it was before.
                if self.b.row.is_some_and(|row| row < version) {
                    self.b.row = None;
                }
            }
            _ if written => self.b.row = None,
            _ => return,
        }
        self.b_invalidations += 1;
    }

    fn put(&mut self, version: RawId) {
        let v = version.payload();
        let was = self.applied;
        self.applied = was.max(Some(v));
        let written = self.scripted(version, true);
        // The writer drops its row, then installs the new one unless a
        // newer invalidation was applied.
        self.a.row = (!overtakes(was, v)).then_some(v);
        if self.mode == Coherence::Broadcast && !newer(v, was) {
            // A late put: B's newer-wins memory has seen newer.
            return;
        }
        self.tell_b(v, written);
    }

    fn invalidate(&mut self, version: RawId) {
        let v = version.payload();
        let was = self.applied;
        self.applied = was.max(Some(v));
        if self.a.row.is_some_and(|row| row < v) {
            self.a.row = None;
        }
        let written = self.scripted(version, false);
        if self.mode == Coherence::Broadcast && !newer(v, was) {
            // A duplicate or late message: a no-op on B.
            return;
        }
        self.tell_b(v, written);
    }

    /// The newer-wins memory of node B.
    fn applied_on(&self, b: bool) -> Option<u64> {
        if b && self.mode == Coherence::Tracking {
            None
        } else {
            self.applied
        }
    }

    /// Checks a fetch on node A or B against the model, then applies it.
    fn fetched(&mut self, b: bool, source: Source, version: RawId) -> Result<(), String> {
        let applied = self.applied_on(b);
        let row = if b { self.b.row } else { self.a.row };
        let v = version.payload();
        let expected = match (row, self.l2) {
            (Some(row), _) => Some((Source::Hit, row)),
            (None, Row::Frame(frame)) if !overtakes(applied, frame.payload()) => {
                Some((Source::L2, frame.payload()))
            }
            _ => None,
        };
        match expected {
            Some(expected) if expected != (source, v) => {
                return Err(format!(
                    "expected {expected:?}, fetched {source:?} at {version}"
                ));
            }
            None if source != Source::Fill => {
                return Err(format!("expected a fill, fetched {source:?} at {version}"));
            }
            _ => {}
        }
        if source == Source::Fill {
            self.seen.push(version);
            let vacant = self.l2 == Row::Absent;
            match self.mode {
                // A tracking fill: `SET … NX`.
                Coherence::Tracking if vacant => self.l2 = Row::Frame(version),
                Coherence::Tracking => {}
                _ => {
                    self.scripted(version, true);
                }
            }
        }
        if source != Source::Hit && !overtakes(applied, v) {
            if b {
                self.b.row = Some(v);
            } else {
                self.a.row = Some(v);
            }
        }
        Ok(())
    }
}

/// Waits until node B applied every message sent before: B fills a fresh
/// marker id, A invalidates it, and B's row of it goes (messages and pushes
/// reach B in the order A sent them).
async fn sync<T: Entity>(a: &Cache, b: &Cache) {
    let marker = Id::<T>::mint();
    b.fetch(marker).await.expect("fetch the marker");
    a.invalidate(marker).await.expect("invalidate the marker");
    eventually("B applies the marker's invalidation", async || {
        b.fetch(marker).await.expect("fetch the marker").source() != Source::Hit
    })
    .await;
}

struct Nodes {
    a: Cache,
    b: Cache,
    raw: MultiplexedConnection,
}

/// Runs `ops` on a fresh id and checks every step against the model.
async fn case<T: Entity>(nodes: &Nodes, ops: &[Op]) -> Result<(), String> {
    let Nodes { a, b, raw } = nodes;
    let mut raw = raw.clone();
    let mut model = Model::new(T::spec().coherence());
    let id = Id::<T>::mint();
    sync::<T>(a, b).await;
    for (step, op) in ops.iter().enumerate() {
        let before = b.stats::<T>().invalidations;
        let mut sent = false;
        match *op {
            Op::Put => {
                let version = a.put(id, T::at(0)).await.expect("put");
                model.seen.push(version);
                model.put(version);
                sent = true;
            }
            Op::Invalidate(pick) => {
                let version = model.version::<T>(pick);
                model.seen.push(version);
                a.invalidate_at(id, version).await.expect("invalidate");
                model.invalidate(version);
                sent = true;
            }
            Op::FetchA | Op::FetchB => {
                let on_b = matches!(op, Op::FetchB);
                let fetched = if on_b { b.fetch(id) } else { a.fetch(id) }
                    .await
                    .expect("fetch");
                if let Err(e) = model.fetched(on_b, fetched.source(), fetched.version()) {
                    return Err(failed(step, op, &model, &e));
                }
            }
        }
        if sent {
            sync::<T>(a, b).await;
            // The marker's own invalidation counts once.
            let told = b.stats::<T>().invalidations - before - 1;
            let expected = std::mem::take(&mut model.b_invalidations);
            if told != expected {
                let e =
                    format!("node B applied {told} invalidations of the key, expected {expected}");
                return Err(failed(step, op, &model, &e));
            }
        }
        let row = l2_row(&mut raw, id).await;
        if row != model.l2 {
            let e = format!("L2 holds {row:?}, expected {:?}", model.l2);
            return Err(failed(step, op, &model, &e));
        }
    }
    // Whatever B holds (a row kept through late messages included) is what
    // the model says.
    let fetched = b.fetch(id).await.expect("fetch");
    model
        .fetched(true, fetched.source(), fetched.version())
        .map_err(|e| format!("last fetch on B: {e}\nmodel: {model:?}"))
}

fn failed(step: usize, op: &Op, model: &Model, error: &str) -> String {
    format!("step {step} ({op:?}): {error}\nmodel: {model:?}")
}

fn property<T: Entity>(fetch_a: bool) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = RedisServer::start();
    let sor = Sor::default();
    let nodes = runtime.block_on(async {
        let (a, b) = (node(&server, &sor), node(&server, &sor));
        linked(&a).await;
        linked(&b).await;
        let raw = server.connection().await;
        Nodes { a, b, raw }
    });
    let config = Config {
        cases: 64,
        max_shrink_iters: 256,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&ops(fetch_a), |ops| {
        runtime
            .block_on(bounded("a case", case::<T>(&nodes, &ops)))
            .map_err(TestCaseError::fail)
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

#[test]
fn versioned_writes_and_newer_wins_broadcast() {
    property::<Broadcast>(true);
}

#[test]
fn versioned_writes_tracking() {
    property::<Tracked>(false);
}
