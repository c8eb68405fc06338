//! The coherence tests whose caches open the two tables of
//! `coherence_support` and no other: the plain path of `tracking` and
//! `broadcast` ([`plain`]), the faults of the link ([`faults`]), two OS
//! processes ([`processes`]) and the versioned writes as property tests
//! ([`scripts`]).

mod faults;
mod plain;
mod processes;
mod scripts;
