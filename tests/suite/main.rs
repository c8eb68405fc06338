//! The integration tests, as one test binary with a module per subject:
//! built and linked once, and run in one pass whose tests share the
//! machine's cores (a binary per file linked the whole dependency tree
//! some thirty times, and ran the files one after another).
//!
//! Every `#[near_cache]` declaration of the binary is in the directory of
//! every cache it builds, so each module builds its caches with
//! [`Builder::open`](echo_cache::Builder::open) naming its own tables,
//! and kinds and table names are unique across the modules.
//!
//! Binaries of their own: what needs the process or the directory as it
//! is: `metrics.rs` (a global recorder), `lifecycle.rs` (counts the
//! process's threads), `directory.rs` and `conflict_*.rs` (the whole
//! directory), `quickstart.rs` and `codemojex*.rs` (programs that open
//! every table they link), `expansion_lints.rs` (crate-wide lints).
//!
//! The UI tests (trybuild) are a package of their own, `tests/ui`.

#[path = "../common/mod.rs"]
mod common;

mod coherence_support;

mod batch;
mod cluster;
mod coherence;
mod coherence_durable;
mod coherence_outage;
mod coherence_races;
mod compute;
mod deadline;
mod entry_ttl;
mod eviction;
mod expiry;
mod fleet_herd;
mod herd;
mod idle;
mod ids;
mod inspect;
mod invalidate_all;
mod l2;
mod l2_connect;
mod l2_outage;
mod limits;
mod listeners;
mod loaders;
mod lost_grace;
mod max_bytes;
mod refresh;
mod schema;
mod soft_timeout;
mod stale;
mod tags;
mod tracing;
mod user_code;
mod versions;
mod warm_start;
mod wire;
mod writes;
