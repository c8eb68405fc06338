//! The quick start: declare a cache, build it, read through it.
//!
//! `cargo run --example quickstart`

use std::time::Duration;

use echo_cache::{Cache, Id, Source, near_cache};

/// A game and its secret: immutable for the game's life, so TTL-only.
#[near_cache(kind = "GAM", ttl_ms = 600_000, coherence = "none", max_size = 50_000)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Game {
    /// The secret.
    pub secret: String,
}

/// Stands in for the system of record (a database).
async fn load_game(id: Id<Game>) -> Result<Option<Game>, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(Some(Game {
        secret: format!("the secret of {id}"),
    }))
}

// `pub(crate)`: the suite runs this very `main` (tests/quickstart.rs).
#[tokio::main]
pub(crate) async fn main() -> Result<(), echo_cache::Error> {
    let cache = Cache::builder().loader(load_game).build()?;

    let id = Id::<Game>::mint();
    // A herd of 1,000 misses: one flight, one loader call.
    let herd: Vec<_> = (0..1_000)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { Game::fetch(&cache, id).await })
        })
        .collect();
    for caller in herd {
        caller.await.expect("no caller panics")?;
    }
    let game = cache.fetch(id).await?;
    println!(
        "{id}: {:?}, an L1 hit: {}, version {}",
        game.secret,
        game.source() == Source::Hit,
        game.version()
    );

    let stats = cache.stats::<Game>();
    println!(
        "the herd and the last read: {} flight, {} loader call, {} joined the flight, {} L1 hits",
        stats.flights, stats.fills, stats.coalesced, stats.hits
    );
    Ok(())
}
