//! What the coherence lanes tell a table ([`Target`]): another node's
//! invalidation applied, the channel lost (bypass, or serve through a
//! grace) and back (trust again, verifying what the grace kept).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};

use super::Table;
use crate::coherence::Target;
use crate::entity::id::RawId;
use crate::entity::spec::{Cached, Coherence, TableSpec};
use crate::l1::RemovalCause;
use crate::report::stats::Counters;
use crate::table::grace::{OnLoss, Over};

/// L2 reads in flight at once while verifying the rows kept through a
/// lost channel's grace.
const VERIFY_CONCURRENCY: usize = 64;

impl<T: Cached> Table<T> {
    /// Applies an invalidation from another node (or the server): drops the
    /// row of `key` if it is older than `version` (any row, without a
    /// version), and keeps a flight under way from installing. A repeat or a
    /// late message is a no-op.
    pub(crate) fn apply(&self, key: u64, version: Option<u64>) {
        if let Some(version) = version
            && !self.applied.advance(key, version)
        {
            return;
        }
        self.flights.overtake(key, || {
            // Counted under the flights' lock, before the row goes: whoever
            // sees the row gone sees it counted, and whoever sees it
            // counted finds the id's flight detached (a new flight of the
            // id waits for this lock, so it starts after the removal).
            Counters::bump(&self.counters.invalidations);
            let cause = RemovalCause::InvalidatedRemotely;
            self.rows.remove_older(key, version, cause)
        });
        self.rows.collect_if_due();
        tracing::debug!(
            table = self.spec.name,
            id = %RawId::new(T::KIND, key),
            version = version.map(|v| tracing::field::display(RawId::new(T::KIND, v))),
            "invalidation applied"
        );
    }

    /// The invalidation channel is lost: invalidations may be missed from
    /// now on, so drop every row and keep none until it is back; or, with a
    /// grace, keep serving them, unverified, for at most the grace.
    pub(crate) fn distrust(&self) {
        match self.grace.lost(self.trusted.load(Relaxed)) {
            OnLoss::Bypass => self.bypass(),
            OnLoss::Serving => {}
            OnLoss::Serve(generation) => {
                let Some(runtime) = &self.runtime else {
                    self.grace.over(generation);
                    return self.bypass();
                };
                tracing::warn!(
                    table = self.spec.name,
                    grace_ms = self.grace.ms,
                    "invalidation channel lost: L1 keeps serving, unverified, for the grace"
                );
                self.readiness.changed();
                // A weak handle: a cache dropped meanwhile is not kept alive
                // for the grace.
                let (me, grace) = (self.me.clone(), Duration::from_millis(self.grace.ms));
                runtime.spawn(async move {
                    tokio::time::sleep(grace).await;
                    if let Some(me) = me.upgrade() {
                        me.grace_over(generation);
                    }
                });
            }
        }
    }

    /// Flushes L1 and keeps no row until the channel is back.
    pub(super) fn bypass(&self) {
        let was = self.trusted.swap(false, Relaxed);
        self.flush();
        self.readiness.changed();
        if was {
            tracing::warn!(
                table = self.spec.name,
                "invalidation channel lost: L1 flushed, reads bypass it until it is back"
            );
        }
    }

    /// The grace of loss `generation` ran out.
    pub(super) fn grace_over(&self, generation: u64) {
        match self.grace.over(generation) {
            Over::Nothing => {}
            Over::Flush => {
                self.flush();
                self.readiness.changed();
                tracing::warn!(
                    table = self.spec.name,
                    "lost-channel grace over before L1 was verified: L1 flushed"
                );
            }
            Over::Bypass => self.bypass(),
        }
    }

    /// The invalidation channel is (back) up: flights that read during the
    /// gap are overtaken, and L1 keeps rows again. Rows kept through a
    /// grace are verified: by the lane's catch-up (`durable`, done before
    /// this), else against L2.
    pub(crate) fn trust(&self) {
        let was = self
            .flights
            .overtake_all(|| self.trusted.swap(true, Relaxed));
        if let Some(generation) = self.grace.up() {
            match (self.spec.coherence, &self.runtime, self.me.upgrade()) {
                (Coherence::Durable, ..) => {
                    self.grace.verified(generation);
                }
                (_, Some(runtime), Some(me)) => {
                    runtime.spawn(async move { me.verify(generation).await });
                }
                _ => self.grace_over(generation),
            }
        }
        self.readiness.changed();
        if !was {
            tracing::info!(table = self.spec.name, "invalidation channel up: L1 in use");
        }
    }

    /// Verifies the rows kept through the grace of loss `generation`
    /// against L2: a row older than L2's frame or tombstone, or without
    /// one, is dropped. A failure flushes them all.
    pub(super) async fn verify(&self, generation: u64) {
        let Some(tier) = &self.tier else {
            return;
        };
        let rows = self.rows.versions();
        let checked = rows.len();
        let checks = futures_util::stream::iter(rows)
            .map(|(key, version)| async move { (key, version, tier.version(key).await) })
            .buffer_unordered(VERIFY_CONCURRENCY);
        futures_util::pin_mut!(checks);
        let mut dropped = 0;
        while let Some((key, version, l2)) = checks.next().await {
            let newer = match l2 {
                Ok(l2) => l2.unwrap_or(version + 1),
                Err(failure) => {
                    tracing::warn!(table = self.spec.name, %failure, "verifying L1 failed");
                    return self.grace_over(generation);
                }
            };
            if newer > version
                && self.flights.overtake(key, || {
                    let cause = RemovalCause::InvalidatedRemotely;
                    self.rows.remove_older(key, Some(newer), cause)
                })
            {
                dropped += 1;
            }
        }
        self.rows.collect_if_due();
        if self.grace.verified(generation) {
            self.readiness.changed();
            tracing::info!(
                table = self.spec.name,
                checked,
                dropped,
                "L1 kept through the lost channel verified against L2"
            );
        }
    }
}

impl<T: Cached> Target for Table<T> {
    fn spec(&self) -> &'static TableSpec {
        self.spec
    }

    fn flush(&self) {
        Table::flush(self);
        tracing::debug!(table = self.spec.name, "L1 flushed by the coherence lane");
    }

    fn flush_at(&self, version: u64) {
        if Table::flush_at(self, version) {
            tracing::debug!(
                table = self.spec.name,
                version = %RawId::new(T::KIND, version),
                "table-wide invalidation applied"
            );
        }
    }

    fn apply(&self, key: u64, version: Option<u64>) {
        Table::apply(self, key, version);
    }

    fn drop_tag(&self, tag: crate::entity::tag::Tag, version: Option<u64>) {
        if Table::drop_tag(self, tag, version) {
            tracing::debug!(table = self.spec.name, %tag, "tag-wide invalidation applied");
        }
    }

    fn distrust(&self) {
        Table::distrust(self);
    }

    fn trust(&self) {
        Table::trust(self);
    }

    fn malformed(&self) {
        Counters::bump(&self.counters.malformed_messages);
    }

    fn redeliver(&self) -> BoxFuture<'_, bool> {
        Table::redeliver(self).boxed()
    }
}
