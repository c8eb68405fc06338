//! A typed two-tier near-cache, declared on entity types with one attribute.
//!
//! ```standalone_crate
//! use echo_cache::{near_cache, Cache, Id, Source};
//!
//! #[near_cache(kind = "GAM", ttl_ms = 600_000, coherence = "none", max_size = 50_000)]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Game {
//!     pub secret: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let cache = Cache::builder()
//!     .loader(|id: Id<Game>| async move {
//!         // The system of record: a database, a service…
//!         Ok::<_, std::io::Error>(Some(Game { secret: format!("the secret of {id}") }))
//!     })
//!     .build()?;
//!
//! let id = Id::<Game>::mint();
//! let game = Game::fetch(&cache, id).await?; // one flight: the loader runs
//! assert_eq!(game.source(), Source::Fill);
//! let game = cache.fetch(id).await?; // an L1 hit, in this thread
//! assert_eq!(game.source(), Source::Hit);
//! # Ok(())
//! # }
//! ```
//!
//! New here? The [guide] walks the codemojex workshop
//! (`cargo run --example codemojex`) in four moves: declare, hit, survive,
//! invalidate.
//!
//! # The laws
//!
//! 1. **Declared, not discovered.** A cache exists because a type declared
//!    it with [`#[near_cache(...)]`](near_cache); the declaration is checked
//!    at compile time and gathered at link time ([`declared`]). Fetching a
//!    type that declared no cache, or with an id of another kind, does not
//!    compile.
//! 2. **A hit never leaves the caller.** L1 is read in the caller's thread
//!    with no lock and no atomic read-modify-write but the `Arc`'s count
//!    (a purpose-built table whose removed rows are freed once no reader
//!    can hold them); values live decoded as `Arc<T>`; hit counters are
//!    striped per thread; expiry is read off a coarse clock. The one shared
//!    write is a row's "read" mark for eviction, stored only when unset,
//!    once per turn of the clock hand, and only once its table is three
//!    quarters full (before, a hit does not touch the mark).
//! 3. **One fill per herd.** Concurrent misses of one id share one flight,
//!    a detached task; its one answer (value or error) reaches every waiter.
//! 4. **A cohort never expires together.** Expiry is drawn from
//!    `ttl ± ttl·jitter`; a sweeper reclaims dead rows; a full table keeps
//!    the hot rows (a new row takes a colder one's place, or is served
//!    without being kept: [When a table is full](#when-a-table-is-full)),
//!    it never refuses a read.
//! 5. **Honest about itself.** Every table reports its counters
//!    ([`Cache::stats`], [`Cache::tables`]).
//!
//! # Declaring a cache
//!
//! | key | | meaning |
//! |---|---|---|
//! | `kind` | required | 3 uppercase ASCII letters: the kind of the table's ids, unique in the program |
//! | `ttl_ms` | required | time to live of a row, > 0 |
//! | `loader` | none | the function that reads a missing row from the system of record, like `loader = load_game` (see [Loaders](#loaders)) |
//! | `coherence` | `"none"` | `none`, `tracking`, `broadcast` or `durable` (see [`Coherence`]) |
//! | `placement` | `"table"` | on a cluster, the table's keys on its one slot (`table`) or each id on its own (`spread`, see [`Placement`]) |
//! | `jitter` | `0.1` | expiry is drawn from `ttl ± ttl·jitter`; `0.0..=0.5` |
//! | `max_size` | `100_000` | rows kept in L1 at most, > 0 |
//! | `eviction` | `"hot"` | what a table holding `max_size` rows does with a new one: `hot` (evict a colder row for it) or `none` (serve it without keeping it); see [When a table is full](#when-a-table-is-full) |
//! | `sweep_ms` | `1_000` | period of the sweeper, > 0 |
//! | `absent_ttl_ms` | `0` | how long the loader's "not found" is remembered (0: not at all) |
//! | `load_timeout_ms` | [`Builder::load_timeout`] (30 s) | the deadline of a flight, > 0 (see [`Error::LoadTimeout`]) |
//! | `lost_grace_ms` | `0` | how long L1 keeps serving, unverified, once the invalidation channel is lost; at most 60,000, not with `coherence = "none"` (see [A lost channel](#a-lost-channel)) |
//! | `stale_if_error_ms` | `0` | how long past its expiry a value may still answer while the loader fails or times out, at most a day, `86_400_000` (0: never; see [Serving stale](#serving-stale-while-the-store-fails)) |
//! | `refresh_ms` | none | a row read when less than this many milliseconds of its life remain is reloaded in the background; less than the shortest life of a row, `ttl − ttl·jitter` (see [Refresh-ahead](#refresh-ahead)) |
//! | `name` | the type's name in snake case | table name, `[a-z0-9_]+`, unique in the program |
//! | `crate` | `"::echo_cache"` | path of this crate, for re-exports |
//!
//! # Loaders
//!
//! A miss that neither L1 nor L2 answers goes to the table's loader, the
//! system of record: a function of an `Id<T>` whose future answers
//! `Result<Option<T>, E>`, where `E` converts into a [`BoxError`]
//! (`Ok(None)`: see [Absence](#absence)). An `async fn` does. A table gets
//! its loader in one of two ways:
//!
//! - **declared**: `#[near_cache(..., loader = load_game)]` names a
//!   function that needs nothing but the id; every cache of the program
//!   uses it;
//! - **given**: [`Builder::loader`] gives one to a cache, a closure over a
//!   connection pool, say. It overrides the declared one, in that cache
//!   only (a test can replace a declared loader this way).
//!
//! A value may come with its own TTL, shorter than the table's (a
//! session's remaining lifetime): a loader given with
//! [`Builder::loader_with_ttl`] answers `Ok(Some((value, ttl)))`, and the
//! value's L1 row and L2 key live no longer than `ttl`, on every node that
//! reads it ([`Cache::put_with_ttl`] for a written value,
//! [`Builder::loader_many_with_ttl`] for a batch loader's values).
//!
//! Every declared table is in every cache, and [`Builder::build`] refuses a
//! cache in which a table has neither ([`Error::MissingLoader`], naming the
//! tables): a table that cannot load is found at start-up, not at its
//! first miss. A table filled only by [`Cache::put`] says so with
//! [`Builder::without_loader`]; its other misses answer
//! [`Error::NoLoader`].
//!
//! ```standalone_crate
//! use echo_cache::{near_cache, Cache, Id, Source};
//!
//! #[near_cache(kind = "GAM", ttl_ms = 600_000, loader = load_game)]
//! #[derive(serde::Serialize, serde::Deserialize)]
//! pub struct Game {
//!     pub secret: String,
//! }
//!
//! async fn load_game(id: Id<Game>) -> Result<Option<Game>, std::io::Error> {
//!     Ok(Some(Game { secret: format!("the secret of {id}") })) // your database here
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let cache = Cache::builder().build()?; // games load with `load_game`
//! let game = Game::fetch(&cache, Id::mint()).await?;
//! assert_eq!(game.source(), Source::Fill);
//! # Ok(())
//! # }
//! ```
//!
//! # Absence
//!
//! A loader returns `Ok(None)` when the entity does not exist; the fetch
//! answers [`Error::NotFound`] (see [`Error::is_not_found`]), counted as
//! [`Stats::not_found`], not as an error. By default absence is not
//! remembered, so an entity created a moment later is found by the next
//! fetch. A table flooded with unknown ids can declare `absent_ttl_ms`:
//! "not found" is then kept in L1 for that long (jittered like `ttl_ms`),
//! sparing the system of record; a [`Cache::put`] or
//! [`Cache::invalidate`] of the id ends it at once.
//!
//! # Many ids at once
//!
//! [`Cache::fetch_many`] reads a list of ids in one call, answering each
//! in the order given: L1 in the caller's thread, one L2 round trip for
//! the rest (`MGET`; one per slot for a spread table on a cluster), and
//! one call of the table's batch loader ([`Builder::loader_many`], a
//! `WHERE id = ANY(…)` query, say) for what L2 did not have, or its
//! loader once per id. Each id keeps its own flight, so a batch and
//! single fetches of the same id share one load, and an invalidation
//! while a batch loads wins as it does for [`Cache::fetch`].
//! # Refresh-ahead
//!
//! A hot row that dies makes its next reader wait for a flight. A table
//! that declares `refresh_ms` reloads its rows before that: a hit on a row
//! with less than `refresh_ms` of its life left is answered from the row as
//! usual, and starts a refresh, a flight that no fetch waits for, on the
//! cache's runtime ([`Builder::runtime`], else the one the hit runs in).
//! So a row read at least once in its last `refresh_ms` never expires
//! under its readers, and the loader runs once per `ttl − refresh_ms` for
//! it, however many nodes' worth of readers it has on this node.
//!
//! - One refresh per id at a time: the first read to see a row due marks
//!   it (no lock, no clock read: the hit already holds both the row and
//!   the time), and a refresh joins no flight, nor starts one while one is
//!   under way. Rows not due cost the hit one compare.
//! - A refresh goes to the loader, not L2: the L2 frame was written when
//!   the row was, or earlier, and would not live longer. Its value is
//!   written to L2 as a fill is (a `tracking` table's fill does not replace
//!   a frame that is there, so its L2 keeps the older frame until it
//!   expires).
//! - It lands as a miss's flight does: an invalidation or a put of the id
//!   meanwhile wins, and the refreshed value is not installed.
//! - If it fails (a loader error or panic, a timeout), a read may start it
//!   again a quarter of `refresh_ms` later (at most 1 s later), until one
//!   lands or the row dies: a failing loader is called at most once a
//!   pause for each id read. A refresh told "not found" (with no
//!   `absent_ttl_ms`) is not tried again: the row dies at its expiry, and
//!   the next fetch misses as it would have.
//! - Rows whose whole life is within `refresh_ms` (a remembered absence, a
//!   value whose loader gave it a shorter TTL: see
//!   [`Builder::loader_with_ttl`]) are not refreshed.
//!
//! Counted in [`Stats::refreshes`]; each refresh's outcome is counted like a
//! flight's ([`Stats::fills`], [`Stats::load_errors`], ...).
//!
//! ```standalone_crate
//! use std::time::Duration;
//! use echo_cache::{near_cache, Cache, Clock, Id, Source};
//!
//! /// Lives a minute; read in its last 10 s, it is reloaded.
//! #[near_cache(kind = "SES", ttl_ms = 60_000, jitter = 0.0, refresh_ms = 10_000)]
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Session { user: String }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let clock = Clock::manual();
//! let cache = Cache::builder()
//!     .clock(clock.clone())
//!     .loader(|_: Id<Session>| async { Ok::<_, std::io::Error>(Some(Session { user: "ada".into() })) })
//!     .build()?;
//! let id = Id::<Session>::mint();
//! cache.fetch(id).await?; // a miss: filled, dies in 60 s
//!
//! clock.advance(Duration::from_secs(55));
//! let due = cache.fetch(id).await?; // 5 s left: a hit, and a refresh starts
//! assert_eq!(due.source(), Source::Hit);
//! while cache.stats::<Session>().in_flight > 0 {
//!     tokio::task::yield_now().await; // the refresh runs on the runtime
//! }
//!
//! clock.advance(Duration::from_secs(30)); // past the first row's expiry
//! assert_eq!(cache.fetch(id).await?.source(), Source::Hit);
//! assert_eq!(cache.stats::<Session>().refreshes, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # When a table is full
//!
//! A table holds `max_size` rows at most. Dead rows are reclaimed first;
//! past that, a new row's fate is the table's declared [`Eviction`]:
//!
//! - **`hot`** (the default): the hot rows stay. Each shard of L1 turns a
//!   clock hand over its rows; a hit marks its row read (a plain load, and
//!   a store only if the row was unmarked: no lock and no atomic
//!   read-modify-write on the hit). A new row's id is counted in a small
//!   frequency sketch (`TinyLFU`'s count-min, 4-bit counters, halved as it
//!   ages). An id asked for once lately goes on probation: a short
//!   first-in first-out queue per shard, whose oldest row, when it is
//!   full, leaves it and stays only if it was asked for again meanwhile
//!   (else it gives up its place to the new one). The queue lengthens
//!   while its rows prove hot (a hot set that moved on: the new one gets
//!   in on its first miss) and shortens to one row while they are
//!   one-offs (a scan, or the tail of a steady load, costs one row a
//!   shard). An id asked for more often competes for a place: the hand
//!   spares and unmarks marked rows and offers the first unmarked one (or
//!   the least asked-for of a few, a row's count halved for every two
//!   passes of the hand it was not read since: a hot set that moved on
//!   loses its place). The new row takes its place only if its id was
//!   asked for at least twice lately (three times against a row whose
//!   count was halved, or in a table with probation) and more often than
//!   the victim's plus one. Rows given up count as [`Stats::evictions`]; a
//!   new row that gets no place is served without being kept
//!   ([`Stats::full_skips`]). So a scan of
//!   one-off ids evicts next to nothing, a new hot set replaces an old one
//!   within a few reads of each id, and a loop a little larger than the
//!   table keeps most of it. Tables of fewer than about a thousand rows
//!   (64 a shard) have no probation: a new id gets a place on its second
//!   miss. An evicted value is dropped like any removed value: outside
//!   every lock, once no reader can hold it. The sketch costs 12 bytes,
//!   and the probation 1.6, per row of `max_size`, allocated when the
//!   table first fills; the hit ratios against moka and `quick_cache`
//!   are in `benches/hit_ratio.rs`.
//! - **`none`**: the seed's rule. A full table keeps what it has: new rows
//!   are served without being kept ([`Stats::full_skips`]) until rows die
//!   (a full table looks for dead rows at most every `sweep_ms / 8`) or
//!   are invalidated. For tables whose rows must live out their TTL.
//!
//! Either way [`Health::Full`] reports a table holding `max_size` rows.
//!
//! L1's own memory, values aside, is about 53 bytes a row in a full table
//! (its slot arrays: 32 bytes a slot, about 62.5 % of them claimed) and 66
//! once it evicts (the sketch and probation above, and the tombstones of
//! evicted rows); `benches/memory.rs` measures it beside `quick_cache`
//! (52 to 66). Below `max_size`, arrays are kept at most half claimed, so
//! that most hits read one slot: 64 to 128 bytes a row, never more than
//! the table's arrays once full.
//!
//! ```standalone_crate
//! use echo_cache::{near_cache, Cache, Id, Source};
//!
//! #[near_cache(kind = "DOC", ttl_ms = 600_000, max_size = 100)]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! struct Doc { n: u64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let cache = Cache::builder()
//!     .loader(|id: Id<Doc>| async move { Ok::<_, std::io::Error>(Some(Doc { n: id.payload() })) })
//!     .build()?;
//! // A hundred ids read once: the table is full of cold rows.
//! for n in 0..100 {
//!     cache.fetch(Id::<Doc>::from_payload(n)).await?;
//! }
//! // A hot id: its first miss is served without being kept, its second
//! // evicts a cold row, and then it is a hit.
//! let hot = Id::<Doc>::from_payload(1_000);
//! assert_eq!(cache.fetch(hot).await?.source(), Source::Fill);
//! assert_eq!(cache.fetch(hot).await?.source(), Source::Fill);
//! assert_eq!(cache.fetch(hot).await?.source(), Source::Hit);
//! let stats = cache.stats::<Doc>();
//! assert_eq!((stats.size, stats.full_skips, stats.evictions), (100, 1, 1));
//! # Ok(())
//! # }
//! ```
//!
//! # L2
//!
//! With [`Builder::l2`] every table sits in front of one shared Valkey or
//! Redis (≥ 7) server; without it the cache is L1-only. A miss's flight
//! reads L2 before the loader, and writes what the loader returns.
//!
//! - **Keys**: `ecc:{<table>}:<id>` ([`keyspace`]): the `{<table>}` hashtag
//!   keeps a table's keys on one cluster slot.
//! - **Frames**: `version (14 bytes) ++ schema (8 bytes) ++ expiry (8
//!   bytes) ++ body`, written through one server-side script with a
//!   jittered TTL (the server's clock expires L2). The expiry is the same
//!   TTL on the writer's wall clock: a row read from a frame lives no
//!   longer than the frame, so a value is not served past the TTL it was
//!   written with, on any node (give or take the nodes' clock skew). A
//!   fill mints its version before it reads the system
//!   of record, and [`Cache::put`] and [`Cache::invalidate`] mint one for
//!   the write: the script never lets an older version overwrite a newer
//!   frame or an invalidation's tombstone, in every coherence mode.
//! - **Codec**: [`Postcard`] unless [`Builder::codec`] says otherwise (a
//!   compact, maintained serde format with a stable 1.x wire format;
//!   bincode is unmaintained). The schema stamp folds the declared struct's
//!   fingerprint (computed by the attribute from its fields and `#[serde]`
//!   attributes) with the shape of its values, the codec's name and the
//!   frame layout: a frame written by a build whose value, codec or layout
//!   differs is never decoded; it is a miss that refills.
//! - **Schema stamp**: the shape is traced once when the table opens, by
//!   deserializing values from a probe that writes down what the type's
//!   `Deserialize` asks for, as a binary codec is asked: every struct,
//!   enum and newtype reached (nested ones too, behind an `Option`, in a
//!   `Vec` or a map), their serde names, their fields and variants by name
//!   and in order, tuple lengths and the kind of every primitive (`u32`
//!   is not `u64`). So a field added, removed, renamed, retyped or moved
//!   inside a nested type, or a variant added to a nested enum, changes
//!   the stamp. It does not see what no deserialization shows: the
//!   validation inside a `Deserialize` (a range, a format), defaults
//!   (`#[serde(default)]`), a `Serialize` changed alone, or a codec's own
//!   format beyond its [`name`](Codec::name). Some types cannot be traced:
//!   one read through `deserialize_any` (an untagged or internally tagged
//!   enum, `#[serde(flatten)]`, a `serde_json::Value`), one whose
//!   `Deserialize` refuses every value the probe offers (a primitive is
//!   offered a few, 0 or 1, an empty text, "0", a nil UUID, an epoch date
//!   and time, 16 zero bytes…) or checks more than a primitive, one that
//!   panics, or one that holds itself with no way out. Then the stamp is
//!   the fingerprint alone, which sees only the declared struct's own
//!   tokens (a change inside a nested type keeps it), and the table logs
//!   why when it opens (WARN).
//! - **Bad data**: a short frame, a malformed version, another schema, an
//!   undecodable body or a key of another Redis type is a miss that
//!   refills, counted in [`Stats::decode_errors`], with a rate-limited
//!   `tracing` warning. A key of another type is replaced by the first
//!   write that meets it (a fill, a `put`, an invalidation): the read that
//!   met it counted it, or else that write does.
//!   A value whose frame is over [`Builder::max_value_bytes`] (1 MiB unless
//!   set) is served and kept in L1, not written to L2
//!   ([`Stats::oversized`]).
//! - **Outages**: every L2 operation is bounded by [`Builder::l2_timeout`]
//!   (50 ms unless set). A server that is down, refusing or paused costs a
//!   fetch at most that before the loader answers; no error reaches the
//!   caller ([`Stats::l2_errors`]). After three failures in a row a breaker
//!   stops trying, except one probe per [`Builder::l2_probe_every`] (1 s
//!   unless set), and L2 is used again by itself when the server answers
//!   (at once if a coherence lane reaches it first). A fill's L2 write
//!   during an outage is dropped and counted
//!   ([`Stats::l2_writes_dropped`]); a [`Cache::put`] or
//!   [`Cache::invalidate`] whose L2 part or announcement fails is kept and
//!   delivered once the server is back (see [Guarantees](#guarantees)).
//! - **Cluster**: [`Builder::l2_cluster`] puts the tables behind a
//!   Valkey/Redis Cluster (see [Cluster](#cluster)).
//!
//! # Cluster
//!
//! [`Builder::l2_cluster`] takes the URLs of some nodes of a Valkey/Redis
//! Cluster; the cache finds the rest. Commands go through the `redis`
//! crate's cluster client (slots, `MOVED`/`ASK`, topology refresh), and an
//! operation the cluster keeps redirecting while a slot changes hands is
//! tried again, with pauses from 5 ms doubling to 50 ms, for up to 1 s: in
//! a `CLUSTER FAILOVER` on a loaded host the masters were seen to disagree
//! for 80 ms, and a write given up then would reach the other nodes only
//! with its late delivery. So during a failover or a reshard an L2
//! operation, a fetch's read included, may take up to that second rather
//! than [`Builder::l2_timeout`]. Every mode keeps its guarantees
//! through a reshard and a failover (the test suite runs the stale-read
//! checker of each mode through a live reshard, a `CLUSTER FAILOVER` and a
//! master killed, and writes on one node read on another while a slot is
//! held halfway migrated, to a master or to a new one, on Valkey 8 and
//! Redis 7: no caller error, no read staler than D = 100 ms; a write acknowledged while a killed master's slots had
//! no owner is kept and delivered to the promoted replica, and read
//! everywhere within the [outage bound](#guarantees)).
//!
//! - **Placement** ([`Placement`], declared per table): by default a
//!   table's keys carry its `{<table>}` hashtag, so they, its stream and
//!   its channel share one slot, on one master; the cost is that a table's
//!   load is on one master. A table declared `placement = "spread"` keys
//!   each id on its own slot (`ecc:<table>:<id>`), so a large, hot table
//!   spreads over the masters; its stream and channel stay on the table's
//!   slot, and a table-wide invalidation (a backlog past its limit) scans
//!   every master instead of one. Either way every operation is a
//!   single-key command or script on one node (a script the node lacks
//!   after a failover is loaded again), and every guarantee holds.
//! - **tracking**: each node's coherence link connects to every master and
//!   turns tracking on there (a key's owner pushes its invalidations); a
//!   tracking table's commands run on the connection to its slot's owner,
//!   so `NOLOOP` keeps the node's own writes from coming back. While the
//!   slot migrates, a command its owner redirects (`ASK`: the key moved
//!   already, or is new) goes once, after `ASKING`, on the link's
//!   connection to the target, which tracks it too; a `MOVED` one on the
//!   connection to the new owner: one more round trip, not a wait. A
//!   target that serves no slot yet (a new master) has no connection of
//!   the link: the first command redirected there makes the link start
//!   afresh (flush, bypass L1, reconnect) tracking it too.
//! - **broadcast**: sharded pub/sub. A write's message is `SPUBLISH`ed
//!   on the table's channel, in the table's slot, and every node holds a
//!   sharded subscription there (`SSUBSCRIBE`, through a cluster
//!   connection of its own that routes it to the slot's owner): a message
//!   reaches the subscribers without crossing the cluster bus (a classic
//!   `PUBLISH` goes to every node). When the slot moves (a reshard, a
//!   failover) the node starts afresh: flush, bypass, resubscribe on the
//!   new owner; as soon as the old owner ends the subscription, or its
//!   topology check (below) sees the move, whichever comes first (writers
//!   may publish to the new owner before the old one lets go).
//! - **durable**: a node reads each durable table's stream through its own
//!   blocking connection to the owner of the stream's slot.
//! - **Topology**: a link reads the topology every 50 ms. A reshard among
//!   the masters it tracks only re-routes its tracking tables (their L1
//!   stays; the keys a reshard moves are pushed as written, so their rows
//!   are refilled from L2); a master it does not know (a replica promoted)
//!   makes it start afresh: flush, bypass L1, reconnect. A durable lane
//!   reads the topology as often while its read blocks, and starts afresh
//!   when its stream's owner changes: after a failover, writes reach the
//!   new master at once, while Redis 7 redirects a read blocked on the old
//!   one only from its client cron (measured: 50–270 ms at the default
//!   `hz 10`). A failover delays a durable message by at most this 50 ms
//!   and a round trip.
//! - **Limits**: replication is asynchronous: a write a master
//!   acknowledged just before it died may be lost by the cluster. A node
//!   that applied its `broadcast` or `durable` message refuses an older L2
//!   frame for a minute (its memory of applied versions); a `tracking`
//!   table has no such memory and may read the older frame from L2 until
//!   its TTL.
//!
//! # Connecting to L2
//!
//! [`Builder::l2`] takes the server's URL; [`Builder::build`] only checks
//! it:
//!
//! | URL | connects |
//! |---|---|
//! | `redis://host:6379` | over TCP, database 0, no login |
//! | `redis://:password@host:6379` | as the `default` user (`requirepass`) |
//! | `redis://user:password@host:6379` | as an ACL user (`AUTH user password`) |
//! | `redis://host:6379/3` | to database 3 (`SELECT 3` on every connection) |
//! | `rediss://user:password@host:6380/3` | the same over TLS (the `tls` feature) |
//!
//! Percent-encode reserved characters (`@ : / ? #`) in the user and the
//! password; error messages mask the password. An ACL user needs the
//! cache's keys and channels and the commands it sends, e.g.
//! `ACL SETUSER app on >secret ~ecc:* &ecc:* +@all`.
//!
//! **TLS.** `rediss://` needs the cargo feature `tls` (rustls, through the
//! `redis` crate); without it `build` fails with [`Error::Config`]. The
//! server's certificate must verify against the system's root certificates
//! and name the URL's host; for a private CA, give its certificate to
//! `Builder::l2_tls_root` (PEM). Client certificates and `#insecure` (no
//! verification) are not offered. rustls needs a crypto provider: if the
//! process has none installed when a `rediss://` cache is built, the cache
//! installs rustls' `ring` provider (which the feature builds) as the
//! process default; to use another, install it before building the cache.
//!
//! **Lazy connection.** `build` sends nothing: the first L2 operation
//! connects, from the Tokio runtime, and a lost connection is remade by
//! itself. So a wrong password, an unknown user, a database the server does
//! not have, a certificate that does not verify or a server that is not
//! there yet does not fail `build` (it could not, without a round trip at
//! start-up, and a service that cannot start while its cache server is
//! away would turn an L2 outage into its own). Each is an L2 failure like
//! an outage: every fetch is answered by the loader within the L2 timeout
//! (its L2 read's and its fill's L2 write's time together: a write still
//! under way then goes on, and is dropped and counted if it fails),
//! no error reaches the caller, [`Stats::l2_errors`] and
//! [`Stats::l2_writes_dropped`] count it, and a `tracing` warning names the
//! cause. A refused login or TLS handshake counts as an outage for the
//! breaker ([`Health::L2Down`] in [`Cache::tables`]): one probe per
//! [`Builder::l2_probe_every`] until the server lets the cache in. Watch
//! those counters (or the health) to catch a bad credential.
//!
//! # Coherence
//!
//! A table declares how a write on one node reaches the others' L1
//! ([`Coherence`]): `none` (TTL only), `tracking` (the server pushes an
//! invalidation for every write by another client: RESP3 client tracking),
//! `broadcast` (each write publishes `<id>:<version>`, applied newer-wins,
//! at most once) or `durable` (the same messages through a stream per
//! table, read by every node's consumer group, at least once). In every
//! mode:
//!
//! - the writing node drops (or replaces) its own row before
//!   [`Cache::put`] or [`Cache::invalidate`] returns;
//! - a node's own fills never evict its own rows;
//! - versioned tables write L2 through one server-side script that never
//!   overwrites a newer frame; an invalidation leaves a tombstone of its
//!   version for [`Builder::tombstone_ttl`], so a slow fill that read the
//!   system of record before a write cannot land after it;
//! - a fill overtaken by an invalidation is installed nowhere;
//! - a node whose invalidation channel is lost (closed, killed, or silent
//!   past [`Builder::coherence_ping_every`]) flushes the table's L1 and
//!   reads around it ([`Health::Bypassing`]) until the channel is back,
//!   unless the table declares a grace (below).
//!
//! ## A lost channel
//!
//! Flush-and-bypass is the safe default: a node that cannot hear
//! invalidations serves nothing it cannot vouch for, at the cost of every
//! read going to L2 or the loader until the channel is back. A table that
//! prefers availability declares `lost_grace_ms` (at most a minute): its
//! L1 keeps serving, unverified ([`Health::Unverified`]), for at most that
//! long after the loss. If the channel is back within it, the rows kept are
//! verified before they are trusted again: a `durable` lane catches up on
//! what it missed (its stream keeps it); a `tracking` or `broadcast` table
//! reads the version of every row it kept from L2 (64 reads in flight) and
//! drops each row older than L2's frame or tombstone, or without one. If
//! the grace runs out first, L1 is flushed and bypassed as without one.
//!
//! The trade-off, in figures: reads on that node may be stale by up to the
//! grace (plus the verification's reads, one round trip per 64 rows, if the
//! channel came back), instead of D; in return a reconnection costs no
//! cold L1. Choose it for data a service would rather serve a little old
//! than reload all at once (a catalogue), never for revocations (sessions).
//!
//! ```standalone_crate
//! use echo_cache::near_cache;
//!
//! // Keep serving the catalogue for up to 2 s while the channel reconnects.
//! #[near_cache(kind = "ITM", ttl_ms = 600_000, coherence = "broadcast", lost_grace_ms = 2_000)]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Item {
//!     pub title: String,
//! }
//!
//! assert_eq!(<Item as echo_cache::Cached>::spec().lost_grace_ms(), 2_000);
//! ```
//!
//! Versions are snowflakes ([`Minter`]): across nodes their order is the
//! order of the nodes' wall clocks, so keep clocks synchronised; skew of
//! `s` ms can make newer-wins misjudge writes less than `s` ms apart.
//! They compare by payload: a version's kind is no part of it
//! ([`newer`]). [`Cache::invalidate_at`] takes a version of any kind and
//! writes and announces its payload under the table's kind; a node applies
//! an announced version of any well-formed kind.
//!
//! # Serving stale while the store fails
//!
//! A table that declares a grace (`stale_if_error_ms = N`, 0 by default:
//! off) keeps answering while its loader fails: when a flight's loader
//! returns an error or misses its deadline ([`Error::LoadTimeout`]), and
//! the id's value expired less than `N` ms ago, the fetch answers that
//! value, marked [`Source::Stale`] and counted ([`Stats::stale_served`]),
//! instead of the error. The rules:
//!
//! - **Where the value comes from.** L1 keeps a dead row for the grace
//!   (the sweeper reclaims it after; a full table takes dead rows first,
//!   grace or not), and L2 keeps a frame for its TTL plus the grace
//!   (`PX = ttl + grace`), past the logical expiry it carries (on the
//!   writer's wall clock: see [L2](#l2)). Past its expiry either is a miss, as without the
//!   grace: a hit never answers an expired row, and costs what it did. The
//!   newer of the two answers; a stale value is served, never installed.
//! - **Never after an invalidation.** An invalidation (this node's, another
//!   node's message or tracking push, a flush) removes dead rows like live
//!   ones, and leaves in L2 a tombstone that no older value gets past; a
//!   flight overtaken by an invalidation answers the error. A `none` table
//!   has no channel: another node's invalidation reaches it only as L2's
//!   tombstone, so its tombstones live at least as long as a row filled
//!   before them may answer, live or stale (the longest TTL, the flight
//!   deadline and the grace; more than [`Builder::tombstone_ttl`] if need
//!   be), and it serves an L1 value stale only once L2 has answered
//!   without a newer tombstone: a failed L2 read is no proof, and the
//!   loader's error answers. (A server that evicts keys under
//!   `maxmemory` may evict a tombstone: size it not to.) While a
//!   coherent table's invalidation channel is down (it bypasses L1, or
//!   keeps serving it unverified for its `lost_grace_ms`), it serves
//!   nothing stale: an invalidation may have been missed, and an expired
//!   value is the oldest it could serve.
//! - **The store is left alone.** After the loader fails on an id, flights
//!   of that id within the backoff (the grace, at most 1 s) answer the
//!   stale value without calling it ([`Stats::stale_backoffs`]); one flight
//!   per backoff tries the loader again. A flight with nothing stale to
//!   answer calls the loader as ever.
//! - **After the grace**, or for "not found", a panic, or a caller's own
//!   [`Cache::fetch_within`] timeout, the error answers as today.
//!
//! ```standalone_crate
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//! use echo_cache::{near_cache, Cache, Clock, Id, Source};
//!
//! /// Sessions live 10 minutes; for 30 s more an expired one still answers
//! /// if the store is down.
//! #[near_cache(kind = "SES", ttl_ms = 600_000, jitter = 0.0, stale_if_error_ms = 30_000)]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Session {
//!     pub user: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let down = Arc::new(AtomicBool::new(false));
//! let store = Arc::clone(&down);
//! let clock = Clock::manual();
//! let cache = Cache::builder()
//!     .clock(clock.clone())
//!     .loader(move |_: Id<Session>| {
//!         let down = store.load(Ordering::SeqCst);
//!         async move {
//!             if down {
//!                 return Err(std::io::Error::other("the store is down"));
//!             }
//!             Ok(Some(Session { user: "ada".into() }))
//!         }
//!     })
//!     .build()?;
//! let id = Id::<Session>::mint();
//! assert_eq!(cache.fetch(id).await?.source(), Source::Fill);
//!
//! down.store(true, Ordering::SeqCst);
//! clock.advance(Duration::from_secs(600)); // expired
//! let stale = cache.fetch(id).await?;
//! assert_eq!((stale.source(), stale.user.as_str()), (Source::Stale, "ada"));
//!
//! clock.advance(Duration::from_secs(30)); // the grace is over
//! assert!(cache.fetch(id).await.is_err());
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **Read your own invalidation.** Once [`Cache::invalidate`] or
//!   [`Cache::put`] returns on a node, every fetch of the id that starts
//!   afterwards on that node answers a value at least as new as the write:
//!   never one read before it, from L1, from L2, or from a flight it joins
//!   (a write detaches the flight under way; the next miss starts its
//!   own). On other nodes the same holds within the delivery bound **D**
//!   (100 ms in the test suite, well under a millisecond on loopback; see
//!   the coherence benchmark) for `tracking`, `broadcast` and `durable`
//!   tables. A `none` table carries nothing to other nodes' L1 (rows live
//!   their TTL), but its L2 obeys the write: a node that does not hold the
//!   row reads the new value.
//! - **No caller waits for ever, no id is blocked for ever.** A fetch
//!   waits at most its [`Builder::fetch_timeout`] (10 s); a flight has a
//!   deadline ([`Builder::load_timeout`], 30 s, or the table's
//!   `load_timeout_ms`) past which every waiter gets
//!   [`Error::LoadTimeout`] and the next fetch starts afresh.
//!   [`Cache::invalidate`], [`Cache::put`] and [`Cache::flush`] never wait
//!   on a loader.
//! - **Versions are unique across the processes sharing an L2**, with
//!   nothing configured: each process claims its node number on the server
//!   ([node numbers](Minter#node-numbers): 1,024 processes at most);
//!   [`Minter::set_node`] is the explicit override.
//! - **Convergence after an outage.** A write acknowledged while the server
//!   was away (paused, killed, unreachable) is kept by its node — the newest
//!   version per id, 100,000 ids per table, past which a table-wide flush
//!   is kept instead — and delivered in version order as soon as the
//!   server answers: the node probes it every 100 ms and its coherence
//!   lanes deliver before they trust L1 again. So after an outage ends, no
//!   node serves a value older than a write acknowledged during it once
//!   that delivery is done: within 0.4 s in the test suite's soak (a
//!   thousand ids written on two tasks, the server paused twice for 2 s
//!   and killed once; debug build), which holds it to 1.5 s. Meanwhile a
//!   node whose channel went silent for a second flushes and reads around
//!   its L1. A `durable` write whose stream append fails is reported
//!   ([`Error::NotDelivered`]) and kept all the same.
//! - **User code never runs under an internal lock.** A loader, a codec or
//!   a value's `Drop` may call back into the cache; a panic in any of them
//!   fails at most that flight (or is logged, for a `Drop`), and the clock,
//!   the sweeper and reclamation go on.
//!
//! # Metrics
//!
//! With the cargo feature `metrics` (off by default), every table's
//! counters ([`Stats`]) are published through the
//! [`metrics`](https://docs.rs/metrics/0.24) facade, so whatever exporter
//! the program installs reports them (Prometheus, for one: see the
//! codemojex example's `--metrics`).
//! A hit costs nothing more: the maintenance thread reads each table's
//! snapshot every second and publishes its totals (`Counter::absolute`),
//! and `Cache::publish_metrics` does it at once. Without a recorder
//! installed, publishing goes nowhere.
//!
//! Every metric is labelled `table` (the table's name) and, if the cache
//! was given one ([`Builder::node_name`]), `node`: caches that share a
//! process (two nodes in a test, say) must have node names, or their
//! totals overwrite each other's.
//!
//! | metric | kind | labels | counts ([`Stats`] field) |
//! |---|---|---|---|
//! | `echo_cache_fetches_total` | counter | `table`, `source` | every fetch once, by `source`: `hit` (L1: `hits`), `coalesced` (joined a flight: `coalesced`), or the outcome of the flight the fetch started: `l2` (`l2_hits`), `fill` (`fills`), `not_found`, `load_error` (`load_errors`), `load_timeout` (`load_timeouts`), `stale` (an expired value served while the loader fails: `stale_served`) |
//! | `echo_cache_flight_seconds` | histogram | `table`, `source` | how long each flight took, from its start to its landing (L2, then the loader), by its outcome (`l2`, `fill`, `not_found`, `load_error`, `load_timeout`, `stale`) |
//! | `echo_cache_rows` | gauge | `table` | rows in L1 (`size`) |
//! | `echo_cache_in_flight` | gauge | `table` | flights under way (`in_flight`) |
//! | `echo_cache_swept_total` | counter | `table` | `swept` |
//! | `echo_cache_sweeps_total` | counter | `table` | `sweeps` |
//! | `echo_cache_full_skips_total` | counter | `table` | `full_skips` |
//! | `echo_cache_evictions_total` | counter | `table` | `evictions` |
//! | `echo_cache_refreshes_total` | counter | `table` | `refreshes` |
//! | `echo_cache_invalidations_total` | counter | `table` | `invalidations` |
//! | `echo_cache_puts_total` | counter | `table` | `puts` |
//! | `echo_cache_l2_errors_total` | counter | `table` | `l2_errors` |
//! | `echo_cache_decode_errors_total` | counter | `table` | `decode_errors` |
//! | `echo_cache_oversized_total` | counter | `table` | `oversized` |
//! | `echo_cache_l2_writes_dropped_total` | counter | `table` | `l2_writes_dropped` |
//! | `echo_cache_announcements_dropped_total` | counter | `table` | `announcements_dropped` |
//! | `echo_cache_redeliveries_total` | counter | `table` | `redeliveries` |
//! | `echo_cache_malformed_messages_total` | counter | `table` | `malformed_messages` |
//! | `echo_cache_stale_backoffs_total` | counter | `table` | `stale_backoffs` |
//!
//! So the hit ratio of a table is `source="hit"` over the sum of
//! `echo_cache_fetches_total` (which is `hits + misses` less the flights
//! under way, plus the refreshes that ended: a refresh is no fetch, but
//! its outcome is counted like a flight's), and `source="fill"` is its
//! reads of the system of record, refreshes included.
//! The flight histogram is the latency of a miss as the fetch that started
//! the flight sees it (a coalesced miss waits less: it joined later); L1
//! hits are counted, not timed, since reading a clock would double the
//! cost of a hit.
//!
//! # Tracing
//!
//! The cache reports through [`tracing`](https://docs.rs/tracing), off
//! the hit path, with the `table` of each:
//!
//! - a `flight` span (DEBUG) around each flight, with its `id`, its
//!   `source` (`l2`, `fill`), `outcome` (`ok`, `not_found`, `load_error`,
//!   `load_timeout`, `crashed`), the `error` if any and its `duration`,
//!   recorded as it lands, with a `flight landed` event; the L2 read, the
//!   loader and the L2 write run inside it. With no subscriber listening
//!   at DEBUG, the span is skipped at its level check and the flight does
//!   not even read the clock (unless the `metrics` feature times it).
//!   The flights a [`Cache::fetch_many`] leads run together in a `flights`
//!   span (DEBUG, with the number of `ids`): their L2 read, loads and L2
//!   writes run inside it, and each id's `flight` span records its landing
//!   as above;
//! - an `l2` span (DEBUG) around each L2 operation (`op`: `read`,
//!   `read_many`, `write`, `drop`, `drop_older`) with its `outcome`;
//! - a `write` span (DEBUG) around each `put` and `invalidate` (`op`,
//!   `id`, `version`) with a `write delivered` (or kept for later)
//!   event, and an `invalidation applied` event (DEBUG) for each one
//!   received from another node;
//! - a table whose value's shape cannot be traced for its schema stamp
//!   (WARN, once when it opens: see [L2](crate#l2));
//! - state changes: the L2 breaker opening (WARN) and closing (INFO), a
//!   table's invalidation channel lost (WARN) and up (INFO), the writes
//!   kept during an outage delivered (INFO); and rate-limited warnings of
//!   L2 failures and bad frames (WARN).
//!
//! # Layout of the source
//!
//! Each layer is a folder, and imports only the layers below it, in the
//! order data flows: `entity/` (what a declared type is: kind, spec, id,
//! mint) → `l1/` (the rows, read lock-free: slots, arrays, the write side,
//! expiry, eviction, the sketch, the epochs) and `connections/` (clients,
//! the lane a command runs on, the topology, the breaker) → `l2/` (frames,
//! codec, scripts, the tier) and `coherence/` (the lanes that carry other
//! nodes' invalidations) → `table/` (one type's data path, in the files its
//! steps name: read, land, write, trust; and the policies only it uses:
//! flights, stale serving, grace, backlog) → `cache/` (the facade, fetch,
//! the builder, the directory, maintenance, the node's tasks). `report/`
//! holds what a cache tells of itself (stats, roster, metrics); `clock`,
//! `error`, `sync` and `keyspace` stand beside them.
#![deny(missing_docs)]
#![warn(clippy::pedantic)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(clippy::module_name_repetitions)]

