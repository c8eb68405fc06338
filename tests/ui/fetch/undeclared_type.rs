// `Cache::fetch` of a type that declared no cache.
use echo_cache::{Cache, Error, Id};

#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

async fn secret(cache: &Cache, id: Id<Game>) -> Result<String, Error> {
    let game = cache.fetch(id).await?;
    Ok(game.secret.clone())
}

fn main() {
    drop(secret);
}
