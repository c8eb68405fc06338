//! Warm start: a node fills its L1 from the fleet's list of hot ids in
//! L2 before its first reads, and keeps that list up to date as it reads.
//!
//! The list ([`keyspace::hot`](crate::keyspace::hot)) is one sorted set
//! per table, fed by every node's [`Table::publish_hot`]: its hottest ids
//! (the eviction policy's heat, topped up with live rows of heat 1 while
//! the policy ranks too few) merged with decay (see the tier's `hot`).
//!
//! [`Table::warm`] reads the `warm_ids` hottest ids of the list and their
//! frames, one `MGET` per slot and batch, and installs each frame that
//! would answer a miss (a live value no applied invalidation, and no
//! table-wide floor, overtakes). It is an L2 read like a flight's, under a
//! flight's rules: each id it warms holds the flight slot of its id while
//! its frame is read, so a write that lands meanwhile detaches it and the
//! warm installs nothing (as a miss's flight would); a miss that comes
//! meanwhile joins it and is answered by it. Warming never calls the
//! loader for itself: an id L2 has no live value for is let go, unless a
//! miss joined it, which then gets a flight of its own as any miss does.
//! Ids already in L1, or in flight, are left alone.

use std::sync::Arc;

use tokio::runtime::Handle;

use super::{Answer, Landing, Table};
use crate::entity::spec::Cached;
use crate::l2::Found;
use crate::report::stats::Counters;
use crate::table::fetched::{Fetched, Source};
use crate::table::flight::Joined;

/// The most ids one warming step holds the flight slots of, and reads
/// with one `MGET` per slot.
const WARM_BATCH: usize = 512;

/// The flight slots a warming step holds: those not landed when it is
/// dropped (it was cancelled) are let go as if L2 had nothing for them.
struct Held<'t, T: Cached> {
    table: &'t Table<T>,
    runtime: Handle,
    slots: Vec<(u64, u64, Arc<Answer<T>>)>,
}

impl<T: Cached> Drop for Held<'_, T> {
    fn drop(&mut self) {
        for (key, token, answer) in self.slots.drain(..) {
            self.table.let_go(key, token, answer, &self.runtime);
        }
    }
}

impl<T: Cached> Table<T> {
    /// The ids to merge into the fleet's hot list, with their heat: the
    /// `warm_ids` rows the eviction policy ranks hottest, topped up with
    /// live rows (heat 1) while it ranks fewer (a table below three
    /// quarters of its bound ranks none).
    pub(crate) fn hot_to_publish(&self) -> Vec<(u64, u32)> {
        let n = self.spec.warm_ids;
        let mut hot: Vec<(u64, u32)> = (self.hottest(n).into_iter())
            .map(|(key, heat)| (key, u32::from(heat).max(1)))
            .collect();
        if hot.len() < n {
            let ranked: std::collections::HashSet<u64, foldhash::fast::FixedState> =
                hot.iter().map(|&(key, _)| key).collect();
            let mut shard = 0;
            while hot.len() < n
                && let Some(rows) = self.values_of_shard(shard)
            {
                let fresh = rows.into_iter().map(|(key, ..)| key);
                let fresh = fresh.filter(|key| !ranked.contains(key));
                hot.extend(fresh.take(n - hot.len()).map(|key| (key, 1)));
                shard += 1;
            }
        }
        hot
    }

    /// Merges [`hot_to_publish`](Self::hot_to_publish) into the fleet's
    /// list in L2, if the table is `warm` and has L2 and rows to list; how
    /// many ids it merged (0 if it did not; an L2 failure is counted in
    /// `l2_errors`).
    pub(crate) async fn publish_hot(&self) -> usize {
        let Some(tier) = self.tier.as_ref().filter(|_| self.warms()) else {
            return 0;
        };
        let hot = self.hot_to_publish();
        if hot.is_empty() {
            return 0;
        }
        let ttl_ms = self.spec.ttl_ms.saturating_add(self.spec.stale_if_error_ms);
        match tier.merge_hot(&hot, self.spec.warm_ids, ttl_ms).await {
            Ok(_) => hot.len(),
            Err(failure) => {
                Counters::bump(&self.counters.l2_errors);
                tracing::debug!(table = self.spec.name, %failure, "publishing the hot ids failed");
                0
            }
        }
    }

    /// Whether the table is declared `warm`.
    pub(crate) fn warms(&self) -> bool {
        self.spec.warm != crate::entity::spec::Warm::Off
    }