mod cache;
mod clock;
mod coherence;
mod connections;
mod entity;
mod error;
pub mod guide;
pub mod keyspace;
mod l1;
mod l2;
mod report;
mod sync;
mod table;

pub use cache::directory::{declared, spec};
pub use cache::fetch::Fetch;
pub use cache::{Builder, Cache};
pub use clock::Clock;
pub use entity::id::{ID_LEN, Id, IdOf, RawId, newer};
pub use entity::kind::{IdError, Kind};
pub use entity::mint::{EPOCH_MS, MAX_NODE, Minter};
pub use entity::spec::{Cached, Coherence, Eviction, Placement, TableSpec};
pub use error::{BoxError, Error};
pub use l2::{Codec, Postcard};
pub use report::roster::{Health, TableInfo};
pub use report::stats::Stats;
pub use table::fetched::{Fetched, Source};

/// The attribute that declares a cache: see the
/// [crate docs](crate#declaring-a-cache) for its keys, and
/// [Loaders](crate#loaders) for `loader = ...`.
pub use echo_cache_derive::near_cache;

/// What the code generated by `#[near_cache]` uses. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::cache::directory::{DECLARATIONS, Declaration, SpecParts};
    pub use crate::table::{Declared, Loader, loader};
    pub use crate::{
        Cache, Cached, Coherence, Error, Eviction, Fetch, Id, IdOf, Kind, Placement, TableSpec,
    };
    pub use linkme;
}
