//! The system of record: SQLite, embedded (bundled, so a fresh machine
//! needs nothing). The schema is created on first open and seeded with
//! emoji sets, games, players and their sessions.
//!
//! Every read is counted per table, so the moves can show how few reach
//! the store. Writes go here first; the cache is told afterwards.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use echo_cache::Id;
use rusqlite::{Connection, OptionalExtension, params};

use crate::model::{Board, EmojiSet, Game, Session};

/// The emoji sets every store is seeded with.
const SETS: [(&str, &str); 4] = [
    ("fruit", "🍋🍇🍉🍓🍒🍑🍍🥝"),
    ("animals", "🐶🐱🦊🐻🐼🐨🐯🦁"),
    ("weather", "🌞🌧🌈🌪🌊❄🔥🌙"),
    ("sports", "⚽🏀🏈⚾🎾🏐🏉🎱"),
];

/// How long the leaderboard query takes ([`Store::board`]).
pub const BOARD_QUERY: std::time::Duration = std::time::Duration::from_millis(100);

/// An error of the store.
pub type StoreError = rusqlite::Error;

/// The SQLite store, shared by every node of this program.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    reads: Arc<Reads>,
}

/// How many reads reached the store, per table.
#[derive(Debug, Default)]
pub struct Reads {
    /// Reads of `games`.
    pub games: AtomicU64,
    /// Reads of `emoji_sets`.
    pub emoji_sets: AtomicU64,
    /// Reads of `sessions`.
    pub sessions: AtomicU64,
    /// Reads of `boards`.
    pub boards: AtomicU64,
}

impl Reads {
    /// Reads of `games` so far.
    pub fn games_now(&self) -> u64 {
        self.games.load(Relaxed)
    }

    /// Reads of `emoji_sets` so far.
    pub fn emoji_sets_now(&self) -> u64 {
        self.emoji_sets.load(Relaxed)
    }

    /// Reads of `sessions` so far.
    pub fn sessions_now(&self) -> u64 {
        self.sessions.load(Relaxed)
    }

    /// Reads of `boards` so far.
    pub fn boards_now(&self) -> u64 {
        self.boards.load(Relaxed)
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, and seeds it when
    /// it is empty: every emoji set, `games` games and `sessions` sessions.
    pub fn open(path: &Path, games: usize, sessions: usize) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        // Two processes (two nodes) may share the file.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS emoji_sets (
                 id TEXT PRIMARY KEY, name TEXT NOT NULL, emojis TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS games (
                 id TEXT PRIMARY KEY, secret TEXT NOT NULL,
                 emoji_set TEXT NOT NULL REFERENCES emoji_sets(id));
             CREATE TABLE IF NOT EXISTS players (
                 name TEXT PRIMARY KEY);
             CREATE TABLE IF NOT EXISTS sessions (
                 id TEXT PRIMARY KEY, player TEXT NOT NULL REFERENCES players(name),
                 revoked INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE IF NOT EXISTS boards (
                 id TEXT PRIMARY KEY, leader TEXT NOT NULL, points INTEGER NOT NULL);",
        )?;
        let store = Store {
            conn: Arc::new(Mutex::new(conn)),
            reads: Arc::default(),
        };
        if store.count("games")? == 0 {
            // One transaction: a thousand rows, one sync.
            store.conn.lock().unwrap().execute_batch("BEGIN")?;
            store.seed(games, sessions)?;
            store.conn.lock().unwrap().execute_batch("COMMIT")?;
        }
        Ok(store)
    }

    fn seed(&self, games: usize, sessions: usize) -> Result<(), StoreError> {
        let mut sets = Vec::new();
        for (name, emojis) in SETS {
            sets.push(self.new_emoji_set(name, emojis)?);
        }
        for n in 0..games {
            self.new_game(sets[n % sets.len()])?;
        }
        for n in 0..sessions {
            self.new_session(&format!("player{n}"))?;
        }
        Ok(())
    }

