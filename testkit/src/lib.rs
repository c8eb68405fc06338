//! Test fixtures of echo-cache (dev-only, not published).
