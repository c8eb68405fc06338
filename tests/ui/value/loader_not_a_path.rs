// `loader` names a function: its path, not a string.
use echo_cache::{Id, near_cache};

#[near_cache(kind = "GAM", ttl_ms = 60_000, loader = "load_game")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

async fn load_game(_: Id<Game>) -> Result<Option<Game>, std::io::Error> {
    Ok(None)
}

fn main() {
    drop(load_game);
}
