//! Why the service could not start listening (socket or pipe), each with the fix.

use std::io;
use std::path::PathBuf;
use thiserror::Error;

/// Why the socket (Unix) or the pipe (Windows) could not be bound.
#[derive(Debug, Error)]
pub enum BindError {
    #[error(
        "another runner-manager service is already answering on {path}: stop it first \
         (`runner-manager service stop`) or use another socket path"
    )]
    InUse { path: PathBuf },
    #[error(
        "{path} exists and is not a socket: refusing to remove it; move it away or choose \
         another socket path"
    )]
    NotASocket { path: PathBuf },
    /// The pipe name exists already: another service, or a program squatting the name to
    /// receive the clients. The service never serves as a second instance of someone's pipe.
    #[error(
        "the pipe {name} already exists: another runner-manager service for this data \
         directory is running, or another program has taken the name. Stop the other service \
         (`sc.exe stop runner-manager`), or find the program holding the pipe (e.g. Sysinternals \
         `handle.exe -a {name}`) and stop it"
    )]
    PipeTaken { name: String },
    #[error("binding the local API must happen inside a tokio runtime")]
    NoRuntime,
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_taken_names_the_pipe_and_the_fix() {
        let name = r"\\.\pipe\runner-manager-0123456789abcdef".to_owned();
        let text = BindError::PipeTaken { name: name.clone() }.to_string();
        assert!(text.contains(&name), "{text}");
        assert!(text.contains("sc.exe stop runner-manager"), "{text}");
    }
}
