// `loader` and `listener` name functions: their paths, not strings.
use echo_cache::{Id, RemovalCause, near_cache};
use std::sync::Arc;

#[near_cache(kind = "GAM", ttl_ms = 60_000, loader = "load_game")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

async fn load_game(_: Id<Game>) -> Result<Option<Game>, std::io::Error> {
    Ok(None)
}

#[near_cache(kind = "PLR", ttl_ms = 60_000, listener = "on_removed")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Player {
    name: String,
}

fn on_removed(_: Id<Player>, _: Arc<Player>, _: RemovalCause) {}

fn main() {
    drop(load_game);
    drop(on_removed);
}
