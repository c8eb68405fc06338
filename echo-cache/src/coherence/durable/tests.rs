//! Tests of the durable lane against a real server, with tables that
//! record what the lane does to them.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::mpsc as std_mpsc;

use echo_cache_testkit::RedisServer;
use tokio::task::JoinHandle;

use super::*;
use crate::entity::id::RawId;
use crate::entity::kind::Kind;
use crate::entity::spec::{Coherence, TableSpec};

const fn spec(name: &'static str, kind: &'static str) -> TableSpec {
    TableSpec {
        name,
        type_name: "Probe",
        kind: Kind::new(kind),
        ttl_ms: 60_000,
        jitter: 0.0,
        max_size: 100,
        max_bytes: None,
        sweep_ms: 1_000,
        absent_ttl_ms: 0,
        load_timeout_ms: None,
        lost_grace_ms: 0,
        stale_if_error_ms: 0,
        soft_timeout_ms: None,
        refresh_ms: 0,
        idle_ms: 0,
        coherence: Coherence::Durable,
        placement: crate::entity::spec::Placement::Table,
        eviction: crate::entity::spec::Eviction::Hot,
        warm: crate::entity::spec::Warm::Off,
        herd: crate::entity::spec::Herd::Node,
        warm_ids: 1_000,
        fingerprint: 0,
    }
}

static ONE: TableSpec = spec("durable_one", "DUA");
static TWO: TableSpec = spec("durable_two", "DUB");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Apply(u64, u64),
    Malformed,
    Flush,
    Trust,
    Distrust,
}

/// A table that records what the lane does to it.
struct Probe {
    spec: &'static TableSpec,
    events: Mutex<Vec<Event>>,
    /// How long each apply takes.
    delay: Duration,
    /// An apply of this key waits for the receiver (at most 10 s).
    gate: Mutex<Option<(u64, std_mpsc::Receiver<()>)>>,
}

impl Probe {
    fn new(spec: &'static TableSpec) -> Arc<Probe> {
        Probe::slow(spec, Duration::ZERO)
    }

    fn slow(spec: &'static TableSpec, delay: Duration) -> Arc<Probe> {
        Arc::new(Probe {
            spec,
            events: Mutex::new(Vec::new()),
            delay,
            gate: Mutex::new(None),
        })
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    fn applied(&self) -> Vec<(u64, u64)> {
        self.events()
            .into_iter()
            .filter_map(|event| match event {
                Event::Apply(key, version) => Some((key, version)),
                _ => None,
            })
            .collect()
    }

    fn count(&self, wanted: Event) -> usize {
        self.events().iter().filter(|&&e| e == wanted).count()
    }

    fn stream(&self) -> String {
        crate::keyspace::stream(self.spec)
    }
}

impl Target for Probe {
    fn spec(&self) -> &'static TableSpec {
        self.spec
    }
    fn flush(&self) {
        self.record(Event::Flush);
    }
    fn drop_tag(&self, _tag: crate::entity::tag::Tag, _version: Option<u64>) {}

    fn apply(&self, key: u64, version: Option<u64>) {
        std::thread::sleep(self.delay);
        let gate = self.gate.lock().unwrap().take();
        match gate {
            Some((gated, wait)) if gated == key => {
                // Blocks this worker only: another takes over its
                // timers and I/O meanwhile.
                tokio::task::block_in_place(|| wait.recv_timeout(Duration::from_secs(10))).unwrap();
            }
            other => *self.gate.lock().unwrap() = other,
        }
        self.record(Event::Apply(key, version.expect("versioned")));
    }
    fn distrust(&self) {
        self.record(Event::Distrust);
    }
    fn trust(&self) {
        self.record(Event::Trust);
    }
    fn malformed(&self) {
        self.record(Event::Malformed);
    }
    fn redeliver(&self) -> futures_util::future::BoxFuture<'_, bool> {
        Box::pin(std::future::ready(true))
    }
}

fn settings() -> Settings {
    Settings {
        deadline: Duration::from_millis(500),
        block: Duration::from_millis(50),
        batch: 16,
        claim_idle: Duration::from_millis(20),
        retention: Duration::from_secs(24 * 3600),
        cleanup_every: Duration::from_millis(50),
    }
}

