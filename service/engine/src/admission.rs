//! Memory admission: a runner starts only if the memory available now, less what the running
//! runners are still expected to grow to (their target's typical peak minus what they use),
//! less a headroom for the user's own work, covers the new runner's expected peak (its own
//! target's typical peak, or a default before any history). On a developer's own
//! machine a build that pushes the desktop into swap is what makes people uninstall a tool.
//!
//! Admission only delays starts, through the host capacity the loops read (never below the
//! runners already active): nothing running is stopped. While it holds a start back, the
//! memory is looked at again every 2 s and the loops are woken as soon as it fits.
//!
//! Available memory is `MemAvailable` from `/proc/meminfo` and, where the service runs in a
//! cgroup (v2) with a limit, `memory.max − memory.current`, whichever is smaller.

use super::workstation::{self, RuleHold, Rules};
use rm_core::PolicyId;
use rm_journal::PolicyAdmission;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// How often a held-back start looks at the memory again.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// The host's admission settings (`runner-manager host set-admission` and `host set-rules`;
/// stored in the journal, see `host_settings`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionConfig {
    /// Memory admission on.
    pub enabled: bool,
    /// The workstation rules (on battery, the user active, load, quiet hours): checked first,
    /// memory or not.
    pub rules: Rules,
    /// A runner's expected peak before its target has any history.
    pub default_expected_bytes: u64,
    /// Kept free for the user.
    pub headroom_bytes: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            enabled: true,
            rules: Rules::default(),
            default_expected_bytes: 2048 * MIB,
            headroom_bytes: 1024 * MIB,
        }
    }
}

/// Why new runners wait, with the numbers.
/// What one admission question answered.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// How many more runners may start (`u32::MAX`: nothing here limits them).
    pub allowed: u32,
    /// What held them, when none may.
    pub held: Option<Held>,
}

impl Admitted {
    fn unlimited() -> Admitted {
        Admitted {
            allowed: u32::MAX,
            held: None,
        }
    }
}

/// Why admission let no runner start.
#[derive(Debug, Clone)]
pub enum Held {
    Rule(RuleHold),
    Memory(Hold),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub available_bytes: u64,
    pub reserved_bytes: u64,
    pub headroom_bytes: u64,
    pub expected_bytes: u64,
}

impl Hold {
    /// In words; `queued`: a job is waiting now (else a new runner only would wait).
    pub fn message(&self, queued: bool) -> String {
        format!(
            "{}: {} MiB available, {} MiB still to be used by running jobs and {} MiB kept \
             free leave less than the {} MiB a new runner is expected to need.",
            if queued {
                "New runners wait for memory"
            } else {
                "A new runner would wait for memory"
            },
            self.available_bytes / MIB,
            self.reserved_bytes / MIB,
            self.headroom_bytes / MIB,
            self.expected_bytes / MIB
        )
    }

    pub fn fix(&self) -> &'static str {
        "They start by themselves once memory frees up (a job finishing, an application \
         closed). To admit them anyway, lower the expectation or the headroom \
         (`runner-manager host set-admission --runner-memory-mb N --headroom-mb N`, or for \
         one target `runner-manager repo set OWNER/REPO --runner-memory-mb N`) or turn memory \
         admission off (`runner-manager host set-admission --memory off`, or for one target \
         `--memory-admission off`)."
    }
}

/// Where available memory is read.
#[derive(Debug, Clone)]
pub struct MemorySource {
    meminfo: PathBuf,
    /// The service's own cgroup directory (v2), when it has one.
    cgroup: Option<PathBuf>,
}

/// Set in debug builds only: read this file instead of `/proc/meminfo` (tests).
pub const TEST_MEMINFO_ENV: &str = "RUNNER_MANAGER_TEST_MEMINFO";
/// Set in debug builds only: the cgroup v2 directory (`memory.max`, `memory.current`) to read
/// instead of the service's own (tests). With only the meminfo seam set, no cgroup is read, so
/// a test does not depend on the cgroup it happens to run in.
pub const TEST_CGROUP_ENV: &str = "RUNNER_MANAGER_TEST_CGROUP";

impl MemorySource {
    pub fn system() -> MemorySource {
        if cfg!(debug_assertions) {
            let seam = MemorySource::seam(
                std::env::var_os(TEST_MEMINFO_ENV),
                std::env::var_os(TEST_CGROUP_ENV),
            );
            if let Some(source) = seam {
                return source;
            }
        }
        MemorySource {
            meminfo: PathBuf::from("/proc/meminfo"),
            cgroup: own_cgroup(),
        }
    }

