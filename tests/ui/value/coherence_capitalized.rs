// Coherence modes are lowercase: the message says which one was meant.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, coherence = "Tracking")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
