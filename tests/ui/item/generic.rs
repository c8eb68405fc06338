// A table holds one concrete type: no generic parameters.
use echo_cache::near_cache;

#[near_cache(kind = "BOX", ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Boxed<T> {
    value: T,
}

fn main() {}