    /// The source the test seams name, if any is set.
    fn seam(meminfo: Option<OsString>, cgroup: Option<OsString>) -> Option<MemorySource> {
        if meminfo.is_none() && cgroup.is_none() {
            return None;
        }
        Some(MemorySource {
            meminfo: meminfo.map_or_else(|| PathBuf::from("/proc/meminfo"), PathBuf::from),
            cgroup: cgroup.map(PathBuf::from),
        })
    }

    /// Bytes available now; an unreadable source is an error (admission then admits: a broken
    /// reading must not stop every runner).
    pub fn available(&self) -> Result<u64, String> {
        let text = std::fs::read_to_string(&self.meminfo)
            .map_err(|e| format!("{}: {e}", self.meminfo.display()))?;
        let mut available = mem_available(&text)
            .ok_or_else(|| format!("{}: no MemAvailable line", self.meminfo.display()))?;
        if let Some(dir) = &self.cgroup {
            if let Some(left) = cgroup_left(dir) {
                available = available.min(left);
            }
        }
        Ok(available)
    }
}

/// `MemAvailable:  123 kB` in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The service's cgroup v2 directory (`0::/path` in `/proc/self/cgroup`).
fn own_cgroup() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')))
}

/// `memory.max − memory.current`; `None` without a limit (`max`) or files.
fn cgroup_left(dir: &Path) -> Option<u64> {
    let max = std::fs::read_to_string(dir.join("memory.max")).ok()?;
    let max: u64 = max.trim().parse().ok()?; // "max": no limit
    let current: u64 = std::fs::read_to_string(dir.join("memory.current"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(max.saturating_sub(current))
}

/// The settings that admit one runner: the host's under its target's own.
struct Effective {
    enabled: bool,
    default_expected_bytes: u64,
    headroom_bytes: u64,
}

/// How many more runners of `expected` bytes fit (pure).
pub fn admissible(available: u64, reserved: u64, headroom: u64, expected: u64) -> u32 {
    let free = available.saturating_sub(reserved).saturating_sub(headroom);
    u32::try_from(free / expected.max(1)).unwrap_or(u32::MAX)
}

/// The admission's state: its settings, its inputs from the meter, and the last verdict.
pub struct Admission {
    /// Changed at run time (`set_config`); read afresh by every check.
    config: Mutex<AdmissionConfig>,
    /// Held while a change is validated, stored and applied, so two changes do not interleave.
    /// Held by `change`, so that the journal and `config` are written in the same order.
    changing: tokio::sync::Mutex<()>,
    source: MemorySource,
    sources: workstation::Sources,
    /// Why new runners wait because of a workstation rule.
    rule_hold: Mutex<Option<RuleHold>>,
    /// What running runners are still expected to grow to (bytes), from the meter.
    reserved: AtomicU64,
    /// Each policy's typical peak (none: no history yet): the journal's figure, read at start
    /// and after each metered attempt by the meter. The one copy: status reads it here.
    typical: Mutex<HashMap<PolicyId, u64>>,
    /// Targets' own settings over the host's (`repo set --memory-admission …`).
    own: Mutex<HashMap<PolicyId, PolicyAdmission>>,
    hold: Mutex<Option<Hold>>,
    /// A start is held back: the recheck task runs.
    holding: AtomicBool,
    pub recheck: tokio::sync::Notify,
}

impl Admission {
    pub fn new(
        config: AdmissionConfig,
        source: MemorySource,
        sources: workstation::Sources,
    ) -> Admission {
        Admission {
            config: Mutex::new(config),
            changing: tokio::sync::Mutex::new(()),
            source,
            sources,
            rule_hold: Mutex::new(None),
            reserved: AtomicU64::new(0),
            typical: Mutex::new(HashMap::new()),
            own: Mutex::new(HashMap::new()),
            hold: Mutex::new(None),
            holding: AtomicBool::new(false),
            recheck: tokio::sync::Notify::new(),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> AdmissionConfig {
        *self.config.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies a change of the host's settings and rules: checked, written to the journal,
    /// then in force from the next check (the caller wakes the loops). A refused change
    /// leaves every setting as it was.
    pub async fn change(
        &self,
        journal: &rm_adapters::JournalAdapter,
        change: &rm_proto::HostAdmissionChange,
    ) -> Result<AdmissionConfig, crate::wire::Refusal> {
        use crate::wire::Refusal;
        if change.is_empty() {
            return Err(Refusal::Invalid(
                "nothing to change: send at least one of memory_admission, runner_memory_mb, \
                 memory_headroom_mb, wait_on_battery, max_load, quiet_hours, idle_only"
                    .into(),
            ));
        }
        let _changing = self.changing.lock().await;
        let next = self
            .config()
            .apply(change)
            .map_err(|e| Refusal::Invalid(format!("{e}: fix the request")))?;
        let stored = next.to_stored();
        journal.with(move |j| j.put_host_settings(&stored)).await?;
        *self.config.lock().unwrap_or_else(PoisonError::into_inner) = next;
        Ok(next)
    }

    pub fn set_reserved(&self, bytes: u64) {
        self.reserved.store(bytes, Ordering::SeqCst);
    }

    /// What a runner of `policy` typically peaks at (none before its first metered job).
    pub fn typical_peak(&self, policy: PolicyId) -> Option<u64> {
        self.typical
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&policy)
            .copied()
    }

    /// `policy`'s typical peak (`None`: no history).
    pub fn set_typical(&self, policy: PolicyId, peak: Option<u64>) {
        let mut typical = self.typical.lock().unwrap_or_else(PoisonError::into_inner);
        match peak {
            Some(p) => typical.insert(policy, p),
            None => typical.remove(&policy),
        };
    }

    /// `policy`'s own settings (all `None`: it follows the host's again).
    pub fn set_own(&self, policy: PolicyId, own: PolicyAdmission) {
        let mut map = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        if own.is_empty() {
            map.remove(&policy);
        } else {
            map.insert(policy, own);
        }
    }

    /// `policy`'s own settings, if it has any.
    pub fn own(&self, policy: PolicyId) -> Option<PolicyAdmission> {
        self.own
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&policy)
            .copied()
    }

    /// What admits a runner of `policy`: the host's settings under the target's own.
    fn effective(&self, policy: Option<PolicyId>) -> Effective {
        let host = self.config();
        let own = policy.and_then(|p| self.own(p)).unwrap_or_default();
        Effective {
            enabled: own.memory_admission.unwrap_or(host.enabled),
            default_expected_bytes: own
                .runner_memory_mb
                .map_or(host.default_expected_bytes, |mb| mb.saturating_mul(MIB)),
            headroom_bytes: own
                .memory_headroom_mb
                .map_or(host.headroom_bytes, |mb| mb.saturating_mul(MIB)),
        }
    }

    /// A new runner's expected peak: its policy's typical peak, else its default. Without a
    /// policy (the recheck's question "could any runner start?"), the smallest expectation.
    pub fn expected(&self, policy: Option<PolicyId>) -> u64 {
        let default = self.effective(policy).default_expected_bytes;
        let typical = self.typical.lock().unwrap_or_else(PoisonError::into_inner);
        match policy {
            Some(p) => typical.get(&p).copied().unwrap_or(default),
            None => typical.values().copied().fold(default, u64::min),
        }
    }

    /// Why new runners wait now, if they do.
    pub fn hold(&self) -> Option<Hold> {
        *self.hold.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether anything here may hold a start back (memory admission or a rule).
    pub fn active(&self) -> bool {
        let config = self.config();
        let own_on = self
            .own
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|o| o.memory_admission == Some(true));
        config.enabled || config.rules.any() || own_on
    }

    /// Why new runners wait because of a workstation rule, if one holds them.
    pub fn rule_hold(&self) -> Option<RuleHold> {
        self.rule_hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn arm_recheck(&self) {
        if !self.holding.swap(true, Ordering::SeqCst) {
            self.recheck.notify_one();
        }
    }

    /// The workstation rule that holds new runners back now, if one does.
    async fn rule_now(&self, rules: &Rules) -> Option<RuleHold> {
        if !rules.any() {
            return None;
        }
        let readings = self.sources.read(rules).await;
        rules.check(&readings, workstation::local_minute())
    }

    /// How many more runners of `policy` may start now (`u32::MAX` when nothing here limits
    /// them or memory cannot be read), and what held them when none may: this call's own
    /// verdict (the recorded one may already be another policy's). Records the verdict. A
    /// workstation rule is looked at first.
    pub async fn admit(&self, policy: Option<PolicyId>) -> Admitted {
        let config = self.config();
        let rule = self.rule_now(&config.rules).await;
        let before = std::mem::replace(
            &mut *self
                .rule_hold
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            rule.clone(),
        );
        if let Some(rule) = rule {
            if before.as_ref().map(|b| b.rule) != Some(rule.rule) {
                tracing::info!(rule = rule.rule, message = %rule.message, "new runners wait");
            }
            *self.hold.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.arm_recheck();
            return Admitted {
                allowed: 0,
                held: Some(Held::Rule(rule)),
            };
        }
        let effective = self.effective(policy);
        if !effective.enabled {
            // Memory admission off (for this target): a hold recorded earlier no longer stands.
            *self.hold.lock().unwrap_or_else(PoisonError::into_inner) = None;
            return Admitted::unlimited();
        }
        let available = match self.source.available() {
            Ok(a) => a,
            Err(error) => {
                tracing::warn!(%error, "available memory unreadable: admitting");
                return Admitted::unlimited();
            }
        };
        let hold = Hold {
            available_bytes: available,
            reserved_bytes: self.reserved.load(Ordering::SeqCst),
            headroom_bytes: effective.headroom_bytes,
            expected_bytes: self.expected(policy),
        };
        let n = admissible(
            hold.available_bytes,
            hold.reserved_bytes,
            hold.headroom_bytes,
            hold.expected_bytes,
        );
        let verdict = (n == 0).then_some(hold);
        let before = std::mem::replace(
            &mut *self.hold.lock().unwrap_or_else(PoisonError::into_inner),
            verdict,
        );
        if verdict.is_some() && before.is_none() {
            tracing::info!(
                available_mib = available / MIB,
                reserved_mib = hold.reserved_bytes / MIB,
                expected_mib = hold.expected_bytes / MIB,
                "new runners wait for memory"
            );
        }
        if verdict.is_some() {
            self.arm_recheck();
        }
        Admitted {
            allowed: n,
            held: verdict.map(Held::Memory),
        }
    }

    /// Whether a start is held back (then the recheck task looks every 2 s).
    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    /// The recheck found memory: the loops are woken, the task sleeps again.
    pub fn released(&self) {
        self.holding.store(false, Ordering::SeqCst);
        *self.hold.lock().unwrap_or_else(PoisonError::into_inner) = None;
        *self
            .rule_hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        tracing::info!("nothing holds new runners back any more");
    }

    /// What the recheck asks: would a new runner start now? (Does not record a verdict.)
    pub async fn fits_now(&self) -> bool {
        let config = self.config();
        if self.rule_now(&config.rules).await.is_some() {
            return false;
        }
        // The runner held back is the one to fit, by its own numbers (another target's
        // smaller one would only wake the loops to be held again).
        let Some(hold) = self.hold() else {
            return true;
        };
        match self.source.available() {
            Ok(available) => {
                admissible(
                    available,
                    self.reserved.load(Ordering::SeqCst),
                    hold.headroom_bytes,
                    hold.expected_bytes,
                ) > 0
            }
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_fit_after_what_runs_and_the_headroom() {
        let g = 1024 * MIB;
        assert_eq!(admissible(8 * g, 0, g, 2 * g), 3);
        assert_eq!(admissible(8 * g, 4 * g, g, 2 * g), 1);
        assert_eq!(admissible(2 * g, 0, g, 2 * g), 0);
        assert_eq!(admissible(0, 4 * g, g, 2 * g), 0, "no underflow");
        assert_eq!(
            admissible(g, 0, 0, 0),
            1024 * 1024 * 1024,
            "a zero expectation counts as 1"
        );
    }

    #[test]
    fn meminfo_and_cgroup_readings() {
        let info = "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(mem_available(info), Some(2048 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        std::fs::write(dir.path().join("memory.current"), "100\n").unwrap();
        assert_eq!(cgroup_left(dir.path()), None, "no limit");
        std::fs::write(dir.path().join("memory.max"), "1000\n").unwrap();
        assert_eq!(cgroup_left(dir.path()), Some(900));
    }

    #[test]
    fn a_hold_names_the_numbers_and_the_fix() {
        let h = Hold {
            available_bytes: 3000 * MIB,
            reserved_bytes: 500 * MIB,
            headroom_bytes: 1024 * MIB,
            expected_bytes: 2048 * MIB,
        };
        assert!(h
            .message(false)
            .starts_with("A new runner would wait for memory: "));
        let m = h.message(true);
        assert!(m.starts_with("New runners wait for memory: "), "{m}");
        assert!(
            m.contains("3000 MiB available") && m.contains("2048 MiB"),
            "{m}"
        );
        assert!(h
            .fix()
            .contains("runner-manager host set-admission --memory off"));
        assert!(h.fix().contains("repo set OWNER/REPO --runner-memory-mb N"));
        assert!(
            !h.fix().contains("daemon run"),
            "the fix names the run-time command"
        );
    }

    /// A meminfo file saying `kb` kB are available, and a cgroup directory beside it.
    fn files(kb: u64) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let meminfo = dir.path().join("meminfo");
        std::fs::write(
            &meminfo,
            format!("MemTotal: 16000000 kB\nMemAvailable: {kb} kB\n"),
        )
        .unwrap();
        let cgroup = dir.path().join("cgroup");
        std::fs::create_dir(&cgroup).unwrap();
        (dir, meminfo, cgroup)
    }

    #[test]
    fn available_is_the_smaller_of_meminfo_and_the_cgroup() {
        let (_dir, meminfo, cgroup) = files(4096); // 4 MiB
        let source = MemorySource {
            meminfo,
            cgroup: Some(cgroup.clone()),
        };
        let write = |max: &str, current: &str| {
            std::fs::write(cgroup.join("memory.max"), max).unwrap();
            std::fs::write(cgroup.join("memory.current"), current).unwrap();
        };
        write(&format!("{}\n", 3 * MIB), &format!("{}\n", MIB));
        assert_eq!(source.available(), Ok(2 * MIB), "the cgroup leaves less");
        write(&format!("{}\n", 64 * MIB), &format!("{}\n", MIB));
        assert_eq!(source.available(), Ok(4 * MIB), "MemAvailable is less");
        write(&format!("{}\n", MIB), &format!("{}\n", 2 * MIB));
        assert_eq!(
            source.available(),
            Ok(0),
            "over its limit: nothing, no underflow"
        );
        write("max\n", &format!("{}\n", MIB));
        assert_eq!(source.available(), Ok(4 * MIB), "`max`: no limit");
    }

    #[test]
    fn an_unreadable_cgroup_falls_back_to_meminfo() {
        let (_dir, meminfo, cgroup) = files(4096);
        let source = MemorySource {
            meminfo: meminfo.clone(),
            cgroup: Some(cgroup.clone()),
        };
        assert_eq!(source.available(), Ok(4 * MIB), "no files");
        std::fs::write(cgroup.join("memory.max"), "1024\n").unwrap();
        assert_eq!(source.available(), Ok(4 * MIB), "no memory.current");
        std::fs::write(cgroup.join("memory.current"), "lots\n").unwrap();
        assert_eq!(source.available(), Ok(4 * MIB), "garbage memory.current");
        std::fs::write(cgroup.join("memory.current"), "10\n").unwrap();
        std::fs::write(cgroup.join("memory.max"), [0xff_u8, 0xfe]).unwrap(); // not UTF-8
        assert_eq!(source.available(), Ok(4 * MIB), "garbage memory.max");
        let gone = MemorySource {
            meminfo,
            cgroup: Some(cgroup.join("no-such-dir")),
        };
        assert_eq!(gone.available(), Ok(4 * MIB), "no directory");
    }

    #[test]
    fn the_test_seams_name_each_source() {
        assert!(MemorySource::seam(None, None).is_none(), "the real sources");
        let s = MemorySource::seam(Some("/t/meminfo".into()), None).unwrap();
        assert_eq!(s.meminfo, Path::new("/t/meminfo"));
        assert_eq!(s.cgroup, None, "the host's cgroup stays out of tests");
        let s = MemorySource::seam(Some("/t/meminfo".into()), Some("/t/cg".into())).unwrap();
        assert_eq!(s.cgroup.as_deref(), Some(Path::new("/t/cg")));
        let s = MemorySource::seam(None, Some("/t/cg".into())).unwrap();
        assert_eq!(s.meminfo, Path::new("/proc/meminfo"));
        assert_eq!(s.cgroup.as_deref(), Some(Path::new("/t/cg")));
    }

    fn admission(default_expected_bytes: u64) -> Admission {
        Admission::new(
            AdmissionConfig {
                default_expected_bytes,
                ..AdmissionConfig::default()
            },
            MemorySource {
                meminfo: PathBuf::from("/nonexistent/meminfo"),
                cgroup: None,
            },
            workstation::Sources::system(),
        )
    }

    #[test]
    fn a_new_runner_expects_its_typical_peak_else_the_default() {
        let a = admission(2048 * MIB);
        let p = PolicyId::new(1);
        assert_eq!(a.expected(Some(p)), 2048 * MIB, "no history: the default");
        a.set_typical(p, Some(700 * MIB));
        assert_eq!(a.expected(Some(p)), 700 * MIB, "its typical peak");
        assert_eq!(
            a.expected(Some(PolicyId::new(2))),
            2048 * MIB,
            "another target's history is not its own"
        );
        a.set_own(
            PolicyId::new(2),
            PolicyAdmission {
                runner_memory_mb: Some(300),
                ..PolicyAdmission::default()
            },
        );
        assert_eq!(
            a.expected(Some(PolicyId::new(2))),
            300 * MIB,
            "its target's own default"
        );
        a.set_typical(p, None);
        assert_eq!(a.expected(Some(p)), 2048 * MIB, "history gone: the default");
    }
}
