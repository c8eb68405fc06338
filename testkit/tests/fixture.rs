//! Behaviour of the real-server fixture itself, against the real binary.

use std::collections::HashSet;
use std::io;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use echo_cache_testkit::RedisServer;

const SHORT: Duration = Duration::from_millis(200);

/// Whether a process with this pid exists (zombies included).
fn pid_exists(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the pid exists and may be signalled.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn refused(server_port: u16) -> bool {
    let err = TcpStream::connect(("127.0.0.1", server_port)).expect_err("the port should refuse");
    err.kind() == io::ErrorKind::ConnectionRefused
}

#[test]
fn starts_answers_ping_and_reports_itself() {
    let server = RedisServer::start();
    server.ping(Duration::from_secs(1)).expect("PING");
    assert!(server.is_running());
    assert!(!server.is_paused());
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(
        server.addr().to_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert!(
        server.version().starts_with(char::is_numeric),
        "{}",
        server.version()
    );
    let name = server.binary().file_name().unwrap().to_str().unwrap();
    assert!(name == "valkey-server" || name == "redis-server", "{name}");
    assert!(server.log_path().starts_with(server.dir()));
    assert!(server.log_tail(100).contains("Ready to accept connections"));

    let pong: String = server.query(&redis::cmd("PING"));
    assert_eq!(pong, "PONG");
    let pid: String = server.query(redis::cmd("INFO").arg("server"));
    assert!(pid.contains(&format!("process_id:{}", server.pid().unwrap())));
}

#[test]
fn runs_on_loopback_without_persistence() {
    let server = RedisServer::start();
    let get = |name: &str| -> String {
        let pair: Vec<String> = server.query(redis::cmd("CONFIG").arg("GET").arg(name));
        assert_eq!(pair.len(), 2, "CONFIG GET {name}: {pair:?}");
        pair[1].clone()
    };
    assert_eq!(get("bind"), "127.0.0.1");
    assert_eq!(get("save"), "");
    assert_eq!(get("appendonly"), "no");
    assert_eq!(get("port"), server.port().to_string());
    assert_eq!(
        PathBuf::from(get("dir")).canonicalize().unwrap(),
        server.dir().canonicalize().unwrap()
    );

    server.config_set("maxmemory", "10mb");
    assert_eq!(get("maxmemory"), "10485760");
}

#[test]
fn builder_args_reach_the_server() {
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "allkeys-lru"])
        .startup_timeout(Duration::from_secs(10))
        .start();
    let pair: Vec<String> = server.query(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy"));
    assert_eq!(pair[1], "allkeys-lru");
}

#[test]
fn many_servers_in_parallel_get_distinct_ports() {
    let servers: Vec<RedisServer> = (0..8)
        .map(|_| thread::spawn(RedisServer::start))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("start"))
        .collect();
    let ports: HashSet<u16> = servers.iter().map(RedisServer::port).collect();
    assert_eq!(ports.len(), servers.len());
    for server in &servers {
        // Each port is served by that fixture's own process.
        let info: String = server.query(redis::cmd("INFO").arg("server"));
        assert!(info.contains(&format!("process_id:{}\r", server.pid().unwrap())));
        let _: () = server.query(redis::cmd("SET").arg("port").arg(server.port()));
    }
    for server in &servers {
        let port: u16 = server.query(redis::cmd("GET").arg("port"));
        assert_eq!(port, server.port());
    }
}

#[tokio::test]
async fn async_connection_round_trips() {
    let server = RedisServer::start();
    let mut conn = server.connection().await;
    let frame: Vec<u8> = (0..=255).collect();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg(&frame[..])
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let back: Vec<u8> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(back, frame);
    let pttl: i64 = server.query(redis::cmd("PTTL").arg("k"));
    assert!((1..=60_000).contains(&pttl), "{pttl}");
}

#[tokio::test]
async fn pause_stalls_and_resume_answers() {
    let server = RedisServer::start();
    let mut conn = server.connection().await;

    server.pause();
    assert!(server.is_paused());
    assert!(server.is_running());
    let err = server
        .ping(SHORT)
        .expect_err("a paused server must not answer");
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ),
        "{err:?}"
    );
    let stalled =
        tokio::time::timeout(SHORT, redis::cmd("PING").query_async::<String>(&mut conn)).await;
    assert!(stalled.is_err(), "PING answered while paused: {stalled:?}");

    server.resume();
    assert!(!server.is_paused());
    server
        .ping(Duration::from_secs(2))
        .expect("PING after resume");
    let pong: String = tokio::time::timeout(
        Duration::from_secs(2),
        redis::cmd("PING").query_async(&mut conn),
    )
    .await
    .expect("PING after resume, in time")
    .expect("PING after resume");
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn kill_refuses_connections() {
    let server = RedisServer::start();
    let pid = server.pid().unwrap();
    let port = server.port();
    server.kill();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(!pid_exists(pid), "pid {pid} still exists after kill");
    assert!(refused(port));
    assert!(server.ping(SHORT).is_err());
    let err = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap_err();
    assert!(err.is_connection_refusal(), "{err:?}");
    server.kill(); // idempotent
}

