//! Tag-wide invalidation (`Cache::invalidate_tag`): every row whose value
//! names `tag`, on every node, newer-wins.
//!
//! A row's tag is a function of its value (the declared `tag`), computed
//! where a value is installed or read, outside every lock. In L1 a tag's
//! rows are found by a scan of the table's rows (copied out shard by shard
//! under the epoch, no lock held while the tag function runs); nothing is
//! kept per row, so the hit path of every table is unchanged.
//!
//! The race with a fill is closed by the tag's newer-wins memory
//! ([`Applied::advance_tag`]): a fill checks it under its flight's lock,
//! as it installs; the invalidation raises it, then takes and releases
//! every flight lock in turn (a fill that checked before the raise has
//! installed by then), then scans. So a fill that read before either is
//! refused or is there for the scan to remove.
//!
//! [`Applied::advance_tag`]: super::applied::Applied::advance_tag

use std::sync::Arc;

use tracing::Instrument;

use super::Table;
use crate::entity::id::RawId;
use crate::entity::spec::Cached;
use crate::entity::tag::Tag;
use crate::error::Error;
use crate::l1::RemovalCause;
use crate::report::stats::Counters;

impl<T: Cached> Table<T> {
    /// The tag of `value` (none in an untagged table: no call at all).
    pub(super) fn tag_of(value: &T) -> Option<Tag> {
        if T::__TAGGED { value.__tag() } else { None }
    }

    /// Whether a value of `key` of tag `tag` at `version` is older than an
    /// invalidation applied to its id, its tag or the whole table.
    pub(super) fn overtaken(&self, key: u64, version: u64, tag: Option<Tag>) -> bool {
        self.applied.overtakes(key, version)
            || tag.is_some_and(|tag| self.applied.overtakes_tag(tag, version))
    }

    /// Invalidates every row of `tag` at `version`: this node's L1 first
    /// (no fill under way installs one, and no value of `tag` older than
    /// `version` is kept afterwards), then L2 (the tag's floor and
    /// members, `l2::tier::tag`), then the announcement to the other nodes
    /// (`tracking`: the floor's write is pushed). What fails is kept for
    /// delivery once the server is back, as a table-wide invalidation at
    /// `version`: the backlog keeps no tags, and the table's floor covers
    /// every tag.
    pub(crate) async fn invalidate_tag(&self, tag: Tag, version: &RawId) -> Result<(), Error> {
        let version = RawId::new(T::KIND, version.payload());
        let span = tracing::debug_span!(
            "write",
            op = "invalidate_tag",
            table = self.spec.name,
            %tag,
            %version,
        );
        async {
            self.drop_tag(tag, Some(version.payload()));
            let stored = match &self.tier {
                Some(tier) => tier.drop_tag(tag, &version).await.is_ok(),
                None => true,
            };
            let Some(announcer) = &self.announcer else {
                return Ok(());
            };
            let sent = announcer.tag(tag, &version).await;
            if !(stored && sent.is_ok()) {
                self.backlog.keep_flush(version.payload());
                self.backlog_kick.notify_one();
                tracing::debug!(
                    stored,
                    sent = sent.is_ok(),
                    "kept for delivery once L2 is back, as a table-wide invalidation"
                );
            }
            self.delivery(sent)
        }
        .instrument(span)
        .await
    }

    /// Drops this node's rows of `tag`: those older than `version`, which
    /// is remembered (newer-wins: a repeat or a late one is a no-op), or
    /// all of them without a version (a `tracking` push; then no fill
    /// under way installs). Whether it was applied.
    pub(crate) fn drop_tag(&self, tag: Tag, version: Option<u64>) -> bool {
        match version {
            Some(version) if !self.applied.advance_tag(tag, version) => return false,
            Some(_) => self.flights.settle(),
            None => self.flights.overtake_all(|| ()),
        }
        // Counted before the rows go, as in `apply`.
        Counters::bump(&self.counters.invalidations);
        // From 0: rows past their expiry too (a fallback while the loader
        // fails), not only the live ones.
        let mut shard = 0;
        while let Some(rows) = self.rows.values_of_shard(shard, 0) {
            for (key, value, row_version) in rows {
                let older = version.is_none_or(|version| row_version < version);
                if older && Self::tag_of(&value) == Some(tag) {
                    drop(value);
                    self.rows
                        .remove_older(key, version, RemovalCause::Invalidated);
                }
            }
            self.rows.collect_if_due();
            shard += 1;
        }
        true
    }

    /// Whether `value`, at `version`, may still be served as a fallback
    /// of `key` (no invalidation of its id, tag or table is newer).
    pub(super) fn fallback_holds(&self, key: u64, version: u64, value: &Arc<T>) -> bool {
        !self.overtaken(key, version, Self::tag_of(value))
    }
}
