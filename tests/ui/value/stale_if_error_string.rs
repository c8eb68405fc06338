// A grace in quotes: the message says to drop them.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, stale_if_error_ms = "30_000")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
