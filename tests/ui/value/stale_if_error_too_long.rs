// A grace longer than a day is refused: the message says why and what to do.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, stale_if_error_ms = 604_800_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
