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
//! stderr as it drops.
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

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

mod cluster;

pub use cluster::{
    ClusterNode, DEFAULT_CONVERGE_TIMEOUT, DEFAULT_NODE_TIMEOUT, RedisCluster, RedisClusterBuilder,
    SLOT_COUNT, SlotMigration,
};

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

/// Fresh ports tried by [`RedisServer::start`] when the chosen one is taken
/// by another process before the server binds it.
const START_ATTEMPTS: usize = 8;

/// The cluster bus port's offset from the client port (the default).
const CLUSTER_BUS_OFFSET: u16 = 10_000;

/// Interval of the readiness and state polls.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Lines of the server log shown in failure messages.
const LOG_TAIL_LINES: usize = 40;

/// Flags the fixture owns; [`RedisServerBuilder::arg`] refuses them.
const RESERVED_FLAGS: [&str; 5] = ["--port", "--bind", "--dir", "--daemonize", "--logfile"];

const NOT_FOUND: &str = "neither valkey-server nor redis-server is on PATH; install it: \
                         apt-get install redis-server (or run ./scripts/test, which does)";

/// Why a server could not be started.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// The kind of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Neither `valkey-server` nor `redis-server` is on `PATH` (or
    /// [`SERVER_ENV`] names no executable file).
    BinaryNotFound,
    /// The server exited, or did not answer within the startup timeout, or
    /// its port stayed taken; the message carries the server log's tail.
    Startup,
    /// An I/O error of the fixture itself (temp dir, log file, spawn).
    Io,
    /// A [`RedisCluster`] did not come together: a setup command failed, or
    /// the nodes did not agree within the timeout; the message names what
    /// did not converge and shows each node's `CLUSTER NODES`.
    Cluster,
}

