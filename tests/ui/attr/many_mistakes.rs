// Several mistakes in one declaration: each is reported, in one run, on its
// own key or literal. The struct is still defined, so the code that uses it
// reports nothing more.
use echo_cache::{Cache, Error, Id, near_cache};

#[near_cache(
    kind = "gam",
    ttl_ms = 0,
    jitter = 0.7,
    coherence = "eventual",
    colour = "red",
    name = "Games!",
    max_size = "lots",
    soft_timeout_ms = 5_000
)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

async fn secret(cache: &Cache, id: Id<Game>) -> Result<String, Error> {
    let game = Game::fetch(cache, id).await?;
    let again = cache.fetch(id).await?;
    Ok(format!("{} {}", game.secret, again.secret))
}

fn main() {
    let game = Game {
        secret: String::from("the secret"),
    };
    drop(game.secret);
    drop(secret);
}
