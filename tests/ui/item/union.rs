// A union cannot be cached.
use echo_cache::near_cache;

#[near_cache(kind = "BIT", ttl_ms = 60_000)]
union Bits {
    int: u64,
    float: f64,
}

fn main() {
    let bits = Bits { int: 1 };
    drop(unsafe { bits.float });
}
