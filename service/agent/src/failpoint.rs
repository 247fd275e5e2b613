//! Crash-injection seams for tests. `failpoint!("after_reserve")` marks a boundary of a launch
//! or a conclusion; with the `failpoints` feature, a process whose `RM_FAILPOINT` environment
//! variable names that boundary aborts there (as if SIGKILLed), so a test can restart it and
//! show that recovery ends clean. Without the feature the macro compiles to nothing.

/// The environment variable naming the failpoint to trip.
pub const FAILPOINT_ENV: &str = "RM_FAILPOINT";

/// Every failpoint the agent and the adapters define, in lifecycle order.
pub const FAILPOINTS: &[&str] = &[
    "after_reserve",
    "after_materialize",
    "after_jit",
    "after_sidecar",
    "after_spawn",
    "after_starting_journalled",
    "after_deregister",
    "after_conclude",
    "mid_scrub",
    "after_clean",
];

/// Whether the failpoint `name` is armed in this process (always false without the feature).
pub fn armed(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    {
        static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        ARMED
            .get_or_init(|| std::env::var(FAILPOINT_ENV).ok())
            .as_deref()
            == Some(name)
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}

/// Aborts the process if the failpoint `name` is armed. Use [`crate::failpoint!`].
#[inline]
pub fn hit(name: &str) {
    if armed(name) {
        tracing::error!(failpoint = name, "failpoint reached: aborting the process");
        eprintln!("failpoint {name} reached: aborting");
        std::process::abort();
    }
}

/// Marks a crash-injection boundary (a no-op unless rm-agent's `failpoints` feature is on
/// and `RM_FAILPOINT` names it).
#[macro_export]
macro_rules! failpoint {
    ($name:literal) => {
        $crate::failpoint::hit($name)
    };
}
