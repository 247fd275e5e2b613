//! Streaming the watch: one forwarder task per reader between the shared broadcast and the
//! reader's socket. The broadcast never waits for anyone; a reader that lags behind it, or
//! whose socket stays full longer than the bound, is disconnected. Other readers have their own
//! forwarder and queue and are unaffected.

use super::{ServerLimits, WatchStart};
use crate::error::ApiError;
use crate::watch::WatchMessage;
use hyper::body::{Body, Bytes, Frame};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::error::SendTimeoutError;
use tokio::sync::{mpsc, Notify};

/// A response body fed line by line from a channel.
pub(super) struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    pub(super) fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        ChannelBody { rx }
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|line| line.map(|bytes| Ok(Frame::data(bytes))))
    }
}

fn encode(message: &WatchMessage) -> Result<Bytes, ApiError> {
    message
        .to_line()
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("could not encode a watch message: {e}")))
}

/// Queues the snapshot and spawns the forwarder; returns the body's channel.
pub(super) fn start_watch(
    start: WatchStart,
    limits: &ServerLimits,
    kill: Arc<Notify>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    let (tx, rx) = mpsc::channel(limits.watch_queue.max(1));
    let snapshot = encode(&WatchMessage::Snapshot {
        status: Box::new(start.snapshot),
    })?;
    tx.try_send(snapshot)
        .map_err(|_| ApiError::internal("could not queue the watch snapshot"))?;
    let bound = limits.watch_write_timeout;
    let mut events = start.events;
    tokio::spawn(async move {
        loop {
            let message = tokio::select! {
                received = events.recv() => received,
                // The reader went away (connection closed): stop forwarding.
                () = tx.closed() => return,
                () = super::stopped(&mut stop) => {
                    // The server stops: send what was published before, then end the stream
                    // cleanly (dropping `tx` ends the body) instead of cutting it.
                    while let Ok(message) = events.try_recv() {
                        let Ok(line) = encode(&message) else { continue };
                        if tx.send_timeout(line, bound).await.is_err() {
                            return;
                        }
                    }
                    return;
                }
            };
            let message = match message {
                Ok(message) => message,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "watch reader lagged behind the broadcast; disconnecting it"
                    );
                    kill.notify_one();
                    return;
                }
                // The service is shutting down: end the stream cleanly.
                Err(RecvError::Closed) => return,
            };
            let line = match encode(&message) {
                Ok(line) => line,
                Err(error) => {
                    tracing::error!(%error, "skipping a watch message");
                    continue;
                }
            };
            match tx.send_timeout(line, bound).await {
                Ok(()) => {}
                Err(SendTimeoutError::Timeout(_)) => {
                    tracing::warn!(?bound, "watch reader stopped reading; disconnecting it");
                    kill.notify_one();
                    return;
                }
                Err(SendTimeoutError::Closed(_)) => return,
            }
        }
    });
    Ok(rx)
}
