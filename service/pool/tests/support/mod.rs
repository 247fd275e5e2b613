//! A throwaway PostgreSQL cluster for the tests. One copy serves these tests and the e2e tests:
//! it lives in the e2e crate's support (`tests/src/postgres.rs`, exported there as
//! `rm_e2e::postgres`) and is included here by path, so these tests need neither that crate
//! nor its fake GitHub and D-Bus dependencies (it uses only `nix` and `tempfile`).

#[path = "../../../../tests/src/postgres.rs"]
mod postgres;

pub use postgres::*;
