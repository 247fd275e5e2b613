//! The host's admission settings as stored (the journal's `host_settings`), as sent (the local
//! API's `HostAdmission`) and as changed (`runner-manager host set-admission` / `set-rules`, the
//! API's `PATCH /v1/host/admission`, `daemon run`'s flags): one conversion each way, and one
//! place that validates a change, so every path refuses the same values with the same words.

use super::admission::AdmissionConfig;
use super::workstation::{QuietHours, Rules};
use rm_journal::HostSettings;
use rm_proto::{HostAdmission, HostAdmissionChange, LoadAverage};

/// The largest memory figure accepted, in MiB (1 TiB: catches a typo's extra digits).
pub const MAX_MEMORY_MB: u64 = 1_048_576;

const MIB_SHIFT: u32 = 20;

/// `--max-load N|off`: a load average above 0, or `off` (`None`).
pub fn parse_max_load(text: &str) -> Result<Option<f64>, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match text.parse::<f64>() {
        Ok(n) if valid_load(n) => Ok(Some(n)),
        _ => Err(format!(
            "{text:?} is not a load average: give a number above 0 (e.g. 4 or 6.5), or `off`"
        )),
    }
}

/// `--quiet-hours HH:MM-HH:MM|off`.
pub fn parse_quiet_hours(text: &str) -> Result<Option<QuietHours>, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    QuietHours::parse(text)
        .map(Some)
        .map_err(|e| format!("{e}, or `off`"))
}

fn valid_load(n: f64) -> bool {
    n.is_finite() && n > 0.0
}

fn check_mb(value: u64, field: &str, min: u64) -> Result<u64, String> {
    if (min..=MAX_MEMORY_MB).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{field} {value} is out of range: give {min}..={MAX_MEMORY_MB} (MiB)"
        ))
    }
}

impl AdmissionConfig {
    /// From the journal's row (ranges already checked there).
    pub fn from_stored(s: &HostSettings) -> Result<AdmissionConfig, String> {
        let quiet_hours = s
            .quiet_hours
            .map(|(start, end)| QuietHours::from_minutes(start.into(), end.into()))
            .transpose()?;
        Ok(AdmissionConfig {
            enabled: s.memory_admission,
            rules: Rules {
                wait_on_battery: s.wait_on_battery,
                max_load: s.max_load,
                quiet_hours,
                idle_only: s.idle_only,
            },
            default_expected_bytes: s.runner_memory_mb << MIB_SHIFT,
            headroom_bytes: s.memory_headroom_mb << MIB_SHIFT,
        })
    }

    /// As the journal stores it.
    pub fn to_stored(&self) -> HostSettings {
        HostSettings {
            memory_admission: self.enabled,
            runner_memory_mb: self.default_expected_bytes >> MIB_SHIFT,
            memory_headroom_mb: self.headroom_bytes >> MIB_SHIFT,
            wait_on_battery: self.rules.wait_on_battery,
            max_load: self.rules.max_load,
            // Minutes of a day fit in u16 (checked by `QuietHours`).
            quiet_hours: self.rules.quiet_hours.map(|q| {
                (
                    u16::try_from(q.start).unwrap_or(0),
                    u16::try_from(q.end).unwrap_or(0),
                )
            }),
            idle_only: self.rules.idle_only,
        }
    }

    /// As the local API sends it.
    pub fn to_wire(&self) -> HostAdmission {
        HostAdmission {
            memory_admission: self.enabled,
            runner_memory_mb: self.default_expected_bytes >> MIB_SHIFT,
            memory_headroom_mb: self.headroom_bytes >> MIB_SHIFT,
            wait_on_battery: self.rules.wait_on_battery,
            max_load: self.rules.max_load.map(LoadAverage),
            quiet_hours: self.rules.quiet_hours.map(|q| q.wire()),
            idle_only: self.rules.idle_only,
        }
    }

