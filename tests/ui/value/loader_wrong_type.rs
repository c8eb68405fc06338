// A loader answers `Result<Option<T>, E>`: `Ok(None)` is "not found".
// This one answers `Result<T, E>`. And a listener is given the value's
// `Arc<T>` (the row's own), not a `T`: reported on the listener's path.
use echo_cache::{Id, RemovalCause, near_cache};

#[near_cache(kind = "GAM", ttl_ms = 60_000, loader = load_game)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

async fn load_game(id: Id<Game>) -> Result<Game, std::io::Error> {
    Ok(Game {
        secret: format!("the secret of {id}"),
    })
}

#[near_cache(kind = "PLR", ttl_ms = 60_000, listener = on_removed)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Player {
    name: String,
}

fn on_removed(_: Id<Player>, _: Player, _: RemovalCause) {}

fn main() {}
