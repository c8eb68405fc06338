//! The limits a deployment may set on a table in place of its
//! declaration's ([`Limits`]), and the spec in force they make, checked by
//! the attribute's rules with the attribute's words.
//!
//! The rules are written twice: here, for limits given at run time, and in
//! `echo-cache-derive` (`valid.rs`), for the attribute. Each message here
//! is the attribute's for the same mistake, word for word; the suite's
//! `limits` module holds the two together against the UI tests' expected
//! output.

use crate::entity::spec::TableSpec;

/// Limits of one table, given to [`Builder::limits`](crate::Builder::limits)
/// in place of what its declaration says: for one cache built from the
/// same declarations in two deployments that need other limits.
///
/// Each limit left unset keeps the declared value (or the attribute's
/// default). The declaration stays the source of everything else: the
/// kind, the table name, the coherence mode, the placement, the eviction
/// policy.
///
/// | limit | the attribute's key | rule |
/// |---|---|---|
/// | [`ttl_ms`](Self::ttl_ms) | `ttl_ms` | > 0 |
/// | [`jitter`](Self::jitter) | `jitter` | `0.0..=0.5` |
/// | [`max_size`](Self::max_size) | `max_size` | > 0 |
/// | [`max_bytes`](Self::max_bytes) | `max_bytes` | > 0 |
/// | [`refresh_ms`](Self::refresh_ms) | `refresh_ms` | > 0, and less than the shortest life of a row, `ttl − ttl·jitter` (in force: a declared `refresh_ms` must fit an overridden `ttl_ms`) |
/// | [`idle_ms`](Self::idle_ms) | `idle_ms` | > 0, and less than the shortest life of a row, `ttl − ttl·jitter` (in force: a declared `idle_ms` must fit an overridden `ttl_ms`) |
/// | [`stale_if_error_ms`](Self::stale_if_error_ms) | `stale_if_error_ms` | at most `86_400_000` (a day) |
/// | [`warm_ids`](Self::warm_ids) | (none: [`TableSpec::DEFAULT_WARM_IDS`]) | `1..=100_000` |
/// | [`soft_timeout_ms`](Self::soft_timeout_ms) | `soft_timeout_ms` | > 0, with a `stale_if_error_ms` > 0 in force, and less than the flight's deadline in force (the table's `load_timeout_ms`, else [`Builder::load_timeout`](crate::Builder::load_timeout)) |
///
/// [`Builder::build`](crate::Builder::build) refuses limits that break a
/// rule with [`Error::Config`](crate::Error::Config), naming the table and
/// saying what the attribute would say of the same value.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cache, Limits};
///
/// #[near_cache(kind = "GAM", ttl_ms = 600_000, max_size = 50_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// pub struct Game { pub secret: String }
///
/// let limits = Limits::new().ttl_ms(60_000).max_size(1_000);
/// assert_eq!(limits.get_ttl_ms(), Some(60_000));
/// assert_eq!(limits.get_jitter(), None); // as declared
/// let cache = Cache::builder().without_loader::<Game>().limits::<Game>(limits).build()?;
/// let games = &cache.tables()[0];
/// assert_eq!((games.spec.ttl_ms(), games.spec.max_size()), (60_000, 1_000));
/// # Ok::<(), echo_cache::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[must_use]
pub struct Limits {
    ttl_ms: Option<u64>,
    jitter: Option<f64>,
    max_size: Option<usize>,
    max_bytes: Option<usize>,
    refresh_ms: Option<u64>,
    idle_ms: Option<u64>,
    stale_if_error_ms: Option<u64>,
    warm_ids: Option<usize>,
    soft_timeout_ms: Option<u64>,
}

impl Limits {
    /// No limit set: every one as declared.
    pub const fn new() -> Limits {
        Limits {
            ttl_ms: None,
            jitter: None,
            max_size: None,
            max_bytes: None,
            refresh_ms: None,
            idle_ms: None,
            stale_if_error_ms: None,
            warm_ids: None,
            soft_timeout_ms: None,
        }
    }

