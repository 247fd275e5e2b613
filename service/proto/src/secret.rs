//! A token that must not leak into logs, Debug output or error text.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A secret string (an access or refresh token). `Debug` and `Display` print `[redacted]`, so
/// a derived `Debug` on a request, a `tracing` field or an error message cannot show it.
///
/// It serialises the real value: the one place a token must cross a process boundary is the
/// `POST /v1/credential` body, which travels only over the local socket, to a server that has
/// already checked the caller's OS identity (root or an operator, see
/// `server::AccessPolicy`) and whose socket is not reachable from the
/// network. Nothing else in this API carries a secret, and no response ever contains one.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: impl Into<String>) -> Self {
        SecretString(value.into())
    }

    /// The real value, for the one place that needs it (the credential store, an HTTP header).
    /// Named so that every use stands out in review.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        SecretString(value)
    }
}

impl Serialize for SecretString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SecretString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(SecretString)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_redact_but_the_wire_carries_the_value() {
        let secret = SecretString::new("gho_supersecret");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{secret}"), "[redacted]");
        assert_eq!(
            serde_json::to_string(&secret).unwrap(),
            "\"gho_supersecret\""
        );
        let back: SecretString = serde_json::from_str("\"gho_supersecret\"").unwrap();
        assert_eq!(back.expose(), "gho_supersecret");
    }
}
