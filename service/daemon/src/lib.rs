//! `runner-manager`: the service's composition root and command line.
//!
//! [`service`] is `daemon run` (loops, local API handler, credential, drains, upgrade
//! hand-over); the rest are its parts (credential store, single-instance lock, upgrade
//! detection, service-manager install) and the CLI, which talks to the running service
//! through the local API.

pub mod cli;
pub mod exit;
pub mod local_time;
pub mod lock;
pub mod paths;
pub mod service;
pub mod service_install;
pub mod store;
pub mod update;
pub mod upgrade;

pub use exit::{ExitCode, Failure};

/// This build's version, as `runner-manager --version` prints it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The binary's name (also the service/unit name).
pub const BINARY_NAME: &str = "runner-manager";
