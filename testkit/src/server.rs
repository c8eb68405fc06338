//! One server: [`RedisServerBuilder`] (flags, startup timeout, TLS) and the
//! [`RedisServer`] fixture it starts (ports, clients, outages, restart,
//! kill on drop). The two stay in one file because they name each other:
//! the builder fills in the fixture's private fields, and the fixture's
//! `start`/`builder` hand out a builder.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::binary::{binary, major_version};
use crate::last_panic;
use crate::launch::{Launch, Spec};
use crate::port::{Reservation, reserve_port};
use crate::process::{log_tail, raw_command, signal, tail_section, wait_stopped};
use crate::{CLIENT_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, Error, ErrorKind, POLL_INTERVAL};

/// Fresh ports tried by [`RedisServer::start`] when the chosen one is taken
/// by another process before the server binds it.
const START_ATTEMPTS: usize = 8;

/// Flags the fixture owns; [`RedisServerBuilder::arg`] refuses them.
const RESERVED_FLAGS: [&str; 5] = ["--port", "--bind", "--dir", "--daemonize", "--logfile"];

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
                    last_panic::remember();
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
                        log_told: AtomicBool::new(false),
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
    /// Whether the log's tail was printed for a failing test already.
    log_told: AtomicBool,
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
    pub(crate) fn try_blocking_connection(&self) -> redis::RedisResult<redis::Connection> {
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

    /// While a test panics: prints the log's tail, once.
    pub(crate) fn tell_log(&self) {
        if thread::panicking() && !self.log_told.swap(true, Ordering::Relaxed) {
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        state.kill();
        self.tell_log();
        last_panic::say_again();
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

/// A command as text for failure messages (long arguments shortened).
pub(crate) fn describe_command(cmd: &redis::Cmd) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "owns --port")]
    fn reserved_flags_are_refused() {
        let _ = RedisServer::builder().arg("--port");
    }
}
