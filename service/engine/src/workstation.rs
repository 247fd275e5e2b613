//! Workstation rules: optional per-host conditions under which new runners wait, because this
//! is the owner's own machine — on battery, while the user is active at the session (only idle
//! time is used), while the machine is busy (1-minute load above a threshold), during quiet
//! hours. A rule only delays starts (through memory admission's gate, see `admission`):
//! running jobs are never stopped by it, and a held start is looked at again every 2 s, so it
//! begins soon after the reason clears (AC plugged in, the user away, load down, the hours
//! over).
//!
//! On battery is UPower's `OnBattery` on the system D-Bus, else (no UPower, no bus)
//! `/sys/class/power_supply` (a `Mains` supply online, or a discharging `Battery`); the user's
//! activity is logind's `IdleHint`; the load is `/proc/loadavg`. Only what an enabled rule needs
//! is read. A source that cannot be read holds nothing (a broken reading must not stop every
//! runner); that it cannot is logged once, and again when it can be read once more.

use super::system_bus::{self, SystemBus};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The host's rules (`runner-manager host set-rules`; stored in the journal).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rules {
    /// New runners wait while the machine runs on battery.
    pub wait_on_battery: bool,
    /// New runners wait while the 1-minute load average is above this.
    pub max_load: Option<f64>,
    /// New runners wait in these local hours.
    pub quiet_hours: Option<QuietHours>,
    /// New runners wait while the user is active at the session.
    pub idle_only: bool,
}

/// `HH:MM-HH:MM` in local time; the end may be after midnight (`22:00-07:00`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    /// Minutes after midnight.
    pub start: u32,
    pub end: u32,
}

const MINUTES_PER_DAY: u32 = 24 * 60;

impl QuietHours {
    pub fn parse(text: &str) -> Result<QuietHours, String> {
        let bad = || {
            format!("quiet hours are HH:MM-HH:MM in local time (e.g. 22:00-07:00), not {text:?}")
        };
        let (a, b) = text.split_once('-').ok_or_else(bad)?;
        let minutes = |t: &str| -> Option<u32> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60).then_some(h * 60 + m)
        };
        let (start, end) = (minutes(a).ok_or_else(bad)?, minutes(b).ok_or_else(bad)?);
        QuietHours::from_minutes(start, end).map_err(|e| format!("quiet hours {text:?}: {e}"))
    }

    /// From minutes after local midnight (as stored).
    pub fn from_minutes(start: u32, end: u32) -> Result<QuietHours, String> {
        if start >= MINUTES_PER_DAY || end >= MINUTES_PER_DAY {
            return Err(format!(
                "{start}-{end} are not minutes of a day (0-{})",
                MINUTES_PER_DAY - 1
            ));
        }
        if start == end {
            return Err("they start and end at the same time".to_owned());
        }
        Ok(QuietHours { start, end })
    }

    /// Whether `minute` (after local midnight) is inside.
    pub fn contains(&self, minute: u32) -> bool {
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }

    /// `22:00-07:00`, as [`QuietHours::parse`] reads it (the API and `--json`).
    pub fn wire(&self) -> String {
        self.joined("-")
    }

    /// `22:00–07:00`, for people.
    fn text(&self) -> String {
        self.joined("–")
    }

    fn joined(&self, dash: &str) -> String {
        format!(
            "{:02}:{:02}{dash}{:02}:{:02}",
            self.start / 60,
            self.start % 60,
            self.end / 60,
            self.end % 60
        )
    }
}

/// Why new runners wait because of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleHold {
    /// `on_battery`, `user_active`, `busy`, `quiet_hours`.
    pub rule: &'static str,
    /// A few words for the tray's header (`on battery`).
    pub short: String,
    pub message: String,
    pub fix: String,
}

/// What the machine's state is now, as far as the enabled rules need it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Readings {
    pub on_battery: bool,
    /// The 1-minute load average; `None` when unread or unreadable.
    pub load: Option<f64>,
    /// The user is active at the session (logind's idle hint is false); `false` when unread
    /// or unreadable.
    pub user_active: bool,
}

