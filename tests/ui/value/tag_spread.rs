// A tag on a table spread over a cluster's slots.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, placement = "spread", tag = Game::group)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    group: u64,
}

impl Game {
    fn group(&self) -> u64 {
        self.group
    }
}

fn main() {}
