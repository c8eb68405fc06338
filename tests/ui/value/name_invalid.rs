// A table name is `[a-z0-9_]+`.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, name = "Games!")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