impl Error {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    fn io(context: impl fmt::Display, err: io::Error) -> Self {
        Self::new(ErrorKind::Io, format!("{context}: {err}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The server binary and its version, found once per process.
#[derive(Debug, Clone)]
struct Binary {
    path: PathBuf,
    version: String,
}

fn binary() -> Result<Binary, Error> {
    static BINARY: OnceLock<Result<Binary, (ErrorKind, String)>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let path = locate(
                std::env::var_os(SERVER_ENV).as_deref(),
                std::env::var_os("PATH").as_deref(),
            )
            .map_err(|e| (e.kind, e.message))?;
            let version = version_of(&path).map_err(|e| (e.kind, e.message))?;
            Ok(Binary { path, version })
        })
        .clone()
        .map_err(|(kind, message)| Error { kind, message })
}

/// Picks the server binary: `override_path` if set and non-empty, else
/// `valkey-server`, else `redis-server` from `path_var`.
fn locate(override_path: Option<&OsStr>, path_var: Option<&OsStr>) -> Result<PathBuf, Error> {
    if let Some(path) = override_path.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(Error::new(
                ErrorKind::BinaryNotFound,
                format!("{SERVER_ENV}={} is not an executable file", path.display()),
            ))
        };
    }
    let dirs: Vec<PathBuf> = path_var
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    ["valkey-server", "redis-server"]
        .iter()
        .find_map(|name| {
            dirs.iter()
                .map(|dir| dir.join(name))
                .find(|candidate| is_executable(candidate))
        })
        .ok_or_else(|| Error::new(ErrorKind::BinaryNotFound, NOT_FOUND))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `<binary> --version` and extracts `v=X.Y.Z` (the whole first line if
/// the output has another shape).
fn version_of(path: &Path) -> Result<String, Error> {
    let out = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(format_args!("running {} --version", path.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or("").trim();
    let version = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .unwrap_or(line);
    if version.is_empty() {
        return Err(Error::new(
            ErrorKind::Startup,
            format!(
                "{} --version printed nothing ({})",
                path.display(),
                out.status
            ),
        ));
    }
    Ok(version.to_owned())
}

fn major_version(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// Configures a [`RedisServer`] before starting it; see
/// [`RedisServer::builder`].
#[derive(Debug, Clone)]
pub struct RedisServerBuilder {
    args: Vec<OsString>,
    startup_timeout: Duration,
    tls: Option<TlsFiles>,
}

/// The PEM files of a TLS listener; see [`RedisServerBuilder::tls`].
#[derive(Debug, Clone)]
struct TlsFiles {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

impl RedisServerBuilder {
    /// Appends one command-line argument, after the fixture's own flags (so
    /// it overrides them), e.g. `.arg("--maxmemory").arg("10mb")`. The flags
    /// the fixture owns (`--port`, `--bind`, `--dir`, `--daemonize`,
    /// `--logfile`) are refused with a panic. Don't pass `--requirepass`: the
    /// readiness probe runs unauthenticated; set it with `CONFIG SET` (or
    /// create ACL users) after the start instead.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        let arg = arg.into();
        if let Some(flag) = arg.to_str().filter(|a| RESERVED_FLAGS.contains(a)) {
            panic!("echo-cache-testkit owns {flag}; it cannot be overridden");
        }
        self.args.push(arg);
        self
    }

    /// Appends several command-line arguments; see [`arg`](Self::arg).
    pub fn args<I, S>(self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        args.into_iter().fold(self, |b, a| b.arg(a))
    }

    /// How long a start or restart waits for the server to answer
    /// (default [`DEFAULT_STARTUP_TIMEOUT`]).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Also serves TLS, on a second reserved loopback port
    /// ([`RedisServer::tls_port`], [`RedisServer::tls_url`]), with the
    /// certificate (chain) `cert_pem`, its private key `key_pem` and the CA
    /// `ca_pem`, all PEM (written to the temp dir). Clients are not asked
    /// for a certificate (`--tls-auth-clients no`). The plain port stays
    /// open: the readiness probe and the helpers ([`ping`](RedisServer::ping),
    /// [`query`](RedisServer::query), [`connection`](RedisServer::connection))
    /// use it. The server binary must be built with TLS (Debian's is).
    pub fn tls(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
        ca_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls = Some(TlsFiles {
            cert: cert_pem.into(),
            key: key_pem.into(),
            ca: ca_pem.into(),
        });
        self
    }

    /// Starts the server; panics with the reason (and the server log's tail)
    /// if it can't.
    #[track_caller]
    pub fn start(self) -> RedisServer {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts the server on a free loopback port and waits until it answers.
    pub fn try_start(self) -> Result<RedisServer, Error> {
        let binary = binary()?;
        let dir = tempfile::Builder::new()
            .prefix("echo-cache-testkit-")
            .tempdir()
            .map_err(|e| Error::io("creating the server's temp dir", e))?;
        let log_path = dir.path().join("server.log");

        let mut args: Vec<OsString> = [
            "--bind",
            "127.0.0.1",
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            "",
            "--loglevel",
            "notice",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.push("--dir".into());
        args.push(dir.path().into());
        if major_version(&binary.version).is_some_and(|major| major >= 7) {
            // DEBUG (e.g. DEBUG SLEEP) from loopback clients only; 7.0+.
            args.push("--enable-debug-command".into());
            args.push("local".into());
        }
        let cluster = self
            .args
            .windows(2)
            .any(|flag| flag[0] == "--cluster-enabled" && flag[1].eq_ignore_ascii_case("yes"));
        if let Some(tls) = &self.tls {
            for (flag, name, pem) in [
                ("--tls-cert-file", "tls-cert.pem", &tls.cert),
                ("--tls-key-file", "tls-key.pem", &tls.key),
                ("--tls-ca-cert-file", "tls-ca.pem", &tls.ca),
            ] {
                let path = dir.path().join(name);
                fs::write(&path, pem).map_err(|e| Error::io(format_args!("writing {name}"), e))?;
                args.push(flag.into());
                args.push(path.into());
            }
            args.push("--tls-auth-clients".into());
            args.push("no".into());
        }
        args.extend(self.args);

        let mut last = None;
        for attempt in 1..=START_ATTEMPTS {
            let reservation =
                reserve_port(cluster).map_err(|e| Error::io("choosing a free loopback port", e))?;
            let port = reservation.port;
            let mut args = args.clone();
            let tls_reservation = match self.tls {
                Some(_) => {
                    let tls = reserve_port(false)
                        .map_err(|e| Error::io("choosing a free loopback port for TLS", e))?;
                    args.push("--tls-port".into());
                    args.push(tls.port.to_string().into());
                    Some(tls)
                }
                None => None,
            };
            let spec = Spec {
                binary: &binary.path,
                args: &args,
                dir: dir.path(),
                log_path: &log_path,
                port,
            };
            match spec.launch(self.startup_timeout, attempt) {
                Ok(child) => {
                    return Ok(RedisServer {
                        port,
                        _reservation: reservation,
                        tls_port: tls_reservation.as_ref().map(|r| r.port),
                        _tls_reservation: tls_reservation,
                        binary: binary.path,
                        version: binary.version,
                        args,
                        startup_timeout: self.startup_timeout,
                        log_path,
                        state: Mutex::new(State {
                            child: Some(child),
                            paused: false,
                        }),
                        dir,
                    });
                }
                Err(Launch::PortTaken) => last = Some(port),
                Err(Launch::Failed(e)) => return Err(e),
            }
        }
        Err(Error::new(
            ErrorKind::Startup,
            format!(
                "{} could not bind a free loopback port in {START_ATTEMPTS} attempts \
                 (last {}: address already in use)\n{}",
                binary.path.display(),
                last.unwrap_or_default(),
                tail_section(&log_path)
            ),
        ))
    }
}

impl Default for RedisServerBuilder {
    fn default() -> Self {
        Self {
            args: Vec::new(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tls: None,
        }
    }
}

/// A `valkey-server` / `redis-server` child process on `127.0.0.1`, killed
/// and reaped (and its temp dir removed) on drop. See the [crate docs](crate).
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    binary: PathBuf,
    version: String,
    /// Every flag but `--port`; reused by `restart`.
    args: Vec<OsString>,
    startup_timeout: Duration,
    log_path: PathBuf,
    state: Mutex<State>,
    /// Keeps other fixtures off the port while the server is down.
    _reservation: Reservation,
    /// The TLS port, if [`RedisServerBuilder::tls`] asked for one.
    tls_port: Option<u16>,
    _tls_reservation: Option<Reservation>,
    // Last, so it is removed after `Drop::drop` has killed the server.
    dir: TempDir,
}

#[derive(Debug)]
struct State {
    child: Option<Child>,
    paused: bool,
}

impl RedisServer {
    /// Starts a server with the default flags; panics with the reason (and
    /// the server log's tail) if it can't. See [`builder`](Self::builder) for
    /// extra flags and [`try_start`](Self::try_start) for a `Result`.
    #[track_caller]
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// Like [`start`](Self::start), returning the failure instead of panicking.
    pub fn try_start() -> Result<Self, Error> {
        Self::builder().try_start()
    }

    /// A builder for extra server flags or another startup timeout.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The server's port on `127.0.0.1` (kept across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis://127.0.0.1:<port>` (database 0, no credentials).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TLS port on `127.0.0.1` (kept across [`restart`](Self::restart)),
    /// if the server was started with [`RedisServerBuilder::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `rediss://127.0.0.1:<tls port>` (database 0, no credentials); panics
    /// if the server was not started with [`RedisServerBuilder::tls`].
    #[track_caller]
    pub fn tls_url(&self) -> String {
        let port = self
            .tls_port
            .expect("tls_url: the server was not started with tls()");
        format!("rediss://127.0.0.1:{port}")
    }

    /// The server binary that runs (`valkey-server` or `redis-server`).
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The binary's version, as its `--version` prints it (e.g. `7.0.15`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The file that collects the server's stdout and stderr (its log), one
    /// section per start; removed with the temp dir on drop.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The server's working directory (a fresh temp dir, removed on drop).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// The server's pid, while it runs (paused counts as running).
    pub fn pid(&self) -> Option<u32> {
        let mut state = self.lock();
        state.reap();
        state.child.as_ref().map(Child::id)
    }

    /// Whether the process is alive (paused counts as running). Notices a
    /// server that died by itself (and reaps it).
    pub fn is_running(&self) -> bool {
        let mut state = self.lock();
        state.reap();
        state.child.is_some()
    }

    /// Whether the server is stopped by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        let mut state = self.lock();
        state.reap();
        state.paused
    }

    /// Kills the server with `SIGKILL` and waits until it has exited (it is
    /// reaped; its port refuses connections when this returns). A no-op if
    /// it is not running. The temp dir stays, for [`restart`](Self::restart).
    pub fn kill(&self) {
        self.lock().kill();
    }

    /// Stops the server with `SIGSTOP` and waits (bounded) until it is
    /// stopped: the kernel still accepts connections, but nothing answers.
    /// Panics if the server is not running.
    #[track_caller]
    pub fn pause(&self) {
        let mut state = self.lock();
        state.reap();
        let pid = match &state.child {
            Some(child) => child.id(),
            None => panic!("pause: the server on port {} is not running", self.port),
        };
        if !state.paused {
            signal(pid, libc::SIGSTOP);
            state.paused = true;
        }
        if !wait_stopped(pid, Instant::now() + self.startup_timeout) {
            panic!(
                "pause: the server (pid {pid}) did not stop within {:?}",
                self.startup_timeout
            );
        }
    }

    /// Continues a paused server with `SIGCONT`; a no-op if it isn't paused.
    pub fn resume(&self) {
        let mut state = self.lock();
        state.reap();
        state.resume();
    }

    /// Starts the server again on the same port with the same flags (killing
    /// it first if it runs or is paused) and waits until it answers. The data
    /// is gone: there is no persistence. Retries while the port is still
    /// taken, up to the startup timeout; panics with the reason if the server
    /// does not come back.
    #[track_caller]
    pub fn restart(&self) {
        self.try_restart().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Like [`restart`](Self::restart), returning the failure instead of
    /// panicking.
    pub fn try_restart(&self) -> Result<(), Error> {
        let mut state = self.lock();
        state.kill();
        let deadline = Instant::now() + self.startup_timeout;
        let spec = Spec {
            binary: &self.binary,
            args: &self.args,
            dir: self.dir.path(),
            log_path: &self.log_path,
            port: self.port,
        };
        for attempt in 1.. {
            match spec.launch(self.startup_timeout, attempt) {
                Ok(child) => {
                    state.child = Some(child);
                    return Ok(());
                }
                Err(Launch::PortTaken) if Instant::now() < deadline => {
                    thread::sleep(POLL_INTERVAL * 4);
                }
                Err(Launch::PortTaken) => {
                    return Err(Error::new(
                        ErrorKind::Startup,
                        format!(
                            "restart: port {} stayed taken by another process for {:?}\n{}",
                            self.port,
                            self.startup_timeout,
                            tail_section(&self.log_path)
                        ),
                    ));
                }
                Err(Launch::Failed(e)) => return Err(e),
            }
        }
        unreachable!()
    }

    /// Sends `PING` over a fresh raw TCP connection and waits at most
    /// `timeout` (for the connect and for the reply) for `+PONG`. Fails
    /// on a killed server (refused) and on a paused one (timed out).
    pub fn ping(&self, timeout: Duration) -> io::Result<()> {
        let reply = raw_command(self.port, &["PING"], timeout)?;
        if reply == b"+PONG" {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "PING answered {:?}",
                String::from_utf8_lossy(&reply)
            )))
        }
    }

    /// A `redis` client for [`url`](Self::url), e.g. to build connections
    /// with other timeouts.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a redis://127.0.0.1:<port> URL parses")
    }

    /// A new async multiplexed connection (tokio) with connect and response
    /// timeouts of [`CLIENT_TIMEOUT`]; panics if it can't connect.
    #[track_caller]
    pub fn connection(&self) -> impl Future<Output = redis::aio::MultiplexedConnection> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(CLIENT_TIMEOUT))
                .set_response_timeout(Some(CLIENT_TIMEOUT));
            self.client()
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "{caller}: connecting to {}: {e}\n{}",
                        self.url(),
                        self.log_section()
                    )
                })
        }
    }

    /// A new blocking connection with connect, read and write timeouts of
    /// [`CLIENT_TIMEOUT`]; panics if it can't connect.
    #[track_caller]
    pub fn blocking_connection(&self) -> redis::Connection {
        self.try_blocking_connection()
            .unwrap_or_else(|e| panic!("connecting to {}: {e}\n{}", self.url(), self.log_section()))
    }

    /// Like [`blocking_connection`](Self::blocking_connection), returning the
    /// failure: the cluster's polls retry a node that is briefly unreachable.
    fn try_blocking_connection(&self) -> redis::RedisResult<redis::Connection> {
        let conn = self.client().get_connection_with_timeout(CLIENT_TIMEOUT)?;
        conn.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        conn.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        Ok(conn)
    }

    /// Runs one command on a fresh [`blocking_connection`](Self::blocking_connection)
    /// and converts the reply; panics (naming the command) on any error.
    /// For setup and inspection in tests, e.g.
    /// `server.query::<i64>(redis::cmd("PTTL").arg(key))` or writing a raw
    /// frame with `redis::cmd("SET").arg(key).arg(&bytes[..])`. It blocks the
    /// calling thread (briefly, bounded by [`CLIENT_TIMEOUT`]).
    #[track_caller]
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut conn = self.blocking_connection();
        cmd.query(&mut conn)
            .unwrap_or_else(|e| panic!("{} on {}: {e}", describe_command(cmd), self.url()))
    }

    /// `CONFIG SET name value`; panics on error.
    #[track_caller]
    pub fn config_set(&self, name: &str, value: &str) {
        let () = self.query(redis::cmd("CONFIG").arg("SET").arg(name).arg(value));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a consistent State.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn log_section(&self) -> String {
        tail_section(&self.log_path)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        state.kill();
        if thread::panicking() {
            eprintln!(
                "echo-cache-testkit: {} {} on port {}, {}",
                self.binary.display(),
                self.version,
                self.port,
                self.log_section()
            );
        }
    }
}

