//! Many ids of one table in one call ([`Cache::fetch_many`](crate::Cache::fetch_many)).
//!
//! The herd rules hold per id: each id a call misses joins the flight of
//! its id if one is under way, or starts one (one load per id at a time; a
//! write overtakes it as usual). What differs is how the flights this call
//! leads resolve: together, in one task, with one L2 read per slot
//! (`MGET`), then one call of the table's batch loader for what L2 did not
//! have (or its single loader per id, all at once, without one). Each id
//! lands through the single path's [`Landing`], as soon as its answer is
//! known: installed in L1 unless overtaken, counted, answered to its
//! waiters. A batch read is indistinguishable afterwards from single reads.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::fast::FixedState;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::runtime::Handle;
use tracing::Instrument;

use super::{
    Answer, Detachable, Joining, Landing, Leading, Loaded, Loader, Table, Wait, panic_message,
};
use crate::clock::millis;
use crate::entity::id::{Id, RawId};
use crate::entity::mint::Minter;
use crate::entity::spec::Cached;
use crate::error::{BoxError, Error};
use crate::l2::Found;
use crate::table::fetched::{Fetched, Source};
use crate::table::stale::Fallback;

/// A type-erased batch loader of `T`: the values it found, by id, each
/// with how long it may live if the loader says
/// ([`Builder::loader_many_with_ttl`](crate::Builder::loader_many_with_ttl)).
pub(crate) type BatchLoader<T> =
    Arc<dyn Fn(Vec<Id<T>>) -> BoxFuture<'static, Result<Vec<Answered<T>>, BoxError>> + Send + Sync>;

/// A value a batch loader found: its id, the value, its TTL if it has one.
pub(crate) type Answered<T> = (Id<T>, T, Option<Duration>);

