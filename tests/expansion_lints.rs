//! The code `#[near_cache(...)]` writes is clean: this file declares caches
//! under `deny(warnings)`, clippy's pedantic lints and `missing_docs`, so
//! `cargo clippy --all-targets -- -D warnings` fails if an expansion trips
//! any of them.
#![deny(warnings)]
#![deny(clippy::pedantic)]
#![deny(missing_docs)]

use echo_cache::{Cached, Coherence, near_cache};

/// A public entity with every optional key given.
#[near_cache(
    kind = "LNT",
    ttl_ms = 60_000,
    coherence = "broadcast",
    jitter = 0.2,
    max_size = 1_000,
    sweep_ms = 250,
    absent_ttl_ms = 2_000,
    name = "lint_games",
    loader = load_lint_game
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LintGame {
    /// What the game hides.
    pub secret: String,
}

fn load_lint_game(
    _: echo_cache::Id<LintGame>,
) -> std::future::Ready<Result<Option<LintGame>, std::io::Error>> {
    std::future::ready(Ok(None))
}

/// A private entity with only the required keys.
#[near_cache(kind = "LNP", ttl_ms = 1_000)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct LintPlayer {
    name: String,
}

/// A public enum.
#[near_cache(kind = "LNM", ttl_ms = 1_000, crate = "::echo_cache")]
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub enum LintMove {
    /// No move.
    Pass,
    /// A stone placed.
    Place(u8, u8),
}

/// A crate-visible tuple struct, in a module.
mod scores {
    use echo_cache::near_cache;

    /// A score, declared in a module.
    #[near_cache(kind = "LNS", ttl_ms = 1_000)]
    #[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
    pub(crate) struct LintScore(pub(crate) u32);
}

#[test]
fn declarations_are_gathered() {
    let names: Vec<&str> = echo_cache::declared().iter().map(|s| s.name()).collect();
    for name in ["lint_games", "lint_player", "lint_move", "lint_score"] {
        assert!(names.contains(&name), "{name} is not in {names:?}");
    }
    assert_eq!(LintGame::spec().coherence(), Coherence::Broadcast);
    assert_eq!(LintPlayer::KIND.as_str(), "LNP");
    assert_eq!(LintMove::spec().kind().as_str(), "LNM");
    assert_eq!(scores::LintScore::spec().ttl_ms(), 1_000);

    let player = LintPlayer {
        name: String::from("ada"),
    };
    assert_eq!(player.name, "ada");
    assert!(matches!(LintMove::Place(1, 2), LintMove::Place(1, 2)));
    assert!(matches!(LintMove::Pass, LintMove::Pass));
    assert_eq!(scores::LintScore(3).0, 3);
    assert_eq!(
        LintGame {
            secret: String::new()
        }
        .secret,
        ""
    );
}
