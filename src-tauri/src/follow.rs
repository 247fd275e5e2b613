//! The task that keeps the model current: follows the service's watch stream (reconnecting by
//! itself), folds each input, renders the tray, tells the windows and raises notifications.
//! While nothing changes it sleeps: no polling of the service, and a timer only when something
//! shown depends on time (a running job's elapsed time, a held notification).

use crate::state::Shared;
use crate::{notify, render};
use rm_proto::model::Input;
use rm_proto::{ClientOptions, Follower, UnixMillis};
use std::time::Duration;
use tauri::{AppHandle, Manager};

pub fn spawn(app: AppHandle) {
    tauri::async_runtime::spawn(async move {
        let shared = app.state::<Shared>();
        let mut follower = Follower::new(
            shared.sockets.clone(),
            ClientOptions::named("runner-manager tray"),
        );
        // The first render shows "Connecting…" at once.
        render::all(&app);
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
            let now = UnixMillis::now();
            let notices = shared.model().fold(input, now);
            shared.set_socket(follower.socket().map(ToOwned::to_owned));
            render::all(&app);
            for notice in notices {
                notify::raise(&app, &notice);
            }
        }
    });
}

fn log_input(input: &Input) {
    match input {
        Input::Message(m) => tracing::debug!(message = ?std::mem::discriminant(m), "watch message"),
        Input::Lost(why) => tracing::info!(?why, "not connected to the service"),
        Input::BadLine { detail } => tracing::warn!(%detail, "skipped an unreadable watch line"),
        Input::Tick => {}
    }
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending::<()>().await,
    }
}
