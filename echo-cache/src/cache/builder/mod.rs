//! Building a cache: the [`Builder`]'s settings of the node (L2, clock,
//! timeouts; what each table gets is in [`tables`], its limits in
//! [`limits`]), checked, and
//! `build`, which opens one table per declaration (or per table named)
//! and starts the node's tasks and maintenance thread.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

use super::directory::DECLARATIONS;
use super::maintenance::spawn_maintenance;
use super::tasks::Tasks;
use super::{Cache, Inner, Place, directory};
use crate::clock::Clock;
use crate::coherence::link;
use crate::connections::{Address, Server};
use crate::entity::limits::Limits;
use crate::entity::spec::TableSpec;
use crate::error::Error;
use crate::report::roster::Readiness;
use tables::opens;

mod limits;
mod tables;
use crate::table::Shared;

/// Builds a [`Cache`]: loaders, clock, timeouts.
pub struct Builder {
    /// The tables [`open`](Self::open) names, by their spec's address;
    /// empty: every declared table.
    open: HashSet<usize>,
    /// The spec of every table given a loader, batch loader, codec or
    /// limits, by its address: to tell one of a table left closed.
    configured: HashMap<usize, &'static TableSpec>,
    /// The limits given to tables ([`limits`](Self::limits)), in the
    /// order given.
    limits: Vec<(limits::Limited, Limits)>,
    loaders: HashMap<TypeId, Box<dyn Any + Send>>,
    /// Batch loaders, by `TypeId`, each a `BatchLoader<T>`.
    batch_loaders: HashMap<TypeId, Box<dyn Any + Send>>,
    codecs: HashMap<TypeId, Box<dyn Any + Send>>,
    /// Removal listeners, by `TypeId`, each a `Listener<T>`.
    listeners: HashMap<TypeId, Box<dyn Any + Send>>,
    clock: Clock,
    fetch_timeout: Option<Duration>,
    load_timeout: Duration,
    runtime: Option<Handle>,
    l2: Option<Address>,
    /// Root certificates (PEM) a `rediss://` L2 trusts instead of the
    /// system's; set only with the `tls` feature.
    l2_tls_root: Option<Vec<u8>>,
    l2_timeout: Duration,
    l2_probe_every: Duration,
    max_value_bytes: usize,
    tombstone_ttl: Duration,
    coherence_ping_every: Duration,
    node_name: Option<String>,
    backlog_limit: usize,
    hot_publish_every: Duration,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            open: HashSet::new(),
            configured: HashMap::new(),
            limits: Vec::new(),
            loaders: HashMap::new(),
            batch_loaders: HashMap::new(),
            codecs: HashMap::new(),
            listeners: HashMap::new(),
            clock: Clock::system(),
            fetch_timeout: Some(Builder::DEFAULT_FETCH_TIMEOUT),
            load_timeout: Builder::DEFAULT_LOAD_TIMEOUT,
            runtime: None,
            l2: None,
            l2_tls_root: None,
            l2_timeout: Builder::DEFAULT_L2_TIMEOUT,
            l2_probe_every: Builder::DEFAULT_L2_PROBE_EVERY,
            max_value_bytes: Builder::DEFAULT_MAX_VALUE_BYTES,
            tombstone_ttl: Builder::DEFAULT_TOMBSTONE_TTL,
            coherence_ping_every: Builder::DEFAULT_COHERENCE_PING_EVERY,
            node_name: None,
            backlog_limit: Builder::DEFAULT_BACKLOG_LIMIT,
            hot_publish_every: Builder::DEFAULT_HOT_PUBLISH_EVERY,
        }
    }
}

impl Builder {
    /// How long a fetch waits for its flight unless told otherwise.
    pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
    /// The deadline of a flight unless told otherwise (here or by the
    /// table's `load_timeout_ms`).
    pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(30);
    /// How long one L2 operation may take before the fetch goes on without
    /// it, unless told otherwise.
    pub const DEFAULT_L2_TIMEOUT: Duration = Duration::from_millis(50);
    /// How often a server that stopped answering is probed, unless told
    /// otherwise.
    pub const DEFAULT_L2_PROBE_EVERY: Duration = Duration::from_secs(1);
    /// The largest L2 frame written, unless told otherwise: 1 MiB.
    pub const DEFAULT_MAX_VALUE_BYTES: usize = 1 << 20;
    /// How long the L2 tombstone of an invalidation lives, unless told
    /// otherwise.
    pub const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(60);

