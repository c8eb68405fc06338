//! When a row dies: a TTL jittered by `ttl·jitter` either way, so a cohort
//! filled together does not expire together; a deadline of the row's own
//! is jittered down only.

/// When a row inserted at `now` with `ttl_ms` dies: uniform in
/// `ttl ± ttl·jitter`, exactly `ttl` when the jitter is 0.
pub(crate) fn expiry(now: u64, ttl_ms: u64, jitter: f64) -> u64 {
    let spread = spread(ttl_ms, jitter);
    let lifetime = if spread == 0 {
        ttl_ms
    } else {
        fastrand::u64(ttl_ms - spread..=ttl_ms + spread)
    };
    now.saturating_add(lifetime)
}

/// When a row inserted at `now` dies, if it must die within `within_ms`
/// (a TTL its loader gave, or what is left of the L2 frame it was read
/// from; `u64::MAX` for no bound): as [`expiry`] draws it if that bound is
/// not shorter than `ttl_ms`, but never past the bound; else uniform in
/// `within − within·jitter ..= within`: a bound is a deadline, so it is
/// jittered down only, and a cohort given one deadline still does not die
/// together.
pub(crate) fn expiry_within(now: u64, ttl_ms: u64, jitter: f64, within_ms: u64) -> u64 {
    if within_ms >= ttl_ms {
        return expiry(now, ttl_ms, jitter).min(now.saturating_add(within_ms));
    }
    let spread = spread(within_ms, jitter);
    now.saturating_add(fastrand::u64(within_ms - spread..=within_ms))
}

/// The shortest lifetime [`expiry`] draws.
pub(crate) fn shortest_lifetime(ttl_ms: u64, jitter: f64) -> u64 {
    ttl_ms - spread(ttl_ms, jitter)
}

/// The longest lifetime [`expiry`] draws.
pub(crate) fn longest_lifetime(ttl_ms: u64, jitter: f64) -> u64 {
    ttl_ms.saturating_add(spread(ttl_ms, jitter))
}

/// `ttl·jitter`, in whole milliseconds.
pub(super) fn spread(ttl_ms: u64, jitter: f64) -> u64 {
    // Jitter is at most 0.5 and TTLs fit f64's 53-bit mantissa in practice.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let spread = (ttl_ms as f64 * jitter) as u64;
    spread
}