    /// The time to live of a row, in milliseconds, before jitter (the
    /// attribute's `ttl_ms`). It bounds L2 frames too, and a TTL a loader
    /// or a put gives a value is capped at it.
    pub const fn ttl_ms(mut self, ttl_ms: u64) -> Limits {
        self.ttl_ms = Some(ttl_ms);
        self
    }

    /// The fraction of the TTL by which a row's expiry may move either
    /// way (the attribute's `jitter`).
    pub const fn jitter(mut self, jitter: f64) -> Limits {
        self.jitter = Some(jitter);
        self
    }

    /// The most rows kept in L1 (the attribute's `max_size`).
    pub const fn max_size(mut self, max_size: usize) -> Limits {
        self.max_size = Some(max_size);
        self
    }

    /// The most bytes of values kept in L1, counted by their weight (the
    /// attribute's `max_bytes`; see [A byte bound](crate#a-byte-bound)).
    /// Sets a byte bound on a table declared without one too.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Limits};
    ///
    /// #[near_cache(kind = "IMG", ttl_ms = 60_000, max_bytes = 64_000_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Image { pub png: Vec<u8> }
    ///
    /// let cache = Cache::builder()
    ///     .without_loader::<Image>()
    ///     .limits::<Image>(Limits::new().max_bytes(8_000_000))
    ///     .build()?;
    /// assert_eq!(cache.tables()[0].spec.max_bytes(), Some(8_000_000));
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    pub const fn max_bytes(mut self, max_bytes: usize) -> Limits {
        self.max_bytes = Some(max_bytes);
        self
    }

    /// How long before its expiry a row read starts its refresh, in
    /// milliseconds (the attribute's `refresh_ms`; see
    /// [Refresh-ahead](crate#refresh-ahead)).
    pub const fn refresh_ms(mut self, refresh_ms: u64) -> Limits {
        self.refresh_ms = Some(refresh_ms);
        self
    }

