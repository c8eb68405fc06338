//! A process of the fleet: a node that answers the parent's commands.

use std::io::{self, BufRead};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use echo_cache::{Id, RemovalCause};
use tokio::sync::{Barrier, mpsc};
use tokio::task::JoinSet;

use crate::model::{Board, Game, Session};
use crate::moves::{self, Failure};
use crate::node::{Node, Options};
use crate::store::Store;

use super::{DB, GUESS, HERD, L2, NODE, REPLY};

/// When this process is a node of a fleet (its parent set [`NODE`]):
/// serves the parent's commands until its stdin closes, and returns the
/// exit status. `None` when it is not: the program runs as asked.
pub fn child_if_asked() -> Option<u8> {
    let name = std::env::var(NODE).ok()?;
    crate::log::install(false);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let status = match runtime.block_on(child(name.clone())) {
        Ok(()) => 0,
        Err(err) => {
            reply(&format!("error {err}"));
            eprintln!("codemojex: process {name}: {err}");
            1
        }
    };
    drop(runtime);
    Some(status)
}

fn reply(line: &str) {
    println!("{REPLY}{line}");
}

async fn child(name: String) -> Result<(), Failure> {
    let l2 = std::env::var(L2).map_err(|_| format!("{L2} is not set"))?;
    let db = std::env::var_os(DB).ok_or(format!("{DB} is not set"))?;
    let store = crate::open_store(Path::new(&db))?;
    let left = Left::default();
    let told = left.clone();
    let options = Options {
        l2: Some(l2),
        boards: true,
        board_listener: Some(Arc::new(move |_, cause| {
            *told.lock().unwrap() = Some((cause, SystemTime::now()));
        })),
        ..Options::default()
    };
    // One name for the process's life.
    let node = Node::open(name.leak(), &store, options)?;
    // Not ready within the bound: the parent's own nodes found the server
    // degraded already, and said how; this one serves degraded as they do.
    let _ = tokio::time::timeout(crate::READY_BOUND, node.cache.ready()).await;
    reply("ready");
    // Stdin is read on a thread of its own; a line is a command.
    let (lines, mut commands) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(command) = commands.recv().await {
        match answer(&node, &store, &left, &command).await {
            Ok(answer) => reply(&answer),
            Err(err) => reply(&format!("error {command}: {err}")),
        }
    }
    Ok(())
}

/// Why and when the last leaderboard left this node's L1, as its listener
/// was told.
type Left = Arc<Mutex<Option<(RemovalCause, SystemTime)>>>;

/// A wall-clock time as microseconds since the epoch: the processes share
/// the machine's clock.
fn micros(time: SystemTime) -> u128 {
    let since = time.duration_since(SystemTime::UNIX_EPOCH);
    since.unwrap_or_default().as_micros()
}

/// Runs one command of the parent; returns the answer.
async fn answer(node: &Node, store: &Store, left: &Left, command: &str) -> Result<String, Failure> {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words[..] {
        ["score", game, session] => {
            let verdict = node.score(game.parse()?, session.parse()?, GUESS).await?;
            Ok(verdict.to_string())
        }
        ["revoke", session] => {
            let session: Id<Session> = session.parse()?;
            store.revoke(session)?;
            let version = node.cache.invalidate(session).await?;
            Ok(format!("revoked at={version}"))
        }
        ["refusal", game, session] => {
            let refused = moves::refusal(node, game.parse()?, session.parse()?).await?;
            let health = moves::health::<Session>(&node.cache);
            Ok(match refused {
                Some(after) => format!("refused after_us={} health={health:?}", after.as_micros()),
                None => format!("accepted health={health:?}"),
            })
        }
        ["game", game] => {
            let game: Id<Game> = game.parse()?;
            let source = node.cache.fetch(game).await?.source();
            Ok(format!("source={source:?}"))
        }
        ["herd", board] => herd(node, store, board.parse()?).await,
        ["lead", board, leader, points] => {
            let (board, points) = (board.parse()?, points.parse()?);
            store.set_board(board, leader, points)?;
            let (leader, sent) = (leader.to_owned(), micros(SystemTime::now()));
            let version = node.cache.put(board, Board { leader, points }).await?;
            Ok(format!("put at={version} sent_us={sent}"))
        }
        ["invalidate-all"] => {
            let sent = micros(SystemTime::now());
            let version = node.cache.invalidate_all::<Board>().await?;
            Ok(format!("invalidated at={version} sent_us={sent}"))
        }
        ["reread", board, cause] => reread(node, store, left, board.parse()?, cause).await,
        _ => Err("no such command".into()),
    }
}

/// [`HERD`] readers of `board` at once; what they cost.
async fn herd(node: &Node, store: &Store, board: Id<Board>) -> Result<String, Failure> {
    let (reads, before) = (store.reads().boards_now(), node.cache.stats::<Board>());
    // Every reader waits at the gate, so they all read at once.
    let gate = Arc::new(Barrier::new(HERD + 1));
    let mut readers = JoinSet::new();
    for _ in 0..HERD {
        let (cache, gate) = (node.cache.clone(), gate.clone());
        readers.spawn(async move {
            gate.wait().await;
            cache.fetch(board).await.map(|_| ())
        });
    }
    gate.wait().await;
    let mut answered = 0;
    while let Some(read) = readers.join_next().await {
        read??;
        answered += 1;
    }
    let after = node.cache.stats::<Board>();
    Ok(format!(
        "herd answered={answered} loads={} flights={} fills={} l2={}",
        store.reads().boards_now() - reads,
        after.flights - before.flights,
        after.fills - before.fills,
        after.l2_hits - before.l2_hits,
    ))
}

/// Waits (within [`moves::REFUSAL_BOUND`]) until this node's listener is
/// told that a board left its L1 for `cause` (`InvalidatedRemotely`: a
/// message of another node; `Flushed`: a whole table's invalidation);
/// then reads `board` again.
async fn reread(
    node: &Node,
    store: &Store,
    left: &Left,
    board: Id<Board>,
    cause: &str,
) -> Result<String, Failure> {
    let started = Instant::now();
    let when = loop {
        let told = left
            .lock()
            .unwrap()
            .take_if(|(why, _)| format!("{why:?}") == cause);
        if let Some((_, when)) = told {
            break when;
        }
        if started.elapsed() > moves::REFUSAL_BOUND {
            return Ok("kept".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let reads = store.reads().boards_now();
    let read = node.cache.fetch(board).await?;
    Ok(format!(
        "left at_us={} source={:?} version={} leader={} points={} loads={}",
        micros(when),
        read.source(),
        read.version(),
        read.leader,
        read.points,
        store.reads().boards_now() - reads,
    ))
}
