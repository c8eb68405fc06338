//! Step 4 of the data path: a flight's outcome lands in L1 unless a write
//! overtook it, and answers every waiter; with the machinery that makes a
//! flight land whatever happens ([`Landing`]), go on without its caller
//! ([`Detachable`]) and say how it ended ([`Ended`]).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::FutureExt;
use tokio::runtime::Handle;
use tracing::instrument::Instrumented;
use tracing::{Instrument, Span, field};

use super::read::Aloft;
use super::{Answer, Loaded, Table};
use crate::entity::id::RawId;
use crate::entity::spec::Cached;
use crate::entity::tag::Tag;
use crate::error::Error;
use crate::l1::{self, Row};
use crate::report::stats::Counters;
use crate::table::fetched::{Fetched, Source};
use crate::table::stale::{Failsafe, Fallback};

impl<T: Cached> Table<T> {
    /// Step 4: installs the outcome unless overtaken, answers every waiter;
    /// returns how the flight ended.
    pub(super) fn land(
        &self,
        key: u64,
        token: u64,
        outcome: Result<Loaded<T>, Error>,
        fallback: Fallback<T>,
        answer: &Answer<T>,
    ) -> Ended {
        let (outcome, deadline) = match outcome {
            Ok(Loaded { fetched, deadline }) => (Ok(fetched), deadline),
            Err(error) => (Err(error), u64::MAX),
        };
        let now = self.clock.now_ms();
        let backoff = fallback.backoff;
        if self.failsafe.enabled() && !backoff {
            self.failsafe.landed(key, now, &outcome);
        }
        let mut tag = None;
        let row = match &outcome {
            Ok(fetched) => {
                tag = Self::tag_of(fetched.value());
                let value = Some(Arc::clone(fetched.value()));
                let version = fetched.version().payload();
                let mut row = self.row(value, version, now, deadline);
                // What is left of an L2 frame is not its whole life: a row
                // read late in it is refreshed as any other.
                row.refreshable |= fetched.source() == Source::L2;
                Some(row)
            }
            Err(Error::NotFound { .. }) if self.spec.absent_ttl_ms > 0 => {
                Some(self.row(None, key, now, u64::MAX))
            }
            _ => None,
        };
        if row.is_some() {
            self.rows.make_room(now);
        }
        let mut declined = None;
        let landed = self.flights.land(key, token, || {
            declined = row.and_then(|row| self.install(key, row, now, tag));
        });
        drop(declined);
        self.rows.collect_if_due();
        let outcome = match outcome {
            // Not if a write overtook the flight, or the channel that
            // tells of invalidations went down meanwhile.
            Err(error) if landed && self.serves_stale(key, &fallback, &error) => {
                Ok(fallback.take().expect("a fallback"))
            }
            outcome => outcome,
        };
        let ended = Ended::of(&outcome);
        if ended == Ended::Stale && backoff {
            Counters::bump(&self.counters.stale_backoffs);
        }
        Counters::bump(match ended {
            Ended::L2 => &self.counters.l2_hits,
            Ended::Fill => &self.counters.fills,
            Ended::Stale => &self.counters.stale_served,
            Ended::NotFound => &self.counters.not_found,
            Ended::LoadTimeout => &self.counters.load_timeouts,
            Ended::LoadError | Ended::Crashed => &self.counters.load_errors,
        });
        self.counters.running.fetch_sub(1, Relaxed);
        answer.set(outcome);
        ended
    }

    /// Whether a flight of `key` that failed with `error` answers its
    /// fallback instead (see [`crate::stale`]).
    pub(super) fn serves_stale(&self, key: u64, fallback: &Fallback<T>, error: &Error) -> bool {
        Failsafe::covers(error)
            && self.verified()
            && fallback.holds(|value, version| self.fallback_holds(key, version, value))
    }

    /// Whether no invalidation can have been missed: the channel is up
    /// and what L1 kept through a loss is verified. Stale values are served
    /// only then.
    pub(super) fn verified(&self) -> bool {
        self.trusted.load(Relaxed) && !self.grace.is_unverified()
    }

    /// The deadline, on the table's clock, of a row that may live `life_ms`
    /// from now (`u64::MAX`: as the table says).
    pub(super) fn deadline(&self, life_ms: u64) -> u64 {
        match life_ms {
            u64::MAX => u64::MAX,
            life_ms => self.clock.now_ms().saturating_add(life_ms),
        }
    }

