//! What can go wrong with the pool's database, in words with the fix.

use std::io;

/// A pool failure. [`PoolError::is_unreachable`] tells the ones that mean "the database cannot
/// be asked now" (new pool launches stop everywhere until it is back) from the ones a person
/// must fix.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(
        "the pool URL is not usable: {reason}. Write it as \
         postgres://USER@HOST[:PORT]/DATABASE (the password goes on standard input)"
    )]
    BadUrl { reason: String },
    #[error(
        "the pool database at {address} cannot be reached ({detail}): check that PostgreSQL \
         runs there and that this host may connect to it; the pool resumes by itself once it \
         answers"
    )]
    Unreachable { address: String, detail: String },
    #[error(
        "PostgreSQL at {address} refused the password of '{user}': give the right one \
         (`runner-manager pool join postgres://{user}@{address}/DATABASE --label LABEL \
         --password-stdin`, after `runner-manager pool leave` if this host is in the pool)"
    )]
    WrongPassword { address: String, user: String },
    #[error(
        "the server at {address} does not answer as PostgreSQL ({detail}): check the host and \
         port of the pool URL"
    )]
    NotPostgres { address: String, detail: String },
    #[error(
        "the server at {address} does not accept TLS: turn on ssl in its postgresql.conf (with \
         a certificate), or drop sslmode from the pool URL on a trusted network"
    )]
    TlsNotOffered { address: String },
    #[error(
        "the certificate of the server at {address} is signed by an authority this host does \
         not trust: {fix}"
    )]
    TlsUntrusted {
        address: String,
        /// `add sslrootcert=…`, or, when the URL has one, that it names another authority.
        fix: String,
    },
    #[error(
        "the certificate of the server at {address} is not valid for '{host}' (it is for \
         {names}): write in the pool URL a host name the certificate lists, or give the server \
         a certificate for '{host}'"
    )]
    TlsWrongName {
        address: String,
        /// As the pool URL names the server.
        host: String,
        names: String,
    },
    #[error(
        "TLS with the server at {address} failed ({detail}): check the server's certificate \
         (its dates, its key usage) and this host's clock"
    )]
    TlsFailed { address: String, detail: String },
    #[error(
        "the pool database was set up by a newer runner-manager (schema {found}; this one \
         knows up to {supported}): update runner-manager on this host to join the pool"
    )]
    NewerSchema { found: i32, supported: i32 },
    #[error("the pool database refused: {detail} (SQLSTATE {code}){fix}")]
    Refused {
        code: String,
        detail: String,
        /// `: grant …` when the code says what to do.
        fix: String,
    },
}

impl PoolError {
    /// The database cannot be asked now; it may answer later without anyone doing anything.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, PoolError::Unreachable { .. })
    }

    /// Classifies a driver error, at `address` as `user`. `connecting`: before the server
    /// ever answered as PostgreSQL (only then can a garbled answer mean "not PostgreSQL";
    /// later it is a connection lost).
    pub(crate) fn from_driver(
        e: &tokio_postgres::Error,
        address: &str,
        user: &str,
        connecting: bool,
    ) -> PoolError {
        if let Some(db) = e.as_db_error() {
            let code = db.code().code().to_owned();
            return match code.as_str() {
                // invalid_password, invalid_authorization_specification
                "28P01" | "28000" => PoolError::WrongPassword {
                    address: address.to_owned(),
                    user: user.to_owned(),
                },
                // The server is starting up, shutting down, or out of connections: later.
                "57P01" | "57P02" | "57P03" | "53300" | "08006" | "08001" | "08004" => {
                    PoolError::Unreachable {
                        address: address.to_owned(),
                        detail: db.message().to_owned(),
                    }
                }
                "3D000" => PoolError::Refused {
                    code,
                    detail: db.message().to_owned(),
                    fix: ": create the database first (`createdb`) or name one that exists".into(),
                },
                "42501" => PoolError::Refused {
                    code,
                    detail: db.message().to_owned(),
                    fix: format!(
                        ": give '{user}' the right to create tables in the database (the first \
                         host to join sets up the schema)"
                    ),
                },
                _ => PoolError::Refused {
                    code,
                    detail: db.message().to_owned(),
                    fix: String::new(),
                },
            };
        }
        let lost = match io_source(e) {
            Some(io) => is_network(io.kind()).then(|| io.to_string()),
            None => e
                .is_closed()
                .then(|| "the connection was closed".to_owned()),
        };
        if let Some(detail) = lost.or_else(|| (!connecting).then(|| e.to_string())) {
            return PoolError::Unreachable {
                address: address.to_owned(),
                detail,
            };
        }
        // Neither a database answer nor a network failure: whatever answered on that port
        // spoke another protocol.
        PoolError::NotPostgres {
            address: address.to_owned(),
            detail: e.to_string(),
        }
    }
}

/// The I/O error under a driver error, if any.
fn io_source(e: &tokio_postgres::Error) -> Option<&io::Error> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>() {
            return Some(io);
        }
        source = s.source();
    }
    None
}

/// The network failed (nothing listens, the route or the connection broke): as opposed to
/// a peer that answered with something that is not PostgreSQL's protocol.
fn is_network(kind: io::ErrorKind) -> bool {
    use io::ErrorKind as K;
    matches!(
        kind,
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::TimedOut
            | K::BrokenPipe
            | K::AddrNotAvailable
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::NetworkDown
            | K::NotFound
    )
}
