//! Move 4 on processes: what the parent has them do, and prints.

use std::path::Path;
use std::time::Duration;

use echo_cache::{Cached, Health, Id, newer};

use crate::model::{Board, Game};
use crate::moves::{self, Failure, Outage, Revocation};
use crate::store::Store;

use super::parent::{Fleet, after, delivered, field, health, number, source, version};
use super::{FleetReport, HERD, Program};

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
