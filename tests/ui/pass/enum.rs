// An enum: its values are cached like a struct's.
use echo_cache::{Cached, Id, near_cache};

#[near_cache(kind = "MOV", ttl_ms = 60_000)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Move {
    Pass,
    Place { x: u8, y: u8 },
    Resign(String),
}

fn main() {
    assert_eq!(Move::spec().name(), "move");
    let id: Id<Move> = "MOV0000000001z".parse().expect("a MOV id");
    assert_eq!(id.raw().kind(), Move::KIND);
}
