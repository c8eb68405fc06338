// `crate = "..."`: the path of echo_cache when it is not `::echo_cache`, as
// when it is reached through a re-export. The path is resolved where the
// attribute is written, so any of these work:
//
// - a re-export, as a facade crate offers one: `crate = "::facade::echo_cache"`
//   (here the facade is a module of this crate);
// - a `use` alias in scope: `use echo_cache as ec;` then `crate = "ec"`;
// - an `extern crate` alias at the crate root, which is in scope everywhere:
//   `extern crate echo_cache as store;` then `crate = "store"` or `"::store"`.
extern crate echo_cache as store;

/// What a facade crate would offer.
mod facade {
    pub use echo_cache;
}

mod through_reexport {
    use crate::facade::echo_cache::near_cache;

    #[near_cache(kind = "AAA", ttl_ms = 60_000, crate = "crate::facade::echo_cache")]
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Alpha {
        pub a: u8,
    }
}

mod through_use_alias {
    use echo_cache as ec;

    #[ec::near_cache(kind = "BBB", ttl_ms = 60_000, crate = "ec")]
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Beta {
        pub b: u8,
    }
}

mod through_extern_crate {
    #[store::near_cache(kind = "CCC", ttl_ms = 60_000, crate = "::store")]
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Gamma {
        pub c: u8,
    }
}

use store::Cached;

fn main() {
    assert_eq!(through_reexport::Alpha::spec().name(), "alpha");
    assert_eq!(through_use_alias::Beta::spec().name(), "beta");
    assert_eq!(through_extern_crate::Gamma::spec().name(), "gamma");
    assert_eq!(store::declared().len(), 3);
}