impl State {
    /// Forgets a child that exited by itself.
    fn reap(&mut self) {
        if let Some(child) = &mut self.child
            && !matches!(child.try_wait(), Ok(None))
        {
            let _ = child.wait();
            self.child = None;
            self.paused = false;
        }
    }

    fn resume(&mut self) {
        if self.paused {
            if let Some(child) = &self.child {
                signal(child.id(), libc::SIGCONT);
            }
            self.paused = false;
        }
    }

    fn kill(&mut self) {
        self.resume();
        if let Some(mut child) = self.child.take() {
            // Fails only if it already exited; `wait` reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What to run, once per launch attempt.
struct Spec<'a> {
    binary: &'a Path,
    args: &'a [OsString],
    dir: &'a Path,
    log_path: &'a Path,
    port: u16,
}

enum Launch {
    /// The server exited because its port was taken; try again.
    PortTaken,
    Failed(Error),
}

impl Spec<'_> {
    /// Spawns the server and waits until it answers as itself (its pid) on
    /// the port, it exits, or `timeout` passes.
    fn launch(&self, timeout: Duration, attempt: usize) -> Result<Child, Launch> {
        let io_err = |context: &str, e| Launch::Failed(Error::io(context, e));
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path)
            .map_err(|e| io_err("opening the server log", e))?;
        let offset = log
            .seek(SeekFrom::End(0))
            .map_err(|e| io_err("seeking the server log", e))?;
        writeln!(
            log,
            "--- echo-cache-testkit: starting {} on 127.0.0.1:{} (attempt {attempt})",
            self.binary.display(),
            self.port
        )
        .map_err(|e| io_err("writing the server log", e))?;
        let stderr = log
            .try_clone()
            .map_err(|e| io_err("cloning the log handle", e))?;
        let mut child = Command::new(self.binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(self.args)
            .current_dir(self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| io_err(&format!("spawning {}", self.binary.display()), e))?;
        let pid = child.id();
        let deadline = Instant::now() + timeout;

        let port_taken = || read_from(self.log_path, offset).contains("Address already in use");
        let failure = loop {
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(_)) if port_taken() => return Err(Launch::PortTaken),
                Ok(Some(status)) => break format!("exited ({status}) before answering"),
                Err(e) => break format!("could not be polled: {e}"),
            }
            let now = Instant::now();
            if now >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                if port_taken() {
                    return Err(Launch::PortTaken);
                }
                break "did not answer in time".to_owned();
            }
            let probe_timeout = (deadline - now).clamp(POLL_INTERVAL, Duration::from_millis(100));
            if let Ok(reply) = raw_command(self.port, &["INFO", "server"], probe_timeout)
                && info_pid(&reply) == Some(pid)
            {
                return Ok(child);
            }
            // Another process's server (we are losing the port race), or
            // an error reply: keep polling until our child exits.
            thread::sleep(POLL_INTERVAL);
        };
        Err(Launch::Failed(Error::new(
            ErrorKind::Startup,
            format!(
                "{} on 127.0.0.1:{} {failure}\n{}",
                self.binary.display(),
                self.port,
                tail_section(self.log_path)
            ),
        )))
    }
}

