//! `--serve`: the scorer under load, on N tasks over both nodes, with a
//! live per-table stats table refreshed in place and a summary at the end.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echo_cache::{Cache, Cached, Id};
use hdrhistogram::Histogram;

use crate::model::{EmojiSet, Game, Score, Session, Verdict};
use crate::moves::Failure;
use crate::node::Node;
use crate::store::Store;

/// How a load run is shaped.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Concurrent scorers.
    pub tasks: usize,
    /// How long they run.
    pub duration: Duration,
    /// Sessions revoked (and replaced) per second by a writer task.
    pub revocations_per_second: u32,
}

/// Fetch latency per table, in nanoseconds, merged from every task.
#[derive(Clone)]
struct Latencies([Arc<Mutex<Histogram<u64>>>; 3]);

impl Latencies {
    fn new() -> Latencies {
        Latencies(std::array::from_fn(|_| {
            Arc::new(Mutex::new(
                Histogram::new(3).expect("3 significant figures"),
            ))
        }))
    }
}

/// What the run did, for the summary.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Guesses scored.
    pub scored: u64,
    /// Guesses refused (revoked sessions).
    pub refused: u64,
    /// Sessions revoked during the run.
    pub revoked: u64,
    /// Reads that fell back to the store.
    pub fallbacks: u64,
}

/// Runs the load on `nodes` (tasks alternate between them).
pub async fn serve(nodes: &[Node], store: &Store, load: Load) -> Result<Summary, Failure> {
    let games = store.games()?;
    let sessions = Arc::new(Mutex::new(store.live_sessions()?));
    let latencies = Latencies::new();
    let started = Instant::now();
    let deadline = started + load.duration;

    let mut scorers = tokio::task::JoinSet::new();
    for task in 0..load.tasks {
        let node = nodes[task % nodes.len()].clone();
        let (games, sessions, latencies) = (games.clone(), sessions.clone(), latencies.clone());
        scorers.spawn(async move {
            let mut local: [Histogram<u64>; 3] =
                std::array::from_fn(|_| Histogram::new(3).expect("3 figures"));
            let (mut scored, mut refused) = (0u64, 0u64);
            let mut last_merge = Instant::now();
            while Instant::now() < deadline {
                let game = games[fastrand::usize(..games.len())];
                let session = {
                    let sessions = sessions.lock().unwrap();
                    sessions[fastrand::usize(..sessions.len())]
                };
                match timed_score(&node, game, session, &mut local).await? {
                    Verdict::Scored(_) => scored += 1,
                    Verdict::Refused => refused += 1,
                }
                if last_merge.elapsed() > Duration::from_millis(100) {
                    merge(&mut local, &latencies);
                    last_merge = Instant::now();
                    tokio::task::yield_now().await;
                }
            }
            merge(&mut local, &latencies);
            Ok::<_, Failure>((scored, refused))
        });
    }

    // The writer: revokes a random session and opens a new one, through
    // the store then the cache, on a random node.
    let writer = {
        let (nodes, store, sessions) = (nodes.to_vec(), store.clone(), sessions.clone());
        let every = Duration::from_secs(1) / load.revocations_per_second.max(1);
        tokio::spawn(async move {
            let mut revoked = 0u64;
            while load.revocations_per_second > 0 && Instant::now() + every < deadline {
                tokio::time::sleep(every).await;
                let node = &nodes[fastrand::usize(..nodes.len())];
                let fresh = store.new_session("newcomer")?;
                let victim = {
                    let mut sessions = sessions.lock().unwrap();
                    let at = fastrand::usize(..sessions.len());
                    std::mem::replace(&mut sessions[at], fresh)
                };
                store.revoke(victim)?;
                node.cache.invalidate(victim).await?;
                revoked += 1;
            }
            Ok::<_, Failure>(revoked)
        })
    };

    let live = std::io::stdout().is_terminal();
    let (mut drawn, mut scored, mut refused) = (0, 0, 0);
    while !scorers.is_empty() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                if live {
                    drawn = redraw(drawn, &board(&nodes[0].cache, &latencies, started, load.duration));
                }
            }
            Some(done) = scorers.join_next() => {
                let (task_scored, task_refused) = done??;
                scored += task_scored;
                refused += task_refused;
            }
        }
    }
    redraw(
        drawn,
        &board(&nodes[0].cache, &latencies, started, load.duration),
    );
    Ok(Summary {
        scored,
        refused,
        revoked: writer.await??,
        fallbacks: nodes.iter().map(Node::fallbacks).sum(),
    })
}