    /// How often each `warm` table merges this node's hottest ids into
    /// the fleet's hot list in L2, unless told otherwise.
    pub const DEFAULT_HOT_PUBLISH_EVERY: Duration = Duration::from_secs(10);

    /// How many ids a table keeps for delivery while the server is away,
    /// unless told otherwise.
    pub const DEFAULT_BACKLOG_LIMIT: usize = 100_000;

    /// How often the coherence link checks that its connection is alive,
    /// unless told otherwise; a PING unanswered for as long loses the link.
    pub const DEFAULT_COHERENCE_PING_EVERY: Duration = Duration::from_millis(500);

    /// How often the coherence link of `tracking` and `broadcast` tables
    /// PINGs the server, and how long it waits for the PONG
    /// ([`DEFAULT_COHERENCE_PING_EVERY`](Self::DEFAULT_COHERENCE_PING_EVERY)
    /// unless set). A link that misses the deadline is lost: its tables'
    /// L1 is flushed and bypassed until it is back. This bounds how long a
    /// half-open connection can hide missed invalidations.
    #[must_use]
    pub fn coherence_ping_every(mut self, every: Duration) -> Builder {
        self.coherence_ping_every = every;
        self
    }

    /// How many ids each table keeps while the L2 server is away
    /// ([`DEFAULT_BACKLOG_LIMIT`](Self::DEFAULT_BACKLOG_LIMIT) unless set):
    /// a `put` or `invalidate` whose L2 part or announcement the server did
    /// not take is kept (the newest version per id, at most 40 bytes an id)
    /// and delivered, in version order, once the server is back. Past the
    /// limit, a table keeps one table-wide invalidation instead: when it is
    /// delivered every node flushes the table's L1, and every L2 frame of
    /// the table older than it is replaced by a tombstone.
    #[must_use]
    pub fn backlog_limit(mut self, ids: usize) -> Builder {
        self.backlog_limit = ids;
        self
    }

    /// How often each table declared `warm` merges this node's hottest ids
    /// into the fleet's hot list in L2
    /// ([`DEFAULT_HOT_PUBLISH_EVERY`](Self::DEFAULT_HOT_PUBLISH_EVERY)
    /// unless set; see [Warm start](crate#warm-start)). One script of up
    /// to `warm_ids` ids per table each time; the first merge is one
    /// period after the node's own warm start. [`build`](Self::build)
    /// refuses a zero period with [`Error::Config`].
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::{Cache, Error};
    ///
    /// let refused = Cache::builder().hot_publish_every(Duration::ZERO).build();
    /// assert!(matches!(refused, Err(Error::Config(why)) if why.contains("hot_publish_every")));
    /// let cache = Cache::builder().hot_publish_every(Duration::from_secs(2)).build()?;
    /// # Ok::<(), Error>(())
    /// ```
    #[must_use]
    pub fn hot_publish_every(mut self, every: Duration) -> Builder {
        self.hot_publish_every = every;
        self
    }

    /// The name of this node, stable across its restarts: `durable` tables
    /// read their invalidation streams through a consumer group of this name,
    /// so a node that was away catches up on what it missed. Without one, a
    /// name unique to this process is made up, and a restarted node starts
    /// from the newest messages.
    ///
    /// A node name is 1 to 64 ASCII letters, digits, `-`, `_` and `.` (no
    /// spaces: it names a consumer group and a client). [`build`](Self::build)
    /// refuses any other with [`Error::Config`], naming what is wrong.
    ///
    /// ```standalone_crate
    /// use echo_cache::{Cache, Error};
    ///
    /// let refused = Cache::builder().node_name("web 1").build();
    /// assert!(matches!(refused, Err(Error::Config(why)) if why.contains("' ' is not allowed")));
    /// assert!(Cache::builder().node_name("web-1.eu_west").build().is_ok());
    /// ```
    #[must_use]
    pub fn node_name(mut self, name: impl Into<String>) -> Builder {
        self.node_name = Some(name.into());
        self
    }