/// Where the rules read the machine's state.
pub struct Sources {
    power_supply: PathBuf,
    loadavg: PathBuf,
    bus: SystemBus,
    /// UPower could not be read (logged once; `/sys/class/power_supply` is read instead).
    upower_down: AtomicBool,
    /// logind could not be read (logged once; the idle-only rule holds nothing meanwhile).
    logind_down: AtomicBool,
}

/// Debug builds only: read these instead of `/sys/class/power_supply` and `/proc/loadavg`.
pub const TEST_POWER_SUPPLY_ENV: &str = "RUNNER_MANAGER_TEST_POWER_SUPPLY";
pub const TEST_LOADAVG_ENV: &str = "RUNNER_MANAGER_TEST_LOADAVG";

impl Sources {
    pub fn system() -> Sources {
        let seam = |env: &str, real: &str| {
            cfg!(debug_assertions)
                .then(|| std::env::var_os(env))
                .flatten()
                .map_or_else(|| PathBuf::from(real), PathBuf::from)
        };
        Sources::new(
            seam(TEST_POWER_SUPPLY_ENV, "/sys/class/power_supply"),
            seam(TEST_LOADAVG_ENV, "/proc/loadavg"),
            SystemBus::system(),
        )
    }

    fn new(power_supply: PathBuf, loadavg: PathBuf, bus: SystemBus) -> Sources {
        Sources {
            power_supply,
            loadavg,
            bus,
            upower_down: AtomicBool::new(false),
            logind_down: AtomicBool::new(false),
        }
    }

    /// Reads what `rules` need (nothing for a rule that is off).
    pub async fn read(&self, rules: &Rules) -> Readings {
        let mut r = Readings::default();
        if rules.wait_on_battery {
            r.on_battery = match self.bus.read_bool(system_bus::UPOWER_ON_BATTERY).await {
                Ok(on) => {
                    if self.upower_down.swap(false, Ordering::SeqCst) {
                        tracing::info!("UPower answers again: on battery is read from it");
                    }
                    on
                }
                Err(error) => {
                    if !self.upower_down.swap(true, Ordering::SeqCst) {
                        tracing::info!(%error, power_supply = %self.power_supply.display(), "UPower unavailable: on battery is read from the kernel's power supplies");
                    }
                    on_battery(&self.power_supply)
                }
            };
        }
        if rules.idle_only {
            r.user_active = match self.bus.read_bool(system_bus::LOGIND_IDLE_HINT).await {
                Ok(idle) => {
                    if self.logind_down.swap(false, Ordering::SeqCst) {
                        tracing::info!("logind answers again: the idle-only rule applies");
                    }
                    !idle
                }
                Err(error) => {
                    if !self.logind_down.swap(true, Ordering::SeqCst) {
                        tracing::warn!(%error, "logind's idle hint unreadable: the idle-only rule holds nothing until it is readable");
                    }
                    false
                }
            };
        }
        if rules.max_load.is_some() {
            r.load = load_1min(&self.loadavg);
        }
        r
    }
}

impl Rules {
    pub fn any(&self) -> bool {
        self.wait_on_battery
            || self.max_load.is_some()
            || self.quiet_hours.is_some()
            || self.idle_only
    }

