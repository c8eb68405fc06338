// Without `name`, the table is named after the type in snake case; a type
// whose name is no valid table name must declare one.
use echo_cache::near_cache;

#[near_cache(kind = "CAF", ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Café {
    menu: String,
}

fn main() {}
