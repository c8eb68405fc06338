//! `--nodes N`: move 4 with its nodes as N processes of this very
//! program, as a fleet runs them. Each process is a node (its own L1, the
//! same L2 server, the same SQLite file); this process, the parent, tells
//! them what to do, one command a line on each one's stdin, and prints
//! what they answer, one line each on their stdout.
//!
//! A child is the program run again with [`NODE`] in its environment (see
//! [`child_if_asked`]): the same executable and arguments, so that it runs
//! the same way whether `cargo run` or a test started the parent.
//!
//! The commands, and what a child answers (each answer on a line of its
//! own, after `fleet> `):
//!
//! | command | the child | answers |
//! |---|---|---|
//! | `score GAME SESSION` | scores a guess | the verdict |
//! | `revoke SESSION` | revokes it in SQLite, then `invalidate` | `revoked at=VERSION` |
//! | `refusal GAME SESSION` | guesses until refused, within 2 s | `refused after_us=… health=…` or `accepted …` |
//! | `game GAME` | reads the game | `source=…` |
//! | `herd BOARD` | reads the board with 500 tasks at once | `herd answered=… loads=… flights=… fills=… l2=…` |
//! | `lead BOARD PLAYER POINTS` | records a leader in SQLite, then `put` | `put at=VERSION sent_us=…` |
//! | `invalidate-all` | `invalidate_all::<Board>()` | `invalidated at=VERSION sent_us=…` |
//! | `reread BOARD CAUSE` | waits until its listener is told a board left L1 for `CAUSE`, then reads it | `left at_us=… source=… version=… leader=… points=… loads=…` or `kept` |
//!
//! A failed command answers `error …`. Times are microseconds of the
//! machine's wall clock, which every process shares.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use echo_cache::{Cached, Health, Id, RawId, RemovalCause, Source, newer};
use tokio::sync::{Barrier, mpsc};
use tokio::task::JoinSet;

use crate::model::{Board, Game, Session};
use crate::moves::{self, Failure, Outage, Revocation};
use crate::node::{Node, Options};
use crate::store::Store;

/// Set in a child's environment: its node's name. The L2 server's URL and
/// the SQLite file come in `CODEMOJEX_FLEET_L2` and `CODEMOJEX_FLEET_DB`.
pub const NODE: &str = "CODEMOJEX_FLEET_NODE";
const L2: &str = "CODEMOJEX_FLEET_L2";
const DB: &str = "CODEMOJEX_FLEET_DB";

/// What starts a child's answers on its stdout: anything else there (a
/// test harness's own lines) is not for the parent.
const REPLY: &str = "fleet> ";

/// How long the parent waits for a child to start, or to answer a
/// command: generous, for a loaded machine; a command takes milliseconds.
pub const REPLY_BOUND: Duration = Duration::from_secs(30);

/// Readers of the cold leaderboard on each process, at once.
pub const HERD: usize = 500;

/// The guess every process makes.
const GUESS: &str = "🍋🍇🍉🍓";

/// How to run this program again, as a node.
#[derive(Clone, Debug)]
pub struct Program {
    /// The executable.
    pub exe: PathBuf,
    /// Its arguments (the program's name left out).
    pub args: Vec<OsString>,
}

impl Program {
    /// This very process's executable and arguments.
    pub fn this() -> io::Result<Program> {
        Ok(Program {
            exe: std::env::current_exe()?,
            args: std::env::args_os().skip(1).collect(),
        })
    }
}

/// What move 4 saw across the processes, beside the revocation.
#[derive(Clone, Debug)]
pub struct FleetReport {
    /// How many processes.
    pub processes: usize,
    /// Store reads of one cold leaderboard that every process read at
    /// once ([`HERD`] readers each): 1 with `herd = "fleet"`.
    pub herd_loads: u64,
    /// The version of process 1's `put`, and the processes but the writer
    /// that dropped their row on its message and then read that version
    /// (or a newer one).
    pub message: (RawId, usize),
    /// The version of process 1's `invalidate_all`, and the processes but
    /// the writer that emptied their L1 of the table on its message and
    /// then read the board afresh (not from L1, at a newer version).
    pub flush: (RawId, usize),
}

impl FleetReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        let others = self.processes - 1;
        self.herd_loads == 1 && self.message.1 == others && self.flush.1 == others
    }
}

// ---------------------------------------------------------------------
// The child: a node that answers the parent's commands.
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// The parent: starts the processes, tells them what to do.
// ---------------------------------------------------------------------

/// The processes of move 4; each is ended when this is dropped.
pub struct Fleet {
    processes: Vec<Process>,
}

struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: mpsc::UnboundedReceiver<String>,
}