/// A port of `127.0.0.1` (and, for a cluster-enabled server, its cluster bus
/// port), free a moment ago and held for one fixture's lifetime against
/// every other fixture (see [`reserve_port`]).
#[derive(Debug)]
struct Reservation {
    port: u16,
    /// The locks on byte `port` (and the bus port) of the shared ports file;
    /// released on drop.
    _locks: Vec<File>,
}

/// Picks a port for a new server; with `cluster_bus`, also its cluster bus
/// port (`port + 10000`, the Redis/Valkey default).
///
/// Candidates come from below the kernel's ephemeral range (Linux:
/// `ip_local_port_range`), so no outgoing connection takes the port as its
/// source port while the server is down between `kill` and `restart`. Each
/// candidate is locked (an open-file-description lock on byte `port` of
/// `$TMPDIR/echo-cache-testkit-<uid>.ports`, held until the fixture drops),
/// so no other fixture, in this process or another, picks it while this one
/// lives, even while its server is killed. Then it is bound once to check
/// that nothing else listens there. Without a usable lock (not Linux, or no
/// writable temp dir) only the bind check remains.
fn reserve_port(cluster_bus: bool) -> io::Result<Reservation> {
    let headroom = if cluster_bus { CLUSTER_BUS_OFFSET } else { 0 };
    let range = candidate_ports(headroom);
    'candidates: for _ in 0..256 {
        let port = match &range {
            Some(range) => {
                let span = u64::from(range.end - range.start);
                range.start + u16::try_from(random_u64() % span).expect("span fits u16")
            }
            None => TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port(),
        };
        let ports = match (cluster_bus, port.checked_add(CLUSTER_BUS_OFFSET)) {
            (false, _) => vec![port],
            (true, Some(bus)) => vec![port, bus],
            (true, None) => continue,
        };
        let mut locks = Vec::new();
        for &p in &ports {
            match lock_port(p) {
                Ok(lock) => locks.extend(lock),
                Err(PortLock::Held) => continue 'candidates,
            }
        }
        if ports
            .iter()
            .all(|&p| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok())
        {
            return Ok(Reservation {
                port,
                _locks: locks,
            });
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free loopback port in 256 tries",
    ))
}

