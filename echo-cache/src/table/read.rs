//! Steps 1–3 of the data path: the hit, the miss that joins or starts the
//! flight of its key, and the flight's resolution within its deadline (L2,
//! then the loader, answered stale at the soft timeout if the table has
//! one) down to the fill it writes to L2.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::{Answer, Detachable, Joining, Landing, Leading, Loaded, Miss, Table, Wait};
use crate::clock::millis;
use crate::entity::id::{Id, RawId};
use crate::entity::mint::Minter;
use crate::entity::spec::{Cached, Coherence, Herd};
use crate::error::Error;
use crate::l1::Live;
use crate::l1::epoch::{self, Pinned};
use crate::l2::{Found, Lease, Leased, Tier, Write};
use crate::report::stats::Counters;
use crate::table::fetched::{Fetched, Source};
use crate::table::flight::Joined;
use crate::table::stale::Fallback;
use crate::table::token::LoadToken;

/// The longest pause before a failed refresh may be tried again
/// ([`Table::refresh_retry`]).
const REFRESH_RETRY_MAX_MS: u64 = 1_000;

/// What a flight's resolution needs of the flight: its token in the
/// registry, its answer (for the loader's token and the soft timeout's
/// answer), and when the soft timeout passes, if the table has one.
pub(super) struct Aloft<'a, T> {
    pub(super) token: u64,
    pub(super) answer: &'a Arc<Answer<T>>,
    pub(super) soft_at: Option<tokio::time::Instant>,
}

impl<T> Table<T> {
    /// Step 1: the answer of a live L1 row, if there is one.
    #[inline]
    pub(crate) fn hit(&self, key: u64) -> Option<Result<Fetched<T>, Error>> {
        let live = self.hit_row(&epoch::pin(), key)?;
        Some(self.answer(key, live))
    }

    /// Step 1 for [`Fetch`](crate::cache::fetch::Fetch)'s poll, which pins
    /// and answers itself: the live L1 row, counted as a hit (the answer
    /// is then made where the future's output goes, not in an `Option`
    /// first and moved).
    #[allow(clippy::inline_always)] // the hot path: see `Fetch::poll`
    #[inline(always)]
    pub(crate) fn hit_row(&self, pin: &impl Pinned, key: u64) -> Option<Live<T>> {
        let now = self.clock.now_ms();
        let live = self.rows.get(pin, key, now, |version| {
            (self.start_refresh)(self, key, version);
        })?;
        self.hits.incr(pin.index());
        Some(live)
    }

    /// The answer of a live L1 row: its value, or the remembered absence.
    #[allow(clippy::inline_always)] // the hot path: see `Fetch::poll`
    #[inline(always)]
    pub(crate) fn answer(&self, key: u64, live: Live<T>) -> Result<Fetched<T>, Error> {
        match live.value {
            Some(value) => Ok(Fetched::new(value, Source::Hit, live.version)),
            // Built in place from the table's fields: an error a cold
            // call wrote would join the hit's answer through memory.
            None => Err(self.not_found(key)),
        }
    }
}

impl<T: Cached> Table<T> {
    /// Starts the refresh of `key`, whose row a hit found due, unless a
    /// flight of `key` is under way: a flight on the cache's runtime (the
    /// current one if it has none) that no caller waits for. Without a
    /// runtime the row is not refreshed, and dies as it would have.
    #[cold]
    #[inline(never)]
    pub(super) fn refresh(&self, key: u64, version: u64) {
        let runtime = self.runtime.clone().or_else(|| Handle::try_current().ok());
        let (Some(table), Some(runtime)) = (self.me.upgrade(), runtime) else {
            return;
        };
        let mut answer = None;
        let joined = self.flights.join(
            key,
            || None::<()>,
            |_| (),
            || {
                let first = Arc::new(Answer::new(runtime.clone()));
                answer = Some(Arc::clone(&first));
                (first, ())
            },
        );
        let Joined::Leader(token, ()) = joined else {
            return;
        };
        Counters::bump(&self.counters.refreshes);
        Counters::bump(&self.counters.running);
        let answer = answer.take().expect("a new flight's answer");
        let mut landing = Landing::new(table, key, token, answer);
        landing.refreshing = Some(version);
        runtime.spawn(landing.launch());
    }

