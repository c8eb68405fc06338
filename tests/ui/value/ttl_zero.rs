// A row must live for some time.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 0)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
