//! `runner-manager`: the service's composition root and command line.
//!
//! This build holds the pieces that do not need the agent loops or the local API:
//! the credential store, the single-instance lock, upgrade detection, service-manager
//! install, and the CLI (whose target/host commands work directly on the journal
//! through [`cli::backend::Backend`] until the local API client replaces it).

pub mod cli;
pub mod exit;
pub mod lock;
pub mod paths;
pub mod service_install;
pub mod store;
pub mod upgrade;

pub use exit::{ExitCode, Failure};

/// This build's version, as `runner-manager --version` prints it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The binary's name (also the service/unit name).
pub const BINARY_NAME: &str = "runner-manager";
