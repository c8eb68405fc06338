//! Test fixtures of echo-cache (dev-only, not published): a real
//! `valkey-server` or `redis-server` on a free loopback port.
//!
//! [`RedisServer::start`] runs `valkey-server` from `PATH` if there is one,
//! else `redis-server`, on a free port of `127.0.0.1` (never another
//! interface), in a fresh temp dir, with persistence off (`--save ""`,
//! `--appendonly no`). It returns once the server answers a probe whose
//! `process_id` is the child's pid (so a server that lost the port race is
//! never mistaken for another test's server), within a bounded startup
//! timeout (5 s by default). Dropping the fixture resumes the server if it was
//! paused, kills it with `SIGKILL`, reaps it and removes the temp dir.
//!
//! Every test may start its own servers; many run at once, in one test
//! binary and across binaries, without clashing. A port is picked at random
//! below the kernel's ephemeral range (so no client connection takes it as
//! its source port) and reserved for the fixture's whole life with a lock
//! on a shared file in the temp dir, so no other fixture, in this process or
//! another, gets it even while this fixture's server is killed and awaits
//! its restart. A port that some other program takes anyway makes the
//! server exit with `Address already in use`, and the fixture retries on a
//! new port (or, for a restart, the same port until the startup timeout).
//!
//! Outages are one call each: [`kill`](RedisServer::kill) (`SIGKILL`, reaped,
//! the port refuses connections afterwards), [`pause`](RedisServer::pause)
//! (`SIGSTOP`: connections are accepted by the kernel but nothing answers)
//! and [`resume`](RedisServer::resume) (`SIGCONT`),
//! [`restart`](RedisServer::restart) (same port, same flags, empty dataset).
//! All of them take `&self`, so a test can share the fixture through an
//! `Arc` with the tasks it disturbs.
//!
//! A missing binary fails with a message naming the Debian package
//! (`apt-get install redis-server`, which `./scripts/test` does for you).
//! Set `ECHO_CACHE_TEST_SERVER=/path/to/valkey-server` to use a specific
//! binary instead of the one on `PATH`.
//!
//! # Example
//!
//! ```no_run
//! use echo_cache_testkit::RedisServer;
//!
//! # async fn demo() {
//! let server = RedisServer::start();
//! let mut conn = server.connection().await; // redis::aio::MultiplexedConnection
//! let _: () = redis::cmd("SET").arg("k").arg("v").query_async(&mut conn).await.unwrap();
//!
//! // Plain blocking helpers for setup and inspection:
//! let ttl: i64 = server.query(redis::cmd("PTTL").arg("k"));
//! assert_eq!(ttl, -1);
//! let slot: u16 = server.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg("ecc:{GAM}:x"));
//! # let _ = slot;
//!
//! server.pause(); // SIGSTOP: PINGs time out
//! assert!(server.ping(std::time::Duration::from_millis(50)).is_err());
//! server.resume(); // SIGCONT
//!
//! server.kill(); // SIGKILL: connection refused
//! server.restart(); // same port, no data
//! println!("{} {} on {}", server.binary().display(), server.version(), server.url());
//! # }
//! ```
//!
//! Server output (its log) goes to [`RedisServer::log_path`]; when a test
//! panics while a fixture is alive, the fixture prints the log's tail to
//! stderr as it drops, then the panic's message again (a CI log that keeps
//! only the output's tail shows both).
//!
//! # Cluster
//!
//! [`RedisCluster::start`]`(masters, replicas_per_master)` runs a real
//! cluster on loopback: one [`RedisServer`] a node (`--cluster-enabled yes`,
//! its own `nodes.conf` in its temp dir, a 1 s `cluster-node-timeout` so
//! failovers are quick), the slots shared evenly by the masters, and returns
//! once every node reports `cluster_state:ok` and all agree on the roles and
//! slot owners (about 2 s: a master never reports ok sooner after its own
//! start). Roles and owners are asked of the cluster each time, so they
//! follow failovers and reshards. Each operation blocks until the cluster
//! agrees again, bounded by [`DEFAULT_CONVERGE_TIMEOUT`], and panics naming
//! what did not converge, with each node's `CLUSTER NODES`. Dropping the
//! fixture kills every node.
//!
//! ```no_run
//! use echo_cache_testkit::RedisCluster;
//!
//! let cluster = RedisCluster::start(3, 1); // 3 masters, 1 replica each
//! let seeds = cluster.urls(); // redis://127.0.0.1:<port> of every node
//! # let _ = seeds;
//! let slot = cluster.slot_of("ecc:{GAM}:42"); // CLUSTER KEYSLOT
//! let owner = cluster.node_of_slot(slot); // a &ClusterNode: a RedisServer and its id
//! let () = owner.query(redis::cmd("SET").arg("ecc:{GAM}:42").arg("v"));
//!
//! // A live reshard of one slot (run it on a blocking thread under load),
//! // or step by step, to act while its keys are split and ASK is live:
//! let other = *cluster.masters().iter().find(|m| m.id() != owner.id()).unwrap();
//! let migration = cluster.begin_migration(slot, other);
//! cluster.migrate_keys(&migration, 10);
//! cluster.finish_migration(migration);
//! cluster.migrate_slot(slot, owner); // all three steps at once
//!
//! // Failover: by hand, or the cluster's own after a master dies.
//! let replica = cluster.replicas_of(owner)[0];
//! cluster.failover(replica); // CLUSTER FAILOVER; returns once all agree
//! replica.kill();
//! let heir = cluster.wait_for_failover(replica); // `owner` again
//! replica.restart(); // rejoins, as a replica of `heir`
//! cluster.wait_ok();
//! # let _ = heir;
//! ```
//!
//! [`RedisCluster::builder`] sets another node timeout, converge timeout or
//! extra flags of every node (e.g. `--cluster-require-full-coverage no`, so
//! the other masters keep serving while one is down).
//!
//! # Notes
//!
//! - The servers run with `--protected-mode yes`, `--daemonize no`, and on
//!   7.0+ with `--enable-debug-command local` (so `DEBUG SLEEP` works for
//!   slow-server tests). Extra flags go through [`RedisServer::builder`].
//! - `CLUSTER KEYSLOT` needs `--cluster-enabled yes` on Redis 7.0 (it
//!   answers "cluster support disabled" otherwise); with that flag the
//!   fixture also reserves the cluster bus port (`port + 10000`), as for
//!   every node of a [`RedisCluster`].
//! - Start, restart, kill, pause and [`query`](RedisServer::query) block the
//!   calling thread (milliseconds; bounded by the startup timeout or
//!   [`CLIENT_TIMEOUT`]); calling them from an async test is fine.
//! - Keep fixtures in test scopes, not in `static`s: statics are never
//!   dropped, so their server would outlive the test binary. A start costs a
//!   few milliseconds.
//! - The port reservations live in `$TMPDIR/echo-cache-testkit-<uid>.ports`,
//!   an empty file that stays (deleting it while fixtures run would let two
//!   of them lock the same port through different files).

#![deny(missing_docs)]

use std::time::Duration;

mod binary;
mod cluster;
mod error;
mod last_panic;
mod launch;
mod port;
mod process;
mod server;

pub use cluster::{
    ClusterNode, DEFAULT_CONVERGE_TIMEOUT, DEFAULT_NODE_TIMEOUT, RedisCluster, RedisClusterBuilder,
    SLOT_COUNT, SlotMigration,
};
pub use error::{Error, ErrorKind};
pub use server::{RedisServer, RedisServerBuilder};

/// The environment variable that names a server binary to use instead of the
/// `valkey-server` / `redis-server` found on `PATH`.
pub const SERVER_ENV: &str = "ECHO_CACHE_TEST_SERVER";

/// How long [`RedisServer::start`] and [`RedisServer::restart`] wait for the
/// server to answer, unless [`RedisServerBuilder::startup_timeout`] says
/// otherwise.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Timeout of connects and replies of the client helpers
/// ([`RedisServer::connection`], [`RedisServer::blocking_connection`],
/// [`RedisServer::query`]).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Interval of the readiness and state polls.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