impl Fleet {
    /// Starts `nodes` processes of `program` over `l2` and `db`; returns
    /// once each is ready.
    pub async fn start(
        program: &Program,
        nodes: usize,
        l2: &str,
        db: &Path,
    ) -> Result<Fleet, Failure> {
        let mut fleet = Fleet {
            processes: Vec::new(),
        };
        for n in 1..=nodes {
            let mut child = Command::new(&program.exe)
                .args(&program.args)
                .env(NODE, n.to_string())
                .env(L2, l2)
                .env(DB, db)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|err| format!("cannot start process {n}: {err}"))?;
            let stdout = child.stdout.take().expect("piped");
            let (replies, receiver) = mpsc::unbounded_channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(answer) = line.strip_prefix(REPLY) {
                        let _ = replies.send(answer.to_owned());
                    }
                }
            });
            fleet.processes.push(Process {
                stdin: child.stdin.take(),
                child,
                replies: receiver,
            });
        }
        for n in 0..nodes {
            let ready = fleet.reply(n).await?;
            if ready != "ready" {
                return Err(format!("process {}: {ready}", n + 1).into());
            }
        }
        Ok(fleet)
    }

    /// How many processes.
    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// Their process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(|p| p.child.id()).collect()
    }

    /// Sends `command` to process `n` (from 0).
    fn send(&mut self, n: usize, command: &str) -> Result<(), Failure> {
        let stdin = self.processes[n]
            .stdin
            .as_mut()
            .expect("open until dropped");
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|err| format!("process {}: {err}", n + 1))?;
        Ok(())
    }

    /// Process `n`'s next answer, within [`REPLY_BOUND`].
    async fn reply(&mut self, n: usize) -> Result<String, Failure> {
        let next = tokio::time::timeout(REPLY_BOUND, self.processes[n].replies.recv());
        match next.await {
            Ok(Some(answer)) if answer.starts_with("error ") => {
                Err(format!("process {}: {answer}", n + 1).into())
            }
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(format!("process {} ended", n + 1).into()),
            Err(_) => {
                Err(format!("process {} did not answer within {REPLY_BOUND:?}", n + 1).into())
            }
        }
    }

    /// Asks process `n` (from 0) `command`; returns its answer.
    async fn ask(&mut self, n: usize, command: &str) -> Result<String, Failure> {
        self.send(n, command)?;
        self.reply(n).await
    }

    /// Asks `command` of each process in `which` at once: every command is
    /// sent before any answer is read. Returns the answers in order.
    async fn ask_each(
        &mut self,
        which: std::ops::Range<usize>,
        command: &str,
    ) -> Result<Vec<String>, Failure> {
        for n in which.clone() {
            self.send(n, command)?;
        }
        let mut answers = Vec::new();
        for n in which {
            answers.push(self.reply(n).await?);
        }
        Ok(answers)
    }
}

