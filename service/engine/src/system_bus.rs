//! The system D-Bus, for the workstation rules: UPower's `OnBattery` and logind's `IdleHint`.
//!
//! One connection, opened on first use and kept: the rules are read on every admission check
//! (each loop pass that would start a runner, and every 2 s while a start is held). Every call
//! is bounded by [`CALL_TIMEOUT`], so a hung bus never holds admission up for long; a
//! connection that failed or timed out is dropped and not tried again before a back-off (1 s,
//! doubling up to a minute), during which reads fail at once. A D-Bus error answer (no UPower
//! on this machine, an unknown property) leaves the connection in place.
// Elsewhere than Linux every read fails at once (no bus is asked): most of this is unused.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::time::{Duration, Instant};

/// Debug builds only: use this D-Bus address instead of the system bus (tests serve a fake
/// UPower and logind on a private bus).
pub const TEST_SYSTEM_BUS_ENV: &str = "RUNNER_MANAGER_TEST_SYSTEM_BUS";

/// The longest a connect or a property read may take (a local bus answers in a millisecond;
/// this only has to outlast a loaded machine).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(1);
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// A property this module reads: (service, object, interface, property).
pub type Property = (&'static str, &'static str, &'static str, &'static str);

/// UPower: whether the machine runs on battery.
pub const UPOWER_ON_BATTERY: Property = (
    "org.freedesktop.UPower",
    "/org/freedesktop/UPower",
    "org.freedesktop.UPower",
    "OnBattery",
);

/// logind: whether every session is idle (`true`) or the user is active at one.
pub const LOGIND_IDLE_HINT: Property = (
    "org.freedesktop.login1",
    "/org/freedesktop/login1",
    "org.freedesktop.login1.Manager",
    "IdleHint",
);

enum Link {
    /// Not connected yet, or dropped after a failure and free to try again.
    Closed { delay: Duration },
    #[cfg(target_os = "linux")]
    Up(zbus::Connection),
    /// The last connect or call failed: nothing is tried before `until`.
    Backoff { until: Instant, delay: Duration },
}

/// The system bus (or the test's).
pub struct SystemBus {
    /// `None`: the system bus.
    address: Option<String>,
    link: tokio::sync::Mutex<Link>,
}

impl SystemBus {
    /// The system bus; in debug builds [`TEST_SYSTEM_BUS_ENV`] names another.
    pub fn system() -> SystemBus {
        let address = cfg!(debug_assertions)
            .then(|| std::env::var(TEST_SYSTEM_BUS_ENV).ok())
            .flatten();
        SystemBus {
            address,
            link: tokio::sync::Mutex::new(Link::Closed { delay: RETRY_FIRST }),
        }
    }

    /// The bus at `address` (tests).
    #[cfg(test)]
    pub fn at(address: String) -> SystemBus {
        SystemBus {
            address: Some(address),
            link: tokio::sync::Mutex::new(Link::Closed { delay: RETRY_FIRST }),
        }
    }

    /// A boolean property; an error says why it could not be read, in words.
    pub async fn read_bool(&self, property: Property) -> Result<bool, String> {
        self.read_bool_impl(property).await
    }

    /// Remembers a failed connection: no try before the back-off ends.
    fn back_off(link: &mut Link) {
        let delay = match link {
            Link::Closed { delay } | Link::Backoff { delay, .. } => *delay,
            #[cfg(target_os = "linux")]
            Link::Up(_) => RETRY_FIRST,
        };
        *link = Link::Backoff {
            until: Instant::now() + delay,
            delay: (delay * 2).min(RETRY_MAX),
        };
    }

    #[cfg(target_os = "linux")]
    async fn connection(&self) -> Result<zbus::Connection, String> {
        let mut link = self.link.lock().await;
        match &*link {
            Link::Up(c) => return Ok(c.clone()),
            Link::Backoff { until, .. } if Instant::now() < *until => {
                return Err(format!(
                    "{} unreachable (tried again in {} s)",
                    self.describe(),
                    until.saturating_duration_since(Instant::now()).as_secs() + 1
                ));
            }
            Link::Backoff { .. } | Link::Closed { .. } => {}
        }
        let builder = match &self.address {
            Some(a) => zbus::connection::Builder::address(a.as_str()),
            None => zbus::connection::Builder::system(),
        };
        let connected = match builder {
            Ok(b) => tokio::time::timeout(CALL_TIMEOUT, b.build())
                .await
                .unwrap_or_else(|_| Err(zbus::Error::Failure("timed out".into()))),
            Err(e) => Err(e),
        };
        match connected {
            Ok(c) => {
                tracing::debug!(bus = %self.describe(), "connected to the system bus");
                *link = Link::Up(c.clone());
                Ok(c)
            }
            Err(e) => {
                Self::back_off(&mut link);
                Err(format!("{} unreachable: {e}", self.describe()))
            }
        }
    }

    #[cfg(target_os = "linux")]
    async fn read_bool_impl(
        &self,
        (service, path, interface, name): Property,
    ) -> Result<bool, String> {
        let conn = self.connection().await?;
        let args = (interface, name);
        let call = conn.call_method(
            Some(service),
            path,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &args,
        );
        let reply = match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(reply)) => reply,
            // The bus answered for the service (absent, no such property): the link is fine.
            Ok(Err(zbus::Error::MethodError(error, detail, _))) => {
                return Err(format!(
                    "{service} {name}: {error}{}",
                    detail.map(|d| format!(" ({d})")).unwrap_or_default()
                ))
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {} ms", CALL_TIMEOUT.as_millis()),
                };
                let mut link = self.link.lock().await;
                // Only the connection that failed is dropped (another call may have renewed it).
                if matches!(&*link, Link::Up(c) if c.unique_name() == conn.unique_name()) {
                    *link = Link::Closed { delay: RETRY_FIRST };
                    Self::back_off(&mut link);
                }
                return Err(format!("{} failed: {why}", self.describe()));
            }
        };
        let value: zbus::zvariant::OwnedValue = reply
            .body()
            .deserialize()
            .map_err(|e| format!("{service} {name}: unexpected answer: {e}"))?;
        bool::try_from(value).map_err(|e| format!("{service} {name} is not a boolean: {e}"))
    }

    #[cfg(not(target_os = "linux"))]
    async fn read_bool_impl(&self, (service, ..): Property) -> Result<bool, String> {
        Err(format!("{service}: D-Bus is read on Linux only"))
    }

    fn describe(&self) -> String {
        match &self.address {
            Some(a) => format!("the D-Bus at {a}"),
            None => "the system D-Bus".to_owned(),
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hung_bus_costs_one_timeout_then_reads_fail_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hung");
        // Connections are queued by the kernel but never answered: a hung bus daemon.
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let bus = SystemBus::at(format!("unix:path={}", path.display()));
        let started = Instant::now();
        let e = bus.read_bool(LOGIND_IDLE_HINT).await.unwrap_err();
        let first = started.elapsed();
        assert!(
            first >= CALL_TIMEOUT && first < CALL_TIMEOUT * 3,
            "{first:?}: {e}"
        );
        let started = Instant::now();
        let e = bus.read_bool(UPOWER_ON_BATTERY).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "backed off: {e}"
        );
        assert!(e.contains("tried again in"), "{e}");
    }
}
