//! Coherence across two OS processes: this test binary runs itself again as
//! a child node (the ignored test `child_node`, selected by an environment
//! variable that carries the server's URL and the ids), which builds its
//! own cache on the same server, fills a row of each coherent table and
//! holds it; the parent writes both ids; the child observes the evictions
//! and reports them on its stdout. The system of record both processes
//! load from is a key per id on the same server.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::coherence_support::{
    BOUND, Broadcast, Entity, Tracked, builder_for, eventually, linked,
};
use echo_cache::{Builder, Cache, Cached, Id, Minter, Source};
use echo_cache_testkit::RedisServer;

/// Set in the child's environment: `<server url> <tracked id> <broadcast id>`.
const CHILD_ENV: &str = "ECHO_CACHE_COHERENCE_CHILD";

/// What the child prints before each report, to tell it from the harness.
const REPORT: &str = "child-node:";

/// The system of record's key of `id`: its revision (absent: 0).
fn sor_key<T: Cached>(id: Id<T>) -> String {
    format!("sor:{id}")
}

fn loader<T: Entity>(builder: Builder, client: &redis::Client) -> Builder {
    let client = client.clone();
    builder.loader(move |id: Id<T>| {
        let client = client.clone();
        async move {
            let mut connection = client.get_multiplexed_async_connection().await?;
            let revision: Option<u64> = redis::cmd("GET")
                .arg(sor_key(id))
                .query_async(&mut connection)
                .await?;
            Ok::<_, redis::RedisError>(Some(T::at(revision.unwrap_or(0))))
        }
    })
}

/// A node on the server at `url` that loads from the system of record there.
fn node(url: &str) -> Cache {
    let client = redis::Client::open(url).expect("a URL");
    let builder = loader::<Tracked>(builder_for(url), &client);
    loader::<Broadcast>(builder, &client)
        .build()
        .expect("cache builds")
}

/// The child kills its process when dropped, unless it was reaped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The child's reports, line by line, each within [`BOUND`].
struct Reports(mpsc::Receiver<String>);

impl Reports {
    fn next(&self, what: &str) -> String {
        match self.0.recv_timeout(BOUND) {
            Ok(line) => line,
            Err(e) => panic!("the child did not report {what} within {BOUND:?}: {e}"),
        }
    }
}

/// The name the harness knows [`child_node`] by: its path in this binary,
/// without the crate's name.
fn child_test() -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::child_node"),
        None => "child_node".to_owned(),
    }
}

fn spawn_child(server: &RedisServer, t: Id<Tracked>, w: Id<Broadcast>) -> (Guard, Reports) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args([&child_test(), "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_ENV, format!("{} {t} {w}", server.url()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("piped");
    let (lines, reports) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            // The harness may have started the line ("test child_node ... ").
            if let Some((_, report)) = line.split_once(REPORT)
                && lines.send(report.trim().to_owned()).is_err()
            {
                return;
            }
        }
    });
    (Guard(child), Reports(reports))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_one_process_evicts_the_row_in_another() {
    let server = RedisServer::start();
    let parent = node(&server.url());
    linked(&parent).await;
    let (t, w) = (Id::<Tracked>::mint(), Id::<Broadcast>::mint());

    let (mut child, reports) = spawn_child(&server, t, w);
    assert_eq!(reports.next("that it holds its rows"), "holding");

    // A put of one, an invalidation of the other (the child then loads).
    let revision: u64 = server.query(redis::cmd("INCR").arg(sor_key(t)));
    parent.put(t, Tracked::at(revision)).await.unwrap();
    let revision: u64 = server.query(redis::cmd("INCR").arg(sor_key(w)));
    parent.invalidate(w).await.unwrap();
    assert_eq!(revision, 1);

    let mut evicted = [
        reports.next("an eviction"),
        reports.next("the other eviction"),
    ];
    evicted.sort();
    assert_eq!(evicted, ["evicted broadcast 1", "evicted tracked 1"]);

    let deadline = Instant::now() + BOUND;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("the child's status") {
            break status;
        }
        assert!(Instant::now() < deadline, "the child did not exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(status.success(), "the child failed: {status}");
}

fn report(line: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{REPORT} {line}")
        .and_then(|()| stdout.flush())
        .expect("stdout");
}

/// Holds `id` until a fetch answers `revision` (not from L1); reports it.
async fn evicted<T: Entity>(child: &Cache, id: Id<T>, revision: u64) {
    eventually("the parent's write evicts the child's row", async || {
        let fetched = child.fetch(id).await.expect("fetch");
        assert!(
            fetched.revision() == 0 || fetched.source() != Source::Hit,
            "a row the child never filled"
        );
        fetched.revision() == revision
    })
    .await;
    report(&format!("evicted {} {revision}", T::spec().name()));
}

/// The child node: run by `a_write_in_one_process_evicts_the_row_in_another`
/// (does nothing without its environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_write_in_one_process_evicts_the_row_in_another"]
async fn child_node() {
    let Ok(setting) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut words = setting.split(' ');
    let (Some(url), Some(t), Some(w)) = (words.next(), words.next(), words.next()) else {
        panic!("{CHILD_ENV}={setting:?}: expected a URL and two ids");
    };
    let t = Id::<Tracked>::parse(t).expect("a tracked id");
    let w = Id::<Broadcast>::parse(w).expect("a broadcast id");
    // Another node: ids and versions minted here never collide with the
    // parent's.
    assert!(Minter::global().set_node(7));

    let child = node(url);
    linked(&child).await;
    for _ in 0..2 {
        assert_eq!(child.fetch(t).await.unwrap().revision, 0);
        assert_eq!(child.fetch(w).await.unwrap().revision, 0);
    }
    assert_eq!(child.fetch(t).await.unwrap().source(), Source::Hit);
    assert_eq!(child.fetch(w).await.unwrap().source(), Source::Hit);
    report("holding");

    tokio::join!(evicted(&child, t, 1), evicted(&child, w, 1));
}
