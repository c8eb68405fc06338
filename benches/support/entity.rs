//! The benches' `Profile`: a user row of about 100 bytes, in memory and on
//! the wire, the entity of the benches that read it from L2
//! (`benches/batch.rs`, `benches/l2.rs`, `benches/cluster`). Its fields
//! and the row of an id are written once, here; each bench declares it
//! with [`profile!`] under a table of its own (kind, name, bound, declared
//! loader), as it always has, so what is cached is the same everywhere and
//! where it is cached is the bench's to say.

/// Declares the `Profile` entity: the bench's attributes (its doc and its
/// `#[near_cache(…)]` table) on the struct of the fields below, and
/// `<name>::of(id)`, the row of an id.
///
/// ```ignore
/// support::entity::profile! {
///     /// The cached entity.
///     #[near_cache(kind = "PRF", ttl_ms = 3_600_000, coherence = "none")]
///     pub struct Profile;
/// }
/// ```
// Not every bench declares a Profile; the others would warn.
#[allow(unused_macros)]
macro_rules! profile {
    ($(#[$attr:meta])* $vis:vis struct $name:ident;) => {
        $(#[$attr])*
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        $vis struct $name {
            /// The user's number.
            pub user: u64,
            /// A short handle.
            pub handle: String,
            /// A longer display name.
            pub display_name: String,
            /// ISO country code.
            pub country: String,
            /// Level.
            pub level: u32,
            /// Rating.
            pub rating: f64,
            /// Badge numbers.
            pub badges: Vec<u16>,
            /// Creation time, ms since the epoch.
            pub created_ms: u64,
        }

        impl $name {
            /// The row of `id`, every field drawn from its payload.
            $vis fn of(id: ::echo_cache::Id<$name>) -> $name {
                let n = id.payload();
                $name {
                    user: n,
                    handle: format!("player-{:06}", n % 1_000_000),
                    display_name: format!("Display Name Number {:010}", n % 10_000_000_000),
                    country: "FR".to_owned(),
                    #[allow(clippy::cast_possible_truncation)]
                    level: (n % 100) as u32,
                    #[allow(clippy::cast_precision_loss)]
                    rating: 1_500.0 + (n % 1_000) as f64 / 10.0,
                    badges: vec![3, 17, 42, 105, 230, 311, 512, 999],
                    created_ms: 1_700_000_000_000 + n % 1_000_000,
                }
            }
        }
    };
}

#[allow(unused_imports)]
pub(crate) use profile;
