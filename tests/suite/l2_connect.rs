//! Connecting to L2 against a real server: an ACL user, a wrong password, a
//! database index, TLS (`rediss://`) with a private CA, and what `build`
//! checks (the URL) versus what only the server can (credentials, database,
//! certificates: L2 errors, the loader serves).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use crate::common::health;
use echo_cache::{Builder, Cache, Cached, Error, Health, Id, Source, keyspace, near_cache};
use echo_cache_testkit::RedisServer;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

#[near_cache(kind = "CON", ttl_ms = 60_000, name = "connect_games")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn game_of(id: Id<Game>) -> Game {
    Game {
        secret: format!("secret of {id}"),
    }
}

fn key(id: Id<Game>) -> String {
    keyspace::key(Game::spec(), &id.raw())
}

/// A builder for one node, whose loader counts its calls.
fn builder(url: &str, calls: &Arc<AtomicUsize>) -> Builder {
    let counted = Arc::clone(calls);
    cache_builder()
        .l2(url)
        // Generous: a loaded CI must not turn an expected L2 hit into a
        // timeout. The bad-credential tests do not wait for it: the breaker
        // refuses after the first failure.
        .l2_timeout(Duration::from_secs(2))
        .loader(move |id: Id<Game>| {
            counted.fetch_add(1, SeqCst);
            async move { Ok::<_, Infallible>(Some(game_of(id))) }
        })
}

/// A node on `url`, with its count of loader calls.
fn node(url: &str) -> (Cache, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let cache = builder(url, &calls).build().expect("cache builds");
    (cache, calls)
}

/// Creates the ACL user `app` (password `secret`), allowed on the cache's
/// keys only.
fn create_app_user(server: &RedisServer) {
    let () = server.query(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg("on")
            .arg(">secret")
            .arg("~ecc:*")
            .arg("+@all"),
    );
}

/// Node A fills `id` through `url`; node B, on the same `url`, reads it
/// from L2 without calling its loader. Neither counts an L2 error.
async fn fills_and_reads_through(url: &str) -> Id<Game> {
    let (a, a_calls) = node(url);
    let (b, b_calls) = node(url);
    let id = Id::<Game>::mint();

    let filled = a.fetch(id).await.expect("A fetches");
    assert_eq!(filled.source(), Source::Fill);
    let shared = b.fetch(id).await.expect("B fetches");
    assert_eq!(shared.source(), Source::L2, "B reads what A filled from L2");
    assert_eq!(*shared, game_of(id));
    assert_eq!((a_calls.load(SeqCst), b_calls.load(SeqCst)), (1, 0));
    assert_eq!(a.stats::<Game>().l2_errors, 0, "{:?}", a.stats::<Game>());
    assert_eq!(b.stats::<Game>().l2_errors, 0, "{:?}", b.stats::<Game>());
    assert_eq!(b.stats::<Game>().l2_hits, 1);
    id
}

/// Fetches fresh ids through `cache`: every one is answered by the loader,
/// none fails, and L2 errors are counted. Returns the ids.
async fn serves_from_the_loader(cache: &Cache, calls: &AtomicUsize) -> Vec<Id<Game>> {
    let ids: Vec<Id<Game>> = (0..5).map(|_| Id::mint()).collect();
    for &id in &ids {
        let fetched = tokio::time::timeout(Duration::from_secs(10), cache.fetch(id))
            .await
            .expect("answered in time")
            .expect("no error reaches the caller");
        assert_eq!(fetched.source(), Source::Fill);
        assert_eq!(*fetched, game_of(id));
    }
    assert_eq!(calls.load(SeqCst), ids.len());
    let stats = cache.stats::<Game>();
    assert!(stats.l2_errors > 0, "L2 errors are counted: {stats:?}");
    assert_eq!(stats.l2_hits, 0, "{stats:?}");
    ids
}

/// Whether `key` exists in database `db`, on a raw connection as the
/// `default` user.
fn exists_in(server: &RedisServer, db: i64, key: &str) -> bool {
    let mut raw = server.blocking_connection();
    let () = redis::cmd("SELECT")
        .arg(db)
        .query(&mut raw)
        .expect("SELECT");
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut raw)
        .expect("EXISTS")
}

