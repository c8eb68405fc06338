// A value is a literal, not an expression.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60 * 1000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
