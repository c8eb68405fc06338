//! The README's example, compiled and run as a doctest, so the first code a
//! user reads is code that works.
#![doc = include_str!("../README.md")]
