// An unknown eviction policy.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, max_size = 1_000, eviction = "lru")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
