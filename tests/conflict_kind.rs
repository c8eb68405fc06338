//! Two declarations that share a table kind: no cache can be built in this
//! program, and the error names both types. (Its own test binary: the
//! conflict refuses every build in the program.)

mod common;

use common::conflict;
use echo_cache::near_cache;

#[near_cache(kind = "SAM", ttl_ms = 1_000, name = "one")]
#[derive(serde::Serialize, serde::Deserialize)]
struct One {
    a: u32,
}

#[near_cache(kind = "SAM", ttl_ms = 1_000, name = "two")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Two {
    b: u32,
}

const TYPES: [&str; 2] = ["conflict_kind::One", "conflict_kind::Two"];

#[test]
fn building_a_cache_names_both_types() {
    conflict::building_a_cache_names_both("kind `SAM`", TYPES);
}

#[test]
fn the_directory_still_lists_both() {
    conflict::the_directory_lists_both(TYPES);
}
