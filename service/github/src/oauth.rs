//! The OAuth token endpoint (`POST {web}/login/oauth/access_token`), shared by
//! the device flow and refresh. GitHub answers errors here with HTTP 200 and an
//! `error` field, so the body decides, not the status.

use crate::credential::Credential;
use crate::error::{redact, GitHubError};
use crate::transport::{form, Body, Request, Transport};
use chrono::Utc;
use http::Method;
use secrecy::SecretString;

/// The raw token answer. Deliberately not `Debug`: it holds tokens.
#[derive(serde::Deserialize)]
struct TokenBody {
    access_token: Option<String>,
    expires_in: Option<i64>,
    refresh_token: Option<String>,
    refresh_token_expires_in: Option<i64>,
    error: Option<String>,
    error_description: Option<String>,
    interval: Option<u64>,
}

/// What the token endpoint said.
pub(crate) enum TokenAnswer {
    Token(Credential),
    Refused {
        code: String,
        description: String,
        interval: Option<u64>,
    },
}

/// Posts `pairs` as a form to `path` on the web origin, asking for JSON.
pub(crate) async fn post_form(
    transport: &Transport,
    path: &str,
    endpoint: &'static str,
    pairs: &[(&str, &str)],
) -> Result<crate::transport::Response, GitHubError> {
    let url = transport.config.endpoints.web_url(path);
    let r = transport
        .send(Request {
            method: Method::POST,
            url,
            endpoint,
            token: None,
            accept: "application/json",
            if_none_match: None,
            body: Body::Form(form(pairs)),
            rest: false,
        })
        .await?;
    if r.status >= 500 {
        return Err(GitHubError::transient(
            format!("{endpoint}: HTTP {}", r.status),
            Some(r.status),
        ));
    }
    Ok(r)
}

/// Posts to the token endpoint and interprets the answer.
pub(crate) async fn token_request(
    transport: &Transport,
    pairs: &[(&str, &str)],
) -> Result<TokenAnswer, GitHubError> {
    let r = post_form(transport, "/login/oauth/access_token", "oauth.token", pairs).await?;
    let body: TokenBody = serde_json::from_str(&r.body).map_err(|e| {
        GitHubError::transient(
            format!(
                "oauth.token: HTTP {} with an unreadable body ({})",
                r.status,
                e.classify_name()
            ),
            Some(r.status),
        )
    })?;
    if let Some(code) = body.error {
        return Ok(TokenAnswer::Refused {
            code: redact(&code),
            description: redact(body.error_description.as_deref().unwrap_or("")),
            interval: body.interval,
        });
    }
    match body.access_token {
        Some(token) if (200..300).contains(&r.status) && !token.is_empty() => {
            let now = Utc::now();
            // A lifetime too large for a date (garbage from the server) is read
            // as "does not expire" rather than panicking.
            let at = |secs: Option<i64>| {
                secs.filter(|s| *s > 0)
                    .and_then(chrono::Duration::try_seconds)
                    .and_then(|d| now.checked_add_signed(d))
            };
            Ok(TokenAnswer::Token(Credential {
                access_token: SecretString::from(token),
                expires_at: at(body.expires_in),
                refresh_token: body
                    .refresh_token
                    .filter(|t| !t.is_empty())
                    .map(SecretString::from),
                refresh_expires_at: at(body.refresh_token_expires_in),
            }))
        }
        _ => Err(GitHubError::transient(
            format!("oauth.token: HTTP {} without a token or an error", r.status),
            Some(r.status),
        )),
    }
}

/// serde_json's error category, which never quotes input.
trait Classify {
    fn classify_name(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "unexpected shape",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

pub(crate) fn json_error_kind(e: &serde_json::Error) -> &'static str {
    e.classify_name()
}
