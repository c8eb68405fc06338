//! Two declarations that share a table kind: no cache can be built in this
//! program, and the error names both types. (Its own test binary: the
//! conflict refuses every build in the program.)

use echo_cache::{Cache, Error, near_cache};

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

#[test]
fn building_a_cache_names_both_types() {
    let Err(error) = Cache::builder().build() else {
        panic!("two declarations of one table kind must not build");
    };
    let Error::Conflict {
        ref what,
        first,
        second,
    } = error
    else {
        panic!("expected Conflict, got {error:?}");
    };
    assert_eq!(&**what, "kind `SAM`");
    let mut types = [first.type_name(), second.type_name()];
    types.sort_unstable();
    assert_eq!(types, ["conflict_kind::One", "conflict_kind::Two"]);
    let message = error.to_string();
    assert!(
        message.contains("conflict_kind::One") && message.contains("conflict_kind::Two"),
        "{message}"
    );
    assert!(message.contains("kind `SAM`"), "{message}");
}

#[test]
fn the_directory_still_lists_both() {
    let types: Vec<&str> = echo_cache::declared()
        .iter()
        .map(|spec| spec.type_name())
        .collect();
    assert_eq!(types.len(), 2);
    assert!(types.contains(&"conflict_kind::One") && types.contains(&"conflict_kind::Two"));
}