    /// A row of `value` (or of an absence) at `version`, inserted at `now`:
    /// it dies a jittered TTL later (the absence TTL for an absence), and
    /// by `deadline` (see [`l1::expiry_within`]). Weighed, in a table with
    /// a byte bound (an absence weighs nothing). A deadline shorter than
    /// the TTL is one of the row's own: the row dies a clock tick before
    /// it, since a reading may be a tick late, and the clock ticks finely
    /// until then ([`Clock::follow`]).
    pub(super) fn row(
        &self,
        value: Option<Arc<T>>,
        version: u64,
        now: u64,
        deadline: u64,
    ) -> Row<T> {
        let ttl_ms = if value.is_some() {
            self.spec.ttl_ms
        } else {
            self.spec.absent_ttl_ms
        };
        let life_ms = deadline.saturating_sub(now);
        let mut expires_at = l1::expiry_within(now, ttl_ms, self.spec.jitter, life_ms);
        if life_ms < ttl_ms {
            expires_at = expires_at.saturating_sub(self.clock.follow(now, life_ms));
        }
        // Weighed here, before any lock is taken: the weigher is user code.
        let weight = match (&self.weight, &value) {
            (Some(weight), Some(value)) => weight.of(value),
            _ => 0,
        };
        Row {
            refreshable: value.is_some() && life_ms > self.spec.refresh_ms,
            weight,
            value,
            version,
            expires_at,
        }
    }

    /// Installs `row` (of `tag`, its value's) unless L1 is not trusted, an
    /// invalidation newer than the row was applied (to its id, its tag or
    /// the table), or the table is full and keeps what it has (see
    /// [`Rows::insert`]); returns the row it did not install, for the
    /// caller to drop once it has released its locks. Call with the key's
    /// flight lock held.
    #[must_use]
    pub(super) fn install(
        &self,
        key: u64,
        row: Row<T>,
        now: u64,
        tag: Option<Tag>,
    ) -> Option<Row<T>> {
        if !self.trusted.load(Relaxed) || self.overtaken(key, row.version, tag) {
            return Some(row);
        }
        let full = self.rows.insert(key, row, now).err();
        if full.is_some() {
            Counters::bump(&self.counters.full_skips);
        }
        full
    }
}

/// What [`Table::join`] made of a miss.
pub(super) enum Joining<T: Cached> {
    Cached(Result<Fetched<T>, Error>),
    Follower(Arc<Answer<T>>),
    Leader(Landing<T>, Arc<Answer<T>>),
}

/// A flight driven by the caller that started it, until that caller gives
/// up (times out, or is dropped): then it is handed to the runtime as its
/// own task, so it still lands and answers the other waiters.
pub(super) struct Detachable {
    flight: Option<Flight>,
    runtime: Handle,
}

/// A launched flight: boxed, and run in its span.
pub(super) type Flight = Instrumented<Pin<Box<dyn Future<Output = ()> + Send>>>;

impl Detachable {
    pub(super) fn new(flight: Flight, runtime: Handle) -> Detachable {
        Detachable {
            flight: Some(flight),
            runtime,
        }
    }
}

impl Future for Detachable {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(flight) = self.flight.as_mut() else {
            return Poll::Ready(());
        };
        let landed = Pin::new(flight).poll(cx);
        if landed.is_ready() {
            self.flight = None;
        }
        landed
    }
}

impl Drop for Detachable {
    fn drop(&mut self) {
        if let Some(flight) = self.flight.take() {
            self.runtime.spawn(flight);
        }
    }
}

/// A launched flight. If it is dropped before it lands (its task was
/// cancelled, its runtime shut down, even before its first poll), it lands a
/// crash, so no waiter waits for ever and no flight entry is left behind.
pub(super) struct Landing<T: Cached> {
    pub(super) table: Option<Arc<Table<T>>>,
    pub(super) key: u64,
    pub(super) token: u64,
    pub(super) answer: Arc<Answer<T>>,
    /// A refresh ([`Table::refresh`]) of the row at this version: it reads
    /// the loader, not L2, and if it fails, reads may start it again after
    /// [`Table::refresh_retry`].
    pub(super) refreshing: Option<u64>,
    /// When it started, if its span or its metrics want its duration:
    /// reading the clock is not free.
    pub(super) started: Option<Instant>,
    /// The flight's `tracing` span (disabled unless a subscriber wants it).
    pub(super) span: Span,
}

impl<T: Cached> Landing<T> {
    pub(super) fn new(
        table: Arc<Table<T>>,
        key: u64,
        token: u64,
        answer: Arc<Answer<T>>,
    ) -> Landing<T> {
        let span = tracing::debug_span!(
            "flight",
            table = table.spec.name,
            id = %RawId::new(T::KIND, key),
            source = field::Empty,
            outcome = field::Empty,
            error = field::Empty,
            duration = field::Empty,
        );
        let timed = cfg!(feature = "metrics") || !span.is_disabled();
        Landing {
            table: Some(table),
            key,
            token,
            answer,
            refreshing: None,
            started: timed.then(Instant::now),
            span,
        }
    }

    /// The flight, ready to be driven or spawned: boxed, then run in its
    /// span (wrapping the box, not the flight, so that the span costs no
    /// copy of the flight's state, which is large).
    pub(super) fn launch(self) -> Flight {
        let span = self.span.clone();
        let flight: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(self.fly());
        flight.instrument(span)
    }

