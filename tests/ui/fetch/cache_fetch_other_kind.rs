// An id of another kind passed to `Cache::fetch::<Game>`: a `Player` id
// cannot fetch a `Game`.
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
    let game = cache.fetch::<Game>(player).await?;
    Ok(game.secret.clone())
}

fn main() {
    drop(secret);
}
