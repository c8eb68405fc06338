//! Coherence across nodes, the plain path of `tracking` and `broadcast`: a
//! write on one node evicts the row another node holds. (The faults and
//! the scripts are modules of this binary too; the races, the outages and
//! `durable` have their own `coherence_*` binaries.)

use crate::coherence_support::{Broadcast, Entity, Sor, Tracked, eventually, linked, node};
use echo_cache::{Cached, Id, Source};
use echo_cache_testkit::RedisServer;

#[tokio::test]
async fn a_put_on_one_node_evicts_the_row_on_the_other_tracking() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node(&server, &sor), node(&server, &sor));
    linked(&a).await;
    linked(&b).await;
    let id = Id::<Tracked>::mint();

    assert_eq!(b.fetch(id).await.unwrap().revision, 0);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    let revision = sor.bump(id.raw());
    a.put(id, Tracked { revision }).await.unwrap();
    assert_eq!(
        a.fetch(id).await.unwrap().revision,
        revision,
        "read your writes"
    );
    eventually("B drops its old row", async || {
        b.fetch(id).await.unwrap().revision == revision
    })
    .await;
}

#[tokio::test]
async fn an_invalidate_on_one_node_evicts_the_row_on_the_other_broadcast() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node(&server, &sor), node(&server, &sor));
    linked(&a).await;
    linked(&b).await;
    let id = Id::<Broadcast>::mint();

    assert_eq!(b.fetch(id).await.unwrap().revision, 0);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    let revision = sor.bump(id.raw());
    let version = a.invalidate(id).await.unwrap();
    assert_eq!(
        a.fetch(id).await.unwrap().revision,
        revision,
        "read your writes"
    );
    eventually("B drops its old row", async || {
        b.fetch(id).await.unwrap().revision == revision
    })
    .await;
    // The same message again is a no-op: B keeps its new row. A marker
    // invalidation of another row, published after it, tells when B has
    // read past it (messages arrive in publish order on B's link).
    let marker = Id::<Broadcast>::mint();
    b.fetch(marker).await.unwrap();
    let before = b.stats::<Broadcast>().invalidations;
    a.invalidate_at(id, version).await.unwrap();
    a.invalidate(marker).await.unwrap();
    eventually("B applies the marker", async || {
        b.stats::<Broadcast>().invalidations > before
    })
    .await;
    assert_eq!(
        b.stats::<Broadcast>().invalidations,
        before + 1,
        "only the marker"
    );
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
}

/// Node A invalidates `id` at a version minted under another kind; B, which
/// holds the old row, reads the new revision within the bound (versions
/// compare by payload: the kind of a version is no part of it).
async fn a_version_of_another_kind_reaches_the_other_node<T: Entity, Other: Cached>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node(&server, &sor), node(&server, &sor));
    linked(&a).await;
    linked(&b).await;
    let id = Id::<T>::mint();

    assert_eq!(b.fetch(id).await.unwrap().revision(), 0);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    let revision = sor.bump(id.raw());
    let version = Id::<Other>::mint().raw();
    a.invalidate_at(id, version).await.unwrap();
    assert_eq!(
        a.fetch(id).await.unwrap().revision(),
        revision,
        "read your writes"
    );
    eventually("B drops its old row", async || {
        b.fetch(id).await.unwrap().revision() == revision
    })
    .await;
    assert_eq!(b.stats::<T>().malformed_messages, 0, "B refused no message");
}

#[tokio::test]
async fn an_invalidation_at_a_version_of_another_kind_reaches_the_other_node_tracking() {
    a_version_of_another_kind_reaches_the_other_node::<Tracked, Broadcast>().await;
}

#[tokio::test]
async fn an_invalidation_at_a_version_of_another_kind_reaches_the_other_node_broadcast() {
    a_version_of_another_kind_reaches_the_other_node::<Broadcast, Tracked>().await;
}
