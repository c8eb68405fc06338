//! The four moves of the workshop, each narrated on stdout and returning
//! what it measured, so the suite can check the story is true.

use std::sync::Arc;
use std::time::{Duration, Instant};

use echo_cache::{Cache, Cached, Clock, Health, Id, Source, TableSpec, keyspace};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::model::{EmojiSet, Game, Session, Verdict};
use crate::node::{Node, Options};
use crate::store::{Store, StoreError};

/// Anything a move can fail on.
pub type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Move 1 — declare: what the program declared, read back from the cache.
pub fn declare(node: &Node) -> Vec<&'static TableSpec> {
    println!("\n## Move 1 — declare\n");
    let declared = echo_cache::declared();
    println!(
        "{} types carry #[near_cache(...)]; the roster is gathered at link time:",
        declared.len()
    );
    for spec in declared {
        println!(
            "  {:<13} kind {}  ttl {:>9} ms ±{:.0}%  coherence {:<9} max_size {:>6}  L2 key {}<id>",
            spec.name(),
            spec.kind(),
            spec.ttl_ms(),
            spec.jitter() * 100.0,
            spec.coherence().as_str(),
            spec.max_size(),
            keyspace::prefix(spec),
        );
    }
    let games = echo_cache::spec("cm_games").expect("cm_games is declared");
    println!(
        "\nA declaration is found by name too: echo_cache::spec(\"cm_games\") is the table of kind {}, \
         whose rows live {} s.",
        games.kind(),
        games.ttl_ms() / 1_000
    );
    let tables = node.cache.tables();
    let loaded = tables.iter().filter(|table| table.has_loader).count();
    println!(
        "Node {}'s cache opens the {} tables a guess reads (builder.open::<T>()), {loaded} with a \
         loader: build() refuses a table with none, unless told it is filled by put alone. \
         cm_boards is opened by move 4's processes (--nodes).",
        node.name,
        tables.len()
    );
    println!(
        "An id of another kind does not compile: Game::fetch(&cache, session_id) is refused \
         with \"`Id<Session>` is not an id of `Game`\"."
    );
    declared.to_vec()
}

/// What a table served, read off its counters and the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The table.
    pub table: &'static str,
    /// Reads answered from L1, in the caller's thread.
    pub l1: u64,
    /// Reads answered from L2.
    pub l2: u64,
    /// Reads that reached the store through the loader.
    pub store: u64,
    /// Misses that joined another's flight.
    pub coalesced: u64,
}

/// Move 2 — hit: `rounds` of guesses by `sessions` players on `games`
/// games, on each node in turn. Returns what each node's tables served.
pub async fn hit(
    nodes: &[&Node],
    store: &Store,
    games: &[Id<Game>],
    sessions: &[Id<Session>],
) -> Result<Vec<(&'static str, Vec<Served>)>, Failure> {
    println!("\n## Move 2 — hit\n");
    println!(
        "{} players guess on {} games, on each node in turn; every guess reads a session, a game and its emoji set.",
        sessions.len(),
        games.len()
    );
    let mut report = Vec::new();
    for node in nodes {
        let before = Snapshot::take(&node.cache, store);
        let mut scored = 0;
        for round in 0..3 {
            for &session in sessions {
                for &game in games {
                    let guess = ["🍋🍇🍉🍓", "🐶🐱🦊🐻", "🌞🌧🌈🌪"][round];
                    if let Verdict::Scored(_) = node.score(game, session, guess).await? {
                        scored += 1;
                    }
                }
            }
        }
        let served = Snapshot::take(&node.cache, store).since(&before);
        println!("\nnode {}: {scored} guesses scored", node.name);
        print_served(&served);
        report.push((node.name, served));
    }
    println!(
        "\nA hit is a lookup in the caller's own thread; only a miss leaves it, for L2 or the store."
    );
    Ok(report)
}

/// What move 3 saw.
#[derive(Clone, Debug)]
pub struct Survived {
    /// Concurrent guesses on one cold game.
    pub herd: usize,
    /// Store reads of games they caused.
    pub herd_store_reads: u64,
    /// Rows that expired in each 20 s step past 90% of the TTL: (the
    /// step's mark in seconds, rows that died before it since the last).
    pub expiry_steps: Vec<(u64, u64)>,
    /// Rows the sweeper reclaimed.
    pub swept: u64,
    /// Emoji sets read, and kept in L1, by a table declared for 64.
    pub full_table: (usize, u64),
}

