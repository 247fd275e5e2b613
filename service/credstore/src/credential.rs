//! The credential as the stores keep it. It mirrors `rm_github::Credential` field for field
//! instead of using it, so that this crate stays free of the GitHub client's dependency tree
//! (and so checkable for every OS from Linux); the daemon converts between the two.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};

/// A GitHub user access token with its optional refresh half and expiry times. The tokens are
/// [`SecretString`]s: `Debug` shows `[REDACTED]`, never a token.
#[derive(Clone, Debug)]
pub struct StoredCredential {
    pub access_token: SecretString,
    pub expires_at: Option<DateTime<Utc>>,
    pub refresh_token: Option<SecretString>,
    pub refresh_expires_at: Option<DateTime<Utc>>,
}

impl StoredCredential {
    /// Whether both tokens are the same (tests, and callers that skip needless writes).
    pub fn same_tokens(&self, other: &StoredCredential) -> bool {
        self.access_token.expose_secret() == other.access_token.expose_secret()
            && self.refresh_token.as_ref().map(|t| t.expose_secret())
                == other.refresh_token.as_ref().map(|t| t.expose_secret())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_both_tokens_and_same_tokens_compares_both() {
        let a = StoredCredential {
            access_token: "ghu_SECRETa".into(),
            expires_at: None,
            refresh_token: Some("ghr_SECRETb".into()),
            refresh_expires_at: None,
        };
        let text = format!("{a:?}");
        assert!(!text.contains("SECRET"), "{text}");
        let mut b = a.clone();
        assert!(a.same_tokens(&b));
        b.refresh_token = None;
        assert!(!a.same_tokens(&b));
    }
}
