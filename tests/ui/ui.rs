//! The compile-time face of `#[near_cache(...)]`: what compiles, and what
//! the compiler says when it does not.
//!
//! Each case under `tests/ui/<topic>/` makes one mistake and its `.stderr`
//! holds the exact diagnostics (`attr/many_mistakes.rs` makes several, to
//! show they are all reported in one run). Cases under `tests/ui/pass/`
//! must compile and run.
//!
//! - `attr/`: the key list itself: unknown, duplicate, missing keys,
//!   values of the wrong type.
//! - `value/`: well-formed keys whose values are out of their domain.
//! - `item/`: the item the attribute sits on.
//! - `fetch/`: use sites: ids of another kind, types with no cache.
//!
//! After a change to the macro or the runtime's diagnostics, regenerate the
//! expected output with
//! `TRYBUILD=overwrite cargo test -p echo-cache-ui` and read
//! every changed `.stderr`: it is what a user will see.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    for topic in ["attr", "value", "item", "fetch"] {
        t.compile_fail(format!("{topic}/*.rs"));
    }
    t.pass("pass/*.rs");
}