    /// How long the L2 tombstone of an invalidation of a versioned table
    /// lives ([`DEFAULT_TOMBSTONE_TTL`](Self::DEFAULT_TOMBSTONE_TTL) unless
    /// set). While it lives, no fill older than the invalidation can write
    /// L2; a fill whose version is older than half of it does not write L2
    /// at all. Set it well above your slowest loader.
    #[must_use]
    pub fn tombstone_ttl(mut self, ttl: Duration) -> Builder {
        self.tombstone_ttl = ttl;
        self
    }

    /// Puts every table behind the Valkey/Redis server at `url`:
    /// `redis://[[user]:password@]host[:port][/db]`, or `rediss://…` for
    /// TLS (with the `tls` feature). See the [crate docs](crate#l2).
    ///
    /// - `user:password` logs in as an ACL user (`AUTH user password`);
    ///   `:password@` alone uses the `default` user (`requirepass`).
    ///   Percent-encode reserved characters in either.
    /// - `/db` selects a database (`SELECT db`, default 0) on every
    ///   connection.
    /// - `rediss://` verifies the server's certificate against the system's
    ///   root certificates, or those given to `l2_tls_root` (`tls` feature).
    ///
    /// [`build`](Self::build) only checks the URL: the connection is made on
    /// first use and remade by itself after a failure. A server that is
    /// down, refuses the credentials or the database, or fails the TLS
    /// handshake is an outage like any other: fetches go to the loader, no
    /// error reaches the caller, and [`Stats::l2_errors`](crate::Stats::l2_errors) counts it (see the
    /// [crate docs](crate#l2)). Without an L2 address the cache runs
    /// L1-only.
    #[must_use]
    pub fn l2(mut self, url: impl Into<String>) -> Builder {
        self.l2 = Some(Address::Server(url.into()));
        self
    }

