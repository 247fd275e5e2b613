//! The agent driven through in-memory fake ports and a fake clock.

// Helpers and fakes outside `#[test]` fns: a panic there is a failed test with a line number.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backoff;
mod inventory;
mod launch;
mod looping;
mod pool;
mod recovery;
mod supervision;
mod support;
mod trust;
mod why;
