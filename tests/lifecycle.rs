//! A cache's life outside the data path: where its flights run when a
//! fetch comes from outside any runtime, and its maintenance thread, which
//! stops when the last clone of the cache is dropped.
//!
//! The tests here count threads of the process, so they run one at a time.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake};
use std::time::Duration;

use common::BOUND;
use echo_cache::{Cache, Error, Id, Source, near_cache};
use futures_util::FutureExt;

#[near_cache(kind = "LIF", ttl_ms = 600_000, sweep_ms = 1, loader = load)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Thing {
    n: u64,
}

/// What a loader that never answers is for.
#[near_cache(kind = "STK", ttl_ms = 600_000, loader = stuck)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Stuck {
    n: u64,
}

async fn stuck(_: Id<Stuck>) -> Result<Option<Stuck>, std::io::Error> {
    std::future::pending().await
}

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn load(id: Id<Thing>) -> Result<Option<Thing>, std::io::Error> {
    Ok(Some(Thing { n: id.payload() }))
}

/// Runs `future` to completion on this thread, outside any Tokio runtime.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// Threads of this process named like the maintenance thread (Linux keeps
/// the first 15 bytes of a thread's name).
#[cfg(target_os = "linux")]
fn maintenance_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| "echo-cache-maintenance".starts_with(name.trim_end()))
        .count()
}

#[cfg(target_os = "linux")]
#[test]
fn the_maintenance_thread_stops_with_the_last_clone() {
    let _serial = serial();
    let wait_for = |count: usize, what: &str| {
        let deadline = std::time::Instant::now() + BOUND;
        while maintenance_threads() != count {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            std::thread::yield_now();
        }
    };
    // A cache dropped by the test before this one stops its thread soon.
    wait_for(0, "earlier caches' threads to stop");
    let cache = Cache::builder().build().unwrap();
    wait_for(1, "the maintenance thread to start");
    let clone = cache.clone();
    drop(cache);
    // The clone keeps it running: its sweeper still sweeps.
    let sweeps = clone.stats::<Thing>().sweeps;
    let deadline = std::time::Instant::now() + BOUND;
    while clone.stats::<Thing>().sweeps < sweeps + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sweeper stopped early"
        );
        std::thread::yield_now();
    }
    assert_eq!(maintenance_threads(), 1);
    drop(clone);
    wait_for(0, "the maintenance thread to stop");
}

#[test]
fn a_fetch_outside_any_runtime_needs_one() {
    let _serial = serial();
    let cache = Cache::builder().build().unwrap();
    let id = Id::<Thing>::mint();
    let answer = cache.fetch(id).now_or_never().expect("answers at once");
    assert!(matches!(answer, Err(Error::NoRuntime)), "{answer:?}");
    // A put needs no runtime, and then the fetch is a hit.
    block_on(cache.put(id, Thing { n: 1 })).unwrap();
    let hit = cache.fetch(id).now_or_never().unwrap().unwrap();
    assert_eq!((hit.source(), hit.n), (Source::Hit, 1));
}

#[test]
fn a_fetch_outside_any_runtime_flies_on_the_builders_runtime() {
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Built outside the runtime, with the default fetch timeout.
    let cache = Cache::builder()
        .runtime(runtime.handle().clone())
        .build()
        .unwrap();
    let id = Id::<Thing>::mint();
    let filled = block_on(cache.fetch(id)).expect("the flight runs on the given runtime");
    assert_eq!((filled.source(), filled.n), (Source::Fill, id.payload()));
    let within = block_on(cache.fetch_within(Id::<Thing>::mint(), Some(Duration::from_secs(60))));
    assert_eq!(within.unwrap().source(), Source::Fill);
    let hit = block_on(cache.fetch(id)).unwrap();
    assert_eq!(hit.source(), Source::Hit);
}

/// A waiter of a flight, polled outside any runtime, holds the alarm of
/// its flight (the first waiter with a timeout): its timer is the
/// builder's runtime's, and it gives up at its own timeout.
#[test]
fn a_waiter_outside_any_runtime_gives_up_on_the_builders_timer() {
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cache = Cache::builder()
        .runtime(runtime.handle().clone())
        .build()
        .unwrap();
    let id = Id::<Stuck>::mint();
    let leader = runtime.spawn({
        let cache = cache.clone();
        async move { cache.fetch_within(id, None).await.map(|_| ()) }
    });
    let start = std::time::Instant::now();
    while cache.stats::<Stuck>().in_flight == 0 {
        assert!(start.elapsed() < BOUND, "the flight did not start");
        std::thread::sleep(Duration::from_millis(1));
    }
    let after = Duration::from_millis(50);
    let waiting = std::time::Instant::now();
    let answer = block_on(cache.fetch_within(id, Some(after)));
    assert!(
        matches!(answer, Err(Error::Timeout { after: a, .. }) if a == after),
        "{answer:?}"
    );
    assert!(waiting.elapsed() >= after, "gave up early");
    assert_eq!(
        cache.stats::<Stuck>().coalesced,
        1,
        "it waited as a follower"
    );
    leader.abort();
}

#[test]
fn a_cache_built_in_a_runtime_flies_on_it() {
    let _serial = serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cache = runtime.block_on(async { Cache::builder().build().unwrap() });
    let id = Id::<Thing>::mint();
    let filled = runtime.block_on(cache.fetch(id)).unwrap();
    assert_eq!(filled.source(), Source::Fill);
}
