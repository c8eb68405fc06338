//! What a declared type is: its ids' [kind](kind), the [spec](spec) of its
//! table and the `Cached` trait that ties the two, the [limits](limits) a
//! deployment may set in place of the declared ones, its [ids](id) and how
//! they are [minted](mint). The bottom of the crate: it names nothing of the
//! layers above.

pub(crate) mod id;
pub(crate) mod kind;
pub(crate) mod limits;
pub(crate) mod mint;
pub(crate) mod spec;
pub(crate) mod tag;
