// `refresh_ms` not shorter than the shortest life of a row (here 54 s:
// 60 s less 10 % jitter): a row would be due as soon as it is filled.
use echo_cache::near_cache;

#[near_cache(kind = "GAM", ttl_ms = 60_000, refresh_ms = 54_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

fn main() {}
