//! The coherence tests whose caches open the two tables of
//! `coherence_support` and no other, as one test binary with a module each:
//! the plain path of `tracking` and `broadcast` ([`plain`]), the faults of
//! the link ([`faults`]), two OS processes ([`processes`]) and the
//! versioned writes as property tests ([`scripts`]).
//!
//! One binary, because every `#[near_cache]` declaration of a binary is
//! opened by every cache the binary builds: these four declare nothing
//! beyond the support's tables, so together each cache opens exactly what
//! it opened alone, and the binary is built and linked once instead of
//! four times. The coherence tests that declare tables of their own
//! (`coherence_races`, `coherence_outage`, `lost_grace`, `cluster`,
//! `coherence_durable`) stay binaries of their own.

#[path = "../coherence_support/mod.rs"]
mod coherence_support;

mod faults;
mod plain;
mod processes;
mod scripts;