/// `load` as a [`BatchLoader<T>`] (see
/// [`Builder::loader_many`](crate::Builder::loader_many)).
pub(crate) fn batch_loader<T, F, Fut, R, E>(load: F) -> BatchLoader<T>
where
    T: Cached,
    F: Fn(Vec<Id<T>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: IntoIterator<Item = (Id<T>, T)>,
    E: Into<BoxError> + 'static,
{
    batch_of(load, |(id, value)| (id, value, None))
}

/// `load`, whose values come with their TTLs, as a [`BatchLoader<T>`] (see
/// [`Builder::loader_many_with_ttl`](crate::Builder::loader_many_with_ttl)).
pub(crate) fn batch_loader_with_ttl<T, F, Fut, R, E>(load: F) -> BatchLoader<T>
where
    T: Cached,
    F: Fn(Vec<Id<T>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: IntoIterator<Item = (Id<T>, (T, Duration))>,
    E: Into<BoxError> + 'static,
{
    batch_of(load, |(id, (value, ttl))| (id, value, Some(ttl)))
}

/// `load` as a [`BatchLoader<T>`], each of its answers made an
/// [`Answered`] by `answered`.
fn batch_of<T, F, Fut, R, E>(load: F, answered: fn(R::Item) -> Answered<T>) -> BatchLoader<T>
where
    T: Cached,
    F: Fn(Vec<Id<T>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: IntoIterator<Item: 'static>,
    E: Into<BoxError> + 'static,
{
    Arc::new(move |ids| {
        load(ids)
            .map(move |answer| {
                answer
                    .map(|answer| answer.into_iter().map(answered).collect())
                    .map_err(Into::into)
            })
            .boxed()
    })
}

/// The single loader of a table given only a batch loader: a batch of one.
pub(crate) fn single<T: Cached>(batch: &BatchLoader<T>) -> Loader<T> {
    let batch = Arc::clone(batch);
    Arc::new(move |id| {
        let found = batch(vec![id]);
        async move {
            let found = found.await?.into_iter().find(|(found, ..)| *found == id);
            Ok(found.map(|(_, value, ttl)| (value, ttl)))
        }
        .boxed()
    })
}

impl<T: Cached> Table<T> {
    /// The answers of `keys`, in their order: L1 in the caller's thread,
    /// then the flights of the ids it missed (see the module's docs), all
    /// waited for at most `timeout`. A key given twice is read once.
    pub(crate) async fn fetch_many(
        self: Arc<Self>,
        keys: Vec<u64>,
        timeout: Option<Duration>,
    ) -> Vec<Result<Fetched<T>, Error>> {
        // The distinct keys, in the order first given, and where each
        // given key's answer is among theirs.
        let mut first: HashMap<u64, usize, FixedState> = HashMap::default();
        let mut distinct = Vec::with_capacity(keys.len());
        let at: Vec<usize> = (keys.iter())
            .map(|&key| {
                *first.entry(key).or_insert_with(|| {
                    distinct.push(key);
                    distinct.len() - 1
                })
            })
            .collect();
        let mut answers: Vec<Option<Result<Fetched<T>, Error>>> =
            distinct.iter().map(|&key| self.hit(key)).collect();
        let missed: Vec<usize> = (0..distinct.len())
            .filter(|&i| answers[i].is_none())
            .collect();
        if !missed.is_empty() {
            let keys: Vec<u64> = missed.iter().map(|&i| distinct[i]).collect();
            let found = self.miss_many(&keys, timeout).await;
            for (i, found) in missed.into_iter().zip(found) {
                answers[i] = Some(found);
            }
        }
        at.into_iter()
            .map(|i| answers[i].clone().expect("every key answered"))
            .collect()
    }

    /// [`miss`](Self::miss) for many distinct keys: each joins the flight of
    /// its key or starts one; the flights started here resolve together, in
    /// one task the caller drives (handed to the runtime if it gives up).
    async fn miss_many(
        self: Arc<Self>,
        keys: &[u64],
        timeout: Option<Duration>,
    ) -> Vec<Result<Fetched<T>, Error>> {
        let current = Handle::try_current().ok();
        let in_runtime = current.is_some();
        let Some(runtime) = current.or_else(|| self.runtime.clone()) else {
            return keys.iter().map(|_| Err(Error::NoRuntime)).collect();
        };
        let mut answers: Vec<Option<Result<Fetched<T>, Error>>> =
            keys.iter().map(|_| None).collect();
        let mut waits: Vec<(usize, Arc<Answer<T>>)> = Vec::new();
        let mut led: Vec<Landing<T>> = Vec::new();
        for (i, &key) in keys.iter().enumerate() {
            match self.join(key, || runtime.clone()) {
                Joining::Cached(hit) => answers[i] = Some(hit),
                Joining::Follower(answer) => waits.push((i, answer)),
                Joining::Leader(landing, answer) => {
                    led.push(landing);
                    waits.push((i, answer));
                }
            }
        }
        // The answers know when this caller leaves (see `LoadToken`): it
        // polls them one after another.
        let _leading: Vec<Leading<T>> = (waits.iter())
            .map(|(_, answer)| Leading::new(Arc::clone(answer)))
            .collect();
        let flight = (!led.is_empty()).then(|| {
            let span = tracing::debug_span!("flights", table = self.spec.name, ids = led.len());
            let flights: Pin<Box<dyn Future<Output = ()> + Send>> =
                Box::pin(fly_many(Arc::clone(&self), led));
            Detachable::new(flights.instrument(span), runtime.clone())
        });
        // Outside the runtime the flights cannot run here: dropping them
        // hands them to the runtime.
        let flight = flight.filter(|_| in_runtime);
        let landed = async {
            if let Some(flight) = flight {
                flight.await;
            }
            for (i, answer) in waits {
                answers[i] = Some(Wait::new(answer, self.spec.name, None).await);
            }
        };
        let late = match timeout {
            None => {
                landed.await;
                None
            }
            Some(after) => {
                let timed = {
                    let _entered = runtime.enter();
                    tokio::time::timeout(after, landed)
                };
                timed.await.err().map(|_| after)
            }
        };
        (answers.into_iter())
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Err(Error::Timeout {
                        table: self.spec.name,
                        after: late.expect("only a timeout leaves keys unanswered"),
                    })
                })
            })
            .collect()
    }

    /// Resolves the flights of `landings` (see the module's docs), landing
    /// each as soon as its answer is known.
    /// As `resolve`, each key gathers in `fallbacks` what may answer if its
    /// load fails (`stale_if_error_ms`), and skips the loader if it failed
    /// a moment ago and there is a fallback.
    async fn resolve_many(&self, landings: &mut [Landing<T>], fallbacks: &mut [Fallback<T>]) {
        let stale = self.failsafe.enabled() && self.verified();
        if stale {
            let now = self.clock.now_ms();
            for (landing, fallback) in landings.iter().zip(fallbacks.iter_mut()) {
                if let Some(dead) = self.rows.stale(landing.key, now) {
                    fallback.offer(dead.value.expect("a value"), dead.version);
                }
            }
        }
        let mut over_bad = vec![false; landings.len()];
        let mut rest: Vec<usize> = (0..landings.len()).collect();
        let mut l2_left = self.l2_timeout();
        if let Some(tier) = &self.tier {
            let keys: Vec<u64> = landings.iter().map(|landing| landing.key).collect();
            rest.clear();
            let reading = Instant::now();
            let found = tier.read_many(&keys, &self.counters).await;
            l2_left = l2_left.saturating_sub(reading.elapsed());
            // As in `resolve`: a table-wide invalidation this node may not
            // know of yet, applied before any value lands.
            let floor = found.iter().find_map(|found| match found {
                Found::Buried(floor) => Some(floor.payload()),
                _ => None,
            });
            if let Some(floor) = floor {
                self.flush_at(floor);
            }
            for (i, found) in found.into_iter().enumerate() {
                match found {
                    // As in `resolve`: a frame older than an applied
                    // invalidation is stale.
                    Found::Value(version, value, left_ms)
                        if !self.applied.overtakes(keys[i], version.payload()) =>
                    {
                        let value = Arc::new(value);
                        let fetched = Fetched::new(value, Source::L2, version.payload());
                        let deadline = self.deadline(left_ms);
                        let loaded = Loaded { fetched, deadline };
                        landings[i].land(Ok(loaded), take(&mut fallbacks[i]));
                    }
                    Found::Expired(version, value)
                        if stale && !self.applied.overtakes(keys[i], version.payload()) =>
                    {
                        fallbacks[i].offer(Arc::new(value), version.payload());
                        rest.push(i);
                    }
                    Found::Tombstone(version) => {
                        fallbacks[i].invalidated(version.payload());
                        rest.push(i);
                    }
                    Found::Buried(floor) => {
                        fallbacks[i].invalidated(floor.payload());
                        over_bad[i] = true;
                        rest.push(i);
                    }
                    Found::Bad => {
                        over_bad[i] = true;
                        rest.push(i);
                    }
                    Found::Failed if self.buried_in_l2() => {
                        fallbacks[i].unproven();
                        rest.push(i);
                    }
                    _ => rest.push(i),
                }
            }
        }
        let now = self.clock.now_ms();
        rest.retain(|&i| {
            let failed = (fallbacks[i].is_some())
                .then(|| self.failsafe.backing_off(landings[i].key, now))
                .flatten();
            let Some(failed) = failed else {
                return true;
            };
            fallbacks[i].backoff = true;
            landings[i].land(Err(failed), take(&mut fallbacks[i]));
            false
        });
        if rest.is_empty() {
            return;
        }
        match &self.batch {
            Some(batch) => {
                (self.load_batch(batch, landings, fallbacks, &rest, &over_bad, l2_left)).await;
            }
            None => {
                (self.load_each(landings, fallbacks, &rest, &over_bad, l2_left)).await;
            }
        }
    }

    /// One call of the batch loader for the keys of `landings` at `rest`;
    /// what it found is written to L2 (all at once, each answer waiting for
    /// its write at most `l2_left`: see `fill`) and lands as a fill, what
    /// it did not as not found. Its error fails them all.
    async fn load_batch(
        &self,
        batch: &BatchLoader<T>,
        landings: &mut [Landing<T>],
        fallbacks: &mut [Fallback<T>],
        rest: &[usize],
        over_bad: &[bool],
        l2_left: Duration,
    ) {
        let ids: Vec<Id<T>> = rest
            .iter()
            .map(|&i| Id::from_payload(landings[i].key))
            .collect();
        // Minted before the system of record is read, as in `load`.
        let versions: Vec<RawId> = rest
            .iter()
            .map(|_| Minter::global().mint_raw(T::KIND))
            .collect();
        let mut found: HashMap<u64, (T, Option<Duration>), FixedState> = match batch(ids).await {
            Ok(found) => {
                let mut by_key =
                    HashMap::with_capacity_and_hasher(found.len(), FixedState::default());
                for (id, value, ttl) in found {
                    // The first value of an id answered twice; ids not
                    // asked for are left out.
                    by_key.entry(id.payload()).or_insert((value, ttl));
                }
                by_key
            }
            Err(source) => {
                let failed = Error::Load {
                    table: self.spec.name,
                    source: Arc::from(source),
                };
                for &i in rest {
                    landings[i].land(Err(failed.clone()), take(&mut fallbacks[i]));
                }
                return;
            }
        };
        let mut fills = FuturesUnordered::new();
        for (&i, version) in rest.iter().zip(versions) {
            let key = landings[i].key;
            match found.remove(&key) {
                Some((value, ttl)) => {
                    let deadline = self.deadline(ttl.map_or(u64::MAX, millis));
                    let filled =
                        self.fill(key, version, value, deadline, over_bad[i], l2_left, None);
                    fills.push(filled.map(move |filled| (i, filled)));
                }
                None => {
                    landings[i].land(Err(self.not_found(key)), take(&mut fallbacks[i]));
                }
            }
        }
        while let Some((i, filled)) = fills.next().await {
            landings[i].land(Ok(filled), take(&mut fallbacks[i]));
        }
    }

    /// The single loader for each key of `landings` at `rest`, all at once,
    /// each landing as it answers (a panic fails its key only).
    async fn load_each(
        &self,
        landings: &mut [Landing<T>],
        fallbacks: &mut [Fallback<T>],
        rest: &[usize],
        over_bad: &[bool],
        l2_left: Duration,
    ) {
        // Each loader sees its flight's token (landing needs the landings).
        let answers: Vec<_> = (rest.iter())
            .map(|&i| (i, landings[i].key, Arc::clone(&landings[i].answer)))
            .collect();
        let mut loads: FuturesUnordered<_> = (answers.iter())
            .map(|(i, key, answer)| {
                let (i, load) = (
                    *i,
                    self.load(*key, over_bad[*i], l2_left, Some(answer), None),
                );
                AssertUnwindSafe(load)
                    .catch_unwind()
                    .map(move |loaded| (i, loaded))
            })
            .collect();
        while let Some((i, loaded)) = loads.next().await {
            let outcome = loaded.unwrap_or_else(|panic| Err(self.crashed(&panic_message(&*panic))));
            landings[i].land(outcome, take(&mut fallbacks[i]));
        }
    }
}

