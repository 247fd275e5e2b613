//! Workstation rules: optional per-host conditions under which new runners wait, because this
//! is the owner's own machine — on battery, while the machine is busy (1-minute load above a
//! threshold), during quiet hours. A rule only delays starts (through memory admission's gate,
//! see `admission`): running jobs are never stopped by it, and a held start is looked at again
//! every 2 s, so it begins soon after the reason clears (AC plugged in, load down, the hours
//! over).
//!
//! Read from `/sys/class/power_supply` (a `Mains` supply online, or a discharging `Battery`) and
//! `/proc/loadavg`; a source that cannot be read holds nothing (a broken reading must not stop
//! every runner).

use std::path::{Path, PathBuf};

/// The host's rules (`daemon run --on-battery`, `--max-load`, `--quiet-hours`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rules {
    /// New runners wait while the machine runs on battery.
    pub wait_on_battery: bool,
    /// New runners wait while the 1-minute load average is above this.
    pub max_load: Option<f64>,
    /// New runners wait in these local hours.
    pub quiet_hours: Option<QuietHours>,
}

/// `HH:MM-HH:MM` in local time; the end may be after midnight (`22:00-07:00`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    /// Minutes after midnight.
    pub start: u32,
    pub end: u32,
}

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
        if start == end {
            return Err(format!(
                "quiet hours {text:?} start and end at the same time"
            ));
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

    fn text(&self) -> String {
        format!(
            "{:02}:{:02}–{:02}:{:02}",
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
    /// `on_battery`, `busy`, `quiet_hours`.
    pub rule: &'static str,
    /// A few words for the tray's header (`on battery`).
    pub short: String,
    pub message: String,
    pub fix: String,
}

/// Where the rules read the machine's state.
#[derive(Debug, Clone)]
pub struct Sources {
    power_supply: PathBuf,
    loadavg: PathBuf,
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
        Sources {
            power_supply: seam(TEST_POWER_SUPPLY_ENV, "/sys/class/power_supply"),
            loadavg: seam(TEST_LOADAVG_ENV, "/proc/loadavg"),
        }
    }
}

impl Rules {
    pub fn any(&self) -> bool {
        self.wait_on_battery || self.max_load.is_some() || self.quiet_hours.is_some()
    }

    /// The first rule that holds new runners back now; `minute`: local minutes after
    /// midnight.
    pub fn check(&self, sources: &Sources, minute: u32) -> Option<RuleHold> {
        if let Some(q) = self.quiet_hours.filter(|q| q.contains(minute)) {
            return Some(RuleHold {
                rule: "quiet_hours",
                short: "quiet hours".to_owned(),
                message: format!("New runners wait: quiet hours ({} local time).", q.text()),
                fix: "They start when the quiet hours end. To change them: `runner-manager \
                      daemon run --quiet-hours HH:MM-HH:MM` (or without it)."
                    .to_owned(),
            });
        }
        if self.wait_on_battery && on_battery(&sources.power_supply) {
            return Some(RuleHold {
                rule: "on_battery",
                short: "on battery".to_owned(),
                message: "New runners wait: this machine runs on battery.".to_owned(),
                fix: "They start once it is plugged in. To run on battery too: `runner-manager \
                      daemon run --on-battery run`."
                    .to_owned(),
            });
        }
        if let Some(max) = self.max_load {
            if let Some(load) = load_1min(&sources.loadavg).filter(|l| *l > max) {
                return Some(RuleHold {
                    rule: "busy",
                    short: "machine busy".to_owned(),
                    message: format!(
                        "New runners wait: the 1-minute load is {load:.1}, above {max:.1}."
                    ),
                    fix: "They start once the machine is less busy. To allow more: \
                          `runner-manager daemon run --max-load N` (or without it)."
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
        for bad in ["22-07", "25:00-07:00", "10:00-10:00", "10:60-11:00", ""] {
            assert!(QuietHours::parse(bad).is_err(), "{bad}");
        }
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
        let dir = tempfile::tempdir().unwrap();
        let loadavg = dir.path().join("loadavg");
        std::fs::write(&loadavg, "5.20 3.00 1.00 2/300 1234\n").unwrap();
        supply(dir.path(), "BAT0", "Battery", "status", "Discharging");
        let sources = Sources {
            power_supply: dir.path().to_owned(),
            loadavg,
        };
        let none = Rules::default();
        assert_eq!(none.check(&sources, 0), None, "no rule, no hold");
        let load = Rules {
            max_load: Some(4.0),
            ..Rules::default()
        };
        let h = load.check(&sources, 0).unwrap();
        assert_eq!(h.rule, "busy");
        assert!(h.message.contains("5.2, above 4.0"), "{}", h.message);
        let battery = Rules {
            wait_on_battery: true,
            ..load
        };
        assert_eq!(battery.check(&sources, 0).unwrap().rule, "on_battery");
        let quiet = Rules {
            quiet_hours: Some(QuietHours::parse("22:00-07:00").unwrap()),
            ..battery
        };
        let h = quiet.check(&sources, 23 * 60).unwrap();
        assert_eq!(h.rule, "quiet_hours");
        assert!(h.message.contains("22:00–07:00"), "{}", h.message);
        assert_eq!(quiet.check(&sources, 12 * 60).unwrap().rule, "on_battery");
    }
}
