// Jitter is a fraction of the TTL from 0.0 to 0.5.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, jitter = 0.7)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