    /// The first rule that holds new runners back now; `minute`: local minutes after
    /// midnight.
    pub fn check(&self, now: &Readings, minute: u32) -> Option<RuleHold> {
        if let Some(q) = self.quiet_hours.filter(|q| q.contains(minute)) {
            return Some(RuleHold {
                rule: "quiet_hours",
                short: "quiet hours".to_owned(),
                message: format!("New runners wait: quiet hours ({} local time).", q.text()),
                fix: "They start when the quiet hours end. To change them: `runner-manager \
                      host set-rules --quiet-hours HH:MM-HH:MM` (or `--quiet-hours off`)."
                    .to_owned(),
            });
        }
        if self.wait_on_battery && now.on_battery {
            return Some(RuleHold {
                rule: "on_battery",
                short: "on battery".to_owned(),
                message: "New runners wait: this machine runs on battery.".to_owned(),
                fix: "They start once it is plugged in. To run on battery too: `runner-manager \
                      host set-rules --on-battery run`."
                    .to_owned(),
            });
        }
        if self.idle_only && now.user_active {
            return Some(RuleHold {
                rule: "user_active",
                short: "in use".to_owned(),
                message: "New runners wait: someone is using this machine (only idle time is \
                          used)."
                    .to_owned(),
                fix: "They start once the session is idle. To use this machine while it is in \
                      use too: `runner-manager host set-rules --idle-only off`."
                    .to_owned(),
            });
        }
        if let Some(max) = self.max_load {
            if let Some(load) = now.load.filter(|l| *l > max) {
                return Some(RuleHold {
                    rule: "busy",
                    short: "machine busy".to_owned(),
                    message: format!(
                        "New runners wait: the 1-minute load is {load:.1}, above {max:.1}."
                    ),
                    fix: "They start once the machine is less busy. To allow more: \
                          `runner-manager host set-rules --max-load N` (or `--max-load off`)."
                        .to_owned(),
                });
            }
        }
        None
    }
}

