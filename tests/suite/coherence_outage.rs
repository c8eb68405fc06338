//! Writes acknowledged while the server is away reach the other nodes once
//! it is back: the writer keeps what it could not deliver and delivers it,
//! newer-wins, as soon as the server answers (auto-recovery). After an
//! outage ends, no node serves a value older than a write acknowledged
//! during it beyond the recovery bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::coherence_support;
use crate::coherence_support::{
    Broadcast, Entity, Sor, Tracked, bounded, builder, entity, eventually, linked, with_loaders,
};
use echo_cache::{Builder, Cache, Id, RawId};
use echo_cache_testkit::RedisServer;

// A `none` table: nothing carries its writes to other nodes' L1, but its
// L2 must not keep a value an acknowledged write replaced.
entity!(Plain, "PLO", "none", "plain_outage");

/// How long one L2 operation may take here: an outage costs a write that.
const L2_TIMEOUT: Duration = Duration::from_millis(100);

/// `builder` with loaders of every table here that read `sor`.
fn loaders(builder: Builder, sor: &Sor) -> Builder {
    with_loaders(builder, sor)
        .open::<Plain>()
        .loader(coherence_support::reads::<Plain>(sor))
}

/// A node whose loaders read `sor`, with a short L2 timeout.
fn node(server: &RedisServer, sor: &Sor) -> Cache {
    loaders(builder(server).l2_timeout(L2_TIMEOUT), sor)
        .build()
        .expect("cache builds")
}

/// Waits until `cache` answers `revision` for `id`.
async fn reads<T: Entity>(cache: &Cache, id: Id<T>, revision: u64, what: &str) {
    eventually(what, async || {
        cache.fetch(id).await.expect("no error").revision() == revision
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_acknowledged_during_a_pause_reach_every_node_once_it_is_back() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node(&server, &sor), node(&server, &sor));
    linked(&a).await;
    linked(&b).await;
    let (t, w, p) = (
        Id::<Tracked>::mint(),
        Id::<Broadcast>::mint(),
        Id::<Plain>::mint(),
    );
    for _ in 0..2 {
        b.fetch(t).await.unwrap();
        b.fetch(w).await.unwrap();
        b.fetch(p).await.unwrap();
    }

    server.pause();
    for id in [t.raw(), w.raw(), p.raw()] {
        assert_eq!(sor.bump(id), 1);
    }
    // Acknowledged, though the server did not take them.
    bounded("A's writes", async {
        a.invalidate(t).await.expect("acknowledged");
        a.invalidate(w).await.expect("acknowledged");
        a.invalidate(p).await.expect("acknowledged");
    })
    .await;
    assert!(a.stats::<Broadcast>().announcements_dropped > 0);
    server.resume();

    // Each table counts a redelivery once it is done (the plain id's L2
    // frame dropped): the new node below must not read that frame first.
    eventually("A to deliver what it kept", async || {
        let redeliveries = [
            a.stats::<Tracked>().redeliveries,
            a.stats::<Broadcast>().redeliveries,
            a.stats::<Plain>().redeliveries,
        ];
        redeliveries.iter().all(|&redeliveries| redeliveries > 0)
    })
    .await;
    reads(&b, t, 1, "B reads the tracked write").await;
    reads(&b, w, 1, "B reads the broadcast write").await;
    let c = node(&server, &sor);
    reads(
        &c,
        p,
        1,
        "a node that never held the plain id reads its write",
    )
    .await;
}

/// A write's acknowledgement on the writer: the revision it wrote and when
/// its `invalidate` returned.
type Acks = Arc<Mutex<HashMap<RawId, Vec<(u64, Instant)>>>>;

/// One read: the id, the revision it answered, when it started.
type Read = (RawId, u64, Instant);

/// How long after a write is acknowledged (or, for a write acknowledged
/// during an outage, after the outage ended) every node reads it at the
/// latest. Outside outages the delivery bound `D` of
/// `coherence_races.rs` (100 ms) holds; after one, the writer's delivery
/// task finds the server within 100 ms and delivers its backlog (two round
/// trips per id kept, a thousand ids here); slack for a loaded two-core
/// machine.
const RECOVERY: Duration = Duration::from_millis(1_500);

/// The `n`th index a task visits among 1,000 ids: a stride coprime with
/// 1,000, so each task sweeps them all in an order of its own.
fn spread(n: usize) -> usize {
    n * 617 % 1_000
}

/// The outage soak: two nodes, a `broadcast` table of 1,000 ids written on
/// node A and read on both, while the server is paused for 2 s, killed and
/// restarted, then paused again. No reader error, and no read that starts
/// more than [`RECOVERY`] after a write was acknowledged (or after the
/// outage it was acknowledged in ended) answers a revision that write
/// replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outage_soak_serves_no_write_older_than_the_recovery_bound() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node(&server, &sor), node(&server, &sor));
    linked(&a).await;
    linked(&b).await;
    let ids: Arc<Vec<Id<Broadcast>>> = Arc::new((0..1_000).map(|_| Id::mint()).collect());
    let acks: Acks = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let writers: Vec<_> = (0..2_usize)
        .map(|task| {
            let (a, sor, ids, acks, stop) = (
                a.clone(),
                sor.clone(),
                ids.clone(),
                acks.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let mut n = task;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let id = ids[spread(n)];
                    let revision = sor.bump(id.raw());
                    a.invalidate(id)
                        .await
                        .expect("broadcast writes are acknowledged");
                    acks.lock()
                        .unwrap()
                        .entry(id.raw())
                        .or_default()
                        .push((revision, Instant::now()));
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    let readers: Vec<_> = [a.clone(), b.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(task, node)| {
            let (ids, stop) = (ids.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut reads, mut errors) = (Vec::<Read>::new(), 0_usize);
                let mut n = 500 * task;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let id = ids[spread(n)];
                    let started = Instant::now();
                    match node.fetch(id).await {
                        Ok(read) => reads.push((id.raw(), read.revision, started)),
                        Err(_) => errors += 1,
                    }
                    tokio::task::yield_now().await;
                }
                (reads, errors)
            })
        })
        .collect();

    // (start, end) of each outage.
    let mut outages = Vec::new();
    let phase = |secs: f64| tokio::time::sleep(Duration::from_secs_f64(secs));
    phase(1.5).await;
    let began = Instant::now();
    server.pause();
    phase(2.0).await;
    server.resume();
    outages.push((began, Instant::now()));
    phase(2.0).await;
    let began = Instant::now();
    server.kill();
    phase(1.0).await;
    server.restart();
    outages.push((began, Instant::now()));
    phase(2.0).await;
    let began = Instant::now();
    server.pause();
    phase(2.0).await;
    server.resume();
    outages.push((began, Instant::now()));
    phase(2.5).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);

    for writer in writers {
        bounded("a writer", writer).await.expect("no writer panics");
    }
    let acks = acks.lock().unwrap().clone();
    let (mut reads, mut errors) = (0, 0);
    let mut stale = Vec::new();
    let mut worst = Duration::ZERO;
    for reader in readers {
        let (read, failed) = bounded("a reader", reader).await.expect("no reader panics");
        errors += failed;
        reads += read.len();
        for (id, revision, started) in read {
            // The write this read missed that was due the longest before it.
            let missed = acks
                .get(&id)
                .into_iter()
                .flatten()
                .filter(|&&(written, _)| written > revision)
                .map(|&(written, acked)| {
                    let due = outages
                        .iter()
                        .find(|&&(began, ended)| (began..=ended).contains(&acked))
                        .map_or(acked, |&(_, ended)| ended);
                    (written, started.saturating_duration_since(due))
                })
                .max_by_key(|&(_, late)| late);
            if let Some((written, late)) = missed {
                worst = worst.max(late);
                if late > RECOVERY {
                    stale.push((id, revision, written, late));
                }
            }
        }
    }
    let written: usize = acks.values().map(Vec::len).sum();
    assert!(
        written > 1_000 && reads > 1_000,
        "{written} writes, {reads} reads"
    );
    // For the record (`--nocapture`): how late the stalest read was.
    eprintln!(
        "{written} writes, {reads} reads; the stalest read began {worst:?} after its write was due"
    );
    assert_eq!(errors, 0, "reader errors");
    assert!(
        stale.is_empty(),
        "{} of {reads} reads were stale beyond the bound, e.g. {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
}

