//! Desktop notifications, raised by the tray from the model's notices (the service never
//! notifies). On Linux notify-rust talks to the notification server directly so a click
//! ("default" action) can open the dashboard at that failure, or the sign-in window; elsewhere
//! the notification plugin shows them.

use crate::service::CommandError;
use crate::windows::{self, Window};
use rm_proto::model::{Notice, NoticeAction};
use tauri::AppHandle;

/// Raises a notice; a missing notification server is logged, never fatal.
pub fn raise(app: &AppHandle, notice: &Notice) {
    tracing::info!(kind = ?notice.kind, title = %notice.title, "notification");
    show(
        app,
        &notice.title,
        &notice.body,
        Some(notice.action.clone()),
    );
}

/// Tells the user a change they asked for did not happen, and what to do.
pub fn error(app: &AppHandle, title: &str, e: &CommandError) {
    tracing::warn!(code = %e.code, message = %e.message, "{title}");
    show(
        app,
        title,
        &format!("{} {}", e.message, e.fix),
        Some(NoticeAction::OpenDashboard { failure: None }),
    );
}

/// Tells the user something they asked for was done.
pub fn info(app: &AppHandle, title: &str, body: &str) {
    tracing::info!(title, "notification");
    show(app, title, body, None);
}

/// What a click on a notification does.
pub fn act(app: &AppHandle, action: &NoticeAction) {
    match action {
        NoticeAction::OpenDashboard { failure } => {
            let anchor = failure.as_ref().map(|f| format!("failure-{f}"));
            windows::show(app, Window::Dashboard, anchor);
        }
        NoticeAction::OpenSignIn => windows::show(app, Window::SignIn, None),
        NoticeAction::OpenUpdate => {
            windows::show(app, Window::Dashboard, Some("update".to_owned()));
        }
        NoticeAction::OpenUrl(url) => {
            use tauri_plugin_opener::OpenerExt;
            if url.starts_with("https://") || url.starts_with("http://") {
                let _ = app.opener().open_url(url, None::<&str>);
            }
        }
    }
}

#[cfg(all(unix, not(target_os = "macos")))]
fn show(app: &AppHandle, title: &str, body: &str, action: Option<NoticeAction>) {
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
                        let app2 = app.clone();
                        let _ = app.run_on_main_thread(move || act(&app2, &action));
                    }
                });
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot wait for a notification click");
        }
    }
}

#[cfg(not(all(unix, not(target_os = "macos"))))]
fn show(app: &AppHandle, title: &str, body: &str, _action: Option<NoticeAction>) {
    use tauri_plugin_notification::NotificationExt;
    if let Err(error) = app.notification().builder().title(title).body(body).show() {
        tracing::warn!(%error, "no notification shown");
    }
}
