//! The service's named pipe (Windows): created first-instance only (a squatter makes the
//! service fail loudly instead of sharing its clients), remote clients refused, and a DACL
//! that lets local users connect but never create instances ([`crate::pipe::pipe_sddl`]).

use super::BindError;
use crate::pipe;
use crate::win32;
use std::io;
use std::path::PathBuf;
use tokio::net::windows::named_pipe::NamedPipeServer;

/// The service side of the pipe: one instance always waits for the next client.
#[derive(Debug)]
pub struct PipeListener {
    name: String,
    sddl: String,
    next: NamedPipeServer,
}

/// Creates the pipe `name` (see [`pipe::pipe_name`]) for [`serve_until`](super::serve_until).
pub fn bind_pipe(name: &str) -> Result<PipeListener, BindError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(BindError::NoRuntime);
    }
    let io_err = |action: &'static str| {
        move |source: io::Error| BindError::Io {
            action,
            path: PathBuf::from(name),
            source,
        }
    };
    let me = win32::current_user().map_err(io_err("reading the service's own account for"))?;
    let sddl = pipe::pipe_sddl(&me);
    let next =
        win32::create_pipe_server(name, true, &sddl).map_err(|e| match e.raw_os_error() {
            Some(pipe::ERROR_ACCESS_DENIED | pipe::ERROR_PIPE_BUSY) => BindError::PipeTaken {
                name: name.to_owned(),
            },
            _ => io_err("creating the pipe")(e),
        })?;
    Ok(PipeListener {
        name: name.to_owned(),
        sddl,
        next,
    })
}

impl PipeListener {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for a client; creates the next instance before handing this one out, so the
    /// pipe never disappears (which would let another process create it).
    pub(super) async fn accept(&mut self) -> io::Result<NamedPipeServer> {
        if let Err(error) = self.next.connect().await {
            // A client that came and went leaves the instance unusable: replace it.
            self.next = win32::create_pipe_server(&self.name, false, &self.sddl)?;
            return Err(error);
        }
        let fresh = win32::create_pipe_server(&self.name, false, &self.sddl)?;
        Ok(std::mem::replace(&mut self.next, fresh))
    }
}