    /// How long a row lives unread, in milliseconds (the attribute's
    /// `idle_ms`; see [Time-to-idle](crate#time-to-idle)).
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Limits};
    ///
    /// #[near_cache(kind = "SES", ttl_ms = 3_600_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Session { pub user: u64 }
    ///
    /// let limits = Limits::new().idle_ms(300_000);
    /// let cache = Cache::builder().without_loader::<Session>().limits::<Session>(limits).build()?;
    /// assert_eq!(cache.tables()[0].spec.idle_ms(), 300_000);
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    pub const fn idle_ms(mut self, idle_ms: u64) -> Limits {
        self.idle_ms = Some(idle_ms);
        self
    }

    /// How long past its expiry a value may still answer while the loader
    /// fails, in milliseconds; 0: never (the attribute's
    /// `stale_if_error_ms`; see
    /// [Serving stale](crate#serving-stale-while-the-store-fails)).
    pub const fn stale_if_error_ms(mut self, stale_if_error_ms: u64) -> Limits {
        self.stale_if_error_ms = Some(stale_if_error_ms);
        self
    }

    /// How many hot ids the fleet's list of a `warm` table keeps, and a
    /// starting node warms (at most `max_size` of them); see
    /// [Warm start](crate#warm-start). 1,000 unless set
    /// ([`TableSpec::DEFAULT_WARM_IDS`]); no effect on a table not
    /// declared `warm`.
    pub const fn warm_ids(mut self, warm_ids: usize) -> Limits {
        self.warm_ids = Some(warm_ids);
        self
    }

    /// How long a flight's waiters wait for the loader before an expired
    /// value answers them while the load goes on, in milliseconds (the
    /// attribute's `soft_timeout_ms`; see [Soft timeouts](crate#soft-timeouts)).
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::{near_cache, Cache, Error, Limits};
    ///
    /// #[near_cache(kind = "PRC", ttl_ms = 60_000, stale_if_error_ms = 600_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Price { pub cents: u64 }
    ///
    /// let cache = Cache::builder()
    ///     .without_loader::<Price>()
    ///     .limits::<Price>(Limits::new().soft_timeout_ms(250))
    ///     .build()?;
    /// assert_eq!(cache.tables()[0].spec.soft_timeout_ms(), Some(250));
    ///
    /// // Not past the flight's deadline.
    /// let refused = Cache::builder()
    ///     .without_loader::<Price>()
    ///     .load_timeout(Duration::from_millis(250))
    ///     .limits::<Price>(Limits::new().soft_timeout_ms(250))
    ///     .build();
    /// assert!(matches!(refused, Err(Error::Config(why)) if why.contains("`soft_timeout_ms` must be less")));
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    pub const fn soft_timeout_ms(mut self, soft_timeout_ms: u64) -> Limits {
        self.soft_timeout_ms = Some(soft_timeout_ms);
        self
    }

    /// The `ttl_ms` set, if any.
    #[must_use]
    pub const fn get_ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }

    /// The `jitter` set, if any.
    #[must_use]
    pub const fn get_jitter(&self) -> Option<f64> {
        self.jitter
    }

    /// The `max_size` set, if any.
    #[must_use]
    pub const fn get_max_size(&self) -> Option<usize> {
        self.max_size
    }

    /// The `refresh_ms` set, if any.
    #[must_use]
    pub const fn get_refresh_ms(&self) -> Option<u64> {
        self.refresh_ms
    }

    /// The `idle_ms` set, if any.
    #[must_use]
    pub const fn get_idle_ms(&self) -> Option<u64> {
        self.idle_ms
    }

    /// The `max_bytes` set, if any.
    #[must_use]
    pub const fn get_max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }

    /// The `stale_if_error_ms` set, if any.
    #[must_use]
    pub const fn get_stale_if_error_ms(&self) -> Option<u64> {
        self.stale_if_error_ms
    }

    /// The `warm_ids` set, if any.
    #[must_use]
    pub const fn get_warm_ids(&self) -> Option<usize> {
        self.warm_ids
    }

    /// The `soft_timeout_ms` set, if any.
    #[must_use]
    pub const fn get_soft_timeout_ms(&self) -> Option<u64> {
        self.soft_timeout_ms
    }
}

/// The meanings the attribute's messages give its keys (its `attr.rs`).
const TTL_MEANING: &str = "how long a row lives, in milliseconds";
const MAX_SIZE_MEANING: &str = "how many rows L1 keeps at most";
const MAX_BYTES_MEANING: &str = "how many bytes of values L1 keeps at most, by their weight";
const REFRESH_MEANING: &str =
    "how long before its expiry a row read starts its refresh, in milliseconds";
const IDLE_MEANING: &str = "how long a row lives unread, in milliseconds";
const SOFT_MEANING: &str = "how long a flight's waiters wait for the loader before an expired \
                            value answers them, in milliseconds";

/// The most hot ids a table's list keeps ([`Limits::warm_ids`]).
pub(crate) const MAX_WARM_IDS: usize = 100_000;

/// The longest `stale_if_error_ms`: a day (the attribute's too).
pub(crate) const MAX_STALE_IF_ERROR_MS: u64 = 86_400_000;

