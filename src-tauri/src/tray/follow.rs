//! The task that keeps the model current: follows the service's watch stream (reconnecting by
//! itself), folds each input, renders the tray and raises notifications.
//! While nothing changes it sleeps: no polling of the service, and a timer only when something
//! shown depends on time (a running job's elapsed time, a held notification).
//!
//! The status carries no update part: after each snapshot (each connection) the follower reads
//! `GET /v1/update` once and folds it; the stream's update events carry the rest. When the
//! service says it was updated (`update_finished`, or `updated` in that status) or runs
//! another version than this tray (a package upgrade), the tray looks (one `stat`) whether its
//! own binary was replaced too, and if so restarts itself ([`crate::relaunch`]).

use crate::app::App;
use crate::{notify, relaunch};
use rm_proto::client::sleep_or_forever;
use rm_proto::model::{Input, Notice};
use rm_proto::{ClientOptions, Event, Follower, UnixMillis, UpdateState, WatchMessage};
use std::time::Duration;

pub fn spawn(app: App) {
    let task = app.clone();
    task.spawn(async move {
        let shared = app.shared.clone();
        let mut follower = Follower::new(
            shared.sockets.clone(),
            ClientOptions::named("runner-manager tray"),
        );
        // The first render shows "Connecting…" at once.
        app.render();
        loop {
            let wake = shared.model().next_tick(UnixMillis::now()).map(|at| {
                Duration::from_millis(u64::try_from(at.0 - UnixMillis::now().0).unwrap_or(0))
            });
            let input = tokio::select! {
                input = follower.next() => input,
                () = sleep_or_forever(wake) => Input::Tick,
                () = shared.poke.notified() => Input::Tick,
            };
            log_input(&input);
            let connected = matches!(input, Input::Message(WatchMessage::Snapshot { .. }));
            let mut updated = matches!(
                input,
                Input::Message(WatchMessage::Event {
                    event: Event::UpdateFinished { .. }
                })
            );
            let now = UnixMillis::now();
            let mut notices = shared.model().fold(input, now);
            if connected {
                if let Some(update) = follower.update_status().await {
                    // Updated by its updater, or by a package (then it runs another version
                    // than this tray): this tray's binary may have been replaced too.
                    updated = update.state == UpdateState::Updated
                        || update.current_version != rm_tray::TRAY_VERSION;
                    notices.extend(
                        shared
                            .model()
                            .fold(Input::Update(Box::new(update)), UnixMillis::now()),
                    );
                }
            }
            shared.set_socket(follower.socket().map(ToOwned::to_owned));
            app.render();
            raise(&app, &notices);
            if updated {
                restart_if_replaced(&app);
            }
        }
    });
}

fn raise(app: &App, notices: &[Notice]) {
    for notice in notices {
        notify::raise(app, notice);
    }
}

/// Restarts the tray when its binary on disk is not the one running (an update replaced it).
fn restart_if_replaced(app: &App) {
    let Some(exe) = app.exe.as_ref().filter(|e| e.replaced()) else {
        return;
    };
    tracing::info!(path = %exe.path().display(), "the tray's binary was replaced: restarting");
    match relaunch::spawn_successor(exe) {
        // The successor starts once this process is gone (the single-instance lock is free).
        Ok(()) => app.exit(),
        Err(error) => {
            tracing::warn!(%error, path = %exe.path().display(), "could not start the new tray; this one goes on");
        }
    }
}

fn log_input(input: &Input) {
    match input {
        Input::Message(m) => tracing::debug!(message = ?std::mem::discriminant(m), "watch message"),
        Input::Lost(why) => tracing::info!(?why, "not connected to the service"),
        Input::BadLine { detail } => tracing::warn!(%detail, "skipped an unreadable watch line"),
        Input::Update(status) => tracing::debug!(state = ?status.state, "update status"),
        Input::Tick => {}
    }
}