/// Ports from 10000 (above most development services' defaults) up to
/// `headroom` below the ephemeral range, or `None` to let the kernel choose.
fn candidate_ports(headroom: u16) -> Option<std::ops::Range<u16>> {
    let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(if cfg!(target_os = "linux") {
            32768
        } else {
            49152
        });
    let end = ephemeral_low.checked_sub(headroom)?;
    (end >= 12_000).then_some(10_000..end)
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one((COUNTER.fetch_add(1, Ordering::Relaxed), std::process::id()))
}

enum PortLock {
    /// Another fixture holds the port.
    Held,
}

#[cfg(target_os = "linux")]
fn lock_port(port: u16) -> Result<Option<File>, PortLock> {
    use std::os::fd::AsRawFd;
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let path = std::env::temp_dir().join(format!("echo-cache-testkit-{uid}.ports"));
    let Ok(file) = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
    else {
        return Ok(None);
    };
    // SAFETY: an all-zero flock is a valid value (plain C struct).
    let mut range: libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = libc::F_WRLCK as libc::c_short;
    range.l_whence = libc::SEEK_SET as libc::c_short;
    range.l_start = libc::off_t::from(port);
    range.l_len = 1;
    // SAFETY: a valid fd and a valid flock; l_pid is 0 as OFD locks require.
    // The lock lives as long as this open file description.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &range) };
    if rc == 0 {
        return Ok(Some(file));
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Err(PortLock::Held),
        // E.g. EINVAL before Linux 3.15: no locking, only the bind check.
        _ => Ok(None),
    }
}

