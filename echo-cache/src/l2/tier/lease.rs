//! The lease of a `herd = "fleet"` table: one load per herd across the
//! nodes sharing L2.
//!
//! Beside the frame of an id, its lease `<frame key>:lease` (a string: the
//! holder's token, `PX` the lease's length) and its wake list
//! `<frame key>:wake`; on a spread table `{<frame key>}:lease` and
//! `{<frame key>}:wake`, whose hashtag is the frame's key, so all three
//! are on the frame's slot. A fleet table reads through [`READ_OR_LEASE`]
//! instead of `MGET`: the frame and the floor as ever, and, only when
//! there is no live frame, the lease, taken if free: a hit costs the same
//! single round trip. The holder loads, writes its frame as any fill does
//! (newer-wins: a fill an invalidation overtook is refused), then releases
//! the lease ([`RELEASE_LEASE`]), which wakes the waiters: they wait on the
//! wake list with `BLMOVE` (a connection of their own each, see
//! `connections::blocking`), at most until the lease runs out, then read
//! again: the frame, or a free lease (the holder died, hung, or its fill
//! was refused) which the first of them takes.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::{Found, Read, Tier, floor_of};
use crate::connections::{Lane, Server};
use crate::entity::mint::Minter;
use crate::entity::spec::{Cached, Placement};
use crate::keyspace;
use crate::l2::script::{READ_OR_LEASE, RELEASE_LEASE};
use crate::report::stats::Counters;

/// What a fleet table's read found of the id's lease.
pub(crate) enum Lease {
    /// Not asked for: L2 holds a live frame, or did not answer.
    None,
    /// Taken: this node loads, and releases it when its frame is written.
    Taken(Leased),
    /// Another node holds it, for this long at most.
    Held(Duration),
}

/// A lease this node holds. Released when dropped (on a task of its own:
/// a load that failed or was cancelled lets the waiters go on at once
/// rather than at the lease's end).
pub(crate) struct Leased {
    server: Arc<Server>,
    lane: Lane,
    lease_key: Vec<u8>,
    wake_key: Vec<u8>,
    token: Vec<u8>,
    lease_ms: u64,
}

impl Leased {
    /// Drops the lease if it is still this node's, and wakes the waiters.
    pub(crate) async fn release(mut self) {
        // Taken: the drop that follows has nothing left to release.
        let token = std::mem::take(&mut self.token);
        let (lease_key, wake_key) = (&self.lease_key, &self.wake_key);
        release(
            &self.server,
            self.lane,
            lease_key,
            wake_key,
            &token,
            self.lease_ms,
        )
        .await;
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        if self.token.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // The lease runs out by itself.
        };
        let (server, lane, lease_ms) = (Arc::clone(&self.server), self.lane, self.lease_ms);
        let (lease_key, wake_key) = (
            std::mem::take(&mut self.lease_key),
            std::mem::take(&mut self.wake_key),
        );
        let token = std::mem::take(&mut self.token);
        runtime.spawn(async move {
            release(&server, lane, &lease_key, &wake_key, &token, lease_ms).await;
        });
    }
}

async fn release(
    server: &Server,
    lane: Lane,
    lease_key: &[u8],
    wake_key: &[u8],
    token: &[u8],
    lease_ms: u64,
) {
    let ms = lease_ms.to_string();
    let released = server
        .eval::<i64>(
            lane,
            &RELEASE_LEASE,
            &[lease_key, wake_key],
            &[token, ms.as_bytes()],
        )
        .await;
    if let Err(failure) = released {
        // The waiters wake at the lease's end instead.
        tracing::debug!(%failure, "lease release failed");
    }
}

impl<T: Cached> Tier<T> {
    /// The lease and wake keys of the frame key `id_key`.
    fn lease_keys(&self, id_key: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let key = |suffix: &[u8]| match self.spec.placement() {
            Placement::Table => [id_key, suffix].concat(),
            Placement::Spread => [b"{", id_key, b"}", suffix].concat(),
        };
        (key(keyspace::LEASE_SUFFIX), key(keyspace::WAKE_SUFFIX))
    }

    /// A fleet table's read of `key`: what L2 holds, as [`Tier::read`]
    /// says, and the id's lease if L2 holds no live frame.
    pub(crate) async fn read_or_lease(&self, key: u64, counters: &Counters) -> (Found<T>, Lease) {
        let span = self.span("read_or_lease", key);
        let id_key = self.key(key);
        let (lease_key, wake_key) = self.lease_keys(&id_key);
        let token = Minter::global().mint_raw(T::KIND).to_bytes();
        let ms = self.lease_ms.to_string();
        let with_floor: [&[u8]; 4] = [&id_key, &lease_key, &wake_key, &self.floor_key];
        let keys = if self.floored() {
            &with_floor[..]
        } else {
            &with_floor[..3]
        };
        let lane = self.lane(&id_key);
        let read = self
            .server
            .eval::<(Option<Vec<u8>>, Option<Vec<u8>>, i64)>(
                lane,
                &READ_OR_LEASE,
                keys,
                &[&token, ms.as_bytes()],
            )
            .instrument(span)
            .await;
        let (frame, floor, lease) = match read {
            Ok(read) => read,
            Err(failure) => {
                Counters::bump(&counters.l2_errors);
                tracing::debug!(%failure, "L2 read failed");
                self.read_warning
                    .emit(|n| self.warn_failure("read", &failure, n));
                return (Found::Failed, Lease::None);
            }
        };
        let Read { frame, floor } = Read {
            frame,
            floor: floor_of(floor.as_deref()),
        };
        let found = self.found(key, frame, floor, counters);
        let lease = match lease {
            0 => Lease::None,
            -1 => Lease::Taken(Leased {
                server: Arc::clone(&self.server),
                lane,
                lease_key,
                wake_key,
                token: token.to_vec(),
                lease_ms: self.lease_ms,
            }),
            left => Lease::Held(Duration::from_millis(left.unsigned_abs())),
        };
        (found, lease)
    }

    /// Waits for the release of the lease on `key`, at most `left` (what
    /// the holder's lease had left); if the wait fails (L2 is down), until
    /// then all the same.
    pub(crate) async fn await_release(&self, key: u64, left: Duration) {
        let id_key = self.key(key);
        let (_, wake_key) = self.lease_keys(&id_key);
        let waited = Duration::from_millis(1) + left;
        let started = tokio::time::Instant::now();
        if let Err(failure) = self
            .server
            .await_list(self.slot_of(&id_key), &wake_key, waited)
            .await
        {
            tracing::debug!(%failure, "waiting for a lease failed");
            tokio::time::sleep_until(started + waited).await;
        }
    }
}
