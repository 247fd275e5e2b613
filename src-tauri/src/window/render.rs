//! Sends the model to the open windows (event `model`).

use crate::dto;
use rm_tray::state::Shared;
use tauri::{AppHandle, Emitter, Manager};

pub fn all(app: &AppHandle) {
    if app.webview_windows().is_empty() {
        return;
    }
    if let Err(error) = app.emit("model", dto::model(&app.state::<Shared>())) {
        tracing::debug!(%error, "could not send the model to the windows");
    }
}