    /// How long after a failed refresh a read may start the row's refresh
    /// again: a quarter of `refresh_ms`, at most 1 s, so that several tries
    /// fit before the row dies, and a failing loader is called at most once
    /// a pause for each id.
    pub(super) fn refresh_retry(&self) -> Duration {
        Duration::from_millis((self.spec.refresh_ms / 4).clamp(1, REFRESH_RETRY_MAX_MS))
    }

    /// How a miss of `key` meets the flights, counted: answered from L1 (a
    /// flight landed since the miss), joined to the flight under way, or
    /// leading a new one (not launched yet), whose waiters' timers are
    /// `runtime`'s when they are polled outside any runtime.
    pub(super) fn join(&self, key: u64, runtime: impl FnOnce() -> Handle) -> Joining<T> {
        let joined = self.flights.join(
            key,
            || self.hit(key),
            Arc::clone,
            || {
                let answer = Arc::new(Answer::new(runtime()));
                (Arc::clone(&answer), answer)
            },
        );
        match joined {
            Joined::Cached(hit) => Joining::Cached(hit),
            Joined::Follower(answer) => {
                self.counters.coalesced.incr(epoch::pin().index());
                Joining::Follower(answer)
            }
            Joined::Leader(token, answer) => {
                Counters::bump(&self.counters.flights);
                Counters::bump(&self.counters.running);
                let landing = Landing::new(self.shared(), key, token, Arc::clone(&answer));
                Joining::Leader(landing, answer)
            }
        }
    }

    /// Step 2, the miss path of a fetch of `key` (what [`Table::start_miss`]
    /// runs): answers from L1 if a flight landed since the caller's miss,
    /// else joins or starts the flight of `key` and waits for its answer
    /// (at most `timeout`). A follower's future is its wait alone (see
    /// [`answer`](super::answer)): no runtime handle, no table, no timer
    /// of its own while the alarm of its flight is another waiter's.
    pub(super) fn miss(&self, key: u64, timeout: Option<Duration>) -> Miss<T> {
        // Whether a flight could run: the table's runtime (the builder's),
        // else the current one.
        if self.runtime.is_none() && Handle::try_current().is_err() {
            return Box::pin(std::future::ready(Err(Error::NoRuntime)));
        }
        let runtime = || {
            (Handle::try_current().ok())
                .or_else(|| self.runtime.clone())
                .expect("a runtime, checked")
        };
        match self.join(key, runtime) {
            Joining::Cached(hit) => Box::pin(std::future::ready(hit)),
            Joining::Follower(answer) => Box::pin(Wait::new(answer, self.spec.name, timeout)),
            Joining::Leader(landing, answer) => {
                Box::pin(self.shared().lead(landing, answer, timeout))
            }
        }
    }

    /// The leader of a flight: drives it in its own task (no hop to another
    /// thread; if it gives up first, the flight goes on detached), then
    /// waits for its answer like any waiter, at most `timeout` in all.
    async fn lead(
        self: Arc<Self>,
        landing: Landing<T>,
        answer: Arc<Answer<T>>,
        timeout: Option<Duration>,
    ) -> Result<Fetched<T>, Error> {
        // Its flight's answer knows when it leaves (see `LoadToken`).
        let _leading = Leading::new(Arc::clone(&answer));
        let current = Handle::try_current().ok();
        let in_runtime = current.is_some();
        let runtime = current
            .or_else(|| self.runtime.clone())
            .ok_or(Error::NoRuntime)?;
        let flight = Detachable::new(landing.launch(), runtime.clone());
        // Outside the runtime the flight cannot run here: dropping it
        // hands it to the runtime.
        let flight = in_runtime.then_some(flight);
        let soft = self.soft_timeout.is_some();
        let landed = async {
            if let Some(mut flight) = flight {
                if soft {
                    // The answer may come before the flight lands (a stale
                    // value at the soft timeout): the flight then goes on
                    // as a task of its own.
                    let early = Wait::new(Arc::clone(&answer), self.spec.name, None);
                    tokio::select! {
                        biased;
                        () = &mut flight => {}
                        answered = early => return answered,
                    }
                } else {
                    flight.await;
                }
            }
            Wait::new(answer, self.spec.name, None).await
        };
        self.wait(landed, timeout, &runtime).await
    }

