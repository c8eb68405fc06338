//! Reading many keys of a table at once: one `MGET` per slot.
//!
//! A cluster answers a multi-key command only if its keys share a slot.
//! A table's keys do (its `{<table>}` hashtag), so its batch is one `MGET`;
//! a spread table's batch is one `MGET` per slot, all sent at once on the
//! multiplexed connection (pipelined to each node). One server has no
//! slots: one `MGET` either way. Each `MGET` asks for the table's floor
//! too, last, when its reads check it (see the tier's module doc).

use futures_util::future::join_all;
use redis::Cmd;
use tracing::{Instrument, field};

use super::{Found, Tier};
use crate::entity::spec::Cached;
use crate::report::stats::Counters;

/// The most keys one `MGET` asks for: a larger batch is split (its parts
/// sent at once), so no one command holds the server for long.
const MGET_KEYS: usize = 512;

impl<T: Cached> Tier<T> {
    /// What L2 holds for each of `keys`, in their order. A failed `MGET`
    /// answers [`Found::Failed`] for its keys, each counted as an L2 error
    /// (as many as the reads it stands for); a key of another Redis type
    /// reads as nothing (`MGET` answers nil for it), and the fill that
    /// follows counts it and overwrites it (see `write_if_vacant`).
    pub(crate) async fn read_many(&self, keys: &[u64], counters: &Counters) -> Vec<Found<T>> {
        let span = tracing::debug_span!(
            "l2",
            op = "read_many",
            table = self.spec.name(),
            ids = keys.len(),
            outcome = field::Empty,
        );
        let found = (self.read_many_in(keys, counters))
            .instrument(span.clone())
            .await;
        let values = found
            .iter()
            .filter(|found| matches!(found, Found::Value(..)))
            .count();
        span.record("outcome", field::display(format_args!("{values} values")));
        found
    }

    async fn read_many_in(&self, keys: &[u64], counters: &Counters) -> Vec<Found<T>> {
        let ids: Vec<Vec<u8>> = keys.iter().map(|&key| self.key(key)).collect();
        // The positions of the keys, grouped by slot (on a cluster) and cut
        // into commands.
        let slots: Vec<u16> = if self.server.is_cluster() {
            ids.iter().map(|id| self.slot_of(id)).collect()
        } else {
            vec![self.slot; ids.len()]
        };
        let mut positions: Vec<usize> = (0..ids.len()).collect();
        positions.sort_by_key(|&at| slots[at]);
        let commands = positions
            .chunk_by(|&a, &b| slots[a] == slots[b])
            .flat_map(|same_slot| same_slot.chunks(MGET_KEYS))
            .map(|chunk| (slots[chunk[0]], chunk));
        let floored = self.floored();
        let replies = join_all(commands.map(async |(slot, positions)| {
            let mut mget = Cmd::new();
            mget.arg("MGET");
            for &at in positions {
                mget.arg(&ids[at]);
            }
            if floored {
                mget.arg(&self.floor_key);
            }
            let lane = self.lane_of(slot);
            let reply = self.server.query::<Vec<Option<Vec<u8>>>>(lane, mget).await;
            (positions, reply)
        }))
        .await;
        let mut found: Vec<Found<T>> = keys.iter().map(|_| Found::Failed).collect();
        for (positions, reply) in replies {
            match reply {
                Ok(mut frames) if frames.len() == positions.len() + usize::from(floored) => {
                    let floor = if floored {
                        super::floor_of(frames.pop().flatten().as_deref())
                    } else {
                        None
                    };
                    for (&at, frame) in positions.iter().zip(frames) {
                        found[at] = self.found(keys[at], frame, floor, counters);
                    }
                }
                Ok(frames) => {
                    // Not what MGET answers: treat it as a failed read.
                    counters
                        .l2_errors
                        .fetch_add(positions.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(
                        asked = positions.len(),
                        got = frames.len(),
                        "L2 MGET answered the wrong number of values"
                    );
                }
                Err(failure) => {
                    counters
                        .l2_errors
                        .fetch_add(positions.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(%failure, "L2 read failed");
                    self.read_warning
                        .emit(|n| self.warn_failure("read", &failure, n));
                }
            }
        }
        found
    }
}
