//! What a declared type is: its ids' [kind](kind), the [spec](spec) of its
//! table and the `Cached` trait that ties the two, its [ids](id) and how
//! they are [minted](mint). The bottom of the crate: it names nothing of the
//! layers above.

pub(crate) mod id;
pub(crate) mod kind;
pub(crate) mod mint;
pub(crate) mod spec;
