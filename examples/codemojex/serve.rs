//! `--serve`: the scorer under load, on N tasks over both nodes, with a
//! live per-node, per-table stats board refreshed in place and a summary
//! at the end.
//!
//! While the board is live the log goes to a file (see [`crate::log`]):
//! a warning written between two redraws would break it.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
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

impl Load {
    /// The revocations the run makes: the rate over the whole duration.
    pub fn revocations(&self) -> u64 {
        (self.duration.as_secs_f64() * f64::from(self.revocations_per_second)) as u64
    }
}

/// Fetch latency per table, in nanoseconds, merged from every task of a
/// node.
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

/// The run's counts so far, shared by the tasks and the board.
#[derive(Default)]
struct Counts {
    scored: AtomicU64,
    refused: AtomicU64,
    revoked: AtomicU64,
}

/// What the run did, for the summary.
#[derive(Clone, Debug)]
pub struct Summary {
    /// How long the scorers ran.
    pub elapsed: Duration,
    /// Guesses scored.
    pub scored: u64,
    /// Guesses refused (revoked sessions).
    pub refused: u64,
    /// Sessions revoked during the run.
    pub revoked: u64,
    /// Sessions the run meant to revoke.
    pub intended_revocations: u64,
    /// Reads that fell back to the store.
    pub fallbacks: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guesses = self.scored + self.refused;
        writeln!(
            f,
            "{guesses} guesses in {:.1} s ({:.0} a second): {} scored, {} refused (revoked sessions).",
            self.elapsed.as_secs_f64(),
            guesses as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.scored,
            self.refused
        )?;
        writeln!(
            f,
            "revoked {} of {} sessions{}.",
            self.revoked,
            self.intended_revocations,
            if self.revoked == self.intended_revocations {
                ""
            } else {
                ": FAILED, the writer fell behind"
            }
        )?;
        write!(
            f,
            "reads that fell back to the store (the cache erred): {}.",
            self.fallbacks
        )
    }
}

