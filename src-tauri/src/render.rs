//! Renders the model everywhere it shows: the tray (icon, menu, label) and the open windows
//! (event `model`).

use crate::state::Shared;
use crate::{dto, tray};
use rm_proto::UnixMillis;
use tauri::{AppHandle, Emitter, Manager};

pub fn all(app: &AppHandle) {
    let shared = app.state::<Shared>();
    let (view, status, about) = {
        let m = shared.model();
        (
            m.view(UnixMillis::now()),
            m.status.clone(),
            m.about(crate::TRAY_VERSION),
        )
    };
    tray::render(app, &view, status.as_ref(), &about);
    // Only open windows listen; with none open this is a no-op.
    if !app.webview_windows().is_empty() {
        if let Err(error) = app.emit("model", dto::model(&shared)) {
            tracing::debug!(%error, "could not send the model to the windows");
        }
    }
}
