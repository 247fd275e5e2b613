//! Desktop notifications, raised by the tray from the model's notices (the service never
//! notifies), through notify-rust (what Tauri's notification plugin uses on the desktop). On
//! Linux it talks to the notification server directly so a click ("default" action) can open
//! the dashboard at that failure, or the sign-in window.

use crate::app::App;
use crate::windows;
use rm_proto::model::{Notice, NoticeAction};
use rm_tray::link::Window;
use rm_tray::service::CommandError;

/// Raises a notice; a missing notification server is logged, never fatal.
pub fn raise(app: &App, notice: &Notice) {
    tracing::info!(kind = ?notice.kind, title = %notice.title, "notification");
    show(
        app,
        &notice.title,
        &notice.body,
        Some(notice.action.clone()),
    );
}

/// Tells the user a change they asked for did not happen, and what to do.
pub fn error(app: &App, title: &str, e: &CommandError) {
    tracing::warn!(code = %e.code, message = %e.message, "{title}");
    show(
        app,
        title,
        &format!("{} {}", e.message, e.fix),
        Some(NoticeAction::OpenDashboard { failure: None }),
    );
}

/// Tells the user something they asked for was done.
pub fn info(app: &App, title: &str, body: &str) {
    tracing::info!(title, "notification");
    show(app, title, body, None);
}

/// What a click on a notification does.
pub fn act(app: &App, action: &NoticeAction) {
    match action {
        NoticeAction::OpenDashboard { failure } => {
            let anchor = failure.as_ref().map(|f| format!("failure-{f}"));
            windows::open(app, Window::Dashboard, anchor);
        }
        NoticeAction::OpenSignIn => windows::open(app, Window::SignIn, None),
        NoticeAction::OpenUpdate => {
            windows::open(app, Window::Dashboard, Some("update".to_owned()));
        }
        NoticeAction::OpenUrl(url) => crate::actions::open_url(url),
    }
}

#[cfg(all(unix, not(target_os = "macos")))]
fn show(app: &App, title: &str, body: &str, action: Option<NoticeAction>) {
    let mut n = notify_rust::Notification::new();
    n.appname("runner-manager")
        .summary(title)
        .body(body)
        .icon("dialog-information");
    if action.is_some() {
        n.action("default", "Open");
    }
    let handle = match n.show() {
        Ok(h) => h,
        Err(error) => {
            tracing::warn!(%error, "no notification shown (is a notification server running?)");
            return;
        }
    };
    if let Some(action) = action {
        let app = app.clone();
        // Waiting for the click blocks: its own thread, ended when the notification closes.
        let spawned = std::thread::Builder::new()
            .name("notification".to_owned())
            .spawn(move || {
                handle.wait_for_action(|key| {
                    if key == "default" {
                        act(&app, &action);
                    }
                });
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot wait for a notification click");
        }
    }
}

#[cfg(not(all(unix, not(target_os = "macos"))))]
fn show(_app: &App, title: &str, body: &str, _action: Option<NoticeAction>) {
    if let Err(error) = notify_rust::Notification::new()
        .summary(title)
        .body(body)
        .show()
    {
        tracing::warn!(%error, "no notification shown");
    }
}
