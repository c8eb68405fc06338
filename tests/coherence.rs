//! The coherence tests whose caches open only `coherence_support`'s
//! tables, in a binary of their own (see `suite/coherence/mod.rs`).

#[path = "common/mod.rs"]
mod common;

#[path = "suite/coherence_support/mod.rs"]
mod coherence_support;

#[path = "suite/coherence/mod.rs"]
mod coherence;
