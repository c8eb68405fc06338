// The attribute goes on the entity type, not on its loader.
use echo_cache::near_cache;

#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

#[near_cache(kind = "GAM", ttl_ms = 60_000)]
async fn load_game(id: u64) -> Option<Game> {
    Some(Game {
        secret: format!("the secret of {id}"),
    })
}

fn main() {
    drop(load_game(1));
}
