//! The credential's JSON form, private to the stores. Parse errors report only the position
//! and the category, never serde's message: that message can quote the offending value,
//! which may be a token.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::StoredCredential;

/// Format version written into every stored credential.
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    version: u32,
    access_token: String,
    expires_at: Option<DateTime<Utc>>,
    refresh_token: Option<String>,
    refresh_expires_at: Option<DateTime<Utc>>,
}

/// The credential as JSON text, wrapped so it redacts itself if ever printed.
pub(crate) fn encode(credential: &StoredCredential) -> Result<SecretString, String> {
    let stored = Stored {
        version: FORMAT_VERSION,
        access_token: credential.access_token.expose_secret().to_owned(),
        expires_at: credential.expires_at,
        refresh_token: credential
            .refresh_token
            .as_ref()
            .map(|t| t.expose_secret().to_owned()),
        refresh_expires_at: credential.refresh_expires_at,
    };
    serde_json::to_string(&stored)
        .map(SecretString::from)
        .map_err(|e| format!("cannot encode the credential ({:?})", e.classify()))
}

/// Parse stored text. The error describes what is wrong without quoting the text.
pub(crate) fn decode(text: &str) -> Result<StoredCredential, String> {
    let stored: Stored = serde_json::from_str(text).map_err(|e| {
        format!(
            "it is not a valid stored credential ({} at line {} column {})",
            match e.classify() {
                serde_json::error::Category::Io => "read error",
                serde_json::error::Category::Syntax => "malformed JSON",
                serde_json::error::Category::Data => "unexpected fields or values",
                serde_json::error::Category::Eof => "truncated",
            },
            e.line(),
            e.column()
        )
    })?;
    if stored.version != FORMAT_VERSION {
        return Err(format!(
            "it has format version {} and this build reads version {FORMAT_VERSION}",
            stored.version
        ));
    }
    if stored.access_token.is_empty() {
        return Err("its access token is empty".to_owned());
    }
    Ok(StoredCredential {
        access_token: SecretString::from(stored.access_token),
        expires_at: stored.expires_at,
        refresh_token: stored.refresh_token.map(SecretString::from),
        refresh_expires_at: stored.refresh_expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredCredential {
        StoredCredential {
            access_token: "ghu_SECRETaccess".into(),
            expires_at: Some("2030-01-02T03:04:05Z".parse().unwrap()),
            refresh_token: Some("ghr_SECRETrefresh".into()),
            refresh_expires_at: Some("2030-06-01T00:00:00Z".parse().unwrap()),
        }
    }

    #[test]
    fn round_trip_keeps_tokens_and_expiry_times() {
        let c = sample();
        let text = encode(&c).unwrap();
        let back = decode(text.expose_secret()).unwrap();
        assert!(back.same_tokens(&c));
        assert_eq!(back.expires_at, c.expires_at);
        assert_eq!(back.refresh_expires_at, c.refresh_expires_at);
        assert!(!format!("{text:?}").contains("SECRET"));
    }

    #[test]
    fn errors_never_quote_the_stored_text() {
        let bad = [
            r#"{"version":1,"access_token":123,"expires_at":null,"refresh_token":"ghr_SECRETx","refresh_expires_at":null}"#,
            r#"{"version":1,"access_token":"ghu_SECRETy","expires_at":"ghu_SECRETz","refresh_token":null,"refresh_expires_at":null}"#,
            r#"{"version":1,"access_token":"ghu_SECRETw","#,
            r#"{"version":1,"ghu_SECRETv":1}"#,
        ];
        for text in bad {
            let err = decode(text).unwrap_err();
            assert!(!err.contains("SECRET"), "{err}");
            assert!(err.contains("line 1"), "{err}");
        }
        assert!(decode(
            r#"{"version":2,"access_token":"a","expires_at":null,"refresh_token":null,"refresh_expires_at":null}"#
        )
        .unwrap_err()
        .contains("format version 2"));
        assert!(decode(
            r#"{"version":1,"access_token":"","expires_at":null,"refresh_token":null,"refresh_expires_at":null}"#
        )
        .unwrap_err()
        .contains("empty"));
    }
}
