// An unknown placement.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, placement = "spreaded")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
