//! An operator's reads leave no trace: a peek neither marks its row read
//! for the clock hand nor starts its refresh.

use super::full::{mark, shard_mates};
use super::*;

#[test]
fn a_peek_leaves_the_mark_and_the_refresh_bit_as_they_were() {
    let spec = crate::cache::directory::SpecParts {
        refresh_ms: Some(200),
        ..parts(8, Eviction::Hot)
    }
    .build();
    let rows = Rows::new(&spec);
    let keys = shard_mates(&rows, 1, 6);
    // Six rows of eight: hits mark the rows they read.
    for &key in &keys {
        assert!(rows.insert(key, row(key, 1, 1_000), 0).is_ok());
    }
    let peek = |now| {
        rows.peek(&epoch::pin(), keys[0], now)
            .map(|live| live.version)
    };
    assert_eq!(peek(0), Some(1));
    assert_eq!(mark(&rows, keys[0]), evict::NEW, "not marked read");
    // Due for refresh (200 ms before its expiry): peeked, not started.
    assert_eq!(peek(850), Some(1));
    let mut started = None;
    let live = rows.get(&epoch::pin(), keys[0], 850, |version| {
        started = Some(version);
    });
    assert_eq!(live.map(|live| live.version), Some(1));
    assert_eq!(started, Some(1), "the first hit starts the refresh");
    assert_eq!(
        mark(&rows, keys[0]) & !REFRESHING,
        evict::READ,
        "the hit marks it"
    );
    assert_eq!(peek(1_000), None, "dead at its expiry");
}