    /// These settings with `change` applied; a bad value is refused (in words, naming the
    /// field and what is accepted) and nothing is applied.
    pub fn apply(&self, change: &HostAdmissionChange) -> Result<AdmissionConfig, String> {
        let mut next = *self;
        if let Some(on) = change.memory_admission {
            next.enabled = on;
        }
        if let Some(mb) = change.runner_memory_mb {
            next.default_expected_bytes = check_mb(mb, "runner_memory_mb", 1)? << MIB_SHIFT;
        }
        if let Some(mb) = change.memory_headroom_mb {
            next.headroom_bytes = check_mb(mb, "memory_headroom_mb", 0)? << MIB_SHIFT;
        }
        if let Some(wait) = change.wait_on_battery {
            next.rules.wait_on_battery = wait;
        }
        if let Some(load) = change.max_load {
            next.rules.max_load = match load {
                Some(LoadAverage(n)) if !valid_load(n) => {
                    return Err(format!(
                        "max_load {n} is not a load average: give a number above 0, or null for no limit"
                    ))
                }
                other => other.map(|l| l.0),
            };
        }
        if let Some(hours) = &change.quiet_hours {
            next.rules.quiet_hours = hours.as_deref().map(QuietHours::parse).transpose()?;
        }
        if let Some(idle) = change.idle_only {
            next.rules.idle_only = idle;
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_through_the_journal_and_the_wire() {
        let config = AdmissionConfig::default()
            .apply(&HostAdmissionChange {
                memory_admission: Some(false),
                runner_memory_mb: Some(512),
                memory_headroom_mb: Some(0),
                wait_on_battery: Some(true),
                max_load: Some(Some(LoadAverage(6.5))),
                quiet_hours: Some(Some("22:00-07:30".into())),
                idle_only: Some(true),
            })
            .unwrap();
        assert_eq!(
            AdmissionConfig::from_stored(&config.to_stored()).unwrap(),
            config
        );
        let wire = config.to_wire();
        assert_eq!(wire.runner_memory_mb, 512);
        assert_eq!(wire.memory_headroom_mb, 0);
        assert_eq!(wire.quiet_hours.as_deref(), Some("22:00-07:30"));
        assert_eq!(wire.max_load, Some(LoadAverage(6.5)));
        assert!(wire.wait_on_battery && wire.idle_only && !wire.memory_admission);
        // The defaults: 2 GiB expected, 1 GiB kept free, memory admission on, no rule.
        let d = AdmissionConfig::default().to_wire();
        assert_eq!((d.runner_memory_mb, d.memory_headroom_mb), (2048, 1024));
        assert!(d.memory_admission && !d.wait_on_battery && !d.idle_only);
        assert_eq!((d.max_load, d.quiet_hours), (None, None));
    }

    #[test]
    fn a_change_touches_only_its_fields_and_null_turns_a_rule_off() {
        let on = AdmissionConfig::default()
            .apply(&HostAdmissionChange {
                max_load: Some(Some(LoadAverage(4.0))),
                quiet_hours: Some(Some("01:00-02:00".into())),
                ..HostAdmissionChange::default()
            })
            .unwrap();
        assert_eq!(on.rules.max_load, Some(4.0));
        assert_eq!(on.headroom_bytes, AdmissionConfig::default().headroom_bytes);
        let off = on
            .apply(&HostAdmissionChange {
                max_load: Some(None),
                ..HostAdmissionChange::default()
            })
            .unwrap();
        assert_eq!(off.rules.max_load, None);
        assert!(off.rules.quiet_hours.is_some(), "untouched");
    }

    #[test]
    fn bad_values_are_refused_naming_the_field_and_the_range() {
        let base = AdmissionConfig::default();
        let cases = [
            (
                HostAdmissionChange {
                    runner_memory_mb: Some(0),
                    ..HostAdmissionChange::default()
                },
                "runner_memory_mb 0 is out of range: give 1..=1048576",
            ),
            (
                HostAdmissionChange {
                    memory_headroom_mb: Some(MAX_MEMORY_MB + 1),
                    ..HostAdmissionChange::default()
                },
                "memory_headroom_mb 1048577 is out of range",
            ),
            (
                HostAdmissionChange {
                    max_load: Some(Some(LoadAverage(-1.0))),
                    ..HostAdmissionChange::default()
                },
                "max_load -1 is not a load average",
            ),
            (
                HostAdmissionChange {
                    quiet_hours: Some(Some("25:00-01:00".into())),
                    ..HostAdmissionChange::default()
                },
                "HH:MM-HH:MM",
            ),
        ];
        for (change, said) in cases {
            let e = base.apply(&change).unwrap_err();
            assert!(e.contains(said), "{change:?}: {e}");
        }
    }

    #[test]
    fn flag_texts_parse_with_off() {
        assert_eq!(parse_max_load("off"), Ok(None));
        assert_eq!(parse_max_load("6.5"), Ok(Some(6.5)));
        for bad in ["-1", "0", "NaN", "inf", "lots"] {
            let e = parse_max_load(bad).unwrap_err();
            assert!(e.contains("above 0") && e.contains("off"), "{bad}: {e}");
        }
        assert_eq!(parse_quiet_hours("OFF"), Ok(None));
        assert!(parse_quiet_hours("22:00-07:00").unwrap().is_some());
        let e = parse_quiet_hours("25:00-01:00").unwrap_err();
        assert!(e.contains("HH:MM-HH:MM") && e.contains("off"), "{e}");
    }
}
