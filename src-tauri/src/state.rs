//! A process's one state owner: the model folded from the watch stream, and what goes with it.

use rm_proto::model::{Model, ModelOptions};
use rm_proto::UnixMillis;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

pub struct Shared {
    model: Mutex<Model>,
    /// The socket of the current connection (commands connect there).
    socket: Mutex<Option<PathBuf>>,
    /// The sockets the follower tries, in order.
    pub sockets: Vec<PathBuf>,
    /// Why there is no tray icon (no tray host on this desktop), when there is none.
    no_tray: Mutex<Option<String>>,
    /// Wakes the follower to render again (after a local change such as an acknowledgement).
    pub poke: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves a usable value: keep going.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub fn new(sockets: Vec<PathBuf>, options: ModelOptions) -> Self {
        Shared {
            model: Mutex::new(Model::new(UnixMillis::now(), options)),
            socket: Mutex::new(None),
            sockets,
            no_tray: Mutex::new(None),
            poke: Notify::new(),
        }
    }

    pub fn model(&self) -> MutexGuard<'_, Model> {
        lock(&self.model)
    }

    pub fn socket(&self) -> Option<PathBuf> {
        lock(&self.socket).clone()
    }

    pub fn set_socket(&self, socket: Option<PathBuf>) {
        *lock(&self.socket) = socket;
    }

    pub fn no_tray(&self) -> Option<String> {
        lock(&self.no_tray).clone()
    }

    pub fn set_no_tray(&self, why: Option<String>) {
        *lock(&self.no_tray) = why;
    }
}
