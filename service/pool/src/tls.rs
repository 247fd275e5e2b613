//! TLS for the pool's connection, when its URL asks for it ([`crate::url`] says what each
//! `sslmode` means). rustls with ring, as the service's other TLS (no OpenSSL to build or link),
//! through tokio-postgres-rustls; the server's certificate verified against the system's roots
//! or only the `sslrootcert` file's, and its names against the URL's host. Its failures are
//! told as what a person must change, never as "the database is unreachable".

use std::error::Error as _;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::PoolError;
use crate::url::{PoolUrl, Tls};

/// What tokio-postgres answers when the server declines the SSLRequest (its own words, in
/// `connect_tls.rs`; the error carries no kind to match instead). A test pins it.
const NOT_OFFERED: &str = "server does not support TLS";

/// The CA certificates of the PEM file `path` (`sslrootcert`), or what is wrong with it, in
/// words with the fix.
pub(crate) fn roots_from(path: &Path) -> Result<RootCertStore, String> {
    let shown = path.display();
    // The service reads it, from its own working directory, not the CLI's.
    if !path.is_absolute() {
        return Err(format!(
            "sslrootcert={shown} is not an absolute path: give the CA file as /path/to/ca.pem"
        ));
    }
    let pem = std::fs::read(path).map_err(|e| {
        format!(
            "sslrootcert={shown} cannot be read ({e}): give a PEM file of CA certificates the \
             service's account can read"
        )
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| {
            format!(
                "sslrootcert={shown} is not a PEM file of certificates ({e}): give the CA's \
                 certificate in PEM (-----BEGIN CERTIFICATE-----)"
            )
        })?;
        roots.add(cert).map_err(|e| {
            format!(
                "sslrootcert={shown} holds a certificate that cannot serve as an authority \
                 ({e}): give the CA's certificate in PEM"
            )
        })?;
    }
    if roots.is_empty() {
        return Err(format!(
            "sslrootcert={shown} holds no certificate: give the CA's certificate in PEM \
             (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(roots)
}

/// The system's trusted authorities (as the service's GitHub client loads them; honours
/// `SSL_CERT_FILE` and `SSL_CERT_DIR`). An unreadable one is skipped: the handshake then tells
/// "not trusted", with the fix, should the server's authority be among them.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    if !found.errors.is_empty() {
        let errors = &found.errors;
        tracing::debug!(
            ?errors,
            "some of the system's CA certificates were not read"
        );
    }
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    roots
}

/// The connector for a URL that asks for TLS. Made at each connection (a join, a reconnect:
/// rare), so a renewed CA file or system store is taken without a restart.
pub(crate) fn connector(tls: &Tls, address: &str) -> Result<MakeRustlsConnect, PoolError> {
    let roots = match &tls.root_cert {
        Some(path) => roots_from(path).map_err(|reason| PoolError::BadUrl { reason })?,
        None => system_roots(),
    };
    // The process's provider if one was chosen, else ring (the only one built in): never
    // rustls's panic when two are compiled in and none was chosen.
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PoolError::TlsFailed {
            address: address.to_owned(),
            detail: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // As libpq 17 does: PostgreSQL 17 requires it for direct TLS (`sslnegotiation=direct`) and
    // checks it when given; older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(MakeRustlsConnect::new(config))
}

/// A failure to set up TLS while connecting, in words with the fix; `None` for any other
/// failure. Only while connecting: later, a TLS error is a connection lost.
pub(crate) fn classify(e: &tokio_postgres::Error, url: &PoolUrl) -> Option<PoolError> {
    let tls = url.tls()?;
    let address = url.address();
    let mut source = e.source();
    while let Some(s) = source {
        // rustls's error travels inside the io::Error of the handshake (whose `source` skips it).
        let inner = s
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
            .and_then(|i| i.downcast_ref::<rustls::Error>());
        if let Some(r) = s.downcast_ref::<rustls::Error>().or(inner) {
            return Some(from_rustls(r, tls, address));
        }
        if s.to_string() == NOT_OFFERED {
            return Some(PoolError::TlsNotOffered { address });
        }
        source = s.source();
    }
    None
}

fn from_rustls(e: &rustls::Error, tls: &Tls, address: String) -> PoolError {
    let rustls::Error::InvalidCertificate(cert) = e else {
        return PoolError::TlsFailed {
            address,
            detail: e.to_string(),
        };
    };
    match cert {
        // No trusted authority of the issuer's name, or one of that name that did not sign it
        // (another CA of the same name, a re-made one).
        CertificateError::UnknownIssuer | CertificateError::BadSignature => {
            PoolError::TlsUntrusted {
                address,
                fix: match &tls.root_cert {
                    Some(path) => format!(
                    "sslrootcert={} holds other authorities; give it the certificate of the CA \
                     that signed the server's",
                    path.display()
                ),
                    None => {
                        "add sslrootcert=/path/to/ca.pem (the certificate of the CA that signed \
                         the server's) to the pool URL"
                            .into()
                    }
                },
            }
        }
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => PoolError::TlsWrongName {
            host: expected.to_str().into_owned(),
            names: listed(presented),
            address,
        },
        CertificateError::NotValidForName => PoolError::TlsWrongName {
            host: address
                .rsplit_once(':')
                .map_or(address.as_str(), |(h, _)| h)
                .to_owned(),
            names: "other names".into(),
            address,
        },
        _ => PoolError::TlsFailed {
            address,
            detail: e.to_string(),
        },
    }
}

/// The host names and addresses of a certificate, from rustls's `DnsName("db.example")` and
/// `IpAddress(10.0.0.5)`.
fn listed(presented: &[String]) -> String {
    let names: Vec<&str> = presented
        .iter()
        .filter_map(|n| {
            let inner = n
                .strip_prefix("DnsName(")
                .or_else(|| n.strip_prefix("IpAddress("))?;
            Some(inner.strip_suffix(')')?.trim_matches('"'))
        })
        .collect();
    if names.is_empty() {
        "other names".into()
    } else {
        names.join(", ")
    }
}
