//! The JIT runner configuration: a one-shot credential for one runner registration.

use std::fmt;

/// A JIT config as GitHub returned it. It redacts itself in `Debug` and `Display` so it cannot
/// reach a log, an event or an error text by accident; only [`JitSecret::expose`] reveals it,
/// and the agent calls that nowhere: it hands the whole value to
/// [`crate::RunnerHostPort::spawn`], which passes it to the runner through its environment.
/// Deliberately not `Clone`: the secret is used once.
pub struct JitSecret(String);

impl JitSecret {
    pub fn new(value: impl Into<String>) -> Self {
        JitSecret(value.into())
    }

    /// The raw config, for the runner host's spawn only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for JitSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JitSecret([redacted])")
    }
}

impl fmt::Display for JitSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_never_prints() {
        let s = JitSecret::new("eyJzZWNyZXQiOiJ4In0=");
        assert_eq!(format!("{s:?}"), "JitSecret([redacted])");
        assert_eq!(s.to_string(), "[redacted]");
        assert_eq!(s.expose(), "eyJzZWNyZXQiOiJ4In0=");
    }
}