/// Move 3 — survive: a herd on a cold game, a cohort expiring on a manual
/// clock, the sweeper, and a full table.
pub async fn survive(
    node: &Node,
    store: &Store,
    session: Id<Session>,
    herd: usize,
) -> Result<Survived, Failure> {
    println!("\n## Move 3 — survive\n");
    // A herd: a new game, cold in every tier, guessed by `herd` players at once.
    let set = store.emoji_sets()?[0];
    let game = store.new_game(set)?;
    let (reads, before) = (store.reads().games_now(), node.cache.stats::<Game>());
    let mut guesses = JoinSet::new();
    // Every guess waits at the gate, so they all arrive at once.
    let gate = Arc::new(Barrier::new(herd + 1));
    for _ in 0..herd {
        let (node, gate) = (node.clone(), gate.clone());
        guesses.spawn(async move {
            gate.wait().await;
            node.score(game, session, "🍋🍋🍋🍋").await
        });
    }
    gate.wait().await;
    while let Some(verdict) = guesses.join_next().await {
        verdict??;
    }
    let herd_store_reads = store.reads().games_now() - reads;
    let after = node.cache.stats::<Game>();
    println!(
        "{herd} concurrent guesses on a cold game: {} flight, {} joined it, {} hit the row it filled; \
         {herd_store_reads} store read.",
        after.flights - before.flights,
        after.coalesced - before.coalesced,
        after.hits - before.hits,
    );

    // A cohort: every game filled at once on a node with a manual clock,
    // then read again as time passes 90% of the TTL.
    let clock = Clock::manual();
    let clockwork = Node::open(
        "clockwork",
        store,
        Options {
            clock: Some(clock.clone()),
            ..Options::default()
        },
    )?;
    let games = store.games()?;
    for &game in &games {
        clockwork.cache.fetch(game).await?;
    }
    let ttl = Game::spec().ttl_ms() / 1_000;
    // Each step counts the rows that died since the last, read a
    // millisecond before its mark: a row lives `ttl - jitter` at least
    // (540 s exactly, for some), so none dies before the first.
    clock.advance(Duration::from_millis(ttl * 900 - 1));
    let mut expiry_steps = Vec::new();
    let mut at = ttl * 9 / 10;
    println!(
        "\n{} games filled together on a manual clock (ttl {ttl} s, jitter ±{:.0}%); rows that expired in each step:",
        games.len(),
        Game::spec().jitter() * 100.0
    );
    while at <= ttl * 11 / 10 + 20 {
        let expired = refills(&clockwork.cache, &games).await?;
        println!(
            "  before {at:>3} s: {expired:>5} {}",
            "▇".repeat((expired as usize * 40).div_ceil(games.len()))
        );
        expiry_steps.push((at, expired));
        clock.advance(Duration::from_secs(20));
        at += 20;
    }
    println!("The cohort never expires together: no herd at the TTL boundary.");

    // The sweeper: let every row die, and watch memory come back.
    clock.advance(Duration::from_secs(ttl * 2));
    let sweeps = eventually(Duration::from_secs(5), || {
        let stats = clockwork.cache.stats::<Game>();
        (stats.size == 0).then_some(stats.sweeps)
    })
    .await
    .ok_or("the sweeper did not reclaim the dead rows within 5 s")?;
    // A sweep counts what it removed once it is done, then itself: after
    // one more sweep, `swept` holds every row of the last one.
    let swept = eventually(Duration::from_secs(5), || {
        let stats = clockwork.cache.stats::<Game>();
        (stats.sweeps > sweeps).then_some(stats.swept)
    })
    .await
    .ok_or("the sweeper did not run again within 5 s")?;
    println!("\nAll rows past their TTL: the sweeper reclaimed {swept} rows; cm_games holds 0.");

    // A full table: 100 emoji sets through a table declared for 64.
    while store.emoji_sets()?.len() < 100 {
        store.new_emoji_set("more", "🎲🎯🎳🎮🎰🧩🎨🎭")?;
    }
    let sets = store.emoji_sets()?;
    for &set in &sets {
        clockwork.cache.fetch(set).await?;
    }
    let stats = clockwork.cache.stats::<EmojiSet>();
    println!(
        "{} emoji sets read through cm_emojisets (max_size {}): {} kept, every read answered; {} fills served without keeping.",
        sets.len(),
        EmojiSet::spec().max_size(),
        stats.size,
        stats.full_skips
    );
    Ok(Survived {
        herd,
        herd_store_reads,
        expiry_steps,
        swept,
        full_table: (sets.len(), stats.size),
    })
}

