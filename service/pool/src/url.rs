//! The pool's address: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?options]` as written. The password
//! is taken out when the URL is read: what is kept and shown is the URL without it.
//!
//! Two options are this crate's rather than the driver's: `sslmode` and `sslrootcert`.
//! `sslmode=require`, `verify-ca` and `verify-full` all mean TLS with the server's certificate
//! verified against the trusted authorities *and* its name against the URL's host (unlike
//! libpq, whose `require` verifies nothing: a connection anyone on the path can read is what
//! this option is there to prevent). The trusted authorities are the system's, or only the CA
//! certificates of the PEM file `sslrootcert=/ABSOLUTE/PATH` names (as with libpq). Without
//! `sslmode`, a database on another machine is reached over TLS (as `require`: the pool's
//! leases and job ids must not cross a network in the clear) and one on this machine
//! (loopback, a unix socket) in the clear; `disable` and `prefer` connect in the clear: TLS
//! that is not verified keeps out no one in the middle, so it is never half-used.
//!
//! A password is never part of the kept URL: `USER:PASSWORD@` is taken out (it goes to the
//! credential store), and a `password=` option is refused with the fix, not stored.

use std::fmt;
use std::path::PathBuf;

use secrecy::{ExposeSecret as _, SecretString};

use crate::error::PoolError;

/// A pool URL without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolUrl {
    /// The URL with any password removed (safe to store and show), options as written.
    text: String,
    /// `text` without `sslmode` and `sslrootcert`: what tokio-postgres reads (it rejects
    /// `sslrootcert`, `verify-ca` and `verify-full`, and its `prefer` and `require` do not mean
    /// what they mean here).
    driver: String,
    /// `Some` when the URL asks for TLS.
    tls: Option<Tls>,
}