    /// Resolves the key within the table's deadline and lands, whatever
    /// happens on the way. Past the deadline the resolution is dropped
    /// (cancelled where it awaits), so its late result goes nowhere.
    pub(super) async fn fly(mut self) {
        let table = Arc::clone(self.table.as_ref().expect("lands once"));
        // Filled as the flight goes: still there if it times out.
        let mut fallback = Fallback::none();
        let aloft = Aloft {
            token: self.token,
            answer: &self.answer,
            soft_at: (table.soft_timeout).map(|after| tokio::time::Instant::now() + after),
        };
        let refresh = self.refreshing.is_some();
        let resolved = AssertUnwindSafe(table.resolve(self.key, refresh, &mut fallback, &aloft))
            .catch_unwind();
        let deadline = table.load_timeout;
        let outcome = match tokio::time::timeout(deadline, resolved).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(panic)) => Err(table.crashed(&panic_message(&*panic))),
            Err(_) => Err(Error::LoadTimeout {
                table: table.spec.name,
                after: deadline,
            }),
        };
        let ended = self.land(outcome, fallback);
        if let Some(version) = self.refreshing
            && ended.is_some_and(Ended::failed)
        {
            let (key, pause) = (self.key, table.refresh_retry());
            let table = Arc::downgrade(&table);
            drop(self);
            tokio::time::sleep(pause).await;
            if let Some(table) = table.upgrade() {
                table.rows.rearm_refresh(key, version);
            }
        }
    }

    /// Lands `outcome`, then tells the span and the flight histogram; how
    /// the flight ended, unless it had landed already.
    pub(super) fn land(
        &mut self,
        outcome: Result<Loaded<T>, Error>,
        fallback: Fallback<T>,
    ) -> Option<Ended> {
        let table = self.table.take()?;
        if let Err(error) = &outcome
            && !error.is_not_found()
        {
            self.span.record("error", field::display(error));
        }
        let ended = table.land(self.key, self.token, outcome, fallback, &self.answer);
        let Some(took) = self.started.map(|started| started.elapsed()) else {
            return Some(ended);
        };
        if let Some(source) = ended.source() {
            self.span.record("source", source);
        }
        self.span.record("outcome", ended.outcome());
        self.span.record("duration", field::debug(took));
        tracing::debug!(parent: &self.span, "flight landed");
        #[cfg(feature = "metrics")]
        table.metrics.flight(ended.metric(), took);
        Some(ended)
    }
}

/// How a flight ended: what its counter, its span and its metrics say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    L2,
    Fill,
    /// An expired value, the loader having failed (`stale_if_error_ms`).
    Stale,
    NotFound,
    LoadTimeout,
    /// The loader failed (or there is none).
    LoadError,
    /// The loader panicked, or the flight was dropped before it answered.
    Crashed,
}

impl Ended {
    /// The loader failed, timed out or crashed (whether or not an expired
    /// value answered instead).
    pub(super) fn failed(self) -> bool {
        matches!(
            self,
            Ended::Stale | Ended::LoadTimeout | Ended::LoadError | Ended::Crashed
        )
    }

    pub(super) fn of<T>(outcome: &Result<Fetched<T>, Error>) -> Ended {
        match outcome {
            Ok(fetched) if fetched.source() == Source::L2 => Ended::L2,
            Ok(fetched) if fetched.source() == Source::Stale => Ended::Stale,
            Ok(_) => Ended::Fill,
            Err(Error::NotFound { .. }) => Ended::NotFound,
            Err(Error::LoadTimeout { .. }) => Ended::LoadTimeout,
            Err(Error::FlightCrashed { .. }) => Ended::Crashed,
            Err(_) => Ended::LoadError,
        }
    }

    /// Where the value came from, if there is one.
    pub(super) fn source(self) -> Option<&'static str> {
        match self {
            Ended::L2 => Some("l2"),
            Ended::Fill => Some("fill"),
            Ended::Stale => Some("stale"),
            _ => None,
        }
    }

    pub(super) fn outcome(self) -> &'static str {
        match self {
            Ended::L2 | Ended::Fill => "ok",
            Ended::Stale => "stale",
            Ended::NotFound => "not_found",
            Ended::LoadTimeout => "load_timeout",
            Ended::LoadError => "load_error",
            Ended::Crashed => "crashed",
        }
    }

    /// The `source` label of its metrics (a crash counts as a load error,
    /// as in [`Stats::load_errors`]).
    #[cfg(feature = "metrics")]
    pub(super) fn metric(self) -> &'static str {
        match self {
            Ended::L2 => "l2",
            Ended::Fill => "fill",
            Ended::Stale => "stale",
            Ended::NotFound => "not_found",
            Ended::LoadTimeout => "load_timeout",
            Ended::LoadError | Ended::Crashed => "load_error",
        }
    }
}

impl<T: Cached> Drop for Landing<T> {
    fn drop(&mut self) {
        if let Some(table) = &self.table {
            let crashed = table.crashed("the flight was dropped before it answered");
            self.land(Err(crashed), Fallback::none());
        }
    }
}

pub(super) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the loader panicked".to_owned())
}
