//! Time-to-idle: a row unread for `idle_ms` dies before its TTL; a read
//! extends it, never past its TTL, through rebuilds and replacements.

use super::*;

/// A table whose rows die 1 s unread (1.5 s after their write or the
/// read that extended them, see `idle_life`).
fn idle(max_size: usize) -> Rows<u64> {
    let spec = crate::cache::directory::SpecParts {
        ttl_ms: 10_000,
        idle_ms: Some(1_000),
        ..parts(max_size, Eviction::None)
    }
    .build();
    Rows::new(&spec)
}

/// Whether `key`'s row is alive at `now`, looked at without a read.
fn alive(rows: &Rows<u64>, key: u64, now: u64) -> bool {
    rows.peek(&epoch::pin(), key, now).is_some()
}

#[test]
fn an_unread_row_dies_at_one_and_a_half_idle_and_a_read_gives_it_idle_at_least() {
    let rows = idle(100);
    assert!(rows.insert(7, row(7, 1, 10_000), 0).is_ok());
    assert!(alive(&rows, 7, 1_499));
    assert!(!alive(&rows, 7, 1_500), "unread for 1.5 × idle_ms");
    assert_eq!(read(&rows, 7, 1_500), None);

    assert!(rows.insert(8, row(8, 1, 10_000), 0).is_ok());
    // With more than idle_ms left, a read writes nothing: its row has idle_ms
    // to live all the same.
    assert_eq!(read(&rows, 8, 400), Some((Some(8), 1)));
    assert!(alive(&rows, 8, 1_499) && !alive(&rows, 8, 1_500));
    // With at most idle_ms left, it extends the row to 1.5 × idle_ms.
    assert_eq!(read(&rows, 8, 600), Some((Some(8), 1)));
    assert!(alive(&rows, 8, 2_099) && !alive(&rows, 8, 2_100));
}

#[test]
fn a_row_read_regularly_lives_to_its_ttl_and_no_longer() {
    let rows = idle(100);
    assert!(rows.insert(7, row(7, 1, 10_000), 0).is_ok());
    for now in (900..10_000).step_by(900) {
        assert_eq!(read(&rows, 7, now), Some((Some(7), 1)), "at {now}");
    }
    assert!(alive(&rows, 7, 9_999));
    assert_eq!(read(&rows, 7, 10_000), None, "the TTL is a hard bound");
}

#[test]
fn a_replacement_and_a_rebuild_keep_each_rows_own_deadline() {
    let rows = idle(usize::MAX);
    assert!(rows.insert(7, row(7, 1, 10_000), 0).is_ok());
    // The replacement's TTL ends sooner: a read may not extend past it.
    assert!(rows.insert(7, row(7, 2, 1_200), 100).is_ok());
    assert_eq!(read(&rows, 7, 1_000), Some((Some(7), 2)));
    assert!(!alive(&rows, 7, 1_200));

    assert!(rows.insert(8, row(8, 1, 3_000), 0).is_ok());
    // Enough rows for every shard's array to be rebuilt a few times.
    for key in keys(2_000).filter(|&key| key != 8) {
        assert!(rows.insert(key, row(key, 1, 10_000), 0).is_ok());
    }
    for now in [1_000, 2_000] {
        assert_eq!(read(&rows, 8, now), Some((Some(8), 1)), "at {now}");
        assert!(alive(&rows, 8, now + 999));
    }
    assert!(!alive(&rows, 8, 3_000), "its own deadline, moved with it");
}

#[test]
fn tables_without_idle_keep_no_deadlines() {
    let rows = rows::<u64>(100);
    assert!(rows.insert(7, row(7, 1, 1_000), 0).is_ok());
    let (shard, _) = rows.locate(7);
    let array = shard.array(&shard.lock()).expect("an array");
    assert!(array.deadlines().is_none());
    let rows = idle(100);
    assert!(rows.insert(7, row(7, 1, 1_000), 0).is_ok());
    let (shard, _) = rows.locate(7);
    assert!(
        shard
            .array(&shard.lock())
            .expect("an array")
            .deadlines()
            .is_some()
    );
}