/// TLS as the URL asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tls {
    /// `sslrootcert`: the only authorities trusted, instead of the system's. Read again at
    /// each connection, so a renewed CA file is taken without a restart.
    pub(crate) root_cert: Option<PathBuf>,
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
    /// Checked locally (scheme, user, host, database, the `sslrootcert` file) before anything
    /// connects.
    pub fn parse(text: &str) -> Result<(PoolUrl, Option<SecretString>), PoolError> {
        Self::read(text, true)
    }

    /// A URL kept when the host joined, read again at start: its shape only. A CA file gone
    /// since is told at each connection (the pool then shows the fix, and pooled runners
    /// wait), rather than the host forgetting its pool and starting runners for every queued
    /// job as if it were alone.
    pub fn parse_stored(text: &str) -> Result<PoolUrl, PoolError> {
        Self::read(text, false).map(|(url, _)| url)
    }

    fn read(text: &str, check_files: bool) -> Result<(PoolUrl, Option<SecretString>), PoolError> {
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
        let (database, query) = path.split_once('?').unwrap_or((path, ""));
        if database.strip_prefix('/').unwrap_or("").is_empty() {
            return Err(bad("it names no database (postgres://USER@HOST/DATABASE)"));
        }
        // Ours taken out, the other options passed on as written.
        let (mut sslmode, mut sslrootcert) = (None, None);
        let mut kept = Vec::new();
        for option in query.split('&').filter(|o| !o.is_empty()) {
            match option.split_once('=').unwrap_or((option, "")) {
                ("sslmode", v) => sslmode = Some(percent_decode(v)),
                ("sslrootcert", v) => sslrootcert = Some(PathBuf::from(percent_decode(v))),
                ("password" | "passfile", _) => {
                    return Err(bad(
                        "it carries a password option, which would be kept with the URL: take \
                         it out and give the password on standard input (`--password-stdin`), \
                         which keeps it in the service's credential store",
                    ))
                }
                _ => kept.push(option),
            }
        }
        let sslmode = sslmode.or_else(|| (!is_local(hostport)).then(|| "require".to_owned()));
        let tls = Tls::asked(sslmode.as_deref(), sslrootcert, check_files).map_err(|r| bad(&r))?;
        let clean = format!("postgres://{user}@{hostport}{path}");
        let driver = if kept.is_empty() {
            format!("postgres://{user}@{hostport}{database}")
        } else {
            format!("postgres://{user}@{hostport}{database}?{}", kept.join("&"))
        };
        // The rest of the URL is tokio-postgres's to judge (options, encoding).
        driver
            .parse::<tokio_postgres::Config>()
            .map_err(|e| bad(&e.to_string()))?;
        let password = password
            .filter(|p| !p.is_empty())
            .map(|p| SecretString::from(percent_decode(p)));
        let url = PoolUrl {
            text: clean,
            driver,
            tls,
        };
        Ok((url, password))
    }

    /// The connection is encrypted (TLS, the server's certificate verified): the URL has
    /// `sslmode=require`, `verify-ca` or `verify-full`.
    pub fn encrypted(&self) -> bool {
        self.tls.is_some()
    }

    pub(crate) fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// The connection settings, with the password from the credential store.
    pub fn config(
        &self,
        password: Option<&SecretString>,
    ) -> Result<tokio_postgres::Config, PoolError> {
        let mut config: tokio_postgres::Config =
            self.driver
                .parse()
                .map_err(|e: tokio_postgres::Error| PoolError::BadUrl {
                    reason: e.to_string(),
                })?;
        if let Some(p) = password {
            config.password(p.expose_secret());
        }
        // Either TLS or not, never "TLS if the server offers it" (see the module's notes).
        config.ssl_mode(match self.tls {
            Some(_) => tokio_postgres::config::SslMode::Require,
            None => tokio_postgres::config::SslMode::Disable,
        });
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

impl Tls {
    /// What `sslmode` and `sslrootcert` ask for; the CA file checked now, so that a wrong
    /// one is told at `pool join` rather than at each connection.
    fn asked(
        sslmode: Option<&str>,
        root_cert: Option<PathBuf>,
        check_file: bool,
    ) -> Result<Option<Tls>, String> {
        match sslmode {
            None | Some("disable" | "prefer") => match root_cert {
                Some(_) => Err("sslrootcert is used only with TLS: add sslmode=require".into()),
                None => Ok(None),
            },
            Some("require" | "verify-ca" | "verify-full") => {
                if let Some(path) = root_cert.as_ref().filter(|_| check_file) {
                    crate::tls::roots_from(path)?;
                }
                Ok(Some(Tls { root_cert }))
            }
            Some(other) => Err(format!(
                "sslmode={other} is not known here: give require (TLS, the server's \
                 certificate verified), or disable"
            )),
        }
    }
}

/// Whether `HOST[:PORT]` is this machine: a loopback address, `localhost`, or a unix socket
/// directory (percent-encoded `/…`).
fn is_local(hostport: &str) -> bool {
    let host = match hostport.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => hostport.rsplit_once(':').map_or(hostport, |(h, _)| h),
    };
    let host = percent_decode(host);
    host.eq_ignore_ascii_case("localhost")
        || host.starts_with('/')
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `%XX` escapes in a URL's password or option (people put `@`, `:` and `/` in passwords that
/// way).
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
    use std::path::Path;
    use std::time::Duration;

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

    /// A CA certificate (self-signed, P-256) for `sslrootcert`: only its form is checked here.
    const CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBpDCCAUugAwIBAgIUZY4rg3wNs3Lfre2btUyx0gZ51jIwCgYIKoZIzj0EAwIw\n\
HzEdMBsGA1UEAwwUcm0tcG9vbC11bml0LXRlc3QtY2EwIBcNMjYxMjA0MTY0ODM3\n\
WhgPMjEyNjExMTAxNjQ4MzdaMB8xHTAbBgNVBAMMFHJtLXBvb2wtdW5pdC10ZXN0\n\
LWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE3jwWU67zA0h+Jo1GIQ7/nr34\n\
I4CuLrYdf99G6Ly761H08OXS0ZfmbX7g4ShxHrW320WvIaRli5Fa+wnGULtUIKNj\n\
MGEwHQYDVR0OBBYEFIn19prvZzWDkIsS9K2krmvrvcvMMB8GA1UdIwQYMBaAFIn1\n\
9prvZzWDkIsS9K2krmvrvcvMMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQD\n\
AgEGMAoGCCqGSM49BAMCA0cAMEQCIBli3PyAuyQM0g0DLZf6VxIB0l8dXn+l7tza\n\
a3usR0RtAiAxZop1sEFEdbEJ9NvJGkDLHQ8atF2d/sW5GJswJuXU0A==\n\
-----END CERTIFICATE-----\n";

    fn ca_file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    #[test]
    fn sslmode_asks_for_verified_tls_or_none() {
        use tokio_postgres::config::SslMode;
        for (query, encrypted) in [
            // Another machine, no sslmode: TLS (see the module doc).
            ("", true),
            ("?sslmode=disable", false),
            ("?sslmode=prefer", false),
            ("?sslmode=require", true),
            ("?sslmode=verify-ca", true),
            ("?sslmode=verify-full", true),
        ] {
            let text = format!("postgres://rm@db.example/pool{query}");
            let (url, _) = PoolUrl::parse(&text).unwrap();
            assert_eq!(url.encrypted(), encrypted, "{text}");
            assert_eq!(url.to_string(), text, "shown as written");
            // tokio-postgres is never left to choose ("prefer" would try TLS unverified).
            let mode = url.config(None).unwrap().get_ssl_mode();
            let expected = if encrypted {
                SslMode::Require
            } else {
                SslMode::Disable
            };
            assert_eq!(mode, expected, "{text}");
        }
    }

    #[test]
    fn the_tls_options_are_kept_as_written_and_the_password_still_taken_out() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca_file(&dir, "ca.pem", CA_PEM);
        let text = format!(
            "postgres://rm:pw@db.example:6543/pool?connect_timeout=5&sslmode=verify-full&\
             sslrootcert={ca}&application_name=x"
        );
        let (url, pw) = PoolUrl::parse(&text).unwrap();
        assert_eq!(pw.unwrap().expose_secret(), "pw");
        assert_eq!(
            url.to_string(),
            format!(
                "postgres://rm@db.example:6543/pool?connect_timeout=5&sslmode=verify-full&\
                 sslrootcert={ca}&application_name=x"
            )
        );
        assert!(url.encrypted());
        assert_eq!(
            url.tls().unwrap().root_cert.as_deref(),
            Some(Path::new(&ca))
        );
        // The driver gets the other options, not ours (it would refuse them).
        let config = url.config(None).unwrap();
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(5)));
        assert_eq!(config.get_dbname(), Some("pool"));
        assert_eq!(url.address(), "db.example:6543");
        // Read back as the journal keeps it: the same.
        assert_eq!(PoolUrl::parse(&url.to_string()).unwrap().0, url);
        // A path with escapes (a space, here) is read unescaped.
        let spaced = ca_file(&dir, "my ca.pem", CA_PEM);
        let escaped = spaced.replace(' ', "%20");
        let (url, _) = PoolUrl::parse(&format!(
            "postgres://rm@h/pool?sslmode=require&sslrootcert={escaped}"
        ))
        .unwrap();
        assert_eq!(
            url.tls().unwrap().root_cert.as_deref(),
            Some(Path::new(&spaced))
        );
    }

    #[test]
    fn a_wrong_tls_option_is_named_with_its_fix() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let missing = missing.to_str().unwrap();
        let garbage = ca_file(&dir, "garbage.pem", "not a certificate\n");
        let key_only = ca_file(
            &dir,
            "key.pem",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        );
        let torn = ca_file(&dir, "torn.pem", &CA_PEM[..CA_PEM.len() - 30]);
        let ca = ca_file(&dir, "ca.pem", CA_PEM);
        for (query, words) in [
            ("sslmode=allow".to_owned(), "sslmode=allow"),
            ("sslmode=bogus".to_owned(), "give require"),
            ("sslmode=".to_owned(), "sslmode="),
            (
                format!("sslmode=require&sslrootcert={missing}"),
                "cannot be read",
            ),
            (
                "sslmode=require&sslrootcert=ca.pem".to_owned(),
                "absolute path",
            ),
            (
                format!("sslmode=require&sslrootcert={garbage}"),
                "holds no certificate",
            ),
            (
                format!("sslmode=require&sslrootcert={key_only}"),
                "holds no certificate",
            ),
            (
                format!("sslmode=require&sslrootcert={torn}"),
                "not a PEM file",
            ),
            (
                format!("sslmode=disable&sslrootcert={ca}"),
                "add sslmode=require",
            ),
        ] {
            let text = format!("postgres://rm@h/pool?{query}");
            let err = PoolUrl::parse(&text).unwrap_err();
            assert!(matches!(err, PoolError::BadUrl { .. }), "{text}: {err:?}");
            let err = err.to_string();
            assert!(err.contains(words), "{text}: {err}");
        }
        // A CA file alone: TLS with it on another machine (TLS is the default there), refused
        // on this machine (the clear is the default here).
        let (url, _) = PoolUrl::parse(&format!("postgres://rm@h/pool?sslrootcert={ca}")).unwrap();
        assert_eq!(
            url.tls().unwrap().root_cert.as_deref(),
            Some(Path::new(&ca))
        );
        let err = PoolUrl::parse(&format!("postgres://rm@127.0.0.1/pool?sslrootcert={ca}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("add sslmode=require"), "{err}");
    }

    #[test]
    fn a_kept_url_whose_ca_file_went_is_read_and_its_connection_says_why_it_fails() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone.pem");
        let text = format!(
            "postgres://rm@h/pool?sslmode=require&sslrootcert={}",
            gone.display()
        );
        assert!(PoolUrl::parse(&text).is_err(), "a join is refused at once");
        let kept = PoolUrl::parse_stored(&text).unwrap();
        assert!(kept.encrypted());
        let tls = kept.tls().unwrap();
        let err = crate::tls::connector(tls, &kept.address()).err().unwrap();
        assert!(!err.is_unreachable(), "a person must fix it: {err:?}");
        assert!(err.to_string().contains("cannot be read"), "{err}");
        // The shape is still checked.
        assert!(PoolUrl::parse_stored("mysql://rm@h/pool").is_err());
        assert!(PoolUrl::parse_stored("postgres://rm@h/pool?sslmode=bogus").is_err());
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

    #[test]
    fn a_password_option_is_refused_with_the_fix_and_nothing_kept() {
        for url in [
            "postgres://rm@db.example/pool?password=hunter2",
            "postgres://rm@db.example/pool?sslmode=require&password=hunter2",
            "postgres://rm@127.0.0.1/pool?passfile=/root/.pgpass",
        ] {
            let e = PoolUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains("--password-stdin"), "{e}");
            assert!(!e.contains("hunter2"), "the password is not repeated: {e}");
        }
    }

    #[test]
    fn another_machine_is_reached_over_tls_unless_told_otherwise() {
        let tls = |u: &str| PoolUrl::parse(u).unwrap().0.encrypted();
        assert!(tls("postgres://rm@db.example/pool"));
        assert!(tls("postgres://rm@10.0.0.5:6543/pool"));
        assert!(tls("postgres://rm@[2001:db8::1]:5432/pool"));
        // This machine: in the clear, as a local socket is.
        assert!(!tls("postgres://rm@127.0.0.1:5432/pool"));
        assert!(!tls("postgres://rm@localhost/pool"));
        assert!(!tls("postgres://rm@[::1]:5432/pool"));
        // An explicit choice stands.
        assert!(!tls("postgres://rm@db.example/pool?sslmode=disable"));
        assert!(tls("postgres://rm@127.0.0.1/pool?sslmode=require"));
    }
}
