//! Reading the watch stream line by line.

use super::error::ClientError;
use crate::watch::WatchMessage;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::path::PathBuf;

/// Longest line accepted; a full status is far smaller.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// The messages of one watch, in order: a [`WatchMessage::Snapshot`] first.
///
/// `next` returns `None` when the service ended the stream cleanly (it is stopping) and
/// `Some(Err(ClientError::WatchClosed))` when it cut this reader off; either way, watch again.
/// A single unreadable line is `Some(Err(ClientError::BadWatchLine))` and the stream goes on.
pub struct WatchStream {
    body: Incoming,
    buffer: Vec<u8>,
    socket: PathBuf,
    done: bool,
}

impl WatchStream {
    pub(super) fn new(body: Incoming, socket: PathBuf) -> Self {
        WatchStream {
            body,
            buffer: Vec::new(),
            socket,
            done: false,
        }
    }

    /// The next message; `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<Result<WatchMessage, ClientError>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let line = &line[..end];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                // A line that does not parse is reported and skipped: lines are independent,
                // so the stream goes on (unknown types and kinds already parse, as `unknown`).
                return Some(
                    serde_json::from_slice(line).map_err(|e| ClientError::BadWatchLine {
                        socket: self.socket.clone(),
                        detail: e.to_string(),
                    }),
                );
            }
            if self.buffer.len() > MAX_LINE_BYTES {
                return Some(Err(self.fail(format!(
                    "a watch line is longer than {MAX_LINE_BYTES} bytes"
                ))));
            }
            match self.body.frame().await {
                None => {
                    self.done = true;
                    if self.buffer.is_empty() {
                        return None;
                    }
                    return Some(Err(self.fail("the watch stream ended mid-line".to_owned())));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) => {
                    self.done = true;
                    return Some(Err(ClientError::WatchClosed {
                        socket: self.socket.clone(),
                    }));
                }
            }
        }
    }

    fn fail(&mut self, detail: String) -> ClientError {
        self.done = true;
        ClientError::Protocol {
            socket: self.socket.clone(),
            detail,
        }
    }
}
