// A lost-channel grace on a table that has no invalidation channel.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, lost_grace_ms = 2_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
