// An unknown key: the message lists the valid ones.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
