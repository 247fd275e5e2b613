//! The commands the windows call. Each is thin: it calls the service through the client and
//! answers the result or a coded error `{code, message, fix}`.

use crate::dto::{self, ModelDto};
use crate::{render, windows, Context};
use rm_proto::{SignInSession, SignInStart, TargetAdd, TargetRef, TargetStatus, TargetUpdate};
use rm_tray::autostart;
use rm_tray::link::{ToTray, Window};
use rm_tray::service::{self, sign_in_error, CommandError};
use rm_tray::state::Shared;
use tauri::{AppHandle, Manager, State, WebviewWindow};

type Answer<T> = Result<T, CommandError>;

#[tauri::command]
pub fn model(shared: State<'_, Shared>) -> ModelDto {
    dto::model(&shared)
}

#[tauri::command]
pub fn acknowledge(app: AppHandle) {
    windows::acknowledge(&app);
}

#[tauri::command]
pub async fn start_sign_in(app: AppHandle, restart: bool) -> Answer<SignInSession> {
    let client = service::client(&app.state::<Shared>()).await?;
    client
        .start_sign_in(&SignInStart { restart })
        .await
        .map_err(sign_in_error)
}

#[tauri::command]
pub async fn cancel_sign_in(app: AppHandle) -> Answer<SignInSession> {
    let client = service::client(&app.state::<Shared>()).await?;
    client.cancel_sign_in().await.map_err(sign_in_error)
}

#[tauri::command]
pub async fn sign_out(app: AppHandle) -> Answer<()> {
    let client = service::client(&app.state::<Shared>()).await?;
    Ok(client.delete_credential().await?)
}

fn target_ref(target: &str) -> Answer<TargetRef> {
    // The parser's message already names the fix.
    TargetRef::parse(target.trim()).map_err(|e| CommandError::new("bad_request", e.to_string(), ""))
}

/// A target and the profile a dashboard row is about (`None`: the default one).
fn profile_ref(target: &str, profile: Option<&str>) -> Answer<TargetRef> {
    Ok(target_ref(target)?.with_profile(profile.unwrap_or("default")))
}

#[tauri::command]
pub async fn add_target(
    app: AppHandle,
    target: String,
    max_runners: Option<u32>,
    monitor_only: bool,
) -> Answer<TargetStatus> {
    let name = target_ref(&target)?;
    let client = service::client(&app.state::<Shared>()).await?;
    // Without a maximum the service fills in the host's capacity (monitor only: none).
    let request = TargetAdd {
        target: name.name.clone(),
        max_capacity: max_runners.filter(|_| !monitor_only),
        enabled: Some(true),
        up_to_host: !monitor_only,
        ..TargetAdd::default()
    };
    Ok(client.add_target(&request).await?)
}

#[tauri::command]
pub async fn update_target(
    app: AppHandle,
    target: String,
    profile: Option<String>,
    enabled: Option<bool>,
    max_runners: Option<u32>,
    monitor_only: Option<bool>,
    keep_workspaces: Option<bool>,
) -> Answer<TargetStatus> {
    let name = profile_ref(&target, profile.as_deref())?;
    let client = service::client(&app.state::<Shared>()).await?;
    let change = TargetUpdate {
        enabled,
        max_capacity: max_runners,
        monitor_only: monitor_only.filter(|m| *m),
        workspace: keep_workspaces.map(|keep| {
            if keep {
                rm_proto::Workspace::Persistent
            } else {
                rm_proto::Workspace::Ephemeral
            }
        }),
        ..TargetUpdate::default()
    };
    service::update_target(&client, &name, change).await
}

#[tauri::command]
pub async fn remove_target(app: AppHandle, target: String, profile: Option<String>) -> Answer<()> {
    let name = profile_ref(&target, profile.as_deref())?;
    let client = service::client(&app.state::<Shared>()).await?;
    Ok(client.remove_target(&name).await?)
}

/// Why queued jobs have no runner (`runner-manager why`).
#[tauri::command]
pub async fn why(app: AppHandle) -> Answer<rm_proto::WhyReport> {
    let client = service::client(&app.state::<Shared>()).await?;
    Ok(client.why().await?)
}

#[tauri::command]
pub async fn set_paused(app: AppHandle, paused: bool) -> Answer<bool> {
    let client = service::client(&app.state::<Shared>()).await?;
    let state = if paused {
        client.pause().await?
    } else {
        client.resume().await?
    };
    Ok(state.paused)
}

#[tauri::command]
pub async fn set_host_capacity(app: AppHandle, capacity: u32) -> Answer<u32> {
    let client = service::client(&app.state::<Shared>()).await?;
    Ok(client.set_host_capacity(capacity).await?.capacity)
}

/// The dashboard's "Update now": the service applies the available release (running jobs
/// finish first); the answer is its update status.
#[tauri::command]
pub async fn apply_update(app: AppHandle) -> Answer<rm_proto::UpdateStatus> {
    service::apply_update(&app.state::<Shared>()).await
}

#[tauri::command]
pub fn copy_text(app: AppHandle, text: String) -> Answer<()> {
    use tauri_plugin_clipboard_manager::ClipboardExt;
    app.clipboard().write_text(text).map_err(|e| {
        CommandError::new(
            "clipboard_failed",
            format!("Could not copy: {e}"),
            "Select the text and copy it by hand.",
        )
    })
}

#[tauri::command]
pub fn open_url(app: AppHandle, url: String) -> Answer<()> {
    use tauri_plugin_opener::OpenerExt;
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(CommandError::new(
            "bad_request",
            format!("{url} is not a web address"),
            "Only http(s) pages are opened.",
        ));
    }
    app.opener().open_url(&url, None::<&str>).map_err(|e| {
        CommandError::new(
            "open_failed",
            format!("Could not open the browser: {e}"),
            format!("Open {url} in your browser by hand."),
        )
    })
}

#[tauri::command]
pub fn show_window(app: AppHandle, which: String, anchor: Option<String>) -> Answer<()> {
    let which = Window::parse(&which).ok_or_else(|| {
        CommandError::new(
            "bad_request",
            format!("no window {which:?}"),
            "Use dashboard or sign-in.",
        )
    })?;
    windows::show(&app, which, anchor);
    Ok(())
}

#[tauri::command]
pub fn close_window(window: WebviewWindow) {
    let _ = window.close();
}

#[tauri::command]
pub fn autostart_enabled() -> bool {
    autostart::is_enabled()
}

#[tauri::command]
pub fn set_autostart(app: AppHandle, on: bool) -> Answer<bool> {
    autostart::set(on)?;
    app.state::<Context>().tell_tray(ToTray::AutostartChanged);
    render::all(&app);
    Ok(autostart::is_enabled())
}

#[tauri::command]
pub fn set_notify_finished_jobs(app: AppHandle, on: bool) {
    app.state::<Shared>().model().options.notify_finished_jobs = on;
    app.state::<Context>()
        .tell_tray(ToTray::NotifyFinishedJobs(on));
}
