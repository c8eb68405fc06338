//! codemojex: a guessing game whose scorer reads a game, its emoji set and
//! the player's session on every guess — the hottest reads of the service,
//! near-cached.
//!
//! - games and emoji sets never change once created: coherence `none`;
//! - sessions can be revoked, and a revoked session must stop
//!   authenticating on every node at once: coherence `tracking`.
//!
//! `cargo run --example codemojex` runs it L1-only. With a server,
//! `ECHO_CACHE_L2=redis://127.0.0.1:6379 cargo run --example codemojex`
//! runs two nodes over it and revokes a session from one of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echo_cache::{Cache, Id, near_cache};

#[near_cache(kind = "GAM", ttl_ms = 600_000, coherence = "none", name = "cm_games")]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Game {
    pub secret: Vec<char>,
    pub emoji_set: Id<EmojiSet>,
}

#[near_cache(
    kind = "EMS",
    ttl_ms = 3_600_000,
    coherence = "none",
    name = "cm_emojisets"
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EmojiSet {
    pub emojis: Vec<char>,
}

#[near_cache(
    kind = "SES",
    ttl_ms = 86_400_000,
    coherence = "tracking",
    name = "cm_sessions"
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Session {
    pub player: String,
    pub revoked: bool,
}

/// Stands in for Postgres: the system of record.
#[derive(Clone, Default)]
struct Store {
    sessions: Arc<Mutex<HashMap<Id<Session>, Session>>>,
}

impl Store {
    fn node(&self, l2: Option<&str>) -> Result<Cache, echo_cache::Error> {
        let sessions = self.clone();
        let mut builder = Cache::builder()
            .loader(|_: Id<Game>| async move {
                Ok::<_, std::io::Error>(Some(Game {
                    secret: "🍋🍇🍉🍓".chars().collect(),
                    // Every game of this demo uses the one classic set.
                    emoji_set: Id::from_payload(1),
                }))
            })
            .loader(|_: Id<EmojiSet>| async move {
                Ok::<_, std::io::Error>(Some(EmojiSet {
                    emojis: "🍋🍇🍉🍓🍒🍑".chars().collect(),
                }))
            })
            .loader(move |id: Id<Session>| {
                let session = sessions.sessions.lock().unwrap().get(&id).cloned();
                async move { Ok::<_, std::io::Error>(session) }
            });
        if let Some(url) = l2 {
            builder = builder.l2(url);
        }
        builder.build()
    }
}

/// Scores one guess: three cached reads, then pure computation.
async fn score(cache: &Cache, game: Id<Game>, session: Id<Session>, guess: &str) -> Option<usize> {
    let session = cache.fetch(session).await.ok()?;
    if session.revoked {
        return None;
    }
    let game = cache.fetch(game).await.ok()?;
    let emojis = cache.fetch(game.emoji_set).await.ok()?;
    let exact = guess
        .chars()
        .zip(&game.secret)
        .filter(|(g, s)| g == *s)
        .count();
    Some(exact * 10 + guess.chars().filter(|g| emojis.emojis.contains(g)).count())
}

#[tokio::main]
async fn main() -> Result<(), echo_cache::Error> {
    let l2 = std::env::var("ECHO_CACHE_L2").ok();
    let store = Store::default();
    let (a, b) = (store.node(l2.as_deref())?, store.node(l2.as_deref())?);

    let game = Id::<Game>::mint();
    let session = Id::<Session>::mint();
    let player = Session {
        player: "ada".into(),
        revoked: false,
    };
    store
        .sessions
        .lock()
        .unwrap()
        .insert(session, player.clone());

    for guess in ["🍒🍒🍒🍒", "🍋🍇🍒🍒", "🍋🍇🍉🍓"] {
        println!(
            "node b scores {guess}: {:?}",
            score(&b, game, session, guess).await
        );
    }
    for table in b.tables() {
        let stats = table.stats;
        println!(
            "{:>14}: {} hits, {} fills",
            table.spec.name(),
            stats.hits,
            stats.fills
        );
    }

    // Revoke the session on node a: the system of record first, then the cache.
    let revoked = Session {
        revoked: true,
        ..player
    };
    store
        .sessions
        .lock()
        .unwrap()
        .insert(session, revoked.clone());
    a.put(session, revoked).await?;
    if l2.is_none() {
        // Without L2 the nodes share nothing: tell b directly.
        b.invalidate(session).await?;
    }
    // With L2, node b hears of it from the server (tracking) within
    // milliseconds; give it up to a second.
    for _ in 0..100 {
        if score(&b, game, session, "🍋🍇🍉🍓").await.is_none() {
            println!("after revoking, node b refuses the session");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("node b still accepts the revoked session!");
    Ok(())
}
