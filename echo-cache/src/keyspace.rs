//! The L2 keyspace: `ecc:{<table>}:<id>`, and the cluster slot of a key.
//!
//! The `{<table>}` hashtag puts every key of one table on one of the 16384
//! cluster slots, so multi-key scripts of one table never cross slots. The
//! `ecc:` prefix keeps the cache out of other keyspaces. Table names are
//! checked at compile time (`[a-z0-9_]+`) and ids are well-formed by
//! construction ([`RawId`] cannot hold a malformed id), so no malformed key
//! ever reaches the wire.

pub use crate::connections::topology::SLOTS;
use crate::entity::id::RawId;
use crate::entity::spec::{Placement, TableSpec};

/// The prefix every key of `table` starts with: `ecc:{<table>}:` (the
/// table's slot), or `ecc:<table>:` for a table whose ids spread over the
/// slots ([`Placement::Spread`]).
///
/// ```
/// # #[echo_cache::near_cache(kind = "GAM", ttl_ms = 1_000, name = "cm_games")]
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Game;
/// # #[echo_cache::near_cache(kind = "SES", ttl_ms = 1_000, name = "sessions", placement = "spread")]
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Session;
/// use echo_cache::{keyspace, Cached};
///
/// assert_eq!(keyspace::prefix(Game::spec()), "ecc:{cm_games}:");
/// assert_eq!(keyspace::prefix(Session::spec()), "ecc:sessions:");
/// ```
#[must_use]
pub fn prefix(table: &TableSpec) -> String {
    match table.placement() {
        Placement::Table => tagged(table),
        Placement::Spread => format!("ecc:{}:", table.name()),
    }
}

/// The key of `id` in `table`: `ecc:{<table>}:<id>` (or `ecc:<table>:<id>`,
/// spread).
///
/// ```
/// # #[echo_cache::near_cache(kind = "GAM", ttl_ms = 1_000, name = "cm_games")]
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Game;
/// use echo_cache::{keyspace, Cached, RawId};
///
/// let id: RawId = "GAM0000000001z".parse()?;
/// assert_eq!(keyspace::key(Game::spec(), &id), "ecc:{cm_games}:GAM0000000001z");
/// # Ok::<(), echo_cache::IdError>(())
/// ```
#[must_use]
pub fn key(table: &TableSpec, id: &RawId) -> String {
    format!("{}{id}", prefix(table))
}

/// The pub/sub channel of a `broadcast` table: `ecc:{<table>}:coh`, in the
/// table's slot whatever its placement.
#[must_use]
pub fn channel(table: &TableSpec) -> String {
    format!("{}coh", tagged(table))
}

/// The stream of a `durable` table: `ecc:{<table>}:log`, in the table's
/// slot whatever its placement.
#[must_use]
pub fn stream(table: &TableSpec) -> String {
    format!("{}log", tagged(table))
}

/// The fleet's list of the hot ids of a `warm` table:
/// `ecc:{<table>}:hot`, a sorted set in the table's slot whatever its
/// placement (see [Warm start](crate#warm-start)). Not an id key: no id is
/// three characters long.
///
/// ```
/// # #[echo_cache::near_cache(kind = "GAM", ttl_ms = 1_000, name = "cm_games", warm = "ready")]
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Game;
/// use echo_cache::{keyspace, Cached};
///
/// assert_eq!(keyspace::hot(Game::spec()), "ecc:{cm_games}:hot");
/// assert_eq!(keyspace::slot(b"ecc:{cm_games}:hot"), keyspace::table_slot(Game::spec()));
/// ```
#[must_use]
pub fn hot(table: &TableSpec) -> String {
    format!("{}{HOT}", tagged(table))
}

/// The suffixes of the lease and the wake list of an id of a `herd =
/// "fleet"` table, beside its frame key (see the wire spec, 6b).
pub(crate) const LEASE_SUFFIX: &[u8] = b":lease";
pub(crate) const WAKE_SUFFIX: &[u8] = b":wake";

/// What follows a table's tagged prefix in the key of its hot list.
pub(crate) const HOT: &str = "hot";

/// The table's slot: the slot of its `{<table>}` hashtag, where its
/// channel and stream live (and its keys, unless they spread).
#[must_use]
pub fn table_slot(table: &TableSpec) -> u16 {
    slot(tagged(table).as_bytes())
}

/// `ecc:{<table>}:`.
fn tagged(table: &TableSpec) -> String {
    format!("ecc:{{{}}}:", table.name())
}

/// The key by which a process claims node number `node` for the versions
/// it mints (see [node numbers](crate::Minter#node-numbers)): it holds the
/// process's token while the claim lives.
///
/// ```
/// assert_eq!(echo_cache::keyspace::node_claim(7), "ecc:node:7");
/// ```
#[must_use]
pub fn node_claim(node: u16) -> String {
    format!("ecc:node:{node}")
}

/// What follows a tracking table's prefix in the key a writer sets to flush
/// the table on every node (no id is `*`).
pub(crate) const EVERY_ID: &str = "*";

/// What follows a table's prefix in the key of a tag's floor, and its
/// hashtag in the key of the tag's members (see [`tag_floor`]).
pub(crate) const TAG: &str = "#";

/// The key of `tag`'s floor in the table of `prefix` (`ecc:{<table>}:`):
/// `ecc:{<table>}:#<tag>`, under the tracked prefix.
pub(crate) fn tag_floor(prefix: &str, tag: crate::Tag) -> String {
    format!("{prefix}{TAG}{tag}")
}

/// The key of `tag`'s members in the table of `prefix`:
/// `ecc:{<table>}#<tag>`, on the table's slot but outside its tracked
/// prefix.
pub(crate) fn tag_members(prefix: &str, tag: crate::Tag) -> String {
    format!("{}{TAG}{tag}", prefix.strip_suffix(':').unwrap_or(prefix))
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hashtag (or of the
/// whole key when it has none), modulo 16384, as `CLUSTER KEYSLOT` computes.
///
/// ```
/// use echo_cache::keyspace::slot;
///
/// assert_eq!(slot(b"ecc:{cm_games}:GAM0000000001z"), slot(b"cm_games"));
/// assert_eq!(slot(b"123456789"), 0x31C3 % 16_384);
/// ```
#[must_use]
pub fn slot(key: &[u8]) -> u16 {
    crc16_xmodem(hashtag(key)) % SLOTS
}

/// The part of `key` that is hashed: between the first `{` and the first
/// `}` after it, if that is not empty; else the whole key.
fn hashtag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// CRC-16/XMODEM: polynomial 0x1021, initial value 0, no reflection.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashtags_follow_the_cluster_spec() {
        assert_eq!(hashtag(b"ecc:{games}:X"), b"games");
        assert_eq!(hashtag(b"{}x"), b"{}x");
        assert_eq!(hashtag(b"a{b}{c}"), b"b");
        assert_eq!(hashtag(b"a{b"), b"a{b");
        assert_eq!(hashtag(b"no tag"), b"no tag");
    }
}
