//! The server-side scripts: the one that makes L2 writes versioned, and
//! the merge of the fleet's hot list.
//!
//! The first compares versions inside the server, in one step, so no other write
//! can slip between the comparison and the write. A version is the first 14
//! bytes of a frame (a tombstone is only those 14 bytes); versions are
//! compared by their 11-byte payloads, which sort in mint order as strings.
//! A value that does not start with a well-formed version (garbage, an old
//! format, a key of another type) is overwritten.

use std::sync::LazyLock;

use redis::Script;

/// The Lua that reads the version of the value at `key`, or `nil`; and
/// whether the key is of another type (a list, a hash), which has none and
/// is overwritten.
const CURRENT_VERSION: &str = r"
local function current_version(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'string' then return nil, kind ~= 'none' end
  local value = redis.call('GET', key)
  if not value or #value < 14 then return nil end
  local version = string.sub(value, 1, 14)
  if not string.match(version, '^%u%u%u%w%w%w%w%w%w%w%w%w%w%w$') then return nil end
  return string.sub(version, 4)
end
";

/// `SET KEYS[1] ARGV[1] PX ARGV[2]` unless the value there already has a
/// version as new as `ARGV[1]`'s, or the table's floor (`KEYS[2]`, if
/// given: the version of its newest table-wide invalidation) is as new.
/// `ARGV[1]` is a frame (a fill, a put) or a tombstone (an invalidation): a
/// fill never overwrites a newer frame or the tombstone of a newer
/// invalidation, nor lands under the floor of a newer table-wide one, and a
/// late or repeated invalidation never erases a newer row. The floor itself
/// is written by this script too (`KEYS[1]` the floor key, one key): it
/// never goes back. A frame of a tag comes with its id in `ARGV[3]` and
/// the tag's floor and members as the last two keys: it is not written
/// under the tag's floor either, and once written its id is a member
/// (which lives at least as long as the frame). Returns 1 if written, 0 if
/// not, 2 if written over a key of another type.
pub(crate) static WRITE_IF_NEWER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{CURRENT_VERSION}
local current, other = current_version(KEYS[1])
local version = string.sub(ARGV[1], 4, 14)
if current and current >= version then return 0 end
local floors = #KEYS
if ARGV[3] then floors = #KEYS - 1 end
for i = 2, floors do
  local floor = current_version(KEYS[i])
  if floor and floor >= version then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] then
  local members = KEYS[#KEYS]
  redis.call('SADD', members, ARGV[3])
  if redis.call('PTTL', members) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', members, ARGV[2])
  end
end
if other then return 2 end
return 1"
    ))
});

/// Adds `ARGV[1]` (an id) to a tag's members (`KEYS[1]`), which then live
/// at least `ARGV[2]` ms more, and returns the tag's floor (`KEYS[2]`) if
/// it is as new as `ARGV[3]` (a version), else `nil`: a `tracking` fill's
/// step after its `SET NX`, which tombstones its frame if the floor is
/// returned.
pub(crate) static MARK_TAG: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{CURRENT_VERSION}
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local floor = current_version(KEYS[2])
if floor and floor >= string.sub(ARGV[3], 4, 14) then return redis.call('GET', KEYS[2]) end
return false"
    ))
});

/// For each key of `KEYS` whose value has a version older than `ARGV[1]`'s
/// (a tombstone), `SET key ARGV[1] PX ARGV[2]`: a table-wide invalidation
/// at `ARGV[1]`, batch by batch, for a table whose reads cannot check its
/// floor (spread over a cluster's slots). Keys that are not frames (a
/// stream, a key of another type) are left alone. Returns how many it
/// wrote.
pub(crate) static DROP_OLDER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{CURRENT_VERSION}
local written = 0
for _, key in ipairs(KEYS) do
  local current = current_version(key)
  if current and current < string.sub(ARGV[1], 4, 14) then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    written = written + 1
  end
end
return written"
    ))
});

/// Merges a node's hottest ids into a table's hot list (`KEYS[1]`, a
/// sorted set): first every score is multiplied by `ARGV[1]` (the decay,
/// so the list is a moving average of the merges of every node), then
/// each `ARGV[4..]` pair (heat, id) adds its heat to its id's score, then
/// all but the `ARGV[2]` highest scores are dropped and the list lives
/// `ARGV[3]` ms more. A key of another type there is replaced. Returns
/// how many ids the list holds.
pub(crate) static MERGE_HOT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local key = KEYS[1]
local kind = redis.call('TYPE', key)['ok']
if kind == 'zset' then
  redis.call('ZUNIONSTORE', key, 1, key, 'WEIGHTS', ARGV[1])
elseif kind ~= 'none' then
  redis.call('DEL', key)
end
for i = 4, #ARGV, 2 do
  redis.call('ZINCRBY', key, ARGV[i], ARGV[i + 1])
end
local keep = tonumber(ARGV[2])
redis.call('ZREMRANGEBYRANK', key, 0, -(keep + 1))
redis.call('PEXPIRE', key, ARGV[3])
return redis.call('ZCARD', key)",
    )
});

/// A `herd = "fleet"` table's read (see [`lease`](super::tier::lease)):
/// the frame at `KEYS[1]` and the table's floor (`KEYS[4]`, if given), as
/// `MGET` reads them; and, only if there is no live frame there (no key,
/// a tombstone, a frame older than the floor), the lease on the id
/// (`KEYS[2]`): `SET KEYS[2] ARGV[1] NX PX ARGV[2]`. Taking it clears the
/// id's wake list (`KEYS[3]`), so that a wake left by an earlier holder
/// does not wake this one's waiters. Returns `{frame, floor, lease}`:
/// `lease` is 0 (a frame: no lease asked), -1 (taken), or how many ms the
/// holder's lease has left.
pub(crate) static READ_OR_LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local frame = false
if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
  frame = redis.call('GET', KEYS[1])
end
local floor = false
if KEYS[4] and redis.call('TYPE', KEYS[4])['ok'] == 'string' then
  floor = redis.call('GET', KEYS[4])
end
local vacant = not frame or #frame == 14
if frame and floor and #floor >= 14 and string.sub(frame, 4, 14) < string.sub(floor, 4, 14) then
  vacant = true
end
if not vacant then
  return {frame, floor, 0}
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[3])
  return {frame, floor, -1}
end
local left = redis.call('PTTL', KEYS[2])
if left <= 0 then left = tonumber(ARGV[2]) end
return {frame, floor, left}",
    )
});

/// A lease's end (see [`lease`](super::tier::lease)): if the lease at
/// `KEYS[1]` is still `ARGV[1]`'s, drops it and wakes the id's waiters:
/// the wake list (`KEYS[2]`) gets one element, for `ARGV[2]` ms. Waiters
/// wait on the list with `BLMOVE` from it to itself, which leaves the
/// element for the next one. A lease that ran out and was taken by
/// another node is left to it (its waiters wait for its holder). Returns
/// 1 if it dropped the lease, 0 if not.
pub(crate) static RELEASE_LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('RPUSH', KEYS[2], '1')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1",
    )
});