/// Runs the load on `nodes` (tasks alternate between them).
pub async fn serve(nodes: &[Node], store: &Store, load: Load) -> Result<Summary, Failure> {
    let games = store.games()?;
    let sessions = Arc::new(Mutex::new(store.live_sessions()?));
    let latencies: Vec<Latencies> = nodes.iter().map(|_| Latencies::new()).collect();
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let deadline = started + load.duration;

    let mut scorers = tokio::task::JoinSet::new();
    for task in 0..load.tasks {
        let node = nodes[task % nodes.len()].clone();
        let latencies = latencies[task % nodes.len()].clone();
        let (games, sessions, counts) = (games.clone(), sessions.clone(), counts.clone());
        scorers.spawn(async move {
            let mut local: [Histogram<u64>; 3] =
                std::array::from_fn(|_| Histogram::new(3).expect("3 figures"));
            let mut last_merge = Instant::now();
            while Instant::now() < deadline {
                let game = games[fastrand::usize(..games.len())];
                let session = {
                    let sessions = sessions.lock().unwrap();
                    sessions[fastrand::usize(..sessions.len())]
                };
                match timed_score(&node, game, session, &mut local).await? {
                    Verdict::Scored(_) => counts.scored.fetch_add(1, Relaxed),
                    Verdict::Refused => counts.refused.fetch_add(1, Relaxed),
                };
                if last_merge.elapsed() > Duration::from_millis(100) {
                    merge(&mut local, &latencies);
                    last_merge = Instant::now();
                }
                // An L1 hit is ready at once, so a scorer would never give
                // its worker back: the writer, the timers and the L2
                // connections would wait (on two cores, most revocations
                // and L2 answers came too late). Yield when the budget says.
                tokio::task::coop::consume_budget().await;
            }
            merge(&mut local, &latencies);
            Ok::<_, Failure>(())
        });
    }

    // The writer: revokes a random session and opens a new one, through
    // the store then the cache, on a random node; on a schedule, catching
    // up when it falls behind, until every intended revocation is made.
    let intended = load.revocations();
    let writer = {
        let (nodes, store) = (nodes.to_vec(), store.clone());
        let (sessions, counts) = (sessions.clone(), counts.clone());
        let every = Duration::from_secs(1) / load.revocations_per_second.max(1);
        tokio::spawn(async move {
            for k in 0..intended {
                tokio::time::sleep_until((started + every * k as u32).into()).await;
                let node = &nodes[fastrand::usize(..nodes.len())];
                let writes = store.clone();
                let fresh =
                    tokio::task::spawn_blocking(move || writes.new_session("newcomer")).await??;
                let victim = {
                    let mut sessions = sessions.lock().unwrap();
                    let at = fastrand::usize(..sessions.len());
                    std::mem::replace(&mut sessions[at], fresh)
                };
                let writes = store.clone();
                tokio::task::spawn_blocking(move || writes.revoke(victim)).await??;
                node.cache.invalidate(victim).await?;
                counts.revoked.fetch_add(1, Relaxed);
            }
            Ok::<_, Failure>(())
        })
    };

    let caches: Vec<(&str, &Cache)> = nodes.iter().map(|node| (node.name, &node.cache)).collect();
    let board = |log: Option<&std::path::Path>| {
        Board {
            caches: &caches,
            latencies: &latencies,
            counts: &counts,
            intended,
            started,
            duration: load.duration,
            log,
        }
        .lines()
    };
    // A live board only on a terminal, with the log in a file meanwhile.
    let log_file = std::env::temp_dir().join("codemojex.log");
    let live = std::io::stdout().is_terminal() && crate::log::to_file(&log_file).is_ok();
    let mut drawn = 0;
    while !scorers.is_empty() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                if live {
                    drawn = redraw(drawn, &board(Some(&log_file)));
                }
            }
            Some(done) = scorers.join_next() => done??,
        }
    }
    let elapsed = started.elapsed();
    let written = writer.await;
    let logged = crate::log::to_stderr();
    redraw(drawn, &board(logged.as_deref()));
    written??;
    Ok(Summary {
        elapsed,
        scored: counts.scored.load(Relaxed),
        refused: counts.refused.load(Relaxed),
        revoked: counts.revoked.load(Relaxed),
        intended_revocations: intended,
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

/// What the board shows.
struct Board<'a> {
    caches: &'a [(&'a str, &'a Cache)],
    latencies: &'a [Latencies],
    counts: &'a Counts,
    intended: u64,
    started: Instant,
    duration: Duration,
    /// Where the log goes meanwhile, if not to stderr.
    log: Option<&'a std::path::Path>,
}

impl Board<'_> {
    /// Progress and counts, then a row per node and table, then the log.
    fn lines(&self) -> Vec<String> {
        let elapsed = self.started.elapsed().min(self.duration);
        let done = elapsed.as_secs_f64() / self.duration.as_secs_f64();
        let width = 40;
        let filled = ((done * width as f64) as usize).min(width);
        let mut lines = vec![
            format!(
                "[{}{}] {:>5.1}/{:.0} s  scored {}  refused {}  revoked {}/{}",
                "#".repeat(filled),
                ".".repeat(width - filled),
                elapsed.as_secs_f64(),
                self.duration.as_secs_f64(),
                self.counts.scored.load(Relaxed),
                self.counts.refused.load(Relaxed),
                self.counts.revoked.load(Relaxed),
                self.intended,
            ),
            format!(
                "{:<4} {:<13} {:>10} {:>8} {:>7} {:>9} {:>10} {:>10}",
                "node", "table", "hits", "L2 hits", "fills", "coalesced", "p50", "p99"
            ),
        ];
        for ((node, cache), latencies) in self.caches.iter().zip(self.latencies) {
            let rows = [
                (Session::spec().name(), cache.stats::<Session>()),
                (Game::spec().name(), cache.stats::<Game>()),
                (EmojiSet::spec().name(), cache.stats::<EmojiSet>()),
            ];
            for ((table, stats), latency) in rows.into_iter().zip(&latencies.0) {
                let latency = latency.lock().unwrap();
                let quantile =
                    |q| format!("{:.1} µs", latency.value_at_quantile(q) as f64 / 1_000.0);
                lines.push(format!(
                    "{node:<4} {table:<13} {:>10} {:>8} {:>7} {:>9} {:>10} {:>10}",
                    stats.hits,
                    stats.l2_hits,
                    stats.fills,
                    stats.coalesced,
                    quantile(0.5),
                    quantile(0.99),
                ));
            }
        }
        let (warnings, _) = crate::log::warnings();
        if let Some(log) = self.log {
            lines.push(format!("log: {warnings} warnings, in {}", log.display()));
        }
        lines
    }
}

/// Draws `lines` over the `drawn` lines drawn last time; returns how many
/// it drew.
fn redraw(drawn: usize, lines: &[String]) -> usize {
    let mut out = std::io::stdout().lock();
    if drawn > 0 {
        let _ = write!(out, "\x1b[{drawn}A");
    }
    for line in lines {
        if drawn > 0 {
            let _ = write!(out, "\x1b[2K");
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    lines.len()
}