impl TableSpec {
    /// The spec in force with `limits` in place of the declared ones.
    ///
    /// # Errors
    ///
    /// Every rule `limits` break, each in the attribute's words, and a
    /// declared `refresh_ms` that no longer fits the TTL in force.
    #[allow(clippy::too_many_lines)] // one short rule after another, a limit each
    pub(crate) fn limited(&self, limits: &Limits) -> Result<TableSpec, Vec<String>> {
        let mut faults = Vec::new();
        let mut spec = *self;
        if let Some(ttl_ms) = limits.ttl_ms {
            spec.ttl_ms = ttl_ms;
            if ttl_ms == 0 {
                faults.push(format!("`ttl_ms` may not be 0: it is {TTL_MEANING}"));
            }
        }
        if let Some(jitter) = limits.jitter {
            spec.jitter = jitter;
            if !(0.0..=0.5).contains(&jitter) {
                faults.push(format!(
                    "`jitter` is from 0.0 to 0.5, not {jitter}: a row's expiry is drawn from \
                     ttl_ms ± ttl_ms × jitter"
                ));
            }
        }
        if let Some(max_size) = limits.max_size {
            spec.max_size = max_size;
            if max_size == 0 {
                faults.push(format!("`max_size` may not be 0: it is {MAX_SIZE_MEANING}"));
            }
        }
        if let Some(max_bytes) = limits.max_bytes {
            spec.max_bytes = Some(max_bytes);
            if max_bytes == 0 {
                faults.push(format!(
                    "`max_bytes` may not be 0: it is {MAX_BYTES_MEANING}"
                ));
            }
        }
        if let Some(grace) = limits.stale_if_error_ms {
            spec.stale_if_error_ms = grace;
            if grace > MAX_STALE_IF_ERROR_MS {
                faults.push(
                    "`stale_if_error_ms` is at most 86_400_000 (a day): a value expired longer \
                     ago is no fallback; lengthen `ttl_ms` instead"
                        .to_owned(),
                );
            }
        }
        if let Some(warm_ids) = limits.warm_ids {
            spec.warm_ids = warm_ids;
            if !(1..=MAX_WARM_IDS).contains(&warm_ids) {
                faults.push(format!(
                    "`warm_ids` is from 1 to 100_000, not {warm_ids}: it is how many hot ids \
                     the fleet's list keeps, and a starting node warms"
                ));
            }
        }
        if let Some(refresh_ms) = limits.refresh_ms {
            spec.refresh_ms = refresh_ms;
            if refresh_ms == 0 {
                faults.push(format!(
                    "`refresh_ms` may not be 0: it is {REFRESH_MEANING}"
                ));
            }
        }
        if let Some(idle_ms) = limits.idle_ms {
            spec.idle_ms = idle_ms;
            if idle_ms == 0 {
                faults.push(format!("`idle_ms` may not be 0: it is {IDLE_MEANING}"));
            }
        }
        if let Some(soft_ms) = limits.soft_timeout_ms {
            spec.soft_timeout_ms = Some(soft_ms);
            if soft_ms == 0 {
                faults.push(format!(
                    "`soft_timeout_ms` may not be 0: it is {SOFT_MEANING}"
                ));
            }
        }
        if let Some(soft_ms) = spec.soft_timeout_ms
            && soft_ms > 0
        {
            let declared = if limits.soft_timeout_ms.is_none() {
                " (`soft_timeout_ms` as declared)"
            } else {
                ""
            };
            if spec.stale_if_error_ms == 0 {
                faults.push(format!(
                    "`soft_timeout_ms` answers a flight's waiters with an expired value: declare \
                     how long past its expiry one may answer, `stale_if_error_ms = 30_000`{declared}"
                ));
            } else if let Some(deadline) = spec.load_timeout_ms {
                faults.extend(soft_past_deadline(soft_ms, deadline, "`load_timeout_ms`"));
            }
        }
        // Against the TTL in force, once both are well-formed.
        let (refresh_ms, ttl_ms) = (spec.refresh_ms, spec.ttl_ms);
        if faults.is_empty() && refresh_ms > 0 {
            let shortest = shortest_life(ttl_ms, spec.jitter);
            if refresh_ms >= shortest {
                let declared = if limits.refresh_ms.is_none() {
                    " (`refresh_ms` as declared: give a shorter one with these limits)"
                } else {
                    ""
                };
                faults.push(format!(
                    "`refresh_ms` must be less than the shortest life of a row, ttl_ms − ttl_ms × \
                     jitter = {shortest} ms, not {refresh_ms}: a row is refreshed when less than \
                     `refresh_ms` of its life remain, and this one would be due as soon as it is \
                     filled{declared}"
                ));
            }
        }
        if faults.is_empty() {
            faults.extend(idle_past_life(&spec, limits));
        }
        if faults.is_empty() {
            Ok(spec)
        } else {
            Err(faults)
        }
    }
}

