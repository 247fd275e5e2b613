//! The windows live in another process, `runner-manager-window` (Tauri and its web engine),
//! started here when one is asked for and ended when its last window closes: the tray itself
//! stays small. The windows' process is single-instance: asked again, it shows the window in
//! the running one. Its standard output tells this process what it must know (the user saw
//! the failures, changed a setting; see `rm_tray::link`).

use crate::app::App;
use crate::notify;
use rm_tray::link::{Open, ToTray, Window};
use rm_tray::service::CommandError;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The windows' processes this tray started that still run.
#[derive(Default)]
pub struct Children {
    live: AtomicUsize,
}

/// Shows `which` (starting the windows' process); `anchor` scrolls the dashboard to a section
/// or a failure.
pub fn open(app: &App, which: Window, anchor: Option<String>) {
    if which == Window::Dashboard {
        // Looking at the dashboard acknowledges the failures it lists.
        acknowledge(app);
    }
    let request = Open {
        window: which,
        anchor,
        socket: app.socket.clone(),
        notify_finished_jobs: app.shared.model().options.notify_finished_jobs,
        no_tray: app.shared.no_tray(),
    };
    if let Err(e) = spawn(app, &request) {
        notify::error(app, "The window could not open", &e);
    }
}

fn acknowledge(app: &App) {
    app.shared.model().acknowledge(rm_proto::UnixMillis::now());
    app.shared.poke.notify_one();
}

fn spawn(app: &App, request: &Open) -> Result<(), CommandError> {
    let exe = rm_tray::sibling(rm_tray::WINDOW_BIN).map_err(|e| missing(&e.to_string()))?;
    let mut child = Command::new(&exe)
        .args(request.args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| missing(&format!("{}: {e}", exe.display())))?;
    tracing::info!(
        window = request.window.label(),
        pid = child.id(),
        "window process started"
    );
    app.windows.live.fetch_add(1, Ordering::SeqCst);
    let stdout = child.stdout.take();
    let app = app.clone();
    let watch = std::thread::Builder::new()
        .name("window".to_owned())
        .spawn(move || {
            if let Some(out) = stdout {
                for line in std::io::BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if let Some(message) = ToTray::parse(&line) {
                        told(&app, message);
                    }
                }
            }
            let status = child.wait();
            tracing::info!(?status, "window process ended");
            let left = app.windows.live.fetch_sub(1, Ordering::SeqCst) - 1;
            // Without a tray icon the dashboard is the app: closing it quits.
            if left == 0 && app.shared.no_tray().is_some() {
                app.exit();
            }
        });
    if let Err(error) = watch {
        tracing::warn!(%error, "cannot follow the window process");
    }
    Ok(())
}

fn told(app: &App, message: ToTray) {
    tracing::debug!(?message, "from the window");
    match message {
        ToTray::Acknowledge => acknowledge(app),
        ToTray::NotifyFinishedJobs(on) => {
            app.shared.model().options.notify_finished_jobs = on;
        }
        ToTray::AutostartChanged => app.render(),
    }
}

fn missing(detail: &str) -> CommandError {
    CommandError::new(
        "window_missing",
        format!("The dashboard's program could not be started ({detail})."),
        format!(
            "Reinstall runner-manager: {} belongs beside the tray.",
            rm_tray::exe_name(rm_tray::WINDOW_BIN)
        ),
    )
}
