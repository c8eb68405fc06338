//! Move 1 — declare: the caches of codemojex, the scorer that reads three
//! of them on every guess, and the leaderboard that move 4's processes
//! share.

use echo_cache::{Id, near_cache};
use serde::{Deserialize, Serialize};

/// A game: its secret, four emojis drawn from its emoji set.
///
/// Immutable for the game's life, so it never goes stale: coherence `none`,
/// expiry alone.
#[near_cache(
    kind = "GAM",
    name = "cm_games",
    ttl_ms = 600_000,
    coherence = "none",
    max_size = 50_000
)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Game {
    /// The four emojis to guess, in order.
    pub secret: String,
    /// The set the secret and the guesses are drawn from.
    pub emoji_set: Id<EmojiSet>,
}

/// An emoji set: the alphabet of a game. Few and immutable.
///
/// Declared small on purpose, so move 3 can show what a full table does.
#[near_cache(
    kind = "EMS",
    name = "cm_emojisets",
    ttl_ms = 3_600_000,
    coherence = "none",
    max_size = 64
)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmojiSet {
    /// What players call it.
    pub name: String,
    /// Its emojis.
    pub emojis: String,
}

/// A player's session: the first mutable entity. A revoked session must
/// stop scoring on every node at once, so the server tells every node's
/// L1 when it changes: coherence `tracking`.
#[near_cache(
    kind = "SES",
    name = "cm_sessions",
    ttl_ms = 86_400_000,
    coherence = "tracking",
    max_size = 100_000
)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The player's name.
    pub player: String,
    /// Whether the session was revoked (logged out, banned…).
    pub revoked: bool,
}

/// A game's leaderboard: who leads, with how many points.
///
/// Mutable, and an expensive query of the store: when a leader changes,
/// the writing node announces a versioned message, `<id>:<version>`,
/// that every node applies newer-wins (coherence `broadcast`); and when a
/// board is cold on every node at once, one node of the fleet loads it
/// while the others wait for its frame in L2 (`herd = "fleet"`). Only
/// move 4's processes open this table (`--nodes`).
#[near_cache(
    kind = "BRD",
    name = "cm_boards",
    ttl_ms = 600_000,
    coherence = "broadcast",
    herd = "fleet",
    max_size = 10_000
)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Board {
    /// The leading player.
    pub leader: String,
    /// The leader's points.
    pub points: u32,
}

/// What a guess scored: emojis in the right place, and emojis of the
/// secret in another place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Score {
    /// Right emoji, right place.
    pub exact: usize,
    /// Right emoji, wrong place.
    pub misplaced: usize,
}

impl Score {
    /// Scores `guess` against `secret`, emoji by emoji.
    pub fn of(guess: &str, secret: &str) -> Score {
        let (guess, secret): (Vec<char>, Vec<char>) =
            (guess.chars().collect(), secret.chars().collect());
        let exact = guess.iter().zip(&secret).filter(|(g, s)| g == s).count();
        let common: usize = secret
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|e| {
                let count = |of: &[char]| of.iter().filter(|c| *c == e).count();
                count(&guess).min(count(&secret))
            })
            .sum();
        Score {
            exact,
            misplaced: common - exact,
        }
    }
}

/// What the scorer answers a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The guess was scored.
    Scored(Score),
    /// The session is revoked or unknown: no score.
    Refused,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Scored(score) => write!(
                f,
                "scored: {} exact, {} misplaced",
                score.exact, score.misplaced
            ),
            Verdict::Refused => f.write_str("refused"),
        }
    }
}

// A wrong-kind id does not compile: the id's type carries its kind.
//
//     let session: Id<Session> = …;
//     Game::fetch(&cache, session); // error: `Id<Session>` is not an id of `Game`
//
// tests/ui/fetch/ keeps this true (the suite's UI tests).

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_score_counts_exact_and_misplaced_emojis() {
        assert_eq!(
            Score::of("🍋🍇🍉🍓", "🍋🍇🍉🍓"),
            Score {
                exact: 4,
                misplaced: 0
            }
        );
        assert_eq!(
            Score::of("🍇🍋🍒🍒", "🍋🍇🍉🍓"),
            Score {
                exact: 0,
                misplaced: 2
            }
        );
        assert_eq!(
            Score::of("🍋🍋🍋🍋", "🍋🍇🍋🍓"),
            Score {
                exact: 2,
                misplaced: 0
            }
        );
    }
}