fn dbsize(server: &RedisServer) -> i64 {
    server.query(&redis::cmd("DBSIZE"))
}

fn build_error(builder: Builder) -> String {
    match builder.build() {
        Err(Error::Config(message)) => message,
        Err(other) => panic!("not a config error: {other:?}"),
        Ok(_) => panic!("built"),
    }
}

#[tokio::test]
async fn an_acl_user_fills_and_reads_l2() {
    let server = RedisServer::start();
    create_app_user(&server);
    let url = format!("redis://app:secret@127.0.0.1:{}", server.port());

    let id = fills_and_reads_through(&url).await;
    assert!(exists_in(&server, 0, &key(id)));
    // The cache's connections are logged in as `app`.
    let clients: String = server.query(redis::cmd("CLIENT").arg("LIST"));
    assert!(
        clients.lines().any(|c| c.contains(" user=app ")),
        "{clients}"
    );
}

#[tokio::test]
async fn an_acl_user_limited_to_other_keys_cannot_write_the_cache() {
    let server = RedisServer::start();
    let () = server.query(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("other")
            .arg("on")
            .arg(">secret")
            .arg("~other:*")
            .arg("+@all"),
    );
    let url = format!("redis://other:secret@127.0.0.1:{}", server.port());
    let (cache, calls) = node(&url);

    serves_from_the_loader(&cache, &calls).await;
    assert_eq!(dbsize(&server), 0, "nothing was written");
}

#[tokio::test]
async fn a_wrong_password_builds_and_serves_from_the_loader() {
    let server = RedisServer::start();
    create_app_user(&server);
    let url = format!("redis://app:wrong@127.0.0.1:{}", server.port());
    // `build` sends nothing: the credentials are not checked there.
    let (cache, calls) = node(&url);

    serves_from_the_loader(&cache, &calls).await;
    assert_eq!(dbsize(&server), 0, "nothing was written");
    // A refused login opens the breaker: one probe per interval, not one
    // login per fetch.
    assert_eq!(health::<Game>(&cache), Health::L2Down);
    // The server saw the failed login.
    let failures: Vec<redis::Value> = server.query(redis::cmd("ACL").arg("LOG"));
    assert!(!failures.is_empty(), "ACL LOG records the failed AUTH");
}

#[tokio::test]
async fn an_unknown_user_serves_from_the_loader() {
    let server = RedisServer::start();
    let url = format!("redis://nobody:secret@127.0.0.1:{}", server.port());
    let (cache, calls) = node(&url);
    serves_from_the_loader(&cache, &calls).await;
    assert_eq!(dbsize(&server), 0);
}

#[tokio::test]
async fn a_db_index_puts_the_frames_in_that_database() {
    let server = RedisServer::start();
    let url = format!("{}/3", server.url());

    let id = fills_and_reads_through(&url).await;
    assert!(exists_in(&server, 3, &key(id)), "the frame is in db 3");
    assert!(!exists_in(&server, 0, &key(id)), "and not in db 0");

    // A node on db 0 does not see it.
    let (other, calls) = node(&server.url());
    assert_eq!(other.fetch(id).await.unwrap().source(), Source::Fill);
    assert_eq!(calls.load(SeqCst), 1);
}

#[tokio::test]
async fn a_db_index_the_server_does_not_have_serves_from_the_loader() {
    let server = RedisServer::start(); // 16 databases: 0..=15
    let (cache, calls) = node(&format!("{}/99", server.url()));
    serves_from_the_loader(&cache, &calls).await;
    assert_eq!(dbsize(&server), 0);
}

#[tokio::test]
async fn a_malformed_address_fails_build_without_showing_the_password() {
    for url in [
        "redis://app:hunter2@127.0.0.1:notaport",
        "redis://app:hunter2@127.0.0.1:6379/notadb",
        "http://app:hunter2@127.0.0.1:6379",
    ] {
        let message = build_error(cache_builder().l2(url));
        assert!(message.contains("L2 address"), "{message}");
        assert!(
            !message.contains("hunter2"),
            "the password leaked: {message}"
        );
    }
}

