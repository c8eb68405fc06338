// An unknown eviction policy, and an unknown warm start (a flag is not
// one: `ready` or `background`).
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, max_size = 1_000, eviction = "lru")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

#[near_cache(kind = "USR", ttl_ms = 60_000, warm = "true")]
#[derive(serde::Serialize, serde::Deserialize)]
struct User {
    name: String,
}

fn main() {}
