//! A private D-Bus (`dbus-daemon --session`) serving a fake UPower and a fake logind, for the
//! workstation rules: the service is pointed at it with `RUNNER_MANAGER_TEST_SYSTEM_BUS`
//! (debug builds only) instead of the system bus, and the test flips `OnBattery` and
//! `IdleHint` while it runs. The service reads the properties (`Get`) on each admission check,
//! so a flip needs no signal.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `org.freedesktop.UPower` at `/org/freedesktop/UPower`.
struct UPower {
    on_battery: Arc<AtomicBool>,
}

#[zbus::interface(name = "org.freedesktop.UPower")]
impl UPower {
    #[zbus(property)]
    fn on_battery(&self) -> bool {
        self.on_battery.load(Ordering::SeqCst)
    }
}

/// `org.freedesktop.login1.Manager` at `/org/freedesktop/login1`.
struct Login1 {
    idle: Arc<AtomicBool>,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Login1 {
    #[zbus(property)]
    fn idle_hint(&self) -> bool {
        self.idle.load(Ordering::SeqCst)
    }
}

/// The bus with its two fakes; dropped, the bus daemon is killed.
pub struct FakeSystemBus {
    /// What `RUNNER_MANAGER_TEST_SYSTEM_BUS` is set to.
    pub address: String,
    conn: zbus::Connection,
    on_battery: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
    _daemon: Child,
}

impl FakeSystemBus {
    /// Starts `dbus-daemon` and serves UPower (`OnBattery = on_battery`) and logind
    /// (`IdleHint = idle`) on it. `Err` when `dbus-daemon` is missing (the test says SKIPPED).
    pub async fn start(on_battery: bool, idle: bool) -> anyhow::Result<FakeSystemBus> {
        let mut daemon = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // It warns that it may not raise its fd limit (not root's bus): noise here.
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("dbus-daemon cannot be started (package `dbus`)")?;
        let stdout = daemon.stdout.take().context("dbus-daemon's stdout")?;
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .context("dbus-daemon printed no address within 20 s")??;
        let address = line.trim().to_owned();
        if address.is_empty() {
            bail!("dbus-daemon printed no address");
        }
        let on_battery = Arc::new(AtomicBool::new(on_battery));
        let idle = Arc::new(AtomicBool::new(idle));
        let conn = zbus::connection::Builder::address(address.as_str())?
            .name("org.freedesktop.UPower")?
            .name("org.freedesktop.login1")?
            .serve_at(
                "/org/freedesktop/UPower",
                UPower {
                    on_battery: Arc::clone(&on_battery),
                },
            )?
            .serve_at(
                "/org/freedesktop/login1",
                Login1 {
                    idle: Arc::clone(&idle),
                },
            )?
            .build()
            .await
            .context("the fakes cannot join the bus")?;
        Ok(FakeSystemBus {
            address,
            conn,
            on_battery,
            idle,
            _daemon: daemon,
        })
    }

    pub fn set_on_battery(&self, on: bool) {
        self.on_battery.store(on, Ordering::SeqCst);
    }

    /// logind's idle hint: `true` = nobody active at the session.
    pub fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::SeqCst);
    }

    /// logind leaves the bus (its name is released): reads of `IdleHint` fail.
    pub async fn drop_logind(&self) -> anyhow::Result<()> {
        self.conn.release_name("org.freedesktop.login1").await?;
        Ok(())
    }
}