/// The flights of `landings`, resolved together within the table's
/// deadline; whatever has not landed by then (or when a batch loader
/// panics) lands an error. A landing dropped unlanded lands a crash.
async fn fly_many<T: Cached>(table: Arc<Table<T>>, mut landings: Vec<Landing<T>>) {
    let deadline = table.load_timeout;
    // Filled as the flights go: still there if they time out.
    let mut fallbacks: Vec<Fallback<T>> = landings.iter().map(|_| Fallback::none()).collect();
    let resolved =
        AssertUnwindSafe(table.resolve_many(&mut landings, &mut fallbacks)).catch_unwind();
    let failed = match tokio::time::timeout(deadline, resolved).await {
        Ok(Ok(())) => return,
        Ok(Err(panic)) => table.crashed(&panic_message(&*panic)),
        Err(_) => Error::LoadTimeout {
            table: table.spec.name,
            after: deadline,
        },
    };
    for (landing, fallback) in landings.iter_mut().zip(fallbacks) {
        // A no-op for those that landed.
        landing.land(Err(failed.clone()), fallback);
    }
}

/// The fallback of a key about to land, leaving none behind.
fn take<T>(fallback: &mut Fallback<T>) -> Fallback<T> {
    std::mem::replace(fallback, Fallback::none())
}
