// A type declared inside a function body is gathered like any other.
use echo_cache::{Cached, near_cache};

fn main() {
    #[near_cache(kind = "LOC", ttl_ms = 60_000)]
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Local {
        here: bool,
    }

    assert_eq!(Local::spec().name(), "local");
    assert_eq!(echo_cache::declared().len(), 1);
}
