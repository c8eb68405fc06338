//! The one error type of the crate.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A boxed error from a loader.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What can go wrong building a cache or fetching through it.
///
/// Errors are `Clone`: every waiter of a failed flight receives the same one.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cache, Error, Id};
///
/// #[near_cache(kind = "SES", ttl_ms = 60_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Session {
///     pub player: String,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let cache = Cache::builder()
///     .loader(|_: Id<Session>| async { Ok::<Option<Session>, std::io::Error>(None) })
///     .build()?;
///
/// match cache.fetch(Id::<Session>::mint()).await {
///     Ok(session) => println!("welcome back, {}", session.player),
///     // Not a failure: the system of record has no such session.
///     Err(err) if err.is_not_found() => println!("please log in"),
///     // The loader failed, timed out, crashed…: the cache could not answer.
///     Err(err) => return Err(err),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// The loader found no entity with this id. Not a failure of the cache:
    /// the system of record has nothing to serve.
    NotFound {
        /// The table asked.
        table: &'static str,
        /// The id asked for.
        id: crate::entity::id::RawId,
    },
    /// The loader returned an error.
    Load {
        /// The table whose loader failed.
        table: &'static str,
        /// The loader's error, shared by every waiter of the flight.
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The flight panicked (in the loader or below) or was dropped before it
    /// answered, e.g. because its runtime shut down.
    FlightCrashed {
        /// The table whose flight crashed.
        table: &'static str,
        /// The panic message, or why the flight was dropped.
        message: Arc<str>,
    },
    /// The fetch waited longer than its timeout. The flight goes on and
    /// fills L1 for the next caller.
    Timeout {
        /// The table asked.
        table: &'static str,
        /// How long the fetch waited.
        after: Duration,
    },
    /// The flight did not answer within its deadline (the table's
    /// `load_timeout_ms`, else [`Builder::load_timeout`](crate::Builder::load_timeout)):
    /// the loader (or L2) hung. Every waiter of the flight gets this; the
    /// flight is abandoned, its late result installs nowhere, and the next
    /// fetch of the id starts a fresh flight.
    LoadTimeout {
        /// The table whose flight timed out.
        table: &'static str,
        /// The deadline it missed.
        after: Duration,
    },
    /// The table has no loader (the cache was built with
    /// [`Builder::without_loader`](crate::Builder::without_loader)) and
    /// neither L1 nor L2 had the value.
    NoLoader {
        /// The table asked.
        table: &'static str,
    },
    /// A fetch outside a Tokio runtime on a cache built outside one: there is
    /// nowhere to run the flight. Or a cache with L2 and coherent tables
    /// built outside a runtime without [`Builder::runtime`](crate::Builder::runtime):
    /// there is nowhere to run its coherence lanes.
    NoRuntime,
    /// A durable table could not record the invalidation of a write: other
    /// nodes may not learn of it. Retry the write's invalidation.
    NotDelivered {
        /// The table written.
        table: &'static str,
        /// Why the invalidation was not recorded.
        reason: Arc<str>,
    },
    /// Two declarations in the program share a table name or a kind.
    Conflict {
        /// What they share, e.g. "table name `games`".
        what: Arc<str>,
        /// One declaration (see [`TableSpec::type_name`](crate::entity::spec::TableSpec::type_name)).
        first: &'static crate::entity::spec::TableSpec,
        /// The other declaration.
        second: &'static crate::entity::spec::TableSpec,
    },
    /// [`Builder::build`](crate::Builder::build) found tables with no
    /// loader: neither declared (`loader = ...`) nor given to
    /// [`Builder::loader`](crate::Builder::loader), and not marked as
    /// filled by `put` alone with
    /// [`Builder::without_loader`](crate::Builder::without_loader).
    MissingLoader {
        /// Those tables, sorted by name.
        tables: Arc<[&'static crate::entity::spec::TableSpec]>,
    },
    /// The cache was configured with an invalid setting.
    Config(String),
    /// No table of this cache has the name given to
    /// [`Cache::table_ops`](crate::Cache::table_ops): no declaration has
    /// it, or the cache left it closed ([`Builder::open`](crate::Builder::open)).
    NoTable {
        /// The name given.
        name: Arc<str>,
        /// The names of the cache's open tables, sorted.
        open: Arc<[&'static str]>,
    },
    /// Text given as an id of a table (to
    /// [`TableOps::invalidate`](crate::TableOps::invalidate)) is not an
    /// id of the table's kind.
    BadId {
        /// The table.
        table: &'static str,
        /// Why: the text is not an id ([`IdError::Shape`](crate::IdError::Shape)), or an id of
        /// another kind ([`IdError::Kind`](crate::IdError::Kind)).
        source: crate::entity::kind::IdError,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound { table, id } => write!(f, "{table}: no entity {id}"),
            Error::Load { table, source } => write!(f, "{table}: the loader failed: {source}"),
            Error::FlightCrashed { table, message } => {
                write!(f, "{table}: the fill crashed: {message}")
            }
            Error::Timeout { table, after } => {
                write!(f, "{table}: no answer within {after:?}")
            }
            Error::LoadTimeout { table, after } => {
                write!(f, "{table}: the fill did not finish within {after:?}")
            }
            Error::NoLoader { table } => {
                write!(f, "{table}: a miss needs a loader and the table has none")
            }
            Error::NoRuntime => f.write_str("a fill needs a Tokio runtime and none is running"),
            Error::NotDelivered { table, reason } => {
                write!(f, "{table}: the invalidation was not recorded: {reason}")
            }
            Error::Conflict {
                what,
                first,
                second,
            } => write!(
                f,
                "`{}` and `{}` both declare the {what}",
                first.type_name(),
                second.type_name()
            ),
            Error::MissingLoader { tables } => missing_loader(f, tables),
            Error::Config(what) => write!(f, "invalid cache configuration: {what}"),
            Error::NoTable { name, open } => {
                write!(f, "no table named {name:?} in this cache (its tables: ")?;
                for (i, open) in open.iter().enumerate() {
                    let comma = if i == 0 { "" } else { ", " };
                    write!(f, "{comma}{open}")?;
                }
                f.write_str(")")
            }
            Error::BadId { table, source } => write!(f, "{table}: {source}"),
        }
    }
}

/// Names the tables with no loader, and the three ways to settle each.
fn missing_loader(
    f: &mut fmt::Formatter<'_>,
    tables: &[&crate::entity::spec::TableSpec],
) -> fmt::Result {
    let plural = if tables.len() == 1 { "" } else { "s" };
    write!(f, "no loader for table{plural} ")?;
    for (i, spec) in tables.iter().enumerate() {
        let comma = if i == 0 { "" } else { ", " };
        write!(f, "{comma}`{}` ({})", spec.name(), spec.type_name())?;
    }
    // The type as a user writes it: the last segment of its path.
    let ty = match tables {
        [spec] => spec.type_name().rsplit("::").next().unwrap_or("T"),
        _ => "T",
    };
    write!(
        f,
        ": a miss would have nowhere to go. Name the loader in the declaration \
         (`#[near_cache(..., loader = load_fn)]`), give it with `Builder::loader`, \
         or, for a table filled only by `put`, build with \
         `Builder::without_loader::<{ty}>()`"
    )?;
    if tables.len() > 1 {
        f.write_str(" for each")?;
    }
    Ok(())
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Load { source, .. } => Some(&**source),
            Error::BadId { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    /// Whether this is [`Error::NotFound`]: the entity does not exist.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
}
