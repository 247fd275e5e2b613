//! Following the service across stops and restarts: the loop the tray and `runner-manager
//! status --watch` share. It connects (trying each socket in turn), hands out the watch
//! stream's messages as [`Input`]s for [`crate::model::Model::fold`], and after any loss says
//! why, waits a little (100 ms, doubling to [`MAX_RECONNECT_DELAY`]) and connects again, so a
//! service that comes back is seen within two seconds. Waiting on a local socket costs
//! nothing at GitHub; while the stream is up nothing is polled.

use super::{Client, ClientError, ClientOptions, WatchStream};
use crate::model::{Disconnect, Input};
use crate::watch::WatchMessage;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The first wait after a loss (a restart is usually back by then).
pub const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between two connection attempts.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(1500);
/// Bound on the one `GET /v1/update` per connection (a local call).
pub const UPDATE_STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// Sleeps for `wait`, or forever when nothing shown depends on time (a follower's timer).
pub async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending::<()>().await,
    }
}

/// Connects to the service and follows its watch stream; see the module doc.
pub struct Follower {
    sockets: Vec<PathBuf>,
    options: ClientOptions,
    stream: Option<WatchStream>,
    client: Option<Client>,
    delay: Duration,
    wait_first: bool,
}

impl Follower {
    /// Tries `sockets` in order (e.g. [`crate::sockets::default_sockets`], or the one
    /// `--socket` names).
    pub fn new(sockets: Vec<PathBuf>, options: ClientOptions) -> Self {
        Follower {
            sockets,
            options,
            stream: None,
            client: None,
            delay: FIRST_RECONNECT_DELAY,
            wait_first: false,
        }
    }

    /// The connected client, if the stream is up (for the mutating calls).
    pub fn client(&self) -> Option<&Client> {
        self.client.as_ref()
    }

    /// The socket of the current connection.
    pub fn socket(&self) -> Option<&Path> {
        self.client.as_ref().map(Client::socket_path)
    }

    /// The updater's state, read once per connection by the followers (the status carries no
    /// update part, and an announcement made before this connection is not sent again);
    /// `None` without a connection, from a service without an updater (older), or when it does
    /// not answer within [`UPDATE_STATUS_TIMEOUT`] (the stream's events still come).
    pub async fn update_status(&self) -> Option<crate::UpdateStatus> {
        let client = self.client.as_ref()?;
        match tokio::time::timeout(UPDATE_STATUS_TIMEOUT, client.update_status()).await {
            Ok(Ok(status)) => Some(status),
            Ok(Err(error)) => {
                tracing::info!(%error, "the service's update status could not be read");
                None
            }
            Err(_) => {
                tracing::info!("the service's update status did not come within 5 s");
                None
            }
        }
    }

    /// The next input: a message, or why the connection was lost or could not be made (after
    /// which the next call waits, then connects again). Cancel-safe between messages.
    pub async fn next(&mut self) -> Input {
        loop {
            if let Some(stream) = &mut self.stream {
                match stream.next().await {
                    Some(Ok(message)) => {
                        if matches!(message, WatchMessage::Snapshot { .. }) {
                            self.delay = FIRST_RECONNECT_DELAY;
                        }
                        return Input::Message(message);
                    }
                    Some(Err(ClientError::BadWatchLine { detail, .. })) => {
                        return Input::BadLine { detail };
                    }
                    Some(Err(e)) => {
                        self.drop_connection();
                        return Input::Lost(self.disconnect(&e));
                    }
                    None => {
                        self.drop_connection();
                        return Input::Lost(Disconnect::Ended);
                    }
                }
            }
            if self.wait_first {
                tokio::time::sleep(self.delay).await;
                self.delay = (self.delay * 2).min(MAX_RECONNECT_DELAY);
            }
            self.wait_first = true;
            match self.connect().await {
                Ok((client, stream)) => {
                    self.client = Some(client);
                    self.stream = Some(stream);
                }
                Err(e) => return Input::Lost(self.disconnect(&e)),
            }
        }
    }

    fn drop_connection(&mut self) {
        self.stream = None;
        self.client = None;
        self.wait_first = true;
        self.delay = FIRST_RECONNECT_DELAY;
    }

    async fn connect(&self) -> Result<(Client, WatchStream), ClientError> {
        let mut worst: Option<ClientError> = None;
        for socket in &self.sockets {
            let attempt = async {
                let client = Client::connect_with(socket, self.options.clone()).await?;
                let stream = client.watch().await?;
                Ok::<_, ClientError>((client, stream))
            };
            match attempt.await {
                Ok(up) => return Ok(up),
                // Another socket may still answer; a refusal or a version mismatch is worth
                // more than "not running" if none does.
                Err(e @ ClientError::ServiceNotRunning { .. }) => {
                    worst.get_or_insert(e);
                }
                Err(e) => worst = Some(e),
            }
        }
        Err(worst.unwrap_or_else(|| ClientError::ServiceNotRunning {
            socket: PathBuf::new(),
            hint: super::error::START_SERVICE_HINT,
        }))
    }

    fn disconnect(&self, error: &ClientError) -> Disconnect {
        disconnect_of(error, &self.sockets)
    }
}

/// How a client error reads as a connection state.
pub fn disconnect_of(error: &ClientError, sockets: &[PathBuf]) -> Disconnect {
    match error {
        ClientError::ServiceNotRunning { .. } => Disconnect::NotRunning {
            sockets: sockets.iter().map(|s| s.display().to_string()).collect(),
        },
        ClientError::PermissionDenied { message, .. } => Disconnect::NotAllowed {
            detail: message.clone(),
        },
        ClientError::VersionMismatch(e) => Disconnect::VersionMismatch {
            detail: e.to_string(),
        },
        ClientError::WatchClosed { .. } => Disconnect::Ended,
        ClientError::Protocol { detail, .. } | ClientError::BadWatchLine { detail, .. } => {
            Disconnect::Unreadable {
                detail: detail.clone(),
            }
        }
        other => Disconnect::Failed {
            detail: other.to_string(),
        },
    }
}