/// The fault of an `idle_ms` in force not shorter than the shortest life
/// of a row in force, if it is not: the TTL would end every row first.
fn idle_past_life(spec: &TableSpec, limits: &Limits) -> Option<String> {
    let (idle_ms, shortest) = (spec.idle_ms, shortest_life(spec.ttl_ms, spec.jitter));
    (idle_ms > 0 && idle_ms >= shortest).then(|| {
        let declared = if limits.idle_ms.is_none() {
            " (`idle_ms` as declared: give a shorter one with these limits)"
        } else {
            ""
        };
        format!(
            "`idle_ms` must be less than the shortest life of a row, ttl_ms − ttl_ms × jitter = \
             {shortest} ms, not {idle_ms}: a row dies unread after `idle_ms`, and this one would \
             reach its TTL first{declared}"
        )
    })
}

/// The fault of a soft timeout of `soft_ms` not shorter than the flight's
/// `deadline_ms` (`named`: how the deadline is set), if it is not.
pub(crate) fn soft_past_deadline(soft_ms: u64, deadline_ms: u64, named: &str) -> Option<String> {
    (soft_ms >= deadline_ms).then(|| {
        format!(
            "`soft_timeout_ms` must be less than the flight's deadline, {named} = {deadline_ms}, \
             not {soft_ms}: past the deadline the flight is over"
        )
    })
}

