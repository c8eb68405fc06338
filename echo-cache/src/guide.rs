//! The guide: the codemojex workshop, in four moves.
//!
//! codemojex is a guessing game: a player guesses the four emojis of a
//! game's secret, and every guess is scored by reading three entities —
//! the **game**, its **emoji set** and the player's **session** — from the
//! system of record. That is three reads per guess, on every node, for data
//! that almost never changes: the shape a near-cache is for. The workshop
//! runs it for real, over `SQLite`:
//!
//! ```sh
//! cargo run --example codemojex                     # L1 only, no server needed
//! cargo run --example codemojex -- --own-server     # starts valkey-server (or redis-server) itself
//! cargo run --example codemojex -- --l2 redis://127.0.0.1:6379   # or ECHO_CACHE_L2=...
//! cargo run --example codemojex -- --own-server --serve --tasks 64 --seconds 10
//! ```
//!
//! It prints each move below with the counters that prove it. This page
//! walks the same four moves with the smallest code that shows each.
//!
//! # Move 1 — declare
//!
//! A cache exists because a type declares it. The attribute is checked at
//! compile time (a bad kind, a zero TTL, an unknown key are spanned compile
//! errors) and every declaration of the program is gathered at link time:
//! [`declared`](crate::declared) lists them before any cache is built,
//! [`spec`](crate::spec()) finds one by its table name, and
//! [`Cache::tables`](crate::Cache::tables) shows a running cache's tables
//! with their counters and health. A table's loader is declared with it
//! (`loader = load_game`, a function of the id alone) or given to the
//! builder (a closure over a store), and
//! [`build`](crate::Builder::build) refuses a table that has neither
//! (see [Loaders](crate#loaders)).
//!
//! ```standalone_crate
//! use echo_cache::{near_cache, Cache, Error, Id};
//!
//! /// Immutable for the game's life: TTL alone keeps it fresh.
//! #[near_cache(kind = "GAM", name = "cm_games", ttl_ms = 600_000, coherence = "none", loader = load_game)]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Game {
//!     pub secret: String,
//! }
//!
//! async fn load_game(_id: Id<Game>) -> Result<Option<Game>, std::io::Error> {
//!     Ok(None) // SELECT secret FROM games WHERE id = ?
//! }
//!
//! /// Revocable: every node must hear of a change (see move 4).
//! #[near_cache(kind = "SES", name = "cm_sessions", ttl_ms = 86_400_000, coherence = "tracking")]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Session {
//!     pub player: String,
//!     pub revoked: bool,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let names: Vec<&str> = echo_cache::declared().iter().map(|spec| spec.name()).collect();
//! assert!(names.contains(&"cm_games") && names.contains(&"cm_sessions"));
//!
//! // A table by name, and the L2 key of its rows: its hashtag, then the id.
//! let spec = echo_cache::spec("cm_games").unwrap();
//! assert_eq!(echo_cache::keyspace::prefix(spec), "ecc:{cm_games}:");
//!
//! // Sessions have no loader yet: the cache is refused, naming the table.
//! let refused = Cache::builder().build().unwrap_err();
//! assert!(matches!(refused, Error::MissingLoader { .. }) && refused.to_string().contains("cm_sessions"));
//! let cache = Cache::builder()
//!     .loader(|_id: Id<Session>| async { Ok::<_, std::io::Error>(None) })
//!     .build()?;
//! let session = Id::<Session>::mint();
//! // Game::fetch(&cache, session); // does not compile: `Id<Session>` is not an id of `Game`
//! assert!(cache.tables().iter().all(|table| table.has_loader));
//! # let _ = session;
//! # Ok(())
//! # }
//! ```
//!
//! Ids are typed by kind ([`Id<Game>`](crate::Id) carries `GAM`): an id of
//! another kind, or a type that declared no cache, does not compile (the
//! suite's UI tests keep those messages readable).
//!
//! # Move 2 — hit
//!
//! The first fetch of an id misses: one flight reads L2 (if there is one)
//! and then the loader, and keeps the value in L1. Every later fetch is a
//! hit, answered in the caller's own thread with no lock and no await on
//! anything but the row. [`Fetched::source`](crate::Fetched::source) says
//! where each answer came from; [`Cache::stats`](crate::Cache::stats)
//! counts them per table.
//!
//! ```standalone_crate
//! use echo_cache::{near_cache, Cache, Id, Source};
//!
//! #[near_cache(kind = "GAM", ttl_ms = 600_000)]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Game {
//!     pub secret: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let cache = Cache::builder()
//!     .loader(|id: Id<Game>| async move {
//!         // SELECT secret FROM games WHERE id = ?
//!         Ok::<_, std::io::Error>(Some(Game { secret: format!("🍎🍐🍊🍋 of {id}") }))
//!     })
//!     .build()?;
//!
//! let game = Id::<Game>::mint();
//! let mut sources = Vec::new();
//! for _guess in 0..100 {
//!     sources.push(cache.fetch(game).await?.source());
//! }
//! assert_eq!(sources[0], Source::Fill);
//! assert!(sources[1..].iter().all(|source| *source == Source::Hit));
//! let stats = cache.stats::<Game>();
//! assert_eq!((stats.fills, stats.hits), (1, 99));
//! # Ok(())
//! # }
//! ```
//!
//! In the workshop, the scorer's loop shows per table how many guesses were
//! served from L1, from L2 and from the store, next to the store's own read
//! counter: after the first guess of a game, the store is not read again.
//! The same counters, with the `metrics` feature, go to whatever exporter
//! the program installs ([Metrics](crate#metrics)): `--serve --metrics
//! 127.0.0.1:9898` serves them on a Prometheus endpoint, a series per
//! table and node, e.g.
//! `echo_cache_fetches_total{table="cm_games",node="a",source="hit"}`.
//!
//! # Move 3 — survive
//!
//! Three things would hurt the store: a herd of misses on one cold id, a
//! cohort of rows that all expire in the same instant, and a table that
//! grows without bound.
//!
//! - **A herd is one flight.** Concurrent misses of one id join the flight
//!   under way ([`Stats::coalesced`](crate::Stats::coalesced)); the loader
//!   runs once and its one answer reaches every caller.
//! - **Expiry is jittered.** Each row's life is drawn from
//!   `ttl ± ttl·jitter` (10% unless declared), so rows filled together
//!   expire over a window, not at once. A [`Clock::manual`](crate::Clock::manual)
//!   clock moves time by hand, so a test (and the workshop) watches a cohort
//!   expire without sleeping.
//! - **A sweeper bounds memory**: it reclaims dead rows every `sweep_ms`,
//!   and a table holding `max_size` live rows keeps the hot ones: a new
//!   row evicts a colder row if its id is asked for more often
//!   ([`Stats::evictions`](crate::Stats::evictions)), or is served without
//!   being kept ([`Stats::full_skips`](crate::Stats::full_skips)): it never
//!   refuses a read.
//!
//! ```standalone_crate
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use echo_cache::{near_cache, Cache, Clock, Id};
//!
//! #[near_cache(kind = "GAM", ttl_ms = 600_000, jitter = 0.1)]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Game {
//!     pub secret: String,
//! }
//!
//! static STORE_READS: AtomicU32 = AtomicU32::new(0);
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! let clock = Clock::manual();
//! let cache = Cache::builder()
//!     .clock(clock.clone())
//!     .loader(|_id: Id<Game>| async {
//!         STORE_READS.fetch_add(1, Ordering::Relaxed);
//!         tokio::time::sleep(Duration::from_millis(20)).await; // a slow query
//!         Ok::<_, std::io::Error>(Some(Game { secret: "🍎🍐🍊🍋".into() }))
//!     })
//!     .build()?;
//!
//! // A herd of 1,000 guesses on a cold game: one store read.
//! let game = Id::<Game>::mint();
//! let herd: Vec<_> = (0..1_000)
//!     .map(|_| {
//!         let cache = cache.clone();
//!         tokio::spawn(async move { cache.fetch(game).await.map(|_| ()) })
//!     })
//!     .collect();
//! for guess in herd {
//!     guess.await.unwrap()?;
//! }
//! assert_eq!(STORE_READS.load(Ordering::Relaxed), 1);
//!
//! // Past ttl + jitter (660 s) the row is dead: the next guess reads afresh.
//! clock.advance(Duration::from_secs(661));
//! cache.fetch(game).await?;
//! assert_eq!(STORE_READS.load(Ordering::Relaxed), 2);
//! # Ok(())
//! # }
//! ```
//!
//! # Move 4 — invalidate
//!
//! A session can be revoked. The write goes to the system of record first,
//! then [`Cache::invalidate`](crate::Cache::invalidate) (or
//! [`Cache::put`](crate::Cache::put) with the new value):
//!
//! - on the writing node, every fetch that starts after `invalidate`
//!   returns reads the revoked session — never the old one;
//! - on the other nodes, the table's [coherence](crate::Coherence) carries
//!   it: `tracking` (the server pushes the invalidation), `broadcast` or
//!   `durable` (a versioned message, newer wins), within a delivery bound
//!   well under a millisecond on loopback (see the crate's
//!   [guarantees](crate#guarantees)); a `none` table's rows live out their
//!   TTL on the other nodes.
//!
//! ```standalone_crate,no_run
//! use echo_cache::{near_cache, Cache, Id};
//!
//! #[near_cache(kind = "SES", ttl_ms = 86_400_000, coherence = "tracking")]
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! pub struct Session {
//!     pub revoked: bool,
//! }
//!
//! async fn load_session(_id: Id<Session>) -> Result<Option<Session>, std::io::Error> {
//!     Ok(Some(Session { revoked: false })) // SELECT revoked FROM sessions WHERE id = ?
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), echo_cache::Error> {
//! // Two nodes (two processes in production), one server.
//! let a = Cache::builder().l2("redis://127.0.0.1:6379").loader(load_session).build()?;
//! let b = Cache::builder().l2("redis://127.0.0.1:6379").loader(load_session).build()?;
//!
//! let session = Id::<Session>::mint();
//! b.fetch(session).await?; // now in b's L1
//!
//! // UPDATE sessions SET revoked = 1 WHERE id = ?; then:
//! a.invalidate(session).await?;
//! // b's L1 row is dropped by the server's push; b's next fetch reads afresh.
//! # Ok(())
//! # }
//! ```
//!
//! **When the server goes away**, the program says what degrades instead
//! of pretending: L2 reads fail fast ([`Builder::l2_timeout`](crate::Builder::l2_timeout))
//! and fetches go on to the loader; a table whose invalidation channel is
//! lost flushes its L1 and reads around it
//! ([`Health::Bypassing`](crate::Health::Bypassing)), so a revoked session
//! is still refused — from the store, at the store's cost; a write made
//! meanwhile is kept by its node and delivered when the server is back.
//! The workshop stops its own server to show it.
//!
//! **As a fleet runs it**, the nodes are processes:
//! `cargo run --example codemojex -- --own-server --nodes 3` runs move 4 on
//! three processes of the program. Beside the revoked session, a
//! leaderboard declared `coherence = "broadcast"` and `herd = "fleet"`
//! shows the rest: read cold by every process at once, it is loaded once
//! for the fleet; a `put` on one process reaches the others as the message
//! `<id>:<version>`, after which they read that version; and
//! [`Cache::invalidate_all`](crate::Cache::invalidate_all) empties every
//! process's L1 of the table.
//!
//! # Where next
//!
//! - `examples/codemojex/` reads as a small service: `model.rs` (the
//!   declarations), `store.rs` (`SQLite`), `node.rs` (a cache and its
//!   loaders, with a counted fallback to the store when the cache errs),
//!   `moves.rs` (the narration), `fleet/` (move 4 on processes,
//!   `--nodes`), `serve.rs` (the `--serve` load generator) and
//!   `metrics.rs` (the `--metrics` endpoint).
//! - The [crate docs](crate) hold the reference: every declaration key,
//!   L2, the cluster, coherence and the guarantees with their figures.
