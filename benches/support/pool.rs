//! The pool the L2 lines of `benches/l2.rs` and `benches/cluster` read:
//! [`POOL`] ids that node A fills in L2, the id of a line's `i`-th
//! operation ([`at`]), and the raw line both measure a fill against
//! ([`timed_gets`]: plain `GET`s of the pool's keys), written once so that
//! the floor of both benches is the same loop.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

/// Ids filled in L2 by node A, read by node B.
pub const POOL: usize = 8_192;

/// The pool's index of operation `i`: the ids in turn, round and round.
#[allow(clippy::cast_possible_truncation)]
pub fn at(i: u64) -> usize {
    i as usize % POOL
}

/// `n` plain GETs of the pool's frames (`keys`, [`at`]) on `conn`, each
/// frame returned as `Option<Vec<u8>>`; the time they took.
pub async fn timed_gets<C: ConnectionLike>(mut conn: C, keys: Arc<[String]>, n: u64) -> Duration {
    let start = Instant::now();
    for i in 0..n {
        let frame: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&keys[at(i)])
            .query_async(&mut conn)
            .await
            .expect("GET answers");
        black_box(frame.expect("the frame is there"));
    }
    start.elapsed()
}