async fn timed_score(
    node: &Node,
    game: Id<Game>,
    session: Id<Session>,
    latency: &mut [Histogram<u64>; 3],
) -> Result<Verdict, Failure> {
    let started = Instant::now();
    let session = node.read(session, Store::session).await?;
    latency[0].saturating_record(started.elapsed().as_nanos() as u64);
    if session.is_none_or(|session| session.revoked) {
        return Ok(Verdict::Refused);
    }
    let started = Instant::now();
    let Some(game) = node.read(game, Store::game).await? else {
        return Ok(Verdict::Refused);
    };
    latency[1].saturating_record(started.elapsed().as_nanos() as u64);
    let started = Instant::now();
    node.read(game.emoji_set, Store::emoji_set).await?;
    latency[2].saturating_record(started.elapsed().as_nanos() as u64);
    Ok(Verdict::Scored(Score::of("🍋🍇🐶🌞", &game.secret)))
}

fn merge(local: &mut [Histogram<u64>; 3], shared: &Latencies) {
    for (local, shared) in local.iter_mut().zip(&shared.0) {
        shared.lock().unwrap().add(&*local).expect("same bounds");
        local.reset();
    }
}

/// The live board: progress, then one row per table.
fn board(
    cache: &Cache,
    latencies: &Latencies,
    started: Instant,
    duration: Duration,
) -> Vec<String> {
    let done = (started.elapsed().as_secs_f64() / duration.as_secs_f64()).min(1.0);
    let width = 40;
    let filled = (done * width as f64) as usize;
    let mut lines = vec![
        format!(
            "[{}{}] {:>5.1}/{:.0} s",
            "#".repeat(filled),
            ".".repeat(width - filled),
            started.elapsed().as_secs_f64().min(duration.as_secs_f64()),
            duration.as_secs_f64()
        ),
        format!(
            "{:<13} {:>10} {:>8} {:>7} {:>9} {:>10} {:>10}",
            "table", "hits", "L2 hits", "fills", "coalesced", "p50", "p99"
        ),
    ];
    let rows = [
        (Session::spec().name(), cache.stats::<Session>()),
        (Game::spec().name(), cache.stats::<Game>()),
        (EmojiSet::spec().name(), cache.stats::<EmojiSet>()),
    ];
    for ((table, stats), latency) in rows.into_iter().zip(&latencies.0) {
        let latency = latency.lock().unwrap();
        lines.push(format!(
            "{table:<13} {:>10} {:>8} {:>7} {:>9} {:>10} {:>10}",
            stats.hits,
            stats.l2_hits,
            stats.fills,
            stats.coalesced,
            format!("{:?}", Duration::from_nanos(latency.value_at_quantile(0.5))),
            format!(
                "{:?}",
                Duration::from_nanos(latency.value_at_quantile(0.99))
            ),
        ));
    }
    lines
}

/// Draws `lines` over the `drawn` lines drawn last time; returns how many
/// it drew.
fn redraw(drawn: usize, lines: &[String]) -> usize {
    let mut out = std::io::stdout().lock();
    if drawn > 0 {
        let _ = write!(out, "\x1b[{drawn}A");
    }
    for line in lines {
        let _ = writeln!(out, "\x1b[2K{line}");
    }
    let _ = out.flush();
    lines.len()
}
