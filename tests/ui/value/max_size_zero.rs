// A table keeps at least one row.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, max_size = 0)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
