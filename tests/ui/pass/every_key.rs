// Every key of #[near_cache], each with a value other than its default, fed
// through a `macro_rules!` as `literal` and `path` fragments (which reach
// the attribute wrapped in invisible groups) and `tt`s.
use echo_cache::{Cached, Coherence, Eviction, Id, Placement, Warm, near_cache};

macro_rules! declare {
    ($kind:literal, $ttl:literal, $loader:path, $listener:path, $coherence:literal, $jitter:tt) => {
        #[near_cache(
            kind = $kind,
            ttl_ms = $ttl,
            loader = $loader,
            listener = $listener,
            coherence = $coherence,
            placement = "spread",
            jitter = $jitter,
            max_size = 50_000,
            eviction = "none",
            warm = "background",
            sweep_ms = 500,
            absent_ttl_ms = 5_000,
            load_timeout_ms = 2_000,
            stale_if_error_ms = 30_000,
            soft_timeout_ms = 500,
            refresh_ms = 60_000,
            idle_ms = 120_000,
            name = "games",
            crate = "::echo_cache"
        )]
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
        pub struct Game {
            pub secret: String,
        }
    };
}

declare!("GAM", 600_000, store::load_game, store::on_removed, "durable", 0.25);

mod store {
    use super::{Game, Id};
    use echo_cache::RemovalCause;
    use std::sync::Arc;

    pub fn on_removed(id: Id<Game>, game: Arc<Game>, cause: RemovalCause) {
        println!("{id} ({}) left: {cause}", game.secret);
    }

    pub async fn load_game(id: Id<Game>) -> Result<Option<Game>, std::io::Error> {
        Ok(Some(Game {
            secret: format!("the secret of {id}"),
        }))
    }
}

fn main() {
    let spec = Game::spec();
    assert_eq!(spec.kind().as_str(), "GAM");
    assert_eq!(Game::KIND, spec.kind());
    assert_eq!(spec.ttl_ms(), 600_000);
    assert_eq!(spec.coherence(), Coherence::Durable);
    assert_eq!(spec.placement(), Placement::Spread);
    assert!((spec.jitter() - 0.25).abs() < f64::EPSILON);
    assert_eq!(spec.max_size(), 50_000);
    assert_eq!(spec.eviction(), Eviction::None);
    assert_eq!(spec.warm(), Warm::Background);
    assert_eq!(spec.sweep_ms(), 500);
    assert_eq!(spec.absent_ttl_ms(), 5_000);
    assert_eq!(spec.load_timeout_ms(), Some(2_000));
    assert_eq!(spec.stale_if_error_ms(), 30_000);
    assert_eq!(spec.soft_timeout_ms(), Some(500));
    assert_eq!(spec.refresh_ms(), 60_000);
    assert_eq!(spec.idle_ms(), 120_000);
    assert_eq!(spec.name(), "games");
    assert!(spec.type_name().ends_with("::Game"), "{}", spec.type_name());
    assert!(echo_cache::declared().contains(&spec));
}
