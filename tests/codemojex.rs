//! The codemojex workshop (examples/codemojex) run both ways, L1 only and
//! over a real server, and its story checked: one store read per herd, a
//! cohort that never expires together, a revoked session refused on the
//! other node — and a check that fails when the cache is not told.

use std::sync::Arc;
use std::time::Duration;

use codemojex::{Workshop, moves::REFUSAL_BOUND, run};
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
    assert_eq!(report.declared, ["cm_emojisets", "cm_games", "cm_sessions"]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_scores_and_revokes() {
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start();
    let store = codemojex::open_store(&dir.path().join("serve.sqlite3")).unwrap();
    let (a, b) = codemojex::nodes(&store, Some(&server.url())).await.unwrap();
    let load = codemojex::serve::Load {
        tasks: 4,
        duration: Duration::from_millis(500),
        revocations_per_second: 50,
    };
    let summary = codemojex::serve::serve(&[a, b], &store, load)
        .await
        .unwrap();
    assert!(summary.scored > 0 && summary.revoked > 0, "{summary:?}");
    assert_eq!(summary.fallbacks, 0);
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
