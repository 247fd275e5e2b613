//! The pool's address: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?options]` as written. The password
//! is taken out when the URL is read: what is kept and shown is the URL without it.

use std::fmt;

use secrecy::{ExposeSecret as _, SecretString};

use crate::error::PoolError;

/// A pool URL without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolUrl {
    /// The URL with any password removed (safe to store and show).
    text: String,
}

impl fmt::Display for PoolUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for PoolUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PoolUrl({})", self.text)
    }
}

impl PoolUrl {
    /// Reads a URL as people write it; answers it without its password, and the password.
    /// Checked locally (scheme, user, host, database) before anything connects.
    pub fn parse(text: &str) -> Result<(PoolUrl, Option<SecretString>), PoolError> {
        let text = text.trim();
        let bad = |reason: &str| PoolError::BadUrl {
            reason: reason.to_owned(),
        };
        let rest = text
            .strip_prefix("postgres://")
            .or_else(|| text.strip_prefix("postgresql://"))
            .ok_or_else(|| bad("it must start with postgres://"))?;
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let Some(userinfo) = userinfo.filter(|u| !u.is_empty()) else {
            return Err(bad("it names no user (postgres://USER@HOST/DATABASE)"));
        };
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (userinfo, None),
        };
        if user.is_empty() {
            return Err(bad("it names no user (postgres://USER@HOST/DATABASE)"));
        }
        if hostport.is_empty() {
            return Err(bad("it names no host (postgres://USER@HOST/DATABASE)"));
        }
        // `[::1]:5432` or `host:5432`: the port, if any, follows the last colon outside brackets.
        let port = match hostport.strip_prefix('[') {
            Some(v6) => v6.split_once("]:").map(|(_, p)| p),
            None => hostport.rsplit_once(':').map(|(_, p)| p),
        };
        if let Some(port) = port {
            port.parse::<u16>()
                .map_err(|_| bad(&format!("'{port}' is not a port number")))?;
        }
        let database = path.strip_prefix('/').unwrap_or("");
        let database = database.split('?').next().unwrap_or("");
        if database.is_empty() {
            return Err(bad("it names no database (postgres://USER@HOST/DATABASE)"));
        }
        let clean = format!("postgres://{user}@{hostport}{path}");
        // The rest of the URL is tokio-postgres's to judge (options, encoding).
        clean
            .parse::<tokio_postgres::Config>()
            .map_err(|e| bad(&e.to_string()))?;
        let password = password
            .filter(|p| !p.is_empty())
            .map(|p| SecretString::from(percent_decode(p)));
        Ok((PoolUrl { text: clean }, password))
    }

    /// The connection settings, with the password from the credential store.
    pub fn config(
        &self,
        password: Option<&SecretString>,
    ) -> Result<tokio_postgres::Config, PoolError> {
        let mut config: tokio_postgres::Config =
            self.text
                .parse()
                .map_err(|e: tokio_postgres::Error| PoolError::BadUrl {
                    reason: e.to_string(),
                })?;
        if let Some(p) = password {
            config.password(p.expose_secret());
        }
        config.application_name("runner-manager");
        Ok(config)
    }

    /// `HOST:PORT` (for messages).
    pub fn address(&self) -> String {
        let rest = self.text.trim_start_matches("postgres://");
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let hostport = authority.rsplit('@').next().unwrap_or(authority);
        if hostport.contains(':') && !hostport.ends_with(']') {
            hostport.to_owned()
        } else {
            format!("{hostport}:5432")
        }
    }

    /// The user the URL names.
    pub fn user(&self) -> &str {
        let rest = self.text.trim_start_matches("postgres://");
        rest.split('@').next().unwrap_or("")
    }
}

/// `%XX` escapes in a URL's password (people put `@`, `:` and `/` in passwords that way).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_taken_out_and_the_rest_kept() {
        let (url, pw) =
            PoolUrl::parse("postgres://rm:s3cr%40t@db.example:6543/pool?sslmode=disable").unwrap();
        assert_eq!(
            url.to_string(),
            "postgres://rm@db.example:6543/pool?sslmode=disable"
        );
        assert_eq!(pw.unwrap().expose_secret(), "s3cr@t");
        assert!(!format!("{url:?}").contains("s3cr"));
        assert_eq!(url.address(), "db.example:6543");
        assert_eq!(url.user(), "rm");
        let (url, pw) = PoolUrl::parse("postgresql://rm@localhost/pool").unwrap();
        assert!(pw.is_none());
        assert_eq!(url.address(), "localhost:5432");
    }

    #[test]
    fn a_wrong_url_names_what_is_missing() {
        for (text, words) in [
            ("mysql://rm@h/db", "postgres://"),
            ("postgres://h/db", "no user"),
            ("postgres://rm@/db", "no host"),
            ("postgres://rm@h", "no database"),
            ("postgres://rm@h:port/db", "not a port"),
            ("postgres://rm@h:99999/db", "not a port"),
        ] {
            let err = PoolUrl::parse(text).unwrap_err().to_string();
            assert!(err.contains(words), "{text}: {err}");
            assert!(err.contains("postgres://USER"), "the shape is named: {err}");
        }
    }

    #[test]
    fn the_config_gets_the_password_back() {
        let (url, pw) = PoolUrl::parse("postgres://rm:pw@127.0.0.1:5999/pool").unwrap();
        let config = url.config(pw.as_ref()).unwrap();
        assert_eq!(config.get_password(), Some(&b"pw"[..]));
        assert_eq!(config.get_user(), Some("rm"));
        assert_eq!(config.get_dbname(), Some("pool"));
        assert_eq!(url.config(None).unwrap().get_password(), None);
    }
}