/// Reads every id once; returns how many had expired (were refilled).
async fn refills<T: Cached>(cache: &Cache, ids: &[Id<T>]) -> Result<u64, Failure> {
    let mut expired = 0;
    for &id in ids {
        if cache.fetch(id).await?.source() != Source::Hit {
            expired += 1;
        }
    }
    Ok(expired)
}

/// What move 4 saw.
#[derive(Clone, Debug)]
pub struct Revocation {
    /// How long node B took to refuse a session node A revoked, if it did
    /// within the bound.
    pub refused_after: Option<Duration>,
    /// L1 only: how long node B took to refuse it once told directly.
    pub refused_when_told: Option<Duration>,
    /// The same, with the server stopped, when the program could stop it.
    pub outage: Option<Outage>,
}

/// Move 4's second half: the server stopped.
#[derive(Clone, Debug)]
pub struct Outage {
    /// How long node B took to refuse a session revoked during the outage.
    pub refused_after: Option<Duration>,
    /// Whether node B still served games from L1.
    pub games_from_l1: bool,
    /// Node B's health of `cm_sessions` during the outage.
    pub sessions_health: Health,
}

/// How long node B may take to refuse a revoked session before the check
/// fails.
pub const REFUSAL_BOUND: Duration = Duration::from_secs(2);

/// Move 4 — invalidate: a session revoked on node A, through the store and
/// `invalidate`; node B must refuse it. `invalidate` false skips the
/// cache's part, to show that the check can fail. `stop_server`, when the
/// program owns the server, stops it for the second half.
pub async fn invalidate(
    a: &Node,
    b: &Node,
    store: &Store,
    game: Id<Game>,
    l2: bool,
    invalidate: bool,
    stop_server: Option<Box<dyn FnOnce() + Send>>,
) -> Result<Revocation, Failure> {
    println!("\n## Move 4 — invalidate\n");
    let session = store.new_session("mallory")?;
    for node in [a, b] {
        let verdict = node.score(game, session, "🍋🍇🍉🍓").await?;
        println!("node {} scores mallory's guess: {verdict}", node.name);
    }
    revoke(a, store, session, invalidate).await?;
    let refused_after = refusal(b, game, session).await?;
    let mut refused_when_told = None;
    let bypassing = health::<Session>(&b.cache) == Health::Bypassing;
    match (l2, refused_after) {
        (true, Some(after)) if bypassing => println!(
            "node b refuses mallory after {}: with no invalidation channel it bypasses its L1 \
             for sessions, and read the session fresh: node a's invalidate had reached L2.",
            ms(after)
        ),
        (true, Some(after)) => println!(
            "node b refuses mallory after {}: the server told its L1 (tracking).",
            ms(after)
        ),
        (true, None) => {
            println!("FAILED: node b still accepts mallory {REFUSAL_BOUND:?} after the revocation.")
        }
        (false, Some(after)) => println!("node b refuses mallory after {}.", ms(after)),
        (false, None) => {
            println!(
                "L1 only: the nodes share nothing, so node b keeps mallory's session in its L1 until its TTL \
                 (24 h) or until it is told. This is why sessions need L2 and coherence."
            );
            b.cache.invalidate(session).await?;
            refused_when_told = refusal(b, game, session).await?;
            match refused_when_told {
                Some(after) => println!(
                    "Told directly (b.invalidate), node b refuses mallory after {}.",
                    ms(after)
                ),
                None => {
                    println!("FAILED: told directly (b.invalidate), node b still accepts mallory.")
                }
            }
        }
    }
    let outage = match stop_server {
        Some(stop) if l2 => Some(outage(a, b, store, game, invalidate, stop).await?),
        _ => {
            if l2 {
                println!(
                    "\n(The program does not own this server, so it cannot stop it: run with --own-server to see an outage.)"
                );
            }
            None
        }
    };
    Ok(Revocation {
        refused_after,
        refused_when_told,
        outage,
    })
}