    pub(super) async fn wait(
        &self,
        landed: impl Future<Output = Result<Fetched<T>, Error>>,
        timeout: Option<Duration>,
        runtime: &Handle,
    ) -> Result<Fetched<T>, Error> {
        match timeout {
            None => landed.await,
            Some(after) => {
                // The timer is the runtime's: a fetch from outside any
                // runtime (see `Builder::runtime`) has none of its own.
                let timed = {
                    let _entered = runtime.enter();
                    tokio::time::timeout(after, landed)
                };
                timed.await.unwrap_or(Err(Error::Timeout {
                    table: self.spec.name,
                    after,
                }))
            }
        }
    }

    /// Step 3: L2, then the loader; a `refresh`, the loader only. On the
    /// way, gathers in `fallback` what may answer if the loader fails
    /// (`stale_if_error_ms`), and skips the loader if it failed on `key` a
    /// moment ago and there is a fallback. Past the soft timeout, if there
    /// is one, the fallback answers the waiters while the loader goes on
    /// (see [`Table::answer_soft`]).
    pub(super) async fn resolve(
        &self,
        key: u64,
        refresh: bool,
        fallback: &mut Fallback<T>,
        aloft: &Aloft<'_, T>,
    ) -> Result<Loaded<T>, Error> {
        let stale = self.failsafe.enabled() && self.verified();
        if stale && let Some(dead) = self.rows.stale(key, self.clock.now_ms()) {
            fallback.offer(dead.value.expect("a value"), dead.version);
        }
        let mut over_bad = false;
        let mut l2_left = self.l2_timeout();
        let mut lease = None;
        if let Some(tier) = self.tier.as_ref().filter(|_| !refresh) {
            let (found, leased, spent) = self.read_l2(tier, key).await;
            l2_left = l2_left.saturating_sub(spent);
            lease = leased;
            match found {
                // A frame older than an applied invalidation is stale (its
                // conditional drop did not reach L2): load instead.
                Found::Value(version, value, left_ms)
                    if !self.overtaken(key, version.payload(), Self::tag_of(&value)) =>
                {
                    let fetched = Fetched::new(Arc::new(value), Source::L2, version.payload());
                    let deadline = self.deadline(left_ms);
                    return Ok(Loaded { fetched, deadline });
                }
                Found::Expired(version, value)
                    if stale && !self.overtaken(key, version.payload(), Self::tag_of(&value)) =>
                {
                    fallback.offer(Arc::new(value), version.payload());
                }
                Found::Tombstone(version) => fallback.invalidated(version.payload()),
                // A table-wide invalidation this node may not know of yet
                // (`none`: it is how it learns). The fill replaces the
                // buried frame, as it does a bad one.
                Found::Buried(floor) => {
                    self.flush_at(floor.payload());
                    fallback.invalidated(floor.payload());
                    over_bad = true;
                }
                Found::Bad => over_bad = true,
                Found::Failed if self.buried_in_l2() => fallback.unproven(),
                _ => {}
            }
        }
        if fallback.is_some()
            && let Some(failed) = self.failsafe.backing_off(key, self.clock.now_ms())
        {
            fallback.backoff = true;
            return Err(failed);
        }
        let load = self.load(key, over_bad, l2_left, Some(aloft.answer), lease);
        // A timer only for a table with a soft timeout, and a flight with
        // something to answer at it.
        let Some(soft_at) = aloft.soft_at.filter(|_| fallback.is_some()) else {
            return load.await;
        };
        let mut load = std::pin::pin!(load);
        tokio::select! {
            biased;
            loaded = &mut load => return loaded,
            () = tokio::time::sleep_until(soft_at) => {}
        }
        self.answer_soft(key, aloft, fallback);
        load.await
    }

    /// What L2 holds for `key`, how long the read that found it took, and,
    /// on a `herd = "fleet"` table, the id's lease if this node took it:
    /// while another node holds it, waits for its release (or its end)
    /// and reads again.
    async fn read_l2(&self, tier: &Tier<T>, key: u64) -> (Found<T>, Option<Leased>, Duration) {
        loop {
            let reading = Instant::now();
            if self.spec.herd == Herd::Node {
                let found = tier.read(key, &self.counters).await;
                return (found, None, reading.elapsed());
            }
            let (found, lease) = tier.read_or_lease(key, &self.counters).await;
            let spent = reading.elapsed();
            match lease {
                Lease::None => return (found, None, spent),
                Lease::Taken(leased) => return (found, Some(leased), spent),
                Lease::Held(left) => tier.await_release(key, left).await,
            }
        }
    }