#[cfg(not(target_os = "linux"))]
fn lock_port(_port: u16) -> Result<Option<File>, PortLock> {
    Ok(None)
}

/// A command as text for failure messages (long arguments shortened).
fn describe_command(cmd: &redis::Cmd) -> String {
    let args: Vec<String> = cmd
        .args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) if bytes.len() > 64 => {
                format!(
                    "{}...({} bytes)",
                    String::from_utf8_lossy(&bytes[..64]),
                    bytes.len()
                )
            }
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "<cursor>".to_owned(),
        })
        .collect();
    args.join(" ")
}

/// Sends one command over a fresh connection and returns the reply: the
/// line of a simple reply or error (with its `+`/`-`), or a bulk string's
/// payload.
fn raw_command(port: u16, args: &[&str], timeout: Duration) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "reply timed out"))
    };
    stream.set_write_timeout(Some(remaining()?))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    stream.set_read_timeout(Some(remaining()?))?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "truncated reply",
        ));
    }
    line.truncate(line.len() - 2);
    if let Some(len) = line.strip_prefix(b"$") {
        let len: usize = std::str::from_utf8(len)
            .ok()
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad bulk length"))?;
        let mut payload = vec![0; len + 2];
        reader.get_mut().set_read_timeout(Some(remaining()?))?;
        reader.read_exact(&mut payload)?;
        payload.truncate(len);
        return Ok(payload);
    }
    Ok(line)
}

