//! Keeps this process's model current for its windows: follows the service's watch stream
//! (reconnecting by itself), folds each input and sends the model to the open windows. The
//! notices the fold decides are the icon process's to raise: dropped here.

use crate::render;
use rm_proto::client::sleep_or_forever;
use rm_proto::model::Input;
use rm_proto::{ClientOptions, Follower, UnixMillis, WatchMessage};
use rm_tray::state::Shared;
use std::time::Duration;
use tauri::{AppHandle, Manager};

pub fn spawn(app: AppHandle) {
    tauri::async_runtime::spawn(async move {
        let shared = app.state::<Shared>();
        let mut follower = Follower::new(
            shared.sockets.clone(),
            ClientOptions::named("runner-manager window"),
        );
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
            let connected = matches!(input, Input::Message(WatchMessage::Snapshot { .. }));
            let _ = shared.model().fold(input, UnixMillis::now());
            if connected {
                if let Some(update) = follower.update_status().await {
                    let _ = shared
                        .model()
                        .fold(Input::Update(Box::new(update)), UnixMillis::now());
                }
            }
            shared.set_socket(follower.socket().map(ToOwned::to_owned));
            render::all(&app);
        }
    });
}
