//! `status --watch`: follows the service with the tray's own model ([`rm_proto::model`]) and
//! prints a line whenever what the tray would show changes, and one per notification the tray
//! would raise, until Ctrl-C. It reconnects by itself when the service stops or restarts.

use std::path::PathBuf;

use rm_proto::client::sleep_or_forever;
use rm_proto::model::{Input, Model, ModelOptions, TrayState, View};
use rm_proto::{ClientOptions, Follower, UnixMillis, WatchMessage};

use crate::exit::Failure;

/// What a line is printed for: the view without its ticking elapsed times.
#[derive(PartialEq, Eq)]
struct Fingerprint {
    state: TrayState,
    header_words: String,
    concerns: Vec<String>,
    runners: Vec<(String, String, Option<String>)>,
    update: Option<String>,
}

fn fingerprint(view: &View) -> Fingerprint {
    Fingerprint {
        state: view.state,
        // Digits tick (elapsed times); the words do not.
        header_words: view
            .header
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .collect(),
        concerns: view.concerns.iter().map(|c| c.code.clone()).collect(),
        runners: view
            .runners
            .iter()
            .map(|r| {
                (
                    r.attempt_id.clone(),
                    format!("{:?}", r.state),
                    r.job_name.clone(),
                )
            })
            .collect(),
        // Without its digits: download progress would print a line per step.
        update: update_line(view).map(|u| u.chars().filter(|c| !c.is_ascii_digit()).collect()),
    }
}

/// The updater's state as the tray's menu item words it, with its fix.
fn update_line(view: &View) -> Option<String> {
    let update = view.update.as_ref()?;
    let item = update.menu.as_ref()?;
    Some(match &update.fix {
        Some(fix) => format!("{item} {fix}"),
        None => item.clone(),
    })
}

fn clock() -> String {
    chrono::Local::now().format("%H:%M:%S").to_string()
}

/// Runs until Ctrl-C.
pub fn run(sockets: Vec<PathBuf>) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(follow(sockets));
    Ok(())
}

async fn follow(sockets: Vec<PathBuf>) {
    let mut follower = Follower::new(sockets, ClientOptions::named("runner-manager CLI"));
    let mut model = Model::new(UnixMillis::now(), ModelOptions::default());
    let mut last: Option<Fingerprint> = None;
    loop {
        let wake = model.next_tick(UnixMillis::now()).map(|at| {
            let wait = u64::try_from(at.0 - UnixMillis::now().0).unwrap_or(0);
            std::time::Duration::from_millis(wait)
        });
        let input = tokio::select! {
            input = follower.next() => input,
            () = sleep_or_forever(wake) => Input::Tick,
            _ = tokio::signal::ctrl_c() => return,
        };
        let connected = matches!(input, Input::Message(WatchMessage::Snapshot { .. }));
        let now = UnixMillis::now();
        let mut notices = model.fold(input, now);
        if connected {
            if let Some(update) = follower.update_status().await {
                notices.extend(model.fold(Input::Update(Box::new(update)), UnixMillis::now()));
            }
        }
        let view = model.view(now);
        let print = fingerprint(&view);
        if last.as_ref() != Some(&print) {
            println!("{} {}", clock(), view.summary);
            for concern in view.concerns.iter().skip(1) {
                println!("         also: {} {}", concern.message, concern.fix);
            }
            if let Some(update) = update_line(&view) {
                println!("         update: {update}");
            }
            last = Some(print);
        }
        for n in notices {
            println!("{} notify: {} — {}", clock(), n.title, n.body);
        }
    }
}
