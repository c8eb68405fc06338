// A loader answers `Result<Option<T>, E>`: `Ok(None)` is "not found".
// This one answers `Result<T, E>`.
use echo_cache::{Id, near_cache};

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

fn main() {}
