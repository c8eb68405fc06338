// The attribute without its keys.
use echo_cache::near_cache;

#[near_cache]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
