//! The icon process's handle on itself: the model, the way to the GTK main loop (rendering
//! happens there), the I/O runtime, and what it was started with.

use crate::relaunch::Exe;
use rm_tray::state::Shared;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tao::event_loop::EventLoopProxy;

/// What the main loop is asked to do from elsewhere.
#[derive(Debug)]
pub enum UserEvent {
    /// Bring the icon and menu in line with the model.
    Render,
    /// A menu item was clicked (its id).
    Menu(String),
    /// End the tray.
    Exit,
    /// End the process (a moment after `Exit`).
    ExitNow,
}

#[derive(Clone)]
pub struct App {
    pub shared: Arc<Shared>,
    proxy: EventLoopProxy<UserEvent>,
    runtime: tokio::runtime::Handle,
    /// The tray's executable as it was at start (to see it replaced by an update).
    pub exe: Option<Arc<Exe>>,
    /// The socket given on the command line (the windows are told the same).
    pub socket: Option<PathBuf>,
    pub windows: Arc<crate::windows::Children>,
    /// The portable archive's service install is running (see `first_run`).
    pub installing: Arc<AtomicBool>,
}

impl App {
    pub fn new(
        shared: Shared,
        proxy: EventLoopProxy<UserEvent>,
        runtime: tokio::runtime::Handle,
        exe: Option<Exe>,
        socket: Option<PathBuf>,
    ) -> App {
        App {
            shared: Arc::new(shared),
            proxy,
            runtime,
            exe: exe.map(Arc::new),
            socket,
            windows: Arc::default(),
            installing: Arc::default(),
        }
    }

    pub fn send(&self, event: UserEvent) {
        // Fails only once the loop has ended (the process is ending).
        let _ = self.proxy.send_event(event);
    }

    /// Renders on the main loop (from any thread).
    pub fn render(&self) {
        self.send(UserEvent::Render);
    }

    pub fn exit(&self) {
        self.send(UserEvent::Exit);
    }

    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(task);
    }
}