impl Drop for Fleet {
    /// Closes each process's stdin, which ends it; one that has not ended
    /// within a few seconds is killed.
    fn drop(&mut self) {
        for process in &mut self.processes {
            process.stdin = None;
        }
        let started = Instant::now();
        for process in &mut self.processes {
            while matches!(process.child.try_wait(), Ok(None)) {
                if started.elapsed() > Duration::from_secs(5) {
                    let _ = process.child.kill();
                    let _ = process.child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A field of an answer: `name=value`.
fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer
        .split(' ')
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
}

fn number(answer: &str, name: &str) -> u64 {
    field(answer, name)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn version(answer: &str, name: &str) -> Result<RawId, Failure> {
    let version = field(answer, name).ok_or(format!("no {name} in {answer:?}"))?;
    Ok(version.parse()?)
}

/// How long after the writer's call (`sent_us` of its answer) a process's
/// listener was told (`at_us`).
fn delivered(answer: &str, sent: &str) -> Option<Duration> {
    let (at, sent) = (field(answer, "at_us")?, field(sent, "sent_us")?);
    let (at, sent): (u64, u64) = (at.parse().ok()?, sent.parse().ok()?);
    Some(Duration::from_micros(at.saturating_sub(sent)))
}

/// How long a process took to refuse a session (`after_us`).
fn after(answer: &str) -> Option<Duration> {
    field(answer, "after_us")?
        .parse()
        .ok()
        .map(Duration::from_micros)
}

fn source(answer: &str) -> &'static str {
    match field(answer, "source") {
        Some("Hit") => moves::source_name(Source::Hit),
        Some("L2") => moves::source_name(Source::L2),
        Some("Fill") => moves::source_name(Source::Fill),
        Some("Stale") => moves::source_name(Source::Stale),
        _ => "served",
    }
}

fn health(answer: &str) -> Health {
    match field(answer, "health") {
        Some("Serving") => Health::Serving,
        Some("Full") => Health::Full,
        Some("L2Down") => Health::L2Down,
        Some("Bypassing") => Health::Bypassing,
        _ => Health::Unverified,
    }
}

/// Move 4 — invalidate, with its nodes as `nodes` processes of `program`
/// over `l2`: a revoked session, a leaderboard's herd, its versioned
/// message and a whole table invalidated; then, when `stop_server` is
/// given, the revocation again with the server stopped.
pub async fn invalidate(
    program: &Program,
    nodes: usize,
    l2: &str,
    db: &Path,
    store: &Store,
    game: Id<Game>,
    stop_server: Option<Box<dyn FnOnce() + Send>>,
) -> Result<(Revocation, FleetReport), Failure> {
    println!("\n## Move 4 — invalidate\n");
    let mut fleet = Fleet::start(program, nodes, l2, db).await?;
    let pids: Vec<String> = fleet.pids().iter().map(u32::to_string).collect();
    println!(
        "The nodes are now {nodes} processes of this program (pids {}), each its own L1, over \
         the same L2 server and SQLite file. This process tells them what to do, a line on each \
         one's stdin, and prints what they answer.",
        pids.join(", ")
    );
    let others = 1..fleet.len();

    // (a) A session revoked on process 1, refused by the others.
    println!("\nA session (cm_sessions, coherence tracking):");
    let session = store.new_session("mallory")?;
    let verdicts = fleet
        .ask_each(0..fleet.len(), &format!("score {game} {session}"))
        .await?;
    for (n, verdict) in verdicts.iter().enumerate() {
        println!("process {} scores mallory's guess: {verdict}", n + 1);
    }
    fleet.ask(0, &format!("revoke {session}")).await?;
    println!(
        "process 1 revokes the session: UPDATE sessions in SQLite, then cache.invalidate(id)."
    );
    let refusals = fleet
        .ask_each(others.clone(), &format!("refusal {game} {session}"))
        .await?;
    let mut refused_after = Some(Duration::ZERO);
    for (n, refusal) in others.clone().zip(&refusals) {
        let how = match health(refusal) {
            Health::Bypassing => "with no invalidation channel it bypasses its L1 for sessions",
            _ => "the server told its L1 (tracking)",
        };
        match after(refusal) {
            Some(after) => println!(
                "process {} refuses mallory after {}: {how}.",
                n + 1,
                moves::ms(after)
            ),
            None => println!(
                "FAILED: process {} still accepts mallory {:?} after the revocation.",
                n + 1,
                moves::REFUSAL_BOUND
            ),
        }
        refused_after = refused_after.zip(after(refusal)).map(|(a, b)| a.max(b));
    }

    // (c) A fleet-wide herd on a cold leaderboard.
    let spec = Board::spec();
    println!(
        "\nA leaderboard ({}, coherence {}, herd {}): an expensive query ({} ms here). A new \
         game's board is cold on every process; {HERD} players on each read it at once.",
        spec.name(),
        spec.coherence().as_str(),
        spec.herd().as_str(),
        crate::store::BOARD_QUERY.as_millis()
    );
    let board = store.new_board("ada", 3)?;
    let herds = fleet
        .ask_each(0..fleet.len(), &format!("herd {board}"))
        .await?;
    let mut herd_loads = 0;
    for (n, herd) in herds.iter().enumerate() {
        let loads = number(herd, "loads");
        herd_loads += loads;
        let how = if number(herd, "fills") > 0 {
            "it took the lease and loaded the board from the store"
        } else {
            "another process held the lease: it read that one's frame from L2"
        };
        println!(
            "  process {}: {} readers answered by {} flight; {how} (store reads: {loads}).",
            n + 1,
            number(herd, "answered"),
            number(herd, "flights"),
        );
    }
    if herd_loads == 1 {
        println!(
            "Store reads of the board across the {nodes} processes: 1. One load for the fleet \
             (herd = \"fleet\"), not one per process."
        );
    } else {
        println!(
            "FAILED: the store read the board {herd_loads} times across the {nodes} processes; \
             a fleet herd reads it once."
        );
    }

    // (b) The versioned message of a put, applied newer-wins.
    let sent = fleet.ask(0, &format!("lead {board} grace 9")).await?;
    let put = version(&sent, "at")?;
    println!(
        "\nprocess 1 records a new leader: UPDATE boards in SQLite, then cache.put(id, board), \
         at version {put}. Its message to the others' L1 (broadcast, applied newer-wins): \
         {board}:{put}."
    );
    let rereads = fleet
        .ask_each(
            others.clone(),
            &format!("reread {board} InvalidatedRemotely"),
        )
        .await?;
    let mut message_seen = 0;
    for (n, reread) in others.clone().zip(&rereads) {
        let Some(dropped) = delivered(reread, &sent) else {
            println!(
                "  FAILED: process {} still holds the old board {:?} after the put.",
                n + 1,
                moves::REFUSAL_BOUND
            );
            continue;
        };
        let read = version(reread, "version")?;
        let leader = field(reread, "leader") == Some("grace");
        let whose = if read == put {
            "the writer's"
        } else if newer(&read, &put) {
            "newer than the writer's"
        } else {
            "FAILED: older than the writer's"
        };
        if leader && !newer(&put, &read) {
            message_seen += 1;
        }
        println!(
            "  process {}: its listener is told InvalidatedRemotely {} after the put began; it \
             reads {}'s {} points, {}, at version {read}: {whose}.",
            n + 1,
            moves::ms(dropped),
            field(reread, "leader").unwrap_or("?"),
            number(reread, "points"),
            source(reread),
        );
    }

    // (d) The whole table invalidated.
    let sent = fleet.ask(0, "invalidate-all").await?;
    let flush = version(&sent, "at")?;
    println!(
        "\nprocess 1 runs cache.invalidate_all::<Board>() (a bulk update of the store, say), at \
         version {flush}: one key in L2, the table's floor, buries every older frame, and its \
         message {}***********:{flush} empties every process's L1 of {}.",
        spec.kind(),
        spec.name()
    );
    let rereads = fleet
        .ask_each(0..fleet.len(), &format!("reread {board} Flushed"))
        .await?;
    let (mut flush_seen, mut loads) = (0, 0);
    for (n, reread) in rereads.iter().enumerate() {
        let Some(dropped) = delivered(reread, &sent) else {
            println!(
                "  FAILED: process {} still holds the board {:?} after invalidate_all.",
                n + 1,
                moves::REFUSAL_BOUND
            );
            continue;
        };
        loads += number(reread, "loads");
        let read = version(reread, "version")?;
        let afresh = field(reread, "source") != Some("Hit") && newer(&read, &flush);
        if afresh && n > 0 {
            flush_seen += 1;
        }
        println!(
            "  process {}: its L1 of {} flushed {} after the call began; it reads the board \
             afresh: {}, at version {read}{}.",
            n + 1,
            spec.name(),
            moves::ms(dropped),
            source(reread),
            if afresh {
                ", newer than the floor"
            } else {
                ": FAILED, not newer than the floor"
            },
        );
    }
    println!(
        "Every process read the board afresh; the store read it {loads} time{} across the fleet.",
        if loads == 1 { "" } else { "s" }
    );

    let outage = match stop_server {
        Some(stop) => Some(outage(&mut fleet, store, game, stop).await?),
        None => {
            println!(
                "\n(The program does not own this server, so it cannot stop it: run with \
                 --own-server to see an outage.)"
            );
            None
        }
    };
    let revocation = Revocation {
        refused_after,
        refused_when_told: None,
        outage,
    };
    let report = FleetReport {
        processes: fleet.len(),
        herd_loads,
        message: (put, message_seen),
        flush: (flush, flush_seen),
    };
    Ok((revocation, report))
}

/// The revocation again, with the server stopped.
async fn outage(
    fleet: &mut Fleet,
    store: &Store,
    game: Id<Game>,
    stop: Box<dyn FnOnce() + Send>,
) -> Result<Outage, Failure> {
    println!("\nNow the revocation with the server stopped.");
    let session = store.new_session("eve")?;
    fleet
        .ask_each(0..fleet.len(), &format!("score {game} {session}"))
        .await?;
    stop();
    fleet.ask(0, &format!("revoke {session}")).await?;
    println!(
        "process 1 revokes eve's session: UPDATE sessions in SQLite, then cache.invalidate(id), \
         acknowledged and kept for the server's return."
    );
    let refusals = fleet
        .ask_each(1..fleet.len(), &format!("refusal {game} {session}"))
        .await?;
    let mut refused_after = Some(Duration::ZERO);
    for (n, refusal) in (1..).zip(&refusals) {
        println!(
            "- process {}: the channel is lost, so it flushed its L1 of sessions and reads the \
             store (health: {}); it refuses eve after {}.",
            n + 1,
            moves::health_name(health(refusal)),
            after(refusal).map_or("FAILED: no refusal within the bound".into(), moves::ms)
        );
        refused_after = refused_after.zip(after(refusal)).map(|(a, b)| a.max(b));
    }
    let read = fleet.ask(1, &format!("game {game}")).await?;
    println!(
        "- games (none): L1 keeps serving what it holds (process 2 reads the game: {}).",
        source(&read)
    );
    Ok(Outage {
        refused_after,
        games_from_l1: field(&read, "source") == Some("Hit"),
        sessions_health: health(&refusals[0]),
    })
}
