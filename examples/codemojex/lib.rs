//! The codemojex workshop: the seed's four moves — declare, hit, survive a
//! herd, invalidate from another node — over a real system of record
//! (SQLite), as a program a newcomer runs:
//!
//! ```sh
//! cargo run --example codemojex                      # L1 only
//! cargo run --example codemojex -- --own-server      # two nodes over a valkey-server it starts
//! ECHO_CACHE_L2=redis://127.0.0.1:6379 cargo run --example codemojex
//! cargo run --example codemojex -- --own-server --serve --tasks 8 --seconds 10
//! ```
//!
//! Every guess of the scorer reads a session, a game and its emoji set
//! through three declared caches ([`model`]); the loaders read SQLite
//! ([`store`]); a [`node`] is one cache over it. The moves ([`moves`])
//! narrate what they do and return what they measured; the suite
//! (`tests/codemojex.rs`) runs them with and without a server and checks
//! the story.

pub mod metrics;
pub mod model;
pub mod moves;
pub mod node;
pub mod serve;
pub mod server;
pub mod store;

use std::path::PathBuf;

use moves::{Failure, Revocation, Served, Survived};
use node::{Node, Options};
use store::Store;

/// How to run the workshop.
pub struct Workshop {
    /// The SQLite database (created and seeded on first run).
    pub db: PathBuf,
    /// The L2 server's URL; `None` for L1 only.
    pub l2: Option<String>,
    /// Stops the server, when the program owns it (move 4's outage).
    pub stop_server: Option<Box<dyn FnOnce() + Send>>,
    /// Whether a revocation tells the cache; `false` shows that move 4's
    /// check fails when it is not told.
    pub invalidate: bool,
    /// Concurrent guesses on one cold game, in move 3.
    pub herd: usize,
}

impl Workshop {
    /// The workshop over `db`, L1 only, as a newcomer runs it.
    pub fn new(db: impl Into<PathBuf>) -> Workshop {
        Workshop {
            db: db.into(),
            l2: None,
            stop_server: None,
            invalidate: true,
            herd: 5_000,
        }
    }
}

/// What the four moves measured.
#[derive(Debug)]
pub struct Report {
    /// Move 1: the tables declared.
    pub declared: Vec<&'static str>,
    /// Move 2: what each node's tables served.
    pub hit: Vec<(&'static str, Vec<Served>)>,
    /// Move 3.
    pub survived: Survived,
    /// Move 4.
    pub revocation: Revocation,
    /// Reads that fell back to the store because the cache erred.
    pub fallbacks: u64,
}

/// The store at `db`, seeded on first open with 1,000 games and 100
/// sessions.
pub fn open_store(db: &std::path::Path) -> Result<Store, Failure> {
    Ok(Store::open(db, 1_000, 100)?)
}

/// Two nodes over `store`: each its own L1, both over `l2` if given;
/// ready once their coherence channels are up.
pub async fn nodes(store: &Store, l2: Option<&str>) -> Result<(Node, Node), Failure> {
    let options = Options {
        l2: l2.map(str::to_owned),
        clock: None,
    };
    let (a, b) = (
        Node::open("a", store, options.clone())?,
        Node::open("b", store, options)?,
    );
    a.cache.ready().await;
    b.cache.ready().await;
    Ok((a, b))
}

/// Runs the four moves.
pub async fn run(workshop: Workshop) -> Result<Report, Failure> {
    let store = open_store(&workshop.db)?;
    match &workshop.l2 {
        Some(url) => {
            println!("# codemojex: two nodes, each its own L1, over the L2 server at {url}")
        }
        None => println!(
            "# codemojex: L1 only (no server: set ECHO_CACHE_L2 or pass --own-server for L2)"
        ),
    }
    println!("system of record: SQLite at {}", workshop.db.display());
    let (a, b) = nodes(&store, workshop.l2.as_deref()).await?;

    let declared = moves::declare(&a).iter().map(|spec| spec.name()).collect();
    let games: Vec<_> = store.games()?.into_iter().take(20).collect();
    let sessions: Vec<_> = store.live_sessions()?.into_iter().take(10).collect();
    let hit = moves::hit(&[&a, &b], &store, &games, &sessions).await?;
    let survived = moves::survive(&a, &store, sessions[0], workshop.herd).await?;
    let revocation = moves::invalidate(
        &a,
        &b,
        &store,
        games[0],
        workshop.l2.is_some(),
        workshop.invalidate,
        workshop.stop_server,
    )
    .await?;
    // The caches publish their metrics every second by themselves; a
    // scrape of `--metrics` after the run sees its final counts.
    a.cache.publish_metrics();
    b.cache.publish_metrics();
    Ok(Report {
        declared,
        hit,
        survived,
        revocation,
        fallbacks: a.fallbacks() + b.fallbacks(),
    })
}
