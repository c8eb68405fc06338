// A tuple struct, public, with its fields public.
use echo_cache::{Cached, near_cache};

#[near_cache(kind = "SCO", ttl_ms = 60_000)]
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Score(pub u32, pub u32);

fn main() {
    assert_eq!(Score::spec().name(), "score");
    assert_eq!(Score::KIND.as_str(), "SCO");
}