/// `ttl − ttl·jitter` in whole milliseconds, as L1 draws it (and as the
/// attribute checks it).
fn shortest_life(ttl_ms: u64, jitter: f64) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let spread = (ttl_ms as f64 * jitter) as u64;
    ttl_ms - spread
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::kind::Kind;
    use crate::entity::spec::{Coherence, Eviction, Placement};

    /// A declaration of 60 s rows, with the attribute's defaults.
    fn declared(refresh_ms: Option<u64>) -> TableSpec {
        TableSpec {
            name: "limits_games",
            type_name: "Game",
            kind: Kind::new("LIM"),
            ttl_ms: 60_000,
            jitter: TableSpec::DEFAULT_JITTER,
            max_size: TableSpec::DEFAULT_MAX_SIZE,
            max_bytes: None,
            sweep_ms: TableSpec::DEFAULT_SWEEP_MS,
            absent_ttl_ms: 0,
            load_timeout_ms: None,
            lost_grace_ms: 0,
            stale_if_error_ms: 0,
            soft_timeout_ms: None,
            refresh_ms: refresh_ms.unwrap_or(0),
            idle_ms: 0,
            coherence: Coherence::Broadcast,
            placement: Placement::Spread,
            eviction: Eviction::None,
            warm: crate::entity::spec::Warm::Off,
            herd: crate::entity::spec::Herd::Node,
            warm_ids: TableSpec::DEFAULT_WARM_IDS,
            fingerprint: 7,
        }
    }

    #[test]
    fn limits_replace_only_what_they_set() {
        let spec = declared(None);
        let limits = Limits::new()
            .ttl_ms(5_000)
            .max_size(10)
            .stale_if_error_ms(1_000);
        let limited = spec.limited(&limits).expect("within the rules");
        assert_eq!(
            (limited.ttl_ms, limited.max_size, limited.stale_if_error_ms),
            (5_000, 10, 1_000)
        );
        let kept = TableSpec {
            ttl_ms: spec.ttl_ms,
            max_size: spec.max_size,
            stale_if_error_ms: spec.stale_if_error_ms,
            ..limited
        };
        assert_eq!(kept, spec, "nothing else changes");
        assert_eq!(spec.limited(&Limits::new()), Ok(spec));
    }

    #[test]
    fn every_broken_rule_is_said() {
        let limits = Limits::new()
            .ttl_ms(0)
            .max_size(0)
            .jitter(0.7)
            .refresh_ms(0)
            .stale_if_error_ms(MAX_STALE_IF_ERROR_MS + 1)
            .warm_ids(0);
        let faults = declared(None).limited(&limits).expect_err("six mistakes");
        assert_eq!(faults.len(), 6, "{faults:?}");
        let over = Limits::new().warm_ids(MAX_WARM_IDS + 1);
        assert!(
            declared(None).limited(&over).is_err(),
            "over 100_000 hot ids"
        );
        let within = Limits::new().warm_ids(MAX_WARM_IDS);
        assert_eq!(
            declared(None).limited(&within).map(|spec| spec.warm_ids),
            Ok(MAX_WARM_IDS)
        );
        assert!(faults[0].starts_with("`ttl_ms` may not be 0"));
        assert!(faults[1].starts_with("`jitter` is from 0.0 to 0.5, not 0.7"));
        assert!(faults[2].starts_with("`max_size` may not be 0"));
        assert!(faults[3].starts_with("`stale_if_error_ms` is at most 86_400_000"));
        assert!(faults[4].starts_with("`warm_ids` is from 1 to 100_000, not 0"));
        assert!(faults[5].starts_with("`refresh_ms` may not be 0"));
        let nan = declared(None).limited(&Limits::new().jitter(f64::NAN));
        assert!(nan.is_err(), "NaN is no jitter");
        let day = Limits::new().stale_if_error_ms(MAX_STALE_IF_ERROR_MS);
        assert!(declared(None).limited(&day).is_ok(), "a day is allowed");
    }

    #[test]
    fn a_soft_timeout_needs_a_grace_and_a_longer_deadline() {
        let spec = TableSpec {
            stale_if_error_ms: 30_000,
            load_timeout_ms: Some(1_000),
            ..declared(None)
        };
        let soft = |limits: Limits| spec.limited(&limits).map(|s| s.soft_timeout_ms);
        assert_eq!(soft(Limits::new().soft_timeout_ms(999)), Ok(Some(999)));
        let zero = soft(Limits::new().soft_timeout_ms(0)).expect_err("0");
        assert!(
            zero[0].starts_with("`soft_timeout_ms` may not be 0"),
            "{zero:?}"
        );
        let late = soft(Limits::new().soft_timeout_ms(1_000)).expect_err("at the deadline");
        assert!(
            late[0].contains("`load_timeout_ms` = 1000, not 1000"),
            "{late:?}"
        );
        let graceless = soft(Limits::new().soft_timeout_ms(100).stale_if_error_ms(0));
        assert!(graceless.expect_err("no grace")[0].ends_with("`stale_if_error_ms = 30_000`"));
        // A declared soft timeout, its grace taken away by the limits.
        let declared_soft = TableSpec {
            soft_timeout_ms: Some(100),
            ..spec
        };
        let fault = declared_soft.limited(&Limits::new().stale_if_error_ms(0));
        assert!(fault.expect_err("no grace")[0].ends_with("(`soft_timeout_ms` as declared)"));
    }

    #[test]
    fn a_refresh_must_fit_the_ttl_in_force() {
        // 60 s less 10 %: 54 s.
        let spec = declared(Some(30_000));
        assert!(spec.limited(&Limits::new().refresh_ms(53_999)).is_ok());
        let past = spec.limited(&Limits::new().refresh_ms(54_000));
        assert_eq!(past.expect_err("past life").len(), 1);
        // The declared refresh, against a shorter TTL or a wider jitter.
        let shorter = spec.limited(&Limits::new().ttl_ms(30_000));
        let fault = &shorter.expect_err("30 s less 10 % is 27 s")[0];
        assert!(fault.contains("= 27000 ms, not 30000"), "{fault}");
        assert!(
            fault.ends_with("(`refresh_ms` as declared: give a shorter one with these limits)")
        );
        assert!(
            spec.limited(&Limits::new().jitter(0.4)).is_ok(),
            "36 s is more than 30 s"
        );
        assert!(
            spec.limited(&Limits::new().jitter(0.5)).is_err(),
            "30 s is not"
        );
        let both = Limits::new().ttl_ms(30_000).refresh_ms(1_000);
        assert_eq!(spec.limited(&both).map(|s| s.refresh_ms), Ok(1_000));
    }
}
