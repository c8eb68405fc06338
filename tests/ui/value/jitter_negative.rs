// Jitter is not negative.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, jitter = -0.1)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
