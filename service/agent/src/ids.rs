//! Attempt ids: the domain takes them from the caller. Time-ordered and unique per process
//! (a counter), and across restarts (the time), without a random source.

use rm_core::{AttemptId, Timestamp};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

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

/// `<millis:9><counter:4><pid>` in base 36: 13–20 characters of `[a-z0-9]`.
pub(crate) fn next_attempt_id(now: Timestamp) -> Option<AttemptId> {
    let millis = u64::try_from(now.as_millis()).unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed) % 36u64.pow(4);
    let id = format!(
        "{}{}{}",
        base36(millis, 9),
        base36(count, 4),
        base36(u64::from(std::process::id()), 1)
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
}
