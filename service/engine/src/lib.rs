//! `rm-engine`: the running service, without the binary around it. It owns the state of a
//! service that runs: the loops over the real adapters (`fleet`), the event pump that feeds
//! the parts owning a piece of state (`failure_log`, `demand_view`, `contact`,
//! `launch_health`, `meters`, `removals`, `watchers`), the persisted choices (`gate`,
//! `admission`, the runner environment, the caches, `pool_link`), the status and `why`
//! projections, sign-in and the credential's life, and the host checks (`doctor`).
//!
//! `rm-daemon` composes it with the operating system (the local API's socket and handler, the
//! credential store, the updater, signals and the upgrade hand-over) and holds the CLI.

pub mod admission;
pub mod auth_watch;
pub mod contact;
pub mod credential;
pub mod demand_view;
pub mod doctor;
pub mod engine;
pub mod events;
pub mod failure_log;
pub mod fleet;
pub mod gate;
pub mod health_watch;
pub mod host_row;
pub mod host_settings;
pub mod launch_health;
pub mod left_registrations;
pub mod local_time;
pub mod meters;
pub mod operators;
pub mod pool_link;
pub mod removals;
pub mod runner_events;
pub mod sandbox;
pub mod service_store;
pub mod sign_in;
pub mod state;
pub mod status;
pub mod stored;
pub mod system_bus;
mod use_cases;
pub mod watchers;
pub mod why;
pub mod workstation;

pub use admission::AdmissionConfig;
pub use engine::{Engine, Loops, Tasks};
pub use failure_log::fix_for;
pub use service_store::ServiceStore;
pub use stored::Stored;
pub use workstation::{QuietHours, Rules};

/// The most runners a host or a policy may be given (catches a typo's extra zero).
pub const MAX_CAPACITY: u32 = 256;