/// On battery: no `Mains` supply online, and a `Battery` that is discharging.
fn on_battery(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let read = |p: &Path, f: &str| {
        std::fs::read_to_string(p.join(f))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let (mut mains_online, mut discharging) = (false, false);
    for e in entries.flatten() {
        let p = e.path();
        match read(&p, "type").as_str() {
            "Mains" | "USB" => mains_online |= read(&p, "online") == "1",
            "Battery" => discharging |= read(&p, "status") == "Discharging",
            _ => {}
        }
    }
    discharging && !mains_online
}

/// The first field of `/proc/loadavg`.
fn load_1min(path: &Path) -> Option<f64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Minutes after local midnight now.
pub fn local_minute() -> u32 {
    use chrono::Timelike;
    let now = chrono::Local::now();
    now.hour() * 60 + now.minute()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supply(dir: &Path, name: &str, kind: &str, field: &str, value: &str) {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
        std::fs::write(d.join(field), format!("{value}\n")).unwrap();
    }

    #[test]
    fn quiet_hours_parse_and_wrap_midnight() {
        let q = QuietHours::parse("22:00-07:30").unwrap();
        assert!(q.contains(23 * 60) && q.contains(0) && q.contains(7 * 60 + 29));
        assert!(!q.contains(7 * 60 + 30) && !q.contains(12 * 60));
        let day = QuietHours::parse("09:00-17:00").unwrap();
        assert!(day.contains(9 * 60) && !day.contains(17 * 60) && !day.contains(8 * 60));
        for bad in [
            "22-07",
            "25:00-07:00",
            "10:00-10:00",
            "10:60-11:00",
            "",
            "off",
        ] {
            assert!(QuietHours::parse(bad).is_err(), "{bad}");
        }
        assert!(QuietHours::parse("25:00-01:00")
            .unwrap_err()
            .contains("HH:MM-HH:MM"));
    }

    #[test]
    fn quiet_hours_round_trip_through_the_wire_and_the_journal() {
        let q = QuietHours::parse("22:05-07:30").unwrap();
        assert_eq!(q.wire(), "22:05-07:30");
        assert_eq!(QuietHours::parse(&q.wire()).unwrap(), q);
        assert_eq!(q.text(), "22:05–07:30");
        assert_eq!(QuietHours::from_minutes(q.start, q.end).unwrap(), q);
        assert!(QuietHours::from_minutes(1440, 0).is_err());
        assert!(QuietHours::from_minutes(60, 60).is_err());
        assert_eq!(
            QuietHours::parse("0:00-9:05").unwrap().wire(),
            "00:00-09:05"
        );
    }

    #[test]
    fn battery_is_a_discharging_battery_without_mains() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!on_battery(dir.path()), "no supplies: a desktop");
        supply(dir.path(), "BAT0", "Battery", "status", "Discharging");
        assert!(on_battery(dir.path()));
        supply(dir.path(), "AC", "Mains", "online", "1");
        assert!(!on_battery(dir.path()), "plugged in");
        assert!(
            !on_battery(&dir.path().join("missing")),
            "unreadable: holds nothing"
        );
    }

    #[test]
    fn each_rule_names_itself_and_the_fix() {
        let now = Readings {
            on_battery: true,
            load: Some(5.2),
            user_active: true,
        };
        let none = Rules::default();
        assert!(!none.any());
        assert_eq!(none.check(&now, 0), None, "no rule, no hold");
        let load = Rules {
            max_load: Some(4.0),
            ..Rules::default()
        };
        let h = load.check(&now, 0).unwrap();
        assert_eq!(h.rule, "busy");
        assert!(h.message.contains("5.2, above 4.0"), "{}", h.message);
        assert!(
            load.check(&Readings { load: None, ..now }, 0).is_none(),
            "an unreadable load holds nothing"
        );
        let idle = Rules {
            idle_only: true,
            ..load
        };
        let h = idle.check(&now, 0).unwrap();
        assert_eq!((h.rule, h.short.as_str()), ("user_active", "in use"));
        assert!(
            h.fix.contains("host set-rules --idle-only off"),
            "{}",
            h.fix
        );
        let away = Readings {
            user_active: false,
            ..now
        };
        assert_eq!(idle.check(&away, 0).unwrap().rule, "busy");
        let battery = Rules {
            wait_on_battery: true,
            ..idle
        };
        let h = battery.check(&now, 0).unwrap();
        assert_eq!(h.rule, "on_battery");
        assert!(
            h.fix.contains("host set-rules --on-battery run"),
            "{}",
            h.fix
        );
        let quiet = Rules {
            quiet_hours: Some(QuietHours::parse("22:00-07:00").unwrap()),
            ..battery
        };
        let h = quiet.check(&now, 23 * 60).unwrap();
        assert_eq!(h.rule, "quiet_hours");
        assert!(h.message.contains("22:00–07:00"), "{}", h.message);
        assert!(h.fix.contains("host set-rules --quiet-hours"), "{}", h.fix);
        assert_eq!(quiet.check(&now, 12 * 60).unwrap().rule, "on_battery");
        for h in [quiet.check(&now, 23 * 60), load.check(&now, 0)] {
            assert!(
                !h.unwrap().fix.contains("daemon run"),
                "the fix names the run-time command"
            );
        }
    }

    #[tokio::test]
    async fn without_a_bus_power_comes_from_the_kernel_and_idle_only_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let loadavg = dir.path().join("loadavg");
        std::fs::write(&loadavg, "5.20 3.00 1.00 2/300 1234\n").unwrap();
        supply(dir.path(), "BAT0", "Battery", "status", "Discharging");
        let no_bus = format!("unix:path={}", dir.path().join("no-bus").display());
        let sources = Sources::new(dir.path().to_owned(), loadavg, SystemBus::at(no_bus));
        assert_eq!(
            sources.read(&Rules::default()).await,
            Readings::default(),
            "nothing read for rules that are off"
        );
        let all = Rules {
            wait_on_battery: true,
            max_load: Some(1.0),
            quiet_hours: None,
            idle_only: true,
        };
        let r = sources.read(&all).await;
        assert!(r.on_battery, "the kernel's discharging battery");
        assert!(!r.user_active, "logind unreadable: the rule holds nothing");
        assert_eq!(r.load, Some(5.2));
        // Read again: still no bus, nothing blocks (the bus is backed off).
        let started = std::time::Instant::now();
        assert_eq!(sources.read(&all).await, r);
        assert!(
            started.elapsed() < system_bus::CALL_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
    }
}