/// The `process_id:` field of an `INFO server` reply.
fn info_pid(info: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(info)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("a child pid fits pid_t");
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own
    // child, not yet reaped (the state lock is held), so it cannot be reused.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        // ESRCH: it died on its own; the next state poll reaps it.
        if err.raw_os_error() != Some(libc::ESRCH) {
            panic!("kill({pid}, {sig}): {err}");
        }
    }
}

/// Polls (without reaping) until the child is in the stopped state.
#[cfg(target_os = "linux")]
fn wait_stopped(pid: u32, deadline: Instant) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("a child pid fits pid_t");
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value (plain C struct).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the
        // child waitable, so std's `Child` still reaps it later.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WSTOPPED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        if rc == 0 {
            // SAFETY: waitid filled (or left zeroed) a SIGCHLD siginfo_t.
            if unsafe { info.si_pid() } == pid && info.si_code == libc::CLD_STOPPED {
                return true;
            }
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Elsewhere SIGSTOP takes effect as soon as the target is scheduled; there
/// is no portable non-reaping way to observe it.
#[cfg(not(target_os = "linux"))]
fn wait_stopped(_pid: u32, _deadline: Instant) -> bool {
    true
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = read_from(path, 0);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn tail_section(path: &Path) -> String {
    format!(
        "--- tail of {}:\n{}\n---",
        path.display(),
        log_tail(path, LOG_TAIL_LINES)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_debian_package() {
        let empty = tempfile::tempdir().unwrap();
        let err = locate(None, Some(empty.path().as_os_str())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BinaryNotFound);
        assert_eq!(
            err.to_string(),
            "neither valkey-server nor redis-server is on PATH; install it: \
             apt-get install redis-server (or run ./scripts/test, which does)"
        );
        let err = locate(None, None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BinaryNotFound);
    }

    #[test]
    fn valkey_is_preferred_over_redis() {
        let bin = tempfile::tempdir().unwrap();
        for name in ["redis-server", "valkey-server", "not-a-server"] {
            let path = bin.path().join(name);
            fs::write(&path, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let found = locate(None, Some(bin.path().as_os_str())).unwrap();
        assert_eq!(found, bin.path().join("valkey-server"));

        fs::remove_file(bin.path().join("valkey-server")).unwrap();
        let found = locate(None, Some(bin.path().as_os_str())).unwrap();
        assert_eq!(found, bin.path().join("redis-server"));

        // A file without the execute bit does not count.
        fs::set_permissions(
            bin.path().join("redis-server"),
            fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(locate(None, Some(bin.path().as_os_str())).is_err());
    }

    #[test]
    fn override_must_be_executable() {
        let err = locate(Some(OsStr::new("/nonexistent/valkey-server")), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BinaryNotFound);
        assert!(err.to_string().contains(SERVER_ENV), "{err}");
    }

    #[test]
    fn parses_info_pid_and_versions() {
        let info = b"# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\ntcp_port:1\r\n";
        assert_eq!(info_pid(info), Some(4242));
        assert_eq!(info_pid(b"-NOAUTH Authentication required."), None);
        assert_eq!(major_version("7.0.15"), Some(7));
        assert_eq!(major_version("255.255.255"), Some(255));
        assert_eq!(major_version("unknown"), None);
    }

    #[test]
    fn a_taken_port_is_reported_for_a_retry() {
        let binary = binary().expect("a server binary on PATH");
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("server.log");
        let args: Vec<OsString> = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            .iter()
            .map(OsString::from)
            .collect();
        let spec = Spec {
            binary: &binary.path,
            args: &args,
            dir: dir.path(),
            log_path: &log_path,
            port: squatter.local_addr().unwrap().port(),
        };
        let started = Instant::now();
        match spec.launch(Duration::from_secs(5), 1) {
            Err(Launch::PortTaken) => {}
            Ok(_) => panic!("launched on a taken port"),
            Err(Launch::Failed(e)) => panic!("not recognised as a taken port: {e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_reserved_port_is_not_handed_out_again() {
        let held: Vec<Reservation> = (0..64).map(|i| reserve_port(i % 2 == 0).unwrap()).collect();
        let mut ports = std::collections::HashSet::new();
        for (i, r) in held.iter().enumerate() {
            assert!(ports.insert(r.port), "{} handed out twice", r.port);
            if i % 2 == 0 {
                let bus = r.port + CLUSTER_BUS_OFFSET;
                assert!(ports.insert(bus), "bus port {bus} handed out twice");
            }
        }
        if let Some(range) = candidate_ports(0) {
            assert!(
                ports.iter().all(|p| range.contains(p)),
                "{ports:?} outside {range:?}"
            );
        }
        #[cfg(target_os = "linux")]
        for (i, r) in held.iter().enumerate() {
            assert_eq!(
                r._locks.len(),
                if i % 2 == 0 { 2 } else { 1 },
                "no lock on Linux"
            );
            assert!(matches!(lock_port(r.port), Err(PortLock::Held)));
        }
        // (Once dropped, a port may be taken by any fixture right away, so
        // its release is not asserted here.)
    }

    #[test]
    #[should_panic(expected = "owns --port")]
    fn reserved_flags_are_refused() {
        let _ = RedisServer::builder().arg("--port");
    }
}
