//! Attempt ids: the domain takes them from the caller. Time-ordered and unique per process
//! (a counter), across restarts (the time), across the processes of one machine (the pid) and
//! across machines (a tag of the machine id: hosts of a pool register runners in the same
//! repositories, where a name must be unique), without a random source.

use rm_core::{AttemptId, Timestamp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// 6 base-36 characters from this machine's id (systemd's or D-Bus's); empty where there is
/// none, as before machines were told apart. A hash, not the id itself: the runner name is
/// shown at GitHub, and the machine id is meant to stay on the machine.
fn machine_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        ["/etc/machine-id", "/var/lib/dbus/machine-id"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|id| id.trim().to_owned())
            .filter(|id| !id.is_empty())
            .map(|id| base36(fnv1a(id.as_bytes()) % 36u64.pow(6), 6))
            .unwrap_or_default()
    })
}

/// FNV-1a, 64 bits: a stable hash (std's `DefaultHasher` may change between releases, and the
/// tag must not change when the service is updated mid-job).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn base36(mut n: u64, width: usize) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    while out.len() < width {
        out.push(b'0');
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

/// `<millis:9><counter:4><machine:6><pid>` in base 36: 14–26 characters of `[a-z0-9]`.
pub(crate) fn next_attempt_id(now: Timestamp) -> Option<AttemptId> {
    id_with(now, machine_tag(), std::process::id())
}

fn id_with(now: Timestamp, machine: &str, pid: u32) -> Option<AttemptId> {
    let millis = u64::try_from(now.as_millis()).unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed) % 36u64.pow(4);
    let id = format!(
        "{}{}{machine}{}",
        base36(millis, 9),
        base36(count, 4),
        base36(u64::from(pid), 1)
    );
    AttemptId::new(id).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_and_distinct() {
        let now = Timestamp::from_millis(1_764_000_000_000);
        let a = next_attempt_id(now).unwrap();
        let b = next_attempt_id(now).unwrap();
        assert_ne!(a, b);
        assert!(AttemptId::from_runner_name(&a.runner_name()).is_some());
        assert!(next_attempt_id(Timestamp::from_millis(0)).is_some());
    }

    #[test]
    fn machines_are_told_apart_and_the_longest_id_still_fits() {
        let now = Timestamp::from_millis(1_764_000_000_000);
        let here = id_with(now, "abc123", 4242).unwrap();
        assert_eq!(&here.as_str()[13..19], "abc123", "{here}");
        assert!(here.as_str().ends_with(&base36(4242, 1)), "{here}");
        // 9 digits of milliseconds last until the year 5138.
        let longest = id_with(
            Timestamp::from_millis(36i64.pow(9) - 1),
            &base36(36u64.pow(6) - 1, 6),
            u32::MAX,
        );
        assert!(longest.is_some(), "26 characters at most");
        assert_eq!(machine_tag(), machine_tag(), "stable");
        assert!(machine_tag().len() == 6 || machine_tag().is_empty());
        assert_eq!(
            fnv1a(b"a"),
            0xaf63_dc4c_8601_ec8c,
            "FNV-1a's published value"
        );
    }
}
