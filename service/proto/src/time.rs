//! Points in time on the wire.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Milliseconds since the Unix epoch (UTC), as a JSON integer.
///
/// An integer rather than an RFC 3339 string keeps both ends free of a date library and cannot
/// be misread across time zones; the tray formats it for people.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct UnixMillis(pub i64);

impl UnixMillis {
    pub const fn from_millis(millis: i64) -> Self {
        UnixMillis(millis)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// The current time from the system clock (before the epoch reads as 0).
    pub fn now() -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        UnixMillis(millis)
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}
