//! A table by its name, for operators: [`Cache::table_ops`] and what an
//! admin endpoint does with it ([`TableOps`]): its roster entry, flush,
//! invalidate an id given as text, its hottest ids and its figures, with
//! no type in sight.

use std::fmt;
use std::sync::Arc;

use super::{Cache, open_tables};
use crate::entity::id::RawId;
use crate::entity::kind::IdError;
use crate::entity::spec::TableSpec;
use crate::error::Error;
use crate::report::figures::{Figures, Hot};
use crate::report::roster::TableInfo;
use crate::table::AnyTable;

impl Cache {
    /// The operations of the table named `name` (see
    /// [`tables`](Self::tables) for the names), for code that knows the
    /// table by name only: an admin endpoint, a command line.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Error, Id};
    ///
    /// #[near_cache(kind = "GAM", ttl_ms = 600_000, name = "games")]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Game { pub secret: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let cache = Cache::builder()
    ///     .loader(|_: Id<Game>| async { Ok::<_, std::io::Error>(Some(Game { secret: "🍎".into() })) })
    ///     .build()?;
    /// let id = Id::<Game>::mint();
    /// cache.fetch(id).await?;
    ///
    /// // What an operator's request carries: text.
    /// let games = cache.table_ops("games")?;
    /// assert_eq!(games.figures().rows, 1);
    /// games.invalidate(&id.to_string()).await?;
    /// assert!(!cache.contains(id));
    /// games.flush();
    ///
    /// assert!(matches!(games.invalidate("GAM-oops").await, Err(Error::BadId { .. })));
    /// assert!(matches!(cache.table_ops("gmaes"), Err(Error::NoTable { .. })));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoTable`] if no open table of this cache is named `name`
    /// (it names the open ones).
    pub fn table_ops(&self, name: &str) -> Result<TableOps, Error> {
        let mut tables = open_tables(&self.inner.tables);
        if let Some(table) = tables.find(|table| table.spec().name() == name) {
            return Ok(TableOps {
                table: Arc::clone(table),
            });
        }
        let mut open: Vec<&'static str> = open_tables(&self.inner.tables)
            .map(|table| table.spec().name())
            .collect();
        open.sort_unstable();
        Err(Error::NoTable {
            name: Arc::from(name),
            open: Arc::from(open),
        })
    }
}

/// One table of a cache, by name ([`Cache::table_ops`]): what an operator
/// does to it without knowing its type. Ids go in and come out as text
/// (an [`RawId`] prints as its 14 characters and parses from them).
///
/// Holds the table, not the cache: cheap to clone, and it stays usable
/// while the cache does.
#[derive(Clone)]
pub struct TableOps {
    table: Arc<dyn AnyTable>,
}

impl TableOps {
    /// The table's declaration.
    #[must_use]
    pub fn spec(&self) -> &'static TableSpec {
        self.table.spec()
    }

    /// The table's entry in the roster ([`Cache::tables`]): its spec,
    /// counters and health now.
    #[must_use]
    pub fn info(&self) -> TableInfo {
        self.table.info()
    }

    /// Drops every row of the table in this node's L1, as
    /// [`Cache::flush`] does.
    pub fn flush(&self) {
        self.table.flush_l1();
    }

    /// Invalidates the id written in `id` (its 14 characters, as it
    /// prints) under a fresh version, which it returns, as
    /// [`Cache::invalidate`] does: this node's L1 row goes before it
    /// returns, L2's too, and the other nodes are told.
    ///
    /// # Errors
    ///
    /// [`Error::BadId`] if `id` is not an id
    /// ([`IdError::Shape`](crate::IdError::Shape)) or an id of another
    /// kind than the table's ([`IdError::Kind`](crate::IdError::Kind));
    /// else as [`Cache::invalidate`].
    pub async fn invalidate(&self, id: &str) -> Result<RawId, Error> {
        let spec = self.spec();
        let bad = |source| Error::BadId {
            table: spec.name(),
            source,
        };
        let id = RawId::parse(id).map_err(bad)?;
        if id.kind() != spec.kind() {
            return Err(bad(IdError::Kind {
                expected: spec.kind(),
                found: id.kind(),
            }));
        }
        Arc::clone(&self.table).invalidate_key(id.payload()).await
    }

    /// The `n` live rows the table's eviction policy ranks hottest in this
    /// node's L1, the hottest first, as [`Cache::hottest`] lists them.
    #[must_use]
    pub fn hottest(&self, n: usize) -> Vec<Hot<RawId>> {
        let kind = self.spec().kind();
        let hottest = self.table.hottest(n).into_iter();
        hottest
            .map(|(key, heat)| Hot::new(RawId::new(kind, key), heat))
            .collect()
    }

    /// The table's figures in this node's L1 now, as [`Cache::figures`].
    #[must_use]
    pub fn figures(&self) -> Figures {
        self.table.figures()
    }
}

impl fmt::Debug for TableOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableOps")
            .field("table", &self.spec().name())
            .finish_non_exhaustive()
    }
}