    /// Warms L1 from the fleet's hot list (see the module's docs); how many
    /// rows it installed. Without L2, or if L2 fails, none: the node
    /// starts cold.
    pub(crate) async fn warm(&self) -> usize {
        let Some(tier) = self.tier.as_ref() else {
            return 0;
        };
        let Some(runtime) = Handle::try_current().ok().or_else(|| self.runtime.clone()) else {
            return 0;
        };
        let n = self.spec.warm_ids.min(self.spec.max_size);
        let keys = match tier.read_hot(n).await {
            Ok(keys) => keys,
            Err(failure) => {
                tracing::warn!(table = self.spec.name, %failure, "cannot read the hot ids: starting cold");
                return 0;
            }
        };
        let mut warmed = 0;
        for batch in keys.chunks(WARM_BATCH) {
            warmed += self.warm_batch(batch, &runtime).await;
        }
        tracing::debug!(
            table = self.spec.name,
            listed = keys.len(),
            warmed,
            "warmed"
        );
        warmed
    }

    /// Warms `keys`: holds the flight slot of each that L1 lacks and no
    /// flight reads, reads their frames, installs each live one.
    async fn warm_batch(&self, keys: &[u64], runtime: &Handle) -> usize {
        let tier = self.tier.as_ref().expect("warmed with L2 only");
        let mut held = Held {
            table: self,
            runtime: runtime.clone(),
            slots: Vec::with_capacity(keys.len()),
        };
        for &key in keys {
            let joined = self.flights.join(
                key,
                || self.peek(key),
                |_| None,
                || {
                    let answer = Arc::new(Answer::new(runtime.clone()));
                    (Arc::clone(&answer), Some(answer))
                },
            );
            if let Joined::Leader(token, Some(answer)) = joined {
                held.slots.push((key, token, answer));
            }
        }
        if held.slots.is_empty() {
            return 0;
        }
        let read: Vec<u64> = held.slots.iter().map(|&(key, ..)| key).collect();
        let found = tier.read_many(&read, &self.counters).await;
        // As a batch miss: a table-wide invalidation this node may not know
        // of yet is applied first (it detaches every slot held here).
        let floor = found.iter().find_map(|found| match found {
            Found::Buried(floor) => Some(floor.payload()),
            _ => None,
        });
        if let Some(floor) = floor {
            self.flush_at(floor);
        }
        let mut warmed = 0;
        let slots = std::mem::take(&mut held.slots);
        for ((key, token, answer), found) in slots.into_iter().zip(found) {
            match found {
                Found::Value(version, value, left_ms)
                    if !self.applied.overtakes(key, version.payload()) =>
                {
                    let fetched = Fetched::new(Arc::new(value), Source::L2, version.payload());
                    let deadline = self.deadline(left_ms);
                    warmed += usize::from(self.land_warm(key, token, fetched, deadline, &answer));
                }
                _ => self.let_go(key, token, answer, runtime),
            }
        }
        warmed
    }

    /// Installs the warmed `fetched` of `key` unless a write detached its
    /// slot (`token`) or the row is refused (L1 not trusted, full, or an
    /// invalidation newer than it applied), and answers any miss that
    /// joined; whether it installed, counted as `warmed`.
    fn land_warm(
        &self,
        key: u64,
        token: u64,
        fetched: Fetched<T>,
        deadline: u64,
        answer: &Answer<T>,
    ) -> bool {
        let now = self.clock.now_ms();
        let tag = Self::tag_of(fetched.value());
        let mut row = self.row(
            Some(Arc::clone(fetched.value())),
            fetched.version().payload(),
            now,
            deadline,
        );
        row.refreshable = true;
        self.rows.make_room(now);
        let mut installed = false;
        let mut declined = None;
        self.flights.land(key, token, || {
            declined = self.install(key, row, now, tag);
            installed = declined.is_none();
        });
        drop(declined);
        self.rows.collect_if_due();
        if installed {
            Counters::bump(&self.counters.warmed);
        }
        answer.set(Ok(fetched));
        installed
    }

    /// Ends the warm slot `token` of `key`, which found nothing to install:
    /// if nobody but the warm waits for it, it goes; if a miss joined it,
    /// it goes on as that miss's flight (L2, then the loader).
    fn let_go(&self, key: u64, token: u64, answer: Arc<Answer<T>>, runtime: &Handle) {
        // Held by the slot (while it is current) and here: nobody else.
        let alone = |answer: &Arc<Answer<T>>| Arc::strong_count(answer) <= 2;
        if self.flights.abandon(key, token, alone) || Arc::strong_count(&answer) == 1 {
            return;
        }
        // A miss waits: it was counted (`coalesced`) when it joined.
        Counters::bump(&self.counters.running);
        let landing = Landing::new(self.shared(), key, token, answer);
        runtime.spawn(landing.launch());
    }
}