async fn outage(
    a: &Node,
    b: &Node,
    store: &Store,
    game: Id<Game>,
    invalidate: bool,
    stop: Box<dyn FnOnce() + Send>,
) -> Result<Outage, Failure> {
    println!("\nNow the same with the server stopped.");
    let session = store.new_session("eve")?;
    b.score(game, session, "🍋🍇🍉🍓").await?;
    stop();
    revoke(a, store, session, invalidate).await?;
    let refused_after = refusal(b, game, session).await?;
    let sessions_health = health::<Session>(&b.cache);
    let games_from_l1 = b.cache.fetch(game).await?.source() == Source::Hit;
    let fresh = store.new_game(store.emoji_sets()?[0])?;
    let started = Instant::now();
    let fill = b.cache.fetch(fresh).await?.source();
    println!(
        "- sessions (tracking): the channel is lost, so node b flushed its L1 of them and reads the store \
         (health: {}); mallory's twin eve, revoked on node a, is refused after {}.",
        health_name(sessions_health),
        refused_after.map_or("no refusal within the bound".into(), ms)
    );
    println!(
        "- games (none): L1 keeps serving what it holds (a hit: {games_from_l1}); a miss skips L2 and \
         reads the store ({} in {}); L2 errors counted: {}.",
        source_name(fill),
        ms(started.elapsed()),
        b.cache.stats::<Game>().l2_errors
    );
    println!(
        "- node a's invalidate was acknowledged and kept; it reaches L2 and the other nodes when the server \
         is back. What holds: no node serves a revoked session; what degrades: every miss reads the store."
    );
    Ok(Outage {
        refused_after,
        games_from_l1,
        sessions_health,
    })
}

/// Revokes `session`: the store first, then (unless sabotaged) the cache.
async fn revoke(
    node: &Node,
    store: &Store,
    session: Id<Session>,
    invalidate: bool,
) -> Result<(), Failure> {
    store.revoke(session)?;
    if invalidate {
        node.cache.invalidate(session).await?;
        println!(
            "node {} revokes the session: UPDATE sessions in SQLite, then cache.invalidate(id).",
            node.name
        );
    } else {
        println!(
            "node {} revokes the session in SQLite only (the cache is not told).",
            node.name
        );
    }
    Ok(())
}

/// How long until `node` refuses `session`, within [`REFUSAL_BOUND`].
pub(crate) async fn refusal(
    node: &Node,
    game: Id<Game>,
    session: Id<Session>,
) -> Result<Option<Duration>, StoreError> {
    let started = Instant::now();
    while started.elapsed() < REFUSAL_BOUND {
        if node.score(game, session, "🍋🍇🍉🍓").await? == Verdict::Refused {
            return Ok(Some(started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(None)
}

/// A duration as a reader wants it: milliseconds, to a tenth.
pub(crate) fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1_000.0)
}

pub(crate) fn health_name(health: Health) -> &'static str {
    match health {
        Health::Serving => "serving",
        Health::Full => "full",
        Health::L2Down => "L2 down",
        Health::Bypassing => "bypassing L1",
        Health::Unverified => "unverified",
        _ => "other",
    }
}

pub(crate) fn source_name(source: Source) -> &'static str {
    match source {
        Source::Hit => "an L1 hit",
        Source::L2 => "read from L2",
        Source::Fill => "filled from the store",
        Source::Stale => "a stale value",
        _ => "served",
    }
}

pub(crate) fn health<T: Cached>(cache: &Cache) -> Health {
    let table = cache
        .tables()
        .into_iter()
        .find(|table| table.spec.name() == T::spec().name());
    table.expect("declared").health
}

/// Polls `probe` until it answers, for at most `bound`.
async fn eventually<R>(bound: Duration, mut probe: impl FnMut() -> Option<R>) -> Option<R> {
    let started = Instant::now();
    loop {
        if let Some(answer) = probe() {
            return Some(answer);
        }
        if started.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The three tables' counters and the store's reads at one moment.
struct Snapshot {
    tables: [(&'static str, echo_cache::Stats, u64); 3],
}

impl Snapshot {
    fn take(cache: &Cache, store: &Store) -> Snapshot {
        let reads = store.reads();
        Snapshot {
            tables: [
                (
                    Session::spec().name(),
                    cache.stats::<Session>(),
                    reads.sessions_now(),
                ),
                (
                    Game::spec().name(),
                    cache.stats::<Game>(),
                    reads.games_now(),
                ),
                (
                    EmojiSet::spec().name(),
                    cache.stats::<EmojiSet>(),
                    reads.emoji_sets_now(),
                ),
            ],
        }
    }

    fn since(&self, before: &Snapshot) -> Vec<Served> {
        self.tables
            .iter()
            .zip(&before.tables)
            .map(|((table, now, reads), (_, then, reads_then))| Served {
                table,
                l1: now.hits - then.hits,
                l2: now.l2_hits - then.l2_hits,
                store: reads - reads_then,
                coalesced: now.coalesced - then.coalesced,
            })
            .collect()
    }
}

fn print_served(served: &[Served]) {
    println!(
        "  {:<13} {:>8} {:>8} {:>8} {:>10}",
        "table", "L1", "L2", "store", "coalesced"
    );
    for row in served {
        println!(
            "  {:<13} {:>8} {:>8} {:>8} {:>10}",
            row.table, row.l1, row.l2, row.store, row.coalesced
        );
    }
}
