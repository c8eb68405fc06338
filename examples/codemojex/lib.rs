//! The codemojex workshop: the seed's four moves — declare, hit, survive a
//! herd, invalidate from another node — over a real system of record
//! (SQLite), as a program a newcomer runs:
//!
//! ```sh
//! cargo run --example codemojex                      # L1 only
//! cargo run --example codemojex -- --own-server      # two nodes over a valkey-server it starts
//! cargo run --example codemojex -- --own-server --nodes 3   # move 4 on three processes
//! ECHO_CACHE_L2=redis://127.0.0.1:6379 cargo run --example codemojex
//! cargo run --example codemojex -- --own-server --serve --tasks 8 --seconds 10
//! ```
//!
//! Every guess of the scorer reads a session, a game and its emoji set
//! through three declared caches ([`model`]); the loaders read SQLite
//! ([`store`]); a [`node`] is one cache over it. The moves ([`moves`])
//! narrate what they do and return what they measured; with `--nodes`,
//! move 4 runs on processes of the program ([`fleet`]); the suite
//! (`tests/codemojex.rs`) runs them with and without a server and checks
//! the story.

pub mod cli;
pub mod fleet;
pub mod log;
pub mod metrics;
pub mod model;
pub mod moves;
pub mod node;
pub mod serve;
pub mod server;
pub mod store;

use std::path::PathBuf;
use std::time::Duration;

use echo_cache::Health;
use model::Game;
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
    /// With L2: move 4's nodes as this many processes of this program
    /// (`--nodes`), instead of two nodes in this process. The program is
    /// run again as each node, so only the program itself sets it.
    pub processes: Option<(fleet::Program, usize)>,
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
            processes: None,
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
    /// Move 4 with its nodes as processes: what they saw beside the
    /// revocation.
    pub fleet: Option<fleet::FleetReport>,
    /// Reads that fell back to the store because the cache erred.
    pub fallbacks: u64,
}

/// The store at `db`, seeded on first open with 1,000 games and 100
/// sessions.
pub fn open_store(db: &std::path::Path) -> Result<Store, Failure> {
    Ok(Store::open(db, 1_000, 100)?)
}

/// How long [`nodes`] waits for the caches to be ready: a server on this
/// machine makes them ready in milliseconds.
pub const READY_BOUND: Duration = Duration::from_secs(5);

/// Two nodes over `store`: each its own L1, both over `l2` if given;
/// ready once their coherence channels are up, within [`READY_BOUND`].
///
/// # Errors
///
/// When the L2 server does not answer within the bound. When it answers
/// but a coherent table's invalidation channel is still down, the nodes
/// serve, degraded, and it says how.
pub async fn nodes(store: &Store, l2: Option<&str>) -> Result<(Node, Node), Failure> {
    let options = Options {
        l2: l2.map(str::to_owned),
        ..Options::default()
    };
    let (a, b) = (
        Node::open("a", store, options.clone())?,
        Node::open("b", store, options)?,
    );
    metrics::show(&[(a.name, &a.cache), (b.name, &b.cache)]);
    let ready = async {
        a.cache.ready().await;
        b.cache.ready().await;
    };
    if tokio::time::timeout(READY_BOUND, ready).await.is_ok() {
        return Ok((a, b));
    }
    let url = l2.unwrap_or("(none)");
    let cause = log::last_warning().map_or(String::new(), |warning| format!(": {warning}"));
    // The breaker is open when the server did not answer the claim of the
    // node number; else a read of a game tells whether it answers at all.
    let l2_down = |node: &Node| {
        let tables = node.cache.tables();
        tables.iter().any(|table| table.health == Health::L2Down)
    };
    let mut down = l2_down(&a);
    if !down {
        let errors = a.cache.stats::<Game>().l2_errors;
        a.cache.fetch(store.games()?[0]).await?;
        down = a.cache.stats::<Game>().l2_errors > errors || l2_down(&a);
    }
    if down {
        return Err(format!(
            "the L2 server at {url} does not answer (nothing ready after {READY_BOUND:?}{cause}). \
             Start one there, pass --own-server to let the program start its own, or leave out \
             --l2 and ECHO_CACHE_L2 for L1 only."
        )
        .into());
    }
    println!(
        "\nDEGRADED: the L2 server at {url} answers, but after {READY_BOUND:?} the invalidation \
         channel is still down{cause}"
    );
    for table in a.cache.tables() {
        if table.health == Health::Bypassing {
            println!(
                "- {} (coherence {}): nothing can tell a node's L1 that a row changed, so both \
                 nodes bypass their L1 for it: every read goes to L2, or the store when L2 lacks \
                 the row. What holds: a row changed on one node is read fresh on every node. \
                 What degrades: no read of it is an L1 hit.",
                table.spec.name(),
                table.spec.coherence().as_str()
            );
        }
    }
    println!(
        "(The channel needs CLIENT TRACKING, SUBSCRIBE and PUBLISH: a user whose ACL denies \
         them, or a proxy that lacks them, leaves these tables without their L1.)"
    );
    Ok((a, b))
}

/// Runs the four moves.
pub async fn run(workshop: Workshop) -> Result<Report, Failure> {
    let store = open_store(&workshop.db)?;
    match &workshop.l2 {
        Some(url) => match &workshop.processes {
            Some((_, nodes)) => println!(
                "# codemojex: two nodes, each its own L1, over the L2 server at {url}; in move 4, \
                 {nodes} processes"
            ),
            None => {
                println!("# codemojex: two nodes, each its own L1, over the L2 server at {url}")
            }
        },
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
    let (revocation, fleet) = match (&workshop.processes, &workshop.l2) {
        (Some((program, nodes)), Some(l2)) => {
            let (revocation, fleet) = fleet::invalidate(
                program,
                *nodes,
                l2,
                &workshop.db,
                &store,
                games[0],
                workshop.stop_server,
            )
            .await?;
            (revocation, Some(fleet))
        }
        _ => {
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
            (revocation, None)
        }
    };
    // The caches publish their metrics every second by themselves; a
    // scrape of `--metrics` after the run sees its final counts.
    a.cache.publish_metrics();
    b.cache.publish_metrics();
    Ok(Report {
        declared,
        hit,
        survived,
        revocation,
        fleet,
        fallbacks: a.fallbacks() + b.fallbacks(),
    })
}
