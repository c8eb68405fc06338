//! The README's example, compiled and run as a doctest, so the first code a
//! user reads is code that works.
#![doc = include_str!("../README.md")]

#[cfg(test)]
mod tests {
    const README: &str = include_str!("../README.md");

    /// echo-cache is not published: a link to its docs on docs.rs leads
    /// nowhere. The README says how to build and open them here instead.
    #[test]
    fn the_readme_opens_the_guide_from_a_local_build() {
        assert!(
            !README.contains("docs.rs/echo-cache"),
            "the README links to docs the crate does not have on docs.rs"
        );
        assert!(README.contains("cargo doc -p echo-cache --no-deps --open"));
        assert!(README.contains("target/doc/echo_cache/guide/index.html"));
        // The page it names is the `guide` module's.
        let lib = include_str!("../echo-cache/src/lib.rs");
        assert!(lib.contains("pub mod guide;"), "echo_cache::guide exists");
    }
}
