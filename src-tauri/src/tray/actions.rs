//! What the tray menu's items do. Each change goes to the service; the menu shows the result
//! when the service reports it on the watch stream. A refused change raises a notification
//! with the reason and the fix.

use crate::app::App;
use crate::{notify, windows};
use rm_proto::{TargetKind, TargetRef, TargetUpdate};
use rm_tray::autostart;
use rm_tray::link::Window;
use rm_tray::service::{self, CommandError};
use std::sync::atomic::Ordering;

pub fn menu(app: &App, id: &str) {
    tracing::info!(item = id, "tray menu item clicked");
    match id {
        "dashboard" => windows::open(app, Window::Dashboard, None),
        "add-target" => windows::open(app, Window::Dashboard, Some("add".to_owned())),
        "about" => windows::open(app, Window::Dashboard, Some("about".to_owned())),
        "update-info" => windows::open(app, Window::Dashboard, Some("update".to_owned())),
        "update" => {
            let app = app.clone();
            app.clone().spawn(async move {
                // The outcome shows through the stream's update events (and the model's
                // notices); only a refused request is told here.
                if let Err(e) = service::apply_update(&app.shared).await {
                    notify::error(&app, "The update was not started", &e);
                }
                app.render();
            });
        }
        "sign-in" => windows::open(app, Window::SignIn, None),
        "quit" => {
            tracing::info!("quitting the tray; the service keeps serving jobs");
            app.exit();
        }
        "autostart" => {
            let on = !autostart::is_enabled();
            if let Err(e) = autostart::set(on) {
                notify::error(app, "Start at login was not changed", &e);
            }
            app.render();
        }
        "install-service" => {
            // One install at a time: a second click while it runs does nothing (the item
            // says it is under way).
            if app.installing.swap(true, Ordering::SeqCst) {
                return;
            }
            app.render();
            let app = app.clone();
            app.clone().spawn(async move {
                let Some(service) = crate::first_run::portable_service() else {
                    app.installing.store(false, Ordering::SeqCst);
                    return;
                };
                let installed = crate::first_run::install(&service).await;
                app.installing.store(false, Ordering::SeqCst);
                match installed {
                    Ok(_) => notify::info(
                        &app,
                        "The service is installed for you",
                        "It starts now and at every login; the tray connects to it by itself.",
                    ),
                    Err(e) => notify::error(&app, "The service was not installed", &e),
                }
                app.render();
            });
        }
        "pause" | "resume" | "sign-out" => {
            let app = app.clone();
            let id = id.to_owned();
            app.clone().spawn(async move {
                if let Err(e) = service_action(&app, &id).await {
                    notify::error(&app, "runner-manager could not do that", &e);
                }
                // The check state GTK toggled on click must follow the service again.
                app.render();
            });
        }
        _ => {
            if let Some(attempt) = id.strip_prefix("runner:") {
                open_job(app, attempt);
            } else if let Some(rest) = id.strip_prefix("target:") {
                let app = app.clone();
                let rest = rest.to_owned();
                app.clone().spawn(async move {
                    if let Err(e) = toggle_target(&app, &rest).await {
                        notify::error(&app, "The target was not changed", &e);
                    }
                    app.render();
                });
            }
        }
    }
}

async fn service_action(app: &App, id: &str) -> Result<(), CommandError> {
    let client = service::client(&app.shared).await?;
    match id {
        "pause" => client.pause().await.map(|_| ())?,
        "resume" => client.resume().await.map(|_| ())?,
        "sign-out" => client.delete_credential().await?,
        _ => {}
    }
    Ok(())
}

async fn toggle_target(app: &App, rest: &str) -> Result<(), CommandError> {
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
        let model = app.shared.model();
        model
            .status
            .as_ref()
            .and_then(|s| s.targets.iter().find(|t| t.target == target.name))
            .map(|t| t.enabled)
    };
    let client = service::client(&app.shared).await?;
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

fn open_job(app: &App, attempt: &str) {
    let url = {
        let model = app.shared.model();
        model
            .status
            .as_ref()
            .and_then(|s| s.runners.iter().find(|r| r.attempt_id == attempt))
            .and_then(|r| r.job.as_ref())
            .and_then(|j| j.html_url.clone())
    };
    if let Some(url) = url {
        open_url(&url);
    }
}

/// Opens a web page in the user's browser (http(s) only).
pub fn open_url(url: &str) {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        tracing::warn!(%url, "not a web address; not opened");
        return;
    }
    if let Err(error) = open::that_detached(url) {
        tracing::warn!(%error, %url, "could not open the page");
    }
}
