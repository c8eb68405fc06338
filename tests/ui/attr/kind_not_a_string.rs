// A string key given a bare word: the kind goes in quotes.
use echo_cache::near_cache;

#[near_cache(kind = GAM, ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