/// A throwaway PKI: a CA and a server certificate for `127.0.0.1` and
/// `localhost` signed by it.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "echo-cache test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate().unwrap();
    let mut server =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = server.signed_by(&key, &issuer).unwrap();
    Pki {
        ca_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn tls_server(pki: &Pki) -> RedisServer {
    RedisServer::builder()
        .tls(
            pki.cert_pem.clone(),
            pki.key_pem.clone(),
            pki.ca_pem.clone(),
        )
        .start()
}

/// A node on `url` that trusts `ca_pem`.
fn tls_node(url: &str, ca_pem: &str) -> (Cache, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let cache = builder(url, &calls)
        .l2_tls_root(ca_pem)
        .build()
        .expect("cache builds");
    (cache, calls)
}

#[tokio::test]
async fn a_rediss_cache_fills_and_reads_l2_over_tls() {
    let pki = pki();
    let server = tls_server(&pki);
    let url = server.tls_url();

    let (a, a_calls) = tls_node(&url, &pki.ca_pem);
    let (b, b_calls) = tls_node(&url, &pki.ca_pem);
    let id = Id::<Game>::mint();
    assert_eq!(a.fetch(id).await.unwrap().source(), Source::Fill);
    let shared = b.fetch(id).await.unwrap();
    assert_eq!(shared.source(), Source::L2);
    assert_eq!(*shared, game_of(id));
    assert_eq!((a_calls.load(SeqCst), b_calls.load(SeqCst)), (1, 0));
    assert_eq!(a.stats::<Game>().l2_errors, 0, "{:?}", a.stats::<Game>());
    assert_eq!(b.stats::<Game>().l2_errors, 0, "{:?}", b.stats::<Game>());
    // The same server, seen through its plain port.
    assert!(exists_in(&server, 0, &key(id)));

    // The TLS port speaks nothing but TLS: a plain client gets no answer.
    let plain = format!("redis://127.0.0.1:{}", server.tls_port().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let plain = builder(&plain, &calls)
        .l2_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    serves_from_the_loader(&plain, &calls).await;
}

#[tokio::test]
async fn an_acl_user_and_a_db_index_over_tls() {
    let pki = pki();
    let server = tls_server(&pki);
    create_app_user(&server);
    let port = server.tls_port().unwrap();
    let url = format!("rediss://app:secret@127.0.0.1:{port}/3");

    let (a, _) = tls_node(&url, &pki.ca_pem);
    let (b, b_calls) = tls_node(&url, &pki.ca_pem);
    let id = Id::<Game>::mint();
    assert_eq!(a.fetch(id).await.unwrap().source(), Source::Fill);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::L2);
    assert_eq!(b_calls.load(SeqCst), 0);
    assert!(exists_in(&server, 3, &key(id)));
    assert!(!exists_in(&server, 0, &key(id)));
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_serves_from_the_loader() {
    let pki = pki();
    let server = tls_server(&pki);
    let stranger = pki_ca_only();
    let (cache, calls) = {
        let calls = Arc::new(AtomicUsize::new(0));
        let cache = builder(&server.tls_url(), &calls)
            .l2_tls_root(stranger)
            .build()
            .expect("cache builds");
        (cache, calls)
    };
    serves_from_the_loader(&cache, &calls).await;
    assert_eq!(dbsize(&server), 0);
}

/// The PEM of a CA that signed nothing.
fn pki_ca_only() -> String {
    pki().ca_pem
}

#[tokio::test]
async fn unusable_tls_roots_fail_build() {
    let pki = pki();
    let message = build_error(
        cache_builder()
            .l2("rediss://127.0.0.1:6379")
            .l2_tls_root("not a certificate"),
    );
    assert!(message.contains("no PEM certificate"), "{message}");
    // Roots for a plain address: a mistake, said at build.
    let message = build_error(
        cache_builder()
            .l2("redis://127.0.0.1:6379")
            .l2_tls_root(pki.ca_pem),
    );
    assert!(message.contains("rediss://"), "{message}");
    // No certificate check at all is not offered.
    let message = build_error(cache_builder().l2("rediss://127.0.0.1:6379/#insecure"));
    assert!(message.contains("#insecure"), "{message}");
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder().open::<Game>()
}
