//! The codemojex workshop (examples/codemojex) run both ways, L1 only and
//! over a real server, and its story checked: one store read per herd, a
//! cohort that never expires together, a revoked session refused on the
//! other node — and a check that fails when the cache is not told.
//!
//! Then the program itself, as a newcomer runs it: this binary runs itself
//! again as the program (the ignored test `codemojex_program`, selected by
//! an environment variable that carries the arguments), and reads what it
//! prints and how it exits: its command line, an L2 that does not answer,
//! one that denies the invalidation channel, `--serve`.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemojex::{READY_BOUND, Workshop, moves::REFUSAL_BOUND, run};
use echo_cache::Health;
use echo_cache_testkit::RedisServer;

fn workshop(dir: &tempfile::TempDir) -> Workshop {
    Workshop {
        herd: 2_000,
        ..Workshop::new(dir.path().join("codemojex.sqlite3"))
    }
}

/// The moves that hold with or without a server.
fn check_moves_1_to_3(report: &codemojex::Report) {
    assert_eq!(
        report.declared,
        ["cm_boards", "cm_emojisets", "cm_games", "cm_sessions"]
    );
    let survived = &report.survived;
    assert_eq!(
        survived.herd_store_reads, 1,
        "a herd on a cold game reads the store once"
    );
    let steps = &survived.expiry_steps;
    let games: u64 = steps.iter().map(|(_, expired)| expired).sum();
    assert_eq!(steps[0].1, 0, "nothing expires before ttl - jitter");
    assert!(
        steps.iter().filter(|(_, expired)| *expired > 0).count() >= 5,
        "the cohort expires over the jitter band: {steps:?}"
    );
    assert!(
        steps.iter().all(|(_, expired)| *expired < games / 2),
        "{steps:?}"
    );
    assert!(
        survived.swept >= games,
        "the sweeper reclaims every dead row"
    );
    assert_eq!(
        survived.full_table,
        (100, 64),
        "a full table keeps its bound and answers every read"
    );
    assert_eq!(report.fallbacks, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workshop_runs_l1_only() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(workshop(&dir)).await.expect("the workshop runs");
    check_moves_1_to_3(&report);
    for (node, served) in &report.hit {
        let l2: u64 = served.iter().map(|table| table.l2).sum();
        assert_eq!(l2, 0, "node {node} has no L2");
    }
    // L1 only, nothing tells node b: it refuses only once told directly.
    assert_eq!(report.revocation.refused_after, None);
    assert!(report.revocation.outage.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_server_node_b_refuses_a_session_revoked_on_node_a_even_with_the_server_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(RedisServer::start());
    let stopping = server.clone();
    let report = run(Workshop {
        l2: Some(server.url()),
        stop_server: Some(Box::new(move || stopping.kill())),
        ..workshop(&dir)
    })
    .await
    .expect("the workshop runs");
    check_moves_1_to_3(&report);
    // Node b found in L2 what node a filled: no store read of its own.
    let (_, b) = &report.hit[1];
    assert!(
        b.iter().all(|table| table.store == 0 && table.l2 > 0),
        "{b:?}"
    );
    let refused = report
        .revocation
        .refused_after
        .expect("node b refuses the revoked session");
    assert!(refused < REFUSAL_BOUND);
    let outage = report
        .revocation
        .outage
        .expect("the program owned the server");
    assert!(
        outage.refused_after.is_some(),
        "with the server stopped, node b still refuses"
    );
    assert!(outage.games_from_l1, "games keep being served from L1");
    assert_eq!(outage.sessions_health, Health::Bypassing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_revocation_check_fails_when_the_cache_is_not_told() {
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start();
    let report = run(Workshop {
        l2: Some(server.url()),
        invalidate: false,
        herd: 10,
        ..workshop(&dir)
    })
    .await
    .expect("the workshop runs");
    assert_eq!(
        report.revocation.refused_after, None,
        "node b serves its L1 copy"
    );
}

/// The README's first command, `cargo run --example codemojex` from the
/// workspace root, resolves the features of every package it selects,
/// dev-dependencies included: the suite's `tls` must not be among them, or
/// a newcomer's first build compiles rustls and ring for nothing.
#[test]
fn the_first_build_from_the_root_compiles_no_tls_stack() {
    let tree = |extra: &[&str]| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = std::process::Command::new(cargo)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .args([
                "tree",
                "--offline",
                "--edges",
                "normal,dev",
                "--invert",
                "rustls",
            ])
            .args(extra)
            .output()
            .expect("cargo runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The query finds rustls where it is: the suite's TLS tests.
    assert!(tree(&["--workspace"]).0, "the suite builds rustls");
    let (found, stderr) = tree(&[]);
    assert!(
        !found && stderr.contains("did not match any packages"),
        "the default members pull rustls: {stderr}"
    );
}

/// Set in the child's environment: the program's arguments, one a line.
const PROGRAM_ARGS: &str = "CODEMOJEX_PROGRAM_ARGS";

/// Not a test: the program, which the tests run as a child process of this
/// binary (see [`program`]).
#[test]
#[ignore = "the program itself, run by the tests as a child process"]
fn codemojex_program() {
    if let Ok(args) = std::env::var(PROGRAM_ARGS) {
        let args = std::iter::once("codemojex").chain(args.lines());
        std::process::exit(codemojex::cli::main(args).into());
    }
}

/// How the program ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs the program on `args`, killed if it takes longer than `bound`.
fn program(args: &[&str], bound: Duration) -> Ran {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["codemojex_program", "--exact", "--ignored", "--nocapture"])
        .env(PROGRAM_ARGS, args.join("\n"))
        .env_remove("ECHO_CACHE_L2")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program starts");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        code: status.and_then(|status| status.code()),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        took: started.elapsed(),
    };
    assert!(
        status.is_some(),
        "codemojex {args:?} still ran after {bound:?}; stdout:\n{}\nstderr (last 2,000 bytes):\n{}",
        ran.stdout,
        &ran.stderr[ran.stderr.len().saturating_sub(2_000)..]
    );
    ran
}

#[test]
fn the_command_line_explains_itself() {
    let bound = Duration::from_secs(10);
    let help = program(&["--help"], bound);
    assert_eq!(help.code, Some(0), "{}", help.stderr);
    for flag in [
        "Usage: codemojex",
        "--l2 <URL>",
        "--own-server",
        "--nodes <N>",
        "--serve",
        "--metrics <ADDR>",
    ] {
        assert!(
            help.stdout.contains(flag),
            "--help lists {flag}:\n{}",
            help.stdout
        );
    }
    for (args, says) in [
        (&["--bogus"][..], "unexpected argument '--bogus'"),
        (
            &["--serve", "--seconds", "-1"],
            "invalid value '-1' for '--seconds <S>': -1 is not in 1..=3600",
        ),
        (
            &["--metrics", "nonsense"],
            "expected IP:PORT to listen on, e.g. 127.0.0.1:9464",
        ),
        (
            &["--own-server", "--l2", "redis://127.0.0.1:6379"],
            "cannot be used with",
        ),
        (
            &["--own-server", "--nodes", "1"],
            "invalid value '1' for '--nodes <N>': 1 is not in 2..=8",
        ),
        (
            &["--nodes", "3"],
            "the following required arguments were not provided:\n  <--l2 <URL>|--own-server>",
        ),
    ] {
        let ran = program(args, bound);
        assert_eq!(ran.code, Some(2), "{args:?}: {}", ran.stderr);
        assert!(
            ran.stderr.contains(says),
            "{args:?} says {says:?}:\n{}",
            ran.stderr
        );
        assert!(ran.stderr.contains("try '--help'"), "{}", ran.stderr);
    }
}

#[test]
fn an_l2_that_does_not_answer_fails_within_the_bound_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    // A loopback port nobody listens on.
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let db = dir.path().join("codemojex.sqlite3");
    let ran = program(
        &["--l2", &url, "--db", db.to_str().unwrap()],
        READY_BOUND * 4,
    );
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    assert!(
        ran.took < READY_BOUND + Duration::from_secs(3),
        "{:?}",
        ran.took
    );
    assert!(!ran.stdout.contains("Move 1"), "{}", ran.stdout);
    assert!(
        ran.stderr
            .contains(&format!("the L2 server at {url} does not answer"))
            && ran.stderr.contains("Connection refused")
            && ran.stderr.contains("--own-server"),
        "{}",
        ran.stderr
    );
    // The link's warning, repeated twice a second, is printed once.
    assert!(ran.stderr.lines().count() < 10, "{}", ran.stderr);
}

#[test]
fn a_server_that_denies_the_invalidation_channel_degrades_and_says_how() {
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start();
    let () = server.query(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg("on")
            .arg(">secret")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .arg("-subscribe")
            .arg("-psubscribe")
            .arg("-ssubscribe")
            .arg("-publish")
            .arg("-spublish")
            .arg("-client|tracking"),
    );
    let url = format!("redis://app:secret@127.0.0.1:{}", server.port());
    let db = dir.path().join("codemojex.sqlite3");
    let ran = program(
        &["--l2", &url, "--db", db.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    let out = &ran.stdout;
    let degraded = out.find("DEGRADED").expect("it says the channel is down");
    assert!(degraded < out.find("Move 1").unwrap(), "{out}");
    assert!(out.contains("NoPerm"), "it says why: {out}");
    assert!(
        out.contains("- cm_sessions (coherence tracking)") && out.contains("bypass their L1"),
        "{out}"
    );
    assert!(
        !out.contains("- cm_games"),
        "games have no channel to lose: {out}"
    );
    assert!(
        out.contains("node b refuses mallory after")
            && out.contains("bypasses its L1 for sessions"),
        "{out}"
    );
    assert!(
        out.trim_end().ends_with("the revocation check passed."),
        "{out}"
    );
}

#[test]
fn l1_only_the_program_claims_no_check_it_did_not_make_and_dumps_no_debug() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("codemojex.sqlite3");
    let ran = program(&["--db", db.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let last = ran.stdout.lines().last().unwrap_or_default();
    assert!(
        last.contains("the cross-node revocation check was not run")
            && last.contains("node b kept the revoked session until told directly"),
        "{last}"
    );
    assert!(!ran.stdout.contains("passed"), "{}", ran.stdout);
    for debug in [
        "TableSpec {",
        "Scored(Score",
        "Stats {",
        "Some(",
        "Bypassing",
    ] {
        assert!(
            !ran.stdout.contains(debug),
            "a Debug dump, {debug:?}:\n{}",
            ran.stdout
        );
    }
}

#[test]
fn serving_both_nodes_makes_every_revocation_and_shows_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start();
    let db = dir.path().join("serve.sqlite3");
    let ran = program(
        &[
            "--l2",
            &server.url(),
            "--db",
            db.to_str().unwrap(),
            "--serve",
            "--tasks",
            "8",
            "--seconds",
            "2",
            "--revocations",
            "50",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    let out = &ran.stdout;
    assert!(out.contains("revoked 100 of 100 sessions."), "{out}");
    for node in ["a", "b"] {
        for table in ["cm_sessions", "cm_games", "cm_emojisets"] {
            assert!(
                out.lines()
                    .any(|line| line.starts_with(&format!("{node:<4} {table} "))),
                "node {node}'s {table} on the board: {out}"
            );
        }
    }
    assert!(
        out.contains("fell back to the store (the cache erred): 0."),
        "{out}"
    );
}

#[test]
fn move_4_on_three_processes_loads_once_and_every_process_hears_the_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("codemojex.sqlite3");
    let ran = program(
        &["--own-server", "--nodes", "3", "--db", db.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    let out = &ran.stdout;
    let lines = |starting: &str| -> Vec<&str> {
        out.lines()
            .filter(|line| line.trim_start().starts_with(starting))
            .collect()
    };
    // Three processes of their own, none of them this test's.
    let pids = out
        .split_once("processes of this program (pids ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(pids, _)| pids.split(", ").collect::<std::collections::BTreeSet<_>>())
        .unwrap_or_else(|| panic!("the processes' ids: {out}"));
    assert_eq!(pids.len(), 3, "{out}");
    assert!(!pids.contains(std::process::id().to_string().as_str()));
    // (a) The revocation on process 1, refused by the others.
    for n in [2, 3] {
        assert!(
            out.contains(&format!("process {n} refuses mallory after")),
            "{out}"
        );
    }
    // (c) Every process herds on the cold board; the store reads it once.
    let herds = lines("process 1: 500 readers")
        .into_iter()
        .chain(lines("process 2: 500 readers"))
        .chain(lines("process 3: 500 readers"))
        .count();
    assert_eq!(herds, 3, "{out}");
    assert!(
        out.contains("Store reads of the board across the 3 processes: 1."),
        "{out}"
    );
    // (b) The put's versioned message reaches the two others, which read
    // the writer's version.
    let put = out
        .split_once("cache.put(id, board), at version ")
        .map(|(_, rest)| &rest[..14])
        .unwrap_or_else(|| panic!("the put's version: {out}"));
    assert!(
        out.contains(&format!(":{put}.")),
        "the message carries it: {out}"
    );
    let heard = lines("process ")
        .into_iter()
        .filter(|line| line.contains("told InvalidatedRemotely"))
        .filter(|line| line.ends_with(&format!("at version {put}: the writer's.")))
        .count();
    assert_eq!(heard, 2, "{out}");
    // (d) invalidate_all: every process's L1 flushed, every one reads afresh.
    let afresh = lines("process ")
        .into_iter()
        .filter(|line| line.contains("its L1 of cm_boards flushed"))
        .filter(|line| line.ends_with("newer than the floor."))
        .count();
    assert_eq!(afresh, 3, "{out}");
    assert!(
        out.trim_end().ends_with(
            "the revocation, fleet herd, versioned message and invalidate_all checks passed on \
             every process."
        ),
        "{out}"
    );
}
