//! A tag in L2 (see `Cache::invalidate_tag`): two keys on the table's slot.
//!
//! - Its floor, `<prefix>#<tag>`: the version of the tag's newest
//!   invalidation, written through [`WRITE_IF_NEWER`] (never lowered). A
//!   frame of the tag older than it is never written again. Under the
//!   tracked prefix: on a `tracking` table its write is the push that
//!   tells every node.
//! - Its members, `ecc:{<table>}#<tag>`: a set of the ids written with the
//!   tag, added with each frame, living as long as the longest of them.
//!   Outside the tracked prefix: adding a member pushes nothing.
//!
//! An invalidation of the tag raises its floor, then reads its members and
//! replaces each frame older than the floor with a tombstone
//! ([`DROP_OLDER`], in batches): the cost is one step per id written with
//! the tag within a TTL. A write of the tag either added its member before
//! the floor was raised (then its frame is tombstoned) or sees the floor
//! (then it is refused: in the script, or by the check after a
//! `tracking` fill's `SET NX`).

use redis::Cmd;

use super::Tier;
use crate::connections::Failure;
use crate::entity::id::RawId;
use crate::entity::spec::Cached;
use crate::entity::tag::Tag;
use crate::keyspace;
use crate::l2::script::{DROP_OLDER, MARK_TAG, WRITE_IF_NEWER};

/// The most keys one [`DROP_OLDER`] is given.
const DROP_KEYS: usize = 512;

/// The keys of a tag: its floor and its members.
pub(super) struct TagKeys {
    pub(super) floor: Vec<u8>,
    pub(super) members: Vec<u8>,
}

impl<T: Cached> Tier<T> {
    /// The keys of `tag` in this table.
    pub(super) fn tag_keys(&self, tag: Tag) -> TagKeys {
        TagKeys {
            floor: keyspace::tag_floor(&self.prefix, tag).into_bytes(),
            members: keyspace::tag_members(&self.prefix, tag).into_bytes(),
        }
    }

    /// Invalidates every frame of `tag` older than `version`: raises the
    /// tag's floor, then tombstones its members' frames older than it.
    pub(crate) async fn drop_tag(&self, tag: Tag, version: &RawId) -> Result<(), Failure> {
        let keys = self.tag_keys(tag);
        let lane = self.lane(&keys.floor);
        let (version, ttl) = (version.to_bytes(), self.floor_ttl_ms().to_string());
        let args: [&[u8]; 2] = [&version, ttl.as_bytes()];
        (self.server)
            .eval::<i64>(lane, &WRITE_IF_NEWER, &[&keys.floor], &args)
            .await?;
        let mut members = Cmd::new();
        members.arg("SMEMBERS").arg(&keys.members);
        let ids: Vec<Vec<u8>> = self.server.query(lane, members).await?;
        let frames: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| [self.prefix.as_bytes(), id].concat())
            .collect();
        let ttl = self.tombstone_ttl_ms().to_string();
        let args: [&[u8]; 2] = [&version, ttl.as_bytes()];
        for batch in frames.chunks(DROP_KEYS) {
            let batch: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            (self.server)
                .eval::<i64>(lane, &DROP_OLDER, &batch, &args)
                .await?;
        }
        Ok(())
    }

    /// After a `tracking` fill's `SET NX` of `key` at `version` with
    /// `tag`: adds its member, and if the tag's floor is as new as the
    /// fill, tombstones the frame at the floor (a fill that read before
    /// the tag's invalidation never stays).
    pub(super) async fn mark_tag(
        &self,
        key: u64,
        tag: Tag,
        version: &RawId,
        ttl_ms: u64,
    ) -> Result<(), Failure> {
        let keys = self.tag_keys(tag);
        let id_key = self.key(key);
        let (id, ttl) = (
            RawId::new(T::KIND, key).to_bytes(),
            ttl_ms.max(1).to_string(),
        );
        let args: [&[u8]; 3] = [&id, ttl.as_bytes(), &version.to_bytes()];
        let lane = self.lane(&keys.floor);
        let floor: Option<Vec<u8>> = (self.server)
            .eval(lane, &MARK_TAG, &[&keys.members, &keys.floor], &args)
            .await?;
        if let Some(floor) = super::floor_of(floor.as_deref()) {
            let ttl = self.tombstone_ttl_ms().to_string();
            let args: [&[u8]; 2] = [&floor.to_bytes(), ttl.as_bytes()];
            (self.server)
                .eval::<i64>(lane, &WRITE_IF_NEWER, &[&id_key], &args)
                .await?;
        }
        Ok(())
    }
}