/// A running lane; dropping `stop` ends it.
struct Node {
    stop: watch::Sender<()>,
    task: JoinHandle<()>,
}

impl Node {
    fn start(server: &RedisServer, name: &str, probes: &[&Arc<Probe>], settings: Settings) -> Node {
        let tables = probes
            .iter()
            .map(|&probe| Arc::clone(probe) as Arc<dyn Target>)
            .collect();
        let (stop, stopped) = watch::channel(());
        let server = crate::connections::Server::open(
            &crate::connections::Address::Server(server.url()),
            None,
            Duration::from_secs(2),
            Duration::from_secs(1),
        )
        .expect("a valid URL");
        let task = tokio::spawn(run(
            Arc::new(server),
            tables,
            name.to_owned(),
            settings,
            stopped,
        ));
        Node { stop, task }
    }

    async fn stop(self) {
        drop(self.stop);
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the lane ends when its stop sender is dropped")
            .unwrap();
    }
}

fn message(probe: &Probe, key: u64, version: u64) -> [u8; message::LEN] {
    let kind = probe.spec.kind();
    message::encode(&RawId::new(kind, key), &RawId::new(kind, version))
}

/// Appends the message `key:version` to the probe's stream, as a
/// durable write does; its entry id.
fn add(server: &RedisServer, probe: &Probe, key: u64, version: u64) -> String {
    server.query(
        redis::cmd("XADD")
            .arg(probe.stream())
            .arg("*")
            .arg("m")
            .arg(&message(probe, key, version)[..]),
    )
}

fn pending(server: &RedisServer, stream: &str, group: &str) -> i64 {
    let summary: Value = server.query(redis::cmd("XPENDING").arg(stream).arg(group));
    items(&summary)
        .first()
        .and_then(int)
        .expect("XPENDING count")
}

fn groups(server: &RedisServer, stream: &str) -> Vec<String> {
    let groups: Value = server.query(redis::cmd("XINFO").arg("GROUPS").arg(stream));
    items(&groups)
        .iter()
        .filter_map(|g| field(g, "name").and_then(bytes))
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect()
}

