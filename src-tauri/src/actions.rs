//! What the tray menu's items do. Each change goes to the service; the menu shows the result
//! when the service reports it on the watch stream. A refused change raises a notification
//! with the reason and the fix.

use crate::service::{self, CommandError};
use crate::windows::{self, Window};
use crate::{autostart, notify, render};
use rm_proto::{TargetKind, TargetRef, TargetUpdate};
use tauri::AppHandle;
use tauri_plugin_opener::OpenerExt;

pub fn menu(app: &AppHandle, id: &str) {
    tracing::info!(item = id, "tray menu item clicked");
    match id {
        "dashboard" => windows::show(app, Window::Dashboard, None),
        "add-target" => windows::show(app, Window::Dashboard, Some("add".to_owned())),
        "about" => windows::show(app, Window::Dashboard, Some("about".to_owned())),
        "update-info" => windows::show(app, Window::Dashboard, Some("update".to_owned())),
        "update" => {
            let app = app.clone();
            tauri::async_runtime::spawn(async move {
                // The outcome shows through the stream's update events (and the model's
                // notices); only a refused request is told here.
                if let Err(e) = service::apply_update(&app).await {
                    notify::error(&app, "The update was not started", &e);
                }
                render::all(&app);
            });
        }
        "sign-in" => windows::show(app, Window::SignIn, None),
        "quit" => {
            tracing::info!("quitting the tray; the service keeps serving jobs");
            app.exit(0);
        }
        "autostart" => {
            let on = !autostart::is_enabled(app);
            if let Err(e) = autostart::set(app, on) {
                notify::error(app, "Start at login was not changed", &e);
            }
            render::all(app);
        }
        "install-service" => {
            let app = app.clone();
            tauri::async_runtime::spawn(async move {
                let Some(service) = crate::first_run::portable_service() else {
                    return;
                };
                match crate::first_run::install(&service).await {
                    Ok(_) => notify::info(
                        &app,
                        "The service is installed for you",
                        "It starts now and at every login; the tray connects to it by itself.",
                    ),
                    Err(e) => notify::error(&app, "The service was not installed", &e),
                }
                render::all(&app);
            });
        }
        "pause" | "resume" | "sign-out" => {
            let app = app.clone();
            let id = id.to_owned();
            tauri::async_runtime::spawn(async move {
                if let Err(e) = service_action(&app, &id).await {
                    notify::error(&app, "runner-manager could not do that", &e);
                }
                // The check state GTK toggled on click must follow the service again.
                render::all(&app);
            });
        }
        _ => {
            if let Some(attempt) = id.strip_prefix("runner:") {
                open_job(app, attempt);
            } else if let Some(rest) = id.strip_prefix("target:") {
                let app = app.clone();
                let rest = rest.to_owned();
                tauri::async_runtime::spawn(async move {
                    if let Err(e) = toggle_target(&app, &rest).await {
                        notify::error(&app, "The target was not changed", &e);
                    }
                    render::all(&app);
                });
            }
        }
    }
}

async fn service_action(app: &AppHandle, id: &str) -> Result<(), CommandError> {
    let client = service::client(app).await?;
    match id {
        "pause" => client.pause().await.map(|_| ())?,
        "resume" => client.resume().await.map(|_| ())?,
        "sign-out" => client.delete_credential().await?,
        _ => {}
    }
    Ok(())
}

async fn toggle_target(app: &AppHandle, rest: &str) -> Result<(), CommandError> {
    let (kind, name) = rest.split_once(':').unwrap_or(("", rest));
    let target = TargetRef::parse(name).map_err(|e| {
        CommandError::new(
            "bad_request",
            e.to_string(),
            "Pick the target from the menu.",
        )
    })?;
    let kind_ok = matches!(
        (kind, target.kind),
        ("repo", TargetKind::Repo) | ("org", TargetKind::Org)
    );
    if !kind_ok {
        return Err(CommandError::new(
            "bad_request",
            format!("{name} is not a {kind}"),
            "Pick the target from the menu.",
        ));
    }
    let enabled = {
        let shared = tauri::Manager::state::<crate::state::Shared>(app);
        let model = shared.model();
        model
            .status
            .as_ref()
            .and_then(|s| s.targets.iter().find(|t| t.target == target.name))
            .map(|t| t.enabled)
    };
    let client = service::client(app).await?;
    service::update_target(
        &client,
        &target,
        TargetUpdate {
            enabled: Some(!enabled.unwrap_or(true)),
            ..TargetUpdate::default()
        },
    )
    .await
    .map(|_| ())
}

fn open_job(app: &AppHandle, attempt: &str) {
    let url = {
        let shared = tauri::Manager::state::<crate::state::Shared>(app);
        let model = shared.model();
        model
            .status
            .as_ref()
            .and_then(|s| s.runners.iter().find(|r| r.attempt_id == attempt))
            .and_then(|r| r.job.as_ref())
            .and_then(|j| j.html_url.clone())
    };
    if let Some(url) = url.filter(|u| u.starts_with("https://") || u.starts_with("http://")) {
        if let Err(error) = app.opener().open_url(&url, None::<&str>) {
            tracing::warn!(%error, %url, "could not open the job's page");
        }
    }
}
