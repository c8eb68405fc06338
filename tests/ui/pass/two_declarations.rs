// Two declarations in one crate (distinct kinds and names), one cache over
// both, each read through `Cache::fetch` and through its own `fetch`.
use echo_cache::{Cache, Id, Source, near_cache};

#[near_cache(kind = "GAM", ttl_ms = 60_000)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Game {
    pub secret: String,
}

#[near_cache(kind = "PLR", ttl_ms = 60_000)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Player {
    name: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), echo_cache::Error> {
    let cache = Cache::builder()
        .loader(|id: Id<Game>| async move {
            Ok::<_, std::io::Error>(Some(Game {
                secret: format!("the secret of {id}"),
            }))
        })
        .loader(|id: Id<Player>| async move {
            Ok::<_, std::io::Error>(Some(Player {
                name: format!("player {id}"),
            }))
        })
        .build()?;

    let (game, player) = (Id::<Game>::mint(), Id::<Player>::mint());
    let first = Game::fetch(&cache, game).await?;
    assert_eq!(first.source(), Source::Fill);
    assert_eq!(cache.fetch(game).await?.source(), Source::Hit);
    let first = cache.fetch(player).await?;
    assert_eq!(first.source(), Source::Fill);
    let again = Player::fetch(&cache, player).await?;
    assert_eq!(again.source(), Source::Hit);
    assert_eq!(again.name, first.name);

    let names: Vec<&str> = echo_cache::declared().iter().map(|s| s.name()).collect();
    assert_eq!(names, ["game", "player"]);
    Ok(())
}
