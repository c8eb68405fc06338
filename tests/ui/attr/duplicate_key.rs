// A key given twice.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, ttl_ms = 30_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
