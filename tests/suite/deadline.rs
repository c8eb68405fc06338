//! No id blocked for ever: a flight has a deadline, and a write detaches
//! the flight under way so that the next fetch starts afresh.
//!
//! The loaders here read the system of record (a revision per id) when they
//! are called, then wait on a [`Gate`] or hang for good: what a database
//! call without a timeout does.

use std::collections::HashMap;
use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Calls, Gate, bounded, eventually};
use echo_cache::{Cache, Cached, Error, Fetched, Id, Source, near_cache};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

#[near_cache(kind = "DLN", ttl_ms = 600_000)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Doc {
    revision: u64,
}

/// A table that declares its own deadline, far shorter than the cache's.
#[near_cache(kind = "DLS", ttl_ms = 600_000, load_timeout_ms = 50)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Quick {
    revision: u64,
}

type Load<T> = BoxFuture<'static, Result<Option<T>, std::io::Error>>;

/// What the loader does after it read the system of record.
#[derive(Clone, Copy)]
enum Then {
    /// Answer at once.
    Answer,
    /// Wait for the gate.
    Wait,
    /// Never answer.
    Hang,
}

/// The system of record, and what each next loader call does (then
/// `Answer`, once the script is spent).
#[derive(Clone, Default)]
struct Store {
    revisions: Arc<Mutex<HashMap<u64, u64>>>,
    script: Arc<Mutex<Vec<Then>>>,
    gate: Option<Gate>,
    calls: Calls,
}

impl Store {
    fn with(script: &[Then], gate: &Gate) -> Store {
        let mut reversed = script.to_vec();
        reversed.reverse();
        Store {
            script: Arc::new(Mutex::new(reversed)),
            gate: Some(gate.clone()),
            ..Store::default()
        }
    }

    fn bump(&self, key: u64) {
        *self.revisions.lock().unwrap().entry(key).or_insert(0) += 1;
    }

    fn loader<T: From<u64> + Send + 'static>(
        &self,
    ) -> impl Fn(Id<T>) -> Load<T> + Send + Sync + 'static {
        let store = self.clone();
        move |id: Id<T>| {
            let store = store.clone();
            async move {
                store.calls.count();
                let revision = store.revisions.lock().unwrap().get(&id.payload()).copied();
                let then = store.script.lock().unwrap().pop().unwrap_or(Then::Answer);
                match then {
                    Then::Answer => {}
                    Then::Wait => store.gate.as_ref().expect("a gate").pass().await,
                    Then::Hang => pending::<()>().await,
                }
                Ok(Some(T::from(revision.unwrap_or(0))))
            }
            .boxed()
        }
    }
}

impl From<u64> for Doc {
    fn from(revision: u64) -> Doc {
        Doc { revision }
    }
}

impl From<u64> for Quick {
    fn from(revision: u64) -> Quick {
        Quick { revision }
    }
}

/// A cache whose fetches wait as long as their flight takes (the tests
/// bound their waits), with `deadline` for flights.
fn cache(store: &Store, deadline: Duration) -> Cache {
    cache_builder()
        .loader(store.loader::<Doc>())
        .loader(store.loader::<Quick>())
        .fetch_timeout(None)
        .load_timeout(deadline)
        .build()
        .expect("no conflict")
}

/// Starts a fetch of `id` in a task and waits until its flight is in the
/// loader.
async fn in_loader(
    cache: &Cache,
    store: &Store,
    id: Id<Doc>,
) -> tokio::task::JoinHandle<Result<Fetched<Doc>, Error>> {
    let before = store.calls.get();
    let fetch = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.fetch(id).await })
    };
    eventually("the flight to reach the loader", async || {
        store.calls.get() == before + 1
    })
    .await;
    fetch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_loader_times_out_and_the_next_fetch_loads_afresh() {
    let store = Store::with(&[Then::Hang], &Gate::closed());
    let cache = cache(&store, Duration::from_millis(100));
    let id = Id::<Doc>::mint();

    let hung = bounded("the hung flight's deadline", cache.fetch(id)).await;
    assert!(
        matches!(hung, Err(Error::LoadTimeout { table: "doc", after }) if after == Duration::from_millis(100)),
        "{hung:?}"
    );
    let stats = cache.stats::<Doc>();
    assert_eq!(
        (stats.load_timeouts, stats.in_flight, stats.size),
        (1, 0, 0),
        "counted, no flight left behind, nothing installed"
    );

    let next = bounded("the next fetch", cache.fetch(id)).await.unwrap();
    assert_eq!(
        next.source(),
        Source::Fill,
        "a fresh flight, a healthy load"
    );
    assert_eq!(store.calls.get(), 2);
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
}

