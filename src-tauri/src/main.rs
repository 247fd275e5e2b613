//! runner-manager-tray: the tray icon, its menu, the sign-in and dashboard windows and the
//! notifications of runner-manager. A client of the service's local API only (`rm-proto`):
//! it never holds a GitHub token or a device code (sign-in runs in the service), and it works
//! whether or not the service runs (it says so, and reconnects by itself).
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod actions;
mod args;
mod autostart;
mod commands;
mod dto;
mod first_run;
mod follow;
mod host;
mod notify;
mod relaunch;
mod render;
mod service;
mod state;
mod tray;
mod windows;

use std::process::ExitCode;
use std::sync::Mutex;

use args::{Args, Show};
use rm_proto::model::ModelOptions;
use state::Shared;
use tauri::{Manager, RunEvent};
use windows::Window;

/// This tray's version (the workspace's: the service's when both come from one release).
pub const TRAY_VERSION: &str = env!("CARGO_PKG_VERSION");

fn main() -> ExitCode {
    // GTK's GL (Mesa, ~50 MB resident with its LLVM under software rendering) buys nothing for
    // a tray and two plain pages. Set before any thread starts; a user's own choice wins.
    #[cfg(target_os = "linux")]
    if std::env::var_os("GDK_GL").is_none() {
        std::env::set_var("GDK_GL", "disable");
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // A tray restarted after its binary was replaced starts once the previous one is gone.
    relaunch::wait_for_predecessor();
    // Which file this tray runs from, before anything can replace it.
    let exe = relaunch::Exe::at_start();
    let args = match args::parse(std::env::args_os()) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    match run(args, exe) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: the tray could not start: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args, exe: Option<relaunch::Exe>) -> anyhow::Result<()> {
    use anyhow::Context;
    let sockets = match &args.socket {
        Some(s) => vec![s.clone()],
        None => rm_proto::sockets::default_sockets(),
    };
    let options = ModelOptions {
        notify_finished_jobs: args.notify_finished_jobs,
    };
    let show = args.show;
    let app = tauri::Builder::default()
        // First: a second launch hands over to this one (which shows its dashboard) and exits.
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| {
            tracing::info!("another launch: showing the dashboard");
            windows::show(app, Window::Dashboard, None);
        }))
        .plugin(
            tauri_plugin_autostart::Builder::new()
                .app_name(autostart::APP_NAME)
                .arg(autostart::ARG)
                .build(),
        )
        .plugin(tauri_plugin_notification::init())
        .plugin(tauri_plugin_opener::init())
        .plugin(tauri_plugin_clipboard_manager::init())
        .manage(Shared::new(sockets, options, exe))
        .manage(Mutex::new(tray::Rendered::default()))
        .invoke_handler(tauri::generate_handler![
            commands::model,
            commands::acknowledge,
            commands::start_sign_in,
            commands::cancel_sign_in,
            commands::sign_out,
            commands::add_target,
            commands::update_target,
            commands::remove_target,
            commands::set_paused,
            commands::set_host_capacity,
            commands::apply_update,
            commands::copy_text,
            commands::open_url,
            commands::show_window,
            commands::close_window,
            commands::autostart_enabled,
            commands::set_autostart,
            commands::set_notify_finished_jobs,
        ])
        .setup(move |app| {
            let handle = app.handle().clone();
            match host::missing_tray_host() {
                None => {
                    tray::create(&handle)?;
                    tracing::info!("tray icon registered");
                }
                Some(why) => {
                    tracing::warn!(%why, "no tray host: opening the dashboard instead");
                    handle.state::<Shared>().set_no_tray(Some(why));
                    windows::show(&handle, Window::Dashboard, None);
                }
            }
            follow::spawn(handle.clone());
            match show {
                Some(Show::Dashboard) => windows::show(&handle, Window::Dashboard, None),
                Some(Show::SignIn) => windows::show(&handle, Window::SignIn, None),
                None => {}
            }
            Ok(())
        })
        .build(tauri::generate_context!())
        .context("building the app")?;
    app.run(|_app, event| {
        // Closing the last window keeps the tray running; only Quit (an explicit exit code)
        // ends it.
        if let RunEvent::ExitRequested {
            api, code: None, ..
        } = event
        {
            api.prevent_exit();
        }
    });
    Ok(())
}
