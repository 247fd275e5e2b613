//! `runner-manager`: the service's composition root and command line.
//!
//! [`run`] is `daemon run`: it composes the running service (`rm_engine`) with the OS (the
//! local API's socket and handler, the credential store, the updater, signals, the upgrade
//! hand-over); the rest are its parts (credential store, single-instance lock, upgrade
//! detection, service-manager install) and the CLI, which talks to the running service
//! through the local API.

mod api;
pub mod cli;
pub mod exit;
pub use rm_engine::local_time;
pub mod lock;
pub mod paths;
pub mod run;
pub mod service_install;
pub mod store;
pub mod update;
pub mod upgrade;

pub use exit::{ExitCode, Failure};

/// This build's version, as `runner-manager --version` prints it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The binary's name (also the service/unit name).
pub const BINARY_NAME: &str = "runner-manager";
