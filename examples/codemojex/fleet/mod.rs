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

mod child;
mod invalidate;
mod parent;

pub use child::child_if_asked;
pub use invalidate::invalidate;

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use echo_cache::RawId;

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