/// Waits (at most 10 s) until `done`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every `(key, version)` sent was applied at least once and, within
/// each session (sessions end with a distrust), the versions applied to
/// a key never go backwards: catch-up applies the pending entries, in
/// order, before any newer one. (Across sessions a repeat of an older
/// message follows a newer one; the table's newer-wins makes it a no-op.)
fn assert_applied_in_order(events: &[Event], sent: &[(u64, u64)]) {
    let mut newest: BTreeMap<u64, u64> = BTreeMap::new();
    for event in events {
        match *event {
            Event::Distrust => newest.clear(),
            Event::Apply(key, version) => {
                let before = newest.insert(key, version).unwrap_or(0);
                assert!(
                    version >= before,
                    "key {key}: {version} applied after {before} in one session"
                );
            }
            _ => {}
        }
    }
    for &(key, version) in sent {
        assert!(
            events.contains(&Event::Apply(key, version)),
            "{key}:{version} never applied"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_applied_then_acknowledged_through_the_nodes_group() {
    let server = RedisServer::start();
    let probe = Probe::new(&ONE);
    let node = Node::start(&server, "b", &[&probe], settings());
    until("trusted", || probe.count(Event::Trust) == 1).await;

    let sent: Vec<(u64, u64)> = (1..=40).map(|n| (n % 7, n)).collect();
    for &(key, version) in &sent {
        add(&server, &probe, key, version);
    }
    let _: String = server.query(
        redis::cmd("XADD")
            .arg(probe.stream())
            .arg("*")
            .arg("m")
            .arg("junk"),
    );
    let _: String = server.query(
        redis::cmd("XADD")
            .arg(probe.stream())
            .arg("*")
            .arg("x")
            .arg("y"),
    );
    until("all applied", || {
        probe.applied().len() == sent.len() && probe.count(Event::Malformed) == 2
    })
    .await;
    until("all acknowledged", || {
        pending(&server, &probe.stream(), "ecc:b") == 0
    })
    .await;
    assert_applied_in_order(&probe.events(), &sent);
    assert_eq!(groups(&server, &probe.stream()), ["ecc:b"]);
    let consumers: Value = server.query(
        redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(probe.stream())
            .arg("ecc:b"),
    );
    let names: Vec<_> = items(&consumers)
        .iter()
        .filter_map(|c| field(c, "name").and_then(bytes))
        .collect();
    assert_eq!(names, [b"b"]);
    assert_eq!(probe.count(Event::Distrust), 0);
    assert_eq!(probe.count(Event::Flush), 0);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_batch_applies_every_message_and_drains_its_pending_list() {
    let server = RedisServer::start();
    let probe = Probe::new(&ONE);
    let node = Node::start(&server, "b", &[&probe], settings());
    until("trusted", || probe.count(Event::Trust) == 1).await;

    // The apply of 1000 (in the middle of a batch) waits for the kill.
    let (release, gate) = std_mpsc::channel();
    *probe.gate.lock().unwrap() = Some((1_000, gate));
    let mut sent: Vec<(u64, u64)> = (1..=300).map(|n| (n % 10, n)).collect();
    sent.insert(150, (1_000, 1_000));
    for &(key, version) in &sent {
        add(&server, &probe, key, version);
    }
    until("a batch under way", || probe.gate.lock().unwrap().is_none()).await;
    let clients: String = server.query(redis::cmd("CLIENT").arg("LIST"));
    let id = clients
        .lines()
        .find(|line| line.contains("name=ecc-durable:b "))
        .and_then(|line| line.split(' ').find_map(|kv| kv.strip_prefix("id=")))
        .expect("the lane's connection is named")
        .to_owned();
    let killed: i64 = server.query(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(&id));
    assert_eq!(killed, 1);
    release.send(()).unwrap();

    until("a new session", || probe.count(Event::Trust) == 2).await;
    until("every message applied", || {
        let applied = probe.applied();
        sent.iter().all(|pair| applied.contains(pair))
    })
    .await;
    until("the pending list drained", || {
        pending(&server, &probe.stream(), "ecc:b") == 0
    })
    .await;
    let again = probe.count(Event::Apply(1_000, 1_000));
    assert_eq!(again, 2, "the batch read before the kill was read again");
    let events = probe.events();
    let lost = events
        .iter()
        .position(|&e| e == Event::Distrust)
        .expect("distrusted");
    assert!(lost > events.iter().position(|&e| e == Event::Trust).unwrap());
    assert_applied_in_order(&probe.events(), &sent);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_under_its_name_catches_up_on_what_it_missed() {
    let server = RedisServer::start();
    let first = Probe::slow(&ONE, Duration::from_millis(1));
    let node = Node::start(&server, "b", &[&first], settings());
    until("trusted", || first.count(Event::Trust) == 1).await;

    // Stopped in the middle of a batch: what it read and did not
    // acknowledge stays pending on it.
    let mut sent: Vec<(u64, u64)> = (1..=100).map(|n| (n % 10, n)).collect();
    for &(key, version) in &sent {
        add(&server, &first, key, version);
    }
    until("a batch under way", || first.applied().len() >= 5).await;
    node.stop().await;
    // Written while it is away.
    for n in 101..=150 {
        add(&server, &first, n % 10, n);
        sent.push((n % 10, n));
    }
    // A node that starts afresh needs only what comes after it.
    let fresh = Probe::new(&ONE);
    let other = Node::start(&server, "c", &[&fresh], settings());
    until("c trusted", || fresh.count(Event::Trust) == 1).await;

    let second = Probe::new(&ONE);
    let node = Node::start(&server, "b", &[&second], settings());
    until("every message applied", || {
        let applied: Vec<_> = first
            .applied()
            .into_iter()
            .chain(second.applied())
            .collect();
        sent.iter().all(|pair| applied.contains(pair))
    })
    .await;
    until("b trusted", || second.count(Event::Trust) == 1).await;
    let events = second.events();
    let trusted = events.iter().position(|&e| e == Event::Trust);
    let caught_up = events
        .iter()
        .position(|&e| e == Event::Apply(150 % 10, 150));
    assert!(
        caught_up.is_some(),
        "caught up on what was written while away"
    );
    assert!(
        caught_up < trusted,
        "trusted only after catching up: {events:?}"
    );
    until("the pending list drained", || {
        pending(&server, &second.stream(), "ecc:b") == 0
    })
    .await;
    assert_applied_in_order(&second.events(), &[]);

    add(&server, &fresh, 1, 1_000);
    until("c applied the new message", || {
        fresh.applied().contains(&(1, 1_000))
    })
    .await;
    assert_eq!(
        fresh.applied(),
        [(1, 1_000)],
        "c read nothing from before it started"
    );
    node.stop().await;
    other.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_trimmed_while_pending_flush_the_table() {
    let server = RedisServer::start();
    let (own, others) = (Probe::new(&ONE), Probe::new(&TWO));
    for probe in [&own, &others] {
        let _: () = server.query(
            redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(probe.stream())
                .arg("ecc:b")
                .arg("$")
                .arg("MKSTREAM"),
        );
    }
    let read = |probe: &Probe, consumer: &str, count: usize| {
        let _: Value = server.query(
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg("ecc:b")
                .arg(consumer)
                .arg("COUNT")
                .arg(count)
                .arg("STREAMS")
                .arg(probe.stream())
                .arg(">"),
        );
    };
    let trim = |probe: &Probe, to: usize| {
        let _: i64 = server.query(
            redis::cmd("XTRIM")
                .arg(probe.stream())
                .arg("MAXLEN")
                .arg(to),
        );
    };
    // Pending on this node's consumer, then trimmed.
    add(&server, &own, 1, 1);
    add(&server, &own, 2, 2);
    read(&own, "b", 2);
    add(&server, &own, 3, 3);
    trim(&own, 1);
    // Pending on another consumer of the group: one trimmed, one not.
    add(&server, &others, 1, 1);
    add(&server, &others, 2, 2);
    read(&others, "other", 2);
    add(&server, &others, 3, 3);
    trim(&others, 2);
    assert_eq!(pending(&server, &own.stream(), "ecc:b"), 2);
    assert_eq!(pending(&server, &others.stream(), "ecc:b"), 2);
    tokio::time::sleep(settings().claim_idle * 2).await;

    let node = Node::start(&server, "b", &[&own, &others], settings());
    until("trusted", || {
        own.count(Event::Trust) == 1 && others.count(Event::Trust) == 1
    })
    .await;
    until("the rest applied", || {
        own.applied() == [(3, 3)] && others.applied() == [(2, 2), (3, 3)]
    })
    .await;
    for probe in [&own, &others] {
        let events = probe.events();
        let flushed = events.iter().position(|&e| e == Event::Flush);
        let trusted = events.iter().position(|&e| e == Event::Trust);
        assert!(flushed < trusted && flushed.is_some(), "{events:?}");
        until("the pending list drained", || {
            pending(&server, &probe.stream(), "ecc:b") == 0
        })
        .await;
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_trimmed_past_flushes_the_table() {
    let server = RedisServer::start();
    let (behind, intact) = (Probe::new(&ONE), Probe::new(&TWO));
    let node = Node::start(&server, "b", &[&behind, &intact], settings());
    until("trusted", || behind.count(Event::Trust) == 1).await;
    add(&server, &behind, 1, 1);
    add(&server, &intact, 1, 1);
    until("applied", || {
        behind.applied().len() == 1 && intact.applied().len() == 1
    })
    .await;
    node.stop().await;

    // While the node is away, its stream rolls over what it had not read.
    for n in 2..=10 {
        let _: String = server.query(
            redis::cmd("XADD")
                .arg(behind.stream())
                .arg("MAXLEN")
                .arg(3)
                .arg("*")
                .arg("m")
                .arg(&message(&behind, n, n)[..]),
        );
        add(&server, &intact, n, n);
    }
    let node = Node::start(&server, "b", &[&behind, &intact], settings());
    until("trusted again", || behind.count(Event::Trust) == 2).await;
    until("caught up", || {
        behind.applied().contains(&(10, 10)) && intact.applied().contains(&(10, 10))
    })
    .await;
    // Flushed before it was trusted again (and maybe once more after
    // its first read, which starts at the first entry left: counted as
    // maybe trimmed up to, a harmless false alarm).
    let events = behind.events();
    let second_trust = events.iter().rposition(|&e| e == Event::Trust).unwrap();
    assert!(events[..second_trust].contains(&Event::Flush), "{events:?}");
    assert_eq!(intact.count(Event::Flush), 0, "{:?}", intact.events());
    assert_eq!(intact.applied().len(), 10);

    // While it reads, a slow batch lets the stream roll over again.
    let flushes = behind.count(Event::Flush);
    let (release, gate) = std_mpsc::channel();
    *behind.gate.lock().unwrap() = Some((100, gate));
    add(&server, &behind, 100, 100);
    until("the gated apply under way", || {
        behind.gate.lock().unwrap().is_none()
    })
    .await;
    for n in 101..=110 {
        let _: String = server.query(
            redis::cmd("XADD")
                .arg(behind.stream())
                .arg("MAXLEN")
                .arg(2)
                .arg("*")
                .arg("m")
                .arg(&message(&behind, n, n)[..]),
        );
    }
    release.send(()).unwrap();
    until("caught up", || behind.applied().contains(&(110, 110))).await;
    until("flushed", || behind.count(Event::Flush) > flushes).await;
    assert_eq!(behind.count(Event::Distrust), 0, "the session went on");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_of_nodes_gone_for_long_are_destroyed() {
    let server = RedisServer::start();
    let probe = Probe::new(&ONE);
    let stream = probe.stream();
    for group in ["ecc:gone", "ecc:never", "app"] {
        let _: () = server.query(
            redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&stream)
                .arg(group)
                .arg("$")
                .arg("MKSTREAM"),
        );
    }
    for (group, consumer) in [("ecc:gone", "gone"), ("app", "worker")] {
        let _: Value = server.query(
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(group)
                .arg(consumer)
                .arg("STREAMS")
                .arg(&stream)
                .arg(">"),
        );
    }
    let settings = Settings {
        retention: Duration::from_secs(1),
        ..settings()
    };
    let live = Probe::new(&ONE);
    let c = Node::start(&server, "c", &[&live], settings.clone());
    until("c trusted", || live.count(Event::Trust) == 1).await;
    let a = Node::start(&server, "a", &[&probe], settings);
    until("a trusted", || probe.count(Event::Trust) == 1).await;
    let mut before = groups(&server, &stream);
    before.sort();
    assert_eq!(
        before,
        ["app", "ecc:a", "ecc:c", "ecc:gone", "ecc:never"],
        "kept within retention"
    );

    until("the gone groups destroyed", || {
        let left = groups(&server, &stream);
        !left.iter().any(|g| g == "ecc:gone" || g == "ecc:never")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut after = groups(&server, &stream);
    after.sort();
    assert_eq!(
        after,
        ["app", "ecc:a", "ecc:c"],
        "live nodes' and others' groups stay"
    );
    a.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_server_distrusts_the_tables_until_a_session_is_back() {
    let server = RedisServer::start();
    let probe = Probe::new(&ONE);
    let settings = Settings {
        deadline: Duration::from_millis(200),
        ..settings()
    };
    let node = Node::start(&server, "b", &[&probe], settings);
    until("trusted", || probe.count(Event::Trust) == 1).await;

    server.pause();
    until("distrusted when the server stops answering", || {
        probe.count(Event::Distrust) == 1
    })
    .await;
    server.resume();
    until("trusted again", || probe.count(Event::Trust) == 2).await;
    add(&server, &probe, 1, 1);
    until("applied", || probe.applied() == [(1, 1)]).await;

    // A server restarted empty: the group is made again.
    server.kill();
    until("distrusted when the server is gone", || {
        probe.count(Event::Distrust) == 2
    })
    .await;
    server.restart();
    until("trusted again", || probe.count(Event::Trust) >= 3).await;
    add(&server, &probe, 2, 2);
    until("applied", || probe.applied().contains(&(2, 2))).await;
    node.stop().await;
}
