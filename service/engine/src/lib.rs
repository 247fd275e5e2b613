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
mod auth_watch;
mod changes;
mod contact;
mod credential;
mod demand_view;
pub mod doctor;
pub mod engine;
mod events;
mod failure_log;
mod fleet;
mod gate;
mod health_watch;
pub mod host_row;
pub mod host_settings;
mod launch_health;
mod left_registrations;
pub mod local_time;
pub mod meta;
mod meter_task;
mod meters;
pub mod operators;
pub mod pool_link;
mod pool_tasks;
mod removals;
mod runner_events;
pub mod sandbox;
pub mod service_store;
mod settings;
mod sign_in;
pub mod state;
mod status;
pub mod stored;
mod system_bus;
mod use_cases;
pub mod watchers;
mod why;
mod wire;
pub mod workstation;

pub use admission::AdmissionConfig;
pub use engine::{Engine, Loops, Tasks};
pub use failure_log::fix_for;
pub use service_store::ServiceStore;
pub use stored::Stored;
pub use workstation::{QuietHours, Rules};

/// The most runners a host or a policy may be given (catches a typo's extra zero).
pub const MAX_CAPACITY: u32 = 256;
