//! Where GitHub lives: the web/OAuth origin and the REST API base.
//!
//! github.com splits them across two hosts; GitHub Enterprise Server serves the
//! API under `/api/v3` of the web host; the fake GitHub in `rm-testkit` serves
//! both from one loopback origin. One type covers all three so the same code
//! path talks to each.

use crate::error::GitHubError;

/// The two base URLs the product talks to, without trailing slashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    web: String,
    api: String,
}

impl Endpoints {
    /// github.com: OAuth on `https://github.com`, REST on `https://api.github.com`.
    pub fn github_com() -> Self {
        Self {
            web: "https://github.com".into(),
            api: "https://api.github.com".into(),
        }
    }

    /// GitHub Enterprise Server at `https://HOST` (REST at `https://HOST/api/v3`).
    pub fn enterprise(host: &str) -> Result<Self, GitHubError> {
        let host = host.trim().trim_end_matches('/');
        let host = host
            .strip_prefix("https://")
            .or_else(|| host.strip_prefix("http://"))
            .unwrap_or(host);
        if host.is_empty() || host.contains('/') {
            return Err(GitHubError::Config(format!(
                "`{host}` is not a GitHub Enterprise host name; give it as `github.example.com`"
            )));
        }
        Self::custom(
            &format!("https://{host}"),
            &format!("https://{host}/api/v3"),
        )
    }

    /// Any origin and API base, e.g. the fake's `http://127.0.0.1:PORT`.
    pub fn custom(web: &str, api: &str) -> Result<Self, GitHubError> {
        let web = normalise(web, "web origin")?;
        let api = normalise(api, "API base")?;
        Ok(Self { web, api })
    }

    /// The web/OAuth origin, e.g. `https://github.com`.
    pub fn web(&self) -> &str {
        &self.web
    }

    /// The REST API base, e.g. `https://api.github.com` or `https://HOST/api/v3`.
    pub fn api(&self) -> &str {
        &self.api
    }

    /// Absolute URL of a REST path (which starts with `/`).
    pub(crate) fn api_url(&self, path: &str) -> String {
        format!("{}{}", self.api, path)
    }

    /// Whether `url` lies under the REST API base (same scheme, host, port and
    /// path prefix), i.e. whether it may be sent the credential.
    pub(crate) fn is_api_url(&self, url: &str) -> bool {
        url.strip_prefix(self.api.as_str())
            .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('?'))
    }

    /// Absolute URL of a web path such as `/login/device/code`.
    pub(crate) fn web_url(&self, path: &str) -> String {
        format!("{}{}", self.web, path)
    }
}

impl Default for Endpoints {
    fn default() -> Self {
        Self::github_com()
    }
}

fn normalise(url: &str, what: &str) -> Result<String, GitHubError> {
    let url = url.trim().trim_end_matches('/');
    let parsed: http::Uri = url
        .parse()
        .map_err(|_| GitHubError::Config(format!("the {what} `{url}` is not a valid URL")))?;
    match parsed.scheme_str() {
        Some("https") | Some("http") if parsed.authority().is_some() => Ok(url.to_string()),
        _ => Err(GitHubError::Config(format!(
            "the {what} `{url}` must be an absolute http(s) URL such as https://github.com"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_urls_under_the_api_base_count_as_api_urls() {
        let e = Endpoints::enterprise("ghe.example.com").unwrap();
        assert!(e.is_api_url("https://ghe.example.com/api/v3/user/installations?page=2"));
        for foreign in [
            "https://ghe.example.com/api/v3.evil/x",
            "https://ghe.example.com.evil.net/api/v3/x",
            "https://ghe.example.com/other",
            "http://ghe.example.com/api/v3/x",
            "https://evil.net/?https://ghe.example.com/api/v3/x",
        ] {
            assert!(!e.is_api_url(foreign), "{foreign}");
        }
    }

    #[test]
    fn defaults_to_github_com() {
        let e = Endpoints::default();
        assert_eq!(e.web(), "https://github.com");
        assert_eq!(e.api_url("/user"), "https://api.github.com/user");
    }

    #[test]
    fn enterprise_serves_api_under_v3() {
        let e = Endpoints::enterprise("https://ghe.example.com/").unwrap();
        assert_eq!(e.web(), "https://ghe.example.com");
        assert_eq!(e.api(), "https://ghe.example.com/api/v3");
        assert_eq!(
            e.web_url("/login/device/code"),
            "https://ghe.example.com/login/device/code"
        );
    }

    #[test]
    fn rejects_relative_and_garbage() {
        assert!(Endpoints::custom("github.com", "https://api.github.com").is_err());
        assert!(Endpoints::custom("https://x", "not a url").is_err());
        assert!(Endpoints::enterprise("").is_err());
        let e = Endpoints::custom("http://127.0.0.1:9/", "http://127.0.0.1:9").unwrap();
        assert_eq!(e.api_url("/rate_limit"), "http://127.0.0.1:9/rate_limit");
    }
}
