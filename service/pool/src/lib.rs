//! A pool of hosts serving one label, coordinated through PostgreSQL (a database teams already
//! run and back up; no server of our own). This crate holds the pool's database side:
//!
//! - [`url`]: the pool's address, with its password taken out (it lives in the credential
//!   store, never in config or logs).
//! - [`schema`]: the versioned schema, migrated by whichever host comes first, under a lock;
//!   a database of a newer schema is refused, never altered.
//! - [`store`]: one host's connection: its heartbeat (its lease), one claim per runner it starts
//!   (bound to a queued job no other claim holds), the demand one reader per target publishes
//!   (which also settles the claims against what GitHub shows), and the pool's view for status.
//! - [`news`]: a reader that leaves queued jobs unclaimed tells the other hosts at once
//!   (`LISTEN`/`NOTIFY`), so a host with room starts a runner without waiting for its poll.
//! - `tls`: TLS when the URL asks for it (`sslmode=require`): the server's certificate and
//!   name verified, against the system's authorities or the URL's `sslrootcert`.
//! - [`error`]: every failure in words with its fix, and whether it means "the database is
//!   unreachable" (new pool launches stop until it is back).

pub mod error;
pub mod news;
pub mod schema;
pub mod store;
mod tls;
pub mod url;

pub use error::PoolError;
pub use news::News;
pub use store::{Claim, PoolHost, PoolStore, Published, Running, StoreSettings};
pub use url::PoolUrl;
