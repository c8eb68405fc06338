// A key written `key: value`: the list cannot be read past it, and no key
// after it is reported missing.
use echo_cache::near_cache;

#[near_cache(kind: "GAM", ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
