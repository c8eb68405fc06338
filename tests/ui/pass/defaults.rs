// Only the required keys: the others take the documented defaults, and the
// table is named after the type in snake case.
use echo_cache::{Cached, Coherence, Eviction, Placement, TableSpec, near_cache};

#[near_cache(kind = "GSE", ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct GameSession {
    player: String,
}

fn main() {
    let spec = GameSession::spec();
    assert_eq!(spec.name(), "game_session");
    assert_eq!(spec.coherence(), Coherence::None);
    assert_eq!(spec.placement(), Placement::Table);
    assert!((spec.jitter() - TableSpec::DEFAULT_JITTER).abs() < f64::EPSILON);
    assert_eq!(spec.max_size(), TableSpec::DEFAULT_MAX_SIZE);
    assert_eq!(spec.eviction(), Eviction::Hot);
    assert_eq!(spec.warm(), echo_cache::Warm::Off);
    assert_eq!(spec.sweep_ms(), TableSpec::DEFAULT_SWEEP_MS);
    assert_eq!(spec.absent_ttl_ms(), TableSpec::DEFAULT_ABSENT_TTL_MS);
}