    /// The soft timeout passed with the loader under way: the fallback
    /// answers the flight's waiters (and the misses that join it
    /// meanwhile) if it may (see [`Table::serves_stale`]: not if a write
    /// detached the flight, an invalidation overtook the fallback or the
    /// invalidation channel is down); the load goes on and lands as ever.
    fn answer_soft(&self, key: u64, aloft: &Aloft<'_, T>, fallback: &Fallback<T>) {
        let Some(version) = fallback.version() else {
            return;
        };
        let current = self.flights.is_current(key, aloft.token);
        if !current || !self.verified() || self.applied.overtakes(key, version) {
            return;
        }
        if let Some(stale) = fallback.answer() {
            Counters::bump(&self.counters.soft_timeouts);
            aloft.answer.set(Ok(stale));
        }
    }

    /// Whether other nodes' invalidations reach this table only as L2's
    /// tombstones (`none`, with L2): a value L1 kept past its expiry may
    /// then be served stale only once L2 has answered without burying it.
    pub(super) fn buried_in_l2(&self) -> bool {
        self.tier.is_some() && self.spec.coherence == Coherence::None
    }

    /// Step 3's second half: the loader, whose value is written to L2
    /// (`over_bad`: over the bad frame L2 held; the answer waits for that
    /// write at most `l2_left`, what the flight's read left of the L2
    /// timeout).
    /// The loader sees the token of `answer`'s flight, if it has one
    /// ([`LoadToken`]).
    pub(super) async fn load(
        &self,
        key: u64,
        over_bad: bool,
        l2_left: Duration,
        answer: Option<&Arc<Answer<T>>>,
        lease: Option<Leased>,
    ) -> Result<Loaded<T>, Error> {
        let loader = self.loader.as_ref().ok_or(Error::NoLoader {
            table: self.spec.name,
        })?;
        // Minted before the system of record is read, so it orders the read
        // against writes: L2 refuses the fill if an invalidation newer than
        // it is there (every mode, `none` included).
        let version = Minter::global().mint_raw(T::KIND);
        let id = Id::from_payload(key);
        let found = match answer {
            Some(answer) => {
                let token = LoadToken::new(Arc::clone(answer) as _);
                token.scope(|| loader(id)).await
            }
            None => loader(id).await,
        };
        match found {
            Ok(Some((value, ttl))) => {
                let deadline = self.deadline(ttl.map_or(u64::MAX, millis));
                Ok(self
                    .fill(key, version, value, deadline, over_bad, l2_left, lease)
                    .await)
            }
            Ok(None) => Err(self.not_found(key)),
            Err(source) => Err(Error::Load {
                table: self.spec.name,
                source: Arc::from(source),
            }),
        }
    }

    /// A loaded `value`, minted `version` before the load, living until
    /// `deadline` at most (`u64::MAX`: as the table says): written to L2,
    /// answered as a fill. The answer waits for the write at most `l2_left`
    /// (the flight's L2 time is one L2 timeout, its read's and its write's):
    /// past that the write goes on as a task of its own. The lease this
    /// node holds on `key`, if any, is released once the write is done.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn fill(
        &self,
        key: u64,
        version: RawId,
        value: T,
        deadline: u64,
        over_bad: bool,
        l2_left: Duration,
        lease: Option<Leased>,
    ) -> Loaded<T> {
        let value = Arc::new(value);
        // Not a fill an invalidation applied since it minted overtook (a
        // table-wide one's floor refuses it in L2 too, on one server).
        let current = !self.applied.overtakes(key, version.payload());
        if current && let Some(table) = self.me.upgrade().filter(|table| table.tier.is_some()) {
            let life_ms = deadline.saturating_sub(self.clock.now_ms());
            let (write, ttl_ms) = (Write::Fill { over_bad }, self.l2_ttl_ms(life_ms));
            let value = Arc::clone(&value);
            let mut written = Box::pin(async move {
                let tier = table.tier.as_ref().expect("filtered");
                // A fill the server did not take is only a lost chance to
                // share it (counted): nothing to deliver later.
                let written = tier.write(key, &version, &value, ttl_ms, write, &table.counters);
                let _ = written.await;
                if let Some(lease) = lease {
                    lease.release().await;
                }
            });
            if tokio::time::timeout(l2_left, &mut written).await.is_err() {
                tokio::spawn(written);
            }
        }
        let fetched = Fetched::new(value, Source::Fill, version.payload());
        Loaded { fetched, deadline }
    }
}