// The clock is paused: it moves on only once every task waits, so the 20
// waiters have all joined the flight when its deadline passes, however
// loaded the machine.
#[tokio::test(start_paused = true)]
async fn every_waiter_of_a_hung_flight_gets_the_deadline() {
    let store = Store::with(&[Then::Hang], &Gate::closed());
    let cache = cache(&store, Duration::from_millis(200));
    let id = Id::<Doc>::mint();

    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.fetch(id).await })
        })
        .collect();
    for waiter in waiters {
        let answer = bounded("a waiter of the hung flight", waiter)
            .await
            .unwrap();
        assert!(
            matches!(answer, Err(Error::LoadTimeout { .. })),
            "{answer:?}"
        );
    }
    let stats = cache.stats::<Doc>();
    assert_eq!(
        (stats.flights, stats.load_timeouts, stats.in_flight),
        (1, 1, 0)
    );
    assert_eq!(store.calls.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_declares_its_own_deadline() {
    let store = Store::with(&[Then::Hang], &Gate::closed());
    // The cache's deadline would outlast the test's bound.
    let cache = cache(&store, Duration::from_secs(3_600));
    let id = Id::<Quick>::mint();

    let hung = bounded("the table's deadline", cache.fetch(id)).await;
    assert!(
        matches!(hung, Err(Error::LoadTimeout { table: "quick", after }) if after == Duration::from_millis(50)),
        "{hung:?}"
    );
    assert_eq!(Quick::spec().load_timeout_ms(), Some(50));
}

/// A write while a flight hangs: the next fetch starts a fresh flight
/// (it does not join the hung one), and the hung flight's waiter still gets
/// its deadline.
async fn a_write_detaches_the_hung_flight(write: impl AsyncFnOnce(&Cache, Id<Doc>)) {
    let store = Store::with(&[Then::Hang], &Gate::closed());
    let cache = cache(&store, Duration::from_secs(2));
    let id = Id::<Doc>::mint();

    let hung = in_loader(&cache, &store, id).await;
    write(&cache, id).await;
    let next = bounded("the fetch after the write", cache.fetch(id))
        .await
        .unwrap();
    assert_ne!(next.source(), Source::Hit, "{:?}", next.source());
    assert_eq!(
        cache.stats::<Doc>().flights,
        2,
        "the fetch after the write started its own flight"
    );
    let hung = bounded("the hung flight's waiter", hung).await.unwrap();
    assert!(matches!(hung, Err(Error::LoadTimeout { .. })), "{hung:?}");
    assert_eq!(cache.stats::<Doc>().in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_detaches_a_hung_flight() {
    a_write_detaches_the_hung_flight(async |cache, id| {
        cache.invalidate(id).await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_detaches_a_hung_flight() {
    a_write_detaches_the_hung_flight(async |cache, _| cache.flush::<Doc>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_detaches_a_hung_flight() {
    let store = Store::with(&[Then::Hang], &Gate::closed());
    let cache = cache(&store, Duration::from_secs(2));
    let id = Id::<Doc>::mint();

    let hung = in_loader(&cache, &store, id).await;
    cache.put(id, Doc { revision: 9 }).await.unwrap();
    let next = bounded("the fetch after the put", cache.fetch(id))
        .await
        .unwrap();
    assert_eq!((next.source(), next.revision), (Source::Hit, 9));
    let hung = bounded("the hung flight's waiter", hung).await.unwrap();
    assert!(matches!(hung, Err(Error::LoadTimeout { .. })), "{hung:?}");
    assert_eq!(
        cache.fetch(id).await.unwrap().revision,
        9,
        "nothing installed over the put"
    );
}

/// Read your own invalidation: a fetch that starts after `invalidate`
/// returned never gets a value read before it, even while a flight that
/// read before it is still under way (and joinable, before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_after_invalidate_never_joins_a_flight_that_read_before_it() {
    let gate = Gate::closed();
    let store = Store::with(&[Then::Wait], &gate);
    let cache = cache(&store, Duration::from_secs(60));
    let id = Id::<Doc>::mint();

    // A flight reads revision 0, then waits.
    let early = in_loader(&cache, &store, id).await;
    // The entity is rewritten, then invalidated.
    store.bump(id.payload());
    cache.invalidate(id).await.unwrap();
    // A fetch that starts now: it must see revision 1.
    let late = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.fetch(id).await })
    };
    gate.open();
    let late = bounded("the late fetch", late).await.unwrap().unwrap();
    assert_eq!(late.revision, 1, "a value read before the invalidate");
    let early = bounded("the early fetch", early).await.unwrap().unwrap();
    assert_eq!(
        early.revision, 0,
        "the early caller gets its flight's answer"
    );
    let hit = cache.fetch(id).await.unwrap();
    assert_eq!((hit.source(), hit.revision), (Source::Hit, 1));
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder().open::<Doc>().open::<Quick>()
}
