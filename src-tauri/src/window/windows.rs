//! The windows: the dashboard and the sign-in window, opened (or focused) on demand.
//! The pages keep nothing in webview storage, and nothing secret reaches them (the service
//! never answers a token or a device code). Not incognito: on WebKitGTK an ephemeral context
//! does not serve the app's own pages.

use crate::Context;
use rm_tray::link::{ToTray, Window};
use rm_tray::state::Shared;
use std::sync::atomic::Ordering;
use tauri::{AppHandle, Emitter, Manager, WebviewUrl, WebviewWindowBuilder, WindowEvent};

/// Shows the window (creating it if needed); `anchor` scrolls the dashboard to a section or a
/// failure.
pub fn show(app: &AppHandle, which: Window, anchor: Option<String>) {
    if which == Window::Dashboard {
        acknowledge(app);
    }
    if let Some(window) = app.get_webview_window(which.label()) {
        let _ = window.unminimize();
        let _ = window.show();
        let _ = window.set_focus();
        if let Some(anchor) = anchor {
            let _ = window.emit("anchor", anchor);
        }
        return;
    }
    let page = match (which, &anchor) {
        (Window::Dashboard, Some(a)) => format!("dashboard.html#{a}"),
        (Window::Dashboard, None) => "dashboard.html".to_owned(),
        (Window::SignIn, _) => "signin.html".to_owned(),
    };
    let (title, size) = match which {
        Window::Dashboard => ("runner-manager", (980.0, 760.0)),
        Window::SignIn => ("Sign in to GitHub - runner-manager", (480.0, 600.0)),
    };
    let built = WebviewWindowBuilder::new(app, which.label(), WebviewUrl::App(page.into()))
        .title(title)
        .inner_size(size.0, size.1)
        .min_inner_size(420.0, 420.0)
        .build();
    match built {
        Ok(window) => {
            tracing::info!(window = which.label(), "window opened");
            let app = app.clone();
            window.on_window_event(move |event| {
                if let WindowEvent::Destroyed = event {
                    tracing::info!(window = which.label(), "window closed");
                    closed(&app, which);
                }
            });
        }
        Err(error) => tracing::error!(%error, window = which.label(), "could not open the window"),
    }
}

/// Looking at the dashboard acknowledges the failures it lists, here and in the icon process.
pub fn acknowledge(app: &AppHandle) {
    let shared = app.state::<Shared>();
    shared.model().acknowledge(rm_proto::UnixMillis::now());
    shared.poke.notify_one();
    app.state::<Context>().tell_tray(ToTray::Acknowledge);
}

fn closed(app: &AppHandle, which: Window) {
    // Closing the window cancels a sign-in still waiting for the code; the process (whose
    // last window this may be) ends once that is done.
    if which != Window::SignIn {
        return;
    }
    let waiting = app
        .state::<Shared>()
        .model()
        .sign_in
        .as_ref()
        .is_some_and(|s| !s.state.is_final());
    if !waiting {
        return;
    }
    app.state::<Context>()
        .pending
        .fetch_add(1, Ordering::SeqCst);
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        match rm_tray::service::client(&app.state::<Shared>()).await {
            Ok(client) => {
                if let Err(error) = client.cancel_sign_in().await {
                    tracing::info!(%error, "could not cancel the sign-in");
                }
            }
            Err(error) => tracing::info!(%error, "could not cancel the sign-in"),
        }
        let left = app
            .state::<Context>()
            .pending
            .fetch_sub(1, Ordering::SeqCst)
            - 1;
        if left == 0 && app.webview_windows().is_empty() {
            app.exit(0);
        }
    });
}