    /// Puts every table behind the Valkey/Redis Cluster that `seeds`
    /// belong to: the URLs of some of its nodes (one is enough; more let the
    /// cache start while one is down), each in the form [`l2`](Self::l2)
    /// takes, sharing the scheme and the credentials. The cache discovers
    /// the other nodes, routes each command to the owner of its slot, and
    /// follows the cluster through resharding and failover (the `redis`
    /// crate's cluster client).
    ///
    /// A table keeps its keys on one slot (`ecc:{<table>}:<id>`), so every
    /// operation stays on one node, and every coherence mode works on a
    /// cluster (see the [crate docs](crate#l2)).
    ///
    /// ```standalone_crate
    /// use echo_cache::Cache;
    ///
    /// let cache = Cache::builder()
    ///     .l2_cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"])
    ///     .build()?;
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    #[must_use]
    pub fn l2_cluster<S: Into<String>>(mut self, seeds: impl IntoIterator<Item = S>) -> Builder {
        self.l2 = Some(Address::Cluster(
            seeds.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// Trusts the root certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks), instead of the system's, to verify a
    /// `rediss://` L2 server: for a server with a private CA. Needs the
    /// `tls` feature; [`build`](Self::build) fails with [`Error::Config`] if
    /// `pem` holds no certificate or the L2 address is not `rediss://`.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn l2_tls_root(mut self, pem: impl Into<Vec<u8>>) -> Builder {
        self.l2_tls_root = Some(pem.into());
        self
    }

    /// How long one L2 operation may take before a fetch goes on without
    /// it ([`DEFAULT_L2_TIMEOUT`](Self::DEFAULT_L2_TIMEOUT) unless set).
    /// It bounds each try: on a cluster, an operation redirected while a
    /// slot changes hands is tried again for up to 1 s (see
    /// [Cluster](crate#cluster)).
    #[must_use]
    pub fn l2_timeout(mut self, timeout: Duration) -> Builder {
        self.l2_timeout = timeout;
        self
    }

    /// How often a server that stopped answering is probed
    /// ([`DEFAULT_L2_PROBE_EVERY`](Self::DEFAULT_L2_PROBE_EVERY) unless set).
    #[must_use]
    pub fn l2_probe_every(mut self, every: Duration) -> Builder {
        self.l2_probe_every = every;
        self
    }

    /// The largest frame written to L2
    /// ([`DEFAULT_MAX_VALUE_BYTES`](Self::DEFAULT_MAX_VALUE_BYTES) unless
    /// set). Larger values are served and kept in L1 only, and counted
    /// ([`Stats::oversized`](crate::Stats::oversized)).
    #[must_use]
    pub fn max_value_bytes(mut self, bytes: usize) -> Builder {
        self.max_value_bytes = bytes;
        self
    }

    /// The clock rows expire by; [`Clock::manual`] in tests.
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> Builder {
        self.clock = clock;
        self
    }

    /// How long a fetch waits for its flight before it gives up with
    /// [`Error::Timeout`] ([`DEFAULT_FETCH_TIMEOUT`](Self::DEFAULT_FETCH_TIMEOUT)
    /// unless set; `None`: as long as the flight takes). The flight itself
    /// goes on. Timeouts need a Tokio runtime with its timer enabled.
    #[must_use]
    pub fn fetch_timeout(mut self, timeout: Option<Duration>) -> Builder {
        self.fetch_timeout = timeout;
        self
    }

    /// The deadline of every flight, for tables that do not declare their
    /// own `load_timeout_ms`
    /// ([`DEFAULT_LOAD_TIMEOUT`](Self::DEFAULT_LOAD_TIMEOUT) unless set).
    ///
    /// A flight (the L2 read, the loader, the L2 write) that has not
    /// answered by then is abandoned: every waiter gets
    /// [`Error::LoadTimeout`], the flight leaves the registry (the next
    /// fetch of the id starts afresh), its loader future is dropped, and a
    /// late result installs nowhere. So a loader that hangs (a database
    /// call without a timeout) costs each herd of its id at most this, and
    /// never blocks the id for good. Keep it above the
    /// [`fetch_timeout`](Self::fetch_timeout) if callers should see their
    /// own timeout first, and below half the
    /// [`tombstone_ttl`](Self::tombstone_ttl).
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::Cache;
    ///
    /// let cache = Cache::builder()
    ///     .load_timeout(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    #[must_use]
    pub fn load_timeout(mut self, deadline: Duration) -> Builder {
        self.load_timeout = deadline;
        self
    }

    /// The runtime flights run on when a fetch comes from outside any Tokio
    /// runtime. By default, the runtime `build` is called in, if any.
    #[must_use]
    pub fn runtime(mut self, runtime: Handle) -> Builder {
        self.runtime = Some(runtime);
        self
    }

    /// Opens a table for every declared type (or for those named with
    /// [`open`](Self::open)), each with its loader (the one given to
    /// [`loader`](Self::loader), else the one it declares), and starts the
    /// maintenance thread.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if two declarations share a table name or a kind,
    /// [`Error::MissingLoader`] if tables have no loader (neither declared
    /// nor given to [`loader`](Self::loader)) and were not built
    /// [`without_loader`](Self::without_loader),
    /// [`Error::Config`] if the node name is not valid, or a table left
    /// closed ([`open`](Self::open)) was given a loader, a codec, a
    /// listener or limits, or limits break the attribute's rules or name no table
    /// ([`limits`](Self::limits)),
    /// [`Error::NoRuntime`] if the cache has L2 and coherent tables and no
    /// runtime to run their coherence lanes on,
    /// [`Error::Config`] if the L2 address is not a valid URL (or is
    /// `rediss://` without the `tls` feature, or its TLS roots are unusable).
    /// Nothing is sent to the server here: bad credentials show up later as
    /// L2 errors.
    pub fn build(mut self) -> Result<Cache, Error> {
        directory::check_unique()?;
        hot_publish_every_fault(self.hot_publish_every)?;
        let in_force = self.specs_in_force()?;
        self.check_open()?;
        self.check_soft_timeouts(&in_force)?;
        #[cfg(feature = "metrics")]
        let metrics_node = self.node_name.as_deref().map(Arc::from);
        let node_name = match self.node_name {
            Some(name) => match node_name_fault(&name) {
                None => name,
                Some(fault) => {
                    return Err(Error::Config(format!(
                        "node name {name:?}: {fault}; a node name is 1 to {MAX_NODE_NAME} \
                         ASCII letters, digits, `-`, `_` and `.`"
                    )));
                }
            },
            None => format!("node-{}-{:08x}", std::process::id(), fastrand::u32(..)),
        };
        let l2 = self
            .l2
            .map(|address| {
                let tls_root = self.l2_tls_root.as_deref();
                Server::open(&address, tls_root, self.l2_timeout, self.l2_probe_every)
            })
            .transpose()?;
        let runtime = self.runtime.or_else(|| Handle::try_current().ok());
        // The node number needs claiming if there is a server to claim it
        // on, and a runtime to claim it from.
        let readiness = Arc::new(Readiness::new(l2.is_none() || runtime.is_none()));
        let shared = Shared {
            clock: self.clock.clone(),
            runtime,
            readiness: Arc::clone(&readiness),
            backlog_kick: Arc::default(),
            backlog_limit: self.backlog_limit,
            loaders: Mutex::new(self.loaders),
            l2: l2.map(Arc::new),
            max_value_bytes: self.max_value_bytes,
            tombstone_ttl: self.tombstone_ttl,
            load_timeout: self.load_timeout,
            codecs: Mutex::new(self.codecs),
            #[cfg(feature = "metrics")]
            metrics_node,
            batch_loaders: Mutex::new(self.batch_loaders),
            listeners: Mutex::new(self.listeners),
        };
        let mut missing = Vec::new();
        let tables: Arc<[Place]> = DECLARATIONS
            .iter()
            .map(|decl| {
                if !opens(&self.open, &decl.spec) {
                    return Place::closed();
                }
                let spec = in_force.get(&limits::address(&decl.spec));
                (decl.open)(spec.copied().unwrap_or(&decl.spec), &shared).map_or_else(
                    |spec| {
                        missing.push(spec);
                        Place::closed()
                    },
                    Place::open,
                )
            })
            .collect();
        if !missing.is_empty() {
            missing.sort_by_key(|spec| spec.name());
            return Err(Error::MissingLoader {
                tables: missing.into(),
            });
        }
        let (stop_coherence, coherence_stopped) = watch::channel(());
        if let Some(server) = &shared.l2 {
            let tasks = Tasks {
                tables: super::open_tables(&tables).cloned().collect(),
                server: Arc::clone(server),
                link: link::Settings {
                    ping_every: self.coherence_ping_every,
                    deadline: self.coherence_ping_every,
                },
                node_name,
                hot_publish_every: self.hot_publish_every,
                readiness: Arc::clone(&readiness),
                backlog_kick: Arc::clone(&shared.backlog_kick),
                stop: coherence_stopped,
            };
            tasks.start(shared.runtime.as_ref())?;
        }
        let (wake, woken) = mpsc::channel();
        let inner = Arc::new(Inner {
            tables: Arc::clone(&tables),
            clock: self.clock,
            readiness,
            wake,
            _stop_coherence: stop_coherence,
        });
        spawn_maintenance(Arc::downgrade(&inner), woken)?;
        Ok(Cache {
            tables,
            directory: DECLARATIONS.as_ptr() as usize,
            fetch_timeout: self.fetch_timeout,
            inner,
        })
    }
}

/// A zero `hot_publish_every`, refused.
fn hot_publish_every_fault(every: Duration) -> Result<(), Error> {
    if every.is_zero() {
        return Err(Error::Config(
            "hot_publish_every may not be zero: it is how often each `warm` table merges \
             this node's hottest ids into the fleet's list in L2"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The longest node name: it names a consumer group and a client.
const MAX_NODE_NAME: usize = 64;

/// What is wrong with a node name, if anything.
fn node_name_fault(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_owned());
    }
    if name.len() > MAX_NODE_NAME {
        return Some(format!("it is {} bytes long", name.len()));
    }
    name.chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .map(|c| format!("{c:?} is not allowed"))
}
