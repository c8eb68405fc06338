// A key without its value.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
