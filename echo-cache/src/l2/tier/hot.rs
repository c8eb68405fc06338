//! The fleet's list of a table's hot ids: one sorted set per table,
//! `ecc:{<table>}:hot` ([`keyspace::hot`]), which every node of a `warm`
//! table merges its hottest ids into and a starting node reads.
//!
//! The list is one key in the table's slot, whatever the table's
//! placement: on a cluster its merges and reads go to the master of that
//! slot alone (one node's load, a few hundred microseconds per merge of
//! 1,000 ids, every few seconds per node), while the frames it names are
//! read by the batch path (one `MGET` per slot, see [`batch`](super::batch)).
//! Merging is one script ([`MERGE_HOT`]): decay, add, trim, expire, in one
//! step, so concurrent merges of many nodes never lose one another's heat.

use redis::Cmd;
use tracing::Instrument;

use super::Tier;
use crate::connections::{Failure, Lane};
use crate::entity::id::RawId;
use crate::entity::spec::Cached;
use crate::keyspace;
use crate::l2::script::MERGE_HOT;

/// What every score of the list is multiplied by before a merge adds its
/// heat: the list is a moving average of about the last ten merges,
/// whichever nodes made them.
pub(crate) const DECAY: f64 = 0.9;

impl<T: Cached> Tier<T> {
    /// Merges `hot` (keys and their heat) into the table's hot list, which
    /// keeps the `keep` highest scores and lives `ttl_ms` from now; how
    /// many ids the list holds afterwards.
    pub(crate) async fn merge_hot(
        &self,
        hot: &[(u64, u32)],
        keep: usize,
        ttl_ms: u64,
    ) -> Result<usize, Failure> {
        let span = tracing::debug_span!(
            "l2",
            op = "merge_hot",
            table = self.spec.name(),
            ids = hot.len()
        );
        let key = keyspace::hot(self.spec).into_bytes();
        let (decay, keep, ttl) = (
            DECAY.to_string(),
            keep.to_string(),
            ttl_ms.max(1).to_string(),
        );
        let pairs: Vec<(String, [u8; crate::entity::id::ID_LEN])> = hot
            .iter()
            .map(|&(key, heat)| (heat.to_string(), RawId::new(T::KIND, key).to_bytes()))
            .collect();
        let mut args: Vec<&[u8]> = vec![decay.as_bytes(), keep.as_bytes(), ttl.as_bytes()];
        for (heat, id) in &pairs {
            args.push(heat.as_bytes());
            args.push(id);
        }
        (self.server)
            .eval::<usize>(Lane::Managed, &MERGE_HOT, &[&key], &args)
            .instrument(span)
            .await
    }

    /// The `n` hottest ids of the table's hot list, the hottest first, as
    /// keys; members that are not ids of this table are left out.
    pub(crate) async fn read_hot(&self, n: usize) -> Result<Vec<u64>, Failure> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let span = tracing::debug_span!("l2", op = "read_hot", table = self.spec.name(), n);
        let mut range = Cmd::new();
        range
            .arg("ZRANGE")
            .arg(keyspace::hot(self.spec))
            .arg(0)
            .arg(n - 1)
            .arg("REV");
        let members: Vec<Vec<u8>> = (self.server)
            .query(Lane::Managed, range)
            .instrument(span)
            .await?;
        Ok(members
            .iter()
            .filter_map(|member| RawId::parse(member).ok())
            .filter(|id| id.kind() == T::KIND)
            .map(|id| id.payload())
            .collect())
    }
}