    fn count(&self, table: &str) -> Result<u64, StoreError> {
        let conn = self.conn.lock().unwrap();
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get(0)
        })
    }

    /// Adds an emoji set.
    pub fn new_emoji_set(&self, name: &str, emojis: &str) -> Result<Id<EmojiSet>, StoreError> {
        let id = Id::<EmojiSet>::mint();
        let conn = self.conn.lock().unwrap();
        conn.execute(
            "INSERT INTO emoji_sets (id, name, emojis) VALUES (?1, ?2, ?3)",
            params![id.to_string(), name, emojis],
        )?;
        Ok(id)
    }

    /// Adds a game over `set`, with a secret drawn from it.
    pub fn new_game(&self, set: Id<EmojiSet>) -> Result<Id<Game>, StoreError> {
        let id = Id::<Game>::mint();
        let conn = self.conn.lock().unwrap();
        let emojis: String = conn.query_row(
            "SELECT emojis FROM emoji_sets WHERE id = ?1",
            [set.to_string()],
            |row| row.get(0),
        )?;
        let emojis: Vec<char> = emojis.chars().collect();
        let secret: String = (0..4)
            .map(|_| emojis[fastrand::usize(..emojis.len())])
            .collect();
        conn.execute(
            "INSERT INTO games (id, secret, emoji_set) VALUES (?1, ?2, ?3)",
            params![id.to_string(), secret, set.to_string()],
        )?;
        Ok(id)
    }

    /// Opens a session for `player` (creating the player).
    pub fn new_session(&self, player: &str) -> Result<Id<Session>, StoreError> {
        let id = Id::<Session>::mint();
        let conn = self.conn.lock().unwrap();
        conn.execute("INSERT OR IGNORE INTO players (name) VALUES (?1)", [player])?;
        conn.execute(
            "INSERT INTO sessions (id, player) VALUES (?1, ?2)",
            params![id.to_string(), player],
        )?;
        Ok(id)
    }

    /// Revokes a session in the store. The caller tells the cache next.
    pub fn revoke(&self, session: Id<Session>) -> Result<(), StoreError> {
        let conn = self.conn.lock().unwrap();
        conn.execute(
            "UPDATE sessions SET revoked = 1 WHERE id = ?1",
            [session.to_string()],
        )?;
        Ok(())
    }

    /// Adds a leaderboard, led by `leader` with `points`.
    pub fn new_board(&self, leader: &str, points: u32) -> Result<Id<Board>, StoreError> {
        let id = Id::<Board>::mint();
        let conn = self.conn.lock().unwrap();
        conn.execute(
            "INSERT INTO boards (id, leader, points) VALUES (?1, ?2, ?3)",
            params![id.to_string(), leader, points],
        )?;
        Ok(id)
    }

    /// Records a new leader of a board. The caller tells the cache next.
    pub fn set_board(&self, id: Id<Board>, leader: &str, points: u32) -> Result<(), StoreError> {
        let conn = self.conn.lock().unwrap();
        conn.execute(
            "UPDATE boards SET leader = ?2, points = ?3 WHERE id = ?1",
            params![id.to_string(), leader, points],
        )?;
        Ok(())
    }

    /// Reads a leaderboard: the program's expensive query. A real one
    /// would rank every player's guesses; a pause of [`BOARD_QUERY`]
    /// stands for it here, so that a herd on a cold board overlaps.
    pub fn board(&self, id: Id<Board>) -> Result<Option<Board>, StoreError> {
        self.reads.boards.fetch_add(1, Relaxed);
        std::thread::sleep(BOARD_QUERY);
        let conn = self.conn.lock().unwrap();
        conn.query_row(
            "SELECT leader, points FROM boards WHERE id = ?1",
            [id.to_string()],
            |row| {
                Ok(Board {
                    leader: row.get(0)?,
                    points: row.get(1)?,
                })
            },
        )
        .optional()
    }

    /// Reads a game.
    pub fn game(&self, id: Id<Game>) -> Result<Option<Game>, StoreError> {
        self.reads.games.fetch_add(1, Relaxed);
        let conn = self.conn.lock().unwrap();
        conn.query_row(
            "SELECT secret, emoji_set FROM games WHERE id = ?1",
            [id.to_string()],
            |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
        )
        .optional()?
        .map(|(secret, set)| {
            let emoji_set = Id::parse(&set).map_err(|e| corrupt("games.emoji_set", e))?;
            Ok(Game { secret, emoji_set })
        })
        .transpose()
    }

    /// Reads an emoji set.
    pub fn emoji_set(&self, id: Id<EmojiSet>) -> Result<Option<EmojiSet>, StoreError> {
        self.reads.emoji_sets.fetch_add(1, Relaxed);
        let conn = self.conn.lock().unwrap();
        conn.query_row(
            "SELECT name, emojis FROM emoji_sets WHERE id = ?1",
            [id.to_string()],
            |row| {
                Ok(EmojiSet {
                    name: row.get(0)?,
                    emojis: row.get(1)?,
                })
            },
        )
        .optional()
    }

    /// Reads a session.
    pub fn session(&self, id: Id<Session>) -> Result<Option<Session>, StoreError> {
        self.reads.sessions.fetch_add(1, Relaxed);
        let conn = self.conn.lock().unwrap();
        conn.query_row(
            "SELECT player, revoked FROM sessions WHERE id = ?1",
            [id.to_string()],
            |row| {
                Ok(Session {
                    player: row.get(0)?,
                    revoked: row.get(1)?,
                })
            },
        )
        .optional()
    }

    /// Every game's id.
    pub fn games(&self) -> Result<Vec<Id<Game>>, StoreError> {
        self.ids("games")
    }

    /// Every emoji set's id.
    pub fn emoji_sets(&self) -> Result<Vec<Id<EmojiSet>>, StoreError> {
        self.ids("emoji_sets")
    }

    /// Every session that is not revoked.
    pub fn live_sessions(&self) -> Result<Vec<Id<Session>>, StoreError> {
        self.ids("sessions WHERE revoked = 0")
    }

    fn ids<T: echo_cache::Cached>(&self, from: &str) -> Result<Vec<Id<T>>, StoreError> {
        let conn = self.conn.lock().unwrap();
        let mut query = conn.prepare(&format!("SELECT id FROM {from} ORDER BY id"))?;
        let ids = query.query_map([], |row| row.get::<_, String>(0))?;
        ids.map(|id| Id::parse(id?).map_err(|e| corrupt(from, e)))
            .collect()
    }

    /// The reads that reached the store so far.
    pub fn reads(&self) -> &Reads {
        &self.reads
    }
}

/// A stored id that does not parse: the database was written by something
/// else.
fn corrupt(column: &str, err: echo_cache::IdError) -> StoreError {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("{column}: {err}").into(),
    )
}