/// A server that comes back is used again at once: the coherence link
/// reaches it and closes the L2 breaker, rather than every fetch skipping
/// L2 until the breaker's next probe (a minute away here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_closes_as_soon_as_the_link_is_back() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let cache = loaders(
        builder(&server)
            .l2_timeout(L2_TIMEOUT)
            .l2_probe_every(Duration::from_secs(60)),
        &sor,
    )
    .build()
    .expect("cache builds");
    linked(&cache).await;

    server.kill();
    eventually("the breaker to open", async || {
        cache
            .fetch(Id::<Broadcast>::mint())
            .await
            .expect("the loader answers");
        coherence_support::health::<Broadcast>(&cache) == echo_cache::Health::L2Down
    })
    .await;
    server.restart();
    eventually(
        "the breaker to close, long before its next probe",
        async || coherence_support::health::<Broadcast>(&cache) == echo_cache::Health::Serving,
    )
    .await;
    let id = Id::<Broadcast>::mint();
    cache.fetch(id).await.expect("a fill");
    let errors = cache.stats::<Broadcast>().l2_errors;
    let c = node(&server, &sor);
    assert_eq!(
        c.fetch(id).await.expect("an L2 hit").source(),
        echo_cache::Source::L2,
        "the fill was written to L2"
    );
    assert_eq!(cache.stats::<Broadcast>().l2_errors, errors);
}

/// Past its backlog limit a node keeps one table-wide invalidation: once
/// the server is back, the table's floor buries every frame older than it
/// (a row nobody wrote included: a node that held none reads it afresh)
/// and every write is read everywhere.
async fn past_the_backlog_limit<T: Entity>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let limited = |sor: &Sor| {
        let builder = builder(&server).l2_timeout(L2_TIMEOUT).backlog_limit(4);
        loaders(builder, sor).build().expect("cache builds")
    };
    let (a, b) = (limited(&sor), limited(&sor));
    linked(&a).await;
    linked(&b).await;
    let written: Vec<Id<T>> = (0..10).map(|_| Id::mint()).collect();
    let bystander = Id::<T>::mint();
    for &id in written.iter().chain([&bystander]) {
        b.fetch(id).await.unwrap();
    }

    server.pause();
    for &id in &written {
        sor.bump(id.raw());
        bounded("a write", a.invalidate(id))
            .await
            .expect("acknowledged");
    }
    server.resume();

    for &id in &written {
        reads(&b, id, 1, "B reads every write").await;
    }
    let c = limited(&sor);
    linked(&c).await;
    eventually("the bystander's frame to be buried", async || {
        c.fetch(bystander).await.unwrap().source() == echo_cache::Source::Fill
    })
    .await;
    assert!(a.stats::<T>().redeliveries > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_backlog_limit_a_table_wide_invalidation_is_delivered_broadcast() {
    past_the_backlog_limit::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_backlog_limit_a_table_wide_invalidation_is_delivered_tracking() {
    past_the_backlog_limit::<Tracked>().await;
}
