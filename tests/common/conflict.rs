//! The checks shared by `conflict_name.rs` and `conflict_kind.rs`: each
//! binary declares exactly two types that conflict over one table name or
//! kind (its own binary, since the conflict refuses every build in the
//! program), then asks these what that program must show.

use echo_cache::{Cache, Error};

/// No cache builds: the error is an [`Error::Conflict`] over `what` (how
/// the error names the shared name or kind) between exactly the two types
/// of `types`, and its message names `what` and both types.
pub fn building_a_cache_names_both(what: &str, types: [&str; 2]) {
    let Err(error) = Cache::builder().build() else {
        panic!("two declarations in conflict over {what} must not build");
    };
    let Error::Conflict {
        what: ref conflict,
        first,
        second,
    } = error
    else {
        panic!("expected Conflict, got {error:?}");
    };
    assert_eq!(&**conflict, what);
    let mut named = [first.type_name(), second.type_name()];
    named.sort_unstable();
    let mut expected = types;
    expected.sort_unstable();
    assert_eq!(named, expected);
    let message = error.to_string();
    assert!(
        message.contains(types[0]) && message.contains(types[1]),
        "{message}"
    );
    assert!(message.contains(what), "{message}");
}

/// The directory of declared tables lists exactly the two types of `types`.
pub fn the_directory_lists_both(types: [&str; 2]) {
    let declared: Vec<&str> = echo_cache::declared()
        .iter()
        .map(|spec| spec.type_name())
        .collect();
    assert_eq!(declared.len(), 2);
    assert!(declared.contains(&types[0]) && declared.contains(&types[1]));
}
