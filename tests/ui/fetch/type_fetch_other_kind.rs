// An id of another kind passed to the generated `Game::fetch`.
use echo_cache::{Cache, Error, Id, near_cache};

#[near_cache(kind = "GAM", ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

#[near_cache(kind = "PLR", ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Player {
    name: String,
}

async fn secret(cache: &Cache, player: Id<Player>) -> Result<String, Error> {
    let game = Game::fetch(cache, player).await?;
    Ok(game.secret.clone())
}

fn main() {
    drop(secret);
}
