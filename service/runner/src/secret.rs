//! The JIT configuration is a one-shot credential: it is only ever handed to the listener's
//! environment, so its type cannot print itself.

use std::fmt;

/// GitHub's `encoded_jit_config`. `Debug` and `Display` print a placeholder; the only way to
/// read the value is [`JitConfig::expose`], which the spawn code calls once.
#[derive(Clone, PartialEq, Eq)]
pub struct JitConfig(String);

impl JitConfig {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself. Call sites should be few and obvious.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for JitConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JitConfig(<redacted>)")
    }
}

impl fmt::Display for JitConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = JitConfig::new("c2VjcmV0LXZhbHVl");
        assert!(!format!("{s:?} {s}").contains("c2VjcmV0"));
        assert_eq!(s.expose(), "c2VjcmV0LXZhbHVl");
    }
}
