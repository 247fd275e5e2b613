//! The watch stream's fan-out: everything published reaches every connected reader (`GET
//! /v1/watch`); with none connected, publishing is free.

use rm_proto::{Event, UnixMillis, WatchMessage};
use tokio::sync::broadcast;

/// Lines buffered per reader before a slow one is dropped (it reconnects to a fresh snapshot).
const QUEUE: usize = 256;

pub struct Watchers {
    tx: broadcast::Sender<WatchMessage>,
}

impl Default for Watchers {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(QUEUE);
        Watchers { tx }
    }
}

impl Watchers {
    /// Sends `message` to every reader (none is fine).
    pub fn publish(&self, message: WatchMessage) {
        let _ = self.tx.send(message);
    }

    /// Sends one event.
    pub fn event(&self, event: Event) {
        self.publish(WatchMessage::Event { event });
    }

    /// Whether anyone reads: building a status nobody sees is skipped.
    pub fn any(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// A new reader; subscribe before reading the snapshot so nothing falls between the two.
    pub fn subscribe(&self) -> broadcast::Receiver<WatchMessage> {
        self.tx.subscribe()
    }

    /// The sender, for parts that publish on their own (the updater).
    pub fn sender(&self) -> broadcast::Sender<WatchMessage> {
        self.tx.clone()
    }
}

/// The wall clock as the wire's time.
pub fn now() -> UnixMillis {
    UnixMillis(chrono::Utc::now().timestamp_millis())
}
