// A required key left out.
use echo_cache::near_cache;

#[near_cache(kind = "GAM")]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
