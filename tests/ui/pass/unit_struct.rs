// A unit struct: the cache remembers only that an id exists (a loader's
// `Some(Seen)`) or not (`None`).
use echo_cache::{Cached, near_cache};

#[near_cache(kind = "SEE", ttl_ms = 60_000, absent_ttl_ms = 1_000)]
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Seen;

fn main() {
    assert_eq!(Seen::spec().name(), "seen");
    assert_eq!(Seen::spec().absent_ttl_ms(), 1_000);
}
