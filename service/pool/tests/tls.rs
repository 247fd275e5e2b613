//! TLS to the pool database against a real PostgreSQL with certificates made by the `openssl`
//! command (a CA and a server certificate it signs): `sslmode=require` with the CA in
//! `sslrootcert` gives an encrypted session the pool works over; a server signed by an
//! authority this host does not trust, a server without TLS and a certificate for another
//! name are each refused with their fix (not as "unreachable"); without sslmode the
//! connection stays plain, as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use rm_pool::{PoolError, PoolStore, PoolUrl, StoreSettings};
use secrecy::SecretString;
use support::Cluster;

const TARGET: &str = "repo:octo/hello";

/// Runs `openssl` with `args` (split at spaces) in `dir`.
fn openssl(dir: &Path, args: &str) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let out = Command::new("openssl")
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("the `openssl` command makes the test certificates: install Debian's `openssl`");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA: `ca.crt` and `ca.key` in a directory of its own.
struct Ca {
    dir: tempfile::TempDir,
}

/// A P-256 key (quick to make) and no passphrase.
const NEW_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

impl Ca {
    /// A CA of the name `name`.
    fn new(name: &str) -> Ca {
        let dir = tempfile::Builder::new().prefix("rm-ca").tempdir().unwrap();
        openssl(
            dir.path(),
            &format!(
                "req -x509 {NEW_KEY} -keyout ca.key -out ca.crt -days 2 -subj /CN={name} \
                 -addext basicConstraints=critical,CA:TRUE \
                 -addext keyUsage=critical,keyCertSign,cRLSign"
            ),
        );
        Ca { dir }
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Signs a server certificate for `names` (subjectAltName: `IP:127.0.0.1,DNS:localhost`)
    /// into the cluster's data directory as `server.crt` and `server.key`, the key the
    /// server's own with mode 0600 (PostgreSQL refuses a key others may read).
    fn sign_server(&self, cluster: &Cluster, names: &str) {
        let data = cluster.dir().join("data");
        std::fs::write(
            self.dir.path().join("server.ext"),
            format!(
                "subjectAltName={names}\nbasicConstraints=CA:FALSE\n\
                 keyUsage=critical,digitalSignature,keyEncipherment\n\
                 extendedKeyUsage=serverAuth\n"
            ),
        )
        .unwrap();
        openssl(
            self.dir.path(),
            &format!(
                "req {NEW_KEY} -keyout server.key -out server.csr -subj /CN=rm-pool-test-server"
            ),
        );
        openssl(
            self.dir.path(),
            "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
             -extfile server.ext -out server.crt",
        );
        for (name, mode) in [("server.crt", 0o644), ("server.key", 0o600)] {
            let path = data.join(name);
            std::fs::copy(self.dir.path().join(name), &path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            cluster.give_to_server(&path);
        }
    }
}

/// A server with TLS on, its certificate signed by `ca` for `names`.
fn tls_cluster(ca: &Ca, names: &str) -> Cluster {
    Cluster::start_with(
        &[
            "ssl=on",
            "ssl_cert_file=server.crt",
            "ssl_key_file=server.key",
        ],
        |c| ca.sign_server(c, names),
    )
}

/// Connects with the cluster's URL (host `host`) followed by `options`.
async fn connect(cluster: &Cluster, host: &str, options: &str) -> Result<PoolStore, PoolError> {
    let text = cluster.url_without_password().replace("127.0.0.1", host) + options;
    let (url, _) = PoolUrl::parse(&text).unwrap();
    let password = SecretString::from(cluster.password());
    PoolStore::connect(&url, Some(&password), StoreSettings::new("h1")).await
}

/// Whether the pool's sessions (application_name `runner-manager`) are encrypted, as the
/// server sees them.
fn server_says_encrypted(cluster: &Cluster) -> String {
    cluster.psql(
        "SELECT string_agg(s.ssl::text, ',') FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'runner-manager'",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_with_the_ca_gives_an_encrypted_session_the_pool_works_over() {
    let ca = Ca::new("rm-pool-test-ca");
    let pg = tls_cluster(&ca, "IP:127.0.0.1,DNS:localhost");
    let options = format!("?sslmode=require&sslrootcert={}", ca.cert().display());
    let (url, _) = PoolUrl::parse(&(pg.url_without_password() + &options)).unwrap();
    assert!(url.encrypted());
    assert!(
        url.to_string().ends_with(&options),
        "shown as written: {url}"
    );
    let mut s = connect(&pg, "127.0.0.1", &options).await.unwrap();
    // Migrated over TLS, and a round trip of the pool's own work.
    s.heartbeat("rm-pool-linux-x64", 2, 2, None).await.unwrap();
    assert!(s.lead(TARGET).await.unwrap());
    assert!(s.publish(TARGET, "[7]", &[7], &[]).await.unwrap());
    assert_eq!(s.claim(TARGET, "r1", &[7]).await.unwrap(), Some(7));
    assert_eq!(s.claims().await.unwrap().len(), 1);
    assert_eq!(server_says_encrypted(&pg), "true");
    drop(s);
    // By name as well (verified against the certificate's DNS name).
    let s = connect(&pg, "localhost", &options).await.unwrap();
    s.hosts().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_signed_by_an_authority_this_host_does_not_trust_is_refused_with_sslrootcert_named(
) {
    let ca = Ca::new("rm-pool-test-ca");
    let pg = tls_cluster(&ca, "IP:127.0.0.1,DNS:localhost");
    // The system's roots do not hold the test CA.
    let err = connect(&pg, "127.0.0.1", "?sslmode=require")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, PoolError::TlsUntrusted { .. }), "{err:?}");
    assert!(!err.is_unreachable(), "a person must fix it: {err}");
    let text = err.to_string();
    assert!(text.contains("does not trust"), "{text}");
    assert!(text.contains("add sslrootcert=/path/to/ca.pem"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{}", pg.port)), "{text}");
    // Another CA in sslrootcert, of another name or of the same name (a re-made one): named
    // as the one to change.
    for name in ["rm-pool-other-ca", "rm-pool-test-ca"] {
        let other = Ca::new(name);
        let options = format!("?sslmode=verify-ca&sslrootcert={}", other.cert().display());
        let err = connect(&pg, "127.0.0.1", &options).await.err().unwrap();
        assert!(
            matches!(err, PoolError::TlsUntrusted { .. }),
            "{name}: {err:?}"
        );
        let named = format!("sslrootcert={} holds other", other.cert().display());
        assert!(err.to_string().contains(&named), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tls_is_refused_when_the_url_asks_for_it() {
    let pg = Cluster::start();
    let err = connect(&pg, "127.0.0.1", "?sslmode=require")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, PoolError::TlsNotOffered { .. }), "{err:?}");
    assert!(!err.is_unreachable(), "a person must fix it: {err}");
    let text = err.to_string();
    assert!(text.contains("does not accept TLS"), "{text}");
    assert!(text.contains("turn on ssl in"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{}", pg.port)), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused_with_the_names_it_has() {
    let ca = Ca::new("rm-pool-test-ca");
    let pg = tls_cluster(&ca, "DNS:db.example,IP:10.9.8.7");
    // verify-ca verifies the name as well here (rustls does both).
    for mode in ["require", "verify-ca", "verify-full"] {
        let options = format!("?sslmode={mode}&sslrootcert={}", ca.cert().display());
        let err = connect(&pg, "127.0.0.1", &options).await.err().unwrap();
        assert!(
            matches!(err, PoolError::TlsWrongName { .. }),
            "{mode}: {err:?}"
        );
        assert!(!err.is_unreachable(), "a person must fix it: {err}");
        let text = err.to_string();
        assert!(text.contains("not valid for '127.0.0.1'"), "{text}");
        assert!(text.contains("(it is for db.example, 10.9.8.7)"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sslmode_the_connection_stays_plain_as_before() {
    let ca = Ca::new("rm-pool-test-ca");
    let pg = tls_cluster(&ca, "IP:127.0.0.1");
    for options in ["", "?sslmode=disable", "?sslmode=prefer"] {
        let (url, _) = PoolUrl::parse(&(pg.url_without_password() + options)).unwrap();
        assert!(!url.encrypted(), "{options}");
        let mut s = connect(&pg, "127.0.0.1", options).await.unwrap();
        s.heartbeat("rm-pool-linux-x64", 2, 2, None).await.unwrap();
        assert_eq!(server_says_encrypted(&pg), "false", "{options}");
        drop(s);
        // Gone from pg_stat_activity before the next one is looked at.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !server_says_encrypted(&pg).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the session did not end"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
