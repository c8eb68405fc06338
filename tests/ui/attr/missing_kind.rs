// A required key left out.
use echo_cache::near_cache;

#[near_cache(ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