#[test]
fn restart_on_the_same_port_has_no_data() {
    let server = RedisServer::start();
    let port = server.port();
    let first_pid = server.pid().unwrap();
    let _: () = server.query(redis::cmd("SET").arg("k").arg("v"));

    server.kill();
    assert!(refused(port));
    server.restart();
    assert_eq!(server.port(), port);
    assert!(server.is_running());
    assert_ne!(server.pid(), Some(first_pid));
    server
        .ping(Duration::from_secs(1))
        .expect("PING after restart");
    let value: Option<String> = server.query(redis::cmd("GET").arg("k"));
    assert_eq!(value, None, "no persistence: data must be gone");
    let save: Vec<String> = server.query(redis::cmd("CONFIG").arg("GET").arg("save"));
    assert_eq!(save[1], "", "same flags after restart");

    // Restarting a running (or paused) server replaces it.
    let _: () = server.query(redis::cmd("SET").arg("k").arg("v"));
    let second_pid = server.pid().unwrap();
    server.pause();
    server.restart();
    assert!(!server.is_paused());
    assert!(!pid_exists(second_pid));
    let value: Option<String> = server.query(redis::cmd("GET").arg("k"));
    assert_eq!(value, None);
}

#[test]
fn drop_kills_reaps_and_cleans_up() {
    let server = RedisServer::start();
    let pid = server.pid().unwrap();
    let dir = server.dir().to_owned();
    assert!(pid_exists(pid));
    drop(server);
    assert!(!pid_exists(pid), "pid {pid} still exists after drop");
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
    // (The port is released: another fixture may take it right away.)
}

#[test]
fn drop_of_a_paused_server_kills_it() {
    let server = RedisServer::start();
    let pid = server.pid().unwrap();
    server.pause();
    drop(server);
    assert!(!pid_exists(pid), "pid {pid} still exists after drop");
}

#[test]
fn a_server_that_dies_by_itself_is_noticed() {
    let server = RedisServer::start();
    let pid = server.pid().unwrap();
    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_running() {
        assert!(Instant::now() < deadline, "exit of pid {pid} not noticed");
        thread::sleep(Duration::from_millis(5));
    }
    assert!(!pid_exists(pid), "not reaped");
    server.restart();
    server
        .ping(Duration::from_secs(1))
        .expect("PING after restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_through_an_arc() {
    let server = Arc::new(RedisServer::start());
    let killer = Arc::clone(&server);
    tokio::task::spawn_blocking(move || killer.kill())
        .await
        .unwrap();
    assert!(!server.is_running());
    server.restart();
    let mut conn = server.connection().await;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn restart_waits_while_the_port_is_taken() {
    let server = RedisServer::builder()
        .startup_timeout(Duration::from_secs(2))
        .start();
    server.kill();

    // Another process holds the port for a while: restart retries.
    let squatter = std::net::TcpListener::bind(server.addr()).expect("the port is free");
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        drop(squatter);
    });
    server.restart();
    release.join().unwrap();
    server
        .ping(Duration::from_secs(1))
        .expect("PING after restart");
    assert!(server.log_tail(1000).contains("Address already in use"));

    // Held for longer than the startup timeout: a clear error.
    server.kill();
    let _squatter = std::net::TcpListener::bind(server.addr()).expect("the port is free");
    let err = server.try_restart().expect_err("the port is taken");
    assert_eq!(err.kind(), echo_cache_testkit::ErrorKind::Startup);
    assert!(err.to_string().contains("stayed taken"), "{err}");
    assert!(!server.is_running());
}

#[test]
fn a_server_that_cannot_start_reports_its_log() {
    let err = RedisServer::builder()
        .args(["--no-such-directive", "1"])
        .try_start()
        .expect_err("an unknown directive must fail the start");
    assert_eq!(err.kind(), echo_cache_testkit::ErrorKind::Startup);
    let msg = err.to_string();
    assert!(msg.contains("exited"), "{msg}");
    assert!(
        msg.contains("no-such-directive"),
        "the log tail is missing: {msg}"
    );
}

#[test]
fn a_cluster_enabled_server_answers_cluster_keyslot() {
    // CLUSTER KEYSLOT needs cluster support on redis 7.0 ("This instance
    // has cluster support disabled" otherwise); the fixture also reserves
    // the cluster bus port (port + 10000).
    let server = RedisServer::builder()
        .args(["--cluster-enabled", "yes"])
        .start();
    let slot: u16 = server.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg("ecc:{GAM}:x"));
    let same: u16 = server.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg("{GAM}"));
    assert_eq!(slot, same);
    assert!(slot < 16384);
    server.kill();
    server.restart();
    let again: u16 = server.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg("{GAM}"));
    assert_eq!(again, slot);
}
