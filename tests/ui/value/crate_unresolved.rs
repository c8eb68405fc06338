// `crate` names a path that does not resolve.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, crate = "echo_cash")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
